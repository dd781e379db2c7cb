//! S3 source (aws-sdk-s3): CDI's URL forms, static credentials, custom endpoint, path-style addressing,
//! custom CA, ranged GETs for positional reads.
//!
//! * `s3://bucket/key`: AWS (region us-east-1) or the `--s3-endpoint` given; `http(s)://host[:port]/bucket/key`
//!   (CDI's `source: s3`): that endpoint, path style, plain HTTP for `http://`. The region is taken from an
//!   `s3.<region>.amazonaws.com` host, else us-east-1 (S3-compatible servers ignore it).
//! * Static credentials (access key id, secret key) sign with SigV4; without credentials requests go unsigned.
//! * HEAD gives the size (and the ETag, which pins every later read to the same object version); one GetObject
//!   streams the body through a bounded channel, resuming with `Range: bytes=N-` after a reset or a stall, with
//!   exponential backoff, up to `max_retries` attempts without progress.
//! * [`RandomAccess`] is served by ranged GetObjects, so qcow2 objects convert without scratch space.
//! * The HEAD's ETag, Last-Modified and length are the object's [`Validator`]; [`open_from`] resumes an
//!   interrupted import from the same version (`If-Match` on every GET).
//! * TLS: every PEM file in the cert dir is added to the system roots. `insecure` is not supported: the smithy
//!   rustls client has no "accept invalid certificates" switch and no public way to plug in a custom rustls
//!   configuration (CDI ignores `INSECURE_TLS` for S3 too); it is logged and ignored.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    StalledStreamProtectionConfig,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::operation::get_object::GetObjectOutput;
use aws_smithy_http_client::tls::{self, TlsContext, TrustStore, rustls_provider::CryptoMode};
use bytes::Bytes;
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use super::{
    Body, ChannelReader, OpenedSource, RandomAccess, RangeIgnored, SourceOptions, Validator, ca_files, inside, pump,
};
use crate::{Error, Result};
use contracts::errors::chain_line;

const DEFAULT_REGION: &str = "us-east-1";

/// Where an S3 object lives, as derived from the source URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Target {
    /// `scheme://host[:port]` of a custom endpoint; None for AWS's own.
    pub endpoint: Option<String>,
    /// Signing region.
    pub region: String,
    /// Bucket name.
    pub bucket: String,
    /// Object key (percent-decoded; may contain slashes).
    pub key: String,
    /// Path-style addressing (`endpoint/bucket/key`), used for every custom endpoint.
    pub path_style: bool,
}

/// Decodes `%XX` escapes (no `+` → space: S3 keys are paths, not form values); invalid escapes stay as they are.
fn percent_decode(s: &str) -> Result<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| Error::InvalidRequest(format!("S3 key {s:?} is not UTF-8 once decoded")))
}

/// `s3.<region>.amazonaws.com`, `s3-<region>.amazonaws.com` and `<bucket>.s3.<region>.amazonaws.com` → region;
/// anything else → us-east-1.
fn region_from_host(host: &str) -> String {
    let labels: Vec<&str> = host.split('.').collect();
    let n = labels.len();
    if n >= 4 && labels[n - 2].eq_ignore_ascii_case("amazonaws") {
        let (s3, region) = (labels[n - 4], labels[n - 3]);
        if s3.eq_ignore_ascii_case("s3") && !region.is_empty() {
            return region.to_ascii_lowercase();
        }
    }
    if n >= 3
        && labels[n - 2].eq_ignore_ascii_case("amazonaws")
        && let Some(region) = labels[n - 3].strip_prefix("s3-")
        && !region.is_empty()
    {
        return region.to_ascii_lowercase();
    }
    DEFAULT_REGION.to_string()
}

/// `scheme://host[:port]` of a URL (its path, query and credentials dropped).
fn origin(u: &reqwest::Url) -> Result<(String, String)> {
    let host =
        u.host_str().filter(|h| !h.is_empty()).ok_or_else(|| Error::InvalidRequest(format!("{u} has no host")))?;
    let hostport = match u.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    };
    Ok((format!("{}://{hostport}", u.scheme()), host.to_string()))
}

/// Parses CDI's S3 URL forms into a target. `endpoint` overrides AWS for `s3://` URLs.
pub fn parse_target(url: &reqwest::Url, endpoint: Option<&reqwest::Url>) -> Result<S3Target> {
    let bad = |why: &str| Error::InvalidRequest(format!("invalid S3 URL {}: {why}", redact(url)));
    match url.scheme() {
        "s3" => {
            let bucket = url.host_str().filter(|b| !b.is_empty()).ok_or_else(|| bad("no bucket"))?;
            let bucket = percent_decode(bucket)?;
            let key = percent_decode(url.path().trim_start_matches('/'))?;
            if key.is_empty() {
                return Err(bad("no object key (expected s3://bucket/key)"));
            }
            match endpoint {
                Some(ep) => {
                    if !matches!(ep.scheme(), "http" | "https") {
                        return Err(Error::InvalidRequest(format!(
                            "invalid S3 endpoint {ep}: expected http://host[:port] or https://host[:port]"
                        )));
                    }
                    let (origin, host) = origin(ep)?;
                    let path = ep.path().trim_end_matches('/');
                    Ok(S3Target {
                        endpoint: Some(format!("{origin}{path}")),
                        region: region_from_host(&host),
                        bucket,
                        key,
                        path_style: true,
                    })
                }
                None => Ok(S3Target { endpoint: None, region: DEFAULT_REGION.into(), bucket, key, path_style: false }),
            }
        }
        "http" | "https" => {
            let (origin, host) = origin(url)?;
            let path = url.path().trim_start_matches('/');
            let (bucket, key) = path.split_once('/').ok_or_else(|| bad("expected scheme://host/bucket/key"))?;
            let (bucket, key) = (percent_decode(bucket)?, percent_decode(key)?);
            if bucket.is_empty() || key.is_empty() {
                return Err(bad("expected scheme://host/bucket/key"));
            }
            Ok(S3Target { endpoint: Some(origin), region: region_from_host(&host), bucket, key, path_style: true })
        }
        other => Err(bad(&format!("unsupported scheme {other:?}"))),
    }
}

fn redact(u: &reqwest::Url) -> String {
    let mut u = u.clone();
    let _ = u.set_password(None);
    u.to_string()
}

/// The TLS trust store: system roots plus every PEM file of `cert_dir` (validated first: the smithy client
/// panics on an unparsable certificate when it connects).
fn trust_store(cert_dir: &Option<PathBuf>) -> Result<TrustStore> {
    let mut store = TrustStore::default();
    for f in ca_files(cert_dir.as_deref())? {
        let mut check = rustls::RootCertStore::empty();
        for c in f.ders {
            check.add(c).map_err(|e| Error::InvalidRequest(format!("CA certificate: {e}")))?;
        }
        store = store.with_pem_certificate(f.pem);
    }
    Ok(store)
}

/// An S3 client bound to one object.
struct Object {
    client: aws_sdk_s3::Client,
    target: S3Target,
    /// The URL as given, for messages.
    url: String,
    /// ETag from HEAD: later reads must see the same object.
    etag: Option<String>,
    opts: SourceOptions,
}

impl Object {
    fn new(url: &reqwest::Url, target: S3Target, opts: &SourceOptions) -> Result<Self> {
        if opts.insecure {
            tracing::warn!("S3: skipping TLS verification is not supported (as in CDI); certificates are verified");
        }
        let tls_context = TlsContext::builder()
            .with_trust_store(trust_store(&opts.cert_dir)?)
            .build()
            .map_err(|e| Error::InvalidRequest(format!("S3 TLS context: {}", DisplayErrorContext(&e))))?;
        let http_client = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
            .tls_context(tls_context)
            .build_https();
        let mut b = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(target.region.clone()))
            .http_client(http_client)
            .force_path_style(target.path_style)
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(opts.max_retries.saturating_add(1).max(1))
                    .with_initial_backoff(opts.backoff),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(super::connect_timeout(opts))
                    // Time to the first byte of each response (HEAD, GET, ranged GETs): bounds a server that
                    // accepts and never answers; the SDK retries it like any timeout.
                    .read_timeout(opts.stall_timeout)
                    .build(),
            )
            // Stalls are detected (and resumed from) by the pump below.
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if let Some(ep) = &target.endpoint {
            b = b.endpoint_url(ep.clone());
        }
        match &opts.basic_auth {
            Some((ak, sk)) if !ak.is_empty() => {
                b = b.credentials_provider(Credentials::new(ak, sk, None, None, "importer"));
            }
            _ => b = b.allow_no_auth(),
        }
        Ok(Object {
            client: aws_sdk_s3::Client::from_conf(b.build()),
            target,
            url: redact(url),
            etag: None,
            opts: opts.clone(),
        })
    }

    fn error(&self, message: String) -> Error {
        Error::Connect { kind: "s3", url: self.url.clone(), message }
    }

    /// One GetObject; `range` = (start, inclusive end).
    async fn get(&self, range: Option<(u64, Option<u64>)>) -> Result<GetObjectOutput, String> {
        let mut req = self.client.get_object().bucket(&self.target.bucket).key(&self.target.key);
        if let Some((start, end)) = range {
            req = req.range(match end {
                Some(e) => format!("bytes={start}-{e}"),
                None => format!("bytes={start}-"),
            });
        }
        if let Some(etag) = &self.etag {
            req = req.if_match(etag);
        }
        let out = req.send().await.map_err(|e| describe(&e))?;
        if let Some((start, _)) = range
            && start > 0
            && content_range_start(out.content_range()) != Some(start)
        {
            return Err(format!(
                "server answered the range request for byte {start} with Content-Range {:?}",
                out.content_range()
            ));
        }
        Ok(out)
    }
}

/// An SDK error as one line: the S3 error code, its message and the HTTP status, or the transport error chain.
fn describe<E>(e: &SdkError<E>) -> String
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match e {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let code = e.code().map(str::to_string).unwrap_or_else(|| match status {
                404 => "NotFound".into(),
                403 => "Forbidden".into(),
                _ => "Error".into(),
            });
            match e.message() {
                Some(m) if !m.is_empty() => format!("{code}: {m} (HTTP status {status})"),
                _ => format!("{code} (HTTP status {status})"),
            }
        }
        other => chain_line(other),
    }
}

/// `bytes START-END/TOTAL` → START.
fn content_range_start(v: Option<&str>) -> Option<u64> {
    let rest = v?.trim().strip_prefix("bytes")?.trim_start();
    rest.split('-').next()?.trim().parse().ok()
}

/// Opens an S3 object. `url` is `s3://bucket/key` (with `endpoint` or AWS's) or `http(s)://endpoint/bucket/key`.
pub fn open(
    url: &reqwest::Url,
    endpoint: Option<&reqwest::Url>,
    opts: &SourceOptions,
    rt: &Handle,
) -> Result<OpenedSource> {
    let (obj, size, validator) = head(url, endpoint, opts, rt)?;
    let first = rt.block_on(obj.get(None)).map_err(|m| obj.error(m))?;
    Ok(stream_from(obj, size, validator, first, 0, rt))
}

/// Opens an S3 object at byte `from` of the version `expected` names (resuming an interrupted import): `Ok(None)`
/// when the object's ETag, Last-Modified or length changed (the caller starts over). The stream yields the bytes
/// from `from`; random access covers the whole object.
pub fn open_from(
    url: &reqwest::Url,
    endpoint: Option<&reqwest::Url>,
    opts: &SourceOptions,
    rt: &Handle,
    from: u64,
    expected: &Validator,
) -> Result<Option<OpenedSource>> {
    let (obj, size, validator) = head(url, endpoint, opts, rt)?;
    if validator.as_ref() != Some(expected) || from > size {
        tracing::info!(url = %obj.url, ?validator, ?expected, "the source changed since the checkpoint: starting over");
        return Ok(None);
    }
    let first = rt.block_on(obj.get(Some((from, None)))).map_err(|m| obj.error(m))?;
    Ok(Some(stream_from(obj, size, validator, first, from, rt)))
}

/// The object's body from `from` (the GetObject `first` answered), pumped through a bounded channel.
fn stream_from(
    obj: Object,
    size: u64,
    validator: Option<Validator>,
    first: GetObjectOutput,
    from: u64,
    rt: &Handle,
) -> OpenedSource {
    let obj = Arc::new(obj);
    let (tx, rx) = mpsc::channel(super::BODY_CHANNEL_CHUNKS);
    let o = obj.clone();
    rt.spawn(async move {
        let opts = o.opts.clone();
        let what = o.url.clone();
        let reopen = |pos: u64| {
            let o = o.clone();
            let at = from + pos;
            async move { o.get((at > 0).then_some((at, None))).await.map(|out| (out.body, 0)) }
        };
        pump(first.body, Some(size - from), &opts, &what, reopen, tx).await;
    });
    OpenedSource {
        stream: Box::new(ChannelReader::new(rx)),
        size: Some(size),
        random_access: Some(Arc::new(S3Access { obj, size, rt: rt.clone() })),
        local_path: None,
        image_env: Vec::new(),
        validator,
    }
}

/// HEADs the object: the client pinned to its ETag, its size and version.
fn head(
    url: &reqwest::Url,
    endpoint: Option<&reqwest::Url>,
    opts: &SourceOptions,
    rt: &Handle,
) -> Result<(Object, u64, Option<Validator>)> {
    let target = parse_target(url, endpoint)?;
    tracing::debug!(?target, "opening S3 object");
    let mut obj = Object::new(url, target, opts)?;
    let head = rt.block_on(obj.client.head_object().bucket(&obj.target.bucket).key(&obj.target.key).send());
    let head = match head {
        Ok(h) => h,
        Err(e) => {
            // A HEAD error has no body, hence no S3 error code: a GET tells why (NoSuchKey, NoSuchBucket,
            // SignatureDoesNotMatch, ...).
            let head_msg = describe(&e);
            let msg = match rt.block_on(obj.get(Some((0, Some(0))))) {
                Err(get_msg) => get_msg,
                Ok(_) => head_msg,
            };
            return Err(obj.error(msg));
        }
    };
    let size = head
        .content_length()
        .and_then(|l| u64::try_from(l).ok())
        .ok_or_else(|| obj.error(String::from("HEAD returned no Content-Length")))?;
    obj.etag = head.e_tag().map(str::to_string);
    let last_modified = head.last_modified().and_then(|d| d.fmt(aws_sdk_s3::primitives::DateTimeFormat::HttpDate).ok());
    let validator = (obj.etag.is_some() || last_modified.is_some()).then(|| Validator {
        etag: obj.etag.clone(),
        last_modified,
        size,
    });
    Ok((obj, size, validator))
}

impl Body for aws_sdk_s3::primitives::ByteStream {
    async fn next_chunk(&mut self) -> Option<std::result::Result<Bytes, String>> {
        self.next().await.map(|r| r.map_err(|e| chain_line(&e)))
    }
}

/// Positional reads through ranged GetObjects.
struct S3Access {
    obj: Arc<Object>,
    size: u64,
    rt: Handle,
}

impl S3Access {
    /// Fills `buf` (the object's bytes from `offset`, all inside the object) with one ranged GET.
    async fn fetch(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let end = offset + buf.len() as u64 - 1;
        let mut out = self.obj.get(Some((offset, Some(end)))).await.map_err(io::Error::other)?;
        if content_range_start(out.content_range()) != Some(offset) {
            return Err(RangeIgnored::error(format!(
                "server ignored the range request (Content-Range {:?})",
                out.content_range()
            )));
        }
        let mut got = 0usize;
        while got < buf.len() {
            match tokio::time::timeout(self.obj.opts.stall_timeout, out.body.next()).await {
                Err(_) => return Err(io::Error::other("ranged read stalled")),
                Ok(Some(Err(e))) => return Err(io::Error::other(chain_line(&e))),
                Ok(None) => return Err(io::Error::other("ranged read ended early")),
                Ok(Some(Ok(c))) => {
                    let n = c.len().min(buf.len() - got);
                    buf[got..got + n].copy_from_slice(&c[..n]);
                    got += n;
                }
            }
        }
        Ok(())
    }
}

impl RandomAccess for S3Access {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let head = inside(self.size, offset, buf);
        let avail = head.len();
        if avail == 0 {
            return Ok(0);
        }
        self.rt.block_on(async {
            let mut attempts = 0;
            let mut delay = self.obj.opts.backoff;
            loop {
                match self.fetch(offset, head).await {
                    Ok(()) => return Ok(avail),
                    Err(e) if attempts < self.obj.opts.max_retries && !RangeIgnored::is(&e) => {
                        attempts += 1;
                        tracing::info!(url = %self.obj.url, offset, attempt = attempts, "S3 ranged read failed, retrying: {e}");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(30));
                    }
                    Err(e) => return Err(e),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str, endpoint: Option<&str>) -> Result<S3Target> {
        let u = reqwest::Url::parse(url).map_err(|e| Error::InvalidRequest(e.to_string()))?;
        let ep = endpoint.map(reqwest::Url::parse).transpose().map_err(|e| Error::InvalidRequest(e.to_string()))?;
        parse_target(&u, ep.as_ref())
    }

    fn ok(url: &str, endpoint: Option<&str>) -> S3Target {
        target(url, endpoint).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    #[test]
    fn s3_scheme() {
        let t = ok("s3://bucket/dir/sub/disk%20image.qcow2", None);
        assert_eq!(
            t,
            S3Target {
                endpoint: None,
                region: "us-east-1".into(),
                bucket: "bucket".into(),
                key: "dir/sub/disk image.qcow2".into(),
                path_style: false,
            }
        );
        let t = ok("s3://bucket/a%2Fb+c", Some("http://127.0.0.1:19002"));
        assert_eq!(t.endpoint.as_deref(), Some("http://127.0.0.1:19002"));
        assert_eq!(t.key, "a/b+c");
        assert!(t.path_style);
        assert_eq!(t.region, "us-east-1");
        let t = ok("s3://b/k", Some("https://s3.eu-west-3.amazonaws.com/"));
        assert_eq!(t.endpoint.as_deref(), Some("https://s3.eu-west-3.amazonaws.com"));
        assert_eq!(t.region, "eu-west-3");
        assert!(target("s3://bucket", None).is_err());
        assert!(target("s3://bucket/", None).is_err());
        assert!(target("s3://b/k", Some("ftp://h")).is_err());
    }

    #[test]
    fn http_forms() {
        let t = ok("http://127.0.0.1:19002/images/dir/disk.raw.xz", None);
        assert_eq!(
            t,
            S3Target {
                endpoint: Some("http://127.0.0.1:19002".into()),
                region: "us-east-1".into(),
                bucket: "images".into(),
                key: "dir/disk.raw.xz".into(),
                path_style: true,
            }
        );
        let t = ok("https://s3.us-west-2.amazonaws.com/bkt/a%3Fb.img", None);
        assert_eq!(t.endpoint.as_deref(), Some("https://s3.us-west-2.amazonaws.com"));
        assert_eq!((t.region.as_str(), t.bucket.as_str(), t.key.as_str()), ("us-west-2", "bkt", "a?b.img"));
        let t = ok("https://minio.example.com/b/k", None);
        assert_eq!((t.endpoint.as_deref(), t.region.as_str()), (Some("https://minio.example.com"), "us-east-1"));
        assert!(target("http://h/bucket-only", None).is_err());
        assert!(target("http://h/bucket/", None).is_err());
        assert!(target("http://h/", None).is_err());
    }

    #[test]
    fn regions_and_decoding() {
        assert_eq!(region_from_host("s3.ap-south-1.amazonaws.com"), "ap-south-1");
        assert_eq!(region_from_host("bkt.s3.eu-central-1.amazonaws.com"), "eu-central-1");
        assert_eq!(region_from_host("s3-us-west-1.amazonaws.com"), "us-west-1");
        assert_eq!(region_from_host("s3.amazonaws.com"), "us-east-1");
        assert_eq!(region_from_host("localhost"), "us-east-1");
        assert_eq!(percent_decode("a%20b%2fc%zz%4").ok().as_deref(), Some("a b/c%zz%4"));
        assert!(percent_decode("%ff").is_err());
        assert_eq!(content_range_start(Some("bytes 100-199/1000")), Some(100));
        assert_eq!(content_range_start(None), None);
    }
}
