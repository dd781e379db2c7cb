//! `KubeVirt` (`kubevirt.io/v1`): the cluster's KubeVirt installation and its configuration (contract §0.1). The
//! operator that reconciles it comes later; today the components read `spec.configuration` from it directly. Only
//! the settings our components use are typed; everything else is preserved.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::wire::{Condition, Extra};

/// Desired state of the installation.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "KubeVirt",
    plural = "kubevirts",
    singular = "kubevirt",
    namespaced,
    shortname = "kv",
    shortname = "kvs",
    category = "all",
    status = "KubeVirtStatus",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    doc = "KubeVirt represents the object deploying all KubeVirt resources."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct KubeVirtSpec {
    /// The cluster-wide configuration of KubeVirt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configuration: Option<KubeVirtConfiguration>,
    /// How running VMIs are brought up to date (after a CPU or memory hotplug, a new launcher image).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_update_strategy: Option<WorkloadUpdateStrategy>,
    /// Registry of the components' images (default: the operator's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_registry: Option<String>,
    /// Tag of the components' images (default: the operator's own version). Changing it updates every component,
    /// one after the other.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_tag: Option<String>,
    /// Pull policy of the components' images (default `IfNotPresent`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// What deleting this object does while workloads exist: `BlockUninstallIfWorkloadsExist` (the default: the
    /// uninstall waits until no VMI remains) or `RemoveWorkloads`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uninstall_strategy: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.configuration`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct KubeVirtConfiguration {
    /// Developer settings (software emulation, feature gates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_configuration: Option<DeveloperConfiguration>,
    /// Network settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkConfiguration>,
    /// Default CPU model of VMIs that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// CPU request of launcher pods whose VMI requests none (default 100m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_request: Option<Quantity>,
    /// Live migration settings (§5.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migrations: Option<MigrationConfiguration>,
    /// `LiveUpdate` (default: CPU sockets, guest memory, hotpluggable volumes, placement of a VM's template are
    /// applied to its running VMI) or `Stage` (every template change waits for a restart).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vm_rollout_strategy: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.configuration.developerConfiguration`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DeveloperConfiguration {
    /// Run guests with software emulation (QEMU TCG, `<domain type='qemu'>`) instead of KVM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_emulation: Option<bool>,
    /// Enabled feature gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feature_gates: Option<Vec<String>>,
    /// Disabled feature gates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disabled_feature_gates: Option<Vec<String>>,
    /// vCPUs per physical CPU the launcher pods request (default 10: a vCPU requests 100m).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_allocation_ratio: Option<u32>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.configuration.network`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct NetworkConfiguration {
    /// Binding of the default pod-network interface: `bridge` (default) or `masquerade`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_network_interface: Option<String>,
    /// Whether the bridge binding may be used on the pod network (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permit_bridge_interface_on_pod_network: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.configuration.migrations` (§5.5; a MigrationPolicy overrides the tunables for the VMIs it selects). Absent
/// fields take upstream's defaults ([`MigrationConfiguration::DEFAULT_PARALLEL_PER_CLUSTER`], …).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MigrationConfiguration {
    /// Running migrations allowed in the cluster (default 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_migrations_per_cluster: Option<u32>,
    /// Running outbound migrations allowed per source node (default 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_outbound_migrations_per_node: Option<u32>,
    /// Bandwidth cap per migration (a quantity per second, e.g. `64Mi`; 0: unlimited).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth_per_migration: Option<Quantity>,
    /// Seconds per GiB of memory and copied disk before a migration is aborted (default 150).
    #[serde(rename = "completionTimeoutPerGiB", skip_serializing_if = "Option::is_none")]
    pub completion_timeout_per_gib: Option<i64>,
    /// Seconds without progress before a migration is aborted (default 150).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_timeout: Option<i64>,
    /// Throttle the guest's vCPUs when the copy does not converge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_auto_converge: Option<bool>,
    /// Switch to post-copy on the completion timeout (not implemented: refused by nothing, acted on as false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_post_copy: Option<bool>,
    /// Pause the guest instead of aborting when the completion timeout passes (not implemented: acted on as false).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_workload_disruption: Option<bool>,
    /// Skip libvirt's disk-cache safety check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsafe_migration_override: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

impl MigrationConfiguration {
    /// Upstream's `parallelMigrationsPerCluster` default.
    pub const DEFAULT_PARALLEL_PER_CLUSTER: u32 = 5;
    /// Upstream's `parallelOutboundMigrationsPerNode` default.
    pub const DEFAULT_PARALLEL_OUTBOUND_PER_NODE: u32 = 2;
    /// Upstream's `completionTimeoutPerGiB` default (seconds).
    pub const DEFAULT_COMPLETION_TIMEOUT_PER_GIB: i64 = 150;
    /// Upstream's `progressTimeout` default (seconds).
    pub const DEFAULT_PROGRESS_TIMEOUT: i64 = 150;
}

/// `spec.workloadUpdateStrategy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WorkloadUpdateStrategy {
    /// `LiveMigrate` and/or `Evict` (none by default: running VMIs are left as they are).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_update_methods: Option<Vec<String>>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `workloadUpdateMethods` entry that migrates VMIs needing an update.
pub const WORKLOAD_UPDATE_LIVE_MIGRATE: &str = "LiveMigrate";
/// `vmRolloutStrategy` that applies template changes to running VMIs (the default).
pub const VM_ROLLOUT_LIVE_UPDATE: &str = "LiveUpdate";
/// `developerConfiguration.cpuAllocationRatio` default.
pub const DEFAULT_CPU_ALLOCATION_RATIO: u32 = 10;

/// Observed state of the installation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct KubeVirtStatus {
    /// `Deploying`, `Deployed`, `Deleting`, `Deleted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `Available`, `Progressing`, `Degraded` (and `Created`), as upstream's operator reports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition<String>>>,
    /// The version (image tag) being deployed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_kube_virt_version: Option<String>,
    /// The registry being deployed from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_kube_virt_registry: Option<String>,
    /// The version every component runs (set once the target is fully rolled out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_kube_virt_version: Option<String>,
    /// The registry every component runs from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_kube_virt_registry: Option<String>,
    /// Identifies the deployed configuration (version, registry, rendered settings).
    #[serde(rename = "targetDeploymentID", skip_serializing_if = "Option::is_none")]
    pub target_deployment_id: Option<String>,
    /// The deployment identifier every component runs.
    #[serde(rename = "observedDeploymentID", skip_serializing_if = "Option::is_none")]
    pub observed_deployment_id: Option<String>,
    /// The operator's own version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operator_version: Option<String>,
    /// The object generation this status describes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

impl KubeVirt {
    /// Whether the cluster runs guests with software emulation.
    pub fn use_emulation(&self) -> bool {
        self.spec
            .configuration
            .as_ref()
            .and_then(|c| c.developer_configuration.as_ref())
            .and_then(|d| d.use_emulation)
            .unwrap_or(false)
    }

    /// Whether VM template changes are applied to running VMIs (`vmRolloutStrategy` `LiveUpdate`, the default).
    pub fn live_update(&self) -> bool {
        self.spec
            .configuration
            .as_ref()
            .and_then(|c| c.vm_rollout_strategy.as_deref())
            .unwrap_or(VM_ROLLOUT_LIVE_UPDATE)
            == VM_ROLLOUT_LIVE_UPDATE
    }

    /// `developerConfiguration.cpuAllocationRatio` (default 10; 0 counts as the default).
    pub fn cpu_allocation_ratio(&self) -> u32 {
        self.spec
            .configuration
            .as_ref()
            .and_then(|c| c.developer_configuration.as_ref())
            .and_then(|d| d.cpu_allocation_ratio)
            .filter(|r| *r > 0)
            .unwrap_or(DEFAULT_CPU_ALLOCATION_RATIO)
    }

    /// Whether VMIs that need an update (a CPU or memory hotplug) are live-migrated (`workloadUpdateMethods` holds
    /// `LiveMigrate`).
    pub fn workload_updates_migrate(&self) -> bool {
        self.spec
            .workload_update_strategy
            .as_ref()
            .and_then(|w| w.workload_update_methods.as_ref())
            .is_some_and(|m| m.iter().any(|m| m == WORKLOAD_UPDATE_LIVE_MIGRATE))
    }

    /// `spec.configuration.migrations`, empty (all defaults) when absent.
    pub fn migrations(&self) -> MigrationConfiguration {
        self.spec.configuration.as_ref().and_then(|c| c.migrations.clone()).unwrap_or_default()
    }
}

/// The configuration in effect: upstream allows one `KubeVirt` per cluster; with several, the oldest counts.
pub fn effective<'a>(all: impl IntoIterator<Item = &'a KubeVirt>) -> Option<&'a KubeVirt> {
    all.into_iter().filter(|kv| kv.metadata.deletion_timestamp.is_none()).min_by(|a, b| {
        a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp).then(a.metadata.name.cmp(&b.metadata.name))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_emulation_is_read_and_unknown_settings_survive() {
        let kv: KubeVirt = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"},
            "spec": {"configuration": {"developerConfiguration": {"useEmulation": true},
                     "network": {"defaultNetworkInterface": "masquerade"}, "migrations": {"parallelMigrationsPerCluster": 5}},
                     "imagePullPolicy": "IfNotPresent"}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(kv.use_emulation());
        let back = serde_json::to_value(&kv).unwrap_or_default();
        assert_eq!(back["spec"]["configuration"]["migrations"]["parallelMigrationsPerCluster"], 5);
        assert_eq!(back["spec"]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(effective([&kv]).map(|k| k.use_emulation()), Some(true));
        assert!(!KubeVirt::new("x", KubeVirtSpec::default()).use_emulation());
    }

    #[test]
    fn live_update_settings_default_as_upstreams() {
        let plain = KubeVirt::new("x", KubeVirtSpec::default());
        assert!(plain.live_update());
        assert_eq!(plain.cpu_allocation_ratio(), 10);
        assert!(!plain.workload_updates_migrate());
        let kv: KubeVirt = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"},
            "spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["Evict", "LiveMigrate"], "batchEvictionSize": 3},
                     "configuration": {"vmRolloutStrategy": "Stage", "developerConfiguration": {"cpuAllocationRatio": 4}}}
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!kv.live_update());
        assert_eq!(kv.cpu_allocation_ratio(), 4);
        assert!(kv.workload_updates_migrate());
        let back = serde_json::to_value(&kv).unwrap_or_default();
        assert_eq!(back["spec"]["workloadUpdateStrategy"]["batchEvictionSize"], 3);
    }
}
