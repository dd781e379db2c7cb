//! API types and exact wire constants of the API groups this project serves, one module per group:
//!
//! * [`cdi`] — `cdi.kubevirt.io/v1beta1`: DataVolume, CDIConfig, StorageProfile, CDI's annotations, labels,
//!   reasons and messages.
//! * [`kubevirt`] — `kubevirt.io/v1` (and `v1alpha3`): VirtualMachineInstance, KubeVirt's labels, annotations,
//!   finalizers and condition reasons. Fields the types do not model are kept, not dropped.
//!
//! Field names, enum values and strings are byte-compatible with upstream (`../shared/specs/cdi.md`,
//! `../shared/specs/kubevirt.md`). The CRD YAML under `deploy/crds/` is generated from these types by the
//! `crdgen` binary ([`crd::render_all`], every group); a test fails when the committed YAML drifts from the types.
//! The validation upstream's CDI webhooks perform is expressed as CEL rules in the CRD schemas, so the real API
//! server enforces it with upstream's messages; KubeVirt's VMI defaulting and validation is an admission webhook of
//! its own, and the `kubevirt.io` schemas stay permissive (plain strings, unknown fields preserved) so that webhook
//! reports upstream's messages.
//!
//! This crate holds types and pure functions only: no I/O, no runtime. The wire contracts the workers share
//! (constants, annotations, environments, termination messages) are in the `contracts` crate.

#![deny(missing_docs)]

pub mod cdi;
pub mod crd;
pub mod kubevirt;
pub mod quantity;
