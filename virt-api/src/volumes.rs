//! `PUT virtualmachine[instance]s/{name}/addvolume|removevolume` as upstream's virt-api answers them
//! (`pkg/virt-api/rest/volumes.go`, contract §7.5, §8), pure: the options and the VM or VMI in → the merge patch
//! of its volumes and disks, or the refusal with upstream's status code and text. [`crate::subresources`] reads
//! the object and sends the patch (as virt-api; the user needs `update virtualmachine[instance]s/addvolume`).
//!
//! ```text
//! gate DeclarativeHotplugVolumes off ─► 400 "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate …"
//! no body ─► 400; not JSON ─► 400 "Can not unmarshal Request body to struct, error: …"
//! AddVolumeOptions without name / disk / volumeSource ─► 400; RemoveVolumeOptions without name ─► 400
//! VM:  the template's volumes and disks ─► verify (409 texts) ─► the template patched (the VM controller hotplugs
//!      it into the running VMI: declarative hotplug)
//! VMI: owned by a VM ─► 400 "VMI ns/name is owned by a VM"; not Running ─► 409 "VMI is not running";
//!      verify ─► the VMI's spec patched (the VMI controller and node agent attach it)
//! the patch carries the resourceVersion read (a concurrent change: 409 from the API server); dryRun honoured
//! ─► 202, empty body
//! ```
//!
//! The deprecated `HotplugVolumes` gate's other path (requests queued in the VM's `status.volumeRequests`) is not
//! served: the VM path always edits the template, as upstream does with only `DeclarativeHotplugVolumes`.

use crds::kubevirt::domain::{Disk, DiskBus};
use crds::kubevirt::vmi::VirtualMachineInstanceSpec;
use crds::kubevirt::volume::{DataVolumeSource, PersistentVolumeClaimVolumeSource, Volume};
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstancePhase};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::lifecycle::Refusal;

/// The add subresource's name.
pub const ADD: &str = "addvolume";
/// The remove subresource's name.
pub const REMOVE: &str = "removevolume";
/// Upstream's refusal while neither hotplug gate is on.
pub const NOT_ENABLED: &str = "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate to use this API.";
/// Upstream's refusal of an empty body.
pub const NO_BODY: &str = "Request with no body, a new name is expected as the request body";

/// `HotplugVolumeSource`: the claim to attach.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HotplugVolumeSource {
    /// A PVC.
    #[serde(default)]
    pub persistent_volume_claim: Option<PersistentVolumeClaimVolumeSource>,
    /// A DataVolume.
    #[serde(default)]
    pub data_volume: Option<DataVolumeSource>,
}

/// Upstream's `AddVolumeOptions` (the add request's body).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddVolumeOptions {
    /// The volume's (and disk's) name.
    #[serde(default)]
    pub name: String,
    /// How the guest sees it (its name is the volume's, whatever the body says).
    #[serde(default, deserialize_with = "disk_without_name")]
    pub disk: Option<Disk>,
    /// The claim.
    #[serde(default)]
    pub volume_source: Option<HotplugVolumeSource>,
    /// `["All"]`: validate and answer, change nothing.
    #[serde(default)]
    pub dry_run: Option<Vec<String>>,
}

/// A disk whose `name` may be missing (Go's decoder leaves it empty; upstream overwrites it with the volume's).
fn disk_without_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Disk>, D::Error> {
    let Some(mut v) = Option::<Value>::deserialize(d)? else { return Ok(None) };
    if let Value::Object(m) = &mut v {
        m.entry("name").or_insert_with(|| Value::String(String::new()));
    }
    serde_json::from_value(v).map(Some).map_err(serde::de::Error::custom)
}

/// Upstream's `RemoveVolumeOptions` (the remove request's body).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveVolumeOptions {
    /// The volume's name (or its claim's).
    #[serde(default)]
    pub name: String,
    /// `["All"]`: validate and answer, change nothing.
    #[serde(default)]
    pub dry_run: Option<Vec<String>>,
}

/// One volume request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// Attach.
    Add(Box<AddVolumeOptions>),
    /// Detach.
    Remove(RemoveVolumeOptions),
}

impl Request {
    /// Parses the body of `subresource` ([`ADD`] or [`REMOVE`]) and checks upstream's required fields.
    pub fn parse(subresource: &str, body: &[u8]) -> Result<Request, Refusal> {
        let unmarshal = |e: serde_json::Error| {
            Refusal::bad_request(format!("Can not unmarshal Request body to struct, error: {e}"))
        };
        if subresource == ADD {
            let o: AddVolumeOptions = serde_json::from_slice(body).map_err(unmarshal)?;
            if o.name.is_empty() {
                return Err(Refusal::bad_request("AddVolumeOptions requires name to be set"));
            }
            if o.disk.is_none() {
                return Err(Refusal::bad_request("AddVolumeOptions requires disk to not be nil"));
            }
            if o.volume_source.is_none() {
                return Err(Refusal::bad_request("AddVolumeOptions requires VolumeSource to not be nil"));
            }
            // Upstream v1.5's rule (v1.6 also allows virtio): the guests here get hotplugged disks on the
            // virtio-scsi controller every domain has, no PCIe hotplug ports are reserved for virtio disks.
            let disk = o.disk.as_ref();
            let bus = disk.and_then(|d| {
                d.disk.as_ref().and_then(|t| t.bus.clone()).or_else(|| d.lun.as_ref().and_then(|t| t.bus.clone()))
            });
            if disk.is_some_and(|d| d.cdrom.is_some()) || bus.is_some_and(|b| b != DiskBus::Scsi) {
                return Err(Refusal::bad_request(format!("hotplugged Disk {} does not use a scsi bus", o.name)));
            }
            Ok(Request::Add(Box::new(o)))
        } else {
            let o: RemoveVolumeOptions = serde_json::from_slice(body).map_err(unmarshal)?;
            if o.name.is_empty() {
                return Err(Refusal::bad_request("RemoveVolumeOptions requires name to be set"));
            }
            Ok(Request::Remove(o))
        }
    }

    /// Whether it asks for a dry run (`dryRun[0] == "All"`, as upstream reads it).
    pub fn dry_run(&self) -> bool {
        let d = match self {
            Request::Add(o) => o.dry_run.as_deref(),
            Request::Remove(o) => o.dry_run.as_deref(),
        };
        d.and_then(<[String]>::first).is_some_and(|f| f == "All")
    }

    /// The volume's name.
    pub fn name(&self) -> &str {
        match self {
            Request::Add(o) => &o.name,
            Request::Remove(o) => &o.name,
        }
    }
}

fn source_name(v: &Volume) -> Option<&str> {
    v.data_volume
        .as_ref()
        .map(|d| d.name.as_str())
        .or(v.persistent_volume_claim.as_ref().map(|p| p.claim_name.as_str()))
}

fn hotpluggable(v: &Volume) -> bool {
    v.data_volume.as_ref().is_some_and(|d| d.hotpluggable == Some(true))
        || v.persistent_volume_claim.as_ref().is_some_and(|p| p.hotpluggable == Some(true))
}

/// Upstream's `verifyVolumeOption`: the reason (for a 409) when `request` does not fit `volumes`.
fn verify(volumes: &[Volume], request: &Request) -> Result<(), String> {
    match request {
        Request::Add(o) => {
            let src = o.volume_source.as_ref();
            let wanted = src
                .and_then(|s| s.data_volume.as_ref().map(|d| d.name.clone()))
                .or_else(|| src.and_then(|s| s.persistent_volume_claim.as_ref().map(|p| p.claim_name.clone())))
                .unwrap_or_default();
            for v in volumes {
                if v.name == o.name {
                    return Err(format!(
                        "Unable to add volume [{}] because volume with that name already exists",
                        o.name
                    ));
                }
                if source_name(v) == Some(wanted.as_str()) {
                    return Err(format!("Unable to add volume source [{wanted}] because it already exists"));
                }
            }
            Ok(())
        }
        Request::Remove(o) => {
            let found = volumes.iter().find(|v| v.name == o.name || source_name(v) == Some(o.name.as_str()));
            match found {
                Some(v) if !hotpluggable(v) => {
                    Err(format!("Unable to remove volume [{}] because it is not hotpluggable", v.name))
                }
                Some(_) => Ok(()),
                None => Err(format!("Unable to remove volume [{}] because it does not exist", o.name)),
            }
        }
    }
}

/// Upstream's `ApplyVolumeRequestOnVMISpec`: `spec` with the request applied.
pub fn apply(spec: &VirtualMachineInstanceSpec, request: &Request) -> VirtualMachineInstanceSpec {
    let mut spec = spec.clone();
    match request {
        Request::Add(o) => {
            let volumes = spec.volumes.get_or_insert_with(Vec::new);
            if volumes.iter().any(|v| v.name == o.name) {
                return spec;
            }
            let mut volume = Volume { name: o.name.clone(), ..Volume::default() };
            let src = o.volume_source.clone().unwrap_or_default();
            if let Some(mut p) = src.persistent_volume_claim {
                p.hotpluggable = Some(true);
                volume.persistent_volume_claim = Some(p);
            } else if let Some(mut d) = src.data_volume {
                d.hotpluggable = Some(true);
                volume.data_volume = Some(d);
            }
            volumes.push(volume);
            if let Some(disk) = &o.disk {
                let mut disk = disk.clone();
                disk.name = o.name.clone();
                spec.domain.devices.disks.get_or_insert_with(Vec::new).push(disk);
            }
        }
        Request::Remove(o) => {
            if let Some(v) = spec.volumes.as_mut() {
                v.retain(|v| v.name != o.name);
            }
            if let Some(d) = spec.domain.devices.disks.as_mut() {
                d.retain(|d| d.name != o.name);
            }
        }
    }
    spec
}

/// The merge patch replacing the volumes and disks of `spec` (at `/spec` of a VMI, `/spec/template/spec` of a
/// VM) by those of `next`, guarded by `resource_version`.
fn patch(resource_version: Option<&str>, vm: bool, next: &VirtualMachineInstanceSpec) -> Value {
    let lists = json!({
        "volumes": next.volumes.clone().unwrap_or_default(),
        "domain": {"devices": {"disks": next.domain.devices.disks.clone().unwrap_or_default()}},
    });
    let spec = if vm { json!({"template": {"spec": lists}}) } else { lists };
    json!({"metadata": {"resourceVersion": resource_version}, "spec": spec})
}

/// Plans `request` on VM `vm` (its template; the VM controller hotplugs the change into the running VMI).
pub fn plan_vm(vm: &VirtualMachine, request: &Request) -> Result<Value, Refusal> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let spec = vm.spec.template.spec.clone().unwrap_or_default();
    verify(spec.volumes.as_deref().unwrap_or_default(), request)
        .map_err(|why| Refusal::conflict_on("virtualmachine", &name, &why))?;
    Ok(patch(vm.metadata.resource_version.as_deref(), true, &apply(&spec, request)))
}

/// Plans `request` on the VMI `vmi` (not owned by a VM, running).
pub fn plan_vmi(vmi: &VirtualMachineInstance, request: &Request) -> Result<Value, Refusal> {
    let name = vmi.metadata.name.clone().unwrap_or_default();
    let ns = vmi.metadata.namespace.clone().unwrap_or_default();
    let owned_by_vm = vmi
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "VirtualMachine" && o.controller == Some(true));
    if owned_by_vm {
        return Err(Refusal::bad_request(format!("VMI {ns}/{name} is owned by a VM")));
    }
    if vmi.phase() != VirtualMachineInstancePhase::Running {
        return Err(Refusal::conflict_on("virtualmachineinstance", &name, "VMI is not running"));
    }
    verify(vmi.spec.volumes.as_deref().unwrap_or_default(), request)
        .map_err(|why| Refusal::conflict_on("virtualmachineinstance", &name, &why))?;
    Ok(patch(vmi.metadata.resource_version.as_deref(), false, &apply(&vmi.spec, request)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(owned: bool, phase: &str) -> VirtualMachineInstance {
        let mut v = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns", "resourceVersion": "9"},
            "spec": {"domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
                     "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root-pvc"}},
                                 {"name": "hp", "dataVolume": {"name": "hp-dv", "hotpluggable": true}}]},
            "status": {"phase": phase}});
        if owned {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "name": "vm1", "uid": "u", "controller": true}]);
        }
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn add(body: Value) -> Result<Request, Refusal> {
        Request::parse(ADD, body.to_string().as_bytes())
    }

    #[test]
    fn bodies_are_checked_as_upstream() {
        let cases = [
            (json!({}), "AddVolumeOptions requires name to be set"),
            (json!({"name": "x"}), "AddVolumeOptions requires disk to not be nil"),
            (json!({"name": "x", "disk": {}}), "AddVolumeOptions requires VolumeSource to not be nil"),
        ];
        for (body, message) in cases {
            let r = add(body).err().map(|r| (r.code, r.message));
            assert_eq!(r, Some((400, message.to_owned())));
        }
        let r = Request::parse(REMOVE, b"{}").err().map(|r| r.message);
        assert_eq!(r.as_deref(), Some("RemoveVolumeOptions requires name to be set"));
        let r = Request::parse(ADD, b"[1]").err().map(|r| r.message).unwrap_or_default();
        assert!(r.starts_with("Can not unmarshal Request body to struct, error: "), "{r}");
        let dry = add(json!({"name": "x", "disk": {}, "volumeSource": {}, "dryRun": ["All"]}));
        assert!(dry.is_ok_and(|r| r.dry_run()));
    }

    #[test]
    fn a_vmi_gets_the_volume_and_disk_appended_hotpluggable() {
        let r = add(json!({"name": "data", "disk": {"disk": {"bus": "scsi"}, "serial": "s1"},
            "volumeSource": {"persistentVolumeClaim": {"claimName": "data-pvc"}}}))
        .unwrap_or_else(|e| panic!("{}", e.message));
        let p = plan_vmi(&vmi(false, "Running"), &r).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(p["metadata"]["resourceVersion"], "9");
        assert_eq!(
            p["spec"]["volumes"][2],
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc", "hotpluggable": true}})
        );
        assert_eq!(
            p["spec"]["domain"]["devices"]["disks"][1],
            json!({"name": "data", "disk": {"bus": "scsi"}, "serial": "s1"})
        );
        let remove = Request::parse(REMOVE, br#"{"name": "hp"}"#).unwrap_or_else(|e| panic!("{}", e.message));
        let p = plan_vmi(&vmi(false, "Running"), &remove).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(p["spec"]["volumes"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn refusals_are_upstreams() {
        let r = add(json!({"name": "data", "disk": {}, "volumeSource": {"dataVolume": {"name": "d"}}}))
            .unwrap_or_else(|e| panic!("{}", e.message));
        let msg = |res: Result<Value, Refusal>| res.err().map(|r| (r.code, r.message));
        assert_eq!(msg(plan_vmi(&vmi(true, "Running"), &r)), Some((400, "VMI ns/vm1 is owned by a VM".into())));
        assert_eq!(
            msg(plan_vmi(&vmi(false, "Scheduled"), &r)),
            Some((
                409,
                "Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vm1\": VMI is not running"
                    .into()
            ))
        );
        let clash =
            |body: Value| plan_vmi(&vmi(false, "Running"), &add(body).unwrap_or_else(|e| panic!("{}", e.message)));
        let m = msg(clash(json!({"name": "root", "disk": {}, "volumeSource": {"dataVolume": {"name": "d"}}})));
        assert!(m.is_some_and(|(c, m)| c == 409
            && m.ends_with("Unable to add volume [root] because volume with that name already exists")));
        let m = msg(clash(
            json!({"name": "n", "disk": {}, "volumeSource": {"persistentVolumeClaim": {"claimName": "root-pvc"}}}),
        ));
        assert!(
            m.is_some_and(|(_, m)| m.ends_with("Unable to add volume source [root-pvc] because it already exists"))
        );
        let remove = |name: &str| {
            let r = Request::parse(REMOVE, json!({"name": name}).to_string().as_bytes())
                .unwrap_or_else(|e| panic!("{}", e.message));
            msg(plan_vmi(&vmi(false, "Running"), &r))
        };
        assert!(
            remove("root")
                .is_some_and(|(_, m)| m.ends_with("Unable to remove volume [root] because it is not hotpluggable"))
        );
        assert!(
            remove("nope")
                .is_some_and(|(_, m)| m.ends_with("Unable to remove volume [nope] because it does not exist"))
        );
        assert_eq!(remove("hp-dv"), None, "by claim name too");
    }

    #[test]
    fn a_vm_gets_its_template_patched() {
        let vm: VirtualMachine =
            serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "ns", "resourceVersion": "3"},
            "spec": {"template": {"spec": {"domain": {"devices": {}}}}}}))
            .unwrap_or_else(|e| panic!("{e}"));
        let r = add(
            json!({"name": "data", "disk": {"disk": {"bus": "scsi"}}, "volumeSource": {"dataVolume": {"name": "dv"}}}),
        )
        .unwrap_or_else(|e| panic!("{}", e.message));
        let p = plan_vm(&vm, &r).unwrap_or_else(|e| panic!("{}", e.message));
        assert_eq!(
            p["spec"]["template"]["spec"]["volumes"],
            json!([{"name": "data", "dataVolume": {"name": "dv", "hotpluggable": true}}])
        );
        assert_eq!(
            p["spec"]["template"]["spec"]["domain"]["devices"]["disks"],
            json!([{"name": "data", "disk": {"bus": "scsi"}}])
        );
        assert_eq!(p["metadata"]["resourceVersion"], "3");
    }
}
