//! Volume hotplug on the VMI controller's side (contract §7.5; upstream's `volume-hotplug.go` and
//! `RenderHotplugAttachmentPodTemplate`), pure: the hotpluggable volumes of a running VMI get attachment pods next
//! to its launcher pods, and their `status.volumeStatus` walks the controller's part of upstream's phases. The
//! node agent does the rest (`node-agent/src/volumes.rs`: MountedToPod, Ready, and back to UnMountedFromPod).
//!
//! ```text
//! spec volume, hotpluggable:
//!   claim missing ─► Pending FailedPvcNotFound; not bound / DataVolume not ready ─► Pending PVCNotReady
//!   bound ─► one attachment pod per (launcher pod, volume): hp-volume-…, on the launcher's node, mounting the claim
//!            (Bound "PVC is in phase Bound" until the current launcher's pod exists)
//!   that pod exists ─► AttachedToNode SuccessfulCreate (attachPodName; attachPodUID once it runs)
//! status volume no longer in the spec:
//!   the node agent unmounted it (UnMountedFromPod), or it never got past AttachedToNode ─► its pods deleted
//!   ─► Detaching SuccessfulDelete ─► pods gone ─► the status entry goes
//! ```
//!
//! One attachment pod per volume (upstream: one per set of volumes, replaced when the set changes): adding or
//! removing a volume never touches the pod of another, so a detach cannot take a live disk with it (§10.9). The
//! pod is owned by its launcher pod (it goes with it) and carries a second, non-controlling owner reference to the
//! VMI (its changes wake the VMI's reconcile).

use std::collections::BTreeMap;

use contracts::kubevirt::consts::{QEMU_UID, label};
use contracts::kubevirt::launcher::attachment_path;
use controller_runtime::events::Severity;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{HotplugVolumeStatus, VolumePhase, VolumeStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, ResourceRequirements, SecurityContext,
    Volume as PodVolume, VolumeDevice, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

use super::pod::{Claim, ClaimMode, PodSettings};

/// `generateName` of attachment pods (upstream's).
pub const GENERATE_NAME: &str = "hp-volume-";
/// The attachment pod's one container (upstream's).
pub const CONTAINER: &str = "hotplug-disk";
/// Event and volume status reason of a created attachment pod (upstream's).
pub const REASON_CREATED: &str = "SuccessfulCreate";
/// Event and volume status reason of a deleted attachment pod (upstream's).
pub const REASON_DELETED: &str = "SuccessfulDelete";
/// Volume status reason while the claim is not usable (upstream's).
pub const REASON_PVC_NOT_READY: &str = "PVCNotReady";
/// Volume status reason of a missing claim (upstream's).
pub const REASON_PVC_NOT_FOUND: &str = "FailedPvcNotFound";

/// A hotpluggable volume's claim as read from the caches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HotplugClaim {
    /// Neither the PVC nor the DataVolume exists.
    Missing(String),
    /// Not usable yet: the PVC's phase (`Pending`, `Lost`), or the DataVolume's import still running.
    NotReady {
        /// The claim.
        name: String,
        /// What to say (upstream: the PVC's phase).
        phase: String,
    },
    /// Bound (and its DataVolume, if any, populated).
    Ready(Claim),
}

/// Everything the hotplug planner looks at.
#[derive(Debug)]
pub struct Observed<'a> {
    /// The VMI (Running, not being deleted).
    pub vmi: &'a VirtualMachineInstance,
    /// Its current launcher pod (on `status.nodeName`).
    pub launcher: Option<&'a Pod>,
    /// A migration target's launcher pod, while a migration is going on (its volumes need attachment pods on its
    /// node before the guest moves).
    pub target: Option<&'a Pod>,
    /// The VMI's attachment pods (label `kubevirt.io=hotplug-disk`, owner reference to the VMI).
    pub attachments: Vec<&'a Pod>,
    /// The claims of its hotpluggable volumes, by volume name.
    pub claims: BTreeMap<String, HotplugClaim>,
    /// Pod rendering settings (the launcher image the attachment pods run).
    pub settings: &'a PodSettings,
}

/// One thing to do.
#[derive(Debug, Clone)]
pub enum Action {
    /// Create this attachment pod.
    CreatePod(Box<Pod>),
    /// Delete the attachment pod of this name.
    DeletePod(String),
    /// Record an event on the VMI.
    Event {
        /// Normal or Warning.
        severity: Severity,
        /// Reason.
        reason: &'static str,
        /// Message.
        message: String,
    },
}

/// The volume an attachment pod serves (its one claim volume's name) and the launcher pod it belongs to.
pub fn attachment_of(pod: &Pod) -> Option<(String, String)> {
    let volume = pod.spec.as_ref()?.volumes.iter().flatten().find(|v| v.persistent_volume_claim.is_some())?;
    let owner = pod.owner_references().iter().find(|o| o.kind == "Pod" && o.controller == Some(true))?;
    Some((volume.name.clone(), owner.uid.clone()))
}

fn ready(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod.status.as_ref().and_then(|s| s.container_statuses.as_ref()).is_some_and(|c| c.iter().all(|c| c.ready))
        && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn set_phase(entry: &mut VolumeStatus, phase: VolumePhase, reason: &str, message: String) {
    entry.phase = Some(phase);
    entry.reason = Some(reason.to_owned());
    entry.message = Some(message);
}

/// Plans the hotplug part of one reconcile of a running VMI; `status` is the VMI status the reconcile writes
/// (its `volumeStatus` entries of hotpluggable volumes are updated here). Returns the actions and whether to look
/// again soon (a detach waits for the node agent, a claim is not usable yet).
pub fn plan(o: &Observed<'_>, status: &mut crds::kubevirt::vmi::VirtualMachineInstanceStatus) -> (Vec<Action>, bool) {
    let vmi = o.vmi;
    let mut actions = Vec::new();
    let mut again = false;
    let hot: Vec<&crds::kubevirt::volume::Volume> =
        vmi.spec.volumes.iter().flatten().filter(|v| v.is_hotpluggable()).collect();
    let launchers: Vec<&Pod> = o.launcher.into_iter().chain(o.target).collect();
    let pod_for = |volume: &str, launcher: &Pod| {
        o.attachments
            .iter()
            .copied()
            .find(|p| attachment_of(p).is_some_and(|(v, owner)| v == volume && Some(owner) == launcher.uid()))
    };
    let mut entries: Vec<VolumeStatus> = status.volume_status.take().unwrap_or_default();

    for volume in &hot {
        let name = volume.name.as_str();
        let claim = o.claims.get(name);
        // Claims are not watched: one that is not usable yet is looked at again.
        again |= !matches!(claim, Some(HotplugClaim::Ready(_)));
        for launcher in &launchers {
            if let (Some(HotplugClaim::Ready(c)), None) = (claim, pod_for(name, launcher)) {
                actions.push(Action::CreatePod(Box::new(render(vmi, launcher, name, c, o.settings))));
            }
        }
        let idx = match entries.iter().position(|e| e.name == name) {
            Some(i) => i,
            None => {
                entries.push(VolumeStatus { name: name.to_owned(), ..VolumeStatus::default() });
                entries.len() - 1
            }
        };
        let entry = &mut entries[idx];
        let controller_phase = matches!(entry.phase, None | Some(VolumePhase::Pending | VolumePhase::Bound));
        let current = o.launcher.and_then(|l| pod_for(name, l));
        match (claim, current) {
            (Some(HotplugClaim::Missing(c)), None) if controller_phase => {
                set_phase(entry, VolumePhase::Pending, REASON_PVC_NOT_FOUND, format!("PVC {c} not found"));
            }
            (None, None) if controller_phase => {
                let c = volume.claim_name().unwrap_or(name);
                set_phase(entry, VolumePhase::Pending, REASON_PVC_NOT_FOUND, format!("PVC {c} not found"));
            }
            (Some(HotplugClaim::NotReady { phase, .. }), None) if controller_phase => {
                set_phase(entry, VolumePhase::Pending, REASON_PVC_NOT_READY, format!("PVC is in phase {phase}"));
            }
            (Some(HotplugClaim::Ready(_)), None) if controller_phase => {
                set_phase(entry, VolumePhase::Bound, REASON_PVC_NOT_READY, "PVC is in phase Bound".into());
            }
            (_, Some(pod)) => {
                let pod_name = pod.name_any();
                let hp = entry.hotplug_volume.get_or_insert_with(HotplugVolumeStatus::default);
                hp.attach_pod_name = Some(pod_name.clone());
                hp.attach_pod_uid = if ready(pod) { pod.uid() } else { None };
                if controller_phase {
                    let message = format!("Created hotplug attachment pod {pod_name}, for volume {name}");
                    set_phase(entry, VolumePhase::AttachedToNode, REASON_CREATED, message.clone());
                    actions.push(Action::Event { severity: Severity::Normal, reason: REASON_CREATED, message });
                }
            }
            _ => {}
        }
    }

    // Volumes gone from the spec: their pods go once the node agent has let go of them, then their status.
    let hot_names: Vec<&str> = hot.iter().map(|v| v.name.as_str()).collect();
    let mut kept = Vec::new();
    for mut entry in entries {
        let name = entry.name.clone();
        let is_hotplug_entry = entry.hotplug_volume.is_some() || entry.phase.is_some();
        if hot_names.contains(&name.as_str()) || !is_hotplug_entry {
            kept.push(entry);
            continue;
        }
        let pods: Vec<&Pod> =
            o.attachments.iter().copied().filter(|p| attachment_of(p).is_some_and(|(v, _)| v == name)).collect();
        let released = matches!(
            entry.phase,
            None | Some(
                VolumePhase::Pending
                    | VolumePhase::Bound
                    | VolumePhase::AttachedToNode
                    | VolumePhase::UnMountedFromPod
                    | VolumePhase::Detaching
            )
        );
        if !released {
            // Still mounted or attached: the node agent detaches it first.
            again = true;
            kept.push(entry);
            continue;
        }
        if pods.is_empty() {
            continue;
        }
        for p in &pods {
            if p.metadata.deletion_timestamp.is_none() {
                actions.push(Action::DeletePod(p.name_any()));
            }
        }
        if entry.phase != Some(VolumePhase::Detaching) {
            let pod_name = pods[0].name_any();
            let message = format!("Deleted hotplug attachment pod {pod_name}, for volume {name}");
            set_phase(&mut entry, VolumePhase::Detaching, REASON_DELETED, message.clone());
            actions.push(Action::Event { severity: Severity::Normal, reason: REASON_DELETED, message });
        }
        again = true;
        kept.push(entry);
    }
    // Attachment pods of no volume the VMI has or had (a status entry), or of a launcher pod that is gone.
    for p in &o.attachments {
        let Some((volume, owner)) = attachment_of(p) else { continue };
        let known = hot_names.contains(&volume.as_str()) || kept.iter().any(|e| e.name == volume);
        let launcher_alive = launchers.iter().any(|l| l.uid().as_deref() == Some(owner.as_str()));
        if p.metadata.deletion_timestamp.is_none()
            && (!known || (!launcher_alive && !hot_names.contains(&volume.as_str())))
        {
            actions.push(Action::DeletePod(p.name_any()));
        }
    }
    status.volume_status = (!kept.is_empty()).then_some(kept);
    (actions, again)
}

/// The attachment pod of volume `volume` (claim `claim`) for `launcher` (upstream's template, one volume).
pub fn render(
    vmi: &VirtualMachineInstance,
    launcher: &Pod,
    volume: &str,
    claim: &Claim,
    settings: &PodSettings,
) -> Pod {
    let node = launcher.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let launcher_ref = OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: launcher.name_any(),
        uid: launcher.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let vmi_ref = OwnerReference {
        api_version: VirtualMachineInstance::api_version(&()).into_owned(),
        kind: VirtualMachineInstance::kind(&()).into_owned(),
        name: vmi.name_any(),
        uid: vmi.uid().unwrap_or_default(),
        controller: Some(false),
        block_owner_deletion: None,
    };
    let path = attachment_path(volume);
    let (mounts, devices) = match claim.mode {
        ClaimMode::Filesystem => {
            (Some(vec![VolumeMount { name: volume.to_owned(), mount_path: path, ..Default::default() }]), None)
        }
        ClaimMode::Block => (None, Some(vec![VolumeDevice { name: volume.to_owned(), device_path: path }])),
    };
    let quantity = |s: &str| Quantity(s.to_owned());
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(GENERATE_NAME.into()),
            namespace: vmi.namespace(),
            labels: Some([(label::KUBEVIRT.to_owned(), label::HOTPLUG_DISK.to_owned())].into()),
            owner_references: Some(vec![launcher_ref, vmi_ref]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_fields: Some(vec![NodeSelectorRequirement {
                                key: "metadata.name".into(),
                                operator: "In".into(),
                                values: Some(vec![node]),
                            }]),
                            ..Default::default()
                        }],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            tolerations: launcher.spec.as_ref().and_then(|s| s.tolerations.clone()),
            termination_grace_period_seconds: Some(0),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(QEMU_UID),
                run_as_group: Some(QEMU_UID),
                ..Default::default()
            }),
            containers: vec![Container {
                name: CONTAINER.into(),
                image: Some(settings.launcher_image.clone()),
                image_pull_policy: Some(settings.pull_policy.clone()),
                // Holds the claim until deleted (PID 1 with a TERM handler).
                command: Some(vec![
                    "/bin/busybox".into(),
                    "sh".into(),
                    "-c".into(),
                    "trap 'exit 0' TERM; while :; do /bin/busybox sleep 3600 & wait $!; done".into(),
                ]),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".into(), quantity("10m")), ("memory".into(), quantity("2M"))].into()),
                    limits: Some([("cpu".into(), quantity("100m")), ("memory".into(), quantity("80M"))].into()),
                    ..Default::default()
                }),
                security_context: Some(SecurityContext {
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
                    run_as_non_root: Some(true),
                    run_as_user: Some(QEMU_UID),
                    ..Default::default()
                }),
                volume_mounts: mounts,
                volume_devices: devices,
                ..Default::default()
            }],
            volumes: Some(vec![PodVolume {
                name: volume.to_owned(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.name.clone(),
                    read_only: claim.read_only.then_some(true),
                }),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::kubevirt::vmi::VirtualMachineInstanceStatus;
    use serde_json::json;

    fn vmi(volumes: serde_json::Value, status: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "ns", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}}, "volumes": volumes},
            "status": status,
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn launcher() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "virt-launcher-vm1-abcde", "namespace": "ns", "uid": "launcher-uid"},
            "spec": {"nodeName": "node1", "containers": [], "tolerations": [{"operator": "Exists"}]},
        }))
        .unwrap_or_else(|e| panic!("{e}"))
    }

    fn settings() -> PodSettings {
        PodSettings { launcher_image: "launcher:1".into(), pull_policy: "IfNotPresent".into() }
    }

    fn attachment(name: &str, volume: &str, running: bool) -> Pod {
        let claim = Claim { name: format!("{volume}-pvc"), mode: ClaimMode::Filesystem, read_only: false };
        let mut p = render(&vmi(json!([]), json!({})), &launcher(), volume, &claim, &settings());
        p.metadata.name = Some(name.into());
        p.metadata.uid = Some(format!("{name}-uid"));
        if running {
            p.status = serde_json::from_value(json!({"phase": "Running",
                "containerStatuses": [{"name": "hotplug-disk", "ready": true, "restartCount": 0, "image": "i", "imageID": ""}]}))
            .ok();
        }
        p
    }

    fn hot(name: &str) -> serde_json::Value {
        json!({"name": name, "persistentVolumeClaim": {"claimName": format!("{name}-pvc"), "hotpluggable": true}})
    }

    fn ready(volume: &str, mode: ClaimMode) -> HotplugClaim {
        HotplugClaim::Ready(Claim { name: format!("{volume}-pvc"), mode, read_only: false })
    }

    fn run(
        v: &VirtualMachineInstance,
        pods: &[Pod],
        claims: BTreeMap<String, HotplugClaim>,
    ) -> (Vec<Action>, bool, VirtualMachineInstanceStatus) {
        let l = launcher();
        let s = settings();
        let o = Observed {
            vmi: v,
            launcher: Some(&l),
            target: None,
            attachments: pods.iter().collect(),
            claims,
            settings: &s,
        };
        let mut status = v.status.clone().unwrap_or_default();
        let (actions, again) = plan(&o, &mut status);
        (actions, again, status)
    }

    fn entry<'a>(s: &'a VirtualMachineInstanceStatus, name: &str) -> &'a VolumeStatus {
        s.volume_status.iter().flatten().find(|e| e.name == name).unwrap_or_else(|| panic!("no status of {name}"))
    }

    #[test]
    fn the_attachment_pod_is_upstreams_template_for_one_volume() {
        let v = vmi(json!([hot("data")]), json!({}));
        let claim = Claim { name: "data-pvc".into(), mode: ClaimMode::Block, read_only: true };
        let p = render(&v, &launcher(), "data", &claim, &settings());
        let j = serde_json::to_value(&p).unwrap_or_default();
        assert_eq!(j["metadata"]["generateName"], "hp-volume-");
        assert_eq!(j["metadata"]["labels"], json!({"kubevirt.io": "hotplug-disk"}));
        assert_eq!(j["metadata"]["ownerReferences"][0]["kind"], "Pod");
        assert_eq!(j["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(j["metadata"]["ownerReferences"][1]["kind"], "VirtualMachineInstance");
        assert_eq!(j["metadata"]["ownerReferences"][1]["controller"], false);
        assert_eq!(
            j["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchFields"][0]["values"],
            json!(["node1"])
        );
        assert_eq!(j["spec"]["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(j["spec"]["containers"][0]["name"], "hotplug-disk");
        assert_eq!(
            j["spec"]["containers"][0]["volumeDevices"],
            json!([{"name": "data", "devicePath": "/hotplug/data"}])
        );
        assert_eq!(
            j["spec"]["volumes"][0]["persistentVolumeClaim"],
            json!({"claimName": "data-pvc", "readOnly": true})
        );
        assert_eq!(attachment_of(&p), Some(("data".into(), "launcher-uid".into())));
    }

    #[test]
    fn volumes_walk_pending_bound_attached() {
        let v = vmi(json!([hot("a"), hot("b"), hot("c")]), json!({"phase": "Running"}));
        let claims = BTreeMap::from([
            ("a".to_owned(), HotplugClaim::Missing("a-pvc".into())),
            ("b".to_owned(), HotplugClaim::NotReady { name: "b-pvc".into(), phase: "Pending".into() }),
            ("c".to_owned(), ready("c", ClaimMode::Filesystem)),
        ]);
        let (actions, _, s) = run(&v, &[], claims.clone());
        let e = entry(&s, "a");
        assert_eq!(
            (e.phase.clone(), e.reason.as_deref(), e.message.as_deref()),
            (Some(VolumePhase::Pending), Some("FailedPvcNotFound"), Some("PVC a-pvc not found"))
        );
        assert_eq!(entry(&s, "b").message.as_deref(), Some("PVC is in phase Pending"));
        assert_eq!(entry(&s, "c").phase, Some(VolumePhase::Bound));
        assert_eq!(entry(&s, "c").message.as_deref(), Some("PVC is in phase Bound"));
        assert!(
            matches!(actions.as_slice(), [Action::CreatePod(p)] if attachment_of(p).is_some_and(|(v, _)| v == "c"))
        );
        // The pod exists (not running yet): AttachedToNode, its name; running: its UID too.
        let (actions, _, s) = run(&v, &[attachment("hp-volume-1", "c", false)], claims.clone());
        let e = entry(&s, "c");
        assert_eq!(
            (e.phase.clone(), e.reason.as_deref()),
            (Some(VolumePhase::AttachedToNode), Some("SuccessfulCreate"))
        );
        assert_eq!(e.message.as_deref(), Some("Created hotplug attachment pod hp-volume-1, for volume c"));
        assert_eq!(e.hotplug_volume.as_ref().and_then(|h| h.attach_pod_uid.clone()), None);
        assert!(actions.iter().any(|a| matches!(a, Action::Event { reason: "SuccessfulCreate", .. })));
        let (_, _, s) = run(&v, &[attachment("hp-volume-1", "c", true)], claims);
        assert_eq!(
            entry(&s, "c").hotplug_volume.as_ref().and_then(|h| h.attach_pod_uid.clone()).as_deref(),
            Some("hp-volume-1-uid")
        );
    }

    #[test]
    fn a_removed_volume_waits_for_the_node_agent_then_its_pod_and_status_go() {
        let status = |phase: &str| {
            json!({"phase": "Running", "volumeStatus": [{"name": "c", "target": "sda", "phase": phase,
            "hotplugVolume": {"attachPodName": "hp-volume-1", "attachPodUID": "u"}}]})
        };
        let pods = [attachment("hp-volume-1", "c", true)];
        // Still attached in the guest: nothing yet.
        let (actions, again, s) = run(&vmi(json!([]), status("Ready")), &pods, BTreeMap::new());
        assert!(actions.is_empty() && again);
        assert_eq!(entry(&s, "c").phase, Some(VolumePhase::Ready));
        // Unmounted by the node agent: the pod goes, Detaching.
        let (actions, again, s) = run(&vmi(json!([]), status("UnMountedFromPod")), &pods, BTreeMap::new());
        assert!(again);
        assert!(matches!(actions.first(), Some(Action::DeletePod(n)) if n == "hp-volume-1"));
        let e = entry(&s, "c");
        assert_eq!(
            (e.phase.clone(), e.message.as_deref()),
            (Some(VolumePhase::Detaching), Some("Deleted hotplug attachment pod hp-volume-1, for volume c"))
        );
        // The pod is gone: so is the status entry.
        let (actions, _, s) = run(&vmi(json!([]), status("Detaching")), &[], BTreeMap::new());
        assert!(actions.is_empty());
        assert!(s.volume_status.is_none());
        // A pod of a volume nobody knows goes.
        let (actions, _, _) = run(&vmi(json!([]), json!({"phase": "Running"})), &pods, BTreeMap::new());
        assert!(matches!(actions.as_slice(), [Action::DeletePod(n)] if n == "hp-volume-1"));
    }
}
