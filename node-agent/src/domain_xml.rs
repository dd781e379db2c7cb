//! VMI → libvirt domain XML (contract `../shared/specs/kubevirt.md` §7.2; upstream
//! `pkg/virt-launcher/virtwrap/converter`). Pure: [`to_domain_xml`] reads a (defaulted) VirtualMachineInstance and
//! a [`ConvertContext`] with what only the caller knows (software emulation, the PVCs' volume modes, containerDisk
//! image formats, storage without O_DIRECT, the pod interface's MTU — [`ConvertContext::from_prepared`] reads
//! them from what the launcher reports, `launcher::Prepared` — and a path prefix for tests) and returns the XML,
//! or a [`ConvertError`] naming what is wrong or what this slice does not support ([`Unsupported`]).
//!
//! ```text
//! VirtualMachineInstance (after the mutating webhook's defaults) ──┐
//! ConvertContext ──────────────────────────────────────────────────┴─► to_domain_xml ─► <domain type='qemu' or 'kvm'>
//! paths: contracts::kubevirt::launcher (what the launcher prepares in the pod), ctx.path_prefix + that path
//! ```
//!
//! # The mapping
//!
//! | VMI | domain XML |
//! |---|---|
//! | `<namespace>/<name>`, `metadata.uid` | `<name>` = `launcher::domain_name`; `<metadata><kubevirt xmlns='http://kubevirt.io'>` with the uid and `<graceperiod>` (`terminationGracePeriodSeconds`, default 30) |
//! | `firmware.uuid`, else the VMI UID | `<uuid>` and SMBIOS `<sysinfo>` (manufacturer/family `KubeVirt`, product `None`, `firmware.serial`, `chassis`), `<os><smbios mode='sysinfo'/>` |
//! | `memory.guest`, else `resources.requests.memory`, else limits (`status.memory.guestAtBoot` when set) | `<memory unit='b'>` |
//! | `memory.maxGuest` above the boot size (memory hotplug) | `<maxMemory slots='1'>`, one NUMA cell with every vCPU and the boot memory, `<memory model='virtio-mem'>` of `maxGuest − boot` bytes in 2 MiB blocks, `requested` = `guest − boot` |
//! | `cpu.sockets`×`cores`×`threads` (each default 1; without any, sockets from the CPU limit/request) | `<vcpu placement='static'>` + `<topology … dies='1'>`; `maxSockets` > sockets ⇒ `current=` and `<vcpus>` (the first socket not hotpluggable) |
//! | `cpu.model` `host-model` (default) / `host-passthrough` / a name, `cpu.features` | `<cpu mode='host-model'>` / `host-passthrough` (under emulation `mode='maximum'`: libvirt 9.0 refuses host-passthrough for TCG; host-model *is* supported for TCG, domcapabilities says so and the guest boots) / `mode='custom'` + `<model>`; `<feature policy name>` |
//! | `machine.type` (default `q35`) | `<os><type arch='x86_64' machine=…>hvm</type>`; `bootloader.bios.useSerial` ⇒ `<bios useserial='yes'/>` |
//! | `features.acpi` (on unless `enabled: false`), `apic`, `smm`, `kvm.hidden`, `pvspinlock` (the last two KVM only) | `<features>` |
//! | `clock.utc{offsetSeconds}` / `timezone`, `timer.*` | `<clock offset>` `utc`, `variable` or `timezone` + `<timer>` |
//! | (always) | `on_poweroff` destroy, `on_reboot` restart (`rebootPolicy: Terminate` ⇒ destroy), `on_crash` destroy |
//! | `disks[]` disk/cdrom/lun, bus virtio/sata/scsi/usb (default sata) | `<disk device>` `disk`, `cdrom` or `lun`, `<target dev bus>` with `vdX` or `sdX` (one letter sequence per prefix, sata and scsi share `sd`); virtio ⇒ `model='virtio-non-transitional'` (`useVirtioTransitional` ⇒ transitional) and an IOThread; scsi ⇒ a virtio-scsi controller (also present for hotplug unless `disableHotplug`); usb ⇒ a qemu-xhci controller (else `model='none'`) |
//! | disk options | `<driver name='qemu' type cache io error_policy discard iothread queues>`: cache `none` (`writethrough` on storage without O_DIRECT, [`ConvertContext::no_direct_io`]), io `native` for block devices and preallocated PVCs, `error_policy` `stop`, `discard='unmap'` for disks and LUNs; `bootOrder` ⇒ `<boot order>`, `readonly` (cdrom default) ⇒ `<readonly/>`, `shareable`, `serial`, `blockSize.custom` ⇒ `<blockio>`, `pciAddress` ⇒ `<address type='pci'>`, `tray: open`; alias `ua-<name>` |
//! | `containerDisk` | qcow2 `launcher::container_disk_overlay` with `<backingStore>` = `launcher::container_disk_copy` (format from [`ConvertContext::container_disk_formats`]) |
//! | `emptyDisk` / `cloudInitNoCloud` / `cloudInitConfigDrive` | qcow2 `launcher::empty_disk` / raw `launcher::cloud_init_disk` / raw `launcher::cloud_init_config_drive_disk` |
//! | `persistentVolumeClaim` / `dataVolume` | Filesystem ⇒ raw file `launcher::pvc_disk`; Block ⇒ `type='block'` `launcher::pvc_device` (mode from [`ConvertContext::pvc_modes`], else `status.volumeStatus[].persistentVolumeClaimInfo.volumeMode`); `readOnly` ⇒ `<readonly/>` |
//! | `interfaces[]` masquerade / bridge on the pod network, bridge on a Multus network | `<interface type='ethernet'>` on `<target dev='tap0' managed='no'/>` (the launcher's tap; on a Multus network `launcher::secondary_tap` with the MTU from [`ConvertContext::secondary_mtus`]), `<model type='virtio-non-transitional'>` (or the named model), `<mac>` (given, else `launcher::derived_mac`), `<mtu>` from [`ConvertContext::pod_interface_mtu`], `state: down` ⇒ `<link state='down'/>` (`absent`: no device), `bootOrder` ⇒ `<boot>` else `<rom enabled='no'/>`, `acpiIndex`, `pciAddress`; alias `ua-<name>` |
//! | serial console (unless `autoattachSerialConsole: false`) | `<serial type='unix'>` on `SocketDir::serial_console` with `<log file>` = `launcher::serial_log` (unless `logSerialConsole: false`), and `<console>` |
//! | (always) | guest agent channel `org.qemu.guest_agent.0` on a virtio-serial controller |
//! | graphics (unless `autoattachGraphicsDevice: false`) | VNC on `SocketDir::vnc`, `<video>` `vga` (or `video.type`) |
//! | `autoattachMemBalloon` (default on), `rng: {}`, `inputs[]`, `watchdog.i6300esb` | virtio memballoon with 10 s stats (else `model='none'`), virtio RNG from `/dev/urandom`, `<input>`, `<watchdog>` |
//! | [`ConvertContext::acceleration`] | `<domain type='kvm'>`, or `type='qemu'` (TCG) under software emulation |
//!
//! Hotpluggable PVC / DataVolume volumes are in the domain only once the node agent has put them into the launcher
//! pod ([`ConvertContext::hotplugged`], `launcher::hotplug_disk` / `hotplug_device`, bus scsi by default);
//! [`hotplug_disk_xml`] gives one such disk for libvirt's live attach and detach.
//!
//! Refused ([`Unsupported`]): architectures other than amd64; EFI (the launcher image ships no OVMF), kernel boot,
//! ACPI tables; dedicated CPUs, NUMA passthrough, realtime; hugepages;
//! Hyper-V enlightenments (and `kvm`/`pvspinlock` under emulation); volumes other than containerDisk, emptyDisk,
//! cloudInitNoCloud, cloudInitConfigDrive, persistentVolumeClaim and dataVolume (ephemeral, hostDisk, secret,
//! configMap, serviceAccount, downwardAPI, sysprep, …); LUN reservations, LUNs on
//! Filesystem PVCs, changed block tracking, `blockSize.matchVolume`/discard granularity, the `supplementalPool`
//! IOThreads policy, cdroms on virtio; interfaces on Multus default or DRA networks, sriov, passtBinding, binding plugins
//! and the discontinued slirp/macvtap/passt, network multiqueue; GPUs, host devices, virtiofs filesystems, TPM,
//! sound, panic devices, vsock, downward metrics, USB client passthrough; unknown fields in `spec.domain`,
//! `domain.devices`, disks and interfaces (a newer API's device would otherwise be dropped silently).
//!
//! Not in the XML, for the caller: `startStrategy: Paused` (start paused), the masquerade ports and DHCP options
//! (the launcher's network setup), probes.

use std::collections::{BTreeMap, BTreeSet};

use contracts::kubevirt::launcher::{self, SocketDir};
use contracts::quantity::parse_bytes;
use crds::kubevirt::domain::{
    CPU_MODEL_HOST_MODEL, CPU_MODEL_HOST_PASSTHROUGH, Clock, Cpu, CpuFeaturePolicy, Devices, Disk, DiskBus,
    DiskErrorPolicy, DriverCache, DriverIo, Features, Firmware, InputBus, InputType, Interface, InterfaceModel,
    InterfaceState, IoThreadsPolicy, RebootPolicy, TimerState, TrayState, WatchdogAction,
};
use crds::kubevirt::network::Network;
use crds::kubevirt::volume::Volume;
use crds::kubevirt::{Extra, VirtualMachineInstance};

use crate::xml::Element;

/// The XML namespace of the domain's `<metadata><kubevirt>` element (upstream's).
pub const KUBEVIRT_METADATA_NAMESPACE: &str = "http://kubevirt.io";
/// `terminationGracePeriodSeconds` when the spec has none (contract §2.1).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;
/// The machine type when the spec has none (the webhook's amd64 default; QEMU 7.2's alias for its newest q35).
pub const DEFAULT_MACHINE_TYPE: &str = "q35";
/// SMBIOS manufacturer and family (upstream's defaults).
pub const SMBIOS_VENDOR: &str = "KubeVirt";

/// Result of this module.
pub type Result<T, E = ConvertError> = std::result::Result<T, E>;

/// How QEMU runs the guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acceleration {
    /// Hardware virtualization: `<domain type='kvm'>`.
    Kvm,
    /// Software emulation (TCG; the cluster's `developerConfiguration.useEmulation`): `<domain type='qemu'>`.
    Emulation,
}

/// The volume mode of a PVC (or a DataVolume's PVC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PvcVolumeMode {
    /// A filesystem with the image at `disk.img` (raw).
    Filesystem,
    /// A raw block device.
    Block,
}

/// The format of a containerDisk's image file (the overlay's backing file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    /// qcow2.
    Qcow2,
    /// raw.
    Raw,
}

impl ImageFormat {
    /// libvirt's name of the format.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageFormat::Qcow2 => "qcow2",
            ImageFormat::Raw => "raw",
        }
    }

    /// A format by libvirt's (and `qemu-img`'s) name.
    pub fn from_name(name: &str) -> Option<ImageFormat> {
        match name {
            "qcow2" => Some(ImageFormat::Qcow2),
            "raw" => Some(ImageFormat::Raw),
            _ => None,
        }
    }

    /// The format of an image from its first bytes: qcow2 by its magic, anything else raw (what a containerDisk
    /// may hold, §6).
    pub fn detect(header: &[u8]) -> ImageFormat {
        if header.starts_with(b"QFI\xfb") { ImageFormat::Qcow2 } else { ImageFormat::Raw }
    }
}

/// What the conversion needs beyond the VMI.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvertContext {
    /// Hardware virtualization or software emulation.
    pub acceleration: Acceleration,
    /// Volume mode of each PVC or DataVolume volume, by volume name. A volume missing here falls back to
    /// `status.volumeStatus[].persistentVolumeClaimInfo.volumeMode`.
    pub pvc_modes: BTreeMap<String, PvcVolumeMode>,
    /// Image format of each containerDisk volume, by volume name ([`ImageFormat::detect`] on the copy's first
    /// bytes).
    pub container_disk_formats: BTreeMap<String, ImageFormat>,
    /// Volumes whose storage does not support O_DIRECT (e.g. tmpfs): their default cache mode is `writethrough`
    /// instead of `none`, and an explicit `none` is an error.
    pub no_direct_io: BTreeSet<String>,
    /// MTU of the pod interface, given to the guest's virtio NIC (`<mtu>`); none: QEMU's default.
    pub pod_interface_mtu: Option<u32>,
    /// MTU of each secondary (Multus) interface's pod interface, by spec interface name; that NIC's `<mtu>`.
    pub secondary_mtus: BTreeMap<String, u32>,
    /// Prepended to every file path of the launcher contract (`""` in production; a temporary directory in tests).
    pub path_prefix: String,
    /// Hotpluggable volumes the node agent has put into the launcher pod, with the target device each has (or
    /// gets) in the guest. Hotpluggable volumes missing here are left out of the domain: they are attached later.
    pub hotplugged: BTreeMap<String, String>,
}

impl ConvertContext {
    /// A context with nothing resolved yet.
    pub fn new(acceleration: Acceleration) -> ConvertContext {
        ConvertContext {
            acceleration,
            pvc_modes: BTreeMap::new(),
            container_disk_formats: BTreeMap::new(),
            no_direct_io: BTreeSet::new(),
            pod_interface_mtu: None,
            secondary_mtus: BTreeMap::new(),
            path_prefix: String::new(),
            hotplugged: BTreeMap::new(),
        }
    }

    /// With hotplugged volume `volume` in the launcher pod, as guest device `target`.
    pub fn with_hotplugged(mut self, volume: &str, target: &str) -> ConvertContext {
        self.hotplugged.insert(volume.to_owned(), target.to_owned());
        self
    }

    /// The context from what the VMI's launcher found while preparing its pod (`launcher::Prepared`, the ready
    /// file's content): containerDisk formats, block volumes (every other PVC or DataVolume volume of `vmi` is a
    /// Filesystem one), storage without O_DIRECT, the pod interface's MTU.
    pub fn from_prepared(
        acceleration: Acceleration,
        prepared: &launcher::Prepared,
        vmi: &VirtualMachineInstance,
    ) -> Result<ConvertContext> {
        let mut ctx = ConvertContext::new(acceleration);
        for (volume, format) in &prepared.container_disk_formats {
            let f = ImageFormat::from_name(format)
                .ok_or_else(|| invalid(format!("prepared containerDiskFormats[{volume}]"), format, "unknown format"))?;
            ctx.container_disk_formats.insert(volume.clone(), f);
        }
        for v in vmi.spec.volumes.as_deref().unwrap_or_default() {
            if v.persistent_volume_claim.is_some() || v.data_volume.is_some() {
                let mode = if prepared.block_volumes.contains(&v.name) {
                    PvcVolumeMode::Block
                } else {
                    PvcVolumeMode::Filesystem
                };
                ctx.pvc_modes.insert(v.name.clone(), mode);
            }
        }
        ctx.no_direct_io = prepared.no_direct_io.clone();
        ctx.pod_interface_mtu = prepared.pod_interface_mtu;
        ctx.secondary_mtus = prepared.secondary_mtus.clone();
        Ok(ctx)
    }

    /// Sets the volume mode of a PVC or DataVolume volume.
    pub fn with_pvc_mode(mut self, volume: &str, mode: PvcVolumeMode) -> ConvertContext {
        self.pvc_modes.insert(volume.to_owned(), mode);
        self
    }

    /// Sets the image format of a containerDisk volume.
    pub fn with_container_disk_format(mut self, volume: &str, format: ImageFormat) -> ConvertContext {
        self.container_disk_formats.insert(volume.to_owned(), format);
        self
    }

    /// Sets the pod interface's MTU.
    pub fn with_pod_interface_mtu(mut self, mtu: u32) -> ConvertContext {
        self.pod_interface_mtu = Some(mtu);
        self
    }

    /// Sets the path prefix (tests).
    pub fn with_path_prefix(mut self, prefix: impl Into<String>) -> ConvertContext {
        self.path_prefix = prefix.into();
        self
    }

    fn path(&self, contract_path: String) -> String {
        format!("{}{contract_path}", self.path_prefix)
    }

    fn virtio_model(transitional: bool) -> &'static str {
        if transitional { "virtio-transitional" } else { "virtio-non-transitional" }
    }
}

/// Why a VMI cannot be converted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConvertError {
    /// The VMI lacks a metadata field the domain needs.
    #[error("the VMI has no metadata.{0}")]
    MissingMetadata(&'static str),
    /// No guest memory is given anywhere.
    #[error("the VMI requests no memory (domain.memory.guest, domain.resources.requests.memory or limits.memory)")]
    NoMemory,
    /// A field has a value the domain cannot take.
    #[error("invalid {field} {value:?}: {reason}")]
    Invalid {
        /// The field (a spec path).
        field: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A disk names a volume that does not exist.
    #[error("disk {disk:?} names no volume of the VMI")]
    DiskWithoutVolume {
        /// The disk.
        disk: String,
    },
    /// An interface names a network that does not exist.
    #[error("interface {interface:?} names no network of the VMI")]
    InterfaceWithoutNetwork {
        /// The interface.
        interface: String,
    },
    /// The volume mode of a PVC volume is known neither from the context nor from the status.
    #[error(
        "volume {volume:?}: the PVC's volume mode is unknown (neither ConvertContext::pvc_modes nor \
         status.volumeStatus has it)"
    )]
    UnknownVolumeMode {
        /// The volume.
        volume: String,
    },
    /// The image format of a containerDisk volume is not in the context.
    #[error("containerDisk volume {volume:?}: the image format is unknown (ConvertContext::container_disk_formats)")]
    UnknownImageFormat {
        /// The volume.
        volume: String,
    },
    /// Something this node agent does not implement.
    #[error("not supported by this node agent: {0}")]
    Unsupported(#[from] Unsupported),
}

/// What this slice of the node agent refuses (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsupported {
    /// A guest architecture other than amd64.
    #[error("architecture {0:?} (only amd64)")]
    Architecture(String),
    /// A firmware option.
    #[error("firmware: {0}")]
    Firmware(&'static str),
    /// A CPU option.
    #[error("cpu: {0}")]
    Cpu(&'static str),
    /// A memory option.
    #[error("memory: {0}")]
    Memory(&'static str),
    /// A hypervisor feature.
    #[error("features: {0}")]
    Feature(&'static str),
    /// A device kind.
    #[error("{kind} {name:?}")]
    Device {
        /// The kind of device.
        kind: &'static str,
        /// Its name in the spec (or the kind again for unnamed devices).
        name: String,
    },
    /// A volume source.
    #[error("volume {volume:?}: {source_kind} volumes")]
    VolumeSource {
        /// The volume.
        volume: String,
        /// Its source kind (`hostDisk`, `secret`, …) or property (`hotpluggable`).
        source_kind: &'static str,
    },
    /// A disk option.
    #[error("disk {disk:?}: {option}")]
    DiskOption {
        /// The disk.
        disk: String,
        /// The option.
        option: &'static str,
    },
    /// An interface binding or option.
    #[error("interface {interface:?}: {binding}")]
    Interface {
        /// The interface.
        interface: String,
        /// The binding or option.
        binding: &'static str,
    },
    /// A network source other than the pod network.
    #[error("network {network:?}: {kind} networks (only the pod network)")]
    Network {
        /// The network.
        network: String,
        /// Its source kind.
        kind: &'static str,
    },
    /// Fields this version does not model (a newer API's hardware would otherwise be dropped silently).
    #[error("unknown fields in {at}: {}", fields.join(", "))]
    UnknownFields {
        /// Where (a spec path).
        at: String,
        /// The fields.
        fields: Vec<String>,
    },
}

fn unsupported<T>(u: Unsupported) -> Result<T> {
    Err(ConvertError::Unsupported(u))
}

fn invalid(field: impl Into<String>, value: impl Into<String>, reason: &'static str) -> ConvertError {
    ConvertError::Invalid { field: field.into(), value: value.into(), reason }
}

fn refuse_extra(at: impl Into<String>, extra: &Extra) -> Result<()> {
    if extra.is_empty() {
        return Ok(());
    }
    unsupported(Unsupported::UnknownFields { at: at.into(), fields: extra.keys().cloned().collect() })
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// Converts a (defaulted) VMI into the libvirt domain XML its launcher pod runs.
pub fn to_domain_xml(vmi: &VirtualMachineInstance, ctx: &ConvertContext) -> Result<String> {
    Ok(domain(vmi, ctx)?.render())
}

fn domain(vmi: &VirtualMachineInstance, ctx: &ConvertContext) -> Result<Element> {
    let meta = &vmi.metadata;
    let namespace = meta.namespace.as_deref().ok_or(ConvertError::MissingMetadata("namespace"))?;
    let name = meta.name.as_deref().ok_or(ConvertError::MissingMetadata("name"))?;
    let uid = meta.uid.as_deref().ok_or(ConvertError::MissingMetadata("uid"))?;
    let spec = &vmi.spec;
    let dom = &spec.domain;
    refuse_extra("spec.domain", &dom.extra)?;
    refuse_extra("spec.domain.devices", &dom.devices.extra)?;
    match spec.architecture.as_deref() {
        None | Some("amd64") => {}
        Some(other) => return unsupported(Unsupported::Architecture(other.to_owned())),
    }

    let firmware = dom.firmware.clone().unwrap_or_default();
    let uuid = match firmware.uuid.as_deref() {
        Some(u) => checked_uuid("spec.domain.firmware.uuid", u)?,
        None => checked_uuid("metadata.uid", uid)?,
    };
    let grace = spec.termination_grace_period_seconds.unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS);
    let memory = MemoryPlan::of(vmi)?;
    let mut cpu = CpuPlan::of(dom.cpu.as_ref(), dom.resources.as_ref(), ctx.acceleration)?;
    let mut devices = devices(vmi, ctx, cpu.vcpus_current)?;
    if let Some(virtio_mem) = memory.virtio_mem() {
        // libvirt 9.0 wants a NUMA cell (holding every vCPU and the boot memory) beside <maxMemory>; the
        // virtio-mem device plugs into node 0. Upstream's newer libvirt needs neither the cell nor a slot.
        let cpus = if cpu.vcpus_max > 1 { format!("0-{}", cpu.vcpus_max - 1) } else { "0".to_owned() };
        cpu.element.push(
            Element::new("numa").child(
                Element::new("cell")
                    .attr("id", "0")
                    .attr("cpus", cpus)
                    .attr("memory", memory.boot.to_string())
                    .attr("unit", "b"),
            ),
        );
        devices.element.push(virtio_mem);
    }

    let domain_type = match ctx.acceleration {
        Acceleration::Kvm => "kvm",
        Acceleration::Emulation => "qemu",
    };
    let metadata = Element::new("metadata").child(
        Element::new("kubevirt")
            .attr("xmlns", KUBEVIRT_METADATA_NAMESPACE)
            .child(Element::text("uid", uid))
            .child(Element::new("graceperiod").child(Element::text("deletionGracePeriodSeconds", grace.to_string()))),
    );
    let mut vcpu = Element::text("vcpu", cpu.vcpus_max.to_string()).attr("placement", "static");
    if cpu.vcpus_current != cpu.vcpus_max {
        vcpu = vcpu.attr("current", cpu.vcpus_current.to_string());
    }
    let on_reboot = match dom.reboot_policy {
        Some(RebootPolicy::Terminate) => "destroy",
        _ => "restart",
    };
    Ok(Element::new("domain")
        .attr("type", domain_type)
        .child(Element::text("name", launcher::domain_name(namespace, name)))
        .child(Element::text("uuid", uuid.clone()))
        .child(metadata)
        .child_opt(memory.max.map(|m| Element::text("maxMemory", m.to_string()).attr("slots", "1").attr("unit", "b")))
        .child(Element::text("memory", memory.boot.to_string()).attr("unit", "b"))
        .child(vcpu)
        .child_opt(cpu.vcpus_element())
        .child_opt((devices.iothreads > 0).then(|| Element::text("iothreads", devices.iothreads.to_string())))
        .child(sysinfo(&uuid, &firmware, dom.chassis.as_ref()))
        .child(os(dom.machine.as_ref().and_then(|m| m.type_.as_deref()), &firmware)?)
        .child(features(dom.features.as_ref(), ctx.acceleration)?)
        .child(cpu.element)
        .child(clock(dom.clock.as_ref())?)
        .child(Element::text("on_poweroff", "destroy"))
        .child(Element::text("on_reboot", on_reboot))
        .child(Element::text("on_crash", "destroy"))
        .child(devices.element))
}

/// The `<disk>` of hotplugged volume `volume` of `vmi` as libvirt's attach and detach calls take it: the same
/// mapping as at boot, its source in [`launcher::HOTPLUG_DISKS_DIR`], its target the one `ctx.hotplugged` gives.
pub fn hotplug_disk_xml(vmi: &VirtualMachineInstance, ctx: &ConvertContext, volume: &str) -> Result<String> {
    if !ctx.hotplugged.contains_key(volume) {
        return Err(invalid("spec.volumes", volume, "not a hotplugged volume in the launcher pod"));
    }
    let mut only = vmi.clone();
    only.spec.volumes = Some(vmi.spec.volumes.iter().flatten().filter(|v| v.name == volume).cloned().collect());
    only.spec.domain.devices.disks =
        Some(vmi.spec.domain.devices.disks.iter().flatten().filter(|d| d.name == volume).cloned().collect());
    let mut plan = disks(&only, ctx, 1)?;
    match plan.elements.pop() {
        Some(disk) if plan.elements.is_empty() => Ok(disk.render()),
        _ => Err(ConvertError::DiskWithoutVolume { disk: volume.to_owned() }),
    }
}

/// A UUID in canonical form (libvirt refuses anything else).
fn checked_uuid(field: &str, u: &str) -> Result<String> {
    let groups: Vec<&str> = u.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens == [8, 4, 4, 4, 12] && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit())) {
        Ok(u.to_ascii_lowercase())
    } else {
        Err(invalid(field, u, "not a UUID"))
    }
}

/// The guest's memory: what it boots with and, with `maxGuest` above it, the hotplug range of its virtio-mem
/// device (contract §7.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryPlan {
    /// Bytes the guest boots with: `status.memory.guestAtBoot` (the webhook's copy of `guest` at creation), else
    /// `memory.guest`, else the memory request or limit.
    pub boot: u64,
    /// `maxGuest` when it is above `boot`: `<maxMemory>`, and a virtio-mem device of `max - boot` bytes.
    pub max: Option<u64>,
    /// Bytes of the virtio-mem device plugged in (`guest - boot`; 0 at creation).
    pub requested: u64,
}

impl MemoryPlan {
    /// The plan of `vmi` (refusing hugepages, unknown fields, zero or unparseable sizes, hotplug sizes that are not
    /// multiples of [`HOTPLUG_BLOCK`]).
    pub fn of(vmi: &VirtualMachineInstance) -> Result<MemoryPlan> {
        let dom = &vmi.spec.domain;
        let memory = dom.memory.as_ref();
        if let Some(m) = memory {
            refuse_extra("spec.domain.memory", &m.extra)?;
            if m.hugepages.is_some() {
                return unsupported(Unsupported::Memory("hugepages"));
            }
        }
        let resources = dom.resources.as_ref();
        let (field, quantity) = [
            ("spec.domain.memory.guest", memory.and_then(|m| m.guest.as_ref())),
            ("spec.domain.resources.requests.memory", resources.and_then(|r| r.requests.as_ref()?.get("memory"))),
            ("spec.domain.resources.limits.memory", resources.and_then(|r| r.limits.as_ref()?.get("memory"))),
        ]
        .into_iter()
        .find_map(|(f, q)| q.map(|q| (f, q)))
        .ok_or(ConvertError::NoMemory)?;
        let bytes = |field: &str, q: &str| -> Result<u64> {
            match parse_bytes(q) {
                Ok(0) => Err(invalid(field, q, "zero")),
                Ok(b) => Ok(b),
                Err(_) => Err(invalid(field, q, "not a quantity")),
            }
        };
        let guest = bytes(field, &quantity.0)?;
        let at_boot = vmi.status.as_ref().and_then(|s| s.memory.as_ref()).and_then(|m| m.guest_at_boot.as_ref());
        let boot = match at_boot {
            Some(q) => bytes("status.memory.guestAtBoot", &q.0)?.min(guest),
            None => guest,
        };
        let Some(max) = memory.and_then(|m| m.max_guest.as_ref()) else {
            return Ok(MemoryPlan { boot: guest, max: None, requested: 0 });
        };
        let max = bytes("spec.domain.memory.maxGuest", &max.0)?;
        if max <= boot {
            return Ok(MemoryPlan { boot: guest, max: None, requested: 0 });
        }
        for (field, v) in [("spec.domain.memory.guest", guest), ("spec.domain.memory.maxGuest", max)] {
            if v % HOTPLUG_BLOCK != 0 {
                return Err(invalid(field, v.to_string(), "not a multiple of the 2 MiB hotplug block"));
            }
        }
        if boot % HOTPLUG_BLOCK != 0 {
            return Err(invalid(
                "status.memory.guestAtBoot",
                boot.to_string(),
                "not a multiple of the 2 MiB hotplug block",
            ));
        }
        Ok(MemoryPlan { boot, max: Some(max), requested: guest.min(max) - boot })
    }

    /// `<memory model='virtio-mem'>` on NUMA node 0 with `requested` bytes plugged in, when hotplug is possible.
    fn virtio_mem(&self) -> Option<Element> {
        let max = self.max?;
        let bytes = |name: &'static str, v: u64| Element::text(name, v.to_string()).attr("unit", "b");
        Some(
            Element::new("memory").attr("model", "virtio-mem").child(
                Element::new("target")
                    .child(bytes("size", max - self.boot))
                    .child(Element::text("node", "0"))
                    .child(bytes("block", HOTPLUG_BLOCK))
                    .child(bytes("requested", self.requested)),
            ),
        )
    }
}

/// The virtio-mem block size (upstream's 2 MiB hotplug alignment).
pub const HOTPLUG_BLOCK: u64 = 2 << 20;

/// The CPU part: counts, topology and `<cpu>`.
struct CpuPlan {
    vcpus_max: u32,
    vcpus_current: u32,
    /// vCPUs per socket (the first socket's are not hotpluggable).
    per_socket: u32,
    element: Element,
}

impl CpuPlan {
    fn of(
        cpu: Option<&Cpu>,
        resources: Option<&crds::kubevirt::domain::ResourceRequirements>,
        accel: Acceleration,
    ) -> Result<CpuPlan> {
        let default = Cpu::default();
        let cpu = cpu.unwrap_or(&default);
        refuse_extra("spec.domain.cpu", &cpu.extra)?;
        if cpu.dedicated_cpu_placement == Some(true) || cpu.isolate_emulator_thread == Some(true) {
            return unsupported(Unsupported::Cpu("dedicatedCpuPlacement / isolateEmulatorThread"));
        }
        if cpu.numa.is_some() {
            return unsupported(Unsupported::Cpu("numa"));
        }
        if cpu.realtime.is_some() {
            return unsupported(Unsupported::Cpu("realtime"));
        }
        let positive = |field: &str, v: Option<u32>| -> Result<Option<u32>> {
            match v {
                Some(0) => Err(invalid(field, "0", "must be positive")),
                v => Ok(v),
            }
        };
        let cores = positive("spec.domain.cpu.cores", cpu.cores)?;
        let threads = positive("spec.domain.cpu.threads", cpu.threads)?;
        let sockets = match positive("spec.domain.cpu.sockets", cpu.sockets)? {
            Some(s) => s,
            // The webhook's default topology: sockets from the CPU limit, else the request (rounded up).
            None if cores.is_none() && threads.is_none() => cpu_from_resources(resources)?.unwrap_or(1),
            None => 1,
        };
        let (cores, threads) = (cores.unwrap_or(1), threads.unwrap_or(1));
        let max_sockets = match positive("spec.domain.cpu.maxSockets", cpu.max_sockets)? {
            Some(m) if m < sockets => {
                return Err(invalid("spec.domain.cpu.maxSockets", m.to_string(), "below sockets"));
            }
            Some(m) => m,
            None => sockets,
        };
        let per_socket = cores.checked_mul(threads).ok_or_else(|| invalid("spec.domain.cpu", "", "too many vCPUs"))?;
        let count = |s: u32| s.checked_mul(per_socket).ok_or_else(|| invalid("spec.domain.cpu", "", "too many vCPUs"));
        let (vcpus_current, vcpus_max) = (count(sockets)?, count(max_sockets)?);

        let model = cpu.model.as_deref().unwrap_or(CPU_MODEL_HOST_MODEL);
        let mut element = match (model, accel) {
            ("", _) | (CPU_MODEL_HOST_MODEL, _) => Element::new("cpu").attr("mode", "host-model"),
            (CPU_MODEL_HOST_PASSTHROUGH, Acceleration::Kvm) => Element::new("cpu").attr("mode", "host-passthrough"),
            // libvirt 9.0's domcapabilities for TCG: host-passthrough unsupported, maximum (`-cpu max`) supported.
            (CPU_MODEL_HOST_PASSTHROUGH, Acceleration::Emulation) => Element::new("cpu").attr("mode", "maximum"),
            (named, _) => Element::new("cpu").attr("mode", "custom").child(Element::text("model", named)),
        };
        element.push(
            Element::new("topology")
                .attr("sockets", max_sockets.to_string())
                .attr("dies", "1")
                .attr("cores", cores.to_string())
                .attr("threads", threads.to_string()),
        );
        for f in cpu.features.as_deref().unwrap_or_default() {
            refuse_extra(format!("spec.domain.cpu.features[{}]", f.name), &f.extra)?;
            let policy = match &f.policy {
                None => "require",
                Some(CpuFeaturePolicy::Other(p)) => {
                    return Err(invalid(format!("spec.domain.cpu.features[{}].policy", f.name), p, "unknown policy"));
                }
                Some(p) => p.as_str(),
            };
            element.push(Element::new("feature").attr("policy", policy).attr("name", &f.name));
        }
        Ok(CpuPlan { vcpus_max, vcpus_current, per_socket, element })
    }

    /// `<vcpus>` when there are hotpluggable vCPUs: every vCPU, the current ones enabled, all but the first
    /// socket's hotpluggable.
    fn vcpus_element(&self) -> Option<Element> {
        (self.vcpus_current != self.vcpus_max).then(|| {
            Element::new("vcpus").children((0..self.vcpus_max).map(|id| {
                Element::new("vcpu")
                    .attr("id", id.to_string())
                    .attr("enabled", yes_no(id < self.vcpus_current))
                    .attr("hotpluggable", yes_no(id >= self.per_socket))
            }))
        })
    }
}

fn cpu_from_resources(resources: Option<&crds::kubevirt::domain::ResourceRequirements>) -> Result<Option<u32>> {
    let Some(r) = resources else { return Ok(None) };
    let (field, q) =
        match (r.limits.as_ref().and_then(|l| l.get("cpu")), r.requests.as_ref().and_then(|l| l.get("cpu"))) {
            (Some(q), _) => ("spec.domain.resources.limits.cpu", q),
            (None, Some(q)) => ("spec.domain.resources.requests.cpu", q),
            (None, None) => return Ok(None),
        };
    // parse_bytes rounds fractions (`500m`) up, as the webhook does for sockets.
    let n = parse_bytes(&q.0).map_err(|_| invalid(field, &q.0, "not a quantity"))?;
    let n = u32::try_from(n.max(1)).map_err(|_| invalid(field, &q.0, "too many vCPUs"))?;
    Ok(Some(n))
}

fn sysinfo(uuid: &str, firmware: &Firmware, chassis: Option<&crds::kubevirt::domain::Chassis>) -> Element {
    let entry = |name: &'static str, value: &str| Element::text("entry", value).attr("name", name);
    let mut system = Element::new("system")
        .child(entry("manufacturer", SMBIOS_VENDOR))
        .child(entry("product", "None"))
        .child(entry("uuid", uuid));
    if let Some(serial) = &firmware.serial {
        system.push(entry("serial", serial));
    }
    system.push(entry("family", SMBIOS_VENDOR));
    let chassis = chassis.and_then(|c| {
        let entries: Vec<Element> = [
            ("manufacturer", &c.manufacturer),
            ("version", &c.version),
            ("serial", &c.serial),
            ("asset", &c.asset),
            ("sku", &c.sku),
        ]
        .into_iter()
        .filter_map(|(n, v)| v.as_deref().map(|v| entry(n, v)))
        .collect();
        (!entries.is_empty()).then(|| Element::new("chassis").children(entries))
    });
    Element::new("sysinfo").attr("type", "smbios").child(system).child_opt(chassis)
}

fn os(machine: Option<&str>, firmware: &Firmware) -> Result<Element> {
    refuse_extra("spec.domain.firmware", &firmware.extra)?;
    if firmware.kernel_boot.is_some() {
        return unsupported(Unsupported::Firmware("kernelBoot"));
    }
    if firmware.acpi.is_some() {
        return unsupported(Unsupported::Firmware("acpi tables (slicNameRef, msdmNameRef)"));
    }
    let mut use_serial = false;
    if let Some(b) = &firmware.bootloader {
        if b.efi.is_some() {
            return unsupported(Unsupported::Firmware("efi (the launcher image has no OVMF)"));
        }
        use_serial = b.bios.as_ref().and_then(|b| b.use_serial) == Some(true);
    }
    let machine = machine.filter(|m| !m.is_empty()).unwrap_or(DEFAULT_MACHINE_TYPE);
    Ok(Element::new("os")
        .child(Element::text("type", "hvm").attr("arch", "x86_64").attr("machine", machine))
        .child(Element::new("smbios").attr("mode", "sysinfo"))
        .child_opt(use_serial.then(|| Element::new("bios").attr("useserial", "yes"))))
}

fn enabled(e: Option<bool>) -> bool {
    e != Some(false)
}

fn features(features: Option<&Features>, accel: Acceleration) -> Result<Element> {
    let default = Features::default();
    let f = features.unwrap_or(&default);
    refuse_extra("spec.domain.features", &f.extra)?;
    if f.hyperv.is_some() || f.hyperv_passthrough.as_ref().is_some_and(|h| enabled(h.enabled)) {
        return unsupported(Unsupported::Feature("hyperv / hypervPassthrough"));
    }
    let mut el = Element::new("features");
    if enabled(f.acpi.as_ref().and_then(|a| a.enabled)) {
        el.push(Element::new("acpi"));
    }
    if let Some(apic) = f.apic.as_ref().filter(|a| enabled(a.enabled)) {
        el.push(Element::new("apic").attr_opt("eoi", apic.end_of_interrupt.map(on_off)));
    }
    if let Some(smm) = &f.smm {
        el.push(Element::new("smm").attr("state", on_off(enabled(smm.enabled))));
    }
    if f.kvm.is_some() || f.pvspinlock.is_some() {
        if accel == Acceleration::Emulation {
            return unsupported(Unsupported::Feature("kvm / pvspinlock under software emulation"));
        }
        if let Some(hidden) = f.kvm.as_ref().and_then(|k| k.hidden) {
            el.push(Element::new("kvm").child(Element::new("hidden").attr("state", on_off(hidden))));
        }
        if let Some(p) = &f.pvspinlock {
            el.push(Element::new("pvspinlock").attr("state", on_off(enabled(p.enabled))));
        }
    }
    Ok(el)
}

fn clock(clock: Option<&Clock>) -> Result<Element> {
    let Some(c) = clock else { return Ok(Element::new("clock").attr("offset", "utc")) };
    refuse_extra("spec.domain.clock", &c.extra)?;
    let mut el = match (&c.timezone, c.utc.as_ref().and_then(|u| u.offset_seconds)) {
        (Some(tz), _) => Element::new("clock").attr("offset", "timezone").attr("timezone", tz),
        (None, Some(offset)) => {
            Element::new("clock").attr("offset", "variable").attr("adjustment", offset.to_string()).attr("basis", "utc")
        }
        (None, None) => Element::new("clock").attr("offset", "utc"),
    };
    if let Some(t) = &c.timer {
        refuse_extra("spec.domain.clock.timer", &t.extra)?;
        let timers: [(&'static str, &Option<TimerState>); 5] =
            [("hpet", &t.hpet), ("kvmclock", &t.kvm), ("pit", &t.pit), ("rtc", &t.rtc), ("hypervclock", &t.hyperv)];
        for (name, state) in timers {
            let Some(s) = state else { continue };
            el.push(
                Element::new("timer")
                    .attr("name", name)
                    .attr("present", yes_no(enabled(s.present)))
                    .attr_opt("tickpolicy", s.tick_policy.as_ref().map(|p| p.as_str().to_owned()))
                    .attr_opt("track", s.track.as_ref().map(|p| p.as_str().to_owned())),
            );
        }
    }
    Ok(el)
}

/// `<devices>` and the IOThread count the disks need.
struct DevicesPlan {
    element: Element,
    iothreads: u32,
}

fn devices(vmi: &VirtualMachineInstance, ctx: &ConvertContext, vcpus: u32) -> Result<DevicesPlan> {
    let d = &vmi.spec.domain.devices;
    refuse_unsupported_devices(d)?;
    let transitional = d.use_virtio_transitional == Some(true);
    let virtio = ConvertContext::virtio_model(transitional);
    let mut el = Element::new("devices");

    let disks = disks(vmi, ctx, vcpus)?;
    el = el.children(disks.elements);

    let inputs = d.inputs.as_deref().unwrap_or_default();
    let usb_inputs = inputs.iter().any(|i| !matches!(i.bus, Some(InputBus::Virtio)));
    let usb = if disks.usb || usb_inputs { "qemu-xhci" } else { "none" };
    el.push(Element::new("controller").attr("type", "usb").attr("index", "0").attr("model", usb));
    if disks.scsi || d.disable_hotplug != Some(true) {
        el.push(Element::new("controller").attr("type", "scsi").attr("index", "0").attr("model", virtio));
    }
    el.push(Element::new("controller").attr("type", "virtio-serial").attr("index", "0").attr("model", virtio));

    el = el.children(interfaces(vmi, ctx, virtio)?);

    if d.autoattach_serial_console != Some(false) {
        let socket = ctx.path(SocketDir::in_pod().serial_console());
        let log = (d.log_serial_console != Some(false))
            .then(|| Element::new("log").attr("file", ctx.path(launcher::serial_log())).attr("append", "on"));
        el.push(
            Element::new("serial")
                .attr("type", "unix")
                .child(Element::new("source").attr("mode", "bind").attr("path", &socket))
                .child_opt(log)
                .child(
                    Element::new("target")
                        .attr("type", "isa-serial")
                        .attr("port", "0")
                        .child(Element::new("model").attr("name", "isa-serial")),
                ),
        );
        el.push(
            Element::new("console")
                .attr("type", "unix")
                .child(Element::new("source").attr("mode", "bind").attr("path", &socket))
                .child(Element::new("target").attr("type", "serial").attr("port", "0")),
        );
    }
    el.push(
        Element::new("channel")
            .attr("type", "unix")
            .child(Element::new("target").attr("type", "virtio").attr("name", "org.qemu.guest_agent.0")),
    );
    for input in inputs {
        refuse_extra(format!("spec.domain.devices.inputs[{}]", input.name), &input.extra)?;
        let type_ = match &input.type_ {
            None | Some(InputType::Tablet) => "tablet",
            Some(InputType::Keyboard) => "keyboard",
            Some(InputType::Other(t)) => {
                return Err(invalid(format!("spec.domain.devices.inputs[{}].type", input.name), t, "unknown type"));
            }
        };
        let (bus, model) = match &input.bus {
            None | Some(InputBus::Usb) => ("usb", None),
            // libvirt refuses the (non-)transitional models on keyboard and tablet inputs: the bus says it all.
            Some(InputBus::Virtio) => ("virtio", None::<&str>),
            Some(InputBus::Other(b)) => {
                return Err(invalid(format!("spec.domain.devices.inputs[{}].bus", input.name), b, "unknown bus"));
            }
        };
        el.push(
            Element::new("input")
                .attr("type", type_)
                .attr("bus", bus)
                .attr_opt("model", model)
                .child(alias(&input.name)),
        );
    }
    if d.autoattach_graphics_device != Some(false) {
        el.push(
            Element::new("graphics").attr("type", "vnc").child(
                Element::new("listen").attr("type", "socket").attr("socket", ctx.path(SocketDir::in_pod().vnc())),
            ),
        );
        let video = match d.video.as_ref().and_then(|v| v.type_.as_deref()) {
            None | Some("vga") => Element::new("model").attr("type", "vga").attr("vram", "16384").attr("heads", "1"),
            Some(other) => Element::new("model").attr("type", other).attr("heads", "1"),
        };
        el.push(Element::new("video").child(video));
    }
    if let Some(w) = &d.watchdog {
        refuse_extra(format!("spec.domain.devices.watchdog[{}]", w.name), &w.extra)?;
        let Some(dev) = &w.i6300esb else {
            return unsupported(Unsupported::Device {
                kind: "watchdog (only i6300esb on amd64)",
                name: w.name.clone(),
            });
        };
        let action = match &dev.action {
            None | Some(WatchdogAction::Reset) => "reset",
            Some(WatchdogAction::Poweroff) => "poweroff",
            Some(WatchdogAction::Shutdown) => "shutdown",
            Some(WatchdogAction::Other(a)) => {
                return Err(invalid("spec.domain.devices.watchdog.i6300esb.action", a, "unknown action"));
            }
        };
        el.push(Element::new("watchdog").attr("model", "i6300esb").attr("action", action).child(alias(&w.name)));
    }
    if d.autoattach_mem_balloon != Some(false) {
        el.push(Element::new("memballoon").attr("model", virtio).child(Element::new("stats").attr("period", "10")));
    } else {
        el.push(Element::new("memballoon").attr("model", "none"));
    }
    if d.rng.is_some() {
        el.push(
            Element::new("rng")
                .attr("model", virtio)
                .child(Element::text("backend", "/dev/urandom").attr("model", "random")),
        );
    }
    Ok(DevicesPlan { element: el, iothreads: disks.iothreads })
}

fn refuse_unsupported_devices(d: &Devices) -> Result<()> {
    let first = |kind: &'static str, names: Option<Vec<String>>| -> Result<()> {
        match names.and_then(|n| n.into_iter().next()) {
            Some(name) => unsupported(Unsupported::Device { kind, name }),
            None => Ok(()),
        }
    };
    first("gpu", d.gpus.as_ref().map(|g| g.iter().map(|g| g.name.clone()).collect()))?;
    first("hostDevice", d.host_devices.as_ref().map(|g| g.iter().map(|g| g.name.clone()).collect()))?;
    first("filesystem (virtiofs)", d.filesystems.as_ref().map(|g| g.iter().map(|g| g.name.clone()).collect()))?;
    first("panicDevice", d.panic_devices.as_ref().map(|p| p.iter().map(|_| "panicDevices".to_owned()).collect()))?;
    first("sound", d.sound.as_ref().map(|s| vec![s.name.clone()]))?;
    if d.tpm.as_ref().is_some_and(|t| enabled(t.enabled)) {
        return unsupported(Unsupported::Device { kind: "tpm", name: "tpm".into() });
    }
    if d.autoattach_vsock == Some(true) {
        return unsupported(Unsupported::Device { kind: "vsock", name: "autoattachVSOCK".into() });
    }
    if d.downward_metrics.is_some() {
        return unsupported(Unsupported::Device { kind: "downwardMetrics", name: "downwardMetrics".into() });
    }
    if d.client_passthrough.is_some() {
        return unsupported(Unsupported::Device { kind: "clientPassthrough", name: "clientPassthrough".into() });
    }
    Ok(())
}

fn alias(name: &str) -> Element {
    Element::new("alias").attr("name", format!("ua-{name}"))
}

/// `xxxx:xx:xx.x` → `<address type='pci'>`.
fn pci_address(field: &str, addr: &str) -> Result<Element> {
    let bad = || invalid(field, addr, "not a PCI address (dddd:bb:ss.f)");
    let (dbs, function) = addr.split_once('.').ok_or_else(bad)?;
    let parts: Vec<&str> = dbs.split(':').collect();
    let hex = |s: &str, len: usize| s.len() == len && s.chars().all(|c| c.is_ascii_hexdigit());
    match parts.as_slice() {
        [domain, bus, slot] if hex(domain, 4) && hex(bus, 2) && hex(slot, 2) && hex(function, 1) => {
            Ok(Element::new("address")
                .attr("type", "pci")
                .attr("domain", format!("0x{domain}"))
                .attr("bus", format!("0x{bus}"))
                .attr("slot", format!("0x{slot}"))
                .attr("function", format!("0x{function}")))
        }
        _ => Err(bad()),
    }
}

/// Linux-style device names: `vda` … `vdz`, `vdaa`, … (upstream's `FormatDeviceName`).
/// The `index`-th device name with `prefix` (`sda`, …, `sdz`, `sdaa`, …), as upstream's converter names them.
pub fn device_name(prefix: &str, mut index: usize) -> String {
    let mut letters = Vec::new();
    loop {
        letters.push(char::from(b'a' + u8::try_from(index % 26).unwrap_or(0)));
        if index < 26 {
            break;
        }
        index = index / 26 - 1;
    }
    letters.reverse();
    format!("{prefix}{}", letters.into_iter().collect::<String>())
}

/// `<disk>` elements and what they need elsewhere.
struct DisksPlan {
    elements: Vec<Element>,
    iothreads: u32,
    scsi: bool,
    usb: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum DeviceKind {
    Disk,
    Cdrom,
    Lun,
}

/// Where a disk's bytes are.
enum Source {
    File { path: String, format: ImageFormat },
    Overlay { overlay: String, backing: String, backing_format: ImageFormat },
    Block { dev: String },
}

fn disks(vmi: &VirtualMachineInstance, ctx: &ConvertContext, vcpus: u32) -> Result<DisksPlan> {
    let d = &vmi.spec.domain.devices;
    let volumes: BTreeMap<&str, &Volume> =
        vmi.spec.volumes.as_deref().unwrap_or_default().iter().map(|v| (v.name.as_str(), v)).collect();
    let disks = d.disks.as_deref().unwrap_or_default();
    let transitional = d.use_virtio_transitional == Some(true);

    // IOThreads (§7.2: virtio disks get IOThreads): `shared` (the default) puts every virtio disk on IOThread 1,
    // `auto` spreads them over a pool of up to 2 × vCPUs; `dedicatedIOThread` disks get their own after those.
    let is_virtio = |disk: &Disk| {
        disk.disk.as_ref().and_then(|t| t.bus.as_ref()) == Some(&DiskBus::Virtio)
            && disk.cdrom.is_none()
            && disk.lun.is_none()
    };
    let virtio_disks = disks.iter().filter(|d| is_virtio(d)).count();
    let dedicated = disks.iter().filter(|d| is_virtio(d) && d.dedicated_io_thread == Some(true)).count();
    let shared_count = u32::try_from(virtio_disks - dedicated).unwrap_or(u32::MAX);
    let pool = match &vmi.spec.domain.io_threads_policy {
        _ if virtio_disks == 0 => 0,
        None | Some(IoThreadsPolicy::Shared) => 1,
        Some(IoThreadsPolicy::Auto) => shared_count.min(vcpus.saturating_mul(2)).max(1),
        Some(p @ (IoThreadsPolicy::SupplementalPool | IoThreadsPolicy::Other(_))) => {
            return unsupported(Unsupported::Device { kind: "ioThreadsPolicy", name: p.as_str().to_owned() });
        }
    };
    let (mut next_shared, mut next_dedicated) = (0u32, pool);

    let mut plan = DisksPlan { elements: Vec::new(), iothreads: pool, scsi: false, usb: false };
    let mut prefix_counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    for disk in disks {
        let name = disk.name.as_str();
        let field = |f: &str| format!("spec.domain.devices.disks[{name}].{f}");
        refuse_extra(format!("spec.domain.devices.disks[{name}]"), &disk.extra)?;
        let volume = *volumes.get(name).ok_or_else(|| ConvertError::DiskWithoutVolume { disk: name.to_owned() })?;
        let hotplug_target = if volume.is_hotpluggable() {
            match ctx.hotplugged.get(name) {
                Some(target) => Some(target.clone()),
                // Not in the pod (yet): the node agent attaches it once it is.
                None => continue,
            }
        } else {
            None
        };
        let (kind, bus, read_only) = match (&disk.disk, &disk.cdrom, &disk.lun) {
            (Some(t), None, None) => {
                refuse_extra(field("disk"), &t.extra)?;
                (DeviceKind::Disk, t.bus.clone(), t.read_only == Some(true))
            }
            (None, None, None) => (DeviceKind::Disk, None, false),
            (None, Some(t), None) => {
                refuse_extra(field("cdrom"), &t.extra)?;
                (DeviceKind::Cdrom, t.bus.clone(), t.read_only != Some(false))
            }
            (None, None, Some(t)) => {
                refuse_extra(field("lun"), &t.extra)?;
                if t.reservation == Some(true) {
                    return unsupported(Unsupported::DiskOption { disk: name.to_owned(), option: "lun reservation" });
                }
                (DeviceKind::Lun, Some(t.bus.clone().unwrap_or(DiskBus::Scsi)), t.read_only == Some(true))
            }
            _ => {
                return Err(invalid(
                    format!("spec.domain.devices.disks[{name}]"),
                    name,
                    "more than one of disk, cdrom, lun",
                ));
            }
        };
        // Hotplugged disks go on the virtio-scsi controller unless they name a bus (upstream's virtctl default).
        let bus = bus.unwrap_or(if hotplug_target.is_some() { DiskBus::Scsi } else { DiskBus::Sata });
        let (bus_name, prefix) = match &bus {
            DiskBus::Virtio => ("virtio", "vd"),
            DiskBus::Sata => ("sata", "sd"),
            DiskBus::Scsi => ("scsi", "sd"),
            DiskBus::Usb => ("usb", "sd"),
            DiskBus::Other(b) => return Err(invalid(field("bus"), b, "unknown bus")),
        };
        if kind == DeviceKind::Cdrom && bus == DiskBus::Virtio {
            return Err(invalid(field("cdrom.bus"), "virtio", "a CD-ROM cannot be on the virtio bus"));
        }
        plan.scsi |= bus == DiskBus::Scsi;
        plan.usb |= bus == DiskBus::Usb;
        let dev = match &hotplug_target {
            Some(target) => target.clone(),
            None => {
                let index = prefix_counts.entry(prefix).or_insert(0);
                let dev = device_name(prefix, *index);
                *index += 1;
                dev
            }
        };
        if disk.changed_block_tracking == Some(true) {
            return unsupported(Unsupported::DiskOption { disk: name.to_owned(), option: "changedBlockTracking" });
        }

        let (source, pvc_read_only, preallocated) = disk_source(vmi, ctx, volume)?;
        if kind == DeviceKind::Lun && !matches!(source, Source::Block { .. }) {
            return unsupported(Unsupported::DiskOption { disk: name.to_owned(), option: "lun on a non-block volume" });
        }
        let block = matches!(source, Source::Block { .. });
        let direct_io = !ctx.no_direct_io.contains(name);
        let cache = match &disk.cache {
            None if direct_io => "none",
            None => "writethrough",
            Some(DriverCache::NoCache) if !direct_io => {
                return Err(invalid(field("cache"), "none", "the volume's storage does not support O_DIRECT"));
            }
            Some(DriverCache::Other(c)) => return Err(invalid(field("cache"), c, "unknown cache mode")),
            Some(c) => c.as_str(),
        };
        if disk.shareable == Some(true) && cache != "none" {
            return Err(invalid(field("cache"), cache, "a shareable disk needs cache none"));
        }
        let io = match &disk.io {
            None if cache == "none" && (block || preallocated) => Some("native"),
            None => None,
            Some(DriverIo::Other(v)) => return Err(invalid(field("io"), v, "unknown io mode")),
            Some(v) => Some(v.as_str()),
        };
        let error_policy = match &disk.error_policy {
            None => "stop",
            Some(DiskErrorPolicy::Other(p)) => return Err(invalid(field("errorPolicy"), p, "unknown error policy")),
            Some(p) => p.as_str(),
        };
        let virtio = bus == DiskBus::Virtio && kind == DeviceKind::Disk;
        let iothread = virtio.then(|| {
            if disk.dedicated_io_thread == Some(true) {
                next_dedicated += 1;
                next_dedicated
            } else {
                next_shared += 1;
                (next_shared - 1) % pool.max(1) + 1
            }
        });
        let queues = (virtio && d.block_multi_queue == Some(true)).then(|| vcpus.to_string());
        let format = match &source {
            Source::File { format, .. } => format.as_str(),
            Source::Overlay { .. } => ImageFormat::Qcow2.as_str(),
            Source::Block { .. } => ImageFormat::Raw.as_str(),
        };
        let driver = Element::new("driver")
            .attr("name", "qemu")
            .attr("type", format)
            .attr("cache", cache)
            .attr_opt("io", io)
            .attr("error_policy", error_policy)
            .attr_opt("discard", (kind != DeviceKind::Cdrom).then_some("unmap"))
            .attr_opt("iothread", iothread.map(|t| t.to_string()))
            .attr_opt("queues", queues);
        let (disk_type, source_el, backing) = match &source {
            Source::File { path, .. } => ("file", Element::new("source").attr("file", path), None),
            Source::Block { dev } => ("block", Element::new("source").attr("dev", dev), None),
            Source::Overlay { overlay, backing, backing_format } => (
                "file",
                Element::new("source").attr("file", overlay),
                Some(
                    Element::new("backingStore")
                        .attr("type", "file")
                        .child(Element::new("format").attr("type", backing_format.as_str()))
                        .child(Element::new("source").attr("file", backing)),
                ),
            ),
        };
        let device = match kind {
            DeviceKind::Disk => "disk",
            DeviceKind::Cdrom => "cdrom",
            DeviceKind::Lun => "lun",
        };
        let tray = disk.cdrom.as_ref().and_then(|c| c.tray.as_ref()).and_then(|t| match t {
            TrayState::Open => Some("open"),
            _ => None,
        });
        let blockio = match &disk.block_size {
            None => None,
            Some(b) if b.match_volume.as_ref().is_some_and(|m| enabled(m.enabled)) => {
                return unsupported(Unsupported::DiskOption { disk: name.to_owned(), option: "blockSize.matchVolume" });
            }
            Some(b) => match &b.custom {
                Some(c) if c.discard_granularity.is_some() => {
                    return unsupported(Unsupported::DiskOption {
                        disk: name.to_owned(),
                        option: "blockSize.custom.discardGranularity (libvirt 9.0)",
                    });
                }
                Some(c) => Some(
                    Element::new("blockio")
                        .attr_opt("logical_block_size", c.logical.map(|v| v.to_string()))
                        .attr_opt("physical_block_size", c.physical.map(|v| v.to_string())),
                ),
                None => None,
            },
        };
        let boot = match disk.boot_order {
            Some(0) => return Err(invalid(field("bootOrder"), "0", "must be positive")),
            Some(n) => Some(Element::new("boot").attr("order", n.to_string())),
            None => None,
        };
        let pci = match disk.disk.as_ref().and_then(|t| t.pci_address.as_deref()) {
            Some(a) if bus != DiskBus::Virtio => {
                return Err(invalid(field("disk.pciAddress"), a, "only for virtio disks"));
            }
            Some(a) => Some(pci_address(&field("disk.pciAddress"), a)?),
            None => None,
        };
        plan.elements.push(
            Element::new("disk")
                .attr("type", disk_type)
                .attr("device", device)
                .attr_opt("model", virtio.then(|| ConvertContext::virtio_model(transitional)))
                .child(driver)
                .child(source_el)
                .child_opt(backing)
                .child(Element::new("target").attr("dev", dev).attr("bus", bus_name).attr_opt("tray", tray))
                .child_opt(blockio)
                .child_opt(boot)
                .child_opt((read_only || pvc_read_only).then(|| Element::new("readonly")))
                .child_opt((disk.shareable == Some(true)).then(|| Element::new("shareable")))
                .child_opt(disk.serial.as_ref().map(|s| Element::text("serial", s)))
                .child(alias(name))
                .child_opt(pci),
        );
    }
    plan.iothreads = next_dedicated;
    Ok(plan)
}

/// The volume's source, whether its PVC is read-only, and whether its file is preallocated.
fn disk_source(vmi: &VirtualMachineInstance, ctx: &ConvertContext, v: &Volume) -> Result<(Source, bool, bool)> {
    let name = v.name.as_str();
    refuse_extra(format!("spec.volumes[{name}]"), &v.extra)?;
    let set: Vec<&'static str> = [
        ("containerDisk", v.container_disk.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("dataVolume", v.data_volume.is_some()),
        ("emptyDisk", v.empty_disk.is_some()),
        ("cloudInitNoCloud", v.cloud_init_no_cloud.is_some()),
        ("cloudInitConfigDrive", v.cloud_init_config_drive.is_some()),
        ("hostDisk", v.host_disk.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("sysprep", v.sysprep.is_some()),
        ("configMap", v.config_map.is_some()),
        ("secret", v.secret.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("serviceAccount", v.service_account.is_some()),
        ("downwardMetrics", v.downward_metrics.is_some()),
        ("memoryDump", v.memory_dump.is_some()),
        ("containerPath", v.container_path.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, s)| s.then_some(n))
    .collect();
    let kind = match set.as_slice() {
        [one] => *one,
        [] => return Err(invalid(format!("spec.volumes[{name}]"), name, "no volume source")),
        _ => return Err(invalid(format!("spec.volumes[{name}]"), set.join(", "), "more than one volume source")),
    };
    let file = |path: String, format| Source::File { path: ctx.path(path), format };
    match kind {
        "containerDisk" => {
            let backing_format = *ctx
                .container_disk_formats
                .get(name)
                .ok_or_else(|| ConvertError::UnknownImageFormat { volume: name.to_owned() })?;
            let overlay = ctx.path(launcher::container_disk_overlay(name));
            let backing = ctx.path(launcher::container_disk_copy(name));
            Ok((Source::Overlay { overlay, backing, backing_format }, false, false))
        }
        "emptyDisk" => Ok((file(launcher::empty_disk(name), ImageFormat::Qcow2), false, false)),
        "cloudInitNoCloud" => Ok((file(launcher::cloud_init_disk(name), ImageFormat::Raw), false, false)),
        "cloudInitConfigDrive" => {
            Ok((file(launcher::cloud_init_config_drive_disk(name), ImageFormat::Raw), false, false))
        }
        "persistentVolumeClaim" | "dataVolume" => {
            let (read_only, hotpluggable) = match (&v.persistent_volume_claim, &v.data_volume) {
                (Some(p), _) => (p.read_only == Some(true), p.hotpluggable == Some(true)),
                (None, Some(dv)) => (false, dv.hotpluggable == Some(true)),
                (None, None) => (false, false),
            };
            let status = vmi
                .status
                .as_ref()
                .and_then(|s| s.volume_status.as_deref())
                .and_then(|vs| vs.iter().find(|s| s.name == name))
                .and_then(|s| s.persistent_volume_claim_info.as_ref());
            let mode = match ctx.pvc_modes.get(name) {
                Some(m) => *m,
                None => match status.and_then(|i| i.volume_mode.as_deref()) {
                    Some("Block") => PvcVolumeMode::Block,
                    Some("Filesystem") => PvcVolumeMode::Filesystem,
                    _ => return Err(ConvertError::UnknownVolumeMode { volume: name.to_owned() }),
                },
            };
            let preallocated = status.and_then(|i| i.preallocated) == Some(true);
            if hotpluggable {
                return Ok(match mode {
                    PvcVolumeMode::Filesystem => {
                        (file(launcher::hotplug_disk(name), ImageFormat::Raw), read_only, preallocated)
                    }
                    PvcVolumeMode::Block => {
                        (Source::Block { dev: ctx.path(launcher::hotplug_device(name)) }, read_only, true)
                    }
                });
            }
            Ok(match mode {
                PvcVolumeMode::Filesystem => {
                    (file(launcher::pvc_disk(name), ImageFormat::Raw), read_only, preallocated)
                }
                PvcVolumeMode::Block => (Source::Block { dev: ctx.path(launcher::pvc_device(name)) }, read_only, true),
            })
        }
        other => unsupported(Unsupported::VolumeSource { volume: name.to_owned(), source_kind: other }),
    }
}

/// A MAC address in libvirt's form (lower-case, `:`-separated); upstream accepts `-` separators too.
fn normalized_mac(field: &str, mac: &str) -> Result<String> {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    if parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit())) {
        let first = u8::from_str_radix(parts[0], 16).map_err(|_| invalid(field, mac, "not a MAC address"))?;
        if first & 1 == 1 {
            return Err(invalid(field, mac, "a multicast address"));
        }
        Ok(parts.join(":").to_ascii_lowercase())
    } else {
        Err(invalid(field, mac, "not a MAC address"))
    }
}

fn interfaces(vmi: &VirtualMachineInstance, ctx: &ConvertContext, virtio: &'static str) -> Result<Vec<Element>> {
    let networks: BTreeMap<&str, &Network> =
        vmi.spec.networks.as_deref().unwrap_or_default().iter().map(|n| (n.name.as_str(), n)).collect();
    let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
    let d = &vmi.spec.domain.devices;
    let mut out = Vec::new();
    let mut pod_interface: Option<&str> = None;
    for iface in d.interfaces.as_deref().unwrap_or_default() {
        let name = iface.name.as_str();
        let field = |f: &str| format!("spec.domain.devices.interfaces[{name}].{f}");
        refuse_extra(format!("spec.domain.devices.interfaces[{name}]"), &iface.extra)?;
        let network =
            *networks.get(name).ok_or_else(|| ConvertError::InterfaceWithoutNetwork { interface: name.to_owned() })?;
        refuse_extra(format!("spec.networks[{name}]"), &network.extra)?;
        if network.multus.as_ref().is_some_and(|m| m.default == Some(true)) {
            return unsupported(Unsupported::Network { network: name.to_owned(), kind: "Multus default" });
        }
        if network.resource_claim.is_some() {
            return unsupported(Unsupported::Network { network: name.to_owned(), kind: "resourceClaim" });
        }
        if network.pod.is_none() && network.multus.is_none() {
            return Err(invalid(format!("spec.networks[{name}]"), name, "no network source"));
        }
        binding(iface)?;
        if iface.state == Some(InterfaceState::Absent) {
            continue;
        }
        // The pod network's tap, or a secondary network's (the launcher's bridge binding).
        let (tap, mtu) = if network.multus.is_some() {
            if iface.bridge.is_none() {
                return Err(invalid(
                    field("masquerade"),
                    name,
                    "Masquerade interface only implemented with pod network",
                ));
            }
            (launcher::secondary_tap(name), ctx.secondary_mtus.get(name).copied())
        } else {
            if let Some(other) = pod_interface.replace(name) {
                return Err(invalid(field("name"), name, "a second interface on the pod network").with_other(other));
            }
            (launcher::POD_TAP.to_owned(), ctx.pod_interface_mtu)
        };
        if d.network_interface_multiqueue == Some(true) {
            return unsupported(Unsupported::Interface {
                interface: name.to_owned(),
                binding: "networkInterfaceMultiqueue",
            });
        }
        let model = match &iface.model {
            None | Some(InterfaceModel::Virtio) => virtio,
            Some(InterfaceModel::Other(m)) => return Err(invalid(field("model"), m, "unknown model")),
            Some(m) => m.as_str(),
        };
        let mac = match iface.mac_address.as_deref() {
            Some(m) => normalized_mac(&field("macAddress"), m)?,
            None => launcher::derived_mac(uid, name),
        };
        let link = match &iface.state {
            Some(InterfaceState::Down) => Some(Element::new("link").attr("state", "down")),
            Some(InterfaceState::Other(s)) => return Err(invalid(field("state"), s, "unknown state")),
            _ => None,
        };
        let boot = match iface.boot_order {
            Some(0) => return Err(invalid(field("bootOrder"), "0", "must be positive")),
            Some(n) => Some(Element::new("boot").attr("order", n.to_string())),
            None => None,
        };
        let rom = boot.is_none().then(|| Element::new("rom").attr("enabled", "no"));
        let acpi = iface.acpi_index.map(|i| Element::new("acpi").attr("index", i.to_string()));
        let pci = iface.pci_address.as_deref().map(|a| pci_address(&field("pciAddress"), a)).transpose()?;
        let mtu = mtu.filter(|_| model == virtio).map(|m| Element::new("mtu").attr("size", m.to_string()));
        out.push(
            Element::new("interface")
                .attr("type", "ethernet")
                .child(Element::new("mac").attr("address", mac))
                .child(Element::new("target").attr("dev", tap).attr("managed", "no"))
                .child(Element::new("model").attr("type", model))
                .child_opt(mtu)
                .child_opt(link)
                .child_opt(boot)
                .child(alias(name))
                .child_opt(rom)
                .child_opt(acpi)
                .child_opt(pci),
        );
    }
    Ok(out)
}

/// Checks the interface's binding: masquerade or bridge (both a tap in the pod), exactly one.
fn binding(iface: &Interface) -> Result<()> {
    let name = iface.name.as_str();
    let refuse = |binding: &'static str| unsupported(Unsupported::Interface { interface: name.to_owned(), binding });
    let set: Vec<&'static str> = [
        ("masquerade", iface.masquerade.is_some()),
        ("bridge", iface.bridge.is_some()),
        ("sriov", iface.sriov.is_some()),
        ("passtBinding", iface.passt_binding.is_some()),
        ("binding", iface.binding.is_some()),
        ("slirp", iface.slirp.is_some()),
        ("macvtap", iface.macvtap.is_some()),
        ("passt", iface.passt.is_some()),
    ]
    .into_iter()
    .filter_map(|(n, s)| s.then_some(n))
    .collect();
    match set.as_slice() {
        ["masquerade"] | ["bridge"] => Ok(()),
        ["sriov"] => refuse("the sriov binding"),
        ["passtBinding"] => refuse("the passtBinding binding (libvirt 9.0 has no passt backend)"),
        ["binding"] => refuse("network binding plugins"),
        ["slirp"] | ["macvtap"] | ["passt"] => refuse("a discontinued binding (slirp, macvtap, passt)"),
        [] => Err(invalid(format!("spec.domain.devices.interfaces[{name}]"), name, "no binding")),
        _ => Err(invalid(format!("spec.domain.devices.interfaces[{name}]"), set.join(", "), "more than one binding")),
    }
}

impl ConvertError {
    /// Adds the conflicting name to an [`ConvertError::Invalid`] value.
    fn with_other(self, other: &str) -> ConvertError {
        match self {
            ConvertError::Invalid { field, value, reason } => {
                ConvertError::Invalid { field, value: format!("{value} (and {other})"), reason }
            }
            e => e,
        }
    }
}

#[cfg(test)]
mod tests;
