//! The binary's settings from environment variables. `main.rs` reads the environment and hands a lookup function
//! to [`Settings::from_lookup`], which is pure (and tested).
//!
//! | variable | default | meaning |
//! |---|---|---|
//! | `VIRT_API_LISTEN` | `0.0.0.0:8443` | HTTPS listen address |
//! | `VIRT_API_TLS_CERT`, `VIRT_API_TLS_KEY` | — | PEM files (the Secret's `tls.crt`/`tls.key`); without them a self-signed certificate for `virt-api.<ns>.svc` (development only) |
//! | `VIRT_API_NAMESPACE` | `kubevirt` | namespace of the Service (names of the self-signed certificate) and of the node agents' pods |
//! | `VIRT_API_NODE_CLIENT_CERT_DIR` | `/etc/virt-handler/clientcertificates` | client certificate for the node agents (`tls.crt`, `tls.key`, `ca.crt`); unreadable: console, VNC, pause answer 503 |
//! | `VIRT_API_DEFAULT_NETWORK_INTERFACE` | `bridge` | binding of the default interface: `bridge` or `masquerade` |
//! | `VIRT_API_PERMIT_BRIDGE_ON_POD_NETWORK` | `true` | `network.permitBridgeInterfaceOnPodNetwork` |
//! | `VIRT_API_KUBEVIRT_USERS` | — | comma-separated user names treated as KubeVirt components (may change VMI spec/status) |
//! | `VIRT_API_KUBEVIRT_GROUPS` | — | comma-separated groups treated as KubeVirt components |
//! | `VIRT_API_CPU_MODEL` | — | cluster `cpuModel` (absent: `host-model`) |
//! | `VIRT_API_CPU_REQUEST` | — | cluster `cpuRequest` |
//! | `VIRT_API_VM_ROLLOUT_STRATEGY` | `LiveUpdate` | `LiveUpdate` or `Stage` |
//! | `VIRT_API_FEATURE_GATES`, `VIRT_API_DISABLED_FEATURE_GATES` | — | comma-separated gate names |
//! | `VIRT_API_DEFAULT_ARCHITECTURE` | `amd64` | architecture of VMIs that name none |

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use contracts::kubevirt::node_api;

use crate::config::{Architecture, Config, DefaultBinding, RolloutStrategy};
use crate::server::Certificate;

/// An environment variable with a value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {name}={value:?}: {expected}")]
pub struct Error {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What it must be.
    pub expected: &'static str,
}

/// Everything the binary needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// HTTPS listen address.
    pub listen: SocketAddr,
    /// The serving certificate.
    pub certificate: Certificate,
    /// The cluster settings of admission.
    pub config: Config,
    /// virt-api's namespace (where the node agents' pods are).
    pub namespace: String,
    /// Directory of the client certificate for the node agents (`tls.crt`, `tls.key`, `ca.crt`).
    pub node_client_dir: PathBuf,
}

fn list(v: Option<String>) -> BTreeSet<String> {
    v.unwrap_or_default().split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

impl Settings {
    /// The settings from `get` (an environment lookup: variable name → value).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Settings, Error> {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let bad = |name: &'static str, value: String, expected: &'static str| Error { name, value, expected };
        let listen = get("VIRT_API_LISTEN").unwrap_or_else(|| "0.0.0.0:8443".into());
        let listen = listen.parse().map_err(|_| bad("VIRT_API_LISTEN", listen.clone(), "an address host:port"))?;
        let namespace = get("VIRT_API_NAMESPACE").unwrap_or_else(|| "kubevirt".into());
        let certificate = match (get("VIRT_API_TLS_CERT"), get("VIRT_API_TLS_KEY")) {
            (Some(cert), Some(key)) => Certificate::Files { cert: PathBuf::from(cert), key: PathBuf::from(key) },
            (None, None) => Certificate::SelfSigned(vec![
                "virt-api".into(),
                format!("virt-api.{namespace}"),
                format!("virt-api.{namespace}.svc"),
                "localhost".into(),
            ]),
            (Some(v), None) | (None, Some(v)) => {
                return Err(bad("VIRT_API_TLS_CERT", v, "set together with VIRT_API_TLS_KEY"));
            }
        };
        let mut config = Config::default();
        if let Some(v) = get("VIRT_API_DEFAULT_NETWORK_INTERFACE") {
            config.default_binding = DefaultBinding::parse(&v)
                .ok_or_else(|| bad("VIRT_API_DEFAULT_NETWORK_INTERFACE", v, "bridge or masquerade"))?;
        }
        if let Some(v) = get("VIRT_API_PERMIT_BRIDGE_ON_POD_NETWORK") {
            config.permit_bridge_on_pod_network =
                v.parse().map_err(|_| bad("VIRT_API_PERMIT_BRIDGE_ON_POD_NETWORK", v, "true or false"))?;
        }
        if let Some(v) = get("VIRT_API_VM_ROLLOUT_STRATEGY") {
            config.rollout_strategy = RolloutStrategy::parse(&v)
                .ok_or_else(|| bad("VIRT_API_VM_ROLLOUT_STRATEGY", v, "LiveUpdate or Stage"))?;
        }
        if let Some(v) = get("VIRT_API_DEFAULT_ARCHITECTURE") {
            config.default_architecture = Architecture::parse(&v)
                .ok_or_else(|| bad("VIRT_API_DEFAULT_ARCHITECTURE", v, "amd64, arm64 or s390x"))?;
        }
        if let Some(v) = get("VIRT_API_CPU_REQUEST") {
            if crate::quantity::Quantity::parse(&v).is_err() {
                return Err(bad("VIRT_API_CPU_REQUEST", v, "a quantity"));
            }
            config.cpu_request = Some(v);
        }
        config.cpu_model = get("VIRT_API_CPU_MODEL");
        config.kubevirt_users = list(get("VIRT_API_KUBEVIRT_USERS"));
        config.kubevirt_groups = list(get("VIRT_API_KUBEVIRT_GROUPS"));
        config.feature_gates = list(get("VIRT_API_FEATURE_GATES"));
        config.disabled_feature_gates = list(get("VIRT_API_DISABLED_FEATURE_GATES"));
        let node_client_dir =
            PathBuf::from(get("VIRT_API_NODE_CLIENT_CERT_DIR").unwrap_or_else(|| node_api::CLIENT_CERT_DIR.into()));
        Ok(Settings { listen, certificate, config, namespace, node_client_dir })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn from(vars: &[(&str, &str)]) -> Result<Settings, Error> {
        let m: BTreeMap<String, String> = vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Settings::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_are_upstreams() {
        let s = from(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.listen.to_string(), "0.0.0.0:8443");
        assert!(
            matches!(&s.certificate, Certificate::SelfSigned(n) if n.contains(&"virt-api.kubevirt.svc".to_owned()))
        );
        assert_eq!(s.config, Config::default());
    }

    #[test]
    fn every_variable_is_read() {
        let s = from(&[
            ("VIRT_API_LISTEN", "127.0.0.1:9443"),
            ("VIRT_API_TLS_CERT", "/c/tls.crt"),
            ("VIRT_API_TLS_KEY", "/c/tls.key"),
            ("VIRT_API_DEFAULT_NETWORK_INTERFACE", "masquerade"),
            ("VIRT_API_KUBEVIRT_USERS", "a, b"),
            ("VIRT_API_KUBEVIRT_GROUPS", "g"),
            ("VIRT_API_VM_ROLLOUT_STRATEGY", "Stage"),
            ("VIRT_API_FEATURE_GATES", "HostDisk,Sidecar"),
            ("VIRT_API_CPU_MODEL", "Haswell"),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.certificate, Certificate::Files { cert: "/c/tls.crt".into(), key: "/c/tls.key".into() });
        assert_eq!(s.config.default_binding, DefaultBinding::Masquerade);
        assert_eq!(s.config.kubevirt_users.len(), 2);
        assert_eq!(s.config.rollout_strategy, RolloutStrategy::Stage);
        assert!(s.config.feature_gates.contains("Sidecar"));
        assert_eq!(s.config.cpu_model.as_deref(), Some("Haswell"));
        let e = from(&[("VIRT_API_DEFAULT_NETWORK_INTERFACE", "slirp")]).err();
        assert_eq!(
            e.map(|e| e.to_string()).as_deref(),
            Some("invalid VIRT_API_DEFAULT_NETWORK_INTERFACE=\"slirp\": bridge or masquerade")
        );
        assert!(from(&[("VIRT_API_TLS_CERT", "/x")]).is_err());
    }
}
