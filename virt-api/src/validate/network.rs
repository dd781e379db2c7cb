//! Network validation (upstream `pkg/network/admitter`): network sources, interface bindings, names, the
//! interface ↔ network mapping, ports, MAC/PCI addresses, DHCP options; and, on creation, the discontinued
//! bindings (slirp, passt, macvtap).
//!
//! Not checked: DRA networks (`resourceClaim`, gate NetworkDevicesWithDRA) beyond counting them as a source.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use crds::kubevirt::domain::{Interface, InterfaceModel, InterfaceState, Port, Protocol};
use crds::kubevirt::network::Network;
use crds::kubevirt::vmi::VirtualMachineInstanceSpec;

use super::{go_quote, valid_pci_address};
use crate::cause::{Cause, CauseType, Path};
use crate::config::{Config, FeatureGate};
use crate::validate::names::is_valid_port_name;

/// The MAC address of the in-pod bridge of masquerade bindings.
pub const RESERVED_MASQUERADE_MAC: &str = "02:00:00:00:00:00";

fn interfaces(spec: &VirtualMachineInstanceSpec) -> &[Interface] {
    spec.domain.devices.interfaces.as_deref().unwrap_or_default()
}

fn networks(spec: &VirtualMachineInstanceSpec) -> &[Network] {
    spec.networks.as_deref().unwrap_or_default()
}

fn iface_path(field: &Path, idx: usize) -> Path {
    field.children(&["domain", "devices", "interfaces"]).index(idx)
}

/// Upstream's `validateDiscontinuedBindings` (creation only).
pub fn validate_discontinued(field: &Path, spec: &VirtualMachineInstanceSpec) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (idx, iface) in interfaces(spec).iter().enumerate() {
        let p = iface_path(field, idx);
        if iface.slirp.is_some() {
            causes.push(Cause::invalid("Slirp interface support has been discontinued since v1.3", p.child("slirp")));
        }
        if iface.passt.is_some() {
            causes.push(Cause::invalid("Passt network binding has been discontinued since v1.3", p.child("passt")));
        }
        if iface.macvtap.is_some() {
            causes.push(Cause::invalid("Macvtap network binding has been discontinued since v1.3", p.child("macvtap")));
        }
    }
    causes
}

/// Upstream's network `Validator.Validate`, in its order.
pub fn validate(field: &Path, spec: &VirtualMachineInstanceSpec, config: &Config) -> Vec<Cause> {
    let mut causes = Vec::new();
    let nets = networks(spec);
    let ifaces = interfaces(spec);
    let by_name: BTreeMap<&str, &Network> = nets.iter().map(|n| (n.name.as_str(), n)).collect();
    let empty = Network::default();
    let net_of = |name: &str| by_name.get(name).copied().unwrap_or(&empty);

    // validateSinglePodNetwork
    let pods = nets.iter().filter(|n| n.pod.is_some()).count();
    let multus_defaults = nets.iter().filter(|n| n.multus.as_ref().is_some_and(|m| m.default == Some(true))).count();
    if pods > 1 {
        let p = field.child("interfaces");
        causes.push(Cause::new(
            CauseType::Duplicate,
            format!("more than one interface is connected to a pod network in {p}"),
            &p,
        ));
    }
    if multus_defaults > 1 {
        causes.push(Cause::invalid("Multus CNI should only have one default network", field.child("networks")));
    }
    if pods > 0 && multus_defaults > 0 {
        causes.push(Cause::invalid(
            "Pod network cannot be defined when Multus default network is defined",
            field.child("networks"),
        ));
    }
    // validateSingleNetworkSource
    for (idx, n) in nets.iter().enumerate() {
        let count =
            usize::from(n.pod.is_some()) + usize::from(n.multus.is_some()) + usize::from(n.resource_claim.is_some());
        let p = field.child("networks").index(idx);
        if count == 0 {
            causes.push(Cause::new(CauseType::Required, "should have a network type", &p));
        } else if count > 1 {
            causes.push(Cause::new(CauseType::Required, "should have only one network type", &p));
        }
    }
    // validateMultusNetworkSource (the first offender only)
    if let Some(idx) = nets.iter().position(|n| n.multus.as_ref().is_some_and(|m| m.network_name.is_empty())) {
        causes.push(Cause::new(
            CauseType::Required,
            "CNI delegating plugin must have a networkName",
            field.child("networks").index(idx),
        ));
    }
    // validateInterfaceStateValue
    let default_network =
        nets.iter().find(|n| n.pod.is_some() || n.multus.as_ref().is_some_and(|m| m.default == Some(true)));
    for (idx, iface) in ifaces.iter().enumerate() {
        let p = iface_path(field, idx).child("state");
        let state = iface.state.as_ref().map(|s| s.as_str()).unwrap_or_default();
        if !state.is_empty() && !iface.state.as_ref().is_some_and(InterfaceState::is_known) {
            causes.push(Cause::invalid(
                format!("logical {} interface state value is unsupported: {state}", iface.name),
                &p,
            ));
        }
        if iface.sriov.is_some() && matches!(iface.state, Some(InterfaceState::Down | InterfaceState::Up)) {
            causes.push(Cause::invalid(
                format!(
                    "{} interface's state {} is not supported for SR-IOV NICs",
                    go_quote(&iface.name),
                    go_quote(state)
                ),
                &p,
            ));
        }
        if iface.state == Some(InterfaceState::Absent) && iface.bridge.is_none() {
            causes.push(Cause::invalid(
                format!(
                    "{} interface's state {} is supported only for bridge binding",
                    go_quote(&iface.name),
                    go_quote(state)
                ),
                &p,
            ));
        }
        if iface.state == Some(InterfaceState::Absent) && default_network.is_some_and(|n| n.name == iface.name) {
            causes.push(Cause::invalid(
                format!(
                    "{} interface's state {} is not supported on default networks",
                    go_quote(&iface.name),
                    go_quote(state)
                ),
                &p,
            ));
        }
    }
    // validateInterfaceBinding
    for (idx, iface) in ifaces.iter().enumerate() {
        let p = iface_path(field, idx);
        let net = net_of(&iface.name);
        let bindings = [
            iface.bridge.is_some(),
            iface.masquerade.is_some(),
            iface.sriov.is_some(),
            iface.passt_binding.is_some(),
            iface.binding.is_some(),
        ];
        if bindings.iter().filter(|b| **b).count() != 1 {
            causes.push(Cause::invalid(
                format!("logical {} interface must have exactly one binding method or binding plugin", iface.name),
                &p,
            ));
        }
        if iface.masquerade.is_some() && net.pod.is_none() {
            causes.push(Cause::invalid("Masquerade interface only implemented with pod network", p.child("name")));
        }
        if iface.masquerade.is_some() && iface.mac_address.as_deref() == Some(RESERVED_MASQUERADE_MAC) {
            causes.push(Cause::invalid(
                "The requested MAC address is reserved for the in-pod bridge. Please choose another one.",
                p.child("macAddress"),
            ));
        }
        if iface.bridge.is_some() && net.pod.is_some() && !config.permit_bridge_on_pod_network {
            causes.push(Cause::invalid(
                "Bridge on pod network configuration is not enabled under kubevirt-config",
                p.child("name"),
            ));
        }
        if iface.passt_binding.is_some() && !config.enabled(FeatureGate::PasstBinding) {
            causes.push(Cause::invalid("PasstBinding feature gate is not enabled", p.child("name")));
        }
        if iface.passt_binding.is_some() && net.pod.is_none() {
            causes.push(Cause::invalid("PasstBinding interface only implemented with pod network", p.child("name")));
        }
    }
    // validateNetworkNameUnique
    let mut seen = BTreeSet::new();
    for (idx, n) in nets.iter().enumerate() {
        if !seen.insert(n.name.as_str()) {
            causes.push(Cause::new(
                CauseType::Duplicate,
                format!(
                    "Network with name {} already exists, every network must have a unique name",
                    go_quote(&n.name)
                ),
                field.child("networks").index(idx).child("name"),
            ));
        }
    }
    // validateNetworksAssignedToInterfaces
    let iface_names: BTreeSet<&str> = ifaces.iter().map(|i| i.name.as_str()).collect();
    for (idx, n) in nets.iter().enumerate() {
        if !iface_names.contains(n.name.as_str()) {
            let p = field.child("networks").index(idx).child("name");
            causes.push(Cause::new(CauseType::Required, format!("{p} '{}' not found.", n.name), &p));
        }
    }
    // validateInterfaceNameUnique
    let mut seen = BTreeSet::new();
    for (idx, iface) in ifaces.iter().enumerate() {
        if !seen.insert(iface.name.as_str()) {
            causes.push(Cause::new(
                CauseType::Duplicate,
                "Only one interface can be connected to one specific network",
                iface_path(field, idx).child("name"),
            ));
        }
    }
    // validateInterfacesAssignedToNetworks
    for (idx, iface) in ifaces.iter().enumerate() {
        if !by_name.contains_key(iface.name.as_str()) {
            let p = iface_path(field, idx).child("name");
            causes.push(Cause::invalid(format!("{p} '{}' not found.", iface.name), &p));
        }
    }
    // validateInterfacesFields
    for (idx, iface) in ifaces.iter().enumerate() {
        causes.extend(interface_fields(field, idx, iface, net_of(&iface.name), config));
    }
    causes
}

fn interface_fields(field: &Path, idx: usize, iface: &Interface, net: &Network, config: &Config) -> Vec<Cause> {
    let mut causes = Vec::new();
    let p = iface_path(field, idx);
    let name_path = p.child("name");
    if iface.name.is_empty() || !iface.name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_') {
        causes.push(Cause::invalid(
            "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)",
            &name_path,
        ));
    }
    if let Some(model) = &iface.model
        && !model.as_str().is_empty()
        && !InterfaceModel::is_known(model)
    {
        causes.push(Cause::new(
            CauseType::NotSupported,
            format!("interface {name_path} uses model {model} that is not supported."),
            p.child("model"),
        ));
    }
    if let Some(mac) = iface.mac_address.as_deref().filter(|m| !m.is_empty()) {
        let problem = match parse_mac_len(mac) {
            None => Some(format!("malformed MAC address ({mac})")),
            Some(len) if len > 6 => Some(format!("too long MAC address ({mac})")),
            Some(_) => None,
        };
        if let Some(problem) = problem {
            causes.push(Cause::invalid(format!("interface {name_path} has {problem}."), p.child("macAddress")));
        }
    }
    if let Some(pci) = iface.pci_address.as_deref().filter(|a| !a.is_empty())
        && !valid_pci_address(pci)
    {
        causes.push(Cause::invalid(
            format!("interface {name_path} has malformed PCI address ({pci})."),
            p.child("pciAddress"),
        ));
    }
    if net.pod.is_some()
        && let Some(ports) = &iface.ports
    {
        causes.extend(ports_causes(&p, ports));
    }
    causes.extend(port_ranges(&p, iface, net, config));
    if let Some(dhcp) = &iface.dhcp_options {
        let private = dhcp.private_options.as_deref().unwrap_or_default();
        let unique: BTreeSet<i64> = private.iter().map(|o| o.option).collect();
        if unique.len() < private.len() {
            causes.push(Cause::invalid("Found Duplicates: you have provided duplicate DHCPPrivateOptions", field));
        }
        for o in private {
            if !(224..=254).contains(&o.option) {
                causes.push(Cause::invalid(
                    "provided DHCPPrivateOptions are out of range, must be in range 224 to 254",
                    field,
                ));
            }
        }
        for (i, ip) in dhcp.ntp_servers.iter().flatten().enumerate() {
            let v4 = match ip.parse::<IpAddr>() {
                Ok(IpAddr::V4(_)) => true,
                Ok(IpAddr::V6(v6)) => v6.to_ipv4_mapped().is_some(),
                Err(_) => false,
            };
            if !v4 {
                causes.push(Cause::invalid(
                    "NTP servers must be a list of valid IPv4 addresses.",
                    p.children(&["dhcpOptions", "ntpServers"]).index(i),
                ));
            }
        }
    }
    causes
}

fn ports_causes(p: &Path, ports: &[Port]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let Some(name) = port.name.as_deref().filter(|n| !n.is_empty()) else { continue };
        let np = p.child("ports").index(i).child("name");
        if names.contains(name) {
            causes.push(Cause::new(CauseType::Duplicate, format!("Duplicate name of the port: {name}"), &np));
        }
        if !is_valid_port_name(name) {
            causes.push(Cause::invalid(format!("Invalid name of the port: {name}"), &np));
        }
        names.insert(name);
    }
    for (i, port) in ports.iter().enumerate() {
        let pp = p.child("ports").index(i);
        if port.port == 0 {
            causes.push(Cause::new(CauseType::Required, "Port field is mandatory.", pp.child("port")));
        }
        if !(0..65536).contains(&port.port) {
            causes.push(Cause::invalid("Port field must be in range 0 < x < 65536.", pp.child("port")));
        }
        if port.protocol.as_ref().is_some_and(|pr| !pr.as_str().is_empty() && !pr.is_known()) {
            causes.push(Cause::invalid("Unknown protocol, only TCP or UDP allowed", pp.child("protocol")));
        }
    }
    causes
}

fn port_ranges(p: &Path, iface: &Interface, net: &Network, config: &Config) -> Vec<Cause> {
    let Some(ranges) = &iface.port_ranges else { return Vec::new() };
    if !config.enabled(FeatureGate::PortRangesSpec) {
        return vec![Cause::invalid(
            "portRanges is specified on interface but the PortRangesSpec feature gate is not enabled",
            p.child("name"),
        )];
    }
    let mut causes = Vec::new();
    if net.pod.is_none() {
        return causes;
    }
    if iface.ports.is_some() {
        causes.push(Cause::invalid("Cannot define both ports and portRanges on interface", p.child("name")));
    }
    if iface.masquerade.is_none() {
        causes.push(Cause::invalid("portRanges are only supported on masquerade interfaces", p.child("name")));
    }
    if ranges.len() > 10 {
        causes.push(Cause::invalid("No more than 10 portRanges are allowed", p.child("portRanges")));
        return causes;
    }
    let mut by_protocol: BTreeMap<&str, Vec<(i32, i32)>> = BTreeMap::new();
    for (i, r) in ranges.iter().enumerate() {
        let rp = p.child("portRanges").index(i);
        if !matches!(r.protocol, Protocol::Tcp | Protocol::Udp) {
            causes.push(Cause::invalid("Unknown protocol, only TCP or UDP allowed", rp.child("protocol")));
        } else if r.start <= 0 || r.start >= 65536 {
            causes.push(Cause::invalid("Start must be a valid port number, 0 < x < 65536", rp.child("start")));
        } else if r.end <= 0 || r.end >= 65536 {
            causes.push(Cause::invalid("End must be a valid port number, 0 < x < 65536", rp.child("end")));
        } else if r.start > r.end {
            causes.push(Cause::invalid("Start must be less than or equal to end", rp.child("start")));
        } else {
            by_protocol.entry(r.protocol.as_str()).or_default().push((r.start, r.end));
        }
    }
    // Upstream iterates a Go map here (random order); protocols are reported in sorted order.
    for (protocol, mut intervals) in by_protocol {
        intervals.sort();
        for w in intervals.windows(2) {
            let ((ps, pe), (cs, ce)) = (w[0], w[1]);
            if cs <= pe {
                causes.push(Cause::invalid(
                    format!("{protocol} portRanges [{ps}-{pe}] and [{cs}-{ce}] overlap"),
                    p.child("portRanges"),
                ));
            }
        }
    }
    causes
}

/// The byte length of a MAC address as Go's `net.ParseMAC` accepts it (`:`/`-` separated pairs or `.` separated
/// quads; 6, 8 or 20 bytes), `None` when malformed.
fn parse_mac_len(s: &str) -> Option<usize> {
    let hex = |g: &str, n: usize| g.len() == n && g.bytes().all(|c| c.is_ascii_hexdigit());
    let len = if s.contains('.') {
        let groups: Vec<&str> = s.split('.').collect();
        groups.iter().all(|g| hex(g, 4)).then_some(groups.len() * 2)?
    } else {
        let sep = if s.contains(':') { ':' } else { '-' };
        let groups: Vec<&str> = s.split(sep).collect();
        groups.iter().all(|g| hex(g, 2)).then_some(groups.len())?
    };
    matches!(len, 6 | 8 | 20).then_some(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_addresses_as_go_parses_them() {
        assert_eq!(parse_mac_len("de:ad:00:00:be:af"), Some(6));
        assert_eq!(parse_mac_len("de-ad-00-00-be-af"), Some(6));
        assert_eq!(parse_mac_len("dead.0000.beaf"), Some(6));
        assert_eq!(parse_mac_len("00:00:00:00:fe:80:00:00"), Some(8));
        assert_eq!(parse_mac_len("de:ad:00:00:be"), None);
        assert_eq!(parse_mac_len("zz:ad:00:00:be:af"), None);
    }
}
