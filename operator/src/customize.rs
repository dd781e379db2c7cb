//! What a `KubeVirt` or `CDI` object's spec changes in the rendered components, as upstream's operators do:
//!
//! | `KubeVirt` | `CDI` | rendered into |
//! | --- | --- | --- |
//! | `infra.nodePlacement{nodeSelector, affinity, tolerations}` | `infra{nodeSelector, affinity, tolerations}` | the control-plane Deployments' pod templates |
//! | `workloads.nodePlacement{…}` | `workloads{…}` (typed: `crds::cdi::operator::NodePlacement`) | the node agent DaemonSet's pod template; CDI's: every importer, upload-server and clone-source pod, set by the DataVolume controller |
//! | `infra.replicas` | `infra.{deploymentReplicas, apiServerReplicas, uploadProxyReplicas}` | those Deployments' `replicas` |
//! | `customizeComponents.patches[]{resourceType, resourceName, patch, type}` | the same | the named objects, last |
//!
//! A node selector's keys are added to the component's own, tolerations appended, an affinity replaces. Patch
//! `type` is `json` (RFC 6902), `merge` (RFC 7386) or `strategic`; `resourceName: "*"` names every object of the
//! type. The strategic merge here is Kubernetes' for what component manifests hold: objects merge key by key,
//! `null` deletes, and lists whose items all carry a `name` (containers, env, volumes, volumeMounts, ports) merge
//! item by item by name; other lists are replaced. `customizeComponents.flags` (upstream's command-line flags of
//! its Go components) has no counterpart here and is refused by name, as is anything that does not parse.
//! [`Customization::apply`] is pure (table-tested); the reconcilers report a refusal as the object's failure.

use serde_json::{Map, Value, json};

/// Which placement a component takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Control plane (`infra`).
    Infra,
    /// Node components (`workloads`).
    Workloads,
}

/// `nodeSelector`, `affinity`, `tolerations` (upstream's `NodePlacement`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePlacement {
    /// Added to the pod template's node selector.
    pub node_selector: Map<String, Value>,
    /// Replaces the pod template's affinity.
    pub affinity: Option<Value>,
    /// Appended to the pod template's tolerations.
    pub tolerations: Vec<Value>,
}

/// How a patch is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902.
    Json,
    /// RFC 7386.
    Merge,
    /// Kubernetes' strategic merge (see the module's doc).
    Strategic,
}

/// One `customizeComponents.patches[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Patch {
    /// The object kind (`Deployment`, `DaemonSet`, `Service`, …).
    pub resource_type: String,
    /// The object name, `*` for all of the kind.
    pub resource_name: String,
    /// The patch document, parsed.
    pub patch: Value,
    /// How it is applied.
    pub kind: PatchType,
}

/// Everything a spec changes in the rendered components.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Customization {
    /// Control-plane placement.
    pub infra: Option<NodePlacement>,
    /// Node-component placement.
    pub workloads: Option<NodePlacement>,
    /// Replicas of control-plane Deployments by name (`*`: all of them).
    pub replicas: Vec<(String, i64)>,
    /// Patches, applied in order after everything else.
    pub patches: Vec<Patch>,
}

/// The replica fields of the CDI object's `infra`, and the Deployment each sets.
const CDI_REPLICAS: &[(&str, &str)] = &[
    ("deploymentReplicas", "cdi-deployment"),
    ("apiServerReplicas", "cdi-apiserver"),
    ("uploadProxyReplicas", "cdi-uploadproxy"),
];

impl Customization {
    /// From a `KubeVirt` object's spec (its fields this crate's type does not name).
    pub fn kubevirt(spec_extra: &crds::kubevirt::wire::Extra) -> Result<Customization, String> {
        let infra = spec_extra.get("infra");
        let mut c = Customization {
            infra: infra.map(|i| placement("spec.infra.nodePlacement", &i["nodePlacement"])).transpose()?,
            workloads: spec_extra
                .get("workloads")
                .map(|w| placement("spec.workloads.nodePlacement", &w["nodePlacement"]))
                .transpose()?,
            ..Customization::default()
        };
        if let Some(r) = infra.map(|i| &i["replicas"]).filter(|r| !r.is_null()) {
            c.replicas.push(("*".into(), replicas("spec.infra.replicas", r)?));
        }
        c.patches = patches(spec_extra.get("customizeComponents"))?;
        Ok(c)
    }

    /// From a `CDI` object's spec.
    pub fn cdi(spec_extra: &crds::kubevirt::wire::Extra) -> Result<Customization, String> {
        let infra = spec_extra.get("infra");
        let mut c =
            Customization { infra: infra.map(|i| placement("spec.infra", i)).transpose()?, ..Customization::default() };
        for (field, deployment) in CDI_REPLICAS {
            if let Some(r) = infra.map(|i| &i[*field]).filter(|r| !r.is_null()) {
                c.replicas.push(((*deployment).into(), replicas(&format!("spec.infra.{field}"), r)?));
            }
        }
        c.patches = patches(spec_extra.get("customizeComponents"))?;
        Ok(c)
    }

    /// The replicas `deployment` (a control-plane Deployment) runs: the spec's, else `default`.
    pub fn replicas_of(&self, deployment: &str, default: i64) -> i64 {
        self.replicas.iter().rev().find(|(n, _)| n == deployment || n == "*").map_or(default, |(_, r)| *r)
    }

    /// Applies the placement of `role` and the replicas (workloads only), then every patch naming `obj`.
    pub fn apply(&self, obj: &mut Value, role: Option<Role>) -> Result<(), String> {
        let placement = match role {
            Some(Role::Infra) => self.infra.as_ref(),
            Some(Role::Workloads) => self.workloads.as_ref(),
            None => None,
        };
        if let Some(p) = placement {
            let spec = &mut obj["spec"]["template"]["spec"];
            if !p.node_selector.is_empty() {
                let selector = spec["nodeSelector"].as_object().cloned().unwrap_or_default();
                spec["nodeSelector"] = Value::Object(selector.into_iter().chain(p.node_selector.clone()).collect());
            }
            if let Some(a) = &p.affinity {
                spec["affinity"] = a.clone();
            }
            if !p.tolerations.is_empty() {
                let mut t = spec["tolerations"].as_array().cloned().unwrap_or_default();
                t.extend(p.tolerations.iter().cloned());
                spec["tolerations"] = Value::Array(t);
            }
        }
        if role == Some(Role::Infra) && obj["kind"] == "Deployment" {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_owned();
            let default = obj["spec"]["replicas"].as_i64().unwrap_or(1);
            obj["spec"]["replicas"] = json!(self.replicas_of(&name, default));
        }
        for p in &self.patches {
            let named = obj["kind"] == p.resource_type.as_str()
                && (p.resource_name == "*" || obj["metadata"]["name"] == p.resource_name.as_str());
            if !named {
                continue;
            }
            let what = || format!("customizeComponents patch of {} {}", p.resource_type, p.resource_name);
            match p.kind {
                PatchType::Json => {
                    let patch: json_patch::Patch =
                        serde_json::from_value(p.patch.clone()).map_err(|e| format!("{}: {e}", what()))?;
                    json_patch::patch(obj, &patch).map_err(|e| format!("{}: {e}", what()))?;
                }
                PatchType::Merge => json_patch::merge(obj, &p.patch),
                PatchType::Strategic => strategic_merge(obj, &p.patch),
            }
        }
        Ok(())
    }
}

fn placement(field: &str, v: &Value) -> Result<NodePlacement, String> {
    if v.is_null() {
        return Ok(NodePlacement::default());
    }
    let bad = |what: &str| format!("{field}.{what} is not valid");
    let node_selector = match &v["nodeSelector"] {
        Value::Null => Map::new(),
        Value::Object(m) if m.values().all(Value::is_string) => m.clone(),
        _ => return Err(bad("nodeSelector")),
    };
    let affinity = match &v["affinity"] {
        Value::Null => None,
        a @ Value::Object(_) => Some(a.clone()),
        _ => return Err(bad("affinity")),
    };
    let tolerations = match &v["tolerations"] {
        Value::Null => Vec::new(),
        Value::Array(t) if t.iter().all(Value::is_object) => t.clone(),
        _ => return Err(bad("tolerations")),
    };
    Ok(NodePlacement { node_selector, affinity, tolerations })
}

fn replicas(field: &str, v: &Value) -> Result<i64, String> {
    v.as_i64().filter(|r| (1..=255).contains(r)).ok_or_else(|| format!("{field} must be a number from 1 to 255"))
}

fn patches(customize: Option<&Value>) -> Result<Vec<Patch>, String> {
    let Some(c) = customize else { return Ok(Vec::new()) };
    if c["flags"].as_object().is_some_and(|f| !f.is_empty()) {
        return Err(String::from(
            "spec.customizeComponents.flags is not supported: these components take no upstream command-line flags",
        ));
    }
    let mut out = Vec::new();
    for (i, p) in c["patches"].as_array().into_iter().flatten().enumerate() {
        let field = |f: &str| format!("spec.customizeComponents.patches[{i}].{f}");
        let text = |f: &str| p[f].as_str().filter(|s| !s.is_empty()).ok_or_else(|| format!("{} is required", field(f)));
        let kind = match text("type")? {
            "json" => PatchType::Json,
            "merge" => PatchType::Merge,
            "strategic" => PatchType::Strategic,
            other => return Err(format!("{} {other:?} is not json, merge or strategic", field("type"))),
        };
        let patch: Value =
            serde_json::from_str(text("patch")?).map_err(|e| format!("{} is not JSON: {e}", field("patch")))?;
        let shape_ok = if kind == PatchType::Json { patch.is_array() } else { patch.is_object() };
        if !shape_ok {
            return Err(format!("{} is not a {} patch", field("patch"), text("type")?));
        }
        out.push(Patch {
            resource_type: text("resourceType")?.to_owned(),
            resource_name: text("resourceName")?.to_owned(),
            patch,
            kind,
        });
    }
    Ok(out)
}

/// Kubernetes' strategic merge for component manifests (see the module's doc).
fn strategic_merge(target: &mut Value, patch: &Value) {
    let (Value::Object(t), Value::Object(p)) = (&mut *target, patch) else {
        *target = patch.clone();
        return;
    };
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        match v {
            Value::Null => {
                t.remove(k);
            }
            Value::Array(items) if by_name(items) && t.get(k).and_then(Value::as_array).is_some_and(|a| by_name(a)) => {
                let Some(Value::Array(current)) = t.get_mut(k) else { continue };
                for item in items {
                    match current.iter_mut().find(|c| c["name"] == item["name"]) {
                        Some(c) => strategic_merge(c, item),
                        None => current.push(item.clone()),
                    }
                }
            }
            Value::Object(_) => strategic_merge(t.entry(k.clone()).or_insert_with(|| json!({})), v),
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

/// Every item an object with a string `name`.
fn by_name(items: &[Value]) -> bool {
    items.iter().all(|i| i["name"].is_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extra(v: Value) -> crds::kubevirt::wire::Extra {
        serde_json::from_value(v).unwrap_or_default()
    }

    fn deployment(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
               "spec": {"replicas": 2, "template": {"spec": {
                   "nodeSelector": {"kubernetes.io/os": "linux"},
                   "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "1"}]}]}}}})
    }

    #[test]
    fn placement_and_replicas_go_to_their_components() -> Result<(), String> {
        let c = Customization::kubevirt(&extra(json!({
            "infra": {"nodePlacement": {"nodeSelector": {"infra": "yes"}, "tolerations": [{"key": "k", "operator": "Exists"}],
                      "affinity": {"nodeAffinity": {}}}, "replicas": 3},
            "workloads": {"nodePlacement": {"nodeSelector": {"node": "vm"}}}
        })))?;
        let mut api = deployment("virt-api");
        c.apply(&mut api, Some(Role::Infra))?;
        let spec = &api["spec"]["template"]["spec"];
        assert_eq!(spec["nodeSelector"], json!({"kubernetes.io/os": "linux", "infra": "yes"}));
        assert_eq!(spec["tolerations"], json!([{"key": "k", "operator": "Exists"}]));
        assert_eq!(spec["affinity"], json!({"nodeAffinity": {}}));
        assert_eq!(api["spec"]["replicas"], 3);
        let mut handler =
            json!({"kind": "DaemonSet", "metadata": {"name": "virt-handler"}, "spec": {"template": {"spec": {}}}});
        c.apply(&mut handler, Some(Role::Workloads))?;
        assert_eq!(handler["spec"]["template"]["spec"], json!({"nodeSelector": {"node": "vm"}}));
        // CDI: the placement is inline, replicas per Deployment.
        let c = Customization::cdi(&extra(json!({"infra": {"nodeSelector": {"x": "y"}, "apiServerReplicas": 2}})))?;
        let mut apiserver = deployment("cdi-apiserver");
        apiserver["spec"]["replicas"] = json!(1);
        c.apply(&mut apiserver, Some(Role::Infra))?;
        assert_eq!((apiserver["spec"]["replicas"].as_i64(), c.replicas_of("cdi-deployment", 2)), (Some(2), 2));
        assert_eq!(apiserver["spec"]["template"]["spec"]["nodeSelector"]["x"], "y");
        Ok(())
    }

    /// Upstream's documented examples: a JSON patch removing a probe, a strategic merge adding an annotation and
    /// an env var to a container by name, a merge patch; `*` names every object of the kind.
    #[test]
    fn patches_of_every_type() -> Result<(), String> {
        let patch = |t: &str, name: &str, p: Value| json!({"resourceType": "Deployment", "resourceName": name, "type": t, "patch": p.to_string()});
        let c = Customization::kubevirt(&extra(json!({"customizeComponents": {"patches": [
            patch("json", "virt-controller", json!([{"op": "remove", "path": "/spec/template/spec/containers/0/env"}])),
            patch("strategic", "virt-api", json!({"metadata": {"annotations": {"patched": "true"}},
                "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "2"}, {"name": "A", "value": "9"}]}]}}}})),
            patch("merge", "*", json!({"metadata": {"labels": {"all": "yes"}}})),
        ]}})))?;
        let mut controller = deployment("virt-controller");
        c.apply(&mut controller, None)?;
        assert_eq!(controller["spec"]["template"]["spec"]["containers"][0].get("env"), None);
        assert_eq!(controller["metadata"]["labels"]["all"], "yes");
        let mut api = deployment("virt-api");
        c.apply(&mut api, None)?;
        assert_eq!(api["metadata"]["annotations"]["patched"], "true");
        let container = &api["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["env"], json!([{"name": "A", "value": "9"}, {"name": "B", "value": "2"}]));
        assert_eq!(container["image"], "i", "the rest of the container stays");
        let mut service = json!({"kind": "Service", "metadata": {"name": "virt-api"}});
        c.apply(&mut service, None)?;
        assert_eq!(service, json!({"kind": "Service", "metadata": {"name": "virt-api"}}), "another kind is untouched");
        Ok(())
    }

    #[test]
    fn what_cannot_be_applied_is_refused_by_name() {
        let refused = |v: Value| Customization::kubevirt(&extra(v)).err().unwrap_or_default();
        let p = |fields: Value| json!({"customizeComponents": {"patches": [fields]}});
        for (spec, want) in [
            (
                json!({"customizeComponents": {"flags": {"api": {"v": "4"}}}}),
                "spec.customizeComponents.flags is not supported: these components take no upstream command-line flags",
            ),
            (
                p(json!({"resourceType": "Deployment", "resourceName": "x", "type": "yaml", "patch": "{}"})),
                "spec.customizeComponents.patches[0].type \"yaml\" is not json, merge or strategic",
            ),
            (
                p(json!({"resourceType": "Deployment", "resourceName": "x", "type": "json", "patch": "{}"})),
                "spec.customizeComponents.patches[0].patch is not a json patch",
            ),
            (
                p(json!({"resourceType": "Deployment", "type": "merge", "patch": "{}"})),
                "spec.customizeComponents.patches[0].resourceName is required",
            ),
            (json!({"infra": {"replicas": 0}}), "spec.infra.replicas must be a number from 1 to 255"),
            (
                json!({"workloads": {"nodePlacement": {"nodeSelector": {"a": 1}}}}),
                "spec.workloads.nodePlacement.nodeSelector is not valid",
            ),
        ] {
            assert_eq!(refused(spec.clone()), want, "{spec}");
        }
        let c = Customization::kubevirt(&extra(p(
            json!({"resourceType": "Deployment", "resourceName": "d", "type": "json",
                   "patch": "[{\"op\": \"remove\", \"path\": \"/nope\"}]"}),
        )))
        .unwrap_or_default();
        let e = c.apply(&mut deployment("d"), None).err().unwrap_or_default();
        assert!(e.starts_with("customizeComponents patch of Deployment d: "), "{e}");
    }
}
