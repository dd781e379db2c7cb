//! `PUT virtualmachines/{name}/migrate` as upstream's virt-api answers it (`MigrateVMRequestHandler` in
//! `pkg/virt-api/rest/lifecycle.go`, contract §1.3), pure: the options and the VM's VMI in → the
//! VirtualMachineInstanceMigration to create, or the refusal with upstream's status code and text.
//! [`crate::subresources`] reads the VM and the VMI and creates the migration (as virt-api's ServiceAccount: the
//! user needs `update virtualmachines/migrate`, not the right to create migrations).
//!
//! ```text
//! body MigrateOptions{dryRun, addedNodeSelector} (not JSON: 400 "Can not unmarshal Request body to struct, …")
//!   ─► the VM   (absent: 404 virtualmachine.kubevirt.io "<name>" not found)
//!   ─► its VMI  (absent: 404 virtualmachineinstance.kubevirt.io "<name>" not found)
//!   ─► phase Running, else 409 … virtualmachine.kubevirt.io "<name>": VM is not running
//!   ─► create VMIM {generateName: kubevirt-migrate-vm-, spec: {vmiName, addedNodeSelector}} (dryRun honoured;
//!      refused — e.g. by the migration create validator — : 500 "Internal error occurred: <the API's message>")
//!   ─► 202, empty body
//! ```

use std::collections::BTreeMap;

use crds::kubevirt::migration::{VirtualMachineInstanceMigration, VirtualMachineInstanceMigrationSpec};
use crds::kubevirt::{VirtualMachineInstance, VirtualMachineInstancePhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::lifecycle::Refusal;

/// The subresource's name.
pub const SUBRESOURCE: &str = "migrate";
/// `metadata.generateName` of the migrations the subresource creates.
pub const GENERATE_NAME: &str = "kubevirt-migrate-vm-";

/// Upstream's `MigrateOptions` (the request body; empty: the defaults).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrateOptions {
    /// `["All"]`: validate and answer, create nothing.
    #[serde(default)]
    pub dry_run: Option<Vec<String>>,
    /// Passed to the migration's `spec.addedNodeSelector`.
    #[serde(default)]
    pub added_node_selector: Option<BTreeMap<String, String>>,
}

/// What a migrate request does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The migration to create.
    pub migration: VirtualMachineInstanceMigration,
    /// Created with `dryRun=All`.
    pub dry_run: bool,
}

/// Plans migrating VM `name` (which exists) whose VMI is `vmi`, with `options`.
pub fn plan(name: &str, options: &MigrateOptions, vmi: &VirtualMachineInstance) -> Result<Plan, Refusal> {
    if vmi.phase() != VirtualMachineInstancePhase::Running {
        return Err(Refusal::conflict(name, "VM is not running"));
    }
    let dry_run = match options.dry_run.as_deref().unwrap_or_default() {
        [] => false,
        [all] if all == "All" => true,
        other => {
            return Err(Refusal::bad_request(format!("invalid dryRun option {other:?}: only \"All\" is supported")));
        }
    };
    // Go's omitempty: an empty selector is not written.
    let added_node_selector = options.added_node_selector.clone().filter(|s| !s.is_empty());
    let migration = VirtualMachineInstanceMigration {
        metadata: ObjectMeta { generate_name: Some(GENERATE_NAME.to_owned()), ..ObjectMeta::default() },
        spec: VirtualMachineInstanceMigrationSpec {
            vmi_name: name.to_owned(),
            added_node_selector,
            ..VirtualMachineInstanceMigrationSpec::default()
        },
        status: None,
    };
    Ok(Plan { migration, dry_run })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi(phase: &str) -> Result<VirtualMachineInstance, String> {
        serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns"}, "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase}}))
        .map_err(|e| e.to_string())
    }

    fn options(body: serde_json::Value) -> Result<MigrateOptions, String> {
        serde_json::from_value(body).map_err(|e| e.to_string())
    }

    #[test]
    fn a_running_vmi_gets_a_migration() -> Result<(), String> {
        let o = options(json!({"dryRun": ["All"], "addedNodeSelector": {"kubernetes.io/hostname": "node02"}}))?;
        let p = plan("vm1", &o, &vmi("Running")?).map_err(|r| r.message)?;
        assert!(p.dry_run);
        let created = serde_json::to_value(&p.migration).map_err(|e| e.to_string())?;
        assert_eq!(
            created,
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
                "metadata": {"generateName": "kubevirt-migrate-vm-"},
                "spec": {"vmiName": "vm1", "addedNodeSelector": {"kubernetes.io/hostname": "node02"}}})
        );
        let plain = plan("vm1", &options(json!({"addedNodeSelector": {}, "dryRun": null}))?, &vmi("Running")?)
            .map_err(|r| r.message)?;
        assert!(!plain.dry_run);
        assert_eq!(serde_json::to_value(&plain.migration.spec).map_err(|e| e.to_string())?, json!({"vmiName": "vm1"}));
        assert_eq!(options(json!({}))?, MigrateOptions::default());
        Ok(())
    }

    #[test]
    fn refusals_are_upstreams() -> Result<(), String> {
        for phase in ["Pending", "Scheduling", "Scheduled", "Succeeded", "Failed", ""] {
            let r = plan("vm1", &MigrateOptions::default(), &vmi(phase)?).err().map(|r| (r.code, r.message));
            assert_eq!(
                r,
                Some((
                    409,
                    "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is not running".into()
                )),
                "{phase}"
            );
        }
        let bad = options(json!({"dryRun": ["Some"]}))?;
        assert_eq!(plan("vm1", &bad, &vmi("Running")?).err().map(|r| r.code), Some(400));
        assert!(options(json!({"addedNodeSelector": ["a"]})).is_err(), "not a map: the handler answers 400");
        Ok(())
    }
}
