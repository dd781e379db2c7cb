//! Disk validation (upstream `pkg/storage/admitters/disks.go`, `storagehotplug.go`): names, targets, buses, PCI
//! addresses, boot order values, serials, cache/IO/error policies, block sizes; containerDisk paths; no utility
//! volumes on creation.

use crds::kubevirt::domain::{Disk, DiskBus, DiskErrorPolicy, DriverCache, DriverIo};
use crds::kubevirt::vmi::VirtualMachineInstanceSpec;

use super::names::dns1123_label;
use super::valid_pci_address;
use crate::cause::{Cause, CauseType, Path};

const MAX_SERIAL: usize = 256;
const MIN_BLOCK: u64 = 512;
const MAX_BLOCK: u64 = 2 << 20;

/// The bus of a disk's target and the target's name (`disk`, `lun`, `cdrom`).
fn bus_and_type(disk: &Disk) -> (Option<&DiskBus>, &'static str) {
    if let Some(d) = &disk.disk {
        (d.bus.as_ref(), "disk")
    } else if let Some(l) = &disk.lun {
        (l.bus.as_ref(), "lun")
    } else if let Some(c) = &disk.cdrom {
        (c.bus.as_ref(), "cdrom")
    } else {
        (None, "")
    }
}

/// Upstream's `ValidateDisks` (`field` = `spec.domain.devices.disks`).
pub fn validate_disks(field: &Path, disks: &[Disk]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let quirky = field.children(&["domain", "devices", "disks"]);
    for (idx, disk) in disks.iter().enumerate() {
        let p = field.index(idx);
        for (other, d) in disks.iter().enumerate().take(idx) {
            if d.name == disk.name {
                causes.push(Cause::invalid(
                    format!("{p} and {} must not have the same Name.", field.index(other)),
                    p.child("name"),
                ));
            }
        }
        let targets =
            usize::from(disk.disk.is_some()) + usize::from(disk.lun.is_some()) + usize::from(disk.cdrom.is_some());
        if targets > 1 {
            causes.push(Cause::invalid(format!("{p} can only have a single target type defined"), &p));
        }
        if let Some(d) = &disk.disk
            && let Some(pci) = d.pci_address.as_deref().filter(|a| !a.is_empty())
        {
            // Upstream names these paths `….disks.disk[i]…` below the disks path.
            let np = field.children(&["domain", "devices", "disks", "disk"]).index(idx);
            if d.bus != Some(DiskBus::Virtio) {
                causes.push(Cause::invalid(
                    format!("disk {} - setting a PCI address is only possible with bus type virtio.", np.child("name")),
                    np.child("pciAddress"),
                ));
            }
            if !valid_pci_address(pci) {
                causes.push(Cause::invalid(
                    format!("disk {} has malformed PCI address ({pci}).", np.child("name")),
                    np.child("pciAddress"),
                ));
            }
        }
        if disk.boot_order.is_some_and(|o| o < 1) {
            causes.push(Cause::invalid(format!("{p} must have a boot order > 0, if supplied"), p.child("bootOrder")));
        }
        causes.extend(bus_support(&p, &quirky.index(idx), disk));
        if let Some(serial) = disk.serial.as_deref().filter(|s| !s.is_empty()) {
            if !serial.bytes().all(|c| c.is_ascii_alphanumeric() || b"_.+-".contains(&c)) {
                causes.push(Cause::invalid(
                    format!("{p} must be made up of the following characters [A-Za-z0-9_.+-], if specified"),
                    p.child("serial"),
                ));
            }
            if serial.chars().count() > MAX_SERIAL {
                causes.push(Cause::invalid(
                    format!("{p} must be less than or equal to {MAX_SERIAL} in length, if specified"),
                    p.child("serial"),
                ));
            }
        }
        if let Some(cache) = disk.cache.as_ref().filter(|c| !c.as_str().is_empty() && !DriverCache::is_known(c)) {
            let cp = p.child("cache");
            causes.push(Cause::invalid(format!("{cp} has invalid value {cache}"), &cp));
        }
        if disk.io.as_ref().is_some_and(|io| !io.as_str().is_empty() && !DriverIo::is_known(io)) {
            causes.push(Cause::new(
                CauseType::NotSupported,
                format!("Disk IO mode for {field} is not supported. Supported modes are: native, threads."),
                quirky.index(idx).child("io"),
            ));
        }
        if let Some(policy) = disk.error_policy.as_ref().filter(|e| !DiskErrorPolicy::is_known(e)) {
            let ep = p.child("errorPolicy");
            causes.push(Cause::invalid(format!("{ep} has invalid value \"{policy}\""), &ep));
        }
        for err in dns1123_label(&disk.name) {
            causes.push(Cause::invalid(err, quirky.index(idx).child("name")));
        }
        causes.extend(block_size(&p, disk));
    }
    causes
}

fn bus_support(p: &Path, quirky: &Path, disk: &Disk) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (bus, kind) = bus_and_type(disk);
    let Some(bus) = bus.filter(|b| !b.as_str().is_empty()) else { return causes };
    match bus {
        DiskBus::Other(b) if b == "ide" => {
            causes.push(Cause::invalid("IDE bus is not supported", p.children(&[kind, "bus"])));
        }
        DiskBus::Virtio if kind == "cdrom" => {
            causes.push(Cause::invalid(
                format!("Bus type {bus} is invalid for CD-ROM device"),
                p.children(&["cdrom", "bus"]),
            ));
        }
        DiskBus::Sata if disk.disk.as_ref().is_some_and(|d| d.read_only == Some(true)) => {
            causes.push(Cause::invalid(
                format!("{bus} hard-disks do not support read-only."),
                p.children(&["disk", "bus"]),
            ));
        }
        DiskBus::Other(b) => {
            causes.push(Cause::invalid(
                format!("{p} is set with an unrecognized bus {b}, must be one of: [virtio scsi sata usb]"),
                p.children(&[kind, "bus"]),
            ));
        }
        _ => {}
    }
    if disk.dedicated_io_thread == Some(true) && *bus != DiskBus::Virtio {
        causes.push(Cause::new(
            CauseType::NotSupported,
            format!("IOThreads are not supported for disks on a {bus} bus"),
            quirky,
        ));
    }
    causes
}

fn block_size(p: &Path, disk: &Disk) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(bs) = &disk.block_size else { return causes };
    let Some(custom) = &bs.custom else { return causes };
    if bs.match_volume.as_ref().is_some_and(|m| m.enabled != Some(false)) {
        causes.push(Cause::invalid(
            "Block size matching can't be enabled together with a custom value",
            p.child("blockSize"),
        ));
        return causes;
    }
    let cp = p.children(&["blockSize", "custom"]);
    let (logical, physical) = (custom.logical.unwrap_or(0), custom.physical.unwrap_or(0));
    let (bus, _) = bus_and_type(disk);
    if logical > physical {
        causes.push(Cause::invalid(
            format!("Logical size {logical} must be the same or less than the physical size of {physical}"),
            cp.child("logical"),
        ));
    } else if bus == Some(&DiskBus::Sata) && logical != MIN_BLOCK {
        causes.push(Cause::invalid(
            format!("Logical size {logical} must be {MIN_BLOCK} for SATA devices"),
            cp.child("logical"),
        ));
    } else if let Some(g) = custom.discard_granularity
        && logical != 0
        && g % logical != 0
    {
        causes.push(Cause::invalid(
            format!("Discard granularity {g} must be multiples of logical size {logical}"),
            cp.child("discardGranularity"),
        ));
    } else {
        for (name, size) in [("logical", logical), ("physical", physical)] {
            let message = if size < MIN_BLOCK {
                format!("Provided size of {size} is less than the supported minimum size of {MIN_BLOCK}")
            } else if size > MAX_BLOCK {
                format!("Provided size of {size} is greater than the supported maximum size of {MAX_BLOCK}")
            } else if !size.is_power_of_two() {
                format!("Provided size of {size} is not a power of 2")
            } else {
                continue;
            };
            causes.push(Cause::invalid(message, cp.child(name)));
        }
    }
    causes
}

/// Upstream's `ValidatePath`: absolute, clean, not `/`.
pub fn validate_path(field: &Path, path: &str) -> Vec<Cause> {
    if path == "/" {
        return vec![Cause::invalid(format!("{field} must not point to root"), field)];
    }
    if clean_absolute(path) != path.strip_suffix('/').unwrap_or(path) {
        return vec![Cause::invalid(
            format!("{field} must be an absolute path to a file without relative components"),
            field,
        )];
    }
    Vec::new()
}

/// Go's `filepath.Join("/", path)`.
fn clean_absolute(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Upstream's `ValidateContainerDisks` (`field` = `spec`).
pub fn validate_container_disks(field: &Path, spec: &VirtualMachineInstanceSpec) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (idx, v) in spec.volumes.iter().flatten().enumerate() {
        if let Some(path) = v.container_disk.as_ref().and_then(|c| c.path.as_deref()).filter(|p| !p.is_empty()) {
            causes.extend(validate_path(&field.child("volumes").index(idx).child("containerDisk"), path));
        }
    }
    causes
}

/// Upstream's `ValidateUtilityVolumesNotPresentOnCreation`.
pub fn validate_no_utility_volumes(field: &Path, spec: &VirtualMachineInstanceSpec) -> Vec<Cause> {
    if spec.utility_volumes.is_some() {
        return vec![Cause::invalid(
            "cannot create VMI with utility volumes in spec, utility volumes can only be added via hotplug",
            field.child("utilityVolumes"),
        )];
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked_as_go_cleans_them() {
        let f = Path::new("spec.volumes[0].containerDisk");
        assert!(validate_path(&f, "/disk/disk.img").is_empty());
        assert!(validate_path(&f, "/disk/").is_empty());
        assert_eq!(validate_path(&f, "/")[0].message, "spec.volumes[0].containerDisk must not point to root");
        for bad in ["disk.img", "/disk/../x", "/disk//x", "/./x"] {
            assert_eq!(
                validate_path(&f, bad)[0].message,
                "spec.volumes[0].containerDisk must be an absolute path to a file without relative components",
                "{bad}"
            );
        }
    }
}
