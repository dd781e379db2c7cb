//! The VirtualMachineInstance controller (`kubevirt.io/v1`; upstream virt-controller's VMI part): every VMI gets
//! its virt-launcher pod, and the pod's progress becomes the VMI's phase and conditions up to the hand-over to
//! the node agent (`specs/kubevirt.md` §2.7, §2.8).
//!
//! ```text
//! VMI ─[vmi]─► virt-launcher pod (vmi::pod) ─kubelet─► compute container ready ─► Scheduled ─► node agent
//!  ▲                                         │
//!  └── phase, conditions, nodeName ◄─────────┘ (vmi::status reads the pod, vmi::plan decides)
//! ```
//!
//! One reconciler, shaped read → plan (pure, [`vmi::plan`]) → apply → status. Every read comes from watch
//! caches; the process plumbing (lease, caches, health server, error policy) is `controller-runtime`'s.

#![deny(missing_docs)]

pub mod context;
pub mod error;
pub mod vmi;

use std::future::Future;
use std::sync::Arc;

use controller_runtime::events::Events;
use controller_runtime::metrics::ReconcileMetrics;
use controller_runtime::policy::ErrorPolicy;
use controller_runtime::store::{reflect, reflect_stream, wait_ready};
use crds::cdi::datavolume::DataVolume;
use crds::kubevirt::VirtualMachineInstance;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::context::{Context, Stores};
use crate::vmi::pod::PodSettings;

/// Runs the VMI reconciler until `shutdown` resolves (graceful: in-flight reconciles finish). `instance` names
/// this replica in events.
pub async fn run_controllers(
    client: Client,
    settings: PodSettings,
    metrics: ReconcileMetrics,
    instance: Option<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let all = watcher::Config::default;
    let selector = context::launcher_pod_selector();
    // The pods' store is fed by the controller's own pod watch (see `reflect_stream`): a reconcile a pod change
    // triggers sees that change.
    let (pods, pod_events) = reflect_stream(Api::<Pod>::all(client.clone()), all().labels(&selector));
    let pod_events = pod_events.boxed();
    let stores = Stores {
        pods,
        pvcs: reflect(Api::<PersistentVolumeClaim>::all(client.clone()), all()),
        data_volumes: reflect(Api::<DataVolume>::all(client.clone()), all()),
    };
    wait_ready(&stores.pvcs, "PVCs").await?;
    wait_ready(&stores.data_volumes, "DataVolumes").await?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        settings,
        stores,
        events: Events::new(client.clone(), "virtualmachine-controller", instance),
        metrics,
        policy: ErrorPolicy::new(vmi::CONTROLLER),
    });
    let controller = Controller::new(Api::<VirtualMachineInstance>::all(client.clone()), all()).owns_stream(pod_events);
    // The pod store fills as the controller drives its stream; reconciles wait for its first complete list.
    tracing::info!("VMI controller running");
    controller
        .graceful_shutdown_on(shutdown)
        .run(vmi::reconcile, vmi::error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
    Ok(())
}
