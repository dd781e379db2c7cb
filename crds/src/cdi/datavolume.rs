//! `DataVolume` (`cdi.kubevirt.io/v1beta1`): the typed request "put this image into a new PVC".
//!
//! Field names and JSON shapes follow upstream's `types.go` exactly; validation lives in the CRD schema as CEL
//! rules (see [`crate::cdi::crd`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaimSpec, TypedLocalObjectReference, TypedObjectReference, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Desired state of a DataVolume. Immutable after creation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "DataVolume",
    plural = "datavolumes",
    singular = "datavolume",
    namespaced,
    shortname = "dv",
    shortname = "dvs",
    category = "all",
    status = "DataVolumeStatus",
    printcolumn = r#"{"name":"Phase","type":"string","description":"The phase the data volume is in","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","description":"Transfer progress in percentage if known, N/A otherwise","jsonPath":".status.progress"}"#,
    printcolumn = r#"{"name":"Restarts","type":"integer","description":"The number of times the transfer has been restarted.","jsonPath":".status.restartCount"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Transfer","type":"string","description":"While the transfer runs: bytes done of total, rate and time left; afterwards how it ended (the Running condition's message)","jsonPath":".status.conditions[?(@.type==\"Running\")].message"}"#,
    doc = "DataVolume is an abstraction on top of PersistentVolumeClaims to allow easy population of those PersistentVolumeClaims with relation to VirtualMachines"
)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSpec {
    /// The source of the data (exactly one member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<DataVolumeSource>,
    /// Indirect source (a `DataSource`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<DataVolumeSourceRef>,
    /// The PVC spec, used verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PersistentVolumeClaimSpec>,
    /// Storage request completed from the StorageProfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    /// Priority class of the worker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Service account of the worker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// `kubevirt` (a disk image, default) or `archive` (a tar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<ContentType>,
    /// Multi-stage import checkpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<Vec<DataVolumeCheckpoint>>,
    /// Marks the last checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_checkpoint: Option<bool>,
    /// Overrides `CDIConfig.spec.preallocation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preallocation: Option<bool>,
}

impl DataVolume {
    /// The StorageClass its claim names (`spec.storage`, else `spec.pvc`); `None` leaves it to the default class.
    pub fn storage_class_name(&self) -> Option<&str> {
        let storage = self.spec.storage.as_ref().and_then(|s| s.storage_class_name.as_deref());
        storage.or_else(|| self.spec.pvc.as_ref().and_then(|p| p.storage_class_name.as_deref()))
    }
}

/// `spec.contentType` (the one content type enum of the workspace).
pub use contracts::cdi::ContentType;

/// A multi-stage import checkpoint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DataVolumeCheckpoint {
    /// Previous checkpoint id.
    pub previous: String,
    /// Current checkpoint id.
    pub current: String,
}

/// `spec.sourceRef`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct DataVolumeSourceRef {
    /// Only `DataSource`.
    pub kind: String,
    /// Namespace (defaults to the DV's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

/// `spec.storage`: like a PVC spec, every field optional.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Access modes (from the StorageProfile when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_modes: Option<Vec<String>>,
    /// Label selector for volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// Requested resources (`requests.storage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<VolumeResourceRequirements>,
    /// A specific PV.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_name: Option<String>,
    /// Storage class (default virt class, then the cluster default, when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// `Filesystem` or `Block` (from the StorageProfile when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
    /// Passed to the PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source: Option<TypedLocalObjectReference>,
    /// Passed to the PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_source_ref: Option<TypedObjectReference>,
}

/// `spec.source`: exactly one member is set.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSource {
    /// HTTP(S) URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,
    /// S3 object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Google Cloud Storage object (refused by this implementation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gcs: Option<GcsSource>,
    /// Container registry image (containerDisk layout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistrySource>,
    /// Another PVC (clone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcSource>,
    /// A VolumeSnapshot (refused by this implementation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<PvcSource>,
    /// Upload through the upload proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<EmptySource>,
    /// An empty disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blank: Option<EmptySource>,
    /// oVirt imageio (refused by this implementation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imageio: Option<ForeignSource>,
    /// VMware VDDK (refused by this implementation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vddk: Option<ForeignSource>,
}

/// `source.imageio` / `source.vddk`: accepted by the schema so the API server can refuse them with a clear
/// message (this implementation has no oVirt or VMware importer).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForeignSource {
    /// Endpoint URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Credentials Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// CA ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config_map: Option<String>,
    /// imageio disk id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_id: Option<String>,
    /// VDDK VM UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// VDDK backing file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backing_file: Option<String>,
    /// VDDK thumbprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thumbprint: Option<String>,
    /// Skip TLS verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
    /// VDDK init image.
    #[serde(rename = "initImageURL", default, skip_serializing_if = "Option::is_none")]
    pub init_image_url: Option<String>,
    /// VDDK extra-arguments ConfigMap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<String>,
}

/// `source.upload` / `source.blank`: no fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EmptySource {}

/// `source.http`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    /// The URL (`http`/`https`).
    #[schemars(length(max = 4096))]
    pub url: String,
    /// Secret with `accessKeyId`/`secretKey` (basic auth).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// ConfigMap with CA certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config_map: Option<String>,
    /// Extra header lines `Name: value`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_headers: Option<Vec<String>>,
    /// Secrets whose files hold header lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_extra_headers: Option<Vec<String>>,
    /// Expected checksum `algorithm:hex` (md5, sha1, sha256, sha512).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub checksum: Option<String>,
    /// Skip TLS verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_verify: Option<bool>,
}

/// `source.s3`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Source {
    /// `https://endpoint/bucket/key` (or `s3://bucket/key`).
    #[schemars(length(max = 4096))]
    pub url: String,
    /// Secret with `accessKeyId`/`secretKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// ConfigMap with CA certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config_map: Option<String>,
}

/// `source.gcs`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GcsSource {
    /// `gs://bucket/obj`.
    pub url: String,
    /// Secret with `credentials.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
}

/// `source.registry`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistrySource {
    /// `docker://host/repo[:tag|@digest]` or `oci-archive:…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub url: Option<String>,
    /// OpenShift ImageStream (needs `pullMethod: node`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_stream: Option<String>,
    /// `pod` (default) or `node`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_method: Option<String>,
    /// Secret with `accessKeyId`/`secretKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// ConfigMap with CA certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config_map: Option<String>,
    /// Platform selection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<PlatformOptions>,
}

/// `source.registry.platform`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PlatformOptions {
    /// E.g. `amd64`, `arm64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
}

/// `source.pvc` / `source.snapshot`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct PvcSource {
    /// Namespace of the source.
    pub namespace: String,
    /// Name of the source.
    pub name: String,
}

/// Observed state, exactly as CDI reports it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeStatus {
    /// Name of the PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Current phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DataVolumePhase>,
    /// `N/A`, `45.67%` or `100.0%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Restarts of the worker pod (only grows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<i32>,
    /// Ready, Bound and Running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<DataVolumeCondition>>,
}

/// A DataVolume condition.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeCondition {
    /// `Ready`, `Bound` or `Running`.
    #[serde(rename = "type")]
    pub type_: ConditionType,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// When the condition was last computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// Machine-readable reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Condition types.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, JsonSchema)]
pub enum ConditionType {
    /// The DV is usable.
    Ready,
    /// The PVC is bound.
    Bound,
    /// A worker pod is running.
    Running,
}

/// Condition status values.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    /// Holds.
    True,
    /// Does not hold.
    False,
    /// Not known.
    Unknown,
}

/// `status.phase` values (exact upstream strings).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[allow(missing_docs)]
pub enum DataVolumePhase {
    Pending,
    PVCBound,
    ImportScheduled,
    ImportInProgress,
    CloneScheduled,
    CloneInProgress,
    SnapshotForSmartCloneInProgress,
    CloneFromSnapshotSourceInProgress,
    SmartClonePVCInProgress,
    CSICloneInProgress,
    ExpansionInProgress,
    NamespaceTransferInProgress,
    UploadScheduled,
    UploadReady,
    WaitForFirstConsumer,
    PendingPopulation,
    Succeeded,
    Failed,
    Unknown,
    Paused,
    PrepClaimInProgress,
    RebindInProgress,
}

impl DataVolumePhase {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::PVCBound => "PVCBound",
            Self::ImportScheduled => "ImportScheduled",
            Self::ImportInProgress => "ImportInProgress",
            Self::CloneScheduled => "CloneScheduled",
            Self::CloneInProgress => "CloneInProgress",
            Self::SnapshotForSmartCloneInProgress => "SnapshotForSmartCloneInProgress",
            Self::CloneFromSnapshotSourceInProgress => "CloneFromSnapshotSourceInProgress",
            Self::SmartClonePVCInProgress => "SmartClonePVCInProgress",
            Self::CSICloneInProgress => "CSICloneInProgress",
            Self::ExpansionInProgress => "ExpansionInProgress",
            Self::NamespaceTransferInProgress => "NamespaceTransferInProgress",
            Self::UploadScheduled => "UploadScheduled",
            Self::UploadReady => "UploadReady",
            Self::WaitForFirstConsumer => "WaitForFirstConsumer",
            Self::PendingPopulation => "PendingPopulation",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Unknown => "Unknown",
            Self::Paused => "Paused",
            Self::PrepClaimInProgress => "PrepClaimInProgress",
            Self::RebindInProgress => "RebindInProgress",
        }
    }
}

/// Labels of a PVC or pod, as kube returns them.
pub type Labels = BTreeMap<String, String>;
