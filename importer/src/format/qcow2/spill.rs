//! Storage for stream bytes that arrived before the metadata that says what they are: memory up to a
//! bound, then (when a scratch directory is given) an anonymous file there, deleted when dropped.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Bytes kept in memory before the import needs scratch space.
pub const MEMORY_LIMIT: u64 = 16 << 20;

enum Store {
    Memory(BTreeMap<u64, Vec<u8>>),
    File { file: File, dir: PathBuf, index: BTreeMap<u64, (u64, u64)>, end: u64 },
}

/// A spill store keyed by host offset. Adjacent ranges are merged so later reads can span them.
pub struct Spill {
    store: Store,
    used: u64,
    overflow: Option<PathBuf>,
}

impl Spill {
    /// A store in memory, bounded by [`MEMORY_LIMIT`].
    pub fn memory() -> Self {
        Spill { store: Store::Memory(BTreeMap::new()), used: 0, overflow: None }
    }

    /// A store in memory up to [`MEMORY_LIMIT`], then in an anonymous temporary file in `dir`.
    pub fn with_overflow(dir: &Path) -> Self {
        Spill { store: Store::Memory(BTreeMap::new()), used: 0, overflow: Some(dir.to_path_buf()) }
    }

    /// Moves the in-memory contents to a file in the overflow directory.
    fn move_to_file(&mut self, dir: &Path) -> Result<()> {
        let file = tempfile::tempfile_in(dir).map_err(|source| Error::Scratch { path: dir.to_path_buf(), source })?;
        let old = std::mem::replace(
            &mut self.store,
            Store::File { file, dir: dir.to_path_buf(), index: BTreeMap::new(), end: 0 },
        );
        self.used = 0;
        if let Store::Memory(map) = old {
            for (host, data) in map {
                self.put(host, &data)?;
            }
        }
        Ok(())
    }

    /// Bytes stored.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Stores `data` found at host offset `host`.
    pub fn put(&mut self, host: u64, data: &[u8]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let len = data.len() as u64;
        match &mut self.store {
            Store::Memory(_) if self.used + len > MEMORY_LIMIT && self.overflow.is_some() => {
                let dir = self.overflow.clone().unwrap_or_default();
                self.move_to_file(&dir)?;
                return self.put(host, data);
            }
            Store::Memory(map) => {
                if self.used + len > MEMORY_LIMIT {
                    return Err(Error::ScratchRequired(format!(
                        "the image stores more than {} MiB of data before the metadata that maps it; pass --scratch DIR or use a source with Range support",
                        MEMORY_LIMIT >> 20
                    )));
                }
                if let Some((&start, prev)) = map.range_mut(..host).next_back()
                    && start + prev.len() as u64 == host
                {
                    prev.extend_from_slice(data);
                } else {
                    map.insert(host, data.to_vec());
                }
            }
            Store::File { file, dir, index, end } => {
                file.write_all_at(data, *end).map_err(|source| Error::Scratch { path: dir.clone(), source })?;
                if let Some((&start, prev)) = index.range_mut(..host).next_back()
                    && start + prev.1 == host
                    && prev.0 + prev.1 == *end
                {
                    prev.1 += len;
                } else {
                    index.insert(host, (*end, len));
                }
                *end += len;
            }
        }
        self.used += len;
        Ok(())
    }

    /// Reads `buf.len()` bytes at host offset `host`; `Ok(false)` if they were not all stored.
    pub fn get(&self, host: u64, buf: &mut [u8]) -> io::Result<bool> {
        let want_end = host + buf.len() as u64;
        match &self.store {
            Store::Memory(map) => {
                let Some((&start, data)) = map.range(..=host).next_back() else {
                    return Ok(false);
                };
                if start + data.len() as u64 >= want_end {
                    let off = (host - start) as usize;
                    buf.copy_from_slice(&data[off..off + buf.len()]);
                    return Ok(true);
                }
                Ok(false)
            }
            Store::File { file, index, .. } => {
                let Some((&start, &(foff, len))) = index.range(..=host).next_back() else {
                    return Ok(false);
                };
                if start + len >= want_end {
                    file.read_exact_at(buf, foff + (host - start))?;
                    return Ok(true);
                }
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(mut s: Spill) {
        s.put(100, b"abc").unwrap_or_else(|e| panic!("{e}"));
        s.put(103, b"def").unwrap_or_else(|e| panic!("{e}"));
        s.put(200, b"xyz").unwrap_or_else(|e| panic!("{e}"));
        let mut b = [0u8; 4];
        assert!(s.get(101, &mut b).unwrap_or(false));
        assert_eq!(&b, b"bcde");
        assert!(!s.get(104, &mut b).unwrap_or(true));
        assert!(!s.get(50, &mut b).unwrap_or(true));
        let mut b = [0u8; 2];
        assert!(s.get(201, &mut b).unwrap_or(false));
        assert_eq!(&b, b"yz");
        assert_eq!(s.used(), 9);
    }

    #[test]
    fn memory_and_file() {
        check(Spill::memory());
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        check(Spill::with_overflow(d.path()));
    }

    #[test]
    fn overflow_moves_to_a_file() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let mut s = Spill::with_overflow(d.path());
        let big = vec![7u8; (MEMORY_LIMIT / 2) as usize];
        s.put(0, &big).unwrap_or_else(|e| panic!("{e}"));
        s.put(MEMORY_LIMIT, &big).unwrap_or_else(|e| panic!("{e}"));
        s.put(4 * MEMORY_LIMIT, &big).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(s.store, Store::File { .. }));
        let mut b = [0u8; 3];
        assert!(s.get(MEMORY_LIMIT + 5, &mut b).unwrap_or(false));
        assert_eq!(b, [7, 7, 7]);
        assert!(s.get(4 * MEMORY_LIMIT, &mut b).unwrap_or(false));
    }

    #[test]
    fn memory_limit() {
        let mut s = Spill::memory();
        let big = vec![1u8; (MEMORY_LIMIT / 2) as usize];
        s.put(0, &big).unwrap_or_else(|e| panic!("{e}"));
        s.put(MEMORY_LIMIT, &big).unwrap_or_else(|e| panic!("{e}"));
        let e = s.put(4 * MEMORY_LIMIT, b"x").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("--scratch"), "{e}");
    }
}
