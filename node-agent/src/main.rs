//! `node-agent`: thin binary over the library (upstream's virt-handler role, one per node). Reads its settings
//! from flags/environment, serves `/metrics`, `/healthz`, `/readyz`, runs the node's VMI reconciler, and shuts
//! down gracefully on SIGTERM/SIGINT (running guests keep running: they live in their launcher pods).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Parser;
use controller_runtime::binary;
use controller_runtime::health::{self, Health};
use controller_runtime::metrics::{ReconcileMetrics, Registry, counted_client};

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
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut registry = Registry::with_prefix("kubevirt_rs_node_agent");
    let metrics = ReconcileMetrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    health::serve(args.metrics_addr, Health { metrics: Arc::new(registry), ready: ready.clone() }).await?;
    let client = counted_client(kube::Config::infer().await?, metrics.api_requests.clone())?;
    ready.store(true, Ordering::SeqCst);
    let instance = std::env::var("POD_NAME").ok();
    node_agent::agent::run(client, args.node_name, metrics, instance, binary::shutdown_signal()).await
}
