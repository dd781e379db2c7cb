//! VHD → raw by positional reads (see the module documentation for what is read and what is refused).

use super::header::{DYNAMIC_HEADER_LEN, DiskType, DynamicHeader, FOOTER_LEN, Footer};
use super::tables::Bat;
use super::{ferr, read};
use crate::Result;
use crate::format::positional::{self, ZeroRun};
use crate::sink::Sink;
use crate::source::RandomAccess;

/// Statistics of a conversion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// Allocated blocks (fixed disks: 0).
    pub blocks: u64,
    /// Guest bytes copied from the image (the rest was zeroes).
    pub data_bytes: u64,
}

/// An opened, validated VHD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vhd {
    footer: Footer,
    layout: Layout,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Layout {
    Fixed,
    Dynamic { header: DynamicHeader, bat: Bat },
}

impl Vhd {
    /// Reads and validates the footer copy at offset 0, and for a dynamic disk its header and BAT.
    pub fn open(image: &dyn RandomAccess) -> Result<Vhd> {
        let mut f = [0u8; FOOTER_LEN];
        read(image, 0, &mut f, "the footer copy")?;
        let footer = Footer::parse(&f).map_err(ferr)?;
        let layout = match footer.disk_type {
            DiskType::Fixed => Layout::Fixed,
            DiskType::Dynamic { header_offset } => {
                let mut h = [0u8; DYNAMIC_HEADER_LEN];
                read(image, header_offset, &mut h, "the dynamic header")?;
                let header = DynamicHeader::parse(&h, header_offset, footer.virtual_size()).map_err(ferr)?;
                let bat = Bat::read(image, &header)?;
                Layout::Dynamic { header, bat }
            }
        };
        Ok(Vhd { footer, layout })
    }

    /// The virtual size in bytes.
    pub fn virtual_size(&self) -> u64 {
        self.footer.virtual_size()
    }

    /// Writes every guest byte of `[0, virtual size)` to `sink` once: allocated data as read, the rest as zeroes.
    pub fn convert(&self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<ConvertStats> {
        let vs = self.virtual_size();
        let mut stats = ConvertStats::default();
        let mut zeroes = ZeroRun::default();
        match &self.layout {
            Layout::Fixed => {
                // The file itself from offset 0; qemu reads zeroes past its end.
                let data = vs.min(image.size());
                positional::copy(image, 0, data, sink, 0)?;
                stats.data_bytes = data;
                zeroes.add(sink, data, vs - data)?;
            }
            Layout::Dynamic { header, bat } => {
                let bs = u64::from(header.block_size);
                for i in 0..header.data_blocks(vs) {
                    let start = i * bs;
                    let len = bs.min(vs - start);
                    match bat.data_offset(i) {
                        Some(at) => {
                            zeroes.flush(sink)?;
                            positional::copy(image, at, len, sink, start)?;
                            stats.blocks += 1;
                            stats.data_bytes += len;
                        }
                        None => zeroes.add(sink, start, len)?,
                    }
                }
            }
        }
        zeroes.flush(sink)?;
        Ok(stats)
    }
}

impl positional::Reader for Vhd {
    fn virtual_size(&self) -> u64 {
        Vhd::virtual_size(self)
    }

    fn write_all(&self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<u64> {
        self.convert(image, sink).map(|s| s.data_bytes)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::super::VhdError;
    use super::super::header::tests::footer_bytes;
    use super::*;
    use crate::Error;
    use crate::format::FormatError;
    use crate::sink::test_sinks::MemSink;
    use crate::source::MemoryAccess;

    const BS: usize = 4096; // block size of the test images: one sector of bitmap

    /// A dynamic VHD by qemu-img's layout: footer copy, dynamic header at 512, BAT at 1536 (`entries` entries,
    /// padded to a sector), then blocks (512-byte bitmap + data) in `blocks` order, then the footer.
    fn dynamic(vs_sectors: u16, entries: u32, blocks: &[(u32, u8)]) -> Vec<u8> {
        let footer = footer_bytes(3, b"win ", u64::from(vs_sectors) * 512, (1, 1, 1));
        let mut img = footer.clone();
        let mut h = vec![0u8; 1024];
        h[..8].copy_from_slice(b"cxsparse");
        h[8..16].copy_from_slice(&u64::MAX.to_be_bytes());
        h[16..24].copy_from_slice(&1536u64.to_be_bytes());
        h[28..32].copy_from_slice(&entries.to_be_bytes());
        h[32..36].copy_from_slice(&(BS as u32).to_be_bytes());
        img.extend(h);
        let bat_at = img.len();
        img.resize(bat_at + (entries as usize * 4).next_multiple_of(512), 0xff);
        for &(index, fill) in blocks {
            let sector = (img.len() / 512) as u32;
            let e = bat_at + index as usize * 4;
            img[e..e + 4].copy_from_slice(&sector.to_be_bytes());
            img.extend([0xffu8; 512]);
            img.extend(vec![fill; BS]);
        }
        img.extend(footer);
        img
    }

    fn run(img: &[u8]) -> Result<Vec<u8>> {
        let image = MemoryAccess(img.to_vec());
        let vhd = Vhd::open(&image)?;
        let mut sink = MemSink::new(vhd.virtual_size() as usize);
        vhd.convert(&image, &mut sink)?;
        assert!(sink.covered.iter().all(|&c| c), "not every guest byte covered");
        Ok(sink.data)
    }

    fn err(img: &[u8]) -> VhdError {
        match run(img) {
            Err(Error::Format { source: FormatError::Vhd(e), .. }) => e,
            other => panic!("expected a vhd error, got {other:?}"),
        }
    }

    #[test]
    fn dynamic_blocks_and_holes() {
        // 2.5 blocks: block 1 unallocated, the last block partial; blocks stored out of order.
        let img = dynamic(20, 3, &[(2, 0x33), (0, 0x11)]);
        let got = run(&img).unwrap();
        let mut want = vec![0u8; 20 * 512];
        want[..BS].fill(0x11);
        want[2 * BS..].fill(0x33);
        assert_eq!(got, want);
    }

    #[test]
    fn fixed_with_footer_at_zero_reads_the_file() {
        let mut img = footer_bytes(2, b"win ", 3 * 512, (1, 1, 1));
        img.extend([7u8; 512]);
        let got = run(&img).unwrap();
        assert_eq!(&got[..512], &img[..512]);
        assert!(got[512..1024].iter().all(|&b| b == 7));
        assert!(got[1024..].iter().all(|&b| b == 0), "past the end of the file: zeroes");
    }

    #[test]
    fn hostile_tables() {
        let ok = dynamic(24, 3, &[(0, 1), (1, 2)]);
        assert!(run(&ok).is_ok());
        // truncated: the second block is cut
        assert!(matches!(err(&ok[..ok.len() - 1000]), VhdError::BlockBeyondEnd { block: 1, .. }));
        // a BAT entry far beyond the file
        let mut far = ok.clone();
        far[1536..1540].copy_from_slice(&0x7fff_ffffu32.to_be_bytes());
        assert!(matches!(err(&far), VhdError::BlockBeyondEnd { block: 0, .. }));
        // two entries for the same block, and a block over the BAT
        let mut dup = ok.clone();
        let e0: [u8; 4] = dup[1536..1540].try_into().unwrap();
        dup[1540..1544].copy_from_slice(&e0);
        assert!(matches!(err(&dup), VhdError::BlockOverlap { .. }));
        let mut meta = ok.clone();
        meta[1536..1540].copy_from_slice(&3u32.to_be_bytes());
        assert!(matches!(err(&meta), VhdError::BlockOverlap { other, .. } if other.contains("BAT")));
        // huge tables, and a BAT beyond the file
        let mut huge = ok.clone();
        huge[512 + 28..512 + 32].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(err(&huge), VhdError::BatTooLarge { .. }));
        let mut moved = ok.clone();
        moved[512 + 16..512 + 24].copy_from_slice(&(1u64 << 40).to_be_bytes());
        assert!(matches!(err(&moved), VhdError::BeyondEnd { what: "the BAT", .. }));
        let mut small = ok.clone();
        small[512 + 28..512 + 32].copy_from_slice(&2u32.to_be_bytes());
        assert!(matches!(err(&small), VhdError::BatTooSmall { .. }));
        // the dynamic header beyond the file, or not one
        let mut hdr = ok.clone();
        hdr[16..24].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(err(&hdr), VhdError::BeyondEnd { what: "the dynamic header", .. }));
        assert!(matches!(err(&ok[..600]), VhdError::BeyondEnd { what: "the dynamic header", .. }));
        assert!(matches!(err(&ok[..100]), VhdError::BeyondEnd { what: "the footer copy", .. }));
        // every cut: an error or a valid (shorter) image, never a panic
        for cut in (0..ok.len()).step_by(97) {
            let _ = run(&ok[..cut]);
        }
    }
}
