//! `uploadproxy`: CDI's upload proxy. Environment: `APISERVER_PUBLIC_KEY` (required), `UPLOADPROXY_LISTEN`,
//! `UPLOADPROXY_TLS_CERT_FILE`/`UPLOADPROXY_TLS_KEY_FILE`, `UPLOADSERVER_CLIENT_CERT_FILE`,
//! `UPLOADSERVER_CLIENT_KEY_FILE`, `UPLOADSERVER_CA_BUNDLE_FILE` (see `uploader::proxy::Config`). Uses the
//! in-cluster Kubernetes configuration (or `KUBECONFIG`).

use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("UPLOADPROXY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: tokio runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let r: anyhow::Result<()> = rt.block_on(async {
        let cfg = uploader::proxy::Config::from_env(&std::env::vars().collect())?;
        let client = kube::Client::try_default().await?;
        let running = uploader::proxy::start(cfg, Arc::new(uploader::proxy::KubeCluster::new(client))).await?;
        tracing::info!(addr = %running.addr, "upload proxy listening");
        tokio::select! {
            () = running.wait() => {}
            () = uploader::http::terminated() => tracing::info!("terminated"),
        }
        Ok(())
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
