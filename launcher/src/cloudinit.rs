//! cloud-init data disks (contract §2.3): the user data and network data of a `cloudInitNoCloud` or
//! `cloudInitConfigDrive` volume, from the spec or from the Secrets the controller mounts, written with the
//! meta-data onto an ISO the guest's cloud-init finds by its volume label.
//!
//! ```text
//! NoCloud      label cidata     user-data, meta-data (instance-id: <name>.<namespace>, local-hostname),
//!                               network-config (when given)
//! ConfigDrive  label config-2   openstack/latest/{user_data, meta_data.json, network_data.json (when given)}
//! ```
//!
//! [`resolve`] reads the sources, [`files()`] lays out the disk (pure), [`build_iso`] runs `xorrisofs`.

use std::io;
use std::path::{Path, PathBuf};

use base64::Engine;
use crds::kubevirt::volume::CloudInitSource;

use crate::files;
use crate::tool;

/// Which layout the guest looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// cloud-init's NoCloud datasource.
    NoCloud,
    /// The OpenStack config drive.
    ConfigDrive,
}

impl Flavor {
    /// The ISO's volume label.
    pub fn volume_id(self) -> &'static str {
        match self {
            Flavor::NoCloud => "cidata",
            Flavor::ConfigDrive => "config-2",
        }
    }
}

/// What the meta-data says about the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The VMI's name.
    pub name: String,
    /// The VMI's namespace.
    pub namespace: String,
    /// The guest's hostname (`spec.hostname`, else the VMI's name).
    pub hostname: String,
    /// The config drive's `uuid` (the firmware UUID, else the VMI's UID).
    pub uuid: String,
}

impl Instance {
    /// cloud-init's instance ID: `<name>.<namespace>`.
    pub fn instance_id(&self) -> String {
        format!("{}.{}", self.name, self.namespace)
    }
}

/// The payloads of one volume.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Data {
    /// The user data (empty when the volume gives none).
    pub user_data: Vec<u8>,
    /// The network data, when the volume gives some.
    pub network_data: Option<Vec<u8>>,
}

/// Why a cloud-init disk cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// More than one source for the same payload (admission refuses these).
    #[error("{what} is given more than once ({sources})")]
    TwoSources {
        /// `user data` or `network data`.
        what: &'static str,
        /// The fields that give it.
        sources: String,
    },
    /// A `*Base64` field that does not decode.
    #[error("{field} is not valid base64")]
    Base64 {
        /// The field.
        field: &'static str,
        /// Why.
        #[source]
        source: base64::DecodeError,
    },
    /// The mounted Secret lacks both keys.
    #[error("the {what} Secret {secret:?} (mounted at {dir}) has neither key {} nor {}", keys[0], keys[1])]
    MissingKey {
        /// `user data` or `network data`.
        what: &'static str,
        /// The Secret's name.
        secret: String,
        /// Where it is mounted.
        dir: PathBuf,
        /// The keys looked for.
        keys: [&'static str; 2],
    },
    /// A Secret key that cannot be read.
    #[error("reading {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Writing the disk's files before building the ISO.
    #[error("staging the disk's files in {dir}")]
    Stage {
        /// The staging directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// xorrisofs failed.
    #[error("building {iso}")]
    Build {
        /// The ISO.
        iso: PathBuf,
        /// Why.
        #[source]
        source: tool::Error,
    },
}

/// The user-data Secret's keys, in the order they are looked for.
pub const USER_DATA_KEYS: [&str; 2] = ["userdata", "userData"];
/// The network-data Secret's keys, in the order they are looked for.
pub const NETWORK_DATA_KEYS: [&str; 2] = ["networkdata", "networkData"];

/// Reads the volume's payloads: inline, base64 or from the Secret mounted at `user_secret_dir` /
/// `network_secret_dir`.
pub fn resolve(src: &CloudInitSource, user_secret_dir: &Path, network_secret_dir: &Path) -> Result<Data, Error> {
    let user = payload(
        "user data",
        [("userData", src.user_data.as_deref()), ("userDataBase64", src.user_data_base64.as_deref())],
        src.user_data_secret_ref.as_ref().map(|r| r.name.clone().unwrap_or_default()),
        user_secret_dir,
        USER_DATA_KEYS,
    )?;
    let network = payload(
        "network data",
        [("networkData", src.network_data.as_deref()), ("networkDataBase64", src.network_data_base64.as_deref())],
        src.network_data_secret_ref.as_ref().map(|r| r.name.clone().unwrap_or_default()),
        network_secret_dir,
        NETWORK_DATA_KEYS,
    )?;
    Ok(Data { user_data: user.unwrap_or_default(), network_data: network })
}

/// One payload from its inline field, its base64 field or its Secret (at most one of them).
fn payload(
    what: &'static str,
    [(plain_field, plain), (b64_field, b64)]: [(&'static str, Option<&str>); 2],
    secret: Option<String>,
    dir: &Path,
    keys: [&'static str; 2],
) -> Result<Option<Vec<u8>>, Error> {
    let given: Vec<&str> = [(plain_field, plain.is_some()), (b64_field, b64.is_some()), ("a Secret", secret.is_some())]
        .into_iter()
        .filter_map(|(f, set)| set.then_some(f))
        .collect();
    if given.len() > 1 {
        return Err(Error::TwoSources { what, sources: given.join(", ") });
    }
    if let Some(p) = plain {
        return Ok(Some(p.as_bytes().to_vec()));
    }
    if let Some(b) = b64 {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b.trim())
            .map_err(|source| Error::Base64 { field: b64_field, source })?;
        return Ok(Some(decoded));
    }
    let Some(secret) = secret else { return Ok(None) };
    for key in keys {
        let path = dir.join(key);
        match std::fs::read(&path) {
            Ok(bytes) => return Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(source) => return Err(Error::Read { path, source }),
        }
    }
    Err(Error::MissingKey { what, secret, dir: dir.to_path_buf(), keys })
}

/// A YAML scalar: plain when it is made of name characters, else double-quoted (JSON strings are YAML).
fn yaml_scalar(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')) {
        s.to_owned()
    } else {
        serde_json::Value::from(s).to_string()
    }
}

/// NoCloud's `meta-data`.
pub fn no_cloud_meta_data(instance: &Instance) -> String {
    format!(
        "instance-id: {}\nlocal-hostname: {}\n",
        yaml_scalar(&instance.instance_id()),
        yaml_scalar(&instance.hostname)
    )
}

/// The config drive's `meta_data.json`.
pub fn config_drive_meta_data(instance: &Instance) -> String {
    serde_json::json!({
        "instance_id": instance.instance_id(),
        "hostname": instance.hostname,
        "uuid": instance.uuid,
    })
    .to_string()
}

/// The disk's files (paths relative to the ISO's root) and contents.
pub fn files(flavor: Flavor, instance: &Instance, data: &Data) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    match flavor {
        Flavor::NoCloud => {
            out.push(("user-data", data.user_data.clone()));
            out.push(("meta-data", no_cloud_meta_data(instance).into_bytes()));
            if let Some(n) = &data.network_data {
                out.push(("network-config", n.clone()));
            }
        }
        Flavor::ConfigDrive => {
            out.push(("openstack/latest/user_data", data.user_data.clone()));
            out.push(("openstack/latest/meta_data.json", config_drive_meta_data(instance).into_bytes()));
            if let Some(n) = &data.network_data {
                out.push(("openstack/latest/network_data.json", n.clone()));
            }
        }
    }
    out
}

/// Writes `files` onto the ISO `iso` (label [`Flavor::volume_id`]) with `xorrisofs -volid … -joliet -rock`, owned by
/// `owner`. The files are staged in a temporary directory beside the ISO; the ISO is built under a temporary name
/// and renamed, so a failed build leaves no ISO behind.
pub fn build_iso(flavor: Flavor, files: &[(&str, Vec<u8>)], iso: &Path, owner: u32) -> Result<(), Error> {
    let parent = iso.parent().unwrap_or(Path::new("/"));
    let stage_err = |source| Error::Stage { dir: parent.to_path_buf(), source };
    files::create_dirs(parent, Some(owner)).map_err(stage_err)?;
    let stage = tempfile::Builder::new().prefix(".stage-").tempdir_in(parent).map_err(stage_err)?;
    for (name, bytes) in files {
        let path = stage.path().join(name);
        let err = |source| Error::Stage { dir: stage.path().to_path_buf(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        std::fs::write(&path, bytes).map_err(err)?;
    }
    let tmp = iso.with_extension("iso.tmp");
    let args: [&std::ffi::OsStr; 8] = [
        "-output".as_ref(),
        tmp.as_os_str(),
        "-volid".as_ref(),
        flavor.volume_id().as_ref(),
        "-joliet".as_ref(),
        "-rock".as_ref(),
        "-quiet".as_ref(),
        stage.path().as_os_str(),
    ];
    let built = tool::run("xorrisofs", &args).map_err(|source| Error::Build { iso: iso.to_path_buf(), source });
    if let Err(e) = built {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    let finish = files::chown(&tmp, owner).and_then(|()| std::fs::rename(&tmp, iso));
    finish.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        Error::Stage { dir: parent.to_path_buf(), source }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use crds::kubevirt::volume::LocalObjectReference;

    use super::*;

    fn instance(hostname: &str) -> Instance {
        Instance { name: "testvmi".into(), namespace: "default".into(), hostname: hostname.into(), uuid: "u-1".into() }
    }

    #[test]
    fn meta_data_names_the_instance_and_hostname() {
        assert_eq!(no_cloud_meta_data(&instance("testvmi")), "instance-id: testvmi.default\nlocal-hostname: testvmi\n");
        assert_eq!(
            no_cloud_meta_data(&instance("my host")),
            "instance-id: testvmi.default\nlocal-hostname: \"my host\"\n"
        );
        let j: serde_json::Value = serde_json::from_str(&config_drive_meta_data(&instance("h1"))).unwrap();
        assert_eq!(j, serde_json::json!({"instance_id": "testvmi.default", "hostname": "h1", "uuid": "u-1"}));
    }

    #[test]
    fn layouts_per_flavor() {
        let data = Data { user_data: b"#cloud-config\n".to_vec(), network_data: Some(b"version: 2\n".to_vec()) };
        let names = |f| files(f, &instance("h"), &data).into_iter().map(|(n, _)| n).collect::<Vec<_>>();
        assert_eq!(names(Flavor::NoCloud), ["user-data", "meta-data", "network-config"]);
        assert_eq!(
            names(Flavor::ConfigDrive),
            ["openstack/latest/user_data", "openstack/latest/meta_data.json", "openstack/latest/network_data.json"]
        );
        let no_net = files(Flavor::NoCloud, &instance("h"), &Data::default());
        assert_eq!(no_net.iter().map(|(n, _)| *n).collect::<Vec<_>>(), ["user-data", "meta-data"]);
        assert_eq!(no_net[0].1, b"");
    }

    #[test]
    fn sources_resolve_inline_base64_and_secret_keys() {
        let t = tempfile::tempdir().unwrap();
        let (user, net) = (t.path().join("user"), t.path().join("network"));
        std::fs::create_dir_all(&user).unwrap();
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(user.join("userData"), "from-secret").unwrap();
        std::fs::write(net.join("networkdata"), "net-lower").unwrap();
        std::fs::write(net.join("networkData"), "net-camel").unwrap();
        let secret = |n: &str| Some(LocalObjectReference { name: Some(n.into()), ..Default::default() });

        let src = CloudInitSource { user_data: Some("plain".into()), ..Default::default() };
        assert_eq!(resolve(&src, &user, &net).unwrap(), Data { user_data: b"plain".to_vec(), network_data: None });

        let src = CloudInitSource {
            user_data_base64: Some("aGVsbG8=".into()),
            network_data_secret_ref: secret("n"),
            ..Default::default()
        };
        let got = resolve(&src, &user, &net).unwrap();
        assert_eq!(got, Data { user_data: b"hello".to_vec(), network_data: Some(b"net-lower".to_vec()) });

        let src = CloudInitSource { user_data_secret_ref: secret("u"), ..Default::default() };
        assert_eq!(resolve(&src, &user, &net).unwrap().user_data, b"from-secret");

        let err = |src: CloudInitSource| resolve(&src, &user, &net).err().map(|e| e.to_string());
        assert_eq!(err(CloudInitSource { network_data_secret_ref: secret("n"), ..Default::default() }), None);
        let empty = t.path().join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let src = CloudInitSource { user_data_secret_ref: secret("u"), ..Default::default() };
        assert_eq!(
            resolve(&src, &empty, &net).err().map(|e| e.to_string()),
            Some(format!(
                "the user data Secret \"u\" (mounted at {}) has neither key userdata nor userData",
                empty.display()
            ))
        );
        assert_eq!(
            err(CloudInitSource { user_data_base64: Some("%%%".into()), ..Default::default() }),
            Some("userDataBase64 is not valid base64".into())
        );
        assert_eq!(
            err(CloudInitSource {
                user_data: Some("a".into()),
                user_data_secret_ref: secret("u"),
                ..Default::default()
            }),
            Some("user data is given more than once (userData, a Secret)".into())
        );
    }
}
