//! KubeVirt's virt-controller (`kubevirt.io/v1`): the VirtualMachine controller runs each VM's VMI by its run
//! strategy and creates its DataVolumes (`specs/kubevirt.md` §1); the VirtualMachineInstanceReplicaSet controller
//! keeps N VMIs (§4); the VirtualMachineInstance controller gives every
//! VMI its virt-launcher pod, and the pod's progress becomes the VMI's phase and conditions up to the hand-over to
//! the node agent (§2.7, §2.8).
//!
//! ```text
//! VMIRS ─[replicaset]─► N VMIs (generateName), finished ones replaced
//! VM ─[vm]─► DataVolumes (dataVolumeTemplates), ControllerRevision + VMI (same name) ─► status.printableStatus …
//! VMI ─[vmi]─► virt-launcher pod (vmi::pod) ─kubelet─► compute container ready ─► Scheduled ─► node agent
//!  ▲                                         │
//!  └── phase, conditions, nodeName ◄─────────┘ (vmi::status reads the pod, vmi::plan decides)
//! ```
//!
//! Three reconcilers, each shaped read → plan (pure: [`vm::plan`], [`replicaset::plan`], [`vmi::plan`]) → apply → status. Every read comes
//! from watch caches; the process plumbing (lease, caches, health server, error policy) is `controller-runtime`'s.

#![deny(missing_docs)]

pub mod context;
pub mod error;
pub mod metrics;
pub mod migration;
pub mod replicaset;
pub mod vm;
pub mod vmi;

use std::future::Future;
use std::sync::Arc;

use controller_runtime::events::Events;
use controller_runtime::metrics::ReconcileMetrics;
use controller_runtime::policy::ErrorPolicy;
use controller_runtime::store::{reflect, reflect_stream, wait_ready};
use crds::cdi::datavolume::DataVolume;
use crds::kubevirt::config::KubeVirt;
use crds::kubevirt::migration_policy::MigrationPolicy;
use crds::kubevirt::{
    VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration, VirtualMachineInstanceReplicaSet,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::runtime::controller::Controller;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::context::{Context, Stores};
use crate::vmi::pod::PodSettings;

/// Runs the VM and VMI reconcilers until `shutdown` resolves (graceful: in-flight reconciles finish). `instance` names
/// this replica in events; upstream's cluster metrics ([`metrics`]) go into `late` once the caches exist.
pub async fn run_controllers(
    client: Client,
    settings: PodSettings,
    metrics: ReconcileMetrics,
    late: controller_runtime::metrics::LateRegistry,
    instance: Option<String>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let all = watcher::Config::default;
    let selector = context::launcher_pod_selector();
    // The pods' store is fed by the controller's own pod watch (see `reflect_stream`): a reconcile a pod change
    // triggers sees that change.
    let (pods, pod_events) = reflect_stream(Api::<Pod>::all(client.clone()), all().labels(&selector));
    let pod_events = pod_events.boxed();
    // Likewise the VMIs' store, fed by the VM controller's VMI watch.
    let (vmis, vmi_events) = reflect_stream(Api::<VirtualMachineInstance>::all(client.clone()), all());
    let vmi_events = vmi_events.boxed();
    // And the DataVolumes' store, fed by the VM controller's DataVolume watch: a VM woken by its DataVolume's new
    // phase (e.g. WaitForFirstConsumer, when it must create the VMI) reads that phase, not the one before.
    let (data_volumes, dv_events) = reflect_stream(Api::<DataVolume>::all(client.clone()), all());
    let dv_events = dv_events.boxed();
    let stores = Stores {
        pods,
        pvcs: reflect(Api::<PersistentVolumeClaim>::all(client.clone()), all()),
        data_volumes,
        vmis,
        migrations: reflect(Api::<VirtualMachineInstanceMigration>::all(client.clone()), all()),
        migration_policies: reflect(Api::<MigrationPolicy>::all(client.clone()), all()),
        kubevirts: reflect(Api::<KubeVirt>::all(client.clone()), all()),
    };
    wait_ready(&stores.pvcs, "PVCs").await?;
    wait_ready(&stores.migrations, "VirtualMachineInstanceMigrations").await?;
    // The KubeVirt and MigrationPolicy caches are not waited for here (an installation without those CRDs still
    // runs VMs); the migration controller waits for them when it needs them.
    let ctx = Arc::new(Context {
        client: client.clone(),
        settings,
        stores,
        events: Events::new(client.clone(), "virtualmachine-controller", instance),
        metrics,
        policy: ErrorPolicy::new(vmi::CONTROLLER),
    });
    let shutdown = futures::FutureExt::shared(Box::pin(shutdown));
    let vmi_controller =
        Controller::new(Api::<VirtualMachineInstance>::all(client.clone()), all()).owns_stream(pod_events);
    // A VM's VMI and DataVolumes carry it as controller; PVCs are read from the cache (their binding shows in the
    // DataVolume's phase, which triggers).
    let vm_controller = Controller::new(Api::<VirtualMachine>::all(client.clone()), all())
        .owns_stream(vmi_events)
        .owns_stream(dv_events);
    late.add(metrics::registry(ctx.stores.vmis.clone(), ctx.stores.migrations.clone(), vm_controller.store()));
    // The pod, VMI and DataVolume stores fill as the controllers drive their streams; reconciles wait for their
    // first lists.
    tracing::info!("VM, VMIRS and VMI controllers running");
    let vmis = vmi_controller
        .graceful_shutdown_on(shutdown.clone())
        .run(vmi::reconcile, vmi::error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let vms = vm_controller
        .graceful_shutdown_on(shutdown.clone())
        .run(vm::reconcile, vm::error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let sets = Controller::new(Api::<VirtualMachineInstanceReplicaSet>::all(client.clone()), all())
        .owns(Api::<VirtualMachineInstance>::all(client.clone()), all())
        .graceful_shutdown_on(shutdown.clone())
        .run(replicaset::reconcile, replicaset::error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    // A migration is looked at again when its VMI (migrationState, node) or its target pod changes.
    let migration_store = ctx.stores.migrations.clone();
    let migrations = Controller::new(Api::<VirtualMachineInstanceMigration>::all(client.clone()), all())
        .watches(Api::<VirtualMachineInstance>::all(client.clone()), all(), move |vmi: VirtualMachineInstance| {
            let (ns, name) = (vmi.metadata.namespace.clone(), vmi.metadata.name.clone());
            migration_store
                .state()
                .into_iter()
                .filter(move |m| m.metadata.namespace == ns && Some(&m.spec.vmi_name) == name.as_ref())
                .map(|m| kube::runtime::reflector::ObjectRef::from_obj(m.as_ref()))
        })
        .watches(
            Api::<Pod>::all(client.clone()),
            all().labels(contracts::kubevirt::consts::label::MIGRATION_JOB_UID),
            |pod: Pod| {
                let name = pod
                    .metadata
                    .annotations
                    .as_ref()?
                    .get(contracts::kubevirt::consts::ann::MIGRATION_JOB_NAME)?
                    .clone();
                Some(kube::runtime::reflector::ObjectRef::new(&name).within(pod.metadata.namespace.as_deref()?))
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(migration::reconcile, migration::error_policy, ctx)
        .for_each(|_| futures::future::ready(()));
    futures::future::join4(vmis, vms, sets, migrations).await;
    Ok(())
}
