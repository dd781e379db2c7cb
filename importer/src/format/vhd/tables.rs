//! The Block Allocation Table of a dynamic VHD: read once, validated against the file before any data moves.

use super::header::{DYNAMIC_HEADER_LEN, DynamicHeader, FOOTER_LEN, SECTOR};
use super::{VhdError, ferr, read};
use crate::Result;
use crate::format::positional;
use crate::source::RandomAccess;

/// Most BAT entries read (32 MiB of table: 2040 GiB in blocks of 256 KiB; qemu-img, Hyper-V and Virtual PC use
/// 2 MiB blocks, 1 Mi entries at most).
pub const MAX_BAT_ENTRIES: u32 = 8 << 20;
/// An unallocated block.
pub const UNALLOCATED: u32 = u32::MAX;

/// The validated BAT: where each block's data is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bat {
    entries: Vec<u32>,
    bitmap_size: u64,
}

impl Bat {
    /// Reads and validates the BAT of `h` in `image`: every allocated block (bitmap and data) must lie inside
    /// the image and overlap neither metadata nor another block.
    pub fn read(image: &dyn RandomAccess, h: &DynamicHeader) -> Result<Bat> {
        if h.max_table_entries > MAX_BAT_ENTRIES {
            return Err(ferr(VhdError::BatTooLarge { entries: h.max_table_entries, max: MAX_BAT_ENTRIES }));
        }
        let len = u64::from(h.max_table_entries) * 4;
        let mut raw = vec![0u8; len as usize];
        read(image, h.bat_offset, &mut raw, "the BAT")?;
        let entries: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect();
        drop(raw);
        let size = image.size();
        let span = h.bitmap_size() + u64::from(h.block_size);
        // Metadata the blocks must not overlap: (start, end, name). The BAT lies inside the image (it was read).
        let meta = [
            (0, FOOTER_LEN as u64, "the footer copy"),
            (h.offset, h.offset.saturating_add(DYNAMIC_HEADER_LEN as u64), "the dynamic header"),
            (h.bat_offset, h.bat_offset + len, "the BAT"),
        ];
        let mut allocated: Vec<u32> = Vec::new();
        for (block, &e) in (0u32..).zip(&entries) {
            if e == UNALLOCATED {
                continue;
            }
            let offset = u64::from(e) * SECTOR;
            if !positional::inside(offset, span, size) {
                return Err(ferr(VhdError::BlockBeyondEnd { block, offset, len: span, size }));
            }
            if let Some((_, _, name)) = meta.iter().find(|(s, e, _)| offset < *e && *s < offset + span) {
                return Err(ferr(VhdError::BlockOverlap { block, offset, other: (*name).to_string() }));
            }
            allocated.push(e);
        }
        // Sorted sector numbers (4 bytes each): the overlap check never holds more than the BAT again.
        allocated.sort_unstable();
        for w in allocated.windows(2) {
            let (a, b) = (u64::from(w[0]) * SECTOR, u64::from(w[1]) * SECTOR);
            if a + span > b {
                // Name the blocks: the first holding `w[0]`, the last holding `w[1]` (they differ even when equal).
                let first = entries.iter().position(|&e| e == w[0]).unwrap_or(0);
                let second = entries.iter().rposition(|&e| e == w[1]).unwrap_or(0);
                return Err(ferr(VhdError::BlockOverlap {
                    block: u32::try_from(second).unwrap_or(u32::MAX),
                    offset: b,
                    other: format!("block {first}"),
                }));
            }
        }
        Ok(Bat { entries, bitmap_size: h.bitmap_size() })
    }

    /// The image offset of block `index`'s data (after its bitmap); `None` when unallocated or beyond the BAT.
    pub fn data_offset(&self, index: u64) -> Option<u64> {
        let e = *self.entries.get(usize::try_from(index).ok()?)?;
        (e != UNALLOCATED).then(|| u64::from(e) * SECTOR + self.bitmap_size)
    }

    /// Number of allocated blocks.
    pub fn allocated(&self) -> usize {
        self.entries.iter().filter(|&&e| e != UNALLOCATED).count()
    }
}
