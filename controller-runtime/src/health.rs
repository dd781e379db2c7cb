//! The controller's HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (process alive) and `/readyz`
//! (leading with synced caches, or standing by as a healthy follower).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::{LateRegistry, Registry};

/// State shared with the handlers.
#[derive(Clone)]
pub struct Health {
    /// Metrics to render.
    pub metrics: Arc<Registry>,
    /// Metrics registered once the process is running (rendered after `metrics`).
    pub late: LateRegistry,
    /// Set once the process is either leading with running controllers or waiting as a healthy follower.
    pub ready: Arc<AtomicBool>,
}

async fn metrics(State(h): State<Health>) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    h.late.refresh().await;
    (StatusCode::OK, [("content-type", "text/plain; version=0.0.4")], h.late.render_after(&h.metrics))
}

async fn readyz(State(h): State<Health>) -> StatusCode {
    if h.ready.load(Ordering::Relaxed) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }
}

/// Binds `addr` and serves the endpoints in the background until the process ends; a bind failure is returned
/// at once, a later serving failure is logged.
pub async fn serve(addr: SocketAddr, health: Health) -> std::io::Result<SocketAddr> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server failed");
        }
    });
    Ok(bound)
}

/// What a controller process starts with ([`start`]).
pub struct Process {
    /// A client whose every request is counted in `metrics.api_requests`.
    pub client: kube::Client,
    /// The reconcile metrics, registered under the process's prefix.
    pub metrics: crate::metrics::ReconcileMetrics,
    /// `/readyz`'s flag (set by the leader election, or by the process itself).
    pub ready: Arc<AtomicBool>,
    /// Where the process registers metrics it can only compute once running (upstream's names, unprefixed).
    pub late: LateRegistry,
}

/// The start of every controller binary: the rustls provider, the metrics registry with `prefix`, the
/// `/metrics` `/healthz` `/readyz` server on `addr`, and a client from the environment (in-cluster or kubeconfig)
/// counting its API requests (the benchmarks report requests per object).
pub async fn start(prefix: &str, addr: SocketAddr) -> anyhow::Result<Process> {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let mut registry = Registry::with_prefix(prefix);
    let metrics = crate::metrics::ReconcileMetrics::register(&mut registry);
    let ready = Arc::new(AtomicBool::new(false));
    let late = LateRegistry::default();
    serve(addr, Health { metrics: Arc::new(registry), late: late.clone(), ready: ready.clone() }).await?;
    let client = crate::metrics::counted_client(kube::Config::infer().await?, metrics.api_requests.clone())?;
    Ok(Process { client, metrics, ready, late })
}
