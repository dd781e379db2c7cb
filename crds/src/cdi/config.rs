//! Cluster-scoped configuration the DataVolume controller reads: [`CDIConfig`] (name `config`) and one
//! [`StorageProfile`] per StorageClass. Shapes follow upstream; the controller fills both `status`es.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LocalObjectReference, ResourceRequirements};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The only CDIConfig object the controller reads.
pub const CDI_CONFIG_NAME: &str = "config";

/// `CDIConfig.spec`: what an administrator sets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "CDIConfig",
    plural = "cdiconfigs",
    singular = "cdiconfig",
    status = "CDIConfigStatus",
    doc = "CDIConfig provides a user configuration for CDI"
)]
#[serde(rename_all = "camelCase")]
pub struct CDIConfigSpec {
    /// Overrides the upload proxy URL reported in status.
    #[serde(rename = "uploadProxyURLOverride", default, skip_serializing_if = "Option::is_none")]
    pub upload_proxy_url_override: Option<String>,
    /// Proxy settings for importer pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_proxy: Option<ImportProxy>,
    /// Storage class of scratch PVCs (default: the target's class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_space_storage_class: Option<String>,
    /// Resources of worker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_resource_requirements: Option<ResourceRequirements>,
    /// Feature gates (`HonorWaitForFirstConsumer`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<Vec<String>>,
    /// Filesystem overhead, globally and per storage class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem_overhead: Option<FilesystemOverhead>,
    /// Default preallocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preallocation: Option<bool>,
    /// Registries reached without TLS verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_registries: Option<Vec<String>>,
    /// Deprecated; accepted and ignored.
    #[serde(rename = "dataVolumeTTLSeconds", default, skip_serializing_if = "Option::is_none")]
    pub data_volume_ttl_seconds: Option<i32>,
    /// Image pull secrets for worker pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Worker log verbosity (`-v=N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_verbosity: Option<i32>,
    /// `Enabled`/`Disabled`; accepted and recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_pvc_rendering: Option<String>,
}

/// `importProxy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportProxy {
    /// `http_proxy` of importer pods.
    #[serde(rename = "HTTPProxy", default, skip_serializing_if = "Option::is_none")]
    pub http_proxy: Option<String>,
    /// `https_proxy` of importer pods.
    #[serde(rename = "HTTPSProxy", default, skip_serializing_if = "Option::is_none")]
    pub https_proxy: Option<String>,
    /// `no_proxy` of importer pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_proxy: Option<String>,
    /// ConfigMap holding the proxy CA (`ca.pem`).
    #[serde(rename = "trustedCAProxy", default, skip_serializing_if = "Option::is_none")]
    pub trusted_ca_proxy: Option<String>,
}

/// `filesystemOverhead`: decimal strings `0`…`1` with up to 3 decimals.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemOverhead {
    /// Global default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^(0(?:\.\d{1,3})?|1)$"))]
    pub global: Option<String>,
    /// Per storage class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<BTreeMap<String, String>>,
}

/// `CDIConfig.status`: the effective configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CDIConfigStatus {
    /// Where `virtctl image-upload` sends data.
    #[serde(rename = "uploadProxyURL", default, skip_serializing_if = "Option::is_none")]
    pub upload_proxy_url: Option<String>,
    /// CA of the upload proxy.
    #[serde(rename = "uploadProxyCA", default, skip_serializing_if = "Option::is_none")]
    pub upload_proxy_ca: Option<String>,
    /// Effective import proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import_proxy: Option<ImportProxy>,
    /// Effective scratch class (only when set explicitly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch_space_storage_class: Option<String>,
    /// Effective worker resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_pod_resource_requirements: Option<ResourceRequirements>,
    /// Effective overhead, globally and for every storage class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filesystem_overhead: Option<FilesystemOverhead>,
    /// Effective default preallocation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preallocation: Option<bool>,
    /// Effective pull secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
}

/// `StorageProfile.spec`: per-class overrides (name = the StorageClass name).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "StorageProfile",
    plural = "storageprofiles",
    singular = "storageprofile",
    status = "StorageProfileStatus",
    doc = "StorageProfile provides a CDI specific recommendation for storage parameters"
)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfileSpec {
    /// Access mode / volume mode pairs, best first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_property_sets: Option<Vec<ClaimPropertySet>>,
    /// `copy`, `snapshot` or `csi-clone` (only `copy` is implemented).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_strategy: Option<String>,
    /// `pvc` or `snapshot`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_import_cron_source_format: Option<String>,
    /// VolumeSnapshotClass for smart clones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_class: Option<String>,
    /// Minimum PVC size of this class (also annotation `cdi.kubevirt.io/minimumSupportedPvcSize`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum_supported_pvc_size: Option<String>,
}

/// One access mode set with its volume mode.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClaimPropertySet {
    /// Access modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_modes: Option<Vec<String>>,
    /// `Filesystem` or `Block`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
}

/// `StorageProfile.status`: the effective recommendation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfileStatus {
    /// The StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// Its provisioner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioner: Option<String>,
    /// Effective claim property sets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_property_sets: Option<Vec<ClaimPropertySet>>,
    /// Effective clone strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clone_strategy: Option<String>,
}
