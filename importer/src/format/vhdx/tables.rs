//! The VHDX Block Allocation Table: payload entries read in pieces, their states, and the check that present
//! blocks lie inside the file and overlap nothing.

use super::header::{HEADER_SECTION_END, Header, Region, Regions};
use super::metadata::Metadata;
use super::{VhdxError, ferr, le64, read};
use crate::Result;
use crate::format::positional;
use crate::source::RandomAccess;

/// BAT entries read at a time (512 KiB).
pub const BAT_CHUNK: u64 = 64 << 10;
/// Present blocks are tracked up to this file offset (the bitmap of the file's MiBs stays under 16 MiB); a
/// larger image file is read as if it ended there.
pub const MAX_FILE: u64 = 128 << 40;
const MIB: u64 = 1 << 20;

/// Block states.
const NOT_PRESENT: u64 = 0;
const UNDEFINED: u64 = 1;
const ZERO: u64 = 2;
const UNMAPPED: u64 = 3;
const FULLY_PRESENT: u64 = 6;
const PARTIALLY_PRESENT: u64 = 7;

/// Where a payload block's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Block {
    /// Reads as zeroes.
    Zero,
    /// At this file offset.
    Present(u64),
}

/// Reads payload entries of the BAT in pieces.
pub struct Bat<'a> {
    image: &'a dyn RandomAccess,
    region: Region,
    md: Metadata,
    entries: u64,
    chunk: Vec<u64>,
    chunk_start: u64,
}

impl<'a> Bat<'a> {
    /// The BAT of `regions` for `md`; the region must hold the entries the size needs and lie inside the image.
    pub fn new(image: &'a dyn RandomAccess, regions: &Regions, md: Metadata) -> Result<Bat<'a>> {
        let entries = md.bat_entries();
        if entries * 8 > u64::from(regions.bat.len) {
            return Err(ferr(VhdxError::BatTooSmall { len: regions.bat.len, entries }));
        }
        let size = image.size();
        if !positional::inside(regions.bat.offset, entries * 8, size) {
            return Err(ferr(VhdxError::BeyondEnd {
                what: "the BAT",
                offset: regions.bat.offset,
                len: entries * 8,
                size,
            }));
        }
        Ok(Bat { image, region: regions.bat, md, entries, chunk: Vec::new(), chunk_start: 0 })
    }

    fn entry(&mut self, index: u64) -> Result<u64> {
        if index < self.chunk_start || index >= self.chunk_start + self.chunk.len() as u64 {
            let n = BAT_CHUNK.min(self.entries.saturating_sub(index));
            let mut raw = vec![0u8; (n * 8) as usize];
            read(self.image, self.region.offset + index * 8, &mut raw, "the BAT")?;
            self.chunk = (0..n as usize).map(|i| le64(&raw, 8 * i)).collect();
            self.chunk_start = index;
        }
        let e = usize::try_from(index - self.chunk_start).ok().and_then(|i| self.chunk.get(i).copied());
        e.ok_or_else(|| ferr(VhdxError::BatTooSmall { len: self.region.len, entries: index + 1 }))
    }

    /// Payload block `block`: where its data is, or that it reads as zeroes.
    pub fn block(&mut self, block: u64) -> Result<Block> {
        let e = self.entry(block + block / self.md.chunk_ratio())?;
        let bad = |what| ferr(VhdxError::BadBlockState { block, state: (e & 7) as u8, what });
        match e & 7 {
            NOT_PRESENT | UNDEFINED | ZERO | UNMAPPED => Ok(Block::Zero),
            FULLY_PRESENT => Ok(Block::Present((e >> 20) * MIB)),
            PARTIALLY_PRESENT => Err(bad("partially present: differencing images only")),
            _ => Err(bad("not a payload block state")),
        }
    }
}

/// The file ranges taken so far: metadata, then each present block (a bitmap of the file's MiBs).
pub struct Occupied {
    size: u64,
    meta: Vec<(u64, u64, &'static str)>,
    bits: Vec<u64>,
}

impl Occupied {
    /// Metadata of an image of `size` bytes: the header section, the log, the BAT and the metadata region.
    pub fn new(size: u64, h: &Header, regions: &Regions) -> Occupied {
        let mut meta = vec![
            (0, HEADER_SECTION_END, "the header section"),
            (regions.bat.offset, regions.bat.end(), "the BAT region"),
            (regions.metadata.offset, regions.metadata.end(), "the metadata region"),
        ];
        if h.log_length > 0 {
            meta.push((h.log_offset, h.log_offset.saturating_add(u64::from(h.log_length)), "the log"));
        }
        Occupied { size: size.min(MAX_FILE), meta, bits: Vec::new() }
    }

    /// Claims `[offset, offset + len)` (MiB-aligned, whole MiBs) for payload block `block`.
    pub fn claim(&mut self, block: u64, offset: u64, len: u64) -> Result<()> {
        if !positional::inside(offset, len, self.size) {
            return Err(ferr(VhdxError::BlockBeyondEnd { block, offset, len, size: self.size }));
        }
        let end = offset + len;
        if let Some((_, _, name)) = self.meta.iter().find(|(s, e, _)| offset < *e && *s < end) {
            return Err(ferr(VhdxError::BlockOverlap { block, offset, other: (*name).to_string() }));
        }
        let (first, last) = (offset / MIB, end.div_ceil(MIB));
        let words = last.div_ceil(64) as usize;
        if self.bits.len() < words {
            self.bits.resize(words, 0);
        }
        for mib in first..last {
            let (w, b) = ((mib / 64) as usize, mib % 64);
            if self.bits[w] & (1 << b) != 0 {
                return Err(ferr(VhdxError::BlockOverlap { block, offset, other: String::from("another block") }));
            }
            self.bits[w] |= 1 << b;
        }
        Ok(())
    }
}
