//! `expand-spec`: a VM with its instancetype and preference applied to the template, as upstream's
//! `instancetype/expand` leaves it (what `virtctl expand` prints). The subresource API reads the VM (or takes it
//! from the request body) and its [`Expansion`](crate::lookup::expansion); this module is the pure step.
//!
//! Steps (upstream's order): nothing at all when the VM names neither an instancetype nor a preference; else a
//! `disk` for every volume without one, the default pod network, the instancetype and preference (a template field
//! the instancetype provides is a conflict), the VMI spec defaults, and the matchers and status references removed.

use std::collections::BTreeMap;

use crds::kubevirt::VirtualMachine;
use crds::kubevirt::instancetype::{Expansion, apply, conflict_message};

use crate::Config;

/// The VM subresource (`GET virtualmachines/{name}/expand-spec`).
pub const VM_SUBRESOURCE: &str = "expand-spec";
/// The namespaced resource a VM is `PUT` to (`namespaces/{ns}/expand-vm-spec`).
pub const SPEC_RESOURCE: &str = "expand-vm-spec";
/// Largest VM accepted in an `expand-vm-spec` body (the API server's own limit for an object).
pub const MAX_VM_BODY: usize = 3 << 20;
use crate::defaults::{add_volume_disks, default_instance_spec, set_default_network};

/// `vm` expanded with `e` under `config`; upstream's error text when the instancetype conflicts with the template
/// or the defaults cannot be applied.
pub fn expand(vm: &VirtualMachine, e: &Expansion, config: &Config) -> Result<VirtualMachine, String> {
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return Ok(vm.clone());
    }
    let mut expanded = vm.clone();
    let template = &mut expanded.spec.template;
    let spec = template.spec.get_or_insert_default();
    add_volume_disks(spec);
    set_default_network(spec, config).map_err(|e| e.to_string())?;
    let meta = template.metadata.get_or_insert_default();
    let mut annotations: BTreeMap<String, String> = meta.annotations.clone().unwrap_or_default();
    apply(spec, &mut annotations, e).map_err(|conflicts| conflict_message(&conflicts))?;
    if !annotations.is_empty() {
        meta.annotations = Some(annotations);
    }
    default_instance_spec(spec, config).map_err(|e| e.to_string())?;
    expanded.spec.instancetype = None;
    expanded.spec.preference = None;
    if let Some(status) = expanded.status.as_mut() {
        status.instancetype_ref = None;
        status.preference_ref = None;
    }
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use crds::kubevirt::instancetype::{
        Captured, CpuInstancetype, DevicePreferences, MemoryInstancetype, VirtualMachineInstancetypeSpec,
        VirtualMachinePreferenceSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::{Value, json};

    use super::*;

    fn vm(extra: Value) -> Result<VirtualMachine, String> {
        let mut v = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm-small", "namespace": "default"},
            "spec": {"runStrategy": "Halted", "template": {"spec": {
                "domain": {"devices": {}},
                "volumes": [{"name": "containerdisk", "containerDisk": {"image": "localhost:5000/guest"}}]
            }}},
            "status": {"instancetypeRef": {"name": "u1.small", "kind": "VirtualMachineClusterInstancetype"}}
        });
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    fn small() -> Expansion {
        Expansion {
            instancetype: Some(Captured {
                reference: Default::default(),
                spec: VirtualMachineInstancetypeSpec {
                    cpu: CpuInstancetype { guest: 2, ..Default::default() },
                    memory: MemoryInstancetype { guest: Quantity("256Mi".into()), ..Default::default() },
                    ..Default::default()
                },
            }),
            preference: Some(Captured {
                reference: Default::default(),
                spec: VirtualMachinePreferenceSpec {
                    devices: Some(DevicePreferences {
                        preferred_disk_bus: Some(crds::kubevirt::domain::DiskBus::Sata),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            }),
        }
    }

    fn template(vm: &VirtualMachine) -> Value {
        serde_json::to_value(&vm.spec.template.spec).unwrap_or_default()
    }

    #[test]
    fn a_vm_without_instancetype_or_preference_is_returned_as_it_is() -> Result<(), String> {
        let plain = vm(json!({"status": null}))?;
        let out = expand(&plain, &small(), &Config::default())?;
        assert_eq!(serde_json::to_value(&out).ok(), serde_json::to_value(&plain).ok());
        Ok(())
    }

    #[test]
    fn the_instancetype_and_preference_land_in_the_template_with_the_defaults() -> Result<(), String> {
        let v = vm(json!({"spec": {"instancetype": {"name": "u1.small"}, "preference": {"name": "sata"}}}))?;
        let out = expand(&v, &small(), &Config::default())?;
        let t = template(&out);
        assert_eq!(t["domain"]["cpu"]["sockets"], 2);
        assert_eq!(t["domain"]["cpu"]["cores"], 1);
        assert_eq!(t["domain"]["memory"]["guest"], "256Mi");
        // The volume got its disk, on the preference's bus; the pod network and its interface were added.
        assert_eq!(t["domain"]["devices"]["disks"][0]["name"], "containerdisk");
        assert_eq!(t["domain"]["devices"]["disks"][0]["disk"]["bus"], "sata");
        assert_eq!(t["networks"][0]["pod"], json!({}));
        assert_eq!(t["domain"]["devices"]["interfaces"][0]["name"], "default");
        // Defaults as the VMI mutator sets them.
        assert!(t["domain"]["machine"]["type"].is_string(), "{t}");
        assert_eq!(out.spec.instancetype, None);
        assert_eq!(out.spec.preference, None);
        assert_eq!(out.metadata, v.metadata, "metadata untouched");
        let status = out.status.ok_or("the status is kept")?;
        assert_eq!((status.instancetype_ref, status.preference_ref), (None, None));
        Ok(())
    }

    #[test]
    fn a_template_field_the_instancetype_provides_is_upstreams_conflict() -> Result<(), String> {
        let v = vm(json!({"spec": {"instancetype": {"name": "u1.small"},
                                   "template": {"spec": {"domain": {"cpu": {"sockets": 4}}}}}}))?;
        assert_eq!(
            expand(&v, &small(), &Config::default()).err().as_deref(),
            Some("VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type")
        );
        Ok(())
    }
}
