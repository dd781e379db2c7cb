//! `datavolume-controller`: thin binary over the library. Reads settings from the environment (CDI's names),
//! serves `/metrics`, `/healthz`, `/readyz`, takes the leader lease, runs the reconcilers, and shuts down
//! gracefully on SIGTERM/SIGINT. Losing the lease ends the process (exit 1) so that it restarts as a follower.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use controller_runtime::binary;
use controller_runtime::health;
use controller_runtime::leader::{LeaseSettings, run_as_leader};
use datavolume_controller::context::Settings;

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

fn main() -> ExitCode {
    binary::init_logging("RUST_LOG", "info,kube=warn");
    let args = Args::parse();
    binary::run(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let namespace = args.namespace.clone().unwrap_or_else(|| binary::pod_namespace("cdi"));
    let settings = Settings {
        namespace: namespace.clone(),
        cloner_image: args.cloner_image.clone().unwrap_or_else(|| args.importer_image.clone()),
        importer_image: args.importer_image,
        uploadserver_image: args.uploadserver_image,
        pull_policy: args.pull_policy,
    };
    let health::Process { client, metrics, ready, late } =
        health::start("kubevirt_rs_datavolume_controller", args.metrics_addr).await?;
    let lease = LeaseSettings {
        name: args.lease_name,
        namespace,
        identity: binary::pod_identity("datavolume-controller"),
        duration_secs: args.lease_seconds,
        leading: Default::default(),
    };
    let instance = std::env::var("POD_NAME").ok();
    run_as_leader(client.clone(), &lease, ready, |stop| {
        datavolume_controller::run_controllers(client, settings, metrics, late, instance, stop)
    })
    .await
}
