//! The controller's HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (process alive) and `/readyz`
//! (leading and caches synced, or standing by as a follower).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::metrics::Metrics;

/// State shared with the handlers.
#[derive(Clone)]
pub struct Health {
    /// Metrics to render.
    pub metrics: Arc<Metrics>,
    /// Set once the process is either leading with running controllers or waiting as a healthy follower.
    pub ready: Arc<AtomicBool>,
}

async fn metrics(State(h): State<Health>) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    (StatusCode::OK, [("content-type", "text/plain; version=0.0.4")], h.metrics.render())
}

async fn readyz(State(h): State<Health>) -> StatusCode {
    if h.ready.load(Ordering::Relaxed) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }
}

/// Serves the endpoints on `addr` until the process ends.
pub async fn serve(addr: SocketAddr, health: Health) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(health);
    let listener = tokio::net::TcpListener::bind(addr).await?;
    axum::serve(listener, app).await
}
