//! The importer pod's configuration: CDI's environment ([`ImporterEnv`], the contract the controller writes, plus
//! [`OvaDiskEnv`]: which disk of an OVA) validated into a [`PodConfig`] — the source URL, checksum and header syntax are checked here — plus the
//! pod's fixed paths, which tests may move (`IMPORTER_DATA_DIR` = `/data`, `IMPORTER_BLOCK_DEVICE` =
//! `/dev/cdi-block-volume`, `IMPORTER_SCRATCH_DIR` = `/scratch`, `IMPORTER_TERMINATION_LOG` =
//! `/dev/termination-log`, `IMPORTER_EXTRA_HEADERS_DIR` = `/extraheaders`, `IMPORTER_METRICS_ADDR` =
//! `0.0.0.0:8443`).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contracts::cdi::env::{Credentials, EnvError, ImporterEnv, OvaDiskEnv, var};
use contracts::cdi::{ContentType, SourceKind};

use crate::Error;
use crate::checksum::ExpectedChecksum;
use crate::source::http::parse_header;
use crate::source::{SourceLocation, SourceOptions};

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

impl PodSource {
    /// Where the pipeline reads (a blank image reads nothing).
    pub fn location(&self) -> SourceLocation {
        match self {
            PodSource::Http(u) => SourceLocation::Http(u.clone()),
            PodSource::S3(u) => SourceLocation::S3 { url: u.clone(), endpoint: None },
            PodSource::Registry(r) => SourceLocation::Registry(r.clone()),
            PodSource::Blank => SourceLocation::File(PathBuf::from("/dev/null")),
        }
    }
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

/// `env[name]` as a path when set and non-empty, else `default`.
fn path_var(env: &BTreeMap<String, String>, name: &str, default: &str) -> PathBuf {
    PathBuf::from(env.get(name).filter(|v| !v.is_empty()).map_or(default, |v| v.as_str()))
}

impl PodPaths {
    /// The termination message file alone (`IMPORTER_TERMINATION_LOG`, default `/dev/termination-log`): known
    /// even when the rest of the environment is unusable, so that the failure can be reported there.
    pub fn termination_log(env: &BTreeMap<String, String>) -> PathBuf {
        path_var(env, "IMPORTER_TERMINATION_LOG", "/dev/termination-log")
    }

    /// The paths, with the test overrides from `env`.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<PodPaths, EnvError> {
        let path = |name: &str, default: &str| path_var(env, name, default);
        let addr =
            env.get("IMPORTER_METRICS_ADDR").map(|v| v.trim()).filter(|v| !v.is_empty()).unwrap_or("0.0.0.0:8443");
        Ok(PodPaths {
            data_dir: path("IMPORTER_DATA_DIR", contracts::cdi::consts::DATA_DIR),
            block_device: path("IMPORTER_BLOCK_DEVICE", contracts::cdi::consts::BLOCK_DEVICE),
            scratch_dir: path("IMPORTER_SCRATCH_DIR", contracts::cdi::consts::SCRATCH_DIR),
            termination_log: Self::termination_log(env),
            extra_headers_dir: path("IMPORTER_EXTRA_HEADERS_DIR", "/extraheaders"),
            metrics_addr: addr
                .parse()
                .map_err(|e| EnvError::invalid("IMPORTER_METRICS_ADDR", format!("{addr:?}: {e}")))?,
        })
    }
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

impl PodConfig {
    /// Reads CDI's importer environment. Extra headers from files are read from `extra_headers_dir` later.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<PodConfig, EnvError> {
        let e = ImporterEnv::from_env(env)?;
        let endpoint = &e.endpoint;
        let url = |what: &'static str| {
            reqwest::Url::parse(endpoint)
                .map_err(|err| EnvError::invalid(var::IMPORTER_ENDPOINT, format!("{endpoint:?} for {what}: {err}")))
        };
        let source = match &e.source {
            SourceKind::Http => {
                let u = url("http")?;
                if !matches!(u.scheme(), "http" | "https") {
                    return Err(EnvError::invalid(
                        var::IMPORTER_ENDPOINT,
                        format!("{endpoint:?}: scheme must be http or https"),
                    ));
                }
                PodSource::Http(u)
            }
            SourceKind::S3 => PodSource::S3(url("s3")?),
            SourceKind::Registry => PodSource::Registry(
                endpoint
                    .strip_prefix("docker://")
                    .ok_or_else(|| {
                        EnvError::invalid(
                            var::IMPORTER_ENDPOINT,
                            format!("{endpoint:?}: registry sources need docker://"),
                        )
                    })?
                    .to_string(),
            ),
            SourceKind::Blank => PodSource::Blank,
            SourceKind::Unsupported(s) => return Err(EnvError::UnknownSource(s.clone())),
        };
        let checksum = e
            .checksum
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(|c| c.parse::<ExpectedChecksum>().map_err(|err| EnvError::invalid(var::IMPORTER_CHECKSUM, err)))
            .transpose()?;
        let headers = e
            .extra_headers
            .iter()
            .map(|line| {
                parse_header(line).map_err(|err| EnvError::invalid("IMPORTER_EXTRA_HEADER_<n>", err.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let basic_auth = match e.credentials {
            Some(Credentials::Values { access_key_id, secret_key }) => Some((access_key_id, secret_key)),
            Some(Credentials::FromSecret(_)) | None => None,
        };
        Ok(PodConfig {
            source,
            content: e.content_type,
            image_size: e.image_size.map(|q| q.bytes()),
            owner_uid: e.owner_uid,
            overhead: e.filesystem_overhead,
            preallocation: e.preallocation,
            checksum,
            options: SourceOptions {
                cert_dir: e.cert_dir.map(PathBuf::from),
                insecure: e.insecure_tls,
                headers,
                basic_auth,
                platform_architecture: e.registry_architecture,
                ova_disk: OvaDiskEnv::from_env(env).map(|d| d.0),
                // CDI cancels a transfer after 10 minutes without data; we retry stalls sooner, then give up.
                stall_timeout: Duration::from_secs(120),
                ..SourceOptions::default()
            },
            paths: PodPaths::from_env(env)?,
        })
    }
}

/// Reads secret extra headers: every non-dot file in `<dir>/<n>/` holds one header line.
pub fn secret_headers(dir: &Path) -> Result<Vec<(String, String)>, Error> {
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
            ("IMPORTER_OVA_DISK", "vmdisk2"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(c.source, PodSource::Http(_)));
        assert_eq!(c.image_size, Some(1 << 30));
        assert_eq!(c.overhead, 0.055);
        assert!(c.options.insecure && !c.preallocation && c.checksum.is_some());
        assert_eq!(c.options.basic_auth, Some(("u".into(), "p".into())));
        assert_eq!(c.options.headers, vec![("X-A".into(), "1".into()), ("X-B".into(), "2".into())]);
        assert_eq!(c.options.ova_disk.as_deref(), Some("vmdisk2"));
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
}
