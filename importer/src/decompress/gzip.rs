//! A gzip decoder that can stop and start again between deflate blocks, so that an interrupted import of a
//! `.gz` image resumes from the middle of the compressed stream ([`crate::resume`]).
//!
//! ```text
//! first run:  member header ─► deflate blocks ─► … each boundary (≥ 256 KiB apart) ─► Restarts
//!             (compressed offset, output offset, the 0–7 bits of the last byte not yet used, CRC-32 so far)
//! next run:   the source from that compressed offset (a Range request) + the last 32 KiB of output (read back
//!             from the target, where it is durable) ─► GzipDecoder::resume ─► the rest of the output
//! ```
//!
//! Why here and not flate2: flate2's decoders keep the inflater's state private, and a deflate stream can only
//! restart where a block begins, with the bit position and the 32 KiB window (zlib's `zran` technique).
//! miniz_oxide's core inflater offers exactly that (its `block-boundary` feature); the gzip framing around it
//! (RFC 1952: header, CRC-32 and length trailer, concatenated members) is small and written here. flate2 keeps
//! decoding every gzip stream that will not be checkpointed (it is a little faster).

use std::collections::VecDeque;
use std::io::{self, BufRead, Read};
use std::sync::{Arc, Mutex};

use miniz_oxide::inflate::TINFLStatus;
use miniz_oxide::inflate::core::inflate_flags::{TINFL_FLAG_HAS_MORE_INPUT, TINFL_FLAG_STOP_ON_BLOCK_BOUNDARY};
use miniz_oxide::inflate::core::{BlockBoundaryState, DecompressorOxide, decompress};
use serde::{Deserialize, Serialize};

/// Deflate's window: how far back a block may refer. A restart needs this much output before it.
pub const WINDOW: usize = 32 << 10;
/// The inflater's output ring (a power of two, at least [`WINDOW`]).
const RING: usize = 256 << 10;
/// Restart points are kept at least this far apart in output …
const SPACING: u64 = 256 << 10;
/// … and this many of them: the consumer may lag the decoder by up to `KEEP × SPACING` bytes (16 MiB; the
/// import's writer lags it by one piece of at most 256 KiB) and still find one.
const KEEP: usize = 64;

/// gzip's magic bytes and the only compression method it defines (deflate).
const MAGIC: [u8; 2] = [0x1f, 0x8b];
const DEFLATE: u8 = 8;
/// Header flags (RFC 1952 §2.3.1).
const FHCRC: u8 = 1 << 1;
const FEXTRA: u8 = 1 << 2;
const FNAME: u8 = 1 << 3;
const FCOMMENT: u8 = 1 << 4;
const RESERVED: u8 = 0xe0;

/// A place between two deflate blocks of a member where decoding can start again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RestartPoint {
    /// Compressed bytes before it: the source offset the next run reads from.
    pub input: u64,
    /// Uncompressed bytes before it: the target offset the next run writes at.
    pub output: u64,
    /// How many bits (0–7) of the byte before `input` the next block still needs …
    pub num_bits: u8,
    /// … and their value (in the low bits).
    pub bit_buf: u8,
    /// CRC-32 of the member's output before it.
    pub crc: u32,
    /// Length of the member's output before it (mod 2³², as the trailer records it).
    pub member_len: u32,
}

/// The recent restart points of a running [`GzipDecoder`], shared with whoever checkpoints the output.
#[derive(Debug, Clone, Default)]
pub struct Restarts(Arc<Mutex<VecDeque<RestartPoint>>>);

impl Restarts {
    /// The last restart point at or before output offset `output` (one of the last `KEEP`).
    pub fn at_or_before(&self, output: u64) -> Option<RestartPoint> {
        let points = self.0.lock().unwrap_or_else(|p| p.into_inner());
        points.iter().rev().find(|p| p.output <= output).copied()
    }

    /// Records `point` (dropped when it is closer than the spacing to the last one; the oldest goes beyond `KEEP`).
    pub(crate) fn push(&self, point: RestartPoint) {
        let mut points = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if points.back().is_some_and(|last| point.output < last.output + SPACING) {
            return;
        }
        if points.len() == KEEP {
            points.pop_front();
        }
        points.push_back(point);
    }
}

/// Where the decoder is in the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a member's header (`first`: none was read yet, so the stream may not end here).
    Header { first: bool },
    /// Inside a member's deflate data.
    Deflate,
    /// After a member's deflate data: its CRC-32 and length.
    Trailer,
    /// After the last member.
    End,
}

/// A `Read` adapter that decodes a gzip stream (concatenated members too) and records [`Restarts`].
///
/// Errors: a stream that ends early is `UnexpectedEof` ("truncated …"); a bad header, deflate data, CRC or
/// length, or bytes after a member that are not another member, is `InvalidData`; the inner reader's errors
/// pass unchanged.
pub struct GzipDecoder<R> {
    inner: R,
    state: State,
    inflater: Box<DecompressorOxide>,
    /// Output ring: the last [`RING`] bytes of output, read back by the inflater for its references.
    ring: Vec<u8>,
    /// Where the next output goes in `ring`.
    pos: usize,
    /// Decoded bytes of `ring` not yet returned by `read`.
    ready: std::ops::Range<usize>,
    /// Compressed bytes consumed and uncompressed bytes produced, in the whole stream's coordinates.
    input: u64,
    output: u64,
    crc: crc32fast::Hasher,
    member_len: u32,
    restarts: Restarts,
}

impl<R: BufRead> GzipDecoder<R> {
    /// Decodes `inner` from the start of a gzip stream, recording restart points into `restarts`.
    pub fn new(inner: R, restarts: Restarts) -> Self {
        GzipDecoder {
            inner,
            state: State::Header { first: true },
            inflater: Box::default(),
            ring: vec![0; RING],
            pos: 0,
            ready: 0..0,
            input: 0,
            output: 0,
            crc: crc32fast::Hasher::new(),
            member_len: 0,
            restarts,
        }
    }

    /// Decodes from `point` on: `inner` yields the stream's bytes from `point.input`, and `window` holds the
    /// output just before `point.output` (its last [`WINDOW`] bytes, or all of it when there is less).
    pub fn resume(inner: R, point: &RestartPoint, window: &[u8], restarts: Restarts) -> io::Result<Self> {
        let want = point.output.min(WINDOW as u64) as usize;
        if window.len() != want || point.num_bits > 7 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a deflate restart needs {want} bytes of window and at most 7 bits"),
            ));
        }
        let mut ring = vec![0; RING];
        ring[..window.len()].copy_from_slice(window);
        let state = BlockBoundaryState {
            num_bits: point.num_bits,
            bit_buf: point.bit_buf,
            z_header0: 0,
            z_header1: 0,
            check_adler32: 1,
        };
        Ok(GzipDecoder {
            inner,
            state: State::Deflate,
            inflater: Box::new(DecompressorOxide::from_block_boundary_state(&state)),
            ring,
            pos: window.len(),
            ready: 0..0,
            input: point.input,
            output: point.output,
            crc: crc32fast::Hasher::new_with_initial_len(point.crc, u64::from(point.member_len)),
            member_len: point.member_len,
            restarts,
        })
    }

    /// Consumes `n` buffered input bytes.
    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.input += n as u64;
    }

    /// Reads exactly `buf.len()` bytes; the stream ending first is "truncated `what`".
    fn take(&mut self, buf: &mut [u8], what: &str) -> io::Result<()> {
        let mut n = 0;
        while n < buf.len() {
            let avail = self.inner.fill_buf()?;
            if avail.is_empty() {
                return Err(truncated(what));
            }
            let k = avail.len().min(buf.len() - n);
            buf[n..n + k].copy_from_slice(&avail[..k]);
            self.consume(k);
            n += k;
        }
        Ok(())
    }

    /// Skips `n` bytes.
    fn skip(&mut self, mut n: usize, what: &str) -> io::Result<()> {
        while n > 0 {
            let avail = self.inner.fill_buf()?.len();
            if avail == 0 {
                return Err(truncated(what));
            }
            let k = avail.min(n);
            self.consume(k);
            n -= k;
        }
        Ok(())
    }

    /// Skips a zero-terminated string (a file name or comment), however long.
    fn skip_string(&mut self, what: &str) -> io::Result<()> {
        loop {
            let avail = self.inner.fill_buf()?;
            if avail.is_empty() {
                return Err(truncated(what));
            }
            match avail.iter().position(|&b| b == 0) {
                Some(i) => {
                    self.consume(i + 1);
                    return Ok(());
                }
                None => {
                    let k = avail.len();
                    self.consume(k);
                }
            }
        }
    }

    /// Reads a member header; `Ok(false)` at the end of the stream (allowed after a member).
    fn header(&mut self, first: bool) -> io::Result<bool> {
        if !first && self.inner.fill_buf()?.is_empty() {
            return Ok(false);
        }
        let mut h = [0u8; 10];
        self.take(&mut h, "gzip header")?;
        if h[..2] != MAGIC {
            let what = if first { "not a gzip stream" } else { "trailing garbage after the gzip member" };
            return Err(io::Error::new(io::ErrorKind::InvalidData, what));
        }
        if h[2] != DEFLATE {
            return Err(invalid(format!("unknown gzip compression method {}", h[2])));
        }
        let flags = h[3];
        if flags & RESERVED != 0 {
            return Err(invalid(format!("reserved gzip header flags set ({flags:#04x})")));
        }
        if flags & FEXTRA != 0 {
            let mut len = [0u8; 2];
            self.take(&mut len, "gzip header")?;
            self.skip(usize::from(u16::from_le_bytes(len)), "gzip header")?;
        }
        if flags & FNAME != 0 {
            self.skip_string("gzip header")?;
        }
        if flags & FCOMMENT != 0 {
            self.skip_string("gzip header")?;
        }
        if flags & FHCRC != 0 {
            self.skip(2, "gzip header")?;
        }
        *self.inflater = DecompressorOxide::new();
        self.crc = crc32fast::Hasher::new();
        self.member_len = 0;
        Ok(true)
    }

    /// Checks a member's trailer against what was decoded.
    fn trailer(&mut self) -> io::Result<()> {
        let mut t = [0u8; 8];
        self.take(&mut t, "gzip trailer")?;
        let (crc, len) = (u32::from_le_bytes([t[0], t[1], t[2], t[3]]), u32::from_le_bytes([t[4], t[5], t[6], t[7]]));
        if crc != self.crc.clone().finalize() {
            return Err(invalid(String::from("gzip CRC-32 mismatch: the data is corrupt")));
        }
        if len != self.member_len {
            return Err(invalid(String::from("gzip length mismatch: the data is corrupt")));
        }
        Ok(())
    }

    /// Runs the inflater once: new output lands in `ready`, a block boundary is recorded.
    fn inflate(&mut self) -> io::Result<()> {
        if self.pos == RING {
            // The ring is full and read: wrap (the inflater finds its references by masking).
            self.pos = 0;
        }
        let avail = self.inner.fill_buf()?;
        let eof = avail.is_empty();
        let mut flags = TINFL_FLAG_STOP_ON_BLOCK_BOUNDARY;
        if !eof {
            flags |= TINFL_FLAG_HAS_MORE_INPUT;
        }
        let (status, consumed, produced) = decompress(&mut self.inflater, avail, &mut self.ring, self.pos, flags);
        self.consume(consumed);
        let start = self.pos;
        self.pos += produced;
        self.crc.update(&self.ring[start..self.pos]);
        self.member_len = self.member_len.wrapping_add(produced as u32);
        self.output += produced as u64;
        self.ready = start..self.pos;
        match status {
            TINFLStatus::BlockBoundary => {
                if let Some(b) = self.inflater.block_boundary_state() {
                    self.restarts.push(RestartPoint {
                        input: self.input,
                        output: self.output,
                        num_bits: b.num_bits,
                        bit_buf: b.bit_buf,
                        crc: self.crc.clone().finalize(),
                        member_len: self.member_len,
                    });
                }
            }
            TINFLStatus::Done => self.state = State::Trailer,
            TINFLStatus::HasMoreOutput | TINFLStatus::NeedsMoreInput if !eof => {}
            TINFLStatus::HasMoreOutput => {}
            TINFLStatus::NeedsMoreInput | TINFLStatus::FailedCannotMakeProgress if eof => {
                return Err(truncated("deflate data"));
            }
            other => return Err(invalid(format!("corrupt deflate data ({other:?})"))),
        }
        Ok(())
    }
}

impl<R: BufRead> Read for GzipDecoder<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if !self.ready.is_empty() {
                let n = self.ready.len().min(buf.len());
                buf[..n].copy_from_slice(&self.ring[self.ready.start..self.ready.start + n]);
                self.ready.start += n;
                return Ok(n);
            }
            if buf.is_empty() {
                return Ok(0);
            }
            match self.state {
                State::End => return Ok(0),
                State::Header { first } => {
                    self.state = if self.header(first)? { State::Deflate } else { State::End };
                }
                State::Deflate => self.inflate()?,
                State::Trailer => {
                    self.trailer()?;
                    self.state = State::Header { first: false };
                }
            }
        }
    }
}

fn truncated(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("truncated {what}"))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// Image-like data: pseudo-random runs, text-like repeats and zeroes.
    fn data(len: usize, seed: u32) -> Vec<u8> {
        let mut x = 0x9e37_79b9_u32 ^ seed;
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            match x % 3 {
                0 => v.extend((0..(x >> 8) % 4096).map(|i| (x >> (i % 24)) as u8)),
                1 => v.extend(b"the quick brown fox jumps over the lazy dog ".repeat(((x >> 8) % 64) as usize)),
                _ => v.resize(v.len() + ((x >> 8) % 20_000) as usize, 0),
            }
        }
        v.truncate(len);
        v
    }

    fn gzip(chunks: &[&[u8]], level: u32) -> Vec<u8> {
        let mut all = Vec::new();
        for c in chunks {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(c).unwrap_or_else(|e| panic!("{e}"));
            all.extend(e.finish().unwrap_or_else(|e| panic!("{e}")));
        }
        all
    }

    /// Decodes `gz` whole; returns the output and every restart point recorded (the log unbounded).
    fn decode(gz: &[u8]) -> io::Result<(Vec<u8>, Vec<RestartPoint>)> {
        let restarts = Restarts::default();
        let mut d = GzipDecoder::new(io::BufReader::with_capacity(4096, gz), restarts.clone());
        let mut out = Vec::new();
        let mut points = Vec::new();
        let mut buf = vec![0u8; 100_000];
        loop {
            let n = d.read(&mut buf)?;
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
            if let Some(p) = restarts.at_or_before(u64::MAX)
                && points.last() != Some(&p)
            {
                points.push(p);
            }
        }
        Ok((out, points))
    }

    #[test]
    fn decodes_what_flate2_encodes_and_resumes_from_every_restart_point() -> io::Result<()> {
        let d = data(12 << 20, 1);
        let (a, b) = d.split_at(5_000_000);
        for (gz, label) in [(gzip(&[&d], 6), "one member"), (gzip(&[a, b], 1), "two members"), (gzip(&[&d], 9), "-9")] {
            let (out, points) = decode(&gz)?;
            assert!(out == d, "{label}: output differs");
            // Blocks of this data run to megabytes (long zero runs); the second member holds one point at least.
            assert!(points.len() >= 2 && points.iter().any(|p| p.output > 5_000_000), "{label}: {points:?}");
            for p in &points {
                let w = p.output.min(WINDOW as u64) as usize;
                let window = &d[p.output as usize - w..p.output as usize];
                let rest = &gz[p.input as usize..];
                let mut r = GzipDecoder::resume(io::BufReader::new(rest), p, window, Restarts::default())?;
                let mut tail = Vec::new();
                r.read_to_end(&mut tail)?;
                assert!(tail == d[p.output as usize..], "{label}: resumed at {p:?}, the rest differs");
            }
        }
        Ok(())
    }

    #[test]
    fn restart_points_are_spaced_and_bounded() {
        let r = Restarts::default();
        for i in 0..1000u64 {
            r.push(RestartPoint {
                input: i,
                output: i * (SPACING / 2),
                num_bits: 0,
                bit_buf: 0,
                crc: 0,
                member_len: 0,
            });
        }
        let points = r.0.lock().map(|p| p.clone()).unwrap_or_default();
        assert_eq!(points.len(), KEEP);
        assert!(points.iter().zip(points.iter().skip(1)).all(|(a, b)| b.output - a.output >= SPACING));
        let last = points.back().map(|p| p.output).unwrap_or_default();
        assert_eq!(r.at_or_before(last + 5).map(|p| p.output), Some(last));
        assert_eq!(r.at_or_before(last - 1).map(|p| p.output), Some(last - SPACING));
        assert_eq!(r.at_or_before(0), None, "older points are gone");
    }

    #[test]
    fn header_fields_are_skipped() -> io::Result<()> {
        let d = data(200_000, 2);
        let mut gz = flate2::GzBuilder::new()
            .filename("disk.img")
            .comment("a comment")
            .extra(vec![7u8; 300])
            .write(Vec::new(), flate2::Compression::fast());
        gz.write_all(&d)?;
        let mut all = gz.finish()?;
        // FHCRC: flate2 does not write it; set the flag and insert the two bytes after the comment.
        let comment_end = all.windows(10).position(|w| w == b"a comment\0").map(|i| i + 10).unwrap_or(0);
        all[3] |= FHCRC;
        all.splice(comment_end..comment_end, [0xab, 0xcd]);
        assert!(decode(&all)?.0 == d);
        Ok(())
    }

    #[test]
    fn bad_streams_are_refused_by_kind() {
        let good = gzip(&[&data(300_000, 3)], 6);
        let kind = |bytes: &[u8]| decode(bytes).err().map(|e| (e.kind(), e.to_string()));
        let mut crc = good.clone();
        let n = crc.len();
        crc[n - 8] ^= 1;
        let mut len = good.clone();
        len[n - 1] ^= 1;
        let mut garbage = good.clone();
        garbage.extend(b"junk junk junk");
        let mut method = good.clone();
        method[2] = 7;
        let mut corrupt = good.clone();
        corrupt[n / 2..n / 2 + 64].fill(0xff);
        for (bytes, want, text) in [
            (&good[..n / 2], io::ErrorKind::UnexpectedEof, "truncated deflate data"),
            (&good[..n - 4], io::ErrorKind::UnexpectedEof, "truncated gzip trailer"),
            (&good[..5], io::ErrorKind::UnexpectedEof, "truncated gzip header"),
            (&crc[..], io::ErrorKind::InvalidData, "CRC-32 mismatch"),
            (&len[..], io::ErrorKind::InvalidData, "length mismatch"),
            (&garbage[..], io::ErrorKind::InvalidData, "trailing garbage"),
            (&method[..], io::ErrorKind::InvalidData, "compression method 7"),
            (b"not gzip at all", io::ErrorKind::InvalidData, "not a gzip stream"),
        ] {
            let got = kind(bytes);
            assert!(got.as_ref().is_some_and(|(k, m)| *k == want && m.contains(text)), "{text}: {got:?}");
        }
        let got = kind(&corrupt);
        assert!(got.is_some_and(|(k, _)| k == io::ErrorKind::InvalidData), "corrupt deflate data");
    }

    #[test]
    fn a_resume_needs_its_window() {
        let p = RestartPoint { input: 10, output: 100_000, num_bits: 3, bit_buf: 1, crc: 0, member_len: 0 };
        assert!(GzipDecoder::resume(&b""[..], &p, &[0u8; 100], Restarts::default()).is_err());
        let p = RestartPoint { num_bits: 8, ..p };
        assert!(GzipDecoder::resume(&b""[..], &p, &[0u8; WINDOW], Restarts::default()).is_err());
    }
}
