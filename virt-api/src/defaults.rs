//! VMI defaulting on CREATE (contract §2.6; upstream `pkg/defaults`, `api/core/v1/defaults.go` and the VMI
//! mutator `pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go`), as one pure function:
//! [`default_vmi`]. The mutating webhook diffs its result against the request to build the JSON patch.
//!
//! Steps, in upstream's order:
//!
//! 1. architecture (the cluster's default), machine type (per architecture: `q35`, `virt`, `s390-ccw-virtio`);
//! 2. resources: a CPU limit alone also becomes the request; a non-default cluster `cpuRequest` is written;
//! 3. `memory.guest` from `requests.memory`, else `limits.memory`, else the hugepage size;
//! 4. CPU topology: without cores/sockets/threads, sockets = CPU limit (else request, else 1), cores = threads = 1;
//! 5. containerDisk `imagePullPolicy`: `Always` for `:latest` or neither tag nor digest, else `IfNotPresent`;
//! 6. `evictionStrategy` from the cluster (`None` by default);
//! 7. without networks and interfaces (and `autoattachPodInterface` not false): network `default` (`pod: {}`) and
//!    interface `default` with the cluster's default binding (`bridge`, or `masquerade`);
//! 8. a `disk` entry for every volume without a disk or filesystem of its name;
//! 9. `firmware` (with a fresh `uuid`) and `features` (with `acpi.enabled: true`) objects, the object defaults:
//!    `disk: {}` for a disk without target, cdrom `readonly: true` + `tray: closed`, inputs `bus: usb` +
//!    `type: tablet`, probe thresholds (timeout 1, period 10, success 1, failure 3), `enabled: true` of every
//!    present feature switch (APIC, Hyper-V, SMM, pvspinlock, `blockSize.matchVolume`, ramFB), spinlock retries
//!    4096, timers `present: true`;
//! 10. Hyper-V dependencies ([`crate::hyperv`]);
//! 11. per architecture: disk bus (`sata` on amd64, `virtio` on arm64/s390x), watchdog action `reset`; arm64 also
//!     `host-passthrough` and EFI boot without Secure Boot; s390x ACPI off;
//! 12. CPU `model`: the cluster's `cpuModel`, else `host-model`;
//! 13. `status.memory` (`guestAtBoot`/`guestCurrent`/`guestRequested` = guest) and `status.currentCPUTopology`;
//! 14. with the `LiveUpdate` rollout strategy (upstream's default) and not on arm64: `cpu.maxSockets` (cluster
//!     `maxCpuSockets`, else sockets × `maxHotplugRatio`, capped at 512 vCPUs) and `memory.maxGuest` (cluster
//!     `maxGuest`, else guest × ratio) when memory hotplug is possible (amd64, at least 1Gi, 2Mi-aligned, no
//!     realtime/NUMA passthrough/launchSecurity);
//! 15. annotation `kubevirt.io/pci-topology-version: v3` when the machine type is PCIe (q35, virt);
//! 16. `status.runtimeUser: 107` (0 with the `Root` gate), finalizer `kubevirt.io/foregroundDeleteVirtualMachine`,
//!     `status.phase: Pending` and its `phaseTransitionTimestamps` entry.
//!
//! Defaulting a defaulted VMI changes nothing (the finalizer and the `Pending` entry are added only when missing,
//! where upstream appends): a second mutator on the same object — the stack's and a test's, or a reinvocation —
//! agrees with the first.
//!
//! Upstream's mutator replaces `spec`, `metadata` and `status` with what its Go types serialise, so two things
//! follow that are not "defaults" as such and are reproduced too: `domain.resources: {}` and `status.guestOSInfo:
//! {}` are always present, and quantities in `domain.resources`, `domain.memory` and volume capacities are written
//! in canonical form (`1.5Gi` → `1536Mi`).
//!
//! Not done, on purpose:
//!
//! * `VirtualMachineInstancePreset`s (deprecated upstream; their CRD is not served here, so none can match);
//! * `terminationGracePeriodSeconds`: upstream's mutator does not write it either; every consumer applies 30 when
//!   it is absent (`contracts::kubevirt::consts::DEFAULT_GRACE_PERIOD_SECONDS`);
//! * annotations copied from the `KubeVirt` CR (`emulator-thread-complete-to-even-parity`), TDX's QGS socket path:
//!   there is no `KubeVirt` CR yet.

use std::collections::BTreeSet;

use crds::kubevirt::consts::{PCI_TOPOLOGY_VERSION_V3, QEMU_UID, ann, finalizer};
use crds::kubevirt::domain::{
    Bootloader, Cpu, Disk, DiskBus, DiskTarget, Efi, FeatureState, Features, Firmware, InputBus, InputType, Interface,
    Machine, Memory, PullPolicy, ResourceRequirements, TrayState, WatchdogAction, WatchdogDevice,
};
use crds::kubevirt::network::{DEFAULT_NETWORK_NAME, Network, PodNetwork};
use crds::kubevirt::vmi::{
    CpuTopology, MemoryStatus, Probe, VirtualMachineInstance, VirtualMachineInstanceGuestOsInfo,
    VirtualMachineInstancePhase, VirtualMachineInstancePhaseTransitionTimestamp, VirtualMachineInstanceSpec,
    VirtualMachineInstanceStatus,
};
use crds::kubevirt::wire::Marker;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::config::{Architecture, Config, DefaultBinding, FeatureGate, RolloutStrategy};
use crate::hyperv;
use crate::quantity::{Format, Quantity, canonicalize};

/// Upstream's default cluster `cpuRequest`, which is not written into VMIs.
pub const DEFAULT_CPU_REQUEST: &str = "100m";
/// The CPU model of VMIs that name none (upstream's `DefaultCPUModel`).
pub const DEFAULT_CPU_MODEL: &str = crds::kubevirt::domain::CPU_MODEL_HOST_MODEL;
/// Most vCPUs the CPU-hotplug ceiling may reach.
pub const MAX_VCPUS: u64 = 512;
/// Memory hotplug granularity (2 MiB; 1 GiB with 1Gi hugepages).
const HOTPLUG_BLOCK: i64 = 2 << 20;
const HOTPLUG_BLOCK_1G_HUGEPAGES: i64 = 1 << 30;
/// Memory hotplug needs at least this much guest memory (1 GiB).
const HOTPLUG_MIN_GUEST: i64 = 1 << 30;

/// Errors of defaulting (upstream answers them as a plain admission error, code 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The default binding is `bridge` but the cluster does not permit bridge on the pod network.
    #[error("bridge interface is not enabled in kubevirt-config")]
    BridgeNotPermitted,
}

/// The values defaulting needs that are not a function of the VMI: the time and a fresh firmware UUID.
#[derive(Debug, Clone, PartialEq)]
pub struct Fresh {
    /// Now (the `Pending` phase transition).
    pub now: Time,
    /// A random UUID for `firmware.uuid`.
    pub uuid: String,
}

impl Fresh {
    /// The current time and a random (version 4) UUID.
    pub fn generate() -> Fresh {
        Fresh { now: Time(k8s_openapi::jiff::Timestamp::now()), uuid: uuid_v4(rand::random()) }
    }
}

/// Formats 16 random bytes as a version 4 UUID.
pub fn uuid_v4(mut b: [u8; 16]) -> String {
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// What upstream's VM mutator defaults in a VM (or VMIRS) template before the template is validated: the
/// architecture (the cluster's default) and the machine type for it.
pub fn default_template_spec(spec: &mut VirtualMachineInstanceSpec, config: &Config) {
    if spec.architecture.as_deref().unwrap_or_default().is_empty() {
        spec.architecture = Some(config.default_architecture.as_str().into());
    }
    set_machine_type(spec, config);
}

/// Upstream's `SetDefaultVirtualMachineInstanceSpec` (steps 1–8 of the [module docs](self)), quantities written
/// as Go writes them: what both the VMI mutator and `expand-spec` do to a spec.
pub fn default_instance_spec(spec: &mut VirtualMachineInstanceSpec, config: &Config) -> Result<(), Error> {
    canonicalize_quantities(spec);
    default_template_spec(spec, config);
    set_resource_requests(spec, config);
    set_guest_memory(spec);
    set_cpu_topology(spec);
    set_pull_policies(spec);
    if spec.eviction_strategy.is_none() {
        spec.eviction_strategy.clone_from(&config.eviction_strategy);
    }
    set_default_network(spec, config)?;
    add_volume_disks(spec);
    Ok(())
}

/// The VMI as upstream's mutator leaves it on CREATE (see the [module docs](self) for the steps).
pub fn default_vmi(
    vmi: &VirtualMachineInstance,
    config: &Config,
    fresh: &Fresh,
) -> Result<VirtualMachineInstance, Error> {
    let mut vmi = vmi.clone();
    default_instance_spec(&mut vmi.spec, config)?;
    let spec = &mut vmi.spec;
    // SetDefaultVirtualMachineInstance
    let arch = Architecture::parse(spec.architecture.as_deref().unwrap_or_default());
    if arch == Some(Architecture::S390x) {
        let acpi = spec.domain.features.get_or_insert_with(Features::default).acpi.get_or_insert_with(Default::default);
        acpi.enabled.get_or_insert(false);
    }
    set_object_defaults(spec, fresh);
    hyperv::set_dependencies(
        &mut spec.domain.features.get_or_insert_with(Features::default).hyperv,
        &mut spec.domain.cpu,
    );
    set_arch_defaults(spec, arch);
    let cpu = spec.domain.cpu.get_or_insert_with(Cpu::default);
    if cpu.model.as_deref().unwrap_or_default().is_empty() {
        cpu.model = Some(config.cpu_model.clone().unwrap_or_else(|| DEFAULT_CPU_MODEL.into()));
    }
    let status = vmi.status.get_or_insert_with(VirtualMachineInstanceStatus::default);
    if let Some(guest) = vmi.spec.domain.memory.as_ref().and_then(|m| m.guest.clone()) {
        status.memory = Some(MemoryStatus {
            guest_at_boot: Some(guest.clone()),
            guest_current: Some(guest.clone()),
            guest_requested: Some(guest),
            ..Default::default()
        });
    }
    if let Some(cpu) = &vmi.spec.domain.cpu
        && status.current_cpu_topology.is_none()
    {
        let nz = |v: Option<u32>| v.filter(|v| *v != 0);
        status.current_cpu_topology = Some(CpuTopology {
            sockets: nz(cpu.sockets),
            cores: nz(cpu.cores),
            threads: nz(cpu.threads),
            ..Default::default()
        });
    }
    if arch != Some(Architecture::Arm64) && config.rollout_strategy == RolloutStrategy::LiveUpdate {
        set_cpu_hotplug(&mut vmi.spec, config);
        set_memory_hotplug(&mut vmi.spec, config);
    }
    // ApplyNewVMIMutations
    if supports_pcie_hotplug(&vmi.spec) {
        let annotations = vmi.metadata.annotations.get_or_insert_with(Default::default);
        annotations.entry(ann::PCI_TOPOLOGY_VERSION.into()).or_insert_with(|| PCI_TOPOLOGY_VERSION_V3.into());
    }
    let status = vmi.status.get_or_insert_with(VirtualMachineInstanceStatus::default);
    status.runtime_user = Some(if config.enabled(FeatureGate::Root) { 0 } else { QEMU_UID.unsigned_abs() });
    // Mutate
    let finalizers = vmi.metadata.finalizers.get_or_insert_with(Vec::new);
    if !finalizers.iter().any(|f| f == finalizer::FOREGROUND_DELETE_VIRTUAL_MACHINE) {
        finalizers.push(finalizer::FOREGROUND_DELETE_VIRTUAL_MACHINE.into());
    }
    status.phase = Some(VirtualMachineInstancePhase::Pending);
    // Upstream appends unconditionally; skipping an existing entry keeps a second (or reinvoked) mutator from
    // adding another one.
    let transitions = status.phase_transition_timestamps.get_or_insert_with(Vec::new);
    if !transitions.iter().any(|t| t.phase == Some(VirtualMachineInstancePhase::Pending)) {
        transitions.push(VirtualMachineInstancePhaseTransitionTimestamp {
            phase: Some(VirtualMachineInstancePhase::Pending),
            phase_transition_timestamp: Some(fresh.now.clone()),
            ..Default::default()
        });
    }
    // What upstream's Go types always write.
    status.guest_os_info.get_or_insert_with(VirtualMachineInstanceGuestOsInfo::default);
    vmi.spec.domain.resources.get_or_insert_with(ResourceRequirements::default);
    Ok(vmi)
}

fn set_machine_type(spec: &mut VirtualMachineInstanceSpec, config: &Config) {
    let default = config
        .arch(spec.architecture.as_deref().unwrap_or_default())
        .map(|a| a.machine_type.clone())
        .unwrap_or_default();
    let machine = spec.domain.machine.get_or_insert_with(Machine::default);
    if machine.type_.as_deref().unwrap_or_default().is_empty() {
        machine.type_ = Some(default);
    }
}

fn set_resource_requests(spec: &mut VirtualMachineInstanceSpec, config: &Config) {
    let dedicated = spec.domain.cpu.as_ref().and_then(|c| c.dedicated_cpu_placement).unwrap_or(false);
    let Some(resources) = spec.domain.resources.as_mut() else {
        if let Some(req) = non_default_cpu_request(config)
            && !dedicated
        {
            spec.domain.resources =
                Some(ResourceRequirements { requests: Some([("cpu".to_owned(), req)].into()), ..Default::default() });
        }
        return;
    };
    let limit = resources.limits.as_ref().and_then(|l| l.get("cpu")).cloned();
    let request = Quantity::or_zero(resources.requests.as_ref().and_then(|r| r.get("cpu")));
    if let Some(limit) = limit
        && !Quantity::or_zero(Some(&limit)).is_zero()
        && request.is_zero()
    {
        resources.requests.get_or_insert_with(Default::default).insert("cpu".into(), limit);
    }
    if let Some(req) = non_default_cpu_request(config)
        && !resources.requests.as_ref().is_some_and(|r| r.contains_key("cpu"))
        && !dedicated
    {
        resources.requests.get_or_insert_with(Default::default).insert("cpu".into(), req);
    }
}

fn non_default_cpu_request(config: &Config) -> Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    let req = Quantity::parse(config.cpu_request.as_deref()?).ok()?;
    let default = Quantity::parse(DEFAULT_CPU_REQUEST).ok()?;
    (req != default).then(|| req.to_k8s())
}

fn set_guest_memory(spec: &mut VirtualMachineInstanceSpec) {
    if spec.domain.memory.as_ref().is_some_and(|m| m.guest.is_some()) {
        return;
    }
    let resources = spec.domain.resources.clone().unwrap_or_default();
    let memory = spec.domain.memory.get_or_insert_with(Memory::default);
    let request = resources.requests.as_ref().and_then(|r| r.get("memory"));
    let limit = resources.limits.as_ref().and_then(|r| r.get("memory"));
    if let Some(q) = request.filter(|q| !Quantity::or_zero(Some(q)).is_zero()) {
        memory.guest = Some(q.clone());
    } else if let Some(q) = limit.filter(|q| !Quantity::or_zero(Some(q)).is_zero()) {
        memory.guest = Some(q.clone());
    } else if let Some(size) = memory.hugepages.as_ref().and_then(|h| h.page_size.as_deref())
        && let Ok(q) = Quantity::parse(size)
    {
        memory.guest = Some(q.to_k8s());
    }
}

/// Upstream's `SetDefaultGuestCPUTopology`.
fn set_cpu_topology(spec: &mut VirtualMachineInstanceSpec) {
    let unset = |v: Option<u32>| v.unwrap_or(0) == 0;
    if let Some(cpu) = &spec.domain.cpu
        && !(unset(cpu.cores) && unset(cpu.sockets) && unset(cpu.threads))
    {
        return;
    }
    let resources = spec.domain.resources.clone().unwrap_or_default();
    let sockets = if let Some(limit) = resources.limits.as_ref().and_then(|l| l.get("cpu")) {
        Quantity::or_zero(Some(limit)).value()
    } else if let Some(request) = resources.requests.as_ref().and_then(|r| r.get("cpu")) {
        Quantity::or_zero(Some(request)).value()
    } else {
        1
    };
    let cpu = spec.domain.cpu.get_or_insert_with(Cpu::default);
    // Go converts with uint32(...): wraps rather than fails.
    cpu.sockets = Some(sockets as u32);
    cpu.cores = Some(1);
    cpu.threads = Some(1);
}

fn set_pull_policies(spec: &mut VirtualMachineInstanceSpec) {
    for cd in spec.volumes.iter_mut().flatten().filter_map(|v| v.container_disk.as_mut()) {
        if cd.image_pull_policy.as_ref().is_none_or(|p| p.as_str().is_empty()) {
            let always = cd.image.ends_with(":latest") || !cd.image.contains([':', '@']);
            cd.image_pull_policy = Some(if always { PullPolicy::Always } else { PullPolicy::IfNotPresent });
        }
    }
}

/// Step 7: the pod network and its interface when the spec has neither networks nor interfaces.
pub fn set_default_network(spec: &mut VirtualMachineInstanceSpec, config: &Config) -> Result<(), Error> {
    let devices = &mut spec.domain.devices;
    if devices.autoattach_pod_interface == Some(false)
        || !spec.networks.as_deref().unwrap_or_default().is_empty()
        || !devices.interfaces.as_deref().unwrap_or_default().is_empty()
    {
        return Ok(());
    }
    let mut iface = Interface { name: DEFAULT_NETWORK_NAME.into(), ..Default::default() };
    match config.default_binding {
        DefaultBinding::Bridge => {
            if !config.permit_bridge_on_pod_network {
                return Err(Error::BridgeNotPermitted);
            }
            iface.bridge = Some(Marker::default());
        }
        DefaultBinding::Masquerade => iface.masquerade = Some(Marker::default()),
    }
    devices.interfaces = Some(vec![iface]);
    spec.networks = Some(vec![Network {
        name: DEFAULT_NETWORK_NAME.into(),
        pod: Some(PodNetwork::default()),
        ..Default::default()
    }]);
    Ok(())
}

/// Upstream's `SetDefaultVolumeDisk` (step 8): a `disk` for every volume without a disk or filesystem of its name.
pub fn add_volume_disks(spec: &mut VirtualMachineInstanceSpec) {
    let devices = &mut spec.domain.devices;
    let mut named: BTreeSet<String> = devices.disks.iter().flatten().map(|d| d.name.clone()).collect();
    named.extend(devices.filesystems.iter().flatten().map(|f| f.name.clone()));
    for volume in spec.volumes.iter().flatten() {
        if named.insert(volume.name.clone()) {
            devices.disks.get_or_insert_with(Vec::new).push(Disk { name: volume.name.clone(), ..Default::default() });
        }
    }
}

fn enable(fs: &mut Option<FeatureState>) {
    if let Some(fs) = fs {
        fs.enabled.get_or_insert(true);
    }
}

/// Upstream's `SetObjectDefaults_VirtualMachineInstance` (the generated defaulters, in their order).
fn set_object_defaults(spec: &mut VirtualMachineInstanceSpec, fresh: &Fresh) {
    let domain = &mut spec.domain;
    let firmware = domain.firmware.get_or_insert_with(Firmware::default);
    let features = domain.features.get_or_insert_with(Features::default);
    for disk in domain.devices.disks.iter_mut().flatten() {
        if disk.disk.is_none() && disk.cdrom.is_none() && disk.lun.is_none() {
            disk.disk = Some(DiskTarget::default());
        }
    }
    for input in domain.devices.inputs.iter_mut().flatten() {
        if input.bus.as_ref().is_none_or(|b| b.as_str().is_empty()) {
            input.bus = Some(InputBus::Usb);
        }
        if input.type_.as_ref().is_none_or(|t| t.as_str().is_empty()) {
            input.type_ = Some(InputType::Tablet);
        }
    }
    for probe in [spec.readiness_probe.as_mut(), spec.liveness_probe.as_mut()].into_iter().flatten() {
        set_probe_defaults(probe);
    }
    if firmware.uuid.as_deref().unwrap_or_default().is_empty() {
        firmware.uuid = Some(fresh.uuid.clone());
    }
    if let Some(timer) = domain.clock.as_mut().and_then(|c| c.timer.as_mut()) {
        for t in
            [&mut timer.hpet, &mut timer.kvm, &mut timer.pit, &mut timer.rtc, &mut timer.hyperv].into_iter().flatten()
        {
            t.present.get_or_insert(true);
        }
    }
    features.acpi.get_or_insert_with(FeatureState::default).enabled.get_or_insert(true);
    if let Some(apic) = features.apic.as_mut() {
        apic.enabled.get_or_insert(true);
    }
    if let Some(h) = features.hyperv.as_mut() {
        for fs in [
            &mut h.relaxed,
            &mut h.vapic,
            &mut h.vpindex,
            &mut h.runtime,
            &mut h.synic,
            &mut h.reset,
            &mut h.frequencies,
            &mut h.reenlightenment,
            &mut h.ipi,
            &mut h.evmcs,
        ] {
            enable(fs);
        }
        if let Some(s) = h.spinlocks.as_mut()
            && *s.enabled.get_or_insert(true)
            && s.spinlocks.is_none()
        {
            s.spinlocks = Some(4096);
        }
        if let Some(t) = h.synictimer.as_mut() {
            t.enabled.get_or_insert(true);
            enable(&mut t.direct);
        }
        if let Some(v) = h.vendorid.as_mut() {
            v.enabled.get_or_insert(true);
        }
        if let Some(t) = h.tlbflush.as_mut() {
            t.enabled.get_or_insert(true);
            enable(&mut t.direct);
            enable(&mut t.extended);
        }
    }
    enable(&mut features.smm);
    enable(&mut features.pvspinlock);
    for disk in domain.devices.disks.iter_mut().flatten() {
        if let Some(cdrom) = disk.cdrom.as_mut() {
            cdrom.read_only.get_or_insert(true);
            if cdrom.tray.as_ref().is_none_or(|t| t.as_str().is_empty()) {
                cdrom.tray = Some(TrayState::Closed);
            }
        }
        if let Some(bs) = disk.block_size.as_mut() {
            enable(&mut bs.match_volume);
        }
    }
    for gpu in domain.devices.gpus.iter_mut().flatten() {
        // `virtualGPUOptions` is not modelled: default `display.ramFB.enabled` in the kept JSON.
        if let Some(ramfb) = gpu
            .extra
            .get_mut("virtualGPUOptions")
            .and_then(|o| o.get_mut("display"))
            .and_then(|d| d.get_mut("ramFB"))
            .and_then(|r| r.as_object_mut())
        {
            ramfb.entry("enabled").or_insert(serde_json::Value::Bool(true));
        }
    }
}

fn set_probe_defaults(probe: &mut Probe) {
    let at_least = |v: &mut Option<i32>, default: i32| {
        if v.unwrap_or(0) < 1 {
            *v = Some(default);
        }
    };
    at_least(&mut probe.timeout_seconds, 1);
    at_least(&mut probe.period_seconds, 10);
    at_least(&mut probe.success_threshold, 1);
    at_least(&mut probe.failure_threshold, 3);
}

fn set_arch_defaults(spec: &mut VirtualMachineInstanceSpec, arch: Option<Architecture>) {
    let bus = match arch {
        Some(Architecture::Arm64) => {
            let cpu = spec.domain.cpu.get_or_insert_with(Cpu::default);
            if cpu.model.as_deref().unwrap_or_default().is_empty() {
                cpu.model = Some(crds::kubevirt::domain::CPU_MODEL_HOST_PASSTHROUGH.into());
            }
            let firmware = spec.domain.firmware.get_or_insert_with(Firmware::default);
            let bootloader = firmware
                .bootloader
                .get_or_insert_with(|| Bootloader { efi: Some(Efi::default()), ..Default::default() });
            if let Some(efi) = bootloader.efi.as_mut() {
                efi.secure_boot.get_or_insert(false);
            }
            DiskBus::Virtio
        }
        Some(Architecture::S390x) => DiskBus::Virtio,
        // amd64 and anything else (upstream's default branch).
        _ => DiskBus::Sata,
    };
    let unset = |b: &Option<DiskBus>| b.as_ref().is_none_or(|b| b.as_str().is_empty());
    for disk in spec.domain.devices.disks.iter_mut().flatten() {
        if let Some(t) = disk.disk.as_mut().filter(|t| unset(&t.bus)) {
            t.bus = Some(bus.clone());
        }
        if let Some(t) = disk.cdrom.as_mut().filter(|t| unset(&t.bus)) {
            t.bus = Some(bus.clone());
        }
        if let Some(t) = disk.lun.as_mut().filter(|t| unset(&t.bus)) {
            t.bus = Some(bus.clone());
        }
    }
    if let Some(watchdog) = spec.domain.devices.watchdog.as_mut() {
        let device = match arch {
            Some(Architecture::Arm64) => None,
            Some(Architecture::S390x) => Some(watchdog.diag288.get_or_insert_with(WatchdogDevice::default)),
            _ => Some(watchdog.i6300esb.get_or_insert_with(WatchdogDevice::default)),
        };
        if let Some(d) = device
            && d.action.as_ref().is_none_or(|a| a.as_str().is_empty())
        {
            d.action = Some(WatchdogAction::Reset);
        }
    }
}

/// Upstream's `setupCPUHotplug`.
fn set_cpu_hotplug(spec: &mut VirtualMachineInstanceSpec, config: &Config) {
    let Some(cpu) = spec.domain.cpu.as_mut() else { return };
    let sockets = cpu.sockets.unwrap_or(0);
    if cpu.max_sockets.unwrap_or(0) == 0 {
        let mut max = config.max_cpu_sockets.unwrap_or(0);
        if max != 0 && sockets > max {
            max = sockets;
        }
        cpu.max_sockets = Some(max);
    }
    if cpu.max_sockets.unwrap_or(0) == 0 {
        let per_socket = u64::from(cpu.cores.unwrap_or(0)) * u64::from(cpu.threads.unwrap_or(0));
        let mut max = u64::from(sockets) * u64::from(config.max_hotplug_ratio);
        if max * per_socket > MAX_VCPUS && per_socket > 0 {
            max = (MAX_VCPUS / per_socket).max(u64::from(sockets));
        }
        cpu.max_sockets = Some(u32::try_from(max).unwrap_or(u32::MAX));
    }
    if cpu.max_sockets == Some(0) {
        cpu.max_sockets = None;
    }
}

/// Upstream's `setupMemoryHotplug`: `memory.maxGuest` when memory hotplug is possible.
fn set_memory_hotplug(spec: &mut VirtualMachineInstanceSpec, config: &Config) {
    if spec.domain.memory.as_ref().is_some_and(|m| m.max_guest.is_some()) {
        return;
    }
    let guest = spec.domain.memory.as_ref().and_then(|m| m.guest.as_ref()).map(|g| Quantity::or_zero(Some(g)));
    let max_guest = match (&config.max_guest, guest) {
        (Some(m), _) => Quantity::parse(m).ok(),
        (None, Some(g)) => {
            Some(Quantity::from_value(g.value(), Format::BinarySi).times(i64::from(config.max_hotplug_ratio)))
        }
        (None, None) => None,
    };
    if memory_hotplug_possible(spec, guest, max_guest)
        && let Some(max) = max_guest
    {
        spec.domain.memory.get_or_insert_with(Memory::default).max_guest = Some(max.to_k8s());
    }
}

/// Upstream's `ValidateLiveUpdateMemory` (as a yes/no: its reasons are only logged).
fn memory_hotplug_possible(spec: &VirtualMachineInstanceSpec, guest: Option<Quantity>, max: Option<Quantity>) -> bool {
    let domain = &spec.domain;
    let cpu = domain.cpu.as_ref();
    if cpu.is_some_and(|c| c.realtime.is_some())
        || cpu.and_then(|c| c.numa.as_ref()).is_some_and(|n| n.guest_mapping_passthrough.is_some())
        || domain.extra.contains_key("launchSecurity")
    {
        return false;
    }
    let hugepages_1g =
        domain.memory.as_ref().and_then(|m| m.hugepages.as_ref()).and_then(|h| h.page_size.as_deref()) == Some("1Gi");
    let block = if hugepages_1g { HOTPLUG_BLOCK_1G_HUGEPAGES } else { HOTPLUG_BLOCK };
    let (Some(guest), Some(max)) = (guest, max) else { return false };
    guest <= max
        && guest.value() % block == 0
        && max.value() % block == 0
        && spec.architecture.as_deref() == Some("amd64")
        && guest.value() >= HOTPLUG_MIN_GUEST
}

/// Upstream's `SupportsPCIeHotplug`.
pub fn supports_pcie_hotplug(spec: &VirtualMachineInstanceSpec) -> bool {
    if !matches!(spec.architecture.as_deref().unwrap_or_default(), "amd64" | "arm64" | "") {
        return false;
    }
    match spec.domain.machine.as_ref() {
        Some(m) => {
            let t = m.type_.as_deref().unwrap_or_default();
            t.contains("q35") || t.starts_with("virt")
        }
        None => true,
    }
}

fn canonicalize_quantities(spec: &mut VirtualMachineInstanceSpec) {
    if let Some(r) = spec.domain.resources.as_mut() {
        for q in r.requests.iter_mut().chain(r.limits.iter_mut()).flat_map(|m| m.values_mut()) {
            canonicalize(q);
        }
    }
    if let Some(m) = spec.domain.memory.as_mut() {
        for q in [m.guest.as_mut(), m.max_guest.as_mut()].into_iter().flatten() {
            canonicalize(q);
        }
        if let Some(q) = m.reserved_overhead.as_mut().and_then(|o| o.added_overhead.as_mut()) {
            canonicalize(q);
        }
    }
    for v in spec.volumes.iter_mut().flatten() {
        if let Some(e) = v.empty_disk.as_mut() {
            canonicalize(&mut e.capacity);
        }
        if let Some(q) = v.host_disk.as_mut().and_then(|h| h.capacity.as_mut()) {
            canonicalize(q);
        }
    }
}
