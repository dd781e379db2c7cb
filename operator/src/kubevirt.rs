//! The `KubeVirt` reconciler: read (the object, the certificates, the live workloads) → plan (`plan::progress`,
//! `plan::kubevirt_status`) → apply (stages up to the first one still rolling out) → status.
//!
//! Only the cluster's installation is reconciled: the oldest `KubeVirt` in the operator's namespace
//! (`crds::kubevirt::config::effective`, the one every component reads). Any other gets upstream's
//! `Synchronized=False` / `ExistingDeployment` and nothing else. Deleting the installation removes the CRDs first
//! (the controllers still run and finalize the workloads), then everything else it installed, then the finalizer.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crds::kubevirt::config::{KubeVirt, KubeVirtStatus, effective};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use crate::certs::{self, Rotation};
use crate::customize::Customization;
use crate::manifests::{self, KubevirtSettings};
use crate::plan::{self, KubevirtPass, Progress};
use crate::release::Release;
use crate::{Context, Error, install, object};

/// Upstream's finalizer of the `KubeVirt` object.
pub const FINALIZER: &str = "kubevirt.io/foregroundDeleteKubeVirt";
/// The finalizer's deprecated name, still removed.
const LEGACY_FINALIZER: &str = "foregroundDeleteKubeVirt";
/// The binding of the default interface when the configuration names none (upstream's).
const DEFAULT_INTERFACE: &str = "bridge";
/// How often an installation still rolling out is looked at.
const ROLLING: Duration = Duration::from_secs(3);
/// How often a settled installation is checked for drift and certificate renewals.
const SETTLED: Duration = Duration::from_secs(60);

fn now() -> Time {
    Time(Timestamp::now())
}

/// The settings the components are rendered with (everything except the certificates).
fn settings(kv: &KubeVirt, ctx: &Context, ca_bundle: String, certificates_hash: String) -> KubevirtSettings {
    let spec = &kv.spec;
    let release = Release::resolve(
        &ctx.defaults,
        spec.image_registry.as_deref(),
        spec.image_tag.as_deref(),
        spec.image_pull_policy.as_deref(),
    );
    let interface = spec
        .configuration
        .as_ref()
        .and_then(|c| c.network.as_ref())
        .and_then(|n| n.default_network_interface.clone())
        .unwrap_or_else(|| DEFAULT_INTERFACE.into());
    let deployment_id =
        manifests::deployment_id(&[&release.tag, &release.registry, &release.pull_policy, &ctx.namespace, &interface]);
    let updating = kv.status.as_ref().is_some_and(|s| plan::kubevirt_updating(s, &deployment_id));
    KubevirtSettings {
        release,
        deployment_id,
        ca_bundle,
        certificates_hash,
        default_network_interface: interface,
        updating,
        customization: Customization::default(),
    }
}

async fn patch_status(api: &Api<KubeVirt>, kv: &KubeVirt, status: KubeVirtStatus) -> Result<(), Error> {
    object::patch_status(api, kv, kv.status.as_ref(), &status).await
}

async fn set_finalizer(api: &Api<KubeVirt>, kv: &KubeVirt, present: bool) -> Result<(), Error> {
    object::set_finalizer(api, kv, FINALIZER, present, &[LEGACY_FINALIZER]).await
}

fn certificate_objects(ns: &str) -> Vec<Value> {
    let secret =
        |name: &str| json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}});
    let mut v: Vec<Value> = certs::LEAVES.iter().map(|l| secret(l.secret)).collect();
    v.push(secret(certs::CA_SECRET));
    v.push(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": certs::CA_SECRET, "namespace": ns}}));
    v
}

/// Reconciles one `KubeVirt` object.
pub async fn reconcile(kv: Arc<KubeVirt>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = kv.namespace().unwrap_or_default();
    let api: Api<KubeVirt> = Api::namespaced(ctx.client.clone(), &ns);
    let all = ctx.kubevirts.state();
    let active = ns == ctx.namespace
        && effective(all.iter().map(|k| &**k).filter(|k| k.namespace().as_deref() == Some(&ctx.namespace)))
            .is_some_and(|a| a.uid() == kv.uid());
    let old = kv.status.clone().unwrap_or_default();
    if kv.meta().deletion_timestamp.is_some() {
        if !kv.finalizers().iter().any(|f| f == FINALIZER || f == LEGACY_FINALIZER) {
            return Ok(Action::await_change());
        }
        if old.phase.as_deref() != Some(plan::kv_phase::DELETED) {
            patch_status(&api, &kv, plan::kubevirt_deleting(&old, false, None, &now())).await?;
        }
        let stages = manifests::kubevirt(&settings(&kv, &ctx, String::new(), String::new()))?;
        return match install::remove(&ctx, &stages, &certificate_objects(&ctx.namespace)).await {
            Ok(true) => {
                let done = plan::kubevirt_deleting(&old, true, None, &now());
                patch_status(&api, &kv, done).await?;
                set_finalizer(&api, &kv, false).await?;
                ctx.events
                    .publish(&*kv, controller_runtime::events::Severity::Normal, "Deleted", "KubeVirt deleted")
                    .await;
                tracing::info!("KubeVirt deleted");
                Ok(Action::await_change())
            }
            Ok(false) => Ok(Action::requeue(ROLLING)),
            Err(e) => {
                let failed = plan::kubevirt_deleting(&old, false, Some(&e.to_string()), &now());
                patch_status(&api, &kv, failed).await?;
                Ok(Action::requeue(ROLLING))
            }
        };
    }
    if !active {
        patch_status(&api, &kv, plan::kubevirt_not_active(&old, &now())).await?;
        return Ok(Action::await_change());
    }
    set_finalizer(&api, &kv, true).await?;
    let base = settings(&kv, &ctx, String::new(), String::new());
    let outcome: Result<(Progress, bool, Option<SystemTime>), String> = async {
        let rotation = Rotation::of(&kv.spec.extra)?;
        let customization = Customization::kubevirt(&kv.spec.extra)?;
        let c = certs::ensure(&ctx.client, &ctx.namespace, rotation, crate::FIELD_MANAGER)
            .await
            .map_err(|e| e.to_string())?;
        let s = KubevirtSettings { ca_bundle: c.ca_bundle, certificates_hash: c.hash, customization, ..base.clone() };
        let stages = manifests::kubevirt(&s).map_err(|e| e.to_string())?;
        let (p, all_applied) = install::roll(&ctx, &stages).await.map_err(|e| e.to_string())?;
        Ok((p, all_applied, c.next_due))
    }
    .await;
    let pass = KubevirtPass {
        generation: kv.meta().generation,
        operator_version: &ctx.operator_version,
        target: (&base.release.tag, &base.release.registry),
        deployment_id: &base.deployment_id,
        outcome: outcome.as_ref().map(|(p, ..)| p).map_err(Clone::clone),
        all_applied: outcome.as_ref().is_ok_and(|(_, a, _)| *a),
    };
    let status = plan::kubevirt_status(&old, &pass, &now());
    if status.phase != old.phase {
        let phase = status.phase.clone().unwrap_or_default();
        let msg = format!("KubeVirt {phase}: version {} from {}", base.release.tag, base.release.registry);
        ctx.events.publish(&*kv, controller_runtime::events::Severity::Normal, &phase, &msg).await;
    }
    patch_status(&api, &kv, status).await?;
    Ok(match outcome {
        Err(e) => {
            tracing::warn!(error = %e, "KubeVirt deployment failed");
            Action::requeue(ROLLING * 5)
        }
        Ok((p, _, _)) if !p.complete() => Action::requeue(ROLLING),
        Ok((_, _, next_due)) => {
            let until = next_due.and_then(|t| t.duration_since(SystemTime::now()).ok()).unwrap_or(SETTLED);
            Action::requeue(until.clamp(Duration::from_secs(1), SETTLED))
        }
    })
}
