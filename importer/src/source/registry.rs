//! Registry source (oci-client): the disk file of a containerDisk image, streamed from its layers.
//!
//! # Pull
//!
//! `reference` is `host[:port]/repo[:tag|@digest]`. Credentials from [`SourceOptions::basic_auth`] are used for
//! both Basic and Bearer-token challenges (oci-client fetches the token); without them the pull is anonymous.
//! Extra CA roots are every PEM file of `cert_dir`; `insecure` accepts invalid certificates and, as
//! containers/image does for insecure registries, falls back to plain HTTP when the TLS connection fails.
//! A manifest list / OCI index is resolved to the `linux/<arch>` entry (`platform_architecture`, default this
//! machine's architecture in Go naming); an explicitly requested architecture is checked against the image
//! config too. The config blob (digest-verified) gives `image_env` (`config.Env`); images labelled
//! `containers.bootc=1` or `ostree.bootable=1` are refused as CDI does.
//!
//! # Layers and the disk file
//!
//! The final image's `disk/` directory must hold exactly one file (at any depth; directories do not count),
//! a regular file, whose bytes are the stream returned. Layers are read in manifest order, each as one
//! streamed, digest-verified blob (compression sniffed by magic: gzip, zstd, xz, bzip2 or plain tar, whatever
//! the media type says), through a tar reader on a worker thread; nothing is buffered beyond a small channel.
//! Per layer we record, in tar order, what it does to `disk/`: added entries, whiteouts (`.wh.<name>` deletes
//! `<name>` and everything below it in *lower* layers) and opaque markers (`.wh..wh..opq` hides everything
//! below its directory in lower layers). Folding these summaries bottom-up yields the visible files.
//!
//! Whether a regular file C under `disk/` met in layer *i* is visible in the final image depends only on the
//! layers above *i*. So at the first such candidate, before reading C's data, the worker pauses layer *i* (its
//! HTTP response simply waits) and reads every later layer not yet summarized (look-ahead; a candidate met
//! there is handled the same way, recursively). If C survives the later layers it is committed: its tar
//! header gives the size, `open` returns, and C's bytes are passed on as they arrive. Otherwise reading goes
//! on. Each layer is therefore downloaded exactly once and the committed file is always the one visible in
//! the final image, whatever the layer order; in the usual case (disk in the last layer) there is no
//! look-ahead at all.
//!
//! What the look-ahead cannot see is the rest of layer *i* after C and the rest of lower, paused layers: a
//! second visible file there (e.g. two files under `disk/` in one layer) is found only after C was streamed.
//! Such violations, a malformed layer and digest mismatches found after the commit are delivered as an
//! `io::Error` (carrying the [`Error`], see [`crate::error::tag`]) at the end of the stream instead of EOF,
//! so the import fails and the target is removed; the consumer must read the stream to its end. Problems
//! found before the commit are returned by [`open`] itself. Unlike CDI, a layer that cannot be read fails the
//! import instead of being skipped.
//!
//! Errors: registry, auth and manifest failures are [`Error::Connect`] with "failed to pull image: …"; layout
//! problems are [`Error::ContainerImage`] ("Failed to find VM disk image file in the container image",
//! "image directory contains more than one file: …", "layer N (…) is malformed: …", "bootc image detected…").

use std::collections::BTreeMap;
use std::io::{self, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OciDescriptor, OciImageManifest, OciManifest};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use tokio::runtime::Handle;

use super::{OpenedSource, SourceOptions, ca_files};
use crate::decompress::{self, BoxRead};
use crate::detect::{Compression, DETECT_LEN};
use crate::error::tag;
use crate::{Error, Result};
use contracts::errors::chain_line;

const USER_AGENT: &str = concat!("kubevirt-rs-importer/", env!("CARGO_PKG_VERSION"));
/// Largest image config accepted (they are a few KiB).
const MAX_CONFIG: i64 = 16 << 20;
/// Bytes per message from the worker.
const CHUNK: usize = 256 << 10;
/// Messages in flight between the worker and the reader.
const CHANNEL_DEPTH: usize = 16;

/// The directory holding the disk in a containerDisk.
const DISK_DIR: &str = "disk";

/// Opens `reference` (`host[:port]/repo[:tag|@digest]`) and streams the image's disk file.
pub fn open(reference: &str, opts: &SourceOptions, rt: &Handle) -> Result<OpenedSource> {
    let url = format!("docker://{reference}");
    let image: Reference =
        reference.parse().map_err(|e| Error::InvalidRequest(format!("invalid image reference {reference:?}: {e}")))?;
    let certs = load_certs(opts)?;
    let auth = match &opts.basic_auth {
        Some((u, p)) => RegistryAuth::Basic(u.clone(), p.clone()),
        None => RegistryAuth::Anonymous,
    };
    let requested = opts.platform_architecture.clone().filter(|a| !a.is_empty());
    let arch = requested.clone().unwrap_or_else(default_architecture);
    let pull_err = |message: String| Error::Connect {
        kind: "registry",
        url: url.clone(),
        message: format!("failed to pull image: {message}"),
    };

    let mut protocols = vec![ClientProtocol::Https];
    if opts.insecure {
        protocols.push(ClientProtocol::Http);
    }
    let mut failures = Vec::new();
    let mut resolved = None;
    for (n, protocol) in protocols.iter().enumerate() {
        let scheme = if *protocol == ClientProtocol::Http { "http" } else { "https" };
        let config = ClientConfig {
            protocol: protocol.clone(),
            accept_invalid_certificates: opts.insecure,
            extra_root_certificates: certs.clone(),
            platform_resolver: None,
            connect_timeout: Some(super::connect_timeout(opts)),
            // reqwest's read timeout also bounds the wait for response headers, from the request on.
            read_timeout: Some(opts.stall_timeout),
            user_agent: USER_AGENT,
            ..ClientConfig::default()
        };
        let client = Client::try_from(config)
            .map_err(|e| Error::InvalidRequest(format!("registry client: {}", chain_line(&e))))?;
        match rt.block_on(resolve(&client, &image, &auth, &arch)) {
            Ok(r) => {
                resolved = Some((client, r));
                break;
            }
            Err(Resolve::Transport(m)) if n + 1 < protocols.len() => {
                tracing::info!(%url, "{scheme} failed ({m}); trying plain HTTP (insecure registry)");
                failures.push(format!("{scheme}: {m}"));
            }
            // After a fallback, a transport failure of both schemes shows both; anything else is the answer.
            Err(Resolve::Transport(m)) if !failures.is_empty() => {
                failures.push(format!("{scheme}: {m}"));
                return Err(pull_err(failures.join("; ")));
            }
            Err(Resolve::Transport(m) | Resolve::Other(m)) => return Err(pull_err(m)),
        }
    }
    let (client, resolved) = resolved.ok_or_else(|| pull_err(failures.join("; ")))?;
    let Resolved { image, manifest, config } = resolved;
    let info = ConfigInfo::parse(&config).map_err(|m| pull_err(format!("invalid image config: {m}")))?;
    if let Some(label) = info.bootc_label() {
        return Err(Error::ContainerImage(format!(
            "bootc image detected (label {label}): bootable container images are not supported as disk images"
        )));
    }
    if let (Some(want), Some(got)) = (&requested, &info.architecture)
        && want != got
    {
        return Err(pull_err(format!("manifest image architecture {got} doesn't match requested architecture {want}")));
    }
    if manifest.layers.is_empty() {
        return Err(Error::ContainerImage(String::from("Failed to find VM disk image file in the container image")));
    }
    tracing::info!(%url, layers = manifest.layers.len(), "pulling containerDisk image");

    let (cancel, cancelled) = tokio::sync::watch::channel(false);
    let layers =
        RegistryLayers { client, image, layers: manifest.layers, rt: rt.clone(), stall: opts.stall_timeout, cancelled };
    let (tx, rx) = sync_channel(CHANNEL_DEPTH);
    let worker_url = url.clone();
    let worker = std::thread::Builder::new()
        .name(String::from("registry-layers"))
        .spawn(move || run(&layers, &worker_url, &tx))
        .map_err(|e| Error::InvalidRequest(format!("cannot start the registry reader thread: {e}")))?;
    let mut reader = DiskReader { rx: Some(rx), cur: Bytes::new(), done: false, cancel, worker: Some(worker) };
    match reader.recv() {
        Some(Msg::Start { size, path }) => {
            tracing::info!(%url, disk = %path, size, "streaming the disk file");
            Ok(OpenedSource {
                stream: Box::new(reader),
                size,
                random_access: None,
                local_path: None,
                image_env: info.env,
                validator: None,
            })
        }
        Some(Msg::Fail(e)) => Err(e),
        Some(Msg::Data(_) | Msg::End) | None => {
            Err(Error::InvalidRequest(String::from("registry reader stopped before selecting the disk file")))
        }
    }
}

/// This machine's architecture as Go (and OCI platforms) name it.
fn default_architecture() -> String {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "x86" => "386",
        "aarch64" => "arm64",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
    .to_string()
}

/// Every certificate of every PEM file in the cert dir, for oci-client.
fn load_certs(opts: &SourceOptions) -> Result<Vec<Certificate>> {
    Ok(ca_files(opts.cert_dir.as_deref())?
        .into_iter()
        .flat_map(|f| f.ders)
        .map(|d| Certificate { encoding: CertificateEncoding::Der, data: d.to_vec() })
        .collect())
}

/// Why resolving the image failed: a transport failure (worth the plain-HTTP fallback) or anything else.
enum Resolve {
    Transport(String),
    Other(String),
}

fn classify(e: OciDistributionError) -> Resolve {
    let m = chain_line(&e);
    match e {
        OciDistributionError::RequestError(r) if r.is_connect() || r.is_request() => Resolve::Transport(m),
        _ => Resolve::Other(m),
    }
}

/// The platform manifest and the config of the image.
struct Resolved {
    /// The image, pinned to the platform manifest's digest.
    image: Reference,
    manifest: OciImageManifest,
    config: Vec<u8>,
}

async fn resolve(client: &Client, image: &Reference, auth: &RegistryAuth, arch: &str) -> Result<Resolved, Resolve> {
    let (manifest, digest) = client.pull_manifest(image, auth).await.map_err(classify)?;
    let (manifest, image) = match manifest {
        OciManifest::Image(m) => (m, image.clone_with_digest(digest)),
        OciManifest::ImageIndex(index) => {
            let entry = index.manifests.iter().find(|m| {
                m.platform.as_ref().is_some_and(|p| p.os.to_string() == "linux" && p.architecture.to_string() == arch)
            });
            let Some(entry) = entry else {
                let available: Vec<String> = index
                    .manifests
                    .iter()
                    .filter_map(|m| m.platform.as_ref())
                    .map(|p| format!("{}/{}", p.os, p.architecture))
                    .collect();
                return Err(Resolve::Other(format!(
                    "no image for platform linux/{arch} in the manifest list (available: {})",
                    if available.is_empty() { String::from("none") } else { available.join(", ") }
                )));
            };
            let pinned = image.clone_with_digest(entry.digest.clone());
            match client.pull_manifest(&pinned, auth).await.map_err(classify)? {
                (OciManifest::Image(m), _) => (m, pinned),
                (OciManifest::ImageIndex(_), _) => {
                    return Err(Resolve::Other(format!("manifest list entry {} is itself a list", entry.digest)));
                }
            }
        }
    };
    if manifest.config.size > MAX_CONFIG {
        return Err(Resolve::Other(format!("image config of {} bytes is too large", manifest.config.size)));
    }
    let mut config = Vec::new();
    client.pull_blob(&image, &manifest.config, &mut config).await.map_err(classify)?;
    Ok(Resolved { image, manifest, config })
}

/// What the importer needs from the image config.
#[derive(Debug, Default)]
struct ConfigInfo {
    env: Vec<String>,
    labels: BTreeMap<String, String>,
    architecture: Option<String>,
}

impl ConfigInfo {
    fn parse(config: &[u8]) -> Result<Self, String> {
        let v: serde_json::Value = serde_json::from_slice(config).map_err(|e| e.to_string())?;
        let c = &v["config"];
        let env = c["Env"]
            .as_array()
            .map(|a| a.iter().filter_map(|e| e.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        let labels = c["Labels"]
            .as_object()
            .map(|o| o.iter().filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned()))).collect())
            .unwrap_or_default();
        let architecture = v["architecture"].as_str().filter(|a| !a.is_empty()).map(str::to_owned);
        Ok(ConfigInfo { env, labels, architecture })
    }

    /// The label that marks a bootc image, when present.
    fn bootc_label(&self) -> Option<String> {
        ["containers.bootc", "ostree.bootable"].iter().find_map(|k| {
            self.labels
                .get(*k)
                .filter(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true"))
                .map(|v| format!("{k}={v}"))
        })
    }
}

// -----------------------------------------------------------------------------------------------------------
// layer blobs
// -----------------------------------------------------------------------------------------------------------

/// Where the worker gets layer blobs from (the registry; in-memory tars in unit tests).
trait LayerSource {
    /// Number of layers.
    fn count(&self) -> usize;
    /// A name for messages (`layer 2 (sha256:…)`).
    fn describe(&self, i: usize) -> String;
    /// The blob of layer `i` as served, and the cell recording a transport failure while reading it.
    fn open(&self, i: usize) -> Result<(BoxRead, Failure)>;
}

/// Records the transport failure of a blob reader, to tell it apart from a malformed layer.
type Failure = Arc<Mutex<Option<String>>>;

struct RegistryLayers {
    client: Client,
    image: Reference,
    layers: Vec<OciDescriptor>,
    rt: Handle,
    stall: Duration,
    /// Becomes true when the reader is dropped: blob reads stop at once.
    cancelled: tokio::sync::watch::Receiver<bool>,
}

/// Runs `fut` on the runtime unless or until the reader is dropped.
fn block_on_unless_cancelled<T>(
    rt: &Handle,
    cancelled: &tokio::sync::watch::Receiver<bool>,
    fut: impl Future<Output = T>,
) -> io::Result<T> {
    let mut cancelled = cancelled.clone();
    rt.block_on(async move {
        tokio::select! {
            r = fut => Ok(r),
            _ = cancelled.wait_for(|c| *c) => Err(io::Error::new(io::ErrorKind::Interrupted, "import cancelled")),
        }
    })
}

impl LayerSource for RegistryLayers {
    fn count(&self) -> usize {
        self.layers.len()
    }

    fn describe(&self, i: usize) -> String {
        format!("layer {} ({})", i + 1, self.layers[i].digest)
    }

    fn open(&self, i: usize) -> Result<(BoxRead, Failure)> {
        let desc = &self.layers[i];
        let mt = desc.media_type.as_str();
        if !(mt.contains("tar") || mt.contains("layer")) {
            return Err(Error::ContainerImage(format!("{} has unsupported media type {mt}", self.describe(i))));
        }
        let connect = |message: String| Error::Connect {
            kind: "registry",
            url: format!("docker://{}", self.image.whole()),
            message: format!("failed to pull image: {}: {message}", self.describe(i)),
        };
        let stream =
            block_on_unless_cancelled(&self.rt, &self.cancelled, self.client.pull_blob_stream(&self.image, desc))
                .map_err(|e| connect(e.to_string()))?
                .map_err(|e| connect(chain_line(&e)))?;
        let failure = Failure::default();
        let reader = BlobReader {
            stream: stream.stream,
            cur: Bytes::new(),
            rt: self.rt.clone(),
            stall: self.stall,
            cancelled: self.cancelled.clone(),
            failure: failure.clone(),
        };
        Ok((Box::new(reader), failure))
    }
}

/// A blob stream read synchronously (the worker thread is outside the runtime). oci-client verifies the
/// digest: a mismatch is an error at the end of the stream.
struct BlobReader {
    stream: BoxStream<'static, io::Result<Bytes>>,
    cur: Bytes,
    rt: Handle,
    stall: Duration,
    cancelled: tokio::sync::watch::Receiver<bool>,
    failure: Failure,
}

impl BlobReader {
    fn fail(&self, e: io::Error) -> io::Error {
        if let Ok(mut f) = self.failure.lock() {
            f.get_or_insert_with(|| chain_line(&e));
        }
        e
    }
}

impl Read for BlobReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            let (stall, stream) = (self.stall, &mut self.stream);
            // The timer must be created inside the runtime: build it in the future.
            let next = block_on_unless_cancelled(&self.rt, &self.cancelled, async move {
                tokio::time::timeout(stall, stream.next()).await
            })?;
            match next {
                Err(_) => {
                    let e = io::Error::new(io::ErrorKind::TimedOut, format!("no data for {:?} (stalled)", self.stall));
                    return Err(self.fail(e));
                }
                Ok(None) => return Ok(0),
                Ok(Some(Err(e))) => return Err(self.fail(e)),
                Ok(Some(Ok(b))) => self.cur = b,
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}

// -----------------------------------------------------------------------------------------------------------
// the walk over the layers
// -----------------------------------------------------------------------------------------------------------

/// Worker → reader messages.
enum Msg {
    /// The disk file was selected (first message on success).
    Start { size: Option<u64>, path: String },
    /// Bytes of the disk file.
    Data(Vec<u8>),
    /// The disk file ended and the image is valid.
    End,
    /// The import must fail (first message: before streaming; later: at the end of the stream).
    Fail(Error),
}

/// A non-directory entry under `disk/` in some layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    layer: usize,
    /// Index of the entry in its layer's tar.
    seq: usize,
    regular: bool,
}

/// One layer entry that matters for `disk/`.
#[derive(Debug, Clone)]
enum Op {
    /// `.wh.<name>`: deletes the path and everything below it in lower layers.
    Whiteout(String),
    /// `.wh..wh..opq`: hides everything below the directory in lower layers (`""` = the root).
    Opaque(String),
    /// An entry at a path: a directory (`None`) or anything else.
    Add(String, Option<Node>),
}

/// What a layer does to `disk/`, in tar order.
type Summary = Vec<Op>;

/// Visible non-directory entries under `disk/`.
type Visible = BTreeMap<String, Node>;

fn under(path: &str, dir: &str) -> bool {
    dir.is_empty() || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

fn relevant(path: &str) -> bool {
    path == DISK_DIR || under(path, DISK_DIR)
}

/// Applies one layer on top of `lower` (whiteouts and opaque markers act on lower layers only).
fn apply(lower: &mut Visible, layer: &Summary) {
    for op in layer {
        match op {
            Op::Whiteout(p) => lower.retain(|k, _| k != p && !under(k, p)),
            Op::Opaque(d) => lower.retain(|k, _| !under(k, d)),
            Op::Add(..) => {}
        }
    }
    for op in layer {
        if let Op::Add(p, node) = op {
            match node {
                None => {
                    lower.remove(p);
                }
                Some(n) => {
                    lower.retain(|k, _| !under(k, p));
                    if under(p, DISK_DIR) {
                        lower.insert(p.clone(), *n);
                    }
                }
            }
        }
    }
}

/// `a/./b//c/` → `a/b/c`; `..` cannot climb above the root.
fn normalize(raw: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    parts.join("/")
}

/// How walking stopped early.
enum Stop {
    /// The import fails with this error.
    Fail(Error),
    /// The reader went away: stop quietly.
    Cancelled,
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Fail(e)
    }
}

struct Walker<'a> {
    src: &'a dyn LayerSource,
    /// The image, for messages.
    url: &'a str,
    tx: &'a SyncSender<Msg>,
    sums: Vec<Option<Summary>>,
    committed: Option<(String, Node)>,
    /// The committed file's last chunk, delivered only once the image proved valid: a consumer that stops
    /// reading at the disk file's last byte still sees a violation found after it was streamed.
    tail: Option<Vec<u8>>,
}

/// Runs the walk and reports its outcome to the reader.
fn run(src: &dyn LayerSource, url: &str, tx: &SyncSender<Msg>) {
    let mut w = Walker { src, url, tx, sums: vec![None; src.count()], committed: None, tail: None };
    let outcome = w.walk_all();
    let _ = match outcome {
        Ok(()) => match w.tail.take() {
            Some(t) => tx.send(Msg::Data(t)).and_then(|()| tx.send(Msg::End)),
            None => tx.send(Msg::End),
        },
        Err(Stop::Fail(e)) => tx.send(Msg::Fail(e)),
        Err(Stop::Cancelled) => Ok(()),
    };
}

impl Walker<'_> {
    fn walk_all(&mut self) -> Result<(), Stop> {
        for i in 0..self.sums.len() {
            if self.sums[i].is_none() {
                let s = self.walk(i)?;
                self.sums[i] = Some(s);
            }
        }
        let mut visible = Visible::new();
        for s in self.sums.iter().flatten() {
            apply(&mut visible, s);
        }
        let files = || visible.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
        if visible.len() > 1 {
            return Err(
                Error::ContainerImage(format!("image directory contains more than one file: {}", files())).into()
            );
        }
        match (&self.committed, visible.iter().next()) {
            (_, None) => {
                Err(Error::ContainerImage(String::from("Failed to find VM disk image file in the container image"))
                    .into())
            }
            (Some((p, n)), Some((vp, vn))) if p == vp && n == vn => Ok(()),
            (Some((p, _)), Some(_)) => Err(Error::ContainerImage(format!(
                "the disk file {p} is replaced by a later entry of its layer (duplicate tar entries)"
            ))
            .into()),
            (None, Some((p, n))) if !n.regular => {
                Err(Error::ContainerImage(format!("the disk file {p} is not a regular file")).into())
            }
            (None, Some((p, _))) => Err(Error::ContainerImage(format!(
                "the disk file {p} could not be selected while streaming (duplicate tar entries)"
            ))
            .into()),
        }
    }

    /// Reads layers above `i` that are not summarized yet.
    fn look_ahead(&mut self, i: usize) -> Result<(), Stop> {
        for j in i + 1..self.sums.len() {
            if self.sums[j].is_none() {
                let s = self.walk(j)?;
                self.sums[j] = Some(s);
            }
        }
        Ok(())
    }

    /// Whether `node` at `path` in layer `i` is still visible after all layers above `i` (all summarized).
    fn survives(&self, path: &str, node: Node, i: usize) -> bool {
        let mut v = Visible::from([(path.to_string(), node)]);
        for s in self.sums[i + 1..].iter().flatten() {
            apply(&mut v, s);
        }
        v.get(path) == Some(&node)
    }

    /// An error for a failure while reading layer `i`: the transport's, or a malformed layer.
    fn layer_error(&self, i: usize, failure: &Failure, e: &io::Error) -> Error {
        let net = failure.lock().ok().and_then(|f| f.clone());
        match net {
            Some(m) => Error::Connect {
                kind: "registry",
                url: self.url.to_string(),
                message: format!("failed to pull image: {}: {m}", self.src.describe(i)),
            },
            None => Error::ContainerImage(format!("{} is malformed: {}", self.src.describe(i), chain_line(e))),
        }
    }

    /// Reads layer `i` to its end and returns its summary; streams the disk file if it is in this layer.
    fn walk(&mut self, i: usize) -> Result<Summary, Stop> {
        let (mut blob, failure) = self.src.open(i)?;
        let lerr = |w: &Self, e: io::Error| Stop::Fail(w.layer_error(i, &failure, &e));
        let mut head = vec![0u8; DETECT_LEN];
        let got = crate::format::read_full(&mut blob, &mut head).map_err(|e| lerr(self, e))?;
        head.truncate(got);
        let compression = Compression::detect(&head);
        let chained: BoxRead = Box::new(io::Cursor::new(head).chain(blob));
        let decoded = match compression {
            Some(c) => decompress::wrap(c, chained, None).map_err(|e| lerr(self, e))?,
            None => chained,
        };
        let mut archive = tar::Archive::new(decoded);
        let mut summary = Summary::new();
        let entries = archive.entries().map_err(|e| lerr(self, e))?;
        for (seq, entry) in entries.enumerate() {
            let mut entry = entry.map_err(|e| lerr(self, e))?;
            let etype = entry.header().entry_type();
            if etype.is_pax_global_extensions()
                || etype.is_pax_local_extensions()
                || etype.is_gnu_longname()
                || etype.is_gnu_longlink()
            {
                continue;
            }
            let path = match entry.path() {
                Ok(raw) => normalize(&raw.to_string_lossy()),
                Err(e) => return Err(lerr(self, e)),
            };
            let (parent, name) = path.rsplit_once('/').unwrap_or(("", path.as_str()));
            if name == ".wh..wh..opq" {
                if parent.is_empty() || relevant(parent) {
                    summary.push(Op::Opaque(parent.to_string()));
                }
                continue;
            }
            if let Some(target) = name.strip_prefix(".wh.") {
                let target = if parent.is_empty() { target.to_string() } else { format!("{parent}/{target}") };
                if relevant(&target) {
                    summary.push(Op::Whiteout(target));
                }
                continue;
            }
            if !relevant(&path) {
                continue;
            }
            if etype.is_dir() {
                summary.push(Op::Add(path, None));
                continue;
            }
            let regular = etype.is_file() || etype.is_contiguous() || etype.is_gnu_sparse();
            let node = Node { layer: i, seq, regular };
            summary.push(Op::Add(path.clone(), Some(node)));
            if !regular || path == DISK_DIR || self.committed.is_some() {
                continue;
            }
            self.look_ahead(i)?;
            if self.committed.is_some() || !self.survives(&path, node, i) {
                continue;
            }
            let size = (!etype.is_gnu_sparse()).then(|| entry.size());
            self.committed = Some((path.clone(), node));
            self.tx.send(Msg::Start { size, path }).map_err(|_| Stop::Cancelled)?;
            // The last chunk is held back until the whole image has been checked (see `walk_all`).
            let mut pending: Option<Vec<u8>> = None;
            loop {
                let mut buf = vec![0u8; CHUNK];
                let n = crate::format::read_full(&mut entry, &mut buf).map_err(|e| lerr(self, e))?;
                if n == 0 {
                    break;
                }
                buf.truncate(n);
                if let Some(prev) = pending.replace(buf) {
                    self.tx.send(Msg::Data(prev)).map_err(|_| Stop::Cancelled)?;
                }
            }
            self.tail = pending;
        }
        // Read what follows the end-of-archive marker too, so that the blob's digest gets verified.
        let mut rest = archive.into_inner();
        io::copy(&mut rest, &mut io::sink()).map_err(|e| lerr(self, e))?;
        Ok(summary)
    }
}

/// The synchronous end of the worker's channel: the disk file's bytes.
struct DiskReader {
    rx: Option<Receiver<Msg>>,
    cur: Bytes,
    done: bool,
    /// Tells the worker to stop (set on drop).
    cancel: tokio::sync::watch::Sender<bool>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl DiskReader {
    fn recv(&mut self) -> Option<Msg> {
        self.rx.as_ref()?.recv().ok()
    }
}

impl Drop for DiskReader {
    /// Stops the worker and waits for it, so that it never outlives the import (nor uses a runtime that is
    /// shutting down).
    fn drop(&mut self) {
        let _ = self.cancel.send(true);
        self.rx = None;
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl Read for DiskReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            if self.done {
                return Ok(0);
            }
            match self.recv() {
                Some(Msg::Data(b)) => self.cur = Bytes::from(b),
                Some(Msg::End) => self.done = true,
                Some(Msg::Fail(e)) => {
                    self.done = true;
                    return Err(tag(e));
                }
                Some(Msg::Start { .. }) => {
                    return Err(io::Error::other("registry reader: unexpected second disk file"));
                }
                None => {
                    self.done = true;
                    return Err(io::Error::other("registry reader stopped before the end of the disk file"));
                }
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;

    /// Layers as in-memory blobs.
    struct Mem(Vec<Vec<u8>>);

    impl LayerSource for Mem {
        fn count(&self) -> usize {
            self.0.len()
        }
        fn describe(&self, i: usize) -> String {
            format!("layer {}", i + 1)
        }
        fn open(&self, i: usize) -> Result<(BoxRead, Failure)> {
            Ok((Box::new(io::Cursor::new(self.0[i].clone())), Failure::default()))
        }
    }

    enum E<'a> {
        File(&'a str, &'a [u8]),
        Dir(&'a str),
        Link(&'a str),
    }

    fn tar(entries: &[E]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for e in entries {
            let mut h = tar::Header::new_gnu();
            match e {
                E::File(p, data) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(data.len() as u64);
                    h.set_mode(0o644);
                    b.append_data(&mut h, p, *data).unwrap();
                }
                E::Dir(p) => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    b.append_data(&mut h, p, io::empty()).unwrap();
                }
                E::Link(p) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    b.append_link(&mut h, p, "x").unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    fn gz(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    /// Runs the walk: Ok((size, bytes)) or the error text (from `open`'s point of view or at the stream's end).
    fn walk(layers: Vec<Vec<u8>>) -> Result<(Option<u64>, Vec<u8>), String> {
        let (tx, rx) = sync_channel(CHANNEL_DEPTH);
        let src = Mem(layers);
        let t = std::thread::spawn(move || run(&src, "docker://test/image", &tx));
        let r = match rx.recv().unwrap() {
            Msg::Start { size, .. } => {
                let mut out = Vec::new();
                let (cancel, _) = tokio::sync::watch::channel(false);
                let mut r = DiskReader { rx: Some(rx), cur: Bytes::new(), done: false, cancel, worker: None };
                match r.read_to_end(&mut out) {
                    Ok(_) => Ok((size, out)),
                    Err(e) => Err(crate::error::untag(e, 0).to_string()),
                }
            }
            Msg::Fail(e) => Err(e.to_string()),
            _ => Err(String::from("unexpected message")),
        };
        t.join().unwrap();
        r
    }

    #[test]
    fn single_layer() {
        let l = tar(&[E::Dir("disk/"), E::File("disk/disk.img", b"hello disk")]);
        assert_eq!(walk(vec![gz(&l)]), Ok((Some(10), b"hello disk".to_vec())));
        let l = tar(&[E::Dir("./disk/"), E::File("./disk/a.img", b"x"), E::File("etc/passwd", b"root")]);
        assert_eq!(walk(vec![l]), Ok((Some(1), b"x".to_vec())));
    }

    #[test]
    fn whiteout_in_upper_layer() {
        let lower = tar(&[E::Dir("disk/"), E::File("disk/old.img", b"old")]);
        let upper = tar(&[E::File("disk/.wh.old.img", b""), E::File("disk/new.img", b"new")]);
        assert_eq!(walk(vec![lower.clone(), upper]), Ok((Some(3), b"new".to_vec())));
        // the whiteout after the new file in tar order
        let upper = tar(&[E::File("disk/new.img", b"new"), E::File("disk/.wh.old.img", b"")]);
        assert_eq!(walk(vec![lower.clone(), gz(&upper)]), Ok((Some(3), b"new".to_vec())));
        // opaque directory
        let upper = tar(&[E::Dir("disk/"), E::File("disk/.wh..wh..opq", b""), E::File("disk/new.img", b"new")]);
        assert_eq!(walk(vec![lower.clone(), upper]), Ok((Some(3), b"new".to_vec())));
        // the whole directory whited out, then nothing
        let upper = tar(&[E::File(".wh.disk", b"")]);
        let e = walk(vec![lower.clone(), upper]).unwrap_err();
        assert!(e.contains("Failed to find VM disk image file"), "{e}");
        // a same-layer whiteout does not hide the same layer's file
        let one = tar(&[E::File("disk/.wh.a.img", b""), E::File("disk/a.img", b"a")]);
        assert_eq!(walk(vec![one]), Ok((Some(1), b"a".to_vec())));
        // lower disk, an unrelated upper layer: streamed from the lower layer after the look-ahead
        let upper = tar(&[E::File("etc/hostname", b"h")]);
        assert_eq!(walk(vec![lower.clone(), upper]), Ok((Some(3), b"old".to_vec())));
        // the file replaced by a newer version of the same path
        let upper = tar(&[E::File("disk/old.img", b"newer")]);
        assert_eq!(walk(vec![lower, upper]), Ok((Some(5), b"newer".to_vec())));
    }

    #[test]
    fn violations() {
        let two = tar(&[E::File("disk/a.img", b"a"), E::File("disk/b.img", b"b")]);
        let e = walk(vec![two]).unwrap_err();
        assert!(e.contains("image directory contains more than one file"), "{e}");
        assert!(e.contains("disk/a.img, disk/b.img"), "{e}");
        // a lower file still visible beside an upper one
        let lower = tar(&[E::File("disk/a.img", b"a")]);
        let upper = tar(&[E::File("disk/b.img", b"b")]);
        let e = walk(vec![lower, upper]).unwrap_err();
        assert!(e.contains("more than one file"), "{e}");
        let none = tar(&[E::Dir("disk/"), E::File("etc/x", b"x"), E::File("diskette", b"d")]);
        let e = walk(vec![none]).unwrap_err();
        assert!(e.contains("Failed to find VM disk image file in the container image"), "{e}");
        let link = tar(&[E::Link("disk/disk.img")]);
        let e = walk(vec![link]).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        // nested files count
        let nested = tar(&[E::File("disk/a.img", b"a"), E::File("disk/sub/b.img", b"b")]);
        assert!(walk(vec![nested]).unwrap_err().contains("more than one file"));
    }

    #[test]
    fn malformed_layer() {
        let mut bad = gz(&tar(&[E::File("disk/a.img", &[7u8; 100_000])]));
        let mid = bad.len() / 2;
        bad[mid] ^= 0xff;
        bad[mid + 1] ^= 0xff;
        let e = walk(vec![bad]).unwrap_err();
        assert!(e.contains("layer 1 is malformed"), "{e}");
        let e = walk(vec![b"this is not a tar archive at all".repeat(40)]).unwrap_err();
        assert!(e.contains("malformed") || e.contains("Failed to find"), "{e}");
    }

    #[test]
    fn paths_and_config() {
        assert_eq!(normalize("./disk//a.img"), "disk/a.img");
        assert_eq!(normalize("/disk/"), "disk");
        assert_eq!(normalize("../../disk/x"), "disk/x");
        assert!(relevant("disk") && relevant("disk/a") && !relevant("diskette") && !relevant("etc/disk"));
        let c = ConfigInfo::parse(
            br#"{"architecture":"arm64","config":{"Env":["A=1","X_KUBEVIRT_IO_Y=z"],"Labels":{"containers.bootc":"1"}}}"#,
        )
        .unwrap();
        assert_eq!(c.env, vec!["A=1", "X_KUBEVIRT_IO_Y=z"]);
        assert_eq!(c.architecture.as_deref(), Some("arm64"));
        assert_eq!(c.bootc_label().as_deref(), Some("containers.bootc=1"));
        let c = ConfigInfo::parse(br#"{"config":{"Labels":{"ostree.bootable":"0"}}}"#).unwrap();
        assert_eq!(c.bootc_label(), None);
        assert!(c.env.is_empty());
    }
}
