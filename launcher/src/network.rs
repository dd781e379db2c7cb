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
//! Only the masquerade binding on the pod network is implemented: the bridge binding (the pod IP moved to the
//! guest) and Multus networks are refused with an error naming the interface or network.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use contracts::kubevirt::launcher::{
    MASQUERADE_GATEWAY, MASQUERADE_GATEWAY_MAC, MASQUERADE_GUEST, MASQUERADE_NFT_TABLE, MASQUERADE_PREFIX, POD_BRIDGE,
    POD_INTERFACE, POD_TAP, derived_mac,
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

/// What the pod network needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// No pod-network interface: nothing to do.
    None,
    /// The masquerade binding.
    Masquerade(Masquerade),
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
    /// The guest's MAC (`aa:bb:…`, lower case): the spec's, else the contract's derived one (the node agent puts
    /// the same into the domain). Its lease is static.
    pub mac: String,
    /// The hostname offered by DHCP.
    pub hostname: String,
    /// DHCP boot file (option 67).
    pub boot_file: Option<String>,
    /// DHCP TFTP server (option 66).
    pub tftp_server: Option<String>,
    /// DHCP NTP servers (option 42).
    pub ntp_servers: Vec<Ipv4Addr>,
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
    #[error(
        "interface {interface:?}: the {binding} binding on the pod network is not supported by this launcher{hint}"
    )]
    UnsupportedBinding {
        /// The interface.
        interface: String,
        /// The binding's field name.
        binding: String,
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
        interface: &'static str,
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

/// The spec's networks and interfaces → what the pod network needs. `hostname` is the guest's (`spec.hostname`,
/// else the VMI's name); `vmi_uid` derives the guest's MAC when the spec gives none.
pub fn plan(spec: &VirtualMachineInstanceSpec, hostname: &str, vmi_uid: &str) -> Result<Plan, Error> {
    let networks = spec.networks.as_deref().unwrap_or_default();
    let interfaces = spec.domain.devices.interfaces.as_deref().unwrap_or_default();
    let mut pod: Option<&str> = None;
    for n in networks {
        let kind = match (&n.pod, &n.multus, &n.resource_claim) {
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
                continue;
            }
            (None, Some(_), None) => "multus",
            (None, None, Some(_)) => "resourceClaim",
            _ => return Err(Error::NoSource { network: n.name.clone() }),
        };
        return Err(Error::UnsupportedNetwork { network: n.name.clone(), kind });
    }
    for i in interfaces {
        if !networks.iter().any(|n| n.name == i.name) {
            return Err(Error::Unmatched { what: "interface", name: i.name.clone(), missing: "network" });
        }
    }
    let Some(pod) = pod else { return Ok(Plan::None) };
    let Some(iface) = interfaces.iter().find(|i| i.name == pod) else {
        return Err(Error::Unmatched { what: "network", name: pod.into(), missing: "interface" });
    };
    masquerade(iface, hostname, vmi_uid).map(Plan::Masquerade)
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

fn masquerade(i: &Interface, hostname: &str, vmi_uid: &str) -> Result<Masquerade, Error> {
    let interface = i.name.clone();
    let invalid = |message: String| Error::Invalid { interface: i.name.clone(), message };
    match bindings(i).as_slice() {
        [m] if m == "masquerade" => {}
        [b] if b == "bridge" => {
            return Err(Error::UnsupportedBinding { interface, binding: b.clone(), hint: " (use masquerade: {})" });
        }
        [b] => return Err(Error::UnsupportedBinding { interface, binding: b.clone(), hint: "" }),
        [] => return Err(invalid(String::from("no binding is set"))),
        many => return Err(invalid(format!("more than one binding is set ({})", many.join(", ")))),
    }
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
    Ok(Masquerade {
        interface,
        ports,
        mac,
        hostname: hostname.to_owned(),
        boot_file: dhcp.boot_file_name,
        tftp_server: dhcp.tftp_server_name,
        ntp_servers,
    })
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

/// The guest's DHCP lease: its static address for its MAC, router, the pod's DNS and search domains, the pod
/// interface's MTU, hostname and the spec's DHCP options.
pub fn dhcp_lease(m: &Masquerade, mtu: u32, resolv: &Resolv) -> Result<dhcp::Lease, Error> {
    let mac =
        dhcp::parse_mac(&m.mac).ok_or_else(|| Error::Mac { interface: m.interface.clone(), mac: m.mac.clone() })?;
    Ok(dhcp::Lease {
        mac,
        address: MASQUERADE_GUEST,
        prefix: MASQUERADE_PREFIX,
        router: MASQUERADE_GATEWAY,
        dns: resolv.nameservers.clone(),
        search: resolv.search.clone(),
        hostname: m.hostname.clone(),
        mtu: u16::try_from(mtu).unwrap_or(u16::MAX),
        lease_secs: LEASE_SECS,
        boot_file: m.boot_file.clone(),
        tftp_server: m.tftp_server.clone(),
        ntp: m.ntp_servers.clone(),
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
    let resolv = match std::fs::read_to_string(&host.resolv_conf) {
        Ok(t) => parse_resolv_conf(&t),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Resolv::default(),
        Err(source) => return Err(Error::Io { operation: "reading", path: host.resolv_conf.clone(), source }),
    };
    Ok(DhcpServer::serve(socket, dhcp_lease(m, mtu, &resolv)?)?)
}

/// The privileged part of `m` in this thread's network namespace: the bridge, the tap (owned by QEMU's user),
/// forwarding, the nftables ruleset.
pub fn apply_links(m: &Masquerade, host: &Host) -> Result<Links, Error> {
    let pod_if = POD_INTERFACE;
    let pod_err = |message: String| Error::PodInterface { interface: pod_if, message };
    let out = tool::run("ip", &["-j".as_ref(), "addr".as_ref(), "show".as_ref(), "dev".as_ref(), pod_if.as_ref()])
        .map_err(|e| pod_err(e.to_string()))?;
    let links: Vec<IpLink> =
        serde_json::from_slice(&out.stdout).map_err(|e| pod_err(format!("unexpected `ip -j addr` output: {e}")))?;
    let link = links.first().ok_or_else(|| pod_err(String::from("not found")))?;
    let mtu = link.mtu;
    let pod_ip = link
        .addr_info
        .iter()
        .find(|a| a.family == "inet")
        .map(|a| format!("{}/{}", a.local, a.prefixlen))
        .ok_or_else(|| pod_err(String::from("has no IPv4 address")))?;

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
    for (step, args) in steps {
        let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
        tool::run("ip", &args).map_err(|source| Error::Tool { step, source })?;
    }
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

    fn masq(ports: Vec<Ports>, mac: &str) -> Masquerade {
        Masquerade {
            interface: "default".into(),
            ports,
            mac: mac.into(),
            hostname: "testvmi".into(),
            boot_file: None,
            tftp_server: None,
            ntp_servers: vec![],
        }
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
        m.boot_file = Some("pxelinux.0".into());
        m.ntp_servers = vec![Ipv4Addr::new(10, 0, 0, 5)];
        let l = dhcp_lease(&m, 1500, &Resolv::default()).unwrap();
        assert_eq!(
            (l.boot_file.as_deref(), l.ntp.as_slice(), l.dns.len()),
            (Some("pxelinux.0"), &m.ntp_servers[..], 0)
        );
        let e = dhcp_lease(&masq(vec![], "nope"), 1500, &Resolv::default()).unwrap_err();
        assert_eq!(e.to_string(), "interface \"default\": \"nope\" is not a MAC address");
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
        want.hostname = "h".into();
        assert_eq!(got, Plan::Masquerade(want));
        assert_eq!(plan(&spec(serde_json::json!({"domain": {"devices": {}}})), "h", "u-1").unwrap(), Plan::None);
        // Without macAddress: the contract's derived MAC, as the node agent puts it into the domain.
        let Plan::Masquerade(m) = with(
            serde_json::json!([{"name": "default", "pod": {}}]),
            serde_json::json!([{"name": "default", "masquerade": {}}]),
        )
        .unwrap() else {
            panic!("masquerade expected")
        };
        assert_eq!(m.mac, derived_mac("u-1", "default"));
        assert!(m.ports.is_empty());

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
                serde_json::json!([{"name": "default", "pod": {}}, {"name": "net2", "multus": {"networkName": "ns/br"}}]),
                serde_json::json!([{"name": "default", "masquerade": {}}, {"name": "net2", "bridge": {}}]),
                "network \"net2\": multus networks are not supported by this launcher",
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
