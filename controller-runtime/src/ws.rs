//! Websocket streams of the `plain.kubevirt.io` kind (console, VNC): the payload of binary (or text) messages is
//! a plain byte stream. [`bridge`] joins such a websocket to a byte stream; virt-api uses it between the user's
//! websocket and the node agent, `virtctl vnc` between the websocket and the local VNC viewer; [`payload`] reads
//! one message for the clients that pump a websocket themselves.

use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// Size of one websocket message towards the websocket's peer (upstream's buffer is 32 KiB).
const CHUNK: usize = 32 << 10;

/// What one received websocket message carries for the byte stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Payload {
    /// Bytes of the stream (a binary message's, or a text message's UTF-8).
    Data(bytes::Bytes),
    /// The peer closed the websocket: the stream ends.
    Close,
    /// A control message (ping, pong, raw frame): nothing for the stream.
    Skip,
}

/// The stream's view of `msg`.
pub fn payload(msg: Message) -> Payload {
    match msg {
        Message::Binary(b) => Payload::Data(b),
        Message::Text(t) => Payload::Data(bytes::Bytes::from(t.as_str().to_owned())),
        Message::Close(_) => Payload::Close,
        Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => Payload::Skip,
    }
}

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
        while let Some(Ok(msg)) = ws_rx.next().await {
            let data = match payload(msg) {
                Payload::Data(d) => d,
                Payload::Close => break,
                Payload::Skip => continue,
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

    #[test]
    fn data_messages_carry_bytes_and_control_messages_none() {
        assert_eq!(
            payload(Message::Binary(bytes::Bytes::from_static(b"\x00\xff"))),
            Payload::Data(b"\x00\xff"[..].into())
        );
        assert_eq!(payload(Message::Text("login: ".into())), Payload::Data(b"login: "[..].into()));
        assert_eq!(payload(Message::Close(None)), Payload::Close);
        assert_eq!(payload(Message::Ping(bytes::Bytes::from_static(b"p"))), Payload::Skip);
        assert_eq!(payload(Message::Pong(bytes::Bytes::new())), Payload::Skip);
    }

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
