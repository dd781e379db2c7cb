//! The source agent's side of a live migration: the proxies in the source pod, libvirt's peer-to-peer migration
//! on the blocking pool, a monitor enforcing the timeouts, and the result written to `migrationState`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use contracts::kubevirt::launcher::{MigrationChannel, SocketDir};
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::migration::{MigrationAbortStatus, MigrationMode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::{Client, ResourceExt};
use tokio::sync::oneshot;

use super::plan::{self, SourceStep, Timeouts};
use super::{Error, Migrations, proxy, update_state};
use crate::libvirt::{Libvirt, MigrateRequest};

/// How often the monitor reads the job's progress.
const MONITOR_PERIOD: Duration = Duration::from_secs(1);
/// `failureReason` of a migration cancelled by deleting its VMIM (upstream's text, trailing space included).
pub const ABORTED: &str = "Live migration aborted ";

/// An outbound migration this agent runs.
#[derive(Debug)]
pub struct Job {
    migration_uid: String,
    cancel: Option<oneshot::Sender<String>>,
}

/// What the source libvirt is asked for, besides the channels.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Bandwidth cap in MiB/s (0: none).
    pub bandwidth_mib_per_s: u64,
    /// `allowAutoConverge`.
    pub auto_converge: bool,
    /// `unsafeMigrationOverride`.
    pub unsafe_migration: bool,
    /// When to give up.
    pub timeouts: Timeouts,
}

/// One source-side step for `vmi`, whose launcher pod on this node is `pod` (name) with socket directory `dir`
/// (the node's view).
pub async fn drive(
    client: &Client,
    migrations: &Arc<Migrations>,
    vmi: &VirtualMachineInstance,
    pod: &str,
    dir: &SocketDir,
    options: Options,
) -> Result<(), Error> {
    let uid = vmi.uid().unwrap_or_default();
    let state = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref());
    let running = migrations.outbound(&uid);
    let step = plan::source_step(state, pod, running);
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &vmi.namespace().unwrap_or_default());
    let name = vmi.name_any();
    let migration_uid = state.and_then(|s| s.migration_uid.clone()).unwrap_or_default();
    let now = || Time(Timestamp::now());
    match step {
        SourceStep::Idle => Ok(()),
        SourceStep::Abort => {
            let cancel = migrations.jobs().get_mut(&uid).and_then(|j| j.cancel.take());
            if let Some(cancel) = cancel {
                tracing::info!(vmi = %name, "cancelling the migration (its VMIM was deleted)");
                let _ = cancel.send(ABORTED.to_owned());
                // The job may already have ended and written its result (`Succeeded`): never overwrite it.
                update_state(&api, &name, &migration_uid, |s, _| {
                    if s.failed != Some(true) && s.completed != Some(true) {
                        s.abort_status = Some(MigrationAbortStatus::Aborting.as_str().to_owned());
                    }
                })
                .await?;
            }
            Ok(())
        }
        // Both read a cache that may trail the job's own write of its result (the job ends, then its entry goes):
        // a result already written stands.
        SourceStep::AbortedBeforeStart => update_state(&api, &name, &migration_uid, |s, _| {
            if s.failed == Some(true) || s.completed == Some(true) {
                return;
            }
            s.failed = Some(true);
            s.failure_reason = Some(ABORTED.to_owned());
            s.abort_status = Some(MigrationAbortStatus::Succeeded.as_str().to_owned());
            s.end_timestamp = Some(now());
        })
        .await
        .map(drop),
        SourceStep::Orphaned => update_state(&api, &name, &migration_uid, |s, _| {
            if s.failed == Some(true) || s.completed == Some(true) {
                return;
            }
            s.failed = Some(true);
            s.failure_reason =
                Some("the source node agent restarted during the migration; its proxies are gone".to_owned());
            s.end_timestamp = Some(now());
        })
        .await
        .map(drop),
        SourceStep::Start { address, ports } => {
            start(client, migrations, vmi, dir, &migration_uid, &address, &ports, options).await
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn start(
    client: &Client,
    migrations: &Arc<Migrations>,
    vmi: &VirtualMachineInstance,
    dir: &SocketDir,
    migration_uid: &str,
    address: &str,
    ports: &BTreeMap<MigrationChannel, u16>,
    options: Options,
) -> Result<(), Error> {
    let tls = migrations.client_tls.clone().ok_or(Error::NotConfigured("no client certificate"))?;
    let uid = vmi.uid().unwrap_or_default();
    let name = vmi.name_any();
    let ns = vmi.namespace().unwrap_or_default();
    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns);
    let proxies = proxy::source(dir, address, ports, tls).await?;
    let (cancel_tx, cancel_rx) = oneshot::channel();
    migrations.jobs().insert(uid.clone(), Job { migration_uid: migration_uid.to_owned(), cancel: Some(cancel_tx) });
    let started = update_state(&api, &name, migration_uid, |s, _| {
        s.start_timestamp = Some(Time(Timestamp::now()));
        s.mode = Some(MigrationMode::PreCopy.as_str().to_owned());
    })
    .await;
    if !matches!(started, Ok(true)) {
        migrations.jobs().remove(&uid);
        return started.map(drop);
    }
    tracing::info!(vmi = %format!("{ns}/{name}"), target = address, "live migration starting");
    let in_pod = SocketDir::in_pod();
    let uri = dir.libvirt_uri();
    let domain = contracts::kubevirt::launcher::domain_name(&ns, &name);
    let memory = vmi_memory_bytes(vmi);
    let (migrations, migration_uid) = (migrations.clone(), migration_uid.to_owned());
    tokio::spawn(async move {
        let (monitor_stop_tx, monitor_stop_rx) = std::sync::mpsc::channel::<()>();
        let (timeout_tx, timeout_rx) = oneshot::channel::<String>();
        let migrate = {
            let (uri, domain) = (uri.clone(), domain.clone());
            tokio::task::spawn_blocking(move || -> Result<(), String> {
                let conn = Libvirt::connect(&uri).map_err(|e| e.line())?;
                let dom = conn.lookup(&domain).map_err(|e| e.line())?.ok_or("the domain is gone from the source")?;
                let xml = dom.xml().map_err(|e| e.line())?;
                let copy_disks = plan::disks_to_copy(&xml);
                let trusted = plan::shared_claims_coherent(&xml, &copy_disks);
                let request = MigrateRequest {
                    libvirt_uri: in_pod.migration_libvirt_uri(),
                    uri: format!("unix://{}", in_pod.migration_socket(MigrationChannel::Direct)),
                    disks_uri: format!("unix://{}", in_pod.migration_socket(MigrationChannel::Block)),
                    copy_disks,
                    bandwidth_mib_per_s: Some(options.bandwidth_mib_per_s),
                    auto_converge: options.auto_converge,
                    unsafe_migration: options.unsafe_migration || trusted,
                };
                dom.migrate(&request).map_err(|e| e.line())
            })
        };
        let monitor = {
            let timeouts = options.timeouts;
            tokio::task::spawn_blocking(move || monitor(&uri, &domain, memory, timeouts, &monitor_stop_rx, timeout_tx))
        };
        let mut migrate = migrate;
        let mut proxies = Some(proxies);
        let mut reason: Option<(String, bool)> = None;
        tokio::pin!(cancel_rx);
        tokio::pin!(timeout_rx);
        let result = loop {
            tokio::select! {
                r = &mut migrate => break r.unwrap_or_else(|e| Err(format!("the migration task failed: {e}"))),
                r = &mut cancel_rx, if reason.is_none() => {
                    reason = Some((r.unwrap_or_else(|_| ABORTED.to_owned()), true));
                    proxies = None; // the streams break; libvirt gives up and the guest stays here
                }
                r = &mut timeout_rx, if reason.is_none() => {
                    if let Ok(why) = r {
                        tracing::warn!(%why, "giving up the migration");
                        reason = Some((why, false));
                        proxies = None;
                    }
                }
            }
        };
        drop(proxies);
        let _ = monitor_stop_tx.send(());
        let _ = monitor.await;
        let api = api.clone();
        let written = update_state(&api, &name, &migration_uid, |s, _| {
            s.end_timestamp = Some(Time(Timestamp::now()));
            match (&result, &reason) {
                (Ok(()), _) => {
                    s.completed = Some(true);
                    if reason.as_ref().is_some_and(|(_, user)| *user) {
                        s.abort_status = Some(MigrationAbortStatus::Failed.as_str().to_owned());
                    }
                }
                (Err(_), Some((why, user))) => {
                    s.failed = Some(true);
                    s.failure_reason = Some(why.clone());
                    if *user {
                        s.abort_status = Some(MigrationAbortStatus::Succeeded.as_str().to_owned());
                    }
                }
                (Err(e), None) => {
                    s.failed = Some(true);
                    s.failure_reason = Some(e.clone());
                }
            }
        })
        .await;
        match (&result, &written) {
            (Ok(()), _) => tracing::info!(vmi = %format!("{ns}/{name}"), "live migration completed"),
            (Err(e), _) => tracing::warn!(vmi = %format!("{ns}/{name}"), error = %e, "live migration failed"),
        }
        if let Err(e) = written {
            tracing::warn!(vmi = %format!("{ns}/{name}"), error = %e, "recording the migration's result failed");
        }
        {
            let mut jobs = migrations.jobs();
            if jobs.get(&uid).is_some_and(|j| j.migration_uid == migration_uid) {
                jobs.remove(&uid);
            }
        }
    });
    Ok(())
}

/// The guest's memory in bytes (`spec.domain.memory.guest`, else the memory request), for the completion timeout.
fn vmi_memory_bytes(vmi: &VirtualMachineInstance) -> u64 {
    let d = &vmi.spec.domain;
    d.memory
        .as_ref()
        .and_then(|m| m.guest.as_ref())
        .or_else(|| d.resources.as_ref()?.requests.as_ref()?.get("memory"))
        .and_then(|q| contracts::quantity::parse_bytes(&q.0).ok())
        .unwrap_or(1 << 30)
}

/// Polls the job until `stop` says so; sends the reason to give up on `give_up` when a timeout is exceeded.
fn monitor(
    uri: &str,
    domain: &str,
    memory: u64,
    timeouts: Timeouts,
    stop: &std::sync::mpsc::Receiver<()>,
    give_up: oneshot::Sender<String>,
) {
    let Ok(conn) = Libvirt::connect(uri) else { return };
    let Ok(Some(dom)) = conn.lookup(domain) else { return };
    let begin = Instant::now();
    let (mut last_processed, mut last_progress) = (0u64, Instant::now());
    let mut total = memory;
    loop {
        match stop.recv_timeout(MONITOR_PERIOD) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let Ok(Some(progress)) = dom.job_progress() else { continue };
        total = total.max(progress.processed + progress.remaining);
        if progress.processed > last_processed {
            last_processed = progress.processed;
            last_progress = Instant::now();
        }
        if let Some(why) = timeouts.exceeded(total, begin.elapsed(), last_progress.elapsed()) {
            let _ = give_up.send(why);
            return;
        }
    }
}
