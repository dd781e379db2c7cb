//! `vm-controller`: thin binary over the library. Reads settings from flags/environment, serves `/metrics`,
//! `/healthz`, `/readyz`, takes the leader lease, runs the VMI reconciler, and shuts down gracefully on
//! SIGTERM/SIGINT. Losing the lease ends the process (exit 1) so that it restarts as a follower.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use controller_runtime::binary;
use controller_runtime::health;
use controller_runtime::leader::{LeaseSettings, run_as_leader};
use vm_controller::vmi::pod::PodSettings;

#[derive(Parser, Debug)]
#[command(
    name = "vm-controller",
    version,
    about = "Reconciles KubeVirt VirtualMachineInstances into virt-launcher pods"
)]
struct Args {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// The virt-launcher image.
    #[arg(long, env = "LAUNCHER_IMAGE")]
    launcher_image: String,
    /// Pull policy of the launcher image.
    #[arg(long, env = "PULL_POLICY", default_value = "IfNotPresent")]
    pull_policy: String,
    /// Namespace of the leader-election Lease; default: this pod's namespace, else `kubevirt`.
    #[arg(long, env = "KUBEVIRT_NAMESPACE")]
    namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "virt-controller")]
    lease_name: String,
    /// Lease duration in seconds.
    #[arg(long, default_value_t = 15)]
    lease_seconds: u64,
}

fn main() -> ExitCode {
    binary::init_logging("RUST_LOG", "info,kube=warn");
    let args = Args::parse();
    binary::run(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    let namespace = args.namespace.clone().unwrap_or_else(|| binary::pod_namespace("kubevirt"));
    let settings = PodSettings { launcher_image: args.launcher_image, pull_policy: args.pull_policy };
    let health::Process { client, metrics, ready, late } =
        health::start("kubevirt_rs_vm_controller", args.metrics_addr).await?;
    let lease = LeaseSettings {
        name: args.lease_name,
        namespace,
        identity: binary::pod_identity("vm-controller"),
        duration_secs: args.lease_seconds,
        leading: Default::default(),
    };
    late.add(controller_runtime::leader::role_metrics(
        "kubevirt_virt_controller_leading_status",
        "kubevirt_virt_controller_ready_status",
        lease.leading.clone(),
        ready.clone(),
    ));
    let instance = std::env::var("POD_NAME").ok();
    run_as_leader(client.clone(), &lease, ready, |stop| {
        vm_controller::run_controllers(client, settings, metrics, late, instance, stop)
    })
    .await
}
