//! Pod mode's progress endpoint: HTTPS on `:8443` with a self-signed certificate made at start, answering
//! every path with Prometheus text. The line CDI's controller scrapes is exactly
//! `kubevirt_cdi_import_progress_total{ownerUID="<uid>"} <percent>` (only that label); the percentage only
//! grows and covers download and conversion. Absolute figures are exported under our own names, and the transfer
//! detail the DataVolume controller shows in kubectl ([`TransferMeter`], `contracts::cdi::transfer`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use contracts::cdi::transfer::{Stage, TransferStatus};
use contracts::errors::chain_line;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response};
use tokio::net::TcpListener;

use crate::progress::{Phase, Progress, Snapshot};
use controller_runtime::tls;

/// The metric CDI's controller reads.
pub const PROGRESS_METRIC: &str = "kubevirt_cdi_import_progress_total";

/// State behind the endpoint.
pub struct Metrics {
    progress: Progress,
    owner_uid: String,
    /// Highest percentage reported so far ×100 (the counter never goes down).
    best: AtomicU64,
    meter: TransferMeter,
}

impl Metrics {
    /// Metrics for `progress`, labelled with `owner_uid`.
    pub fn new(progress: Progress, owner_uid: String) -> Arc<Self> {
        Arc::new(Metrics { progress, owner_uid, best: AtomicU64::new(0), meter: TransferMeter::default() })
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
             kubevirt_rs_import_bytes_per_second{{owner_uid=\"{uid}\"}} {rate:.0}\n\
             {}",
            s.source_bytes,
            s.phase.label(),
            s.done,
            s.phase.label(),
            self.meter.observe(&s).render(&self.owner_uid),
        )
    }
}

/// The stage a pipeline phase reports as.
fn stage(phase: Phase) -> Stage {
    match phase {
        Phase::Probe => Stage::Probing,
        Phase::Import => Stage::Transferring,
        Phase::Spool => Stage::Downloading,
        Phase::Convert => Stage::Converting,
        Phase::Resolve => Stage::Resolving,
        Phase::Finish => Stage::Syncing,
    }
}

/// Turns successive [`Snapshot`]s into [`TransferStatus`]es: the rate is measured over the time between two
/// observations (the controller scrapes every 2 s), smoothed, and reset when the stage changes; the time left
/// is the stage's remaining units at that rate. Shared by the importer's and the upload server's endpoints.
#[derive(Debug, Default)]
pub struct TransferMeter {
    last: Mutex<Option<Observation>>,
}

#[derive(Debug, Clone, Copy)]
struct Observation {
    at: Instant,
    phase: Phase,
    done: u64,
    /// Smoothed units per second.
    rate: Option<f64>,
}

impl TransferMeter {
    /// Observations closer together than this keep the previous rate (two scrapes at once).
    const MIN_WINDOW: Duration = Duration::from_millis(200);

    /// The status at `s`, updating the rate.
    pub fn observe(&self, s: &Snapshot) -> TransferStatus {
        self.observe_at(s, Instant::now())
    }

    fn observe_at(&self, s: &Snapshot, now: Instant) -> TransferStatus {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let rate = match *last {
            Some(o) if o.phase == s.phase && now.duration_since(o.at) < Self::MIN_WINDOW => o.rate,
            Some(o) if o.phase == s.phase => {
                let window = now.duration_since(o.at).as_secs_f64();
                let current = s.done.saturating_sub(o.done) as f64 / window;
                Some(o.rate.map_or(current, |r| 0.5 * r + 0.5 * current))
            }
            // First sight of this phase: the average since the import started, for the single-pass phase.
            _ if s.phase == Phase::Import && s.elapsed > 0.0 => Some(s.done as f64 / s.elapsed),
            _ => None,
        };
        let fresh = last.is_none_or(|o| o.phase != s.phase || now.duration_since(o.at) >= Self::MIN_WINDOW);
        if fresh {
            *last = Some(Observation { at: now, phase: s.phase, done: s.done, rate });
        }
        drop(last);
        let remaining = s.total.map(|t| t.saturating_sub(s.done));
        let eta_seconds = match (remaining, rate) {
            (Some(0), _) => Some(0),
            (Some(r), Some(rate)) if rate > 0.0 => Some((r as f64 / rate).ceil() as u64),
            _ => None,
        };
        // qemu-img's conversion counts hundredths of a percent, not bytes.
        if s.phase == Phase::Convert {
            return TransferStatus {
                stage: Stage::Converting,
                done: 0,
                total: None,
                percent: s.percent(),
                bytes_per_second: None,
                eta_seconds,
            };
        }
        TransferStatus {
            stage: stage(s.phase),
            done: s.done,
            total: s.total,
            percent: s.percent(),
            bytes_per_second: rate,
            eta_seconds,
        }
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
        let detail = TransferStatus::parse(&m.render(), "uid-1").unwrap_or_else(|| panic!("no transfer detail"));
        assert_eq!((detail.stage, detail.percent), (Stage::Converting, Some(50.0)));
    }

    #[test]
    fn the_meter_measures_the_recent_rate_and_time_left() {
        let p = Progress::new();
        let meter = TransferMeter::default();
        let t0 = Instant::now();
        p.start_phase(Phase::Import, Some(1000));
        p.set_done(100);
        let first = meter.observe_at(&p.snapshot(), t0);
        assert_eq!((first.stage, first.done, first.total), (Stage::Transferring, 100, Some(1000)));
        p.set_done(300);
        let s = meter.observe_at(&p.snapshot(), t0 + Duration::from_secs(2));
        // 200 units in 2 s, smoothed with the first guess (the average since start, large here).
        let rate = s.bytes_per_second.unwrap_or_else(|| panic!("no rate"));
        assert!(rate >= 100.0, "{rate}");
        p.set_done(500);
        let s = meter.observe_at(&p.snapshot(), t0 + Duration::from_secs(4));
        let rate = s.bytes_per_second.unwrap_or_else(|| panic!("no rate"));
        assert!(rate >= 100.0 && s.eta_seconds.is_some_and(|e| e <= 5), "{s:?}");
        assert_eq!(TransferStatus::parse(&s.render("u"), "u").map(|d| d.message()), Some(s.message()));
        // A new phase starts its rate afresh.
        p.start_phase(Phase::Spool, None);
        let s = meter.observe_at(&p.snapshot(), t0 + Duration::from_secs(5));
        assert_eq!((s.stage, s.bytes_per_second, s.eta_seconds), (Stage::Downloading, None, None));
    }
}
