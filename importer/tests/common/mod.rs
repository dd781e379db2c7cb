//! Helpers shared by the importer's integration tests (images made by qemu-img, deterministic data).
#![allow(dead_code)] // each test binary uses its own subset

use std::fs::File;
use std::path::Path;
use std::process::Command;

/// One MiB.
pub const MIB: u64 = 1 << 20;

/// Runs qemu-img with `args`; panics with its stderr when it fails.
pub fn qemu_img(args: &[&str]) {
    let out = Command::new("qemu-img")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("qemu-img is required for these tests (scripts/install-deps.sh): {e}"));
    assert!(out.status.success(), "qemu-img {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `path` as a string.
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Deterministic pseudo-random bytes (incompressible).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A raw image of `size` bytes with `(offset, bytes)` written into it (the rest are holes).
pub fn raw_image(path: &Path, size: u64, pieces: &[(u64, Vec<u8>)]) {
    let f = File::create(path).unwrap();
    f.set_len(size).unwrap();
    for (off, data) in pieces {
        std::os::unix::fs::FileExt::write_all_at(&f, data, *off).unwrap();
    }
}
