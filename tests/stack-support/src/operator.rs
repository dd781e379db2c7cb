//! The stack installed the way users install it: the operator's manifest (`deploy/operator.yaml`, after the
//! namespace and the `KubeVirt` and `CDI` CRDs) and the two objects (`deploy/kubevirt-cr.yaml`,
//! `deploy/cdi-cr.yaml`); virt-operator does the rest. [`release_images`] publishes every image of the workspace
//! under one tag, as a release does; [`install_with_operator`] is `tests/cluster/install-stack`.

use std::process::Command;
use std::time::Duration;

use crds::cdi::CDI;
use crds::kubevirt::config::KubeVirt;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube_test_support::{
    Error, Result, TestCluster, apply_yaml, poll_until, read_repo_file, registry, workspace_binary,
};

use crate::{NAMESPACE, StackOptions, kubevirt_images};

/// The repository every image of a release lives in (`<registry>/kubevirt-rs`).
pub fn image_repository() -> String {
    format!("{}/kubevirt-rs", registry())
}

/// Publishes every image of the stack (built from the workspace's binaries) as
/// `<registry>/kubevirt-rs/<name>:<tag>` and returns the operator's image.
pub fn release_images(tag: &str) -> Result<String> {
    let cdi = cdi_test_support::cdi_images()?;
    let kv = kubevirt_images()?;
    let operator = workspace_binary("virt-operator")?;
    let repo = image_repository();
    let own_tag = kube_test_support::content_tag(&[&operator]);
    let built = kube_test_support::push_image_from_binaries(&format!("virt-operator:{own_tag}"), &[&operator])?;
    for (name, src) in [
        ("importer", &cdi.importer),
        ("datavolume-controller", &cdi.controller),
        ("uploadserver", &cdi.uploadserver),
        ("uploadproxy", &cdi.uploadproxy),
        ("cdi-apiserver", &cdi.apiserver),
        ("virt-launcher", &kv.launcher),
        ("vm-controller", &kv.controller),
        ("node-agent", &kv.node_agent),
        ("virt-api", &kv.virt_api),
        ("virt-operator", &built),
    ] {
        let dest = format!("{repo}/{name}:{tag}");
        let out = Command::new("skopeo")
            .args(["copy", "-q", "--src-tls-verify=false", "--dest-tls-verify=false"])
            .arg(format!("docker://{src}"))
            .arg(format!("docker://{dest}"))
            .output()
            .map_err(Error::io("skopeo"))?;
        if !out.status.success() {
            return Err(Error::Image { name: dest, message: String::from_utf8_lossy(&out.stderr).into_owned() });
        }
    }
    Ok(format!("{repo}/virt-operator:{tag}"))
}

/// A tag naming the workspace's current binaries (content digest of all of them).
pub fn release_tag() -> Result<String> {
    let names = [
        "importer",
        "datavolume-controller",
        "uploadserver",
        "uploadproxy",
        "cdi-apiserver",
        "virt-launcher",
        "vm-controller",
        "node-agent",
        "virt-api",
        "virt-operator",
    ];
    let paths = names.iter().map(|n| workspace_binary(n)).collect::<Result<Vec<_>>>()?;
    Ok(kube_test_support::content_tag(&paths.iter().map(|p| p.as_path()).collect::<Vec<_>>()))
}

/// Applies the operator's manifest with `operator_image` (the namespace and the two CRDs first).
pub async fn apply_operator(client: &Client, operator_image: &str) -> Result<()> {
    apply_yaml(client, NAMESPACE, &read_repo_file("deploy/kubevirt-namespace.yaml")?).await?;
    for f in ["deploy/crds/kubevirt.yaml", "deploy/crds/cdi.yaml"] {
        apply_yaml(client, NAMESPACE, &read_repo_file(f)?).await?;
    }
    let manifest = read_repo_file("deploy/operator.yaml")?.replace("kubevirt-rs/virt-operator:latest", operator_image);
    apply_yaml(client, NAMESPACE, &manifest).await?;
    Ok(())
}

/// Waits until the `KubeVirt` and `CDI` objects report `Deployed` with every component at `tag`, and every node
/// is schedulable for VMs.
pub async fn wait_deployed(client: &Client, tag: &str, timeout: Duration) -> Result<()> {
    let kvs: Api<KubeVirt> = Api::namespaced(client.clone(), NAMESPACE);
    let cdis: Api<CDI> = Api::all(client.clone());
    poll_until(&format!("KubeVirt and CDI Deployed at {tag}"), timeout, || async {
        let kv = kvs.get_opt("kubevirt").await.ok().flatten()?;
        let cdi = cdis.get_opt("cdi").await.ok().flatten()?;
        // The phase stays `Deployed` while a deployed installation rolls; `Available` says the last pass found
        // every component ready.
        let available = |c: Option<&Vec<crds::kubevirt::wire::Condition<String>>>, reason: &str| {
            c.into_iter()
                .flatten()
                .any(|c| c.type_ == "Available" && c.status.as_str() == "True" && c.reason.as_deref() == Some(reason))
        };
        let (kvs_, cdis_) = (kv.status.as_ref()?, cdi.status.as_ref()?);
        (kvs_.phase.as_deref() == Some("Deployed")
            && kvs_.observed_kube_virt_version.as_deref() == Some(tag)
            && kvs_.observed_generation == kv.metadata.generation
            && available(kvs_.conditions.as_ref(), "AllComponentsReady")
            && cdis_.phase.as_deref() == Some("Deployed")
            && cdis_.observed_version.as_deref() == Some(tag)
            && available(cdis_.conditions.as_ref(), "DeployCompleted"))
        .then_some(())
    })
    .await?;
    crate::vmi::stack_ready(client).await
}

/// Installs the whole stack through the operator at `tag` ([`release_images`], [`apply_operator`], the two
/// objects with `options`) and waits until it is deployed. Idempotent; over a stack installed otherwise, the
/// operator takes its objects over.
pub async fn install_with_operator(cluster: &TestCluster, options: &StackOptions, tag: &str) -> Result<String> {
    let t = tag.to_owned();
    let image = tokio::task::spawn_blocking(move || release_images(&t))
        .await
        .map_err(|e| Error::ClusterUp(format!("join: {e}")))??;
    let client = cluster.client().await?;
    apply_operator(&client, &image).await?;
    poll_until("the KubeVirt and CDI CRDs to be served", Duration::from_secs(30), || async {
        apply_yaml(&client, NAMESPACE, &read_repo_file("deploy/kubevirt-cr.yaml").ok()?).await.ok()?;
        apply_yaml(&client, NAMESPACE, &read_repo_file("deploy/cdi-cr.yaml").ok()?).await.ok()
    })
    .await?;
    let kv: Api<KubeVirt> = Api::namespaced(client.clone(), NAMESPACE);
    // The release is the operator's: an `imageTag`/`imageRegistry` left by an earlier run is dropped.
    let config = serde_json::json!({"spec": {"imageTag": null, "imageRegistry": null, "configuration": {
        "developerConfiguration": {"useEmulation": options.use_emulation},
        "network": {"defaultNetworkInterface": options.default_network_interface},
    }}});
    kv.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&config)).await?;
    wait_deployed(&client, tag, Duration::from_secs(600)).await?;
    Ok(image)
}
