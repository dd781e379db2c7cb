//! What the launcher pod says about the VMI: the pod's state reduced to what the planner decides on
//! ([`PodState`], [`observe`]), and the pod's conditions as VMI conditions.

use contracts::kubevirt::consts::reason;
use contracts::kubevirt::launcher::COMPUTE_CONTAINER;
use crds::kubevirt::vmi::{
    ConditionStatus, VirtualMachineInstanceCondition, VirtualMachineInstanceConditionType as Type,
};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// What a launcher pod's status means for its VMI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Not yet running its `compute` container, or running it before the launcher is ready.
    Starting {
        /// Why it waits, when that is a problem the user must see (`ErrImagePull`, `ImagePullBackOff`, …):
        /// `(reason, message)`.
        problem: Option<(String, String)>,
    },
    /// The `compute` container is ready: the launcher prepared everything and its libvirt answers.
    Ready,
    /// Being deleted.
    Terminating,
    /// Finished (phase `Failed` or `Succeeded`); `message` says why when it failed.
    Down {
        /// The failure, from the first failed container's termination message or the pod's own reason.
        message: Option<String>,
    },
}

/// Container waiting reasons that mean the pod will not start by itself soon (copied to `Synchronized`).
const PROBLEM_REASONS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

fn terminated_failure(statuses: &[ContainerStatus]) -> Option<String> {
    statuses.iter().find_map(|s| {
        let t = s.state.as_ref()?.terminated.as_ref()?;
        (t.exit_code != 0).then(|| {
            let detail = t.message.as_deref().map(str::trim).filter(|m| !m.is_empty());
            match detail {
                Some(m) => format!("container {} failed: {m}", s.name),
                None => format!(
                    "container {} failed with exit code {}{}",
                    s.name,
                    t.exit_code,
                    t.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
                ),
            }
        })
    })
}

fn waiting_problem(statuses: &[ContainerStatus]) -> Option<(String, String)> {
    statuses.iter().find_map(|s| {
        let w = s.state.as_ref()?.waiting.as_ref()?;
        let r = w.reason.as_deref()?;
        PROBLEM_REASONS
            .contains(&r)
            .then(|| (r.to_owned(), format!("container {}: {}", s.name, w.message.clone().unwrap_or_else(|| r.into()))))
    })
}

/// Reduces a launcher pod to its [`PodState`].
pub fn observe(pod: &Pod) -> PodState {
    if pod.metadata.deletion_timestamp.is_some() {
        return PodState::Terminating;
    }
    let status = pod.status.clone().unwrap_or_default();
    let inits = status.init_container_statuses.unwrap_or_default();
    let mains = status.container_statuses.unwrap_or_default();
    match status.phase.as_deref() {
        Some("Failed") | Some("Succeeded") => {
            let message = terminated_failure(&inits).or_else(|| terminated_failure(&mains)).or_else(|| {
                status.phase.as_deref().filter(|p| *p == "Failed").map(|_| {
                    let why = [status.reason.as_deref(), status.message.as_deref()];
                    let why: Vec<&str> = why.into_iter().flatten().collect();
                    if why.is_empty() { "the launcher pod failed".to_owned() } else { why.join(": ") }
                })
            });
            PodState::Down { message }
        }
        _ => {
            let compute_ready = mains.iter().any(|s| s.name == COMPUTE_CONTAINER && s.ready);
            if compute_ready {
                PodState::Ready
            } else {
                PodState::Starting { problem: waiting_problem(&inits).or_else(|| waiting_problem(&mains)) }
            }
        }
    }
}

/// The pod's `PodScheduled` condition when it says the pod cannot be scheduled, as a VMI condition.
pub fn unschedulable(pod: &Pod) -> Option<VirtualMachineInstanceCondition> {
    let c = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "PodScheduled")?;
    (c.status == "False").then(|| VirtualMachineInstanceCondition {
        type_: Type::PodScheduled,
        status: ConditionStatus::False,
        last_probe_time: c.last_probe_time.clone(),
        last_transition_time: c.last_transition_time.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        ..Default::default()
    })
}

/// The pod's `Ready` condition, as the VMI's `Ready` condition.
pub fn pod_ready(pod: &Pod) -> Option<VirtualMachineInstanceCondition> {
    let c = pod.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready")?;
    Some(VirtualMachineInstanceCondition {
        type_: Type::Ready,
        status: match c.status.as_str() {
            "True" => ConditionStatus::True,
            "False" => ConditionStatus::False,
            _ => ConditionStatus::Unknown,
        },
        last_probe_time: c.last_probe_time.clone(),
        last_transition_time: c.last_transition_time.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        ..Default::default()
    })
}

/// `Ready` = False with one of upstream's controller reasons and its message.
pub fn not_ready(reason_: &str) -> VirtualMachineInstanceCondition {
    let message = match reason_ {
        reason::POD_NOT_EXISTS => "virt-launcher pod has not yet been scheduled",
        reason::POD_TERMINATING => "virt-launcher pod is terminating",
        reason::GUEST_NOT_RUNNING => "Guest VM is not reported as running",
        _ => "virt-launcher pod is missing the Ready condition",
    };
    VirtualMachineInstanceCondition::new(Type::Ready, ConditionStatus::False, reason_, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn pod_states() {
        let cases = [
            (json!({"phase": "Pending"}), PodState::Starting { problem: None }),
            (
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "compute", "ready": false, "restartCount": 0, "image": "i", "imageID": ""},
                    {"name": "guest-console-log", "ready": true, "restartCount": 0, "image": "i", "imageID": ""}]}),
                PodState::Starting { problem: None },
            ),
            (
                json!({"phase": "Running", "containerStatuses": [
                    {"name": "compute", "ready": true, "restartCount": 0, "image": "i", "imageID": ""}]}),
                PodState::Ready,
            ),
            (
                json!({"phase": "Pending", "initContainerStatuses": [{"name": "volumecd-init", "ready": false,
                    "restartCount": 0, "image": "i", "imageID": "",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}]}),
                PodState::Starting {
                    problem: Some((
                        "ImagePullBackOff".into(),
                        "container volumecd-init: Back-off pulling image \"x\"".into(),
                    )),
                },
            ),
            (
                json!({"phase": "Failed", "initContainerStatuses": [{"name": "volumecd-init", "ready": false,
                    "restartCount": 0, "image": "i", "imageID": "",
                    "state": {"terminated": {"exitCode": 1,
                        "message": "more than one file found in folder /disk, only one disk is allowed\n"}}}]}),
                PodState::Down {
                    message: Some(
                        "container volumecd-init failed: more than one file found in folder /disk, only one disk is allowed"
                            .into(),
                    ),
                },
            ),
            (
                json!({"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."}),
                PodState::Down { message: Some("Evicted: The node was low on resource: memory.".into()) },
            ),
            (json!({"phase": "Succeeded"}), PodState::Down { message: None }),
        ];
        for (status, want) in cases {
            assert_eq!(observe(&pod(status.clone())), want, "{status}");
        }
        let mut deleting = pod(json!({"phase": "Running"}));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(observe(&deleting), PodState::Terminating);
    }
}
