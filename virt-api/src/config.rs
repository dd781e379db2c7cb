//! The cluster settings admission depends on — upstream reads them from the `KubeVirt` CR
//! (`spec.configuration`); here they are the server's configuration (from its environment, read in `main.rs`),
//! with upstream's defaults (`pkg/virt-config/configuration.go`, `virt-config.go`).

use std::collections::BTreeSet;

use crds::kubevirt::vmi::EvictionStrategy;

/// A guest architecture KubeVirt supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Architecture {
    /// x86_64.
    Amd64,
    /// aarch64.
    Arm64,
    /// IBM Z.
    S390x,
}

impl Architecture {
    /// The wire string (`spec.architecture`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Architecture::Amd64 => "amd64",
            Architecture::Arm64 => "arm64",
            Architecture::S390x => "s390x",
        }
    }

    /// The architecture named `s`, if KubeVirt supports it.
    pub fn parse(s: &str) -> Option<Architecture> {
        match s {
            "amd64" => Some(Architecture::Amd64),
            "arm64" => Some(Architecture::Arm64),
            "s390x" => Some(Architecture::S390x),
            _ => None,
        }
    }
}

/// Per-architecture settings (`architectureConfiguration.<arch>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchSettings {
    /// Default machine type.
    pub machine_type: String,
    /// Machine types VMIs may ask for (shell-style patterns).
    pub emulated_machines: Vec<String>,
}

/// The binding of the default pod-network interface (`network.defaultNetworkInterface`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultBinding {
    /// `bridge` (upstream's default).
    Bridge,
    /// `masquerade`.
    Masquerade,
}

impl DefaultBinding {
    /// The wire string.
    pub fn as_str(&self) -> &'static str {
        match self {
            DefaultBinding::Bridge => "bridge",
            DefaultBinding::Masquerade => "masquerade",
        }
    }

    /// The binding named `s`.
    pub fn parse(s: &str) -> Option<DefaultBinding> {
        match s {
            "bridge" => Some(DefaultBinding::Bridge),
            "masquerade" => Some(DefaultBinding::Masquerade),
            _ => None,
        }
    }
}

/// `vmRolloutStrategy`: whether VM changes are applied live (which makes the mutator prepare CPU and memory
/// hotplug) or at the next start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutStrategy {
    /// `LiveUpdate` (upstream's default).
    LiveUpdate,
    /// `Stage`.
    Stage,
}

impl RolloutStrategy {
    /// The strategy named `s`.
    pub fn parse(s: &str) -> Option<RolloutStrategy> {
        match s {
            "LiveUpdate" => Some(RolloutStrategy::LiveUpdate),
            "Stage" => Some(RolloutStrategy::Stage),
            _ => None,
        }
    }
}

/// The feature gates admission consults, with upstream's maturity (`pkg/virt-config/featuregate`): alpha gates are
/// off unless listed, beta gates on unless disabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureGate {
    /// `HostDisk` (alpha): hostDisk volumes.
    HostDisk,
    /// `Sidecar` (alpha): hook sidecars.
    Sidecar,
    /// `DownwardMetrics` (alpha).
    DownwardMetrics,
    /// `VSOCK` (alpha).
    Vsock,
    /// `HostDevices` (alpha).
    HostDevices,
    /// `ExperimentalIgnitionSupport` (alpha).
    Ignition,
    /// `Root` (alpha): launchers run as root.
    Root,
    /// `ReservedOverheadMemlock` (alpha).
    ReservedOverheadMemlock,
    /// `PortRangesSpec` (alpha).
    PortRangesSpec,
    /// `EnableVirtioFsStorageVolumes` (alpha).
    VirtioFsStorageVolumes,
    /// `PasstBinding` (beta).
    PasstBinding,
    /// `DeclarativeHotplugVolumes` (beta).
    DeclarativeHotplugVolumes,
    /// `RebootPolicy` (beta).
    RebootPolicy,
    /// `MigrationPriorityQueue` (beta): migrations may carry a `priority` (set by virt-controller only).
    MigrationPriorityQueue,
    /// `DecentralizedLiveMigration` (alpha): cross-cluster migrations (`sendTo`, `receive`).
    DecentralizedLiveMigration,
}

impl FeatureGate {
    /// The gate's name.
    pub fn name(&self) -> &'static str {
        match self {
            FeatureGate::HostDisk => "HostDisk",
            FeatureGate::Sidecar => "Sidecar",
            FeatureGate::DownwardMetrics => "DownwardMetrics",
            FeatureGate::Vsock => "VSOCK",
            FeatureGate::HostDevices => "HostDevices",
            FeatureGate::Ignition => "ExperimentalIgnitionSupport",
            FeatureGate::Root => "Root",
            FeatureGate::ReservedOverheadMemlock => "ReservedOverheadMemlock",
            FeatureGate::PortRangesSpec => "PortRangesSpec",
            FeatureGate::VirtioFsStorageVolumes => "EnableVirtioFsStorageVolumes",
            FeatureGate::PasstBinding => "PasstBinding",
            FeatureGate::DeclarativeHotplugVolumes => "DeclarativeHotplugVolumes",
            FeatureGate::RebootPolicy => "RebootPolicy",
            FeatureGate::MigrationPriorityQueue => "MigrationPriorityQueue",
            FeatureGate::DecentralizedLiveMigration => "DecentralizedLiveMigration",
        }
    }

    fn beta(&self) -> bool {
        matches!(
            self,
            FeatureGate::PasstBinding
                | FeatureGate::DeclarativeHotplugVolumes
                | FeatureGate::RebootPolicy
                | FeatureGate::MigrationPriorityQueue
        )
    }
}

/// The cluster settings of admission.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Architecture of VMIs that name none (`architectureConfiguration.defaultArchitecture`; upstream: the
    /// virt-api's own).
    pub default_architecture: Architecture,
    /// amd64 settings (default machine type `q35`, machines `q35*`, `pc-q35*`).
    pub amd64: ArchSettings,
    /// arm64 settings (`virt`, `virt*`).
    pub arm64: ArchSettings,
    /// s390x settings (`s390-ccw-virtio`, `s390-ccw-virtio*`).
    pub s390x: ArchSettings,
    /// Binding of the interface added to VMIs without networks (`bridge`).
    pub default_binding: DefaultBinding,
    /// `network.permitBridgeInterfaceOnPodNetwork` (true).
    pub permit_bridge_on_pod_network: bool,
    /// `cpuModel`: the CPU model of VMIs that name none (absent: `host-model`).
    pub cpu_model: Option<String>,
    /// `cpuRequest`: written as the CPU request of VMIs without one, unless it is the default `100m` (absent).
    pub cpu_request: Option<String>,
    /// `evictionStrategy` written into VMIs without one (`None`).
    pub eviction_strategy: Option<EvictionStrategy>,
    /// `vmRolloutStrategy` (`LiveUpdate`).
    pub rollout_strategy: RolloutStrategy,
    /// `liveUpdateConfiguration.maxCpuSockets` (absent).
    pub max_cpu_sockets: Option<u32>,
    /// `liveUpdateConfiguration.maxGuest` (absent).
    pub max_guest: Option<String>,
    /// `liveUpdateConfiguration.maxHotplugRatio` (4).
    pub max_hotplug_ratio: u32,
    /// `developerConfiguration.featureGates`.
    pub feature_gates: BTreeSet<String>,
    /// `developerConfiguration.disabledFeatureGates`.
    pub disabled_feature_gates: BTreeSet<String>,
    /// User names treated as KubeVirt's own components (upstream: the service accounts of virt-handler,
    /// virt-controller, virt-api): they may change a VMI's spec, status and reserved labels.
    pub kubevirt_users: BTreeSet<String>,
    /// Groups whose members are treated as KubeVirt's own components.
    pub kubevirt_groups: BTreeSet<String>,
}

impl Default for Config {
    fn default() -> Self {
        let arch = |machine: &str, machines: &[&str]| ArchSettings {
            machine_type: machine.into(),
            emulated_machines: machines.iter().map(|m| (*m).to_owned()).collect(),
        };
        Config {
            default_architecture: Architecture::Amd64,
            amd64: arch("q35", &["q35*", "pc-q35*"]),
            arm64: arch("virt", &["virt*"]),
            s390x: arch("s390-ccw-virtio", &["s390-ccw-virtio*"]),
            default_binding: DefaultBinding::Bridge,
            permit_bridge_on_pod_network: true,
            cpu_model: None,
            cpu_request: None,
            eviction_strategy: Some(EvictionStrategy::None),
            rollout_strategy: RolloutStrategy::LiveUpdate,
            max_cpu_sockets: None,
            max_guest: None,
            max_hotplug_ratio: 4,
            feature_gates: BTreeSet::new(),
            disabled_feature_gates: BTreeSet::new(),
            kubevirt_users: BTreeSet::new(),
            kubevirt_groups: BTreeSet::new(),
        }
    }
}

impl Config {
    /// The settings of architecture `arch` (`spec.architecture`), if supported.
    pub fn arch(&self, arch: &str) -> Option<&ArchSettings> {
        match Architecture::parse(arch)? {
            Architecture::Amd64 => Some(&self.amd64),
            Architecture::Arm64 => Some(&self.arm64),
            Architecture::S390x => Some(&self.s390x),
        }
    }

    /// Whether `gate` is on.
    pub fn enabled(&self, gate: FeatureGate) -> bool {
        if self.feature_gates.contains(gate.name()) {
            return true;
        }
        if self.disabled_feature_gates.contains(gate.name()) {
            return false;
        }
        gate.beta()
    }

    /// Whether the requester is one of KubeVirt's own components.
    pub fn is_kubevirt(&self, user: &User) -> bool {
        self.kubevirt_users.contains(&user.username) || user.groups.iter().any(|g| self.kubevirt_groups.contains(g))
    }

    /// Whether the requester is virt-controller (upstream's `hasRequestOriginatedFromVirtController`: one of
    /// KubeVirt's components whose user name ends with its ServiceAccount's, `kubevirt-controller`).
    pub fn is_virt_controller(&self, user: &User) -> bool {
        self.is_kubevirt(user) && user.username.ends_with(CONTROLLER_SERVICE_ACCOUNT)
    }
}

/// The ServiceAccount of virt-controller (and of our VM controller, deploy/vm-controller.yaml).
pub const CONTROLLER_SERVICE_ACCOUNT: &str = "kubevirt-controller";

/// Who sent an admission request (`request.userInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    /// The user name (`system:serviceaccount:<ns>:<name>` for service accounts).
    pub username: String,
    /// The groups.
    pub groups: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_follow_their_maturity() {
        let mut c = Config::default();
        assert!(!c.enabled(FeatureGate::HostDisk));
        assert!(c.enabled(FeatureGate::PasstBinding));
        c.feature_gates.insert("HostDisk".into());
        c.disabled_feature_gates.insert("PasstBinding".into());
        assert!(c.enabled(FeatureGate::HostDisk));
        assert!(!c.enabled(FeatureGate::PasstBinding));
    }

    #[test]
    fn kubevirt_components_by_name_or_group() {
        let mut c = Config::default();
        c.kubevirt_users.insert("system:serviceaccount:kubevirt:kubevirt-controller".into());
        c.kubevirt_groups.insert("system:serviceaccounts:kubevirt".into());
        let user = |name: &str, groups: &[&str]| User {
            username: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        assert!(c.is_kubevirt(&user("system:serviceaccount:kubevirt:kubevirt-controller", &[])));
        assert!(c.is_kubevirt(&user("x", &["system:serviceaccounts:kubevirt"])));
        assert!(!c.is_kubevirt(&user("alice", &["system:authenticated"])));
        assert!(c.is_virt_controller(&user("system:serviceaccount:kubevirt:kubevirt-controller", &[])));
        assert!(!c.is_virt_controller(&user(
            "system:serviceaccount:kubevirt:kubevirt-handler",
            &["system:serviceaccounts:kubevirt"]
        )));
        assert!(!c.is_virt_controller(&user("kubevirt-controller", &["system:authenticated"])));
        assert_eq!(c.arch("amd64").map(|a| a.machine_type.as_str()), Some("q35"));
        assert!(c.arch("riscv64").is_none());
    }
}
