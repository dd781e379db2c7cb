//! What admission reads from the API server: the instancetype and preference a VirtualMachine names (upstream's
//! VM admitter applies them before it validates the template, so a VM whose memory comes from its instancetype is
//! admitted and one that also sets it is refused). A VM whose status names the ControllerRevision that captured
//! them (the VM controller writes it) is checked against that revision — the instancetype may have changed or
//! gone since; otherwise the live object is read. The migration create validator reads the VMI a migration names
//! and the migrations already labelled with it ([`for_migration_review`]).

use controller_runtime::api::api_message;
use crds::kubevirt::consts::label;
use crds::kubevirt::instancetype::{
    Captured, Expansion, VirtualMachineClusterInstancetype, VirtualMachineClusterPreference,
    VirtualMachineInstancetype, VirtualMachinePreference, captured_revision, kind,
};
use crds::kubevirt::migration::VirtualMachineInstanceMigration;
use crds::kubevirt::vm::{InstancetypeStatusRef, Matcher};
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::validate::migration::MigrationLookup;

/// Everything a webhook may need beyond the request (empty: nothing was looked up).
#[derive(Debug, Clone, Default)]
pub struct Lookups {
    /// The instancetype and preference of the VM under review; `Err` is the user's error ("Failure to find …").
    pub vm_expansion: Option<Result<Expansion, String>>,
    /// What the migration create validator read (`None`: nothing, e.g. no `spec.vmiName`).
    pub migration: Option<MigrationLookup>,
}

/// Looks up what the review `body` (of the migration create validator) needs: the VMI `spec.vmiName` names and
/// the migrations labelled `kubevirt.io/vmi-name=<vmiName>` (upstream's `kubevirt.io/vmi-name in (<vmiName>)`), in
/// the migration's namespace (else the request's); nothing without a `vmiName`.
pub async fn for_migration_review(client: &Client, body: &[u8]) -> Lookups {
    let Some(request) = serde_json::from_slice::<Value>(body).ok().and_then(|v| v.get("request").cloned()) else {
        return Lookups::default();
    };
    let object = request.get("object").cloned().unwrap_or(Value::Null);
    let vmi_name = object.pointer("/spec/vmiName").and_then(Value::as_str).unwrap_or_default().to_owned();
    if vmi_name.is_empty() {
        return Lookups::default();
    }
    let ns = migration_namespace(&request);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns);
    let vmi = vmis.get_opt(&vmi_name).await.map_err(|e| api_message(&e));
    let migrations: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), &ns);
    let selector = ListParams::default().labels(&format!("{}={vmi_name}", label::VMI_NAME));
    let listed = match &vmi {
        // Upstream lists only once the VMI passed its checks; an unread list cannot refuse then.
        Ok(Some(_)) => migrations.list(&selector).await.map(|l| l.items).map_err(|e| api_message(&e)),
        _ => Ok(Vec::new()),
    };
    Lookups { migration: Some(MigrationLookup { vmi, migrations: listed }), ..Lookups::default() }
}

/// The namespace of the migration under review: its own, else the request's.
pub fn migration_namespace(request: &Value) -> String {
    let own = request.pointer("/object/metadata/namespace").and_then(Value::as_str).filter(|n| !n.is_empty());
    own.or_else(|| request.get("namespace").and_then(Value::as_str)).unwrap_or_default().to_owned()
}

/// Looks up what the review `body` (of the VM validator) needs; nothing for other requests.
pub async fn for_vm_review(client: &Client, body: &[u8]) -> Lookups {
    let Some(request) = serde_json::from_slice::<Value>(body).ok().and_then(|v| v.get("request").cloned()) else {
        return Lookups::default();
    };
    let Some(vm) = request.get("object").cloned().and_then(|o| serde_json::from_value::<VirtualMachine>(o).ok()) else {
        return Lookups::default();
    };
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return Lookups::default();
    }
    let ns = request.get("namespace").and_then(Value::as_str).unwrap_or_default().to_owned();
    Lookups {
        vm_expansion: Some(expansion(client, &ns, &vm).await.map_err(|m| m.admission_message())),
        ..Lookups::default()
    }
}

/// The instancetype or preference a VM names that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The instancetype; the API server's message.
    Instancetype(String),
    /// The preference; the API server's message.
    Preference(String),
}

impl Missing {
    /// The API server's message (what upstream's `expand-spec` answers).
    pub fn message(&self) -> &str {
        match self {
            Missing::Instancetype(m) | Missing::Preference(m) => m,
        }
    }

    /// Upstream's VM admitter's message ("Failure to find instancetype: …").
    pub fn admission_message(&self) -> String {
        match self {
            Missing::Instancetype(m) => format!("Failure to find instancetype: {m}"),
            Missing::Preference(m) => format!("Failure to find preference: {m}"),
        }
    }
}

/// The instancetype and preference `vm` (in namespace `ns`) names, from the revisions its status recorded or the
/// live objects.
pub async fn expansion(client: &Client, ns: &str, vm: &VirtualMachine) -> Result<Expansion, Missing> {
    let mut e = Expansion::default();
    let status = vm.status.clone().unwrap_or_default();
    let (it_ref, pref_ref) = (status.instancetype_ref.as_ref(), status.preference_ref.as_ref());
    if let Some(m) = &vm.spec.instancetype {
        let k = m.kind.clone().unwrap_or_else(|| kind::CLUSTER_INSTANCETYPE.into());
        let found = if k == kind::INSTANCETYPE {
            read(client, Api::<VirtualMachineInstancetype>::namespaced(client.clone(), ns), ns, m, &k, it_ref).await
        } else {
            read(client, Api::<VirtualMachineClusterInstancetype>::all(client.clone()), ns, m, &k, it_ref).await
        };
        e.instancetype = Some(found.map_err(Missing::Instancetype)?);
    }
    if let Some(m) = &vm.spec.preference {
        let k = m.kind.clone().unwrap_or_else(|| kind::CLUSTER_PREFERENCE.into());
        let found = if k == kind::PREFERENCE {
            read(client, Api::<VirtualMachinePreference>::namespaced(client.clone(), ns), ns, m, &k, pref_ref).await
        } else {
            read(client, Api::<VirtualMachineClusterPreference>::all(client.clone()), ns, m, &k, pref_ref).await
        };
        e.preference = Some(found.map_err(Missing::Preference)?);
    }
    Ok(e)
}

/// The spec of the object `m` names: from the ControllerRevision `m.revisionName` or the status' `recorded`
/// reference names (when it is for the same object), else read through `api`; the API server's message when it
/// cannot be read.
async fn read<K, S>(
    client: &Client,
    api: Api<K>,
    ns: &str,
    m: &Matcher,
    kind_name: &str,
    recorded: Option<&InstancetypeStatusRef>,
) -> Result<Captured<S>, String>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
    S: DeserializeOwned,
{
    let name = m.name.clone().unwrap_or_default();
    let reference =
        InstancetypeStatusRef { name: Some(name.clone()), kind: Some(kind_name.to_owned()), ..Default::default() };
    if let Some(revision) = captured_revision(m, kind_name, recorded) {
        let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
        if let Ok(r) = revisions.get(&revision).await
            && let Some(spec) = r.data.and_then(|d| d.0.get("spec").cloned())
            && let Ok(spec) = serde_json::from_value(spec)
        {
            return Ok(Captured { reference, spec });
        }
    }
    let object = api.get(&name).await.map_err(|e| api_message(&e))?;
    let spec = serde_json::to_value(&object).ok().and_then(|v| v.get("spec").cloned()).unwrap_or_default();
    let spec = serde_json::from_value(spec).map_err(|e| format!("{kind_name} {name}: {e}"))?;
    Ok(Captured { reference, spec })
}
