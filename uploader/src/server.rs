//! The upload server (pod `cdi-upload-<pvc>`, binary `uploadserver`): accepts exactly one successful upload
//! and streams its body into the importer pipeline.
//!
//! ```text
//! POST body ─► pump task ─► importer push source (bounded channel) ─► pipeline on a blocking thread ─► target
//!                 └─ after the pipeline stopped reading: drains what the client still sends, then answers
//! ```
//!
//! Flow: `Idle ─POST─► Uploading ─ok─► Done (exit 0, "Upload Complete")`; a failed upload returns to `Idle`
//! (the client may retry). Guarantees (upstream's status codes, specs/cdi.md §4.3): no verified client
//! certificate with CN == `CLIENT_NAME` → 401; an upload while one runs → 503; after success → 409; a
//! capacity error → 400 `Saving stream failed: effective image size is larger than the reported available
//! storage: …`; any other failure → 500 `Saving stream failed: …`. `/healthz` and `/metrics` need no client
//! certificate. Async paths answer `HEAD` with 200. The async paths answer after the import finished too
//! (conversion happens while the body streams in, so there is nothing left to do in the background).
//! Once `DEADLINE` has passed and no upload runs, the server stops with [`Outcome::DeadlinePassed`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use contracts::cdi::consts::message;
use contracts::cdi::env::var;
use contracts::cdi::{ContentType, EnvError, TerminationMessage, UploadServerEnv};
use futures::StreamExt;
use futures::stream::BoxStream;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use importer::pod::archive::extract_tar;
use importer::pod::metrics::TransferMeter;
use importer::pod::volume::{Volume, set_mode};
use importer::progress::{Phase, Progress};
use importer::source::{OpenedSource, SourceLocation, SourceOptions, push};
use importer::{ErrorKind, ImportRequest, pipeline};
use tokio::net::TcpListener;
use tokio::sync::watch;

use controller_runtime::tls;

use crate::http::{Body, ConnInfo, empty, text};

/// The progress metric the DataVolume controller scrapes.
pub const PROGRESS_METRIC: &str = "kubevirt_cdi_upload_progress_total";
/// Header marking clone streams (not supported here).
pub const CONTENT_TYPE_HEADER: &str = "x-cdi-content-type";
/// What is drained from a client after a failed upload before answering (the rest is cut off).
const DRAIN_AFTER_ERROR: u64 = 256 << 20;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The environment is unusable.
    #[error(transparent)]
    Config(#[from] EnvError),
    /// TLS material could not be loaded.
    #[error("TLS setup failed")]
    Tls(#[from] tls::Error),
    /// Binding the listen address failed.
    #[error("binding {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The validated environment (specs/cdi.md §2.2 "Upload server", plus our test overrides).
#[derive(Debug, Clone)]
pub struct Config {
    /// `LISTEN_ADDRESS`:`LISTEN_PORT` (default `0.0.0.0:8443`).
    pub listen: SocketAddr,
    /// `TLS_CERT_FILE`.
    pub tls_cert: PathBuf,
    /// `TLS_KEY_FILE`.
    pub tls_key: PathBuf,
    /// `CLIENT_CERT_FILE`: the CA client certificates must chain to.
    pub client_ca: PathBuf,
    /// `CLIENT_NAME`: the required client certificate CN.
    pub client_name: String,
    /// `DESTINATION`: `/data/disk.img` or the block device.
    pub destination: PathBuf,
    /// `UPLOAD_IMAGE_SIZE` in bytes.
    pub image_size: Option<u64>,
    /// `FILESYSTEM_OVERHEAD`.
    pub overhead: f64,
    /// `PREALLOCATION`.
    pub preallocation: bool,
    /// `DEADLINE`.
    pub deadline: Option<SystemTime>,
    /// `OWNER_UID`: label of the progress metric.
    pub owner_uid: String,
    /// `UPLOADSERVER_SCRATCH_DIR` (default `/scratch`), used when it exists.
    pub scratch_dir: PathBuf,
    /// `UPLOADSERVER_TERMINATION_LOG` (default `/dev/termination-log`).
    pub termination_log: PathBuf,
}

impl Config {
    /// Reads the upload server's environment ([`UploadServerEnv`], plus this server's test overrides
    /// `UPLOADSERVER_SCRATCH_DIR` and `UPLOADSERVER_TERMINATION_LOG`).
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Config> {
        let e = UploadServerEnv::from_env(env)?;
        let get = |k: &str| env.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let host = e.listen_address.clone().unwrap_or_else(|| String::from("0.0.0.0"));
        let ip: std::net::IpAddr =
            host.parse().map_err(|_| EnvError::invalid(var::LISTEN_ADDRESS, format!("{host:?}")))?;
        let deadline = e
            .deadline
            .as_deref()
            .map(|d| {
                chrono::DateTime::parse_from_rfc3339(d)
                    .map(SystemTime::from)
                    .map_err(|err| EnvError::invalid(var::DEADLINE, format!("{d:?}: {err}")))
            })
            .transpose()?;
        Ok(Config {
            listen: SocketAddr::new(ip, e.listen_port),
            tls_cert: e.tls_cert_file.into(),
            tls_key: e.tls_key_file.into(),
            client_ca: e.client_cert_file.into(),
            client_name: e.client_name,
            destination: e.destination.into(),
            image_size: e.image_size.map(|q| q.bytes()),
            overhead: e.filesystem_overhead,
            preallocation: e.preallocation,
            deadline,
            owner_uid: e.owner_uid,
            scratch_dir: get("UPLOADSERVER_SCRATCH_DIR").unwrap_or_else(|| String::from("/scratch")).into(),
            termination_log: get("UPLOADSERVER_TERMINATION_LOG")
                .unwrap_or_else(|| String::from("/dev/termination-log"))
                .into(),
        })
    }
}

/// Synchronous or asynchronous upload path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `/upload`: answered after the import.
    Sync,
    /// `/upload-async`: also answers `HEAD` (clients probe it).
    Async,
}

/// How the image is carried in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// The body is the image.
    Body,
    /// `multipart/form-data`, the part named `file`.
    Form,
}

/// Where a path leads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/healthz`.
    Healthz,
    /// `/metrics`.
    Metrics,
    /// An upload path.
    Upload {
        /// Sync or async.
        mode: Mode,
        /// Body or form.
        carrier: Carrier,
        /// Image or archive.
        content: ContentType,
    },
    /// Anything else (404).
    NotFound,
}

/// The route table (upstream `common.*UploadPaths`).
pub fn route(path: &str) -> Route {
    let up = |mode, carrier, content| Route::Upload { mode, carrier, content };
    let rest = match path {
        "/healthz" => return Route::Healthz,
        "/metrics" => return Route::Metrics,
        p => match p.strip_prefix("/v1beta1/").or_else(|| p.strip_prefix("/v1alpha1/")) {
            Some(r) => r,
            None => return Route::NotFound,
        },
    };
    match rest {
        "upload" => up(Mode::Sync, Carrier::Body, ContentType::Kubevirt),
        "upload-async" => up(Mode::Async, Carrier::Body, ContentType::Kubevirt),
        "upload-archive" => up(Mode::Sync, Carrier::Body, ContentType::Archive),
        "upload-form" => up(Mode::Sync, Carrier::Form, ContentType::Kubevirt),
        "upload-form-async" => up(Mode::Async, Carrier::Form, ContentType::Kubevirt),
        _ => Route::NotFound,
    }
}

/// How the server stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// An upload succeeded.
    Complete {
        /// Preallocation was applied.
        preallocated: bool,
    },
    /// The deadline passed with no upload done.
    DeadlinePassed,
}

impl Outcome {
    /// The termination message (specs/cdi.md §2.5 key order).
    pub fn termination_message(self) -> String {
        match self {
            Outcome::Complete { preallocated } => TerminationMessage {
                preallocation_applied: Some(preallocated),
                ..TerminationMessage::text(message::UPLOAD_COMPLETE)
            },
            Outcome::DeadlinePassed => {
                TerminationMessage { deadline_passed: Some(true), ..TerminationMessage::text("Deadline Passed") }
            }
        }
        .to_line()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Uploading,
    Done,
}

struct Shared {
    cfg: Config,
    state: Mutex<State>,
    progress: Progress,
    /// Highest percentage ×100 reported (the counter never goes down).
    best: AtomicU64,
    /// The transfer detail (bytes, rate, time left) the DataVolume controller shows.
    meter: TransferMeter,
    done: watch::Sender<Option<Outcome>>,
}

impl Shared {
    fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn set_state(&self, s: State) {
        *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = s;
    }

    /// Moves Idle → Uploading; otherwise says why not.
    fn begin(&self) -> Result<(), StatusCode> {
        let mut st = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match *st {
            State::Uploading => Err(StatusCode::SERVICE_UNAVAILABLE),
            State::Done => Err(StatusCode::CONFLICT),
            State::Idle => {
                *st = State::Uploading;
                Ok(())
            }
        }
    }

    fn render_metrics(&self) -> String {
        let s = self.progress.snapshot();
        let pct = if self.state() == State::Done { 100.0 } else { s.overall_percent() };
        let v = (pct.clamp(0.0, 100.0) * 100.0) as u64;
        let best = self.best.fetch_max(v, Ordering::Relaxed).max(v);
        let uid = self.cfg.owner_uid.replace('\\', "\\\\").replace('"', "\\\"");
        format!(
            "# HELP {PROGRESS_METRIC} The upload progress in percentage\n\
             # TYPE {PROGRESS_METRIC} counter\n\
             {PROGRESS_METRIC}{{ownerUID=\"{uid}\"}} {:.2}\n\
             # HELP kubevirt_rs_upload_received_bytes Bytes of upload body received so far\n\
             # TYPE kubevirt_rs_upload_received_bytes counter\n\
             kubevirt_rs_upload_received_bytes{{owner_uid=\"{uid}\"}} {}\n{}",
            best as f64 / 100.0,
            s.source_bytes,
            // Only while a body streams: an idle server has nothing in flight to describe.
            if self.state() == State::Uploading {
                self.meter.observe(&s).render(&self.cfg.owner_uid)
            } else {
                String::new()
            },
        )
    }
}

/// The target volume: `DESTINATION` if it is a block device, else the directory holding the image file.
fn volume(dest: &Path) -> Volume {
    let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Volume::detect(dest, dir)
}

/// Runs one upload's import on the calling (blocking) thread. Returns whether preallocation was applied.
fn import(cfg: &Config, content: ContentType, opened: OpenedSource, progress: &Progress) -> importer::Result<bool> {
    let vol = volume(&cfg.destination);
    let scratch = cfg.scratch_dir.is_dir().then(|| cfg.scratch_dir.clone());
    let name = SourceLocation::File(PathBuf::from("upload body"));
    match content {
        ContentType::Archive => {
            extract_tar(
                &vol,
                "upload",
                progress,
                || pipeline::probe_opened(opened, &name, progress, None, false),
                || Ok(()),
            )?;
            Ok(false)
        }
        ContentType::Kubevirt => {
            let (dest, size) = vol.import_target(&cfg.destination, cfg.overhead, cfg.image_size)?;
            let req = ImportRequest {
                source: name,
                dest: dest.clone(),
                checksum: None,
                size,
                preallocate: cfg.preallocation,
                http: SourceOptions::default(),
                scratch,
                // An upload body cannot be asked for again from an offset.
                resume: false,
            };
            let report = pipeline::import_opened(&req, opened, progress)?;
            if matches!(vol, Volume::Filesystem(_)) {
                set_mode(&dest)?;
            }
            Ok(report.preallocated)
        }
    }
}

/// The image bytes of a request: the body itself, or the `file` part of a multipart form.
async fn image_stream(
    req: Request<Incoming>,
    carrier: Carrier,
) -> Result<BoxStream<'static, Result<Bytes, String>>, String> {
    let (parts, body) = req.into_parts();
    let frames = http_body_util::BodyStream::new(body).filter_map(|f| async move {
        match f {
            Ok(frame) => frame.into_data().ok().map(Ok),
            Err(e) => Some(Err(e.to_string())),
        }
    });
    match carrier {
        Carrier::Body => Ok(frames.boxed()),
        Carrier::Form => {
            let ct = parts.headers.get(hyper::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
            let boundary = multer::parse_boundary(ct).map_err(|e| format!("invalid multipart request: {e}"))?;
            let mut mp = multer::Multipart::new(frames, boundary);
            loop {
                match mp.next_field().await {
                    Ok(Some(f)) if f.name() == Some("file") => {
                        return Ok(f.map(|c| c.map_err(|e| e.to_string())).boxed());
                    }
                    Ok(Some(f)) => tracing::info!("ignoring form part {:?}", f.name()),
                    Ok(None) => return Err(String::from("multipart request has no part named \"file\"")),
                    Err(e) => return Err(format!("invalid multipart request: {e}")),
                }
            }
        }
    }
}

/// Feeds `stream` into `tx`; once the pipeline stops reading, drains up to `drain_limit` more bytes so the
/// client can finish sending and read the answer. Returns the bytes received.
async fn pump(
    mut stream: BoxStream<'static, Result<Bytes, String>>,
    tx: push::PushSender,
    drain_limit: Arc<AtomicU64>,
) -> u64 {
    let mut received = 0u64;
    let mut tx = Some(tx);
    let mut drained = 0u64;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                received += c.len() as u64;
                if let Some(t) = &tx {
                    if t.send(c).await.is_err() {
                        tx = None;
                    }
                } else {
                    drained += c.len() as u64;
                    if drained > drain_limit.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            Err(e) => {
                if let Some(t) = tx.take() {
                    t.fail(format!("receiving the upload failed: {e}")).await;
                }
                break;
            }
        }
    }
    received
}

async fn handle_upload(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    carrier: Carrier,
    content: ContentType,
) -> Response<Body> {
    if let Some(ct) = req.headers().get(CONTENT_TYPE_HEADER).and_then(|v| v.to_str().ok())
        && !ct.is_empty()
    {
        shared.set_state(State::Idle);
        return text(StatusCode::BAD_REQUEST, format!("Saving stream failed: clone streams ({ct}) are not supported"));
    }
    let size = match carrier {
        Carrier::Body => req
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok()),
        Carrier::Form => None,
    };
    let stream = match image_stream(req, carrier).await {
        Ok(s) => s,
        Err(e) => {
            shared.set_state(State::Idle);
            return text(StatusCode::BAD_REQUEST, e);
        }
    };
    let (tx, opened) = push::channel(size);
    let drain_limit = Arc::new(AtomicU64::new(u64::MAX));
    let pumper = tokio::spawn(pump(stream, tx, drain_limit.clone()));
    let sh = shared.clone();
    let result = tokio::task::spawn_blocking(move || import(&sh.cfg, content, opened, &sh.progress))
        .await
        .unwrap_or_else(|e| Err(importer::Error::InvalidRequest(format!("import task failed: {e}"))));
    if result.is_err() {
        drain_limit.store(DRAIN_AFTER_ERROR, Ordering::Relaxed);
    }
    let received = pumper.await.unwrap_or(0);
    match result {
        Ok(preallocated) => {
            tracing::info!(received, destination = %shared.cfg.destination.display(), "upload complete");
            shared.set_state(State::Done);
            shared.progress.start_phase(Phase::Finish, None);
            let _ = shared.done.send(Some(Outcome::Complete { preallocated }));
            empty(StatusCode::OK)
        }
        Err(e) => {
            shared.set_state(State::Idle);
            let line = e.one_line();
            tracing::error!("Saving stream failed: {line}");
            if e.kind() == ErrorKind::Capacity {
                text(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "Saving stream failed: effective image size is larger than the reported available storage: {line}"
                    ),
                )
            } else {
                text(StatusCode::INTERNAL_SERVER_ERROR, format!("Saving stream failed: {line}"))
            }
        }
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>, conn: Arc<ConnInfo>) -> Response<Body> {
    match route(req.uri().path()) {
        Route::Healthz => text(StatusCode::OK, "OK"),
        Route::Metrics => {
            let mut r = text(StatusCode::OK, shared.render_metrics());
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        Route::NotFound => empty(StatusCode::NOT_FOUND),
        Route::Upload { mode, carrier, content } => {
            if mode == Mode::Async && req.method() == Method::HEAD {
                return empty(StatusCode::OK);
            }
            if req.method() != Method::POST {
                return empty(StatusCode::NOT_FOUND);
            }
            if conn.peer_cn.as_deref() != Some(shared.cfg.client_name.as_str()) {
                tracing::warn!(remote = %conn.remote, cn = ?conn.peer_cn, "upload without a valid client certificate");
                return empty(StatusCode::UNAUTHORIZED);
            }
            if let Err(code) = shared.begin() {
                tracing::warn!(%code, "refusing upload");
                return empty(code);
            }
            handle_upload(shared, req, carrier, content).await
        }
    }
}

/// A running upload server.
#[derive(Debug)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<Outcome>,
}

impl Running {
    /// Waits until the server stopped: after a successful upload (its response sent) or at the deadline.
    pub async fn wait(self) -> Outcome {
        self.task.await.unwrap_or(Outcome::DeadlinePassed)
    }
}

/// Loads TLS material, binds and starts serving.
pub async fn start(cfg: Config) -> Result<Running> {
    let chain = tls::load_certs(&cfg.tls_cert)?;
    let key = tls::load_key(&cfg.tls_key)?;
    let cas = tls::roots(&tls::load_certs(&cfg.client_ca)?)?;
    let tls = tls::server_config(chain, key, Some(cas))?;
    let listener = TcpListener::bind(cfg.listen).await.map_err(|source| Error::Bind { addr: cfg.listen, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: cfg.listen, source })?;
    let (done_tx, mut done_rx) = watch::channel(None);
    let deadline = cfg.deadline;
    let shared = Arc::new(Shared {
        cfg,
        state: Mutex::new(State::Idle),
        progress: Progress::new(),
        best: AtomicU64::new(0),
        meter: TransferMeter::default(),
        done: done_tx,
    });
    let sh = shared.clone();
    let handler = move |req, conn| handle(sh.clone(), req, conn);
    let outcome = Arc::new(Mutex::new(None::<Outcome>));
    let out2 = outcome.clone();
    let sh2 = shared.clone();
    let stop = async move {
        let completed = async move {
            loop {
                let current = *done_rx.borrow_and_update();
                if current.is_some() {
                    return current;
                }
                if done_rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        let result = tokio::select! {
            r = completed => r,
            o = wait_deadline(sh2, deadline) => Some(o),
        };
        *out2.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = result;
    };
    let task = tokio::spawn(async move {
        crate::http::serve_tls(listener, tls, handler, stop, Duration::from_secs(30)).await;
        outcome.lock().unwrap_or_else(std::sync::PoisonError::into_inner).unwrap_or(Outcome::DeadlinePassed)
    });
    Ok(Running { addr, task })
}

/// Resolves once the deadline passed while idle (an upload in progress delays it; a finished one never
/// resolves it).
async fn wait_deadline(shared: Arc<Shared>, deadline: Option<SystemTime>) -> Outcome {
    let Some(deadline) = deadline else { return std::future::pending().await };
    if let Ok(d) = deadline.duration_since(SystemTime::now()) {
        tokio::time::sleep(d).await;
    }
    loop {
        let seen = {
            let mut st = shared.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let seen = *st;
            if seen == State::Idle {
                *st = State::Done; // refuse late uploads while shutting down
            }
            seen
        };
        match seen {
            State::Idle => {
                tracing::info!("deadline passed, shutting down");
                return Outcome::DeadlinePassed;
            }
            State::Done => return std::future::pending().await,
            State::Uploading => tokio::time::sleep(Duration::from_secs(2)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_table() {
        use Carrier::*;
        use ContentType::*;
        use Mode::*;
        let up = |mode, carrier, content| Route::Upload { mode, carrier, content };
        for v in ["v1beta1", "v1alpha1"] {
            assert_eq!(route(&format!("/{v}/upload")), up(Sync, Body, Kubevirt));
            assert_eq!(route(&format!("/{v}/upload-async")), up(Async, Body, Kubevirt));
            assert_eq!(route(&format!("/{v}/upload-archive")), up(Sync, Body, Archive));
            assert_eq!(route(&format!("/{v}/upload-form")), up(Sync, Form, Kubevirt));
            assert_eq!(route(&format!("/{v}/upload-form-async")), up(Async, Form, Kubevirt));
        }
        assert_eq!(route("/healthz"), Route::Healthz);
        assert_eq!(route("/metrics"), Route::Metrics);
        for p in ["/", "/v1beta1/uploadx", "/v2/upload", "/v1beta1/upload/", "/upload"] {
            assert_eq!(route(p), Route::NotFound, "{p}");
        }
    }

    #[test]
    fn termination_messages() {
        assert_eq!(
            Outcome::Complete { preallocated: false }.termination_message(),
            r#"{"preallocationApplied":false,"message":"Upload Complete"}"#
        );
        assert_eq!(
            Outcome::DeadlinePassed.termination_message(),
            r#"{"deadlinePassed":true,"message":"Deadline Passed"}"#
        );
    }

    #[test]
    fn single_upload_state_machine() {
        let (tx, _rx) = watch::channel(None);
        let cfg = Config::from_env(&env(&[("TLS_KEY_FILE", "k"), ("TLS_CERT_FILE", "c"), ("CLIENT_CERT_FILE", "a")]))
            .unwrap_or_else(|e| panic!("{e}"));
        let s = Shared {
            cfg,
            state: Mutex::new(State::Idle),
            progress: Progress::new(),
            best: AtomicU64::new(0),
            meter: TransferMeter::default(),
            done: tx,
        };
        assert!(s.render_metrics().contains("\nkubevirt_cdi_upload_progress_total{ownerUID=\"\"} 0.00\n"));
        assert_eq!(s.begin(), Ok(()));
        assert_eq!(s.begin(), Err(StatusCode::SERVICE_UNAVAILABLE), "concurrent upload");
        s.set_state(State::Idle); // a failed upload may be retried
        assert_eq!(s.begin(), Ok(()));
        s.set_state(State::Done);
        assert_eq!(s.begin(), Err(StatusCode::CONFLICT), "after success");
        assert!(s.render_metrics().contains("{ownerUID=\"\"} 100.00\n"));
    }

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reads_the_controllers_environment() {
        let base = [
            ("TLS_KEY_FILE", "/etc/tls/tls.key"),
            ("TLS_CERT_FILE", "/etc/tls/tls.crt"),
            ("CLIENT_CERT_FILE", "/etc/tls/ca.crt"),
            ("CLIENT_NAME", "client.upload-server.cdi.kubevirt.io"),
            ("UPLOAD_IMAGE_SIZE", "1Gi"),
            ("DESTINATION", "/dev/cdi-block-volume"),
            ("DEADLINE", "2030-01-02T03:04:05Z"),
            ("LISTEN_PORT", "8443"),
            ("PREALLOCATION", "true"),
            ("FILESYSTEM_OVERHEAD", "0.06"),
            ("OWNER_UID", "u-1"),
        ];
        let c = Config::from_env(&env(&base)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.image_size, Some(1 << 30));
        assert_eq!(c.listen.port(), 8443);
        assert!(c.preallocation);
        assert_eq!(c.overhead, 0.06);
        assert_eq!(c.destination, PathBuf::from("/dev/cdi-block-volume"));
        assert_eq!(
            c.deadline.map(|d| d.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).ok()),
            Some(Some(1_893_553_445))
        );
        assert_eq!(c.termination_log, PathBuf::from("/dev/termination-log"));
        let mut bad = env(&base);
        bad.insert("PREALLOCATION".into(), "maybe".into());
        assert!(Config::from_env(&bad).err().map(|e| e.to_string()).unwrap_or_default().contains("PREALLOCATION"));
        let mut bad = env(&base);
        bad.insert("DEADLINE".into(), "tomorrow".into());
        assert!(Config::from_env(&bad).is_err());
        let mut bad = env(&base);
        bad.remove("TLS_CERT_FILE");
        assert!(Config::from_env(&bad).err().map(|e| e.to_string()).unwrap_or_default().contains("TLS_CERT_FILE"));
    }
}
