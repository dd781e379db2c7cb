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

pub mod evacuation;
pub mod hotplug;
pub mod plan;
pub mod pod;
pub mod status;
pub mod workload_update;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use controller_runtime::api::{delete_if_present, delete_with_if_present};
use crds::cdi::datavolume::{ConditionStatus as DvStatus, ConditionType as DvCondition, DataVolume, DataVolumePhase};
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{ConditionStatus, VirtualMachineInstancePhase as Phase};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
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
pub(crate) fn claims(ctx: &Context, vmi: &VirtualMachineInstance) -> BTreeMap<String, VolumeClaim> {
    let ns = vmi.namespace().unwrap_or_default();
    let pvc = |name: &str| ctx.stores.pvcs.get(&ObjectRef::new(name).within(&ns));
    let mut out = BTreeMap::new();
    // Hotpluggable volumes are not the launcher pod's: they come through attachment pods (`hotplug_claims`).
    for volume in vmi.spec.volumes.iter().flatten().filter(|v| !v.is_hotpluggable()) {
        let claim = if let Some(c) = &volume.persistent_volume_claim {
            match pvc(&c.claim_name) {
                Some(p) => VolumeClaim::Bound(claim_of(&p, c.read_only == Some(true))),
                None => VolumeClaim::Missing { kind: "PVC", name: c.claim_name.clone() },
            }
        } else if let Some(d) = &volume.data_volume {
            match ctx.stores.data_volumes.get(&ObjectRef::new(&d.name).within(&ns)) {
                None => VolumeClaim::Missing { kind: "DataVolume", name: d.name.clone() },
                Some(dv) => match dv.status.as_ref().and_then(|s| s.phase) {
                    Some(DataVolumePhase::Failed) => VolumeClaim::DataVolumeFailed { name: d.name.clone() },
                    Some(DataVolumePhase::WaitForFirstConsumer) => match pvc(&d.name) {
                        Some(p) => VolumeClaim::FirstConsumer(claim_of(&p, false)),
                        None => VolumeClaim::DataVolumeNotReady { name: d.name.clone(), ready: ConditionStatus::False },
                    },
                    _ => match (data_volume_ready(&dv), pvc(&d.name)) {
                        (ConditionStatus::True, Some(p)) => VolumeClaim::Bound(claim_of(&p, false)),
                        (ConditionStatus::True, None) => VolumeClaim::Missing { kind: "PVC", name: d.name.clone() },
                        (ready, _) => VolumeClaim::DataVolumeNotReady { name: d.name.clone(), ready },
                    },
                },
            }
        } else {
            continue;
        };
        out.insert(volume.name.clone(), claim);
    }
    out
}

/// The claims of the VMI's hotpluggable volumes, by volume name: missing, not usable yet (the PVC's phase, or
/// the DataVolume's), or ready.
pub(crate) fn hotplug_claims(ctx: &Context, vmi: &VirtualMachineInstance) -> BTreeMap<String, hotplug::HotplugClaim> {
    use hotplug::HotplugClaim;
    let ns = vmi.namespace().unwrap_or_default();
    let pvc = |name: &str| ctx.stores.pvcs.get(&ObjectRef::new(name).within(&ns));
    let mut out = BTreeMap::new();
    for volume in vmi.spec.volumes.iter().flatten().filter(|v| v.is_hotpluggable()) {
        let Some(name) = volume.claim_name() else { continue };
        let dv_phase = volume.data_volume.as_ref().map(|_| {
            ctx.stores.data_volumes.get(&ObjectRef::new(name).within(&ns)).map(|dv| (data_volume_ready(&dv), dv))
        });
        let claim = match (dv_phase, pvc(name)) {
            (Some(None), _) => HotplugClaim::Missing(name.to_owned()),
            (Some(Some((ready, dv))), _) if ready != ConditionStatus::True => {
                let phase = dv
                    .status
                    .as_ref()
                    .and_then(|s| s.phase)
                    .map_or_else(|| "Pending".to_owned(), |p| p.as_str().to_owned());
                HotplugClaim::NotReady { name: name.to_owned(), phase }
            }
            (_, None) => HotplugClaim::Missing(name.to_owned()),
            (_, Some(p)) => match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Bound") => {
                    let read_only = volume.persistent_volume_claim.as_ref().is_some_and(|c| c.read_only == Some(true));
                    HotplugClaim::Ready(claim_of(&p, read_only))
                }
                phase => HotplugClaim::NotReady { name: name.to_owned(), phase: phase.unwrap_or("Pending").to_owned() },
            },
        };
        out.insert(volume.name.clone(), claim);
    }
    out
}

/// The VMI's attachment pods in the cache (label `kubevirt.io=hotplug-disk`, an owner reference to the VMI).
fn attachment_pods(ctx: &Context, vmi: &VirtualMachineInstance) -> Vec<Pod> {
    let uid = vmi.uid().unwrap_or_default();
    let ns = vmi.namespace();
    ctx.stores
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.namespace() == ns
                && p.labels().get(contracts::kubevirt::consts::label::KUBEVIRT).map(String::as_str)
                    == Some(contracts::kubevirt::consts::label::HOTPLUG_DISK)
                && p.owner_references().iter().any(|o| o.uid == uid)
        })
        .map(|p| p.as_ref().clone())
        .collect()
}

/// The nodes of `pods` that are lost: gone from the API server, or whose `Ready` condition is not True (the node
/// lifecycle controller sets Unknown once the kubelet stopped reporting for its grace period). Read live: rare
/// (deleted or final VMIs with pods left only) and the answer decides a force deletion; a node that cannot be read
/// is not lost.
async fn lost_nodes(ctx: &Context, pods: &[Pod]) -> BTreeSet<String> {
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let names: BTreeSet<&String> = pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.as_ref()).collect();
    let mut lost = BTreeSet::new();
    for name in names {
        let node = match nodes.get_opt(name).await {
            Ok(n) => n,
            Err(e) => {
                // Not knowing makes no node lost: the ordinary deletion path goes on.
                tracing::warn!(node = %name, error = %e, "cannot read the node of a deleted VMI's pod");
                continue;
            }
        };
        let ready = node
            .as_ref()
            .and_then(|n| n.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready").cloned());
        if ready.is_none_or(|c| c.status != "True") {
            lost.insert(name.clone());
        }
    }
    lost
}

async fn reconcile_once(vmi: &VirtualMachineInstance, ctx: &Context) -> Result<Requeue> {
    // read (the pod store is fed by the controller's own pod stream, the DataVolume store by the VM controller's:
    // complete once each has listed)
    if !crate::context::cache_ready(&ctx.stores.pods, "launcher pod").await
        || !crate::context::cache_ready(&ctx.stores.data_volumes, "DataVolume").await
    {
        return Ok(Requeue::requeue(std::time::Duration::from_secs(1)));
    }
    let mut pods = cached_pods(ctx, vmi);
    let phase = vmi.phase();
    if pods.is_empty() && !matches!(phase, Phase::Unset | Phase::Pending) {
        // Before concluding that the pod vanished, ask the API server (the cache may lag a fresh pod).
        pods = live_pods(ctx, vmi).await?;
    }
    let lost_nodes = if (phase.is_final() || vmi.metadata.deletion_timestamp.is_some()) && !pods.is_empty() {
        lost_nodes(ctx, &pods).await
    } else {
        BTreeSet::new()
    };
    let attachments = attachment_pods(ctx, vmi);
    let observed = Observed {
        vmi,
        pods: pods.iter().collect(),
        claims: claims(ctx, vmi),
        has_data_volumes: vmi.spec.volumes.iter().flatten().any(|v| v.data_volume.is_some()),
        lost_nodes,
        migration_in_flight: crate::migration::of_vmi(ctx, &vmi.namespace().unwrap_or_default(), &vmi.name_any())
            .iter()
            .any(|m| !m.is_final()),
        workload_updates_migrate: ctx.workload_updates_migrate(),
        attachments: attachments.iter().collect(),
        hotplug_claims: hotplug_claims(ctx, vmi),
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
        Action::CreateAttachmentPod(pod) => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            let severity = controller_runtime::events::Severity::Normal;
            match api.create(&PostParams::default(), &pod).await {
                Ok(p) => {
                    tracing::info!(vmi = %format!("{ns}/{name}"), pod = %p.name_any(), "created attachment pod");
                    let message = format!("Created attachment pod {}", p.name_any());
                    ctx.events.publish(vmi, severity, hotplug::REASON_CREATED, &message).await;
                }
                Err(e) => {
                    let message = format!("Error creating attachment pod: {e}");
                    let warning = controller_runtime::events::Severity::Warning;
                    ctx.events.publish(vmi, warning, "FailedCreate", &message).await;
                    return Err(kube(format!("creating an attachment pod of VMI {ns}/{name}"))(e));
                }
            }
        }
        Action::DeletePod(pod) => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            delete_if_present(&api, &pod).await.map_err(kube(format!("deleting pod {ns}/{pod}")))?;
        }
        Action::ForceDeletePod(pod) => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            tracing::warn!(vmi = %format!("{ns}/{name}"), %pod, "force-deleting a launcher pod on a lost node");
            delete_with_if_present(&api, &pod, &DeleteParams::default().grace_period(0))
                .await
                .map_err(kube(format!("force-deleting pod {ns}/{pod}")))?;
        }
        Action::CreateMigration(m, cause) => {
            // The cache may lag a migration created a moment ago: the API server has the last word.
            let api: Api<crds::kubevirt::VirtualMachineInstanceMigration> = Api::namespaced(ctx.client.clone(), &ns);
            let selector = format!("{}={name}", contracts::kubevirt::consts::label::VMI_NAME);
            let listed = api
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(kube(format!("listing the migrations of VMI {ns}/{name}")))?;
            if listed.items.iter().any(|m| !m.is_final()) {
                return Ok(());
            }
            let severity = controller_runtime::events::Severity::Normal;
            match api.create(&PostParams::default(), &m).await {
                Ok(created) => {
                    let message = cause.created_message(&created.name_any());
                    tracing::info!(vmi = %format!("{ns}/{name}"), migration = %created.name_any(), ?cause, "migrating");
                    ctx.events.publish(vmi, severity, evacuation::EVENT_CREATED, &message).await;
                }
                Err(e) => {
                    let message = cause.failed_message(&e.to_string());
                    let warning = controller_runtime::events::Severity::Warning;
                    ctx.events.publish(vmi, warning, evacuation::EVENT_FAILED, &message).await;
                    return Err(kube(format!("creating a migration of VMI {ns}/{name} ({cause:?})"))(e));
                }
            }
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
