//! Instancetypes and preferences (`instancetype.kubevirt.io/v1beta1`) applied to the VMI a VM starts:
//!
//! * [`resolve`] (reads the API): the spec the VM uses is the one **captured** in a ControllerRevision the first
//!   time it was needed (`status.instancetypeRef.controllerRevisionRef`), so a later edit of the instancetype does
//!   not change the VM; a missing instancetype is reported with upstream's "Failure to find …" message;
//! * [`apply`] (pure, in `crds` because admission applies it too): the instancetype's vCPUs (spread by the preference's topology, default sockets) and memory
//!   go into the template; a template that sets them itself conflicts (upstream's message names the fields); the
//!   preference fills only what the template leaves unset (disk/CD-ROM/LUN bus, interface model, machine type).

use controller_runtime::api::{create_if_absent, is_not_found};
use crds::kubevirt::VirtualMachine;
pub use crds::kubevirt::instancetype::{Captured, Expansion, apply, captured_revision, conflict_message};
use crds::kubevirt::instancetype::{
    VirtualMachineClusterInstancetype, VirtualMachineClusterPreference, VirtualMachineInstancetype,
    VirtualMachinePreference, kind,
};
use crds::kubevirt::vm::{ControllerRevisionRef, InstancetypeStatusRef, Matcher};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::Api;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::Context;
use crate::error::{Result, kube};

/// Reads (and on first use captures) the VM's instancetype and preference. `Ok(Err(message))` when one does not
/// exist (the user's error, reported on the VM).
pub async fn resolve(ctx: &Context, vm: &VirtualMachine) -> Result<std::result::Result<Expansion, String>> {
    let status = vm.status.clone().unwrap_or_default();
    let ns = vm.namespace().unwrap_or_default();
    let mut e = Expansion::default();
    if let Some(m) = &vm.spec.instancetype {
        let k = m.kind.clone().unwrap_or_else(|| kind::CLUSTER_INSTANCETYPE.into());
        let found = if k == kind::INSTANCETYPE {
            capture(
                ctx,
                Api::<VirtualMachineInstancetype>::namespaced(ctx.client.clone(), &ns),
                vm,
                m,
                &k,
                status.instancetype_ref.as_ref(),
            )
            .await?
        } else {
            capture(
                ctx,
                Api::<VirtualMachineClusterInstancetype>::all(ctx.client.clone()),
                vm,
                m,
                &k,
                status.instancetype_ref.as_ref(),
            )
            .await?
        };
        match found {
            Ok(c) => e.instancetype = Some(c),
            Err(message) => return Ok(Err(format!("Failure to find instancetype: {message}"))),
        }
    }
    if let Some(m) = &vm.spec.preference {
        let k = m.kind.clone().unwrap_or_else(|| kind::CLUSTER_PREFERENCE.into());
        let found = if k == kind::PREFERENCE {
            capture(
                ctx,
                Api::<VirtualMachinePreference>::namespaced(ctx.client.clone(), &ns),
                vm,
                m,
                &k,
                status.preference_ref.as_ref(),
            )
            .await?
        } else {
            capture(
                ctx,
                Api::<VirtualMachineClusterPreference>::all(ctx.client.clone()),
                vm,
                m,
                &k,
                status.preference_ref.as_ref(),
            )
            .await?
        };
        match found {
            Ok(c) => e.preference = Some(c),
            Err(message) => return Ok(Err(format!("Failure to find preference: {message}"))),
        }
    }
    Ok(Ok(e))
}

/// The captured spec of kind `K` (read through `api`) the matcher `m` names: from the revision the status (or `m.revisionName`) names
/// when it still matches, else read from the object and captured in a new revision (owned by the VM).
async fn capture<K, S>(
    ctx: &Context,
    api: Api<K>,
    vm: &VirtualMachine,
    m: &Matcher,
    kind_name: &str,
    recorded: Option<&InstancetypeStatusRef>,
) -> Result<std::result::Result<Captured<S>, String>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
    S: DeserializeOwned,
{
    let ns = vm.namespace().unwrap_or_default();
    let name = m.name.clone().unwrap_or_default();
    let revisions: Api<ControllerRevision> = Api::namespaced(ctx.client.clone(), &ns);
    let reference = |revision: String| InstancetypeStatusRef {
        name: Some(name.clone()),
        kind: Some(kind_name.to_owned()),
        controller_revision_ref: Some(ControllerRevisionRef { name: revision }),
        ..Default::default()
    };
    if let Some(revision) = captured_revision(m, kind_name, recorded) {
        match revisions.get(&revision).await {
            Ok(r) => {
                let spec = r.data.and_then(|d| d.0.get("spec").cloned()).unwrap_or_default();
                if let Ok(spec) = serde_json::from_value::<S>(spec) {
                    return Ok(Ok(Captured { reference: reference(revision), spec }));
                }
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(kube(format!("reading ControllerRevision {ns}/{revision}"))(e)),
        }
    }
    let object = match api.get(&name).await {
        Ok(o) => o,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Err(s.message)),
        Err(e) => return Err(kube(format!("reading {kind_name} {name}"))(e)),
    };
    let revision_name = format!(
        "{}-{}-{}-{}",
        vm.name_any(),
        name,
        object.uid().unwrap_or_default(),
        object.meta().generation.unwrap_or_default()
    );
    let data = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "spec": serde_json::to_value(&object).ok().and_then(|v| v.get("spec").cloned()),
    });
    let revision = ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name.clone()),
            namespace: Some(ns.clone()),
            owner_references: Some(vec![super::plan::owner_reference(vm)]),
            ..Default::default()
        },
        data: Some(RawExtension(data.clone())),
        revision: object.meta().generation.unwrap_or_default(),
    };
    create_if_absent(&revisions, &revision)
        .await
        .map_err(kube(format!("creating ControllerRevision {ns}/{revision_name}")))?;
    let spec = serde_json::from_value::<S>(data["spec"].clone())
        .map_err(|e| crate::error::Error::Conflict(format!("{kind_name} {name}: {e}")))?;
    Ok(Ok(Captured { reference: reference(revision_name), spec }))
}
