//! `virtctl console|vnc|pause|unpause`: the VMI subresources of `subresources.kubevirt.io/v1` (contract §8), with
//! upstream virtctl's flags, output and errors.
//!
//! ```text
//! console VMI [--timeout M]     websocket …/virtualmachineinstances/VMI/console (plain.kubevirt.io), retried
//!                               while the server answers 400 (not running yet), up to M minutes;
//!                               stdin (raw on a terminal) → guest, guest → stdout; Ctrl+] or EOF ends it
//! vnc VMI [--proxy-only] [--port N] [--address A] [--preserve-session]
//!                               websocket …/vnc ─► listen A:N ─► {"port": N} (proxy-only) or a VNC viewer
//!                               ─► one client's bytes ↔ the stream
//! vnc screenshot VMI --file F|- [--move-cursor]
//!                               GET …/virtualmachineinstances/VMI/vnc/screenshot?moveCursor=B ─► the PNG into F
//!                               (0644) or stdout
//! pause|unpause vm|vmi NAME [--dry-run]   PUT …/virtualmachineinstances/NAME/pause|unpause {dryRun}
//!                               ─► "VMI NAME was scheduled to pause"
//! ```

use std::time::{Duration, Instant};

use contracts::kubevirt::consts::{PLAIN_STREAM_PROTOCOL, SUBRESOURCES_GROUP, VERSION};
use controller_runtime::ws::{self, Payload};
use crds::kubevirt::RunStrategy;
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use kube::api::Api;
use serde_json::json;
use std::io::Write as _;

use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

/// A websocket to a VMI stream.
pub type Stream = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The byte that ends `virtctl console` (Ctrl+]).
const ESCAPE: u8 = 29;

/// A stream could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The server answered with this status and message (a `metav1.Status`, or its text).
    Status(u16, String),
    /// Anything else (connection, TLS, upgrade).
    Other(String),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Status(_, m) | OpenError::Other(m) => f.write_str(m),
        }
    }
}

/// The path of VMI `name`'s subresource `sub` in `namespace`.
pub fn path(namespace: &str, name: &str, sub: &str) -> String {
    resource_path(false, namespace, name, sub)
}

/// The path of subresource `sub` of VM (`vm`) or VMI `name` in `namespace`.
pub fn resource_path(vm: bool, namespace: &str, name: &str, sub: &str) -> String {
    let resource = if vm { "virtualmachines" } else { "virtualmachineinstances" };
    format!("/apis/{SUBRESOURCES_GROUP}/{VERSION}/namespaces/{namespace}/{resource}/{name}/{sub}")
}

/// Opens the websocket of `path_and_query` through the API server (subprotocol `plain.kubevirt.io`).
pub async fn open(client: &kube::Client, path_and_query: &str) -> Result<Stream, OpenError> {
    let key = tokio_tungstenite::tungstenite::handshake::client::generate_key();
    let request = http::Request::get(path_and_query)
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::SEC_WEBSOCKET_VERSION, "13")
        .header(http::header::SEC_WEBSOCKET_KEY, &key)
        .header(http::header::SEC_WEBSOCKET_PROTOCOL, PLAIN_STREAM_PROTOCOL)
        .body(kube::client::Body::empty())
        .map_err(|e| OpenError::Other(e.to_string()))?;
    let response = client.send(request).await.map_err(|e| OpenError::Other(e.to_string()))?;
    let status = response.status();
    if status != http::StatusCode::SWITCHING_PROTOCOLS {
        let body =
            http_body_util::BodyExt::collect(response.into_body()).await.map(|b| b.to_bytes()).unwrap_or_default();
        let message = status_message(&body).unwrap_or_else(|| {
            format!("Can't connect to websocket ({}): {}", status.as_u16(), String::from_utf8_lossy(&body).trim())
        });
        return Err(OpenError::Status(status.as_u16(), message));
    }
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    if response.headers().get(http::header::SEC_WEBSOCKET_ACCEPT).map(|v| v.as_bytes()) != Some(accept.as_bytes()) {
        return Err(OpenError::Other("Can't connect to websocket: bad Sec-WebSocket-Accept".into()));
    }
    let upgraded = hyper::upgrade::on(response).await.map_err(|e| OpenError::Other(e.to_string()))?;
    Ok(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await)
}

/// The `message` of a `metav1.Status` body.
fn status_message(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| v["message"].as_str().map(str::to_owned))
}

/// Flags of `console`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConsoleArgs {
    /// The VirtualMachineInstance.
    pub name: String,
    /// The number of minutes to wait for the virtual machine instance to be ready.
    #[arg(long, default_value_t = 5)]
    pub timeout: u64,
}

/// Puts the terminal on stdin into raw mode while alive (nothing when stdin is not a terminal).
struct RawTerminal(Option<rustix::termios::Termios>);

impl RawTerminal {
    fn enter() -> RawTerminal {
        let stdin = std::io::stdin();
        let Ok(saved) = rustix::termios::tcgetattr(&stdin) else { return RawTerminal(None) };
        let mut raw = saved.clone();
        raw.make_raw();
        if rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw).is_err() {
            return RawTerminal(None);
        }
        RawTerminal(Some(saved))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let stdin = std::io::stdin();
            if let Err(e) = rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, saved) {
                eprintln!("failed to restore terminal: {e}");
            }
        }
    }
}

/// `virtctl console`: `Err` is the text to print (exit 1).
pub async fn console(args: &ConsoleArgs, client: kube::Client, namespace: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(args.timeout.saturating_mul(60));
    let path = path(namespace, &args.name, "console");
    // Upstream retries while the VMI is not running yet (400), once a second.
    let ws = loop {
        match open(&client, &path).await {
            Ok(ws) => break ws,
            Err(OpenError::Status(400, _)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(OpenError::Status(400, _)) => {
                return Err("Timeout trying to connect to the virtual machine instance".into());
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let _raw = RawTerminal::enter();
    eprintln!("Successfully connected to {} console. Press Ctrl+] or Ctrl+5 to exit console.", args.name);
    stdio_session(ws, Some(ESCAPE), |e| {
        format!(
            "\nYou were disconnected from the console. This could be caused by one of the following:\n - the target VM was powered off\n - another user connected to the console of the target VM\n - network issues\n{e}"
        )
    })
    .await
}

/// Joins `ws` to this process's stdin and stdout until either ends or Ctrl+C: stdin's reads go out as binary
/// messages (a read that starts with `escape` ends the session, as upstream's console), the messages' payloads
/// go to stdout. `Err` is `disconnected`'s text of a broken websocket.
pub async fn stdio_session(ws: Stream, escape: Option<u8>, disconnected: fn(&str) -> String) -> Result<(), String> {
    let (mut tx, mut rx) = ws.split();
    let mut stdin = stdin_chunks();
    let input = async {
        // Upstream: the end of stdin ends the session.
        while let Some(chunk) = stdin.recv().await {
            if (escape.is_some() && chunk.first() == escape.as_ref()) || tx.send(Message::Binary(chunk)).await.is_err()
            {
                break;
            }
        }
        let _ = tx.send(Message::Close(None)).await;
        Ok::<(), String>(())
    };
    let output = async {
        let mut stdout = std::io::stdout();
        while let Some(msg) = rx.next().await {
            let data = match msg.map(ws::payload) {
                Ok(Payload::Data(d)) => d,
                Ok(Payload::Close) => return Ok(()),
                Ok(Payload::Skip) => continue,
                Err(e) => return Err(disconnected(&e.to_string())),
            };
            if stdout.write_all(&data).and_then(|()| stdout.flush()).is_err() {
                return Ok(());
            }
        }
        Ok(())
    };
    tokio::select! {
        r = input => r,
        r = output => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// Stdin's reads (up to 1 KiB each, as upstream's) from a thread of their own: a blocking read of a terminal
/// cannot be cancelled, and a detached thread does not hold the process when the console ends.
fn stdin_chunks() -> tokio::sync::mpsc::Receiver<bytes::Bytes> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    std::thread::spawn(move || {
        use std::io::Read as _;
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; 1024];
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 || tx.blocking_send(bytes::Bytes::copy_from_slice(&buf[..n])).is_err() {
                break;
            }
        }
    });
    rx
}

/// Flags of `vnc`.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct VncArgs {
    /// `screenshot`.
    #[command(subcommand)]
    pub command: Option<VncCommand>,
    /// The VirtualMachineInstance.
    #[arg(required = true)]
    pub name: Option<String>,
    /// Only run the proxy and print the port VNC viewers can connect to (`{"port": N}`).
    #[arg(long)]
    pub proxy_only: bool,
    /// The local port of the proxy (0: any free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// The local address of the proxy.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    /// Keep another user's VNC session: refuse this one instead of taking the session over.
    #[arg(long)]
    pub preserve_session: bool,
}

/// Subcommands of `vnc`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum VncCommand {
    /// Create a VNC screenshot of a virtual machine instance.
    Screenshot(ScreenshotArgs),
}

/// Flags of `vnc screenshot`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScreenshotArgs {
    /// The VirtualMachineInstance.
    pub name: String,
    /// Where to store the VNC screenshot in PNG format. Use '-' for stdout.
    #[arg(long, short = 'f', required = true)]
    pub file: String,
    /// Move the cursor to wake up the screen in case of screensavers.
    #[arg(long, short = 'm')]
    pub move_cursor: bool,
}

/// `virtctl vnc screenshot`: `Err` is upstream's text to print (exit 1). Nothing is written unless the server
/// answered with an image.
pub async fn screenshot(args: &ScreenshotArgs, client: kube::Client, namespace: &str) -> Result<(), String> {
    let denied = |e: String| format!("Can't access VMI {}: {e}", args.name);
    let uri = format!("{}?moveCursor={}", path(namespace, &args.name, "vnc/screenshot"), args.move_cursor);
    let request = http::Request::get(uri).body(kube::client::Body::empty()).map_err(|e| denied(e.to_string()))?;
    let response = client.send(request).await.map_err(|e| denied(e.to_string()))?;
    let status = response.status();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| denied(e.to_string()))?;
    if !status.is_success() {
        let message = status_message(&body).unwrap_or_else(|| {
            format!("the server answered {}: {}", status.as_u16(), String::from_utf8_lossy(&body).trim())
        });
        return Err(denied(message));
    }
    if args.file == "-" {
        std::io::stdout().write_all(&body).map_err(|e| format!("failed to write image to stdout: {e}"))
    } else {
        std::fs::write(&args.file, &body).map_err(|e| format!("Can't write image to a file: {e}"))
    }
}

/// `virtctl vnc`: `Err` is the text to print (exit 1).
pub async fn vnc(args: &VncArgs, client: kube::Client, namespace: &str) -> Result<(), String> {
    if let Some(VncCommand::Screenshot(s)) = &args.command {
        return screenshot(s, client, namespace).await;
    }
    let name = args.name.as_deref().unwrap_or_default();
    let path = format!("{}?preserveSession={}", path(namespace, name, "vnc"), args.preserve_session);
    let ws = open(&client, &path).await.map_err(|e| format!("can't access VMI {name}: {e}"))?;
    let address = if args.proxy_only { args.address.clone() } else { String::from("127.0.0.1") };
    let listener = tokio::net::TcpListener::bind((address.as_str(), args.port))
        .await
        .map_err(|e| format!("can't listen on unix socket: {e}"))?;
    let port = listener.local_addr().map_err(|e| format!("error encountered: {e}"))?.port();
    let mut viewer = None;
    if args.proxy_only {
        println!("{}", json!({"port": port}));
    } else {
        let found = ["remote-viewer", "vncviewer"].into_iter().find(|b| which(b));
        let Some(bin) = found else {
            return Err("error encountered: could not find remote-viewer or vncviewer binary in $PATH".into());
        };
        let target =
            if bin == "remote-viewer" { format!("vnc://127.0.0.1:{port}") } else { format!("127.0.0.1:{port}") };
        viewer =
            Some(tokio::process::Command::new(bin).arg(target).spawn().map_err(|e| format!("error encountered: {e}"))?);
    }
    let accept = async {
        let (conn, _) = listener.accept().await.map_err(|e| format!("error encountered: {e}"))?;
        ws::bridge(ws, conn).await;
        Ok::<(), String>(())
    };
    let r = tokio::select! {
        r = accept => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    if let Some(mut v) = viewer {
        let _ = v.kill().await;
    }
    r
}

fn which(bin: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(bin).is_file()))
}

/// `pause` or `unpause`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseVerb {
    /// `pause`.
    Pause,
    /// `unpause`.
    Unpause,
}

impl PauseVerb {
    fn as_str(self) -> &'static str {
        match self {
            PauseVerb::Pause => "pause",
            PauseVerb::Unpause => "unpause",
        }
    }

    fn gerund(self) -> &'static str {
        match self {
            PauseVerb::Pause => "pausing",
            PauseVerb::Unpause => "unpausing",
        }
    }
}

/// Flags of `pause` and `unpause`.
#[derive(Debug, Clone, clap::Args)]
pub struct PauseArgs {
    /// `vm` or `vmi` (also virtualmachine(s), virtualmachineinstance(s); case insensitive).
    pub kind: String,
    /// The name.
    pub name: String,
    /// Validate the request on the server and change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Whether `kind` names VMs (`Some(true)`), VMIs (`Some(false)`) or neither.
pub fn names_vm(kind: &str) -> Option<bool> {
    match kind.to_ascii_lowercase().as_str() {
        "vm" | "vms" | "virtualmachine" | "virtualmachines" => Some(true),
        "vmi" | "vmis" | "virtualmachineinstance" | "virtualmachineinstances" => Some(false),
        _ => None,
    }
}

/// `virtctl pause|unpause`: `Ok` with the lines to print, `Err` with upstream's error text.
pub async fn pause(verb: PauseVerb, args: &PauseArgs, client: kube::Client, namespace: &str) -> Result<String, String> {
    let dry = if args.dry_run { "Dry Run execution\n" } else { "" };
    let Some(vm) = names_vm(&args.kind) else {
        return Err(format!("{dry}unsupported resource type {:?}: use vm or vmi", args.kind));
    };
    let name = &args.name;
    let vm_object = if vm {
        let vms: Api<crds::kubevirt::VirtualMachine> = Api::namespaced(client.clone(), namespace);
        let got =
            vms.get(name).await.map_err(|e| format!("{dry}Error getting VirtualMachine {name}: {}", message(&e)))?;
        Some(got)
    } else {
        None
    };
    let body = if args.dry_run { json!({"dryRun": ["All"]}) } else { json!({}) };
    let request = http::Request::put(path(namespace, name, verb.as_str()))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body.to_string().into_bytes())
        .map_err(|e| e.to_string())?;
    let failed = |m: String| format!("{dry}Error {} VirtualMachineInstance {name}: {m}", verb.gerund());
    match client.request_text(request).await {
        Ok(_) => Ok(format!("{dry}VMI {name} was scheduled to {}", verb.as_str())),
        Err(kube::Error::Api(s)) if s.code == 404 && verb == PauseVerb::Pause && vm_object.is_some() => {
            let spec = vm_object.as_ref().map(|v| &v.spec);
            let halted = spec.and_then(|s| s.run_strategy.as_ref()) == Some(&RunStrategy::Halted)
                || spec.and_then(|s| s.running) == Some(false);
            if halted {
                Err(format!(
                    "{dry}Error pausing VirtualMachineInstance {name}. VirtualMachine {name} is not set to run"
                ))
            } else {
                Err(format!("{dry}Error pausing VirtualMachineInstance {name}, it was not found"))
            }
        }
        Err(e) => Err(failed(message(&e))),
    }
}

/// The text upstream's virtctl prints for a failed API call: the server's `Status` message, else the error.
pub fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_paths() {
        assert_eq!(names_vm("VM"), Some(true));
        assert_eq!(names_vm("virtualmachineinstances"), Some(false));
        assert_eq!(names_vm("pod"), None);
        assert_eq!(
            path("ns", "v", "console"),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachineinstances/v/console"
        );
    }
}
