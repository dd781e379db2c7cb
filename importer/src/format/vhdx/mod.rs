//! A native reader for VHDX (Hyper-V) images, read by positional reads (a local file, HTTP with Range, or a
//! spooled copy) and written to the sink as qemu-img would convert them, for hostile input.
//!
//! ```text
//! 0        file identifier "vhdxfile"
//! 64 KiB   header 1, 128 KiB header 2 (4 KiB each, CRC-32C): sequence number, log GUID/offset/length, version
//! 192 KiB  region table 1 (64 KiB, CRC-32C): where the BAT and the metadata region are (256 KiB: a copy)
//! metadata region: table "metadata" → items: file parameters (block size, has-parent), virtual disk size,
//!          logical sector size, …
//! BAT      u64 entries, state in bits 0-2, file offset in MiB in bits 20-63; after every chunk-ratio payload
//!          entries one sector-bitmap entry (chunk ratio = 2^23 × logical sector size / block size)
//! ```
//!
//! What qemu-img does, and so this reader ([`Vhdx::open`] checks everything qemu checks when opening):
//!
//! * **Header**: of the two, those with the `head` signature and a valid CRC-32C; the higher sequence number
//!   wins; equal numbers are accepted only for identical headers (Disk2vhd writes those). Version 1 only.
//! * **Log**: a zero log GUID means no log. Otherwise the log region is searched for an entry of that GUID with
//!   a valid CRC-32C: if there is one, the image was not closed cleanly and its log must be replayed first —
//!   qemu-img refuses to read such an image read-only too, and `qemu-img check -r all` replays it. Refused.
//! * **Region table 1**: its CRC-32C, at most 2047 entries, the BAT and metadata regions each exactly once,
//!   unknown regions only when not marked required; regions must not overlap each other, the log or the first
//!   MiB.
//! * **Metadata**: file parameters, virtual disk size and logical sector size must be present; unknown items
//!   marked required are refused; block sizes are powers of two of 1 to 256 MiB, logical sectors 512 B or
//!   4 KiB, the virtual size at most 64 TiB (used rounded down to 512 bytes, as qemu does). A has-parent flag or
//!   a parent locator is a differencing image: refused (also by [`parent`](super::parent) before).
//! * **Blocks**: states NOT_PRESENT, UNDEFINED, ZERO and UNMAPPED read as zeroes, FULLY_PRESENT from the file;
//!   PARTIALLY_PRESENT exists only in differencing images and other states are invalid: refused. A present
//!   block must lie inside the file (else the image is truncated, as qemu reports) and overlap neither metadata
//!   nor another block. Sector-bitmap entries are not read.
//!
//! Bounds: headers, region table and metadata table are fixed-size reads checked against the image size; the
//! BAT is read in pieces of [`BAT_CHUNK`](tables::BAT_CHUNK) entries; overlap between blocks is tracked in a
//! bitmap of the file's MiBs (at most 16 MiB of memory, for files up to [`MAX_FILE`](tables::MAX_FILE)); the
//! log search reads at most [`MAX_LOG`](header::MAX_LOG) bytes.

pub mod convert;
pub mod header;
pub mod metadata;
pub mod tables;

pub use convert::{ConvertStats, Vhdx};

/// What is wrong with a VHDX image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VhdxError {
    /// No `vhdxfile` identifier.
    #[error("bad magic (no vhdxfile identifier)")]
    BadMagic,
    /// Neither header has a valid signature and CRC-32C.
    #[error("no valid header (neither copy has the head signature and a valid CRC-32C checksum)")]
    NoValidHeader,
    /// Both headers are valid, differ, and have the same sequence number.
    #[error("both headers are valid with sequence number {0} but differ")]
    AmbiguousHeaders(u64),
    /// A header version other than 1.
    #[error("unsupported vhdx version {0}")]
    UnsupportedVersion(u16),
    /// The log holds entries that must be replayed.
    #[error(
        "the log holds entries that were never applied (the image was not closed cleanly); qemu replays them only \
         when opening the image read-write (`qemu-img check -r all IMAGE`): refused"
    )]
    LogNeedsReplay,
    /// The log is larger than the importer searches.
    #[error("the log of {len} bytes is larger than the {max} bytes searched for entries to replay")]
    LogTooLarge {
        /// Log length.
        len: u32,
        /// The limit.
        max: u32,
    },
    /// The region table is damaged or malformed.
    #[error("invalid region table: {0}")]
    BadRegionTable(String),
    /// The metadata region is damaged or malformed.
    #[error("invalid metadata: {0}")]
    BadMetadata(String),
    /// A required region or metadata item the importer does not know.
    #[error("unsupported required {what} {guid}")]
    UnknownRequired {
        /// `region` or `metadata item`.
        what: &'static str,
        /// Its GUID.
        guid: String,
    },
    /// A differencing image.
    #[error("a differencing VHDX needs its parent image; images with a parent are refused")]
    Differencing,
    /// Block size out of range.
    #[error("unsupported block size {0} (a power of two from 1 MiB to 256 MiB)")]
    BadBlockSize(u32),
    /// Logical sector size other than 512 or 4096.
    #[error("unsupported logical sector size {0} (512 or 4096)")]
    BadSectorSize(u32),
    /// Virtual size above 64 TiB.
    #[error("virtual size {size} exceeds the maximum of {max} bytes (64 TiB)")]
    TooLarge {
        /// Declared size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The BAT region cannot hold the entries the size needs.
    #[error("the BAT region of {len} bytes is too small for {entries} entries")]
    BatTooSmall {
        /// Region length.
        len: u32,
        /// Entries needed.
        entries: u64,
    },
    /// A structure lies (partly) beyond the end of the image.
    #[error("{what} at offset {offset} ({len} bytes) lies beyond the end of the image ({size} bytes): truncated?")]
    BeyondEnd {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Its length.
        len: u64,
        /// The image size.
        size: u64,
    },
    /// A present block lies beyond the end of the file.
    #[error(
        "block {block} at offset {offset} ({len} bytes) lies beyond the end of the image ({size} bytes): the image \
         is truncated"
    )]
    BlockBeyondEnd {
        /// Payload block index.
        block: u64,
        /// Where it starts.
        offset: u64,
        /// Block size.
        len: u64,
        /// The image size.
        size: u64,
    },
    /// A present block overlaps metadata or another block.
    #[error("block {block} at offset {offset} overlaps {other}")]
    BlockOverlap {
        /// Payload block index.
        block: u64,
        /// Where it starts.
        offset: u64,
        /// What it overlaps.
        other: String,
    },
    /// A block state only differencing images have, or none at all.
    #[error("block {block} has state {state} ({what}): refused")]
    BadBlockState {
        /// Payload block index.
        block: u64,
        /// The state bits.
        state: u8,
        /// What the state means.
        what: &'static str,
    },
}

/// The crate error for `e`.
fn ferr(e: VhdxError) -> crate::Error {
    crate::Error::Format { format: crate::detect::ImageFormat::Vhdx, source: crate::format::FormatError::Vhdx(e) }
}

/// Fills `buf` with the image bytes of `what` at `offset`, which must lie inside the image.
fn read(image: &dyn crate::source::RandomAccess, offset: u64, buf: &mut [u8], what: &'static str) -> crate::Result<()> {
    use crate::format::positional::{self, ReadError};
    positional::read_at(image, offset, buf).map_err(|e| match e {
        ReadError::Beyond { offset, len, size } => ferr(VhdxError::BeyondEnd { what, offset, len, size }),
        ReadError::Io(e) => e,
    })
}

/// A GUID as stored on disk (the first three fields little-endian).
const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let (a, b, c) = (a.to_le_bytes(), b.to_le_bytes(), c.to_le_bytes());
    [a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]
}

/// A GUID in its usual text form.
fn guid_text(g: &[u8]) -> String {
    let le = |r: std::ops::Range<usize>| {
        g.get(r).unwrap_or_default().iter().rev().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let be =
        |r: std::ops::Range<usize>| g.get(r).unwrap_or_default().iter().map(|b| format!("{b:02x}")).collect::<String>();
    format!("{{{}-{}-{}-{}-{}}}", le(0..4), le(4..6), le(6..8), be(8..10), be(10..16))
}

fn le16(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2).and_then(|s| s.try_into().ok()).map_or(0, u16::from_le_bytes)
}
fn le32(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4).and_then(|s| s.try_into().ok()).map_or(0, u32::from_le_bytes)
}
fn le64(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// Whether the CRC-32C of `b`, with its 4-byte checksum field at `at` read as zero, is the value stored there.
fn checksum_ok(b: &[u8], at: usize) -> bool {
    let mut copy = b.to_vec();
    match copy.get_mut(at..at + 4) {
        Some(field) => field.fill(0),
        None => return false,
    }
    crate::format::positional::crc32c(&copy) == le32(b, at)
}
