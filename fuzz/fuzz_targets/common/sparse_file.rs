//! A sparse file in memory for the targets that read images by positional reads (included by `#[path]`): pieces
//! of bytes at offsets, zeroes elsewhere, of a given size.

use std::io;

use importer::source::RandomAccess;

/// Pieces `(offset, bytes)` over zeroes, `size` bytes long.
pub struct SparseFile {
    pieces: Vec<(u64, Vec<u8>)>,
    size: u64,
}

impl SparseFile {
    /// A file of `size` bytes holding `pieces` (later pieces win where they overlap).
    pub fn new(pieces: Vec<(u64, Vec<u8>)>, size: u64) -> SparseFile {
        SparseFile { pieces, size }
    }
}

impl RandomAccess for SparseFile {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        buf.fill(0);
        let end = offset.saturating_add(buf.len() as u64);
        for (at, bytes) in &self.pieces {
            let (s, e) = (offset.max(*at), end.min(at + bytes.len() as u64));
            if s < e {
                buf[(s - offset) as usize..(e - offset) as usize]
                    .copy_from_slice(&bytes[(s - at) as usize..(e - at) as usize]);
            }
        }
        Ok(self.size.saturating_sub(offset).min(buf.len() as u64) as usize)
    }
}
