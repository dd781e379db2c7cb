//! The reconciler's error type, classified for the error policy ([`controller_runtime::policy`]).

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
    /// The VMI changed since it was read (HTTP 409 on the update) and kept changing over every retry.
    #[error("{0} kept changing while it was being updated")]
    Conflict(String),
    /// A cache the reconcile needs has not listed yet (retried).
    #[error("the {0} cache has not listed yet")]
    NotReady(&'static str),
}

impl Classify for Error {
    /// API errors as the API server classifies them; a VMI that kept changing is retried.
    fn retry(&self) -> Retry {
        match self {
            Error::Kube { source, .. } => retry_of(source),
            Error::Conflict(_) | Error::NotReady(_) => Retry::Transient,
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
