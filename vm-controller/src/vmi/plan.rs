//! The VMI reconciler's decisions, pure: what was read ([`Observed`]) → what to do ([`Plan`]). Contract §2.7:
//!
//! ```text
//! (none)/Pending ──pod created──► Scheduling ──compute ready──► Scheduled ──node agent──► Running ─► Succeeded/Failed
//!        │ claims missing/DVs not ready: wait (DataVolumesReady, Synchronized)
//!        └────── deleted / DataVolume failed ──► Failed ◄── pod failed or gone before Running finished
//! final or deleted: delete the pods; no pods left → drop the finalizer
//! ```
//!
//! The controller writes `Pending`…`Scheduled` and `Failed` when the pod fails or vanishes; `Running`,
//! `Succeeded` and guest-caused `Failed` come from the node agent, from libvirt's state. A deleted VMI that is
//! `Scheduled`/`Running` is shut down by the node agent (ACPI, then destroy after the grace period); if that has
//! not happened [`NODE_AGENT_SLACK`] after the grace period, the pods are deleted (the launcher's own SIGTERM
//! handling then stops the guest).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use contracts::kubevirt::consts::{finalizer, label, reason};
use contracts::kubevirt::launcher::COMPUTE_CONTAINER;
use controller_runtime::events::Severity;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{
    ConditionStatus, MemoryStatus, QosClass, VirtualMachineInstanceCondition,
    VirtualMachineInstanceConditionType as Type, VirtualMachineInstancePhase as Phase, VirtualMachineInstanceStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::pod::{self, Claim, PodSettings};
use super::status::{self, PodState, not_ready};
use super::{evacuation, hotplug, workload_update};

/// How long after a deleted VMI's grace period the controller waits for the node agent before deleting its pods.
pub const NODE_AGENT_SLACK: Duration = Duration::from_secs(60);
/// How often a VMI waiting for its claims is looked at again (claims are not watched).
pub const CLAIM_RECHECK: Duration = Duration::from_secs(2);
/// `Synchronized` reason when a launcher pod failed or vanished before the guest ran.
pub const REASON_POD_FAILED: &str = "PodFailed";
/// Event reason of a created launcher pod (upstream's).
pub const EVENT_CREATED: &str = "SuccessfulCreate";
/// Event reason of a deleted launcher pod (upstream's).
pub const EVENT_DELETED: &str = "SuccessfulDelete";
/// How often a deleted or final VMI with pods left is looked at again (a lost node is noticed by polling).
pub const NODE_RECHECK: Duration = Duration::from_secs(5);
/// `Provisioning` reason while a temporary pod binds WaitForFirstConsumer claims.
pub const REASON_WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
/// How often a VMI marked for evacuation and still on the drained node is looked at again (upstream's evacuation
/// controller requeues a node after 5 s).
pub const EVACUATION_RECHECK: Duration = Duration::from_secs(5);
/// Event reason of a failed sync (upstream's `SyncFailed`).
pub const EVENT_SYNC_FAILED: &str = "SyncFailed";

/// A persistentVolumeClaim/dataVolume volume's claim as read from the caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeClaim {
    /// Usable: the PVC exists (and its DataVolume, if any, is ready).
    Bound(Claim),
    /// A DataVolume in phase `WaitForFirstConsumer` with its (unbound) PVC: a temporary pod binds it.
    FirstConsumer(Claim),
    /// A DataVolume that is not ready yet (`ready` = its Ready condition's status).
    DataVolumeNotReady {
        /// DataVolume name.
        name: String,
        /// Its Ready condition.
        ready: ConditionStatus,
    },
    /// A DataVolume in phase `Failed`.
    DataVolumeFailed {
        /// DataVolume name.
        name: String,
    },
    /// Neither the PVC nor the DataVolume exists.
    Missing {
        /// `PVC` or `DataVolume`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
}

/// Everything the planner looks at.
pub struct Observed<'a> {
    /// The VMI.
    pub vmi: &'a VirtualMachineInstance,
    /// Its launcher pods (label `kubevirt.io/created-by` = its UID), oldest first.
    pub pods: Vec<&'a Pod>,
    /// Claims of its persistentVolumeClaim/dataVolume volumes, by volume name.
    pub claims: BTreeMap<String, VolumeClaim>,
    /// Whether any of its volumes is a DataVolume (the `DataVolumesReady` condition is kept then).
    pub has_data_volumes: bool,
    /// The nodes of its pods that are lost: gone from the API, or not Ready (the kubelet stopped reporting). Read
    /// only for a deleted or final VMI with pods left.
    pub lost_nodes: BTreeSet<String>,
    /// Whether a migration of the VMI that is not final exists (the evacuation step waits for it).
    pub migration_in_flight: bool,
    /// Whether VMIs needing an update after a CPU or memory hotplug are live-migrated (the cluster's
    /// `workloadUpdateMethods` hold `LiveMigrate`).
    pub workload_updates_migrate: bool,
    /// Its hotplug attachment pods.
    pub attachments: Vec<&'a Pod>,
    /// The claims of its hotpluggable volumes, by volume name.
    pub hotplug_claims: BTreeMap<String, hotplug::HotplugClaim>,
    /// Pod rendering settings.
    pub settings: &'a PodSettings,
    /// The current time.
    pub now: Time,
}

/// One step of a plan.
#[derive(Debug, Clone)]
pub enum Action {
    /// Create this launcher pod (events name it once created).
    CreatePod(Box<Pod>),
    /// Create this hotplug attachment pod ([`hotplug`]).
    CreateAttachmentPod(Box<Pod>),
    /// Delete the launcher pod of this name.
    DeletePod(String),
    /// Delete the pod of this name with grace period 0: its node is lost and will never confirm the deletion.
    ForceDeletePod(String),
    /// Create this migration (events name it once created).
    CreateMigration(Box<crds::kubevirt::VirtualMachineInstanceMigration>, MigrationCause),
    /// Replace the VMI with this one (metadata and status changed; resourceVersion of the observed one).
    UpdateVmi(Box<VirtualMachineInstance>),
    /// Record an event on the VMI.
    Event {
        /// Normal or Warning.
        severity: Severity,
        /// CamelCase reason.
        reason: &'static str,
        /// Human-readable message.
        message: String,
    },
}

/// Why the VMI reconciler migrates a VMI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationCause {
    /// Its node is drained ([`super::evacuation`]).
    Evacuation,
    /// It needs a launcher pod of another size after a CPU or memory hotplug ([`super::workload_update`]).
    WorkloadUpdate,
}

impl MigrationCause {
    /// The event message once created (upstream's).
    pub fn created_message(&self, migration: &str) -> String {
        match self {
            MigrationCause::Evacuation => format!("Created Migration {migration}"),
            MigrationCause::WorkloadUpdate => format!("Created Migration {migration} for automated workload update"),
        }
    }

    /// The event message when the creation failed (upstream's).
    pub fn failed_message(&self, error: &str) -> String {
        match self {
            MigrationCause::Evacuation => format!("Error creating a Migration: {error}"),
            MigrationCause::WorkloadUpdate => {
                format!("Error creating a Migration for automated workload update: {error}")
            }
        }
    }
}

/// The result of planning.
#[derive(Debug, Default)]
pub struct Plan {
    /// What to do, in order.
    pub actions: Vec<Action>,
    /// Look again after this long even without a change.
    pub requeue: Option<Duration>,
}

fn is_final(phase: &Phase) -> bool {
    phase.is_final()
}

/// The `Ready` condition as upstream's VMI controller computes it.
fn ready_condition(
    phase: &Phase,
    pod: Option<&Pod>,
    state: Option<&PodState>,
) -> crds::kubevirt::vmi::VirtualMachineInstanceCondition {
    match (pod, state) {
        (None, _) | (_, None) => not_ready(reason::POD_NOT_EXISTS),
        (_, Some(PodState::Terminating | PodState::Down { .. })) => not_ready(reason::POD_TERMINATING),
        _ if *phase != Phase::Running => not_ready(reason::GUEST_NOT_RUNNING),
        (Some(p), _) => status::pod_ready(p).unwrap_or_else(|| not_ready(reason::POD_CONDITION_MISSING)),
    }
}

/// Deadline (seconds since the deletion) after which a deleted, running VMI's pods are deleted by the controller.
fn node_agent_deadline(vmi: &VirtualMachineInstance) -> Duration {
    Duration::from_secs(pod::vmi_grace(vmi).unsigned_abs()) + NODE_AGENT_SLACK
}

fn elapsed_since(t: &Time, now: &Time) -> Duration {
    let secs = now.0.as_second().saturating_sub(t.0.as_second());
    Duration::from_secs(secs.max(0).unsigned_abs())
}

/// Fails the VMI because its pod failed or vanished: phase `Failed`, `Synchronized` False with the reason.
fn fail(status: &mut VirtualMachineInstanceStatus, message: &str, now: &Time, actions: &mut Vec<Action>) {
    status.set_phase(Phase::Failed, now);
    status.set_condition(
        VirtualMachineInstanceCondition::new(Type::Synchronized, ConditionStatus::False, REASON_POD_FAILED, message),
        now,
    );
    actions.push(Action::Event { severity: Severity::Warning, reason: EVENT_SYNC_FAILED, message: message.to_owned() });
}

/// Claims ready for rendering, or why the VMI waits.
enum ClaimCheck {
    Ready(BTreeMap<String, Claim>),
    /// Some DataVolume waits for its first consumer: bind these claims with a temporary pod.
    FirstConsumer(BTreeMap<String, Claim>),
    Waiting,
    Failed(String),
}

fn check_claims(o: &Observed<'_>, status: &mut VirtualMachineInstanceStatus) -> ClaimCheck {
    let now = &o.now;
    let mut ready = BTreeMap::new();
    let mut missing = None;
    let mut dv_status = ConditionStatus::True;
    let mut failed = None;
    let mut first_consumer = BTreeMap::new();
    for (volume, claim) in &o.claims {
        match claim {
            VolumeClaim::Bound(c) => {
                ready.insert(volume.clone(), c.clone());
            }
            VolumeClaim::FirstConsumer(c) => {
                first_consumer.insert(volume.clone(), c.clone());
                dv_status = ConditionStatus::False;
            }
            VolumeClaim::DataVolumeNotReady { ready: r, .. } => {
                if *r == ConditionStatus::False || dv_status == ConditionStatus::True {
                    dv_status = r.clone();
                }
            }
            VolumeClaim::DataVolumeFailed { name } => failed = Some(name.clone()),
            VolumeClaim::Missing { kind, name } => {
                missing.get_or_insert_with(|| (*kind, name.clone()));
            }
        }
    }
    if o.has_data_volumes {
        let c = if dv_status == ConditionStatus::True && failed.is_none() {
            VirtualMachineInstanceCondition::new(
                Type::DataVolumesReady,
                ConditionStatus::True,
                reason::ALL_DVS_READY,
                "All of the VMI's DVs are bound and not running",
            )
        } else {
            let s = if failed.is_some() { ConditionStatus::False } else { dv_status };
            VirtualMachineInstanceCondition::new(
                Type::DataVolumesReady,
                s,
                reason::NOT_ALL_DVS_READY,
                "Not all of the VMI's DVs are ready",
            )
        };
        status.set_condition(c, now);
    }
    if let Some(name) = failed {
        return ClaimCheck::Failed(format!("DataVolume {name} failed"));
    }
    let ns = o.vmi.namespace().unwrap_or_default();
    if missing.is_none() && !first_consumer.is_empty() {
        let names: Vec<&str> = first_consumer.values().map(|c| c.name.as_str()).collect();
        status.set_condition(
            VirtualMachineInstanceCondition::new(
                Type::Provisioning,
                ConditionStatus::True,
                REASON_WAIT_FOR_FIRST_CONSUMER,
                &format!("a temporary pod binds the WaitForFirstConsumer claims {}", names.join(", ")),
            ),
            now,
        );
        first_consumer.extend(ready);
        return ClaimCheck::FirstConsumer(first_consumer);
    }
    status.remove_condition(&Type::Provisioning);
    match missing {
        Some((kind, name)) => {
            let message = format!("{kind} {ns}/{name} does not exist, waiting for it to appear");
            status.set_condition(
                VirtualMachineInstanceCondition::new(
                    Type::Synchronized,
                    ConditionStatus::False,
                    reason::FAILED_PVC_NOT_FOUND,
                    &message,
                ),
                now,
            );
            ClaimCheck::Waiting
        }
        None if ready.len() < o.claims.len() => ClaimCheck::Waiting,
        None => {
            if status.condition(&Type::Synchronized).and_then(|c| c.reason.as_deref())
                == Some(reason::FAILED_PVC_NOT_FOUND)
            {
                status.remove_condition(&Type::Synchronized);
            }
            ClaimCheck::Ready(ready)
        }
    }
}

/// Records the hand-over to the node agent: node, active pod, image, QoS, overhead.
fn schedule(vmi: &mut VirtualMachineInstance, status: &mut VirtualMachineInstanceStatus, pod: &Pod, now: &Time) {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    status.node_name = Some(node.clone());
    vmi.labels_mut().insert(label::NODE_NAME.into(), node.clone());
    status.active_pods = Some(BTreeMap::from([(pod.uid().unwrap_or_default(), node)]));
    status.launcher_container_image_version = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == COMPUTE_CONTAINER))
        .and_then(|c| c.image.clone());
    status.qos_class = pod.status.as_ref().and_then(|s| s.qos_class.clone()).map(|q| QosClass::from(q.as_str()));
    let overhead = pod.annotations().get(contracts::kubevirt::consts::ann::MEMORY_OVERHEAD_BYTES).cloned();
    if let Some(o) = overhead {
        status.memory.get_or_insert_with(MemoryStatus::default).memory_overhead = Some(Quantity(o));
    }
    status.remove_condition(&Type::PodScheduled);
    if status.condition(&Type::Synchronized).is_some_and(|c| c.status == ConditionStatus::False) {
        status.remove_condition(&Type::Synchronized);
    }
    status.set_phase(Phase::Scheduled, now);
}

/// The VMI's launcher pod: the one on `status.nodeName` (after a live migration the target's; a finished one
/// only when no other is there), else the oldest that is no migration target.
fn current_pod<'a>(vmi: &VirtualMachineInstance, launchers: &[&'a Pod]) -> Option<&'a Pod> {
    let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    let node = vmi.status.as_ref().and_then(|s| s.node_name.clone());
    let on_node: Vec<&Pod> = launchers.iter().copied().filter(|p| node.is_some() && node_of(p) == node).collect();
    on_node
        .iter()
        .copied()
        .find(|p| !matches!(status::observe(p), PodState::Down { .. }))
        .or_else(|| on_node.first().copied())
        .or_else(|| launchers.iter().copied().find(|p| !p.labels().contains_key(label::MIGRATION_JOB_UID)))
        .or_else(|| launchers.first().copied())
}

/// Launcher pods a running VMI no longer needs: the source of a completed live migration, and finished pods that are
/// not its current one (a failed migration target is the migration controller's to delete).
fn leftover_pods<'a>(vmi: &VirtualMachineInstance, launchers: &[&'a Pod], current: Option<&Pod>) -> Vec<&'a Pod> {
    let migrated_from = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .filter(|m| m.completed == Some(true))
        .and_then(|m| m.source_pod.clone());
    launchers
        .iter()
        .copied()
        .filter(|p| current.is_none_or(|c| c.metadata.uid != p.metadata.uid))
        .filter(|p| {
            Some(p.name_any()) == migrated_from
                || (matches!(status::observe(p), PodState::Down { .. })
                    && !p.labels().contains_key(label::MIGRATION_JOB_UID))
        })
        .collect()
}

/// How often a VMI whose removed hotplug volume waits for the node agent is looked at again.
pub const HOTPLUG_RECHECK: Duration = Duration::from_secs(2);

/// The hotplug part of a running VMI's reconcile ([`hotplug::plan`]): attachment pods next to its current launcher
/// pod (`pod`) and a migration target's, its volumes' status. Returns whether to look again soon.
fn hotplug_step(
    o: &Observed<'_>,
    pod: Option<&Pod>,
    launchers: &[&Pod],
    status: &mut VirtualMachineInstanceStatus,
    actions: &mut Vec<Action>,
) -> bool {
    let alive =
        |p: &&Pod| p.metadata.deletion_timestamp.is_none() && !matches!(status::observe(p), PodState::Down { .. });
    let target = o
        .vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .filter(|m| m.completed != Some(true) && m.failed != Some(true))
        .and_then(|m| m.target_pod.clone())
        .and_then(|t| launchers.iter().copied().find(|p| p.name_any() == t))
        .filter(alive);
    let h = hotplug::Observed {
        vmi: o.vmi,
        launcher: pod.filter(alive),
        target,
        attachments: o.attachments.clone(),
        claims: o.hotplug_claims.clone(),
        settings: o.settings,
    };
    let (planned, again) = hotplug::plan(&h, status);
    for a in planned {
        actions.push(match a {
            hotplug::Action::CreatePod(p) => Action::CreateAttachmentPod(p),
            hotplug::Action::DeletePod(n) => Action::DeletePod(n),
            hotplug::Action::Event { severity, reason, message } => Action::Event { severity, reason, message },
        });
    }
    again
}

/// Plans one reconcile of `o.vmi`.
pub fn plan(o: &Observed<'_>) -> Plan {
    let vmi = o.vmi;
    let now = &o.now;
    let mut next = vmi.clone();
    let mut status = vmi.status.clone().unwrap_or_default();
    let mut actions = Vec::new();
    let mut requeue = None;
    let phase = vmi.phase();
    let deleting = vmi.metadata.deletion_timestamp.as_ref();
    let (temporary, launchers): (Vec<&Pod>, Vec<&Pod>) = o.pods.iter().partition(|p| pod::is_first_consumer(p));
    let pod = current_pod(vmi, &launchers);
    let state = pod.map(status::observe);
    let lost_node = |p: &Pod| -> Option<String> {
        p.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| o.lost_nodes.contains(n))
    };
    let delete_pods = |pods: &[&Pod], actions: &mut Vec<Action>| {
        for p in pods {
            let name = p.name_any();
            if let Some(node) = lost_node(p) {
                // Nobody on a lost node confirms a deletion: without this the pod (and the VMI's finalizer, and
                // the VM) would stay Terminating until the node came back (§10.2).
                actions.push(Action::ForceDeletePod(name.clone()));
                actions.push(Action::Event {
                    severity: Severity::Warning,
                    reason: EVENT_DELETED,
                    message: format!("Force-deleted virtual machine pod {name}: its node {node} is lost"),
                });
            } else if p.metadata.deletion_timestamp.is_none() {
                actions.push(Action::DeletePod(name.clone()));
                actions.push(Action::Event {
                    severity: Severity::Normal,
                    reason: EVENT_DELETED,
                    message: format!("Deleted virtual machine pod {name}"),
                });
            }
        }
    };

    if is_final(&phase) || deleting.is_some() {
        let mut cleanup = true;
        if !is_final(&phase) {
            let down = matches!(state, None | Some(PodState::Down { .. }));
            match (&phase, pod.and_then(lost_node)) {
                (Phase::Scheduled | Phase::Running, Some(node)) => fail(
                    &mut status,
                    &format!("the node {node} of the virt-launcher pod is lost while the VMI was being deleted"),
                    now,
                    &mut actions,
                ),
                (Phase::Scheduled | Phase::Running, None) if !down => {
                    // The node agent shuts the guest down; the controller only steps in once it is overdue.
                    let since = deleting.map(|t| elapsed_since(t, now)).unwrap_or_default();
                    let deadline = node_agent_deadline(vmi);
                    cleanup = since >= deadline;
                    if !cleanup {
                        requeue = Some(deadline - since + Duration::from_secs(1));
                    }
                }
                (Phase::Scheduled | Phase::Running, None) => {
                    fail(&mut status, "virt-launcher pod is gone while the VMI was being deleted", now, &mut actions)
                }
                _ => status.set_phase(Phase::Failed, now),
            }
        }
        if cleanup {
            delete_pods(&o.pods, &mut actions);
        }
        if !o.pods.is_empty() && requeue.is_none() {
            requeue = Some(NODE_RECHECK);
        }
        if is_final(status.phase.as_ref().unwrap_or(&Phase::Unset)) {
            status.launcher_container_image_version = None;
        }
        if o.pods.is_empty() {
            let finalizers = next.finalizers_mut();
            finalizers.retain(|f| f != finalizer::FOREGROUND_DELETE_VIRTUAL_MACHINE);
        }
    } else {
        if !next.finalizers().iter().any(|f| f == finalizer::FOREGROUND_DELETE_VIRTUAL_MACHINE) {
            next.finalizers_mut().push(finalizer::FOREGROUND_DELETE_VIRTUAL_MACHINE.to_owned());
        }
        match phase {
            Phase::Unset | Phase::Pending => match check_claims(o, &mut status) {
                ClaimCheck::Failed(message) => fail(&mut status, &message, now, &mut actions),
                ClaimCheck::Waiting => {
                    status.set_phase(Phase::Pending, now);
                    requeue = Some(CLAIM_RECHECK);
                }
                ClaimCheck::FirstConsumer(claims) => {
                    status.set_phase(Phase::Pending, now);
                    requeue = Some(CLAIM_RECHECK);
                    match temporary.first() {
                        None if pod.is_none() => actions
                            .push(Action::CreatePod(Box::new(pod::render_first_consumer(vmi, &claims, o.settings)))),
                        None => {}
                        Some(t) => match status::unschedulable(t) {
                            Some(c) => status.set_condition(c, now),
                            None => status.remove_condition(&Type::PodScheduled),
                        },
                    }
                }
                ClaimCheck::Ready(_) if !temporary.is_empty() => {
                    // The claims are bound: the temporary pod goes before the launcher comes.
                    status.remove_condition(&Type::PodScheduled);
                    status.set_phase(Phase::Pending, now);
                    delete_pods(&temporary, &mut actions);
                    requeue = Some(CLAIM_RECHECK);
                }
                ClaimCheck::Ready(claims) => {
                    if pod.is_none() {
                        actions.push(Action::CreatePod(Box::new(pod::render(vmi, &claims, o.settings))));
                    }
                    status.set_phase(Phase::Scheduling, now);
                }
            },
            Phase::Scheduling => match (pod, &state) {
                (None, _) | (_, None) => {
                    fail(&mut status, "virt-launcher pod is gone before the VMI was scheduled", now, &mut actions)
                }
                (Some(_), Some(PodState::Terminating)) => {
                    fail(&mut status, "virt-launcher pod was deleted before the VMI was scheduled", now, &mut actions)
                }
                (Some(_), Some(PodState::Down { message })) => {
                    let m = message
                        .clone()
                        .unwrap_or_else(|| "virt-launcher pod exited before the VMI was scheduled".into());
                    fail(&mut status, &m, now, &mut actions)
                }
                (Some(p), Some(PodState::Starting { problem })) => {
                    match status::unschedulable(p) {
                        Some(c) => status.set_condition(c, now),
                        None => status.remove_condition(&Type::PodScheduled),
                    }
                    match problem {
                        Some((r, m)) => status.set_condition(
                            VirtualMachineInstanceCondition::new(Type::Synchronized, ConditionStatus::False, r, m),
                            now,
                        ),
                        None => {
                            if status.condition(&Type::Synchronized).is_some_and(|c| c.status == ConditionStatus::False)
                            {
                                status.remove_condition(&Type::Synchronized);
                            }
                        }
                    }
                }
                (Some(p), Some(PodState::Ready)) => schedule(&mut next, &mut status, p, now),
            },
            Phase::Scheduled | Phase::Running | Phase::WaitingForSync | Phase::Unknown | Phase::Other(_) => {
                delete_pods(&leftover_pods(vmi, &launchers, pod), &mut actions);
                match (pod, &state) {
                    (None, _) | (_, None) => fail(&mut status, "virt-launcher pod is gone", now, &mut actions),
                    (Some(_), Some(PodState::Down { message })) => {
                        let m = message
                            .clone()
                            .unwrap_or_else(|| "virt-launcher pod exited while the VMI was not final".into());
                        fail(&mut status, &m, now, &mut actions);
                    }
                    _ => {
                        let active =
                            launchers.iter().filter(|p| !matches!(status::observe(p), PodState::Down { .. })).count();
                        workload_update::conditions(vmi, &mut status, now);
                        if phase == Phase::Running
                            && deleting.is_none()
                            && hotplug_step(o, pod, &launchers, &mut status, &mut actions)
                        {
                            requeue = Some(HOTPLUG_RECHECK);
                        }
                        if let Some(m) = evacuation::migration(vmi, o.migration_in_flight, active) {
                            actions.push(Action::CreateMigration(Box::new(m), MigrationCause::Evacuation));
                        } else if let Some(m) = workload_update::migration(
                            vmi,
                            &status,
                            o.workload_updates_migrate,
                            o.migration_in_flight,
                            active,
                        ) {
                            actions.push(Action::CreateMigration(Box::new(m), MigrationCause::WorkloadUpdate));
                        }
                    }
                }
            }
            Phase::Succeeded | Phase::Failed => {}
        }
    }
    evacuation::condition(vmi, &mut status, now);
    // Migrations are not watched here: a marked VMI still on its node is looked at again until it has moved.
    if requeue.is_none() && vmi.evacuation_node().is_some() && vmi.evacuation_node() == status.node_name.as_deref() {
        requeue = Some(EVACUATION_RECHECK);
    }

    let phase_now = status.phase.clone().unwrap_or(Phase::Unset);
    status.set_condition(ready_condition(&phase_now, pod, state.as_ref()), now);
    // A pod that only just got created is shown as not existing yet.
    if let Some(Action::CreatePod(_)) = actions.first() {
        status.set_condition(not_ready(reason::POD_NOT_EXISTS), now);
    }

    next.status = Some(status);
    if next.status != vmi.status
        || next.metadata.finalizers != vmi.metadata.finalizers
        || next.metadata.labels != vmi.metadata.labels
    {
        actions.push(Action::UpdateVmi(Box::new(next)));
    }
    Plan { actions, requeue }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap_or_else(|e| panic!("{e}")))
    }

    fn vmi(phase: Option<&str>) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vmi", "namespace": "ns", "uid": "u-1", "resourceVersion": "7",
                         "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"]},
            "spec": {"domain": {"memory": {"guest": "64Mi"}, "devices": {}}, "terminationGracePeriodSeconds": 30},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if let Some(p) = phase {
            v.status = Some(VirtualMachineInstanceStatus { phase: Some(Phase::from(p)), ..Default::default() });
        }
        v
    }

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "virt-launcher-vmi-abcde", "namespace": "ns", "uid": "p-1",
                         "annotations": {"kubevirt.io/memory-overhead-bytes": "302120960"}},
            "spec": {"nodeName": "node1", "containers": [{"name": "compute", "image": "launcher:1"}]},
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn running_pod(compute_ready: bool, pod_ready: bool) -> Pod {
        pod(json!({"phase": "Running", "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": if pod_ready { "True" } else { "False" }}],
            "containerStatuses": [{"name": "compute", "ready": compute_ready, "restartCount": 0, "image": "launcher:1", "imageID": ""}]}))
    }

    fn settings() -> PodSettings {
        PodSettings { launcher_image: "launcher:1".into(), pull_policy: "IfNotPresent".into() }
    }

    fn run(vmi: &VirtualMachineInstance, pods: &[Pod], claims: BTreeMap<String, VolumeClaim>, now: i64) -> Plan {
        run_lost(vmi, pods, claims, &[], now)
    }

    fn run_lost(
        vmi: &VirtualMachineInstance,
        pods: &[Pod],
        claims: BTreeMap<String, VolumeClaim>,
        lost: &[&str],
        now: i64,
    ) -> Plan {
        let s = settings();
        let has_data_volumes = claims.values().any(|c| matches!(c, VolumeClaim::DataVolumeNotReady { .. }))
            || vmi.spec.volumes.iter().flatten().any(|v| v.data_volume.is_some());
        let lost_nodes = lost.iter().map(|n| (*n).to_owned()).collect();
        plan(&Observed {
            vmi,
            pods: pods.iter().collect(),
            claims,
            has_data_volumes,
            lost_nodes,
            migration_in_flight: false,
            workload_updates_migrate: false,
            attachments: Vec::new(),
            hotplug_claims: BTreeMap::new(),
            settings: &s,
            now: t(now),
        })
    }

    fn updated(p: &Plan) -> VirtualMachineInstance {
        p.actions
            .iter()
            .find_map(|a| match a {
                Action::UpdateVmi(v) => Some(v.as_ref().clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no update in {:?}", p.actions))
    }

    fn kinds(p: &Plan) -> Vec<&'static str> {
        p.actions
            .iter()
            .map(|a| match a {
                Action::CreatePod(_) => "create",
                Action::CreateAttachmentPod(_) => "attach",
                Action::DeletePod(_) => "delete",
                Action::ForceDeletePod(_) => "force-delete",
                Action::UpdateVmi(_) => "update",
                Action::CreateMigration(..) => "migrate",
                Action::Event { .. } => "event",
            })
            .collect()
    }

    fn cond(v: &VirtualMachineInstance, t: Type) -> Option<(ConditionStatus, Option<String>)> {
        v.status.as_ref()?.condition(&t).map(|c| (c.status.clone(), c.reason.clone()))
    }

    #[test]
    fn a_pending_vmi_gets_its_pod_and_scheduling() {
        let p = run(&vmi(Some("Pending")), &[], BTreeMap::new(), 100);
        assert_eq!(kinds(&p), ["create", "update"]);
        let v = updated(&p);
        assert_eq!(v.phase(), Phase::Scheduling);
        assert_eq!(cond(&v, Type::Ready), Some((ConditionStatus::False, Some("PodNotExists".into()))));
        // Without the webhook's seeding (no phase), the same.
        let p = run(&vmi(None), &[], BTreeMap::new(), 100);
        assert_eq!(updated(&p).phase(), Phase::Scheduling);
    }

    #[test]
    fn the_finalizer_is_added_when_missing() {
        let mut v = vmi(Some("Scheduling"));
        v.metadata.finalizers = None;
        let p = run(&v, &[running_pod(false, false)], BTreeMap::new(), 100);
        assert_eq!(updated(&p).finalizers(), ["kubevirt.io/foregroundDeleteVirtualMachine"]);
    }

    #[test]
    fn scheduling_waits_for_the_compute_container_then_hands_over() {
        let v = vmi(Some("Scheduling"));
        let p = run(&v, &[running_pod(false, false)], BTreeMap::new(), 100);
        assert_eq!(updated(&p).phase(), Phase::Scheduling);
        let p = run(&v, &[running_pod(true, false)], BTreeMap::new(), 100);
        let v = updated(&p);
        let s = v.status.clone().unwrap_or_default();
        assert_eq!(v.phase(), Phase::Scheduled);
        assert_eq!(s.node_name.as_deref(), Some("node1"));
        assert_eq!(v.labels().get("kubevirt.io/nodeName").map(String::as_str), Some("node1"));
        assert_eq!(s.active_pods, Some(BTreeMap::from([("p-1".into(), "node1".into())])));
        assert_eq!(s.launcher_container_image_version.as_deref(), Some("launcher:1"));
        assert_eq!(s.qos_class, Some(QosClass::Burstable));
        assert_eq!(s.memory.and_then(|m| m.memory_overhead), Some(Quantity("302120960".into())));
        assert_eq!(cond(&v, Type::Ready), Some((ConditionStatus::False, Some("GuestNotRunning".into()))));
    }

    #[test]
    fn a_running_vmi_copies_the_pods_ready_condition() {
        let v = vmi(Some("Running"));
        let p = run(&v, &[running_pod(true, true)], BTreeMap::new(), 100);
        assert_eq!(cond(&updated(&p), Type::Ready).map(|c| c.0), Some(ConditionStatus::True));
        // Nothing changes on a second pass over the result.
        let again = updated(&p);
        assert!(run(&again, &[running_pod(true, true)], BTreeMap::new(), 200).actions.is_empty());
    }

    #[test]
    fn a_vmi_marked_by_a_drain_gets_an_evacuation_migration_once() {
        let mut v = vmi(Some("Running"));
        v.spec.eviction_strategy = Some(crds::kubevirt::vmi::EvictionStrategy::LiveMigrate);
        let status = v.status.get_or_insert_default();
        status.node_name = Some("node1".into());
        status.evacuation_node_name = Some("node1".into());
        status.set_condition(
            VirtualMachineInstanceCondition::new(Type::LiveMigratable, ConditionStatus::True, "", ""),
            &t(1),
        );
        let s = settings();
        let pods = [running_pod(true, true)];
        let observe = |v: &VirtualMachineInstance, in_flight: bool| {
            plan(&Observed {
                vmi: v,
                pods: pods.iter().collect(),
                claims: BTreeMap::new(),
                has_data_volumes: false,
                lost_nodes: BTreeSet::new(),
                migration_in_flight: in_flight,
                workload_updates_migrate: false,
                attachments: Vec::new(),
                hotplug_claims: BTreeMap::new(),
                settings: &s,
                now: t(100),
            })
        };
        let p = observe(&v, false);
        let created: Vec<_> = p
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::CreateMigration(m, _) => Some(m.spec.vmi_name.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(created, vec!["vmi".to_owned()]);
        assert_eq!(p.requeue, Some(EVACUATION_RECHECK));
        let u = updated(&p);
        assert_eq!(cond(&u, Type::EvictionRequested), Some((ConditionStatus::True, Some("EvictionRequested".into()))));
        // With the migration in flight: no second one, looked at again.
        let p = observe(&u, true);
        assert!(!p.actions.iter().any(|a| matches!(a, Action::CreateMigration(..))));
        assert_eq!(p.requeue, Some(EVACUATION_RECHECK));
        // Moved and unmarked (the target node agent's hand-over): the condition goes.
        let mut moved = u.clone();
        let st = moved.status.get_or_insert_default();
        st.evacuation_node_name = None;
        st.node_name = Some("node1".into());
        let p = observe(&moved, false);
        assert!(!p.actions.iter().any(|a| matches!(a, Action::CreateMigration(..))));
        assert_eq!(cond(&updated(&p), Type::EvictionRequested), None);
        assert_eq!(p.requeue, None);
    }

    #[test]
    fn an_unschedulable_pod_or_a_pull_failure_is_shown() {
        let v = vmi(Some("Scheduling"));
        let unschedulable = pod(json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available"}]}));
        let p = run(&v, &[unschedulable], BTreeMap::new(), 100);
        let u = updated(&p);
        assert_eq!(cond(&u, Type::PodScheduled), Some((ConditionStatus::False, Some("Unschedulable".into()))));
        assert_eq!(u.phase(), Phase::Scheduling);
        let pulling = pod(
            json!({"phase": "Pending", "initContainerStatuses": [{"name": "volumecd-init", "ready": false,
            "restartCount": 0, "image": "i", "imageID": "", "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}),
        );
        let p = run(&v, &[pulling], BTreeMap::new(), 100);
        assert_eq!(cond(&updated(&p), Type::Synchronized), Some((ConditionStatus::False, Some("ErrImagePull".into()))));
    }

    #[test]
    fn a_failed_or_vanished_pod_fails_the_vmi() {
        let bad_disk =
            pod(json!({"phase": "Failed", "initContainerStatuses": [{"name": "volumecd-init", "ready": false,
            "restartCount": 0, "image": "i", "imageID": "",
            "state": {"terminated": {"exitCode": 1, "message": "no file found in folder /disk, no disk present"}}}]}));
        for (phase, pods, want) in [
            (
                "Scheduling",
                vec![bad_disk],
                "container volumecd-init failed: no file found in folder /disk, no disk present",
            ),
            ("Scheduling", vec![], "virt-launcher pod is gone before the VMI was scheduled"),
            ("Scheduled", vec![], "virt-launcher pod is gone"),
            ("Running", vec![], "virt-launcher pod is gone"),
            ("Running", vec![pod(json!({"phase": "Failed"}))], "the launcher pod failed"),
        ] {
            let p = run(&vmi(Some(phase)), &pods, BTreeMap::new(), 100);
            let v = updated(&p);
            assert_eq!(v.phase(), Phase::Failed, "{phase}");
            let sync = v.status.as_ref().and_then(|s| s.condition(&Type::Synchronized)).cloned().unwrap_or_default();
            assert_eq!((sync.reason.as_deref(), sync.message.as_deref()), (Some("PodFailed"), Some(want)), "{phase}");
            assert!(p.actions.iter().any(|a| matches!(a, Action::Event { reason: "SyncFailed", .. })));
        }
    }

    #[test]
    fn claims_gate_the_pod() {
        let mut v = vmi(Some("Pending"));
        v.spec.volumes = Some(vec![crds::kubevirt::Volume {
            name: "disk".into(),
            data_volume: Some(crds::kubevirt::volume::DataVolumeSource { name: "dv".into(), ..Default::default() }),
            ..Default::default()
        }]);
        let waiting = BTreeMap::from([(
            "disk".to_owned(),
            VolumeClaim::DataVolumeNotReady { name: "dv".into(), ready: ConditionStatus::False },
        )]);
        let p = run(&v, &[], waiting, 100);
        assert_eq!(kinds(&p), ["update"]);
        assert_eq!(p.requeue, Some(CLAIM_RECHECK));
        let u = updated(&p);
        assert_eq!(u.phase(), Phase::Pending);
        assert_eq!(cond(&u, Type::DataVolumesReady), Some((ConditionStatus::False, Some("NotAllDVsReady".into()))));

        let missing = BTreeMap::from([("disk".to_owned(), VolumeClaim::Missing { kind: "PVC", name: "dv".into() })]);
        let u = updated(&run(&v, &[], missing, 100));
        let sync = u.status.as_ref().and_then(|s| s.condition(&Type::Synchronized)).cloned().unwrap_or_default();
        assert_eq!(sync.reason.as_deref(), Some("FailedPvcNotFound"));
        assert_eq!(sync.message.as_deref(), Some("PVC ns/dv does not exist, waiting for it to appear"));

        let bound = BTreeMap::from([(
            "disk".to_owned(),
            VolumeClaim::Bound(Claim { name: "dv".into(), mode: pod::ClaimMode::Block, read_only: false }),
        )]);
        let p = run(&u, &[], bound, 101);
        assert_eq!(kinds(&p), ["create", "update"]);
        let u = updated(&p);
        assert_eq!(cond(&u, Type::DataVolumesReady), Some((ConditionStatus::True, Some("AllDVsReady".into()))));
        assert!(cond(&u, Type::Synchronized).is_none(), "the PVC-not-found condition is cleared");

        let failed = BTreeMap::from([("disk".to_owned(), VolumeClaim::DataVolumeFailed { name: "dv".into() })]);
        assert_eq!(updated(&run(&v, &[], failed, 100)).phase(), Phase::Failed);
    }

    #[test]
    fn deletion_waits_for_the_node_agent_then_cleans_up() {
        let mut v = vmi(Some("Running"));
        v.metadata.deletion_timestamp = Some(t(100));
        let live = running_pod(true, true);
        // Within grace (30 s) + slack (60 s): wait for the node agent.
        let p = run(&v, std::slice::from_ref(&live), BTreeMap::new(), 110);
        assert!(!kinds(&p).contains(&"delete"));
        assert_eq!(p.requeue, Some(Duration::from_secs(81)));
        // Overdue: delete the pod.
        let p = run(&v, std::slice::from_ref(&live), BTreeMap::new(), 191);
        assert_eq!(kinds(&p)[..2], ["delete", "event"]);
        // The node agent recorded the final phase: delete the pod, keep the finalizer while it exists.
        let mut done = v.clone();
        done.status = Some(VirtualMachineInstanceStatus { phase: Some(Phase::Succeeded), ..Default::default() });
        let p = run(&done, std::slice::from_ref(&live), BTreeMap::new(), 110);
        assert_eq!(kinds(&p)[..2], ["delete", "event"]);
        assert_eq!(updated(&p).finalizers(), ["kubevirt.io/foregroundDeleteVirtualMachine"]);
        // No pod left: the finalizer goes.
        let p = run(&done, &[], BTreeMap::new(), 110);
        assert!(updated(&p).finalizers().is_empty());
        // Deleted before it ran: Failed at once, pod deleted.
        let mut early = vmi(Some("Scheduling"));
        early.metadata.deletion_timestamp = Some(t(100));
        let p = run(&early, &[running_pod(false, false)], BTreeMap::new(), 100);
        assert_eq!(kinds(&p)[..2], ["delete", "event"]);
        assert_eq!(updated(&p).phase(), Phase::Failed);
    }

    #[test]
    fn a_wait_for_first_consumer_data_volume_is_bound_by_a_temporary_pod() {
        let mut v = vmi(Some("Pending"));
        v.spec.volumes = Some(vec![crds::kubevirt::Volume {
            name: "disk".into(),
            data_volume: Some(crds::kubevirt::volume::DataVolumeSource { name: "dv".into(), ..Default::default() }),
            ..Default::default()
        }]);
        let claim = Claim { name: "dv".into(), mode: pod::ClaimMode::Filesystem, read_only: false };
        let wffc = BTreeMap::from([("disk".to_owned(), VolumeClaim::FirstConsumer(claim.clone()))]);
        // No pod: the temporary one, with the claim and the launcher's resources; the VMI stays Pending.
        let p = run(&v, &[], wffc.clone(), 100);
        assert_eq!(kinds(&p), ["create", "update"]);
        let Some(Action::CreatePod(temp)) = p.actions.first() else { panic!("{:?}", p.actions) };
        assert!(pod::is_first_consumer(temp));
        let spec = temp.spec.clone().unwrap_or_default();
        let claims: Vec<_> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .map(|c| &c.claim_name)
            .collect();
        assert_eq!(claims, ["dv"]);
        assert_eq!(spec.containers.len(), 1);
        let memory =
            spec.containers[0].resources.as_ref().and_then(|r| r.requests.as_ref()).and_then(|r| r.get("memory"));
        assert!(memory.is_some(), "the temporary pod is scheduled like the launcher");
        let u = updated(&p);
        assert_eq!(u.phase(), Phase::Pending);
        assert_eq!(p.requeue, Some(CLAIM_RECHECK));
        assert_eq!(cond(&u, Type::Provisioning), Some((ConditionStatus::True, Some("WaitForFirstConsumer".into()))));
        assert_eq!(cond(&u, Type::DataVolumesReady).map(|c| c.0), Some(ConditionStatus::False));

        // The temporary pod exists (unschedulable): shown, nothing created twice.
        let mut temp = pod(json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available"}]}));
        temp.annotations_mut().insert("kubevirt.io/ephemeral-provisioning".into(), "true".into());
        let p = run(&u, std::slice::from_ref(&temp), wffc, 101);
        assert_eq!(kinds(&p), ["update"]);
        assert_eq!(
            cond(&updated(&p), Type::PodScheduled),
            Some((ConditionStatus::False, Some("Unschedulable".into())))
        );

        // Bound and imported: the temporary pod goes first, then the launcher comes.
        let bound = BTreeMap::from([("disk".to_owned(), VolumeClaim::Bound(claim))]);
        let p = run(&u, std::slice::from_ref(&temp), bound.clone(), 102);
        assert_eq!(kinds(&p), ["delete", "event", "update"]);
        let u = updated(&p);
        assert_eq!(u.phase(), Phase::Pending);
        assert!(cond(&u, Type::Provisioning).is_none());
        let p = run(&u, &[], bound, 103);
        assert_eq!(kinds(&p), ["create", "update"]);
        let Some(Action::CreatePod(launcher)) = p.actions.first() else { panic!("{:?}", p.actions) };
        assert!(!pod::is_first_consumer(launcher));
        assert_eq!(updated(&p).phase(), Phase::Scheduling);
    }

    #[test]
    fn pods_on_a_lost_node_are_force_deleted_for_a_deleted_vmi() {
        let mut v = vmi(Some("Running"));
        v.metadata.deletion_timestamp = Some(t(100));
        let live = running_pod(true, true);
        // The node is lost: no waiting for its node agent, the VMI fails and the pod is force-deleted.
        let p = run_lost(&v, std::slice::from_ref(&live), BTreeMap::new(), &["node1"], 101);
        assert_eq!(kinds(&p)[..3], ["event", "force-delete", "event"], "{:?}", p.actions);
        let u = updated(&p);
        assert_eq!(u.phase(), Phase::Failed);
        let sync = u.status.as_ref().and_then(|s| s.condition(&Type::Synchronized)).cloned().unwrap_or_default();
        assert_eq!(
            sync.message.as_deref(),
            Some("the node node1 of the virt-launcher pod is lost while the VMI was being deleted")
        );
        assert_eq!(u.finalizers(), ["kubevirt.io/foregroundDeleteVirtualMachine"], "kept while the pod exists");
        assert_eq!(p.requeue, Some(NODE_RECHECK));
        // A pod already terminating on a lost node (deleted normally before the node was lost): force-deleted too.
        let mut terminating = live.clone();
        terminating.metadata.deletion_timestamp = Some(t(100));
        let p = run_lost(&u, std::slice::from_ref(&terminating), BTreeMap::new(), &["node1"], 102);
        assert_eq!(kinds(&p)[..2], ["force-delete", "event"]);
        // On a healthy node a terminating pod is left to its kubelet.
        let p = run(&u, std::slice::from_ref(&terminating), BTreeMap::new(), 102);
        assert!(!kinds(&p).contains(&"force-delete") && !kinds(&p).contains(&"delete"));
        assert_eq!(p.requeue, Some(NODE_RECHECK));
    }

    #[test]
    fn a_final_vmi_clears_the_launcher_image_and_ready() {
        let mut v = vmi(Some("Succeeded"));
        if let Some(s) = v.status.as_mut() {
            s.launcher_container_image_version = Some("launcher:1".into());
        }
        let p = run(&v, &[], BTreeMap::new(), 100);
        let u = updated(&p);
        assert!(u.status.as_ref().and_then(|s| s.launcher_container_image_version.clone()).is_none());
        assert_eq!(cond(&u, Type::Ready), Some((ConditionStatus::False, Some("PodNotExists".into()))));
        assert!(u.finalizers().is_empty());
    }
}
