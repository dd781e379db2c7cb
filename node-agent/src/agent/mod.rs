//! The node agent's reconciler: the VMIs labelled with this node (`kubevirt.io/nodeName`), each driven through the
//! libvirt of its launcher pod.
//!
//! ```text
//! read (VMI; its active pod from the cache; the pod's socket directory on the node: ready / failed /
//!       terminating; the domain's state from the pod's libvirt)
//!   ─► plan::plan (pure)
//!   ─► apply (define + start / ACPI shutdown / destroy; replace the VMI's status; the pod's readiness gate;
//!       the launcher's done file)
//! ```
//!
//! State lives only in the API and in libvirt: a restarted agent reads both and carries on (the only memory is
//! whether an ACPI request was already sent; after a restart it is sent once more). Heartbeat, node labels and
//! the removal of socket directories of vanished pods are in [`node`].

pub mod node;
pub mod plan;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use contracts::kubevirt::consts::{READINESS_GATE_UNPAUSED, label};
use contracts::kubevirt::launcher::{Prepared, SocketDir, domain_name};
use controller_runtime::api::{Retried, is_conflict, is_not_found, retry_on_conflict};
use controller_runtime::events::{Events, Severity};
use controller_runtime::metrics::ReconcileMetrics;
use controller_runtime::policy::{Classify, ErrorPolicy, Retry, retry_of};
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::config::{KubeVirt, effective};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::libvirt::{self, DomainState, ErrorKind, Libvirt};
use plan::{DomainOp, DomainView, LauncherView, Observed};

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "node-agent";
/// How many times one reconcile starts over after a conflicting VMI update.
const CONFLICT_RETRIES: usize = 4;

/// Errors of a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// A libvirt call failed.
    #[error(transparent)]
    Libvirt(#[from] libvirt::Error),
    /// A file of the launcher's socket directory could not be written.
    #[error("{action}: {source}")]
    Io {
        /// What was being done.
        action: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The VMI kept changing while it was being updated.
    #[error("VMI {0} kept changing while it was being updated")]
    Conflict(String),
    /// A live migration step failed.
    #[error("live migration: {0}")]
    Migration(String),
}

impl Classify for Error {
    fn retry(&self) -> Retry {
        match self {
            Error::Kube { source, .. } => retry_of(source),
            Error::Libvirt(_) | Error::Io { .. } | Error::Conflict(_) | Error::Migration(_) => Retry::Transient,
        }
    }
}

fn kube_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

/// Read caches.
#[derive(Clone)]
pub struct Stores {
    /// Launcher pods on this node.
    pub pods: Store<Pod>,
    /// Hotplug attachment pods on this node.
    pub attachments: Store<Pod>,
    /// The cluster's KubeVirt configuration objects.
    pub kubevirts: Store<KubeVirt>,
}

/// Everything a reconcile needs.
pub struct Context {
    /// API client.
    pub client: Client,
    /// This node's name.
    pub node: String,
    /// Read caches.
    pub stores: Stores,
    /// Events on VMIs.
    pub events: Events,
    /// Reconcile metrics.
    pub metrics: ReconcileMetrics,
    /// Retry state.
    pub policy: ErrorPolicy,
    /// VMIs (by UID) whose guest was already asked to power off by ACPI.
    pub acpi_sent: Mutex<HashMap<String, std::time::Instant>>,
    /// Live migrations from and to this node.
    pub migrations: Arc<crate::migration::Migrations>,
}

/// Reconciles one VMI of this node.
pub async fn reconcile(vmi: Arc<VirtualMachineInstance>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let r = ctx.metrics.measure(CONTROLLER, reconcile_with_retries(&vmi, &ctx)).await;
    if r.is_ok() {
        ctx.policy.on_success(vmi.as_ref());
    }
    r
}

/// Reconciles one VMI migrating to this node (the target side).
pub async fn reconcile_target(vmi: Arc<VirtualMachineInstance>, ctx: Arc<Context>) -> Result<Requeue, Error> {
    let target = crate::migration::target::Target {
        client: &ctx.client,
        node: &ctx.node,
        pods: &ctx.stores.pods,
        migrations: &ctx.migrations,
        events: &ctx.events,
        attachments: &ctx.stores.attachments,
    };
    crate::migration::target::reconcile(&vmi, &target).await.map_err(|e| Error::Migration(e.to_string()))
}

/// The error policy: fatal errors wait for a change, transient ones back off.
pub fn error_policy(vmi: Arc<VirtualMachineInstance>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.policy.on_error(vmi.as_ref(), err)
}

async fn reconcile_with_retries(vmi: &VirtualMachineInstance, ctx: &Context) -> Result<Requeue, Error> {
    let ns = vmi.namespace().unwrap_or_default();
    let name = vmi.name_any();
    let api: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let conflict = |e: &Error| matches!(e, Error::Kube { source, .. } if is_conflict(source));
    let attempt = |v: VirtualMachineInstance| async move { reconcile_once(&v, ctx).await };
    match retry_on_conflict(&api, &name, vmi.clone(), CONFLICT_RETRIES, conflict, attempt).await {
        Retried::Done(r) => r,
        Retried::Gone => Ok(Requeue::await_change()),
        Retried::ReadFailed(e) => Err(kube_err(format!("reading VMI {ns}/{name}"))(e)),
        Retried::Exhausted => Err(Error::Conflict(format!("{ns}/{name}"))),
    }
}

/// The VMI's launcher pod on `node`: the `activePods` entry for that node, from the cache of the node's pods.
pub fn active_pod(pods: &Store<Pod>, node: &str, vmi: &VirtualMachineInstance) -> Option<Arc<Pod>> {
    let status = vmi.status.as_ref()?;
    let uids: Vec<&String> =
        status.active_pods.iter().flatten().filter(|(_, n)| n.as_str() == node).map(|(uid, _)| uid).collect();
    pods.state().into_iter().find(|p| p.metadata.uid.as_ref().is_some_and(|u| uids.contains(&u)))
}

pub(crate) fn launcher_view(dir: &SocketDir) -> LauncherView {
    if let Ok(reason) = std::fs::read_to_string(dir.failed()) {
        return LauncherView::Failed(reason.trim().to_owned());
    }
    match std::fs::read_to_string(dir.ready()) {
        Ok(json) => match Prepared::from_json(&json) {
            Ok(p) => LauncherView::Ready(p),
            Err(e) => LauncherView::Failed(format!("unreadable ready file {}: {e}", dir.ready())),
        },
        Err(_) => LauncherView::Initializing,
    }
}

/// The domain's state through the pod's libvirt (blocking; run on the blocking pool).
pub(crate) fn inspect(uri: &str, name: &str) -> DomainView {
    let conn = match Libvirt::connect(uri) {
        Ok(c) => c,
        Err(e) => return DomainView::Unreachable(e.to_string()),
    };
    let dom = match conn.lookup(name) {
        Ok(Some(d)) => d,
        Ok(None) => return DomainView::Absent,
        Err(e) => return DomainView::Unreachable(e.to_string()),
    };
    match dom.state() {
        Ok((state, reason)) => {
            let xml = dom.xml().ok();
            let machine = xml.as_deref().and_then(machine_of);
            let current_memory = xml.as_deref().and_then(crate::hotplug::current_memory);
            DomainView::Present { state, reason, machine, current_memory }
        }
        Err(e) if e.kind() == ErrorKind::NoDomain => DomainView::Absent,
        Err(e) => DomainView::Unreachable(e.to_string()),
    }
}

/// The `machine` attribute of the domain XML's `<os><type>`.
fn machine_of(xml: &str) -> Option<String> {
    let doc = roxmltree::Document::parse(xml).ok()?;
    let os = doc.root_element().children().find(|n| n.has_tag_name("os"))?;
    let ty = os.children().find(|n| n.has_tag_name("type"))?;
    ty.attribute("machine").map(str::to_owned)
}

/// Runs a domain operation (blocking; run on the blocking pool).
fn operate(uri: &str, name: &str, op: &DomainOp) -> Result<(), libvirt::Error> {
    let conn = Libvirt::connect(uri)?;
    match op {
        DomainOp::DefineAndStart(xml) => {
            let dom = conn.define(xml)?;
            dom.start()
        }
        DomainOp::Shutdown | DomainOp::Destroy => {
            let Some(dom) = conn.lookup(name)? else { return Ok(()) };
            let r = if *op == DomainOp::Shutdown { dom.shutdown() } else { dom.destroy() };
            match r {
                Err(e) if e.kind() == ErrorKind::InvalidState => Ok(()),
                other => other,
            }
        }
    }
}

pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    // A panic in libvirt glue is a bug; surface it loudly rather than losing the reconcile.
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// Claims of the VMI that are not ReadWriteMany (for `LiveMigratable`), read live once the guest runs.
async fn unshared_claims(ctx: &Context, vmi: &VirtualMachineInstance) -> Vec<String> {
    let ns = vmi.namespace().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let mut out = Vec::new();
    for v in vmi.spec.volumes.iter().flatten() {
        let claim = v
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.clone())
            .or_else(|| v.data_volume.as_ref().map(|d| d.name.clone()));
        let Some(claim) = claim else { continue };
        let rwx = api.get_opt(&claim).await.ok().flatten().is_some_and(|p| {
            p.spec.and_then(|s| s.access_modes).unwrap_or_default().iter().any(|m| m == "ReadWriteMany")
        });
        if !rwx {
            out.push(claim);
        }
    }
    out
}

async fn reconcile_once(vmi: &VirtualMachineInstance, ctx: &Context) -> Result<Requeue, Error> {
    let ns = vmi.namespace().unwrap_or_default();
    let name = vmi.name_any();
    let uid = vmi.uid().unwrap_or_default();
    // read
    let pod = active_pod(&ctx.stores.pods, &ctx.node, vmi);
    let (launcher, dir, terminating) = match &pod {
        None => (LauncherView::NoPod, None, false),
        Some(p) => {
            let dir = SocketDir::on_node(&p.uid().unwrap_or_default());
            (launcher_view(&dir), Some(dir.clone()), std::path::Path::new(&dir.terminating()).exists())
        }
    };
    let domain_name = domain_name(&ns, &name);
    let domain = match (&launcher, &dir) {
        (LauncherView::Ready(_), Some(d)) => {
            let (uri, n) = (d.libvirt_uri(), domain_name.clone());
            blocking(move || inspect(&uri, &n)).await
        }
        _ => DomainView::Absent,
    };
    let pod_status = pod.as_ref().and_then(|p| p.status.clone()).unwrap_or_default();
    let pod_ips: Vec<String> =
        pod_status.pod_ips.iter().flatten().map(|i| i.ip.clone()).chain(pod_status.pod_ip.clone()).fold(
            Vec::new(),
            |mut v, ip| {
                if !v.contains(&ip) {
                    v.push(ip);
                }
                v
            },
        );
    let secondary_ips = pod
        .as_ref()
        .and_then(|p| p.annotations().get(contracts::kubevirt::consts::ann::MULTUS_NETWORK_STATUS))
        .map(|a| plan::network_status_ips(a))
        .unwrap_or_default();
    let pod_terminated = matches!(pod_status.phase.as_deref(), Some("Succeeded" | "Failed"));
    let running_now = matches!(domain, DomainView::Present { state: DomainState::Running, .. });
    let unshared = if running_now && vmi.phase() != crds::kubevirt::VirtualMachineInstancePhase::Running {
        unshared_claims(ctx, vmi).await
    } else {
        Vec::new()
    };
    let use_emulation =
        effective(ctx.stores.kubevirts.state().iter().map(Arc::as_ref)).is_some_and(KubeVirt::use_emulation);
    // Pressed again after a while: a guest still booting (its ACPI handler not yet running) misses the first.
    let acpi_sent = ctx
        .acpi_sent
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&uid)
        .is_some_and(|at| at.elapsed() < plan::ACPI_RESEND);
    let migration = migration_role(vmi, &ctx.node, pod.as_deref(), &ctx.migrations);
    let observed = Observed {
        vmi,
        migration,
        pod_ips,
        secondary_ips,
        pod_terminated,
        launcher,
        terminating,
        domain,
        acpi_sent,
        use_emulation,
        unshared_claims: unshared,
        now: Time(Timestamp::now()),
    };
    // plan
    let plan = plan::plan(&observed);
    // apply
    if let (Some(op), Some(d)) = (&plan.domain, &dir) {
        let (uri, n, op2) = (d.libvirt_uri(), domain_name.clone(), op.clone());
        tracing::info!(vmi = %format!("{ns}/{name}"), op = op.name(), "domain operation");
        if let Err(e) = blocking(move || operate(&uri, &n, &op2)).await {
            ctx.events.publish(vmi, Severity::Warning, plan::event::SYNC_FAILED, &e.line()).await;
            return Err(e.into());
        }
        if *op == DomainOp::Shutdown {
            ctx.acpi_sent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(uid.clone(), std::time::Instant::now());
        }
    }
    for (warning, reason, message) in &plan.events {
        let severity = if *warning { Severity::Warning } else { Severity::Normal };
        ctx.events.publish(vmi, severity, reason, message).await;
    }
    if let Some(status) = plan.status {
        let mut next = vmi.clone();
        next.status = Some(status);
        let api: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
        api.replace(&name, &PostParams::default(), &next)
            .await
            .map_err(kube_err(format!("updating VMI {ns}/{name}")))?;
    }
    if let (Some(unpaused), Some(p)) = (plan.unpaused, &pod) {
        set_unpaused(ctx, p, unpaused).await?;
    }
    // Hotplugged volumes of a guest running here (not while it migrates away).
    if let (Some(p), Some(d), DomainView::Present { state: DomainState::Running | DomainState::Paused, .. }) =
        (&pod, &dir, &observed.domain)
        && matches!(observed.migration, plan::MigrationRole::None)
        && vmi.phase() == crds::kubevirt::VirtualMachineInstancePhase::Running
    {
        sync_volumes(ctx, vmi, p, d).await?;
    }
    // The source side of a live migration, once the guest runs here.
    if let (Some(p), Some(d), DomainView::Present { .. }) = (&pod, &dir, &observed.domain)
        && vmi.status.as_ref().is_some_and(|s| s.migration_state.is_some())
    {
        let frozen = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref()?.migration_configuration.clone());
        let options = migration_options(frozen, &ctx.stores.kubevirts);
        crate::migration::source::drive(&ctx.client, &ctx.migrations, vmi, &p.name_any(), d, options)
            .await
            .map_err(|e| Error::Migration(e.to_string()))?;
    }
    if plan.done
        && let Some(d) = &dir
        && !std::path::Path::new(&d.done()).exists()
        && std::path::Path::new(d.path()).is_dir()
    {
        std::fs::write(d.done(), b"")
            .map_err(|source| Error::Io { action: format!("writing {}", d.done()), source })?;
        ctx.acpi_sent.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&uid);
    }
    Ok(plan.requeue.map_or_else(Requeue::await_change, Requeue::requeue))
}

/// Brings the VMI's hotplugged volumes in line with its spec ([`crate::volumes`]): mounts into the launcher pod
/// `pod` (socket directory `dir`), attaches, detaches, unmounts; records the phases in `volumeStatus` (read fresh),
/// with an event each, and `LiveMigratable` again after an attach or detach (the claims changed).
async fn sync_volumes(ctx: &Context, vmi: &VirtualMachineInstance, pod: &Pod, dir: &SocketDir) -> Result<(), Error> {
    use crate::volumes::{self, Step};
    let hot: std::collections::BTreeSet<String> =
        vmi.spec.volumes.iter().flatten().filter(|v| v.is_hotpluggable()).map(|v| v.name.clone()).collect();
    let status = vmi.status.clone().unwrap_or_default().volume_status.unwrap_or_default();
    if hot.is_empty() && !status.iter().any(|s| s.hotplug_volume.is_some()) {
        return Ok(());
    }
    let (ns, name) = (vmi.namespace().unwrap_or_default(), vmi.name_any());
    let Some(launcher_pid) = volumes::container_pid(pod, contracts::kubevirt::launcher::COMPUTE_CONTAINER) else {
        return Ok(());
    };
    let attachment_pods = ctx.stores.attachments.state();
    let (uri, domain) = (dir.libvirt_uri(), domain_name(&ns, &name));
    let xml = {
        let (uri, domain) = (uri.clone(), domain.clone());
        blocking(move || Libvirt::connect(&uri)?.lookup(&domain)?.map(|d| d.xml()).transpose()).await?
    };
    let Some(xml) = xml else { return Ok(()) };
    let (attached, targets) = volumes::domain_disks(&xml);
    let mounted = status
        .iter()
        .map(|s| s.name.clone())
        .filter(|v| {
            volumes::present(launcher_pid, &contracts::kubevirt::launcher::hotplug_disk(v))
                || volumes::present(launcher_pid, &contracts::kubevirt::launcher::hotplug_device(v))
        })
        .collect();
    let observed = volumes::Observed {
        wanted: hot,
        status: status.clone(),
        attachments: volumes::attachments(&attachment_pods, &pod.uid().unwrap_or_default()),
        mounted,
        attached,
        targets,
    };
    let mut records: Vec<(String, volumes::Transition, Option<String>)> = Vec::new();
    let mut claims_changed = false;
    for (step, phase) in volumes::plan(&observed) {
        let done: Result<Option<String>, String> = match &step {
            Step::Mount { volume, mode } => {
                let from = attachment_pods
                    .iter()
                    .find(|p| p.metadata.uid.as_deref() == observed.attachments.get(volume).map(|a| a.uid.as_str()))
                    .and_then(|p| volumes::container_pid(p, "hotplug-disk"));
                match from {
                    Some(from) => {
                        let (v, m) = (volume.clone(), *mode);
                        blocking(move || volumes::mount(from, launcher_pid, &v, m))
                            .await
                            .map(|()| None)
                            .map_err(|e| e.to_string())
                    }
                    None => Err("the attachment pod's process is not found".into()),
                }
            }
            Step::Attach { volume, mode, target } | Step::Detach { volume, mode, target } => {
                let pvc_mode = match mode {
                    volumes::Mode::Filesystem => crate::domain_xml::PvcVolumeMode::Filesystem,
                    volumes::Mode::Block => crate::domain_xml::PvcVolumeMode::Block,
                };
                let ctx_xml = crate::domain_xml::ConvertContext::new(crate::domain_xml::Acceleration::Emulation)
                    .with_pvc_mode(volume, pvc_mode)
                    .with_hotplugged(volume, target);
                // A detached volume is no longer in the spec: its disk comes from the last known definition.
                let mut source = vmi.clone();
                if matches!(step, Step::Detach { .. }) {
                    source.spec.volumes.get_or_insert_with(Vec::new).push(crds::kubevirt::volume::Volume {
                        name: volume.clone(),
                        persistent_volume_claim: Some(crds::kubevirt::volume::PersistentVolumeClaimVolumeSource {
                            claim_name: volume.clone(),
                            hotpluggable: Some(true),
                            ..Default::default()
                        }),
                        ..Default::default()
                    });
                    source
                        .spec
                        .domain
                        .devices
                        .disks
                        .get_or_insert_with(Vec::new)
                        .push(crds::kubevirt::domain::Disk { name: volume.clone(), ..Default::default() });
                }
                match crate::domain_xml::hotplug_disk_xml(&source, &ctx_xml, volume) {
                    Ok(disk) => {
                        let (uri, domain, attach, t) =
                            (uri.clone(), domain.clone(), matches!(step, Step::Attach { .. }), target.clone());
                        claims_changed = true;
                        blocking(move || {
                            let dom = Libvirt::connect(&uri)?.lookup(&domain)?;
                            match dom {
                                Some(d) if attach => d.attach_device(&disk),
                                Some(d) => d.detach_device(&disk),
                                None => Ok(()),
                            }
                        })
                        .await
                        .map(|()| Some(t))
                        .map_err(|e| e.line())
                    }
                    Err(e) => Err(e.to_string()),
                }
            }
            Step::Unmount { volume } => {
                let v = volume.clone();
                blocking(move || volumes::unmount(launcher_pid, &v)).await.map(|()| None).map_err(|e| e.to_string())
            }
            Step::Record { .. } => Ok(None),
        };
        let volume = match &step {
            Step::Mount { volume, .. }
            | Step::Attach { volume, .. }
            | Step::Detach { volume, .. }
            | Step::Unmount { volume }
            | Step::Record { volume } => volume.clone(),
        };
        match done {
            Ok(target) => {
                tracing::info!(vmi = %format!("{ns}/{name}"), ?step, "hotplug volume step");
                if let Some(p) = phase {
                    records.push((volume, p, target.filter(|_| matches!(step, Step::Attach { .. }))));
                }
            }
            Err(e) => {
                tracing::warn!(vmi = %format!("{ns}/{name}"), ?step, error = %e, "hotplug volume step failed");
                ctx.events
                    .publish(vmi, Severity::Warning, plan::event::SYNC_FAILED, &format!("volume {volume}: {e}"))
                    .await;
            }
        }
    }
    if records.is_empty() && !claims_changed {
        return Ok(());
    }
    let unshared = if claims_changed { Some(unshared_claims(ctx, vmi).await) } else { None };
    let api: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
    for _ in 0..CONFLICT_RETRIES {
        let Some(mut fresh) = api.get_opt(&name).await.map_err(kube_err(format!("reading VMI {ns}/{name}")))? else {
            return Ok(());
        };
        let before = fresh.status.clone();
        let spec = fresh.clone();
        let status = fresh.status.get_or_insert_with(Default::default);
        let mut changed_phases = Vec::new();
        for (volume, phase, target) in &records {
            if volumes::record(status, volume, phase, target.as_deref()) {
                changed_phases.push(phase.clone());
            }
        }
        if let Some(unshared) = &unshared {
            status.set_condition(plan::live_migratable_condition(&spec, unshared), &Time(Timestamp::now()));
        }
        if fresh.status == before {
            return Ok(());
        }
        match api.replace(&name, &PostParams::default(), &fresh).await {
            Ok(_) => {
                for t in changed_phases {
                    ctx.events.publish(vmi, Severity::Normal, t.reason, &t.message).await;
                }
                return Ok(());
            }
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(kube_err(format!("updating the volume status of VMI {ns}/{name}"))(e)),
        }
    }
    Err(Error::Conflict(format!("{ns}/{name}")))
}

/// This node's part in the VMI's live migration, for the planner.
fn migration_role(
    vmi: &VirtualMachineInstance,
    node: &str,
    pod: Option<&Pod>,
    migrations: &crate::migration::Migrations,
) -> plan::MigrationRole {
    let Some(state) = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref()) else {
        return plan::MigrationRole::None;
    };
    let mine = state.source_node.as_deref() == Some(node)
        && pod.is_some_and(|p| state.source_pod.as_deref() == Some(p.name_any().as_str()));
    if !mine {
        return plan::MigrationRole::None;
    }
    if state.completed == Some(true) {
        return plan::MigrationRole::MigratedAway;
    }
    let started = state.start_timestamp.is_some() && state.failed != Some(true);
    if started || migrations.outbound(&vmi.uid().unwrap_or_default()) {
        plan::MigrationRole::Outbound
    } else {
        plan::MigrationRole::None
    }
}

/// The source's migration options: the configuration the VM controller froze into `migrationState` at the
/// hand-off (the cluster's with the VMI's MigrationPolicy laid over it), else the cluster's `KubeVirt`
/// (`spec.configuration.migrations`; a VMI handed off by an older controller).
fn migration_options(
    frozen: Option<crds::kubevirt::config::MigrationConfiguration>,
    kubevirts: &Store<KubeVirt>,
) -> crate::migration::source::Options {
    use crds::kubevirt::config::MigrationConfiguration as M;
    let m = frozen.unwrap_or_else(|| {
        let all = kubevirts.state();
        effective(all.iter().map(Arc::as_ref)).map(KubeVirt::migrations).unwrap_or_default()
    });
    let secs = |v: Option<i64>, d: i64| std::time::Duration::from_secs(v.unwrap_or(d).max(1).unsigned_abs());
    crate::migration::source::Options {
        bandwidth_mib_per_s: m
            .bandwidth_per_migration
            .as_ref()
            .and_then(|q| contracts::quantity::parse_bytes(&q.0).ok())
            .map_or(0, |b| b.div_ceil(1 << 20)),
        auto_converge: m.allow_auto_converge == Some(true),
        unsafe_migration: m.unsafe_migration_override == Some(true),
        timeouts: crate::migration::plan::Timeouts {
            completion_timeout_per_gib: secs(m.completion_timeout_per_gib, M::DEFAULT_COMPLETION_TIMEOUT_PER_GIB),
            progress_timeout: secs(m.progress_timeout, M::DEFAULT_PROGRESS_TIMEOUT),
        },
    }
}

/// Sets the launcher pod's readiness gate condition, when it differs.
async fn set_unpaused(ctx: &Context, pod: &Pod, unpaused: bool) -> Result<(), Error> {
    let want = if unpaused { "True" } else { "False" };
    let current = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == READINESS_GATE_UNPAUSED))
        .map(|c| c.status.as_str());
    if current == Some(want) {
        return Ok(());
    }
    let ns = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": READINESS_GATE_UNPAUSED, "status": want,
        "lastTransitionTime": Time(Timestamp::now()), "lastProbeTime": null,
    }]}});
    match api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Strategic(&patch)).await {
        Err(e) if is_not_found(&e) => Ok(()),
        r => r.map(drop).map_err(kube_err(format!("setting {READINESS_GATE_UNPAUSED} on pod {ns}/{}", pod.name_any()))),
    }
}

/// The label selector of the VMIs on `node`.
pub fn vmi_selector(node: &str) -> String {
    format!("{}={node}", label::NODE_NAME)
}

/// Where the agent reports: its reconcile metrics, the slot for its domain metrics ([`crate::domainstats`]), and
/// the instance (pod) name on its events.
pub struct Telemetry {
    /// Reconcile metrics.
    pub metrics: ReconcileMetrics,
    /// Filled with the domain metrics once the VMI cache exists.
    pub late: controller_runtime::metrics::LateRegistry,
    /// The reporting instance of events.
    pub instance: Option<String>,
}

/// Runs the node agent on `node` until `shutdown` resolves: the VMI reconciler, the heartbeat and the sweep, the
/// domain metrics, and with `node_api` (listen address, TLS) the node API for virt-api ([`crate::server`]).
/// The node is marked unschedulable when the agent stops.
pub async fn run(
    client: Client,
    node: String,
    telemetry: Telemetry,
    node_api: Option<(std::net::SocketAddr, Arc<rustls::ServerConfig>)>,
    migrations: Arc<crate::migration::Migrations>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let Telemetry { metrics, late, instance } = telemetry;
    use controller_runtime::store::{reflect, wait_ready};
    use futures::StreamExt;
    use kube::runtime::controller::Controller;
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::watcher;

    let pod_watch = || {
        watcher::Config::default()
            .labels(&format!("{}={}", label::KUBEVIRT, label::VIRT_LAUNCHER))
            .fields(&format!("spec.nodeName={node}"))
    };
    let attachment_watch = || {
        watcher::Config::default()
            .labels(&format!("{}={}", label::KUBEVIRT, label::HOTPLUG_DISK))
            .fields(&format!("spec.nodeName={node}"))
    };
    let stores = Stores {
        pods: reflect(Api::<Pod>::all(client.clone()), pod_watch()),
        attachments: reflect(Api::<Pod>::all(client.clone()), attachment_watch()),
        kubevirts: reflect(Api::<KubeVirt>::all(client.clone()), watcher::Config::default()),
    };
    wait_ready(&stores.pods, "launcher pods").await?;
    wait_ready(&stores.attachments, "attachment pods").await?;
    wait_ready(&stores.kubevirts, "KubeVirt configurations").await?;
    node::heartbeat(&client, &node, true).await?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        node: node.clone(),
        stores: stores.clone(),
        events: Events::new(client.clone(), "virt-handler", instance),
        metrics,
        policy: ErrorPolicy::new(CONTROLLER),
        acpi_sent: Mutex::new(HashMap::new()),
        migrations,
    });
    let (stop_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let stop = |tx: &tokio::sync::broadcast::Sender<()>| {
        let mut rx = tx.subscribe();
        async move {
            let _ = rx.recv().await;
        }
    };
    let beat = {
        let (client, node, pods, mut stopped) =
            (client.clone(), node.clone(), stores.pods.clone(), stop_tx.subscribe());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(node::HEARTBEAT);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        if let Err(e) = node::heartbeat(&client, &node, true).await {
                            tracing::warn!(error = %e, "heartbeat failed");
                        }
                        node::sweep(&pods);
                    }
                    _ = stopped.recv() => break,
                }
            }
        })
    };
    let setup = tokio::spawn(crate::pod_setup::run(stores.pods.clone(), stop(&stop_tx)));
    let server = match node_api {
        Some((listen, tls)) => Some(
            crate::server::start(listen, tls, client.clone(), node.clone(), stores.pods.clone(), stop(&stop_tx))
                .await?,
        ),
        None => None,
    };
    let vmis = Controller::new(
        Api::<VirtualMachineInstance>::all(client.clone()),
        watcher::Config::default().labels(&vmi_selector(&node)),
    );
    let proc = crate::vcpu::ProcFs::new("/proc");
    let sampler = crate::domainstats::Sampler::new(node.clone(), vmis.store(), stores.pods.clone(), proc);
    crate::domainstats::register(&late, Arc::new(sampler));
    let vmis = vmis
        .watches(Api::<Pod>::all(client.clone()), pod_watch(), |pod: Pod| {
            let owner = pod
                .owner_references()
                .iter()
                .find(|o| o.kind == "VirtualMachineInstance" && o.controller == Some(true))?;
            Some(ObjectRef::<VirtualMachineInstance>::new(&owner.name).within(&pod.namespace()?))
        })
        // An attachment pod names its VMI in a second, non-controlling owner reference.
        .watches(Api::<Pod>::all(client.clone()), attachment_watch(), |pod: Pod| {
            let owner = pod.owner_references().iter().find(|o| o.kind == "VirtualMachineInstance")?;
            Some(ObjectRef::<VirtualMachineInstance>::new(&owner.name).within(&pod.namespace()?))
        })
        .graceful_shutdown_on(stop(&stop_tx))
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    // Inbound migrations: the VMIs the migration controller handed to this node.
    let targets = Controller::new(
        Api::<VirtualMachineInstance>::all(client.clone()),
        watcher::Config::default().labels(&format!("{}={node}", label::MIGRATION_TARGET_NODE_NAME)),
    )
    .graceful_shutdown_on(stop(&stop_tx))
    .run(reconcile_target, error_policy, ctx)
    .for_each(|_| futures::future::ready(()));
    tracing::info!(%node, "node agent running");
    let stopper = async move {
        shutdown.await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(());
    };
    tokio::join!(vmis, targets, stopper);
    let _ = beat.await;
    let _ = setup.await;
    if let Some(server) = server {
        let _ = server.await;
    }
    if let Err(e) = node::heartbeat(&client, &node, false).await {
        tracing::warn!(error = %e, "marking the node unschedulable failed");
    }
    Ok(())
}
