//! virt-api's `portforward` subresource ↔ its clients (`virtctl port-forward`): the path after the VM's or VMI's
//! name and the transports it names.

/// The subresource's name: `…/virtualmachine[instance]s/{name}/portforward/{port}[/{protocol}]`.
pub const SUBRESOURCE: &str = "portforward";

/// The transport of a tunnel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// A TCP connection (the default when the path names none).
    Tcp,
    /// A connected UDP socket (one websocket message = one datagram).
    Udp,
}

impl Protocol {
    /// `tcp` or `udp`, as the path names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }

    /// The protocol a path segment or `virtctl` argument names; `None` for any other name.
    pub fn from_name(name: &str) -> Option<Protocol> {
        match name {
            "tcp" => Some(Protocol::Tcp),
            "udp" => Some(Protocol::Udp),
            _ => None,
        }
    }
}

/// The subresource path of the tunnel to the guest's `port` (the protocol always named, as upstream's client does).
pub fn subresource_path(port: u16, protocol: Protocol) -> String {
    format!("{SUBRESOURCE}/{port}/{}", protocol.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_paths_name_the_protocol() {
        for p in [Protocol::Tcp, Protocol::Udp] {
            assert_eq!(Protocol::from_name(p.as_str()), Some(p));
        }
        assert_eq!(Protocol::from_name("sctp"), None);
        assert_eq!(Protocol::from_name("TCP"), None);
        assert_eq!(subresource_path(53, Protocol::Udp), "portforward/53/udp");
    }
}
