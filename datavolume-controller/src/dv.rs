//! The DataVolume reconciler: read (DV, PVC, worker pod from caches) → plan (render the PVC, compute the status)
//! → apply (create the PVC, patch the status, record events). Worker pods are the worker reconciler's job.

use std::sync::Arc;
use std::time::Duration;

use crds::cdi::consts::ann;
use crds::cdi::datavolume::{DataVolume, DataVolumePhase};
use crds::cdi::naming;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::claim;
use crate::context::Context;
use crate::error::{self, Error, Result};
use crate::status::{self, Observed};
use crate::worker::{Work, owner_uid};

/// Requeue interval while a transfer runs (CDI's 2 s progress cadence).
const PROGRESS_REQUEUE: Duration = Duration::from_secs(2);
/// Resync interval while waiting for the claim or a worker pod.
const PENDING_REQUEUE: Duration = Duration::from_secs(5);
/// Resync interval of finished DataVolumes.
const RESYNC: Duration = Duration::from_secs(300);

/// The worker pod whose progress the DV shows, if running.
fn worker_pod(ctx: &Context, pvc: &PersistentVolumeClaim) -> Option<Arc<Pod>> {
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let pod_name = match Work::of(pvc)? {
        Work::Upload => naming::upload_server(&name),
        Work::Import | Work::Clone { .. } => naming::importer_pod(&name),
    };
    ctx.stores.pods.get(&ObjectRef::new(&pod_name).within(&ns))
}

/// Reconciles one DataVolume.
pub async fn reconcile(dv: Arc<DataVolume>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let r = reconcile_inner(&dv, &ctx).await;
    ctx.metrics.observe("datavolume", started.elapsed().as_secs_f64(), r.is_ok());
    r
}

async fn reconcile_inner(dv: &DataVolume, ctx: &Context) -> Result<Action> {
    if dv.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let ns = dv.namespace().unwrap_or_default();
    let name = dv.name_any();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let mut obs = Observed::default();

    // read
    let mut pvc = ctx.stores.pvcs.get(&ObjectRef::new(&name).within(&ns)).map(|p| (*p).clone());
    if pvc.is_none() {
        // plan + apply: the PVC
        let clone_src = dv.spec.source.as_ref().and_then(|s| s.pvc.as_ref()).and_then(|p| {
            let sns = if p.namespace.is_empty() { ns.clone() } else { p.namespace.clone() };
            ctx.stores.pvcs.get(&ObjectRef::new(&p.name).within(&sns))
        });
        let explicit = dv
            .spec
            .storage
            .as_ref()
            .and_then(|s| s.storage_class_name.clone())
            .or_else(|| dv.spec.pvc.as_ref().and_then(|p| p.storage_class_name.clone()));
        let facts = ctx.storage_facts(explicit.as_deref(), clone_src.as_deref());
        match claim::render(dv, &facts) {
            Ok(want) => match pvcs.create(&PostParams::default(), &want).await {
                Ok(created) => pvc = Some(created),
                Err(e) if error::is_conflict(&e) => {
                    pvc = pvcs.get_opt(&name).await.map_err(error::kube(format!("reading PVC {ns}/{name}")))?;
                }
                Err(e) => return Err(error::kube(format!("creating PVC {ns}/{name}"))(e)),
            },
            Err(e) => obs.claim_error = Some(e.to_string()),
        }
    }
    if let Some(p) = &pvc {
        let ours = p.owner_references().iter().any(|o| Some(&o.uid) == dv.uid().as_ref());
        if !ours {
            obs.claim_error = Some(format!("Resource {name} already exists and is not managed by DataVolume"));
            pvc = None;
        }
    }

    // observe
    if let Some(p) = &pvc {
        let class = p.spec.as_ref().and_then(|s| s.storage_class_name.clone());
        obs.wffc = ctx.is_wffc(class.as_deref()) && !p.annotations().contains_key(ann::BIND_IMMEDIATE);
        let running = p.annotations().get(ann::POD_PHASE).is_some_and(|v| v == "Running");
        if running
            && let Some(pod) = worker_pod(ctx, p)
            && let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone())
        {
            obs.progress = crate::progress::scrape(&ctx.scraper, &ip, crds::cdi::consts::WORKER_PORT, &owner_uid(p)).await;
        }
    }

    // plan: status
    let now = Time(Timestamp::now());
    let (next, events) = status::compute(dv, pvc.as_ref(), &obs, &now);

    // apply
    if dv.status.as_ref() != Some(&next) {
        let dvs: Api<DataVolume> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = serde_json::json!({ "status": next });
        match dvs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(e) if error::is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(error::kube(format!("updating status of DataVolume {ns}/{name}"))(e)),
        }
        for ev in &events {
            ctx.publish(dv, ev).await;
        }
    }
    Ok(Action::requeue(match next.phase {
        Some(DataVolumePhase::ImportInProgress | DataVolumePhase::CloneInProgress | DataVolumePhase::UploadReady) => {
            PROGRESS_REQUEUE
        }
        Some(DataVolumePhase::Succeeded | DataVolumePhase::Failed) => RESYNC,
        // Waiting on the PVC or a worker: watch events drive this, a short resync bounds any missed event.
        _ => PENDING_REQUEUE,
    }))
}

/// Retry policy: back off 5 s on errors.
pub fn error_policy(_dv: Arc<DataVolume>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "datavolume reconcile failed");
    Action::requeue(Duration::from_secs(5))
}
