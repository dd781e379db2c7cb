//! The SparseExtentHeader of a streamOptimized VMDK (512 bytes, little-endian), parsed and validated.
//!
//! ```text
//!  0 magic "KDMV"        4 version u32         8 flags u32          12 capacity u64 (sectors)
//! 20 grainSize u64      28 descriptorOffset   36 descriptorSize     44 numGTEsPerGT u32
//! 48 rgdOffset u64      56 gdOffset u64       64 overHead u64       72 uncleanShutdown u8
//! 73 "\n" " " "\r" "\n" (newline check)       77 compressAlgorithm u16
//! ```

use super::VmdkError;

/// Bytes per sector.
pub const SECTOR: u64 = 512;
/// Flag: the newline check bytes are valid.
pub const FLAG_NEWLINE_CHECK: u32 = 1;
/// Flag: grains are compressed.
pub const FLAG_COMPRESSED: u32 = 1 << 16;
/// Flag: grains and metadata are preceded by markers.
pub const FLAG_MARKERS: u32 = 1 << 17;
/// Flag: a grain table entry of 1 means a zeroed grain (hosted sparse extents).
pub const FLAG_ZERO_GRAIN: u32 = 1 << 2;
/// compressAlgorithm: deflate (zlib).
pub const COMPRESSION_DEFLATE: u16 = 1;
/// gdOffset meaning "the grain directory's offset is in the footer".
pub const GD_AT_END: u64 = u64::MAX;
/// Largest capacity accepted: 2^51 sectors (1 EiB), keeping all byte arithmetic well inside u64.
pub const MAX_CAPACITY_SECTORS: u64 = 1 << 51;
/// Largest grain accepted: 4096 sectors (2 MiB; VMware and qemu use 128 sectors).
pub const MAX_GRAIN_SECTORS: u64 = 4096;
/// Most grain table entries per table (qemu's limit; the spec's value is 512).
pub const MAX_GTES_PER_GT: u32 = 512;
/// Most of the header area that is read and kept (2 MiB); the descriptor must lie inside it.
pub const MAX_PREFIX_SECTORS: u64 = 4096;
/// Largest header area accepted (2^40 sectors); beyond it nothing sensible can follow.
pub const MAX_OVERHEAD_SECTORS: u64 = 1 << 40;
const NEWLINE_CHECK: [u8; 4] = *b"\n \r\n";

/// A parsed, validated streamOptimized header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// 1, 2 or 3.
    pub version: u32,
    /// The flags.
    pub flags: u32,
    /// Capacity in sectors.
    pub capacity: u64,
    /// Grain size in sectors (a power of two, at most [`MAX_GRAIN_SECTORS`]).
    pub grain_sectors: u64,
    /// Embedded descriptor offset in sectors (0: none).
    pub descriptor_offset: u64,
    /// Embedded descriptor size in sectors.
    pub descriptor_size: u64,
    /// Entries per grain table.
    pub gtes_per_gt: u32,
    /// Grain directory offset in sectors, or [`GD_AT_END`].
    pub gd_offset: u64,
    /// Sectors before the first marker.
    pub overhead: u64,
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

/// Whether the first bytes of an image are a VMDK sparse header with compressed grains, markers and deflate:
/// the images [`super::convert::convert`] handles (other VMDKs go to qemu-img). Pure; `head` may be short.
pub fn is_stream_optimized(head: &[u8]) -> bool {
    head.len() >= SECTOR as usize
        && head.starts_with(b"KDMV")
        && le32(head, 8) & (FLAG_COMPRESSED | FLAG_MARKERS) == FLAG_COMPRESSED | FLAG_MARKERS
        && le16(head, 77) == COMPRESSION_DEFLATE
}

/// Whether the first bytes of an image are a VMDK sparse header without compressed grains or markers: a hosted
/// sparse extent (`monolithicSparse`), read natively by positional reads ([`super::sparse`]). Pure.
pub fn is_hosted_sparse(head: &[u8]) -> bool {
    head.len() >= SECTOR as usize
        && head.starts_with(b"KDMV")
        && le32(head, 8) & (FLAG_COMPRESSED | FLAG_MARKERS) == 0
        && le16(head, 77) == 0
}

/// The sparse-extent kinds the importer reads natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Compressed grains with markers ([`is_stream_optimized`]): read from a stream.
    StreamOptimized,
    /// A hosted sparse extent ([`is_hosted_sparse`]): read by positional reads.
    HostedSparse,
}

/// Which native kind the first bytes of a VMDK are; `None` for other VMDKs (descriptor files, other flags).
pub fn layout(head: &[u8]) -> Option<Layout> {
    if is_stream_optimized(head) {
        Some(Layout::StreamOptimized)
    } else if is_hosted_sparse(head) {
        Some(Layout::HostedSparse)
    } else {
        None
    }
}

impl Header {
    /// Parses and validates a streamOptimized header in the first 512 bytes of `head`.
    pub fn parse(head: &[u8]) -> Result<Header, VmdkError> {
        Header::parse_as(head, Layout::StreamOptimized)
    }

    /// Parses and validates a hosted sparse extent's header (no compression, no markers) in the first 512 bytes
    /// of `head`.
    pub fn parse_hosted_sparse(head: &[u8]) -> Result<Header, VmdkError> {
        Header::parse_as(head, Layout::HostedSparse)
    }

    fn parse_as(head: &[u8], want: Layout) -> Result<Header, VmdkError> {
        let b = head.get(..SECTOR as usize).ok_or(VmdkError::Truncated {
            what: "header",
            offset: 0,
            needed: SECTOR,
            available: head.len() as u64,
        })?;
        if !b.starts_with(b"KDMV") {
            return Err(VmdkError::BadMagic);
        }
        let version = le32(b, 4);
        if !(1..=3).contains(&version) {
            return Err(VmdkError::UnsupportedVersion(version));
        }
        let flags = le32(b, 8);
        let compression = le16(b, 77);
        match (want, layout(b)) {
            (w, Some(l)) if w == l => {}
            (Layout::StreamOptimized, _) => return Err(VmdkError::NotStreamOptimized { flags, compression }),
            (Layout::HostedSparse, _) => return Err(VmdkError::NotHostedSparse { flags, compression }),
        }
        if flags & FLAG_NEWLINE_CHECK != 0 && b[73..77] != NEWLINE_CHECK {
            return Err(VmdkError::BadNewlineCheck);
        }
        let h = Header {
            version,
            flags,
            capacity: le64(b, 12),
            grain_sectors: le64(b, 20),
            descriptor_offset: le64(b, 28),
            descriptor_size: le64(b, 36),
            gtes_per_gt: le32(b, 44),
            gd_offset: le64(b, 56),
            overhead: le64(b, 64),
        };
        if !h.grain_sectors.is_power_of_two() || h.grain_sectors > MAX_GRAIN_SECTORS {
            return Err(VmdkError::BadGrainSize(h.grain_sectors));
        }
        if !(1..=MAX_GTES_PER_GT).contains(&h.gtes_per_gt) {
            return Err(VmdkError::BadGrainTableSize(h.gtes_per_gt));
        }
        if h.capacity == 0 {
            return Err(VmdkError::ZeroCapacity);
        }
        if h.capacity > MAX_CAPACITY_SECTORS {
            return Err(VmdkError::CapacityTooLarge { sectors: h.capacity, max: MAX_CAPACITY_SECTORS });
        }
        if h.overhead == 0 || h.overhead > MAX_OVERHEAD_SECTORS {
            return Err(VmdkError::BadOverhead(h.overhead));
        }
        if h.descriptor_offset != 0 {
            let area = h.prefix_sectors();
            let fits = h
                .descriptor_offset
                .checked_add(h.descriptor_size)
                .is_some_and(|end| h.descriptor_offset >= 1 && end <= area);
            if !fits {
                return Err(VmdkError::DescriptorOutOfRange {
                    offset: h.descriptor_offset,
                    size: h.descriptor_size,
                    overhead: h.overhead,
                });
            }
        }
        Ok(h)
    }

    /// Guest-visible size in bytes.
    pub fn virtual_size(&self) -> u64 {
        self.capacity * SECTOR
    }

    /// Grain size in bytes.
    pub fn grain_bytes(&self) -> u64 {
        self.grain_sectors * SECTOR
    }

    /// Sectors of the header area that are read and kept (the rest of the overhead is skipped).
    pub fn prefix_sectors(&self) -> u64 {
        self.overhead.min(MAX_PREFIX_SECTORS)
    }

    /// Sectors one grain table needs.
    pub fn grain_table_sectors(&self) -> u64 {
        (u64::from(self.gtes_per_gt) * 4).div_ceil(SECTOR)
    }

    /// Sectors the grain directory needs for the capacity.
    pub fn grain_directory_sectors(&self) -> u64 {
        let per_table = self.grain_sectors * u64::from(self.gtes_per_gt);
        (self.capacity.div_ceil(per_table) * 4).div_ceil(SECTOR)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid streamOptimized header: `capacity` and `grain` in sectors, the descriptor at sector 1.
    pub(crate) fn header_bytes(capacity: u64, grain: u64, gd_offset: u64) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        b[0..4].copy_from_slice(b"KDMV");
        b[4..8].copy_from_slice(&3u32.to_le_bytes());
        b[8..12].copy_from_slice(&(FLAG_NEWLINE_CHECK | FLAG_COMPRESSED | FLAG_MARKERS).to_le_bytes());
        b[12..20].copy_from_slice(&capacity.to_le_bytes());
        b[20..28].copy_from_slice(&grain.to_le_bytes());
        b[28..36].copy_from_slice(&1u64.to_le_bytes());
        b[36..44].copy_from_slice(&20u64.to_le_bytes());
        b[44..48].copy_from_slice(&512u32.to_le_bytes());
        b[56..64].copy_from_slice(&gd_offset.to_le_bytes());
        b[64..72].copy_from_slice(&128u64.to_le_bytes());
        b[73..77].copy_from_slice(&NEWLINE_CHECK);
        b[77..79].copy_from_slice(&COMPRESSION_DEFLATE.to_le_bytes());
        b
    }

    #[test]
    fn parses_and_validates() {
        let b = header_bytes(6144, 128, GD_AT_END);
        assert!(is_stream_optimized(&b));
        let h = Header::parse(&b).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((h.virtual_size(), h.grain_bytes(), h.overhead, h.gd_offset), (6144 * 512, 65536, 128, GD_AT_END));
        assert_eq!((h.grain_table_sectors(), h.grain_directory_sectors()), (4, 1));

        let set = |at: usize, v: &[u8]| {
            let mut b = b.clone();
            b[at..at + v.len()].copy_from_slice(v);
            Header::parse(&b).err()
        };
        assert_eq!(set(0, b"KDMW"), Some(VmdkError::BadMagic));
        assert_eq!(set(4, &4u32.to_le_bytes()), Some(VmdkError::UnsupportedVersion(4)));
        assert!(matches!(set(8, &1u32.to_le_bytes()), Some(VmdkError::NotStreamOptimized { .. })));
        assert!(matches!(set(77, &0u16.to_le_bytes()), Some(VmdkError::NotStreamOptimized { .. })));
        assert_eq!(set(75, b"\n"), Some(VmdkError::BadNewlineCheck));
        assert_eq!(set(20, &100u64.to_le_bytes()), Some(VmdkError::BadGrainSize(100)));
        assert_eq!(set(20, &8192u64.to_le_bytes()), Some(VmdkError::BadGrainSize(8192)));
        assert_eq!(set(20, &0u64.to_le_bytes()), Some(VmdkError::BadGrainSize(0)));
        assert_eq!(set(44, &0u32.to_le_bytes()), Some(VmdkError::BadGrainTableSize(0)));
        assert_eq!(set(12, &0u64.to_le_bytes()), Some(VmdkError::ZeroCapacity));
        assert!(matches!(set(12, &u64::MAX.to_le_bytes()), Some(VmdkError::CapacityTooLarge { .. })));
        assert_eq!(set(64, &0u64.to_le_bytes()), Some(VmdkError::BadOverhead(0)));
        assert!(matches!(set(36, &200u64.to_le_bytes()), Some(VmdkError::DescriptorOutOfRange { .. })));
        assert!(matches!(set(28, &u64::MAX.to_le_bytes()), Some(VmdkError::DescriptorOutOfRange { .. })));
        assert!(matches!(Header::parse(&b[..100]), Err(VmdkError::Truncated { .. })));
        assert!(!is_stream_optimized(&b[..100]));
    }
}
