//! HTTP plumbing shared by the servers: one body type, small response builders, and a TLS accept loop with
//! graceful shutdown that hands each request the connection's verified client-certificate common name.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
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

/// Serves HTTP/1.1 over TLS on `listener` until `shutdown` resolves, then stops accepting and waits up to
/// `drain` for open connections to finish their current response. `handler` gets each request and the
/// connection's [`ConnInfo`].
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
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let graceful = GracefulShutdown::new();
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
        let watcher = graceful.watcher();
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
            let peer_cn = crate::tls::peer_common_name(stream.get_ref().1);
            let info = Arc::new(ConnInfo { remote, peer_cn });
            let svc = hyper::service::service_fn(move |req| {
                let fut = handler(req, info.clone());
                async move { Ok::<_, Infallible>(fut.await) }
            });
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            if let Err(e) = watcher.watch(conn).await {
                tracing::debug!(%remote, "connection ended: {e}");
            }
            if let Some(fd) = linger {
                linger_close(fd).await;
            }
        });
    }
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!("connections still open after {drain:?}; closing");
    }
}

/// Resolves when the process receives SIGTERM (or SIGINT). Our binaries run as PID 1 of their containers, where
/// a signal without a handler is ignored: without this, every pod deletion waits out the 30 s grace period and
/// ends with SIGKILL. (Go binaries, as upstream's, exit on SIGTERM by default.)
pub async fn terminated() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
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
    fn escapes_like_go() {
        assert_eq!(html_escape(r#"PVC <a> & 'b' "c""#), "PVC &lt;a&gt; &amp; &#39;b&#39; &#34;c&#34;");
    }
}
