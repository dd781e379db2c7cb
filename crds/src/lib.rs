//! API types of `cdi.kubevirt.io/v1beta1` that this project serves — [`DataVolume`], [`CDIConfig`],
//! [`StorageProfile`] — and CDI's exact wire constants ([`consts`]), in one place.
//!
//! Field names, enum values, annotation keys, reasons and messages are byte-compatible with upstream CDI
//! (`../shared/specs/cdi.md`). The CRD YAML under `deploy/crds/` is generated from these types by the `crdgen`
//! binary ([`crd::render_all`]); a test fails when the committed YAML drifts from the types.
//!
//! Validation that upstream's admission webhook performs is expressed as CEL rules in the CRD schema
//! ([`crd::datavolume_validations`]), so the real API server enforces it with upstream's messages.

pub mod config;
pub mod consts;
pub mod crd;
pub mod datavolume;
pub mod naming;

pub use config::{CDIConfig, CDIConfigSpec, CDIConfigStatus, StorageProfile, StorageProfileSpec};
pub use datavolume::{DataVolume, DataVolumeCondition, DataVolumePhase, DataVolumeSpec, DataVolumeStatus};
