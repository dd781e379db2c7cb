//! Targets: a regular file or a block device, written sparsely.
//!
//! Contract for callers (the format converters): every byte of `[0, len)` passed to [`Sink::finish`] is
//! covered exactly once, by [`Sink::write_at`], [`Sink::write_with`] or [`Sink::write_zeroes`]. Sinks turn
//! all-zero blocks of written data into holes (files) or efficient zeroing (block devices), so callers need
//! not check for zeros.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;

use rustix::fs::FallocateFlags;

use crate::{Error, Result};

/// Granularity of zero detection: all-zero blocks of this size (aligned in the target) are not written,
/// like `qemu-img convert`'s default `-S 4k`.
pub const ZERO_BLOCK: usize = 4096;

/// Contiguous writes are gathered up to this size before they go to the writer thread.
const WRITE_BUFFER: usize = 2 << 20;
/// Buffers queued for the writer thread (memory bound: `(QUEUE + 2) * WRITE_BUFFER`).
const QUEUE: usize = 2;
/// Start writeback (`fdatasync` on a helper thread) after this many new bytes written through the page
/// cache, so dirty page cache stays bounded and the final `fsync` has little left to do.
const FLUSH_EVERY: u64 = 256 << 20;
/// Alignment of direct (`O_DIRECT`) writes: target offset, length and memory address (covers 512-byte and
/// 4 KiB logical sectors).
const DIRECT_ALIGN: usize = 4096;

/// What a finished sink reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SinkReport {
    /// Final size of the target in bytes.
    pub size: u64,
    /// Bytes of non-zero data actually written.
    pub bytes_written: u64,
    /// Whether the whole target was allocated (preallocation).
    pub preallocated: bool,
}

/// A target for image data. See the module documentation for the coverage contract.
pub trait Sink: Send {
    /// Largest size the target can hold (`None`: limited only by free space).
    fn capacity(&self) -> Option<u64>;
    /// Writes `data` at `offset` (all-zero blocks may be skipped or zeroed efficiently).
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()>;
    /// Lets `fill` put up to `max` bytes destined for `[offset, …)` straight into the sink's buffer (no
    /// intermediate copy) and returns how many it produced (0 only at the end of its input). Same effect as
    /// [`Sink::write_at`] of the bytes `fill` produced; `fill` may be given less room than `max`, so callers loop.
    fn write_with(
        &mut self,
        offset: u64,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<usize>,
    ) -> Result<usize> {
        let mut tmp = vec![0u8; max.min(WRITE_BUFFER)];
        let n = fill(&mut tmp)?;
        self.write_at(offset, &tmp[..n])?;
        Ok(n)
    }
    /// Makes `[offset, offset + len)` read as zeroes.
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()>;
    /// Fails early, before anything is written, when the target cannot be `len` bytes long: a file larger than
    /// its filesystem allows is [`Error::FileTooLarge`]. A file target may already be extended to `len` (it
    /// reads as zeroes). Default: no check.
    fn ensure_len(&mut self, _len: u64) -> Result<()> {
        Ok(())
    }
    /// Makes everything written so far durable (`fdatasync` after the queued writes), for a resume
    /// checkpoint. Default: nothing to do (in-memory sinks).
    fn sync_data(&mut self) -> Result<()> {
        Ok(())
    }
    /// Whether the sink wants a resume checkpoint now (a converter whose output is not sequential then offers
    /// its frontier through [`Sink::checkpoint`]). Default: never.
    fn checkpoint_due(&self) -> bool {
        false
    }
    /// Records that every byte of the image the converter is responsible for below source offset `frontier` has
    /// been written (see `crate::resume`). Default: nothing to record.
    fn checkpoint(&mut self, _frontier: u64) -> Result<()> {
        Ok(())
    }
    /// Sets the final size, applies preallocation, and makes everything durable (fsync).
    fn finish(&mut self, len: u64) -> Result<SinkReport>;
    /// Undoes what can be undone after a failure: a file target is removed; a block device is left as is.
    fn abort(&mut self);
    /// Prepares the target for an external writer (qemu-img) of `len` bytes and returns its path and
    /// whether it is a fresh all-zero file. Nothing may have been written through the sink before.
    fn external_target(&mut self, len: u64) -> Result<(PathBuf, bool)>;
    /// Records bytes an external writer put into the target (reported as written).
    fn note_external_write(&mut self, bytes: u64);
}

/// Whether `buf` is all zeroes. Compares 16-byte words; the compiler vectorises this.
pub fn is_zero(buf: &[u8]) -> bool {
    let chunks = buf.chunks_exact(16);
    let rem = chunks.remainder();
    chunks.map(|c| <[u8; 16]>::try_from(c).map_or(1, u128::from_ne_bytes)).all(|w| w == 0)
        && rem.iter().all(|&b| b == 0)
}

/// Opens DEST: a block device (detected by `stat`) is opened for writing; anything else is treated as a
/// regular file, which is removed if present and created anew.
pub fn open(dest: &Path, preallocate: bool) -> Result<Box<dyn Sink>> {
    let sink_err = |source| Error::Sink { path: dest.to_path_buf(), source };
    match fs::metadata(dest) {
        Ok(m) if m.file_type().is_block_device() => Ok(Box::new(TargetSink::open_block(dest, preallocate)?)),
        Ok(m) if m.is_dir() => Err(sink_err(io::Error::new(io::ErrorKind::IsADirectory, "destination is a directory"))),
        Ok(m) if !m.is_file() => Err(sink_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "destination is neither a regular file nor a block device",
        ))),
        _ => Ok(Box::new(TargetSink::create_file(dest, preallocate)?)),
    }
}

/// Whether `dest` is a block device (the target [`open`] writes in place, with no room for anything beside it).
pub fn is_block_device(dest: &Path) -> bool {
    fs::metadata(dest).is_ok_and(|m| m.file_type().is_block_device())
}

/// Whether an I/O error is `EFBIG` (a file larger than its filesystem allows).
fn is_efbig(e: &io::Error) -> bool {
    e.raw_os_error() == Some(rustix::io::Errno::FBIG.raw_os_error())
}

/// The largest file length the filesystem holding `dir` accepts, when that is less than `len`; `None` when `len`
/// fits or the limit cannot be found.
///
/// How: an unnamed temporary file in `dir` is grown with `ftruncate` (a sparse file: nothing is allocated, each
/// step costs one syscall) in a binary search between 0 and `len`, at most 64 steps; `EFBIG` means too large.
/// This finds the kernel's own per-filesystem limit (`s_maxbytes`: on ext4 with 4 KiB blocks 2^32 - 1 blocks,
/// 16 TiB - 4 KiB), which nothing else exposes: `fpathconf(_PC_FILESIZEBITS)` answers 64 for ext4, and
/// `statfs` says nothing about file sizes.
fn max_file_len(dir: &Path, len: u64) -> Option<u64> {
    let probe = tempfile::tempfile_in(dir).ok()?;
    let fits = |n: u64| match probe.set_len(n) {
        Ok(()) => Some(true),
        Err(e) if is_efbig(&e) => Some(false),
        Err(_) => None,
    };
    if fits(len)? {
        return None;
    }
    let (mut lo, mut hi) = (0u64, len); // lo fits, hi does not
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// Splits `[offset, offset+data.len())` into runs of data and of zero blocks (aligned to [`ZERO_BLOCK`] in
/// target offsets) and calls `f(offset, run, is_zero)` for each run in order.
fn for_each_run(offset: u64, data: &[u8], mut f: impl FnMut(u64, &[u8], bool) -> io::Result<()>) -> io::Result<()> {
    let mut pos = 0usize;
    let mut run_start = 0usize;
    let mut run_zero: Option<bool> = None;
    while pos < data.len() {
        let abs = offset + pos as u64;
        let to_boundary = ZERO_BLOCK - (abs % ZERO_BLOCK as u64) as usize;
        let end = (pos + to_boundary).min(data.len());
        let zero = is_zero(&data[pos..end]);
        match run_zero {
            Some(z) if z == zero => {}
            Some(z) => {
                f(offset + run_start as u64, &data[run_start..pos], z)?;
                run_start = pos;
                run_zero = Some(zero);
            }
            None => run_zero = Some(zero),
        }
        pos = end;
    }
    if let Some(z) = run_zero {
        f(offset + run_start as u64, &data[run_start..], z)?;
    }
    Ok(())
}

/// The kind of target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A regular file, created empty: unwritten ranges are holes and read as zeroes.
    File,
    /// A block device of this many bytes: zero ranges must be zeroed explicitly.
    Block { size: u64 },
}

/// A gather buffer for target bytes `[off, off + len)`. They live at `mem[start..start + len]`, where `start`
/// places each target offset at a memory address congruent to it modulo [`DIRECT_ALIGN`]: every aligned
/// target block inside the buffer is then aligned in memory too, as direct writes need. (Safe code only:
/// the buffer is over-allocated and an aligned window is chosen instead of using an aligned allocator.)
struct Chunk {
    mem: Vec<u8>,
    start: usize,
    len: usize,
    off: u64,
}

impl Chunk {
    fn new(off: u64) -> Chunk {
        let mut c = Chunk { mem: vec![0u8; WRITE_BUFFER + 2 * DIRECT_ALIGN], start: 0, len: 0, off: 0 };
        c.reset(off);
        c
    }

    /// Empties the buffer and makes it start at target offset `off`.
    fn reset(&mut self, off: u64) {
        let pad = self.mem.as_ptr().align_offset(DIRECT_ALIGN);
        // `align_offset` may decline (usize::MAX); then direct writes of this buffer fall back to buffered.
        let pad = if pad < DIRECT_ALIGN { pad } else { 0 };
        self.start = pad + (off % DIRECT_ALIGN as u64) as usize;
        self.len = 0;
        self.off = off;
    }

    fn data(&self) -> &[u8] {
        &self.mem[self.start..self.start + self.len]
    }

    /// Free room after the data (at most [`WRITE_BUFFER`] bytes of data per buffer).
    fn spare(&mut self) -> &mut [u8] {
        let end = (self.start + WRITE_BUFFER).min(self.mem.len());
        &mut self.mem[self.start + self.len..end]
    }

    fn end(&self) -> u64 {
        self.off + self.len as u64
    }

    fn is_full(&self) -> bool {
        self.len >= WRITE_BUFFER
    }
}

/// One write for the writer thread.
enum Op {
    Data(Chunk),
    Zero(u64, u64),
    /// `fdatasync` once the ops before it are done; the result goes back on the channel.
    Sync(SyncSender<io::Result<()>>),
}

/// The writer thread's side: performs writes, skipping or zeroing zero blocks. Whole aligned blocks go
/// through a second descriptor opened with `O_DIRECT` when the target allows it: the data goes from our
/// buffer to the device without a page-cache copy and without a later writeback pass, which is most of
/// the cost of a durable import. Unaligned edges (and targets without direct I/O) use the page cache.
struct Target {
    file: File,
    direct: Option<File>,
    kind: Kind,
    preallocate: bool,
    fallocate_ok: bool,
    written: u64,
    /// Bytes written through the page cache since the last writeback nudge.
    buffered: u64,
}

impl Target {
    fn data(&mut self, chunk: &Chunk) -> io::Result<()> {
        for_each_run(chunk.off, chunk.data(), |off, run, zero| {
            if zero { self.zero(off, run.len() as u64) } else { self.write(off, run) }
        })
    }

    /// Writes a data run: its whole aligned blocks directly when possible, the rest through the page cache.
    fn write(&mut self, off: u64, run: &[u8]) -> io::Result<()> {
        self.written += run.len() as u64;
        let align = DIRECT_ALIGN as u64;
        let head = (((align - off % align) % align) as usize).min(run.len());
        let body = (run.len() - head) / DIRECT_ALIGN * DIRECT_ALIGN;
        let (h, rest) = run.split_at(head);
        let (b, t) = rest.split_at(body);
        self.write_buffered(off, h)?;
        self.write_direct(off + head as u64, b)?;
        self.write_buffered(off + (head + body) as u64, t)
    }

    fn write_buffered(&mut self, off: u64, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.buffered += data.len() as u64;
        self.file.write_all_at(data, off)
    }

    /// Writes aligned blocks with `O_DIRECT`; falls back to the page cache (for good) if the target refuses.
    fn write_direct(&mut self, off: u64, data: &[u8]) -> io::Result<()> {
        if let Some(d) = &self.direct
            && data.as_ptr().align_offset(DIRECT_ALIGN) == 0
        {
            match d.write_all_at(data, off) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                    tracing::debug!("direct writes refused by the target ({e}); using the page cache");
                    self.direct = None;
                }
                Err(e) => return Err(e),
            }
        }
        self.write_buffered(off, data)
    }

    fn zero(&mut self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 || self.kind == Kind::File {
            return Ok(()); // a new file reads as zero wherever nothing was written
        }
        if self.fallocate_ok {
            let keep = FallocateFlags::KEEP_SIZE;
            let modes = if self.preallocate {
                [FallocateFlags::ZERO_RANGE | keep, FallocateFlags::ZERO_RANGE | keep]
            } else {
                [FallocateFlags::PUNCH_HOLE | keep, FallocateFlags::ZERO_RANGE | keep]
            };
            for mode in modes {
                if rustix::fs::fallocate(&self.file, mode, offset, len).is_ok() {
                    return Ok(());
                }
            }
            self.fallocate_ok = false;
            tracing::debug!("fallocate zeroing unsupported on the target; writing zeroes");
        }
        let zeros = vec![0u8; (1 << 20).min(len as usize)];
        let end = offset + len;
        let mut pos = offset;
        while pos < end {
            let n = ((end - pos) as usize).min(zeros.len());
            self.write_buffered(pos, &zeros[..n])?;
            pos += n as u64;
        }
        Ok(())
    }

    /// The thread body: applies ops until the channel closes; nudges the flusher every [`FLUSH_EVERY`]
    /// bytes that went through the page cache.
    fn run(mut self, ops: Receiver<Op>, recycle: Sender<Chunk>, flush: SyncSender<()>) -> io::Result<u64> {
        for op in ops {
            match op {
                Op::Data(chunk) => {
                    self.data(&chunk)?;
                    let _ = recycle.send(chunk);
                }
                Op::Zero(off, len) => self.zero(off, len)?,
                Op::Sync(done) => {
                    let _ = done.send(rustix::fs::fdatasync(&self.file).map_err(io::Error::from));
                }
            }
            if self.buffered >= FLUSH_EVERY {
                self.buffered = 0;
                let _ = flush.try_send(());
            }
        }
        Ok(self.written)
    }
}

struct Writer {
    ops: Option<SyncSender<Op>>,
    recycled: Receiver<Chunk>,
    thread: Option<JoinHandle<io::Result<u64>>>,
    flusher: Option<JoinHandle<()>>,
}

impl Writer {
    fn start(target: Target) -> io::Result<Writer> {
        let (ops_tx, ops_rx) = mpsc::sync_channel(QUEUE);
        let (rec_tx, rec_rx) = mpsc::channel();
        let (flush_tx, flush_rx) = mpsc::sync_channel::<()>(1);
        let flush_file = target.file.try_clone()?;
        let flusher = std::thread::Builder::new().name("sink-flush".into()).spawn(move || {
            for () in flush_rx {
                // Errors surface at the final fsync.
                let _ = rustix::fs::fdatasync(&flush_file);
            }
        })?;
        let thread = std::thread::Builder::new()
            .name("sink-write".into())
            .spawn(move || target.run(ops_rx, rec_tx, flush_tx))?;
        Ok(Writer { ops: Some(ops_tx), recycled: rec_rx, thread: Some(thread), flusher: Some(flusher) })
    }

    /// Stops the threads; returns the bytes written or the first error.
    fn stop(&mut self) -> io::Result<u64> {
        self.ops = None;
        let r = match self.thread.take() {
            Some(t) => t.join().unwrap_or_else(|_| Err(io::Error::other("writer thread panicked"))),
            None => Err(io::Error::other("target already closed")),
        };
        if let Some(f) = self.flusher.take() {
            let _ = f.join();
        }
        r
    }
}

/// A file or block-device target. Writes are gathered into 2 MiB buffers and performed by a writer
/// thread (so conversion and I/O overlap), aligned blocks with direct I/O where the target supports it;
/// a helper thread starts writeback of page-cache writes every 256 MiB.
pub struct TargetSink {
    path: PathBuf,
    file: File,
    kind: Kind,
    preallocate: bool,
    writer: Writer,
    buf: Option<Chunk>,
    bytes_written: u64,
    /// The highest target offset written to or asked for, for [`Error::FileTooLarge`].
    end: u64,
    closed: bool,
}

impl TargetSink {
    /// Removes whatever regular file is at `path` and creates an empty one (mode 0644 before umask).
    pub fn create_file(path: &Path, preallocate: bool) -> Result<Self> {
        let err = |source| Error::Sink { path: path.to_path_buf(), source };
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        let file = OpenOptions::new().write(true).create_new(true).mode(0o644).open(path).map_err(err)?;
        Self::new(path, file, Kind::File, preallocate)
    }

    /// Reopens the regular file at `path` that an interrupted import left, keeping its first `keep` bytes
    /// (what a resume checkpoint says is durable) and dropping the rest, which reads as zeroes again.
    pub fn resume_file(path: &Path, preallocate: bool, keep: u64) -> Result<Self> {
        let err = |source| Error::Sink { path: path.to_path_buf(), source };
        let file = OpenOptions::new().write(true).open(path).map_err(err)?;
        if !file.metadata().map_err(err)?.is_file() {
            return Err(err(io::Error::new(io::ErrorKind::InvalidInput, "not a regular file")));
        }
        file.set_len(keep).map_err(err)?;
        let mut sink = Self::new(path, file, Kind::File, preallocate)?;
        sink.end = keep;
        Ok(sink)
    }

    /// Opens a block device exclusively (`O_EXCL`: fails if it is mounted) and reads its size.
    pub fn open_block(path: &Path, preallocate: bool) -> Result<Self> {
        let err = |source| Error::Sink { path: path.to_path_buf(), source };
        let mut file = OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
            .open(path)
            .map_err(err)?;
        let size = file.seek(SeekFrom::End(0)).map_err(err)?;
        Self::new(path, file, Kind::Block { size }, preallocate)
    }

    fn new(path: &Path, file: File, kind: Kind, preallocate: bool) -> Result<Self> {
        let err = |source| Error::Sink { path: path.to_path_buf(), source };
        // A second descriptor for direct writes; without O_EXCL (a block device's first one holds the claim).
        let direct = OpenOptions::new().write(true).custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32).open(path);
        let direct = direct.inspect_err(|e| tracing::debug!("no direct I/O on the target: {e}")).ok();
        let target = Target {
            file: file.try_clone().map_err(err)?,
            direct,
            kind,
            preallocate,
            fallocate_ok: true,
            written: 0,
            buffered: 0,
        };
        Ok(TargetSink {
            path: path.to_path_buf(),
            file,
            kind,
            preallocate,
            writer: Writer::start(target).map_err(err)?,
            buf: None,
            bytes_written: 0,
            end: 0,
            closed: false,
        })
    }

    /// A target error. `EFBIG` (the file would be larger than its filesystem allows) becomes
    /// [`Error::FileTooLarge`] for the largest size asked of the target so far.
    fn err(&self, source: io::Error) -> Error {
        if is_efbig(&source)
            && self.kind == Kind::File
            && let Some(max) = self.path.parent().and_then(|dir| max_file_len(dir, self.end))
        {
            return Error::FileTooLarge { requested: self.end, max };
        }
        Error::Sink { path: self.path.clone(), source }
    }

    /// Sets the length of a file target.
    fn set_file_len(&mut self, len: u64) -> Result<()> {
        self.end = self.end.max(len);
        self.file.set_len(len).map_err(|e| self.err(e))
    }

    /// Records that target bytes up to `end` are being written.
    fn reach(&mut self, end: u64) {
        self.end = self.end.max(end);
    }

    fn check_bounds(&self, offset: u64, len: u64) -> Result<()> {
        if let Kind::Block { size } = self.kind
            && offset.checked_add(len).is_none_or(|end| end > size)
        {
            return Err(Error::DataBeyondTarget { limit: size, offset });
        }
        Ok(())
    }

    /// Hands an op to the writer thread; if it has died, reports its error.
    fn send(&mut self, op: Op) -> Result<()> {
        let sent = match &self.writer.ops {
            Some(tx) => tx.send(op).is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        let e = match self.writer.stop() {
            Err(e) => e,
            Ok(_) => io::Error::other("writer stopped"),
        };
        Err(self.err(e))
    }

    fn flush_buf(&mut self) -> Result<()> {
        match self.buf.take() {
            Some(c) if c.len > 0 => self.send(Op::Data(c)),
            Some(c) => {
                self.buf = Some(c);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// The gather buffer to append bytes for target `offset` to: the current one if it ends there and has
    /// room, else a fresh (recycled) one after the current one went to the writer.
    fn chunk_at(&mut self, offset: u64) -> Result<Chunk> {
        match self.buf.take() {
            Some(c) if c.end() == offset && !c.is_full() => return Ok(c),
            Some(mut c) if c.len == 0 => {
                c.reset(offset);
                return Ok(c);
            }
            Some(c) => self.send(Op::Data(c))?,
            None => {}
        }
        Ok(match self.writer.recycled.try_recv() {
            Ok(mut c) => {
                c.reset(offset);
                c
            }
            Err(_) => Chunk::new(offset),
        })
    }

    /// Lets `fill` write up to `max` bytes for target `offset` into the gather buffer; returns how many.
    fn append(&mut self, offset: u64, max: usize, fill: &mut dyn FnMut(&mut [u8]) -> Result<usize>) -> Result<usize> {
        let mut c = self.chunk_at(offset)?;
        let spare = c.spare();
        let room = spare.len().min(max);
        let n = fill(&mut spare[..room])?.min(room);
        c.len += n;
        self.buf = Some(c);
        Ok(n)
    }

    fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.flush_buf()?;
        self.closed = true;
        self.bytes_written += self.writer.stop().map_err(|e| self.err(e))?;
        Ok(())
    }
}

impl Sink for TargetSink {
    fn capacity(&self) -> Option<u64> {
        match self.kind {
            Kind::File => None,
            Kind::Block { size } => Some(size),
        }
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_bounds(offset, data.len() as u64)?;
        self.reach(offset.saturating_add(data.len() as u64));
        let mut done = 0usize;
        while done < data.len() {
            let rest = &data[done..];
            done += self.append(offset + done as u64, rest.len(), &mut |buf| {
                let n = buf.len().min(rest.len());
                buf[..n].copy_from_slice(&rest[..n]);
                Ok(n)
            })?;
        }
        Ok(())
    }

    fn write_with(
        &mut self,
        offset: u64,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<usize>,
    ) -> Result<usize> {
        self.check_bounds(offset, max as u64)?;
        let n = self.append(offset, max, fill)?;
        self.reach(offset.saturating_add(n as u64));
        Ok(n)
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
        self.check_bounds(offset, len)?;
        if self.kind == Kind::File || len == 0 {
            return Ok(());
        }
        self.flush_buf()?;
        self.send(Op::Zero(offset, len))
    }

    fn sync_data(&mut self) -> Result<()> {
        self.flush_buf()?;
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Op::Sync(tx))?;
        match rx.recv() {
            Ok(r) => r.map_err(|e| self.err(e)),
            // The writer died before it got there: its error surfaces from `stop`.
            Err(_) => {
                let e = self.writer.stop().err().unwrap_or_else(|| io::Error::other("writer stopped"));
                Err(self.err(e))
            }
        }
    }

    fn ensure_len(&mut self, len: u64) -> Result<()> {
        match self.kind {
            Kind::File => self.set_file_len(len),
            Kind::Block { .. } => self.check_bounds(0, len),
        }
    }

    fn finish(&mut self, len: u64) -> Result<SinkReport> {
        self.check_bounds(0, len)?;
        self.close()?;
        if self.kind == Kind::File {
            self.set_file_len(len)?;
            if self.preallocate && len > 0 {
                rustix::fs::fallocate(&self.file, FallocateFlags::empty(), 0, len)
                    .map_err(|e| self.err(io::Error::from(e)))?;
            }
        }
        self.file.sync_all().map_err(|e| self.err(e))?;
        Ok(SinkReport { size: len, bytes_written: self.bytes_written, preallocated: self.preallocate })
    }

    fn abort(&mut self) {
        self.buf = None;
        self.closed = true;
        let _ = self.writer.stop();
        if self.kind == Kind::File {
            let _ = fs::remove_file(&self.path);
        }
    }

    fn external_target(&mut self, len: u64) -> Result<(PathBuf, bool)> {
        self.check_bounds(0, len)?;
        self.flush_buf()?;
        let fresh = self.kind == Kind::File;
        if fresh {
            self.set_file_len(len)?;
        }
        Ok((self.path.clone(), fresh))
    }

    fn note_external_write(&mut self, bytes: u64) {
        self.bytes_written += bytes;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_detection() {
        assert!(is_zero(&[]));
        assert!(is_zero(&[0u8; 4097]));
        let mut v = vec![0u8; 4097];
        v[4096] = 1;
        assert!(!is_zero(&v));
        v[4096] = 0;
        v[3] = 9;
        assert!(!is_zero(&v));
    }

    #[test]
    fn runs_are_aligned_to_target_blocks() {
        let mut data = vec![0u8; 3 * ZERO_BLOCK];
        data[ZERO_BLOCK + 10] = 1; // second target block (offset 2048 shifts alignment)
        let mut runs = Vec::new();
        for_each_run(2048, &data, |off, run, zero| {
            runs.push((off, run.len(), zero));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(runs, vec![(2048, 2048, true), (4096, 4096, false), (8192, 3 * 4096 - 2048 - 4096, true)]);
    }

    #[test]
    fn file_sink_is_sparse_and_exact() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Sink { path: "tmp".into(), source: e })?;
        let p = dir.path().join("out.img");
        fs::write(&p, b"old content").map_err(|e| Error::Sink { path: p.clone(), source: e })?;
        let mut s = TargetSink::create_file(&p, false)?;
        s.write_at(0, &[1u8; 100])?;
        s.write_at(100, &vec![0u8; 8 << 20])?;
        s.write_zeroes((8 << 20) + 100, 1 << 20)?;
        s.write_at(16 << 20, b"tail")?;
        let rep = s.finish(32 << 20)?;
        assert_eq!(rep.size, 32 << 20);
        assert_eq!(rep.bytes_written, 4096 + 4); // the block holding data is written whole
        let got = fs::read(&p).map_err(|e| Error::Sink { path: p.clone(), source: e })?;
        assert_eq!(got.len(), 32 << 20);
        assert!(got[..100].iter().all(|&b| b == 1));
        assert!(is_zero(&got[100..16 << 20]));
        assert_eq!(&got[16 << 20..(16 << 20) + 4], b"tail");
        use std::os::unix::fs::MetadataExt;
        let blocks = fs::metadata(&p).map(|m| m.blocks()).unwrap_or(u64::MAX);
        assert!(blocks * 512 <= 64 << 10, "allocated {} bytes", blocks * 512);
        Ok(())
    }

    /// Unaligned edges, 512-byte pieces, zero blocks, buffer-sized runs and `write_with` fills, written
    /// through both the direct and the page-cache paths, read back exactly.
    #[test]
    fn mixed_alignment_writes_read_back_exactly() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Sink { path: "tmp".into(), source: e })?;
        let p = dir.path().join("out.img");
        let len = 7 * WRITE_BUFFER + 1234;
        let mut want = vec![0u8; len];
        let mut x = 0x1234_5678u32;
        for (i, b) in want.iter_mut().enumerate() {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            // Zero stretches of several blocks now and then, to be skipped.
            *b = if (i / 20_000) % 5 == 3 { 0 } else { (x >> 24) as u8 };
        }
        let mut s = TargetSink::create_file(&p, false)?;
        // Pieces in order with odd sizes; every third goes through `write_with`.
        let sizes = [100usize, 412, 512, 3584, 5000, WRITE_BUFFER + 17, 4096, 1, 65_536 * 3 + 5];
        let (mut pos, mut i) = (0usize, 0usize);
        while pos < len {
            let n = sizes[i % sizes.len()].min(len - pos);
            if i % 3 == 2 {
                let mut done = 0usize;
                while done < n {
                    let src = &want[pos + done..pos + n];
                    let got = s.write_with((pos + done) as u64, n - done, &mut |buf| {
                        let k = buf.len().min(src.len());
                        buf[..k].copy_from_slice(&src[..k]);
                        Ok(k)
                    })?;
                    assert!(got > 0);
                    done += got;
                }
            } else {
                s.write_at(pos as u64, &want[pos..pos + n])?;
            }
            pos += n;
            i += 1;
        }
        s.finish(len as u64)?;
        let got = fs::read(&p).map_err(|e| Error::Sink { path: p.clone(), source: e })?;
        assert_eq!(got.len(), want.len());
        let first_diff = got.iter().zip(&want).position(|(a, b)| a != b);
        assert_eq!(first_diff, None, "content differs");
        Ok(())
    }

    /// A file larger than the filesystem allows is a capacity error naming both sizes; the limit is found by
    /// probing. Needs a filesystem with a limit below 8 EiB (ext4: 16 TiB); others only check the probe's
    /// answer for sizes that fit.
    #[test]
    fn file_too_large_names_the_limit() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Sink { path: "tmp".into(), source: e })?;
        assert_eq!(max_file_len(dir.path(), 1 << 20), None, "1 MiB fits anywhere");
        let huge = 64u64 << 40;
        let Some(max) = max_file_len(dir.path(), huge) else {
            return Ok(()); // this filesystem takes 64 TiB files
        };
        assert!(max > 0 && max < huge);
        assert_eq!(max_file_len(dir.path(), max), None, "the limit itself fits");
        assert_eq!(max_file_len(dir.path(), max + 1), Some(max));
        let p = dir.path().join("out.img");
        let mut s = TargetSink::create_file(&p, false)?;
        let e = s.ensure_len(huge).err().map(|e| (e.kind(), e.to_string()));
        assert_eq!(
            e,
            Some((
                crate::ErrorKind::Capacity,
                format!(
                    "target size {huge} bytes is larger than the largest file the target filesystem can hold ({max} bytes)"
                )
            ))
        );
        s.abort();
        let mut s = TargetSink::create_file(&p, false)?;
        s.write_at(0, b"data")?;
        assert!(matches!(s.finish(huge), Err(Error::FileTooLarge { requested, .. }) if requested == huge));
        s.abort();
        assert!(!p.exists());
        Ok(())
    }

    #[test]
    fn abort_removes_file() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Sink { path: "tmp".into(), source: e })?;
        let p = dir.path().join("out.img");
        let mut s = TargetSink::create_file(&p, false)?;
        s.write_at(0, b"x")?;
        s.abort();
        assert!(!p.exists());
        Ok(())
    }
}

/// Sinks for the converters' unit tests.
#[cfg(test)]
pub(crate) mod test_sinks {
    use std::path::PathBuf;

    use super::{Sink, SinkReport};
    use crate::{Error, Result};

    /// A sink into memory that checks each guest byte is covered once (panics on a second write); bytes never
    /// written read 0xee, `covered` tells which were.
    pub(crate) struct MemSink {
        pub(crate) data: Vec<u8>,
        pub(crate) covered: Vec<bool>,
    }

    impl MemSink {
        pub(crate) fn new(len: usize) -> Self {
            MemSink { data: vec![0xee; len], covered: vec![false; len] }
        }
        fn cover(&mut self, off: u64, len: usize) {
            for c in &mut self.covered[off as usize..off as usize + len] {
                assert!(!*c, "covered twice at {off}");
                *c = true;
            }
        }
    }

    impl Sink for MemSink {
        fn capacity(&self) -> Option<u64> {
            Some(self.data.len() as u64)
        }
        fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
            self.cover(offset, data.len());
            self.data[offset as usize..offset as usize + data.len()].copy_from_slice(data);
            Ok(())
        }
        fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
            self.cover(offset, len as usize);
            self.data[offset as usize..(offset + len) as usize].fill(0);
            Ok(())
        }
        fn finish(&mut self, len: u64) -> Result<SinkReport> {
            Ok(SinkReport { size: len, bytes_written: 0, preallocated: false })
        }
        fn abort(&mut self) {}
        fn external_target(&mut self, _len: u64) -> Result<(PathBuf, bool)> {
            Err(Error::InvalidRequest("test".into()))
        }
        fn note_external_write(&mut self, _bytes: u64) {}
    }
}
