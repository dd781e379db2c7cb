//! Fuzzes the streamOptimized VMDK converter and the OVA reader with arbitrary bytes: every input is read as a
//! VMDK stream (when its header parses) and as an OVA (tar → OVF → the first disk's member, converted when it is
//! a streamOptimized VMDK).
//!
//! Invariants checked beyond "no panic": the converter only writes inside `[0, virtual size)`, never covers a
//! guest byte twice, and when it succeeds it has covered every guest byte exactly once.
#![no_main]

use std::collections::BTreeMap;
use std::io::Read;
use std::path::PathBuf;

use importer::format::{ova, vmdk};
use importer::sink::{Sink, SinkReport};
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
        unreachable!("not used by vmdk")
    }
    fn note_external_write(&mut self, _bytes: u64) {}
}

/// Converts a VMDK stream whose first bytes are `head` (the stream yields them again).
fn convert(head: &[u8], stream: &mut dyn Read) -> importer::Result<()> {
    let Ok(h) = vmdk::Header::parse(head) else { return Ok(()) };
    let vs = h.virtual_size();
    let mut sink = Checking { limit: vs, covered: BTreeMap::new(), bytes: 0 };
    if vmdk::convert(&h, stream, &mut sink).is_ok() {
        assert_eq!(sink.bytes, vs, "success must cover the whole virtual size");
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut stream = data;
    let _ = convert(data, &mut stream);
    let _ = ova::is_ova(data);
    let mut stream = data;
    let _ = ova::with_disk(&mut stream, None, |member, _| {
        let mut head = Vec::new();
        member.take(64 << 10).read_to_end(&mut head).map_err(|e| importer::error::untag(e, 0))?;
        let mut chained = std::io::Cursor::new(head.clone()).chain(member);
        convert(&head, &mut chained)
    });
});
