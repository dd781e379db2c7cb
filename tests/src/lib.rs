//! Shared harness for the end-to-end tests of the `importer` binary against real peers: the qemu-img corpus and
//! nginx from `tests/infra/import-env.sh up`, loop devices, and a misbehaving HTTP server ([`server`]).
//!
//! * [`env`] reads `tests/work/env` (fails loudly when the environment is not up).
//! * [`corpus`] / [`entry`] read the corpus manifest (expected output of `qemu-img convert -O raw` per image).
//! * [`Cmd`] runs the importer binary (built once per test binary with `cargo build -p importer`).
//! * [`assert_image_eq`], [`assert_sparse`], [`assert_failed`] check the contract.

#![deny(missing_docs)]
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

pub mod hostile;
pub mod messages;
pub mod server;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sha2::Digest as _;

/// One KiB.
pub const KIB: u64 = 1024;
/// One MiB.
pub const MIB: u64 = 1024 * KIB;
/// One GiB.
pub const GIB: u64 = 1024 * MIB;

/// Allowed excess of allocated blocks of DEST over qemu-img's output.
pub const ALLOC_TOLERANCE: u64 = MIB;

const SETUP_HINT: &str = "run `tests/infra/import-env.sh up` first (it generates the corpus and starts nginx)";

// ---------------------------------------------------------------------------------------------------------------
// environment
// ---------------------------------------------------------------------------------------------------------------

/// The peers started by `tests/infra/import-env.sh up`, read from `tests/work/env`.
#[derive(Debug)]
pub struct Env {
    /// The work directory (`tests/work`).
    pub work: PathBuf,
    /// The image corpus made by the script.
    pub corpus: PathBuf,
    /// The corpus manifest (one JSON entry per image).
    pub manifest: PathBuf,
    /// Pre-made hostile images.
    pub hostile: PathBuf,
    /// Where tests put their outputs (`tests/work/out`).
    pub out: PathBuf,
    /// nginx with Range support; `/slow/`, `/hdr/`, `/html/`, `/nohead/` map to the corpus.
    pub http_plain: String,
    /// nginx with `max_ranges 0`.
    pub http_norange: String,
    /// nginx redirects: `/r1/X` (1 hop), `/r2/X` (2 hops), `/r301/X`, `/loop/` (endless).
    pub http_redirect: String,
    /// nginx with basic auth; `/redir/X` redirects to `/X` on the same server.
    pub http_auth: String,
    /// nginx over TLS with a certificate of the test CA.
    pub https: String,
    /// Directory holding the test CA certificate (for `--cert-dir`).
    pub ca_dir: PathBuf,
    /// Directory holding an unrelated CA certificate (verification must fail).
    pub other_ca_dir: PathBuf,
    /// Basic-auth user of `http_auth`.
    pub auth_user: String,
    /// Basic-auth password of `http_auth`.
    pub auth_password: String,
    /// nginx access log (method, URI, Range of every request).
    pub access_log: PathBuf,
}

impl Env {
    /// URL of a corpus file on the plain nginx server.
    pub fn plain_url(&self, name: &str) -> String {
        format!("{}/corpus/{name}", self.http_plain)
    }
    /// URL of a file below `tests/work/out` or the corpus directory on the plain nginx server.
    pub fn url_for(&self, path: &Path) -> String {
        match path.strip_prefix(&self.corpus) {
            Ok(rel) => format!("{}/corpus/{}", self.http_plain, rel.display()),
            Err(_) => self.out_url(path),
        }
    }
    /// URL of a file below `tests/work/out` on the plain nginx server.
    pub fn out_url(&self, path: &Path) -> String {
        let rel = path
            .strip_prefix(&self.out)
            .unwrap_or_else(|_| panic!("{} is not below {}", path.display(), self.out.display()));
        format!("{}/out/{}", self.http_plain, rel.display())
    }
}

/// Settings written by a `tests/infra/*-env.sh up` script: `KEY=VALUE` lines in `tests/work/<name>` (or
/// `$IMPORT_ENV_WORK/<name>`).
pub struct Settings {
    path: PathBuf,
    kv: HashMap<String, String>,
    hint: &'static str,
}

impl Settings {
    /// Reads `name`; panics (a failure, never a skip) with `hint` when it is missing.
    pub fn read(name: &str, hint: &'static str) -> Settings {
        let path = match std::env::var_os("IMPORT_ENV_WORK") {
            Some(w) => PathBuf::from(w).join(name),
            None => Path::new(env!("CARGO_MANIFEST_DIR")).join("work").join(name),
        };
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}\n==> {hint}", path.display()));
        let kv = text
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        Settings { path, kv, hint }
    }

    /// The value of `key`; panics with the setup hint when it is absent.
    pub fn get(&self, key: &str) -> String {
        self.kv
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("{} has no {key}=...\n==> {}", self.path.display(), self.hint))
    }
}

/// The test environment. Panics (test failure, never a skip) when `tests/work/env` is missing or nginx is down.
pub fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let s = Settings::read("env", SETUP_HINT);
        let get = |k: &str| s.get(k);
        let env = Env {
            work: get("WORK").into(),
            corpus: get("CORPUS").into(),
            manifest: get("MANIFEST").into(),
            hostile: get("HOSTILE").into(),
            out: get("OUT").into(),
            http_plain: get("HTTP_PLAIN"),
            http_norange: get("HTTP_NORANGE"),
            http_redirect: get("HTTP_REDIRECT"),
            http_auth: get("HTTP_AUTH"),
            https: get("HTTPS"),
            ca_dir: get("CA_DIR").into(),
            other_ca_dir: get("OTHER_CA_DIR").into(),
            auth_user: get("AUTH_USER"),
            auth_password: get("AUTH_PASSWORD"),
            access_log: get("ACCESS_LOG").into(),
        };
        let hostport = env.http_plain.trim_start_matches("http://").to_owned();
        if TcpStream::connect(&hostport).is_err() {
            panic!("nginx is not listening on {hostport}\n==> {SETUP_HINT}");
        }
        assert!(env.manifest.is_file(), "{} missing\n==> {SETUP_HINT}", env.manifest.display());
        fs::create_dir_all(&env.out).unwrap();
        env
    })
}

// ---------------------------------------------------------------------------------------------------------------
// corpus manifest
// ---------------------------------------------------------------------------------------------------------------

/// One corpus image and the expected result of importing it.
#[derive(Debug, Clone)]
pub struct Entry {
    /// File name in the corpus directory (also the URL path below `/corpus/`).
    pub name: String,
    /// Its path.
    pub path: PathBuf,
    /// `qemu-img info` format of the inner (decompressed) image: raw, qcow2, vmdk, vpc, vhdx, vdi.
    pub format: String,
    /// None, or gzip / xz / zstd / bzip2.
    pub compression: Option<String>,
    /// Virtual size.
    pub virtual_size: u64,
    /// Cluster size, for formats that have one.
    pub cluster_size: Option<u64>,
    /// sha256 of `qemu-img convert -O raw` output (None for multi-GiB images: see `expected`).
    pub sha256: Option<String>,
    /// Length of the expected output.
    pub size: u64,
    /// Allocated bytes of qemu-img's output.
    pub alloc: u64,
    /// Kept (sparse) qemu-img output, for multi-GiB images.
    pub expected: Option<PathBuf>,
    /// The uncompressed corpus image this entry is made of.
    pub inner: PathBuf,
}

impl Entry {
    /// Whether it is an ISO image.
    pub fn is_iso(&self) -> bool {
        self.name.contains(".iso")
    }
    /// Its URL on the plain nginx server.
    pub fn url(&self) -> String {
        env().plain_url(&self.name)
    }
    /// Length of the corpus file (as served).
    pub fn file_len(&self) -> u64 {
        fs::metadata(&self.path).unwrap().len()
    }
}

/// Every corpus entry, read once from the manifest.
pub fn corpus() -> &'static [Entry] {
    static CORPUS: OnceLock<Vec<Entry>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let env = env();
        let text = fs::read_to_string(&env.manifest).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap_or_default().split('\t').collect();
        let col = |name: &str| -> usize {
            header
                .iter()
                .position(|h| *h == name)
                .unwrap_or_else(|| panic!("manifest has no column {name}\n==> {SETUP_HINT}"))
        };
        let (c_name, c_format, c_comp, c_vsize, c_cluster, c_sha, c_size, c_alloc, c_exp, c_inner) = (
            col("name"),
            col("format"),
            col("compression"),
            col("virtual_size"),
            col("cluster_size"),
            col("sha256"),
            col("size"),
            col("alloc"),
            col("expected"),
            col("inner"),
        );
        let opt = |s: &str| (s != "-" && !s.is_empty()).then(|| s.to_owned());
        lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                Entry {
                    name: f[c_name].to_owned(),
                    path: env.corpus.join(f[c_name]),
                    format: f[c_format].to_owned(),
                    compression: opt(f[c_comp]).filter(|c| c != "none"),
                    virtual_size: f[c_vsize].parse().unwrap(),
                    cluster_size: opt(f[c_cluster]).map(|c| c.parse().unwrap()),
                    sha256: opt(f[c_sha]),
                    size: f[c_size].parse().unwrap(),
                    alloc: f[c_alloc].parse().unwrap(),
                    expected: opt(f[c_exp]).map(|p| env.corpus.join(p)),
                    inner: env.corpus.join(f[c_inner]),
                }
            })
            .collect()
    })
}

/// The corpus entry `name` (panics when it does not exist).
pub fn entry(name: &str) -> &'static Entry {
    corpus()
        .iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("corpus has no entry {name}; regenerate with `tests/infra/import-env.sh up`"))
}

// ---------------------------------------------------------------------------------------------------------------
// output directories
// ---------------------------------------------------------------------------------------------------------------

/// A fresh directory `tests/work/out/<name>`; removed on drop unless the test failed (kept for inspection).
pub struct OutDir {
    path: PathBuf,
}

impl OutDir {
    /// `tests/work/out/<name>`, emptied.
    pub fn new(name: &str) -> Self {
        let clean: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' }).collect();
        let path = env().out.join(clean);
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        OutDir { path }
    }
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// A path inside the directory.
    pub fn join(&self, p: &str) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// the importer binary
// ---------------------------------------------------------------------------------------------------------------

/// Path of the importer binary. Unless `IMPORTER_BIN` is set, runs `cargo build -p importer` once per test binary
/// (a no-op when up to date) into the target directory this test binary lives in, so tests never run a stale
/// importer. `IMPORTER_NO_BUILD=1` skips the build and uses the existing binary.
pub fn importer_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("IMPORTER_BIN") {
            let bin = PathBuf::from(bin);
            assert!(bin.is_file(), "IMPORTER_BIN={} does not exist", bin.display());
            return bin;
        }
        // <target>/<profile>/deps/<test-exe>
        let exe = std::env::current_exe().unwrap();
        let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
        let target_dir = profile_dir.parent().unwrap().to_path_buf();
        let bin = profile_dir.join("importer");
        if std::env::var_os("IMPORTER_NO_BUILD").is_none() {
            let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.current_dir(workspace)
                .args(["build", "--quiet", "-p", "importer", "--bin", "importer"])
                .env("CARGO_TARGET_DIR", &target_dir);
            if profile_dir.file_name() == Some(OsStr::new("release")) {
                cmd.arg("--release");
            }
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "`cargo build -p importer` failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(
            bin.is_file(),
            "importer binary not found at {} (build it with `cargo build -p importer` or set IMPORTER_BIN)",
            bin.display()
        );
        bin
    })
}

/// Result of one importer run.
#[derive(Debug)]
pub struct Output {
    /// The command line, for messages.
    pub cmdline: String,
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Its stdout.
    pub stdout: String,
    /// Its stderr.
    pub stderr: String,
    /// Wall-clock time.
    pub elapsed: Duration,
}

impl Output {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
    /// Human-readable description for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "command: {}\nexit code: {:?} signal: {:?} after {:.1}s\n--- stdout ---\n{}\n--- stderr ---\n{}\n---",
            self.cmdline,
            self.code,
            self.signal,
            self.elapsed.as_secs_f64(),
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
    /// The last non-empty stdout line, parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        let line = self
            .stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_else(|| panic!("no JSON line on stdout\n{}", self.describe()));
        serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("last stdout line is not JSON ({e}): {line}\n{}", self.describe()))
    }
    /// Non-empty lines of stderr.
    pub fn stderr_lines(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| !l.trim().is_empty()).collect()
    }
}

/// Builder for one importer invocation.
#[derive(Debug, Clone)]
pub struct Cmd {
    args: Vec<OsString>,
    envs: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    timeout: Duration,
}

impl Cmd {
    /// `importer import SOURCE DEST --no-progress`
    pub fn import(source: impl AsRef<OsStr>, dest: impl AsRef<OsStr>) -> Self {
        Cmd::new(["import".as_ref(), source.as_ref(), dest.as_ref(), "--no-progress".as_ref()])
    }
    /// `importer import SOURCE DEST` with progress reporting left on.
    pub fn import_with_progress(source: impl AsRef<OsStr>, dest: impl AsRef<OsStr>) -> Self {
        Cmd::new(["import".as_ref(), source.as_ref(), dest.as_ref()])
    }
    /// `importer info SOURCE --output json`
    pub fn info(source: impl AsRef<OsStr>) -> Self {
        Cmd::new(["info".as_ref(), source.as_ref(), "--output".as_ref(), "json".as_ref()])
    }
    fn new<'a>(args: impl IntoIterator<Item = &'a OsStr>) -> Self {
        Cmd {
            args: args.into_iter().map(OsStr::to_owned).collect(),
            envs: Vec::new(),
            cwd: None,
            timeout: Duration::from_secs(180),
        }
    }
    /// Adds an argument.
    pub fn arg(mut self, a: impl AsRef<OsStr>) -> Self {
        self.args.push(a.as_ref().to_owned());
        self
    }
    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }
    /// `--output json`
    pub fn json(self) -> Self {
        self.args(["--output", "json"])
    }
    /// Sets an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.envs.push((k.to_owned(), v.to_owned()));
        self
    }
    /// Basic-auth credentials of the auth server, through the environment.
    pub fn auth(self, user: &str, password: &str) -> Self {
        self.env("IMPORTER_ACCESS_KEY_ID", user).env("IMPORTER_SECRET_KEY", password)
    }
    /// Runs in `dir`.
    pub fn cwd(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_owned());
        self
    }
    /// Kills the run after `t` (a hang is a test failure).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Runs the importer; panics if it does not finish within the timeout (it is killed then).
    pub fn run(&self) -> Output {
        let bin = importer_bin();
        let mut cmd = Command::new(bin);
        cmd.args(&self.args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        for k in [
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "IMPORTER_ACCESS_KEY_ID",
            "IMPORTER_SECRET_KEY",
            "RUST_LOG",
        ] {
            cmd.env_remove(k);
        }
        cmd.env("NO_PROXY", "127.0.0.1,localhost").env("RUST_BACKTRACE", "1");
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        if let Some(d) = &self.cwd {
            cmd.current_dir(d);
        }
        let cmdline = std::iter::once(bin.as_os_str())
            .chain(self.args.iter().map(OsString::as_os_str))
            .map(|a| {
                let s = a.to_string_lossy();
                if s.contains(' ') { format!("'{s}'") } else { s.into_owned() }
            })
            .collect::<Vec<_>>()
            .join(" ");
        let start = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {cmdline}: {e}"));
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let t_out = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = so.read_to_end(&mut b);
            b
        });
        let t_err = std::thread::spawn(move || {
            let mut b = Vec::new();
            let _ = se.read_to_end(&mut b);
            b
        });
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if start.elapsed() > self.timeout {
                let _ = child.kill();
                let _ = child.wait();
                let stderr = t_err.join().unwrap_or_default();
                panic!(
                    "importer did not finish within {:?}: {cmdline}\n--- stderr ---\n{}",
                    self.timeout,
                    String::from_utf8_lossy(&stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = start.elapsed();
        use std::os::unix::process::ExitStatusExt as _;
        let out = Output {
            cmdline,
            code: status.code(),
            signal: status.signal(),
            stdout: String::from_utf8_lossy(&t_out.join().unwrap_or_default()).into_owned(),
            stderr: String::from_utf8_lossy(&t_err.join().unwrap_or_default()).into_owned(),
            elapsed,
        };
        if std::env::var_os("IMPORT_TESTS_VERBOSE").is_some() {
            eprintln!("{}", out.describe());
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------------------------
// assertions on runs
// ---------------------------------------------------------------------------------------------------------------

/// Asserts exit 0 (showing the run otherwise).
pub fn assert_success(out: &Output) {
    assert!(out.success(), "importer failed\n{}", out.describe());
    assert!(!out.stderr.contains("panicked"), "importer panicked\n{}", out.describe());
}

/// Failure contract: non-zero exit (not a signal, not a Rust panic), no "panicked" on stderr, the final stderr line
/// mentions one of `expect` (case-insensitive; empty = any non-empty message) and a file DEST is gone, as is any
/// file next to it whose name contains DEST's name (temp files).
/// `one_line`: stderr must be exactly one non-empty line (the contract for deterministic failures; network
/// failures may log retries first).
pub fn assert_failed_with(out: &Output, dest: Option<&Path>, expect: &[&str], one_line: bool) {
    let d = out.describe();
    assert!(out.signal.is_none(), "importer was killed by signal {:?}\n{d}", out.signal);
    assert!(matches!(out.code, Some(c) if c != 0), "importer should have failed\n{d}");
    assert_ne!(out.code, Some(101), "exit code 101 is a Rust panic\n{d}");
    assert!(!out.stderr.contains("panicked"), "importer panicked\n{d}");
    let lines = out.stderr_lines();
    let last = lines.last().copied().unwrap_or_else(|| panic!("failure without a message on stderr\n{d}"));
    if one_line {
        assert_eq!(lines.len(), 1, "failure must be reported as one line on stderr\n{d}");
    }
    if !expect.is_empty() {
        let low = last.to_lowercase();
        assert!(
            expect.iter().any(|e| low.contains(&e.to_lowercase())),
            "the error line should mention one of {expect:?} (table: tests/src/messages.rs)\n{d}"
        );
    }
    if let Some(dest) = dest {
        assert_dest_removed(dest, &d);
    }
}

/// [`assert_failed_with`] with the one-line rule.
pub fn assert_failed(out: &Output, dest: &Path, expect: &[&str]) {
    assert_failed_with(out, Some(dest), expect, true);
}

/// Imports `source` into `disk.img` of a fresh [`OutDir`] named `test`, with `cmd` adding to the command;
/// asserts success and that the result equals corpus entry `name` (content and sparseness). Returns the run.
pub fn import_ok(test: &str, name: &str, source: &str, cmd: impl FnOnce(Cmd) -> Cmd) -> Output {
    let e = entry(name);
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let run = cmd(Cmd::import(source, &dest)).run();
    assert_success(&run);
    assert_image_eq(&dest, e, None);
    assert_sparse(&dest, e);
    run
}

/// Imports `source` into `disk.img` of a fresh [`OutDir`] named `test`, with `cmd` adding to the command;
/// asserts the failure (one line naming `expect`, nothing left at the target). Returns the run.
pub fn import_fails(test: &str, source: &str, cmd: impl FnOnce(Cmd) -> Cmd, expect: &[&str]) -> Output {
    let out = OutDir::new(test);
    let dest = out.join("disk.img");
    let run = cmd(Cmd::import(source, &dest)).run();
    assert_failed(&run, &dest, expect);
    run
}

fn assert_dest_removed(dest: &Path, d: &str) {
    let is_block = fs::metadata(dest).map(|m| m.file_type().is_block_device()).unwrap_or(false);
    if is_block {
        return;
    }
    assert!(!dest.exists(), "DEST {} was left behind after a failure\n{d}", dest.display());
    if let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) {
        let name = name.to_string_lossy();
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                assert!(
                    !n.contains(name.as_ref()),
                    "temporary file {} left next to DEST after a failure\n{d}",
                    e.path().display()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// content comparison
// ---------------------------------------------------------------------------------------------------------------

fn is_block_device(p: &Path) -> bool {
    fs::metadata(p).map(|m| m.file_type().is_block_device()).unwrap_or(false)
}

/// Size of a regular file or block device.
pub fn dev_or_file_size(p: &Path) -> u64 {
    let mut f = File::open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
    if is_block_device(p) { f.seek(SeekFrom::End(0)).unwrap() } else { f.metadata().unwrap().len() }
}

/// Data (non-hole) ranges of `[start, end)`. Block devices and file systems without SEEK_DATA report one range.
pub fn data_ranges(f: &File, start: u64, end: u64) -> Vec<(u64, u64)> {
    use rustix::fs::{SeekFrom as RSeek, seek};
    let mut out = Vec::new();
    let mut pos = start;
    while pos < end {
        let d = match seek(f, RSeek::Data(pos)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return vec![(start, end)],
        };
        if d >= end {
            break;
        }
        let h = match seek(f, RSeek::Hole(d)) {
            Ok(h) => h.min(end),
            Err(_) => end,
        };
        out.push((d, h));
        pos = h;
    }
    out
}

fn merge_ranges(mut r: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    r.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, e) in r {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn read_at(f: &mut File, off: u64, buf: &mut [u8]) {
    f.seek(SeekFrom::Start(off)).unwrap();
    f.read_exact(buf).unwrap_or_else(|e| panic!("read {} bytes at {off}: {e}", buf.len()));
}

const CHUNK: usize = 4 << 20;

/// Compares `[0, len)` of two files; holes are skipped. Returns the first differing offset.
pub fn first_difference(a: &Path, b: &Path, len: u64) -> Option<u64> {
    let mut fa = File::open(a).unwrap_or_else(|e| panic!("open {}: {e}", a.display()));
    let mut fb = File::open(b).unwrap_or_else(|e| panic!("open {}: {e}", b.display()));
    let la = dev_or_file_size(a);
    let lb = dev_or_file_size(b);
    let mut ranges = data_ranges(&fa, 0, len.min(la));
    ranges.extend(data_ranges(&fb, 0, len.min(lb)));
    let ranges = merge_ranges(ranges);
    let mut ba = vec![0u8; CHUNK];
    let mut bb = vec![0u8; CHUNK];
    for (s, e) in ranges {
        let mut pos = s;
        while pos < e {
            let n = ((e - pos) as usize).min(CHUNK);
            // beyond a file's end counts as zeros
            let read_or_zero = |f: &mut File, flen: u64, buf: &mut [u8]| {
                buf.fill(0);
                if pos < flen {
                    let m = ((flen - pos) as usize).min(buf.len());
                    read_at(f, pos, &mut buf[..m]);
                }
            };
            read_or_zero(&mut fa, la, &mut ba[..n]);
            read_or_zero(&mut fb, lb, &mut bb[..n]);
            if ba[..n] != bb[..n] {
                let i = ba[..n].iter().zip(&bb[..n]).position(|(x, y)| x != y).unwrap_or(0);
                return Some(pos + i as u64);
            }
            pos += n as u64;
        }
    }
    None
}

/// First non-zero byte in `[start, end)` of a file or device.
pub fn first_nonzero(p: &Path, start: u64, end: u64) -> Option<u64> {
    let mut f = File::open(p).unwrap();
    let mut buf = vec![0u8; CHUNK];
    for (s, e) in data_ranges(&f, start, end) {
        let mut pos = s;
        while pos < e {
            let n = ((e - pos) as usize).min(CHUNK);
            read_at(&mut f, pos, &mut buf[..n]);
            if let Some(i) = buf[..n].iter().position(|b| *b != 0) {
                return Some(pos + i as u64);
            }
            pos += n as u64;
        }
    }
    None
}

/// sha256 (hex) of `[0, len)` of a file or device; holes are hashed as zeros without reading them.
pub fn sha256_prefix(p: &Path, len: u64) -> String {
    let mut f = File::open(p).unwrap_or_else(|e| panic!("open {}: {e}", p.display()));
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let zeros = vec![0u8; CHUNK];
    let mut pos = 0;
    for (s, e) in data_ranges(&f, 0, len).into_iter().chain([(len, len)]) {
        while pos < s {
            let n = ((s - pos) as usize).min(CHUNK);
            h.update(&zeros[..n]);
            pos += n as u64;
        }
        while pos < e {
            let n = ((e - pos) as usize).min(CHUNK);
            read_at(&mut f, pos, &mut buf[..n]);
            h.update(&buf[..n]);
            pos += n as u64;
        }
    }
    hex(&h.finalize())
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().fold(String::with_capacity(b.len() * 2), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

/// Digest (hex) of a whole file with one of md5, sha1, sha256, sha512.
pub fn file_digest(algo: &str, p: &Path) -> String {
    fn run<D: sha2::Digest>(mut d: D, p: &Path) -> String {
        let mut f = File::open(p).unwrap();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = f.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            d.update(&buf[..n]);
        }
        hex(&d.finalize())
    }
    match algo {
        "md5" => run(md5::Md5::new(), p),
        "sha1" => run(sha1::Sha1::new(), p),
        "sha256" => run(sha2::Sha256::new(), p),
        "sha512" => run(sha2::Sha512::new(), p),
        other => panic!("unknown digest {other}"),
    }
}

/// Runs `qemu-img convert -O raw SRC` into `dir` and returns the output path (for images crafted at test time
/// and for diagnostics).
pub fn qemu_convert(src: &Path, dir: &Path) -> PathBuf {
    let out = dir.join(format!("{}.qemu-expected.raw", src.file_name().unwrap_or_default().to_string_lossy()));
    let o = Command::new("qemu-img").arg("convert").arg("-q").args(["-O", "raw"]).arg(src).arg(&out).output().unwrap();
    assert!(o.status.success(), "qemu-img convert {} failed: {}", src.display(), String::from_utf8_lossy(&o.stderr));
    out
}

/// DEST equals the expected raw output of the entry, grown with zeros to `size` (when given). For a block device
/// DEST only the first `size.unwrap_or(e.size)` bytes are compared.
pub fn assert_image_eq(dest: &Path, e: &Entry, size: Option<u64>) {
    let want_len = size.unwrap_or(e.size);
    let got_len = dev_or_file_size(dest);
    if is_block_device(dest) {
        assert!(got_len >= want_len, "device {} smaller ({got_len}) than the image ({want_len})", dest.display());
    } else {
        assert_eq!(got_len, want_len, "DEST {} length (expected: {want_len}) for {}", dest.display(), e.name);
    }
    let ok = match (&e.expected, &e.sha256) {
        (Some(exp), _) => match first_difference(dest, exp, e.size) {
            None => true,
            Some(off) => panic!(
                "{}: DEST {} differs from qemu-img's output {} at offset {off} (0x{off:x})",
                e.name,
                dest.display(),
                exp.display()
            ),
        },
        (None, Some(sha)) => sha256_prefix(dest, e.size) == *sha,
        (None, None) => panic!("manifest entry {} has neither sha256 nor expected file", e.name),
    };
    if !ok {
        // diagnostics: regenerate qemu-img's output and locate the first difference
        let tmp = dest.with_extension("diag");
        fs::create_dir_all(&tmp).unwrap();
        let exp = qemu_convert(&e.inner, &tmp);
        let off = first_difference(dest, &exp, e.size);
        panic!(
            "{}: DEST {} does not match qemu-img convert -O raw {} (sha256 differs); first difference at {:?}; \
             qemu-img output kept at {}",
            e.name,
            dest.display(),
            e.inner.display(),
            off,
            exp.display()
        );
    }
    if want_len > e.size
        && !is_block_device(dest)
        && let Some(off) = first_nonzero(dest, e.size, want_len)
    {
        panic!("{}: the grown tail of DEST is not zero at offset {off}", e.name);
    }
}

/// DEST equals `qemu-img convert -O raw SRC` (computed now), for images crafted by the test.
pub fn assert_matches_qemu(dest: &Path, src: &Path, dir: &Path) {
    let exp = qemu_convert(src, dir);
    let want = fs::metadata(&exp).unwrap().len();
    let got = dev_or_file_size(dest);
    if !is_block_device(dest) {
        assert_eq!(got, want, "DEST {} length differs from qemu-img's output", dest.display());
    }
    if let Some(off) = first_difference(dest, &exp, want) {
        panic!("DEST {} differs from qemu-img's output {} at offset {off}", dest.display(), exp.display());
    }
    let _ = fs::remove_file(&exp);
}

/// Allocated bytes (st_blocks * 512).
pub fn allocated(p: &Path) -> u64 {
    fs::metadata(p).unwrap().blocks() * 512
}

/// DEST is at most as allocated as qemu-img's output (+ [`ALLOC_TOLERANCE`]).
pub fn assert_sparse(dest: &Path, e: &Entry) {
    let a = allocated(dest);
    assert!(
        a <= e.alloc + ALLOC_TOLERANCE,
        "{}: DEST {} has {a} bytes allocated, qemu-img's output {} (+{ALLOC_TOLERANCE} tolerance): not sparse",
        e.name,
        dest.display(),
        e.alloc
    );
}

// ---------------------------------------------------------------------------------------------------------------
// JSON checks
// ---------------------------------------------------------------------------------------------------------------

/// Accepted spellings of a manifest format in the importer's output.
pub fn format_aliases(e: &Entry) -> &'static [&'static str] {
    match e.format.as_str() {
        "raw" if e.is_iso() => &["raw", "iso"],
        "raw" => &["raw"],
        "qcow2" => &["qcow2"],
        "vmdk" => &["vmdk"],
        "vpc" => &["vpc", "vhd"],
        "vhdx" => &["vhdx"],
        "vdi" => &["vdi"],
        other => panic!("unexpected manifest format {other}"),
    }
}

/// Accepted spellings of a compression in the importer's output (`None` = not compressed).
pub fn compression_ok(v: &serde_json::Value, want: Option<&str>) -> bool {
    let got = v.as_str();
    match want {
        None => v.is_null() || matches!(got, Some("none" | "")),
        Some("gzip") => matches!(got, Some("gzip" | "gz")),
        Some("xz") => got == Some("xz"),
        Some("zstd") => matches!(got, Some("zstd" | "zst")),
        Some("bzip2") => matches!(got, Some("bzip2" | "bz2")),
        Some(other) => got == Some(other),
    }
}

fn field<'a>(j: &'a serde_json::Value, k: &str, ctx: &str) -> &'a serde_json::Value {
    j.get(k).unwrap_or_else(|| panic!("JSON has no key {k:?}: {j}\n{ctx}"))
}

/// Shape and values of the final `--output json` line of an import.
pub fn check_import_json(out: &Output, e: &Entry, checksum: Option<&str>) -> serde_json::Value {
    let j = out.json();
    let d = out.describe();
    for k in ["format", "compression", "virtual_size", "bytes_read", "bytes_written", "seconds", "checksum"] {
        field(&j, k, &d);
    }
    let fmt = j["format"].as_str().unwrap_or_default();
    assert!(format_aliases(e).contains(&fmt), "{}: JSON format {fmt:?}, expected {}\n{d}", e.name, e.format);
    assert!(
        compression_ok(&j["compression"], e.compression.as_deref()),
        "{}: JSON compression {}, expected {:?}\n{d}",
        e.name,
        j["compression"],
        e.compression
    );
    assert_eq!(j["virtual_size"].as_u64(), Some(e.virtual_size), "{}: JSON virtual_size\n{d}", e.name);
    let read = j["bytes_read"].as_u64().unwrap_or_else(|| panic!("bytes_read not a number\n{d}"));
    assert!(read > 0, "bytes_read is 0\n{d}");
    assert!(j["bytes_written"].as_u64().is_some(), "bytes_written not a number\n{d}");
    assert!(j["seconds"].as_f64().is_some_and(|s| s >= 0.0), "seconds not a non-negative number\n{d}");
    match checksum {
        None => assert!(j["checksum"].is_null(), "checksum should be null without --checksum\n{d}"),
        Some(c) => assert!(
            j["checksum"].as_str().is_some_and(|s| s.to_lowercase().contains(c)),
            "JSON checksum should contain {c}\n{d}"
        ),
    }
    j
}

/// `importer info --output json` agrees with qemu-img info (recorded in the manifest).
pub fn check_info_json(out: &Output, e: &Entry) {
    assert_success(out);
    let j = out.json();
    let d = out.describe();
    for k in ["format", "compression", "virtual_size", "cluster_size", "backing_file", "data_file", "encrypted"] {
        field(&j, k, &d);
    }
    let fmt = j["format"].as_str().unwrap_or_default();
    assert!(format_aliases(e).contains(&fmt), "{}: info format {fmt:?}, expected {}\n{d}", e.name, e.format);
    assert!(
        compression_ok(&j["compression"], e.compression.as_deref()),
        "{}: info compression {}, expected {:?}\n{d}",
        e.name,
        j["compression"],
        e.compression
    );
    // qemu-img cannot look into a compressed file at all: for those, null is acceptable (a value must match).
    let unknown_ok = e.compression.is_some();
    let vs = &j["virtual_size"];
    if !(unknown_ok && vs.is_null()) {
        assert_eq!(vs.as_u64(), Some(e.virtual_size), "{}: info virtual_size\n{d}", e.name);
    }
    let cs = &j["cluster_size"];
    match e.cluster_size {
        Some(_) if unknown_ok && cs.is_null() => {}
        Some(c) => assert_eq!(cs.as_u64(), Some(c), "{}: info cluster_size (qemu-img: {c})\n{d}", e.name),
        None => assert!(
            cs.is_null() || cs.as_u64() == Some(0),
            "{}: info cluster_size should be null (qemu-img reports none)\n{d}",
            e.name
        ),
    }
    for k in ["backing_file", "data_file", "encrypted"] {
        assert_eq!(j[k].as_bool(), Some(false), "{}: info {k}\n{d}", e.name);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// misc
// ---------------------------------------------------------------------------------------------------------------

/// Lines of the nginx access log containing `needle` (e.g. a unique query string).
pub fn access_log_lines(needle: &str) -> Vec<String> {
    // nginx writes each line when the request completes; give it a moment.
    for _ in 0..50 {
        let text = fs::read_to_string(&env().access_log).unwrap_or_default();
        let lines: Vec<String> = text.lines().filter(|l| l.contains(needle)).map(str::to_owned).collect();
        if !lines.is_empty() {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Vec::new()
}

/// A process-unique token for URLs (`?t=...`), so access-log lines can be attributed to one test.
pub fn unique_token(tag: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{tag}-{}-{nanos}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Length of a file.
pub fn file_len(p: &Path) -> u64 {
    fs::metadata(p).unwrap_or_else(|e| panic!("stat {}: {e}", p.display())).len()
}

// ---------------------------------------------------------------------------------------------------------------
// loop devices
// ---------------------------------------------------------------------------------------------------------------

/// `losetup -f` picks a free device; serialize attaching within this process.
static LOSETUP: Mutex<()> = Mutex::new(());

/// A loop device over a file in the test's out dir; detached on drop.
pub struct LoopDev {
    dev: PathBuf,
}

impl LoopDev {
    /// Attaches a loop device over `dir/loop-backing.img` of `size` bytes, filled with `fill` (else sparse).
    pub fn new(dir: &Path, size: u64, fill: Option<u8>) -> Self {
        let backing = dir.join("loop-backing.img");
        let mut f = File::create(&backing).unwrap();
        match fill {
            Some(b) => {
                let chunk = vec![b; MIB as usize];
                let mut left = size;
                while left > 0 {
                    let n = left.min(MIB);
                    f.write_all(&chunk[..n as usize]).unwrap();
                    left -= n;
                }
                f.sync_all().unwrap();
            }
            None => f.set_len(size).unwrap(),
        }
        drop(f);
        let out = {
            let _g = LOSETUP.lock().unwrap_or_else(|p| p.into_inner());
            Command::new("losetup").args(["-f", "--show"]).arg(&backing).output().unwrap()
        };
        assert!(
            out.status.success(),
            "losetup -f --show {} failed (block tests need root and loop devices): {}",
            backing.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let ft = std::fs::metadata(&dev).unwrap().file_type();
        assert!(ft.is_block_device(), "{} is not a block device", dev.display());
        assert_eq!(dev_or_file_size(&dev), size, "loop device size");
        LoopDev { dev }
    }
    /// The device node.
    pub fn path(&self) -> &Path {
        &self.dev
    }
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _g = LOSETUP.lock().unwrap_or_else(|p| p.into_inner());
        let ok = Command::new("losetup").arg("-d").arg(&self.dev).status().is_ok_and(|s| s.success());
        if !ok {
            eprintln!("warning: could not detach {}", self.dev.display());
        }
    }
}

/// Self-tests of the comparison helpers (no peers needed): they must see differences inside holes and past
/// data, and treat holes and written zeros alike.
#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary directory removed on drop.
    struct Tmp(PathBuf);
    impl Tmp {
        fn new(test: &str) -> Self {
            let d = std::env::temp_dir().join(format!("integration-tests-{test}-{}", std::process::id()));
            fs::create_dir_all(&d).unwrap();
            Tmp(d)
        }
        fn file(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }
    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write_at(p: &Path, off: u64, data: &[u8]) {
        let mut f = fs::OpenOptions::new().write(true).open(p).unwrap();
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(data).unwrap();
    }

    #[test]
    fn holes_equal_written_zeros() {
        let t = Tmp::new("holes");
        let sparse = t.file("sparse");
        let dense = t.file("dense");
        File::create(&sparse).unwrap().set_len(64 * MIB).unwrap();
        fs::write(&dense, vec![0u8; (64 * MIB) as usize]).unwrap();
        for p in [&sparse, &dense] {
            write_at(p, 5 * MIB + 3, b"data");
        }
        assert_eq!(first_difference(&sparse, &dense, 64 * MIB), None);
        assert_eq!(sha256_prefix(&sparse, 64 * MIB), sha256_prefix(&dense, 64 * MIB));
        assert_eq!(sha256_prefix(&sparse, 64 * MIB), file_digest("sha256", &dense));
        assert_eq!(first_nonzero(&sparse, 0, 64 * MIB), Some(5 * MIB + 3));
        assert_eq!(first_nonzero(&sparse, 5 * MIB + 7, 64 * MIB), None);
    }

    #[test]
    fn differences_are_found_in_holes_and_tails() {
        let t = Tmp::new("diff");
        let a = t.file("a");
        let b = t.file("b");
        File::create(&a).unwrap().set_len(32 * MIB).unwrap();
        File::create(&b).unwrap().set_len(32 * MIB).unwrap();
        write_at(&b, 20 * MIB + 1, &[1]);
        assert_eq!(first_difference(&a, &b, 32 * MIB), Some(20 * MIB + 1));
        assert_eq!(first_difference(&b, &a, 32 * MIB), Some(20 * MIB + 1));
        assert_eq!(first_difference(&a, &b, 20 * MIB), None);
        assert_ne!(sha256_prefix(&a, 32 * MIB), sha256_prefix(&b, 32 * MIB));
        // a shorter file counts as zeros past its end
        let c = t.file("c");
        File::create(&c).unwrap().set_len(MIB).unwrap();
        assert_eq!(first_difference(&a, &c, 32 * MIB), None);
        assert_eq!(first_difference(&b, &c, 32 * MIB), Some(20 * MIB + 1));
    }

    #[test]
    fn digests_match_known_values() {
        let t = Tmp::new("digests");
        let p = t.file("abc");
        fs::write(&p, b"abc").unwrap();
        assert_eq!(file_digest("md5", &p), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(file_digest("sha1", &p), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(file_digest("sha256", &p), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(file_digest("sha512", &p).starts_with("ddaf35a193617aba"));
    }
}
