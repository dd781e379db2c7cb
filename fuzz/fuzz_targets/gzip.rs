//! Fuzzes the restartable gzip decoder ([`importer::decompress::gzip::GzipDecoder`]) with arbitrary streams,
//! against flate2's decoder.
//!
//! Invariants checked beyond "no panic": when both decoders accept the stream they produce the same bytes, and
//! decoding again from each restart point the first pass recorded (the input from its offset, the 32 KiB before
//! its output offset as the window) produces exactly the rest of the output. Output is capped at 8 MiB per pass
//! (deflate expands up to 1032×).
#![no_main]

use std::io::{BufReader, Read};

use importer::decompress::gzip::{GzipDecoder, RestartPoint, Restarts, WINDOW};
use libfuzzer_sys::fuzz_target;

const CAP: u64 = 8 << 20;

/// Reads up to [`CAP`] bytes; `None` on an error or when there would be more.
fn read_capped(r: impl Read) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    r.take(CAP + 1).read_to_end(&mut out).ok()?;
    (out.len() as u64 <= CAP).then_some(out)
}

/// Decodes `data` whole, collecting every restart point as it is recorded.
fn decode(data: &[u8]) -> (Option<Vec<u8>>, Vec<RestartPoint>) {
    let restarts = Restarts::default();
    let mut d = GzipDecoder::new(BufReader::with_capacity(512, data), restarts.clone());
    let (mut out, mut points) = (Vec::new(), Vec::new());
    let mut buf = [0u8; 4096];
    loop {
        match d.read(&mut buf) {
            Ok(0) => return (Some(out), points),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (None, points),
        }
        if let Some(p) = restarts.at_or_before(u64::MAX).filter(|p| points.last() != Some(p)) {
            points.push(p);
        }
        if out.len() as u64 > CAP {
            return (None, points);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let (ours, points) = decode(data);
    let theirs = read_capped(flate2::bufread::MultiGzDecoder::new(data));
    if let (Some(a), Some(b)) = (&ours, &theirs) {
        assert!(a == b, "the decoders disagree on an accepted stream");
    }
    let Some(out) = ours else { return };
    for p in &points {
        assert!(p.input <= data.len() as u64 && p.output <= out.len() as u64, "restart point out of range: {p:?}");
        let window = &out[(p.output as usize).saturating_sub(WINDOW)..p.output as usize];
        let rest = &data[p.input as usize..];
        let d = GzipDecoder::resume(BufReader::new(rest), p, window, Restarts::default()).expect("a recorded point");
        let tail = read_capped(d).expect("the rest decodes as it did");
        assert!(tail == out[p.output as usize..], "resumed at {p:?}, the rest differs");
    }
});
