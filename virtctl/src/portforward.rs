//! `virtctl port-forward`: local ports tunnelled to a VM's or VMI's guest ports through virt-api's `portforward`
//! websocket (contract §8), with upstream virtctl's syntax, flags and texts.
//!
//! ```text
//! port-forward [--stdio] [--address A] type/name[/namespace] [protocol/]local[:remote]...
//!   --stdio (one port): websocket …/portforward/{remote}/{protocol} ⇄ stdin/stdout
//!   tcp: listen A:local ─► per connection a websocket ⇄ the connection
//!   udp: listen A:local ─► per client address a websocket; a datagram is a message and back
//!   ─► runs until Ctrl+C
//! ```
//!
//! Where upstream stops accepting on a port after one failed tunnel, this one logs the failure, drops that
//! connection and goes on; UDP keeps datagram boundaries both ways (upstream's re-chunks them at 1500 bytes).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use contracts::kubevirt::portforward;
pub use contracts::kubevirt::portforward::Protocol;
use controller_runtime::ws::{self, Payload};
use futures::{SinkExt, StreamExt};
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::{Mutex, mpsc};
use tokio_tungstenite::tungstenite::Message;

use crate::vmi::{self, names_vm};

/// Largest datagram read from a local UDP client.
const MAX_DATAGRAM: usize = 64 << 10;

/// Flags and arguments of `port-forward`.
#[derive(Debug, Clone, clap::Args)]
pub struct PortForwardArgs {
    /// Forward the tunnel to stdout/stdin; only works with a single port.
    #[arg(long)]
    pub stdio: bool,
    /// The address the local ports are opened on.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    /// `type/name[/namespace]` (type: vm, vmi, virtualmachine(s), virtualmachineinstance(s)).
    pub target: Option<String>,
    /// `[protocol/]localPort[:targetPort]`, one or more.
    pub ports: Vec<String>,
}

/// Where the tunnels go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// A VM (else a VMI).
    pub vm: bool,
    /// Its name.
    pub name: String,
    /// Its namespace, when the target names one.
    pub namespace: Option<String>,
}

/// Upstream's `ParseTarget`: `type/name[/namespace]`, with its texts.
pub fn parse_target(target: &str) -> Result<Target, String> {
    if target.is_empty() {
        return Err("target cannot be empty".into());
    }
    let parts: Vec<&str> = target.split('/').collect();
    let (kind, name, namespace) = match parts.as_slice() {
        [_] => return Err("target must contain type and name separated by '/'".into()),
        [kind, name] => (*kind, *name, None),
        [_, _, ""] => return Err("namespace cannot be empty".into()),
        [kind, name, ns] => (*kind, *name, Some((*ns).to_owned())),
        _ => return Err("target is not valid with more than two '/'".into()),
    };
    let vm = names_vm(kind).ok_or_else(|| format!("unsupported resource type '{kind}'"))?;
    if name.is_empty() {
        return Err("name cannot be empty".into());
    }
    Ok(Target { vm, name: name.to_owned(), namespace })
}

/// One forwarded port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Port {
    /// The local port.
    pub local: u16,
    /// The guest's port.
    pub remote: u16,
    /// The transport.
    pub protocol: Protocol,
}

/// Go's `strconv.Atoi` of a port, with its error text (and the range a port has).
fn atoi(s: &str) -> Result<u16, String> {
    let n: i64 = s.parse().map_err(|_| format!("strconv.Atoi: parsing {s:?}: invalid syntax"))?;
    u16::try_from(n).map_err(|_| format!("invalid port {n}: must be between 0 and 65535"))
}

/// Upstream's `parsePort`: `[protocol/]local[:remote]`; an unknown protocol is upstream's `unknown protocol: X`.
pub fn parse_port(arg: &str) -> Result<Port, String> {
    let (protocol, ports) = match arg.split('/').collect::<Vec<_>>().as_slice() {
        [p, rest, ..] => (*p, *rest),
        _ => ("tcp", arg),
    };
    let fields: Vec<&str> = ports.split(':').filter(|f| !f.is_empty()).collect();
    let Some(first) = fields.first() else {
        return Err("invalid port, missing local and/or remote port".into());
    };
    let local = atoi(first)?;
    let remote = match fields.get(1) {
        Some(r) => atoi(r)?,
        None => local,
    };
    let protocol = Protocol::from_name(protocol).ok_or_else(|| format!("unknown protocol: {protocol}"))?;
    Ok(Port { local, remote, protocol })
}

/// The websocket path of the tunnel to `port` of `target` in `namespace` (the protocol always named, as
/// upstream's client does).
pub fn tunnel_path(target: &Target, namespace: &str, port: &Port) -> String {
    vmi::resource_path(target.vm, namespace, &target.name, &portforward::subresource_path(port.remote, port.protocol))
}

/// `virtctl port-forward`: `Err` is the text to print (exit 1). Runs until Ctrl+C (`--stdio`: until the tunnel
/// or stdin ends).
pub async fn port_forward(args: &PortForwardArgs, client: kube::Client, namespace: &str) -> Result<(), String> {
    let given = usize::from(args.target.is_some()) + args.ports.len();
    let Some(target) = args.target.as_deref().filter(|_| !args.ports.is_empty()) else {
        eprintln!(
            "fatal: Number of input parameters is incorrect, portforward requires at least 2 arg(s), received {given}"
        );
        return Err("argument validation failed".into());
    };
    let target = parse_target(target)?;
    let ports = args.ports.iter().map(|p| parse_port(p)).collect::<Result<Vec<_>, _>>()?;
    let namespace = target.namespace.clone().unwrap_or_else(|| namespace.to_owned());
    if args.stdio {
        let [port] = ports.as_slice() else {
            return Err("only one port supported when forwarding to stdout".into());
        };
        let ws = vmi::open(&client, &tunnel_path(&target, &namespace, port)).await.map_err(|e| e.to_string())?;
        return vmi::stdio_session(ws, None, str::to_owned).await;
    }
    let ip: std::net::IpAddr = match args.address.as_str() {
        "localhost" => std::net::Ipv4Addr::LOCALHOST.into(),
        a => a.parse().map_err(|_| format!("lookup {a}: no such host"))?,
    };
    let kind = if target.vm { "vm" } else { "vmi" };
    let tunnel = Arc::new(Tunnel { client, target: target.clone(), namespace });
    for port in ports {
        let local = SocketAddr::new(ip, port.local);
        let proto = port.protocol.as_str();
        eprintln!("forwarding {proto} {ip}:{} to {}", port.local, port.remote);
        let shown =
            |e: std::io::Error| format!("listen {proto} {local}: bind: {}", controller_runtime::oserr::go_text(&e));
        match port.protocol {
            Protocol::Tcp => {
                let listener = TcpListener::bind(local).await.map_err(shown)?;
                tokio::spawn(forward_tcp(listener, port, tunnel.clone(), kind));
            }
            Protocol::Udp => {
                let socket = UdpSocket::bind(local).await.map_err(shown)?;
                tokio::spawn(forward_udp(Arc::new(socket), port, tunnel.clone(), kind));
            }
        }
    }
    let _ = tokio::signal::ctrl_c().await;
    Ok(())
}

/// What opening a tunnel needs.
struct Tunnel {
    client: kube::Client,
    target: Target,
    namespace: String,
}

impl Tunnel {
    async fn open(&self, port: &Port, kind: &str) -> Option<vmi::Stream> {
        match vmi::open(&self.client, &tunnel_path(&self.target, &self.namespace, port)).await {
            Ok(ws) => Some(ws),
            Err(e) => {
                eprintln!("can't access {kind}/{}.{}: {e}", self.target.name, self.namespace);
                None
            }
        }
    }
}

async fn forward_tcp(listener: TcpListener, port: Port, tunnel: Arc<Tunnel>, kind: &'static str) {
    loop {
        let conn = match listener.accept().await {
            Ok((conn, _)) => conn,
            Err(e) => {
                eprintln!("error accepting connection: {e}");
                continue;
            }
        };
        let tunnel = tunnel.clone();
        tokio::spawn(async move {
            eprintln!("opening new tcp tunnel to {}", port.remote);
            if let Some(ws) = tunnel.open(&port, kind).await {
                eprintln!("handling tcp connection for {}", port.local);
                ws::bridge(ws, conn).await;
            }
        });
    }
}

/// The local UDP clients by address: each one's sender of datagrams towards its websocket.
type Clients = Arc<Mutex<HashMap<SocketAddr, mpsc::Sender<bytes::Bytes>>>>;

async fn forward_udp(socket: Arc<UdpSocket>, port: Port, tunnel: Arc<Tunnel>, kind: &'static str) {
    let clients: Clients = Arc::default();
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let (n, from) = match socket.recv_from(&mut buf).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("{e}");
                continue;
            }
        };
        let datagram = bytes::Bytes::copy_from_slice(&buf[..n]);
        let mut map = clients.lock().await;
        if let Some(tx) = map.get(&from) {
            match tx.try_send(datagram.clone()) {
                // A full queue drops the datagram, as a congested network would.
                Ok(()) | Err(mpsc::error::TrySendError::Full(_)) => continue,
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
        eprintln!("opening new udp tunnel to {}", port.remote);
        let Some(ws) = tunnel.open(&port, kind).await else { continue };
        let (tx, rx) = mpsc::channel(64);
        let _ = tx.send(datagram).await;
        map.insert(from, tx);
        tokio::spawn(udp_client(ws, rx, socket.clone(), from, clients.clone()));
    }
}

/// One UDP client's tunnel: its datagrams out as messages, messages back as datagrams to it; on the tunnel's end
/// the client is forgotten (its next datagram opens a new tunnel).
async fn udp_client(
    ws: vmi::Stream,
    mut rx: mpsc::Receiver<bytes::Bytes>,
    socket: Arc<UdpSocket>,
    client: SocketAddr,
    clients: Clients,
) {
    let (mut ws_tx, mut ws_rx) = ws.split();
    let out = async {
        while let Some(d) = rx.recv().await {
            if ws_tx.send(Message::Binary(d)).await.is_err() {
                break;
            }
        }
    };
    let back = async {
        while let Some(Ok(msg)) = ws_rx.next().await {
            let data = match ws::payload(msg) {
                Payload::Data(d) => d,
                Payload::Close => break,
                Payload::Skip => continue,
            };
            if let Err(e) = socket.send_to(&data, client).await {
                eprintln!("closing client: {e}");
                break;
            }
        }
    };
    tokio::select! {
        () = out => {}
        () = back => {}
    }
    clients.lock().await.remove(&client);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_as_upstream_parses_them() {
        assert_eq!(parse_target("vmi/testvmi"), Ok(Target { vm: false, name: "testvmi".into(), namespace: None }));
        assert_eq!(
            parse_target("VirtualMachines/testvm/ns"),
            Ok(Target { vm: true, name: "testvm".into(), namespace: Some("ns".into()) })
        );
        assert_eq!(parse_target(""), Err("target cannot be empty".into()));
        assert_eq!(parse_target("testvmi"), Err("target must contain type and name separated by '/'".into()));
        assert_eq!(parse_target("vm/a/"), Err("namespace cannot be empty".into()));
        assert_eq!(parse_target("vm/a/b/c"), Err("target is not valid with more than two '/'".into()));
        assert_eq!(parse_target("pod/a"), Err("unsupported resource type 'pod'".into()));
        assert_eq!(parse_target("vm/"), Err("name cannot be empty".into()));
    }

    #[test]
    fn ports_as_upstream_parses_them() {
        assert_eq!(parse_port("8080"), Ok(Port { local: 8080, remote: 8080, protocol: Protocol::Tcp }));
        assert_eq!(parse_port("8080:80"), Ok(Port { local: 8080, remote: 80, protocol: Protocol::Tcp }));
        assert_eq!(parse_port("udp/5353:53"), Ok(Port { local: 5353, remote: 53, protocol: Protocol::Udp }));
        assert_eq!(parse_port(":"), Err("invalid port, missing local and/or remote port".into()));
        assert_eq!(parse_port("abc"), Err("strconv.Atoi: parsing \"abc\": invalid syntax".into()));
        assert_eq!(parse_port("sctp/1:2"), Err("unknown protocol: sctp".into()));
        let t = Target { vm: true, name: "v".into(), namespace: None };
        assert_eq!(
            tunnel_path(&t, "ns", &Port { local: 1, remote: 22, protocol: Protocol::Tcp }),
            "/apis/subresources.kubevirt.io/v1/namespaces/ns/virtualmachines/v/portforward/22/tcp"
        );
    }
}
