//! Fuzzes the qcow2 header parser and the single-pass converter with arbitrary image bytes, through both
//! out-of-order fallbacks (positional reads and the bounded spill store).
//!
//! Invariants checked beyond "no panic": the converter only writes inside `[0, virtual size)`, never covers
//! a guest byte twice, and when it succeeds it has covered every guest byte exactly once.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use importer::format::qcow2::{self, Header, Refetch, spill::Spill};
use importer::sink::{Sink, SinkReport};
use importer::source::MemoryAccess;
use libfuzzer_sys::fuzz_target;

/// Records covered guest ranges and checks the sink contract.
struct Checking {
    limit: u64,
    covered: BTreeMap<u64, u64>, // start -> end
    bytes: u64,
}

impl Checking {
    fn cover(&mut self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = off.checked_add(len).expect("overflow");
        assert!(end <= self.limit, "write [{off}, {end}) beyond virtual size {}", self.limit);
        if let Some((&s, &e)) = self.covered.range(..end).next_back() {
            assert!(e <= off || s >= end, "[{off}, {end}) covered twice (overlaps [{s}, {e}))");
        }
        self.covered.insert(off, end);
        self.bytes += len;
        assert!(self.covered.len() < 1 << 22, "coverage map too large");
    }
}

impl Sink for Checking {
    fn capacity(&self) -> Option<u64> {
        None
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> importer::Result<()> {
        self.cover(offset, data.len() as u64);
        Ok(())
    }
    fn write_zeroes(&mut self, offset: u64, len: u64) -> importer::Result<()> {
        self.cover(offset, len);
        Ok(())
    }
    fn finish(&mut self, len: u64) -> importer::Result<SinkReport> {
        Ok(SinkReport { size: len, bytes_written: 0, preallocated: false })
    }
    fn abort(&mut self) {}
    fn external_target(&mut self, _len: u64) -> importer::Result<(PathBuf, bool)> {
        unreachable!("not used by qcow2")
    }
    fn note_external_write(&mut self, _bytes: u64) {}
}

fn run(data: &[u8], random: bool) {
    let size = Some(data.len() as u64);
    let Ok(h) = Header::parse(data, if random { size } else { None }) else { return };
    let vs = h.virtual_size;
    if vs > 256 << 20 {
        return; // bigger images only cost time: the work per guest byte is the same
    }
    let mut sink = Checking { limit: vs, covered: BTreeMap::new(), bytes: 0 };
    let refetch = if random { Refetch::Random(Arc::new(MemoryAccess(data.to_vec()))) } else { Refetch::Spill(Spill::memory()) };
    let mut stream = data;
    if qcow2::convert(h, &mut stream, if random { size } else { None }, refetch, &mut sink, false).is_ok() {
        assert_eq!(sink.bytes, vs, "success must cover the whole virtual size");
    }
}

fuzz_target!(|data: &[u8]| {
    run(data, true);
    run(data, false);
});
