//! The TLS servers of every binary (the importer's clone source and pod-mode metrics; the upload server, upload
//! proxy and token API server; admission webhooks): PEM loading, rustls configurations (aws-lc-rs), self-signed
//! certificates made at start, the peer certificate's common name, and the one TLS accept loop ([`serve_tls`]:
//! HTTP/1.1, graceful shutdown, Go-style connection close).
//!
//! The importer's own endpoints use a fresh self-signed certificate ([`self_signed_config`]): their peers either
//! skip verification (CDI's metrics scraper, a clone target with `INSECURE_TLS`) or authenticate by other means (a
//! bearer token), so the certificate only provides encryption.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::net::TcpListener;

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

/// A server configuration presenting a fresh self-signed certificate for `$HOSTNAME` and `localhost`, without
/// client authentication.
pub fn self_signed_config() -> Result<Arc<ServerConfig>> {
    let hostname = std::env::var("HOSTNAME").unwrap_or_else(|_| String::from("localhost"));
    let (chain, key, _) = self_signed(&[hostname, String::from("localhost")])?;
    server_config(chain, key, None)
}

/// What a handler of [`serve_tls`] knows about the connection.
#[derive(Debug, Clone)]
pub struct Peer {
    /// The client's address.
    pub addr: SocketAddr,
    /// The client's certificate chain, verified during the handshake (empty when it presented none).
    pub certificates: Vec<CertificateDer<'static>>,
}

impl Peer {
    /// The common name of the verified client certificate, if it presented one.
    pub fn common_name(&self) -> Option<String> {
        self.certificates.first().and_then(|c| common_name(c.as_ref()))
    }
}

/// Serves HTTP/1.1 over TLS on `listener` until `shutdown` resolves, then stops accepting and waits up to
/// `drain` for open connections to finish their current response (connections still open then are left to the
/// runtime). `handler` gets each request and the connection's [`Peer`]. The TLS handshake must finish within
/// 10 s; a connection the server answers before the client finished sending is closed as Go's `net/http` does
/// ([`linger_close`]). A response `101 Switching Protocols` hands the connection to whoever awaits
/// `hyper::upgrade::on` of its request (console streams); the drain does not wait for such streams.
pub async fn serve_tls<H, F, B, S>(
    listener: TcpListener,
    tls: Arc<ServerConfig>,
    handler: H,
    shutdown: S,
    drain: Duration,
) where
    H: Fn(Request<Incoming>, Arc<Peer>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S: Future<Output = ()>,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    // hyper-util's GracefulShutdown cannot watch connections with upgrades: every connection task holds a
    // receiver; the server's stop is a send, and the drain is over when the last receiver is gone.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (tcp, remote) = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let handler = handler.clone();
        let mut stopped = stop_rx.clone();
        // A second descriptor of the socket, so that dropping the connection does not close it (see
        // [`linger_close`]).
        let linger = tcp.as_fd().try_clone_to_owned().ok();
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%remote, "TLS handshake failed: {e}");
                    return;
                }
                Err(_) => return,
            };
            let certificates = stream.get_ref().1.peer_certificates().map(<[CertificateDer<'_>]>::to_vec);
            let info = Arc::new(Peer { addr: remote, certificates: certificates.unwrap_or_default() });
            // Set when a response switched protocols: the socket then belongs to the upgraded stream, which
            // outlives this task, and must not be shut down here.
            let upgraded = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let switched = upgraded.clone();
            let svc = hyper::service::service_fn(move |req| {
                let fut = handler(req, info.clone());
                let switched = switched.clone();
                async move {
                    let response = fut.await;
                    if response.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
                        switched.store(true, std::sync::atomic::Ordering::SeqCst);
                    }
                    Ok::<_, Infallible>(response)
                }
            });
            let conn =
                hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).with_upgrades();
            tokio::pin!(conn);
            let r = tokio::select! {
                r = conn.as_mut() => r,
                _ = stopped.changed() => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            drop(stopped);
            if let Err(e) = r {
                tracing::debug!(%remote, "connection ended: {e}");
            }
            if let Some(fd) = linger
                && !upgraded.load(std::sync::atomic::Ordering::SeqCst)
            {
                linger_close(fd).await;
            }
        });
    }
    drop(stop_rx);
    let _ = stop_tx.send(true);
    if tokio::time::timeout(drain, stop_tx.closed()).await.is_err() {
        tracing::warn!("connections still open after {drain:?}; closing");
    }
}

/// How long a closed connection keeps draining what the client still sends (Go's `rstAvoidanceDelay` is 500 ms).
const LINGER: Duration = Duration::from_secs(1);

/// Closes a connection the way Go's `net/http` does (`closeWriteAndWait`): a response sent before the request
/// body was consumed (400/401/503, an upload server refusing early) ends the connection with the client still
/// sending. Closing the socket at once makes the kernel answer those bytes with a RST, and the client then often
/// loses the response (`Broken pipe` / `Connection reset` instead of the status). So: send FIN, read and discard
/// until the client closes or [`LINGER`] passes, then close.
async fn linger_close(fd: std::os::fd::OwnedFd) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let std = std::net::TcpStream::from(fd);
    if std.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(mut s) = tokio::net::TcpStream::from_std(std) else { return };
    let _ = s.shutdown().await;
    let mut buf = vec![0u8; 16 << 10];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = s.read(&mut buf).await
            && n > 0
        {}
    })
    .await;
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
        assert!(self_signed_config().is_ok());
        let (chain, _, pem) = self_signed(&[String::from("localhost")]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(certs_from_pem(pem.as_bytes(), "mem").map(|c| c.len()).ok(), Some(1));
        assert_eq!(chain.len(), 1);
        assert!(certs_from_pem(b"nothing", "mem").is_err());
    }
}
