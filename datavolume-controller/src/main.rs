//! `datavolume-controller`: thin binary over the library. Reads settings from the environment (CDI's names),
//! serves `/metrics`, `/healthz`, `/readyz`, takes the leader lease, runs the reconcilers, and shuts down
//! gracefully on SIGTERM/SIGINT. Losing the lease ends the process (exit 1) so that it restarts as a follower.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use datavolume_controller::context::Settings;
use datavolume_controller::{metrics::Metrics, server};
use kube_lease_manager::LeaseManagerBuilder;

#[derive(Parser, Debug)]
#[command(name = "datavolume-controller", version, about = "Reconciles CDI DataVolumes into PVCs and worker pods")]
struct Args {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Importer image (`IMPORTER_IMAGE`).
    #[arg(long, env = "IMPORTER_IMAGE")]
    importer_image: String,
    /// Upload server image (`UPLOADSERVER_IMAGE`).
    #[arg(long, env = "UPLOADSERVER_IMAGE")]
    uploadserver_image: String,
    /// Clone-source image (`CLONER_IMAGE`); default: the importer image, which serves clone sources.
    #[arg(long, env = "CLONER_IMAGE")]
    cloner_image: Option<String>,
    /// Image pull policy of worker pods (`PULL_POLICY`).
    #[arg(long, env = "PULL_POLICY", default_value = "IfNotPresent")]
    pull_policy: String,
    /// Control-plane namespace (`CDI_NAMESPACE`); default: this pod's namespace, else `cdi`.
    #[arg(long, env = "CDI_NAMESPACE")]
    namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "datavolume-controller")]
    lease_name: String,
    /// Lease duration in seconds.
    #[arg(long, default_value_t = 15)]
    lease_seconds: u64,
}

async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn")),
        )
        .init();
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let namespace = args.namespace.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| "cdi".into())
    });
    let settings = Settings {
        namespace: namespace.clone(),
        cloner_image: args.cloner_image.clone().unwrap_or_else(|| args.importer_image.clone()),
        importer_image: args.importer_image,
        uploadserver_image: args.uploadserver_image,
        pull_policy: args.pull_policy,
    };
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(AtomicBool::new(false));
    let health = server::Health { metrics: metrics.clone(), ready: ready.clone() };
    let addr = args.metrics_addr;
    tokio::spawn(async move {
        if let Err(e) = server::serve(addr, health).await {
            tracing::error!(error = %e, "metrics server failed");
        }
    });

    // Count every API request (the benchmark reports requests per DataVolume).
    let config = kube::Config::infer().await?;
    let counter = metrics.api_requests.clone();
    let count = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        counter.inc();
        req
    });
    let client = kube::client::ClientBuilder::try_from(config)?.with_layer(&count).build();
    let identity = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| format!("datavolume-controller-{}", std::process::id()));
    let lease = LeaseManagerBuilder::new(client.clone(), &args.lease_name)
        .with_namespace(&namespace)
        .with_identity(&identity)
        .with_duration(args.lease_seconds)
        .with_grace(args.lease_seconds / 3)
        .build()
        .await?;
    let (mut leading, lease_task) = lease.watch().await;
    ready.store(true, Ordering::Relaxed);
    tracing::info!(%identity, "waiting for the leader lease");
    tokio::select! {
        () = shutdown_signal() => return Ok(()),
        r = leading.wait_for(|l| *l) => { r?; }
    }
    tracing::info!(%identity, "leading");
    let lost = {
        let mut rx = leading.clone();
        async move {
            let _ = rx.wait_for(|l| !*l).await;
        }
    };
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            () = lost => { let _ = lost_tx.send(()); }
        }
    };
    datavolume_controller::run_controllers(client, settings, metrics, stop).await?;
    drop(leading);
    let _ = lease_task.await;
    if lost_rx.await.is_ok() {
        anyhow::bail!("lost the leader lease");
    }
    Ok(())
}
