//! Cross-checks the grain tables of the header area against the grain markers of the stream.
//!
//! qemu-img writes its streamOptimized files with the grain directory and tables in the header area (before
//! the grains) and no end-of-stream marker: the file simply ends after the last grain. A stream cut at a grain
//! boundary would then look complete. So when the tables come first, they are read as the header area streams
//! past, reduced to a count and an order-independent keyed sum of their `(grain sector, grain index)` pairs, and
//! compared at the end with the same reduction of the markers seen: equal means every grain qemu-img would read
//! is the one converted, at the same place (nothing missing, nothing extra); the end of the stream is then a
//! valid end. Memory: the grain directory and an index over it, at most [`MAX_GD_ENTRIES`] entries each.
//!
//! The check is *armed* only when it can be complete: the directory lies in the header area and is at most
//! [`MAX_GD_ENTRIES`] entries, and every grain table lies after it, inside the header area, without overlaps.
//! Otherwise (VMware's layout: tables after the grains, the directory in a footer) the stream must end with an
//! end-of-stream marker.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::header::{Header, SECTOR};

/// Most grain directory entries read (8 MiB of directory: 64 TiB with 64 KiB grains).
pub const MAX_GD_ENTRIES: u64 = 2 << 20;

/// What the tables list, reduced; also used for the markers seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Grains.
    pub count: u64,
    /// Wrapping sum of the keyed hashes of `(sector, grain index)`.
    pub sum: u64,
}

/// The scan of the header area (see the module documentation).
pub struct GrainTables {
    key: RandomState,
    /// Byte range of the grain directory.
    gd: (u64, u64),
    gd_bytes: Vec<u8>,
    /// Directory entries (grain table sectors), once the directory has streamed past.
    entries: Vec<u32>,
    /// Indices into `entries` of present tables, by ascending sector.
    order: Vec<u32>,
    next: usize,
    gt_bytes: u64,
    gtes: u64,
    grains: u64,
    overhead_bytes: u64,
    armed: bool,
    listed: Tally,
    streamed: Tally,
}

impl GrainTables {
    /// Prepares the scan for `h`; disarmed from the start when the directory is not in the header area.
    pub fn new(h: &Header) -> GrainTables {
        let per_table = h.grain_sectors * u64::from(h.gtes_per_gt);
        let tables = h.capacity.div_ceil(per_table);
        let overhead_bytes = h.overhead * SECTOR;
        let start = h.gd_offset.saturating_mul(SECTOR);
        let end = start.saturating_add(tables * 4);
        let armed = h.gd_offset != 0 && tables <= MAX_GD_ENTRIES && end <= overhead_bytes;
        GrainTables {
            key: RandomState::new(),
            gd: (start, end),
            gd_bytes: Vec::new(),
            entries: Vec::new(),
            order: Vec::new(),
            next: 0,
            gt_bytes: u64::from(h.gtes_per_gt) * 4,
            gtes: u64::from(h.gtes_per_gt),
            grains: h.capacity.div_ceil(h.grain_sectors),
            overhead_bytes,
            armed,
            listed: Tally::default(),
            streamed: Tally::default(),
        }
    }

    /// Whether the tables are being checked (then the stream may end without an end-of-stream marker).
    pub fn armed(&self) -> bool {
        self.armed
    }

    /// Whether the scan needs the header area's bytes (else they may be skipped unread).
    pub fn wants_bytes(&self) -> bool {
        self.armed
    }

    fn hash(&self, sector: u64, grain: u64) -> u64 {
        self.key.hash_one((sector, grain))
    }

    /// Feeds header-area bytes `data` found at stream offset `pos` (sector-aligned; calls in ascending order).
    pub fn feed(&mut self, pos: u64, data: &[u8]) {
        if !self.armed {
            return;
        }
        let end = pos + data.len() as u64;
        let (gs, ge) = self.gd;
        if self.entries.is_empty() && gs < end && ge > pos {
            let from = gs.max(pos);
            let to = ge.min(end);
            self.gd_bytes.extend_from_slice(&data[(from - pos) as usize..(to - pos) as usize]);
            if to == ge {
                self.index_directory();
            }
        }
        if !self.armed || self.entries.is_empty() {
            return;
        }
        while let Some(&i) = self.order.get(self.next) {
            let start = u64::from(self.entries[i as usize]) * SECTOR;
            let stop = start + self.gt_bytes;
            if start >= end {
                break;
            }
            if stop > pos {
                let from = start.max(pos);
                let to = stop.min(end);
                for at in (from..to).step_by(4) {
                    let o = (at - pos) as usize;
                    let v = data.get(o..o + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes);
                    let grain = u64::from(i) * self.gtes + (at - start) / 4;
                    if v > 1 && grain < self.grains {
                        self.listed.count += 1;
                        self.listed.sum = self.listed.sum.wrapping_add(self.hash(u64::from(v), grain));
                    }
                }
            }
            if stop <= end {
                self.next += 1;
            } else {
                break;
            }
        }
    }

    /// The directory has streamed past: index the tables, disarming when one lies before the directory's end,
    /// beyond the header area, or overlaps another.
    fn index_directory(&mut self) {
        self.entries = self.gd_bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        self.gd_bytes = Vec::new();
        let mut order: Vec<u32> = (0..self.entries.len() as u32).filter(|&i| self.entries[i as usize] != 0).collect();
        order.sort_unstable_by_key(|&i| self.entries[i as usize]);
        let mut last_end = self.gd.1;
        for &i in &order {
            let start = u64::from(self.entries[i as usize]) * SECTOR;
            if start < last_end || start + self.gt_bytes > self.overhead_bytes {
                self.armed = false;
                return;
            }
            last_end = start + self.gt_bytes;
        }
        if self.entries.is_empty() {
            // A directory of zero entries cannot happen (the capacity is at least one sector); keep the
            // "indexed" state distinguishable anyway.
            self.armed = false;
        }
        self.order = order;
    }

    /// The header area has been read: a directory that never completed disarms the check.
    pub fn header_done(&mut self) {
        if self.entries.is_empty() {
            self.armed = false;
        }
    }

    /// Records a grain marker at `sector` for grain index `grain`.
    pub fn streamed(&mut self, sector: u64, grain: u64) {
        if self.armed {
            self.streamed.count += 1;
            self.streamed.sum = self.streamed.sum.wrapping_add(self.hash(sector, grain));
        }
    }

    /// At the end of the grains: `Ok` when disarmed or when the markers match the tables, else (listed,
    /// streamed) grain counts.
    pub fn check(&self) -> Result<(), (u64, u64)> {
        if !self.armed || self.listed == self.streamed { Ok(()) } else { Err((self.listed.count, self.streamed.count)) }
    }
}
