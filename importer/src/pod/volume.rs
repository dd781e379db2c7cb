//! The target volume of a worker pod and its sizing, as CDI does it (`specs/cdi.md` §2.3, §2.7): the volume is
//! the block device when one exists at the device path (decided by `stat`), else the data directory; the space
//! it offers is the device size, or `min(free space, the PVC's request)`; an image file is grown to
//! `min(request, GetUsableSpace(overhead, available))`. Shared by the importer pod and the upload server.

use std::fs;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use contracts::cdi::sizing::usable_space;

use crate::Error;
use crate::plan::SizeRule;

/// The target volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Volume {
    /// A filesystem volume: the image goes to a file in this directory.
    Filesystem(PathBuf),
    /// A block volume: the image goes to the device.
    Block(PathBuf),
}

impl Volume {
    /// Decides the volume as CDI does: `Block(block_device)` if that path is a block device, else
    /// `Filesystem(data_dir)`.
    pub fn detect(block_device: &Path, data_dir: &Path) -> Volume {
        match fs::metadata(block_device) {
            Ok(m) if m.file_type().is_block_device() => Volume::Block(block_device.to_path_buf()),
            _ => Volume::Filesystem(data_dir.to_path_buf()),
        }
    }

    /// Bytes the volume offers: the device size, or `min(free space, image_size)` (the PVC's request).
    pub fn available(&self, image_size: Option<u64>) -> Result<u64, Error> {
        self.available_reclaiming(image_size, 0)
    }

    /// [`available`](Self::available), counting `reclaim` bytes the import frees or reuses (an existing image
    /// file it replaces or resumes) as free.
    fn available_reclaiming(&self, image_size: Option<u64>, reclaim: u64) -> Result<u64, Error> {
        match self {
            Volume::Block(dev) => {
                let mut f = fs::File::open(dev).map_err(|source| Error::Sink { path: dev.clone(), source })?;
                f.seek(SeekFrom::End(0)).map_err(|source| Error::Sink { path: dev.clone(), source })
            }
            Volume::Filesystem(dir) => {
                let st = rustix::fs::statvfs(dir).map_err(|e| Error::Sink { path: dir.clone(), source: e.into() })?;
                let free = st.f_bavail.saturating_mul(st.f_frsize).saturating_add(reclaim);
                Ok(image_size.map_or(free, |s| s.min(free)))
            }
        }
    }

    /// Where an image import writes and how the target is sized: in a filesystem volume the file `file`, grown
    /// to `min(image_size, usable space)` (never shrunk below the image); a block device is not resized, its
    /// size is the limit.
    pub fn import_target(
        &self,
        file: &Path,
        overhead: f64,
        image_size: Option<u64>,
    ) -> Result<(PathBuf, SizeRule), Error> {
        // An image file left by an interrupted run is replaced or resumed: its blocks count as free, so a resumed
        // import sizes its target as the first run did.
        let reclaim = fs::metadata(file).map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512).unwrap_or(0);
        let available = self.available_reclaiming(image_size, reclaim)?;
        Ok(match self {
            Volume::Filesystem(_) => {
                let usable = usable_space(overhead, available);
                let target = image_size.map_or(usable, |s| s.min(usable));
                (file.to_path_buf(), SizeRule::Fill { usable: target, available })
            }
            Volume::Block(dev) => (dev.clone(), SizeRule::Fill { usable: 0, available }),
        })
    }
}

/// Removes everything in `dir` except `lost+found` (CDI cleans the target before writing, so a retry never
/// trips over its own leftovers).
pub fn clean_dir(dir: &Path) -> Result<(), Error> {
    let entries = fs::read_dir(dir).map_err(|source| Error::Sink { path: dir.to_path_buf(), source })?;
    for e in entries.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == "lost+found") {
            continue;
        }
        let r = match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&p),
            _ => fs::remove_file(&p),
        };
        r.map_err(|source| Error::Sink { path: p.clone(), source })?;
    }
    Ok(())
}

/// Gives an image file CDI's mode 0660 (the VM's qemu group reads and writes it).
pub fn set_mode(path: &Path) -> Result<(), Error> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o660))
        .map_err(|source| Error::Sink { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_is_a_filesystem_volume_sized_by_free_space_and_request() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let vol = Volume::detect(&dir.path().join("no-device"), dir.path());
        assert_eq!(vol, Volume::Filesystem(dir.path().to_path_buf()));
        assert_eq!(vol.available(Some(5 << 20)).ok(), Some(5 << 20), "the request caps the free space");
        let file = dir.path().join("disk.img");
        let (dest, rule) = vol.import_target(&file, 0.0, Some((5 << 20) + 7)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dest, file);
        assert_eq!(rule, SizeRule::Fill { usable: 5 << 20, available: (5 << 20) + 7 });
        std::fs::write(dir.path().join("old"), b"x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(dir.path().join("lost+found")).unwrap_or_else(|e| panic!("{e}"));
        clean_dir(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let left: Vec<_> =
            std::fs::read_dir(dir.path()).into_iter().flatten().flatten().map(|e| e.file_name()).collect();
        assert_eq!(left, ["lost+found"]);
    }
}
