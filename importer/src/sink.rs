//! Targets: a regular file or a block device, written sparsely.
//!
//! Contract for callers (the format converters): every byte of `[0, len)` passed to [`Sink::finish`] is
//! covered exactly once, by [`Sink::write_at`] or [`Sink::write_zeroes`]. Sinks turn all-zero blocks of
//! written data into holes (files) or efficient zeroing (block devices), so callers need not check for zeros.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::FallocateFlags;

use crate::{Error, Result};

/// Granularity of zero detection: all-zero blocks of this size (aligned in the target) are not written,
/// like `qemu-img convert`'s default `-S 4k`.
pub const ZERO_BLOCK: usize = 4096;

/// Contiguous writes are gathered up to this size before they reach the kernel.
const WRITE_BUFFER: usize = 4 << 20;

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
    /// Makes `[offset, offset + len)` read as zeroes.
    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()>;
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
    chunks
        .map(|c| <[u8; 16]>::try_from(c).map_or(1, u128::from_ne_bytes))
        .all(|w| w == 0)
        && rem.iter().all(|&b| b == 0)
}

/// Opens DEST: a block device (detected by `stat`) is opened for writing; anything else is treated as a
/// regular file, which is removed if present and created anew.
pub fn open(dest: &Path, preallocate: bool) -> Result<Box<dyn Sink>> {
    let sink_err = |source| Error::Sink {
        path: dest.to_path_buf(),
        source,
    };
    match fs::metadata(dest) {
        Ok(m) if m.file_type().is_block_device() => {
            Ok(Box::new(BlockSink::open(dest, preallocate)?))
        }
        Ok(m) if m.is_dir() => Err(sink_err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "destination is a directory",
        ))),
        Ok(m) if !m.is_file() => Err(sink_err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "destination is neither a regular file nor a block device",
        ))),
        _ => Ok(Box::new(FileSink::create(dest, preallocate)?)),
    }
}

/// Gathers contiguous writes and flushes them with zero-block detection.
struct WriteBuffer {
    offset: u64,
    data: Vec<u8>,
}

impl WriteBuffer {
    fn new() -> Self {
        WriteBuffer {
            offset: 0,
            data: Vec::new(),
        }
    }

    /// Appends if contiguous and there is room; returns false if the caller must flush first.
    fn try_append(&mut self, offset: u64, data: &[u8]) -> bool {
        if self.data.is_empty() {
            self.offset = offset;
        } else if self.offset + self.data.len() as u64 != offset
            || self.data.len() + data.len() > WRITE_BUFFER
        {
            return false;
        }
        if self.data.capacity() == 0 {
            self.data.reserve_exact(WRITE_BUFFER);
        }
        self.data.extend_from_slice(data);
        true
    }
}

/// Splits `[offset, offset+data.len())` into runs of data and of zero blocks (aligned to [`ZERO_BLOCK`] in
/// target offsets) and calls `f(offset, run, is_zero)` for each run in order.
fn for_each_run(
    offset: u64,
    data: &[u8],
    mut f: impl FnMut(u64, &[u8], bool) -> io::Result<()>,
) -> io::Result<()> {
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

/// A regular-file target, created sparse.
pub struct FileSink {
    path: PathBuf,
    file: Option<File>,
    buf: WriteBuffer,
    preallocate: bool,
    bytes_written: u64,
}

impl FileSink {
    /// Removes whatever regular file is at `path` and creates an empty one (mode 0644 before umask).
    pub fn create(path: &Path, preallocate: bool) -> Result<Self> {
        let err = |source| Error::Sink {
            path: path.to_path_buf(),
            source,
        };
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(path)
            .map_err(err)?;
        Ok(FileSink {
            path: path.to_path_buf(),
            file: Some(file),
            buf: WriteBuffer::new(),
            preallocate,
            bytes_written: 0,
        })
    }

    fn err(&self, source: io::Error) -> Error {
        Error::Sink {
            path: self.path.clone(),
            source,
        }
    }

    fn file(&self) -> Result<&File> {
        self.file
            .as_ref()
            .ok_or_else(|| self.err(io::Error::other("target already finished")))
    }

    fn flush_buf(&mut self) -> Result<()> {
        if self.buf.data.is_empty() {
            return Ok(());
        }
        let file = self.file()?;
        let mut written = 0u64;
        let r = for_each_run(self.buf.offset, &self.buf.data, |off, run, zero| {
            if !zero {
                file.write_all_at(run, off)?;
                written += run.len() as u64;
            }
            Ok(())
        });
        r.map_err(|e| self.err(e))?;
        self.bytes_written += written;
        self.buf.data.clear();
        Ok(())
    }
}

impl Sink for FileSink {
    fn capacity(&self) -> Option<u64> {
        None
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        if !self.buf.try_append(offset, data) {
            self.flush_buf()?;
            if !self.buf.try_append(offset, data) {
                // Larger than the buffer: write straight through.
                let file = self.file()?;
                let mut written = 0u64;
                let r = for_each_run(offset, data, |off, run, zero| {
                    if !zero {
                        file.write_all_at(run, off)?;
                        written += run.len() as u64;
                    }
                    Ok(())
                });
                r.map_err(|e| self.err(e))?;
                self.bytes_written += written;
            }
        }
        Ok(())
    }

    fn write_zeroes(&mut self, _offset: u64, _len: u64) -> Result<()> {
        // A new file reads as zero wherever nothing was written.
        Ok(())
    }

    fn finish(&mut self, len: u64) -> Result<SinkReport> {
        self.flush_buf()?;
        let file = self.file()?;
        file.set_len(len).map_err(|e| self.err(e))?;
        if self.preallocate && len > 0 {
            rustix::fs::fallocate(file, FallocateFlags::empty(), 0, len)
                .map_err(|e| self.err(io::Error::from(e)))?;
        }
        file.sync_all().map_err(|e| self.err(e))?;
        self.file = None;
        Ok(SinkReport {
            size: len,
            bytes_written: self.bytes_written,
            preallocated: self.preallocate,
        })
    }

    fn abort(&mut self) {
        self.file = None;
        let _ = fs::remove_file(&self.path);
    }

    fn external_target(&mut self, len: u64) -> Result<(PathBuf, bool)> {
        self.flush_buf()?;
        self.file()?.set_len(len).map_err(|e| self.err(e))?;
        Ok((self.path.clone(), self.bytes_written == 0))
    }

    fn note_external_write(&mut self, bytes: u64) {
        self.bytes_written += bytes;
    }
}

/// A block-device target. Zero regions are zeroed with `fallocate` (punch or zero-range), falling back to
/// writing zero buffers when the device supports neither.
pub struct BlockSink {
    path: PathBuf,
    file: File,
    size: u64,
    buf: WriteBuffer,
    preallocate: bool,
    fallocate_ok: bool,
    bytes_written: u64,
}

impl BlockSink {
    /// Opens the device exclusively (`O_EXCL`: fails if it is mounted) and reads its size.
    pub fn open(path: &Path, preallocate: bool) -> Result<Self> {
        let err = |source| Error::Sink {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::EXCL.bits() as i32)
            .open(path)
            .map_err(err)?;
        let size = file.seek(SeekFrom::End(0)).map_err(err)?;
        Ok(BlockSink {
            path: path.to_path_buf(),
            file,
            size,
            buf: WriteBuffer::new(),
            preallocate,
            fallocate_ok: true,
            bytes_written: 0,
        })
    }

    fn err(&self, source: io::Error) -> Error {
        Error::Sink {
            path: self.path.clone(),
            source,
        }
    }

    fn check_bounds(&self, offset: u64, len: u64) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(Error::DataBeyondTarget {
                limit: self.size,
                offset,
            });
        }
        Ok(())
    }

    fn zero_range(&mut self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        if self.fallocate_ok {
            let modes = if self.preallocate {
                [
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE,
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE,
                ]
            } else {
                [
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE,
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE,
                ]
            };
            for mode in modes {
                if rustix::fs::fallocate(&self.file, mode, offset, len).is_ok() {
                    return Ok(());
                }
            }
            self.fallocate_ok = false;
            tracing::debug!(path = %self.path.display(), "fallocate zeroing unsupported; writing zeroes");
        }
        let zeros = vec![0u8; (1 << 20).min(len as usize)];
        let mut pos = offset;
        let end = offset + len;
        while pos < end {
            let n = ((end - pos) as usize).min(zeros.len());
            self.file.write_all_at(&zeros[..n], pos)?;
            pos += n as u64;
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> Result<()> {
        if self.buf.data.is_empty() {
            return Ok(());
        }
        let data = std::mem::take(&mut self.buf.data);
        let offset = self.buf.offset;
        let mut written = 0u64;
        let r = for_each_run(offset, &data, |off, run, zero| {
            if zero {
                self.zero_range(off, run.len() as u64)
            } else {
                written += run.len() as u64;
                self.file.write_all_at(run, off)
            }
        });
        self.buf.data = data;
        self.buf.data.clear();
        r.map_err(|e| self.err(e))?;
        self.bytes_written += written;
        Ok(())
    }
}

impl Sink for BlockSink {
    fn capacity(&self) -> Option<u64> {
        Some(self.size)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_bounds(offset, data.len() as u64)?;
        if !self.buf.try_append(offset, data) {
            self.flush_buf()?;
            if !self.buf.try_append(offset, data) {
                let mut written = 0u64;
                let r = for_each_run(offset, data, |off, run, zero| {
                    if zero {
                        self.zero_range(off, run.len() as u64)
                    } else {
                        written += run.len() as u64;
                        self.file.write_all_at(run, off)
                    }
                });
                r.map_err(|e| self.err(e))?;
                self.bytes_written += written;
            }
        }
        Ok(())
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
        self.check_bounds(offset, len)?;
        self.flush_buf()?;
        self.zero_range(offset, len).map_err(|e| self.err(e))
    }

    fn finish(&mut self, len: u64) -> Result<SinkReport> {
        self.check_bounds(0, len)?;
        self.flush_buf()?;
        self.file.sync_all().map_err(|e| self.err(e))?;
        Ok(SinkReport {
            size: len,
            bytes_written: self.bytes_written,
            preallocated: self.preallocate,
        })
    }

    fn abort(&mut self) {}

    fn external_target(&mut self, len: u64) -> Result<(PathBuf, bool)> {
        self.check_bounds(0, len)?;
        self.flush_buf()?;
        Ok((self.path.clone(), false))
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
        assert_eq!(
            runs,
            vec![
                (2048, 2048, true),
                (4096, 4096, false),
                (8192, 3 * 4096 - 2048 - 4096, true)
            ]
        );
    }

    #[test]
    fn file_sink_is_sparse_and_exact() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Sink {
            path: "tmp".into(),
            source: e,
        })?;
        let p = dir.path().join("out.img");
        fs::write(&p, b"old content").map_err(|e| Error::Sink {
            path: p.clone(),
            source: e,
        })?;
        let mut s = FileSink::create(&p, false)?;
        s.write_at(0, &[1u8; 100])?;
        s.write_at(100, &vec![0u8; 8 << 20])?;
        s.write_zeroes((8 << 20) + 100, 1 << 20)?;
        s.write_at(16 << 20, b"tail")?;
        let rep = s.finish(32 << 20)?;
        assert_eq!(rep.size, 32 << 20);
        assert_eq!(rep.bytes_written, 100 + 4);
        let got = fs::read(&p).map_err(|e| Error::Sink {
            path: p.clone(),
            source: e,
        })?;
        assert_eq!(got.len(), 32 << 20);
        assert!(got[..100].iter().all(|&b| b == 1));
        assert!(is_zero(&got[100..16 << 20]));
        assert_eq!(&got[16 << 20..(16 << 20) + 4], b"tail");
        use std::os::unix::fs::MetadataExt;
        let blocks = fs::metadata(&p).map(|m| m.blocks()).unwrap_or(u64::MAX);
        assert!(blocks * 512 <= 64 << 10, "allocated {} bytes", blocks * 512);
        Ok(())
    }

    #[test]
    fn abort_removes_file() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| Error::Sink {
            path: "tmp".into(),
            source: e,
        })?;
        let p = dir.path().join("out.img");
        let mut s = FileSink::create(&p, false)?;
        s.write_at(0, b"x")?;
        s.abort();
        assert!(!p.exists());
        Ok(())
    }
}
