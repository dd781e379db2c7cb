//! A native reader for hosted sparse VMDK extents (`createType="monolithicSparse"`, what VMware Workstation and
//! `qemu-img create -f vmdk` make), read by positional reads (a local file, HTTP with Range, or a spooled copy)
//! and written to the sink as `qemu-img convert -O raw` writes them, for hostile input.
//!
//! ```text
//! sector 0          SparseExtentHeader ("KDMV", no compressed grains, no markers, compressAlgorithm 0)
//! sector 1..        embedded descriptor (createType="monolithicSparse")
//! rgdOffset         redundant grain directory and tables (not read: qemu reads the primary ones)
//! gdOffset          grain directory: u32 sector of each grain table, 0 = none (its grains unallocated)
//! GD[i] * 512       grain table: u32 sector of each grain, 0 = unallocated, 1 = zeroed (with flag bit 2)
//! overHead..        grains, uncompressed, grainSize sectors each
//! ```
//!
//! What is read, as qemu does: the primary directory, one table at a time, each allocated grain from its sector;
//! unallocated and zeroed grains read as zeroes (the sink keeps them sparse); the last grain is cut at the
//! capacity. Consecutive grains that also follow each other in the file are copied by one positional read (one
//! Range request), up to [`COPY_CHUNK`](super::super::positional::COPY_CHUNK) bytes at a time.
//!
//! Refused: headers that fail [`Header::parse_hosted_sparse`] (its bounds: power-of-two grains of at most
//! 2 MiB, at most 512 entries per table, capacity at most 2^51 sectors), an embedded descriptor naming another
//! create type (split and multi-extent images are several files) or a parent (found before by
//! [`parent`](super::super::parent)), a directory of more than [`MAX_GD_ENTRIES`] entries, and — stricter than
//! qemu, which would read whatever is there — tables and grains that lie inside the header area or past the end
//! of the image (a truncated image). Memory: the directory (at most 16 MiB) and one table (at most 2 KiB).

use super::VmdkError;
use super::header::{FLAG_ZERO_GRAIN, Header, SECTOR};
use crate::Result;
use crate::detect::ImageFormat;
use crate::format::FormatError;
use crate::format::positional::{self, COPY_CHUNK, ReadError, ZeroRun};
use crate::sink::Sink;
use crate::source::RandomAccess;

/// Most grain directory entries accepted (16 MiB of directory; 128 TiB with qemu's default grains and tables).
pub const MAX_GD_ENTRIES: u64 = 4 << 20;

/// Statistics of a conversion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SparseStats {
    /// Allocated grains copied.
    pub grains: u64,
    /// Guest bytes copied from the image (the rest was zeroes).
    pub data_bytes: u64,
}

/// An opened, validated hosted sparse extent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sparse {
    header: Header,
    directory: Vec<u32>,
}

fn ferr(e: VmdkError) -> crate::Error {
    crate::Error::Format { format: ImageFormat::Vmdk, source: FormatError::Vmdk(e) }
}

/// Fills `buf` from `sector`; the structure must lie inside the image and not before sector `min` (the header
/// sector for the descriptor, the directory for the directory and the tables).
fn read(image: &dyn RandomAccess, h: &Header, what: &'static str, sector: u64, min: u64, buf: &mut [u8]) -> Result<()> {
    let len = buf.len() as u64;
    let out = || ferr(VmdkError::BeyondEnd { what, sector, len, size: image.size() });
    if sector < min.max(1) {
        return Err(ferr(VmdkError::InHeaderArea { what, sector, overhead: h.overhead }));
    }
    let offset = sector.checked_mul(SECTOR).ok_or_else(out)?;
    positional::read_at(image, offset, buf).map_err(|e| match e {
        ReadError::Beyond { .. } => out(),
        ReadError::Io(e) => e,
    })
}

/// The `createType` of an embedded descriptor, if it names one.
fn create_type(descriptor: &str) -> Option<&str> {
    descriptor.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "createType").then(|| v.trim().trim_matches('"'))
    })
}

impl Sparse {
    /// Reads and validates the header, the embedded descriptor's create type and the grain directory.
    pub fn open(image: &dyn RandomAccess) -> Result<Sparse> {
        let mut head = [0u8; SECTOR as usize];
        positional::read_at(image, 0, &mut head).map_err(|e| match e {
            ReadError::Beyond { offset, len, size } => {
                ferr(VmdkError::Truncated { what: "header", offset, needed: len, available: size })
            }
            ReadError::Io(e) => e,
        })?;
        let header = Header::parse_hosted_sparse(&head).map_err(ferr)?;
        if header.descriptor_offset != 0 && header.descriptor_size != 0 {
            // Bounded by the header's validation: inside the first 2 MiB.
            let len = usize::try_from(header.descriptor_size * SECTOR).unwrap_or(0);
            let mut d = vec![0u8; len];
            read(image, &header, "the embedded descriptor", header.descriptor_offset, 1, &mut d)?;
            let text = String::from_utf8_lossy(&d);
            let text = text.trim_end_matches('\0');
            match create_type(text) {
                None | Some("monolithicSparse") => {}
                Some(other) => return Err(ferr(VmdkError::NotMonolithic(other.to_owned()))),
            }
        }
        let per_table = header.grain_sectors * u64::from(header.gtes_per_gt);
        let entries = header.capacity.div_ceil(per_table);
        if entries > MAX_GD_ENTRIES {
            return Err(ferr(VmdkError::DirectoryTooLarge { entries, max: MAX_GD_ENTRIES }));
        }
        let mut raw = vec![0u8; usize::try_from(entries * 4).unwrap_or(0)];
        read(image, &header, "the grain directory", header.gd_offset, 1, &mut raw)?;
        let directory = raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Sparse { header, directory })
    }

    /// The virtual size in bytes.
    pub fn virtual_size(&self) -> u64 {
        self.header.virtual_size()
    }

    /// Writes every guest byte of `[0, virtual size)` to `sink` once: allocated grains as read, the rest as
    /// zeroes.
    pub fn convert(&self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<SparseStats> {
        let h = &self.header;
        let vs = h.virtual_size();
        let grain = h.grain_bytes();
        let gtes = h.gtes_per_gt as usize;
        let mut stats = SparseStats::default();
        let mut zeroes = ZeroRun::default();
        let mut run = Run::default();
        let mut table = vec![0u8; gtes * 4];
        for (t, &gt) in self.directory.iter().enumerate() {
            let table_start = t as u64 * grain * gtes as u64;
            let table_len = (grain * gtes as u64).min(vs - table_start);
            if gt == 0 {
                run.flush(image, sink)?;
                zeroes.add(sink, table_start, table_len)?;
                continue;
            }
            read(image, h, "a grain table", u64::from(gt), h.gd_offset.min(h.overhead), &mut table)?;
            for (g, e) in table.chunks_exact(4).enumerate() {
                let start = table_start + g as u64 * grain;
                if start >= vs {
                    break;
                }
                let len = grain.min(vs - start);
                let sector = u64::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]]));
                if sector == 0 || (sector == 1 && h.flags & FLAG_ZERO_GRAIN != 0) {
                    run.flush(image, sink)?;
                    zeroes.add(sink, start, len)?;
                    continue;
                }
                let at = sector * SECTOR;
                if sector < h.overhead {
                    return Err(ferr(VmdkError::InHeaderArea { what: "a grain", sector, overhead: h.overhead }));
                }
                if !positional::inside(at, len, image.size()) {
                    return Err(ferr(VmdkError::BeyondEnd { what: "a grain", sector, len, size: image.size() }));
                }
                zeroes.flush(sink)?;
                run.add(image, sink, start, at, len)?;
                stats.grains += 1;
                stats.data_bytes += len;
            }
        }
        run.flush(image, sink)?;
        zeroes.flush(sink)?;
        Ok(stats)
    }
}

impl positional::Reader for Sparse {
    fn virtual_size(&self) -> u64 {
        Sparse::virtual_size(self)
    }

    fn write_all(&self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<u64> {
        self.convert(image, sink).map(|s| s.data_bytes)
    }
}

/// Grains consecutive both in the guest and in the file, copied by one positional read.
#[derive(Default)]
struct Run(Option<(u64, u64, u64)>);

impl Run {
    /// Adds guest `[guest, guest + len)` from image offset `at`; copies the pending run first when this grain
    /// does not continue it or the run is full.
    fn add(&mut self, image: &dyn RandomAccess, sink: &mut dyn Sink, guest: u64, at: u64, len: u64) -> Result<()> {
        match &mut self.0 {
            Some((g, a, l)) if *g + *l == guest && *a + *l == at && *l + len <= COPY_CHUNK as u64 => *l += len,
            _ => {
                self.flush(image, sink)?;
                self.0 = Some((guest, at, len));
            }
        }
        Ok(())
    }

    fn flush(&mut self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<()> {
        if let Some((guest, at, len)) = self.0.take() {
            positional::copy(image, at, len, sink, guest)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;
    use crate::sink::test_sinks::MemSink;
    use crate::source::MemoryAccess;

    /// A hosted sparse extent as qemu-img lays it out, small: capacity `grains` grains of 4 KiB (8 sectors), 4
    /// entries per table, descriptor at sector 1, directory at sector 3, tables from sector 4 (one sector each),
    /// grains after the header area; `data[i]` is grain i's fill byte (0: unallocated).
    fn image(grains: u64, data: &[u8], create_type: &str) -> Vec<u8> {
        let tables = grains.div_ceil(4);
        let overhead = 4 + tables;
        let mut img = vec![0u8; (overhead * 512) as usize];
        img[0..4].copy_from_slice(b"KDMV");
        img[4..8].copy_from_slice(&1u32.to_le_bytes());
        img[8..12].copy_from_slice(&(1u32 | FLAG_ZERO_GRAIN).to_le_bytes());
        img[12..20].copy_from_slice(&(grains * 8).to_le_bytes());
        img[20..28].copy_from_slice(&8u64.to_le_bytes());
        img[28..36].copy_from_slice(&1u64.to_le_bytes());
        img[36..44].copy_from_slice(&1u64.to_le_bytes());
        img[44..48].copy_from_slice(&4u32.to_le_bytes());
        img[56..64].copy_from_slice(&3u64.to_le_bytes());
        img[64..72].copy_from_slice(&overhead.to_le_bytes());
        img[73..77].copy_from_slice(b"\n \r\n");
        let desc = format!(
            "# Disk DescriptorFile\nversion=1\nCID=fffffffe\nparentCID=ffffffff\ncreateType=\"{create_type}\"\n"
        );
        img[512..512 + desc.len()].copy_from_slice(desc.as_bytes());
        for t in 0..tables {
            img[(3 * 512 + t * 4) as usize..][..4].copy_from_slice(&((4 + t) as u32).to_le_bytes());
        }
        for (i, &fill) in data.iter().enumerate() {
            let sector = match fill {
                0 => 0u32,
                1 => 1, // zeroed grain
                _ => {
                    let s = (img.len() / 512) as u32;
                    img.extend(std::iter::repeat_n(fill, 4096));
                    s
                }
            };
            let at = (4 + i / 4) * 512 + (i % 4) * 4;
            img[at..at + 4].copy_from_slice(&sector.to_le_bytes());
        }
        img
    }

    fn convert(img: Vec<u8>) -> crate::Result<(Vec<u8>, SparseStats)> {
        let src = MemoryAccess(img);
        let v = Sparse::open(&src)?;
        let mut sink = MemSink::new(v.virtual_size() as usize);
        let stats = v.convert(&src, &mut sink)?;
        Ok((sink.data, stats))
    }

    #[test]
    fn grains_zeroes_and_the_last_partial_table() {
        // 6 grains: two tables, the second half used; grain 1 unallocated, grain 2 zeroed, the rest data.
        let (out, stats) = convert(image(6, &[7, 0, 1, 9, 10, 11], "monolithicSparse")).unwrap();
        assert_eq!(out.len(), 6 * 4096);
        let fill = |i: usize| out[i * 4096..(i + 1) * 4096].iter().all(|b| *b == [7, 0, 0, 9, 10, 11][i]);
        assert!((0..6).all(fill));
        assert_eq!(stats, SparseStats { grains: 4, data_bytes: 4 * 4096 });
    }

    #[test]
    fn hostile_images_are_refused() {
        let err = |img: Vec<u8>| convert(img).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(image(4, &[7], "twoGbMaxExtentSparse")).contains("createType is \"twoGbMaxExtentSparse\""));
        // A grain table entry pointing into the header area, and one past the end.
        let mut img = image(4, &[7], "monolithicSparse");
        img[4 * 512..4 * 512 + 4].copy_from_slice(&2u32.to_le_bytes());
        assert!(err(img).contains("a grain at sector 2"), "inside the header area");
        let mut img = image(4, &[7], "monolithicSparse");
        img[4 * 512..4 * 512 + 4].copy_from_slice(&1000u32.to_le_bytes());
        assert!(err(img).contains("a grain at sector 1000"), "past the end");
        // A truncated image: the directory cut off.
        let img = image(4, &[7], "monolithicSparse");
        assert!(err(img[..3 * 512].to_vec()).contains("the grain directory"));
        // A streamOptimized header is not a hosted sparse one.
        let mut img = image(4, &[7], "monolithicSparse");
        img[8..12].copy_from_slice(&(1u32 | 3 << 16).to_le_bytes());
        assert!(err(img).contains("not a hosted sparse vmdk"));
    }
}
