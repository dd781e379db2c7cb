//! The VM reconciler's decisions, pure: what was read ([`Observed`]) → what to do ([`Plan`]). Contract §1.2–1.4.
//!
//! ```text
//! state change requests: drop stale ones (a Stop for another/no VMI, a Start while a VMI lives), act on [0]
//! run strategy × (no VMI | VMI live | VMI final | Stop for it) ─► create VMI / delete VMI / nothing (§1.2's table)
//! create waits for: the VM's DataVolumes (Succeeded), the crash-loop back-off (status.startFailure)
//! status: created, ready, conditions (Ready + the VMI's, RestartRequired), printableStatus (§1.4's order), …
//! ```
//!
//! "Stop" always means deleting the VMI: the VMI controller and the node agent shut the guest down within its grace
//! period (§7.4). The VMI gets the VM's name, so creating it twice is refused by the API server (idempotent).

use std::collections::BTreeMap;
use std::time::Duration;

use contracts::kubevirt::consts::{ann, finalizer, reason};
use controller_runtime::events::Severity;
use crds::cdi::datavolume::{DataVolume, DataVolumePhase};
use crds::kubevirt::vm::{
    PrintableStatus, StateChangeRequestAction as Request, VirtualMachineCondition,
    VirtualMachineConditionType as VmType, VirtualMachineStartFailure, VirtualMachineStateChangeRequest,
};
use crds::kubevirt::vmi::{
    ConditionStatus, StartStrategy, VirtualMachineInstanceConditionType as VmiType,
    VirtualMachineInstancePhase as Phase, VirtualMachineInstanceSpec,
};
use crds::kubevirt::{RunStrategy, VirtualMachine, VirtualMachineInstance, VirtualMachineStatus, wire};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::{Resource, ResourceExt};

use super::instancetype::{Expansion, apply as apply_instancetype, conflict_message};
use super::live;

/// Event reason of a created VMI or DataVolume (upstream's).
pub const EVENT_CREATED: &str = "SuccessfulCreate";
/// Event reason of a deleted VMI (upstream's).
pub const EVENT_DELETED: &str = "SuccessfulDelete";
/// Event reason of a created DataVolume (upstream's).
pub const EVENT_DV_CREATED: &str = "SuccessfulDataVolumeCreate";
/// Event and `Failure` condition reason of a refused create (upstream's).
pub const REASON_FAILED_CREATE: &str = "FailedCreate";
/// `Ready` reason without a VMI (upstream's).
pub const REASON_VMI_NOT_EXISTS: &str = "VMINotExists";
/// `Ready` message without a VMI (upstream's).
pub const MESSAGE_VMI_NOT_EXISTS: &str = "VMI does not exist";
/// `Ready` reason when the VMI has no Ready condition (upstream's).
pub const REASON_VMI_CONDITION_MISSING: &str = "VMIConditionMissing";
/// `Ready` message when the VMI has no Ready condition (upstream's).
pub const MESSAGE_VMI_CONDITION_MISSING: &str = "VMI is missing the Ready condition";
/// `RestartRequired` message (upstream's).
pub const MESSAGE_RESTART_REQUIRED: &str = "a non-live-updatable field was changed in the template spec";
/// Annotation value that defers DataVolume creation until the VM starts.
pub const IMMEDIATE_DV_CREATION_OFF: &str = "false";
/// Crash-loop back-off: base delay (× failures²) and cap (§1.2).
pub const BACKOFF_BASE: Duration = Duration::from_secs(10);
/// Crash-loop back-off cap.
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Namespace of the name-based firmware UUID upstream derives from the VM name (its `magicUUID`).
pub const FIRMWARE_UUID_NAMESPACE: uuid::Uuid = uuid::uuid!("6a1a24a1-4061-4607-8bf4-a3963d0c5895");

/// A DataVolume of `spec.dataVolumeTemplates` (or one a volume references) as read from the cache.
#[derive(Debug, Clone, PartialEq)]
pub enum DataVolumeState {
    /// It does not exist.
    Missing,
    /// It exists, in this phase.
    Present(Option<DataVolumePhase>),
}

/// A claim a volume of the template references, as read from the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimState {
    /// No such PVC.
    Missing,
    /// Bound to a volume.
    Bound,
    /// Pending (not bound yet).
    Unbound,
}

/// Everything the planner looks at.
pub struct Observed<'a> {
    /// The VM.
    pub vm: &'a VirtualMachine,
    /// The VMI with the VM's name, if any.
    pub vmi: Option<&'a VirtualMachineInstance>,
    /// The DataVolumes the template's volumes reference (templates and others), by name.
    pub data_volumes: BTreeMap<String, DataVolumeState>,
    /// The PVCs the template's volumes reference (claims and DataVolumes), by name.
    pub claims: BTreeMap<String, ClaimState>,
    /// The template the current VMI was started from (its ControllerRevision), when the VM's generation moved on
    /// since the start; `None` when not looked up.
    pub started_template: Option<serde_json::Value>,
    /// The instancetype and preference for a new VMI (read only when the VM names one and has no live VMI);
    /// `Err` carries the user's error ("Failure to find instancetype: …").
    pub expansion: Option<Result<Expansion, String>>,
    /// The cluster's live-update settings.
    pub live: live::Settings,
    /// Now.
    pub now: Time,
}

/// One thing to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Add the VM controller's finalizer to the VM.
    AddFinalizer,
    /// Remove it (the VMI is gone).
    RemoveFinalizer,
    /// Create a DataVolume of `spec.dataVolumeTemplates`.
    CreateDataVolume(Box<DataVolume>),
    /// Record the VM's spec in a ControllerRevision, then create the VMI (whose status names the revision).
    CreateVmi(Box<VirtualMachineInstance>),
    /// Delete the VMI with this UID (precondition).
    DeleteVmi {
        /// Its UID.
        uid: String,
    },
    /// Set the VMI's `kubevirt.io/vm-generation` annotation (a VM change that needs no restart).
    SetVmiGeneration(i64),
    /// Apply this merge patch (live CPU, memory and placement changes; it carries the observed resourceVersion) to
    /// the VMI.
    PatchVmi(serde_json::Value),
    /// Patch the VM's spec to run (`runStrategy: Always`, or `running: true` for a legacy VM).
    StartHalted,
    /// Replace the VM's status.
    UpdateStatus(Box<VirtualMachineStatus>),
    /// Publish an event on the VM.
    Event {
        /// Normal or Warning.
        severity: Severity,
        /// Reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
}

/// The decisions of one reconcile.
#[derive(Debug, Default)]
pub struct Plan {
    /// In order.
    pub actions: Vec<Action>,
    /// Look again after this long (the back-off's end), else on the next change.
    pub requeue: Option<Duration>,
}

/// Name of the ControllerRevision recording the VM spec a VMI starts from (upstream's naming).
pub fn revision_name(vm: &VirtualMachine) -> String {
    format!("revision-start-vm-{}-{}", vm.uid().unwrap_or_default(), vm.metadata.generation.unwrap_or_default())
}

/// The firmware UUID a VM's VMI gets when its template sets none: stable across restarts (upstream's
/// `CalculateLegacyUUID`: a SHA-1 name-based UUID of the VM name).
pub fn firmware_uuid(name: &str) -> String {
    uuid::Uuid::new_v5(&FIRMWARE_UUID_NAMESPACE, name.as_bytes()).to_string()
}

/// The crash-loop delay after `failures` consecutive failed starts: 10 s × failures², plus `jitter` (0..1) of half
/// of it, capped at 300 s.
pub fn backoff(failures: i64, jitter: f64) -> Duration {
    let n = failures.clamp(1, 1000) as f64;
    let base = BACKOFF_BASE.as_secs_f64() * n * n;
    let with_jitter = base + base / 2.0 * jitter.clamp(0.0, 1.0);
    Duration::from_secs_f64(with_jitter.min(BACKOFF_MAX.as_secs_f64()))
}

/// A deterministic jitter in 0..1 for the `failures`th failure of the VM with `uid` (spreads VMs that fail
/// together without making the plan impure).
pub fn jitter(uid: &str, failures: i64) -> f64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{uid}/{failures}").as_bytes());
    f64::from(u16::from_be_bytes([digest[0], digest[1]])) / f64::from(u16::MAX)
}

fn is_live(vmi: &VirtualMachineInstance) -> bool {
    !vmi.is_final() && vmi.metadata.deletion_timestamp.is_none()
}

fn ever_running(vmi: &VirtualMachineInstance) -> bool {
    vmi.phase() == Phase::Running
        || vmi
            .status
            .as_ref()
            .and_then(|s| s.phase_transition_timestamps.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.phase == Some(Phase::Running)))
}

fn vmi_condition(vmi: &VirtualMachineInstance, t: &VmiType) -> Option<(ConditionStatus, String)> {
    let c = vmi.status.as_ref()?.condition(t)?;
    Some((c.status.clone(), c.reason.clone().unwrap_or_default()))
}

fn template_spec(vm: &VirtualMachine) -> VirtualMachineInstanceSpec {
    vm.spec.template.spec.clone().unwrap_or_default()
}

/// The names of the DataVolumes and PVCs the template's volumes reference.
pub fn referenced_claims(vm: &VirtualMachine) -> (Vec<String>, Vec<String>) {
    let spec = template_spec(vm);
    let mut dvs = Vec::new();
    let mut pvcs = Vec::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(d) = &v.data_volume {
            dvs.push(d.name.clone());
            pvcs.push(d.name.clone());
        }
        if let Some(c) = &v.persistent_volume_claim {
            pvcs.push(c.claim_name.clone());
        }
    }
    (dvs, pvcs)
}

/// The VM as controller owner of what it creates (VMI, DataVolumes, ControllerRevisions).
pub fn owner_reference(vm: &VirtualMachine) -> OwnerReference {
    OwnerReference {
        api_version: VirtualMachine::api_version(&()).into_owned(),
        kind: VirtualMachine::kind(&()).into_owned(),
        name: vm.name_any(),
        uid: vm.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The DataVolume created for template `index` of the VM.
pub fn data_volume(vm: &VirtualMachine, index: usize) -> Option<DataVolume> {
    let t = vm.spec.data_volume_templates.as_ref()?.get(index)?;
    let mut meta = t.metadata.clone();
    meta.namespace = vm.namespace();
    meta.owner_references = Some(vec![owner_reference(vm)]);
    meta.resource_version = None;
    meta.uid = None;
    Some(DataVolume { metadata: meta, spec: t.spec.clone(), status: None })
}

/// The VMI the VM starts: the VM's name and namespace, the template's labels, annotations (plus
/// `kubevirt.io/vm-generation`) and spec, the VM as controller, a stable firmware UUID, `startStrategy: Paused` for
/// a start-paused request, and the ControllerRevision of the start in its status.
///
/// With an instancetype or preference, they are applied first; `Err` names the conflicting template fields.
pub fn vmi_for(
    vm: &VirtualMachine,
    paused: bool,
    expansion: Option<&Expansion>,
) -> Result<VirtualMachineInstance, Vec<String>> {
    let template_meta = vm.spec.template.metadata.clone().unwrap_or_default();
    let mut annotations = template_meta.annotations.unwrap_or_default();
    let mut spec = template_spec(vm);
    if let Some(e) = expansion {
        apply_instancetype(&mut spec, &mut annotations, e)?;
    }
    annotations.insert(ann::VM_GENERATION.into(), vm.metadata.generation.unwrap_or_default().to_string());
    let firmware = spec.domain.firmware.get_or_insert_default();
    if firmware.uuid.as_deref().unwrap_or_default().is_empty() {
        firmware.uuid = Some(firmware_uuid(&vm.name_any()));
    }
    if paused {
        spec.start_strategy = Some(StartStrategy::Paused);
    }
    let mut vmi = VirtualMachineInstance::new(&vm.name_any(), spec);
    vmi.metadata = ObjectMeta {
        name: Some(vm.name_any()),
        namespace: vm.namespace(),
        labels: template_meta.labels,
        annotations: Some(annotations),
        owner_references: Some(vec![owner_reference(vm)]),
        ..Default::default()
    };
    vmi.status = Some(crds::kubevirt::VirtualMachineInstanceStatus {
        virtual_machine_revision_name: Some(revision_name(vm)),
        ..Default::default()
    });
    Ok(vmi)
}

/// What the run strategy and the first request decide.
#[derive(Debug, Default)]
struct Decision {
    create: bool,
    delete: bool,
    start_halted: bool,
    /// Queue a Start (RerunOnFailure after a failure).
    queue_start: bool,
}

fn decide(o: &Observed<'_>, strategy: &RunStrategy, first: Option<&VirtualMachineStateChangeRequest>) -> Decision {
    let vmi = o.vmi;
    let stop_for_vmi = matches!((first, vmi), (Some(r), Some(v)) if r.action == Request::Stop
        && r.uid.as_deref() == v.uid().as_deref());
    let start_requested = first.is_some_and(|r| r.action == Request::Start);
    let deleting = vmi.is_some_and(|v| v.metadata.deletion_timestamp.is_some());
    let mut d = Decision::default();
    match strategy {
        RunStrategy::Always => match vmi {
            Some(v) => d.delete = !deleting && (v.is_final() || stop_for_vmi),
            None => d.create = true,
        },
        RunStrategy::RerunOnFailure => match vmi {
            Some(v) => {
                if !deleting && (stop_for_vmi || v.is_final()) {
                    d.delete = true;
                    d.queue_start = !stop_for_vmi && v.phase() == Phase::Failed;
                }
            }
            None => {
                let status = o.vm.status.as_ref();
                d.create = start_requested || status.and_then(|s| s.run_strategy.as_ref()) != Some(strategy);
            }
        },
        RunStrategy::Manual => match vmi {
            Some(_) => d.delete = !deleting && stop_for_vmi,
            None => d.create = start_requested,
        },
        RunStrategy::Halted => match vmi {
            Some(_) => d.delete = !deleting,
            None => d.start_halted = start_requested,
        },
        RunStrategy::Once => d.create = vmi.is_none(),
        RunStrategy::WaitAsReceiver | RunStrategy::Other(_) => {}
    }
    d
}

fn counts_failures(strategy: &RunStrategy) -> bool {
    matches!(strategy, RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once)
}

/// The next `startFailure`: a VMI that ended without ever running counts once; one that runs (or another
/// strategy) clears it.
fn start_failure(o: &Observed<'_>, strategy: &RunStrategy) -> Option<VirtualMachineStartFailure> {
    let previous = o.vm.status.as_ref().and_then(|s| s.start_failure.clone());
    if !counts_failures(strategy) {
        return None;
    }
    let Some(vmi) = o.vmi else { return previous };
    if ever_running(vmi) {
        return None;
    }
    if !vmi.is_final() {
        return previous;
    }
    let uid = vmi.uid().unwrap_or_default();
    if previous.as_ref().and_then(|p| p.last_failed_vmi_uid.as_deref()) == Some(uid.as_str()) {
        return previous;
    }
    let count = previous.as_ref().and_then(|p| p.consecutive_fail_count).unwrap_or(0) + 1;
    let delay = backoff(count, jitter(&o.vm.uid().unwrap_or_default(), count));
    let retry = o.now.0 + k8s_openapi::jiff::SignedDuration::try_from(delay).unwrap_or_default();
    Some(VirtualMachineStartFailure {
        consecutive_fail_count: Some(count),
        last_failed_vmi_uid: Some(uid),
        retry_after_timestamp: Some(Time(retry)),
        ..Default::default()
    })
}

/// How long the back-off still holds a start, if it does.
fn backoff_remaining(failure: Option<&VirtualMachineStartFailure>, now: &Time) -> Option<Duration> {
    let retry = failure?.retry_after_timestamp.as_ref()?;
    let left = retry.0.duration_since(now.0);
    (left.is_positive()).then(|| Duration::try_from(left).unwrap_or_default())
}

/// Decides what to do for the VM.
pub fn plan(o: &Observed<'_>) -> Plan {
    let vm = o.vm;
    let mut plan = Plan::default();
    let old_status = vm.status.clone().unwrap_or_default();
    let mut status = old_status.clone();
    let strategy = vm.run_strategy();
    let has_finalizer = vm.finalizers().iter().any(|f| f == finalizer::VIRTUAL_MACHINE_CONTROLLER);

    if vm.metadata.deletion_timestamp.is_some() {
        match o.vmi {
            Some(v) if v.metadata.deletion_timestamp.is_none() => {
                plan.actions.push(Action::DeleteVmi { uid: v.uid().unwrap_or_default() })
            }
            Some(_) => {}
            None if has_finalizer => plan.actions.push(Action::RemoveFinalizer),
            None => {}
        }
        finish_status(o, &mut status, &strategy, false, true);
        push_status(&mut plan, &old_status, status);
        return plan;
    }
    if !has_finalizer {
        plan.actions.push(Action::AddFinalizer);
    }

    // State change requests: drop the stale ones at the front.
    let mut requests = old_status.state_change_requests.clone().unwrap_or_default();
    while let Some(first) = requests.first() {
        let stale = match first.action {
            Request::Stop => o.vmi.is_none() || first.uid.as_deref() != o.vmi.and_then(|v| v.uid()).as_deref(),
            Request::Start => o.vmi.is_some_and(is_live),
            Request::Other(_) => true,
        };
        if !stale {
            break;
        }
        requests.remove(0);
    }
    let first = requests.first().cloned();
    let mut decision = decide(o, &strategy, first.as_ref());

    // Crash-loop tracking, then what holds a start back.
    status.start_failure = start_failure(o, &strategy);
    let held = backoff_remaining(status.start_failure.as_ref(), &o.now);
    let immediate_dvs = vm.annotations().get(ann::IMMEDIATE_DATA_VOLUME_CREATION).map(String::as_str)
        != Some(IMMEDIATE_DV_CREATION_OFF);
    if immediate_dvs || decision.create {
        for (i, t) in vm.spec.data_volume_templates.iter().flatten().enumerate() {
            let name = t.metadata.name.clone().unwrap_or_default();
            if o.data_volumes.get(&name).is_none_or(|d| *d == DataVolumeState::Missing)
                && let Some(dv) = data_volume(vm, i)
            {
                plan.actions.push(Action::CreateDataVolume(Box::new(dv)));
            }
        }
    }
    let dvs_ready = vm.spec.data_volume_templates.iter().flatten().all(|t| {
        matches!(o.data_volumes.get(t.metadata.name.as_deref().unwrap_or_default()),
            Some(DataVolumeState::Present(Some(p))) if vmi_may_start(*p))
    });
    if decision.create
        && let Some(left) = held
    {
        decision.create = false;
        plan.requeue = Some(left);
    }
    let creation_expected = decision.create;
    if decision.create && !dvs_ready {
        decision.create = false;
    }

    if decision.delete
        && let Some(v) = o.vmi
    {
        plan.actions.push(Action::DeleteVmi { uid: v.uid().unwrap_or_default() });
        plan.actions.push(Action::Event {
            severity: Severity::Normal,
            reason: EVENT_DELETED,
            message: format!(
                "Stopped the virtual machine by deleting the virtual machine instance {}",
                v.uid().unwrap_or_default()
            ),
        });
        if decision.queue_start && !requests.iter().any(|r| r.action == Request::Start) {
            requests.push(VirtualMachineStateChangeRequest { action: Request::Start, ..Default::default() });
        }
    }
    if decision.start_halted {
        plan.actions.push(Action::StartHalted);
    }
    // The instancetype and preference: a missing one or a conflicting template holds the start (Failure).
    let mut refused: Option<String> = None;
    let expansion = match &o.expansion {
        Some(Ok(e)) => Some(e),
        Some(Err(message)) => {
            refused = Some(message.clone());
            None
        }
        None => None,
    };
    if let Some(e) = expansion {
        status.instancetype_ref = e.instancetype.as_ref().map(|c| c.reference.clone());
        status.preference_ref = e.preference.as_ref().map(|c| c.reference.clone());
    }
    if decision.create && refused.is_none() {
        let paused = first.as_ref().is_some_and(|r| {
            r.action == Request::Start
                && r.data.as_ref().and_then(|d| d.get("paused")).map(String::as_str) == Some("true")
        });
        match vmi_for(vm, paused, expansion) {
            Ok(vmi) => plan.actions.push(Action::CreateVmi(Box::new(vmi))),
            Err(conflicts) => refused = Some(conflict_message(&conflicts)),
        }
    }
    if let Some(message) = &refused {
        decision.create = false;
        let failure = Some((ConditionStatus::True, REASON_FAILED_CREATE, message.as_str()));
        set_own_condition(&mut status, VmType::Failure, failure, &o.now);
    }
    if decision.create || o.vmi.is_some() {
        status.run_strategy = Some(strategy.clone());
    }
    status.state_change_requests = (!requests.is_empty()).then_some(requests);

    // A running VMI started from an older generation: its changes are applied live where they can be
    // (`live::plan`), else they wait for a restart; once the VMI has them all it carries the VM's generation.
    let mut restart_required = None;
    if let (Some(v), Some(started)) = (o.vmi.filter(|v| is_live(v)), o.started_template.as_ref()) {
        let out = live::plan(started, vm, v, &o.live);
        if out.synced() {
            if let Some(g) = vm.metadata.generation {
                plan.actions.push(Action::SetVmiGeneration(g));
            }
        } else if v.metadata.deletion_timestamp.is_none() {
            if let Some(p) = out.patch {
                plan.actions.push(Action::PatchVmi(p));
            }
            restart_required = out.restart;
        }
    }
    finish_status(o, &mut status, &strategy, creation_expected || decision.create, decision.delete);
    set_own_condition(
        &mut status,
        VmType::RestartRequired,
        restart_required.as_deref().map(|m| (ConditionStatus::True, "", m)),
        &o.now,
    );
    // A refused create is reported by the apply step; it is cleared once the VMI exists or none is wanted.
    if refused.is_none() && (o.vmi.is_some() || !creation_expected) {
        set_own_condition(&mut status, VmType::Failure, None, &o.now);
    }
    push_status(&mut plan, &old_status, status);
    plan
}

fn vmi_generation(o: &Observed<'_>) -> Option<i64> {
    o.vmi?.annotations().get(ann::VM_GENERATION)?.parse().ok()
}

fn push_status(plan: &mut Plan, old: &VirtualMachineStatus, new: VirtualMachineStatus) {
    if &new != old {
        plan.actions.push(Action::UpdateStatus(Box::new(new)));
    }
}

/// Sets (Some) or removes (None) one of the VM's own conditions (an empty reason is left out).
fn set_own_condition(
    status: &mut VirtualMachineStatus,
    t: VmType,
    value: Option<(ConditionStatus, &str, &str)>,
    now: &Time,
) {
    match value {
        None => wire::remove_condition(&mut status.conditions, &t),
        Some((s, r, m)) => {
            let mut c = VirtualMachineCondition::new(t, s, r, m);
            c.reason = c.reason.filter(|r| !r.is_empty());
            wire::set_condition(&mut status.conditions, c, now);
        }
    }
}

/// created, ready, conditions mirrored from the VMI, generations and printableStatus.
fn finish_status(
    o: &Observed<'_>,
    status: &mut VirtualMachineStatus,
    strategy: &RunStrategy,
    creation_expected: bool,
    deleting_vmi: bool,
) {
    let vmi = o.vmi;
    status.created = vmi.is_some().then_some(true);
    let ready = vmi.and_then(|v| vmi_condition(v, &VmiType::Ready));
    status.ready = ready.as_ref().is_some_and(|(s, _)| *s == ConditionStatus::True).then_some(true);
    // Conditions: the VM's own ones stay; Ready and the VMI's others are mirrored.
    let own = [VmType::Failure, VmType::RestartRequired, VmType::ManualRecoveryRequired];
    let old = status.conditions.clone().unwrap_or_default();
    let mut conditions: Vec<VirtualMachineCondition> = old.iter().filter(|c| own.contains(&c.type_)).cloned().collect();
    let keep_times = |mut c: VirtualMachineCondition| {
        if let Some(prev) = old.iter().find(|p| p.type_ == c.type_)
            && prev.status == c.status
        {
            c.last_transition_time = prev.last_transition_time.clone().or(c.last_transition_time);
        }
        c
    };
    let vmi_conditions = vmi.and_then(|v| v.status.as_ref()).and_then(|s| s.conditions.clone()).unwrap_or_default();
    let ready_condition = match (vmi, vmi_conditions.iter().find(|c| c.type_ == VmiType::Ready)) {
        (None, _) => (ConditionStatus::False, REASON_VMI_NOT_EXISTS, MESSAGE_VMI_NOT_EXISTS.to_owned()),
        (Some(_), None) => {
            (ConditionStatus::False, REASON_VMI_CONDITION_MISSING, MESSAGE_VMI_CONDITION_MISSING.to_owned())
        }
        (Some(_), Some(_)) => (ConditionStatus::Unknown, "", String::new()),
    };
    for c in &vmi_conditions {
        conditions.push(keep_times(VirtualMachineCondition {
            type_: VmType::from(c.type_.as_str()),
            status: c.status.clone(),
            last_probe_time: c.last_probe_time.clone(),
            last_transition_time: c.last_transition_time.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            ..Default::default()
        }));
    }
    if ready_condition.0 != ConditionStatus::Unknown {
        conditions.push(keep_times(VirtualMachineCondition {
            type_: VmType::Ready,
            status: ready_condition.0,
            reason: Some(ready_condition.1.to_owned()),
            message: Some(ready_condition.2),
            last_transition_time: Some(o.now.clone()),
            ..Default::default()
        }));
    }
    conditions.sort_by_key(|c| if c.type_ == VmType::Ready { 0 } else { 1 });
    status.conditions = (!conditions.is_empty()).then_some(conditions);
    status.desired_generation = o.vm.metadata.generation;
    status.observed_generation = vmi_generation(o).or(status.observed_generation);
    status.printable_status = Some(printable_status(o, strategy, status, creation_expected, deleting_vmi));
}

/// Whether a DataVolume in `phase` lets the VMI be created (upstream's): imported, or waiting for a consumer —
/// the VMI's temporary pod is that consumer (`vmi::pod::render_first_consumer`).
fn vmi_may_start(phase: DataVolumePhase) -> bool {
    matches!(
        phase,
        DataVolumePhase::Succeeded | DataVolumePhase::WaitForFirstConsumer | DataVolumePhase::PendingPopulation
    )
}

/// `printableStatus`, the first match of §1.4's list.
pub fn printable_status(
    o: &Observed<'_>,
    strategy: &RunStrategy,
    status: &VirtualMachineStatus,
    creation_expected: bool,
    deleting_vmi: bool,
) -> PrintableStatus {
    let vmi = o.vmi;
    let phase = vmi.map(|v| v.phase());
    let synchronized = vmi.and_then(|v| vmi_condition(v, &VmiType::Synchronized));
    let sync_false = |r: &str| synchronized.as_ref().is_some_and(|(s, why)| *s == ConditionStatus::False && why == r);
    let (dvs, pvcs) = referenced_claims(o.vm);
    let dv_phase = |n: &String| match o.data_volumes.get(n) {
        Some(DataVolumeState::Present(p)) => *p,
        _ => None,
    };
    let live = vmi.is_some_and(is_live);
    if o.vm.metadata.deletion_timestamp.is_some() {
        return PrintableStatus::Terminating;
    }
    if let Some(v) = vmi
        && !v.is_final()
        && (v.metadata.deletion_timestamp.is_some() || deleting_vmi)
    {
        return PrintableStatus::Stopping;
    }
    let migration = vmi.and_then(|v| v.status.as_ref()).and_then(|s| s.migration_state.as_ref());
    if migration.is_some_and(|m| m.start_timestamp.is_some() && m.end_timestamp.is_none()) {
        return PrintableStatus::Migrating;
    }
    if phase == Some(Phase::Running) {
        let paused = vmi.and_then(|v| vmi_condition(v, &VmiType::Paused));
        if paused.is_some_and(|(s, _)| s == ConditionStatus::True) {
            return PrintableStatus::Paused;
        }
        return PrintableStatus::Running;
    }
    if sync_false(reason::FAILED_PVC_NOT_FOUND) {
        return PrintableStatus::ErrorPvcNotFound;
    }
    if dvs.iter().any(|n| dv_phase(n) == Some(DataVolumePhase::Failed)) {
        return PrintableStatus::DataVolumeError;
    }
    let scheduled = vmi.and_then(|v| vmi_condition(v, &VmiType::PodScheduled));
    if scheduled.is_some_and(|(s, r)| s == ConditionStatus::False && r == reason::UNSCHEDULABLE) {
        return PrintableStatus::ErrorUnschedulable;
    }
    let should_run = creation_expected || live;
    let provisioning = dvs.iter().any(|n| !dv_phase(n).is_some_and(vmi_may_start));
    if should_run && provisioning {
        return PrintableStatus::Provisioning;
    }
    if should_run && pvcs.iter().any(|n| o.claims.get(n) == Some(&ClaimState::Unbound)) {
        return PrintableStatus::WaitingForVolumeBinding;
    }
    if sync_false(reason::ERR_IMAGE_PULL) {
        return PrintableStatus::ErrImagePull;
    }
    if sync_false(reason::IMAGE_PULL_BACK_OFF) {
        return PrintableStatus::ImagePullBackOff;
    }
    if (vmi.is_none() && creation_expected)
        || matches!(phase, Some(Phase::Pending | Phase::Unset | Phase::Scheduling | Phase::Scheduled))
    {
        return PrintableStatus::Starting;
    }
    let failures = status.start_failure.as_ref().and_then(|f| f.consecutive_fail_count).unwrap_or(0);
    if !live && failures > 0 && counts_failures(strategy) {
        return PrintableStatus::CrashLoopBackOff;
    }
    if vmi.is_some_and(|v| v.is_final()) || vmi.is_none() {
        if *strategy == RunStrategy::WaitAsReceiver {
            return PrintableStatus::WaitingForReceiver;
        }
        return PrintableStatus::Stopped;
    }
    if *strategy == RunStrategy::WaitAsReceiver && phase == Some(Phase::WaitingForSync) {
        return PrintableStatus::WaitingForReceiver;
    }
    PrintableStatus::Unknown
}

#[cfg(test)]
mod tests {
    use crds::kubevirt::vm::{DataVolumeTemplateSpec, VirtualMachineInstanceTemplateSpec, VirtualMachineSpec};
    use crds::kubevirt::vmi::{
        VirtualMachineInstanceCondition, VirtualMachineInstancePhaseTransitionTimestamp, VirtualMachineInstanceStatus,
    };
    use crds::kubevirt::volume::{DataVolumeSource, Volume};
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn now() -> Time {
        Time(Timestamp::from_second(1_800_000_000).unwrap_or_else(|e| panic!("{e}")))
    }

    fn vm(strategy: Option<RunStrategy>, running: Option<bool>) -> VirtualMachine {
        let mut vm = VirtualMachine::new(
            "vm1",
            VirtualMachineSpec {
                run_strategy: strategy,
                running,
                template: VirtualMachineInstanceTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some([("kubevirt.io/vm".to_owned(), "vm1".to_owned())].into()),
                        ..Default::default()
                    }),
                    spec: Some(VirtualMachineInstanceSpec::default()),
                },
                ..Default::default()
            },
        );
        vm.metadata.namespace = Some("ns".into());
        vm.metadata.uid = Some("vm-uid".into());
        vm.metadata.generation = Some(1);
        vm.metadata.finalizers = Some(vec![finalizer::VIRTUAL_MACHINE_CONTROLLER.into()]);
        vm
    }

    fn vmi(uid: &str, phase: Phase, ran: bool) -> VirtualMachineInstance {
        let mut v = VirtualMachineInstance::new("vm1", VirtualMachineInstanceSpec::default());
        v.metadata.uid = Some(uid.into());
        v.metadata.annotations = Some([(ann::VM_GENERATION.to_owned(), "1".to_owned())].into());
        let mut stamps = Vec::new();
        if ran {
            stamps.push(VirtualMachineInstancePhaseTransitionTimestamp {
                phase: Some(Phase::Running),
                ..Default::default()
            });
        }
        v.status = Some(VirtualMachineInstanceStatus {
            phase: Some(phase),
            phase_transition_timestamps: Some(stamps),
            ..Default::default()
        });
        v
    }

    fn observe<'a>(vm: &'a VirtualMachine, vmi: Option<&'a VirtualMachineInstance>) -> Observed<'a> {
        Observed {
            vm,
            vmi,
            data_volumes: BTreeMap::new(),
            claims: BTreeMap::new(),
            started_template: None,
            expansion: None,
            live: live::Settings::default(),
            now: now(),
        }
    }

    fn request(action: Request, uid: Option<&str>) -> VirtualMachineStateChangeRequest {
        VirtualMachineStateChangeRequest { action, uid: uid.map(str::to_owned), ..Default::default() }
    }

    fn with_requests(mut vm: VirtualMachine, requests: Vec<VirtualMachineStateChangeRequest>) -> VirtualMachine {
        vm.status.get_or_insert_default().state_change_requests = Some(requests);
        vm
    }

    fn with_recorded(mut vm: VirtualMachine, s: RunStrategy) -> VirtualMachine {
        vm.status.get_or_insert_default().run_strategy = Some(s);
        vm
    }

    /// (created a VMI, deleted the VMI, started the Halted VM)
    fn effect(p: &Plan) -> (bool, bool, bool) {
        (
            p.actions.iter().any(|a| matches!(a, Action::CreateVmi(_))),
            p.actions.iter().any(|a| matches!(a, Action::DeleteVmi { .. })),
            p.actions.iter().any(|a| matches!(a, Action::StartHalted)),
        )
    }

    fn status_of(p: &Plan) -> VirtualMachineStatus {
        p.actions
            .iter()
            .find_map(|a| match a {
                Action::UpdateStatus(s) => Some(s.as_ref().clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no status update in {:?}", p.actions))
    }

    #[test]
    fn run_strategy_table() {
        use RunStrategy::*;
        let running = vmi("u1", Phase::Running, true);
        let failed = vmi("u1", Phase::Failed, true);
        let succeeded = vmi("u1", Phase::Succeeded, true);
        let stop = vec![request(Request::Stop, Some("u1"))];
        let start = vec![request(Request::Start, None)];
        type Case<'a> = (&'a str, VirtualMachine, Option<&'a VirtualMachineInstance>, (bool, bool, bool));
        let cases: Vec<Case> = vec![
            ("Always, no VMI: create", vm(Some(Always), None), None, (true, false, false)),
            ("running: true is Always", vm(None, Some(true)), None, (true, false, false)),
            ("running: false is Halted", vm(None, Some(false)), None, (false, false, false)),
            ("Always, running: nothing", vm(Some(Always), None), Some(&running), (false, false, false)),
            ("Always, failed: delete (restart)", vm(Some(Always), None), Some(&failed), (false, true, false)),
            ("Always, succeeded: delete (restart)", vm(Some(Always), None), Some(&succeeded), (false, true, false)),
            (
                "Always, stop request: delete",
                with_requests(vm(Some(Always), None), stop.clone()),
                Some(&running),
                (false, true, false),
            ),
            ("RerunOnFailure, first switch: create", vm(Some(RerunOnFailure), None), None, (true, false, false)),
            (
                "RerunOnFailure, recorded, no request: nothing",
                with_recorded(vm(Some(RerunOnFailure), None), RerunOnFailure),
                None,
                (false, false, false),
            ),
            (
                "RerunOnFailure, start request: create",
                with_requests(with_recorded(vm(Some(RerunOnFailure), None), RerunOnFailure), start.clone()),
                None,
                (true, false, false),
            ),
            (
                "RerunOnFailure, failed: delete",
                with_recorded(vm(Some(RerunOnFailure), None), RerunOnFailure),
                Some(&failed),
                (false, true, false),
            ),
            (
                "RerunOnFailure, succeeded: delete",
                with_recorded(vm(Some(RerunOnFailure), None), RerunOnFailure),
                Some(&succeeded),
                (false, true, false),
            ),
            ("Manual, no request: nothing", vm(Some(Manual), None), None, (false, false, false)),
            ("Manual, start: create", with_requests(vm(Some(Manual), None), start.clone()), None, (true, false, false)),
            ("Manual, final: left alone", vm(Some(Manual), None), Some(&succeeded), (false, false, false)),
            (
                "Manual, stop: delete",
                with_requests(vm(Some(Manual), None), stop.clone()),
                Some(&running),
                (false, true, false),
            ),
            (
                "Manual, stale stop (other uid): nothing",
                with_requests(vm(Some(Manual), None), vec![request(Request::Stop, Some("old"))]),
                Some(&running),
                (false, false, false),
            ),
            ("Halted, running: delete", vm(Some(Halted), None), Some(&running), (false, true, false)),
            (
                "Halted, start request: flip to Always",
                with_requests(vm(Some(Halted), None), start.clone()),
                None,
                (false, false, true),
            ),
            ("Once, no VMI: create", vm(Some(Once), None), None, (true, false, false)),
            ("Once, final: never restarted", vm(Some(Once), None), Some(&failed), (false, false, false)),
            ("WaitAsReceiver: nothing", vm(Some(WaitAsReceiver), None), None, (false, false, false)),
        ];
        for (what, vm, vmi, want) in cases {
            assert_eq!(effect(&plan(&observe(&vm, vmi))), want, "{what}");
        }
    }

    #[test]
    fn rerun_on_failure_queues_a_start_after_a_failure_only() {
        let vm = with_recorded(vm(Some(RunStrategy::RerunOnFailure), None), RunStrategy::RerunOnFailure);
        let failed = vmi("u1", Phase::Failed, true);
        let s = status_of(&plan(&observe(&vm, Some(&failed))));
        assert_eq!(s.state_change_requests, Some(vec![request(Request::Start, None)]));
        let succeeded = vmi("u1", Phase::Succeeded, true);
        assert_eq!(status_of(&plan(&observe(&vm, Some(&succeeded)))).state_change_requests, None);
    }

    #[test]
    fn restart_is_stop_then_start_and_requests_drain_in_order() {
        let requests = vec![request(Request::Stop, Some("u1")), request(Request::Start, None)];
        let vm = with_requests(vm(Some(RunStrategy::Manual), None), requests);
        let running = vmi("u1", Phase::Running, true);
        // The Stop for the running VMI deletes it; both requests stay until it is gone.
        let p = plan(&observe(&vm, Some(&running)));
        assert_eq!(effect(&p), (false, true, false));
        let s = status_of(&p);
        assert_eq!(s.printable_status, Some(PrintableStatus::Stopping));
        assert_eq!(s.state_change_requests.as_ref().map(Vec::len), Some(2));
        // Gone: the Stop is stale and dropped, the Start creates the new VMI.
        let mut vm2 = vm.clone();
        vm2.status = Some(s);
        let p = plan(&observe(&vm2, None));
        assert_eq!(effect(&p), (true, false, false));
        assert_eq!(status_of(&p).state_change_requests, Some(vec![request(Request::Start, None)]));
        // Once the new VMI lives, the Start is dropped.
        let mut vm3 = vm2.clone();
        vm3.status = Some(status_of(&p));
        let fresh = vmi("u2", Phase::Scheduling, false);
        let p = plan(&observe(&vm3, Some(&fresh)));
        assert_eq!(effect(&p), (false, false, false));
        let s = status_of(&p);
        assert_eq!(s.state_change_requests, None);
        assert_eq!(s.printable_status, Some(PrintableStatus::Starting));
        assert_eq!(s.run_strategy, Some(RunStrategy::Manual), "stop/start keeps the run strategy");
    }

    #[test]
    fn the_vmi_is_named_owned_labelled_and_gets_a_stable_uuid() {
        let vm = vm(Some(RunStrategy::Always), None);
        let p = plan(&observe(&vm, None));
        let vmi = p
            .actions
            .iter()
            .find_map(|a| match a {
                Action::CreateVmi(v) => Some(v.as_ref().clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no VMI"));
        assert_eq!(vmi.metadata.name.as_deref(), Some("vm1"));
        assert_eq!(vmi.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(vmi.labels().get("kubevirt.io/vm").map(String::as_str), Some("vm1"));
        assert_eq!(vmi.annotations().get(ann::VM_GENERATION).map(String::as_str), Some("1"));
        let owner = &vmi.metadata.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("VirtualMachine", "vm-uid", Some(true))
        );
        let uuid = vmi.spec.domain.firmware.as_ref().and_then(|f| f.uuid.clone());
        assert_eq!(uuid, Some(firmware_uuid("vm1")));
        assert_eq!(
            uuid,
            plan(&observe(&vm, None)).actions.iter().find_map(|a| match a {
                Action::CreateVmi(v) => v.spec.domain.firmware.as_ref().and_then(|f| f.uuid.clone()),
                _ => None,
            }),
            "stable across starts"
        );
        assert_eq!(vmi.status.and_then(|s| s.virtual_machine_revision_name), Some("revision-start-vm-vm-uid-1".into()));
        let s = status_of(&p);
        assert_eq!(s.printable_status, Some(PrintableStatus::Starting));
        assert_eq!(s.run_strategy, Some(RunStrategy::Always));
    }

    #[test]
    fn firmware_uuid_is_upstreams_name_based_uuid() {
        // uuid.NewSHA1(6a1a24a1-…, "testvmi"): a version 5 UUID; the same name gives the same UUID.
        let u = firmware_uuid("testvmi");
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "5");
        assert_eq!(u, firmware_uuid("testvmi"));
        assert_ne!(u, firmware_uuid("testvmi2"));
    }

    #[test]
    fn start_paused_request() {
        let mut r = request(Request::Start, None);
        r.data = Some([("paused".to_owned(), "true".to_owned())].into());
        let vm = with_requests(vm(Some(RunStrategy::Always), None), vec![r]);
        let p = plan(&observe(&vm, None));
        let paused = p
            .actions
            .iter()
            .any(|a| matches!(a, Action::CreateVmi(v) if v.spec.start_strategy == Some(StartStrategy::Paused)));
        assert!(paused);
    }

    #[test]
    fn crash_loop_backoff_counts_failed_starts_once_and_holds_the_next_start() {
        let vm0 = vm(Some(RunStrategy::Always), None);
        let never_ran = vmi("u1", Phase::Failed, false);
        let p = plan(&observe(&vm0, Some(&never_ran)));
        assert_eq!(effect(&p), (false, true, false), "the failed VMI is deleted");
        let s = status_of(&p);
        let f = s.start_failure.clone().unwrap_or_default();
        assert_eq!(f.consecutive_fail_count, Some(1));
        assert_eq!(f.last_failed_vmi_uid.as_deref(), Some("u1"));
        let retry = f.retry_after_timestamp.clone().unwrap_or_else(|| panic!("retry"));
        let wait = retry.0.duration_since(now().0).as_secs_f64();
        assert!((10.0..=15.0).contains(&wait), "{wait}");
        // The same VMI seen again does not count twice.
        let mut vm1 = vm0.clone();
        vm1.status = Some(s.clone());
        assert_eq!(status_of_or_old(&plan(&observe(&vm1, Some(&never_ran))), &vm1).start_failure, s.start_failure);
        // Gone: no start before retryAfter; the plan comes back then; CrashLoopBackOff meanwhile.
        let p = plan(&observe(&vm1, None));
        assert_eq!(effect(&p), (false, false, false));
        let left = p.requeue.unwrap_or_default().as_secs_f64();
        assert!((wait - 1.0..=wait).contains(&left), "{left} vs {wait}");
        assert_eq!(status_of(&p).printable_status, Some(PrintableStatus::CrashLoopBackOff));
        // After retryAfter: start again.
        let mut later = observe(&vm1, None);
        later.now = Time(retry.0 + k8s_openapi::jiff::SignedDuration::from_secs(1));
        assert_eq!(effect(&plan(&later)), (true, false, false));
        // A VMI that runs clears it.
        let ran = vmi("u2", Phase::Running, true);
        assert_eq!(status_of(&plan(&observe(&vm1, Some(&ran)))).start_failure, None);
        // Manual does not count.
        let mut manual = vm1.clone();
        manual.spec.run_strategy = Some(RunStrategy::Manual);
        assert_eq!(status_of(&plan(&observe(&manual, Some(&never_ran)))).start_failure, None);
    }

    fn status_of_or_old(p: &Plan, vm: &VirtualMachine) -> VirtualMachineStatus {
        p.actions
            .iter()
            .find_map(|a| match a {
                Action::UpdateStatus(s) => Some(s.as_ref().clone()),
                _ => None,
            })
            .or_else(|| vm.status.clone())
            .unwrap_or_default()
    }

    #[test]
    fn backoff_grows_quadratically_with_jitter_and_caps_at_five_minutes() {
        assert_eq!(backoff(1, 0.0), Duration::from_secs(10));
        assert_eq!(backoff(2, 0.0), Duration::from_secs(40));
        assert_eq!(backoff(3, 1.0), Duration::from_secs(135));
        assert_eq!(backoff(6, 0.0), BACKOFF_MAX);
        assert_eq!(backoff(50, 1.0), BACKOFF_MAX);
        let j = jitter("uid", 3);
        assert!((0.0..=1.0).contains(&j));
        assert_eq!(j, jitter("uid", 3));
    }

    fn dv_vm(phase: Option<DataVolumePhase>) -> (VirtualMachine, BTreeMap<String, DataVolumeState>) {
        let mut vm = vm(Some(RunStrategy::Always), None);
        vm.spec.data_volume_templates = Some(vec![DataVolumeTemplateSpec {
            metadata: ObjectMeta { name: Some("disk".into()), ..Default::default() },
            ..Default::default()
        }]);
        if let Some(spec) = vm.spec.template.spec.as_mut() {
            spec.volumes = Some(vec![Volume {
                name: "d".into(),
                data_volume: Some(DataVolumeSource { name: "disk".into(), ..Default::default() }),
                ..Default::default()
            }]);
        }
        let state = match phase {
            None => DataVolumeState::Missing,
            Some(p) => DataVolumeState::Present(Some(p)),
        };
        (vm, [("disk".to_owned(), state)].into())
    }

    #[test]
    fn data_volumes_are_created_owned_and_gate_the_start() {
        let (vm, dvs) = dv_vm(None);
        let mut o = observe(&vm, None);
        o.data_volumes = dvs;
        let p = plan(&o);
        let dv = p
            .actions
            .iter()
            .find_map(|a| match a {
                Action::CreateDataVolume(d) => Some(d.as_ref().clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no DataVolume"));
        assert_eq!(dv.metadata.name.as_deref(), Some("disk"));
        assert_eq!(dv.metadata.owner_references.unwrap_or_default()[0].uid, "vm-uid");
        assert_eq!(effect(&p), (false, false, false), "the VMI waits for its DataVolume");
        assert_eq!(status_of(&p).printable_status, Some(PrintableStatus::Provisioning));
        for (phase, create, printable) in [
            (DataVolumePhase::ImportInProgress, false, PrintableStatus::Provisioning),
            (DataVolumePhase::Failed, false, PrintableStatus::DataVolumeError),
            (DataVolumePhase::Succeeded, true, PrintableStatus::Starting),
            // The VMI's temporary pod is the first consumer that lets it bind.
            (DataVolumePhase::WaitForFirstConsumer, true, PrintableStatus::Starting),
        ] {
            let (vm, dvs) = dv_vm(Some(phase));
            let mut o = observe(&vm, None);
            o.data_volumes = dvs;
            let p = plan(&o);
            assert_eq!(effect(&p).0, create, "{phase:?}");
            assert!(!p.actions.iter().any(|a| matches!(a, Action::CreateDataVolume(_))));
            assert_eq!(status_of(&p).printable_status, Some(printable), "{phase:?}");
        }
        // A Halted VM still gets its DataVolumes (immediate creation), unless the annotation defers them.
        let (mut halted, dvs) = dv_vm(None);
        halted.spec.run_strategy = Some(RunStrategy::Halted);
        let mut o = observe(&halted, None);
        o.data_volumes = dvs.clone();
        assert!(plan(&o).actions.iter().any(|a| matches!(a, Action::CreateDataVolume(_))));
        halted.metadata.annotations =
            Some([(ann::IMMEDIATE_DATA_VOLUME_CREATION.to_owned(), "false".to_owned())].into());
        let mut o = observe(&halted, None);
        o.data_volumes = dvs;
        assert!(!plan(&o).actions.iter().any(|a| matches!(a, Action::CreateDataVolume(_))));
    }

    fn with_condition(
        mut v: VirtualMachineInstance,
        t: VmiType,
        s: ConditionStatus,
        reason: &str,
    ) -> VirtualMachineInstance {
        let st = v.status.get_or_insert_default();
        st.conditions.get_or_insert_default().push(VirtualMachineInstanceCondition::new(t, s, reason, "m"));
        v
    }

    #[test]
    fn printable_status_precedence() {
        use PrintableStatus as P;
        let always = vm(Some(RunStrategy::Always), None);
        let mut deleting_vm = always.clone();
        deleting_vm.metadata.deletion_timestamp = Some(now());
        let mut deleting_vmi = vmi("u1", Phase::Running, true);
        deleting_vmi.metadata.deletion_timestamp = Some(now());
        let paused =
            with_condition(vmi("u1", Phase::Running, true), VmiType::Paused, ConditionStatus::True, "PausedByUser");
        let pvc_missing = with_condition(
            vmi("u1", Phase::Pending, false),
            VmiType::Synchronized,
            ConditionStatus::False,
            reason::FAILED_PVC_NOT_FOUND,
        );
        let unschedulable = with_condition(
            vmi("u1", Phase::Scheduling, false),
            VmiType::PodScheduled,
            ConditionStatus::False,
            reason::UNSCHEDULABLE,
        );
        let pull = with_condition(
            vmi("u1", Phase::Scheduling, false),
            VmiType::Synchronized,
            ConditionStatus::False,
            reason::ERR_IMAGE_PULL,
        );
        let backoff = with_condition(
            vmi("u1", Phase::Scheduling, false),
            VmiType::Synchronized,
            ConditionStatus::False,
            reason::IMAGE_PULL_BACK_OFF,
        );
        let mut migrating = vmi("u1", Phase::Running, true);
        migrating.status.get_or_insert_default().migration_state =
            Some(crds::kubevirt::vmi::VirtualMachineInstanceMigrationState {
                start_timestamp: Some(now()),
                ..Default::default()
            });
        let halted = vm(Some(RunStrategy::Halted), None);
        let manual = vm(Some(RunStrategy::Manual), None);
        let cases: Vec<(&str, &VirtualMachine, Option<VirtualMachineInstance>, P)> = vec![
            ("VM deleted", &deleting_vm, Some(vmi("u1", Phase::Running, true)), P::Terminating),
            ("VMI deleted", &always, Some(deleting_vmi), P::Stopping),
            ("Halted with a running VMI", &halted, Some(vmi("u1", Phase::Running, true)), P::Stopping),
            ("migrating", &always, Some(migrating), P::Migrating),
            ("paused", &always, Some(paused), P::Paused),
            ("running", &always, Some(vmi("u1", Phase::Running, true)), P::Running),
            ("PVC missing", &always, Some(pvc_missing), P::ErrorPvcNotFound),
            ("unschedulable", &always, Some(unschedulable), P::ErrorUnschedulable),
            ("image pull", &always, Some(pull), P::ErrImagePull),
            ("image pull back-off", &always, Some(backoff), P::ImagePullBackOff),
            ("scheduled", &always, Some(vmi("u1", Phase::Scheduled, false)), P::Starting),
            ("Halted, no VMI", &halted, None, P::Stopped),
            ("Manual, finished", &manual, Some(vmi("u1", Phase::Succeeded, true)), P::Stopped),
        ];
        for (what, vm, vmi, want) in cases {
            let s = status_of_or_old(&plan(&observe(vm, vmi.as_ref())), vm);
            assert_eq!(s.printable_status, Some(want), "{what}");
        }
    }

    #[test]
    fn ready_and_vmi_conditions_are_mirrored() {
        let always = vm(Some(RunStrategy::Always), None);
        let s = status_of(&plan(&observe(&always, None)));
        let ready = s.condition(&VmType::Ready).cloned().unwrap_or_default();
        assert_eq!(
            (ready.status, ready.reason.as_deref(), ready.message.as_deref()),
            (ConditionStatus::False, Some(REASON_VMI_NOT_EXISTS), Some(MESSAGE_VMI_NOT_EXISTS))
        );
        assert_eq!((s.created, s.ready), (None, None));
        let v = with_condition(vmi("u1", Phase::Running, true), VmiType::Ready, ConditionStatus::True, "");
        let v = with_condition(v, VmiType::LiveMigratable, ConditionStatus::False, "DisksNotLiveMigratable");
        let s = status_of(&plan(&observe(&always, Some(&v))));
        assert_eq!((s.created, s.ready), (Some(true), Some(true)));
        assert_eq!(s.condition(&VmType::Ready).map(|c| c.status.clone()), Some(ConditionStatus::True));
        let lm = s.condition(&VmType::from("LiveMigratable")).cloned().unwrap_or_default();
        assert_eq!((lm.status, lm.reason.as_deref()), (ConditionStatus::False, Some("DisksNotLiveMigratable")));
        let missing = vmi("u1", Phase::Scheduling, false);
        let s = status_of(&plan(&observe(&always, Some(&missing))));
        assert_eq!(
            s.condition(&VmType::Ready).and_then(|c| c.reason.clone()).as_deref(),
            Some(REASON_VMI_CONDITION_MISSING)
        );
        assert!(s.condition(&VmType::from("LiveMigratable")).is_none(), "gone from the VMI, gone from the VM");
    }

    #[test]
    fn template_changes_require_a_restart_and_other_changes_move_the_generation() {
        let mut vm2 = vm(Some(RunStrategy::Always), None);
        vm2.metadata.generation = Some(2);
        let running = vmi("u1", Phase::Running, true);
        // Only the run strategy changed: the VMI's generation catches up, no restart.
        let mut o = observe(&vm2, Some(&running));
        o.started_template = Some(serde_json::to_value(&vm2.spec.template).unwrap_or_default());
        let p = plan(&o);
        assert!(p.actions.iter().any(|a| matches!(a, Action::SetVmiGeneration(2))));
        assert!(status_of(&p).condition(&VmType::RestartRequired).is_none());
        // The template changed: RestartRequired.
        let mut o = observe(&vm2, Some(&running));
        o.started_template = Some(serde_json::json!({"spec": {"domain": {"devices": {}}}}));
        let s = status_of(&plan(&o));
        let c = s.condition(&VmType::RestartRequired).cloned().unwrap_or_default();
        assert_eq!((c.status, c.message.as_deref()), (ConditionStatus::True, Some(MESSAGE_RESTART_REQUIRED)));
        assert_eq!((s.desired_generation, s.observed_generation), (Some(2), Some(1)));
    }

    #[test]
    fn deletion_deletes_the_vmi_then_drops_the_finalizer() {
        let mut v = vm(Some(RunStrategy::Always), None);
        v.metadata.deletion_timestamp = Some(now());
        let running = vmi("u1", Phase::Running, true);
        let p = plan(&observe(&v, Some(&running)));
        assert_eq!(effect(&p), (false, true, false));
        assert!(!p.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer)));
        let p = plan(&observe(&v, None));
        assert!(p.actions.iter().any(|a| matches!(a, Action::RemoveFinalizer)));
        assert_eq!(effect(&p), (false, false, false), "a deleted VM never starts");
        // A fresh VM gets the finalizer.
        let mut fresh = vm(Some(RunStrategy::Halted), None);
        fresh.metadata.finalizers = None;
        assert!(plan(&observe(&fresh, None)).actions.iter().any(|a| matches!(a, Action::AddFinalizer)));
    }
}
