//! Admission for `kubevirt.io` VirtualMachineInstances — upstream virt-api's webhook role (contract
//! `../shared/specs/kubevirt.md` §0.3, §2.1–2.6):
//!
//! ```text
//! kube-apiserver ──HTTPS (CA bundle of the webhook configurations)──► server
//!   POST /virtualmachineinstances-mutate           ─► webhook::review ─► defaults::default_vmi ─► JSON patch
//!   POST /virtualmachineinstances-validate-create  ─► webhook::review ─► validate::validate_create ─► Status
//!   POST /virtualmachineinstances-validate-update  ─► webhook::review ─► validate::validate_update ─► Status
//!   GET  /healthz
//!   POST /migration-mutate-create | /migration-validate-create | /migration-validate-update
//!                                                   ─► webhook::review ─► validate::migration (VMIM admission)
//!   /apis/subresources.kubevirt.io/…                ─► subresources (aggregated API: start/stop/restart, migrate, …)
//! ```
//!
//! * [`defaults`] — the defaulting of §2.6 as one pure function;
//! * [`validate`] — upstream's validation with its exact messages ([`cause`]: causes, field paths, the refusal
//!   `Status` as upstream formats it);
//! * [`webhook`] — AdmissionReview in, AdmissionReview out (no HTTP);
//! * [`server`] — the HTTPS server (`controller_runtime::tls`);
//! * [`subresources`] — the aggregated API `virtctl` calls; [`lifecycle`] — start/stop/restart as pure plans;
//!   [`migrate`] — the migration a `migrate` request creates;
//! * [`vmi_ops`] — console, VNC, pause and unpause through the node agent ([`node`]); [`portforward`] — tunnels to
//!   the guest's ports;
//! * [`lookup`] — what the VM validator reads from the API server (the instancetype and preference);
//! * [`config`] — the cluster settings (upstream's `KubeVirt` configuration) and the requester; [`settings`] — the
//!   binary's environment;
//! * [`quantity`] — Kubernetes quantities as Go parses, compares and prints them; [`hyperv`] — Hyper-V feature
//!   dependencies (defaulting and validation).
//!
//! The manifests are `deploy/virt-api.yaml` (what the install script must fill in is documented there).

#![deny(missing_docs)]

pub mod cause;
pub mod config;
pub mod defaults;
pub mod evict;
pub mod expand;
pub mod hyperv;
pub mod lifecycle;
pub mod lookup;
pub mod metrics;
pub mod migrate;
pub mod node;
pub mod portforward;
pub use crds::quantity;
pub mod server;
pub mod settings;
pub mod subresources;
pub mod validate;
pub mod vmi_ops;
pub mod volumes;
pub mod webhook;

pub use config::{Config, User};
pub use defaults::{Fresh, default_vmi};
pub use validate::{validate_create, validate_update};
