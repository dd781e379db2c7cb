//! Helpers for idempotent API calls: a reconcile may run again at any moment, so "already exists" on create
//! and "not found" on delete are outcomes, not errors.

use kube::api::{Api, DeleteParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// True when `e` is an API 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// True when `e` is an API 409 (already exists / conflict).
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

/// Creates `obj`; `Ok(None)` when an object of that name already exists.
pub async fn create_if_absent<K>(api: &Api<K>, obj: &K) -> Result<Option<K>, kube::Error>
where
    K: Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(o) => Ok(Some(o)),
        Err(e) if is_conflict(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Deletes `name`; `Ok(false)` when it does not exist.
pub async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<bool, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates `obj`, or replaces the object of that name (a fresh certificate or token for a new attempt).
pub async fn create_or_replace<K>(api: &Api<K>, name: &str, obj: &K) -> Result<(), kube::Error>
where
    K: Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    if create_if_absent(api, obj).await?.is_none() {
        api.replace(name, &PostParams::default(), obj).await?;
    }
    Ok(())
}
