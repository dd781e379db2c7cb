//! `virt-api`: the VMI admission webhooks over HTTPS. Configuration from the environment (see
//! `virt_api::settings` for every variable); logs to stderr, filtered by `VIRT_API_LOG` (default `info`).

use std::process::ExitCode;
use std::sync::Arc;

use virt_api::server::{self, Certificate};
use virt_api::settings::Settings;

fn main() -> ExitCode {
    controller_runtime::binary::init_logging("VIRT_API_LOG", "info");
    controller_runtime::binary::run(async {
        let settings = Settings::from_lookup(|name| std::env::var(name).ok())?;
        if let Certificate::SelfSigned(names) = &settings.certificate {
            tracing::warn!(?names, "no VIRT_API_TLS_CERT/VIRT_API_TLS_KEY: serving a self-signed certificate");
        }
        let tls = server::tls_config(&settings.certificate)?;
        // The VM validator reads instancetypes and preferences; without a cluster (development) it cannot.
        let client = match kube::Client::try_default().await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("no Kubernetes client ({e}): VMs naming an instancetype or preference are not expanded");
                None
            }
        };
        let running = server::start(
            settings.listen,
            tls,
            Arc::new(settings.config),
            client,
            controller_runtime::binary::shutdown_signal(),
        )
        .await?;
        tracing::info!(addr = %running.addr, "virt-api listening");
        running.wait().await;
        tracing::info!("terminated");
        Ok(())
    })
}
