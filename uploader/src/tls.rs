//! TLS plumbing shared by the three servers: PEM loading, rustls configurations (aws-lc-rs), self-signed
//! certificates made at start, and the peer certificate's common name.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A PEM file could not be read or holds nothing usable.
    #[error("reading {what} from {path}: {message}")]
    Pem {
        /// What was expected (certificates, private key).
        what: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Building a rustls configuration failed.
    #[error("TLS configuration")]
    Config(#[source] rustls::Error),
    /// Building a client-certificate verifier failed.
    #[error("client certificate verifier: {0}")]
    Verifier(String),
    /// Generating a certificate failed.
    #[error("generating a certificate: {0}")]
    Generate(String),
    /// A server name is not valid for TLS.
    #[error("invalid TLS server name {0:?}")]
    ServerName(String),
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// Certificates in a PEM string (at least one).
pub fn certs_from_pem(pem: &[u8], origin: &str) -> Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| Error::Pem {
        what: "certificates",
        path: origin.to_owned(),
        message: e.to_string(),
    })?;
    if certs.is_empty() {
        return Err(Error::Pem { what: "certificates", path: origin.to_owned(), message: "no certificate".into() });
    }
    Ok(certs)
}

/// The private key in a PEM string.
pub fn key_from_pem(pem: &[u8], origin: &str) -> Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| Error::Pem {
        what: "private key",
        path: origin.to_owned(),
        message: e.to_string(),
    })
}

fn read(path: &Path, what: &'static str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::Pem { what, path: path.display().to_string(), message: e.to_string() })
}

/// Certificates in a PEM file.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    certs_from_pem(&read(path, "certificates")?, &path.display().to_string())
}

/// The private key in a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    key_from_pem(&read(path, "private key")?, &path.display().to_string())
}

/// A root store holding `certs`.
pub fn roots(certs: &[CertificateDer<'static>]) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    for c in certs {
        store.add(c.clone()).map_err(Error::Config)?;
    }
    Ok(store)
}

/// A server configuration presenting `chain`/`key`. With `client_cas`, clients *may* present a certificate,
/// which must then chain to one of them (Go's `VerifyClientCertIfGiven`); whether a request needs one is the
/// handler's decision. Offers HTTP/1.1 only.
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    client_cas: Option<RootCertStore>,
) -> Result<Arc<ServerConfig>> {
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(Error::Config)?;
    let builder = match client_cas {
        Some(store) => {
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(store), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| Error::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(v)
        }
        None => builder.with_no_client_auth(),
    };
    let mut cfg = builder.with_single_cert(chain, key).map_err(Error::Config)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// A client configuration trusting `roots` and presenting `client` (chain, key) when given.
pub fn client_config(
    roots: RootCertStore,
    client: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
) -> Result<Arc<ClientConfig>> {
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(Error::Config)?
        .with_root_certificates(roots);
    let cfg = match client {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).map_err(Error::Config)?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}

/// A TLS server name.
pub fn server_name(name: &str) -> Result<ServerName<'static>> {
    ServerName::try_from(name.to_owned()).map_err(|_| Error::ServerName(name.to_owned()))
}

/// A fresh self-signed certificate (P-256) for `names`: (chain, key, certificate PEM).
pub fn self_signed(names: &[String]) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>, String)> {
    let ck = rcgen::generate_simple_self_signed(names.to_vec()).map_err(|e| Error::Generate(e.to_string()))?;
    let pem = ck.cert.pem();
    let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der()).map_err(|e| Error::Generate(e.to_string()))?;
    Ok((vec![ck.cert.der().clone()], key, pem))
}

/// The subject common name of a DER certificate.
pub fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    cert.subject().iter_common_name().next().and_then(|cn| cn.as_str().ok()).map(str::to_owned)
}

/// The common name of the verified client certificate of a TLS connection, if it presented one.
pub fn peer_common_name(conn: &rustls::ServerConnection) -> Option<String> {
    conn.peer_certificates().and_then(|c| c.first()).and_then(|c| common_name(c.as_ref()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_name_of_generated_certificates() {
        let mut params = rcgen::CertificateParams::new(vec![String::from("x")]).unwrap_or_else(|e| panic!("{e}"));
        params.distinguished_name.push(rcgen::DnType::CommonName, "client.upload-server.cdi.kubevirt.io");
        let kp = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let cert = params.self_signed(&kp).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(common_name(cert.der()).as_deref(), Some("client.upload-server.cdi.kubevirt.io"));
        assert_eq!(common_name(b"garbage"), None);
        let (chain, _, pem) = self_signed(&[String::from("localhost")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(certs_from_pem(pem.as_bytes(), "mem").map(|c| c.len()).ok(), Some(1));
        assert_eq!(chain.len(), 1);
        assert!(certs_from_pem(b"nothing", "mem").is_err());
    }
}
