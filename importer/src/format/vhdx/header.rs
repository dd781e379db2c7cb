//! The VHDX headers, the region table and the log check (see the module documentation).

use super::{VhdxError, checksum_ok, ferr, guid, guid_text, le16, le32, le64, read};
use crate::Result;
use crate::source::RandomAccess;

/// Where the two headers are.
pub const HEADER_OFFSETS: [u64; 2] = [64 << 10, 128 << 10];
/// Bytes of a header (covered by its checksum).
pub const HEADER_LEN: usize = 4 << 10;
/// Where region table 1 is.
pub const REGION_TABLE_OFFSET: u64 = 192 << 10;
/// Bytes of a region table (covered by its checksum).
pub const REGION_TABLE_LEN: usize = 64 << 10;
/// End of the header section (identifier, headers, region tables).
pub const HEADER_SECTION_END: u64 = 1 << 20;
/// Most entries of a region or metadata table.
pub const MAX_TABLE_ENTRIES: u32 = 2047;
/// Most log bytes searched for entries to replay.
pub const MAX_LOG: u32 = 64 << 20;
/// Log entries are made of 4 KiB sectors.
const LOG_SECTOR: u64 = 4 << 10;

/// The BAT region.
pub const BAT_REGION: [u8; 16] = guid(0x2DC2_7766, 0xF623, 0x4200, [0x9D, 0x64, 0x11, 0x5E, 0x9B, 0xFD, 0x4A, 0x08]);
/// The metadata region.
pub const METADATA_REGION: [u8; 16] =
    guid(0x8B7C_A206, 0x4790, 0x4B9A, [0xB8, 0xFE, 0x57, 0x5F, 0x05, 0x0F, 0x88, 0x6E]);

/// The current header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Its sequence number.
    pub sequence: u64,
    /// Non-zero: the log may hold entries of this GUID.
    pub log_guid: [u8; 16],
    /// Where the log is.
    pub log_offset: u64,
    /// Its length.
    pub log_length: u32,
}

/// A region of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Where it starts.
    pub offset: u64,
    /// Its length.
    pub len: u32,
}

impl Region {
    /// One past its last byte.
    pub fn end(self) -> u64 {
        self.offset.saturating_add(u64::from(self.len))
    }
}

/// The regions of region table 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regions {
    /// The BAT.
    pub bat: Region,
    /// The metadata region.
    pub metadata: Region,
}

/// Checks the file identifier and picks the current header (see the module documentation).
pub fn read_header(image: &dyn RandomAccess) -> Result<Header> {
    let mut id = [0u8; 8];
    read(image, 0, &mut id, "the file identifier")?;
    if &id != b"vhdxfile" {
        return Err(ferr(VhdxError::BadMagic));
    }
    let mut copies: Vec<Vec<u8>> = Vec::new();
    for at in HEADER_OFFSETS {
        let mut h = vec![0u8; HEADER_LEN];
        read(image, at, &mut h, "a header")?;
        if h.starts_with(b"head") && checksum_ok(&h, 4) {
            copies.push(h);
        }
    }
    let current = match copies.as_slice() {
        [] => return Err(ferr(VhdxError::NoValidHeader)),
        [one] => one,
        [a, b] => {
            let (sa, sb) = (le64(a, 8), le64(b, 8));
            if sa > sb {
                a
            } else if sb > sa {
                b
            } else if a == b {
                a
            } else {
                return Err(ferr(VhdxError::AmbiguousHeaders(sa)));
            }
        }
        _ => return Err(ferr(VhdxError::NoValidHeader)),
    };
    let version = le16(current, 66);
    if version != 1 {
        return Err(ferr(VhdxError::UnsupportedVersion(version)));
    }
    let mut log_guid = [0u8; 16];
    log_guid.copy_from_slice(&current[48..64]);
    Ok(Header { sequence: le64(current, 8), log_guid, log_offset: le64(current, 72), log_length: le32(current, 68) })
}

/// Reads region table 1 and checks its regions against each other, the header section and the log.
pub fn read_regions(image: &dyn RandomAccess, h: &Header) -> Result<Regions> {
    let bad = |m: String| ferr(VhdxError::BadRegionTable(m));
    let mut t = vec![0u8; REGION_TABLE_LEN];
    read(image, REGION_TABLE_OFFSET, &mut t, "region table 1")?;
    if !t.starts_with(b"regi") {
        return Err(bad(String::from("no regi signature")));
    }
    if !checksum_ok(&t, 4) {
        return Err(bad(String::from("CRC-32C checksum mismatch")));
    }
    let count = le32(&t, 8);
    if count > MAX_TABLE_ENTRIES {
        return Err(bad(format!("{count} entries (at most {MAX_TABLE_ENTRIES})")));
    }
    let (mut bat, mut metadata) = (None, None);
    let mut taken: Vec<(u64, u64, String)> = vec![(0, HEADER_SECTION_END, String::from("the header section"))];
    if h.log_length > 0 {
        taken.push((h.log_offset, h.log_offset.saturating_add(u64::from(h.log_length)), String::from("the log")));
    }
    for i in 0..count as usize {
        let e = &t[16 + 32 * i..16 + 32 * (i + 1)];
        let region = Region { offset: le64(e, 16), len: le32(e, 24) };
        let required = le32(e, 28) & 1 != 0;
        let id = &e[..16];
        let slot = if id == BAT_REGION {
            &mut bat
        } else if id == METADATA_REGION {
            &mut metadata
        } else if required {
            return Err(ferr(VhdxError::UnknownRequired { what: "region", guid: guid_text(id) }));
        } else {
            continue;
        };
        let name = if id == BAT_REGION { "the BAT region" } else { "the metadata region" };
        if slot.is_some() {
            return Err(bad(format!("{name} is listed twice")));
        }
        if let Some((_, _, other)) = taken.iter().find(|(s, e, _)| region.offset < *e && *s < region.end()) {
            return Err(bad(format!("{name} at offset {} overlaps {other}", region.offset)));
        }
        taken.push((region.offset, region.end(), name.to_string()));
        *slot = Some(region);
    }
    match (bat, metadata) {
        (Some(bat), Some(metadata)) => Ok(Regions { bat, metadata }),
        (None, _) => Err(bad(String::from("no BAT region"))),
        (_, None) => Err(bad(String::from("no metadata region"))),
    }
}

/// Refuses an image whose log holds an entry to replay: one of the header's log GUID with a valid CRC-32C,
/// anywhere in the (circular) log. A zero log GUID means there is none.
pub fn check_log(image: &dyn RandomAccess, h: &Header) -> Result<()> {
    if h.log_guid == [0u8; 16] || h.log_length == 0 {
        return Ok(());
    }
    if h.log_length > MAX_LOG {
        return Err(ferr(VhdxError::LogTooLarge { len: h.log_length, max: MAX_LOG }));
    }
    let len = u64::from(h.log_length);
    let mut log = vec![0u8; h.log_length as usize];
    read(image, h.log_offset, &mut log, "the log")?;
    let mut at = 0u64;
    while at + LOG_SECTOR <= len {
        let s = &log[at as usize..(at + LOG_SECTOR) as usize];
        let entry_len = u64::from(le32(s, 8));
        if s.starts_with(b"loge")
            && s[32..48] == h.log_guid
            && entry_len >= LOG_SECTOR
            && entry_len % LOG_SECTOR == 0
            && entry_len <= len
        {
            // The entry may wrap around the end of the log.
            let mut entry = Vec::with_capacity(entry_len as usize);
            let first = (len - at).min(entry_len);
            entry.extend_from_slice(&log[at as usize..(at + first) as usize]);
            entry.extend_from_slice(&log[..(entry_len - first) as usize]);
            if checksum_ok(&entry, 4) {
                return Err(ferr(VhdxError::LogNeedsReplay));
            }
        }
        at += LOG_SECTOR;
    }
    Ok(())
}
