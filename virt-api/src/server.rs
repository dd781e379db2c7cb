//! The HTTPS server of the webhooks (upstream virt-api's webhook endpoints): `POST` of an `AdmissionReview` on each
//! webhook's path ([`Webhook::path`]), `GET /healthz`. TLS through `controller_runtime::tls` (the one accept
//! loop); the certificate is the mounted Secret's (`tls.crt`/`tls.key`) or, for development, a self-signed one.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use controller_runtime::tls;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpListener;

use crate::config::Config;
use crate::defaults::Fresh;
use crate::lookup::{self, Lookups};
use crate::subresources::Subresources;
use crate::webhook::{Webhook, review_with};
use controller_runtime::aggregated::RequestHeaderConfig;

/// Largest request body accepted (an AdmissionReview carries the object twice at most; objects are ≤ 1.5 MiB).
pub const MAX_BODY: usize = 8 << 20;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate or key could not be loaded, or the TLS configuration built.
    #[error("TLS setup")]
    Tls(#[from] tls::Error),
    /// The front proxy's CA could not be used.
    #[error("front-proxy client CA")]
    FrontProxy(#[from] controller_runtime::aggregated::Error),
    /// The listen address could not be bound.
    #[error("binding {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Certificate {
    /// PEM files (the mounted Secret's `tls.crt` and `tls.key`).
    Files {
        /// The certificate chain.
        cert: PathBuf,
        /// The private key.
        key: PathBuf,
    },
    /// A fresh self-signed certificate for these DNS names (the API server cannot verify it without its CA:
    /// development only).
    SelfSigned(Vec<String>),
}

/// The server's TLS configuration for `certificate`; with `front_proxy`, clients may present the front proxy's
/// client certificate (the aggregated API's requests).
pub fn tls_config(
    certificate: &Certificate,
    front_proxy: Option<&RequestHeaderConfig>,
) -> Result<Arc<rustls::ServerConfig>, Error> {
    let (chain, key) = match certificate {
        Certificate::Files { cert, key } => (tls::load_certs(cert)?, tls::load_key(key)?),
        Certificate::SelfSigned(names) => {
            let (chain, key, _) = tls::self_signed(names)?;
            (chain, key)
        }
    };
    match front_proxy {
        Some(auth) => Ok(controller_runtime::aggregated::front_proxy_tls(auth, chain, key)?),
        None => Ok(tls::server_config(chain, key, None)?),
    }
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Waits until the server stopped (after its shutdown future resolved and connections drained).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Binds `listen` and serves the webhooks with `config`, and the aggregated API with `subresources` (`None`: not
/// configured, its paths answer 503), until `shutdown` resolves.
pub async fn start(
    listen: SocketAddr,
    tls: Arc<rustls::ServerConfig>,
    config: Arc<Config>,
    client: Option<kube::Client>,
    subresources: Option<Arc<Subresources>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<Running, Error> {
    let listener = TcpListener::bind(listen).await.map_err(|source| Error::Bind { addr: listen, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: listen, source })?;
    let handler = move |req: Request<Incoming>, peer: Arc<tls::Peer>| {
        handle(req, peer, config.clone(), client.clone(), subresources.clone())
    };
    let task = tokio::spawn(tls::serve_tls(listener, tls, handler, shutdown, Duration::from_secs(5)));
    Ok(Running { addr, task })
}

/// A response with `status`, `content_type` and `body`.
pub(crate) fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    r
}

async fn handle(
    req: Request<Incoming>,
    peer: Arc<tls::Peer>,
    config: Arc<Config>,
    client: Option<kube::Client>,
    subresources: Option<Arc<Subresources>>,
) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    if path.starts_with("/apis/") {
        return match subresources {
            Some(s) => crate::subresources::handle(req, peer.common_name(), s).await,
            None => respond(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "the subresource API is not configured\n"),
        };
    }
    if path == "/healthz" && req.method() == Method::GET {
        return respond(StatusCode::OK, "text/plain", "ok");
    }
    // As upstream's virt-api: the metrics on the HTTPS port, without client authentication.
    if path == "/metrics" && req.method() == Method::GET {
        let text = subresources.map(|s| s.metrics.render()).unwrap_or_default();
        return respond(StatusCode::OK, "text/plain; version=0.0.4", text);
    }
    let Some(webhook) = Webhook::for_path(&path) else {
        return respond(StatusCode::NOT_FOUND, "text/plain", "404 page not found\n");
    };
    if req.method() != Method::POST {
        return respond(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "");
    }
    // Upstream refuses anything but JSON with a bare 400.
    let json = req.headers().get(hyper::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes() == b"application/json");
    if !json {
        return respond(StatusCode::BAD_REQUEST, "text/plain", "");
    }
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            tracing::debug!(%path, "reading the request failed: {e}");
            return respond(StatusCode::BAD_REQUEST, "text/plain", "");
        }
    };
    if webhook.is_eviction() {
        let answer = crate::evict::review(client.as_ref(), &body, &config).await;
        let allowed = answer.pointer("/response/allowed").and_then(serde_json::Value::as_bool);
        tracing::debug!(webhook = webhook.name(), ?allowed, "eviction review");
        return respond(StatusCode::OK, "application/json", answer.to_string());
    }
    let lookups = match (&client, webhook) {
        (Some(c), Webhook::ValidateVm) => lookup::for_vm_review(c, &body).await,
        (Some(c), Webhook::ValidateMigrationCreate) => lookup::for_migration_review(c, &body).await,
        _ => Lookups::default(),
    };
    let answer = review_with(webhook, &body, &config, Fresh::generate, &lookups);
    let allowed = answer.pointer("/response/allowed").and_then(serde_json::Value::as_bool);
    tracing::debug!(webhook = webhook.name(), ?allowed, "admission review");
    respond(StatusCode::OK, "application/json", answer.to_string())
}
