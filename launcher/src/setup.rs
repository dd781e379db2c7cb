//! The pod's privileged set-up. The launcher runs as the `qemu` user (107) without capabilities (upstream's
//! non-root launcher); what needs root is done for it by the node agent, as upstream's virt-handler does:
//!
//! ```text
//! launcher (107)  listens on <pod sockets>/setup-sock (SocketDir::setup_socket), waits (bounded)
//! node agent      connects; the peer's PID (SO_PEERCRED, host PID namespace) must be in the pod's cgroup;
//!                 runs `virt-launcher pod-setup` (this image's program, as root, in the pod's network and mount
//!                 namespaces) with a SetupRequest built from its own copy of the VMI on stdin and the connection
//!                 as stdout
//! pod-setup       [`privileged`]: the masquerade links and rules (network::apply_links), the secondary interfaces'
//!                 bridges (network::apply_bridge), the claims' block devices and images owned by 107, one DHCP
//!                 server socket bound to port 67 of each bridge whose guest gets an address
//!                 ─► one SetupReply line on the connection, the sockets attached (SCM_RIGHTS) ─► exits
//! launcher (107)  [`from_node_agent`]: the reply (only from a root peer) and the sockets ─► serves DHCP on them
//! ```
//!
//! Trust: `pod-setup` reads nothing the launcher wrote (the request is the node agent's, its scratch files go to a
//! fresh private directory), follows no symlink it chowns, and runs a program the launcher cannot change (the
//! image's files are root's; the compute container runs as 107 without privilege escalation). A launcher started
//! as root (tests, upstream's `Root` mode) does the same set-up itself.

use std::io::{self, Read};
use std::net::UdpSocket;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use contracts::kubevirt::launcher::{POD_BRIDGE, SecondaryLink, SetupReply, SetupRequest};
use crds::kubevirt::VirtualMachineInstanceSpec;
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

use crate::dhcp;
use crate::disks::{self, Action, VolumePlan};
use crate::files;
use crate::layout::Layout;
use crate::network::{self, Links};

/// Why the set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request is not a SetupRequest.
    #[error("the set-up request is not a SetupRequest")]
    Request(#[source] serde_json::Error),
    /// The VMI spec does not parse.
    #[error("the VMI spec of the set-up request is not a VirtualMachineInstanceSpec")]
    Spec(#[source] serde_json::Error),
    /// The volumes' plan.
    #[error("planning the volumes")]
    Disks(#[source] disks::Error),
    /// The pod network.
    #[error("setting up the pod network")]
    Network(#[source] network::Error),
    /// Making a claim QEMU's.
    #[error("volume {volume:?}: {operation} {}", path.display())]
    Own {
        /// The volume.
        volume: String,
        /// What was done.
        operation: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A claim's image is a symlink (it is never followed as root).
    #[error("volume {volume:?}: {} is a symbolic link", path.display())]
    Symlink {
        /// The volume.
        volume: String,
        /// The link.
        path: PathBuf,
    },
    /// The hand-over with the node agent.
    #[error("the set-up hand-over on {}: {operation}", socket.display())]
    HandOver {
        /// The socket.
        socket: PathBuf,
        /// What was done.
        operation: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Nobody connected in time.
    #[error("the node agent did not set up the pod within {} s (is its DaemonSet running on this node?)", .0.as_secs())]
    Timeout(Duration),
    /// The node agent's set-up failed.
    #[error("the node agent's set-up of the pod failed: {0}")]
    Refused(String),
}

/// What the privileged set-up made.
#[derive(Debug, Default)]
pub struct Done {
    /// The masquerade links, when the VMI has a pod-network interface.
    pub links: Option<Links>,
    /// The secondary interfaces' bridge bindings, in the plan's order.
    pub secondary: Vec<SecondaryLink>,
    /// The DHCP server sockets, by spec interface name: the masquerade interface's, then those of the secondary
    /// interfaces that had an IPv4 address.
    pub dhcp: Vec<(String, UdpSocket)>,
}

impl Done {
    /// One line saying what was set up (the reply's summary): the masquerade links, each bridge, else the claims.
    pub fn summary(&self) -> String {
        let mut parts: Vec<String> = self.links.iter().map(|l| l.summary.clone()).collect();
        parts.extend(self.secondary.iter().map(|l| {
            format!("bridge {} ({} MTU {})", l.interface, l.address.as_deref().unwrap_or("no IPv4 address"), l.mtu)
        }));
        if parts.is_empty() { String::from("claims owned") } else { parts.join("; ") }
    }
}

/// The most DHCP sockets one reply carries (one per interface of a VMI).
pub const MAX_SOCKETS: usize = 32;

/// Whether a pod with these plans needs the privileged set-up: an interface or a claim.
pub fn needed(network: &network::Plan, volumes: &[VolumePlan]) -> bool {
    !network.is_empty() || volumes.iter().any(|p| matches!(p.action, Action::Pvc { .. }))
}

/// The privileged set-up of a pod with these plans, in this process's namespaces (as root).
pub fn privileged(
    network: &network::Plan,
    volumes: &[VolumePlan],
    host: &network::Host,
    layout: &Layout,
) -> Result<Done, Error> {
    for p in volumes {
        if let Action::Pvc { device, mount, image } = &p.action {
            own_claim(&p.volume, &layout.at(device), &layout.at(mount), &layout.at(image))?;
        }
    }
    let bind = |bridge: &str| dhcp::bind(bridge).map_err(|e| Error::Network(network::Error::from(e)));
    let mut done = Done::default();
    if let Some(m) = &network.pod {
        done.links = Some(network::apply_links(m, host).map_err(Error::Network)?);
        done.dhcp.push((m.interface.clone(), bind(POD_BRIDGE)?));
    }
    for b in &network.secondary {
        let link = network::apply_bridge(b, host).map_err(Error::Network)?;
        if link.address.is_some() {
            done.dhcp.push((b.interface.clone(), bind(&b.bridge)?));
        }
        done.secondary.push(link);
    }
    if done.dhcp.len() > MAX_SOCKETS {
        return Err(Error::Network(network::Error::Invalid {
            interface: String::from("(all)"),
            message: format!("more than {MAX_SOCKETS} interfaces with DHCP"),
        }));
    }
    Ok(done)
}

/// A claim's block device, or its image (or, without one, its mount point, where the launcher creates it), owned
/// by QEMU's user; symlinks are refused, never followed.
fn own_claim(volume: &str, device: &Path, mount: &Path, image: &Path) -> Result<(), Error> {
    let own = |path: &Path, operation| {
        let meta = std::fs::symlink_metadata(path);
        match meta {
            Ok(m) if m.file_type().is_symlink() => {
                Err(Error::Symlink { volume: volume.to_owned(), path: path.to_path_buf() })
            }
            Ok(m) if m.uid() == files::qemu_owner() => Ok(true),
            Ok(_) => files::lchown(path, files::qemu_owner()).map(|()| true).map_err(|source| Error::Own {
                volume: volume.to_owned(),
                operation,
                path: path.to_path_buf(),
                source,
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(source) => {
                Err(Error::Own { volume: volume.to_owned(), operation: "inspecting", path: path.to_path_buf(), source })
            }
        }
    };
    if std::fs::symlink_metadata(device).is_ok_and(|m| m.file_type().is_block_device()) {
        own(device, "changing the owner of the block device")?;
        return Ok(());
    }
    if !own(image, "changing the owner of")? && mount.is_dir() {
        own(mount, "changing the owner of the mount point")?;
    }
    Ok(())
}

/// `virt-launcher pod-setup`: reads the [`SetupRequest`] from `input`, does [`privileged`] and sends the
/// [`SetupReply`] (with the DHCP socket) on `reply` (the launcher's connection). `Err` only when the reply could
/// not be sent.
pub fn serve_request(mut input: impl Read, reply: impl AsFd, layout: &Layout) -> io::Result<()> {
    let outcome = (|| {
        let mut text = String::new();
        input.read_to_string(&mut text).map_err(|e| Error::Request(serde_json::Error::io(e)))?;
        let req: SetupRequest = serde_json::from_str(&text).map_err(Error::Request)?;
        let spec: VirtualMachineInstanceSpec = serde_json::from_value(req.vmi_spec.clone()).map_err(Error::Spec)?;
        let hostname = network::hostname(&spec, &req.vmi_name);
        let net = network::plan(&spec, &hostname, &req.vmi_uid).map_err(Error::Network)?;
        let volumes = disks::plan(spec.volumes.as_deref().unwrap_or_default()).map_err(Error::Disks)?;
        // Scratch files (the nftables ruleset) in a fresh directory only root can enter: nothing the launcher
        // prepared is written to as root.
        let scratch = tempfile::tempdir().map_err(|source| Error::HandOver {
            socket: PathBuf::from("/tmp"),
            operation: "creating a scratch directory",
            source,
        })?;
        let host = network::Host {
            tun_device: PathBuf::from("/dev/net/tun"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            state_dir: scratch.path().to_path_buf(),
            tap_owner: files::qemu_owner(),
        };
        privileged(&net, &volumes, &host, layout)
    })();
    let (reply_msg, sockets) = match outcome {
        Ok(done) => {
            let reply = SetupReply {
                error: None,
                summary: done.summary(),
                mtu: done.links.map(|l| l.mtu),
                secondary: done.secondary,
                dhcp_interfaces: done.dhcp.iter().map(|(i, _)| i.clone()).collect(),
            };
            (reply, done.dhcp.into_iter().map(|(_, s)| s).collect())
        }
        Err(e) => (SetupReply { error: Some(contracts::errors::chain_line(&e)), ..SetupReply::default() }, Vec::new()),
    };
    let fds: Vec<_> = sockets.iter().map(AsFd::as_fd).collect();
    send_reply(reply, &reply_msg, &fds)
}

/// Sends `msg` as one JSON line on `to`, with `fds` attached (at most [`MAX_SOCKETS`]).
pub fn send_reply(to: impl AsFd, msg: &SetupReply, fds: &[std::os::fd::BorrowedFd<'_>]) -> io::Result<()> {
    let line = msg.to_line();
    let mut space = vec![std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("the control buffer cannot hold the socket"));
    }
    let sent = rustix::net::sendmsg(to, &[io::IoSlice::new(line.as_bytes())], &mut control, SendFlags::empty())?;
    if sent != line.len() {
        return Err(io::Error::other("the reply was cut short"));
    }
    Ok(())
}

/// The largest reply read.
const MAX_REPLY: usize = 64 * 1024;

/// The non-root launcher's side: listens on `socket`, waits up to `timeout` for the node agent (a peer running
/// as root), and returns its reply's facts and the DHCP sockets it attached, by the interface each serves
/// ([`SetupReply::dhcp_interfaces`]). The socket file is removed after.
pub async fn from_node_agent(
    socket: &Path,
    timeout: Duration,
) -> Result<(SetupReply, Vec<(String, UdpSocket)>), Error> {
    let hand_over = |operation| {
        let socket = socket.to_path_buf();
        move |source| Error::HandOver { socket, operation, source }
    };
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(hand_over("removing a stale socket")(e)),
    }
    let listener = tokio::net::UnixListener::bind(socket).map_err(hand_over("listening"))?;
    let result = tokio::time::timeout(timeout, async {
        loop {
            let (conn, _) = listener.accept().await.map_err(hand_over("accepting"))?;
            // Only root (the node agent and what it runs) may answer: another container of the pod could connect.
            match conn.peer_cred() {
                Ok(c) if c.uid() == 0 => {}
                Ok(c) => {
                    tracing::warn!(uid = c.uid(), "a set-up connection from a non-root peer was refused");
                    continue;
                }
                Err(e) => return Err(hand_over("reading the peer's credentials")(e)),
            }
            let std_conn = conn.into_std().map_err(hand_over("reading the reply"))?;
            std_conn.set_nonblocking(false).map_err(hand_over("reading the reply"))?;
            let read = tokio::task::spawn_blocking(move || receive(&std_conn))
                .await
                .map_err(|e| hand_over("reading the reply")(io::Error::other(e)))?;
            return read.map_err(hand_over("reading the reply"));
        }
    })
    .await;
    let _ = std::fs::remove_file(socket);
    let (reply, fds) = result.map_err(|_| Error::Timeout(timeout))??;
    if let Some(error) = reply.error.clone() {
        return Err(Error::Refused(error));
    }
    if fds.len() != reply.dhcp_interfaces.len() {
        return Err(Error::Refused(format!(
            "the reply names {} DHCP sockets but carries {}",
            reply.dhcp_interfaces.len(),
            fds.len()
        )));
    }
    let sockets = reply.dhcp_interfaces.iter().cloned().zip(fds.into_iter().map(UdpSocket::from)).collect();
    Ok((reply, sockets))
}

/// Reads one reply line and the descriptors sent with it.
fn receive(conn: &std::os::unix::net::UnixStream) -> io::Result<(SetupReply, Vec<OwnedFd>)> {
    let mut data = Vec::new();
    let mut fds = Vec::new();
    let mut buf = [0u8; 4096];
    while !data.ends_with(b"\n") {
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let r =
            rustix::net::recvmsg(conn, &mut [io::IoSliceMut::new(&mut buf)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
        for m in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = m {
                fds.extend(received);
            }
        }
        if r.bytes == 0 {
            break;
        }
        data.extend_from_slice(&buf[..r.bytes]);
        if data.len() > MAX_REPLY {
            return Err(io::Error::other("the reply is too long"));
        }
    }
    let reply = SetupReply::from_line(&data).map_err(|e| io::Error::other(format!("not a SetupReply: {e}")))?;
    Ok((reply, fds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_pod_network_or_a_claim_needs_the_node_agent() -> Result<(), String> {
        let needs = |spec: serde_json::Value| {
            let spec: VirtualMachineInstanceSpec = serde_json::from_value(spec).map_err(|e| e.to_string())?;
            let net = network::plan(&spec, "h", "u-1").map_err(|e| e.to_string())?;
            let volumes = disks::plan(spec.volumes.as_deref().unwrap_or_default()).map_err(|e| e.to_string())?;
            Ok::<bool, String>(needed(&net, &volumes))
        };
        let disk = serde_json::json!([{"name": "d", "containerDisk": {"image": "i"}}]);
        assert!(!needs(serde_json::json!({"domain": {"devices": {}}, "volumes": disk}))?);
        assert!(needs(serde_json::json!({"domain": {"devices": {}}, "volumes": [{"name": "d",
            "persistentVolumeClaim": {"claimName": "c"}}]}))?);
        assert!(needs(
            serde_json::json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}], "volumes": disk})
        )?);
        Ok(())
    }

    type Waiting = tokio::task::JoinHandle<Result<(SetupReply, Vec<(String, UdpSocket)>), Error>>;

    /// A launcher waiting on a fresh socket (its directory, the socket, the wait).
    async fn listening() -> Result<(tempfile::TempDir, PathBuf, Waiting), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = dir.path().join("setup-sock");
        let p = path.clone();
        let waiting = tokio::spawn(async move { from_node_agent(&p, Duration::from_secs(10)).await });
        while !path.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok((dir, path, waiting))
    }

    #[tokio::test]
    async fn a_reply_and_its_socket_cross_the_hand_over() -> Result<(), String> {
        let (_dir, path, waiting) = listening().await?;
        let bind = || UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string());
        let (pod, ptp) = (bind()?, bind()?);
        let port = |s: &UdpSocket| s.local_addr().map(|a| a.port()).map_err(|e| e.to_string());
        let conn = std::os::unix::net::UnixStream::connect(&path).map_err(|e| e.to_string())?;
        let msg = SetupReply {
            error: None,
            summary: "links".into(),
            mtu: Some(1450),
            secondary: vec![SecondaryLink { interface: "ptp".into(), mtu: 1500, ..SecondaryLink::default() }],
            dhcp_interfaces: vec!["default".into(), "ptp".into()],
        };
        send_reply(&conn, &msg, &[pod.as_fd(), ptp.as_fd()]).map_err(|e| e.to_string())?;
        drop(conn);
        let (reply, got) = waiting.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
        assert_eq!(reply, msg);
        let got: Vec<(String, u16)> =
            got.iter().map(|(i, s)| Ok::<_, String>((i.clone(), port(s)?))).collect::<Result<_, _>>()?;
        assert_eq!(got, [("default".into(), port(&pod)?), ("ptp".into(), port(&ptp)?)], "the same sockets, in order");
        assert!(!path.exists(), "the socket file is removed");
        Ok(())
    }

    #[tokio::test]
    async fn a_failed_set_up_and_silence_are_errors() -> Result<(), String> {
        let (_dir, path, waiting) = listening().await?;
        let conn = std::os::unix::net::UnixStream::connect(&path).map_err(|e| e.to_string())?;
        let msg = SetupReply { error: Some("no bridge".into()), ..SetupReply::default() };
        send_reply(&conn, &msg, &[]).map_err(|e| e.to_string())?;
        let e = waiting.await.map_err(|e| e.to_string())?.err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("the node agent's set-up of the pod failed: no bridge"));
        let e = from_node_agent(&path, Duration::from_millis(200)).await.err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("the node agent did not set up the pod within 0 s (is its DaemonSet running on this node?)")
        );
        Ok(())
    }
}
