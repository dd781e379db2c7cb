//! `uploadproxy`: CDI's upload proxy. Environment: `APISERVER_PUBLIC_KEY` (required), `UPLOADPROXY_LISTEN`,
//! `UPLOADPROXY_TLS_CERT_FILE`/`UPLOADPROXY_TLS_KEY_FILE`, `UPLOADSERVER_CLIENT_CERT_FILE`,
//! `UPLOADSERVER_CLIENT_KEY_FILE`, `UPLOADSERVER_CA_BUNDLE_FILE` (see `uploader::proxy::Config`). Uses the
//! in-cluster Kubernetes configuration (or `KUBECONFIG`).

use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    controller_runtime::binary::init_logging("UPLOADPROXY_LOG", "info");
    controller_runtime::binary::run(async {
        let cfg = uploader::proxy::Config::from_env(&std::env::vars().collect())?;
        let client = kube::Client::try_default().await?;
        let running = uploader::proxy::start(cfg, Arc::new(uploader::proxy::KubeCluster::new(client))).await?;
        tracing::info!(addr = %running.addr, "upload proxy listening");
        tokio::select! {
            () = running.wait() => {}
            () = controller_runtime::binary::shutdown_signal() => tracing::info!("terminated"),
        }
        Ok(())
    })
}
