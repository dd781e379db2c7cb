//! Test support for the CDI cluster tests (the DataVolume controller's and the upload path's): deploys this
//! project's CDI stack (CRDs, admission policy, DataVolume controller, upload proxy, token API, worker images) onto
//! the test cluster, writes and waits for DataVolumes, and checks what a DataVolume left in its volume against
//! `qemu-img convert`. The generic cluster helpers are `kube-test-support`'s.

#![deny(missing_docs)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crds::cdi::datavolume::{DataVolume, DataVolumePhase};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use kube::{Client, ResourceExt};
use kube_test_support::{
    Error, Result, TestCluster, apply_yaml, content_tag, poll_object, push_image_from_binaries, read_repo_file,
    repo_root, wait_rollout, workspace_binary,
};

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

/// Rewrites `kubevirt-rs/<name>:latest` image references of a deploy manifest to the pushed images.
pub fn with_images(yaml: &str, images: &CdiImages) -> String {
    yaml.replace("kubevirt-rs/importer:latest", &images.importer)
        .replace("kubevirt-rs/datavolume-controller:latest", &images.controller)
        .replace("kubevirt-rs/uploadserver:latest", &images.uploadserver)
        .replace("kubevirt-rs/uploadproxy:latest", &images.uploadproxy)
        .replace("kubevirt-rs/cdi-apiserver:latest", &images.apiserver)
}

/// Applies `deploy/` (namespace, CRDs, admission policy, controller, token API, upload proxy) with the pushed
/// images and waits until their Deployments are available. Idempotent.
pub async fn deploy_cdi(cluster: &TestCluster) -> Result<CdiImages> {
    let images =
        tokio::task::spawn_blocking(cdi_images).await.map_err(|e| Error::ClusterUp(format!("join: {e}")))??;
    let client = cluster.client().await?;
    apply_yaml(&client, "cdi", &read_repo_file("deploy/namespace.yaml")?).await?;
    for f in ["datavolume.yaml", "cdiconfig.yaml", "storageprofile.yaml", "cdi.yaml"] {
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
        ("cdi-deployment", &images.controller),
        ("cdi-apiserver", &images.apiserver),
        ("cdi-uploadproxy", &images.uploadproxy),
    ] {
        wait_rollout(&deploys, deployment, want, Duration::from_secs(180)).await?;
    }
    Ok(images)
}

/// A file of the image corpus that `tests/infra/import-env.sh up` generates (`tests/work/corpus/<name>`).
pub fn corpus(name: &str) -> PathBuf {
    repo_root().join("tests/work/corpus").join(name)
}

/// CDI's upstream example manifests (`*.yaml` file names, sorted) and their directory,
/// `upstream-examples/cdi` of the shared reference directory ([`kube_test_support::shared_dir`], beside the
/// checkout). A missing directory is an error, never a skip.
pub fn upstream_examples() -> Result<(PathBuf, Vec<String>)> {
    let dir = kube_test_support::shared_dir()?.join("upstream-examples/cdi");
    let what = format!("reading CDI's upstream examples in {}", dir.display());
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .map_err(Error::io(what))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    Ok((dir, files))
}

/// A `cdi.kubevirt.io/v1beta1` DataVolume manifest: `source` is the YAML below `spec.source` (indented by four
/// spaces), `storage` the `storage:`/`pvc:` line below `spec` (without indentation).
pub fn datavolume_yaml(name: &str, source: &str, storage: &str) -> String {
    format!(
        "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata:\n  name: {name}\nspec:\n  source:\n{source}\n  {storage}\n"
    )
}

/// The DataVolume's phase, if it has one yet.
pub fn dv_phase(dv: &DataVolume) -> Option<DataVolumePhase> {
    dv.status.as_ref()?.phase
}

/// Polls DataVolume `name` until `pred` holds, at most `timeout`; on timeout the error carries the DataVolume and
/// its events.
pub async fn wait_dv(
    api: &Api<DataVolume>,
    name: &str,
    timeout: Duration,
    pred: impl Fn(&DataVolume) -> bool,
) -> Result<DataVolume> {
    poll_object(api, name, timeout, pred).await
}

/// [`wait_dv`] until the DataVolume's phase is `want`.
pub async fn wait_dv_phase(
    api: &Api<DataVolume>,
    name: &str,
    want: DataVolumePhase,
    timeout: Duration,
) -> Result<DataVolume> {
    wait_dv(api, name, timeout, |d| dv_phase(d) == Some(want)).await
}

/// Name of a PVC's owner DataVolume, if any.
pub fn owner_dv(pvc: &PersistentVolumeClaim) -> Option<String> {
    pvc.owner_references().iter().find(|o| o.kind == "DataVolume").map(|o| o.name.clone())
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
        .map_err(Error::io("tempfile"))?;
    let st = Command::new("qemu-img")
        .args(["convert", "-O", "raw"])
        .arg(source)
        .arg(out.path())
        .status()
        .map_err(Error::io("qemu-img convert"))?;
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

/// Checks that the volume of DataVolume `ns/name` holds exactly what `qemu-img convert -O raw source` makes of
/// `source` (see [`compare_image`]); the error names the DataVolume, the source and the first difference.
pub async fn assert_volume_matches(client: &Client, ns: &str, name: &str, source: &Path) -> Result<()> {
    let expected = qemu_raw(source)?;
    let actual = dv_image_path(client, ns, name).await?;
    compare_image(&actual, expected.path())
        .map_err(|message| Error::Check { what: format!("{ns}/{name} ({})", source.display()), message })
}
