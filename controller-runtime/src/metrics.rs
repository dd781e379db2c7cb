//! Prometheus metrics of a controller process: one [`Registry`] per process (rendered by
//! [`crate::health`]), reconcile counters and durations per controller ([`ReconcileMetrics`]) and a counter of
//! API requests ([`counted_client`]).

use std::future::Future;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// The metric registry of one process; every name gets the process's prefix.
pub struct Registry(prometheus_client::registry::Registry);

impl Registry {
    /// A registry whose metric names start with `prefix_`.
    pub fn with_prefix(prefix: &str) -> Registry {
        Registry(prometheus_client::registry::Registry::with_prefix(prefix))
    }

    /// A registry whose metric names are registered as they are (upstream's full names).
    pub fn unprefixed() -> Registry {
        Registry(prometheus_client::registry::Registry::default())
    }

    /// Registers `metric` as `<prefix>_<name>` (as `<name>` when [`Registry::unprefixed`]).
    pub fn register(&mut self, name: &str, help: &str, metric: impl prometheus_client::registry::Metric) {
        self.0.register(name, help, metric);
    }

    /// Registers `collector`, asked for its metrics at every scrape (gauges computed from caches).
    pub fn register_collector(&mut self, collector: impl prometheus_client::collector::Collector) {
        self.0.register_collector(Box::new(collector));
    }

    /// The Prometheus text exposition (empty if encoding fails).
    pub fn render(&self) -> String {
        Registry::render_all(&[self])
    }

    /// The Prometheus text exposition of several registries as one (their names must not collide; empty if
    /// encoding fails).
    pub fn render_all(registries: &[&Registry]) -> String {
        use prometheus_client::encoding::text;
        let mut out = String::new();
        let encoded = registries.iter().try_for_each(|r| text::encode_registry(&mut out, &r.0));
        if encoded.and_then(|()| text::encode_eof(&mut out)).is_err() {
            out.clear();
        }
        out
    }
}

/// A registry filled after the `/metrics` endpoint started (once the process has the caches its collectors
/// read); rendered after the process's own metrics. Clones share the slot.
#[derive(Clone, Default)]
pub struct LateRegistry(std::sync::Arc<std::sync::OnceLock<Registry>>);

impl LateRegistry {
    /// Fills the slot; a second call is ignored (the first registry stays).
    pub fn set(&self, registry: Registry) {
        let _ = self.0.set(registry);
    }

    /// The registry, once set.
    pub fn get(&self) -> Option<&Registry> {
        self.0.get()
    }
}

/// Label set: which controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// The controller's name (`datavolume`, `worker`, …).
    pub controller: String,
}

/// Reconcile metrics, shared by every controller of the process (labelled by controller name).
#[derive(Clone)]
pub struct ReconcileMetrics {
    /// Reconciles run.
    pub reconciles: Family<ControllerLabel, Counter>,
    /// Reconciles that returned an error.
    pub failures: Family<ControllerLabel, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Family<ControllerLabel, Histogram>,
    /// Requests this process sent to the API server (watches count once, when opened).
    pub api_requests: Counter,
}

impl ReconcileMetrics {
    /// Creates the metrics and registers them in `registry` (`reconciles`, `reconcile_failures`,
    /// `reconcile_duration_seconds`, `api_requests`).
    pub fn register(registry: &mut Registry) -> ReconcileMetrics {
        let m = ReconcileMetrics {
            reconciles: Family::default(),
            failures: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])),
            api_requests: Counter::default(),
        };
        registry.register("reconciles", "Reconciles run", m.reconciles.clone());
        registry.register("reconcile_failures", "Reconciles that returned an error", m.failures.clone());
        registry.register("reconcile_duration_seconds", "Reconcile duration", m.duration.clone());
        registry.register("api_requests", "Requests sent to the API server", m.api_requests.clone());
        m
    }

    /// Records one reconcile of `controller` that took `secs` and succeeded or not.
    pub fn observe(&self, controller: &str, secs: f64, ok: bool) {
        let l = ControllerLabel { controller: controller.to_owned() };
        self.reconciles.get_or_create(&l).inc();
        if !ok {
            self.failures.get_or_create(&l).inc();
        }
        self.duration.get_or_create(&l).observe(secs);
    }

    /// Runs one reconcile of `controller` and records it.
    pub async fn measure<T, E>(&self, controller: &str, reconcile: impl Future<Output = Result<T, E>>) -> Result<T, E> {
        let started = Instant::now();
        let r = reconcile.await;
        self.observe(controller, started.elapsed().as_secs_f64(), r.is_ok());
        r
    }
}

/// A client for `config` that counts every request it sends in `counter`.
pub fn counted_client(config: kube::Config, counter: Counter) -> Result<kube::Client, kube::Error> {
    let count = tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
        counter.inc();
        req
    });
    Ok(kube::client::ClientBuilder::try_from(config)?.with_layer(&count).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciles_are_counted_per_controller() {
        let mut r = Registry::with_prefix("test");
        let m = ReconcileMetrics::register(&mut r);
        m.observe("a", 0.002, true);
        m.observe("a", 0.002, false);
        m.api_requests.inc();
        let text = r.render();
        assert!(text.contains("test_reconciles_total{controller=\"a\"} 2"), "{text}");
        assert!(text.contains("test_reconcile_failures_total{controller=\"a\"} 1"), "{text}");
        assert!(text.contains("test_api_requests_total 1"), "{text}");
    }
}
