//! VHDX → raw by positional reads (see the module documentation for what is read and what is refused).

use super::header::{self, Header, Regions};
use super::metadata::{self, Metadata};
use super::tables::{Bat, Block, Occupied};
use crate::Result;
use crate::format::positional::{self, ZeroRun};
use crate::sink::Sink;
use crate::source::RandomAccess;

/// Statistics of a conversion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// Present payload blocks.
    pub blocks: u64,
    /// Guest bytes copied from the image (the rest was zeroes).
    pub data_bytes: u64,
}

/// An opened, validated VHDX.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vhdx {
    header: Header,
    regions: Regions,
    md: Metadata,
}

impl Vhdx {
    /// Reads and validates headers, log, region table, metadata and every payload entry of the BAT, so that
    /// nothing is written for an image that is refused.
    pub fn open(image: &dyn RandomAccess) -> Result<Vhdx> {
        let header = header::read_header(image)?;
        header::check_log(image, &header)?;
        let regions = header::read_regions(image, &header)?;
        let md = metadata::read_metadata(image, regions.metadata)?;
        let v = Vhdx { header, regions, md };
        let mut bat = Bat::new(image, &v.regions, md)?;
        let mut occupied = Occupied::new(image.size(), &v.header, &v.regions);
        let bs = u64::from(md.block_size);
        for block in 0..md.data_blocks() {
            if let Block::Present(at) = bat.block(block)? {
                occupied.claim(block, at, bs)?;
            }
        }
        Ok(v)
    }

    /// The virtual size in bytes.
    pub fn virtual_size(&self) -> u64 {
        self.md.virtual_size
    }

    /// Writes every guest byte of `[0, virtual size)` to `sink` once: present blocks as read, the rest as zeroes.
    pub fn convert(&self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<ConvertStats> {
        let (vs, bs) = (self.md.virtual_size, u64::from(self.md.block_size));
        let mut bat = Bat::new(image, &self.regions, self.md)?;
        let mut stats = ConvertStats::default();
        let mut zeroes = ZeroRun::default();
        for block in 0..self.md.data_blocks() {
            let start = block * bs;
            let len = bs.min(vs - start);
            match bat.block(block)? {
                Block::Zero => zeroes.add(sink, start, len)?,
                Block::Present(at) => {
                    zeroes.flush(sink)?;
                    positional::copy(image, at, len, sink, start)?;
                    stats.blocks += 1;
                    stats.data_bytes += len;
                }
            }
        }
        zeroes.flush(sink)?;
        Ok(stats)
    }
}

impl positional::Reader for Vhdx {
    fn virtual_size(&self) -> u64 {
        Vhdx::virtual_size(self)
    }

    fn write_all(&self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<u64> {
        self.convert(image, sink).map(|s| s.data_bytes)
    }
}
