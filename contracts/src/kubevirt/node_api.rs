//! The node agent's API on port [`PORT`] (upstream virt-handler's console server), between virt-api and the node
//! agent of the VMI's node.
//!
//! ```text
//! virt-api ──TLS: client certificate CN = CLIENT_COMMON_NAME, server verified as SERVER_NAME, both signed by
//!            the CA in the Secrets SERVER_SECRET / CLIENT_SECRET (ca.crt)──► node agent pod IP : PORT
//!   GET  Command::path(ns, name)  Connection: Upgrade, Upgrade: UPGRADE   ─► 101, then the raw byte stream of the
//!                                                                           serial console / VNC socket
//!   PUT  Command::path(ns, name)  (pause, unpause)                         ─► 200, or an error status + one line
//!   GET  Command::path(ns, name)  (screenshot)                             ─► 200, Content-Type image/png, the PNG
//! ```
//!
//! Only virt-api may call it: a request without a client certificate of that name is refused (401/403).

use super::consts::NODE_AGENT_STREAM_PORT;

/// The port.
pub const PORT: u16 = NODE_AGENT_STREAM_PORT;
/// Common name of virt-api's client certificate (the only caller the node agent accepts).
pub const CLIENT_COMMON_NAME: &str = "kubevirt.io:system:client:virt-api";
/// The DNS name in the node agent's serving certificate; virt-api verifies it whatever pod IP it dials.
pub const SERVER_NAME: &str = "virt-handler.kubevirt.pod";
/// The `Upgrade` token of stream requests (after the 101 the connection carries the socket's bytes as they are).
pub const UPGRADE: &str = "kubevirt-rs-stream";
/// Secret (`kubernetes.io/tls`: `tls.crt`, `tls.key`, `ca.crt`) of the node agent's serving certificate
/// (upstream's name).
pub const SERVER_SECRET: &str = "kubevirt-virt-handler-server-certs";
/// Secret (same keys) of virt-api's client certificate for the node agent (upstream's name).
pub const CLIENT_SECRET: &str = "kubevirt-virt-handler-certs";
/// Where the node agent mounts [`SERVER_SECRET`].
pub const SERVER_CERT_DIR: &str = "/etc/virt-handler/servercertificates";
/// Where virt-api mounts [`CLIENT_SECRET`].
pub const CLIENT_CERT_DIR: &str = "/etc/virt-handler/clientcertificates";
/// `Content-Type` of a [`Command::Screenshot`] answer.
pub const SCREENSHOT_TYPE: &str = "image/png";
/// Label (`kubevirt.io=virt-handler`) of the node agent's pods, by which virt-api finds the one on a node.
pub const POD_LABEL: (&str, &str) = ("kubevirt.io", "virt-handler");

/// What virt-api asks of the node agent for one VMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach to the serial console (a stream; a new one closes the previous).
    Console,
    /// Attach to the VNC server (a stream). With `preserve_session`, refused while another is attached;
    /// without, the previous one is closed.
    Vnc {
        /// Keep an attached session (refuse this one) instead of replacing it.
        preserve_session: bool,
    },
    /// Pause the guest (libvirt suspend).
    Pause,
    /// Resume a paused guest.
    Unpause,
    /// A PNG of the VNC display (a GET answered with the image).
    Screenshot,
}

impl Command {
    /// The last path segment.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Console => "console",
            Command::Vnc { .. } => "vnc",
            Command::Pause => "pause",
            Command::Unpause => "unpause",
            Command::Screenshot => "screenshot",
        }
    }

    /// Whether it is a stream (GET + upgrade) rather than a PUT.
    pub fn is_stream(&self) -> bool {
        matches!(self, Command::Console | Command::Vnc { .. })
    }

    /// Whether it is a GET (the streams and the screenshot) rather than a PUT.
    pub fn is_get(&self) -> bool {
        self.is_stream() || *self == Command::Screenshot
    }

    /// The request path and query for VMI `namespace/name`.
    pub fn path(&self, namespace: &str, name: &str) -> String {
        let query = match self {
            Command::Vnc { preserve_session } => format!("?preserveSession={preserve_session}"),
            _ => String::new(),
        };
        format!("/v1/namespaces/{namespace}/virtualmachineinstances/{name}/{}{query}", self.name())
    }

    /// The command, namespace and name of a request path and query (`None`: not one of these).
    pub fn parse(path: &str, query: Option<&str>) -> Option<(Command, String, String)> {
        let rest = path.strip_prefix("/v1/namespaces/")?;
        let mut parts = rest.split('/');
        let (ns, kind, name, verb) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || kind != "virtualmachineinstances" || ns.is_empty() || name.is_empty() {
            return None;
        }
        let preserve_session =
            query.unwrap_or_default().split('&').any(|kv| kv == "preserveSession=true" || kv == "preserveSession=1");
        let command = match verb {
            "console" => Command::Console,
            "vnc" => Command::Vnc { preserve_session },
            "pause" => Command::Pause,
            "unpause" => Command::Unpause,
            "screenshot" => Command::Screenshot,
            _ => return None,
        };
        Some((command, ns.to_owned(), name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip() {
        for c in [
            Command::Console,
            Command::Vnc { preserve_session: true },
            Command::Vnc { preserve_session: false },
            Command::Pause,
            Command::Unpause,
            Command::Screenshot,
        ] {
            let p = c.path("ns", "vm");
            let (path, query) = p.split_once('?').map_or((p.as_str(), None), |(a, b)| (a, Some(b)));
            assert_eq!(Command::parse(path, query), Some((c, "ns".into(), "vm".into())), "{p}");
        }
        assert_eq!(Command::parse("/v1/namespaces/ns/virtualmachineinstances/vm/console/x", None), None);
        assert_eq!(Command::parse("/v1/namespaces/ns/pods/vm/console", None), None);
        assert_eq!(Command::parse("/v1/namespaces//virtualmachineinstances/vm/console", None), None);
        assert_eq!(Command::parse("/v1/namespaces/ns/virtualmachineinstances/vm/freeze", None), None);
        assert!(Command::Console.is_stream() && !Command::Pause.is_stream());
        assert!(Command::Screenshot.is_get() && !Command::Screenshot.is_stream() && !Command::Pause.is_get());
    }
}
