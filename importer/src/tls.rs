//! Server-side TLS for the importer's own endpoints (pod-mode progress metrics, `importer serve`): a fresh
//! self-signed certificate made at start, for `$HOSTNAME` and `localhost`. Peers either skip verification
//! (CDI's metrics scraper, a clone target with `INSECURE_TLS`) or authenticate by other means (a bearer
//! token), so the certificate only provides encryption.

use std::sync::Arc;

use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// Why a TLS acceptor could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating the self-signed certificate failed.
    #[error("generate self-signed certificate")]
    Certificate(#[source] rcgen::Error),
    /// rustls refused the configuration.
    #[error("configure TLS server")]
    Config(#[source] rustls::Error),
}

/// Makes a TLS acceptor (aws-lc-rs, TLS 1.2 and 1.3) with a fresh self-signed certificate for `$HOSTNAME` and
/// `localhost`.
pub fn self_signed_acceptor() -> Result<TlsAcceptor, TlsError> {
    let hostname = std::env::var("HOSTNAME").unwrap_or_else(|_| String::from("localhost"));
    let ck =
        rcgen::generate_simple_self_signed(vec![hostname, String::from("localhost")]).map_err(TlsError::Certificate)?;
    let cert = ck.cert.der().clone();
    let key = PrivateKeyDer::from(PrivatePkcs8KeyDer::from(ck.signing_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Config)?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(TlsError::Config)?;
    Ok(TlsAcceptor::from(Arc::new(cfg)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_an_acceptor() {
        assert!(self_signed_acceptor().is_ok());
    }
}
