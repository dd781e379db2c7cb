//! CDI's wire contracts, each used by both of its sides:
//!
//! ```text
//! DataVolume ──datavolume reconciler──► PVC annotations ([`claim::TransferRequest`], [`claim::ClaimOptions`])
//!                                           │ transfer reconciler
//!                                           ▼
//!                 worker pod env ([`env::ImporterEnv`], [`env::UploadServerEnv`], [`env::CloneSourceEnv`],
//!                 [`env::OvaDiskEnv`])
//!                                           │ importer / upload server
//!                                           ▼
//!      termination message ([`termination::TerminationMessage`]) ──transfer reconciler──►
//!                                     PVC annotations ([`claim::WorkerState`]) ──► DataVolume status, virtctl
//! ```
//!
//! Worker metrics: [`transfer::TransferStatus`] (bytes, rate, time left) beside CDI's percentage.
//!
//! Plus CDI's exact strings ([`consts`]), the content type ([`ContentType`]) and size arithmetic ([`sizing`]).

pub mod claim;
pub mod consts;
pub mod env;
pub mod sizing;
pub mod termination;
pub mod transfer;

pub use claim::{ClaimOptions, ImportSource, SourceKind, StateChanges, TransferRequest, WorkerPhase, WorkerState};
pub use env::{
    CloneSourceEnv, Credentials, EnvEntry, EnvError, EnvValue, ImporterEnv, OvaDiskEnv, ProxyEnv, UploadServerEnv,
};
pub use termination::TerminationMessage;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// What a volume receives: `spec.contentType`, the `storage.contentType` annotation, `IMPORTER_CONTENTTYPE` and the
// upload server's archive routes. (The doc comment is the CRD schema's description of `spec.contentType`.)
/// `spec.contentType`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ContentType {
    /// A disk image, converted to raw.
    #[default]
    Kubevirt,
    /// A tar archive extracted into the volume.
    Archive,
}

impl ContentType {
    /// The wire string (`kubevirt`/`archive`).
    pub fn as_str(self) -> &'static str {
        match self {
            ContentType::Kubevirt => "kubevirt",
            ContentType::Archive => "archive",
        }
    }
}
