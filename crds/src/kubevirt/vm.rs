//! `VirtualMachine` (`kubevirt.io/v1`, also served as `v1alpha3`): the object users keep in Git — a VMI template
//! with a run strategy, and the DataVolumes its disks are imported into (contract §1).
//!
//! The VM has a **status subresource** (unlike the VMI): the controller writes `status` through it, users write
//! `spec`. Field names and JSON shapes are upstream's (`staging/src/kubevirt.io/api/core/v1/types.go`); fields this
//! version does not model are kept in `extra` and preserved by the CRD schema ([`super::wire`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::vmi::VirtualMachineInstanceSpec;
use super::wire::{Condition, Extra, string_enum};
use crate::cdi::datavolume::DataVolumeSpec;

/// Desired state of a VirtualMachine.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachine",
    plural = "virtualmachines",
    singular = "virtualmachine",
    namespaced,
    shortname = "vm",
    shortname = "vms",
    category = "all",
    status = "VirtualMachineStatus",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Status","type":"string","description":"Human Readable Status","jsonPath":".status.printableStatus"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    doc = "VirtualMachine handles the VirtualMachines that are not running or are in a stopped state The VirtualMachine contains the template to create the VirtualMachineInstance. It also mirrors the running state of the created VirtualMachineInstance in its status."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineSpec {
    /// Deprecated: `true` means run strategy `Always`, `false` `Halted`. Mutually exclusive with `runStrategy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// When the VMI runs: `Always`, `RerunOnFailure`, `Manual`, `Halted`, `Once` (`WaitAsReceiver` is refused).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<RunStrategy>,
    /// Instancetype the VMI's resources come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instancetype: Option<Matcher>,
    /// Preference the VMI's unset defaults come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preference: Option<Matcher>,
    /// The VMI created for this VM (it gets the VM's name).
    pub template: VirtualMachineInstanceTemplateSpec,
    /// DataVolumes created for (and owned by) this VM, named as their templates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_volume_templates: Option<Vec<DataVolumeTemplateSpec>>,
    /// `Migration` or `Replacement`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_volumes_strategy: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `spec.runStrategy` (upstream's exact strings).
    pub enum RunStrategy {
        /// Always running: restarted whenever it stops.
        Always = "Always",
        /// Restarted when it fails, not when the guest shuts itself down.
        RerunOnFailure = "RerunOnFailure",
        /// Started and stopped only by requests.
        Manual = "Manual",
        /// Stopped.
        Halted = "Halted",
        /// Run once, never restarted.
        Once = "Once",
        /// The receiving end of a decentralized live migration.
        WaitAsReceiver = "WaitAsReceiver",
    }
}

/// `spec.template`: the VMI's metadata (labels and annotations copied to the VMI) and spec.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceTemplateSpec {
    /// Labels and annotations of the VMI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub metadata: Option<ObjectMeta>,
    /// The VMI's spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spec: Option<VirtualMachineInstanceSpec>,
}

/// `spec.dataVolumeTemplates[]`: a DataVolume (CDI `cdi.kubevirt.io/v1beta1`) created for the VM.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DataVolumeTemplateSpec {
    /// Ignored inline `apiVersion`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Ignored inline `kind`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Name, labels and annotations of the DataVolume.
    #[serde(default)]
    #[schemars(schema_with = "preserved_object")]
    pub metadata: ObjectMeta,
    /// The DataVolume's spec (CDI validates it when the DataVolume is created).
    #[schemars(schema_with = "preserved_object")]
    pub spec: DataVolumeSpec,
    /// Ignored dummy status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "preserved_object")]
    pub status: Option<serde_json::Value>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.instancetype` / `spec.preference`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Matcher {
    /// Name of the instancetype or preference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its kind (the namespaced or the cluster-wide one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The ControllerRevision holding the version in use.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision_name: Option<String>,
    /// Infer it from a volume's labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infer_from_volume: Option<String>,
    /// What to do when inference fails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub infer_from_volume_failure_policy: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Observed state of a VirtualMachine (§1.4), written by the VM controller through the status subresource.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineStatus {
    /// A VMI object exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// The VMI is Ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// Human-readable status (`kubectl get vm`'s STATUS).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Stopped"))]
    pub printable_status: Option<PrintableStatus>,
    /// Conditions: Ready, Failure, RestartRequired, … and every condition of the VMI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<VirtualMachineCondition>>,
    /// Pending start/stop requests; only the first is processed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_change_requests: Option<Vec<VirtualMachineStateChangeRequest>>,
    /// Crash-loop tracking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<VirtualMachineStartFailure>,
    /// The VM generation the current VMI reflects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The VM's current generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired_generation: Option<i64>,
    /// The run strategy last acted on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<RunStrategy>,
    /// The instancetype in use and the ControllerRevision that captured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instancetype_ref: Option<InstancetypeStatusRef>,
    /// The preference in use and the ControllerRevision that captured it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preference_ref: Option<InstancetypeStatusRef>,
    /// Fields this version does not model (volumeSnapshotStatuses, memoryDumpRequest, …), kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `status.printableStatus` (upstream's exact strings).
    pub enum PrintableStatus {
        /// No VMI, none expected (or it finished).
        Stopped = "Stopped",
        /// DataVolumes are being imported.
        Provisioning = "Provisioning",
        /// The VMI is being prepared.
        Starting = "Starting",
        /// The guest runs.
        Running = "Running",
        /// The guest is paused.
        Paused = "Paused",
        /// The VMI is being stopped.
        Stopping = "Stopping",
        /// The VM is being deleted.
        Terminating = "Terminating",
        /// Starts keep failing; the next one waits (`status.startFailure`).
        CrashLoopBackOff = "CrashLoopBackOff",
        /// The VMI is migrating.
        Migrating = "Migrating",
        /// Nothing else applies.
        Unknown = "Unknown",
        /// The launcher pod cannot be scheduled.
        ErrorUnschedulable = "ErrorUnschedulable",
        /// A containerDisk image cannot be pulled.
        ErrImagePull = "ErrImagePull",
        /// A containerDisk pull is backing off.
        ImagePullBackOff = "ImagePullBackOff",
        /// A referenced PVC does not exist.
        ErrorPvcNotFound = "ErrorPvcNotFound",
        /// A DataVolume failed.
        DataVolumeError = "DataVolumeError",
        /// A PVC waits for binding.
        WaitingForVolumeBinding = "WaitingForVolumeBinding",
        /// Waiting for a migration source.
        WaitingForReceiver = "WaitingForReceiver",
    }
}

/// `status.instancetypeRef` / `status.preferenceRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct InstancetypeStatusRef {
    /// Name of the instancetype or preference.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The ControllerRevision holding the captured spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller_revision_ref: Option<ControllerRevisionRef>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A ControllerRevision by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControllerRevisionRef {
    /// Its name.
    pub name: String,
}

/// `status.conditions[]` of a VM.
pub type VirtualMachineCondition = Condition<VirtualMachineConditionType>;

string_enum! {
    /// VM condition types of the VM's own (VMI condition types are copied as they are, as `Other`).
    pub enum VirtualMachineConditionType {
        /// Copied from the VMI (False `VMINotExists` without one).
        Ready = "Ready",
        /// Syncing the VM failed (creating its VMI or DataVolumes).
        Failure = "Failure",
        /// The guest is paused.
        Paused = "Paused",
        /// A template change takes effect only after a restart.
        RestartRequired = "RestartRequired",
        /// The VM needs manual recovery.
        ManualRecoveryRequired = "ManualRecoveryRequired",
    }
}

/// `status.stateChangeRequests[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineStateChangeRequest {
    /// `Start` or `Stop`.
    pub action: StateChangeRequestAction,
    /// Options (`paused: "true"` on a Start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<BTreeMap<String, String>>,
    /// The VMI a Stop is meant for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `stateChangeRequests[].action`.
    pub enum StateChangeRequestAction {
        /// Start a VMI.
        Start = "Start",
        /// Stop (delete) the VMI with the request's UID.
        Stop = "Stop",
    }
}

/// `status.startFailure`: consecutive failed starts and when the next may happen.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineStartFailure {
    /// Failed starts in a row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consecutive_fail_count: Option<i64>,
    /// UID of the VMI that failed last (counted once).
    #[serde(rename = "lastFailedVMIUID", skip_serializing_if = "Option::is_none")]
    pub last_failed_vmi_uid: Option<String>,
    /// No start before this time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<Time>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Schema of an object typed with an API type whose own schema the CRD does not repeat (ObjectMeta, a CDI spec):
/// any object, unknown fields preserved.
fn preserved_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

impl VirtualMachine {
    /// The effective run strategy: `spec.runStrategy`, else `Always`/`Halted` from the legacy `spec.running`
    /// (admission refuses a VM with both or neither; neither reads as `Halted`).
    pub fn run_strategy(&self) -> RunStrategy {
        match (&self.spec.run_strategy, self.spec.running) {
            (Some(s), _) => s.clone(),
            (None, Some(true)) => RunStrategy::Always,
            (None, _) => RunStrategy::Halted,
        }
    }
}

impl VirtualMachineStatus {
    /// The condition of type `t`, if present.
    pub fn condition(&self, t: &VirtualMachineConditionType) -> Option<&VirtualMachineCondition> {
        self.conditions.as_deref().unwrap_or_default().iter().find(|c| &c.type_ == t)
    }
}
