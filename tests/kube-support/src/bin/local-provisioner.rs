//! Local volume provisioner for the test cluster's StorageClasses (provisioner `kubevirt-rs.test/local`).
//!
//! For every pending PVC of such a class that kube-controller-manager has handed to us (annotation
//! `volume.kubernetes.io/storage-provisioner`), and — for `WaitForFirstConsumer` classes — that the scheduler has
//! placed (`volume.kubernetes.io/selected-node`), it creates a `local` PersistentVolume pre-bound to the claim:
//! a directory for `Filesystem`, a loop device over a sparse file for `Block`. KCM's binder then binds the pair.
//! When a PV it provisioned is `Released` with reclaim policy `Delete`, it removes the backing storage and the PV.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    LocalVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

/// Name of this provisioner, as used in `StorageClass.provisioner`.
const PROVISIONER: &str = "kubevirt-rs.test/local";
const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const ANN_STORAGE_PROVISIONER_BETA: &str = "volume.beta.kubernetes.io/storage-provisioner";
const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const ANN_BACKING: &str = "kubevirt-rs.test/backing-path";
/// Label every test node carries; PVs of `Immediate` classes are reachable from all of them (one host).
const NODE_LABEL: &str = "kubevirt-rs.test/node";

#[derive(Parser, Debug)]
#[command(about = "Local PV provisioner for the kubevirt-rs test cluster")]
struct Args {
    /// Kubeconfig to use.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Directory for volume directories and block backing files.
    #[arg(long)]
    storage_dir: PathBuf,
}

struct Ctx {
    client: Client,
    storage_dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error("{0:#}")]
struct ReconcileError(anyhow::Error);

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    let args = Args::parse();
    std::fs::create_dir_all(&args.storage_dir).with_context(|| format!("mkdir {}", args.storage_dir.display()))?;
    let storage_dir = args.storage_dir.canonicalize()?;
    let client = kube_test_support::client_from_kubeconfig(&args.kubeconfig).await?;
    let ctx = Arc::new(Ctx { client: client.clone(), storage_dir });
    tracing::info!(provisioner = PROVISIONER, "starting");

    let pvcs = Controller::new(Api::<PersistentVolumeClaim>::all(client.clone()), watcher::Config::default())
        .run(reconcile_pvc, error_policy, ctx.clone())
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!("pvc reconcile: {e}");
            }
        });
    let pvs = Controller::new(Api::<PersistentVolume>::all(client), watcher::Config::default())
        .run(reconcile_pv, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!("pv reconcile: {e}");
            }
        });
    tokio::join!(pvcs, pvs);
    Ok(())
}

fn error_policy<K>(_obj: Arc<K>, err: &ReconcileError, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!("{err}");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile_pvc(pvc: Arc<PersistentVolumeClaim>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    provision(&pvc, &ctx).await.map_err(ReconcileError)
}

async fn reconcile_pv(pv: Arc<PersistentVolume>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    release(&pv, &ctx).await.map_err(ReconcileError)
}

async fn provision(pvc: &PersistentVolumeClaim, ctx: &Ctx) -> Result<Action> {
    let Some(spec) = pvc.spec.as_ref() else {
        return Ok(Action::await_change());
    };
    if pvc.metadata.deletion_timestamp.is_some() || spec.volume_name.as_deref().is_some_and(|v| !v.is_empty()) {
        return Ok(Action::await_change());
    }
    let Some(sc_name) = spec.storage_class_name.as_deref() else {
        return Ok(Action::await_change());
    };
    let Some(sc) = Api::<StorageClass>::all(ctx.client.clone()).get_opt(sc_name).await? else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    if sc.provisioner != PROVISIONER {
        return Ok(Action::await_change());
    }
    let ann = pvc.annotations();
    let handed_to_us = [ANN_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER_BETA]
        .iter()
        .any(|a| ann.get(*a).is_some_and(|p| p == PROVISIONER));
    if !handed_to_us {
        // kube-controller-manager sets the annotation once the claim needs provisioning (for WaitForFirstConsumer:
        // after the scheduler picked a node). Its resync re-triggers us.
        return Ok(Action::await_change());
    }
    let wffc = sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
    let selected_node = ann.get(ANN_SELECTED_NODE).cloned();
    if wffc && selected_node.is_none() {
        return Ok(Action::await_change());
    }
    let uid = pvc.uid().context("pvc without uid")?;
    let ns = pvc.namespace().unwrap_or_default();
    let pv_name = format!("pvc-{uid}");
    let pvs = Api::<PersistentVolume>::all(ctx.client.clone());
    if pvs.get_opt(&pv_name).await?.is_some() {
        return Ok(Action::await_change());
    }
    let request = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned()
        .context("pvc has no storage request")?;
    let bytes = parse_quantity(&request.0)?;
    let block = spec.volume_mode.as_deref() == Some("Block");

    let (backing, local_path) = if block {
        let file = ctx.storage_dir.join(format!("{pv_name}.img"));
        let f = std::fs::File::create(&file).with_context(|| format!("create {}", file.display()))?;
        f.set_len(bytes)?;
        drop(f);
        let dev = losetup_attach(&file).await?;
        (file, dev)
    } else {
        let dir = ctx.storage_dir.join(&pv_name);
        std::fs::create_dir_all(&dir)?;
        set_mode(&dir, 0o777)?;
        (dir.clone(), dir.display().to_string())
    };

    let affinity = match selected_node {
        Some(node) => NodeSelectorRequirement {
            key: "kubernetes.io/hostname".into(),
            operator: "In".into(),
            values: Some(vec![node]),
        },
        None => NodeSelectorRequirement { key: NODE_LABEL.into(), operator: "Exists".into(), values: None },
    };
    let pv = PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name.clone()),
            annotations: Some(BTreeMap::from([
                (ANN_PROVISIONED_BY.to_owned(), PROVISIONER.to_owned()),
                (ANN_BACKING.to_owned(), backing.display().to_string()),
            ])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_owned(), Quantity(request.0.clone()))])),
            access_modes: spec.access_modes.clone(),
            volume_mode: Some(if block { "Block" } else { "Filesystem" }.to_owned()),
            storage_class_name: Some(sc_name.to_owned()),
            persistent_volume_reclaim_policy: Some(sc.reclaim_policy.clone().unwrap_or_else(|| "Delete".into())),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("PersistentVolumeClaim".into()),
                namespace: Some(ns.clone()),
                name: Some(pvc.name_any()),
                uid: Some(uid.clone()),
                ..Default::default()
            }),
            local: Some(LocalVolumeSource { path: local_path.clone(), fs_type: None }),
            node_affinity: Some(VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![affinity]),
                        match_fields: None,
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    };
    match pvs.create(&PostParams::default(), &pv).await {
        Ok(_) => {
            tracing::info!(pvc = %format!("{ns}/{}", pvc.name_any()), pv = pv_name, path = local_path, "provisioned");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Action::await_change()),
        Err(e) => {
            remove_backing(&ctx.storage_dir, &backing, block.then_some(local_path.as_str())).await?;
            Err(e.into())
        }
    }
}

async fn release(pv: &PersistentVolume, ctx: &Ctx) -> Result<Action> {
    if pv.annotations().get(ANN_PROVISIONED_BY).map(String::as_str) != Some(PROVISIONER) {
        return Ok(Action::await_change());
    }
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    let spec = pv.spec.as_ref();
    let policy = spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
    if phase != Some("Released") || policy != Some("Delete") || pv.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let backing = pv.annotations().get(ANN_BACKING).map(PathBuf::from).context("PV without backing annotation")?;
    let block = spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block");
    let dev = spec.and_then(|s| s.local.as_ref()).map(|l| l.path.clone());
    remove_backing(&ctx.storage_dir, &backing, if block { dev.as_deref() } else { None }).await?;
    let pvs = Api::<PersistentVolume>::all(ctx.client.clone());
    match pvs.delete(&pv.name_any(), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    tracing::info!(pv = pv.name_any(), "deleted released volume");
    Ok(Action::await_change())
}

/// Removes a volume's directory or (after detaching its loop device) its backing file. Refuses paths outside the
/// storage directory.
async fn remove_backing(storage_dir: &Path, backing: &Path, loop_dev: Option<&str>) -> Result<()> {
    if !backing.starts_with(storage_dir) || backing == storage_dir {
        bail!("refusing to remove {} (outside {})", backing.display(), storage_dir.display());
    }
    if let Some(dev) = loop_dev {
        // Detach only if the device is still backed by our file (the number may have been reused otherwise).
        let name = dev.trim_start_matches("/dev/");
        let bf = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).unwrap_or_default();
        if Path::new(bf.trim()) == backing {
            run("losetup", &["-d", dev]).await?;
        }
    }
    match std::fs::metadata(backing) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(backing)?,
        Ok(_) => std::fs::remove_file(backing)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

async fn losetup_attach(file: &Path) -> Result<String> {
    let path = file.to_str().context("non-UTF-8 path")?;
    let out = run("losetup", &["-f", "--show", path]).await?;
    let dev = out.trim().to_owned();
    if !dev.starts_with("/dev/loop") {
        bail!("unexpected losetup output {dev:?}");
    }
    Ok(dev)
}

async fn run(cmd: &str, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(cmd).args(args).output().await.with_context(|| format!("run {cmd}"))?;
    if !out.status.success() {
        bail!("{cmd} {args:?}: {} {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn set_mode(p: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Parses a Kubernetes quantity for storage (plain bytes, decimal `k M G T P E` or binary `Ki Mi Gi Ti Pi Ei`
/// suffixes, optional fraction) into bytes, rounding up.
fn parse_quantity(q: &str) -> Result<u64> {
    // A volume is whole bytes: milli-units (`1m`) are refused, everything else is the workspace's one parser.
    if q.trim().ends_with('m') {
        bail!("unsupported quantity {q:?}");
    }
    contracts::quantity::parse_bytes(q).map_err(|e| anyhow::anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::parse_quantity;

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("1Gi").ok(), Some(1 << 30));
        assert_eq!(parse_quantity("64Mi").ok(), Some(64 << 20));
        assert_eq!(parse_quantity("1G").ok(), Some(1_000_000_000));
        assert_eq!(parse_quantity("1.5Gi").ok(), Some(3 << 29));
        assert_eq!(parse_quantity("1000").ok(), Some(1000));
        assert!(parse_quantity("1m").is_err());
        assert!(parse_quantity("abc").is_err());
    }
}
