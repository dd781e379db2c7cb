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

/// The API server's message of a refused request (what `kubectl` prints), else the error itself.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
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
    delete_with_if_present(api, name, &DeleteParams::default()).await
}

/// Deletes `name` with `params` (e.g. grace period 0); `Ok(false)` when it was already gone.
pub async fn delete_with_if_present<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> Result<bool, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, params).await {
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

/// How [`retry_on_conflict`] ended.
#[derive(Debug)]
pub enum Retried<T, E> {
    /// An attempt returned this (a success, or an error that is not a conflict).
    Done(Result<T, E>),
    /// The object was gone when it was read again.
    Gone,
    /// Reading it again failed.
    ReadFailed(kube::Error),
    /// Every attempt ended in a conflict.
    Exhausted,
}

/// Runs `attempt` on `object` and, each time it fails with a conflict (HTTP 409 on a write with the
/// resourceVersion that was read, `is_conflict` tells), again on a fresh copy of `name` read from `api`: at most
/// `attempts` attempts in all. For reconcilers that replace objects without a status subresource, where a
/// concurrent writer makes the update fail and the reconcile must start over from what the API server has.
pub async fn retry_on_conflict<K, T, E, Fut>(
    api: &Api<K>,
    name: &str,
    object: K,
    attempts: usize,
    is_conflict: impl Fn(&E) -> bool,
    mut attempt: impl FnMut(K) -> Fut,
) -> Retried<T, E>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut current = object;
    for _ in 0..attempts {
        match attempt(current).await {
            Err(e) if is_conflict(&e) => match api.get(name).await {
                Ok(fresh) => current = fresh,
                Err(e) if is_not_found(&e) => return Retried::Gone,
                Err(e) => return Retried::ReadFailed(e),
            },
            other => return Retried::Done(other),
        }
    }
    Retried::Exhausted
}

/// The JSON merge patch (RFC 7386) that turns `old` into `new`: changed members with their new value, removed
/// members as `null`, nested objects diffed member by member, everything else (arrays, scalars) replaced whole.
/// `None` when they are equal. A `null` inside `new` cannot be expressed (it means "remove" in a merge patch);
/// serialised API objects skip absent fields, so none occur.
pub fn merge_diff(old: &serde_json::Value, new: &serde_json::Value) -> Option<serde_json::Value> {
    use serde_json::{Map, Value};
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, v) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(d) = merge_diff(ov, v) {
                            patch.insert(k.clone(), d);
                        }
                    }
                    None => {
                        patch.insert(k.clone(), v.clone());
                    }
                }
            }
            for k in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(k.clone(), Value::Null);
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::merge_diff;

    #[test]
    fn merge_diff_sets_changed_members_and_nulls_removed_ones() {
        let old = json!({"a": 1, "b": {"c": 2, "d": [1]}, "gone": "x"});
        let new = json!({"a": 1, "b": {"c": 3, "d": [1, 2], "e": {}}, "new": true});
        assert_eq!(
            merge_diff(&old, &new),
            Some(json!({"b": {"c": 3, "d": [1, 2], "e": {}}, "gone": null, "new": true}))
        );
        assert_eq!(merge_diff(&old, &old), None);
        assert_eq!(merge_diff(&json!(1), &json!({"a": 1})), Some(json!({"a": 1})));
    }
}
