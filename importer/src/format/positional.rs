//! Helpers shared by the converters that read an image by positional reads ([`vhd`](super::vhd),
//! [`vhdx`](super::vhdx)): bounded reads that tell "beyond the end of the image" from I/O failures, copying a
//! run of image bytes into the sink without an intermediate buffer, coalescing zero runs, and a
//! [`RandomAccess`] over a spooled file.
//!
//! Contract: every read is checked against [`RandomAccess::size`] *before* it is issued, so a hostile offset
//! never reaches the source (no Range request for absurd offsets, no zero-filled read past the end taken for
//! data).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::error::untag;
use crate::sink::Sink;
use crate::source::RandomAccess;
use crate::{Error, Result};

/// A disk image format read natively by positional reads ([`vhd`](super::vhd), [`vhdx`](super::vhdx), hosted
/// sparse [`vmdk`](super::vmdk::sparse)), opened (its tables validated) before any byte is written.
pub trait Reader {
    /// The virtual size in bytes.
    fn virtual_size(&self) -> u64;

    /// Writes every guest byte of `[0, virtual size)` to `sink` once; returns the guest bytes copied from the
    /// image (the rest were zeroes).
    fn write_all(&self, image: &dyn RandomAccess, sink: &mut dyn Sink) -> Result<u64>;
}

/// Bytes copied per positional read (one Range request for HTTP).
pub const COPY_CHUNK: usize = 4 << 20;

/// Why a bounded read failed.
#[derive(Debug)]
pub enum ReadError {
    /// `[offset, offset + len)` does not lie inside the image of `size` bytes.
    Beyond {
        /// Where the read starts.
        offset: u64,
        /// Bytes wanted.
        len: u64,
        /// The image size.
        size: u64,
    },
    /// The source failed.
    Io(Error),
}

/// Whether `[offset, offset + len)` lies inside an image of `size` bytes.
pub fn inside(offset: u64, len: u64, size: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= size)
}

/// Fills `buf` from `offset`, which must lie inside the image together with the whole of `buf`.
pub fn read_at(image: &dyn RandomAccess, offset: u64, buf: &mut [u8]) -> Result<(), ReadError> {
    let size = image.size();
    if !inside(offset, buf.len() as u64, size) {
        return Err(ReadError::Beyond { offset, len: buf.len() as u64, size });
    }
    image.read_at(offset, buf).map_err(|e| ReadError::Io(untag(e, offset)))?;
    Ok(())
}

/// Copies image bytes `[src, src + len)` (checked by the caller to lie inside the image) to guest offset
/// `guest` of the sink, reading straight into the sink's buffers in pieces of at most [`COPY_CHUNK`].
pub fn copy(image: &dyn RandomAccess, src: u64, len: u64, sink: &mut dyn Sink, guest: u64) -> Result<()> {
    let mut done = 0u64;
    while done < len {
        let max = usize::try_from(len - done).map_or(COPY_CHUNK, |n| n.min(COPY_CHUNK));
        let at = src + done;
        let n = sink.write_with(guest + done, max, &mut |buf: &mut [u8]| {
            image.read_at(at, buf).map_err(|e| untag(e, at))?;
            Ok(buf.len())
        })?;
        if n == 0 {
            return Err(Error::SourceRead { offset: at, source: io::Error::other("the sink accepted no bytes") });
        }
        done += n as u64;
    }
    Ok(())
}

/// Coalesces adjacent zero ranges into one [`Sink::write_zeroes`] call.
#[derive(Debug, Default)]
pub struct ZeroRun(Option<(u64, u64)>);

impl ZeroRun {
    /// Notes `[offset, offset + len)` as zeroes; writes the pending run first when this one does not follow it.
    pub fn add(&mut self, sink: &mut dyn Sink, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        match &mut self.0 {
            Some((start, l)) if *start + *l == offset => *l += len,
            _ => {
                self.flush(sink)?;
                self.0 = Some((offset, len));
            }
        }
        Ok(())
    }

    /// Writes the pending run.
    pub fn flush(&mut self, sink: &mut dyn Sink) -> Result<()> {
        if let Some((start, len)) = self.0.take() {
            sink.write_zeroes(start, len)?;
        }
        Ok(())
    }
}

/// Positional reads of a local file (the spooled copy of a source without positional reads of its own).
#[derive(Debug)]
pub struct FileAccess {
    file: File,
    size: u64,
}

impl FileAccess {
    /// Reads `file`, whose size is taken now.
    pub fn new(file: File) -> io::Result<FileAccess> {
        let size = file.metadata()?.len();
        Ok(FileAccess { file, size })
    }
}

impl RandomAccess for FileAccess {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            match self.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        buf[got..].fill(0);
        Ok(got)
    }
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as VHDX checksums its headers, region tables and log
/// entries. Table-driven, one byte at a time: it only ever runs over metadata.
pub fn crc32c(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut crc = !0u32;
    for &b in data {
        crc = TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;
    use crate::source::MemoryAccess;

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn bounded_reads() {
        let img = MemoryAccess((0..100u8).collect());
        let mut buf = [0u8; 10];
        read_at(&img, 90, &mut buf).unwrap();
        assert_eq!(buf[0], 90);
        assert!(matches!(read_at(&img, 91, &mut buf), Err(ReadError::Beyond { offset: 91, len: 10, size: 100 })));
        assert!(matches!(read_at(&img, u64::MAX - 3, &mut buf), Err(ReadError::Beyond { .. })));
        assert!(inside(0, 0, 0) && !inside(1, u64::MAX, u64::MAX));
    }
}
