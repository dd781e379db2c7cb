//! What every aggregated API server of this project shares (CDI's token API `upload.cdi.kubevirt.io`, virt-api's
//! `subresources.kubevirt.io`): trusting the kube-apiserver's front proxy and authorizing the user it names.
//!
//! ```text
//! kube-apiserver ──mTLS: front-proxy client certificate, CA + allowed names from
//!                  kube-system/extension-apiserver-authentication ([`RequestHeaderConfig`], [`front_proxy_tls`])
//!   ─► the user from the X-Remote-* headers ([`identity`])
//!   ─► SubjectAccessReview for the request's resource attributes ([`Authorizer`], [`SarAuthorizer`])
//! ```
//!
//! Failures are answered as `metav1.Status` objects ([`status`]), which kubectl and client-go print as they are.

use std::collections::BTreeMap;
use std::future::Future;

use hyper::HeaderMap;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::ConfigMap;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request-header authentication configuration is unusable.
    #[error("invalid extension-apiserver-authentication configuration: {0}")]
    AuthConfig(String),
    /// Reading the configuration failed.
    #[error("reading kube-system/extension-apiserver-authentication")]
    Kube(#[source] kube::Error),
    /// TLS material could not be built.
    #[error("TLS setup failed")]
    Tls(#[from] crate::tls::Error),
}

/// Request-header authentication, as the kube-apiserver publishes it in ConfigMap
/// `kube-system/extension-apiserver-authentication`.
#[derive(Debug, Clone)]
pub struct RequestHeaderConfig {
    /// CA certificates (PEM) of the front-proxy client.
    pub client_ca_pem: String,
    /// Allowed client certificate common names (empty: any name signed by the CA).
    pub allowed_names: Vec<String>,
    /// User name headers.
    pub username_headers: Vec<String>,
    /// Group headers.
    pub group_headers: Vec<String>,
    /// Extra header prefixes.
    pub extra_prefixes: Vec<String>,
}

impl RequestHeaderConfig {
    /// Reads the ConfigMap's data.
    pub fn from_configmap(data: &BTreeMap<String, String>) -> Result<Self, Error> {
        let list = |k: &str, default: &[&str]| -> Result<Vec<String>, Error> {
            match data.get(k) {
                None => Ok(default.iter().map(|s| s.to_string()).collect()),
                Some(v) if v.trim().is_empty() => Ok(Vec::new()),
                Some(v) => serde_json::from_str(v).map_err(|e| Error::AuthConfig(format!("{k}: {e}"))),
            }
        };
        let client_ca_pem = data
            .get("requestheader-client-ca-file")
            .cloned()
            .ok_or_else(|| Error::AuthConfig(String::from("requestheader-client-ca-file is missing")))?;
        Ok(RequestHeaderConfig {
            client_ca_pem,
            allowed_names: list("requestheader-allowed-names", &[])?,
            username_headers: list("requestheader-username-headers", &["X-Remote-User"])?,
            group_headers: list("requestheader-group-headers", &["X-Remote-Group"])?,
            extra_prefixes: list("requestheader-extra-headers-prefix", &["X-Remote-Extra-"])?,
        })
    }

    /// Reads it from `kube-system/extension-apiserver-authentication`.
    pub async fn load(client: &kube::Client) -> Result<Self, Error> {
        let api: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "kube-system");
        let cm = api.get("extension-apiserver-authentication").await.map_err(Error::Kube)?;
        RequestHeaderConfig::from_configmap(&cm.data.unwrap_or_default())
    }

    /// Whether a verified client certificate with common name `cn` may assert identities.
    pub fn allows(&self, cn: Option<&str>) -> bool {
        match cn {
            None => false,
            Some(cn) => self.allowed_names.is_empty() || self.allowed_names.iter().any(|n| n == cn),
        }
    }
}

/// A TLS server configuration serving `chain`/`key` that asks for client certificates signed by the front
/// proxy's CA (a connection without one is accepted; [`RequestHeaderConfig::allows`] then refuses its requests).
pub fn front_proxy_tls(
    auth: &RequestHeaderConfig,
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<std::sync::Arc<rustls::ServerConfig>, Error> {
    let cas =
        crate::tls::roots(&crate::tls::certs_from_pem(auth.client_ca_pem.as_bytes(), "requestheader-client-ca-file")?)?;
    Ok(crate::tls::server_config(chain, key, Some(cas))?)
}

/// The user a request is made for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Identity {
    /// User name.
    pub user: String,
    /// Groups.
    pub groups: Vec<String>,
    /// Extra attributes (keys lower-cased and unescaped).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// Decodes `%XX` escapes of an extra-attribute key (invalid escapes stay; invalid UTF-8 is replaced).
fn unescape(s: &str) -> String {
    percent_encoding::percent_decode_str(s).decode_utf8_lossy().into_owned()
}

/// The identity asserted by the front proxy's headers (`None` without a user name).
pub fn identity(headers: &HeaderMap, cfg: &RequestHeaderConfig) -> Option<Identity> {
    let values = |name: &str| -> Vec<String> {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(str::to_owned).collect()
    };
    let user = cfg.username_headers.iter().find_map(|h| values(h).into_iter().find(|v| !v.is_empty()))?;
    let groups = cfg.group_headers.iter().flat_map(|h| values(h)).collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        for p in &cfg.extra_prefixes {
            let p = p.to_ascii_lowercase();
            if let Some(key) = name.as_str().strip_prefix(p.as_str())
                && let Ok(v) = value.to_str()
            {
                extra.entry(unescape(key).to_ascii_lowercase()).or_default().push(v.to_owned());
            }
        }
    }
    Some(Identity { user, groups, extra })
}

/// Decides whether an identity may do what a SubjectAccessReview's resource attributes describe.
pub trait Authorizer: Send + Sync + 'static {
    /// `Ok(true)` when allowed; `Err` with a message when it cannot be decided.
    fn allowed(&self, who: &Identity, what: &ResourceAttributes) -> impl Future<Output = Result<bool, String>> + Send;
}

/// [`Authorizer`] through SubjectAccessReviews.
#[derive(Clone)]
pub struct SarAuthorizer {
    client: kube::Client,
}

impl SarAuthorizer {
    /// Uses `client` (needs `create subjectaccessreviews`).
    pub fn new(client: kube::Client) -> Self {
        SarAuthorizer { client }
    }
}

impl std::fmt::Debug for SarAuthorizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SarAuthorizer").finish_non_exhaustive()
    }
}

impl Authorizer for SarAuthorizer {
    async fn allowed(&self, who: &Identity, what: &ResourceAttributes) -> Result<bool, String> {
        let sar = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(who.user.clone()),
                groups: Some(who.groups.clone()),
                extra: (!who.extra.is_empty()).then(|| who.extra.clone()),
                resource_attributes: Some(what.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: kube::Api<SubjectAccessReview> = kube::Api::all(self.client.clone());
        let r = api.create(&Default::default(), &sar).await.map_err(|e| format!("SubjectAccessReview: {e}"))?;
        Ok(r.status.is_some_and(|s| s.allowed))
    }
}

/// A `metav1.Status` failure with HTTP `code`.
pub fn status(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RequestHeaderConfig {
        let data: BTreeMap<String, String> = [
            ("requestheader-client-ca-file", "PEM"),
            ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
            ("requestheader-username-headers", r#"["X-Remote-User"]"#),
            ("requestheader-group-headers", r#"["X-Remote-Group"]"#),
            ("requestheader-extra-headers-prefix", r#"["X-Remote-Extra-"]"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        RequestHeaderConfig::from_configmap(&data).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn request_header_identity() {
        let c = cfg();
        assert!(c.allows(Some("front-proxy-client")));
        assert!(!c.allows(Some("someone-else")));
        assert!(!c.allows(None));
        let mut h = HeaderMap::new();
        h.append("X-Remote-User", "alice".parse().unwrap_or_else(|_| panic!()));
        h.append("X-Remote-Group", "dev".parse().unwrap_or_else(|_| panic!()));
        h.append("X-Remote-Group", "system:authenticated".parse().unwrap_or_else(|_| panic!()));
        h.append("X-Remote-Extra-Scopes%2fa", "x".parse().unwrap_or_else(|_| panic!()));
        let id = identity(&h, &c).unwrap_or_else(|| panic!("no identity"));
        assert_eq!(id.user, "alice");
        assert_eq!(id.groups, vec!["dev", "system:authenticated"]);
        assert_eq!(id.extra.get("scopes/a"), Some(&vec!["x".to_owned()]));
        assert_eq!(identity(&HeaderMap::new(), &c), None);
    }

    #[test]
    fn a_missing_ca_is_refused() {
        let e = RequestHeaderConfig::from_configmap(&BTreeMap::new()).map(drop);
        assert!(matches!(e, Err(Error::AuthConfig(m)) if m.contains("requestheader-client-ca-file")));
    }
}
