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
}

fn main() -> ExitCode {
    // `enter-pod`: the privileged set-up of a launcher pod (node_agent::pod_setup), before any thread starts.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(node_agent::pod_setup::ENTER_POD) {
        eprintln!("error: {}", node_agent::pod_setup::enter_pod(&argv[2..]));
        return ExitCode::from(1);
    }
    binary::init_logging("RUST_LOG", "info,kube=warn");
    let args = Args::parse();
    binary::run(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let tls = node_agent::server::tls_config(&args.node_api_tls_dir)?;
    let health::Process { client, metrics, ready } = health::start("kubevirt_rs_node_agent", args.metrics_addr).await?;
    ready.store(true, Ordering::SeqCst);
    let instance = std::env::var("POD_NAME").ok();
    node_agent::agent::run(
        client,
        args.node_name,
        metrics,
        instance,
        Some((args.node_api_addr, tls)),
        binary::shutdown_signal(),
    )
    .await
}
