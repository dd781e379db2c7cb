//! The sink both converter targets check their output with (included by `#[path]`: fuzz targets are separate
//! binaries).

use std::collections::BTreeMap;
use std::path::PathBuf;

use importer::sink::{Sink, SinkReport};

/// Records covered guest ranges and checks the sink contract: writes only inside `[0, limit)`, none twice (a
/// resumed conversion may write a range again). It wants a resume checkpoint at every chance and keeps the
/// frontiers offered.
pub struct Checking {
    limit: u64,
    covered: BTreeMap<u64, u64>, // start -> end
    /// Guest bytes covered so far.
    pub bytes: u64,
    resumed: bool,
    /// Frontiers offered through `Sink::checkpoint`.
    pub frontiers: Vec<u64>,
}

impl Checking {
    /// A sink for a guest of `limit` bytes.
    pub fn new(limit: u64) -> Checking {
        Checking { limit, covered: BTreeMap::new(), bytes: 0, resumed: false, frontiers: Vec::new() }
    }

    /// A sink for a resumed conversion: only the bounds are checked.
    #[allow(dead_code)] // not every target resumes
    pub fn resumed(limit: u64) -> Checking {
        Checking { resumed: true, ..Checking::new(limit) }
    }

    fn cover(&mut self, off: u64, len: u64) {
        if len == 0 {
            return;
        }
        let end = off.checked_add(len).expect("overflow");
        assert!(end <= self.limit, "write [{off}, {end}) beyond virtual size {}", self.limit);
        if self.resumed {
            return;
        }
        if let Some((&s, &e)) = self.covered.range(..end).next_back() {
            assert!(e <= off || s >= end, "[{off}, {end}) covered twice (overlaps [{s}, {e}))");
        }
        self.covered.insert(off, end);
        self.bytes += len;
        assert!(self.covered.len() < 1 << 22, "coverage map too large");
    }
}

impl Sink for Checking {
    fn capacity(&self) -> Option<u64> {
        None
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> importer::Result<()> {
        self.cover(offset, data.len() as u64);
        Ok(())
    }
    fn write_zeroes(&mut self, offset: u64, len: u64) -> importer::Result<()> {
        self.cover(offset, len);
        Ok(())
    }
    fn checkpoint_due(&self) -> bool {
        true
    }
    fn checkpoint(&mut self, frontier: u64) -> importer::Result<()> {
        self.frontiers.push(frontier);
        Ok(())
    }
    fn finish(&mut self, len: u64) -> importer::Result<SinkReport> {
        Ok(SinkReport { size: len, bytes_written: 0, preallocated: false })
    }
    fn abort(&mut self) {}
    fn external_target(&mut self, _len: u64) -> importer::Result<(PathBuf, bool)> {
        unreachable!("not used by the converters")
    }
    fn note_external_write(&mut self, _bytes: u64) {}
}
