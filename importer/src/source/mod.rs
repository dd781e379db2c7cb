//! Sources: where image bytes come from. A source yields one sequential byte stream from offset 0 and,
//! when it can, positional reads ([`RandomAccess`]) used to fetch pieces the stream delivered too early.
//! Sources do not decompress, report, read the environment or know the target.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::checksum::Hasher;
use crate::decompress::BoxRead;
use crate::{Error, Result};

pub mod file;
pub mod http;
pub mod push;
pub mod registry;
pub mod s3;

/// Settings shared by the network sources (HTTP, S3, registry).
#[derive(Debug, Clone)]
pub struct SourceOptions {
    /// Directory whose every file is a PEM CA certificate (bundle) added to the trusted roots.
    pub cert_dir: Option<PathBuf>,
    /// Skip TLS certificate verification (registry: also allow plain HTTP).
    pub insecure: bool,
    /// Extra request headers (HTTP).
    pub headers: Vec<(String, String)>,
    /// Credentials: basic auth for HTTP and registries, access key id and secret key for S3.
    pub basic_auth: Option<(String, String)>,
    /// A transfer that delivers no byte for this long is retried; it also bounds connecting and waiting for
    /// response headers.
    pub stall_timeout: Duration,
    /// Attempts per request, and per stretch of the stream without progress.
    pub max_retries: u32,
    /// First backoff delay; doubled per attempt.
    pub backoff: Duration,
    /// Registry: the architecture to pick from a manifest list (default: this machine's, as Go names it).
    pub platform_architecture: Option<String>,
    /// OVA sources: the disk to import, named by its `ovf:diskId`, its file's `ovf:href` or `ovf:id` (default:
    /// the first disk of the OVF's DiskSection). Ignored for other sources.
    pub ova_disk: Option<String>,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            cert_dir: None,
            insecure: false,
            headers: Vec::new(),
            basic_auth: None,
            stall_timeout: Duration::from_secs(60),
            max_retries: 5,
            backoff: Duration::from_millis(500),
            platform_architecture: None,
            ova_disk: None,
        }
    }
}

/// How long to wait for a connection to be established: the stall timeout, and at most 30 s.
/// A ranged read the server answered with the whole object or another range: retrying cannot help. Carried in
/// the `io::Error` of [`RandomAccess::read_at`] so the retry loops can tell it from a transient failure.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct RangeIgnored(pub String);

impl RangeIgnored {
    /// The `io::Error` carrying `message`.
    pub(crate) fn error(message: String) -> io::Error {
        io::Error::other(RangeIgnored(message))
    }

    /// Whether `e` says the server ignored a range.
    pub(crate) fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<RangeIgnored>())
    }
}

pub(crate) fn connect_timeout(opts: &SourceOptions) -> Duration {
    opts.stall_timeout.min(Duration::from_secs(30))
}

/// Positional reads of the source's bytes (as served, before decompression).
pub trait RandomAccess: Send + Sync {
    /// Total size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` with the bytes at `offset`. Never returns short: bytes past the end of the source are
    /// zero-filled. Returns how many bytes came from the source (the rest are past its end).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
}

/// The part of `buf` that lies inside a source of `size` bytes when read at `offset`; the rest of `buf` (past the
/// end) is zero-filled, as [`RandomAccess::read_at`] promises.
pub(crate) fn inside(size: u64, offset: u64, buf: &mut [u8]) -> &mut [u8] {
    let avail = usize::try_from(size.saturating_sub(offset)).map_or(buf.len(), |a| a.min(buf.len()));
    let (head, tail) = buf.split_at_mut(avail);
    tail.fill(0);
    head
}

/// Positional reads over bytes in memory (upload bodies held in memory, tests, the fuzz target).
pub struct MemoryAccess(pub Vec<u8>);

impl RandomAccess for MemoryAccess {
    fn size(&self) -> u64 {
        self.0.len() as u64
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        buf.fill(0);
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.0.len());
        let n = (self.0.len() - start).min(buf.len());
        buf[..n].copy_from_slice(&self.0[start..start + n]);
        Ok(n)
    }
}

/// Where the image comes from, as given on the command line or in `IMPORTER_ENDPOINT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceLocation {
    /// A local file (a path or a `file://` URL).
    File(PathBuf),
    /// An `http://` or `https://` URL.
    Http(reqwest::Url),
    /// An S3 object: `s3://bucket/key` (AWS endpoint, or `endpoint` when given) or, as CDI's `source: s3`
    /// gives it, `https://endpoint/bucket/key` (path style).
    S3 {
        /// The object URL as given.
        url: reqwest::Url,
        /// Endpoint override (`--s3-endpoint`), for `s3://` URLs.
        endpoint: Option<reqwest::Url>,
    },
    /// A container image in a registry: `docker://host[:port]/repo[:tag|@digest]`.
    Registry(String),
}

impl SourceLocation {
    /// Parses a path, `file://`, `http://` or `https://` location.
    pub fn parse(s: &str) -> Result<Self> {
        if let Some((scheme, _)) = s.split_once("://") {
            let url = reqwest::Url::parse(s).map_err(|e| Error::InvalidRequest(format!("invalid URL {s:?}: {e}")))?;
            match scheme.to_ascii_lowercase().as_str() {
                "http" | "https" => Ok(SourceLocation::Http(url)),
                "s3" => Ok(SourceLocation::S3 { url, endpoint: None }),
                "docker" => Ok(SourceLocation::Registry(s[s.find("://").map_or(0, |i| i + 3)..].to_string())),
                "file" => url
                    .to_file_path()
                    .map(SourceLocation::File)
                    .map_err(|()| Error::InvalidRequest(format!("invalid file URL {s:?}"))),
                other => Err(Error::InvalidRequest(format!(
                    "unsupported source scheme {other:?} in {s:?} (expected a path, file://, http://, https://, s3:// or docker://)"
                ))),
            }
        } else if s.is_empty() {
            Err(Error::InvalidRequest("empty source".into()))
        } else {
            Ok(SourceLocation::File(PathBuf::from(s)))
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceLocation::File(p) => write!(f, "{}", p.display()),
            SourceLocation::Http(u) | SourceLocation::S3 { url: u, .. } => {
                let mut u = u.clone();
                let _ = u.set_password(None);
                write!(f, "{u}")
            }
            SourceLocation::Registry(r) => write!(f, "docker://{r}"),
        }
    }
}

/// An opened source.
pub struct OpenedSource {
    /// The bytes from offset 0, as served.
    pub stream: BoxRead,
    /// Total size when known (file size, `Content-Length`).
    pub size: Option<u64>,
    /// Positional reads, when the source supports them (local files; HTTP servers with Range).
    pub random_access: Option<Arc<dyn RandomAccess>>,
    /// The local path, for tools that need a seekable file (a local source only).
    pub local_path: Option<PathBuf>,
    /// Registry images: the image config's `Env` entries (`NAME=value`), for CDI's label mapping.
    pub image_env: Vec<String>,
    /// Which version of the object this is, when the server says (HTTP `ETag` / `Last-Modified`).
    pub validator: Option<Validator>,
}

/// What identifies one version of a remote object: its `ETag`, `Last-Modified` and length. A resumed import
/// continues only from the same version (all three equal); at least one of the first two must be known.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Validator {
    /// The entity tag, as sent (quotes and `W/` included).
    pub etag: Option<String>,
    /// The `Last-Modified` date, as sent.
    pub last_modified: Option<String>,
    /// The object's length.
    pub size: u64,
}

/// One PEM file of a CA directory and the certificates in it.
pub(crate) struct CaFile {
    /// The file's bytes (a PEM bundle).
    pub pem: Vec<u8>,
    /// Its certificates, parsed (at least one).
    pub ders: Vec<rustls::pki_types::CertificateDer<'static>>,
}

/// Reads every file of a CA directory (CDI's `certConfigMap` mount): each must be a PEM bundle with at least
/// one certificate. Dot files and subdirectories are skipped (ConfigMap mounts carry `..data` links).
pub(crate) fn ca_files(dir: Option<&std::path::Path>) -> Result<Vec<CaFile>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;
    let Some(dir) = dir else { return Ok(Vec::new()) };
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::InvalidRequest(format!("cert dir {}: {e}", dir.display())))?;
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') || !p.is_file() {
            continue;
        }
        let bad = |e: &dyn std::fmt::Display| Error::InvalidRequest(format!("CA file {}: {e}", p.display()));
        let pem = std::fs::read(&p).map_err(|e| bad(&e))?;
        let ders = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| bad(&e))?;
        if ders.is_empty() {
            return Err(bad(&"holds no PEM certificate"));
        }
        out.push(CaFile { pem, ders });
    }
    Ok(out)
}

/// Chunks buffered between a body pump and its reader. Bodies arrive in chunks of up to a few hundred KiB, so
/// this bounds the read-ahead to a few MiB (part of the importer's memory budget).
pub(crate) const BODY_CHANNEL_CHUNKS: usize = 16;

/// A response body being streamed by [`pump`].
pub(crate) trait Body: Send {
    /// The next chunk; `None` at the end of the body; `Some(Err)` when the transfer broke.
    fn next_chunk(
        &mut self,
    ) -> impl std::future::Future<Output = Option<std::result::Result<bytes::Bytes, String>>> + Send;
}

/// Streams `body` into `tx`, resuming after breaks, stalls and short bodies: `reopen(pos)` fetches the rest from
/// byte `pos` and says how many leading bytes of the new body to discard (a server without Range sends it all
/// again). Gives up after `opts.max_retries` attempts without progress, with exponential backoff between them.
/// A body longer than `size` is an error. Ends when the reader is gone.
pub(crate) async fn pump<B, R, F>(
    mut body: B,
    size: Option<u64>,
    opts: &SourceOptions,
    what: &str,
    mut reopen: R,
    tx: tokio::sync::mpsc::Sender<io::Result<bytes::Bytes>>,
) where
    B: Body,
    R: FnMut(u64) -> F,
    F: std::future::Future<Output = std::result::Result<(B, u64), String>>,
{
    let mut pos: u64 = 0;
    let mut skip: u64 = 0;
    let mut attempts = 0u32;
    let mut delay = opts.backoff;
    loop {
        let failure = loop {
            match tokio::time::timeout(opts.stall_timeout, body.next_chunk()).await {
                Err(_) => break format!("no data for {:?} (stalled)", opts.stall_timeout),
                Ok(Some(Err(e))) => break e,
                Ok(None) => {
                    if let Some(s) = size
                        && pos < s
                    {
                        break format!("body ended at byte {pos} of {s}");
                    }
                    return; // done: dropping tx ends the reader
                }
                Ok(Some(Ok(mut chunk))) => {
                    if skip > 0 {
                        let n = skip.min(chunk.len() as u64);
                        skip -= n;
                        chunk = chunk.slice(n as usize..);
                    }
                    if chunk.is_empty() {
                        continue;
                    }
                    if let Some(s) = size
                        && pos + chunk.len() as u64 > s
                    {
                        let _ = tx
                            .send(Err(io::Error::other(format!("server sent more than the {s} bytes announced"))))
                            .await;
                        return;
                    }
                    pos += chunk.len() as u64;
                    attempts = 0;
                    delay = opts.backoff;
                    if tx.send(Ok(chunk)).await.is_err() {
                        return; // reader gone
                    }
                }
            }
        };
        if attempts >= opts.max_retries {
            let msg = format!("{failure} (gave up after {} retries)", opts.max_retries);
            let _ = tx.send(Err(io::Error::other(msg))).await;
            return;
        }
        attempts += 1;
        tracing::info!(source = what, pos, attempt = attempts, "transfer interrupted, resuming: {failure}");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(30));
        match reopen(pos).await {
            Ok((b, discard)) => {
                body = b;
                skip = discard;
            }
            Err(m) => {
                let _ = tx.send(Err(io::Error::other(m))).await;
                return;
            }
        }
    }
}

/// The synchronous end of a bounded channel fed by an async body pump (HTTP, S3): blocks for the next
/// chunk; the pump's error ends the stream with that error; a closed channel is the end of the stream. With a
/// tap, every chunk is handed to a [`Hasher`] as it is received, without a copy.
pub(crate) struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>,
    cur: bytes::Bytes,
    tap: Option<Hasher>,
}

impl ChannelReader {
    /// Reads from `rx`.
    pub(crate) fn new(rx: tokio::sync::mpsc::Receiver<io::Result<bytes::Bytes>>) -> Self {
        ChannelReader { rx, cur: bytes::Bytes::new(), tap: None }
    }

    /// Feeds every chunk to `hasher` (which then says it is [`Hasher::fed_by_source`]).
    pub(crate) fn tapped(mut self, hasher: Option<&Hasher>) -> Self {
        self.tap = hasher.map(Hasher::source_tap);
        self
    }
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Err(e)) => return Err(e),
                Some(Ok(b)) => {
                    if let Some(h) = &self.tap {
                        h.update_shared(&b);
                    }
                    self.cur = b;
                }
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}

/// Opens `location`. HTTP needs a Tokio runtime handle; the returned stream and random access block on it,
/// so they must be used from a blocking thread.
pub fn open(location: &SourceLocation, http: &SourceOptions, rt: &tokio::runtime::Handle) -> Result<OpenedSource> {
    open_hashed(location, http, rt, None)
}

/// [`open`], and an HTTP source feeds `hasher` the bytes as served itself, as it receives them, without a copy
/// ([`Hasher::fed_by_source`] then says so); with other sources the caller taps the stream.
pub fn open_hashed(
    location: &SourceLocation,
    http: &SourceOptions,
    rt: &tokio::runtime::Handle,
    hasher: Option<&Hasher>,
) -> Result<OpenedSource> {
    match location {
        SourceLocation::File(p) => file::open(p),
        SourceLocation::Http(u) => http::open(u, http, rt, hasher),
        SourceLocation::S3 { url, endpoint } => s3::open(url, endpoint.as_ref(), http, rt),
        SourceLocation::Registry(r) => registry::open(r, http, rt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_locations() {
        assert_eq!(SourceLocation::parse("/a/b.img").ok(), Some(SourceLocation::File("/a/b.img".into())));
        assert_eq!(SourceLocation::parse("rel.img").ok(), Some(SourceLocation::File("rel.img".into())));
        assert_eq!(SourceLocation::parse("file:///x/y%20z").ok(), Some(SourceLocation::File("/x/y z".into())));
        assert!(matches!(SourceLocation::parse("https://h:8443/p?q=1"), Ok(SourceLocation::Http(_))));
        assert!(matches!(SourceLocation::parse("HTTP://h/p"), Ok(SourceLocation::Http(_))));
        let e = SourceLocation::parse("ftp://h/x").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("unsupported source scheme"), "{e}");
        assert!(SourceLocation::parse("").is_err());
        assert!(SourceLocation::parse("http://").is_err());
    }

    #[test]
    fn ca_files_reads_bundles_and_skips_dot_files() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let pem =
            |n: &str| rcgen::generate_simple_self_signed(vec![n.to_string()]).map(|c| c.cert.pem()).unwrap_or_default();
        std::fs::write(d.path().join("bundle.crt"), format!("junk\n{}{}", pem("a"), pem("b"))).unwrap_or_default();
        std::fs::write(d.path().join("..data"), "not a certificate").unwrap_or_default();
        std::fs::create_dir(d.path().join("..2026")).unwrap_or_default();
        let files = ca_files(Some(d.path())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(files.iter().map(|f| f.ders.len()).collect::<Vec<_>>(), vec![2]);
        std::fs::write(d.path().join("odd-name.txt"), "no certificate here").unwrap_or_default();
        let e = ca_files(Some(d.path())).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("odd-name.txt") && e.contains("no PEM certificate"), "{e}");
        assert!(ca_files(None).map(|f| f.is_empty()).unwrap_or(false));
    }

    #[test]
    fn display_hides_password() {
        let l = SourceLocation::parse("http://u:secret@h/x").unwrap_or_else(|e| panic!("{e}"));
        assert!(!l.to_string().contains("secret"));
    }
}
