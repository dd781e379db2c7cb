//! The DataVolume reconciler: DataVolume → PVC and status (upstream's DataVolume controller). Worker pods are the
//! transfer reconciler's job ([`crate::transfer`]); it reports through the PVC's annotations.
//!
//! ```text
//! read (DV, its PVC, a clone source, storage facts — from the caches)
//!   ─► plan (pure): ClaimPlan::{Create(claim::render), Use, Refuse}
//!   ─► apply: create the PVC
//!   ─► status: observe (WaitForFirstConsumer, scrape the worker's progress) ─► status::compute (pure)
//!      ─► patch the status, record its events ─► requeue_after(phase)
//! ```

pub mod claim;
pub mod status;

use std::sync::Arc;
use std::time::Duration;

use contracts::cdi::{ClaimOptions, TransferRequest, WorkerPhase, WorkerState};
use controller_runtime::api::is_not_found;
use crds::cdi::datavolume::{DataVolume, DataVolumePhase};
use crds::cdi::naming;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::context::Context;
use crate::error::{Error, Result, kube};
use crate::transfer::pods::owner_uid;
use claim::StorageFacts;
use status::Observed;

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "datavolume";

/// Requeue interval while a transfer runs (CDI's 2 s progress cadence).
const PROGRESS_REQUEUE: Duration = Duration::from_secs(2);
/// Resync interval while waiting for the claim or a worker pod.
const PENDING_REQUEUE: Duration = Duration::from_secs(5);
/// Resync interval of finished DataVolumes.
const RESYNC: Duration = Duration::from_secs(300);

/// What to do about the DataVolume's PVC.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimPlan {
    /// The DataVolume is being deleted: nothing to do (garbage collection removes the PVC).
    Ignore,
    /// No PVC yet: create this one.
    Create(Box<PersistentVolumeClaim>),
    /// The PVC exists and is ours.
    Use(Box<PersistentVolumeClaim>),
    /// No PVC can be used: the reason becomes the Ready condition's `ErrClaimNotValid` message.
    Refuse(String),
}

/// Pure: what to do about `dv`'s PVC, given the cached one (`existing`) and the storage facts.
pub fn plan_claim(dv: &DataVolume, existing: Option<&PersistentVolumeClaim>, facts: &StorageFacts) -> ClaimPlan {
    if dv.meta().deletion_timestamp.is_some() {
        return ClaimPlan::Ignore;
    }
    match existing {
        Some(p) if p.owner_references().iter().any(|o| Some(&o.uid) == dv.uid().as_ref()) => {
            ClaimPlan::Use(Box::new(p.clone()))
        }
        Some(_) => {
            ClaimPlan::Refuse(format!("Resource {} already exists and is not managed by DataVolume", dv.name_any()))
        }
        None => match claim::render(dv, facts) {
            Ok(want) => ClaimPlan::Create(Box::new(want)),
            Err(e) => ClaimPlan::Refuse(e.to_string()),
        },
    }
}

/// Pure: when to look at a DataVolume in `phase` again without an event.
pub fn requeue_after(phase: Option<DataVolumePhase>) -> Duration {
    match phase {
        Some(DataVolumePhase::ImportInProgress | DataVolumePhase::CloneInProgress | DataVolumePhase::UploadReady) => {
            PROGRESS_REQUEUE
        }
        Some(DataVolumePhase::Succeeded | DataVolumePhase::Failed) => RESYNC,
        // Waiting on the PVC or a worker: watch events drive this, a short resync bounds any missed event.
        _ => PENDING_REQUEUE,
    }
}

/// Reconciles one DataVolume.
pub async fn reconcile(dv: Arc<DataVolume>, ctx: Arc<Context>) -> Result<Action> {
    let r = ctx.metrics.measure(CONTROLLER, reconcile_inner(&dv, &ctx)).await;
    if r.is_ok() {
        ctx.dv_policy.on_success(dv.as_ref());
    }
    r
}

/// The error policy: fatal errors wait for a change, transient ones back off.
pub fn error_policy(dv: Arc<DataVolume>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.dv_policy.on_error(dv.as_ref(), err)
}

/// The storage facts for `dv` (its class, profile, overhead; a clone's source size), from the caches.
fn storage_facts(dv: &DataVolume, ctx: &Context) -> StorageFacts {
    let ns = dv.namespace().unwrap_or_default();
    let clone_src = dv.spec.source.as_ref().and_then(|s| s.pvc.as_ref()).and_then(|p| {
        let sns = if p.namespace.is_empty() { ns.clone() } else { p.namespace.clone() };
        ctx.stores.pvcs.get(&ObjectRef::new(&p.name).within(&sns))
    });
    ctx.storage_facts(dv.storage_class_name(), clone_src.as_deref())
}

async fn reconcile_inner(dv: &DataVolume, ctx: &Context) -> Result<Action> {
    let ns = dv.namespace().unwrap_or_default();
    let name = dv.name_any();
    // read
    let existing = ctx.stores.pvcs.get(&ObjectRef::new(&name).within(&ns));
    let facts = if existing.is_none() { storage_facts(dv, ctx) } else { StorageFacts::default() };
    // plan + apply
    let (pvc, claim_error) = match plan_claim(dv, existing.as_deref(), &facts) {
        ClaimPlan::Ignore => return Ok(Action::await_change()),
        ClaimPlan::Use(p) => (Some(*p), None),
        ClaimPlan::Refuse(why) => (None, Some(why)),
        ClaimPlan::Create(want) => match create_claim(ctx, dv, &want).await? {
            // A PVC of that name may have appeared since the cache was read: classify what is there now.
            Some(found) => match plan_claim(dv, Some(&found), &facts) {
                ClaimPlan::Refuse(why) => (None, Some(why)),
                _ => (Some(found), None),
            },
            None => (None, None),
        },
    };
    let mut obs = Observed { claim_error, ..Observed::default() };
    // status
    if let Some(p) = &pvc {
        observe(ctx, p, &mut obs).await;
    }
    let now = Time(Timestamp::now());
    let (next, events) = status::compute(dv, pvc.as_ref(), &obs, &now);
    if dv.status.as_ref() != Some(&next) {
        let dvs: Api<DataVolume> = Api::namespaced(ctx.client.clone(), &ns);
        let patch = serde_json::json!({ "status": next });
        match dvs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => return Ok(Action::await_change()),
            Err(e) => return Err(kube(format!("updating status of DataVolume {ns}/{name}"))(e)),
        }
        for ev in &events {
            ctx.events.publish(dv, ev.type_, &ev.reason, &ev.message).await;
        }
    }
    Ok(Action::requeue(requeue_after(next.phase)))
}

/// Creates the PVC; when one of that name exists already, reads it. `None`: it vanished meanwhile.
async fn create_claim(
    ctx: &Context,
    dv: &DataVolume,
    want: &PersistentVolumeClaim,
) -> Result<Option<PersistentVolumeClaim>> {
    let ns = dv.namespace().unwrap_or_default();
    let name = dv.name_any();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    match controller_runtime::api::create_if_absent(&pvcs, want).await {
        Ok(Some(created)) => Ok(Some(created)),
        Ok(None) => pvcs.get_opt(&name).await.map_err(kube(format!("reading PVC {ns}/{name}"))),
        Err(e) => Err(kube(format!("creating PVC {ns}/{name}"))(e)),
    }
}

/// What the status needs beyond the PVC: whether its class waits for a consumer, and the running worker's progress.
async fn observe(ctx: &Context, pvc: &PersistentVolumeClaim, obs: &mut Observed) {
    let class = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone());
    let a = pvc.annotations();
    obs.wffc = ctx.is_wffc(class.as_deref()) && !ClaimOptions::of(a).bind_immediate;
    if WorkerState::of(a).phase == Some(WorkerPhase::Running)
        && let Some(pod) = worker_pod(ctx, pvc)
        && let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone())
    {
        let scraped = crate::progress::scrape(&ctx.scraper, &ip, crds::cdi::consts::WORKER_PORT, &owner_uid(pvc)).await;
        obs.progress = scraped.percent;
        obs.transfer = scraped.transfer;
    }
}

/// The worker pod whose progress the DV shows.
fn worker_pod(ctx: &Context, pvc: &PersistentVolumeClaim) -> Option<Arc<Pod>> {
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let pod_name = match TransferRequest::of(pvc.annotations())? {
        TransferRequest::Upload => naming::upload_server(&name),
        TransferRequest::Import(_) | TransferRequest::Clone { .. } => naming::importer_pod(&name),
    };
    ctx.stores.pods.get(&ObjectRef::new(&pod_name).within(&ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::cdi::datavolume::{DataVolumeSource, DataVolumeSpec, StorageSpec};
    use k8s_openapi::api::core::v1::VolumeResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn dv(size: Option<&str>) -> DataVolume {
        let mut d = DataVolume::new(
            "disk",
            DataVolumeSpec {
                source: Some(DataVolumeSource { blank: Some(Default::default()), ..Default::default() }),
                storage: Some(StorageSpec {
                    resources: size.map(|s| VolumeResourceRequirements {
                        requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(s.to_owned()))])),
                        limits: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        d.metadata.namespace = Some("ns".into());
        d.metadata.uid = Some("dv-uid".into());
        d
    }

    fn pvc_owned_by(uid: &str) -> PersistentVolumeClaim {
        let mut p = PersistentVolumeClaim::default();
        p.metadata.name = Some("disk".into());
        p.metadata.owner_references =
            Some(vec![OwnerReference { uid: uid.into(), kind: "DataVolume".into(), ..Default::default() }]);
        p
    }

    #[test]
    fn claim_plan_table() {
        let facts = StorageFacts { class: Some("local".into()), overhead: 0.0, ..Default::default() };
        let mut deleting = dv(Some("1Gi"));
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let ours = pvc_owned_by("dv-uid");
        let foreign = pvc_owned_by("other");
        let kind = |p: &ClaimPlan| match p {
            ClaimPlan::Ignore => "ignore".to_owned(),
            ClaimPlan::Create(c) => format!("create {}", c.name_any()),
            ClaimPlan::Use(c) => format!("use {}", c.name_any()),
            ClaimPlan::Refuse(why) => format!("refuse: {why}"),
        };
        for (what, d, existing, want) in [
            ("deleting", &deleting, None, "ignore"),
            ("new", &dv(Some("1Gi")), None, "create disk"),
            ("ours", &dv(Some("1Gi")), Some(&ours), "use disk"),
            (
                "foreign",
                &dv(Some("1Gi")),
                Some(&foreign),
                "refuse: Resource disk already exists and is not managed by DataVolume",
            ),
            (
                "no size",
                &dv(None),
                None,
                "refuse: DataVolume.storage spec is missing the storage size and it cannot be inferred",
            ),
        ] {
            assert_eq!(kind(&plan_claim(d, existing, &facts)), want, "{what}");
        }
    }

    #[test]
    fn requeue_follows_the_phase() {
        use DataVolumePhase as P;
        for (phase, secs) in [
            (Some(P::ImportInProgress), 2),
            (Some(P::CloneInProgress), 2),
            (Some(P::UploadReady), 2),
            (Some(P::Succeeded), 300),
            (Some(P::Failed), 300),
            (Some(P::ImportScheduled), 5),
            (Some(P::WaitForFirstConsumer), 5),
            (None, 5),
        ] {
            assert_eq!(requeue_after(phase).as_secs(), secs, "{phase:?}");
        }
    }
}
