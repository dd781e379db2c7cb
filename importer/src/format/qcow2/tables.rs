//! L1/L2 entry decoding (standard and extended L2), with every reserved bit and offset checked.

use super::Qcow2Error;
use super::header::Header;

const L1_OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const L1_RESERVED: u64 = 0x7f00_0000_0000_01ff;
const L2_OFFSET_MASK: u64 = 0x00ff_ffff_ffff_fe00;
const L2_COMPRESSED: u64 = 1 << 62;
const L2_ZERO: u64 = 1;
const L2_STD_RESERVED: u64 = 0x3f00_0000_0000_01fe;

/// Decodes an L1 entry into the L2 table offset (`None`: unallocated, the whole range reads as zeroes).
pub fn l1_entry(h: &Header, raw: u64) -> Result<Option<u64>, Qcow2Error> {
    if raw & L1_RESERVED != 0 {
        return Err(Qcow2Error::ReservedBits { what: "L1 entry", value: raw });
    }
    let off = raw & L1_OFFSET_MASK;
    if off == 0 {
        return Ok(None);
    }
    if !off.is_multiple_of(h.cluster_size()) {
        return Err(Qcow2Error::Unaligned { what: "L2 table", offset: off });
    }
    if off < h.cluster_size() {
        return Err(Qcow2Error::IntoHeader { what: "L2 table", offset: off });
    }
    Ok(Some(off))
}

/// What one guest range (a cluster, or a subcluster with extended L2) maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Reads as zeroes (unallocated without backing, or the zero flag).
    Zero,
    /// Uncompressed data at this host offset.
    Data(u64),
    /// Compressed data: host byte offset and the number of bytes to read (it may run past the end of file).
    Compressed {
        /// Host byte offset.
        offset: u64,
        /// Bytes covered by the entry's sectors.
        len: u64,
    },
}

/// One decoded L2 entry: either the whole cluster has one mapping, or (extended L2) each of 32 subclusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum L2Entry {
    /// The whole cluster.
    Cluster(Mapping),
    /// 32 subclusters, each [`Mapping::Zero`] or [`Mapping::Data`].
    Subclusters(Box<[Mapping; 32]>),
}

/// Decodes L2 entry `raw` (and `bitmap` for extended L2).
pub fn l2_entry(h: &Header, raw: u64, bitmap: u64) -> Result<L2Entry, Qcow2Error> {
    let cs = h.cluster_size();
    if raw & L2_COMPRESSED != 0 {
        // Compressed: bits 0..x-1 offset, x..61 additional sectors, x = 62 - (cluster_bits - 8).
        let x = 62 - (h.cluster_bits - 8);
        let offset = raw & ((1u64 << x) - 1);
        let nb_sectors = ((raw >> x) & ((1u64 << (62 - x)) - 1)) + 1;
        if h.extended_l2 && bitmap != 0 {
            return Err(Qcow2Error::ReservedBits { what: "compressed extended L2 bitmap", value: bitmap });
        }
        if offset < cs {
            return Err(Qcow2Error::IntoHeader { what: "compressed cluster", offset });
        }
        let len = nb_sectors * 512 - (offset & 511);
        return Ok(L2Entry::Cluster(Mapping::Compressed { offset, len }));
    }
    if raw & L2_STD_RESERVED != 0 {
        return Err(Qcow2Error::ReservedBits { what: "L2 entry", value: raw });
    }
    let off = raw & L2_OFFSET_MASK;
    if off != 0 && !off.is_multiple_of(cs) {
        return Err(Qcow2Error::Unaligned { what: "data cluster", offset: off });
    }
    if off != 0 && off < cs {
        return Err(Qcow2Error::IntoHeader { what: "data cluster", offset: off });
    }
    if !h.extended_l2 {
        let zero = raw & L2_ZERO != 0;
        return Ok(L2Entry::Cluster(if zero || off == 0 { Mapping::Zero } else { Mapping::Data(off) }));
    }
    if raw & L2_ZERO != 0 {
        return Err(Qcow2Error::ReservedBits { what: "extended L2 entry", value: raw });
    }
    let alloc = bitmap as u32;
    let zero = (bitmap >> 32) as u32;
    if alloc & zero != 0 {
        return Err(Qcow2Error::ReservedBits { what: "subcluster bitmap", value: bitmap });
    }
    if alloc != 0 && off == 0 {
        return Err(Qcow2Error::ReservedBits { what: "subcluster bitmap without a host cluster", value: bitmap });
    }
    if alloc == u32::MAX {
        return Ok(L2Entry::Cluster(Mapping::Data(off)));
    }
    if alloc == 0 {
        return Ok(L2Entry::Cluster(Mapping::Zero));
    }
    let sc = cs / 32;
    let mut subs = [Mapping::Zero; 32];
    for (i, s) in subs.iter_mut().enumerate() {
        if alloc & (1 << i) != 0 {
            *s = Mapping::Data(off + i as u64 * sc);
        }
    }
    Ok(L2Entry::Subclusters(Box::new(subs)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::qcow2::header::tests::v3;

    fn hdr(ext: bool, bits: u32) -> Header {
        let mut h = v3();
        h[20..24].copy_from_slice(&bits.to_be_bytes());
        if ext {
            h[72..80].copy_from_slice(&16u64.to_be_bytes());
        }
        h[36..40].copy_from_slice(&(1u32 << 20).to_be_bytes());
        h[40..48].copy_from_slice(&(1u64 << bits).to_be_bytes());
        Header::parse(&h, None).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn standard_entries() {
        let h = hdr(false, 16);
        assert_eq!(l2_entry(&h, 0, 0).ok(), Some(L2Entry::Cluster(Mapping::Zero)));
        assert_eq!(l2_entry(&h, (1 << 63) | 0x30000, 0).ok(), Some(L2Entry::Cluster(Mapping::Data(0x30000))));
        assert_eq!(l2_entry(&h, 0x30000 | 1, 0).ok(), Some(L2Entry::Cluster(Mapping::Zero)));
        assert!(l2_entry(&h, 0x30200, 0).is_err()); // unaligned
        assert!(l2_entry(&h, 0x100, 0).is_err()); // reserved bits
        assert!(l2_entry(&h, 0x8000 & !0x1ff, 0).is_err()); // into header cluster
        // compressed: 64 KiB clusters → x = 54; offset 0x12345, 2 additional sectors
        let raw = (1u64 << 62) | (2u64 << 54) | 0x12345;
        assert_eq!(
            l2_entry(&h, raw, 0).ok(),
            Some(L2Entry::Cluster(Mapping::Compressed { offset: 0x12345, len: 3 * 512 - 0x145 }))
        );
        assert_eq!(l1_entry(&h, 0).ok(), Some(None));
        assert_eq!(l1_entry(&h, (1 << 63) | 0x20000).ok(), Some(Some(0x20000)));
        assert!(l1_entry(&h, 0x20001).is_err());
    }

    #[test]
    fn extended_entries() {
        let h = hdr(true, 16);
        assert_eq!(l2_entry(&h, 0x30000, u64::from(u32::MAX)).ok(), Some(L2Entry::Cluster(Mapping::Data(0x30000))));
        assert_eq!(l2_entry(&h, 0, u64::from(u32::MAX) << 32).ok(), Some(L2Entry::Cluster(Mapping::Zero)));
        match l2_entry(&h, 0x30000, 0b101) {
            Ok(L2Entry::Subclusters(s)) => {
                assert_eq!(s[0], Mapping::Data(0x30000));
                assert_eq!(s[1], Mapping::Zero);
                assert_eq!(s[2], Mapping::Data(0x30000 + 2 * 2048));
            }
            other => panic!("{other:?}"),
        }
        assert!(l2_entry(&h, 0x30000, 1 | (1 << 32)).is_err()); // alloc and zero
        assert!(l2_entry(&h, 0, 1).is_err()); // alloc without cluster
        assert!(l2_entry(&h, 0x30001, 0).is_err()); // zero flag reserved
    }
}
