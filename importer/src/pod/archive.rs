//! Content type `archive`: a tar stream (optionally compressed; the pipeline has already decompressed it)
//! extracted into a filesystem volume ([`extract_tar`], for the importer pod and the upload server), like CDI's
//! `tar --preserve-permissions --no-same-owner -x`, but refusing anything that could write outside the
//! directory.
//!
//! Rules: entry paths must be relative with no `..` component; no entry is written through a symlink (every
//! parent component must be a real directory); symlink targets must be relative and stay inside the
//! directory; hard links must point at a regular file extracted inside it; device nodes and FIFOs are
//! refused. Modes are kept (`& 0o777`, no set-id bits); ownership is not changed. Directory modes are applied
//! at the end so restrictive directories do not block their own contents.

use std::fs::{self, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::volume::{Volume, clean_dir};
use crate::detect::ImageFormat;
use crate::format::FormatError;
use crate::pipeline::Probed;
use crate::progress::{Phase, Progress};
use crate::{Error, Result};

/// What an extraction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiveReport {
    /// Regular files written.
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

fn refuse(msg: String) -> Error {
    Error::Format { format: ImageFormat::Tar, source: FormatError::Refused(msg) }
}

/// A safe relative path: normal components only.
fn clean(p: &Path) -> Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => return Err(refuse(format!("archive entry {} contains '..'", p.display()))),
            Component::RootDir | Component::Prefix(_) => {
                return Err(refuse(format!("archive entry {} is an absolute path", p.display())));
            }
        }
    }
    Ok(out)
}

/// Creates the parent directories of `rel` inside `root`, refusing to pass through symlinks or files.
fn ensure_parents(root: &Path, rel: &Path) -> Result<()> {
    let mut cur = root.to_path_buf();
    let parents: Vec<_> = rel.parent().map(|p| p.components().collect()).unwrap_or_default();
    for c in parents {
        cur.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(refuse(format!(
                    "archive entry {} would be written through {} (not a directory)",
                    rel.display(),
                    cur.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir(&cur).map_err(|source| Error::Sink { path: cur.clone(), source })?;
            }
            Err(source) => return Err(Error::Sink { path: cur.clone(), source }),
        }
    }
    Ok(())
}

/// Removes a non-directory entry at `p` so a new one can be created without following a symlink.
fn clear(p: &Path) -> Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => Err(refuse(format!("archive entry {} replaces a directory", p.display()))),
        Ok(_) => fs::remove_file(p).map_err(|source| Error::Sink { path: p.to_path_buf(), source }),
        Err(_) => Ok(()),
    }
}

/// Whether `target` (a symlink's target, relative to the link's directory `link_dir` inside the root)
/// stays inside the root.
fn symlink_stays_inside(link_dir: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: i64 = link_dir.components().count() as i64;
    for c in target.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return false;
                }
            }
            _ => return false,
        }
    }
    true
}

/// Extracts the tar `stream` into `root` (which must exist).
pub fn extract(stream: &mut dyn Read, root: &Path) -> Result<ArchiveReport> {
    let mut archive = tar::Archive::new(stream);
    let mut report = ArchiveReport::default();
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    let entries = archive.entries().map_err(|e| refuse(format!("not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| crate::error::untag_or(e, |e| refuse(format!("corrupt tar archive: {e}"))))?;
        let raw_path = entry.path().map_err(|e| refuse(format!("bad entry name: {e}")))?.into_owned();
        let rel = clean(&raw_path)?;
        if rel.as_os_str().is_empty() {
            continue; // "./"
        }
        let dest = root.join(&rel);
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        let kind = entry.header().entry_type();
        match kind {
            tar::EntryType::Directory => {
                ensure_parents(root, &rel)?;
                match fs::symlink_metadata(&dest) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        return Err(refuse(format!(
                            "archive entry {} replaces a file with a directory",
                            rel.display()
                        )));
                    }
                    Err(_) => fs::create_dir(&dest).map_err(|source| Error::Sink { path: dest.clone(), source })?,
                }
                dir_modes.push((dest, mode));
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                ensure_parents(root, &rel)?;
                clear(&dest)?;
                let mut f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                    .open(&dest)
                    .map_err(|source| Error::Sink { path: dest.clone(), source })?;
                let n = io::copy(&mut entry, &mut f)
                    .map_err(|e| crate::error::untag_or(e, |e| Error::Sink { path: dest.clone(), source: e }))?;
                f.set_permissions(fs::Permissions::from_mode(mode))
                    .map_err(|source| Error::Sink { path: dest.clone(), source })?;
                report.files += 1;
                report.bytes += n;
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| refuse(format!("bad link target: {e}")))?
                    .ok_or_else(|| refuse(format!("symlink {} has no target", rel.display())))?
                    .into_owned();
                let link_dir = rel.parent().unwrap_or(Path::new(""));
                if !symlink_stays_inside(link_dir, &target) {
                    return Err(refuse(format!(
                        "symlink {} -> {} points outside the target directory",
                        rel.display(),
                        target.display()
                    )));
                }
                ensure_parents(root, &rel)?;
                clear(&dest)?;
                std::os::unix::fs::symlink(&target, &dest)
                    .map_err(|source| Error::Sink { path: dest.clone(), source })?;
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| refuse(format!("bad link target: {e}")))?
                    .ok_or_else(|| refuse(format!("hard link {} has no target", rel.display())))?
                    .into_owned();
                let target_rel = clean(&target).map_err(|_| {
                    refuse(format!(
                        "hard link {} -> {} points outside the target directory",
                        rel.display(),
                        target.display()
                    ))
                })?;
                let src = root.join(&target_rel);
                ensure_parents(root, &target_rel)?;
                match fs::symlink_metadata(&src) {
                    Ok(m) if m.is_file() => {}
                    _ => {
                        return Err(refuse(format!(
                            "hard link {} -> {} does not point at an extracted regular file",
                            rel.display(),
                            target.display()
                        )));
                    }
                }
                ensure_parents(root, &rel)?;
                clear(&dest)?;
                fs::hard_link(&src, &dest).map_err(|source| Error::Sink { path: dest.clone(), source })?;
            }
            tar::EntryType::XHeader
            | tar::EntryType::XGlobalHeader
            | tar::EntryType::GNULongName
            | tar::EntryType::GNULongLink => {}
            other => {
                return Err(refuse(format!("archive entry {} has unsupported type {other:?}", rel.display())));
            }
        }
    }
    for (dir, mode) in dir_modes.into_iter().rev() {
        fs::set_permissions(&dir, fs::Permissions::from_mode(mode))
            .map_err(|source| Error::Sink { path: dir, source })?;
    }
    Ok(report)
}

/// Archive content into a filesystem volume (a block volume is refused), for the importer and the upload
/// server: cleans the volume's directory, probes the stream with `probe`, refuses anything but a tar (naming the
/// `what`: "source", "upload"), extracts it, reads any trailing padding (so a checksum covers every byte served)
/// and runs `verify`. On failure the directory is cleaned again, so no partial tree is left behind.
pub fn extract_tar(
    vol: &Volume,
    what: &str,
    progress: &Progress,
    probe: impl FnOnce() -> Result<Probed>,
    verify: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let Volume::Filesystem(dir) = vol else {
        return Err(Error::InvalidRequest(String::from(
            "content type archive needs a filesystem volume, not a block device",
        )));
    };
    clean_dir(dir)?;
    let probed = probe()?;
    // An OVA is a tar too: as content type archive it is extracted like any other.
    if !matches!(probed.format, ImageFormat::Tar | ImageFormat::Ova) {
        return Err(Error::Format {
            format: probed.format,
            source: FormatError::Invalid(format!(
                "content type archive needs a tar archive, the {what} is {}",
                probed.format
            )),
        });
    }
    progress.start_phase(Phase::Import, probed.size);
    progress.set_done(progress.snapshot().source_bytes);
    let mut stream = probed.stream;
    let r = extract(&mut stream, dir)
        .and_then(|_| {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match io::Read::read(&mut stream, &mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(_) => {}
                    Err(e) => break Err(crate::error::untag(e, 0)),
                }
            }
        })
        .and_then(|()| verify());
    if let Err(e) = r {
        let _ = clean_dir(dir);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_with(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap_or_default()
    }

    fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(mode);
        h
    }

    /// Writes a raw name into the header (tar::Builder refuses '..' and absolute paths itself).
    fn raw_entry(b: &mut tar::Builder<Vec<u8>>, kind: tar::EntryType, name: &str, link: Option<&str>, data: &[u8]) {
        let mut h = header(kind, data.len() as u64, 0o644);
        if let Some(gnu) = h.as_gnu_mut() {
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(l) = link {
                gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
            }
        }
        h.set_cksum();
        b.append(&h, data).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn extracts_files_dirs_links_with_modes() {
        let t = tar_with(|b| {
            raw_entry(b, tar::EntryType::Directory, "d/", None, b"");
            let mut h = header(tar::EntryType::Regular, 5, 0o750);
            b.append_data(&mut h, "d/x.sh", &b"hello"[..]).unwrap_or_else(|e| panic!("{e}"));
            raw_entry(b, tar::EntryType::Symlink, "d/l", Some("x.sh"), b"");
            raw_entry(b, tar::EntryType::Link, "d/h", Some("d/x.sh"), b"");
        });
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let r = extract(&mut &t[..], dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r, ArchiveReport { files: 1, bytes: 5 });
        let p = dir.path().join("d/x.sh");
        assert_eq!(fs::read(&p).unwrap_or_default(), b"hello");
        assert_eq!(fs::metadata(&p).map(|m| m.permissions().mode() & 0o777).unwrap_or(0), 0o750);
        assert_eq!(fs::read(dir.path().join("d/l")).unwrap_or_default(), b"hello");
        assert_eq!(fs::read(dir.path().join("d/h")).unwrap_or_default(), b"hello");
    }

    #[test]
    fn refuses_escapes() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("..", tar_with(|b| raw_entry(b, tar::EntryType::Regular, "../evil", None, b"x"))),
            ("absolute", tar_with(|b| raw_entry(b, tar::EntryType::Regular, "/tmp/evil", None, b"x"))),
            ("outside", tar_with(|b| raw_entry(b, tar::EntryType::Symlink, "l", Some("../../etc"), b""))),
            ("outside", tar_with(|b| raw_entry(b, tar::EntryType::Symlink, "l", Some("/etc"), b""))),
            (
                "not a directory",
                tar_with(|b| {
                    raw_entry(b, tar::EntryType::Symlink, "l", Some("."), b"");
                    raw_entry(b, tar::EntryType::Regular, "l/f", None, b"x");
                }),
            ),
            ("hard link", tar_with(|b| raw_entry(b, tar::EntryType::Link, "h", Some("../../etc/passwd"), b""))),
            ("unsupported type", tar_with(|b| raw_entry(b, tar::EntryType::Char, "c", None, b""))),
        ];
        for (want, t) in cases {
            let outer = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
            let root = outer.path().join("root");
            fs::create_dir(&root).unwrap_or_else(|e| panic!("{e}"));
            let e = extract(&mut &t[..], &root).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(e.contains(want), "want {want:?}, got {e:?}");
            assert!(!outer.path().join("evil").exists());
            let names: Vec<_> = fs::read_dir(outer.path()).map(|d| d.count()).into_iter().collect();
            assert_eq!(names, vec![1], "nothing written beside the root");
        }
    }
}
