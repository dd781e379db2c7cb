//! The VHDX metadata region: the items the reader needs (see the module documentation).

use super::header::{MAX_TABLE_ENTRIES, Region};
use super::{VhdxError, ferr, guid, guid_text, le16, le32, le64, read};
use crate::Result;
use crate::source::RandomAccess;

/// Bytes of the metadata table at the start of the region.
pub const TABLE_LEN: usize = 64 << 10;
/// Largest virtual size (64 TiB).
pub const MAX_VIRTUAL_SIZE: u64 = 64 << 40;
/// Block size bounds.
pub const MIN_BLOCK_SIZE: u32 = 1 << 20;
/// Block size bounds.
pub const MAX_BLOCK_SIZE: u32 = 256 << 20;

const FILE_PARAMETERS: [u8; 16] = guid(0xCAA1_6737, 0xFA36, 0x4D43, [0xB3, 0xB6, 0x33, 0xF0, 0xAA, 0x44, 0xE7, 0x6B]);
const VIRTUAL_DISK_SIZE: [u8; 16] = guid(0x2FA5_4224, 0xCD1B, 0x4876, [0xB2, 0x11, 0x5D, 0xBE, 0xD8, 0x3B, 0xF4, 0xB8]);
const PAGE83: [u8; 16] = guid(0xBECA_12AB, 0xB2E6, 0x4523, [0x93, 0xEF, 0xC3, 0x09, 0xE0, 0x00, 0xC7, 0x46]);
const LOGICAL_SECTOR_SIZE: [u8; 16] =
    guid(0x8141_BF1D, 0xA96F, 0x4709, [0xBA, 0x47, 0xF2, 0x33, 0xA8, 0xFA, 0xAB, 0x5F]);
const PHYSICAL_SECTOR_SIZE: [u8; 16] =
    guid(0xCDA3_48C7, 0x445D, 0x4471, [0x9C, 0xC9, 0xE9, 0x88, 0x52, 0x51, 0xC5, 0x56]);
const PARENT_LOCATOR: [u8; 16] = guid(0xA8D3_5F2D, 0xB30B, 0x454D, [0xAB, 0xF7, 0xD3, 0xD8, 0x48, 0x34, 0xAB, 0x0C]);
/// File parameters flag: a differencing image.
const HAS_PARENT: u32 = 0x2;
/// Metadata entry flag: the item is required.
const IS_REQUIRED: u32 = 0x4;

/// What the metadata says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metadata {
    /// Bytes per payload block.
    pub block_size: u32,
    /// Bytes per logical sector (512 or 4096).
    pub logical_sector_size: u32,
    /// The virtual size, rounded down to 512 bytes.
    pub virtual_size: u64,
}

impl Metadata {
    /// Payload blocks per sector-bitmap block.
    pub fn chunk_ratio(&self) -> u64 {
        ((1u64 << 23) * u64::from(self.logical_sector_size)) / u64::from(self.block_size)
    }

    /// Payload blocks holding the virtual size.
    pub fn data_blocks(&self) -> u64 {
        self.virtual_size.div_ceil(u64::from(self.block_size))
    }

    /// BAT entries needed: the payload entries and the sector-bitmap entries interleaved between them.
    pub fn bat_entries(&self) -> u64 {
        match self.data_blocks() {
            0 => 0,
            n => n + (n - 1) / self.chunk_ratio(),
        }
    }
}

/// Reads the metadata table of `region` and the items it needs.
pub fn read_metadata(image: &dyn RandomAccess, region: Region) -> Result<Metadata> {
    let bad = |m: String| ferr(VhdxError::BadMetadata(m));
    if (region.len as usize) < TABLE_LEN {
        return Err(bad(format!("the region of {} bytes cannot hold the 64 KiB table", region.len)));
    }
    let mut t = vec![0u8; TABLE_LEN];
    read(image, region.offset, &mut t, "the metadata table")?;
    if !t.starts_with(b"metadata") {
        return Err(bad(String::from("no metadata signature")));
    }
    let count = u32::from(le16(&t, 10));
    if count > MAX_TABLE_ENTRIES {
        return Err(bad(format!("{count} entries (at most {MAX_TABLE_ENTRIES})")));
    }
    let (mut params, mut size, mut sector) = (None, None, None);
    for i in 0..count as usize {
        let e = &t[32 + 32 * i..32 + 32 * (i + 1)];
        let id = &e[..16];
        let (offset, len, flags) = (le32(e, 16), le32(e, 20), le32(e, 24));
        if u64::from(offset) + u64::from(len) > u64::from(region.len) {
            return Err(bad(format!(
                "item {} at offset {offset} ({len} bytes) lies outside its region",
                guid_text(id)
            )));
        }
        let at = region.offset + u64::from(offset);
        let item = |need: usize, what: &'static str| -> Result<Vec<u8>> {
            if (len as usize) < need {
                return Err(bad(format!("the {what} item has {len} bytes, {need} needed")));
            }
            let mut b = vec![0u8; need];
            read(image, at, &mut b, what)?;
            Ok(b)
        };
        let listed_twice = if id == FILE_PARAMETERS {
            let b = item(8, "file parameters")?;
            if le32(&b, 4) & HAS_PARENT != 0 {
                return Err(ferr(VhdxError::Differencing));
            }
            params.replace(le32(&b, 0)).is_some()
        } else if id == VIRTUAL_DISK_SIZE {
            size.replace(le64(&item(8, "virtual disk size")?, 0)).is_some()
        } else if id == LOGICAL_SECTOR_SIZE {
            sector.replace(le32(&item(4, "logical sector size")?, 0)).is_some()
        } else if id == PARENT_LOCATOR {
            return Err(ferr(VhdxError::Differencing));
        } else if id == PAGE83 || id == PHYSICAL_SECTOR_SIZE || flags & IS_REQUIRED == 0 {
            continue;
        } else {
            return Err(ferr(VhdxError::UnknownRequired { what: "metadata item", guid: guid_text(id) }));
        };
        if listed_twice {
            return Err(bad(format!("item {} is listed twice", guid_text(id))));
        }
    }
    let block_size = params.ok_or_else(|| bad(String::from("no file parameters")))?;
    let size = size.ok_or_else(|| bad(String::from("no virtual disk size")))?;
    let sector = sector.ok_or_else(|| bad(String::from("no logical sector size")))?;
    if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
        return Err(ferr(VhdxError::BadBlockSize(block_size)));
    }
    let logical_sector_size = match sector {
        512 => 512,
        4096 => 4096,
        other => return Err(ferr(VhdxError::BadSectorSize(other))),
    };
    if size > MAX_VIRTUAL_SIZE {
        return Err(ferr(VhdxError::TooLarge { size, max: MAX_VIRTUAL_SIZE }));
    }
    Ok(Metadata { block_size, logical_sector_size, virtual_size: size / 512 * 512 })
}
