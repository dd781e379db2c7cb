//! KubeVirt's exact wire constants: API group and versions, label and annotation keys, finalizers, condition
//! reasons. Upstream tooling (virtctl, UIs, the scheduler through node labels) compares them byte for byte, so the
//! values are copied from the contract (`../shared/specs/kubevirt.md` §0, §1.2, §2.5, §2.8, §3, §5, §6, §7.1) and
//! never computed.

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
    /// Value of [`KUBEVIRT`] on hotplug attachment pods.
    pub const HOTPLUG_DISK: &str = "hotplug-disk";
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
    /// On objects the operator installs: the install strategy they belong to (reserved on VMIs).
    pub const INSTALL_STRATEGY: &str = "kubevirt.io/install-strategy";
}

/// Annotation keys.
pub mod ann {
    /// On launcher pods: the secondary (Multus) networks, a JSON list of `{name, namespace, interface}`.
    pub use crate::cdi::consts::ann::MULTUS_NETWORKS;
    /// On launcher pods, written by Multus: every attachment's `{name, interface, ips, mac, default}` (JSON list).
    pub const MULTUS_NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
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
    /// On VMIs: who asked for the eviction that marked it (`descheduler`); cleared when it migrated.
    pub const EVICTION_SOURCE: &str = "kubevirt.io/eviction-source";
    /// On Eviction objects: the component that sent it (the descheduler writes `sigs.k8s.io/descheduler`).
    pub const REQUESTED_BY: &str = "requested-by";
    /// On migrations created by the evacuation controller: the node being drained.
    pub const EVACUATION_MIGRATION: &str = "kubevirt.io/evacuationMigration";
    /// On migrations created because a running VMI needs an update (CPU or memory hotplug), value empty.
    pub const WORKLOAD_UPDATE_MIGRATION: &str = "kubevirt.io/workloadUpdateMigration";
    /// On VMIs: allows live migration with a bridge binding on the pod network (any value).
    pub const ALLOW_POD_BRIDGE_NETWORK_LIVE_MIGRATION: &str = "kubevirt.io/allow-pod-bridge-network-live-migration";
    /// On VMIs: image volumes skip the digest-resolution init containers.
    pub const IMAGE_VOLUME_SKIP_DIGEST_RESOLUTION: &str = "kubevirt.io/image-volume-skip-digest-resolution";
    /// On nodes: the node agent's heartbeat timestamp.
    pub const HEARTBEAT: &str = "kubevirt.io/heartbeat";
    /// On VMIs: hook sidecars to run in the launcher pod (gate Sidecar).
    pub const HOOK_SIDECARS: &str = "hooks.kubevirt.io/hookSidecars";
    /// On VMIs: Ignition data for the guest (gate ExperimentalIgnitionSupport).
    pub const IGNITION_DATA: &str = "kubevirt.io/ignitiondata";
    /// `"true"` on a VMI's temporary pod that only binds its WaitForFirstConsumer claims.
    pub const EPHEMERAL_PROVISIONING: &str = "kubevirt.io/ephemeral-provisioning";
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

/// Reasons on VMI conditions and `status.reason` (contract §2.5); the condition *types* are the
/// `VirtualMachineInstanceConditionType` enum of `crds::kubevirt`.
pub mod reason {
    /// `Ready=False`: no launcher pod (or only a temporary one).
    pub const POD_NOT_EXISTS: &str = "PodNotExists";
    /// `Ready=False`: the launcher pod is terminating or down.
    pub const POD_TERMINATING: &str = "PodTerminating";
    /// `Ready=False`: the VMI is not Running.
    pub const GUEST_NOT_RUNNING: &str = "GuestNotRunning";
    /// `Ready=False`: the launcher pod reports no Ready condition.
    pub const POD_CONDITION_MISSING: &str = "PodConditionMissing";
    /// `Paused=True`: paused through the pause subresource.
    pub const PAUSED_BY_USER: &str = "PausedByUser";
    /// `Paused=True`: paused by the migration monitor (post-copy / auto-converge).
    pub const PAUSED_BY_MIGRATION_MONITOR: &str = "PausedByMigrationMonitor";
    /// `Paused=True`: paused after an I/O error.
    pub const PAUSED_IO_ERROR: &str = "PausedIOError";
    /// `Synchronized=False`: a PVC of the VMI does not exist.
    pub const FAILED_PVC_NOT_FOUND: &str = "FailedPvcNotFound";
    /// `Synchronized=False`: a containerDisk image cannot be pulled.
    pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
    /// `Synchronized=False`: pulling a containerDisk image is backing off.
    pub const IMAGE_PULL_BACK_OFF: &str = "ImagePullBackOff";
    /// `PodScheduled=False` (copied from the launcher pod).
    pub const UNSCHEDULABLE: &str = "Unschedulable";
    /// `status.reason` with phase Failed: the node stopped reporting.
    pub const NODE_UNRESPONSIVE: &str = "NodeUnresponsive";
    /// `DataVolumesReady=True`.
    pub const ALL_DVS_READY: &str = "AllDVsReady";
    /// `DataVolumesReady=False`.
    pub const NOT_ALL_DVS_READY: &str = "NotAllDVsReady";
    /// `VolumesChange`: the volume update was cancelled.
    pub const VOLUMES_CHANGE_CANCELLATION: &str = "VolumesChangeCancellation";
    /// `MigrationRequired`: a live update needs a migration.
    pub const AUTO_MIGRATION_DUE_TO_LIVE_UPDATE: &str = "AutoMigrationDueToLiveUpdate";
    /// `MigrationRequired`: the automatic migration is pending.
    pub const AUTO_MIGRATION_PENDING: &str = "AutoMigrationPending";
    /// `EvictionRequested=True`.
    pub const EVICTION_REQUESTED: &str = "EvictionRequested";

    /// `LiveMigratable=False` reasons (first failing check wins, contract §3).
    pub mod not_migratable {
        /// A disk is not shared (RWO PVC, hostDisk, …).
        pub const DISKS: &str = "DisksNotLiveMigratable";
        /// The pod-network interface's binding cannot migrate.
        pub const INTERFACE: &str = "InterfaceNotLiveMigratable";
        /// Hotplugged volumes (defined, not emitted today).
        pub const HOTPLUG: &str = "HotplugNotLiveMigratable";
        /// host-model CPU without node support (upstream's spelling, sic).
        pub const CPU_MODE: &str = "CPUModeLiveMigratable";
        /// virtiofs filesystems (defined, not emitted today).
        pub const VIRTIOFS: &str = "VirtIOFSNotLiveMigratable";
        /// PCI host devices or GPUs.
        pub const HOST_DEVICE: &str = "HostDeviceNotLiveMigratable";
        /// AMD SEV.
        pub const SEV: &str = "SEVNotLiveMigratable";
        /// IBM Secure Execution.
        pub const SECURE_EXECUTION: &str = "SecureExecutionNotLiveMigratable";
        /// Intel TDX.
        pub const TDX: &str = "TDXNotLiveMigratable";
        /// Hyper-V reenlightenment without a known TSC frequency.
        pub const NO_TSC_FREQUENCY: &str = "NoTSCFrequencyNotLiveMigratable";
        /// `features.hypervPassthrough`.
        pub const HYPERV_PASSTHROUGH: &str = "HypervPassthroughNotLiveMigratable";
        /// SCSI persistent reservation (the storage variant).
        pub const PERSISTENT_RESERVATION: &str = "PersistentReservationNotLiveMigratable";
        /// Decentralized migration is not possible (details in the message).
        pub const DECENTRALIZED: &str = "DecentralizedNotLiveMigratable";
        /// Generic (details in the message).
        pub const NOT_MIGRATABLE: &str = "NotMigratable";
    }
}

/// Value of `ann::PCI_TOPOLOGY_VERSION` the VMI mutator writes when the machine type supports PCIe hotplug.
pub const PCI_TOPOLOGY_VERSION_V3: &str = "v3";
/// Seconds between the ACPI shutdown request and destroying the guest when `terminationGracePeriodSeconds` is
/// absent (upstream's `DefaultGracePeriodSeconds`; the mutator does not write it, the consumers apply it).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

/// The VMI admission webhooks (upstream's virt-api): names, HTTPS paths, webhook configuration and Service names
/// (upstream `pkg/virt-operator/resource/generate/components/webhooks.go`). The names are what `kubectl` prints in
/// `admission webhook "…" denied the request`.
pub mod webhook {
    /// Mutating webhook defaulting VMIs on CREATE (and reverting status edits on UPDATE).
    pub const VMI_MUTATOR: &str = "virtualmachineinstances-mutator.kubevirt.io";
    /// Validating webhook of VMI CREATE.
    pub const VMI_CREATE_VALIDATOR: &str = "virtualmachineinstances-create-validator.kubevirt.io";
    /// Validating webhook of VMI UPDATE.
    pub const VMI_UPDATE_VALIDATOR: &str = "virtualmachineinstances-update-validator.kubevirt.io";
    /// HTTPS path of [`VMI_MUTATOR`].
    pub const VMI_MUTATE_PATH: &str = "/virtualmachineinstances-mutate";
    /// HTTPS path of [`VMI_CREATE_VALIDATOR`].
    pub const VMI_VALIDATE_CREATE_PATH: &str = "/virtualmachineinstances-validate-create";
    /// HTTPS path of [`VMI_UPDATE_VALIDATOR`].
    pub const VMI_VALIDATE_UPDATE_PATH: &str = "/virtualmachineinstances-validate-update";
    /// Validating webhook of VM CREATE and UPDATE.
    pub const VM_VALIDATOR: &str = "virtualmachine-validator.kubevirt.io";
    /// HTTPS path of [`VM_VALIDATOR`].
    pub const VM_VALIDATE_PATH: &str = "/virtualmachines-validate";
    /// Validating webhook of VMIRS CREATE and UPDATE.
    pub const VMIRS_VALIDATOR: &str = "virtualmachinereplicaset-validator.kubevirt.io";
    /// HTTPS path of [`VMIRS_VALIDATOR`].
    pub const VMIRS_VALIDATE_PATH: &str = "/virtualmachinereplicaset-validate";
    /// Mutating webhook of VirtualMachineInstanceMigration CREATE (selector label and finalizer).
    pub const MIGRATION_MUTATOR: &str = "migrations-mutator.kubevirt.io";
    /// Validating webhook of VirtualMachineInstanceMigration CREATE.
    pub const MIGRATION_CREATE_VALIDATOR: &str = "migration-create-validator.kubevirt.io";
    /// Validating webhook of VirtualMachineInstanceMigration UPDATE.
    pub const MIGRATION_UPDATE_VALIDATOR: &str = "migration-update-validator.kubevirt.io";
    /// HTTPS path of [`MIGRATION_MUTATOR`].
    pub const MIGRATION_MUTATE_PATH: &str = "/migration-mutate-create";
    /// HTTPS path of [`MIGRATION_CREATE_VALIDATOR`].
    pub const MIGRATION_VALIDATE_CREATE_PATH: &str = "/migration-validate-create";
    /// HTTPS path of [`MIGRATION_UPDATE_VALIDATOR`].
    pub const MIGRATION_VALIDATE_UPDATE_PATH: &str = "/migration-validate-update";
    /// Validating webhook of `pods/eviction` for launcher pods (denies and marks the VMI for evacuation).
    pub const LAUNCHER_EVICTION_INTERCEPTOR: &str = "virt-launcher-eviction-interceptor.kubevirt.io";
    /// Validating webhook of `pods/eviction` for hotplug attachment pods (denied while their VMI exists).
    pub const HOTPLUG_EVICTION_INTERCEPTOR: &str = "hotplug-pod-eviction-interceptor.kubevirt.io";
    /// HTTPS path of both eviction webhooks.
    pub const POD_EVICTION_VALIDATE_PATH: &str = "/pod-eviction-validate";
    /// Name of the MutatingWebhookConfiguration holding the mutators.
    pub const MUTATING_CONFIGURATION: &str = "virt-api-mutator";
    /// Name of the ValidatingWebhookConfiguration holding the validators.
    pub const VALIDATING_CONFIGURATION: &str = "virt-api-validator";
    /// The Service (in the install namespace) the webhooks are reached through.
    pub const SERVICE: &str = "virt-api";
}
