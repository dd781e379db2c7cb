//! `spec.volumes[]` of a VirtualMachineInstance (contract §2.3): a name (a DNS label, unique) and exactly one
//! source — containerDisk, persistentVolumeClaim, dataVolume, cloudInitNoCloud, cloudInitConfigDrive, emptyDisk,
//! ephemeral, hostDisk, configMap, secret, serviceAccount, downwardAPI, downwardMetrics, sysprep, memoryDump,
//! containerPath. "Exactly one" is the admission webhook's check; the type accepts any combination so the webhook can
//! refuse it with upstream's message.

use k8s_openapi::api::core::v1::DownwardAPIVolumeFile;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::domain::PullPolicy;
use super::wire::{Extra, Marker, string_enum};

/// One volume: `name` plus its source.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Volume {
    /// Name (a DNS label, unique within the VMI); disks and filesystems refer to it.
    pub name: String,
    /// An image file on the node (gate HostDisk).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_disk: Option<HostDisk>,
    /// A PersistentVolumeClaim in the VMI's namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// cloud-init NoCloud data (an ISO labelled `cidata`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_init_no_cloud: Option<CloudInitSource>,
    /// cloud-init ConfigDrive data (an ISO labelled `config-2`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_init_config_drive: Option<CloudInitSource>,
    /// Windows sysprep answer files from a ConfigMap or Secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sysprep: Option<SysprepSource>,
    /// An ephemeral disk from an OCI image (writes go to a local overlay and are lost on restart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_disk: Option<ContainerDiskSource>,
    /// A PVC used read-only under a local copy-on-write overlay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ephemeral: Option<EphemeralVolumeSource>,
    /// A sparse scratch disk that lives as long as the VMI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub empty_disk: Option<EmptyDiskSource>,
    /// A CDI DataVolume (used like its PVC once populated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<DataVolumeSource>,
    /// A ConfigMap, as an ISO disk or a virtiofs filesystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapVolumeSource>,
    /// A Secret, as an ISO disk or a virtiofs filesystem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<SecretVolumeSource>,
    /// Downward API fields, as an ISO disk or a virtiofs filesystem.
    #[serde(rename = "downwardAPI", skip_serializing_if = "Option::is_none")]
    pub downward_api: Option<DownwardApiVolumeSource>,
    /// A service account's token, as an ISO disk (at most one per VMI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountVolumeSource>,
    /// The downward-metrics disk (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downward_metrics: Option<Marker>,
    /// The PVC a memory dump is written to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_dump: Option<PersistentVolumeClaimVolumeSource>,
    /// A path of the launcher pod's container, shared through virtiofs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_path: Option<ContainerPathVolumeSource>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

impl Volume {
    /// Whether it is a hotpluggable PVC or DataVolume (attached through an attachment pod, not the launcher pod).
    pub fn is_hotpluggable(&self) -> bool {
        self.persistent_volume_claim.as_ref().is_some_and(|p| p.hotpluggable == Some(true))
            || self.data_volume.as_ref().is_some_and(|d| d.hotpluggable == Some(true))
    }

    /// The claim (PVC, or DataVolume and its PVC) a PVC or DataVolume volume uses.
    pub fn claim_name(&self) -> Option<&str> {
        self.persistent_volume_claim
            .as_ref()
            .map(|p| p.claim_name.as_str())
            .or_else(|| self.data_volume.as_ref().map(|d| d.name.as_str()))
    }
}

/// `volumes[].hostDisk`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HostDisk {
    /// Path of the image file on the node.
    pub path: String,
    /// `Disk` (must exist) or `DiskOrCreate`.
    #[serde(rename = "type")]
    pub type_: HostDiskType,
    /// Size of a created image (`DiskOrCreate` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Quantity>,
    /// Shared between VMs (live migration with shared storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `hostDisk.type`.
    pub enum HostDiskType {
        /// The image must exist.
        Disk = "Disk",
        /// The image is created (with `capacity`) when missing.
        DiskOrCreate = "DiskOrCreate",
    }
}

/// `volumes[].persistentVolumeClaim` (also `memoryDump`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PersistentVolumeClaimVolumeSource {
    /// Name of the PVC in the VMI's namespace.
    pub claim_name: String,
    /// Attach read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Hotplugged through an attachment pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hotpluggable: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].cloudInitNoCloud` and `volumes[].cloudInitConfigDrive`: at most one user-data source and one
/// network-data source, at least one of the two; inline payloads are at most 2048 bytes each.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CloudInitSource {
    /// Secret holding the user data (key `userdata` or `userData`).
    #[serde(rename = "secretRef", skip_serializing_if = "Option::is_none")]
    pub user_data_secret_ref: Option<LocalObjectReference>,
    /// User data, base64-encoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_data_base64: Option<String>,
    /// User data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// Secret holding the network data (key `networkdata` or `networkData`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_data_secret_ref: Option<LocalObjectReference>,
    /// Network data, base64-encoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_data_base64: Option<String>,
    /// Network data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_data: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A reference to an object in the same namespace by name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct LocalObjectReference {
    /// Name of the object.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].sysprep`: exactly one of `secret` and `configMap`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SysprepSource {
    /// Secret holding `autounattend.xml` / `unattend.xml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<LocalObjectReference>,
    /// ConfigMap holding `autounattend.xml` / `unattend.xml`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_map: Option<LocalObjectReference>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].containerDisk`: the image's single file under `/disk/` (or `path`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ContainerDiskSource {
    /// Image reference.
    pub image: String,
    /// Pull secret name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<String>,
    /// Path of the disk image inside the container image (default: the single file under `/disk/`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Pull policy; defaulted to `Always` for a `:latest` tag or neither tag nor digest, else `IfNotPresent`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].ephemeral`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct EphemeralVolumeSource {
    /// The PVC used as the read-only backing file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].emptyDisk`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct EmptyDiskSource {
    /// Size of the disk.
    pub capacity: Quantity,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].dataVolume`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DataVolumeSource {
    /// Name of the DataVolume in the VMI's namespace.
    pub name: String,
    /// Hotplugged through an attachment pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hotpluggable: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].configMap`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ConfigMapVolumeSource {
    /// Name of the ConfigMap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The VMI starts without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// ISO volume label (default `cfgdata`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_label: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].secret`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SecretVolumeSource {
    /// Name of the Secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// The VMI starts without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub optional: Option<bool>,
    /// ISO volume label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_label: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].downwardAPI`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DownwardApiVolumeSource {
    /// The fields to expose (Kubernetes' downward API file list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fields: Option<Vec<DownwardAPIVolumeFile>>,
    /// ISO volume label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_label: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].serviceAccount`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ServiceAccountVolumeSource {
    /// Name of the service account (also the launcher pod's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumes[].containerPath`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ContainerPathVolumeSource {
    /// Path in the launcher's compute container.
    pub path: String,
    /// Share read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}
