//! `install-stack`: builds the images from the workspace's (already built) binaries and installs every component
//! of the stack onto the cluster `KUBECONFIG` points at, from `deploy/`, idempotently, and waits until they are
//! ready. Run through `tests/cluster/install-stack`, which builds the binaries first.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kube_test_support::TestCluster;
use stack_support::{StackOptions, deploy_stack};

#[derive(Parser, Debug)]
#[command(name = "install-stack", about = "Installs the CDI and KubeVirt components of this workspace on a cluster")]
struct Args {
    /// Kubeconfig of the cluster.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Run guests with software emulation (`KubeVirt` `developerConfiguration.useEmulation`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    use_emulation: bool,
    /// Binding of the default pod-network interface (`network.defaultNetworkInterface`).
    #[arg(long, default_value = "masquerade")]
    default_network_interface: String,
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let args = Args::parse();
    let cluster = TestCluster::from_kubeconfig(args.kubeconfig);
    let options =
        StackOptions { use_emulation: args.use_emulation, default_network_interface: args.default_network_interface };
    match deploy_stack(&cluster, &options).await {
        Ok(images) => {
            let k = &images.kubevirt;
            println!(
                "stack installed: DataVolume controller {}, importer {}; VMI controller {}, node agent {}, virt-api {}, launcher {}",
                images.cdi.controller, images.cdi.importer, k.controller, k.node_agent, k.virt_api, k.launcher
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("install-stack: {e}");
            ExitCode::FAILURE
        }
    }
}
