//! Shared state of the reconciler: the API client, read caches of what it reads, the pod settings, events,
//! metrics and the error policy.

use controller_runtime::events::Events;
use controller_runtime::metrics::ReconcileMetrics;
use controller_runtime::policy::ErrorPolicy;
use crds::cdi::datavolume::DataVolume;
use crds::kubevirt::VirtualMachineInstance;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::runtime::reflector::Store;

use crate::vmi::pod::PodSettings;

/// Read caches, kept current by watches.
#[derive(Clone)]
pub struct Stores {
    /// Launcher pods (label `kubevirt.io=virt-launcher`).
    pub pods: Store<Pod>,
    /// Every PVC.
    pub pvcs: Store<PersistentVolumeClaim>,
    /// Every DataVolume.
    pub data_volumes: Store<DataVolume>,
    /// Every VMI (fed by the VM controller's own VMI watch).
    pub vmis: Store<VirtualMachineInstance>,
}

/// Everything a reconcile needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// How launcher pods are rendered.
    pub settings: PodSettings,
    /// Read caches.
    pub stores: Stores,
    /// Events on VMIs and VMs.
    pub events: Events,
    /// Reconcile metrics.
    pub metrics: ReconcileMetrics,
    /// Retry state.
    pub policy: ErrorPolicy,
}

/// The label selector of every launcher pod.
pub fn launcher_pod_selector() -> String {
    use contracts::kubevirt::consts::label;
    format!("{}={}", label::KUBEVIRT, label::VIRT_LAUNCHER)
}
