//! What an installation consists of: the `deploy/` manifests compiled into the operator plus the CRDs generated
//! by `crds`, rendered for a [`Release`] and cut into [`Stage`]s that are rolled out one after the other.
//!
//! Rendering is pure: the `kubevirt-rs/<name>:latest` image placeholders become the release's images (also in
//! environment variables such as the launcher's and the importer's), every container gets the release's pull
//! policy, every object upstream's operator labels and annotations, pods that mount a certificate Secret an
//! annotation with the certificates' digest (a renewed certificate rolls them), and every object the digest of its
//! own rendered form ([`INSTALL_HASH`]): a workload whose live object carries the digest of the desired one and has
//! rolled out is up to date.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::customize::{Customization, Role};
use crate::release::Release;

/// Annotation with the digest of an object's rendered form.
pub const INSTALL_HASH: &str = "kubevirt-rs.io/install-hash";
/// Pod-template annotation with the digest of the certificates the pods mount.
pub const CERTIFICATES_HASH: &str = "kubevirt-rs.io/certificates";
/// Upstream's label on everything virt-operator installs (value [`KUBEVIRT_MANAGER`] or [`CDI_MANAGER`]).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// `app.kubernetes.io/managed-by` of the KubeVirt half.
pub const KUBEVIRT_MANAGER: &str = "virt-operator";
/// `app.kubernetes.io/managed-by` of the CDI half (upstream's cdi-operator's value).
pub const CDI_MANAGER: &str = "cdi-operator";
/// Upstream's component label.
pub const COMPONENT: &str = "app.kubernetes.io/component";
/// Upstream's annotations of the installed version, registry and deployment identifier.
pub const STRATEGY_VERSION: &str = "kubevirt.io/install-strategy-version";
/// See [`STRATEGY_VERSION`].
pub const STRATEGY_REGISTRY: &str = "kubevirt.io/install-strategy-registry";
/// See [`STRATEGY_VERSION`].
pub const STRATEGY_IDENTIFIER: &str = "kubevirt.io/install-strategy-identifier";

const KUBEVIRT_RBAC: &str = include_str!("../../deploy/kubevirt-rbac.yaml");
const NODE_AGENT: &str = include_str!("../../deploy/node-agent.yaml");
const VM_CONTROLLER: &str = include_str!("../../deploy/vm-controller.yaml");
const VIRT_API: &str = include_str!("../../deploy/virt-api.yaml");
const CDI_NAMESPACE: &str = include_str!("../../deploy/namespace.yaml");
const DATAVOLUME_POLICY: &str = include_str!("../../deploy/crds/datavolume-policy.yaml");
const DATAVOLUME_CONTROLLER: &str = include_str!("../../deploy/datavolume-controller.yaml");
const CDI_APISERVER: &str = include_str!("../../deploy/cdi-apiserver.yaml");
const UPLOADPROXY: &str = include_str!("../../deploy/uploadproxy.yaml");

/// The component images of the stack (`kubevirt-rs/<name>:latest` in `deploy/`).
pub const IMAGES: &[&str] = &[
    "virt-launcher",
    "vm-controller",
    "node-agent",
    "virt-api",
    "importer",
    "datavolume-controller",
    "uploadserver",
    "uploadproxy",
    "cdi-apiserver",
    "virt-operator",
];

/// Rendering failed (a manifest of this build does not parse: a bug, caught by the unit tests).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A manifest is not YAML.
    #[error("manifest {stage}: {message}")]
    Yaml {
        /// The stage whose manifest failed.
        stage: &'static str,
        /// The parser's message.
        message: String,
    },
    /// A generated CRD failed.
    #[error("generating the CRDs: {0}")]
    Crd(String),
    /// The object's customization (placement, replicas, patches) cannot be applied.
    #[error("{0}")]
    Customize(String),
}

/// The objects of one step of an installation. The next stage is applied only once every workload (Deployment,
/// DaemonSet) of this one runs its desired form.
#[derive(Debug, Clone)]
pub struct Stage {
    /// Name (the component it installs).
    pub name: &'static str,
    /// The objects, in apply order.
    pub objects: Vec<Value>,
}

/// The kinds whose rollout a stage waits for.
pub fn is_workload(obj: &Value) -> bool {
    obj["apiVersion"] == "apps/v1" && (obj["kind"] == "Deployment" || obj["kind"] == "DaemonSet")
}

/// Settings of the KubeVirt half taken from the `KubeVirt` object and the certificates.
#[derive(Debug, Clone)]
pub struct KubevirtSettings {
    /// Images.
    pub release: Release,
    /// Upstream's deployment identifier ([`deployment_id`]).
    pub deployment_id: String,
    /// The `caBundle` of virt-api's webhooks and APIService (base64 PEM).
    pub ca_bundle: String,
    /// Digest of the certificate Secrets ([`CERTIFICATES_HASH`]).
    pub certificates_hash: String,
    /// `configuration.network.defaultNetworkInterface` (virt-api's default binding).
    pub default_network_interface: String,
    /// Whether this is an update of a deployed installation (upstream's update path: node agents first, then
    /// controllers, then virt-api) or a first install (virt-api first, so that no VMI escapes its webhooks).
    pub updating: bool,
    /// Placement, replicas and patches from the spec.
    pub customization: Customization,
}

/// Upstream's deployment identifier: the digest of what the installation is made of (version, registry, the
/// settings rendered into the components).
pub fn deployment_id(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex(&h.finalize()[..20])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn parse(stage: &'static str, text: &str) -> Result<Vec<Value>, Error> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| Error::Yaml { stage, message: e.to_string() })?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn with_images(text: &str, release: &Release) -> String {
    IMAGES
        .iter()
        .fold(text.to_owned(), |t, name| t.replace(&format!("kubevirt-rs/{name}:latest"), &release.image(name)))
}

fn crd_values<T: serde::Serialize>(crds: impl IntoIterator<Item = T>) -> Result<Vec<Value>, Error> {
    crds.into_iter().map(|c| serde_json::to_value(c).map_err(|e| Error::Crd(e.to_string()))).collect()
}

fn map<'a>(v: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !v[key].is_object() {
        v[key] = json!({});
    }
    v[key].as_object_mut().unwrap_or_else(|| unreachable!("just made an object"))
}

/// The pod template's containers and init containers of a workload.
fn containers(obj: &mut Value) -> impl Iterator<Item = &mut Value> {
    let spec = &mut obj["spec"]["template"]["spec"];
    let mut all = Vec::new();
    if let Some(o) = spec.as_object_mut() {
        for (k, v) in o.iter_mut() {
            if k == "containers" || k == "initContainers" {
                all.extend(v.as_array_mut().into_iter().flatten());
            }
        }
    }
    all.into_iter()
}

/// Sets environment variable `name` of every container that has it.
fn set_env(obj: &mut Value, name: &str, value: &str) {
    for c in containers(obj) {
        for e in c["env"].as_array_mut().into_iter().flatten() {
            if e["name"] == name && e.get("value").is_some() {
                e["value"] = json!(value);
            }
        }
    }
}

fn mounts_secret(obj: &Value, secrets: &[&str]) -> bool {
    obj["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| v["secret"]["secretName"].as_str().is_some_and(|n| secrets.contains(&n)))
}

/// Labels, annotations and pull policies of one rendered object, then its digest.
struct Finish<'a> {
    labels: &'a [(&'a str, &'a str)],
    annotations: &'a [(&'a str, &'a str)],
    pull_policy: &'a str,
    /// Certificate Secrets whose mounting pods get [`CERTIFICATES_HASH`], and the digest.
    certificates: Option<(&'a [&'a str], &'a str)>,
}

impl Finish<'_> {
    fn apply(&self, mut obj: Value) -> Value {
        let meta = map(&mut obj, "metadata");
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        for (k, v) in self.labels {
            labels[*k] = json!(v);
        }
        let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
        for (k, v) in self.annotations {
            annotations[*k] = json!(v);
        }
        if is_workload(&obj) {
            for c in containers(&mut obj) {
                c["imagePullPolicy"] = json!(self.pull_policy);
            }
            set_env(&mut obj, "PULL_POLICY", self.pull_policy);
            if let Some((_, digest)) = self.certificates.filter(|(s, _)| mounts_secret(&obj, s)) {
                let tmeta = map(&mut obj["spec"]["template"], "metadata");
                let ann = tmeta.entry("annotations").or_insert_with(|| json!({}));
                ann[CERTIFICATES_HASH] = json!(digest);
            }
        }
        let digest = hex(&Sha256::digest(obj.to_string().as_bytes())[..16]);
        obj["metadata"]["annotations"][INSTALL_HASH] = json!(digest);
        obj
    }
}

/// The certificate Secrets of the KubeVirt half (their pods roll when they are renewed).
pub const KUBEVIRT_CERT_SECRETS: &[&str] = &[
    crate::pki::TLS_SECRET,
    contracts::kubevirt::node_api::SERVER_SECRET,
    contracts::kubevirt::node_api::CLIENT_SECRET,
];

/// The placement a workload takes: Deployments are the control plane, DaemonSets run on the nodes.
fn role(obj: &Value) -> Option<Role> {
    match obj["kind"].as_str() {
        Some("Deployment") => Some(Role::Infra),
        Some("DaemonSet") => Some(Role::Workloads),
        _ => None,
    }
}

/// `objects` customized (placement, replicas, patches).
fn customized(c: &Customization, objects: Vec<Value>) -> Result<Vec<Value>, Error> {
    objects
        .into_iter()
        .map(|mut o| {
            let r = role(&o);
            c.apply(&mut o, r).map_err(Error::Customize)?;
            Ok(o)
        })
        .collect()
}

/// Upstream's PodDisruptionBudget `<name>-pdb` of a control-plane Deployment: one pod must stay while it runs two
/// or more; with one replica the budget allows the eviction (a drain is never blocked by it).
fn disruption_budget(deployment: &Value) -> Value {
    let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
    let budget = if deployment["spec"]["replicas"].as_i64().unwrap_or(1) >= 2 {
        json!({"minAvailable": 1})
    } else {
        json!({"maxUnavailable": 1})
    };
    let mut spec = budget;
    spec["selector"] = deployment["spec"]["selector"].clone();
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": format!("{name}-pdb"), "namespace": deployment["metadata"]["namespace"],
                        "labels": {"kubevirt.io": format!("{name}-pdb")}},
           "spec": spec})
}

/// The KubeVirt half in rollout order: `base` (CRDs, cluster roles), then the components (update path: node
/// agents, controller, virt-api; first install: virt-api, controller, node agents). The control-plane
/// Deployments get upstream's PodDisruptionBudgets.
pub fn kubevirt(s: &KubevirtSettings) -> Result<Vec<Stage>, Error> {
    let labels = [(MANAGED_BY, KUBEVIRT_MANAGER), (COMPONENT, "kubevirt")];
    let annotations = [
        (STRATEGY_VERSION, s.release.tag.as_str()),
        (STRATEGY_REGISTRY, s.release.registry.as_str()),
        (STRATEGY_IDENTIFIER, s.deployment_id.as_str()),
    ];
    let finish = Finish {
        labels: &labels,
        annotations: &annotations,
        pull_policy: &s.release.pull_policy,
        certificates: Some((KUBEVIRT_CERT_SECRETS, &s.certificates_hash)),
    };
    let crds = crds::kubevirt::crd::all().map_err(|e| Error::Crd(e.to_string()))?;
    let mut base =
        crd_values(crds.into_iter().filter(|(f, _)| *f != crds::kubevirt::crd::KUBEVIRT_FILE).map(|(_, c)| c))?;
    base.extend(parse("base", KUBEVIRT_RBAC)?);
    let base = customized(&s.customization, base)?;
    let component = |stage: &'static str, text: &str| -> Result<Stage, Error> {
        let text = with_images(text, &s.release).replace(crate::pki::CA_BUNDLE_PLACEHOLDER, &s.ca_bundle);
        let mut objects = parse(stage, &text)?;
        for o in objects.iter_mut().filter(|o| is_workload(o)) {
            set_env(o, "VIRT_API_DEFAULT_NETWORK_INTERFACE", &s.default_network_interface);
        }
        let mut objects = customized(&s.customization, objects)?;
        let budgets: Vec<Value> = objects.iter().filter(|o| o["kind"] == "Deployment").map(disruption_budget).collect();
        objects.extend(customized(&s.customization, budgets)?);
        Ok(Stage { name: stage, objects })
    };
    let handler = component("virt-handler", NODE_AGENT)?;
    let controller = component("virt-controller", VM_CONTROLLER)?;
    let api = component("virt-api", VIRT_API)?;
    let components = if s.updating { [handler, controller, api] } else { [api, controller, handler] };
    Ok(std::iter::once(Stage { name: "base", objects: base })
        .chain(components)
        .map(|st| Stage { name: st.name, objects: st.objects.into_iter().map(|o| finish.apply(o)).collect() })
        .collect())
}

/// The CDI half in rollout order: `base` (namespace, CRDs, the DataVolume admission policy), the DataVolume
/// controller, the token API server, the upload proxy; customized by `c`.
pub fn cdi(release: &Release, c: &Customization) -> Result<Vec<Stage>, Error> {
    let labels = [(MANAGED_BY, CDI_MANAGER), (COMPONENT, "storage"), ("cdi.kubevirt.io", "")];
    let finish = Finish { labels: &labels, annotations: &[], pull_policy: &release.pull_policy, certificates: None };
    let crds = crds::cdi::crd::all().map_err(|e| Error::Crd(e.to_string()))?;
    let mut base = parse("base", CDI_NAMESPACE)?;
    base.extend(crd_values(crds.into_iter().filter(|(f, _)| *f != crds::cdi::crd::CDI_FILE).map(|(_, c)| c))?);
    base.extend(parse("base", DATAVOLUME_POLICY)?);
    let stages = [
        Stage { name: "base", objects: base },
        Stage {
            name: "cdi-deployment",
            objects: parse("cdi-deployment", &with_images(DATAVOLUME_CONTROLLER, release))?,
        },
        Stage { name: "cdi-apiserver", objects: parse("cdi-apiserver", &with_images(CDI_APISERVER, release))? },
        Stage { name: "cdi-uploadproxy", objects: parse("cdi-uploadproxy", &with_images(UPLOADPROXY, release))? },
    ];
    stages
        .into_iter()
        .map(|st| {
            let objects = customized(c, st.objects)?;
            Ok(Stage { name: st.name, objects: objects.into_iter().map(|o| finish.apply(o)).collect() })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(tag: &str) -> Release {
        Release { registry: "reg/kubevirt-rs".into(), tag: tag.into(), pull_policy: "Always".into() }
    }

    fn settings(tag: &str, updating: bool) -> KubevirtSettings {
        KubevirtSettings {
            release: release(tag),
            deployment_id: deployment_id(&[tag]),
            ca_bundle: "Q0E=".into(),
            certificates_hash: "c1".into(),
            default_network_interface: "masquerade".into(),
            updating,
            customization: Customization::default(),
        }
    }

    fn find<'a>(stages: &'a [Stage], kind: &str, name: &str) -> &'a Value {
        stages
            .iter()
            .flat_map(|s| &s.objects)
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    #[test]
    fn kubevirt_renders_images_settings_and_upstreams_metadata() {
        let stages = kubevirt(&settings("v2", false)).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = stages.iter().map(|s| s.name).collect();
        assert_eq!(names, ["base", "virt-api", "virt-controller", "virt-handler"]);
        let all = serde_json::to_string(&stages.iter().map(|s| &s.objects).collect::<Vec<_>>()).unwrap_or_default();
        assert!(!all.contains("\"kubevirt-rs/"), "an image placeholder is left");
        assert!(!all.contains(crate::pki::CA_BUNDLE_PLACEHOLDER));
        assert!(all.contains("Q0E="));
        let ds = find(&stages, "DaemonSet", "virt-handler");
        assert_eq!(ds["spec"]["template"]["spec"]["containers"][0]["image"], "reg/kubevirt-rs/node-agent:v2");
        assert_eq!(ds["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always");
        assert_eq!(ds["spec"]["template"]["metadata"]["annotations"][CERTIFICATES_HASH], "c1");
        assert_eq!(ds["metadata"]["labels"][MANAGED_BY], "virt-operator");
        assert_eq!(ds["metadata"]["annotations"][STRATEGY_VERSION], "v2");
        let ctl = find(&stages, "Deployment", "virt-controller");
        let env = &ctl["spec"]["template"]["spec"]["containers"][0]["env"];
        assert!(env.as_array().into_iter().flatten().any(|e| e["value"] == "reg/kubevirt-rs/virt-launcher:v2"));
        assert!(ctl["spec"]["template"]["metadata"]["annotations"].get(CERTIFICATES_HASH).is_none());
        let api = find(&stages, "Deployment", "virt-api");
        let env = &api["spec"]["template"]["spec"]["containers"][0]["env"];
        assert!(
            env.as_array()
                .into_iter()
                .flatten()
                .any(|e| e["name"] == "VIRT_API_DEFAULT_NETWORK_INTERFACE" && e["value"] == "masquerade")
        );
        // Every object of the base is cluster-wide and none is the operator's own KubeVirt CRD.
        assert!(stages[0].objects.iter().all(|o| o["metadata"]["name"] != "kubevirts.kubevirt.io"));
        assert!(stages[0].objects.iter().any(|o| o["metadata"]["name"] == "virtualmachineinstances.kubevirt.io"));
        let update = kubevirt(&settings("v2", true)).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = update.iter().map(|s| s.name).collect();
        assert_eq!(names, ["base", "virt-handler", "virt-controller", "virt-api"]);
    }

    /// Upstream's PodDisruptionBudgets of virt-api and virt-controller, the spec's placement on the node agents and
    /// replicas on the control plane (which loosens the budget of a single replica), and a refusal as an error.
    #[test]
    fn budgets_placement_and_replicas_are_rendered() {
        let stages = kubevirt(&settings("v1", false)).unwrap_or_else(|e| panic!("{e}"));
        for name in ["virt-api", "virt-controller"] {
            let pdb = find(&stages, "PodDisruptionBudget", &format!("{name}-pdb"));
            assert_eq!(pdb["apiVersion"], "policy/v1");
            assert_eq!(pdb["spec"]["minAvailable"], 1, "{pdb}");
            assert_eq!(pdb["spec"]["selector"], json!({"matchLabels": {"kubevirt.io": name}}));
            assert_eq!(pdb["metadata"]["namespace"], "kubevirt");
        }
        let mut s = settings("v1", false);
        let spec = json!({"infra": {"replicas": 1}, "workloads": {"nodePlacement": {"nodeSelector": {"vms": "yes"}}}});
        s.customization = Customization::kubevirt(&serde_json::from_value(spec).unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
        let custom = kubevirt(&s).unwrap_or_else(|e| panic!("{e}"));
        let ds = find(&custom, "DaemonSet", "virt-handler");
        assert_eq!(ds["spec"]["template"]["spec"]["nodeSelector"]["vms"], "yes");
        assert_ne!(
            ds["metadata"]["annotations"][INSTALL_HASH],
            find(&stages, "DaemonSet", "virt-handler")["metadata"]["annotations"][INSTALL_HASH],
            "a placement change rolls the node agents"
        );
        assert_eq!(find(&custom, "Deployment", "virt-api")["spec"]["replicas"], 1);
        let pdb = find(&custom, "PodDisruptionBudget", "virt-api-pdb");
        assert_eq!((pdb["spec"].get("minAvailable"), &pdb["spec"]["maxUnavailable"]), (None, &json!(1)));
        s.customization.patches = vec![crate::customize::Patch {
            resource_type: "Deployment".into(),
            resource_name: "virt-api".into(),
            patch: json!([{"op": "remove", "path": "/nope"}]),
            kind: crate::customize::PatchType::Json,
        }];
        assert!(matches!(kubevirt(&s), Err(Error::Customize(_))));
    }

    #[test]
    fn the_digest_follows_what_is_rendered() {
        let hash = |s: &KubevirtSettings| {
            let stages = kubevirt(s).unwrap_or_else(|e| panic!("{e}"));
            find(&stages, "DaemonSet", "virt-handler")["metadata"]["annotations"][INSTALL_HASH].clone()
        };
        assert_eq!(hash(&settings("v1", true)), hash(&settings("v1", true)));
        assert_ne!(hash(&settings("v1", true)), hash(&settings("v2", true)));
        let mut renewed = settings("v1", true);
        renewed.certificates_hash = "c2".into();
        assert_ne!(hash(&settings("v1", true)), hash(&renewed));
    }

    #[test]
    fn cdi_renders_its_components_in_order() {
        let stages = cdi(&release("v3"), &Customization::default()).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = stages.iter().map(|s| s.name).collect();
        assert_eq!(names, ["base", "cdi-deployment", "cdi-apiserver", "cdi-uploadproxy"]);
        let ctl = find(&stages, "Deployment", "cdi-deployment");
        let env = &ctl["spec"]["template"]["spec"]["containers"][0]["env"];
        let value = |n: &str| env.as_array().into_iter().flatten().find(|e| e["name"] == n).map(|e| e["value"].clone());
        assert_eq!(value("IMPORTER_IMAGE"), Some(json!("reg/kubevirt-rs/importer:v3")));
        assert_eq!(value("PULL_POLICY"), Some(json!("Always")));
        assert_eq!(ctl["metadata"]["labels"][MANAGED_BY], "cdi-operator");
        assert!(stages[0].objects.iter().any(|o| o["kind"] == "Namespace" && o["metadata"]["name"] == "cdi"));
        assert!(stages[0].objects.iter().all(|o| o["metadata"]["name"] != "cdis.cdi.kubevirt.io"));
        assert!(stages.iter().flat_map(|s| &s.objects).all(|o| o["metadata"]["annotations"][INSTALL_HASH].is_string()));
    }
}
