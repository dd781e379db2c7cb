//! The migration controller (upstream's `pkg/virt-controller/watch/migration`): one VirtualMachineInstanceMigration
//! → its target pod → the hand-off to the node agents → the outcome.
//!
//! ```text
//! read (the VMIM; its VMI, live from the API server; its target pods and the VMI's source pod from the pod cache;
//!       the other migrations from the VMIM cache)
//!   ─► plan::plan (pure)
//!   ─► apply (finalizer, create / delete the target pod, replace the VMI, the VMIM's status, events)
//! ```

pub mod plan;

use std::collections::BTreeMap;
use std::sync::Arc;

use contracts::kubevirt::consts::{finalizer, label};
use controller_runtime::api::delete_if_present;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;

use crate::context::{Context, reconcile_retrying};
use crate::error::{Result, kube};
use crate::vmi::plan::VolumeClaim;
use crds::kubevirt::config::MigrationConfiguration;
use crds::kubevirt::migration_policy::best_match;
use k8s_openapi::api::core::v1::Namespace;
use plan::{Action, Frozen, Observed};

/// Name of this reconciler in metrics and logs.
pub const CONTROLLER: &str = "migration";

/// Reconciles one migration.
pub async fn reconcile(vmim: Arc<VirtualMachineInstanceMigration>, ctx: Arc<Context>) -> Result<Requeue> {
    let ctx = ctx.as_ref();
    reconcile_retrying(ctx, CONTROLLER, "VirtualMachineInstanceMigration", vmim.as_ref(), |o| async move {
        reconcile_once(&o, ctx).await
    })
    .await
}

/// The error policy: fatal errors wait for a change, transient ones back off.
pub fn error_policy(
    vmim: Arc<VirtualMachineInstanceMigration>,
    err: &crate::error::Error,
    ctx: Arc<Context>,
) -> Requeue {
    ctx.policy.on_error(vmim.as_ref(), err)
}

/// Whether `m` counts against the parallelism caps: accepted and handed towards the nodes, not over.
fn running(m: &VirtualMachineInstanceMigration) -> bool {
    m.phase().is_some_and(|p| !p.is_final() && *p != MigrationPhase::Pending)
}

/// The migrations of VMI `ns/name` in the cache.
pub fn of_vmi(ctx: &Context, ns: &str, name: &str) -> Vec<Arc<VirtualMachineInstanceMigration>> {
    ctx.stores
        .migrations
        .state()
        .into_iter()
        .filter(|m| m.namespace().as_deref() == Some(ns) && m.spec.vmi_name == name)
        .collect()
}

async fn target_pods(ctx: &Context, vmim: &VirtualMachineInstanceMigration) -> Result<Vec<Pod>> {
    let uid = vmim.uid().unwrap_or_default();
    let ns = vmim.namespace().unwrap_or_default();
    let cached: Vec<Pod> = ctx
        .stores
        .pods
        .state()
        .iter()
        .filter(|p| {
            p.namespace().as_deref() == Some(ns.as_str()) && p.labels().get(label::MIGRATION_JOB_UID) == Some(&uid)
        })
        .map(|p| p.as_ref().clone())
        .collect();
    if !cached.is_empty() || vmim.phase().is_none_or(|p| *p == MigrationPhase::Pending) {
        return Ok(cached);
    }
    // The cache may lag a pod created a moment ago.
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let list = api
        .list(&ListParams::default().labels(&format!("{}={uid}", label::MIGRATION_JOB_UID)))
        .await
        .map_err(kube(format!("listing the target pods of migration {ns}/{}", vmim.name_any())))?;
    Ok(list.items)
}

/// The configuration a migration of `vmi` runs with: `cluster` with the best-matching MigrationPolicy (by the VMI's
/// and its namespace's labels) laid over it.
async fn frozen(ctx: &Context, vmi: &VirtualMachineInstance, cluster: MigrationConfiguration) -> Result<Frozen> {
    if !crate::context::cache_ready(&ctx.stores.migration_policies, "MigrationPolicy").await {
        return Err(crate::error::Error::NotReady("MigrationPolicy"));
    }
    let policies = ctx.stores.migration_policies.state();
    if policies.is_empty() {
        return Ok(Frozen { policy: None, configuration: cluster });
    }
    let ns = vmi.namespace().unwrap_or_default();
    let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
    let namespace = namespaces.get(&ns).await.map_err(kube(format!("reading namespace {ns}")))?;
    let chosen = best_match(policies.iter().map(|p| p.as_ref()), vmi.labels(), namespace.labels());
    Ok(match chosen {
        Some(p) => Frozen { policy: Some(p.name_any()), configuration: p.spec.apply_to(&cluster) },
        None => Frozen { policy: None, configuration: cluster },
    })
}

async fn reconcile_once(vmim: &VirtualMachineInstanceMigration, ctx: &Context) -> Result<Requeue> {
    let ns = vmim.namespace().unwrap_or_default();
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let vmi =
        vmis.get_opt(&vmim.spec.vmi_name).await.map_err(kube(format!("reading VMI {ns}/{}", vmim.spec.vmi_name)))?;
    let targets = target_pods(ctx, vmim).await?;
    let uid = vmim.uid().unwrap_or_default();
    let source_pod = vmi.as_ref().and_then(|v| {
        let node = v.status.as_ref()?.node_name.clone()?;
        let vmi_uid = v.uid()?;
        ctx.stores
            .pods
            .state()
            .into_iter()
            .filter(|p| p.labels().get(label::CREATED_BY) == Some(&vmi_uid))
            .filter(|p| p.labels().get(label::MIGRATION_JOB_UID) != Some(&uid))
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(&node))
            .find(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
            .map(|p| p.name_any())
    });
    let mine = (vmim.creation_timestamp(), vmim.name_any());
    let older_in_flight = of_vmi(ctx, &ns, &vmim.spec.vmi_name).iter().any(|m| {
        m.uid().as_deref() != Some(uid.as_str()) && !m.is_final() && (m.creation_timestamp(), m.name_any()) < mine
    });
    let source_node = vmi.as_ref().and_then(|v| v.status.as_ref()?.node_name.clone());
    let all = ctx.stores.migrations.state();
    let others = all.iter().filter(|m| m.uid().as_deref() != Some(uid.as_str()) && running(m));
    let (mut cluster, mut node) = (0, 0);
    for m in others {
        cluster += 1;
        let from = ctx
            .stores
            .vmis
            .state()
            .into_iter()
            .find(|v| v.namespace() == m.namespace() && v.name_any() == m.spec.vmi_name)
            .and_then(|v| v.status.as_ref()?.node_name.clone());
        if from.is_some() && from == source_node {
            node += 1;
        }
    }
    let claims = vmi.as_ref().and_then(|v| {
        crate::vmi::claims(ctx, v)
            .into_iter()
            .map(|(volume, c)| match c {
                VolumeClaim::Bound(claim) => Some((volume, claim)),
                _ => None,
            })
            .collect::<Option<BTreeMap<_, _>>>()
    });
    // Caps and tunables are the cluster's once its KubeVirt is listed (upstream's defaults until then).
    let _ = crate::context::cache_ready(&ctx.stores.kubevirts, "KubeVirt").await;
    let settings = ctx.migration_configuration();
    let caps = (
        settings.parallel_migrations_per_cluster.unwrap_or(MigrationConfiguration::DEFAULT_PARALLEL_PER_CLUSTER)
            as usize,
        settings
            .parallel_outbound_migrations_per_node
            .unwrap_or(MigrationConfiguration::DEFAULT_PARALLEL_OUTBOUND_PER_NODE) as usize,
    );
    // The policy is resolved for the hand-off only (it reads the namespace).
    let configuration = match (vmim.phase(), &vmi) {
        (Some(MigrationPhase::Scheduled), Some(v)) => frozen(ctx, v, settings).await?,
        _ => Frozen { policy: None, configuration: settings },
    };
    let observed = Observed {
        vmim,
        vmi: vmi.as_ref(),
        target_pods: targets.iter().collect(),
        source_pod,
        older_in_flight,
        running: (cluster, node),
        caps,
        configuration: &configuration,
        claims,
        settings: &ctx.settings,
        now: Time(Timestamp::now()),
    };
    let plan = plan::plan(&observed);
    for action in plan.actions {
        apply(ctx, vmim, action).await?;
    }
    if vmim.is_final() {
        let mine = of_vmi(ctx, &ns, &vmim.spec.vmi_name);
        let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(ctx.client.clone(), &ns);
        for name in plan::garbage(&mine.iter().map(AsRef::as_ref).collect::<Vec<_>>()) {
            delete_if_present(&api, &name).await.map_err(kube(format!("garbage-collecting migration {ns}/{name}")))?;
        }
    }
    Ok(plan.requeue.map_or_else(Requeue::await_change, Requeue::requeue))
}

async fn apply(ctx: &Context, vmim: &VirtualMachineInstanceMigration, action: Action) -> Result<()> {
    let ns = vmim.namespace().unwrap_or_default();
    let name = vmim.name_any();
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(ctx.client.clone(), &ns);
    let finalizers = |add: bool| {
        let mut f: Vec<String> =
            vmim.finalizers().iter().filter(|f| f.as_str() != finalizer::MIGRATION_JOB).cloned().collect();
        if add {
            f.push(finalizer::MIGRATION_JOB.to_owned());
        }
        serde_json::json!({"metadata": {"finalizers": f, "resourceVersion": vmim.resource_version()}})
    };
    match action {
        Action::AddFinalizer | Action::RemoveFinalizer => {
            let patch = finalizers(matches!(action, Action::AddFinalizer));
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                r => {
                    r.map_err(kube(format!("updating the finalizers of migration {ns}/{name}")))?;
                }
            }
        }
        Action::CreatePod(pod) => {
            if !target_pods(ctx, vmim).await?.is_empty() {
                return Ok(());
            }
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            let created = pods
                .create(&PostParams::default(), &pod)
                .await
                .map_err(kube(format!("creating the target pod of migration {ns}/{name}")))?;
            tracing::info!(migration = %format!("{ns}/{name}"), pod = %created.name_any(), "created migration target pod");
            let message = format!("Created migration target pod {}", created.name_any());
            ctx.events
                .publish(vmim, controller_runtime::events::Severity::Normal, plan::event::CREATED, &message)
                .await;
        }
        Action::DeletePod(pod) => {
            let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
            delete_if_present(&pods, &pod).await.map_err(kube(format!("deleting pod {ns}/{pod}")))?;
        }
        Action::UpdateVmi(next) => {
            let vmis: Api<VirtualMachineInstance> = Api::namespaced(ctx.client.clone(), &ns);
            vmis.replace(&next.name_any(), &PostParams::default(), &next)
                .await
                .map_err(kube(format!("updating VMI {ns}/{} for migration {name}", next.name_any())))?;
        }
        Action::UpdateStatus(status) => {
            let patch = serde_json::json!({"status": status});
            match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                r => {
                    r.map_err(kube(format!("updating the status of migration {ns}/{name}")))?;
                }
            }
        }
        Action::Event { severity, reason, message } => ctx.events.publish(vmim, severity, reason, &message).await,
    }
    Ok(())
}
