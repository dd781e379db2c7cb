//! The VMIRS reconciler's decisions, pure (contract §4, modelled on the Kubernetes ReplicaSet):
//!
//! ```text
//! VMIs of the namespace ─ selector ─► adopt orphans, classify: active | finished (final or PodTerminating)
//! not paused: active − replicas < 0 → create (≤ BURST, generateName = template name | generateName | RS name)
//!             active − replicas > 0 → delete the first surplus (list order)
//! finished → delete (the replacement mechanism: a new VMI restores the count)
//! status: replicas (active), readyReplicas, labelSelector, ReplicaPaused / ReplicaFailure
//! ```

use contracts::kubevirt::consts::reason;
use controller_runtime::events::Severity;
use crds::kubevirt::replicaset::selects;
use crds::kubevirt::replicaset::{
    ReplicaSetConditionType, VirtualMachineInstanceReplicaSetCondition, VirtualMachineInstanceReplicaSetStatus,
};
use crds::kubevirt::vmi::{ConditionStatus, VirtualMachineInstanceConditionType as VmiType};
use crds::kubevirt::{VirtualMachineInstance, VirtualMachineInstanceReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference, Time};
use kube::{Resource, ResourceExt};

/// At most this many VMIs are created or deleted per reconcile (upstream's `burstReplicas` default).
pub const BURST: usize = 250;
/// Event reason of a created VMI (upstream's).
pub const EVENT_CREATED: &str = "SuccessfulCreate";
/// Event reason of a deleted VMI (upstream's).
pub const EVENT_DELETED: &str = "SuccessfulDelete";
/// Event reason of pausing (upstream's).
pub const EVENT_PAUSED: &str = "SuccessfulPaused";
/// Event reason of resuming (upstream's).
pub const EVENT_RESUMED: &str = "SuccessfulResumed";
/// `ReplicaPaused` reason (upstream's).
pub const REASON_PAUSED: &str = "Paused";
/// `ReplicaFailure` reasons of a refused create / delete (upstream's).
pub const REASON_FAILED_CREATE: &str = "FailedCreate";

/// Everything the planner looks at.
pub struct Observed<'a> {
    /// The replica set.
    pub rs: &'a VirtualMachineInstanceReplicaSet,
    /// The VMIs of its namespace, as the API server listed them (in list order).
    pub vmis: Vec<&'a VirtualMachineInstance>,
    /// Now.
    pub now: Time,
}

/// One thing to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Make the RS the controller of this orphan VMI (it matches the selector).
    Adopt(String),
    /// Create a VMI.
    Create(Box<VirtualMachineInstance>),
    /// Delete the VMI with this name and UID.
    Delete {
        /// Its name.
        name: String,
        /// Its UID (precondition).
        uid: String,
    },
    /// Replace the status.
    UpdateStatus(Box<VirtualMachineInstanceReplicaSetStatus>),
    /// Publish an event on the RS.
    Event {
        /// Normal or Warning.
        severity: Severity,
        /// Reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
}

/// The selector as `kubectl` and the scale subresource write it (`k=v,k2 in (a,b)`).
pub fn selector_string(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            "DoesNotExist" => format!("!{}", e.key),
            other => format!("{} {other} ({values})", e.key),
        });
    }
    parts.join(",")
}

fn controller_uid(vmi: &VirtualMachineInstance) -> Option<&str> {
    vmi.meta().owner_references.iter().flatten().find(|o| o.controller == Some(true)).map(|o| o.uid.as_str())
}

fn pod_terminating(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.condition(&VmiType::Ready))
        .is_some_and(|c| c.status == ConditionStatus::False && c.reason.as_deref() == Some(reason::POD_TERMINATING))
}

fn ready(vmi: &VirtualMachineInstance) -> bool {
    vmi.status.as_ref().and_then(|s| s.condition(&VmiType::Ready)).is_some_and(|c| c.status == ConditionStatus::True)
}

/// The RS as a VMI's controller owner reference.
pub fn owner_reference(rs: &VirtualMachineInstanceReplicaSet) -> OwnerReference {
    OwnerReference {
        api_version: VirtualMachineInstanceReplicaSet::api_version(&()).into_owned(),
        kind: VirtualMachineInstanceReplicaSet::kind(&()).into_owned(),
        name: rs.name_any(),
        uid: rs.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// A new VMI of the set: the template's labels and annotations, `generateName` from the template's name, else
/// its generateName, else the RS name; the RS as controller.
pub fn new_vmi(rs: &VirtualMachineInstanceReplicaSet) -> VirtualMachineInstance {
    let meta = rs.spec.template.metadata.clone().unwrap_or_default();
    let generate_name = meta.name.clone().or(meta.generate_name.clone()).unwrap_or_else(|| rs.name_any());
    let mut vmi = VirtualMachineInstance::new("", rs.spec.template.spec.clone().unwrap_or_default());
    vmi.metadata = ObjectMeta {
        generate_name: Some(generate_name),
        namespace: rs.namespace(),
        labels: meta.labels,
        annotations: meta.annotations,
        owner_references: Some(vec![owner_reference(rs)]),
        ..Default::default()
    };
    vmi
}

/// Decides what to do for the replica set.
pub fn plan(o: &Observed<'_>) -> Vec<Action> {
    let rs = o.rs;
    let uid = rs.uid().unwrap_or_default();
    let labels_of = |v: &VirtualMachineInstance| v.metadata.labels.clone().unwrap_or_default();
    let mut actions = Vec::new();
    let deleting = rs.metadata.deletion_timestamp.is_some();
    // Ours: controlled by the RS; orphans matching the selector are adopted (not while the RS is deleted).
    let mut ours: Vec<&VirtualMachineInstance> = Vec::new();
    for v in &o.vmis {
        match controller_uid(v) {
            Some(owner) if owner == uid => ours.push(v),
            None if !deleting
                && v.metadata.deletion_timestamp.is_none()
                && selects(&rs.spec.selector, &labels_of(v)) =>
            {
                actions.push(Action::Adopt(v.name_any()));
                ours.push(v);
            }
            _ => {}
        }
    }
    let finished = |v: &VirtualMachineInstance| v.is_final() || pod_terminating(v);
    let active: Vec<&VirtualMachineInstance> =
        ours.iter().copied().filter(|v| !finished(v) && v.metadata.deletion_timestamp.is_none()).collect();
    let old = rs.status.clone().unwrap_or_default();
    let mut status = old.clone();
    if !deleting && !rs.paused() {
        let want = usize::try_from(rs.replicas().max(0)).unwrap_or(0);
        if active.len() < want {
            for _ in 0..(want - active.len()).min(BURST) {
                actions.push(Action::Create(Box::new(new_vmi(rs))));
            }
        } else {
            for v in active.iter().skip(want).take(BURST) {
                actions.push(delete(v));
            }
        }
    }
    // Finished VMIs are removed; a new one takes the place (above, on the next pass once they are gone).
    if !deleting {
        for v in ours.iter().filter(|v| finished(v) && v.metadata.deletion_timestamp.is_none()) {
            actions.push(delete(v));
        }
    }
    status.replicas = Some(i32::try_from(active.len()).unwrap_or(i32::MAX));
    status.ready_replicas = Some(i32::try_from(active.iter().filter(|v| ready(v)).count()).unwrap_or(i32::MAX));
    status.label_selector = Some(selector_string(&rs.spec.selector));
    // ReplicaPaused while paused, with an event when it changes.
    let was_paused = old.conditions.iter().flatten().any(|c| c.type_ == ReplicaSetConditionType::ReplicaPaused);
    let conditions = status.conditions.get_or_insert_default();
    if rs.paused() && !was_paused {
        conditions.push(VirtualMachineInstanceReplicaSetCondition {
            type_: ReplicaSetConditionType::ReplicaPaused,
            status: ConditionStatus::True,
            reason: Some(REASON_PAUSED.into()),
            message: Some(String::new()),
            last_transition_time: Some(o.now.clone()),
            ..Default::default()
        });
        actions.push(Action::Event { severity: Severity::Normal, reason: EVENT_PAUSED, message: "Paused".into() });
    } else if !rs.paused() && was_paused {
        conditions.retain(|c| c.type_ != ReplicaSetConditionType::ReplicaPaused);
        actions.push(Action::Event { severity: Severity::Normal, reason: EVENT_RESUMED, message: "Resumed".into() });
    }
    // A failure is reported by the apply step; a pass that needs no create clears it.
    if !actions.iter().any(|a| matches!(a, Action::Create(_))) {
        conditions.retain(|c| c.type_ != ReplicaSetConditionType::ReplicaFailure);
    }
    if conditions.is_empty() {
        status.conditions = None;
    }
    if status != old {
        actions.push(Action::UpdateStatus(Box::new(status)));
    }
    actions
}

fn delete(v: &VirtualMachineInstance) -> Action {
    Action::Delete { name: v.name_any(), uid: v.uid().unwrap_or_default() }
}

#[cfg(test)]
mod tests {
    use crds::kubevirt::replicaset::VirtualMachineInstanceReplicaSetSpec;
    use crds::kubevirt::vm::VirtualMachineInstanceTemplateSpec;
    use crds::kubevirt::vmi::{
        VirtualMachineInstanceCondition, VirtualMachineInstancePhase as Phase, VirtualMachineInstanceSpec,
        VirtualMachineInstanceStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use k8s_openapi::jiff::Timestamp;

    use std::collections::BTreeMap;

    use super::*;

    fn labels() -> BTreeMap<String, String> {
        [("kubevirt.io/vmReplicaSet".to_owned(), "rs".to_owned())].into()
    }

    fn rs(replicas: Option<i32>, paused: bool) -> VirtualMachineInstanceReplicaSet {
        let mut rs = VirtualMachineInstanceReplicaSet::new(
            "rs",
            VirtualMachineInstanceReplicaSetSpec {
                replicas,
                paused: paused.then_some(true),
                selector: LabelSelector { match_labels: Some(labels()), ..Default::default() },
                template: VirtualMachineInstanceTemplateSpec {
                    metadata: Some(ObjectMeta { labels: Some(labels()), ..Default::default() }),
                    spec: Some(VirtualMachineInstanceSpec::default()),
                },
                ..Default::default()
            },
        );
        rs.metadata.uid = Some("rs-uid".into());
        rs.metadata.namespace = Some("ns".into());
        rs
    }

    fn vmi(name: &str, owner: Option<&str>, phase: Phase, ready: bool) -> VirtualMachineInstance {
        let mut v = VirtualMachineInstance::new(name, VirtualMachineInstanceSpec::default());
        v.metadata.uid = Some(format!("{name}-uid"));
        v.metadata.labels = Some(labels());
        v.metadata.owner_references =
            owner.map(|uid| vec![OwnerReference { uid: uid.into(), controller: Some(true), ..Default::default() }]);
        let mut st = VirtualMachineInstanceStatus { phase: Some(phase), ..Default::default() };
        if ready {
            st.conditions =
                Some(vec![VirtualMachineInstanceCondition::new(VmiType::Ready, ConditionStatus::True, "", "")]);
        }
        v.status = Some(st);
        v
    }

    fn now() -> Time {
        Time(Timestamp::from_second(1_800_000_000).unwrap_or_else(|e| panic!("{e}")))
    }

    fn counts(actions: &[Action]) -> (usize, Vec<String>, Vec<String>) {
        let creates = actions.iter().filter(|a| matches!(a, Action::Create(_))).count();
        let deletes = actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { name, .. } => Some(name.clone()),
                _ => None,
            })
            .collect();
        let adopts = actions
            .iter()
            .filter_map(|a| match a {
                Action::Adopt(n) => Some(n.clone()),
                _ => None,
            })
            .collect();
        (creates, deletes, adopts)
    }

    fn status(actions: &[Action]) -> VirtualMachineInstanceReplicaSetStatus {
        actions
            .iter()
            .find_map(|a| match a {
                Action::UpdateStatus(s) => Some(s.as_ref().clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no status in {actions:?}"))
    }

    #[test]
    fn scales_up_from_nothing_with_generate_name_and_owner() {
        let rs = rs(Some(3), false);
        let a = plan(&Observed { rs: &rs, vmis: vec![], now: now() });
        assert_eq!(counts(&a).0, 3);
        let Some(Action::Create(v)) = a.first() else { panic!("{a:?}") };
        assert_eq!(v.metadata.generate_name.as_deref(), Some("rs"));
        assert_eq!(v.metadata.labels, Some(labels()));
        assert_eq!(v.metadata.owner_references.clone().unwrap_or_default()[0].uid, "rs-uid");
        let s = status(&a);
        assert_eq!((s.replicas, s.ready_replicas), (Some(0), Some(0)));
        assert_eq!(s.label_selector.as_deref(), Some("kubevirt.io/vmReplicaSet=rs"));
        // replicas defaults to 1.
        let one = rs_default();
        assert_eq!(counts(&plan(&Observed { rs: &one, vmis: vec![], now: now() })).0, 1);
    }

    fn rs_default() -> VirtualMachineInstanceReplicaSet {
        rs(None, false)
    }

    #[test]
    fn scales_down_in_list_order_and_replaces_finished_vmis() {
        let rs1 = rs(Some(1), false);
        let (a, b, c) = (
            vmi("a", Some("rs-uid"), Phase::Running, true),
            vmi("b", Some("rs-uid"), Phase::Running, true),
            vmi("c", Some("rs-uid"), Phase::Failed, false),
        );
        let act = plan(&Observed { rs: &rs1, vmis: vec![&a, &b, &c], now: now() });
        let (creates, deletes, _) = counts(&act);
        assert_eq!(creates, 0);
        assert_eq!(deletes, ["b", "c"], "the surplus after the first, and the finished one");
        let s = status(&act);
        assert_eq!((s.replicas, s.ready_replicas), (Some(2), Some(2)), "active before the deletions");
        // 2 wanted, one Failed: it is deleted and one more created.
        let rs2 = rs(Some(2), false);
        let act = plan(&Observed { rs: &rs2, vmis: vec![&a, &c], now: now() });
        assert_eq!(counts(&act), (1, vec!["c".into()], vec![]));
        // A VMI whose pod is terminating counts as finished.
        let mut t = vmi("t", Some("rs-uid"), Phase::Running, false);
        t.status.get_or_insert_default().conditions = Some(vec![VirtualMachineInstanceCondition::new(
            VmiType::Ready,
            ConditionStatus::False,
            reason::POD_TERMINATING,
            "",
        )]);
        let act = plan(&Observed { rs: &rs2, vmis: vec![&a, &t], now: now() });
        assert_eq!(counts(&act), (1, vec!["t".into()], vec![]));
    }

    #[test]
    fn adopts_matching_orphans_and_ignores_others() {
        let rs = rs(Some(2), false);
        let orphan = vmi("orphan", None, Phase::Running, true);
        let foreign = vmi("foreign", Some("other"), Phase::Running, true);
        let mut unlabelled = vmi("plain", None, Phase::Running, true);
        unlabelled.metadata.labels = None;
        let act = plan(&Observed { rs: &rs, vmis: vec![&orphan, &foreign, &unlabelled], now: now() });
        assert_eq!(counts(&act), (1, vec![], vec!["orphan".into()]));
    }

    #[test]
    fn paused_sets_do_not_scale_and_say_so() {
        let rs = rs(Some(3), true);
        let a = vmi("a", Some("rs-uid"), Phase::Running, false);
        let act = plan(&Observed { rs: &rs, vmis: vec![&a], now: now() });
        assert_eq!(counts(&act).0, 0);
        let s = status(&act);
        let c = s.conditions.clone().unwrap_or_default();
        assert_eq!(c[0].type_, ReplicaSetConditionType::ReplicaPaused);
        assert_eq!(c[0].reason.as_deref(), Some(REASON_PAUSED));
        assert!(act.iter().any(|a| matches!(a, Action::Event { reason: EVENT_PAUSED, .. })));
        let mut resumed = rs.clone();
        resumed.spec.paused = None;
        resumed.status = Some(s);
        let act = plan(&Observed { rs: &resumed, vmis: vec![&a], now: now() });
        assert_eq!(counts(&act).0, 2);
        assert_eq!(status(&act).conditions, None);
        assert!(act.iter().any(|a| matches!(a, Action::Event { reason: EVENT_RESUMED, .. })));
    }

    #[test]
    fn selectors_evaluate_like_kubernetes() {
        let l: BTreeMap<String, String> = [("a".to_owned(), "1".to_owned()), ("b".to_owned(), "2".to_owned())].into();
        let expr = |key: &str, op: &str, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        };
        let sel = |e: Vec<LabelSelectorRequirement>| LabelSelector { match_expressions: Some(e), ..Default::default() };
        assert!(selects(&sel(vec![expr("a", "In", &["1", "3"])]), &l));
        assert!(!selects(&sel(vec![expr("a", "NotIn", &["1"])]), &l));
        assert!(selects(&sel(vec![expr("c", "DoesNotExist", &[])]), &l));
        assert!(selects(&sel(vec![expr("b", "Exists", &[])]), &l));
        assert!(!selects(&LabelSelector::default(), &l), "an empty selector selects nothing");
        assert_eq!(
            selector_string(&LabelSelector {
                match_labels: Some([("a".to_owned(), "1".to_owned())].into()),
                match_expressions: Some(vec![expr("b", "In", &["2", "3"])]),
            }),
            "a=1,b in (2,3)"
        );
    }
}
