//! `importer serve`: the source side of a host-assisted PVC clone. Serves one volume's disk image read-only over
//! HTTPS; the target side is an ordinary importer pod importing `https://<source-pod-ip>:8443/disk.img` with
//! `INSECURE_TLS=true` and an `Authorization: Bearer <token>` header.
//!
//! ```text
//! clone target (importer, pod mode) ──HTTPS, Bearer token──► importer serve ──pread, 1 MiB──► SERVE_PATH (ro)
//! ```
//!
//! # Contract (relied on by the DataVolume controller)
//!
//! * Configuration (read by `main.rs` only): `SERVE_PATH` (default [`DEFAULT_BLOCK_PATH`] if that is a block
//!   device, else [`DEFAULT_FILE_PATH`]), `SERVE_TOKEN_FILE` (default [`DEFAULT_TOKEN_FILE`]; its trimmed contents
//!   are the bearer token and must be non-empty, else exit 1), `SERVE_ADDR` (default `0.0.0.0:8443`),
//!   `SERVE_IDLE_EXIT` seconds (default 600, `0` disables).
//! * TLS with a self-signed certificate made at start (`controller_runtime::tls::self_signed_config`), HTTP/1.1,
//!   served by the shared accept loop `controller_runtime::tls::serve_tls`.
//! * `GET`/`HEAD` on `/disk.img` (or any path ending in `/disk.img`) need `Authorization: Bearer <token>`
//!   (compared in constant time; `401` otherwise). `Content-Length` is the file size or the block device size,
//!   `Accept-Ranges: bytes`; one `Range: bytes=a-b`, `bytes=a-` or `bytes=-n` gives `206` with `Content-Range`, an
//!   unsatisfiable one `416` with `Content-Range: bytes */<size>`; invalid or multi-range headers are ignored
//!   (`200`, whole image). Bodies stream in 1 MiB reads on a blocking thread with at most a few chunks in flight.
//! * `GET /healthz` answers `200 OK` without auth. Other paths `404`, other methods `405`.
//! * The image is opened read-only and never written.
//! * Exit: [`serve`] returns [`ServeExit::Idle`] once no authorized image request has been active for the idle
//!   time (counted from start or from the end of the last such request; `/healthz` and rejected requests do not
//!   count, so probes cannot keep an abandoned source pod alive), and [`ServeExit::Shutdown`] when the `shutdown`
//!   future completes (SIGTERM in `main.rs`). Both exit 0.

use std::fs::File;
use std::future::Future;
use std::io::{self, Seek, SeekFrom};
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Bytes, Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;
use tokio::time::Instant;

use controller_runtime::tls;

/// Default image path when the volume is a block device (CDI's block volume mount point).
pub const DEFAULT_BLOCK_PATH: &str = "/dev/cdi-block-volume";
/// Default image path for a filesystem volume.
pub const DEFAULT_FILE_PATH: &str = "/data/disk.img";
/// Default bearer-token file.
pub const DEFAULT_TOKEN_FILE: &str = "/clone-token/token";
/// Default listen address.
pub const DEFAULT_ADDR: &str = "0.0.0.0:8443";
/// Default idle time before exiting, in seconds.
pub const DEFAULT_IDLE_EXIT_SECS: u64 = 600;

/// Bytes per read from the image.
const CHUNK: usize = 1 << 20;
/// Chunks buffered between the reading thread and the connection.
const CHUNKS_IN_FLIGHT: usize = 4;

/// Errors of `importer serve`.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The token file could not be read.
    #[error("cannot read bearer token file {}", path.display())]
    TokenRead {
        /// The token file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The token file holds only whitespace.
    #[error("bearer token file {} is empty", path.display())]
    TokenEmpty {
        /// The token file.
        path: PathBuf,
    },
    /// The image could not be opened or measured.
    #[error("cannot open {} read-only", path.display())]
    Open {
        /// The image path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// TLS setup failed.
    #[error("TLS setup")]
    Tls(#[source] tls::Error),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// Result alias of this module.
pub type Result<T, E = ServeError> = std::result::Result<T, E>;

/// What `importer serve` serves, and how.
#[derive(Clone)]
pub struct ServeConfig {
    /// The image: a regular file or a block device, opened read-only.
    pub path: PathBuf,
    /// The bearer token clients must present.
    pub token: String,
    /// Listen address.
    pub addr: SocketAddr,
    /// Exit after this long without an active image request; `None` never.
    pub idle_exit: Option<Duration>,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("path", &self.path)
            .field("token", &"<redacted>")
            .field("addr", &self.addr)
            .field("idle_exit", &self.idle_exit)
            .finish()
    }
}

/// Why [`serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeExit {
    /// No image request was active for the idle time.
    Idle,
    /// The shutdown future completed.
    Shutdown,
}

/// The default image path: [`DEFAULT_BLOCK_PATH`] if it exists and is a block device, else [`DEFAULT_FILE_PATH`].
pub fn default_path() -> PathBuf {
    match std::fs::metadata(DEFAULT_BLOCK_PATH) {
        Ok(m) if m.file_type().is_block_device() => PathBuf::from(DEFAULT_BLOCK_PATH),
        _ => PathBuf::from(DEFAULT_FILE_PATH),
    }
}

/// Reads the bearer token from `path`: its contents, trimmed; empty is an error.
pub fn read_token(path: &Path) -> Result<String> {
    let raw = std::fs::read_to_string(path).map_err(|source| ServeError::TokenRead { path: path.into(), source })?;
    let token = raw.trim();
    if token.is_empty() {
        return Err(ServeError::TokenEmpty { path: path.into() });
    }
    Ok(token.to_owned())
}

/// A bound server, not yet serving: lets callers learn the address (e.g. after binding port 0).
pub struct Server {
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    state: Arc<State>,
    idle_exit: Option<Duration>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.listener.local_addr().ok()).finish_non_exhaustive()
    }
}

/// Shared by all connections.
struct State {
    path: PathBuf,
    file: File,
    token: String,
    activity: Mutex<Activity>,
}

/// Image requests in progress and when the last one ended.
struct Activity {
    active: usize,
    last_done: Instant,
}

/// Counts an image request as active until dropped (which happens when its body is done or abandoned).
struct ActiveGuard(Arc<State>);

impl ActiveGuard {
    fn new(state: Arc<State>) -> Self {
        state.activity.lock().unwrap_or_else(PoisonError::into_inner).active += 1;
        ActiveGuard(state)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        let mut a = self.0.activity.lock().unwrap_or_else(PoisonError::into_inner);
        a.active = a.active.saturating_sub(1);
        a.last_done = Instant::now();
    }
}

impl State {
    /// When the server may exit for idleness, if nothing starts before then.
    fn idle_deadline(&self, idle: Duration) -> Instant {
        let a = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        if a.active > 0 { Instant::now() + idle } else { a.last_done + idle }
    }

    fn is_idle(&self, idle: Duration) -> bool {
        let a = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        a.active == 0 && a.last_done.elapsed() >= idle
    }

    /// The image size: the file length, or for a block device the offset of its end.
    fn size(&self) -> io::Result<u64> {
        let m = self.file.metadata()?;
        if m.file_type().is_block_device() { (&self.file).seek(SeekFrom::End(0)) } else { Ok(m.len()) }
    }
}

impl Server {
    /// Opens the image read-only, makes the TLS certificate and binds the address.
    pub async fn bind(cfg: ServeConfig) -> Result<Server> {
        let file = File::open(&cfg.path).map_err(|source| ServeError::Open { path: cfg.path.clone(), source })?;
        let state = Arc::new(State {
            path: cfg.path.clone(),
            file,
            token: cfg.token,
            activity: Mutex::new(Activity { active: 0, last_done: Instant::now() }),
        });
        let size = state.size().map_err(|source| ServeError::Open { path: cfg.path.clone(), source })?;
        let tls = tls::self_signed_config().map_err(ServeError::Tls)?;
        let listener =
            TcpListener::bind(cfg.addr).await.map_err(|source| ServeError::Bind { addr: cfg.addr, source })?;
        tracing::info!(path = %cfg.path.display(), size, addr = %cfg.addr, "serving disk image read-only");
        Ok(Server { listener, tls, state, idle_exit: cfg.idle_exit })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until idle or until `shutdown` completes; open connections are dropped on return.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> ServeExit {
        let Server { listener, tls, state, idle_exit } = self;
        let idle_state = state.clone();
        let stop = async move {
            tokio::select! {
                () = shutdown => {
                    tracing::info!("shutting down");
                    ServeExit::Shutdown
                }
                () = idle(&idle_state, idle_exit) => ServeExit::Idle,
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stop = async move {
            let _ = tx.send(stop.await);
        };
        let handler = move |req: Request<Incoming>, peer: Arc<tls::Peer>| {
            let state = state.clone();
            async move { handle(&state, &req, peer.addr) }
        };
        tls::serve_tls(listener, tls, handler, stop, Duration::ZERO).await;
        rx.await.unwrap_or(ServeExit::Shutdown)
    }
}

/// Resolves once no image request has been active for `idle` (never without one).
async fn idle(state: &State, idle: Option<Duration>) {
    let Some(idle) = idle else { return std::future::pending().await };
    loop {
        tokio::time::sleep_until(state.idle_deadline(idle)).await;
        if state.is_idle(idle) {
            tracing::info!(idle_secs = idle.as_secs_f64(), "no image request for the idle time, exiting");
            return;
        }
    }
}

/// Binds per `cfg` and serves until idle or until `shutdown` completes (see the module docs for the contract).
pub async fn serve(cfg: ServeConfig, shutdown: impl Future<Output = ()>) -> Result<ServeExit> {
    Ok(Server::bind(cfg).await?.run(shutdown).await)
}

type Body = UnsyncBoxBody<Bytes, io::Error>;

fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed_unsync()
}

fn text(status: StatusCode, msg: &'static str) -> Response<Body> {
    let mut r =
        Response::new(Full::new(Bytes::from_static(msg.as_bytes())).map_err(|never| match never {}).boxed_unsync());
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// Constant-time equality (the length is not secret).
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Whether `req` carries `Authorization: Bearer <token>`.
fn authorized(req: &Request<Incoming>, token: &str) -> bool {
    let Some(v) = req.headers().get(header::AUTHORIZATION) else { return false };
    let v = v.as_bytes();
    let scheme = b"bearer ";
    if v.len() < scheme.len() || !v[..scheme.len()].eq_ignore_ascii_case(scheme) {
        return false;
    }
    ct_eq(v[scheme.len()..].trim_ascii(), token.as_bytes())
}

/// What a `Range` header asks of an image of a given size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeSpec {
    /// No (usable) range: the whole image.
    Full,
    /// Bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// A valid range that lies outside the image.
    Unsatisfiable,
}

/// Interprets one `Range` header value for an image of `size` bytes. Invalid syntax, other units and multiple
/// ranges are ignored (RFC 9110 §14.2 allows serving the whole representation).
fn parse_range(value: &str, size: u64) -> RangeSpec {
    let Some(spec) = value.trim().strip_prefix("bytes=") else { return RangeSpec::Full };
    if spec.contains(',') {
        return RangeSpec::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else { return RangeSpec::Full };
    let num = |s: &str| -> Option<u64> {
        if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) { None } else { s.parse().ok() }
    };
    match (a.trim(), b.trim()) {
        ("", n) => match num(n) {
            None => RangeSpec::Full,
            Some(0) => RangeSpec::Unsatisfiable,
            Some(_) if size == 0 => RangeSpec::Unsatisfiable,
            Some(n) => RangeSpec::Partial { start: size.saturating_sub(n), end: size - 1 },
        },
        (a, "") => match num(a) {
            None => RangeSpec::Full,
            Some(a) if a >= size => RangeSpec::Unsatisfiable,
            Some(a) => RangeSpec::Partial { start: a, end: size - 1 },
        },
        (a, b) => match (num(a), num(b)) {
            (Some(a), Some(b)) if a <= b => {
                if a >= size {
                    RangeSpec::Unsatisfiable
                } else {
                    RangeSpec::Partial { start: a, end: b.min(size - 1) }
                }
            }
            _ => RangeSpec::Full,
        },
    }
}

/// Routes one request.
fn handle(state: &Arc<State>, req: &Request<Incoming>, peer: SocketAddr) -> Response<Body> {
    let path = req.uri().path();
    let method = req.method();
    let resp = if path == "/healthz" {
        match *method {
            Method::GET | Method::HEAD => text(StatusCode::OK, "OK"),
            _ => not_allowed(),
        }
    } else if path.ends_with("/disk.img") {
        match *method {
            Method::GET | Method::HEAD if !authorized(req, &state.token) => {
                tracing::warn!(%peer, %method, path, "rejected: missing or wrong bearer token");
                let mut r = text(StatusCode::UNAUTHORIZED, "unauthorized");
                r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                r
            }
            Method::GET | Method::HEAD => image(state, req),
            _ => not_allowed(),
        }
    } else {
        text(StatusCode::NOT_FOUND, "not found")
    };
    let range = req.headers().get(header::RANGE).and_then(|v| v.to_str().ok()).unwrap_or("");
    tracing::info!(%peer, %method, path, range, status = resp.status().as_u16(), "request");
    resp
}

fn not_allowed() -> Response<Body> {
    let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    r
}

/// Answers an authorized `GET`/`HEAD` of the image.
fn image(state: &Arc<State>, req: &Request<Incoming>) -> Response<Body> {
    let guard = ActiveGuard::new(state.clone());
    let size = match state.size() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(path = %state.path.display(), "size of image: {e}");
            return text(StatusCode::INTERNAL_SERVER_ERROR, "cannot read image");
        }
    };
    let range = req
        .headers()
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map_or(RangeSpec::Full, |v| parse_range(v, size));
    let (status, start, len) = match range {
        RangeSpec::Full => (StatusCode::OK, 0, size),
        RangeSpec::Partial { start, end } => (StatusCode::PARTIAL_CONTENT, start, end - start + 1),
        RangeSpec::Unsatisfiable => {
            let mut r = text(StatusCode::RANGE_NOT_SATISFIABLE, "range not satisfiable");
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return r;
        }
    };
    let body = if req.method() == Method::HEAD || len == 0 { empty() } else { stream_body(guard, start, len) };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if status == StatusCode::PARTIAL_CONTENT
        && let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{}/{size}", start + len - 1))
    {
        h.insert(header::CONTENT_RANGE, v);
    }
    r
}

/// Streams `len` bytes from `start`: a blocking thread reads 1 MiB chunks into a small bounded channel; it stops
/// when the body is dropped (client gone). `guard` keeps the request active until then.
fn stream_body(guard: ActiveGuard, start: u64, len: u64) -> Body {
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(CHUNKS_IN_FLIGHT);
    let state = guard.0.clone();
    tokio::task::spawn_blocking(move || {
        let mut off = start;
        let end = start + len;
        while off < end {
            let want = usize::try_from(end - off).map_or(CHUNK, |n| n.min(CHUNK));
            let mut buf = vec![0u8; want];
            let item = match crate::source::file::read_full_at(&state.file, &mut buf, off) {
                Ok(n) if n == want => Ok(Bytes::from(buf)),
                // The image shrank while being served.
                Ok(_) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "image ended early")),
                Err(e) => {
                    tracing::error!(path = %state.path.display(), offset = off, "read image: {e}");
                    Err(e)
                }
            };
            let failed = item.is_err();
            if tx.blocking_send(item).is_err() || failed {
                return;
            }
            off += want as u64;
        }
    });
    let stream = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        let item = rx.recv().await?;
        Some((item.map(Frame::data), (rx, guard)))
    });
    BodyExt::boxed_unsync(StreamBody::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        use RangeSpec::*;
        let cases: &[(&str, u64, RangeSpec)] = &[
            ("bytes=0-99", 1000, Partial { start: 0, end: 99 }),
            ("bytes=10-", 1000, Partial { start: 10, end: 999 }),
            ("bytes=-100", 1000, Partial { start: 900, end: 999 }),
            ("bytes=-5000", 1000, Partial { start: 0, end: 999 }),
            ("bytes=990-5000", 1000, Partial { start: 990, end: 999 }),
            ("bytes=999-999", 1000, Partial { start: 999, end: 999 }),
            ("bytes=1000-", 1000, Unsatisfiable),
            ("bytes=1000-2000", 1000, Unsatisfiable),
            ("bytes=-0", 1000, Unsatisfiable),
            ("bytes=-1", 0, Unsatisfiable),
            ("bytes=0-", 0, Unsatisfiable),
            ("bytes=5-1", 1000, Full),
            ("bytes=0-1,5-6", 1000, Full),
            ("items=0-1", 1000, Full),
            ("bytes=a-b", 1000, Full),
            ("bytes=-", 1000, Full),
            ("bytes=+1-2", 1000, Full),
        ];
        for (v, size, want) in cases {
            assert_eq!(parse_range(v, *size), *want, "{v} of {size}");
        }
    }

    #[test]
    fn constant_time_eq() {
        assert!(ct_eq(b"secret", b"secret"));
        assert!(!ct_eq(b"secret", b"secreT"));
        assert!(!ct_eq(b"secret", b"secret2"));
        assert!(ct_eq(b"", b""));
    }

    #[test]
    fn token_file_is_trimmed_and_required() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let p = dir.path().join("token");
        assert!(matches!(read_token(&p), Err(ServeError::TokenRead { .. })));
        std::fs::write(&p, " \n").unwrap_or_else(|e| panic!("write: {e}"));
        assert!(matches!(read_token(&p), Err(ServeError::TokenEmpty { .. })));
        std::fs::write(&p, "abc\n").unwrap_or_else(|e| panic!("write: {e}"));
        assert_eq!(read_token(&p).ok().as_deref(), Some("abc"));
    }
}
