//! `portforward`: a websocket (subprotocol `plain.kubevirt.io`) carrying one TCP connection or one UDP flow to a
//! port of the guest, as upstream's virt-api serves it (contract §0.2, §8; `virtctl port-forward`).
//!
//! ```text
//! GET …/virtualmachineinstances/{name}/portforward/{port}[/{protocol}]
//! GET …/virtualmachines/{name}/portforward/{port}[/{protocol}]
//!   ─► (VM: the VM, check_vm; its VMI, check_owner) the VMI ─► check (not paused)
//!   ─► target: status.interfaces[0].ipAddress:port ─► dial (virt-api itself, over the pod network)
//!   ─► 101 to the client ─► controller_runtime::ws::bridge(websocket, Tunnel)
//! ```
//!
//! Upstream dials the guest's first interface address from virt-api's own pod (with masquerade that is the
//! launcher pod's IP, whose NAT forwards to the guest); the node agent is not involved. Each websocket message
//! towards a UDP tunnel is one datagram, each datagram back is one message.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crds::kubevirt::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceConditionType};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UdpSocket};

use crate::lifecycle::Refusal;

/// How long connecting to the guest may take (upstream has the OS's default; a dead address should not hold
/// the user's request for minutes).
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

pub use contracts::kubevirt::portforward::{Protocol, SUBRESOURCE};

/// The path's protocol (`None`: TCP), or upstream's 500 for another network (`dial sctp: unknown network sctp`,
/// as Go's `net.Dial` says it).
pub fn protocol(s: Option<&str>) -> Result<Protocol, Refusal> {
    match s {
        None => Ok(Protocol::Tcp),
        Some(name) => {
            Protocol::from_name(name).ok_or_else(|| dial_error(&format!("dial {name}: unknown network {name}")))
        }
    }
}

/// Upstream's 500 of a failed dial (`errors.NewInternalError(fmt.Errorf("dialing VM: %w", err))`).
fn dial_error(err: &str) -> Refusal {
    internal(&format!("dialing VM: {err}"))
}

/// A 500 as `errors.NewInternalError(err)` prints it.
fn internal(err: &str) -> Refusal {
    Refusal { code: 500, reason: "InternalError", message: format!("Internal error occurred: {err}") }
}

/// The VM path's check of the VM (`FetchVirtualMachineInstanceForVM`): its VMI must have been created.
pub fn check_vm(vm: &VirtualMachine) -> Result<(), Refusal> {
    let created = vm.status.as_ref().and_then(|s| s.created).unwrap_or(false);
    if created {
        Ok(())
    } else {
        Err(Refusal::conflict(vm.metadata.name.as_deref().unwrap_or_default(), "VMI is not started"))
    }
}

/// The VM path's check that the VMI of the VM's name is the VM's own (an owner reference with its UID), with
/// upstream's text for one that is not.
pub fn check_owner(vm: &VirtualMachine, vmi: &VirtualMachineInstance) -> Result<(), Refusal> {
    let uid = vm.metadata.uid.as_deref();
    let owned = vmi.metadata.owner_references.iter().flatten().any(|r| Some(r.uid.as_str()) == uid);
    if owned {
        Ok(())
    } else {
        let name = vmi.metadata.name.as_deref().unwrap_or_default();
        Err(internal(&format!("unable to retrieve vmi [{name}] for vm: <nil>")))
    }
}

/// Upstream's check of the VMI (`validateVMIForPortForward`): a paused one is refused.
pub fn check(vmi: &VirtualMachineInstance) -> Result<(), Refusal> {
    let conditions = vmi.status.as_ref().and_then(|s| s.conditions.as_ref());
    if conditions.into_iter().flatten().any(|c| c.type_ == VirtualMachineInstanceConditionType::Paused) {
        let name = vmi.metadata.name.as_deref().unwrap_or_default();
        return Err(Refusal::conflict_on("virtualmachineinstance", name, "VMI is paused"));
    }
    Ok(())
}

/// The address to dial: the VMI's first interface's IP and the path's `port`, or upstream's refusals (400 when
/// the VMI reports no interface; 500 for a port Go's dialer would not take).
pub fn target(vmi: &VirtualMachineInstance, port: &str, protocol: Protocol) -> Result<SocketAddr, Refusal> {
    let interfaces = vmi.status.as_ref().and_then(|s| s.interfaces.as_deref()).unwrap_or_default();
    let Some(first) = interfaces.first() else {
        return Err(Refusal::bad_request("no network interfaces are present"));
    };
    let ip_text = first.ip_address.as_deref().unwrap_or_default();
    let shown = if ip_text.contains(':') { format!("[{ip_text}]:{port}") } else { format!("{ip_text}:{port}") };
    let ip: IpAddr = ip_text
        .parse()
        .map_err(|_| dial_error(&format!("dial {}: address {shown}: missing address", protocol.as_str())))?;
    let port: u16 =
        port.parse().map_err(|_| dial_error(&format!("dial {}: address {shown}: invalid port", protocol.as_str())))?;
    Ok(SocketAddr::new(ip, port))
}

/// Connects to `addr` with `protocol`: the tunnel, or upstream's 500 (`dialing VM: dial tcp 10.0.0.7:81:
/// connect: connection refused`).
pub async fn dial(addr: SocketAddr, protocol: Protocol) -> Result<Tunnel, Refusal> {
    let fail = |what: &str| dial_error(&format!("dial {} {addr}: {what}", protocol.as_str()));
    let connect = async {
        match protocol {
            Protocol::Tcp => TcpStream::connect(addr).await.map(Tunnel::Tcp),
            Protocol::Udp => {
                let local: SocketAddr =
                    if addr.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
                let socket = UdpSocket::bind(local).await?;
                socket.connect(addr).await?;
                Ok(Tunnel::Udp(socket))
            }
        }
    };
    match tokio::time::timeout(DIAL_TIMEOUT, connect).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) => Err(fail(&format!("connect: {}", controller_runtime::oserr::go_text(&e)))),
        Err(_) => Err(fail("i/o timeout")),
    }
}

/// A connection to the guest's port, as the byte stream [`controller_runtime::ws::bridge`] carries: for UDP each
/// write is one datagram and each read returns one.
#[derive(Debug)]
pub enum Tunnel {
    /// A TCP connection.
    Tcp(TcpStream),
    /// A UDP socket connected to the guest's address.
    Udp(UdpSocket),
}

impl AsyncRead for Tunnel {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Tunnel::Udp(s) => s.poll_recv(cx, buf),
        }
    }
}

impl AsyncWrite for Tunnel {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Tunnel::Udp(s) => s.poll_send(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_flush(cx),
            Tunnel::Udp(_) => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tunnel::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Tunnel::Udp(_) => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn vmi(extra: serde_json::Value) -> VirtualMachineInstance {
        let mut v = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachine", "name": "vm1", "uid": "u-1"}]},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": "Running", "interfaces": [{"name": "default", "ipAddress": "10.244.0.7"}]}});
        json_patch::merge(&mut v, &extra);
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn vm(created: Option<bool>, uid: &str) -> VirtualMachine {
        serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "uid": uid}, "spec": {"template": {"spec": {"domain": {"devices": {}}}}},
            "status": {"created": created}}))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn upstreams_checks_and_texts() {
        let prefix = "Operation cannot be fulfilled on";
        assert_eq!(check(&vmi(json!({}))), Ok(()));
        let paused = vmi(json!({"status": {"conditions": [{"type": "Paused", "status": "True"}]}}));
        let r = check(&paused).err().unwrap_or_else(|| panic!("paused"));
        assert_eq!(
            (r.code, r.message),
            (409, format!("{prefix} virtualmachineinstance.kubevirt.io \"vm1\": VMI is paused"))
        );
        assert_eq!(check_vm(&vm(Some(true), "u-1")), Ok(()));
        let r = check_vm(&vm(None, "u-1")).err().unwrap_or_else(|| panic!("not created"));
        assert_eq!(
            (r.code, r.message),
            (409, format!("{prefix} virtualmachine.kubevirt.io \"vm1\": VMI is not started"))
        );
        assert_eq!(check_owner(&vm(Some(true), "u-1"), &vmi(json!({}))), Ok(()));
        let r = check_owner(&vm(Some(true), "u-2"), &vmi(json!({}))).err().unwrap_or_else(|| panic!("not owned"));
        assert_eq!(
            (r.code, r.message),
            (500, "Internal error occurred: unable to retrieve vmi [vm1] for vm: <nil>".to_owned())
        );
    }

    #[test]
    fn the_target_is_the_first_interface() {
        assert_eq!(target(&vmi(json!({})), "80", Protocol::Tcp), Ok(SocketAddr::from(([10, 244, 0, 7], 80))));
        let v6 = vmi(json!({"status": {"interfaces": [{"name": "default", "ipAddress": "fd00::7"}]}}));
        assert_eq!(target(&v6, "53", Protocol::Udp).map(|a| a.to_string()), Ok("[fd00::7]:53".to_owned()));
        let none = vmi(json!({"status": {"interfaces": null}}));
        let r = target(&none, "80", Protocol::Tcp).err().unwrap_or_else(|| panic!("no interfaces"));
        assert_eq!((r.code, r.message.as_str()), (400, "no network interfaces are present"));
        let r = target(&vmi(json!({})), "99999", Protocol::Tcp).err().unwrap_or_else(|| panic!("bad port"));
        assert_eq!(
            (r.code, r.message.as_str()),
            (500, "Internal error occurred: dialing VM: dial tcp: address 10.244.0.7:99999: invalid port")
        );
        assert_eq!(protocol(None), Ok(Protocol::Tcp));
        assert_eq!(protocol(Some("udp")), Ok(Protocol::Udp));
        assert_eq!(
            protocol(Some("sctp")).err().map(|r| r.message),
            Some("Internal error occurred: dialing VM: dial sctp: unknown network sctp".to_owned())
        );
    }

    #[tokio::test]
    async fn tunnels_carry_tcp_and_udp() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let server = tokio::spawn(async move {
            let (mut c, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
            let mut buf = [0u8; 4];
            c.read_exact(&mut buf).await.unwrap_or_else(|e| panic!("{e}"));
            c.write_all(&buf).await.unwrap_or_else(|e| panic!("{e}"));
        });
        let mut t = dial(addr, Protocol::Tcp).await.unwrap_or_else(|e| panic!("{e:?}"));
        t.write_all(b"ping").await.unwrap_or_else(|e| panic!("{e}"));
        let mut buf = [0u8; 4];
        t.read_exact(&mut buf).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&buf, b"ping");
        server.await.unwrap_or_else(|e| panic!("{e}"));

        let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap_or_else(|e| panic!("{e}"));
        let echo_addr = echo.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let mut u = dial(echo_addr, Protocol::Udp).await.unwrap_or_else(|e| panic!("{e:?}"));
        u.write_all(b"one datagram").await.unwrap_or_else(|e| panic!("{e}"));
        let mut got = [0u8; 64];
        let (n, from) = echo.recv_from(&mut got).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&got[..n], b"one datagram");
        echo.send_to(b"back", from).await.unwrap_or_else(|e| panic!("{e}"));
        let n = u.read(&mut got).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&got[..n], b"back");

        // Nothing listens on the port just freed: upstream's text of a refused connection.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        };
        let r = dial(closed, Protocol::Tcp).await.err().unwrap_or_else(|| panic!("connected to a closed port"));
        assert_eq!(
            r.message,
            format!("Internal error occurred: dialing VM: dial tcp {closed}: connect: connection refused")
        );
    }
}
