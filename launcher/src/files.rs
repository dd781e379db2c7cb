//! Creating what QEMU must own: libvirt chowns nothing (the image's qemu.conf has `dynamic_ownership = 0`), so
//! every file and directory the launcher makes for the guest belongs to the `qemu` user from the start.

use std::io;
use std::path::Path;

use rustix::fs::{Gid, Uid};

/// The `qemu` user and group (107:107).
pub fn qemu_owner() -> u32 {
    u32::try_from(contracts::kubevirt::consts::QEMU_UID).unwrap_or(107)
}

/// Makes `uid:uid` the owner of `path` (following symlinks: the launcher chowns what it created and the images
/// the pod's volumes mount).
pub fn chown(path: &Path, uid: u32) -> io::Result<()> {
    rustix::fs::chown(path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(uid))).map_err(io::Error::from)
}

/// Makes `uid:uid` the owner of `path` itself (a symlink is not followed: what the privileged set-up chowns in a
/// pod's volumes).
pub fn lchown(path: &Path, uid: u32) -> io::Result<()> {
    rustix::fs::chownat(
        rustix::fs::CWD,
        path,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(uid)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(io::Error::from)
}

/// Makes `gid` the group of `path` (the owner stays).
pub fn chgrp(path: &Path, gid: u32) -> io::Result<()> {
    rustix::fs::chown(path, None, Some(Gid::from_raw(gid))).map_err(io::Error::from)
}

/// Creates `dir` and its missing parents; those it created are owned by `owner` when given (existing ones are
/// left alone).
pub fn create_dirs(dir: &Path, owner: Option<u32>) -> io::Result<()> {
    let missing: Vec<&Path> = dir.ancestors().take_while(|p| !p.as_os_str().is_empty() && !p.exists()).collect();
    for d in missing.into_iter().rev() {
        match std::fs::create_dir(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
        if let Some(uid) = owner {
            chown(d, uid)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// Needs root (chown to another user).
    #[test]
    fn created_directories_get_the_owner_existing_ones_keep_theirs() {
        let t = tempfile::tempdir().unwrap();
        let deep = t.path().join("a/b/c");
        create_dirs(&deep, None).unwrap();
        assert!(deep.is_dir());
        create_dirs(&deep, None).unwrap();
        let other = t.path().join("a/x/y");
        create_dirs(&other, Some(qemu_owner())).unwrap();
        assert_eq!(std::fs::metadata(t.path().join("a")).unwrap().uid(), rustix::process::geteuid().as_raw());
        assert_eq!(std::fs::metadata(t.path().join("a/x")).unwrap().uid(), 107);
        assert_eq!(std::fs::metadata(&other).unwrap().gid(), 107);
    }
}
