//! The pod network (contract §2.4, §7.2): the masquerade binding in the launcher pod's network namespace, a port
//! of `deploy/launcher/masquerade.sh`. [`plan`] reads the spec, [`nft_ruleset`] and [`dhcp_lease`] render
//! (pure, table-tested), [`apply`] runs `ip` and `nft -f` and starts the guest's DHCP server ([`crate::dhcp`]).
//!
//! ```text
//!  node ── eth0 (pod IP, from the CNI) ── nft `ip kubevirt_nat`: DNAT of the ports (all when none) to 10.0.2.2,
//!                                         masquerade of 10.0.2.2 out of eth0, SNAT of pod-local clients
//!          k6t-eth0 (bridge, 10.0.2.1/24) ── tap0 (owned by qemu 107; libvirt opens it: managed='no') ── guest
//!          DHCP on k6t-eth0:   10.0.2.2/24 static for the guest's MAC, router 10.0.2.1, the pod's DNS, MTU,
//!          hostname
//! ```
//!
//!
//! Secondary (Multus) networks get upstream's bridge binding ([`apply_bridge`]): the pod interface Multus created
//! (`pod<hash>`, named by the VMI controller) becomes a port of an in-pod bridge beside the guest's tap, and its
//! IPv4 address, taken off it, is what the guest gets by DHCP:
//!
//! ```text
//!  CNI (ptp, bridge, …) ── <hash>-nic (was pod<hash>, no address) ─┐
//!                          k6t-<hash> (bridge, 169.254.75.1<index>/32: the DHCP server's address)
//!                          tap<hash> (owned by qemu 107) ── guest, DHCP: the pod interface's address, its routes
//!                                                           (option 121), the pod's DNS, the MTU
//! ```
//!
//! Not implemented, and refused with an error naming the interface or network: the bridge binding on the pod
//! network (the pod IP moved to the guest), Multus default networks, DRA networks, other bindings.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use contracts::kubevirt::launcher::{
    self as contract, MASQUERADE_GATEWAY, MASQUERADE_GATEWAY_MAC, MASQUERADE_GUEST, MASQUERADE_NFT_TABLE,
    MASQUERADE_PREFIX, POD_BRIDGE, POD_INTERFACE, POD_TAP, Route, SecondaryLink, derived_mac,
};
use crds::kubevirt::VirtualMachineInstanceSpec;
use crds::kubevirt::domain::{Interface, Protocol};
use serde::Deserialize;

use crate::dhcp::{self, DhcpServer};
use crate::files;
use crate::tool;

/// The masquerade network's CIDR (`vmNetworkCIDR`'s default, the only one supported).
pub const MASQUERADE_CIDR: &str = "10.0.2.0/24";

/// The guest's hostname: the spec's, else the VMI's name.
pub fn hostname(spec: &VirtualMachineInstanceSpec, vmi_name: &str) -> String {
    spec.hostname.clone().filter(|h| !h.is_empty()).unwrap_or_else(|| vmi_name.to_owned())
}

/// What the VMI's networks need in the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// The masquerade binding of the pod-network interface; none without one.
    pub pod: Option<Masquerade>,
    /// The bridge bindings of the secondary (Multus) interfaces, in the spec's order.
    pub secondary: Vec<Bridge>,
}

impl Plan {
    /// Nothing to set up.
    pub fn is_empty(&self) -> bool {
        self.pod.is_none() && self.secondary.is_empty()
    }
}

/// What the guest's DHCP server says beside the addresses, for one interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestDhcp {
    /// The guest's MAC (`aa:bb:…`, lower case): the spec's, else the contract's derived one (the node agent puts
    /// the same into the domain). Its lease is static.
    pub mac: String,
    /// The hostname offered by DHCP; empty: none.
    pub hostname: String,
    /// DHCP boot file (option 67).
    pub boot_file: Option<String>,
    /// DHCP TFTP server (option 66).
    pub tftp_server: Option<String>,
    /// DHCP NTP servers (option 42).
    pub ntp_servers: Vec<Ipv4Addr>,
}

/// The bridge binding of a secondary (Multus) interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bridge {
    /// The spec's interface (and network) name.
    pub interface: String,
    /// The pod interface Multus created ([`contract::secondary_pod_interface`]).
    pub pod_interface: String,
    /// The in-pod bridge ([`contract::secondary_bridge`]).
    pub bridge: String,
    /// The pod interface's name once it is a port of the bridge ([`contract::secondary_bridge_port`]).
    pub port: String,
    /// The guest's tap ([`contract::secondary_tap`]).
    pub tap: String,
    /// The bridge's link-local address, the DHCP server's identifier ([`contract::secondary_bridge_address`]).
    pub server: Ipv4Addr,
    /// What DHCP tells the guest.
    pub guest: GuestDhcp,
}

/// A port protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

impl Proto {
    /// nft's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        }
    }
}

/// Ports forwarded to the guest: one port (`first == last`) or a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    /// The protocol.
    pub proto: Proto,
    /// The first port.
    pub first: u16,
    /// The last port.
    pub last: u16,
}

impl Ports {
    /// nft's match (`tcp dport 80`, `udp dport 1000-2000`).
    fn nft_match(&self) -> String {
        if self.first == self.last {
            format!("{} dport {}", self.proto.as_str(), self.first)
        } else {
            format!("{} dport {}-{}", self.proto.as_str(), self.first, self.last)
        }
    }
}

/// The masquerade binding of the pod-network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Masquerade {
    /// The spec's interface name.
    pub interface: String,
    /// The ports forwarded to the guest; empty means all.
    pub ports: Vec<Ports>,
    /// What DHCP tells the guest.
    pub guest: GuestDhcp,
}

/// Why the pod network cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A network with no source.
    #[error("network {network:?} has no source (pod, multus or resourceClaim)")]
    NoSource {
        /// The network.
        network: String,
    },
    /// Multus and DRA networks.
    #[error("network {network:?}: {kind} networks are not supported by this launcher")]
    UnsupportedNetwork {
        /// The network.
        network: String,
        /// `multus` or `resourceClaim`.
        kind: &'static str,
    },
    /// More than one pod network.
    #[error("networks {first:?} and {second:?} are both the pod network; only one interface can use it")]
    TwoPodNetworks {
        /// One.
        first: String,
        /// The other.
        second: String,
    },
    /// An interface without a network or a network without an interface.
    #[error("{what} {name:?} has no {missing} of the same name")]
    Unmatched {
        /// `interface` or `network`.
        what: &'static str,
        /// Its name.
        name: String,
        /// What it lacks.
        missing: &'static str,
    },
    /// A binding this launcher does not set up.
    #[error("interface {interface:?}: the {binding} binding on {network} is not supported by this launcher{hint}")]
    UnsupportedBinding {
        /// The interface.
        interface: String,
        /// The binding's field name.
        binding: String,
        /// `the pod network` or `a Multus network`.
        network: &'static str,
        /// What to use instead, if anything.
        hint: &'static str,
    },
    /// A spec value the masquerade binding cannot use.
    #[error("interface {interface:?}: {message}")]
    Invalid {
        /// The interface.
        interface: String,
        /// What is wrong.
        message: String,
    },
    /// The pod interface is missing or has no IPv4 address.
    #[error("the pod interface {interface}: {message}")]
    PodInterface {
        /// The pod interface.
        interface: String,
        /// What is wrong.
        message: String,
    },
    /// A file operation failed.
    #[error("{operation} {}", path.display())]
    Io {
        /// What was done.
        operation: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A tool failed.
    #[error("{step}")]
    Tool {
        /// What it was doing.
        step: &'static str,
        /// Why.
        #[source]
        source: tool::Error,
    },
    /// The DHCP server could not be started.
    #[error(transparent)]
    Dhcp(#[from] dhcp::Error),
    /// The guest's MAC is not one.
    #[error("interface {interface:?}: {mac:?} is not a MAC address")]
    Mac {
        /// The interface.
        interface: String,
        /// The MAC.
        mac: String,
    },
}

/// The spec's networks and interfaces → what the pod needs. `hostname` is the guest's (`spec.hostname`, else the
/// VMI's name; offered on the pod network, else on the first secondary interface); `vmi_uid` derives the guest's
/// MACs when the spec gives none.
pub fn plan(spec: &VirtualMachineInstanceSpec, hostname: &str, vmi_uid: &str) -> Result<Plan, Error> {
    let networks = spec.networks.as_deref().unwrap_or_default();
    let interfaces = spec.domain.devices.interfaces.as_deref().unwrap_or_default();
    let mut pod: Option<&str> = None;
    let mut multus: Vec<&str> = Vec::new();
    for n in networks {
        match (&n.pod, &n.multus, &n.resource_claim) {
            (Some(p), None, None) => {
                if let Some(first) = pod {
                    return Err(Error::TwoPodNetworks { first: first.into(), second: n.name.clone() });
                }
                if let Some(cidr) = p.vm_network_cidr.as_deref().filter(|c| *c != MASQUERADE_CIDR) {
                    let interface = n.name.clone();
                    return Err(Error::Invalid {
                        interface,
                        message: format!("vmNetworkCIDR {cidr} is not supported (only {MASQUERADE_CIDR})"),
                    });
                }
                pod = Some(&n.name);
            }
            (None, Some(m), None) if m.default == Some(true) => {
                return Err(Error::UnsupportedNetwork { network: n.name.clone(), kind: "Multus default" });
            }
            (None, Some(_), None) => multus.push(&n.name),
            (None, None, Some(_)) => {
                return Err(Error::UnsupportedNetwork { network: n.name.clone(), kind: "resourceClaim" });
            }
            _ => return Err(Error::NoSource { network: n.name.clone() }),
        }
    }
    for i in interfaces {
        if !networks.iter().any(|n| n.name == i.name) {
            return Err(Error::Unmatched { what: "interface", name: i.name.clone(), missing: "network" });
        }
    }
    for name in pod.iter().chain(&multus) {
        if !interfaces.iter().any(|i| i.name == *name) {
            return Err(Error::Unmatched { what: "network", name: (*name).into(), missing: "interface" });
        }
    }
    let mut plan = Plan::default();
    for (index, i) in interfaces.iter().enumerate() {
        if pod == Some(i.name.as_str()) {
            plan.pod = Some(masquerade(i, hostname, vmi_uid)?);
        } else {
            // The hostname goes with the pod network's lease, else with the first secondary one.
            let host = if pod.is_none() && plan.secondary.is_empty() { hostname } else { "" };
            plan.secondary.push(bridge(i, index, host, vmi_uid)?);
        }
    }
    Ok(plan)
}

/// The bindings set on `i`, by field name.
fn bindings(i: &Interface) -> Vec<String> {
    [
        ("masquerade", i.masquerade.is_some()),
        ("bridge", i.bridge.is_some()),
        ("sriov", i.sriov.is_some()),
        ("slirp", i.slirp.is_some()),
        ("macvtap", i.macvtap.is_some()),
        ("passt", i.passt.is_some()),
        ("passtBinding", i.passt_binding.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(b, _)| b.to_owned())
    .chain(i.binding.as_ref().map(|b| format!("plugin {:?}", b.name)))
    .collect()
}

/// Checks that `i` has exactly one binding, `wanted`; `network` names the network kind in the error.
fn one_binding(i: &Interface, wanted: &str, network: &'static str, hint: &'static str) -> Result<(), Error> {
    let interface = i.name.clone();
    match bindings(i).as_slice() {
        [b] if b == wanted => Ok(()),
        // Upstream's webhook text.
        [b] if b == "masquerade" => Err(Error::Invalid {
            interface,
            message: String::from("Masquerade interface only implemented with pod network"),
        }),
        [b] => {
            let hint = if b == "bridge" { hint } else { "" };
            Err(Error::UnsupportedBinding { interface, binding: b.clone(), network, hint })
        }
        [] => Err(Error::Invalid { interface, message: String::from("no binding is set") }),
        many => {
            Err(Error::Invalid { interface, message: format!("more than one binding is set ({})", many.join(", ")) })
        }
    }
}

/// What DHCP tells the guest on interface `i`: its MAC and the spec's DHCP options.
fn guest_dhcp(i: &Interface, hostname: &str, vmi_uid: &str) -> Result<GuestDhcp, Error> {
    let invalid = |message: String| Error::Invalid { interface: i.name.clone(), message };
    let mac = match i.mac_address.as_deref() {
        Some(m) => normalize_mac(m).ok_or_else(|| invalid(format!("macAddress {m:?} is not a MAC address")))?,
        None => derived_mac(vmi_uid, &i.name),
    };
    let dhcp = i.dhcp_options.clone().unwrap_or_default();
    if dhcp.private_options.as_ref().is_some_and(|o| !o.is_empty()) {
        return Err(invalid(String::from("dhcpOptions.privateOptions are not supported by this launcher")));
    }
    let ntp_servers = dhcp
        .ntp_servers
        .unwrap_or_default()
        .iter()
        .map(|s| s.parse::<Ipv4Addr>().map_err(|_| invalid(format!("NTP server {s:?} is not an IPv4 address"))))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GuestDhcp {
        mac,
        hostname: hostname.to_owned(),
        boot_file: dhcp.boot_file_name,
        tftp_server: dhcp.tftp_server_name,
        ntp_servers,
    })
}

fn bridge(i: &Interface, index: usize, hostname: &str, vmi_uid: &str) -> Result<Bridge, Error> {
    one_binding(i, "bridge", "a Multus network", "")?;
    if i.ports.as_ref().is_some_and(|p| !p.is_empty()) || i.port_ranges.as_ref().is_some_and(|p| !p.is_empty()) {
        // Upstream's webhook refuses ports on anything but masquerade too.
        return Err(Error::Invalid {
            interface: i.name.clone(),
            message: String::from("ports are only supported by the masquerade binding"),
        });
    }
    let server = contract::secondary_bridge_address(index).ok_or_else(|| Error::Invalid {
        interface: i.name.clone(),
        message: format!("interface number {index} is past the last bridge address"),
    })?;
    let name = &i.name;
    Ok(Bridge {
        interface: name.clone(),
        pod_interface: contract::secondary_pod_interface(name),
        bridge: contract::secondary_bridge(name),
        port: contract::secondary_bridge_port(name),
        tap: contract::secondary_tap(name),
        server,
        guest: guest_dhcp(i, hostname, vmi_uid)?,
    })
}

fn masquerade(i: &Interface, hostname: &str, vmi_uid: &str) -> Result<Masquerade, Error> {
    one_binding(i, "masquerade", "the pod network", " (use masquerade: {})")?;
    let interface = i.name.clone();
    let invalid = |message: String| Error::Invalid { interface: i.name.clone(), message };
    let port = |p: i32, what: &str| {
        u16::try_from(p).ok().filter(|p| *p > 0).ok_or_else(|| invalid(format!("{what} {p} is not a port number")))
    };
    let proto = |p: Option<&Protocol>| match p {
        None | Some(Protocol::Tcp) => Ok(Proto::Tcp),
        Some(Protocol::Udp) => Ok(Proto::Udp),
        Some(other) => Err(invalid(format!("protocol {:?} is not supported (TCP or UDP)", other.as_str()))),
    };
    let mut ports = Vec::new();
    for p in i.ports.as_deref().unwrap_or_default() {
        let n = port(p.port, "port")?;
        ports.push(Ports { proto: proto(p.protocol.as_ref())?, first: n, last: n });
    }
    for r in i.port_ranges.as_deref().unwrap_or_default() {
        let (first, last) = (port(r.start, "port range start")?, port(r.end, "port range end")?);
        if first > last {
            return Err(invalid(format!("port range {first}-{last} is empty")));
        }
        ports.push(Ports { proto: proto(Some(&r.protocol))?, first, last });
    }
    Ok(Masquerade { interface, ports, guest: guest_dhcp(i, hostname, vmi_uid)? })
}

/// `de:ad:00:00:be:af` or `DE-AD-00-00-BE-AF` → `de:ad:00:00:be:af`.
pub fn normalize_mac(m: &str) -> Option<String> {
    let parts: Vec<&str> = m.split([':', '-']).collect();
    let ok = parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    ok.then(|| parts.join(":").to_ascii_lowercase())
}

/// The nftables ruleset of the masquerade binding (upstream's chains, masquerade.sh's layout). nft 1.0.6 rejects
/// `dnat to X }` on one line, hence one statement per line.
pub fn nft_ruleset(m: &Masquerade) -> String {
    let mut s = String::new();
    let matches: Vec<String> = if m.ports.is_empty() {
        vec![String::new()]
    } else {
        m.ports.iter().map(|p| format!("{} ", p.nft_match())).collect()
    };
    let _ = writeln!(s, "table ip {MASQUERADE_NFT_TABLE} {{");
    let _ = writeln!(s, "  chain prerouting {{");
    let _ = writeln!(s, "    type nat hook prerouting priority dstnat; policy accept;");
    let _ = writeln!(s, "    iifname \"{POD_INTERFACE}\" counter jump KUBEVIRT_PREINBOUND");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain output {{");
    let _ = writeln!(s, "    type nat hook output priority -100; policy accept;");
    for p in &matches {
        let _ = writeln!(s, "    ip daddr 127.0.0.1 {p}counter dnat to {MASQUERADE_GUEST}");
    }
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain postrouting {{");
    let _ = writeln!(s, "    type nat hook postrouting priority srcnat; policy accept;");
    let _ = writeln!(s, "    ip saddr {MASQUERADE_GUEST} counter masquerade");
    let _ = writeln!(s, "    oifname \"{POD_BRIDGE}\" counter jump KUBEVIRT_POSTINBOUND");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain KUBEVIRT_PREINBOUND {{");
    for p in &matches {
        let _ = writeln!(s, "    {p}counter dnat to {MASQUERADE_GUEST}");
    }
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "  chain KUBEVIRT_POSTINBOUND {{");
    let _ = writeln!(s, "    ip saddr 127.0.0.1 counter snat to {MASQUERADE_GATEWAY}");
    let _ = writeln!(s, "  }}");
    let _ = writeln!(s, "}}");
    s
}

/// The pod's resolver configuration, as offered to the guest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolv {
    /// IPv4 nameservers.
    pub nameservers: Vec<Ipv4Addr>,
    /// Search domains.
    pub search: Vec<String>,
}

/// `/etc/resolv.conf` → its IPv4 nameservers and search domains (IPv6 nameservers cannot be offered by DHCPv4).
pub fn parse_resolv_conf(text: &str) -> Resolv {
    let mut r = Resolv::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match words.next() {
            Some("nameserver") => r.nameservers.extend(words.next().and_then(|w| w.parse::<Ipv4Addr>().ok())),
            Some("search") => r.search = words.map(String::from).collect(),
            _ => {}
        }
    }
    r
}

/// Seconds of the guest's lease (udhcpd's and upstream's day).
pub const LEASE_SECS: u32 = 86400;

/// The guest's DHCP lease on the masquerade network: its static address for its MAC, router, the pod's DNS and
/// search domains, the pod interface's MTU, hostname and the spec's DHCP options.
pub fn dhcp_lease(m: &Masquerade, mtu: u32, resolv: &Resolv) -> Result<dhcp::Lease, Error> {
    let net = LeaseNet {
        address: MASQUERADE_GUEST,
        prefix: MASQUERADE_PREFIX,
        server: MASQUERADE_GATEWAY,
        router: Some(MASQUERADE_GATEWAY),
        routes: vec![],
    };
    lease(&m.interface, &m.guest, net, mtu, resolv)
}

/// The guest's DHCP lease on a secondary network: the pod interface's address and routes as the set-up found
/// them (`link`), from the bridge's address, with the pod's DNS, the MTU and the spec's DHCP options. `None` when
/// the pod interface had no IPv4 address (a network without IPAM: the guest configures itself).
pub fn bridge_lease(b: &Bridge, link: &SecondaryLink, resolv: &Resolv) -> Result<Option<dhcp::Lease>, Error> {
    let Some(address) = link.address.as_deref() else { return Ok(None) };
    let invalid = |message: String| Error::Invalid { interface: b.interface.clone(), message };
    let net: ipnet::Ipv4Net =
        address.parse().map_err(|_| invalid(format!("the set-up's address {address:?} is not a.b.c.d/prefix")))?;
    let mut routes = Vec::new();
    let mut router = None;
    for r in &link.routes {
        let bad = || invalid(format!("the set-up's route {} via {} is not an IPv4 route", r.dst, r.gateway));
        let dst: ipnet::Ipv4Net = r.dst.parse().map_err(|_| bad())?;
        let gateway: Ipv4Addr = r.gateway.parse().map_err(|_| bad())?;
        if dst.prefix_len() == 0 {
            router.get_or_insert(gateway);
        }
        routes.push((dst, gateway));
    }
    let net = LeaseNet { address: net.addr(), prefix: net.prefix_len(), server: b.server, router, routes };
    lease(&b.interface, &b.guest, net, link.mtu, resolv).map(Some)
}

/// The addresses of a lease.
struct LeaseNet {
    address: Ipv4Addr,
    prefix: u8,
    server: Ipv4Addr,
    router: Option<Ipv4Addr>,
    routes: Vec<(ipnet::Ipv4Net, Ipv4Addr)>,
}

fn lease(interface: &str, g: &GuestDhcp, net: LeaseNet, mtu: u32, resolv: &Resolv) -> Result<dhcp::Lease, Error> {
    let mac =
        dhcp::parse_mac(&g.mac).ok_or_else(|| Error::Mac { interface: interface.to_owned(), mac: g.mac.clone() })?;
    Ok(dhcp::Lease {
        mac,
        address: net.address,
        prefix: net.prefix,
        server: net.server,
        router: net.router,
        routes: net.routes,
        dns: resolv.nameservers.clone(),
        search: resolv.search.clone(),
        hostname: g.hostname.clone(),
        mtu: u16::try_from(mtu).unwrap_or(u16::MAX),
        lease_secs: LEASE_SECS,
        boot_file: g.boot_file.clone(),
        tftp_server: g.tftp_server.clone(),
        ntp: g.ntp_servers.clone(),
    })
}

/// The host side of [`apply`]: where things are.
#[derive(Debug, Clone)]
pub struct Host {
    /// The tun device (`/dev/net/tun`), created when missing.
    pub tun_device: PathBuf,
    /// The pod's resolver configuration (`/etc/resolv.conf`).
    pub resolv_conf: PathBuf,
    /// Where the ruleset goes ([`contracts::kubevirt::launcher::network_state_dir`]).
    pub state_dir: PathBuf,
    /// The tap's owner (the `qemu` user).
    pub tap_owner: u32,
}

/// The pod interface's state, from `ip -j addr show`.
#[derive(Debug, Deserialize)]
struct IpLink {
    mtu: u32,
    #[serde(default)]
    addr_info: Vec<IpAddr>,
}

#[derive(Debug, Deserialize)]
struct IpAddr {
    family: String,
    local: String,
    prefixlen: u8,
}

/// The set-up masquerade binding; dropping it stops the DHCP server (the namespace's links and rules go with the
/// pod).
#[derive(Debug)]
pub struct Applied {
    /// The DHCP server.
    pub dhcp: DhcpServer,
    /// One line saying what was set up.
    pub summary: String,
    /// The pod interface's MTU (the guest's too).
    pub mtu: u32,
}

/// The masquerade binding's links and rules, set up by [`apply_links`] (the privileged part).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Links {
    /// One line saying what was set up.
    pub summary: String,
    /// The pod interface's MTU (the guest's too).
    pub mtu: u32,
}

/// Sets up `m` in this thread's network namespace, as masquerade.sh's `up` does: [`apply_links`], then the DHCP
/// server on port 67 of the bridge.
pub fn apply(m: &Masquerade, host: &Host) -> Result<Applied, Error> {
    let links = apply_links(m, host)?;
    let dhcp = serve_dhcp(m, links.mtu, host, dhcp::bind(POD_BRIDGE)?)?;
    Ok(Applied { dhcp, summary: links.summary, mtu: links.mtu })
}

/// The guest's DHCP server for `m` on `socket` (from [`dhcp::bind`], here or in the node agent's set-up), with
/// the pod's resolver settings.
pub fn serve_dhcp(m: &Masquerade, mtu: u32, host: &Host, socket: std::net::UdpSocket) -> Result<DhcpServer, Error> {
    Ok(DhcpServer::serve(socket, dhcp_lease(m, mtu, &host.resolv()?)?)?)
}

/// The guest's DHCP server on secondary interface `b` (the set-up made `link`), on `socket` (bound to the bridge).
pub fn serve_bridge_dhcp(
    b: &Bridge,
    link: &SecondaryLink,
    host: &Host,
    socket: std::net::UdpSocket,
) -> Result<Option<DhcpServer>, Error> {
    match bridge_lease(b, link, &host.resolv()?)? {
        Some(lease) => Ok(Some(DhcpServer::serve(socket, lease)?)),
        None => Ok(None),
    }
}

impl Host {
    /// The pod's resolver settings (none when it has no resolv.conf).
    fn resolv(&self) -> Result<Resolv, Error> {
        match std::fs::read_to_string(&self.resolv_conf) {
            Ok(t) => Ok(parse_resolv_conf(&t)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Resolv::default()),
            Err(source) => Err(Error::Io { operation: "reading", path: self.resolv_conf.clone(), source }),
        }
    }
}

/// The privileged part of `m` in this thread's network namespace: the bridge, the tap (owned by QEMU's user),
/// forwarding, the nftables ruleset.
pub fn apply_links(m: &Masquerade, host: &Host) -> Result<Links, Error> {
    let pod_if = POD_INTERFACE;
    let (mtu, pod_ip) = read_link(pod_if)?;
    let pod_ip = pod_ip.ok_or_else(|| Error::PodInterface {
        interface: pod_if.to_owned(),
        message: String::from("has no IPv4 address"),
    })?;

    ensure_tun(&host.tun_device)?;
    let owner = host.tap_owner.to_string();
    let mtu_s = mtu.to_string();
    let gateway = format!("{MASQUERADE_GATEWAY}/{MASQUERADE_PREFIX}");
    let steps: [(&'static str, Vec<&str>); 7] = [
        // A fixed MAC (not the lowest port's): the guest's ARP entry for its gateway stays right after a live
        // migration to another pod.
        ("creating the bridge", vec!["link", "add", POD_BRIDGE, "address", MASQUERADE_GATEWAY_MAC, "type", "bridge"]),
        ("setting the bridge's MTU", vec!["link", "set", POD_BRIDGE, "mtu", &mtu_s]),
        ("giving the bridge the gateway address", vec!["addr", "add", &gateway, "dev", POD_BRIDGE]),
        ("creating the tap", vec!["tuntap", "add", "dev", POD_TAP, "mode", "tap", "user", &owner, "group", &owner]),
        ("attaching the tap to the bridge", vec!["link", "set", POD_TAP, "mtu", &mtu_s, "master", POD_BRIDGE]),
        ("bringing the tap up", vec!["link", "set", POD_TAP, "up"]),
        ("bringing the bridge up", vec!["link", "set", POD_BRIDGE, "up"]),
    ];
    run_ip(steps)?;
    // A pod's network namespace inherits the node's IPv4 settings, and an unprivileged container's /proc/sys is
    // read-only: a setting already on is left alone; forwarding is required, localhost DNAT (other containers of
    // the pod reaching the guest on 127.0.0.1) only wanted.
    for (key, path, required) in [
        ("net.ipv4.ip_forward", "/proc/sys/net/ipv4/ip_forward", true),
        ("net.ipv4.conf.all.route_localnet", "/proc/sys/net/ipv4/conf/all/route_localnet", false),
    ] {
        if std::fs::read_to_string(path).is_ok_and(|v| v.trim() == "1") {
            continue;
        }
        match std::fs::write(path, "1\n") {
            Ok(()) => {}
            Err(e) if !required && e.raw_os_error() == Some(rustix::io::Errno::ROFS.raw_os_error()) => {
                tracing::warn!(
                    key,
                    "read-only and off: connections to 127.0.0.1 in the pod are not forwarded to the guest"
                );
            }
            Err(source) => return Err(Error::Io { operation: "setting", path: key.into(), source }),
        }
    }

    files::create_dirs(&host.state_dir, None).map_err(|source| Error::Io {
        operation: "creating",
        path: host.state_dir.clone(),
        source,
    })?;
    let write = |name: &str, text: &str| {
        let path = host.state_dir.join(name);
        std::fs::write(&path, text).map_err(|source| Error::Io { operation: "writing", path: path.clone(), source })?;
        Ok::<PathBuf, Error>(path)
    };
    let nft_conf = write("nft.conf", &nft_ruleset(m))?;
    tool::run("nft", &["-f".as_ref(), nft_conf.as_os_str()])
        .map_err(|source| Error::Tool { step: "loading the masquerade ruleset", source })?;

    let ports = if m.ports.is_empty() {
        String::from("all")
    } else {
        m.ports.iter().map(|p| p.nft_match()).collect::<Vec<_>>().join(", ")
    };
    let summary = format!(
        "masquerade: pod {pod_if} {pod_ip}, guest {MASQUERADE_GUEST} via {POD_BRIDGE}/{POD_TAP}, ports {ports}"
    );
    Ok(Links { summary, mtu })
}

/// Runs `ip` with each step's arguments, in order.
fn run_ip<'a>(steps: impl IntoIterator<Item = (&'static str, Vec<&'a str>)>) -> Result<(), Error> {
    for (step, args) in steps {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        tool::run("ip", &args).map_err(|source| Error::Tool { step, source })?;
    }
    Ok(())
}

/// A pod interface's MTU and IPv4 address (`a.b.c.d/prefix`), from `ip -j addr show`.
fn read_link(interface: &str) -> Result<(u32, Option<String>), Error> {
    let err = |message: String| Error::PodInterface { interface: interface.to_owned(), message };
    let out = tool::run("ip", &["-j".as_ref(), "addr".as_ref(), "show".as_ref(), "dev".as_ref(), interface.as_ref()])
        .map_err(|e| err(e.to_string()))?;
    let links: Vec<IpLink> =
        serde_json::from_slice(&out.stdout).map_err(|e| err(format!("unexpected `ip -j addr` output: {e}")))?;
    let link = links.first().ok_or_else(|| err(String::from("not found")))?;
    let address = link.addr_info.iter().find(|a| a.family == "inet").map(|a| format!("{}/{}", a.local, a.prefixlen));
    Ok((link.mtu, address))
}

/// A route of `ip -j route show`.
#[derive(Debug, Deserialize)]
struct IpRoute {
    dst: String,
    #[serde(default)]
    gateway: Option<String>,
}

/// `ip -j -4 route show dev X` → its routes through a gateway, destinations with their prefix (`default` is
/// `0.0.0.0/0`, a host `/32`).
pub fn gateway_routes(json: &[u8]) -> Result<Vec<Route>, serde_json::Error> {
    let routes: Vec<IpRoute> = serde_json::from_slice(json)?;
    Ok(routes
        .into_iter()
        .filter_map(|r| {
            let gateway = r.gateway?;
            let dst = match r.dst.as_str() {
                "default" => String::from("0.0.0.0/0"),
                d if d.contains('/') => d.to_owned(),
                d => format!("{d}/32"),
            };
            Some(Route { dst, gateway })
        })
        .collect())
}

/// The privileged part of the bridge binding of secondary interface `b` in this thread's network namespace: the
/// pod interface's address and routes read, the address taken off it, the interface renamed to the bridge's port,
/// the bridge (with the DHCP server's link-local address) and the tap (owned by QEMU's user) created. Returns what
/// the guest's lease needs.
pub fn apply_bridge(b: &Bridge, host: &Host) -> Result<SecondaryLink, Error> {
    let (mtu, address) = read_link(&b.pod_interface)?;
    let out = tool::run("ip", &["-j", "-4", "route", "show", "dev", b.pod_interface.as_str()].map(OsStr::new))
        .map_err(|source| Error::Tool { step: "reading the pod interface's routes", source })?;
    let routes = gateway_routes(&out.stdout).map_err(|e| Error::PodInterface {
        interface: b.pod_interface.clone(),
        message: format!("unexpected `ip -j route` output: {e}"),
    })?;
    ensure_tun(&host.tun_device)?;
    let (owner, mtu_s, server) = (host.tap_owner.to_string(), mtu.to_string(), format!("{}/32", b.server));
    let (br, pod_if, port, tap) = (b.bridge.as_str(), b.pod_interface.as_str(), b.port.as_str(), b.tap.as_str());
    run_ip([
        ("creating the bridge", vec!["link", "add", br, "type", "bridge"]),
        ("setting the bridge's MTU", vec!["link", "set", br, "mtu", &mtu_s]),
        ("giving the bridge the DHCP server's address", vec!["addr", "add", &server, "dev", br]),
        ("taking the address off the pod interface", vec!["addr", "flush", "dev", pod_if]),
        ("taking the pod interface down", vec!["link", "set", pod_if, "down"]),
        ("renaming the pod interface", vec!["link", "set", pod_if, "name", port]),
        ("attaching the pod interface to the bridge", vec!["link", "set", port, "master", br]),
        ("bringing the pod interface up", vec!["link", "set", port, "up"]),
        ("creating the tap", vec!["tuntap", "add", "dev", tap, "mode", "tap", "user", &owner, "group", &owner]),
        ("attaching the tap to the bridge", vec!["link", "set", tap, "mtu", &mtu_s, "master", br]),
        ("bringing the tap up", vec!["link", "set", tap, "up"]),
        ("bringing the bridge up", vec!["link", "set", br, "up"]),
    ])?;
    Ok(SecondaryLink { interface: b.interface.clone(), mtu, address, routes })
}

/// Creates the tun device node when the container has none (runc's default device rules allow `c 10:200`).
fn ensure_tun(tun: &Path) -> Result<(), Error> {
    if tun.exists() {
        return Ok(());
    }
    let err = |source: io::Error| Error::Io { operation: "creating the tun device", path: tun.to_path_buf(), source };
    if let Some(dir) = tun.parent() {
        files::create_dirs(dir, None).map_err(err)?;
    }
    rustix::fs::mknodat(
        rustix::fs::CWD,
        tun,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o666),
        rustix::fs::makedev(10, 200),
    )
    .map_err(|e| err(e.into()))?;
    std::fs::set_permissions(tun, std::os::unix::fs::PermissionsExt::from_mode(0o666)).map_err(err)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;

    fn spec(json: serde_json::Value) -> VirtualMachineInstanceSpec {
        serde_json::from_value(json).unwrap()
    }

    fn guest(mac: &str, hostname: &str) -> GuestDhcp {
        GuestDhcp {
            mac: mac.into(),
            hostname: hostname.into(),
            boot_file: None,
            tftp_server: None,
            ntp_servers: vec![],
        }
    }

    /// The bridge binding of network `ptp` as the second interface of a VMI, without a hostname.
    fn ptp_bridge(mac: &str) -> Bridge {
        Bridge {
            interface: "ptp".into(),
            pod_interface: "pode31d7ce2712".into(),
            bridge: "k6t-e31d7ce2712".into(),
            port: "e31d7ce2712-nic".into(),
            tap: "tape31d7ce2712".into(),
            server: Ipv4Addr::new(169, 254, 75, 11),
            guest: guest(mac, ""),
        }
    }

    fn masq(ports: Vec<Ports>, mac: &str) -> Masquerade {
        Masquerade { interface: "default".into(), ports, guest: guest(mac, "testvmi") }
    }

    const HEAD: &str = "table ip kubevirt_nat {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    iifname \"eth0\" counter jump KUBEVIRT_PREINBOUND
  }
  chain output {
    type nat hook output priority -100; policy accept;
";
    const MIDDLE: &str = "  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr 10.0.2.2 counter masquerade
    oifname \"k6t-eth0\" counter jump KUBEVIRT_POSTINBOUND
  }
  chain KUBEVIRT_PREINBOUND {
";
    const TAIL: &str = "  }
  chain KUBEVIRT_POSTINBOUND {
    ip saddr 127.0.0.1 counter snat to 10.0.2.1
  }
}
";

    /// The ruleset is masquerade.sh's, line for line: all ports, given ports (TCP default, UDP), a range.
    #[test]
    fn nft_ruleset_matches_the_reference_script() {
        let tcp = |p| Ports { proto: Proto::Tcp, first: p, last: p };
        let cases: [(Vec<Ports>, &str, &str); 3] = [
            (vec![], "    ip daddr 127.0.0.1 counter dnat to 10.0.2.2\n", "    counter dnat to 10.0.2.2\n"),
            (
                vec![tcp(80), Ports { proto: Proto::Udp, first: 53, last: 53 }],
                "    ip daddr 127.0.0.1 tcp dport 80 counter dnat to 10.0.2.2\n    ip daddr 127.0.0.1 udp dport 53 counter dnat to 10.0.2.2\n",
                "    tcp dport 80 counter dnat to 10.0.2.2\n    udp dport 53 counter dnat to 10.0.2.2\n",
            ),
            (
                vec![Ports { proto: Proto::Tcp, first: 8000, last: 8080 }],
                "    ip daddr 127.0.0.1 tcp dport 8000-8080 counter dnat to 10.0.2.2\n",
                "    tcp dport 8000-8080 counter dnat to 10.0.2.2\n",
            ),
        ];
        for (ports, output, pre) in cases {
            assert_eq!(
                nft_ruleset(&masq(ports.clone(), "02:00:00:00:00:01")),
                format!("{HEAD}{output}{MIDDLE}{pre}{TAIL}"),
                "{ports:?}"
            );
        }
    }

    #[test]
    fn the_dhcp_lease_carries_the_pods_settings() {
        let resolv = parse_resolv_conf(
            "# comment\nnameserver 10.96.0.10\nnameserver fd00::10\nsearch default.svc.cluster.local svc.cluster.local\noptions ndots:5\n",
        );
        assert_eq!(resolv.nameservers, [Ipv4Addr::new(10, 96, 0, 10)]);
        let l = dhcp_lease(&masq(vec![], "02:6b:76:72:73:01"), 1450, &resolv).unwrap();
        // The pod's settings are exactly those the DHCP server's own tests are written against.
        assert_eq!(l, dhcp::tests::lease());
        let mut m = masq(vec![], "02:00:00:00:00:01");
        m.guest.boot_file = Some("pxelinux.0".into());
        m.guest.ntp_servers = vec![Ipv4Addr::new(10, 0, 0, 5)];
        let l = dhcp_lease(&m, 1500, &Resolv::default()).unwrap();
        assert_eq!(
            (l.boot_file.as_deref(), l.ntp.as_slice(), l.dns.len()),
            (Some("pxelinux.0"), &m.guest.ntp_servers[..], 0)
        );
        let e = dhcp_lease(&masq(vec![], "nope"), 1500, &Resolv::default()).unwrap_err();
        assert_eq!(e.to_string(), "interface \"default\": \"nope\" is not a MAC address");
    }

    /// `ip -j -4 route show dev pod<hash>` as the ptp plugin leaves it, with a default route added by IPAM.
    #[test]
    fn gateway_routes_keep_the_routes_through_a_gateway() {
        let json = br#"[{"dst":"default","gateway":"10.1.1.1","flags":[]},
            {"dst":"10.1.1.0/24","gateway":"10.1.1.1","flags":[]},{"dst":"10.1.1.1","scope":"link","flags":[]},
            {"dst":"192.168.5.7","gateway":"10.1.1.1","flags":[]}]"#;
        let r = |dst: &str| Route { dst: dst.into(), gateway: "10.1.1.1".into() };
        assert_eq!(gateway_routes(json).unwrap(), [r("0.0.0.0/0"), r("10.1.1.0/24"), r("192.168.5.7/32")]);
        assert!(gateway_routes(b"{").is_err());
    }

    /// The secondary lease: the set-up's address and routes, the default route's gateway as router, no lease
    /// without an address, and a clear error for a garbled reply.
    #[test]
    fn the_bridge_lease_is_the_pod_interfaces_settings() {
        let b = ptp_bridge("02:00:00:00:00:aa");
        let route = |dst: &str| Route { dst: dst.into(), gateway: "10.1.1.1".into() };
        let mut link = SecondaryLink {
            interface: "ptp".into(),
            mtu: 1500,
            address: Some("10.1.1.5/24".into()),
            routes: vec![route("10.1.0.0/16")],
        };
        let resolv = Resolv { nameservers: vec![Ipv4Addr::new(10, 96, 0, 10)], search: vec![] };
        let l = bridge_lease(&b, &link, &resolv).unwrap().unwrap();
        assert_eq!((l.address, l.prefix, l.server, l.router), (Ipv4Addr::new(10, 1, 1, 5), 24, b.server, None));
        assert_eq!(l.routes, [("10.1.0.0/16".parse().unwrap(), Ipv4Addr::new(10, 1, 1, 1))]);
        assert_eq!((l.mtu, l.dns.as_slice(), l.hostname.as_str()), (1500, &resolv.nameservers[..], ""));
        link.routes.push(route("0.0.0.0/0"));
        let l = bridge_lease(&b, &link, &resolv).unwrap().unwrap();
        assert_eq!((l.router, l.routes.len()), (Some(Ipv4Addr::new(10, 1, 1, 1)), 2));
        assert_eq!(bridge_lease(&b, &SecondaryLink { address: None, ..link.clone() }, &resolv).unwrap(), None);
        link.address = Some("10.1.1.5".into());
        let e = bridge_lease(&b, &link, &resolv).unwrap_err().to_string();
        assert_eq!(e, "interface \"ptp\": the set-up's address \"10.1.1.5\" is not a.b.c.d/prefix");
    }

    #[test]
    fn spec_to_network_plan() {
        let with = |networks: serde_json::Value, interfaces: serde_json::Value| {
            plan(
                &spec(serde_json::json!({"domain": {"devices": {"interfaces": interfaces}}, "networks": networks})),
                "h",
                "u-1",
            )
        };
        let got = with(
            serde_json::json!([{"name": "default", "pod": {}}]),
            serde_json::json!([{"name": "default", "masquerade": {}, "macAddress": "DE-AD-00-00-BE-AF",
                "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}]}]),
        )
        .unwrap();
        let mut want = masq(
            vec![Ports { proto: Proto::Tcp, first: 80, last: 80 }, Ports { proto: Proto::Udp, first: 53, last: 53 }],
            "de:ad:00:00:be:af",
        );
        want.guest.hostname = "h".into();
        assert_eq!(got, Plan { pod: Some(want), secondary: vec![] });
        assert!(plan(&spec(serde_json::json!({"domain": {"devices": {}}})), "h", "u-1").unwrap().is_empty());
        // Without macAddress: the contract's derived MAC, as the node agent puts it into the domain.
        let m = with(
            serde_json::json!([{"name": "default", "pod": {}}]),
            serde_json::json!([{"name": "default", "masquerade": {}}]),
        )
        .unwrap()
        .pod
        .expect("masquerade");
        assert_eq!(m.guest.mac, derived_mac("u-1", "default"));
        assert!(m.ports.is_empty());
        // Upstream's vmi-multus-multiple-net: masquerade on the pod network, bridge on a Multus one; the hostname
        // goes with the pod network's lease.
        let got = with(
            serde_json::json!([{"name": "default", "pod": {}}, {"name": "ptp", "multus": {"networkName": "ptp-conf"}}]),
            serde_json::json!([{"name": "default", "masquerade": {}}, {"name": "ptp", "bridge": {}}]),
        )
        .unwrap();
        let ptp = ptp_bridge(&derived_mac("u-1", "ptp"));
        assert_eq!((got.pod.map(|m| m.interface), got.secondary), (Some("default".into()), vec![ptp.clone()]));
        // Upstream's vmi-multus-ptp: only the Multus network, which then gets the hostname.
        let got = with(
            serde_json::json!([{"name": "ptp", "multus": {"networkName": "ptp-conf"}}]),
            serde_json::json!([{"name": "ptp", "bridge": {}, "macAddress": "02:00:00:00:00:aa"}]),
        )
        .unwrap();
        let want = Bridge { server: Ipv4Addr::new(169, 254, 75, 10), guest: guest("02:00:00:00:00:aa", "h"), ..ptp };
        assert_eq!(got, Plan { pod: None, secondary: vec![want] });

        let err = |n, i| with(n, i).err().map(|e| e.to_string());
        let pod = serde_json::json!([{"name": "default", "pod": {}}]);
        let cases = [
            (
                pod.clone(),
                serde_json::json!([{"name": "default", "bridge": {}}]),
                "interface \"default\": the bridge binding on the pod network is not supported by this launcher (use masquerade: {})",
            ),
            (
                pod.clone(),
                serde_json::json!([{"name": "default", "sriov": {}}]),
                "interface \"default\": the sriov binding on the pod network is not supported by this launcher",
            ),
            (
                serde_json::json!([{"name": "net2", "multus": {"networkName": "ns/br", "default": true}}]),
                serde_json::json!([{"name": "net2", "masquerade": {}}]),
                "network \"net2\": Multus default networks are not supported by this launcher",
            ),
            (
                serde_json::json!([{"name": "default", "pod": {}}, {"name": "net2", "multus": {"networkName": "ns/br"}}]),
                serde_json::json!([{"name": "default", "masquerade": {}}, {"name": "net2", "masquerade": {}}]),
                "interface \"net2\": Masquerade interface only implemented with pod network",
            ),
            (
                serde_json::json!([{"name": "net2", "multus": {"networkName": "ns/br"}}]),
                serde_json::json!([{"name": "net2", "sriov": {}}]),
                "interface \"net2\": the sriov binding on a Multus network is not supported by this launcher",
            ),
            (
                serde_json::json!([{"name": "net2", "multus": {"networkName": "ns/br"}}]),
                serde_json::json!([{"name": "net2", "bridge": {}, "ports": [{"port": 80}]}]),
                "interface \"net2\": ports are only supported by the masquerade binding",
            ),
            (
                serde_json::json!([{"name": "net2", "multus": {"networkName": "ns/br"}}]),
                serde_json::json!([]),
                "network \"net2\" has no interface of the same name",
            ),
            (pod.clone(), serde_json::json!([]), "network \"default\" has no interface of the same name"),
            (
                pod.clone(),
                serde_json::json!([{"name": "default", "masquerade": {}}, {"name": "other", "masquerade": {}}]),
                "interface \"other\" has no network of the same name",
            ),
            (
                serde_json::json!([{"name": "a", "pod": {}}, {"name": "b", "pod": {}}]),
                serde_json::json!([]),
                "networks \"a\" and \"b\" are both the pod network; only one interface can use it",
            ),
            (
                pod.clone(),
                serde_json::json!([{"name": "default", "masquerade": {}, "ports": [{"port": 70000}]}]),
                "interface \"default\": port 70000 is not a port number",
            ),
            (
                pod.clone(),
                serde_json::json!([{"name": "default", "masquerade": {}, "macAddress": "nope"}]),
                "interface \"default\": macAddress \"nope\" is not a MAC address",
            ),
            (
                serde_json::json!([{"name": "default", "pod": {"vmNetworkCIDR": "10.11.0.0/16"}}]),
                serde_json::json!([{"name": "default", "masquerade": {}}]),
                "interface \"default\": vmNetworkCIDR 10.11.0.0/16 is not supported (only 10.0.2.0/24)",
            ),
        ];
        for (n, i, want) in cases {
            assert_eq!(err(n.clone(), i.clone()).as_deref(), Some(want), "{n} {i}");
        }
    }
}
