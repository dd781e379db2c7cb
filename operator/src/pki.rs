//! Certificates of the stack: a CA (kept in a Secret with its key, so that leaves are re-issued by the same CA) and
//! the leaves it signs — virt-api's serving certificate (its PEM CA is the webhook configurations' `caBundle`), the
//! node agents' serving certificate and virt-api's client certificate for the node API. Every certificate has a
//! validity ([`Validity`]); [`not_after`] reads it back so that the operator renews before expiry
//! (`certs.rs`). Tests that deploy virt-api by hand use [`Pki::generate`].

use std::collections::BTreeMap;

use base64::Engine as _;
use contracts::kubevirt::consts::webhook;
use contracts::kubevirt::node_api;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};
use std::time::{Duration, SystemTime};

/// The placeholder of `caBundle` in `deploy/virt-api.yaml` ([`with_ca_bundle`] replaces it).
pub const CA_BUNDLE_PLACEHOLDER: &str = "${VIRT_API_CA_BUNDLE}";
/// The Secret (`kubernetes.io/tls`) the Deployment mounts: `tls.crt`, `tls.key` (and `ca.crt`).
pub const TLS_SECRET: &str = "virt-api-certs";

/// Generating a certificate failed.
#[derive(Debug, thiserror::Error)]
#[error("generating the {what} certificate")]
pub struct Error {
    /// Which certificate.
    pub what: &'static str,
    /// rcgen's error.
    #[source]
    pub source: rcgen::Error,
}

/// How long a new certificate is valid (from one minute before now, against clock skew).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity(pub Duration);

impl Validity {
    /// Upstream's default CA lifetime (`certificateRotateStrategy.selfSigned.ca.duration`: 7 days).
    pub const CA: Validity = Validity(Duration::from_secs(7 * 24 * 3600));
    /// Upstream's default leaf lifetime (`selfSigned.server.duration`: 24 hours).
    pub const LEAF: Validity = Validity(Duration::from_secs(24 * 3600));

    fn apply(self, params: &mut CertificateParams) {
        let now = time::OffsetDateTime::now_utc();
        params.not_before = now - time::Duration::minutes(1);
        params.not_after = now + time::Duration::seconds(i64::try_from(self.0.as_secs()).unwrap_or(i64::MAX / 2));
    }
}

/// The end of the validity of the first certificate in `pem`, if it parses.
pub fn not_after(pem: &str) -> Option<SystemTime> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = block.parse_x509().ok()?;
    let secs = u64::try_from(cert.validity().not_after.timestamp()).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

/// A CA and a serving certificate it signed, as PEM.
#[derive(Clone, Debug)]
pub struct Pki {
    /// The CA certificate (what the API server must trust).
    pub ca_pem: String,
    /// The serving certificate.
    pub cert_pem: String,
    /// The serving certificate's private key.
    pub key_pem: String,
}

/// The DNS names of the Service in `namespace` (`virt-api`, `virt-api.<ns>`, `virt-api.<ns>.svc`).
pub fn service_names(namespace: &str) -> Vec<String> {
    let s = webhook::SERVICE;
    vec![s.to_owned(), format!("{s}.{namespace}"), format!("{s}.{namespace}.svc")]
}

/// A CA that signs leaf certificates: its certificate and key as PEM (what its Secret keeps) and the issuer made
/// of them.
pub struct Ca {
    /// The CA certificate.
    pub pem: String,
    /// The CA's private key.
    pub key_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").field("pem", &self.pem).finish_non_exhaustive()
    }
}

/// Whether a leaf is a serving or a client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// TLS server authentication.
    Server,
    /// TLS client authentication.
    Client,
}

impl Ca {
    /// A fresh self-signed CA named `common_name`.
    pub fn generate(common_name: &str, validity: Validity) -> Result<Ca, Error> {
        let ca_err = |source| Error { what: "CA", source };
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(ca_err)?;
        ca.distinguished_name.push(DnType::CommonName, common_name);
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity.apply(&mut ca);
        let ca_key = KeyPair::generate().map_err(ca_err)?;
        let ca_cert = ca.self_signed(&ca_key).map_err(ca_err)?;
        Ok(Ca { pem: ca_cert.pem(), key_pem: ca_key.serialize_pem(), issuer: Issuer::new(ca, ca_key) })
    }

    /// The CA kept as `pem` and `key_pem` (from its Secret), if both parse and belong together.
    pub fn from_pem(pem: &str, key_pem: &str) -> Option<Ca> {
        let key = KeyPair::from_pem(key_pem).ok()?;
        let issuer = Issuer::from_ca_cert_pem(pem, key).ok()?;
        Some(Ca { pem: pem.to_owned(), key_pem: key_pem.to_owned(), issuer })
    }

    /// A leaf for `names` (DNS names or IP addresses) named `common_name`, for `usage`, valid for `validity`.
    pub fn issue(
        &self,
        what: &'static str,
        common_name: &str,
        names: &[String],
        usage: Usage,
        validity: Validity,
    ) -> Result<Pki, Error> {
        let leaf_err = |source| Error { what, source };
        let mut leaf = CertificateParams::new(names.to_vec()).map_err(leaf_err)?;
        leaf.distinguished_name.push(DnType::CommonName, common_name);
        leaf.extended_key_usages = vec![match usage {
            Usage::Server => ExtendedKeyUsagePurpose::ServerAuth,
            Usage::Client => ExtendedKeyUsagePurpose::ClientAuth,
        }];
        leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        validity.apply(&mut leaf);
        let key = KeyPair::generate().map_err(leaf_err)?;
        let cert = leaf.signed_by(&key, &self.issuer).map_err(leaf_err)?;
        Ok(Pki { ca_pem: self.pem.clone(), cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }
}

impl Pki {
    /// A fresh CA and a serving certificate for `names` (DNS names or IP addresses).
    pub fn generate(names: &[String]) -> Result<Pki, Error> {
        let cn = names.first().map(String::as_str).unwrap_or("virt-api");
        Ca::generate("virt-api-ca", Validity::CA)?.issue("serving", cn, names, Usage::Server, Validity::LEAF)
    }

    /// The node agent's stream API ([`node_api`]): a fresh CA, the node agent's serving certificate (for
    /// [`node_api::SERVER_NAME`]) and virt-api's client certificate ([`node_api::CLIENT_COMMON_NAME`]), both
    /// signed by it.
    pub fn generate_node_api() -> Result<(Pki, Pki), Error> {
        let ca = Ca::generate("kubevirt-handler-ca", Validity::CA)?;
        let name = node_api::SERVER_NAME;
        let server = ca.issue("node agent serving", name, &[name.to_owned()], Usage::Server, Validity::LEAF)?;
        let cn = node_api::CLIENT_COMMON_NAME;
        let client = ca.issue("virt-api client", cn, &[], Usage::Client, Validity::LEAF)?;
        Ok((server, client))
    }

    /// The PKI kept in a Secret made by [`Pki::secret`] (`ca.crt`, `tls.crt`, `tls.key`), if complete: an installer
    /// reuses it, so that running replicas (which load their certificate at start) and the `caBundle` keep
    /// matching across re-installs.
    pub fn from_secret(secret: &Secret) -> Option<Pki> {
        let text = |k: &str| secret_text(secret, k);
        Some(Pki { ca_pem: text("ca.crt")?, cert_pem: text("tls.crt")?, key_pem: text("tls.key")? })
    }

    /// The `caBundle` value: the CA PEM, base64-encoded.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// The Secret [`TLS_SECRET`] in `namespace`.
    pub fn secret(&self, namespace: &str) -> Secret {
        self.secret_named(TLS_SECRET, namespace)
    }

    /// The Secret `name` (`kubernetes.io/tls`: `tls.crt`, `tls.key`, `ca.crt`) in `namespace`.
    pub fn secret_named(&self, name: &str, namespace: &str) -> Secret {
        let data = [("tls.crt", &self.cert_pem), ("tls.key", &self.key_pem), ("ca.crt", &self.ca_pem)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect::<BTreeMap<_, _>>();
        Secret {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                labels: Some([("kubevirt.io".to_owned(), "virt-api".to_owned())].into()),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".into()),
            data: Some(data),
            ..Default::default()
        }
    }
}

/// The text under `key` of a Secret's data, if present and UTF-8 (a PEM).
pub fn secret_text(secret: &Secret, key: &str) -> Option<String> {
    secret.data.as_ref()?.get(key).and_then(|b| String::from_utf8(b.0.clone()).ok())
}

/// `yaml` (e.g. `deploy/virt-api.yaml`) with every [`CA_BUNDLE_PLACEHOLDER`] replaced by `pki`'s CA bundle.
pub fn with_ca_bundle(yaml: &str, pki: &Pki) -> String {
    yaml.replace(CA_BUNDLE_PLACEHOLDER, &pki.ca_bundle())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier as _;

    #[test]
    fn the_serving_certificate_chains_to_the_ca() {
        let pki = Pki::generate(&service_names("kubevirt")).unwrap_or_else(|e| panic!("{e}"));
        let roots = controller_runtime::tls::roots(
            &controller_runtime::tls::certs_from_pem(pki.ca_pem.as_bytes(), "ca").unwrap_or_else(|e| panic!("{e}")),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(roots.len(), 1);
        let chain =
            controller_runtime::tls::certs_from_pem(pki.cert_pem.as_bytes(), "cert").unwrap_or_else(|e| panic!("{e}"));
        let key =
            controller_runtime::tls::key_from_pem(pki.key_pem.as_bytes(), "key").unwrap_or_else(|e| panic!("{e}"));
        assert!(controller_runtime::tls::server_config(chain, key, None).is_ok());
        assert_eq!(with_ca_bundle("caBundle: ${VIRT_API_CA_BUNDLE}", &pki), format!("caBundle: {}", pki.ca_bundle()));
        let s = pki.secret("kubevirt");
        assert_eq!(s.data.as_ref().map(|d| d.len()), Some(3));
        assert_eq!(Pki::from_secret(&s).map(|p| p.ca_bundle()), Some(pki.ca_bundle()));
        let left = not_after(&pki.cert_pem)
            .and_then(|t| t.duration_since(SystemTime::now()).ok())
            .unwrap_or_else(|| panic!("no validity in the leaf"));
        assert!(left > Duration::from_secs(23 * 3600) && left <= Validity::LEAF.0, "{left:?}");
    }

    #[test]
    fn a_ca_read_back_from_its_secret_issues_leaves_that_chain_to_it() {
        let ca = Ca::generate("kubevirt-ca", Validity(Duration::from_secs(3600))).unwrap_or_else(|e| panic!("{e}"));
        let again = Ca::from_pem(&ca.pem, &ca.key_pem).unwrap_or_else(|| panic!("CA does not read back"));
        let leaf = again
            .issue("serving", "virt-api", &["virt-api".into()], Usage::Server, Validity(Duration::from_secs(60)))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(leaf.ca_pem, ca.pem);
        let roots = controller_runtime::tls::roots(
            &controller_runtime::tls::certs_from_pem(ca.pem.as_bytes(), "ca").unwrap_or_else(|e| panic!("{e}")),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let chain =
            controller_runtime::tls::certs_from_pem(leaf.cert_pem.as_bytes(), "cert").unwrap_or_else(|e| panic!("{e}"));
        let verifier = rustls::client::WebPkiServerVerifier::builder(std::sync::Arc::new(roots))
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let name = rustls::pki_types::ServerName::try_from("virt-api").unwrap_or_else(|e| panic!("{e}"));
        let now = rustls::pki_types::UnixTime::now();
        let verified = verifier.verify_server_cert(&chain[0], &[], &name, &[], now);
        assert!(verified.is_ok(), "{verified:?}");
        let other = rustls::pki_types::ServerName::try_from("elsewhere").unwrap_or_else(|e| panic!("{e}"));
        assert!(verifier.verify_server_cert(&chain[0], &[], &other, &[], now).is_err());
        let ca_left = not_after(&ca.pem).and_then(|t| t.duration_since(SystemTime::now()).ok()).unwrap_or_default();
        assert!(ca_left > Duration::from_secs(3500) && ca_left <= Duration::from_secs(3600), "{ca_left:?}");
        assert!(Ca::from_pem("not pem", &ca.key_pem).is_none());
        assert_eq!(not_after("not pem"), None);
    }

    #[test]
    fn the_node_api_pair_shares_its_ca_and_names_both_ends() {
        let (server, client) = Pki::generate_node_api().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(server.ca_pem, client.ca_pem);
        let cn = |p: &Pki| {
            let certs = controller_runtime::tls::certs_from_pem(p.cert_pem.as_bytes(), "cert").unwrap_or_default();
            certs.first().and_then(|c| controller_runtime::tls::common_name(c.as_ref()))
        };
        assert_eq!(cn(&server).as_deref(), Some(node_api::SERVER_NAME));
        assert_eq!(cn(&client).as_deref(), Some(node_api::CLIENT_COMMON_NAME));
        assert_eq!(
            client.secret_named(node_api::CLIENT_SECRET, "kubevirt").metadata.name.as_deref(),
            Some(node_api::CLIENT_SECRET)
        );
    }
}
