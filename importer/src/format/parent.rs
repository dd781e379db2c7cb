//! The "child of another image" forms of the formats delegated to qemu-img, found from the image's own bytes.
//!
//! A child (differencing, delta, snapshot) image holds only the blocks that changed since its parent; imported
//! alone it is a silently wrong disk. `qemu-img info` does not report every such form: it reads a differencing
//! VHD (disk type 4) and a VMDK whose descriptor has a `parentCID` but no `parentFileNameHint` as standalone
//! disks (and refuses a VHDX with a parent only with "Operation not supported"). So the importer decides
//! itself, whatever qemu-img says:
//!
//! * **vhd (vpc)**: disk type 4 (differencing) in the footer copy at offset 0 or in the footer at the end (qemu
//!   reads the first, Hyper-V the last); the parent's name comes from the dynamic header.
//! * **vhdx**: the has-parent bit of the file parameters, or a parent locator item, in the metadata region of
//!   either region table.
//! * **vmdk** (`KDMV` sparse and streamOptimized): a `parentCID` other than `ffffffff` or a non-empty
//!   `parentFileNameHint` in the embedded descriptor, both where the header points and at sector 1 (where qemu
//!   looks, whatever the header says).
//! * **vdi**: image type 4 (differencing) or 3 (undo), or a non-null parent (linkage) UUID.
//!
//! The bytes are hostile: reads are bounded (a few hundred KiB per image at most), every offset and length is
//! checked, and nothing panics (fuzzed by `fuzz/fuzz_targets/parent.rs`). Checksums are not verified: a mark of
//! a parent is refused whether or not the structure holding it is intact.

use std::io;

use crate::detect::ImageFormat;
use crate::source::RandomAccess;

/// A parent reference found in an image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the image is {form}{}; images with a parent (backing file) are refused",
    parent.as_ref().map(|p| format!(" of parent {p:?}")).unwrap_or_default()
)]
pub struct ParentRef {
    /// Which child form of the format, e.g. `a differencing VHD (disk type 4)`.
    pub form: String,
    /// The parent's name (or id) as the image records it, when it does.
    pub parent: Option<String>,
}

/// Longest parent name kept for messages (characters).
const MAX_NAME: usize = 256;

/// Looks for a parent reference in an image of `format`. `Ok(None)`: none found (or a format without one).
/// Fails only when reading fails.
pub fn find(format: ImageFormat, image: &dyn RandomAccess) -> io::Result<Option<ParentRef>> {
    match format {
        ImageFormat::Vpc => vhd(image),
        ImageFormat::Vhdx => vhdx(image),
        ImageFormat::Vmdk => vmdk(image),
        ImageFormat::Vdi => vdi(image),
        ImageFormat::Raw | ImageFormat::Iso | ImageFormat::Qcow2 | ImageFormat::Tar | ImageFormat::Ova => Ok(None),
    }
}

/// `len` bytes at `offset`, zero-filled past the end of the image.
fn read(image: &dyn RandomAccess, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    if offset < image.size() {
        image.read_at(offset, &mut buf)?;
    }
    Ok(buf)
}

fn le16(b: &[u8], o: usize) -> Option<u16> {
    b.get(o..o.checked_add(2)?)?.try_into().ok().map(u16::from_le_bytes)
}
fn le32(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o.checked_add(4)?)?.try_into().ok().map(u32::from_le_bytes)
}
fn le64(b: &[u8], o: usize) -> Option<u64> {
    b.get(o..o.checked_add(8)?)?.try_into().ok().map(u64::from_le_bytes)
}
fn be32(b: &[u8], o: usize) -> Option<u32> {
    b.get(o..o.checked_add(4)?)?.try_into().ok().map(u32::from_be_bytes)
}
fn be64(b: &[u8], o: usize) -> Option<u64> {
    b.get(o..o.checked_add(8)?)?.try_into().ok().map(u64::from_be_bytes)
}

/// A name from UTF-16 code units: up to the first NUL, control characters dropped, at most [`MAX_NAME`]
/// characters; `None` when empty.
fn utf16_name(units: impl Iterator<Item = u16>) -> Option<String> {
    let s: String = char::decode_utf16(units.take_while(|&u| u != 0))
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .filter(|c| !c.is_control())
        .take(MAX_NAME)
        .collect();
    (!s.trim().is_empty()).then_some(s)
}

fn utf16be(b: &[u8]) -> Option<String> {
    utf16_name(b.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])))
}
fn utf16le(b: &[u8]) -> Option<String> {
    utf16_name(b.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])))
}

// -----------------------------------------------------------------------------------------------------------
// VHD
// -----------------------------------------------------------------------------------------------------------

const VHD_FOOTER: usize = 512;
const VHD_DISK_TYPE: usize = 60;
const VHD_DIFFERENCING: u32 = 4;
/// The dynamic disk header: cookie, then the parent's unicode name (UTF-16BE, 512 bytes) at 64.
const VHD_DYN_HEADER: usize = 1024;

fn vhd(image: &dyn RandomAccess) -> io::Result<Option<ParentRef>> {
    let size = image.size();
    let mut footers = vec![read(image, 0, VHD_FOOTER)?];
    if size >= 2 * VHD_FOOTER as u64 {
        footers.push(read(image, size - VHD_FOOTER as u64, VHD_FOOTER)?);
    }
    let footers: Vec<Vec<u8>> = footers.into_iter().filter(|f| f.starts_with(b"conectix")).collect();
    if !footers.iter().any(|f| be32(f, VHD_DISK_TYPE) == Some(VHD_DIFFERENCING)) {
        return Ok(None);
    }
    let mut parent = None;
    for f in &footers {
        // The data offset points at the dynamic header (all ones for a fixed disk).
        match be64(f, 16) {
            Some(off) if off != u64::MAX && parent.is_none() => {
                let h = read(image, off, VHD_DYN_HEADER)?;
                if h.starts_with(b"cxsparse") {
                    parent = h.get(64..576).and_then(utf16be);
                }
            }
            _ => {}
        }
    }
    Ok(Some(ParentRef { form: String::from("a differencing VHD (disk type 4)"), parent }))
}

// -----------------------------------------------------------------------------------------------------------
// VHDX
// -----------------------------------------------------------------------------------------------------------

/// The two region tables (64 KiB each).
const VHDX_REGION_TABLES: [u64; 2] = [192 << 10, 256 << 10];
/// Size of a region table and of the metadata table at the start of the metadata region.
const VHDX_TABLE: usize = 64 << 10;
/// Entries a region or metadata table can hold (the spec's maximum).
const VHDX_MAX_ENTRIES: usize = 2047;
/// Distinct metadata regions looked at (a valid file has one, named by both region tables).
const VHDX_MAX_REGIONS: usize = 4;
/// Metadata items read (a valid file has five).
const VHDX_MAX_ITEMS: usize = 64;
/// The largest parent locator read.
const VHDX_MAX_LOCATOR: usize = 64 << 10;
/// File parameters flag: this is a differencing file.
const VHDX_HAS_PARENT: u32 = 0x2;

/// A GUID as stored on disk (the first three fields little-endian).
const fn guid(a: u32, b: u16, c: u16, d: [u8; 8]) -> [u8; 16] {
    let (a, b, c) = (a.to_le_bytes(), b.to_le_bytes(), c.to_le_bytes());
    [a[0], a[1], a[2], a[3], b[0], b[1], c[0], c[1], d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]
}

const METADATA_REGION: [u8; 16] = guid(0x8B7C_A206, 0x4790, 0x4B9A, [0xB8, 0xFE, 0x57, 0x5F, 0x05, 0x0F, 0x88, 0x6E]);
const FILE_PARAMETERS: [u8; 16] = guid(0xCAA1_6737, 0xFA36, 0x4D43, [0xB3, 0xB6, 0x33, 0xF0, 0xAA, 0x44, 0xE7, 0x6B]);
const PARENT_LOCATOR: [u8; 16] = guid(0xA8D3_5F2D, 0xB30B, 0x454D, [0xAB, 0xF7, 0xD3, 0xD8, 0x48, 0x34, 0xAB, 0x0C]);

fn vhdx(image: &dyn RandomAccess) -> io::Result<Option<ParentRef>> {
    let mut regions: Vec<u64> = Vec::new();
    for at in VHDX_REGION_TABLES {
        let t = read(image, at, VHDX_TABLE)?;
        if !t.starts_with(b"regi") {
            continue;
        }
        let count = le32(&t, 8).map_or(0, |c| (c as usize).min(VHDX_MAX_ENTRIES));
        for i in 0..count {
            let e = 16 + 32 * i;
            if t.get(e..e + 16) == Some(&METADATA_REGION[..])
                && let Some(off) = le64(&t, e + 16)
                && !regions.contains(&off)
                && regions.len() < VHDX_MAX_REGIONS
            {
                regions.push(off);
            }
        }
    }
    let (mut has_parent_flag, mut locator) = (false, None);
    let mut items = 0usize;
    for region in regions {
        let t = read(image, region, VHDX_TABLE)?;
        if !t.starts_with(b"metadata") {
            continue;
        }
        let count = le16(&t, 10).map_or(0, |c| usize::from(c).min(VHDX_MAX_ENTRIES));
        for i in 0..count {
            let e = 32 + 32 * i;
            let (Some(id), Some(off), Some(len)) = (t.get(e..e + 16), le32(&t, e + 16), le32(&t, e + 20)) else {
                break;
            };
            let at = region.saturating_add(u64::from(off));
            if id == FILE_PARAMETERS && len >= 8 && items < VHDX_MAX_ITEMS {
                items += 1;
                let p = read(image, at, 8)?;
                if le32(&p, 4).is_some_and(|flags| flags & VHDX_HAS_PARENT != 0) {
                    has_parent_flag = true;
                }
            } else if id == PARENT_LOCATOR && locator.is_none() {
                locator = Some((at, (len as usize).min(VHDX_MAX_LOCATOR)));
            }
        }
    }
    if !has_parent_flag && locator.is_none() {
        return Ok(None);
    }
    let parent = match locator {
        Some((at, len)) => locator_path(&read(image, at, len)?),
        None => None,
    };
    let form = if has_parent_flag {
        "a differencing VHDX (has-parent flag set)"
    } else {
        "a differencing VHDX (it has a parent locator)"
    };
    Ok(Some(ParentRef { form: form.to_string(), parent }))
}

/// The parent's path from a VHDX parent locator: a locator type GUID, a reserved u16, a key/value count, then
/// entries of (key offset u32, value offset u32, key length u16, value length u16), offsets relative to the
/// locator and keys and values UTF-16LE.
fn locator_path(loc: &[u8]) -> Option<String> {
    let count = usize::from(le16(loc, 18)?);
    let field = |off: u32, len: u16| -> Option<&[u8]> {
        let start = usize::try_from(off).ok()?;
        loc.get(start..start.checked_add(usize::from(len))?)
    };
    let mut best: Option<(usize, String)> = None;
    for i in 0..count.min(256) {
        let e = 20 + 12 * i;
        let (Some(ko), Some(vo), Some(kl), Some(vl)) =
            (le32(loc, e), le32(loc, e + 4), le16(loc, e + 8), le16(loc, e + 10))
        else {
            break;
        };
        let (Some(key), Some(value)) = (field(ko, kl).and_then(utf16le), field(vo, vl).and_then(utf16le)) else {
            continue;
        };
        let rank = ["relative_path", "absolute_win32_path", "volume_path", "parent_linkage"]
            .iter()
            .position(|k| key.eq_ignore_ascii_case(k));
        if let Some(r) = rank
            && best.as_ref().is_none_or(|(b, _)| r < *b)
        {
            best = Some((r, value));
        }
    }
    best.map(|(_, v)| v)
}

// -----------------------------------------------------------------------------------------------------------
// VMDK
// -----------------------------------------------------------------------------------------------------------

/// Where qemu reads the descriptor of a sparse file for its parent, and how much (`DESC_SIZE`).
const VMDK_QEMU_DESC: (u64, usize) = (0x200, 20 * 512);
/// The most descriptor text read at the header's descriptor offset (qemu reads at most 1 MiB).
const VMDK_MAX_DESC: usize = 1 << 20;

fn vmdk(image: &dyn RandomAccess) -> io::Result<Option<ParentRef>> {
    let h = read(image, 0, 512)?;
    if !h.starts_with(b"KDMV") {
        return Ok(None);
    }
    let mut places = vec![VMDK_QEMU_DESC];
    if let Some(off) = le64(&h, 28).filter(|&o| o > 0) {
        // qemu reads up to 1 MiB from the header's descriptor offset, whatever the descriptor size says.
        let at = off.saturating_mul(512);
        let len = image.size().saturating_sub(at).min(VMDK_MAX_DESC as u64) as usize;
        if len > 0 {
            places.push((at, len));
        }
    }
    for (at, len) in places {
        let text = read(image, at, len)?;
        let text = text.split(|&b| b == 0).next().unwrap_or_default();
        if let Some(p) = vmdk_descriptor_parent(text) {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// The value after `key` in `text` at `at` (the key's end): optional blanks, `=`, optional blanks, then up to the
/// end of the line, without surrounding quotes. `None` without `=`.
fn value_after(text: &[u8], at: usize) -> Option<String> {
    let rest = text.get(at..)?;
    let line = rest.split(|&b| b == b'\n' || b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let v = line.trim_start().strip_prefix('=')?.trim();
    let v = v.strip_prefix('"').map_or(v, |v| v.split('"').next().unwrap_or_default());
    Some(v.chars().filter(|c| !c.is_control()).take(MAX_NAME).collect())
}

/// Every position just past an ASCII-case-insensitive occurrence of `key` in `text`.
fn occurrences<'a>(text: &'a [u8], key: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    text.windows(key.len()).enumerate().filter(|(_, w)| w.eq_ignore_ascii_case(key)).map(|(i, _)| i + key.len())
}

/// A parent named by descriptor text: a `parentCID` other than `ffffffff` (qemu's and VMware's "no parent"),
/// or a non-empty `parentFileNameHint`. Searched anywhere in the text, as qemu does (`strstr`).
pub(crate) fn vmdk_descriptor_parent(text: &[u8]) -> Option<ParentRef> {
    let hint = occurrences(text, b"parentFileNameHint").find_map(|at| value_after(text, at).filter(|v| !v.is_empty()));
    let cid = occurrences(text, b"parentCID").find_map(|at| {
        let v = value_after(text, at)?;
        let token: String = v.chars().take_while(|c| !c.is_whitespace()).take(16).collect();
        let none = u32::from_str_radix(&token, 16).is_ok_and(|c| c == u32::MAX);
        (!none).then_some(token)
    });
    let form = match (&cid, &hint) {
        (Some(c), _) => format!("a VMDK delta disk (parentCID={c})"),
        (None, Some(_)) => String::from("a VMDK delta disk (parentFileNameHint)"),
        (None, None) => return None,
    };
    Some(ParentRef { form, parent: hint })
}

// -----------------------------------------------------------------------------------------------------------
// VDI
// -----------------------------------------------------------------------------------------------------------

const VDI_SIGNATURE: [u8; 4] = [0x7f, 0x10, 0xda, 0xbe];
/// Header 1.x: image type at 0x4c, the linkage (parent) UUID at 0x1a8, the parent's modification UUID at 0x1b8.
const VDI_HEADER: usize = 0x1c8;

fn vdi(image: &dyn RandomAccess) -> io::Result<Option<ParentRef>> {
    let h = read(image, 0, VDI_HEADER)?;
    if h.get(0x40..0x44) != Some(&VDI_SIGNATURE[..]) || le32(&h, 0x44).is_none_or(|v| v >> 16 != 1) {
        return Ok(None);
    }
    let uuid = |o: usize| h.get(o..o + 16).filter(|u| u.iter().any(|&b| b != 0)).map(format_uuid);
    let parent = uuid(0x1a8).or_else(|| uuid(0x1b8));
    let form = match le32(&h, 0x4c) {
        Some(4) => String::from("a differencing VDI (image type 4)"),
        Some(3) => String::from("an undo VDI (image type 3)"),
        _ if parent.is_some() => String::from("a child VDI (its parent UUID is set)"),
        _ => return Ok(None),
    };
    Ok(Some(ParentRef { form, parent }))
}

/// A VirtualBox UUID (the first three fields little-endian) in the usual text form.
fn format_uuid(u: &[u8]) -> String {
    let hex = |r: std::ops::Range<usize>, rev: bool| {
        let mut b: Vec<u8> = u.get(r).map(<[u8]>::to_vec).unwrap_or_default();
        if rev {
            b.reverse();
        }
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    };
    format!("{}-{}-{}-{}-{}", hex(0..4, true), hex(4..6, true), hex(6..8, true), hex(8..10, false), hex(10..16, false))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;
    use crate::source::MemoryAccess;

    fn find_in(format: ImageFormat, bytes: Vec<u8>) -> Option<ParentRef> {
        find(format, &MemoryAccess(bytes)).unwrap()
    }

    fn put(b: &mut Vec<u8>, at: usize, data: &[u8]) {
        if b.len() < at + data.len() {
            b.resize(at + data.len(), 0);
        }
        b[at..at + data.len()].copy_from_slice(data);
    }

    fn utf16(s: &str, be: bool) -> Vec<u8> {
        s.encode_utf16().flat_map(|u| if be { u.to_be_bytes() } else { u.to_le_bytes() }).collect()
    }

    /// A dynamic (3) or differencing (4) VHD: footer copy, dynamic header, end footer.
    fn vhd_image(head_type: u32, end_type: u32, parent: &str) -> Vec<u8> {
        let footer = |t: u32| {
            let mut f = vec![0u8; 512];
            put(&mut f, 0, b"conectix");
            put(&mut f, 16, &512u64.to_be_bytes());
            put(&mut f, 60, &t.to_be_bytes());
            f
        };
        let mut b = footer(head_type);
        put(&mut b, 512, b"cxsparse");
        put(&mut b, 512 + 64, &utf16(parent, true));
        put(&mut b, 4096, &footer(end_type));
        b
    }

    #[test]
    fn vhd_disk_types() {
        assert_eq!(find_in(ImageFormat::Vpc, vhd_image(3, 3, "")), None);
        let p = find_in(ImageFormat::Vpc, vhd_image(4, 4, "base.vhd")).unwrap();
        assert_eq!(p.parent.as_deref(), Some("base.vhd"));
        assert!(p.to_string().contains("differencing VHD (disk type 4) of parent \"base.vhd\""), "{p}");
        // either footer suffices: qemu reads the first, Hyper-V the last
        assert!(find_in(ImageFormat::Vpc, vhd_image(3, 4, "")).is_some());
        assert!(find_in(ImageFormat::Vpc, vhd_image(4, 3, "x")).is_some());
        // a parent name in a dynamic disk's header is not a parent
        assert_eq!(find_in(ImageFormat::Vpc, vhd_image(3, 3, "stale")), None);
        // no name
        assert_eq!(find_in(ImageFormat::Vpc, vhd_image(4, 4, "")).unwrap().parent, None);
    }

    /// A VHDX with region tables at 192 and 256 KiB, a metadata region at `md` with file parameters and,
    /// optionally, a parent locator.
    fn vhdx_image(flags: u32, locator: Option<&[(&str, &str)]>, second_table_only: bool) -> Vec<u8> {
        let md = 320usize << 10;
        let mut b = b"vhdxfile".to_vec();
        for (i, at) in VHDX_REGION_TABLES.iter().enumerate() {
            if second_table_only && i == 0 {
                continue;
            }
            let at = *at as usize;
            put(&mut b, at, b"regi");
            put(&mut b, at + 8, &1u32.to_le_bytes());
            put(&mut b, at + 16, &METADATA_REGION);
            put(&mut b, at + 32, &(md as u64).to_le_bytes());
            put(&mut b, at + 40, &(1u32 << 20).to_le_bytes());
        }
        put(&mut b, md, b"metadata");
        let entries = if locator.is_some() { 2u16 } else { 1 };
        put(&mut b, md + 10, &entries.to_le_bytes());
        put(&mut b, md + 32, &FILE_PARAMETERS);
        put(&mut b, md + 48, &(64u32 << 10).to_le_bytes());
        put(&mut b, md + 52, &8u32.to_le_bytes());
        put(&mut b, md + (64 << 10), &(32u32 << 20).to_le_bytes());
        put(&mut b, md + (64 << 10) + 4, &flags.to_le_bytes());
        if let Some(kvs) = locator {
            let lo = 80usize << 10;
            put(&mut b, md + 64, &PARENT_LOCATOR);
            put(&mut b, md + 80, &(lo as u32).to_le_bytes());
            put(&mut b, md + 84, &4096u32.to_le_bytes());
            let at = md + lo;
            put(&mut b, at + 18, &(kvs.len() as u16).to_le_bytes());
            let mut data = 20 + 12 * kvs.len();
            for (i, (k, v)) in kvs.iter().enumerate() {
                let (k, v) = (utf16(k, false), utf16(v, false));
                let e = at + 20 + 12 * i;
                put(&mut b, e, &(data as u32).to_le_bytes());
                put(&mut b, e + 4, &((data + k.len()) as u32).to_le_bytes());
                put(&mut b, e + 8, &(k.len() as u16).to_le_bytes());
                put(&mut b, e + 10, &(v.len() as u16).to_le_bytes());
                put(&mut b, at + data, &k);
                put(&mut b, at + data + k.len(), &v);
                data += k.len() + v.len();
            }
        }
        b
    }

    #[test]
    fn vhdx_parent_marks() {
        assert_eq!(find_in(ImageFormat::Vhdx, vhdx_image(0, None, false)), None);
        assert_eq!(find_in(ImageFormat::Vhdx, vhdx_image(1, None, false)), None); // leave-blocks-allocated only
        let p = find_in(ImageFormat::Vhdx, vhdx_image(2, None, false)).unwrap();
        assert!(p.form.contains("has-parent"), "{p}");
        let kvs = [("parent_linkage", "{1234}"), ("relative_path", "..\\base.vhdx"), ("volume_path", "\\\\?\\v")];
        let p = find_in(ImageFormat::Vhdx, vhdx_image(0, Some(&kvs), false)).unwrap();
        assert!(p.form.contains("parent locator"), "{p}");
        assert_eq!(p.parent.as_deref(), Some("..\\base.vhdx"));
        let p = find_in(ImageFormat::Vhdx, vhdx_image(2, Some(&kvs[..1]), true)).unwrap();
        assert_eq!(p.parent.as_deref(), Some("{1234}"));
        // a locator whose entries point outside it: found, without a name
        let mut b = vhdx_image(0, Some(&kvs), false);
        let e = (320usize << 10) + (80 << 10) + 20;
        put(&mut b, e, &u32::MAX.to_le_bytes());
        put(&mut b, e + 12 + 4, &0xffff_fff0u32.to_le_bytes());
        put(&mut b, e + 24 + 8, &u16::MAX.to_le_bytes());
        assert_eq!(find_in(ImageFormat::Vhdx, b).unwrap().parent, None);
    }

    fn vmdk_image(desc: &str, desc_at_sector: u64) -> Vec<u8> {
        let mut b = b"KDMV".to_vec();
        put(&mut b, 4, &1u32.to_le_bytes());
        put(&mut b, 28, &desc_at_sector.to_le_bytes());
        put(&mut b, 36, &20u64.to_le_bytes());
        put(&mut b, desc_at_sector as usize * 512, desc.as_bytes());
        put(&mut b, 64 << 10, &[0u8; 512]);
        b
    }

    const BASE_DESC: &str = "# Disk DescriptorFile\nversion=1\nCID=750bd951\nparentCID=ffffffff\ncreateType=\"monolithicSparse\"\n\
                             # Extent description\nRW 32768 SPARSE \"child.vmdk\"\n";

    #[test]
    fn vmdk_descriptors() {
        assert_eq!(find_in(ImageFormat::Vmdk, vmdk_image(BASE_DESC, 1)), None);
        let child = BASE_DESC.replace("parentCID=ffffffff", "parentCID=3f84c670\nparentFileNameHint=\"base.vmdk\"");
        let p = find_in(ImageFormat::Vmdk, vmdk_image(&child, 1)).unwrap();
        assert_eq!(p.parent.as_deref(), Some("base.vmdk"));
        assert!(p.to_string().contains("parentCID=3f84c670"), "{p}");
        // a parent CID without a hint: qemu would read the child alone
        let p = find_in(ImageFormat::Vmdk, vmdk_image(&BASE_DESC.replace("ffffffff", "12345678"), 1)).unwrap();
        assert_eq!((p.form.as_str(), p.parent), ("a VMDK delta disk (parentCID=12345678)", None));
        // a hint without a CID, spacing and case
        let d = BASE_DESC.replace("parentCID=ffffffff", "PARENTcid = FFFFFFFF\n  parentFileNameHint = \"b\"");
        assert_eq!(find_in(ImageFormat::Vmdk, vmdk_image(&d, 1)).unwrap().parent.as_deref(), Some("b"));
        // an empty hint is no parent; garbage as parent CID is
        assert_eq!(find_in(ImageFormat::Vmdk, vmdk_image(&format!("{BASE_DESC}parentFileNameHint=\"\"\n"), 1)), None);
        assert!(find_in(ImageFormat::Vmdk, vmdk_image(&BASE_DESC.replace("ffffffff", "zz"), 1)).is_some());
        // the descriptor elsewhere than sector 1, and text after a NUL is not descriptor text
        assert!(find_in(ImageFormat::Vmdk, vmdk_image(&child, 7)).is_some());
        assert_eq!(find_in(ImageFormat::Vmdk, vmdk_image(&format!("{BASE_DESC}\0parentCID=1\n"), 1)), None);
        // what qemu reads at sector 1 counts even when the header points elsewhere
        let mut b = vmdk_image(BASE_DESC, 7);
        put(&mut b, 512, b"parentCID=00000001\n");
        assert!(find_in(ImageFormat::Vmdk, b).is_some());
    }

    fn vdi_image(image_type: u32, link: [u8; 16]) -> Vec<u8> {
        let mut b = b"<<< Oracle VM VirtualBox Disk Image >>>\n".to_vec();
        put(&mut b, 0x40, &VDI_SIGNATURE);
        put(&mut b, 0x44, &0x0001_0001u32.to_le_bytes());
        put(&mut b, 0x4c, &image_type.to_le_bytes());
        put(&mut b, 0x1a8, &link);
        put(&mut b, 0x200, &[0u8; 16]);
        b
    }

    #[test]
    fn vdi_types() {
        assert_eq!(find_in(ImageFormat::Vdi, vdi_image(1, [0; 16])), None);
        assert_eq!(find_in(ImageFormat::Vdi, vdi_image(2, [0; 16])), None);
        assert!(find_in(ImageFormat::Vdi, vdi_image(4, [0; 16])).unwrap().form.contains("differencing VDI"));
        assert!(find_in(ImageFormat::Vdi, vdi_image(3, [0; 16])).unwrap().form.contains("undo VDI"));
        let link = [0x78, 0x56, 0x34, 0x12, 0x34, 0x12, 0x78, 0x56, 1, 2, 3, 4, 5, 6, 7, 8];
        let p = find_in(ImageFormat::Vdi, vdi_image(1, link)).unwrap();
        assert_eq!(p.parent.as_deref(), Some("12345678-1234-5678-0102-030405060708"));
        assert_eq!(
            p.to_string(),
            "the image is a child VDI (its parent UUID is set) of parent \"12345678-1234-5678-0102-030405060708\"; \
             images with a parent (backing file) are refused"
        );
    }

    /// Truncated, empty and garbage images never panic and mostly find nothing.
    #[test]
    fn hostile_bytes() {
        let samples = [
            vhd_image(4, 4, "p"),
            vhdx_image(2, Some(&[("relative_path", "x")]), false),
            vmdk_image(BASE_DESC, 1),
            vdi_image(4, [1; 16]),
        ];
        let formats = [ImageFormat::Vpc, ImageFormat::Vhdx, ImageFormat::Vmdk, ImageFormat::Vdi];
        for s in &samples {
            for cut in [0, 1, 7, 60, 63, 511, 512, 513, 1023, s.len() / 2, s.len() - 1] {
                for f in formats {
                    let _ = find_in(f, s[..cut.min(s.len())].to_vec());
                }
            }
        }
        let mut x = 0x9e37_79b9u32;
        let mut noise = vec![0u8; 400 << 10];
        for b in &mut noise {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        put(&mut noise, 0, b"vhdxfile");
        put(&mut noise, 192 << 10, b"regi");
        for f in formats {
            let _ = find_in(f, noise.clone());
        }
        assert_eq!(find_in(ImageFormat::Qcow2, vhd_image(4, 4, "p")), None);
    }
}
