//! Test support for the single-machine Kubernetes test cluster built by `tests/cluster/up`.
//!
//! * [`TestCluster::start_or_reuse`] runs `tests/cluster/up` (a no-op when the cluster is already healthy) once per
//!   process and returns a handle with the admin kubeconfig;
//! * [`TestCluster::client`] builds a [`kube::Client`] for the current tokio runtime;
//! * [`apply_yaml`] server-side-applies a multi-document YAML string (any kind, discovered at run time);
//! * [`wait_for`] waits for a condition with a timeout and, on failure, returns an error that contains the object as
//!   YAML plus its recent events.
//! * [`TestNamespace`] creates a uniquely named namespace for one test.
//! * [`push_image_from_binaries`], [`workspace_binary`] and [`content_tag`] package this workspace's binaries as
//!   images for the cluster's registry; [`host_url`] and [`pod_registry`] are how pods reach host services.
//! * [`NODE1`], [`node2_name`], [`ready_nodes`] and [`require_ready_nodes`] for tests that need the second node
//!   (`KV_NODES=2 tests/cluster/up`).
//!
//! Only generic cluster helpers live here; the CDI stack's (deploying it, volume contents) are in
//! `cdi-test-support` (`tests/cdi-support`). Cluster tests are `#[ignore]`d and run with
//! `cargo test -p <crate> -- --ignored` after `tests/cluster/up`.

#![deny(missing_docs)]

use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Namespace, Node};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams, ResourceExt};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::runtime::wait::{Condition, await_condition};
use kube::{Client, Config, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The value of `r`, or a test failure showing its error (for tests that would otherwise `unwrap`).
pub fn ok<T, E: std::fmt::Display>(r: std::result::Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// Field manager used for server-side apply by [`apply_yaml`].
pub const FIELD_MANAGER: &str = "kube-test-support";

/// Errors from the test-support helpers. `Debug` prints the message and its causes (as `Display` would, plus the
/// chain), so a test returning `Result<(), Error>` fails with a readable report.
#[derive(thiserror::Error)]
pub enum Error {
    /// `tests/cluster/up` failed or could not be run.
    #[error("tests/cluster/up failed: {0}")]
    ClusterUp(String),
    /// Reading the kubeconfig or building the client failed.
    #[error("loading kubeconfig {path}")]
    Kubeconfig {
        /// The kubeconfig path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An API call failed.
    #[error("kubernetes API call failed")]
    Kube(#[from] kube::Error),
    /// The YAML given to [`apply_yaml`] is invalid.
    #[error("invalid YAML document #{index}: {message}")]
    Yaml {
        /// Zero-based index of the document in the stream.
        index: usize,
        /// What is wrong.
        message: String,
    },
    /// A wait timed out; the message contains the object's last state and events.
    #[error("timed out after {timeout:?} waiting for {what}\n{state}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// The timeout.
        timeout: Duration,
        /// The object (YAML) and its recent events at the time of the timeout.
        state: String,
    },
    /// Building or pushing an image with `tests/cluster/image-from-binaries` failed.
    #[error("building image {name}: {message}")]
    Image {
        /// The requested `name:tag`.
        name: String,
        /// The script's exit status and stderr.
        message: String,
    },
    /// Watching an object in [`wait_for`] failed.
    #[error("watching {what}")]
    Watch {
        /// The watched object.
        what: String,
        /// The watch error.
        #[source]
        source: kube::runtime::wait::Error,
    },
    /// What a test checked on the cluster is not as expected.
    #[error("{what}: {message}")]
    Check {
        /// What was checked.
        what: String,
        /// How it differs from the expectation.
        message: String,
    },
    /// A command (for example kubectl) could not be run.
    #[error("running {cmd}")]
    Command {
        /// The command line.
        cmd: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self}")?;
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            write!(f, "\ncaused by: {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

impl Error {
    /// For `map_err`: an I/O error of `what` (an operation or command line) as [`Error::Command`].
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
        let cmd = what.into();
        move |source| Error::Command { cmd, source }
    }
}

/// Result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Root directory of this checkout (the workspace).
pub fn repo_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::canonicalize(&root).unwrap_or(root)
}

/// The project's shared reference directory (specs, upstream example manifests), which lives beside the
/// checkout as `../shared`: `$KUBEVIRT_RS_SHARED` when set, else `<repo root>/../shared`, else — in a clone of a
/// local checkout, as CI and the before-stop check make one — `../shared` beside the checkout it was cloned from
/// (its `origin` remote). Fails, naming every place tried, when none exists.
pub fn shared_dir() -> Result<PathBuf> {
    let root = repo_root();
    let mut tried = Vec::new();
    if let Some(d) = std::env::var_os("KUBEVIRT_RS_SHARED") {
        tried.push(PathBuf::from(d));
    }
    tried.push(root.join("../shared"));
    let origin = Command::new("git").arg("-C").arg(&root).args(["config", "--get", "remote.origin.url"]).output();
    if let Ok(o) = origin
        && o.status.success()
    {
        let url = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        let path = PathBuf::from(url.strip_prefix("file://").unwrap_or(&url));
        if path.is_dir() {
            tried.push(path.join("../shared"));
        }
    }
    match tried.iter().find(|d| d.is_dir()) {
        Some(d) => Ok(std::fs::canonicalize(d).unwrap_or_else(|_| d.clone())),
        None => Err(Error::Check {
            what: String::from("the shared reference directory (../shared beside the checkout)"),
            message: format!(
                "none of {} exists",
                tried.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}

/// Reads a file of this checkout (`rel` relative to [`repo_root`]).
pub fn read_repo_file(rel: &str) -> Result<String> {
    std::fs::read_to_string(repo_root().join(rel)).map_err(Error::io(format!("reading {rel}")))
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
pub fn content_tag(files: &[&Path]) -> String {
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

/// Registry (on 127.0.0.1) that the test node pulls images from; `tests/cluster/up` pushes its images there.
pub fn registry() -> String {
    let port = std::env::var("KV_REGISTRY_PORT").unwrap_or_else(|_| "35000".to_owned());
    format!("127.0.0.1:{port}")
}

/// Reference of a test image pushed by `tests/cluster/up` (`busybox`: `/bin/busybox` with applet links and
/// `/bin/sh` as command; `pause`: the pod sandbox image).
pub fn test_image(name: &str) -> String {
    format!("{}/kubevirt-rs/{name}:1", registry())
}

/// The host as pods see it: node 1's pod bridge address, NATed to 127.0.0.1 for pods on either node
/// (`tests/cluster/node.sh`).
pub const POD_GATEWAY: &str = "10.244.0.1";

/// Name of the test cluster's first node (`tests/cluster/node.sh`).
pub const NODE1: &str = "localhost";

/// Name of the second node that `KV_NODES=2 tests/cluster/up` adds: its kubelet's address, `$KV_NODE2_IP` or
/// `127.0.0.2` (the apiserver dials a kubelet at its node's name; see `tests/cluster/README.md`).
pub fn node2_name() -> String {
    std::env::var("KV_NODE2_IP").unwrap_or_else(|_| "127.0.0.2".to_owned())
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Names of the cluster's nodes whose `Ready` condition is `True`, sorted.
pub async fn ready_nodes(client: &Client) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|n| node_is_ready(n))
        .map(|n| n.name_any())
        .collect();
    names.sort();
    Ok(names)
}

/// Waits (at most 30 s) until every node of `names` is `Ready`; fails with [`Error::Check`] naming the missing
/// ones, every node's state and how to start the second node (`KV_NODES=2 tests/cluster/up`).
pub async fn require_ready_nodes(client: &Client, names: &[&str]) -> Result<()> {
    let missing = |ready: &[String]| names.iter().filter(|n| !ready.iter().any(|r| r == *n)).count();
    let waited = poll_until("ready nodes", Duration::from_secs(30), || async {
        let ready = ready_nodes(client).await.ok()?;
        (missing(&ready) == 0).then_some(())
    })
    .await;
    if waited.is_ok() {
        return Ok(());
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let state = match nodes.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|n| format!("{} (Ready: {})", n.name_any(), node_is_ready(n)))
            .collect::<Vec<_>>()
            .join(", "),
        Err(e) => format!("<listing nodes failed: {e}>"),
    };
    Err(Error::Check {
        what: format!("this test needs the Ready nodes {names:?}"),
        message: format!(
            "the cluster has: {state}. Start the second node with `KV_NODES=2 tests/cluster/up` (or run the tests \
             with KV_NODES=2 in the environment)"
        ),
    })
}

/// The test registry as pods see it (through the cluster's NAT; for `docker://` URLs).
pub fn pod_registry() -> String {
    registry().replace("127.0.0.1", POD_GATEWAY)
}

/// URL under which pods reach a host service listening on 127.0.0.1:`port` (`tests/cluster` NAT).
pub fn host_url(port: u16, path: &str) -> String {
    format!("http://{POD_GATEWAY}:{port}/{}", path.trim_start_matches('/'))
}

/// Directory of the cluster scripts (`tests/cluster`) in this checkout.
pub fn cluster_script_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("cluster")
}

/// The cluster's scratch directory: `$KV_CLUSTER_DIR`, else `${TMPDIR:-/tmp}/kubevirt-rs-cluster` (as in
/// `tests/cluster/common.sh`).
pub fn cluster_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KV_CLUSTER_DIR") {
        return PathBuf::from(d);
    }
    let tmp = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    tmp.join("kubevirt-rs-cluster")
}

/// A running test cluster (started by `tests/cluster/up`, shared by every test on the machine).
#[derive(Debug, Clone)]
pub struct TestCluster {
    kubeconfig: PathBuf,
}

static UP_RESULT: OnceLock<Mutex<Option<Result<PathBuf, String>>>> = OnceLock::new();

impl TestCluster {
    /// Runs `tests/cluster/up` once per process (it returns at once when the cluster is already healthy, and
    /// builds/starts it otherwise), then returns the handle. Fails loudly when the cluster cannot be started.
    pub async fn start_or_reuse() -> Result<Self> {
        let kubeconfig =
            tokio::task::spawn_blocking(run_up_once).await.map_err(|e| Error::ClusterUp(format!("join: {e}")))??;
        Ok(Self { kubeconfig })
    }

    /// The cluster `kubeconfig` points at (already running; nothing is started).
    pub fn from_kubeconfig(kubeconfig: impl Into<PathBuf>) -> Self {
        Self { kubeconfig: kubeconfig.into() }
    }

    /// The admin kubeconfig (user in `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A client with admin rights. Create one per tokio runtime (each `#[tokio::test]` has its own).
    pub async fn client(&self) -> Result<Client> {
        client_from_kubeconfig(&self.kubeconfig).await
    }

    /// Runs the preinstalled `kubectl` against the cluster with `args`; returns the raw output.
    pub fn kubectl<I, S>(&self, args: I) -> Result<std::process::Output>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new("kubectl");
        cmd.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        cmd.output().map_err(|source| Error::Command { cmd: format!("{cmd:?}"), source })
    }

    /// Runs `kubectl <args> -f <file>` with `manifest` written to a temporary file, as a user would
    /// `kubectl create/apply -f` a manifest; returns the raw output.
    pub fn kubectl_with_manifest(&self, args: &[&str], manifest: &str) -> Result<std::process::Output> {
        let file = tempfile::Builder::new().suffix(".yaml").tempfile().map_err(Error::io("tempfile"))?;
        std::fs::write(file.path(), manifest).map_err(Error::io(format!("writing {}", file.path().display())))?;
        let mut full: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
        full.extend([std::ffi::OsStr::new("-f"), file.path().as_os_str()]);
        self.kubectl(full)
    }

    /// Polls `kubectl <args>` every 250 ms until its trimmed standard output is `want`, at most `timeout`.
    pub async fn kubectl_until(&self, args: &[&str], want: &str, timeout: Duration) -> Result<()> {
        let what = format!("`kubectl {}` to print {want:?}", args.join(" "));
        poll_until(&what, timeout, || async {
            let out = self.kubectl(args).ok()?;
            (String::from_utf8_lossy(&out.stdout).trim() == want).then_some(())
        })
        .await
    }
}

/// Packages host binaries (typically this workspace's, e.g. `env!("CARGO_BIN_EXE_<name>")`) into an image with
/// busybox and their shared libraries, pushes it to the cluster registry and returns its reference
/// (`tests/cluster/image-from-binaries`). Binaries are in `/usr/local/bin`, which is on `PATH`.
pub fn push_image_from_binaries(name_tag: &str, binaries: &[&Path]) -> Result<String> {
    let mut args: Vec<&OsStr> = vec![OsStr::new(name_tag)];
    args.extend(binaries.iter().map(|b| b.as_os_str()));
    run_image_script(&cluster_script_dir().join("image-from-binaries"), &args, name_tag)
}

/// Upstream KubeVirt's own `virtctl`, built from the Go module proxy into the cache when missing
/// (`tests/cluster/build-upstream-virtctl.sh`).
pub fn upstream_virtctl() -> Result<PathBuf> {
    run_image_script(&cluster_script_dir().join("build-upstream-virtctl.sh"), &[], "upstream virtctl")
        .map(PathBuf::from)
}

/// Runs an image-building script with `args` and returns its trimmed stdout (the image reference or directory
/// it prints); a failure is [`Error::Image`] for `what`, with the script's stderr.
pub fn run_image_script(script: &Path, args: &[&OsStr], what: &str) -> Result<String> {
    let mut cmd = Command::new(script);
    cmd.args(args);
    let out = cmd.output().map_err(|source| Error::Command { cmd: format!("{cmd:?}"), source })?;
    if !out.status.success() {
        return Err(Error::Image {
            name: what.to_owned(),
            message: format!(
                "{} exited with {}: {}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn run_up_once() -> Result<PathBuf> {
    let cell = UP_RESULT.get_or_init(|| Mutex::new(None));
    let mut guard = cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(r) = guard.as_ref() {
        return r.clone().map_err(Error::ClusterUp);
    }
    let up = cluster_script_dir().join("up");
    let r = match Command::new(&up).output() {
        Err(e) => Err(format!("cannot run {}: {e}", up.display())),
        Ok(out) if !out.status.success() => Err(format!(
            "{} exited with {}\n--- stdout\n{}\n--- stderr\n{}",
            up.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
        Ok(_) => Ok(cluster_dir().join("admin.kubeconfig")),
    };
    *guard = Some(r.clone());
    r.map_err(Error::ClusterUp)
}

/// Builds a client from a kubeconfig file (its current context).
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client> {
    let err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Kubeconfig { path: path.to_owned(), source };
    let kc = Kubeconfig::read_from(path).map_err(|e| err(Box::new(e)))?;
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await.map_err(|e| err(Box::new(e)))?;
    Client::try_from(cfg).map_err(|e| err(Box::new(e)))
}

/// Server-side applies every document of a (multi-document) YAML string with field manager [`FIELD_MANAGER`]
/// (forcing conflicts). Namespaced objects without `metadata.namespace` go to `namespace`. Returns the applied
/// objects as the server returned them.
pub async fn apply_yaml(client: &Client, namespace: &str, yaml: &str) -> Result<Vec<DynamicObject>> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(yaml).map_err(|e| Error::Yaml { index: 0, message: e.to_string() })?;
    let mut applied = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let obj: DynamicObject =
            serde_json::from_value(doc).map_err(|e| Error::Yaml { index, message: e.to_string() })?;
        let types =
            obj.types.clone().ok_or_else(|| Error::Yaml { index, message: "missing apiVersion/kind".into() })?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| Error::Yaml { index, message: e.to_string() })?;
        let name =
            obj.metadata.name.clone().ok_or_else(|| Error::Yaml { index, message: "missing metadata.name".into() })?;
        let (ar, caps) = discovery::pinned_kind(client, &gvk).await?;
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                let ns = obj.metadata.namespace.clone().unwrap_or_else(|| namespace.to_owned());
                Api::namespaced_with(client.clone(), &ns, &ar)
            }
            Scope::Cluster => Api::all_with(client.clone(), &ar),
        };
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        applied.push(api.patch(&name, &pp, &Patch::Apply(&obj)).await?);
    }
    Ok(applied)
}

/// Waits until `cond` holds for object `name` of `api`, at most `timeout`. Returns the object that satisfied the
/// condition. On timeout the error carries the object's current YAML and its recent events, so a failing test
/// shows why.
pub async fn wait_for<K, C>(api: &Api<K>, name: &str, timeout: Duration, cond: C) -> Result<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Serialize + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    C: Condition<K>,
{
    let what = format!("{} {name}", K::kind(&K::DynamicType::default()));
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(obj))) => Ok(obj),
        Ok(Ok(None)) => {
            Err(Error::Timeout { what: format!("{what} (the object was deleted)"), timeout, state: String::new() })
        }
        Ok(Err(source)) => Err(Error::Watch { what, source }),
        Err(_) => Err(Error::Timeout { what, timeout, state: describe(api, name).await }),
    }
}

/// The object as YAML plus its events (best effort; never fails).
pub async fn describe<K>(api: &Api<K>, name: &str) -> String
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Serialize,
    K::DynamicType: Default,
{
    let mut out = String::new();
    match api.get_opt(name).await {
        Ok(Some(obj)) => {
            out.push_str("--- object\n");
            out.push_str(&serde_saphyr::to_string(&obj).unwrap_or_else(|e| format!("<unserialisable: {e}>")));
            let ns = obj.namespace();
            let events: Api<Event> = match ns.as_deref() {
                Some(ns) => Api::namespaced(api.clone().into_client(), ns),
                None => Api::all(api.clone().into_client()),
            };
            let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
            if let Ok(list) = events.list(&lp).await {
                out.push_str("--- events\n");
                for e in list.items {
                    out.push_str(&format!(
                        "{} {} x{}: {}\n",
                        e.type_.unwrap_or_default(),
                        e.reason.unwrap_or_default(),
                        e.count.unwrap_or(1),
                        e.message.unwrap_or_default()
                    ));
                }
            }
        }
        Ok(None) => out.push_str("<object not found>\n"),
        Err(e) => out.push_str(&format!("<get failed: {e}>\n")),
    }
    out
}

/// Waits until `f` (re-evaluated every 250 ms) returns `Some`, at most `timeout`.
pub async fn poll_until<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::Timeout { what: what.to_owned(), timeout, state: String::new() });
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Polls object `name` of `api` (every 250 ms) until `pred` holds, at most `timeout`; returns the object. Like
/// [`wait_for`], the timeout error carries the object's YAML and its events; unlike it, it reads with plain GETs.
pub async fn poll_object<K>(api: &Api<K>, name: &str, timeout: Duration, pred: impl Fn(&K) -> bool) -> Result<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Serialize,
    K::DynamicType: Default,
{
    let what = format!("{} {name}", K::kind(&K::DynamicType::default()));
    match poll_until(&what, timeout, || async { api.get_opt(name).await.ok().flatten().filter(|o| pred(o)) }).await {
        Err(Error::Timeout { what, timeout, .. }) => {
            Err(Error::Timeout { what, timeout, state: describe(api, name).await })
        }
        r => r,
    }
}

/// Waits until Deployment `name` runs `image` (its first container) on every replica and is available, at most
/// `timeout`.
pub async fn wait_rollout(deploys: &Api<Deployment>, name: &str, image: &str, timeout: Duration) -> Result<()> {
    poll_until(&format!("{name} available with image {image}"), timeout, || async {
        let d = deploys.get_opt(name).await.ok().flatten()?;
        let running = d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.image.clone()?;
        let st = d.status?;
        let updated = st.updated_replicas.unwrap_or(0) == st.replicas.unwrap_or(0)
            && st.available_replicas.unwrap_or(0) >= 1
            && st.unavailable_replicas.unwrap_or(0) == 0;
        (running == image && updated && d.metadata.generation == st.observed_generation).then_some(())
    })
    .await
}

/// A namespace created for one test (`<prefix>-<random suffix>`), deleted by [`TestNamespace::delete`].
/// Not deleted on drop, so a failing test leaves its objects for inspection.
#[derive(Clone)]
pub struct TestNamespace {
    name: String,
    client: Client,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace").field("name", &self.name).finish_non_exhaustive()
    }
}

impl TestNamespace {
    /// Creates the namespace and waits until its `default` ServiceAccount exists (pods need it).
    pub async fn create(client: &Client, prefix: &str) -> Result<Self> {
        let api: Api<Namespace> = Api::all(client.clone());
        let mut ns = Namespace::default();
        ns.metadata.generate_name = Some(format!("{prefix}-"));
        ns.metadata.labels = Some([("kubevirt-rs.test/test-namespace".to_owned(), "true".to_owned())].into());
        let created = api.create(&PostParams::default(), &ns).await?;
        let name = created.name_any();
        let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), &name);
        poll_until(&format!("default ServiceAccount in {name}"), Duration::from_secs(30), || {
            let sas = sas.clone();
            async move { sas.get_opt("default").await.ok().flatten() }
        })
        .await?;
        Ok(Self { name, client: client.clone() })
    }

    /// The namespace name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace (asynchronously; the namespace controller finishes it).
    pub async fn delete(self) -> Result<()> {
        let api: Api<Namespace> = Api::all(self.client);
        api.delete(&self.name, &Default::default()).await?;
        Ok(())
    }
}

/// Watches `api` for objects matching `lp` and returns the first one that satisfies `pred`, at most `timeout`.
pub async fn wait_for_any<K, F>(api: &Api<K>, lp: ListParams, timeout: Duration, mut pred: F) -> Result<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
    F: FnMut(&K) -> bool,
{
    let fut = async {
        let mut interval = tokio::time::interval(Duration::from_millis(250));
        loop {
            interval.tick().await;
            if let Ok(list) = api.list(&lp).await
                && let Some(o) = list.items.into_iter().find(|o| pred(o))
            {
                return o;
            }
        }
    };
    tokio::time::timeout(timeout, fut).await.map_err(|_| Error::Timeout {
        what: "an object matching the predicate".into(),
        timeout,
        state: String::new(),
    })
}
