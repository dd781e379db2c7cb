//! Evacuation (upstream's evacuation controller, `pkg/virt-controller/watch/drain/evacuation`, folded into the VMI
//! reconciler because it is a decision about one VMI): a VMI the eviction webhook marked
//! (`status.evacuationNodeName`, virt-api's `evict`) gets a VirtualMachineInstanceMigration that moves it off that
//! node; the migration controller applies the parallelism caps as for any other migration, the target node agent
//! clears the mark when it takes the VMI over, and the drain's next eviction attempt finds the source pod gone.
//!
//! ```text
//! marked, still on that node, migrates on eviction, LiveMigratable, no unfinished migration, ≤ 1 active launcher
//!   ─► create VMIM kubevirt-evacuation-… (annotation kubevirt.io/evacuationMigration=<node>)
//! marked ─► condition EvictionRequested=True; unmarked ─► removed
//! ```
//!
//! A migration that fails leaves the mark: the next reconcile creates another one, as upstream's controller does.

use contracts::kubevirt::consts::{ann, reason};
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::migration::{VirtualMachineInstanceMigration, VirtualMachineInstanceMigrationSpec};
use crds::kubevirt::vmi::{
    ConditionStatus, VirtualMachineInstanceCondition, VirtualMachineInstanceConditionType as Type,
    VirtualMachineInstanceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::ResourceExt;

/// `generateName` of evacuation migrations (upstream's).
pub const GENERATE_NAME: &str = "kubevirt-evacuation-";
/// Message of the `EvictionRequested` condition (upstream's).
pub const MARKED_MESSAGE: &str = "VMI is marked for eviction";
/// Event reason of a created evacuation migration (upstream's).
pub const EVENT_CREATED: &str = "SuccessfulCreate";
/// Event reason of a failed creation (upstream's).
pub const EVENT_FAILED: &str = "FailedCreate";

/// Sets or removes `EvictionRequested` in `status` by whether `vmi` is marked for evacuation.
pub fn condition(vmi: &VirtualMachineInstance, status: &mut VirtualMachineInstanceStatus, now: &Time) {
    if vmi.evacuation_node().is_some() {
        if status.condition(&Type::EvictionRequested).is_none_or(|c| c.status != ConditionStatus::True) {
            let c = VirtualMachineInstanceCondition::new(
                Type::EvictionRequested,
                ConditionStatus::True,
                reason::EVICTION_REQUESTED,
                MARKED_MESSAGE,
            );
            status.set_condition(c, now);
        }
    } else {
        status.remove_condition(&Type::EvictionRequested);
    }
}

/// The migration that evacuates `vmi`, when it should get one now: it is marked and still on the marked node, its
/// strategy migrates it on eviction, it is live-migratable, `in_flight` (an unfinished migration of it exists) is
/// false and at most one of its launcher pods is active (`active_launchers`; the pods of an earlier migration must
/// be gone first).
pub fn migration(
    vmi: &VirtualMachineInstance,
    in_flight: bool,
    active_launchers: usize,
) -> Option<VirtualMachineInstanceMigration> {
    let node = vmi.evacuation_node()?;
    let on = vmi.status.as_ref().and_then(|s| s.node_name.as_deref());
    // The VMI's own strategy: the mutating webhook wrote the cluster's default into it at creation.
    if on != Some(node) || !vmi.migrates_on_eviction(None) || !vmi.is_migratable() || in_flight || active_launchers > 1
    {
        return None;
    }
    Some(VirtualMachineInstanceMigration {
        metadata: ObjectMeta {
            generate_name: Some(GENERATE_NAME.into()),
            namespace: vmi.namespace(),
            annotations: Some([(ann::EVACUATION_MIGRATION.to_owned(), node.to_owned())].into()),
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

    fn vmi(strategy: &str, migratable: bool, node: &str, marked: Option<&str>) -> VirtualMachineInstance {
        let mut v = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}, "evictionStrategy": strategy},
            "status": {"phase": "Running", "nodeName": node,
                       "conditions": [{"type": "LiveMigratable", "status": if migratable { "True" } else { "False" }}]},
        });
        if let Some(m) = marked {
            v["status"]["evacuationNodeName"] = json!(m);
        }
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_marked_vmi_gets_one_evacuation_migration() {
        let m = migration(&vmi("LiveMigrate", true, "node1", Some("node1")), false, 1)
            .unwrap_or_else(|| panic!("no migration"));
        assert_eq!(m.metadata.generate_name.as_deref(), Some("kubevirt-evacuation-"));
        assert_eq!(m.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(m.annotations().get("kubevirt.io/evacuationMigration").map(String::as_str), Some("node1"));
        assert_eq!(m.spec.vmi_name, "vm1");
        assert!(migration(&vmi("LiveMigrateIfPossible", true, "node1", Some("node1")), false, 1).is_some());
    }

    #[test]
    fn no_migration_when_any_rule_says_no() {
        let table = [
            ("unmarked", vmi("LiveMigrate", true, "node1", None), false, 1),
            ("already moved", vmi("LiveMigrate", true, "node2", Some("node1")), false, 1),
            ("strategy None", vmi("None", true, "node1", Some("node1")), false, 1),
            ("strategy External", vmi("External", true, "node1", Some("node1")), false, 1),
            ("not migratable", vmi("LiveMigrate", false, "node1", Some("node1")), false, 1),
            ("in flight", vmi("LiveMigrate", true, "node1", Some("node1")), true, 1),
            ("pods of the last migration", vmi("LiveMigrate", true, "node1", Some("node1")), false, 2),
        ];
        for (case, v, in_flight, active) in table {
            assert!(migration(&v, in_flight, active).is_none(), "{case}");
        }
    }

    #[test]
    fn the_condition_follows_the_mark() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let marked = vmi("LiveMigrate", true, "node1", Some("node1"));
        let mut status = marked.status.clone().unwrap_or_default();
        condition(&marked, &mut status, &now);
        let c = status.condition(&Type::EvictionRequested).cloned().unwrap_or_else(|| panic!("no condition"));
        assert_eq!(
            (c.status, c.reason.as_deref(), c.message.as_deref()),
            (ConditionStatus::True, Some("EvictionRequested"), Some(MARKED_MESSAGE))
        );
        let unmarked = vmi("LiveMigrate", true, "node2", None);
        condition(&unmarked, &mut status, &now);
        assert!(status.condition(&Type::EvictionRequested).is_none());
    }
}
