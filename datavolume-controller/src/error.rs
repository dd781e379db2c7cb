//! The reconcilers' error type, classified for the error policy ([`controller_runtime::policy`]).

use controller_runtime::policy::{Classify, Retry, retry_of};

/// Errors from a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done.
        action: String,
        /// kube's error.
        #[source]
        source: kube::Error,
    },
    /// Upload PKI failure.
    #[error(transparent)]
    Certs(#[from] crate::certs::Error),
    /// A size in the claim did not parse.
    #[error(transparent)]
    Quantity(#[from] contracts::quantity::InvalidQuantity),
    /// A serialisation problem while building a patch.
    #[error("building patch: {0}")]
    Json(#[from] serde_json::Error),
}

impl Classify for Error {
    /// API errors as the API server classifies them; a bad size or patch waits for the object to change; PKI
    /// failures (a Secret write, a signing error) are retried.
    fn retry(&self) -> Retry {
        match self {
            Error::Kube { source, .. } => retry_of(source),
            Error::Certs(_) => Retry::Transient,
            Error::Quantity(_) | Error::Json(_) => Retry::Fatal,
        }
    }
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds what was being done to a kube error.
pub fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}
