//! The wire contracts between this project's components, each spelled once and used by both sides:
//!
//! * [`cdi`] — CDI's exact constants (annotation keys, labels, reasons, messages), the PVC annotations that
//!   carry a transfer between the controllers ([`cdi::claim`]), the worker pods' environments ([`cdi::env`]),
//!   the termination message ([`cdi::termination`]), the content type and CDI's size arithmetic.
//! * [`kubevirt`] — KubeVirt's exact constants (group, versions, labels, annotations, finalizers).
//! * [`quantity`] — Kubernetes quantities as byte counts (the one parser).
//! * [`errors`] — errors on one line with their causes (messages, termination lines).
//!
//! Pure types and functions over plain strings and maps: no Kubernetes client types, no I/O, no runtime, so the
//! workers (importer, upload server) use them without depending on a Kubernetes client. The API types that embed
//! these live in `crds`, which re-exports the constants.

#![deny(missing_docs)]

pub mod cdi;
pub mod errors;
pub mod kubevirt;
pub mod quantity;
