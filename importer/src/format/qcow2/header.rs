//! qcow2 header parsing and validation. Every field is bounds-checked against the limits below and, when
//! known, the image's size; features we refuse (backing files, external data files, encryption, unknown
//! incompatible bits) are reported by [`Header::refusal`] so `info` can still describe such images.

use super::Qcow2Error;

/// Smallest and largest cluster size qemu supports (512 B .. 2 MiB).
pub const MIN_CLUSTER_BITS: u32 = 9;
/// See [`MIN_CLUSTER_BITS`].
pub const MAX_CLUSTER_BITS: u32 = 21;
/// Largest L1 table qemu accepts (32 MiB).
pub const MAX_L1_BYTES: u64 = 32 << 20;
/// Largest virtual size we accept (qemu's own limit for qcow2 is 2^61 - 1; 1 EiB keeps all arithmetic
/// below comfortably inside u64).
pub const MAX_VIRTUAL_SIZE: u64 = 1 << 60;
/// Largest refcount table qemu accepts (8 MiB).
pub const MAX_REFTABLE_BYTES: u64 = 8 << 20;

const INCOMPAT_DIRTY: u64 = 1 << 0;
const INCOMPAT_CORRUPT: u64 = 1 << 1;
const INCOMPAT_DATA_FILE: u64 = 1 << 2;
const INCOMPAT_COMPRESSION: u64 = 1 << 3;
const INCOMPAT_EXTL2: u64 = 1 << 4;
const INCOMPAT_KNOWN: u64 =
    INCOMPAT_DIRTY | INCOMPAT_CORRUPT | INCOMPAT_DATA_FILE | INCOMPAT_COMPRESSION | INCOMPAT_EXTL2;

const EXT_END: u32 = 0;
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;
const EXT_CRYPTO: u32 = 0x0537_be77;
const EXT_DATA_FILE: u32 = 0x4441_5441;

/// Compression used by compressed clusters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterCompression {
    /// Raw deflate (the default).
    Zlib,
    /// Zstandard (incompatible feature bit 3, compression type 1).
    Zstd,
}

/// Cluster encryption method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encryption {
    /// None.
    None,
    /// Legacy AES-CBC (method 1).
    Aes,
    /// LUKS (method 2).
    Luks,
}

/// A parsed, validated qcow2 header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// 2 or 3.
    pub version: u32,
    /// log2 of the cluster size.
    pub cluster_bits: u32,
    /// Guest-visible size in bytes.
    pub virtual_size: u64,
    /// Entries in the active L1 table.
    pub l1_size: u32,
    /// Host offset of the active L1 table.
    pub l1_table_offset: u64,
    /// Host offset of the refcount table.
    pub refcount_table_offset: u64,
    /// Clusters of the refcount table.
    pub refcount_table_clusters: u32,
    /// Internal snapshots.
    pub nb_snapshots: u32,
    /// Incompatible feature bits.
    pub incompatible_features: u64,
    /// Cluster compression.
    pub compression: ClusterCompression,
    /// Extended L2 entries (subclusters).
    pub extended_l2: bool,
    /// Encryption method.
    pub encryption: Encryption,
    /// Backing file name, when the image has one (possibly lossily decoded).
    pub backing_file: Option<String>,
    /// Whether the image stores its data in an external file.
    pub data_file: bool,
    /// External data file name, when the header extension names it.
    pub data_file_name: Option<String>,
}

fn be32(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4).and_then(|s| s.try_into().ok()).map(u32::from_be_bytes).unwrap_or(0)
}

fn be64(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8).and_then(|s| s.try_into().ok()).map(u64::from_be_bytes).unwrap_or(0)
}

impl Header {
    /// Bytes of the header needed by [`Header::parse`]: the whole first cluster when it is small, else the
    /// first 64 KiB (header extensions and the backing file name must lie inside it).
    pub const PARSE_LEN: usize = 64 << 10;

    /// Parses and validates the header from the image's first bytes (`head`, at least the first cluster or
    /// [`Header::PARSE_LEN`] bytes when the image is that long). `file_size` bounds every offset when known.
    pub fn parse(head: &[u8], file_size: Option<u64>) -> Result<Header, Qcow2Error> {
        if head.len() < 72 {
            return Err(Qcow2Error::Truncated { what: "header", offset: 0, needed: 72, available: head.len() as u64 });
        }
        if &head[0..4] != b"QFI\xfb" {
            return Err(Qcow2Error::BadMagic);
        }
        let version = be32(head, 4);
        if version != 2 && version != 3 {
            return Err(Qcow2Error::UnsupportedVersion(version));
        }
        let cluster_bits = be32(head, 20);
        if !(MIN_CLUSTER_BITS..=MAX_CLUSTER_BITS).contains(&cluster_bits) {
            return Err(Qcow2Error::BadClusterBits(cluster_bits));
        }
        let cs = 1u64 << cluster_bits;
        let virtual_size = be64(head, 24);
        if virtual_size > MAX_VIRTUAL_SIZE {
            return Err(Qcow2Error::VirtualSizeTooLarge { size: virtual_size, max: MAX_VIRTUAL_SIZE });
        }
        let encryption = match be32(head, 32) {
            0 => Encryption::None,
            1 => Encryption::Aes,
            2 => Encryption::Luks,
            m => return Err(Qcow2Error::UnknownEncryption(m)),
        };
        let l1_size = be32(head, 36);
        let l1_table_offset = be64(head, 40);
        let refcount_table_offset = be64(head, 48);
        let refcount_table_clusters = be32(head, 56);
        let nb_snapshots = be32(head, 60);

        let (incompatible_features, header_length, compression_type) = if version == 3 {
            if head.len() < 104 {
                return Err(Qcow2Error::Truncated {
                    what: "v3 header",
                    offset: 0,
                    needed: 104,
                    available: head.len() as u64,
                });
            }
            let hl = be32(head, 100);
            if hl < 104 || u64::from(hl) > cs || !hl.is_multiple_of(8) {
                return Err(Qcow2Error::BadHeaderLength(hl));
            }
            let ct = if hl > 104 { head.get(104).copied().unwrap_or(0) } else { 0 };
            (be64(head, 72), hl, ct)
        } else {
            (0, 72, 0)
        };
        let unknown = incompatible_features & !INCOMPAT_KNOWN;
        if unknown != 0 {
            return Err(Qcow2Error::UnknownIncompatibleFeatures(unknown));
        }
        if incompatible_features & INCOMPAT_CORRUPT != 0 {
            return Err(Qcow2Error::MarkedCorrupt);
        }
        let compression = match (incompatible_features & INCOMPAT_COMPRESSION != 0, compression_type) {
            (false, 0) => ClusterCompression::Zlib,
            (true, 1) => ClusterCompression::Zstd,
            (true, 0) => ClusterCompression::Zlib,
            (_, t) => return Err(Qcow2Error::UnknownCompressionType(t)),
        };
        let extended_l2 = incompatible_features & INCOMPAT_EXTL2 != 0;
        if extended_l2 && cluster_bits < 14 {
            // qemu requires subclusters of at least 512 bytes: 32 of them per cluster.
            return Err(Qcow2Error::BadClusterBits(cluster_bits));
        }

        // Backing file name (bounded; must lie inside the first cluster, as qemu requires).
        let backing_off = be64(head, 8);
        let backing_len = be32(head, 16);
        let backing_file = if backing_off != 0 {
            if backing_len > 1023 || backing_off.saturating_add(u64::from(backing_len)) > cs {
                return Err(Qcow2Error::BadBackingFileName);
            }
            let s = backing_off as usize;
            let name = head.get(s..s + backing_len as usize).map(|b| String::from_utf8_lossy(b).into_owned());
            Some(name.unwrap_or_else(|| String::from("<unreadable>")))
        } else {
            None
        };

        // Header extensions: only the ones that matter for refusal are interpreted.
        let mut data_file_name = None;
        let mut off = header_length as usize;
        let ext_limit = (cs as usize).min(head.len());
        let mut saw_crypto = false;
        while off + 8 <= ext_limit {
            let ty = be32(head, off);
            let len = be32(head, off + 4) as usize;
            let data = off + 8;
            if ty == EXT_END {
                break;
            }
            if data + len > ext_limit {
                return Err(Qcow2Error::BadHeaderExtension { offset: off as u64 });
            }
            match ty {
                EXT_DATA_FILE => data_file_name = Some(String::from_utf8_lossy(&head[data..data + len]).into_owned()),
                EXT_CRYPTO => saw_crypto = true,
                EXT_BACKING_FORMAT => {}
                _ => {}
            }
            off = data + len.div_ceil(8) * 8;
        }
        let _ = saw_crypto;

        let h = Header {
            version,
            cluster_bits,
            virtual_size,
            l1_size,
            l1_table_offset,
            refcount_table_offset,
            refcount_table_clusters,
            nb_snapshots,
            incompatible_features,
            compression,
            extended_l2,
            encryption,
            backing_file,
            data_file: incompatible_features & INCOMPAT_DATA_FILE != 0,
            data_file_name,
        };
        h.validate_tables(file_size)?;
        Ok(h)
    }

    fn validate_tables(&self, file_size: Option<u64>) -> Result<(), Qcow2Error> {
        let cs = self.cluster_size();
        let l1_bytes = u64::from(self.l1_size) * 8;
        if l1_bytes > MAX_L1_BYTES {
            return Err(Qcow2Error::L1TooLarge { entries: self.l1_size, max_bytes: MAX_L1_BYTES });
        }
        let needed = self.virtual_size.div_ceil(self.bytes_per_l2());
        if u64::from(self.l1_size) < needed {
            return Err(Qcow2Error::L1TooSmall { entries: self.l1_size, needed });
        }
        if self.l1_size > 0 {
            check_table("L1 table", self.l1_table_offset, l1_bytes, cs, file_size)?;
        }
        let rt_bytes = u64::from(self.refcount_table_clusters) * cs;
        if rt_bytes > MAX_REFTABLE_BYTES {
            return Err(Qcow2Error::RefcountTableTooLarge { clusters: self.refcount_table_clusters });
        }
        if rt_bytes > 0 {
            check_table("refcount table", self.refcount_table_offset, rt_bytes, cs, file_size)?;
        }
        Ok(())
    }

    /// Why this image must not be imported, if it must not.
    pub fn refusal(&self) -> Option<Qcow2Error> {
        if let Some(name) = &self.backing_file {
            return Some(Qcow2Error::BackingFile(name.clone()));
        }
        if self.data_file {
            return Some(Qcow2Error::ExternalDataFile(self.data_file_name.clone().unwrap_or_default()));
        }
        match self.encryption {
            Encryption::None => None,
            Encryption::Aes => Some(Qcow2Error::Encrypted("AES")),
            Encryption::Luks => Some(Qcow2Error::Encrypted("LUKS")),
        }
    }

    /// Cluster size in bytes.
    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Bytes per L2 entry (8, or 16 with extended L2).
    pub fn l2_entry_bytes(&self) -> u64 {
        if self.extended_l2 { 16 } else { 8 }
    }

    /// Entries per L2 table.
    pub fn l2_entries(&self) -> u64 {
        self.cluster_size() / self.l2_entry_bytes()
    }

    /// Guest bytes mapped by one L2 table.
    pub fn bytes_per_l2(&self) -> u64 {
        self.l2_entries() * self.cluster_size()
    }
}

/// Checks a cluster-aligned table placement: aligned, not in the header cluster, inside the image.
pub fn check_table(
    what: &'static str,
    offset: u64,
    len: u64,
    cs: u64,
    file_size: Option<u64>,
) -> Result<(), Qcow2Error> {
    if !offset.is_multiple_of(cs) {
        return Err(Qcow2Error::Unaligned { what, offset });
    }
    if offset < cs {
        return Err(Qcow2Error::IntoHeader { what, offset });
    }
    let end = offset.checked_add(len).ok_or(Qcow2Error::BeyondEnd { what, offset, file_size: u64::MAX })?;
    if let Some(fs) = file_size
        && end > fs
    {
        return Err(Qcow2Error::BeyondEnd { what, offset, file_size: fs });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal valid v3 header for a 1 GiB image with 64 KiB clusters.
    pub(crate) fn v3() -> Vec<u8> {
        let mut h = vec![0u8; 65536];
        h[0..4].copy_from_slice(b"QFI\xfb");
        h[4..8].copy_from_slice(&3u32.to_be_bytes());
        h[20..24].copy_from_slice(&16u32.to_be_bytes());
        h[24..32].copy_from_slice(&(1u64 << 30).to_be_bytes());
        h[36..40].copy_from_slice(&2u32.to_be_bytes());
        h[40..48].copy_from_slice(&(3u64 << 16).to_be_bytes());
        h[48..56].copy_from_slice(&(1u64 << 16).to_be_bytes());
        h[56..60].copy_from_slice(&1u32.to_be_bytes());
        h[96..100].copy_from_slice(&4u32.to_be_bytes());
        h[100..104].copy_from_slice(&112u32.to_be_bytes());
        h
    }

    fn err(h: &[u8], size: Option<u64>) -> String {
        match Header::parse(h, size) {
            Ok(_) => String::from("ok"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn valid() {
        let h = Header::parse(&v3(), Some(1 << 20)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((h.version, h.cluster_size(), h.virtual_size, h.l2_entries()), (3, 65536, 1 << 30, 8192));
        assert_eq!(h.refusal().map(|e| e.to_string()), None);
    }

    #[test]
    fn hostile_headers() {
        let mut h = v3();
        h[72..80].copy_from_slice(&(1u64 << 40).to_be_bytes());
        assert!(err(&h, None).contains("incompatible feature"), "{}", err(&h, None));
        let mut h = v3();
        h[20..24].copy_from_slice(&30u32.to_be_bytes());
        assert!(err(&h, None).contains("cluster size"));
        let mut h = v3();
        h[24..32].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(err(&h, None).contains("virtual size"));
        let mut h = v3();
        h[36..40].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(err(&h, None).contains("L1 table too large"), "{}", err(&h, None));
        let mut h = v3();
        h[36..40].copy_from_slice(&1u32.to_be_bytes());
        assert!(err(&h, None).contains("too small"));
        let mut h = v3();
        h[40..48].copy_from_slice(&0u64.to_be_bytes());
        assert!(err(&h, None).contains("header"), "{}", err(&h, None));
        let mut h = v3();
        h[40..48].copy_from_slice(&(1u64 << 40).to_be_bytes());
        assert!(err(&h, Some(1 << 20)).contains("beyond the end"), "{}", err(&h, Some(1 << 20)));
        assert!(err(&h[..50], None).contains("truncated"));
        let mut h = v3();
        h[0] = b'X';
        assert!(err(&h, None).contains("magic"));
    }

    #[test]
    fn refusals() {
        let mut h = v3();
        h[32..36].copy_from_slice(&2u32.to_be_bytes());
        let p = Header::parse(&h, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.refusal().map(|e| e.to_string()).unwrap_or_default().contains("encrypted (LUKS)"));
        let mut h = v3();
        h[8..16].copy_from_slice(&512u64.to_be_bytes());
        h[16..20].copy_from_slice(&7u32.to_be_bytes());
        h[512..519].copy_from_slice(b"base.qc");
        let p = Header::parse(&h, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.refusal().map(|e| e.to_string()).unwrap_or_default().contains("backing file \"base.qc\""));
        let mut h = v3();
        h[72..80].copy_from_slice(&4u64.to_be_bytes());
        let p = Header::parse(&h, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(p.refusal().map(|e| e.to_string()).unwrap_or_default().contains("data file"));
    }
}
