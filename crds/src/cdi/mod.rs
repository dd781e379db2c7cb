//! `cdi.kubevirt.io/v1beta1`: the API types this project serves — [`DataVolume`], [`CDIConfig`],
//! [`StorageProfile`] — CDI's exact wire constants ([`consts`]), object names ([`naming`]) and the CRDs
//! ([`crd`]).
//!
//! Field names, enum values, annotation keys, reasons and messages are byte-compatible with upstream CDI
//! (`../shared/specs/cdi.md`).

pub mod config;
pub mod consts;
pub mod crd;
pub mod datavolume;
pub mod naming;

pub use config::{CDIConfig, CDIConfigSpec, CDIConfigStatus, StorageProfile, StorageProfileSpec};
pub use datavolume::{DataVolume, DataVolumeCondition, DataVolumePhase, DataVolumeSpec, DataVolumeStatus};
