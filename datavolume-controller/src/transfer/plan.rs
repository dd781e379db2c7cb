//! The transfer reconciler's decisions, as pure functions: what a claim's worker pods say ([`observe_pod`]) and
//! what to do next ([`plan`]), from the claim and the cached pods alone. [`super::apply`] executes the plan.

use std::collections::BTreeMap;
use std::time::Duration;

use contracts::cdi::consts::{message, reason};
use contracts::cdi::termination::{first_line, simplify_failure};
use contracts::cdi::{
    ClaimOptions, ImportSource, StateChanges, TerminationMessage, TransferRequest, WorkerPhase, WorkerState,
};
use contracts::quantity::InvalidQuantity;
use crds::cdi::naming;
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod};
use kube::{Resource, ResourceExt};

use super::pods::{self, CloneEndpoint, ImportOptions, WorkerConfig};
use contracts::cdi::env::var;

/// Requeue while a worker pod is active: the pod cache may lag behind the event that triggered a reconcile.
pub const ACTIVE_REQUEUE: Duration = Duration::from_secs(3);
/// Requeue while a pod is going away or a clone source is getting ready.
pub const SHORT_REQUEUE: Duration = Duration::from_secs(2);
/// Requeue while a clone's source claim is missing.
pub const MISSING_SOURCE_REQUEUE: Duration = Duration::from_secs(10);

/// Which worker a pod is (decides readiness handling and the success message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerKind {
    /// Importer (also the clone target).
    Importer,
    /// Upload server.
    Upload,
}

/// What a worker pod's status says, for its claim.
#[derive(Debug, Default, PartialEq)]
pub struct PodOutcome {
    /// Worker-state changes (already-in-place ones dropped).
    pub changes: StateChanges,
    /// PVC labels to add (from the termination message).
    pub labels: BTreeMap<String, String>,
    /// Delete the pod (finished, needs scratch or direct I/O, or failed as a whole).
    pub delete_pod: bool,
    /// An upload server ended because its deadline passed: its certificate goes with it.
    pub deadline_passed: bool,
}

fn oom_killed(cs: &ContainerStatus) -> bool {
    [cs.state.as_ref(), cs.last_state.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|s| s.terminated.as_ref())
        .any(|t| t.reason.as_deref() == Some("OOMKilled"))
}

/// Pure: the worker-state changes and actions implied by `pod`'s status for `pvc`.
pub fn observe_pod(pvc: &PersistentVolumeClaim, pod: &Pod, kind: WorkerKind) -> PodOutcome {
    let mut out = PodOutcome::default();
    let old = pvc.annotations();
    let state = WorkerState::of(old);
    let c = &mut out.changes;
    let status = pod.status.clone().unwrap_or_default();
    let phase = WorkerPhase::parse(status.phase.as_deref().unwrap_or("Pending"));
    let cs = status.container_statuses.as_ref().and_then(|c| c.first()).cloned();
    if let Some(cs) = &cs {
        if cs.restart_count > state.restarts {
            c.restarts(cs.restart_count);
        }
        if oom_killed(cs) && phase != WorkerPhase::Succeeded {
            c.requires_direct_io();
            out.delete_pod = true;
            out.changes = out.changes.without_unchanged(old);
            return out;
        }
    }
    let terminated = cs.as_ref().and_then(|c| c.state.as_ref()?.terminated.clone());
    match phase {
        WorkerPhase::Succeeded => {
            let term = TerminationMessage::parse(terminated.as_ref().and_then(|t| t.message.as_deref()).unwrap_or(""));
            out.delete_pod = true;
            if term.scratch_space_required == Some(true) {
                c.requires_scratch().running(false, reason::SCRATCH_REQUIRED, message::SCRATCH_REQUIRED);
            } else if term.is_checksum_failure() {
                c.phase(Some(WorkerPhase::Failed)).fatal_error().running(false, reason::CHECKSUM_ERROR, &term.message);
            } else if term.deadline_passed == Some(true) {
                c.phase(None).ready(false);
                out.deadline_passed = state.phase.is_some();
            } else {
                c.phase(Some(WorkerPhase::Succeeded));
                if kind == WorkerKind::Upload {
                    c.ready(false);
                }
                let why =
                    terminated.as_ref().and_then(|t| t.reason.clone()).unwrap_or_else(|| reason::COMPLETED.into());
                c.running(false, &why, &term.message);
                if term.preallocated() {
                    c.preallocation_applied();
                }
                out.labels = term.labels;
                out.delete_pod = !ClaimOptions::of(old).retain_after_completion;
            }
        }
        WorkerPhase::Failed => {
            let msg = terminated.as_ref().and_then(|t| t.message.as_deref()).map(|m| simplify_failure(&first_line(m)));
            let why = terminated.as_ref().and_then(|t| t.reason.clone()).unwrap_or_else(|| reason::ERROR.into());
            c.phase(Some(WorkerPhase::Failed)).running(false, &why, &msg.unwrap_or_default());
            out.delete_pod = true;
        }
        WorkerPhase::Pending | WorkerPhase::Running | WorkerPhase::Unknown => {
            c.phase(Some(phase));
            if kind == WorkerKind::Upload {
                let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
                c.ready(ready);
            }
            let unschedulable = status.conditions.iter().flatten().any(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            });
            let container = cs.as_ref().and_then(|c| c.state.clone()).unwrap_or_default();
            let last = cs.as_ref().and_then(|c| c.last_state.as_ref()?.terminated.clone());
            if unschedulable {
                c.running(false, reason::UNSCHEDULABLE, message::IMPORTER_UNSCHEDULABLE);
            } else if container.running.is_some() {
                c.running(true, reason::POD_RUNNING, "");
            } else if let Some(w) =
                container.waiting.as_ref().filter(|w| w.reason.as_deref() != Some("CrashLoopBackOff"))
            {
                c.running(false, w.reason.as_deref().unwrap_or_default(), w.message.as_deref().unwrap_or_default());
            } else if let Some(t) = last {
                let msg = simplify_failure(&first_line(t.message.as_deref().unwrap_or_default()));
                c.running(false, t.reason.as_deref().unwrap_or(reason::ERROR), &msg);
            }
        }
    }
    out.changes = out.changes.without_unchanged(old);
    out
}

/// What the reconciler read for one claim: the claim and the cached objects around it.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The claim.
    pub pvc: &'a PersistentVolumeClaim,
    /// Its importer pod (`importer-<pvc>`), if cached.
    pub importer_pod: Option<&'a Pod>,
    /// Its upload server pod (`cdi-upload-<pvc>`), if cached.
    pub upload_pod: Option<&'a Pod>,
    /// For a clone: the source claim, if cached.
    pub clone_source: Option<&'a PersistentVolumeClaim>,
    /// For a clone: the clone-source pod, if cached.
    pub clone_source_pod: Option<&'a Pod>,
    /// Worker settings.
    pub config: &'a WorkerConfig,
    /// Filesystem overhead of the claim's storage class.
    pub overhead: f64,
    /// Filesystem overhead of the scratch storage class.
    pub scratch_overhead: f64,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Delete a worker pod (gone already is fine).
    DeletePod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// Create the importer pod and, when it was created, this scratch PVC owned by it.
    CreateImporter {
        /// The pod.
        pod: Box<Pod>,
        /// The scratch PVC, when the import needs one.
        scratch: Option<Box<PersistentVolumeClaim>>,
    },
    /// Issue the upload server's certificate, then create its TLS Secret, Service, pod and (when the pod was
    /// created) its scratch PVC.
    StartUploadServer,
    /// Delete the upload server's TLS Secret (the next server gets a fresh certificate).
    DeleteUploadSecret,
    /// Create the clone-source pod serving `source` with a fresh token and, when created, the token Secrets and
    /// the claim's clone annotations.
    StartCloneSource {
        /// The source claim.
        source: Box<PersistentVolumeClaim>,
    },
    /// Patch the claim's worker state and add labels (nothing is sent when both are empty).
    UpdateState {
        /// Worker-state changes.
        changes: StateChanges,
        /// Labels to add.
        labels: BTreeMap<String, String>,
    },
}

/// The plan for one claim: actions in order, then when to look again (`None`: on the next change).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// When to reconcile again regardless of events.
    pub requeue: Option<Duration>,
}

impl Plan {
    fn wait() -> Plan {
        Plan::default()
    }

    fn after(requeue: Duration, actions: Vec<Action>) -> Plan {
        Plan { actions, requeue: Some(requeue) }
    }
}

fn is_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn deleting(obj: &impl Resource) -> bool {
    obj.meta().deletion_timestamp.is_some()
}

fn update(changes: StateChanges) -> Action {
    Action::UpdateState { changes, labels: BTreeMap::new() }
}

fn observe(pvc: &PersistentVolumeClaim, pod: &Pod, kind: WorkerKind) -> Vec<Action> {
    let out = observe_pod(pvc, pod, kind);
    let mut actions = vec![Action::UpdateState { changes: out.changes, labels: out.labels }];
    if out.delete_pod {
        actions.push(Action::DeletePod { namespace: pvc.namespace().unwrap_or_default(), name: pod.name_any() });
    }
    if out.deadline_passed {
        actions.push(Action::DeleteUploadSecret);
    }
    actions
}

/// Pure: what to do for the claim in `o`.
pub fn plan(o: &Observed) -> Result<Plan, InvalidQuantity> {
    let pvc = o.pvc;
    let a = pvc.annotations();
    let Some(request) = TransferRequest::of(a) else { return Ok(Plan::wait()) };
    let ns = pvc.namespace().unwrap_or_default();
    let state = WorkerState::of(a);
    let options = ClaimOptions::of(a);
    if deleting(pvc) || state.is_done() {
        let mut actions = Vec::new();
        if !(options.retain_after_completion && state.is_done()) {
            for pod in [o.importer_pod, o.upload_pod].into_iter().flatten() {
                actions.push(Action::DeletePod { namespace: ns.clone(), name: pod.name_any() });
            }
        }
        if let (TransferRequest::Clone { namespace, .. }, Some(src)) = (&request, o.clone_source_pod) {
            actions.push(Action::DeletePod { namespace: namespace.clone(), name: src.name_any() });
        }
        return Ok(Plan { actions, requeue: None });
    }
    if !is_bound(pvc) && !options.bind_immediate {
        return Ok(Plan::wait());
    }
    match &request {
        TransferRequest::Import(source) => import(o, source, None),
        TransferRequest::Upload => upload(o),
        TransferRequest::Clone { namespace, name } => clone(o, namespace, name),
    }
}

fn import(o: &Observed, source: &ImportSource, clone: Option<CloneEndpoint>) -> Result<Plan, InvalidQuantity> {
    let pvc = o.pvc;
    match o.importer_pod {
        Some(pod) if deleting(pod) => Ok(Plan::after(SHORT_REQUEUE, vec![])),
        Some(pod) => {
            // A clone target whose source moved (new pod IP) must restart with the new endpoint.
            if let Some(c) = &clone {
                let endpoint = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.env.as_ref())
                    .and_then(|env| env.iter().find(|e| e.name == var::IMPORTER_ENDPOINT))
                    .and_then(|e| e.value.as_deref());
                if endpoint != Some(c.url.as_str()) {
                    let delete =
                        Action::DeletePod { namespace: pvc.namespace().unwrap_or_default(), name: pod.name_any() };
                    return Ok(Plan::after(SHORT_REQUEUE, vec![delete]));
                }
            }
            Ok(Plan::after(ACTIVE_REQUEUE, observe(pvc, pod, WorkerKind::Importer)))
        }
        None => {
            let state = WorkerState::of(pvc.annotations());
            let opts = ImportOptions {
                scratch: state.requires_scratch,
                direct_io: state.requires_direct_io,
                clone,
                overhead: o.overhead,
            };
            let pod = pods::importer_pod(pvc, source, o.config, &opts)?;
            let scratch = opts
                .scratch
                .then(|| pods::scratch_pvc(pvc, o.config, opts.overhead, o.scratch_overhead))
                .transpose()?;
            let mut changes = StateChanges::default();
            changes.import_pod_name(&naming::importer_pod(&pvc.name_any())).pending_unless(pvc.annotations());
            Ok(Plan::after(
                ACTIVE_REQUEUE,
                vec![Action::CreateImporter { pod: Box::new(pod), scratch: scratch.map(Box::new) }, update(changes)],
            ))
        }
    }
}

fn upload(o: &Observed) -> Result<Plan, InvalidQuantity> {
    let pvc = o.pvc;
    Ok(match o.upload_pod {
        Some(pod) if deleting(pod) => Plan::after(SHORT_REQUEUE, vec![]),
        Some(pod) => Plan::after(ACTIVE_REQUEUE, observe(pvc, pod, WorkerKind::Upload)),
        None => {
            let mut changes = StateChanges::default();
            changes.pending_unless(pvc.annotations()).ready(false);
            Plan::after(ACTIVE_REQUEUE, vec![Action::StartUploadServer, update(changes)])
        }
    })
}

fn clone(o: &Observed, src_ns: &str, src_name: &str) -> Result<Plan, InvalidQuantity> {
    let pvc = o.pvc;
    let Some(source) = o.clone_source else {
        let mut changes = StateChanges::default();
        changes.running(false, reason::ERROR, &format!("source PVC {src_ns}/{src_name} not found"));
        return Ok(Plan::after(MISSING_SOURCE_REQUEUE, vec![update(changes)]));
    };
    let Some(src) = o.clone_source_pod else {
        return Ok(Plan::after(SHORT_REQUEUE, vec![Action::StartCloneSource { source: Box::new(source.clone()) }]));
    };
    let st = src.status.clone().unwrap_or_default();
    if matches!(st.phase.as_deref(), Some("Succeeded" | "Failed")) {
        // The source server ended (idle exit or crash) before the target finished: start over.
        let delete = Action::DeletePod { namespace: src_ns.to_owned(), name: src.name_any() };
        return Ok(Plan::after(SHORT_REQUEUE, vec![delete]));
    }
    let ready = st.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
    match (ready, st.pod_ip) {
        (true, Some(ip)) if !deleting(src) => {
            let endpoint = CloneEndpoint {
                url: format!("https://{ip}:{}/disk.img", crds::cdi::consts::WORKER_PORT),
                header_secret: pods::clone_header_secret(&pvc.name_any()),
            };
            // The clone target is an import from the endpoint; the claim's own import annotations do not apply.
            let source = ImportSource::new(contracts::cdi::SourceKind::Http, &endpoint.url);
            import(o, &source, Some(endpoint))
        }
        _ => Ok(Plan::after(SHORT_REQUEUE, vec![])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::cdi::consts::ann;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
        PersistentVolumeClaimStatus, PodCondition, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

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

    fn get<'a>(o: &'a PodOutcome, k: &str) -> Option<&'a str> {
        o.changes.get(k).flatten()
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
        assert_eq!(s.changes.get(ann::POD_PHASE), None);
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
        assert!(again.changes.is_empty(), "{:?}", again.changes);
        let oom = observe_pod(
            &pvc(&[]),
            &pod("Running", run, Some(terminated(137, "OOMKilled", "")), 1),
            WorkerKind::Importer,
        );
        assert_eq!(get(&oom, ann::REQUIRES_DIRECT_IO), Some("true"));
        assert!(oom.delete_pod);
    }

    #[test]
    fn upload_deadline_clears_the_phase_and_drops_the_certificate() {
        let msg = r#"{"deadlinePassed":true,"message":"Deadline Passed"}"#;
        let done = pod("Succeeded", terminated(0, "Completed", msg), None, 0);
        let o = observe_pod(&pvc(&[(ann::POD_PHASE, "Running")]), &done, WorkerKind::Upload);
        assert_eq!(o.changes.get(ann::POD_PHASE), Some(None));
        assert_eq!(get(&o, ann::POD_READY), Some("false"));
        assert!(o.delete_pod && o.deadline_passed);
        let fresh = observe_pod(&pvc(&[]), &done, WorkerKind::Upload);
        assert!(!fresh.deadline_passed, "no phase to clear: the certificate was never used");
    }

    // --- plan ---

    fn claim(ann_: &[(&str, &str)], bound: bool) -> PersistentVolumeClaim {
        let mut p = pvc(ann_);
        p.metadata.name = Some("disk".into());
        p.metadata.namespace = Some("ns".into());
        p.metadata.uid = Some("uid-1".into());
        p.spec = Some(Default::default());
        p.status = Some(PersistentVolumeClaimStatus {
            phase: Some(if bound { "Bound" } else { "Pending" }.into()),
            ..Default::default()
        });
        p
    }

    fn named(name: &str, mut p: Pod) -> Pod {
        p.metadata.name = Some(name.into());
        p.metadata.namespace = Some("ns".into());
        p
    }

    fn ready_source_pod(ip: &str) -> Pod {
        let mut p = named("uid-1-source-pod", Pod::default());
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some(ip.into()),
            conditions: Some(vec![PodCondition { type_: "Ready".into(), status: "True".into(), ..Default::default() }]),
            ..Default::default()
        });
        p
    }

    fn observed<'a>(pvc: &'a PersistentVolumeClaim, cfg: &'a WorkerConfig) -> Observed<'a> {
        Observed {
            pvc,
            importer_pod: None,
            upload_pod: None,
            clone_source: None,
            clone_source_pod: None,
            config: cfg,
            overhead: 0.06,
            scratch_overhead: 0.06,
        }
    }

    /// The plan's shape: one letter per action (D delete pod, I create importer, U start upload server, S delete
    /// upload secret, C start clone source, A update state) and the requeue in seconds.
    fn shape(p: &Plan) -> (String, Option<u64>) {
        let letters = p
            .actions
            .iter()
            .map(|a| match a {
                Action::DeletePod { .. } => 'D',
                Action::CreateImporter { .. } => 'I',
                Action::StartUploadServer => 'U',
                Action::DeleteUploadSecret => 'S',
                Action::StartCloneSource { .. } => 'C',
                Action::UpdateState { .. } => 'A',
            })
            .collect();
        (letters, p.requeue.map(|d| d.as_secs()))
    }

    #[test]
    fn plan_table() {
        let cfg = WorkerConfig::default();
        let import = [(ann::SOURCE, "http"), (ann::ENDPOINT, "http://h/x")];
        let running =
            pod("Running", ContainerState { running: Some(Default::default()), ..Default::default() }, None, 0);
        let importer = named("importer-disk", running.clone());
        let mut gone = importer.clone();
        gone.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let uploader = named("cdi-upload-disk", running.clone());
        let src = claim(&[], true);
        let src_pod = ready_source_pod("10.0.0.9");

        let plain = claim(&[], true);
        let unbound = claim(&import, false);
        let immediate = claim(&[import[0], import[1], (ann::BIND_IMMEDIATE, "")], false);
        let bound = claim(&import, true);
        let scratch = claim(&[import[0], import[1], (ann::REQUIRES_SCRATCH, "true")], true);
        let done = claim(&[import[0], import[1], (ann::POD_PHASE, "Succeeded")], true);
        let kept =
            claim(&[import[0], import[1], (ann::POD_PHASE, "Succeeded"), (ann::RETAIN_AFTER_COMPLETION, "true")], true);
        let upload = claim(&[(ann::UPLOAD_TARGET, "")], true);
        let clone = claim(&[(ann::CLONE_REQUEST, "src/golden")], true);

        let cases = [
            ("not a CDI claim", observed(&plain, &cfg), ("", None)),
            ("unbound waits", observed(&unbound, &cfg), ("", None)),
            ("bind immediate starts", observed(&immediate, &cfg), ("IA", Some(3))),
            ("bound starts the importer", observed(&bound, &cfg), ("IA", Some(3))),
            (
                "running importer is observed",
                Observed { importer_pod: Some(&importer), ..observed(&bound, &cfg) },
                ("A", Some(3)),
            ),
            (
                "terminating importer: wait",
                Observed { importer_pod: Some(&gone), ..observed(&bound, &cfg) },
                ("", Some(2)),
            ),
            (
                "done: pods are removed",
                Observed { importer_pod: Some(&importer), ..observed(&done, &cfg) },
                ("D", None),
            ),
            ("done and retained", Observed { importer_pod: Some(&importer), ..observed(&kept, &cfg) }, ("", None)),
            ("upload starts a server", observed(&upload, &cfg), ("UA", Some(3))),
            (
                "running upload server",
                Observed { upload_pod: Some(&uploader), ..observed(&upload, &cfg) },
                ("A", Some(3)),
            ),
            ("clone without source claim", observed(&clone, &cfg), ("A", Some(10))),
            (
                "clone starts its source",
                Observed { clone_source: Some(&src), ..observed(&clone, &cfg) },
                ("C", Some(2)),
            ),
            (
                "clone source ready: import from it",
                Observed { clone_source: Some(&src), clone_source_pod: Some(&src_pod), ..observed(&clone, &cfg) },
                ("IA", Some(3)),
            ),
            (
                "clone target on an old endpoint restarts",
                Observed {
                    clone_source: Some(&src),
                    clone_source_pod: Some(&src_pod),
                    importer_pod: Some(&importer),
                    ..observed(&clone, &cfg)
                },
                ("D", Some(2)),
            ),
        ];
        for (what, o, (letters, requeue)) in cases {
            let p = plan(&o).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(shape(&p), (letters.to_owned(), requeue), "{what}: {p:?}");
        }

        let p = plan(&observed(&scratch, &cfg)).unwrap_or_else(|e| panic!("{e}"));
        let Some(Action::CreateImporter { pod, scratch: Some(s) }) = p.actions.first() else {
            panic!("no importer with scratch: {p:?}")
        };
        assert_eq!(s.metadata.name.as_deref(), Some("disk-scratch"));
        assert!(pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()).any(|v| v.name == "cdi-scratch-vol"));
        let Some(Action::UpdateState { changes, .. }) = p.actions.get(1) else { panic!("{p:?}") };
        assert_eq!(changes.get(ann::IMPORT_POD_NAME), Some(Some("importer-disk")));
        assert_eq!(changes.get(ann::POD_PHASE), Some(Some("Pending")));

        let clone_done = claim(&[(ann::CLONE_REQUEST, "src/golden"), (ann::POD_PHASE, "Succeeded")], true);
        let o = Observed { clone_source_pod: Some(&src_pod), ..observed(&clone_done, &cfg) };
        let p = plan(&o).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p.actions,
            [Action::DeletePod { namespace: "src".into(), name: "uid-1-source-pod".into() }],
            "the clone source goes with the finished clone"
        );
    }
}
