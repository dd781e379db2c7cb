//! Resuming an interrupted import (`importer import --resume`, what pod mode does on a Filesystem volume): the
//! importer is killed mid-transfer with SIGKILL (as an OOM kill or a pod deleted past its grace period), and the
//! next run continues where its durable data ends, reading only the rest of the source from nginx; a source that
//! changed in between makes it start over. nginx's access log is the witness of what was read.
//!
//! Needs `tests/infra/import-env.sh up` (the rate-limited `/slow/` location serves the corpus directory; each test
//! puts its own file there and removes it).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::*;
use sha2::{Digest, Sha256};

/// Size of each test's source: 1.5 MiB, about 15 s through `/slow/` (100 KiB/s).
const LEN: usize = 1536 << 10;

/// A file of the corpus directory (served by `/slow/`), removed on drop.
struct SlowFile {
    path: PathBuf,
    url: String,
    token: String,
}

impl SlowFile {
    fn new(tag: &str, seed: u8) -> Self {
        let token = unique_token(tag);
        let name = format!("resume-{token}.raw");
        let path = env().corpus.join(&name);
        fs::write(&path, content(seed)).unwrap();
        SlowFile { path, url: format!("{}/slow/{name}", env().http_plain), token }
    }

    /// The same content as a qcow2 made by `qemu-img convert` (64 KiB clusters, the holes left out).
    fn qcow2(tag: &str, seed: u8) -> Self {
        let token = unique_token(tag);
        let name = format!("resume-{token}.qcow2");
        let path = env().corpus.join(&name);
        let raw = env().corpus.join(format!("resume-{token}.src"));
        fs::write(&raw, content(seed)).unwrap();
        let st = Command::new("qemu-img").args(["convert", "-f", "raw", "-O", "qcow2"]).arg(&raw).arg(&path).status();
        let _ = fs::remove_file(&raw);
        assert!(st.unwrap().success(), "qemu-img convert failed");
        SlowFile { path, url: format!("{}/slow/{name}", env().http_plain), token }
    }

    /// The same content compressed by `xz -T2` in blocks of 256 KiB of output (as multi-threaded xz writes them).
    fn xz(tag: &str, seed: u8) -> Self {
        let token = unique_token(tag);
        let name = format!("resume-{token}.raw.xz");
        let path = env().corpus.join(&name);
        let raw = env().corpus.join(format!("resume-{token}.src"));
        fs::write(&raw, content(seed)).unwrap();
        let out = Command::new("xz").args(["-T2", "--block-size=262144", "-1", "-c"]).arg(&raw).output();
        let _ = fs::remove_file(&raw);
        let out = out.unwrap();
        assert!(out.status.success(), "xz failed");
        fs::write(&path, out.stdout).unwrap();
        SlowFile { path, url: format!("{}/slow/{name}", env().http_plain), token }
    }

    /// (compressed, uncompressed) offsets of the file's xz blocks, as `xz --list` reports them.
    fn xz_blocks(&self) -> Vec<(u64, u64)> {
        let out = Command::new("xz").args(["--robot", "--list", "-vv"]).arg(&self.path).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("block\t"))
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[4].parse().unwrap(), f[5].parse().unwrap())
            })
            .collect()
    }

    /// The same content compressed by `gzip -6`.
    fn gzip(tag: &str, seed: u8) -> Self {
        let token = unique_token(tag);
        let name = format!("resume-{token}.raw.gz");
        let path = env().corpus.join(&name);
        let mut gz =
            Command::new("gzip").args(["-n", "-6", "-c"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let mut stdin = gz.stdin.take().unwrap();
        let feeder = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &content(seed)));
        let out = gz.wait_with_output().unwrap();
        feeder.join().unwrap().unwrap();
        assert!(out.status.success(), "gzip failed");
        fs::write(&path, out.stdout).unwrap();
        SlowFile { path, url: format!("{}/slow/{name}", env().http_plain), token }
    }
}

impl Drop for SlowFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Pseudo-random bytes with a run of zeroes in the middle (a hole in the target).
fn content(seed: u8) -> Vec<u8> {
    let mut x = 0x9e37_79b9_u32 ^ u32::from(seed);
    let mut v: Vec<u8> = (0..LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    v[512 << 10..768 << 10].fill(0);
    v
}

fn checkpoint_of(dest: &Path) -> PathBuf {
    dest.with_file_name(format!(".{}.import-checkpoint", dest.file_name().unwrap().to_string_lossy()))
}

/// `importer import URL DEST --resume` in the background.
fn spawn(url: &str, dest: &Path, extra: &[&str]) -> Child {
    Command::new(importer_bin())
        .args(["import", url])
        .arg(dest)
        .args(["--resume", "--no-progress"])
        .args(extra)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits until the checkpoint next to `dest` names at least `min` durable bytes; returns them.
fn wait_checkpoint(dest: &Path, min: u64) -> u64 {
    let start = Instant::now();
    loop {
        let durable = fs::read(checkpoint_of(dest))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["durable"].as_u64());
        if let Some(d) = durable.filter(|&d| d >= min) {
            return d;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "no checkpoint of {min} bytes within 60 s: {durable:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills the importer with SIGKILL once `min` bytes are durable; returns the durable bytes the checkpoint names.
fn kill_after(child: &mut Child, dest: &Path, min: u64) -> u64 {
    let durable = wait_checkpoint(dest, min);
    child.kill().unwrap();
    child.wait().unwrap();
    // The checkpoint is rewritten atomically; read it once more after the process is gone.
    wait_checkpoint(dest, durable)
}

/// (status, body bytes, Range header) of nginx's access-log lines for GETs of `token`, in order.
fn gets(token: &str) -> Vec<(u16, u64, String)> {
    let mut out = Vec::new();
    for _ in 0..100 {
        out = access_log_lines(token)
            .iter()
            .filter(|l| l.contains("\"GET "))
            .map(|l| {
                let after = l.split("HTTP/1.1\" ").nth(1).unwrap_or_default();
                let mut f = after.split_whitespace();
                let status = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
                let bytes = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
                let range = l.split("range=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
                // nginx writes an absent header as "-".
                (status, bytes, range.trim_start_matches('-').to_owned())
            })
            .collect();
        // nginx logs a request when it completes; the killed one may lag.
        if out.len() >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    out
}

fn run_to_end(url: &str, dest: &Path, extra: &[&str]) {
    let out = Command::new(importer_bin())
        .args(["import", url])
        .arg(dest)
        .args(["--resume", "--no-progress", "--output", "json"])
        .args(extra)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("IMPORTER_LOG", "info")
        .output()
        .unwrap();
    assert!(out.status.success(), "resumed run failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// What nginx logged once the resumed run is done: exactly one ranged GET from `from` (206, the rest of the
/// `size` bytes), and no GET without a range but the killed run's. With `hashed`, the bytes before `from` were
/// read again by Range, only to be hashed (the checksum covers every byte).
fn assert_read_only_the_rest(token: &str, from: u64, size: u64, hashed: bool) -> Vec<(u16, u64, String)> {
    let log = gets(token);
    let resumed: Vec<_> = log.iter().filter(|(_, _, r)| *r == format!("bytes={from}-")).collect();
    assert_eq!(resumed.len(), 1, "one ranged GET from byte {from}: {log:?}");
    assert_eq!((resumed[0].0, resumed[0].1), (206, size - from), "{log:?}");
    if hashed {
        assert!(log.iter().any(|(s, b, r)| *s == 206 && r.starts_with("bytes=0-") && *b == from), "{log:?}");
    }
    assert_eq!(log.iter().filter(|(_, _, r)| r.is_empty()).count(), 1, "only the killed run read it whole: {log:?}");
    log
}

#[test]
fn a_killed_import_resumes_from_its_durable_data_and_reads_only_the_rest() {
    let src = SlowFile::new("resume", 1);
    let want = content(1);
    let hex: String = Sha256::digest(&want).iter().map(|b| format!("{b:02x}")).collect();
    let sum = format!("sha256:{hex}");
    let out = OutDir::new("resume-killed");
    let dest = out.join("disk.img");
    let mut first = spawn(&src.url, &dest, &["--checksum", &sum]);
    let durable = kill_after(&mut first, &dest, 400 << 10);
    assert!(durable < LEN as u64, "the import finished before it was killed");

    run_to_end(&src.url, &dest, &["--checksum", &sum]);
    assert_eq!(fs::read(&dest).unwrap(), want, "resumed image differs from the source");
    assert!(!checkpoint_of(&dest).exists(), "checkpoint left after success");
    assert_read_only_the_rest(&src.token, durable, LEN as u64, true);
}

#[test]
fn a_source_that_changed_makes_the_import_start_over() {
    let src = SlowFile::new("resume-changed", 2);
    let out = OutDir::new("resume-changed");
    let dest = out.join("disk.img");
    let mut first = spawn(&src.url, &dest, &[]);
    kill_after(&mut first, &dest, 200 << 10);
    // Same length, new bytes and a new modification time (nginx's ETag and Last-Modified change).
    std::thread::sleep(Duration::from_millis(1100));
    let changed = content(3);
    fs::write(&src.path, &changed).unwrap();

    run_to_end(&src.url, &dest, &[]);
    assert_eq!(fs::read(&dest).unwrap(), changed, "the new version of the source must be imported whole");
    let log = gets(&src.token);
    let last = log.last().cloned().unwrap_or_default();
    assert_eq!((last.0, last.1, last.2.as_str()), (200, LEN as u64, ""), "the final GET is whole: {log:?}");
}

#[test]
fn a_checkpoint_of_another_source_is_not_used() {
    let src = SlowFile::new("resume-other", 4);
    let out = OutDir::new("resume-other");
    let dest = out.join("disk.img");
    let mut first = spawn(&src.url, &dest, &[]);
    kill_after(&mut first, &dest, 200 << 10);
    // Another source into the same target: the checkpoint names the first one, so this import starts over.
    let tiny = entry("tiny.raw");
    let other = env().plain_url(&tiny.name);
    run_to_end(&other, &dest, &[]);
    assert_image_eq(&dest, tiny, None);
    assert!(!checkpoint_of(&dest).exists());
}

#[test]
fn a_killed_qcow2_import_resumes_from_the_converters_frontier() {
    let src = SlowFile::qcow2("resume-qcow2", 5);
    let size = fs::metadata(&src.path).unwrap().len();
    let out = OutDir::new("resume-qcow2");
    let dest = out.join("disk.img");
    let mut first = spawn(&src.url, &dest, &[]);
    let frontier = kill_after(&mut first, &dest, 400 << 10);
    assert!(frontier < size, "the import finished before it was killed");

    run_to_end(&src.url, &dest, &[]);
    assert_eq!(fs::read(&dest).unwrap(), content(5), "resumed qcow2 import differs from the image's contents");
    assert!(!checkpoint_of(&dest).exists(), "checkpoint left after success");
    // The stream from the frontier for the rest, the tables below it by small ranged reads, nothing whole again.
    let log = assert_read_only_the_rest(&src.token, frontier, size, false);
    let tables: u64 = log
        .iter()
        .filter(|(_, _, r)| r.starts_with("bytes=") && r.contains("-") && !r.ends_with('-'))
        .map(|l| l.1)
        .sum();
    assert!(tables < 256 << 10, "tables re-read below the frontier: {tables} bytes ({log:?})");
}

#[test]
fn a_killed_gzip_import_resumes_from_a_deflate_block_boundary() {
    let src = SlowFile::gzip("resume-gz", 6);
    let gz = fs::read(&src.path).unwrap();
    let size = gz.len() as u64;
    let hex: String = Sha256::digest(&gz).iter().map(|b| format!("{b:02x}")).collect();
    let sum = format!("sha256:{hex}");
    let out = OutDir::new("resume-gz");
    let dest = out.join("disk.img");
    let mut first = spawn(&src.url, &dest, &["--checksum", &sum]);
    let durable = kill_after(&mut first, &dest, 400 << 10);
    assert!(durable < size, "the import finished before it was killed");
    let ckpt: serde_json::Value = serde_json::from_slice(&fs::read(checkpoint_of(&dest)).unwrap()).unwrap();
    assert_eq!(ckpt["layout"], "gzip", "{ckpt}");
    assert_eq!(ckpt["inflate"]["input"].as_u64(), Some(durable), "the restart point is the durable offset: {ckpt}");
    let output = ckpt["inflate"]["output"].as_u64().unwrap_or_default();
    assert!(output >= durable && output < LEN as u64, "restart point's output offset {output}: {ckpt}");

    run_to_end(&src.url, &dest, &["--checksum", &sum]);
    assert_eq!(fs::read(&dest).unwrap(), content(6), "resumed gzip import differs from the uncompressed source");
    assert!(!checkpoint_of(&dest).exists(), "checkpoint left after success");
    assert_read_only_the_rest(&src.token, durable, size, true);
}

#[test]
fn a_killed_xz_import_resumes_at_the_last_block_inside_its_durable_data() {
    let src = SlowFile::xz("resume-xz", 7);
    let xz = fs::read(&src.path).unwrap();
    let size = xz.len() as u64;
    let blocks = src.xz_blocks();
    assert!(blocks.len() >= 6, "multi-threaded xz writes a block per 256 KiB: {blocks:?}");
    let hex: String = Sha256::digest(&xz).iter().map(|b| format!("{b:02x}")).collect();
    let sum = format!("sha256:{hex}");
    let out = OutDir::new("resume-xz");
    let dest = out.join("disk.img");
    let mut first = spawn(&src.url, &dest, &["--checksum", &sum]);
    let durable = kill_after(&mut first, &dest, 600 << 10);
    assert!(durable < LEN as u64, "the import finished before it was killed");
    let ckpt: serde_json::Value = serde_json::from_slice(&fs::read(checkpoint_of(&dest)).unwrap()).unwrap();
    assert_eq!(ckpt["layout"], "xz", "{ckpt}");
    // The block the next run restarts at: the last that begins inside the durable output.
    let (from, _) = blocks.iter().rev().find(|(_, u)| *u <= durable).copied().unwrap();
    assert!(from > 0, "{blocks:?} {durable}");

    run_to_end(&src.url, &dest, &["--checksum", &sum]);
    assert_eq!(fs::read(&dest).unwrap(), content(7), "resumed xz import differs from the uncompressed source");
    assert!(!checkpoint_of(&dest).exists(), "checkpoint left after success");
    // Besides: the index and the stream header, by small positional reads.
    assert_read_only_the_rest(&src.token, from, size, true);
}
