//! The migration controller's decisions, pure (contract §5.3): what was read ([`Observed`]) → what to do
//! ([`Plan`]).
//!
//! ```text
//! (none) ─► Pending ─target pod created─► Scheduling ─pod ready─► Scheduled ─hand-off (VMI migrationState + label)─►
//!   PreparingTarget ─target published its address─► TargetReady ─source started─► Running ─► Succeeded / Failed
//! any phase: target pod failed / unschedulable too long / VMI gone / source or target failed ─► Failed
//! deleted: before hand-off the target pod goes; after it the VMI's migrationState.abortRequested, the source
//!          cancels; the finalizer comes off once the migration is over
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use contracts::kubevirt::consts::{ann, finalizer, label};
use controller_runtime::events::Severity;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::migration::{
    MigrationConditionType, MigrationPhase as Phase, VirtualMachineInstanceMigration,
    VirtualMachineInstanceMigrationCondition, VirtualMachineInstanceMigrationStatus,
};
use crds::kubevirt::vmi::{
    ConditionStatus, MigrationMethod, VirtualMachineInstanceConditionType as VmiCondition,
    VirtualMachineInstanceMigrationState as State, VirtualMachineInstancePhase as VmiPhase,
};
use k8s_openapi::api::core::v1::{Affinity, Pod, PodAffinityTerm, PodAntiAffinity};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::ResourceExt;

use crds::kubevirt::config::MigrationConfiguration;

use crate::vmi::pod::{self, Claim, PodSettings};
use crate::vmi::status::{self, PodState};

/// Seconds a target pod may stay Pending and unschedulable (upstream's default; the VMIM's annotation
/// `kubevirt.io/migrationUnschedulablePodTimeoutSeconds` overrides it).
pub const UNSCHEDULABLE_POD_TIMEOUT: Duration = Duration::from_secs(300);
/// Seconds a target pod may stay Pending for any reason (annotation `kubevirt.io/migrationPendingPodTimeoutSeconds`).
pub const PENDING_POD_TIMEOUT: Duration = Duration::from_secs(900);
/// How often a migration that is not over is looked at again (besides the watches).
pub const POLL: Duration = Duration::from_secs(2);
/// The topology key of the target pod's anti-affinity to the VMI's other pods.
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";

/// Everything the planner looks at.
pub struct Observed<'a> {
    /// The migration.
    pub vmim: &'a VirtualMachineInstanceMigration,
    /// Its VMI (`spec.vmiName` in its namespace), if it exists.
    pub vmi: Option<&'a VirtualMachineInstance>,
    /// The target pods of this migration (label `kubevirt.io/migrationJobUID`).
    pub target_pods: Vec<&'a Pod>,
    /// The name of the VMI's launcher pod on its node (the source).
    pub source_pod: Option<String>,
    /// Whether an older migration of the same VMI is not over.
    pub older_in_flight: bool,
    /// Migrations running (Scheduling … Running) in the cluster and from the VMI's node, this one excluded.
    pub running: (usize, usize),
    /// The caps on those two (`parallelMigrationsPerCluster`, `parallelOutboundMigrationsPerNode`).
    pub caps: (usize, usize),
    /// What the migration runs with once handed off: the cluster's configuration with the matching MigrationPolicy
    /// laid over it.
    pub configuration: &'a Frozen,
    /// The VMI's claims, when all are bound (volume name → claim); `None`: some claim is missing.
    pub claims: Option<BTreeMap<String, Claim>>,
    /// Pod rendering settings.
    pub settings: &'a PodSettings,
    /// The current time.
    pub now: Time,
}

/// The migration configuration frozen into `migrationState` at the hand-off (upstream resolves the policy there).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frozen {
    /// The MigrationPolicy that matched the VMI, if any.
    pub policy: Option<String>,
    /// The configuration in effect.
    pub configuration: MigrationConfiguration,
}

/// One step of a plan.
#[derive(Debug, Clone)]
pub enum Action {
    /// Add the finalizer `kubevirt.io/migrationJobFinalize`.
    AddFinalizer,
    /// Remove it (the migration is over or was never handed off).
    RemoveFinalizer,
    /// Create this target pod.
    CreatePod(Box<Pod>),
    /// Delete the target pod of this name.
    DeletePod(String),
    /// Replace the VMI with this one (hand-off, abort request, label clean-up).
    UpdateVmi(Box<VirtualMachineInstance>),
    /// Write the migration's status.
    UpdateStatus(Box<VirtualMachineInstanceMigrationStatus>),
    /// An event on the migration.
    Event {
        /// Normal or Warning.
        severity: Severity,
        /// Reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
}

/// The result of planning.
#[derive(Debug, Default)]
pub struct Plan {
    /// In order.
    pub actions: Vec<Action>,
    /// Look again after this long.
    pub requeue: Option<Duration>,
}

/// Event reasons (upstream's).
pub mod event {
    /// The target pod was created.
    pub const CREATED: &str = "SuccessfulCreate";
    /// The target pod was deleted.
    pub const DELETED: &str = "SuccessfulDelete";
    /// The migration was handed to the nodes.
    pub const HANDOFF: &str = "PreparingTarget";
    /// The migration succeeded.
    pub const SUCCEEDED: &str = "SuccessfulMigration";
    /// The migration failed.
    pub const FAILED: &str = "FailedMigration";
    /// The migration was cancelled.
    pub const ABORTED: &str = "MigrationAbortRequested";
}

/// This migration's state in the VMI's status, if the VMI has been handed this migration.
pub fn handed_off<'a>(
    vmim: &VirtualMachineInstanceMigration,
    vmi: Option<&'a VirtualMachineInstance>,
) -> Option<&'a State> {
    let uid = vmim.metadata.uid.as_deref()?;
    vmi?.status.as_ref()?.migration_state.as_ref().filter(|s| s.migration_uid.as_deref() == Some(uid))
}

fn seconds(vmim: &VirtualMachineInstanceMigration, key: &str, default: Duration) -> Duration {
    vmim.annotations().get(key).and_then(|v| v.parse::<u64>().ok()).map_or(default, Duration::from_secs)
}

fn elapsed(since: Option<&Time>, now: &Time) -> Duration {
    since.map_or(Duration::ZERO, |t| {
        Duration::from_secs(now.0.as_second().saturating_sub(t.0.as_second()).max(0).unsigned_abs())
    })
}

/// The target pod: the VMI's launcher pod (same volumes, image, placement), labelled with the migration's UID and
/// annotated with its name, never on a node running another of the VMI's pods (required anti-affinity on
/// `kubevirt.io/created-by` per hostname), with `addedNodeSelector` merged under the VMI's own selector.
pub fn render_target(
    vmim: &VirtualMachineInstanceMigration,
    vmi: &VirtualMachineInstance,
    claims: &BTreeMap<String, Claim>,
    settings: &PodSettings,
) -> Pod {
    let mut p = pod::render(vmi, claims, settings);
    p.labels_mut().insert(label::MIGRATION_JOB_UID.into(), vmim.metadata.uid.clone().unwrap_or_default());
    p.annotations_mut().insert(ann::MIGRATION_JOB_NAME.into(), vmim.name_any());
    let spec = p.spec.get_or_insert_with(Default::default);
    let selector = spec.node_selector.get_or_insert_with(BTreeMap::new);
    for (k, v) in vmim.spec.added_node_selector.iter().flatten() {
        selector.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let term = PodAffinityTerm {
        label_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                label::CREATED_BY.to_owned(),
                vmi.metadata.uid.clone().unwrap_or_default(),
            )])),
            ..Default::default()
        }),
        topology_key: HOSTNAME_TOPOLOGY.into(),
        ..Default::default()
    };
    let affinity = spec.affinity.get_or_insert_with(Affinity::default);
    let anti = affinity.pod_anti_affinity.get_or_insert_with(PodAntiAffinity::default);
    anti.required_during_scheduling_ignored_during_execution.get_or_insert_with(Vec::new).push(term);
    p
}

/// Plans one reconcile of `o.vmim`.
pub fn plan(o: &Observed<'_>) -> Plan {
    let vmim = o.vmim;
    let now = &o.now;
    let mut plan = Plan::default();
    let old = vmim.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let phase = vmim.phase().cloned();
    let state = handed_off(vmim, o.vmi);
    let has_finalizer = vmim.finalizers().iter().any(|f| f == finalizer::MIGRATION_JOB);
    let mut fail = |status: &mut VirtualMachineInstanceMigrationStatus, plan: &mut Plan, message: String| {
        if status.phase.as_ref().is_some_and(Phase::is_final) {
            return;
        }
        status.set_phase(Phase::Failed, now);
        plan.actions.push(Action::Event { severity: Severity::Warning, reason: event::FAILED, message });
    };
    let delete_targets = |plan: &mut Plan| {
        for p in o.target_pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            plan.actions.push(Action::DeletePod(p.name_any()));
            plan.actions.push(Action::Event {
                severity: Severity::Normal,
                reason: event::DELETED,
                message: format!("Deleted migration target pod {}", p.name_any()),
            });
        }
    };
    if let Some(s) = state {
        status.migration_state = Some(s.clone());
    }

    // Deleted: cancel.
    if vmim.metadata.deletion_timestamp.is_some() {
        match state {
            Some(s) if !is_over(s) && !status.phase.as_ref().is_some_and(Phase::is_final) => {
                if s.abort_requested != Some(true)
                    && let Some(vmi) = o.vmi
                {
                    let mut next = vmi.clone();
                    if let Some(ms) = next.status.as_mut().and_then(|st| st.migration_state.as_mut()) {
                        ms.abort_requested = Some(true);
                    }
                    plan.actions.push(Action::UpdateVmi(Box::new(next)));
                    plan.actions.push(Action::Event {
                        severity: Severity::Normal,
                        reason: event::ABORTED,
                        message: format!("Migration {} is being cancelled", vmim.name_any()),
                    });
                }
                set_condition(&mut status, MigrationConditionType::MigrationAbortRequested, now);
                plan.requeue = Some(POLL);
            }
            _ => {
                if let Some(s) = state {
                    apply_over(s, o, &mut status, &mut plan, &mut fail);
                }
                if status.phase.as_ref() != Some(&Phase::Succeeded) {
                    if state.is_none_or(|s| s.failed != Some(true)) {
                        delete_targets(&mut plan);
                        clear_target_label(o, &mut plan);
                    }
                    fail(&mut status, &mut plan, format!("Migration {} was deleted", vmim.name_any()));
                }
                if has_finalizer {
                    plan.actions.push(Action::RemoveFinalizer);
                }
            }
        }
        finish(old, status, &mut plan);
        return plan;
    }

    if phase.as_ref().is_some_and(Phase::is_final) {
        if phase == Some(Phase::Failed) {
            delete_targets(&mut plan);
            clear_target_label(o, &mut plan);
        }
        finish(old, status, &mut plan);
        return plan;
    }
    if !has_finalizer {
        plan.actions.push(Action::AddFinalizer);
    }
    let Some(vmi) = o.vmi else {
        delete_targets(&mut plan);
        fail(&mut status, &mut plan, format!("Migration failed: VMI {} does not exist", vmim.spec.vmi_name));
        finish(old, status, &mut plan);
        return plan;
    };
    if vmi.phase().is_final() || (vmi.metadata.deletion_timestamp.is_some() && state.is_none()) {
        delete_targets(&mut plan);
        fail(&mut status, &mut plan, format!("Migration failed: VMI {} is shutting down", vmi.name_any()));
        finish(old, status, &mut plan);
        return plan;
    }
    plan.requeue = Some(POLL);
    let target = o.target_pods.first().copied();
    match phase {
        None => {
            if o.older_in_flight {
                fail(
                    &mut status,
                    &mut plan,
                    format!("Migration failed: VMI {} has another migration in flight", vmi.name_any()),
                );
            } else {
                status.set_phase(Phase::Pending, now);
            }
        }
        Some(Phase::Pending) => {
            let not_migratable = vmi
                .status
                .as_ref()
                .and_then(|s| s.condition(&VmiCondition::LiveMigratable))
                .filter(|c| c.status == ConditionStatus::False);
            if let Some(c) = not_migratable {
                fail(
                    &mut status,
                    &mut plan,
                    format!("Migration failed: VMI is not migratable: {}", c.message.clone().unwrap_or_default()),
                );
            } else if vmi.phase() != VmiPhase::Running {
                // Waits for the guest to run (the webhook already refuses VMIs that are not running).
            } else if o.running.0 >= o.caps.0 || o.running.1 >= o.caps.1 {
                // Throttled: waits for a slot (§5.3).
            } else if let Some(claims) = &o.claims {
                if target.is_none() {
                    plan.actions.push(Action::CreatePod(Box::new(render_target(vmim, vmi, claims, o.settings))));
                }
                status.set_phase(Phase::Scheduling, now);
            }
        }
        Some(Phase::Scheduling) => match target.map(|p| (p, status::observe(p))) {
            None => {} // created a moment ago: the cache shows it soon
            Some((_, PodState::Ready)) => status.set_phase(Phase::Scheduled, now),
            Some((p, PodState::Down { message })) => {
                fail(
                    &mut status,
                    &mut plan,
                    message.unwrap_or_else(|| format!("migration target pod {} failed", p.name_any())),
                );
                delete_targets(&mut plan);
            }
            Some((_, PodState::Terminating)) => {
                fail(&mut status, &mut plan, "migration target pod was deleted".into());
            }
            Some((p, PodState::Starting { .. })) => {
                let age = elapsed(p.metadata.creation_timestamp.as_ref(), now);
                let unschedulable = status::unschedulable(p).is_some();
                let limit_u = seconds(vmim, ann::MIGRATION_UNSCHEDULABLE_POD_TIMEOUT, UNSCHEDULABLE_POD_TIMEOUT);
                let limit_p = seconds(vmim, ann::MIGRATION_PENDING_POD_TIMEOUT, PENDING_POD_TIMEOUT);
                let pending = p.status.as_ref().and_then(|s| s.phase.as_deref()).is_none_or(|ph| ph == "Pending");
                if pending && unschedulable && age >= limit_u {
                    delete_targets(&mut plan);
                    fail(
                        &mut status,
                        &mut plan,
                        format!(
                            "Migration target pod {} was unschedulable for more than {} seconds",
                            p.name_any(),
                            limit_u.as_secs()
                        ),
                    );
                } else if pending && age >= limit_p {
                    delete_targets(&mut plan);
                    fail(
                        &mut status,
                        &mut plan,
                        format!(
                            "Migration target pod {} was pending for more than {} seconds",
                            p.name_any(),
                            limit_p.as_secs()
                        ),
                    );
                }
            }
        },
        Some(Phase::Scheduled) => match target {
            Some(p) if state.is_none() => {
                let next = hand_off(vmim, vmi, p, o.source_pod.clone(), o.configuration);
                plan.actions.push(Action::UpdateVmi(Box::new(next)));
                plan.actions.push(Action::Event {
                    severity: Severity::Normal,
                    reason: event::HANDOFF,
                    message: format!("Migration target pod {} is ready, handing off", p.name_any()),
                });
                status.set_phase(Phase::PreparingTarget, now);
            }
            Some(_) => status.set_phase(Phase::PreparingTarget, now),
            None => fail(&mut status, &mut plan, "migration target pod is gone".into()),
        },
        Some(_) => {}
    }
    if let Some(s) = state {
        if s.target_node_address.is_some() && status.phase == Some(Phase::PreparingTarget) {
            status.set_phase(Phase::TargetReady, now);
        }
        if s.start_timestamp.is_some() && status.phase == Some(Phase::TargetReady) {
            status.set_phase(Phase::Running, now);
        }
        // The target pod died before the source started: nothing will ever send; record the failure on the VMI.
        let target_down =
            target.is_none_or(|p| matches!(status::observe(p), PodState::Down { .. } | PodState::Terminating));
        if target_down && s.start_timestamp.is_none() && !is_over(s) {
            let mut next = vmi.clone();
            if let Some(ms) = next.status.as_mut().and_then(|st| st.migration_state.as_mut()) {
                ms.failed = Some(true);
                ms.failure_reason = Some("the migration target pod is gone".into());
                ms.end_timestamp = Some(now.clone());
            }
            plan.actions.push(Action::UpdateVmi(Box::new(next)));
        }
        apply_over(s, o, &mut status, &mut plan, &mut fail);
    }
    finish(old, status, &mut plan);
    plan
}

fn is_over(s: &State) -> bool {
    s.completed == Some(true) || s.failed == Some(true)
}

/// Succeeded / Failed from the VMI's migrationState once the nodes report the end.
fn apply_over(
    s: &State,
    o: &Observed<'_>,
    status: &mut VirtualMachineInstanceMigrationStatus,
    plan: &mut Plan,
    fail: &mut impl FnMut(&mut VirtualMachineInstanceMigrationStatus, &mut Plan, String),
) {
    if status.phase.as_ref().is_some_and(Phase::is_final) {
        return;
    }
    let now = &o.now;
    if s.failed == Some(true) {
        fail(status, plan, format!("Migration failed: {}", s.failure_reason.clone().unwrap_or_default()));
        for p in o.target_pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
            plan.actions.push(Action::DeletePod(p.name_any()));
        }
        clear_target_label(o, plan);
        return;
    }
    let taken_over = o.vmi.and_then(|v| v.status.as_ref()?.node_name.as_deref()) == s.target_node.as_deref();
    // The target plugs a hotplug's vCPUs and memory in and records it in the same write that takes the VMI over
    // (`node-agent/src/migration/target.rs`), so a Succeeded workload update has them.
    if s.completed == Some(true) && taken_over {
        status.set_phase(Phase::Succeeded, now);
        plan.actions.push(Action::Event {
            severity: Severity::Normal,
            reason: event::SUCCEEDED,
            message: format!(
                "Source node reported migration succeeded, VMI is now on {}",
                s.target_node.clone().unwrap_or_default()
            ),
        });
    }
}

/// Removes the VMI's `kubevirt.io/migrationTargetNodeName` label left by a failed migration of this VMIM.
fn clear_target_label(o: &Observed<'_>, plan: &mut Plan) {
    let Some(vmi) = o.vmi else { return };
    let Some(s) = handed_off(o.vmim, Some(vmi)) else { return };
    if vmi.labels().get(label::MIGRATION_TARGET_NODE_NAME) == s.target_node.as_ref() && s.target_node.is_some() {
        let mut next = vmi.clone();
        next.labels_mut().remove(label::MIGRATION_TARGET_NODE_NAME);
        if let Some(st) = next.status.as_mut()
            && let Some(target) = o.target_pods.first().and_then(|p| p.metadata.uid.as_ref())
        {
            st.active_pods.get_or_insert_with(BTreeMap::new).remove(target);
        }
        plan.actions.push(Action::UpdateVmi(Box::new(next)));
    }
}

fn set_condition(status: &mut VirtualMachineInstanceMigrationStatus, type_: MigrationConditionType, now: &Time) {
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    if conditions.iter().any(|c| c.type_ == type_) {
        return;
    }
    let mut c = VirtualMachineInstanceMigrationCondition::new(type_, ConditionStatus::True, "", "");
    c.reason = None;
    c.message = None;
    c.last_transition_time = Some(now.clone());
    conditions.push(c);
}

fn finish(old: VirtualMachineInstanceMigrationStatus, status: VirtualMachineInstanceMigrationStatus, plan: &mut Plan) {
    if status != old {
        plan.actions.push(Action::UpdateStatus(Box::new(status)));
    }
}

/// The hand-off: the VMI's new `migrationState` for this migration (source and target node and pod), the target
/// node label that makes the target agent pick the VMI up, the target pod among the active pods, and the method
/// (block migration when any disk is pod-local).
pub fn hand_off(
    vmim: &VirtualMachineInstanceMigration,
    vmi: &VirtualMachineInstance,
    target: &Pod,
    source_pod: Option<String>,
    frozen: &Frozen,
) -> VirtualMachineInstance {
    let mut next = vmi.clone();
    let target_node = target.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    next.labels_mut().insert(label::MIGRATION_TARGET_NODE_NAME.into(), target_node.clone());
    let status = next.status.get_or_insert_with(Default::default);
    let source_node = status.node_name.clone();
    status.migration_state = Some(State {
        migration_uid: vmim.metadata.uid.clone(),
        target_node: Some(target_node.clone()),
        target_pod: Some(target.name_any()),
        source_node,
        source_pod,
        migration_policy_name: frozen.policy.clone(),
        migration_configuration: Some(frozen.configuration.clone()),
        ..Default::default()
    });
    status
        .active_pods
        .get_or_insert_with(BTreeMap::new)
        .insert(target.metadata.uid.clone().unwrap_or_default(), target_node);
    let local = vmi.spec.volumes.iter().flatten().any(|v| {
        v.container_disk.is_some()
            || v.empty_disk.is_some()
            || v.cloud_init_no_cloud.is_some()
            || v.cloud_init_config_drive.is_some()
    });
    status.migration_method =
        Some(if local { MigrationMethod::BlockMigration } else { MigrationMethod::LiveMigration });
    next
}

/// Finalized migrations kept per VMI (upstream's `defaultFinalizedMigrationGarbageCollectionBuffer`).
pub const KEEP_FINALIZED: usize = 5;

/// The finalized migrations of one VMI to delete: all but the [`KEEP_FINALIZED`] newest (by creation time, then
/// name) of those final and not already being deleted (upstream's `garbageCollectFinalizedMigrations`).
pub fn garbage(migrations: &[&VirtualMachineInstanceMigration]) -> Vec<String> {
    let mut done: Vec<&VirtualMachineInstanceMigration> =
        migrations.iter().copied().filter(|m| m.is_final() && m.metadata.deletion_timestamp.is_none()).collect();
    done.sort_by(|a, b| a.creation_timestamp().cmp(&b.creation_timestamp()).then(a.name_any().cmp(&b.name_any())));
    let excess = done.len().saturating_sub(KEEP_FINALIZED);
    done.into_iter().take(excess).map(ResourceExt::name_any).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap_or_else(|e| panic!("{e}")))
    }

    fn vmim(phase: Option<&str>, deleted: bool) -> VirtualMachineInstanceMigration {
        let mut m: VirtualMachineInstanceMigration = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "mig", "namespace": "ns", "uid": "m-1", "finalizers": ["kubevirt.io/migrationJobFinalize"]},
            "spec": {"vmiName": "vmi", "addedNodeSelector": {"zone": "b", "kubevirt.io/schedulable": "false"}},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(p) = phase {
            m.status =
                Some(VirtualMachineInstanceMigrationStatus { phase: Some(Phase::from(p)), ..Default::default() });
        }
        if deleted {
            m.metadata.deletion_timestamp = Some(t(5));
        }
        m
    }

    fn vmi(state: Option<serde_json::Value>) -> VirtualMachineInstance {
        let mut status = json!({"phase": "Running", "nodeName": "n1", "activePods": {"p-src": "n1"},
            "conditions": [{"type": "LiveMigratable", "status": "True"}]});
        if let Some(s) = state {
            status["migrationState"] = s;
        }
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vmi", "namespace": "ns", "uid": "v-1", "resourceVersion": "3"},
            "spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {}},
                     "volumes": [{"name": "root", "containerDisk": {"image": "guest:1"}}]},
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn target(ready: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "virt-launcher-vmi-tgt", "namespace": "ns", "uid": "p-tgt", "creationTimestamp": "1970-01-01T00:00:00Z",
                         "labels": {"kubevirt.io/migrationJobUID": "m-1"}},
            "spec": {"nodeName": "n2", "containers": [{"name": "compute"}]},
            "status": if ready {
                json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                       "containerStatuses": [{"name": "compute", "ready": true, "restartCount": 0, "image": "", "imageID": ""}]})
            } else {
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                       "message": "0/2 nodes are available"}]})
            },
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn settings() -> PodSettings {
        PodSettings { launcher_image: "launcher:1".into(), pull_policy: "IfNotPresent".into() }
    }

    fn frozen() -> Frozen {
        Frozen {
            policy: Some("slow".into()),
            configuration: MigrationConfiguration {
                bandwidth_per_migration: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Mi".into())),
                ..Default::default()
            },
        }
    }

    fn run(m: &VirtualMachineInstanceMigration, v: Option<&VirtualMachineInstance>, pods: &[Pod], now: i64) -> Plan {
        let s = settings();
        plan(&Observed {
            vmim: m,
            vmi: v,
            target_pods: pods.iter().collect(),
            source_pod: Some("virt-launcher-vmi-src".into()),
            older_in_flight: false,
            running: (0, 0),
            caps: (5, 2),
            configuration: &frozen(),
            claims: Some(BTreeMap::new()),
            settings: &s,
            now: t(now),
        })
    }

    fn new_phase(p: &Plan) -> Option<String> {
        p.actions.iter().find_map(|a| match a {
            Action::UpdateStatus(s) => s.phase.as_ref().map(|p| p.as_str().to_owned()),
            _ => None,
        })
    }

    #[test]
    fn accepted_then_a_target_pod_away_from_the_source() {
        let v = vmi(None);
        assert_eq!(new_phase(&run(&vmim(None, false), Some(&v), &[], 1)).as_deref(), Some("Pending"));
        let p = run(&vmim(Some("Pending"), false), Some(&v), &[], 1);
        assert_eq!(new_phase(&p).as_deref(), Some("Scheduling"));
        let Some(Action::CreatePod(pod)) = p.actions.iter().find(|a| matches!(a, Action::CreatePod(_))) else {
            panic!("{:?}", p.actions)
        };
        assert_eq!(pod.labels().get(label::MIGRATION_JOB_UID).map(String::as_str), Some("m-1"));
        let spec = pod.spec.clone().unwrap_or_default();
        let selector = spec.node_selector.unwrap_or_default();
        assert_eq!(selector.get("zone").map(String::as_str), Some("b"), "addedNodeSelector merged");
        assert_eq!(selector.get("kubevirt.io/schedulable").map(String::as_str), Some("true"), "the VMI's own keys win");
        let anti = spec
            .affinity
            .and_then(|a| a.pod_anti_affinity)
            .and_then(|a| a.required_during_scheduling_ignored_during_execution);
        let term = anti.and_then(|t| t.into_iter().next()).unwrap_or_else(|| panic!("no anti-affinity"));
        assert_eq!(term.topology_key, HOSTNAME_TOPOLOGY);
        assert_eq!(
            term.label_selector.and_then(|s| s.match_labels).and_then(|m| m.get(label::CREATED_BY).cloned()).as_deref(),
            Some("v-1")
        );
    }

    #[test]
    fn refused_when_not_migratable_or_in_flight_or_throttled() {
        let mut v = vmi(None);
        if let Some(s) = v.status.as_mut() {
            s.conditions = serde_json::from_value(json!([{"type": "LiveMigratable", "status": "False",
                "reason": "DisksNotLiveMigratable", "message": "cannot migrate VMI: PVC pvc is not shared"}]))
            .ok();
        }
        let p = run(&vmim(Some("Pending"), false), Some(&v), &[], 1);
        assert_eq!(new_phase(&p).as_deref(), Some("Failed"));
        assert!(
            p.actions
                .iter()
                .any(|a| matches!(a, Action::Event { message, .. } if message.contains("PVC pvc is not shared")))
        );
        let s = settings();
        let v = vmi(None);
        let m = vmim(Some("Pending"), false);
        let throttled = plan(&Observed {
            vmim: &m,
            vmi: Some(&v),
            target_pods: vec![],
            source_pod: None,
            older_in_flight: false,
            running: (1, 2),
            caps: (5, 2),
            configuration: &frozen(),
            claims: Some(BTreeMap::new()),
            settings: &s,
            now: t(1),
        });
        assert!(!throttled.actions.iter().any(|a| matches!(a, Action::CreatePod(_))), "per-node cap reached");
        let m = vmim(None, false);
        let second = plan(&Observed {
            vmim: &m,
            vmi: Some(&v),
            target_pods: vec![],
            source_pod: None,
            older_in_flight: true,
            running: (0, 0),
            caps: (5, 2),
            configuration: &frozen(),
            claims: Some(BTreeMap::new()),
            settings: &s,
            now: t(1),
        });
        assert_eq!(new_phase(&second).as_deref(), Some("Failed"));
        assert_eq!(new_phase(&run(&vmim(Some("Pending"), false), None, &[], 1)).as_deref(), Some("Failed"));
    }

    #[test]
    fn only_the_five_newest_finalized_migrations_are_kept() {
        let at = |name: &str, secs: i64, phase: &str, deleting: bool| {
            let mut m = vmim(Some(phase), deleting);
            m.metadata.name = Some(name.into());
            m.metadata.creation_timestamp = Some(t(secs));
            m
        };
        let mut all: Vec<VirtualMachineInstanceMigration> =
            (0..7).map(|i| at(&format!("m{i}"), 100 - i, "Succeeded", false)).collect();
        all.push(at("running", 1, "Running", false));
        all.push(at("going", 0, "Failed", true));
        let refs: Vec<&VirtualMachineInstanceMigration> = all.iter().collect();
        // m6 and m5 are the oldest finalized ones; the running and the already-deleted ones do not count.
        assert_eq!(garbage(&refs), ["m6", "m5"]);
        assert!(garbage(&refs[..5]).is_empty());
    }

    #[test]
    fn scheduled_hands_off_to_the_nodes() {
        let v = vmi(None);
        assert_eq!(
            new_phase(&run(&vmim(Some("Scheduling"), false), Some(&v), &[target(true)], 1)).as_deref(),
            Some("Scheduled")
        );
        let p = run(&vmim(Some("Scheduled"), false), Some(&v), &[target(true)], 1);
        assert_eq!(new_phase(&p).as_deref(), Some("PreparingTarget"));
        let Some(Action::UpdateVmi(next)) = p.actions.iter().find(|a| matches!(a, Action::UpdateVmi(_))) else {
            panic!("{:?}", p.actions)
        };
        assert_eq!(next.labels().get(label::MIGRATION_TARGET_NODE_NAME).map(String::as_str), Some("n2"));
        let st = next.status.clone().unwrap_or_default();
        let ms = st.migration_state.unwrap_or_default();
        assert_eq!(
            (
                ms.migration_uid.as_deref(),
                ms.source_node.as_deref(),
                ms.target_node.as_deref(),
                ms.source_pod.as_deref()
            ),
            (Some("m-1"), Some("n1"), Some("n2"), Some("virt-launcher-vmi-src"))
        );
        assert_eq!(st.active_pods.unwrap_or_default().len(), 2);
        assert_eq!(st.migration_method, Some(MigrationMethod::BlockMigration));
        // The policy and the configuration are frozen into the hand-off.
        assert_eq!(ms.migration_policy_name.as_deref(), Some("slow"));
        assert_eq!(ms.migration_configuration, Some(frozen().configuration));
    }

    #[test]
    fn the_nodes_reports_walk_the_phases_to_the_end() {
        let base = json!({"migrationUid": "m-1", "sourceNode": "n1", "targetNode": "n2", "targetPod": "virt-launcher-vmi-tgt"});
        let with = |extra: serde_json::Value| {
            let mut s = base.clone();
            for (k, v) in extra.as_object().cloned().unwrap_or_default() {
                s[k] = v;
            }
            vmi(Some(s))
        };
        let ready = with(json!({"targetNodeAddress": "10.244.1.5"}));
        assert_eq!(
            new_phase(&run(&vmim(Some("PreparingTarget"), false), Some(&ready), &[target(true)], 1)).as_deref(),
            Some("TargetReady")
        );
        let started = with(json!({"targetNodeAddress": "10.244.1.5", "startTimestamp": "1970-01-01T00:00:01Z"}));
        assert_eq!(
            new_phase(&run(&vmim(Some("TargetReady"), false), Some(&started), &[target(true)], 1)).as_deref(),
            Some("Running")
        );
        // Completed, but the target has not taken the VMI over yet: not Succeeded.
        let completed = with(json!({"startTimestamp": "1970-01-01T00:00:01Z", "completed": true}));
        assert_eq!(
            new_phase(&run(&vmim(Some("Running"), false), Some(&completed), &[target(true)], 1)).as_deref(),
            Some("Running")
        );
        let mut taken = completed.clone();
        if let Some(s) = taken.status.as_mut() {
            s.node_name = Some("n2".into());
        }
        assert_eq!(
            new_phase(&run(&vmim(Some("Running"), false), Some(&taken), &[target(true)], 1)).as_deref(),
            Some("Succeeded")
        );
        let failed = with(json!({"startTimestamp": "1970-01-01T00:00:01Z", "failed": true, "failureReason": "boom"}));
        let p = run(&vmim(Some("Running"), false), Some(&failed), &[target(true)], 1);
        assert_eq!(new_phase(&p).as_deref(), Some("Failed"));
        assert!(p.actions.iter().any(|a| matches!(a, Action::DeletePod(n) if n == "virt-launcher-vmi-tgt")));
    }

    #[test]
    fn deletion_aborts_or_cleans_up() {
        // Before the hand-off: the target pod goes, the finalizer comes off.
        let v = vmi(None);
        let p = run(&vmim(Some("Scheduling"), true), Some(&v), &[target(false)], 10);
        assert!(p.actions.iter().any(|a| matches!(a, Action::DeletePod(_))));
        assert!(p.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer)));
        // After it: the source is asked to abort; the finalizer stays until the end.
        let running =
            vmi(Some(json!({"migrationUid": "m-1", "targetNode": "n2", "startTimestamp": "1970-01-01T00:00:01Z"})));
        let p = run(&vmim(Some("Running"), true), Some(&running), &[target(true)], 10);
        let Some(Action::UpdateVmi(next)) = p.actions.iter().find(|a| matches!(a, Action::UpdateVmi(_))) else {
            panic!("{:?}", p.actions)
        };
        assert_eq!(
            next.status.as_ref().and_then(|s| s.migration_state.as_ref()).and_then(|m| m.abort_requested),
            Some(true)
        );
        assert!(!p.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer)));
        let aborted =
            vmi(Some(json!({"migrationUid": "m-1", "targetNode": "n2", "abortRequested": true, "failed": true,
            "abortStatus": "Succeeded", "failureReason": "Live migration aborted "})));
        let mut aborted = aborted;
        aborted.labels_mut().insert(label::MIGRATION_TARGET_NODE_NAME.into(), "n2".into());
        let p = run(&vmim(Some("Running"), true), Some(&aborted), &[target(true)], 10);
        assert_eq!(new_phase(&p).as_deref(), Some("Failed"));
        let cleared = p
            .actions
            .iter()
            .any(|a| matches!(a, Action::UpdateVmi(v) if !v.labels().contains_key(label::MIGRATION_TARGET_NODE_NAME)));
        assert!(cleared, "the target label goes: {:?}", p.actions);
        assert!(p.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer)));
    }

    #[test]
    fn an_unschedulable_target_fails_after_the_timeout() {
        let v = vmi(None);
        let early = run(&vmim(Some("Scheduling"), false), Some(&v), &[target(false)], 299);
        assert_eq!(new_phase(&early), None);
        let late = run(&vmim(Some("Scheduling"), false), Some(&v), &[target(false)], 301);
        assert_eq!(new_phase(&late).as_deref(), Some("Failed"));
        assert!(late.actions.iter().any(|a| matches!(a, Action::DeletePod(_))));
        let mut short = vmim(Some("Scheduling"), false);
        short.annotations_mut().insert(ann::MIGRATION_UNSCHEDULABLE_POD_TIMEOUT.into(), "20".into());
        assert_eq!(new_phase(&run(&short, Some(&v), &[target(false)], 21)).as_deref(), Some("Failed"));
    }
}
