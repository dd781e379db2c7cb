//! KubeVirt's exact wire constants: API group and versions, label and annotation keys, finalizers. Upstream
//! tooling (virtctl, UIs, the scheduler through node labels) compares them byte for byte, so the values are copied
//! from the contract (`../shared/specs/kubevirt.md` §0, §1.2, §2.8, §5, §6, §7.1) and never computed.

/// API group of the core resources (VirtualMachine, VirtualMachineInstance, …).
pub const GROUP: &str = "kubevirt.io";
/// The storage version.
pub const VERSION: &str = "v1";
/// The older version that is still served (deprecated; old manifests still say it).
pub const VERSION_V1ALPHA3: &str = "v1alpha3";
/// Every served version, storage version first.
pub const VERSIONS: [&str; 2] = [VERSION, VERSION_V1ALPHA3];
/// Warning the API server returns for `v1alpha3` requests.
pub const V1ALPHA3_DEPRECATION: &str =
    "kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release.";
/// API group of the aggregated subresource API (start, stop, console, …).
pub const SUBRESOURCES_GROUP: &str = "subresources.kubevirt.io";
/// API group of MigrationPolicy (cluster-scoped).
pub const MIGRATIONS_GROUP: &str = "migrations.kubevirt.io";
/// API group of instancetypes and preferences.
pub const INSTANCETYPE_GROUP: &str = "instancetype.kubevirt.io";
/// API group of VirtualMachinePools.
pub const POOL_GROUP: &str = "pool.kubevirt.io";
/// Websocket subprotocol of console, VNC and port-forward streams.
pub const PLAIN_STREAM_PROTOCOL: &str = "plain.kubevirt.io";
/// Port of the node agent's (virt-handler's) TLS stream server.
pub const NODE_AGENT_STREAM_PORT: u16 = 8186;
/// UID (and GID) of the non-root launcher's `qemu` user; containerDisk files are owned by it.
pub const QEMU_UID: i64 = 107;

/// Label keys.
pub mod label {
    /// Component marker: `virt-launcher` on launcher pods.
    pub const KUBEVIRT: &str = "kubevirt.io";
    /// Value of [`KUBEVIRT`] on launcher pods.
    pub const VIRT_LAUNCHER: &str = "virt-launcher";
    /// On launcher pods: the UID of the VMI that created them (target-pod anti-affinity uses it).
    pub const CREATED_BY: &str = "kubevirt.io/created-by";
    /// On launcher pods: the VMI's name, or a hash of it when longer than 63 characters (`virtctl expose` selects it).
    pub const VMI_ID: &str = "vmi.kubevirt.io/id";
    /// On launcher pods: the guest hostname (deprecated).
    pub const VM_NAME: &str = "vm.kubevirt.io/name";
    /// On VMIs: the node the VMI runs on (node agents filter by it).
    pub const NODE_NAME: &str = "kubevirt.io/nodeName";
    /// On VMIs during a migration: the target node (the target node agent picks the VMI up by it).
    pub const MIGRATION_TARGET_NODE_NAME: &str = "kubevirt.io/migrationTargetNodeName";
    /// On VMIs: the launcher image is older than the installed one (drives workload updates).
    pub const OUTDATED_LAUNCHER_IMAGE: &str = "kubevirt.io/outdatedLauncherImage";
    /// On migrations: the VMI being migrated (`virtctl migrate-cancel` lists by it).
    pub const VMI_NAME: &str = "kubevirt.io/vmi-name";
    /// On target launcher pods: the UID of the migration.
    pub const MIGRATION_JOB_UID: &str = "kubevirt.io/migrationJobUID";
    /// Selector label of VMI ReplicaSet examples.
    pub const VM_REPLICA_SET: &str = "kubevirt.io/vmReplicaSet";
    /// On nodes: the node agent runs there and accepts VMIs (`"true"`/`"false"`); launcher pods select it.
    pub const SCHEDULABLE: &str = "kubevirt.io/schedulable";
    /// Leftover PodDisruptionBudgets of older releases carry it (they are deleted).
    pub const MIGRATION_NAME: &str = "kubevirt.io/migrationName";
}

/// Annotation keys.
pub mod ann {
    /// On launcher pods: the VMI (domain) name.
    pub const DOMAIN: &str = "kubevirt.io/domain";
    /// On launcher pods: the container `kubectl logs/exec` picks (`compute`).
    pub const DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";
    /// On launcher pods: migrations use a unix socket transport (`"true"`).
    pub const MIGRATION_TRANSPORT_UNIX: &str = "kubevirt.io/migrationTransportUnix";
    /// On launcher pods and VMIs: the computed memory overhead in bytes.
    pub const MEMORY_OVERHEAD_BYTES: &str = "kubevirt.io/memory-overhead-bytes";
    /// On VMIs created from a VM: the VM generation they reflect.
    pub const VM_GENERATION: &str = "kubevirt.io/vm-generation";
    /// On VMs: `"false"` defers creating the dataVolumeTemplates' DataVolumes until the VM starts.
    pub const IMMEDIATE_DATA_VOLUME_CREATION: &str = "kubevirt.io/immediate-data-volume-creation";
    /// On VMIs of a `WaitAsReceiver` VM: the VMI is a migration target (`"true"`).
    pub const CREATE_MIGRATION_TARGET: &str = "kubevirt.io/create-migration-target";
    /// On VMs: the run strategy to restore after a receiving migration.
    pub const RESTORE_RUN_STRATEGY: &str = "kubevirt.io/restore-run-strategy";
    /// On VM templates: the PCI topology version (`v3` where PCIe hotplug is supported).
    pub const PCI_TOPOLOGY_VERSION: &str = "kubevirt.io/pci-topology-version";
    /// On target launcher pods: the migration's name.
    pub const MIGRATION_JOB_NAME: &str = "kubevirt.io/migrationJobName";
    /// On migrations: seconds a target pod may stay Pending+Unschedulable (default 300).
    pub const MIGRATION_UNSCHEDULABLE_POD_TIMEOUT: &str = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds";
    /// On migrations: seconds a target pod may stay Pending for any reason (default 900).
    pub const MIGRATION_PENDING_POD_TIMEOUT: &str = "kubevirt.io/migrationPendingPodTimeoutSeconds";
    /// On migrations created by the evacuation controller: the node being drained.
    pub const EVACUATION_MIGRATION: &str = "kubevirt.io/evacuationMigration";
    /// On VMIs: allows live migration with a bridge binding on the pod network (any value).
    pub const ALLOW_POD_BRIDGE_NETWORK_LIVE_MIGRATION: &str = "kubevirt.io/allow-pod-bridge-network-live-migration";
    /// On VMIs: image volumes skip the digest-resolution init containers.
    pub const IMAGE_VOLUME_SKIP_DIGEST_RESOLUTION: &str = "kubevirt.io/image-volume-skip-digest-resolution";
    /// On nodes: the node agent's heartbeat timestamp.
    pub const HEARTBEAT: &str = "kubevirt.io/heartbeat";
    /// On VMIs: hook sidecars to run in the launcher pod (gate Sidecar).
    pub const HOOK_SIDECARS: &str = "hooks.kubevirt.io/hookSidecars";
}

/// Finalizers.
pub mod finalizer {
    /// On VMs: the VM controller deletes the VMI before the VM goes.
    pub const VIRTUAL_MACHINE_CONTROLLER: &str = "kubevirt.io/virtualMachineControllerFinalize";
    /// On VMIs: kept until the launcher pod is gone.
    pub const FOREGROUND_DELETE_VIRTUAL_MACHINE: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
    /// On migrations: kept until the migration is cleaned up.
    pub const MIGRATION_JOB: &str = "kubevirt.io/migrationJobFinalize";
}

/// Launcher pod readiness gate: the guest is not paused.
pub const READINESS_GATE_UNPAUSED: &str = "kubevirt.io/virtual-machine-unpaused";
/// Taint key of the deprecated taint-driven evacuation (`nodeDrainTaintKey` default).
pub const DRAIN_TAINT: &str = "kubevirt.io/drain";

/// Device-plugin resources a launcher pod requests.
pub mod resource {
    /// `/dev/kvm`.
    pub const KVM: &str = "devices.kubevirt.io/kvm";
    /// `/dev/net/tun`.
    pub const TUN: &str = "devices.kubevirt.io/tun";
    /// `/dev/vhost-net`.
    pub const VHOST_NET: &str = "devices.kubevirt.io/vhost-net";
}
