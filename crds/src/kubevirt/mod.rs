//! `kubevirt.io/v1` (also served as `v1alpha3`): KubeVirt's core API. The types (VirtualMachineInstance,
//! VirtualMachine, …) arrive with the VM half; the group's exact wire constants are ready in [`consts`] and its
//! CRDs are rendered by [`crd`] with the CDI ones.
//!
//! Contract: `../shared/specs/kubevirt.md`.

/// KubeVirt's exact wire constants (kept in `contracts`).
pub use contracts::kubevirt::consts;
pub mod crd;
