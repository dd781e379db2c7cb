//! The runtime every binary of this project shares ([`binary`]: logging, signals, the runtime; [`tls`]: the TLS
//! servers) and, with the default `kube` feature, what every controller shares, so the next controller is written
//! the same way:
//!
//! ```text
//! main.rs: binary::init_logging ─► metrics::Registry + health::serve (/metrics /healthz /readyz)
//!          ─► leader::run_as_leader (Lease; ends on SIGTERM or when the lease is lost)
//!               └─► store::reflect (watch caches) ─► kube Controller::run(reconcile, policy::ErrorPolicy)
//! reconcile: read (caches) ─► plan (pure) ─► apply (api helpers, events::Events) ─► status
//! ```
//!
//! * [`binary`] — logging, the multi-threaded runtime with `error: …` / exit 1, SIGTERM/SIGINT, pod identity;
//! * [`tls`] — PEM loading, rustls configurations, self-signed certificates, the one TLS accept loop (workers,
//!   proxies, webhooks);
//! * [`limits`] — running a tool on hostile input under resource limits (the importer's and the launcher's
//!   `qemu-img`), and what stopped a run;
//! * [`api`] — not-found / conflict helpers for idempotent create and delete;
//! * [`store`] — watch caches (reflector stores) and waiting for their first sync;
//! * [`health`] — the `/metrics`, `/healthz`, `/readyz` endpoint;
//! * [`metrics`] — reconcile counters and durations per controller, an API-request counter;
//! * [`leader`] — leader election on a `coordination.k8s.io` Lease;
//! * [`events`] — best-effort Kubernetes events;
//! * [`oserr`] — OS errors in Go's words;
//! * [`policy`] — the error policy: fatal errors wait for a change, transient ones back off exponentially.

#![deny(missing_docs)]

pub mod binary;
pub mod limits;
pub mod oserr;
pub mod tls;

#[cfg(feature = "kube")]
pub mod aggregated;
#[cfg(feature = "kube")]
pub mod api;
#[cfg(feature = "kube")]
pub mod events;
#[cfg(feature = "kube")]
pub mod health;
#[cfg(feature = "kube")]
pub mod leader;
#[cfg(feature = "kube")]
pub mod metrics;
#[cfg(feature = "kube")]
pub mod policy;
#[cfg(feature = "kube")]
pub mod store;
#[cfg(feature = "kube")]
pub mod ws;
