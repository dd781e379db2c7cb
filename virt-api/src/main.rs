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
        let running = server::start(
            settings.listen,
            tls,
            Arc::new(settings.config),
            controller_runtime::binary::shutdown_signal(),
        )
        .await?;
        tracing::info!(addr = %running.addr, "virt-api listening");
        running.wait().await;
        tracing::info!("terminated");
        Ok(())
    })
}
