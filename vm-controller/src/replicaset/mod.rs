//! The VirtualMachineInstanceReplicaSet reconciler (contract §4):
//!
//! ```text
//! read (the RS; its namespace's VMIs listed from the API server — a VMI created a moment ago must count, or the
//!       set would overshoot: this is what upstream's "expectations" guard against)
//!   ─► plan::plan (pure)
//!   ─► apply (adopt, create with generateName, delete with a UID precondition, status through the subresource)
//! ```

pub mod plan;

use std::sync::Arc;

use controller_runtime::api::{api_message, is_conflict, is_not_found};
use controller_runtime::events::Severity;
use crds::kubevirt::replicaset::{
    ReplicaSetConditionType, VirtualMachineInstanceReplicaSetCondition, VirtualMachineInstanceReplicaSetStatus,
};
use crds::kubevirt::vmi::ConditionStatus;
use crds::kubevirt::{VirtualMachineInstance, VirtualMachineInstanceReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::Action as Requeue;
use serde_json::json;

use crate::context::{Context, reconcile_retrying};
use crate::error::{Error, Result, kube};
use plan::{Action, Observed};

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "vmirs";

/// Reconciles one replica set.
pub async fn reconcile(rs: Arc<VirtualMachineInstanceReplicaSet>, ctx: Arc<Context>) -> Result<Requeue> {
    let ctx = ctx.as_ref();
    reconcile_retrying(ctx, CONTROLLER, "VMIRS", rs.as_ref(), |o: VirtualMachineInstanceReplicaSet| async move {
        reconcile_once(&o, ctx).await
    })
    .await
}

/// The error policy: fatal errors wait for a change, transient ones back off.
pub fn error_policy(rs: Arc<VirtualMachineInstanceReplicaSet>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.policy.on_error(rs.as_ref(), err)
}

fn sets(ctx: &Context, ns: &str) -> Api<VirtualMachineInstanceReplicaSet> {
    Api::namespaced(ctx.client.clone(), ns)
}

async fn reconcile_once(rs: &VirtualMachineInstanceReplicaSet, ctx: &Context) -> Result<Requeue> {
    let ns = rs.namespace().unwrap_or_default();
    let name = rs.name_any();
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let listed = vmis.list(&ListParams::default()).await.map_err(kube(format!("listing the VMIs of {ns}")))?.items;
    let observed = Observed { rs, vmis: listed.iter().collect(), now: Time(Timestamp::now()) };
    let actions = plan::plan(&observed);
    let mut status = actions.iter().find_map(|a| match a {
        Action::UpdateStatus(s) => Some(s.as_ref().clone()),
        _ => None,
    });
    for action in actions {
        match action {
            Action::Adopt(vmi) => {
                let owner = plan::owner_reference(rs);
                let patch = json!({"metadata": {"ownerReferences": [owner]}});
                match vmis.patch(&vmi, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => return Err(kube(format!("adopting VMI {ns}/{vmi}"))(e)),
                }
            }
            Action::Create(vmi) => match vmis.create(&PostParams::default(), &vmi).await {
                Ok(v) => {
                    let message = format!("Created virtual machine instance: {}", v.name_any());
                    ctx.events.publish(rs, Severity::Normal, plan::EVENT_CREATED, &message).await;
                }
                Err(e) => {
                    let message = format!("Error creating VMI: {}", api_message(&e));
                    ctx.events.publish(rs, Severity::Warning, plan::REASON_FAILED_CREATE, &message).await;
                    let mut failed = status.take().or_else(|| rs.status.clone()).unwrap_or_default();
                    set_failure(&mut failed, &message);
                    write_status(ctx, rs, failed).await.ok();
                    return Err(kube(format!("creating a VMI of {ns}/{name}"))(e));
                }
            },
            Action::Delete { name: vmi, uid } => {
                let params = DeleteParams {
                    preconditions: Some(Preconditions { uid: Some(uid), resource_version: None }),
                    ..Default::default()
                };
                match vmis.delete(&vmi, &params).await {
                    Ok(_) => {
                        let message = format!("Deleted virtual machine instance: {vmi}");
                        ctx.events.publish(rs, Severity::Normal, plan::EVENT_DELETED, &message).await;
                    }
                    Err(e) if is_not_found(&e) || is_conflict(&e) => {}
                    Err(e) => return Err(kube(format!("deleting VMI {ns}/{vmi}"))(e)),
                }
            }
            Action::UpdateStatus(_) => {
                if let Some(s) = status.take() {
                    write_status(ctx, rs, s).await?;
                }
            }
            Action::Event { severity, reason, message } => ctx.events.publish(rs, severity, reason, &message).await,
        }
    }
    Ok(Requeue::await_change())
}

fn set_failure(status: &mut VirtualMachineInstanceReplicaSetStatus, message: &str) {
    let failure = VirtualMachineInstanceReplicaSetCondition::new(
        ReplicaSetConditionType::ReplicaFailure,
        ConditionStatus::True,
        plan::REASON_FAILED_CREATE,
        message,
    );
    crds::kubevirt::wire::set_condition(&mut status.conditions, failure, &Time(Timestamp::now()));
}

async fn write_status(
    ctx: &Context,
    rs: &VirtualMachineInstanceReplicaSet,
    status: VirtualMachineInstanceReplicaSetStatus,
) -> Result<()> {
    let ns = rs.namespace().unwrap_or_default();
    let mut next = rs.clone();
    next.status = Some(status);
    sets(ctx, &ns)
        .replace_status(&rs.name_any(), &PostParams::default(), &next)
        .await
        .map_err(kube(format!("updating the status of VMIRS {ns}/{}", rs.name_any())))?;
    Ok(())
}
