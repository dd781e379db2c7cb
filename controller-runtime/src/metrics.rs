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

/// What a scrape awaits before rendering (e.g. reading counters over RPC into what a collector renders).
pub type Refresh = Box<dyn Fn() -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// Registries added after the `/metrics` endpoint started (once the process has the caches its collectors read,
/// or knows its role); rendered after the process's own metrics, in the order added, each after its [`Refresh`]
/// (if any) completed. Clones share the list.
#[derive(Clone, Default)]
pub struct LateRegistry(std::sync::Arc<std::sync::Mutex<Vec<LateEntry>>>);

/// One added registry and its refresh.
type LateEntry = std::sync::Arc<(Registry, Option<Refresh>)>;

impl LateRegistry {
    fn entries(&self) -> Vec<LateEntry> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Adds a registry (its names must not collide with the others').
    pub fn add(&self, registry: Registry) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(std::sync::Arc::new((registry, None)));
    }

    /// Adds a registry whose collectors render what `refresh` gathered: every scrape awaits `refresh` first (the
    /// refresh bounds its own time).
    pub fn add_with_refresh(&self, registry: Registry, refresh: Refresh) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(std::sync::Arc::new((registry, Some(refresh))));
    }

    /// Runs every refresh, one after the other.
    pub async fn refresh(&self) {
        for entry in self.entries() {
            if let Some(refresh) = &entry.1 {
                refresh().await;
            }
        }
    }

    /// The Prometheus text of `first` followed by every added registry.
    pub fn render_after(&self, first: &Registry) -> String {
        let entries = self.entries();
        let mut all = vec![first];
        all.extend(entries.iter().map(|e| &e.0));
        Registry::render_all(&all)
    }
}

/// Prometheus' type of a [`Computed`] family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A value that goes up and down.
    Gauge,
    /// A value that only goes up (its name ends in `_total`).
    Counter,
}

/// One metric family computed at scrape time (from caches or gathered counters) under an upstream name: its
/// samples are label sets (pairs in upstream's order) and values, in a stable order.
#[derive(Debug, Clone, PartialEq)]
pub struct Computed {
    /// The metric's full name (a counter's ends in `_total`, as upstream spells it).
    pub name: &'static str,
    /// Its help text.
    pub help: &'static str,
    /// Gauge or counter.
    pub kind: Kind,
    /// Label sets and values.
    pub samples: std::collections::BTreeMap<Vec<(String, String)>, f64>,
}

impl Computed {
    /// An empty gauge family.
    pub fn gauge(name: &'static str, help: &'static str) -> Computed {
        Computed { name, help, kind: Kind::Gauge, samples: Default::default() }
    }

    /// An empty counter family.
    pub fn counter(name: &'static str, help: &'static str) -> Computed {
        Computed { name, help, kind: Kind::Counter, samples: Default::default() }
    }

    /// Adds `by` to the sample of `labels` (created at 0).
    pub fn add(&mut self, labels: Vec<(String, String)>, by: f64) {
        *self.samples.entry(labels).or_default() += by;
    }

    /// The value of the first sample whose labels include every pair of `labels` (tests, checks).
    pub fn value(&self, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples.iter().find_map(|(l, v)| {
            let matches = labels.iter().all(|(k, want)| l.iter().any(|(lk, lv)| lk == k && lv == want));
            matches.then_some(*v)
        })
    }
}

/// Families computed at every scrape by a closure (the one collector behind [`Registry::computed`]).
struct ComputedCollector<F>(F);

impl<F> std::fmt::Debug for ComputedCollector<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ComputedCollector")
    }
}

impl<F: Fn() -> Vec<Computed> + Send + Sync + 'static> prometheus_client::collector::Collector
    for ComputedCollector<F>
{
    fn encode(&self, mut encoder: prometheus_client::encoding::DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_computed(&mut encoder, &(self.0)())
    }
}

impl Registry {
    /// An unprefixed registry whose metrics are the families `compute` returns at every scrape (from caches,
    /// flags or a refreshed reading), under their full upstream names.
    pub fn computed(compute: impl Fn() -> Vec<Computed> + Send + Sync + 'static) -> Registry {
        let mut r = Registry::unprefixed();
        r.register_collector(ComputedCollector(compute));
        r
    }
}

/// Encodes `families`; empty families are left out. A counter's descriptor is its name without `_total` (the text
/// format appends it to the samples), so samples carry upstream's name.
fn encode_computed(
    encoder: &mut prometheus_client::encoding::DescriptorEncoder,
    families: &[Computed],
) -> Result<(), std::fmt::Error> {
    use prometheus_client::encoding::EncodeMetric;
    use prometheus_client::metrics::MetricType;
    use prometheus_client::metrics::counter::ConstCounter;
    use prometheus_client::metrics::gauge::ConstGauge;
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let (name, ty) = match f.kind {
            Kind::Gauge => (f.name, MetricType::Gauge),
            Kind::Counter => (f.name.strip_suffix("_total").unwrap_or(f.name), MetricType::Counter),
        };
        let mut family = encoder.encode_descriptor(name, f.help, None, ty)?;
        for (labels, value) in &f.samples {
            let sample = family.encode_family(labels)?;
            // Whole numbers as upstream's Go client prints them ("1", not "1.0").
            let whole = value.fract() == 0.0 && value.abs() < 9.0e15;
            match (f.kind, whole) {
                (Kind::Gauge, true) => ConstGauge::new(*value as i64).encode(sample)?,
                (Kind::Gauge, false) => ConstGauge::new(*value).encode(sample)?,
                (Kind::Counter, true) if *value >= 0.0 => ConstCounter::new(*value as u64).encode(sample)?,
                (Kind::Counter, _) => ConstCounter::new(*value).encode(sample)?,
            }
        }
    }
    Ok(())
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

    #[test]
    fn computed_families_render_under_their_full_names() {
        let mut g = Computed::gauge("x_bytes", "A gauge.");
        g.add(vec![("name".into(), "a".into())], 1.5);
        g.add(vec![("name".into(), "a".into())], 1.0);
        let mut c = Computed::counter("x_requests_total", "A counter.");
        c.add(vec![("name".into(), "a".into())], 7.0);
        let empty = Computed::gauge("x_none", "Nothing.");
        assert_eq!(g.value(&[("name", "a")]), Some(2.5));
        assert_eq!(g.value(&[("name", "b")]), None);
        let families = vec![g, c, empty];
        let text = Registry::computed(move || families.clone()).render();
        assert!(text.contains("# TYPE x_bytes gauge\n"), "{text}");
        assert!(text.contains("\nx_bytes{name=\"a\"} 2.5\n"), "{text}");
        assert!(text.contains("# TYPE x_requests counter\n"), "{text}");
        assert!(text.contains("\nx_requests_total{name=\"a\"} 7"), "{text}");
        assert!(!text.contains("x_none"), "{text}");
    }
}
