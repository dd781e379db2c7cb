//! OVA: a tar archive whose first member is an OVF descriptor, followed by the disk files it references
//! (usually streamOptimized VMDKs). One disk is imported, read straight from the stream: no scratch space, the
//! archive is never seeked.
//!
//! ```text
//! tar ─► member 1: *.ovf ─► parse_ovf: DiskSection disks (document order) + References files
//!                                     │ select: the first disk with a file, or the one named
//!        member …: skipped ◄──────────┘ (SourceOptions::ova_disk / IMPORTER_OVA_DISK / --ova-disk)
//!        member href ─► the caller's converter (streamOptimized vmdk natively; qcow2, raw)
//!        later members: not read (the caller drains the stream when a checksum needs every byte)
//! ```
//!
//! A disk is named by its `ovf:diskId`, its file's `ovf:href` or its file's `ovf:id`. Refused with
//! [`OvaError`]: a descriptor larger than [`MAX_DESCRIPTOR`] or not well-formed XML (DTDs are refused), no
//! disk, an unknown name, a file outside the archive (a URL or an absolute path), chunked files
//! (`ovf:chunkSize`), compressions other than gzip, a member that is not a regular file or is missing.
//! Tar structure errors (bad header checksums, a truncated archive) are [`OvaError::Archive`].

use std::io::{self, Read};
use std::path::{Component, Path};

use crate::detect::ImageFormat;
use crate::error::untag_or;
use crate::format::FormatError;
use crate::{Error, Result};

/// Largest OVF descriptor read (4 MiB; real ones are tens of KiB).
pub const MAX_DESCRIPTOR: u64 = 4 << 20;
/// Most XML nodes parsed in a descriptor.
const MAX_NODES: u32 = 1 << 20;

/// What is wrong with an OVA.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OvaError {
    /// The first member is not an OVF descriptor.
    #[error("the first member of the archive is {0:?}, not an OVF descriptor (*.ovf)")]
    NoDescriptor(String),
    /// The descriptor is too large.
    #[error("the OVF descriptor {name:?} is {size} bytes (at most {max})")]
    DescriptorTooLarge {
        /// Member name.
        name: String,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The descriptor is not a well-formed OVF envelope.
    #[error("invalid OVF descriptor: {0}")]
    BadDescriptor(String),
    /// No disk with a file.
    #[error("the OVF descriptor lists no disk with a file")]
    NoDisks,
    /// The named disk does not exist.
    #[error("the OVF descriptor has no disk {wanted:?} (disks: {})", available.join(", "))]
    DiskNotFound {
        /// The name asked for.
        wanted: String,
        /// `diskId (href)` of every disk.
        available: Vec<String>,
    },
    /// The disk refers to a file the References section does not list.
    #[error("disk {disk:?} refers to file {file_ref:?}, which the References section does not list")]
    UnknownFileRef {
        /// The disk id.
        disk: String,
        /// Its `ovf:fileRef`.
        file_ref: String,
    },
    /// The disk has no file (a blank disk the OVF asks to create).
    #[error("disk {disk:?} has no file (a blank disk); name a disk with a file")]
    NoFile {
        /// The disk id.
        disk: String,
    },
    /// The disk's file lies outside the archive.
    #[error("disk file {href:?} is outside the archive (a URL or an absolute path); refused")]
    ExternalFile {
        /// The file's `ovf:href`.
        href: String,
    },
    /// The disk's file is split into chunks.
    #[error("disk file {href:?} is split into chunks (ovf:chunkSize); chunked disk files are not supported")]
    Chunked {
        /// The file's `ovf:href`.
        href: String,
    },
    /// The disk's file uses a compression OVF does not define.
    #[error("disk file {href:?} uses compression {compression:?} (OVF defines only gzip)")]
    UnsupportedCompression {
        /// The file's `ovf:href`.
        href: String,
        /// Its `ovf:compression`.
        compression: String,
    },
    /// No member of the archive has the disk file's name.
    #[error("the archive has no member {href:?}")]
    MissingMember {
        /// The file's `ovf:href`.
        href: String,
    },
    /// The member is a link, directory or device.
    #[error("archive member {href:?} is not a regular file ({kind})")]
    NotAFile {
        /// The file's `ovf:href`.
        href: String,
        /// The tar entry type.
        kind: String,
    },
    /// The member is a disk format this path does not convert.
    #[error(
        "disk file {href:?} is a {format} image; inside an OVA only streamOptimized vmdk, qcow2 and raw disks are \
         converted"
    )]
    UnsupportedDisk {
        /// The file's `ovf:href`.
        href: String,
        /// What it is.
        format: String,
    },
    /// The tar structure is broken.
    #[error("corrupt tar archive: {0}")]
    Archive(String),
}

fn ferr(e: OvaError) -> Error {
    Error::Format { format: ImageFormat::Ova, source: FormatError::Ova(e) }
}

/// A tar error, or a pipeline error that travelled through the tar reader.
fn tar_err(e: io::Error) -> Error {
    untag_or(e, |e| ferr(OvaError::Archive(e.to_string())))
}

/// One disk of an OVF's DiskSection, with its file from References.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvfDisk {
    /// `ovf:diskId`.
    pub disk_id: String,
    /// `ovf:fileRef` (absent: a blank disk).
    pub file_ref: Option<String>,
    /// The referenced file's `ovf:href`, when References lists it.
    pub href: Option<String>,
    /// The file's `ovf:compression` (`identity` when absent).
    pub compression: Option<String>,
    /// The file has an `ovf:chunkSize`.
    pub chunked: bool,
    /// `ovf:format` (a URI naming the disk format).
    pub format: Option<String>,
}

impl OvfDisk {
    fn label(&self) -> String {
        match &self.href {
            Some(h) => format!("{} ({h})", self.disk_id),
            None => self.disk_id.clone(),
        }
    }
}

fn is_ovf_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e.eq_ignore_ascii_case("ovf"))
}

/// A member name without `.` components (`./disk.vmdk` and `disk.vmdk` are the same file).
fn normalize(p: &Path) -> String {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether the first bytes of a tar archive (as many as the probe holds) are an OVA: the first member's name
/// ends in `.ovf` (the OVF standard puts the descriptor first). Pure.
pub fn is_ova(head: &[u8]) -> bool {
    let mut archive = tar::Archive::new(head);
    let Ok(mut entries) = archive.entries() else { return false };
    matches!(entries.next(), Some(Ok(e)) if e.path().is_ok_and(|p| is_ovf_name(&p)))
}

/// Parses an OVF descriptor: its disks in DiskSection order, each with its file. Namespaces are ignored
/// (OVF 1.x and 2.x), as are sections other than References and DiskSection.
pub fn parse_ovf(text: &str) -> std::result::Result<Vec<OvfDisk>, OvaError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let opts = roxmltree::ParsingOptions { allow_dtd: false, nodes_limit: MAX_NODES, ..Default::default() };
    let doc =
        roxmltree::Document::parse_with_options(text, opts).map_err(|e| OvaError::BadDescriptor(e.to_string()))?;
    let root = doc.root_element();
    if root.tag_name().name() != "Envelope" {
        return Err(OvaError::BadDescriptor(format!("the root element is {:?}, not Envelope", root.tag_name().name())));
    }
    let attr = |n: roxmltree::Node, name: &str| {
        n.attributes().find(|a| a.name() == name).map(|a| a.value().trim().to_string()).filter(|v| !v.is_empty())
    };
    let parent_is =
        |n: roxmltree::Node, names: &[&str]| n.parent_element().is_some_and(|p| names.contains(&p.tag_name().name()));
    let files: Vec<roxmltree::Node> = root
        .descendants()
        .filter(|n| n.is_element() && n.tag_name().name() == "File" && parent_is(*n, &["References"]))
        .collect();
    let disks = root
        .descendants()
        .filter(|n| {
            n.is_element() && n.tag_name().name() == "Disk" && parent_is(*n, &["DiskSection", "VirtualDiskSection"])
        })
        .map(|d| {
            let file_ref = attr(d, "fileRef");
            let file = file_ref.as_deref().and_then(|r| files.iter().find(|f| attr(**f, "id").as_deref() == Some(r)));
            OvfDisk {
                disk_id: attr(d, "diskId").unwrap_or_default(),
                file_ref,
                href: file.and_then(|f| attr(*f, "href")),
                compression: file.and_then(|f| attr(*f, "compression")),
                chunked: file.is_some_and(|f| attr(*f, "chunkSize").is_some()),
                format: attr(d, "format"),
            }
        })
        .collect();
    Ok(disks)
}

/// Picks the disk to import: `wanted` (a disk id, a file href or a file id) or, without it, the first disk that
/// has a file; then checks that its file can be read from the archive.
pub fn select<'a>(disks: &'a [OvfDisk], wanted: Option<&str>) -> std::result::Result<&'a OvfDisk, OvaError> {
    let disk = match wanted {
        None => disks.iter().find(|d| d.href.is_some()).ok_or(OvaError::NoDisks)?,
        Some(w) => disks
            .iter()
            .find(|d| d.disk_id == w || d.href.as_deref() == Some(w) || d.file_ref.as_deref() == Some(w))
            .ok_or_else(|| OvaError::DiskNotFound {
                wanted: w.to_string(),
                available: disks.iter().map(OvfDisk::label).collect(),
            })?,
    };
    let href = match (&disk.href, &disk.file_ref) {
        (Some(h), _) => h.clone(),
        (None, Some(r)) => {
            return Err(OvaError::UnknownFileRef { disk: disk.disk_id.clone(), file_ref: r.clone() });
        }
        (None, None) => return Err(OvaError::NoFile { disk: disk.disk_id.clone() }),
    };
    if href.contains("://") || href.starts_with('/') {
        return Err(OvaError::ExternalFile { href });
    }
    if disk.chunked {
        return Err(OvaError::Chunked { href });
    }
    match disk.compression.as_deref() {
        None | Some("identity") | Some("gzip") => Ok(disk),
        Some(c) => Err(OvaError::UnsupportedCompression { href, compression: c.to_string() }),
    }
}

/// The member handed to the converter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskMember {
    /// The disk's `ovf:diskId`.
    pub disk_id: String,
    /// The member's name (the file's `ovf:href`).
    pub href: String,
    /// The member's size in the archive.
    pub size: u64,
}

/// Reads the OVA from `stream` (from offset 0) up to the selected disk's member and calls `convert` with the
/// member's bytes (reads past its end return 0). Members after it are not read; the caller drains `stream`
/// afterwards when every byte must be read (a checksum). `wanted` names the disk (see [`select`]).
pub fn with_disk<T>(
    stream: &mut dyn Read,
    wanted: Option<&str>,
    convert: impl FnOnce(&mut dyn Read, &DiskMember) -> Result<T>,
) -> Result<T> {
    let mut archive = tar::Archive::new(stream);
    let mut entries = archive.entries().map_err(tar_err)?;
    let mut first =
        entries.next().ok_or_else(|| ferr(OvaError::Archive(String::from("empty archive"))))?.map_err(tar_err)?;
    let name = first.path().map(|p| normalize(&p)).map_err(tar_err)?;
    if !is_ovf_name(Path::new(&name)) {
        return Err(ferr(OvaError::NoDescriptor(name)));
    }
    let size = first.size();
    if size > MAX_DESCRIPTOR {
        return Err(ferr(OvaError::DescriptorTooLarge { name, size, max: MAX_DESCRIPTOR }));
    }
    let mut text = Vec::new();
    (&mut first).take(MAX_DESCRIPTOR).read_to_end(&mut text).map_err(tar_err)?;
    let text = String::from_utf8(text).map_err(|_| ferr(OvaError::BadDescriptor(String::from("not UTF-8"))))?;
    let disks = parse_ovf(&text).map_err(ferr)?;
    let disk = select(&disks, wanted).map_err(ferr)?;
    let href = disk.href.clone().unwrap_or_default();
    let want = normalize(Path::new(&href));
    for entry in entries {
        let mut entry = entry.map_err(tar_err)?;
        if entry.path().map(|p| normalize(&p)).map_err(tar_err)? != want {
            continue;
        }
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_gnu_sparse()) {
            return Err(ferr(OvaError::NotAFile { href, kind: format!("{kind:?}") }));
        }
        let member = DiskMember { disk_id: disk.disk_id.clone(), href, size: entry.size() };
        tracing::info!(disk = %member.disk_id, file = %member.href, size = member.size, "importing the OVA's disk");
        return convert(&mut entry, &member);
    }
    Err(ferr(OvaError::MissingMember { href }))
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;

    /// An OVF envelope listing `disks` as (disk id, file id, href), in that order, plus a blank disk.
    pub(crate) fn ovf(disks: &[(&str, &str, &str)]) -> String {
        let files: String =
            disks.iter().map(|(_, id, href)| format!("    <File ovf:id=\"{id}\" ovf:href=\"{href}\"/>\n")).collect();
        let ds: String = disks
            .iter()
            .map(|(d, id, _)| {
                format!(
                    "    <Disk ovf:capacity=\"1\" ovf:diskId=\"{d}\" ovf:fileRef=\"{id}\" \
                     ovf:format=\"http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized\"/>\n"
                )
            })
            .collect();
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Envelope xmlns=\"http://schemas.dmtf.org/ovf/envelope/1\" \
             xmlns:ovf=\"http://schemas.dmtf.org/ovf/envelope/1\">\n  <References>\n{files}  </References>\n  \
             <DiskSection>\n    <Info>Virtual disks</Info>\n{ds}    <Disk ovf:capacity=\"1\" ovf:diskId=\"blank\"/>\n  \
             </DiskSection>\n  <VirtualSystem ovf:id=\"vm\"><Info>A VM</Info></VirtualSystem>\n</Envelope>\n"
        )
    }

    /// A tar archive of `(name, bytes)` members.
    pub(crate) fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in members {
            let mut h = tar::Header::new_ustar();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_entry_type(tar::EntryType::Regular);
            b.append_data(&mut h, name, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn parses_disks_in_order() {
        let text = ovf(&[("vmdisk1", "file1", "a-disk1.vmdk"), ("vmdisk2", "file2", "a-disk2.vmdk")]);
        let disks = parse_ovf(&text).unwrap();
        assert_eq!(disks.len(), 3);
        assert_eq!(disks[0].href.as_deref(), Some("a-disk1.vmdk"));
        assert_eq!(disks[1].disk_id, "vmdisk2");
        assert!(disks[0].format.as_deref().unwrap_or("").ends_with("#streamOptimized"));
        assert_eq!(disks[2].href, None);
        let pick = |w: Option<&str>| select(&disks, w).map(|d| d.disk_id.clone());
        assert_eq!(pick(None), Ok("vmdisk1".into()));
        assert_eq!(pick(Some("vmdisk2")), Ok("vmdisk2".into()));
        assert_eq!(pick(Some("a-disk2.vmdk")), Ok("vmdisk2".into()));
        assert_eq!(pick(Some("file2")), Ok("vmdisk2".into()));
        assert_eq!(pick(Some("blank")), Err(OvaError::NoFile { disk: "blank".into() }));
        let e = pick(Some("nope")).unwrap_err();
        assert!(e.to_string().contains("vmdisk1 (a-disk1.vmdk), vmdisk2 (a-disk2.vmdk), blank"), "{e}");
    }

    #[test]
    fn refuses_bad_descriptors_and_files() {
        assert!(matches!(parse_ovf("<Envelope><unclosed></Envelope>"), Err(OvaError::BadDescriptor(_))));
        assert!(matches!(parse_ovf("<Other/>"), Err(OvaError::BadDescriptor(_))));
        let dtd = "<?xml version=\"1.0\"?><!DOCTYPE lol [<!ENTITY a \"aaaa\">]><Envelope>&a;</Envelope>";
        assert!(matches!(parse_ovf(dtd), Err(OvaError::BadDescriptor(_))));
        assert_eq!(select(&parse_ovf("<Envelope/>").unwrap(), None), Err(OvaError::NoDisks));
        let with = |attrs: &str| {
            let t = ovf(&[("d", "f", "x.vmdk")]).replace("ovf:href=\"x.vmdk\"", attrs);
            select(&parse_ovf(&t).unwrap(), None).cloned()
        };
        assert!(matches!(with("ovf:href=\"http://evil/x.vmdk\""), Err(OvaError::ExternalFile { .. })));
        assert!(matches!(with("ovf:href=\"/etc/passwd\""), Err(OvaError::ExternalFile { .. })));
        assert!(matches!(with("ovf:href=\"x.vmdk\" ovf:chunkSize=\"1000\""), Err(OvaError::Chunked { .. })));
        assert!(matches!(
            with("ovf:href=\"x.vmdk\" ovf:compression=\"xz\""),
            Err(OvaError::UnsupportedCompression { .. })
        ));
        assert!(with("ovf:href=\"x.vmdk\" ovf:compression=\"gzip\"").is_ok());
        let t = ovf(&[("d", "f", "x.vmdk")]).replace("ovf:id=\"f\"", "ovf:id=\"g\"");
        assert!(matches!(select(&parse_ovf(&t).unwrap(), None), Err(OvaError::NoDisks)));
        assert!(matches!(select(&parse_ovf(&t).unwrap(), Some("d")), Err(OvaError::UnknownFileRef { .. })));
    }

    fn member_of(tar: &[u8], wanted: Option<&str>) -> Result<(DiskMember, Vec<u8>)> {
        let mut s = tar;
        with_disk(&mut s, wanted, |r, m| {
            let mut data = Vec::new();
            r.read_to_end(&mut data).map_err(|e| crate::error::untag(e, 0))?;
            Ok((m.clone(), data))
        })
    }

    fn ova_err(r: Result<(DiskMember, Vec<u8>)>) -> OvaError {
        match r {
            Err(Error::Format { source: FormatError::Ova(e), .. }) => e,
            other => panic!("expected an OVA error, got {other:?}"),
        }
    }

    #[test]
    fn streams_to_the_selected_member() {
        let text = ovf(&[("d1", "f1", "one.vmdk"), ("d2", "f2", "two.vmdk")]);
        let t =
            tar_of(&[("vm.ovf", text.as_bytes()), ("./one.vmdk", b"first"), ("two.vmdk", b"second"), ("vm.mf", b"")]);
        assert!(is_ova(&t));
        assert!(!is_ova(&tar_of(&[("disk.img", b"x")])));
        assert!(!is_ova(b"not a tar"));
        let (m, data) = member_of(&t, None).unwrap();
        assert_eq!(
            (m.disk_id.as_str(), m.href.as_str(), m.size, data.as_slice()),
            ("d1", "one.vmdk", 5, &b"first"[..])
        );
        assert_eq!(member_of(&t, Some("two.vmdk")).unwrap().1, b"second");
        assert_eq!(member_of(&t, Some("d2")).unwrap().1, b"second");
        let missing = tar_of(&[("vm.ovf", text.as_bytes()), ("one.vmdk", b"first")]);
        assert!(matches!(ova_err(member_of(&missing, Some("d2"))), OvaError::MissingMember { .. }));
        let no_ovf = tar_of(&[("one.vmdk", b"first")]);
        assert!(matches!(ova_err(member_of(&no_ovf, None)), OvaError::NoDescriptor(_)));
        // a symlink named like the disk
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_ustar();
        h.set_size(text.len() as u64);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, "vm.ovf", text.as_bytes()).unwrap();
        let mut l = tar::Header::new_ustar();
        l.set_entry_type(tar::EntryType::Symlink);
        l.set_size(0);
        b.append_link(&mut l, "one.vmdk", "/dev/sda").unwrap();
        let t = b.into_inner().unwrap();
        assert!(matches!(ova_err(member_of(&t, None)), OvaError::NotAFile { .. }));
        // a broken header after the descriptor
        let mut t = tar_of(&[("vm.ovf", text.as_bytes()), ("one.vmdk", b"first")]);
        let second = 512 + text.len().next_multiple_of(512);
        t[second + 148] ^= 0x11; // checksum field
        assert!(matches!(ova_err(member_of(&t, None)), OvaError::Archive(_)));
        // truncated in the middle of the descriptor
        let t = tar_of(&[("vm.ovf", text.as_bytes()), ("one.vmdk", b"first")]);
        assert!(member_of(&t[..700], None).is_err());
    }
}
