//! The error policy of every reconciler: an error says whether retrying can help ([`Retry`]); fatal errors
//! (an invalid object, a request the API server refuses as such) wait for the object to change instead of
//! looping, transient ones (API unavailable, conflicts, timeouts) are retried with a per-object exponential
//! backoff that a successful reconcile resets.
//!
//! Guarantees: no hot loop — the first retry comes after [`ErrorPolicy::BASE`], doubling up to
//! [`ErrorPolicy::MAX`]; a fatal error is logged once per reconcile and retried only on a change (or the
//! controller's periodic resync). Caveat: the attempt count lives in memory; a restarted controller starts
//! again at the base delay (state that matters lives in the API).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

/// Whether retrying a failed reconcile can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The cause may go away by itself: retry with backoff.
    Transient,
    /// Retrying cannot help until the object (or what it refers to) changes.
    Fatal,
}

/// Implemented by reconcile errors.
pub trait Classify {
    /// How this error is retried.
    fn retry(&self) -> Retry;
}

/// [`Retry`] of a kube error: API answers that mean "this request is wrong" (400, 403, 404 on create paths are
/// handled by the callers, 405, 415, 422) are fatal; everything else (5xx, 409, 429, transport) is transient.
pub fn retry_of(e: &kube::Error) -> Retry {
    match e {
        kube::Error::Api(s) if matches!(s.code, 400 | 403 | 405 | 415 | 422) => Retry::Fatal,
        _ => Retry::Transient,
    }
}

/// Per-object retry state of one controller.
pub struct ErrorPolicy {
    controller: &'static str,
    attempts: Mutex<HashMap<String, u32>>,
}

impl ErrorPolicy {
    /// Delay before the first retry of a transient error.
    pub const BASE: Duration = Duration::from_secs(5);
    /// Longest delay between retries.
    pub const MAX: Duration = Duration::from_secs(300);

    /// The policy of `controller` (its name appears in the logs).
    pub fn new(controller: &'static str) -> ErrorPolicy {
        ErrorPolicy { controller, attempts: Mutex::new(HashMap::new()) }
    }

    /// Delay before retry number `attempt` (1-based) of a transient error.
    pub fn delay(attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.saturating_sub(1)).unwrap_or(u32::MAX);
        Self::BASE.saturating_mul(factor).min(Self::MAX)
    }

    /// The object's UID (a VM and its VMI share a name), else its namespace and name.
    fn key<K: Resource>(obj: &K) -> String {
        obj.meta().uid.clone().unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
    }

    /// What to do after `err` reconciling `obj`.
    pub fn on_error<K: Resource, E: Classify + std::fmt::Display>(&self, obj: &K, err: &E) -> Action {
        let key = Self::key(obj);
        match err.retry() {
            Retry::Fatal => {
                tracing::warn!(controller = self.controller, object = %key, error = %err, "reconcile failed; waiting for a change");
                Action::await_change()
            }
            Retry::Transient => {
                let attempt = {
                    let mut m = self.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let n = m.entry(key.clone()).or_insert(0);
                    *n = n.saturating_add(1);
                    *n
                };
                let delay = Self::delay(attempt);
                tracing::warn!(controller = self.controller, object = %key, error = %err, attempt, ?delay, "reconcile failed; retrying");
                Action::requeue(delay)
            }
        }
    }

    /// Forgets the failures of `obj` after a successful reconcile.
    pub fn on_success<K: Resource>(&self, obj: &K) {
        let mut m = self.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !m.is_empty() {
            m.remove(&Self::key(obj));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[derive(Debug)]
    struct E(Retry);
    impl Classify for E {
        fn retry(&self) -> Retry {
            self.0
        }
    }
    impl std::fmt::Display for E {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{:?}", self.0)
        }
    }

    #[test]
    fn backoff_doubles_to_a_cap() {
        let d: Vec<u64> = (1..=9).map(|a| ErrorPolicy::delay(a).as_secs()).collect();
        assert_eq!(d, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(ErrorPolicy::delay(u32::MAX), ErrorPolicy::MAX);
    }

    #[test]
    fn transient_errors_back_off_fatal_ones_wait_and_success_resets() {
        let p = ErrorPolicy::new("test");
        let mut obj = ConfigMap::default();
        obj.metadata.name = Some("a".into());
        assert_eq!(p.on_error(&obj, &E(Retry::Transient)), Action::requeue(Duration::from_secs(5)));
        assert_eq!(p.on_error(&obj, &E(Retry::Transient)), Action::requeue(Duration::from_secs(10)));
        assert_eq!(p.on_error(&obj, &E(Retry::Fatal)), Action::await_change());
        p.on_success(&obj);
        assert_eq!(p.on_error(&obj, &E(Retry::Transient)), Action::requeue(Duration::from_secs(5)));
    }
}
