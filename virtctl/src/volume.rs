//! `virtctl addvolume VMI` and `virtctl removevolume VMI` with upstream virtctl's flags, output and errors
//! (upstream v1.8 `pkg/virtctl/vm/add_volume.go`, `remove_volume.go`; contract §7.5, §8):
//!
//! ```text
//! addvolume VMI --volume-name=V [--serial=S] [--cache=none|writethrough|writeback] [--persist] [--dry-run]
//!               [--disk-type=disk|lun] [--bus=scsi|virtio]
//!   V is a DataVolume, else a PVC (else "error adding volume, Volume V is not a DataVolume or PersistentVolumeClaim")
//!   PUT subresources.kubevirt.io/v1 …/virtualmachines/VMI/addvolume (the VM's template, so its running VMI too);
//!   the VM not found (404): …/virtualmachineinstances/VMI/addvolume (a VMI of its own); --persist: no effect
//!   body AddVolumeOptions{name, disk{disk|lun{bus}, serial (default V), cache}, volumeSource, dryRun}
//!   ─► "Successfully submitted add volume request to VM VMI for volume V" | "error adding volume, <message>"
//! removevolume VMI --volume-name=V [--persist] [--dry-run]
//!   ─► "Successfully submitted remove volume request to VM VMI for volume V" | "error removing volume, <message>"
//! ```
//!
//! A request refused because the object changed meanwhile (409) is sent again, at most 15 times, as upstream
//! retries its concurrent-change error.

use contracts::kubevirt::consts::{SUBRESOURCES_GROUP, VERSION};
use crds::cdi::DataVolume;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::Api;
use serde_json::{Value, json};

use crate::vmi::message;

/// How many times a request refused for a concurrent change is sent (upstream's `maxRetries`).
pub const MAX_RETRIES: u32 = 15;

/// Flags of `addvolume` (upstream's names and defaults).
#[derive(Debug, Clone, clap::Args)]
pub struct AddVolumeArgs {
    /// The VirtualMachineInstance (or, with --persist, VirtualMachine).
    pub name: String,
    /// Name used in volumes section of spec (a DataVolume or PVC of that name).
    #[arg(long = "volume-name", required = true)]
    pub volume_name: String,
    /// Serial number you want to assign to the disk (default: the volume name).
    #[arg(long, default_value = "")]
    pub serial: String,
    /// Caching options attribute control the cache mechanism.
    #[arg(long, default_value = "")]
    pub cache: String,
    /// [deprecated] this flag has no effect and will be removed in a future release.
    #[arg(long)]
    pub persist: bool,
    /// Validate the request on the server and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Specifies disk type to be hotplugged (disk/lun). Disk by default.
    #[arg(long = "disk-type", default_value = "disk")]
    pub disk_type: String,
    /// Specifies disk bus. scsi by default.
    #[arg(long, default_value = "scsi")]
    pub bus: String,
}

/// Flags of `removevolume`.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoveVolumeArgs {
    /// The VirtualMachineInstance (or, with --persist, VirtualMachine).
    pub name: String,
    /// Name used in volumes section of spec.
    #[arg(long = "volume-name", required = true)]
    pub volume_name: String,
    /// [deprecated] this flag has no effect and will be removed in a future release.
    #[arg(long)]
    pub persist: bool,
    /// Validate the request on the server and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The claim kind `--volume-name` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A DataVolume.
    DataVolume,
    /// A PVC.
    Pvc,
}

/// The `addvolume` body for `source` (upstream's checks of the flags, its error texts).
pub fn add_body(args: &AddVolumeArgs, source: Source) -> Result<Value, String> {
    let target = json!({"bus": args.bus});
    let mut disk = serde_json::Map::new();
    disk.insert("name".into(), json!(""));
    match args.disk_type.as_str() {
        "disk" if matches!(args.bus.as_str(), "scsi" | "virtio") => {
            disk.insert("disk".into(), target);
        }
        "disk" => {
            return Err(format!("Invalid bus type '{}' for disk. Only 'scsi' and 'virtio' are supported.", args.bus));
        }
        "lun" if args.bus == "scsi" => {
            disk.insert("lun".into(), target);
        }
        "lun" => return Err(format!("Invalid bus type '{}' for LUN disk. Only 'scsi' bus is supported.", args.bus)),
        other => return Err(format!("Invalid disk type '{other}'. Only LUN and Disk are supported.")),
    }
    let serial = if args.serial.is_empty() { &args.volume_name } else { &args.serial };
    disk.insert("serial".into(), json!(serial));
    if !args.cache.is_empty() {
        if !matches!(args.cache.as_str(), "none" | "writethrough" | "writeback") {
            return Err(format!("error adding volume, invalid cache value {}", args.cache));
        }
        disk.insert("cache".into(), json!(args.cache));
    }
    let volume_source = match source {
        Source::DataVolume => json!({"dataVolume": {"name": args.volume_name, "hotpluggable": true}}),
        Source::Pvc => json!({"persistentVolumeClaim": {"claimName": args.volume_name, "hotpluggable": true}}),
    };
    let mut body = json!({"name": args.volume_name, "disk": disk, "volumeSource": volume_source});
    if args.dry_run {
        body["dryRun"] = json!(["All"]);
    }
    Ok(body)
}

/// The `removevolume` body.
pub fn remove_body(args: &RemoveVolumeArgs) -> Value {
    let mut body = json!({"name": args.volume_name});
    if args.dry_run {
        body["dryRun"] = json!(["All"]);
    }
    body
}

/// The subresource path: `sub` of VM `name` (`vm`), else of VMI `name`.
pub fn path(namespace: &str, name: &str, vm: bool, sub: &str) -> String {
    let resource = if vm { "virtualmachines" } else { "virtualmachineinstances" };
    format!("/apis/{SUBRESOURCES_GROUP}/{VERSION}/namespaces/{namespace}/{resource}/{name}/{sub}")
}

async fn put(client: &kube::Client, path: &str, body: &Value) -> Result<(), kube::Error> {
    let request = http::Request::put(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(kube::Error::HttpError)?;
    client.request_text(request).await.map(drop)
}

/// Sends `body` to `sub` of VM `name`, or of VMI `name` when there is no such VM, again (at most [`MAX_RETRIES`]
/// times in all) while it is refused for a concurrent change; `Err` with `None` when every attempt was.
async fn send(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    sub: &str,
    body: &Value,
) -> Result<(), Option<kube::Error>> {
    for attempt in 1..=MAX_RETRIES {
        let sent = match put(client, &path(namespace, name, true, sub), body).await {
            Err(kube::Error::Api(s)) if s.code == 404 => put(client, &path(namespace, name, false, sub), body).await,
            other => other,
        };
        match sent {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 && s.message.contains("the object has been modified") => {
                tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt) * 20)).await;
            }
            Err(e) => return Err(Some(e)),
        }
    }
    Err(None)
}

/// `virtctl addvolume`: `Ok` with the line to print, `Err` with upstream's error text.
pub async fn add(args: &AddVolumeArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let dvs: Api<DataVolume> = Api::namespaced(client.clone(), namespace);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let source = if dvs.get_opt(&args.volume_name).await.ok().flatten().is_some() {
        Source::DataVolume
    } else if pvcs.get_opt(&args.volume_name).await.ok().flatten().is_some() {
        Source::Pvc
    } else {
        return Err(format!(
            "error adding volume, Volume {} is not a DataVolume or PersistentVolumeClaim",
            args.volume_name
        ));
    };
    let body = add_body(args, source)?;
    let dry = if args.dry_run { "Dry Run execution\n" } else { "" };
    match send(&client, namespace, &args.name, "addvolume", &body).await {
        Ok(()) => Ok(format!(
            "{dry}Successfully submitted add volume request to VM {} for volume {}",
            args.name, args.volume_name
        )),
        Err(Some(e)) => Err(format!("{dry}error adding volume, {}", message(&e))),
        Err(None) => Err(format!("{dry}error adding volume after {MAX_RETRIES} retries")),
    }
}

/// `virtctl removevolume`: `Ok` with the line to print, `Err` with upstream's error text.
pub async fn remove(args: &RemoveVolumeArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let dry = if args.dry_run { "Dry Run execution\n" } else { "" };
    match send(&client, namespace, &args.name, "removevolume", &remove_body(args)).await {
        Ok(()) => Ok(format!(
            "{dry}Successfully submitted remove volume request to VM {} for volume {}",
            args.name, args.volume_name
        )),
        Err(Some(e)) => Err(format!("{dry}error removing volume, {}", message(&e))),
        Err(None) => Err(format!("{dry}error removing volume after {MAX_RETRIES} retries")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(disk_type: &str, bus: &str) -> AddVolumeArgs {
        AddVolumeArgs {
            name: "vm1".into(),
            volume_name: "data".into(),
            serial: String::new(),
            cache: String::new(),
            persist: false,
            dry_run: false,
            disk_type: disk_type.into(),
            bus: bus.into(),
        }
    }

    #[test]
    fn bodies_are_upstreams_options() {
        let body = add_body(&args("disk", "scsi"), Source::Pvc).unwrap_or_default();
        assert_eq!(
            body,
            json!({"name": "data", "disk": {"name": "", "disk": {"bus": "scsi"}, "serial": "data"},
                   "volumeSource": {"persistentVolumeClaim": {"claimName": "data", "hotpluggable": true}}})
        );
        let mut a = args("lun", "scsi");
        a.serial = "s-1".into();
        a.cache = "none".into();
        a.dry_run = true;
        let body = add_body(&a, Source::DataVolume).unwrap_or_default();
        assert_eq!(body["disk"], json!({"name": "", "lun": {"bus": "scsi"}, "serial": "s-1", "cache": "none"}));
        assert_eq!(body["volumeSource"], json!({"dataVolume": {"name": "data", "hotpluggable": true}}));
        assert_eq!(body["dryRun"], json!(["All"]));
        let rm = RemoveVolumeArgs { name: "vm1".into(), volume_name: "data".into(), persist: true, dry_run: false };
        assert_eq!(remove_body(&rm), json!({"name": "data"}));
        assert_eq!(
            path("ns", "vm1", true, "removevolume"),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/vm1/removevolume"
        );
    }

    #[test]
    fn flag_errors_are_upstreams() {
        let err = |a: AddVolumeArgs| add_body(&a, Source::Pvc).err().unwrap_or_default();
        assert_eq!(
            err(args("disk", "sata")),
            "Invalid bus type 'sata' for disk. Only 'scsi' and 'virtio' are supported."
        );
        assert_eq!(err(args("lun", "virtio")), "Invalid bus type 'virtio' for LUN disk. Only 'scsi' bus is supported.");
        assert_eq!(err(args("cdrom", "scsi")), "Invalid disk type 'cdrom'. Only LUN and Disk are supported.");
        let mut a = args("disk", "scsi");
        a.cache = "unsafe".into();
        assert_eq!(err(a), "error adding volume, invalid cache value unsafe");
    }
}
