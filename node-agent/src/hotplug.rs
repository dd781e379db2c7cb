//! CPU and memory hotplug in a running domain (contract §7.5; upstream's target virt-handler `hotplugCPU` /
//! `hotplugMemory` and the launcher's `SyncVirtualMachineCPUs` / `SyncVirtualMachineMemory`): after a
//! workload-update migration has moved the VMI into a launcher pod sized for its new spec, the target agent makes
//! the guest match the spec and records it in the status.
//!
//! ```text
//! domain XML (libvirt's live definition) + VMI spec ──resize (pure)──► Resize { vcpus, virtio-mem device XML }
//!   ─► setVcpus(LIVE|CONFIG), updateDevice(LIVE)      (apply, blocking)
//!   ─► status: currentCPUTopology, memory.guestRequested; HotVCPUChange / HotMemoryChange removed, or
//!      HotMemoryChange=False "Memory Hotplug Failed" (record, pure)
//! ```

use contracts::quantity::parse_bytes;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{
    ConditionStatus, CpuTopology, MemoryStatus, VirtualMachineInstanceCondition as Condition,
    VirtualMachineInstanceConditionType as Type, VirtualMachineInstanceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::libvirt::Domain;

/// `HotMemoryChange` reason when plugging the memory in failed (upstream's).
pub const REASON_MEMORY_FAILED: &str = "Memory Hotplug Failed";
/// `HotMemoryChange` message when plugging the memory in failed (upstream's).
pub const MESSAGE_MEMORY_FAILED: &str = "memory hotplug failed, the VM configuration is not supported";
/// Event message of a failed vCPU change (upstream's; the reason is the error).
pub const EVENT_CPU_FAILED: &str = "failed to change vCPUs";
/// Event message of a failed memory change (upstream's; the reason is the error).
pub const EVENT_MEMORY_FAILED: &str = "failed to update guest memory";

/// What a running domain needs to match its VMI's spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resize {
    /// The vCPU count to enable, when it differs from the domain's current one.
    pub vcpus: Option<u32>,
    /// The virtio-mem device with the new `requested` size, when it differs.
    pub memory_device: Option<String>,
    /// Why the memory cannot be resized (the spec asks for a size the domain has no room or device for).
    pub memory_error: Option<String>,
}

/// The vCPUs the spec asks for (sockets × cores × threads, each at least 1).
pub fn spec_vcpus(vmi: &VirtualMachineInstance) -> u32 {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let get = |f: fn(&crds::kubevirt::domain::Cpu) -> Option<u32>| cpu.and_then(f).unwrap_or(1).max(1);
    get(|c| c.sockets).saturating_mul(get(|c| c.cores)).saturating_mul(get(|c| c.threads))
}

fn guest_bytes(vmi: &VirtualMachineInstance) -> Option<u64> {
    parse_bytes(&vmi.spec.domain.memory.as_ref()?.guest.as_ref()?.0).ok()
}

/// Bytes of a libvirt size element (`unit` attribute: b, KiB, MiB, GiB; libvirt's default is KiB).
fn size_of(node: roxmltree::Node<'_, '_>) -> Option<u64> {
    let value: u64 = node.text()?.trim().parse().ok()?;
    let unit = match node.attribute("unit").unwrap_or("KiB") {
        "b" | "bytes" => 1,
        "k" | "KiB" => 1 << 10,
        "M" | "MiB" => 1 << 20,
        "G" | "GiB" => 1 << 30,
        _ => return None,
    };
    value.checked_mul(unit)
}

/// The domain's memory in bytes as libvirt reports it (`<currentMemory>`: boot memory plus what virtio-mem has
/// plugged in), for `status.memory.guestCurrent`.
pub fn current_memory(domain_xml: &str) -> Option<u64> {
    let doc = roxmltree::Document::parse(domain_xml).ok()?;
    size_of(doc.root_element().children().find(|n| n.has_tag_name("currentMemory"))?)
}

/// Compares the live domain (`domain_xml`) with `vmi`'s spec. The virtio-mem device should hold `guest - boot`
/// bytes, where boot is the domain's NUMA memory (what it was started with).
pub fn resize(vmi: &VirtualMachineInstance, domain_xml: &str) -> Result<Resize, String> {
    let doc = roxmltree::Document::parse(domain_xml).map_err(|e| format!("unreadable domain XML: {e}"))?;
    let root = doc.root_element();
    let mut out = Resize::default();
    let vcpu = root.children().find(|n| n.has_tag_name("vcpu")).ok_or("the domain has no <vcpu>")?;
    let max: u32 = vcpu.text().and_then(|t| t.trim().parse().ok()).ok_or("unreadable <vcpu>")?;
    let current: u32 = vcpu.attribute("current").and_then(|c| c.parse().ok()).unwrap_or(max);
    let want = spec_vcpus(vmi);
    if want != current {
        if want > max {
            return Err(format!("the spec asks for {want} vCPUs, the domain has room for {max}"));
        }
        out.vcpus = Some(want);
    }

    let Some(guest) = guest_bytes(vmi) else { return Ok(out) };
    let devices = root.children().find(|n| n.has_tag_name("devices"));
    let device = devices
        .and_then(|d| d.children().find(|n| n.has_tag_name("memory") && n.attribute("model") == Some("virtio-mem")));
    let boot = root
        .children()
        .find(|n| n.has_tag_name("cpu"))
        .and_then(|c| c.children().find(|n| n.has_tag_name("numa")))
        .map(|numa| numa.children().filter(|n| n.has_tag_name("cell")).filter_map(|c| cell_memory(&c)).sum::<u64>());
    let Some(device) = device else {
        let memory = root.children().find(|n| n.has_tag_name("memory")).and_then(size_of);
        if memory.is_some_and(|m| m != guest) {
            out.memory_error = Some("the domain has no virtio-mem device to resize".into());
        }
        return Ok(out);
    };
    let target = device.children().find(|n| n.has_tag_name("target")).ok_or("virtio-mem without <target>")?;
    let child = |name: &str| target.children().find(|n| n.has_tag_name(name));
    let size = child("size").and_then(size_of).ok_or("virtio-mem without <size>")?;
    let requested_node = child("requested").ok_or("virtio-mem without <requested>")?;
    let requested = size_of(requested_node).ok_or("unreadable virtio-mem <requested>")?;
    let Some(boot) = boot else { return Err("a virtio-mem device without a NUMA cell".into()) };
    let want = match guest.checked_sub(boot) {
        Some(w) if w <= size => w,
        _ => {
            out.memory_error = Some(format!(
                "the spec asks for {guest} bytes of guest memory, the domain has {boot} to {}",
                boot.saturating_add(size)
            ));
            return Ok(out);
        }
    };
    if want != requested {
        let (d, r) = (device.range(), requested_node.range());
        let xml = format!(
            "{}<requested unit='b'>{want}</requested>{}",
            &domain_xml[d.start..r.start],
            &domain_xml[r.end..d.end]
        );
        out.memory_device = Some(xml);
    }
    Ok(out)
}

fn cell_memory(cell: &roxmltree::Node<'_, '_>) -> Option<u64> {
    let value: u64 = cell.attribute("memory")?.parse().ok()?;
    let unit = match cell.attribute("unit").unwrap_or("KiB") {
        "b" | "bytes" => 1,
        "KiB" | "k" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        _ => return None,
    };
    value.checked_mul(unit)
}

/// How applying a [`Resize`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// `Err` with the error when enabling the vCPUs failed.
    pub cpu: Result<(), String>,
    /// `Err` with the error when resizing the memory failed (or cannot be done).
    pub memory: Result<(), String>,
}

impl Default for Outcome {
    /// Nothing failed.
    fn default() -> Self {
        Outcome { cpu: Ok(()), memory: Ok(()) }
    }
}

/// Makes the running `dom` match `vmi`'s spec (blocking).
pub fn apply(dom: &Domain, vmi: &VirtualMachineInstance) -> Outcome {
    let xml = match dom.xml() {
        Ok(x) => x,
        Err(e) => return Outcome { cpu: Err(e.to_string()), memory: Err(e.to_string()) },
    };
    let plan = match resize(vmi, &xml) {
        Ok(p) => p,
        Err(e) => return Outcome { cpu: Err(e.clone()), memory: Err(e) },
    };
    let cpu = match plan.vcpus {
        Some(n) => dom.set_vcpus(n).map_err(|e| e.to_string()),
        None => Ok(()),
    };
    let memory = match (&plan.memory_error, &plan.memory_device) {
        (Some(e), _) => Err(e.clone()),
        (None, Some(device)) => dom.update_device(device).map_err(|e| e.to_string()),
        (None, None) => Ok(()),
    };
    Outcome { cpu, memory }
}

/// Records `outcome` in `status` (of `vmi`): on success the spec's topology becomes `currentCPUTopology` and its
/// guest size `memory.guestRequested`; the hotplug conditions go, except a failed memory resize, which leaves
/// `HotMemoryChange` False (the VM controller then asks for a restart).
pub fn record(vmi: &VirtualMachineInstance, outcome: &Outcome, status: &mut VirtualMachineInstanceStatus, now: &Time) {
    if outcome.cpu.is_ok()
        && let Some(cpu) = vmi.spec.domain.cpu.as_ref()
    {
        let nz = |v: Option<u32>| v.filter(|v| *v != 0);
        let topology = status.current_cpu_topology.get_or_insert_with(CpuTopology::default);
        topology.sockets = nz(cpu.sockets);
        topology.cores = nz(cpu.cores);
        topology.threads = nz(cpu.threads);
    }
    status.remove_condition(&Type::HotVcpuChange);
    match &outcome.memory {
        Ok(()) => {
            if let Some(guest) = vmi.spec.domain.memory.as_ref().and_then(|m| m.guest.clone()) {
                status.memory.get_or_insert_with(MemoryStatus::default).guest_requested = Some(guest);
            }
            status.remove_condition(&Type::HotMemoryChange);
        }
        Err(_) => {
            if status.condition(&Type::HotMemoryChange).is_some() {
                status.set_condition(
                    Condition::new(
                        Type::HotMemoryChange,
                        ConditionStatus::False,
                        REASON_MEMORY_FAILED,
                        MESSAGE_MEMORY_FAILED,
                    ),
                    now,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(sockets: u32, guest: &str) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {"cpu": {"sockets": sockets, "cores": 1, "threads": 1, "maxSockets": 4},
                                "memory": {"guest": guest, "maxGuest": "2Gi"}, "devices": {}}},
            "status": {"phase": "Running",
                       "conditions": [{"type": "HotVCPUChange", "status": "True"},
                                      {"type": "HotMemoryChange", "status": "True"}],
                       "currentCPUTopology": {"sockets": 1, "cores": 1, "threads": 1},
                       "memory": {"guestAtBoot": "1Gi", "guestCurrent": "1Gi", "guestRequested": "1Gi"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// What libvirt reports for a running hotplug-ready domain (trimmed).
    const LIVE: &str = "<domain type='qemu' id='1'>
  <name>ns_v</name>
  <maxMemory slots='1' unit='KiB'>2097152</maxMemory>
  <memory unit='KiB'>2097152</memory>
  <currentMemory unit='KiB'>1048576</currentMemory>
  <vcpu placement='static' current='1'>4</vcpu>
  <cpu mode='host-model'>
    <topology sockets='4' dies='1' cores='1' threads='1'/>
    <numa>
      <cell id='0' cpus='0-3' memory='1048576' unit='KiB'/>
    </numa>
  </cpu>
  <devices>
    <memory model='virtio-mem'>
      <target>
        <size unit='KiB'>1048576</size>
        <node>0</node>
        <block unit='KiB'>2048</block>
        <requested unit='KiB'>0</requested>
        <current unit='KiB'>0</current>
      </target>
      <alias name='virtiomem0'/>
      <address type='pci' domain='0x0000' bus='0x05' slot='0x00' function='0x0'/>
    </memory>
  </devices>
</domain>";

    #[test]
    fn a_spec_ahead_of_the_domain_gives_vcpus_and_a_device_update() {
        assert_eq!(resize(&vmi(1, "1Gi"), LIVE), Ok(Resize::default()));
        let r = resize(&vmi(3, "1536Mi"), LIVE).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.vcpus, Some(3));
        assert_eq!(r.memory_error, None);
        let device = r.memory_device.unwrap_or_default();
        assert!(device.starts_with("<memory model='virtio-mem'>"), "{device}");
        assert!(device.contains("<requested unit='b'>536870912</requested>"), "{device}");
        assert!(device.contains("<alias name='virtiomem0'/>") && device.ends_with("</memory>"), "{device}");
        assert!(!device.contains("unit='KiB'>0</requested>"), "{device}");
        assert_eq!(current_memory(LIVE), Some(1 << 30));
    }

    #[test]
    fn sizes_the_domain_cannot_hold_are_errors() {
        assert!(resize(&vmi(5, "1Gi"), LIVE).is_err());
        let r = resize(&vmi(1, "3Gi"), LIVE).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.memory_error.is_some_and(|e| e.contains("1073741824 to 2147483648")));
        let plain = "<domain><memory unit='KiB'>1048576</memory><vcpu>1</vcpu><devices/></domain>";
        let r = resize(&vmi(1, "1536Mi"), plain).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.memory_error.as_deref(), Some("the domain has no virtio-mem device to resize"));
        assert_eq!(resize(&vmi(1, "1Gi"), plain).map(|r| r.memory_error), Ok(None));
    }

    #[test]
    fn the_outcome_lands_in_the_status() {
        let now = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let v = vmi(2, "1536Mi");
        let mut s = v.status.clone().unwrap_or_default();
        record(&v, &Outcome { cpu: Ok(()), memory: Ok(()) }, &mut s, &now);
        assert_eq!(s.current_cpu_topology.as_ref().and_then(|t| t.sockets), Some(2));
        assert_eq!(s.memory.as_ref().and_then(|m| m.guest_requested.clone()).map(|q| q.0), Some("1536Mi".into()));
        assert!(s.condition(&Type::HotVcpuChange).is_none() && s.condition(&Type::HotMemoryChange).is_none());
        let mut s = v.status.clone().unwrap_or_default();
        record(&v, &Outcome { cpu: Err("x".into()), memory: Err("y".into()) }, &mut s, &now);
        assert_eq!(s.current_cpu_topology.as_ref().and_then(|t| t.sockets), Some(1));
        assert!(s.condition(&Type::HotVcpuChange).is_none());
        let c = s.condition(&Type::HotMemoryChange).cloned().unwrap_or_default();
        assert_eq!(
            (c.status, c.reason.as_deref(), c.message.as_deref()),
            (ConditionStatus::False, Some(REASON_MEMORY_FAILED), Some(MESSAGE_MEMORY_FAILED))
        );
    }
}
