//! Volume preparation against the real tools, in temporary roots (the contract's layout under a temp directory):
//! `qemu-img` overlays and emptyDisks checked with `qemu-img info`, cloud-init ISOs read back with `xorriso`,
//! Filesystem PVCs on a real (tmpfs) filesystem of known size, Block PVCs as device nodes, hostile containerDisks.
//! Needs root (chown to 107, mount, mknod).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

mod support;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use contracts::kubevirt::launcher;
use virt_launcher::cloudinit::Instance;
use virt_launcher::disks::{self, Context};
use virt_launcher::layout::Layout;

fn tools() {
    support::tools(&[("qemu-img", "qemu-utils"), ("xorriso", "xorriso"), ("xorrisofs", "xorriso")]);
}

fn instance() -> Instance {
    Instance { name: "testvmi".into(), namespace: "default".into(), hostname: "vm-host".into(), uuid: "u-1".into() }
}

fn volumes(json: serde_json::Value) -> Vec<crds::kubevirt::Volume> {
    serde_json::from_value(json).unwrap()
}

fn prepare(layout: &Layout, json: serde_json::Value) -> Result<launcher::Prepared, disks::Error> {
    let plans = disks::plan(&volumes(json))?;
    disks::prepare(&plans, &Context { layout, instance: &instance(), owner: 107 })
}

fn owner(p: &Path) -> (u32, u32) {
    let m = std::fs::metadata(p).unwrap();
    (m.uid(), m.gid())
}

fn mkparent(p: &Path) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
}

/// Extracts the ISO's files into a directory (xorriso reading it back) and returns its volume id.
fn read_iso(iso: &Path, into: &Path) -> String {
    let out = support::output("xorriso", &["-indev", iso.to_str().unwrap(), "-pvd_info"]);
    assert!(out.status.success(), "xorriso -pvd_info: {}", String::from_utf8_lossy(&out.stderr));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let volid = all
        .lines()
        .find_map(|l| l.strip_prefix("Volume Id    :"))
        .unwrap_or_else(|| panic!("no volume id in {all}"))
        .trim()
        .to_owned();
    support::run(
        "xorriso",
        &["-osirrox", "on", "-indev", iso.to_str().unwrap(), "-extract", "/", into.to_str().unwrap()],
    );
    volid
}

#[test]
fn container_disk_overlays_use_the_detected_format() {
    tools();
    let t = tempfile::tempdir().unwrap();
    let layout = Layout::under(t.path());
    let qcow = layout.at(launcher::container_disk_copy("root"));
    let raw = layout.at(launcher::container_disk_copy("data"));
    mkparent(&qcow);
    support::run("qemu-img", &["create", "-q", "-f", "qcow2", qcow.to_str().unwrap(), "64M"]);
    support::run("qemu-img", &["create", "-q", "-f", "raw", raw.to_str().unwrap(), "32M"]);
    let prepared = prepare(
        &layout,
        serde_json::json!([
            {"name": "root", "containerDisk": {"image": "registry:5000/cirros:devel"}},
            {"name": "data", "containerDisk": {"image": "registry:5000/data:devel"}},
        ]),
    )
    .unwrap();
    let formats: Vec<(&str, &str)> =
        prepared.container_disk_formats.iter().map(|(v, f)| (v.as_str(), f.as_str())).collect();
    assert_eq!(formats, [("data", "raw"), ("root", "qcow2")], "the node agent learns each backing format");
    assert!(prepared.block_volumes.is_empty());
    for (vol, copy, format, size) in [("root", &qcow, "qcow2", 64u64 << 20), ("data", &raw, "raw", 32 << 20)] {
        let overlay = layout.at(launcher::container_disk_overlay(vol));
        let info = support::qemu_img_info(&overlay);
        assert_eq!(info["format"], "qcow2", "{info}");
        assert_eq!(info["backing-filename"], copy.to_str().unwrap(), "{info}");
        assert_eq!(info["backing-filename-format"], format, "{info}");
        assert_eq!(info["virtual-size"], size, "{info}");
        assert_eq!(owner(&overlay), (107, 107));
        assert_eq!(owner(overlay.parent().unwrap()), (107, 107), "the overlay's directory");
    }
}

#[test]
fn hostile_container_disks_are_refused() {
    tools();
    let t = tempfile::tempdir().unwrap();
    let layout = Layout::under(t.path());
    let copy = layout.at(launcher::container_disk_copy("evil"));
    mkparent(&copy);
    let base = t.path().join("secret-base.raw");
    support::run("qemu-img", &["create", "-q", "-f", "raw", base.to_str().unwrap(), "1M"]);
    support::run(
        "qemu-img",
        &["create", "-q", "-f", "qcow2", "-F", "raw", "-b", base.to_str().unwrap(), copy.to_str().unwrap()],
    );
    let spec = serde_json::json!([{"name": "evil", "containerDisk": {"image": "evil:1"}}]);
    let err = prepare(&layout, spec.clone()).err().map(|e| e.to_string());
    assert_eq!(
        err,
        Some(format!(
            "volume \"evil\": the containerDisk image {} is refused: it has a backing file {:?}; images with backing \
             files are refused",
            copy.display(),
            base.to_str().unwrap()
        ))
    );
    assert!(!layout.at(launcher::container_disk_overlay("evil")).exists(), "no overlay over a refused image");

    // Not an image qemu-img accepts as raw/qcow2: a vmdk.
    std::fs::remove_file(&copy).unwrap();
    support::run("qemu-img", &["create", "-q", "-f", "vmdk", copy.to_str().unwrap(), "1M"]);
    let err = prepare(&layout, spec.clone()).err().map(|e| e.to_string()).unwrap();
    assert!(err.ends_with("is refused: its format is vmdk; only raw and qcow2 are supported"), "{err}");

    // Missing copy: the init container did not run.
    std::fs::remove_file(&copy).unwrap();
    let err = prepare(&layout, spec).err().map(|e| e.to_string());
    assert_eq!(
        err,
        Some(format!(
            "volume \"evil\": the containerDisk file {} is missing (the volume's init container copies it there)",
            copy.display()
        ))
    );
}

#[test]
fn empty_disks_are_sparse_qcow2() {
    tools();
    let t = tempfile::tempdir().unwrap();
    let layout = Layout::under(t.path());
    prepare(&layout, serde_json::json!([{"name": "scratch", "emptyDisk": {"capacity": "2Gi"}}])).unwrap();
    let path = layout.at(launcher::empty_disk("scratch"));
    let info = support::qemu_img_info(&path);
    assert_eq!(info["format"], "qcow2", "{info}");
    assert_eq!(info["virtual-size"], 2u64 << 30, "{info}");
    assert!(info["actual-size"].as_u64().unwrap() < 1 << 20, "sparse: {info}");
    assert_eq!(owner(&path), (107, 107));
}

#[test]
fn cloud_init_iso_reads_back_with_xorriso() {
    tools();
    let t = tempfile::tempdir().unwrap();
    let layout = Layout::under(t.path());
    let secret = layout.at(launcher::cloud_init_network_secret_dir("cloudinitdisk"));
    std::fs::create_dir_all(&secret).unwrap();
    std::fs::write(secret.join("networkData"), "version: 2\nethernets: {}\n").unwrap();
    let user_data = "#cloud-config\npassword: fedora\nchpasswd: { expire: False }\n";
    prepare(
        &layout,
        serde_json::json!([
            {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": user_data, "networkDataSecretRef": {"name": "net"}}},
            {"name": "drive", "cloudInitConfigDrive": {"userDataBase64": "I2Nsb3VkLWNvbmZpZwo="}},
        ]),
    )
    .unwrap();

    let iso = layout.at(launcher::cloud_init_disk("cloudinitdisk"));
    assert_eq!(owner(&iso), (107, 107));
    let out = t.path().join("nocloud");
    assert_eq!(read_iso(&iso, &out), "cidata");
    let read = |p: &str| std::fs::read_to_string(out.join(p)).unwrap();
    assert_eq!(read("user-data"), user_data);
    assert_eq!(read("meta-data"), "instance-id: testvmi.default\nlocal-hostname: vm-host\n");
    assert_eq!(read("network-config"), "version: 2\nethernets: {}\n");
    let mut names: Vec<String> =
        std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["meta-data", "network-config", "user-data"]);
    let leftovers: Vec<PathBuf> =
        std::fs::read_dir(iso.parent().unwrap()).unwrap().map(|e| e.unwrap().path()).filter(|p| *p != iso).collect();
    assert!(leftovers.is_empty(), "staging files left behind: {leftovers:?}");

    let iso = layout.at(launcher::cloud_init_config_drive_disk("drive"));
    let out = t.path().join("configdrive");
    assert_eq!(read_iso(&iso, &out), "config-2");
    let read = |p: &str| std::fs::read_to_string(out.join("openstack/latest").join(p)).unwrap();
    assert_eq!(read("user_data"), "#cloud-config\n");
    let meta: serde_json::Value = serde_json::from_str(&read("meta_data.json")).unwrap();
    assert_eq!(meta, serde_json::json!({"instance_id": "testvmi.default", "hostname": "vm-host", "uuid": "u-1"}));
    assert!(!out.join("openstack/latest/network_data.json").exists());
}

/// A tmpfs of `size` mounted at `dir`, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        support::run("mount", &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", dir.to_str().unwrap()]);
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = support::output("umount", &[self.0.to_str().unwrap()]);
    }
}

#[test]
fn filesystem_pvcs_get_a_sparse_image_sized_for_the_overhead() {
    tools();
    let t = tempfile::tempdir().unwrap();
    let layout = Layout::under(t.path());
    let mount = layout.at(launcher::pvc_mount("data"));
    let _fs = Tmpfs::mount(&mount, "64m");
    prepare(&layout, serde_json::json!([{"name": "data", "persistentVolumeClaim": {"claimName": "pvc-1"}}])).unwrap();
    let image = layout.at(launcher::pvc_disk("data"));
    let m = std::fs::metadata(&image).unwrap();
    // 64 MiB minus 5.5 % = 60.48 MiB → 60 MiB.
    assert_eq!(m.len(), 60 << 20);
    assert_eq!(m.len(), launcher::pvc_disk_size(64 << 20));
    assert_eq!(m.blocks(), 0, "sparse");
    assert_eq!((m.uid(), m.gid()), (107, 107));

    // An existing image (imported by CDI) is kept as it is, and handed to QEMU's user.
    std::fs::remove_file(&image).unwrap();
    std::fs::write(&image, b"imported").unwrap();
    prepare(&layout, serde_json::json!([{"name": "data", "dataVolume": {"name": "dv-1"}}])).unwrap();
    assert_eq!(std::fs::read(&image).unwrap(), b"imported");
    assert_eq!(owner(&image), (107, 107));
}

#[test]
fn block_pvcs_must_be_block_devices() {
    tools();
    let t = tempfile::tempdir().unwrap();
    let layout = Layout::under(t.path());
    let spec = serde_json::json!([{"name": "blk", "persistentVolumeClaim": {"claimName": "pvc-b"}}]);
    let device = layout.at(launcher::pvc_device("blk"));
    let mount = layout.at(launcher::pvc_mount("blk"));
    let err = prepare(&layout, spec.clone()).err().map(|e| e.to_string());
    assert_eq!(
        err,
        Some(format!(
            "volume \"blk\": the PVC is neither a block device at {} nor a filesystem mounted at {}",
            device.display(),
            mount.display()
        ))
    );
    mkparent(&device);
    std::fs::write(&device, b"").unwrap();
    let err = prepare(&layout, spec.clone()).err().map(|e| e.to_string());
    assert_eq!(err, Some(format!("volume \"blk\": {} is not a block device", device.display())));
    std::fs::remove_file(&device).unwrap();
    // A block device node (loop0's numbers; the node is only stat'ed and chowned).
    support::run("mknod", &[device.to_str().unwrap(), "b", "7", "0"]);
    let prepared = prepare(&layout, spec).unwrap();
    assert_eq!(prepared.block_volumes.iter().collect::<Vec<_>>(), ["blk"]);
    assert!(std::fs::metadata(&device).unwrap().file_type().is_block_device());
    assert_eq!(owner(&device), (107, 107));
}
