//! Helpers that craft hostile images by patching qemu-img-made ones (qcow2 header fields, table entries,
//! truncation, corrupted streams).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Byte offsets of qcow2 header fields (all big-endian).
pub mod off {
    pub const MAGIC: u64 = 0;
    pub const VERSION: u64 = 4;
    pub const BACKING_FILE_OFFSET: u64 = 8;
    pub const CLUSTER_BITS: u64 = 20;
    pub const SIZE: u64 = 24;
    pub const CRYPT_METHOD: u64 = 32;
    pub const L1_SIZE: u64 = 36;
    pub const L1_TABLE_OFFSET: u64 = 40;
    pub const REFCOUNT_TABLE_OFFSET: u64 = 48;
    pub const REFCOUNT_TABLE_CLUSTERS: u64 = 56;
    pub const NB_SNAPSHOTS: u64 = 60;
    pub const SNAPSHOTS_OFFSET: u64 = 64;
    pub const INCOMPATIBLE_FEATURES: u64 = 72;
    pub const COMPATIBLE_FEATURES: u64 = 80;
    pub const AUTOCLEAR_FEATURES: u64 = 88;
    pub const HEADER_LENGTH: u64 = 100;
    pub const COMPRESSION_TYPE: u64 = 104;
}

/// Mask of the host offset in L1 and standard L2 entries.
pub const OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
/// L2 entry flag: compressed cluster.
pub const COMPRESSED: u64 = 1 << 62;

/// Copies `src` into `dir/name` and returns the new path.
pub fn copy_to(src: &Path, dir: &Path, name: &str) -> PathBuf {
    let dst = dir.join(name);
    fs::copy(src, &dst).unwrap_or_else(|e| panic!("copy {} -> {}: {e}", src.display(), dst.display()));
    dst
}

pub fn read_bytes(p: &Path, at: u64, n: usize) -> Vec<u8> {
    let mut f = fs::File::open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    let mut b = vec![0u8; n];
    f.read_exact(&mut b).unwrap();
    b
}

pub fn patch(p: &Path, at: u64, bytes: &[u8]) {
    let mut f = OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
}

pub fn be32(p: &Path, at: u64) -> u32 {
    u32::from_be_bytes(read_bytes(p, at, 4).try_into().unwrap())
}
pub fn be64(p: &Path, at: u64) -> u64 {
    u64::from_be_bytes(read_bytes(p, at, 8).try_into().unwrap())
}
pub fn set_be32(p: &Path, at: u64, v: u32) {
    patch(p, at, &v.to_be_bytes());
}
pub fn set_be64(p: &Path, at: u64, v: u64) {
    patch(p, at, &v.to_be_bytes());
}

/// The qcow2 header fields the hostile tests need.
#[derive(Debug, Clone, Copy)]
pub struct Qcow2Header {
    pub version: u32,
    pub cluster_bits: u32,
    pub size: u64,
    pub l1_size: u32,
    pub l1_table_offset: u64,
    pub refcount_table_offset: u64,
    pub incompatible: u64,
}

impl Qcow2Header {
    pub fn read(p: &Path) -> Self {
        assert_eq!(read_bytes(p, off::MAGIC, 4), b"QFI\xfb", "{} is not qcow2", p.display());
        let version = be32(p, off::VERSION);
        Qcow2Header {
            version,
            cluster_bits: be32(p, off::CLUSTER_BITS),
            size: be64(p, off::SIZE),
            l1_size: be32(p, off::L1_SIZE),
            l1_table_offset: be64(p, off::L1_TABLE_OFFSET),
            refcount_table_offset: be64(p, off::REFCOUNT_TABLE_OFFSET),
            incompatible: if version >= 3 { be64(p, off::INCOMPATIBLE_FEATURES) } else { 0 },
        }
    }
    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }
}

/// A cluster-aligned offset well past the end of the file.
pub fn beyond_eof(p: &Path) -> u64 {
    let h = Qcow2Header::read(p);
    let len = fs::metadata(p).unwrap().len();
    (len / h.cluster_size() + 16) * h.cluster_size()
}

/// File offset and value of the first allocated L1 entry.
pub fn first_l1_entry(p: &Path) -> (u64, u64) {
    let h = Qcow2Header::read(p);
    (0..u64::from(h.l1_size))
        .map(|i| h.l1_table_offset + 8 * i)
        .map(|at| (at, be64(p, at)))
        .find(|(_, v)| v & OFFSET_MASK != 0)
        .unwrap_or_else(|| panic!("{}: no allocated L1 entry", p.display()))
}

/// File offset and value of the first allocated, uncompressed L2 entry (standard L2 entries only).
pub fn first_data_l2_entry(p: &Path) -> (u64, u64) {
    let h = Qcow2Header::read(p);
    let (_, l1) = first_l1_entry(p);
    let l2 = l1 & OFFSET_MASK;
    let entries = h.cluster_size() / 8;
    (0..entries)
        .map(|i| l2 + 8 * i)
        .map(|at| (at, be64(p, at)))
        .find(|(_, v)| v & COMPRESSED == 0 && v & OFFSET_MASK != 0)
        .unwrap_or_else(|| panic!("{}: no allocated data cluster in the first L2 table", p.display()))
}

/// Truncates a file to `len` bytes.
pub fn truncate(p: &Path, len: u64) {
    OpenOptions::new().write(true).open(p).unwrap().set_len(len).unwrap();
}

/// Truncates a file to `percent` % of its length (rounded down to 512 bytes).
pub fn truncate_percent(p: &Path, percent: u64) {
    let len = fs::metadata(p).unwrap().len();
    truncate(p, len * percent / 100 / 512 * 512);
}

/// Flips every bit of `n` bytes at `at`.
pub fn corrupt(p: &Path, at: u64, n: usize) {
    let b: Vec<u8> = read_bytes(p, at, n).into_iter().map(|x| !x).collect();
    patch(p, at, &b);
}

/// File offset and value of the first compressed L2 entry, and the host offset of its data.
pub fn first_compressed_l2_entry(p: &Path) -> (u64, u64, u64) {
    let h = Qcow2Header::read(p);
    let (_, l1) = first_l1_entry(p);
    let l2 = l1 & OFFSET_MASK;
    let entries = h.cluster_size() / 8;
    // compressed descriptor: host offset in bits 0..x, x = 62 - (cluster_bits - 8)
    let x = 62 - (h.cluster_bits - 8);
    (0..entries)
        .map(|i| l2 + 8 * i)
        .map(|at| (at, be64(p, at)))
        .find(|(_, v)| v & COMPRESSED != 0)
        .map(|(at, v)| (at, v, v & ((1u64 << x) - 1)))
        .unwrap_or_else(|| panic!("{}: no compressed cluster in the first L2 table", p.display()))
}
