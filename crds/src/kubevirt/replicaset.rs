//! `VirtualMachineInstanceReplicaSet` (`kubevirt.io/v1`, also served as `v1alpha3`): N interchangeable VMIs from
//! one template, replaced (never restarted) when they finish (contract §4). Status and scale subresources, so
//! `kubectl scale vmirs` works.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::vm::VirtualMachineInstanceTemplateSpec;
use super::wire::{Condition, Extra, string_enum};

/// Desired state of a VirtualMachineInstanceReplicaSet.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstanceReplicaSet",
    plural = "virtualmachineinstancereplicasets",
    singular = "virtualmachineinstancereplicaset",
    namespaced,
    shortname = "vmirs",
    shortname = "vmirss",
    category = "all",
    status = "VirtualMachineInstanceReplicaSetStatus",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.labelSelector"
    ),
    printcolumn = r#"{"name":"Desired","type":"integer","description":"Number of desired VirtualMachineInstances","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Current","type":"integer","description":"Number of managed and not final or deleted VirtualMachineInstances","jsonPath":".status.replicas"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","description":"Number of managed VirtualMachineInstances which are ready to receive traffic","jsonPath":".status.readyReplicas"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "VirtualMachineInstance is *the* VirtualMachineInstance Definition. It represents a virtual machine in the runtime environment of kubernetes."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceReplicaSetSpec {
    /// How many VMIs (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Which VMIs belong to the set; must match the template's labels.
    pub selector: LabelSelector,
    /// The VMIs' template.
    pub template: VirtualMachineInstanceTemplateSpec,
    /// No scaling and no replacement while true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Observed state of a VirtualMachineInstanceReplicaSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceReplicaSetStatus {
    /// Active VMIs (not final, not being deleted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready VMIs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// ReplicaFailure, ReplicaPaused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<VirtualMachineInstanceReplicaSetCondition>>,
    /// The selector in string form (for `scale` and HPAs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.conditions[]` of a VMIRS.
pub type VirtualMachineInstanceReplicaSetCondition = Condition<ReplicaSetConditionType>;

string_enum! {
    /// VMIRS condition types (upstream's exact strings).
    pub enum ReplicaSetConditionType {
        /// Creating or deleting a VMI failed.
        ReplicaFailure = "ReplicaFailure",
        /// The set is paused.
        ReplicaPaused = "ReplicaPaused",
    }
}

impl VirtualMachineInstanceReplicaSet {
    /// `spec.replicas`, default 1.
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    /// Whether `spec.paused` is true.
    pub fn paused(&self) -> bool {
        self.spec.paused == Some(true)
    }
}

/// Whether `labels` satisfy `selector` (matchLabels and matchExpressions, as Kubernetes evaluates them); an empty
/// selector matches nothing (a ReplicaSet must select something).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let match_labels = selector.match_labels.clone().unwrap_or_default();
    let exprs = selector.match_expressions.clone().unwrap_or_default();
    if match_labels.is_empty() && exprs.is_empty() {
        return false;
    }
    match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
        && exprs.iter().all(|e| {
            let values = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
                "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
                "Exists" => labels.contains_key(&e.key),
                "DoesNotExist" => !labels.contains_key(&e.key),
                _ => false,
            }
        })
}
