//! Hyper-V enlightenment dependencies (upstream `pkg/virt-api/webhooks/hyperv.go`): `synic` needs `vpindex`,
//! `evmcs` needs `vapic`, `ipi` and `tlbflush` need `vpindex`, `synictimer` needs `synic`. Defaulting enables a
//! missing requirement on the user's behalf; validation refuses an enabled feature whose requirement was disabled.
//! `evmcs` also needs the `vmx` CPU feature with policy `require`.

use crds::kubevirt::domain::{Cpu, CpuFeature, CpuFeaturePolicy, FeatureHyperv, FeatureState};

use crate::cause::{Cause, CauseType, Path};

/// The CPU feature `evmcs` needs.
pub const VMX_FEATURE: &str = "vmx";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feature {
    Vpindex,
    Synic,
    Vapic,
    Evmcs,
    Ipi,
    Tlbflush,
    Synictimer,
}

impl Feature {
    fn name(self) -> &'static str {
        match self {
            Feature::Vpindex => "vpindex",
            Feature::Synic => "synic",
            Feature::Vapic => "vapic",
            Feature::Evmcs => "evmcs",
            Feature::Ipi => "ipi",
            Feature::Tlbflush => "tlbflush",
            Feature::Synictimer => "synictimer",
        }
    }
}

/// (feature, its requirement), leaves first — the order upstream checks them in.
const DEPENDENCIES: [(Feature, Feature); 5] = [
    (Feature::Evmcs, Feature::Vapic),
    (Feature::Ipi, Feature::Vpindex),
    (Feature::Tlbflush, Feature::Vpindex),
    (Feature::Synictimer, Feature::Synic),
    (Feature::Synic, Feature::Vpindex),
];

/// `None`: the feature object is absent; `Some(enabled)` otherwise.
fn state(h: &FeatureHyperv, f: Feature) -> Option<Option<bool>> {
    let fs = |s: &Option<FeatureState>| s.as_ref().map(|s| s.enabled);
    match f {
        Feature::Vpindex => fs(&h.vpindex),
        Feature::Synic => fs(&h.synic),
        Feature::Vapic => fs(&h.vapic),
        Feature::Evmcs => fs(&h.evmcs),
        Feature::Ipi => fs(&h.ipi),
        Feature::Tlbflush => h.tlbflush.as_ref().map(|t| t.enabled),
        // Upstream always builds a state for synictimer (unset when the object is absent).
        Feature::Synictimer => Some(h.synictimer.as_ref().and_then(|t| t.enabled)),
    }
}

fn missing(s: Option<Option<bool>>) -> bool {
    s.flatten().is_none()
}

fn enabled(s: Option<Option<bool>>) -> bool {
    s == Some(Some(true))
}

fn enable(h: &mut FeatureHyperv, f: Feature) {
    let slot = match f {
        Feature::Vpindex => &mut h.vpindex,
        Feature::Synic => &mut h.synic,
        Feature::Vapic => &mut h.vapic,
        // Never a requirement.
        _ => return,
    };
    slot.get_or_insert_with(FeatureState::default).enabled = Some(true);
}

/// Enables the requirements of enabled features the user left unset (upstream `SetHypervFeatureDependencies`);
/// stops at the first requirement the user disabled (validation refuses it later). Adds the `vmx` CPU feature for
/// `evmcs`.
pub fn set_dependencies(hyperv: &mut Option<FeatureHyperv>, cpu: &mut Option<Cpu>) {
    let Some(h) = hyperv.as_mut() else { return };
    for (feature, requires) in DEPENDENCIES {
        if !enabled(state(h, feature)) {
            continue;
        }
        let req = state(h, requires);
        if missing(req) {
            enable(h, requires);
        } else if !enabled(req) {
            break;
        }
    }
    if h.evmcs.as_ref().is_some_and(|e| e.enabled != Some(false)) {
        let features = cpu.get_or_insert_with(Cpu::default).features.get_or_insert_with(Vec::new);
        match features.iter_mut().find(|f| f.name == VMX_FEATURE) {
            Some(f) => f.policy = Some(CpuFeaturePolicy::Require),
            None => features.push(CpuFeature {
                name: VMX_FEATURE.into(),
                policy: Some(CpuFeaturePolicy::Require),
                ..Default::default()
            }),
        }
    }
}

/// Upstream's `ValidateVirtualMachineInstanceHyperv` (called with `field` = `spec.domain.features.hyperv`; the
/// feature paths below it repeat `domain.features.hyperv`, as upstream's do).
pub fn validate(
    field: &Path,
    hyperv: Option<&FeatureHyperv>,
    hyperv_passthrough: bool,
    cpu: Option<&Cpu>,
) -> Vec<Cause> {
    let mut causes = Vec::new();
    let Some(h) = hyperv else { return causes };
    let base = field.children(&["domain", "features", "hyperv"]);
    for (feature, requires) in DEPENDENCIES {
        if enabled(state(h, feature)) && !enabled(state(h, requires)) {
            let (f, r) = (base.child(feature.name()), base.child(requires.name()));
            causes.push(Cause::invalid(format!("'{f}' requires '{r}', which was disabled."), &f));
        }
    }
    if h.evmcs.as_ref().is_some_and(|e| e.enabled != Some(false)) {
        let features = cpu.and_then(|c| c.features.as_deref()).unwrap_or_default();
        if features.is_empty() {
            causes.push(Cause::new(
                CauseType::Required,
                format!("{VMX_FEATURE} cpu feature is required when evmcs is set"),
                "spec.domain.cpu.features",
            ));
        } else {
            for (i, f) in features.iter().enumerate() {
                if f.name == VMX_FEATURE && f.policy != Some(CpuFeaturePolicy::Require) {
                    causes.push(Cause::invalid(
                        format!("{VMX_FEATURE} cpu feature has to be set to require policy"),
                        format!("spec.domain.cpu.features[{i}].policy"),
                    ));
                }
            }
        }
    }
    if hyperv_passthrough {
        causes.push(Cause::invalid(
            "Cannot explicitly set hyperV features if HypervPassthrough is being used. Please use either HyperV or HypervPassthrough.",
            field,
        ));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> Option<FeatureState> {
        Some(FeatureState { enabled: Some(true), ..Default::default() })
    }

    fn off() -> Option<FeatureState> {
        Some(FeatureState { enabled: Some(false), ..Default::default() })
    }

    #[test]
    fn missing_requirements_are_enabled_and_vmx_is_added_for_evmcs() {
        let mut h = Some(FeatureHyperv { synic: on(), evmcs: on(), ..Default::default() });
        let mut cpu = None;
        set_dependencies(&mut h, &mut cpu);
        let h = h.unwrap_or_default();
        assert_eq!((h.vpindex, h.vapic), (on(), on()));
        let f = cpu.and_then(|c| c.features).unwrap_or_default();
        assert_eq!(f.len(), 1);
        assert_eq!((f[0].name.as_str(), f[0].policy.clone()), ("vmx", Some(CpuFeaturePolicy::Require)));
    }

    #[test]
    fn a_disabled_requirement_is_refused() {
        let mut h = Some(FeatureHyperv { synic: on(), vpindex: off(), ..Default::default() });
        set_dependencies(&mut h, &mut None);
        assert_eq!(h.as_ref().and_then(|h| h.vpindex.clone()), off());
        let causes = validate(&Path::new("spec").children(&["domain", "features", "hyperv"]), h.as_ref(), false, None);
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "'spec.domain.features.hyperv.domain.features.hyperv.synic' requires 'spec.domain.features.hyperv.domain.features.hyperv.vpindex', which was disabled.",
                "spec.domain.features.hyperv.domain.features.hyperv.synic"
            )]
        );
    }
}
