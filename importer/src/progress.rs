//! Live progress, shared between the pipeline (which advances it) and observers (the CLI's progress bar,
//! pod mode's metrics endpoint), which poll it. Cheap: a few atomics behind an `Arc`.

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

/// What the pipeline is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Opening the source and detecting formats.
    Probe,
    /// Streaming the source into the target (download and conversion at once).
    Import,
    /// Copying the source to scratch space (only when the format needs it and the source cannot seek).
    Spool,
    /// Converting from scratch space or a local file with `qemu-img`.
    Convert,
    /// Fetching clusters the stream delivered before the metadata that maps them.
    Resolve,
    /// Growing, preallocating and syncing the target.
    Finish,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Import,
            2 => Phase::Spool,
            3 => Phase::Convert,
            4 => Phase::Resolve,
            5 => Phase::Finish,
            _ => Phase::Probe,
        }
    }

    /// A short label for display.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Probe => "probing",
            Phase::Import => "importing",
            Phase::Spool => "downloading to scratch",
            Phase::Convert => "converting",
            Phase::Resolve => "resolving",
            Phase::Finish => "syncing",
        }
    }
}

#[derive(Debug)]
struct Inner {
    phase: AtomicU8,
    done: AtomicU64,
    total: AtomicU64, // u64::MAX = unknown
    source_bytes: AtomicU64,
    written_bytes: AtomicU64,
    spooled: std::sync::atomic::AtomicBool,
    started: Instant,
}

/// Shared progress state. Clones observe and update the same state.
#[derive(Debug, Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

/// A point-in-time view of [`Progress`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Snapshot {
    /// Current phase.
    pub phase: Phase,
    /// Units done in the current phase (bytes).
    pub done: u64,
    /// Units in the current phase, when known.
    pub total: Option<u64>,
    /// Bytes read from the source so far (all phases).
    pub source_bytes: u64,
    /// Bytes written to the target so far (all phases).
    pub written_bytes: u64,
    /// Seconds since the import started.
    pub elapsed: f64,
    /// Whether the source was spooled to scratch space (conversion then follows as a second half).
    pub spooled: bool,
}

impl Snapshot {
    /// Percentage 0–100 of the current phase, when the total is known.
    pub fn percent(&self) -> Option<f64> {
        self.total.filter(|&t| t > 0).map(|t| (self.done.min(t) as f64 / t as f64) * 100.0)
    }

    /// Overall percentage 0–100 of the whole import: one pass (import) maps to 0–100; a spool to scratch is the
    /// first half and the conversion after it the second half; a conversion of a local file is 0–100.
    pub fn overall_percent(&self) -> f64 {
        let p = self.percent().unwrap_or(0.0);
        match self.phase {
            Phase::Probe => 0.0,
            Phase::Import | Phase::Resolve => p,
            Phase::Spool => p / 2.0,
            Phase::Convert if self.spooled => 50.0 + p / 2.0,
            Phase::Convert => p,
            Phase::Finish => 100.0,
        }
    }
}

impl Progress {
    /// A new tracker in phase [`Phase::Probe`].
    pub fn new() -> Self {
        Progress {
            inner: Arc::new(Inner {
                phase: AtomicU8::new(0),
                done: AtomicU64::new(0),
                total: AtomicU64::new(u64::MAX),
                source_bytes: AtomicU64::new(0),
                written_bytes: AtomicU64::new(0),
                spooled: false.into(),
                started: Instant::now(),
            }),
        }
    }

    /// Enters `phase` with `total` units (bytes) to do; resets the phase counter.
    pub fn start_phase(&self, phase: Phase, total: Option<u64>) {
        self.inner.done.store(0, Ordering::Relaxed);
        self.inner.total.store(total.unwrap_or(u64::MAX), Ordering::Relaxed);
        if phase == Phase::Spool {
            self.inner.spooled.store(true, Ordering::Relaxed);
        }
        self.inner.phase.store(phase as u8, Ordering::Release);
    }

    /// Changes the current phase's total.
    pub fn set_total(&self, total: Option<u64>) {
        self.inner.total.store(total.unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Sets the current phase's absolute position.
    pub fn set_done(&self, done: u64) {
        self.inner.done.store(done, Ordering::Relaxed);
    }

    /// Advances the current phase.
    pub fn advance(&self, n: u64) {
        self.inner.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts bytes read from the source.
    pub fn add_source_bytes(&self, n: u64) {
        self.inner.source_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts bytes written to the target.
    pub fn add_written_bytes(&self, n: u64) {
        self.inner.written_bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// The current state.
    pub fn snapshot(&self) -> Snapshot {
        let total = self.inner.total.load(Ordering::Relaxed);
        Snapshot {
            phase: Phase::from_u8(self.inner.phase.load(Ordering::Acquire)),
            done: self.inner.done.load(Ordering::Relaxed),
            total: (total != u64::MAX).then_some(total),
            source_bytes: self.inner.source_bytes.load(Ordering::Relaxed),
            written_bytes: self.inner.written_bytes.load(Ordering::Relaxed),
            elapsed: self.inner.started.elapsed().as_secs_f64(),
            spooled: self.inner.spooled.load(Ordering::Relaxed),
        }
    }
}

/// A `Read` tap that advances the current phase and the source-byte counter.
pub struct CountingReader<R> {
    inner: R,
    progress: Progress,
}

impl<R> CountingReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, progress: Progress) -> Self {
        CountingReader { inner, progress }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.advance(n as u64);
        self.progress.add_source_bytes(n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_and_percent() {
        let p = Progress::new();
        assert_eq!(p.snapshot().phase, Phase::Probe);
        assert_eq!(p.snapshot().percent(), None);
        p.start_phase(Phase::Import, Some(200));
        let mut r = CountingReader::new(&[7u8; 50][..], p.clone());
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap_or_else(|e| panic!("{e}"));
        let s = p.snapshot();
        assert_eq!((s.phase, s.done, s.source_bytes), (Phase::Import, 50, 50));
        assert_eq!(s.percent(), Some(25.0));
        p.start_phase(Phase::Finish, None);
        assert_eq!(p.snapshot().done, 0);
        assert_eq!(p.snapshot().source_bytes, 50);
    }
}
