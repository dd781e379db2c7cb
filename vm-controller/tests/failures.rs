//! VirtualMachineInstances fail the way upstream's do, on the real test cluster: the failures are caused for real
//! (QEMU killed inside the launcher pod, the launcher pod deleted, broken containerDisk images pushed to the test
//! registry) and the tests read the outcome from the API — the VMI's phase history, its conditions, its events —
//! and from the guest itself (its serial console, `tests/guest/README.md`).
//!
//! * a QEMU that dies under a running guest makes the node agent report `Failed` from libvirt's crashed state, and
//!   the VMI never comes back to `Running`;
//! * a deleted launcher pod fails its VMI (not `Succeeded`), `Ready` turns False and no pod is created again
//!   (upstream never restarts a VMI);
//! * restarting the node agent (the `virt-handler` DaemonSet's pod) leaves the guest running — the same boot,
//!   its uptime still growing — and the restarted agent still shuts the VMI down when it is deleted;
//! * a containerDisk image with no file or two files in `/disk/` fails the VMI with upstream's messages, shown in
//!   the `Synchronized` condition and in a `SyncFailed` event.
//!
//! The tests use the stack already installed on the cluster (`tests/cluster/install-stack`) and check that it is
//! ready; they never redeploy it. `#[ignore]`d like every cluster test; run one at a time with
//! `cargo test -p vm-controller --test failures -- --ignored --test-threads 1`.

use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::process::Command;
use std::time::{Duration, Instant};

use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{
    ConditionStatus, VirtualMachineInstanceConditionType as Type, VirtualMachineInstancePhase as Phase,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube_test_support::{Error, Result, describe, poll_until, registry};
use stack_support::NAMESPACE;
use stack_support::vmi::{MARKER, VmiEnv, condition, handler_ready};

/// The guest's markers (`tests/guest/README.md`).
const TICK: &str = "KUBEVIRT-RS-GUEST-TICK";
const BOOT_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a state must hold to count as kept: several node-agent polls (2 s) and controller reconciles.
const HOLD: Duration = Duration::from_secs(10);
/// The node agent's DaemonSet and its pods' label (`deploy/node-agent.yaml`).
const HANDLER_SELECTOR: &str = "kubevirt.io=virt-handler";
/// Reporting controllers of the events (`vm-controller/src/lib.rs`, `node-agent/src/agent/mod.rs`).
const CONTROLLER_REPORTER: &str = "virtualmachine-controller";
const HANDLER_REPORTER: &str = "virt-handler";

/// The shared VMI helpers, plus this file's own (phase histories, holds, events).
struct Env(VmiEnv);

impl std::ops::Deref for Env {
    type Target = VmiEnv;
    fn deref(&self) -> &VmiEnv {
        &self.0
    }
}

fn err(message: impl Into<String>) -> Error {
    Error::ClusterUp(message.into())
}

/// The already running cluster and stack (nothing is installed or restarted), the guest's containerDisk and a
/// fresh namespace.
async fn setup(prefix: &str) -> Result<Env> {
    Ok(Env(VmiEnv::on_installed_stack(prefix).await?))
}

fn pod_ready(p: &Pod) -> bool {
    p.status.as_ref().and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
        c.iter().any(|c| c.type_ == "Ready" && c.status == "True") && p.metadata.deletion_timestamp.is_none()
    })
}

impl Env {
    /// Boots `name` from the test guest: Running, and the guest's marker on its console. Returns the VMI and
    /// its launcher pod's name.
    async fn boot(&self, name: &str) -> Result<(VirtualMachineInstance, String)> {
        self.create_ephemeral(name, None, |y| y)?;
        let vmi = self.wait_phase(name, Phase::Running, BOOT_TIMEOUT).await?;
        let pod = self.launcher_pod(&vmi).await?.name_any();
        self.wait_console(&pod, MARKER, BOOT_TIMEOUT).await?;
        Ok((vmi, pod))
    }

    /// Waits for a TICK line newer than tick `after` on the console; returns the latest tick.
    async fn wait_tick_after(&self, pod: &str, after: u64, timeout: Duration) -> Result<(Tick, String)> {
        match poll_until(&format!("a TICK after #{after} on the console of {pod}"), timeout, || async {
            let log = self.console(pod);
            last_tick(&log).filter(|t| t.n > after).map(|t| (t, log))
        })
        .await
        {
            Ok(r) => Ok(r),
            Err(e) => Err(err(format!("{e}\n--- console:\n{}", self.console(pod)))),
        }
    }

    /// Polls the VMI every 250 ms, recording each phase it shows, until `until` holds for it; the error carries
    /// the history and the object.
    async fn follow(
        &self,
        name: &str,
        timeout: Duration,
        until: impl Fn(&VirtualMachineInstance) -> bool,
    ) -> Result<(Vec<Phase>, VirtualMachineInstance)> {
        let start = Instant::now();
        let mut phases: Vec<Phase> = Vec::new();
        loop {
            if let Some(v) = self.vmis().get_opt(name).await? {
                let p = v.phase();
                if phases.last() != Some(&p) {
                    phases.push(p);
                }
                if until(&v) {
                    return Ok((phases, v));
                }
            } else if phases.last() != Some(&Phase::Other("<gone>".into())) {
                phases.push(Phase::Other("<gone>".into()));
            }
            if start.elapsed() > timeout {
                return Err(err(format!(
                    "VMI {name}: condition not reached within {timeout:?}; phases {phases:?}\n{}",
                    describe(&self.vmis(), name).await
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Checks every 250 ms for `window` that `keeps` holds for the VMI and its launcher pods.
    async fn holds(
        &self,
        vmi: &VirtualMachineInstance,
        window: Duration,
        what: &str,
        keeps: impl Fn(&VirtualMachineInstance, &[Pod]) -> bool,
    ) -> Result<()> {
        let name = vmi.name_any();
        let start = Instant::now();
        while start.elapsed() < window {
            let now = self.vmis().get(&name).await?;
            let pods = self.launcher_pods(vmi).await?;
            if !keeps(&now, &pods) {
                return Err(err(format!(
                    "VMI {name}: {what} stopped holding after {:?} (phase {:?}, pods {:?})\n{}",
                    start.elapsed(),
                    now.phase(),
                    pods.iter().map(ResourceExt::name_any).collect::<Vec<_>>(),
                    describe(&self.vmis(), &name).await
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Ok(())
    }

    /// The events about `vmi` (by UID).
    async fn events(&self, vmi: &VirtualMachineInstance) -> Result<Vec<Event>> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), self.ns.name());
        let lp = ListParams::default().fields(&format!("involvedObject.uid={}", vmi.uid().unwrap_or_default()));
        Ok(api.list(&lp).await?.items)
    }

    /// Waits until an event about `vmi` satisfies `pred`; the error lists the events there are.
    async fn wait_event(
        &self,
        vmi: &VirtualMachineInstance,
        what: &str,
        pred: impl Fn(&Event) -> bool,
    ) -> Result<Event> {
        let found = poll_until(what, Duration::from_secs(30), || async {
            self.events(vmi).await.ok()?.into_iter().find(|e| pred(e))
        })
        .await;
        match found {
            Ok(e) => Ok(e),
            Err(e) => {
                let list = self.events(vmi).await.unwrap_or_default();
                Err(err(format!("{e}; events of {}:\n{}", vmi.name_any(), show_events(&list))))
            }
        }
    }

    /// Deletes the VMI and waits until it and its pods are gone.
    async fn delete_vmi(&self, name: &str) -> Result<()> {
        self.vmis().delete(name, &DeleteParams::default()).await?;
        self.wait_gone(name, Duration::from_secs(60)).await
    }
}

fn show_events(events: &[Event]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "{} {} [{} {}]: {}",
                e.type_.as_deref().unwrap_or_default(),
                e.reason.as_deref().unwrap_or_default(),
                e.reporting_component.as_deref().unwrap_or_default(),
                e.reporting_instance.as_deref().unwrap_or_default(),
                e.message.as_deref().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_event(e: &Event, type_: &str, reason: &str, reporter: &str) -> bool {
    e.type_.as_deref() == Some(type_)
        && e.reason.as_deref() == Some(reason)
        && e.reporting_component.as_deref() == Some(reporter)
}

/// One `KUBEVIRT-RS-GUEST-TICK <n> uptime=<s>` line.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tick {
    n: u64,
    uptime: f64,
}

/// The console's last complete TICK line.
fn last_tick(log: &str) -> Option<Tick> {
    log.lines().rev().find_map(|line| {
        let rest = &line[line.find(TICK)? + TICK.len()..];
        let mut words = rest.split_whitespace();
        let n = words.next()?.parse().ok()?;
        let uptime = words.next()?.strip_prefix("uptime=")?.parse().ok()?;
        Some(Tick { n, uptime })
    })
}

/// How many times the guest's init printed its first line (once per boot).
fn boots(log: &str) -> usize {
    log.matches(&format!("{MARKER} kernel=")).count()
}

/// Runs `kubectl exec <pod> -c compute -- sh -c <script>` in the test namespace; stdout, or the failure.
fn exec_compute(env: &Env, pod: &str, script: &str) -> Result<String> {
    env.kubectl(&["exec", pod, "-c", "compute", "--", "sh", "-c", script])
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn a_crashed_qemu_fails_the_vmi() -> Result<()> {
    let env = setup("vmi-qemu-crash").await?;
    let name = "vmi-qemu-crash";
    let (vmi, pod) = env.boot(name).await?;

    // QEMU is the launcher's libvirtd's child in the compute container; SIGKILL it (no shutdown, no monitor
    // goodbye: libvirt sees the monitor vanish).
    let pids = exec_compute(&env, &pod, "pidof qemu-system-x86_64")?;
    let pids: Vec<&str> = pids.split_whitespace().collect();
    assert_eq!(pids.len(), 1, "one QEMU runs in {pod}: {pids:?}");
    let killed = Instant::now();
    exec_compute(&env, &pod, "kill -9 $(pidof qemu-system-x86_64)")?;
    poll_until("QEMU to be gone from the compute container", Duration::from_secs(10), || async {
        exec_compute(&env, &pod, "pidof qemu-system-x86_64 || echo none").ok().filter(|o| o.trim() == "none")
    })
    .await?;

    // Failed, straight from Running (the node agent reads libvirt's state), within a minute.
    let (phases, failed) = env.follow(name, Duration::from_secs(60), |v| v.phase().is_final()).await?;
    let took = killed.elapsed();
    assert_eq!(phases, [Phase::Running, Phase::Failed], "phases after the kill");
    assert_eq!(failed.phase(), Phase::Failed);
    eprintln!("{name}: Failed {took:?} after QEMU was killed");
    // The node agent reported the crash (not the controller noticing a dead pod: the launcher still runs).
    let crashed = env
        .wait_event(&vmi, "virt-handler's Stopped event", |e| is_event(e, "Warning", "Stopped", HANDLER_REPORTER))
        .await?;
    assert_eq!(crashed.message.as_deref(), Some("The VirtualMachineInstance crashed."));
    // It stays Failed: never Running again.
    env.holds(&vmi, HOLD, "phase Failed", |v, _| v.phase() == Phase::Failed).await?;
    assert_eq!(condition(&env.vmis().get(name).await?, Type::Ready), Some(ConditionStatus::False));

    env.delete_vmi(name).await?;
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn deleting_the_launcher_pod_fails_the_vmi() -> Result<()> {
    let env = setup("vmi-pod-deleted").await?;
    let name = "vmi-pod-deleted";
    let (vmi, pod) = env.boot(name).await?;

    let deleted = Instant::now();
    env.pods().delete(&pod, &DeleteParams::default()).await?;
    let (phases, failed) = env.follow(name, Duration::from_secs(90), |v| v.phase().is_final()).await?;
    let took = deleted.elapsed();
    assert_eq!(failed.phase(), Phase::Failed, "phases {phases:?}");
    assert!(!phases.contains(&Phase::Succeeded), "never Succeeded: phases {phases:?}");
    eprintln!("{name}: Failed {took:?} after its pod was deleted (phases {phases:?})");

    // The pod goes, no pod comes back, the VMI stays Failed with Ready False.
    let vmis = env.vmis();
    poll_until(&format!("the launcher pod of {name} to be gone"), Duration::from_secs(60), || async {
        env.launcher_pods(&vmi).await.ok().filter(Vec::is_empty).map(drop)
    })
    .await?;
    env.holds(&vmi, HOLD, "Failed without a launcher pod", |v, pods| v.phase() == Phase::Failed && pods.is_empty())
        .await?;
    let now = vmis.get(name).await?;
    assert_eq!(condition(&now, Type::Ready), Some(ConditionStatus::False), "{:?}", now.status);
    let all = env.pods().list(&ListParams::default()).await?;
    assert!(
        all.items.is_empty(),
        "no pod was created again: {:?}",
        all.items.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );

    env.delete_vmi(name).await?;
    env.0.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn a_node_agent_restart_keeps_the_guest_running() -> Result<()> {
    let env = setup("vmi-agent-restart").await?;
    let name = "vmi-agent-restart";
    let (vmi, pod) = env.boot(name).await?;
    let log = env.wait_console(&pod, TICK, BOOT_TIMEOUT).await?;
    let before = last_tick(&log).ok_or_else(|| err(format!("no TICK line parsed from:\n{log}")))?;

    // Restart the node agent: delete its pod, the DaemonSet makes a new one.
    let handlers: Api<Pod> = Api::namespaced(env.client.clone(), NAMESPACE);
    let daemonsets: Api<DaemonSet> = Api::namespaced(env.client.clone(), NAMESPACE);
    let before_restart = handlers.list(&ListParams::default().labels(HANDLER_SELECTOR)).await?.items;
    let old: BTreeSet<String> = before_restart.iter().filter_map(|p| p.uid()).collect();
    let old_names: BTreeSet<String> = before_restart.iter().map(|p| p.name_any()).collect();
    assert!(!old.is_empty(), "a node agent pod runs");
    let restarted = Instant::now();
    env.kubectl_global(&["-n", NAMESPACE, "delete", "pod", "-l", HANDLER_SELECTOR, "--wait=false"])?;
    // Until the old pod is gone and the new one is ready, the VMI stays Running at every look.
    let mut seen = 0usize;
    let new_pod = loop {
        let now = env.vmis().get(name).await?;
        assert_eq!(
            now.phase(),
            Phase::Running,
            "the VMI during the node agent's restart ({:?} in)",
            restarted.elapsed()
        );
        seen += 1;
        let pods = handlers.list(&ListParams::default().labels(HANDLER_SELECTOR)).await?.items;
        let old_left = pods.iter().any(|p| p.uid().is_some_and(|u| old.contains(&u)));
        let fresh = pods.iter().find(|p| p.uid().is_some_and(|u| !old.contains(&u)) && pod_ready(p));
        if let (false, Some(p), Some(())) = (old_left, fresh, handler_ready(&daemonsets).await) {
            break p.name_any();
        }
        assert!(restarted.elapsed() < Duration::from_secs(120), "no ready new node agent pod after 120 s: {pods:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "{name}: node agent {new_pod} ready {:?} after the restart ({seen} looks at the VMI)",
        restarted.elapsed()
    );
    // The new agent looks at the VMI (it reconciles every VMI of its node on start) and keeps it Running.
    env.holds(&vmi, HOLD, "Running and Ready with its pod", |v, pods| {
        v.phase() == Phase::Running && condition(v, Type::Ready) == Some(ConditionStatus::True) && pods.len() == 1
    })
    .await?;

    // The same guest, not rebooted: later ticks, a larger uptime, one boot on the console.
    let (after, log) = env.wait_tick_after(&pod, before.n + 1, Duration::from_secs(30)).await?;
    assert!(after.uptime > before.uptime, "uptime grew: before {before:?}, after {after:?}");
    assert!(after.uptime - before.uptime >= 2.0 * (after.n - before.n) as f64 - 2.0, "{before:?} → {after:?}");
    assert_eq!(boots(&log), 1, "the guest booted once:\n{log}");
    assert_eq!(env.launcher_pod(&vmi).await?.name_any(), pod, "the same launcher pod");

    // The restarted agent still handles deletion: it destroys the domain (grace 0: a normal stop, Succeeded).
    let deleted = Instant::now();
    env.vmis().delete(name, &DeleteParams::default()).await?;
    let (mut phases, mut gone) = (Vec::new(), false);
    while deleted.elapsed() < Duration::from_secs(60) {
        let v = env.vmis().get_opt(name).await?;
        if let Some(p) = v.as_ref().map(|v| v.phase()).filter(|p| phases.last() != Some(p)) {
            phases.push(p);
        }
        let pods = env.launcher_pods(&vmi).await?;
        if v.is_none() && pods.is_empty() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let took = deleted.elapsed();
    assert!(gone, "{name} not gone 60 s after its deletion; phases {phases:?}");
    assert!(phases.contains(&Phase::Succeeded), "the node agent stopped the domain: phases {phases:?}");
    let stopped = env
        .wait_event(&vmi, "virt-handler's Stopped event", |e| is_event(e, "Normal", "Stopped", HANDLER_REPORTER))
        .await?;
    // Reported by a node agent pod started after the restart (normally `new_pod`; a concurrent redeploy of the
    // stack may have replaced that one too), never by the one that was deleted.
    let reporter = stopped.reporting_instance.clone().unwrap_or_default();
    assert!(
        reporter.starts_with("virt-handler-") && !old_names.contains(&reporter),
        "reported by the restarted agent, not by {old_names:?}: {reporter:?}"
    );
    eprintln!("{name}: gone {took:?} after its deletion (phases {phases:?}), stopped by {reporter}");
    env.0.ns.delete().await
}

/// A containerDisk image whose `/disk/` holds `files` (each a few bytes, not a disk), pushed to the test registry;
/// tagged by its recipe. Returns its reference.
fn bad_containerdisk(kind: &str, files: &[&str]) -> Result<String> {
    const SCRIPT: &str = r#"set -euo pipefail
dest=$1; shift
w=$(mktemp -d "${TMPDIR:-/tmp}/kv-bad-disk.XXXXXX")
trap 'rm -rf "$w"' EXIT
umoci init --layout "$w/oci" >/dev/null
umoci new --image "$w/oci:img" >/dev/null
umoci unpack --image "$w/oci:img" "$w/bundle" >/dev/null
mkdir -p "$w/bundle/rootfs/disk"
chmod 0755 "$w/bundle/rootfs/disk"
for f in "$@"; do
  printf 'not a disk image\n' >"$w/bundle/rootfs/disk/$f"
  chmod 0644 "$w/bundle/rootfs/disk/$f"
done
chown -R 107:107 "$w/bundle/rootfs/disk"
umoci repack --image "$w/oci:img" "$w/bundle" >/dev/null
skopeo copy -q --dest-tls-verify=false "oci:$w/oci:img" "docker://$dest"
"#;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (SCRIPT, files).hash(&mut h);
    let dest = format!("{}/kubevirt-rs/bad-containerdisk:{kind}-{:012x}", registry(), h.finish() & 0xffff_ffff_ffff);
    let out = Command::new("bash")
        .args(["-c", SCRIPT, "bad-containerdisk", &dest])
        .args(files)
        .output()
        .map_err(Error::io("bash (building a containerDisk image)"))?;
    if !out.status.success() {
        return Err(err(format!("building {dest}: {}", String::from_utf8_lossy(&out.stderr))));
    }
    Ok(dest)
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn container_disks_with_zero_or_two_files_are_refused() -> Result<()> {
    let env = setup("vmi-bad-disks").await?;
    let empty =
        tokio::task::spawn_blocking(|| bad_containerdisk("empty", &[])).await.map_err(|e| err(e.to_string()))??;
    let two = tokio::task::spawn_blocking(|| bad_containerdisk("two", &["a.qcow2", "b.qcow2"]))
        .await
        .map_err(|e| err(e.to_string()))??;
    let cases = [
        ("vmi-no-disk", empty, "no file found in folder /disk, no disk present"),
        ("vmi-two-disks", two, "more than one file found in folder /disk, only one disk is allowed"),
    ];
    for (name, image, _) in &cases {
        env.create_ephemeral(name, Some(image), |y| y)?;
    }
    for (name, _, upstream) in &cases {
        // The controller fails the VMI from the pod's failed init container (vm-controller/src/vmi/plan.rs,
        // `fail`): phase Failed, `Synchronized` False with reason PodFailed and the container's termination
        // message (status.rs, `terminated_failure`), and a SyncFailed warning with the same text.
        let (phases, vmi) = env.follow(name, Duration::from_secs(120), |v| v.phase().is_final()).await?;
        assert_eq!(vmi.phase(), Phase::Failed, "{name}: phases {phases:?}");
        assert!(
            !phases.iter().any(|p| matches!(p, Phase::Scheduled | Phase::Running)),
            "{name} never got to its domain: phases {phases:?}"
        );
        let want = format!("container volumecontainerdisk-init failed: {upstream}");
        let sync = vmi.status.as_ref().and_then(|s| s.condition(&Type::Synchronized)).cloned().unwrap_or_default();
        assert_eq!(
            (&sync.status, sync.reason.as_deref(), sync.message.as_deref()),
            (&ConditionStatus::False, Some("PodFailed"), Some(want.as_str())),
            "{name}: {:?}",
            vmi.status
        );
        assert_eq!(condition(&vmi, Type::Ready), Some(ConditionStatus::False));
        let event = env
            .wait_event(&vmi, "the controller's SyncFailed warning", |e| {
                is_event(e, "Warning", "SyncFailed", CONTROLLER_REPORTER)
            })
            .await?;
        assert_eq!(event.message.as_deref(), Some(want.as_str()), "{name}");
    }
    for (name, _, _) in &cases {
        env.delete_vmi(name).await?;
    }
    env.0.ns.delete().await
}
