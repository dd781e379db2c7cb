//! Writing the custom resources themselves: their status and the operator's finalizer (shared by the KubeVirt
//! and CDI reconcilers).

use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::Error;

/// Writes `status` (a merge patch of the status subresource) unless `old` already equals it.
pub(crate) async fn patch_status<K, S>(api: &Api<K>, obj: &K, old: Option<&S>, status: &S) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize + PartialEq,
{
    if old == Some(status) {
        return Ok(());
    }
    let patch = json!({"status": status});
    api.patch_status(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(Error::Status)?;
    Ok(())
}

/// Adds (`present`) or removes `finalizer` (and the `legacy` names upstream still strips) on `obj`.
pub(crate) async fn set_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    present: bool,
    legacy: &[&str],
) -> Result<(), Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut list: Vec<String> = obj.finalizers().to_vec();
    let before = list.len();
    if present {
        if list.iter().any(|f| f == finalizer) {
            return Ok(());
        }
        list.push(finalizer.to_owned());
    } else {
        list.retain(|f| f != finalizer && !legacy.contains(&f.as_str()));
        if list.len() == before {
            return Ok(());
        }
    }
    // Without a resourceVersion: the status may just have been written; the list is computed from the object read.
    let patch = json!({"metadata": {"finalizers": list}});
    api.patch(&obj.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await.map_err(Error::Status)?;
    Ok(())
}
