//! The worker reconciler (upstream's import/upload/clone controllers): for every PVC with CDI's annotations it
//! runs the worker pods and mirrors their state into the PVC's annotations (`storage.pod.phase`, restarts, the
//! Running condition, scratch/direct-I/O/fatal flags), which the DataVolume reconciler turns into status.
//!
//! Read (PVC, pods from caches) → plan ([`observe_pod`] is pure: pod status → annotation changes + whether to
//! delete the pod) → apply (create/delete pods, patch annotations).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crds::cdi::consts::{ann, message, reason};
use crds::cdi::naming;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use rand::RngCore;

use crate::certs;
use crate::context::Context;
use crate::error::{self, Error, Result};
use crate::status::simplify_message;
use crate::worker::{self, CLONE_TOKEN_KEY, CloneEndpoint, ImportOptions, Work};

/// Requeue while a worker pod is active: the pod cache may lag behind the event that triggered a reconcile.
const ACTIVE_REQUEUE: Duration = Duration::from_secs(3);

/// Which worker a pod is (decides readiness handling and success message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerKind {
    /// Importer (also the clone target).
    Importer,
    /// Upload server.
    Upload,
}

/// Annotation changes: `Some(v)` sets, `None` removes.
pub type AnnotationChanges = BTreeMap<String, Option<String>>;

/// What to do after looking at a worker pod.
#[derive(Debug, Default, PartialEq)]
pub struct Outcome {
    /// PVC annotation changes.
    pub annotations: AnnotationChanges,
    /// PVC labels to add (from the termination message).
    pub labels: BTreeMap<String, String>,
    /// Delete the pod (finished, needs scratch or direct I/O, or failed as a whole).
    pub delete_pod: bool,
}

/// The success termination message (`specs/cdi.md` §2.5); plain text messages are failures.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminationJson {
    #[serde(default)]
    scratch_space_required: bool,
    #[serde(default)]
    preallocation_applied: bool,
    #[serde(default)]
    deadline_passed: bool,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    message: String,
}

fn first_line(s: &str) -> String {
    s.trim().replace('\n', " ")
}

fn running(a: &mut AnnotationChanges, status: bool, reason: &str, msg: &str) {
    a.insert(ann::RUNNING_CONDITION.into(), Some(status.to_string()));
    a.insert(ann::RUNNING_CONDITION_REASON.into(), Some(reason.to_owned()));
    a.insert(ann::RUNNING_CONDITION_MESSAGE.into(), Some(msg.to_owned()));
}

fn oom_killed(cs: &ContainerStatus) -> bool {
    [cs.state.as_ref(), cs.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .any(|t| t.reason.as_deref() == Some("OOMKilled"))
}

/// Pure: the annotation changes and actions implied by `pod`'s status for `pvc`.
pub fn observe_pod(pvc: &PersistentVolumeClaim, pod: &Pod, kind: WorkerKind) -> Outcome {
    let mut out = Outcome::default();
    let a = &mut out.annotations;
    let old = pvc.annotations();
    let status = pod.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_else(|| "Pending".into());
    let cs = status.container_statuses.as_ref().and_then(|c| c.first()).cloned();
    if let Some(cs) = &cs {
        let stored: i32 = old.get(ann::POD_RESTARTS).and_then(|v| v.parse().ok()).unwrap_or(0);
        if cs.restart_count > stored {
            a.insert(ann::POD_RESTARTS.into(), Some(cs.restart_count.to_string()));
        }
        if oom_killed(cs) && phase != "Succeeded" {
            a.insert(ann::REQUIRES_DIRECT_IO.into(), Some("true".into()));
            out.delete_pod = true;
            return out;
        }
    }
    let terminated = cs.as_ref().and_then(|c| c.state.as_ref()?.terminated.clone());
    match phase.as_str() {
        "Succeeded" => {
            let raw = terminated.as_ref().and_then(|t| t.message.clone()).unwrap_or_default();
            let term: TerminationJson = serde_json::from_str(raw.trim())
                .unwrap_or(TerminationJson { message: first_line(&raw), ..Default::default() });
            out.delete_pod = true;
            if term.scratch_space_required {
                a.insert(ann::REQUIRES_SCRATCH.into(), Some("true".into()));
                running(a, false, reason::SCRATCH_REQUIRED, message::SCRATCH_REQUIRED);
            } else if term.message.contains(message::CHECKSUM_MISMATCH) {
                a.insert(ann::POD_PHASE.into(), Some("Failed".into()));
                a.insert(ann::FATAL_ERROR.into(), Some("true".into()));
                running(a, false, reason::CHECKSUM_ERROR, &term.message);
            } else if term.deadline_passed {
                a.insert(ann::POD_PHASE.into(), None);
                a.insert(ann::POD_READY.into(), Some("false".into()));
            } else {
                a.insert(ann::POD_PHASE.into(), Some("Succeeded".into()));
                if kind == WorkerKind::Upload {
                    a.insert(ann::POD_READY.into(), Some("false".into()));
                }
                let why =
                    terminated.as_ref().and_then(|t| t.reason.clone()).unwrap_or_else(|| reason::COMPLETED.into());
                running(a, false, &why, &term.message);
                if term.preallocation_applied || term.message.contains("Preallocation applied") {
                    a.insert(ann::PREALLOCATION_APPLIED.into(), Some("true".into()));
                }
                out.labels = term.labels;
                out.delete_pod = old.get(ann::RETAIN_AFTER_COMPLETION).is_none_or(|v| v != "true");
            }
        }
        "Failed" => {
            a.insert(ann::POD_PHASE.into(), Some("Failed".into()));
            let msg = terminated.as_ref().and_then(|t| t.message.clone()).map(|m| simplify_message(&first_line(&m)));
            let why = terminated.as_ref().and_then(|t| t.reason.clone()).unwrap_or_else(|| reason::ERROR.into());
            running(a, false, &why, &msg.unwrap_or_default());
            out.delete_pod = true;
        }
        _ => {
            a.insert(ann::POD_PHASE.into(), Some(phase.clone()));
            if kind == WorkerKind::Upload {
                let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
                a.insert(ann::POD_READY.into(), Some(ready.to_string()));
            }
            let unschedulable = status.conditions.iter().flatten().any(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            });
            let state = cs.as_ref().and_then(|c| c.state.clone()).unwrap_or_default();
            let last = cs.as_ref().and_then(|c| c.last_state.as_ref()?.terminated.clone());
            if unschedulable {
                running(a, false, reason::UNSCHEDULABLE, message::IMPORTER_UNSCHEDULABLE);
            } else if state.running.is_some() {
                running(a, true, reason::POD_RUNNING, "");
            } else if let Some(w) = state.waiting.as_ref().filter(|w| w.reason.as_deref() != Some("CrashLoopBackOff")) {
                running(a, false, w.reason.as_deref().unwrap_or_default(), w.message.as_deref().unwrap_or_default());
            } else if let Some(t) = last {
                let msg = simplify_message(&first_line(t.message.as_deref().unwrap_or_default()));
                running(a, false, t.reason.as_deref().unwrap_or(reason::ERROR), &msg);
            }
        }
    }
    // Drop changes that are already in place.
    out.annotations.retain(|k, v| old.get(k) != v.as_ref());
    out
}

fn pvc_api(ctx: &Context, ns: &str) -> Api<PersistentVolumeClaim> {
    Api::namespaced(ctx.client.clone(), ns)
}

async fn apply_outcome(ctx: &Context, pvc: &PersistentVolumeClaim, pod: &Pod, out: Outcome) -> Result<()> {
    patch_metadata(ctx, pvc, out.annotations, &out.labels).await?;
    if out.delete_pod {
        delete_pod(ctx, &pvc.namespace().unwrap_or_default(), &pod.name_any()).await?;
    }
    Ok(())
}

async fn annotate(ctx: &Context, pvc: &PersistentVolumeClaim, changes: AnnotationChanges) -> Result<()> {
    patch_metadata(ctx, pvc, changes, &BTreeMap::new()).await
}

/// Merge-patches the PVC's annotations (changes already in place are dropped) and adds `labels`; no request
/// when nothing changes.
async fn patch_metadata(
    ctx: &Context,
    pvc: &PersistentVolumeClaim,
    changes: AnnotationChanges,
    labels: &BTreeMap<String, String>,
) -> Result<()> {
    let old = pvc.annotations();
    let changes: AnnotationChanges = changes.into_iter().filter(|(k, v)| old.get(k) != v.as_ref()).collect();
    if changes.is_empty() && labels.is_empty() {
        return Ok(());
    }
    let mut meta = serde_json::json!({ "annotations": changes });
    if !labels.is_empty() {
        meta["labels"] = serde_json::to_value(labels)?;
    }
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    pvc_api(ctx, &ns)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&serde_json::json!({ "metadata": meta })))
        .await
        .map_err(error::kube(format!("annotating PVC {ns}/{name}")))?;
    Ok(())
}

/// Creates `secret` in `ns`, or replaces the one an earlier attempt left (fresh certificate or token).
async fn create_or_replace_secret(ctx: &Context, ns: &str, secret: &Secret) -> Result<()> {
    if create(ctx, ns, secret).await?.is_none() {
        let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
        secrets
            .replace(&secret.name_any(), &PostParams::default(), secret)
            .await
            .map_err(error::kube(format!("replacing Secret {ns}/{}", secret.name_any())))?;
    }
    Ok(())
}

async fn delete_pod(ctx: &Context, ns: &str, name: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(e) if error::is_not_found(&e) => Ok(()),
        Err(e) => Err(error::kube(format!("deleting pod {ns}/{name}"))(e)),
    }
}

async fn create<K>(ctx: &Context, ns: &str, obj: &K) -> Result<Option<K>>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    match api.create(&PostParams::default(), obj).await {
        Ok(o) => Ok(Some(o)),
        Err(e) if error::is_conflict(&e) => Ok(None),
        Err(e) => Err(error::kube(format!("creating {} {ns}/{}", K::kind(&()), obj.name_any()))(e)),
    }
}

fn cached_pod(ctx: &Context, ns: &str, name: &str) -> Option<Arc<Pod>> {
    ctx.stores.pods.get(&ObjectRef::new(name).within(ns))
}

fn is_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn class_of(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone())
}

/// Reconciles one PVC.
pub async fn reconcile(pvc: Arc<PersistentVolumeClaim>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let r = reconcile_inner(&pvc, &ctx).await;
    ctx.metrics.observe("worker", started.elapsed().as_secs_f64(), r.is_ok());
    r
}

async fn reconcile_inner(pvc: &PersistentVolumeClaim, ctx: &Context) -> Result<Action> {
    let Some(work) = Work::of(pvc) else { return Ok(Action::await_change()) };
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let a = pvc.annotations();
    let done =
        a.get(ann::POD_PHASE).is_some_and(|p| p == "Succeeded") || a.get(ann::FATAL_ERROR).is_some_and(|v| v == "true");
    if pvc.meta().deletion_timestamp.is_some() || done {
        let retain = a.get(ann::RETAIN_AFTER_COMPLETION).is_some_and(|v| v == "true") && done;
        if !retain {
            for pod in [naming::importer_pod(&name), naming::upload_server(&name)] {
                if cached_pod(ctx, &ns, &pod).is_some() {
                    delete_pod(ctx, &ns, &pod).await?;
                }
            }
        }
        if let Work::Clone { namespace, .. } = &work {
            let src = naming::clone_source_pod(&pvc.uid().unwrap_or_default());
            if cached_pod(ctx, namespace, &src).is_some() {
                delete_pod(ctx, namespace, &src).await?;
            }
        }
        return Ok(Action::await_change());
    }
    if !is_bound(pvc) && !a.contains_key(ann::BIND_IMMEDIATE) {
        return Ok(Action::await_change());
    }
    match &work {
        Work::Import => import(ctx, pvc, None).await,
        Work::Upload => upload(ctx, pvc).await,
        Work::Clone { namespace, name: source } => clone(ctx, pvc, namespace, source).await,
    }
}

async fn import(ctx: &Context, pvc: &PersistentVolumeClaim, clone: Option<CloneEndpoint>) -> Result<Action> {
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let pod_name = naming::importer_pod(&name);
    let a = pvc.annotations();
    match cached_pod(ctx, &ns, &pod_name) {
        Some(pod) if pod.meta().deletion_timestamp.is_some() => Ok(Action::requeue(Duration::from_secs(2))),
        Some(pod) => {
            // A clone target whose source moved (new pod IP) must restart with the new endpoint.
            if let Some(c) = &clone {
                let endpoint = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.env.as_ref())
                    .and_then(|env| env.iter().find(|e| e.name == "IMPORTER_ENDPOINT"))
                    .and_then(|e| e.value.clone());
                if endpoint.as_deref() != Some(c.url.as_str()) {
                    delete_pod(ctx, &ns, &pod_name).await?;
                    return Ok(Action::requeue(Duration::from_secs(2)));
                }
            }
            let out = observe_pod(pvc, &pod, WorkerKind::Importer);
            apply_outcome(ctx, pvc, &pod, out).await?;
            Ok(Action::requeue(ACTIVE_REQUEUE))
        }
        None => {
            let cfg = ctx.worker_config();
            let class = class_of(pvc);
            let opts = ImportOptions {
                scratch: a.get(ann::REQUIRES_SCRATCH).is_some_and(|v| v == "true"),
                direct_io: a.get(ann::REQUIRES_DIRECT_IO).is_some_and(|v| v == "true"),
                clone,
                overhead: ctx.overhead(class.as_deref()),
            };
            let want = worker::importer_pod(pvc, &cfg, &opts);
            let created = create(ctx, &ns, &want).await?;
            if opts.scratch
                && let Some(pod) = &created
            {
                let scratch_class = cfg.scratch_class.clone().or(class.clone());
                let s = worker::scratch_pvc(pvc, &cfg, opts.overhead, ctx.overhead(scratch_class.as_deref()), pod)?;
                create(ctx, &ns, &s).await?;
            }
            let mut changes = AnnotationChanges::new();
            changes.insert(ann::IMPORT_POD_NAME.into(), Some(pod_name));
            if !a.contains_key(ann::POD_PHASE) {
                changes.insert(ann::POD_PHASE.into(), Some("Pending".into()));
            }
            annotate(ctx, pvc, changes).await?;
            Ok(Action::requeue(ACTIVE_REQUEUE))
        }
    }
}

async fn upload(ctx: &Context, pvc: &PersistentVolumeClaim) -> Result<Action> {
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let server = naming::upload_server(&name);
    match cached_pod(ctx, &ns, &server) {
        Some(pod) if pod.meta().deletion_timestamp.is_some() => Ok(Action::requeue(Duration::from_secs(2))),
        Some(pod) => {
            let out = observe_pod(pvc, &pod, WorkerKind::Upload);
            let deadline = out.annotations.get(ann::POD_PHASE) == Some(&None) && out.delete_pod;
            apply_outcome(ctx, pvc, &pod, out).await?;
            if deadline {
                // Fresh certificates for the next server.
                let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
                match secrets.delete(&worker::upload_tls_secret(&name), &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if error::is_not_found(&e) => {}
                    Err(e) => return Err(error::kube(format!("deleting Secret {ns}/{server}"))(e)),
                }
            }
            Ok(Action::requeue(ACTIVE_REQUEUE))
        }
        None => {
            let cfg = ctx.worker_config();
            let class = class_of(pvc);
            let overhead = ctx.overhead(class.as_deref());
            let dns = vec![format!("{server}.{ns}.svc"), format!("{server}.{ns}"), server.clone()];
            let leaf = ctx.pki.server_ca.sign_server(dns)?;
            let mut secret = certs::tls_secret(
                &worker::upload_tls_secret(&name),
                &leaf.cert_pem,
                &leaf.key_pem,
                Some(&ctx.pki.client_ca.cert_pem),
            );
            secret.metadata.owner_references = pvc.controller_owner_ref(&()).map(|o| vec![o]);
            create_or_replace_secret(ctx, &ns, &secret).await?;
            let svc: Service = worker::upload_service(pvc);
            create(ctx, &ns, &svc).await?;
            let want = worker::upload_pod(pvc, &cfg, overhead, &leaf.not_after);
            if let Some(pod) = create(ctx, &ns, &want).await? {
                let scratch_class = cfg.scratch_class.clone().or(class.clone());
                let s = worker::scratch_pvc(pvc, &cfg, overhead, ctx.overhead(scratch_class.as_deref()), &pod)?;
                create(ctx, &ns, &s).await?;
            }
            let mut changes = AnnotationChanges::new();
            if !pvc.annotations().contains_key(ann::POD_PHASE) {
                changes.insert(ann::POD_PHASE.into(), Some("Pending".into()));
            }
            changes.insert(ann::POD_READY.into(), Some("false".into()));
            annotate(ctx, pvc, changes).await?;
            Ok(Action::requeue(ACTIVE_REQUEUE))
        }
    }
}

fn random_token() -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn token_secret(
    name: &str,
    key: &str,
    value: String,
    owner: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
) -> Secret {
    Secret {
        metadata: ObjectMeta { name: Some(name.into()), owner_references: owner, ..Default::default() },
        data: Some(BTreeMap::from([(key.to_owned(), ByteString(value.into_bytes()))])),
        ..Default::default()
    }
}

/// Name of the Secret (target namespace) holding the clone target's `Authorization` header.
pub fn clone_header_secret(pvc: &str) -> String {
    naming::resource_name(pvc, "clone-token")
}

async fn clone(ctx: &Context, pvc: &PersistentVolumeClaim, src_ns: &str, src_name: &str) -> Result<Action> {
    let ns = pvc.namespace().unwrap_or_default();
    let name = pvc.name_any();
    let Some(source) = ctx.stores.pvcs.get(&ObjectRef::new(src_name).within(src_ns)) else {
        let mut changes = AnnotationChanges::new();
        running(&mut changes, false, reason::ERROR, &format!("source PVC {src_ns}/{src_name} not found"));
        annotate(ctx, pvc, changes).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    };
    let src_pod_name = naming::clone_source_pod(&pvc.uid().unwrap_or_default());
    match cached_pod(ctx, src_ns, &src_pod_name) {
        None => {
            let cfg = ctx.worker_config();
            let token = random_token();
            let want = worker::clone_source_pod(pvc, &source, &cfg, &src_pod_name);
            if let Some(created) = create(ctx, src_ns, &want).await? {
                let owner = created.controller_owner_ref(&()).map(|mut o| {
                    o.controller = Some(false);
                    vec![o]
                });
                create(ctx, src_ns, &token_secret(&src_pod_name, CLONE_TOKEN_KEY, token.clone(), owner)).await?;
                let header = token_secret(
                    &clone_header_secret(&name),
                    "header",
                    format!("Authorization: Bearer {token}"),
                    pvc.controller_owner_ref(&()).map(|o| vec![o]),
                );
                create_or_replace_secret(ctx, &ns, &header).await?;
                let mut changes = AnnotationChanges::new();
                changes.insert(ann::SOURCE_CLONE_POD_NAME.into(), Some(src_pod_name.clone()));
                changes.insert(ann::CLONE_TYPE.into(), Some("copy".into()));
                if !pvc.annotations().contains_key(ann::POD_PHASE) {
                    changes.insert(ann::POD_PHASE.into(), Some("Pending".into()));
                }
                annotate(ctx, pvc, changes).await?;
            }
            Ok(Action::requeue(Duration::from_secs(2)))
        }
        Some(src) => {
            let st = src.status.clone().unwrap_or_default();
            if matches!(st.phase.as_deref(), Some("Succeeded" | "Failed")) {
                // The source server ended (idle exit or crash) before the target finished: start over.
                delete_pod(ctx, src_ns, &src_pod_name).await?;
                return Ok(Action::requeue(Duration::from_secs(2)));
            }
            let ready = st.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
            match (ready, st.pod_ip) {
                (true, Some(ip)) if src.meta().deletion_timestamp.is_none() => {
                    let endpoint = CloneEndpoint {
                        url: format!("https://{ip}:{}/disk.img", crds::cdi::consts::WORKER_PORT),
                        header_secret: clone_header_secret(&name),
                    };
                    import(ctx, pvc, Some(endpoint)).await
                }
                _ => Ok(Action::requeue(Duration::from_secs(2))),
            }
        }
    }
}

/// Retry policy: back off 5 s on errors.
pub fn error_policy(_pvc: Arc<PersistentVolumeClaim>, err: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(error = %err, "worker reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, PodStatus,
    };

    fn pvc(ann_: &[(&str, &str)]) -> PersistentVolumeClaim {
        let mut p = PersistentVolumeClaim::default();
        p.metadata.annotations = Some(ann_.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect());
        p
    }

    fn pod(phase: &str, state: ContainerState, last: Option<ContainerState>, restarts: i32) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    state: Some(state),
                    last_state: last,
                    restart_count: restarts,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn terminated(exit: i32, reason: &str, msg: &str) -> ContainerState {
        ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: exit,
                reason: Some(reason.into()),
                message: Some(msg.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn get<'a>(o: &'a Outcome, k: &str) -> Option<&'a str> {
        o.annotations.get(k).and_then(|v| v.as_deref())
    }

    #[test]
    fn success_records_completion_labels_and_deletes_the_pod() {
        let msg = r#"{"scratchSpaceRequired":false,"preallocationApplied":true,"labels":{"instancetype.kubevirt.io/default-instancetype":"u1.small"},"message":"Import Complete"}"#;
        let o =
            observe_pod(&pvc(&[]), &pod("Succeeded", terminated(0, "Completed", msg), None, 0), WorkerKind::Importer);
        assert_eq!(get(&o, ann::POD_PHASE), Some("Succeeded"));
        assert_eq!(get(&o, ann::RUNNING_CONDITION), Some("false"));
        assert_eq!(get(&o, ann::RUNNING_CONDITION_REASON), Some("Completed"));
        assert_eq!(get(&o, ann::RUNNING_CONDITION_MESSAGE), Some("Import Complete"));
        assert_eq!(get(&o, ann::PREALLOCATION_APPLIED), Some("true"));
        assert_eq!(o.labels["instancetype.kubevirt.io/default-instancetype"], "u1.small");
        assert!(o.delete_pod);
        let kept = observe_pod(
            &pvc(&[(ann::RETAIN_AFTER_COMPLETION, "true")]),
            &pod("Succeeded", terminated(0, "Completed", msg), None, 0),
            WorkerKind::Importer,
        );
        assert!(!kept.delete_pod);
    }

    #[test]
    fn checksum_mismatch_is_fatal_and_scratch_is_requested() {
        let msg = r#"{"message":"Unable to process data: checksum validation failed: checksum mismatch: expected sha256:aa, calculated sha256:bb"}"#;
        let o =
            observe_pod(&pvc(&[]), &pod("Succeeded", terminated(0, "Completed", msg), None, 0), WorkerKind::Importer);
        assert_eq!(get(&o, ann::POD_PHASE), Some("Failed"));
        assert_eq!(get(&o, ann::FATAL_ERROR), Some("true"));
        assert_eq!(get(&o, ann::RUNNING_CONDITION_REASON), Some("ChecksumError"));
        assert!(o.delete_pod);
        let s = observe_pod(
            &pvc(&[]),
            &pod(
                "Succeeded",
                terminated(0, "Completed", r#"{"scratchSpaceRequired":true,"message":"Import Complete"}"#),
                None,
                0,
            ),
            WorkerKind::Importer,
        );
        assert_eq!(get(&s, ann::REQUIRES_SCRATCH), Some("true"));
        assert_eq!(s.annotations.get(ann::POD_PHASE), None);
        assert!(s.delete_pod);
    }

    #[test]
    fn restarting_pod_reports_error_and_restarts() {
        let waiting = ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                message: Some("back-off".into()),
            }),
            ..Default::default()
        };
        let last = terminated(
            1,
            "Error",
            "Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found\n",
        );
        let o = observe_pod(
            &pvc(&[(ann::POD_RESTARTS, "1")]),
            &pod("Running", waiting, Some(last), 2),
            WorkerKind::Importer,
        );
        assert_eq!(get(&o, ann::POD_PHASE), Some("Running"));
        assert_eq!(get(&o, ann::POD_RESTARTS), Some("2"));
        assert_eq!(get(&o, ann::RUNNING_CONDITION), Some("false"));
        assert_eq!(get(&o, ann::RUNNING_CONDITION_REASON), Some("Error"));
        assert_eq!(
            get(&o, ann::RUNNING_CONDITION_MESSAGE),
            Some("Unable to connect to http data source: expected status code 200, got 404. Status: 404 Not Found")
        );
        assert!(!o.delete_pod);
        let small = terminated(
            1,
            "Error",
            "Unable to process data: virtual image size 9 is larger than the reported available storage 1. A larger PVC is required",
        );
        let o =
            observe_pod(&pvc(&[]), &pod("Running", ContainerState::default(), Some(small), 1), WorkerKind::Importer);
        assert_eq!(get(&o, ann::RUNNING_CONDITION_MESSAGE), Some("DataVolume too small to contain image"));
    }

    #[test]
    fn running_and_oom() {
        let run = ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() };
        let o = observe_pod(&pvc(&[]), &pod("Running", run.clone(), None, 0), WorkerKind::Importer);
        assert_eq!(get(&o, ann::RUNNING_CONDITION), Some("true"));
        assert_eq!(get(&o, ann::RUNNING_CONDITION_REASON), Some("Pod is running"));
        let again = observe_pod(
            &pvc(&[
                (ann::POD_PHASE, "Running"),
                (ann::RUNNING_CONDITION, "true"),
                (ann::RUNNING_CONDITION_REASON, "Pod is running"),
                (ann::RUNNING_CONDITION_MESSAGE, ""),
            ]),
            &pod("Running", run.clone(), None, 0),
            WorkerKind::Importer,
        );
        assert!(again.annotations.is_empty(), "{:?}", again.annotations);
        let oom = observe_pod(
            &pvc(&[]),
            &pod("Running", run, Some(terminated(137, "OOMKilled", "")), 1),
            WorkerKind::Importer,
        );
        assert_eq!(get(&oom, ann::REQUIRES_DIRECT_IO), Some("true"));
        assert!(oom.delete_pod);
    }
}
