//! `CDI` (`cdi.kubevirt.io/v1beta1`, cluster-scoped): the CDI installation the operator reconciles into CDI's
//! components (contract `../shared/specs/cdi.md` §1). `spec.config` is copied into the [`CDIConfig`] named
//! `config`, which the DataVolume controller reads. Only the settings the operator acts on are typed; everything
//! else is preserved.
//!
//! [`CDIConfig`]: super::config::CDIConfig

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::config::CDIConfigSpec;
use crate::kubevirt::wire::{Condition, Extra};

/// Desired state of the CDI installation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "CDI",
    plural = "cdis",
    singular = "cdi",
    shortname = "cdi",
    shortname = "cdis",
    status = "CDIStatus",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    doc = "CDI is the CDI Operator CRD"
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CDISpec {
    /// Pull policy of CDI's images (default `IfNotPresent`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// What deleting this object does while DataVolumes exist: `BlockUninstallIfWorkloadsExist` (the uninstall
    /// waits until none remains) or `RemoveWorkloads` (the default, as upstream's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uninstall_strategy: Option<String>,
    /// The CDIConfig `config` the operator keeps in sync.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<CDIConfigSpec>,
    /// Where CDI's workload pods (importer, upload server, clone source) run; the DataVolume controller puts it
    /// on every worker pod it makes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workloads: Option<NodePlacement>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Upstream's `NodePlacement`: where pods run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePlacement {
    /// Labels a node must carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Scheduling constraints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Taints tolerated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
}

/// Observed state of the CDI installation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CDIStatus {
    /// `Deploying`, `Deployed`, `Deleting`, `Error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `Available`, `Progressing`, `Degraded`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition<String>>>,
    /// The operator's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,
    /// The version being deployed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// The version every component runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_version: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}
