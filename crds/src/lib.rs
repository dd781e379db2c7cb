//! API types and exact wire constants of the API groups this project serves, one module per group:
//!
//! * [`cdi`] — `cdi.kubevirt.io/v1beta1`: DataVolume, CDIConfig, StorageProfile, CDI's annotations, labels,
//!   reasons and messages.
//! * [`kubevirt`] — `kubevirt.io/v1`: KubeVirt's labels, annotations and finalizers (the types follow).
//!
//! Field names, enum values and strings are byte-compatible with upstream (`../shared/specs/cdi.md`,
//! `../shared/specs/kubevirt.md`). The CRD YAML under `deploy/crds/` is generated from these types by the
//! `crdgen` binary ([`crd::render_all`], every group); a test fails when the committed YAML drifts from the types.
//! Validation that upstream's admission webhooks perform is expressed as CEL rules in the CRD schemas, so the
//! real API server enforces it with upstream's messages.
//!
//! This crate holds types and pure functions only: no I/O, no runtime. The wire contracts the workers share
//! (constants, annotations, environments, termination messages) are in the `contracts` crate.

#![deny(missing_docs)]

pub mod cdi;
pub mod crd;
pub mod kubevirt;
