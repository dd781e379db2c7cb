//! Kubernetes events, best effort: a failed event never fails a reconcile.

use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// Records events as one reporting controller.
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

/// Longest event note sent (Kubernetes caps notes at 1 KiB).
const MAX_NOTE: usize = 1000;

impl Events {
    /// Events reported by `controller` (and `instance`, usually the pod name).
    pub fn new(client: kube::Client, controller: &str, instance: Option<String>) -> Events {
        Events { recorder: Recorder::new(client, Reporter { controller: controller.into(), instance }) }
    }

    /// Records `reason`/`message` on `obj`; failures are logged.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        severity: Severity,
        reason: &str,
        message: &str,
    ) {
        let event = Event {
            type_: match severity {
                Severity::Normal => EventType::Normal,
                Severity::Warning => EventType::Warning,
            },
            reason: reason.to_owned(),
            note: Some(message.chars().take(MAX_NOTE).collect()),
            action: reason.to_owned(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &obj.object_ref(&())).await {
            tracing::warn!(error = %e, %reason, "recording event failed");
        }
    }
}
