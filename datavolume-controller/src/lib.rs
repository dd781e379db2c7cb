//! The DataVolume controller (`cdi.kubevirt.io/v1beta1`): DataVolume → PVC → worker pods (import, upload, clone)
//! → status, exactly as CDI reports it (`specs/cdi.md` §1, §2, §5).
//!
//! Two reconcilers run under one leader lease, like upstream's DataVolume and import/upload/clone controllers,
//! each shaped read → plan (pure) → apply → status:
//!
//! ```text
//! DataVolume ─[datavolume]─► PVC with a TransferRequest ─[transfer]─► worker pod (importer / upload / clone)
//!      ▲                          │  annotations (contracts::cdi)              │ termination message
//!      └── status ◄─ WorkerState ◄┴──────────────────────────────────────────────┘
//! ```
//!
//! * [`datavolume`] — DataVolume → PVC ([`datavolume::claim`]) and status ([`datavolume::status`]);
//! * [`transfer`] — PVC → worker pods ([`transfer::pods`]) and their state back into the PVC
//!   ([`transfer::plan`]);
//! * [`config_sync`] keeps the `config` CDIConfig and the StorageProfiles current; [`certs`] holds the upload
//!   PKI; [`progress`] scrapes a worker's progress; [`metrics`] computes upstream's cluster metrics (storage
//!   profiles, DataVolumes waiting for a default class, worker pods restarting often) from the caches.
//!
//! Every read comes from watch caches; the process plumbing (lease, caches, health server, error policy) is
//! `controller-runtime`'s.

#![deny(missing_docs)]

pub mod certs;
pub mod config_sync;
pub mod context;
pub mod datavolume;
pub mod error;
pub mod metrics;
pub mod progress;
pub mod transfer;

use std::future::Future;

use controller_runtime::events::Events;
use controller_runtime::metrics::{LateRegistry, ReconcileMetrics};
use controller_runtime::policy::ErrorPolicy;
use controller_runtime::store::{reflect, wait_ready};
use crds::cdi::config::{CDIConfig, StorageProfile};
use crds::cdi::datavolume::DataVolume;
use crds::cdi::operator::CDI;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use crate::context::{Context, Settings, Stores};

/// Maps a worker pod to the PVC it works for: its controller owner (a PVC), or for clone-source pods (in another
/// namespace) the target named by their annotation.
fn pod_to_pvc(pod: Pod) -> Option<ObjectRef<PersistentVolumeClaim>> {
    if let Some(target) = pod.annotations().get(transfer::pods::CLONE_TARGET_ANNOTATION) {
        let (ns, name) = target.split_once('/')?;
        return Some(ObjectRef::new(name).within(ns));
    }
    let owner =
        pod.owner_references().iter().find(|o| o.kind == "PersistentVolumeClaim" && o.controller == Some(true))?;
    Some(ObjectRef::new(&owner.name).within(&pod.namespace()?))
}

/// How long the start waits for the CDI objects' cache (see [`run_controllers`]).
const CDI_CACHE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Runs both reconcilers until `shutdown` resolves (graceful: in-flight reconciles finish). `instance` names this
/// replica in events; the cluster metrics ([`metrics`]) are added to `late` once the caches are ready.
pub async fn run_controllers(
    client: Client,
    settings: Settings,
    metrics: ReconcileMetrics,
    late: LateRegistry,
    instance: Option<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let pki = certs::ensure(client.clone(), &settings.namespace).await?;

    // Plain caches for reads; each controller runs its own watches for triggers (shared streams dropped
    // events under load in kube-runtime 5's unstable subscribe API, so they are not used).
    let pod_selector = context::worker_pod_selector();
    let all = watcher::Config::default;
    let stores = Stores {
        pvcs: reflect(Api::<PersistentVolumeClaim>::all(client.clone()), all()),
        pods: reflect(Api::<Pod>::all(client.clone()), all().labels(&pod_selector)),
        classes: reflect(Api::<StorageClass>::all(client.clone()), all()),
        profiles: reflect(Api::<StorageProfile>::all(client.clone()), all()),
        configs: reflect(Api::<CDIConfig>::all(client.clone()), all()),
        cdis: reflect(Api::<CDI>::all(client.clone()), all()),
    };
    wait_ready(&stores.pvcs, "PVCs").await?;
    wait_ready(&stores.pods, "pods").await?;
    wait_ready(&stores.classes, "storage classes").await?;
    wait_ready(&stores.profiles, "storage profiles").await?;
    wait_ready(&stores.configs, "CDI configs").await?;
    // The CDI CRD comes with every installation, but a controller applied without it still runs (its worker pods
    // get no placement): its cache is waited for only so long.
    if tokio::time::timeout(CDI_CACHE_WAIT, wait_ready(&stores.cdis, "CDI objects")).await.is_err() {
        tracing::warn!(
            "the CDI objects are not listable (is the CDI CRD installed?); worker pods get no spec.workloads"
        );
    }
    let ctx = std::sync::Arc::new(Context {
        client: client.clone(),
        settings,
        stores: stores.clone(),
        events: Events::new(client.clone(), "datavolume-controller", instance),
        scraper: progress::client()?,
        pki,
        metrics,
        dv_policy: ErrorPolicy::new(datavolume::CONTROLLER),
        transfer_policy: ErrorPolicy::new(transfer::CONTROLLER),
    });

    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stop = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    let config_task = tokio::spawn(config_sync::run(ctx.clone(), stop(&stop_tx)));
    let dv_controller = Controller::new(Api::<DataVolume>::all(client.clone()), all())
        .owns(Api::<PersistentVolumeClaim>::all(client.clone()), all());
    late.add(metrics::registry(
        stores.profiles.clone(),
        stores.classes.clone(),
        dv_controller.store(),
        stores.pods.clone(),
    ));
    let dvs = dv_controller
        .graceful_shutdown_on(stop(&stop_tx))
        .run(datavolume::reconcile, datavolume::error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let workers = Controller::new(Api::<PersistentVolumeClaim>::all(client.clone()), all())
        .watches(Api::<Pod>::all(client.clone()), all().labels(&pod_selector), pod_to_pvc)
        .graceful_shutdown_on(stop(&stop_tx))
        .run(transfer::reconcile, transfer::error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    tracing::info!("controllers running");
    let stopper = async move {
        shutdown.await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(());
    };
    tokio::join!(dvs, workers, stopper);
    let _ = config_task.await;
    Ok(())
}
