//! `importer serve` end to end: the built binary serving a sparse file and a loop block device over HTTPS, checked
//! with reqwest (auth, HEAD, full and ranged GETs, 416, health, routing), idle exit, SIGTERM, a missing token, and
//! finally `importer import` cloning from it. The block-device test needs root and `losetup` (it fails, not
//! skips, without them).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use reqwest::header::{ACCEPT_RANGES, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, RANGE};

const BIN: &str = env!("CARGO_BIN_EXE_importer");
const MIB: u64 = 1 << 20;
const IMAGE_SIZE: u64 = 64 * MIB;
const TOKEN: &str = "s3cr3t-clone-token";

/// A 64 MiB sparse file with pseudo-random data blocks at a few offsets (incl. unaligned ones and the very end).
fn make_image(path: &Path) -> Vec<u8> {
    let mut f = File::create(path).unwrap();
    f.set_len(IMAGE_SIZE).unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for (off, len) in [(0, MIB), (5 * MIB + 123, 300_000), (33 * MIB, 2 * MIB + 7), (IMAGE_SIZE - 4096 - 17, 4113)] {
        let data: Vec<u8> = (0..len).map(|_| rand() as u8).collect();
        f.seek(SeekFrom::Start(off)).unwrap();
        f.write_all(&data).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(bytes.len() as u64, IMAGE_SIZE);
    bytes
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A running `importer serve`; killed on drop if still running.
struct Serve {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Serve {
    fn start(dir: &Path, image: &Path, idle_exit: u64) -> Serve {
        let token_file = dir.join("token");
        std::fs::write(&token_file, format!("  {TOKEN}\n")).unwrap();
        let port = free_port();
        let log = dir.join(format!("serve-{port}.log"));
        let child = Command::new(BIN)
            .arg("serve")
            .env("SERVE_PATH", image)
            .env("SERVE_TOKEN_FILE", &token_file)
            .env("SERVE_ADDR", format!("127.0.0.1:{port}"))
            .env("SERVE_IDLE_EXIT", idle_exit.to_string())
            .env("IMPORTER_LOG", "importer=info")
            .stdout(Stdio::null())
            .stderr(File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Serve { child, port, log }
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits for `/healthz` to answer.
    async fn ready(&mut self, client: &reqwest::Client) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                panic!("importer serve exited early ({st}):\n{}", self.log());
            }
            if let Ok(r) = client.get(self.url("/healthz")).send().await {
                assert_eq!(r.status(), StatusCode::OK);
                assert_eq!(r.text().await.unwrap(), "OK");
                return;
            }
            assert!(Instant::now() < deadline, "importer serve not ready:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits up to `limit` for the process to exit.
    async fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st;
            }
            assert!(Instant::now() < deadline, "importer serve still running after {limit:?}:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().tls_danger_accept_invalid_certs(true).build().unwrap()
}

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

async fn get_range(client: &reqwest::Client, url: &str, range: &str) -> reqwest::Response {
    client.get(url).header(AUTHORIZATION, bearer()).header(RANGE, range).send().await.unwrap()
}

/// Auth, HEAD, full GET, ranges and routing against a server of `expected`.
async fn check_http(srv: &Serve, expected: &[u8]) {
    let c = client();
    let url = srv.url("/disk.img");
    let size = expected.len() as u64;

    // Auth.
    for auth in [None, Some("Bearer wrong-token"), Some(&format!("Basic {TOKEN}")[..]), Some("Bearer ")] {
        for method in [reqwest::Method::GET, reqwest::Method::HEAD] {
            let mut req = c.request(method.clone(), &url);
            if let Some(a) = auth {
                req = req.header(AUTHORIZATION, a);
            }
            let r = req.send().await.unwrap();
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{method} with {auth:?}");
        }
    }
    // The scheme is case-insensitive.
    let r = c.head(&url).header(AUTHORIZATION, format!("bearer {TOKEN}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // HEAD.
    let r = c.head(&url).header(AUTHORIZATION, bearer()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[CONTENT_LENGTH], size.to_string().as_str());
    assert_eq!(r.headers()[ACCEPT_RANGES], "bytes");

    // Full GET, also under a prefix path.
    for u in [url.clone(), srv.url("/some/prefix/disk.img")] {
        let r = c.get(&u).header(AUTHORIZATION, bearer()).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[CONTENT_LENGTH], size.to_string().as_str());
        let body = r.bytes().await.unwrap();
        assert!(body.as_ref() == expected, "full GET of {u} differs from the image");
    }

    // Ranges.
    let n = expected.len();
    let cases: Vec<(String, usize, usize)> = vec![
        (String::from("bytes=0-99"), 0, 99),
        (format!("bytes={}-{}", 5 * MIB, 5 * MIB + 500_000), 5 * MIB as usize, 5 * MIB as usize + 500_000),
        (format!("bytes={}-", n - 10_000), n - 10_000, n - 1),
        (String::from("bytes=-4096"), n - 4096, n - 1),
        (format!("bytes={}-{}", n - 5, n + 1_000_000), n - 5, n - 1),
        (format!("bytes={}-{}", 33 * MIB - 1, 35 * MIB + 100), 33 * MIB as usize - 1, 35 * MIB as usize + 100),
    ];
    for (range, a, b) in &cases {
        let r = get_range(&c, &url, range).await;
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(r.headers()[CONTENT_RANGE], format!("bytes {a}-{b}/{n}").as_str(), "{range}");
        assert_eq!(r.headers()[CONTENT_LENGTH], (b - a + 1).to_string().as_str(), "{range}");
        let body = r.bytes().await.unwrap();
        assert!(body.as_ref() == &expected[*a..=*b], "{range}: wrong bytes");
    }
    for range in [format!("bytes={n}-"), format!("bytes={}-{}", n + 10, n + 20), String::from("bytes=-0")] {
        let r = get_range(&c, &url, &range).await;
        assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
        assert_eq!(r.headers()[CONTENT_RANGE], format!("bytes */{n}").as_str(), "{range}");
    }
    // An invalid range is ignored: the whole image.
    let r = get_range(&c, &url, "bytes=9-3").await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.bytes().await.unwrap().len(), n);

    // Routing.
    assert_eq!(c.get(srv.url("/other")).header(AUTHORIZATION, bearer()).send().await.unwrap().status(), 404);
    assert_eq!(c.get(srv.url("/disk.img.bak")).send().await.unwrap().status(), 404);
    let r = c.post(&url).header(AUTHORIZATION, bearer()).body("x").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let r = c.put(&url).header(AUTHORIZATION, bearer()).body("x").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let r = c.get(srv.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // A client that walks away mid-body does not break the server.
    let r = c.get(&url).header(AUTHORIZATION, bearer()).send().await.unwrap();
    drop(r);
    let r = get_range(&c, &url, "bytes=0-9").await;
    assert_eq!(r.bytes().await.unwrap().as_ref(), &expected[..10]);
}

/// `importer import https://…/disk.img DEST --insecure --header 'Authorization: Bearer …'`, as the clone target.
async fn import_from(srv: &Serve, dest: &Path) {
    let out = tokio::process::Command::new(BIN)
        .arg("import")
        .arg(srv.url("/disk.img"))
        .arg(dest)
        .arg("--insecure")
        .arg("--header")
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .arg("--no-progress")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "import failed ({}):\nstdout: {}\nstderr: {}\nserver log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        srv.log()
    );
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

#[tokio::test]
async fn serves_a_file_and_an_import_clones_it() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    let expected = make_image(&image);
    let before = mtime(&image);
    let mut srv = Serve::start(dir.path(), &image, 600);
    srv.ready(&client()).await;

    check_http(&srv, &expected).await;

    let dest = dir.path().join("clone.img");
    import_from(&srv, &dest).await;
    let got = std::fs::read(&dest).unwrap();
    assert!(got == expected, "the clone differs from the source");
    assert_eq!(mtime(&image), before, "the source was written to");
    assert!(srv.child.try_wait().unwrap().is_none(), "server exited:\n{}", srv.log());
    // Requests were logged.
    assert!(srv.log().contains("request"), "{}", srv.log());
}

/// Detaches a loop device on drop.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.0).status();
    }
}

#[tokio::test]
async fn serves_a_block_device_and_exits_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing.img");
    let expected = make_image(&backing);
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(&backing)
        .output()
        .unwrap_or_else(|e| panic!("losetup (needs root and util-linux) cannot run: {e}"));
    assert!(
        out.status.success(),
        "losetup --find --show failed ({}): {} — this test needs root and loop devices",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let dev = Loop(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    {
        use std::os::unix::fs::FileTypeExt;
        assert!(std::fs::metadata(&dev.0).unwrap().file_type().is_block_device(), "{} is not a block device", dev.0);
    }

    let mut srv = Serve::start(dir.path(), Path::new(&dev.0), 600);
    srv.ready(&client()).await;
    check_http(&srv, &expected).await;

    let dest = dir.path().join("clone.img");
    import_from(&srv, &dest).await;
    assert!(std::fs::read(&dest).unwrap() == expected, "the clone of {} differs from the source", dev.0);

    // SIGTERM (while a response is being streamed) → exit 0 promptly.
    let c = client();
    let pending = c.get(srv.url("/disk.img")).header(AUTHORIZATION, bearer()).send().await.unwrap();
    let t0 = Instant::now();
    let st = Command::new("kill").arg("-TERM").arg(srv.child.id().to_string()).status().unwrap();
    assert!(st.success());
    let st = srv.wait_exit(Duration::from_secs(5)).await;
    assert!(st.success(), "exit after SIGTERM: {st}\n{}", srv.log());
    assert!(t0.elapsed() < Duration::from_secs(3), "SIGTERM took {:?}", t0.elapsed());
    drop(pending);
}

#[tokio::test]
async fn exits_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    std::fs::write(&image, b"tiny image").unwrap();
    let started = Instant::now();
    let mut srv = Serve::start(dir.path(), &image, 3);
    let c = client();
    srv.ready(&c).await;
    // Health probes do not count as activity; an image request resets the idle time.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let r = c.get(srv.url("/disk.img")).header(AUTHORIZATION, bearer()).send().await.unwrap();
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"tiny image");
    let last = Instant::now();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(c.get(srv.url("/healthz")).send().await.is_ok(), "exited before the idle time after the last request");
    assert!(srv.child.try_wait().unwrap().is_none(), "exited early:\n{}", srv.log());
    let st = srv.wait_exit(Duration::from_secs(10)).await;
    assert!(st.success(), "idle exit status {st}:\n{}", srv.log());
    assert!(last.elapsed() >= Duration::from_secs(3), "exited {:?} after the last request", last.elapsed());
    assert!(started.elapsed() < Duration::from_secs(15));
}

fn run_serve_with_token_file(dir: &Path, token_file: &Path) -> std::process::Output {
    let image = dir.join("disk.img");
    std::fs::write(&image, b"data").unwrap();
    Command::new(BIN)
        .arg("serve")
        .env("SERVE_PATH", &image)
        .env("SERVE_TOKEN_FILE", token_file)
        .env("SERVE_ADDR", format!("127.0.0.1:{}", free_port()))
        .env("SERVE_IDLE_EXIT", "1")
        .output()
        .unwrap()
}

#[test]
fn refuses_to_start_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-token");
    let out = run_serve_with_token_file(dir.path(), &missing);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("error:") && err.contains("token") && err.contains("no-such-token"), "{err}");

    let empty = dir.path().join("empty-token");
    std::fs::write(&empty, "\n  \n").unwrap();
    let out = run_serve_with_token_file(dir.path(), &empty);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("empty"), "{err}");
}

#[test]
fn missing_image_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--path"])
        .arg(dir.path().join("absent.img"))
        .arg("--token-file")
        .arg(&token)
        .args(["--addr", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("absent.img"), "{err}");
}
