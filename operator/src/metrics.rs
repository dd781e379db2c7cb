//! Upstream cdi-operator's `kubevirt_cdi_cr_ready`, computed from the leading operator's CDI cache at every
//! scrape: 1 while the installation's `CDI` object is `Available=True` (and not being deleted), else 0.

use std::sync::Arc;

use controller_runtime::metrics::{Computed, Registry};
use crds::cdi::CDI;
use crds::kubevirt::vmi::ConditionStatus;
use kube::runtime::reflector::Store;

/// Upstream's name.
pub const CDI_CR_READY: &str = "kubevirt_cdi_cr_ready";

/// The gauge for the cached `cdis` (pure).
pub fn cdi_cr_ready(cdis: &[Arc<CDI>]) -> Computed {
    let ready = cdis.iter().any(|c| {
        c.metadata.deletion_timestamp.is_none()
            && c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Available" && c.status == ConditionStatus::True))
    });
    let mut g = Computed::gauge(CDI_CR_READY, "CDI install ready");
    g.add(Vec::new(), if ready { 1.0 } else { 0.0 });
    g
}

/// A registry with [`CDI_CR_READY`] over `cdis`.
pub fn registry(cdis: Store<CDI>) -> Registry {
    Registry::computed(move || vec![cdi_cr_ready(&cdis.state())])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cdi(available: &str, deleting: bool) -> Arc<CDI> {
        let mut v = serde_json::json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI",
            "metadata": {"name": "cdi"}, "spec": {},
            "status": {"phase": "Deployed", "conditions": [{"type": "Available", "status": available}]}});
        if deleting {
            v["metadata"]["deletionTimestamp"] = serde_json::json!("2026-01-01T00:00:00Z");
        }
        Arc::new(serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}")))
    }

    #[test]
    fn ready_only_while_an_installation_is_available() {
        let v = |cdis: &[Arc<CDI>]| cdi_cr_ready(cdis).value(&[]);
        assert_eq!(v(&[cdi("True", false)]), Some(1.0));
        assert_eq!(v(&[cdi("False", false)]), Some(0.0));
        assert_eq!(v(&[cdi("True", true)]), Some(0.0), "being deleted");
        assert_eq!(v(&[]), Some(0.0), "no CDI object");
        let text = {
            let (store, mut w) = kube::runtime::reflector::store();
            w.apply_watcher_event(&kube::runtime::watcher::Event::Apply(cdi("True", false).as_ref().clone()));
            registry(store).render()
        };
        assert!(text.contains("\nkubevirt_cdi_cr_ready 1\n"), "{text}");
    }
}
