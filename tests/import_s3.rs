//! S3 sources against a real S3 server (s3s-fs): raw, xz, qcow2 (streamed, gaps fetched with ranged GetObjects, no
//! scratch), compressed qcow2 clusters, keys with slashes and spaces, and the failures (wrong secret, anonymous,
//! missing key or bucket).
//!
//! Needs `tests/infra/import-env.sh up` (corpus) and then `tests/infra/s3-env.sh up` (s3s-fs on 127.0.0.1:19002).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use sha2::Digest as _;

use integration_tests::*;

const SETUP_HINT: &str = "run `tests/infra/import-env.sh up && tests/infra/s3-env.sh up` first";

/// The s3s-fs peer, read from `tests/work/s3-env`.
struct S3Env {
    endpoint: String,
    access_key: String,
    secret_key: String,
    bucket: String,
    data: PathBuf,
    resume_key: String,
    s3s_bin: PathBuf,
}

/// Panics (a failure, never a skip) when `tests/work/s3-env` is missing or s3s-fs is down.
fn s3() -> &'static S3Env {
    static S3: OnceLock<S3Env> = OnceLock::new();
    S3.get_or_init(|| {
        let s = Settings::read("s3-env", SETUP_HINT);
        let get = |k: &str| s.get(k);
        let env = S3Env {
            endpoint: get("S3_ENDPOINT"),
            access_key: get("S3_ACCESS_KEY"),
            secret_key: get("S3_SECRET_KEY"),
            bucket: get("S3_BUCKET"),
            data: get("S3_DATA").into(),
            resume_key: get("S3_RESUME_KEY"),
            s3s_bin: get("S3S_BIN").into(),
        };
        let hostport = env.endpoint.trim_start_matches("http://");
        if TcpStream::connect(hostport).is_err() {
            panic!("s3s-fs is not listening on {hostport}\n==> {SETUP_HINT}");
        }
        env
    })
}

/// `s3://<bucket>/<key>` (key already percent-encoded where needed).
fn s3_url(key: &str) -> String {
    format!("s3://{}/{key}", s3().bucket)
}

/// `importer import` of an S3 URL against s3s-fs, with its credentials.
fn s3_import(url: &str, dest: &Path) -> Cmd {
    let s3 = s3();
    Cmd::import(url, dest).arg("--s3-endpoint").arg(&s3.endpoint).auth(&s3.access_key, &s3.secret_key)
}

/// Imports `key` (expected to produce corpus entry `name`) with a dedicated scratch dir; asserts success, content,
/// sparseness and an untouched scratch dir; returns the JSON report.
fn ok(test: &str, key: &str, name: &str) -> serde_json::Value {
    s3();
    let e = entry(name);
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let scratch = out.join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    let run = s3_import(&s3_url(key), &dest).arg("--scratch").arg(&scratch).json().run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    assert_sparse(&dest, e);
    let left: Vec<_> = fs::read_dir(&scratch).unwrap().flatten().map(|d| d.path()).collect();
    assert!(left.is_empty(), "{key}: files left in the scratch dir: {left:?}\n{}", run.describe());
    run.json()
}

fn assert_strategy(report: &serde_json::Value, want: &str) {
    assert_eq!(report["strategy"].as_str(), Some(want), "report: {report}");
}

#[test]
fn raw() {
    let r = ok("s3-raw", "base.raw", "base.raw");
    assert_eq!(r["format"].as_str(), Some("raw"), "{r}");
}

#[test]
fn raw_xz() {
    let r = ok("s3-raw-xz", "base.raw.xz", "base.raw.xz");
    assert_eq!(r["compression"].as_str(), Some("xz"), "{r}");
}

/// qcow2 from S3 converts in one pass, fetching what the stream delivered too early with ranged GETs: no scratch.
#[test]
fn qcow2_streams_with_ranges() {
    for name in ["q2-v3.qcow2", "q2-reverse.qcow2"] {
        let r = ok(&format!("s3-{name}"), name, name);
        assert_strategy(&r, "qcow2-stream+range");
    }
}

#[test]
fn qcow2_zlib_clusters() {
    for name in ["q2-zlib.qcow2", "q2-cs-4k-zlib.qcow2"] {
        let r = ok(&format!("s3-{name}"), name, name);
        assert_strategy(&r, "qcow2-stream+range");
    }
}

/// Keys with slashes and percent-encoded spaces.
#[test]
fn nested_key_with_spaces() {
    let r = ok("s3-nested-key", "nested/dir/q2%20v3%20copy.qcow2", "q2-v3.qcow2");
    assert_strategy(&r, "qcow2-stream+range");
}

#[test]
fn info() {
    let s3 = s3();
    let run = Cmd::info(s3_url("q2-zlib.qcow2"))
        .arg("--s3-endpoint")
        .arg(&s3.endpoint)
        .auth(&s3.access_key, &s3.secret_key)
        .run();
    assert_success(&run);
    let j = run.json();
    assert_eq!(j["format"].as_str(), Some("qcow2"), "{j}");
    assert_eq!(j["virtual_size"].as_u64(), Some(entry("q2-zlib.qcow2").virtual_size), "{j}");
}

fn fail(test: &str, cmd: impl FnOnce(&Path) -> Cmd, expect: &[&str]) -> Output {
    s3();
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let run = cmd(&dest).run();
    assert_failed(&run, &dest, expect);
    let last = run.stderr_lines().last().map(|l| l.to_lowercase()).unwrap_or_default();
    assert!(last.contains("s3"), "the error should name the s3 source\n{}", run.describe());
    run
}

#[test]
fn wrong_secret() {
    let s3 = s3();
    fail(
        "s3-wrong-secret",
        |dest| {
            Cmd::import(s3_url("base.raw"), dest)
                .arg("--s3-endpoint")
                .arg(&s3.endpoint)
                .auth(&s3.access_key, "not-the-secret")
        },
        &["SignatureDoesNotMatch"],
    );
}

#[test]
fn anonymous_is_refused() {
    let s3 = s3();
    fail(
        "s3-anonymous",
        |dest| Cmd::import(s3_url("base.raw"), dest).arg("--s3-endpoint").arg(&s3.endpoint),
        &["AccessDenied", "403"],
    );
}

#[test]
fn missing_key() {
    fail("s3-missing-key", |dest| s3_import(&s3_url("no/such-key.raw"), dest), &["NoSuchKey"]);
}

#[test]
fn missing_bucket() {
    fail(
        "s3-missing-bucket",
        |dest| s3_import("s3://no-such-bucket/base.raw", dest),
        &["NoSuchBucket", "NoSuchKey", "404"],
    );
}

// ----- resume -------------------------------------------------------------------------------------------------------

/// A private s3s-fs over the same data directory (so that pausing it disturbs no other test); killed on drop.
struct PrivateServer {
    child: Child,
    endpoint: String,
}

impl PrivateServer {
    fn start() -> Self {
        let s3 = s3();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(&s3.s3s_bin)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", &s3.access_key, "--secret-key", &s3.secret_key])
            .arg(&s3.data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}\n==> {SETUP_HINT}", s3.s3s_bin.display()));
        let server = PrivateServer { child, endpoint: format!("http://127.0.0.1:{port}") };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(10), "private s3s-fs did not come up on port {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill").arg(sig).arg(self.child.id().to_string()).status().unwrap();
        assert!(st.success(), "kill {sig} {} failed", self.child.id());
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-CONT").arg(self.child.id().to_string()).status();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sha256_file(p: &Path) -> String {
    let mut f = fs::File::open(p).unwrap();
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Allocated bytes of the files in `dir` (DEST or its temporary file).
fn allocated_in(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|rd| rd.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.blocks() * 512).sum())
        .unwrap_or(0)
}

/// The server stops answering mid-body (SIGSTOP): the stream stalls, is resumed with a ranged GetObject from the
/// offset reached (retried while the server is paused) and the result is byte-identical.
#[test]
fn resumes_after_a_stall() {
    let s3 = s3();
    let server = PrivateServer::start();
    let object = s3.data.join(&s3.bucket).join(&s3.resume_key);
    let out = OutDir::new("s3-resume");
    let dest = out.join("disk.img");
    let cmd = Cmd::import(s3_url(&s3.resume_key), &dest)
        .args(["--s3-endpoint", &server.endpoint, "--stall-timeout", "1", "--retries", "10"])
        .auth(&s3.access_key, &s3.secret_key)
        .env("IMPORTER_LOG", "importer=info")
        .json();
    let run = std::thread::spawn(move || cmd.run());
    let t0 = Instant::now();
    while allocated_in(out.path()) < 16 * MIB {
        assert!(!run.is_finished(), "the import finished before the server could be paused");
        assert!(t0.elapsed() < Duration::from_secs(60), "the import did not start writing");
        std::thread::sleep(Duration::from_millis(5));
    }
    server.signal("-STOP");
    assert!(!run.is_finished(), "the import finished before the server was paused");
    std::thread::sleep(Duration::from_secs(3));
    server.signal("-CONT");
    let run = run.join().unwrap();
    assert_success(&run);
    assert!(run.stderr.contains("resuming"), "the transfer should have been resumed\n{}", run.describe());
    assert_eq!(fs::metadata(&dest).unwrap().len(), fs::metadata(&object).unwrap().len());
    assert_eq!(sha256_file(&dest), sha256_file(&object), "DEST differs from the object");
    drop(server);
}

/// An import killed mid-transfer (SIGKILL) resumes from its checkpoint with one ranged GetObject of the same
/// object version: the second run reads only the rest (its report's `bytes_read`) and the result is
/// byte-identical. The private server is throttled by pausing it most of the time, so checkpoints get written.
#[test]
fn a_killed_import_resumes_from_its_checkpoint() {
    let s3 = s3();
    let server = PrivateServer::start();
    let object = s3.data.join(&s3.bucket).join(&s3.resume_key);
    let size = fs::metadata(&object).unwrap().len();
    let out = OutDir::new("s3-resume-killed");
    let dest = out.join("disk.img");
    let checkpoint = out.join(".disk.img.import-checkpoint");
    let auth = [("IMPORTER_ACCESS_KEY_ID", &s3.access_key), ("IMPORTER_SECRET_KEY", &s3.secret_key)];
    let mut first = Command::new(importer_bin())
        .args(["import", &s3_url(&s3.resume_key)])
        .arg(&dest)
        .args(["--resume", "--no-progress", "--s3-endpoint", &server.endpoint, "--stall-timeout", "60"])
        .envs(auth)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let durable = |p: &Path| {
        let v: serde_json::Value = serde_json::from_slice(&fs::read(p).ok()?).ok()?;
        v["durable"].as_u64()
    };
    let t0 = Instant::now();
    loop {
        server.signal("-STOP");
        if durable(&checkpoint).is_some_and(|d| d >= 8 * MIB) {
            break;
        }
        assert!(first.try_wait().unwrap().is_none(), "the import finished before it could be killed");
        assert!(t0.elapsed() < Duration::from_secs(120), "no checkpoint of 8 MiB within 120 s");
        std::thread::sleep(Duration::from_millis(250));
        server.signal("-CONT");
        std::thread::sleep(Duration::from_millis(10));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    server.signal("-CONT");
    let from = durable(&checkpoint).unwrap();
    assert!(from < size, "the import finished before it was killed");

    let run = Cmd::import(s3_url(&s3.resume_key), &dest)
        .args(["--resume", "--s3-endpoint", &server.endpoint])
        .auth(&s3.access_key, &s3.secret_key)
        .env("IMPORTER_LOG", "importer=info")
        .json()
        .run();
    assert_success(&run);
    assert!(run.stderr.contains("resuming the import"), "{}", run.describe());
    assert_eq!(run.json()["bytes_read"].as_u64(), Some(size - from), "only the rest is read");
    assert_eq!(sha256_file(&dest), sha256_file(&object), "DEST differs from the object");
    assert!(!checkpoint.exists(), "checkpoint left after success");
    drop(server);
}

// ----- TLS ----------------------------------------------------------------------------------------------------------

// s3s-fs speaks plain HTTP only; the TLS nginx of import-env.sh stands in for an HTTPS S3 endpoint (it serves the
// corpus as bucket "corpus" and ignores the signature), which exercises the SDK's TLS client and our CA loading.

#[test]
fn https_endpoint_with_custom_ca() {
    let env = env();
    let e = entry("q2-reverse.qcow2");
    let out = OutDir::new("s3-https-ca");
    let dest = out.join("disk.img");
    let run = Cmd::import("s3://corpus/q2-reverse.qcow2", &dest)
        .args(["--s3-endpoint", &env.https, "--cert-dir"])
        .arg(&env.ca_dir)
        .auth("any-key", "any-secret")
        .json()
        .run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    assert_strategy(&run.json(), "qcow2-stream+range");
}

#[test]
fn https_endpoint_with_unknown_ca() {
    let env = env();
    for (test, extra) in [("s3-https-noca", None), ("s3-https-otherca", Some(&env.other_ca_dir))] {
        let out = OutDir::new(test);
        let dest = out.join("disk.img");
        let mut cmd = Cmd::import("s3://corpus/q2-reverse.qcow2", &dest)
            .args(["--s3-endpoint", &env.https, "--retries", "0"])
            .auth("any-key", "any-secret");
        if let Some(dir) = extra {
            cmd = cmd.arg("--cert-dir").arg(dir);
        }
        let run = cmd.run();
        assert_failed(&run, &dest, &["certificate", "UnknownIssuer"]);
    }
}
