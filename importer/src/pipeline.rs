//! Executes an import: probe (open, sniff) → [`plan`](crate::plan::plan) (pure) → execute (stream into the
//! sink) → verify the checksum → finish the sink. On any failure the sink is aborted (a file target is
//! removed) and scratch files are deleted.
//!
//! ```text
//! source ─► count (progress) ─► hash (checksum) ─► decompress* ─► format ─► sink (sparse, fsync)
//!                                                   OVA: tar ─► .ovf ─► the chosen disk's member ─► format
//! ```
//!
//! Every plan that reads the stream only partly (native qcow2, streamOptimized vmdk, an OVA's disk) drains the
//! rest when a checksum is verified or the source is a registry layer, so every source byte is hashed and the
//! layer's own checks run. A vhd or vhdx read by positional reads of the source drains the stream first when it
//! is hashed (a local file is then read twice, an HTTP source transferred twice), else closes it unread.

use std::io::{self, Read};
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use crate::checksum::{ExpectedChecksum, Hasher, HashingReader};
use crate::decompress::gzip::{GzipDecoder, Restarts};
use crate::decompress::xz_index;
use crate::decompress::{self, BoxRead, MAX_NESTING};
use crate::detect::{Compression, DETECT_LEN, ImageFormat};
use crate::error::{Tagger, untag};
use crate::format::ova::{self, DiskMember, OvaError};
use crate::format::positional::{self, FileAccess};
use crate::format::qcow2::{self, Header, Refetch, spill::Spill};
use crate::format::{self, FormatError, parent, qemu_img, vhd, vhdx, vmdk};
use crate::plan::{self, DelegateInput, Plan, Probe, RefetchPlan, SeekInput, SizeRule};
use crate::progress::{CountingReader, Phase, Progress};
use crate::resume::{Checkpoint, Checkpointing, Layout};
use crate::sink::{self, Sink};
use crate::source::{self, OpenedSource, SourceLocation, SourceOptions};
use crate::{Error, Result};

/// A validated import request: the only input of [`import`].
#[derive(Debug, Clone)]
pub struct ImportRequest {
    /// Where the image comes from.
    pub source: SourceLocation,
    /// The target file or block device.
    pub dest: PathBuf,
    /// Expected checksum of the source bytes as served.
    pub checksum: Option<ExpectedChecksum>,
    /// How the target is sized.
    pub size: SizeRule,
    /// Allocate the whole target.
    pub preallocate: bool,
    /// HTTP settings.
    pub http: SourceOptions,
    /// Scratch directory for formats/sources that need one.
    pub scratch: Option<PathBuf>,
    /// Resume from the checkpoint an interrupted run left next to a file target, and write checkpoints
    /// ([`resume`](crate::resume)); without it an existing target is replaced.
    pub resume: bool,
}

/// The result of a successful import.
#[derive(Debug, Clone, Serialize)]
pub struct ImportReport {
    /// Detected format.
    pub format: ImageFormat,
    /// Compression wrappers, outermost first, `+`-joined; `none` without.
    pub compression: String,
    /// Virtual size of the image.
    pub virtual_size: u64,
    /// Final size of the target.
    pub target_size: u64,
    /// Bytes read from the source (stream and ranged reads).
    pub bytes_read: u64,
    /// Non-zero bytes written to the target.
    pub bytes_written: u64,
    /// Wall-clock seconds.
    pub seconds: f64,
    /// `algo:hex` of the source bytes, when a checksum was requested.
    pub checksum: Option<String>,
    /// Whether the target was preallocated.
    pub preallocated: bool,
    /// How the import ran (see [`Plan::name`]).
    pub strategy: &'static str,
    /// Registry images: the config's `Env` entries.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub image_env: Vec<String>,
}

/// Reads up to `n` bytes ahead and returns them together with a stream that still yields them.
fn peek(mut r: BoxRead, n: usize) -> io::Result<(Vec<u8>, BoxRead)> {
    let mut head = vec![0u8; n];
    let got = format::read_full(&mut r, &mut head)?;
    head.truncate(got);
    let chained: BoxRead = Box::new(io::Cursor::new(head.clone()).chain(r));
    Ok((head, chained))
}

/// The stream after sniffing: decompressed, with its first bytes known.
pub struct Probed {
    /// The opened source (its stream has moved into `stream`).
    pub size: Option<u64>,
    /// Positional reads of the source.
    pub random_access: Option<std::sync::Arc<dyn source::RandomAccess>>,
    /// Local path of the source.
    pub local_path: Option<PathBuf>,
    /// Compression wrappers, outermost first.
    pub compressions: Vec<Compression>,
    /// Format of the innermost stream.
    pub format: ImageFormat,
    /// The first bytes of the innermost stream (up to 64 KiB).
    pub head: Vec<u8>,
    /// The innermost stream from offset 0.
    pub stream: BoxRead,
    /// Registry images: the config's `Env` entries.
    pub image_env: Vec<String>,
    /// The restart points of the gzip decoder, when the stream is one gzip wrapper decoded restartably.
    pub restarts: Option<Restarts>,
}

/// Bytes peeked from the innermost stream: a qcow2 header cluster or the ISO signature fit.
const HEAD_LEN: usize = 64 << 10;

/// Opens the source and sniffs compression wrappers and the format. `hasher` taps the bytes as served.
pub fn probe(
    location: &SourceLocation,
    http: &SourceOptions,
    rt: &tokio::runtime::Handle,
    progress: &Progress,
    hasher: Option<&Hasher>,
) -> Result<Probed> {
    probe_opened(source::open_hashed(location, http, rt, hasher)?, location, progress, hasher, false)
}

/// [`probe`] for a source the caller opened itself (a push source: an upload body). `location` only names
/// the source in errors (a [`SourceLocation::File`] makes read failures `reading the source failed at byte N`).
/// With `restartable`, an outermost gzip wrapper is decoded by the decoder that records restart points
/// ([`Probed::restarts`]).
pub fn probe_opened(
    opened: OpenedSource,
    location: &SourceLocation,
    progress: &Progress,
    hasher: Option<&Hasher>,
    restartable: bool,
) -> Result<Probed> {
    let OpenedSource { stream, size, random_access, local_path, image_env, .. } = opened;
    let loc = location.clone();
    let counted = CountingReader::new(stream, progress.clone());
    let raw: BoxRead = match hasher {
        Some(h) if !h.fed_by_source() => Box::new(HashingReader::new(counted, h.clone())),
        _ => Box::new(counted),
    };
    let mut stream: BoxRead = Box::new(Tagger::new(raw, move |e: io::Error, offset| {
        let kind = match &loc {
            SourceLocation::File(_) => return Error::SourceRead { offset, source: e },
            SourceLocation::Http(_) => "http",
            SourceLocation::S3 { .. } => "s3",
            SourceLocation::Registry(_) => "registry",
        };
        Error::Connect { kind, url: loc.to_string(), message: format!("transfer failed at byte {offset}: {e}") }
    }));
    let mut compressions = Vec::new();
    let mut restarts = None;
    loop {
        let (head, s) = peek(stream, DETECT_LEN).map_err(|e| untag(e, 0))?;
        stream = s;
        match Compression::detect(&head) {
            Some(c) if compressions.len() < MAX_NESTING && !compressions.contains(&c) => {
                // Only an outermost gzip whose output is the image restarts: a wrapper inside drops the points.
                restarts = (restartable && c == Compression::Gzip && compressions.is_empty()).then(Restarts::default);
                compressions.push(c);
                let inner = decompress::wrap(c, stream, restarts.as_ref())
                    .map_err(|source| Error::Decompress { compression: c, source })?;
                stream = Box::new(Tagger::new(inner, move |source, _| Error::Decompress { compression: c, source }));
            }
            _ => break,
        }
    }
    let (head, stream) = peek(stream, HEAD_LEN).map_err(|e| untag(e, 0))?;
    let mut format = ImageFormat::detect(&head);
    if format == ImageFormat::Raw && ImageFormat::is_iso(&head) {
        format = ImageFormat::Iso;
    }
    if format == ImageFormat::Tar && ova::is_ova(&head) {
        format = ImageFormat::Ova;
    }
    Ok(Probed { size, random_access, local_path, compressions, format, head, stream, image_env, restarts })
}

/// `gzip+xz`-style name of the wrappers, outermost first; `none` without.
pub fn compression_name(c: &[Compression]) -> String {
    if c.is_empty() { String::from("none") } else { c.iter().map(|c| c.name()).collect::<Vec<_>>().join("+") }
}

/// Runs an import. Must be called from a blocking thread inside a Tokio runtime whose handle is `rt`.
pub fn import(req: &ImportRequest, progress: &Progress, rt: &tokio::runtime::Handle) -> Result<ImportReport> {
    let started = Instant::now();
    if req.resume {
        if let Some(report) = resume(req, progress, rt, started)? {
            return Ok(report);
        }
        Checkpoint::remove(&req.dest);
    }
    let hasher = req.checksum.as_ref().map(|c| Hasher::new(c.algorithm));
    let opened = source::open_hashed(&req.source, &req.http, rt, hasher.as_ref())?;
    import_from(req, opened, hasher, progress, started)
}

/// Continues an interrupted import from its checkpoint ([`resume`](crate::resume)); `Ok(None)` when there is
/// nothing to continue (no or another checkpoint, a changed source, no Range): the caller starts over.
fn resume(
    req: &ImportRequest,
    progress: &Progress,
    rt: &tokio::runtime::Handle,
    started: Instant,
) -> Result<Option<ImportReport>> {
    let kind = match &req.source {
        SourceLocation::Http(_) => "http",
        SourceLocation::S3 { .. } => "s3",
        _ => return Ok(None),
    };
    let Some(ckpt) = Checkpoint::load(&req.dest) else { return Ok(None) };
    if !ckpt.resumes(&req.source.to_string(), &req.dest) {
        tracing::info!("the import checkpoint does not match the source or the target; starting over");
        return Ok(None);
    }
    let version = &ckpt.validator;
    let open_at = |from: u64| -> Result<Option<OpenedSource>> {
        match &req.source {
            SourceLocation::Http(url) => source::http::open_from(url, &req.http, rt, from, version),
            SourceLocation::S3 { url, endpoint } => {
                source::s3::open_from(url, endpoint.as_ref(), &req.http, rt, from, version)
            }
            _ => Ok(None),
        }
    };
    // Xz: the block to restart at, from the source's index; the stream is opened at that block.
    let xz = match ckpt.layout {
        Layout::Xz => match xz_restart(&open_at, &ckpt)? {
            Some(r) => Some(r),
            None => return Ok(None),
        },
        _ => None,
    };
    let from = xz.as_ref().map_or(ckpt.durable, |r| r.block.compressed);
    let Some(opened) = open_at(from)? else { return Ok(None) };
    tracing::info!(from, size = ckpt.validator.size, "resuming the import where its durable data ends");
    let hasher = req.checksum.as_ref().map(|c| Hasher::new(c.algorithm));
    if let (Some(h), Some(ra)) = (&hasher, &opened.random_access) {
        // The digest covers every byte: the part already written is read again, only to be hashed.
        hash_prefix(ra.as_ref(), from, h, progress)?;
    }
    // Raw: whatever was written past the durable end is dropped. Qcow2: the target is kept as it is (data
    // past the frontier is written again).
    let keep = match (ckpt.layout, ckpt.inflate) {
        (Layout::Raw, _) => from,
        (Layout::Xz, _) => xz.as_ref().map_or(0, |r| r.block.uncompressed),
        (Layout::Gzip, Some(p)) => p.output,
        (Layout::Gzip, None) => return Ok(None),
        (Layout::Qcow2, _) => std::fs::metadata(&req.dest).map(|m| m.len()).unwrap_or(0),
    };
    // Gzip: the deflate window, read back from the target before anything past the restart point is dropped.
    let window = match ckpt.layout {
        Layout::Gzip => match ckpt.deflate_window(&req.dest) {
            Some(w) => w,
            None => return Ok(None),
        },
        _ => Vec::new(),
    };
    let mut sink: Box<dyn Sink> = Box::new(sink::TargetSink::resume_file(&req.dest, req.preallocate, keep)?);
    let size = ckpt.validator.size;
    let random_access = opened.random_access.clone();
    let run = (|| -> Result<(u64, u64)> {
        progress.start_phase(Phase::Import, Some(size));
        progress.set_done(from);
        let counted = CountingReader::new(opened.stream, progress.clone());
        let raw: BoxRead = match &hasher {
            Some(h) => Box::new(HashingReader::new(counted, h.clone())),
            None => Box::new(counted),
        };
        let what = req.source.to_string();
        let mut stream = Tagger::new(raw, move |e: io::Error, offset| Error::Connect {
            kind,
            url: what.clone(),
            message: format!("transfer failed at byte {}: {e}", from + offset),
        });
        match ckpt.layout {
            Layout::Raw => {
                let target = plan::target_size(size, req.size, sink.capacity())?;
                sink.ensure_len(target)?;
                let mut w = Checkpointing::new(sink.as_mut(), &req.dest, ckpt.clone());
                let copied = format::copy_raw(&mut stream, &mut w, Some(size - from))?;
                if copied != size - from {
                    return Err(Error::InvalidRequest(format!("the source ended at byte {} of {size}", from + copied)));
                }
                drop(w);
                sink.write_zeroes(size, target - size)?;
                Ok((size, target))
            }
            Layout::Gzip => {
                let point = ckpt.inflate.ok_or_else(|| Error::InvalidRequest(String::from("no restart point")))?;
                let restarts = Restarts::default();
                let input = io::BufReader::with_capacity(256 << 10, stream);
                let decoder = GzipDecoder::resume(input, &point, &window, restarts.clone())
                    .map_err(|source| Error::Decompress { compression: Compression::Gzip, source })?;
                let mut decoded =
                    Tagger::new(decoder, |source, _| Error::Decompress { compression: Compression::Gzip, source });
                let done = point.output;
                let limit = raw_limit(req, sink.capacity());
                let mut w = Checkpointing::new(sink.as_mut(), &req.dest, ckpt.clone()).with_restarts(Some(restarts));
                let copied = format::copy_raw(&mut decoded, &mut w, limit.map(|l| l.saturating_sub(done)))?;
                drop(w);
                raw_end(req, sink.as_mut(), done + copied)
            }
            Layout::Xz => {
                let r = xz.as_ref().ok_or_else(|| Error::InvalidRequest(String::from("no xz restart block")))?;
                let done = r.block.uncompressed;
                let (rest_in, rest_out) = (r.index.offset - r.block.compressed, r.index.output_len - done);
                let limit = raw_limit(req, sink.capacity());
                let xz_err = |source| Error::Decompress { compression: Compression::Xz, source };
                let restarted = Checkpoint { durable: done, ..ckpt.clone() };
                let mut w = Checkpointing::new(sink.as_mut(), &req.dest, restarted);
                let copied = {
                    // The stream header, then the blocks from this one up to the index: a stream whose blocks
                    // decode as in the file (its index is not fed: it would not match). The output is cut at
                    // the blocks' length, so the decoder is never asked past the last one.
                    let blocks = io::Cursor::new(r.header.clone()).chain((&mut stream).take(rest_in));
                    let input = io::BufReader::with_capacity(256 << 10, blocks);
                    let decoder =
                        liblzma::bufread::XzDecoder::new_stream(input, decompress::mt_stream().map_err(xz_err)?);
                    let mut decoded = Tagger::new(decoder.take(rest_out), move |source, _| xz_err(source));
                    format::copy_raw(&mut decoded, &mut w, limit.map(|l| l.saturating_sub(done)))?
                };
                drop(w);
                if copied != rest_out {
                    let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "the xz blocks ended early");
                    return Err(xz_err(eof));
                }
                // The index and the footer: read (and hashed) like every other byte of the source.
                drain(&mut stream)?;
                raw_end(req, sink.as_mut(), done + copied)
            }
            Layout::Qcow2 => {
                let ra = random_access.ok_or_else(|| Error::InvalidRequest(String::from("no positional reads")))?;
                let mut head = vec![0u8; HEAD_LEN.min(size as usize)];
                let n = read_at_full(ra.as_ref(), 0, &mut head)?;
                head.truncate(n);
                let refetch = Refetch::Random(ra);
                let mut w = Checkpointing::new(sink.as_mut(), &req.dest, ckpt.clone());
                let input = Qcow2Input { stream: &mut stream, head: &head, file_size: Some(size), refetch, from };
                qcow2_native(req, &mut w, input, hasher.is_some())
            }
        }
    })();
    let sizes = match run {
        Ok(s) => s,
        Err(e) => {
            sink.abort();
            Checkpoint::remove(&req.dest);
            return Err(e);
        }
    };
    let (plan, about) = match ckpt.layout {
        Layout::Raw => (Plan::Stream, Concluded::resumed(ImageFormat::Raw, &[], started)),
        Layout::Gzip => (Plan::Stream, Concluded::resumed(ImageFormat::Raw, &[Compression::Gzip], started)),
        Layout::Xz => (Plan::Stream, Concluded::resumed(ImageFormat::Raw, &[Compression::Xz], started)),
        Layout::Qcow2 => {
            (Plan::Qcow2 { refetch: RefetchPlan::Random }, Concluded::resumed(ImageFormat::Qcow2, &[], started))
        }
    };
    conclude(req, sink, hasher.as_ref(), progress, sizes, plan, about).map(Some)
}

/// Where an xz import restarts: a block of the source, its stream header, and the block map.
struct XzRestart {
    block: xz_index::Block,
    header: Vec<u8>,
    index: xz_index::Index,
}

/// The last block of the source that begins inside the checkpoint's durable output, read from its stream footer
/// and index by position (`open_at` opens the same version of the source at an offset). `Ok(None)` when there
/// is none past the first (one block, several streams, a damaged index, a changed source): the import starts
/// over.
fn xz_restart(open_at: &dyn Fn(u64) -> Result<Option<OpenedSource>>, ckpt: &Checkpoint) -> Result<Option<XzRestart>> {
    let size = ckpt.validator.size;
    if size < xz_index::HEADER_LEN + xz_index::FOOTER_LEN {
        return Ok(None);
    }
    // Opened at the footer only for its positional reads of this version of the object.
    let Some(ra) = open_at(size - xz_index::FOOTER_LEN)?.and_then(|o| o.random_access) else { return Ok(None) };
    let read = |offset: u64, len: u64| -> Result<Vec<u8>> {
        let mut buf = vec![0u8; len as usize];
        let n = read_at_full(ra.as_ref(), offset, &mut buf)?;
        buf.truncate(n);
        Ok(buf)
    };
    let unusable = |e: xz_index::XzIndexError| {
        tracing::info!("cannot restart the xz stream ({e}); starting over");
        Ok(None)
    };
    let footer = read(size - xz_index::FOOTER_LEN, xz_index::FOOTER_LEN)?;
    let len = match xz_index::backward_size(&footer) {
        Ok(len) if len <= xz_index::MAX_INDEX && len <= size - xz_index::HEADER_LEN - xz_index::FOOTER_LEN => len,
        Ok(len) => return unusable(xz_index::XzIndexError::IndexSize(len)),
        Err(e) => return unusable(e),
    };
    let index = match xz_index::parse(&read(size - xz_index::FOOTER_LEN - len, len)?, size) {
        Ok(index) => index,
        Err(e) => return unusable(e),
    };
    let Some(block) = index.block_at(ckpt.durable).filter(|b| b.uncompressed > 0) else {
        tracing::info!(blocks = index.blocks.len(), "no xz block begins inside the durable output; starting over");
        return Ok(None);
    };
    let header = read(0, xz_index::HEADER_LEN)?;
    Ok(Some(XzRestart { block, header, index }))
}

/// Fills `buf` from positional reads at `offset` (less only at the end of the source).
fn read_at_full(ra: &dyn source::RandomAccess, offset: u64, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        let at = offset + n as u64;
        match ra.read_at(at, &mut buf[n..]).map_err(|e| untag(e, at))? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Feeds the source's first `len` bytes, read with positional reads, to `hasher`.
fn hash_prefix(ra: &dyn source::RandomAccess, len: u64, hasher: &Hasher, progress: &Progress) -> Result<()> {
    let mut buf = vec![0u8; 4 << 20];
    let mut pos = 0u64;
    while pos < len {
        let want = ((len - pos) as usize).min(buf.len());
        let n = ra.read_at(pos, &mut buf[..want]).map_err(|e| untag(e, pos))?;
        if n == 0 {
            return Err(Error::InvalidRequest(format!("the source ended at byte {pos} while hashing its first {len}")));
        }
        hasher.update(&buf[..n]);
        progress.add_source_bytes(n as u64);
        pos += n as u64;
    }
    Ok(())
}

/// Runs an import from a source the caller opened itself (a push source: an upload body streamed by the
/// upload server); `req.source` only names it in errors. Must be called from a blocking thread.
pub fn import_opened(req: &ImportRequest, opened: OpenedSource, progress: &Progress) -> Result<ImportReport> {
    let hasher = req.checksum.as_ref().map(|c| Hasher::new(c.algorithm));
    import_from(req, opened, hasher, progress, Instant::now())
}

fn import_from(
    req: &ImportRequest,
    opened: OpenedSource,
    hasher: Option<Hasher>,
    progress: &Progress,
    started: Instant,
) -> Result<ImportReport> {
    let validator = opened.validator.clone();
    // The restartable gzip decoder only where a checkpoint can be written (a file target: see below).
    let restartable = req.resume && validator.is_some() && !sink::is_block_device(&req.dest);
    let probed = probe_opened(opened, &req.source, progress, hasher.as_ref(), restartable)?;
    let plan = plan::plan(Probe {
        format: probed.format,
        compressed: !probed.compressions.is_empty(),
        random_access: probed.random_access.is_some(),
        local_file: probed.local_path.is_some(),
        scratch: req.scratch.is_some(),
        vmdk: if probed.format == ImageFormat::Vmdk { vmdk::layout(&probed.head) } else { None },
    })?;
    if let Some(dir) = &req.scratch
        && matches!(
            plan,
            Plan::Qcow2 { refetch: RefetchPlan::Spill }
                | Plan::QemuImg { input: DelegateInput::Spool }
                | Plan::Seekable { input: SeekInput::Spool }
        )
        && !dir.is_dir()
    {
        return Err(Error::Scratch {
            path: dir.clone(),
            source: io::Error::new(io::ErrorKind::NotFound, "scratch directory does not exist"),
        });
    }
    tracing::info!(format = %probed.format, compression = %compression_name(&probed.compressions), strategy = plan.name(), "probed source");
    let mut sink = sink::open(&req.dest, req.preallocate)?;
    // A resumable import (a raw stream, uncompressed or gzip, or an uncompressed qcow2 with positional reads, into
    // a file, from a source with a version) checkpoints.
    let layout = match (plan, probed.compressions.as_slice(), &probed.restarts) {
        (Plan::Stream, [], _) => Some(Layout::Raw),
        (Plan::Stream, [Compression::Gzip], Some(_)) => Some(Layout::Gzip),
        (Plan::Stream, [Compression::Xz], _) => Some(Layout::Xz),
        (Plan::Qcow2 { refetch: RefetchPlan::Random }, [], _) => Some(Layout::Qcow2),
        _ => None,
    };
    let checkpoint = match (&validator, layout) {
        (Some(v), Some(layout)) if req.resume && sink.capacity().is_none() => {
            Some(Checkpoint::start(req.source.to_string(), v.clone(), layout))
        }
        _ => None,
    };
    let about = Concluded {
        format: probed.format,
        compression: compression_name(&probed.compressions),
        image_env: probed.image_env.clone(),
        started,
    };
    match execute(req, plan, probed, sink.as_mut(), progress, hasher.as_ref(), checkpoint) {
        Ok(sizes) => conclude(req, sink, hasher.as_ref(), progress, sizes, plan, about),
        Err(e) => {
            sink.abort();
            Checkpoint::remove(&req.dest);
            Err(e)
        }
    }
}

/// What the report says beyond the sink's figures.
struct Concluded {
    format: ImageFormat,
    compression: String,
    image_env: Vec<String>,
    started: Instant,
}

impl Concluded {
    /// A resumed import of an image in `format` under `compressions`.
    fn resumed(format: ImageFormat, compressions: &[Compression], started: Instant) -> Self {
        Concluded { format, compression: compression_name(compressions), image_env: Vec::new(), started }
    }
}

/// After the data is in: verifies the checksum, finishes the sink (size, preallocation, fsync), removes a resume
/// checkpoint, and reports. On failure the sink is aborted (a file target is removed).
fn conclude(
    req: &ImportRequest,
    mut sink: Box<dyn Sink>,
    hasher: Option<&Hasher>,
    progress: &Progress,
    (virtual_size, target_size): (u64, u64),
    plan: Plan,
    about: Concluded,
) -> Result<ImportReport> {
    let finished = (|| {
        let checksum = match (hasher, &req.checksum) {
            (Some(h), Some(want)) => Some(h.verify(want)?),
            _ => None,
        };
        progress.start_phase(Phase::Finish, None);
        Ok((checksum, sink.finish(target_size)?))
    })();
    Checkpoint::remove(&req.dest);
    let (checksum, report) = match finished {
        Ok(r) => r,
        Err(e) => {
            sink.abort();
            return Err(e);
        }
    };
    progress.add_written_bytes(report.bytes_written);
    Ok(ImportReport {
        format: about.format,
        compression: about.compression,
        virtual_size,
        target_size,
        bytes_read: progress.snapshot().source_bytes,
        bytes_written: report.bytes_written,
        seconds: about.started.elapsed().as_secs_f64(),
        checksum,
        preallocated: report.preallocated,
        strategy: plan.name(),
        image_env: about.image_env,
    })
}

/// Drains the rest of a stream (so a checksum covers every byte).
fn drain(stream: &mut dyn Read) -> Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    loop {
        let n = format::read_full(stream, &mut buf).map_err(|e| untag(e, pos))?;
        if n == 0 {
            return Ok(());
        }
        pos += n as u64;
    }
}

/// Runs the plan; returns (virtual size, target size).
fn execute(
    req: &ImportRequest,
    plan: Plan,
    probed: Probed,
    sink: &mut dyn Sink,
    progress: &Progress,
    hasher: Option<&Hasher>,
    checkpoint: Option<Checkpoint>,
) -> Result<(u64, u64)> {
    let Probed { size, random_access, local_path, compressions, format, head, mut stream, restarts, .. } = probed;
    let compressed = !compressions.is_empty();
    progress.start_phase(Phase::Import, size);
    // Bytes counted while probing belong to this phase too.
    progress.set_done(progress.snapshot().source_bytes);
    // The stream must be read to its end when it is hashed, and for registry sources, whose layer checks (a
    // second disk file, whiteouts) surface only at the end of the stream.
    let read_all = hasher.is_some() || matches!(req.source, SourceLocation::Registry(_));
    match plan {
        Plan::Stream => {
            let known = (!compressed).then_some(size).flatten();
            match checkpoint {
                Some(c) => {
                    let mut w = Checkpointing::new(sink, &req.dest, c).with_restarts(restarts);
                    stream_raw(req, &mut w, &mut stream, known)
                }
                None => stream_raw(req, sink, &mut stream, known),
            }
        }
        Plan::Qcow2 { refetch } => {
            let file_size = (!compressed).then_some(size).flatten();
            let refetch = match (refetch, random_access, &req.scratch) {
                (RefetchPlan::Random, Some(ra), _) => Refetch::Random(ra),
                (_, _, Some(dir)) => Refetch::Spill(Spill::with_overflow(dir)),
                _ => Refetch::Spill(Spill::memory()),
            };
            let input = Qcow2Input { stream: &mut stream, head: &head, file_size, refetch, from: 0 };
            match checkpoint {
                Some(c) => qcow2_native(req, &mut Checkpointing::new(sink, &req.dest, c), input, read_all),
                None => qcow2_native(req, sink, input, read_all),
            }
        }
        Plan::VmdkStream => vmdk_native(req, sink, &mut stream, &head, read_all),
        Plan::Ova => {
            let sizes =
                ova::with_disk(&mut stream, req.http.ova_disk.as_deref(), |member, m| ova_disk(req, sink, member, m))?;
            if read_all {
                drain(&mut stream)?;
            }
            Ok(sizes)
        }
        Plan::Seekable { input } => {
            let spooled;
            let image: std::sync::Arc<dyn source::RandomAccess> = match input {
                SeekInput::Source => {
                    if read_all {
                        drain(&mut stream)?;
                    }
                    // Not read further: close it (an HTTP GET) before the positional reads start.
                    drop(std::mem::replace(&mut stream, Box::new(io::empty())));
                    random_access.ok_or_else(|| Error::InvalidRequest(String::from("no positional reads")))?
                }
                SeekInput::Spool => {
                    let dir;
                    (spooled, dir) = spool_to_scratch(req, &mut stream, size, progress)?;
                    let serr = |source| Error::Scratch { path: dir.clone(), source };
                    let file = spooled.as_file().try_clone().map_err(serr)?;
                    std::sync::Arc::new(FileAccess::new(file).map_err(serr)?)
                }
            };
            seekable_native(req, sink, format, image, input == SeekInput::Source, progress)
        }
        Plan::QemuImg { input } => {
            let spooled;
            let path = match input {
                DelegateInput::LocalFile => {
                    if hasher.is_some() {
                        drain(&mut stream)?;
                    }
                    local_path.ok_or_else(|| Error::InvalidRequest(String::from("no local path")))?
                }
                DelegateInput::Spool => {
                    (spooled, _) = spool_to_scratch(req, &mut stream, size, progress)?;
                    spooled.path().to_path_buf()
                }
            };
            // Decided from the image's own bytes before qemu-img sees it: qemu-img reads some child images
            // (a differencing VHD, for one) as standalone disks.
            if let Some(parent) = qemu_img::parent_of(&path, format)? {
                return Err(Error::Format { format, source: FormatError::Parent(parent) });
            }
            let info = qemu_img::info(&path, format)?;
            qemu_img::check_safe(&path, format, &info)?;
            qemu_img::check_integrity(&path, format)?;
            let target = plan::target_size(info.virtual_size, req.size, sink.capacity())?;
            sink.ensure_len(target)?;
            // qemu-img writes the target itself: make it the right size first (files), then convert.
            let (dest, fresh_file) = sink.external_target(info.virtual_size)?;
            progress.start_phase(Phase::Convert, Some(10_000));
            qemu_img::convert(&path, format, &dest, fresh_file, info.virtual_size, progress)?;
            if fresh_file {
                // qemu-img wrote the data: account for what it allocated.
                use std::os::unix::fs::MetadataExt;
                let allocated = std::fs::metadata(&dest).map(|m| m.blocks() * 512).unwrap_or(0);
                sink.note_external_write(allocated);
            }
            sink.write_zeroes(info.virtual_size, target - info.virtual_size)?;
            Ok((info.virtual_size, target))
        }
    }
}

/// Positional reads that count as source bytes and as progress (reads of the source itself, not of a spool).
struct CountingAccess {
    inner: std::sync::Arc<dyn source::RandomAccess>,
    progress: Progress,
    source_bytes: bool,
}

impl source::RandomAccess for CountingAccess {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read_at(offset, buf)?;
        self.progress.advance(buf.len() as u64);
        if self.source_bytes {
            self.progress.add_source_bytes(n as u64);
        }
        Ok(n)
    }
}

/// Converts a vhd, vhdx or hosted sparse vmdk natively by positional reads of `image` (the source when `from_source`, else a
/// spooled copy); returns (virtual size, target size).
fn seekable_native(
    req: &ImportRequest,
    sink: &mut dyn Sink,
    format: ImageFormat,
    image: std::sync::Arc<dyn source::RandomAccess>,
    from_source: bool,
    progress: &Progress,
) -> Result<(u64, u64)> {
    progress.start_phase(Phase::Convert, Some(image.size()));
    let image = CountingAccess { inner: image, progress: progress.clone(), source_bytes: from_source };
    if let Some(p) = parent::find(format, &image).map_err(|e| untag(e, 0))? {
        return Err(Error::Format { format, source: FormatError::Parent(p) });
    }
    let reader: Box<dyn positional::Reader> = match format {
        ImageFormat::Vpc => Box::new(vhd::Vhd::open(&image)?),
        ImageFormat::Vhdx => Box::new(vhdx::Vhdx::open(&image)?),
        ImageFormat::Vmdk => Box::new(vmdk::Sparse::open(&image)?),
        other => {
            return Err(Error::InvalidRequest(format!("{other} images are not read by positional reads")));
        }
    };
    let vs = reader.virtual_size();
    let target = plan::target_size(vs, req.size, sink.capacity())?;
    sink.ensure_len(target)?;
    let data_bytes = reader.write_all(&image, sink)?;
    tracing::info!(%format, data_bytes, "converted by positional reads");
    let target = plan::target_size(vs, req.size, sink.capacity())?;
    sink.write_zeroes(vs, target - vs)?;
    Ok((vs, target))
}

/// Copies a raw stream (of `known_size` bytes when known) into the sink; returns (virtual size, target size).
fn stream_raw(
    req: &ImportRequest,
    sink: &mut dyn Sink,
    stream: &mut dyn Read,
    known_size: Option<u64>,
) -> Result<(u64, u64)> {
    if let Some(vs) = known_size {
        let target = plan::target_size(vs, req.size, sink.capacity())?;
        sink.ensure_len(target)?;
    }
    let limit = raw_limit(req, sink.capacity());
    let vs = format::copy_raw(stream, sink, limit)?;
    raw_end(req, sink, vs)
}

/// The most a raw stream may write into a target of `capacity`: the size rule's limit or the capacity, the
/// smaller.
fn raw_limit(req: &ImportRequest, capacity: Option<u64>) -> Option<u64> {
    match (req.size.limit(), capacity) {
        (Some(s), Some(c)) => Some(s.min(c)),
        (s, c) => s.or(c),
    }
}

/// After a raw image of `vs` bytes: the target's size under the request's rule, the rest zeroed; returns
/// (virtual size, target size).
fn raw_end(req: &ImportRequest, sink: &mut dyn Sink, vs: u64) -> Result<(u64, u64)> {
    let target = plan::target_size(vs, req.size, sink.capacity())?;
    sink.write_zeroes(vs, target - vs)?;
    Ok((vs, target))
}

/// Where a native qcow2 conversion gets its bytes.
struct Qcow2Input<'a> {
    /// The image from `from` on.
    stream: &'a mut dyn Read,
    /// The image's first bytes (its header).
    head: &'a [u8],
    /// The image's length, when known.
    file_size: Option<u64>,
    /// Where bytes that streamed past come from.
    refetch: Refetch,
    /// Where the stream starts: 0, or the frontier a resumed import continues from.
    from: u64,
}

/// Converts a qcow2 image natively (from the start, or from the frontier of a resumed import); with `read_all`
/// the stream is drained.
fn qcow2_native(req: &ImportRequest, sink: &mut dyn Sink, input: Qcow2Input<'_>, read_all: bool) -> Result<(u64, u64)> {
    let Qcow2Input { stream, head, file_size, refetch, from } = input;
    let header = Header::parse(head, file_size)
        .map_err(|e| Error::Format { format: ImageFormat::Qcow2, source: FormatError::Qcow2(e) })?;
    let target = plan::target_size(header.virtual_size, req.size, sink.capacity())?;
    sink.ensure_len(target)?;
    let vs = header.virtual_size;
    qcow2::convert_from(header, stream, file_size, refetch, sink, read_all, from)?;
    if read_all {
        drain(stream)?;
    }
    sink.write_zeroes(vs, target - vs)?;
    Ok((vs, target))
}

/// Converts a streamOptimized vmdk stream (`head`: its first bytes) natively; with `read_all` the stream is
/// drained after the end-of-stream marker.
fn vmdk_native(
    req: &ImportRequest,
    sink: &mut dyn Sink,
    stream: &mut dyn Read,
    head: &[u8],
    read_all: bool,
) -> Result<(u64, u64)> {
    let header = vmdk::Header::parse(head)
        .map_err(|e| Error::Format { format: ImageFormat::Vmdk, source: FormatError::Vmdk(e) })?;
    let vs = header.virtual_size();
    let target = plan::target_size(vs, req.size, sink.capacity())?;
    sink.ensure_len(target)?;
    let stats = vmdk::convert(&header, stream, sink)?;
    tracing::info!(grains = stats.grains, data_bytes = stats.data_bytes, "converted the streamOptimized vmdk");
    if read_all {
        drain(stream)?;
    }
    sink.write_zeroes(vs, target - vs)?;
    Ok((vs, target))
}

/// A stream whose first bytes were read ahead, yielding them again.
type Peeked<R> = io::Chain<io::Cursor<Vec<u8>>, R>;

/// Reads up to `n` bytes of a borrowed stream and returns them with a reader that still yields them.
fn peek_ref<R: Read>(mut r: R, n: usize) -> Result<(Vec<u8>, Peeked<R>)> {
    let mut head = vec![0u8; n];
    let got = format::read_full(&mut r, &mut head).map_err(|e| untag(e, 0))?;
    head.truncate(got);
    Ok((head.clone(), io::Cursor::new(head).chain(r)))
}

/// Converts the disk member of an OVA: gzip (OVF's one compression) is peeled, then a streamOptimized vmdk
/// or a qcow2 is converted natively and a raw image copied; other formats are refused.
fn ova_disk(req: &ImportRequest, sink: &mut dyn Sink, member: &mut dyn Read, m: &DiskMember) -> Result<(u64, u64)> {
    let (head, mut chained) = peek_ref(&mut *member, HEAD_LEN)?;
    match Compression::detect(&head) {
        None => ova_disk_format(req, sink, &mut chained, &head, m, Some(m.size)),
        Some(Compression::Gzip) => {
            let c = Compression::Gzip;
            let gz = flate2::read::MultiGzDecoder::new(chained);
            let mut gz = Tagger::new(gz, move |source, _| Error::Decompress { compression: c, source });
            let (head, mut inner) = peek_ref(&mut gz, HEAD_LEN)?;
            ova_disk_format(req, sink, &mut inner, &head, m, None)
        }
        Some(other) => Err(Error::Format {
            format: ImageFormat::Ova,
            source: FormatError::Ova(OvaError::UnsupportedCompression {
                href: m.href.clone(),
                compression: other.name().to_string(),
            }),
        }),
    }
}

/// [`ova_disk`] after decompression: `size` is the member's size when it is not compressed.
fn ova_disk_format(
    req: &ImportRequest,
    sink: &mut dyn Sink,
    stream: &mut dyn Read,
    head: &[u8],
    m: &DiskMember,
    size: Option<u64>,
) -> Result<(u64, u64)> {
    let format = ImageFormat::detect(head);
    match format {
        ImageFormat::Vmdk if vmdk::is_stream_optimized(head) => vmdk_native(req, sink, stream, head, false),
        ImageFormat::Qcow2 => {
            let refetch = match &req.scratch {
                Some(dir) => Refetch::Spill(Spill::with_overflow(dir)),
                None => Refetch::Spill(Spill::memory()),
            };
            qcow2_native(req, sink, Qcow2Input { stream, head, file_size: size, refetch, from: 0 }, false)
        }
        ImageFormat::Raw => stream_raw(req, sink, stream, size),
        other => {
            let format = match other {
                ImageFormat::Vmdk => String::from("vmdk (not streamOptimized)"),
                f => f.to_string(),
            };
            Err(Error::Format {
                format: ImageFormat::Ova,
                source: FormatError::Ova(OvaError::UnsupportedDisk { href: m.href.clone(), format }),
            })
        }
    }
}

/// The spool phase of the formats read from a scratch copy: the rest of the stream (`size`: the source's length,
/// when known) copied into a temporary file in the scratch directory. Returns the file and the directory.
fn spool_to_scratch(
    req: &ImportRequest,
    stream: &mut dyn Read,
    size: Option<u64>,
    progress: &Progress,
) -> Result<(tempfile::NamedTempFile, PathBuf)> {
    let dir = req.scratch.clone().ok_or_else(|| Error::ScratchRequired(String::from("no scratch directory")))?;
    progress.start_phase(Phase::Spool, size);
    progress.set_done(progress.snapshot().source_bytes);
    Ok((spool(stream, &dir)?, dir))
}

/// Copies the stream into a temporary file in `dir` (removed when dropped).
fn spool(stream: &mut dyn Read, dir: &std::path::Path) -> Result<tempfile::NamedTempFile> {
    let serr = |source| Error::Scratch { path: dir.to_path_buf(), source };
    let mut tmp = tempfile::Builder::new().prefix(".importer-spool-").tempfile_in(dir).map_err(serr)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    loop {
        let n = format::read_full(stream, &mut buf).map_err(|e| untag(e, pos))?;
        if n == 0 {
            break;
        }
        // Sparse spool: skip zero blocks.
        if sink::is_zero(&buf[..n]) {
            use std::io::{Seek, SeekFrom};
            tmp.as_file_mut().seek(SeekFrom::Current(n as i64)).map_err(serr)?;
        } else {
            use std::io::Write;
            tmp.as_file_mut().write_all(&buf[..n]).map_err(serr)?;
        }
        pos += n as u64;
    }
    tmp.as_file().set_len(pos).map_err(serr)?;
    Ok(tmp)
}
