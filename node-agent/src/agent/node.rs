//! The node's side: the heartbeat (annotation `kubevirt.io/heartbeat`, label `kubevirt.io/schedulable`) and the
//! removal of socket directories whose launcher pod is gone (so nothing of a VMI stays on the node).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use contracts::kubevirt::consts::{ann, label};
use contracts::kubevirt::launcher::NODE_SOCKETS_DIR;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;

/// Period of the heartbeat and of the socket-directory sweep.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// A socket directory younger than this is kept even without a known pod (the pod cache may lag).
pub const SWEEP_GRACE: Duration = Duration::from_secs(120);

/// Writes the heartbeat and the schedulable label (`schedulable`) on `node`.
pub async fn heartbeat(client: &kube::Client, node: &str, schedulable: bool) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = serde_json::json!({"metadata": {
        "labels": {label::SCHEDULABLE: if schedulable { "true" } else { "false" }},
        "annotations": {ann::HEARTBEAT: Time(Timestamp::now())},
    }});
    nodes.patch(node, &PatchParams::default(), &Patch::Merge(&patch)).await.map(drop)
}

/// The socket directories under `root` that belong to no pod in `live` and are older than [`SWEEP_GRACE`].
pub fn stale_dirs(root: &Path, live: &HashSet<String>, now: SystemTime) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter(|e| !live.contains(&e.file_name().to_string_lossy().into_owned()))
        .filter(|e| {
            e.metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age >= SWEEP_GRACE)
        })
        .map(|e| e.path())
        .collect()
}

/// Removes the socket directories of vanished launcher pods.
pub fn sweep(pods: &Store<Pod>) {
    let live: HashSet<String> = pods.state().iter().filter_map(|p: &Arc<Pod>| p.metadata.uid.clone()).collect();
    for dir in stale_dirs(Path::new(NODE_SOCKETS_DIR), &live, SystemTime::now()) {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => tracing::info!(dir = %dir.display(), "removed the socket directory of a vanished pod"),
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a stale socket directory"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_old_directories_of_unknown_pods_are_stale() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for d in ["live", "gone"] {
            std::fs::create_dir(root.path().join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(root.path().join("a-file"), b"").unwrap_or_else(|e| panic!("{e}"));
        let live = HashSet::from(["live".to_owned()]);
        assert!(stale_dirs(root.path(), &live, SystemTime::now()).is_empty(), "too young");
        let later = SystemTime::now() + SWEEP_GRACE + Duration::from_secs(1);
        assert_eq!(stale_dirs(root.path(), &live, later), [root.path().join("gone")]);
        assert!(stale_dirs(Path::new("/nonexistent/kubevirt-rs"), &live, later).is_empty());
    }
}
