//! CRD rendering for every API group this project serves: the CRDs (with upstream's webhook validation expressed as
//! CEL rules, see [`crate::cdi::crd`]) and the admission policies, as the YAML files `crdgen` writes to
//! `deploy/crds/`. Each group contributes its files ([`crate::cdi::crd::files`], [`crate::kubevirt::crd::files`]);
//! [`render_all`] is the union, in apply order.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, ValidationRule,
};

/// Errors building or rendering the CRDs.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A schema path the rules attach to is missing (the types changed).
    #[error("CRD {crd}: schema has no property path {path}")]
    MissingPath {
        /// CRD name.
        crd: String,
        /// Dotted property path.
        path: String,
    },
    /// A schema is not structural: the API server would refuse the CRD.
    #[error("CRD {crd}: schema is not structural at {path}: {message}")]
    NotStructural {
        /// CRD name.
        crd: String,
        /// Dotted schema path (`spec.domain.devices`, `[]` for array items).
        path: String,
        /// The rule broken.
        message: String,
    },
    /// YAML serialisation failed.
    #[error("rendering CRD {crd} as YAML: {message}")]
    Yaml {
        /// CRD name.
        crd: String,
        /// The serialiser's message.
        message: String,
    },
}

/// One generated file: its name under `deploy/crds/` and its YAML text.
pub type GeneratedFile = (&'static str, String);

/// A CEL rule with either a fixed message or a message expression.
pub(crate) struct Cel {
    pub(crate) rule: &'static str,
    pub(crate) message: Msg,
}

/// The message of a [`Cel`] rule.
pub(crate) enum Msg {
    /// A literal message.
    Fixed(&'static str),
    /// A CEL message expression.
    Expr(&'static str),
}

/// A rule with a literal message.
pub(crate) const fn fixed(rule: &'static str, message: &'static str) -> Cel {
    Cel { rule, message: Msg::Fixed(message) }
}

/// A rule with a message expression.
pub(crate) const fn expr(rule: &'static str, message_expression: &'static str) -> Cel {
    Cel { rule, message: Msg::Expr(message_expression) }
}

/// CEL rule strings are built once per process from static parts; leaking them keeps the rule tables `'static`.
pub(crate) fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// The schema form of a [`Cel`] rule.
pub(crate) fn to_rule(c: Cel) -> ValidationRule {
    let (message, message_expression) = match c.message {
        Msg::Fixed(m) => (Some(m.to_owned()), None),
        Msg::Expr(e) => (None, Some(e.to_owned())),
    };
    ValidationRule { rule: c.rule.to_owned(), message, message_expression, ..Default::default() }
}

fn property<'a>(root: &'a mut JSONSchemaProps, path: &str, crd: &str) -> Result<&'a mut JSONSchemaProps, Error> {
    let mut cur = root;
    for part in path.split('.').filter(|p| !p.is_empty()) {
        cur = cur
            .properties
            .as_mut()
            .and_then(|p| p.get_mut(part))
            .ok_or_else(|| Error::MissingPath { crd: crd.to_owned(), path: path.to_owned() })?;
    }
    Ok(cur)
}

/// Attaches `rules` (keyed by a dotted path relative to `spec`; empty = `spec` itself) to every version's schema.
pub(crate) fn add_spec_validations(
    crd: &mut CustomResourceDefinition,
    rules: impl Fn() -> Vec<(&'static str, Vec<ValidationRule>)>,
) -> Result<(), Error> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    for version in &mut crd.spec.versions {
        let root = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .ok_or_else(|| Error::MissingPath { crd: name.clone(), path: "openAPIV3Schema".into() })?;
        let spec = property(root, "spec", &name)?;
        for (path, rules) in rules() {
            let target = property(spec, path, &name)?;
            target.x_kubernetes_validations.get_or_insert_with(Vec::new).extend(rules);
        }
    }
    Ok(())
}

/// Checks that every version's schema of `crd` is *structural*, as kube-apiserver requires of `apiextensions.k8s.io/v1`
/// CRDs: every property and array item has a `type` (unless it is `x-kubernetes-int-or-string` or
/// `x-kubernetes-preserve-unknown-fields`), `properties` and `additionalProperties` are never combined, arrays have one
/// `items` schema, no `$ref`/`definitions`/`additionalItems`/`uniqueItems: true`, `x-kubernetes-preserve-unknown-fields`
/// is only ever `true`, the logical junctors (`allOf`, `anyOf`, `oneOf`, `not`) set no `type`, `description`,
/// `default`, `additionalProperties` or `nullable` and name only properties also specified outside them, and `metadata`
/// restricts at most `name` and `generateName`.
pub fn check_structural(crd: &CustomResourceDefinition) -> Result<(), Error> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    for version in &crd.spec.versions {
        let root = version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref()).ok_or_else(|| {
            Error::NotStructural { crd: name.clone(), path: version.name.clone(), message: "no schema".into() }
        })?;
        let fail = |path: &str, message: &str| Error::NotStructural {
            crd: name.clone(),
            path: format!("{}:{path}", version.name),
            message: message.to_owned(),
        };
        structural_node(root, "", &fail)?;
        if let Some(meta) = root.properties.as_ref().and_then(|p| p.get("metadata")) {
            let extra = meta.properties.iter().flat_map(|p| p.keys()).find(|k| *k != "name" && *k != "generateName");
            if let Some(k) = extra {
                return Err(fail("metadata", &format!("metadata may only restrict name and generateName, not {k}")));
            }
        }
    }
    Ok(())
}

fn structural_node(s: &JSONSchemaProps, path: &str, fail: &dyn Fn(&str, &str) -> Error) -> Result<(), Error> {
    let at = if path.is_empty() { "<root>" } else { path };
    let int_or_string = s.x_kubernetes_int_or_string == Some(true);
    let preserve = s.x_kubernetes_preserve_unknown_fields == Some(true);
    if s.ref_path.is_some() || s.definitions.is_some() {
        return Err(fail(at, "$ref/definitions are not allowed"));
    }
    if s.additional_items.is_some() || s.unique_items == Some(true) {
        return Err(fail(at, "additionalItems and uniqueItems: true are not allowed"));
    }
    if s.x_kubernetes_preserve_unknown_fields == Some(false) {
        return Err(fail(at, "x-kubernetes-preserve-unknown-fields must be true or absent"));
    }
    match s.type_.as_deref() {
        None | Some("") if !int_or_string && !preserve => return Err(fail(at, "no type")),
        Some(t) if !t.is_empty() && int_or_string => {
            return Err(fail(at, "x-kubernetes-int-or-string must not have a type"));
        }
        Some(t) if preserve && !t.is_empty() && t != "object" => {
            return Err(fail(at, "x-kubernetes-preserve-unknown-fields on a non-object"));
        }
        _ => {}
    }
    let has_properties = s.properties.as_ref().is_some_and(|p| !p.is_empty());
    if has_properties && s.additional_properties.is_some() {
        return Err(fail(at, "properties and additionalProperties are mutually exclusive"));
    }
    for (key, child) in s.properties.iter().flatten() {
        structural_node(child, &join(path, key), fail)?;
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = &s.additional_properties {
        structural_node(child, &join(path, "*"), fail)?;
    }
    match &s.items {
        Some(JSONSchemaPropsOrArray::Schema(child)) => structural_node(child, &format!("{path}[]"), fail)?,
        Some(JSONSchemaPropsOrArray::Schemas(_)) => return Err(fail(at, "items must be a single schema")),
        None if s.type_.as_deref() == Some("array") => return Err(fail(at, "array without items")),
        None => {}
    }
    let junctors = [&s.all_of, &s.any_of, &s.one_of].into_iter().flatten().flatten().chain(s.not.as_deref());
    for j in junctors {
        if j.type_.is_some() || j.description.is_some() || j.default.is_some() || j.nullable.is_some() {
            return Err(fail(at, "type, description, default or nullable inside allOf/anyOf/oneOf/not"));
        }
        if j.additional_properties.is_some() {
            return Err(fail(at, "additionalProperties inside allOf/anyOf/oneOf/not"));
        }
        for key in j.properties.iter().flat_map(|p| p.keys()) {
            if !s.properties.as_ref().is_some_and(|p| p.contains_key(key)) {
                return Err(fail(at, &format!("{key} is specified only inside allOf/anyOf/oneOf/not")));
            }
        }
    }
    Ok(())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

/// The YAML text of one CRD, with a header naming the generator.
pub fn render(crd: &CustomResourceDefinition) -> Result<String, Error> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    render_objects(&name, &[crd])
}

/// YAML documents of `objects` (separated by `---`) behind the generator header; `name` names them in errors.
pub(crate) fn render_objects(name: &str, objects: &[&dyn erased::Yaml]) -> Result<String, Error> {
    let mut out = String::from(HEADER);
    for (i, o) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&o.yaml().map_err(|message| Error::Yaml { crd: name.to_owned(), message })?);
    }
    Ok(out)
}

/// Every generated file of every API group, in apply order.
pub fn render_all() -> Result<Vec<GeneratedFile>, Error> {
    let mut out = crate::cdi::crd::files()?;
    out.extend(crate::kubevirt::crd::files()?);
    Ok(out)
}

const HEADER: &str = "# Generated by `cargo run -p crds --bin crdgen` from crds/src; do not edit.\n";

pub(crate) mod erased {
    /// Object-safe YAML rendering, so objects of different types share one file.
    pub trait Yaml {
        /// The object as YAML.
        fn yaml(&self) -> Result<String, String>;
    }
    impl<T: serde::Serialize> Yaml for T {
        fn yaml(&self) -> Result<String, String> {
            serde_saphyr::to_string(self).map_err(|e| e.to_string())
        }
    }
}
