//! VMI validation with upstream's exact messages (upstream
//! `pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go`, `vmi-update-admitter.go`, the
//! network and storage admitters, `pkg/virt-api/webhooks/{hyperv,amd64}.go`). Pure functions of the VMI (as the
//! mutator left it — the API server runs the validators after it), the [`Config`] and the requester.
//!
//! **CREATE** ([`validate_create`]) composes the checks as upstream's virt-api wires them, in its order:
//!
//! 1. the "spec validators" registered in `api.go`: network (discontinued bindings, then [`network::validate`]),
//!    storage (containerDisk paths, no utility volumes, [`disks::validate_disks`]);
//! 2. `ValidateVirtualMachineInstanceSpec` — which runs the network, disk, containerDisk and utility-volume checks
//!    **again**: upstream (v1.5 – v1.9) reports those causes twice, and so does this (the message is what
//!    `kubectl` prints, byte for byte);
//! 3. every volume needs a disk or filesystem; memory must be requested; reserved labels and gated annotations;
//!    Hyper-V dependencies; the architecture's own checks.
//!
//! **UPDATE** ([`validate_update`]): only KubeVirt's components may change the spec ("update of VMI object is
//! restricted") and reserved labels; their spec changes may not touch `cpu.maxSockets` / `memory.maxGuest`.
//!
//! Not checked (yet): affinity and topology spread constraints (Kubernetes' own pod validation), DRA claims,
//! `launchSecurity` beyond its architecture, the Grace I/O virtualization annotations, the feature gates of
//! deprecated APIs, virt-handler's node restriction, storage hotplug on UPDATE.

pub mod disks;
pub mod migration;
pub mod names;
pub mod network;
pub mod vm;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crds::kubevirt::consts::{ann, label};
use crds::kubevirt::domain::{Cpu, CpuFeaturePolicy, DiskBus, InputBus, InputType, IoThreadsPolicy, PanicDeviceModel};
use crds::kubevirt::vmi::{Probe, StartStrategy, VirtualMachineInstance, VirtualMachineInstanceSpec};
use crds::kubevirt::volume::{CloudInitSource, HostDiskType, LocalObjectReference};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::cause::{Cause, CauseType, Path};
use crate::config::{Config, FeatureGate, RolloutStrategy, User};
use crate::hyperv;
use crate::quantity::{ERR_FORMAT_WRONG, Quantity};

/// Inline cloud-init user or network data is limited to this many bytes.
pub const CLOUD_INIT_MAX_LEN: usize = 2048;

/// Labels only KubeVirt's components may set on a VMI.
pub const RESTRICTED_LABELS: [&str; 6] = [
    label::CREATED_BY,
    label::MIGRATION_JOB_UID,
    label::NODE_NAME,
    label::MIGRATION_TARGET_NODE_NAME,
    label::SCHEDULABLE,
    label::INSTALL_STRATEGY,
];

const VALID_VIDEO_TYPES_AMD64: [&str; 5] = ["vga", "cirrus", "virtio", "ramfb", "bochs"];

/// Go's `%q` of a string.
pub(crate) fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

/// A PCI address `dddd:bb:ss.f` (hex; function 0–7).
pub(crate) fn valid_pci_address(s: &str) -> bool {
    let hex = |g: &str, n: usize| g.len() == n && g.bytes().all(|c| c.is_ascii_hexdigit());
    let parts: Vec<&str> = s.split(':').collect();
    let [domain, bus, slot_fn] = parts.as_slice() else { return false };
    let Some((slot, func)) = slot_fn.split_once('.') else { return false };
    hex(domain, 4) && hex(bus, 2) && hex(slot, 2) && func.len() == 1 && func.bytes().all(|c| (b'0'..=b'7').contains(&c))
}

fn resource(spec: &VirtualMachineInstanceSpec, limits: bool, name: &str) -> Quantity {
    let r = spec.domain.resources.as_ref();
    let map = r.and_then(|r| if limits { r.limits.as_ref() } else { r.requests.as_ref() });
    Quantity::or_zero(map.and_then(|m| m.get(name)))
}

fn vcpus(cpu: Option<&Cpu>) -> i64 {
    let Some(cpu) = cpu else { return 0 };
    let (s, c, t) = (cpu.sockets.unwrap_or(0), cpu.cores.unwrap_or(0), cpu.threads.unwrap_or(0));
    let mut v = i64::from(c);
    for x in [s, t] {
        if x != 0 {
            v = if v == 0 { i64::from(x) } else { v * i64::from(x) };
        }
    }
    v
}

/// Every quantity of the spec upstream's Go types parse, with its field path: an unparseable one fails decoding
/// (upstream answers with Go's `ErrFormatWrong`, see [`ERR_FORMAT_WRONG`]).
pub fn invalid_quantity(spec: &VirtualMachineInstanceSpec) -> Option<String> {
    let mut all: Vec<&K8sQuantity> = Vec::new();
    if let Some(r) = &spec.domain.resources {
        all.extend(r.requests.iter().chain(r.limits.iter()).flat_map(|m| m.values()));
    }
    if let Some(m) = &spec.domain.memory {
        all.extend(m.guest.iter().chain(m.max_guest.iter()));
        all.extend(m.reserved_overhead.iter().filter_map(|o| o.added_overhead.as_ref()));
    }
    for v in spec.volumes.iter().flatten() {
        all.extend(v.empty_disk.iter().map(|e| &e.capacity));
        all.extend(v.host_disk.iter().filter_map(|h| h.capacity.as_ref()));
    }
    all.iter().any(|q| Quantity::of(q).is_err()).then(|| ERR_FORMAT_WRONG.to_owned())
}

/// The causes to refuse creating `vmi` for (empty: admitted).
pub fn validate_create(vmi: &VirtualMachineInstance, config: &Config, user: &User) -> Vec<Cause> {
    let spec = &vmi.spec;
    let root = Path::new("spec");
    let disks_path = root.children(&["domain", "devices", "disks"]);
    let disks = spec.domain.devices.disks.as_deref().unwrap_or_default();
    let mut causes = Vec::new();
    // The spec validators of upstream's api.go: SIG-Network, SIG-Storage.
    causes.extend(network::validate_discontinued(&root, spec));
    causes.extend(network::validate(&root, spec, config));
    causes.extend(disks::validate_container_disks(&root, spec));
    causes.extend(disks::validate_no_utility_volumes(&root, spec));
    causes.extend(disks::validate_disks(&disks_path, disks));
    causes.extend(validate_spec(&root, spec, config));
    causes.extend(volumes_have_disks(&root, spec));
    causes.extend(mandatory_fields(&root, spec));
    causes.extend(metadata(vmi, config, user));
    let features = spec.domain.features.as_ref();
    causes.extend(hyperv::validate(
        &root.children(&["domain", "features", "hyperv"]),
        features.and_then(|f| f.hyperv.as_ref()),
        features.is_some_and(|f| f.hyperv_passthrough.is_some()),
        spec.domain.cpu.as_ref(),
    ));
    causes.extend(per_arch(&root, spec));
    causes
}

/// Upstream's `ValidateVirtualMachineInstanceSpec`.
fn validate_spec(root: &Path, spec: &VirtualMachineInstanceSpec, config: &Config) -> Vec<Cause> {
    let mut c = Vec::new();
    names_and_memory(root, spec, config, &mut c);
    cpu(root, spec, &mut c);
    c.extend(network::validate(root, spec, config));
    boot_order(root, spec, config, &mut c);
    devices_and_probes(root, spec, &mut c);
    domain(root, spec, &mut c);
    c.extend(volumes(&root.child("volumes"), spec, config));
    c.extend(disks::validate_container_disks(root, spec));
    c.extend(disks::validate_no_utility_volumes(root, spec));
    access_credentials(&root.child("accessCredentials"), spec, &mut c);
    dns(root, spec, &mut c);
    remaining(root, spec, config, &mut c);
    c
}

fn names_and_memory(root: &Path, spec: &VirtualMachineInstanceSpec, config: &Config, c: &mut Vec<Cause>) {
    if let Some(h) = spec.hostname.as_deref().filter(|h| !h.is_empty()) {
        let errs = names::dns1123_label(h);
        if !errs.is_empty() {
            let p = root.child("hostname");
            c.push(Cause::invalid(
                format!("{p} does not conform to the kubernetes DNS_LABEL rules : {}", errs.join(", ")),
                &p,
            ));
        }
    }
    if let Some(s) = spec.subdomain.as_deref().filter(|s| !s.is_empty()) {
        let errs = names::dns1123_subdomain(s);
        if !errs.is_empty() {
            let p = root.child("subdomain");
            c.push(Cause::invalid(
                format!("{p} does not conform to the kubernetes DNS_SUBDOMAIN rules : {}", errs.join(", ")),
                &p,
            ));
        }
    }
    let res = root.children(&["domain", "resources"]);
    let (req_p, lim_p) = (res.children(&["requests", "memory"]), res.children(&["limits", "memory"]));
    let (req, lim) = (resource(spec, false, "memory"), resource(spec, true, "memory"));
    let one_m = Quantity::from_value(1_000_000, crate::quantity::Format::DecimalSi);
    if req.value() < 0 {
        c.push(Cause::invalid(format!("{req_p} '{req}': must be greater than or equal to 0."), &req_p));
    } else if req.value() > 0 && req < one_m {
        c.push(Cause::invalid(format!("{req_p} '{req}': must be greater than or equal to 1M."), &req_p));
    }
    if lim.value() < 0 {
        c.push(Cause::invalid(format!("{lim_p} '{lim}': must be greater than or equal to 0."), &lim_p));
    }
    if lim.value() > 0 && req.value() > lim.value() {
        c.push(Cause::invalid(format!("{req_p} '{req}' is greater than {lim_p} '{lim}'"), &req_p));
    }
    let memory = spec.domain.memory.as_ref();
    let mem_p = root.children(&["domain", "memory"]);
    if let Some(hp) = memory.and_then(|m| m.hugepages.as_ref()) {
        let size_text = hp.page_size.as_deref().unwrap_or_default();
        let hp_p = mem_p.children(&["hugepages", "pageSize"]);
        match Quantity::parse(size_text) {
            Err(_) => c.push(Cause::invalid(format!("{hp_p} '{size_text}': {ERR_FORMAT_WRONG}"), &hp_p)),
            Ok(size) => {
                let guest = Quantity::or_zero(memory.and_then(|m| m.guest.as_ref()));
                let mut vm_memory = req.value();
                if vm_memory == 0 {
                    vm_memory = guest.value();
                }
                if vm_memory == 0 {
                    vm_memory = lim.value();
                }
                if vm_memory != 0 && vm_memory < size.value() {
                    c.push(Cause::invalid(
                        format!("{req_p} '{req}' must be equal to or larger than page size {hp_p} '{size_text}'"),
                        &req_p,
                    ));
                } else if size.value() != 0 && vm_memory % size.value() != 0 {
                    c.push(Cause::invalid(
                        format!("{req_p} '{req}' is not a multiple of the page size {hp_p} '{size_text}'"),
                        &req_p,
                    ));
                }
            }
        }
    }
    if config.rollout_strategy != RolloutStrategy::LiveUpdate
        && let Some(guest) = memory.and_then(|m| m.guest.as_ref())
    {
        let guest = Quantity::or_zero(Some(guest));
        if lim.value() < guest.value() && lim.value() != 0 {
            let gp = mem_p.child("guest");
            c.push(Cause::invalid(
                format!("{gp} '{guest}' must be equal to or less than the memory limit {lim_p} '{lim}'"),
                &gp,
            ));
        }
    }
    if let Some(t) = spec.domain.machine.as_ref().and_then(|m| m.type_.as_deref()).filter(|t| !t.is_empty()) {
        let allowed =
            config.arch(spec.architecture.as_deref().unwrap_or_default()).map(|a| a.emulated_machines.clone());
        let allowed = allowed.unwrap_or_default();
        if !allowed.iter().any(|pattern| glob_match(pattern, t)) {
            let p = root.children(&["domain", "machine", "type"]);
            c.push(Cause::invalid(format!("{p} is not supported: {t} (allowed values: [{}])", allowed.join(" ")), &p));
        }
    }
    // validateFirmwareACPI (upstream passes `spec.acpi` as the field)
    if let Some(acpi) = spec.domain.firmware.as_ref().and_then(|f| f.acpi.as_ref()) {
        let p = root.child("acpi");
        let slic = acpi.slic_name_ref.as_deref().unwrap_or_default();
        let msdm = acpi.msdm_name_ref.as_deref().unwrap_or_default();
        if slic.is_empty() && msdm.is_empty() {
            c.push(Cause::invalid("ACPI was set but no SLIC nor MSDM volume reference was set", &p));
        } else {
            for (name_ref, field) in [(slic, "slicNameRef"), (msdm, "msdmNameRef")] {
                if name_ref.is_empty() {
                    continue;
                }
                match spec.volumes.iter().flatten().find(|v| v.name == name_ref) {
                    Some(v) if v.secret.is_some() => {}
                    Some(_) => {
                        c.push(Cause::invalid(format!("{p} refers to Volume of unsupported type."), p.child(field)))
                    }
                    None => c.push(Cause::invalid(format!("{p} does not have a matching Volume."), p.child(field))),
                }
            }
        }
    }
}

/// Shell-style pattern matching (`*`, `?`) as Go's `filepath.Match` on names without separators.
fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

fn cpu(root: &Path, spec: &VirtualMachineInstanceSpec, c: &mut Vec<Cause>) {
    let res = root.children(&["domain", "resources"]);
    let (req_p, lim_p) = (res.children(&["requests", "cpu"]), res.children(&["limits", "cpu"]));
    let (req, lim) = (resource(spec, false, "cpu"), resource(spec, true, "cpu"));
    if req.milli_value() < 0 {
        c.push(Cause::invalid(format!("{req_p} '{req}': must be greater than or equal to 0."), &req_p));
    }
    if lim.milli_value() < 0 {
        c.push(Cause::invalid(format!("{lim_p} '{lim}': must be greater than or equal to 0."), &lim_p));
    }
    if lim.milli_value() > 0 && req.milli_value() > lim.milli_value() {
        c.push(Cause::invalid(format!("{req_p} '{req}' is greater than {lim_p} '{lim}'"), &req_p));
    }
    let cpu = spec.domain.cpu.as_ref();
    let cpu_p = root.children(&["domain", "cpu"]);
    let dedicated = cpu.and_then(|c| c.dedicated_cpu_placement).unwrap_or(false);
    let dedicated_p = cpu_p.child("dedicatedCpuPlacement");
    if dedicated {
        let mem = root.children(&["domain", "resources", "requests", "memory"]);
        let (mem_req, mem_lim) = (resource(spec, false, "memory"), resource(spec, true, "memory"));
        let memory = spec.domain.memory.as_ref();
        let provided = !mem_lim.is_zero()
            || !mem_req.is_zero()
            || memory.is_some_and(|m| {
                m.hugepages.is_some() || m.guest.as_ref().is_some_and(|g| !Quantity::or_zero(Some(g)).is_zero())
            });
        if !provided {
            c.push(Cause::invalid(
                format!(
                    "{mem}, {}, {} or {} should be provided",
                    res.children(&["limits", "memory"]),
                    root.children(&["domain", "memory", "hugepages"]),
                    root.children(&["domain", "memory", "guest"])
                ),
                res.children(&["limits", "memory"]),
            ));
        }
        if req.value() > 0 && req.value() * 1000 != req.milli_value() {
            c.push(Cause::invalid("provided resources CPU requests must be an interger", &req_p));
        }
        if lim.value() > 0 && lim.value() * 1000 != lim.milli_value() {
            c.push(Cause::invalid("provided resources CPU limits must be an interger", &lim_p));
        }
        if mem_req.value() > 0 && mem_lim.value() > 0 && mem_req.value() != mem_lim.value() {
            c.push(Cause::invalid(format!("{mem} must be equal to {}", res.children(&["limits", "memory"])), &mem));
        }
        let n = vcpus(cpu);
        let cores_p = cpu_p.child("cores");
        if req.value() == 0 && lim.value() == 0 && n == 0 {
            c.push(Cause::invalid(
                format!("either {req_p} or {lim_p} or {cores_p} must be provided when DedicatedCPUPlacement is true "),
                &dedicated_p,
            ));
        }
        if req.value() > 0 && lim.value() > 0 && req.value() != lim.value() {
            c.push(Cause::invalid(
                format!("{req_p} or {lim_p} must be equal when DedicatedCPUPlacement is true "),
                &dedicated_p,
            ));
        }
        if (req.value() > 0 || lim.value() > 0) && n > 0 && req.value() != n && lim.value() != n {
            c.push(Cause::invalid(
                format!("{req_p} or {lim_p} must not be provided at the same time with {cores_p} when DedicatedCPUPlacement is true "),
                &dedicated_p,
            ));
        }
        let threads = cpu.and_then(|c| c.threads).unwrap_or(0);
        if threads > 1 && spec.architecture.as_deref() == Some("arm64") {
            c.push(Cause::invalid(
                format!(
                    "threads must not be greater than 1 at {} (got {threads}) when {} is arm64",
                    cpu_p.child("threads"),
                    root.child("architecture")
                ),
                root.child("architecture"),
            ));
        }
        if threads > 2 {
            c.push(Cause::invalid(
                format!(
                    "Not more than two threads must be provided at {} (got {threads}) when DedicatedCPUPlacement is true",
                    cpu_p.child("threads")
                ),
                &dedicated_p,
            ));
        }
    }
    let numa_p = cpu_p.children(&["numa", "guestMappingPassthrough"]);
    if cpu.and_then(|c| c.numa.as_ref()).is_some_and(|n| n.guest_mapping_passthrough.is_some()) {
        if !dedicated {
            c.push(Cause::invalid(
                format!("{dedicated_p} must be set to true when NUMA topology strategy is set in {numa_p}"),
                &numa_p,
            ));
        }
        if spec.domain.memory.as_ref().and_then(|m| m.hugepages.as_ref()).is_none() {
            c.push(Cause::invalid(
                format!(
                    "{} must be requested when NUMA topology strategy is set in {numa_p}",
                    root.children(&["domain", "memory", "hugepages"])
                ),
                &numa_p,
            ));
        }
    }
    if cpu.and_then(|c| c.isolate_emulator_thread) == Some(true) && !dedicated {
        c.push(Cause::invalid(
            "IsolateEmulatorThread should be only set in combination with DedicatedCPUPlacement",
            cpu_p.child("isolateEmulatorThread"),
        ));
    }
    for (idx, f) in cpu.and_then(|c| c.features.as_deref()).unwrap_or_default().iter().enumerate() {
        if let Some(policy) = f.policy.as_ref().filter(|p| !p.as_str().is_empty() && !CpuFeaturePolicy::is_known(p)) {
            c.push(Cause::new(
                CauseType::NotSupported,
                format!("CPU feature {} uses policy {policy} that is not supported.", f.name),
                cpu_p.child("features").index(idx).child("policy"),
            ));
        }
    }
    if let Some(cpu) = cpu
        && cpu.max_sockets.unwrap_or(0) != 0
        && cpu.sockets.unwrap_or(0) > cpu.max_sockets.unwrap_or(0)
    {
        c.push(Cause::invalid(
            "Number of sockets in CPU topology is greater than the maximum sockets allowed",
            cpu_p.child("sockets"),
        ));
    }
    if let Some(strategy) = &spec.start_strategy {
        let p = root.child("startStrategy");
        if *strategy != StartStrategy::Paused {
            c.push(Cause::invalid(format!("{p} is set with an unrecognized option: {strategy}"), &p));
        } else if spec.liveness_probe.is_some() {
            c.push(Cause::invalid(
                format!(
                    "either {p} or {} should be provided.Pausing VMI with LivenessProbe is not supported",
                    root.child("livenessProbe")
                ),
                &p,
            ));
        }
    }
    if cpu.is_some_and(|c| c.realtime.is_some()) {
        let rt = cpu_p.child("realtime");
        if !dedicated {
            c.push(Cause::new(
                CauseType::Required,
                format!("{dedicated_p} must be set to true when {rt} is used"),
                &dedicated_p,
            ));
        }
        if cpu.and_then(|c| c.numa.as_ref()).and_then(|n| n.guest_mapping_passthrough.as_ref()).is_none() {
            c.push(Cause::new(CauseType::Required, format!("{numa_p} must be defined when {rt} is used"), &numa_p));
        }
    }
}

fn boot_order(root: &Path, spec: &VirtualMachineInstanceSpec, config: &Config, c: &mut Vec<Cause>) {
    let volumes: BTreeMap<&str, _> = spec.volumes.iter().flatten().map(|v| (v.name.as_str(), v)).collect();
    let mut orders = BTreeSet::new();
    let disks_p = root.children(&["domain", "devices", "disks"]);
    for (idx, disk) in spec.domain.devices.disks.iter().flatten().enumerate() {
        let dp = disks_p.index(idx);
        let volume = volumes.get(disk.name.as_str());
        if volume.is_none() {
            if disk.cdrom.is_none() {
                c.push(Cause::invalid(format!("{} '{}' not found.", dp.child("Name"), disk.name), dp.child("name")));
            } else if !config.enabled(FeatureGate::DeclarativeHotplugVolumes) {
                c.push(Cause::invalid(
                    "DeclarativeHotplugVolumes feature gate not enabled, cannot define an empty CD-ROM disk",
                    dp.child("name"),
                ));
            }
        }
        if let Some(v) = volume {
            if disk.lun.is_some() && v.persistent_volume_claim.is_none() && v.data_volume.is_none() {
                let lp = dp.child("lun");
                c.push(Cause::invalid(
                    format!("{lp} can only be mapped to a DataVolume or PersistentVolumeClaim volume."),
                    &lp,
                ));
            }
            if v.downward_metrics.is_some() {
                match &disk.disk {
                    None => {
                        let p = dp.child("disk");
                        c.push(Cause::new(
                            CauseType::Required,
                            format!("DownwardMetrics volume must be mapped to a disk, but disk is not set on {p}."),
                            &p,
                        ));
                    }
                    Some(d) => {
                        if let Some(bus) = d.bus.as_ref().filter(|b| !b.as_str().is_empty() && **b != DiskBus::Virtio) {
                            let p = dp.children(&["disk", "bus"]);
                            c.push(Cause::invalid(
                                format!("DownwardMetrics volume must be mapped to virtio bus, but {p} is set to {bus}"),
                                &p,
                            ));
                        }
                    }
                }
            }
        }
        if let Some(order) = disk.boot_order
            && !orders.insert(order)
        {
            let p = dp.child("bootOrder");
            c.push(Cause::invalid(format!("Boot order for {p} already set for a different device."), &p));
        }
    }
    let ifaces_p = root.children(&["domain", "devices", "interfaces"]);
    for (idx, iface) in spec.domain.devices.interfaces.iter().flatten().enumerate() {
        let Some(order) = iface.boot_order else { continue };
        if order < 1 {
            // Upstream indexes the root path here (`spec[0]`).
            c.push(Cause::invalid(
                format!("{} must have a boot order > 0, if supplied", root.index(idx)),
                root.index(idx).child("bootOrder"),
            ));
        } else {
            if orders.contains(&order) {
                let p = ifaces_p.index(idx).child("bootOrder");
                c.push(Cause::invalid(format!("Boot order for {p} already set for a different device."), &p));
            }
            orders.insert(order);
        }
    }
}

fn probe(field: &Path, probe: Option<&Probe>, c: &mut Vec<Cause>) {
    let Some(p) = probe else { return };
    let handlers = [p.http_get.is_some(), p.tcp_socket.is_some(), p.exec.is_some(), p.guest_agent_ping.is_some()];
    let n = handlers.iter().filter(|h| **h).count();
    if n > 1 {
        c.push(Cause::invalid(format!("{field} must have exactly one probe type set"), field));
    }
    if n < 1 {
        c.push(Cause::new(
            CauseType::Required,
            format!(
                "either {}, {} or {} must be set if a {field} is specified",
                field.child("tcpSocket"),
                field.child("exec"),
                field.child("httpGet")
            ),
            field,
        ));
    }
}

fn devices_and_probes(root: &Path, spec: &VirtualMachineInstanceSpec, c: &mut Vec<Cause>) {
    let inputs_p = root.children(&["domain", "devices", "inputs"]);
    for (idx, input) in spec.domain.devices.inputs.iter().flatten().enumerate() {
        let bus_ok =
            input.bus.as_ref().is_none_or(|b| matches!(b, InputBus::Usb | InputBus::Virtio) || b.as_str().is_empty());
        if !bus_ok {
            c.push(Cause::invalid("Input device can have only virtio or usb bus.", inputs_p.index(idx).child("bus")));
        }
        if input.type_ != Some(InputType::Tablet) {
            c.push(Cause::invalid("Input device can have only tablet type.", inputs_p.index(idx).child("type")));
        }
    }
    if let Some(policy) = &spec.domain.io_threads_policy {
        if !policy.is_known() {
            c.push(Cause::invalid(
                format!("Invalid IOThreadsPolicy ({policy})"),
                root.children(&["domain", "ioThreadsPolicy"]),
            ));
        }
        let count = spec.domain.io_threads.as_ref().and_then(|t| t.supplemental_pool_thread_count);
        if *policy == IoThreadsPolicy::SupplementalPool && count.unwrap_or(0) < 1 {
            c.push(Cause::invalid(
                "the number of iothreads needs to be set and positive for the dedicated policy",
                root.children(&["domain", "ioThreads", "count"]),
            ));
        }
    }
    let (ready, live) = (root.child("readinessProbe"), root.child("livenessProbe"));
    probe(&ready, spec.readiness_probe.as_ref(), c);
    probe(&live, spec.liveness_probe.as_ref(), c);
    if !spec.networks.iter().flatten().any(|n| n.pod.is_some()) {
        for (field, p) in [(&ready, spec.readiness_probe.as_ref()), (&live, spec.liveness_probe.as_ref())] {
            let Some(p) = p else { continue };
            for (set, name) in [(p.http_get.is_some(), "httpGet"), (p.tcp_socket.is_some(), "tcpSocket")] {
                if set {
                    let f = field.child(name);
                    c.push(Cause::invalid(format!("{f} is only allowed if the Pod Network is attached"), &f));
                }
            }
        }
    }
}

fn domain(root: &Path, spec: &VirtualMachineInstanceSpec, c: &mut Vec<Cause>) {
    let d = root.child("domain");
    c.extend(disks::validate_disks(
        &d.children(&["devices", "disks"]),
        spec.domain.devices.disks.as_deref().unwrap_or_default(),
    ));
    let firmware = spec.domain.firmware.as_ref();
    let fw = d.child("firmware");
    if let Some(b) = firmware.and_then(|f| f.bootloader.as_ref())
        && b.efi.is_some()
        && b.bios.is_some()
    {
        let bp = fw.child("bootloader");
        c.push(Cause::invalid(format!("{bp} has both EFI and BIOS configured, but they are mutually exclusive."), &bp));
    }
    if let Some(kb) = firmware.and_then(|f| f.kernel_boot.as_ref()) {
        let kp = fw.child("kernelBoot");
        match &kb.container {
            None => {
                if kb.kernel_args.as_deref().is_some_and(|a| !a.is_empty()) {
                    c.push(Cause::invalid(
                        "kernel arguments cannot be provided without an external kernel",
                        kp.child("kernelArgs"),
                    ));
                }
            }
            Some(ct) => {
                let cp = kp.child("container");
                if ct.image.is_empty() {
                    c.push(Cause::new(
                        CauseType::Required,
                        format!("{cp} must be defined with an image"),
                        cp.child("image"),
                    ));
                }
                let kernel = ct.kernel_path.as_deref().unwrap_or_default();
                let initrd = ct.initrd_path.as_deref().unwrap_or_default();
                if kernel.is_empty() && initrd.is_empty() {
                    c.push(Cause::new(
                        CauseType::Required,
                        format!("{cp} must be defined with at least one of the following: kernelPath, initrdPath"),
                        &cp,
                    ));
                }
                if !kernel.is_empty() {
                    c.extend(disks::validate_path(&cp.child("kernelPath"), kernel));
                }
                if !initrd.is_empty() {
                    c.extend(disks::validate_path(&cp.child("initrdPath"), initrd));
                }
            }
        }
    }
    let efi = firmware.and_then(|f| f.bootloader.as_ref()).and_then(|b| b.efi.as_ref());
    let secure_boot = efi.is_some_and(|e| e.secure_boot != Some(false));
    let smm = spec.domain.features.as_ref().and_then(|f| f.smm.as_ref()).is_some_and(|s| s.enabled != Some(false));
    let tdx = spec.domain.extra.get("launchSecurity").and_then(|l| l.get("tdx")).is_some();
    if secure_boot && !smm && !tdx {
        c.push(Cause::invalid(
            format!("{d} has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled."),
            &d,
        ));
    }
}

/// (number of sources, length of the payload, the cause of undecodable base64) of cloud-init user or network data.
fn cloud_init_data(
    kp: &Path,
    kind: &str,
    secret: &Option<LocalObjectReference>,
    b64: Option<&str>,
    inline: Option<&str>,
    b64_field: &str,
) -> (usize, usize, Option<Cause>) {
    let mut sources = usize::from(secret.as_ref().and_then(|r| r.name.as_deref()).is_some_and(|n| !n.is_empty()));
    let (mut len, mut bad) = (0, None);
    if let Some(b) = b64.filter(|b| !b.is_empty()) {
        sources += 1;
        match decode_base64(b) {
            Some(decoded) => len = decoded.len(),
            None => {
                let bp = kp.child(b64_field);
                bad = Some(Cause::invalid(format!("{bp}.{kind}.{b64_field} is not a valid base64 value."), &bp));
            }
        }
    }
    if let Some(i) = inline.filter(|i| !i.is_empty()) {
        sources += 1;
        len = i.len();
    }
    (sources, len, bad)
}

fn cloud_init(field: &Path, kind: &str, src: &CloudInitSource, c: &mut Vec<Cause>) {
    let kp = field.child(kind);
    let (user_sources, user_len, bad) = cloud_init_data(
        &kp,
        kind,
        &src.user_data_secret_ref,
        src.user_data_base64.as_deref(),
        src.user_data.as_deref(),
        "userDataBase64",
    );
    c.extend(bad);
    if user_sources > 1 {
        c.push(Cause::invalid(format!("{kp} must have only one userdatasource set."), &kp));
    }
    if user_len > CLOUD_INIT_MAX_LEN {
        c.push(Cause::invalid(
            format!(
                "{kp} userdata exceeds {CLOUD_INIT_MAX_LEN} byte limit. Should use UserDataSecretRef for larger data."
            ),
            &kp,
        ));
    }
    let (net_sources, net_len, bad) = cloud_init_data(
        &kp,
        kind,
        &src.network_data_secret_ref,
        src.network_data_base64.as_deref(),
        src.network_data.as_deref(),
        "networkDataBase64",
    );
    c.extend(bad);
    if net_sources > 1 {
        c.push(Cause::invalid(format!("{kp} must have only one networkdata source set."), &kp));
    }
    if net_len > CLOUD_INIT_MAX_LEN {
        c.push(Cause::invalid(
            format!("{kp} networkdata exceeds {CLOUD_INIT_MAX_LEN} byte limit. Should use NetworkDataSecretRef for larger data."),
            &kp,
        ));
    }
    if user_sources == 0 && net_sources == 0 {
        c.push(Cause::invalid(
            format!("{kp} must have at least one userdatasource or one networkdatasource set."),
            &kp,
        ));
    }
}

/// Go's `base64.StdEncoding.DecodeString` (padding required; `\r` and `\n` ignored).
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let cleaned: String = s.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    base64::engine::general_purpose::STANDARD.decode(cleaned).ok()
}

/// Upstream's `validateVolumes` (`field` = `spec.volumes`).
fn volumes(field: &Path, spec: &VirtualMachineInstanceSpec, config: &Config) -> Vec<Cause> {
    let mut c = Vec::new();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut service_accounts, mut downward_metrics, mut memory_dumps) = (0, 0, 0);
    for (idx, v) in spec.volumes.iter().flatten().enumerate() {
        let vp = field.index(idx);
        match names.get(v.name.as_str()) {
            Some(other) => {
                c.push(Cause::invalid(
                    format!("{vp} and {} must not have the same Name.", field.index(*other)),
                    vp.child("name"),
                ));
            }
            None => {
                names.insert(&v.name, idx);
            }
        }
        if v.data_volume.as_ref().is_some_and(|d| d.name.is_empty()) {
            c.push(Cause::new(CauseType::Required, "DataVolume 'name' must be set", vp.child("name")));
        }
        service_accounts += usize::from(v.service_account.is_some());
        downward_metrics += usize::from(v.downward_metrics.is_some());
        memory_dumps += usize::from(v.memory_dump.is_some());
        let sources = [
            v.persistent_volume_claim.is_some(),
            v.sysprep.is_some(),
            v.cloud_init_no_cloud.is_some(),
            v.cloud_init_config_drive.is_some(),
            v.container_disk.is_some(),
            v.ephemeral.is_some(),
            v.empty_disk.is_some(),
            v.host_disk.is_some(),
            v.data_volume.is_some(),
            v.config_map.is_some(),
            v.secret.is_some(),
            v.downward_api.is_some(),
            v.service_account.is_some(),
            v.downward_metrics.is_some(),
            v.memory_dump.is_some(),
            v.container_path.is_some(),
        ];
        if sources.iter().filter(|s| **s).count() != 1 {
            c.push(Cause::invalid(format!("{vp} must have exactly one source type set"), &vp));
        }
        if let Some(src) = &v.cloud_init_no_cloud {
            cloud_init(&vp, "cloudInitNoCloud", src, &mut c);
        } else if let Some(src) = &v.cloud_init_config_drive {
            cloud_init(&vp, "cloudInitConfigDrive", src, &mut c);
        }
        if v.downward_metrics.is_some() && !config.enabled(FeatureGate::DownwardMetrics) {
            c.push(Cause::invalid(
                "downwardMetrics disks are not allowed: DownwardMetrics feature gate is not enabled.",
                &vp,
            ));
        }
        if let Some(hd) = &v.host_disk {
            let hp = vp.child("hostDisk");
            if !config.enabled(FeatureGate::HostDisk) {
                c.push(Cause::invalid("HostDisk feature gate is not enabled", &vp));
            }
            if hd.path.is_empty() {
                let pp = hp.child("path");
                c.push(Cause::new(CauseType::NotFound, format!("{pp} is required for hostDisk volume"), &pp));
            }
            let tp = hp.child("type");
            if !hd.type_.is_known() {
                c.push(Cause::invalid(
                    format!("{tp} has invalid value '{}', allowed are 'Disk' or 'DiskOrCreate'", hd.type_),
                    &tp,
                ));
            }
            if hd.type_ == HostDiskType::Disk
                && hd.capacity.as_ref().is_some_and(|q| !Quantity::or_zero(Some(q)).is_zero())
            {
                let cp = hp.child("capacity");
                c.push(Cause::invalid(format!("{cp} is allowed to pass only with {tp} equal to 'DiskOrCreate'"), &cp));
            }
        }
        if v.config_map.as_ref().is_some_and(|m| m.name.as_deref().unwrap_or_default().is_empty()) {
            let p = vp.children(&["configMap", "name"]);
            c.push(Cause::invalid(format!("{p} is a required field"), &p));
        }
        if v.secret.as_ref().is_some_and(|s| s.secret_name.as_deref().unwrap_or_default().is_empty()) {
            let p = vp.children(&["secret", "secretName"]);
            c.push(Cause::invalid(format!("{p} is a required field"), &p));
        }
        if v.service_account.as_ref().is_some_and(|s| s.service_account_name.as_deref().unwrap_or_default().is_empty())
        {
            let p = vp.children(&["serviceAccount", "serviceAccountName"]);
            c.push(Cause::invalid(format!("{p} is a required field"), &p));
        }
    }
    for (count, what) in [
        (service_accounts, "serviceAccount volume"),
        (downward_metrics, "downwardMetric volume"),
        (memory_dumps, "memory dump volume"),
    ] {
        if count > 1 {
            c.push(Cause::invalid(format!("{field} must have max one {what} set"), field));
        }
    }
    c
}

fn access_credentials(field: &Path, spec: &VirtualMachineInstanceSpec, c: &mut Vec<Cause>) {
    let vols = spec.volumes.as_deref().unwrap_or_default();
    let no_cloud = vols.iter().any(|v| v.cloud_init_no_cloud.is_some());
    let config_drive = vols.iter().any(|v| v.cloud_init_config_drive.is_some());
    for (idx, cred) in spec.access_credentials.iter().flatten().enumerate() {
        let p = field.index(idx);
        let mut count = 0;
        if let Some(ssh) = &cred.ssh_public_key {
            count += 1;
            let pm = &ssh.propagation_method;
            let method_p = p.children(&["sshPublicKey", "propagationMethod"]);
            let mut methods = 0;
            if pm.no_cloud.is_some() {
                methods += 1;
                if !no_cloud {
                    c.push(Cause::invalid(
                        format!("{p} requires a noCloud volume to exist when the noCloud propagationMethod is in use."),
                        &method_p,
                    ));
                }
            }
            if pm.config_drive.is_some() {
                methods += 1;
                if !config_drive {
                    c.push(Cause::invalid(
                        format!("{p} requires a configDrive volume to exist when the configDrive propagationMethod is in use."),
                        &method_p,
                    ));
                }
            }
            if let Some(qga) = &pm.qemu_guest_agent {
                if qga.users.is_empty() {
                    c.push(Cause::invalid(
                        format!("{p} requires at least one user to be present in the users list"),
                        method_p.children(&["qemuGuestAgent", "users"]),
                    ));
                }
                methods += 1;
            }
            if ssh.source.secret.is_none() {
                c.push(Cause::invalid(
                    format!("{p} must have exactly one source set"),
                    p.children(&["sshPublicKey", "source"]),
                ));
            }
            if methods != 1 {
                c.push(Cause::invalid(format!("{p} must have exactly one propagationMethod set"), &method_p));
            }
        }
        if let Some(pw) = &cred.user_password {
            count += 1;
            if pw.source.secret.is_none() {
                c.push(Cause::invalid(
                    format!("{p} must have exactly one source set"),
                    p.children(&["userPassword", "source"]),
                ));
            }
            if pw.propagation_method.qemu_guest_agent.is_none() {
                c.push(Cause::invalid(
                    format!("{p} must have exactly one propagationMethod set"),
                    p.children(&["userPassword", "propagationMethod"]),
                ));
            }
        }
        if count != 1 {
            c.push(Cause::invalid(format!("{p} must have exactly one access credential type set"), &p));
        }
    }
}

fn dns(root: &Path, spec: &VirtualMachineInstanceSpec, c: &mut Vec<Cause>) {
    let policy = spec.dns_policy.as_deref().unwrap_or_default();
    let pp = root.child("dnsPolicy");
    if !matches!(policy, "" | "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None") {
        c.push(Cause::new(
            CauseType::NotSupported,
            format!("DNSPolicy: {policy} is not supported, valid values: [ClusterFirstWithHostNet ClusterFirst Default None ]"),
            &pp,
        ));
    }
    let cp = root.child("dnsConfig");
    let config = spec.dns_config.as_ref();
    if policy == "None" {
        match config {
            None => {
                c.push(Cause::new(CauseType::Required, "must provide `dnsConfig` when `dnsPolicy` is None", &cp));
                return;
            }
            Some(cfg) if cfg.nameservers.as_deref().unwrap_or_default().is_empty() => {
                c.push(Cause::new(
                    CauseType::Required,
                    "must provide at least one DNS nameserver when `dnsPolicy` is None",
                    "nameservers",
                ));
                return;
            }
            Some(_) => {}
        }
    }
    let Some(cfg) = config else { return };
    let nameservers = cfg.nameservers.as_deref().unwrap_or_default();
    if nameservers.len() > 3 {
        c.push(Cause::invalid(
            format!("must not have more than 3 nameservers: [{}]", nameservers.join(" ")),
            "nameservers",
        ));
    }
    for ns in nameservers {
        if ns.parse::<IpAddr>().is_err() {
            c.push(Cause::invalid(format!("must be valid IP address: {ns}"), "nameservers"));
        }
    }
    let searches = cfg.searches.as_deref().unwrap_or_default();
    if searches.len() > 6 {
        c.push(Cause::invalid("must not have more than 6 search paths", "searchDomains"));
    }
    if searches.join(" ").len() > 256 {
        c.push(Cause::invalid(
            "must not have more than 256 characters (including spaces) in the search list",
            "searchDomains",
        ));
    }
    for s in searches {
        for msg in names::dns1123_subdomain(s) {
            c.push(Cause::invalid(msg, "searchDomains"));
        }
    }
    for o in cfg.options.iter().flatten() {
        if o.name.as_deref().unwrap_or_default().is_empty() {
            c.push(Cause::invalid("Option.Name must not be empty", "options"));
        }
    }
}

fn remaining(root: &Path, spec: &VirtualMachineInstanceSpec, config: &Config, c: &mut Vec<Cause>) {
    let devices = &spec.domain.devices;
    let devices_p = root.children(&["domain", "devices"]);
    if let Some(s) = &spec.eviction_strategy
        && !s.is_known()
    {
        let p = root.child("evictionStrategy");
        c.push(Cause::invalid(format!("{p} is set with an unrecognized option: {s}"), &p));
    }
    let ramfbs = devices
        .gpus
        .iter()
        .flatten()
        .filter(|g| {
            let display = g.extra.get("virtualGPUOptions").and_then(|o| o.get("display"));
            let on = |v: Option<&serde_json::Value>| {
                v.and_then(|e| e.get("enabled")).and_then(|e| e.as_bool()) != Some(false)
            };
            display.is_some_and(|d| d.is_object() && on(Some(d)) && (d.get("ramFB").is_none() || on(d.get("ramFB"))))
        })
        .count();
    if ramfbs > 1 {
        c.push(Cause::invalid("configuring multiple displays with ramfb is not valid ", root.child("GPUs")));
    }
    if devices.host_devices.is_some() && !config.enabled(FeatureGate::HostDevices) {
        c.push(Cause::invalid(
            "Host Devices feature gate is not enabled in kubevirt-config",
            root.child("HostDevices"),
        ));
    }
    if let Some(sound) = &devices.sound {
        let model = sound.model.as_deref().unwrap_or_default();
        if !matches!(model, "" | "ich9" | "ac97") {
            c.push(Cause::invalid(
                "Sound device type is not supported. Options: 'ich9' or 'ac97'",
                root.child("Sound"),
            ));
        }
        if sound.name.is_empty() {
            c.push(Cause::invalid("Sound device requires a name field.", root.child("Sound")));
        }
    }
    let arch = spec.architecture.as_deref().unwrap_or_default();
    if spec.domain.extra.contains_key("launchSecurity") && !matches!(arch, "amd64" | "s390x") {
        c.push(Cause::invalid(
            format!("No launchSecurity support for architecture: {arch}"),
            root.child("architecture"),
        ));
    }
    if devices.autoattach_vsock == Some(true) && !config.enabled(FeatureGate::Vsock) {
        c.push(Cause::invalid(
            "VSOCK feature gate is not enabled in kubevirt-config",
            devices_p.child("autoattachVSOCK"),
        ));
    }
    if devices.downward_metrics.is_some() && !config.enabled(FeatureGate::DownwardMetrics) {
        c.push(Cause::invalid(
            "downwardMetrics virtio serial is not allowed: DownwardMetrics feature gate is not enabled",
            devices_p.child("downwardMetrics"),
        ));
    }
    if let Some(filesystems) = &devices.filesystems {
        let volumes: BTreeMap<&str, _> = spec.volumes.iter().flatten().map(|v| (v.name.as_str(), v)).collect();
        for fs in filesystems {
            let Some(v) = volumes.get(fs.name.as_str()) else { continue };
            if (v.persistent_volume_claim.is_some() || v.data_volume.is_some())
                && !config.enabled(FeatureGate::VirtioFsStorageVolumes)
            {
                c.push(Cause::invalid(
                    "virtiofs is not allowed: virtiofs feature gate is not enabled for PVC",
                    devices_p.child("filesystems"),
                ));
            }
        }
    }
    if devices.video.is_some() && devices.autoattach_graphics_device == Some(false) {
        c.push(Cause::invalid(
            "Video configuration is not allowed when autoattachGraphicsDevice is set to false",
            root.child("video"),
        ));
    }
    if let Some(panics) = devices.panic_devices.as_deref().filter(|p| !p.is_empty()) {
        if arch == "s390x" {
            c.push(Cause::invalid(
                "custom panic devices are not supported on s390x architecture",
                devices_p.child("panicDevices"),
            ));
        }
        for (idx, p) in panics.iter().enumerate() {
            if let Some(m) = p.model.as_ref().filter(|m| !PanicDeviceModel::is_known(m)) {
                c.push(Cause::invalid(
                    format!("invalid PanicDeviceModel({m})"),
                    devices_p.child("panicDevices").index(idx).child("model"),
                ));
            }
        }
    }
    if spec.domain.reboot_policy.is_some() && !config.enabled(FeatureGate::RebootPolicy) {
        c.push(Cause::invalid(
            "RebootPolicy is specified but the RebootPolicy feature gate is not enabled",
            root.children(&["domain", "rebootPolicy"]),
        ));
    }
    if spec.domain.memory.as_ref().is_some_and(|m| m.reserved_overhead.is_some())
        && !config.enabled(FeatureGate::ReservedOverheadMemlock)
    {
        c.push(Cause::invalid(
            "Reserved overhead memlock feature gate is not enabled in kubevirt-config",
            root.children(&["domain", "memory", "reservedOverhead"]),
        ));
    }
    if let Some(sa) = spec.service_account_name.as_deref().filter(|s| !s.is_empty()) {
        let p = root.child("serviceAccountName");
        let errs = names::dns1123_subdomain(sa);
        if !errs.is_empty() {
            c.push(Cause::invalid(format!("{p} is not a valid service account name: {}", errs.join("; ")), &p));
        }
        let other = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.service_account.as_ref())
            .map(|s| s.service_account_name.as_deref().unwrap_or_default())
            .find(|name| *name != sa);
        if let Some(other) = other {
            c.push(Cause::invalid(
                format!(
                    "spec.serviceAccountName {} and serviceAccount volume {} must reference the same service account",
                    go_quote(sa),
                    go_quote(other)
                ),
                &p,
            ));
        }
    }
}

/// Upstream's `validateVirtualMachineInstanceSpecVolumeDisks` (its paths say `spec.domain.volumes`).
fn volumes_have_disks(root: &Path, spec: &VirtualMachineInstanceSpec) -> Vec<Cause> {
    let mut c = Vec::new();
    let disks: BTreeSet<&str> = spec.domain.devices.disks.iter().flatten().map(|d| d.name.as_str()).collect();
    let filesystems: BTreeSet<&str> =
        spec.domain.devices.filesystems.iter().flatten().map(|f| f.name.as_str()).collect();
    let vp = root.children(&["domain", "volumes"]);
    for (idx, v) in spec.volumes.iter().flatten().enumerate() {
        if v.memory_dump.is_some() {
            continue;
        }
        let (disk, fs) = (disks.contains(v.name.as_str()), filesystems.contains(v.name.as_str()));
        let p = vp.index(idx);
        if !disk && !fs {
            c.push(Cause::invalid(format!("{} '{}' not found.", p.child("name"), v.name), p.child("name")));
        }
        if let Some(cp) = &v.container_path {
            if disk {
                c.push(Cause::invalid(
                    format!("ContainerPath volume '{}' must be mapped to a filesystem, not a disk", v.name),
                    &p,
                ));
            }
            if !fs {
                c.push(Cause::invalid(
                    format!(
                        "ContainerPath volume '{}' must have a matching filesystem defined in spec.domain.devices.filesystems",
                        v.name
                    ),
                    &p,
                ));
            }
            if let Some(prefix) =
                ["/var/run/kubevirt", "/var/run/libvirt"].into_iter().find(|pre| cp.path.starts_with(pre))
            {
                c.push(Cause::invalid(
                    format!("ContainerPath volume '{}' uses reserved path prefix '{prefix}'", v.name),
                    p.children(&["containerPath", "path"]),
                ));
            }
        }
    }
    c
}

/// Upstream's `ValidateVirtualMachineInstanceMandatoryFields`.
fn mandatory_fields(root: &Path, spec: &VirtualMachineInstanceSpec) -> Vec<Cause> {
    if resource(spec, false, "memory").value() != 0 {
        return Vec::new();
    }
    let memory = spec.domain.memory.as_ref();
    if memory.is_none_or(|m| m.guest.is_none() && m.hugepages.is_none()) {
        let m = root.children(&["domain", "memory"]);
        return vec![Cause::new(
            CauseType::Required,
            format!(
                "no memory requested, at least one of '{}', '{}' or '{}' must be set",
                m.child("guest"),
                m.children(&["hugepages", "pageSize"]),
                root.children(&["domain", "resources", "requests", "memory"])
            ),
            "",
        )];
    }
    Vec::new()
}

fn restricted_labels(vmi: &VirtualMachineInstance) -> BTreeMap<&str, &str> {
    vmi.metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| RESTRICTED_LABELS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Upstream's `ValidateVirtualMachineInstanceMetadata`.
fn metadata(vmi: &VirtualMachineInstance, config: &Config, user: &User) -> Vec<Cause> {
    let mut c = Vec::new();
    let m = Path::new("metadata");
    if !config.is_kubevirt(user) && !restricted_labels(vmi).is_empty() {
        c.push(Cause::new(
            CauseType::NotSupported,
            "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
            m.child("labels"),
        ));
    }
    let annotation =
        |key: &str| vmi.metadata.annotations.as_ref().and_then(|a| a.get(key)).is_some_and(|v| !v.is_empty());
    if annotation(ann::IGNITION_DATA) && !config.enabled(FeatureGate::Ignition) {
        c.push(Cause::invalid(
            format!(
                "ExperimentalIgnitionSupport feature gate is not enabled in kubevirt-config, invalid entry {}",
                m.children(&["annotations", ann::IGNITION_DATA])
            ),
            m.child("annotations"),
        ));
    }
    if annotation(ann::HOOK_SIDECARS) && !config.enabled(FeatureGate::Sidecar) {
        c.push(Cause::invalid(
            format!(
                "sidecar feature gate is not enabled in kubevirt-config, invalid entry {}",
                m.children(&["annotations", ann::HOOK_SIDECARS])
            ),
            m.child("annotations"),
        ));
    }
    c
}

/// Upstream's `ValidateVirtualMachineInstancePerArch` (amd64's checks; arm64's and s390x's are not reproduced).
fn per_arch(root: &Path, spec: &VirtualMachineInstanceSpec) -> Vec<Cause> {
    let arch = spec.architecture.as_deref().unwrap_or_default();
    let devices = root.children(&["domain", "devices"]);
    match arch {
        "amd64" => {
            let mut c = Vec::new();
            if let Some(w) = &spec.domain.devices.watchdog
                && !(w.i6300esb.is_some() && w.diag288.is_none())
            {
                c.push(Cause::new(
                    CauseType::NotSupported,
                    "amd64 only supports I6300ESB watchdog device",
                    devices.child("watchdog"),
                ));
            }
            if let Some(v) = &spec.domain.devices.video {
                let t = v.type_.as_deref().unwrap_or_default();
                if !VALID_VIDEO_TYPES_AMD64.contains(&t) {
                    c.push(Cause::new(
                        CauseType::NotSupported,
                        format!("video model '{t}' is not supported on amd64 architecture"),
                        devices.children(&["video", "type"]),
                    ));
                }
            }
            c
        }
        "arm64" | "s390x" => Vec::new(),
        other => vec![Cause::invalid(format!("unsupported architecture: {other}"), root.child("architecture"))],
    }
}

/// A spec (or status) as JSON for upstream's "semantic" equality: quantities canonical, empty lists and maps
/// equal to absent ones.
fn semantic(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, semantic(v)))
                .filter(|(_, v)| !matches!(v, Value::Null) && v.as_array().is_none_or(|a| !a.is_empty()))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(semantic).collect()),
        Value::String(s) => match Quantity::parse(&s) {
            // Only strings that look like quantities with a unit or digits; names stay untouched.
            Ok(q) if s.starts_with(|c: char| c.is_ascii_digit()) => Value::String(q.canonical()),
            _ => Value::String(s),
        },
        v => v,
    }
}

/// Whether two serialisable values are equal the way upstream's `equality.Semantic.DeepEqual` sees them.
pub fn semantically_equal<T: serde::Serialize>(a: &T, b: &T) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(a), Ok(b)) => semantic(a) == semantic(b),
        _ => false,
    }
}

/// The causes to refuse an update from `old` to `new` for (empty: admitted). Upstream answers with one cause.
pub fn validate_update(
    old: &VirtualMachineInstance,
    new: &VirtualMachineInstance,
    config: &Config,
    user: &User,
) -> Vec<Cause> {
    let kubevirt = config.is_kubevirt(user);
    if !semantically_equal(&old.spec, &new.spec) {
        if !kubevirt {
            return vec![Cause::new(CauseType::NotSupported, "update of VMI object is restricted", "")];
        }
        let max_sockets =
            |v: &VirtualMachineInstance| v.spec.domain.cpu.as_ref().and_then(|c| c.max_sockets).unwrap_or(0);
        if max_sockets(old) != max_sockets(new) {
            return vec![Cause::invalid("CPU topology maxSockets changed", "")];
        }
        let max_guest = |v: &VirtualMachineInstance| {
            v.spec.domain.memory.as_ref().and_then(|m| m.max_guest.as_ref()).map(|q| Quantity::or_zero(Some(q)))
        };
        if let (Some(a), Some(b)) = (max_guest(old), max_guest(new))
            && a != b
        {
            return vec![Cause::invalid("Memory maxGuest changed", "")];
        }
    }
    if !kubevirt && restricted_labels(old) != restricted_labels(new) {
        return vec![Cause::new(
            CauseType::NotSupported,
            "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
            "",
        )];
    }
    Vec::new()
}
