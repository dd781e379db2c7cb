//! libvirt's domain state → the VMI phase (contract §7.3, upstream virt-handler's
//! `calculateVmPhaseForStatusReason`). Pure; the node agent polls [`crate::libvirt::Domain::state`] and writes
//! what this returns.
//!
//! | domain state | reason | phase |
//! |---|---|---|
//! | Running, Blocked, PMSuspended | any | Running |
//! | Paused | PostCopyFailed | Failed |
//! | Paused | any other (the `Paused` condition tells why) | Running |
//! | Shutoff, Crashed | Crashed, Panicked | Failed |
//! | Shutoff, Crashed | Shutdown, Saved, FromSnapshot | Succeeded |
//! | Shutoff, Crashed | Destroyed | Failed with ACPI ([`Acpi::Enabled`]: the grace period ran out), else Succeeded |
//! | Shutoff, Crashed | Migrated, anything else | unchanged |
//! | NoState, ShuttingDown | any | unchanged |
//! | no domain | — | see [`phase_without_domain`] |

use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::VirtualMachineInstancePhase as Phase;

use crate::libvirt::{DomainState, StateReason};

/// Whether stopping the VMI goes through an ACPI shutdown first (upstream's `isACPIEnabled`): then a destroyed
/// domain means the guest ignored the request for the whole grace period, a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acpi {
    /// ACPI is on and the grace period is not 0: the node agent asks the guest first.
    Enabled,
    /// ACPI is off, or the grace period is 0: the node agent destroys at once, which is a normal stop.
    Disabled,
}

impl Acpi {
    /// The VMI's setting: enabled unless `features.acpi.enabled: false` or `terminationGracePeriodSeconds: 0`.
    pub fn of(vmi: &VirtualMachineInstance) -> Acpi {
        let acpi_on =
            vmi.spec.domain.features.as_ref().and_then(|f| f.acpi.as_ref()).and_then(|a| a.enabled) != Some(false);
        let grace =
            vmi.spec.termination_grace_period_seconds.unwrap_or(crate::domain_xml::DEFAULT_GRACE_PERIOD_SECONDS);
        if acpi_on && grace > 0 { Acpi::Enabled } else { Acpi::Disabled }
    }
}

/// The phase a domain in `state` for `reason` means; `None`: the phase does not change.
pub fn phase_for(state: DomainState, reason: StateReason, acpi: Acpi) -> Option<Phase> {
    match state {
        DomainState::Running | DomainState::Blocked | DomainState::PmSuspended => Some(Phase::Running),
        DomainState::Paused => match reason {
            StateReason::PostCopyFailed => Some(Phase::Failed),
            _ => Some(Phase::Running),
        },
        DomainState::Shutoff | DomainState::Crashed => match reason {
            StateReason::Crashed | StateReason::Panicked => Some(Phase::Failed),
            StateReason::Shutdown | StateReason::Saved | StateReason::FromSnapshot => Some(Phase::Succeeded),
            StateReason::Destroyed => Some(match acpi {
                Acpi::Enabled => Phase::Failed,
                Acpi::Disabled => Phase::Succeeded,
            }),
            _ => None,
        },
        DomainState::NoState | DomainState::ShuttingDown | DomainState::Unrecognised(_) => None,
    }
}

/// How the launcher pod's libvirt answers when no domain exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// Not ready yet (no `ready` file, socket absent).
    Initializing,
    /// Answering.
    Responsive,
    /// Ready once, now not answering.
    Unresponsive,
}

/// The phase when libvirt has no domain for the VMI; `None`: unchanged. A Running VMI whose domain vanished
/// failed; a Scheduled one whose launcher stopped answering failed; otherwise the domain is still to come.
pub fn phase_without_domain(current: &Phase, launcher: Launcher) -> Option<Phase> {
    match (current, launcher) {
        (Phase::Running, _) => Some(Phase::Failed),
        (Phase::Scheduled, Launcher::Unresponsive) => Some(Phase::Failed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crds::kubevirt::domain::{FeatureState, Features};

    #[test]
    fn states_and_reasons_map_to_upstreams_phases() {
        use Acpi::{Disabled, Enabled};
        use DomainState as S;
        use StateReason as R;
        let table: &[(S, R, Acpi, Option<Phase>)] = &[
            (S::Running, R::Booted, Enabled, Some(Phase::Running)),
            (S::Running, R::Unpaused, Disabled, Some(Phase::Running)),
            (S::Running, R::Migrated, Enabled, Some(Phase::Running)),
            (S::Blocked, R::Unknown, Enabled, Some(Phase::Running)),
            (S::PmSuspended, R::Unknown, Enabled, Some(Phase::Running)),
            (S::Paused, R::User, Enabled, Some(Phase::Running)),
            (S::Paused, R::IoError, Enabled, Some(Phase::Running)),
            (S::Paused, R::Migration, Enabled, Some(Phase::Running)),
            (S::Paused, R::StartingUp, Enabled, Some(Phase::Running)),
            (S::Paused, R::PostCopyFailed, Enabled, Some(Phase::Failed)),
            (S::Shutoff, R::Shutdown, Enabled, Some(Phase::Succeeded)),
            (S::Shutoff, R::Shutdown, Disabled, Some(Phase::Succeeded)),
            (S::Shutoff, R::Saved, Enabled, Some(Phase::Succeeded)),
            (S::Shutoff, R::FromSnapshot, Enabled, Some(Phase::Succeeded)),
            (S::Shutoff, R::Destroyed, Enabled, Some(Phase::Failed)),
            (S::Shutoff, R::Destroyed, Disabled, Some(Phase::Succeeded)),
            (S::Shutoff, R::Crashed, Disabled, Some(Phase::Failed)),
            (S::Shutoff, R::Migrated, Enabled, None),
            (S::Shutoff, R::Unknown, Enabled, None),
            (S::Shutoff, R::Failed, Enabled, None),
            (S::Shutoff, R::Daemon, Enabled, None),
            (S::Crashed, R::Panicked, Enabled, Some(Phase::Failed)),
            (S::Crashed, R::Unknown, Enabled, None),
            (S::NoState, R::Unknown, Enabled, None),
            (S::ShuttingDown, R::User, Enabled, None),
            (S::Unrecognised(42), R::Unrecognised(7), Enabled, None),
        ];
        for (state, reason, acpi, want) in table {
            assert_eq!(phase_for(*state, *reason, *acpi), *want, "{state:?}/{reason:?} with ACPI {acpi:?}");
        }
    }

    #[test]
    fn without_a_domain_only_running_and_unresponsive_scheduled_vmis_fail() {
        use Launcher::{Initializing, Responsive, Unresponsive};
        let table: &[(Phase, Launcher, Option<Phase>)] = &[
            (Phase::Running, Responsive, Some(Phase::Failed)),
            (Phase::Running, Unresponsive, Some(Phase::Failed)),
            (Phase::Scheduled, Unresponsive, Some(Phase::Failed)),
            (Phase::Scheduled, Responsive, None),
            (Phase::Scheduled, Initializing, None),
            (Phase::Scheduling, Unresponsive, None),
            (Phase::Succeeded, Unresponsive, None),
            (Phase::Failed, Responsive, None),
        ];
        for (current, launcher, want) in table {
            assert_eq!(phase_without_domain(current, *launcher), *want, "{current:?} with launcher {launcher:?}");
        }
    }

    #[test]
    fn acpi_is_enabled_unless_turned_off_or_the_grace_period_is_zero() {
        let mut vmi = VirtualMachineInstance::new("v", Default::default());
        assert_eq!(Acpi::of(&vmi), Acpi::Enabled);
        vmi.spec.termination_grace_period_seconds = Some(0);
        assert_eq!(Acpi::of(&vmi), Acpi::Disabled);
        vmi.spec.termination_grace_period_seconds = Some(5);
        vmi.spec.domain.features = Some(Features { acpi: Some(FeatureState::default()), ..Default::default() });
        assert_eq!(Acpi::of(&vmi), Acpi::Enabled);
        vmi.spec.domain.features = Some(Features {
            acpi: Some(FeatureState { enabled: Some(false), ..Default::default() }),
            ..Default::default()
        });
        assert_eq!(Acpi::of(&vmi), Acpi::Disabled);
    }
}
