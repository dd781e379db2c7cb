//! Live updates of a running VM (contract §7.5; upstream's `addRestartRequiredIfNeeded`, `handleCPUChangeRequest`,
//! `handleMemoryHotplugRequest` and the placement patches), pure: the template the VMI was started from, the VM's
//! template now and the VMI → a patch of the VMI, or why the change needs a restart.
//!
//! ```text
//! started template ≠ VM template, once the live-updatable fields are taken from the VM's ⇒ RestartRequired
//!   live-updatable under vmRolloutStrategy LiveUpdate: cpu.sockets, memory.guest, nodeSelector, affinity, tolerations
//! sockets ≠ the VMI's: hotplug in flight / migrating ⇒ wait; > maxSockets, < the VMI's, arm64, not migratable
//!   ⇒ RestartRequired; else the VMI gets the sockets and CPU requests/limits grown by 1000m/cpuAllocationRatio
//!   per added vCPU (only where the VM's template sets them)
//! guest ≠ the VMI's: upstream's checks in upstream's order (RestartRequired messages verbatim); else the VMI
//!   gets the guest size and its memory request (and limit, when the template sets one) grown by the difference
//! placement ≠ the VMI's ⇒ the VMI gets the VM's (it steers the next migration's target pod)
//! hotpluggable volumes (and their disks) added to / removed from the template, every other volume unchanged
//!   ⇒ the VMI gets them added / removed (declarative hotplug; a volume still detaching is added back only once
//!   its volumeStatus is gone); the VMI controller and the node agent attach and detach them
//! ```
//!
//! The VMI controller then sees `HotVCPUChange` / `HotMemoryChange`, migrates the VMI into a launcher pod of the new
//! size and the target node agent plugs the vCPUs and memory in (`vmi/workload_update.rs`,
//! `node-agent/src/migration/target.rs`). Upstream applies CPU hotplug to VMIs that cannot migrate and leaves
//! them waiting for a migration that never comes; here such a change asks for a restart instead.

use crds::kubevirt::domain::Cpu;
use crds::kubevirt::vmi::{ConditionStatus, VirtualMachineInstanceConditionType as VmiType};
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crds::quantity::{Format, Quantity};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde_json::Value;

use super::plan::MESSAGE_RESTART_REQUIRED;

/// The cluster settings live updates depend on (the `KubeVirt` CR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// `vmRolloutStrategy: LiveUpdate` (the default); with `Stage` every template change waits for a restart.
    pub live_update: bool,
    /// `developerConfiguration.cpuAllocationRatio` (default 10).
    pub cpu_allocation_ratio: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings { live_update: true, cpu_allocation_ratio: crds::kubevirt::config::DEFAULT_CPU_ALLOCATION_RATIO }
    }
}

/// RestartRequired messages of the CPU and memory checks (upstream's).
pub mod message {
    /// More sockets than the VMI's `maxSockets`.
    pub const CPU_ABOVE_MAX: &str = "CPU sockets updated in template spec to a value higher than what's available";
    /// Fewer sockets than the VMI has.
    pub const CPU_REDUCTION: &str = "Reduction of CPU socket count requires a restart";
    /// arm64 guests.
    pub const CPU_ARM: &str = "ARM doesn't support CPU hotplug";
    /// Ours: upstream patches such a VMI and leaves it waiting for a migration that cannot happen.
    pub const CPU_NOT_MIGRATABLE: &str =
        "CPU sockets updated in template spec. CPU-hotplug is only available for migratable VMs";
    /// The last memory hotplug of this VMI failed on the target.
    pub const MEMORY_FAILED: &str =
        "memory updated in template spec. Memory-hotplug failed and is not available for this VM configuration";
    /// The VMI cannot migrate.
    pub const MEMORY_NOT_MIGRATABLE: &str =
        "memory updated in template spec. Memory-hotplug is only available for migratable VMs";
    /// The VMI has no `maxGuest`.
    pub const MEMORY_NO_MAX: &str =
        "memory updated in template spec. Memory-hotplug is not available for this VM configuration";
    /// Less than the VMI booted with.
    pub const MEMORY_BELOW_BOOT: &str =
        "memory updated in template spec to a value lower than what the VM started with";
    /// More than `maxGuest`.
    pub const MEMORY_ABOVE_MAX: &str = "memory updated in template spec to a value higher than what's available";
}

/// Memory hotplug granularity (upstream's `HotplugBlockAlignmentBytes`, 2 MiB; 1 GiB with 1Gi hugepages).
pub const HOTPLUG_BLOCK: i64 = 2 << 20;
/// Block alignment with 1Gi hugepages.
pub const HOTPLUG_BLOCK_1G_HUGEPAGES: i64 = 1 << 30;
/// Smallest guest memory hotplug is offered for (1 GiB).
pub const HOTPLUG_MIN_GUEST: i64 = 1 << 30;

/// What a running VM's template change means for its VMI.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The `RestartRequired` message, when a change cannot be applied live.
    pub restart: Option<String>,
    /// The merge patch that applies the live changes to the VMI (its `metadata.resourceVersion` included, so a
    /// VMI that changed meanwhile refuses it), when there are any.
    pub patch: Option<Value>,
    /// A live change waits for a hotplug or migration in flight (the VMI's next change brings the VM back).
    pub waiting: bool,
}

impl Outcome {
    /// Whether the VMI has every change of the template (no restart, nothing to patch, nothing waiting).
    pub fn synced(&self) -> bool {
        self.restart.is_none() && self.patch.is_none() && !self.waiting
    }
}

/// JSON pointers (in a VMI template `{metadata, spec}`) of the fields a live update applies.
const LIVE_FIELDS: [&str; 5] = [
    "/spec/domain/cpu/sockets",
    "/spec/domain/memory/guest",
    "/spec/nodeSelector",
    "/spec/affinity",
    "/spec/tolerations",
];

/// Sets `pointer` in `target` to `value` (creating parent objects), or removes it for `None`.
fn set_pointer(target: &mut Value, pointer: &str, value: Option<&Value>) {
    let Some((parent, key)) = pointer.rsplit_once('/') else { return };
    if value.is_none() && target.pointer(parent).is_none() {
        return;
    }
    let mut node = target;
    for part in parent.split('/').skip(1) {
        if !node.is_object() {
            *node = Value::Object(serde_json::Map::new());
        }
        let Value::Object(map) = node else { return };
        node = map.entry(part.to_owned()).or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    if let Value::Object(map) = node {
        match value {
            Some(v) => {
                map.insert(key.to_owned(), v.clone());
            }
            None => {
                map.remove(key);
            }
        }
    }
}

fn vcpus(cpu: Option<&Cpu>) -> i64 {
    let get = |f: fn(&Cpu) -> Option<u32>| i64::from(cpu.and_then(f).unwrap_or(1).max(1));
    get(|c| c.sockets) * get(|c| c.cores) * get(|c| c.threads)
}

fn quantity(q: Option<&K8sQuantity>) -> Option<Quantity> {
    q.and_then(|q| Quantity::of(q).ok())
}

fn has_condition(vmi: &VirtualMachineInstance, t: &VmiType, status: ConditionStatus) -> bool {
    vmi.status.as_ref().and_then(|s| s.condition(t)).is_some_and(|c| c.status == status)
}

fn migrating(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .is_some_and(|m| m.migration_uid.is_some() && m.completed != Some(true) && m.failed != Some(true))
}

/// A resource of the VMI's `resources.requests` / `.limits` (`kind`), set in `spec`.
fn set_resource(spec: &mut Value, kind: &str, resource: &str, q: Quantity) {
    set_pointer(spec, &format!("/domain/resources/{kind}/{resource}"), Some(&Value::String(q.canonical())));
}

/// Decides a running VM's template change: `started` is the template (`{metadata, spec}`) its VMI was created
/// from, `vm` the VM now, `vmi` its live VMI.
pub fn plan(started: &Value, vm: &VirtualMachine, vmi: &VirtualMachineInstance, settings: &Settings) -> Outcome {
    let mut out = Outcome::default();
    let current = serde_json::to_value(&vm.spec.template).unwrap_or_default();
    let mut masked = started.clone();
    let hotplug_only = hotplug_only(started, &current);
    if settings.live_update || hotplug_only {
        for field in LIVE_FIELDS.iter().filter(|_| settings.live_update) {
            set_pointer(&mut masked, field, current.pointer(field));
        }
        if hotplug_only {
            for field in ["/spec/volumes", "/spec/domain/devices/disks"] {
                set_pointer(&mut masked, field, current.pointer(field));
            }
        }
    }
    if masked != current {
        out.restart = Some(MESSAGE_RESTART_REQUIRED.to_owned());
        return out;
    }
    let old_spec = serde_json::to_value(&vmi.spec).unwrap_or_default();
    let mut spec = old_spec.clone();
    // Declarative volume hotplug (upstream runs it under either rollout strategy).
    out.waiting = sync_hotplug_volumes(&current, vmi, &mut spec);
    if !settings.live_update {
        if let Some(diff) = controller_runtime::api::merge_diff(&old_spec, &spec) {
            out.patch =
                Some(serde_json::json!({"metadata": {"resourceVersion": vmi.metadata.resource_version}, "spec": diff}));
        }
        return out;
    }
    let template = vm.spec.template.spec.clone().unwrap_or_default();
    let mut restart = |m: &str| {
        if out.restart.is_none() {
            out.restart = Some(m.to_owned());
        }
    };

    // CPU sockets.
    if let (Some(want), Some(have)) = (template.domain.cpu.as_ref(), vmi.spec.domain.cpu.as_ref())
        && want.sockets != have.sockets
    {
        let sockets = i64::from(want.sockets.unwrap_or(1));
        if has_condition(vmi, &VmiType::HotVcpuChange, ConditionStatus::True) || migrating(vmi) {
            out.waiting = true;
        } else if sockets > i64::from(have.max_sockets.unwrap_or(0)) {
            restart(message::CPU_ABOVE_MAX);
        } else if sockets < i64::from(have.sockets.unwrap_or(1)) {
            restart(message::CPU_REDUCTION);
        } else if template.architecture.as_deref() == Some("arm64") {
            restart(message::CPU_ARM);
        } else if !vmi.is_migratable() {
            restart(message::CPU_NOT_MIGRATABLE);
        } else {
            set_pointer(&mut spec, "/domain/cpu/sockets", Some(&Value::from(sockets)));
            let per_vcpu = 1000 / i64::from(settings.cpu_allocation_ratio.max(1));
            let delta = Quantity::from_milli((vcpus(Some(want)) - vcpus(Some(have))) * per_vcpu, Format::DecimalSi);
            for kind in ["requests", "limits"] {
                let of = |r: &crds::kubevirt::domain::ResourceRequirements| {
                    if kind == "requests" { r.requests.clone() } else { r.limits.clone() }
                };
                let in_template = template.domain.resources.as_ref().and_then(of);
                if quantity(in_template.as_ref().and_then(|m| m.get("cpu"))).is_some_and(|q| !q.is_zero()) {
                    let vmi_side = vmi.spec.domain.resources.as_ref().and_then(of);
                    let old = quantity(vmi_side.as_ref().and_then(|m| m.get("cpu"))).unwrap_or(Quantity::ZERO);
                    set_resource(&mut spec, kind, "cpu", old.plus(delta));
                }
            }
        }
    }

    // Guest memory.
    let guest_of = |m: Option<&crds::kubevirt::domain::Memory>| quantity(m.and_then(|m| m.guest.as_ref()));
    let status_memory = vmi.status.as_ref().and_then(|s| s.memory.as_ref());
    if let (Some(want), Some(have), Some(current_guest)) = (
        guest_of(template.domain.memory.as_ref()),
        guest_of(vmi.spec.domain.memory.as_ref()),
        quantity(status_memory.and_then(|m| m.guest_current.as_ref())),
    ) {
        let max = quantity(vmi.spec.domain.memory.as_ref().and_then(|m| m.max_guest.as_ref()));
        if has_condition(vmi, &VmiType::HotMemoryChange, ConditionStatus::False) {
            restart(message::MEMORY_FAILED);
        } else if want == have {
        } else if !vmi.is_migratable() {
            restart(message::MEMORY_NOT_MIGRATABLE);
        } else if max.is_none() {
            restart(message::MEMORY_NO_MAX);
        } else if has_condition(vmi, &VmiType::HotMemoryChange, ConditionStatus::True) || migrating(vmi) {
            out.waiting = true;
        } else if let Err(e) = validate_memory(&template, want, max.unwrap_or(Quantity::ZERO)) {
            restart(&format!("memory hotplug not supported, {e}"));
        } else if quantity(status_memory.and_then(|m| m.guest_at_boot.as_ref())).is_some_and(|boot| want < boot) {
            restart(message::MEMORY_BELOW_BOOT);
        } else if max.is_some_and(|m| want > m) {
            restart(message::MEMORY_ABOVE_MAX);
        } else {
            set_pointer(&mut spec, "/domain/memory/guest", Some(&Value::String(want.canonical())));
            let mut delta = Quantity::from_value(want.value() - current_guest.value(), Format::BinarySi);
            let resources = vmi.spec.domain.resources.as_ref();
            let old_request =
                quantity(resources.and_then(|r| r.requests.as_ref()).and_then(|m| m.get("memory"))).unwrap_or(have);
            let mut request = old_request.plus(delta);
            if request < want {
                request = want;
                delta = Quantity::from_value(want.value() - request.value(), Format::BinarySi);
            }
            set_resource(&mut spec, "requests", "memory", request);
            let template_limit =
                template.domain.resources.as_ref().and_then(|r| r.limits.as_ref()).and_then(|m| m.get("memory"));
            if quantity(template_limit).is_some_and(|q| !q.is_zero()) {
                let old = quantity(resources.and_then(|r| r.limits.as_ref()).and_then(|m| m.get("memory")))
                    .unwrap_or(Quantity::ZERO);
                set_resource(&mut spec, "limits", "memory", old.plus(delta));
            }
        }
    }

    // Placement: what the next migration's target pod is scheduled by.
    for field in ["/nodeSelector", "/affinity", "/tolerations"] {
        set_pointer(&mut spec, field, current.pointer(&format!("/spec{field}")));
    }

    if let Some(diff) = controller_runtime::api::merge_diff(&old_spec, &spec) {
        out.patch = Some(serde_json::json!({
            "metadata": {"resourceVersion": vmi.metadata.resource_version},
            "spec": diff,
        }));
    }
    out
}

/// Whether a volume (JSON) is hotpluggable (a PVC or DataVolume with `hotpluggable: true`).
fn is_hotpluggable(v: &Value) -> bool {
    ["/persistentVolumeClaim/hotpluggable", "/dataVolume/hotpluggable"]
        .iter()
        .any(|p| v.pointer(p) == Some(&Value::Bool(true)))
}

/// The volumes (`/spec/volumes` of a template `t`) split into (the others, the hotpluggable ones), and the disks
/// likewise (a disk is hotpluggable when its volume is).
fn split(t: &Value, volumes_at: &str, disks_at: &str) -> (Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>) {
    let list = |p: &str| t.pointer(p).and_then(Value::as_array).cloned().unwrap_or_default();
    let (hot, fixed): (Vec<Value>, Vec<Value>) = list(volumes_at).into_iter().partition(is_hotpluggable);
    let hot_names: Vec<&str> = hot.iter().filter_map(|v| v.get("name")?.as_str()).collect();
    let (hot_disks, fixed_disks): (Vec<Value>, Vec<Value>) = list(disks_at)
        .into_iter()
        .partition(|d| d.get("name").and_then(Value::as_str).is_some_and(|n| hot_names.contains(&n)));
    (fixed, hot, fixed_disks, hot_disks)
}

/// Whether the templates `started` and `current` differ in their volumes and disks only by hotpluggable ones
/// (upstream's `validLiveUpdateVolumes` / `validLiveUpdateDisks`).
fn hotplug_only(started: &Value, current: &Value) -> bool {
    let (a, _, c, _) = split(started, "/spec/volumes", "/spec/domain/devices/disks");
    let (b, _, d, _) = split(current, "/spec/volumes", "/spec/domain/devices/disks");
    a == b && c == d
}

/// Makes the hotpluggable volumes and disks of the VMI `spec` (JSON) those of the VM template `current`: new ones
/// appended (unless a volume of that name is still detaching: it has a volumeStatus), removed ones dropped.
/// Returns whether an addition waits for such a detach.
fn sync_hotplug_volumes(current: &Value, vmi: &VirtualMachineInstance, spec: &mut Value) -> bool {
    let (_, want, _, want_disks) = split(current, "/spec/volumes", "/spec/domain/devices/disks");
    let want_names: Vec<&str> = want.iter().filter_map(|v| v.get("name")?.as_str()).collect();
    let status_names: Vec<String> = vmi
        .status
        .as_ref()
        .and_then(|s| s.volume_status.as_ref())
        .map(|v| v.iter().map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    let name_of = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned).unwrap_or_default();
    let mut volumes: Vec<Value> = spec.pointer("/volumes").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut disks: Vec<Value> =
        spec.pointer("/domain/devices/disks").and_then(Value::as_array).cloned().unwrap_or_default();
    let hot_in_vmi: Vec<String> = volumes.iter().filter(|v| is_hotpluggable(v)).map(name_of).collect();
    let removed: Vec<&String> = hot_in_vmi.iter().filter(|n| !want_names.contains(&n.as_str())).collect();
    volumes.retain(|v| !removed.contains(&&name_of(v)));
    disks.retain(|d| !removed.contains(&&name_of(d)));
    let mut waiting = false;
    for v in &want {
        let name = name_of(v);
        if hot_in_vmi.contains(&name) || volumes.iter().any(|x| name_of(x) == name) {
            continue;
        }
        if status_names.contains(&name) {
            waiting = true;
            continue;
        }
        volumes.push(v.clone());
        disks.extend(want_disks.iter().filter(|d| name_of(d) == name).cloned());
    }
    let changed = spec.pointer("/volumes").and_then(Value::as_array).map_or(!volumes.is_empty(), |v| v != &volumes)
        || spec.pointer("/domain/devices/disks").and_then(Value::as_array).map_or(!disks.is_empty(), |d| d != &disks);
    if changed {
        set_pointer(spec, "/volumes", Some(&Value::Array(volumes)));
        set_pointer(spec, "/domain/devices/disks", Some(&Value::Array(disks)));
    }
    waiting
}

/// Upstream's `ValidateLiveUpdateMemory` for the VM's template `spec` asking for `guest` under `max_guest`.
fn validate_memory(
    spec: &crds::kubevirt::vmi::VirtualMachineInstanceSpec,
    guest: Quantity,
    max_guest: Quantity,
) -> Result<(), String> {
    let domain = &spec.domain;
    let cpu = domain.cpu.as_ref();
    if cpu.is_some_and(|c| c.realtime.is_some()) {
        return Err("Memory hotplug is not compatible with realtime VMs".into());
    }
    if cpu.and_then(|c| c.numa.as_ref()).is_some_and(|n| n.guest_mapping_passthrough.is_some()) {
        return Err("Memory hotplug is not compatible with guest mapping passthrough".into());
    }
    if domain.extra.contains_key("launchSecurity") {
        return Err("Memory hotplug is not compatible with encrypted VMs".into());
    }
    let hugepages_1g =
        domain.memory.as_ref().and_then(|m| m.hugepages.as_ref()).and_then(|h| h.page_size.as_deref()) == Some("1Gi");
    let block = if hugepages_1g { HOTPLUG_BLOCK_1G_HUGEPAGES } else { HOTPLUG_BLOCK };
    let alignment = Quantity::from_value(block, Format::BinarySi);
    if guest > max_guest {
        return Err("Guest memory is greater than the configured maxGuest memory".into());
    }
    if guest.value() % block != 0 {
        return Err(format!("Guest memory must be {alignment} aligned"));
    }
    if max_guest.value() % block != 0 {
        return Err(format!("MaxGuest must be {alignment} aligned"));
    }
    // The VM mutator of this project does not default the template's architecture: absent is the cluster's amd64.
    if !matches!(spec.architecture.as_deref(), None | Some("" | "amd64" | "arm64")) {
        return Err("Memory hotplug is only available for x86_64 and arm64 VMs".into());
    }
    if guest.value() < HOTPLUG_MIN_GUEST {
        return Err("Memory hotplug is only available for VMs with at least 1Gi of guest memory".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(template_spec: Value) -> VirtualMachine {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm", "namespace": "ns", "generation": 2},
            "spec": {"runStrategy": "Always", "template": {"spec": template_spec}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn started(template_spec: &Value) -> Value {
        json!({"spec": template_spec})
    }

    fn base() -> Value {
        json!({"domain": {"cpu": {"sockets": 1, "cores": 1, "threads": 1},
                          "memory": {"guest": "1Gi"},
                          "resources": {"requests": {"cpu": "100m"}},
                          "devices": {}}})
    }

    fn vmi(migratable: bool, conditions: Value) -> VirtualMachineInstance {
        let mut conds = vec![json!({"type": "LiveMigratable", "status": if migratable { "True" } else { "False" }})];
        if let Value::Array(more) = conditions {
            conds.extend(more);
        }
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm", "namespace": "ns", "resourceVersion": "41"},
            "spec": {"domain": {"cpu": {"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 4},
                                "memory": {"guest": "1Gi", "maxGuest": "4Gi"},
                                "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}},
                                "devices": {}}},
            "status": {"phase": "Running", "conditions": conds,
                       "memory": {"guestAtBoot": "1Gi", "guestCurrent": "1Gi", "guestRequested": "1Gi"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn with(mut v: Value, pointer: &str, value: Value) -> Value {
        set_pointer(&mut v, pointer, Some(&value));
        v
    }

    #[test]
    fn more_sockets_are_patched_with_the_cpu_request_grown() {
        let t = base();
        let out = plan(
            &started(&t),
            &vm(with(t.clone(), "/domain/cpu/sockets", json!(3))),
            &vmi(true, json!([])),
            &Settings::default(),
        );
        assert_eq!(out.restart, None);
        assert!(!out.waiting);
        assert_eq!(
            out.patch,
            Some(json!({"metadata": {"resourceVersion": "41"},
                        "spec": {"domain": {"cpu": {"sockets": 3}, "resources": {"requests": {"cpu": "300m"}}}}}))
        );
        // A ratio of 4: 250m per vCPU; no CPU request in the template: none grown.
        let mut no_request = with(t.clone(), "/domain/cpu/sockets", json!(2));
        no_request["domain"].as_object_mut().map(|d| d.remove("resources"));
        let s = Settings { cpu_allocation_ratio: 4, ..Settings::default() };
        let out = plan(&started(&no_request), &vm(no_request.clone()), &vmi(true, json!([])), &s);
        let patch = out.patch.unwrap_or_default();
        assert_eq!(patch["spec"], json!({"domain": {"cpu": {"sockets": 2}}}));
        let out = plan(&started(&t), &vm(with(t.clone(), "/domain/cpu/sockets", json!(2))), &vmi(true, json!([])), &s);
        assert_eq!(out.patch.unwrap_or_default()["spec"]["domain"]["resources"], json!({"requests": {"cpu": "350m"}}));
    }

    #[test]
    fn cpu_changes_that_cannot_be_live_need_a_restart_or_wait() {
        let t = base();
        let sockets = |n: i64| vm(with(t.clone(), "/domain/cpu/sockets", json!(n)));
        let s = Settings::default();
        let table: Vec<(&str, VirtualMachine, VirtualMachineInstance, Option<&str>, bool)> = vec![
            ("above maxSockets", sockets(5), vmi(true, json!([])), Some(message::CPU_ABOVE_MAX), false),
            ("not migratable", sockets(2), vmi(false, json!([])), Some(message::CPU_NOT_MIGRATABLE), false),
            (
                "hotplug in flight",
                sockets(2),
                vmi(true, json!([{"type": "HotVCPUChange", "status": "True"}])),
                None,
                true,
            ),
        ];
        for (case, vm, vmi, restart, waiting) in table {
            let out = plan(&started(&t), &vm, &vmi, &s);
            assert_eq!((out.restart.as_deref(), out.waiting), (restart, waiting), "{case}");
            assert_eq!(out.patch, None, "{case}");
        }
        // Fewer sockets than the VMI has.
        let two = with(t.clone(), "/domain/cpu/sockets", json!(2));
        let mut v = vmi(true, json!([]));
        if let Some(c) = v.spec.domain.cpu.as_mut() {
            c.sockets = Some(2);
        }
        let out = plan(&started(&two), &vm(t.clone()), &v, &s);
        assert_eq!(out.restart.as_deref(), Some(message::CPU_REDUCTION));
        // Under the Stage strategy every change waits for a restart.
        let stage = Settings { live_update: false, ..s };
        let out = plan(&started(&t), &sockets(2), &vmi(true, json!([])), &stage);
        assert_eq!(out.restart.as_deref(), Some(MESSAGE_RESTART_REQUIRED));
    }

    #[test]
    fn more_memory_is_patched_with_the_request_grown() {
        let t = base();
        let out = plan(
            &started(&t),
            &vm(with(t.clone(), "/domain/memory/guest", json!("1536Mi"))),
            &vmi(true, json!([])),
            &Settings::default(),
        );
        assert_eq!(out.restart, None);
        assert_eq!(
            out.patch.unwrap_or_default()["spec"],
            json!({"domain": {"memory": {"guest": "1536Mi"}, "resources": {"requests": {"memory": "1536Mi"}}}})
        );
        // A memory limit in the template grows too.
        let limited = with(t.clone(), "/domain/resources/limits", json!({"memory": "2Gi"}));
        let mut v = vmi(true, json!([]));
        if let Some(r) = v.spec.domain.resources.as_mut() {
            r.limits = Some([("memory".to_owned(), K8sQuantity("2Gi".into()))].into());
        }
        let out = plan(
            &started(&limited),
            &vm(with(limited.clone(), "/domain/memory/guest", json!("2Gi"))),
            &v,
            &Settings::default(),
        );
        assert_eq!(out.patch.unwrap_or_default()["spec"]["domain"]["resources"]["limits"], json!({"memory": "3Gi"}));
    }

    #[test]
    fn memory_changes_follow_upstreams_checks_in_order() {
        let t = base();
        let guest = |g: &str| vm(with(t.clone(), "/domain/memory/guest", json!(g)));
        let s = Settings::default();
        let mut no_max = vmi(true, json!([]));
        if let Some(m) = no_max.spec.domain.memory.as_mut() {
            m.max_guest = None;
        }
        let table: Vec<(&str, VirtualMachine, VirtualMachineInstance, Option<String>, bool)> = vec![
            (
                "last hotplug failed",
                guest("2Gi"),
                vmi(true, json!([{"type": "HotMemoryChange", "status": "False"}])),
                Some(message::MEMORY_FAILED.into()),
                false,
            ),
            ("not migratable", guest("2Gi"), vmi(false, json!([])), Some(message::MEMORY_NOT_MIGRATABLE.into()), false),
            ("no maxGuest", guest("2Gi"), no_max, Some(message::MEMORY_NO_MAX.into()), false),
            (
                "in flight",
                guest("2Gi"),
                vmi(true, json!([{"type": "HotMemoryChange", "status": "True"}])),
                None,
                true,
            ),
            (
                "above maxGuest",
                guest("5Gi"),
                vmi(true, json!([])),
                Some("memory hotplug not supported, Guest memory is greater than the configured maxGuest memory".into()),
                false,
            ),
            (
                "unaligned",
                guest("1025Mi"),
                vmi(true, json!([])),
                Some("memory hotplug not supported, Guest memory must be 2Mi aligned".into()),
                false,
            ),
            (
                "below 1Gi",
                guest("512Mi"),
                vmi(true, json!([])),
                Some(
                    "memory hotplug not supported, Memory hotplug is only available for VMs with at least 1Gi of guest memory"
                        .into(),
                ),
                false,
            ),
        ];
        for (case, vm, vmi, restart, waiting) in table {
            let out = plan(&started(&t), &vm, &vmi, &s);
            assert_eq!((out.restart, out.waiting), (restart, waiting), "{case}");
            assert_eq!(out.patch, None, "{case}");
        }
        // Below what it booted with (after a hotplug to 2Gi, back to 1536Mi while it booted with 2Gi).
        let mut booted_big = vmi(true, json!([]));
        if let Some(m) = booted_big.spec.domain.memory.as_mut() {
            m.guest = Some(K8sQuantity("2Gi".into()));
        }
        if let Some(m) = booted_big.status.as_mut().and_then(|s| s.memory.as_mut()) {
            m.guest_at_boot = Some(K8sQuantity("2Gi".into()));
        }
        let out = plan(&started(&t), &guest("1536Mi"), &booted_big, &s);
        assert_eq!(out.restart.as_deref(), Some(message::MEMORY_BELOW_BOOT));
    }

    #[test]
    fn other_template_changes_need_a_restart_and_placement_is_copied() {
        let t = base();
        let out = plan(
            &started(&t),
            &vm(with(t.clone(), "/domain/cpu/cores", json!(2))),
            &vmi(true, json!([])),
            &Settings::default(),
        );
        assert_eq!(out.restart.as_deref(), Some(MESSAGE_RESTART_REQUIRED));
        assert_eq!(out.patch, None);
        let placed = with(t.clone(), "/nodeSelector", json!({"zone": "a"}));
        let out = plan(&started(&t), &vm(placed), &vmi(true, json!([])), &Settings::default());
        assert!(out.restart.is_none());
        assert_eq!(out.patch.unwrap_or_default()["spec"], json!({"nodeSelector": {"zone": "a"}}));
        // Nothing changed: synced.
        assert!(plan(&started(&t), &vm(t.clone()), &vmi(true, json!([])), &Settings::default()).synced());
    }

    #[test]
    fn hotpluggable_volumes_follow_the_template() {
        let t = with(base(), "/volumes", json!([{"name": "root", "containerDisk": {"image": "i"}}]));
        let t = with(t, "/domain/devices/disks", json!([{"name": "root", "disk": {"bus": "virtio"}}]));
        let mut running = vmi(true, json!([]));
        running.spec.volumes = serde_json::from_value(json!([{"name": "root", "containerDisk": {"image": "i"}}])).ok();
        running.spec.domain.devices.disks =
            serde_json::from_value(json!([{"name": "root", "disk": {"bus": "virtio"}}])).ok();
        let hot = with(
            t.clone(),
            "/volumes",
            json!([{"name": "root", "containerDisk": {"image": "i"}},
                   {"name": "data", "persistentVolumeClaim": {"claimName": "pvc", "hotpluggable": true}}]),
        );
        let hot = with(
            hot,
            "/domain/devices/disks",
            json!([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "data", "disk": {"bus": "scsi"}}]),
        );
        // Added under either strategy, no restart.
        for s in [Settings::default(), Settings { live_update: false, ..Settings::default() }] {
            let out = plan(&started(&t), &vm(hot.clone()), &running, &s);
            assert_eq!(out.restart, None);
            let p = out.patch.unwrap_or_default();
            assert_eq!(p["spec"]["volumes"][1]["name"], "data", "{p}");
            assert_eq!(p["spec"]["domain"]["devices"]["disks"][1], json!({"name": "data", "disk": {"bus": "scsi"}}));
        }
        // Removed from the template: removed from the VMI.
        let mut attached = running.clone();
        attached.spec.volumes = serde_json::from_value(hot["volumes"].clone()).ok();
        attached.spec.domain.devices.disks = serde_json::from_value(hot["domain"]["devices"]["disks"].clone()).ok();
        let out = plan(&started(&hot), &vm(t.clone()), &attached, &Settings::default());
        assert_eq!(out.restart, None);
        let p = out.patch.unwrap_or_default();
        assert_eq!(p["spec"]["volumes"].as_array().map(Vec::len), Some(1), "{p}");
        // Still detaching (a volumeStatus): not added back yet.
        let mut detaching = running.clone();
        if let Some(s) = detaching.status.as_mut() {
            s.volume_status =
                serde_json::from_value(json!([{"name": "data", "target": "sda", "phase": "Detaching"}])).ok();
        }
        let out = plan(&started(&t), &vm(hot.clone()), &detaching, &Settings::default());
        assert_eq!(out.patch, None);
        assert!(out.waiting, "the add waits for the detach");
        // A change to a volume that is not hotpluggable still needs a restart.
        let other = with(t.clone(), "/volumes", json!([{"name": "root", "containerDisk": {"image": "j"}}]));
        let out = plan(&started(&t), &vm(other), &running, &Settings::default());
        assert_eq!(out.restart.as_deref(), Some(MESSAGE_RESTART_REQUIRED));
    }
}
