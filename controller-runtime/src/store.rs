//! Watch caches: a reflector store per resource kind, kept current by a background watch, so reconcilers read
//! from memory and the API server sees one watch per kind.

use futures::StreamExt;
use kube::Api;
use kube::Resource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::de::DeserializeOwned;

/// Starts a watch of `api` (filtered by `config`) into a new store and returns the store. The watch backs off
/// and retries on errors; it runs until the process ends.
pub fn reflect<K>(api: Api<K>, config: watcher::Config) -> Store<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config)).default_backoff().touched_objects();
    tokio::spawn(stream.for_each(|_| futures::future::ready(())));
    reader
}

/// A watch of `api` (filtered by `config`) into a new store, as a stream for a controller's `owns_stream` /
/// `watches_stream`: each object is in the store before the stream yields it, so a reconcile the event triggers
/// reads it (two separate watches — a store and a controller's own trigger — race, and a reconcile can read the
/// state from before the change that triggered it, then wait for a change that already happened). The caller
/// must drive the stream (the controller does).
pub fn reflect_stream<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (Store<K>, impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config)).default_backoff().touched_objects();
    (reader, stream)
}

/// Waits until `store` has had its first complete list; `what` names it in the error.
pub async fn wait_ready<K>(store: &Store<K>, what: &str) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    store.wait_until_ready().await.map_err(|e| anyhow::anyhow!("{what} cache: {e}"))
}
