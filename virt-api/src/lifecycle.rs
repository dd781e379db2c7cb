//! `start`, `stop` and `restart` of a VirtualMachine as upstream's virt-api answers them (contract §1.3), pure:
//! the request's options, the VM and its VMI in → the JSON patches to send, or the refusal with upstream's status
//! code and text. [`crate::subresources`] reads the objects and sends the patches.
//!
//! ```text
//!            Halted              Manual / RerunOnFailure          Always / Once
//! start      runStrategy→Always  + Start (after Stop{old} when    409 "… does not support manual start requests"
//!            (paused: a request) the old VMI is final)
//! stop       409 unless a shorter + Stop{uid} (replacing any)     runStrategy→Halted
//!            grace period: Stop
//! restart    409                 + Stop{uid}, Start               Always: + Stop{uid}, Start; Once: 409
//! ```
//!
//! The legacy `running: true|false` is patched instead of `runStrategy` when the VM uses it. Every patch of a field
//! tests its current value first, so a concurrent change makes the API server refuse it (409).

use crds::kubevirt::vm::{StateChangeRequestAction, VirtualMachineStateChangeRequest};
use crds::kubevirt::{RunStrategy, VirtualMachine, VirtualMachineInstance};
use serde::Deserialize;
use serde_json::{Value, json};

/// The three lifecycle subresources of a VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// `virtualmachines/start`.
    Start,
    /// `virtualmachines/stop`.
    Stop,
    /// `virtualmachines/restart`.
    Restart,
}

impl Lifecycle {
    /// The subresource's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Start => "start",
            Lifecycle::Stop => "stop",
            Lifecycle::Restart => "restart",
        }
    }

    /// The subresource named `s`.
    pub fn parse(s: &str) -> Option<Lifecycle> {
        [Lifecycle::Start, Lifecycle::Stop, Lifecycle::Restart].into_iter().find(|l| l.as_str() == s)
    }
}

/// A request's body: upstream's `StartOptions{paused, dryRun}`, `StopOptions{gracePeriod, dryRun}`,
/// `RestartOptions{gracePeriodSeconds, dryRun}` in one (each handler reads its own fields).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Options {
    /// Start paused.
    #[serde(default)]
    pub paused: bool,
    /// Stop: the VMI's new termination grace period.
    #[serde(default)]
    pub grace_period: Option<i64>,
    /// Restart: only 0 (force).
    #[serde(default)]
    pub grace_period_seconds: Option<i64>,
    /// `["All"]`: validate and answer, change nothing.
    #[serde(default)]
    pub dry_run: Vec<String>,
}

/// A refused request: its HTTP status, `metav1.Status` reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status code.
    pub code: u16,
    /// `Conflict`, `BadRequest`, `NotFound`, `Forbidden`, `ServiceUnavailable`, `InternalError`.
    pub reason: &'static str,
    /// The text users see.
    pub message: String,
}

impl Refusal {
    /// 400 with `message`.
    pub fn bad_request(message: impl Into<String>) -> Refusal {
        Refusal { code: 400, reason: "BadRequest", message: message.into() }
    }

    /// 409 as `errors.NewConflict(virtualmachine.kubevirt.io, name, err)` prints it.
    pub fn conflict(vm: &str, why: &str) -> Refusal {
        Refusal::conflict_on("virtualmachine", vm, why)
    }

    /// 409 as `errors.NewConflict(<resource>.kubevirt.io, name, err)` prints it.
    pub fn conflict_on(resource: &str, name: &str, why: &str) -> Refusal {
        Refusal {
            code: 409,
            reason: "Conflict",
            message: format!("Operation cannot be fulfilled on {resource}.kubevirt.io \"{name}\": {why}"),
        }
    }

    /// 403 as `errors.NewForbidden(<resource>.kubevirt.io, name, err)` prints it.
    pub fn forbidden_on(resource: &str, name: &str, why: &str) -> Refusal {
        Refusal {
            code: 403,
            reason: "Forbidden",
            message: format!("{resource}.kubevirt.io \"{name}\" is forbidden: {why}"),
        }
    }

    /// 404 for the VM `name`, as `errors.NewNotFound(virtualmachine.kubevirt.io, name)` prints it.
    pub fn vm_not_found(name: &str) -> Refusal {
        Refusal::not_found_on("virtualmachine", name)
    }

    /// 404 as `errors.NewNotFound(<resource>.kubevirt.io, name)` prints it.
    pub fn not_found_on(resource: &str, name: &str) -> Refusal {
        Refusal { code: 404, reason: "NotFound", message: format!("{resource}.kubevirt.io \"{name}\" not found") }
    }

    /// 500 as `errors.NewInternalError(err)` prints it.
    pub fn internal(why: impl std::fmt::Display) -> Refusal {
        Refusal { code: 500, reason: "InternalError", message: format!("Internal error occurred: {why}") }
    }
}

/// One JSON patch to send, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// Of the VMI (its termination grace period), before the others.
    Vmi(Value),
    /// Of the VM's spec.
    Vm(Value),
    /// Of the VM's status subresource (`stateChangeRequests`).
    Status(Value),
}

/// What a request does.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The patches, in order.
    pub patches: Vec<Patch>,
    /// Sent with `dryRun=All`.
    pub dry_run: bool,
}

const NOT_RUNNING: &str = "VM is not running";

/// The VM's run strategy: `runStrategy`, else the legacy `running` (true → Always), else Halted.
fn strategy(vm: &VirtualMachine) -> RunStrategy {
    match (&vm.spec.run_strategy, vm.spec.running) {
        (Some(s), _) => s.clone(),
        (None, Some(true)) => RunStrategy::Always,
        (None, _) => RunStrategy::Halted,
    }
}

/// A patch of the strategy to `to` (Always or Halted), of whichever field the VM uses, testing its value first.
fn strategy_patch(vm: &VirtualMachine, to: RunStrategy) -> Patch {
    let ops = match (&vm.spec.run_strategy, vm.spec.running) {
        (None, Some(running)) => json!([
            {"op": "test", "path": "/spec/running", "value": running},
            {"op": "replace", "path": "/spec/running", "value": to == RunStrategy::Always},
        ]),
        (Some(s), _) => json!([
            {"op": "test", "path": "/spec/runStrategy", "value": s.as_str()},
            {"op": "replace", "path": "/spec/runStrategy", "value": to.as_str()},
        ]),
        (None, None) => json!([{"op": "add", "path": "/spec/runStrategy", "value": to.as_str()}]),
    };
    Patch::Vm(ops)
}

fn start_request(paused: bool) -> VirtualMachineStateChangeRequest {
    VirtualMachineStateChangeRequest {
        action: StateChangeRequestAction::Start,
        data: paused.then(|| [("paused".to_owned(), "true".to_owned())].into()),
        ..Default::default()
    }
}

fn stop_request(vmi: &VirtualMachineInstance) -> VirtualMachineStateChangeRequest {
    VirtualMachineStateChangeRequest {
        action: StateChangeRequestAction::Stop,
        uid: vmi.metadata.uid.clone(),
        ..Default::default()
    }
}

/// The status patch appending `requests` (upstream's `getChangeRequestJson`): the whole status when it is empty;
/// else test the current requests, then add them, or replace them when the new one is a lone Stop; pending
/// requests and a new start/restart → 409.
fn status_patch(vm: &VirtualMachine, requests: Vec<VirtualMachineStateChangeRequest>) -> Result<Patch, Refusal> {
    let name = vm.metadata.name.clone().unwrap_or_default();
    let new = serde_json::to_value(&requests).unwrap_or_default();
    let status = vm.status.as_ref().map(serde_json::to_value).and_then(Result::ok);
    if status.as_ref().is_none_or(|s| s.as_object().is_none_or(serde_json::Map::is_empty)) {
        return Ok(Patch::Status(json!([{"op": "add", "path": "/status", "value": {"stateChangeRequests": new}}])));
    }
    let current = vm.status.as_ref().and_then(|s| s.state_change_requests.clone()).unwrap_or_default();
    if current.is_empty() {
        return Ok(Patch::Status(json!([{"op": "add", "path": "/status/stateChangeRequests", "value": new}])));
    }
    let lone_stop = requests.len() == 1 && requests[0].action == StateChangeRequestAction::Stop;
    if !lone_stop {
        return Err(Refusal::conflict(&name, "unable to complete request: stop/start already underway"));
    }
    let old = serde_json::to_value(&current).unwrap_or_default();
    Ok(Patch::Status(json!([
        {"op": "test", "path": "/status/stateChangeRequests", "value": old},
        {"op": "replace", "path": "/status/stateChangeRequests", "value": new},
    ])))
}

fn grace_patch(seconds: i64) -> Patch {
    Patch::Vmi(json!([{"op": "replace", "path": "/spec/terminationGracePeriodSeconds", "value": seconds}]))
}

/// Whether `vmi` counts as running for start: it exists, is not final, and has a phase.
fn running(vmi: Option<&VirtualMachineInstance>) -> bool {
    use crds::kubevirt::vmi::VirtualMachineInstancePhase as P;
    vmi.is_some_and(|v| !v.is_final() && !matches!(v.phase(), P::Unset | P::Unknown))
}

/// Plans `action` with `options` on `vm` and its VMI (`None`: there is none).
pub fn plan(
    action: Lifecycle,
    options: &Options,
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
) -> Result<Plan, Refusal> {
    use crds::kubevirt::vmi::VirtualMachineInstancePhase as P;
    let name = vm.metadata.name.clone().unwrap_or_default();
    let dry_run = match options.dry_run.as_slice() {
        [] => false,
        [all] if all == "All" => true,
        other => {
            return Err(Refusal::bad_request(format!("invalid dryRun option {other:?}: only \"All\" is supported")));
        }
    };
    let strategy = strategy(vm);
    let live = vmi.filter(|v| !v.is_final());
    let mut patches = Vec::new();
    match action {
        Lifecycle::Start => {
            if running(vmi) {
                return Err(Refusal::conflict(&name, "VM is already running"));
            }
            match strategy {
                RunStrategy::Halted if options.paused => {
                    patches.push(status_patch(vm, vec![start_request(true)])?);
                }
                RunStrategy::Halted => patches.push(strategy_patch(vm, RunStrategy::Always)),
                RunStrategy::Manual | RunStrategy::RerunOnFailure => {
                    let failed = vmi.is_some_and(|v| v.phase() == P::Failed);
                    if strategy == RunStrategy::RerunOnFailure && failed {
                        return Err(Refusal::conflict(
                            &name,
                            "RerunOnFailure does not support starting VM from failed state",
                        ));
                    }
                    let mut requests = Vec::new();
                    if let Some(old) = vmi.filter(|v| v.is_final()) {
                        requests.push(stop_request(old));
                    }
                    requests.push(start_request(options.paused));
                    patches.push(status_patch(vm, requests)?);
                }
                other => {
                    let why = format!("{} does not support manual start requests", other.as_str());
                    return Err(Refusal::conflict(&name, &why));
                }
            }
        }
        Lifecycle::Stop => {
            let grace = options.grace_period;
            if let Some(g) = grace
                && g < 0
            {
                return Err(Refusal::bad_request("gracePeriod must not be negative"));
            }
            match strategy {
                RunStrategy::Always | RunStrategy::Once => {
                    if let (Some(g), Some(_)) = (grace, live) {
                        patches.push(grace_patch(g));
                    }
                    patches.push(strategy_patch(vm, RunStrategy::Halted));
                }
                RunStrategy::Halted | RunStrategy::Manual | RunStrategy::RerunOnFailure => {
                    let Some(v) = live else { return Err(Refusal::conflict(&name, NOT_RUNNING)) };
                    if strategy == RunStrategy::Halted {
                        let current = v.spec.termination_grace_period_seconds;
                        if grace.is_none_or(|g| current.is_some_and(|c| g >= c)) {
                            let why = "Halted only supports manual stop requests with a shorter graceperiod";
                            return Err(Refusal::conflict(&name, why));
                        }
                    }
                    if let Some(g) = grace {
                        patches.push(grace_patch(g));
                    }
                    patches.push(status_patch(vm, vec![stop_request(v)])?);
                }
                other => {
                    let why = format!("{} does not support manual stop requests", other.as_str());
                    return Err(Refusal::conflict(&name, &why));
                }
            }
        }
        Lifecycle::Restart => {
            if let Some(g) = options.grace_period_seconds
                && g != 0
            {
                return Err(Refusal::bad_request("For force restart, only gracePeriod=0 is supported for now"));
            }
            if matches!(strategy, RunStrategy::Halted | RunStrategy::Once | RunStrategy::WaitAsReceiver) {
                let why = format!("{} does not support manual restart requests", strategy.as_str());
                return Err(Refusal::conflict(&name, &why));
            }
            let Some(v) = vmi else { return Err(Refusal::conflict(&name, NOT_RUNNING)) };
            if options.grace_period_seconds == Some(0) && live.is_some() {
                patches.push(grace_patch(1));
            }
            patches.push(status_patch(vm, vec![stop_request(v), start_request(false)])?);
        }
    }
    Ok(Plan { patches, dry_run })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::kubevirt::VirtualMachineStatus;
    use crds::kubevirt::vmi::{VirtualMachineInstancePhase as P, VirtualMachineInstanceStatus};

    fn vm(strategy: Option<&str>, running: Option<bool>) -> VirtualMachine {
        let mut vm: VirtualMachine = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "ns", "uid": "vm-uid"},
            "spec": {"template": {"spec": {"domain": {"devices": {}}}}},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        vm.spec.run_strategy = strategy.map(RunStrategy::from);
        vm.spec.running = running;
        vm.status = Some(VirtualMachineStatus { created: Some(true), ..Default::default() });
        vm
    }

    fn vmi(phase: P) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}}, "terminationGracePeriodSeconds": 30},
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        v.status = Some(VirtualMachineInstanceStatus { phase: Some(phase), ..Default::default() });
        v
    }

    fn run(action: Lifecycle, o: &Options, vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>) -> Plan {
        plan(action, o, vm, vmi).unwrap_or_else(|r| panic!("{action:?} refused: {r:?}"))
    }

    fn refused(action: Lifecycle, o: &Options, vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>) -> String {
        match plan(action, o, vm, vmi) {
            Ok(p) => panic!("{action:?} planned {p:?}"),
            Err(r) => format!("{} {}", r.code, r.message),
        }
    }

    fn status_ops(p: &Plan) -> Value {
        p.patches
            .iter()
            .find_map(|x| match x {
                Patch::Status(v) => Some(v.clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no status patch in {p:?}"))
    }

    #[test]
    fn start_follows_the_run_strategy() {
        let o = Options::default();
        let p = run(Lifecycle::Start, &o, &vm(Some("Halted"), None), None);
        assert_eq!(
            p.patches,
            [Patch::Vm(json!([
                {"op": "test", "path": "/spec/runStrategy", "value": "Halted"},
                {"op": "replace", "path": "/spec/runStrategy", "value": "Always"},
            ]))]
        );
        // Legacy running: false → true.
        let p = run(Lifecycle::Start, &o, &vm(None, Some(false)), None);
        assert_eq!(
            p.patches[0],
            Patch::Vm(json!([
                {"op": "test", "path": "/spec/running", "value": false},
                {"op": "replace", "path": "/spec/running", "value": true},
            ]))
        );
        // Paused: a Start request with data, the strategy left to the controller.
        let paused = Options { paused: true, ..Default::default() };
        let ops = status_ops(&run(Lifecycle::Start, &paused, &vm(Some("Halted"), None), None));
        assert_eq!(ops[0]["value"], json!([{"action": "Start", "data": {"paused": "true"}}]));
        // Manual after a finished VMI: Stop the old one, then Start; the strategy is kept.
        let done = vmi(P::Succeeded);
        let ops = status_ops(&run(Lifecycle::Start, &o, &vm(Some("Manual"), None), Some(&done)));
        assert_eq!(ops[0]["value"], json!([{"action": "Stop", "uid": "vmi-uid"}, {"action": "Start"}]));
        // Refusals, with upstream's texts.
        let live = vmi(P::Running);
        let msg = "409 Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": ";
        assert_eq!(
            refused(Lifecycle::Start, &o, &vm(Some("Manual"), None), Some(&live)),
            format!("{msg}VM is already running")
        );
        assert_eq!(
            refused(Lifecycle::Start, &o, &vm(Some("Always"), None), None),
            format!("{msg}Always does not support manual start requests")
        );
        assert_eq!(
            refused(Lifecycle::Start, &o, &vm(Some("RerunOnFailure"), None), Some(&vmi(P::Failed))),
            format!("{msg}RerunOnFailure does not support starting VM from failed state")
        );
        // A phase-less VMI does not count as running.
        assert!(plan(Lifecycle::Start, &o, &vm(Some("Halted"), None), Some(&vmi(P::Unset))).is_ok());
    }

    #[test]
    fn stop_halts_always_and_requests_a_stop_for_manual() {
        let o = Options::default();
        let live = vmi(P::Running);
        let p = run(Lifecycle::Stop, &o, &vm(Some("Always"), None), Some(&live));
        assert_eq!(
            p.patches[0],
            Patch::Vm(json!([
                {"op": "test", "path": "/spec/runStrategy", "value": "Always"},
                {"op": "replace", "path": "/spec/runStrategy", "value": "Halted"},
            ]))
        );
        let grace = Options { grace_period: Some(0), ..Default::default() };
        let p = run(Lifecycle::Stop, &grace, &vm(Some("RerunOnFailure"), None), Some(&live));
        assert_eq!(p.patches[0], grace_patch(0), "the grace period first");
        assert_eq!(status_ops(&p)[0]["value"], json!([{"action": "Stop", "uid": "vmi-uid"}]));
        let msg = "409 Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": ";
        assert_eq!(refused(Lifecycle::Stop, &o, &vm(Some("Manual"), None), None), format!("{msg}VM is not running"));
        assert_eq!(
            refused(Lifecycle::Stop, &o, &vm(Some("Halted"), None), Some(&live)),
            format!("{msg}Halted only supports manual stop requests with a shorter graceperiod")
        );
        // A force stop of a Halted VM whose VMI still shuts down: shorter grace period → a Stop.
        assert!(plan(Lifecycle::Stop, &grace, &vm(Some("Halted"), None), Some(&live)).is_ok());
        // A lone Stop replaces pending requests.
        let mut pending = vm(Some("Manual"), None);
        pending.status.get_or_insert_default().state_change_requests = Some(vec![start_request(false)]);
        let ops = status_ops(&run(Lifecycle::Stop, &o, &pending, Some(&live)));
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[1]["op"], "replace");
    }

    #[test]
    fn restart_stops_and_starts_once_more() {
        let o = Options::default();
        let live = vmi(P::Running);
        for strategy in ["Always", "Manual", "RerunOnFailure"] {
            let p = run(Lifecycle::Restart, &o, &vm(Some(strategy), None), Some(&live));
            assert_eq!(status_ops(&p)[0]["value"], json!([{"action": "Stop", "uid": "vmi-uid"}, {"action": "Start"}]));
        }
        let force = Options { grace_period_seconds: Some(0), ..Default::default() };
        let p = run(Lifecycle::Restart, &force, &vm(Some("Always"), None), Some(&live));
        assert_eq!(p.patches[0], grace_patch(1));
        let msg = "409 Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": ";
        assert_eq!(
            refused(Lifecycle::Restart, &o, &vm(Some("Halted"), None), None),
            format!("{msg}Halted does not support manual restart requests")
        );
        assert_eq!(refused(Lifecycle::Restart, &o, &vm(Some("Always"), None), None), format!("{msg}VM is not running"));
        let negative = Options { grace_period_seconds: Some(-1), ..Default::default() };
        assert_eq!(
            refused(Lifecycle::Restart, &negative, &vm(Some("Always"), None), Some(&live)),
            "400 For force restart, only gracePeriod=0 is supported for now"
        );
        // Pending requests: another start/restart waits.
        let mut pending = vm(Some("Always"), None);
        pending.status.get_or_insert_default().state_change_requests = Some(vec![start_request(false)]);
        assert_eq!(
            refused(Lifecycle::Restart, &o, &pending, Some(&live)),
            format!("{msg}unable to complete request: stop/start already underway")
        );
    }

    #[test]
    fn dry_run_and_an_empty_status() {
        let dry = Options { dry_run: vec!["All".into()], ..Default::default() };
        assert!(run(Lifecycle::Start, &dry, &vm(Some("Halted"), None), None).dry_run);
        let bad = Options { dry_run: vec!["Some".into()], ..Default::default() };
        assert!(refused(Lifecycle::Start, &bad, &vm(Some("Halted"), None), None).starts_with("400 invalid dryRun"));
        let mut bare = vm(Some("Manual"), None);
        bare.status = None;
        let ops = status_ops(&run(Lifecycle::Start, &Options::default(), &bare, None));
        assert_eq!(
            ops,
            json!([{"op": "add", "path": "/status", "value": {"stateChangeRequests": [{"action": "Start"}]}}])
        );
    }
}
