//! Local file source.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use super::{OpenedSource, RandomAccess};
use crate::{Error, Result};

struct FileAccess {
    file: File,
    size: u64,
}

impl RandomAccess for FileAccess {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let mut got = 0usize;
        while got < buf.len() {
            let n = self.file.read_at(&mut buf[got..], offset + got as u64)?;
            if n == 0 {
                break;
            }
            got += n;
        }
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
        let s = f.seek(SeekFrom::End(0)).map_err(err)?;
        f.seek(SeekFrom::Start(0)).map_err(err)?;
        s
    };
    let access = FileAccess { file: file.try_clone().map_err(err)?, size };
    Ok(OpenedSource {
        stream: Box::new(file),
        size: Some(size),
        random_access: Some(Arc::new(access)),
        local_path: Some(path.to_path_buf()),
        image_env: Vec::new(),
    })
}
