//! Host-level tests: the `uploadserver` binary as a process (real TLS with generated certificates, real
//! pipeline, `qemu-img` as the oracle), and the upload proxy (library, with a fake cluster) in front of it.
//! Needs `qemu-img` and `tar` on PATH.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube_test_support::ok;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use uploader::proxy::{Cluster, ClusterError};
use uploader::token;

const SERVER_NAME: &str = "cdi-upload-disk.ns.svc";
const CLIENT_CN: &str = "client.upload-server.cdi.kubevirt.io";

struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

fn ca(cn: &str) -> Ca {
    let mut p = CertificateParams::default();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(DnType::CommonName, cn);
    let kp = ok(KeyPair::generate());
    let cert = ok(p.self_signed(&kp));
    Ca { pem: cert.pem(), issuer: Issuer::new(p, kp) }
}

fn leaf(ca: &Ca, cn: &str, sans: &[&str], eku: ExtendedKeyUsagePurpose) -> (String, String) {
    let mut p = ok(CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
    p.distinguished_name.push(DnType::CommonName, cn);
    p.extended_key_usages = vec![eku];
    let kp = ok(KeyPair::generate());
    let c = ok(p.signed_by(&kp, &ca.issuer));
    (c.pem(), kp.serialize_pem())
}

/// Certificates as the datavolume-controller makes them, in a directory.
struct Pki {
    dir: tempfile::TempDir,
    server_ca: String,
    client: (String, String),
    wrong_cn_client: (String, String),
}

impl Pki {
    fn new() -> Pki {
        let dir = ok(tempfile::tempdir());
        let server_ca = ca("cdi-uploadserver-signer");
        let client_ca = ca("cdi-uploadserver-client-signer");
        let (crt, key) = leaf(
            &server_ca,
            "cdi-upload-disk",
            &["cdi-upload-disk", "cdi-upload-disk.ns", SERVER_NAME],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        ok(std::fs::write(dir.path().join("tls.crt"), crt));
        ok(std::fs::write(dir.path().join("tls.key"), key));
        ok(std::fs::write(dir.path().join("ca.crt"), &client_ca.pem));
        ok(std::fs::write(dir.path().join("server-ca.crt"), &server_ca.pem));
        let client = leaf(&client_ca, CLIENT_CN, &["client"], ExtendedKeyUsagePurpose::ClientAuth);
        ok(std::fs::write(dir.path().join("client.crt"), &client.0));
        ok(std::fs::write(dir.path().join("client.key"), &client.1));
        let wrong_cn_client = leaf(&client_ca, "someone-else", &["x"], ExtendedKeyUsagePurpose::ClientAuth);
        Pki { dir, server_ca: server_ca.pem, client, wrong_cn_client }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }
}

/// An upload proxy on a free loopback port that trusts `pki`'s upload servers and checks tokens with `public`.
fn proxy_config(pki: &Pki, public: String) -> uploader::proxy::Config {
    uploader::proxy::Config {
        listen: ok("127.0.0.1:0".parse()),
        serving: None,
        public_key_pem: public,
        client_cert: pki.path("client.crt"),
        client_key: pki.path("client.key"),
        server_ca: pki.path("server-ca.crt"),
        ready_timeout: Duration::from_secs(2),
        ready_interval: Duration::from_millis(200),
    }
}

fn free_port() -> u16 {
    ok(std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr())).port()
}

struct Server {
    child: Child,
    addr: SocketAddr,
    data: PathBuf,
    term: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(pki: &Pki, image_size: &str, extra: &[(&str, String)]) -> Server {
        let dir = ok(tempfile::tempdir());
        let data = dir.path().join("data");
        ok(std::fs::create_dir(&data));
        ok(std::fs::create_dir(dir.path().join("scratch")));
        let term = dir.path().join("termination-log");
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_uploadserver"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("UPLOAD_IMAGE_SIZE", image_size)
            .env("TLS_KEY_FILE", pki.path("tls.key"))
            .env("TLS_CERT_FILE", pki.path("tls.crt"))
            .env("CLIENT_CERT_FILE", pki.path("ca.crt"))
            .env("CLIENT_NAME", CLIENT_CN)
            .env("DESTINATION", data.join("disk.img"))
            .env("LISTEN_ADDRESS", "127.0.0.1")
            .env("LISTEN_PORT", port.to_string())
            .env("PREALLOCATION", "false")
            .env("FILESYSTEM_OVERHEAD", "0")
            .env("OWNER_UID", "uid-1")
            .env("UPLOADSERVER_SCRATCH_DIR", dir.path().join("scratch"))
            .env("UPLOADSERVER_TERMINATION_LOG", &term);
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let addr: SocketAddr = ok(format!("127.0.0.1:{port}").parse());
        // Dropping the Server kills and waits for the process, also when it never listens.
        let srv = Server { child: ok(cmd.spawn()), addr, data, term, _dir: dir };
        for _ in 0..200 {
            if std::net::TcpStream::connect(addr).is_ok() {
                return srv;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("uploadserver did not listen on {addr}");
    }

    fn client(&self, pki: &Pki, identity: Option<&(String, String)>) -> reqwest::Client {
        let mut b = reqwest::Client::builder()
            .add_root_certificate(ok(reqwest::Certificate::from_pem(pki.server_ca.as_bytes())))
            .resolve(SERVER_NAME, self.addr);
        if let Some((crt, key)) = identity {
            b = b.identity(ok(reqwest::Identity::from_pem(format!("{crt}{key}").as_bytes())));
        }
        ok(b.build())
    }

    fn url(&self, path: &str) -> String {
        format!("https://{SERVER_NAME}:{}{path}", self.addr.port())
    }

    /// Waits for the process to exit; returns (success, termination message).
    fn wait_exit(&mut self, timeout: Duration) -> (bool, String) {
        let start = std::time::Instant::now();
        loop {
            if let Some(st) = ok(self.child.try_wait()) {
                return (st.success(), std::fs::read_to_string(&self.term).unwrap_or_default());
            }
            if start.elapsed() > timeout {
                let _ = self.child.kill();
                panic!("uploadserver did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(cmd: &mut Command) {
    let out = ok(cmd.output());
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A raw image with data scattered over `mib` MiB, its qcow2 conversion, and qemu-img's raw rendering of it.
fn images(dir: &Path, mib: u64) -> (PathBuf, PathBuf) {
    let raw = dir.join("src.raw");
    let mut data = vec![0u8; (mib << 20) as usize];
    for (i, chunk) in data.chunks_mut(1 << 20).enumerate() {
        if i % 3 != 1 {
            for (j, b) in chunk.iter_mut().enumerate().take(300_000) {
                *b = ((i * 31 + j * 7) % 251) as u8;
            }
        }
    }
    ok(std::fs::write(&raw, &data));
    let qcow = dir.join("src.qcow2");
    run(Command::new("qemu-img").args(["convert", "-f", "raw", "-O", "qcow2"]).arg(&raw).arg(&qcow));
    let oracle = dir.join("oracle.raw");
    run(Command::new("qemu-img").args(["convert", "-O", "raw"]).arg(&qcow).arg(&oracle));
    (qcow, oracle)
}

fn same_bytes(a: &Path, b: &Path) {
    let (x, y) = (ok(std::fs::read(a)), ok(std::fs::read(b)));
    assert_eq!(x.len(), y.len(), "{} vs {}", a.display(), b.display());
    assert!(x == y, "{} differs from {}", a.display(), b.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn uploadserver_converts_a_qcow2_and_exits_with_upload_complete() {
    let pki = Pki::new();
    let work = ok(tempfile::tempdir());
    let (qcow, oracle) = images(work.path(), 64);
    let mut srv = Server::start(&pki, "64Mi", &[]);
    let anon = srv.client(&pki, None);
    // /healthz and /metrics need no client certificate; uploads do.
    assert_eq!(ok(anon.get(srv.url("/healthz")).send().await).status(), 200);
    let m = ok(ok(anon.get(srv.url("/metrics")).send().await).text().await);
    assert!(m.contains("\nkubevirt_cdi_upload_progress_total{ownerUID=\"uid-1\"} 0.00\n"), "{m}");
    assert_eq!(ok(anon.post(srv.url("/v1beta1/upload")).body("x").send().await).status(), 401);
    let wrong = srv.client(&pki, Some(&pki.wrong_cn_client));
    assert_eq!(ok(wrong.post(srv.url("/v1beta1/upload")).body("x").send().await).status(), 401);
    let c = srv.client(&pki, Some(&pki.client));
    assert_eq!(ok(c.head(srv.url("/v1beta1/upload-async")).send().await).status(), 200);
    assert_eq!(ok(c.head(srv.url("/v1alpha1/upload-form-async")).send().await).status(), 200);
    assert_eq!(ok(c.head(srv.url("/v1beta1/upload")).send().await).status(), 404);
    assert_eq!(ok(c.get(srv.url("/v1beta1/upload")).send().await).status(), 404);
    assert_eq!(ok(c.post(srv.url("/v1beta1/nothing")).send().await).status(), 404);
    let body = ok(tokio::fs::read(&qcow).await);
    let r = ok(c.post(srv.url("/v1beta1/upload")).body(body).send().await);
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    let (success, term) = srv.wait_exit(Duration::from_secs(20));
    assert!(success);
    assert_eq!(term, r#"{"preallocationApplied":false,"message":"Upload Complete"}"#);
    let disk = srv.data.join("disk.img");
    same_bytes(&disk, &oracle);
    assert_eq!(ok(std::fs::metadata(&disk)).permissions().mode() & 0o777, 0o660);
}

#[tokio::test(flavor = "multi_thread")]
async fn too_large_is_400_with_upstreams_message_and_a_retry_succeeds() {
    let pki = Pki::new();
    let work = ok(tempfile::tempdir());
    let big = work.path().join("big.qcow2");
    run(Command::new("qemu-img").args(["create", "-q", "-f", "qcow2"]).arg(&big).arg("1G"));
    let (qcow, oracle) = images(work.path(), 16);
    let mut srv = Server::start(&pki, "16Mi", &[]);
    let c = srv.client(&pki, Some(&pki.client));
    let r = ok(c.post(srv.url("/v1beta1/upload-async")).body(ok(std::fs::read(&big))).send().await);
    assert_eq!(r.status(), 400);
    let text = ok(r.text().await);
    assert!(
        text.starts_with("Saving stream failed: effective image size is larger than the reported available storage"),
        "{text}"
    );
    // Raw data larger than the volume (size known from Content-Length) is refused the same way.
    let r = ok(c.post(srv.url("/v1beta1/upload")).body(vec![7u8; 17 << 20]).send().await);
    assert_eq!(r.status(), 400);
    assert!(ok(r.text().await).contains("effective image size is larger than the reported available"));
    // Garbage that is neither image nor allowed → 500 "Saving stream failed".
    let tar = work.path().join("x.tar");
    run(Command::new("tar").arg("-C").arg(work.path()).arg("-cf").arg(&tar).arg("src.raw"));
    let r = ok(c.post(srv.url("/v1beta1/upload")).body(ok(std::fs::read(&tar))).send().await);
    assert_eq!(r.status(), 500);
    assert!(ok(r.text().await).starts_with("Saving stream failed: "));
    // The failures left the server usable.
    let r = ok(c.post(srv.url("/v1alpha1/upload")).body(ok(std::fs::read(&qcow))).send().await);
    assert_eq!(r.status(), 200);
    assert!(srv.wait_exit(Duration::from_secs(20)).0);
    same_bytes(&srv.data.join("disk.img"), &oracle);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_concurrent_upload_is_503_and_progress_is_reported() {
    let pki = Pki::new();
    let mut srv = Server::start(&pki, "64Mi", &[]);
    let c = srv.client(&pki, Some(&pki.client));
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let total: usize = 32 << 20;
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let first = {
        let c = c.clone();
        let url = srv.url("/v1beta1/upload");
        tokio::spawn(async move {
            c.post(url)
                .header("Content-Length", total)
                .body(reqwest::Body::wrap_stream(stream))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    // Send half, then look at the metric and try a second upload.
    for _ in 0..16 {
        ok(tx.send(Ok(vec![1u8; 1 << 20])).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let m = ok(ok(c.get(srv.url("/metrics")).send().await).text().await);
    let pct: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("kubevirt_cdi_upload_progress_total{ownerUID=\"uid-1\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(-1.0);
    assert!((25.0..=55.0).contains(&pct), "progress {pct} after half the body\n{m}");
    let second = ok(c.post(srv.url("/v1beta1/upload")).body("x").send().await);
    assert_eq!(second.status(), 503);
    for _ in 0..16 {
        ok(tx.send(Ok(vec![1u8; 1 << 20])).await);
    }
    drop(tx);
    assert_eq!(ok(ok(first.await)), 200);
    assert!(srv.wait_exit(Duration::from_secs(20)).0);
    let disk = ok(std::fs::read(srv.data.join("disk.img")));
    assert_eq!(disk.len(), 64 << 20, "grown to the requested size");
    assert!(disk[..total].iter().all(|&b| b == 1) && disk[total..].iter().all(|&b| b == 0));
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_and_form_uploads() {
    let pki = Pki::new();
    let work = ok(tempfile::tempdir());
    let src = work.path().join("tree");
    ok(std::fs::create_dir_all(src.join("sub")));
    ok(std::fs::write(src.join("a.txt"), "hello"));
    ok(std::fs::write(src.join("sub/b.bin"), vec![9u8; 100_000]));
    let tar = work.path().join("t.tar");
    run(Command::new("tar").arg("-C").arg(&src).arg("-cf").arg(&tar).arg("."));
    let mut srv = Server::start(&pki, "64Mi", &[]);
    ok(std::fs::write(srv.data.join("stale"), "old"));
    let c = srv.client(&pki, Some(&pki.client));
    let r = ok(c.post(srv.url("/v1beta1/upload-archive")).body(ok(std::fs::read(&tar))).send().await);
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    assert!(srv.wait_exit(Duration::from_secs(20)).0);
    assert_eq!(ok(std::fs::read_to_string(srv.data.join("a.txt"))), "hello");
    assert_eq!(ok(std::fs::read(srv.data.join("sub/b.bin"))), vec![9u8; 100_000]);
    assert!(!srv.data.join("stale").exists());

    // multipart: the part named "file" is the image, others are skipped.
    let (qcow, oracle) = images(work.path(), 8);
    let mut srv = Server::start(&pki, "8Mi", &[]);
    let c = srv.client(&pki, Some(&pki.client));
    let mut body = b"--XyZ\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nignored\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"d.qcow2\"\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec();
    body.extend(ok(std::fs::read(&qcow)));
    body.extend(b"\r\n--XyZ--\r\n");
    let r = ok(c
        .post(srv.url("/v1beta1/upload-form-async"))
        .header("Content-Type", "multipart/form-data; boundary=XyZ")
        .body(body)
        .send()
        .await);
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    assert!(srv.wait_exit(Duration::from_secs(20)).0);
    same_bytes(&srv.data.join("disk.img"), &oracle);
}

#[tokio::test(flavor = "multi_thread")]
async fn deadline_passed_while_idle() {
    let pki = Pki::new();
    let deadline = chrono::Utc::now() + chrono::Duration::seconds(2);
    let mut srv = Server::start(&pki, "8Mi", &[("DEADLINE", deadline.to_rfc3339())]);
    let (success, term) = srv.wait_exit(Duration::from_secs(15));
    assert!(success);
    assert_eq!(term, r#"{"deadlinePassed":true,"message":"Deadline Passed"}"#);
}

/// A cluster with fixed PVCs and one endpoint.
struct FakeCluster {
    pvcs: Mutex<BTreeMap<(String, String), PersistentVolumeClaim>>,
    endpoint: SocketAddr,
}

impl FakeCluster {
    fn set(&self, ns: &str, name: &str, ann: &[(&str, &str)]) {
        let mut p = PersistentVolumeClaim::default();
        p.metadata.name = Some(name.into());
        p.metadata.annotations = Some(ann.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        self.pvcs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert((ns.into(), name.into()), p);
    }
}

impl Cluster for FakeCluster {
    async fn pvc(&self, ns: &str, name: &str) -> Result<Option<PersistentVolumeClaim>, ClusterError> {
        Ok(self.pvcs.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&(ns.into(), name.into())).cloned())
    }

    async fn endpoint(&self, ns: &str, service: &str) -> Result<Option<SocketAddr>, ClusterError> {
        Ok((ns == "ns" && service == "cdi-upload-disk").then_some(self.endpoint))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_checks_tokens_and_readiness_then_streams_to_the_upload_server() {
    use contracts::cdi::consts::ann::{POD_READY as ANN_POD_READY, UPLOAD_TARGET as ANN_UPLOAD_TARGET};
    let pki = Pki::new();
    let work = ok(tempfile::tempdir());
    let (qcow, oracle) = images(work.path(), 32);
    let mut srv = Server::start(&pki, "32Mi", &[]);
    let (private, public) = ok(token::generate_key_pair());
    let (other_private, _) = ok(token::generate_key_pair());
    let cluster = Arc::new(FakeCluster { pvcs: Mutex::new(BTreeMap::new()), endpoint: srv.addr });
    cluster.set("ns", "disk", &[(ANN_UPLOAD_TARGET, ""), (ANN_POD_READY, "true")]);
    cluster.set("ns", "notready", &[(ANN_UPLOAD_TARGET, ""), (ANN_POD_READY, "false")]);
    cluster.set("ns", "plain", &[]);
    cluster.set("ns", "done", &[(ANN_UPLOAD_TARGET, ""), ("cdi.kubevirt.io/storage.pod.phase", "Succeeded")]);
    let cfg = proxy_config(&pki, public);
    let proxy = ok(uploader::proxy::start(cfg, cluster.clone()).await);
    let url = |p: &str| format!("https://127.0.0.1:{}{p}", proxy.addr.port());
    let http = ok(reqwest::Client::builder().danger_accept_invalid_certs(true).build());
    let tok = |key: &str, ns: &str, pvc: &str, at: SystemTime| {
        token::sign(
            &ok(token::encoding_key(key.as_bytes())),
            token::UPLOAD_TOKEN_ISSUER,
            &token::Payload::upload(ns, pvc),
            at,
            token::TOKEN_LIFETIME,
        )
        .unwrap_or_default()
    };
    let now = SystemTime::now();
    let post = |path: &str, auth: Option<String>| {
        let mut rb = http.post(url(path)).body("x");
        if let Some(a) = auth {
            rb = rb.header("Authorization", a);
        }
        rb.send()
    };
    assert_eq!(ok(http.get(url("/healthz")).send().await).status(), 200);
    assert_eq!(ok(post("/v1beta1/nothing", None).await).status(), 404);
    // Missing or malformed header → 400 (upstream); bad signature / expired → 401.
    assert_eq!(ok(post("/v1beta1/upload", None).await).status(), 400);
    assert_eq!(ok(post("/v1beta1/upload", Some("Basic abc".into())).await).status(), 400);
    let forged = tok(&other_private, "ns", "disk", now);
    assert_eq!(ok(post("/v1beta1/upload", Some(format!("Bearer {forged}"))).await).status(), 401);
    let expired = tok(&private, "ns", "disk", now - Duration::from_secs(320));
    assert_eq!(ok(post("/v1beta1/upload", Some(format!("Bearer {expired}"))).await).status(), 401);
    // Wrong operation → 400.
    let clone = token::sign(
        &ok(token::encoding_key(private.as_bytes())),
        token::UPLOAD_TOKEN_ISSUER,
        &token::Payload { operation: token::Operation::Clone, ..token::Payload::upload("ns", "disk") },
        now,
        token::TOKEN_LIFETIME,
    )
    .unwrap_or_default();
    assert_eq!(ok(post("/v1beta1/upload", Some(format!("Bearer {clone}"))).await).status(), 400);
    // Readiness: 503 with upstream's reasons.
    let check503 = |pvc: &'static str, want: &'static str| {
        let t = tok(&private, "ns", pvc, now);
        let f = post("/v1beta1/upload", Some(format!("Bearer {t}")));
        async move {
            let r = ok(f.await);
            assert_eq!(r.status(), 503, "{pvc}");
            let body = ok(r.text().await);
            assert_eq!(body, want, "{pvc}");
        }
    };
    check503("missing", "rejecting Upload Request for PVC missing that doesn&#39;t exist").await;
    check503("plain", "PVC plain is not an upload target").await;
    check503("done", "rejecting Upload Request for PVC done that already finished uploading").await;
    let t0 = std::time::Instant::now();
    check503("notready", "timed out waiting for the condition").await;
    assert!(t0.elapsed() >= Duration::from_millis(1500), "polled until the timeout");
    // CORS preflight.
    let pre = ok(http
        .request(reqwest::Method::OPTIONS, url("/v1beta1/upload"))
        .header("Origin", "https://ui")
        .header("Access-Control-Request-Method", "POST")
        .send()
        .await);
    assert_eq!(pre.status(), 204);
    assert_eq!(pre.headers().get("access-control-allow-origin").and_then(|v| v.to_str().ok()), Some("*"));
    // HEAD on async is forwarded (upstream virtctl probes it).
    let good = tok(&private, "ns", "disk", now);
    let head = ok(http.head(url("/v1beta1/upload-async")).bearer_auth(&good).send().await);
    assert_eq!(head.status(), 200);
    // The real upload, streamed through.
    let r = ok(http.post(url("/v1beta1/upload")).bearer_auth(&good).body(ok(std::fs::read(&qcow))).send().await);
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap_or_default());
    assert!(srv.wait_exit(Duration::from_secs(20)).0);
    same_bytes(&srv.data.join("disk.img"), &oracle);
    // The upload server is gone: a proxy error is reported as such.
    let r = ok(http.post(url("/v1beta1/upload")).bearer_auth(&good).body("x").send().await);
    assert_eq!(r.status(), 500);
    assert!(ok(r.text().await).starts_with("error in upload-proxy: "));
    proxy.abort();
}

/// A refusal sent before the body was read must reach the client: the connection is half-closed and drained, not
/// reset (a RST made clients report `Broken pipe` instead of the 400/401/503).
#[tokio::test(flavor = "multi_thread")]
async fn early_refusals_of_large_bodies_reach_the_client() {
    let pki = Pki::new();
    let (_, public) = ok(token::generate_key_pair());
    let cluster = Arc::new(FakeCluster { pvcs: Mutex::new(BTreeMap::new()), endpoint: ok("127.0.0.1:9".parse()) });
    let cfg = proxy_config(&pki, public);
    let proxy = ok(uploader::proxy::start(cfg, cluster).await);
    let url = format!("https://127.0.0.1:{}/v1beta1/upload", proxy.addr.port());
    let body = bytes::Bytes::from(vec![7u8; 8 << 20]);
    // One client (connection pool) for all: a refused connection must not be offered for reuse either
    // (`Connection: close`), or the next request races the server's close ("connection closed before message
    // completed").
    let http = ok(reqwest::Client::builder().danger_accept_invalid_certs(true).build());
    for i in 0..20 {
        let auth = if i % 2 == 0 { "Basic abc" } else { "Bearer not.a.jwt" };
        let r = http.post(&url).header("Authorization", auth).body(body.clone()).send().await;
        let r = r.unwrap_or_else(|e| panic!("attempt {i}: {e:?}"));
        assert_eq!(r.status(), if i % 2 == 0 { 400 } else { 401 }, "attempt {i}");
        assert_eq!(r.headers().get("connection").and_then(|v| v.to_str().ok()), Some("close"), "attempt {i}");
    }
    proxy.abort();
}
