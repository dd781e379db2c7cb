//! `virtctl image-upload`: upload a local disk image (or tar archive) into a DataVolume or PVC through the
//! CDI upload proxy, with upstream virtctl's flags, flow and exit behaviour (specs/cdi.md §4.5):
//!
//! ```text
//! open file ─► get PVC ─┬─ absent: create DV (source.upload) or PVC (upload-target annotations)
//!                       └─ present: refuse if already Succeeded; PVC′ for populator DVs
//!          ─► wait (2 s polls, --wait-secs): DV phase UploadReady | PVC annotation pod.ready=true
//!          ─► UploadTokenRequest "token-for-virtctl" ─► HEAD upload-async (200 → async path)
//!          ─► POST the file (Content-Length, progress bar, --retry) ─► wait for pod.phase=Succeeded
//! ```

#![deny(missing_docs)]

pub mod expand;
pub mod expose;
pub mod migrate;
pub mod portforward;
pub mod vm;
pub mod vmi;
pub mod volume;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contracts::cdi::{ClaimOptions, WorkerPhase, WorkerState};
use crds::cdi::consts::{ann, upload_token};
use crds::cdi::datavolume::{ContentType, DataVolumeSource, DataVolumeSpec, EmptySource, StorageSpec};
use crds::cdi::{CDIConfig, DataVolume, DataVolumePhase};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, VolumeResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

/// Name of the token request virtctl creates.
pub const TOKEN_REQUEST_NAME: &str = "token-for-virtctl";
/// Poll interval while waiting.
const POLL: Duration = Duration::from_secs(2);

/// Errors of `image-upload`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid flags or arguments.
    #[error("{0}")]
    Usage(String),
    /// The local file cannot be used.
    #[error("cannot open {}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A Kubernetes API call failed.
    #[error("{what}")]
    Kube {
        /// The call.
        what: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// The target cannot receive the upload.
    #[error("{0}")]
    Refused(String),
    /// Waiting timed out or failed.
    #[error("{0}")]
    Wait(String),
    /// The HTTP upload failed.
    #[error("{0}")]
    Upload(String),
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn kerr(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let what = what.into();
    move |source| Error::Kube { what, source }
}

/// Volume mode flag values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum VolumeMode {
    /// `Block`.
    Block,
    /// `Filesystem`.
    Filesystem,
}

impl VolumeMode {
    /// The Kubernetes `volumeMode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeMode::Block => "Block",
            VolumeMode::Filesystem => "Filesystem",
        }
    }
}

/// What to create/upload into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A DataVolume (and its PVC).
    Dv,
    /// A bare PVC.
    Pvc,
}

/// `virtctl image-upload` flags (upstream names).
#[derive(Debug, Clone, clap::Args)]
pub struct ImageUploadArgs {
    /// `dv NAME` or `pvc NAME`.
    #[arg(num_args = 0..=2, value_name = "dv|pvc NAME")]
    pub target: Vec<String>,
    /// Deprecated: the PVC to upload into (PVC mode).
    #[arg(long)]
    pub pvc_name: Option<String>,
    /// Path to the local disk image.
    #[arg(long)]
    pub image_path: Option<PathBuf>,
    /// Path to a local tar archive (content type archive).
    #[arg(long)]
    pub archive_path: Option<PathBuf>,
    /// Size of the volume to create (e.g. 10Gi).
    #[arg(long)]
    pub size: Option<String>,
    /// Deprecated alias of --size.
    #[arg(long, hide = true)]
    pub pvc_size: Option<String>,
    /// Storage class of the volume to create.
    #[arg(long)]
    pub storage_class: Option<String>,
    /// Access mode of the volume to create.
    #[arg(long)]
    pub access_mode: Option<String>,
    /// Volume mode of the volume to create: block or filesystem.
    #[arg(long, value_enum, ignore_case = true)]
    pub volume_mode: Option<VolumeMode>,
    /// Deprecated: create a block volume.
    #[arg(long, hide = true)]
    pub block_volume: bool,
    /// URL of the CDI upload proxy (default: CDIConfig status.uploadProxyURL).
    #[arg(long)]
    pub uploadproxy_url: Option<String>,
    /// Do not verify the upload proxy's certificate.
    #[arg(long)]
    pub insecure: bool,
    /// Do not create the volume; upload into an existing one.
    #[arg(long)]
    pub no_create: bool,
    /// Bind the volume immediately (ignore WaitForFirstConsumer).
    #[arg(long)]
    pub force_bind: bool,
    /// Seconds to wait for the upload pod to become ready.
    #[arg(long, default_value_t = 300)]
    pub wait_secs: u64,
    /// Upload attempts after a failed one.
    #[arg(long, default_value_t = 5)]
    pub retry: u32,
    /// Do not show a progress bar.
    #[arg(long, hide = true)]
    pub no_progress: bool,
}

/// The validated request.
#[derive(Debug, Clone)]
pub struct Plan {
    /// DV or PVC.
    pub kind: Kind,
    /// Name of the DV/PVC.
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// Archive content.
    pub archive: bool,
}

impl Plan {
    /// The content type of the upload.
    pub fn content_type(&self) -> ContentType {
        if self.archive { ContentType::Archive } else { ContentType::Kubevirt }
    }
}

impl ImageUploadArgs {
    /// Checks flags and positional arguments as upstream does.
    pub fn plan(&self) -> Result<Plan> {
        let (kind, name) = match (self.target.as_slice(), &self.pvc_name) {
            ([k, n], None) if k == "dv" => (Kind::Dv, n.clone()),
            ([k, n], None) if k == "pvc" => (Kind::Pvc, n.clone()),
            ([], Some(n)) => (Kind::Pvc, n.clone()),
            ([_, _], None) => {
                return Err(Error::Usage(String::from("cannot upload: first argument must be dv or pvc")));
            }
            (_, Some(_)) => {
                return Err(Error::Usage(String::from("cannot use --pvc-name together with dv|pvc NAME arguments")));
            }
            _ => return Err(Error::Usage(String::from("expecting two args: dv|pvc NAME"))),
        };
        let (path, archive) = match (&self.image_path, &self.archive_path) {
            (Some(_), Some(_)) => {
                return Err(Error::Usage(String::from(
                    "cannot handle both image path and archive path, provide only one",
                )));
            }
            (Some(p), None) => (p.clone(), false),
            (None, Some(p)) => (p.clone(), true),
            (None, None) => {
                return Err(Error::Usage(String::from("either image-path or archive-path must be provided")));
            }
        };
        if self.access_mode.as_deref() == Some("ReadOnlyMany") {
            return Err(Error::Usage(String::from(
                "cannot upload to a readonly volume, use either ReadWriteOnce or ReadWriteMany if supported",
            )));
        }
        if archive && self.volume_mode() == Some(VolumeMode::Block) {
            return Err(Error::Usage(String::from("In archive upload the volume mode should always be filesystem")));
        }
        Ok(Plan { kind, name, path, archive })
    }

    fn volume_mode(&self) -> Option<VolumeMode> {
        if self.block_volume { Some(VolumeMode::Block) } else { self.volume_mode }
    }

    fn size(&self) -> Option<&str> {
        self.size.as_deref().or(self.pvc_size.as_deref())
    }

    /// The DataVolume object this upload creates.
    pub fn datavolume(&self, plan: &Plan, namespace: &str, size: &str) -> serde_json::Value {
        let mut storage = StorageSpec {
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".to_owned(), Quantity(size.to_owned()))])),
                limits: None,
            }),
            storage_class_name: self.storage_class.clone(),
            access_modes: self.access_mode.clone().map(|m| vec![m]),
            ..Default::default()
        };
        storage.volume_mode = self.volume_mode().map(|m| m.as_str().to_owned());
        let mut annotations = BTreeMap::new();
        if self.force_bind {
            annotations.insert(ann::BIND_IMMEDIATE.to_owned(), String::new());
        }
        let dv = DataVolume {
            metadata: ObjectMeta {
                name: Some(plan.name.clone()),
                namespace: Some(namespace.to_owned()),
                annotations: Some(annotations),
                ..Default::default()
            },
            spec: DataVolumeSpec {
                source: Some(DataVolumeSource { upload: Some(EmptySource {}), ..Default::default() }),
                content_type: Some(plan.content_type()),
                storage: Some(storage),
                ..Default::default()
            },
            status: None,
        };
        serde_json::to_value(dv).unwrap_or_default()
    }

    /// The PVC this upload creates in PVC mode.
    pub fn pvc(&self, plan: &Plan, namespace: &str, size: &str) -> serde_json::Value {
        let mut spec = json!({"resources": {"requests": {"storage": size}}, "accessModes": ["ReadWriteOnce"]});
        self.storage_fields(&mut spec);
        json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": plan.name, "namespace": namespace, "annotations": {
                ann::UPLOAD_TARGET: "", ann::CONTENT_TYPE: plan.content_type().as_str()
            }},
            "spec": spec
        })
    }

    fn storage_fields(&self, spec: &mut serde_json::Value) {
        if let Some(o) = spec.as_object_mut() {
            if let Some(sc) = &self.storage_class {
                o.insert("storageClassName".into(), json!(sc));
            }
            if let Some(am) = &self.access_mode {
                o.insert("accessModes".into(), json!([am]));
            }
            if let Some(m) = self.volume_mode() {
                o.insert("volumeMode".into(), json!(m.as_str()));
            }
        }
    }
}

/// The upload URL path for the proxy answering `HEAD upload-async` with `async_status`.
pub fn upload_path(async_status: Option<u16>) -> &'static str {
    if async_status == Some(200) { "/v1beta1/upload-async" } else { "/v1beta1/upload" }
}

/// Adds `https://` when the URL has no scheme; strips a trailing slash.
pub fn normalize_proxy_url(url: &str) -> String {
    let u = if url.contains("://") { url.to_owned() } else { format!("https://{url}") };
    u.trim_end_matches('/').to_owned()
}

fn annotations(pvc: &PersistentVolumeClaim) -> BTreeMap<String, String> {
    pvc.metadata.annotations.clone().unwrap_or_default()
}

async fn sleep_or_timeout(deadline: tokio::time::Instant, what: &str) -> Result<()> {
    if tokio::time::Instant::now() + POLL > deadline {
        return Err(Error::Wait(format!("timed out waiting for {what}")));
    }
    tokio::time::sleep(POLL).await;
    Ok(())
}

/// Runs `image-upload` against `client` in `namespace`.
pub async fn image_upload(args: &ImageUploadArgs, client: kube::Client, namespace: &str) -> Result<()> {
    let plan = args.plan()?;
    let file =
        tokio::fs::File::open(&plan.path).await.map_err(|source| Error::File { path: plan.path.clone(), source })?;
    let file_size = file.metadata().await.map_err(|source| Error::File { path: plan.path.clone(), source })?.len();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let dvs: Api<DataVolume> = Api::namespaced(client.clone(), namespace);
    let mut upload_pvc = plan.name.clone();
    match pvcs.get_opt(&plan.name).await.map_err(kerr(format!("getting PVC {namespace}/{}", plan.name)))? {
        None if args.no_create => {
            return Err(Error::Refused(format!(
                "persistentVolumeClaim {namespace}/{} not found, and --no-create was given",
                plan.name
            )));
        }
        None => {
            let size = args
                .size()
                .ok_or_else(|| Error::Usage(String::from("when creating a resource, the size must be specified")))?;
            match plan.kind {
                Kind::Dv => {
                    let dv: DataVolume = serde_json::from_value(args.datavolume(&plan, namespace, size))
                        .map_err(|e| Error::Usage(e.to_string()))?;
                    dvs.create(&PostParams::default(), &dv)
                        .await
                        .map_err(kerr(format!("creating DataVolume {namespace}/{}", plan.name)))?;
                    println!("DataVolume {namespace}/{} created", plan.name);
                }
                Kind::Pvc => {
                    let pvc: PersistentVolumeClaim = serde_json::from_value(args.pvc(&plan, namespace, size))
                        .map_err(|e| Error::Usage(e.to_string()))?;
                    pvcs.create(&PostParams::default(), &pvc)
                        .await
                        .map_err(kerr(format!("creating PVC {namespace}/{}", plan.name)))?;
                    println!("PVC {namespace}/{} created", plan.name);
                }
            }
        }
        Some(pvc) => {
            let a = annotations(&pvc);
            let options = ClaimOptions::of(&a);
            if WorkerState::of(&a).phase == Some(WorkerPhase::Succeeded) {
                return Err(Error::Refused(format!("PVC {} already successfully imported/cloned/updated", plan.name)));
            }
            if plan.kind == Kind::Dv && options.use_populator {
                if let Some(prime) = options.pvc_prime {
                    upload_pvc = prime;
                }
            } else if !a.contains_key(ann::UPLOAD_TARGET) {
                let patch = json!({"metadata": {"annotations": {ann::UPLOAD_TARGET: ""}}});
                pvcs.patch(&plan.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map_err(kerr(format!("annotating PVC {namespace}/{}", plan.name)))?;
            }
            println!("Using existing PVC {namespace}/{}", plan.name);
        }
    }

    // Wait for the upload pod.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.wait_secs);
    match plan.kind {
        Kind::Dv => loop {
            if let Some(dv) =
                dvs.get_opt(&plan.name).await.map_err(kerr(format!("getting DataVolume {namespace}/{}", plan.name)))?
            {
                let phase = dv.status.as_ref().and_then(|s| s.phase);
                match phase {
                    Some(DataVolumePhase::UploadReady) => break,
                    Some(DataVolumePhase::Succeeded) => {
                        return Err(Error::Refused(format!(
                            "DataVolume {} already successfully imported/cloned/updated",
                            plan.name
                        )));
                    }
                    Some(DataVolumePhase::Failed) => {
                        return Err(Error::Refused(format!("DataVolume {} failed", plan.name)));
                    }
                    Some(p @ (DataVolumePhase::WaitForFirstConsumer | DataVolumePhase::PendingPopulation))
                        if !args.force_bind =>
                    {
                        return Err(Error::Refused(format!(
                            "cannot upload to DataVolume in {} state, make sure the PVC is Bound, or use force-bind flag",
                            p.as_str()
                        )));
                    }
                    _ => {}
                }
            }
            sleep_or_timeout(deadline, "the DataVolume to become UploadReady").await?;
        },
        Kind::Pvc => loop {
            if let Some(p) =
                pvcs.get_opt(&upload_pvc).await.map_err(kerr(format!("getting PVC {namespace}/{upload_pvc}")))?
                && WorkerState::of(&annotations(&p)).ready
            {
                break;
            }
            sleep_or_timeout(deadline, "the upload pod to become ready").await?;
        },
    }
    // In DV mode a populator DV's PVC′ is only known now.
    if plan.kind == Kind::Dv
        && let Some(p) =
            pvcs.get_opt(&plan.name).await.map_err(kerr(format!("getting PVC {namespace}/{}", plan.name)))?
        && let options = ClaimOptions::of(&annotations(&p))
        && options.use_populator
        && let Some(prime) = options.pvc_prime
    {
        upload_pvc = prime;
    }

    let proxy = match &args.uploadproxy_url {
        Some(u) => normalize_proxy_url(u),
        None => {
            let cfg_api: Api<CDIConfig> = Api::all(client.clone());
            let cfg =
                cfg_api.get_opt(crds::cdi::config::CDI_CONFIG_NAME).await.map_err(kerr("getting CDIConfig config"))?;
            let url = cfg
                .and_then(|c| c.status?.upload_proxy_url)
                .filter(|u| !u.is_empty())
                .ok_or_else(|| Error::Usage(String::from("uploadproxy URL not found")))?;
            normalize_proxy_url(&url)
        }
    };

    let token = request_token(&client, namespace, &plan.name).await?;
    let http = reqwest::Client::builder()
        .danger_accept_invalid_certs(args.insecure)
        .build()
        .map_err(|e| Error::Upload(format!("HTTP client: {e}")))?;
    let head = http.head(format!("{proxy}/v1beta1/upload-async")).bearer_auth(&token).send().await;
    let path = upload_path(head.as_ref().ok().map(|r| r.status().as_u16()));
    let url = format!("{proxy}{path}");
    // Upstream names the proxy, not the path it chose.
    println!("Uploading data to {proxy}");

    let mut attempt = 0u32;
    loop {
        match upload_once(&http, &url, &token, &plan.path, file_size, !args.no_progress).await {
            Ok(()) => break,
            Err((retryable, e)) if retryable && attempt < args.retry => {
                attempt += 1;
                let jitter = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::from(d.subsec_millis()));
                eprintln!("upload failed ({e}), retrying ({attempt}/{})", args.retry);
                tokio::time::sleep(Duration::from_millis(1000 + jitter * 4)).await;
            }
            Err((_, e)) => return Err(e),
        }
    }
    println!(
        "\nUploading data completed successfully, waiting for processing to complete, you can hit ctrl-c without interrupting the progress"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(24 * 3600);
    loop {
        if let Some(p) =
            pvcs.get_opt(&upload_pvc).await.map_err(kerr(format!("getting PVC {namespace}/{upload_pvc}")))?
            && WorkerState::of(&annotations(&p)).phase == Some(WorkerPhase::Succeeded)
        {
            break;
        }
        if plan.kind == Kind::Dv
            && let Some(dv) =
                dvs.get_opt(&plan.name).await.map_err(kerr(format!("getting DataVolume {namespace}/{}", plan.name)))?
            && dv.status.and_then(|s| s.phase) == Some(DataVolumePhase::Succeeded)
        {
            break;
        }
        sleep_or_timeout(deadline, "processing to complete").await?;
    }
    println!("Processing completed successfully");
    println!("Uploading {} completed successfully", plan.path.display());
    Ok(())
}

/// Creates an `UploadTokenRequest` for PVC `pvc` and returns the token.
pub async fn request_token(client: &kube::Client, namespace: &str, pvc: &str) -> Result<String> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(upload_token::GROUP, upload_token::VERSION, upload_token::KIND),
        upload_token::RESOURCE,
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &ar);
    let req: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", upload_token::GROUP, upload_token::VERSION), "kind": upload_token::KIND,
        "metadata": {"name": TOKEN_REQUEST_NAME, "namespace": namespace},
        "spec": {"pvcName": pvc}
    }))
    .map_err(|e| Error::Usage(e.to_string()))?;
    let r = api.create(&PostParams::default(), &req).await.map_err(kerr("creating an UploadTokenRequest"))?;
    r.data
        .pointer("/status/token")
        .and_then(|v| v.as_str())
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| Error::Refused(String::from("the UploadTokenRequest returned no token")))
}

/// One POST of the file. Err((retryable, error)).
async fn upload_once(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    path: &Path,
    size: u64,
    progress: bool,
) -> Result<(), (bool, Error)> {
    let file =
        tokio::fs::File::open(path).await.map_err(|source| (false, Error::File { path: path.to_owned(), source }))?;
    let bar = if progress && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let b = indicatif::ProgressBar::new(size);
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{bytes:>10} / {total_bytes} [{bar:40}] {percent:>3}% {bytes_per_sec} ETA {eta}",
        ) {
            b.set_style(style.progress_chars("=> "));
        }
        b
    } else {
        indicatif::ProgressBar::hidden()
    };
    let b2 = bar.clone();
    let stream = tokio_util::io::ReaderStream::with_capacity(file, 1 << 20).map(move |c| {
        if let Ok(c) = &c {
            b2.inc(c.len() as u64);
        }
        c
    });
    let resp = http
        .post(url)
        .bearer_auth(token)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .header(reqwest::header::CONTENT_LENGTH, size)
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await;
    bar.finish_and_clear();
    let resp = resp
        .map_err(|e| (true, Error::Upload(format!("upload to {url} failed: {}", contracts::errors::chain_line(&e)))))?;
    let status = resp.status();
    if status.as_u16() != 200 {
        let body = resp.text().await.unwrap_or_default();
        let retryable = status.is_server_error() && status.as_u16() != 500;
        return Err((retryable, Error::Upload(format!("unexpected return value {}, {body}", status.as_u16()))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: ImageUploadArgs,
    }

    fn parse(args: &[&str]) -> ImageUploadArgs {
        let mut v = vec!["image-upload"];
        v.extend_from_slice(args);
        T::try_parse_from(v).map(|t| t.a).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn positional_forms_and_flag_checks() {
        let p = parse(&["dv", "disk", "--image-path", "/x.qcow2", "--size", "1Gi"])
            .plan()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.kind, p.name.as_str(), p.archive), (Kind::Dv, "disk", false));
        let p = parse(&["pvc", "d2", "--archive-path", "/a.tar"]).plan().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.kind, p.archive), (Kind::Pvc, true));
        let p = parse(&["--pvc-name", "old", "--image-path", "/x"]).plan().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.kind, p.name.as_str()), (Kind::Pvc, "old"));
        let err = |a: &[&str]| parse(a).plan().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(&["vm", "x", "--image-path", "/x"]).contains("dv or pvc"));
        assert!(err(&["dv", "x"]).contains("image-path or archive-path"));
        assert!(err(&["dv", "x", "--image-path", "/a", "--archive-path", "/b"]).contains("only one"));
        assert!(err(&["dv", "x", "--image-path", "/a", "--access-mode", "ReadOnlyMany"]).contains("readonly"));
        assert!(err(&["dv", "x", "--archive-path", "/a", "--volume-mode", "block"]).contains("filesystem"));
        assert!(err(&["dv"]).contains("expecting two args"));
    }

    #[test]
    fn objects_created() {
        let a = parse(&[
            "dv",
            "disk",
            "--image-path",
            "/x",
            "--size",
            "2Gi",
            "--storage-class",
            "local",
            "--access-mode",
            "ReadWriteMany",
            "--volume-mode",
            "Block",
            "--force-bind",
        ]);
        let plan = a.plan().unwrap_or_else(|e| panic!("{e}"));
        let dv = a.datavolume(&plan, "ns", "2Gi");
        assert_eq!(
            dv,
            json!({"apiVersion":"cdi.kubevirt.io/v1beta1","kind":"DataVolume",
                "metadata":{"name":"disk","namespace":"ns","annotations":{ann::BIND_IMMEDIATE:""}},
                "spec":{"source":{"upload":{}},"contentType":"kubevirt","storage":{
                    "resources":{"requests":{"storage":"2Gi"}},"storageClassName":"local",
                    "accessModes":["ReadWriteMany"],"volumeMode":"Block"}}})
        );
        let a = parse(&["pvc", "p", "--archive-path", "/x", "--size", "1Gi"]);
        let plan = a.plan().unwrap_or_else(|e| panic!("{e}"));
        let pvc = a.pvc(&plan, "ns", "1Gi");
        assert_eq!(pvc.pointer("/metadata/annotations/cdi.kubevirt.io~1storage.contentType"), Some(&json!("archive")));
        assert_eq!(pvc.pointer("/metadata/annotations/cdi.kubevirt.io~1storage.upload.target"), Some(&json!("")));
        assert_eq!(pvc.pointer("/spec/accessModes"), Some(&json!(["ReadWriteOnce"])));
    }

    #[test]
    fn url_and_path_selection() {
        assert_eq!(normalize_proxy_url("10.0.0.1:8443"), "https://10.0.0.1:8443");
        assert_eq!(normalize_proxy_url("http://h/"), "http://h");
        assert_eq!(upload_path(Some(200)), "/v1beta1/upload-async");
        assert_eq!(upload_path(Some(404)), "/v1beta1/upload");
        assert_eq!(upload_path(None), "/v1beta1/upload");
    }
}
