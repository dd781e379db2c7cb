//! `VirtualMachineInstanceMigration` (`kubevirt.io/v1`, also served as `v1alpha3`): one live migration of one VMI to
//! another node (contract §5). Status subresource, printer columns `Phase` and `VMI`, short names `vmim`/`vmims`, as
//! upstream's. Deleting a VMIM that is not final cancels it (the controller's finalizer aborts the libvirt job first).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::vmi::VirtualMachineInstanceMigrationState;
use super::wire::{Condition, Extra, string_enum};

/// Desired state of a VirtualMachineInstanceMigration.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstanceMigration",
    plural = "virtualmachineinstancemigrations",
    singular = "virtualmachineinstancemigration",
    namespaced,
    shortname = "vmim",
    shortname = "vmims",
    category = "all",
    status = "VirtualMachineInstanceMigrationStatus",
    printcolumn = r#"{"name":"Phase","type":"string","description":"The current phase of VM instance migration","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"VMI","type":"string","description":"The name of the VMI to perform the migration on","jsonPath":".spec.vmiName"}"#,
    doc = "VirtualMachineInstanceMigration represents the object tracking a VMI's migration to another host in the cluster"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceMigrationSpec {
    /// The VMI to migrate, in the migration's namespace (required; admission refuses an empty one).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub vmi_name: String,
    /// Extra node selector for the target; keys the VMI already selects on keep the VMI's value (it can only narrow).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_node_selector: Option<BTreeMap<String, String>>,
    /// `system-critical`, `user-triggered` or `system-maintenance`; only the controllers may set it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// Fields this version does not model (`sendTo`, `receive`: decentralized migration), kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Observed state of a VirtualMachineInstanceMigration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceMigrationStatus {
    /// Where the migration is (absent: not yet accepted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<MigrationPhase>,
    /// migrationAbortRequested, migrationRejectedByResourceQuota, ….
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<VirtualMachineInstanceMigrationCondition>>,
    /// When each phase was entered, once per phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_transition_timestamps: Option<Vec<MigrationPhaseTransitionTimestamp>>,
    /// A copy of the VMI's `status.migrationState` for this migration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_state: Option<VirtualMachineInstanceMigrationState>,
    /// Fields this version does not model (`synchronizationAddresses`), kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.phaseTransitionTimestamps[]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigrationPhaseTransitionTimestamp {
    /// The phase entered.
    pub phase: MigrationPhase,
    /// When.
    pub phase_transition_timestamp: Time,
}

/// `status.conditions[]` of a VMIM.
pub type VirtualMachineInstanceMigrationCondition = Condition<MigrationConditionType>;

string_enum! {
    /// `status.phase` of a VMIM (upstream's exact strings, in their order).
    pub enum MigrationPhase {
        /// Accepted by the controller.
        Pending = "Pending",
        /// The target pod is being scheduled.
        Scheduling = "Scheduling",
        /// The target pod runs.
        Scheduled = "Scheduled",
        /// Handed to the target node, which prepares its launcher.
        PreparingTarget = "PreparingTarget",
        /// The target waits for the source.
        TargetReady = "TargetReady",
        /// The source is sending.
        Running = "Running",
        /// Done; the VMI runs on the target.
        Succeeded = "Succeeded",
        /// Failed or aborted; the VMI runs where it ran.
        Failed = "Failed",
        /// Decentralized: waiting for the other side.
        WaitingForSync = "WaitingForSync",
        /// Decentralized: synchronising.
        Synchronizing = "Synchronizing",
    }
}

string_enum! {
    /// VMIM condition types (upstream's exact strings).
    pub enum MigrationConditionType {
        /// The migration was deleted (cancelled) while running.
        MigrationAbortRequested = "migrationAbortRequested",
        /// The target pod exceeds a ResourceQuota.
        MigrationRejectedByResourceQuota = "migrationRejectedByResourceQuota",
        /// Utility volumes block the migration.
        MigrationBlockedByUtilityVolumes = "migrationBlockedByUtilityVolumes",
        /// Decentralized migration blocked.
        DecentralizedMigrationBlocked = "decentralizedMigrationBlocked",
        /// A backup blocks the migration.
        MigrationBlockedByBackup = "migrationBlockedByBackup",
    }
}

string_enum! {
    /// `migrationState.abortStatus`.
    pub enum MigrationAbortStatus {
        /// The libvirt job was cancelled.
        Succeeded = "Succeeded",
        /// The abort failed (the migration completed first, or libvirt refused).
        Failed = "Failed",
        /// The source is cancelling the job.
        Aborting = "Aborting",
    }
}

string_enum! {
    /// `migrationState.mode`.
    pub enum MigrationMode {
        /// Memory copied while the guest runs.
        PreCopy = "PreCopy",
        /// The guest runs on the target, pages fetched on demand.
        PostCopy = "PostCopy",
        /// The guest was paused to let the copy converge.
        Paused = "Paused",
    }
}

impl MigrationPhase {
    /// Whether the migration is over (`Succeeded` or `Failed`).
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

impl VirtualMachineInstanceMigration {
    /// The phase, `None` before the controller accepted it.
    pub fn phase(&self) -> Option<&MigrationPhase> {
        self.status.as_ref().and_then(|s| s.phase.as_ref())
    }

    /// Whether the migration is over.
    pub fn is_final(&self) -> bool {
        self.phase().is_some_and(MigrationPhase::is_final)
    }
}

impl VirtualMachineInstanceMigrationStatus {
    /// Moves to `phase`, recording its transition time once per phase (as the VMI's status does).
    pub fn set_phase(&mut self, phase: MigrationPhase, now: &Time) {
        if self.phase.as_ref() == Some(&phase) {
            return;
        }
        let stamps = self.phase_transition_timestamps.get_or_insert_with(Vec::new);
        if !stamps.iter().any(|s| s.phase == phase) {
            stamps.push(MigrationPhaseTransitionTimestamp {
                phase: phase.clone(),
                phase_transition_timestamp: now.clone(),
            });
        }
        self.phase = Some(phase);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_migration_job_round_trips() -> Result<(), String> {
        let text = r#"{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "migration-job"},
            "spec": {"vmiName": "vmi-migratable", "sendTo": {"migrationID": "x", "connectURL": "y"}}}"#;
        let vmim: VirtualMachineInstanceMigration = serde_json::from_str(text).map_err(|e| e.to_string())?;
        assert_eq!(vmim.spec.vmi_name, "vmi-migratable");
        assert!(!vmim.is_final());
        let back = serde_json::to_value(&vmim).map_err(|e| e.to_string())?;
        assert_eq!(back["spec"]["sendTo"]["migrationID"], "x", "unknown fields survive");
        Ok(())
    }

    #[test]
    fn phases_are_recorded_once() {
        let mut s = VirtualMachineInstanceMigrationStatus::default();
        let t = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        s.set_phase(MigrationPhase::Pending, &t);
        s.set_phase(MigrationPhase::Pending, &t);
        s.set_phase(MigrationPhase::Scheduling, &t);
        s.set_phase(MigrationPhase::Failed, &t);
        let phases: Vec<_> = s
            .phase_transition_timestamps
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.phase.as_str().to_owned())
            .collect();
        assert_eq!(phases, ["Pending", "Scheduling", "Failed"]);
        assert!(MigrationPhase::Failed.is_final() && !MigrationPhase::Running.is_final());
    }
}
