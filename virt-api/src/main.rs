//! `virt-api`: the admission webhooks and the aggregated API `subresources.kubevirt.io` over HTTPS. Configuration
//! from the environment (see `virt_api::settings` for every variable); logs to stderr, filtered by `VIRT_API_LOG`
//! (default `info`).

use std::process::ExitCode;
use std::sync::Arc;

use controller_runtime::aggregated::RequestHeaderConfig;
use virt_api::node::NodeClient;
use virt_api::server::{self, Certificate};
use virt_api::settings::Settings;
use virt_api::subresources::Subresources;

fn main() -> ExitCode {
    controller_runtime::binary::init_logging("VIRT_API_LOG", "info");
    controller_runtime::binary::run(async {
        let settings = Settings::from_lookup(|name| std::env::var(name).ok())?;
        if let Certificate::SelfSigned(names) = &settings.certificate {
            tracing::warn!(?names, "no VIRT_API_TLS_CERT/VIRT_API_TLS_KEY: serving a self-signed certificate");
        }
        // The VM validator reads instancetypes and preferences, and the subresource API needs the cluster's front
        // proxy configuration; without a cluster (development) neither works.
        let client = match kube::Client::try_default().await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("no Kubernetes client ({e}): VMs naming an instancetype or preference are not expanded");
                None
            }
        };
        let config = Arc::new(settings.config);
        let subresources = match &client {
            Some(c) => match RequestHeaderConfig::load(c).await {
                Ok(auth) => {
                    let nodes = NodeClient::load(c.clone(), settings.namespace.clone(), &settings.node_client_dir);
                    let nodes = nodes
                        .inspect_err(|e| {
                            let dir = settings.node_client_dir.display();
                            tracing::error!(
                                "console, VNC and pause are off: no node agent client certificate in {dir}: {e}"
                            );
                        })
                        .ok();
                    Some(Arc::new(Subresources {
                        auth,
                        client: c.clone(),
                        nodes,
                        config: config.clone(),
                        metrics: Arc::default(),
                    }))
                }
                Err(e) => {
                    tracing::error!("the subresource API is off: {e:#}");
                    None
                }
            },
            None => None,
        };
        let tls = server::tls_config(&settings.certificate, subresources.as_ref().map(|s| &s.auth))?;
        let running = server::start(
            settings.listen,
            tls,
            config,
            client,
            subresources,
            controller_runtime::binary::shutdown_signal(),
        )
        .await?;
        tracing::info!(addr = %running.addr, "virt-api listening");
        running.wait().await;
        tracing::info!("terminated");
        Ok(())
    })
}
