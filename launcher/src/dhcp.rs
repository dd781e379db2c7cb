//! The guest's DHCP server on the masquerade bridge (contract §2.4): one static lease, for the guest's MAC.
//!
//! ```text
//! guest ──DISCOVER / REQUEST / INFORM (broadcast to :67)──► k6t-eth0 ── UDP socket bound to it (SO_BINDTODEVICE)
//!       ◄──OFFER / ACK / NAK (broadcast to :68; unicast to ciaddr once it has one)──┘
//! ```
//!
//! [`answer`] is the whole protocol and is pure (table-tested and fuzzed: the bytes come from the guest);
//! [`DhcpServer`] runs it on one plain UDP socket in a thread of the launcher.
//!
//! Why our own server rather than busybox udhcpd (the launcher's first one) or a crate: udhcpd answers a client
//! without an address through a raw packet socket (CAP_NET_RAW), which the non-root launcher (upstream runs its DHCP
//! server in the unprivileged launcher, the privileged network set-up in the node agent) does not have, and no
//! maintained crate offers a DHCPv4 server for one static lease. Messages are encoded and decoded by `dhcproto`;
//! only the RFC 2131 decisions are here. Replies to a client without an address are broadcast, which RFC 2131
//! §4.1 allows and every DHCP client accepts: a UDP socket cannot unicast to an address that has no ARP entry.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dhcproto::v4::{DhcpOption, HType, Message, MessageType, Opcode, OptionCode};
use dhcproto::{Decodable, Encodable, Name};

/// The server's port.
pub const SERVER_PORT: u16 = 67;
/// The client's port.
pub const CLIENT_PORT: u16 = 68;
/// The smallest message sent: BOOTP's 300 bytes, which some clients still insist on.
const MIN_MESSAGE: usize = 300;
/// The largest message read (RFC 2131's 576-byte minimum MTU, with room for clients that send more options).
const MAX_MESSAGE: usize = 1500;

/// What the guest is told: its address and the pod's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The guest's MAC; nobody else is answered.
    pub mac: [u8; 6],
    /// Its address.
    pub address: Ipv4Addr,
    /// Its prefix length.
    pub prefix: u8,
    /// The server's identifier (option 54): the bridge's address, where the guest's requests come from.
    pub server: Ipv4Addr,
    /// The router (option 3); none on a secondary network without a default route.
    pub router: Option<Ipv4Addr>,
    /// Classless static routes (option 121, RFC 3442), a default route included when there is one: a client
    /// that takes them ignores option 3.
    pub routes: Vec<(ipnet::Ipv4Net, Ipv4Addr)>,
    /// Name servers (option 6).
    pub dns: Vec<Ipv4Addr>,
    /// Search domains (option 119).
    pub search: Vec<String>,
    /// Host name (option 12); empty: none.
    pub hostname: String,
    /// Interface MTU (option 26).
    pub mtu: u16,
    /// Lease time, seconds (option 51).
    pub lease_secs: u32,
    /// Boot file (option 67).
    pub boot_file: Option<String>,
    /// TFTP server name (option 66).
    pub tftp_server: Option<String>,
    /// NTP servers (option 42).
    pub ntp: Vec<Ipv4Addr>,
}

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(mac: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = mac.split([':', '-']);
    for byte in &mut out {
        let part = parts.next()?;
        if part.len() != 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// A reply and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The encoded message (at least 300 bytes).
    pub bytes: Vec<u8>,
    /// Its destination.
    pub to: SocketAddrV4,
    /// Its type, for the log.
    pub kind: MessageType,
}

/// Why a message got no reply (for the log; none of these is an error of the server).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Ignored {
    /// Not a DHCP message.
    #[error("undecodable message: {0}")]
    Undecodable(String),
    /// A reply, or a client whose hardware address is not an Ethernet MAC.
    #[error("not an Ethernet BOOTREQUEST")]
    NotARequest,
    /// Another MAC.
    #[error("not the guest's MAC")]
    OtherClient,
    /// A REQUEST for another server's offer.
    #[error("REQUEST for server {0}")]
    OtherServer(Ipv4Addr),
    /// A message type a server does not answer (DECLINE, RELEASE, …) or a message without one.
    #[error("{0:?}: nothing to answer")]
    NoAnswer(Option<MessageType>),
}

/// The reply to `packet` from the guest, per RFC 2131 §4.3 for a server with one address to give.
pub fn answer(lease: &Lease, packet: &[u8]) -> Result<Reply, Ignored> {
    let req = Message::from_bytes(packet).map_err(|e| Ignored::Undecodable(e.to_string()))?;
    if req.opcode() != Opcode::BootRequest || req.htype() != HType::Eth || req.hlen() != 6 {
        return Err(Ignored::NotARequest);
    }
    if req.chaddr().get(..6) != Some(&lease.mac[..]) {
        return Err(Ignored::OtherClient);
    }
    let kind = req.opts().msg_type();
    let requested = match req.opts().get(OptionCode::RequestedIpAddress) {
        Some(DhcpOption::RequestedIpAddress(a)) => Some(*a),
        _ => None,
    };
    let server = match req.opts().get(OptionCode::ServerIdentifier) {
        Some(DhcpOption::ServerIdentifier(a)) => Some(*a),
        _ => None,
    };
    match kind {
        Some(MessageType::Discover) => Ok(reply(lease, &req, MessageType::Offer)),
        Some(MessageType::Request) => {
            if let Some(s) = server.filter(|s| *s != lease.server) {
                return Err(Ignored::OtherServer(s));
            }
            // SELECTING / INIT-REBOOT name the address in option 50; RENEWING / REBINDING in ciaddr.
            let wanted = requested.or(Some(req.ciaddr()).filter(|a| !a.is_unspecified()));
            match wanted {
                Some(a) if a == lease.address => Ok(reply(lease, &req, MessageType::Ack)),
                Some(_) => Ok(reply(lease, &req, MessageType::Nak)),
                None => Err(Ignored::NoAnswer(kind)),
            }
        }
        Some(MessageType::Inform) => Ok(reply(lease, &req, MessageType::Ack)),
        other => Err(Ignored::NoAnswer(other)),
    }
}

fn reply(lease: &Lease, req: &Message, kind: MessageType) -> Reply {
    let inform = req.opts().msg_type() == Some(MessageType::Inform);
    let mut m = Message::default();
    m.set_opcode(Opcode::BootReply)
        .set_htype(HType::Eth)
        .set_xid(req.xid())
        .set_flags(req.flags())
        .set_giaddr(req.giaddr())
        .set_chaddr(&lease.mac);
    let opts = m.opts_mut();
    opts.insert(DhcpOption::MessageType(kind));
    opts.insert(DhcpOption::ServerIdentifier(lease.server));
    if kind != MessageType::Nak {
        if inform {
            // RFC 2131 table 3: an ACK to INFORM carries no address and no lease time.
            m.set_ciaddr(req.ciaddr());
        } else {
            m.set_yiaddr(lease.address);
            if kind == MessageType::Ack {
                m.set_ciaddr(req.ciaddr());
            }
        }
        let opts = m.opts_mut();
        if !inform {
            opts.insert(DhcpOption::AddressLeaseTime(lease.lease_secs));
        }
        opts.insert(DhcpOption::SubnetMask(netmask(lease.prefix)));
        if let Some(router) = lease.router {
            opts.insert(DhcpOption::Router(vec![router]));
        }
        if !lease.routes.is_empty() {
            opts.insert(DhcpOption::ClasslessStaticRoute(lease.routes.clone()));
        }
        opts.insert(DhcpOption::InterfaceMtu(lease.mtu));
        if !lease.dns.is_empty() {
            opts.insert(DhcpOption::DomainNameServer(lease.dns.clone()));
        }
        let search: Vec<Name> = lease.search.iter().filter_map(|s| Name::from_ascii(s).ok()).collect();
        if !search.is_empty() {
            opts.insert(DhcpOption::DomainSearch(search));
        }
        if !lease.hostname.is_empty() {
            opts.insert(DhcpOption::Hostname(lease.hostname.clone()));
        }
        if let Some(b) = &lease.boot_file {
            opts.insert(DhcpOption::BootfileName(b.clone().into_bytes()));
        }
        if let Some(t) = &lease.tftp_server {
            opts.insert(DhcpOption::TFTPServerName(t.clone().into_bytes()));
        }
        if !lease.ntp.is_empty() {
            opts.insert(DhcpOption::NtpServers(lease.ntp.clone()));
        }
    }
    // RFC 2131 §4.1: a NAK is broadcast; a client with an address (renewing, informing) gets a unicast; one
    // without an address gets a broadcast (see the module's doc).
    let ip =
        if kind != MessageType::Nak && !req.ciaddr().is_unspecified() { req.ciaddr() } else { Ipv4Addr::BROADCAST };
    let mut bytes = m.to_vec().unwrap_or_default();
    if bytes.len() < MIN_MESSAGE {
        bytes.resize(MIN_MESSAGE, 0);
    }
    Reply { bytes, to: SocketAddrV4::new(ip, CLIENT_PORT), kind }
}

/// The mask of a prefix length (`24` → `255.255.255.0`).
pub fn netmask(prefix: u8) -> Ipv4Addr {
    Ipv4Addr::from(u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0))
}

/// Why the server could not be started or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Creating, configuring or binding the socket.
    #[error("the DHCP server's socket on {interface}: {operation}")]
    Socket {
        /// The interface.
        interface: String,
        /// What was done.
        operation: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The thread could not be started.
    #[error("the DHCP server's thread could not be started")]
    Thread(#[source] io::Error),
}

/// A UDP socket on port 67 of `interface` (bound to it, broadcasts allowed), as [`DhcpServer::serve`] needs it.
pub fn bind(interface: &str) -> Result<UdpSocket, Error> {
    use socket2::{Domain, Protocol, Socket, Type};
    let err = |operation| {
        let interface = interface.to_owned();
        move |source| Error::Socket { interface, operation, source }
    };
    let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).map_err(err("creating"))?;
    s.set_reuse_address(true).map_err(err("allowing address reuse"))?;
    s.set_broadcast(true).map_err(err("allowing broadcasts"))?;
    s.bind_device(Some(interface.as_bytes())).map_err(err("binding to the interface"))?;
    let addr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, SERVER_PORT));
    s.bind(&addr.into()).map_err(err("binding port 67"))?;
    Ok(s.into())
}

/// How often the serving thread looks at its stop flag.
const POLL: Duration = Duration::from_millis(250);

/// The server, answering in its own thread until dropped.
#[derive(Debug)]
pub struct DhcpServer {
    stop: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<String>>>,
    thread: Option<JoinHandle<()>>,
}

impl DhcpServer {
    /// Serves `lease` on `socket` (from [`bind`]).
    pub fn serve(socket: UdpSocket, lease: Lease) -> Result<DhcpServer, Error> {
        socket.set_read_timeout(Some(POLL)).map_err(|source| Error::Socket {
            interface: String::from("(bound)"),
            operation: "setting the read timeout",
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(Mutex::new(None));
        let (s, f) = (Arc::clone(&stop), Arc::clone(&failure));
        let thread = std::thread::Builder::new()
            .name(String::from("dhcp"))
            .spawn(move || {
                if let Err(e) = run(&socket, &lease, &s) {
                    tracing::error!(error = %e, "the DHCP server stopped");
                    if let Ok(mut f) = f.lock() {
                        *f = Some(e.to_string());
                    }
                }
            })
            .map_err(Error::Thread)?;
        Ok(DhcpServer { stop, failure, thread: Some(thread) })
    }

    /// `Some(why)` once it has stopped serving (it should not).
    pub fn exited(&self) -> Option<String> {
        if let Some(why) = self.failure.lock().ok().and_then(|f| f.clone()) {
            return Some(why);
        }
        self.thread.as_ref().is_some_and(JoinHandle::is_finished).then(|| String::from("stopped"))
    }
}

impl Drop for DhcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(socket: &UdpSocket, lease: &Lease, stop: &AtomicBool) -> io::Result<()> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => continue,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        match answer(lease, &buf[..n]) {
            Ok(r) => match socket.send_to(&r.bytes, r.to) {
                Ok(_) => {
                    tracing::info!(from = %from, to = %r.to, kind = ?r.kind, address = %lease.address, "DHCP reply")
                }
                // The guest may be gone or its address not yet reachable: it asks again.
                Err(e) => tracing::warn!(to = %r.to, error = %e, "sending the DHCP reply failed"),
            },
            Err(why) => tracing::debug!(from = %from, %why, "DHCP message ignored"),
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dhcproto::v4::Flags;

    const MAC: [u8; 6] = [0x02, 0x6b, 0x76, 0x72, 0x73, 0x01];

    /// The lease of a pod with the cluster's DNS (`10.96.0.10`, two search domains) and MTU 1450.
    pub(crate) fn lease() -> Lease {
        Lease {
            mac: MAC,
            address: Ipv4Addr::new(10, 0, 2, 2),
            prefix: 24,
            server: Ipv4Addr::new(10, 0, 2, 1),
            router: Some(Ipv4Addr::new(10, 0, 2, 1)),
            routes: vec![],
            dns: vec![Ipv4Addr::new(10, 96, 0, 10)],
            search: vec!["default.svc.cluster.local".into(), "svc.cluster.local".into()],
            hostname: "testvmi".into(),
            mtu: 1450,
            lease_secs: 86400,
            boot_file: None,
            tftp_server: None,
            ntp: vec![],
        }
    }

    fn request(kind: MessageType, mac: [u8; 6], ciaddr: Ipv4Addr, extra: Vec<DhcpOption>) -> Vec<u8> {
        let mut m = Message::new_with_id(
            0x1234_5678,
            ciaddr,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::UNSPECIFIED,
            &mac,
        );
        m.opts_mut().insert(DhcpOption::MessageType(kind));
        for o in extra {
            m.opts_mut().insert(o);
        }
        m.to_vec().unwrap_or_default()
    }

    fn decode(r: &Reply) -> Result<Message, String> {
        Message::from_bytes(&r.bytes).map_err(|e| e.to_string())
    }

    const NONE: Ipv4Addr = Ipv4Addr::UNSPECIFIED;

    #[test]
    fn discover_gets_an_offer_with_every_setting() -> Result<(), String> {
        let mut l = lease();
        l.boot_file = Some("pxelinux.0".into());
        l.tftp_server = Some("10.0.0.9".into());
        l.ntp = vec![Ipv4Addr::new(10, 0, 0, 5)];
        let r = answer(&l, &request(MessageType::Discover, MAC, NONE, vec![])).map_err(|e| e.to_string())?;
        assert_eq!((r.kind, r.to), (MessageType::Offer, SocketAddrV4::new(Ipv4Addr::BROADCAST, 68)));
        assert!(r.bytes.len() >= 300, "padded to BOOTP's minimum: {}", r.bytes.len());
        let m = decode(&r)?;
        assert_eq!(
            (m.opcode(), m.xid(), m.yiaddr(), m.chaddr()),
            (Opcode::BootReply, 0x1234_5678, l.address, &MAC[..])
        );
        let o = m.opts();
        let want = [
            DhcpOption::MessageType(MessageType::Offer),
            DhcpOption::ServerIdentifier(l.server),
            DhcpOption::AddressLeaseTime(86400),
            DhcpOption::SubnetMask(Ipv4Addr::new(255, 255, 255, 0)),
            DhcpOption::Router(vec![l.server]),
            DhcpOption::InterfaceMtu(1450),
            DhcpOption::DomainNameServer(l.dns.clone()),
            DhcpOption::Hostname("testvmi".into()),
            DhcpOption::BootfileName(b"pxelinux.0".to_vec()),
            DhcpOption::TFTPServerName(b"10.0.0.9".to_vec()),
            DhcpOption::NtpServers(l.ntp.clone()),
        ];
        for w in want {
            assert_eq!(o.get(OptionCode::from(&w)), Some(&w));
        }
        let Some(DhcpOption::DomainSearch(names)) = o.get(OptionCode::DomainSearch) else {
            return Err(format!("no domain search in {o:?}"));
        };
        let names: Vec<String> = names.iter().map(|n| n.to_ascii().trim_end_matches('.').to_owned()).collect();
        assert_eq!(names, l.search);
        Ok(())
    }

    /// A secondary network's lease (bridge binding): the server is the bridge's link-local address, the router is
    /// left out and the pod interface's routes go as classless static routes.
    #[test]
    fn a_secondary_lease_has_routes_and_no_router() -> Result<(), String> {
        let mut l = lease();
        l.address = Ipv4Addr::new(10, 1, 1, 5);
        l.server = Ipv4Addr::new(169, 254, 75, 11);
        l.router = None;
        let net: ipnet::Ipv4Net = "10.1.0.0/16".parse().map_err(|e: ipnet::AddrParseError| e.to_string())?;
        l.routes = vec![(net, Ipv4Addr::new(10, 1, 1, 1))];
        let r = answer(&l, &request(MessageType::Discover, MAC, NONE, vec![])).map_err(|e| e.to_string())?;
        let m = decode(&r)?;
        assert_eq!(m.yiaddr(), l.address);
        let o = m.opts();
        assert_eq!(o.get(OptionCode::ServerIdentifier), Some(&DhcpOption::ServerIdentifier(l.server)));
        assert_eq!(o.get(OptionCode::Router), None);
        assert_eq!(o.get(OptionCode::ClasslessStaticRoute), Some(&DhcpOption::ClasslessStaticRoute(l.routes.clone())));
        let selecting = vec![DhcpOption::RequestedIpAddress(l.address), DhcpOption::ServerIdentifier(l.server)];
        let r = answer(&l, &request(MessageType::Request, MAC, NONE, selecting)).map_err(|e| e.to_string())?;
        assert_eq!(r.kind, MessageType::Ack);
        Ok(())
    }

    #[test]
    fn requests_are_acked_for_the_lease_and_refused_for_other_addresses() -> Result<(), String> {
        let l = lease();
        let ask = |extra, ciaddr| answer(&l, &request(MessageType::Request, MAC, ciaddr, extra));
        // SELECTING: option 50 and our server identifier.
        let r = ask(vec![DhcpOption::RequestedIpAddress(l.address), DhcpOption::ServerIdentifier(l.server)], NONE)
            .map_err(|e| e.to_string())?;
        assert_eq!((r.kind, r.to.ip()), (MessageType::Ack, &Ipv4Addr::BROADCAST));
        assert_eq!(decode(&r)?.yiaddr(), l.address);
        // RENEWING: ciaddr, answered by unicast.
        let r = ask(vec![], l.address).map_err(|e| e.to_string())?;
        assert_eq!((r.kind, r.to), (MessageType::Ack, SocketAddrV4::new(l.address, 68)));
        assert_eq!(decode(&r)?.ciaddr(), l.address);
        // INIT-REBOOT with a stale address: NAK, broadcast, no address, no settings.
        let r = ask(vec![DhcpOption::RequestedIpAddress(Ipv4Addr::new(192, 168, 1, 7))], NONE)
            .map_err(|e| e.to_string())?;
        assert_eq!((r.kind, r.to.ip()), (MessageType::Nak, &Ipv4Addr::BROADCAST));
        let m = decode(&r)?;
        assert_eq!(m.yiaddr(), NONE);
        assert_eq!(m.opts().get(OptionCode::Router), None);
        // Another server's offer taken: silence.
        let other = Ipv4Addr::new(10, 0, 2, 254);
        assert_eq!(
            ask(vec![DhcpOption::RequestedIpAddress(l.address), DhcpOption::ServerIdentifier(other)], NONE),
            Err(Ignored::OtherServer(other))
        );
        assert_eq!(ask(vec![], NONE), Err(Ignored::NoAnswer(Some(MessageType::Request))));
        Ok(())
    }

    #[test]
    fn inform_gets_settings_without_a_lease() -> Result<(), String> {
        let l = lease();
        let r = answer(&l, &request(MessageType::Inform, MAC, l.address, vec![])).map_err(|e| e.to_string())?;
        assert_eq!((r.kind, r.to), (MessageType::Ack, SocketAddrV4::new(l.address, 68)));
        let m = decode(&r)?;
        assert_eq!((m.yiaddr(), m.ciaddr()), (NONE, l.address));
        assert_eq!(m.opts().get(OptionCode::AddressLeaseTime), None);
        assert_eq!(m.opts().get(OptionCode::Router), Some(&DhcpOption::Router(vec![l.server])));
        Ok(())
    }

    #[test]
    fn strangers_garbage_and_unanswered_types_get_nothing() {
        let l = lease();
        let other = [0x02, 0, 0, 0, 0, 9];
        assert_eq!(answer(&l, &request(MessageType::Discover, other, NONE, vec![])), Err(Ignored::OtherClient));
        for kind in [MessageType::Release, MessageType::Decline, MessageType::Offer] {
            assert_eq!(answer(&l, &request(kind, MAC, NONE, vec![])), Err(Ignored::NoAnswer(Some(kind))));
        }
        assert!(matches!(answer(&l, b"\x01\x01\x06"), Err(Ignored::Undecodable(_))));
        assert!(matches!(answer(&l, &[]), Err(Ignored::Undecodable(_))));
        // A reply (BOOTREPLY) from another server on the segment.
        let mut m = Message::new(NONE, NONE, NONE, NONE, &MAC);
        m.set_opcode(Opcode::BootReply);
        m.opts_mut().insert(DhcpOption::MessageType(MessageType::Offer));
        assert_eq!(answer(&l, &m.to_vec().unwrap_or_default()), Err(Ignored::NotARequest));
        // The broadcast flag is kept (the client may need it).
        let mut m = Message::new(NONE, NONE, NONE, NONE, &MAC);
        m.set_flags(Flags::default().set_broadcast());
        m.opts_mut().insert(DhcpOption::MessageType(MessageType::Discover));
        let r = answer(&l, &m.to_vec().unwrap_or_default());
        assert!(r.is_ok_and(|r| Message::from_bytes(&r.bytes).is_ok_and(|m| m.flags().broadcast())));
    }

    #[test]
    fn macs_and_masks() {
        assert_eq!(parse_mac("02:6B:76:72:73:01"), Some(MAC));
        assert_eq!(parse_mac("02-6b-76-72-73-01"), Some(MAC));
        for bad in ["", "02:6b:76:72:73", "02:6b:76:72:73:01:02", "2:6b:76:72:73:01", "zz:6b:76:72:73:01"] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
        assert_eq!(netmask(24), Ipv4Addr::new(255, 255, 255, 0));
        assert_eq!(netmask(0), Ipv4Addr::UNSPECIFIED);
        assert_eq!(netmask(32), Ipv4Addr::BROADCAST);
        assert_eq!(netmask(40), Ipv4Addr::BROADCAST);
    }
}
