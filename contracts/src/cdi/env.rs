//! The environments of CDI's worker pods (`specs/cdi.md` §2.2), typed: [`ImporterEnv`] (importer pod),
//! [`UploadServerEnv`] (upload server pod) and [`CloneSourceEnv`] (the source side of a host-assisted clone).
//!
//! Each has `to_env()`, used by the controller's pod builder, and `from_env()`, used by the worker at start, so a
//! variable's name and spelling exist only here. `from_env` is strict where CDI's workers are (an unparsable
//! `PREALLOCATION` ends the pod with exit 1) and trims values; an empty value counts as absent.

use std::collections::BTreeMap;

use super::ContentType;
use super::claim::SourceKind;
use super::sizing::{format_overhead, parse_worker_overhead};
use crate::quantity::ByteQuantity;

/// The variables, by name.
pub mod var {
    /// Importer: source kind (`http`, `s3`, `registry`, `none`).
    pub const IMPORTER_SOURCE: &str = "IMPORTER_SOURCE";
    /// Importer: source URL.
    pub const IMPORTER_ENDPOINT: &str = "IMPORTER_ENDPOINT";
    /// Importer: `kubevirt` or `archive`.
    pub const IMPORTER_CONTENTTYPE: &str = "IMPORTER_CONTENTTYPE";
    /// Importer: the PVC's requested size (a quantity).
    pub const IMPORTER_IMAGE_SIZE: &str = "IMPORTER_IMAGE_SIZE";
    /// Workers: label of the progress metric.
    pub const OWNER_UID: &str = "OWNER_UID";
    /// Workers: filesystem overhead fraction.
    pub const FILESYSTEM_OVERHEAD: &str = "FILESYSTEM_OVERHEAD";
    /// Importer: skip TLS verification.
    pub const INSECURE_TLS: &str = "INSECURE_TLS";
    /// Workers: preallocate the target.
    pub const PREALLOCATION: &str = "PREALLOCATION";
    /// Importer: `TRYNONE` after an OOM kill (direct I/O).
    pub const CACHE_MODE: &str = "CACHE_MODE";
    /// Importer: expected checksum `algo:hex`.
    pub const IMPORTER_CHECKSUM: &str = "IMPORTER_CHECKSUM";
    /// Importer: architecture to pick from a manifest list.
    pub const IMPORTER_REGISTRY_IMAGE_ARCHITECTURE: &str = "IMPORTER_REGISTRY_IMAGE_ARCHITECTURE";
    /// Importer: access key / user name.
    pub const IMPORTER_ACCESS_KEY_ID: &str = "IMPORTER_ACCESS_KEY_ID";
    /// Importer: secret key / password.
    pub const IMPORTER_SECRET_KEY: &str = "IMPORTER_SECRET_KEY";
    /// Importer: directory of CA certificates.
    pub const IMPORTER_CERT_DIR: &str = "IMPORTER_CERT_DIR";
    /// Importer: prefix of `IMPORTER_EXTRA_HEADER_<n>` (complete header lines).
    pub const IMPORTER_EXTRA_HEADER_PREFIX: &str = "IMPORTER_EXTRA_HEADER_";
    /// Importer: HTTP proxy (lower-case, as CDI sets it).
    pub const HTTP_PROXY: &str = "http_proxy";
    /// Importer: HTTPS proxy.
    pub const HTTPS_PROXY: &str = "https_proxy";
    /// Importer: proxy exceptions.
    pub const NO_PROXY: &str = "no_proxy";
    /// Importer: which disk of an OVA to import (see [`super::OvaDiskEnv`]).
    pub const IMPORTER_OVA_DISK: &str = "IMPORTER_OVA_DISK";
    /// Upload server: the PVC's requested size (a quantity).
    pub const UPLOAD_IMAGE_SIZE: &str = "UPLOAD_IMAGE_SIZE";
    /// Upload server: TLS key file.
    pub const TLS_KEY_FILE: &str = "TLS_KEY_FILE";
    /// Upload server: TLS certificate file.
    pub const TLS_CERT_FILE: &str = "TLS_CERT_FILE";
    /// Upload server: CA file client certificates must chain to.
    pub const CLIENT_CERT_FILE: &str = "CLIENT_CERT_FILE";
    /// Upload server: required client certificate common name.
    pub const CLIENT_NAME: &str = "CLIENT_NAME";
    /// Upload server: target file or block device.
    pub const DESTINATION: &str = "DESTINATION";
    /// Upload server: RFC 3339 time after which an idle server exits.
    pub const DEADLINE: &str = "DEADLINE";
    /// Upload server: listen address (default `0.0.0.0`).
    pub const LISTEN_ADDRESS: &str = "LISTEN_ADDRESS";
    /// Upload server: listen port (default 8443).
    pub const LISTEN_PORT: &str = "LISTEN_PORT";
    /// Clone source: the image to serve.
    pub const SERVE_PATH: &str = "SERVE_PATH";
    /// Clone source: file holding the bearer token.
    pub const SERVE_TOKEN_FILE: &str = "SERVE_TOKEN_FILE";
}

/// Why a worker's environment is unusable (the termination message, exit 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// `IMPORTER_SOURCE` names a source this importer does not read from.
    #[error("Unknown data source: {0}")]
    UnknownSource(String),
    /// Blank image with archive content.
    #[error("Cannot create empty disk with content type archive")]
    BlankArchive,
    /// A malformed or missing variable.
    #[error("invalid {name}: {message}")]
    Invalid {
        /// Variable name.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
}

impl EnvError {
    /// `invalid <name>: <message>`.
    pub fn invalid(name: &'static str, message: impl Into<String>) -> EnvError {
        EnvError::Invalid { name, message: message.into() }
    }
}

/// A process environment, as read at start.
pub type Environment = BTreeMap<String, String>;

/// Trimmed, non-empty value of `k`.
fn get(env: &Environment, k: &str) -> Option<String> {
    env.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

fn quantity(env: &Environment, k: &'static str) -> Result<Option<ByteQuantity>, EnvError> {
    get(env, k).map(|q| ByteQuantity::parse(&q).map_err(|e| EnvError::invalid(k, e.to_string()))).transpose()
}

fn overhead(env: &Environment) -> Result<f64, EnvError> {
    parse_worker_overhead(get(env, var::FILESYSTEM_OVERHEAD).as_deref())
        .map_err(|e| EnvError::invalid(var::FILESYSTEM_OVERHEAD, e))
}

fn preallocation(env: &Environment) -> Result<bool, EnvError> {
    match get(env, var::PREALLOCATION) {
        None => Ok(false),
        Some(v) => {
            v.parse::<bool>().map_err(|_| EnvError::invalid(var::PREALLOCATION, format!("{v:?} (true or false)")))
        }
    }
}

/// Where a variable's value comes from in a pod spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvValue {
    /// A literal value.
    Literal(String),
    /// A key of a Secret (required: the pod does not start without it).
    SecretKey {
        /// The Secret's name.
        secret: String,
        /// The key.
        key: String,
    },
}

/// One variable of a container's environment, as the controller puts it in the pod spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvEntry {
    /// The variable's name.
    pub name: String,
    /// Its value.
    pub value: EnvValue,
}

fn value(name: &str, value: impl Into<String>) -> EnvEntry {
    EnvEntry { name: name.into(), value: EnvValue::Literal(value.into()) }
}

fn secret_value(name: &str, secret: &str, key: &str) -> EnvEntry {
    EnvEntry { name: name.into(), value: EnvValue::SecretKey { secret: secret.into(), key: key.into() } }
}

/// Credentials of an import source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// In the pod spec: both variables come from this Secret's keys `accessKeyId` and `secretKey`.
    FromSecret(String),
    /// In the running pod: the resolved values.
    Values {
        /// Access key id / user name.
        access_key_id: String,
        /// Secret key / password (may be empty).
        secret_key: String,
    },
}

/// Proxy settings of an importer (`CDIConfig.status.importProxy`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// `http_proxy`.
    pub http_proxy: Option<String>,
    /// `https_proxy`.
    pub https_proxy: Option<String>,
    /// `no_proxy`.
    pub no_proxy: Option<String>,
}

/// The importer pod's environment (`specs/cdi.md` §2.2).
#[derive(Debug, Clone, PartialEq)]
pub struct ImporterEnv {
    /// `IMPORTER_SOURCE` (default `http`).
    pub source: SourceKind,
    /// `IMPORTER_ENDPOINT`.
    pub endpoint: String,
    /// `IMPORTER_CONTENTTYPE` (default `kubevirt`).
    pub content_type: ContentType,
    /// `IMPORTER_IMAGE_SIZE`: the PVC's request as written.
    pub image_size: Option<ByteQuantity>,
    /// `OWNER_UID`.
    pub owner_uid: String,
    /// `FILESYSTEM_OVERHEAD` (0 for block volumes).
    pub filesystem_overhead: f64,
    /// `INSECURE_TLS`.
    pub insecure_tls: bool,
    /// `PREALLOCATION`.
    pub preallocation: bool,
    /// `CACHE_MODE=TRYNONE`: write with direct I/O (after an OOM kill).
    pub direct_io: bool,
    /// `IMPORTER_CHECKSUM` (`algo:hex`, validated by the importer).
    pub checksum: Option<String>,
    /// `IMPORTER_REGISTRY_IMAGE_ARCHITECTURE`.
    pub registry_architecture: Option<String>,
    /// `IMPORTER_ACCESS_KEY_ID` / `IMPORTER_SECRET_KEY`.
    pub credentials: Option<Credentials>,
    /// `IMPORTER_CERT_DIR`.
    pub cert_dir: Option<String>,
    /// `IMPORTER_EXTRA_HEADER_<n>`, in `n` order.
    pub extra_headers: Vec<String>,
    /// `http_proxy`, `https_proxy`, `no_proxy`.
    pub proxy: ProxyEnv,
}

impl ImporterEnv {
    /// The container's `env` (CDI's order; absent options are not set).
    pub fn to_env(&self) -> Vec<EnvEntry> {
        let mut envs = vec![
            value(var::IMPORTER_SOURCE, self.source.as_str()),
            value(var::IMPORTER_ENDPOINT, &self.endpoint),
            value(var::IMPORTER_CONTENTTYPE, self.content_type.as_str()),
            value(var::IMPORTER_IMAGE_SIZE, self.image_size.as_ref().map(ByteQuantity::as_str).unwrap_or_default()),
            value(var::OWNER_UID, &self.owner_uid),
            value(var::FILESYSTEM_OVERHEAD, format_overhead(self.filesystem_overhead)),
            value(var::INSECURE_TLS, self.insecure_tls.to_string()),
            value(var::PREALLOCATION, self.preallocation.to_string()),
        ];
        if self.direct_io {
            envs.push(value(var::CACHE_MODE, "TRYNONE"));
        }
        if let Some(c) = &self.checksum {
            envs.push(value(var::IMPORTER_CHECKSUM, c));
        }
        if let Some(a) = &self.registry_architecture {
            envs.push(value(var::IMPORTER_REGISTRY_IMAGE_ARCHITECTURE, a));
        }
        let p = &self.proxy;
        for (k, v) in
            [(var::HTTP_PROXY, &p.http_proxy), (var::HTTPS_PROXY, &p.https_proxy), (var::NO_PROXY, &p.no_proxy)]
        {
            if let Some(v) = v {
                envs.push(value(k, v));
            }
        }
        match &self.credentials {
            Some(Credentials::FromSecret(s)) => {
                envs.push(secret_value(var::IMPORTER_ACCESS_KEY_ID, s, "accessKeyId"));
                envs.push(secret_value(var::IMPORTER_SECRET_KEY, s, "secretKey"));
            }
            Some(Credentials::Values { access_key_id, secret_key }) => {
                envs.push(value(var::IMPORTER_ACCESS_KEY_ID, access_key_id));
                envs.push(value(var::IMPORTER_SECRET_KEY, secret_key));
            }
            None => {}
        }
        if let Some(d) = &self.cert_dir {
            envs.push(value(var::IMPORTER_CERT_DIR, d));
        }
        for (i, h) in self.extra_headers.iter().enumerate() {
            envs.push(value(&format!("{}{i}", var::IMPORTER_EXTRA_HEADER_PREFIX), h));
        }
        envs
    }

    /// Reads the importer's environment. The source kind and content type are checked here; the endpoint,
    /// checksum and header syntax are the importer's to validate.
    pub fn from_env(env: &Environment) -> Result<ImporterEnv, EnvError> {
        let content_type = match get(env, var::IMPORTER_CONTENTTYPE).as_deref() {
            None | Some("kubevirt") => ContentType::Kubevirt,
            Some("archive") => ContentType::Archive,
            Some(other) => {
                return Err(EnvError::invalid(var::IMPORTER_CONTENTTYPE, format!("{other:?} (kubevirt or archive)")));
            }
        };
        let source = SourceKind::parse(get(env, var::IMPORTER_SOURCE).as_deref().unwrap_or("http"));
        if let SourceKind::Unsupported(s) = source {
            return Err(EnvError::UnknownSource(s));
        }
        if source == SourceKind::Blank && content_type == ContentType::Archive {
            return Err(EnvError::BlankArchive);
        }
        let mut numbered: Vec<(u64, &String)> = env
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(var::IMPORTER_EXTRA_HEADER_PREFIX)?.parse().ok()?, v)))
            .collect();
        numbered.sort();
        Ok(ImporterEnv {
            source,
            endpoint: get(env, var::IMPORTER_ENDPOINT).unwrap_or_default(),
            content_type,
            image_size: quantity(env, var::IMPORTER_IMAGE_SIZE)?,
            owner_uid: get(env, var::OWNER_UID).unwrap_or_default(),
            filesystem_overhead: overhead(env)?,
            insecure_tls: get(env, var::INSECURE_TLS).is_some_and(|v| v.eq_ignore_ascii_case("true")),
            preallocation: preallocation(env)?,
            direct_io: get(env, var::CACHE_MODE).is_some_and(|v| v == "TRYNONE"),
            checksum: get(env, var::IMPORTER_CHECKSUM),
            registry_architecture: get(env, var::IMPORTER_REGISTRY_IMAGE_ARCHITECTURE),
            credentials: get(env, var::IMPORTER_ACCESS_KEY_ID).map(|access_key_id| Credentials::Values {
                access_key_id,
                secret_key: get(env, var::IMPORTER_SECRET_KEY).unwrap_or_default(),
            }),
            cert_dir: get(env, var::IMPORTER_CERT_DIR),
            extra_headers: numbered.into_iter().map(|(_, v)| v.clone()).collect(),
            proxy: ProxyEnv {
                http_proxy: get(env, var::HTTP_PROXY),
                https_proxy: get(env, var::HTTPS_PROXY),
                no_proxy: get(env, var::NO_PROXY),
            },
        })
    }
}

/// `IMPORTER_OVA_DISK`: the disk of an OVA source the importer converts, named by its `ovf:diskId`, its file's
/// `ovf:href` or its file's `ovf:id`; absent, the first disk of the OVF's DiskSection. Not part of CDI's
/// contract (CDI does not import OVAs); a separate entry until the controller writes it (then it joins
/// [`ImporterEnv`]). An empty value counts as absent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OvaDiskEnv(pub String);

impl OvaDiskEnv {
    /// The container's `env` entry.
    pub fn to_env(&self) -> EnvEntry {
        value(var::IMPORTER_OVA_DISK, &self.0)
    }

    /// Reads the variable (trimmed; empty counts as absent).
    pub fn from_env(env: &Environment) -> Option<OvaDiskEnv> {
        get(env, var::IMPORTER_OVA_DISK).map(OvaDiskEnv)
    }
}

/// The upload server pod's environment (`specs/cdi.md` §2.2, §4.3).
#[derive(Debug, Clone, PartialEq)]
pub struct UploadServerEnv {
    /// `UPLOAD_IMAGE_SIZE`: the PVC's request as written.
    pub image_size: Option<ByteQuantity>,
    /// `TLS_KEY_FILE` (required).
    pub tls_key_file: String,
    /// `TLS_CERT_FILE` (required).
    pub tls_cert_file: String,
    /// `CLIENT_CERT_FILE` (required): the CA client certificates must chain to.
    pub client_cert_file: String,
    /// `CLIENT_NAME` (default [`crate::cdi::consts::UPLOAD_CLIENT_NAME`]).
    pub client_name: String,
    /// `DESTINATION` (default `/data/disk.img`).
    pub destination: String,
    /// `DEADLINE` (RFC 3339, validated by the server).
    pub deadline: Option<String>,
    /// `LISTEN_ADDRESS` (default `0.0.0.0`; only tests set it).
    pub listen_address: Option<String>,
    /// `LISTEN_PORT` (default 8443).
    pub listen_port: u16,
    /// `PREALLOCATION`.
    pub preallocation: bool,
    /// `FILESYSTEM_OVERHEAD` (0 for block volumes).
    pub filesystem_overhead: f64,
    /// `OWNER_UID`.
    pub owner_uid: String,
}

impl UploadServerEnv {
    /// The container's `env` (CDI's order).
    pub fn to_env(&self) -> Vec<EnvEntry> {
        let mut envs = vec![
            value(var::UPLOAD_IMAGE_SIZE, self.image_size.as_ref().map(ByteQuantity::as_str).unwrap_or_default()),
            value(var::TLS_KEY_FILE, &self.tls_key_file),
            value(var::TLS_CERT_FILE, &self.tls_cert_file),
            value(var::CLIENT_CERT_FILE, &self.client_cert_file),
            value(var::CLIENT_NAME, &self.client_name),
            value(var::DESTINATION, &self.destination),
            value(var::DEADLINE, self.deadline.clone().unwrap_or_default()),
        ];
        if let Some(a) = &self.listen_address {
            envs.push(value(var::LISTEN_ADDRESS, a));
        }
        envs.extend([
            value(var::LISTEN_PORT, self.listen_port.to_string()),
            value(var::PREALLOCATION, self.preallocation.to_string()),
            value(var::FILESYSTEM_OVERHEAD, format_overhead(self.filesystem_overhead)),
            value(var::OWNER_UID, &self.owner_uid),
        ]);
        envs
    }

    /// Reads the upload server's environment.
    pub fn from_env(env: &Environment) -> Result<UploadServerEnv, EnvError> {
        let need = |k: &'static str| get(env, k).ok_or_else(|| EnvError::invalid(k, "not set"));
        let port = get(env, var::LISTEN_PORT).unwrap_or_else(|| String::from("8443"));
        Ok(UploadServerEnv {
            listen_port: port.parse().map_err(|_| EnvError::invalid(var::LISTEN_PORT, format!("{port:?}")))?,
            listen_address: get(env, var::LISTEN_ADDRESS),
            image_size: quantity(env, var::UPLOAD_IMAGE_SIZE)?,
            filesystem_overhead: overhead(env)?,
            preallocation: preallocation(env)?,
            deadline: get(env, var::DEADLINE),
            tls_cert_file: need(var::TLS_CERT_FILE)?,
            tls_key_file: need(var::TLS_KEY_FILE)?,
            client_cert_file: need(var::CLIENT_CERT_FILE)?,
            client_name: get(env, var::CLIENT_NAME)
                .unwrap_or_else(|| crate::cdi::consts::UPLOAD_CLIENT_NAME.to_owned()),
            destination: get(env, var::DESTINATION)
                .unwrap_or_else(|| format!("{}/disk.img", crate::cdi::consts::DATA_DIR)),
            owner_uid: get(env, var::OWNER_UID).unwrap_or_default(),
        })
    }
}

/// The clone-source pod's environment (`importer serve`): it serves `path` read-only to holders of the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneSourceEnv {
    /// `SERVE_PATH`: the source volume's image (file or block device).
    pub path: String,
    /// `SERVE_TOKEN_FILE`: file holding the bearer token.
    pub token_file: String,
    /// `OWNER_UID`: the clone target's owner (progress metric label).
    pub owner_uid: String,
}

impl CloneSourceEnv {
    /// The container's `env`.
    pub fn to_env(&self) -> Vec<EnvEntry> {
        vec![
            value(var::SERVE_PATH, &self.path),
            value(var::SERVE_TOKEN_FILE, &self.token_file),
            value(var::OWNER_UID, &self.owner_uid),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Environment {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    /// The literal environment a pod would see for `envs` (secret references resolved to `<secret>/<key>`).
    fn resolved(envs: &[EnvEntry]) -> Environment {
        envs.iter()
            .map(|e| {
                let v = match &e.value {
                    EnvValue::Literal(v) => v.clone(),
                    EnvValue::SecretKey { secret, key } => format!("{secret}/{key}"),
                };
                (e.name.clone(), v)
            })
            .collect()
    }

    fn importer() -> ImporterEnv {
        ImporterEnv {
            source: SourceKind::Http,
            endpoint: "https://h/x.qcow2".into(),
            content_type: ContentType::Kubevirt,
            image_size: ByteQuantity::parse("1Gi").ok(),
            owner_uid: "abc".into(),
            filesystem_overhead: 0.055,
            insecure_tls: true,
            preallocation: false,
            direct_io: true,
            checksum: Some("sha256:00".into()),
            registry_architecture: None,
            credentials: Some(Credentials::FromSecret("creds".into())),
            cert_dir: Some("/certs".into()),
            extra_headers: vec!["X-A: 1".into(), "X-B: 2".into()],
            proxy: ProxyEnv { https_proxy: Some("http://p:3128".into()), ..Default::default() },
        }
    }

    #[test]
    fn importer_env_round_trips_with_cdis_names_and_order() {
        let want = importer();
        let envs = want.to_env();
        let names: Vec<&str> = envs.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "IMPORTER_SOURCE",
                "IMPORTER_ENDPOINT",
                "IMPORTER_CONTENTTYPE",
                "IMPORTER_IMAGE_SIZE",
                "OWNER_UID",
                "FILESYSTEM_OVERHEAD",
                "INSECURE_TLS",
                "PREALLOCATION",
                "CACHE_MODE",
                "IMPORTER_CHECKSUM",
                "https_proxy",
                "IMPORTER_ACCESS_KEY_ID",
                "IMPORTER_SECRET_KEY",
                "IMPORTER_CERT_DIR",
                "IMPORTER_EXTRA_HEADER_0",
                "IMPORTER_EXTRA_HEADER_1",
            ]
        );
        let got = ImporterEnv::from_env(&resolved(&envs)).unwrap_or_else(|e| panic!("{e}"));
        let creds =
            Credentials::Values { access_key_id: "creds/accessKeyId".into(), secret_key: "creds/secretKey".into() };
        assert_eq!(got, ImporterEnv { credentials: Some(creds), ..want });
        assert_eq!(resolved(&envs)["FILESYSTEM_OVERHEAD"], "0.055");
        assert_eq!(resolved(&envs)["IMPORTER_IMAGE_SIZE"], "1Gi");
    }

    #[test]
    fn importer_env_is_strict_where_cdi_is() {
        let e = |p: &[(&str, &str)]| ImporterEnv::from_env(&env(p)).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(e(&[("IMPORTER_SOURCE", "gcs")]), "Unknown data source: gcs");
        assert_eq!(
            e(&[("IMPORTER_SOURCE", "none"), ("IMPORTER_CONTENTTYPE", "archive")]),
            "Cannot create empty disk with content type archive"
        );
        assert!(e(&[("PREALLOCATION", "maybe")]).contains("PREALLOCATION"));
        assert!(e(&[("FILESYSTEM_OVERHEAD", "2")]).contains("FILESYSTEM_OVERHEAD"));
        assert!(e(&[("IMPORTER_IMAGE_SIZE", "1Xi")]).contains("IMPORTER_IMAGE_SIZE"));
        assert!(e(&[("IMPORTER_CONTENTTYPE", "iso")]).contains("IMPORTER_CONTENTTYPE"));
        let minimal = ImporterEnv::from_env(&env(&[("IMPORTER_ENDPOINT", " http://h/x "), ("INSECURE_TLS", "TRUE")]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(minimal.source, SourceKind::Http);
        assert_eq!(minimal.endpoint, "http://h/x");
        assert!(minimal.insecure_tls && !minimal.preallocation && minimal.filesystem_overhead == 0.0);
        assert_eq!(minimal.credentials, None);
    }

    #[test]
    fn upload_server_env_round_trips() {
        let want = UploadServerEnv {
            image_size: ByteQuantity::parse("2Gi").ok(),
            tls_key_file: "/etc/tls/tls.key".into(),
            tls_cert_file: "/etc/tls/tls.crt".into(),
            client_cert_file: "/etc/tls/ca.crt".into(),
            client_name: crate::cdi::consts::UPLOAD_CLIENT_NAME.into(),
            destination: "/dev/cdi-block-volume".into(),
            deadline: Some("2026-12-01T10:00:00Z".into()),
            listen_address: None,
            listen_port: 8443,
            preallocation: true,
            filesystem_overhead: 0.0,
            owner_uid: "u".into(),
        };
        let envs = resolved(&want.to_env());
        assert_eq!(envs["FILESYSTEM_OVERHEAD"], "0");
        assert_eq!(UploadServerEnv::from_env(&envs), Ok(want));
        let missing = UploadServerEnv::from_env(&env(&[("TLS_KEY_FILE", "k"), ("CLIENT_CERT_FILE", "a")]));
        assert_eq!(missing.err().map(|e| e.to_string()).as_deref(), Some("invalid TLS_CERT_FILE: not set"));
        let defaults = UploadServerEnv::from_env(&env(&[
            ("TLS_KEY_FILE", "k"),
            ("TLS_CERT_FILE", "c"),
            ("CLIENT_CERT_FILE", "a"),
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((defaults.listen_port, defaults.destination.as_str()), (8443, "/data/disk.img"));
    }

    #[test]
    fn ova_disk_round_trip() {
        let e = OvaDiskEnv(String::from("vmdisk2")).to_env();
        assert_eq!(e, EnvEntry { name: var::IMPORTER_OVA_DISK.into(), value: EnvValue::Literal("vmdisk2".into()) });
        let env: Environment = [(var::IMPORTER_OVA_DISK.to_string(), String::from(" vmdisk2 "))].into();
        assert_eq!(OvaDiskEnv::from_env(&env), Some(OvaDiskEnv(String::from("vmdisk2"))));
        let empty: Environment = [(var::IMPORTER_OVA_DISK.to_string(), String::from(" "))].into();
        assert_eq!(OvaDiskEnv::from_env(&empty), None);
    }
}
