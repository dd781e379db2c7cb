//! `node-agent`: thin binary over the library (upstream's virt-handler role, one per node). Reads its settings
//! from flags/environment, serves `/metrics`, `/healthz`, `/readyz`, runs the node's VMI reconciler, and shuts
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
}

fn main() -> ExitCode {
    binary::init_logging("RUST_LOG", "info,kube=warn");
    let args = Args::parse();
    binary::run(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let health::Process { client, metrics, ready } = health::start("kubevirt_rs_node_agent", args.metrics_addr).await?;
    ready.store(true, Ordering::SeqCst);
    let instance = std::env::var("POD_NAME").ok();
    node_agent::agent::run(client, args.node_name, metrics, instance, binary::shutdown_signal()).await
}
