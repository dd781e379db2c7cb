//! HTTP(S) source over reqwest + rustls.
//!
//! * One sequential GET streams the body; a background task reads it into a bounded channel so network
//!   reads overlap with conversion and writing. On a reset, a 5xx or a stall it resumes where it stopped
//!   (`Range: bytes=N-`, or by re-reading and discarding N bytes from a server without Range), with
//!   exponential backoff, up to `max_retries` attempts without progress.
//! * Redirects are followed by hand (at most 10 hops) so that basic auth and extra headers are re-applied
//!   on every hop, as CDI does; the final URL is remembered and used for ranged reads.
//! * Servers that advertise `Accept-Ranges: bytes` and a length also offer [`RandomAccess`], and a [`Validator`]
//!   (`ETag` / `Last-Modified`) with which [`open_from`] resumes an interrupted import from the same version.
//! * Every wait on the network is bounded by the stall timeout: connecting, the response headers of every
//!   request (HEAD, GET, ranged GETs) and each read of a body; an expired wait is retried like a stall.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, StatusCode, Url};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::{
    Body, ChannelReader, OpenedSource, RandomAccess, RangeIgnored, SourceOptions, Validator, ca_files, inside, pump,
};
use crate::checksum::Hasher;
use crate::{Error, Result};
use contracts::errors::chain_line;

/// Parses `Name: value` into a header pair.
pub fn parse_header(line: &str) -> Result<(String, String)> {
    let (name, value) = line
        .split_once(':')
        .ok_or_else(|| Error::InvalidRequest(format!("invalid header {line:?}: expected 'Name: value'")))?;
    let name = name.trim();
    HeaderName::from_bytes(name.as_bytes())
        .map_err(|e| Error::InvalidRequest(format!("invalid header name {name:?}: {e}")))?;
    let value = value.trim();
    HeaderValue::from_str(value).map_err(|e| Error::InvalidRequest(format!("invalid header value for {name}: {e}")))?;
    Ok((name.to_string(), value.to_string()))
}

const USER_AGENT: &str = concat!("kubevirt-rs-importer/", env!("CARGO_PKG_VERSION"));
const MAX_REDIRECTS: usize = 10;

/// Why a request failed.
#[derive(Debug)]
enum Failure {
    /// Worth retrying (transport error, 5xx, 429, stall).
    Transient(String),
    /// Not worth retrying (4xx, bad redirect, TLS failure).
    Fatal(String),
}

impl Failure {
    fn message(&self) -> &str {
        match self {
            Failure::Transient(m) | Failure::Fatal(m) => m,
        }
    }
}

struct Client {
    client: reqwest::Client,
    opts: SourceOptions,
    headers: HeaderMap,
    url: Url,
    /// Where the redirects of the last successful request ended.
    resolved: Mutex<Url>,
}

fn build_client(opts: &SourceOptions) -> Result<reqwest::Client> {
    let mut b = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(USER_AGENT)
        .connect_timeout(super::connect_timeout(opts))
        .tls_danger_accept_invalid_certs(opts.insecure);
    let mut certs = Vec::new();
    for f in ca_files(opts.cert_dir.as_deref())? {
        for d in &f.ders {
            certs.push(
                reqwest::Certificate::from_der(d)
                    .map_err(|e| Error::InvalidRequest(format!("CA certificate: {}", chain_line(&e))))?,
            );
        }
    }
    if !certs.is_empty() {
        b = b.tls_certs_merge(certs);
    }
    b.build().map_err(|e| Error::InvalidRequest(format!("HTTP client: {}", chain_line(&e))))
}

impl Client {
    fn new(url: &Url, opts: &SourceOptions) -> Result<Self> {
        let mut headers = HeaderMap::new();
        for (k, v) in &opts.headers {
            let name =
                HeaderName::from_bytes(k.as_bytes()).map_err(|e| Error::InvalidRequest(format!("header {k}: {e}")))?;
            let value = HeaderValue::from_str(v).map_err(|e| Error::InvalidRequest(format!("header {k}: {e}")))?;
            headers.append(name, value);
        }
        Ok(Client {
            client: build_client(opts)?,
            opts: opts.clone(),
            headers,
            url: url.clone(),
            resolved: Mutex::new(url.clone()),
        })
    }

    fn resolved(&self) -> Url {
        self.resolved.lock().map(|u| u.clone()).unwrap_or_else(|p| p.into_inner().clone())
    }

    /// One request, following redirects by hand. `range` = (start, inclusive end).
    async fn send_once(
        &self,
        method: Method,
        range: Option<(u64, Option<u64>)>,
        from_resolved: bool,
    ) -> Result<reqwest::Response, Failure> {
        let mut url = if from_resolved { self.resolved() } else { self.url.clone() };
        for _ in 0..=MAX_REDIRECTS {
            let mut req = self.client.request(method.clone(), url.clone()).headers(self.headers.clone());
            if let Some((user, pass)) = &self.opts.basic_auth {
                req = req.basic_auth(user, Some(pass));
            } else if !url.username().is_empty() {
                req = req.basic_auth(url.username(), url.password());
            }
            if let Some((start, end)) = range {
                let v = match end {
                    Some(e) => format!("bytes={start}-{e}"),
                    None => format!("bytes={start}-"),
                };
                req = req.header(reqwest::header::RANGE, v);
            }
            // A server that accepts the connection and never answers must not hang the import: the wait for
            // the response headers is bounded by the stall timeout and retried (by `send`) like a stall.
            let stall = self.opts.stall_timeout;
            let resp = tokio::time::timeout(stall, req.send())
                .await
                .map_err(|_| Failure::Transient(format!("no response headers within {stall:?} (timed out)")))?
                .map_err(|e| {
                    if is_tls_failure(&e) { Failure::Fatal(chain_line(&e)) } else { Failure::Transient(chain_line(&e)) }
                })?;
            let status = resp.status();
            if status.is_redirection() {
                let loc = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| Failure::Fatal(format!("redirect {status} without a Location header")))?;
                url = url.join(loc).map_err(|e| Failure::Fatal(format!("bad redirect Location {loc:?}: {e}")))?;
                if !matches!(url.scheme(), "http" | "https") {
                    return Err(Failure::Fatal(format!("redirect to unsupported scheme {}", url.scheme())));
                }
                continue;
            }
            if status.is_success() {
                if let Ok(mut r) = self.resolved.lock() {
                    *r = url;
                }
                return Ok(resp);
            }
            let msg = format!(
                "expected status code 200, got {}. Status: {} {}",
                status.as_u16(),
                status.as_u16(),
                status.canonical_reason().unwrap_or("")
            );
            return Err(
                if status.is_server_error()
                    || status == StatusCode::TOO_MANY_REQUESTS
                    || status == StatusCode::REQUEST_TIMEOUT
                {
                    Failure::Transient(msg)
                } else {
                    Failure::Fatal(msg)
                },
            );
        }
        Err(Failure::Fatal(format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// A request retried with exponential backoff on transient failures.
    async fn send(
        &self,
        method: Method,
        range: Option<(u64, Option<u64>)>,
        from_resolved: bool,
    ) -> Result<reqwest::Response, Failure> {
        let mut delay = self.opts.backoff;
        let mut attempt = 0;
        loop {
            match self.send_once(method.clone(), range, from_resolved).await {
                Ok(r) => return Ok(r),
                Err(Failure::Transient(m)) if attempt < self.opts.max_retries => {
                    attempt += 1;
                    tracing::info!(url = %redact(&self.url), attempt, "transient HTTP failure, retrying: {m}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(30));
                }
                Err(Failure::Transient(m)) => {
                    return Err(Failure::Transient(format!("{m} (gave up after {} retries)", self.opts.max_retries)));
                }
                Err(f) => return Err(f),
            }
        }
    }

    fn error(&self, f: &Failure) -> Error {
        Error::Connect { kind: "http", url: redact(&self.url), message: f.message().to_string() }
    }
}

fn redact(u: &Url) -> String {
    let mut u = u.clone();
    let _ = u.set_password(None);
    u.to_string()
}

fn content_length(h: &HeaderMap) -> Option<u64> {
    h.get(reqwest::header::CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

fn accepts_ranges(h: &HeaderMap) -> bool {
    h.get(reqwest::header::ACCEPT_RANGES)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|p| p.trim().eq_ignore_ascii_case("bytes")))
}

/// `Content-Range: bytes START-END/TOTAL` → START.
fn content_range_start(h: &HeaderMap) -> Option<u64> {
    let v = h.get(reqwest::header::CONTENT_RANGE)?.to_str().ok()?;
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    rest.split('-').next()?.trim().parse().ok()
}

/// `Content-Range: bytes START-END/TOTAL` → TOTAL.
fn content_range_total(h: &HeaderMap) -> Option<u64> {
    let v = h.get(reqwest::header::CONTENT_RANGE)?.to_str().ok()?;
    v.rsplit_once('/')?.1.trim().parse().ok()
}

/// The version a response describes, for an object of `size` bytes; `None` without `ETag` and `Last-Modified`.
fn validator_of(h: &HeaderMap, size: Option<u64>) -> Option<Validator> {
    let text = |name| h.get(name).and_then(|v: &HeaderValue| v.to_str().ok()).map(str::to_owned);
    let v = Validator {
        etag: text(reqwest::header::ETAG),
        last_modified: text(reqwest::header::LAST_MODIFIED),
        size: size?,
    };
    (v.etag.is_some() || v.last_modified.is_some()).then_some(v)
}

/// Opens an HTTP(S) source at byte `from` of the version `expected` names (resuming an interrupted import):
/// one ranged GET, which must answer 206 from `from` for an object with the same `ETag`, `Last-Modified` and
/// length. `Ok(None)` when the object changed or ranges are no longer offered: the caller starts over. The
/// stream yields the bytes from `from`; breaks resume like [`open`]'s; random access covers the whole object.
pub fn open_from(
    url: &Url,
    opts: &SourceOptions,
    rt: &Handle,
    from: u64,
    expected: &Validator,
) -> Result<Option<OpenedSource>> {
    let client = Arc::new(Client::new(url, opts)?);
    let resp = rt.block_on(client.send(Method::GET, Some((from, None)), false)).map_err(|f| client.error(&f))?;
    let h = resp.headers();
    if resp.status() != StatusCode::PARTIAL_CONTENT || content_range_start(h) != Some(from) {
        tracing::info!(url = %redact(url), status = %resp.status(), "no range from byte {from}: starting over");
        return Ok(None);
    }
    let got = validator_of(h, content_range_total(h));
    if got.as_ref() != Some(expected) {
        tracing::info!(url = %redact(url), ?got, ?expected, "the source changed since the checkpoint: starting over");
        return Ok(None);
    }
    let size = expected.size;
    let (tx, rx) = mpsc::channel(super::BODY_CHANNEL_CHUNKS);
    let c = client.clone();
    let what = redact(url);
    rt.spawn(async move {
        let opts = c.opts.clone();
        pump(resp, Some(size - from), &opts, &what, |pos| reopen(c.clone(), true, from + pos), tx).await;
    });
    Ok(Some(OpenedSource {
        stream: Box::new(ChannelReader::new(rx)),
        size: Some(size),
        random_access: Some(Arc::new(HttpAccess { client, size, rt: rt.clone() }) as Arc<dyn RandomAccess>),
        local_path: None,
        image_env: Vec::new(),
        validator: Some(expected.clone()),
    }))
}

/// Opens an HTTP(S) source: HEAD for size and Range support (a failing HEAD is tolerated), then the GET that
/// is streamed. The body's chunks are handed to `hasher` as they are received, without a copy.
pub fn open(url: &Url, opts: &SourceOptions, rt: &Handle, hasher: Option<&Hasher>) -> Result<OpenedSource> {
    let client = Arc::new(Client::new(url, opts)?);
    let (head_len, head_ranges) = match rt.block_on(client.send_once(Method::HEAD, None, false)) {
        Ok(r) => (content_length(r.headers()), accepts_ranges(r.headers())),
        Err(f) => {
            tracing::debug!(url = %redact(url), "HEAD failed ({}); continuing with GET", f.message());
            (None, false)
        }
    };
    let resp = rt.block_on(client.send(Method::GET, None, false)).map_err(|f| client.error(&f))?;
    let size = content_length(resp.headers()).or(head_len);
    let ranges = (head_ranges || accepts_ranges(resp.headers())) && size.is_some();
    // Only a version that can be resumed with a range is worth naming.
    let validator = validator_of(resp.headers(), size).filter(|_| ranges);
    if let Some(ct) = resp.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok())
        && ct.starts_with("text/")
    {
        tracing::info!(url = %redact(url), "server says Content-Type {ct}; the body is inspected by its bytes anyway");
    }
    let (tx, rx) = mpsc::channel(super::BODY_CHANNEL_CHUNKS);
    let c = client.clone();
    let what = redact(url);
    rt.spawn(async move {
        let opts = c.opts.clone();
        pump(resp, size, &opts, &what, |pos| reopen(c.clone(), ranges, pos), tx).await;
    });
    let random_access = match (ranges, size) {
        (true, Some(size)) => Some(Arc::new(HttpAccess { client, size, rt: rt.clone() }) as Arc<dyn RandomAccess>),
        _ => None,
    };
    Ok(OpenedSource {
        stream: Box::new(ChannelReader::new(rx).tapped(hasher)),
        size,
        random_access,
        local_path: None,
        image_env: Vec::new(),
        validator,
    })
}

impl Body for reqwest::Response {
    async fn next_chunk(&mut self) -> Option<std::result::Result<Bytes, String>> {
        self.chunk().await.map_err(|e| chain_line(&e)).transpose()
    }
}

/// Reopens the body at `pos`: a Range request when the server offers ranges (the answer must start at `pos`),
/// else the whole body again with `pos` bytes to discard.
async fn reopen(client: Arc<Client>, ranges: bool, pos: u64) -> std::result::Result<(reqwest::Response, u64), String> {
    let range = (ranges && pos > 0).then_some((pos, None));
    let r = client.send(Method::GET, range, true).await.map_err(|f| f.message().to_string())?;
    if r.status() != StatusCode::PARTIAL_CONTENT {
        return Ok((r, pos));
    }
    if content_range_start(r.headers()) != Some(pos) {
        return Err(String::from("server resumed at the wrong offset"));
    }
    Ok((r, 0))
}

/// Ranged reads.
struct HttpAccess {
    client: Arc<Client>,
    size: u64,
    rt: Handle,
}

impl RandomAccess for HttpAccess {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let head = inside(self.size, offset, buf);
        let avail = head.len();
        if avail == 0 {
            return Ok(0);
        }
        let client = self.client.clone();
        self.rt.block_on(async {
            let mut attempts = 0;
            loop {
                let mut got = 0usize;
                let r = async {
                    let mut resp = client
                        .send(Method::GET, Some((offset + got as u64, Some(offset + avail as u64 - 1))), true)
                        .await
                        .map_err(|f| io::Error::other(f.message().to_string()))?;
                    if resp.status() != StatusCode::PARTIAL_CONTENT
                        || content_range_start(resp.headers()) != Some(offset)
                    {
                        return Err(RangeIgnored::error(String::from("server ignored the Range request")));
                    }
                    while got < avail {
                        match tokio::time::timeout(client.opts.stall_timeout, resp.chunk()).await {
                            Err(_) => return Err(io::Error::other("ranged read stalled")),
                            Ok(Err(e)) => return Err(io::Error::other(chain_line(&e))),
                            Ok(Ok(None)) => {
                                return Err(io::Error::other("ranged read ended early"));
                            }
                            Ok(Ok(Some(c))) => {
                                let n = c.len().min(avail - got);
                                head[got..got + n].copy_from_slice(&c[..n]);
                                got += n;
                            }
                        }
                    }
                    Ok(())
                }
                .await;
                match r {
                    Ok(()) => return Ok(avail),
                    Err(e) if attempts < client.opts.max_retries && !RangeIgnored::is(&e) => {
                        attempts += 1;
                        tokio::time::sleep(client.opts.backoff * attempts).await;
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }
}

/// Whether a request failed in the TLS layer (an untrusted or invalid certificate, a handshake the server
/// refused): retrying cannot help. Decided from the rustls error in the cause chain (inside an `io::Error` where
/// hyper wraps it), not from the message.
fn is_tls_failure(e: &reqwest::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if err.is::<rustls::Error>() {
            return true;
        }
        if let Some(io) = err.downcast_ref::<io::Error>()
            && io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>())
        {
            return true;
        }
        cur = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        assert_eq!(parse_header("X-A: b c ").ok(), Some(("X-A".into(), "b c".into())));
        assert!(parse_header("nocolon").is_err());
        assert!(parse_header("bad name: x").is_err());
        let mut h = HeaderMap::new();
        h.insert(reqwest::header::CONTENT_RANGE, HeaderValue::from_static("bytes 100-199/1000"));
        h.insert(reqwest::header::ACCEPT_RANGES, HeaderValue::from_static("none, bytes"));
        h.insert(reqwest::header::CONTENT_LENGTH, HeaderValue::from_static("100"));
        assert_eq!(content_range_start(&h), Some(100));
        assert!(accepts_ranges(&h));
        assert_eq!(content_length(&h), Some(100));
        h.insert(reqwest::header::ACCEPT_RANGES, HeaderValue::from_static("none"));
        assert!(!accepts_ranges(&h));
    }
}
