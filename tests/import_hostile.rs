//! Hostile and broken input: every case must fail with a non-zero exit, one specific line on stderr (substrings:
//! tests/src/messages.rs), no panic, and no DEST left behind — from a local path and from nginx.
//! Images are qemu-img-made (tests/infra/import-env.sh) and patched here (tests/src/hostile.rs).
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
