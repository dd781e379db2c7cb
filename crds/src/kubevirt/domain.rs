//! `spec.domain` of a VirtualMachineInstance (contract §2.2): the virtual hardware — CPU, memory, machine type,
//! firmware, clock, features and devices (disks, interfaces, inputs, GPUs, host devices, …).
//!
//! Field names and JSON shapes are upstream's (`staging/src/kubevirt.io/api/core/v1/schema.go`); every object
//! keeps fields this version does not model in `extra` (see [`super::wire`]).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::wire::{Extra, Marker, string_enum};

/// The virtual hardware of the guest.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DomainSpec {
    /// Compute resources of the VMI (pod requests/limits derive from them). Upstream's Go type always writes
    /// `resources: {}`; absent means the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// CPU topology, model and placement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    /// Guest memory (`guest`, hugepages, hotplug ceiling).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// Machine type (defaulted per architecture: `q35` on amd64).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
    /// Firmware: UUID, serial, BIOS/EFI bootloader, kernel boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Firmware>,
    /// Guest clock offset and timers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<Clock>,
    /// Hypervisor features (ACPI, APIC, SMM, Hyper-V enlightenments, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Features>,
    /// Devices of the guest (defaults to `{}`).
    // Upstream's schema requires it and its Go type always writes it: here the schema defaults it to `{}` (from
    // `serde(default)`) and it is always serialised.
    #[serde(default)]
    pub devices: Devices,
    /// IOThreads policy: `shared`, `auto` or `supplementalPool`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_threads_policy: Option<IoThreadsPolicy>,
    /// IOThreads of the `supplementalPool` policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_threads: Option<DiskIoThreads>,
    /// SMBIOS chassis information.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chassis: Option<Chassis>,
    /// Guest reboot behaviour: `Reboot` (default) or `Terminate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reboot_policy: Option<RebootPolicy>,
    /// Fields this version does not model (e.g. `launchSecurity`), kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `domain.ioThreadsPolicy`.
    pub enum IoThreadsPolicy {
        /// One IOThread shared by every disk with `dedicatedIOThread` unset.
        Shared = "shared",
        /// A pool of IOThreads sized by the vCPU count.
        Auto = "auto",
        /// `ioThreads.supplementalPoolThreadCount` IOThreads.
        SupplementalPool = "supplementalPool",
    }
}

string_enum! {
    /// `domain.rebootPolicy`.
    pub enum RebootPolicy {
        /// The guest reboots silently (default).
        Reboot = "Reboot",
        /// A guest reboot terminates the VMI.
        Terminate = "Terminate",
    }
}

/// `domain.ioThreads`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DiskIoThreads {
    /// Number of IOThreads of the supplemental pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supplemental_pool_thread_count: Option<u32>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `domain.chassis`: SMBIOS chassis strings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Chassis {
    /// Manufacturer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    /// Version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Serial number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Asset tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub asset: Option<String>,
    /// SKU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sku: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `domain.resources`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ResourceRequirements {
    /// Requested resources (`memory`, `cpu`, device-plugin resources). A CPU limit alone also becomes the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, Quantity>>,
    /// Resource limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// Do not add the computed overhead to the pod's memory limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overcommit_guest_overhead: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `domain.cpu`. Without cores/sockets/threads the defaulting sets sockets from the CPU limit (else request), cores
/// and threads to 1.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Cpu {
    /// Cores per socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// Sockets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sockets: Option<u32>,
    /// Hotplug ceiling of `sockets` (defaulted under the LiveUpdate rollout strategy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_sockets: Option<u32>,
    /// Threads per core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// A libvirt CPU model name, `host-model` (the default) or `host-passthrough`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// CPU features to force, require, disable, … on top of the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<CpuFeature>>,
    /// Pin every vCPU to a dedicated host CPU (needs Guaranteed QoS and CPU-manager nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dedicated_cpu_placement: Option<bool>,
    /// Guest NUMA topology.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa: Option<Numa>,
    /// Give the emulator thread its own dedicated host CPU (with `dedicatedCpuPlacement`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolate_emulator_thread: Option<bool>,
    /// Realtime tuning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub realtime: Option<Realtime>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// The CPU model value meaning "the host's model as libvirt expands it" (the default).
pub const CPU_MODEL_HOST_MODEL: &str = "host-model";
/// The CPU model value meaning "pass the host CPU through".
pub const CPU_MODEL_HOST_PASSTHROUGH: &str = "host-passthrough";

/// One entry of `cpu.features`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CpuFeature {
    /// Feature name (libvirt's).
    pub name: String,
    /// `force`, `require` (default), `optional`, `disable` or `forbid`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<CpuFeaturePolicy>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `cpu.features[].policy`.
    pub enum CpuFeaturePolicy {
        /// Claimed supported regardless of the host.
        Force = "force",
        /// Guest creation fails unless the host supports or emulates it (default).
        Require = "require",
        /// Present if the host supports it.
        Optional = "optional",
        /// Not presented to the guest.
        Disable = "disable",
        /// Guest creation fails if the host supports it.
        Forbid = "forbid",
    }
}

/// `cpu.numa`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Numa {
    /// Model a guest NUMA topology matching the CPU pinning (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest_mapping_passthrough: Option<Marker>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `cpu.realtime`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Realtime {
    /// vCPUs used for realtime, in libvirt's mask syntax (`0-3,^1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mask: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `domain.memory`. Defaulting sets `guest` from `resources.requests.memory`, else the limit, else the hugepage
/// size.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Memory {
    /// Back guest memory with hugepages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<Hugepages>,
    /// Guest-visible memory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest: Option<Quantity>,
    /// Hotplug ceiling of `guest`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_guest: Option<Quantity>,
    /// Extra overhead to reserve and whether memory is locked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_overhead: Option<ReservedOverhead>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `memory.hugepages`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Hugepages {
    /// Hugepage size (`2Mi` or `1Gi` on x86_64).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_size: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `memory.reservedOverhead`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ReservedOverhead {
    /// Memory added to the computed overhead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub added_overhead: Option<Quantity>,
    /// `Required` or `NotRequired` (default): raise the memlock limit to guest memory + overhead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_lock: Option<MemLock>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `reservedOverhead.memLock`.
    pub enum MemLock {
        /// Memory lock limits are raised.
        Required = "Required",
        /// Memory lock limits are left alone (default).
        NotRequired = "NotRequired",
    }
}

/// `domain.machine` (also `status.machine`, the expanded QEMU alias in effect).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Machine {
    /// QEMU machine type (`q35`, `virt`, `s390-ccw-virtio`, `pc-q35-rhel9.x`, …); defaulted per architecture.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `domain.firmware`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Firmware {
    /// SMBIOS UUID of the guest (random on a bare VMI, stable for a VM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// BIOS or EFI (mutually exclusive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootloader: Option<Bootloader>,
    /// SMBIOS serial number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Boot a kernel (and initrd) from a container image instead of a disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_boot: Option<KernelBoot>,
    /// ACPI tables (SLIC, MSDM) from Secrets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<FirmwareAcpi>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `firmware.bootloader`: exactly one of `bios` and `efi`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Bootloader {
    /// Legacy BIOS (SeaBIOS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bios: Option<Bios>,
    /// UEFI (OVMF).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub efi: Option<Efi>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `bootloader.bios`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Bios {
    /// Send BIOS output to the serial console.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_serial: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `bootloader.efi`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Efi {
    /// Secure Boot (default true when `efi` is given; requires `features.smm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// Keep the EFI variable store across restarts (backend storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `firmware.kernelBoot`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct KernelBoot {
    /// Kernel command line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_args: Option<String>,
    /// The container image holding the kernel and initrd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<KernelBootContainer>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `kernelBoot.container`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct KernelBootContainer {
    /// Image reference.
    pub image: String,
    /// Pull secret name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_secret: Option<String>,
    /// `Always`, `IfNotPresent` or `Never`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// Path of the kernel inside the image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_path: Option<String>,
    /// Path of the initrd inside the image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd_path: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// Image pull policy (Kubernetes' values).
    pub enum PullPolicy {
        /// Pull on every start.
        Always = "Always",
        /// Pull when the node lacks the image.
        IfNotPresent = "IfNotPresent",
        /// Never pull.
        Never = "Never",
    }
}

/// `firmware.acpi`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FirmwareAcpi {
    /// Volume (Secret) holding the SLIC table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slic_name_ref: Option<String>,
    /// Volume (Secret) holding the MSDM table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub msdm_name_ref: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `domain.clock`: an offset (`utc` or `timezone`) and timers.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Clock {
    /// The guest clock is UTC (plus an optional offset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utc: Option<ClockOffsetUtc>,
    /// The guest clock is in this timezone (`Europe/Rome`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Timers presented to the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timer: Option<Timer>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `clock.utc`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct ClockOffsetUtc {
    /// Offset from UTC in seconds (guest changes are then kept across reboots).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset_seconds: Option<i64>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `clock.timer`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Timer {
    /// HPET.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hpet: Option<TimerState>,
    /// KVM clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm: Option<TimerState>,
    /// PIT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pit: Option<TimerState>,
    /// RTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtc: Option<TimerState>,
    /// Hyper-V reference time counter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperv: Option<TimerState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// One timer of `clock.timer` (upstream's `HPETTimer`, `PITTimer`, `RTCTimer`, `KVMTimer`, `HypervTimer` share this
/// shape; `tickPolicy` applies to hpet/pit/rtc, `track` to rtc).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct TimerState {
    /// Whether the timer is presented to the guest (defaults to true when the timer is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
    /// What to do with missed ticks: `delay`, `catchup`, `merge` (hpet) or `discard` (hpet, pit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tick_policy: Option<TickPolicy>,
    /// What the RTC tracks: `guest` or `wall`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub track: Option<RtcTrack>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// Timer tick policies (the union of upstream's per-timer sets).
    pub enum TickPolicy {
        /// Deliver late ticks at the normal rate.
        Delay = "delay",
        /// Deliver late ticks faster to catch up.
        Catchup = "catchup",
        /// Merge late ticks into one (hpet).
        Merge = "merge",
        /// Drop late ticks (hpet, pit).
        Discard = "discard",
    }
}

string_enum! {
    /// `rtc.track`.
    pub enum RtcTrack {
        /// Tracks guest time.
        Guest = "guest",
        /// Tracks host wall-clock time.
        Wall = "wall",
    }
}

/// `domain.features`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Features {
    /// ACPI. Upstream's Go type always writes `acpi: {}` once `features` exists; absent means the same (enabled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<FeatureState>,
    /// APIC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apic: Option<FeatureApic>,
    /// Enable every Hyper-V enlightenment the host supports (not live-migratable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperv_passthrough: Option<FeatureState>,
    /// Individual Hyper-V enlightenments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperv: Option<FeatureHyperv>,
    /// System Management Mode (required by Secure Boot).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smm: Option<FeatureState>,
    /// KVM features.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm: Option<FeatureKvm>,
    /// Paravirtualised spinlocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvspinlock: Option<FeatureState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A feature switch: a present object means enabled unless `enabled: false`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureState {
    /// Enabled (defaults to true when the object is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `features.apic`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureApic {
    /// Enabled (defaults to true when the object is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Broadcast EOI suppression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_of_interrupt: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `features.kvm`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureKvm {
    /// Hide the KVM hypervisor from CPUID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `features.hyperv`: Hyper-V enlightenments (defaulting adds the ones others depend on).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureHyperv {
    /// Relaxed timing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relaxed: Option<FeatureState>,
    /// Virtual APIC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vapic: Option<FeatureState>,
    /// Spinlock retries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spinlocks: Option<FeatureSpinlocks>,
    /// Virtual processor index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpindex: Option<FeatureState>,
    /// Processor time spent running guest code and on its behalf.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<FeatureState>,
    /// Synthetic interrupt controller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synic: Option<FeatureState>,
    /// Synthetic timers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synictimer: Option<SyNicTimer>,
    /// Hypervisor reset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset: Option<FeatureState>,
    /// Hypervisor vendor id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendorid: Option<FeatureVendorId>,
    /// TSC and APIC frequency MSRs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequencies: Option<FeatureState>,
    /// Re-enlightenment notifications on migration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reenlightenment: Option<FeatureState>,
    /// TLB flush hypercalls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tlbflush: Option<TlbFlush>,
    /// IPI hypercalls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipi: Option<FeatureState>,
    /// Enlightened VMCS (nested).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evmcs: Option<FeatureState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `hyperv.spinlocks`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureSpinlocks {
    /// Enabled (defaults to true when the object is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Retries before a spinlock is reported (at least 4096, the default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spinlocks: Option<u32>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `hyperv.synictimer`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SyNicTimer {
    /// Enabled (defaults to true when the object is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Direct mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<FeatureState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `hyperv.vendorid`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct FeatureVendorId {
    /// Enabled (defaults to true when the object is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The vendor id (up to 12 characters).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendorid: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `hyperv.tlbflush`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct TlbFlush {
    /// Enabled (defaults to true when the object is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Direct TLB flush.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<FeatureState>,
    /// Extended TLB flush.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extended: Option<FeatureState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `domain.devices`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Devices {
    /// Use virtio-transitional devices (for old guests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub use_virtio_transitional: Option<bool>,
    /// Do not prepare the VMI for hotplug.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disable_hotplug: Option<bool>,
    /// Disks, each naming a volume. Every volume without a disk gets one added (defaulting).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disks: Option<Vec<Disk>>,
    /// A watchdog device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watchdog: Option<Watchdog>,
    /// Network interfaces, each naming a network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interfaces: Option<Vec<Interface>>,
    /// Input devices (tablet, keyboard).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<Input>>,
    /// Add the default pod network and interface when none is given (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoattach_pod_interface: Option<bool>,
    /// Add a VGA display and VNC (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoattach_graphics_device: Option<bool>,
    /// Add a serial console (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoattach_serial_console: Option<bool>,
    /// Log the serial console to the `guest-console-log` container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_serial_console: Option<bool>,
    /// Add a memory balloon (default true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoattach_mem_balloon: Option<bool>,
    /// Add a default input device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoattach_input_device: Option<bool>,
    /// Add a virtio-vsock device.
    #[serde(rename = "autoattachVSOCK", skip_serializing_if = "Option::is_none")]
    pub autoattach_vsock: Option<bool>,
    /// A virtio RNG device (`rng: {}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rng: Option<Marker>,
    /// One virtio-blk queue per vCPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_multi_queue: Option<bool>,
    /// One virtio-net queue per vCPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network_interface_multiqueue: Option<bool>,
    /// GPUs (device plugin or DRA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<Gpu>>,
    /// The downward-metrics virtio-serial device (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downward_metrics: Option<Marker>,
    /// Panic devices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub panic_devices: Option<Vec<PanicDevice>>,
    /// virtiofs filesystems, each naming a volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filesystems: Option<Vec<Filesystem>>,
    /// Host devices (PCI, USB, mediated; device plugin or DRA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_devices: Option<Vec<HostDevice>>,
    /// Client-side USB redirection (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_passthrough: Option<Marker>,
    /// A sound device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sound: Option<SoundDevice>,
    /// An emulated TPM (`tpm: {}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpm: Option<TpmDevice>,
    /// Video device type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video: Option<VideoDevice>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.disks[]`: a disk, CD-ROM or LUN backed by the volume of the same name. None of `disk`/`cdrom`/`lun`
/// means `disk: {}` (defaulting).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Disk {
    /// Name; must match a volume.
    pub name: String,
    /// Attach as a disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskTarget>,
    /// Attach as a LUN (PVC and DataVolume volumes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lun: Option<LunTarget>,
    /// Attach as a CD-ROM (read-only and tray closed by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cdrom: Option<CdRomTarget>,
    /// Boot order (> 0, unique across disks and interfaces); once any device has one, devices without one do not
    /// boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_order: Option<u32>,
    /// Serial number presented to the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Give the disk its own IOThread.
    #[serde(rename = "dedicatedIOThread", skip_serializing_if = "Option::is_none")]
    pub dedicated_io_thread: Option<bool>,
    /// Host page cache mode: `none`, `writethrough` or `writeback`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<DriverCache>,
    /// I/O mode: `native` or `threads`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io: Option<DriverIo>,
    /// Device tag presented to the guest through the config drive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Logical and physical block sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<BlockSize>,
    /// The disk may be shared between VMs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shareable: Option<bool>,
    /// On I/O errors: `stop` (default), `ignore`, `report` or `enospace`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_policy: Option<DiskErrorPolicy>,
    /// Track changed blocks (incremental backup).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changed_block_tracking: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// Disk bus. The default on amd64 is `sata` (`virtio` on arm64).
    pub enum DiskBus {
        /// virtio-blk.
        Virtio = "virtio",
        /// SATA (AHCI).
        Sata = "sata",
        /// virtio-scsi.
        Scsi = "scsi",
        /// USB mass storage.
        Usb = "usb",
    }
}

string_enum! {
    /// `disks[].cache`.
    pub enum DriverCache {
        /// No host page cache (O_DIRECT).
        NoCache = "none",
        /// Host page cache, writes go through.
        WriteThrough = "writethrough",
        /// Host page cache, writes are cached.
        WriteBack = "writeback",
    }
}

string_enum! {
    /// `disks[].io`.
    pub enum DriverIo {
        /// Kernel AIO.
        Native = "native",
        /// User-space thread pool.
        Threads = "threads",
    }
}

string_enum! {
    /// `disks[].errorPolicy`.
    pub enum DiskErrorPolicy {
        /// Pause the guest (default).
        Stop = "stop",
        /// Ignore the error.
        Ignore = "ignore",
        /// Report the error to the guest.
        Report = "report",
        /// Pause on ENOSPC, report otherwise.
        Enospace = "enospace",
    }
}

string_enum! {
    /// `cdrom.tray`.
    pub enum TrayState {
        /// The tray is open (no medium).
        Open = "open",
        /// The tray is closed (default).
        Closed = "closed",
    }
}

/// `disks[].disk`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DiskTarget {
    /// `virtio`, `sata`, `scsi` or `usb` (defaulted per architecture).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<DiskBus>,
    /// Read-only.
    #[serde(rename = "readonly", skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// PCI address (`0000:81:01.10`, virtio only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `disks[].lun`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct LunTarget {
    /// Bus (`scsi` in practice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<DiskBus>,
    /// Read-only.
    #[serde(rename = "readonly", skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// SCSI persistent reservation (not live-migratable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `disks[].cdrom`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CdRomTarget {
    /// Bus (defaulted per architecture).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<DiskBus>,
    /// Read-only (defaulted to true).
    #[serde(rename = "readonly", skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    /// `open` or `closed` (defaulted to closed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tray: Option<TrayState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `disks[].blockSize`: `custom` or `matchVolume`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct BlockSize {
    /// Explicit sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomBlockSize>,
    /// Take the sizes from the volume.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_volume: Option<FeatureState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `blockSize.custom`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CustomBlockSize {
    /// Logical block size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logical: Option<u64>,
    /// Physical block size in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physical: Option<u64>,
    /// Discard granularity in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discard_granularity: Option<u64>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.interfaces[]`: a guest NIC on the network of the same name, with exactly one binding (`bridge`,
/// `masquerade`, `sriov`, `passtBinding` or a `binding` plugin; `slirp`, `macvtap` and `passt` are discontinued and
/// refused by admission).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Interface {
    /// Name; must match a network.
    pub name: String,
    /// NIC model: `virtio` (default), `e1000`, `e1000e`, `igb`, `ne2k_pci`, `pcnet`, `rtl8139`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<InterfaceModel>,
    /// Bridge binding (`{}`): the guest gets the pod interface's address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bridge: Option<Marker>,
    /// Discontinued slirp binding (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slirp: Option<Marker>,
    /// Masquerade binding (`{}`): NAT from the pod address to the guest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub masquerade: Option<Marker>,
    /// SR-IOV binding (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sriov: Option<Marker>,
    /// Discontinued macvtap binding (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub macvtap: Option<Marker>,
    /// Discontinued passt binding (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passt: Option<Marker>,
    /// Passt binding (`{}`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passt_binding: Option<Marker>,
    /// A network binding plugin registered in the cluster configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding: Option<PluginBinding>,
    /// Ports forwarded to the guest (masquerade); none = all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<Port>>,
    /// Port ranges forwarded to the guest (gate PortRangesSpec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port_ranges: Option<Vec<PortRange>>,
    /// MAC address (`de:ad:00:00:be:af` or `de-ad-00-00-be-af`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// Boot order (> 0, unique across disks and interfaces).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_order: Option<u32>,
    /// PCI address (`0000:81:01.10`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// Extra DHCP options (bridge/masquerade).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dhcp_options: Option<DhcpOptions>,
    /// Device tag presented to the guest through the config drive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// ACPI index (stable guest interface names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi_index: Option<i64>,
    /// Link state: `up`, `down` or `absent` (hot-unplug).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<InterfaceState>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `interfaces[].model` (upstream's closed list).
    pub enum InterfaceModel {
        /// Intel e1000.
        E1000 = "e1000",
        /// Intel e1000e.
        E1000e = "e1000e",
        /// Intel igb.
        Igb = "igb",
        /// NE2000 PCI.
        Ne2kPci = "ne2k_pci",
        /// AMD PCnet.
        Pcnet = "pcnet",
        /// Realtek RTL8139.
        Rtl8139 = "rtl8139",
        /// virtio-net (default).
        Virtio = "virtio",
    }
}

string_enum! {
    /// `interfaces[].state`.
    pub enum InterfaceState {
        /// Link up.
        Up = "up",
        /// Link down.
        Down = "down",
        /// Hot-unplugged.
        Absent = "absent",
    }
}

/// `interfaces[].binding`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PluginBinding {
    /// Name of the binding plugin.
    pub name: String,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `interfaces[].ports[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Port {
    /// Name (IANA service name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `TCP` (default) or `UDP`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
    /// Port number.
    pub port: i32,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// Port protocol.
    pub enum Protocol {
        /// TCP (default).
        Tcp = "TCP",
        /// UDP.
        Udp = "UDP",
    }
}

/// `interfaces[].portRanges[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PortRange {
    /// `TCP` or `UDP`.
    pub protocol: Protocol,
    /// First port.
    pub start: i32,
    /// Last port.
    pub end: i32,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `interfaces[].dhcpOptions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DhcpOptions {
    /// DHCP option 67.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_file_name: Option<String>,
    /// DHCP option 66.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tftp_server_name: Option<String>,
    /// DHCP option 42.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ntp_servers: Option<Vec<String>>,
    /// Private options 224–254.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub private_options: Option<Vec<DhcpPrivateOption>>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `dhcpOptions.privateOptions[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DhcpPrivateOption {
    /// Option number (224–254).
    pub option: i64,
    /// Option value.
    pub value: String,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.inputs[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Input {
    /// Device name.
    pub name: String,
    /// `usb` (default) or `virtio`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<InputBus>,
    /// `tablet` (default) or `keyboard`. Required by upstream's schema, filled by defaulting first.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<InputType>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `inputs[].bus`.
    pub enum InputBus {
        /// USB (default).
        Usb = "usb",
        /// virtio.
        Virtio = "virtio",
    }
}

string_enum! {
    /// `inputs[].type`.
    pub enum InputType {
        /// Tablet (absolute pointer, default).
        Tablet = "tablet",
        /// Keyboard.
        Keyboard = "keyboard",
    }
}

/// `devices.watchdog`: one of `i6300esb` (amd64) or `diag288` (s390x).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Watchdog {
    /// Name.
    pub name: String,
    /// Intel 6300ESB watchdog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub i6300esb: Option<WatchdogDevice>,
    /// s390x diag288 watchdog.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diag288: Option<WatchdogDevice>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A watchdog model's settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct WatchdogDevice {
    /// `poweroff`, `reset` (amd64 default) or `shutdown`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<WatchdogAction>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// Watchdog expiry action.
    pub enum WatchdogAction {
        /// Power the guest off.
        Poweroff = "poweroff",
        /// Reset the guest.
        Reset = "reset",
        /// Shut the guest down gracefully.
        Shutdown = "shutdown",
    }
}

/// `devices.gpus[]`: a device-plugin resource (`deviceName`) or a DRA claim (`claimName` + `requestName`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Gpu {
    /// Device name in the guest.
    pub name: String,
    /// Device-plugin resource name (`nvidia.com/GP102GL_Tesla_P40`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// A `spec.resourceClaims[].name` (gate GPUsWithDRA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// The request of that claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_name: Option<String>,
    /// Device tag presented to the guest through the config drive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Fields this version does not model (e.g. `virtualGPUOptions`), kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.hostDevices[]`: a device-plugin resource (`deviceName`) or a DRA claim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct HostDevice {
    /// Device name in the guest.
    pub name: String,
    /// Device-plugin resource name (`kubevirt.io/storage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// A `spec.resourceClaims[].name` (gate HostDevicesWithDRA).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// The request of that claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_name: Option<String>,
    /// Device tag presented to the guest through the config drive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.panicDevices[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PanicDevice {
    /// `hyperv`, `isa` or `pvpanic`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<PanicDeviceModel>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `panicDevices[].model`.
    pub enum PanicDeviceModel {
        /// Hyper-V crash MSRs.
        Hyperv = "hyperv",
        /// ISA pvpanic.
        Isa = "isa",
        /// PCI pvpanic.
        Pvpanic = "pvpanic",
    }
}

/// `devices.filesystems[]`: a volume shared with the guest through virtiofs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct Filesystem {
    /// Name; must match a volume.
    pub name: String,
    /// virtiofs (`{}`; the only kind).
    pub virtiofs: Marker,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.sound`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SoundDevice {
    /// Name.
    pub name: String,
    /// `ich9` (default) or `ac97`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.tpm`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct TpmDevice {
    /// Enabled (defaults to true when the object is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Keep the TPM state across restarts (backend storage).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devices.video`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct VideoDevice {
    /// Video device type (`virtio`, `vga`, `bochs`, `ramfb`, …).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}
