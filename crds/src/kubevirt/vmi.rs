//! `VirtualMachineInstance` (`kubevirt.io/v1`, also served as `v1alpha3`): a running virtual machine — one
//! virt-launcher pod, one libvirt domain (contract §2).
//!
//! Field names and JSON shapes are upstream's (`staging/src/kubevirt.io/api/core/v1/types.go`, `schema.go`). The
//! VMI has **no status subresource** (§0.1): `status` is an ordinary field, written with ordinary updates/patches of
//! the object (a mutating webhook reverts status edits by non-KubeVirt users). Every object keeps fields this version
//! does not model in `extra`, and the CRD schema preserves them (see [`super::wire`]).
//!
//! Go's non-`omitempty` fields map to required Rust fields (`name`, `image`, `claimName`, …; upstream's schema
//! requires them too) and Go's `omitempty`/pointer fields to `Option`s that are omitted when `None`, so a round trip
//! writes back exactly what was read. Two fields upstream's Go types always write are `Option`s here and mean the
//! same when absent: `domain.resources` and `domain.features.acpi` (`{}`); `domain.devices` is always written.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ExecAction, HTTPGetAction, PodDNSConfig, TCPSocketAction, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::domain::{DomainSpec, Machine};
use super::network::Network;
use super::volume::Volume;
use super::wire::{Condition, Extra, Marker, string_enum};

/// Desired state of a VirtualMachineInstance. Immutable for users after creation (admission).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstance",
    plural = "virtualmachineinstances",
    singular = "virtualmachineinstance",
    namespaced,
    shortname = "vmi",
    shortname = "vmis",
    category = "all",
    status = "VirtualMachineInstanceStatus",
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"IP","type":"string","jsonPath":".status.interfaces[0].ipAddress"}"#,
    printcolumn = r#"{"name":"NodeName","type":"string","jsonPath":".status.nodeName"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type=='Ready')].status"}"#,
    printcolumn = r#"{"name":"Live-Migratable","type":"string","jsonPath":".status.conditions[?(@.type=='LiveMigratable')].status","priority":1}"#,
    printcolumn = r#"{"name":"Paused","type":"string","jsonPath":".status.conditions[?(@.type=='Paused')].status","priority":1}"#,
    doc = "VirtualMachineInstance is *the* VirtualMachineInstance Definition. It represents a virtual machine in the runtime environment of kubernetes."
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceSpec {
    /// Priority class of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// The virtual hardware.
    pub domain: DomainSpec,
    /// Node selector of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Affinity of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// Scheduler of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// Service account of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Tolerations of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Topology spread constraints of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// What a node drain does: `None`, `LiveMigrate`, `LiveMigrateIfPossible` or `External`; absent means the cluster
    /// default (`KubeVirt.spec.configuration.evictionStrategy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eviction_strategy: Option<EvictionStrategy>,
    /// `Paused`: start the guest paused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_strategy: Option<StartStrategy>,
    /// Seconds between the ACPI shutdown request and destroying the guest (default 30).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// Volumes (at most 256), each with exactly one source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
    /// Liveness probe (a failing one stops the VMI).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Probe>,
    /// Readiness probe (drives the Ready condition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Probe>,
    /// Guest hostname (default: the VMI name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Subdomain: the pod's FQDN becomes `<hostname>.<subdomain>.<namespace>.svc.<cluster domain>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// Networks (at most 256), each with exactly one source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub networks: Option<Vec<Network>>,
    /// DNS policy of the launcher pod (`ClusterFirst`, `Default`, `None`, `ClusterFirstWithHostNet`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,
    /// DNS configuration of the launcher pod (at most 3 nameservers, 6 searches).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDNSConfig>,
    /// SSH keys and passwords injected into the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_credentials: Option<Vec<AccessCredential>>,
    /// Guest architecture (`amd64`, `arm64`, `s390x`; defaulted from the cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// DRA resource claims the launcher pod references (gpus/hostDevices/networks refer to them by name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<VirtualMachineInstanceResourceClaim>>,
    /// PVCs attached to the launcher pod for utility use (memory dump, backup), not to the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utility_volumes: Option<Vec<UtilityVolume>>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `spec.evictionStrategy`.
    pub enum EvictionStrategy {
        /// The VMI is shut down on eviction.
        None = "None",
        /// Evictions are blocked; the VMI is live-migrated away.
        LiveMigrate = "LiveMigrate",
        /// Live-migrate when the VMI is migratable, else shut down.
        LiveMigrateIfPossible = "LiveMigrateIfPossible",
        /// Evictions are blocked; an external controller acts on `status.evacuationNodeName`.
        External = "External",
    }
}

string_enum! {
    /// `spec.startStrategy`.
    pub enum StartStrategy {
        /// Start the guest paused.
        Paused = "Paused",
    }
}

/// `spec.resourceClaims[]`: a DRA claim of the launcher pod (exactly one of the two sources).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceResourceClaim {
    /// Name gpus/hostDevices/networks refer to.
    pub name: String,
    /// An existing ResourceClaim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claim_name: Option<String>,
    /// A ResourceClaimTemplate a claim is created from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_claim_template_name: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.utilityVolumes[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct UtilityVolume {
    /// Name (unique among volumes and utility volumes).
    pub name: String,
    /// The PVC.
    pub claim_name: String,
    /// Attach read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// `MemoryDump` or `Backup`.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A liveness or readiness probe: exactly one action (`exec` and `guestAgentPing` go through the guest agent) and
/// the usual thresholds (defaults: timeout 1, period 10, success 1, failure 3).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Probe {
    /// Run a command in the guest (through the guest agent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    /// Ping the guest agent (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_agent_ping: Option<Marker>,
    /// HTTP GET against the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HTTPGetAction>,
    /// TCP connect to the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TCPSocketAction>,
    /// Seconds after start before the first probe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
    /// Seconds before a probe times out (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Seconds between probes (default 10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period_seconds: Option<i32>,
    /// Consecutive successes that count as success after a failure (default 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub success_threshold: Option<i32>,
    /// Consecutive failures that count as failure (default 3).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<i32>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.accessCredentials[]`: exactly one of `sshPublicKey` and `userPassword`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct AccessCredential {
    /// SSH public keys from a Secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssh_public_key: Option<SshPublicKeyAccessCredential>,
    /// User passwords from a Secret (guest agent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_password: Option<UserPasswordAccessCredential>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `accessCredentials[].sshPublicKey`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SshPublicKeyAccessCredential {
    /// Where the keys come from.
    pub source: AccessCredentialSource,
    /// How they reach the guest.
    pub propagation_method: SshPublicKeyPropagationMethod,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `accessCredentials[].userPassword`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct UserPasswordAccessCredential {
    /// Where the passwords come from.
    pub source: AccessCredentialSource,
    /// How they reach the guest.
    pub propagation_method: UserPasswordPropagationMethod,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// The source of an access credential.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct AccessCredentialSource {
    /// A Secret in the VMI's namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<AccessCredentialSecretSource>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `source.secret`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct AccessCredentialSecretSource {
    /// Name of the Secret.
    pub secret_name: String,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// How SSH keys reach the guest: exactly one of the three.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SshPublicKeyPropagationMethod {
    /// Through the cloud-init ConfigDrive metadata (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_drive: Option<Marker>,
    /// Through the cloud-init NoCloud metadata (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_cloud: Option<Marker>,
    /// At runtime through the guest agent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qemu_guest_agent: Option<QemuGuestAgentSshPublicKeyPropagation>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `propagationMethod.qemuGuestAgent` of SSH keys.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct QemuGuestAgentSshPublicKeyPropagation {
    /// Guest users whose `authorized_keys` receive the keys.
    pub users: Vec<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// How passwords reach the guest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct UserPasswordPropagationMethod {
    /// At runtime through the guest agent (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qemu_guest_agent: Option<Marker>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Observed state of a VirtualMachineInstance (§2.5), written by KubeVirt's components.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceStatus {
    /// The node the VMI runs on (also label `kubevirt.io/nodeName`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// A CamelCase reason for the current state (e.g. `NodeUnresponsive`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Conditions (Ready, LiveMigratable, Paused, AgentConnected, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<VirtualMachineInstanceCondition>>,
    /// Lifecycle phase: Pending, Scheduling, Scheduled, Running, Succeeded, Failed, WaitingForSync, Unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<VirtualMachineInstancePhase>,
    /// When each phase was entered (admission seeds `Pending`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_transition_timestamps: Option<Vec<VirtualMachineInstancePhaseTransitionTimestamp>>,
    /// The guest's network interfaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interfaces: Option<Vec<VirtualMachineInstanceNetworkInterface>>,
    /// Guest OS information from the guest agent. Upstream's Go type always writes it (`{}` when unknown).
    #[serde(rename = "guestOSInfo", skip_serializing_if = "Option::is_none")]
    pub guest_os_info: Option<VirtualMachineInstanceGuestOsInfo>,
    /// The state of the current (or last) live migration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_state: Option<VirtualMachineInstanceMigrationState>,
    /// `LiveMigration` or `BlockMigration`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_method: Option<MigrationMethod>,
    /// `Unix`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_transport: Option<MigrationTransport>,
    /// QoS class of the launcher pod (`Guaranteed`, `Burstable`, `BestEffort`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<QosClass>,
    /// Image of the current launcher pod's `compute` container (cleared when final).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub launcher_container_image_version: Option<String>,
    /// The node a drain wants the VMI off (set by the eviction webhook; internal).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evacuation_node_name: Option<String>,
    /// Pod UID → node name of every pod the VMI controls (two during a migration).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active_pods: Option<BTreeMap<String, String>>,
    /// Per-volume status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_status: Option<Vec<VolumeStatus>>,
    /// Kernel boot container info.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_boot_status: Option<KernelBootStatus>,
    /// `frozen` while a filesystem freeze was requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs_freeze_status: Option<String>,
    /// Topology hints (TSC frequency) for scheduling migration targets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology_hints: Option<TopologyHints>,
    /// The VM ControllerRevision this VMI was started from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_machine_revision_name: Option<String>,
    /// UID the launcher runs as: 107 when non-root, 0 as root. Upstream always writes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_user: Option<u64>,
    /// The VSOCK CID allocated to the guest.
    #[serde(rename = "VSOCKCID", skip_serializing_if = "Option::is_none")]
    pub vsock_cid: Option<u32>,
    /// The launcher pod's actual SELinux context.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selinux_context: Option<String>,
    /// The machine type in effect (the expanded QEMU alias).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
    /// The CPU topology in effect (differs from the spec during CPU hotplug).
    #[serde(rename = "currentCPUTopology", skip_serializing_if = "Option::is_none")]
    pub current_cpu_topology: Option<CpuTopology>,
    /// Guest memory at boot, current, requested, and the computed overhead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStatus>,
    /// Fields this version does not model (e.g. `migratedVolumes`, `changedBlockTracking`), kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `status.phase` (upstream's exact strings).
    pub enum VirtualMachineInstancePhase {
        /// Unset (upstream's `VmPhaseUnset`).
        Unset = "",
        /// Accepted by the system; no pod yet.
        Pending = "Pending",
        /// The launcher pod exists but is not yet scheduled and running.
        Scheduling = "Scheduling",
        /// The launcher pod runs; the node agent takes over.
        Scheduled = "Scheduled",
        /// The guest runs.
        Running = "Running",
        /// The guest stopped voluntarily.
        Succeeded = "Succeeded",
        /// The guest crashed, vanished, or the VMI was deleted before it ever started.
        Failed = "Failed",
        /// A migration target waiting for synchronisation from its source.
        WaitingForSync = "WaitingForSync",
        /// The state could not be obtained.
        Unknown = "Unknown",
    }
}

impl VirtualMachineInstancePhase {
    /// `Succeeded` or `Failed`: the VMI never runs again.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// `status.phaseTransitionTimestamps[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstancePhaseTransitionTimestamp {
    /// The phase entered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<VirtualMachineInstancePhase>,
    /// When.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase_transition_timestamp: Option<Time>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.conditions[]` of a VMI.
pub type VirtualMachineInstanceCondition = Condition<VirtualMachineInstanceConditionType>;

string_enum! {
    /// VMI condition types (upstream's exact strings).
    pub enum VirtualMachineInstanceConditionType {
        /// DataVolumes are being provisioned (Pending/WaitForFirstConsumer).
        Provisioning = "Provisioning",
        /// The VMI serves requests (copied from the launcher pod's Ready condition).
        Ready = "Ready",
        /// False with reason/message when syncing the VMI with its domain failed.
        Synchronized = "Synchronized",
        /// The guest is paused.
        Paused = "Paused",
        /// The guest agent is connected.
        AgentConnected = "AgentConnected",
        /// The guest agent applied the access credentials.
        AccessCredentialsSynchronized = "AccessCredentialsSynchronized",
        /// The guest agent's version is not supported.
        AgentVersionNotSupported = "AgentVersionNotSupported",
        /// The VMI can be live-migrated.
        LiveMigratable = "LiveMigratable",
        /// The VMI's storage can be live-migrated.
        StorageLiveMigratable = "StorageLiveMigratable",
        /// vCPU hot(un)plug in progress.
        HotVcpuChange = "HotVCPUChange",
        /// Memory hot(un)plug in progress.
        HotMemoryChange = "HotMemoryChange",
        /// The volume set is being updated.
        VolumesChange = "VolumesChange",
        /// Whether every DataVolume of the VMI is ready.
        DataVolumesReady = "DataVolumesReady",
        /// A decentralized live migration failed.
        DecentralizedLiveMigrationFailure = "DecentralizedLiveMigrationFailure",
        /// An automatic migration is required.
        MigrationRequired = "MigrationRequired",
        /// An eviction was requested.
        EvictionRequested = "EvictionRequested",
        /// The guest runs with software emulation.
        SoftwareEmulation = "SoftwareEmulation",
        /// Copied from the launcher pod (False/`Unschedulable` drives `ErrorUnschedulable`).
        PodScheduled = "PodScheduled",
    }
}

string_enum! {
    /// Condition status values.
    pub enum ConditionStatus {
        /// Holds.
        True = "True",
        /// Does not hold.
        False = "False",
        /// Not known.
        Unknown = "Unknown",
    }
}

/// `status.interfaces[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceNetworkInterface {
    /// The interface's (first) IP address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// MAC address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The network (and interface) name of the spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Every IP address (the first equals `ipAddress`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_addresses: Option<Vec<String>>,
    /// Name of the pod interface.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_interface_name: Option<String>,
    /// Name of the interface inside the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interface_name: Option<String>,
    /// Where the data came from: `domain`, `guest-agent`, `multus-status`, comma-joined (see [`info_source`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info_source: Option<String>,
    /// Queues allocated by multiqueue.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_count: Option<i32>,
    /// Operational link state: `up` or `down`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_state: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Values joined (with `,`) in `status.interfaces[].infoSource`.
pub mod info_source {
    /// Reported from the libvirt domain.
    pub const DOMAIN: &str = "domain";
    /// Reported by the guest agent.
    pub const GUEST_AGENT: &str = "guest-agent";
    /// Reported from the Multus network status annotation.
    pub const MULTUS_STATUS: &str = "multus-status";
}

/// `status.guestOSInfo` (from the guest agent).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceGuestOsInfo {
    /// OS name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Kernel release.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_release: Option<String>,
    /// OS version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// OS pretty name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pretty_name: Option<String>,
    /// OS version id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// Kernel version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_version: Option<String>,
    /// Machine (architecture) of the guest OS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// OS id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.migrationState` (§5.4): the fields the VM status and the migration controllers read are typed; the
/// per-side `sourceState`/`targetState` and `migrationConfiguration` are kept in `extra`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VirtualMachineInstanceMigrationState {
    /// When the migration began.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the migration ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<Time>,
    /// When the target node saw the domain active.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_node_domain_ready_timestamp: Option<Time>,
    /// The target node saw the domain start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_node_domain_detected: Option<bool>,
    /// Address of the target node for the migration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_node_address: Option<String>,
    /// Ports opened for the migration on the target node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_direct_migration_node_ports: Option<BTreeMap<String, i64>>,
    /// The target node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_node: Option<String>,
    /// The target pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_pod: Option<String>,
    /// UID of the target's hotplug attachment pod.
    #[serde(rename = "targetAttachmentPodUID", skip_serializing_if = "Option::is_none")]
    pub target_attachment_pod_uid: Option<String>,
    /// The source node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_node: Option<String>,
    /// The source pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_pod: Option<String>,
    /// The migration completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<bool>,
    /// The migration failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<bool>,
    /// An abort was requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort_requested: Option<bool>,
    /// `Succeeded`, `Failed` or `Aborting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abort_status: Option<String>,
    /// Why the migration failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// UID of the VirtualMachineInstanceMigration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_uid: Option<String>,
    /// `PreCopy`, `PostCopy` or `Paused`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The MigrationPolicy applied, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_policy_name: Option<String>,
    /// The configuration the migration runs with (the cluster's with the policy's laid over it), frozen at the
    /// hand-off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_configuration: Option<super::config::MigrationConfiguration>,
    /// Dedicated CPUs on the target node.
    #[serde(rename = "targetCPUSet", skip_serializing_if = "Option::is_none")]
    pub target_cpu_set: Option<Vec<i64>>,
    /// NUMA topology on the target node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_node_topology: Option<String>,
    /// `Pod` or `Migration` (a dedicated migration network).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration_network_type: Option<String>,
    /// Memory overhead of the target launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_memory_overhead: Option<Quantity>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `status.migrationMethod`.
    pub enum MigrationMethod {
        /// Disks are shared; only memory and state move.
        LiveMigration = "LiveMigration",
        /// Disks are copied to the target too.
        BlockMigration = "BlockMigration",
    }
}

string_enum! {
    /// `status.migrationTransport`.
    pub enum MigrationTransport {
        /// Over unix sockets proxied between the nodes.
        Unix = "Unix",
    }
}

string_enum! {
    /// Pod QoS classes (Kubernetes' values).
    pub enum QosClass {
        /// Requests equal limits for every resource.
        Guaranteed = "Guaranteed",
        /// Some requests.
        Burstable = "Burstable",
        /// No requests or limits.
        BestEffort = "BestEffort",
    }
}

/// `status.volumeStatus[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VolumeStatus {
    /// The volume's name.
    pub name: String,
    /// The guest device (`vda`, `sda`, …).
    pub target: String,
    /// Phase (mostly of hotplug).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<VolumePhase>,
    /// Why the volume is in this phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The PVC as the node agent needs it at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_info: Option<PersistentVolumeClaimInfo>,
    /// The hotplug attachment pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hotplug_volume: Option<HotplugVolumeStatus>,
    /// Size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Memory-dump information.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_dump_volume: Option<DomainMemoryDumpInfo>,
    /// containerDisk information.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_disk_volume: Option<ChecksumInfo>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `volumeStatus[].phase`.
    pub enum VolumePhase {
        /// Cannot be attached yet.
        Pending = "Pending",
        /// Bound, can be attached.
        Bound = "Bound",
        /// Attached to the node.
        AttachedToNode = "AttachedToNode",
        /// Mounted into the launcher pod.
        MountedToPod = "MountedToPod",
        /// Ready for the guest.
        Ready = "Ready",
        /// Being detached.
        Detaching = "Detaching",
        /// Unmounted from the launcher pod.
        UnMountedFromPod = "UnMountedFromPod",
        /// The memory dump completed.
        MemoryDumpCompleted = "MemoryDumpCompleted",
        /// The memory dump is in progress.
        MemoryDumpInProgress = "MemoryDumpInProgress",
        /// The memory dump failed.
        MemoryDumpFailed = "MemoryDumpFailed",
    }
}

/// `volumeStatus[].persistentVolumeClaimInfo`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PersistentVolumeClaimInfo {
    /// The PVC's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Its access modes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_modes: Option<Vec<String>>,
    /// `Filesystem` or `Block`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
    /// Capacity from the PVC status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<BTreeMap<String, Quantity>>,
    /// Requests from the PVC spec.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, Quantity>>,
    /// The storage is preallocated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preallocated: Option<bool>,
    /// Filesystem overhead reserved when sizing `disk.img` (`0` … `1`, e.g. `0.055`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filesystem_overhead: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumeStatus[].hotplugVolume`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HotplugVolumeStatus {
    /// The attachment pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attach_pod_name: Option<String>,
    /// Its UID.
    #[serde(rename = "attachPodUID", skip_serializing_if = "Option::is_none")]
    pub attach_pod_uid: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `volumeStatus[].memoryDumpVolume`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DomainMemoryDumpInfo {
    /// When the dump started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the dump completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<Time>,
    /// The PVC the memory was dumped to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// The dump file's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_file_name: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A deprecated checksum record (`containerDiskVolume`, `kernelInfo`, `initrdInfo`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ChecksumInfo {
    /// Deprecated checksum of the artifact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checksum: Option<u32>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.kernelBootStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct KernelBootStatus {
    /// The kernel image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_info: Option<ChecksumInfo>,
    /// The initrd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd_info: Option<ChecksumInfo>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.topologyHints`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct TopologyHints {
    /// TSC frequency of the source node in Hz.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tsc_frequency: Option<i64>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A CPU topology (`status.currentCPUTopology`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CpuTopology {
    /// Cores per socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// Sockets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockets: Option<u32>,
    /// Threads per core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.memory`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MemoryStatus {
    /// Guest memory at boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_at_boot: Option<Quantity>,
    /// Guest memory now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_current: Option<Quantity>,
    /// Guest memory requested (hotplug target).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_requested: Option<Quantity>,
    /// The computed memory overhead of the launcher pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_overhead: Option<Quantity>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

impl VirtualMachineInstanceStatus {
    /// The condition of type `t`, if present.
    pub fn condition(&self, t: &VirtualMachineInstanceConditionType) -> Option<&VirtualMachineInstanceCondition> {
        self.conditions.as_deref().unwrap_or_default().iter().find(|c| &c.type_ == t)
    }

    /// Sets `c`, replacing the condition of its type ([`super::wire::set_condition`]).
    pub fn set_condition(&mut self, c: VirtualMachineInstanceCondition, now: &Time) {
        super::wire::set_condition(&mut self.conditions, c, now);
    }

    /// Removes the condition of type `t` (and an emptied list).
    pub fn remove_condition(&mut self, t: &VirtualMachineInstanceConditionType) {
        super::wire::remove_condition(&mut self.conditions, t);
    }

    /// Moves to `phase`, recording its transition time in `phaseTransitionTimestamps` once per phase.
    pub fn set_phase(&mut self, phase: VirtualMachineInstancePhase, now: &Time) {
        if self.phase.as_ref() == Some(&phase) {
            return;
        }
        self.phase = Some(phase.clone());
        let stamps = self.phase_transition_timestamps.get_or_insert_default();
        if !stamps.iter().any(|s| s.phase.as_ref() == Some(&phase)) {
            stamps.push(VirtualMachineInstancePhaseTransitionTimestamp {
                phase: Some(phase),
                phase_transition_timestamp: Some(now.clone()),
                ..Default::default()
            });
        }
    }
}

impl VirtualMachineInstance {
    /// The phase, [`VirtualMachineInstancePhase::Unset`] without status or phase.
    pub fn phase(&self) -> VirtualMachineInstancePhase {
        self.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or(VirtualMachineInstancePhase::Unset)
    }

    /// Whether the VMI reached `Succeeded` or `Failed`.
    pub fn is_final(&self) -> bool {
        self.phase().is_final()
    }

    /// Whether its `LiveMigratable` condition is True (upstream's `IsMigratable`).
    pub fn is_migratable(&self) -> bool {
        self.status
            .as_ref()
            .and_then(|s| s.condition(&VirtualMachineInstanceConditionType::LiveMigratable))
            .is_some_and(|c| c.status == ConditionStatus::True)
    }

    /// The node a drain wants the VMI off (`status.evacuationNodeName`, set by the eviction webhook), if any
    /// (upstream's `IsMarkedForEviction`).
    pub fn evacuation_node(&self) -> Option<&str> {
        self.status.as_ref()?.evacuation_node_name.as_deref().filter(|n| !n.is_empty())
    }

    /// Its eviction strategy: its own, else the cluster's `cluster` (upstream's `VMIEvictionStrategy`).
    pub fn eviction_strategy<'a>(&'a self, cluster: Option<&'a EvictionStrategy>) -> Option<&'a EvictionStrategy> {
        self.spec.eviction_strategy.as_ref().or(cluster)
    }

    /// Whether an eviction of its pod should move it by live migration (upstream's `VMIMigratableOnEviction`):
    /// `LiveMigrate`, or `LiveMigrateIfPossible` while it is migratable.
    pub fn migrates_on_eviction(&self, cluster: Option<&EvictionStrategy>) -> bool {
        match self.eviction_strategy(cluster) {
            Some(EvictionStrategy::LiveMigrate) => true,
            Some(EvictionStrategy::LiveMigrateIfPossible) => self.is_migratable(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_new_vmi_serialises_with_group_version_kind_and_no_status() {
        let vmi = VirtualMachineInstance::new("v", VirtualMachineInstanceSpec::default());
        let v = serde_json::to_value(&vmi).unwrap_or_default();
        assert_eq!(v["apiVersion"], json!("kubevirt.io/v1"));
        assert_eq!(v["kind"], json!("VirtualMachineInstance"));
        // `domain.devices` is always written (upstream requires it); nothing else is invented.
        assert_eq!(v["spec"], json!({"domain": {"devices": {}}}));
        assert!(v.get("status").is_none());
        assert_eq!(vmi.phase(), VirtualMachineInstancePhase::Unset);
        assert!(!vmi.is_final());
    }

    #[test]
    fn conditions_keep_their_transition_time_until_the_status_changes() {
        use k8s_openapi::jiff::Timestamp;
        let t0 = Time(Timestamp::UNIX_EPOCH);
        let t1 = Time(Timestamp::from_second(60).unwrap_or_else(|e| panic!("{e}")));
        let ready = |status, reason| {
            VirtualMachineInstanceCondition::new(VirtualMachineInstanceConditionType::Ready, status, reason, reason)
        };
        let mut s = VirtualMachineInstanceStatus::default();
        s.set_condition(ready(ConditionStatus::False, "PodNotExists"), &t0);
        s.set_condition(ready(ConditionStatus::False, "GuestNotRunning"), &t1);
        let c = s.condition(&VirtualMachineInstanceConditionType::Ready).cloned().unwrap_or_default();
        assert_eq!(c.reason.as_deref(), Some("GuestNotRunning"));
        assert_eq!((c.last_transition_time, c.last_probe_time), (Some(t0.clone()), Some(t1.clone())), "still False");
        s.set_condition(ready(ConditionStatus::True, ""), &t1);
        let c = s.condition(&VirtualMachineInstanceConditionType::Ready).cloned().unwrap_or_default();
        assert_eq!(c.last_transition_time, Some(t1.clone()));
        s.remove_condition(&VirtualMachineInstanceConditionType::Ready);
        assert!(s.conditions.is_none());

        s.set_phase(VirtualMachineInstancePhase::Pending, &t0);
        s.set_phase(VirtualMachineInstancePhase::Scheduling, &t1);
        s.set_phase(VirtualMachineInstancePhase::Scheduling, &t1);
        assert_eq!(s.phase_transition_timestamps.as_ref().map(Vec::len), Some(2));
        assert_eq!(s.phase, Some(VirtualMachineInstancePhase::Scheduling));
    }

    #[test]
    fn phase_and_conditions_are_read_from_the_status() {
        let mut vmi = VirtualMachineInstance::new("v", VirtualMachineInstanceSpec::default());
        vmi.status = Some(VirtualMachineInstanceStatus {
            phase: Some(VirtualMachineInstancePhase::Failed),
            conditions: Some(vec![VirtualMachineInstanceCondition {
                type_: VirtualMachineInstanceConditionType::Paused,
                status: ConditionStatus::False,
                reason: Some(contracts::kubevirt::consts::reason::PAUSED_BY_USER.into()),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(vmi.is_final());
        let status = vmi.status.as_ref().unwrap_or_else(|| panic!("status"));
        assert!(status.condition(&VirtualMachineInstanceConditionType::Ready).is_none());
        let paused = status.condition(&VirtualMachineInstanceConditionType::Paused);
        assert_eq!(paused.and_then(|c| c.reason.as_deref()), Some("PausedByUser"));
        let v = serde_json::to_value(status).unwrap_or_default();
        assert_eq!(
            v,
            json!({"phase": "Failed", "conditions": [{"type": "Paused", "status": "False", "reason": "PausedByUser"}]})
        );
    }

    #[test]
    fn acronym_field_names_are_upstreams() {
        let status: VirtualMachineInstanceStatus = serde_json::from_value(json!({
            "guestOSInfo": {"id": "x"}, "VSOCKCID": 3, "currentCPUTopology": {"sockets": 1},
            "volumeStatus": [{"name": "a", "target": "vda", "hotplugVolume": {"attachPodUID": "u"}}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status.vsock_cid, Some(3));
        assert!(status.guest_os_info.is_some() && status.current_cpu_topology.is_some());
        assert!(status.extra.is_empty(), "{:?}", status.extra);
        let spec: VirtualMachineInstanceSpec = serde_json::from_value(json!({
            "domain": {"devices": {"autoattachVSOCK": true, "disks": [{"name": "d", "dedicatedIOThread": true,
                       "disk": {"readonly": true}}]}},
            "volumes": [{"name": "d", "downwardAPI": {"fields": []}}],
            "networks": [{"name": "n", "pod": {"vmNetworkCIDR": "10.0.2.0/24", "vmIPv6NetworkCIDR": "fd10:0:2::/120"}}]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let devices = &spec.domain.devices;
        assert_eq!(devices.autoattach_vsock, Some(true));
        let disk = devices.disks.as_deref().and_then(|d| d.first()).unwrap_or_else(|| panic!("disk"));
        assert_eq!((disk.dedicated_io_thread, disk.disk.as_ref().and_then(|d| d.read_only)), (Some(true), Some(true)));
        assert!(disk.extra.is_empty() && devices.extra.is_empty());
        let volume = spec.volumes.as_deref().and_then(|v| v.first()).unwrap_or_else(|| panic!("volume"));
        assert!(volume.downward_api.is_some() && volume.extra.is_empty());
        let pod = spec.networks.as_deref().and_then(|n| n.first()).and_then(|n| n.pod.as_ref());
        assert_eq!(pod.and_then(|p| p.vm_ipv6_network_cidr.as_deref()), Some("fd10:0:2::/120"));
        assert!(pod.is_some_and(|p| p.extra.is_empty() && p.vm_network_cidr.is_some()));
    }
}
