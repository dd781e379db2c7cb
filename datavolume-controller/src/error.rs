//! The reconcilers' error type.

/// Errors from a reconcile; every one is retried with backoff.
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
    /// A size did not parse.
    #[error(transparent)]
    Quantity(#[from] crate::quantity::InvalidQuantity),
    /// A serialisation problem while building a patch.
    #[error("building patch: {0}")]
    Json(#[from] serde_json::Error),
}

/// Result of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds what was being done to a kube error.
pub fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Kube { action, source }
}

/// True when `e` is an API 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// True when `e` is an API 409 (already exists / conflict).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}
