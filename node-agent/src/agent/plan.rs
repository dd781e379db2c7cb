//! The node agent's decisions for one VMI on its node, pure: what was read ([`Observed`]) → what to do
//! ([`Plan`]). Contract §2.7 step 3–4, §7.3, §7.4:
//!
//! ```text
//! Scheduled ─launcher ready─► define + start ─libvirt says running─► Running ─domain stops─► Succeeded / Failed
//!     │ launcher failed / unresponsive, conversion refused                    │ (phase::phase_for)
//!     └───────────────────────────────► Failed ◄─── pod deleted under it ────┘
//! deleted: ACPI shutdown, destroy once terminationGracePeriodSeconds (counted from the deletion) has passed
//! final: write the launcher's `done` file (it exits; the controller deletes the pod)
//! ```
//!
//! Phase `Running` is only ever set from libvirt's real domain state. The status fields this agent owns: the
//! phase from Scheduled on, `interfaces`, `machine`, conditions `LiveMigratable` and `Paused`, `Synchronized` on
//! its own failures; the rest is the controller's.

use std::collections::BTreeMap;
use std::time::Duration;

use contracts::kubevirt::consts::{reason, reason::not_migratable};
use contracts::kubevirt::launcher::{self, POD_INTERFACE, Prepared};
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::domain::Machine;
use crds::kubevirt::vmi::{
    ConditionStatus, MemoryStatus, VirtualMachineInstanceCondition as Condition,
    VirtualMachineInstanceConditionType as Type, VirtualMachineInstanceNetworkInterface,
    VirtualMachineInstancePhase as Phase, VirtualMachineInstanceStatus, info_source,
};
use crds::quantity::{Format, Quantity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::domain_xml::{Acceleration, ConvertContext, to_domain_xml};
use crate::libvirt::{DomainState, StateReason};
use crate::phase::{Acpi, Launcher, phase_for, phase_without_domain};

/// Event reasons and messages (upstream virt-handler's).
pub mod event {
    /// The domain was defined.
    pub const CREATED: (&str, &str) = ("Created", "VirtualMachineInstance defined.");
    /// The guest runs.
    pub const STARTED: (&str, &str) = ("Started", "VirtualMachineInstance started.");
    /// The ACPI shutdown request was sent.
    pub const SHUTTING_DOWN: (&str, &str) = ("ShuttingDown", "Signaled Graceful Shutdown");
    /// The guest stopped.
    pub const STOPPED: (&str, &str) = ("Stopped", "The VirtualMachineInstance was shut down.");
    /// The guest crashed or failed.
    pub const CRASHED: (&str, &str) = ("Stopped", "The VirtualMachineInstance crashed.");
    /// Syncing the VMI with its domain failed.
    pub const SYNC_FAILED: &str = "SyncFailed";
}

/// `Synchronized` reason of the node agent's failures.
pub const REASON_SYNC_FAILED: &str = "Synchronizing with the Domain failed.";
/// Poll period of a running guest (libvirt events are not used: crash detection latency is this).
pub const RUNNING_POLL: Duration = Duration::from_secs(2);
/// How long after an ACPI power-button press it is pressed again (while the grace period lasts).
pub const ACPI_RESEND: Duration = Duration::from_secs(5);
/// Poll period while the guest is being started or stopped.
pub const BUSY_POLL: Duration = Duration::from_millis(250);

/// What the launcher pod's socket directory says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LauncherView {
    /// The VMI names no launcher pod on this node, or that pod is gone.
    NoPod,
    /// The pod exists; its launcher has not finished preparing.
    Initializing,
    /// Ready: libvirt answers; what it prepared.
    Ready(Prepared),
    /// Preparing failed; the launcher's one-line reason.
    Failed(String),
}

/// The domain as libvirt reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainView {
    /// The launcher's libvirt has no such domain.
    Absent,
    /// The domain exists.
    Present {
        /// Its state.
        state: DomainState,
        /// Why.
        reason: StateReason,
        /// The machine type libvirt runs (the expanded alias, e.g. `pc-q35-7.2`).
        machine: Option<String>,
        /// The guest's memory in bytes (`<currentMemory>`: boot memory plus what virtio-mem plugged in).
        current_memory: Option<u64>,
    },
    /// The launcher's libvirt does not answer (the message says how it failed).
    Unreachable(String),
}

/// This node's part in the VMI's live migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationRole {
    /// None (or not the source of the one going on).
    None,
    /// The guest is migrating away from this node: its domain may pause, stop or vanish as libvirt hands it over,
    /// which says nothing about the VMI's phase.
    Outbound,
    /// The guest migrated away; the target node takes the VMI over.
    MigratedAway,
}

/// Everything the planner looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The VMI.
    pub vmi: &'a VirtualMachineInstance,
    /// This node's part in its live migration.
    pub migration: MigrationRole,
    /// The launcher pod's IP addresses (the first is the pod IP).
    pub pod_ips: Vec<String>,
    /// The IP addresses of the launcher pod's secondary (Multus) interfaces, by pod interface name
    /// ([`network_status_ips`] of its `k8s.v1.cni.cncf.io/network-status`).
    pub secondary_ips: BTreeMap<String, Vec<String>>,
    /// Whether the launcher pod is terminated (its containers exited).
    pub pod_terminated: bool,
    /// The launcher's state.
    pub launcher: LauncherView,
    /// Whether the launcher was asked to stop by the kubelet (its `terminating` file).
    pub terminating: bool,
    /// The domain.
    pub domain: DomainView,
    /// Whether the ACPI shutdown was requested less than [`ACPI_RESEND`] ago (this process's memory).
    pub acpi_sent: bool,
    /// Software emulation (the cluster's `useEmulation`).
    pub use_emulation: bool,
    /// Claims of PVC/DataVolume volumes that are not ReadWriteMany (they make the VMI not live-migratable); read
    /// only when the guest has just started running.
    pub unshared_claims: Vec<String>,
    /// The current time.
    pub now: Time,
}

/// What to do with the domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainOp {
    /// Define this XML and start it.
    DefineAndStart(String),
    /// ACPI power button.
    Shutdown,
    /// Pull the plug.
    Destroy,
}

impl DomainOp {
    /// The operation's name, for logs (without the XML).
    pub fn name(&self) -> &'static str {
        match self {
            DomainOp::DefineAndStart(_) => "define and start",
            DomainOp::Shutdown => "ACPI shutdown",
            DomainOp::Destroy => "destroy",
        }
    }
}

/// The result of planning.
#[derive(Debug, Default)]
pub struct Plan {
    /// The domain operation, if any (before the status update).
    pub domain: Option<DomainOp>,
    /// The new status, when it changed.
    pub status: Option<VirtualMachineInstanceStatus>,
    /// The value of the launcher pod's readiness gate `kubevirt.io/virtual-machine-unpaused`, when known.
    pub unpaused: Option<bool>,
    /// Write the launcher's `done` file (after the status update).
    pub done: bool,
    /// Events `(warning, reason, message)` on the VMI.
    pub events: Vec<(bool, &'static str, String)>,
    /// Look again after this long.
    pub requeue: Option<Duration>,
}

/// The grace period of a deleted VMI: the spec's `terminationGracePeriodSeconds` (default 30). The API server
/// sets `metadata.deletionGracePeriodSeconds` to 0 on every deleted custom resource, so it says nothing here.
pub fn grace_period(vmi: &VirtualMachineInstance) -> Duration {
    let spec = vmi.spec.termination_grace_period_seconds.unwrap_or(crate::domain_xml::DEFAULT_GRACE_PERIOD_SECONDS);
    Duration::from_secs(spec.max(0).unsigned_abs())
}

fn elapsed(since: &Time, now: &Time) -> Duration {
    Duration::from_secs(now.0.as_second().saturating_sub(since.0.as_second()).max(0).unsigned_abs())
}

/// The IP addresses of each interface in a pod's `k8s.v1.cni.cncf.io/network-status` (written by Multus), by
/// interface name; an unreadable annotation gives none.
pub fn network_status_ips(annotation: &str) -> BTreeMap<String, Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Attachment {
        #[serde(default)]
        interface: Option<String>,
        #[serde(default)]
        ips: Vec<String>,
    }
    serde_json::from_str::<Vec<Attachment>>(annotation)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|a| Some((a.interface?, a.ips)))
        .collect()
}

/// `status.interfaces` of a running guest, with the MAC the domain got: the pod-network interface with the pod IP
/// (masquerade and bridge both present the pod IP as the VMI's address), and each secondary (Multus) interface
/// with the address Multus reported for its pod interface (the bridge binding hands that address to the guest).
fn interfaces(o: &Observed<'_>) -> Vec<VirtualMachineInstanceNetworkInterface> {
    let vmi = o.vmi;
    let networks: BTreeMap<&str, &crds::kubevirt::network::Network> =
        vmi.spec.networks.iter().flatten().map(|n| (n.name.as_str(), n)).collect();
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    vmi.spec
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .filter_map(|i| {
            let network = networks.get(i.name.as_str())?;
            let (ips, pod_interface, source) = if network.pod.is_some() {
                (o.pod_ips.clone(), POD_INTERFACE.to_owned(), info_source::DOMAIN.to_owned())
            } else if network.multus.as_ref().is_some_and(|m| m.default != Some(true)) {
                let pod_interface = launcher::secondary_pod_interface(&i.name);
                let ips = o.secondary_ips.get(&pod_interface).cloned().unwrap_or_default();
                (ips, pod_interface, format!("{}, {}", info_source::DOMAIN, info_source::MULTUS_STATUS))
            } else {
                return None;
            };
            Some(VirtualMachineInstanceNetworkInterface {
                name: Some(i.name.clone()),
                ip_address: ips.first().cloned(),
                ip_addresses: (!ips.is_empty()).then_some(ips),
                mac: Some(i.mac_address.clone().unwrap_or_else(|| launcher::derived_mac(&uid, &i.name))),
                pod_interface_name: Some(pod_interface),
                info_source: Some(source),
                queue_count: Some(1),
                link_state: Some("up".to_owned()),
                ..Default::default()
            })
        })
        .collect()
}

/// `LiveMigratable` (contract §3, the rules this slice can check): bridge on the pod network and claims that are
/// not ReadWriteMany make a VMI not migratable.
fn live_migratable(o: &Observed<'_>) -> Condition {
    live_migratable_condition(o.vmi, &o.unshared_claims)
}

/// `LiveMigratable` of `vmi` whose claims `unshared` are not ReadWriteMany (also after a volume hotplug).
pub(crate) fn live_migratable_condition(vmi: &VirtualMachineInstance, unshared: &[String]) -> Condition {
    let pod_networks: Vec<&str> =
        vmi.spec.networks.iter().flatten().filter(|n| n.pod.is_some()).map(|n| n.name.as_str()).collect();
    let bridge_on_pod = vmi
        .spec
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .any(|i| i.bridge.is_some() && pod_networks.contains(&i.name.as_str()));
    if bridge_on_pod {
        return Condition::new(
            Type::LiveMigratable,
            ConditionStatus::False,
            not_migratable::INTERFACE,
            "cannot migrate VMI which does not use masquerade, bridge with kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a migratable plugin to connect to the pod network",
        );
    }
    if let Some(claim) = unshared.first() {
        return Condition::new(
            Type::LiveMigratable,
            ConditionStatus::False,
            not_migratable::DISKS,
            &format!(
                "cannot migrate VMI: PVC {claim} is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
            ),
        );
    }
    Condition { type_: Type::LiveMigratable, status: ConditionStatus::True, ..Default::default() }
}

/// Fails the VMI with `message` (phase `Failed`, `Synchronized` False, a warning event).
fn fail(status: &mut VirtualMachineInstanceStatus, plan: &mut Plan, message: String, now: &Time) {
    status.set_phase(Phase::Failed, now);
    status.set_condition(Condition::new(Type::Synchronized, ConditionStatus::False, REASON_SYNC_FAILED, &message), now);
    plan.events.push((true, event::SYNC_FAILED, message));
}

/// Records what a running domain shows: phase Running, interfaces, machine, the conditions.
fn running(
    o: &Observed<'_>,
    status: &mut VirtualMachineInstanceStatus,
    plan: &mut Plan,
    state: DomainState,
    reason: StateReason,
    machine: Option<&String>,
) {
    let now = &o.now;
    if status.phase.as_ref() != Some(&Phase::Running) {
        plan.events.push((false, event::STARTED.0, event::STARTED.1.to_owned()));
        // Decided once, when the guest starts (the claims are read only then: `Observed::unshared_claims`).
        status.set_condition(live_migratable(o), now);
    }
    status.set_phase(Phase::Running, now);
    status.interfaces = Some(interfaces(o)).filter(|i| !i.is_empty());
    if let Some(m) = machine {
        status.machine = Some(Machine { type_: Some(m.clone()), ..Default::default() });
    }
    if state == DomainState::Paused {
        let why = match reason {
            StateReason::User => reason::PAUSED_BY_USER,
            StateReason::IoError => reason::PAUSED_IO_ERROR,
            StateReason::Migration => reason::PAUSED_BY_MIGRATION_MONITOR,
            _ => "Paused",
        };
        status.set_condition(Condition::new(Type::Paused, ConditionStatus::True, why, "VMI was paused"), now);
        plan.unpaused = Some(false);
    } else {
        status.remove_condition(&Type::Paused);
        plan.unpaused = Some(true);
    }
    if status.condition(&Type::Synchronized).is_some_and(|c| c.reason.as_deref() == Some(REASON_SYNC_FAILED)) {
        status.remove_condition(&Type::Synchronized);
    }
}

/// Plans one reconcile of `o.vmi` on this node.
pub fn plan(o: &Observed<'_>) -> Plan {
    let vmi = o.vmi;
    let now = &o.now;
    let mut plan = Plan::default();
    let old = vmi.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let phase = vmi.phase();
    let deleting = vmi.metadata.deletion_timestamp.as_ref();

    if phase.is_final() {
        // Nothing runs any more; a domain still active (a race with a restart) is stopped.
        if let DomainView::Present {
            state: DomainState::Running | DomainState::Paused | DomainState::Blocked, ..
        } = o.domain
        {
            plan.domain = Some(DomainOp::Destroy);
        }
        plan.done = !matches!(o.launcher, LauncherView::NoPod);
        return plan;
    }
    if !matches!(phase, Phase::Scheduled | Phase::Running) {
        return plan;
    }
    match o.migration {
        MigrationRole::None => {}
        // The domain's state belongs to the migration now; the source's job reports its result.
        MigrationRole::Outbound => {
            plan.requeue = Some(RUNNING_POLL);
            return plan;
        }
        MigrationRole::MigratedAway => return plan,
    }

    match (&o.launcher, &o.domain) {
        (LauncherView::NoPod, _) => {
            // The controller fails a VMI whose pod is gone; nothing to drive here.
            plan.requeue = Some(RUNNING_POLL);
        }
        (LauncherView::Failed(message), _) => {
            fail(&mut status, &mut plan, format!("virt-launcher failed: {message}"), now);
        }
        (LauncherView::Initializing, _) => plan.requeue = Some(BUSY_POLL),
        (LauncherView::Ready(_), DomainView::Unreachable(message)) => {
            if o.pod_terminated {
                if let Some(p) = phase_without_domain(&phase, Launcher::Unresponsive) {
                    if p == Phase::Failed {
                        fail(&mut status, &mut plan, format!("virt-launcher is unresponsive: {message}"), now);
                    } else {
                        status.set_phase(p, now);
                    }
                }
            } else {
                plan.requeue = Some(BUSY_POLL);
            }
        }
        (LauncherView::Ready(prepared), DomainView::Absent) => {
            if deleting.is_some() || o.terminating {
                // Stopped before its domain existed.
                fail(&mut status, &mut plan, "the VMI was stopped before its domain was started".into(), now);
            } else if phase == Phase::Scheduled {
                let acceleration = if o.use_emulation { Acceleration::Emulation } else { Acceleration::Kvm };
                let xml =
                    ConvertContext::from_prepared(acceleration, prepared, vmi).and_then(|c| to_domain_xml(vmi, &c));
                match xml {
                    Ok(xml) => {
                        plan.domain = Some(DomainOp::DefineAndStart(xml));
                        plan.events.push((false, event::CREATED.0, event::CREATED.1.to_owned()));
                        plan.requeue = Some(Duration::ZERO);
                    }
                    Err(e) => fail(&mut status, &mut plan, e.to_string(), now),
                }
            } else if let Some(p) = phase_without_domain(&phase, Launcher::Responsive) {
                if p == Phase::Failed {
                    fail(&mut status, &mut plan, "the domain vanished from the launcher's libvirt".into(), now);
                } else {
                    status.set_phase(p, now);
                }
            }
        }
        (LauncherView::Ready(_), DomainView::Present { state, reason, machine, current_memory }) => {
            let active = matches!(
                state,
                DomainState::Running
                    | DomainState::Paused
                    | DomainState::Blocked
                    | DomainState::PmSuspended
                    | DomainState::ShuttingDown
            );
            let next = phase_for(*state, *reason, Acpi::of(vmi));
            match (deleting, active) {
                (Some(since), true) => {
                    let grace = grace_period(vmi);
                    if grace.is_zero() || elapsed(since, now) >= grace {
                        plan.domain = Some(DomainOp::Destroy);
                    } else if !o.acpi_sent {
                        plan.domain = Some(DomainOp::Shutdown);
                        plan.events.push((false, event::SHUTTING_DOWN.0, event::SHUTTING_DOWN.1.to_owned()));
                    }
                    plan.requeue = Some(BUSY_POLL);
                }
                _ => match next {
                    Some(Phase::Running) => {
                        running(o, &mut status, &mut plan, *state, *reason, machine.as_ref());
                        if let Some(bytes) = current_memory {
                            let q = Quantity::from_value(i64::try_from(*bytes).unwrap_or(i64::MAX), Format::BinarySi);
                            status.memory.get_or_insert_with(MemoryStatus::default).guest_current = Some(q.to_k8s());
                        }
                        plan.requeue = Some(RUNNING_POLL);
                    }
                    Some(p) if p.is_final() => {
                        // Stopped because its pod was deleted under it: a failure, whatever the guest did.
                        let p = if o.terminating && deleting.is_none() { Phase::Failed } else { p };
                        let (r, m) = if p == Phase::Failed { event::CRASHED } else { event::STOPPED };
                        plan.events.push((p == Phase::Failed, r, m.to_owned()));
                        status.set_phase(p, now);
                        plan.unpaused = Some(false);
                    }
                    Some(p) => status.set_phase(p, now),
                    None => plan.requeue = Some(BUSY_POLL),
                },
            }
        }
    }
    if status != old {
        plan.status = Some(status);
    }
    plan
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap_or_else(|e| panic!("{e}")))
    }

    fn vmi(phase: &str, grace: i64) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vmi", "namespace": "ns", "uid": "6a1b0f3e-3c44-4d6e-9d53-0c2a1f4b5e77"},
            "spec": {"domain": {"memory": {"guest": "64Mi"}, "machine": {"type": "q35"},
                "devices": {"disks": [{"name": "cd", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "masquerade": {}}]}},
                "networks": [{"name": "default", "pod": {}}],
                "volumes": [{"name": "cd", "containerDisk": {"image": "guest:1"}}],
                "terminationGracePeriodSeconds": grace},
            "status": {"phase": phase}
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn ready() -> LauncherView {
        LauncherView::Ready(Prepared {
            container_disk_formats: [("cd".to_owned(), "qcow2".to_owned())].into(),
            ..Default::default()
        })
    }

    fn observed(vmi: &VirtualMachineInstance, launcher: LauncherView, domain: DomainView, now: i64) -> Observed<'_> {
        Observed {
            vmi,
            migration: MigrationRole::None,
            pod_ips: vec!["10.244.0.7".into()],
            secondary_ips: BTreeMap::new(),
            pod_terminated: false,
            launcher,
            terminating: false,
            domain,
            acpi_sent: false,
            use_emulation: true,
            unshared_claims: vec![],
            now: t(now),
        }
    }

    fn present(state: DomainState, reason: StateReason) -> DomainView {
        DomainView::Present { state, reason, machine: Some("pc-q35-7.2".into()), current_memory: None }
    }

    fn phase_of(p: &Plan) -> Option<Phase> {
        p.status.as_ref().and_then(|s| s.phase.clone())
    }

    #[test]
    fn a_scheduled_vmi_is_defined_and_started_once_its_launcher_is_ready() {
        let v = vmi("Scheduled", 30);
        let p = plan(&observed(&v, LauncherView::Initializing, DomainView::Absent, 0));
        assert!(p.domain.is_none() && p.status.is_none());
        assert_eq!(p.requeue, Some(BUSY_POLL));
        let p = plan(&observed(&v, ready(), DomainView::Absent, 0));
        let Some(DomainOp::DefineAndStart(xml)) = &p.domain else { panic!("{:?} {:?}", p.domain, p.status) };
        assert!(xml.contains("<domain type='qemu'"), "software emulation: {xml}");
        assert!(p.status.is_none(), "Running comes only from libvirt");
    }

    #[test]
    fn claims_are_files_unless_the_launcher_found_block_devices() {
        let mut v = vmi("Scheduled", 30);
        v.spec.volumes = serde_json::from_value(json!([
            {"name": "cd", "containerDisk": {"image": "guest:1"}},
            {"name": "fs", "persistentVolumeClaim": {"claimName": "a"}},
            {"name": "blk", "dataVolume": {"name": "b"}}
        ]))
        .ok();
        v.spec.domain.devices.disks = serde_json::from_value(json!([
            {"name": "cd", "disk": {"bus": "virtio"}}, {"name": "fs", "disk": {"bus": "virtio"}},
            {"name": "blk", "disk": {"bus": "virtio"}}
        ]))
        .ok();
        let LauncherView::Ready(mut prepared) = ready() else { unreachable!() };
        prepared.block_volumes.insert("blk".into());
        let p = plan(&observed(&v, LauncherView::Ready(prepared), DomainView::Absent, 0));
        let Some(DomainOp::DefineAndStart(xml)) = &p.domain else { panic!("{:?} {:?}", p.domain, p.status) };
        assert!(xml.contains(&launcher::pvc_disk("fs")), "{xml}");
        assert!(xml.contains(&launcher::pvc_device("blk")), "{xml}");
    }

    #[test]
    fn running_comes_from_libvirt_with_interfaces_machine_and_conditions() {
        let v = vmi("Scheduled", 30);
        let p = plan(&observed(&v, ready(), present(DomainState::Running, StateReason::Booted), 0));
        assert_eq!(phase_of(&p), Some(Phase::Running));
        assert_eq!(p.unpaused, Some(true));
        let s = p.status.unwrap_or_default();
        let iface = &s.interfaces.unwrap_or_default()[0];
        assert_eq!(iface.ip_address.as_deref(), Some("10.244.0.7"));
        assert_eq!(iface.name.as_deref(), Some("default"));
        assert_eq!(iface.mac, Some(launcher::derived_mac("6a1b0f3e-3c44-4d6e-9d53-0c2a1f4b5e77", "default")));
        assert_eq!(s.machine.and_then(|m| m.type_).as_deref(), Some("pc-q35-7.2"));
        let lm = s.conditions.unwrap_or_default().into_iter().find(|c| c.type_ == Type::LiveMigratable);
        assert_eq!(lm.map(|c| c.status), Some(ConditionStatus::True));
        assert_eq!(p.events.first().map(|e| e.1), Some("Started"));
    }

    /// Upstream's vmi-multus-multiple-net: the secondary interface reports the address Multus gave its pod
    /// interface (the guest's, through the bridge binding) and its source.
    #[test]
    fn secondary_interfaces_report_multus_addresses() {
        let mut v = vmi("Scheduled", 30);
        v.spec.networks = serde_json::from_value(
            json!([{"name": "default", "pod": {}}, {"name": "ptp", "multus": {"networkName": "ptp-conf"}}]),
        )
        .ok();
        let ifaces = json!([{"name": "default", "masquerade": {}}, {"name": "ptp", "bridge": {}}]);
        v.spec.domain.devices.interfaces = serde_json::from_value(ifaces).ok();
        let status = network_status_ips(
            r#"[{"name":"kvtest","interface":"eth0","ips":["10.244.0.7"],"default":true},
               {"name":"ns/ptp-conf","interface":"pode31d7ce2712","ips":["10.1.1.5"],"mac":"aa:bb:cc:dd:ee:ff"}]"#,
        );
        assert_eq!(status.get("pode31d7ce2712"), Some(&vec!["10.1.1.5".to_owned()]));
        assert!(network_status_ips("not json").is_empty());
        let mut o = observed(&v, ready(), present(DomainState::Running, StateReason::Booted), 0);
        o.secondary_ips = status;
        let s = plan(&o).status.unwrap_or_default();
        let got: Vec<_> = s
            .interfaces
            .unwrap_or_default()
            .into_iter()
            .map(|i| (i.name, i.ip_address, i.pod_interface_name, i.info_source))
            .collect();
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            got,
            [
                (some("default"), some("10.244.0.7"), some("eth0"), some("domain")),
                (some("ptp"), some("10.1.1.5"), some("pode31d7ce2712"), some("domain, multus-status")),
            ]
        );
    }

    #[test]
    fn a_stopped_or_crashed_domain_makes_the_vmi_final() {
        let v = vmi("Running", 30);
        for (state, reason, want) in [
            (DomainState::Shutoff, StateReason::Shutdown, Phase::Succeeded),
            (DomainState::Shutoff, StateReason::Crashed, Phase::Failed),
            (DomainState::Crashed, StateReason::Panicked, Phase::Failed),
        ] {
            let p = plan(&observed(&v, ready(), present(state, reason), 0));
            assert_eq!(phase_of(&p), Some(want), "{state:?} {reason:?}");
        }
        // The pod was deleted under the VMI: the guest's clean shutdown is still a failure.
        let mut o = observed(&v, ready(), present(DomainState::Shutoff, StateReason::Shutdown), 0);
        o.terminating = true;
        assert_eq!(phase_of(&plan(&o)), Some(Phase::Failed));
        // The domain vanished.
        assert_eq!(phase_of(&plan(&observed(&v, ready(), DomainView::Absent, 0))), Some(Phase::Failed));
    }

    #[test]
    fn deletion_asks_by_acpi_then_destroys_after_the_grace_period() {
        let mut v = vmi("Running", 30);
        v.metadata.deletion_timestamp = Some(t(100));
        let running = present(DomainState::Running, StateReason::Booted);
        let p = plan(&observed(&v, ready(), running.clone(), 110));
        assert_eq!(p.domain, Some(DomainOp::Shutdown));
        let mut o = observed(&v, ready(), running.clone(), 120);
        o.acpi_sent = true;
        assert_eq!(plan(&o).domain, None, "asked once");
        o.now = t(130);
        assert_eq!(plan(&o).domain, Some(DomainOp::Destroy));
        // The guest obeyed: Succeeded; done once final.
        let p = plan(&observed(&v, ready(), present(DomainState::Shutoff, StateReason::Shutdown), 111));
        assert_eq!(phase_of(&p), Some(Phase::Succeeded));
        // Grace 0 destroys at once, and a destroyed guest without ACPI shutdown is Succeeded.
        let mut zero = vmi("Running", 0);
        zero.metadata.deletion_timestamp = Some(t(100));
        assert_eq!(plan(&observed(&zero, ready(), running, 100)).domain, Some(DomainOp::Destroy));
        let p = plan(&observed(&zero, ready(), present(DomainState::Shutoff, StateReason::Destroyed), 100));
        assert_eq!(phase_of(&p), Some(Phase::Succeeded));
        let mut done = zero.clone();
        done.status = p.status;
        let p = plan(&observed(&done, ready(), present(DomainState::Shutoff, StateReason::Destroyed), 101));
        assert!(p.done && p.status.is_none());
    }

    #[test]
    fn failures_are_reported_not_hung() {
        let v = vmi("Scheduled", 30);
        let p = plan(&observed(
            &v,
            LauncherView::Failed("containerDisk cd: not a disk image".into()),
            DomainView::Absent,
            0,
        ));
        assert_eq!(phase_of(&p), Some(Phase::Failed));
        let sync = p.status.as_ref().and_then(|s| s.condition(&Type::Synchronized)).cloned().unwrap_or_default();
        assert_eq!(sync.message.as_deref(), Some("virt-launcher failed: containerDisk cd: not a disk image"));
        let mut efi = vmi("Scheduled", 30);
        efi.spec.domain.firmware = serde_json::from_value(json!({"bootloader": {"efi": {}}})).ok();
        let p = plan(&observed(&efi, ready(), DomainView::Absent, 0));
        assert_eq!(phase_of(&p), Some(Phase::Failed));
        assert!(p.domain.is_none());
        // An unreachable libvirt only fails the VMI once its pod is down.
        let r = plan(&observed(&vmi("Running", 30), ready(), DomainView::Unreachable("refused".into()), 0));
        assert!(r.status.is_none());
        let running = vmi("Running", 30);
        let mut o = observed(&running, ready(), DomainView::Unreachable("refused".into()), 0);
        o.pod_terminated = true;
        assert_eq!(phase_of(&plan(&o)), Some(Phase::Failed));
    }

    #[test]
    fn bridge_on_the_pod_network_or_an_unshared_claim_is_not_migratable() {
        let mut v = vmi("Scheduled", 30);
        let ifaces = v.spec.domain.devices.interfaces.get_or_insert_default();
        ifaces[0].masquerade = None;
        ifaces[0].bridge = Some(Default::default());
        let s = plan(&observed(&v, ready(), present(DomainState::Running, StateReason::Booted), 0)).status;
        let lm = s.as_ref().and_then(|s| s.condition(&Type::LiveMigratable)).cloned().unwrap_or_default();
        assert_eq!((lm.status, lm.reason.as_deref()), (ConditionStatus::False, Some("InterfaceNotLiveMigratable")));
        let v = vmi("Scheduled", 30);
        let mut o = observed(&v, ready(), present(DomainState::Running, StateReason::Booted), 0);
        o.unshared_claims = vec!["disk-alpine".into()];
        let s = plan(&o).status;
        let lm = s.as_ref().and_then(|s| s.condition(&Type::LiveMigratable)).cloned().unwrap_or_default();
        assert_eq!(lm.reason.as_deref(), Some("DisksNotLiveMigratable"));
        assert!(lm.message.unwrap_or_default().contains("PVC disk-alpine is not shared"));
        // Later polls of the running guest (claims not read again) keep the decision.
        let mut running = v.clone();
        running.status = s;
        let again = plan(&observed(&running, ready(), present(DomainState::Running, StateReason::Booted), 5));
        assert!(again.status.is_none(), "nothing changes: {:?}", again.status);
    }
}
