//! The `pods/eviction` webhooks (upstream's `PodEvictionAdmitter`; contract §3 "Eviction interplay"): what
//! `kubectl drain` (and the descheduler, and every other eviction client) meets when it evicts a VMI's pod.
//!
//! ```text
//! POST pods/<p>/eviction ─► virt-launcher-eviction-interceptor / hotplug-pod-eviction-interceptor
//!   read the pod (unreadable: allowed) ─► subject
//!     launcher pod ─► read its VMI ─► decide_launcher (pure, by the eviction strategy)
//!        Allow                      (None / nil, LiveMigrateIfPossible and not migratable)
//!        Deny(message)              (LiveMigrate and not migratable: the drain waits, forever, with upstream's text)
//!        Mark(node)  ─► merge-patch status.evacuationNodeName (dry run kept) ─► denied 429 "Eviction triggered
//!                       evacuation of VMI …" (the drain retries; the VM controller migrates the VMI away, the
//!                       source pod goes, the retry finds no pod)
//!     hotplug attachment pod of a running launcher ─► denied while the VMI exists
//! ```
//!
//! Denials carry code 429 (TooManyRequests) as upstream's, which eviction clients treat as "retry later".

use contracts::kubevirt::consts::{ann, label};
use controller_runtime::api::api_message;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::EvictionStrategy;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::{DynamicObject, Status};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::cause::error_status;
use crate::config::Config;

/// HTTP status of every denial: clients retry an eviction answered with it.
pub const DENIED_CODE: u16 = 429;
/// Value of the Eviction's `requested-by` annotation the descheduler writes.
pub const DESCHEDULER: &str = "sigs.k8s.io/descheduler";
/// What [`ann::EVICTION_SOURCE`] is set to on a VMI the descheduler marked.
pub const DESCHEDULER_SOURCE: &str = "descheduler";

/// The eviction request as the webhook reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// Dry run: the request's `dryRun`, or `deleteOptions.dryRun: [All]` in the Eviction.
    pub dry_run: bool,
    /// Sent by the descheduler (annotation `requested-by: sigs.k8s.io/descheduler`).
    pub descheduler: bool,
}

/// What the pod under eviction is to KubeVirt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A launcher pod that has not completed: the VMI it runs (annotation `kubevirt.io/domain`, `None`: not
    /// annotated) and the pod's node.
    Launcher {
        /// The VMI's name.
        vmi: Option<String>,
        /// The pod's node.
        node: String,
    },
    /// A hotplug attachment pod: its owner (the launcher pod).
    Hotplug {
        /// The owning pod's name.
        owner: String,
    },
    /// Anything else (completed launchers too): not KubeVirt's to hold.
    Other,
}

/// What the webhook answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Admit the eviction.
    Allow,
    /// Refuse it with this message.
    Deny(String),
    /// Mark the VMI for evacuation off this node, then refuse ([`triggered`]).
    Mark(String),
}

/// Upstream's message once a VMI was marked (the descheduler parses it).
pub fn triggered(ns: &str, vmi: &str) -> String {
    format!("Eviction triggered evacuation of VMI \"{ns}/{vmi}\"")
}

/// Upstream's message for a `LiveMigrate` VMI that cannot migrate (the drain is blocked until it can, or is gone).
pub fn not_migratable(vmi: &str) -> String {
    format!("VMI {vmi} is configured with an eviction strategy but is not live-migratable")
}

fn completed(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// What `pod` is (upstream's `isVirtLauncher`, `isHotplugPod`, `isCompleted`).
pub fn subject(pod: &Pod) -> Subject {
    let app = pod.labels().get(label::KUBEVIRT).map(String::as_str);
    match app {
        Some(label::HOTPLUG_DISK) => match pod.owner_references() {
            [owner] => Subject::Hotplug { owner: owner.name.clone() },
            _ => Subject::Other,
        },
        Some(label::VIRT_LAUNCHER) if !completed(pod) => Subject::Launcher {
            vmi: pod.annotations().get(ann::DOMAIN).cloned(),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
        },
        _ => Subject::Other,
    }
}

/// The decision for an eviction of a launcher pod on `pod_node` running `vmi`, with the cluster's default
/// strategy `cluster` (upstream's `admitLauncherPod`, in its order).
pub fn decide_launcher(vmi: &VirtualMachineInstance, pod_node: &str, cluster: Option<&EvictionStrategy>) -> Decision {
    let name = vmi.name_any();
    let mark = match vmi.eviction_strategy(cluster) {
        None | Some(EvictionStrategy::None) | Some(EvictionStrategy::Other(_)) => false,
        Some(EvictionStrategy::LiveMigrate) if !vmi.is_migratable() => return Decision::Deny(not_migratable(&name)),
        Some(EvictionStrategy::LiveMigrate | EvictionStrategy::External) => true,
        Some(EvictionStrategy::LiveMigrateIfPossible) => vmi.is_migratable(),
    };
    if !mark {
        return Decision::Allow;
    }
    let ns = vmi.namespace().unwrap_or_default();
    if vmi.evacuation_node().is_some() {
        return Decision::Deny(format!("Evacuation in progress: {}", triggered(&ns, &name)));
    }
    if vmi.status.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or_default() != pod_node {
        return Decision::Deny("Eviction request for target Pod".into());
    }
    Decision::Mark(pod_node.to_owned())
}

/// The decision for an eviction of a hotplug attachment pod `pod` whose owner is `owner` (`None`: gone) and whose
/// VMI is `vmi` (`Ok(None)`: gone; `Err`: unreadable, the API server's message).
pub fn decide_hotplug(pod: &str, ns: &str, owner: Option<&Pod>, vmi: Result<Option<&str>, &str>) -> Decision {
    let Some(owner) = owner else { return Decision::Allow };
    if !matches!(subject(owner), Subject::Launcher { vmi: Some(_), .. }) {
        return Decision::Allow;
    }
    match vmi {
        Err(e) => Decision::Deny(format!("kubevirt failed getting the vmi: {e}")),
        Ok(None) => Decision::Allow,
        Ok(Some(vmi)) => Decision::Deny(format!(
            "cannot evict hotplug pod: {pod} associated with running vmi: {vmi} in namespace {ns}"
        )),
    }
}

/// The eviction under review in `request` (`raw_request`: the same request as JSON, for the Eviction's fields).
pub fn eviction(request: &AdmissionRequest<DynamicObject>, raw_request: &Value) -> Eviction {
    let object = raw_request.get("object").cloned().unwrap_or(Value::Null);
    let options_dry_run = object.pointer("/deleteOptions/dryRun/0").and_then(Value::as_str).is_some_and(|d| d == "All");
    let requested_by = object.pointer("/metadata/annotations").and_then(|a| a.get(ann::REQUESTED_BY));
    Eviction {
        namespace: request.namespace.clone().unwrap_or_default(),
        pod: request.name.clone(),
        dry_run: request.dry_run || options_dry_run,
        descheduler: requested_by.and_then(Value::as_str) == Some(DESCHEDULER),
    }
}

/// The merge patch marking a VMI for evacuation off `node` (and, for the descheduler, its source annotation).
pub fn mark_patch(node: &str, descheduler: bool) -> Value {
    let mut patch = json!({"status": {"evacuationNodeName": node}});
    if descheduler {
        patch["metadata"] = json!({"annotations": {ann::EVICTION_SOURCE: DESCHEDULER_SOURCE}});
    }
    patch
}

fn denied(response: AdmissionResponse, message: String) -> AdmissionResponse {
    let status = Status { code: DENIED_CODE, ..error_status(message) };
    crate::webhook::refused(response, status)
}

/// Answers an `AdmissionReview` `body` of either eviction webhook: reads the pod and its VMI through `client`
/// (without one — no cluster — every eviction is admitted, as upstream does when it cannot read the pod), decides,
/// marks the VMI when the decision says so.
pub async fn review(client: Option<&Client>, body: &[u8], config: &Config) -> Value {
    let parsed: Result<(Value, AdmissionReview<DynamicObject>), String> = serde_json::from_slice::<Value>(body)
        .map_err(|e| e.to_string())
        .and_then(|v| serde_json::from_value(v.clone()).map(|r| (v, r)).map_err(|e| e.to_string()));
    let (raw, review) = match parsed {
        Ok(p) => p,
        Err(e) => {
            return crate::webhook::to_value(crate::webhook::refused(AdmissionResponse::invalid(&e), error_status(e)));
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => {
            let m = e.to_string();
            return crate::webhook::to_value(crate::webhook::refused(AdmissionResponse::invalid(&m), error_status(m)));
        }
    };
    let response = AdmissionResponse::from(&request);
    let eviction = eviction(&request, raw.get("request").unwrap_or(&Value::Null));
    let answer = match client {
        None => response,
        Some(c) => match admit(c, &eviction, config).await {
            Ok(()) => response,
            Err(message) => denied(response, message),
        },
    };
    crate::webhook::to_value(answer)
}

/// Reads what the decision needs, decides and carries out a [`Decision::Mark`]; `Err` is the denial's message.
async fn admit(client: &Client, e: &Eviction, config: &Config) -> Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &e.namespace);
    let Ok(pod) = pods.get(&e.pod).await else { return Ok(()) };
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &e.namespace);
    let decision = match subject(&pod) {
        Subject::Other | Subject::Launcher { vmi: None, .. } => Decision::Allow,
        Subject::Hotplug { owner } => {
            let owner = pods
                .get_opt(&owner)
                .await
                .map_err(|err| format!("failed getting owner for hotplug pod: {}", api_message(&err)))?;
            let vmi_name = owner.as_ref().and_then(|o| o.annotations().get(ann::DOMAIN).cloned());
            let vmi = match &vmi_name {
                Some(n) => vmis.get_opt(n).await.map(|v| v.map(|_| n.as_str())).map_err(|err| api_message(&err)),
                None => Ok(None),
            };
            decide_hotplug(&e.pod, &e.namespace, owner.as_ref(), vmi.as_ref().map(|v| *v).map_err(String::as_str))
        }
        Subject::Launcher { vmi: Some(name), node } => {
            let vmi = vmis
                .get(&name)
                .await
                .map_err(|err| format!("kubevirt failed getting the vmi: {}", api_message(&err)))?;
            decide_launcher(&vmi, &node, config.eviction_strategy.as_ref())
        }
    };
    match decision {
        Decision::Allow => Ok(()),
        Decision::Deny(message) => Err(message),
        Decision::Mark(node) => {
            let name = pod.annotations().get(ann::DOMAIN).cloned().unwrap_or_default();
            let params = PatchParams { dry_run: e.dry_run, ..PatchParams::default() };
            vmis.patch(&name, &params, &Patch::Merge(&mark_patch(&node, e.descheduler)))
                .await
                .map_err(|err| format!("kubevirt failed marking the vmi for eviction: {}", api_message(&err)))?;
            let vmi = format!("{}/{name}", e.namespace);
            tracing::info!(%vmi, %node, dry_run = e.dry_run, "an eviction marked the VMI for evacuation");
            Err(triggered(&e.namespace, &name))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(
        strategy: Option<&str>,
        migratable: Option<bool>,
        node: &str,
        marked: Option<&str>,
    ) -> VirtualMachineInstance {
        let mut conditions = vec![];
        if let Some(m) = migratable {
            conditions.push(json!({"type": "LiveMigratable", "status": if m { "True" } else { "False" }}));
        }
        let mut v = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": "Running", "nodeName": node, "conditions": conditions},
        });
        if let Some(s) = strategy {
            v["spec"]["evictionStrategy"] = json!(s);
        }
        if let Some(m) = marked {
            v["status"]["evacuationNodeName"] = json!(m);
        }
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    fn pod(app: &str, phase: &str, owners: usize) -> Pod {
        let owners: Vec<Value> = (0..owners)
            .map(|i| json!({"apiVersion": "v1", "kind": "Pod", "name": format!("virt-launcher-vm1-{i}"), "uid": "u"}))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"kubevirt.io": app},
                         "annotations": {"kubevirt.io/domain": "vm1"}, "ownerReferences": owners},
            "spec": {"nodeName": "node1", "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn launcher_decisions_follow_the_strategy_as_upstream() {
        let live = Some(&EvictionStrategy::LiveMigrate);
        let table: Vec<(VirtualMachineInstance, Option<&EvictionStrategy>, Decision)> = vec![
            (vmi(None, Some(true), "node1", None), None, Decision::Allow),
            (vmi(Some("None"), Some(true), "node1", None), live, Decision::Allow),
            // The cluster's strategy applies to VMIs without one.
            (vmi(None, Some(true), "node1", None), live, Decision::Mark("node1".into())),
            (vmi(Some("LiveMigrate"), Some(true), "node1", None), None, Decision::Mark("node1".into())),
            (vmi(Some("LiveMigrate"), Some(false), "node1", None), None, Decision::Deny(not_migratable("vm1"))),
            (vmi(Some("LiveMigrate"), None, "node1", None), None, Decision::Deny(not_migratable("vm1"))),
            (vmi(Some("LiveMigrateIfPossible"), Some(false), "node1", None), None, Decision::Allow),
            (vmi(Some("LiveMigrateIfPossible"), Some(true), "node1", None), None, Decision::Mark("node1".into())),
            (vmi(Some("External"), Some(false), "node1", None), None, Decision::Mark("node1".into())),
            (
                vmi(Some("LiveMigrate"), Some(true), "node1", Some("node1")),
                None,
                Decision::Deny("Evacuation in progress: Eviction triggered evacuation of VMI \"ns/vm1\"".into()),
            ),
            // The eviction of a migration target (on another node than the VMI's).
            (
                vmi(Some("LiveMigrate"), Some(true), "node2", None),
                None,
                Decision::Deny("Eviction request for target Pod".into()),
            ),
        ];
        for (i, (v, cluster, want)) in table.into_iter().enumerate() {
            assert_eq!(decide_launcher(&v, "node1", cluster), want, "case {i}");
        }
    }

    #[test]
    fn pods_are_classified_by_label_phase_and_owner() {
        assert_eq!(
            subject(&pod("virt-launcher", "Running", 0)),
            Subject::Launcher { vmi: Some("vm1".into()), node: "node1".into() }
        );
        assert_eq!(subject(&pod("virt-launcher", "Succeeded", 0)), Subject::Other);
        assert_eq!(subject(&pod("virt-launcher", "Failed", 0)), Subject::Other);
        assert_eq!(
            subject(&pod("hotplug-disk", "Running", 1)),
            Subject::Hotplug { owner: "virt-launcher-vm1-0".into() }
        );
        assert_eq!(subject(&pod("hotplug-disk", "Running", 2)), Subject::Other);
        assert_eq!(subject(&pod("virt-api", "Running", 0)), Subject::Other);
    }

    #[test]
    fn hotplug_pods_are_held_while_their_vmi_exists() {
        let owner = pod("virt-launcher", "Running", 0);
        let done = pod("virt-launcher", "Succeeded", 0);
        assert_eq!(decide_hotplug("hp-volume-x", "ns", None, Ok(Some("vm1"))), Decision::Allow);
        assert_eq!(decide_hotplug("hp-volume-x", "ns", Some(&done), Ok(Some("vm1"))), Decision::Allow);
        assert_eq!(decide_hotplug("hp-volume-x", "ns", Some(&owner), Ok(None)), Decision::Allow);
        assert_eq!(
            decide_hotplug("hp-volume-x", "ns", Some(&owner), Ok(Some("vm1"))),
            Decision::Deny(
                "cannot evict hotplug pod: hp-volume-x associated with running vmi: vm1 in namespace ns".into()
            )
        );
        assert_eq!(
            decide_hotplug("hp-volume-x", "ns", Some(&owner), Err("boom")),
            Decision::Deny("kubevirt failed getting the vmi: boom".into())
        );
    }

    #[test]
    fn the_request_gives_pod_dry_run_and_descheduler() -> Result<(), String> {
        let body = |dry: bool, object: Value| {
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
                "uid": "r1", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
                "name": "virt-launcher-vm1-abcde", "namespace": "ns", "operation": "CREATE",
                "userInfo": {"username": "alice"}, "object": object, "dryRun": dry}})
        };
        let read = |v: Value| -> Result<Eviction, String> {
            let review: AdmissionReview<DynamicObject> =
                serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
            let request: AdmissionRequest<DynamicObject> = review.try_into().map_err(|e| format!("{e}"))?;
            Ok(eviction(&request, &v["request"]))
        };
        let plain = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "ns"}});
        let e = read(body(false, plain.clone()))?;
        assert_eq!(
            e,
            Eviction {
                namespace: "ns".into(),
                pod: "virt-launcher-vm1-abcde".into(),
                dry_run: false,
                descheduler: false
            }
        );
        assert!(read(body(true, plain))?.dry_run);
        let options = json!({"apiVersion": "policy/v1", "kind": "Eviction",
            "metadata": {"name": "virt-launcher-vm1-abcde", "annotations": {"requested-by": "sigs.k8s.io/descheduler"}},
            "deleteOptions": {"dryRun": ["All"]}});
        let e = read(body(false, options))?;
        assert!(e.dry_run && e.descheduler);
        Ok(())
    }

    #[test]
    fn the_mark_sets_the_node_and_the_descheduler_source() {
        assert_eq!(mark_patch("node1", false), json!({"status": {"evacuationNodeName": "node1"}}));
        assert_eq!(
            mark_patch("node1", true),
            json!({"status": {"evacuationNodeName": "node1"},
                   "metadata": {"annotations": {"kubevirt.io/eviction-source": "descheduler"}}})
        );
    }

    #[tokio::test]
    async fn without_a_cluster_evictions_pass_and_garbage_is_refused() {
        let config = Config::default();
        let r = review(None, b"not json", &config).await;
        assert_eq!(r["response"]["allowed"], json!(false));
        assert_eq!(r["response"]["status"]["code"], json!(400));
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "r1", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
            "name": "p", "namespace": "ns", "operation": "CREATE", "userInfo": {},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}}}});
        let r = review(None, body.to_string().as_bytes(), &config).await;
        assert_eq!(r["response"]["allowed"], json!(true));
        assert_eq!(r["response"]["uid"], json!("r1"));
    }
}
