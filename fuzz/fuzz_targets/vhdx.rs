//! Fuzzes the VHDX reader with arbitrary image bytes, read by positional reads. A VHDX's metadata spans
//! megabytes (the header section alone is 1 MiB), so a compact input is laid out as a sparse file: its first
//! 256 KiB at offset 0 (identifier, headers, region tables), the next three 64 KiB pieces at 1, 2 and 3 MiB
//! (where qemu-img puts the log, the BAT and the metadata region), the rest at 4 MiB (block data), followed by
//! 1 MiB of zeroes (a block's tail); everything else reads as zeroes. The input is also read as a plain file.
//!
//! Invariants checked beyond "no panic": the converter only writes inside `[0, virtual size)`, never covers a
//! guest byte twice, and when it succeeds it has covered every guest byte exactly once.
#![no_main]

use importer::format::vhdx::Vhdx;
use importer::source::RandomAccess;
use libfuzzer_sys::fuzz_target;

#[path = "common/checking.rs"]
mod checking;

#[path = "common/reader.rs"]
mod reader;

#[path = "common/sparse_file.rs"]
mod sparse_file;
use sparse_file::SparseFile;

const KIB: usize = 1 << 10;
const MIB: u64 = 1 << 20;

fn run(image: &dyn RandomAccess) {
    reader::check(image, |i| Vhdx::open(i).ok().map(|r| Box::new(r) as _));
}

/// The sparse layout of the module documentation.
fn laid_out(data: &[u8]) -> SparseFile {
    let cuts =
        [(0, 256 * KIB, 0), (256 * KIB, 64 * KIB, MIB), (320 * KIB, 64 * KIB, 2 * MIB), (384 * KIB, 64 * KIB, 3 * MIB)];
    let mut pieces = Vec::new();
    for (from, len, at) in cuts {
        if let Some(b) = data.get(from..data.len().min(from + len)) {
            pieces.push((at, b.to_vec()));
        }
    }
    let rest = data.get(448 * KIB..).unwrap_or_default();
    pieces.push((4 * MIB, rest.to_vec()));
    SparseFile::new(pieces, 5 * MIB + rest.len() as u64)
}

fuzz_target!(|data: &[u8]| {
    run(&laid_out(data));
    run(&SparseFile::new(vec![(0, data.to_vec())], data.len() as u64));
});
