//! The pure decisions of both reconcilers: how far an installation may be applied ([`progress`]: one stage at a
//! time, each waits for the rollout of the one before), whether a workload is up to date ([`rollout`]), and the
//! status upstream's operators report for it ([`kubevirt_status`], [`cdi_status`]: phases, conditions with their
//! exact reasons and messages, versions).

use crds::cdi::CDIStatus;
use crds::kubevirt::config::KubeVirtStatus;
use crds::kubevirt::vmi::ConditionStatus;
use crds::kubevirt::wire::{Condition, remove_condition, set_condition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value;

use crate::manifests::INSTALL_HASH;

/// Whether one workload runs its desired form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    /// Up to date and available.
    Ready,
    /// Not yet, and why (for logs and the status).
    Waiting(String),
}

/// Compares a desired workload (rendered) with the live one: missing, an older form ([`INSTALL_HASH`]), a rollout
/// in progress, or ready.
pub fn rollout(desired: &Value, live: Option<&Value>) -> Rollout {
    let kind = desired["kind"].as_str().unwrap_or("object");
    let name = desired["metadata"]["name"].as_str().unwrap_or("");
    let Some(live) = live else { return Rollout::Waiting(format!("{kind} {name} does not exist yet")) };
    if live["metadata"]["annotations"][INSTALL_HASH] != desired["metadata"]["annotations"][INSTALL_HASH] {
        return Rollout::Waiting(format!("{kind} {name} is not updated yet"));
    }
    let st = &live["status"];
    let n = |v: &Value| v.as_i64().unwrap_or(0);
    if live["metadata"]["generation"] != st["observedGeneration"] {
        return Rollout::Waiting(format!("{kind} {name}: the update is not observed yet"));
    }
    // As `kubectl rollout status`: every replica updated, no old replica left (a surge pod of the old form still
    // counts as available, so "available >= want" alone would let the next stage start beside it), all available.
    let (want, updated, total, available) = match kind {
        "DaemonSet" => {
            // One pod per node, replaced in place (no surge): updated and available cover it.
            let desired = n(&st["desiredNumberScheduled"]);
            (desired, n(&st["updatedNumberScheduled"]), desired, n(&st["numberAvailable"]))
        }
        _ => (
            live["spec"]["replicas"].as_i64().unwrap_or(1),
            n(&st["updatedReplicas"]),
            n(&st["replicas"]),
            n(&st["availableReplicas"]).min(n(&st["replicas"]) - n(&st["unavailableReplicas"])),
        ),
    };
    if updated >= want && total <= updated && available >= want && (kind != "DaemonSet" || want > 0) {
        Rollout::Ready
    } else if total > updated && updated >= want {
        Rollout::Waiting(format!("{kind} {name}: {} old replicas are pending termination", total - updated))
    } else {
        Rollout::Waiting(format!("{kind} {name}: {updated} of {want} updated, {available} available"))
    }
}

/// How far to apply an installation this pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// Apply stages `0..=apply_through`.
    pub apply_through: usize,
    /// The first workload not yet rolled out (with its stage), if any.
    pub waiting: Option<(String, String)>,
}

impl Progress {
    /// Every workload of every stage runs its desired form.
    pub fn complete(&self) -> bool {
        self.waiting.is_none()
    }
}

/// `stages[i]` holds the name of stage `i` and the rollouts of its workloads. Every stage up to the first one
/// with a workload not yet rolled out is applied (re-applying an up-to-date stage changes nothing); the stages
/// after it wait, so that components are updated one after the other.
pub fn progress(stages: &[(&str, Vec<Rollout>)]) -> Progress {
    for (i, (name, rollouts)) in stages.iter().enumerate() {
        if let Some(Rollout::Waiting(why)) = rollouts.iter().find(|r| matches!(r, Rollout::Waiting(_))) {
            return Progress { apply_through: i, waiting: Some(((*name).to_owned(), why.clone())) };
        }
    }
    Progress { apply_through: stages.len().saturating_sub(1), waiting: None }
}

fn cond(t: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition<String> {
    Condition::new(t.to_owned(), status, reason, message)
}

/// Sets `Available`, `Progressing` and `Degraded` together.
fn triple(
    conditions: &mut Option<Vec<Condition<String>>>,
    [a, p, d]: [ConditionStatus; 3],
    reason: &str,
    message: &str,
    now: &Time,
) {
    set_condition(conditions, cond("Available", a, reason, message), now);
    set_condition(conditions, cond("Progressing", p, reason, message), now);
    set_condition(conditions, cond("Degraded", d, reason, message), now);
}

use ConditionStatus::{False as F, True as T};

/// Upstream's KubeVirt phases.
pub mod kv_phase {
    /// Installing or updating.
    pub const DEPLOYING: &str = "Deploying";
    /// Every component runs the target.
    pub const DEPLOYED: &str = "Deployed";
    /// The object is being deleted; the components are removed.
    pub const DELETING: &str = "Deleting";
    /// Everything installed is gone (the finalizer is removed next).
    pub const DELETED: &str = "Deleted";
}

/// What a KubeVirt reconcile pass found, for [`kubevirt_status`].
#[derive(Debug, Clone)]
pub struct KubevirtPass<'a> {
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The operator's version.
    pub operator_version: &'a str,
    /// Target version (image tag) and registry.
    pub target: (&'a str, &'a str),
    /// Target deployment identifier.
    pub deployment_id: &'a str,
    /// The rollout, or the error that stopped it.
    pub outcome: Result<&'a Progress, String>,
    /// Whether every stage has been applied (upstream's `Created`).
    pub all_applied: bool,
}

/// Whether `status` describes an update (a deployed installation moving to another deployment identifier).
pub fn kubevirt_updating(status: &KubeVirtStatus, deployment_id: &str) -> bool {
    status.observed_deployment_id.as_deref().is_some_and(|o| o != deployment_id)
}

/// The KubeVirt status after a pass, as upstream's virt-operator writes it (`syncInstallation`).
pub fn kubevirt_status(old: &KubeVirtStatus, pass: &KubevirtPass<'_>, now: &Time) -> KubeVirtStatus {
    let mut s = old.clone();
    let (version, registry) = pass.target;
    s.operator_version = Some(pass.operator_version.to_owned());
    s.target_kube_virt_version = Some(version.to_owned());
    s.target_kube_virt_registry = Some(registry.to_owned());
    s.target_deployment_id = Some(pass.deployment_id.to_owned());
    if s.phase.as_deref().is_none_or(str::is_empty) {
        s.phase = Some(kv_phase::DEPLOYING.into());
    }
    remove_condition(&mut s.conditions, &"Synchronized".to_owned());
    if kubevirt_updating(old, pass.deployment_id) {
        remove_condition(&mut s.conditions, &"Created".to_owned());
        let msg = format!(
            "Transitioning from previous version {} with registry {} to target version {version} using registry {registry}",
            old.observed_kube_virt_version.as_deref().unwrap_or(""),
            old.observed_kube_virt_registry.as_deref().unwrap_or(""),
        );
        triple(&mut s.conditions, [T, T, T], "UpdateInProgress", &msg, now);
    } else {
        let msg = format!("Deploying version {version} with registry {registry}");
        triple(&mut s.conditions, [F, T, F], "DeploymentInProgress", &msg, now);
    }
    match &pass.outcome {
        Err(e) => {
            let msg = format!("An error occurred during deployment: {e}");
            triple(&mut s.conditions, [F, F, T], "DeploymentFailed", &msg, now);
            set_condition(&mut s.conditions, cond("Synchronized", F, "DeploymentFailed", &msg), now);
        }
        Ok(progress) => {
            if pass.all_applied {
                set_condition(
                    &mut s.conditions,
                    cond("Created", T, "AllResourcesCreated", "All resources were created."),
                    now,
                );
            }
            if progress.complete() {
                s.observed_kube_virt_version = s.target_kube_virt_version.clone();
                s.observed_kube_virt_registry = s.target_kube_virt_registry.clone();
                s.observed_deployment_id = s.target_deployment_id.clone();
                s.phase = Some(kv_phase::DEPLOYED.into());
                triple(&mut s.conditions, [T, F, F], "AllComponentsReady", "All components are ready.", now);
                s.observed_generation = pass.generation;
            }
        }
    }
    s
}

/// The status of a KubeVirt object that is not the cluster's installation (upstream: only one per cluster).
pub fn kubevirt_not_active(old: &KubeVirtStatus, now: &Time) -> KubeVirtStatus {
    let mut s = old.clone();
    let c = cond("Synchronized", F, "ExistingDeployment", "There is an active KubeVirt deployment");
    set_condition(&mut s.conditions, c, now);
    s
}

/// The status while (`done` false) and after (`done` true) removing a KubeVirt installation.
pub fn kubevirt_deleting(old: &KubeVirtStatus, done: bool, error: Option<&str>, now: &Time) -> KubeVirtStatus {
    let mut s = old.clone();
    s.phase = Some(if done { kv_phase::DELETED } else { kv_phase::DELETING }.into());
    remove_condition(&mut s.conditions, &"Created".to_owned());
    remove_condition(&mut s.conditions, &"Synchronized".to_owned());
    triple(&mut s.conditions, [F, F, T], "DeletionInProgress", "Deletion was triggered", now);
    if let Some(e) = error {
        let msg = format!("An error occurred during deletion: {e}");
        set_condition(&mut s.conditions, cond("Synchronized", F, "DeletionFailed", &msg), now);
    }
    s
}

/// Upstream's CDI phases.
pub mod cdi_phase {
    /// First install in progress.
    pub const DEPLOYING: &str = "Deploying";
    /// Every component runs the target version.
    pub const DEPLOYED: &str = "Deployed";
    /// Moving a deployed installation to another version.
    pub const UPGRADING: &str = "Upgrading";
    /// Being removed.
    pub const DELETING: &str = "Deleting";
    /// Removed (the finalizer goes next).
    pub const DELETED: &str = "Deleted";
    /// Refused (a second CDI object) or failing.
    pub const ERROR: &str = "Error";
}

/// The CDI status after a pass (upstream's controller-lifecycle-operator-sdk: `MarkCrDeploying`,
/// `MarkCrUpgradeHealingDegraded`, `MarkCrHealthyMessage`, `MarkCrFailed`).
pub fn cdi_status(
    old: &CDIStatus,
    operator_version: &str,
    target: &str,
    outcome: Result<&Progress, String>,
    now: &Time,
) -> CDIStatus {
    let mut s = old.clone();
    s.operator_version = Some(operator_version.to_owned());
    s.target_version = Some(target.to_owned());
    let upgrading = old.observed_version.as_deref().is_some_and(|o| o != target);
    match outcome {
        Err(e) => {
            s.phase = Some(cdi_phase::ERROR.into());
            triple(&mut s.conditions, [F, F, T], "ConfigError", &e, now);
        }
        Ok(p) if p.complete() => {
            s.phase = Some(cdi_phase::DEPLOYED.into());
            s.observed_version = Some(target.to_owned());
            set_condition(&mut s.conditions, cond("Available", T, "DeployCompleted", "Deployment Completed"), now);
            set_condition(&mut s.conditions, cond("Progressing", F, "", ""), now);
            set_condition(&mut s.conditions, cond("Degraded", F, "", ""), now);
        }
        Ok(_) if upgrading => {
            s.phase = Some(cdi_phase::UPGRADING.into());
            let msg = format!("Started upgrade to version {target}");
            triple(&mut s.conditions, [T, T, T], "UpgradeStarted", &msg, now);
        }
        Ok(p) => {
            if s.phase.as_deref() == Some(cdi_phase::DEPLOYED) {
                // A deployed installation whose component went unready: degraded until it recovers.
                let why = p.waiting.as_ref().map(|(_, w)| w.as_str()).unwrap_or("");
                set_condition(&mut s.conditions, cond("Degraded", T, "", why), now);
            } else {
                s.phase = Some(cdi_phase::DEPLOYING.into());
                set_condition(&mut s.conditions, cond("Available", F, "", ""), now);
                set_condition(&mut s.conditions, cond("Progressing", T, "DeployStarted", "Started Deployment"), now);
                set_condition(&mut s.conditions, cond("Degraded", F, "", ""), now);
            }
        }
    }
    s
}

/// Upstream's message for a second CDI object.
pub const CDI_UNWANTED: &str = "Reconciling to error state, unwanted CDI object";

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
    }

    fn get<'a>(c: &'a Option<Vec<Condition<String>>>, t: &str) -> (&'a ConditionStatus, &'a str, &'a str) {
        let c = c.iter().flatten().find(|c| c.type_ == t).unwrap_or_else(|| panic!("no condition {t}"));
        (&c.status, c.reason.as_deref().unwrap_or(""), c.message.as_deref().unwrap_or(""))
    }

    fn deployment(hash: &str, generation: i64, observed: i64, replicas: i64, updated: i64, available: i64) -> Value {
        json!({"kind": "Deployment", "metadata": {"name": "virt-api", "generation": generation,
               "annotations": {INSTALL_HASH: hash}},
               "spec": {"replicas": replicas},
               "status": {"observedGeneration": observed, "replicas": replicas, "updatedReplicas": updated,
                          "availableReplicas": available}})
    }

    #[test]
    fn a_workload_is_ready_only_in_its_desired_form_and_fully_rolled_out() {
        let want = deployment("h2", 1, 1, 2, 2, 2);
        assert!(matches!(rollout(&want, None), Rollout::Waiting(w) if w.contains("does not exist")));
        assert!(
            matches!(rollout(&want, Some(&deployment("h1", 3, 3, 2, 2, 2))), Rollout::Waiting(w) if w.contains("not updated"))
        );
        assert!(
            matches!(rollout(&want, Some(&deployment("h2", 4, 3, 2, 2, 2))), Rollout::Waiting(w) if w.contains("not observed"))
        );
        assert!(
            matches!(rollout(&want, Some(&deployment("h2", 4, 4, 2, 1, 2))), Rollout::Waiting(w) if w.contains("1 of 2 updated"))
        );
        assert!(matches!(rollout(&want, Some(&deployment("h2", 4, 4, 2, 2, 1))), Rollout::Waiting(_)));
        assert_eq!(rollout(&want, Some(&deployment("h2", 4, 4, 2, 2, 2))), Rollout::Ready);
        // A surge: both new replicas are up, an old one is still there (and available).
        let mut surge = deployment("h2", 4, 4, 2, 2, 3);
        surge["status"]["replicas"] = json!(3);
        assert!(
            matches!(rollout(&want, Some(&surge)), Rollout::Waiting(w) if w.contains("1 old replicas are pending"))
        );
        let ds = |desired: i64, updated: i64, available: i64| {
            json!({"kind": "DaemonSet", "metadata": {"name": "virt-handler", "generation": 2,
                   "annotations": {INSTALL_HASH: "h"}},
                   "status": {"observedGeneration": 2, "desiredNumberScheduled": desired,
                              "updatedNumberScheduled": updated, "numberAvailable": available}})
        };
        let want = ds(0, 0, 0);
        assert_eq!(rollout(&want, Some(&ds(2, 2, 2))), Rollout::Ready);
        assert!(matches!(rollout(&want, Some(&ds(2, 1, 2))), Rollout::Waiting(_)));
        assert!(matches!(rollout(&want, Some(&ds(0, 0, 0))), Rollout::Waiting(_)), "no node runs it");
    }

    #[test]
    fn stages_are_applied_one_rollout_at_a_time() {
        let w = || Rollout::Waiting("x".into());
        type Row<'a> = (Vec<(&'a str, Vec<Rollout>)>, usize, Option<&'a str>);
        let table: Vec<Row<'_>> = vec![
            (vec![("base", vec![]), ("a", vec![w()]), ("b", vec![w()])], 1, Some("a")),
            (vec![("base", vec![]), ("a", vec![Rollout::Ready]), ("b", vec![Rollout::Ready, w()])], 2, Some("b")),
            (vec![("base", vec![]), ("a", vec![Rollout::Ready]), ("b", vec![Rollout::Ready])], 2, None),
            (vec![], 0, None),
        ];
        for (stages, through, waiting) in table {
            let p = progress(&stages);
            assert_eq!(p.apply_through, through, "{stages:?}");
            assert_eq!(p.waiting.as_ref().map(|(s, _)| s.as_str()), waiting);
        }
    }

    fn pass<'a>(p: &'a Result<Progress, String>, id: &'a str, tag: &'a str, all_applied: bool) -> KubevirtPass<'a> {
        KubevirtPass {
            generation: Some(3),
            operator_version: "0.1.0",
            target: (tag, "reg"),
            deployment_id: id,
            outcome: p.as_ref().map_err(Clone::clone),
            all_applied,
        }
    }

    #[test]
    fn kubevirt_status_follows_upstreams_install_and_update() {
        let waiting = Ok(Progress { apply_through: 1, waiting: Some(("virt-api".into(), "x".into())) });
        let done = Ok(Progress { apply_through: 3, waiting: None });
        let s = kubevirt_status(&KubeVirtStatus::default(), &pass(&waiting, "id1", "v1", false), &now());
        assert_eq!(s.phase.as_deref(), Some("Deploying"));
        assert_eq!(
            get(&s.conditions, "Available"),
            (&F, "DeploymentInProgress", "Deploying version v1 with registry reg")
        );
        assert_eq!(get(&s.conditions, "Progressing").0, &T);
        assert_eq!(s.observed_kube_virt_version, None);
        assert_eq!(s.target_deployment_id.as_deref(), Some("id1"));
        let s = kubevirt_status(&s, &pass(&done, "id1", "v1", true), &now());
        assert_eq!(s.phase.as_deref(), Some("Deployed"));
        assert_eq!(get(&s.conditions, "Available"), (&T, "AllComponentsReady", "All components are ready."));
        assert_eq!(get(&s.conditions, "Degraded").0, &F);
        assert_eq!(get(&s.conditions, "Created"), (&T, "AllResourcesCreated", "All resources were created."));
        assert_eq!((s.observed_kube_virt_version.as_deref(), s.observed_generation), (Some("v1"), Some(3)));
        // An update: the phase stays Deployed, the conditions say what moves where, Created goes.
        let up = kubevirt_status(&s, &pass(&waiting, "id2", "v2", false), &now());
        assert!(kubevirt_updating(&s, "id2"));
        assert_eq!(up.phase.as_deref(), Some("Deployed"));
        assert_eq!(
            get(&up.conditions, "Progressing"),
            (
                &T,
                "UpdateInProgress",
                "Transitioning from previous version v1 with registry reg to target version v2 using registry reg"
            )
        );
        assert!(up.conditions.iter().flatten().all(|c| c.type_ != "Created"));
        assert_eq!(up.observed_kube_virt_version.as_deref(), Some("v1"));
        let fin = kubevirt_status(&up, &pass(&done, "id2", "v2", true), &now());
        assert_eq!(fin.observed_kube_virt_version.as_deref(), Some("v2"));
        assert_eq!(fin.observed_deployment_id.as_deref(), Some("id2"));
        let failed = kubevirt_status(&fin, &pass(&Err("boom".into()), "id2", "v2", false), &now());
        assert_eq!(
            get(&failed.conditions, "Degraded"),
            (&T, "DeploymentFailed", "An error occurred during deployment: boom")
        );
        assert_eq!(get(&failed.conditions, "Synchronized").0, &F);
        let other = kubevirt_not_active(&KubeVirtStatus::default(), &now());
        assert_eq!(other.phase, None);
        assert_eq!(
            get(&other.conditions, "Synchronized"),
            (&F, "ExistingDeployment", "There is an active KubeVirt deployment")
        );
        let del = kubevirt_deleting(&fin, false, None, &now());
        assert_eq!(del.phase.as_deref(), Some("Deleting"));
        assert_eq!(get(&del.conditions, "Degraded"), (&T, "DeletionInProgress", "Deletion was triggered"));
        assert_eq!(kubevirt_deleting(&del, true, None, &now()).phase.as_deref(), Some("Deleted"));
    }

    #[test]
    fn cdi_status_follows_upstreams_sdk() {
        let waiting = Progress { apply_through: 1, waiting: Some(("cdi-deployment".into(), "x".into())) };
        let done = Progress { apply_through: 3, waiting: None };
        let s = cdi_status(&CDIStatus::default(), "0.1.0", "v1", Ok(&waiting), &now());
        assert_eq!(s.phase.as_deref(), Some("Deploying"));
        assert_eq!(get(&s.conditions, "Progressing"), (&T, "DeployStarted", "Started Deployment"));
        let s = cdi_status(&s, "0.1.0", "v1", Ok(&done), &now());
        assert_eq!((s.phase.as_deref(), s.observed_version.as_deref()), (Some("Deployed"), Some("v1")));
        assert_eq!(get(&s.conditions, "Available"), (&T, "DeployCompleted", "Deployment Completed"));
        let up = cdi_status(&s, "0.1.0", "v2", Ok(&waiting), &now());
        assert_eq!(up.phase.as_deref(), Some("Upgrading"));
        assert_eq!(get(&up.conditions, "Degraded"), (&T, "UpgradeStarted", "Started upgrade to version v2"));
        let degraded = cdi_status(&s, "0.1.0", "v1", Ok(&waiting), &now());
        assert_eq!((degraded.phase.as_deref(), get(&degraded.conditions, "Degraded").0), (Some("Deployed"), &T));
        let err = cdi_status(&CDIStatus::default(), "0.1.0", "v1", Err(CDI_UNWANTED.into()), &now());
        assert_eq!(err.phase.as_deref(), Some("Error"));
        assert_eq!(get(&err.conditions, "Degraded"), (&T, "ConfigError", CDI_UNWANTED));
    }
}
