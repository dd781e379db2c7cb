//! The block map of a single-stream `.xz` file, from its stream footer and index (the .xz file format 1.2,
//! §2.1.2 and §4): where each block begins in the compressed bytes and in the output. An interrupted import of a
//! multi-block file resumes at the last block that begins inside its durable output ([`crate::resume`]): blocks
//! decode independently, so only the 12-byte stream header is needed besides the block's bytes.
//!
//! Files written by `xz -T` (several threads; the default since xz 5.6) have a block every 3 × the dictionary
//! size (24 MiB at the default preset); single-threaded `xz` before 5.6 writes one block, which cannot restart.
//!
//! Parsed by hand: liblzma's index decoder is not in the `liblzma` crate's safe API, and the format is small.

/// Length of the stream header and of the stream footer.
pub const HEADER_LEN: u64 = 12;
/// Length of the stream footer.
pub const FOOTER_LEN: u64 = 12;
/// Largest index read (a record takes at least 2 bytes: about 8 million blocks).
pub const MAX_INDEX: u64 = 16 << 20;

/// A block: its offset in the file, its output offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// Offset of its block header in the file.
    pub compressed: u64,
    /// Offset of its first output byte.
    pub uncompressed: u64,
    /// Its output length.
    pub output_len: u64,
}

/// The blocks of a file, contiguous from the stream header to the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// The blocks in order.
    pub blocks: Vec<Block>,
    /// Where the index begins (after the last block).
    pub offset: u64,
    /// The whole output's length.
    pub output_len: u64,
}

/// Why a file's block map cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XzIndexError {
    /// The footer's magic or CRC-32 is wrong.
    #[error("the xz stream footer is damaged")]
    Footer,
    /// The index is larger than [`MAX_INDEX`] or than the file.
    #[error("the xz index of {0} bytes does not fit")]
    IndexSize(u64),
    /// The index does not parse or its CRC-32 is wrong.
    #[error("the xz index is damaged: {0}")]
    Index(&'static str),
    /// The blocks do not fill the file from the stream header to the index (several streams, padding).
    #[error("the xz file is not one stream whose blocks end at its index")]
    NotOneStream,
}

impl Index {
    /// The last block that begins at or before output offset `output`.
    pub fn block_at(&self, output: u64) -> Option<Block> {
        self.blocks.iter().rev().find(|b| b.uncompressed <= output).copied()
    }
}

/// The index's length, from the stream footer (the file's last 12 bytes).
pub fn backward_size(footer: &[u8]) -> Result<u64, XzIndexError> {
    if footer.len() != FOOTER_LEN as usize || &footer[10..] != b"YZ" {
        return Err(XzIndexError::Footer);
    }
    let crc = u32::from_le_bytes([footer[0], footer[1], footer[2], footer[3]]);
    if crc32fast::hash(&footer[4..10]) != crc {
        return Err(XzIndexError::Footer);
    }
    let stored = u32::from_le_bytes([footer[4], footer[5], footer[6], footer[7]]);
    Ok((u64::from(stored) + 1) * 4)
}

/// The block map from `index` (the bytes the footer's backward size names) of a file of `file_len` bytes.
pub fn parse(index: &[u8], file_len: u64) -> Result<Index, XzIndexError> {
    let len = index.len() as u64;
    if len > MAX_INDEX || len + HEADER_LEN + FOOTER_LEN > file_len {
        return Err(XzIndexError::IndexSize(len));
    }
    if len < 8 || index[0] != 0 {
        return Err(XzIndexError::Index("no index indicator"));
    }
    let (body, crc) = index.split_at(index.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err(XzIndexError::Index("CRC-32 mismatch"));
    }
    let mut pos = 1;
    let count = varint(body, &mut pos)?;
    if count > len / 2 {
        return Err(XzIndexError::Index("more records than bytes"));
    }
    let offset = file_len - FOOTER_LEN - len;
    let (mut compressed, mut uncompressed) = (HEADER_LEN, 0u64);
    let mut blocks = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let unpadded = varint(body, &mut pos)?;
        let output_len = varint(body, &mut pos)?;
        if unpadded < 5 {
            return Err(XzIndexError::Index("a block shorter than its header"));
        }
        blocks.push(Block { compressed, uncompressed, output_len });
        let padded = unpadded.checked_add(3).ok_or(XzIndexError::Index("block size"))? & !3;
        compressed = compressed.checked_add(padded).ok_or(XzIndexError::Index("block size"))?;
        uncompressed = uncompressed.checked_add(output_len).ok_or(XzIndexError::Index("output size"))?;
    }
    // Index padding: zeroes up to a multiple of four.
    if body[pos..].len() >= 4 || body[pos..].iter().any(|&b| b != 0) || body.len() % 4 != 0 {
        return Err(XzIndexError::Index("bad padding"));
    }
    if compressed != offset {
        return Err(XzIndexError::NotOneStream);
    }
    Ok(Index { blocks, offset, output_len: uncompressed })
}

/// A multibyte integer (7 bits a byte, little-endian, at most 9 bytes).
fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, XzIndexError> {
    let mut v = 0u64;
    for i in 0..9 {
        let &b = buf.get(*pos).ok_or(XzIndexError::Index("truncated"))?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            if b == 0 && i > 0 {
                return Err(XzIndexError::Index("a number not in its shortest form"));
            }
            return Ok(v);
        }
    }
    Err(XzIndexError::Index("a number longer than 9 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// `xz` with several threads and small blocks, as the command-line tool writes it.
    fn xz_blocks(data: &[u8], block: u64) -> Vec<u8> {
        let stream = liblzma::stream::MtStreamBuilder::new()
            .threads(2)
            .block_size(block)
            .preset(1)
            .encoder()
            .unwrap_or_else(|e| panic!("{e}"));
        let mut e = liblzma::write::XzEncoder::new_stream(Vec::new(), stream);
        e.write_all(data).unwrap_or_else(|e| panic!("{e}"));
        e.finish().unwrap_or_else(|e| panic!("{e}"))
    }

    fn index_of(file: &[u8]) -> Result<Index, XzIndexError> {
        let n = file.len();
        let back = backward_size(&file[n - 12..])? as usize;
        parse(&file[n - 12 - back..n - 12], n as u64)
    }

    #[test]
    fn the_blocks_of_a_multithreaded_xz_file_decode_from_their_offsets() -> Result<(), XzIndexError> {
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
        let file = xz_blocks(&data, 128 << 10);
        let index = index_of(&file)?;
        assert_eq!(index.blocks.len(), 8, "{index:?}");
        assert_eq!(index.output_len, data.len() as u64);
        for b in &index.blocks {
            // The stream header, then the file from the block on, decodes to the output from the block on.
            let mut synthetic = file[..HEADER_LEN as usize].to_vec();
            synthetic.extend_from_slice(&file[b.compressed as usize..index.offset as usize]);
            let mut d = liblzma::stream::Stream::new_stream_decoder(u64::MAX, 0).unwrap_or_else(|e| panic!("{e}"));
            let mut out = Vec::with_capacity(data.len());
            let _ = d.process_vec(&synthetic, &mut out, liblzma::stream::Action::Run);
            assert!(out == data[b.uncompressed as usize..], "from block at {b:?}: {} bytes", out.len());
        }
        assert_eq!(index.block_at(300_000).map(|b| b.uncompressed), Some(256 << 10));
        assert_eq!(index.block_at(0).map(|b| b.uncompressed), Some(0));
        Ok(())
    }

    #[test]
    fn damaged_or_foreign_layouts_are_refused() {
        let data = vec![7u8; 300_000];
        let file = xz_blocks(&data, 64 << 10);
        let n = file.len();
        let mut footer = file.clone();
        footer[n - 1] = b'Z';
        footer[n - 2] = b'Z';
        assert_eq!(index_of(&footer), Err(XzIndexError::Footer));
        let mut crc = file.clone();
        crc[n - 13] ^= 1; // the index's CRC-32
        assert_eq!(index_of(&crc), Err(XzIndexError::Index("CRC-32 mismatch")));
        let mut two = file.clone();
        two.extend_from_slice(&file);
        let index = index_of(&two);
        assert_eq!(index, Err(XzIndexError::NotOneStream), "a second stream: the index covers only the last");
        assert_eq!(parse(&[0u8; 64], 40), Err(XzIndexError::IndexSize(64)));
        assert_eq!(varint(&[0x80, 0x00], &mut 0), Err(XzIndexError::Index("a number not in its shortest form")));
        assert_eq!(varint(&[0xff; 10], &mut 0), Err(XzIndexError::Index("a number longer than 9 bytes")));
        assert_eq!(varint(&[0xac, 0x02], &mut 0), Ok(300));
    }
}
