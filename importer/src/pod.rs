//! Pod mode: the importer as CDI's importer pod runs it. The environment (CDI's contract, specs/cdi.md §2)
//! is read once into a [`PodConfig`] (pure, table-tested); [`run`] then sizes the target like CDI, serves
//! progress metrics, imports (or creates a blank image, or extracts an archive) and returns the
//! [`Termination`] that `main` writes to the termination-message file and turns into the exit code.
//!
//! Paths that are fixed in a real pod can be overridden for tests (documented in the README):
//! `IMPORTER_DATA_DIR` (`/data`), `IMPORTER_BLOCK_DEVICE` (`/dev/cdi-block-volume`), `IMPORTER_SCRATCH_DIR`
//! (`/scratch`), `IMPORTER_TERMINATION_LOG` (`/dev/termination-log`), `IMPORTER_EXTRA_HEADERS_DIR`
//! (`/extraheaders`), `IMPORTER_METRICS_ADDR` (`0.0.0.0:8443`).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use crate::checksum::{ExpectedChecksum, Hasher};
use crate::detect::ImageFormat;
use crate::format::FormatError;
use crate::pipeline::{self, ImportRequest};
use crate::plan::SizeRule;
use crate::progress::{Phase, Progress};
use crate::sink::{Sink, TargetSink};
use crate::size::parse_quantity;
use crate::source::{SourceLocation, SourceOptions, http::parse_header};
use crate::{Error, ErrorKind, archive};

/// 1 MiB, CDI's alignment for usable space.
const MIB: u64 = 1 << 20;

/// What to import from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodSource {
    /// `http`: an HTTP(S) URL.
    Http(reqwest::Url),
    /// `s3`: an S3 URL (`s3://…` or `https://endpoint/bucket/key`).
    S3(reqwest::Url),
    /// `registry`: `docker://…`.
    Registry(String),
    /// `none`: a blank image.
    Blank,
}

/// `IMPORTER_CONTENTTYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentType {
    /// A disk image, converted to raw.
    Kubevirt,
    /// A tar archive extracted into the volume.
    Archive,
}

/// Where things are in the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPaths {
    /// Filesystem volume mount (`/data`).
    pub data_dir: PathBuf,
    /// Block volume device (`/dev/cdi-block-volume`).
    pub block_device: PathBuf,
    /// Scratch volume mount (`/scratch`), used when it exists.
    pub scratch_dir: PathBuf,
    /// Termination message file (`/dev/termination-log`).
    pub termination_log: PathBuf,
    /// Secret extra headers (`/extraheaders/<n>/<file>`).
    pub extra_headers_dir: PathBuf,
    /// Metrics listen address.
    pub metrics_addr: std::net::SocketAddr,
}

/// The validated pod environment.
#[derive(Debug, Clone)]
pub struct PodConfig {
    /// Source.
    pub source: PodSource,
    /// Content type.
    pub content: ContentType,
    /// `IMPORTER_IMAGE_SIZE` in bytes.
    pub image_size: Option<u64>,
    /// `OWNER_UID` (metric label).
    pub owner_uid: String,
    /// `FILESYSTEM_OVERHEAD`.
    pub overhead: f64,
    /// `PREALLOCATION`.
    pub preallocation: bool,
    /// `IMPORTER_CHECKSUM`.
    pub checksum: Option<ExpectedChecksum>,
    /// Network settings (TLS, credentials, headers, architecture).
    pub options: SourceOptions,
    /// Paths.
    pub paths: PodPaths,
}

/// Why the environment is unusable (reported as the termination message, exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `IMPORTER_SOURCE` names a source we do not import from.
    #[error("Unknown data source: {0}")]
    UnknownSource(String),
    /// Blank image with archive content.
    #[error("Cannot create empty disk with content type archive")]
    BlankArchive,
    /// A malformed variable.
    #[error("invalid {name}: {message}")]
    Invalid {
        /// Variable name.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// `FILESYSTEM_OVERHEAD` as CDI's workers read it: absent means 0, else a fraction in [0, 1). The error is the
/// detail for the caller's "invalid variable" message.
pub fn parse_overhead(value: Option<&str>) -> Result<f64, String> {
    match value {
        None => Ok(0.0),
        Some(v) => v
            .parse::<f64>()
            .ok()
            .filter(|o| (0.0..1.0).contains(o))
            .ok_or_else(|| format!("{v:?} (a fraction in [0, 1))")),
    }
}

/// `PREALLOCATION` as CDI's workers read it: absent means false, else `true` or `false`. The error is the detail
/// for the caller's "invalid variable" message.
pub fn parse_preallocation(value: Option<&str>) -> Result<bool, String> {
    match value {
        None => Ok(false),
        Some(v) => v.parse::<bool>().map_err(|_| format!("{v:?} (true or false)")),
    }
}

fn invalid(name: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { name, message: message.into() }
}

fn path_var(env: &BTreeMap<String, String>, name: &str, default: &str) -> PathBuf {
    PathBuf::from(env.get(name).filter(|v| !v.is_empty()).map_or(default, |v| v.as_str()))
}

impl PodConfig {
    /// Reads CDI's importer environment. Extra headers from files are read from `extra_headers_dir` later.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<PodConfig, ConfigError> {
        let get = |k: &str| env.get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let endpoint = get("IMPORTER_ENDPOINT").unwrap_or_default();
        let content = match get("IMPORTER_CONTENTTYPE").as_deref() {
            None | Some("kubevirt") => ContentType::Kubevirt,
            Some("archive") => ContentType::Archive,
            Some(other) => return Err(invalid("IMPORTER_CONTENTTYPE", format!("{other:?} (kubevirt or archive)"))),
        };
        let url = |what: &'static str| {
            reqwest::Url::parse(&endpoint)
                .map_err(|e| invalid("IMPORTER_ENDPOINT", format!("{endpoint:?} for {what}: {e}")))
        };
        let source = match get("IMPORTER_SOURCE").as_deref().unwrap_or("http") {
            "http" => {
                let u = url("http")?;
                if !matches!(u.scheme(), "http" | "https") {
                    return Err(invalid("IMPORTER_ENDPOINT", format!("{endpoint:?}: scheme must be http or https")));
                }
                PodSource::Http(u)
            }
            "s3" => PodSource::S3(url("s3")?),
            "registry" => PodSource::Registry(
                endpoint
                    .strip_prefix("docker://")
                    .ok_or_else(|| {
                        invalid("IMPORTER_ENDPOINT", format!("{endpoint:?}: registry sources need docker://"))
                    })?
                    .to_string(),
            ),
            "none" => PodSource::Blank,
            other => return Err(ConfigError::UnknownSource(other.to_string())),
        };
        if source == PodSource::Blank && content == ContentType::Archive {
            return Err(ConfigError::BlankArchive);
        }
        let image_size = get("IMPORTER_IMAGE_SIZE")
            .map(|q| parse_quantity(&q).map_err(|e| invalid("IMPORTER_IMAGE_SIZE", e)))
            .transpose()?;
        let overhead =
            parse_overhead(get("FILESYSTEM_OVERHEAD").as_deref()).map_err(|e| invalid("FILESYSTEM_OVERHEAD", e))?;
        let preallocation =
            parse_preallocation(get("PREALLOCATION").as_deref()).map_err(|e| invalid("PREALLOCATION", e))?;
        let checksum = get("IMPORTER_CHECKSUM")
            .map(|c| c.parse::<ExpectedChecksum>().map_err(|e| invalid("IMPORTER_CHECKSUM", e)))
            .transpose()?;
        let insecure = get("INSECURE_TLS").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let basic_auth = get("IMPORTER_ACCESS_KEY_ID").map(|k| (k, get("IMPORTER_SECRET_KEY").unwrap_or_default()));
        let mut headers = Vec::new();
        let mut numbered: Vec<(u64, &String)> = env
            .iter()
            .filter_map(|(k, v)| k.strip_prefix("IMPORTER_EXTRA_HEADER_").and_then(|n| n.parse().ok()).map(|n| (n, v)))
            .collect();
        numbered.sort();
        for (_, line) in numbered {
            headers.push(parse_header(line).map_err(|e| invalid("IMPORTER_EXTRA_HEADER_<n>", e.to_string()))?);
        }
        let metrics_addr = get("IMPORTER_METRICS_ADDR").unwrap_or_else(|| String::from("0.0.0.0:8443"));
        let metrics_addr =
            metrics_addr.parse().map_err(|e| invalid("IMPORTER_METRICS_ADDR", format!("{metrics_addr:?}: {e}")))?;
        Ok(PodConfig {
            source,
            content,
            image_size,
            owner_uid: get("OWNER_UID").unwrap_or_default(),
            overhead,
            preallocation,
            checksum,
            options: SourceOptions {
                cert_dir: get("IMPORTER_CERT_DIR").map(PathBuf::from),
                insecure,
                headers,
                basic_auth,
                platform_architecture: get("IMPORTER_REGISTRY_IMAGE_ARCHITECTURE"),
                // CDI cancels a transfer after 10 minutes without data; we retry stalls sooner, then give up.
                stall_timeout: Duration::from_secs(120),
                ..SourceOptions::default()
            },
            paths: PodPaths {
                data_dir: path_var(env, "IMPORTER_DATA_DIR", "/data"),
                block_device: path_var(env, "IMPORTER_BLOCK_DEVICE", "/dev/cdi-block-volume"),
                scratch_dir: path_var(env, "IMPORTER_SCRATCH_DIR", "/scratch"),
                termination_log: path_var(env, "IMPORTER_TERMINATION_LOG", "/dev/termination-log"),
                extra_headers_dir: path_var(env, "IMPORTER_EXTRA_HEADERS_DIR", "/extraheaders"),
                metrics_addr,
            },
        })
    }
}

/// Reads secret extra headers: every non-dot file in `<dir>/<n>/` holds one header line.
fn secret_headers(dir: &Path) -> Result<Vec<(String, String)>, Error> {
    let mut out = Vec::new();
    let Ok(subdirs) = fs::read_dir(dir) else { return Ok(out) };
    let mut subdirs: Vec<PathBuf> = subdirs.filter_map(|e| e.ok().map(|e| e.path())).collect();
    subdirs.sort();
    for sd in subdirs.into_iter().filter(|p| p.is_dir()) {
        let Ok(files) = fs::read_dir(&sd) else { continue };
        let mut files: Vec<PathBuf> = files.filter_map(|e| e.ok().map(|e| e.path())).collect();
        files.sort();
        for f in files {
            let hidden = f.file_name().and_then(|n| n.to_str()).is_none_or(|n| n.starts_with('.'));
            if hidden || !f.is_file() {
                continue;
            }
            let line = fs::read_to_string(&f).map_err(|source| Error::OpenSource { path: f.clone(), source })?;
            out.push(parse_header(line.trim())?);
        }
    }
    Ok(out)
}

/// CDI's `GetUsableSpace`: `roundDown(ceil(avail / (1 + overhead)), 1 MiB)`.
pub fn usable_space(overhead: f64, available: u64) -> u64 {
    let v = (available as f64 / (1.0 + overhead)).ceil() as u64;
    v / MIB * MIB
}

/// The target volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Volume {
    /// A filesystem volume: the image goes to `<dir>/disk.img`.
    Filesystem(PathBuf),
    /// A block volume.
    Block(PathBuf),
}

/// Decides the volume as CDI does: the block device path if it exists as a block device, else the data dir.
pub fn volume(paths: &PodPaths) -> Volume {
    volume_at(&paths.block_device, &paths.data_dir)
}

/// [`volume`] for explicit paths: `Block(block_device)` if that is a block device, else `Filesystem(data_dir)`.
pub fn volume_at(block_device: &Path, data_dir: &Path) -> Volume {
    match fs::metadata(block_device) {
        Ok(m) if m.file_type().is_block_device() => Volume::Block(block_device.to_path_buf()),
        _ => Volume::Filesystem(data_dir.to_path_buf()),
    }
}

/// Bytes the volume offers: the device size, or `min(free space, image size)` (`IMPORTER_IMAGE_SIZE`).
pub fn available_space(vol: &Volume, image_size: Option<u64>) -> Result<u64, Error> {
    match vol {
        Volume::Block(dev) => {
            let mut f = fs::File::open(dev).map_err(|source| Error::Sink { path: dev.clone(), source })?;
            f.seek(SeekFrom::End(0)).map_err(|source| Error::Sink { path: dev.clone(), source })
        }
        Volume::Filesystem(dir) => {
            let st = rustix::fs::statvfs(dir).map_err(|e| Error::Sink { path: dir.clone(), source: e.into() })?;
            let free = st.f_bavail.saturating_mul(st.f_frsize);
            Ok(image_size.map_or(free, |s| s.min(free)))
        }
    }
}

/// The termination message and exit code of a pod run.
#[derive(Debug, Clone, PartialEq)]
pub struct Termination {
    /// The message written to the termination-log file.
    pub message: String,
    /// The process exit code.
    pub exit_code: u8,
}

/// CDI's success message, keys in CDI's order, absent ones omitted.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SuccessMessage {
    #[serde(skip_serializing_if = "Option::is_none")]
    scratch_space_required: Option<bool>,
    preallocation_applied: bool,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
    message: &'static str,
}

/// Maps image env entries containing `KUBEVIRT_IO_` to labels, as CDI does:
/// `INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small` → `instancetype.kubevirt.io/default-instancetype: u1.small`.
pub fn env_labels(env: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for e in env {
        let Some((name, value)) = e.split_once('=') else { continue };
        let Some(idx) = name.find("KUBEVIRT_IO_") else { continue };
        let prefix: Vec<String> =
            name[..idx].split('_').filter(|p| !p.is_empty()).map(|p| p.to_ascii_lowercase()).collect();
        let suffix = name[idx + "KUBEVIRT_IO_".len()..].replace('_', "-").to_ascii_lowercase();
        if suffix.is_empty() {
            continue;
        }
        let domain =
            if prefix.is_empty() { String::from("kubevirt.io") } else { format!("{}.kubevirt.io", prefix.join(".")) };
        out.insert(format!("{domain}/{suffix}"), value.to_string());
    }
    out
}

fn json(m: &SuccessMessage) -> String {
    serde_json::to_string(m).unwrap_or_else(|_| format!("{{\"message\":\"{}\"}}", m.message))
}

/// One line, at most 4096 bytes (on a character boundary).
fn fit(mut s: String) -> String {
    s = s.replace(['\n', '\r'], " ");
    if s.len() > 4096 {
        let mut cut = 4096;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// What a successful pod run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Done {
    /// Preallocation was applied.
    pub preallocated: bool,
    /// Registry image env (for labels).
    pub image_env: Vec<String>,
    /// A blank image was created (CDI's message then has no `scratchSpaceRequired`).
    pub blank: bool,
}

/// Turns an import result into CDI's termination protocol.
fn terminate(result: Result<Done, Error>, scratch_available: bool) -> Termination {
    match result {
        Ok(Done { preallocated, image_env, blank }) => Termination {
            message: fit(json(&SuccessMessage {
                scratch_space_required: (!blank).then_some(false),
                preallocation_applied: preallocated,
                labels: env_labels(&image_env),
                message: "Import Complete",
            })),
            exit_code: 0,
        },
        Err(e) => match e.kind() {
            ErrorKind::Checksum => Termination {
                message: fit(format!(
                    "{{\"message\":{}}}",
                    serde_json::Value::String(format!(
                        "Unable to process data: checksum validation failed: {}",
                        e.one_line()
                    ))
                )),
                exit_code: 0,
            },
            ErrorKind::ScratchRequired if !scratch_available => Termination {
                message: json(&SuccessMessage {
                    scratch_space_required: Some(true),
                    preallocation_applied: false,
                    labels: BTreeMap::new(),
                    message: "Import Complete",
                }),
                exit_code: 0,
            },
            ErrorKind::Connect => Termination { message: fit(e.one_line()), exit_code: 1 },
            ErrorKind::Capacity if !e.one_line().contains("is larger than the reported available") => Termination {
                message: fit(format!("Unable to process data: {}: no space left on device", e.one_line())),
                exit_code: 1,
            },
            _ => Termination { message: fit(format!("Unable to process data: {}", e.one_line())), exit_code: 1 },
        },
    }
}

/// Removes everything in `dir` except `lost+found` (CDI cleans the target before writing, so a retry never
/// trips over its own leftovers).
pub fn clean_dir(dir: &Path) -> Result<(), Error> {
    let entries = fs::read_dir(dir).map_err(|source| Error::Sink { path: dir.to_path_buf(), source })?;
    for e in entries.flatten() {
        let p = e.path();
        if p.file_name().is_some_and(|n| n == "lost+found") {
            continue;
        }
        let r = match fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => fs::remove_dir_all(&p),
            _ => fs::remove_file(&p),
        };
        r.map_err(|source| Error::Sink { path: p.clone(), source })?;
    }
    Ok(())
}

/// A blank image: a sparse raw file of the usable size (preallocated on request); on a block device nothing
/// to do unless preallocation asks for zeroing.
fn blank(cfg: &PodConfig, vol: &Volume) -> Result<Done, Error> {
    let available = available_space(vol, cfg.image_size)?;
    match vol {
        Volume::Filesystem(dir) => {
            let size = usable_space(cfg.overhead, available);
            let path = dir.join("disk.img");
            let mut sink = TargetSink::create_file(&path, cfg.preallocation)?;
            let r = sink.finish(size);
            if r.is_err() {
                sink.abort();
            }
            let report = r?;
            set_mode(&path)?;
            Ok(Done { preallocated: report.preallocated, image_env: Vec::new(), blank: true })
        }
        Volume::Block(dev) if cfg.preallocation => {
            let mut sink = TargetSink::open_block(dev, true)?;
            sink.write_zeroes(0, available)?;
            sink.finish(available)?;
            Ok(Done { preallocated: true, image_env: Vec::new(), blank: true })
        }
        Volume::Block(_) => Ok(Done { blank: true, ..Done::default() }),
    }
}

/// Gives an image file CDI's mode 0660 (the VM's qemu group reads and writes it).
pub fn set_mode(path: &Path) -> Result<(), Error> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o660))
        .map_err(|source| Error::Sink { path: path.to_path_buf(), source })
}

fn location(src: &PodSource) -> SourceLocation {
    match src {
        PodSource::Http(u) => SourceLocation::Http(u.clone()),
        PodSource::S3(u) => SourceLocation::S3 { url: u.clone(), endpoint: None },
        PodSource::Registry(r) => SourceLocation::Registry(r.clone()),
        PodSource::Blank => SourceLocation::File(PathBuf::from("/dev/null")),
    }
}

/// Archive content: extract the (decompressed) tar into the data directory; checksum over the bytes served.
fn extract_archive(
    cfg: &PodConfig,
    vol: &Volume,
    rt: &tokio::runtime::Handle,
    progress: &Progress,
) -> Result<Done, Error> {
    let hasher = cfg.checksum.as_ref().map(|c| Hasher::new(c.algorithm));
    extract_tar(
        vol,
        "source",
        progress,
        || pipeline::probe(&location(&cfg.source), &cfg.options, rt, progress, hasher.as_ref()),
        || match (&hasher, &cfg.checksum) {
            (Some(h), Some(want)) => h.verify(want).map(|_| ()),
            _ => Ok(()),
        },
    )?;
    Ok(Done::default())
}

/// Archive content into a filesystem volume (a block volume is refused), for the importer and the upload
/// server: cleans the volume's directory, probes the stream with `probe`, refuses anything but a tar (naming the `what`: "source", "upload"), extracts it,
/// reads any trailing padding (so a checksum covers every byte served) and runs `verify`. On failure the
/// directory is cleaned again, so no partial tree is left behind.
pub fn extract_tar(
    vol: &Volume,
    what: &str,
    progress: &Progress,
    probe: impl FnOnce() -> Result<pipeline::Probed, Error>,
    verify: impl FnOnce() -> Result<(), Error>,
) -> Result<(), Error> {
    let Volume::Filesystem(dir) = vol else {
        return Err(Error::InvalidRequest(String::from(
            "content type archive needs a filesystem volume, not a block device",
        )));
    };
    clean_dir(dir)?;
    let probed = probe()?;
    if probed.format != ImageFormat::Tar {
        return Err(Error::Format {
            format: probed.format,
            source: FormatError::Invalid(format!(
                "content type archive needs a tar archive, the {what} is {}",
                probed.format
            )),
        });
    }
    progress.start_phase(Phase::Import, probed.size);
    progress.set_done(progress.snapshot().source_bytes);
    let mut stream = probed.stream;
    let r = archive::extract(&mut stream, dir)
        .and_then(|_| {
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match io::Read::read(&mut stream, &mut buf) {
                    Ok(0) => break Ok(()),
                    Ok(_) => {}
                    Err(e) => break Err(pipeline::untag(e, 0)),
                }
            }
        })
        .and_then(|()| verify());
    if let Err(e) = r {
        let _ = clean_dir(dir);
        return Err(e);
    }
    Ok(())
}

/// Runs the pod: sizes the target, serves metrics, imports. Must run on a blocking thread of `rt`.
pub fn run(cfg: &PodConfig, rt: &tokio::runtime::Handle, progress: &Progress) -> Termination {
    let vol = volume(&cfg.paths);
    let scratch = cfg.paths.scratch_dir.is_dir().then(|| cfg.paths.scratch_dir.clone());
    let result = (|| -> Result<Done, Error> {
        let mut cfg = cfg.clone();
        cfg.options.headers.extend(secret_headers(&cfg.paths.extra_headers_dir)?);
        if cfg.source == PodSource::Blank {
            return blank(&cfg, &vol);
        }
        if cfg.content == ContentType::Archive {
            return extract_archive(&cfg, &vol, rt, progress);
        }
        let available = available_space(&vol, cfg.image_size)?;
        let (dest, size) = match &vol {
            Volume::Filesystem(dir) => {
                let usable = usable_space(cfg.overhead, available);
                let target = cfg.image_size.map_or(usable, |s| s.min(usable));
                (dir.join("disk.img"), SizeRule::Fill { usable: target, available })
            }
            // Block volumes are not resized; the device size is the limit.
            Volume::Block(dev) => (dev.clone(), SizeRule::Fill { usable: 0, available }),
        };
        let req = ImportRequest {
            source: location(&cfg.source),
            dest: dest.clone(),
            checksum: cfg.checksum.clone(),
            size,
            preallocate: cfg.preallocation,
            http: cfg.options.clone(),
            scratch: scratch.clone(),
        };
        let report = pipeline::import(&req, progress, rt)?;
        if matches!(vol, Volume::Filesystem(_)) {
            set_mode(&dest)?;
        }
        Ok(Done { preallocated: report.preallocated, image_env: report.image_env, blank: false })
    })();
    terminate(result, scratch.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn reads_cdis_environment() {
        let c = PodConfig::from_env(&env(&[
            ("IMPORTER_SOURCE", "http"),
            ("IMPORTER_ENDPOINT", "https://h/x.qcow2"),
            ("IMPORTER_CONTENTTYPE", "kubevirt"),
            ("IMPORTER_IMAGE_SIZE", "1Gi"),
            ("OWNER_UID", "abc"),
            ("FILESYSTEM_OVERHEAD", "0.055"),
            ("INSECURE_TLS", "true"),
            ("PREALLOCATION", "false"),
            ("IMPORTER_CHECKSUM", "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            ("IMPORTER_ACCESS_KEY_ID", "u"),
            ("IMPORTER_SECRET_KEY", "p"),
            ("IMPORTER_EXTRA_HEADER_1", "X-B: 2"),
            ("IMPORTER_EXTRA_HEADER_0", "X-A: 1"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(c.source, PodSource::Http(_)));
        assert_eq!(c.image_size, Some(1 << 30));
        assert_eq!(c.overhead, 0.055);
        assert!(c.options.insecure && !c.preallocation && c.checksum.is_some());
        assert_eq!(c.options.basic_auth, Some(("u".into(), "p".into())));
        assert_eq!(c.options.headers, vec![("X-A".into(), "1".into()), ("X-B".into(), "2".into())]);
        assert_eq!(c.paths.data_dir, PathBuf::from("/data"));
        assert_eq!(c.paths.termination_log, PathBuf::from("/dev/termination-log"));
    }

    #[test]
    fn refuses_bad_environment() {
        let e = |p: &[(&str, &str)]| PodConfig::from_env(&env(p)).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(e(&[("IMPORTER_SOURCE", "gcs")]), "Unknown data source: gcs");
        assert_eq!(
            e(&[("IMPORTER_SOURCE", "none"), ("IMPORTER_CONTENTTYPE", "archive")]),
            "Cannot create empty disk with content type archive"
        );
        assert!(e(&[("IMPORTER_SOURCE", "none"), ("PREALLOCATION", "maybe")]).contains("PREALLOCATION"));
        assert!(e(&[("IMPORTER_ENDPOINT", "ftp://x")]).contains("scheme"));
    }

    #[test]
    fn sizing_formulas() {
        // 1 GiB with 5.5% overhead: ceil(2^30 / 1.055) = 1017780625 → rounded down to 970 MiB.
        assert_eq!(usable_space(0.055, 1 << 30), 970 * MIB);
        assert_eq!(usable_space(0.0, (5 << 20) + 7), 5 * MIB);
    }

    #[test]
    fn labels_from_image_env() {
        let l = env_labels(&[
            "INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small".into(),
            "TEST_KUBEVIRT_IO_TEST=testvalue".into(),
            "PATH=/bin".into(),
        ]);
        assert_eq!(l.get("instancetype.kubevirt.io/default-instancetype").map(String::as_str), Some("u1.small"));
        assert_eq!(l.get("test.kubevirt.io/test").map(String::as_str), Some("testvalue"));
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn termination_protocol() {
        let ok = terminate(
            Ok(Done { preallocated: true, image_env: vec!["A_KUBEVIRT_IO_B=c".into()], blank: false }),
            false,
        );
        assert_eq!(ok.exit_code, 0);
        assert_eq!(
            ok.message,
            r#"{"scratchSpaceRequired":false,"preallocationApplied":true,"labels":{"a.kubevirt.io/b":"c"},"message":"Import Complete"}"#
        );
        let mismatch =
            terminate(Err(Error::ChecksumMismatch { expected: "md5:00".into(), calculated: "md5:11".into() }), false);
        assert_eq!(mismatch.exit_code, 0);
        assert_eq!(
            mismatch.message,
            r#"{"message":"Unable to process data: checksum validation failed: checksum mismatch: expected md5:00, calculated md5:11"}"#
        );
        let conn = terminate(
            Err(Error::Connect {
                kind: "http",
                url: "http://h/x".into(),
                message: "expected status code 200, got 404. Status: 404 Not Found".into(),
            }),
            false,
        );
        assert_eq!((conn.exit_code, conn.message.starts_with("Unable to connect to http data source: ")), (1, true));
        let big = terminate(Err(Error::TargetTooSmall { virtual_size: 10, available: 5 }), false);
        assert!(big.message.starts_with(
            "Unable to process data: virtual image size 10 is larger than the reported available storage 5"
        ));
        let blank = terminate(Ok(Done { blank: true, ..Done::default() }), false);
        assert_eq!(blank.message, r#"{"preallocationApplied":false,"message":"Import Complete"}"#);
        let scratch = terminate(Err(Error::ScratchRequired("x".into())), false);
        assert_eq!((scratch.exit_code, scratch.message.contains(r#""scratchSpaceRequired":true"#)), (0, true));
    }
}
