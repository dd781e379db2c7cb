//! The VirtualMachine and VirtualMachineInstanceReplicaSet validators (upstream's `VMsAdmitter`,
//! `virtualmachine-validator.kubevirt.io`, and `VMIRSAdmitter`, `virtualmachinereplicaset-validator.kubevirt.io`):
//! the run strategy (§1.1), the dataVolumeTemplates' references, the replica set's selector, and the template
//! validated exactly as a VMI is, with its causes named under `spec.template.spec`.

use crds::kubevirt::instancetype::{Expansion, apply, conflict_message};
use crds::kubevirt::replicaset::selects;
use crds::kubevirt::vm::VirtualMachineInstanceTemplateSpec;
use crds::kubevirt::{RunStrategy, VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceReplicaSet};
use kube::ResourceExt;

use super::validate_create;
use crate::cause::{Cause, CauseType, Path};
use crate::config::{Config, User};
use crate::defaults::default_template_spec;

/// Both `running` and `runStrategy` (upstream's message).
pub const ERR_RUNNING_AND_RUN_STRATEGY: &str =
    "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead";
/// Neither (upstream's message).
pub const ERR_RUN_STRATEGY_REQUIRED: &str = "RunStrategy must be specified";
/// The warning a VM with `spec.running` is admitted with (upstream's).
pub const WARN_RUNNING_DEPRECATED: &str = "spec.running is deprecated, please use spec.runStrategy instead.";

/// The run strategies this installation runs (`WaitAsReceiver` needs decentralized live migration, which is not
/// supported: refused as upstream refuses it without its feature gate).
pub const SUPPORTED_RUN_STRATEGIES: [RunStrategy; 5] =
    [RunStrategy::Always, RunStrategy::RerunOnFailure, RunStrategy::Manual, RunStrategy::Halted, RunStrategy::Once];

/// The causes to refuse `vm` for (empty: admitted).
///
/// `expansion` is the VM's instancetype and preference as admission read them (`None` when it names neither):
/// the template is validated with them applied; a missing one, or a template setting what the instancetype
/// provides, is refused with upstream's message.
pub fn validate_vm(
    vm: &VirtualMachine,
    config: &Config,
    user: &User,
    expansion: Option<&Result<Expansion, String>>,
) -> Vec<Cause> {
    let spec_path = Path::new("spec");
    let mut causes = Vec::new();
    let running = spec_path.child("running");
    match (&vm.spec.running, &vm.spec.run_strategy) {
        (Some(_), Some(_)) => causes.push(Cause::invalid(ERR_RUNNING_AND_RUN_STRATEGY, &running)),
        (None, None) => causes.push(Cause::invalid(ERR_RUN_STRATEGY_REQUIRED, &running)),
        (_, Some(s)) if !SUPPORTED_RUN_STRATEGIES.contains(s) => {
            causes.push(Cause::invalid(format!("Invalid RunStrategy ({s})"), spec_path.child("runStrategy")))
        }
        _ => {}
    }
    let Some(template) = vm.spec.template.spec.as_ref() else {
        causes.push(Cause::new(CauseType::Required, "missing virtual machine template.", spec_path.child("template")));
        return causes;
    };
    // Every DataVolume template must be used by a volume.
    let volumes = template.volumes.as_deref().unwrap_or_default();
    for (i, t) in vm.spec.data_volume_templates.iter().flatten().enumerate() {
        let name = t.metadata.name.as_deref().unwrap_or_default();
        let field = spec_path.child("dataVolumeTemplate").index(i);
        if name.is_empty() {
            causes.push(Cause::new(
                CauseType::Required,
                format!("'name' field must not be empty for DataVolumeTemplate entry {field}."),
                field.child("name"),
            ));
            continue;
        }
        if !volumes.iter().any(|v| v.data_volume.as_ref().is_some_and(|d| d.name == name)) {
            causes.push(Cause::new(
                CauseType::Required,
                format!("DataVolumeTemplate entry {field} must be referenced in the VMI template's 'volumes' list"),
                &field,
            ));
        }
    }
    let mut template = vm.spec.template.clone();
    match expansion {
        Some(Err(message)) => {
            let field = if vm.spec.instancetype.is_some() && message.contains("instancetype") {
                spec_path.child("instancetype")
            } else {
                spec_path.child("preference")
            };
            causes.push(Cause::invalid(message.clone(), field));
            return causes;
        }
        Some(Ok(e)) => {
            let spec = template.spec.get_or_insert_default();
            let meta = template.metadata.get_or_insert_default();
            let mut annotations = meta.annotations.clone().unwrap_or_default();
            if let Err(conflicts) = apply(spec, &mut annotations, e) {
                causes.push(Cause::invalid(conflict_message(&conflicts), conflicts.join(", ")));
                return causes;
            }
            meta.annotations = Some(annotations);
        }
        None => {}
    }
    causes.extend(validate_template(&template, vm, config, user));
    causes
}

/// The causes to refuse replica set `rs` for: the template validated as a VMI, and a selector that must select
/// the template's labels (upstream's `ValidateVMIRSSpec`).
pub fn validate_replicaset(rs: &VirtualMachineInstanceReplicaSet, config: &Config, user: &User) -> Vec<Cause> {
    let spec_path = Path::new("spec");
    if rs.spec.template.spec.is_none() {
        return vec![Cause::new(CauseType::Required, "missing virtual machine template.", spec_path.child("template"))];
    }
    let mut causes = validate_template(&rs.spec.template, rs, config, user);
    let labels = rs.spec.template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    if !selects(&rs.spec.selector, &labels) {
        causes.push(Cause::invalid("selector does not match labels.", spec_path.child("selector")));
    }
    causes
}

/// `template` validated as the VMI a controller creates from it (in `owner`'s namespace), its causes named under
/// `spec.template.spec`.
fn validate_template(
    template: &VirtualMachineInstanceTemplateSpec,
    owner: &impl ResourceExt,
    config: &Config,
    user: &User,
) -> Vec<Cause> {
    let Some(mut spec) = template.spec.clone() else { return Vec::new() };
    default_template_spec(&mut spec, config);
    let meta = template.metadata.clone().unwrap_or_default();
    let mut vmi = VirtualMachineInstance::new(&owner.name_any(), spec);
    vmi.metadata.labels = meta.labels;
    vmi.metadata.annotations = meta.annotations;
    vmi.metadata.namespace = owner.namespace();
    let prefix = Path::new("spec").children(&["template", "spec"]).to_string();
    validate_create(&vmi, config, user)
        .into_iter()
        .map(|mut cause| {
            for text in [&mut cause.field, &mut cause.message] {
                *text = rebase(text, &prefix);
            }
            cause
        })
        .collect()
}

/// Rewrites the VMI field paths (`spec`, `spec.…`, `spec[…]`) in `text` to the template's (`prefix.…`); a `spec`
/// inside another word (`podspec.x`) stays.
fn rebase(text: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(text.len() + prefix.len());
    let mut rest = text;
    let mut previous: Option<char> = None;
    while let Some(i) = rest.find("spec") {
        let before = rest[..i].chars().next_back().or(previous);
        let after = rest[i + 4..].chars().next();
        let starts_word = before.is_none_or(|c| !(c.is_alphanumeric() || c == '.' || c == '_'));
        let ends_path = after.is_none_or(|c| c == '.' || c == '[');
        out.push_str(&rest[..i]);
        out.push_str(if starts_word && ends_path { prefix } else { "spec" });
        previous = Some('c');
        rest = &rest[i + 4..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use crds::kubevirt::instancetype::{Captured, CpuInstancetype, MemoryInstancetype, VirtualMachineInstancetypeSpec};
    use crds::kubevirt::vm::InstancetypeStatusRef;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn vm(yaml: &str) -> VirtualMachine {
        serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    const BASE: &str = "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: v, namespace: ns}\nspec:\n  STRATEGY\n  template:\n    spec:\n      domain:\n        devices: {}\n        MEMORY\n";

    fn with(strategy: &str, memory: &str) -> VirtualMachine {
        vm(&BASE.replace("STRATEGY", strategy).replace("MEMORY", memory))
    }

    fn messages(c: &[Cause]) -> Vec<String> {
        c.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn run_strategy_rules_and_the_template_as_a_vmi() {
        let config = Config::default();
        let user = User::default();
        let ok = with("runStrategy: Always", "memory: {guest: 128Mi}");
        assert_eq!(messages(&validate_vm(&ok, &config, &user, None)), Vec::<String>::new());
        let both = with("runStrategy: Always\n  running: true", "memory: {guest: 128Mi}");
        assert_eq!(
            messages(&validate_vm(&both, &config, &user, None)),
            [format!("spec.running: {ERR_RUNNING_AND_RUN_STRATEGY}")]
        );
        let neither = with("instancetype: null", "memory: {guest: 128Mi}");
        assert_eq!(
            messages(&validate_vm(&neither, &config, &user, None)),
            [format!("spec.running: {ERR_RUN_STRATEGY_REQUIRED}")]
        );
        let receiver = with("runStrategy: WaitAsReceiver", "memory: {guest: 128Mi}");
        assert_eq!(
            messages(&validate_vm(&receiver, &config, &user, None)),
            ["spec.runStrategy: Invalid RunStrategy (WaitAsReceiver)"]
        );
        let no_memory = with("runStrategy: Always", "cpu: {cores: 1}");
        let m = messages(&validate_vm(&no_memory, &config, &user, None));
        assert!(m.iter().any(|m| m.contains("spec.template.spec.domain.memory.guest")), "{m:?}");
    }

    #[test]
    fn instancetypes_are_applied_before_validation_and_conflicts_refused() {
        let config = Config::default();
        let user = User::default();
        let expansion = Ok(Expansion {
            instancetype: Some(Captured {
                reference: InstancetypeStatusRef::default(),
                spec: VirtualMachineInstancetypeSpec {
                    cpu: CpuInstancetype { guest: 1, ..Default::default() },
                    memory: MemoryInstancetype { guest: Quantity("128Mi".into()), ..Default::default() },
                    ..Default::default()
                },
            }),
            preference: None,
        });
        let memory_from_instancetype =
            with("runStrategy: Always\n  instancetype: {name: csmall}", "cpu: {model: host-model}");
        assert_eq!(
            messages(&validate_vm(&memory_from_instancetype, &config, &user, Some(&expansion))),
            Vec::<String>::new()
        );
        let conflicting = with("runStrategy: Always\n  instancetype: {name: csmall}", "memory: {guest: 128Mi}");
        assert_eq!(
            messages(&validate_vm(&conflicting, &config, &user, Some(&expansion))),
            [
                "spec.template.spec.domain.memory.guest: VM field(s) spec.template.spec.domain.memory.guest conflicts with selected instance type"
            ]
        );
        let missing = Err("Failure to find instancetype: x not found".to_owned());
        assert_eq!(
            messages(&validate_vm(&memory_from_instancetype, &config, &user, Some(&missing))),
            ["spec.instancetype: Failure to find instancetype: x not found"]
        );
    }

    #[test]
    fn vmi_paths_move_under_the_template() {
        let p = "spec.template.spec";
        assert_eq!(rebase("spec.domain.devices.disks[0].name", p), "spec.template.spec.domain.devices.disks[0].name");
        assert_eq!(
            rebase("spec.volumes[1] must reference spec.domain", p),
            "spec.template.spec.volumes[1] must reference spec.template.spec.domain"
        );
        assert_eq!(
            rebase("no memory requested, spec.domain.memory", p),
            "no memory requested, spec.template.spec.domain.memory"
        );
        assert_eq!(rebase("podspec.x stays", p), "podspec.x stays");
        assert_eq!(rebase("spec", p), "spec.template.spec");
        assert_eq!(rebase("", p), "");
        assert_eq!(rebase("the spec is wrong: spec[0]", p), "the spec is wrong: spec.template.spec[0]");
    }
}
