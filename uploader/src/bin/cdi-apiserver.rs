//! `cdi-apiserver`: the aggregated API server for `upload.cdi.kubevirt.io/v1beta1` `uploadtokenrequests`.
//! Environment: `CDI_NAMESPACE` (default `cdi`: where the signing-key Secret lives), `APISERVER_LISTEN`
//! (default `0.0.0.0:8443`). Uses the in-cluster Kubernetes configuration (or `KUBECONFIG`).

use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    controller_runtime::binary::init_logging("APISERVER_LOG", "info");
    controller_runtime::binary::run(async {
        let ns = std::env::var("CDI_NAMESPACE").ok().filter(|s| !s.is_empty()).unwrap_or_else(|| "cdi".into());
        let listen = std::env::var("APISERVER_LISTEN").unwrap_or_else(|_| "0.0.0.0:8443".into());
        let listen = listen.parse().map_err(|e| anyhow::anyhow!("invalid APISERVER_LISTEN {listen:?}: {e}"))?;
        let client = kube::Client::try_default().await?;
        let auth = uploader::apiserver::RequestHeaderConfig::load(&client).await?;
        let (private, _public) = uploader::apiserver::ensure_signing_key(&client, &ns).await?;
        let authz = Arc::new(uploader::apiserver::SarAuthorizer::new(client));
        let running = uploader::apiserver::start(listen, auth, authz, &private, &ns).await?;
        tracing::info!(addr = %running.addr, "cdi-apiserver listening");
        tokio::select! {
            () = running.wait() => {}
            () = controller_runtime::binary::shutdown_signal() => tracing::info!("terminated"),
        }
        Ok(())
    })
}
