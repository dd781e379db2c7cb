//! The VirtualMachineInstanceMigration webhooks (contract §5.1, §3 "Enforced elsewhere"), pure, with upstream's
//! messages (upstream `pkg/virt-api/webhooks/mutating-webhook/mutators/migration-create-mutator.go`,
//! `validating-webhook/admitters/migration-create-admitter.go`, `migration-update-admitter.go`):
//!
//! ```text
//! CREATE  migrations-mutator          ─► mutate_create: label kubevirt.io/vmi-name=<vmiName>, finalizer
//!                                        kubevirt.io/migrationJobFinalize
//!         migration-create-validator  ─► validate_create, in upstream's order:
//!           vmiName required ─► (ours) addedNodeSelector label syntax ─► priority: gate on, virt-controller only
//!           ─► the VMI exists (lookup) ─► not final ─► not LiveMigratable=False ─► no other non-final migration
//!           of the VMI (lookup, by label) ─► sendTo/receive: gate DecentralizedLiveMigration, same migrationID
//! UPDATE  migration-update-validator  ─► validate_update: spec immutable; the selector label stays while the
//!                                        migration is not final
//! ```
//!
//! What is read from the API server comes in as a [`MigrationLookup`] (`crate::lookup::for_migration_review`).
//! Refusals are as upstream answers them: causes (`Invalid`, 422, [`crate::cause::invalid_status`]) for the spec
//! checks, a plain message with code 400 (`ToAdmissionResponseError`, [`crate::cause::error_status`]) for what the
//! lookups show.
//!
//! Ours, not upstream's: `addedNodeSelector` keys and values must be valid label keys and values (Kubernetes'
//! messages, as the API server would refuse the target pod's `nodeSelector` with later); upstream admits them and
//! the migration then fails. The finalizer is added only when absent (upstream appends it unconditionally).

use crds::kubevirt::consts::{finalizer, label, reason};
use crds::kubevirt::migration::VirtualMachineInstanceMigration;
use crds::kubevirt::vmi::{ConditionStatus, VirtualMachineInstance, VirtualMachineInstanceConditionType};
use serde_json::Value;

use super::go_quote;
use super::names::{label_value, qualified_name};
use crate::cause::{Cause, CauseType, Path};
use crate::config::{Config, FeatureGate, User};

/// `spec.vmiName` empty (upstream's message).
pub const ERR_VMI_NAME_MISSING: &str = "vmiName is missing";
/// `spec.priority` set while the gate is off.
pub const ERR_PRIORITY_GATE: &str = "MigrationPriorityQueue feature gate is not enabled in kubevirt resource";
/// `spec.priority` set by anyone but virt-controller.
pub const ERR_PRIORITY_NOT_CONTROLLER: &str =
    "Migration priority queue, only virt-controller is allowed to set priority field";
/// The field upstream names for both priority refusals (sic: the field is `spec.priority`).
pub const PRIORITY_FIELD: &str = "spec.migrationPriority";
/// The VMI is Succeeded or Failed.
pub const ERR_FINAL: &str = "Cannot migrate VMI in finalized state.";
/// `sendTo`/`receive` without the gate.
pub const ERR_DECENTRALIZED_GATE: &str = "DecentralizedLiveMigration feature gate is not enabled in kubevirt resource";
/// UPDATE: the spec changed.
pub const ERR_SPEC_RESTRICTED: &str = "update of Migration object's spec is restricted";
/// UPDATE: the selector label went away while the migration is not final.
pub const ERR_LABEL_REMOVED: &str = "selector label can't be removed from an in-flight migration";
/// UPDATE: the selector label changed while the migration is not final.
pub const ERR_LABEL_MODIFIED: &str = "selector label can't be modified on an in-flight migration";

/// What the create validator read from the API server for one migration.
#[derive(Debug, Clone)]
pub struct MigrationLookup {
    /// The VMI `spec.vmiName` names, in the migration's namespace (`Ok(None)`: it does not exist; `Err`: the API
    /// server's message).
    pub vmi: Result<Option<VirtualMachineInstance>, String>,
    /// The migrations labelled `kubevirt.io/vmi-name=<vmiName>` in that namespace (`Err`: the API server's message).
    pub migrations: Result<Vec<VirtualMachineInstanceMigration>, String>,
}

/// Why a migration is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Causes: answered as `Invalid`, code 422 (upstream's `ToAdmissionResponse`).
    Invalid(Vec<Cause>),
    /// One message: answered with code 400 and no reason (upstream's `ToAdmissionResponseError`).
    Error(String),
}

/// The request object `raw` (a migration, nulls removed) as upstream's mutator leaves it: label
/// `kubevirt.io/vmi-name` = `spec.vmiName` (set or overwritten), finalizer `kubevirt.io/migrationJobFinalize`
/// appended unless present. Everything else is untouched.
pub fn mutate_create(raw: &Value) -> Value {
    let mut out = raw.clone();
    let vmi_name = raw.pointer("/spec/vmiName").and_then(Value::as_str).unwrap_or_default().to_owned();
    let Some(obj) = out.as_object_mut() else { return out };
    let meta = obj.entry("metadata").or_insert_with(|| Value::Object(Default::default()));
    if !meta.is_object() {
        *meta = Value::Object(Default::default());
    }
    let Some(meta) = meta.as_object_mut() else { return out };
    let labels = meta.entry("labels").or_insert_with(|| Value::Object(Default::default()));
    if !labels.is_object() {
        *labels = Value::Object(Default::default());
    }
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(label::VMI_NAME.into(), Value::String(vmi_name));
    }
    let finalizers = meta.entry("finalizers").or_insert_with(|| Value::Array(Vec::new()));
    if !finalizers.is_array() {
        *finalizers = Value::Array(Vec::new());
    }
    if let Some(list) = finalizers.as_array_mut()
        && !list.iter().any(|f| f.as_str() == Some(finalizer::MIGRATION_JOB))
    {
        list.push(Value::String(finalizer::MIGRATION_JOB.into()));
    }
    out
}

/// A member of the spec this version does not model (`sendTo`, `receive`), when set.
fn extra<'a>(m: &'a VirtualMachineInstanceMigration, key: &str) -> Option<&'a Value> {
    m.spec.extra.get(key).filter(|v| !v.is_null())
}

/// Upstream's `IsDecentralized`: exactly one of `sendTo` and `receive`.
fn decentralized(m: &VirtualMachineInstanceMigration) -> bool {
    extra(m, "sendTo").is_some() != extra(m, "receive").is_some()
}

/// The spec checks (upstream's `ValidateVirtualMachineInstanceMigrationSpec`, then ours of `addedNodeSelector`).
fn validate_spec(m: &VirtualMachineInstanceMigration) -> Vec<Cause> {
    let spec = Path::new("spec");
    if m.spec.vmi_name.is_empty() {
        return vec![Cause::new(CauseType::Required, ERR_VMI_NAME_MISSING, spec.child("vmiName"))];
    }
    let field = spec.child("addedNodeSelector");
    let mut causes = Vec::new();
    // Kubernetes' `ValidateLabels`: per entry the key's messages, then the value's, as field errors.
    for (key, value) in m.spec.added_node_selector.iter().flatten() {
        for (bad, messages) in [(key, qualified_name(key)), (value, label_value(value))] {
            for message in messages {
                causes.push(Cause::invalid(format!("{field}: Invalid value: {}: {message}", go_quote(bad)), &field));
            }
        }
    }
    causes
}

/// Upstream's `isMigratable`: the first `LiveMigratable=False` condition refuses (a decentralized migration may
/// move a VMI whose disks are not shared).
fn not_migratable(vmi: &VirtualMachineInstance, m: &VirtualMachineInstanceMigration) -> Option<String> {
    let conditions = vmi.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.into_iter().flatten().find_map(|c| {
        if c.type_ != VirtualMachineInstanceConditionType::LiveMigratable || c.status != ConditionStatus::False {
            return None;
        }
        let why = c.reason.as_deref().unwrap_or_default();
        if why == reason::not_migratable::DISKS && decentralized(m) {
            return None;
        }
        let message = c.message.as_deref().unwrap_or_default();
        Some(format!("Cannot migrate VMI, Reason: {why}, Message: {message}"))
    })
}

/// Refuses creating migration `m` in `namespace` (its own, else the request's) by `user`; `lookup` is what was
/// read for it (`None`: nothing could be read — refused, as upstream's read would fail).
pub fn validate_create(
    m: &VirtualMachineInstanceMigration,
    namespace: &str,
    config: &Config,
    user: &User,
    lookup: Option<&MigrationLookup>,
) -> Result<(), Refusal> {
    let causes = validate_spec(m);
    if !causes.is_empty() {
        return Err(Refusal::Invalid(causes));
    }
    if m.spec.priority.is_some() {
        let why = if !config.enabled(FeatureGate::MigrationPriorityQueue) {
            Some(ERR_PRIORITY_GATE)
        } else if !config.is_virt_controller(user) {
            Some(ERR_PRIORITY_NOT_CONTROLLER)
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Refusal::Invalid(vec![Cause::new(CauseType::Forbidden, why, PRIORITY_FIELD)]));
        }
    }
    let name = &m.spec.vmi_name;
    let Some(lookup) = lookup else {
        return Err(Refusal::Error(format!("cannot look up the VMI \"{namespace}/{name}\": virt-api has no client")));
    };
    let vmi = match &lookup.vmi {
        Ok(Some(vmi)) => vmi,
        Ok(None) => return Err(Refusal::Error(format!("the VMI \"{namespace}/{name}\" does not exist"))),
        Err(e) => return Err(Refusal::Error(e.clone())),
    };
    if vmi.is_final() {
        return Err(Refusal::Error(ERR_FINAL.to_owned()));
    }
    if let Some(why) = not_migratable(vmi, m) {
        return Err(Refusal::Error(why));
    }
    let migrations = lookup.migrations.as_ref().map_err(|e| Refusal::Error(e.clone()))?;
    if let Some(other) = migrations.iter().find(|other| !other.is_final()) {
        let uid = other.metadata.uid.as_deref().unwrap_or_default();
        return Err(Refusal::Error(format!(
            "in-flight migration detected. Active migration job ({uid}) is currently already in progress for VMI {}.",
            other.spec.vmi_name
        )));
    }
    let (send_to, receive) = (extra(m, "sendTo"), extra(m, "receive"));
    if send_to.is_some() || receive.is_some() {
        if !config.enabled(FeatureGate::DecentralizedLiveMigration) {
            return Err(Refusal::Invalid(vec![Cause::new(CauseType::NotSupported, ERR_DECENTRALIZED_GATE, "")]));
        }
        if let (Some(s), Some(r)) = (send_to, receive) {
            let id = |v: &Value| v.get("migrationID").and_then(Value::as_str).unwrap_or_default().to_owned();
            let (s, r) = (id(s), id(r));
            if s != r {
                return Err(Refusal::Invalid(vec![Cause::invalid(
                    format!("sendTo migrationID {s} does not match receive migrationID {r}"),
                    "",
                )]));
            }
        }
    }
    Ok(())
}

/// The spec as upstream's `equality.Semantic.DeepEqual` compares it: an empty `addedNodeSelector` is an absent
/// one.
fn semantic_spec(
    m: &VirtualMachineInstanceMigration,
) -> crds::kubevirt::migration::VirtualMachineInstanceMigrationSpec {
    let mut spec = m.spec.clone();
    if spec.added_node_selector.as_ref().is_some_and(|s| s.is_empty()) {
        spec.added_node_selector = None;
    }
    spec.extra.retain(|_, v| !v.is_null());
    spec
}

/// The causes to refuse updating `old` to `new` for (upstream answers with one cause at most).
pub fn validate_update(old: &VirtualMachineInstanceMigration, new: &VirtualMachineInstanceMigration) -> Vec<Cause> {
    if semantic_spec(old) != semantic_spec(new) {
        return vec![Cause::new(CauseType::NotSupported, ERR_SPEC_RESTRICTED, "")];
    }
    // Upstream's `ensureSelectorLabelSafe`: only while the new object's phase is not final.
    if new.is_final() {
        return Vec::new();
    }
    let Some(old_labels) = old.metadata.labels.as_ref() else { return Vec::new() };
    let Some(old_label) = old_labels.get(label::VMI_NAME) else { return Vec::new() };
    match new.metadata.labels.as_ref() {
        None => vec![Cause::new(CauseType::NotSupported, ERR_LABEL_REMOVED, "")],
        Some(labels) if labels.get(label::VMI_NAME) != Some(old_label) => {
            vec![Cause::new(CauseType::NotSupported, ERR_LABEL_MODIFIED, "")]
        }
        Some(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn migration(v: Value) -> Result<VirtualMachineInstanceMigration, String> {
        let mut base = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "m1", "namespace": "ns"}, "spec": {"vmiName": "vmi1"}});
        json_patch::merge(&mut base, &v);
        serde_json::from_value(base).map_err(|e| e.to_string())
    }

    fn vmi(v: Value) -> Result<VirtualMachineInstance, String> {
        let mut base = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vmi1", "namespace": "ns"}, "spec": {"domain": {"devices": {}}},
            "status": {"phase": "Running"}});
        json_patch::merge(&mut base, &v);
        serde_json::from_value(base).map_err(|e| e.to_string())
    }

    fn found(vmi: VirtualMachineInstance, migrations: Vec<VirtualMachineInstanceMigration>) -> MigrationLookup {
        MigrationLookup { vmi: Ok(Some(vmi)), migrations: Ok(migrations) }
    }

    fn user(name: &str) -> User {
        User { username: name.into(), groups: vec!["system:authenticated".into()] }
    }

    /// A refusal as (code, message, cause fields): 422 for causes, 400 for an error.
    fn outcome(r: Result<(), Refusal>) -> Option<(u16, String, Vec<String>)> {
        match r {
            Ok(()) => None,
            Err(Refusal::Invalid(causes)) => {
                let fields = causes.iter().map(|c| format!("{}:{}", c.type_.as_str(), c.field)).collect();
                Some((422, crate::cause::invalid_status(&causes).message, fields))
            }
            Err(Refusal::Error(m)) => Some((400, m, Vec::new())),
        }
    }

    #[test]
    fn the_mutator_adds_the_selector_label_and_the_finalizer() -> Result<(), String> {
        let raw = json!({"metadata": {"generateName": "kubevirt-migrate-vm-", "labels": {"a": "b"}},
            "spec": {"vmiName": "vmi1"}});
        let out = mutate_create(&raw);
        assert_eq!(out["metadata"]["labels"], json!({"a": "b", "kubevirt.io/vmi-name": "vmi1"}));
        assert_eq!(out["metadata"]["finalizers"], json!(["kubevirt.io/migrationJobFinalize"]));
        assert_eq!(out["metadata"]["generateName"], "kubevirt-migrate-vm-");
        // Applied twice: the label is overwritten, the finalizer not repeated.
        let again = mutate_create(&json!({"metadata": {"labels": {"kubevirt.io/vmi-name": "other"},
            "finalizers": ["x", "kubevirt.io/migrationJobFinalize"]}, "spec": {"vmiName": "vmi1"}}));
        assert_eq!(again["metadata"]["labels"], json!({"kubevirt.io/vmi-name": "vmi1"}));
        assert_eq!(again["metadata"]["finalizers"], json!(["x", "kubevirt.io/migrationJobFinalize"]));
        let bare = mutate_create(&json!({"spec": {}}));
        assert_eq!(bare["metadata"]["labels"], json!({"kubevirt.io/vmi-name": ""}));
        let _ = migration(out)?;
        Ok(())
    }

    #[test]
    fn create_is_refused_with_upstreams_messages() -> Result<(), String> {
        let mut controller_config = Config::default();
        controller_config.kubevirt_groups.insert("system:serviceaccounts:kubevirt".into());
        let controller = User {
            username: "system:serviceaccount:kubevirt:kubevirt-controller".into(),
            groups: vec!["system:serviceaccounts:kubevirt".into()],
        };
        let mut gates_off = Config::default();
        gates_off.disabled_feature_gates.insert("MigrationPriorityQueue".into());
        let not_migratable = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "LiveMigratable", "status": "False", "reason": "DisksNotLiveMigratable",
             "message": "cannot migrate VMI: PVC disk0 is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"}]}});
        let migratable = json!({"status": {"conditions": [{"type": "LiveMigratable", "status": "True"}]}});
        let running_migration = migration(json!({"metadata": {"name": "old", "uid": "uid-1"},
            "status": {"phase": "Running"}}))?;
        let pending_migration = migration(json!({"metadata": {"name": "new", "uid": "uid-2"}}))?;
        let done = migration(json!({"metadata": {"name": "done", "uid": "uid-0"}, "status": {"phase": "Succeeded"}}))?;
        let failed = migration(json!({"metadata": {"name": "f", "uid": "uid-f"}, "status": {"phase": "Failed"}}))?;
        let selector = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        type Case =
            (&'static str, Value, Config, User, Option<MigrationLookup>, Option<(u16, String, Vec<&'static str>)>);
        let cases: Vec<Case> = vec![
            ("admitted", json!({}), Config::default(), user("alice"), Some(found(vmi(migratable.clone())?, vec![])), None),
            (
                "finished migrations do not count",
                json!({"spec": {"addedNodeSelector": {"kubernetes.io/hostname": "node02"}}}),
                Config::default(),
                user("alice"),
                Some(found(vmi(json!({}))?, vec![done, failed])),
                None,
            ),
            (
                "vmiName missing",
                json!({"spec": {"vmiName": ""}}),
                Config::default(),
                user("alice"),
                None,
                Some((422, ERR_VMI_NAME_MISSING.into(), vec!["FieldValueRequired:spec.vmiName"])),
            ),
            (
                "bad node selector key",
                json!({"spec": {"addedNodeSelector": {"a b": "x"}}}),
                Config::default(),
                user("alice"),
                None,
                Some((
                    422,
                    format!("spec.addedNodeSelector: Invalid value: \"a b\": name part {selector}"),
                    vec!["FieldValueInvalid:spec.addedNodeSelector"],
                )),
            ),
            (
                "priority by a user",
                json!({"spec": {"priority": "user-triggered"}}),
                Config::default(),
                user("alice"),
                None,
                Some((422, ERR_PRIORITY_NOT_CONTROLLER.into(), vec!["FieldValueForbidden:spec.migrationPriority"])),
            ),
            (
                "priority without the gate",
                json!({"spec": {"priority": "system-critical"}}),
                gates_off,
                controller.clone(),
                None,
                Some((422, ERR_PRIORITY_GATE.into(), vec!["FieldValueForbidden:spec.migrationPriority"])),
            ),
            (
                "priority by virt-controller",
                json!({"spec": {"priority": "system-critical"}}),
                controller_config.clone(),
                controller,
                Some(found(vmi(json!({}))?, vec![])),
                None,
            ),
            (
                "unknown VMI",
                json!({}),
                Config::default(),
                user("alice"),
                Some(MigrationLookup { vmi: Ok(None), migrations: Ok(vec![]) }),
                Some((400, "the VMI \"ns/vmi1\" does not exist".into(), vec![])),
            ),
            (
                "the VMI cannot be read",
                json!({}),
                Config::default(),
                user("alice"),
                Some(MigrationLookup { vmi: Err("forbidden".into()), migrations: Ok(vec![]) }),
                Some((400, "forbidden".into(), vec![])),
            ),
            (
                "final VMI",
                json!({}),
                Config::default(),
                user("alice"),
                Some(found(vmi(json!({"status": {"phase": "Succeeded"}}))?, vec![])),
                Some((400, ERR_FINAL.into(), vec![])),
            ),
            (
                "not live-migratable",
                json!({}),
                Config::default(),
                user("alice"),
                Some(found(vmi(not_migratable.clone())?, vec![])),
                Some((
                    400,
                    "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI: PVC disk0 is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)".into(),
                    vec![],
                )),
            ),
            (
                "in flight",
                json!({}),
                Config::default(),
                user("alice"),
                Some(found(vmi(json!({}))?, vec![running_migration])),
                Some((
                    400,
                    "in-flight migration detected. Active migration job (uid-1) is currently already in progress for VMI vmi1.".into(),
                    vec![],
                )),
            ),
            (
                "a pending one is in flight too",
                json!({}),
                Config::default(),
                user("alice"),
                Some(found(vmi(json!({}))?, vec![pending_migration])),
                Some((
                    400,
                    "in-flight migration detected. Active migration job (uid-2) is currently already in progress for VMI vmi1.".into(),
                    vec![],
                )),
            ),
            (
                "the migrations cannot be listed",
                json!({}),
                Config::default(),
                user("alice"),
                Some(MigrationLookup { vmi: Ok(Some(vmi(json!({}))?)), migrations: Err("timeout".into()) }),
                Some((400, "timeout".into(), vec![])),
            ),
            (
                "decentralized without the gate (its unshared disks are fine)",
                json!({"spec": {"sendTo": {"migrationID": "a", "connectURL": "x"}}}),
                Config::default(),
                user("alice"),
                Some(found(vmi(not_migratable)?, vec![])),
                Some((422, ERR_DECENTRALIZED_GATE.into(), vec!["FieldValueNotSupported:"])),
            ),
            (
                "sendTo and receive disagree",
                json!({"spec": {"sendTo": {"migrationID": "a"}, "receive": {"migrationID": "b"}}}),
                Config { feature_gates: ["DecentralizedLiveMigration".to_owned()].into(), ..Config::default() },
                user("alice"),
                Some(found(vmi(json!({}))?, vec![])),
                Some((422, "sendTo migrationID a does not match receive migrationID b".into(), vec!["FieldValueInvalid:"])),
            ),
            (
                "no client",
                json!({}),
                Config::default(),
                user("alice"),
                None,
                Some((400, "cannot look up the VMI \"ns/vmi1\": virt-api has no client".into(), vec![])),
            ),
        ];
        for (what, patch, config, who, lookup, want) in cases {
            let m = migration(patch)?;
            let got = outcome(validate_create(&m, "ns", &config, &who, lookup.as_ref()));
            let want = want.map(|(c, m, f)| (c, m, f.into_iter().map(str::to_owned).collect::<Vec<_>>()));
            assert_eq!(got, want, "{what}");
        }
        Ok(())
    }

    #[test]
    fn updates_keep_the_spec_and_the_selector_label() -> Result<(), String> {
        let old = migration(json!({"metadata": {"labels": {"kubevirt.io/vmi-name": "vmi1"}},
            "spec": {"addedNodeSelector": {}}, "status": {"phase": "Running"}}))?;
        type Case = (&'static str, Value, Option<&'static str>);
        let cases: Vec<Case> = vec![
            (
                "status and finalizers change",
                json!({"metadata": {"finalizers": null}, "status": {"phase": "Failed"}}),
                None,
            ),
            ("an empty selector is an absent one", json!({"spec": {"addedNodeSelector": null}}), None),
            ("another VMI", json!({"spec": {"vmiName": "vmi2"}}), Some(ERR_SPEC_RESTRICTED)),
            ("a selector", json!({"spec": {"addedNodeSelector": {"a": "b"}}}), Some(ERR_SPEC_RESTRICTED)),
            ("a priority", json!({"spec": {"priority": "user-triggered"}}), Some(ERR_SPEC_RESTRICTED)),
            ("the labels go", json!({"metadata": {"labels": null}}), Some(ERR_LABEL_REMOVED)),
            (
                "the label goes",
                json!({"metadata": {"labels": {"kubevirt.io/vmi-name": null, "x": "y"}}}),
                Some(ERR_LABEL_MODIFIED),
            ),
            (
                "the label changes",
                json!({"metadata": {"labels": {"kubevirt.io/vmi-name": "vmi2"}}}),
                Some(ERR_LABEL_MODIFIED),
            ),
            (
                "the label changes once final",
                json!({"metadata": {"labels": {"kubevirt.io/vmi-name": "vmi2"}}, "status": {"phase": "Succeeded"}}),
                None,
            ),
        ];
        let base = serde_json::to_value(&old).map_err(|e| e.to_string())?;
        for (what, patch, want) in cases {
            let mut v = base.clone();
            json_patch::merge(&mut v, &patch);
            let new: VirtualMachineInstanceMigration = serde_json::from_value(v).map_err(|e| e.to_string())?;
            let got: Vec<(String, String)> =
                validate_update(&old, &new).into_iter().map(|c| (c.type_.as_str().to_owned(), c.message)).collect();
            let want: Vec<(String, String)> =
                want.into_iter().map(|m| ("FieldValueNotSupported".to_owned(), m.to_owned())).collect();
            assert_eq!(got, want, "{what}");
        }
        Ok(())
    }
}
