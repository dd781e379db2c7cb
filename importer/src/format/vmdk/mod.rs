//! A native, single-pass converter for streamOptimized VMDK, the disk format of OVA exports, written for
//! hostile input read from a stream.
//!
//! A streamOptimized VMDK (VMDK 1.1 spec) is a sparse extent whose grains are deflate-compressed (zlib) and
//! preceded by *markers* that name the grain's guest sector, so the file can be read front to back without its
//! grain directory:
//!
//! ```text
//! sector 0          SparseExtentHeader ("KDMV", flags: compressed grains | markers, compressAlgorithm 1)
//! sector 1..        embedded descriptor (createType="streamOptimized", parentCID, extents)
//! ...               (qemu-img: grain directory and tables here, written before the grains)
//! overHead sectors  markers, each padded to a sector:
//!                     grain:    u64 lba, u32 compressed size, zlib data
//!                     metadata: u64 sectors, u32 0, u32 type; then `sectors` sectors
//!                       type 1 grain table, 2 grain directory, 3 footer (a header copy), 0 end of stream
//! ```
//!
//! [`convert()`](convert::convert) reads the stream once, never seeking: each grain is inflated into one
//! grain-sized buffer and written at `lba * 512`. Two layouts exist:
//!
//! * VMware's: the header's grain directory offset is `GD_AT_END`; grain tables follow their grains, then the
//!   grain directory, a footer (a header copy that must agree with the header) and an end-of-stream marker,
//!   which is required. Tables and directory are skipped: their information is in the markers.
//! * qemu-img's: directory and tables in the header area, before the grains, and often no end-of-stream
//!   marker. The tables are cross-checked against the markers ([`tables`]), which makes the end of the stream
//!   a valid end and catches truncation at a grain boundary.
//!
//! Guest ranges no grain covers read as zeroes (the sink keeps them sparse). The result is what `qemu-img
//! convert -O raw` yields for every image whose grain tables agree with its markers (all that qemu-img and
//! VMware write; for qemu-img's layout any disagreement is refused).
//!
//! Bounds: the header is validated ([`Header::parse`]); the header area is buffered up to 2 MiB; a grain's
//! compressed size is capped at twice the grain size (qemu's own limit), its lba must be grain-aligned and
//! inside the capacity, it must inflate to no more than one grain and at least up to the capacity; grains may
//! arrive out of order only within a bounded window of holes; metadata runs are capped by what the capacity
//! needs. Memory: the header area (2 MiB), one compressed and one inflated grain, the hole window, the grain
//! directory of qemu-img's layout (at most 16 MiB, for disks of 64 TiB and more). The embedded
//! descriptor is checked for a parent (delta disk) as for the qemu-img path.

pub mod convert;
pub mod header;
pub mod sparse;
pub mod tables;

pub use convert::{ConvertStats, convert};
pub use header::{Header, Layout, is_hosted_sparse, is_stream_optimized, layout};
pub use sparse::Sparse;

/// What is wrong with a streamOptimized VMDK.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VmdkError {
    /// Not a sparse VMDK extent.
    #[error("bad magic (not a KDMV sparse extent)")]
    BadMagic,
    /// Header version other than 1, 2 or 3.
    #[error("unsupported vmdk version {0}")]
    UnsupportedVersion(u32),
    /// The header lacks the compressed-grain and marker flags or deflate compression.
    #[error(
        "not a streamOptimized vmdk (flags 0x{flags:08x}, compression {compression}): the native converter needs \
         compressed grains with markers"
    )]
    NotStreamOptimized {
        /// The header's flags.
        flags: u32,
        /// The header's compressAlgorithm.
        compression: u16,
    },
    /// The header is a sparse extent's, but with compressed grains or markers: not a hosted sparse extent.
    #[error("not a hosted sparse vmdk (flags 0x{flags:08x}, compression {compression})")]
    NotHostedSparse {
        /// The header's flags.
        flags: u32,
        /// The header's compressAlgorithm.
        compression: u16,
    },
    /// A hosted sparse extent whose embedded descriptor names another create type (a split or multi-extent
    /// image: its other files cannot be read).
    #[error("the embedded descriptor's createType is {0:?}: only monolithicSparse images are single files")]
    NotMonolithic(String),
    /// The grain directory needs more entries than are accepted.
    #[error("the grain directory needs {entries} entries, at most {max} are accepted")]
    DirectoryTooLarge {
        /// Entries the capacity needs.
        entries: u64,
        /// The limit.
        max: u64,
    },
    /// A structure lies past the end of the image.
    #[error(
        "{what} at sector {sector} ({len} bytes) lies beyond the end of the image ({size} bytes): the image is truncated"
    )]
    BeyondEnd {
        /// Which structure.
        what: &'static str,
        /// Where it starts (sectors).
        sector: u64,
        /// Its length.
        len: u64,
        /// The image size.
        size: u64,
    },
    /// A grain table or grain lies inside the header area.
    #[error("{what} at sector {sector} lies inside the header area ({overhead} sectors)")]
    InHeaderArea {
        /// Which structure.
        what: &'static str,
        /// Where it starts (sectors).
        sector: u64,
        /// The header area (sectors).
        overhead: u64,
    },
    /// The newline-detection bytes of the header are damaged (a text-mode transfer).
    #[error("the header's newline check bytes are corrupt (the file was transferred as text)")]
    BadNewlineCheck,
    /// Grain size not a power of two or out of range.
    #[error("unsupported grain size {0} sectors (a power of two up to 4096 sectors)")]
    BadGrainSize(u64),
    /// Entries per grain table out of range.
    #[error("unsupported grain table size {0} entries (1 to 512)")]
    BadGrainTableSize(u32),
    /// A capacity of zero would make the descriptor name the extents: refused.
    #[error("capacity 0: the descriptor would define the extents (multi-file images are refused)")]
    ZeroCapacity,
    /// Capacity above the supported maximum.
    #[error("capacity of {sectors} sectors exceeds the supported maximum of {max} sectors")]
    CapacityTooLarge {
        /// Declared capacity in sectors.
        sectors: u64,
        /// The limit.
        max: u64,
    },
    /// The header area (overHead) is empty or absurd.
    #[error("invalid overhead of {0} sectors (the grains must start after the header)")]
    BadOverhead(u64),
    /// The embedded descriptor lies outside the header area.
    #[error("descriptor at sector {offset} ({size} sectors) lies outside the header area of {overhead} sectors")]
    DescriptorOutOfRange {
        /// Descriptor offset in sectors.
        offset: u64,
        /// Descriptor size in sectors.
        size: u64,
        /// The header area in sectors (at most 4096 are read).
        overhead: u64,
    },
    /// The stream ended before a structure was complete.
    #[error("image truncated: {what} at offset {offset} needs {needed} bytes, the stream ended after {available}")]
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes there were.
        available: u64,
    },
    /// A grain marker names a sector beyond the capacity.
    #[error("grain at offset {offset} has lba {lba}, beyond the capacity of {capacity} sectors")]
    GrainBeyondCapacity {
        /// Marker offset in the stream.
        offset: u64,
        /// The marker's lba (sectors).
        lba: u64,
        /// The capacity (sectors).
        capacity: u64,
    },
    /// A grain marker's lba is not a multiple of the grain size.
    #[error("grain at offset {offset} has lba {lba}, not aligned to the grain size of {grain} sectors")]
    UnalignedGrain {
        /// Marker offset in the stream.
        offset: u64,
        /// The marker's lba (sectors).
        lba: u64,
        /// The grain size (sectors).
        grain: u64,
    },
    /// A grain's compressed size is larger than any deflate of one grain.
    #[error("compressed grain at offset {offset} is too large: {size} bytes (at most {max})")]
    GrainTooLarge {
        /// Marker offset in the stream.
        offset: u64,
        /// Declared compressed size.
        size: u32,
        /// The limit.
        max: u64,
    },
    /// A grain's data is not a valid zlib stream of at most one grain.
    #[error("grain at offset {offset} (lba {lba}) is corrupt: {reason}")]
    BadGrainData {
        /// Marker offset in the stream.
        offset: u64,
        /// The marker's lba (sectors).
        lba: u64,
        /// What the decoder said.
        reason: String,
    },
    /// A grain inflates to less than the part of the disk it covers.
    #[error("grain at offset {offset} (lba {lba}) inflates to {got} bytes, {needed} needed")]
    ShortGrain {
        /// Marker offset in the stream.
        offset: u64,
        /// The marker's lba (sectors).
        lba: u64,
        /// Inflated bytes.
        got: u64,
        /// Bytes the grain covers.
        needed: u64,
    },
    /// A grain covers guest bytes an earlier grain already covered.
    #[error("grain at offset {offset} (lba {lba}) overlaps data already written by an earlier grain")]
    GrainOverlap {
        /// Marker offset in the stream.
        offset: u64,
        /// The marker's lba (sectors).
        lba: u64,
    },
    /// A grain arrives below guest ranges already finalised as zeroes.
    #[error("grain at offset {offset} (lba {lba}) arrives too far out of order (more than {window} holes before it)")]
    GrainOutOfOrder {
        /// Marker offset in the stream.
        offset: u64,
        /// The marker's lba (sectors).
        lba: u64,
        /// The hole window.
        window: usize,
    },
    /// A metadata marker of an unknown type, or an end-of-stream marker with a value.
    #[error("invalid marker at offset {offset}: type {kind}, value {value}")]
    BadMarker {
        /// Marker offset in the stream.
        offset: u64,
        /// The marker's type.
        kind: u32,
        /// The marker's value (sectors of metadata).
        value: u64,
    },
    /// A metadata marker announces more sectors than its structure can need.
    #[error("{what} at offset {offset} announces {sectors} sectors, at most {max} expected")]
    BadMetadataSize {
        /// Which structure.
        what: &'static str,
        /// Marker offset in the stream.
        offset: u64,
        /// Declared sectors.
        sectors: u64,
        /// The bound.
        max: u64,
    },
    /// The footer is malformed or disagrees with the header.
    #[error("invalid footer at offset {offset}: {reason}")]
    BadFooter {
        /// Footer marker offset in the stream.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The grain tables of the header area and the grain markers of the stream disagree.
    #[error(
        "the grain tables list {listed} grains, the stream held {streamed} and they do not match (the image is \
         truncated or inconsistent)"
    )]
    GrainTableMismatch {
        /// Grains the tables list.
        listed: u64,
        /// Grain markers seen.
        streamed: u64,
    },
    /// The header says the grain directory is at the end, but no footer came.
    #[error("no footer before the end-of-stream marker at offset {offset}, though the header defers to one")]
    MissingFooter {
        /// The end-of-stream marker's offset.
        offset: u64,
    },
}
