//! `cdi.kubevirt.io/v1beta1`: the API types this project serves — [`DataVolume`], [`CDIConfig`],
//! [`StorageProfile`] — CDI's exact wire constants ([`consts`], from `contracts`), object names ([`naming`]) and the CRDs ([`crd`]).
//! The typed hand-overs between CDI's components (PVC annotations, worker environments, termination messages)
//! are in `contracts::cdi`.
//!
//! Field names, enum values, annotation keys, reasons and messages are byte-compatible with upstream CDI
//! (`../shared/specs/cdi.md`).

pub mod config;
pub mod crd;
pub mod datavolume;
pub mod naming;
pub mod operator;

/// CDI's exact wire constants (kept in `contracts`, which the workers share without a Kubernetes client).
pub use contracts::cdi::consts;

pub use config::{CDIConfig, CDIConfigSpec, CDIConfigStatus, StorageProfile, StorageProfileSpec};
pub use datavolume::{DataVolume, DataVolumeCondition, DataVolumePhase, DataVolumeSpec, DataVolumeStatus};
pub use operator::{CDI, CDISpec, CDIStatus};
