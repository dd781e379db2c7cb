//! Fuzzes the xz block map ([`importer::decompress::xz_index`]): the input is the length of the file's blocks
//! (32 bits, little-endian), its stream footer (12 bytes) and its index; the file is the stream header, the
//! blocks, the index and the footer.
//!
//! Invariants checked beyond "no panic": a parsed map's blocks begin right after the stream header, follow each
//! other in both the file and the output, and end where the index begins, inside the file.
#![no_main]

use importer::decompress::xz_index::{self, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let (blocks, rest) = data.split_at(4);
    let blocks = u64::from(u32::from_le_bytes([blocks[0], blocks[1], blocks[2], blocks[3]]));
    let (footer, index) = rest.split_at(12);
    let file_len = HEADER_LEN + blocks + index.len() as u64 + 12;
    let _ = xz_index::backward_size(footer);
    let Ok(index) = xz_index::parse(index, file_len) else { return };
    let mut next = (HEADER_LEN, 0u64);
    for b in &index.blocks {
        assert_eq!((b.compressed, b.uncompressed), next, "{index:?}");
        next.1 += b.output_len;
        next.0 = index.blocks.iter().map(|x| x.compressed).find(|&c| c > b.compressed).unwrap_or(index.offset);
    }
    assert_eq!(next.1, index.output_len);
    assert!(index.offset < file_len, "{index:?}");
    for probe in [0, index.output_len / 2, index.output_len] {
        if let Some(b) = index.block_at(probe) {
            assert!(b.uncompressed <= probe);
        }
    }
});
