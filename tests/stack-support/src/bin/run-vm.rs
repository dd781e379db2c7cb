//! `run-vm`: runs a VM from a DataVolume-imported disk end to end on the cluster `KUBECONFIG` points at (the stack
//! installed by `tests/cluster/install-stack`): upstream's `vm-alpine-datavolume.yaml` with its source rewritten to
//! the test guest's qcow2 (served by `tests/infra/import-env.sh`'s nginx) and started, the import, the boot, the
//! guest's HTTP server through the pod network; then prints `kubectl get vm,vmi,dv,pods`. Run through
//! `tests/cluster/run-vm`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::VirtualMachineInstancePhase as Phase;
use kube::api::Api;
use kube_test_support::{Error, Result, TestCluster, poll_object};
use stack_support::vmi::{http_get, vmi_ip};
use stack_support::{guest_qcow2_url, upstream_example};

#[derive(Parser, Debug)]
#[command(name = "run-vm", about = "Runs a VM from a DataVolume-imported disk and shows it")]
struct Args {
    /// Kubeconfig of the cluster.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Namespace of the VM.
    #[arg(long, default_value = "default")]
    namespace: String,
}

const NAME: &str = "vm-alpine-datavolume";

async fn run(args: Args) -> Result<String> {
    let cluster = TestCluster::from_kubeconfig(args.kubeconfig);
    let (url, _copy) =
        tokio::task::spawn_blocking(guest_qcow2_url).await.map_err(|e| Error::ClusterUp(e.to_string()))??;
    let yaml = upstream_example("vm-alpine-datavolume.yaml")?
        .replace(
            "registry:\n          url: docker://registry:5000/kubevirt/alpine-container-disk-demo:devel",
            &format!("http:\n          url: \"{url}\""),
        )
        .replace("runStrategy: Halted", "runStrategy: Always");
    let out = cluster.kubectl_with_manifest(&["apply", "-n", &args.namespace], &yaml)?;
    if !out.status.success() {
        return Err(Error::ClusterUp(format!("kubectl apply: {}", String::from_utf8_lossy(&out.stderr))));
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(cluster.client().await?, &args.namespace);
    let vmi =
        poll_object(&vmis, NAME, Duration::from_secs(600), |v: &VirtualMachineInstance| v.phase() == Phase::Running)
            .await?;
    let page = http_get(&vmi_ip(&vmi)).await?;
    let shown = cluster.kubectl(["get", "vm,vmi,dv,pods", "-n", &args.namespace, "-o", "wide"])?;
    Ok(format!(
        "{}\nthe guest answers at http://{}/: {}",
        String::from_utf8_lossy(&shown.stdout),
        vmi_ip(&vmi),
        page.lines().next().unwrap_or("")
    ))
}

#[tokio::main]
async fn main() -> ExitCode {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    match run(Args::parse()).await {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("run-vm: {e}");
            ExitCode::FAILURE
        }
    }
}
