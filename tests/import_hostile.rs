//! Hostile and broken input: every case must fail with a non-zero exit, one specific line on stderr (substrings:
//! tests/src/messages.rs), no panic, and no DEST left behind — from a local path and from nginx.
//! Images are qemu-img-made (tests/infra/import-env.sh) and patched here (tests/src/hostile.rs). Also: child images
//! of the formats delegated to qemu-img, qemu-img stopped by its resource limits or a signal, and virtual sizes
//! larger than the target filesystem's largest file.
//!
//! Needs `tests/infra/import-env.sh up`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs;
use std::path::{Path, PathBuf};

use integration_tests::hostile::{self as h, off};
use integration_tests::messages as msg;
use integration_tests::*;

/// A crafted source and extra importer arguments.
struct Craft {
    file: PathBuf,
    args: Vec<String>,
    /// Pass `--scratch DIR` (formats the importer converts from a seekable file); DIR must be empty afterwards.
    scratch: bool,
}

impl Craft {
    fn new(file: PathBuf) -> Self {
        Craft { file, args: Vec::new(), scratch: false }
    }
    fn with_scratch(mut self) -> Self {
        self.scratch = true;
        self
    }
    fn arg(mut self, a: &str) -> Self {
        self.args.push(a.to_owned());
        self
    }
}

fn hostile_file(name: &str) -> PathBuf {
    env().hostile.join(name)
}

/// A copy of the valid qemu-img-made v3 qcow2 base (5 MiB of small.raw).
fn base_qcow2(dir: &Path) -> PathBuf {
    h::copy_to(&hostile_file("base.qcow2"), dir, "hostile.qcow2")
}

fn corpus_copy(dir: &Path, name: &str) -> PathBuf {
    h::copy_to(&entry(name).path, dir, &format!("hostile-{name}"))
}

/// Runs qemu-img in `dir`; panics with its stderr when it fails.
fn qemu_img(dir: &Path, args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new("qemu-img").args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "qemu-img {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// A child vmdk made by qemu-img (`create -b`) over a copy of the corpus' sparse vmdk.
fn vmdk_child(d: &Path) -> PathBuf {
    let base = corpus_copy(d, "vmdk-sparse.vmdk");
    let base = base.file_name().unwrap().to_str().unwrap();
    qemu_img(d, &["create", "-q", "-f", "vmdk", "-b", base, "-F", "vmdk", "child.vmdk"]);
    d.join("child.vmdk")
}

/// A differencing VHD: the corpus' dynamic VHD made disk type 4 with a parent (checksums fixed).
fn vhd_differencing(d: &Path) -> PathBuf {
    let f = corpus_copy(d, "vpc-dyn.vpc");
    h::vhd_make_differencing(&f, "base.vhd");
    f
}

/// A VHDX with a parent locator but without the has-parent flag (qemu-img reads it alone).
fn vhdx_locator_only(d: &Path) -> PathBuf {
    let f = corpus_copy(d, "vhdx-dyn.vhdx");
    h::vhdx_add_parent_locator(&f, "base.vhdx");
    f
}

/// A vmdk delta disk without a parentFileNameHint (qemu-img reads it alone).
fn vmdk_parent_cid_only(d: &Path, name: &str) -> PathBuf {
    let f = corpus_copy(d, name);
    h::vmdk_descriptor_replace(&f, "parentCID=ffffffff", "parentCID=0badc0de");
    f
}

fn run_case(test: &str, http: bool, craft: fn(&Path) -> Craft, expect: &[&str]) {
    let out = OutDir::new(test);
    let c = craft(out.path());
    let dest = out.join("dest.img");
    let source = if http { env().url_for(&c.file) } else { c.file.to_str().unwrap().to_owned() };
    let scratch = out.join("scratch");
    let mut cmd = Cmd::import(&source, &dest).args(&c.args);
    if c.scratch {
        fs::create_dir_all(&scratch).unwrap();
        cmd = cmd.arg("--scratch").arg(&scratch);
    }
    let run = cmd.run();
    assert_failed(&run, &dest, expect);
    if c.scratch {
        let left: Vec<_> = fs::read_dir(&scratch).unwrap().flatten().map(|d| d.path()).collect();
        assert!(left.is_empty(), "files left in the scratch dir after a failure: {left:?}");
    }
}

macro_rules! hostile_cases {
    ($($id:ident: $craft:expr => $expect:expr;)*) => {
        $(
            mod $id {
                use super::*;
                #[test]
                fn local() {
                    run_case(concat!("hostile-local-", stringify!($id)), false, $craft, $expect)
                }
                #[test]
                fn http() {
                    run_case(concat!("hostile-http-", stringify!($id)), true, $craft, $expect)
                }
            }
        )*
    };
}

hostile_cases! {
    // --- features the importer must refuse ---
    backing_file: |_| Craft::new(hostile_file("backing.qcow2"))
        => msg::BACKING_FILE;
    data_file: |_| Craft::new(hostile_file("datafile.qcow2"))
        => msg::DATA_FILE;
    encrypted_aes: |d| {
        // qemu-img made it if it still can; else patch crypt_method=1 into a plain image
        let made = hostile_file("aes.qcow2");
        if made.is_file() {
            Craft::new(h::copy_to(&made, d, "aes.qcow2"))
        } else {
            let f = base_qcow2(d);
            h::set_be32(&f, off::CRYPT_METHOD, 1);
            Craft::new(f)
        }
    } => msg::ENCRYPTED;
    encrypted_aes_patched: |d| {
        let f = base_qcow2(d);
        h::set_be32(&f, off::CRYPT_METHOD, 1);
        Craft::new(f)
    } => msg::ENCRYPTED;
    encrypted_luks: |d| Craft::new(h::copy_to(&hostile_file("luks.qcow2"), d, "luks.qcow2")) => msg::ENCRYPTED;
    unknown_incompatible_feature_high: |d| {
        let f = base_qcow2(d);
        let v = h::be64(&f, off::INCOMPATIBLE_FEATURES);
        h::set_be64(&f, off::INCOMPATIBLE_FEATURES, v | 1 << 40);
        Craft::new(f)
    } => msg::INCOMPATIBLE_FEATURE;
    unknown_incompatible_feature_bit5: |d| {
        let f = base_qcow2(d);
        let v = h::be64(&f, off::INCOMPATIBLE_FEATURES);
        h::set_be64(&f, off::INCOMPATIBLE_FEATURES, v | 1 << 5);
        Craft::new(f)
    } => msg::INCOMPATIBLE_FEATURE;
    unknown_compression_type: |d| {
        let f = base_qcow2(d);
        let v = h::be64(&f, off::INCOMPATIBLE_FEATURES);
        h::set_be64(&f, off::INCOMPATIBLE_FEATURES, v | 1 << 3);
        h::patch(&f, off::COMPRESSION_TYPE, &[7]);
        Craft::new(f)
    } => msg::COMPRESSION_TYPE;
    version_4: |d| {
        let f = base_qcow2(d);
        h::set_be32(&f, off::VERSION, 4);
        Craft::new(f)
    } => msg::VERSION;
    version_1: |d| {
        let f = base_qcow2(d);
        h::set_be32(&f, off::VERSION, 1);
        Craft::new(f)
    } => msg::VERSION;
    cluster_bits_8: |d| {
        let f = base_qcow2(d);
        h::set_be32(&f, off::CLUSTER_BITS, 8);
        Craft::new(f)
    } => msg::CLUSTER_SIZE;
    cluster_bits_22: |d| {
        let f = base_qcow2(d);
        h::set_be32(&f, off::CLUSTER_BITS, 22);
        Craft::new(f)
    } => msg::CLUSTER_SIZE;

    // --- metadata pointing outside the file or into the header ---
    l1_table_beyond_end: |d| {
        let f = base_qcow2(d);
        h::set_be64(&f, off::L1_TABLE_OFFSET, h::beyond_eof(&f));
        Craft::new(f)
    } => msg::BEYOND_END;
    l1_table_in_header_cluster: |d| {
        let f = base_qcow2(d);
        h::set_be64(&f, off::L1_TABLE_OFFSET, 0);
        Craft::new(f)
    } => msg::OVERLAPS_HEADER;
    l1_table_unaligned: |d| {
        let f = base_qcow2(d);
        let l1 = h::be64(&f, off::L1_TABLE_OFFSET);
        h::set_be64(&f, off::L1_TABLE_OFFSET, l1 + 8);
        Craft::new(f)
    } => msg::UNALIGNED;
    refcount_table_beyond_end: |d| {
        let f = base_qcow2(d);
        h::set_be64(&f, off::REFCOUNT_TABLE_OFFSET, h::beyond_eof(&f));
        Craft::new(f)
    } => msg::BEYOND_END;
    refcount_table_in_header_cluster: |d| {
        let f = base_qcow2(d);
        h::set_be64(&f, off::REFCOUNT_TABLE_OFFSET, 0);
        Craft::new(f)
    } => msg::OVERLAPS_HEADER;
    l2_table_beyond_end: |d| {
        let f = base_qcow2(d);
        let (at, v) = h::first_l1_entry(&f);
        h::set_be64(&f, at, (v & !h::OFFSET_MASK) | h::beyond_eof(&f));
        Craft::new(f)
    } => msg::BEYOND_END;
    l2_table_unaligned: |d| {
        let f = base_qcow2(d);
        let (at, v) = h::first_l1_entry(&f);
        h::set_be64(&f, at, v + 512);
        Craft::new(f)
    } => msg::UNALIGNED;
    data_cluster_beyond_end: |d| {
        let f = base_qcow2(d);
        let (at, v) = h::first_data_l2_entry(&f);
        h::set_be64(&f, at, (v & !h::OFFSET_MASK) | h::beyond_eof(&f));
        Craft::new(f)
    } => msg::BEYOND_END;
    v2_l2_table_beyond_end: |d| {
        let f = h::copy_to(&hostile_file("base-v2.qcow2"), d, "hostile-v2.qcow2");
        let (at, v) = h::first_l1_entry(&f);
        h::set_be64(&f, at, (v & !h::OFFSET_MASK) | h::beyond_eof(&f));
        Craft::new(f)
    } => msg::BEYOND_END;

    // --- absurd sizes ---
    absurd_l1_size: |d| {
        let f = base_qcow2(d);
        h::set_be32(&f, off::L1_SIZE, 0x0800_0000);
        Craft::new(f)
    } => msg::TOO_LARGE;
    absurd_l1_size_max: |d| {
        let f = base_qcow2(d);
        h::set_be32(&f, off::L1_SIZE, u32::MAX);
        Craft::new(f)
    } => msg::TOO_LARGE;
    absurd_virtual_size: |d| {
        let f = base_qcow2(d);
        h::set_be64(&f, off::SIZE, 1 << 62);
        Craft::new(f)
    } => msg::TOO_LARGE;
    virtual_size_u64_max: |d| {
        let f = base_qcow2(d);
        h::set_be64(&f, off::SIZE, u64::MAX);
        Craft::new(f)
    } => msg::TOO_LARGE;

    // --- truncated files ---
    truncated_qcow2: |d| {
        let f = base_qcow2(d);
        h::truncate_percent(&f, 60);
        Craft::new(f)
    } => msg::TRUNCATED_OR_BEYOND_END;
    truncated_qcow2_in_header: |d| {
        let f = base_qcow2(d);
        h::truncate(&f, 100);
        Craft::new(f)
    } => msg::TRUNCATED;
    truncated_qcow2_zlib: |d| {
        let f = corpus_copy(d, "q2-zlib.qcow2");
        h::truncate_percent(&f, 70);
        Craft::new(f)
    } => msg::TRUNCATED_OR_BEYOND_END;
    truncated_vmdk: |d| {
        let f = corpus_copy(d, "vmdk-sparse.vmdk");
        h::truncate_percent(&f, 60);
        Craft::new(f).with_scratch()
    } => msg::TRUNCATED_OR_BEYOND_END;
    truncated_vmdk_stream_optimized: |d| {
        let f = corpus_copy(d, "vmdk-stream.vmdk");
        h::truncate_percent(&f, 60);
        Craft::new(f).with_scratch()
    } => msg::TRUNCATED_OR_BEYOND_END;
    truncated_vhdx: |d| {
        let f = corpus_copy(d, "vhdx-dyn.vhdx");
        h::truncate_percent(&f, 60);
        Craft::new(f).with_scratch()
    } => msg::TRUNCATED_OR_BEYOND_END;
    truncated_vdi: |d| {
        let f = corpus_copy(d, "vdi-dyn.vdi");
        h::truncate_percent(&f, 60);
        Craft::new(f).with_scratch()
    } => msg::TRUNCATED_OR_BEYOND_END;
    truncated_vpc: |d| {
        let f = corpus_copy(d, "vpc-dyn.vpc");
        h::truncate_percent(&f, 60);
        Craft::new(f).with_scratch()
    } => msg::TRUNCATED_OR_BEYOND_END;
    truncated_gz: |d| {
        let f = corpus_copy(d, "base.raw.gz");
        h::truncate_percent(&f, 50);
        Craft::new(f)
    } => msg::TRUNCATED;
    truncated_xz: |d| {
        let f = corpus_copy(d, "base.raw.xz");
        h::truncate_percent(&f, 50);
        Craft::new(f)
    } => msg::TRUNCATED;
    truncated_zst: |d| {
        let f = corpus_copy(d, "base.raw.zst");
        h::truncate_percent(&f, 50);
        Craft::new(f)
    } => msg::TRUNCATED;
    truncated_bz2: |d| {
        let f = corpus_copy(d, "base.raw.bz2");
        h::truncate_percent(&f, 50);
        Craft::new(f)
    } => msg::TRUNCATED;
    truncated_qcow2_xz: |d| {
        let f = corpus_copy(d, "q2-v3.qcow2.xz");
        h::truncate_percent(&f, 50);
        Craft::new(f)
    } => msg::TRUNCATED_OR_BEYOND_END;

    // --- corrupt data ---
    corrupt_gz: |d| {
        let f = corpus_copy(d, "base.raw.gz");
        h::corrupt(&f, file_len(&f) / 2, 64);
        Craft::new(f)
    } => msg::CORRUPT_STREAM;
    corrupt_xz: |d| {
        let f = corpus_copy(d, "base.raw.xz");
        h::corrupt(&f, file_len(&f) / 2, 64);
        Craft::new(f)
    } => msg::CORRUPT_STREAM;
    corrupt_qcow2_compressed_cluster: |d| {
        let f = corpus_copy(d, "q2-zlib.qcow2");
        let (_, _, data) = h::first_compressed_l2_entry(&f);
        h::corrupt(&f, data, 32);
        Craft::new(f)
    } => msg::CORRUPT_STREAM;

    // --- content larger than --size ---
    raw_xz_larger_than_size: |d| Craft::new(corpus_copy(d, "base.raw.xz")).arg("--size").arg("8Mi") => msg::TOO_LARGE;
    raw_gz_multi_member_larger_than_size: |d| {
        Craft::new(corpus_copy(d, "base-multi.raw.gz")).arg("--size").arg("16Mi")
    } => msg::TOO_LARGE;
    raw_bz2_larger_than_size: |d| Craft::new(corpus_copy(d, "base.raw.bz2")).arg("--size").arg("8Mi") => msg::TOO_LARGE;
    qcow2_larger_than_size: |d| Craft::new(corpus_copy(d, "q2-v3.qcow2")).arg("--size").arg("8Mi") => msg::TOO_LARGE;
    big_qcow2_xz_larger_than_size: |d| {
        Craft::new(corpus_copy(d, "big5g.qcow2.xz")).arg("--size").arg("1Gi")
    } => msg::TOO_LARGE;

    // --- child images of the formats delegated to qemu-img: refused whatever `qemu-img info` reports ---
    vmdk_child_made_by_qemu_img: |d| Craft::new(vmdk_child(d)).with_scratch() => msg::PARENT_IMAGE;
    vmdk_parent_cid_without_hint: |d| {
        Craft::new(vmdk_parent_cid_only(d, "vmdk-sparse.vmdk")).with_scratch()
    } => msg::PARENT_IMAGE;
    vmdk_stream_optimized_parent_cid: |d| {
        Craft::new(vmdk_parent_cid_only(d, "vmdk-stream.vmdk")).with_scratch()
    } => msg::PARENT_IMAGE;
    vhd_differencing_disk: |d| Craft::new(vhd_differencing(d)).with_scratch() => msg::PARENT_IMAGE;
    vhdx_has_parent_flag: |d| {
        let f = corpus_copy(d, "vhdx-dyn.vhdx");
        h::vhdx_set_has_parent(&f);
        Craft::new(f).with_scratch()
    } => msg::PARENT_IMAGE;
    vhdx_parent_locator: |d| Craft::new(vhdx_locator_only(d)).with_scratch() => msg::PARENT_IMAGE;
    vdi_differencing: |d| {
        let f = corpus_copy(d, "vdi-dyn.vdi");
        h::vdi_set_type(&f, 4);
        Craft::new(f).with_scratch()
    } => msg::PARENT_IMAGE;
    vdi_undo: |d| {
        let f = corpus_copy(d, "vdi-dyn.vdi");
        h::vdi_set_type(&f, 3);
        Craft::new(f).with_scratch()
    } => msg::PARENT_IMAGE;
    vdi_parent_uuid: |d| {
        let f = corpus_copy(d, "vdi-static.vdi");
        h::vdi_set_parent_uuid(&f, [0x42; 16]);
        Craft::new(f).with_scratch()
    } => msg::PARENT_IMAGE;
}

// ----- child images: what qemu-img misses, what info reports ------------------------------------------------------

/// The defect the child-image cases guard against: qemu-img reads these as standalone disks (no backing file
/// reported, convert succeeds and writes only the child layer), so only the importer's reading of the bytes can
/// refuse them. (qemu-img refuses VHDX children itself, as "Operation not supported".)
#[test]
fn qemu_img_reads_these_child_images_as_standalone_disks() {
    let out = OutDir::new("hostile-children-qemu-img");
    let d = out.path();
    for (f, fmt) in [
        (vhd_differencing(d), "vpc"),
        (vmdk_parent_cid_only(d, "vmdk-sparse.vmdk"), "vmdk"),
        (vmdk_parent_cid_only(d, "vmdk-stream.vmdk"), "vmdk"),
    ] {
        let name = f.to_str().unwrap();
        let info = qemu_img(d, &["info", "-f", fmt, "--output=json", name]);
        let j: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
        assert!(j.get("backing-filename").is_none(), "qemu-img now reports a backing file for {name}: {j}");
        qemu_img(d, &["convert", "-f", fmt, "-O", "raw", name, "converted.raw"]);
    }
}

#[test]
fn info_reports_child_images() {
    let out = OutDir::new("hostile-children-info");
    let d = out.path();
    let vdi = corpus_copy(d, "vdi-dyn.vdi");
    h::vdi_set_type(&vdi, 4);
    for f in
        [vhd_differencing(d), vhdx_locator_only(d), vmdk_parent_cid_only(d, "vmdk-stream.vmdk"), vmdk_child(d), vdi]
    {
        let run = Cmd::info(&f).run();
        assert_success(&run);
        assert_eq!(run.json()["backing_file"].as_bool(), Some(true), "info {}\n{}", f.display(), run.describe());
    }
}

// ----- qemu-img resource limits -------------------------------------------------------------------------------------

/// A qemu-img that runs out of its address space is reported with the limit (glibc's "Cannot allocate memory"
/// under the 1 GiB limit of `qemu-img info`).
#[test]
fn qemu_img_info_out_of_memory_is_reported() {
    let body = "echo \"qemu-img: Could not open '$4': Cannot allocate memory\" >&2; exit 1";
    let run = import_with_qemu_img("hostile-qemu-img-memory", body, msg::QEMU_IMG_OUT_OF_MEMORY);
    assert!(run.stderr.contains("qemu-img info ran out of memory (address space limit 1 GiB)"), "{}", run.describe());
}

/// The sparse vmdk that makes `qemu-img info` allocate about 2 GiB never reaches qemu-img: the native reader
/// refuses its multi-extent header.
#[test]
fn the_vmdk_memory_bomb_is_refused_natively() {
    let out = OutDir::new("hostile-vmdk-memory-bomb");
    let src = h::vmdk_memory_bomb(out.path());
    let dest = out.join("dest.img");
    let run = Cmd::import(&src, &dest).run();
    assert_failed(&run, &dest, &["multi-file images are refused"]);
    assert!(!run.stderr.contains("qemu-img"), "{}", run.describe());
}

/// An executable script in `dir` used as `QEMU_IMG`.
fn fake_qemu_img(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("fake-qemu-img");
    fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// Imports a copy of the corpus' dynamic vdi (a format delegated to qemu-img) with `QEMU_IMG` running `body`;
/// returns the run.
fn import_with_qemu_img(test: &str, body: &str, expect: &[&str]) -> Output {
    let out = OutDir::new(test);
    // vdi: a format still delegated to qemu-img.
    let src = corpus_copy(out.path(), "vdi-dyn.vdi");
    let fake = fake_qemu_img(out.path(), body);
    let dest = out.join("dest.img");
    let run = Cmd::import(&src, &dest).env("QEMU_IMG", fake.to_str().unwrap()).run();
    assert_failed(&run, &dest, expect);
    run
}

/// Prints the limits the script runs under on one stderr line.
const PRINT_LIMITS: &str = "sleep 0.3; echo \"$(grep -E 'Max (cpu time|address space|core file size)' /proc/self/limits \
                            | tr -s ' ' | tr '\\n' ';') arenas=$MALLOC_ARENA_MAX\" >&2";

/// `qemu-img info` and `check` run with 1 GiB of address space, 30 s of CPU (SIGKILL 5 s later) and no core dumps.
#[test]
fn qemu_img_info_runs_with_limits() {
    let run = import_with_qemu_img("hostile-qemu-img-limits-info", &format!("{PRINT_LIMITS}; exit 1"), &[]);
    for want in
        ["Max cpu time 30 35 seconds", "Max address space 1073741824 1073741824 bytes", "Max core file size 0 0"]
    {
        assert!(run.stderr.contains(want), "qemu-img info should run with `{want}`\n{}", run.describe());
    }
}

/// `qemu-img convert` runs with 2 GiB of address space, 60 s + 30 s per GiB of CPU and a few malloc arenas.
#[test]
fn qemu_img_convert_runs_with_limits() {
    let body = format!("case \"$1\" in convert) {PRINT_LIMITS}; exit 1;; *) exec qemu-img \"$@\";; esac");
    let run = import_with_qemu_img("hostile-qemu-img-limits-convert", &body, &[]);
    // the image is 24 MiB: one GiB started
    for want in ["Max cpu time 90 95 seconds", "Max address space 2147483648 2147483648 bytes", "arenas=4"] {
        assert!(run.stderr.contains(want), "qemu-img convert should run with `{want}`\n{}", run.describe());
    }
}

#[test]
fn qemu_img_killed_by_a_signal_is_reported() {
    let run = import_with_qemu_img("hostile-qemu-img-sigkill", "kill -KILL $$", &["killed by signal 9 (SIGKILL)"]);
    assert!(run.stderr.contains("qemu-img info was killed by signal 9 (SIGKILL)"), "{}", run.describe());
}

/// What the CPU limit ends qemu-img with (the limit itself is exercised by the importer's unit tests).
#[test]
fn qemu_img_cpu_limit_is_reported() {
    let run = import_with_qemu_img("hostile-qemu-img-sigxcpu", "kill -XCPU $$", &["CPU time limit"]);
    assert!(run.stderr.contains("qemu-img info exceeded its CPU time limit of 30 s"), "{}", run.describe());
}

#[test]
fn qemu_img_failing_silently_names_its_status() {
    let run = import_with_qemu_img("hostile-qemu-img-silent", "exit 7", &["exited with status 7 without a message"]);
    assert!(!run.stderr.contains("failed without a message"), "{}", run.describe());
}

// ----- virtual sizes the target filesystem cannot hold -------------------------------------------------------------

/// A directory on a filesystem whose largest file is below 64 TiB: the out dir when it is on ext2/3/4 (4 KiB
/// blocks: 16 TiB), else a small ext4 filesystem mounted from a loop device (unmounted on drop).
struct SmallFs {
    dir: PathBuf,
    mounted: bool,
}

impl SmallFs {
    fn new(out: &OutDir) -> SmallFs {
        const EXT_MAGIC: u64 = 0xEF53;
        let on_ext = rustix::fs::statfs(out.path()).map(|s| s.f_type as u64 == EXT_MAGIC).unwrap();
        if on_ext {
            return SmallFs { dir: out.path().to_path_buf(), mounted: false };
        }
        let img = out.join("ext4.img");
        fs::File::create(&img).unwrap().set_len(64 * MIB).unwrap();
        let mkfs = std::process::Command::new("mkfs.ext4").args(["-q", "-F", "-b", "4096"]).arg(&img).output().unwrap();
        assert!(mkfs.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&mkfs.stderr));
        let dir = out.join("ext4");
        fs::create_dir_all(&dir).unwrap();
        let mount = std::process::Command::new("mount").args(["-o", "loop"]).arg(&img).arg(&dir).output().unwrap();
        assert!(mount.status.success(), "mount -o loop (needs root): {}", String::from_utf8_lossy(&mount.stderr));
        SmallFs { dir, mounted: true }
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        if self.mounted {
            let _ = std::process::Command::new("umount").arg(&self.dir).status();
        }
    }
}

/// Imports `src` (made in `d` by `make`) into a 16-TiB-limited filesystem: fails before writing, naming the
/// requested size and the filesystem's largest file, which is checked to be exactly that.
fn too_large_for_the_filesystem(test: &str, make: fn(&Path) -> PathBuf, extra: &[&str], requested: u64) {
    let out = OutDir::new(test);
    let fs_dir = SmallFs::new(&out);
    let src = make(out.path());
    let dest = fs_dir.dir.join("dest.img");
    let run = Cmd::import(&src, &dest).args(extra).run();
    assert_failed(&run, &dest, msg::FILE_TOO_LARGE);
    let line = run.stderr_lines().last().copied().unwrap_or_default().to_owned();
    assert!(line.contains(&format!("target size {requested} bytes")), "{}", run.describe());
    let max: u64 = line
        .rsplit_once('(')
        .and_then(|(_, m)| m.strip_suffix(" bytes)"))
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("no largest size in the message\n{}", run.describe()));
    let probe = fs_dir.dir.join("probe");
    let f = fs::File::create(&probe).unwrap();
    f.set_len(max).unwrap_or_else(|e| panic!("the reported largest size {max} does not fit: {e}"));
    let e = f.set_len(max + 1).err().and_then(|e| e.raw_os_error());
    assert_eq!(e, Some(27), "a file of {} bytes (reported largest + 1) should be EFBIG", max + 1);
    drop(f);
    fs::remove_file(&probe).unwrap();
}

const TIB64: u64 = 64 << 40;

#[test]
fn qcow2_larger_than_the_filesystem_allows() {
    too_large_for_the_filesystem(
        "hostile-efbig-qcow2",
        |d| {
            qemu_img(d, &["create", "-q", "-f", "qcow2", "big.qcow2", "64T"]);
            d.join("big.qcow2")
        },
        &[],
        TIB64,
    );
}

#[test]
fn vhdx_larger_than_the_filesystem_allows() {
    too_large_for_the_filesystem(
        "hostile-efbig-vhdx",
        |d| {
            qemu_img(d, &["create", "-q", "-f", "vhdx", "big.vhdx", "64T"]);
            d.join("big.vhdx")
        },
        &[],
        TIB64,
    );
}

#[test]
fn size_larger_than_the_filesystem_allows() {
    too_large_for_the_filesystem("hostile-efbig-size", |d| corpus_copy(d, "tiny.raw"), &["--size", "64Ti"], TIB64);
}

// ----- patched but valid: must import like qemu-img -------------------------------------------------------------

fn valid_patched(test: &str, http: bool, patch: fn(&Path)) {
    let out = OutDir::new(test);
    let f = base_qcow2(out.path());
    patch(&f);
    let dest = out.join("dest.img");
    let source = if http { env().out_url(&f) } else { f.to_str().unwrap().to_owned() };
    let run = Cmd::import(&source, &dest).run();
    assert_success(&run);
    assert_matches_qemu(&dest, &f, out.path());
}

fn set_unknown_compatible_bits(f: &Path) {
    let c = h::be64(f, off::COMPATIBLE_FEATURES);
    h::set_be64(f, off::COMPATIBLE_FEATURES, c | 1 << 40);
    let a = h::be64(f, off::AUTOCLEAR_FEATURES);
    h::set_be64(f, off::AUTOCLEAR_FEATURES, a | 1 << 40);
}

fn set_dirty_bit(f: &Path) {
    let v = h::be64(f, off::INCOMPATIBLE_FEATURES);
    h::set_be64(f, off::INCOMPATIBLE_FEATURES, v | 1);
}

#[test]
fn unknown_compatible_and_autoclear_bits_are_ignored_local() {
    valid_patched("hostile-ok-compat-local", false, set_unknown_compatible_bits);
}

#[test]
fn unknown_compatible_and_autoclear_bits_are_ignored_http() {
    valid_patched("hostile-ok-compat-http", true, set_unknown_compatible_bits);
}

/// qemu-img reads a dirty image read-only without complaint; so must the importer.
#[test]
fn dirty_bit_is_readable_local() {
    valid_patched("hostile-ok-dirty-local", false, set_dirty_bit);
}

#[test]
fn dirty_bit_is_readable_http() {
    valid_patched("hostile-ok-dirty-http", true, set_dirty_bit);
}

#[test]
fn hostile_bases_are_what_the_tests_assume() {
    let base = h::Qcow2Header::read(&hostile_file("base.qcow2"));
    assert_eq!(base.version, 3);
    assert_eq!(base.incompatible, 0);
    assert_eq!(h::Qcow2Header::read(&hostile_file("base-v2.qcow2")).version, 2);
    assert_eq!(h::be32(&hostile_file("luks.qcow2"), off::CRYPT_METHOD), 2, "luks.qcow2 crypt_method");
    let aes = hostile_file("aes.qcow2");
    if aes.is_file() {
        assert_eq!(h::be32(&aes, off::CRYPT_METHOD), 1, "aes.qcow2 crypt_method");
    }
    assert_ne!(h::be64(&hostile_file("backing.qcow2"), off::BACKING_FILE_OFFSET), 0);
    // the backing file exists: refusing it must not depend on it being missing
    let b = hostile_file("backing.qcow2");
    let (bo, bl) = (h::be64(&b, off::BACKING_FILE_OFFSET), h::be32(&b, 16));
    let backing = String::from_utf8(h::read_bytes(&b, bo, bl as usize)).unwrap();
    assert!(Path::new(&backing).is_file(), "backing file {backing} of backing.qcow2 does not exist");
    let df = h::Qcow2Header::read(&hostile_file("datafile.qcow2"));
    assert_ne!(df.incompatible & 1 << 2, 0, "datafile.qcow2 lacks the external-data-file bit");
}

// ----- DEST handling on failure ---------------------------------------------------------------------------------

#[test]
fn failure_removes_preexisting_dest_file() {
    let out = OutDir::new("hostile-preexisting-dest");
    let dest = out.join("dest.img");
    fs::write(&dest, vec![0x5Au8; 3 * MIB as usize]).unwrap();
    let src = h::copy_to(&hostile_file("backing.qcow2"), out.path(), "backing.qcow2");
    let run = Cmd::import(&src, &dest).run();
    assert_failed(&run, &dest, msg::BACKING_FILE);
}

#[test]
fn info_reports_hostile_features() {
    for (name, key) in [("backing.qcow2", "backing_file"), ("datafile.qcow2", "data_file"), ("luks.qcow2", "encrypted")]
    {
        let run = Cmd::info(hostile_file(name)).run();
        assert_success(&run);
        let j = run.json();
        assert_eq!(j[key].as_bool(), Some(true), "info {name}: {key}\n{}", run.describe());
        assert_eq!(j["format"].as_str(), Some("qcow2"), "info {name}\n{}", run.describe());
    }
}
