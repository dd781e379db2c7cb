//! Websocket streams of the `plain.kubevirt.io` kind (console, VNC): the payload of binary (or text) messages is
//! a plain byte stream. [`bridge`] joins such a websocket to a byte stream; virt-api uses it between the user's
//! websocket and the node agent, `virtctl vnc` between the websocket and the local VNC viewer.

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// Size of one websocket message towards the websocket's peer (upstream's buffer is 32 KiB).
const CHUNK: usize = 32 << 10;

/// Copies between `ws` and the byte stream `raw` until either side ends: binary and text messages' payloads go
/// to `raw`, `raw`'s bytes go out as binary messages. A websocket close shuts `raw`'s write side; the end of
/// `raw` sends a close.
pub async fn bridge<S, R>(ws: WebSocketStream<S>, raw: R)
where
    S: AsyncRead + AsyncWrite + Unpin,
    R: AsyncRead + AsyncWrite + Unpin,
{
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (mut raw_rx, mut raw_tx) = tokio::io::split(raw);
    let to_raw = async {
        while let Some(msg) = ws_rx.next().await {
            let data = match msg {
                Ok(Message::Binary(b)) => b,
                Ok(Message::Text(t)) => bytes::Bytes::from(t.as_str().to_owned()),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            if raw_tx.write_all(&data).await.is_err() {
                break;
            }
        }
        let _ = raw_tx.shutdown().await;
    };
    let to_ws = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match raw_rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_tx.send(Message::Binary(bytes::Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = ws_tx.send(Message::Close(None)).await;
    };
    // Either side ending ends the session (e.g. the node closing: the VM stopped or a newer session took over).
    tokio::select! {
        () = to_raw => {}
        () = to_ws => {}
    }
}

#[cfg(test)]
mod tests {
    use tokio_tungstenite::tungstenite::protocol::Role;

    use super::*;

    #[tokio::test]
    async fn the_bridge_carries_both_directions() {
        let (client_side, server_side) = tokio::io::duplex(1 << 16);
        let (raw_side, mut raw) = tokio::io::duplex(1 << 16);
        let server = WebSocketStream::from_raw_socket(server_side, Role::Server, None);
        let task = tokio::spawn(async move { bridge(server.await, raw_side).await });
        let mut ws = WebSocketStream::from_raw_socket(client_side, Role::Client, None).await;
        ws.send(Message::Binary(bytes::Bytes::from_static(b"hello\n"))).await.unwrap_or_else(|e| panic!("{e}"));
        let mut buf = [0u8; 6];
        raw.read_exact(&mut buf).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&buf, b"hello\n");
        raw.write_all(b"RFB 003.008\n").await.unwrap_or_else(|e| panic!("{e}"));
        let got = ws.next().await.and_then(Result::ok);
        assert_eq!(got, Some(Message::Binary(bytes::Bytes::from_static(b"RFB 003.008\n"))));
        drop(raw);
        let end = ws.next().await.and_then(Result::ok);
        assert!(matches!(end, Some(Message::Close(_))), "{end:?}");
        task.await.unwrap_or_else(|e| panic!("{e}"));
    }
}
