//! The whole stack on a cluster, and the VM test helpers.
//!
//! [`deploy_stack`] is `tests/cluster/install-stack`: the CDI half ([`cdi_test_support::deploy_cdi`]) and the
//! KubeVirt half ([`deploy_kubevirt`]: namespace, CRDs, the `KubeVirt` configuration, the VMI controller, the node
//! agent DaemonSet, virt-api and its webhooks) from `deploy/`, with images built from this workspace's binaries and
//! pushed to the test registry; idempotent; returns once every component is ready.
//!
//! The VM tests boot `tests/guest/` ([`guest_dir`], [`guest_containerdisk`]) and upstream's example manifests
//! ([`upstream_example`] with [`local_images`]).

#![deny(missing_docs)]

pub mod metrics;
pub mod operator;
pub mod vmi;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use cdi_test_support::{CdiImages, deploy_cdi};
use contracts::kubevirt::consts::label;
use contracts::kubevirt::node_api;
use controller_runtime::api::delete_if_present;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube_test_support::{
    Error, Result, TestCluster, apply_yaml, content_tag, poll_until, push_image_from_binaries, read_repo_file,
    registry, repo_root, wait_rollout, workspace_binary,
};
use virt_operator::pki::{self, Pki};

/// Namespace of the KubeVirt components.
pub const NAMESPACE: &str = "kubevirt";

/// Image references of the KubeVirt half.
#[derive(Debug, Clone)]
pub struct KubevirtImages {
    /// virt-launcher (the launcher rootfs + our `virt-launcher`).
    pub launcher: String,
    /// The VMI controller.
    pub controller: String,
    /// The node agent.
    pub node_agent: String,
    /// virt-api (admission webhooks).
    pub virt_api: String,
}

/// Cluster settings the stack is installed with (the `KubeVirt` object's configuration).
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// `developerConfiguration.useEmulation` (the test cluster needs it: its /dev/kvm hangs guests).
    pub use_emulation: bool,
    /// `network.defaultNetworkInterface` (`bridge` or `masquerade`).
    pub default_network_interface: String,
}

impl Default for StackOptions {
    /// The test cluster's: software emulation, masquerade as the default binding.
    fn default() -> Self {
        StackOptions { use_emulation: true, default_network_interface: "masquerade".into() }
    }
}

/// Every image of the stack.
#[derive(Debug, Clone)]
pub struct StackImages {
    /// The CDI half.
    pub cdi: CdiImages,
    /// The KubeVirt half.
    pub kubevirt: KubevirtImages,
}

fn run_script(script: &Path, args: &[&str], what: &str) -> Result<String> {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    kube_test_support::run_image_script(script, &args, what)
}

static IMAGES: OnceLock<Mutex<Option<Result<KubevirtImages, String>>>> = OnceLock::new();

/// Builds and pushes the KubeVirt half's images once per process.
pub fn kubevirt_images() -> Result<KubevirtImages> {
    let cell = IMAGES.get_or_init(|| Mutex::new(None));
    let mut guard = cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(r) = guard.as_ref() {
        return r.clone().map_err(|message| Error::Image { name: "kubevirt".into(), message });
    }
    let r = (|| -> Result<KubevirtImages> {
        let launcher = workspace_binary("virt-launcher")?;
        let controller = workspace_binary("vm-controller")?;
        let node_agent = workspace_binary("node-agent")?;
        let virt_api = workspace_binary("virt-api")?;
        let tag = content_tag(&[&launcher, &controller, &node_agent, &virt_api]);
        let repo = format!("{}/kubevirt-rs", registry());
        let launcher_bin = launcher.to_string_lossy().into_owned();
        let launcher = run_script(
            &repo_root().join("deploy/launcher/build-image.sh"),
            &[&format!("virt-launcher:{tag}"), &repo, &launcher_bin],
            "virt-launcher",
        )?;
        Ok(KubevirtImages {
            launcher,
            controller: push_image_from_binaries(&format!("vm-controller:{tag}"), &[&controller])?,
            node_agent: push_image_from_binaries(&format!("node-agent:{tag}"), &[&node_agent])?,
            virt_api: push_image_from_binaries(&format!("virt-api:{tag}"), &[&virt_api])?,
        })
    })();
    *guard = Some(r.as_ref().map(Clone::clone).map_err(ToString::to_string));
    r
}

/// Rewrites `kubevirt-rs/<name>:latest` image references of a deploy manifest to the pushed images.
pub fn with_images(yaml: &str, images: &KubevirtImages) -> String {
    yaml.replace("kubevirt-rs/virt-launcher:latest", &images.launcher)
        .replace("kubevirt-rs/vm-controller:latest", &images.controller)
        .replace("kubevirt-rs/node-agent:latest", &images.node_agent)
        .replace("kubevirt-rs/virt-api:latest", &images.virt_api)
}

/// Waits until DaemonSet `name` runs `image` (its first container) ready on every node it schedules to.
async fn wait_daemonset(api: &Api<DaemonSet>, name: &str, image: &str, timeout: Duration) -> Result<()> {
    poll_until(&format!("DaemonSet {name} ready with image {image}"), timeout, || async {
        let d = api.get_opt(name).await.ok().flatten()?;
        let running = d.spec.as_ref()?.template.spec.as_ref()?.containers.first()?.image.clone()?;
        let st = d.status?;
        let ready = st.desired_number_scheduled > 0
            && st.number_ready == st.desired_number_scheduled
            && st.updated_number_scheduled.unwrap_or(0) == st.desired_number_scheduled;
        (running == image && ready && d.metadata.generation == st.observed_generation).then_some(())
    })
    .await
}

/// Installs the KubeVirt half from `deploy/` with the pushed images and `options`, and waits until the VMI
/// controller and virt-api are available, the node agent is ready on every node and has marked them
/// `kubevirt.io/schedulable=true`. Idempotent.
pub async fn deploy_kubevirt(cluster: &TestCluster, options: &StackOptions) -> Result<KubevirtImages> {
    let images =
        tokio::task::spawn_blocking(kubevirt_images).await.map_err(|e| Error::ClusterUp(format!("join: {e}")))??;
    let client = cluster.client().await?;
    apply_yaml(&client, NAMESPACE, &read_repo_file("deploy/kubevirt-namespace.yaml")?).await?;
    let files = crds::kubevirt::crd::all().map_err(|e| Error::ClusterUp(e.to_string()))?;
    for f in files.iter().map(|(f, _)| *f) {
        apply_yaml(&client, NAMESPACE, &read_repo_file(&format!("deploy/crds/{f}"))?).await?;
    }
    // CRDs must be established before objects of them are served.
    poll_until("the KubeVirt CRDs to be served", Duration::from_secs(30), || async {
        apply_yaml(&client, NAMESPACE, &read_repo_file("deploy/kubevirt-cr.yaml").ok()?).await.ok()
    })
    .await?;
    let kv: Api<crds::kubevirt::config::KubeVirt> = Api::namespaced(client.clone(), NAMESPACE);
    let config = serde_json::json!({"spec": {"configuration": {
        "developerConfiguration": {"useEmulation": options.use_emulation},
        "network": {"defaultNetworkInterface": options.default_network_interface},
    }}});
    kv.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&config)).await?;
    // The node API's certificates (node agent serving, virt-api client): kept when both exist, else a fresh pair.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let server = secrets.get_opt(node_api::SERVER_SECRET).await?;
    let client_cert = secrets.get_opt(node_api::CLIENT_SECRET).await?;
    if server.as_ref().and_then(Pki::from_secret).is_none() || client_cert.as_ref().and_then(Pki::from_secret).is_none()
    {
        let (server, client_cert) = Pki::generate_node_api().map_err(|e| Error::ClusterUp(e.to_string()))?;
        for (name, p) in [(node_api::SERVER_SECRET, server), (node_api::CLIENT_SECRET, client_cert)] {
            let params = PatchParams::apply("stack-support").force();
            secrets.patch(name, &params, &Patch::Apply(p.secret_named(name, NAMESPACE))).await?;
        }
    }
    for f in ["kubevirt-rbac.yaml", "vm-controller.yaml", "node-agent.yaml"] {
        apply_yaml(&client, NAMESPACE, &with_images(&read_repo_file(&format!("deploy/{f}"))?, &images)).await?;
    }
    // virt-api's serving certificate: the one kept in its Secret (re-installs keep running replicas valid), else
    // a fresh CA and certificate.
    let pki = match secrets.get_opt(pki::TLS_SECRET).await?.as_ref().and_then(Pki::from_secret) {
        Some(p) => p,
        None => {
            let p = Pki::generate(&pki::service_names(NAMESPACE)).map_err(|e| Error::ClusterUp(e.to_string()))?;
            secrets
                .patch(
                    pki::TLS_SECRET,
                    &PatchParams::apply("stack-support").force(),
                    &Patch::Apply(p.secret(NAMESPACE)),
                )
                .await?;
            p
        }
    };
    let api_yaml = pki::with_ca_bundle(&read_repo_file("deploy/virt-api.yaml")?, &pki).replace(
        "{name: VIRT_API_DEFAULT_NETWORK_INTERFACE, value: bridge}",
        &format!("{{name: VIRT_API_DEFAULT_NETWORK_INTERFACE, value: {}}}", options.default_network_interface),
    );
    apply_yaml(&client, NAMESPACE, &with_images(&api_yaml, &images)).await?;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    wait_rollout(&deploys, "virt-controller", &images.controller, Duration::from_secs(180)).await?;
    wait_rollout(&deploys, "virt-api", &images.virt_api, Duration::from_secs(180)).await?;
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    wait_daemonset(&daemonsets, "virt-handler", &images.node_agent, Duration::from_secs(180)).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    poll_until("every node labelled kubevirt.io/schedulable=true", Duration::from_secs(60), || async {
        let list = nodes.list(&Default::default()).await.ok()?;
        list.items
            .iter()
            .all(|n| {
                n.metadata.labels.as_ref().and_then(|l| l.get(label::SCHEDULABLE)).map(String::as_str) == Some("true")
            })
            .then_some(())
    })
    .await?;
    Ok(images)
}

/// Installs both halves ([`deploy_cdi`], [`deploy_kubevirt`]) directly from `deploy/`. A virt-operator left by an
/// earlier run (`tests/cluster/install-stack`, the operator's test) is removed first: it would roll the components
/// back to its own release.
pub async fn deploy_stack(cluster: &TestCluster, options: &StackOptions) -> Result<StackImages> {
    let deploys: Api<Deployment> = Api::namespaced(cluster.client().await?, NAMESPACE);
    // Its uninstall guard would refuse deleting the `KubeVirt` object without it (failure policy Fail).
    let hooks: Api<k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration> =
        Api::all(cluster.client().await?);
    delete_if_present(&hooks, virt_operator::webhook::CONFIG).await?;
    if delete_if_present(&deploys, "virt-operator").await? {
        poll_until("virt-operator to be gone", Duration::from_secs(60), || async {
            deploys.get_opt("virt-operator").await.ok()?.is_none().then_some(())
        })
        .await?;
    }
    let cdi = deploy_cdi(cluster).await?;
    let kubevirt = deploy_kubevirt(cluster, options).await?;
    Ok(StackImages { cdi, kubevirt })
}

/// Builds the test guest when missing (`tests/guest/build.sh`) and returns its directory (`disk.qcow2`,
/// `disk.raw`, …).
pub fn guest_dir() -> Result<PathBuf> {
    run_script(&repo_root().join("tests/guest/build.sh"), &[], "test guest").map(PathBuf::from)
}

/// The test guest's qcow2 copied under the import tests' nginx (`tests/infra/import-env.sh`, `/out/` of
/// `tests/work/out`, port 18080): the URL pods fetch it from (an HTTP DataVolume source) and the copy (for the
/// caller to remove when done).
pub fn guest_qcow2_url() -> Result<(String, PathBuf)> {
    let guest = guest_dir()?;
    let tag = guest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let out = repo_root().join("tests/work/out");
    std::fs::create_dir_all(&out).map_err(Error::io("creating tests/work/out"))?;
    let file = format!("guest-{tag}.qcow2");
    std::fs::copy(guest.join("disk.qcow2"), out.join(&file)).map_err(Error::io("copying the guest's qcow2"))?;
    Ok((kube_test_support::host_url(18080, &format!("out/{file}")), out.join(&file)))
}

pub use kube_test_support::upstream_virtctl;

static CONTAINERDISK: OnceLock<Mutex<Option<Result<String, String>>>> = OnceLock::new();

/// The test guest as a containerDisk in the test registry (`tests/guest/push-containerdisk.sh`), once per
/// process; tagged by the guest build.
pub fn guest_containerdisk() -> Result<String> {
    let cell = CONTAINERDISK.get_or_init(|| Mutex::new(None));
    let mut guard = cell.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(r) = guard.as_ref() {
        return r.clone().map_err(|message| Error::Image { name: "guest-containerdisk".into(), message });
    }
    let r = guest_dir().and_then(|dir| {
        let tag = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "latest".into());
        let dest = format!("{}/kubevirt-rs/guest-containerdisk:g{tag}", registry());
        run_script(&repo_root().join("tests/guest/push-containerdisk.sh"), &[&dest], "guest-containerdisk")
    });
    *guard = Some(r.as_ref().map(Clone::clone).map_err(ToString::to_string));
    r
}

/// An upstream KubeVirt example manifest (`upstream-examples/kubevirt/<file>` of the shared reference
/// directory). A missing file is an error, never a skip.
pub fn upstream_example(file: &str) -> Result<String> {
    let path = kube_test_support::shared_dir()?.join("upstream-examples/kubevirt").join(file);
    std::fs::read_to_string(&path).map_err(Error::io(format!("reading {}", path.display())))
}

/// Rewrites the containerDisk images of upstream's examples (`registry:5000/kubevirt/<name>:devel`) to `image`.
pub fn local_images(yaml: &str, image: &str) -> String {
    yaml.lines()
        .map(|line| match line.split_once("image: registry:5000/kubevirt/") {
            Some((indent, _)) => format!("{indent}image: {image}"),
            None => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_images_are_rewritten_and_nothing_else() {
        let yaml = "spec:\n  volumes:\n  - containerDisk:\n      image: registry:5000/kubevirt/cirros-container-disk-demo:devel\n    name: containerdisk\n";
        let got = local_images(yaml, "127.0.0.1:35000/kubevirt-rs/guest:1");
        assert_eq!(
            got,
            "spec:\n  volumes:\n  - containerDisk:\n      image: 127.0.0.1:35000/kubevirt-rs/guest:1\n    name: containerdisk"
        );
        assert_eq!(local_images("image: quay.io/x", "y"), "image: quay.io/x");
    }
}
