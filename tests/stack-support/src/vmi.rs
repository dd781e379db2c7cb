//! What every VM cluster test does with VMIs: a namespace with the test guest's containerDisk at hand
//! ([`VmiEnv`]), upstream's example manifests, waits for phases, the launcher pod, the guest's serial console
//! (`kubectl logs -c guest-console-log`), the domain XML the launcher's libvirt runs, the guest's HTTP server.

use std::time::Duration;

use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{
    ConditionStatus, VirtualMachineInstanceConditionType as Type, VirtualMachineInstancePhase as Phase,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use kube_test_support::{Error, Result, TestCluster, TestNamespace, poll_object, poll_until};

use crate::{NAMESPACE, guest_containerdisk, local_images, upstream_example};

/// The guest's first serial-console line (`tests/guest/README.md`).
pub const MARKER: &str = "KUBEVIRT-RS-GUEST-UP";
/// The guest's line once its NIC has the masquerade lease.
pub const LEASE: &str = "KUBEVIRT-RS-GUEST-IP eth0 10.0.2.2/24";
/// The guest's line on the ACPI power button.
pub const POWEROFF: &str = "KUBEVIRT-RS-GUEST-POWEROFF";
/// The node agent's DaemonSet (`deploy/node-agent.yaml`).
pub const HANDLER: &str = "virt-handler";

/// A test namespace on a cluster with the stack installed, and the test guest's containerDisk reference.
pub struct VmiEnv {
    /// The cluster.
    pub cluster: TestCluster,
    /// Its client.
    pub client: Client,
    /// The test's namespace (deleted on drop).
    pub ns: TestNamespace,
    /// The guest's containerDisk in the test registry.
    pub image: String,
}

fn err(message: impl Into<String>) -> Error {
    Error::ClusterUp(message.into())
}

/// `Some` when the node agent's DaemonSet is ready on every node it schedules to.
pub async fn handler_ready(daemonsets: &Api<DaemonSet>) -> Option<()> {
    let d = daemonsets.get_opt(HANDLER).await.ok().flatten()?;
    let st = d.status?;
    (st.desired_number_scheduled > 0
        && st.number_ready == st.desired_number_scheduled
        && st.number_unavailable.unwrap_or(0) == 0
        && d.metadata.generation == st.observed_generation)
        .then_some(())
}

/// Waits until the installed KubeVirt half is up: the VMI controller and virt-api available, the node agent ready
/// on every node.
pub async fn stack_ready(client: &Client) -> Result<()> {
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    poll_until("the installed stack (tests/cluster/install-stack) to be ready", Duration::from_secs(120), || async {
        for name in ["virt-controller", "virt-api"] {
            let st = deploys.get_opt(name).await.ok().flatten()?.status?;
            (st.available_replicas.unwrap_or(0) >= 1 && st.unavailable_replicas.unwrap_or(0) == 0).then_some(())?;
        }
        handler_ready(&daemonsets).await
    })
    .await
}

/// The status of the VMI's condition `t`.
pub fn condition(vmi: &VirtualMachineInstance, t: Type) -> Option<ConditionStatus> {
    vmi.status.as_ref()?.condition(&t).map(|c| c.status.clone())
}

/// The VMI's first interface address (`status.interfaces[0].ipAddress`), or empty.
pub fn vmi_ip(vmi: &VirtualMachineInstance) -> String {
    vmi.status
        .as_ref()
        .and_then(|s| s.interfaces.as_ref())
        .and_then(|i| i.first())
        .and_then(|i| i.ip_address.clone())
        .unwrap_or_default()
}

/// The address of the VMI's interface `name` in `status.interfaces` (a secondary network's, say).
pub fn interface_ip(vmi: &VirtualMachineInstance, name: &str) -> Option<String> {
    let ifaces = vmi.status.as_ref().and_then(|s| s.interfaces.as_ref())?;
    ifaces.iter().find(|i| i.name.as_deref() == Some(name)).and_then(|i| i.ip_address.clone())
}

/// GET `http://<ip>/` from the host (the pod network is reachable from the node), retried for a minute.
pub async fn http_get(ip: &str) -> Result<String> {
    http_get_url(&format!("http://{ip}:80/")).await
}

/// The page at `url`, retried for up to a minute until it answers 2xx.
pub async fn http_get_url(url: &str) -> Result<String> {
    poll_until(&format!("{url} to answer"), Duration::from_secs(60), || async {
        let out = tokio::process::Command::new("curl").args(["-fsS", "--max-time", "3", url]).output().await.ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .await
}

/// The host PIDs of the processes whose command line matches `pattern` (`pgrep -f`; none when pgrep finds
/// none or is missing). The test cluster's containers run on this host, so their processes are here too.
pub fn pgrep(pattern: &str) -> Vec<String> {
    let out = std::process::Command::new("pgrep").args(["-f", pattern]).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_owned).collect()).unwrap_or_default()
}

impl VmiEnv {
    /// `bin` (a virtctl, upstream's or ours) with `args`, pointed at the test cluster and namespace.
    pub fn virtctl_command(&self, bin: &std::path::Path, args: &[&str]) -> std::process::Command {
        let mut c = std::process::Command::new(bin);
        c.arg("--kubeconfig").arg(self.cluster.kubeconfig()).args(["-n", self.ns.name()]).args(args);
        c
    }

    /// One run of [`VmiEnv::virtctl_command`] with no stdin: (exit code, stdout + stderr).
    pub fn virtctl(&self, bin: &std::path::Path, args: &[&str]) -> Result<(i32, String)> {
        let out = self
            .virtctl_command(bin, args)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(Error::io("virtctl"))?;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        Ok((out.status.code().unwrap_or(-1), text))
    }

    /// A fresh namespace named after `prefix` on `cluster` (whose stack must be installed) and the guest's
    /// containerDisk (built and pushed once per process).
    pub async fn new(cluster: TestCluster, prefix: &str) -> Result<VmiEnv> {
        let client = cluster.client().await?;
        let image = tokio::task::spawn_blocking(guest_containerdisk).await.map_err(|e| err(e.to_string()))??;
        let ns = TestNamespace::create(&client, prefix).await?;
        Ok(VmiEnv { cluster, client, ns, image })
    }

    /// [`VmiEnv::new`] on the cluster `KUBECONFIG` names (default: the test cluster's), once its installed stack
    /// is ready ([`stack_ready`]); nothing is installed or restarted.
    pub async fn on_installed_stack(prefix: &str) -> Result<VmiEnv> {
        let kubeconfig = std::env::var_os("KUBECONFIG")
            .map_or_else(|| kube_test_support::cluster_dir().join("admin.kubeconfig"), std::path::PathBuf::from);
        let cluster = TestCluster::from_kubeconfig(kubeconfig);
        stack_ready(&cluster.client().await?).await?;
        VmiEnv::new(cluster, prefix).await
    }

    /// The namespace's VMIs.
    pub fn vmis(&self) -> Api<VirtualMachineInstance> {
        Api::namespaced(self.client.clone(), self.ns.name())
    }

    /// The namespace's pods.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), self.ns.name())
    }

    /// `kubectl <verb> -f -` of `yaml` in the namespace: stdout, or the failure's stderr as the error.
    pub fn kubectl_manifest(&self, verb: &str, yaml: &str) -> Result<String> {
        let out = self.cluster.kubectl_with_manifest(&[verb, "-n", self.ns.name()], yaml)?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(err(format!("kubectl {verb}: {}", String::from_utf8_lossy(&out.stderr))))
        }
    }

    /// `kubectl <args>` (no namespace added): stdout, or the failure's stderr as the error.
    pub fn kubectl_global(&self, args: &[&str]) -> Result<String> {
        let out = self.cluster.kubectl(args)?;
        if !out.status.success() {
            return Err(err(format!("kubectl {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr))));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl -n <namespace> <args>`.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let mut full = vec!["-n", self.ns.name()];
        full.extend_from_slice(args);
        self.kubectl_global(&full)
    }

    /// ServiceAccounts `viewer` and `editor` in the namespace, bound to Kubernetes' `view` and `edit` (which the
    /// `kubevirt.io:*` roles aggregate into); returns their kubectl impersonation flags (`--as=…`).
    pub fn viewer_and_editor(&self) -> Result<(String, String)> {
        let ns = self.ns.name();
        let yaml: String = [("viewer", "view"), ("editor", "edit")]
            .iter()
            .map(|(sa, role)| {
                format!(
                    "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: {sa}}}\n---\n\
                     apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: {sa}}}\n\
                     roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {role}}}\n\
                     subjects: [{{kind: ServiceAccount, name: {sa}, namespace: {ns}}}]\n---\n"
                )
            })
            .collect();
        self.kubectl_manifest("apply", &yaml)?;
        let flag = |sa: &str| format!("--as=system:serviceaccount:{ns}:{sa}");
        Ok((flag("viewer"), flag("editor")))
    }

    /// Creates upstream's example `file` with its containerDisk images rewritten to the test guest; returns the
    /// YAML created.
    pub fn apply_example(&self, file: &str) -> Result<String> {
        let yaml = local_images(&upstream_example(file)?, &self.image);
        self.kubectl_manifest("create", &yaml)?;
        Ok(yaml)
    }

    /// Creates upstream's `vmi-ephemeral.yaml` renamed to `name`, its containerDisk `image` (the guest unless
    /// given), with `edit` applied to the YAML.
    pub fn create_ephemeral(&self, name: &str, image: Option<&str>, edit: impl Fn(String) -> String) -> Result<()> {
        let yaml = local_images(&upstream_example("vmi-ephemeral.yaml")?, image.unwrap_or(&self.image))
            .replace("name: vmi-ephemeral", &format!("name: {name}"));
        self.kubectl_manifest("create", &edit(yaml)).map(drop)
    }

    /// Waits until VMI `name` is in phase `want`.
    pub async fn wait_phase(&self, name: &str, want: Phase, timeout: Duration) -> Result<VirtualMachineInstance> {
        poll_object(&self.vmis(), name, timeout, |v: &VirtualMachineInstance| v.phase() == want).await
    }

    /// The VMI's launcher pods (label `kubevirt.io/created-by` = its UID).
    pub async fn launcher_pods(&self, vmi: &VirtualMachineInstance) -> Result<Vec<Pod>> {
        let selector = format!("kubevirt.io/created-by={}", vmi.uid().unwrap_or_default());
        Ok(self.pods().list(&ListParams::default().labels(&selector)).await?.items)
    }

    /// The VMI's launcher pod.
    pub async fn launcher_pod(&self, vmi: &VirtualMachineInstance) -> Result<Pod> {
        self.launcher_pods(vmi)
            .await?
            .into_iter()
            .next()
            .ok_or_else(|| err(format!("no launcher pod for {}", vmi.name_any())))
    }

    /// The guest's serial console so far (empty when it cannot be read).
    pub fn console(&self, pod: &str) -> String {
        self.kubectl(&["logs", pod, "-c", "guest-console-log"]).unwrap_or_default()
    }

    /// Waits until the console of `pod` contains `needle`; returns the console. The error shows the console.
    pub async fn wait_console(&self, pod: &str, needle: &str, timeout: Duration) -> Result<String> {
        let what = format!("{needle} on the serial console of {pod}");
        match poll_until(&what, timeout, || async {
            let log = self.console(pod);
            log.contains(needle).then_some(log)
        })
        .await
        {
            Ok(log) => Ok(log),
            Err(e) => Err(err(format!("{e}\n--- console:\n{}", self.console(pod)))),
        }
    }

    /// Waits until VMI `name` and its launcher pods are gone.
    pub async fn wait_gone(&self, name: &str, timeout: Duration) -> Result<()> {
        poll_until(&format!("VMI {name} and its pods to be gone"), timeout, || async {
            let vmi = self.vmis().get_opt(name).await.ok()?;
            let pods = self.pods().list(&ListParams::default().labels("kubevirt.io=virt-launcher")).await.ok()?;
            (vmi.is_none()
                && pods.items.iter().all(|p| p.labels().get("vm.kubevirt.io/name").map(String::as_str) != Some(name)))
            .then_some(())
        })
        .await
    }

    /// The domain XML the launcher's libvirt runs for VMI `vmi` (read inside `pod` with its own virsh).
    pub fn domain_xml(&self, pod: &str, vmi: &str) -> Result<String> {
        let uri = contracts::kubevirt::launcher::SocketDir::in_pod().libvirt_uri();
        let domain = contracts::kubevirt::launcher::domain_name(self.ns.name(), vmi);
        self.kubectl(&["exec", pod, "-c", "compute", "--", "virsh", "-c", &uri, "dumpxml", &domain])
    }
}
