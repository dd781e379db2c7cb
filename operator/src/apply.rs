//! Applying rendered objects (`serde_json::Value`s of any kind) with server-side apply, reading them back and
//! deleting them. Kinds are resolved through discovery once per process.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiCapabilities, ApiResource, Scope};
use serde_json::Value;

/// Applying, reading or deleting one object failed.
#[derive(Debug, thiserror::Error)]
#[error("{kind} {name}: {source}")]
pub struct Error {
    /// Its kind.
    pub kind: String,
    /// Its namespace/name.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// The client side of applying manifests: field manager and the resolved kinds.
pub struct Applier {
    client: kube::Client,
    field_manager: String,
    kinds: Mutex<HashMap<GroupVersionKind, (ApiResource, ApiCapabilities)>>,
}

impl Applier {
    /// Applies as `field_manager`.
    pub fn new(client: kube::Client, field_manager: &str) -> Applier {
        Applier { client, field_manager: field_manager.to_owned(), kinds: Mutex::new(HashMap::new()) }
    }

    fn describe(obj: &Value) -> (String, String) {
        let kind = obj["kind"].as_str().unwrap_or("object").to_owned();
        let name = match obj["metadata"]["namespace"].as_str() {
            Some(ns) => format!("{ns}/{}", obj["metadata"]["name"].as_str().unwrap_or("")),
            None => obj["metadata"]["name"].as_str().unwrap_or("").to_owned(),
        };
        (kind, name)
    }

    async fn api(&self, obj: &Value) -> Result<(Api<DynamicObject>, String), Error> {
        let (kind, full) = Self::describe(obj);
        let err = |source| Error { kind: kind.clone(), name: full.clone(), source };
        let (group, version) = match obj["apiVersion"].as_str().unwrap_or("").split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), obj["apiVersion"].as_str().unwrap_or("").to_owned()),
        };
        let gvk = GroupVersionKind::gvk(&group, &version, &kind);
        let cached = self.kinds.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&gvk).cloned();
        let (ar, caps) = match cached {
            Some(c) => c,
            None => {
                let c = discovery::pinned_kind(&self.client, &gvk).await.map_err(err)?;
                self.kinds.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(gvk, c.clone());
                c
            }
        };
        let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let api = match (caps.scope, obj["metadata"]["namespace"].as_str()) {
            (Scope::Namespaced, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &ar),
            (Scope::Namespaced, None) => Api::default_namespaced_with(self.client.clone(), &ar),
            (Scope::Cluster, _) => Api::all_with(self.client.clone(), &ar),
        };
        Ok((api, name))
    }

    fn err(obj: &Value, source: kube::Error) -> Error {
        let (kind, name) = Self::describe(obj);
        Error { kind, name, source }
    }

    /// Server-side applies `obj` (forcing ownership of the fields it sets).
    pub async fn apply(&self, obj: &Value) -> Result<(), Error> {
        let (api, name) = self.api(obj).await?;
        let pp = PatchParams::apply(&self.field_manager).force();
        api.patch(&name, &pp, &Patch::Apply(obj)).await.map_err(|e| Self::err(obj, e))?;
        Ok(())
    }

    /// The live form of `obj`, if it exists.
    pub async fn get(&self, obj: &Value) -> Result<Option<Value>, Error> {
        let (api, name) = self.api(obj).await?;
        let live = api.get_opt(&name).await.map_err(|e| Self::err(obj, e))?;
        Ok(live.map(|o| serde_json::to_value(o).unwrap_or_default()))
    }

    /// Deletes `obj` (dependents in the background); `true` once it is gone.
    pub async fn delete(&self, obj: &Value) -> Result<bool, Error> {
        let (api, name) = self.api(obj).await?;
        match api.get_opt(&name).await.map_err(|e| Self::err(obj, e))? {
            None => Ok(true),
            Some(live) if live.metadata.deletion_timestamp.is_some() => Ok(false),
            Some(_) => {
                controller_runtime::api::delete_with_if_present(&api, &name, &DeleteParams::background())
                    .await
                    .map_err(|e| Self::err(obj, e))?;
                Ok(false)
            }
        }
    }
}
