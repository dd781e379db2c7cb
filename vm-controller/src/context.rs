//! Shared state of the reconcilers: the API client, read caches of what they read, the pod settings, events,
//! metrics and the error policy; and the one reconcile wrapper they share ([`reconcile_retrying`]).

use controller_runtime::events::Events;
use controller_runtime::metrics::ReconcileMetrics;
use controller_runtime::policy::ErrorPolicy;
use crds::cdi::datavolume::DataVolume;
use crds::kubevirt::VirtualMachineInstance;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::runtime::reflector::Store;

use std::future::Future;

use controller_runtime::api::{Retried, is_conflict, retry_on_conflict};
use k8s_openapi::NamespaceResourceScope;
use kube::api::Api;
use kube::runtime::controller::Action as Requeue;
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::error::{Error, Result, kube};
use crate::vmi::pod::PodSettings;

/// How many times one reconcile starts over after a conflicting write.
pub const CONFLICT_RETRIES: usize = 4;

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
    /// Every VirtualMachineInstanceMigration.
    pub migrations: Store<crds::kubevirt::VirtualMachineInstanceMigration>,
    /// Every MigrationPolicy.
    pub migration_policies: Store<crds::kubevirt::migration_policy::MigrationPolicy>,
    /// The cluster's KubeVirt configuration objects.
    pub kubevirts: Store<crds::kubevirt::config::KubeVirt>,
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

impl Context {
    /// `spec.configuration.migrations` of the cluster's KubeVirt (empty: upstream's defaults apply), read from the
    /// cache at each use: changes apply without a restart.
    pub fn migration_configuration(&self) -> crds::kubevirt::config::MigrationConfiguration {
        let all = self.stores.kubevirts.state();
        crds::kubevirt::config::effective(all.iter().map(AsRef::as_ref))
            .map(crds::kubevirt::config::KubeVirt::migrations)
            .unwrap_or_default()
    }
}

impl Context {
    /// The live-update settings of the cluster's KubeVirt (upstream's defaults without one).
    pub fn live_settings(&self) -> crate::vm::live::Settings {
        let all = self.stores.kubevirts.state();
        crds::kubevirt::config::effective(all.iter().map(AsRef::as_ref)).map_or_else(Default::default, |kv| {
            crate::vm::live::Settings { live_update: kv.live_update(), cpu_allocation_ratio: kv.cpu_allocation_ratio() }
        })
    }

    /// Whether VMIs needing an update after a CPU or memory hotplug are live-migrated (`workloadUpdateMethods`).
    pub fn workload_updates_migrate(&self) -> bool {
        let all = self.stores.kubevirts.state();
        crds::kubevirt::config::effective(all.iter().map(AsRef::as_ref))
            .is_some_and(crds::kubevirt::config::KubeVirt::workload_updates_migrate)
    }
}

/// How long a reconcile waits for a cache its controller's own trigger stream fills before it steps back.
pub const CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether `store` (filled by a controller's own trigger stream) has listed, waiting at most [`CACHE_WAIT`]. A
/// reconcile that is not ready returns and is requeued rather than waiting on: a reconcile parked on a cache its
/// own controller must fill was seen to stall the controller after a leader hand-over.
pub async fn cache_ready<K>(store: &Store<K>, what: &str) -> bool
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    match tokio::time::timeout(CACHE_WAIT, store.wait_until_ready()).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            tracing::warn!(cache = what, error = %e, "cache writer gone");
            false
        }
        Err(_) => {
            tracing::info!(cache = what, "cache not listed yet; requeued");
            false
        }
    }
}

/// The label selector of every launcher pod and hotplug attachment pod.
pub fn launcher_pod_selector() -> String {
    use contracts::kubevirt::consts::label;
    format!("{} in ({},{})", label::KUBEVIRT, label::VIRT_LAUNCHER, label::HOTPLUG_DISK)
}

/// One reconcile of `obj` by `controller` (its metrics name), started over from a fresh copy of the object when
/// `attempt` fails with a conflict (at most [`CONFLICT_RETRIES`] attempts); the error policy forgets the object's
/// failures on success. `kind` names the object in errors.
pub async fn reconcile_retrying<K, Fut>(
    ctx: &Context,
    controller: &'static str,
    kind: &str,
    obj: &K,
    attempt: impl FnMut(K) -> Fut,
) -> Result<Requeue>
where
    K: Resource<Scope = NamespaceResourceScope> + Clone + DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
    Fut: Future<Output = Result<Requeue>>,
{
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api: Api<K> = Api::namespaced(ctx.client.clone(), &ns);
    let conflict = |e: &Error| matches!(e, Error::Kube { source, .. } if is_conflict(source));
    let r = ctx
        .metrics
        .measure(controller, async {
            match retry_on_conflict(&api, &name, obj.clone(), CONFLICT_RETRIES, conflict, attempt).await {
                Retried::Done(r) => r,
                Retried::Gone => Ok(Requeue::await_change()),
                Retried::ReadFailed(e) => Err(kube(format!("reading {kind} {ns}/{name}"))(e)),
                Retried::Exhausted => Err(Error::Conflict(format!("{kind} {ns}/{name}"))),
            }
        })
        .await;
    if r.is_ok() {
        ctx.policy.on_success(obj);
    }
    r
}
