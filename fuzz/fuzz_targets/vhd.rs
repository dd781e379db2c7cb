//! Fuzzes the VHD (vpc) reader with arbitrary image bytes, read by positional reads: the input as the whole file,
//! and the input followed by 4 MiB of zeroes (so that blocks of a short input can lie inside the file).
//!
//! Invariants checked beyond "no panic": the converter only writes inside `[0, virtual size)`, never covers a
//! guest byte twice, and when it succeeds it has covered every guest byte exactly once.
#![no_main]

use importer::format::vhd::Vhd;
use importer::source::RandomAccess;
use libfuzzer_sys::fuzz_target;

#[path = "common/checking.rs"]
mod checking;

#[path = "common/reader.rs"]
mod reader;

#[path = "common/sparse_file.rs"]
mod sparse_file;
use sparse_file::SparseFile;

fn run(image: &dyn RandomAccess) {
    reader::check(image, |i| Vhd::open(i).ok().map(|r| Box::new(r) as _));
}

fuzz_target!(|data: &[u8]| {
    run(&SparseFile::new(vec![(0, data.to_vec())], data.len() as u64));
    run(&SparseFile::new(vec![(0, data.to_vec())], data.len() as u64 + (4 << 20)));
});
