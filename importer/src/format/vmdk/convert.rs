//! Single-pass streamOptimized VMDK → raw conversion over a sequential stream (see the module above for the
//! layout and the bounds).
//!
//! Coverage: the sink must see every guest byte of `[0, capacity)` exactly once. Grains are written as they
//! come; the guest ranges between them become *holes*. Images written by qemu-img and VMware list grains in
//! ascending order, so every hole stays a hole and is zeroed at the end. A grain below the highest one seen
//! must fall inside a recorded hole (else [`VmdkError::GrainOverlap`]). Holes are kept in a window of
//! [`HOLE_WINDOW`] entries; when it is full the lowest is zeroed and everything below it is final (a grain
//! arriving there is [`VmdkError::GrainOutOfOrder`]), so memory stays bounded whatever the layout.

use std::collections::BTreeMap;
use std::io::{self, BufReader, Read};

use super::VmdkError;
use super::header::{GD_AT_END, Header, SECTOR};
use super::tables::GrainTables;
use crate::detect::ImageFormat;
use crate::error::untag;
use crate::format::{FormatError, parent, read_full};
use crate::sink::Sink;
use crate::{Error, Result};

/// Most holes (unwritten guest ranges below the highest grain) remembered before the lowest is zeroed.
pub const HOLE_WINDOW: usize = 1 << 16;
/// Read-ahead buffer over the stream.
const READ_BUFFER: usize = 256 << 10;
/// Header-area bytes read at a time while its grain tables are scanned.
const SCAN_CHUNK: usize = 64 << 10;
/// Bytes of a grain marker before the compressed data (lba u64, size u32).
const GRAIN_MARKER: u64 = 12;
/// Where qemu reads descriptor text whatever the header says (sector 1, 20 sectors).
const QEMU_DESCRIPTOR: (u64, u64) = (SECTOR, 20 * SECTOR);
/// Most descriptor text searched for a parent from the header's descriptor offset (qemu's limit).
const MAX_DESCRIPTOR: u64 = 1 << 20;
/// Metadata marker types.
const MARKER_EOS: u32 = 0;
const MARKER_GT: u32 = 1;
const MARKER_GD: u32 = 2;
const MARKER_FOOTER: u32 = 3;
/// Metadata runs may be padded up to this many sectors beyond what their structure needs.
const METADATA_SLACK_SECTORS: u64 = 128;

/// Statistics of a conversion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// Bytes consumed from the stream (up to and including the end-of-stream marker).
    pub stream_bytes: u64,
    /// Grains converted.
    pub grains: u64,
    /// Guest bytes written from grains (the rest was zeroes).
    pub data_bytes: u64,
}

fn ferr(e: VmdkError) -> Error {
    Error::Format { format: ImageFormat::Vmdk, source: FormatError::Vmdk(e) }
}

fn le32(b: &[u8], o: usize) -> u32 {
    b.get(o..o + 4).and_then(|s| s.try_into().ok()).map_or(0, u32::from_le_bytes)
}
fn le64(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_le_bytes)
}

/// The stream with its position; short reads are truncation errors naming the structure.
struct Input<'a> {
    r: BufReader<&'a mut dyn Read>,
    pos: u64,
}

impl Input<'_> {
    fn fill(&mut self, buf: &mut [u8], what: &'static str) -> Result<()> {
        let at = self.pos;
        let n = read_full(&mut self.r, buf).map_err(|e| untag(e, at))?;
        self.pos += n as u64;
        if n < buf.len() {
            return Err(ferr(VmdkError::Truncated { what, offset: at, needed: buf.len() as u64, available: n as u64 }));
        }
        Ok(())
    }

    /// [`Input::fill`], but a stream that ends before the first byte is `Ok(false)`.
    fn fill_or_end(&mut self, buf: &mut [u8], what: &'static str) -> Result<bool> {
        let at = self.pos;
        let n = read_full(&mut self.r, buf).map_err(|e| untag(e, at))?;
        self.pos += n as u64;
        match n {
            0 => Ok(false),
            n if n < buf.len() => {
                Err(ferr(VmdkError::Truncated { what, offset: at, needed: buf.len() as u64, available: n as u64 }))
            }
            _ => Ok(true),
        }
    }

    fn skip(&mut self, n: u64, what: &'static str) -> Result<()> {
        let at = self.pos;
        let got = io::copy(&mut (&mut self.r).take(n), &mut io::sink()).map_err(|e| untag(e, at))?;
        self.pos += got;
        if got < n {
            return Err(ferr(VmdkError::Truncated { what, offset: at, needed: n, available: got }));
        }
        Ok(())
    }
}

/// The guest ranges covered so far (see the module documentation).
struct Coverage {
    virtual_size: u64,
    /// Everything at and above is untouched.
    frontier: u64,
    /// Unwritten ranges below the frontier: start → end.
    holes: BTreeMap<u64, u64>,
    /// Everything below is final (written or zeroed).
    sealed: u64,
}

impl Coverage {
    /// Registers `[start, end)` (inside the virtual size) as written by the grain at stream offset `at`.
    fn claim(&mut self, start: u64, end: u64, at: u64, lba: u64, sink: &mut dyn Sink) -> Result<()> {
        if start < self.sealed {
            return Err(ferr(VmdkError::GrainOutOfOrder { offset: at, lba, window: HOLE_WINDOW }));
        }
        if start >= self.frontier {
            if start > self.frontier {
                self.holes.insert(self.frontier, start);
            }
            self.frontier = end;
        } else {
            let hole = self.holes.range(..=start).next_back().map(|(&s, &e)| (s, e));
            let Some((hs, he)) = hole.filter(|&(_, he)| he >= end) else {
                return Err(ferr(VmdkError::GrainOverlap { offset: at, lba }));
            };
            self.holes.remove(&hs);
            if hs < start {
                self.holes.insert(hs, start);
            }
            if end < he {
                self.holes.insert(end, he);
            }
        }
        while self.holes.len() > HOLE_WINDOW {
            if let Some((s, e)) = self.holes.pop_first() {
                sink.write_zeroes(s, e - s)?;
                self.sealed = e;
            }
        }
        Ok(())
    }

    /// Zeroes every remaining hole and the range above the highest grain.
    fn finish(mut self, sink: &mut dyn Sink) -> Result<()> {
        while let Some((s, e)) = self.holes.pop_first() {
            sink.write_zeroes(s, e - s)?;
        }
        if self.frontier < self.virtual_size {
            sink.write_zeroes(self.frontier, self.virtual_size - self.frontier)?;
        }
        Ok(())
    }
}

/// Refuses a delta disk: the descriptor text at sector 1 (where qemu looks) and at the header's descriptor
/// offset, each up to its first NUL, must name no parent.
fn check_parent(h: &Header, prefix: &[u8]) -> Result<()> {
    let mut places = vec![QEMU_DESCRIPTOR];
    if h.descriptor_offset > 0 {
        places.push((h.descriptor_offset * SECTOR, MAX_DESCRIPTOR));
    }
    for (start, len) in places {
        let start = usize::try_from(start).unwrap_or(usize::MAX).min(prefix.len());
        let end = usize::try_from(len).unwrap_or(usize::MAX).saturating_add(start).min(prefix.len());
        let text = prefix[start..end].split(|&b| b == 0).next().unwrap_or_default();
        if let Some(p) = parent::vmdk_descriptor_parent(text) {
            return Err(Error::Format { format: ImageFormat::Vmdk, source: FormatError::Parent(p) });
        }
    }
    Ok(())
}

/// Checks a footer (a header copy) against the header it replaces.
fn check_footer(h: &Header, footer: &[u8], at: u64) -> Result<()> {
    let bad = |reason: String| ferr(VmdkError::BadFooter { offset: at, reason });
    let f = Header::parse(footer).map_err(|e| bad(e.to_string()))?;
    if (f.capacity, f.grain_sectors) != (h.capacity, h.grain_sectors) {
        return Err(bad(format!(
            "capacity {} and grain size {} differ from the header's {} and {}",
            f.capacity, f.grain_sectors, h.capacity, h.grain_sectors
        )));
    }
    if f.gd_offset == GD_AT_END {
        return Err(bad(String::from("its grain directory offset still points to the footer")));
    }
    Ok(())
}

/// Converts the streamOptimized VMDK read from `stream` (from offset 0; `header` parsed from its first bytes)
/// into `sink`, covering `[0, virtual size)` exactly once. Reads up to and including the end-of-stream marker,
/// or to the end of the stream when the header area's grain tables vouch for it (the stream may be read ahead
/// by a buffer's worth beyond the marker); the caller drains the rest when every byte must be read (a
/// checksum). Errors: [`VmdkError`] in [`FormatError::Vmdk`], a parent reference in
/// [`FormatError::Parent`], and the stream's and sink's own.
pub fn convert(header: &Header, stream: &mut dyn Read, sink: &mut dyn Sink) -> Result<ConvertStats> {
    let h = *header;
    let vs = h.virtual_size();
    let grain = h.grain_bytes();
    let mut input = Input { r: BufReader::with_capacity(READ_BUFFER, stream), pos: 0 };

    let prefix_len = h.prefix_sectors() * SECTOR;
    // Grown as bytes arrive, so a short hostile stream costs no more memory than its length.
    let mut prefix = Vec::new();
    (&mut input.r).take(prefix_len).read_to_end(&mut prefix).map_err(|e| untag(e, 0))?;
    input.pos = prefix.len() as u64;
    if input.pos < prefix_len {
        return Err(ferr(VmdkError::Truncated {
            what: "header area",
            offset: 0,
            needed: prefix_len,
            available: input.pos,
        }));
    }
    check_parent(&h, &prefix)?;
    let mut tables = GrainTables::new(&h);
    tables.feed(0, &prefix);
    drop(prefix);
    let overhead = h.overhead * SECTOR;
    let mut chunk = Vec::new();
    while input.pos < overhead && tables.wants_bytes() {
        chunk.resize((overhead - input.pos).min(SCAN_CHUNK as u64) as usize, 0);
        let at = input.pos;
        input.fill(&mut chunk, "header area")?;
        tables.feed(at, &chunk);
    }
    drop(chunk);
    input.skip(overhead - input.pos, "header area")?;
    tables.header_done();

    let mut cov = Coverage { virtual_size: vs, frontier: 0, holes: BTreeMap::new(), sealed: 0 };
    let max_compressed = 2 * grain - GRAIN_MARKER;
    let mut compressed: Vec<u8> = Vec::new();
    let mut out = vec![0u8; grain as usize];
    let mut inflater = flate2::Decompress::new(true);
    let mut stats = ConvertStats::default();
    let mut footer_seen = false;
    let mut marker = [0u8; SECTOR as usize];
    loop {
        let at = input.pos;
        if !input.fill_or_end(&mut marker, "marker")? {
            if tables.armed() {
                // qemu-img's layout: the tables, checked below, say whether anything is missing.
                break;
            }
            return Err(ferr(VmdkError::Truncated { what: "marker", offset: at, needed: SECTOR, available: 0 }));
        }
        let (value, size) = (le64(&marker, 0), le32(&marker, 8));
        if size != 0 {
            let lba = value;
            if lba >= h.capacity {
                return Err(ferr(VmdkError::GrainBeyondCapacity { offset: at, lba, capacity: h.capacity }));
            }
            if lba % h.grain_sectors != 0 {
                return Err(ferr(VmdkError::UnalignedGrain { offset: at, lba, grain: h.grain_sectors }));
            }
            if u64::from(size) > max_compressed {
                return Err(ferr(VmdkError::GrainTooLarge { offset: at, size, max: max_compressed }));
            }
            let size = size as usize;
            let in_marker = size.min(SECTOR as usize - GRAIN_MARKER as usize);
            compressed.clear();
            compressed.extend_from_slice(&marker[GRAIN_MARKER as usize..GRAIN_MARKER as usize + in_marker]);
            if size > in_marker {
                compressed.resize(size, 0);
                input.fill(&mut compressed[in_marker..], "compressed grain")?;
            }
            let used = GRAIN_MARKER + size as u64;
            let consumed = used.max(SECTOR);
            input.skip(used.next_multiple_of(SECTOR) - consumed, "grain padding")?;

            inflater.reset(true);
            let status = inflater.decompress(&compressed, &mut out, flate2::FlushDecompress::Finish);
            let got = inflater.total_out();
            let reason = match status {
                Ok(flate2::Status::StreamEnd) => None,
                Ok(_) if got >= grain => Some(String::from("it inflates to more than one grain")),
                Ok(_) => Some(String::from("the zlib stream ends early")),
                Err(e) => Some(format!("zlib: {e}")),
            };
            if let Some(reason) = reason {
                return Err(ferr(VmdkError::BadGrainData { offset: at, lba, reason }));
            }
            let start = lba * SECTOR;
            let needed = grain.min(vs - start);
            if got < needed {
                return Err(ferr(VmdkError::ShortGrain { offset: at, lba, got, needed }));
            }
            tables.streamed(at / SECTOR, lba / h.grain_sectors);
            cov.claim(start, start + needed, at, lba, sink)?;
            sink.write_at(start, &out[..needed as usize])?;
            stats.grains += 1;
            stats.data_bytes += needed;
            continue;
        }
        let kind = le32(&marker, 12);
        let metadata = |what: &'static str, needed: u64| -> Result<u64> {
            let max = needed.max(1).next_multiple_of(METADATA_SLACK_SECTORS);
            if value > max {
                return Err(ferr(VmdkError::BadMetadataSize { what, offset: at, sectors: value, max }));
            }
            Ok(value * SECTOR)
        };
        match kind {
            MARKER_EOS if value == 0 => {
                if h.gd_offset == GD_AT_END && !footer_seen {
                    return Err(ferr(VmdkError::MissingFooter { offset: at }));
                }
                break;
            }
            MARKER_GT => input.skip(metadata("grain table", h.grain_table_sectors())?, "grain table")?,
            MARKER_GD => input.skip(metadata("grain directory", h.grain_directory_sectors())?, "grain directory")?,
            MARKER_FOOTER => {
                if value != 1 {
                    return Err(ferr(VmdkError::BadFooter {
                        offset: at,
                        reason: format!("its marker announces {value} sectors, 1 expected"),
                    }));
                }
                let mut footer = [0u8; SECTOR as usize];
                input.fill(&mut footer, "footer")?;
                if h.gd_offset == GD_AT_END {
                    check_footer(&h, &footer, at)?;
                }
                footer_seen = true;
            }
            _ => return Err(ferr(VmdkError::BadMarker { offset: at, kind, value })),
        }
    }
    if let Err((listed, streamed)) = tables.check() {
        return Err(ferr(VmdkError::GrainTableMismatch { listed, streamed }));
    }
    cov.finish(sink)?;
    stats.stream_bytes = input.pos;
    Ok(stats)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use std::io::Write;
    use std::path::PathBuf;

    use super::super::header::tests::header_bytes;
    use super::*;
    use crate::sink::SinkReport;
    use crate::sink::test_sinks::MemSink;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn pad(b: &mut Vec<u8>) {
        b.resize(b.len().next_multiple_of(512), 0);
    }

    /// Builds streamOptimized images the VMware way: header (grain directory at the end), descriptor, grains
    /// with markers, grain table, grain directory, footer, end of stream.
    struct Builder {
        capacity: u64,
        grain: u64,
        desc: String,
        body: Vec<u8>,
    }

    impl Builder {
        fn new(capacity: u64, grain: u64) -> Self {
            let desc = format!(
                "# Disk DescriptorFile\nversion=1\nCID=12345678\nparentCID=ffffffff\ncreateType=\"streamOptimized\"\n\
                 RW {capacity} SPARSE \"x.vmdk\"\n"
            );
            Builder { capacity, grain, desc, body: Vec::new() }
        }
        fn grain_raw(mut self, lba: u64, size: u32, data: &[u8]) -> Self {
            self.body.extend(lba.to_le_bytes());
            self.body.extend(size.to_le_bytes());
            self.body.extend(data);
            pad(&mut self.body);
            self
        }
        fn grain(self, lba: u64, data: &[u8]) -> Self {
            let z = zlib(data);
            let n = z.len() as u32;
            self.grain_raw(lba, n, &z)
        }
        fn marker(mut self, value: u64, kind: u32, payload_sectors: usize) -> Self {
            self.body.extend(value.to_le_bytes());
            self.body.extend(0u32.to_le_bytes());
            self.body.extend(kind.to_le_bytes());
            pad(&mut self.body);
            self.body.resize(self.body.len() + payload_sectors * 512, 0);
            self
        }
        fn footer(mut self, capacity: u64) -> Self {
            self = self.marker(1, MARKER_FOOTER, 0);
            let mut f = header_bytes(capacity, self.grain, 5);
            f[64..72].copy_from_slice(&128u64.to_le_bytes());
            self.body.extend(f);
            self
        }
        fn eos(self) -> Self {
            self.marker(0, MARKER_EOS, 0)
        }
        fn build(&self) -> Vec<u8> {
            let mut b = header_bytes(self.capacity, self.grain, GD_AT_END);
            b.extend(self.desc.as_bytes());
            b.resize(128 * 512, 0);
            b.extend(&self.body);
            b
        }
    }

    fn run(img: &[u8]) -> Result<Vec<u8>> {
        let h = Header::parse(img).map_err(ferr)?;
        let mut sink = MemSink::new(h.virtual_size() as usize);
        let mut stream = img;
        convert(&h, &mut stream, &mut sink)?;
        assert!(sink.covered.iter().all(|&c| c), "not every guest byte covered");
        Ok(sink.data)
    }

    fn err(img: &[u8]) -> VmdkError {
        match run(img) {
            Err(Error::Format { source: FormatError::Vmdk(e), .. }) => e,
            other => panic!("expected a vmdk error, got {other:?}"),
        }
    }

    const G: u64 = 128; // grain sectors
    const GB: usize = 65536;

    fn pattern(seed: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    #[test]
    fn vmware_layout_with_footer() {
        let (a, c) = (pattern(1, GB), pattern(7, GB));
        let img = Builder::new(4 * G, G)
            .grain(0, &a)
            .grain(2 * G, &c)
            .marker(4, MARKER_GT, 4)
            .marker(1, MARKER_GD, 1)
            .footer(4 * G)
            .eos()
            .build();
        let got = run(&img).unwrap();
        let mut want = vec![0u8; 4 * GB];
        want[..GB].copy_from_slice(&a);
        want[2 * GB..3 * GB].copy_from_slice(&c);
        assert_eq!(got, want);
    }

    #[test]
    fn out_of_order_grains_fill_holes_once() {
        let (a, b, c) = (pattern(1, GB), pattern(2, GB), pattern(3, GB));
        let img = Builder::new(6 * G, G).grain(4 * G, &c).grain(G, &a).grain(2 * G, &b).footer(6 * G).eos().build();
        let got = run(&img).unwrap();
        let mut want = vec![0u8; 6 * GB];
        want[GB..2 * GB].copy_from_slice(&a);
        want[2 * GB..3 * GB].copy_from_slice(&b);
        want[4 * GB..5 * GB].copy_from_slice(&c);
        assert_eq!(got, want);
        let dup = Builder::new(6 * G, G).grain(4 * G, &c).grain(4 * G, &a).footer(6 * G).eos().build();
        assert!(matches!(err(&dup), VmdkError::GrainOverlap { lba, .. } if lba == 4 * G));
    }

    #[test]
    fn partial_last_grain_is_clipped_to_the_capacity() {
        // capacity 1.5 grains + 3 sectors: the last grain covers 67 sectors; a longer one is clipped.
        let cap = G + 67;
        let tail = pattern(9, 67 * 512);
        let img = Builder::new(cap, G).grain(G, &tail).footer(cap).eos().build();
        let got = run(&img).unwrap();
        assert_eq!(&got[GB..], &tail[..]);
        let longer = pattern(9, GB);
        let img = Builder::new(cap, G).grain(G, &longer).footer(cap).eos().build();
        assert_eq!(&run(&img).unwrap()[GB..], &longer[..67 * 512]);
        let short = Builder::new(cap, G).grain(G, &tail[..512]).footer(cap).eos().build();
        assert!(matches!(err(&short), VmdkError::ShortGrain { got: 512, needed, .. } if needed == 67 * 512));
        let mid = Builder::new(cap, G).grain(0, &tail).footer(cap).eos().build();
        assert!(matches!(err(&mid), VmdkError::ShortGrain { .. }));
    }

    #[test]
    fn hostile_markers_and_grains() {
        let a = pattern(1, GB);
        let ok = || Builder::new(4 * G, G);
        assert!(matches!(err(&ok().grain(4 * G, &a).eos().build()), VmdkError::GrainBeyondCapacity { .. }));
        assert!(matches!(err(&ok().grain(u64::MAX, &a).eos().build()), VmdkError::GrainBeyondCapacity { .. }));
        assert!(matches!(err(&ok().grain(3, &a).eos().build()), VmdkError::UnalignedGrain { lba: 3, .. }));
        let huge = ok().grain_raw(0, u32::MAX, &[]).build();
        assert!(matches!(err(&huge), VmdkError::GrainTooLarge { size: u32::MAX, .. }));
        let garbage = ok().grain_raw(0, 600, &[0x55; 600]).footer(4 * G).eos().build();
        assert!(matches!(err(&garbage), VmdkError::BadGrainData { .. }));
        let mut z = zlib(&a);
        z.truncate(z.len() / 2);
        let cut = ok().grain_raw(0, z.len() as u32, &z).footer(4 * G).eos().build();
        assert!(matches!(err(&cut), VmdkError::BadGrainData { reason, .. } if reason.contains("ends early")));
        let big = ok().grain(0, &pattern(1, 2 * GB)).footer(4 * G).eos().build();
        assert!(matches!(err(&big), VmdkError::BadGrainData { reason, .. } if reason.contains("more than one grain")));
        let mut bad_sum = zlib(&a);
        let n = bad_sum.len();
        bad_sum[n - 1] ^= 0xff; // adler32
        let sum = ok().grain_raw(0, n as u32, &bad_sum).footer(4 * G).eos().build();
        assert!(matches!(err(&sum), VmdkError::BadGrainData { .. }));
        assert!(matches!(err(&ok().marker(0, 7, 0).build()), VmdkError::BadMarker { kind: 7, .. }));
        assert!(matches!(err(&ok().marker(5, MARKER_EOS, 0).build()), VmdkError::BadMarker { kind: 0, value: 5, .. }));
        let gt = ok().marker(1 << 40, MARKER_GT, 0).build();
        assert!(matches!(err(&gt), VmdkError::BadMetadataSize { what: "grain table", .. }));
        assert!(matches!(err(&ok().grain(0, &a).eos().build()), VmdkError::MissingFooter { .. }));
        assert!(matches!(err(&ok().footer(8 * G).eos().build()), VmdkError::BadFooter { .. }));
        assert!(matches!(err(&ok().marker(2, MARKER_FOOTER, 0).build()), VmdkError::BadFooter { .. }));
        // truncated anywhere: a specific error, never a panic
        let full = ok().grain(0, &a).grain(2 * G, &a).footer(4 * G).eos().build();
        assert!(run(&full).is_ok());
        for cut in [0, 100, 512, 4096, 128 * 512, 128 * 512 + 11, 128 * 512 + 600, full.len() - 512, full.len() - 1] {
            assert!(matches!(err(&full[..cut.max(512)]), VmdkError::Truncated { .. }), "cut at {cut}");
        }
    }

    #[test]
    fn delta_disks_are_refused() {
        let mut b = Builder::new(4 * G, G);
        b.desc = b.desc.replace("parentCID=ffffffff", "parentCID=0badc0de");
        let img = b.footer(4 * G).eos().build();
        assert!(matches!(run(&img), Err(Error::Format { source: FormatError::Parent(_), .. })));
    }

    /// qemu-img's layout: directory at sector 30, its one table at 31, grains from sector 128, no end marker.
    /// Returns the image and the offset of each grain marker.
    fn qemu_layout(capacity: u64, grains: &[(u64, Vec<u8>)]) -> (Vec<u8>, Vec<usize>) {
        let mut b = header_bytes(capacity, G, 30);
        b.extend(Builder::new(capacity, G).desc.as_bytes());
        b.resize(128 * 512, 0);
        b[30 * 512..30 * 512 + 4].copy_from_slice(&31u32.to_le_bytes());
        let mut at = Vec::new();
        for (lba, data) in grains {
            at.push(b.len());
            let gte = 31 * 512 + (lba / G) as usize * 4;
            let sector = (b.len() / 512) as u32;
            b[gte..gte + 4].copy_from_slice(&sector.to_le_bytes());
            let z = zlib(data);
            b.extend(lba.to_le_bytes());
            b.extend((z.len() as u32).to_le_bytes());
            b.extend(z);
            pad(&mut b);
        }
        (b, at)
    }

    #[test]
    fn qemu_layout_tables_vouch_for_the_end() {
        let (a, c) = (pattern(1, GB), pattern(3, GB));
        let (img, at) = qemu_layout(4 * G, &[(0, a.clone()), (3 * G, c.clone())]);
        let got = run(&img).unwrap();
        assert_eq!((&got[..GB], &got[3 * GB..]), (&a[..], &c[..]));
        assert!(got[GB..3 * GB].iter().all(|&x| x == 0));
        // an end-of-stream marker (qemu-img's zero padding) is fine too
        let mut padded = img.clone();
        padded.resize(img.len() + 64 * 512, 0);
        assert_eq!(run(&padded).unwrap(), got);
        // cut at a grain boundary: the tables notice
        assert!(matches!(err(&img[..at[1]]), VmdkError::GrainTableMismatch { listed: 2, streamed: 1 }));
        // a marker that disagrees with its table entry
        let mut moved = img.clone();
        moved[at[1]..at[1] + 8].copy_from_slice(&(2 * G).to_le_bytes());
        assert!(matches!(err(&moved), VmdkError::GrainTableMismatch { listed: 2, streamed: 2 }));
        // a table that lies in the directory's place disarms the check: then the end marker is required
        let mut odd = img.clone();
        odd[30 * 512..30 * 512 + 4].copy_from_slice(&30u32.to_le_bytes());
        assert!(matches!(err(&odd), VmdkError::Truncated { what: "marker", .. }));
        odd.resize(odd.len() + 512, 0);
        assert_eq!(run(&odd).unwrap(), got);
    }

    /// Counts zeroed bytes, ignores data.
    struct Counting(u64);

    impl Sink for Counting {
        fn capacity(&self) -> Option<u64> {
            None
        }
        fn write_at(&mut self, _: u64, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn write_zeroes(&mut self, _: u64, len: u64) -> Result<()> {
            self.0 += len;
            Ok(())
        }
        fn finish(&mut self, len: u64) -> Result<SinkReport> {
            Ok(SinkReport { size: len, bytes_written: 0, preallocated: false })
        }
        fn abort(&mut self) {}
        fn external_target(&mut self, _: u64) -> Result<(PathBuf, bool)> {
            Err(Error::InvalidRequest("test".into()))
        }
        fn note_external_write(&mut self, _: u64) {}
    }

    #[test]
    fn hole_window_bounds_memory() {
        // Every other grain, ascending: with more holes than the window the lowest are sealed as zeroes and a
        // grain arriving there is refused; a grain for a hole still in the window fills it.
        let gb = G * 512;
        let cap = (2 * HOLE_WINDOW as u64 + 8) * gb;
        let mut cov = Coverage { virtual_size: cap, frontier: 0, holes: BTreeMap::new(), sealed: 0 };
        let mut sink = Counting(0);
        for i in 0..(HOLE_WINDOW as u64 + 2) {
            let s = (2 * i + 1) * gb;
            cov.claim(s, s + gb, 0, s / 512, &mut sink).unwrap();
        }
        assert_eq!(cov.holes.len(), HOLE_WINDOW);
        let e = cov.claim(0, gb, 0, 0, &mut sink).err();
        assert!(matches!(e, Some(Error::Format { source: FormatError::Vmdk(VmdkError::GrainOutOfOrder { .. }), .. })));
        let high = (2 * HOLE_WINDOW as u64) * gb;
        cov.claim(high, high + gb, 0, high / 512, &mut sink).unwrap();
        cov.finish(&mut sink).unwrap();
        assert_eq!(sink.0, cap - (HOLE_WINDOW as u64 + 3) * gb);
    }
}
