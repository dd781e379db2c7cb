//! A native reader for VHD (Virtual PC, qemu's `vpc`) images: fixed disks with a footer copy at offset 0, and
//! dynamic disks, read by positional reads (a local file, HTTP with Range, or a spooled copy) and written to the
//! sink as qemu-img would convert them, for hostile input.
//!
//! ```text
//! offset 0            footer copy (512 B, big-endian): "conectix", data offset, creator, current size,
//!                     CHS geometry, disk type (2 fixed, 3 dynamic, 4 differencing), checksum
//! data offset         dynamic header (1 KiB): "cxsparse", BAT offset, max table entries, block size
//! BAT offset          Block Allocation Table: u32 sector of each block, 0xffffffff = not allocated
//! entry * 512         a block: its sector bitmap (block / 4 KiB bits, padded to a sector), then its data
//! end - 512           the footer
//! ```
//!
//! What qemu-img does, and so this reader:
//!
//! * **Which bytes.** A fixed VHD normally has its footer only at the end: qemu-img then probes it as *raw* and
//!   so does the importer (it is never detected as vpc; the footer is part of the output). A footer at offset 0
//!   (what [`ImageFormat::Vpc`](crate::detect::ImageFormat::Vpc) detects) is the one read. Disk type 2 there
//!   means the data is the file itself from offset 0 (zeroes past its end); disk type 3 means dynamic.
//! * **The size** ([`Footer::virtual_size`]): the CHS geometry's cylinders × heads × sectors, except that the
//!   footer's current size is used when the creator is one that sizes by it (`win ` Hyper-V, `qem2` qemu-img
//!   with `force_size`, `d2v ` Disk2vhd, `CTXS` XenConverter, `tap\0` XenServer) or when the geometry is the
//!   maximum (65535/16/255). qemu-img's own images (creator `qemu`) have a geometry whose product is their
//!   current size (it rounds the size up to a geometry), so both readings agree for them. At most 2040 GiB.
//! * **Blocks.** An unallocated block reads as zeroes; an allocated block is read from the file whatever its
//!   sector bitmap says (qemu ignores the bitmap when reading).
//! * **Refused**: differencing disks (type 4, also found by [`parent`](super::parent) before), other disk
//!   types, dynamic headers without `cxsparse`, block sizes that are not a power of two of at least 512 B, BATs
//!   too small for the size or larger than [`MAX_BAT_ENTRIES`], and — as qemu refuses them when opening — blocks
//!   that lie past the end of the file (a truncated image). Stricter than qemu: the BAT must lie inside the file,
//!   and blocks must overlap neither each other nor the footer copy, the dynamic header or the BAT.
//!
//! Bounds: reads are checked against the image size before they are issued; the BAT is held in memory (at most
//! [`MAX_BAT_ENTRIES`] × 4 bytes, 32 MiB, and as much again while its allocated entries are sorted for the overlap
//! check); data moves in pieces of at most [`COPY_CHUNK`](super::positional::COPY_CHUNK). The footer checksum is
//! not enforced (qemu only warns).

pub mod convert;
pub mod header;
pub mod tables;

pub use convert::{ConvertStats, Vhd};
pub use header::{DynamicHeader, Footer};
pub use tables::MAX_BAT_ENTRIES;

/// What is wrong with a VHD image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VhdError {
    /// The footer copy at offset 0 lacks the `conectix` cookie.
    #[error("bad magic (no conectix footer at offset 0)")]
    BadMagic,
    /// A disk type other than fixed (2) or dynamic (3).
    #[error("unsupported disk type {0} (2 fixed and 3 dynamic are supported)")]
    UnsupportedDiskType(u32),
    /// A differencing disk (type 4).
    #[error("a differencing VHD (disk type 4) needs its parent image; images with a parent are refused")]
    Differencing,
    /// The size exceeds the format's limit.
    #[error("virtual size of {sectors} sectors exceeds the maximum of {max} sectors (2040 GiB)")]
    TooLarge {
        /// Declared size in sectors.
        sectors: u64,
        /// The limit.
        max: u64,
    },
    /// The dynamic header lacks its cookie.
    #[error("no dynamic disk header (cxsparse) at offset {offset}")]
    BadDynamicHeader {
        /// Where the footer says it is.
        offset: u64,
    },
    /// A block size that is not a power of two of at least 512 bytes.
    #[error("invalid block size {0} (a power of two of at least 512 bytes)")]
    BadBlockSize(u32),
    /// The BAT cannot map the virtual size.
    #[error("the BAT is too small: {entries} entries of {block_size} bytes cannot hold {virtual_size} bytes")]
    BatTooSmall {
        /// BAT entries declared.
        entries: u32,
        /// Block size.
        block_size: u32,
        /// Virtual size.
        virtual_size: u64,
    },
    /// The BAT is larger than the importer reads.
    #[error("the BAT is too large: {entries} entries (at most {max})")]
    BatTooLarge {
        /// BAT entries declared.
        entries: u32,
        /// The limit.
        max: u32,
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
    /// An allocated block lies beyond the end of the file.
    #[error(
        "block {block} at offset {offset} ({len} bytes with its bitmap) lies beyond the end of the image ({size} \
         bytes): the image is truncated"
    )]
    BlockBeyondEnd {
        /// Block index.
        block: u32,
        /// Where it starts (its bitmap).
        offset: u64,
        /// Bitmap and data.
        len: u64,
        /// The image size.
        size: u64,
    },
    /// An allocated block overlaps metadata or another block.
    #[error("block {block} at offset {offset} overlaps {other}")]
    BlockOverlap {
        /// Block index.
        block: u32,
        /// Where it starts (its bitmap).
        offset: u64,
        /// What it overlaps.
        other: String,
    },
}

/// The crate error for `e`.
fn ferr(e: VhdError) -> crate::Error {
    crate::Error::Format { format: crate::detect::ImageFormat::Vpc, source: crate::format::FormatError::Vhd(e) }
}

/// Fills `buf` with the image bytes of `what` at `offset`, which must lie inside the image.
fn read(image: &dyn crate::source::RandomAccess, offset: u64, buf: &mut [u8], what: &'static str) -> crate::Result<()> {
    use crate::format::positional::{self, ReadError};
    positional::read_at(image, offset, buf).map_err(|e| match e {
        ReadError::Beyond { offset, len, size } => ferr(VhdError::BeyondEnd { what, offset, len, size }),
        ReadError::Io(e) => e,
    })
}
