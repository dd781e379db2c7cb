//! Volume preparation (contract §2.3, §6, §7.2): what each volume of the spec needs on disk before the node agent
//! defines the domain. [`plan`] decides from the spec alone (pure, table-tested); [`prepare`] makes it.
//!
//! ```text
//! containerDisk          container_disk_copy(vol) ──qemu-img info (bounded; raw|qcow2, no backing/data file)──►
//!                        qemu-img create -f qcow2 -F <fmt> -b <copy> container_disk_overlay(vol)
//! emptyDisk              qemu-img create -f qcow2 empty_disk(vol) <capacity>            (sparse)
//! cloudInitNoCloud       cloud_init_disk(vol)               ISO `cidata`   (cloudinit)
//! cloudInitConfigDrive   cloud_init_config_drive_disk(vol)  ISO `config-2` (cloudinit)
//! persistentVolumeClaim  pvc_device(vol) a block device ─► nothing to make
//! / dataVolume           else pvc_mount(vol): disk.img, created sparse when missing (capacity − 5.5 %)
//! ```
//!
//! Everything made, and every image handed to QEMU, is owned by the `qemu` user: libvirt chowns nothing.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use contracts::kubevirt::launcher;
use controller_runtime::limits::INSPECT_LIMITS;
use crds::kubevirt::Volume;
use crds::kubevirt::volume::CloudInitSource;
use serde::Deserialize;

use crate::cloudinit::{self, Flavor, Instance};
use crate::files;
use crate::layout::Layout;
use crate::tool;

/// What one volume needs. Paths are the contract's (see [`Layout::at`] for where they are).
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A qcow2 overlay over the containerDisk file the disk's init container copied.
    ContainerDisk {
        /// The copied image (read only, the overlay's backing file).
        copy: String,
        /// The overlay to create.
        overlay: String,
    },
    /// A sparse qcow2.
    EmptyDisk {
        /// The image to create.
        path: String,
        /// Its virtual size, bytes.
        size: u64,
    },
    /// A cloud-init ISO.
    CloudInit {
        /// NoCloud or ConfigDrive.
        flavor: Flavor,
        /// The volume's sources.
        source: Box<CloudInitSource>,
        /// The ISO to create.
        iso: String,
        /// Where the user-data Secret is mounted (when the source names one).
        user_secret_dir: String,
        /// Where the network-data Secret is mounted (when the source names one).
        network_secret_dir: String,
    },
    /// A PVC or DataVolume: a block device, or a filesystem holding `disk.img`.
    Pvc {
        /// The block device, when the PVC is a Block volume.
        device: String,
        /// The mount point, when it is a Filesystem volume.
        mount: String,
        /// The image on the filesystem.
        image: String,
    },
}

/// One volume's plan.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumePlan {
    /// The volume's name.
    pub volume: String,
    /// What it needs.
    pub action: Action,
}

/// Why a volume cannot be prepared. Every message names the volume.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A volume with no source.
    #[error("volume {volume:?} has no source")]
    NoSource {
        /// The volume.
        volume: String,
    },
    /// A volume with more than one source (admission refuses these).
    #[error("volume {volume:?} has more than one source ({sources})")]
    TwoSources {
        /// The volume.
        volume: String,
        /// The sources.
        sources: String,
    },
    /// A source this launcher does not prepare.
    #[error("volume {volume:?}: {source_kind} volumes are not supported by this launcher")]
    Unsupported {
        /// The volume.
        volume: String,
        /// The source's field name.
        source_kind: &'static str,
    },
    /// An emptyDisk capacity that is not a size.
    #[error("volume {volume:?}: emptyDisk capacity {capacity:?} is not a positive size")]
    Capacity {
        /// The volume.
        volume: String,
        /// The capacity as written.
        capacity: String,
    },
    /// The containerDisk file is not where the init container puts it.
    #[error("volume {volume:?}: the containerDisk file {} is missing (the volume's init container copies it there)", path.display())]
    MissingCopy {
        /// The volume.
        volume: String,
        /// The expected file.
        path: PathBuf,
    },
    /// `qemu-img info` of the containerDisk failed.
    #[error("volume {volume:?}: inspecting the containerDisk image")]
    Inspect {
        /// The volume.
        volume: String,
        /// Why.
        #[source]
        source: tool::Error,
    },
    /// `qemu-img info` printed something else than its JSON.
    #[error("volume {volume:?}: unexpected `qemu-img info` output for {}", path.display())]
    InfoOutput {
        /// The volume.
        volume: String,
        /// The image.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A containerDisk image refused: it references other files, is encrypted or of another format.
    #[error("volume {volume:?}: the containerDisk image {} is refused: {reason}", path.display())]
    Refused {
        /// The volume.
        volume: String,
        /// The image.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `qemu-img create` failed.
    #[error("volume {volume:?}: creating {}", path.display())]
    Create {
        /// The volume.
        volume: String,
        /// The image.
        path: PathBuf,
        /// Why.
        #[source]
        source: tool::Error,
    },
    /// A file operation failed.
    #[error("volume {volume:?}: {operation} {}", path.display())]
    Io {
        /// The volume.
        volume: String,
        /// What was done.
        operation: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Neither a block device nor a mounted filesystem for a PVC.
    #[error(
        "volume {volume:?}: the PVC is neither a block device at {} nor a filesystem mounted at {}",
        device.display(),
        mount.display()
    )]
    PvcMissing {
        /// The volume.
        volume: String,
        /// The block device path.
        device: PathBuf,
        /// The mount point.
        mount: PathBuf,
    },
    /// The PVC's device path is something else.
    #[error("volume {volume:?}: {} is not a block device", device.display())]
    NotBlock {
        /// The volume.
        volume: String,
        /// The path.
        device: PathBuf,
    },
    /// A filesystem too small for a disk image.
    #[error("volume {volume:?}: the filesystem at {} ({capacity} bytes) is too small for a disk image", mount.display())]
    TooSmall {
        /// The volume.
        volume: String,
        /// The mount point.
        mount: PathBuf,
        /// Its capacity, bytes.
        capacity: u64,
    },
    /// The cloud-init disk could not be made.
    #[error("volume {volume:?}: cloud-init disk")]
    CloudInit {
        /// The volume.
        volume: String,
        /// Why.
        #[source]
        source: cloudinit::Error,
    },
}

/// The sources set on `v`, by field name.
fn sources(v: &Volume) -> Vec<&'static str> {
    [
        ("containerDisk", v.container_disk.is_some()),
        ("persistentVolumeClaim", v.persistent_volume_claim.is_some()),
        ("dataVolume", v.data_volume.is_some()),
        ("cloudInitNoCloud", v.cloud_init_no_cloud.is_some()),
        ("cloudInitConfigDrive", v.cloud_init_config_drive.is_some()),
        ("emptyDisk", v.empty_disk.is_some()),
        ("ephemeral", v.ephemeral.is_some()),
        ("hostDisk", v.host_disk.is_some()),
        ("configMap", v.config_map.is_some()),
        ("secret", v.secret.is_some()),
        ("serviceAccount", v.service_account.is_some()),
        ("downwardAPI", v.downward_api.is_some()),
        ("downwardMetrics", v.downward_metrics.is_some()),
        ("sysprep", v.sysprep.is_some()),
        ("memoryDump", v.memory_dump.is_some()),
        ("containerPath", v.container_path.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect()
}

/// Plans every volume of the spec, in order, except hotpluggable ones (the node agent brings those into the pod
/// from their attachment pods, `node-agent/src/volumes.rs`).
pub fn plan(volumes: &[Volume]) -> Result<Vec<VolumePlan>, Error> {
    volumes.iter().filter(|v| !v.is_hotpluggable()).map(plan_volume).collect()
}

fn plan_volume(v: &Volume) -> Result<VolumePlan, Error> {
    let volume = v.name.clone();
    let kinds = sources(v);
    let kind = match kinds.as_slice() {
        [] => return Err(Error::NoSource { volume }),
        [one] => *one,
        many => return Err(Error::TwoSources { volume, sources: many.join(", ") }),
    };
    let name = volume.as_str();
    let cloud_init = |flavor, source: &CloudInitSource, iso| Action::CloudInit {
        flavor,
        source: Box::new(source.clone()),
        iso,
        user_secret_dir: launcher::cloud_init_user_secret_dir(name),
        network_secret_dir: launcher::cloud_init_network_secret_dir(name),
    };
    let pvc = || Action::Pvc {
        device: launcher::pvc_device(name),
        mount: launcher::pvc_mount(name),
        image: launcher::pvc_disk(name),
    };
    let action = match (kind, v) {
        ("containerDisk", _) => Action::ContainerDisk {
            copy: launcher::container_disk_copy(name),
            overlay: launcher::container_disk_overlay(name),
        },
        ("emptyDisk", Volume { empty_disk: Some(e), .. }) => {
            let capacity = &e.capacity.0;
            let size = contracts::quantity::parse_bytes(capacity)
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| Error::Capacity { volume: volume.clone(), capacity: capacity.clone() })?;
            Action::EmptyDisk { path: launcher::empty_disk(name), size }
        }
        ("cloudInitNoCloud", Volume { cloud_init_no_cloud: Some(s), .. }) => {
            cloud_init(Flavor::NoCloud, s, launcher::cloud_init_disk(name))
        }
        ("cloudInitConfigDrive", Volume { cloud_init_config_drive: Some(s), .. }) => {
            cloud_init(Flavor::ConfigDrive, s, launcher::cloud_init_config_drive_disk(name))
        }
        ("persistentVolumeClaim", Volume { persistent_volume_claim: Some(_), .. }) => pvc(),
        ("dataVolume", Volume { data_volume: Some(_), .. }) => pvc(),
        (source_kind, _) => return Err(Error::Unsupported { volume, source_kind }),
    };
    Ok(VolumePlan { volume, action })
}

/// What preparing needs besides the plan.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// Where the contract's paths are.
    pub layout: &'a Layout,
    /// The guest, for cloud-init meta-data.
    pub instance: &'a Instance,
    /// The owner of everything made (the `qemu` user, [`files::qemu_owner`]).
    pub owner: u32,
}

/// Makes what `plans` need, in order; stops at the first failure. Returns what the node agent needs to know of
/// the result (the disks' part of the ready file).
pub fn prepare(plans: &[VolumePlan], ctx: &Context<'_>) -> Result<launcher::Prepared, Error> {
    let mut prepared = launcher::Prepared::default();
    for p in plans {
        prepare_volume(p, ctx, &mut prepared)?;
    }
    Ok(prepared)
}

/// Whether `path` can be opened with `O_DIRECT` (tmpfs and some overlay filesystems refuse it; QEMU's default
/// `cache=none` needs it).
fn direct_io_works(path: &Path) -> bool {
    use rustix::fs::{Mode, OFlags};
    !matches!(
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECT | OFlags::CLOEXEC, Mode::empty()),
        Err(rustix::io::Errno::INVAL)
    )
}

fn prepare_volume(p: &VolumePlan, ctx: &Context<'_>, prepared: &mut launcher::Prepared) -> Result<(), Error> {
    let volume = p.volume.as_str();
    let at = |path: &str| ctx.layout.at(path);
    let mut note_direct_io = |path: &Path| {
        if !direct_io_works(path) {
            tracing::info!(volume, path = %path.display(), "O_DIRECT refused: the disk's cache mode is writethrough");
            prepared.no_direct_io.insert(volume.to_owned());
        }
    };
    match &p.action {
        Action::ContainerDisk { copy, overlay } => {
            let format = container_disk(volume, &at(copy), &at(overlay), ctx.owner)?;
            note_direct_io(&at(overlay));
            prepared.container_disk_formats.insert(volume.to_owned(), format);
            Ok(())
        }
        Action::EmptyDisk { path, size } => {
            empty_disk(volume, &at(path), *size, ctx.owner)?;
            note_direct_io(&at(path));
            Ok(())
        }
        Action::CloudInit { flavor, source, iso, user_secret_dir, network_secret_dir } => {
            let data = cloudinit::resolve(source, &at(user_secret_dir), &at(network_secret_dir))
                .map_err(|source| Error::CloudInit { volume: volume.into(), source })?;
            let files = cloudinit::files(*flavor, ctx.instance, &data);
            cloudinit::build_iso(*flavor, &files, &at(iso), ctx.owner)
                .map_err(|source| Error::CloudInit { volume: volume.into(), source })?;
            tracing::info!(volume, iso = %at(iso).display(), label = flavor.volume_id(), "cloud-init disk created");
            Ok(())
        }
        Action::Pvc { device, mount, image } => {
            if pvc(volume, &at(device), &at(mount), &at(image), ctx.owner)? {
                prepared.block_volumes.insert(volume.to_owned());
            } else {
                note_direct_io(&at(image));
            }
            Ok(())
        }
    }
}

/// What `qemu-img info --output=json` says that matters here.
#[derive(Debug, Deserialize)]
struct ImageInfo {
    format: String,
    #[serde(rename = "backing-filename")]
    backing_filename: Option<String>,
    encrypted: Option<bool>,
    #[serde(rename = "format-specific")]
    format_specific: Option<serde_json::Value>,
}

/// Why `info` is refused as a containerDisk image, if it is: only raw and qcow2, without backing file, external
/// data file or encryption (the image is the user's: hostile).
fn refusal(info: &ImageInfo) -> Option<String> {
    if let Some(b) = &info.backing_filename {
        return Some(format!("it has a backing file {b:?}; images with backing files are refused"));
    }
    if let Some(d) = info.format_specific.as_ref().and_then(|f| f.pointer("/data/data-file")).and_then(|d| d.as_str()) {
        return Some(format!("it has an external data file {d:?}; images referencing other files are refused"));
    }
    if info.encrypted == Some(true) {
        return Some(String::from("it is encrypted"));
    }
    if info.format != "raw" && info.format != "qcow2" {
        return Some(format!("its format is {}; only raw and qcow2 are supported", info.format));
    }
    None
}

/// Creates the overlay; returns the copy's format (`raw` or `qcow2`).
fn container_disk(volume: &str, copy: &Path, overlay: &Path, owner: u32) -> Result<String, Error> {
    if !copy.exists() {
        return Err(Error::MissingCopy { volume: volume.into(), path: copy.to_path_buf() });
    }
    let args = ["info".as_ref(), "--output=json".as_ref(), "-U".as_ref(), copy.as_os_str()];
    let out = tool::run_bounded("qemu-img", &args, INSPECT_LIMITS)
        .map_err(|source| Error::Inspect { volume: volume.into(), source })?;
    let info: ImageInfo = serde_json::from_slice(&out.stdout).map_err(|source| Error::InfoOutput {
        volume: volume.into(),
        path: copy.to_path_buf(),
        source,
    })?;
    if let Some(reason) = refusal(&info) {
        return Err(Error::Refused { volume: volume.into(), path: copy.to_path_buf(), reason });
    }
    create_parent(volume, overlay, owner)?;
    let args = [
        "create".as_ref(),
        "-q".as_ref(),
        "-f".as_ref(),
        "qcow2".as_ref(),
        "-F".as_ref(),
        info.format.as_ref(),
        "-b".as_ref(),
        copy.as_os_str(),
        overlay.as_os_str(),
    ];
    // qemu-img opens the backing file to size the overlay: bounded like `info`.
    tool::run_bounded("qemu-img", &args, INSPECT_LIMITS).map_err(|source| Error::Create {
        volume: volume.into(),
        path: overlay.to_path_buf(),
        source,
    })?;
    own(volume, overlay, owner)?;
    tracing::info!(volume, format = info.format, overlay = %overlay.display(), "containerDisk overlay created");
    Ok(info.format)
}

fn empty_disk(volume: &str, path: &Path, size: u64, owner: u32) -> Result<(), Error> {
    create_parent(volume, path, owner)?;
    let size = size.to_string();
    let args = ["create".as_ref(), "-q".as_ref(), "-f".as_ref(), "qcow2".as_ref(), path.as_os_str(), size.as_ref()];
    tool::run("qemu-img", &args).map_err(|source| Error::Create {
        volume: volume.into(),
        path: path.to_path_buf(),
        source,
    })?;
    own(volume, path, owner)?;
    tracing::info!(volume, path = %path.display(), size, "emptyDisk created");
    Ok(())
}

/// Makes the PVC's disk usable by QEMU; returns whether it is a block device.
fn pvc(volume: &str, device: &Path, mount: &Path, image: &Path, owner: u32) -> Result<bool, Error> {
    let io_err = |operation, path: &Path| {
        let (volume, path) = (volume.to_owned(), path.to_path_buf());
        move |source| Error::Io { volume, operation, path, source }
    };
    match std::fs::metadata(device) {
        Ok(m) if m.file_type().is_block_device() => {
            own(volume, device, owner)?;
            tracing::info!(volume, device = %device.display(), "block volume");
            return Ok(true);
        }
        Ok(_) => return Err(Error::NotBlock { volume: volume.into(), device: device.to_path_buf() }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("inspecting", device)(e)),
    }
    if !mount.is_dir() {
        return Err(Error::PvcMissing {
            volume: volume.into(),
            device: device.to_path_buf(),
            mount: mount.to_path_buf(),
        });
    }
    if image.exists() {
        match files::chown(image, owner) {
            // A read-only volume: QEMU only reads it (the image must be readable by it already).
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error()) => {
                tracing::info!(volume, image = %image.display(), "read-only filesystem volume: owner left as it is");
            }
            r => r.map_err(io_err("changing the owner of", image))?,
        }
        tracing::info!(volume, image = %image.display(), "filesystem volume with an image");
        return Ok(false);
    }
    let fs = rustix::fs::statvfs(mount).map_err(|e| io_err("reading the capacity of", mount)(e.into()))?;
    let capacity = fs.f_blocks.saturating_mul(fs.f_frsize);
    let size = launcher::pvc_disk_size(capacity);
    if size == 0 {
        return Err(Error::TooSmall { volume: volume.into(), mount: mount.to_path_buf(), capacity });
    }
    let created = std::fs::OpenOptions::new().write(true).create_new(true).open(image).and_then(|f| f.set_len(size));
    if let Err(e) = created {
        let _ = std::fs::remove_file(image);
        return Err(io_err("creating", image)(e));
    }
    own(volume, image, owner)?;
    tracing::info!(volume, image = %image.display(), size, capacity, "filesystem volume: sparse disk.img created");
    Ok(false)
}

fn create_parent(volume: &str, path: &Path, owner: u32) -> Result<(), Error> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    files::create_dirs(dir, Some(owner)).map_err(|source| Error::Io {
        volume: volume.into(),
        operation: "creating",
        path: dir.to_path_buf(),
        source,
    })
}

fn own(volume: &str, path: &Path, owner: u32) -> Result<(), Error> {
    files::chown(path, owner).map_err(|source| Error::Io {
        volume: volume.into(),
        operation: "changing the owner of",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;

    fn volumes(json: serde_json::Value) -> Vec<Volume> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn spec_to_plan() {
        let got = plan(&volumes(serde_json::json!([
            {"name": "root", "containerDisk": {"image": "quay.io/x/cirros:latest"}},
            {"name": "scratch", "emptyDisk": {"capacity": "2Gi"}},
            {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config\n"}},
            {"name": "cd", "cloudInitConfigDrive": {"userData": "x"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "pvc-1"}},
            {"name": "dv", "dataVolume": {"name": "dv-1"}},
        ])))
        .unwrap();
        let summary: Vec<(String, String)> = got
            .iter()
            .map(|p| {
                let what = match &p.action {
                    Action::ContainerDisk { copy, overlay } => format!("overlay {overlay} over {copy}"),
                    Action::EmptyDisk { path, size } => format!("qcow2 {path} {size}"),
                    Action::CloudInit { flavor, iso, user_secret_dir, .. } => {
                        format!("{} {iso} (secret {user_secret_dir})", flavor.volume_id())
                    }
                    Action::Pvc { device, image, .. } => format!("block {device} or {image}"),
                };
                (p.volume.clone(), what)
            })
            .collect();
        let want = [
            (
                "root",
                "overlay /var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2 over \
                 /var/run/kubevirt/container-disks/root.img",
            ),
            ("scratch", "qcow2 /var/run/kubevirt-ephemeral-disks/empty-disks/scratch.qcow2 2147483648"),
            (
                "ci",
                "cidata /var/run/kubevirt-ephemeral-disks/cloud-init/ci/noCloud.iso \
                 (secret /var/run/kubevirt-private/cloud-init-secrets/ci/user)",
            ),
            (
                "cd",
                "config-2 /var/run/kubevirt-ephemeral-disks/cloud-init/cd/configDrive.iso \
                 (secret /var/run/kubevirt-private/cloud-init-secrets/cd/user)",
            ),
            ("data", "block /dev/data or /var/run/kubevirt-private/vmi-disks/data/disk.img"),
            ("dv", "block /dev/dv or /var/run/kubevirt-private/vmi-disks/dv/disk.img"),
        ];
        assert_eq!(summary, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
    }

    #[test]
    fn unusable_volumes_are_refused_by_name() {
        let err = |v: serde_json::Value| plan(&volumes(serde_json::json!([v]))).err().map(|e| e.to_string());
        let cases = [
            (serde_json::json!({"name": "a"}), "volume \"a\" has no source"),
            (
                serde_json::json!({"name": "b", "emptyDisk": {"capacity": "1Gi"}, "containerDisk": {"image": "i"}}),
                "volume \"b\" has more than one source (containerDisk, emptyDisk)",
            ),
            (
                serde_json::json!({"name": "c", "hostDisk": {"path": "/x", "type": "Disk"}}),
                "volume \"c\": hostDisk volumes are not supported by this launcher",
            ),
            (
                serde_json::json!({"name": "d", "secret": {"secretName": "s"}}),
                "volume \"d\": secret volumes are not supported by this launcher",
            ),
            (
                serde_json::json!({"name": "e", "emptyDisk": {"capacity": "lots"}}),
                "volume \"e\": emptyDisk capacity \"lots\" is not a positive size",
            ),
            (
                serde_json::json!({"name": "f", "emptyDisk": {"capacity": "0"}}),
                "volume \"f\": emptyDisk capacity \"0\" is not a positive size",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(err(v.clone()).as_deref(), Some(want), "{v}");
        }
        assert!(plan(&[]).unwrap().is_empty());
        // Hotpluggable volumes are the node agent's: not planned here.
        let hot: Volume = serde_json::from_value(
            serde_json::json!({"name": "g", "persistentVolumeClaim": {"claimName": "p", "hotpluggable": true}}),
        )
        .unwrap();
        assert!(plan(&[hot]).unwrap().is_empty());
    }

    #[test]
    fn hostile_image_info_is_refused() {
        let info = |j: serde_json::Value| serde_json::from_value::<ImageInfo>(j).unwrap();
        assert_eq!(refusal(&info(serde_json::json!({"format": "qcow2", "virtual-size": 1}))), None);
        assert_eq!(refusal(&info(serde_json::json!({"format": "raw"}))), None);
        assert_eq!(
            refusal(&info(serde_json::json!({"format": "qcow2", "backing-filename": "/etc/shadow"}))).as_deref(),
            Some("it has a backing file \"/etc/shadow\"; images with backing files are refused")
        );
        assert_eq!(
            refusal(&info(serde_json::json!({"format": "qcow2", "format-specific": {"type": "qcow2", "data": {"data-file": "/dev/sda"}}}))).as_deref(),
            Some("it has an external data file \"/dev/sda\"; images referencing other files are refused")
        );
        assert_eq!(
            refusal(&info(serde_json::json!({"format": "vmdk"}))).as_deref(),
            Some("its format is vmdk; only raw and qcow2 are supported")
        );
        assert_eq!(
            refusal(&info(serde_json::json!({"format": "qcow2", "encrypted": true}))).as_deref(),
            Some("it is encrypted")
        );
    }
}
