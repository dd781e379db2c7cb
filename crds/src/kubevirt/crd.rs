//! The CRDs of `kubevirt.io`: VirtualMachineInstance, VirtualMachine, VirtualMachineInstanceReplicaSet and VirtualMachineInstanceMigration, served as `v1` (storage) and `v1alpha3`
//! (deprecated, with upstream's warning), the same schema for both; the VMI has **no status subresource**, the VM
//! has one, the VMIRS status and scale, the VMIM status (contract §0.1). [`files`] is what
//! `crdgen` writes and the drift test compares.
//!
//! The schema is the one the types generate, post-processed here:
//!
//! * the status subresource the `kube` derive adds for a `status` field is removed (the VMI's status is an
//!   ordinary field);
//! * unsigned integer formats (`uint32`, `uint64`), which Kubernetes does not know, become `int64` with the Rust
//!   type's range as `minimum`/`maximum`;
//! * below the fields typed with Kubernetes' own API types (affinity, tolerations, topology spread constraints, DNS
//!   config, probe actions, downward API files) the nested descriptions are dropped — the field's own description
//!   stays. Kubernetes documents those types itself, and with two versions of the full schema the CRD would
//!   otherwise approach the 256 KiB limit of the `last-applied-configuration` annotation that a client-side
//!   `kubectl apply -f deploy/crds/` writes ([`MAX_APPLY_BYTES`] is checked by a test);
//! * the result must be a structural schema ([`crate::crd::check_structural`]) — objects that keep unknown fields
//!   carry `x-kubernetes-preserve-unknown-fields: true` next to their `properties` (see [`super::wire`]), never
//!   `additionalProperties`.
//!
//! No CEL rules: admission (defaulting and upstream's validation messages) is the VMI webhook's job.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

use super::consts::{V1ALPHA3_DEPRECATION, VERSION, VERSION_V1ALPHA3};
use super::migration::VirtualMachineInstanceMigration;
use super::replicaset::VirtualMachineInstanceReplicaSet;
use super::vm::VirtualMachine;
use super::vmi::VirtualMachineInstance;
use crate::crd::{Error, GeneratedFile, check_structural, render};

/// Compact-JSON size a CRD must stay below so that a client-side `kubectl apply` can store it in the
/// `kubectl.kubernetes.io/last-applied-configuration` annotation (Kubernetes caps all annotations at 256 KiB; the
/// rest is headroom).
pub const MAX_APPLY_BYTES: usize = 200 * 1024;

/// Schema paths (relative to `spec`, `[]` = array items) typed with Kubernetes' own API types, whose nested
/// descriptions are dropped.
const KUBERNETES_TYPED: &[&str] = &[
    "affinity",
    "tolerations[]",
    "topologySpreadConstraints[]",
    "dnsConfig",
    "livenessProbe.exec",
    "livenessProbe.httpGet",
    "livenessProbe.tcpSocket",
    "readinessProbe.exec",
    "readinessProbe.httpGet",
    "readinessProbe.tcpSocket",
    "volumes[].downwardAPI.fields[]",
];

/// File name of the VirtualMachineInstance CRD under `deploy/crds/`.
pub const VMI_FILE: &str = "virtualmachineinstance.yaml";
/// File name of the VirtualMachine CRD under `deploy/crds/`.
pub const VM_FILE: &str = "virtualmachine.yaml";
/// File name of the VirtualMachineInstanceReplicaSet CRD under `deploy/crds/`.
pub const VMIRS_FILE: &str = "virtualmachineinstancereplicaset.yaml";

/// File name of the VirtualMachineInstanceMigration CRD under `deploy/crds/`.
pub const VMIM_FILE: &str = "virtualmachineinstancemigration.yaml";

/// Whether a CRD keeps the status subresource its `kube` derive declares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StatusSubresource {
    Keep,
    Drop,
}

/// The VirtualMachineInstance CRD: `v1` served and stored, `v1alpha3` served and deprecated, identical schemas, no
/// subresources.
pub fn virtualmachineinstance() -> Result<CustomResourceDefinition, Error> {
    two_versions(VirtualMachineInstance::crd(), Some("spec"), StatusSubresource::Drop)
}

/// The VirtualMachine CRD: as the VMI's (both versions), with a status subresource; the VMI spec it embeds is
/// `spec.template.spec`.
pub fn virtualmachine() -> Result<CustomResourceDefinition, Error> {
    two_versions(VirtualMachine::crd(), Some("spec.template.spec"), StatusSubresource::Keep)
}

/// The VirtualMachineInstanceReplicaSet CRD: as the VM's, with status and scale subresources.
pub fn virtualmachineinstancereplicaset() -> Result<CustomResourceDefinition, Error> {
    two_versions(VirtualMachineInstanceReplicaSet::crd(), Some("spec.template.spec"), StatusSubresource::Keep)
}

/// The VirtualMachineInstanceMigration CRD: both versions, with a status subresource (upstream's); it embeds no VMI
/// spec.
pub fn virtualmachineinstancemigration() -> Result<CustomResourceDefinition, Error> {
    two_versions(VirtualMachineInstanceMigration::crd(), None, StatusSubresource::Keep)
}

/// Post-processes a derived CRD whose VMI spec (if it embeds one) sits at `vmi_spec` (see the module docs) and serves it as `v1`
/// (storage) and `v1alpha3` (deprecated).
fn two_versions(
    mut crd: CustomResourceDefinition,
    vmi_spec: Option<&str>,
    status: StatusSubresource,
) -> Result<CustomResourceDefinition, Error> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let mut v1 = crd.spec.versions.pop().ok_or_else(|| Error::NotStructural {
        crd: name.clone(),
        path: String::new(),
        message: "no version".into(),
    })?;
    v1.name = VERSION.into();
    v1.served = true;
    v1.storage = true;
    if status == StatusSubresource::Drop {
        v1.subresources = None;
    }
    let root = v1
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .ok_or_else(|| Error::MissingPath { crd: name.clone(), path: "openAPIV3Schema".into() })?;
    normalize_integer_formats(root);
    for path in vmi_spec.map_or(&[][..], |_| KUBERNETES_TYPED) {
        let vmi_spec = vmi_spec.unwrap_or_default();
        let node = schema_at(root, &format!("{vmi_spec}.{path}"))
            .ok_or_else(|| Error::MissingPath { crd: name.clone(), path: format!("{vmi_spec}.{path}") })?;
        for child in node.properties.iter_mut().flat_map(|p| p.values_mut()) {
            strip_descriptions(child);
        }
        if let Some(JSONSchemaPropsOrArray::Schema(items)) = node.items.as_mut() {
            strip_descriptions(items);
        }
    }
    let mut v1alpha3 = v1.clone();
    v1alpha3.name = VERSION_V1ALPHA3.into();
    v1alpha3.storage = false;
    v1alpha3.deprecated = Some(true);
    v1alpha3.deprecation_warning = Some(V1ALPHA3_DEPRECATION.into());
    crd.spec.versions = vec![v1, v1alpha3];
    check_structural(&crd)?;
    Ok(crd)
}

/// File names and CRDs of `instancetype.kubevirt.io` (`v1beta1`, unknown fields preserved).
pub fn instancetypes() -> Result<Vec<(&'static str, CustomResourceDefinition)>, Error> {
    use super::instancetype::{
        VirtualMachineClusterInstancetype, VirtualMachineClusterPreference, VirtualMachineInstancetype,
        VirtualMachinePreference,
    };
    let mut out = vec![
        ("virtualmachineinstancetype.yaml", VirtualMachineInstancetype::crd()),
        ("virtualmachineclusterinstancetype.yaml", VirtualMachineClusterInstancetype::crd()),
        ("virtualmachinepreference.yaml", VirtualMachinePreference::crd()),
        ("virtualmachineclusterpreference.yaml", VirtualMachineClusterPreference::crd()),
    ];
    for (_, crd) in &mut out {
        for v in &mut crd.spec.versions {
            if let Some(root) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
                normalize_integer_formats(root);
            }
        }
        check_structural(crd)?;
    }
    Ok(out)
}

/// File name of the MigrationPolicy CRD under `deploy/crds/`.
pub const MIGRATION_POLICY_FILE: &str = "migrationpolicy.yaml";

/// The MigrationPolicy CRD (`migrations.kubevirt.io/v1alpha1`, cluster-scoped, status subresource, unknown fields
/// preserved).
pub fn migrationpolicy() -> Result<CustomResourceDefinition, Error> {
    single_version(super::migration_policy::MigrationPolicy::crd())
}

/// A derived one-version CRD with its integer formats normalized, checked structural.
fn single_version(mut crd: CustomResourceDefinition) -> Result<CustomResourceDefinition, Error> {
    if let Some(root) =
        crd.spec.versions.first_mut().and_then(|v| v.schema.as_mut()).and_then(|s| s.open_api_v3_schema.as_mut())
    {
        normalize_integer_formats(root);
    }
    check_structural(&crd)?;
    Ok(crd)
}

/// File name of the KubeVirt CRD under `deploy/crds/`.
pub const KUBEVIRT_FILE: &str = "kubevirt.yaml";

/// The KubeVirt CRD: `v1`, with a status subresource (as upstream's), unknown fields preserved.
pub fn kubevirt() -> Result<CustomResourceDefinition, Error> {
    single_version(super::config::KubeVirt::crd())
}

/// Every `kubevirt.io` CRD, in apply order, with the file name `crdgen` writes it to.
pub fn all() -> Result<Vec<(&'static str, CustomResourceDefinition)>, Error> {
    Ok([
        (VMI_FILE, virtualmachineinstance()?),
        (VM_FILE, virtualmachine()?),
        (VMIRS_FILE, virtualmachineinstancereplicaset()?),
        (VMIM_FILE, virtualmachineinstancemigration()?),
        (MIGRATION_POLICY_FILE, migrationpolicy()?),
        (KUBEVIRT_FILE, kubevirt()?),
    ]
    .into_iter()
    .chain(instancetypes()?)
    .collect())
}

/// The generated files of this group.
pub fn files() -> Result<Vec<GeneratedFile>, Error> {
    all()?.into_iter().map(|(file, crd)| Ok((file, render(&crd)?))).collect()
}

/// The schema node at a dotted `path` (`[]` steps into array items).
fn schema_at<'a>(root: &'a mut JSONSchemaProps, path: &str) -> Option<&'a mut JSONSchemaProps> {
    let mut cur = root;
    for part in path.split('.') {
        let (key, items) = match part.strip_suffix("[]") {
            Some(key) => (key, true),
            None => (part, false),
        };
        cur = cur.properties.as_mut()?.get_mut(key)?;
        if items {
            cur = match cur.items.as_mut()? {
                JSONSchemaPropsOrArray::Schema(s) => s,
                JSONSchemaPropsOrArray::Schemas(_) => return None,
            };
        }
    }
    Some(cur)
}

/// Removes `description` from `schema` and everything below it.
fn strip_descriptions(schema: &mut JSONSchemaProps) {
    schema.description = None;
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        strip_descriptions(child);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = schema.additional_properties.as_mut() {
        strip_descriptions(child);
    }
    if let Some(JSONSchemaPropsOrArray::Schema(child)) = schema.items.as_mut() {
        strip_descriptions(child);
    }
}

/// Rewrites `format: uint32`/`uint64` (schemars' names for Rust's unsigned integers, unknown to Kubernetes) to
/// `int64` bounded by the type's range, in the whole schema.
fn normalize_integer_formats(schema: &mut JSONSchemaProps) {
    match schema.format.as_deref() {
        Some("uint32" | "uint16" | "uint8") => {
            let max = match schema.format.as_deref() {
                Some("uint8") => f64::from(u8::MAX),
                Some("uint16") => f64::from(u16::MAX),
                _ => f64::from(u32::MAX),
            };
            schema.format = Some("int64".into());
            schema.minimum.get_or_insert(0.0);
            schema.maximum.get_or_insert(max);
        }
        Some("uint64" | "uint") => {
            schema.format = Some("int64".into());
            schema.minimum.get_or_insert(0.0);
        }
        _ => {}
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        normalize_integer_formats(child);
    }
    if let Some(JSONSchemaPropsOrBool::Schema(child)) = schema.additional_properties.as_mut() {
        normalize_integer_formats(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(child)) => normalize_integer_formats(child),
        Some(JSONSchemaPropsOrArray::Schemas(children)) => children.iter_mut().for_each(normalize_integer_formats),
        None => {}
    }
    for junctor in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        junctor.iter_mut().flatten().for_each(normalize_integer_formats);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;

    use super::*;

    fn int(format: &str) -> JSONSchemaProps {
        JSONSchemaProps { type_: Some("integer".into()), format: Some(format.into()), ..Default::default() }
    }

    #[test]
    fn unsigned_formats_become_bounded_int64_everywhere() {
        let mut root = JSONSchemaProps {
            type_: Some("object".into()),
            properties: Some(
                [
                    ("a".to_owned(), int("uint32")),
                    ("b".to_owned(), int("int32")),
                    (
                        "c".to_owned(),
                        JSONSchemaProps {
                            type_: Some("array".into()),
                            items: Some(JSONSchemaPropsOrArray::Schema(Box::new(int("uint64")))),
                            ..Default::default()
                        },
                    ),
                ]
                .into(),
            ),
            ..Default::default()
        };
        normalize_integer_formats(&mut root);
        let props = root.properties.as_ref().unwrap_or_else(|| panic!("properties"));
        let a = &props["a"];
        assert_eq!((a.format.as_deref(), a.minimum, a.maximum), (Some("int64"), Some(0.0), Some(4_294_967_295.0)));
        assert_eq!(props["b"].format.as_deref(), Some("int32"));
        let Some(JSONSchemaPropsOrArray::Schema(c)) = &props["c"].items else { panic!("items") };
        assert_eq!((c.format.as_deref(), c.minimum, c.maximum), (Some("int64"), Some(0.0), None));
    }

    #[test]
    fn kubernetes_typed_subtrees_keep_only_their_own_description() {
        let crd = virtualmachineinstance().unwrap_or_else(|e| panic!("{e}"));
        let mut root =
            crd.spec.versions[0].schema.clone().and_then(|s| s.open_api_v3_schema).unwrap_or_else(|| panic!("schema"));
        let affinity = schema_at(&mut root, "spec.affinity").unwrap_or_else(|| panic!("affinity"));
        assert!(affinity.description.is_some());
        let node_affinity = schema_at(affinity, "nodeAffinity").unwrap_or_else(|| panic!("nodeAffinity"));
        assert!(node_affinity.description.is_none());
        let disks = schema_at(&mut root, "spec.domain.devices.disks[].bootOrder").unwrap_or_else(|| panic!("disks"));
        assert!(disks.description.is_some(), "our own types keep their descriptions");
    }
}
