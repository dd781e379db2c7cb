//! The upload path's PKI (`uploader/README.md`): two CAs kept in Secrets of the control-plane namespace — one
//! signs upload-server serving certificates, one signs the upload proxy's client certificate — their bundles in
//! ConfigMaps, and the proxy's client certificate. Created once by the leader if missing; per-PVC serving
//! certificates are signed on demand.

use std::collections::BTreeMap;

use crds::cdi::consts;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
};

/// Errors creating or loading the PKI.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Key or certificate generation failed.
    #[error("generating certificate {what}: {source}")]
    Generate {
        /// Which certificate.
        what: String,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// A stored Secret lacks a key.
    #[error("Secret {0} has no tls.crt/tls.key")]
    Incomplete(String),
    /// API access failed.
    #[error("storing or reading {what}: {source}")]
    Kube {
        /// Which object.
        what: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
}

/// Secret with the CA that signs upload-server serving certificates.
pub const SERVER_SIGNER: &str = "cdi-uploadserver-signer";
/// ConfigMap (`ca-bundle.crt`) the proxy trusts for upload servers.
pub const SERVER_SIGNER_BUNDLE: &str = "cdi-uploadserver-signer-bundle";
/// Secret with the CA that signs client certificates.
pub const CLIENT_SIGNER: &str = "cdi-uploadserver-client-signer";
/// ConfigMap (`ca-bundle.crt`) with the client CA.
pub const CLIENT_SIGNER_BUNDLE: &str = "cdi-uploadserver-client-signer-bundle";
/// Secret with the proxy's client certificate.
pub const CLIENT_CERT: &str = "cdi-uploadserver-client-cert";
/// Key of the bundle ConfigMaps.
pub const BUNDLE_KEY: &str = "ca-bundle.crt";

const CA_DAYS: i64 = 3650;
/// Validity of an upload-server serving certificate (the server's `DEADLINE`).
pub const SERVING_DAYS: i64 = 30;

/// A CA: certificate and key as PEM.
#[derive(Clone, Debug)]
pub struct Ca {
    /// Certificate PEM.
    pub cert_pem: String,
    key_pem: String,
}

/// A leaf certificate and its key as PEM.
#[derive(Clone, Debug)]
pub struct Leaf {
    /// Certificate PEM.
    pub cert_pem: String,
    /// Private key PEM.
    pub key_pem: String,
    /// Expiry, RFC 3339.
    pub not_after: String,
}

fn gen_err(what: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |source| Error::Generate { what: what.to_owned(), source }
}

fn validity(params: &mut CertificateParams, days: i64) -> String {
    let now = time_now();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(days);
    params.not_after.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

impl Ca {
    /// A new self-signed CA with common name `cn`.
    pub fn generate(cn: &str) -> Result<Ca, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(gen_err(cn))?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut params, CA_DAYS);
        let key = KeyPair::generate().map_err(gen_err(cn))?;
        let cert = params.self_signed(&key).map_err(gen_err(cn))?;
        Ok(Ca { cert_pem: cert.pem(), key_pem: key.serialize_pem() })
    }

    fn sign(&self, cn: &str, sans: Vec<String>, usage: ExtendedKeyUsagePurpose, days: i64) -> Result<Leaf, Error> {
        let ca_key = KeyPair::from_pem(&self.key_pem).map_err(gen_err(cn))?;
        let issuer = Issuer::from_ca_cert_pem(&self.cert_pem, ca_key).map_err(gen_err(cn))?;
        let mut params = CertificateParams::new(sans).map_err(gen_err(cn))?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![usage];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        let not_after = validity(&mut params, days);
        let key = KeyPair::generate().map_err(gen_err(cn))?;
        let cert = params.signed_by(&key, &issuer).map_err(gen_err(cn))?;
        Ok(Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem(), not_after })
    }

    /// A serving certificate for `dns_names` (first one is the common name).
    pub fn sign_server(&self, dns_names: Vec<String>) -> Result<Leaf, Error> {
        let cn = dns_names.first().cloned().unwrap_or_default();
        self.sign(&cn, dns_names, ExtendedKeyUsagePurpose::ServerAuth, SERVING_DAYS)
    }

    /// A client certificate with common name `cn`.
    pub fn sign_client(&self, cn: &str) -> Result<Leaf, Error> {
        self.sign(cn, Vec::new(), ExtendedKeyUsagePurpose::ClientAuth, CA_DAYS)
    }

    fn to_secret(&self, name: &str) -> Secret {
        tls_secret(name, &self.cert_pem, &self.key_pem, None)
    }

    fn from_secret(s: &Secret) -> Option<Ca> {
        let d = s.data.as_ref()?;
        let text = |k: &str| d.get(k).map(|b| String::from_utf8_lossy(&b.0).into_owned());
        Some(Ca { cert_pem: text("tls.crt")?, key_pem: text("tls.key")? })
    }
}

/// A `kubernetes.io/tls` Secret, optionally with `ca.crt`.
pub fn tls_secret(name: &str, cert: &str, key: &str, ca: Option<&str>) -> Secret {
    let mut data = BTreeMap::from([
        ("tls.crt".to_owned(), ByteString(cert.as_bytes().to_vec())),
        ("tls.key".to_owned(), ByteString(key.as_bytes().to_vec())),
    ]);
    if let Some(ca) = ca {
        data.insert("ca.crt".to_owned(), ByteString(ca.as_bytes().to_vec()));
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([(consts::label::APP.to_owned(), consts::label::APP_VALUE.to_owned())])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Default::default()
    }
}

/// The two CAs of the upload path.
#[derive(Clone, Debug)]
pub struct UploadPki {
    /// Signs upload-server serving certificates.
    pub server_ca: Ca,
    /// Signs the proxy's client certificate; upload servers trust it.
    pub client_ca: Ca,
}

async fn get_or_create_ca(secrets: &Api<Secret>, name: &str) -> Result<Ca, Error> {
    let kube_err = |source| Error::Kube { what: format!("Secret {name}"), source };
    if let Some(s) = secrets.get_opt(name).await.map_err(kube_err)? {
        return Ca::from_secret(&s).ok_or_else(|| Error::Incomplete(name.into()));
    }
    let ca = Ca::generate(name)?;
    match secrets.create(&PostParams::default(), &ca.to_secret(name)).await {
        Ok(_) => Ok(ca),
        // Another replica won the race: use its CA.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let s = secrets.get(name).await.map_err(kube_err)?;
            Ca::from_secret(&s).ok_or_else(|| Error::Incomplete(name.into()))
        }
        Err(e) => Err(kube_err(e)),
    }
}

async fn ensure_bundle(maps: &Api<ConfigMap>, name: &str, pem: &str) -> Result<(), Error> {
    let cm = ConfigMap {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        data: Some(BTreeMap::from([(BUNDLE_KEY.to_owned(), pem.to_owned())])),
        ..Default::default()
    };
    let kube_err = |source| Error::Kube { what: format!("ConfigMap {name}"), source };
    match maps.get_opt(name).await.map_err(kube_err)? {
        Some(existing) if existing.data == cm.data => Ok(()),
        Some(_) => maps.replace(name, &PostParams::default(), &cm).await.map(|_| ()).map_err(kube_err),
        None => match maps.create(&PostParams::default(), &cm).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(kube_err(e)),
        },
    }
}

/// Loads or creates the upload PKI in `namespace`: both CAs, their bundles and the proxy's client certificate.
pub async fn ensure(client: Client, namespace: &str) -> Result<UploadPki, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let maps: Api<ConfigMap> = Api::namespaced(client, namespace);
    let server_ca = get_or_create_ca(&secrets, SERVER_SIGNER).await?;
    let client_ca = get_or_create_ca(&secrets, CLIENT_SIGNER).await?;
    ensure_bundle(&maps, SERVER_SIGNER_BUNDLE, &server_ca.cert_pem).await?;
    ensure_bundle(&maps, CLIENT_SIGNER_BUNDLE, &client_ca.cert_pem).await?;
    let kube_err = |source| Error::Kube { what: format!("Secret {CLIENT_CERT}"), source };
    if secrets.get_opt(CLIENT_CERT).await.map_err(kube_err)?.is_none() {
        let leaf = client_ca.sign_client(consts::UPLOAD_CLIENT_NAME)?;
        match secrets
            .create(&PostParams::default(), &tls_secret(CLIENT_CERT, &leaf.cert_pem, &leaf.key_pem, None))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(kube_err(e)),
        }
    }
    Ok(UploadPki { server_ca, client_ca })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_server_and_client_certificates() {
        let ca = Ca::generate("test-ca").unwrap_or_else(|e| panic!("{e}"));
        let leaf =
            ca.sign_server(vec!["cdi-upload-d.ns.svc".into(), "cdi-upload-d".into()]).unwrap_or_else(|e| panic!("{e}"));
        assert!(leaf.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(leaf.key_pem.contains("PRIVATE KEY"));
        assert!(leaf.not_after.ends_with('Z'), "{}", leaf.not_after);
        let c = ca.sign_client(consts::UPLOAD_CLIENT_NAME).unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(c.cert_pem, leaf.cert_pem);
        let s = ca.to_secret("x");
        let back = Ca::from_secret(&s).unwrap_or_else(|| panic!("round trip"));
        assert_eq!(back.cert_pem, ca.cert_pem);
    }
}
