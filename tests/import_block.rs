//! Block-device DEST through loop devices (root needed): pre-filled devices must end up holding exactly
//! qemu-img's output (zero regions read back as zero), devices too small must be refused.
//!
//! Needs `tests/infra/import-env.sh up`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::os::unix::fs::FileTypeExt;

use integration_tests::messages as msg;
use integration_tests::*;

fn round_up_512(n: u64) -> u64 {
    n.div_ceil(512) * 512
}

/// Import into a device of exactly the image size, pre-filled with 0xA5.
fn prefilled(test: &str, name: &str, http: bool) {
    prefilled_with(test, name, http, false);
}

/// `scratch`: pass `--scratch DIR` (formats the importer converts from a seekable file).
fn prefilled_with(test: &str, name: &str, http: bool, scratch: bool) {
    let e = entry(name);
    let out = OutDir::new(test);
    let dev = LoopDev::new(out.path(), round_up_512(e.size), Some(0xA5));
    let source = if http { e.url() } else { e.path.to_str().unwrap().to_owned() };
    let mut cmd = Cmd::import(&source, dev.path());
    if scratch {
        let dir = out.join("scratch");
        std::fs::create_dir_all(&dir).unwrap();
        cmd = cmd.arg("--scratch").arg(dir);
    }
    let run = cmd.run();
    assert_success(&run);
    assert_image_eq(dev.path(), e, None);
    if let Some(off) = first_nonzero(dev.path(), e.size, round_up_512(e.size)) {
        panic!("device not zero after the image end at {off}");
    }
}

#[test]
fn prefilled_device_qcow2_with_zero_clusters() {
    prefilled("block-prefilled-q2-zero", "q2-zero.qcow2", false);
}

#[test]
fn prefilled_device_qcow2_extl2() {
    prefilled("block-prefilled-q2-extl2", "q2-extl2.qcow2", false);
}

#[test]
fn prefilled_device_raw_xz_over_http() {
    prefilled("block-prefilled-raw-xz-http", "base.raw.xz", true);
}

#[test]
fn prefilled_device_raw_local() {
    prefilled("block-prefilled-raw", "base.raw", false);
}

#[test]
fn prefilled_device_vmdk_stream_over_http_with_scratch() {
    prefilled_with("block-prefilled-vmdk-http", "vmdk-stream.vmdk", true, true);
}

#[test]
fn prefilled_device_vhdx() {
    prefilled("block-prefilled-vhdx", "vhdx-dyn.vhdx", false);
}

#[test]
fn larger_device_holds_the_image() {
    let e = entry("q2-snap.qcow2");
    let out = OutDir::new("block-larger");
    let dev = LoopDev::new(out.path(), 64 * MIB, Some(0xA5));
    let run = Cmd::import(&e.path, dev.path()).run();
    assert_success(&run);
    assert_image_eq(dev.path(), e, None);
}

#[test]
fn larger_device_with_size_zeroes_the_tail() {
    let e = entry("base.raw.gz");
    let out = OutDir::new("block-larger-size");
    let dev = LoopDev::new(out.path(), 64 * MIB, Some(0xA5));
    let run = Cmd::import(e.url(), dev.path()).args(["--size", "64Mi"]).run();
    assert_success(&run);
    assert_image_eq(dev.path(), e, None);
    if let Some(off) = first_nonzero(dev.path(), e.size, 64 * MIB) {
        panic!("--size 64Mi on a 64 MiB device: not zero at {off} (image ends at {})", e.size);
    }
}

fn too_small(test: &str, name: &str, http: bool, extra: &[&str]) {
    let e = entry(name);
    let out = OutDir::new(test);
    let dev = LoopDev::new(out.path(), 8 * MIB, None);
    let source = if http { e.url() } else { e.path.to_str().unwrap().to_owned() };
    let run = Cmd::import(&source, dev.path()).args(extra).run();
    assert_failed(&run, dev.path(), msg::TOO_LARGE);
    assert!(
        std::fs::metadata(dev.path()).is_ok_and(|m| m.file_type().is_block_device()),
        "the block device {} must survive a failed import",
        dev.path().display()
    );
}

#[test]
fn too_small_device_qcow2() {
    too_small("block-small-qcow2", "q2-v3.qcow2", false, &[]);
}

#[test]
fn too_small_device_raw_local() {
    too_small("block-small-raw", "base.raw", false, &[]);
}

#[test]
fn too_small_device_raw_xz() {
    too_small("block-small-raw-xz", "base.raw.xz", false, &[]);
}

#[test]
fn too_small_device_raw_gz_over_http() {
    too_small("block-small-raw-gz-http", "base-multi.raw.gz", true, &[]);
}

#[test]
fn too_small_device_big_sparse_qcow2() {
    too_small("block-small-big-qcow2", "big5g.qcow2", false, &[]);
}

#[test]
fn size_larger_than_device() {
    too_small("block-size-gt-device", "tiny.raw", false, &["--size", "16Mi"]);
}
