//! A small misbehaving HTTP/1.1 server for cases nginx cannot produce: flaky 503s, connection resets and stalls
//! mid-body, a Content-Length that lies, and requests accepted but never answered. It serves one file (any path), honours `Range: bytes=a-b` / `a-`, and
//! answers every request with `Connection: close`. It runs on its own thread and runtime; dropping the
//! [`TestServer`] stops it.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the server misbehaves.
#[derive(Debug, Clone, Copy)]
pub enum Behavior {
    /// A well-behaved server.
    Normal,
    /// The first `failures` requests (any method) get `503 Service Unavailable`.
    Flaky503 {
        /// How many requests fail.
        failures: usize,
    },
    /// A response body is cut by a TCP reset after `bytes` body bytes on its connection, `times` times in total.
    ResetAfter {
        /// Body bytes before the reset.
        bytes: u64,
        /// How many responses are cut.
        times: usize,
    },
    /// A response body ends with a clean close (FIN) after `bytes` body bytes on its connection, short of its
    /// Content-Length, `times` times in total. Unlike a reset, every byte written reaches the client.
    CloseAfter {
        /// Body bytes before the close.
        bytes: u64,
        /// How many responses are cut.
        times: usize,
    },
    /// A response body stops when it reaches file offset `offset` (also right at its start) for `stall`, then
    /// the connection is closed; `times` times in total (`usize::MAX`: always, so no attempt gets past it).
    StallAt {
        /// File offset where the body stops.
        offset: u64,
        /// How long it stays silent.
        stall: Duration,
        /// How many responses stall.
        times: usize,
    },
    /// Every response announces the full Content-Length but sends `missing` bytes less, then closes.
    ShortBody {
        /// Bytes left out.
        missing: u64,
    },
    /// The requests `which` selects are read and then never answered (no status line, no headers): the
    /// connection stays open, silent, until the server stops. Other requests are served normally.
    Silent {
        /// Which requests get no answer.
        which: Silence,
    },
}

/// Which requests a [`Behavior::Silent`] server leaves unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silence {
    /// Every request (whatever it is: HTTP, S3, a registry's API, a TLS handshake).
    All,
    /// GET requests (HEAD is answered).
    Get,
    /// Requests with a Range header.
    Ranged,
}

/// What the server saw and sent.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests received.
    pub requests: AtomicUsize,
    /// Response body bytes sent.
    pub body_bytes: AtomicU64,
    /// Faults injected so far.
    pub faults: AtomicUsize,
    /// One line per request: `METHOD /path range=... -> STATUS`.
    pub log: Mutex<Vec<String>>,
    /// (method, Range header) of every request, in order.
    pub seen: Mutex<Vec<(String, Option<String>)>>,
}

/// An HTTP/1.1 server on 127.0.0.1 serving one file (GET, HEAD, Range) with a [`Behavior`]; stopped on drop.
pub struct TestServer {
    /// Its address.
    pub addr: SocketAddr,
    /// What it saw and sent.
    pub stats: Arc<Stats>,
    /// Size of the served file.
    pub file_len: u64,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct State {
    file: PathBuf,
    len: u64,
    behavior: Behavior,
    stats: Arc<Stats>,
}

impl TestServer {
    /// Starts serving `file` with `behavior` on a free port.
    pub fn start(file: &Path, behavior: Behavior) -> Self {
        let len = std::fs::metadata(file).unwrap().len();
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        std_listener.set_nonblocking(true).unwrap();
        let addr = std_listener.local_addr().unwrap();
        let stats = Arc::new(Stats::default());
        let state = Arc::new(State { file: file.to_owned(), len, behavior, stats: stats.clone() });
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(std_listener).unwrap();
                let accept = async {
                    loop {
                        let Ok((sock, _)) = listener.accept().await else {
                            continue;
                        };
                        let st = state.clone();
                        tokio::spawn(async move {
                            let _ = handle(sock, st).await;
                        });
                    }
                };
                tokio::select! {
                    _ = rx => {}
                    () = accept => {}
                }
            });
            rt.shutdown_background();
        });
        TestServer { addr, stats, file_len: len, shutdown: Some(tx), thread: Some(thread) }
    }

    /// `http://<addr>/disk.img`.
    pub fn url(&self) -> String {
        format!("http://{}/disk.img", self.addr)
    }
    /// Response body bytes sent so far.
    pub fn body_bytes(&self) -> u64 {
        self.stats.body_bytes.load(Ordering::SeqCst)
    }
    /// Requests received so far.
    pub fn requests(&self) -> usize {
        self.stats.requests.load(Ordering::SeqCst)
    }
    /// Faults injected so far.
    pub fn faults(&self) -> usize {
        self.stats.faults.load(Ordering::SeqCst)
    }
    /// GET requests after the first one that start over from byte 0 (no Range, or `bytes=0-`): restarts
    /// instead of resumes. Closed ranges such as `bytes=0-511` (random access) do not count.
    pub fn restarts(&self) -> usize {
        let seen = self.stats.seen.lock().map(|s| s.clone()).unwrap_or_default();
        seen.iter()
            .filter(|(m, _)| m == "GET")
            .skip(1)
            .filter(|(_, r)| r.as_deref().is_none_or(|r| r.replace(' ', "") == "bytes=0-"))
            .count()
    }
    /// The request log, one line per request.
    pub fn log(&self) -> String {
        self.stats.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct Request {
    method: String,
    path: String,
    range: Option<String>,
}

/// How long a silent server holds a connection (it is dropped earlier when the server stops).
const SILENCE: Duration = Duration::from_secs(3600);

async fn read_request(sock: &mut TcpStream) -> std::io::Result<Option<Request>> {
    let mut buf = Vec::with_capacity(2048);
    let mut tmp = [0u8; 2048];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            let mut first = lines.next().unwrap_or_default().split_whitespace();
            let method = first.next().unwrap_or_default().to_owned();
            let path = first.next().unwrap_or_default().to_owned();
            let range = lines
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("range"))
                .map(|(_, v)| v.trim().to_owned());
            return Ok(Some(Request { method, path, range }));
        }
        if buf.len() > 64 * 1024 {
            return Ok(None);
        }
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&tmp[..n]);
    }
}

/// Parses `bytes=a-b` / `bytes=a-` against `len`; `Err(())` = unsatisfiable.
fn parse_range(r: &str, len: u64) -> Result<(u64, u64), ()> {
    let spec = r.strip_prefix("bytes=").ok_or(())?;
    let (a, b) = spec.split_once('-').ok_or(())?;
    let start: u64 = a.trim().parse().map_err(|_| ())?;
    let end: u64 = if b.trim().is_empty() { len - 1 } else { b.trim().parse::<u64>().map_err(|_| ())?.min(len - 1) };
    if start >= len || end < start {
        return Err(());
    }
    Ok((start, end))
}

/// Takes one of the `times` fault slots, if any is left.
fn claim_fault(stats: &Stats, times: usize) -> bool {
    stats.faults.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |f| (f < times).then_some(f + 1)).is_ok()
}

async fn handle(mut sock: TcpStream, st: Arc<State>) -> std::io::Result<()> {
    if matches!(st.behavior, Behavior::Silent { which: Silence::All }) {
        // Not even a request is needed (a TLS client sends no HTTP request line): accept, read, say nothing.
        st.stats.requests.fetch_add(1, Ordering::SeqCst);
        st.stats.faults.fetch_add(1, Ordering::SeqCst);
        st.stats.log.lock().unwrap().push(String::from("connection -> silent"));
        let mut sink = [0u8; 4096];
        let silence = async {
            while sock.read(&mut sink).await.is_ok_and(|n| n > 0) {}
            tokio::time::sleep(SILENCE).await;
        };
        let _ = tokio::time::timeout(SILENCE, silence).await;
        return Ok(());
    }
    let Some(req) = read_request(&mut sock).await? else {
        return Ok(());
    };
    let n = st.stats.requests.fetch_add(1, Ordering::SeqCst) + 1;
    st.stats.seen.lock().unwrap().push((req.method.clone(), req.range.clone()));
    let logline = |status: u16| format!("{} {} range={:?} -> {status}", req.method, req.path, req.range);

    if let Behavior::Silent { which } = st.behavior
        && match which {
            Silence::All => true,
            Silence::Get => req.method == "GET",
            Silence::Ranged => req.range.is_some(),
        }
    {
        st.stats.faults.fetch_add(1, Ordering::SeqCst);
        st.stats.log.lock().unwrap().push(format!("{} {} range={:?} -> silent", req.method, req.path, req.range));
        tokio::time::sleep(SILENCE).await;
        return Ok(());
    }

    if let Behavior::Flaky503 { failures } = st.behavior
        && n <= failures
    {
        st.stats.faults.fetch_add(1, Ordering::SeqCst);
        st.stats.log.lock().unwrap().push(logline(503));
        sock.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await?;
        return sock.shutdown().await;
    }
    if req.method != "GET" && req.method != "HEAD" {
        st.stats.log.lock().unwrap().push(logline(405));
        sock.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await?;
        return sock.shutdown().await;
    }
    let (status, start, end) = match &req.range {
        None => (200u16, 0, st.len.saturating_sub(1)),
        Some(r) => match parse_range(r, st.len) {
            Ok((s, e)) => (206, s, e),
            Err(()) => {
                st.stats.log.lock().unwrap().push(logline(416));
                let h = format!(
                    "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    st.len
                );
                sock.write_all(h.as_bytes()).await?;
                return sock.shutdown().await;
            }
        },
    };
    let body_len = if st.len == 0 { 0 } else { end - start + 1 };
    st.stats.log.lock().unwrap().push(logline(status));
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\nContent-Length: {body_len}\r\nConnection: close\r\n",
        if status == 200 { "OK" } else { "Partial Content" }
    );
    if status == 206 {
        head.push_str(&format!("Content-Range: bytes {start}-{end}/{}\r\n", st.len));
    }
    head.push_str("\r\n");
    sock.write_all(head.as_bytes()).await?;
    if req.method == "HEAD" {
        return sock.shutdown().await;
    }

    let mut f = tokio::fs::File::open(&st.file).await?;
    f.seek(std::io::SeekFrom::Start(start)).await?;
    let to_send = match st.behavior {
        Behavior::ShortBody { missing } => body_len.saturating_sub(missing),
        _ => body_len,
    };
    // where on this connection (relative to the body) the fault strikes, if anywhere
    let mut fault_at = match st.behavior {
        Behavior::ResetAfter { bytes, .. } | Behavior::CloseAfter { bytes, .. } if bytes < to_send => Some(bytes),
        Behavior::StallAt { offset, .. } if offset >= start && offset - start < to_send => Some(offset - start),
        _ => None,
    };
    let mut sent = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while sent < to_send {
        if fault_at == Some(sent) {
            fault_at = None;
            match st.behavior {
                Behavior::ResetAfter { times, .. } if claim_fault(&st.stats, times) => {
                    sock.flush().await?;
                    sock.set_zero_linger()?;
                    drop(sock);
                    return Ok(());
                }
                Behavior::CloseAfter { times, .. } if claim_fault(&st.stats, times) => {
                    sock.flush().await?;
                    return sock.shutdown().await;
                }
                Behavior::StallAt { stall, times, .. } if claim_fault(&st.stats, times) => {
                    sock.flush().await?;
                    tokio::time::sleep(stall).await;
                    drop(sock);
                    return Ok(());
                }
                _ => {}
            }
        }
        let mut chunk = (to_send - sent).min(buf.len() as u64);
        if let Some(f) = fault_at {
            chunk = chunk.min(f - sent);
        }
        let n = f.read(&mut buf[..chunk as usize]).await?;
        if n == 0 {
            break;
        }
        sock.write_all(&buf[..n]).await?;
        sent += n as u64;
        st.stats.body_bytes.fetch_add(n as u64, Ordering::SeqCst);
    }
    sock.flush().await?;
    sock.shutdown().await
}
