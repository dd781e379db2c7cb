//! Fuzzes the qcow2 header parser and the single-pass converter with arbitrary image bytes, through both
//! out-of-order fallbacks (positional reads and the bounded spill store).
//!
//! Invariants checked beyond "no panic": the converter only writes inside `[0, virtual size)`, never covers
//! a guest byte twice, and when it succeeds it has covered every guest byte exactly once; the resume frontiers it
//! offers lie inside the image, and a conversion resumed from one of them (or from any offset) stays inside the
//! virtual size too.
#![no_main]

use std::sync::Arc;

use importer::format::qcow2::{self, Header, Refetch, spill::Spill};
use importer::source::MemoryAccess;
use libfuzzer_sys::fuzz_target;

#[path = "common/checking.rs"]
mod checking;
use checking::Checking;

fn run(data: &[u8], random: bool) {
    let size = Some(data.len() as u64);
    let Ok(h) = Header::parse(data, if random { size } else { None }) else { return };
    let vs = h.virtual_size;
    if vs > 256 << 20 {
        return; // bigger images only cost time: the work per guest byte is the same
    }
    let mut sink = Checking::new(vs);
    let refetch = if random { Refetch::Random(Arc::new(MemoryAccess(data.to_vec()))) } else { Refetch::Spill(Spill::memory()) };
    let mut stream = data;
    if qcow2::convert(h.clone(), &mut stream, if random { size } else { None }, refetch, &mut sink, false).is_ok() {
        assert_eq!(sink.bytes, vs, "success must cover the whole virtual size");
    }
    assert!(sink.frontiers.iter().all(|&f| f <= data.len() as u64), "frontier beyond the image");
    if random {
        // Resume from the last frontier offered, or from an offset the input picks.
        let pick = data.get(..2).map_or(0, |b| u64::from(u16::from_le_bytes([b[0], b[1]])) * 512);
        let frontier = sink.frontiers.last().copied().unwrap_or(pick).min(data.len() as u64);
        let mut again = Checking::resumed(vs);
        let refetch = Refetch::Random(Arc::new(MemoryAccess(data.to_vec())));
        let mut rest = &data[frontier as usize..];
        let _ = qcow2::convert_from(h, &mut rest, size, refetch, &mut again, false, frontier);
    }
}

fuzz_target!(|data: &[u8]| {
    run(data, true);
    run(data, false);
});
