//! VirtualMachines on the test cluster (issue 13): upstream's VM manifests (containerDisk images rewritten to the
//! test guest, `tests/guest/`) run by their run strategy through our VM controller, the VMI controller, the node
//! agent and QEMU (TCG). Every start is proven by the guest itself: a new `KUBEVIRT-RS-GUEST-UP` marker on the
//! serial console of a new launcher pod, with its uptime restarting from zero; a guest that must not be restarted
//! is watched for a while to show that no new VMI appears.
//!
//! Start/stop requests are written the way upstream's virt-api writes them (`status.stateChangeRequests` through
//! the status subresource; the subresource API itself is the next issue), run strategy changes with `kubectl patch`.
//!
//! `#[ignore]`d like every cluster test; `scripts/test.sh` runs them (after the VMI tests installed the stack) with
//! `cargo test -p vm-controller --test vm -- --ignored --test-threads=1`.

use std::time::{Duration, Instant};

use crds::cdi::datavolume::{DataVolume, DataVolumePhase};
use crds::kubevirt::vm::{PrintableStatus, VirtualMachineConditionType as VmType};
use crds::kubevirt::vmi::{
    ConditionStatus, VirtualMachineInstanceConditionType as VmiType, VirtualMachineInstancePhase as Phase,
};
use crds::kubevirt::{RunStrategy, VirtualMachine, VirtualMachineInstance};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube_test_support::{Error, Result, cluster_dir, poll_object, poll_until};
use stack_support::vmi::{MARKER, VmiEnv, pgrep, stack_ready};
use stack_support::{local_images, upstream_example};
use vm_controller::vm::plan::firmware_uuid;

const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
/// How long a stopped VM is watched to show that nothing restarts it.
const HOLD: Duration = Duration::from_secs(15);
/// The guest's periodic console line (`tests/guest/README.md`).
const TICK: &str = "KUBEVIRT-RS-GUEST-TICK";
/// The user-data line of upstream's `vm-cirros.yaml`.
const USERDATA: &str = "printed from cloud-init userdata";

fn err(message: impl Into<String>) -> Error {
    Error::ClusterUp(message.into())
}

struct Env(VmiEnv);

impl std::ops::Deref for Env {
    type Target = VmiEnv;
    fn deref(&self) -> &VmiEnv {
        &self.0
    }
}

/// The already running cluster and stack, the guest's containerDisk and a fresh namespace.
async fn setup(prefix: &str) -> Result<Env> {
    Ok(Env(VmiEnv::on_installed_stack(prefix).await?))
}

/// One boot of the guest: its VMI (UID) and launcher pod.
#[derive(Debug, Clone)]
struct Boot {
    uid: String,
    pod: String,
}

impl Env {
    fn vms(&self) -> Api<VirtualMachine> {
        Api::namespaced(self.client.clone(), self.ns.name())
    }

    /// Upstream's `vm-cirros.yaml` named `name` with `strategy`, its images rewritten to the guest.
    fn create_cirros(&self, name: &str, strategy: &str) -> Result<()> {
        let yaml = local_images(&upstream_example("vm-cirros.yaml")?, &self.image)
            .replace("vm-cirros", name)
            .replace("runStrategy: Halted", &format!("runStrategy: {strategy}"));
        self.kubectl_manifest("create", &yaml).map(drop)
    }

    async fn wait_vm(&self, name: &str, what: &str, pred: impl Fn(&VirtualMachine) -> bool) -> Result<VirtualMachine> {
        poll_object(&self.vms(), name, BOOT_TIMEOUT, pred)
            .await
            .map_err(|e| err(format!("VM {name} {what}: {e}\n{}", self.describe_vm(name))))
    }

    async fn wait_printable(&self, name: &str, want: PrintableStatus) -> Result<VirtualMachine> {
        self.wait_vm(name, &format!("to be {want}"), |vm| printable(vm) == Some(want.clone())).await
    }

    fn describe_vm(&self, name: &str) -> String {
        let vm = self.kubectl(&["get", "vm", name, "-o", "yaml"]).unwrap_or_default();
        let vmi = self.kubectl(&["get", "vmi", name, "-o", "yaml"]).unwrap_or_default();
        let events = self.kubectl(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
        format!("--- vm:\n{vm}\n--- vmi:\n{vmi}\n--- events:\n{events}")
    }

    /// Waits for a Running VMI `name` other than `not` and the guest's marker on its (new) console.
    async fn wait_boot(&self, name: &str, not: Option<&Boot>) -> Result<Boot> {
        let other = not.map(|b| b.uid.clone());
        let vmi = poll_object(&self.vmis(), name, BOOT_TIMEOUT, |v: &VirtualMachineInstance| {
            v.phase() == Phase::Running && v.uid() != other && v.metadata.deletion_timestamp.is_none()
        })
        .await
        .map_err(|e| err(format!("a new Running VMI {name}: {e}\n{}", self.describe_vm(name))))?;
        let pod = self.launcher_pod(&vmi).await?.name_any();
        let console = self.wait_console(&pod, MARKER, BOOT_TIMEOUT).await?;
        let uptime = first_uptime(&console).ok_or_else(|| err(format!("no uptime in the marker:\n{console}")))?;
        assert!(uptime < 60.0, "a fresh boot starts from zero uptime: {uptime}");
        Ok(Boot { uid: vmi.uid().unwrap_or_default(), pod })
    }

    /// Waits until the VMI `name` is gone.
    async fn wait_no_vmi(&self, name: &str) -> Result<()> {
        poll_until(&format!("VMI {name} to be gone"), BOOT_TIMEOUT, || async {
            self.vmis().get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await
        .map_err(|e| err(format!("{e}\n{}", self.describe_vm(name))))
    }

    /// Holds for [`HOLD`]: no VMI `name` other than `allowed` appears.
    async fn holds_no_new_vmi(&self, name: &str, allowed: Option<&str>) -> Result<()> {
        let until = Instant::now() + HOLD;
        while Instant::now() < until {
            if let Some(v) = self.vmis().get_opt(name).await?
                && v.uid().as_deref() != allowed
            {
                return Err(err(format!("VMI {name} was started again ({:?})\n{}", v.uid(), self.describe_vm(name))));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }

    fn exec_compute(&self, pod: &str, script: &str) -> Result<String> {
        self.kubectl(&["exec", pod, "-c", "compute", "--", "sh", "-c", script])
    }

    /// Kills QEMU in the launcher pod (the VMI fails).
    fn kill_qemu(&self, boot: &Boot) -> Result<()> {
        self.exec_compute(&boot.pod, "kill -9 $(pidof qemu-system-x86_64)").map(drop)
    }

    /// Presses the guest's ACPI power button from inside the pod until the VMI `boot` ended: the guest powers off
    /// by itself (Succeeded). The guest handles the button once its init started acpid, before its first TICK.
    async fn guest_poweroff(&self, boot: &Boot, vm: &str) -> Result<()> {
        self.wait_console(&boot.pod, TICK, BOOT_TIMEOUT).await?;
        let uri = contracts::kubevirt::launcher::SocketDir::in_pod().libvirt_uri();
        let domain = contracts::kubevirt::launcher::domain_name(self.ns.name(), vm);
        poll_until(&format!("the guest of {vm} to power off"), BOOT_TIMEOUT, || async {
            let vmi = self.vmis().get_opt(vm).await.ok()?;
            if vmi.as_ref().is_none_or(|v| v.uid().as_deref() != Some(boot.uid.as_str()) || v.is_final()) {
                return Some(());
            }
            let _ = self.kubectl(&["exec", &boot.pod, "-c", "compute", "--", "virsh", "-c", &uri, "shutdown", &domain]);
            tokio::time::sleep(Duration::from_secs(4)).await;
            None
        })
        .await
    }

    /// Writes `requests` as the VM's `status.stateChangeRequests` (what upstream's virt-api does for start, stop
    /// and restart).
    async fn request(&self, vm: &str, requests: serde_json::Value) -> Result<()> {
        let patch = serde_json::json!({"status": {"stateChangeRequests": requests}});
        self.vms().patch_status(vm, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    async fn set_strategy(&self, vm: &str, strategy: &str) -> Result<()> {
        let patch = serde_json::json!({"spec": {"runStrategy": strategy}});
        self.vms().patch(vm, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        Ok(())
    }

    async fn delete_vm(&self, name: &str) -> Result<()> {
        self.vms().delete(name, &DeleteParams::default()).await?;
        poll_until(&format!("VM {name} to be gone"), BOOT_TIMEOUT, || async {
            self.vms().get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await
        .map_err(|e| err(format!("{e}\n{}", self.describe_vm(name))))?;
        self.wait_gone(name, BOOT_TIMEOUT).await
    }
}

fn printable(vm: &VirtualMachine) -> Option<PrintableStatus> {
    vm.status.as_ref().and_then(|s| s.printable_status.clone())
}

fn spec_strategy(vm: &VirtualMachine) -> Option<RunStrategy> {
    vm.spec.run_strategy.clone()
}

/// The uptime of the guest's first marker line (`KUBEVIRT-RS-GUEST-UP kernel=… uptime=<s>`).
fn first_uptime(console: &str) -> Option<f64> {
    let line = console.lines().find(|l| l.contains(MARKER))?;
    line.split_whitespace().find_map(|w| w.strip_prefix("uptime="))?.parse().ok()
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn upstream_vm_cirros_runs_by_its_run_strategy_and_always_restarts_the_guest() -> Result<()> {
    let env = setup("vm-cirros").await?;
    env.kubectl_manifest("create", &local_images(&upstream_example("vm-cirros.yaml")?, &env.image))?;
    // Halted: no VMI, STATUS Stopped, READY False in `kubectl get vm`.
    let vm = env.wait_printable("vm-cirros", PrintableStatus::Stopped).await?;
    assert!(vm.finalizers().iter().any(|f| f == "kubevirt.io/virtualMachineControllerFinalize"));
    env.holds_no_new_vmi("vm-cirros", None).await?;
    let table = env.kubectl(&["get", "vm", "vm-cirros"])?;
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "STATUS", "READY"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!((row[0], row[2], row[3]), ("vm-cirros", "Stopped", "False"), "{table}");

    // Always: the VMI gets the VM's name, owner, labels, generation and a stable firmware UUID; the guest boots.
    env.set_strategy("vm-cirros", "Always").await?;
    let first = env.wait_boot("vm-cirros", None).await?;
    let vmi = env.vmis().get("vm-cirros").await?;
    let owner = vmi.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(owner.len(), 1);
    assert_eq!((owner[0].kind.as_str(), owner[0].controller), ("VirtualMachine", Some(true)));
    assert_eq!(Some(&owner[0].uid), vm.metadata.uid.as_ref());
    assert_eq!(vmi.labels().get("kubevirt.io/vm").map(String::as_str), Some("vm-cirros"));
    assert_eq!(vmi.annotations().get("kubevirt.io/vm-generation").map(String::as_str), Some("2"));
    let uuid = vmi.spec.domain.firmware.as_ref().and_then(|f| f.uuid.clone());
    assert_eq!(uuid, Some(firmware_uuid("vm-cirros")));
    env.wait_console(&first.pod, USERDATA, BOOT_TIMEOUT).await?;
    let vm = env
        .wait_vm("vm-cirros", "Running and ready", |vm| {
            printable(vm) == Some(PrintableStatus::Running) && vm.status.as_ref().and_then(|s| s.ready) == Some(true)
        })
        .await?;
    let status = vm.status.clone().unwrap_or_default();
    assert_eq!(status.created, Some(true));
    assert_eq!(status.run_strategy, Some(RunStrategy::Always));
    assert_eq!((status.desired_generation, status.observed_generation), (Some(2), Some(2)));
    assert_eq!(status.condition(&VmType::Ready).map(|c| c.status.clone()), Some(ConditionStatus::True));
    assert!(status.condition(&VmType::from("LiveMigratable")).is_some(), "VMI conditions are mirrored");
    let row = env.kubectl(&["get", "vm", "vm-cirros", "--no-headers"])?;
    assert!(row.split_whitespace().skip(2).eq(["Running", "True"]), "{row}");

    // Always restarts a guest that failed (QEMU killed) and one that shut itself down.
    env.kill_qemu(&first)?;
    let second = env.wait_boot("vm-cirros", Some(&first)).await?;
    env.guest_poweroff(&second, "vm-cirros").await?;
    let third = env.wait_boot("vm-cirros", Some(&second)).await?;
    let vm = env.vms().get("vm-cirros").await?;
    assert_eq!(vm.status.and_then(|s| s.start_failure), None, "guests that ran are not crash-looping");

    // Halted stops it (the VMI is deleted, the guest shut down), and nothing starts it again.
    env.set_strategy("vm-cirros", "Halted").await?;
    env.wait_no_vmi("vm-cirros").await?;
    env.wait_printable("vm-cirros", PrintableStatus::Stopped).await?;
    env.holds_no_new_vmi("vm-cirros", None).await?;
    let _ = third;
    env.delete_vm("vm-cirros").await?;
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn rerun_on_failure_restarts_failures_only_and_keeps_its_strategy_across_stop_and_start() -> Result<()> {
    let env = setup("vm-rerun").await?;
    env.create_cirros("vm-rerun", "RerunOnFailure")?;
    // The first switch to RerunOnFailure starts it.
    let first = env.wait_boot("vm-rerun", None).await?;
    env.kill_qemu(&first)?;
    let second = env.wait_boot("vm-rerun", Some(&first)).await?;
    // A guest that shuts itself down stays down.
    env.guest_poweroff(&second, "vm-rerun").await?;
    env.wait_no_vmi("vm-rerun").await?;
    let vm = env.wait_printable("vm-rerun", PrintableStatus::Stopped).await?;
    env.holds_no_new_vmi("vm-rerun", None).await?;
    assert_eq!(spec_strategy(&vm), Some(RunStrategy::RerunOnFailure));
    // start (a Start request, as `virtctl start` writes it): runs again, the strategy unchanged.
    env.request("vm-rerun", serde_json::json!([{"action": "Start"}])).await?;
    let third = env.wait_boot("vm-rerun", Some(&second)).await?;
    // stop (a Stop for the running VMI): stopped, the strategy unchanged.
    env.request("vm-rerun", serde_json::json!([{"action": "Stop", "uid": third.uid}])).await?;
    env.wait_no_vmi("vm-rerun").await?;
    let vm = env.wait_printable("vm-rerun", PrintableStatus::Stopped).await?;
    assert_eq!(spec_strategy(&vm), Some(RunStrategy::RerunOnFailure), "stop keeps RerunOnFailure");
    // The Stop is consumed once its VMI is gone (the status write that drops it may follow the one that
    // prints Stopped).
    env.wait_vm("vm-rerun", "to have consumed its requests", |v| {
        v.status.as_ref().and_then(|s| s.state_change_requests.as_ref()).is_none_or(Vec::is_empty)
    })
    .await?;
    env.holds_no_new_vmi("vm-rerun", None).await?;
    env.delete_vm("vm-rerun").await?;
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn manual_runs_on_requests_only_and_once_never_restarts() -> Result<()> {
    let env = setup("vm-manual").await?;
    env.create_cirros("vm-manual", "Manual")?;
    env.create_cirros("vm-once", "Once")?;
    // Once starts by itself; Manual waits for a request.
    let once = env.wait_boot("vm-once", None).await?;
    env.wait_printable("vm-manual", PrintableStatus::Stopped).await?;
    env.holds_no_new_vmi("vm-manual", None).await?;
    env.request("vm-manual", serde_json::json!([{"action": "Start"}])).await?;
    let first = env.wait_boot("vm-manual", None).await?;
    // restart = [Stop for the VMI, Start]: a new VMI, a new boot.
    env.request("vm-manual", serde_json::json!([{"action": "Stop", "uid": first.uid}, {"action": "Start"}])).await?;
    let second = env.wait_boot("vm-manual", Some(&first)).await?;
    // A finished Manual VMI is left alone (VM Stopped); a stop of it is a no-op, a start runs it again.
    env.guest_poweroff(&second, "vm-manual").await?;
    env.wait_phase("vm-manual", Phase::Succeeded, BOOT_TIMEOUT).await?;
    let vm = env.wait_printable("vm-manual", PrintableStatus::Stopped).await?;
    assert_eq!(spec_strategy(&vm), Some(RunStrategy::Manual));
    env.holds_no_new_vmi("vm-manual", Some(&second.uid)).await?;
    // Once: a guest that ends is never restarted.
    env.kill_qemu(&once)?;
    env.wait_phase("vm-once", Phase::Failed, BOOT_TIMEOUT).await?;
    env.wait_printable("vm-once", PrintableStatus::Stopped).await?;
    env.holds_no_new_vmi("vm-once", Some(&once.uid)).await?;
    for vm in ["vm-manual", "vm-once"] {
        env.delete_vm(vm).await?;
    }
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn a_vm_whose_vmi_fails_before_running_backs_off() -> Result<()> {
    let env = setup("vm-crashloop").await?;
    env.create_cirros("vm-crashloop", "Always")?;
    // Each launcher pod is deleted as soon as it appears: the VMI fails before it ever ran.
    let pods = env.pods();
    let kill_pods = async {
        loop {
            let list = pods.list(&ListParams::default().labels("vm.kubevirt.io/name=vm-crashloop")).await?;
            for p in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
                let _ = pods
                    .delete(&p.name_any(), &DeleteParams { grace_period_seconds: Some(0), ..Default::default() })
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        #[allow(unreachable_code)]
        Ok::<(), Error>(())
    };
    let watch = async {
        let vm = env
            .wait_vm("vm-crashloop", "to back off", |vm| {
                vm.status.as_ref().and_then(|s| s.start_failure.as_ref()).and_then(|f| f.consecutive_fail_count)
                    == Some(1)
                    && printable(vm) == Some(PrintableStatus::CrashLoopBackOff)
            })
            .await?;
        let failure = vm.status.and_then(|s| s.start_failure).unwrap_or_default();
        let retry = failure.retry_after_timestamp.ok_or_else(|| err("no retryAfterTimestamp"))?;
        // No VMI before retryAfterTimestamp; then the next start, which fails again: two failures.
        let early = retry.0 - k8s_openapi::jiff::SignedDuration::from_secs(2);
        while k8s_openapi::jiff::Timestamp::now() < early {
            if let Some(v) = env.vmis().get_opt("vm-crashloop").await?
                && !v.is_final()
                && v.metadata.deletion_timestamp.is_none()
            {
                return Err(err(format!("a VMI started before retryAfterTimestamp {retry:?}: {:?}", v.uid())));
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        env.wait_vm("vm-crashloop", "to count a second failure", |vm| {
            vm.status.as_ref().and_then(|s| s.start_failure.as_ref()).and_then(|f| f.consecutive_fail_count) == Some(2)
        })
        .await
    };
    let vm = tokio::select! {
        r = kill_pods => { r?; return Err(err("pod killer ended")); }
        r = watch => r?,
    };
    let failure = vm.status.and_then(|s| s.start_failure).unwrap_or_default();
    let retry = failure.retry_after_timestamp.ok_or_else(|| err("no retryAfterTimestamp"))?;
    let wait = retry.0.duration_since(k8s_openapi::jiff::Timestamp::now()).as_secs_f64();
    assert!(wait > 20.0 && wait <= 60.0, "the second back-off is 40-60 s: {wait}");
    // Left alone, it starts after the back-off and runs; a run clears the failures.
    env.wait_boot("vm-crashloop", None).await?;
    env.wait_vm("vm-crashloop", "to forget its failures", |vm| {
        vm.status.as_ref().is_some_and(|s| s.start_failure.is_none()) && printable(vm) == Some(PrintableStatus::Running)
    })
    .await?;
    env.delete_vm("vm-crashloop").await?;
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn upstream_vm_alpine_datavolume_imports_boots_and_needs_a_restart_for_template_changes() -> Result<()> {
    let env = setup("vm-alpine-dv").await?;
    // The test registry is plain HTTP: CDI must be told (the other tests' registries stay listed).
    let registry = kube_test_support::pod_registry();
    let insecure = format!(
        "apiVersion: cdi.kubevirt.io/v1beta1\nkind: CDIConfig\nmetadata: {{name: config}}\nspec:\n  insecureRegistries: [\"{}:19500\", \"{registry}\"]\n",
        kube_test_support::POD_GATEWAY
    );
    kube_test_support::apply_yaml(&env.client, "", &insecure).await?;
    let url = env.image.replace("127.0.0.1", kube_test_support::POD_GATEWAY);
    let yaml = upstream_example("vm-alpine-datavolume.yaml")?
        .replace("docker://registry:5000/kubevirt/alpine-container-disk-demo:devel", &format!("docker://{url}"));
    assert!(yaml.contains(&url), "the registry URL was rewritten");
    env.kubectl_manifest("create", &yaml)?;
    // Halted, yet the DataVolume is created at once, owned by the VM, and imported.
    let vm = env.vms().get("vm-alpine-datavolume").await?;
    let dvs: Api<DataVolume> = Api::namespaced(env.client.clone(), env.ns.name());
    let dv = poll_object(&dvs, "alpine-dv", BOOT_TIMEOUT, |d: &DataVolume| {
        d.status.as_ref().and_then(|s| s.phase) == Some(DataVolumePhase::Succeeded)
    })
    .await?;
    let owner = dv.metadata.owner_references.clone().unwrap_or_default();
    assert_eq!(
        owner.first().map(|o| (o.kind.as_str(), o.uid.as_str())),
        Some(("VirtualMachine", vm.uid().unwrap_or_default().as_str()))
    );
    env.wait_printable("vm-alpine-datavolume", PrintableStatus::Stopped).await?;

    // Start: boots from the imported disk.
    env.set_strategy("vm-alpine-datavolume", "Always").await?;
    let first = env.wait_boot("vm-alpine-datavolume", None).await?;
    let xml = env.domain_xml(&first.pod, "vm-alpine-datavolume")?;
    assert!(xml.contains("vmi-disks/datavolumedisk1/disk.img"), "boots from the DataVolume's claim: {xml}");

    // A template change while running: RestartRequired, not a silent divergence.
    let patch = serde_json::json!({"spec": {"template": {"spec": {"domain": {"memory": {"guest": "160Mi"}}}}}});
    env.vms().patch("vm-alpine-datavolume", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let vm = env
        .wait_vm("vm-alpine-datavolume", "to require a restart", |vm| {
            vm.status
                .as_ref()
                .and_then(|s| s.condition(&VmType::RestartRequired))
                .is_some_and(|c| c.status == ConditionStatus::True)
        })
        .await?;
    let status = vm.status.clone().unwrap_or_default();
    assert_eq!(status.desired_generation, Some(3));
    assert_eq!(status.observed_generation, Some(2));
    let running = env.vmis().get("vm-alpine-datavolume").await?;
    assert_eq!(running.uid().as_deref(), Some(first.uid.as_str()), "the running guest is left alone");
    // The restart applies it and clears the condition; the disk (and DataVolume) are kept.
    env.request("vm-alpine-datavolume", serde_json::json!([{"action": "Stop", "uid": first.uid}, {"action": "Start"}]))
        .await?;
    let second = env.wait_boot("vm-alpine-datavolume", Some(&first)).await?;
    let vmi = env.vmis().get("vm-alpine-datavolume").await?;
    let guest = vmi.spec.domain.memory.as_ref().and_then(|m| m.guest.clone()).map(|q| q.0);
    assert_eq!(guest.as_deref(), Some("160Mi"));
    env.wait_vm("vm-alpine-datavolume", "to drop RestartRequired", |vm| {
        vm.status.as_ref().is_some_and(|s| s.condition(&VmType::RestartRequired).is_none())
    })
    .await?;
    assert_eq!(dvs.get("alpine-dv").await?.uid(), dv.uid(), "the DataVolume is kept across restarts");
    let _ = second;

    // Deleting the VM stops the guest and removes the VMI, the pods, the DataVolume and its claim.
    env.delete_vm("vm-alpine-datavolume").await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(env.client.clone(), env.ns.name());
    poll_until("the DataVolume and its PVC to be garbage-collected", BOOT_TIMEOUT, || async {
        (dvs.get_opt("alpine-dv").await.ok()?.is_none() && pvcs.get_opt("alpine-dv").await.ok()?.is_none())
            .then_some(())
    })
    .await?;
    let left: Vec<Pod> = env.pods().list(&ListParams::default()).await?.items;
    assert!(
        left.iter().all(|p| p.metadata.deletion_timestamp.is_some()),
        "pods left: {:?}",
        left.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn vm_admission_refuses_what_upstream_refuses_and_warns_on_running() -> Result<()> {
    let env = setup("vm-admission").await?;
    let base = local_images(&upstream_example("vm-cirros.yaml")?, &env.image);
    let both = base.replace("runStrategy: Halted", "runStrategy: Halted\n  running: false");
    let e = env.kubectl_manifest("create", &both).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        e.contains("The request is invalid: spec.running: Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"),
        "{e}"
    );
    let neither = base.replace("  runStrategy: Halted\n", "");
    let e = env.kubectl_manifest("create", &neither).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("spec.running: RunStrategy must be specified"), "{e}");
    let receiver = base.replace("runStrategy: Halted", "runStrategy: WaitAsReceiver");
    let e = env.kubectl_manifest("create", &receiver).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("Invalid RunStrategy (WaitAsReceiver)"), "{e}");
    // The template is validated as a VMI, under spec.template.spec.
    let unknown_disk = base.replace("name: cloudinitdisk\n        memory", "name: nosuchvolume\n        memory");
    let e = env.kubectl_manifest("create", &unknown_disk).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("spec.template.spec.domain.devices.disks[1].Name 'nosuchvolume' not found."), "{e}");
    // spec.running is accepted with upstream's warning.
    let legacy = base.replace("runStrategy: Halted", "running: false");
    let out = env.cluster.kubectl_with_manifest(&["create", "-n", env.ns.name()], &legacy)?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Warning: spec.running is deprecated, please use spec.runStrategy instead."), "{stderr}");
    env.wait_printable("vm-cirros", PrintableStatus::Stopped).await?;
    env.delete_vm("vm-cirros").await?;
    // A replica set whose selector does not select its template's labels.
    let rs = local_images(&upstream_example("vmi-replicaset-cirros.yaml")?, &env.image).replace(
        "      kubevirt.io/vmReplicaSet: vmi-replicaset-cirros\n  template",
        "      kubevirt.io/vmReplicaSet: other\n  template",
    );
    assert!(rs.contains("kubevirt.io/vmReplicaSet: other"), "{rs}");
    let e = env.kubectl_manifest("create", &rs).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("The request is invalid: spec.selector: selector does not match labels."), "{e}");
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn upstream_vmi_replicaset_keeps_its_replicas_replaces_failures_and_scales_to_zero() -> Result<()> {
    use crds::kubevirt::VirtualMachineInstanceReplicaSet;
    let env = setup("vmirs").await?;
    let sets: Api<VirtualMachineInstanceReplicaSet> = Api::namespaced(env.client.clone(), env.ns.name());
    let rs_name = "vmi-replicaset-cirros";
    let selector = "kubevirt.io/vmReplicaSet=vmi-replicaset-cirros";
    let members = || async {
        let list = env.vmis().list(&ListParams::default().labels(selector)).await?;
        Ok::<Vec<VirtualMachineInstance>, Error>(
            list.items.into_iter().filter(|v| v.metadata.deletion_timestamp.is_none()).collect(),
        )
    };
    let wait_counts = |replicas: i32, ready: i32| {
        let sets = sets.clone();
        async move {
            poll_object(&sets, rs_name, BOOT_TIMEOUT, |rs: &VirtualMachineInstanceReplicaSet| {
                let s = rs.status.clone().unwrap_or_default();
                s.replicas == Some(replicas) && s.ready_replicas == Some(ready)
            })
            .await
        }
    };
    env.apply_example("vmi-replicaset-cirros.yaml")?;
    let rs = wait_counts(3, 3).await?;
    let status = rs.status.clone().unwrap_or_default();
    assert_eq!(status.label_selector.as_deref(), Some(selector));
    let running = members().await?;
    assert_eq!(running.len(), 3);
    for v in &running {
        let name = v.name_any();
        assert!(name.starts_with(rs_name) && name.len() == rs_name.len() + 5, "{name}");
        let owner = v.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(owner.first().map(|o| o.kind.as_str()), Some("VirtualMachineInstanceReplicaSet"));
        let pod = env.launcher_pod(v).await?.name_any();
        env.wait_console(&pod, MARKER, BOOT_TIMEOUT).await?;
    }
    let table = env.kubectl(&["get", "vmirs", rs_name])?;
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "DESIRED", "CURRENT", "READY", "AGE"], "{table}");

    // A VMI that fails is replaced by a new one (never restarted in place).
    let victim = &running[0];
    let pod = env.launcher_pod(victim).await?.name_any();
    env.kill_qemu(&Boot { uid: victim.uid().unwrap_or_default(), pod })?;
    poll_until("the failed VMI to be replaced", BOOT_TIMEOUT, || async {
        let now = members().await.ok()?;
        (now.len() == 3 && now.iter().all(|v| v.uid() != victim.uid() && v.phase() == Phase::Running)).then_some(())
    })
    .await?;
    wait_counts(3, 3).await?;

    // kubectl scale through the scale subresource: down to 1 (one deleted), paused (no replacement), 0.
    env.kubectl(&["scale", "vmirs", rs_name, "--replicas=1"])?;
    wait_counts(1, 1).await?;
    poll_until("one VMI left", BOOT_TIMEOUT, || async { (members().await.ok()?.len() == 1).then_some(()) }).await?;
    let patch = serde_json::json!({"spec": {"paused": true}});
    sets.patch(rs_name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let paused = poll_object(&sets, rs_name, BOOT_TIMEOUT, |rs: &VirtualMachineInstanceReplicaSet| {
        rs.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
            c.iter().any(|c| c.type_.as_str() == "ReplicaPaused" && c.reason.as_deref() == Some("Paused"))
        })
    })
    .await?;
    assert!(paused.paused());
    env.kubectl(&["scale", "vmirs", rs_name, "--replicas=2"])?;
    tokio::time::sleep(HOLD).await;
    assert_eq!(members().await?.len(), 1, "a paused set does not scale");
    let patch = serde_json::json!({"spec": {"paused": false, "replicas": 0}});
    sets.patch(rs_name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_counts(0, 0).await?;
    poll_until("no VMI and no launcher pod left", BOOT_TIMEOUT, || async {
        let vmis = env.vmis().list(&ListParams::default()).await.ok()?;
        let pods = env.pods().list(&ListParams::default()).await.ok()?;
        (vmis.items.is_empty() && pods.items.is_empty()).then_some(())
    })
    .await?;
    sets.delete(rs_name, &DeleteParams::default()).await?;
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn instancetypes_and_preferences_shape_the_vmi_and_are_captured_at_first_use() -> Result<()> {
    use crds::kubevirt::domain::DiskBus;
    let env = setup("vm-instancetype").await?;
    for f in ["csmall.yaml", "clarge.yaml", "virtio.yaml"] {
        env.kubectl_manifest("apply", &upstream_example(f)?)?;
    }
    let out = env.cluster.kubectl_with_manifest(&["apply"], &upstream_example("cluster-csmall.yaml")?)?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Upstream's VMs also set memory.guest, which the instancetype provides: refused with upstream's message.
    let example = local_images(&upstream_example("vm-cirros-csmall.yaml")?, &env.image)
        .replace("runStrategy: Halted", "runStrategy: Always");
    let e = env.kubectl_manifest("create", &example).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        e.contains("The request is invalid: spec.template.spec.domain.memory.guest: VM field(s) spec.template.spec.domain.memory.guest conflicts with selected instance type"),
        "{e}"
    );
    // Without the conflicting field: the instancetype's vCPU and memory, the preference's disk bus, captured.
    let clean = example.replace("        memory:\n          guest: 128Mi\n", "");
    assert!(!clean.contains("guest: 128Mi"), "{clean}");
    let with_preference = clean.replace(
        "  instancetype:\n    kind: VirtualMachineInstancetype\n    name: csmall\n",
        "  instancetype:\n    kind: VirtualMachineInstancetype\n    name: csmall\n  preference:\n    kind: VirtualMachinePreference\n    name: virtio\n",
    );
    assert!(with_preference.contains("name: virtio"), "{with_preference}");
    env.kubectl_manifest("create", &with_preference)?;
    let first = env.wait_boot("vm-cirros-csmall", None).await?;
    let vmi = env.vmis().get("vm-cirros-csmall").await?;
    let cpu = vmi.spec.domain.cpu.clone().unwrap_or_default();
    assert_eq!((cpu.sockets, cpu.cores, cpu.threads), (Some(1), Some(1), Some(1)));
    assert_eq!(vmi.spec.domain.memory.as_ref().and_then(|m| m.guest.clone()).map(|q| q.0).as_deref(), Some("128Mi"));
    let disks = vmi.spec.domain.devices.disks.clone().unwrap_or_default();
    let containerdisk = disks.iter().find(|d| d.name == "containerdisk").and_then(|d| d.disk.clone());
    assert_eq!(containerdisk.and_then(|d| d.bus), Some(DiskBus::Virtio), "the preference's disk bus");
    let vm = env.vms().get("vm-cirros-csmall").await?;
    let status = vm.status.clone().unwrap_or_default();
    let it = status.instancetype_ref.clone().unwrap_or_default();
    assert_eq!((it.name.as_deref(), it.kind.as_deref()), (Some("csmall"), Some("VirtualMachineInstancetype")));
    let revision = it.controller_revision_ref.map(|r| r.name).unwrap_or_default();
    assert!(revision.starts_with("vm-cirros-csmall-csmall-"), "{revision}");
    assert!(status.preference_ref.and_then(|p| p.controller_revision_ref).is_some());
    env.kubectl(&["get", "controllerrevision", &revision])?;

    // A later edit of the instancetype does not change the VM, not even across a restart.
    let patch = serde_json::json!({"spec": {"memory": {"guest": "192Mi"}}});
    let instancetypes: Api<crds::kubevirt::instancetype::VirtualMachineInstancetype> =
        Api::namespaced(env.client.clone(), env.ns.name());
    instancetypes.patch("csmall", &PatchParams::default(), &Patch::Merge(&patch)).await?;
    env.request("vm-cirros-csmall", serde_json::json!([{"action": "Stop", "uid": first.uid}, {"action": "Start"}]))
        .await?;
    // Always: the Stop deletes the VMI and the strategy recreates it.
    env.wait_boot("vm-cirros-csmall", Some(&first)).await?;
    let vmi = env.vmis().get("vm-cirros-csmall").await?;
    assert_eq!(vmi.spec.domain.memory.as_ref().and_then(|m| m.guest.clone()).map(|q| q.0).as_deref(), Some("128Mi"));

    // `virtctl expand` (upstream's and ours) through the subresource API.
    let upstream =
        tokio::task::spawn_blocking(stack_support::upstream_virtctl).await.map_err(|e| err(e.to_string()))??;
    for bin in [upstream, kube_test_support::workspace_binary("virtctl")?] {
        expand_with(&env, &bin, &example, &with_preference)?;
    }

    // A missing instancetype is refused; a cluster-wide one is captured when the VM is created: deleting it
    // afterwards does not stop the VM from starting with it.
    let cluster = local_images(&upstream_example("vm-cirros-cluster-csmall.yaml")?, &env.image)
        .replace("        memory:\n          guest: 128Mi\n", "");
    let missing = cluster.replace("name: cluster-csmall", "name: no-such-instancetype");
    assert!(missing.contains("no-such-instancetype"));
    let e = env.kubectl_manifest("create", &missing).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        e.contains("spec.instancetype: Failure to find instancetype: virtualmachineclusterinstancetypes.instancetype.kubevirt.io \"no-such-instancetype\" not found"),
        "{e}"
    );
    env.kubectl_manifest("create", &cluster)?;
    env.wait_vm("vm-cirros-cluster-csmall", "to capture its instancetype", |vm| {
        vm.status
            .as_ref()
            .and_then(|s| s.instancetype_ref.as_ref())
            .is_some_and(|r| r.controller_revision_ref.is_some())
    })
    .await?;
    env.kubectl_global(&["delete", "virtualmachineclusterinstancetype", "cluster-csmall"])?;
    env.set_strategy("vm-cirros-cluster-csmall", "Always").await?;
    let clustered = env.wait_boot("vm-cirros-cluster-csmall", None).await?;
    let vmi = env.vmis().get("vm-cirros-cluster-csmall").await?;
    assert_eq!(vmi.spec.domain.memory.as_ref().and_then(|m| m.guest.clone()).map(|q| q.0).as_deref(), Some("128Mi"));
    let _ = clustered;
    env.delete_vm("vm-cirros-cluster-csmall").await?;
    env.delete_vm("vm-cirros-csmall").await?;
    env.0.ns.delete().await
}

/// `virtctl expand` with `bin` on the running `vm-cirros-csmall` (instancetype `csmall`, since edited to 192Mi, and
/// preference `virtio`): the stored VM with its captured instancetype and preference applied (128Mi), the matchers
/// gone; the file `with_preference` with the live ones (192Mi); `example` (memory.guest set) refused as a conflict,
/// a foreign namespace and an unknown VM with upstream's texts.
fn expand_with(env: &Env, bin: &std::path::Path, example: &str, with_preference: &str) -> Result<()> {
    use crds::kubevirt::domain::DiskBus;
    let (code, out) = virtctl(env, bin, &["expand", "--vm", "vm-cirros-csmall", "-o", "json"])?;
    assert_eq!(code, 0, "{out}");
    let expanded: VirtualMachine =
        serde_json::from_str(&out[out.find('{').unwrap_or_default()..]).map_err(|e| err(format!("{e}: {out}")))?;
    assert_eq!((expanded.spec.instancetype.as_ref(), expanded.spec.preference.as_ref()), (None, None), "{out}");
    let status = expanded.status.clone().unwrap_or_default();
    assert_eq!((status.instancetype_ref, status.preference_ref), (None, None), "{out}");
    let template = expanded.spec.template.spec.clone().unwrap_or_default();
    let cpu = template.domain.cpu.clone().unwrap_or_default();
    assert_eq!((cpu.sockets, cpu.cores, cpu.threads), (Some(1), Some(1), Some(1)), "{out}");
    let guest = template.domain.memory.as_ref().and_then(|m| m.guest.clone()).map(|q| q.0);
    assert_eq!(guest.as_deref(), Some("128Mi"), "the captured revision, not the edited instancetype: {out}");
    let disks = template.domain.devices.disks.clone().unwrap_or_default();
    let bus = disks.iter().find(|d| d.name == "containerdisk").and_then(|d| d.disk.clone()).and_then(|d| d.bus);
    assert_eq!(bus, Some(DiskBus::Virtio), "{out}");
    assert!(template.networks.iter().flatten().any(|n| n.name == "default"), "the default pod network: {out}");
    let file = std::env::temp_dir().join(format!("kvrs-expand-{}.yaml", env.ns.name()));
    let file_arg = file.to_string_lossy().into_owned();
    std::fs::write(&file, example).map_err(Error::io("writing the VM file"))?;
    let (code, out) = virtctl(env, bin, &["expand", "--file", &file_arg])?;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("VM field(s) spec.template.spec.domain.memory.guest conflicts with selected instance type"),
        "{out}"
    );
    std::fs::write(&file, with_preference.replacen("metadata:\n", "metadata:\n  namespace: elsewhere\n", 1))
        .map_err(Error::io("writing the VM file"))?;
    let (code, out) = virtctl(env, bin, &["expand", "--file", &file_arg])?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("VM namespace must be empty or {}", env.ns.name())), "{out}");
    std::fs::write(&file, with_preference).map_err(Error::io("writing the VM file"))?;
    let (code, out) = virtctl(env, bin, &["expand", "--file", &file_arg])?;
    assert_eq!(code, 0, "{out}");
    // A VM that is not stored has no captured revision: the instancetype as it is now.
    assert!(out.contains("guest: 192Mi") && !out.contains("instancetype:"), "{out}");
    let _ = std::fs::remove_file(&file);
    let (code, out) = virtctl(env, bin, &["expand", "--vm", "no-such-vm"])?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("virtualmachine.kubevirt.io \"no-such-vm\" not found"), "{out}");
    Ok(())
}

/// Records, every 100 ms until dropped, each VM printableStatus, DataVolume phase and temporary pod seen.
struct Recorder {
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    fn start(env: &Env, vm: &str, dv: &str) -> Recorder {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let (vms, dvs, pods) =
            (env.vms(), Api::<DataVolume>::namespaced(env.client.clone(), env.ns.name()), env.pods());
        let (vm, dv, log) = (vm.to_owned(), dv.to_owned(), seen.clone());
        let task = tokio::spawn(async move {
            loop {
                let mut now = Vec::new();
                if let Ok(Some(v)) = vms.get_opt(&vm).await {
                    now.extend(printable(&v).map(|p| format!("vm:{p}")));
                }
                if let Ok(Some(d)) = dvs.get_opt(&dv).await {
                    now.extend(d.status.and_then(|s| s.phase).map(|p| format!("dv:{}", p.as_str())));
                }
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    now.extend(
                        list.items
                            .iter()
                            .filter(|p| p.annotations().get("kubevirt.io/ephemeral-provisioning").is_some())
                            .map(|p| format!("temporary-pod:{}", p.name_any())),
                    );
                }
                {
                    let mut seen = log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    for s in now {
                        if !seen.contains(&s) {
                            seen.push(s);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Recorder { seen, task }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn a_vm_on_a_wait_for_first_consumer_class_imports_its_qcow2_over_http_and_boots() -> Result<()> {
    let env = setup("vm-wffc-http").await?;
    // The guest's qcow2, served by the import tests' nginx (`tests/infra/import-env.sh`) under /out/.
    let (url, copy) = stack_support::guest_qcow2_url()?;
    // Upstream's vm-alpine-datavolume.yaml: HTTP source, a WaitForFirstConsumer class, started at once.
    let yaml = upstream_example("vm-alpine-datavolume.yaml")?
        .replace("vm-alpine-datavolume", "vm-wffc")
        .replace("storageClassName: local", "storageClassName: local-wffc")
        .replace(
            "registry:\n          url: docker://registry:5000/kubevirt/alpine-container-disk-demo:devel",
            &format!("http:\n          url: \"{url}\""),
        )
        .replace("runStrategy: Halted", "runStrategy: Always");
    assert!(yaml.contains(&url) && yaml.contains("local-wffc"), "the manifest was rewritten:\n{yaml}");
    let recorder = Recorder::start(&env, "vm-wffc", "alpine-dv");
    // The cluster's provisioner is held (SIGSTOP) so that the binding visibly waits: the scheduler has picked the
    // temporary pod's node for the claim and waits for the volume.
    let provisioner = std::fs::read_to_string(cluster_dir().join("local-provisioner.pid"))
        .map_err(Error::io("local-provisioner.pid"))?;
    let held = Frozen::stop(vec![provisioner.trim().to_owned()])?;
    env.kubectl_manifest("create", &yaml)?;
    env.wait_printable("vm-wffc", PrintableStatus::WaitingForVolumeBinding).await?;
    let provisioning = |v: &VirtualMachineInstance| {
        v.status.as_ref().and_then(|s| s.condition(&VmiType::Provisioning)).map(|c| c.reason.clone())
    };
    let vmi = poll_object(&env.vmis(), "vm-wffc", BOOT_TIMEOUT, |v| provisioning(v).is_some()).await?;
    assert_eq!(provisioning(&vmi), Some(Some("WaitForFirstConsumer".into())), "{:?}", vmi.status);
    assert_eq!(vmi.phase(), Phase::Pending);
    drop(held);

    // The DataVolume waits for a consumer; the VMI's temporary pod is that consumer; the import follows; the
    // temporary pod goes; the launcher boots the guest from the imported disk.
    let boot = env.wait_boot("vm-wffc", None).await?;
    let xml = env.domain_xml(&boot.pod, "vm-wffc")?;
    assert!(xml.contains("vmi-disks/datavolumedisk1/disk.img"), "boots from the DataVolume's claim: {xml}");
    let seen = recorder.seen();
    drop(recorder);
    let at = |s: &str| seen.iter().position(|x| x == s).ok_or_else(|| err(format!("never saw {s}: {seen:?}")));
    let (wffc, waiting) = (at("dv:WaitForFirstConsumer")?, at("vm:WaitingForVolumeBinding")?);
    let temporary = seen.iter().position(|x| x.starts_with("temporary-pod:"));
    let temporary = temporary.ok_or_else(|| err(format!("no temporary pod was seen: {seen:?}")))?;
    let (succeeded, running) = (at("dv:Succeeded")?, at("vm:Running")?);
    assert!(wffc < succeeded && waiting < running && temporary < succeeded, "order: {seen:?}");
    let left: Vec<Pod> = env.pods().list(&ListParams::default()).await?.items;
    assert!(
        left.iter().all(|p| p.annotations().get("kubevirt.io/ephemeral-provisioning").is_none()),
        "the temporary pod is gone: {:?}",
        left.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    // The claim was provisioned on the node the launcher runs on (WaitForFirstConsumer's point).
    let pvc = Api::<PersistentVolumeClaim>::namespaced(env.client.clone(), env.ns.name()).get("alpine-dv").await?;
    let selected = pvc.annotations().get("volume.kubernetes.io/selected-node").cloned();
    let launcher = env.pods().get(&boot.pod).await?;
    assert_eq!(selected, launcher.spec.and_then(|s| s.node_name), "claim and launcher on one node");
    let vmi = env.vmis().get("vm-wffc").await?;
    assert_eq!(provisioning(&vmi), None, "Provisioning is cleared once bound");

    env.delete_vm("vm-wffc").await?;
    let _ = std::fs::remove_file(&copy);
    env.0.ns.delete().await
}

/// Host processes stopped with SIGSTOP until dropped (SIGCONT): a node whose kubelet and node agent stopped
/// answering, with its containers (the launcher, QEMU) still running, as on a partitioned or hung node.
struct Frozen(Vec<String>);

impl Frozen {
    fn stop(pids: Vec<String>) -> Result<Frozen> {
        let frozen = Frozen(pids);
        for pid in &frozen.0 {
            let st = std::process::Command::new("kill").args(["-STOP", pid]).status().map_err(Error::io("kill"))?;
            assert!(st.success(), "SIGSTOP {pid}");
        }
        Ok(frozen)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = std::process::Command::new("kill").args(["-CONT", pid]).status();
        }
    }
}

/// The node's Ready condition status (`None`: no condition).
async fn node_ready(client: &kube::Client) -> Option<String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = nodes.list(&ListParams::default()).await.ok()?.items.into_iter().next()?;
    let conditions = node.status?.conditions?;
    conditions.into_iter().find(|c| c.type_ == "Ready").map(|c| c.status)
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn a_vm_deleted_while_its_node_is_lost_does_not_stay_terminating() -> Result<()> {
    let env = setup("vm-node-lost").await?;
    env.create_cirros("vm-lost", "Always")?;
    let boot = env.wait_boot("vm-lost", None).await?;
    let domain = contracts::kubevirt::launcher::domain_name(env.ns.name(), "vm-lost");
    let qemu = format!("guest={domain}");
    assert!(!pgrep(&qemu).is_empty(), "QEMU of {domain} runs on the host");

    // The node is lost: its kubelet and node agent stop answering; QEMU keeps running.
    let kubelet = std::fs::read_to_string(cluster_dir().join("kubelet.pid")).map_err(Error::io("kubelet.pid"))?;
    let agents = pgrep("/usr/local/bin/node-agent");
    assert!(!agents.is_empty(), "the node agent runs on the host");
    let frozen = Frozen::stop([vec![kubelet.trim().to_owned()], agents].concat())?;
    poll_until("the node to be NotReady (node-monitor-grace-period 40 s)", Duration::from_secs(120), || async {
        node_ready(&env.client).await.filter(|s| s != "True").map(drop)
    })
    .await?;

    // Deleting the VM finishes without the node: the pod is force-deleted, VMI and VM go.
    let started = Instant::now();
    env.vms().delete("vm-lost", &DeleteParams::default()).await?;
    poll_until("VM vm-lost to be gone while its node is lost", Duration::from_secs(90), || async {
        (env.vms().get_opt("vm-lost").await.ok()?.is_none() && env.vmis().get_opt("vm-lost").await.ok()?.is_none())
            .then_some(())
    })
    .await
    .map_err(|e| err(format!("{e}\n{}", env.describe_vm("vm-lost"))))?;
    let took = started.elapsed();
    assert!(env.pods().get_opt(&boot.pod).await?.is_none(), "the launcher pod is gone from the API");
    let events = env.kubectl(&["get", "events", "-o", "custom-columns=R:.reason,M:.message", "--no-headers"])?;
    assert!(
        events.lines().any(|l| l.starts_with("SuccessfulDelete") && l.contains("Force-deleted virtual machine pod")),
        "{events}"
    );
    eprintln!("VM deleted {took:?} after the request, its node lost");

    // The node comes back: its kubelet kills what the API no longer has; the stack recovers.
    drop(frozen);
    poll_until("the node to be Ready again", Duration::from_secs(120), || async {
        node_ready(&env.client).await.filter(|s| s == "True").map(drop)
    })
    .await?;
    poll_until("the orphaned QEMU to be killed by the returning kubelet", Duration::from_secs(120), || async {
        pgrep(&qemu).is_empty().then_some(())
    })
    .await?;
    stack_ready(&env.client).await?;
    env.0.ns.delete().await
}

/// Whether `user` may `verb` `group`/`resource` (`resource/subresource`) in `ns`, by a SubjectAccessReview.
async fn allowed(client: &kube::Client, user: &str, verb: &str, group: &str, resource: &str, ns: &str) -> Result<bool> {
    use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec!["system:authenticated".into(), "system:serviceaccounts".into()]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_owned()),
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                subresource,
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&Default::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// One virtctl run: (exit code, stdout + stderr).
fn virtctl(env: &Env, bin: &std::path::Path, args: &[&str]) -> Result<(i32, String)> {
    env.virtctl(bin, args)
}

/// start / restart / stop / dry-run / unknown VM / Manual with `bin` on a fresh Halted VM `vm` (upstream's
/// matrix, output and texts).
async fn lifecycle_with(env: &Env, bin: &std::path::Path, vm: &str) -> Result<()> {
    env.create_cirros(vm, "Halted")?;
    env.wait_printable(vm, PrintableStatus::Stopped).await?;
    let strategy = |v: &VirtualMachine| spec_strategy(v);
    let which = bin.display();

    // start: Halted → Always, the guest boots; a second start is refused.
    let (code, out) = virtctl(env, bin, &["start", vm])?;
    assert_eq!(code, 0, "{which}: {out}");
    assert!(out.contains(&format!("VM {vm} was scheduled to start")), "{which}: {out}");
    let first = env.wait_boot(vm, None).await?;
    assert_eq!(strategy(&env.vms().get(vm).await?), Some(RunStrategy::Always));
    let (code, out) = virtctl(env, bin, &["start", vm])?;
    assert_eq!(code, 1, "{which}: {out}");
    let running = format!(
        "Error starting VirtualMachine Operation cannot be fulfilled on virtualmachine.kubevirt.io \"{vm}\": VM is already running"
    );
    assert!(out.contains(&running), "{which}: {out}");

    // restart: a new guest, the strategy kept.
    let (code, out) = virtctl(env, bin, &["restart", vm])?;
    assert_eq!(code, 0, "{which}: {out}");
    assert!(out.contains(&format!("VM {vm} was scheduled to restart")), "{which}: {out}");
    env.wait_boot(vm, Some(&first)).await?;
    assert_eq!(strategy(&env.vms().get(vm).await?), Some(RunStrategy::Always));

    // stop: Always → Halted (upstream's matrix), the VMI goes; a second stop is refused.
    let (code, out) = virtctl(env, bin, &["stop", vm])?;
    assert_eq!(code, 0, "{which}: {out}");
    assert!(out.contains(&format!("VM {vm} was scheduled to stop")), "{which}: {out}");
    env.wait_no_vmi(vm).await?;
    assert_eq!(strategy(&env.vms().get(vm).await?), Some(RunStrategy::Halted));
    let (code, out) = virtctl(env, bin, &["stop", vm])?;
    assert_eq!(code, 1, "{which}: {out}");
    let not_running = "error stopping VirtualMachine Operation cannot be fulfilled";
    assert!(out.contains(not_running) && out.contains("VM is not running"), "{which}: {out}");

    // --dry-run changes nothing; an unknown VM is a 404 with upstream's text.
    let (code, out) = virtctl(env, bin, &["start", vm, "--dry-run"])?;
    assert_eq!(code, 0, "{which}: {out}");
    let scheduled = format!("VM {vm} was scheduled to start");
    assert!(out.contains("Dry Run execution") && out.contains(&scheduled), "{which}: {out}");
    env.holds_no_new_vmi(vm, None).await?;
    assert_eq!(strategy(&env.vms().get(vm).await?), Some(RunStrategy::Halted));
    let (code, out) = virtctl(env, bin, &["start", "no-such-vm"])?;
    assert_eq!(code, 1, "{which}: {out}");
    assert!(out.contains(r#"virtualmachine.kubevirt.io "no-such-vm" not found"#), "{which}: {out}");
    let (code, out) = virtctl(env, bin, &["stop", vm, "--grace-period", "5"])?;
    assert_ne!(code, 0, "{which}: {out}");
    assert!(out.contains("Must both use --force=true and set --grace-period."), "{which}: {out}");

    // Manual keeps its strategy across start and stop (§10.1).
    env.set_strategy(vm, "Manual").await?;
    let (code, out) = virtctl(env, bin, &["start", vm])?;
    assert_eq!(code, 0, "{which}: {out}");
    env.wait_boot(vm, None).await?;
    let (code, out) = virtctl(env, bin, &["stop", vm])?;
    assert_eq!(code, 0, "{which}: {out}");
    env.wait_no_vmi(vm).await?;
    assert_eq!(strategy(&env.vms().get(vm).await?), Some(RunStrategy::Manual));
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn both_virtctls_start_stop_and_restart_vms_through_the_subresource_api() -> Result<()> {
    let env = setup("vm-virtctl").await?;
    let upstream =
        tokio::task::spawn_blocking(stack_support::upstream_virtctl).await.map_err(|e| err(e.to_string()))??;
    let ours = kube_test_support::workspace_binary("virtctl")?;
    lifecycle_with(&env, &upstream, "vm-upstream").await?;
    lifecycle_with(&env, &ours, "vm-ours").await?;
    env.set_strategy("vm-ours", "Halted").await?;

    // RBAC through the real API server: a namespace viewer may read VMs but not start them; an editor may.
    let ns = env.ns.name().to_owned();
    let (viewer, editor) = env.viewer_and_editor()?;
    let body = std::env::temp_dir().join(format!("kvrs-start-{ns}.json"));
    std::fs::write(&body, "{}").map_err(Error::io("writing the start body"))?;
    let uri = format!("/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachines/vm-ours/start");
    let body_arg = body.to_string_lossy().into_owned();
    // Aggregated roles take a moment to be filled in by the controller manager.
    poll_until("the viewer to read VMs (aggregated kubevirt.io:view)", Duration::from_secs(60), || async {
        env.kubectl(&[viewer.as_str(), "get", "vm", "vm-ours"]).ok()
    })
    .await?;
    let denied = env.cluster.kubectl([viewer.as_str(), "replace", "--raw", &uri, "-f", &body_arg])?;
    let text = String::from_utf8_lossy(&denied.stderr).into_owned();
    assert!(!denied.status.success() && text.contains("Forbidden"), "viewer: {text}");
    poll_until("the editor to start the VM (aggregated kubevirt.io:edit)", Duration::from_secs(60), || async {
        let out = env.cluster.kubectl([editor.as_str(), "replace", "--raw", &uri, "-f", &body_arg]).ok()?;
        out.status.success().then_some(())
    })
    .await?;
    let _ = std::fs::remove_file(&body);
    // What each role may do, as the API server's authorizer answers SubjectAccessReviews (§9.1), and virt-api's
    // own ServiceAccount's least privilege.
    env.kubectl_manifest(
        "apply",
        &format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: admin}}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: admin}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: admin}}\nsubjects: [{{kind: ServiceAccount, name: admin, namespace: {ns}}}]\n"
        ),
    )?;
    let sa = |name: &str| format!("system:serviceaccount:{ns}:{name}");
    let virt_api = "system:serviceaccount:kubevirt:kubevirt-apiserver".to_owned();
    let (sub, kv) = ("subresources.kubevirt.io", "kubevirt.io");
    for (who, verb, group, resource, want) in [
        (sa("viewer"), "get", kv, "virtualmachineinstances", true),
        (sa("viewer"), "get", sub, "virtualmachineinstances/console", false),
        (sa("viewer"), "update", sub, "virtualmachines/stop", false),
        (sa("editor"), "get", sub, "virtualmachineinstances/console", true),
        (sa("editor"), "get", sub, "virtualmachineinstances/vnc", true),
        (sa("editor"), "update", sub, "virtualmachines/stop", true),
        (sa("editor"), "deletecollection", kv, "virtualmachines", false),
        (sa("admin"), "deletecollection", kv, "virtualmachines", true),
        (sa("admin"), "update", sub, "virtualmachines/migrate", false),
        (sa("admin"), "create", kv, "virtualmachineinstancemigrations", false),
        (virt_api.clone(), "delete", "", "pods", false),
        (virt_api.clone(), "create", kv, "virtualmachineinstances", false),
        (virt_api.clone(), "patch", kv, "virtualmachines", true),
    ] {
        let got = allowed(&env.client, &who, verb, group, resource, &ns).await?;
        assert_eq!(got, want, "{who} {verb} {group} {resource}");
    }
    env.wait_boot("vm-ours", None).await?;
    env.delete_vm("vm-ours").await?;
    env.delete_vm("vm-upstream").await?;
    env.0.ns.delete().await
}
