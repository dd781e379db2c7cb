//! `instancetype.kubevirt.io/v1beta1`: instancetypes (the resources a VM gets: vCPUs, memory) and preferences (the
//! defaults a VM's unset fields get: disk bus, interface model, CPU topology, machine type), namespaced and
//! cluster-wide (contract §1.1 `spec.instancetype` / `spec.preference`, §11).
//!
//! Only the fields upstream's examples and common VMs use are typed; every other field is kept in `extra` and
//! preserved by the CRD schema.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::domain::{DiskBus, DiskTarget, InterfaceModel, Machine};
use super::vm::InstancetypeStatusRef;
use super::vmi::VirtualMachineInstanceSpec;
use super::wire::{Extra, string_enum};

/// `spec.cpu` of an instancetype.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CpuInstancetype {
    /// vCPUs of the guest (spread over sockets, cores and threads by the preference's topology).
    pub guest: u32,
    /// CPU model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.memory` of an instancetype.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MemoryInstancetype {
    /// Guest memory.
    pub guest: Quantity,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.devices` of a preference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct DevicePreferences {
    /// Bus of disks that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_disk_bus: Option<DiskBus>,
    /// Bus of CD-ROMs that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_cdrom_bus: Option<DiskBus>,
    /// Bus of LUNs that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_lun_bus: Option<DiskBus>,
    /// Model of interfaces that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_interface_model: Option<InterfaceModel>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

string_enum! {
    /// `spec.cpu.preferredCPUTopology`: where an instancetype's vCPUs go.
    pub enum PreferredCpuTopology {
        /// All vCPUs as sockets (the default).
        Sockets = "sockets",
        /// All vCPUs as cores of one socket.
        Cores = "cores",
        /// All vCPUs as threads of one core.
        Threads = "threads",
        /// Spread (cores × threads per socket as the preference says).
        Spread = "spread",
        /// Any.
        Any = "any",
    }
}

/// `spec.cpu` of a preference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct CpuPreferences {
    /// Where the vCPUs go (default `sockets`).
    #[serde(rename = "preferredCPUTopology", skip_serializing_if = "Option::is_none")]
    pub preferred_cpu_topology: Option<PreferredCpuTopology>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.machine` of a preference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct MachinePreferences {
    /// Machine type of VMs that name none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preferred_machine_type: Option<String>,
    /// Fields this version does not model, kept verbatim.
    #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
    #[schemars(skip)]
    pub extra: Extra,
}

/// One `instancetype.kubevirt.io/v1beta1` kind: the CRD attributes every kind shares, the spec's `fields`, and the
/// unknown fields kept verbatim. The namespaced and the cluster-wide kind get one spec type each (the `kube`
/// derive makes one kind per struct; upstream's two kinds share a spec).
macro_rules! v1beta1_kind {
    ($(#[$doc:meta])* $spec:ident, $kind:literal, $plural:literal, $singular:literal, [$($short:literal),*],
     $($scope:ident)? { $($fields:tt)* }) => {
        $(#[$doc])*
        #[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
        #[kube(
            group = "instancetype.kubevirt.io",
            version = "v1beta1",
            kind = $kind,
            plural = $plural,
            singular = $singular,
            $($scope,)?
            $(shortname = $short,)*
            category = "all"
        )]
        #[serde(rename_all = "camelCase")]
        #[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
        pub struct $spec {
            $($fields)*
            /// Fields this version does not model, kept verbatim.
            #[serde(flatten, default, skip_serializing_if = "Extra::is_empty")]
            #[schemars(skip)]
            pub extra: Extra,
        }
    };
}

/// An instancetype kind (namespaced or cluster-wide): what the VM gets.
macro_rules! instancetype_kinds {
    ($(#[$doc:meta])* $spec:ident, $kind:literal, $plural:literal, $singular:literal, [$($short:literal),*], $($scope:ident)?) => {
        v1beta1_kind!($(#[$doc])* $spec, $kind, $plural, $singular, [$($short),*], $($scope)? {
            /// vCPUs.
            pub cpu: CpuInstancetype,
            /// Memory.
            pub memory: MemoryInstancetype,
            /// Annotations added to the VMI.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub annotations: Option<BTreeMap<String, String>>,
            /// Node selector of the VMI.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub node_selector: Option<BTreeMap<String, String>>,
            /// Scheduler of the VMI.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub scheduler_name: Option<String>,
        });
    };
}

/// A preference kind (namespaced or cluster-wide): defaults for what the VM leaves unset.
macro_rules! preference_kinds {
    ($(#[$doc:meta])* $spec:ident, $kind:literal, $plural:literal, $singular:literal, [$($short:literal),*], $($scope:ident)?) => {
        v1beta1_kind!($(#[$doc])* $spec, $kind, $plural, $singular, [$($short),*], $($scope)? {
            /// Device defaults.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub devices: Option<DevicePreferences>,
            /// CPU topology.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub cpu: Option<CpuPreferences>,
            /// Machine type.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub machine: Option<MachinePreferences>,
        });
    };
}

instancetype_kinds!(
    /// A namespaced instancetype.
    VirtualMachineInstancetypeSpec, "VirtualMachineInstancetype", "virtualmachineinstancetypes",
    "virtualmachineinstancetype", ["vminstancetype", "vminstancetypes", "vmf", "vmfs"], namespaced
);
instancetype_kinds!(
    /// A cluster-wide instancetype.
    VirtualMachineClusterInstancetypeSpec, "VirtualMachineClusterInstancetype", "virtualmachineclusterinstancetypes",
    "virtualmachineclusterinstancetype", ["vmclusterinstancetype", "vmclusterinstancetypes", "vmcf", "vmcfs"],
);
preference_kinds!(
    /// A namespaced preference.
    VirtualMachinePreferenceSpec, "VirtualMachinePreference", "virtualmachinepreferences",
    "virtualmachinepreference", ["vmpref", "vmprefs", "vmp", "vmps"], namespaced
);
preference_kinds!(
    /// A cluster-wide preference.
    VirtualMachineClusterPreferenceSpec, "VirtualMachineClusterPreference", "virtualmachineclusterpreferences",
    "virtualmachineclusterpreference", ["vmclusterpref", "vmclusterprefs", "vmcp", "vmcps"],
);

/// The kind names a VM's `spec.instancetype.kind` / `spec.preference.kind` may carry.
pub mod kind {
    /// Namespaced instancetype (the default kind).
    pub const INSTANCETYPE: &str = "VirtualMachineInstancetype";
    /// Cluster-wide instancetype.
    pub const CLUSTER_INSTANCETYPE: &str = "VirtualMachineClusterInstancetype";
    /// Namespaced preference.
    pub const PREFERENCE: &str = "VirtualMachinePreference";
    /// Cluster-wide preference (the default kind).
    pub const CLUSTER_PREFERENCE: &str = "VirtualMachineClusterPreference";
}

impl From<VirtualMachineClusterInstancetypeSpec> for VirtualMachineInstancetypeSpec {
    fn from(c: VirtualMachineClusterInstancetypeSpec) -> Self {
        VirtualMachineInstancetypeSpec {
            cpu: c.cpu,
            memory: c.memory,
            annotations: c.annotations,
            node_selector: c.node_selector,
            scheduler_name: c.scheduler_name,
            extra: c.extra,
        }
    }
}

impl From<VirtualMachineClusterPreferenceSpec> for VirtualMachinePreferenceSpec {
    fn from(c: VirtualMachineClusterPreferenceSpec) -> Self {
        VirtualMachinePreferenceSpec { devices: c.devices, cpu: c.cpu, machine: c.machine, extra: c.extra }
    }
}

/// A spec captured in a ControllerRevision (the VM controller) or read live (admission).
#[derive(Debug, Clone, PartialEq)]
pub struct Captured<S> {
    /// What the VM's status records (name, kind, revision).
    pub reference: InstancetypeStatusRef,
    /// The captured spec.
    pub spec: S,
}

/// The instancetype and preference a VM's next VMI gets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expansion {
    /// The instancetype, if the VM names one.
    pub instancetype: Option<Captured<VirtualMachineInstancetypeSpec>>,
    /// The preference, if the VM names one.
    pub preference: Option<Captured<VirtualMachinePreferenceSpec>>,
}

/// The ControllerRevision that holds the spec matcher `m` (of kind `kind_name`) names: `m.revisionName`, else the
/// one a VM's status `recorded` for the same name and kind.
pub fn captured_revision(
    m: &super::vm::Matcher,
    kind_name: &str,
    recorded: Option<&InstancetypeStatusRef>,
) -> Option<String> {
    let name = m.name.as_deref().unwrap_or_default();
    m.revision_name.clone().or_else(|| {
        recorded
            .filter(|r| r.name.as_deref() == Some(name) && r.kind.as_deref() == Some(kind_name))
            .and_then(|r| r.controller_revision_ref.as_ref().map(|c| c.name.clone()))
    })
}

/// Upstream's conflict message for template fields an instancetype provides.
pub fn conflict_message(fields: &[String]) -> String {
    format!("VM field(s) {} conflicts with selected instance type", fields.join(", "))
}

/// Applies `e` to `spec` (and the VMI's `annotations`); the conflicting template fields when the instancetype
/// provides what the template sets.
pub fn apply(
    spec: &mut VirtualMachineInstanceSpec,
    annotations: &mut BTreeMap<String, String>,
    e: &Expansion,
) -> std::result::Result<(), Vec<String>> {
    let preference = e.preference.as_ref().map(|p| &p.spec);
    if let Some(it) = e.instancetype.as_ref().map(|i| &i.spec) {
        let field = |f: &str| format!("spec.template.spec.domain.{f}");
        let mut conflicts = Vec::new();
        if let Some(cpu) = &spec.domain.cpu {
            for (set, name) in [(cpu.sockets, "cpu.sockets"), (cpu.cores, "cpu.cores"), (cpu.threads, "cpu.threads")] {
                if set.is_some() {
                    conflicts.push(field(name));
                }
            }
        }
        if spec.domain.memory.as_ref().is_some_and(|m| m.guest.is_some()) {
            conflicts.push(field("memory.guest"));
        }
        if !conflicts.is_empty() {
            return Err(conflicts);
        }
        let topology = preference
            .and_then(|p| p.cpu.as_ref())
            .and_then(|c| c.preferred_cpu_topology.clone())
            .unwrap_or(PreferredCpuTopology::Sockets);
        let cpu = spec.domain.cpu.get_or_insert_default();
        let n = it.cpu.guest;
        let (sockets, cores, threads) = match topology {
            PreferredCpuTopology::Cores => (1, n, 1),
            PreferredCpuTopology::Threads => (1, 1, n),
            _ => (n, 1, 1),
        };
        (cpu.sockets, cpu.cores, cpu.threads) = (Some(sockets), Some(cores), Some(threads));
        if it.cpu.model.is_some() && cpu.model.is_none() {
            cpu.model.clone_from(&it.cpu.model);
        }
        spec.domain.memory.get_or_insert_default().guest = Some(it.memory.guest.clone());
        for (k, v) in it.annotations.iter().flatten() {
            annotations.entry(k.clone()).or_insert_with(|| v.clone());
        }
        if spec.node_selector.is_none() {
            spec.node_selector.clone_from(&it.node_selector);
        }
        if spec.scheduler_name.is_none() {
            spec.scheduler_name.clone_from(&it.scheduler_name);
        }
    }
    if let Some(p) = preference {
        if let Some(d) = &p.devices {
            for disk in spec.domain.devices.disks.iter_mut().flatten() {
                match (&mut disk.disk, &mut disk.cdrom, &mut disk.lun) {
                    (Some(t), _, _) if t.bus.is_none() => t.bus.clone_from(&d.preferred_disk_bus),
                    (_, Some(t), _) if t.bus.is_none() => t.bus.clone_from(&d.preferred_cdrom_bus),
                    (_, _, Some(t)) if t.bus.is_none() => t.bus.clone_from(&d.preferred_lun_bus),
                    (None, None, None) if d.preferred_disk_bus.is_some() => {
                        disk.disk = Some(DiskTarget { bus: d.preferred_disk_bus.clone(), ..Default::default() });
                    }
                    _ => {}
                }
            }
            for iface in spec.domain.devices.interfaces.iter_mut().flatten() {
                if iface.model.is_none() {
                    iface.model.clone_from(&d.preferred_interface_model);
                }
            }
        }
        if let Some(machine) = p.machine.as_ref().and_then(|m| m.preferred_machine_type.clone())
            && spec.domain.machine.as_ref().and_then(|m| m.type_.as_deref()).is_none_or(str::is_empty)
        {
            spec.domain.machine = Some(Machine { type_: Some(machine), ..Default::default() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::domain::{Cpu, Disk, Interface, Memory};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn csmall(guest: u32) -> Captured<VirtualMachineInstancetypeSpec> {
        Captured {
            reference: InstancetypeStatusRef::default(),
            spec: VirtualMachineInstancetypeSpec {
                cpu: CpuInstancetype { guest, ..Default::default() },
                memory: MemoryInstancetype { guest: Quantity("128Mi".into()), ..Default::default() },
                annotations: Some([("from".to_owned(), "instancetype".to_owned())].into()),
                ..Default::default()
            },
        }
    }

    fn virtio(topology: Option<PreferredCpuTopology>) -> Captured<VirtualMachinePreferenceSpec> {
        Captured {
            reference: InstancetypeStatusRef::default(),
            spec: VirtualMachinePreferenceSpec {
                devices: Some(DevicePreferences {
                    preferred_disk_bus: Some(DiskBus::Virtio),
                    preferred_interface_model: Some(InterfaceModel::Virtio),
                    ..Default::default()
                }),
                cpu: topology.map(|t| CpuPreferences { preferred_cpu_topology: Some(t), ..Default::default() }),
                ..Default::default()
            },
        }
    }

    #[test]
    fn the_instancetype_provides_cpu_and_memory_and_conflicts_with_the_template() {
        let e = Expansion { instancetype: Some(csmall(4)), preference: None };
        let mut spec = VirtualMachineInstanceSpec::default();
        let mut ann = BTreeMap::new();
        assert_eq!(apply(&mut spec, &mut ann, &e), Ok(()));
        let cpu = spec.domain.cpu.clone().unwrap_or_default();
        assert_eq!((cpu.sockets, cpu.cores, cpu.threads), (Some(4), Some(1), Some(1)));
        assert_eq!(spec.domain.memory.and_then(|m| m.guest), Some(Quantity("128Mi".into())));
        assert_eq!(ann.get("from").map(String::as_str), Some("instancetype"));
        // Upstream's examples set memory.guest besides the instancetype: refused.
        let mut spec = VirtualMachineInstanceSpec::default();
        spec.domain.memory = Some(Memory { guest: Some(Quantity("128Mi".into())), ..Default::default() });
        spec.domain.cpu = Some(Cpu { cores: Some(2), ..Default::default() });
        let conflicts = apply(&mut spec, &mut ann, &e).err().unwrap_or_default();
        assert_eq!(
            conflict_message(&conflicts),
            "VM field(s) spec.template.spec.domain.cpu.cores, spec.template.spec.domain.memory.guest conflicts with selected instance type"
        );
    }

    #[test]
    fn preferences_fill_only_what_is_unset() {
        let e =
            Expansion { instancetype: Some(csmall(2)), preference: Some(virtio(Some(PreferredCpuTopology::Cores))) };
        let mut spec = VirtualMachineInstanceSpec::default();
        spec.domain.devices.disks = Some(vec![
            Disk { name: "a".into(), disk: Some(DiskTarget::default()), ..Default::default() },
            Disk { name: "b".into(), ..Default::default() },
            Disk {
                name: "c".into(),
                disk: Some(DiskTarget { bus: Some(DiskBus::Sata), ..Default::default() }),
                ..Default::default()
            },
        ]);
        spec.domain.devices.interfaces = Some(vec![Interface { name: "default".into(), ..Default::default() }]);
        apply(&mut spec, &mut BTreeMap::new(), &e).unwrap_or_else(|c| panic!("{c:?}"));
        let buses: Vec<Option<DiskBus>> =
            spec.domain.devices.disks.iter().flatten().map(|d| d.disk.as_ref().and_then(|t| t.bus.clone())).collect();
        assert_eq!(buses, [Some(DiskBus::Virtio), Some(DiskBus::Virtio), Some(DiskBus::Sata)]);
        let iface = &spec.domain.devices.interfaces.clone().unwrap_or_default()[0];
        assert_eq!(iface.model, Some(InterfaceModel::Virtio));
        let cpu = spec.domain.cpu.clone().unwrap_or_default();
        assert_eq!((cpu.sockets, cpu.cores, cpu.threads), (Some(1), Some(2), Some(1)), "preferred topology: cores");
    }
}
