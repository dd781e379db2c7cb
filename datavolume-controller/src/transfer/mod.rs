//! The transfer reconciler (upstream's import, upload and clone controllers): for every PVC whose annotations ask
//! for a transfer ([`TransferRequest`]) it runs the worker pods and mirrors their state into the PVC's worker-state
//! annotations ([`contracts::cdi::WorkerState`]), which the DataVolume reconciler turns into status.
//!
//! ```text
//! read (PVC, worker pods, clone source from the caches)
//!   ─► plan::plan (pure: Observed → Plan { actions, requeue })
//!   ─► apply (create / delete pods, Secrets, Service, scratch PVC; patch the worker state)
//! ```
//!
//! Builders of every object are in [`pods`]; the decisions, including what a worker pod's status means
//! ([`plan::observe_pod`]), in [`plan`].

pub mod plan;
pub mod pods;

use std::sync::Arc;

use contracts::cdi::{StateChanges, TransferRequest};
use controller_runtime::api::{create_if_absent, create_or_replace, delete_if_present};
use crds::cdi::naming;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use rand::RngCore;

use crate::certs;
use crate::context::Context;
use crate::error::{Error, Result, kube};
use plan::{Action, Observed};
use pods::{CLONE_TOKEN_KEY, WorkerConfig};

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "worker";

fn cached_pod(ctx: &Context, ns: &str, name: &str) -> Option<Arc<Pod>> {
    ctx.stores.pods.get(&ObjectRef::new(name).within(ns))
}

fn class_of(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone())
}

/// Reconciles one PVC.
pub async fn reconcile(pvc: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Requeue> {
    let r = ctx.metrics.measure(CONTROLLER, reconcile_inner(&pvc, &ctx)).await;
    if r.is_ok() {
        ctx.transfer_policy.on_success(pvc.as_ref());
    }
    r
}

/// The error policy: fatal errors wait for a change, transient ones back off.
pub fn error_policy(pvc: Arc<PersistentVolumeClaim>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.transfer_policy.on_error(pvc.as_ref(), err)
}

async fn reconcile_inner(pvc: &PersistentVolumeClaim, ctx: &Context) -> Result<Requeue> {
    // read
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let importer_pod = cached_pod(ctx, &ns, &naming::importer_pod(&name));
    let upload_pod = cached_pod(ctx, &ns, &naming::upload_server(&name));
    let (clone_source, clone_source_pod) = match TransferRequest::of(pvc.annotations()) {
        Some(TransferRequest::Clone { namespace, name: source }) => (
            ctx.stores.pvcs.get(&ObjectRef::new(&source).within(&namespace)),
            cached_pod(ctx, &namespace, &naming::clone_source_pod(&pvc.uid().unwrap_or_default())),
        ),
        _ => (None, None),
    };
    let config = ctx.worker_config();
    let class = class_of(pvc);
    let scratch_class = config.scratch_class.clone().or(class.clone());
    let observed = Observed {
        pvc,
        importer_pod: importer_pod.as_deref(),
        upload_pod: upload_pod.as_deref(),
        clone_source: clone_source.as_deref(),
        clone_source_pod: clone_source_pod.as_deref(),
        config: &config,
        overhead: ctx.overhead(class.as_deref()),
        scratch_overhead: ctx.overhead(scratch_class.as_deref()),
    };
    // plan
    let plan = plan::plan(&observed)?;
    // apply
    for action in plan.actions {
        apply(ctx, &observed, action).await?;
    }
    Ok(plan.requeue.map_or_else(Requeue::await_change, Requeue::requeue))
}

/// Executes one action of the plan for `o.pvc`.
async fn apply(ctx: &Context, o: &Observed<'_>, action: Action) -> Result<()> {
    let pvc = o.pvc;
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    match action {
        Action::DeletePod { namespace, name } => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
            delete_if_present(&pods, &name).await.map_err(kube(format!("deleting pod {namespace}/{name}")))?;
        }
        Action::CreateImporter { pod, scratch } => {
            if let Some(created) = create(ctx, &ns, pod.as_ref()).await?
                && let Some(s) = scratch
            {
                create(ctx, &ns, &pods::owned_by(*s, &created)).await?;
            }
        }
        Action::StartUploadServer => start_upload_server(ctx, o, &ns, &name).await?,
        Action::DeleteUploadSecret => {
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            delete_if_present(&secrets, &pods::upload_tls_secret(&name))
                .await
                .map_err(kube(format!("deleting Secret {ns}/{}", naming::upload_server(&name))))?;
        }
        Action::StartCloneSource { source } => start_clone_source(ctx, pvc, o.config, &source).await?,
        Action::UpdateState { changes, labels } => patch_state(ctx, pvc, &changes, &labels).await?,
    }
    Ok(())
}

/// Issues the upload server's certificate, then creates its TLS Secret, Service, pod and scratch PVC.
async fn start_upload_server(ctx: &Context, o: &Observed<'_>, ns: &str, name: &str) -> Result<()> {
    let pvc = o.pvc;
    let server = naming::upload_server(name);
    let dns = vec![format!("{server}.{ns}.svc"), format!("{server}.{ns}"), server.clone()];
    let leaf = ctx.pki.server_ca.sign_server(dns)?;
    let mut secret = certs::tls_secret(
        &pods::upload_tls_secret(name),
        &leaf.cert_pem,
        &leaf.key_pem,
        Some(&ctx.pki.client_ca.cert_pem),
    );
    secret.metadata.owner_references = pvc.controller_owner_ref(&()).map(|o| vec![o]);
    replace_secret(ctx, ns, &secret).await?;
    let svc: Service = pods::upload_service(pvc);
    create(ctx, ns, &svc).await?;
    let want = pods::upload_pod(pvc, o.config, o.overhead, &leaf.not_after)?;
    if let Some(pod) = create(ctx, ns, &want).await? {
        let s = pods::scratch_pvc(pvc, o.config, o.overhead, o.scratch_overhead)?;
        create(ctx, ns, &pods::owned_by(s, &pod)).await?;
    }
    Ok(())
}

fn random_token() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Creates the clone-source pod with a fresh token and, when it was created, the token Secret beside it, the
/// target's header Secret and the claim's clone annotations.
async fn start_clone_source(
    ctx: &Context,
    pvc: &PersistentVolumeClaim,
    cfg: &WorkerConfig,
    source: &PersistentVolumeClaim,
) -> Result<()> {
    let src_ns = source.namespace().unwrap_or_default();
    let src_pod_name = naming::clone_source_pod(&pvc.uid().unwrap_or_default());
    let token = random_token();
    let want = pods::clone_source_pod(pvc, source, cfg, &src_pod_name);
    if let Some(created) = create(ctx, &src_ns, &want).await? {
        let owner = created.controller_owner_ref(&()).map(|mut o| {
            o.controller = Some(false);
            vec![o]
        });
        create(ctx, &src_ns, &pods::token_secret(&src_pod_name, CLONE_TOKEN_KEY, token.clone(), owner)).await?;
        let header = pods::token_secret(
            &pods::clone_header_secret(&pvc.name_any()),
            "header",
            format!("Authorization: Bearer {token}"),
            pvc.controller_owner_ref(&()).map(|o| vec![o]),
        );
        replace_secret(ctx, &pvc.namespace().unwrap_or_default(), &header).await?;
        let mut changes = StateChanges::default();
        changes.clone_source(&src_pod_name).pending_unless(pvc.annotations());
        patch_state(ctx, pvc, &changes, &Default::default()).await?;
    }
    Ok(())
}

/// Merge-patches the PVC's worker state (changes already in place are dropped) and adds `labels`; no request
/// when nothing changes.
async fn patch_state(
    ctx: &Context,
    pvc: &PersistentVolumeClaim,
    changes: &StateChanges,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    let changes = changes.clone().without_unchanged(pvc.annotations());
    if changes.is_empty() && labels.is_empty() {
        return Ok(());
    }
    let mut meta = serde_json::json!({ "annotations": changes.as_map() });
    if !labels.is_empty() {
        meta["labels"] = serde_json::to_value(labels)?;
    }
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    pvcs.patch(&name, &PatchParams::default(), &Patch::Merge(&serde_json::json!({ "metadata": meta })))
        .await
        .map_err(kube(format!("annotating PVC {ns}/{name}")))?;
    Ok(())
}

/// Creates `secret` in `ns`, or replaces the one an earlier attempt left (fresh certificate or token).
async fn replace_secret(ctx: &Context, ns: &str, secret: &Secret) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let name = secret.name_any();
    create_or_replace(&secrets, &name, secret).await.map_err(kube(format!("replacing Secret {ns}/{name}")))
}

/// Creates `obj` in `ns`; `None` when it exists already.
async fn create<K>(ctx: &Context, ns: &str, obj: &K) -> Result<Option<K>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    create_if_absent(&api, obj).await.map_err(kube(format!("creating {} {ns}/{}", K::kind(&()), obj.name_any())))
}
