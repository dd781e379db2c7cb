//! Live migration, the node agents' side (contract §5.4):
//!
//! ```text
//! VMIM controller: target pod Ready ─► VMI migrationState {migrationUid, source/target node and pod}
//!                                       + label kubevirt.io/migrationTargetNodeName=<target>
//! target agent (target::reconcile): target launcher ready ─► proxy listeners (TLS, one port per channel)
//!                                   ─► migrationState.targetNodeAddress + targetDirectMigrationNodePorts
//! source agent (source::drive):     ─► unix-socket proxies in the source pod ─► startTimestamp, mode PreCopy
//!                                   ─► libvirt MigrateToURI3 peer to peer (block migration of the pod-local
//!                                      disks), watched for upstream's timeouts; cancelled by closing the proxies
//!                                   ─► completed / failed, endTimestamp, abortStatus
//! target agent:                     completed and the domain runs here ─► nodeName, labels, activePods: the VMI is
//!                                   this node's (the main reconciler drives it from then on)
//! ```
//!
//! The decisions are pure ([`plan`]); [`proxy`] carries the streams; [`Migrations`] is this process's memory (the
//! running jobs and open listeners), the rest lives in the VMI's status.

pub mod plan;
pub mod proxy;
pub mod source;
pub mod target;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use controller_runtime::api::is_conflict;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::VirtualMachineInstanceMigrationState as State;
use kube::api::{Api, PostParams};

/// This agent's migration state and identity: its TLS configurations for the proxies, its pod IP (where targets
/// listen), the outbound jobs and the inbound listeners.
pub struct Migrations {
    /// Client side of the proxies (virt-api's client certificate, verifying [`contracts::kubevirt::node_api::SERVER_NAME`]).
    pub client_tls: Option<Arc<rustls::ClientConfig>>,
    /// Server side of the proxies (the node API's configuration: client certificates of the handler CA only).
    pub server_tls: Option<Arc<rustls::ServerConfig>>,
    /// The address target proxies listen on and that is published (the agent's pod IP).
    pub pod_ip: Option<std::net::IpAddr>,
    /// Outbound migrations running here, by VMI UID.
    jobs: Mutex<HashMap<String, source::Job>>,
    /// Inbound proxies open here, by migration UID.
    listening: Mutex<HashMap<String, target::Listening>>,
}

impl Migrations {
    /// No migration running yet.
    pub fn new(
        client_tls: Option<Arc<rustls::ClientConfig>>,
        server_tls: Option<Arc<rustls::ServerConfig>>,
        pod_ip: Option<std::net::IpAddr>,
    ) -> Migrations {
        Migrations { client_tls, server_tls, pod_ip, jobs: Mutex::default(), listening: Mutex::default() }
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, HashMap<String, source::Job>> {
        self.jobs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn listening(&self) -> std::sync::MutexGuard<'_, HashMap<String, target::Listening>> {
        self.listening.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether an outbound migration of the VMI `vmi_uid` runs here.
    pub fn outbound(&self, vmi_uid: &str) -> bool {
        self.jobs().contains_key(vmi_uid)
    }
}

/// Errors of the migration steps.
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
    /// The proxies could not be set up.
    #[error(transparent)]
    Proxy(#[from] proxy::Error),
    /// This agent has no TLS configuration or pod IP for migrations.
    #[error("the node agent is not configured for migrations: {0}")]
    NotConfigured(&'static str),
    /// A hotplugged volume could not be put into the target pod.
    #[error("hotplugged {0}")]
    Hotplug(String),
}

/// Applies `change` to the VMI's `status.migrationState` when it still belongs to migration `migration_uid` (read
/// fresh, retried on conflicts); `change` may also edit the rest of the VMI. Returns whether it was written.
pub async fn update_state(
    api: &Api<VirtualMachineInstance>,
    name: &str,
    migration_uid: &str,
    change: impl Fn(&mut State, &mut VirtualMachineInstance),
) -> Result<bool, Error> {
    let kube_err = |source| Error::Kube { action: format!("updating the migration state of VMI {name}"), source };
    for _ in 0..8 {
        let Some(vmi) = api.get_opt(name).await.map_err(kube_err)? else { return Ok(false) };
        let mut copy = vmi.clone();
        let Some(state) = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref()) else { return Ok(false) };
        if state.migration_uid.as_deref() != Some(migration_uid) {
            return Ok(false);
        }
        let mut next = state.clone();
        change(&mut next, &mut copy);
        if let Some(s) = copy.status.as_mut() {
            s.migration_state = Some(next);
        }
        if copy.status == vmi.status && copy.metadata.labels == vmi.metadata.labels {
            return Ok(true);
        }
        match api.replace(name, &PostParams::default(), &copy).await {
            Ok(_) => return Ok(true),
            Err(e) if is_conflict(&e) => continue,
            Err(e) => return Err(kube_err(e)),
        }
    }
    Ok(false)
}
