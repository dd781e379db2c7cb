//! Leader election on a `coordination.k8s.io` Lease (through `kube-lease-manager`): of the replicas of a
//! controller, only the lease holder reconciles.
//!
//! Flow: wait for the lease as a follower (ready: a follower is healthy) → leading: run the work until SIGTERM or
//! until the lease is lost → stop the work gracefully (in-flight reconciles finish) → release. Losing the lease
//! is an error, so the process exits 1 and restarts as a follower: a controller never reconciles without it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube_lease_manager::LeaseManagerBuilder;

use crate::binary::shutdown_signal;

/// Which Lease, and who we are.
#[derive(Debug, Clone)]
pub struct LeaseSettings {
    /// Name of the Lease.
    pub name: String,
    /// Its namespace (the controller's).
    pub namespace: String,
    /// This replica's identity (its pod name).
    pub identity: String,
    /// Lease duration in seconds; the holder renews it every third of that.
    pub duration_secs: u64,
    /// Set while this replica leads ([`role_metrics`] reports it).
    pub leading: Arc<AtomicBool>,
}

/// Upstream's role gauges of one replica, e.g. `kubevirt_virt_controller_leading_status` (1 while it holds the
/// lease) and `kubevirt_virt_controller_ready_status` (1 once it is a healthy follower or the leader): a registry
/// to add to the process's `LateRegistry` at start, so that followers report too.
pub fn role_metrics(
    leading_name: &'static str,
    ready_name: &'static str,
    leading: Arc<AtomicBool>,
    ready: Arc<AtomicBool>,
) -> crate::metrics::Registry {
    use crate::metrics::Computed;
    crate::metrics::Registry::computed(move || {
        let flag = |f: &AtomicBool| if f.load(Ordering::Relaxed) { 1.0 } else { 0.0 };
        let mut l = Computed::gauge(leading_name, "Indication for an operating replica (it leads).");
        l.add(Vec::new(), flag(&leading));
        let mut r = Computed::gauge(ready_name, "Indication for a replica that is ready to take the lead.");
        r.add(Vec::new(), flag(&ready));
        vec![l, r]
    })
}

/// A future that resolves when the work must stop.
pub type Stop = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// Waits for the lease, then runs `work` until SIGTERM/SIGINT or the loss of the lease, both of which resolve the
/// [`Stop`] future handed to it. `ready` is set once this replica is a healthy follower or leader. Returns `Ok`
/// after a signal, an error when the lease was lost or the work failed.
pub async fn run_as_leader<F, Fut>(
    client: kube::Client,
    settings: &LeaseSettings,
    ready: Arc<AtomicBool>,
    work: F,
) -> anyhow::Result<()>
where
    F: FnOnce(Stop) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let lease = LeaseManagerBuilder::new(client, &settings.name)
        .with_namespace(&settings.namespace)
        .with_identity(&settings.identity)
        .with_duration(settings.duration_secs)
        .with_grace(settings.duration_secs / 3)
        .build()
        .await?;
    let (mut leading, lease_task) = lease.watch().await;
    ready.store(true, Ordering::Relaxed);
    tracing::info!(identity = %settings.identity, lease = %settings.name, "waiting for the leader lease");
    tokio::select! {
        () = shutdown_signal() => return Ok(()),
        r = leading.wait_for(|l| *l) => { r?; }
    }
    tracing::info!(identity = %settings.identity, "leading");
    settings.leading.store(true, Ordering::Relaxed);
    let mut watch = leading.clone();
    let (lost_tx, lost_rx) = tokio::sync::oneshot::channel::<()>();
    let stop: Stop = Box::pin(async move {
        tokio::select! {
            () = shutdown_signal() => {}
            _ = watch.wait_for(|l| !*l) => { let _ = lost_tx.send(()); }
        }
    });
    let result = work(stop).await;
    settings.leading.store(false, Ordering::Relaxed);
    drop(leading);
    let _ = lease_task.await;
    result?;
    if lost_rx.await.is_ok() {
        anyhow::bail!("lost the leader lease");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_gauges_follow_the_flags() {
        let (leading, ready) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
        let r = role_metrics("x_leading_status", "x_ready_status", leading.clone(), ready);
        let text = r.render();
        assert!(text.contains("\nx_leading_status 0\n") && text.contains("\nx_ready_status 1\n"), "{text}");
        leading.store(true, Ordering::Relaxed);
        assert!(r.render().contains("\nx_leading_status 1\n"));
    }
}
