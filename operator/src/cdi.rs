//! The `CDI` reconciler: the oldest `CDI` object is the installation (any other gets upstream's `Error` phase
//! and "unwanted CDI object"); its components follow the operator's release (as upstream's cdi-operator, whose
//! version is its own) with the object's `imagePullPolicy`; `spec.config` is kept in the CDIConfig `config`.
//! Deleting it removes the CRDs first (the DataVolume controller finalizes DataVolumes), then the rest.

use std::sync::Arc;
use std::time::Duration;

use crds::cdi::config::CDI_CONFIG_NAME;
use crds::cdi::{CDI, CDIStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use crate::customize::Customization;
use crate::install::{remove, roll};
use crate::plan::{self, cdi_phase};
use crate::release::Release;
use crate::{Context, Error, object};

/// Upstream's finalizer of the `CDI` object.
pub const FINALIZER: &str = "operator.cdi.kubevirt.io";

fn now() -> Time {
    Time(Timestamp::now())
}

async fn patch_status(api: &Api<CDI>, cdi: &CDI, status: CDIStatus) -> Result<(), Error> {
    object::patch_status(api, cdi, cdi.status.as_ref(), &status).await
}

async fn set_finalizer(api: &Api<CDI>, cdi: &CDI, present: bool) -> Result<(), Error> {
    object::set_finalizer(api, cdi, FINALIZER, present, &[]).await
}

/// The CDIConfig `config` with `spec.config` (an object without config leaves the CDIConfig's spec alone).
fn cdi_config(cdi: &CDI) -> Option<serde_json::Value> {
    let config = cdi.spec.config.as_ref()?;
    Some(json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDIConfig",
                "metadata": {"name": CDI_CONFIG_NAME, "labels": {crate::manifests::MANAGED_BY: crate::manifests::CDI_MANAGER}},
                "spec": config}))
}

/// Reconciles one `CDI` object.
pub async fn reconcile(cdi: Arc<CDI>, ctx: Arc<Context>) -> Result<Action, Error> {
    let api: Api<CDI> = Api::all(ctx.client.clone());
    let old = cdi.status.clone().unwrap_or_default();
    let all = ctx.cdis.state();
    let oldest = all.iter().filter(|c| c.meta().deletion_timestamp.is_none()).min_by(|a, b| {
        a.metadata.creation_timestamp.cmp(&b.metadata.creation_timestamp).then(a.metadata.name.cmp(&b.metadata.name))
    });
    let active = oldest.is_some_and(|a| a.uid() == cdi.uid());
    let release = Release::resolve(&ctx.defaults, None, None, cdi.spec.image_pull_policy.as_deref());
    if cdi.meta().deletion_timestamp.is_some() {
        if !cdi.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Action::await_change());
        }
        let mut s = old.clone();
        s.phase = Some(cdi_phase::DELETING.into());
        patch_status(&api, &cdi, s.clone()).await?;
        let stages = crate::manifests::cdi(&release, &Customization::default())?;
        return match remove(&ctx, &stages, &[]).await {
            Ok(true) => {
                s.phase = Some(cdi_phase::DELETED.into());
                patch_status(&api, &cdi, s).await?;
                set_finalizer(&api, &cdi, false).await?;
                ctx.events.publish(&*cdi, controller_runtime::events::Severity::Normal, "Deleted", "Deleted CDI").await;
                Ok(Action::await_change())
            }
            Ok(false) => Ok(Action::requeue(Duration::from_secs(3))),
            Err(e) => {
                tracing::warn!(error = %e, "removing CDI");
                Ok(Action::requeue(Duration::from_secs(5)))
            }
        };
    }
    if !active {
        let s = plan::cdi_status(&old, &ctx.operator_version, &release.tag, Err(plan::CDI_UNWANTED.into()), &now());
        patch_status(&api, &cdi, s).await?;
        return Ok(Action::await_change());
    }
    set_finalizer(&api, &cdi, true).await?;
    let outcome = async {
        let customization = Customization::cdi(&cdi.spec.extra)?;
        let stages = crate::manifests::cdi(&release, &customization).map_err(|e| e.to_string())?;
        let (p, all_applied) = roll(&ctx, &stages).await.map_err(|e| e.to_string())?;
        if all_applied && let Some(config) = cdi_config(&cdi) {
            ctx.applier.apply(&config).await.map_err(|e| e.to_string())?;
        }
        Ok(p)
    }
    .await;
    let status =
        plan::cdi_status(&old, &ctx.operator_version, &release.tag, outcome.as_ref().map_err(Clone::clone), &now());
    if status.phase != old.phase {
        let phase = status.phase.clone().unwrap_or_default();
        let msg = format!("CDI {phase}: version {}", release.tag);
        ctx.events.publish(&*cdi, controller_runtime::events::Severity::Normal, &phase, &msg).await;
    }
    patch_status(&api, &cdi, status).await?;
    Ok(match outcome {
        Err(e) => {
            tracing::warn!(error = %e, "CDI deployment failed");
            Action::requeue(Duration::from_secs(15))
        }
        Ok(p) if !p.complete() => Action::requeue(Duration::from_secs(3)),
        Ok(_) => Action::requeue(Duration::from_secs(60)),
    })
}
