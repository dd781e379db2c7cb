//! `node-agent`: thin binary over the library (upstream's virt-handler role, one per node). Reads its settings
//! from flags/environment, serves `/metrics`, `/healthz`, `/readyz` and the node API (port 8186), runs the node's VMI reconciler, and shuts
//! down gracefully on SIGTERM/SIGINT (running guests keep running: they live in their launcher pods).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

use clap::Parser;
use controller_runtime::binary;
use controller_runtime::health;

#[derive(Parser, Debug)]
#[command(name = "node-agent", version, about = "Runs the VMIs of one node through their launcher pods' libvirt")]
struct Args {
    /// This node's name (the downward API's `spec.nodeName`).
    #[arg(long, env = "NODE_NAME")]
    node_name: String,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8185")]
    metrics_addr: SocketAddr,
    /// Address of the node API (console, VNC, pause; mutual TLS with virt-api).
    #[arg(long, env = "NODE_API_ADDR", default_value = "0.0.0.0:8186")]
    node_api_addr: SocketAddr,
    /// Directory of the node API's certificate (`tls.crt`, `tls.key`, `ca.crt`: the mounted Secret
    /// `kubevirt-virt-handler-server-certs`). Unreadable: the agent does not start.
    #[arg(long, env = "NODE_API_TLS_DIR", default_value = contracts::kubevirt::node_api::SERVER_CERT_DIR)]
    node_api_tls_dir: std::path::PathBuf,
    /// Directory of the client certificate the agent presents to other node agents' migration proxies (the mounted
    /// Secret `kubevirt-virt-handler-certs`). Unreadable: outbound migrations fail with the reason.
    #[arg(long, env = "MIGRATION_CLIENT_TLS_DIR", default_value = contracts::kubevirt::node_api::CLIENT_CERT_DIR)]
    migration_client_tls_dir: std::path::PathBuf,
    /// This agent's pod IP (the downward API's `status.podIP`): migration targets listen and are published there.
    #[arg(long, env = "POD_IP")]
    pod_ip: Option<std::net::IpAddr>,
}

fn main() -> ExitCode {
    // `enter-pod`: the privileged set-up of a launcher pod (node_agent::pod_setup), before any thread starts.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(node_agent::pod_setup::ENTER_POD) {
        eprintln!("error: {}", node_agent::pod_setup::enter_pod(&argv[2..]));
        return ExitCode::from(1);
    }
    // `hotplug-volume`: a hotplugged volume into or out of a launcher pod (node_agent::volumes), likewise.
    if argv.get(1).map(String::as_str) == Some(node_agent::volumes::HOTPLUG_VOLUME) {
        return match node_agent::volumes::hotplug_volume_main(&argv[2..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(1)
            }
        };
    }
    binary::init_logging("RUST_LOG", "info,kube=warn");
    let args = Args::parse();
    binary::run(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let tls = node_agent::server::tls_config(&args.node_api_tls_dir)?;
    let health::Process { client, metrics, ready, late } =
        health::start("kubevirt_rs_node_agent", args.metrics_addr).await?;
    ready.store(true, Ordering::SeqCst);
    let instance = std::env::var("POD_NAME").ok();
    let client_tls = match node_agent::server::client_tls_config(&args.migration_client_tls_dir) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "no client certificate: outbound live migrations are not possible");
            None
        }
    };
    let migrations =
        std::sync::Arc::new(node_agent::migration::Migrations::new(client_tls, Some(tls.clone()), args.pod_ip));
    node_agent::agent::run(
        client,
        args.node_name,
        node_agent::agent::Telemetry { metrics, late, instance },
        Some((args.node_api_addr, tls)),
        migrations,
        binary::shutdown_signal(),
    )
    .await
}
