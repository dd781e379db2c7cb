//! virt-api's Prometheus metrics, served at `/metrics` on its HTTPS port as upstream's virt-api does, with
//! upstream's names (`pkg/monitoring/metrics/virt-api`): the connections open through the subresource API, per
//! namespace and VMI, and when the VMI was last connected to.
//!
//! ```text
//! console / vnc / portforward stream switched to a websocket ─► Metrics::connected(kind, ns, vmi) ─► Active
//!   kubevirt_<kind>_active_… +1, kubevirt_vmi_last_api_connection_timestamp_seconds = now
//! the stream ends ─► Active dropped ─► −1
//! ```

use std::sync::atomic::AtomicU64;

use controller_runtime::metrics::Registry;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// A kind of connection counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// `console`.
    Console,
    /// `vnc`.
    Vnc,
    /// `portforward`.
    PortForward,
}

/// The labels of every connection metric (upstream's `namespace`, `vmi`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VmiLabels {
    /// The VMI's namespace.
    pub namespace: String,
    /// The VMI's name.
    pub vmi: String,
}

/// The metrics of one virt-api process.
pub struct Metrics {
    registry: Registry,
    console: Family<VmiLabels, Gauge>,
    vnc: Family<VmiLabels, Gauge>,
    port_forward: Family<VmiLabels, Gauge>,
    last_connection: Family<VmiLabels, Gauge<f64, AtomicU64>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::unprefixed();
        let (console, vnc, port_forward, last_connection) =
            (Family::default(), Family::default(), Family::default(), Family::default());
        for (name, help, family) in [
            (
                "kubevirt_portforward_active_tunnels",
                "Amount of active portforward tunnels, broken down by namespace and vmi name.",
                &port_forward,
            ),
            (
                "kubevirt_vnc_active_connections",
                "Amount of active VNC connections, broken down by namespace and vmi name.",
                &vnc,
            ),
            (
                "kubevirt_console_active_connections",
                "Amount of active Console connections, broken down by namespace and vmi name.",
                &console,
            ),
        ] {
            registry.register(name, help, family.clone());
        }
        // USB redirection is not served (its subresource answers 501), so its gauge stays empty, as upstream's
        // does until a first connection.
        registry.register(
            "kubevirt_usbredir_active_connections",
            "Amount of active USB redirection connections, broken down by namespace and vmi name.",
            Family::<VmiLabels, Gauge>::default(),
        );
        registry.register(
            "kubevirt_vmi_last_api_connection_timestamp_seconds",
            "Virtual Machine Instance last API connection timestamp. Including VNC, console, portforward, SSH and \
             usbredir connections.",
            last_connection.clone(),
        );
        Metrics { registry, console, vnc, port_forward, last_connection }
    }
}

impl Metrics {
    /// Counts a connection of `kind` to VMI `namespace/vmi` until the returned guard is dropped, and records now
    /// as its last connection.
    pub fn connected(&self, kind: Connection, namespace: &str, vmi: &str) -> Active {
        let labels = VmiLabels { namespace: namespace.to_owned(), vmi: vmi.to_owned() };
        let family = match kind {
            Connection::Console => &self.console,
            Connection::Vnc => &self.vnc,
            Connection::PortForward => &self.port_forward,
        };
        let gauge = family.get_or_create(&labels).clone();
        gauge.inc();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        self.last_connection.get_or_create(&labels).set(now as f64);
        Active(gauge)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.registry.render()
    }
}

/// One open connection; dropping it takes it off its gauge.
#[derive(Debug)]
pub struct Active(Gauge);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn connections_are_counted_while_open_under_upstreams_names() {
        let m = Metrics::default();
        // As upstream's: a family shows once it has a series.
        assert!(!m.render().contains("kubevirt_"), "{}", m.render());
        let pf = "kubevirt_portforward_active_tunnels{namespace=\"ns\",vmi=\"vm1\"}";
        let a = m.connected(Connection::PortForward, "ns", "vm1");
        let b = m.connected(Connection::PortForward, "ns", "vm1");
        let c = m.connected(Connection::Console, "ns", "vm1");
        let text = m.render();
        for name in [
            "kubevirt_portforward_active_tunnels",
            "kubevirt_console_active_connections",
            "kubevirt_vmi_last_api_connection_timestamp_seconds",
        ] {
            assert!(text.contains(&format!("# TYPE {name} gauge")), "{name} missing:\n{text}");
        }
        assert_eq!(line(&text, pf), Some(&*format!("{pf} 2")));
        assert!(line(&text, "kubevirt_console_active_connections{namespace=\"ns\",vmi=\"vm1\"} 1").is_some(), "{text}");
        assert!(line(&text, "kubevirt_vnc_active_connections{").is_none(), "{text}");
        let stamp = line(&text, "kubevirt_vmi_last_api_connection_timestamp_seconds{namespace=\"ns\",vmi=\"vm1\"} ")
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_default();
        assert!(stamp > 1.7e9, "{text}");
        drop((a, c));
        let text = m.render();
        assert_eq!(line(&text, pf), Some(&*format!("{pf} 1")));
        assert!(line(&text, "kubevirt_console_active_connections{namespace=\"ns\",vmi=\"vm1\"} 0").is_some(), "{text}");
        drop(b);
        assert_eq!(line(&m.render(), pf), Some(&*format!("{pf} 0")));
    }
}
