//! The VHD footer and dynamic disk header (see the module documentation for the layout and the size rule).

use super::VhdError;

/// Bytes of the footer (and of its copy at offset 0).
pub const FOOTER_LEN: usize = 512;
/// Bytes of the dynamic disk header.
pub const DYNAMIC_HEADER_LEN: usize = 1024;
/// Sector size of the format.
pub const SECTOR: u64 = 512;
/// Largest size qemu accepts, in sectors (2040 GiB).
pub const MAX_SECTORS: u64 = 0xff00_0000;
/// The largest CHS geometry: a footer with it is sized by its current size.
const MAX_GEOMETRY: u64 = 65535 * 16 * 255;
/// Creators whose images are sized by the footer's current size rather than the geometry.
const SIZED_BY_CURRENT_SIZE: [&[u8; 4]; 5] = [b"win ", b"qem2", b"d2v ", b"CTXS", b"tap\0"];
/// Not an offset (the data offset of a fixed disk, an unallocated BAT entry).
pub const UNUSED_OFFSET: u64 = u64::MAX;

/// Disk types.
const FIXED: u32 = 2;
const DYNAMIC: u32 = 3;
const DIFFERENCING: u32 = 4;

fn be16(b: &[u8], o: usize) -> u16 {
    b.get(o..o + 2).and_then(|s| s.try_into().ok()).map_or(0, u16::from_be_bytes)
}
fn be32(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4).and_then(|s| s.try_into().ok()).map_or(0, u32::from_be_bytes)
}
fn be64(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_be_bytes)
}

/// The kind of disk a footer describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskType {
    /// The data is the file itself from offset 0.
    Fixed,
    /// Blocks mapped by a BAT; the dynamic header is at this offset.
    Dynamic {
        /// The footer's data offset.
        header_offset: u64,
    },
}

/// The parsed footer copy at offset 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Footer {
    /// Fixed or dynamic.
    pub disk_type: DiskType,
    /// The creator application (`qemu`, `win `, `vpc `, …).
    pub creator: [u8; 4],
    /// The footer's current size in bytes.
    pub current_size: u64,
    /// Cylinders, heads, sectors per track.
    pub geometry: (u16, u8, u8),
}

impl Footer {
    /// Parses the 512-byte footer copy at offset 0 (fewer bytes: [`VhdError::BadMagic`]).
    pub fn parse(b: &[u8]) -> Result<Footer, VhdError> {
        if b.len() < FOOTER_LEN || !b.starts_with(b"conectix") {
            return Err(VhdError::BadMagic);
        }
        let disk_type = match be32(b, 60) {
            FIXED => DiskType::Fixed,
            DYNAMIC => DiskType::Dynamic { header_offset: be64(b, 16) },
            DIFFERENCING => return Err(VhdError::Differencing),
            other => return Err(VhdError::UnsupportedDiskType(other)),
        };
        let mut creator = [0u8; 4];
        creator.copy_from_slice(&b[28..32]);
        let footer = Footer { disk_type, creator, current_size: be64(b, 48), geometry: (be16(b, 56), b[58], b[59]) };
        let sectors = footer.sectors();
        if sectors > MAX_SECTORS {
            return Err(VhdError::TooLarge { sectors, max: MAX_SECTORS });
        }
        Ok(footer)
    }

    /// The size in sectors by qemu's rule (see the module documentation).
    fn sectors(&self) -> u64 {
        let (c, h, s) = self.geometry;
        let chs = u64::from(c) * u64::from(h) * u64::from(s);
        if chs == MAX_GEOMETRY || SIZED_BY_CURRENT_SIZE.contains(&&self.creator) {
            self.current_size / SECTOR
        } else {
            chs
        }
    }

    /// The virtual size in bytes (a whole number of sectors, at most 2040 GiB).
    pub fn virtual_size(&self) -> u64 {
        self.sectors() * SECTOR
    }
}

/// The parsed dynamic disk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynamicHeader {
    /// Where it is in the file.
    pub offset: u64,
    /// Where the BAT is.
    pub bat_offset: u64,
    /// BAT entries.
    pub max_table_entries: u32,
    /// Bytes of data per block (a power of two, at least 512).
    pub block_size: u32,
}

impl DynamicHeader {
    /// Parses the 1 KiB dynamic header read at `offset` for a disk of `virtual_size` bytes.
    pub fn parse(b: &[u8], offset: u64, virtual_size: u64) -> Result<DynamicHeader, VhdError> {
        if b.len() < DYNAMIC_HEADER_LEN || !b.starts_with(b"cxsparse") {
            return Err(VhdError::BadDynamicHeader { offset });
        }
        let h =
            DynamicHeader { offset, bat_offset: be64(b, 16), max_table_entries: be32(b, 28), block_size: be32(b, 32) };
        if !h.block_size.is_power_of_two() || u64::from(h.block_size) < SECTOR {
            return Err(VhdError::BadBlockSize(h.block_size));
        }
        if u64::from(h.max_table_entries) * u64::from(h.block_size) < virtual_size {
            return Err(VhdError::BatTooSmall { entries: h.max_table_entries, block_size: h.block_size, virtual_size });
        }
        Ok(h)
    }

    /// Bytes of each block's sector bitmap (one bit per sector, padded to a whole sector).
    pub fn bitmap_size(&self) -> u64 {
        (u64::from(self.block_size) / (8 * SECTOR)).next_multiple_of(SECTOR)
    }

    /// Blocks that hold guest data for a disk of `virtual_size` bytes.
    pub fn data_blocks(&self, virtual_size: u64) -> u64 {
        virtual_size.div_ceil(u64::from(self.block_size))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;

    /// A footer of `disk_type` by `creator`, with `current_size` and geometry `chs`.
    pub(crate) fn footer_bytes(disk_type: u32, creator: &[u8; 4], current_size: u64, chs: (u16, u8, u8)) -> Vec<u8> {
        let mut f = vec![0u8; FOOTER_LEN];
        f[..8].copy_from_slice(b"conectix");
        let data_offset = if disk_type == FIXED { UNUSED_OFFSET } else { 512 };
        f[16..24].copy_from_slice(&data_offset.to_be_bytes());
        f[28..32].copy_from_slice(creator);
        f[40..48].copy_from_slice(&current_size.to_be_bytes());
        f[48..56].copy_from_slice(&current_size.to_be_bytes());
        f[56..58].copy_from_slice(&chs.0.to_be_bytes());
        f[58] = chs.1;
        f[59] = chs.2;
        f[60..64].copy_from_slice(&disk_type.to_be_bytes());
        f
    }

    #[test]
    fn size_rule() {
        // qemu-img's own: the geometry's product (its current size agrees).
        let f = Footer::parse(&footer_bytes(3, b"qemu", 5_257_216, (151, 4, 17))).unwrap();
        assert_eq!(f.virtual_size(), 151 * 4 * 17 * 512);
        // Virtual PC: geometry, even when the current size says more.
        let f = Footer::parse(&footer_bytes(3, b"vpc ", 6 << 20, (151, 4, 17))).unwrap();
        assert_eq!(f.virtual_size(), 151 * 4 * 17 * 512);
        // Hyper-V, force_size, Disk2vhd, XenServer: the current size, rounded down to a sector.
        for c in [b"win ", b"qem2", b"d2v ", b"CTXS", b"tap\0"] {
            let f = Footer::parse(&footer_bytes(3, c, 10_000_500, (151, 4, 17))).unwrap();
            assert_eq!(f.virtual_size(), 10_000_384, "{c:?}");
        }
        // The maximum geometry: the current size whoever made it.
        let f = Footer::parse(&footer_bytes(3, b"qemu", 1 << 40, (65535, 16, 255))).unwrap();
        assert_eq!(f.virtual_size(), 1 << 40);
        assert!(matches!(Footer::parse(&footer_bytes(3, b"win ", 3 << 40, (1, 1, 1))), Err(VhdError::TooLarge { .. })));
    }

    #[test]
    fn disk_types() {
        let f = Footer::parse(&footer_bytes(2, b"qemu", 1 << 20, (30, 4, 17))).unwrap();
        assert_eq!(f.disk_type, DiskType::Fixed);
        assert_eq!(Footer::parse(&footer_bytes(4, b"qemu", 1 << 20, (30, 4, 17))), Err(VhdError::Differencing));
        assert_eq!(
            Footer::parse(&footer_bytes(7, b"qemu", 1 << 20, (30, 4, 17))),
            Err(VhdError::UnsupportedDiskType(7))
        );
        assert_eq!(Footer::parse(b"conectix"), Err(VhdError::BadMagic));
        assert_eq!(Footer::parse(&[0u8; 512]), Err(VhdError::BadMagic));
    }

    #[test]
    fn dynamic_header_checks() {
        let mut h = vec![0u8; DYNAMIC_HEADER_LEN];
        h[..8].copy_from_slice(b"cxsparse");
        h[16..24].copy_from_slice(&1536u64.to_be_bytes());
        h[28..32].copy_from_slice(&3u32.to_be_bytes());
        h[32..36].copy_from_slice(&(2u32 << 20).to_be_bytes());
        let d = DynamicHeader::parse(&h, 512, 6 << 20).unwrap();
        assert_eq!((d.bat_offset, d.bitmap_size(), d.data_blocks(5 << 20)), (1536, 512, 3));
        assert!(matches!(DynamicHeader::parse(&h, 512, (6 << 20) + 1), Err(VhdError::BatTooSmall { .. })));
        h[32..36].copy_from_slice(&3000u32.to_be_bytes());
        assert_eq!(DynamicHeader::parse(&h, 512, 1), Err(VhdError::BadBlockSize(3000)));
        h[32..36].copy_from_slice(&256u32.to_be_bytes());
        assert_eq!(DynamicHeader::parse(&h, 512, 1), Err(VhdError::BadBlockSize(256)));
        h[0] = b'x';
        assert_eq!(DynamicHeader::parse(&h, 512, 1), Err(VhdError::BadDynamicHeader { offset: 512 }));
    }
}
