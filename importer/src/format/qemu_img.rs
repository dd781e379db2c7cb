//! Delegation to `qemu-img` for vmdk (other than streamOptimized, which [`super::vmdk`] converts), vhd (vpc),
//! vhdx and vdi. qemu-img needs a seekable local file: the source itself when it is an uncompressed local file,
//! else a spooled copy in the scratch directory.
//!
//! Safety: the format is always passed explicitly (`-f`, never probed); the image's own bytes are checked for
//! a parent image first ([`parent_of`]); `qemu-img info` runs next so images that reference other files
//! (backing/parent images, vmdk extents elsewhere) are refused before qemu-img would convert them.
//!
//! Every qemu-img run is bounded in memory (address space) and CPU time ([`qemu_process`]); a run stopped by a
//! signal or a limit fails with [`Error::QemuImgStopped`] saying so.

use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use serde::Deserialize;

use super::FormatError;
use super::parent::{self, ParentRef};
use super::qemu_process::{self, INSPECT_LIMITS, failure, first_lines, stopped, without_message};
use crate::detect::ImageFormat;
use crate::progress::Progress;
use crate::{Error, Result};

#[derive(Debug, Deserialize)]
struct RawInfo {
    #[serde(rename = "virtual-size")]
    virtual_size: u64,
    #[serde(rename = "cluster-size")]
    cluster_size: Option<u64>,
    #[serde(rename = "backing-filename")]
    backing_filename: Option<String>,
    encrypted: Option<bool>,
    #[serde(rename = "format-specific")]
    format_specific: Option<serde_json::Value>,
}

/// What `qemu-img info` says about a local image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QemuInfo {
    /// Virtual size in bytes.
    pub virtual_size: u64,
    /// Cluster size, when the format has one.
    pub cluster_size: Option<u64>,
    /// Backing/parent file name.
    pub backing_file: Option<String>,
    /// Whether qemu-img reports encryption.
    pub encrypted: bool,
    /// Extent file names (vmdk).
    pub extents: Vec<String>,
}

/// Looks for a parent image in the image file's own bytes ([`parent`]), whatever qemu-img would report.
pub fn parent_of(path: &Path, format: ImageFormat) -> Result<Option<ParentRef>> {
    let opened = crate::source::file::open(path)?;
    let Some(access) = opened.random_access else { return Ok(None) };
    parent::find(format, access.as_ref()).map_err(|source| Error::OpenSource { path: path.to_path_buf(), source })
}

/// Runs `qemu-img info -f FORMAT --output=json PATH`.
pub fn info(path: &Path, format: ImageFormat) -> Result<QemuInfo> {
    let args = ["info".as_ref(), "-U".as_ref(), "-f".as_ref(), format.qemu_name().as_ref(), "--output=json".as_ref()];
    let args: Vec<&std::ffi::OsStr> = args.into_iter().chain([path.as_os_str()]).collect();
    let out = qemu_process::run("info", &args, INSPECT_LIMITS)?;
    if !out.status.success() {
        return Err(failure("info", out.status, &out.stderr, INSPECT_LIMITS));
    }
    let raw: RawInfo = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::QemuImg { operation: "info", message: format!("unexpected output: {e}") })?;
    let extents = raw
        .format_specific
        .as_ref()
        .and_then(|v| v.pointer("/data/extents"))
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|e| e.get("filename").and_then(|f| f.as_str()).map(String::from)).collect())
        .unwrap_or_default();
    Ok(QemuInfo {
        virtual_size: raw.virtual_size,
        cluster_size: raw.cluster_size,
        backing_file: raw.backing_filename,
        encrypted: raw.encrypted.unwrap_or(false),
        extents,
    })
}

/// Refuses images that reference other files or are encrypted.
pub fn check_safe(path: &Path, format: ImageFormat, info: &QemuInfo) -> Result<()> {
    let refuse = |m: String| Err(Error::Format { format, source: FormatError::Refused(m) });
    if let Some(b) = &info.backing_file {
        return refuse(format!("the image has a backing file {b:?}; images with backing files are refused"));
    }
    if info.encrypted {
        return refuse(String::from("the image is encrypted; encrypted images are refused"));
    }
    let me = path.to_string_lossy();
    if let Some(other) = info.extents.iter().find(|e| e.as_str() != me) {
        return refuse(format!("the image references another file {other:?}; multi-file images are refused"));
    }
    Ok(())
}

/// Runs `qemu-img check` where the format supports it (vmdk, vhdx, vdi) and refuses images it finds
/// truncated or corrupt; for vdi (whose check does not look at the file size) the block map is also
/// checked against the file size. qemu-img itself would read missing data as zeroes.
pub fn check_integrity(path: &Path, format: ImageFormat) -> Result<()> {
    let refuse = |m: String| Err(Error::Format { format, source: FormatError::Invalid(m) });
    if format == ImageFormat::Vdi
        && let Some(m) = vdi_beyond_eof(path)
    {
        return refuse(m);
    }
    let args = ["check".as_ref(), "-U".as_ref(), "-f".as_ref(), format.qemu_name().as_ref(), path.as_os_str()];
    let out = qemu_process::run("check", &args, INSPECT_LIMITS)?;
    match out.status.code() {
        // 0: clean; 3: only leaked clusters (harmless for reading); 63: the format has no check.
        Some(0) | Some(3) | Some(63) => Ok(()),
        _ => {
            if let Some(stop) = stopped(out.status, &out.stderr, INSPECT_LIMITS) {
                return Err(Error::QemuImgStopped { operation: "check", stop });
            }
            let text: Vec<String> =
                [first_lines(&out.stdout), first_lines(&out.stderr)].into_iter().filter(|t| !t.is_empty()).collect();
            let text = if text.is_empty() { without_message(out.status) } else { text.join(" ") };
            refuse(format!("the image is truncated or corrupt (qemu-img check: {text})"))
        }
    }
}

/// VDI: the highest allocated block must lie inside the file.
fn vdi_beyond_eof(path: &Path) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let f = std::fs::File::open(path).ok()?;
    let size = f.metadata().ok()?.len();
    let mut h = [0u8; 0x190];
    f.read_exact_at(&mut h, 0).ok()?;
    let le32 = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    let (bmap, data, block, blocks) = (le32(0x154), le32(0x158), le32(0x178), le32(0x180));
    if block == 0 || blocks > (64 << 20) {
        return Some(format!("invalid vdi header (block size {block}, {blocks} blocks)"));
    }
    let mut map = vec![0u8; blocks as usize * 4];
    if f.read_exact_at(&mut map, u64::from(bmap)).is_err() {
        return Some(format!(
            "the image is truncated: its block map ({} bytes at {bmap}) lies beyond the end of the file",
            map.len()
        ));
    }
    let max =
        map.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).filter(|&e| e < 0xffff_fffe).max()?;
    let end = u64::from(data) + (u64::from(max) + 1) * u64::from(block);
    (end > size).then(|| format!("the image is truncated: block {max} ends at byte {end}, the file has {size} bytes"))
}

/// Converts `src` (of `virtual_size` bytes) to raw into `dest` (which exists: a fresh empty file or a block
/// device), reporting progress from `qemu-img -p`.
pub fn convert(
    src: &Path,
    format: ImageFormat,
    dest: &Path,
    dest_is_fresh_file: bool,
    virtual_size: u64,
    progress: &Progress,
) -> Result<()> {
    let limits = qemu_process::convert_limits(virtual_size);
    let mut cmd = qemu_process::command(limits);
    cmd.args(["convert", "-p", "-U", "-n", "-f", format.qemu_name(), "-O", "raw", "-t", "writeback"]);
    if dest_is_fresh_file {
        cmd.arg("--target-is-zero");
    }
    cmd.arg(src)
        .arg(dest)
        .env("MALLOC_ARENA_MAX", qemu_process::CONVERT_MALLOC_ARENAS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = qemu_process::spawn(&mut cmd, "convert")?;
    let stderr = child.stderr.take();
    let err_thread = std::thread::spawn(move || {
        let mut s = Vec::new();
        if let Some(mut e) = stderr {
            let _ = e.read_to_end(&mut s);
        }
        s
    });
    if let Some(mut out) = child.stdout.take() {
        let mut buf = [0u8; 256];
        let mut line = Vec::new();
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            for &b in &buf[..n] {
                if b == b'\r' || b == b'\n' {
                    if let Some(p) = parse_progress(&String::from_utf8_lossy(&line)) {
                        progress.set_total(Some(10_000));
                        progress.set_done((p * 100.0) as u64);
                    }
                    line.clear();
                } else {
                    line.push(b);
                }
            }
        }
    }
    let status = child
        .wait()
        .map_err(|e| Error::QemuImg { operation: "convert", message: format!("waiting for qemu-img: {e}") })?;
    let stderr = err_thread.join().unwrap_or_default();
    if !status.success() {
        return Err(failure("convert", status, &stderr, limits));
    }
    Ok(())
}

/// Parses qemu-img's `    (12.34/100%)` progress output.
pub fn parse_progress(line: &str) -> Option<f64> {
    let inner = line.trim().strip_prefix('(')?.strip_suffix(")")?;
    let (pct, rest) = inner.split_once('/')?;
    (rest == "100%").then_some(())?;
    pct.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;

    #[test]
    fn progress_lines() {
        assert_eq!(parse_progress("    (45.67/100%)"), Some(45.67));
        assert_eq!(parse_progress("(100.00/100%)"), Some(100.0));
        assert_eq!(parse_progress("(1/2)"), None);
        assert_eq!(parse_progress("garbage"), None);
    }
}
