//! The DataVolume controller (`cdi.kubevirt.io/v1beta1`): DataVolume → PVC → worker pods (import, upload, clone)
//! → status, exactly as CDI reports it (`specs/cdi.md` §1, §2, §5).
//!
//! Two reconcilers run under one leader lease: [`dv`] (DataVolume → PVC and status) and [`workers`] (PVC
//! annotations → worker pods → PVC annotations), like upstream's DataVolume and import/upload/clone controllers.
//! Every read comes from watch caches; every decision is a pure function ([`claim`], [`worker`], [`status`],
//! [`workers::observe_pod`]) and the reconcilers only apply it.

pub mod certs;
pub mod claim;
pub mod config_sync;
pub mod context;
pub mod dv;
pub mod error;
pub mod metrics;
pub mod progress;
pub mod quantity;
pub mod server;
pub mod status;
pub mod worker;
pub mod workers;

use std::future::Future;
use std::sync::Arc;

use crds::cdi::config::{CDIConfig, StorageProfile};
use crds::cdi::datavolume::DataVolume;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

use crate::context::{Context, Settings, Stores};

/// Starts a plain reflector for `K` and returns its store (the task runs until the process ends).
fn plain_store<K>(api: Api<K>) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    plain_store_with(api, watcher::Config::default())
}

/// [`plain_store`] with a watch configuration (label selector).
fn plain_store_with<K>(api: Api<K>, wc: watcher::Config) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, wc)).default_backoff().touched_objects();
    tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    reader
}

/// Maps a worker pod to the PVC it works for: its controller owner (a PVC), or for clone-source pods (in another
/// namespace) the target named by their annotation.
fn pod_to_pvc(pod: Pod) -> Option<ObjectRef<PersistentVolumeClaim>> {
    if let Some(target) = pod.annotations().get(worker::CLONE_TARGET_ANNOTATION) {
        let (ns, name) = target.split_once('/')?;
        return Some(ObjectRef::new(name).within(ns));
    }
    let owner =
        pod.owner_references().iter().find(|o| o.kind == "PersistentVolumeClaim" && o.controller == Some(true))?;
    Some(ObjectRef::new(&owner.name).within(&pod.namespace()?))
}

/// Runs both reconcilers until `shutdown` resolves (graceful: in-flight reconciles finish).
pub async fn run_controllers(
    client: Client,
    settings: Settings,
    metrics: Arc<metrics::Metrics>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let pki = certs::ensure(client.clone(), &settings.namespace).await?;

    // Plain caches for reads; each controller runs its own watches for triggers (shared streams dropped
    // events under load in kube-runtime 5's unstable subscribe API, so they are not used).
    let pod_selector = context::worker_pod_selector();
    let stores = Stores {
        pvcs: plain_store(Api::<PersistentVolumeClaim>::all(client.clone())),
        pods: plain_store_with(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(&pod_selector)),
        classes: plain_store(Api::<StorageClass>::all(client.clone())),
        profiles: plain_store(Api::<StorageProfile>::all(client.clone())),
        configs: plain_store(Api::<CDIConfig>::all(client.clone())),
    };
    for (what, ready) in [
        ("PVCs", stores.pvcs.wait_until_ready().await),
        ("pods", stores.pods.wait_until_ready().await),
        ("storage classes", stores.classes.wait_until_ready().await),
        ("storage profiles", stores.profiles.wait_until_ready().await),
        ("CDI configs", stores.configs.wait_until_ready().await),
    ] {
        ready.map_err(|e| anyhow::anyhow!("{what} cache: {e}"))?;
    }
    let reporter = Reporter { controller: "datavolume-controller".into(), instance: std::env::var("POD_NAME").ok() };
    let ctx = Arc::new(Context {
        client: client.clone(),
        settings,
        stores: stores.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        scraper: progress::client()?,
        pki,
        metrics,
    });

    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stop = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    let config_task = tokio::spawn(config_sync::run(ctx.clone(), stop(&stop_tx)));
    let dvs = Controller::new(Api::<DataVolume>::all(client.clone()), watcher::Config::default())
        .owns(Api::<PersistentVolumeClaim>::all(client.clone()), watcher::Config::default())
        .graceful_shutdown_on(stop(&stop_tx))
        .run(dv::reconcile, dv::error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let workers = Controller::new(Api::<PersistentVolumeClaim>::all(client.clone()), watcher::Config::default())
        .watches(Api::<Pod>::all(client.clone()), watcher::Config::default().labels(&pod_selector), pod_to_pvc)
        .graceful_shutdown_on(stop(&stop_tx))
        .run(workers::reconcile, workers::error_policy, ctx.clone())
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
