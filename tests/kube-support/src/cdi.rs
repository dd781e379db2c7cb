//! Deploys this project's CDI stack (CRDs, admission policy, DataVolume controller, worker images) onto the test
//! cluster, and checks what a DataVolume left in its volume against `qemu-img convert`.

use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::{Error, Result, TestCluster, apply_yaml, poll_until, push_image_from_binaries, registry};

/// Repository root of this checkout.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Path of a binary built from this workspace (`$CARGO_TARGET_DIR/debug/<name>`, default `target/`). The test
/// command builds every binary first; a missing one fails loudly.
pub fn workspace_binary(name: &str) -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from);
    let path = target.join("debug").join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Image {
            name: name.into(),
            message: format!("{} is missing: run `cargo build --workspace --bins` first", path.display()),
        })
    }
}

/// An image tag that changes whenever one of `files` changes (size + mtime), so `IfNotPresent` never runs a
/// stale binary.
fn content_tag(files: &[&Path]) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files {
        if let Ok(m) = std::fs::metadata(f) {
            m.len().hash(&mut h);
            m.modified().ok().hash(&mut h);
        }
        f.hash(&mut h);
    }
    format!("t{:016x}", h.finish())
}

/// Image references of one deployment of the stack.
#[derive(Debug, Clone)]
pub struct CdiImages {
    /// Importer (+ qemu-img; also the clone source).
    pub importer: String,
    /// DataVolume controller.
    pub controller: String,
    /// Upload server.
    pub uploadserver: String,
    /// Upload proxy.
    pub uploadproxy: String,
    /// Token API (aggregated API server).
    pub apiserver: String,
    /// Tag shared by all.
    pub tag: String,
}

static IMAGES: OnceLock<Mutex<Option<Result<CdiImages, String>>>> = OnceLock::new();

/// Builds and pushes the worker and controller images once per process.
pub fn cdi_images() -> Result<CdiImages> {
    let cell = IMAGES.get_or_init(|| Mutex::new(None));
    let mut guard = cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(r) = guard.as_ref() {
        return r.clone().map_err(|message| Error::Image { name: "cdi".into(), message });
    }
    let r = (|| -> Result<CdiImages> {
        let importer = workspace_binary("importer")?;
        let controller = workspace_binary("datavolume-controller")?;
        let uploadserver = workspace_binary("uploadserver")?;
        let uploadproxy = workspace_binary("uploadproxy")?;
        let apiserver = workspace_binary("cdi-apiserver")?;
        let qemu_img = PathBuf::from("/usr/bin/qemu-img");
        let tag = content_tag(&[&importer, &controller, &uploadserver, &uploadproxy, &apiserver]);
        Ok(CdiImages {
            importer: push_image_from_binaries(&format!("importer:{tag}"), &[&importer, &qemu_img])?,
            controller: push_image_from_binaries(&format!("datavolume-controller:{tag}"), &[&controller])?,
            uploadserver: push_image_from_binaries(&format!("uploadserver:{tag}"), &[&uploadserver, &qemu_img])?,
            uploadproxy: push_image_from_binaries(&format!("uploadproxy:{tag}"), &[&uploadproxy])?,
            apiserver: push_image_from_binaries(&format!("cdi-apiserver:{tag}"), &[&apiserver])?,
            tag,
        })
    })();
    *guard = Some(r.as_ref().map(Clone::clone).map_err(ToString::to_string));
    r
}

/// Reads a file of this checkout.
pub fn read_repo_file(rel: &str) -> Result<String> {
    std::fs::read_to_string(repo_root().join(rel))
        .map_err(|source| Error::Command { cmd: format!("reading {rel}"), source })
}

/// Rewrites `kubevirt-rs/<name>:latest` image references of a deploy manifest to the pushed images.
pub fn with_images(yaml: &str, images: &CdiImages) -> String {
    yaml.replace("kubevirt-rs/importer:latest", &images.importer)
        .replace("kubevirt-rs/datavolume-controller:latest", &images.controller)
        .replace("kubevirt-rs/uploadserver:latest", &images.uploadserver)
        .replace("kubevirt-rs/uploadproxy:latest", &images.uploadproxy)
        .replace("kubevirt-rs/cdi-apiserver:latest", &images.apiserver)
}

/// Applies `deploy/` (namespace, CRDs, admission policy, controller) with the pushed images and waits until the
/// controller Deployment is available. Idempotent.
pub async fn deploy_cdi(cluster: &TestCluster) -> Result<CdiImages> {
    let images =
        tokio::task::spawn_blocking(cdi_images).await.map_err(|e| Error::ClusterUp(format!("join: {e}")))??;
    let client = cluster.client().await?;
    apply_yaml(&client, "cdi", &read_repo_file("deploy/namespace.yaml")?).await?;
    for f in ["datavolume.yaml", "cdiconfig.yaml", "storageprofile.yaml"] {
        apply_yaml(&client, "cdi", &read_repo_file(&format!("deploy/crds/{f}"))?).await?;
    }
    // CRDs must be established before objects of them are served.
    tokio::time::sleep(Duration::from_secs(1)).await;
    apply_yaml(&client, "cdi", &read_repo_file("deploy/crds/datavolume-policy.yaml")?).await?;
    for f in ["datavolume-controller.yaml", "cdi-apiserver.yaml", "uploadproxy.yaml"] {
        apply_yaml(&client, "cdi", &with_images(&read_repo_file(&format!("deploy/{f}"))?, &images)).await?;
    }
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "cdi");
    for (deployment, want) in [
        ("cdi-deployment", images.controller.clone()),
        ("cdi-apiserver", images.apiserver.clone()),
        ("cdi-uploadproxy", images.uploadproxy.clone()),
    ] {
        wait_rollout(&deploys, deployment, want).await?;
    }
    Ok(images)
}

/// Waits until Deployment `name` runs `want` on every replica and is available.
async fn wait_rollout(deploys: &Api<Deployment>, name: &str, want: String) -> Result<()> {
    poll_until(&format!("{name} available with image {want}"), Duration::from_secs(180), || {
        let deploys = deploys.clone();
        let want = want.clone();
        async move {
            let d = deploys.get_opt(name).await.ok().flatten()?;
            let image = d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.image.clone()?;
            let st = d.status?;
            let updated = st.updated_replicas.unwrap_or(0) == st.replicas.unwrap_or(0)
                && st.available_replicas.unwrap_or(0) >= 1
                && st.unavailable_replicas.unwrap_or(0) == 0;
            (image == want && updated && d.metadata.generation == st.observed_generation).then_some(())
        }
    })
    .await
}

/// Where the test cluster's local provisioner keeps a bound PVC's data: the directory (Filesystem) or the loop
/// device (Block).
pub async fn pvc_backing(client: &Client, ns: &str, pvc: &str) -> Result<PathBuf> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let claim = pvcs.get(pvc).await?;
    let pv_name = claim.spec.and_then(|s| s.volume_name).ok_or_else(|| Error::Timeout {
        what: format!("PVC {ns}/{pvc} is not bound"),
        timeout: Duration::ZERO,
        state: String::new(),
    })?;
    let pv: PersistentVolume = Api::all(client.clone()).get(&pv_name).await?;
    let path = pv.spec.and_then(|s| s.local).map(|l| l.path).unwrap_or_default();
    Ok(PathBuf::from(path))
}

/// The DataVolume's image file on the host: `<dir>/disk.img` for Filesystem, the device for Block.
pub async fn dv_image_path(client: &Client, ns: &str, pvc: &str) -> Result<PathBuf> {
    let p = pvc_backing(client, ns, pvc).await?;
    Ok(if p.starts_with("/dev") { p } else { p.join("disk.img") })
}

/// `qemu-img convert -O raw source` into a temporary file.
pub fn qemu_raw(source: &Path) -> Result<tempfile::NamedTempFile> {
    let out = tempfile::Builder::new()
        .prefix("expected-")
        .tempfile_in(std::env::temp_dir())
        .map_err(|source| Error::Command { cmd: "tempfile".into(), source })?;
    let st = Command::new("qemu-img")
        .args(["convert", "-O", "raw"])
        .arg(source)
        .arg(out.path())
        .status()
        .map_err(|source| Error::Command { cmd: "qemu-img convert".into(), source })?;
    if !st.success() {
        return Err(Error::Image { name: source.display().to_string(), message: format!("qemu-img convert: {st}") });
    }
    Ok(out)
}

/// Checks that `actual` starts with exactly the bytes of `expected` and holds only zeros after them (the importer
/// grows the image to the volume). Returns a description of the first difference.
pub fn compare_image(actual: &Path, expected: &Path) -> std::result::Result<(), String> {
    let open = |p: &Path| std::fs::File::open(p).map_err(|e| format!("opening {}: {e}", p.display()));
    let mut a = std::io::BufReader::with_capacity(1 << 20, open(actual)?);
    let mut e = std::io::BufReader::with_capacity(1 << 20, open(expected)?);
    let (mut ab, mut eb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut offset = 0u64;
    loop {
        let n = e.read(&mut eb).map_err(|x| x.to_string())?;
        if n == 0 {
            break;
        }
        a.read_exact(&mut ab[..n])
            .map_err(|x| format!("{} is shorter than the image ({offset}+): {x}", actual.display()))?;
        if ab[..n] != eb[..n] {
            let i = ab[..n].iter().zip(&eb[..n]).position(|(x, y)| x != y).unwrap_or(0);
            return Err(format!("byte {} differs from qemu-img's output", offset + i as u64));
        }
        offset += n as u64;
    }
    loop {
        let n = a.read(&mut ab).map_err(|x| x.to_string())?;
        if n == 0 {
            return Ok(());
        }
        if ab[..n].iter().any(|b| *b != 0) {
            return Err(format!("non-zero byte after the image end, near {offset}"));
        }
        offset += n as u64;
    }
}

/// URL under which pods reach a host service listening on 127.0.0.1:`port` (`tests/cluster` NAT).
pub fn host_url(port: u16, path: &str) -> String {
    format!("http://10.244.0.1:{port}/{}", path.trim_start_matches('/'))
}

/// The local test registry as pods see it (for `docker://` URLs).
pub fn pod_registry() -> String {
    registry().replace("127.0.0.1", "10.244.0.1")
}

/// Name of a PVC's owner DataVolume, if any.
pub fn owner_dv(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.owner_references().iter().find(|o| o.kind == "DataVolume").map(|o| o.name.clone())
}
