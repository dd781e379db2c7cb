//! DataVolume status as a pure function of the DV, its PVC and the scraped progress (`specs/cdi.md` §1.5), plus
//! the events a status change produces. Nothing here talks to the API server.

use contracts::cdi::consts::{event, message, reason};
use contracts::cdi::transfer::TransferStatus;
use contracts::cdi::{ClaimOptions, TransferRequest, WorkerPhase, WorkerState};
use controller_runtime::events::Severity;
use crds::cdi::datavolume::{
    ConditionStatus, ConditionType, DataVolume, DataVolumeCondition, DataVolumePhase, DataVolumeStatus,
};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

/// What else the status depends on, read by the reconciler.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The PVC's storage class binds WaitForFirstConsumer.
    pub wffc: bool,
    /// Progress scraped from the running worker (`45.67%`).
    pub progress: Option<String>,
    /// The running worker's transfer detail: while Running is True it is the condition's message (upstream
    /// leaves it empty), so `kubectl get dv` shows bytes, rate and time left in its `Transfer` column.
    pub transfer: Option<TransferStatus>,
    /// The PVC could not be rendered (reason `ErrClaimNotValid`).
    pub claim_error: Option<String>,
}

/// An event to record on the DataVolume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DvEvent {
    /// Normal or Warning.
    pub type_: Severity,
    /// Upstream's reason.
    pub reason: String,
    /// Upstream's message.
    pub message: String,
}

fn phase_from_pvc(
    request: &TransferRequest,
    pvc: &PersistentVolumeClaim,
    obs: &Observed,
    current: Option<DataVolumePhase>,
) -> DataVolumePhase {
    use DataVolumePhase as P;
    let a = pvc.annotations();
    let state = WorkerState::of(a);
    let pvc_phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    if current == Some(P::Succeeded) && pvc_phase == "Bound" {
        return P::Succeeded;
    }
    match pvc_phase {
        "Lost" => return P::Failed,
        "Bound" => {}
        "Pending" if state.phase.is_none() => {
            let immediate = ClaimOptions::of(a).bind_immediate;
            return if obs.wffc && !immediate { P::WaitForFirstConsumer } else { P::Pending };
        }
        "Pending" => {}
        _ => return P::Unknown,
    }
    let (scheduled, running, ready) = match request {
        TransferRequest::Import(_) => (P::ImportScheduled, P::ImportInProgress, P::ImportInProgress),
        TransferRequest::Clone { .. } => (P::CloneScheduled, P::CloneInProgress, P::CloneInProgress),
        TransferRequest::Upload => (P::UploadScheduled, P::UploadScheduled, P::UploadReady),
    };
    match state.phase {
        None | Some(WorkerPhase::Pending) => scheduled,
        Some(WorkerPhase::Running) if state.ready => ready,
        Some(WorkerPhase::Running) => running,
        Some(WorkerPhase::Succeeded) => P::Succeeded,
        Some(WorkerPhase::Failed) if state.fatal_error => P::Failed,
        // Ordinary failures never fail the DV: the pod restarts and the phase stays where it was.
        Some(_) => current.unwrap_or(running),
    }
}

fn condition(
    old: Option<&DataVolumeCondition>,
    type_: ConditionType,
    status: ConditionStatus,
    reason: &str,
    msg: &str,
    now: &Time,
) -> DataVolumeCondition {
    let reason = (!reason.is_empty()).then(|| reason.to_owned());
    let message = (!msg.is_empty()).then(|| msg.to_owned());
    match old {
        Some(o) if o.status == status && o.reason == reason && o.message == message => o.clone(),
        Some(o) if o.status == status => {
            DataVolumeCondition { last_heartbeat_time: Some(now.clone()), reason, message, ..o.clone() }
        }
        _ => DataVolumeCondition {
            type_,
            status,
            last_transition_time: Some(now.clone()),
            last_heartbeat_time: Some(now.clone()),
            reason,
            message,
        },
    }
}

fn phase_event(request: &TransferRequest, phase: DataVolumePhase, pvc: &str, ns: &str) -> Option<DvEvent> {
    use DataVolumePhase as P;
    let normal = |r: &str, m: String| Some(DvEvent { type_: Severity::Normal, reason: r.into(), message: m });
    let warning = |r: &str, m: String| Some(DvEvent { type_: Severity::Warning, reason: r.into(), message: m });
    match (request, phase) {
        (TransferRequest::Import(_), P::ImportScheduled) => {
            normal(event::IMPORT_SCHEDULED, format!("Import into {pvc} scheduled"))
        }
        (TransferRequest::Import(_), P::ImportInProgress) => {
            normal(event::IMPORT_IN_PROGRESS, format!("Import into {pvc} in progress"))
        }
        (TransferRequest::Import(_), P::Succeeded) => {
            normal(event::IMPORT_SUCCEEDED, format!("Successfully imported into PVC {pvc}"))
        }
        (TransferRequest::Import(_), P::Failed) => {
            warning(event::IMPORT_FAILED, format!("Failed to import into PVC {pvc}"))
        }
        (TransferRequest::Upload, P::UploadScheduled) => {
            normal(event::UPLOAD_SCHEDULED, format!("Upload into {pvc} scheduled"))
        }
        (TransferRequest::Upload, P::UploadReady) => normal(event::UPLOAD_READY, format!("Upload into {pvc} ready")),
        (TransferRequest::Upload, P::Succeeded) => {
            normal(event::UPLOAD_SUCCEEDED, format!("Successfully uploaded into {pvc}"))
        }
        (TransferRequest::Upload, P::Failed) => warning(event::UPLOAD_FAILED, format!("Upload into {pvc} failed")),
        (TransferRequest::Clone { namespace, name }, p) => {
            let route = format!("from {namespace}/{name} into {ns}/{pvc}");
            match p {
                P::CloneScheduled => normal(event::CLONE_SCHEDULED, format!("Cloning {route} scheduled")),
                P::CloneInProgress => normal(event::CLONE_IN_PROGRESS, format!("Cloning {route} in progress")),
                P::Succeeded => normal(event::CLONE_SUCCEEDED, format!("Successfully cloned {route}")),
                P::Failed => warning(event::CLONE_FAILED, format!("Cloning {route} failed")),
                _ => None,
            }
        }
        _ => None,
    }
}

/// Computes the DataVolume's next status and the events its change implies.
pub fn compute(
    dv: &DataVolume,
    pvc: Option<&PersistentVolumeClaim>,
    obs: &Observed,
    now: &Time,
) -> (DataVolumeStatus, Vec<DvEvent>) {
    let old = dv.status.clone().unwrap_or_default();
    let old_cond = |t: ConditionType| old.conditions.iter().flatten().find(|c| c.type_ == t);
    let name = dv.name_any();
    let ns = dv.namespace().unwrap_or_default();
    let mut events = Vec::new();
    let request = pvc.and_then(|p| TransferRequest::of(p.annotations()));
    let state = pvc.map(|p| WorkerState::of(p.annotations())).unwrap_or_default();

    let phase = match (pvc, &request) {
        (Some(p), Some(w)) => phase_from_pvc(w, p, obs, old.phase),
        (Some(_), None) => DataVolumePhase::Unknown,
        (None, _) => DataVolumePhase::Pending,
    };
    if old.phase != Some(phase) {
        if let Some(r) = &request {
            events.extend(phase_event(r, phase, &name, &ns));
        }
        if phase == DataVolumePhase::Failed && pvc.and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some("Lost") {
            events.push(DvEvent {
                type_: Severity::Warning,
                reason: event::ERR_CLAIM_LOST.into(),
                message: format!("PVC {name} lost"),
            });
        }
    }

    // Bound
    let (b_status, b_reason, b_msg) = match pvc {
        None => (ConditionStatus::False, reason::NOT_FOUND.to_owned(), message::NO_PVC.to_owned()),
        Some(p) => {
            let pvc_name = p.name_any();
            if let Some(o) = &state.bound_override {
                (ConditionStatus::False, o.reason.clone(), o.message.clone())
            } else {
                match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
                    Some("Bound") => (ConditionStatus::True, reason::BOUND.to_owned(), format!("PVC {pvc_name} Bound")),
                    Some("Lost") => {
                        (ConditionStatus::False, reason::CLAIM_LOST.to_owned(), message::CLAIM_LOST.to_owned())
                    }
                    _ => (ConditionStatus::False, reason::PENDING.to_owned(), format!("PVC {pvc_name} Pending")),
                }
            }
        }
    };
    let bound = condition(old_cond(ConditionType::Bound), ConditionType::Bound, b_status, &b_reason, &b_msg, now);
    if old_cond(ConditionType::Bound).map(|c| (c.status, c.reason.as_deref()))
        != Some((bound.status, bound.reason.as_deref()))
    {
        match (bound.status, b_reason.as_str()) {
            (ConditionStatus::True, _) => {
                events.push(DvEvent { type_: Severity::Normal, reason: event::BOUND.into(), message: b_msg.clone() })
            }
            (_, r) if r == reason::PENDING => {
                events.push(DvEvent { type_: Severity::Normal, reason: event::PENDING.into(), message: b_msg.clone() })
            }
            _ => {}
        }
    }

    // Running (from the transfer reconciler's worker state)
    let published = state.running.clone().unwrap_or_default();
    let r_status = if published.running { ConditionStatus::True } else { ConditionStatus::False };
    let r_reason = published.reason;
    let mut r_msg = published.message;
    if matches!(request, Some(TransferRequest::Clone { .. })) && r_reason == reason::COMPLETED {
        r_msg = message::CLONE_COMPLETE.to_owned();
    }
    if r_status == ConditionStatus::True && r_msg.is_empty() {
        // The latest detail, or the one shown before (a scrape can miss); never a stale one once not running.
        r_msg = match &obs.transfer {
            Some(t) => t.message(),
            None => old_cond(ConditionType::Running)
                .filter(|c| c.status == ConditionStatus::True)
                .and_then(|c| c.message.clone())
                .unwrap_or_default(),
        };
    }
    let running = condition(old_cond(ConditionType::Running), ConditionType::Running, r_status, &r_reason, &r_msg, now);
    let old_running = old_cond(ConditionType::Running);
    if r_status == ConditionStatus::False
        && !r_reason.is_empty()
        && r_reason != reason::COMPLETED
        && r_reason != reason::SCRATCH_REQUIRED
        && old_running.map(|c| (c.reason.as_deref(), c.message.as_deref()))
            != Some((Some(r_reason.as_str()), Some(r_msg.as_str())))
    {
        events.push(DvEvent { type_: Severity::Warning, reason: r_reason.clone(), message: r_msg.clone() });
    }

    // Ready
    let (rd_status, rd_reason, rd_msg) = match phase {
        DataVolumePhase::Succeeded => (ConditionStatus::True, String::new(), String::new()),
        DataVolumePhase::Unknown => (ConditionStatus::Unknown, String::new(), String::new()),
        _ if r_status == ConditionStatus::True => {
            (ConditionStatus::False, reason::TRANSFER_RUNNING.to_owned(), String::new())
        }
        _ => match &obs.claim_error {
            Some(e) => (ConditionStatus::False, reason::ERR_CLAIM_NOT_VALID.to_owned(), e.clone()),
            None => (ConditionStatus::False, String::new(), String::new()),
        },
    };
    if let Some(e) = &obs.claim_error
        && old_cond(ConditionType::Ready).and_then(|c| c.message.as_deref()) != Some(e.as_str())
    {
        events.push(DvEvent {
            type_: Severity::Warning,
            reason: reason::ERR_CLAIM_NOT_VALID.into(),
            message: e.clone(),
        });
    }
    let ready = condition(old_cond(ConditionType::Ready), ConditionType::Ready, rd_status, &rd_reason, &rd_msg, now);

    let progress = match phase {
        DataVolumePhase::Succeeded => "100.0%".to_owned(),
        DataVolumePhase::ImportInProgress | DataVolumePhase::CloneInProgress | DataVolumePhase::UploadReady => {
            obs.progress.clone().or(old.progress.clone()).unwrap_or_else(|| "N/A".into())
        }
        _ => old.progress.clone().unwrap_or_else(|| "N/A".into()),
    };
    let restarts = state.restarts;
    let status = DataVolumeStatus {
        claim_name: Some(name),
        phase: Some(phase),
        progress: Some(progress),
        restart_count: Some(restarts.max(old.restart_count.unwrap_or(0))),
        conditions: Some(vec![ready, bound, running]),
    };
    (status, events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use contracts::cdi::consts::ann;
    use contracts::cdi::transfer::Stage;
    use k8s_openapi::api::core::v1::PersistentVolumeClaimStatus;
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    fn now() -> Time {
        Time(Timestamp::UNIX_EPOCH)
    }

    fn dv() -> DataVolume {
        let mut d = DataVolume::new("disk", Default::default());
        d.metadata.namespace = Some("ns".into());
        d
    }

    fn pvc(phase: &str, ann: &[(&str, &str)]) -> PersistentVolumeClaim {
        let mut p = PersistentVolumeClaim::default();
        p.metadata.name = Some("disk".into());
        let mut a: BTreeMap<String, String> = ann.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        a.entry(ann::SOURCE.into()).or_insert_with(|| "http".into());
        p.metadata.annotations = Some(a);
        p.status = Some(PersistentVolumeClaimStatus { phase: Some(phase.into()), ..Default::default() });
        p
    }

    fn cond(s: &DataVolumeStatus, t: ConditionType) -> DataVolumeCondition {
        s.conditions.iter().flatten().find(|c| c.type_ == t).cloned().unwrap_or_else(|| panic!("no {t:?}"))
    }

    #[test]
    fn import_phases_follow_pod_phase() {
        let obs = Observed::default();
        let cases = [
            (pvc("Pending", &[]), DataVolumePhase::Pending),
            (pvc("Bound", &[]), DataVolumePhase::ImportScheduled),
            (pvc("Bound", &[(ann::POD_PHASE, "Running")]), DataVolumePhase::ImportInProgress),
            (pvc("Bound", &[(ann::POD_PHASE, "Succeeded")]), DataVolumePhase::Succeeded),
            (pvc("Bound", &[(ann::POD_PHASE, "Failed"), (ann::FATAL_ERROR, "true")]), DataVolumePhase::Failed),
            (pvc("Lost", &[]), DataVolumePhase::Failed),
        ];
        for (p, want) in cases {
            let (s, _) = compute(&dv(), Some(&p), &obs, &now());
            assert_eq!(s.phase, Some(want), "{:?}", p.metadata.annotations);
        }
        let wffc = Observed { wffc: true, ..Default::default() };
        let (s, _) = compute(&dv(), Some(&pvc("Pending", &[])), &wffc, &now());
        assert_eq!(s.phase, Some(DataVolumePhase::WaitForFirstConsumer));
    }

    #[test]
    fn ordinary_failure_never_fails_the_dv() {
        let mut d = dv();
        d.status = Some(DataVolumeStatus { phase: Some(DataVolumePhase::ImportInProgress), ..Default::default() });
        let p = pvc(
            "Bound",
            &[
                (ann::POD_PHASE, "Failed"),
                (ann::RUNNING_CONDITION, "false"),
                (ann::RUNNING_CONDITION_REASON, "Error"),
                (ann::RUNNING_CONDITION_MESSAGE, "Unable to connect to http data source: 404"),
                (ann::POD_RESTARTS, "3"),
            ],
        );
        let (s, events) = compute(&d, Some(&p), &Observed::default(), &now());
        assert_eq!(s.phase, Some(DataVolumePhase::ImportInProgress));
        assert_eq!(s.restart_count, Some(3));
        let r = cond(&s, ConditionType::Running);
        assert_eq!((r.status, r.reason.as_deref()), (ConditionStatus::False, Some("Error")));
        assert!(events.iter().any(|e| e.type_ == Severity::Warning && e.reason == "Error"));
    }

    #[test]
    fn success_sets_full_progress_ready_and_events_once() {
        let p = pvc(
            "Bound",
            &[
                (ann::POD_PHASE, "Succeeded"),
                (ann::RUNNING_CONDITION, "false"),
                (ann::RUNNING_CONDITION_REASON, "Completed"),
                (ann::RUNNING_CONDITION_MESSAGE, "Import Complete"),
            ],
        );
        let (s, events) = compute(&dv(), Some(&p), &Observed::default(), &now());
        assert_eq!(s.progress.as_deref(), Some("100.0%"));
        assert_eq!(cond(&s, ConditionType::Ready).status, ConditionStatus::True);
        assert_eq!(cond(&s, ConditionType::Bound).message.as_deref(), Some("PVC disk Bound"));
        assert!(
            events.iter().any(|e| e.reason == "ImportSucceeded" && e.message == "Successfully imported into PVC disk")
        );
        let mut again = dv();
        again.status = Some(s.clone());
        let (s2, events2) = compute(&again, Some(&p), &Observed::default(), &now());
        assert_eq!(s2, s);
        assert!(events2.is_empty(), "{events2:?}");
    }

    #[test]
    fn progress_and_running_while_in_progress() {
        let p = pvc(
            "Bound",
            &[
                (ann::POD_PHASE, "Running"),
                (ann::RUNNING_CONDITION, "true"),
                (ann::RUNNING_CONDITION_REASON, "Pod is running"),
            ],
        );
        let obs = Observed { progress: Some("45.67%".into()), ..Default::default() };
        let (s, _) = compute(&dv(), Some(&p), &obs, &now());
        assert_eq!(s.progress.as_deref(), Some("45.67%"));
        let ready = cond(&s, ConditionType::Ready);
        assert_eq!((ready.status, ready.reason.as_deref()), (ConditionStatus::False, Some("TransferRunning")));
        assert_eq!(cond(&s, ConditionType::Running).message, None, "upstream's empty message without a detail");

        // With the worker's transfer detail, the Running message says bytes, rate and time left; a scrape that
        // misses keeps it; once the worker stops, its own message replaces it.
        let detail = TransferStatus {
            stage: Stage::Transferring,
            done: 3 << 20,
            total: Some(8 << 20),
            percent: None,
            bytes_per_second: Some(1048576.0),
            eta_seconds: Some(5),
        };
        let obs = Observed { progress: Some("37.50%".into()), transfer: Some(detail), ..Default::default() };
        let (s, _) = compute(&dv(), Some(&p), &obs, &now());
        let running = cond(&s, ConditionType::Running);
        assert_eq!(running.message.as_deref(), Some("transferring 3.0 MiB of 8.0 MiB (37.50%), 1.0 MiB/s, 5s left"));
        assert_eq!(running.reason.as_deref(), Some("Pod is running"));
        let mut d = dv();
        d.status = Some(s.clone());
        let (missed, _) = compute(&d, Some(&p), &Observed::default(), &now());
        assert_eq!(cond(&missed, ConditionType::Running).message, running.message);
        let done = pvc(
            "Bound",
            &[
                (ann::POD_PHASE, "Succeeded"),
                (ann::RUNNING_CONDITION, "false"),
                (ann::RUNNING_CONDITION_REASON, "Completed"),
                (ann::RUNNING_CONDITION_MESSAGE, "Import Complete"),
            ],
        );
        let (s, _) = compute(&d, Some(&done), &obs, &now());
        assert_eq!(cond(&s, ConditionType::Running).message.as_deref(), Some("Import Complete"));
        let (s, _) = compute(&dv(), None, &Observed::default(), &now());
        assert_eq!(s.progress.as_deref(), Some("N/A"));
        assert_eq!(cond(&s, ConditionType::Bound).reason.as_deref(), Some("NotFound"));
    }

    #[test]
    fn upload_is_ready_only_when_pod_is_ready() {
        let p = |ready: &str| {
            pvc("Bound", &[(ann::UPLOAD_TARGET, ""), (ann::POD_PHASE, "Running"), (ann::POD_READY, ready)])
        };
        let mut up = p("false");
        if let Some(a) = up.metadata.annotations.as_mut() {
            a.remove(ann::SOURCE);
        }
        let (s, _) = compute(&dv(), Some(&up), &Observed::default(), &now());
        assert_eq!(s.phase, Some(DataVolumePhase::UploadScheduled));
        let mut up = p("true");
        if let Some(a) = up.metadata.annotations.as_mut() {
            a.remove(ann::SOURCE);
        }
        let (s, ev) = compute(&dv(), Some(&up), &Observed::default(), &now());
        assert_eq!(s.phase, Some(DataVolumePhase::UploadReady));
        assert!(ev.iter().any(|e| e.message == "Upload into disk ready"));
    }
}
