//! The node API ([`contracts::kubevirt::node_api`], port 8186): what virt-api asks of this node's VMIs.
//!
//! ```text
//! TLS (client certificate of virt-api, checked here) ─► handle
//!   ─► authorize (the certificate's CN)     401 without one, 403 for another name
//!   ─► Command::parse, method              404 / 405
//!   ─► the VMI (API GET) and its launcher pod on this node (pod cache)      404 / 400
//!   ─► console / vnc: Sessions::open (one per VMI and kind; the new one closes the old, or with
//!      preserveSession a live VNC session refuses it: 503) ─► connect the pod's QEMU socket ─► 101 ─► copy bytes
//!   ─► pause / unpause: libvirt suspend / resume of the domain ─► 200 (the reconciler reports `Paused`)
//!   ─► screenshot: libvirt's screenshot of the display ─► screenshot::to_png ─► 200 image/png
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use contracts::kubevirt::launcher::{SocketDir, domain_name};
use contracts::kubevirt::node_api::{self, Command};
use controller_runtime::api::is_not_found;
use controller_runtime::tls;
use crds::kubevirt::VirtualMachineInstance;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use tokio::net::{TcpListener, UnixStream};

use crate::agent::{active_pod, blocking};
use crate::libvirt::{ErrorKind, Libvirt};
use crate::screenshot;

/// Largest screenshot read from libvirt (a 4096×4096 PPM is 48 MiB).
const MAX_SCREENSHOT: usize = 64 << 20;

/// Errors of starting the server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The certificate, key or CA could not be loaded.
    #[error("TLS setup of the node API")]
    Tls(#[from] tls::Error),
    /// The listen address could not be bound.
    #[error("binding the node API on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// The server's TLS configuration from the mounted Secret in `dir` (`tls.crt`, `tls.key`, and `ca.crt`, the CA
/// virt-api's client certificate must chain to).
pub fn tls_config(dir: &std::path::Path) -> Result<Arc<rustls::ServerConfig>, Error> {
    let chain = tls::load_certs(&dir.join("tls.crt"))?;
    let key = tls::load_key(&dir.join("tls.key"))?;
    let cas = tls::roots(&tls::load_certs(&dir.join("ca.crt"))?)?;
    Ok(tls::server_config(chain, key, Some(cas))?)
}

/// The client configuration of the migration proxies from the Secret mounted at `dir` (`tls.crt`, `tls.key`: the
/// client certificate; `ca.crt`: the CA the other agents' serving certificate is verified against).
pub fn client_tls_config(dir: &std::path::Path) -> Result<Arc<rustls::ClientConfig>, Error> {
    let chain = tls::load_certs(&dir.join("tls.crt"))?;
    let key = tls::load_key(&dir.join("tls.key"))?;
    let roots = tls::roots(&tls::load_certs(&dir.join("ca.crt"))?)?;
    Ok(tls::client_config(roots, Some((chain, key)))?)
}

/// Which stream of a VMI a session is attached to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum StreamKind {
    Console,
    Vnc,
}

/// The attached streams: one per VMI (by UID) and kind. Replacing an entry drops its sender, which ends the
/// old session's copy.
#[derive(Default)]
struct Sessions {
    next: u64,
    open: HashMap<(String, StreamKind), (u64, tokio::sync::oneshot::Sender<()>)>,
}

/// The state the handlers share.
struct Node {
    client: Client,
    node: String,
    pods: Store<Pod>,
    sessions: Mutex<Sessions>,
}

impl Node {
    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Binds `listen` and serves the node API with `tls` for the VMIs of `node` until `shutdown` resolves.
pub async fn start(
    listen: SocketAddr,
    tls_config: Arc<rustls::ServerConfig>,
    client: Client,
    node: String,
    pods: Store<Pod>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let listener = TcpListener::bind(listen).await.map_err(|source| Error::Bind { addr: listen, source })?;
    let state = Arc::new(Node { client, node, pods, sessions: Mutex::new(Sessions::default()) });
    let handler = move |req: Request<Incoming>, peer: Arc<tls::Peer>| handle(req, peer, state.clone());
    tracing::info!(%listen, "node API listening");
    Ok(tokio::spawn(tls::serve_tls(listener, tls_config, handler, shutdown, Duration::from_secs(5))))
}

fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut body: String = body.into();
    body.push('\n');
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/plain"));
    r
}

/// Whether `peer` is virt-api: `Err` is the refusal's status and text.
fn authorize(peer: &tls::Peer) -> Result<(), (StatusCode, String)> {
    match peer.common_name() {
        None => Err((StatusCode::UNAUTHORIZED, "a client certificate is required".into())),
        Some(cn) if cn == node_api::CLIENT_COMMON_NAME => Ok(()),
        Some(cn) => Err((StatusCode::FORBIDDEN, format!("client certificate {cn:?} may not use the node API"))),
    }
}

async fn handle(req: Request<Incoming>, peer: Arc<tls::Peer>, node: Arc<Node>) -> Response<Full<Bytes>> {
    if let Err((status, why)) = authorize(&peer) {
        tracing::warn!(peer = %peer.addr, path = req.uri().path(), "node API request refused: {why}");
        return text(status, why);
    }
    let Some((command, ns, name)) = Command::parse(req.uri().path(), req.uri().query()) else {
        return text(StatusCode::NOT_FOUND, "404 page not found");
    };
    let method_ok = if command.is_get() { req.method() == Method::GET } else { req.method() == Method::PUT };
    if !method_ok {
        return text(StatusCode::METHOD_NOT_ALLOWED, format!("{} does not take {}", command.name(), req.method()));
    }
    let api: Api<VirtualMachineInstance> = Api::namespaced(node.client.clone(), &ns);
    let vmi = match api.get(&name).await {
        Ok(v) => v,
        Err(e) if is_not_found(&e) => {
            return text(StatusCode::NOT_FOUND, format!("virtualmachineinstance.kubevirt.io \"{name}\" not found"));
        }
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("reading VMI {ns}/{name}: {e}")),
    };
    let Some(pod) = active_pod(&node.pods, &node.node, &vmi) else {
        return text(StatusCode::BAD_REQUEST, format!("VMI {ns}/{name} has no launcher pod on node {}", node.node));
    };
    let dir = SocketDir::on_node(&pod.uid().unwrap_or_default());
    let vmi_uid = vmi.uid().unwrap_or_default();
    match command {
        Command::Console => stream(req, &node, vmi_uid, StreamKind::Console, false, dir.serial_console()).await,
        Command::Vnc { preserve_session } => {
            stream(req, &node, vmi_uid, StreamKind::Vnc, preserve_session, dir.vnc()).await
        }
        Command::Screenshot => {
            let r =
                on_domain(dir.libvirt_uri(), domain_name(&ns, &name), |conn, dom| conn.screenshot(dom, MAX_SCREENSHOT))
                    .await;
            match r {
                Ok(Some((_, data))) if data.len() > MAX_SCREENSHOT => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the screenshot of VMI {ns}/{name} is larger than {MAX_SCREENSHOT} bytes"),
                ),
                Ok(Some((mime, data))) => match screenshot::to_png(&mime, data) {
                    Ok(png) => {
                        tracing::info!(vmi = %format!("{ns}/{name}"), bytes = png.len(), from = mime, "screenshot");
                        let mut r = Response::new(Full::new(Bytes::from(png)));
                        r.headers_mut().insert(
                            hyper::header::CONTENT_TYPE,
                            hyper::header::HeaderValue::from_static(screenshot::PNG),
                        );
                        r
                    }
                    Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("VMI {ns}/{name}: {e}")),
                },
                Ok(None) => text(StatusCode::BAD_REQUEST, format!("VMI {ns}/{name} has no domain")),
                Err(e) if e.kind() == ErrorKind::InvalidState => text(StatusCode::BAD_REQUEST, e.line()),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.line()),
            }
        }
        Command::Pause | Command::Unpause => {
            let pause = command == Command::Pause;
            let r =
                on_domain(
                    dir.libvirt_uri(),
                    domain_name(&ns, &name),
                    move |_, dom| {
                        if pause { dom.suspend() } else { dom.resume() }
                    },
                )
                .await;
            match r {
                Ok(Some(())) => {
                    tracing::info!(vmi = %format!("{ns}/{name}"), command = command.name(), "done");
                    text(StatusCode::OK, "")
                }
                Ok(None) => text(StatusCode::BAD_REQUEST, format!("VMI {ns}/{name} has no domain")),
                Err(e) if e.kind() == ErrorKind::InvalidState => text(StatusCode::CONFLICT, e.line()),
                Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.line()),
            }
        }
    }
}

/// `f` on the domain `domain` of the launcher's libvirt at `uri`, off the async runtime; `None` when there is no
/// such domain.
async fn on_domain<T: Send + 'static>(
    uri: String,
    domain: String,
    f: impl FnOnce(&Libvirt, &crate::libvirt::Domain) -> crate::libvirt::Result<T> + Send + 'static,
) -> crate::libvirt::Result<Option<T>> {
    blocking(move || {
        let conn = Libvirt::connect(&uri)?;
        let Some(dom) = conn.lookup(&domain)? else { return Ok(None) };
        f(&conn, &dom).map(Some)
    })
    .await
}

/// Attaches a stream to the QEMU socket `socket`: the session registry first (the previous session of this VMI
/// and kind is closed, unless `preserve` keeps it and refuses this one), then the socket, then the 101.
async fn stream(
    mut req: Request<Incoming>,
    node: &Arc<Node>,
    vmi_uid: String,
    kind: StreamKind,
    preserve: bool,
    socket: String,
) -> Response<Full<Bytes>> {
    let upgrade_ok = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(node_api::UPGRADE));
    if !upgrade_ok {
        return text(StatusCode::BAD_REQUEST, format!("a stream needs Upgrade: {}", node_api::UPGRADE));
    }
    if !std::path::Path::new(&socket).exists() {
        let what = if kind == StreamKind::Console { "serial console" } else { "VNC" };
        return text(StatusCode::BAD_REQUEST, format!("the {what} socket {socket} does not exist"));
    }
    let key = (vmi_uid, kind);
    let (id, closed) = {
        let mut s = node.sessions();
        let live = s.open.get(&key).is_some_and(|(_, tx)| !tx.is_closed());
        if preserve && live {
            return text(StatusCode::SERVICE_UNAVAILABLE, "Active VNC connection. Request denied.");
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        s.next += 1;
        let id = s.next;
        // Dropping the previous sender ends that session (its QEMU socket accepts one client at a time).
        s.open.insert(key.clone(), (id, tx));
        (id, rx)
    };
    let forget = {
        let node = node.clone();
        let key = key.clone();
        move || {
            let mut s = node.sessions();
            if s.open.get(&key).is_some_and(|(i, _)| *i == id) {
                s.open.remove(&key);
            }
        }
    };
    // The old session's copy lets go of the socket a moment after its sender is dropped; QEMU then accepts us.
    let unix = match UnixStream::connect(&socket).await {
        Ok(u) => u,
        Err(e) => {
            forget();
            return text(StatusCode::INTERNAL_SERVER_ERROR, format!("connecting to {socket}: {e}"));
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let mut closed = closed;
        match on_upgrade.await {
            Ok(upgraded) => {
                let mut upgraded = hyper_util::rt::TokioIo::new(upgraded);
                let mut unix = unix;
                tokio::select! {
                    r = tokio::io::copy_bidirectional(&mut upgraded, &mut unix) => {
                        tracing::debug!(?kind, "stream ended: {r:?}");
                    }
                    _ = &mut closed => tracing::info!(?kind, "stream replaced by a newer session"),
                }
            }
            Err(e) => tracing::warn!("stream upgrade failed: {e}"),
        }
        forget();
    });
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(hyper::header::CONNECTION, hyper::header::HeaderValue::from_static("Upgrade"));
    h.insert(hyper::header::UPGRADE, hyper::header::HeaderValue::from_static(node_api::UPGRADE));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(cert: Option<Vec<rustls::pki_types::CertificateDer<'static>>>) -> tls::Peer {
        tls::Peer {
            addr: "127.0.0.1:1".parse().unwrap_or_else(|e| panic!("{e}")),
            certificates: cert.unwrap_or_default(),
        }
    }

    #[test]
    fn only_virt_apis_certificate_is_authorized() {
        let cert = |cn: &str| {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
            params.distinguished_name.push(rcgen::DnType::CommonName, cn);
            let kp = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
            vec![params.self_signed(&kp).unwrap_or_else(|e| panic!("{e}")).der().clone()]
        };
        assert_eq!(authorize(&peer(None)).err().map(|r| r.0), Some(StatusCode::UNAUTHORIZED));
        assert_eq!(authorize(&peer(Some(cert("someone")))).err().map(|r| r.0), Some(StatusCode::FORBIDDEN));
        assert!(authorize(&peer(Some(cert(node_api::CLIENT_COMMON_NAME)))).is_ok());
    }
}
