//! Pod mode end to end, without a cluster: the importer binary run with CDI's environment (paths redirected
//! into a test directory), against the real nginx of `tests/infra/import-env.sh up`. Checks the progress
//! metric CDI's controller scrapes, the termination message it parses, sizing, and the exit protocol.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use integration_tests::{MIB, OutDir, assert_image_eq, entry, env, file_digest, importer_bin};

/// A pod run: data dir, termination log, metrics port.
struct Pod {
    dir: OutDir,
    env: BTreeMap<String, String>,
    port: u16,
}

impl Pod {
    fn new(name: &str) -> Pod {
        let dir = OutDir::new(&format!("pod-{name}"));
        fs::create_dir_all(dir.join("data")).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut env = BTreeMap::new();
        for (k, v) in [
            ("IMPORTER_DATA_DIR", dir.join("data")),
            ("IMPORTER_BLOCK_DEVICE", dir.join("no-block-device")),
            ("IMPORTER_SCRATCH_DIR", dir.join("no-scratch")),
            ("IMPORTER_TERMINATION_LOG", dir.join("termination-log")),
            ("IMPORTER_EXTRA_HEADERS_DIR", dir.join("extraheaders")),
        ] {
            env.insert(k.to_string(), v.display().to_string());
        }
        env.insert("IMPORTER_METRICS_ADDR".into(), format!("127.0.0.1:{port}"));
        env.insert("OWNER_UID".into(), format!("uid-{name}"));
        env.insert("IMPORTER_CONTENTTYPE".into(), "kubevirt".into());
        Pod { dir, env, port }
    }
    fn set(mut self, k: &str, v: &str) -> Pod {
        self.env.insert(k.into(), v.into());
        self
    }
    fn disk(&self) -> PathBuf {
        self.dir.join("data/disk.img")
    }
    fn command(&self) -> Command {
        let mut c = Command::new(importer_bin());
        // CDI starts the importer with klog flags and no subcommand.
        c.args(["-v=1", "-alsologtostderr"]).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
        c.envs(&self.env).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }
    /// Runs to completion; returns (exit code, termination message).
    fn run(&self) -> (i32, String) {
        let out = self.command().output().unwrap();
        let msg = fs::read_to_string(self.dir.join("termination-log")).unwrap_or_else(|e| {
            panic!("no termination message ({e}); stderr: {}", String::from_utf8_lossy(&out.stderr))
        });
        (out.status.code().unwrap_or(-1), msg)
    }
    /// The progress value as CDI's controller extracts it, or None if not (yet) served.
    fn scrape(&self, uid: &str) -> Option<f64> {
        let out = Command::new("curl")
            .args(["-sk", "--max-time", "2", &format!("https://127.0.0.1:{}/metrics", self.port)])
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        // CDI: (kubevirt_cdi_import_progress_total)\{ownerUID="<uid>"\} (\d{1,3}\.?\d*)
        let prefix = format!("kubevirt_cdi_import_progress_total{{ownerUID=\"{uid}\"}} ");
        let line = text.lines().find(|l| l.starts_with(&prefix))?;
        let v = &line[prefix.len()..];
        assert!(v.chars().all(|c| c.is_ascii_digit() || c == '.'), "value {v:?} does not match CDI's regex");
        v.parse().ok()
    }
}

fn term_json(msg: &str) -> serde_json::Value {
    assert!(!msg.contains('\n'), "termination message must be one line: {msg:?}");
    assert!(msg.len() <= 4096);
    serde_json::from_str(msg).unwrap_or_else(|e| panic!("termination message {msg:?} is not JSON: {e}"))
}

#[test]
fn progress_rises_during_a_rate_limited_import_and_the_termination_message_parses() {
    let e = entry("q2-cs-1k.qcow2");
    let url = format!("{}/slow/{}", env().http_plain, e.name);
    let pod = Pod::new("progress")
        .set("IMPORTER_SOURCE", "http")
        .set("IMPORTER_ENDPOINT", &url)
        .set("IMPORTER_IMAGE_SIZE", "64Mi")
        .set("FILESYSTEM_OVERHEAD", "0.055");
    let mut child = pod.command().spawn().unwrap();
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        if let Some(v) = pod.scrape("uid-progress") {
            seen.push(v);
        }
        if child.try_wait().unwrap().is_some() || start.elapsed() > Duration::from_secs(120) {
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "importer failed: {status}");
    assert!(seen.iter().any(|&v| v > 0.0 && v < 100.0), "no progress strictly between 0 and 100 in {seen:?}");
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "progress went down: {seen:?}");
    let msg = fs::read_to_string(pod.dir.join("termination-log")).unwrap();
    let j = term_json(&msg);
    assert_eq!(j["message"], "Import Complete");
    assert_eq!(j["scratchSpaceRequired"], false);
    assert_eq!(j["preallocationApplied"], false);
    assert!(msg.starts_with(r#"{"scratchSpaceRequired":false,"preallocationApplied":false,"#), "{msg}");
    // Grown to the usable space: roundDown(ceil(64 MiB / 1.055), 1 MiB) = 60 MiB.
    assert_image_eq(&pod.disk(), e, Some(60 * MIB));
    let mode = fs::metadata(pod.disk()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
}

#[test]
fn checksum_mismatch_exits_zero_with_cdis_fatal_message_and_removes_the_data() {
    let e = entry("q2-v3.qcow2");
    let (code, msg) = Pod::new("checksum")
        .set("IMPORTER_SOURCE", "http")
        .set("IMPORTER_ENDPOINT", &e.url())
        .set("IMPORTER_IMAGE_SIZE", "64Mi")
        .set("IMPORTER_CHECKSUM", &format!("sha256:{}", "0".repeat(64)))
        .run();
    assert_eq!(code, 0, "{msg}");
    let j = term_json(&msg);
    let m = j["message"].as_str().unwrap();
    assert!(
        m.starts_with("Unable to process data: checksum validation failed: checksum mismatch: expected sha256:000"),
        "{m}"
    );
    assert!(m.contains(&format!("calculated sha256:{}", file_digest("sha256", &e.path))), "{m}");
}

#[test]
fn good_checksum_succeeds() {
    let e = entry("base.raw.xz");
    let pod = Pod::new("checksum-ok")
        .set("IMPORTER_SOURCE", "http")
        .set("IMPORTER_ENDPOINT", &e.url())
        .set("IMPORTER_IMAGE_SIZE", "64Mi")
        .set("IMPORTER_CHECKSUM", &format!("sha256:{}", file_digest("sha256", &e.path)));
    let (code, msg) = pod.run();
    assert_eq!((code, term_json(&msg)["message"].as_str()), (0, Some("Import Complete")));
    assert_image_eq(&pod.disk(), e, Some(64 * MIB));
    assert!(!pod.dir.join("data/disk.img").with_extension("tmp").exists());
}

#[test]
fn not_found_is_a_plain_text_failure_with_exit_1() {
    let pod = Pod::new("404").set("IMPORTER_SOURCE", "http").set("IMPORTER_ENDPOINT", &env().plain_url("missing.img"));
    let (code, msg) = pod.run();
    assert_eq!(code, 1);
    assert!(msg.starts_with("Unable to connect to http data source: "), "{msg}");
    assert!(msg.contains("expected status code 200, got 404. Status: 404 Not Found"), "{msg}");
    assert!(!pod.disk().exists());
}

#[test]
fn too_small_volume_reports_cdis_larger_pvc_message() {
    for name in ["q2-v3.qcow2", "base.raw.xz"] {
        let e = entry(name);
        let pod = Pod::new(&format!("small-{}", name.replace('.', "-")))
            .set("IMPORTER_SOURCE", "http")
            .set("IMPORTER_ENDPOINT", &e.url())
            .set("IMPORTER_IMAGE_SIZE", "1Mi");
        let (code, msg) = pod.run();
        assert_eq!(code, 1, "{msg}");
        assert!(msg.starts_with("Unable to process data: "), "{msg}");
        assert!(msg.contains("is larger than the reported available storage"), "{msg}");
        assert!(!pod.disk().exists(), "{name}: partial disk.img left behind");
    }
}

#[test]
fn blank_image_is_sparse_and_sized_to_the_usable_space() {
    let pod = Pod::new("blank")
        .set("IMPORTER_SOURCE", "none")
        .set("IMPORTER_IMAGE_SIZE", "100Mi")
        .set("FILESYSTEM_OVERHEAD", "0.1");
    let (code, msg) = pod.run();
    assert_eq!(code, 0, "{msg}");
    assert_eq!(msg, r#"{"preallocationApplied":false,"message":"Import Complete"}"#);
    let m = fs::metadata(pod.disk()).unwrap();
    // ceil(100 MiB / 1.1) = 95325091 → rounded down to 90 MiB
    assert_eq!(m.len(), 90 * MIB);
    assert!(std::os::unix::fs::MetadataExt::blocks(&m) * 512 < MIB, "blank image is not sparse");

    let pre = Pod::new("blank-prealloc")
        .set("IMPORTER_SOURCE", "none")
        .set("IMPORTER_IMAGE_SIZE", "8Mi")
        .set("PREALLOCATION", "true");
    let (code, msg) = pre.run();
    assert_eq!((code, msg.as_str()), (0, r#"{"preallocationApplied":true,"message":"Import Complete"}"#));
    let m = fs::metadata(pre.disk()).unwrap();
    assert_eq!(m.len(), 8 * MIB);
    assert!(std::os::unix::fs::MetadataExt::blocks(&m) * 512 >= 8 * MIB, "preallocation did not allocate");
}

#[test]
fn environment_errors_follow_cdis_messages() {
    let (code, msg) = Pod::new("unknown").set("IMPORTER_SOURCE", "gcs").run();
    assert_eq!((code, msg.as_str()), (1, "Unknown data source: gcs"));
    let (code, msg) =
        Pod::new("blank-archive").set("IMPORTER_SOURCE", "none").set("IMPORTER_CONTENTTYPE", "archive").run();
    assert_eq!((code, msg.as_str()), (1, "Cannot create empty disk with content type archive"));
    let (code, msg) = Pod::new("prealloc").set("IMPORTER_SOURCE", "none").set("PREALLOCATION", "yes please").run();
    assert_eq!(code, 1);
    assert!(msg.contains("PREALLOCATION"), "{msg}");
}

/// Writes a tar (optionally gzip'd by the `gzip` tool) whose entries are (name, mode, content).
fn write_tar(path: &Path, entries: &[(&str, u32, &[u8])], gzip: bool) {
    let dir = path.with_extension("src");
    fs::create_dir_all(&dir).unwrap();
    for (name, mode, data) in entries {
        let p = dir.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(&p, data).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(*mode)).unwrap();
    }
    let names: Vec<&str> = entries.iter().map(|e| e.0).collect();
    let st = Command::new("tar").arg("-C").arg(&dir).arg("-cf").arg(path).args(&names).status().unwrap();
    assert!(st.success());
    if gzip {
        let st = Command::new("gzip").arg("-f").arg(path).status().unwrap();
        assert!(st.success());
        fs::rename(path.with_extension("tar.gz"), path).unwrap_or_else(|_| {
            let gz = PathBuf::from(format!("{}.gz", path.display()));
            fs::rename(gz, path).unwrap();
        });
    }
}

#[test]
fn archive_content_is_extracted_with_permissions() {
    let pod = Pod::new("archive");
    let tar = pod.dir.join("content.tar.gz");
    write_tar(&tar, &[("a.txt", 0o640, b"alpha"), ("sub/run.sh", 0o755, b"#!/bin/sh\n")], true);
    fs::write(pod.dir.join("data/stale"), b"left from a failed attempt").unwrap();
    let pod = pod
        .set("IMPORTER_SOURCE", "http")
        .set("IMPORTER_CONTENTTYPE", "archive")
        .set("IMPORTER_ENDPOINT", &env().out_url(&tar))
        .set("IMPORTER_CHECKSUM", &format!("md5:{}", file_digest("md5", &tar)));
    let (code, msg) = pod.run();
    assert_eq!(code, 0, "{msg}");
    assert_eq!(term_json(&msg)["message"], "Import Complete");
    let data = pod.dir.join("data");
    assert_eq!(fs::read(data.join("a.txt")).unwrap(), b"alpha");
    assert_eq!(fs::metadata(data.join("a.txt")).unwrap().permissions().mode() & 0o777, 0o640);
    assert_eq!(fs::metadata(data.join("sub/run.sh")).unwrap().permissions().mode() & 0o777, 0o755);
    assert!(!data.join("stale").exists(), "the target was not cleaned before extraction");
}

/// A tar with one entry whose name or link target is written raw (the tar tool refuses to create these).
fn hostile_tar(path: &Path, kind: u8, name: &str, link: &str) {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    let size: &[u8] = if kind == b'0' { b"00000000005\0" } else { b"00000000000\0" };
    h[124..136].copy_from_slice(size);
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    let mut f = fs::File::create(path).unwrap();
    f.write_all(&h).unwrap();
    if kind == b'0' {
        let mut block = [0u8; 512];
        block[..5].copy_from_slice(b"pwned");
        f.write_all(&block).unwrap();
    }
    f.write_all(&[0u8; 1024]).unwrap();
}

#[test]
fn archive_traversal_attempts_are_refused_and_nothing_is_written_outside() {
    let cases: [(&str, u8, &str, &str, &str); 4] = [
        ("dotdot", b'0', "../escaped.txt", "", "'..'"),
        ("absolute", b'0', "/tmp/kubevirt-rs-escaped.txt", "", "absolute"),
        ("symlink", b'2', "link", "../../..", "outside"),
        ("hardlink", b'1', "hl", "../escaped.txt", "outside"),
    ];
    for (name, kind, entry_name, link, want) in cases {
        let pod = Pod::new(&format!("evil-{name}"));
        let tar = pod.dir.join("evil.tar");
        hostile_tar(&tar, kind, entry_name, link);
        let pod = pod
            .set("IMPORTER_SOURCE", "http")
            .set("IMPORTER_CONTENTTYPE", "archive")
            .set("IMPORTER_ENDPOINT", &env().out_url(&tar));
        let (code, msg) = pod.run();
        assert_eq!(code, 1, "{name}: {msg}");
        assert!(msg.starts_with("Unable to process data: "), "{name}: {msg}");
        assert!(msg.contains(want), "{name}: expected {want:?} in {msg:?}");
        assert!(!pod.dir.join("escaped.txt").exists(), "{name}: wrote outside the data dir");
        assert!(!Path::new("/tmp/kubevirt-rs-escaped.txt").exists(), "{name}: wrote to an absolute path");
        assert_eq!(fs::read_dir(pod.dir.join("data")).unwrap().count(), 0, "{name}: data dir not cleaned");
    }
}

#[test]
fn block_volume_gets_the_image_and_is_not_resized() {
    let e = entry("q2-zlib.qcow2");
    let pod = Pod::new("block");
    let dev = integration_tests::LoopDev::new(pod.dir.path(), 64 * MIB, Some(0xa5));
    let pod = pod
        .set("IMPORTER_BLOCK_DEVICE", &dev.path().display().to_string())
        .set("IMPORTER_SOURCE", "http")
        .set("IMPORTER_ENDPOINT", &e.url())
        .set("IMPORTER_IMAGE_SIZE", "64Mi")
        .set("FILESYSTEM_OVERHEAD", "0");
    let (code, msg) = pod.run();
    assert_eq!(code, 0, "{msg}");
    assert_eq!(term_json(&msg)["message"], "Import Complete");
    assert!(!pod.disk().exists(), "a block volume must not get /data/disk.img");
    assert_image_eq(dev.path(), e, None);

    let small = Pod::new("block-small");
    let dev = integration_tests::LoopDev::new(small.dir.path(), MIB, None);
    let (code, msg) = small
        .set("IMPORTER_BLOCK_DEVICE", &dev.path().display().to_string())
        .set("IMPORTER_SOURCE", "http")
        .set("IMPORTER_ENDPOINT", &e.url())
        .run();
    assert_eq!(code, 1, "{msg}");
    assert!(msg.contains("is larger than the reported available storage 1048576"), "{msg}");
}
