//! Volume hotplug on the node (contract §7.5; upstream's virt-handler `hotplug-disk` mounter and the launcher's
//! `syncDisks`): a running VMI's hotpluggable volume whose attachment pod runs on this node is put into the
//! launcher pod and attached to the guest; a volume removed from the spec is detached and taken out again.
//!
//! ```text
//! status AttachedToNode, attachment pod ready ─► mount ─► MountedToPod "Volume V has been mounted in virt-launcher pod"
//!   Filesystem claim: the pod's /hotplug/V/disk.img (made, sparse, when the claim is blank) bind-mounted onto
//!   HOTPLUG_DISKS_DIR/V.img in the launcher's mount namespace (open_tree + move_mount: the mount crosses mount
//!   namespaces without a path visible to both); Block claim: a device node of the same numbers there, allowed in
//!   the compute container's device cgroup (cgroup v1; [`HOST_CGROUP_ROOT`]). Owned by the qemu user either way.
//! MountedToPod, not in the domain ─► attach (libvirt, target sdX) ─► Ready "Successfully attach hotplugged volume V to VM"
//! removed from the spec: in the domain ─► detach (the guest lets go; looked at again) ─► unmount
//!   ─► UnMountedFromPod "Volume V has been unmounted from virt-launcher pod" (the controller deletes the pod)
//! ```
//!
//! Decisions are pure ([`plan`]); the namespace work runs in a child process (`node-agent hotplug-volume …`,
//! [`hotplug_volume_main`]) because a process joins mount namespaces only while single-threaded.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::fd::AsFd;
use std::process::{Command, Stdio};

use contracts::kubevirt::consts::QEMU_UID;
use contracts::kubevirt::launcher::{self, attachment_path};
use crds::kubevirt::vmi::{VolumePhase, VolumeStatus};
use k8s_openapi::api::core::v1::Pod;

/// The hidden subcommand of the node agent's binary that moves a volume into or out of a launcher pod.
pub const HOTPLUG_VOLUME: &str = "hotplug-volume";
/// Volume status reason once mounted into the launcher pod (upstream's).
pub const REASON_MOUNTED: &str = "VolumeMountedToPod";
/// Volume status reason once attached to the guest (upstream's).
pub const REASON_READY: &str = "VolumeReady";
/// Volume status reason once unmounted from the launcher pod (upstream's).
pub const REASON_UNMOUNTED: &str = "VolumeUnMountedFromPod";

/// How a hotplugged claim comes into the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A directory holding `disk.img`.
    Filesystem,
    /// A block device.
    Block,
}

/// A hotpluggable volume's attachment pod on this node, as the planner sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// Its UID (the one `volumeStatus[].hotplugVolume.attachPodUID` names once it runs).
    pub uid: String,
    /// Whether the claim is a block device in it.
    pub mode: Mode,
}

/// Everything the planner looks at for one running VMI.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Hotpluggable volumes of the spec.
    pub wanted: BTreeSet<String>,
    /// `status.volumeStatus` entries.
    pub status: Vec<VolumeStatus>,
    /// Attachment pods on this node for the VMI's current launcher pod, by volume.
    pub attachments: BTreeMap<String, Attachment>,
    /// Volumes present in the launcher pod ([`launcher::HOTPLUG_DISKS_DIR`]).
    pub mounted: BTreeSet<String>,
    /// Volumes the domain has as disks, with their target device.
    pub attached: BTreeMap<String, String>,
    /// Every target device the domain uses.
    pub targets: BTreeSet<String>,
}

/// One step for one volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Put it into the launcher pod.
    Mount {
        /// The volume.
        volume: String,
        /// Filesystem or block.
        mode: Mode,
    },
    /// Attach it to the guest as `target`.
    Attach {
        /// The volume.
        volume: String,
        /// Filesystem or block.
        mode: Mode,
        /// Its device in the guest.
        target: String,
    },
    /// Detach it from the guest (`target` is where it is).
    Detach {
        /// The volume.
        volume: String,
        /// Filesystem or block (as the attached disk).
        mode: Mode,
        /// Its device in the guest.
        target: String,
    },
    /// Take it out of the launcher pod.
    Unmount {
        /// The volume.
        volume: String,
    },
    /// Record a phase without doing anything (after an agent restart, or a volume that never got in).
    Record {
        /// The volume.
        volume: String,
    },
}

/// The phase a step leads a volume to, with upstream's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// The phase.
    pub phase: VolumePhase,
    /// Its reason (also the event's).
    pub reason: &'static str,
    /// Its message (also the event's).
    pub message: String,
}

/// The first `sdX` device no disk of the domain and no volume status uses.
fn free_target(o: &Observed) -> String {
    let used: BTreeSet<&str> =
        o.targets.iter().map(String::as_str).chain(o.status.iter().map(|s| s.target.as_str())).collect();
    (0..)
        .map(|i| crate::domain_xml::device_name("sd", i))
        .find(|d| !used.contains(d.as_str()))
        .unwrap_or_else(|| "sdzz".into())
}

/// What to do for a running VMI's hotplugged volumes, one step per volume, in order; with the phase (reason,
/// message) each step leads to. Detaching takes two looks: libvirt's detach returns before the guest let go.
pub fn plan(o: &Observed) -> Vec<(Step, Option<Transition>)> {
    let mut out = Vec::new();
    for entry in &o.status {
        let v = entry.name.clone();
        let phase = entry.phase.clone();
        let mode = o.attachments.get(&v).map_or(Mode::Filesystem, |a| a.mode);
        let to = |phase, reason, message| Transition { phase, reason, message };
        let mounted_msg = || {
            to(VolumePhase::MountedToPod, REASON_MOUNTED, format!("Volume {v} has been mounted in virt-launcher pod"))
        };
        let ready_msg =
            || to(VolumePhase::Ready, REASON_READY, format!("Successfully attach hotplugged volume {v} to VM"));
        if o.wanted.contains(&v) {
            let pod_ready = o.attachments.get(&v).is_some_and(|a| {
                entry.hotplug_volume.as_ref().and_then(|h| h.attach_pod_uid.as_deref()) == Some(a.uid.as_str())
            });
            let ours =
                matches!(phase, Some(VolumePhase::AttachedToNode | VolumePhase::MountedToPod | VolumePhase::Ready));
            if !ours {
                continue;
            }
            if !o.mounted.contains(&v) {
                if pod_ready {
                    out.push((Step::Mount { volume: v.clone(), mode }, Some(mounted_msg())));
                }
            } else if !o.attached.contains_key(&v) {
                let target = if entry.target.is_empty() { free_target(o) } else { entry.target.clone() };
                out.push((Step::Attach { volume: v.clone(), mode, target }, Some(ready_msg())));
            } else if phase != Some(VolumePhase::Ready) {
                out.push((Step::Record { volume: v.clone() }, Some(ready_msg())));
            }
        } else {
            if !matches!(phase, Some(VolumePhase::MountedToPod | VolumePhase::Ready)) {
                continue;
            }
            let unmounted = || {
                let message = format!("Volume {v} has been unmounted from virt-launcher pod");
                to(VolumePhase::UnMountedFromPod, REASON_UNMOUNTED, message)
            };
            if let Some(target) = o.attached.get(&v) {
                out.push((Step::Detach { volume: v.clone(), mode, target: target.clone() }, None));
            } else if o.mounted.contains(&v) {
                out.push((Step::Unmount { volume: v.clone() }, Some(unmounted())));
            } else {
                out.push((Step::Record { volume: v.clone() }, Some(unmounted())));
            }
        }
    }
    out
}

/// The hotpluggable volumes the domain has as disks (`<alias name='ua-V'/>`), with their targets, and every target
/// the domain uses.
pub fn domain_disks(domain_xml: &str) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let mut attached = BTreeMap::new();
    let mut targets = BTreeSet::new();
    let Ok(doc) = roxmltree::Document::parse(domain_xml) else { return (attached, targets) };
    for disk in doc.descendants().filter(|n| n.has_tag_name("disk")) {
        let target = disk.children().find(|n| n.has_tag_name("target")).and_then(|t| t.attribute("dev"));
        let source = disk
            .children()
            .find(|n| n.has_tag_name("source"))
            .and_then(|s| s.attribute("file").or_else(|| s.attribute("dev")));
        let alias = disk.children().find(|n| n.has_tag_name("alias")).and_then(|a| a.attribute("name"));
        if let Some(t) = target {
            targets.insert(t.to_owned());
        }
        if let (Some(t), Some(src), Some(a)) = (target, source, alias)
            && src.starts_with(launcher::HOTPLUG_DISKS_DIR)
            && let Some(v) = a.strip_prefix("ua-")
        {
            attached.insert(v.to_owned(), t.to_owned());
        }
    }
    (attached, targets)
}

/// The attachment pods (of the VMI's current launcher pod `launcher_uid`) in `pods`, by volume.
pub fn attachments(pods: &[std::sync::Arc<Pod>], launcher_uid: &str) -> BTreeMap<String, Attachment> {
    let mut out = BTreeMap::new();
    for p in pods {
        let owner =
            p.metadata.owner_references.iter().flatten().find(|o| o.kind == "Pod" && o.controller == Some(true));
        if owner.is_none_or(|o| o.uid != launcher_uid) || p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(spec) = p.spec.as_ref() else { continue };
        let Some(volume) = spec.volumes.iter().flatten().find(|v| v.persistent_volume_claim.is_some()) else {
            continue;
        };
        let block = spec.containers.iter().any(|c| c.volume_devices.iter().flatten().any(|d| d.name == volume.name));
        out.insert(
            volume.name.clone(),
            Attachment {
                uid: p.metadata.uid.clone().unwrap_or_default(),
                mode: if block { Mode::Block } else { Mode::Filesystem },
            },
        );
    }
    out
}

/// Records `phase` for `volume` in `status` (and the target, when given); `true` when it changed.
pub fn record(
    status: &mut crds::kubevirt::vmi::VirtualMachineInstanceStatus,
    volume: &str,
    t: &Transition,
    target: Option<&str>,
) -> bool {
    let Some(entry) = status.volume_status.iter_mut().flatten().find(|e| e.name == volume) else { return false };
    let before = entry.clone();
    entry.phase = Some(t.phase.clone());
    entry.reason = Some(t.reason.to_owned());
    entry.message = Some(t.message.clone());
    if let Some(t) = target {
        entry.target = t.to_owned();
    }
    *entry != before
}

/// The host PID of a process of container `container` of `pod` (found by the container ID in `/proc/*/cgroup`;
/// the node agent shares the host's PID namespace).
pub fn container_pid(pod: &Pod, container: &str) -> Option<i32> {
    let id = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == container)?
        .container_id
        .as_deref()?
        .rsplit("://")
        .next()?
        .to_owned();
    if id.len() < 12 {
        return None;
    }
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(&id)))
        .collect();
    pids.sort_unstable();
    pids.first().copied()
}

/// `path` as the mount namespace of process `pid` resolves it (its symbolic links followed inside that root,
/// e.g. `/var/run` → `/run`), or `None` when a component is missing or the links loop.
fn resolve_in(pid: i32, path: &str) -> Option<String> {
    let root = format!("/proc/{pid}/root");
    let mut todo: Vec<String> = path.split('/').filter(|c| !c.is_empty()).rev().map(str::to_owned).collect();
    let mut done: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = todo.pop() {
        match c.as_str() {
            "." => continue,
            ".." => {
                done.pop();
                continue;
            }
            _ => {}
        }
        let here = format!("{root}/{}/{c}", done.join("/"));
        match std::fs::symlink_metadata(&here) {
            Ok(m) if m.file_type().is_symlink() => {
                hops += 1;
                if hops > 40 {
                    return None;
                }
                let target = std::fs::read_link(&here).ok()?;
                let target = target.to_string_lossy();
                if target.starts_with('/') {
                    done.clear();
                }
                todo.extend(target.split('/').filter(|c| !c.is_empty()).rev().map(str::to_owned));
            }
            Ok(_) => done.push(c),
            // The last component may be missing (not mounted yet): the path is still known.
            Err(_) if todo.is_empty() => done.push(c),
            Err(_) => return None,
        }
    }
    Some(format!("/{}", done.join("/")))
}

/// Whether `path` is a mount point in the mount namespace of process `pid`, or (a block volume) a device node there.
pub fn present(pid: i32, path: &str) -> bool {
    let Some(real) = resolve_in(pid, path) else { return false };
    let mounted = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .is_ok_and(|m| m.lines().any(|l| l.split(' ').nth(4) == Some(real.as_str())));
    mounted
        || std::fs::symlink_metadata(format!("/proc/{pid}/root{real}"))
            .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()))
}

/// Whether `path` (in the current mount namespace) is the root of a mount.
fn is_mount_root(path: &str) -> bool {
    rustix::fs::statx(rustix::fs::CWD, path, rustix::fs::AtFlags::SYMLINK_NOFOLLOW, rustix::fs::StatxFlags::BASIC_STATS)
        .is_ok_and(|st| {
            let attr = rustix::fs::StatxAttributes::MOUNT_ROOT;
            st.stx_attributes_mask.contains(attr) && st.stx_attributes.contains(attr)
        })
}

/// Runs `node-agent hotplug-volume ARGS…` and returns its stdout (its last stderr line in the error).
fn helper(args: &[String]) -> io::Result<String> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe).arg(HOTPLUG_VOLUME).args(args).env_clear().stdin(Stdio::null()).output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(io::Error::other(format!("{HOTPLUG_VOLUME}: {}", err.lines().last().unwrap_or("failed"))))
    }
}

/// Puts `volume` from the attachment pod's process `from` into the launcher's process `to` (blocking); for a block
/// device also allows it in the device cgroup of `to`.
pub fn mount(from: i32, to: i32, volume: &str, mode: Mode) -> io::Result<()> {
    let (target, kind) = match mode {
        Mode::Filesystem => (launcher::hotplug_disk(volume), "file"),
        Mode::Block => (launcher::hotplug_device(volume), "block"),
    };
    let out =
        helper(&["mount".into(), kind.into(), from.to_string(), attachment_path(volume), to.to_string(), target])?;
    if mode == Mode::Block {
        let numbers = out.trim();
        allow_device(to, numbers)?;
    }
    Ok(())
}

/// Takes `volume` out of the launcher's process `to` (blocking).
pub fn unmount(to: i32, volume: &str) -> io::Result<()> {
    helper(&["unmount".into(), to.to_string(), launcher::hotplug_disk(volume), launcher::hotplug_device(volume)])
        .map(drop)
}

/// Where the node agent's pod mounts the host's `/sys/fs/cgroup` (deploy/node-agent.yaml): a container's own
/// cgroup filesystem shows only its own cgroup.
pub const HOST_CGROUP_ROOT: &str = "/host/sys/fs/cgroup";

/// Allows block device `numbers` (`MAJOR:MINOR`) in the cgroup v1 device controller of process `pid` (the compute
/// container's: QEMU opens it there), through the host's cgroup filesystem ([`HOST_CGROUP_ROOT`]).
fn allow_device(pid: i32, numbers: &str) -> io::Result<()> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let path = cgroups
        .lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            controllers.split(',').any(|c| c == "devices").then(|| path.to_owned())
        })
        .ok_or_else(|| io::Error::other("block volume hotplug needs the cgroup v1 devices controller"))?;
    let allow = format!("{HOST_CGROUP_ROOT}/devices{path}/devices.allow");
    std::fs::write(&allow, format!("b {numbers} rwm")).map_err(|e| io::Error::new(e.kind(), format!("{allow}: {e}")))
}

fn join(pid: &str) -> io::Result<std::fs::File> {
    std::fs::File::open(format!("/proc/{pid}/ns/mnt"))
}

fn enter(ns: &std::fs::File) -> io::Result<()> {
    rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Mount))
        .map_err(io::Error::from)
}

fn qemu_owned(path: &str) -> io::Result<()> {
    let id = u32::try_from(QEMU_UID).unwrap_or(107);
    rustix::fs::chown(path, Some(rustix::fs::Uid::from_raw(id)), Some(rustix::fs::Gid::from_raw(id)))
        .map_err(io::Error::from)
}

/// `node-agent hotplug-volume mount file|block FROM_PID SOURCE TO_PID TARGET` and
/// `node-agent hotplug-volume unmount TO_PID FILE_TARGET DEVICE_TARGET`: the namespace work of [`mount`] and
/// [`unmount`]. Called at the start of `main`, while the process is single-threaded. A block mount prints the
/// device's `MAJOR:MINOR`.
pub fn hotplug_volume_main(args: &[String]) -> io::Result<()> {
    let usage = || {
        io::Error::other(format!(
            "usage: node-agent {HOTPLUG_VOLUME} mount file|block FROM SOURCE TO TARGET | unmount TO FILE DEVICE"
        ))
    };
    match args {
        [op, kind, from, source, to, target] if op == "mount" => {
            let (from_ns, to_ns) = (join(from)?, join(to)?);
            enter(&from_ns)?;
            let dir =
                std::path::Path::new(target).parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            if kind == "block" {
                let st = rustix::fs::stat(source.as_str()).map_err(io::Error::from)?;
                if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::BlockDevice {
                    return Err(io::Error::other(format!("{source} is not a block device")));
                }
                enter(&to_ns)?;
                std::fs::create_dir_all(&dir)?;
                qemu_owned(&dir)?;
                if std::fs::symlink_metadata(target).is_err() {
                    rustix::fs::mknodat(
                        rustix::fs::CWD,
                        target.as_str(),
                        rustix::fs::FileType::BlockDevice,
                        rustix::fs::Mode::from_raw_mode(0o660),
                        st.st_rdev,
                    )
                    .map_err(io::Error::from)?;
                }
                qemu_owned(target)?;
                println!("{}:{}", rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
                return Ok(());
            }
            let image = format!("{source}/disk.img");
            match std::fs::symlink_metadata(&image) {
                Ok(m) if m.file_type().is_file() => {}
                Ok(_) => return Err(io::Error::other(format!("{image} is not a regular file"))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // A blank claim: a sparse image of the filesystem's size less CDI's overhead (as the launcher
                    // does for the pod's own claims).
                    let fs = rustix::fs::statvfs(source.as_str()).map_err(io::Error::from)?;
                    let capacity = fs.f_blocks.saturating_mul(fs.f_frsize);
                    let f = std::fs::OpenOptions::new().write(true).create_new(true).open(&image)?;
                    f.set_len(launcher::pvc_disk_size(capacity))?;
                }
                Err(e) => return Err(e),
            }
            qemu_owned(&image)?;
            let tree = rustix::mount::open_tree(
                rustix::fs::CWD,
                image.as_str(),
                rustix::mount::OpenTreeFlags::OPEN_TREE_CLONE
                    | rustix::mount::OpenTreeFlags::OPEN_TREE_CLOEXEC
                    | rustix::mount::OpenTreeFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| io::Error::other(format!("open_tree {image}: {e}")))?;
            enter(&to_ns)?;
            std::fs::create_dir_all(&dir)?;
            qemu_owned(&dir)?;
            if std::fs::symlink_metadata(target).is_err() {
                std::fs::File::create(target)?;
            }
            if is_mount_root(target) {
                // Mounted already (an earlier run whose result was not seen): nothing to stack on it.
                return Ok(());
            }
            qemu_owned(target)?;
            rustix::mount::move_mount(
                tree.as_fd(),
                "",
                rustix::fs::CWD,
                target.as_str(),
                rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
            )
            .map_err(|e| io::Error::other(format!("move_mount {target}: {e}")))
        }
        [op, to, file, device] if op == "unmount" => {
            let to_ns = join(to)?;
            enter(&to_ns)?;
            // Every mount stacked there (an interrupted earlier run may have left more than one).
            for _ in 0..16 {
                match rustix::mount::unmount(file.as_str(), rustix::mount::UnmountFlags::DETACH) {
                    Ok(()) => {}
                    Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOENT => break,
                    Err(e) => return Err(io::Error::other(format!("unmounting {file}: {e}"))),
                }
            }
            for p in [file, device] {
                match std::fs::remove_file(p) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
            Ok(())
        }
        _ => Err(usage()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::kubevirt::vmi::HotplugVolumeStatus;

    fn entry(name: &str, phase: VolumePhase, target: &str, pod: Option<&str>) -> VolumeStatus {
        VolumeStatus {
            name: name.into(),
            target: target.into(),
            phase: Some(phase),
            hotplug_volume: Some(HotplugVolumeStatus { attach_pod_uid: pod.map(Into::into), ..Default::default() }),
            ..Default::default()
        }
    }

    fn observed() -> Observed {
        Observed {
            wanted: ["a".to_owned()].into(),
            attachments: [("a".to_owned(), Attachment { uid: "pod-a".into(), mode: Mode::Filesystem })].into(),
            targets: ["vda".to_owned(), "sda".to_owned()].into(),
            ..Observed::default()
        }
    }

    fn steps(o: &Observed) -> Vec<Step> {
        plan(o).into_iter().map(|(s, _)| s).collect()
    }

    #[test]
    fn a_new_volume_is_mounted_then_attached_then_ready() {
        let mut o = observed();
        o.status = vec![entry("a", VolumePhase::AttachedToNode, "", None)];
        assert!(steps(&o).is_empty(), "the attachment pod is not running yet");
        o.status = vec![entry("a", VolumePhase::AttachedToNode, "", Some("pod-a"))];
        let p = plan(&o);
        assert_eq!(p[0].0, Step::Mount { volume: "a".into(), mode: Mode::Filesystem });
        let t = p[0].1.clone().unwrap_or_else(|| panic!("no phase"));
        assert_eq!(
            (t.phase, t.reason, t.message.as_str()),
            (VolumePhase::MountedToPod, "VolumeMountedToPod", "Volume a has been mounted in virt-launcher pod")
        );
        o.mounted.insert("a".into());
        o.status = vec![entry("a", VolumePhase::MountedToPod, "", Some("pod-a"))];
        let p = plan(&o);
        // sda is the domain's: the next free one.
        assert_eq!(p[0].0, Step::Attach { volume: "a".into(), mode: Mode::Filesystem, target: "sdb".into() });
        assert_eq!(p[0].1.as_ref().map(|x| x.message.as_str()), Some("Successfully attach hotplugged volume a to VM"));
        o.attached.insert("a".into(), "sdb".into());
        o.status = vec![entry("a", VolumePhase::Ready, "sdb", Some("pod-a"))];
        assert!(steps(&o).is_empty());
    }

    #[test]
    fn a_removed_volume_is_detached_then_unmounted() {
        let mut o = observed();
        o.wanted.clear();
        o.status = vec![entry("a", VolumePhase::Ready, "sdb", Some("pod-a"))];
        o.mounted.insert("a".into());
        o.attached.insert("a".into(), "sdb".into());
        assert_eq!(steps(&o), vec![Step::Detach { volume: "a".into(), mode: Mode::Filesystem, target: "sdb".into() }]);
        o.attached.clear();
        let p = plan(&o);
        assert_eq!(p[0].0, Step::Unmount { volume: "a".into() });
        assert_eq!(p[0].1.as_ref().map(|x| x.phase.clone()), Some(VolumePhase::UnMountedFromPod));
        o.mounted.clear();
        o.status = vec![entry("a", VolumePhase::UnMountedFromPod, "sdb", Some("pod-a"))];
        assert!(steps(&o).is_empty(), "the controller takes it from here");
    }

    #[test]
    fn the_domains_hotplugged_disks_are_found_by_alias_and_source() {
        let xml = "<domain><devices>
            <disk type='file' device='disk'><source file='/var/run/kubevirt-private/vmi-disks/root/disk.img'/><target dev='vda' bus='virtio'/><alias name='ua-root'/></disk>
            <disk type='file' device='disk'><source file='/var/run/kubevirt/hotplug-disks/data.img'/><target dev='sdb' bus='scsi'/><alias name='ua-data'/></disk>
            <disk type='block' device='disk'><source dev='/var/run/kubevirt/hotplug-disks/raw'/><target dev='sdc' bus='scsi'/><alias name='ua-raw'/></disk>
        </devices></domain>";
        let (attached, targets) = domain_disks(xml);
        assert_eq!(attached, [("data".to_owned(), "sdb".to_owned()), ("raw".to_owned(), "sdc".to_owned())].into());
        assert_eq!(targets, ["sdb".to_owned(), "sdc".to_owned(), "vda".to_owned()].into());
    }
}
