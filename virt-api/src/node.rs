//! virt-api's client of the node agents' API ([`contracts::kubevirt::node_api`]): find the node agent pod on a
//! VMI's node, dial it with virt-api's client certificate, and send a command or open a stream.
//!
//! ```text
//! locate(node): list pods kubevirt.io=virt-handler, spec.nodeName=node in virt-api's namespace ─► pod IP
//! dial: TLS to <pod IP>:8186, the server verified as node_api::SERVER_NAME against the Secret's ca.crt
//! command (pause, unpause): PUT ─► 200 | the node agent's status and one-line text as a Refusal
//! stream (console, vnc): GET + Upgrade ─► 101 ─► the upgraded connection (raw bytes of the QEMU socket)
//! ```

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use contracts::kubevirt::node_api::{self, Command};
use controller_runtime::tls;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tokio::net::TcpStream;

use crate::lifecycle::Refusal;

/// How long dialing a node agent may take (TCP + TLS + the response head).
const DIAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The largest error text read from a node agent.
const MAX_ERROR_BODY: usize = 16 << 10;
/// Largest answer body read from the node agent (a screenshot; the node agent caps it below this).
const MAX_FETCH_BODY: usize = 80 << 20;

/// The client: virt-api's certificate and the node agents' CA, and the API client to find their pods.
#[derive(Clone)]
pub struct NodeClient {
    kube: kube::Client,
    namespace: String,
    tls: Arc<rustls::ClientConfig>,
}

impl std::fmt::Debug for NodeClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeClient").field("namespace", &self.namespace).finish_non_exhaustive()
    }
}

fn unavailable(message: String) -> Refusal {
    Refusal { code: 503, reason: "ServiceUnavailable", message }
}

fn internal(message: String) -> Refusal {
    Refusal { code: 500, reason: "InternalError", message }
}

/// The `metav1.Status` reason of an HTTP status the node agent answered.
fn reason_of(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        503 => "ServiceUnavailable",
        _ => "InternalError",
    }
}

impl NodeClient {
    /// The client from the mounted Secret in `dir` (`tls.crt`, `tls.key`, `ca.crt`); the node agents' pods are
    /// looked up in `namespace`.
    pub fn load(kube: kube::Client, namespace: String, dir: &Path) -> Result<NodeClient, tls::Error> {
        let chain = tls::load_certs(&dir.join("tls.crt"))?;
        let key = tls::load_key(&dir.join("tls.key"))?;
        let roots = tls::roots(&tls::load_certs(&dir.join("ca.crt"))?)?;
        Ok(NodeClient { kube, namespace, tls: tls::client_config(roots, Some((chain, key)))? })
    }

    /// The address of the node agent on `node`.
    async fn locate(&self, node: &str) -> Result<SocketAddr, Refusal> {
        let pods: Api<Pod> = Api::namespaced(self.kube.clone(), &self.namespace);
        let (k, v) = node_api::POD_LABEL;
        let params = ListParams::default().labels(&format!("{k}={v}")).fields(&format!("spec.nodeName={node}"));
        let list = pods.list(&params).await.map_err(|e| internal(format!("listing the node agents: {e}")))?;
        let ip = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .find_map(|ip| ip.parse::<std::net::IpAddr>().ok())
            .ok_or_else(|| unavailable(format!("no node agent (virt-handler) pod runs on node {node}")))?;
        Ok(SocketAddr::new(ip, node_api::PORT))
    }

    /// Sends `command` for VMI `ns/name` to the node agent on `node`; the response (a 2xx or 101) or a refusal
    /// carrying the node agent's own status and text.
    async fn send(
        &self,
        node: &str,
        command: Command,
        ns: &str,
        name: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Refusal> {
        let addr = self.locate(node).await?;
        let fail = |what: &str, e: &dyn std::fmt::Display| unavailable(format!("{what} the node agent at {addr}: {e}"));
        let exchange = async {
            let tcp = TcpStream::connect(addr).await.map_err(|e| fail("connecting to", &e))?;
            let server = tls::server_name(node_api::SERVER_NAME).map_err(|e| internal(e.to_string()))?;
            let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
                .connect(server, tcp)
                .await
                .map_err(|e| fail("TLS with", &e))?;
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| fail("HTTP with", &e))?;
            tokio::spawn(async move {
                if let Err(e) = conn.with_upgrades().await {
                    tracing::debug!("node agent connection ended: {e}");
                }
            });
            let mut req = Request::builder()
                .method(if command.is_get() { hyper::Method::GET } else { hyper::Method::PUT })
                .uri(command.path(ns, name))
                .header(hyper::header::HOST, node_api::SERVER_NAME);
            if command.is_stream() {
                req =
                    req.header(hyper::header::CONNECTION, "Upgrade").header(hyper::header::UPGRADE, node_api::UPGRADE);
            }
            let req = req.body(Empty::<Bytes>::new()).map_err(|e| internal(e.to_string()))?;
            sender.send_request(req).await.map_err(|e| fail("requesting from", &e))
        };
        let response = tokio::time::timeout(DIAL_TIMEOUT, exchange)
            .await
            .map_err(|_| unavailable(format!("the node agent at {addr} did not answer within {DIAL_TIMEOUT:?}")))??;
        let status = response.status();
        if status.is_success() || status == StatusCode::SWITCHING_PROTOCOLS {
            return Ok(response);
        }
        let body = Limited::new(response.into_body(), MAX_ERROR_BODY).collect().await;
        let text = body.map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_owned()).unwrap_or_default();
        Err(Refusal { code: status.as_u16(), reason: reason_of(status), message: text })
    }

    /// Pause or unpause on the node agent of `node`.
    pub async fn command(&self, node: &str, command: Command, ns: &str, name: &str) -> Result<(), Refusal> {
        self.send(node, command, ns, name).await.map(drop)
    }

    /// The screenshot of VMI `ns/name` from the node agent of `node`: its `Content-Type` and bytes.
    pub async fn fetch(&self, node: &str, command: Command, ns: &str, name: &str) -> Result<(String, Bytes), Refusal> {
        let response = self.send(node, command, ns, name).await?;
        let mime = response
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/octet-stream")
            .to_owned();
        let body = Limited::new(response.into_body(), MAX_FETCH_BODY)
            .collect()
            .await
            .map_err(|e| internal(format!("reading the node agent's answer: {e}")))?;
        Ok((mime, body.to_bytes()))
    }

    /// Opens the console or VNC stream of VMI `ns/name` on the node agent of `node`.
    pub async fn stream(
        &self,
        node: &str,
        command: Command,
        ns: &str,
        name: &str,
    ) -> Result<TokioIo<hyper::upgrade::Upgraded>, Refusal> {
        let response = self.send(node, command, ns, name).await?;
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            return Err(internal(format!("the node agent answered {} instead of a stream", response.status())));
        }
        hyper::upgrade::on(response)
            .await
            .map(TokioIo::new)
            .map_err(|e| internal(format!("the node agent's stream: {e}")))
    }
}
