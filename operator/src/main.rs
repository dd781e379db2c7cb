//! `virt-operator`: thin binary over the library. Serves `/metrics` `/healthz` `/readyz`, takes the
//! `virt-operator` Lease and runs the KubeVirt and CDI reconcilers; losing the lease ends the process (exit 1).

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use controller_runtime::binary;
use controller_runtime::health;
use controller_runtime::leader::{LeaseSettings, run_as_leader};
use virt_operator::release::{DEFAULT_PULL_POLICY, Release};

#[derive(Parser, Debug)]
#[command(
    name = "virt-operator",
    version,
    about = "Installs, updates and removes KubeVirt and CDI from their custom resources"
)]
struct Args {
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// The operator's own image (`<registry>/virt-operator:<tag>`): the default registry and tag of the components.
    #[arg(long, env = "OPERATOR_IMAGE")]
    operator_image: Option<String>,
    /// Default registry of the components' images (overrides the one of `--operator-image`).
    #[arg(long, env = "IMAGE_REGISTRY")]
    image_registry: Option<String>,
    /// Default tag of the components' images (overrides the one of `--operator-image`).
    #[arg(long, env = "IMAGE_TAG")]
    image_tag: Option<String>,
    /// Namespace of the KubeVirt installation and the Lease; default: this pod's namespace, else `kubevirt`.
    #[arg(long, env = "KUBEVIRT_NAMESPACE")]
    namespace: Option<String>,
    /// Address of the uninstall guards (the `kubevirt-operator-webhook` Service's target).
    #[arg(long, env = "WEBHOOK_ADDR", default_value = "0.0.0.0:8443")]
    webhook_addr: SocketAddr,
    /// Lease duration in seconds (upstream: 15).
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
    let own = args.operator_image.as_deref().and_then(Release::of_operator_image);
    let registry = args.image_registry.or_else(|| own.as_ref().map(|r| r.registry.clone()));
    let tag = args.image_tag.or_else(|| own.as_ref().map(|r| r.tag.clone()));
    let (Some(registry), Some(tag)) = (registry, tag) else {
        anyhow::bail!(
            "no default release: set OPERATOR_IMAGE (<registry>/virt-operator:<tag>) or IMAGE_REGISTRY and IMAGE_TAG"
        );
    };
    let defaults = Release { registry, tag, pull_policy: DEFAULT_PULL_POLICY.into() };
    let health::Process { client, ready, late, .. } =
        health::start("kubevirt_rs_virt_operator", args.metrics_addr).await?;
    virt_operator::webhook::start(client.clone(), &namespace, args.webhook_addr).await?;
    let lease = LeaseSettings {
        name: "virt-operator".into(),
        namespace: namespace.clone(),
        identity: binary::pod_identity("virt-operator"),
        duration_secs: args.lease_seconds,
        leading: Default::default(),
    };
    late.add(controller_runtime::leader::role_metrics(
        "kubevirt_virt_operator_leading_status",
        "kubevirt_virt_operator_ready_status",
        lease.leading.clone(),
        ready.clone(),
    ));
    let settings = virt_operator::Settings { namespace, defaults, instance: std::env::var("POD_NAME").ok() };
    run_as_leader(client.clone(), &lease, ready, |stop| virt_operator::run(client, settings, late, stop)).await
}
