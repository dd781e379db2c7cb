//! Single-pass qcow2 → raw conversion over a sequential stream.
//!
//! The stream is read in order. The header says where the L1 table is; the L1 table says where the L2
//! tables are; each L2 table says where its data clusters are. Every such piece is registered as a *want*
//! (host byte range + what it is). As the stream passes a want's bytes they are consumed: tables are parsed
//! (registering more wants), data is written to its guest offset, compressed clusters are decoded in
//! parallel batches. Images written by qemu place each L2 table before the data it maps, so for them
//! nothing is ever out of order.
//!
//! When a want is registered for bytes that already streamed past, they are taken from [`Refetch`]: the
//! source's positional reads (local file, HTTP Range), or the spill store, which keeps every stream byte
//! not yet accounted for until the mapping is complete. Unmapped guest ranges are reported to the sink as
//! zeroes, so every guest byte in `[0, virtual size)` is covered exactly once.
//!
//! Bounds: every offset is checked against the header cluster and the image size; table sizes are capped
//! by the header validation; pending data runs are capped by [`MAX_PENDING`].
//!
//! Resuming ([`crate::resume`]): while converting, the sink is offered a *frontier* every time it says a
//! checkpoint is due — a stream offset below which every data cluster the image maps from an L2 table that
//! lies below it too has been written (the L1 table is parsed; no table or compressed cluster below it is open
//! or waits for decoding; a data run below it was written up to it). [`convert_from`] continues from such a
//! frontier: the stream starts there, tables below it are re-read with positional reads, and data below it is
//! skipped when its L2 table lies below it as well (written before; a run across it is cut there); everything
//! else is converted as usual (rewriting a cluster is harmless).

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::Arc;

use rayon::prelude::*;

use super::Qcow2Error;
use super::header::{ClusterCompression, Header};
use super::spill::Spill;
use super::tables::{self, L2Entry, Mapping};
use crate::detect::ImageFormat;
use crate::format::FormatError;
use crate::sink::Sink;
use crate::source::RandomAccess;
use crate::{Error, Result};

/// Most data runs that may be registered ahead of the stream (bounds memory on hostile layouts).
pub const MAX_PENDING: usize = 1 << 18;
/// Stream read size.
const CHUNK: usize = 1 << 20;
/// Decompressed bytes gathered before a parallel decode batch runs.
const BATCH_BYTES: u64 = 4 << 20;
/// Decode batches in flight on the thread pool while the stream is read on.
const MAX_INFLIGHT: usize = 2;

type Decoded = Vec<(u64, Vec<u8>, std::result::Result<(), Qcow2Error>)>;

/// Where bytes that already streamed past come from.
pub enum Refetch {
    /// Positional reads of the same bytes (the stream is the source as served, not decompressed).
    Random(Arc<dyn RandomAccess>),
    /// Bytes the stream delivered before they were mapped are kept here.
    Spill(Spill),
}

/// Statistics of a conversion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConvertStats {
    /// Bytes consumed from the stream.
    pub stream_bytes: u64,
    /// Bytes re-read through positional reads.
    pub refetched_bytes: u64,
    /// Bytes kept in the spill store.
    pub spilled_bytes: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    L1,
    L2 { guest: u64 },
    RefTable,
    Data { guest: u64 },
    Compressed { guest: u64 },
    Ignore,
}

#[derive(Debug)]
struct Want {
    start: u64,
    len: u64,
    kind: Kind,
    got: u64,
    buf: Vec<u8>,
}

impl Want {
    fn end(&self) -> u64 {
        self.start + self.len
    }
}

fn ferr(e: Qcow2Error) -> Error {
    Error::Format { format: ImageFormat::Qcow2, source: FormatError::Qcow2(e) }
}

struct Converter<'a> {
    h: Header,
    cs: u64,
    file_size: Option<u64>,
    sink: &'a mut dyn Sink,
    refetch: Refetch,
    future: BTreeMap<u64, Vec<Want>>,
    future_count: usize,
    active: Vec<Want>,
    completed: Vec<Want>,
    /// Start of the bytes currently in memory; everything below it streamed past.
    horizon: u64,
    l1_done: bool,
    pending_l2: usize,
    /// Wants other than `Ignore` registered and not yet finished.
    open_real: usize,
    batch: Vec<(u64, u64, Vec<u8>)>, // (guest, host offset, compressed bytes)
    batch_bytes: u64,
    inflight: std::collections::VecDeque<std::sync::mpsc::Receiver<Decoded>>,
    /// Lowest host offset of each batch in `inflight` (not written yet: it bounds the resume frontier).
    inflight_low: std::collections::VecDeque<u64>,
    /// A resumed conversion's starting frontier (0: a fresh one).
    resume_at: u64,
    /// End of the L2 table whose entries are being registered (`u64::MAX` otherwise).
    l2_end: u64,
    /// Cluster-sized output buffers whose decoded data was written, reused by later batches (fresh
    /// allocations cost page faults and zeroing on every batch).
    spare_out: Vec<Vec<u8>>,
    zero_run: Option<(u64, u64)>,
    stats: ConvertStats,
}

/// Converts the qcow2 image read from `stream` (from offset 0; `header` parsed from its first bytes) into
/// `sink`, covering `[0, virtual size)`. With `read_all` the stream is read to its end even after all
/// mapped data has been seen (needed when the caller hashes it).
pub fn convert(
    header: Header,
    stream: &mut dyn Read,
    file_size: Option<u64>,
    refetch: Refetch,
    sink: &mut dyn Sink,
    read_all: bool,
) -> Result<ConvertStats> {
    convert_from(header, stream, file_size, refetch, sink, read_all, 0)
}

/// [`convert`] resumed at `frontier`, a value an earlier conversion of the same image into the same target
/// offered the sink ([`Sink::checkpoint`]): `stream` yields the image from that offset; `refetch` must be
/// [`Refetch::Random`] when `frontier > 0` (the tables below it are read again).
pub fn convert_from(
    header: Header,
    stream: &mut dyn Read,
    file_size: Option<u64>,
    refetch: Refetch,
    sink: &mut dyn Sink,
    read_all: bool,
    frontier: u64,
) -> Result<ConvertStats> {
    if frontier > 0 && !matches!(refetch, Refetch::Random(_)) {
        return Err(Error::InvalidRequest(String::from("resuming a qcow2 conversion needs positional reads")));
    }
    if let Some(r) = header.refusal() {
        return Err(ferr(r));
    }
    let cs = header.cluster_size();
    let mut c = Converter {
        cs,
        file_size,
        sink,
        refetch,
        future: BTreeMap::new(),
        future_count: 0,
        active: Vec::new(),
        completed: Vec::new(),
        horizon: frontier,
        l1_done: false,
        pending_l2: 0,
        open_real: 0,
        batch: Vec::new(),
        batch_bytes: 0,
        inflight: std::collections::VecDeque::new(),
        inflight_low: std::collections::VecDeque::new(),
        resume_at: frontier,
        l2_end: u64::MAX,
        spare_out: Vec::new(),
        zero_run: None,
        stats: ConvertStats::default(),
        h: header,
    };
    c.add(Want { start: 0, len: cs, kind: Kind::Ignore, got: 0, buf: Vec::new() })?;
    if c.h.l1_size > 0 {
        c.add(Want {
            start: c.h.l1_table_offset,
            len: u64::from(c.h.l1_size) * 8,
            kind: Kind::L1,
            got: 0,
            buf: Vec::new(),
        })?;
    } else {
        c.l1_done = true;
        c.zero(0, c.h.virtual_size)?;
    }
    let rt_len = u64::from(c.h.refcount_table_clusters) * cs;
    if rt_len > 0 {
        c.add(Want { start: c.h.refcount_table_offset, len: rt_len, kind: Kind::RefTable, got: 0, buf: Vec::new() })?;
    }
    c.run(stream, read_all)?;
    c.flush_zero()?;
    Ok(c.stats)
}

impl Converter<'_> {
    fn mapping_complete(&self) -> bool {
        self.l1_done && self.pending_l2 == 0
    }

    fn nothing_left(&self) -> bool {
        self.mapping_complete() && self.open_real == 0
    }

    fn run(&mut self, stream: &mut dyn Read, read_all: bool) -> Result<()> {
        let mut chunk = vec![0u8; CHUNK];
        let mut pos = self.resume_at;
        loop {
            if !read_all && self.nothing_left() {
                break;
            }
            if let Some((guest, max)) = self.direct_run(pos) {
                // Fast path: the next bytes are one data run's and nothing else's; read them straight into
                // the sink's buffer (one copy less than going through `chunk`).
                let n = self.sink.write_with(guest, max, &mut |buf| {
                    crate::format::read_full(stream, buf).map_err(|e| crate::error::untag(e, pos))
                })?;
                if n == 0 {
                    break;
                }
                self.advance_direct(n as u64)?;
                pos += n as u64;
                self.horizon = pos;
                self.stats.stream_bytes = pos;
                self.offer_checkpoint(pos)?;
                continue;
            }
            let n = crate::format::read_full(stream, &mut chunk).map_err(|e| crate::error::untag(e, pos))?;
            if n == 0 {
                break;
            }
            self.process(pos, &chunk[..n])?;
            pos += n as u64;
            self.horizon = pos;
            self.stats.stream_bytes = pos;
            self.offer_checkpoint(pos)?;
        }
        self.at_end(pos)?;
        self.flush_batch()?;
        while !self.inflight.is_empty() {
            self.collect_batch()?;
        }
        Ok(())
    }

    /// When the sink wants a checkpoint: the frontier at stream offset `pos` (see the module documentation).
    /// Conservative: any open want, gathered or in-flight compressed cluster below `pos` bounds it.
    fn offer_checkpoint(&mut self, pos: u64) -> Result<()> {
        if !self.l1_done || !self.sink.checkpoint_due() {
            return Ok(());
        }
        // A data want writes what it consumes; anything else is done only when finished.
        let written = |w: &Want| match w.kind {
            Kind::Data { .. } => w.start + w.got,
            _ => w.start,
        };
        let future = self.future.range(..pos).flat_map(|(_, ws)| ws);
        let open = future.chain(&self.active).chain(&self.completed).map(written);
        let batched = self.batch.iter().map(|b| b.1);
        let f = open.chain(batched).chain(self.inflight_low.iter().copied()).fold(pos, u64::min);
        self.sink.checkpoint(f)
    }

    /// When the stream bytes at `pos` belong to exactly one want, a data run, and no other want starts
    /// within the next bytes: the run's guest offset for `pos` and how many bytes may be read for it.
    /// The want is made active. Compressed batches need no attention here (no want of them is active).
    fn direct_run(&mut self, pos: u64) -> Option<(u64, usize)> {
        if self.active.is_empty()
            && let Some(mut entry) = self.future.first_entry()
            && *entry.key() == pos
            && entry.get().len() == 1
            && matches!(entry.get()[0].kind, Kind::Data { .. })
        {
            let ws = std::mem::take(entry.get_mut());
            entry.remove();
            self.future_count -= 1;
            self.active.extend(ws);
        }
        let [w] = self.active.as_slice() else { return None };
        let Kind::Data { guest } = w.kind else { return None };
        if w.start + w.got != pos {
            return None;
        }
        let guest = guest + w.got;
        let next_want = self.future.keys().next().map_or(u64::MAX, |&k| k);
        let max = (w.len - w.got).min(next_want.saturating_sub(pos)).min(self.h.virtual_size.saturating_sub(guest));
        (max > 0).then(|| (guest, max.min(CHUNK as u64 * 2) as usize))
    }

    /// Accounts `n` bytes read by the fast path to the single active data want.
    fn advance_direct(&mut self, n: u64) -> Result<()> {
        if let Some(w) = self.active.first_mut() {
            w.got += n;
            if w.got >= w.len {
                let w = self.active.swap_remove(0);
                self.finish(w)?;
            }
        }
        Ok(())
    }

    /// Registers a want; bytes that already streamed past are fetched now.
    fn add(&mut self, mut w: Want) -> Result<()> {
        if w.len == 0 {
            return Ok(());
        }
        if matches!(w.kind, Kind::Data { .. } | Kind::Compressed { .. })
            && w.start < self.resume_at
            && self.l2_end <= self.resume_at
        {
            // Written before the frontier this conversion resumes from: all of it, or a data run's part below
            // it (a compressed cluster across it is decoded again).
            match w.kind {
                _ if w.end() <= self.resume_at => return Ok(()),
                Kind::Data { guest } => {
                    let cut = self.resume_at - w.start;
                    w = Want { start: self.resume_at, len: w.len - cut, kind: Kind::Data { guest: guest + cut }, ..w };
                }
                _ => {}
            }
        }
        if w.kind != Kind::Ignore {
            self.open_real += 1;
        }
        if w.start < self.horizon {
            let past_end = w.end().min(self.horizon);
            self.fetch_past(&mut w, past_end)?;
            if w.got == w.len {
                self.completed.push(w);
                return Ok(());
            }
        }
        if self.future_count >= MAX_PENDING {
            return Err(ferr(Qcow2Error::TooManyPending { limit: MAX_PENDING }));
        }
        self.future_count += 1;
        self.future.entry(w.start).or_default().push(w);
        Ok(())
    }

    /// Fills `[w.start, past_end)` of a want from the refetch source.
    fn fetch_past(&mut self, w: &mut Want, past_end: u64) -> Result<()> {
        if w.kind == Kind::Ignore {
            w.got = past_end - w.start;
            return Ok(());
        }
        let mut pos = w.start;
        let mut buf = vec![0u8; ((past_end - pos) as usize).min(CHUNK)];
        while pos < past_end {
            let n = ((past_end - pos) as usize).min(buf.len());
            let piece = &mut buf[..n];
            match &self.refetch {
                Refetch::Random(ra) => {
                    ra.read_at(pos, piece).map_err(|e| crate::error::untag(e, pos))?;
                    self.stats.refetched_bytes += n as u64;
                }
                Refetch::Spill(s) => {
                    if !s.get(pos, piece).map_err(|source| Error::SourceRead { offset: pos, source })? {
                        return Err(ferr(Qcow2Error::NeedsRereading { offset: pos }));
                    }
                }
            }
            self.consume(w, pos, &buf[..n])?;
            pos += n as u64;
        }
        Ok(())
    }

    /// Feeds bytes at host offset `at` (inside the want, at its current position) to a want.
    fn consume(&mut self, w: &mut Want, at: u64, data: &[u8]) -> Result<()> {
        debug_assert_eq!(at, w.start + w.got);
        match w.kind {
            Kind::Data { guest } => self.write_guest(guest + (at - w.start), data)?,
            Kind::Ignore => {}
            _ => {
                if w.buf.capacity() == 0 {
                    w.buf.reserve_exact(w.len as usize);
                }
                w.buf.extend_from_slice(data)
            }
        }
        w.got += data.len() as u64;
        Ok(())
    }

    fn process(&mut self, c: u64, data: &[u8]) -> Result<()> {
        let end = c + data.len() as u64;
        let mut covered: Vec<(u64, u64)> = Vec::new();
        loop {
            // Wants that start in this chunk become active.
            let later = self.future.split_off(&end);
            let starting = std::mem::replace(&mut self.future, later);
            for (_, ws) in starting {
                self.future_count -= ws.len();
                self.active.extend(ws);
            }
            let mut i = 0;
            while i < self.active.len() {
                let (from, to) = {
                    let w = &self.active[i];
                    (c.max(w.start + w.got), end.min(w.end()))
                };
                if from < to {
                    covered.push((from, to));
                    let mut w = self.active.swap_remove(i);
                    self.consume(&mut w, from, &data[(from - c) as usize..(to - c) as usize])?;
                    self.active.push(w);
                    let last = self.active.len() - 1;
                    self.active.swap(i, last);
                }
                if self.active[i].got == self.active[i].len {
                    let w = self.active.swap_remove(i);
                    self.completed.push(w);
                } else {
                    i += 1;
                }
            }
            if self.completed.is_empty() {
                break;
            }
            while let Some(w) = self.completed.pop() {
                self.finish(w)?;
            }
        }
        if let Refetch::Spill(_) = self.refetch
            && !self.mapping_complete()
        {
            covered.sort_unstable();
            let mut at = c;
            let mut pieces = Vec::new();
            for (f, t) in covered {
                if f > at {
                    pieces.push((at, f));
                }
                at = at.max(t);
            }
            if at < end {
                pieces.push((at, end));
            }
            if let Refetch::Spill(s) = &mut self.refetch {
                for (f, t) in pieces {
                    s.put(f, &data[(f - c) as usize..(t - c) as usize])?;
                    self.stats.spilled_bytes += t - f;
                }
            }
        }
        if self.batch_bytes >= BATCH_BYTES {
            self.flush_batch()?;
        }
        Ok(())
    }

    fn at_end(&mut self, eof: u64) -> Result<()> {
        let mut leftovers: Vec<Want> = std::mem::take(&mut self.active);
        for (_, ws) in std::mem::take(&mut self.future) {
            leftovers.extend(ws);
        }
        self.future_count = 0;
        for mut w in leftovers {
            match w.kind {
                Kind::Ignore | Kind::RefTable => {}
                Kind::Compressed { .. } if w.start < eof => {
                    // The last compressed cluster's sectors may run past the end of the file.
                    w.buf.resize(w.len as usize, 0);
                    w.got = w.len;
                    self.finish(w)?;
                    while let Some(w) = self.completed.pop() {
                        self.finish(w)?;
                    }
                }
                _ => {
                    let what = match w.kind {
                        Kind::L1 => "L1 table",
                        Kind::L2 { .. } => "L2 table",
                        Kind::Compressed { .. } => "compressed cluster",
                        _ => "data cluster",
                    };
                    return Err(ferr(if w.start + w.got > w.start || w.start < eof {
                        Qcow2Error::Truncated {
                            what,
                            offset: w.start,
                            needed: w.len,
                            available: eof.saturating_sub(w.start),
                        }
                    } else {
                        Qcow2Error::BeyondEnd { what, offset: w.start, file_size: eof }
                    }));
                }
            }
        }
        Ok(())
    }

    fn check_in_file(&self, what: &'static str, offset: u64, len: u64) -> Result<()> {
        if offset < self.cs {
            return Err(ferr(Qcow2Error::IntoHeader { what, offset }));
        }
        if let Some(fs) = self.file_size
            && offset.saturating_add(len) > fs
        {
            return Err(ferr(Qcow2Error::BeyondEnd { what, offset, file_size: fs }));
        }
        Ok(())
    }

    fn finish(&mut self, w: Want) -> Result<()> {
        if w.kind != Kind::Ignore {
            self.open_real -= 1;
        }
        match w.kind {
            Kind::Data { .. } | Kind::Ignore => Ok(()),
            Kind::L1 => {
                self.l1_done = true;
                let bpl2 = self.h.bytes_per_l2();
                for (i, e) in w.buf.chunks_exact(8).enumerate() {
                    let guest = i as u64 * bpl2;
                    if guest >= self.h.virtual_size {
                        break;
                    }
                    let raw = u64::from_be_bytes(e.try_into().unwrap_or([0; 8]));
                    match tables::l1_entry(&self.h, raw).map_err(ferr)? {
                        None => self.zero(guest, bpl2)?,
                        Some(off) => {
                            self.check_in_file("L2 table", off, self.cs)?;
                            self.pending_l2 += 1;
                            self.add(Want {
                                start: off,
                                len: self.cs,
                                kind: Kind::L2 { guest },
                                got: 0,
                                buf: Vec::new(),
                            })?;
                        }
                    }
                }
                Ok(())
            }
            Kind::L2 { guest } => {
                self.pending_l2 -= 1;
                self.l2_end = w.end();
                let r = self.parse_l2(guest, &w.buf);
                self.l2_end = u64::MAX;
                r
            }
            Kind::RefTable => {
                for e in w.buf.chunks_exact(8) {
                    // Refcount table entries hold offsets in bits 9..56, like L1 entries.
                    let off = u64::from_be_bytes(e.try_into().unwrap_or([0; 8])) & 0x00ff_ffff_ffff_fe00;
                    if off >= self.cs
                        && off.is_multiple_of(self.cs)
                        && self.file_size.is_none_or(|fs| off.saturating_add(self.cs) <= fs)
                    {
                        self.add(Want { start: off, len: self.cs, kind: Kind::Ignore, got: 0, buf: Vec::new() })?;
                    }
                }
                Ok(())
            }
            Kind::Compressed { guest } => {
                self.batch_bytes += self.cs;
                self.batch.push((guest, w.start, w.buf));
                Ok(())
            }
        }
    }

    fn parse_l2(&mut self, base: u64, table: &[u8]) -> Result<()> {
        let eb = self.h.l2_entry_bytes() as usize;
        let cs = self.cs;
        let mut run: Option<(u64, u64, u64)> = None; // (host, guest, len) of contiguous data
        for (j, e) in table.chunks_exact(eb).enumerate() {
            let guest = base + j as u64 * cs;
            if guest >= self.h.virtual_size {
                break;
            }
            let raw = u64::from_be_bytes(e[0..8].try_into().unwrap_or([0; 8]));
            let bitmap = if eb == 16 { u64::from_be_bytes(e[8..16].try_into().unwrap_or([0; 8])) } else { 0 };
            let entry = tables::l2_entry(&self.h, raw, bitmap).map_err(ferr)?;
            let pieces: Vec<(u64, u64, Mapping)> = match entry {
                L2Entry::Cluster(m) => vec![(guest, cs, m)],
                L2Entry::Subclusters(subs) => {
                    let sc = cs / 32;
                    subs.iter().enumerate().map(|(i, m)| (guest + i as u64 * sc, sc, *m)).collect()
                }
            };
            for (g, len, m) in pieces {
                match m {
                    Mapping::Zero => {
                        self.flush_run(&mut run)?;
                        self.zero(g, len)?;
                    }
                    Mapping::Data(host) => {
                        self.check_in_file("data cluster", host, len)?;
                        match &mut run {
                            Some((h, rg, l)) if *h + *l == host && *rg + *l == g => *l += len,
                            _ => {
                                self.flush_run(&mut run)?;
                                run = Some((host, g, len));
                            }
                        }
                    }
                    Mapping::Compressed { offset, len: clen } => {
                        self.flush_run(&mut run)?;
                        if let Some(fs) = self.file_size
                            && offset >= fs
                        {
                            return Err(ferr(Qcow2Error::BeyondEnd {
                                what: "compressed cluster",
                                offset,
                                file_size: fs,
                            }));
                        }
                        let clen = match self.file_size {
                            Some(fs) => clen.min(fs - offset),
                            None => clen,
                        };
                        self.flush_zero()?;
                        self.add(Want {
                            start: offset,
                            len: clen,
                            kind: Kind::Compressed { guest: g },
                            got: 0,
                            buf: Vec::new(),
                        })?;
                    }
                }
            }
        }
        self.flush_run(&mut run)
    }

    fn flush_run(&mut self, run: &mut Option<(u64, u64, u64)>) -> Result<()> {
        if let Some((host, guest, len)) = run.take() {
            self.flush_zero()?;
            self.add(Want { start: host, len, kind: Kind::Data { guest }, got: 0, buf: Vec::new() })?;
        }
        Ok(())
    }

    /// Writes data at a guest offset, clipped to the virtual size.
    fn write_guest(&mut self, guest: u64, data: &[u8]) -> Result<()> {
        let vs = self.h.virtual_size;
        if guest >= vs {
            return Ok(());
        }
        let n = ((vs - guest) as usize).min(data.len());
        self.sink.write_at(guest, &data[..n])
    }

    /// Records a zero range (clipped to the virtual size), coalescing with the previous one.
    fn zero(&mut self, guest: u64, len: u64) -> Result<()> {
        let vs = self.h.virtual_size;
        if guest >= vs {
            return Ok(());
        }
        let len = len.min(vs - guest);
        match &mut self.zero_run {
            Some((g, l)) if *g + *l == guest => *l += len,
            _ => {
                self.flush_zero()?;
                self.zero_run = Some((guest, len));
            }
        }
        Ok(())
    }

    fn flush_zero(&mut self) -> Result<()> {
        if let Some((g, l)) = self.zero_run.take() {
            self.sink.write_zeroes(g, l)?;
        }
        Ok(())
    }

    /// Hands the gathered compressed clusters to the thread pool; writes finished batches beyond
    /// [`MAX_INFLIGHT`].
    fn flush_batch(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::take(&mut self.batch);
        self.batch_bytes = 0;
        self.inflight_low.push_back(batch.iter().map(|b| b.1).min().unwrap_or(u64::MAX));
        let cs = self.cs as usize;
        let comp = self.h.compression;
        let outs: Vec<Vec<u8>> =
            (0..batch.len()).map(|_| self.spare_out.pop().unwrap_or_else(|| vec![0; cs])).collect();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rayon::spawn(move || {
            let out: Decoded = batch
                .into_par_iter()
                .zip(outs)
                .map(|((guest, host, data), mut out)| {
                    let r = decompress_cluster(comp, &data, &mut out)
                        .map_err(|reason| Qcow2Error::BadCompressedCluster { offset: host, reason });
                    (guest, out, r)
                })
                .collect();
            let _ = tx.send(out);
        });
        self.inflight.push_back(rx);
        while self.inflight.len() > MAX_INFLIGHT {
            self.collect_batch()?;
        }
        Ok(())
    }

    /// Waits for the oldest decode batch and writes it.
    fn collect_batch(&mut self) -> Result<()> {
        let Some(rx) = self.inflight.pop_front() else {
            return Ok(());
        };
        self.inflight_low.pop_front();
        let out = rx
            .recv()
            .map_err(|_| Error::SourceRead { offset: 0, source: io::Error::other("decoder thread failed") })?;
        for (guest, data, r) in out {
            r.map_err(ferr)?;
            self.write_guest(guest, &data)?;
            // Bounded: no more buffers are ever out than the batches in flight hold.
            self.spare_out.push(data);
        }
        Ok(())
    }
}

/// Decodes one compressed cluster into `out` (one cluster long); the output must fill it exactly (trailing
/// input is sector padding).
pub fn decompress_cluster(comp: ClusterCompression, input: &[u8], out: &mut [u8]) -> std::result::Result<(), String> {
    let cs = out.len();
    match comp {
        ClusterCompression::Zlib => {
            let mut d = flate2::Decompress::new(false);
            match d.decompress(input, out, flate2::FlushDecompress::Finish) {
                Ok(_) if d.total_out() as usize == cs => Ok(()),
                Ok(_) => Err(format!("deflate produced {} of {cs} bytes", d.total_out())),
                Err(e) => Err(format!("deflate: {e}")),
            }
        }
        ClusterCompression::Zstd => {
            use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
            let mut d = Decoder::new().map_err(|e| format!("zstd: {e}"))?;
            let mut inb = InBuffer::around(input);
            let mut outb = OutBuffer::around(out);
            while outb.pos() < cs {
                let before = (inb.pos, outb.pos());
                let hint = d.run(&mut inb, &mut outb).map_err(|e| format!("zstd: {e}"))?;
                if (inb.pos, outb.pos()) == before || (hint == 0 && outb.pos() < cs && inb.pos >= input.len()) {
                    break;
                }
            }
            let got = outb.pos();
            if got == cs { Ok(()) } else { Err(format!("zstd produced {got} of {cs} bytes")) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::SinkReport;
    use crate::sink::test_sinks::MemSink;

    /// A 512-byte-cluster v3 image with 4 guest clusters: guest 0 = data "A", guest 1 unallocated, guest 2 =
    /// data "C", guest 3 zero flag. With `data_first` the data clusters precede the L2 table in the file.
    fn image(data_first: bool) -> (Vec<u8>, Vec<u8>) {
        let cs = 512usize;
        // Out of order means in an earlier stream chunk: put the L2 table past the first read.
        let (l1, l2, a, c) = if data_first { (1, 2 * CHUNK / cs, 2, 3) } else { (1, 2, 3, 4) };
        let mut f = vec![0u8; (l2.max(c) + 2) * cs];
        f[0..4].copy_from_slice(b"QFI\xfb");
        f[4..8].copy_from_slice(&3u32.to_be_bytes());
        f[20..24].copy_from_slice(&9u32.to_be_bytes());
        f[24..32].copy_from_slice(&(4 * cs as u64).to_be_bytes());
        f[36..40].copy_from_slice(&1u32.to_be_bytes());
        f[40..48].copy_from_slice(&((l1 * cs) as u64).to_be_bytes());
        f[96..100].copy_from_slice(&4u32.to_be_bytes());
        f[100..104].copy_from_slice(&104u32.to_be_bytes());
        f[l1 * cs..l1 * cs + 8].copy_from_slice(&((l2 * cs) as u64 | 1 << 63).to_be_bytes());
        let e = |host: usize| ((host * cs) as u64 | 1 << 63).to_be_bytes();
        f[l2 * cs..l2 * cs + 8].copy_from_slice(&e(a));
        f[l2 * cs + 16..l2 * cs + 24].copy_from_slice(&e(c));
        f[l2 * cs + 24..l2 * cs + 32].copy_from_slice(&1u64.to_be_bytes());
        f[a * cs..(a + 1) * cs].fill(b'A');
        f[c * cs..(c + 1) * cs].fill(b'C');
        let mut want = vec![0u8; 4 * cs];
        want[..cs].fill(b'A');
        want[2 * cs..3 * cs].fill(b'C');
        (f, want)
    }

    fn run(img: &[u8], refetch: Refetch, known_size: bool) -> Result<(Vec<u8>, ConvertStats)> {
        let size = known_size.then_some(img.len() as u64);
        let h = Header::parse(img, size).map_err(ferr)?;
        let mut sink = MemSink::new(h.virtual_size as usize);
        let mut stream = img;
        let stats = convert(h, &mut stream, size, refetch, &mut sink, true)?;
        assert!(sink.covered.iter().all(|&c| c), "not every guest byte covered");
        Ok((sink.data, stats))
    }

    /// A 4 MiB-virtual image with 512-byte clusters: 128 L2 tables, each with its 64 data clusters after it
    /// (with `some_data_first`, every third table after its data instead); every 7th cluster unallocated; with
    /// `compress`, every 5th cluster deflated (decoded in batches, written late).
    fn striped_image(some_data_first: bool, compress: bool) -> (Vec<u8>, Vec<u8>) {
        let cs = 512usize;
        let (tables, per) = (128usize, 64usize);
        let mut f = vec![0u8; 3 * cs];
        f[0..4].copy_from_slice(b"QFI\xfb");
        f[4..8].copy_from_slice(&3u32.to_be_bytes());
        f[20..24].copy_from_slice(&9u32.to_be_bytes());
        f[24..32].copy_from_slice(&((tables * per * cs) as u64).to_be_bytes());
        f[36..40].copy_from_slice(&(tables as u32).to_be_bytes());
        f[40..48].copy_from_slice(&(cs as u64).to_be_bytes());
        f[96..100].copy_from_slice(&4u32.to_be_bytes());
        f[100..104].copy_from_slice(&104u32.to_be_bytes());
        let mut want = vec![0u8; tables * per * cs];
        for t in 0..tables {
            let table_first = !(some_data_first && t % 3 == 1);
            let base = f.len() / cs;
            let (l2, data0) = if table_first { (base, base + 1) } else { (base + per, base) };
            f.resize((base + per + 1) * cs, 0);
            f[cs + t * 8..cs + t * 8 + 8].copy_from_slice(&((l2 * cs) as u64 | 1 << 63).to_be_bytes());
            for j in 0..per {
                let g = t * per + j;
                if g % 7 == 3 {
                    continue;
                }
                let host = data0 + j;
                let byte = (g as u8) ^ 0x5a | 1;
                want[g * cs..(g + 1) * cs].fill(byte);
                let entry = if compress && g % 5 == 2 {
                    use std::io::Write;
                    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
                    e.write_all(&want[g * cs..(g + 1) * cs]).unwrap_or_else(|e| panic!("{e}"));
                    let z = e.finish().unwrap_or_else(|e| panic!("{e}"));
                    f[host * cs..host * cs + z.len()].copy_from_slice(&z);
                    (host * cs) as u64 | 1 << 62
                } else {
                    f[host * cs..(host + 1) * cs].fill(byte);
                    (host * cs) as u64 | 1 << 63
                };
                f[l2 * cs + j * 8..l2 * cs + j * 8 + 8].copy_from_slice(&entry.to_be_bytes());
            }
        }
        (f, want)
    }

    /// A file-like target (reads 0 where never written) that wants a checkpoint after every read and keeps a
    /// copy of itself with each frontier offered.
    struct Snapshots {
        data: Vec<u8>,
        taken: Vec<(u64, Vec<u8>)>,
    }

    impl Sink for Snapshots {
        fn capacity(&self) -> Option<u64> {
            Some(self.data.len() as u64)
        }
        fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
            self.data[offset as usize..offset as usize + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn write_zeroes(&mut self, _offset: u64, _len: u64) -> Result<()> {
            Ok(())
        }
        fn checkpoint_due(&self) -> bool {
            true
        }
        fn checkpoint(&mut self, frontier: u64) -> Result<()> {
            self.taken.push((frontier, self.data.clone()));
            Ok(())
        }
        fn finish(&mut self, len: u64) -> Result<SinkReport> {
            Ok(SinkReport { size: len, bytes_written: 0, preallocated: false })
        }
        fn abort(&mut self) {}
        fn external_target(&mut self, _len: u64) -> Result<(std::path::PathBuf, bool)> {
            Err(Error::InvalidRequest("test".into()))
        }
        fn note_external_write(&mut self, _bytes: u64) {}
    }

    #[test]
    fn resuming_from_any_offered_frontier_yields_the_whole_image() -> Result<()> {
        for (some_data_first, compress) in [(false, false), (true, false), (false, true), (true, true)] {
            let (img, want) = striped_image(some_data_first, compress);
            let size = Some(img.len() as u64);
            let ra: Arc<dyn RandomAccess> = Arc::new(crate::source::MemoryAccess(img.clone()));
            let h = Header::parse(&img, size).map_err(ferr)?;
            let mut first = Snapshots { data: vec![0; want.len()], taken: Vec::new() };
            let mut stream = &img[..];
            convert(h.clone(), &mut stream, size, Refetch::Random(ra.clone()), &mut first, true)?;
            assert!(first.data == want, "the first conversion itself");
            // One offer per read of the stream (1 MiB, or one data run).
            assert!(first.taken.len() >= 4, "frontiers offered: {}", first.taken.len());
            let frontiers: Vec<u64> = first.taken.iter().map(|t| t.0).collect();
            assert!(frontiers.windows(2).all(|w| w[0] <= w[1]), "frontiers only move on");
            // Resume from every tenth frontier, the target holding what was written until it was offered, or
            // everything the first run wrote (writes after the checkpoint are harmless).
            for (frontier, written) in &first.taken {
                for start in [written.clone(), want.clone()] {
                    let mut again = Snapshots { data: start, taken: Vec::new() };
                    let mut rest = &img[*frontier as usize..];
                    let refetch = Refetch::Random(ra.clone());
                    convert_from(h.clone(), &mut rest, size, refetch, &mut again, true, *frontier)?;
                    assert!(again.data == want, "resumed from {frontier} ({some_data_first}, {compress})");
                }
            }
        }
        Ok(())
    }

    #[test]
    fn in_order_needs_nothing() -> Result<()> {
        let (img, want) = image(false);
        let (got, stats) = run(&img, Refetch::Spill(Spill::memory()), true)?;
        assert_eq!(got, want);
        assert_eq!((stats.refetched_bytes, stats.spilled_bytes), (0, 0));
        Ok(())
    }

    #[test]
    fn out_of_order_uses_refetch_or_spill() -> Result<()> {
        let (img, want) = image(true);
        let (got, stats) = run(&img, Refetch::Random(Arc::new(crate::source::MemoryAccess(img.clone()))), true)?;
        assert_eq!(got, want);
        assert_eq!(stats.refetched_bytes, 1024);
        let (got, stats) = run(&img, Refetch::Spill(Spill::memory()), false)?;
        assert_eq!(got, want);
        assert!(stats.spilled_bytes >= 1024);
        Ok(())
    }

    #[test]
    fn hostile_refcount_table_entries_do_not_overflow() -> Result<()> {
        // Found by the fuzzer: a refcount table entry near u64::MAX overflowed an offset addition.
        let (mut img, want) = image(false);
        img[48..56].copy_from_slice(&(5u64 * 512).to_be_bytes());
        img[56..60].copy_from_slice(&1u32.to_be_bytes());
        img[5 * 512..5 * 512 + 8].copy_from_slice(&u64::MAX.to_be_bytes());
        img[5 * 512 + 8..5 * 512 + 16].copy_from_slice(&(u64::MAX - 511).to_be_bytes());
        for known in [true, false] {
            let (got, _) = run(&img, Refetch::Spill(Spill::memory()), known)?;
            assert_eq!(got, want);
        }
        Ok(())
    }

    #[test]
    fn truncated_and_beyond_end() {
        let (img, _) = image(false);
        let e = run(&img[..4 * 512 + 100], Refetch::Spill(Spill::memory()), false).err().map(|e| e.to_string());
        assert!(e.as_deref().unwrap_or("").contains("truncated"), "{e:?}");
        let e = run(&img[..4 * 512], Refetch::Spill(Spill::memory()), true).err().map(|e| e.to_string());
        assert!(e.as_deref().unwrap_or("").contains("beyond the end"), "{e:?}");
    }

    #[test]
    fn compressed_clusters_roundtrip() -> Result<()> {
        use std::io::Write;
        let cs = 65536;
        let data: Vec<u8> = (0..cs).map(|i| (i % 7) as u8).collect();
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(&data).map_err(|s| Error::SourceRead { offset: 0, source: s })?;
        let mut z = e.finish().map_err(|s| Error::SourceRead { offset: 0, source: s })?;
        z.extend([0u8; 300]); // sector padding
        // Output buffers are reused, so start from garbage: a success must overwrite all of it.
        let dec = |c, input: &[u8]| {
            let mut out = vec![0xa5u8; cs];
            decompress_cluster(c, input, &mut out).map(|()| out)
        };
        assert_eq!(dec(ClusterCompression::Zlib, &z).ok(), Some(data.clone()));
        let zs = zstd::encode_all(&data[..], 3).map_err(|s| Error::SourceRead { offset: 0, source: s })?;
        assert_eq!(dec(ClusterCompression::Zstd, &zs).ok(), Some(data.clone()));
        assert!(dec(ClusterCompression::Zstd, &zs[..zs.len() / 2]).is_err());
        assert!(dec(ClusterCompression::Zlib, &z[..10]).is_err());
        let short = zstd::encode_all(&data[..100], 3).map_err(|s| Error::SourceRead { offset: 0, source: s })?;
        assert!(dec(ClusterCompression::Zstd, &short).is_err());
        Ok(())
    }
}
