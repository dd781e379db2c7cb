//! Every corpus image imported from a local path and from nginx, compared with `qemu-img convert -O raw`;
//! `importer info` against `qemu-img info`; file:// URLs; --size; --preallocate; replacing an existing DEST.
//!
//! Needs `tests/infra/import-env.sh up`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::collections::BTreeSet;
use std::fs;

use integration_tests::messages as msg;
use integration_tests::*;

/// Import `e` from `source` into a fresh DEST and check content, sparseness and the JSON line.
fn import_and_check(test: &str, e: &Entry, source: &str) {
    import_and_check_with(test, e, source, false);
}

/// [`import_and_check`], optionally with `--scratch DIR` (which must be empty again afterwards).
fn import_and_check_with(test: &str, e: &Entry, source: &str, scratch: bool) {
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let scratch_dir = out.join("scratch");
    let mut cmd = Cmd::import(source, &dest).json();
    if scratch {
        fs::create_dir_all(&scratch_dir).unwrap();
        cmd = cmd.arg("--scratch").arg(&scratch_dir);
    }
    let run = cmd.run();
    assert_success(&run);
    if scratch {
        let left: Vec<_> = fs::read_dir(&scratch_dir).unwrap().flatten().map(|d| d.path()).collect();
        assert!(left.is_empty(), "{}: files left in the scratch dir: {left:?}", e.name);
    }
    assert_image_eq(&dest, e, None);
    assert_sparse(&dest, e);
    let j = check_import_json(&run, e, None);
    let written = j["bytes_written"].as_u64().unwrap();
    assert!(written <= e.size, "{}: bytes_written {written} > image size {}\n{}", e.name, e.size, run.describe());
}

fn import_local(name: &str) {
    let e = entry(name);
    import_and_check(&format!("formats-local-{name}"), e, e.path.to_str().unwrap());
}

fn import_http(name: &str) {
    let e = entry(name);
    import_and_check(&format!("formats-http-{name}"), e, &e.url());
}

fn import_local_scratch(name: &str) {
    let e = entry(name);
    import_and_check_with(&format!("formats-local-scratch-{name}"), e, e.path.to_str().unwrap(), true);
}

fn import_http_scratch(name: &str) {
    let e = entry(name);
    import_and_check_with(&format!("formats-http-scratch-{name}"), e, &e.url(), true);
}

fn info_local(name: &str) {
    let e = entry(name);
    check_info_json(&Cmd::info(&e.path).run(), e);
}

macro_rules! corpus_tests {
    ($($id:ident => $name:literal,)*) => {
        /// Every manifest entry, in the order of tests/infra/import-env.sh.
        const COVERED: &[&str] = &[$($name),*];
        $(
            mod $id {
                #[test]
                fn local() {
                    super::import_local($name)
                }
                #[test]
                fn http() {
                    super::import_http($name)
                }
                #[test]
                fn local_scratch() {
                    super::import_local_scratch($name)
                }
                #[test]
                fn http_scratch() {
                    super::import_http_scratch($name)
                }
                #[test]
                fn info() {
                    super::info_local($name)
                }
            }
        )*
    };
}

corpus_tests! {
    base_raw => "base.raw",
    small_raw => "small.raw",
    tiny_raw => "tiny.raw",
    big3g_raw => "big3g.raw",
    base_iso => "base.iso",
    q2_v2_qcow2 => "q2-v2.qcow2",
    q2_v3_qcow2 => "q2-v3.qcow2",
    q2_zlib_qcow2 => "q2-zlib.qcow2",
    q2_v2_zlib_qcow2 => "q2-v2-zlib.qcow2",
    q2_zstd_qcow2 => "q2-zstd.qcow2",
    q2_zero_qcow2 => "q2-zero.qcow2",
    q2_extl2_qcow2 => "q2-extl2.qcow2",
    q2_extl2_2m_qcow2 => "q2-extl2-2m.qcow2",
    q2_snap_qcow2 => "q2-snap.qcow2",
    q2_reverse_qcow2 => "q2-reverse.qcow2",
    q2_prealloc_qcow2 => "q2-prealloc.qcow2",
    q2_cs_512_qcow2 => "q2-cs-512.qcow2",
    q2_cs_1k_qcow2 => "q2-cs-1k.qcow2",
    q2_cs_2k_qcow2 => "q2-cs-2k.qcow2",
    q2_cs_4k_qcow2 => "q2-cs-4k.qcow2",
    q2_cs_8k_qcow2 => "q2-cs-8k.qcow2",
    q2_cs_16k_qcow2 => "q2-cs-16k.qcow2",
    q2_cs_32k_qcow2 => "q2-cs-32k.qcow2",
    q2_cs_64k_qcow2 => "q2-cs-64k.qcow2",
    q2_cs_128k_qcow2 => "q2-cs-128k.qcow2",
    q2_cs_256k_qcow2 => "q2-cs-256k.qcow2",
    q2_cs_512k_qcow2 => "q2-cs-512k.qcow2",
    q2_cs_1m_qcow2 => "q2-cs-1M.qcow2",
    q2_cs_2m_qcow2 => "q2-cs-2M.qcow2",
    q2_cs_512_zlib_qcow2 => "q2-cs-512-zlib.qcow2",
    q2_cs_4k_zlib_qcow2 => "q2-cs-4k-zlib.qcow2",
    q2_cs_2m_zstd_qcow2 => "q2-cs-2M-zstd.qcow2",
    vmdk_sparse_vmdk => "vmdk-sparse.vmdk",
    vmdk_stream_vmdk => "vmdk-stream.vmdk",
    vpc_dyn_vpc => "vpc-dyn.vpc",
    vpc_fixed_vpc => "vpc-fixed.vpc",
    vhdx_dyn_vhdx => "vhdx-dyn.vhdx",
    vhdx_1m_vhdx => "vhdx-1m.vhdx",
    vhdx_fixed_vhdx => "vhdx-fixed.vhdx",
    vdi_dyn_vdi => "vdi-dyn.vdi",
    vdi_static_vdi => "vdi-static.vdi",
    big5g_qcow2 => "big5g.qcow2",
    base_raw_gz => "base.raw.gz",
    base_raw_xz => "base.raw.xz",
    base_raw_zst => "base.raw.zst",
    base_raw_bz2 => "base.raw.bz2",
    base_xzmb_raw_xz => "base-xzmb.raw.xz",
    base_multi_raw_gz => "base-multi.raw.gz",
    base_multi_raw_zst => "base-multi.raw.zst",
    base_multi_raw_bz2 => "base-multi.raw.bz2",
    q2_v3_qcow2_gz => "q2-v3.qcow2.gz",
    q2_v3_qcow2_xz => "q2-v3.qcow2.xz",
    q2_v3_qcow2_zst => "q2-v3.qcow2.zst",
    q2_v3_qcow2_bz2 => "q2-v3.qcow2.bz2",
    q2_zstd_qcow2_xz => "q2-zstd.qcow2.xz",
    q2_snap_qcow2_gz => "q2-snap.qcow2.gz",
    vmdk_sparse_vmdk_gz => "vmdk-sparse.vmdk.gz",
    vmdk_stream_vmdk_xz => "vmdk-stream.vmdk.xz",
    vpc_dyn_vpc_bz2 => "vpc-dyn.vpc.bz2",
    vhdx_dyn_vhdx_zst => "vhdx-dyn.vhdx.zst",
    vdi_dyn_vdi_xz => "vdi-dyn.vdi.xz",
    base_iso_bz2 => "base.iso.bz2",
    base_iso_gz => "base.iso.gz",
    tiny_raw_gz => "tiny.raw.gz",
    big3g_raw_zst => "big3g.raw.zst",
    big5g_qcow2_xz => "big5g.qcow2.xz",
}

#[test]
fn every_corpus_entry_has_tests() {
    let manifest: BTreeSet<&str> = corpus().iter().map(|e| e.name.as_str()).collect();
    let covered: BTreeSet<&str> = COVERED.iter().copied().collect();
    let missing: Vec<_> = manifest.difference(&covered).collect();
    let stale: Vec<_> = covered.difference(&manifest).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "corpus_tests! list out of sync with the manifest: missing {missing:?}, not in corpus {stale:?}"
    );
}

#[test]
fn corpus_covers_every_format_and_wrapper() {
    let formats: BTreeSet<&str> = corpus().iter().map(|e| e.format.as_str()).collect();
    for f in ["raw", "qcow2", "vmdk", "vpc", "vhdx", "vdi"] {
        assert!(formats.contains(f), "corpus has no {f} image");
    }
    let comps: BTreeSet<&str> = corpus().iter().filter_map(|e| e.compression.as_deref()).collect();
    for c in ["gzip", "xz", "zstd", "bzip2"] {
        assert!(comps.contains(c), "corpus has no {c} image");
    }
    let cluster_sizes: BTreeSet<u64> =
        corpus().iter().filter(|e| e.format == "qcow2").filter_map(|e| e.cluster_size).collect();
    for bits in 9..=21 {
        assert!(cluster_sizes.contains(&(1 << bits)), "corpus has no qcow2 with cluster size {}", 1u64 << bits);
    }
    assert!(corpus().iter().any(|e| e.size >= 4 * GIB && e.alloc < 16 * MIB), "no multi-GiB sparse image");
}

/// The harness's expectations are qemu-img's: recompute a few now and compare with the manifest.
#[test]
fn manifest_agrees_with_qemu_img_now() {
    let out = OutDir::new("formats-manifest-check");
    for name in ["q2-snap.qcow2", "vpc-dyn.vpc", "base.iso", "q2-extl2.qcow2"] {
        let e = entry(name);
        let exp = qemu_convert(&e.inner, out.path());
        assert_eq!(file_len(&exp), e.size, "{name}: size of qemu-img's output");
        assert_eq!(
            Some(sha256_prefix(&exp, e.size)),
            e.sha256,
            "{name}: manifest sha256 is stale; rerun tests/infra/import-env.sh up"
        );
        fs::remove_file(&exp).unwrap();
    }
}

// ----- info over HTTP ---------------------------------------------------------------------------------------------

#[test]
fn info_http_qcow2() {
    let e = entry("q2-v3.qcow2");
    check_info_json(&Cmd::info(e.url()).run(), e);
}

#[test]
fn info_http_compressed_vmdk() {
    let e = entry("vmdk-stream.vmdk.xz");
    check_info_json(&Cmd::info(e.url()).run(), e);
}

#[test]
fn info_http_big_qcow2() {
    let e = entry("big5g.qcow2");
    check_info_json(&Cmd::info(e.url()).run(), e);
}

// ----- file:// and relative paths ----------------------------------------------------------------------------------

fn file_url(name: &str) {
    let e = entry(name);
    import_and_check(&format!("formats-fileurl-{name}"), e, &format!("file://{}", e.path.display()));
}

#[test]
fn file_url_raw() {
    file_url("base.raw");
}

#[test]
fn file_url_qcow2() {
    file_url("q2-v3.qcow2");
}

#[test]
fn file_url_vmdk() {
    file_url("vmdk-sparse.vmdk");
}

#[test]
fn file_url_compressed_qcow2() {
    file_url("q2-snap.qcow2.gz");
}

#[test]
fn file_url_big_sparse_qcow2() {
    file_url("big5g.qcow2");
}

#[test]
fn relative_source_path() {
    let e = entry("q2-zlib.qcow2");
    let out = OutDir::new("formats-relative-source");
    let dest = out.join("disk.img");
    let run = Cmd::import(&e.name, &dest).cwd(&env().corpus).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
}

// ----- --size -----------------------------------------------------------------------------------------------------

fn import_with_size(test: &str, name: &str, size_arg: &str, want: u64) {
    let e = entry(name);
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let run = Cmd::import(&e.path, &dest).args(["--size", size_arg]).run();
    assert_success(&run);
    assert_image_eq(&dest, e, Some(want));
    assert_sparse(&dest, e);
}

#[test]
fn size_grows_qcow2_bytes() {
    import_with_size("formats-size-bytes", "q2-v3.qcow2", "33554432", 32 * MIB);
}

#[test]
fn size_grows_raw_xz_mi_suffix() {
    import_with_size("formats-size-mi", "base.raw.xz", "48Mi", 48 * MIB);
}

#[test]
fn size_grows_vmdk_gi_suffix() {
    import_with_size("formats-size-gi", "vmdk-stream.vmdk", "1Gi", GIB);
}

#[test]
fn size_equal_to_virtual_size() {
    let e = entry("q2-zstd.qcow2");
    import_with_size("formats-size-equal", "q2-zstd.qcow2", &e.virtual_size.to_string(), e.size);
}

#[test]
fn size_grows_big_raw_over_http() {
    let e = entry("big3g.raw.zst");
    let out = OutDir::new("formats-size-big-http");
    let dest = out.join("disk.img");
    let run = Cmd::import(e.url(), &dest).args(["--size", "4Gi"]).run();
    assert_success(&run);
    assert_image_eq(&dest, e, Some(4 * GIB));
    assert_sparse(&dest, e);
}

/// `1G` / `64M`: decimal (Kubernetes quantity) or binary (qemu-img) are both accepted; it must be one of them.
#[test]
fn size_suffix_g_and_m() {
    for (arg, dec, bin) in [("1G", 1_000_000_000u64, GIB), ("64M", 64_000_000, 64 * MIB)] {
        let e = entry("q2-v3.qcow2");
        let out = OutDir::new(&format!("formats-size-suffix-{arg}"));
        let dest = out.join("disk.img");
        let run = Cmd::import(&e.path, &dest).args(["--size", arg]).run();
        assert_success(&run);
        let len = file_len(&dest);
        assert!(len == dec || len == bin, "--size {arg} gave {len} bytes, expected {dec} or {bin}");
        assert_image_eq(&dest, e, Some(len));
    }
}

fn size_too_small(test: &str, source: &str, e: &Entry, extra: &[&str]) {
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let requested = 8 * MIB;
    let run = Cmd::import(source, &dest).args(["--size", &requested.to_string()]).args(extra).run();
    assert_failed(&run, &dest, &[]);
    for s in msg::size_too_small(e.virtual_size, requested) {
        assert!(run.stderr.contains(&s), "the error should name both sizes ({s} missing)\n{}", run.describe());
    }
}

#[test]
fn size_too_small_qcow2() {
    let e = entry("q2-v3.qcow2");
    size_too_small("formats-size-small-qcow2", e.path.to_str().unwrap(), e, &[]);
}

#[test]
fn size_too_small_raw() {
    let e = entry("base.raw");
    size_too_small("formats-size-small-raw", e.path.to_str().unwrap(), e, &[]);
}

#[test]
fn size_too_small_qcow2_http() {
    let e = entry("q2-zlib.qcow2");
    size_too_small("formats-size-small-qcow2-http", &e.url(), e, &[]);
}

#[test]
fn size_too_small_vhdx_http_with_scratch() {
    let e = entry("vhdx-dyn.vhdx");
    let scratch = env().out.join("formats-size-small-vhdx-scratch");
    fs::create_dir_all(&scratch).unwrap();
    let s = scratch.to_str().unwrap().to_owned();
    size_too_small("formats-size-small-vhdx-http", &e.url(), e, &["--scratch", &s]);
    let _ = fs::remove_dir_all(&scratch);
}

// ----- DEST handling, preallocation -----------------------------------------------------------------------------

#[test]
fn existing_dest_is_replaced() {
    let e = entry("q2-snap.qcow2");
    let out = OutDir::new("formats-dest-replaced");
    let dest = out.join("disk.img");
    fs::write(&dest, vec![0xEEu8; (40 * MIB) as usize]).unwrap();
    let run = Cmd::import(&e.path, &dest).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    assert_sparse(&dest, e);
}

#[test]
fn preallocate() {
    let e = entry("q2-zero.qcow2");
    let out = OutDir::new("formats-preallocate");
    let dest = out.join("disk.img");
    let run = Cmd::import(&e.path, &dest).arg("--preallocate").run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    let a = allocated(&dest);
    assert!(a + 64 * KIB >= e.size, "--preallocate: only {a} of {} bytes allocated", e.size);
}

#[test]
fn preallocate_with_size() {
    let e = entry("base.raw.gz");
    let out = OutDir::new("formats-preallocate-size");
    let dest = out.join("disk.img");
    let run = Cmd::import(e.url(), &dest).args(["--preallocate", "--size", "40Mi"]).run();
    assert_success(&run);
    assert_image_eq(&dest, e, Some(40 * MIB));
    let a = allocated(&dest);
    assert!(a + 64 * KIB >= 40 * MIB, "--preallocate --size 40Mi: only {a} bytes allocated");
}

#[test]
fn missing_local_source() {
    let out = OutDir::new("formats-missing-source");
    let dest = out.join("disk.img");
    let run = Cmd::import(out.join("does-not-exist.qcow2"), &dest).run();
    assert_failed(&run, &dest, msg::NOT_FOUND);
}
