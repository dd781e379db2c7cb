//! The VirtualMachine reconciler (contract §1.2–1.4):
//!
//! ```text
//! read (VM; its VMI, DataVolumes and PVCs from the caches; the ControllerRevision of the running VMI's start when
//!       the VM's generation moved on; its instancetype and preference, captured, when a VMI may be created)
//!   ─► plan::plan (pure: Observed → Plan { actions, requeue })
//!   ─► apply (finalizer, DataVolumes, ControllerRevision + VMI, VMI deletion, spec start of a Halted VM, status)
//! ```
//!
//! The status is written through the status subresource with the resourceVersion that was read; a conflict starts
//! the reconcile over from the fresh VM, within the same reconcile, a few times. A refused create (admission, quota)
//! becomes the `Failure` condition and a `FailedCreate` event, and the reconcile fails (the error policy decides
//! when to try again).

pub mod instancetype;
pub mod live;
pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;

use contracts::kubevirt::consts::{ann, finalizer};
use controller_runtime::api::{api_message, create_if_absent, is_conflict, is_not_found};
use controller_runtime::events::Severity;
use crds::cdi::datavolume::DataVolume;
use crds::kubevirt::vm::{VirtualMachineCondition, VirtualMachineConditionType};
use crds::kubevirt::vmi::ConditionStatus;
use crds::kubevirt::{RunStrategy, VirtualMachine, VirtualMachineInstance, VirtualMachineStatus};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::context::{Context, reconcile_retrying};
use crate::error::{Error, Result, kube};
use plan::{Action, ClaimState, DataVolumeState, Observed};

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "vm";

/// Reconciles one VM.
pub async fn reconcile(vm: Arc<VirtualMachine>, ctx: Arc<Context>) -> Result<Requeue> {
    let ctx = ctx.as_ref();
    reconcile_retrying(
        ctx,
        CONTROLLER,
        "VM",
        vm.as_ref(),
        |o: VirtualMachine| async move { reconcile_once(&o, ctx).await },
    )
    .await
}

/// The error policy: fatal errors wait for a change, transient ones back off.
pub fn error_policy(vm: Arc<VirtualMachine>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.policy.on_error(vm.as_ref(), err)
}

fn vms(ctx: &Context, ns: &str) -> Api<VirtualMachine> {
    Api::namespaced(ctx.client.clone(), ns)
}

/// The template the running VMI was started from, when the VM's generation moved on since (else `None`).
async fn started_template(
    ctx: &Context,
    vm: &VirtualMachine,
    vmi: &VirtualMachineInstance,
) -> Result<Option<serde_json::Value>> {
    let started: Option<i64> = vmi.annotations().get(ann::VM_GENERATION).and_then(|g| g.parse().ok());
    if vmi.is_final() || started.is_none() || started == vm.metadata.generation {
        return Ok(None);
    }
    let Some(name) = vmi.status.as_ref().and_then(|s| s.virtual_machine_revision_name.clone()) else {
        return Ok(None);
    };
    let ns = vm.namespace().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    match api.get(&name).await {
        Ok(r) => Ok(r.data.and_then(|d| d.0.pointer("/spec/template").cloned())),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(kube(format!("reading ControllerRevision {ns}/{name}"))(e)),
    }
}

async fn reconcile_once(vm: &VirtualMachine, ctx: &Context) -> Result<Requeue> {
    if !crate::context::cache_ready(&ctx.stores.vmis, "VMI").await
        || !crate::context::cache_ready(&ctx.stores.data_volumes, "DataVolume").await
    {
        return Ok(Requeue::requeue(std::time::Duration::from_secs(1)));
    }
    let ns = vm.namespace().unwrap_or_default();
    let vmi = ctx.stores.vmis.get(&ObjectRef::new(&vm.name_any()).within(&ns));
    let (mut dv_names, pvc_names) = plan::referenced_claims(vm);
    dv_names.extend(vm.spec.data_volume_templates.iter().flatten().filter_map(|t| t.metadata.name.clone()));
    let data_volumes: BTreeMap<String, DataVolumeState> = dv_names
        .into_iter()
        .map(|n| {
            let dv = ctx.stores.data_volumes.get(&ObjectRef::new(&n).within(&ns));
            let state = dv.map_or(DataVolumeState::Missing, |d| {
                DataVolumeState::Present(d.status.as_ref().and_then(|s| s.phase))
            });
            (n, state)
        })
        .collect();
    let claims: BTreeMap<String, ClaimState> = pvc_names
        .into_iter()
        .map(|n| {
            let pvc = ctx.stores.pvcs.get(&ObjectRef::<PersistentVolumeClaim>::new(&n).within(&ns));
            let state = match pvc.as_ref().and_then(|p| p.status.as_ref()).and_then(|s| s.phase.as_deref()) {
                _ if pvc.is_none() => ClaimState::Missing,
                Some("Bound") => ClaimState::Bound,
                _ => ClaimState::Unbound,
            };
            (n, state)
        })
        .collect();
    let started = match vmi.as_deref() {
        Some(v) => started_template(ctx, vm, v).await?,
        None => None,
    };
    // Instancetype and preference: read when a VMI may be created (none lives) or the status lacks their
    // captured revisions.
    let live = vmi.as_deref().is_some_and(|v| !v.is_final() && v.metadata.deletion_timestamp.is_none());
    let status = vm.status.as_ref();
    let uncaptured = (vm.spec.instancetype.is_some() && status.and_then(|s| s.instancetype_ref.as_ref()).is_none())
        || (vm.spec.preference.is_some() && status.and_then(|s| s.preference_ref.as_ref()).is_none());
    let expansion = if (vm.spec.instancetype.is_some() || vm.spec.preference.is_some()) && (!live || uncaptured) {
        Some(instancetype::resolve(ctx, vm).await?)
    } else {
        None
    };
    let observed = Observed {
        vm,
        vmi: vmi.as_deref(),
        expansion,
        data_volumes,
        claims,
        started_template: started,
        live: ctx.live_settings(),
        now: Time(Timestamp::now()),
    };
    let plan = plan::plan(&observed);
    let planned_status = plan.actions.iter().find_map(|a| match a {
        Action::UpdateStatus(s) => Some(s.as_ref().clone()),
        _ => None,
    });
    for action in plan.actions {
        if let Err(e) = apply(ctx, vm, action).await {
            if let Some((reason, message)) = e.1 {
                report_failure(ctx, vm, planned_status.clone(), reason, &message).await;
            }
            return Err(e.0);
        }
    }
    Ok(plan.requeue.map_or_else(Requeue::await_change, Requeue::requeue))
}

/// Writes the `Failure` condition (on top of the status the plan wanted) and a Warning event.
async fn report_failure(
    ctx: &Context,
    vm: &VirtualMachine,
    planned: Option<VirtualMachineStatus>,
    reason: &'static str,
    message: &str,
) {
    let mut status = planned.or_else(|| vm.status.clone()).unwrap_or_default();
    let failure =
        VirtualMachineCondition::new(VirtualMachineConditionType::Failure, ConditionStatus::True, reason, message);
    crds::kubevirt::wire::set_condition(&mut status.conditions, failure, &Time(Timestamp::now()));
    let mut next = vm.clone();
    next.status = Some(status);
    let ns = vm.namespace().unwrap_or_default();
    // Best effort: the reconcile fails anyway and will come back.
    let _ = vms(ctx, &ns).replace_status(&vm.name_any(), &PostParams::default(), &next).await;
    ctx.events.publish(vm, Severity::Warning, reason, message).await;
}

/// An apply error, with the `Failure` condition (reason, message) it reports, if any.
type ApplyError = (Error, Option<(&'static str, String)>);

/// Executes one action for `vm`.
async fn apply(ctx: &Context, vm: &VirtualMachine, action: Action) -> std::result::Result<(), ApplyError> {
    let ns = vm.namespace().unwrap_or_default();
    let name = vm.name_any();
    let plain = |e: Error| (e, None);
    match action {
        Action::AddFinalizer | Action::RemoveFinalizer => {
            let mut finalizers: Vec<String> =
                vm.finalizers().iter().filter(|f| *f != finalizer::VIRTUAL_MACHINE_CONTROLLER).cloned().collect();
            if matches!(action, Action::AddFinalizer) {
                finalizers.push(finalizer::VIRTUAL_MACHINE_CONTROLLER.to_owned());
            }
            let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": vm.resource_version()}});
            vms(ctx, &ns)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!("updating the finalizers of VM {ns}/{name}")))
                .map_err(plain)?;
        }
        Action::CreateDataVolume(dv) => {
            let api: Api<DataVolume> = Api::namespaced(ctx.client.clone(), &ns);
            let dv_name = dv.name_any();
            match create_if_absent(&api, &dv).await {
                Ok(Some(_)) => {
                    let message = format!("Created DataVolume {dv_name}");
                    ctx.events.publish(vm, Severity::Normal, plan::EVENT_DV_CREATED, &message).await;
                }
                Ok(None) => {}
                Err(e) => {
                    let message = format!("Error creating DataVolume {dv_name}: {}", api_message(&e));
                    let err = kube(format!("creating DataVolume {ns}/{dv_name}"))(e);
                    return Err((err, Some(("FailedDataVolumeCreate", message))));
                }
            }
        }
        Action::CreateVmi(vmi) => {
            let revision = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(plan::revision_name(vm)),
                    namespace: Some(ns.clone()),
                    owner_references: vmi.metadata.owner_references.clone(),
                    ..Default::default()
                },
                data: Some(RawExtension(json!({"spec": {"template": vm.spec.template}}))),
                revision: vm.metadata.generation.unwrap_or_default(),
            };
            let revisions: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
            create_if_absent(&revisions, &revision)
                .await
                .map_err(kube(format!("creating ControllerRevision {ns}/{}", plan::revision_name(vm))))
                .map_err(plain)?;
            let api: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
            match create_if_absent(&api, &vmi).await {
                Ok(Some(_)) => {
                    tracing::info!(vm = %format!("{ns}/{name}"), "created VMI");
                    let message =
                        format!("Started the virtual machine by creating the new virtual machine instance {name}");
                    ctx.events.publish(vm, Severity::Normal, plan::EVENT_CREATED, &message).await;
                }
                Ok(None) => {}
                Err(e) => {
                    let message = format!("Error creating virtual machine instance: {}", api_message(&e));
                    let err = kube(format!("creating VMI {ns}/{name}"))(e);
                    return Err((err, Some((plan::REASON_FAILED_CREATE, message))));
                }
            }
        }
        Action::DeleteVmi { uid } => {
            let api: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
            let params = DeleteParams {
                preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
                ..Default::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => tracing::info!(vm = %format!("{ns}/{name}"), "deleting VMI"),
                // Gone, or another VMI of that name by now (precondition): nothing to stop.
                Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                Err(e) => return Err(plain(kube(format!("deleting VMI {ns}/{name}"))(e))),
            }
        }
        Action::SetVmiGeneration(generation) => {
            let api: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
            let patch = json!({"metadata": {"annotations": {ann::VM_GENERATION: generation.to_string()}}});
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(plain(kube(format!("annotating VMI {ns}/{name}"))(e))),
            }
        }
        Action::PatchVmi(patch) => {
            let api: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => tracing::info!(vm = %format!("{ns}/{name}"), spec = %patch["spec"], "applied live to the VMI"),
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(plain(kube(format!("updating VMI {ns}/{name} live"))(e))),
            }
        }
        Action::StartHalted => {
            let patch = if vm.spec.run_strategy.is_some() {
                json!({"spec": {"runStrategy": RunStrategy::Always.as_str()}})
            } else {
                json!({"spec": {"running": true}})
            };
            vms(ctx, &ns)
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube(format!("starting VM {ns}/{name}")))
                .map_err(plain)?;
        }
        Action::UpdateStatus(status) => {
            let mut next = vm.clone();
            next.status = Some(*status);
            vms(ctx, &ns)
                .replace_status(&name, &PostParams::default(), &next)
                .await
                .map_err(kube(format!("updating the status of VM {ns}/{name}")))
                .map_err(plain)?;
        }
        Action::Event { severity, reason, message } => ctx.events.publish(vm, severity, reason, &message).await,
    }
    Ok(())
}
