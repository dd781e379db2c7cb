//! Resuming an import whose worker died (pod deleted or evicted, OOM-killed, node drained): instead of starting
//! over, the next run continues where the durable data ends.
//!
//! ```text
//! first run:  raw stream / qcow2 converter ─► Checkpointing (every ≥ 2 s and ≥ 64 KiB more: sink fdatasync,
//!             then the checkpoint file; qcow2: at the frontier the converter offers)
//! next run:   checkpoint ─► the target holds it? (a digest of 4 KiB written before the checkpoint)
//!             ─► http::open_from(durable, validator): same ETag / Last-Modified / length? ─► 206 from there
//!             ─► raw: the target cut back to the durable end, the rest streamed from that offset
//!                gzip: the target cut back to the restart point's output offset, its last 32 KiB read back as
//!                      the deflate window, the decoder restarted there (decompress::gzip::GzipDecoder::resume)
//!                xz: the source's index (footer and index by Range) names the last block that begins in the
//!                    durable output; the target is cut back to that block's output offset and the stream
//!                    header + the file from the block on are decoded (decompress::xz_index)
//!                qcow2: format::qcow2::convert_from(durable): tables below re-read by Range, data below skipped
//!             anything else (no checkpoint, another source, the object changed, no Range) ─► start over
//! ```
//!
//! The checkpoint is a small JSON file next to the image (`.<image>.import-checkpoint`), written to a temporary
//! file, fsynced and renamed, and only after the image's data up to its offset was fsynced: a checkpoint never
//! names data that is not on the volume. It is removed when the import ends, either way.
//!
//! What resumes: raw / ISO images, uncompressed, gzip-compressed or in a multi-block xz stream (what `xz -T`
//! writes), and qcow2 images, over HTTP(S) or S3 from servers with Range and a validator, into a file target (a
//! Filesystem volume). The source's bytes before the offset are not written again; with a checksum they are read
//! again (ranged) only to be hashed, so the digest still covers every byte. zstd and bzip2 streams, single-block
//! xz files and the other formats start over: their decoders cannot be restarted mid-stream from a small state.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::Result;
use crate::decompress::gzip::{RestartPoint, Restarts, WINDOW};
use crate::sink::{Sink, SinkReport};
use crate::source::Validator;

/// Format of the checkpoint file; another version is ignored (the import starts over).
const VERSION: u32 = 1;
/// How much of the target before the durable end the checkpoint's digest covers.
const TAIL: u64 = 4096;
/// Checkpoints are at least this far apart in time …
const INTERVAL: Duration = Duration::from_secs(2);
/// … and in bytes (an import faster than the interval writes none: there is little to lose).
const MIN_BYTES: u64 = 64 << 10;
/// Largest piece handed to the inner sink at once: a raw copy fills its whole piece before it returns, so this
/// bounds how far a slow source gets between two chances to checkpoint.
const PIECE: usize = 256 << 10;

/// How the image's bytes lie in the target relative to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Source byte N is target byte N (uncompressed raw / ISO).
    Raw,
    /// A qcow2 image converted by `format::qcow2`; `durable` is a frontier it offered.
    Qcow2,
    /// A gzip stream of a raw / ISO image; `durable` is the compressed offset of [`Checkpoint::inflate`].
    Gzip,
    /// An xz stream of a raw / ISO image; `durable` counts output (target) bytes, and the next run restarts at
    /// the last block that begins before it, found in the source's index (`decompress::xz_index`).
    Xz,
}

/// What an interrupted import leaves next to its target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Checkpoint {
    /// [`VERSION`].
    pub version: u32,
    /// The source, as [`crate::source::SourceLocation`] displays it.
    pub source: String,
    /// The version of the source that was being read.
    pub validator: Validator,
    /// How source bytes map to target bytes.
    pub layout: Layout,
    /// Source bytes (and, for [`Layout::Raw`], target bytes) that are durable in the target; [`Layout::Xz`]:
    /// target bytes only.
    pub durable: u64,
    /// Bytes of the target written before the checkpoint, to check that it still holds them ([`Layout::Gzip`]:
    /// the deflate window before the restart point).
    pub probe: Probe,
    /// [`Layout::Gzip`]: where the decoder restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inflate: Option<RestartPoint>,
}

/// A range of the target and the SHA-256 (hex) of its bytes when the checkpoint was written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// Target offset.
    pub offset: u64,
    /// Length (at most 32 KiB: a deflate window).
    pub len: u64,
    /// SHA-256 of the bytes, hex.
    pub sha256: String,
}

impl Probe {
    /// Reads `[offset, offset + len)` of `file` and records its digest.
    fn of(file: &File, offset: u64, len: u64) -> io::Result<Probe> {
        Ok(Probe { offset, len, sha256: digest_at(file, offset, len)? })
    }

    /// Whether `file` still holds the recorded bytes.
    fn holds(&self, file: &File) -> bool {
        self.len <= WINDOW as u64 && digest_at(file, self.offset, self.len).is_ok_and(|d| d == self.sha256)
    }
}

/// The checkpoint file of target `dest`: `.<file name>.import-checkpoint` in the same directory.
pub fn checkpoint_path(dest: &Path) -> PathBuf {
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dest.with_file_name(format!(".{name}.import-checkpoint"))
}

impl Checkpoint {
    /// A checkpoint for a fresh import of `source` (version `validator`), nothing durable yet.
    pub fn start(source: String, validator: Validator, layout: Layout) -> Self {
        Checkpoint { version: VERSION, source, validator, layout, durable: 0, probe: Probe::default(), inflate: None }
    }

    /// The checkpoint next to `dest`, if there is a readable one of this version. Anything else is `None`
    /// (logged): a garbled file only costs a fresh start.
    pub fn load(dest: &Path) -> Option<Checkpoint> {
        let path = checkpoint_path(dest);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "unreadable import checkpoint ({e}); starting over");
                return None;
            }
        };
        match serde_json::from_slice::<Checkpoint>(&bytes) {
            Ok(c) if c.version == VERSION => Some(c),
            Ok(c) => {
                tracing::warn!(version = c.version, "import checkpoint of another version; starting over");
                None
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "garbled import checkpoint ({e}); starting over");
                None
            }
        }
    }

    /// Removes the checkpoint next to `dest` (absent is fine).
    pub fn remove(dest: &Path) {
        let path = checkpoint_path(dest);
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %path.display(), "cannot remove the import checkpoint: {e}"),
        }
    }

    /// Whether this checkpoint can resume an import of `source` into `dest`: same source, a durable part, and
    /// the target holds it (long enough, and the probed bytes are the ones recorded).
    pub fn resumes(&self, source: &str, dest: &Path) -> bool {
        let beyond = self.layout != Layout::Xz && self.durable > self.validator.size;
        if self.source != source || self.durable == 0 || beyond {
            return false;
        }
        let Ok(file) = File::open(dest) else { return false };
        let need = match (self.layout, self.inflate) {
            (Layout::Raw | Layout::Xz, _) => self.durable,
            (Layout::Qcow2, _) => self.probe.offset + self.probe.len,
            (Layout::Gzip, Some(p)) if p.input == self.durable => p.output,
            (Layout::Gzip, _) => return false,
        };
        let long_enough = file.metadata().is_ok_and(|m| m.is_file() && m.len() >= need);
        long_enough && self.probe.holds(&file)
    }

    /// [`Layout::Gzip`]: the deflate window before the restart point, read from the target at `dest` once, and
    /// only if it still holds the bytes the probe recorded (the probe covers exactly the window). `None` for
    /// another layout, or when the window cannot be read or changed.
    pub fn deflate_window(&self, dest: &Path) -> Option<Vec<u8>> {
        let p = self.inflate.filter(|_| self.layout == Layout::Gzip)?;
        let len = p.output.min(WINDOW as u64);
        if (self.probe.offset, self.probe.len) != (p.output - len, len) {
            return None;
        }
        let bytes = File::open(dest).and_then(|f| bytes_at(&f, self.probe.offset, self.probe.len)).ok()?;
        (digest(&bytes) == self.probe.sha256).then_some(bytes)
    }

    /// Writes the checkpoint next to `dest` atomically: a temporary file, fsynced, renamed over the old one,
    /// and the directory fsynced.
    fn store(&self, dest: &Path) -> io::Result<()> {
        let path = checkpoint_path(dest);
        let tmp = path.with_extension("import-checkpoint.tmp");
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        f.write_all(&serde_json::to_vec(self).map_err(io::Error::other)?)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}

/// `file`'s bytes `[offset, offset + len)` (at most [`WINDOW`] of them).
fn bytes_at(file: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len.min(WINDOW as u64) as usize];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

/// SHA-256 (hex) of `bytes`.
fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 (hex) of `file`'s bytes `[offset, offset + len)`.
fn digest_at(file: &File, offset: u64, len: u64) -> io::Result<String> {
    bytes_at(file, offset, len).map(|b| digest(&b))
}

/// A sink that writes checkpoints, every [`INTERVAL`] once [`MIN_BYTES`] more are durable: the inner sink is
/// synced first, so a checkpoint names only durable data. A checkpoint that cannot be stored costs only the
/// ability to resume (logged).
///
/// * [`Layout::Raw`] and [`Layout::Xz`] (its output): the stream's byte 0 lands at target offset `base` (0 on a first run, the durable end on a
///   resumed one); offsets, lengths and capacities are in the stream's coordinates; it checkpoints by itself,
///   at the end of what was written contiguously.
/// * [`Layout::Gzip`]: as raw, with `base` the restart point's output offset; it checkpoints at the last restart
///   point the decoder recorded ([`Checkpointing::with_restarts`]) at or before the end of what was written.
/// * [`Layout::Qcow2`]: offsets are the target's; the converter offers frontiers ([`Sink::checkpoint`]).
pub struct Checkpointing<'a> {
    inner: &'a mut dyn Sink,
    dest: PathBuf,
    checkpoint: Checkpoint,
    /// [`Layout::Gzip`]: the decoder's restart points.
    restarts: Option<Restarts>,
    base: u64,
    /// Raw: target offset up to which the stream was written, contiguously.
    end: u64,
    /// The last bytes written (target offset, length ≤ 4 KiB), probed by a qcow2 checkpoint.
    last_write: (u64, u64),
    last: Instant,
}

impl<'a> Checkpointing<'a> {
    /// Wraps `inner` (the target at `dest`), continuing `checkpoint` (a fresh one or the one resumed from).
    pub fn new(inner: &'a mut dyn Sink, dest: &Path, checkpoint: Checkpoint) -> Self {
        let base = match checkpoint.layout {
            Layout::Raw | Layout::Xz => checkpoint.durable,
            Layout::Gzip => checkpoint.inflate.map_or(0, |p| p.output),
            Layout::Qcow2 => 0,
        };
        let dest = dest.to_path_buf();
        let last_write = (0, 0);
        Checkpointing { inner, dest, checkpoint, restarts: None, base, end: base, last_write, last: Instant::now() }
    }

    /// [`Layout::Gzip`]: the restart points of the decoder whose output is written here.
    pub fn with_restarts(mut self, restarts: Option<Restarts>) -> Self {
        self.restarts = restarts;
        self
    }

    fn wrote(&mut self, offset: u64, len: u64) -> Result<()> {
        if len > 0 {
            let tail = len.min(TAIL);
            self.last_write = (offset + len - tail, tail);
        }
        if self.checkpoint.layout != Layout::Qcow2 {
            if offset == self.end {
                self.end += len;
            }
            if self.last.elapsed() >= INTERVAL {
                self.record(self.end)?;
            }
        }
        Ok(())
    }

    /// Syncs the target and stores a checkpoint at `frontier` (raw, qcow2) or at the last restart point before it
    /// (gzip), if that moved on by [`MIN_BYTES`] of the source.
    fn record(&mut self, frontier: u64) -> Result<()> {
        let (durable, inflate, (offset, len)) = match self.checkpoint.layout {
            Layout::Raw | Layout::Xz => (frontier, None, (frontier.saturating_sub(TAIL), frontier.min(TAIL))),
            Layout::Qcow2 => (frontier, None, self.last_write),
            Layout::Gzip => {
                let Some(p) = self.restarts.as_ref().and_then(|r| r.at_or_before(frontier)) else { return Ok(()) };
                let window = p.output.min(WINDOW as u64);
                (p.input, Some(p), (p.output - window, window))
            }
        };
        if durable < self.checkpoint.durable + MIN_BYTES {
            return Ok(());
        }
        self.inner.sync_data()?;
        if self.checkpoint.layout == Layout::Gzip {
            // The file covers all that was written, zero blocks (holes) at its end included, so that the window
            // reads back as written; nothing was written past `end`.
            self.inner.ensure_len(self.end)?;
        }
        self.last = Instant::now();
        let probe = File::open(&self.dest).and_then(|f| Probe::of(&f, offset, len));
        let next = probe.map(|probe| Checkpoint { durable, probe, inflate, ..self.checkpoint.clone() });
        match next.and_then(|c| c.store(&self.dest).map(|()| c)) {
            Ok(c) => {
                tracing::debug!(durable = c.durable, "import checkpoint");
                self.checkpoint = c;
            }
            Err(e) => tracing::warn!("cannot write the import checkpoint: {e}"),
        }
        Ok(())
    }
}

impl Sink for Checkpointing<'_> {
    fn capacity(&self) -> Option<u64> {
        self.inner.capacity().map(|c| c.saturating_sub(self.base))
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write_at(self.base + offset, data)?;
        self.wrote(self.base + offset, data.len() as u64)
    }

    fn write_with(
        &mut self,
        offset: u64,
        max: usize,
        fill: &mut dyn FnMut(&mut [u8]) -> Result<usize>,
    ) -> Result<usize> {
        let n = self.inner.write_with(self.base + offset, max.min(PIECE), fill)?;
        self.wrote(self.base + offset, n as u64)?;
        Ok(n)
    }

    fn write_zeroes(&mut self, offset: u64, len: u64) -> Result<()> {
        self.inner.write_zeroes(self.base + offset, len)
    }

    fn ensure_len(&mut self, len: u64) -> Result<()> {
        self.inner.ensure_len(self.base + len)
    }

    fn sync_data(&mut self) -> Result<()> {
        self.inner.sync_data()
    }

    fn checkpoint_due(&self) -> bool {
        self.checkpoint.layout == Layout::Qcow2 && self.last.elapsed() >= INTERVAL
    }

    fn checkpoint(&mut self, frontier: u64) -> Result<()> {
        if self.checkpoint.layout == Layout::Qcow2 {
            self.record(frontier)?;
            // Not due again before the interval, whether or not it moved on enough to be stored.
            self.last = Instant::now();
        }
        Ok(())
    }

    fn finish(&mut self, len: u64) -> Result<SinkReport> {
        self.inner.finish(self.base + len)
    }

    fn abort(&mut self) {
        self.inner.abort();
    }

    fn external_target(&mut self, len: u64) -> Result<(PathBuf, bool)> {
        self.inner.external_target(self.base + len)
    }

    fn note_external_write(&mut self, bytes: u64) {
        self.inner.note_external_write(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::TargetSink;

    fn validator() -> Validator {
        Validator { etag: Some("\"abc\"".into()), last_modified: None, size: 8 << 20 }
    }

    #[test]
    fn checkpoints_name_only_durable_data_and_check_the_target() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| crate::Error::InvalidRequest(e.to_string()))?;
        let dest = dir.path().join("disk.img");
        let data: Vec<u8> = (0..(8u32 << 20)).map(|i| (i % 251) as u8).collect();
        let mut sink = TargetSink::create_file(&dest, false)?;
        {
            let start = Checkpoint::start("http://h/x.raw".into(), validator(), Layout::Raw);
            let mut w = Checkpointing::new(&mut sink, &dest, start);
            w.write_at(0, &data[..2 << 20])?;
            assert!(Checkpoint::load(&dest).is_none(), "no checkpoint before the interval");
            w.last -= INTERVAL;
            w.write_at(2 << 20, &data[2 << 20..4 << 20])?;
        }
        let c = Checkpoint::load(&dest).unwrap_or_else(|| panic!("no checkpoint"));
        assert_eq!((c.durable, c.layout), (4 << 20, Layout::Raw));
        assert!(c.resumes("http://h/x.raw", &dest));
        assert!(!c.resumes("http://h/other.raw", &dest), "another source");
        sink.abort();
        assert!(!c.resumes("http://h/x.raw", &dest), "target gone");

        // A resumed run: the target cut back to the durable end, the rest written from there.
        let mut sink = TargetSink::create_file(&dest, false)?;
        sink.write_at(0, &data[..4 << 20])?;
        sink.write_at(4 << 20, &[0xee; 4096])?; // written after the checkpoint, not durable: dropped
        sink.finish(5 << 20)?;
        assert!(c.resumes("http://h/x.raw", &dest));
        let mut sink = TargetSink::resume_file(&dest, false, c.durable)?;
        {
            let mut w = Checkpointing::new(&mut sink, &dest, c.clone());
            w.write_at(0, &data[4 << 20..6 << 20])?;
        }
        sink.finish(8 << 20)?;
        let got = fs::read(&dest).map_err(|e| crate::Error::InvalidRequest(e.to_string()))?;
        assert_eq!(&got[..6 << 20], &data[..6 << 20]);
        assert!(got[6 << 20..].iter().all(|&b| b == 0), "the dropped tail reads as zeroes");

        // A target whose bytes before the durable end changed is not resumed.
        let f = OpenOptions::new().write(true).open(&dest).map_err(|e| crate::Error::InvalidRequest(e.to_string()))?;
        f.write_all_at(&[1, 2, 3], c.durable - 10).map_err(|e| crate::Error::InvalidRequest(e.to_string()))?;
        assert!(!c.resumes("http://h/x.raw", &dest));
        Checkpoint::remove(&dest);
        assert!(Checkpoint::load(&dest).is_none());
        Ok(())
    }

    #[test]
    fn a_gzip_checkpoint_names_a_restart_point_whose_window_is_durable() -> Result<()> {
        let io = |e: io::Error| crate::Error::InvalidRequest(e.to_string());
        let dir = tempfile::tempdir().map_err(io)?;
        let dest = dir.path().join("disk.img");
        let data: Vec<u8> = (0..(3u32 << 20)).map(|i| (i % 253) as u8).collect();
        let restarts = Restarts::default();
        let point = RestartPoint { input: 700_000, output: 1 << 20, num_bits: 5, bit_buf: 0x13, crc: 7, member_len: 1 };
        let mut sink = TargetSink::create_file(&dest, false)?;
        {
            let start = Checkpoint::start("http://h/x.raw.gz".into(), validator(), Layout::Gzip);
            let mut w = Checkpointing::new(&mut sink, &dest, start).with_restarts(Some(restarts.clone()));
            w.last -= INTERVAL;
            w.write_at(0, &data[..512 << 10])?;
            assert!(Checkpoint::load(&dest).is_none(), "no restart point yet");
            restarts.push(point);
            w.write_at(512 << 10, &data[512 << 10..])?;
        }
        let c = Checkpoint::load(&dest).unwrap_or_else(|| panic!("no checkpoint"));
        assert_eq!((c.layout, c.durable, c.inflate), (Layout::Gzip, point.input, Some(point)));
        assert_eq!((c.probe.offset, c.probe.len), ((1 << 20) - WINDOW as u64, WINDOW as u64), "the window");
        assert!(c.resumes("http://h/x.raw.gz", &dest));
        let window = c.deflate_window(&dest);
        assert!(window.as_deref() == Some(&data[(1 << 20) - WINDOW..1 << 20]), "the window is the probed bytes");
        let mut other = c.clone();
        other.durable += 1;
        assert!(!other.resumes("http://h/x.raw.gz", &dest), "the restart point is not the durable offset");
        let f = OpenOptions::new().write(true).open(&dest).map_err(io)?;
        f.write_all_at(&[1, 2, 3], (1 << 20) - 20_000).map_err(io)?;
        assert!(!c.resumes("http://h/x.raw.gz", &dest), "the window changed");
        assert_eq!(c.deflate_window(&dest), None, "a changed window is not used");
        Ok(())
    }

    #[test]
    fn garbled_or_foreign_checkpoints_are_ignored() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dest = dir.path().join("disk.img");
        for text in ["", "{", "{\"version\":1}", "null"] {
            fs::write(checkpoint_path(&dest), text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(Checkpoint::load(&dest), None, "{text:?}");
        }
        let mut c = Checkpoint::start("s".into(), validator(), Layout::Raw);
        c.version = 99;
        fs::write(checkpoint_path(&dest), serde_json::to_vec(&c).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(Checkpoint::load(&dest), None);
        c.version = VERSION;
        c.durable = c.validator.size + 1;
        assert!(!c.resumes("s", &dest), "beyond the source");
    }
}
