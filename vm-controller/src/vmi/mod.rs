//! The VMI reconciler:
//!
//! ```text
//! read (VMI, its launcher pods, the claims of its volumes — from the caches)
//!   ─► plan::plan (pure: Observed → Plan { actions, requeue })
//!   ─► apply (create / delete pods, replace the VMI's metadata and status, events)
//! ```
//!
//! The VMI has no status subresource: its status is written by replacing the object with the resourceVersion
//! that was read, so a concurrent write (the node agent's) makes the update fail with 409 and the reconcile starts
//! over from the fresh object, within the same reconcile, a few times.
//!
//! The pod is rendered by [`pod`]; what a pod's status means by [`status`]; the decisions are in [`plan`].

pub mod plan;
pub mod pod;
pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;

use controller_runtime::api::delete_if_present;
use crds::cdi::datavolume::{ConditionStatus as DvStatus, ConditionType as DvCondition, DataVolume, DataVolumePhase};
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{ConditionStatus, VirtualMachineInstancePhase as Phase};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::ObjectRef;

use crate::context::{Context, reconcile_retrying};
use crate::error::{Error, Result, kube};
use plan::{Action, Observed, VolumeClaim};
use pod::{Claim, ClaimMode};

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "vmi";

/// Reconciles one VMI.
pub async fn reconcile(vmi: Arc<VirtualMachineInstance>, ctx: Arc<Context>) -> Result<Requeue> {
    let ctx = ctx.as_ref();
    reconcile_retrying(ctx, CONTROLLER, "VMI", vmi.as_ref(), |o: VirtualMachineInstance| async move {
        reconcile_once(&o, ctx).await
    })
    .await
}

/// The error policy: fatal errors wait for a change, transient ones back off.
pub fn error_policy(vmi: Arc<VirtualMachineInstance>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.policy.on_error(vmi.as_ref(), err)
}

fn vmis(ctx: &Context, ns: &str) -> Api<VirtualMachineInstance> {
    Api::namespaced(ctx.client.clone(), ns)
}

/// The launcher pods of `vmi` from the cache, oldest first.
fn cached_pods(ctx: &Context, vmi: &VirtualMachineInstance) -> Vec<Pod> {
    let uid = vmi.uid().unwrap_or_default();
    let ns = vmi.namespace();
    let mut pods: Vec<Pod> = ctx
        .stores
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace() == ns && p.labels().get(contracts::kubevirt::consts::label::CREATED_BY) == Some(&uid))
        .map(|p| p.as_ref().clone())
        .collect();
    pods.sort_by(|a, b| a.creation_timestamp().cmp(&b.creation_timestamp()).then(a.name_any().cmp(&b.name_any())));
    pods
}

/// The launcher pods of `vmi` as the API server has them (the cache may not show a pod created a moment ago).
async fn live_pods(ctx: &Context, vmi: &VirtualMachineInstance) -> Result<Vec<Pod>> {
    let ns = vmi.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = pod::pods_selector(&vmi.uid().unwrap_or_default());
    let mut pods = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(kube(format!("listing pods of VMI {ns}/{}", vmi.name_any())))?
        .items;
    pods.sort_by(|a, b| a.creation_timestamp().cmp(&b.creation_timestamp()).then(a.name_any().cmp(&b.name_any())));
    Ok(pods)
}

fn claim_of(pvc: &PersistentVolumeClaim, read_only: bool) -> Claim {
    let block = pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block");
    Claim { name: pvc.name_any(), mode: if block { ClaimMode::Block } else { ClaimMode::Filesystem }, read_only }
}

fn data_volume_ready(dv: &DataVolume) -> ConditionStatus {
    let status = dv.status.as_ref();
    if status.and_then(|s| s.phase) == Some(DataVolumePhase::Succeeded) {
        return ConditionStatus::True;
    }
    let ready =
        status.and_then(|s| s.conditions.as_ref()).and_then(|c| c.iter().find(|c| c.type_ == DvCondition::Ready));
    match ready.map(|c| c.status) {
        Some(DvStatus::True) => ConditionStatus::True,
        Some(DvStatus::False) => ConditionStatus::False,
        _ => ConditionStatus::Unknown,
    }
}

/// Resolves the claims of the VMI's persistentVolumeClaim and dataVolume volumes from the caches.
fn claims(ctx: &Context, vmi: &VirtualMachineInstance) -> BTreeMap<String, VolumeClaim> {
    let ns = vmi.namespace().unwrap_or_default();
    let pvc = |name: &str| ctx.stores.pvcs.get(&ObjectRef::new(name).within(&ns));
    let mut out = BTreeMap::new();
    for volume in vmi.spec.volumes.iter().flatten() {
        let claim = if let Some(c) = &volume.persistent_volume_claim {
            match pvc(&c.claim_name) {
                Some(p) => VolumeClaim::Bound(claim_of(&p, c.read_only == Some(true))),
                None => VolumeClaim::Missing { kind: "PVC", name: c.claim_name.clone() },
            }
        } else if let Some(d) = &volume.data_volume {
            match ctx.stores.data_volumes.get(&ObjectRef::new(&d.name).within(&ns)) {
                None => VolumeClaim::Missing { kind: "DataVolume", name: d.name.clone() },
                Some(dv) if dv.status.as_ref().and_then(|s| s.phase) == Some(DataVolumePhase::Failed) => {
                    VolumeClaim::DataVolumeFailed { name: d.name.clone() }
                }
                Some(dv) => match (data_volume_ready(&dv), pvc(&d.name)) {
                    (ConditionStatus::True, Some(p)) => VolumeClaim::Bound(claim_of(&p, false)),
                    (ConditionStatus::True, None) => VolumeClaim::Missing { kind: "PVC", name: d.name.clone() },
                    (ready, _) => VolumeClaim::DataVolumeNotReady { name: d.name.clone(), ready },
                },
            }
        } else {
            continue;
        };
        out.insert(volume.name.clone(), claim);
    }
    out
}

async fn reconcile_once(vmi: &VirtualMachineInstance, ctx: &Context) -> Result<Requeue> {
    // read (the pod store is fed by the controller's own pod stream: complete once it has listed)
    if ctx.stores.pods.wait_until_ready().await.is_err() {
        return Ok(Requeue::requeue(std::time::Duration::from_secs(1)));
    }
    let mut pods = cached_pods(ctx, vmi);
    let phase = vmi.phase();
    if pods.is_empty() && !matches!(phase, Phase::Unset | Phase::Pending) {
        // Before concluding that the pod vanished, ask the API server (the cache may lag a fresh pod).
        pods = live_pods(ctx, vmi).await?;
    }
    let observed = Observed {
        vmi,
        pods: pods.iter().collect(),
        claims: claims(ctx, vmi),
        has_data_volumes: vmi.spec.volumes.iter().flatten().any(|v| v.data_volume.is_some()),
        settings: &ctx.settings,
        now: Time(Timestamp::now()),
    };
    // plan
    let plan = plan::plan(&observed);
    // apply
    for action in plan.actions {
        apply(ctx, vmi, action).await?;
    }
    Ok(plan.requeue.map_or_else(Requeue::await_change, Requeue::requeue))
}

/// Executes one action for `vmi`.
async fn apply(ctx: &Context, vmi: &VirtualMachineInstance, action: Action) -> Result<()> {
    let ns = vmi.namespace().unwrap_or_default();
    let name = vmi.name_any();
    match action {
        Action::CreatePod(pod) => {
            // The cache said there is none; the API server has the last word (no duplicate launcher pods).
            if !live_pods(ctx, vmi).await?.is_empty() {
                return Ok(());
            }
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            match api.create(&PostParams::default(), &pod).await {
                Ok(p) => {
                    let message = format!("Created virtual machine pod {}", p.name_any());
                    tracing::info!(vmi = %format!("{ns}/{name}"), pod = %p.name_any(), "created launcher pod");
                    ctx.events
                        .publish(vmi, controller_runtime::events::Severity::Normal, plan::EVENT_CREATED, &message)
                        .await;
                }
                Err(e) => {
                    let message = format!("Error creating pod: {e}");
                    ctx.events
                        .publish(vmi, controller_runtime::events::Severity::Warning, "FailedCreate", &message)
                        .await;
                    return Err(kube(format!("creating the launcher pod of VMI {ns}/{name}"))(e));
                }
            }
        }
        Action::DeletePod(pod) => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            delete_if_present(&api, &pod).await.map_err(kube(format!("deleting pod {ns}/{pod}")))?;
        }
        Action::UpdateVmi(next) => {
            let mut next = *next;
            next.metadata.resource_version = vmi.resource_version();
            vmis(ctx, &ns)
                .replace(&name, &PostParams::default(), &next)
                .await
                .map_err(kube(format!("updating VMI {ns}/{name}")))?;
        }
        Action::Event { severity, reason, message } => ctx.events.publish(vmi, severity, reason, &message).await,
    }
    Ok(())
}
