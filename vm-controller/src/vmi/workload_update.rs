//! CPU and memory hotplug on the VMI's side (upstream's VMI controller `requireCPUHotplug` / memory hotplug
//! conditions, and its workload updater `pkg/virt-controller/watch/workload-updater`, folded into the VMI
//! reconciler because both are decisions about one VMI): a running VMI whose spec asks for more vCPUs or memory
//! than it runs with gets `HotVCPUChange` / `HotMemoryChange`, then a migration into a launcher pod sized for the
//! new spec; the target node agent plugs the vCPUs and memory in and removes the conditions.
//!
//! ```text
//! Running, maxSockets set, spec vCPUs ≠ status.currentCPUTopology's      ─► HotVCPUChange=True (added once)
//! Running, maxGuest set, spec guest ≠ status.memory.guestRequested       ─► HotMemoryChange=True (added once)
//! either condition, workloadUpdateMethods has LiveMigrate, LiveMigratable, no unfinished migration,
//!   ≤ 1 active launcher ─► VMIM kubevirt-workload-update-… (annotation kubevirt.io/workloadUpdateMigration)
//! ```
//!
//! The migration controller's caps (`parallelMigrationsPerCluster`, per node) pace these migrations as any other.

use contracts::kubevirt::consts::ann;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::domain::Cpu;
use crds::kubevirt::migration::{VirtualMachineInstanceMigration, VirtualMachineInstanceMigrationSpec};
use crds::kubevirt::vmi::{
    ConditionStatus, CpuTopology, VirtualMachineInstanceCondition, VirtualMachineInstanceConditionType as Type,
    VirtualMachineInstancePhase as Phase, VirtualMachineInstanceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;

/// `generateName` of workload-update migrations (upstream's).
pub const GENERATE_NAME: &str = "kubevirt-workload-update-";

fn vcpus(sockets: Option<u32>, cores: Option<u32>, threads: Option<u32>) -> u64 {
    [sockets, cores, threads].iter().map(|v| u64::from(v.unwrap_or(1).max(1))).product()
}

fn spec_vcpus(cpu: &Cpu) -> u64 {
    vcpus(cpu.sockets, cpu.cores, cpu.threads)
}

fn topology_vcpus(t: &CpuTopology) -> u64 {
    vcpus(t.sockets, t.cores, t.threads)
}

/// Whether the spec asks for other vCPUs than the guest runs with (upstream's `requireCPUHotplug`).
pub fn needs_cpu_hotplug(vmi: &VirtualMachineInstance) -> bool {
    let (Some(cpu), Some(current)) =
        (vmi.spec.domain.cpu.as_ref(), vmi.status.as_ref().and_then(|s| s.current_cpu_topology.as_ref()))
    else {
        return false;
    };
    cpu.max_sockets.unwrap_or(0) != 0 && spec_vcpus(cpu) != topology_vcpus(current)
}

/// Whether the spec asks for another guest size than the one last requested from the guest.
pub fn needs_memory_hotplug(vmi: &VirtualMachineInstance) -> bool {
    let Some(memory) = vmi.spec.domain.memory.as_ref().filter(|m| m.max_guest.is_some()) else { return false };
    let requested = vmi.status.as_ref().and_then(|s| s.memory.as_ref()).and_then(|m| m.guest_requested.as_ref());
    let parse = |q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>| {
        q.and_then(|q| contracts::quantity::parse_bytes(&q.0).ok())
    };
    parse(memory.guest.as_ref()) != parse(requested)
}

/// Adds `HotVCPUChange` / `HotMemoryChange` (True, no reason: upstream's) to a running VMI's `status` when its
/// spec asks for a hotplug and the condition is not there yet. Removing them is the target node agent's.
pub fn conditions(vmi: &VirtualMachineInstance, status: &mut VirtualMachineInstanceStatus, now: &Time) {
    if status.phase.as_ref() != Some(&Phase::Running) {
        return;
    }
    for (t, needed) in
        [(Type::HotVcpuChange, needs_cpu_hotplug(vmi)), (Type::HotMemoryChange, needs_memory_hotplug(vmi))]
    {
        if needed && status.condition(&t).is_none() {
            status.set_condition(
                VirtualMachineInstanceCondition { type_: t, status: ConditionStatus::True, ..Default::default() },
                now,
            );
        }
    }
}

/// Whether the conditions in `status` ask for a workload-update migration (upstream's `doesRequireMigration`:
/// `HotVCPUChange` of any status, `HotMemoryChange` True, `MigrationRequired` True).
pub fn requires_migration(status: &VirtualMachineInstanceStatus) -> bool {
    let is = |t: &Type, want: Option<ConditionStatus>| {
        status.condition(t).is_some_and(|c| want.as_ref().is_none_or(|w| &c.status == w))
    };
    is(&Type::HotVcpuChange, None)
        || is(&Type::HotMemoryChange, Some(ConditionStatus::True))
        || is(&Type::MigrationRequired, Some(ConditionStatus::True))
}

/// The migration that brings `vmi` (with `status` as the reconcile leaves it) into a launcher pod of its new
/// size, when it should get one now: it runs, is not being deleted, its conditions ask for it, `live_migrate`
/// (the cluster's `workloadUpdateMethods` hold `LiveMigrate`), it is live-migratable, `in_flight` (an unfinished
/// migration of it exists) is false and at most one of its launcher pods is active.
pub fn migration(
    vmi: &VirtualMachineInstance,
    status: &VirtualMachineInstanceStatus,
    live_migrate: bool,
    in_flight: bool,
    active_launchers: usize,
) -> Option<VirtualMachineInstanceMigration> {
    let running = status.phase.as_ref() == Some(&Phase::Running) && vmi.metadata.deletion_timestamp.is_none();
    if !running || !requires_migration(status) || !live_migrate || !vmi.is_migratable() || in_flight {
        return None;
    }
    if active_launchers > 1 {
        return None;
    }
    Some(VirtualMachineInstanceMigration {
        metadata: ObjectMeta {
            generate_name: Some(GENERATE_NAME.into()),
            namespace: vmi.namespace(),
            annotations: Some([(ann::WORKLOAD_UPDATE_MIGRATION.to_owned(), String::new())].into()),
            ..Default::default()
        },
        spec: VirtualMachineInstanceMigrationSpec { vmi_name: vmi.name_any(), ..Default::default() },
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(sockets: u32, guest: &str, status_sockets: u32, requested: &str) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns"},
            "spec": {"domain": {"cpu": {"sockets": sockets, "cores": 1, "threads": 1, "maxSockets": 4},
                                "memory": {"guest": guest, "maxGuest": "4Gi"}, "devices": {}}},
            "status": {"phase": "Running",
                       "conditions": [{"type": "LiveMigratable", "status": "True"}],
                       "currentCPUTopology": {"sockets": status_sockets, "cores": 1, "threads": 1},
                       "memory": {"guestAtBoot": "1Gi", "guestCurrent": requested, "guestRequested": requested}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn with_conditions(v: &VirtualMachineInstance) -> VirtualMachineInstanceStatus {
        let mut status = v.status.clone().unwrap_or_default();
        conditions(v, &mut status, &now());
        status
    }

    #[test]
    fn a_spec_ahead_of_the_guest_gets_the_hotplug_conditions_once() {
        let synced = vmi(1, "1Gi", 1, "1Gi");
        let s = with_conditions(&synced);
        assert!(s.condition(&Type::HotVcpuChange).is_none() && s.condition(&Type::HotMemoryChange).is_none());
        let cpu = with_conditions(&vmi(2, "1Gi", 1, "1Gi"));
        let c = cpu.condition(&Type::HotVcpuChange).cloned().unwrap_or_default();
        assert_eq!((c.status, c.reason, c.message), (ConditionStatus::True, None, None));
        assert!(cpu.condition(&Type::HotMemoryChange).is_none());
        let mem = with_conditions(&vmi(1, "1536Mi", 1, "1Gi"));
        assert!(mem.condition(&Type::HotMemoryChange).is_some_and(|c| c.status == ConditionStatus::True));
        // "1024Mi" is "1Gi": no hotplug.
        assert!(with_conditions(&vmi(1, "1024Mi", 1, "1Gi")).condition(&Type::HotMemoryChange).is_none());
        // A failed memory hotplug (False, the target's) is left alone.
        let mut failed = vmi(1, "1536Mi", 1, "1Gi");
        let f = VirtualMachineInstanceCondition::new(Type::HotMemoryChange, ConditionStatus::False, "x", "y");
        if let Some(s) = failed.status.as_mut() {
            s.set_condition(f, &now());
        }
        let s = with_conditions(&failed);
        assert_eq!(s.condition(&Type::HotMemoryChange).map(|c| c.status.clone()), Some(ConditionStatus::False));
        // Not before it runs.
        let mut scheduled = vmi(2, "1Gi", 1, "1Gi");
        if let Some(s) = scheduled.status.as_mut() {
            s.phase = Some(Phase::Scheduled);
        }
        assert!(with_conditions(&scheduled).condition(&Type::HotVcpuChange).is_none());
    }

    #[test]
    fn a_vmi_needing_a_hotplug_gets_one_workload_update_migration() {
        let v = vmi(2, "1Gi", 1, "1Gi");
        let s = with_conditions(&v);
        let m = migration(&v, &s, true, false, 1).unwrap_or_else(|| panic!("no migration"));
        assert_eq!(m.metadata.generate_name.as_deref(), Some("kubevirt-workload-update-"));
        assert_eq!(m.annotations().get("kubevirt.io/workloadUpdateMigration").map(String::as_str), Some(""));
        assert_eq!((m.spec.vmi_name.as_str(), m.metadata.namespace.as_deref()), ("vm1", Some("ns")));
        let table = [
            ("LiveMigrate not configured", false, false, 1),
            ("a migration in flight", true, true, 1),
            ("pods of the last migration", true, false, 2),
        ];
        for (case, live, in_flight, active) in table {
            assert!(migration(&v, &s, live, in_flight, active).is_none(), "{case}");
        }
        let synced = vmi(1, "1Gi", 1, "1Gi");
        assert!(migration(&synced, &with_conditions(&synced), true, false, 1).is_none(), "nothing to do");
        let mut unmigratable = v.clone();
        if let Some(s) = unmigratable.status.as_mut() {
            s.conditions = None;
        }
        assert!(migration(&unmigratable, &with_conditions(&unmigratable), true, false, 1).is_none(), "not migratable");
    }
}
