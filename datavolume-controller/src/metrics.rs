//! The controller's own Prometheus metrics (`/metrics`): reconciles, failures and durations per controller.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label set: which controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    /// `datavolume` or `worker`.
    pub controller: String,
}

/// Metric handles plus the registry that renders them.
pub struct Metrics {
    registry: Registry,
    /// Reconciles run.
    pub reconciles: Family<ControllerLabel, Counter>,
    /// Reconciles that returned an error.
    pub failures: Family<ControllerLabel, Counter>,
    /// Reconcile duration in seconds.
    pub duration: Family<ControllerLabel, Histogram>,
    /// Requests this process sent to the API server (watches count once, when opened).
    pub api_requests: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kubevirt_rs_datavolume_controller");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let failures = Family::<ControllerLabel, Counter>::default();
        let duration = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0])
        });
        registry.register("reconciles", "Reconciles run", reconciles.clone());
        registry.register("reconcile_failures", "Reconciles that returned an error", failures.clone());
        registry.register("reconcile_duration_seconds", "Reconcile duration", duration.clone());
        let api_requests = Counter::default();
        registry.register("api_requests", "Requests sent to the API server", api_requests.clone());
        Metrics { registry, reconciles, failures, duration, api_requests }
    }
}

impl Metrics {
    /// Records one reconcile of `controller` that took `secs` and succeeded or not.
    pub fn observe(&self, controller: &str, secs: f64, ok: bool) {
        let l = ControllerLabel { controller: controller.to_owned() };
        self.reconciles.get_or_create(&l).inc();
        if !ok {
            self.failures.get_or_create(&l).inc();
        }
        self.duration.get_or_create(&l).observe(secs);
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
