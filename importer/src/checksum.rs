//! Checksums of the source bytes as served (`md5|sha1|sha256|sha512:hex`), computed below decompression: by the
//! network sources themselves on the chunks they receive (no copy), or by a tap on the raw byte stream.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bytes::Bytes;
use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512};

/// A supported checksum algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// MD5 (32 hex digits).
    Md5,
    /// SHA-1 (40 hex digits).
    Sha1,
    /// SHA-256 (64 hex digits).
    Sha256,
    /// SHA-512 (128 hex digits).
    Sha512,
}

impl Algorithm {
    fn name(self) -> &'static str {
        match self {
            Algorithm::Md5 => "md5",
            Algorithm::Sha1 => "sha1",
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    fn hex_len(self) -> usize {
        match self {
            Algorithm::Md5 => 32,
            Algorithm::Sha1 => 40,
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }
}

/// An expected checksum, parsed and validated like CDI's webhook does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedChecksum {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Lower-case hex digest.
    pub hex: String,
}

impl fmt::Display for ExpectedChecksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm.name(), self.hex)
    }
}

impl FromStr for ExpectedChecksum {
    type Err = String;

    /// Parses `algorithm:hex`. The algorithm is trimmed and case-insensitive; the hex must have the
    /// algorithm's length.
    fn from_str(s: &str) -> Result<Self, String> {
        let (algo, hex) =
            s.split_once(':').ok_or_else(|| format!("Invalid checksum format: {s:?}: expected algorithm:hash"))?;
        let algorithm = match algo.trim().to_ascii_lowercase().as_str() {
            "md5" => Algorithm::Md5,
            "sha1" => Algorithm::Sha1,
            "sha256" => Algorithm::Sha256,
            "sha512" => Algorithm::Sha512,
            other => {
                return Err(format!(
                    "Invalid checksum format: unsupported algorithm {other:?} (md5, sha1, sha256, sha512)"
                ));
            }
        };
        let hex = hex.trim().to_ascii_lowercase();
        if hex.len() != algorithm.hex_len() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!(
                "Invalid checksum format: {} needs {} hex digits",
                algorithm.name(),
                algorithm.hex_len()
            ));
        }
        Ok(ExpectedChecksum { algorithm, hex })
    }
}

enum State {
    Md5(Md5),
    Sha1(Sha1),
    Sha256(Sha256),
    Sha512(Sha512),
}

impl State {
    fn new(algorithm: Algorithm) -> State {
        match algorithm {
            Algorithm::Md5 => State::Md5(Md5::new()),
            Algorithm::Sha1 => State::Sha1(Sha1::new()),
            Algorithm::Sha256 => State::Sha256(Sha256::new()),
            Algorithm::Sha512 => State::Sha512(Sha512::new()),
        }
    }

    fn update(&mut self, data: &[u8]) {
        match self {
            State::Md5(h) => h.update(data),
            State::Sha1(h) => h.update(data),
            State::Sha256(h) => h.update(data),
            State::Sha512(h) => h.update(data),
        }
    }

    fn hex(self) -> String {
        let bytes: Vec<u8> = match self {
            State::Md5(h) => h.finalize().to_vec(),
            State::Sha1(h) => h.finalize().to_vec(),
            State::Sha256(h) => h.finalize().to_vec(),
            State::Sha512(h) => h.finalize().to_vec(),
        };
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// Copied bytes gathered into one piece.
const HASH_CHUNK: usize = 256 << 10;
/// Bytes of pieces handed to the hashing thread at once (one wake-up of the thread per batch, not per piece).
const HASH_BATCH: usize = 1 << 20;
/// Batches queued for the hashing thread before a feeder waits. With the batch being filled, the hasher holds at
/// most `(HASH_QUEUE + 1) * HASH_BATCH` bytes (plus the unused rest of the body chunks' buffers), which lets
/// the hashing thread fall a few milliseconds behind without holding up the reader.
const HASH_QUEUE: usize = 6;

struct Shared {
    /// Copied bytes not yet made a piece (fed by [`Hasher::update`]).
    pending: Vec<u8>,
    /// Pieces not yet handed over, in order, and their total length.
    batch: Vec<Bytes>,
    batch_len: usize,
    tx: Option<SyncSender<Vec<Bytes>>>,
    thread: Option<JoinHandle<String>>,
    /// Hashes inline when there is no thread.
    inline: Option<State>,
    result: Option<String>,
    /// The source feeds the hasher its chunks itself ([`Hasher::source_tap`]).
    fed_by_source: bool,
}

impl Shared {
    /// Adds `piece` to the batch; hands the batch to the hashing thread (or hashes it inline without one) once
    /// it holds [`HASH_BATCH`] bytes, or with `flush`.
    fn push(&mut self, piece: Bytes, flush: bool) {
        if !piece.is_empty() {
            self.batch_len += piece.len();
            self.batch.push(piece);
        }
        if self.batch.is_empty() || (!flush && self.batch_len < HASH_BATCH) {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        self.batch_len = 0;
        if let Some(tx) = &self.tx {
            let _ = tx.send(batch);
        } else if let Some(st) = &mut self.inline {
            batch.iter().for_each(|p| st.update(p));
        }
    }

    /// Makes the copied bytes a piece.
    fn take_pending(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.pending))
    }
}

/// An incremental hasher that hashes on its own thread (so hashing overlaps with reading, conversion and
/// writing), shared between the tap in the stream and the pipeline that finalises it.
///
/// Two ways in: [`Hasher::update_shared`] takes reference-counted chunks as a network source received them
/// and hands them to the thread as they are (no copy: the thread reads the same memory the reader copies the
/// data out of); [`Hasher::update`] copies borrowed bytes into pieces of [`HASH_CHUNK`] first. Pieces go over
/// in batches of about [`HASH_BATCH`] bytes through a bounded queue: a feeder that gets ahead of the hashing
/// thread waits, so memory stays bounded.
#[derive(Clone)]
pub struct Hasher {
    algorithm: Algorithm,
    shared: Arc<Mutex<Shared>>,
}

impl Hasher {
    /// A fresh hasher.
    pub fn new(algorithm: Algorithm) -> Self {
        let (tx, rx) = mpsc::sync_channel::<Vec<Bytes>>(HASH_QUEUE);
        let thread = std::thread::Builder::new()
            .name("checksum".into())
            .spawn(move || {
                let mut st = State::new(algorithm);
                for batch in rx {
                    batch.iter().for_each(|p| st.update(p));
                }
                st.hex()
            })
            .ok();
        let (tx, thread, inline) = match thread {
            Some(t) => (Some(tx), Some(t), None),
            // Without a thread (resource exhaustion), hash inline.
            None => {
                tracing::warn!("no hashing thread; hashing inline");
                (None, None, Some(State::new(algorithm)))
            }
        };
        let shared = Shared {
            pending: Vec::new(),
            batch: Vec::new(),
            batch_len: 0,
            tx,
            thread,
            inline,
            result: None,
            fed_by_source: false,
        };
        Hasher { algorithm, shared: Arc::new(Mutex::new(shared)) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Feeds bytes (copied).
    pub fn update(&self, data: &[u8]) {
        let mut sh = self.lock();
        if sh.result.is_some() {
            return;
        }
        if sh.pending.capacity() == 0 {
            sh.pending.reserve(HASH_CHUNK);
        }
        sh.pending.extend_from_slice(data);
        if sh.pending.len() >= HASH_CHUNK {
            let piece = sh.take_pending();
            sh.push(piece, false);
        }
    }

    /// Feeds a chunk without copying it: the hashing thread reads it while the caller goes on using it.
    pub fn update_shared(&self, chunk: &Bytes) {
        let mut sh = self.lock();
        if sh.result.is_some() {
            return;
        }
        let piece = sh.take_pending();
        sh.push(piece, false);
        sh.push(chunk.clone(), false);
    }

    /// The same hasher, for a source that feeds it every chunk it delivers ([`Hasher::update_shared`]); from
    /// then on [`Hasher::fed_by_source`] says so, and the stream must not be tapped a second time.
    pub fn source_tap(&self) -> Hasher {
        self.lock().fed_by_source = true;
        self.clone()
    }

    /// Whether a source feeds this hasher itself ([`Hasher::source_tap`]).
    pub fn fed_by_source(&self) -> bool {
        self.lock().fed_by_source
    }

    /// `algorithm:hex` of everything fed so far. Finalises: later updates are ignored.
    pub fn hex(&self) -> String {
        let mut sh = self.lock();
        if sh.result.is_none() {
            let piece = sh.take_pending();
            sh.push(piece, true);
            let hex = match (sh.tx.take(), sh.thread.take(), sh.inline.take()) {
                (Some(tx), Some(t), _) => {
                    drop(tx);
                    t.join().unwrap_or_default()
                }
                (_, _, Some(st)) => st.hex(),
                _ => String::new(),
            };
            sh.result = Some(hex);
        }
        format!("{}:{}", self.algorithm.name(), sh.result.as_deref().unwrap_or(""))
    }

    /// Finalises and compares with the expectation, giving CDI's mismatch error.
    pub fn verify(&self, expected: &ExpectedChecksum) -> crate::Result<String> {
        let got = self.hex();
        if got == expected.to_string() {
            Ok(got)
        } else {
            Err(crate::Error::ChecksumMismatch { expected: expected.to_string(), calculated: got })
        }
    }
}

/// A `Read` tap that feeds every byte read through it to a [`Hasher`].
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
}

impl<R: Read> HashingReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, hasher: Hasher) -> Self {
        HashingReader { inner, hasher }
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse() {
        let ok: ExpectedChecksum = " SHA256 :E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855"
            .parse()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.algorithm, Algorithm::Sha256);
        assert!(ok.hex.starts_with("e3b0"));
        for bad in ["sha256", "crc32:00", "md5:xyz", "sha1:00", "md5:0123456789abcdef0123456789abcdeg"] {
            assert!(bad.parse::<ExpectedChecksum>().is_err(), "{bad}");
        }
    }

    #[test]
    fn known_digests() {
        let cases = [
            (Algorithm::Md5, "md5:900150983cd24fb0d6963f7d28e17f72"),
            (Algorithm::Sha1, "sha1:a9993e364706816aba3e25717850c26c9cd0d89d"),
            (Algorithm::Sha256, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        ];
        for (a, want) in cases {
            let h = Hasher::new(a);
            let mut r = HashingReader::new(&b"abc"[..], h.clone());
            let mut out = Vec::new();
            r.read_to_end(&mut out).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(h.hex(), want);
            assert!(h.verify(&want.parse().unwrap_or_else(|e| panic!("{e}"))).is_ok());
        }
        let h = Hasher::new(Algorithm::Sha512);
        h.update(b"abc");
        assert!(h.hex().starts_with("sha512:ddaf35a193617aba"));
        // Shared chunks and copied bytes interleave in order; a source tap is remembered.
        let h = Hasher::new(Algorithm::Sha256);
        let tap = h.source_tap();
        assert!(h.fed_by_source());
        tap.update(b"a");
        tap.update_shared(&Bytes::from_static(b"b"));
        tap.update(b"c");
        assert_eq!(h.hex(), cases[2].1);
        let big: Vec<u8> = (0..3 * HASH_CHUNK + 5).map(|i| (i % 251) as u8).collect();
        let (h1, h2) = (Hasher::new(Algorithm::Sha256), Hasher::new(Algorithm::Sha256));
        h1.update(&big);
        for piece in big.chunks(100_000) {
            h2.update_shared(&Bytes::copy_from_slice(piece));
        }
        assert_eq!(h1.hex(), h2.hex());
        let wrong: ExpectedChecksum = format!("md5:{}", "0".repeat(32)).parse().unwrap_or_else(|e| panic!("{e}"));
        let h = Hasher::new(Algorithm::Md5);
        let err = h.verify(&wrong).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.starts_with("checksum mismatch: expected md5:000"), "{err}");
        assert!(err.contains("calculated md5:d41d8cd98f00b204e9800998ecf8427e"), "{err}");
    }
}
