//! `install-stack`: builds the images from the workspace's (already built) binaries, publishes them under one tag
//! (a release), applies virt-operator's manifest and the `KubeVirt` and `CDI` objects onto the cluster
//! `KUBECONFIG` points at, and waits until the operator reports both `Deployed`. Idempotent; run again after a
//! rebuild, it rolls the stack to the new release. Run through `tests/cluster/install-stack`, which builds the
//! binaries first.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kube_test_support::TestCluster;
use stack_support::StackOptions;
use stack_support::operator::{install_with_operator, release_tag};

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
    let installed = match release_tag() {
        Ok(tag) => install_with_operator(&cluster, &options, &tag).await.map(|image| (tag, image)),
        Err(e) => Err(e),
    };
    match installed {
        Ok((tag, image)) => {
            println!("stack installed by {image}: KubeVirt and CDI Deployed at {tag}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("install-stack: {e}");
            ExitCode::FAILURE
        }
    }
}
