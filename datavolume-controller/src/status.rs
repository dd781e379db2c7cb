//! DataVolume status as a pure function of the DV, its PVC and the scraped progress (`specs/cdi.md` §1.5), plus
//! the events a status change produces. Nothing here talks to the API server.

use crds::cdi::consts::{ann, event, message, reason};
use crds::cdi::datavolume::{
    ConditionStatus, ConditionType, DataVolume, DataVolumeCondition, DataVolumePhase, DataVolumeStatus,
};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use crate::worker::Work;

/// What else the status depends on, read by the reconciler.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The PVC's storage class binds WaitForFirstConsumer.
    pub wffc: bool,
    /// Progress scraped from the running worker (`45.67%`).
    pub progress: Option<String>,
    /// The PVC could not be rendered (reason `ErrClaimNotValid`).
    pub claim_error: Option<String>,
}

/// Severity of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An event to record on the DataVolume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DvEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// Upstream's reason.
    pub reason: String,
    /// Upstream's message.
    pub message: String,
}

/// Replaces every "volume too small" failure text with CDI's simplified message.
pub fn simplify_message(msg: &str) -> String {
    if message::TOO_SMALL_MARKERS.iter().any(|m| msg.contains(m)) {
        message::TOO_SMALL.to_owned()
    } else {
        msg.to_owned()
    }
}

fn phase_from_pvc(
    work: &Work,
    pvc: &PersistentVolumeClaim,
    obs: &Observed,
    current: Option<DataVolumePhase>,
) -> DataVolumePhase {
    use DataVolumePhase as P;
    let a = pvc.annotations();
    let pvc_phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let pod_phase = a.get(ann::POD_PHASE).map(String::as_str);
    let fatal = a.get(ann::FATAL_ERROR).is_some_and(|v| v == "true");
    if current == Some(P::Succeeded) && pvc_phase == "Bound" {
        return P::Succeeded;
    }
    match pvc_phase {
        "Lost" => return P::Failed,
        "Bound" => {}
        "Pending" if pod_phase.is_none() => {
            let immediate = a.contains_key(ann::BIND_IMMEDIATE);
            return if obs.wffc && !immediate { P::WaitForFirstConsumer } else { P::Pending };
        }
        "Pending" => {}
        _ => return P::Unknown,
    }
    let (scheduled, running, ready) = match work {
        Work::Import => (P::ImportScheduled, P::ImportInProgress, P::ImportInProgress),
        Work::Clone { .. } => (P::CloneScheduled, P::CloneInProgress, P::CloneInProgress),
        Work::Upload => (P::UploadScheduled, P::UploadScheduled, P::UploadReady),
    };
    match pod_phase {
        None | Some("Pending") => scheduled,
        Some("Running") if a.get(ann::POD_READY).is_some_and(|v| v == "true") => ready,
        Some("Running") => running,
        Some("Succeeded") => P::Succeeded,
        Some("Failed") if fatal => P::Failed,
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

fn phase_event(work: &Work, phase: DataVolumePhase, pvc: &str, ns: &str) -> Option<DvEvent> {
    use DataVolumePhase as P;
    let normal = |r: &str, m: String| Some(DvEvent { type_: EventType::Normal, reason: r.into(), message: m });
    let warning = |r: &str, m: String| Some(DvEvent { type_: EventType::Warning, reason: r.into(), message: m });
    match (work, phase) {
        (Work::Import, P::ImportScheduled) => normal(event::IMPORT_SCHEDULED, format!("Import into {pvc} scheduled")),
        (Work::Import, P::ImportInProgress) => {
            normal(event::IMPORT_IN_PROGRESS, format!("Import into {pvc} in progress"))
        }
        (Work::Import, P::Succeeded) => {
            normal(event::IMPORT_SUCCEEDED, format!("Successfully imported into PVC {pvc}"))
        }
        (Work::Import, P::Failed) => warning(event::IMPORT_FAILED, format!("Failed to import into PVC {pvc}")),
        (Work::Upload, P::UploadScheduled) => normal(event::UPLOAD_SCHEDULED, format!("Upload into {pvc} scheduled")),
        (Work::Upload, P::UploadReady) => normal(event::UPLOAD_READY, format!("Upload into {pvc} ready")),
        (Work::Upload, P::Succeeded) => normal(event::UPLOAD_SUCCEEDED, format!("Successfully uploaded into {pvc}")),
        (Work::Upload, P::Failed) => warning(event::UPLOAD_FAILED, format!("Upload into {pvc} failed")),
        (Work::Clone { namespace, name }, p) => {
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
    let work = pvc.and_then(Work::of);

    let phase = match (pvc, &work) {
        (Some(p), Some(w)) => phase_from_pvc(w, p, obs, old.phase),
        (Some(_), None) => DataVolumePhase::Unknown,
        (None, _) => DataVolumePhase::Pending,
    };
    if old.phase != Some(phase) {
        if let Some(w) = &work {
            events.extend(phase_event(w, phase, &name, &ns));
        }
        if phase == DataVolumePhase::Failed && pvc.and_then(|p| p.status.as_ref()?.phase.as_deref()) == Some("Lost") {
            events.push(DvEvent {
                type_: EventType::Warning,
                reason: event::ERR_CLAIM_LOST.into(),
                message: format!("PVC {name} lost"),
            });
        }
    }

    // Bound
    let (b_status, b_reason, b_msg) = match pvc {
        None => (ConditionStatus::False, reason::NOT_FOUND.to_owned(), message::NO_PVC.to_owned()),
        Some(p) => {
            let a = p.annotations();
            let pvc_name = p.name_any();
            if a.get(ann::BOUND_CONDITION).is_some_and(|v| v == "false") {
                (
                    ConditionStatus::False,
                    a.get(ann::BOUND_CONDITION_REASON).cloned().unwrap_or_default(),
                    a.get(ann::BOUND_CONDITION_MESSAGE).cloned().unwrap_or_default(),
                )
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
                events.push(DvEvent { type_: EventType::Normal, reason: event::BOUND.into(), message: b_msg.clone() })
            }
            (_, r) if r == reason::PENDING => {
                events.push(DvEvent { type_: EventType::Normal, reason: event::PENDING.into(), message: b_msg.clone() })
            }
            _ => {}
        }
    }

    // Running (from the worker controller's PVC annotations)
    let a = pvc.map(|p| p.annotations().clone()).unwrap_or_default();
    let r_status = match a.get(ann::RUNNING_CONDITION).map(String::as_str) {
        Some("true") => ConditionStatus::True,
        _ => ConditionStatus::False,
    };
    let r_reason = a.get(ann::RUNNING_CONDITION_REASON).cloned().unwrap_or_default();
    let mut r_msg = a.get(ann::RUNNING_CONDITION_MESSAGE).cloned().unwrap_or_default();
    if matches!(work, Some(Work::Clone { .. })) && r_reason == reason::COMPLETED {
        r_msg = message::CLONE_COMPLETE.to_owned();
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
        events.push(DvEvent { type_: EventType::Warning, reason: r_reason.clone(), message: r_msg.clone() });
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
            type_: EventType::Warning,
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
    let restarts: i32 = a.get(ann::POD_RESTARTS).and_then(|v| v.parse().ok()).unwrap_or(0);
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
        assert!(events.iter().any(|e| e.type_ == EventType::Warning && e.reason == "Error"));
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

    #[test]
    fn too_small_messages_are_simplified() {
        assert_eq!(
            simplify_message(
                "Unable to process data: virtual image size 2 is larger than the reported available storage 1. A larger PVC is required"
            ),
            "DataVolume too small to contain image"
        );
        assert_eq!(simplify_message("write: no space left on device"), "DataVolume too small to contain image");
        assert_eq!(simplify_message("other"), "other");
    }
}
