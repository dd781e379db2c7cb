//! Local file source.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::{OpenedSource, RandomAccess};
use crate::{Error, Result};

/// Reads at least this large are split in two halves read at the same time on the thread pool.
const PARALLEL_READ_MIN: usize = 512 << 10;

/// The file as a sequential stream. Copying from the page cache is most of a local import's CPU time and
/// one core copies at about half the speed two do, so large reads are split into two positional reads run
/// concurrently (`rayon::join`); small reads (decompressors' buffers) are plain positional reads.
struct FileStream {
    file: File,
    pos: u64,
}

/// Fills `buf` from `offset` until it is full or the file ends; returns the bytes read.
pub(crate) fn read_full_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0usize;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

impl io::Read for FileStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = if buf.len() >= PARALLEL_READ_MIN {
            // Split on a page boundary so each half copies whole pages.
            let half = (buf.len() / 2) & !4095;
            let (a, b) = buf.split_at_mut(half);
            let (pos, file) = (self.pos, &self.file);
            let (ra, rb) = rayon::join(|| read_full_at(file, a, pos), || read_full_at(file, b, pos + half as u64));
            let na = ra?;
            if na < half {
                na // the file ended in the first half (it may have shrunk: what the second half saw is ignored)
            } else {
                na + rb?
            }
        } else {
            loop {
                match self.file.read_at(buf, self.pos) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    r => break r?,
                }
            }
        };
        self.pos += n as u64;
        Ok(n)
    }
}

struct FileAccess {
    file: File,
    size: u64,
}

impl RandomAccess for FileAccess {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let got = read_full_at(&self.file, buf, offset)?;
        buf[got..].fill(0);
        Ok(got)
    }
}

/// Opens a local file (a regular file or a block device).
pub fn open(path: &Path) -> Result<OpenedSource> {
    let err = |source| Error::OpenSource { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(err)?;
    let meta = file.metadata().map_err(err)?;
    if meta.is_dir() {
        return Err(err(io::Error::new(io::ErrorKind::IsADirectory, "is a directory")));
    }
    let size = {
        use std::io::{Seek, SeekFrom};
        let mut f = &file;
        f.seek(SeekFrom::End(0)).map_err(err)?
    };
    let access = FileAccess { file: file.try_clone().map_err(err)?, size };
    Ok(OpenedSource {
        stream: Box::new(FileStream { file, pos: 0 }),
        size: Some(size),
        random_access: Some(Arc::new(access)),
        local_path: Some(path.to_path_buf()),
        image_env: Vec::new(),
        validator: None,
    })
}
