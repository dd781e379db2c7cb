//! The upload proxy (Deployment `cdi-uploadproxy`, binary `uploadproxy`): checks the bearer token, waits for
//! the PVC's upload pod, rewrites the path by content type and streams the request to that pod.
//!
//! ```text
//! request ─► route ─► bearer (400) ─► token::verify (401) ─► payload check (400)
//!         ─► readiness: poll the PVC every 1 s for ≤ 10 s (503 + reason) ─► rewrite_path (503)
//!         ─► EndpointSlices of Service cdi-upload-<pvc> → ready pod IP:8443 (503 when none)
//!         ─► mTLS (client cert CN client.upload-server.cdi.kubevirt.io, server name
//!            cdi-upload-<pvc>.<ns>.svc, CA cdi-uploadserver-signer-bundle) ─► body streamed both ways
//! ```
//!
//! The body is handed to the backend connection as it arrives (hyper's backpressure), so memory per upload is
//! a few buffers whatever the image size. The cluster is behind the [`Cluster`] trait ([`KubeCluster`] in
//! production, fakes in tests).

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{self, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use tokio::net::{TcpListener, TcpStream};

use contracts::cdi::consts::ann;
use contracts::cdi::{ClaimOptions, WorkerPhase, WorkerState};

use crate::http::{Body, ConnInfo, empty, html_escape, text};
use crate::token;

/// Upload server port.
pub const UPLOAD_SERVER_PORT: u16 = crds::cdi::consts::WORKER_PORT as u16;
/// The proxy's upload paths (upstream `ProxyPaths`).
pub const PROXY_PATHS: [&str; 8] = [
    "/v1beta1/upload",
    "/v1alpha1/upload",
    "/v1beta1/upload-async",
    "/v1alpha1/upload-async",
    "/v1beta1/upload-form",
    "/v1alpha1/upload-form",
    "/v1beta1/upload-form-async",
    "/v1alpha1/upload-form-async",
];
/// Upstream's proxy → server timeout.
const PROXY_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The environment is unusable.
    #[error("invalid {name}: {message}")]
    Config {
        /// Variable name.
        name: &'static str,
        /// What is wrong.
        message: String,
    },
    /// TLS material could not be loaded.
    #[error("TLS setup failed")]
    Tls(#[from] controller_runtime::tls::Error),
    /// The token public key is unusable.
    #[error("unable to retrieve apiserver signing key")]
    Key(#[from] token::Error),
    /// Binding the listen address failed.
    #[error("binding {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result alias of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed cluster lookup.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ClusterError(pub String);

/// What the proxy asks the cluster.
pub trait Cluster: Send + Sync + 'static {
    /// The PVC `ns/name`, `None` when it does not exist.
    fn pvc(
        &self,
        ns: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<PersistentVolumeClaim>, ClusterError>> + Send;
    /// A ready endpoint (pod IP and port) of Service `ns/service`, `None` when there is none.
    fn endpoint(
        &self,
        ns: &str,
        service: &str,
    ) -> impl Future<Output = Result<Option<SocketAddr>, ClusterError>> + Send;
}

/// [`Cluster`] over the Kubernetes API: PVCs, and EndpointSlices labelled `kubernetes.io/service-name`
/// (no DNS or kube-proxy needed).
#[derive(Clone)]
pub struct KubeCluster {
    client: kube::Client,
}

impl KubeCluster {
    /// Uses `client`.
    pub fn new(client: kube::Client) -> Self {
        KubeCluster { client }
    }
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster").finish_non_exhaustive()
    }
}

impl Cluster for KubeCluster {
    async fn pvc(&self, ns: &str, name: &str) -> Result<Option<PersistentVolumeClaim>, ClusterError> {
        let api: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(self.client.clone(), ns);
        api.get_opt(name).await.map_err(|e| ClusterError(format!("getting PVC {ns}/{name}: {e}")))
    }

    async fn endpoint(&self, ns: &str, service: &str) -> Result<Option<SocketAddr>, ClusterError> {
        let api: kube::Api<EndpointSlice> = kube::Api::namespaced(self.client.clone(), ns);
        let lp = kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={service}"));
        let list =
            api.list(&lp).await.map_err(|e| ClusterError(format!("listing EndpointSlices of {ns}/{service}: {e}")))?;
        Ok(list.items.iter().find_map(ready_endpoint))
    }
}

/// The first ready endpoint address of a slice, with the slice's port (default 8443).
pub fn ready_endpoint(slice: &EndpointSlice) -> Option<SocketAddr> {
    let port = slice
        .ports
        .as_ref()
        .and_then(|ps| ps.iter().find_map(|p| p.port))
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(UPLOAD_SERVER_PORT);
    slice.endpoints.iter().find_map(|ep| {
        let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
        if !ready {
            return None;
        }
        ep.addresses.iter().find_map(|a| a.parse::<std::net::IpAddr>().ok()).map(|ip| SocketAddr::new(ip, port))
    })
}

/// The proxy's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address (`UPLOADPROXY_LISTEN`, default `0.0.0.0:8443`).
    pub listen: SocketAddr,
    /// Serving certificate and key (`UPLOADPROXY_TLS_CERT_FILE`/`UPLOADPROXY_TLS_KEY_FILE`); self-signed at
    /// start when unset.
    pub serving: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// `APISERVER_PUBLIC_KEY`: PEM public key of the token signer.
    pub public_key_pem: String,
    /// Client certificate for upload servers (`UPLOADSERVER_CLIENT_CERT_FILE`, default
    /// `/etc/uploadserver-client/tls.crt`).
    pub client_cert: std::path::PathBuf,
    /// Its key (`UPLOADSERVER_CLIENT_KEY_FILE`, default `/etc/uploadserver-client/tls.key`).
    pub client_key: std::path::PathBuf,
    /// CA bundle of upload-server serving certificates (`UPLOADSERVER_CA_BUNDLE_FILE`, default
    /// `/etc/uploadserver-ca/ca-bundle.crt`).
    pub server_ca: std::path::PathBuf,
    /// How long to wait for the upload pod (10 s upstream).
    pub ready_timeout: Duration,
    /// Poll interval (1 s upstream).
    pub ready_interval: Duration,
}

impl Config {
    /// Reads the proxy's environment.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<Config> {
        let get = |k: &str| env.get(k).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        let listen = get("UPLOADPROXY_LISTEN").unwrap_or_else(|| String::from("0.0.0.0:8443"));
        let listen =
            listen.parse().map_err(|_| Error::Config { name: "UPLOADPROXY_LISTEN", message: format!("{listen:?}") })?;
        let serving = match (get("UPLOADPROXY_TLS_CERT_FILE"), get("UPLOADPROXY_TLS_KEY_FILE")) {
            (Some(c), Some(k)) => Some((c.into(), k.into())),
            (None, None) => None,
            _ => {
                return Err(Error::Config {
                    name: "UPLOADPROXY_TLS_CERT_FILE",
                    message: "set both UPLOADPROXY_TLS_CERT_FILE and UPLOADPROXY_TLS_KEY_FILE, or neither".into(),
                });
            }
        };
        Ok(Config {
            listen,
            serving,
            public_key_pem: get("APISERVER_PUBLIC_KEY")
                .ok_or_else(|| Error::Config { name: "APISERVER_PUBLIC_KEY", message: "not set".into() })?,
            client_cert: get("UPLOADSERVER_CLIENT_CERT_FILE")
                .unwrap_or_else(|| "/etc/uploadserver-client/tls.crt".into())
                .into(),
            client_key: get("UPLOADSERVER_CLIENT_KEY_FILE")
                .unwrap_or_else(|| "/etc/uploadserver-client/tls.key".into())
                .into(),
            server_ca: get("UPLOADSERVER_CA_BUNDLE_FILE")
                .unwrap_or_else(|| "/etc/uploadserver-ca/ca-bundle.crt".into())
                .into(),
            ready_timeout: Duration::from_secs(10),
            ready_interval: Duration::from_secs(1),
        })
    }
}

/// Extracts the token from an `Authorization` value (upstream's `(?i)^Bearer\s+([A-Za-z0-9\-\._~\+\/]+)$`).
pub fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let tok = rest.trim_start_matches(|c: char| c.is_ascii_whitespace() || c == '\u{0b}');
    let ok = tok.len() < rest.len()
        && !tok.is_empty()
        && tok.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b));
    ok.then_some(tok)
}

/// The path to use on the upload server for a PVC's content type (upstream's rewrite).
pub fn rewrite_path(path: &str, content_type: Option<&str>) -> Result<String, String> {
    match content_type.unwrap_or("") {
        "" | "kubevirt" => Ok(path.to_owned()),
        "archive" if path.contains("alpha") => Ok(String::from("/v1alpha1/upload-archive")),
        "archive" => Ok(String::from("/v1beta1/upload-archive")),
        other => Err(format!("rejecting upload request with unsupported content type {other}")),
    }
}

/// Verdict of one readiness poll on a PVC's annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    /// The upload pod is ready.
    Ready,
    /// Not yet: poll again.
    NotReady,
    /// Never: answer 503 with this reason.
    Refused(String),
}

/// Upstream's `UploadPossibleForPVC` plus the phase and ready checks.
pub fn readiness(pvc_name: &str, annotations: &BTreeMap<String, String>) -> Readiness {
    if !annotations.contains_key(ann::UPLOAD_TARGET) {
        return Readiness::Refused(format!("PVC {pvc_name} is not an upload target"));
    }
    let state = WorkerState::of(annotations);
    if state.phase == Some(WorkerPhase::Succeeded) {
        return Readiness::Refused(format!(
            "rejecting Upload Request for PVC {pvc_name} that already finished uploading"
        ));
    }
    if state.ready { Readiness::Ready } else { Readiness::NotReady }
}

/// Name of the upload server Service/pod of a PVC (`cdi-upload-<pvc>`, shortened when too long).
pub fn upload_service_name(pvc: &str) -> String {
    crds::cdi::naming::upload_server(pvc)
}

/// The PVC that actually receives the upload: PVC′ for a `VolumeUploadSource` populator claim (when known).
fn populator_prime(pvc: &PersistentVolumeClaim) -> Option<Option<String>> {
    let r = pvc.spec.as_ref()?.data_source_ref.as_ref()?;
    (r.kind == "VolumeUploadSource")
        .then(|| pvc.metadata.annotations.as_ref().and_then(|a| ClaimOptions::of(a).pvc_prime))
}

struct App<C> {
    cfg: Config,
    cluster: Arc<C>,
    key: jsonwebtoken::DecodingKey,
    client_tls: Arc<rustls::ClientConfig>,
}

/// Waits for the PVC's upload pod; returns the effective PVC name and its content type.
async fn upload_ready<C: Cluster>(app: &App<C>, ns: &str, name: &str) -> Result<(String, Option<String>), String> {
    let start = Instant::now();
    loop {
        let pvc = app
            .cluster
            .pvc(ns, name)
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("rejecting Upload Request for PVC {name} that doesn't exist"))?;
        let target = match populator_prime(&pvc) {
            None => Some((name.to_owned(), pvc)),
            Some(None) => None, // PVC′ not created yet
            Some(Some(prime)) => app.cluster.pvc(ns, &prime).await.map_err(|e| e.to_string())?.map(|p| (prime, p)),
        };
        if let Some((eff, p)) = target {
            let annotations = p.metadata.annotations.clone().unwrap_or_default();
            match readiness(name, &annotations) {
                Readiness::Ready => return Ok((eff, annotations.get(ann::CONTENT_TYPE).cloned())),
                Readiness::Refused(m) => return Err(m),
                Readiness::NotReady => {}
            }
        }
        if start.elapsed() + app.cfg.ready_interval > app.cfg.ready_timeout {
            return Err(String::from("timed out waiting for the condition"));
        }
        tokio::time::sleep(app.cfg.ready_interval).await;
    }
}

fn with_cors(mut r: Response<Body>, origin: bool) -> Response<Body> {
    if origin {
        r.headers_mut().insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, HeaderValue::from_static("*"));
    }
    r
}

fn proxy_error(e: impl std::fmt::Display) -> Response<Body> {
    tracing::error!("Error proxying: {e}");
    text(StatusCode::INTERNAL_SERVER_ERROR, format!("error in upload-proxy: {e}"))
}

const HOP_BY_HOP: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "host",
    "authorization",
    "proxy-connection",
];

async fn forward<C: Cluster>(
    app: &App<C>,
    req: Request<Incoming>,
    addr: SocketAddr,
    server_name: &str,
    path: &str,
) -> Result<Response<Body>, String> {
    let name = controller_runtime::tls::server_name(server_name).map_err(|e| e.to_string())?;
    let tcp = TcpStream::connect(addr).await.map_err(|e| format!("connecting to {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let tls = tokio_rustls::TlsConnector::from(app.client_tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake with {server_name} ({addr}): {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Incoming>(TokioIo::new(tls))
        .await
        .map_err(|e| format!("HTTP handshake with {addr}: {e}"))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("backend connection ended: {e}");
        }
    });
    let (parts, body) = req.into_parts();
    let pq = match parts.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut out = Request::builder().method(parts.method.clone()).uri(pq);
    if let Some(h) = out.headers_mut() {
        for (k, v) in &parts.headers {
            let drop = HOP_BY_HOP.contains(&k.as_str()) || k == header::TRANSFER_ENCODING;
            if !drop {
                h.append(k.clone(), v.clone());
            }
        }
        if let Ok(v) = HeaderValue::from_str(server_name) {
            h.insert(header::HOST, v);
        }
    }
    let out = out.body(body).map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(PROXY_TIMEOUT, sender.send_request(out))
        .await
        .map_err(|_| String::from("timed out"))?
        .map_err(|e| format!("request to {addr}: {e}"))?;
    Ok(resp.map(|b| b.map_err(|e| -> crate::http::BoxError { Box::new(e) }).boxed()))
}

async fn handle_upload<C: Cluster>(app: Arc<App<C>>, req: Request<Incoming>) -> Response<Body> {
    let Some(auth) = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) else {
        return empty(StatusCode::BAD_REQUEST);
    };
    let Some(tok) = bearer_token(auth) else { return empty(StatusCode::BAD_REQUEST) };
    let payload = match token::verify(&app.key, token::UPLOAD_TOKEN_ISSUER, tok, SystemTime::now(), token::TOKEN_LEEWAY)
    {
        Ok(p) => p,
        Err(e) => {
            tracing::info!("rejecting token: {}", contracts::errors::chain_line(&e));
            return empty(StatusCode::UNAUTHORIZED);
        }
    };
    if !payload.is_valid_upload() {
        tracing::error!("Bad token {payload:?}");
        return empty(StatusCode::BAD_REQUEST);
    }
    let (ns, name) = (payload.namespace.as_str(), payload.name.as_str());
    tracing::info!(pvc = name, namespace = ns, "received valid token");
    let (pvc, content_type) = match upload_ready(&app, ns, name).await {
        Ok(r) => r,
        Err(m) => {
            tracing::error!("{m}");
            return text(StatusCode::SERVICE_UNAVAILABLE, html_escape(&m));
        }
    };
    let path = match rewrite_path(req.uri().path(), content_type.as_deref()) {
        Ok(p) => p,
        Err(m) => return text(StatusCode::SERVICE_UNAVAILABLE, html_escape(&m)),
    };
    let svc = upload_service_name(&pvc);
    // The EndpointSlice can trail the pod's readiness by a moment.
    let mut addr = None;
    for _ in 0..10 {
        match app.cluster.endpoint(ns, &svc).await {
            Ok(Some(a)) => {
                addr = Some(a);
                break;
            }
            Ok(None) => tokio::time::sleep(Duration::from_millis(500)).await,
            Err(e) => return proxy_error(e),
        }
    }
    let Some(addr) = addr else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            html_escape(&format!("no ready endpoint for service {ns}/{svc}")),
        );
    };
    let server_name = format!("{svc}.{ns}.svc");
    tracing::info!(method = %req.method(), %addr, %server_name, %path, "proxying");
    match forward(&app, req, addr, &server_name, &path).await {
        Ok(r) => r,
        Err(e) => proxy_error(e),
    }
}

async fn handle<C: Cluster>(app: Arc<App<C>>, req: Request<Incoming>, _conn: Arc<ConnInfo>) -> Response<Body> {
    let origin = req.headers().contains_key(header::ORIGIN);
    if req.method() == Method::OPTIONS
        && origin
        && let Some(m) = req.headers().get(header::ACCESS_CONTROL_REQUEST_METHOD).cloned()
    {
        let mut r = with_cors(empty(StatusCode::NO_CONTENT), true);
        let h = r.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_METHODS, m);
        if let Some(rh) = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS).cloned() {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, rh);
        }
        h.insert(HeaderName::from_static("vary"), HeaderValue::from_static("Origin"));
        return r;
    }
    let path = req.uri().path().to_owned();
    // Whether the client is (still) sending a body that a refusal will leave unread.
    let body_pending = !hyper::body::Body::is_end_stream(req.body());
    let mut r = if path == "/healthz" {
        text(StatusCode::OK, "OK")
    } else if PROXY_PATHS.contains(&path.as_str()) {
        handle_upload(app, req).await
    } else {
        empty(StatusCode::NOT_FOUND)
    };
    // A refusal leaves the body unread, so the connection is closed after the response: say so (as Go's server
    // does), or the client may reuse it for its next request and lose that one to the close.
    if body_pending && !r.status().is_success() {
        r.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    with_cors(r, origin)
}

/// A running proxy.
#[derive(Debug)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    /// PEM of the serving certificate (self-signed when none was configured).
    pub serving_cert_pem: Option<String>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Serves until the task ends (it does not on its own).
    pub async fn wait(self) {
        let _ = self.task.await;
    }

    /// Stops serving.
    pub fn abort(&self) {
        self.task.abort();
    }
}

/// Loads keys and certificates, binds and starts serving.
pub async fn start<C: Cluster>(cfg: Config, cluster: Arc<C>) -> Result<Running> {
    let key = token::decoding_key(cfg.public_key_pem.as_bytes())?;
    let client =
        (controller_runtime::tls::load_certs(&cfg.client_cert)?, controller_runtime::tls::load_key(&cfg.client_key)?);
    let server_ca = controller_runtime::tls::roots(&controller_runtime::tls::load_certs(&cfg.server_ca)?)?;
    let client_tls = controller_runtime::tls::client_config(server_ca, Some(client))?;
    let (chain, skey, pem) = match &cfg.serving {
        Some((c, k)) => (controller_runtime::tls::load_certs(c)?, controller_runtime::tls::load_key(k)?, None),
        None => {
            let names = ["cdi-uploadproxy", "cdi-uploadproxy.cdi", "cdi-uploadproxy.cdi.svc", "localhost"];
            let (c, k, p) = controller_runtime::tls::self_signed(&names.map(String::from))?;
            (c, k, Some(p))
        }
    };
    let tls = controller_runtime::tls::server_config(chain, skey, None)?;
    let listener = TcpListener::bind(cfg.listen).await.map_err(|source| Error::Bind { addr: cfg.listen, source })?;
    let addr = listener.local_addr().map_err(|source| Error::Bind { addr: cfg.listen, source })?;
    let app = Arc::new(App { cfg, cluster, key, client_tls });
    let handler = move |req, conn| handle(app.clone(), req, conn);
    let task = tokio::spawn(crate::http::serve_tls(
        listener,
        tls,
        handler,
        std::future::pending::<()>(),
        Duration::from_secs(5),
    ));
    Ok(Running { addr, serving_cert_pem: pem, task })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer_token("Bearer abc.def-_~+/"), Some("abc.def-_~+/"));
        assert_eq!(bearer_token("bearer   x"), Some("x"));
        assert_eq!(bearer_token("BEARER\tx"), Some("x"));
        assert_eq!(bearer_token("Bearerx"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer a b"), None);
        assert_eq!(bearer_token("Basic dXNlcjpwYXNz"), None);
        assert_eq!(bearer_token("Bearer a=b"), None);
        assert_eq!(bearer_token(""), None);
    }

    #[test]
    fn path_rewrite_by_content_type() {
        assert_eq!(rewrite_path("/v1beta1/upload", None).ok().as_deref(), Some("/v1beta1/upload"));
        assert_eq!(
            rewrite_path("/v1beta1/upload-async", Some("kubevirt")).ok().as_deref(),
            Some("/v1beta1/upload-async")
        );
        assert_eq!(rewrite_path("/v1beta1/upload", Some("archive")).ok().as_deref(), Some("/v1beta1/upload-archive"));
        assert_eq!(
            rewrite_path("/v1alpha1/upload-async", Some("archive")).ok().as_deref(),
            Some("/v1alpha1/upload-archive")
        );
        assert!(rewrite_path("/v1beta1/upload", Some("weird")).is_err());
    }

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn readiness_checks() {
        assert_eq!(readiness("p", &annotations(&[])), Readiness::Refused("PVC p is not an upload target".into()));
        assert_eq!(readiness("p", &annotations(&[(ann::UPLOAD_TARGET, "")])), Readiness::NotReady);
        assert_eq!(
            readiness("p", &annotations(&[(ann::UPLOAD_TARGET, ""), (ann::POD_READY, "false")])),
            Readiness::NotReady
        );
        assert_eq!(
            readiness("p", &annotations(&[(ann::UPLOAD_TARGET, ""), (ann::POD_READY, "true")])),
            Readiness::Ready
        );
        assert_eq!(
            readiness(
                "p",
                &annotations(&[(ann::UPLOAD_TARGET, ""), (ann::POD_READY, "true"), (ann::POD_PHASE, "Succeeded")])
            ),
            Readiness::Refused("rejecting Upload Request for PVC p that already finished uploading".into())
        );
    }

    #[test]
    fn endpoint_from_slice() {
        let slice: EndpointSlice = serde_json::from_value(serde_json::json!({
            "addressType": "IPv4", "metadata": {"name": "s"},
            "ports": [{"name": "", "port": 8443, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.244.0.7"], "conditions": {"ready": false}},
                {"addresses": ["10.244.0.9"], "conditions": {"ready": true}}
            ]
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ready_endpoint(&slice), "10.244.0.9:8443".parse().ok());
        let none: EndpointSlice = serde_json::from_value(serde_json::json!({
            "addressType": "IPv4", "metadata": {"name": "s"}, "endpoints": []
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ready_endpoint(&none), None);
    }

    #[test]
    fn route_list_matches_upstream() {
        assert_eq!(PROXY_PATHS.len(), 8);
        assert!(PROXY_PATHS.iter().all(|p| crate::server::route(p) != crate::server::Route::NotFound));
    }
}
