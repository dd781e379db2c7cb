//! The VMI webhooks and the VM validator as functions from an `AdmissionReview` request body to the response review (upstream's
//! `VMIsMutator`, `VMICreateAdmitter`, `VMIUpdateAdmitter`), independent of HTTP:
//!
//! * [`Webhook::Mutate`]: CREATE → [`default_vmi`], answered with a JSON patch from the request object to the
//!   defaulted one; UPDATE → status edits by anyone but KubeVirt's components are reverted (patch back to the old
//!   status);
//! * [`Webhook::ValidateCreate`] / [`Webhook::ValidateUpdate`] → [`validate_create`] / [`validate_update`], refused
//!   with upstream's `Status` ([`invalid_status`]);
//! * [`Webhook::ValidateVm`] → [`validate_vm`] (VM CREATE and UPDATE), admitted with upstream's deprecation
//!   warning for `spec.running`; [`Webhook::ValidateReplicaSet`] → [`validate_replicaset`];
//! * the VirtualMachineInstanceMigration webhooks ([`crate::validate::migration`]): [`Webhook::MutateMigration`]
//!   (CREATE: selector label and finalizer, as a JSON patch), [`Webhook::ValidateMigrationCreate`] (with the VMI
//!   and the VMI's migrations looked up, [`Lookups::migration`]) and [`Webhook::ValidateMigrationUpdate`].
//!
//! A request that cannot be read (not JSON, not a review, another resource, an undecodable VMI) is answered as
//! upstream does: not allowed, code 400, the decoding error as the message.

use contracts::kubevirt::consts::{GROUP, VERSIONS, webhook};
use crds::kubevirt::migration::VirtualMachineInstanceMigration;
use crds::kubevirt::vmi::VirtualMachineInstance;
use crds::kubevirt::{VirtualMachine, VirtualMachineInstanceReplicaSet};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, Status};
use serde_json::Value;

use crate::cause::{error_status, invalid_status};
use crate::config::{Config, User};
use crate::defaults::{Fresh, default_vmi};
use crate::lookup::{Lookups, migration_namespace};
use crate::validate::migration::{self, Refusal as MigrationRefusal};
use crate::validate::vm::{WARN_RUNNING_DEPRECATED, validate_replicaset, validate_vm};
use crate::validate::{invalid_quantity, semantically_equal, validate_create, validate_update};

/// The resource the VMI webhooks serve.
pub const RESOURCE: &str = "virtualmachineinstances";
/// The resource the VM webhook serves.
pub const VM_RESOURCE: &str = "virtualmachines";
/// The resource the VMIRS webhook serves.
pub const VMIRS_RESOURCE: &str = "virtualmachineinstancereplicasets";
/// The resource the migration webhooks serve.
pub const MIGRATION_RESOURCE: &str = "virtualmachineinstancemigrations";

/// The (sub)resource the eviction webhooks serve.
pub const EVICTION_RESOURCE: &str = "pods/eviction";

/// One of the VMI webhooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Webhook {
    /// `virtualmachineinstances-mutator.kubevirt.io`.
    Mutate,
    /// `virtualmachineinstances-create-validator.kubevirt.io`.
    ValidateCreate,
    /// `virtualmachineinstances-update-validator.kubevirt.io`.
    ValidateUpdate,
    /// `virtualmachine-validator.kubevirt.io` (VM CREATE and UPDATE).
    ValidateVm,
    /// `virtualmachinereplicaset-validator.kubevirt.io` (VMIRS CREATE and UPDATE).
    ValidateReplicaSet,
    /// `migrations-mutator.kubevirt.io` (VMIM CREATE).
    MutateMigration,
    /// `migration-create-validator.kubevirt.io` (VMIM CREATE).
    ValidateMigrationCreate,
    /// `migration-update-validator.kubevirt.io` (VMIM UPDATE).
    ValidateMigrationUpdate,
    /// `virt-launcher-eviction-interceptor.kubevirt.io` (`pods/eviction`, served by [`crate::evict`]).
    LauncherEviction,
    /// `hotplug-pod-eviction-interceptor.kubevirt.io` (`pods/eviction` on the same path, [`crate::evict`]).
    HotplugEviction,
}

impl Webhook {
    /// Every webhook.
    pub const ALL: [Webhook; 10] = [
        Webhook::Mutate,
        Webhook::ValidateCreate,
        Webhook::ValidateUpdate,
        Webhook::ValidateVm,
        Webhook::ValidateReplicaSet,
        Webhook::MutateMigration,
        Webhook::ValidateMigrationCreate,
        Webhook::ValidateMigrationUpdate,
        Webhook::LauncherEviction,
        Webhook::HotplugEviction,
    ];

    /// The HTTPS path it is served on.
    pub fn path(&self) -> &'static str {
        match self {
            Webhook::Mutate => webhook::VMI_MUTATE_PATH,
            Webhook::ValidateCreate => webhook::VMI_VALIDATE_CREATE_PATH,
            Webhook::ValidateUpdate => webhook::VMI_VALIDATE_UPDATE_PATH,
            Webhook::ValidateVm => webhook::VM_VALIDATE_PATH,
            Webhook::ValidateReplicaSet => webhook::VMIRS_VALIDATE_PATH,
            Webhook::MutateMigration => webhook::MIGRATION_MUTATE_PATH,
            Webhook::ValidateMigrationCreate => webhook::MIGRATION_VALIDATE_CREATE_PATH,
            Webhook::ValidateMigrationUpdate => webhook::MIGRATION_VALIDATE_UPDATE_PATH,
            Webhook::LauncherEviction | Webhook::HotplugEviction => webhook::POD_EVICTION_VALIDATE_PATH,
        }
    }

    /// Its name in the webhook configurations (what `kubectl` prints).
    pub fn name(&self) -> &'static str {
        match self {
            Webhook::Mutate => webhook::VMI_MUTATOR,
            Webhook::ValidateCreate => webhook::VMI_CREATE_VALIDATOR,
            Webhook::ValidateUpdate => webhook::VMI_UPDATE_VALIDATOR,
            Webhook::ValidateVm => webhook::VM_VALIDATOR,
            Webhook::ValidateReplicaSet => webhook::VMIRS_VALIDATOR,
            Webhook::MutateMigration => webhook::MIGRATION_MUTATOR,
            Webhook::ValidateMigrationCreate => webhook::MIGRATION_CREATE_VALIDATOR,
            Webhook::ValidateMigrationUpdate => webhook::MIGRATION_UPDATE_VALIDATOR,
            Webhook::LauncherEviction => webhook::LAUNCHER_EVICTION_INTERCEPTOR,
            Webhook::HotplugEviction => webhook::HOTPLUG_EVICTION_INTERCEPTOR,
        }
    }

    /// The resource it admits.
    pub fn resource(&self) -> &'static str {
        match self {
            Webhook::ValidateVm => VM_RESOURCE,
            Webhook::ValidateReplicaSet => VMIRS_RESOURCE,
            Webhook::MutateMigration | Webhook::ValidateMigrationCreate | Webhook::ValidateMigrationUpdate => {
                MIGRATION_RESOURCE
            }
            Webhook::Mutate | Webhook::ValidateCreate | Webhook::ValidateUpdate => RESOURCE,
            Webhook::LauncherEviction | Webhook::HotplugEviction => EVICTION_RESOURCE,
        }
    }

    /// Upstream's text for a request of another resource: the migration validators print the Go struct of the
    /// GroupVersionResource (`metav1.GroupVersionResource` has no value `String()`).
    fn wrong_resource(&self) -> String {
        match self {
            Webhook::ValidateMigrationCreate | Webhook::ValidateMigrationUpdate => {
                format!(
                    "expect resource to be '{{{GROUP} {} {MIGRATION_RESOURCE}}}'",
                    contracts::kubevirt::consts::VERSION
                )
            }
            other => format!("expect resource to be '{}'", other.resource()),
        }
    }

    /// Whether it is one of the eviction webhooks (answered by [`crate::evict::review`], which reads and writes
    /// the API, rather than by [`review_with`]).
    pub fn is_eviction(&self) -> bool {
        matches!(self, Webhook::LauncherEviction | Webhook::HotplugEviction)
    }

    /// The webhook served on `path` (the first, for the path both eviction webhooks share).
    pub fn for_path(path: &str) -> Option<Webhook> {
        Webhook::ALL.into_iter().find(|w| w.path() == path)
    }
}

/// Removes `null` members of objects, recursively (the API server drops them too; our types never write them).
pub fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// Answers an `AdmissionReview` request `body` for `webhook`; `fresh` is called for CREATE mutations only.
pub fn review(webhook: Webhook, body: &[u8], config: &Config, fresh: impl FnOnce() -> Fresh) -> Value {
    review_with(webhook, body, config, fresh, &Lookups::default())
}

/// [`review`] with what was looked up from the API server for it ([`crate::lookup`]).
pub fn review_with(
    webhook: Webhook,
    body: &[u8],
    config: &Config,
    fresh: impl FnOnce() -> Fresh,
    lookups: &Lookups,
) -> Value {
    let parsed: Result<(Value, AdmissionReview<DynamicObject>), String> = serde_json::from_slice::<Value>(body)
        .map_err(|e| e.to_string())
        .and_then(|v| serde_json::from_value(v.clone()).map(|r| (v, r)).map_err(|e| e.to_string()));
    let (raw, review) = match parsed {
        Ok(p) => p,
        Err(e) => return to_value(refused(AdmissionResponse::invalid(&e), error_status(e))),
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return to_value(refused(AdmissionResponse::invalid(e.to_string()), error_status(e.to_string()))),
    };
    let response = AdmissionResponse::from(&request);
    let raw_request = raw.get("request").cloned().unwrap_or(Value::Null);
    let answer = match answer(webhook, &request, &raw_request, config, fresh, lookups) {
        Ok(Answer::Allow) => response,
        Ok(Answer::Warn(warnings)) => {
            let mut r = response;
            r.warnings = Some(warnings);
            r
        }
        Ok(Answer::Patch(patch)) => match response.clone().with_patch(patch) {
            Ok(r) => r,
            Err(e) => refused(response, error_status(e.to_string())),
        },
        Ok(Answer::Deny(status)) | Err(status) => refused(response, *status),
    };
    to_value(answer)
}

pub(crate) fn refused(mut response: AdmissionResponse, status: Status) -> AdmissionResponse {
    response.allowed = false;
    response.result = status;
    response
}

pub(crate) fn to_value(response: AdmissionResponse) -> Value {
    let mut review = serde_json::to_value(response.into_review()).unwrap_or(Value::Null);
    // kube writes the patch bytes as a JSON array of numbers; Go (and every webhook the API server knows) writes
    // `[]byte` as base64. The API server reads both; write what upstream writes.
    if let Some(patch) = review.pointer_mut("/response/patch")
        && let Some(bytes) =
            patch.as_array().map(|a| a.iter().filter_map(|b| b.as_u64()).map(|b| b as u8).collect::<Vec<u8>>())
    {
        use base64::Engine as _;
        *patch = Value::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    review
}

enum Answer {
    Allow,
    Warn(Vec<String>),
    Patch(json_patch::Patch),
    Deny(Box<Status>),
}

fn user(request: &AdmissionRequest<DynamicObject>) -> User {
    User {
        username: request.user_info.username.clone().unwrap_or_default(),
        groups: request.user_info.groups.clone().unwrap_or_default(),
    }
}

/// The request's object (`object` or `oldObject`) as raw JSON (nulls removed) and as a VMI.
fn object(raw_request: &Value, key: &str) -> Result<(Value, VirtualMachineInstance), Box<Status>> {
    let mut raw = raw_request.get(key).cloned().unwrap_or(Value::Null);
    strip_nulls(&mut raw);
    let vmi: VirtualMachineInstance =
        serde_json::from_value(raw.clone()).map_err(|e| Box::new(error_status(e.to_string())))?;
    if let Some(message) = invalid_quantity(&vmi.spec) {
        return Err(Box::new(error_status(message)));
    }
    Ok((raw, vmi))
}

/// The request's object (`object` or `oldObject`) as raw JSON (nulls removed) and as a migration.
fn migration_object(raw_request: &Value, key: &str) -> Result<(Value, VirtualMachineInstanceMigration), Box<Status>> {
    let mut raw = raw_request.get(key).cloned().unwrap_or(Value::Null);
    strip_nulls(&mut raw);
    let m = serde_json::from_value(raw.clone()).map_err(|e| Box::new(error_status(e.to_string())))?;
    Ok((raw, m))
}

/// `value` with the request object's `apiVersion` and `kind` (our types write `kubevirt.io/v1`; a `v1alpha3`
/// request keeps its version).
fn with_types_of(mut value: Value, raw: &Value) -> Value {
    for key in ["apiVersion", "kind"] {
        if let (Some(v), Some(obj)) = (raw.get(key), value.as_object_mut()) {
            obj.insert(key.into(), v.clone());
        }
    }
    value
}

fn answer(
    webhook: Webhook,
    request: &AdmissionRequest<DynamicObject>,
    raw_request: &Value,
    config: &Config,
    fresh: impl FnOnce() -> Fresh,
    lookups: &Lookups,
) -> Result<Answer, Box<Status>> {
    if webhook.is_eviction() {
        // Served by `crate::evict::review`; without the API to read, an eviction is admitted (as upstream's when
        // it cannot read the pod).
        return Ok(Answer::Allow);
    }
    let gvr = &request.resource;
    let resource = webhook.resource();
    if gvr.group != GROUP || gvr.resource != resource || !VERSIONS.contains(&gvr.version.as_str()) {
        return Err(Box::new(error_status(webhook.wrong_resource())));
    }
    let user = user(request);
    match (webhook, &request.operation) {
        (Webhook::Mutate, Operation::Create) => {
            let (raw, vmi) = object(raw_request, "object")?;
            let defaulted = default_vmi(&vmi, config, &fresh()).map_err(|e| Box::new(error_status(e.to_string())))?;
            let out = serde_json::to_value(&defaulted).map_err(|e| Box::new(error_status(e.to_string())))?;
            let patch = json_patch::diff(&raw, &with_types_of(out, &raw));
            Ok(if patch.0.is_empty() { Answer::Allow } else { Answer::Patch(patch) })
        }
        (Webhook::Mutate, Operation::Update) => {
            let (raw, new) = object(raw_request, "object")?;
            let (old_raw, old) = object(raw_request, "oldObject")?;
            if semantically_equal(&new.status, &old.status) || config.is_kubevirt(&user) {
                return Ok(Answer::Allow);
            }
            let mut reverted = raw.clone();
            if let Some(obj) = reverted.as_object_mut() {
                match old_raw.get("status") {
                    Some(s) => obj.insert("status".into(), s.clone()),
                    None => obj.remove("status"),
                };
            }
            Ok(Answer::Patch(json_patch::diff(&raw, &reverted)))
        }
        (Webhook::ValidateCreate, Operation::Create) => {
            let (_, vmi) = object(raw_request, "object")?;
            let causes = validate_create(&vmi, config, &user);
            Ok(if causes.is_empty() { Answer::Allow } else { Answer::Deny(Box::new(invalid_status(&causes))) })
        }
        (Webhook::ValidateUpdate, Operation::Update) => {
            let (_, new) = object(raw_request, "object")?;
            let (_, old) = object(raw_request, "oldObject")?;
            let causes = validate_update(&old, &new, config, &user);
            Ok(if causes.is_empty() { Answer::Allow } else { Answer::Deny(Box::new(invalid_status(&causes))) })
        }
        (Webhook::ValidateVm, Operation::Create | Operation::Update) => {
            let mut raw = raw_request.get("object").cloned().unwrap_or(Value::Null);
            strip_nulls(&mut raw);
            let vm: VirtualMachine = serde_json::from_value(raw).map_err(|e| Box::new(error_status(e.to_string())))?;
            if let Some(message) = vm.spec.template.spec.as_ref().and_then(invalid_quantity) {
                return Err(Box::new(error_status(message)));
            }
            let causes = validate_vm(&vm, config, &user, lookups.vm_expansion.as_ref());
            Ok(if !causes.is_empty() {
                Answer::Deny(Box::new(invalid_status(&causes)))
            } else if vm.spec.running.is_some() {
                Answer::Warn(vec![WARN_RUNNING_DEPRECATED.to_owned()])
            } else {
                Answer::Allow
            })
        }
        (Webhook::ValidateReplicaSet, Operation::Create | Operation::Update) => {
            let mut raw = raw_request.get("object").cloned().unwrap_or(Value::Null);
            strip_nulls(&mut raw);
            let rs: VirtualMachineInstanceReplicaSet =
                serde_json::from_value(raw).map_err(|e| Box::new(error_status(e.to_string())))?;
            if let Some(message) = rs.spec.template.spec.as_ref().and_then(invalid_quantity) {
                return Err(Box::new(error_status(message)));
            }
            let causes = validate_replicaset(&rs, config, &user);
            Ok(if causes.is_empty() { Answer::Allow } else { Answer::Deny(Box::new(invalid_status(&causes))) })
        }
        (Webhook::MutateMigration, Operation::Create) => {
            let (raw, _) = migration_object(raw_request, "object")?;
            let patch = json_patch::diff(&raw, &migration::mutate_create(&raw));
            Ok(if patch.0.is_empty() { Answer::Allow } else { Answer::Patch(patch) })
        }
        (Webhook::ValidateMigrationCreate, Operation::Create) => {
            let (_, m) = migration_object(raw_request, "object")?;
            let ns = migration_namespace(raw_request);
            match migration::validate_create(&m, &ns, config, &user, lookups.migration.as_ref()) {
                Ok(()) => Ok(Answer::Allow),
                Err(MigrationRefusal::Invalid(causes)) => Ok(Answer::Deny(Box::new(invalid_status(&causes)))),
                Err(MigrationRefusal::Error(message)) => Ok(Answer::Deny(Box::new(error_status(message)))),
            }
        }
        (Webhook::ValidateMigrationUpdate, Operation::Update) => {
            let (_, new) = migration_object(raw_request, "object")?;
            let (_, old) = migration_object(raw_request, "oldObject")?;
            let causes = migration::validate_update(&old, &new);
            Ok(if causes.is_empty() { Answer::Allow } else { Answer::Deny(Box::new(invalid_status(&causes))) })
        }
        _ => Ok(Answer::Allow),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every webhook is registered in `deploy/virt-api.yaml` under its name, path and resource.
    #[test]
    fn the_manifest_registers_every_webhook() -> Result<(), String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/virt-api.yaml");
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| e.to_string())?;
        let hooks: Vec<&Value> =
            docs.iter().filter_map(|d| d.get("webhooks").and_then(Value::as_array)).flatten().collect();
        assert_eq!(hooks.len(), Webhook::ALL.len());
        for w in Webhook::ALL {
            let hook = hooks
                .iter()
                .find(|h| h["name"] == w.name())
                .ok_or_else(|| format!("{} is not registered", w.name()))?;
            assert_eq!(hook["clientConfig"]["service"]["path"], w.path(), "{}", w.name());
            assert_eq!(hook["rules"][0]["resources"], serde_json::json!([w.resource()]), "{}", w.name());
            assert_eq!(Webhook::for_path(w.path()).map(|f| f.path()), Some(w.path()));
        }
        Ok(())
    }
}
