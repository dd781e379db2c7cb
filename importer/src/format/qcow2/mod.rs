//! A read-only qcow2 (v2/v3) converter written for hostile input and single-pass streaming.
//!
//! No crate covers what the importer needs (shared/infra/crates.md §5, §13): imago and qcow2-rs read
//! neither zstd clusters nor extended L2, do not detect encryption, need positional reads for everything
//! and have `!Send` futures. This module converts in one sequential pass over the image bytes (a file, an
//! HTTP body, a decompressed stream) and falls back to positional reads or a spill store only for pieces the
//! stream delivers before the metadata that maps them. See `convert` for the algorithm.

pub mod convert;
pub mod header;
pub mod spill;
pub mod tables;

pub use convert::{Refetch, convert, convert_from};
pub use header::Header;

/// What is wrong with a qcow2 image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Qcow2Error {
    /// Not a qcow2 image.
    #[error("bad magic")]
    BadMagic,
    /// Version other than 2 or 3.
    #[error("unsupported qcow2 version {0}")]
    UnsupportedVersion(u32),
    /// Cluster size outside 512 B..2 MiB.
    #[error("unsupported cluster size 2^{0} bytes (512 B to 2 MiB, at least 16 KiB with extended L2)")]
    BadClusterBits(u32),
    /// Header length not valid for v3.
    #[error("invalid header length {0}")]
    BadHeaderLength(u32),
    /// A header extension runs past the header cluster.
    #[error("header extension at offset {offset} runs past the header cluster")]
    BadHeaderExtension {
        /// Where the extension starts.
        offset: u64,
    },
    /// Virtual size above the supported maximum.
    #[error("virtual size {size} exceeds the supported maximum {max}")]
    VirtualSizeTooLarge {
        /// Declared size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// L1 table larger than qemu's limit.
    #[error("L1 table too large: {entries} entries (limit {max_bytes} bytes)")]
    L1TooLarge {
        /// Declared entries.
        entries: u32,
        /// The limit in bytes.
        max_bytes: u64,
    },
    /// L1 table cannot map the virtual size.
    #[error("L1 table too small: {entries} entries, {needed} needed for the virtual size")]
    L1TooSmall {
        /// Declared entries.
        entries: u32,
        /// Entries needed.
        needed: u64,
    },
    /// Refcount table larger than qemu's limit.
    #[error("refcount table too large: {clusters} clusters")]
    RefcountTableTooLarge {
        /// Declared clusters.
        clusters: u32,
    },
    /// Unknown incompatible feature bits are set.
    #[error("unknown incompatible feature bits 0x{0:x} are set")]
    UnknownIncompatibleFeatures(u64),
    /// The image is marked corrupt.
    #[error("the image is marked corrupt (incompatible feature bit 1)")]
    MarkedCorrupt,
    /// Unknown cluster compression type.
    #[error("unknown compression type {0}")]
    UnknownCompressionType(u8),
    /// Unknown encryption method.
    #[error("unknown encryption method {0}")]
    UnknownEncryption(u32),
    /// Backing file name out of bounds.
    #[error("backing file name lies outside the header cluster or is too long")]
    BadBackingFileName,
    /// Refused: backing file.
    #[error("the image has a backing file {0:?}; images with backing files are refused")]
    BackingFile(String),
    /// Refused: external data file.
    #[error("the image uses an external data file {0:?}; external data files are refused")]
    ExternalDataFile(String),
    /// Refused: encryption.
    #[error("the image is encrypted ({0}); encrypted images are refused")]
    Encrypted(&'static str),
    /// A table or cluster offset is not cluster-aligned.
    #[error("{what} offset {offset} is not aligned to the cluster size")]
    Unaligned {
        /// Which structure.
        what: &'static str,
        /// The offset.
        offset: u64,
    },
    /// An offset points into the header cluster.
    #[error("{what} offset {offset} points into the image header")]
    IntoHeader {
        /// Which structure.
        what: &'static str,
        /// The offset.
        offset: u64,
    },
    /// An offset points beyond the end of the image.
    #[error("{what} at offset {offset} lies beyond the end of the image ({file_size} bytes)")]
    BeyondEnd {
        /// Which structure.
        what: &'static str,
        /// The offset.
        offset: u64,
        /// The image size.
        file_size: u64,
    },
    /// Not enough bytes for a structure.
    #[error("image truncated: {what} at offset {offset} needs {needed} bytes, {available} available")]
    Truncated {
        /// Which structure.
        what: &'static str,
        /// Where it starts.
        offset: u64,
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// Reserved bits set in a table entry.
    #[error("invalid {what} 0x{value:016x} (reserved bits set)")]
    ReservedBits {
        /// Which entry.
        what: &'static str,
        /// The raw value.
        value: u64,
    },
    /// A compressed cluster does not decompress to exactly one cluster.
    #[error("compressed cluster at offset {offset} is corrupt: {reason}")]
    BadCompressedCluster {
        /// Host offset.
        offset: u64,
        /// What the decoder said.
        reason: String,
    },
    /// The image maps the same stream bytes twice out of order and nothing can re-read them.
    #[error(
        "host offset {offset} is needed again after it streamed past; import from a seekable source (a local file or a server with Range support)"
    )]
    NeedsRereading {
        /// Host offset.
        offset: u64,
    },
    /// Too many clusters are mapped ahead of the stream.
    #[error("the image maps more than {limit} separate data runs ahead of the stream position")]
    TooManyPending {
        /// The limit.
        limit: usize,
    },
}
