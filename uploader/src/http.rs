//! HTTP plumbing shared by the servers: one body type, small response builders, and the TLS accept loop
//! (importer's, [`controller_runtime::tls`]) handing each request the connection's verified client-certificate
//! common name.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use controller_runtime::tls;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use tokio::net::TcpListener;

/// Error type of response bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Every response body: a full buffer or a streamed (proxied) body.
pub type Body = BoxBody<Bytes, BoxError>;

/// What a handler knows about the connection.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client's address.
    pub remote: SocketAddr,
    /// Common name of the client certificate, when one was presented (it was verified during the handshake).
    pub peer_cn: Option<String>,
}

/// A body holding `data`.
pub fn full(data: impl Into<Bytes>) -> Body {
    Full::new(data.into()).map_err(|e: Infallible| match e {}).boxed()
}

/// A response with `status` and a text body.
pub fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r
}

/// A response with `status`, no body.
pub fn empty(status: StatusCode) -> Response<Body> {
    text(status, Bytes::new())
}

/// A JSON response.
pub fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut r = text(status, value.to_string());
    r.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    r
}

/// HTML-escapes `s` as Go's `html.EscapeString` (`<`, `>`, `&`, `'`, `"`).
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            c => out.push(c),
        }
    }
    out
}

/// Serves `handler` over TLS on `listener` (see [`controller_runtime::tls::serve_tls`]), handing it the
/// connection's [`ConnInfo`] with the verified client certificate's common name.
pub async fn serve_tls<H, F, S>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    handler: H,
    shutdown: S,
    drain: Duration,
) where
    H: Fn(Request<Incoming>, Arc<ConnInfo>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Body>> + Send + 'static,
    S: Future<Output = ()>,
{
    let handler = move |req, peer: Arc<tls::Peer>| {
        let info = Arc::new(ConnInfo { remote: peer.addr, peer_cn: peer.common_name() });
        handler(req, info)
    };
    tls::serve_tls(listener, tls, handler, shutdown, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_go() {
        assert_eq!(html_escape(r#"PVC <a> & 'b' "c""#), "PVC &lt;a&gt; &amp; &#39;b&#39; &#34;c&#34;");
    }
}
