//! Pod mode's progress endpoint: HTTPS on `:8443` with a self-signed certificate made at start, answering
//! every path with Prometheus text. The line CDI's controller scrapes is exactly
//! `kubevirt_cdi_import_progress_total{ownerUID="<uid>"} <percent>` (only that label); the percentage only
//! grows and covers download and conversion. Absolute figures are exported under our own names.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use contracts::errors::chain_line;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response};
use tokio::net::TcpListener;

use crate::progress::Progress;
use controller_runtime::tls;

/// The metric CDI's controller reads.
pub const PROGRESS_METRIC: &str = "kubevirt_cdi_import_progress_total";

/// State behind the endpoint.
pub struct Metrics {
    progress: Progress,
    owner_uid: String,
    /// Highest percentage reported so far ×100 (the counter never goes down).
    best: AtomicU64,
}

impl Metrics {
    /// Metrics for `progress`, labelled with `owner_uid`.
    pub fn new(progress: Progress, owner_uid: String) -> Arc<Self> {
        Arc::new(Metrics { progress, owner_uid, best: AtomicU64::new(0) })
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let s = self.progress.snapshot();
        let pct = s.overall_percent().clamp(0.0, 100.0);
        let best = self.best.fetch_max((pct * 100.0) as u64, Ordering::Relaxed).max((pct * 100.0) as u64);
        let pct = best as f64 / 100.0;
        let rate = if s.elapsed > 0.0 { s.source_bytes as f64 / s.elapsed } else { 0.0 };
        let uid = self.owner_uid.replace('\\', "\\\\").replace('"', "\\\"");
        let total = s.total.map_or(String::from("NaN"), |t| t.to_string());
        format!(
            "# HELP {PROGRESS_METRIC} The import progress in percentage\n\
             # TYPE {PROGRESS_METRIC} counter\n\
             {PROGRESS_METRIC}{{ownerUID=\"{uid}\"}} {pct:.2}\n\
             # HELP kubevirt_rs_import_source_bytes Bytes read from the source so far\n\
             # TYPE kubevirt_rs_import_source_bytes counter\n\
             kubevirt_rs_import_source_bytes{{owner_uid=\"{uid}\"}} {}\n\
             # HELP kubevirt_rs_import_phase_bytes_done Units done in the current phase\n\
             # TYPE kubevirt_rs_import_phase_bytes_done gauge\n\
             kubevirt_rs_import_phase_bytes_done{{owner_uid=\"{uid}\",phase=\"{}\"}} {}\n\
             # HELP kubevirt_rs_import_phase_bytes_total Units in the current phase (NaN: unknown)\n\
             # TYPE kubevirt_rs_import_phase_bytes_total gauge\n\
             kubevirt_rs_import_phase_bytes_total{{owner_uid=\"{uid}\",phase=\"{}\"}} {total}\n\
             # HELP kubevirt_rs_import_bytes_per_second Average source read rate\n\
             # TYPE kubevirt_rs_import_bytes_per_second gauge\n\
             kubevirt_rs_import_bytes_per_second{{owner_uid=\"{uid}\"}} {rate:.0}\n",
            s.source_bytes,
            s.phase.label(),
            s.done,
            s.phase.label(),
        )
    }
}

/// Binds `addr` and serves metrics until the runtime shuts down. Returns the bound address.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> Result<SocketAddr, String> {
    let tls = tls::self_signed_config().map_err(|e| chain_line(&e))?;
    let listener = TcpListener::bind(addr).await.map_err(|e| format!("bind {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let handler = move |_req: Request<Incoming>, _peer: Arc<tls::Peer>| {
        let body = metrics.render();
        async move {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
            r
        }
    };
    tokio::spawn(tls::serve_tls(listener, tls, handler, std::future::pending(), Duration::ZERO));
    Ok(local)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::Phase;

    #[test]
    fn exposition_matches_cdis_regex_and_only_grows() {
        let p = Progress::new();
        let m = Metrics::new(p.clone(), String::from("uid-1"));
        p.start_phase(Phase::Import, Some(1000));
        p.set_done(456);
        let text = m.render();
        assert!(text.contains("\nkubevirt_cdi_import_progress_total{ownerUID=\"uid-1\"} 45.60\n"), "{text}");
        p.set_done(100); // a retry restarting the count must not lower the counter
        assert!(m.render().contains("{ownerUID=\"uid-1\"} 45.60\n"));
        p.start_phase(Phase::Spool, Some(100));
        p.set_done(100);
        assert!(m.render().contains("{ownerUID=\"uid-1\"} 50.00\n"));
        p.start_phase(Phase::Convert, Some(10_000));
        p.set_done(5_000);
        assert!(m.render().contains("{ownerUID=\"uid-1\"} 75.00\n"));
    }
}
