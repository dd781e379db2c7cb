//! Push source: the caller pushes the bytes (an upload request body) instead of the pipeline pulling them.
//! [`channel`] returns the sending half, used from async code, and an [`OpenedSource`] whose blocking stream
//! yields the pushed chunks in order. The channel is bounded ([`BODY_CHANNEL_CHUNKS`] chunks), so a fast
//! client waits for the pipeline: memory stays bounded and nothing is buffered to disk here. A push source
//! has no random access and no local path, so formats that need either use scratch space (see `plan`).

use std::io;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::{BODY_CHANNEL_CHUNKS, ChannelReader, OpenedSource};

/// The receiving side (the pipeline) is gone: it finished or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the import pipeline stopped reading the pushed stream")]
pub struct PushClosed;

/// Sends chunks into a push source. Dropping it ends the stream (end of body).
#[derive(Debug, Clone)]
pub struct PushSender {
    tx: mpsc::Sender<io::Result<Bytes>>,
}

impl PushSender {
    /// Sends the next chunk, waiting while the pipeline is behind. Empty chunks are skipped.
    pub async fn send(&self, chunk: Bytes) -> Result<(), PushClosed> {
        if chunk.is_empty() {
            return Ok(());
        }
        self.tx.send(Ok(chunk)).await.map_err(|_| PushClosed)
    }

    /// Ends the stream with an error (the client went away, the body was malformed); the pipeline fails
    /// with `reading the source failed at byte N: <message>`.
    pub async fn fail(self, message: String) {
        let _ = self.tx.send(Err(io::Error::other(message))).await;
    }
}

/// A push source of `size` bytes when known (`Content-Length`). Read the returned source from a blocking
/// thread (the pipeline); send from async code.
pub fn channel(size: Option<u64>) -> (PushSender, OpenedSource) {
    let (tx, rx) = mpsc::channel(BODY_CHANNEL_CHUNKS);
    let opened = OpenedSource {
        stream: Box::new(ChannelReader::new(rx)),
        size,
        random_access: None,
        local_path: None,
        image_env: Vec::new(),
        validator: None,
    };
    (PushSender { tx }, opened)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn pushed_chunks_arrive_in_order_and_errors_end_the_stream() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
        let (tx, mut opened) = channel(Some(6));
        assert_eq!(opened.size, Some(6));
        let feeder = std::thread::spawn(move || {
            rt.block_on(async move {
                tx.send(Bytes::from_static(b"abc")).await.unwrap_or_else(|e| panic!("{e}"));
                tx.send(Bytes::new()).await.unwrap_or_else(|e| panic!("{e}"));
                tx.send(Bytes::from_static(b"def")).await.unwrap_or_else(|e| panic!("{e}"));
                tx.fail("client went away".into()).await;
            })
        });
        let mut buf = Vec::new();
        let err = opened.stream.read_to_end(&mut buf).err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(buf, b"abcdef");
        assert_eq!(err, "client went away");
        assert!(feeder.join().is_ok());
    }

    #[test]
    fn send_after_the_reader_is_gone_reports_closed() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
        let (tx, opened) = channel(None);
        drop(opened);
        assert_eq!(rt.block_on(tx.send(Bytes::from_static(b"x"))), Err(PushClosed));
    }
}
