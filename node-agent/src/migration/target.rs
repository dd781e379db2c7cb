//! The target agent's side of a live migration: for a VMI labelled `kubevirt.io/migrationTargetNodeName=<this
//! node>`, once the target pod's launcher is prepared, open the proxy listeners and publish them; once the source
//! reports completion and the domain runs here, make the VMI this node's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use contracts::kubevirt::consts::label;
use contracts::kubevirt::launcher::{SocketDir, domain_name};
use crds::kubevirt::VirtualMachineInstance;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use super::plan::{self, TargetStep};
use super::{Error, Migrations, proxy, update_state};
use crate::agent::plan::{DomainView, LauncherView};
use crate::hotplug;
use crate::libvirt::DomainState;

/// How often a target waiting for its launcher or for the source looks again.
const POLL: Duration = Duration::from_secs(1);

/// The open proxies of one inbound migration.
#[derive(Debug)]
pub struct Listening {
    _proxies: proxy::Proxies,
    ports: BTreeMap<String, i64>,
}

/// What the target step reads besides the VMI.
pub struct Target<'a> {
    /// API client.
    pub client: &'a Client,
    /// This node.
    pub node: &'a str,
    /// Launcher pods on this node.
    pub pods: &'a Store<Pod>,
    /// This agent's migrations.
    pub migrations: &'a Arc<Migrations>,
    /// Events on VMIs.
    pub events: &'a controller_runtime::events::Events,
    /// Hotplug attachment pods on this node.
    pub attachments: &'a Store<Pod>,
}

/// Puts the VMI's hotplugged volumes (those in the source's pod: MountedToPod or Ready) into the target `pod`
/// from its attachment pods on this node, before the guest comes (its QEMU opens them at the same paths);
/// `Ok(false)` while an attachment pod is not running yet.
async fn hotplugged_into_target(
    vmi: &VirtualMachineInstance,
    pod: &Pod,
    attachments: &Store<Pod>,
) -> Result<bool, Error> {
    use crate::volumes;
    use crds::kubevirt::vmi::VolumePhase;
    let wanted: Vec<String> = vmi
        .status
        .iter()
        .flat_map(|s| s.volume_status.iter().flatten())
        .filter(|s| matches!(s.phase, Some(VolumePhase::MountedToPod | VolumePhase::Ready)))
        .filter(|s| vmi.spec.volumes.iter().flatten().any(|v| v.name == s.name && v.is_hotpluggable()))
        .map(|s| s.name.clone())
        .collect();
    if wanted.is_empty() {
        return Ok(true);
    }
    let Some(to) = volumes::container_pid(pod, contracts::kubevirt::launcher::COMPUTE_CONTAINER) else {
        return Ok(false);
    };
    let all = attachments.state();
    let mine = volumes::attachments(&all, &pod.uid().unwrap_or_default());
    for volume in wanted {
        if volumes::present(to, &contracts::kubevirt::launcher::hotplug_disk(&volume))
            || volumes::present(to, &contracts::kubevirt::launcher::hotplug_device(&volume))
        {
            continue;
        }
        let Some(a) = mine.get(&volume) else { return Ok(false) };
        let from = all
            .iter()
            .find(|p| p.metadata.uid.as_deref() == Some(a.uid.as_str()))
            .and_then(|p| volumes::container_pid(p, "hotplug-disk"));
        let Some(from) = from else { return Ok(false) };
        let (v, mode) = (volume.clone(), a.mode);
        crate::agent::blocking(move || volumes::mount(from, to, &v, mode))
            .await
            .map_err(|e| Error::Hotplug(format!("volume {volume} into the target pod: {e}")))?;
        tracing::info!(vmi = %vmi.name_any(), %volume, "hotplugged volume in the migration target pod");
    }
    Ok(true)
}

/// One target-side step for `vmi`.
pub async fn reconcile(vmi: &VirtualMachineInstance, t: &Target<'_>) -> Result<Requeue, Error> {
    let ns = vmi.namespace().unwrap_or_default();
    let name = vmi.name_any();
    let state = vmi.status.as_ref().and_then(|s| s.migration_state.clone());
    let migration_uid = state.as_ref().and_then(|s| s.migration_uid.clone()).unwrap_or_default();
    let pod = state.as_ref().and_then(|s| s.target_pod.clone()).and_then(|p| {
        t.pods.state().into_iter().find(|x| x.name_any() == p && x.namespace().as_deref() == Some(ns.as_str()))
    });
    let dir = pod.as_ref().map(|p| SocketDir::on_node(&p.uid().unwrap_or_default()));
    let launcher = dir.as_ref().map_or(LauncherView::NoPod, crate::agent::launcher_view);
    let launcher_ready = matches!(launcher, LauncherView::Ready(_));
    let domain = match (&dir, launcher_ready) {
        (Some(d), true) => {
            let (uri, n) = (d.libvirt_uri(), domain_name(&ns, &name));
            crate::agent::blocking(move || crate::agent::inspect(&uri, &n)).await
        }
        _ => DomainView::Absent,
    };
    let domain_running = matches!(domain, DomainView::Present { state: DomainState::Running, .. });
    let published = {
        let listening = t.migrations.listening();
        listening.get(&migration_uid).is_some_and(|l| {
            state.as_ref().and_then(|s| s.target_direct_migration_node_ports.as_ref()) == Some(&l.ports)
        })
    };
    let step = plan::target_step(state.as_ref(), t.node, launcher_ready, published, domain_running);
    let api: Api<VirtualMachineInstance> = Api::namespaced(t.client.clone(), &ns);
    match step {
        TargetStep::Wait => {
            // The domain appearing (incoming) is recorded once.
            if matches!(domain, DomainView::Present { .. })
                && state.as_ref().is_some_and(|s| s.target_node_domain_detected != Some(true))
            {
                update_state(&api, &name, &migration_uid, |s, _| s.target_node_domain_detected = Some(true)).await?;
            }
            Ok(Requeue::requeue(POLL))
        }
        TargetStep::Publish => {
            if let Some(p) = &pod
                && !hotplugged_into_target(vmi, p, t.attachments).await?
            {
                return Ok(Requeue::requeue(POLL));
            }
            let (Some(dir), Some(ip), Some(tls)) = (&dir, t.migrations.pod_ip, t.migrations.server_tls.clone()) else {
                return Err(Error::NotConfigured("no pod IP or serving certificate for migration listeners"));
            };
            let (proxies, ports) = proxy::target(dir, ip, tls).await?;
            {
                let listening = Listening { _proxies: proxies, ports: ports.clone() };
                t.migrations.listening().insert(migration_uid.clone(), listening);
            }
            tracing::info!(vmi = %format!("{ns}/{name}"), ?ports, "migration target listening");
            update_state(&api, &name, &migration_uid, |s, _| {
                s.target_node_address = Some(ip.to_string());
                s.target_direct_migration_node_ports = Some(ports.clone());
            })
            .await?;
            Ok(Requeue::requeue(POLL))
        }
        TargetStep::TakeOver => {
            let (node, pod_uid) = (t.node.to_owned(), pod.as_ref().and_then(|p| p.uid()).unwrap_or_default());
            // A workload-update migration: the guest now runs in a pod sized for its new spec; plug the vCPUs and
            // memory in (a no-op for any other migration).
            let outcome = match &dir {
                Some(d) => {
                    let (uri, n, v) = (d.libvirt_uri(), domain_name(&ns, &name), vmi.clone());
                    crate::agent::blocking(move || {
                        let dom = crate::libvirt::Libvirt::connect(&uri).and_then(|c| c.lookup(&n));
                        match dom {
                            Ok(Some(dom)) => hotplug::apply(&dom, &v),
                            Ok(None) => {
                                let e = "the migrated domain is gone".to_owned();
                                hotplug::Outcome { cpu: Err(e.clone()), memory: Err(e) }
                            }
                            Err(e) => hotplug::Outcome { cpu: Err(e.to_string()), memory: Err(e.to_string()) },
                        }
                    })
                    .await
                }
                None => hotplug::Outcome::default(),
            };
            for (result, message) in
                [(&outcome.cpu, hotplug::EVENT_CPU_FAILED), (&outcome.memory, hotplug::EVENT_MEMORY_FAILED)]
            {
                if let Err(e) = result {
                    tracing::warn!(vmi = %format!("{ns}/{name}"), error = %e, message, "hotplug after migration");
                    // Upstream's reason is the error itself; an event's reason holds at most 128 characters.
                    let reason: String = e.chars().take(128).collect();
                    t.events.publish(vmi, controller_runtime::events::Severity::Warning, &reason, message).await;
                }
            }
            let now = Time(Timestamp::now());
            update_state(&api, &name, &migration_uid, |s, vmi| {
                let spec = vmi.clone();
                if let Some(st) = vmi.status.as_mut() {
                    hotplug::record(&spec, &outcome, st, &now);
                }
                s.target_node_domain_detected = Some(true);
                s.target_node_domain_ready_timestamp.get_or_insert_with(|| Time(Timestamp::now()));
                vmi.labels_mut().insert(label::NODE_NAME.into(), node.clone());
                vmi.labels_mut().remove(label::MIGRATION_TARGET_NODE_NAME);
                if let Some(st) = vmi.status.as_mut() {
                    st.node_name = Some(node.clone());
                    st.active_pods = Some(BTreeMap::from([(pod_uid.clone(), node.clone())]));
                    st.evacuation_node_name = None;
                }
            })
            .await?;
            t.migrations.listening().remove(&migration_uid);
            tracing::info!(vmi = %format!("{ns}/{name}"), node = t.node, "migrated VMI taken over");
            Ok(Requeue::await_change())
        }
        TargetStep::Release => {
            t.migrations.listening().remove(&migration_uid);
            Ok(Requeue::await_change())
        }
    }
}
