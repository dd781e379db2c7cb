//! Helpers that craft hostile images by patching qemu-img-made ones (qcow2 header fields, table entries,
//! truncation, corrupted streams).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs::{self, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Byte offsets of qcow2 header fields (all big-endian).
pub mod off {
    /// `QFI\xfb`.
    pub const MAGIC: u64 = 0;
    /// Version (2 or 3).
    pub const VERSION: u64 = 4;
    /// Offset of the backing file name.
    pub const BACKING_FILE_OFFSET: u64 = 8;
    /// log2 of the cluster size.
    pub const CLUSTER_BITS: u64 = 20;
    /// Virtual size.
    pub const SIZE: u64 = 24;
    /// Encryption method.
    pub const CRYPT_METHOD: u64 = 32;
    /// Entries in the L1 table.
    pub const L1_SIZE: u64 = 36;
    /// Offset of the L1 table.
    pub const L1_TABLE_OFFSET: u64 = 40;
    /// Offset of the refcount table.
    pub const REFCOUNT_TABLE_OFFSET: u64 = 48;
    /// Clusters of the refcount table.
    pub const REFCOUNT_TABLE_CLUSTERS: u64 = 56;
    /// Number of internal snapshots.
    pub const NB_SNAPSHOTS: u64 = 60;
    /// Offset of the snapshot table.
    pub const SNAPSHOTS_OFFSET: u64 = 64;
    /// Incompatible feature bits (v3).
    pub const INCOMPATIBLE_FEATURES: u64 = 72;
    /// Compatible feature bits (v3).
    pub const COMPATIBLE_FEATURES: u64 = 80;
    /// Autoclear feature bits (v3).
    pub const AUTOCLEAR_FEATURES: u64 = 88;
    /// Header length (v3).
    pub const HEADER_LENGTH: u64 = 100;
    /// Compression type byte (v3 with a long header).
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

/// `n` bytes of `p` at `at`.
pub fn read_bytes(p: &Path, at: u64, n: usize) -> Vec<u8> {
    let mut f = fs::File::open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    let mut b = vec![0u8; n];
    f.read_exact(&mut b).unwrap();
    b
}

/// Overwrites `p` at `at` with `bytes`.
pub fn patch(p: &Path, at: u64, bytes: &[u8]) {
    let mut f = OpenOptions::new().write(true).open(p).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
}

/// The big-endian u32 of `p` at `at`.
pub fn be32(p: &Path, at: u64) -> u32 {
    u32::from_be_bytes(read_bytes(p, at, 4).try_into().unwrap())
}
/// The big-endian u64 of `p` at `at`.
pub fn be64(p: &Path, at: u64) -> u64 {
    u64::from_be_bytes(read_bytes(p, at, 8).try_into().unwrap())
}
/// Writes `v` big-endian into `p` at `at`.
pub fn set_be32(p: &Path, at: u64, v: u32) {
    patch(p, at, &v.to_be_bytes());
}
/// Writes `v` big-endian into `p` at `at`.
pub fn set_be64(p: &Path, at: u64, v: u64) {
    patch(p, at, &v.to_be_bytes());
}

/// The qcow2 header fields the hostile tests need.
#[derive(Debug, Clone, Copy)]
pub struct Qcow2Header {
    /// Version.
    pub version: u32,
    /// log2 of the cluster size.
    pub cluster_bits: u32,
    /// Virtual size.
    pub size: u64,
    /// Entries in the L1 table.
    pub l1_size: u32,
    /// Offset of the L1 table.
    pub l1_table_offset: u64,
    /// Offset of the refcount table.
    pub refcount_table_offset: u64,
    /// Incompatible feature bits (0 for v2).
    pub incompatible: u64,
}

impl Qcow2Header {
    /// Reads the header of the qcow2 image `p` (panics if it is none).
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
    /// Cluster size in bytes.
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

// ---------------------------------------------------------------------------------------------------------------
// child ("differencing") forms of the formats delegated to qemu-img, crafted from qemu-img-made images
// ---------------------------------------------------------------------------------------------------------------

/// VHD footer / dynamic header checksum: the ones' complement of the byte sum, the checksum field taken as zero.
fn vhd_checksum(b: &[u8], field: usize) -> [u8; 4] {
    let sum = b.iter().enumerate().filter(|(i, _)| !(field..field + 4).contains(i)).map(|(_, &x)| u32::from(x));
    (!sum.fold(0u32, u32::wrapping_add)).to_be_bytes()
}

/// Makes a qemu-img-made dynamic VHD a differencing one (disk type 4 in both footers, a parent name and id in
/// the dynamic header), checksums fixed: a valid differencing VHD whose parent does not exist.
pub fn vhd_make_differencing(p: &Path, parent: &str) {
    let len = fs::metadata(p).unwrap().len();
    assert_eq!(read_bytes(p, 0, 8), b"conectix", "{} is not a dynamic VHD", p.display());
    for at in [0, len - 512] {
        let mut f = read_bytes(p, at, 512);
        assert_eq!(&f[..8], b"conectix", "no VHD footer at {at} in {}", p.display());
        f[60..64].copy_from_slice(&4u32.to_be_bytes());
        let c = vhd_checksum(&f, 64);
        f[64..68].copy_from_slice(&c);
        patch(p, at, &f);
    }
    let dyn_at = be64(p, 16);
    let mut h = read_bytes(p, dyn_at, 1024);
    assert_eq!(&h[..8], b"cxsparse", "no dynamic header in {}", p.display());
    h[40..56].copy_from_slice(&[0x5a; 16]); // parent unique id
    let name: Vec<u8> = parent.encode_utf16().flat_map(u16::to_be_bytes).collect();
    h[64..576].fill(0);
    h[64..64 + name.len()].copy_from_slice(&name);
    let c = vhd_checksum(&h, 36);
    h[36..40].copy_from_slice(&c);
    patch(p, dyn_at, &h);
}

fn le32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// GUIDs as VHDX stores them (first three fields little-endian).
const VHDX_METADATA_REGION: [u8; 16] =
    [0x06, 0xa2, 0x7c, 0x8b, 0x90, 0x47, 0x9a, 0x4b, 0xb8, 0xfe, 0x57, 0x5f, 0x05, 0x0f, 0x88, 0x6e];
const VHDX_FILE_PARAMETERS: [u8; 16] =
    [0x37, 0x67, 0xa1, 0xca, 0x36, 0xfa, 0x43, 0x4d, 0xb3, 0xb6, 0x33, 0xf0, 0xaa, 0x44, 0xe7, 0x6b];
const VHDX_PARENT_LOCATOR: [u8; 16] =
    [0x2d, 0x5f, 0xd3, 0xa8, 0x0b, 0xb3, 0x4d, 0x45, 0xab, 0xf7, 0xd3, 0xd8, 0x48, 0x34, 0xab, 0x0c];

/// File offset of a qemu-img-made VHDX's metadata region (from the first region table).
fn vhdx_metadata_region(p: &Path) -> u64 {
    let t = read_bytes(p, 192 << 10, 64 << 10);
    assert_eq!(&t[..4], b"regi", "{}: no region table", p.display());
    (0..le32_at(&t, 8) as usize)
        .map(|i| 16 + 32 * i)
        .find(|&e| t[e..e + 16] == VHDX_METADATA_REGION)
        .map(|e| u64::from_le_bytes(t[e + 16..e + 24].try_into().unwrap()))
        .unwrap_or_else(|| panic!("{}: no metadata region", p.display()))
}

/// Sets the has-parent flag of a qemu-img-made VHDX's file parameters (the metadata table has no checksum).
pub fn vhdx_set_has_parent(p: &Path) {
    let md = vhdx_metadata_region(p);
    let t = read_bytes(p, md, 64 << 10);
    assert_eq!(&t[..8], b"metadata");
    let count = u16::from_le_bytes([t[10], t[11]]) as usize;
    let e = (0..count).map(|i| 32 + 32 * i).find(|&e| t[e..e + 16] == VHDX_FILE_PARAMETERS).unwrap();
    let at = md + u64::from(le32_at(&t, e + 16)) + 4;
    let flags = u32::from_le_bytes(read_bytes(p, at, 4).try_into().unwrap());
    patch(p, at, &(flags | 2).to_le_bytes());
}

/// Adds a parent locator naming `parent` (key `relative_path`) to a qemu-img-made VHDX's metadata, without the
/// has-parent flag: the form qemu-img reads as a standalone disk.
pub fn vhdx_add_parent_locator(p: &Path, parent: &str) {
    let md = vhdx_metadata_region(p);
    let t = read_bytes(p, md, 64 << 10);
    assert_eq!(&t[..8], b"metadata");
    let count = u16::from_le_bytes([t[10], t[11]]) as usize;
    let end = (0..count).map(|i| 32 + 32 * i).map(|e| le32_at(&t, e + 16) + le32_at(&t, e + 20)).max().unwrap();
    let item = end.div_ceil(4096) * 4096;
    let utf16 = |s: &str| s.encode_utf16().flat_map(u16::to_le_bytes).collect::<Vec<u8>>();
    let pairs = [("parent_linkage", "{6c3f0a2e-0000-4000-8000-000000000001}"), ("relative_path", parent)];
    let mut loc = vec![0u8; 20 + 12 * pairs.len()];
    loc[..16].copy_from_slice(&[
        0xb7, 0xef, 0x4a, 0xb0, 0x9e, 0xd1, 0x81, 0x4a, 0xb7, 0x89, 0x25, 0xb8, 0xe9, 0x44, 0x59, 0x13,
    ]);
    loc[18..20].copy_from_slice(&(pairs.len() as u16).to_le_bytes());
    for (i, (k, v)) in pairs.iter().enumerate() {
        let (k, v) = (utf16(k), utf16(v));
        let e = 20 + 12 * i;
        let ko = loc.len() as u32;
        loc.extend_from_slice(&k);
        let vo = loc.len() as u32;
        loc.extend_from_slice(&v);
        loc[e..e + 4].copy_from_slice(&ko.to_le_bytes());
        loc[e + 4..e + 8].copy_from_slice(&vo.to_le_bytes());
        loc[e + 8..e + 10].copy_from_slice(&(k.len() as u16).to_le_bytes());
        loc[e + 10..e + 12].copy_from_slice(&(v.len() as u16).to_le_bytes());
    }
    patch(p, md + u64::from(item), &loc);
    let mut entry = VHDX_PARENT_LOCATOR.to_vec();
    entry.extend_from_slice(&item.to_le_bytes());
    entry.extend_from_slice(&(loc.len() as u32).to_le_bytes());
    entry.extend_from_slice(&[0u8; 8]); // flags: neither user nor virtual-disk nor required
    patch(p, md + 32 + 32 * count as u64, &entry);
    patch(p, md + 10, &(count as u16 + 1).to_le_bytes());
}

/// Replaces `from` by `to` (same length) in a vmdk's embedded descriptor.
pub fn vmdk_descriptor_replace(p: &Path, from: &str, to: &str) {
    assert_eq!(from.len(), to.len(), "in-place replacement keeps the descriptor's length");
    let head = read_bytes(p, 0, 64 << 10);
    let at = head.windows(from.len()).position(|w| w == from.as_bytes());
    let at = at.unwrap_or_else(|| panic!("{} has no {from:?} in its descriptor", p.display()));
    patch(p, at as u64, to.as_bytes());
}

/// Sets a VDI's image type (1 dynamic, 2 fixed, 3 undo, 4 differencing).
pub fn vdi_set_type(p: &Path, image_type: u32) {
    assert_eq!(read_bytes(p, 0x40, 4), [0x7f, 0x10, 0xda, 0xbe], "{} is not a VDI", p.display());
    patch(p, 0x4c, &image_type.to_le_bytes());
}

/// Sets a VDI's linkage (parent) UUID.
pub fn vdi_set_parent_uuid(p: &Path, uuid: [u8; 16]) {
    patch(p, 0x1a8, &uuid);
}

/// Writes the pair of files of a vmdk that makes `qemu-img info` allocate about 2 GiB: `a.vmdk`, a sparse header
/// without capacity whose embedded descriptor names `b.vmdk` eight times as a sparse extent, and `b.vmdk`, a
/// sparse extent of 8 TiB at 512-byte grains (an L1 table of 32 Mi entries, 128 MiB, and its backup, per extent;
/// the largest qemu accepts). Returns the path of `a.vmdk`.
pub fn vmdk_memory_bomb(dir: &Path) -> PathBuf {
    let header = |capacity: u64, desc_sector: u64, desc_sectors: u64, gd: u64, rgd: u64| {
        let mut h = vec![0u8; 512];
        h[..4].copy_from_slice(b"KDMV");
        h[4..8].copy_from_slice(&1u32.to_le_bytes()); // version
        h[8..12].copy_from_slice(&3u32.to_le_bytes()); // flags: valid newline test, redundant grain table
        h[12..20].copy_from_slice(&capacity.to_le_bytes());
        h[20..28].copy_from_slice(&1u64.to_le_bytes()); // grain: one sector
        h[28..36].copy_from_slice(&desc_sector.to_le_bytes());
        h[36..44].copy_from_slice(&desc_sectors.to_le_bytes());
        h[44..48].copy_from_slice(&512u32.to_le_bytes()); // grain table entries
        h[48..56].copy_from_slice(&rgd.to_le_bytes());
        h[56..64].copy_from_slice(&gd.to_le_bytes());
        h[73..77].copy_from_slice(b"\n \r\n");
        h
    };
    let capacity = 32u64 << 20 << 9; // sectors: 32 Mi grain tables of 512 one-sector grains
    let b = dir.join("b.vmdk");
    fs::write(&b, header(capacity, 0, 0, 0x20000, 0x10000)).unwrap();
    OpenOptions::new().write(true).open(&b).unwrap().set_len(1 << 30).unwrap(); // sparse
    let mut desc = String::from(
        "# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\ncreateType=\"twoGbMaxExtentSparse\"\n",
    );
    for _ in 0..8 {
        desc.push_str(&format!("RW {capacity} SPARSE \"b.vmdk\"\n"));
    }
    let mut a = header(0, 1, 20, 0, 0);
    a.extend_from_slice(desc.as_bytes());
    a.resize(21 * 512, 0);
    let a_path = dir.join("a.vmdk");
    fs::write(&a_path, a).unwrap();
    a_path
}
