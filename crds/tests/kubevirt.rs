//! `kubevirt.io` VirtualMachineInstance: upstream's example manifests round-trip through the types unchanged and
//! validate against the generated schema with every field typed; unknown fields survive at any depth; the CRD has
//! §0.1's names, columns and versions and is structural.
//!
//! The examples are upstream's `examples/` (`../shared/upstream-examples/kubevirt/` beside the checkout, found as
//! the cluster tests find it); missing examples fail the tests.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crds::kubevirt::crd::{MAX_APPLY_BYTES, VMI_FILE};
use crds::kubevirt::domain::{DiskBus, DomainSpec, InterfaceModel};
use crds::kubevirt::{
    ConditionStatus, VirtualMachineInstance, VirtualMachineInstanceConditionType, VirtualMachineInstancePhase,
    VirtualMachineInstanceSpec, VirtualMachineInstanceStatus,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// `$KUBEVIRT_RS_SHARED`, else `<repo>/../shared`, else `../shared` beside the checkout this one was cloned from.
fn shared_dir() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut tried: Vec<PathBuf> = std::env::var_os("KUBEVIRT_RS_SHARED").map(PathBuf::from).into_iter().collect();
    tried.push(root.join("../shared"));
    let origin =
        std::process::Command::new("git").arg("-C").arg(&root).args(["config", "--get", "remote.origin.url"]).output();
    if let Ok(o) = origin
        && o.status.success()
    {
        let url = String::from_utf8_lossy(&o.stdout).trim().to_owned();
        tried.push(PathBuf::from(url.strip_prefix("file://").unwrap_or(&url)).join("../shared"));
    }
    tried.iter().find(|d| d.is_dir()).cloned().unwrap_or_else(|| panic!("no shared directory among {tried:?}"))
}

fn examples_dir() -> PathBuf {
    shared_dir().join("upstream-examples/kubevirt")
}

/// The example files whose name starts with `prefix`, sorted.
fn example_files(prefix: &str) -> Vec<PathBuf> {
    let dir = examples_dir();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix) && n.ends_with(".yaml"))
        })
        .collect();
    files.sort();
    files
}

/// Every YAML document of `path` as JSON.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

/// `value` → `T` → JSON must give `value` back exactly (nothing lost, nothing added).
fn round_trip<T: DeserializeOwned + Serialize>(value: &Value, what: &str) -> T {
    let typed: T = serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{what}: does not parse: {e}"));
    let back = serde_json::to_value(&typed).unwrap_or_else(|e| panic!("{what}: does not serialise: {e}"));
    if &back != value {
        panic!(
            "{what}: round trip differs\n input: {}\noutput: {}",
            serde_json::to_string_pretty(value).unwrap_or_default(),
            serde_json::to_string_pretty(&back).unwrap_or_default()
        );
    }
    typed
}

fn pointer<'a>(doc: &'a Value, ptr: &str, what: &str) -> &'a Value {
    doc.pointer(ptr).unwrap_or_else(|| panic!("{what}: no {ptr}"))
}

fn vmi_crd() -> CustomResourceDefinition {
    crds::kubevirt::crd::virtualmachineinstance().unwrap_or_else(|e| panic!("{e}"))
}

fn v1_schema(crd: &CustomResourceDefinition) -> &JSONSchemaProps {
    crd.spec
        .versions
        .iter()
        .find(|v| v.name == "v1")
        .and_then(|v| v.schema.as_ref())
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .unwrap_or_else(|| panic!("no v1 schema"))
}

/// Validates `value` against `schema` as far as types, required fields and enum-free structure go, and records every
/// object key the schema does not list (a field carried only in an `extra` map) in `untyped`.
fn check_against_schema(schema: &JSONSchemaProps, value: &Value, path: &str, untyped: &mut BTreeSet<String>) {
    let root = schema.properties.as_ref().is_some_and(|p| p.contains_key("spec") && p.contains_key("status"));
    check_node(schema, value, path, root, untyped);
}

fn check_node(schema: &JSONSchemaProps, value: &Value, path: &str, root: bool, untyped: &mut BTreeSet<String>) {
    if value.is_null() {
        assert!(schema.nullable == Some(true), "{path}: null where the schema does not allow it");
        return;
    }
    if schema.x_kubernetes_int_or_string == Some(true) {
        assert!(value.is_string() || value.is_i64() || value.is_u64(), "{path}: not int-or-string: {value}");
        return;
    }
    match (schema.type_.as_deref(), value) {
        (Some("object"), Value::Object(map)) => {
            for req in schema.required.iter().flatten() {
                assert!(map.contains_key(req), "{path}: required {req} missing");
            }
            for (k, v) in map {
                let child_path = format!("{path}.{k}");
                if root && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                    continue; // the API server handles the root's type and object metadata itself
                }
                match (schema.properties.as_ref().and_then(|p| p.get(k)), &schema.additional_properties) {
                    (Some(child), _) => check_node(child, v, &child_path, false, untyped),
                    (None, Some(JSONSchemaPropsOrBool::Schema(child))) => {
                        check_node(child, v, &child_path, false, untyped)
                    }
                    (None, _) => {
                        assert!(
                            schema.x_kubernetes_preserve_unknown_fields == Some(true)
                                || matches!(schema.additional_properties, Some(JSONSchemaPropsOrBool::Bool(true))),
                            "{child_path}: unknown field in an object that prunes unknown fields"
                        );
                        untyped.insert(child_path);
                    }
                }
            }
        }
        (Some("array"), Value::Array(items)) => {
            let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items else {
                panic!("{path}: array schema without items");
            };
            for (i, v) in items.iter().enumerate() {
                check_node(item, v, &format!("{path}[{i}]"), false, untyped);
            }
        }
        (Some("string"), Value::String(_)) | (Some("boolean"), Value::Bool(_)) => {}
        (Some("integer"), Value::Number(n)) => assert!(n.is_i64() || n.is_u64(), "{path}: not an integer: {n}"),
        (Some("number"), Value::Number(_)) => {}
        (None, _) if schema.x_kubernetes_preserve_unknown_fields == Some(true) => {}
        (t, v) => panic!("{path}: {v} does not match schema type {t:?}"),
    }
}

/// What a file's documents contain, by kind, after checking each.
#[derive(Default)]
struct Seen {
    vmis: usize,
    vmi_specs: usize,
}

/// Round-trips and schema-checks every VMI (or VMI spec inside a template) of `doc`.
fn check_document(doc: &Value, what: &str, schema: &JSONSchemaProps, untyped: &mut BTreeSet<String>, seen: &mut Seen) {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
    let spec_schema = schema.properties.as_ref().and_then(|p| p.get("spec")).unwrap_or_else(|| panic!("no spec"));
    let mut template_spec = |ptr: &str| {
        let spec = pointer(doc, ptr, what);
        let _: VirtualMachineInstanceSpec = round_trip(spec, &format!("{what} {ptr}"));
        check_against_schema(spec_schema, spec, &format!("{what}:{ptr}"), untyped);
        seen.vmi_specs += 1;
    };
    match kind {
        "VirtualMachineInstance" => {
            let vmi: VirtualMachineInstance = round_trip(doc, what);
            assert_eq!(doc.get("apiVersion").and_then(Value::as_str), Some("kubevirt.io/v1"), "{what}");
            assert!(vmi.metadata.name.is_some(), "{what}: no name");
            check_against_schema(schema, doc, what, untyped);
            seen.vmis += 1;
        }
        "VirtualMachine" | "VirtualMachineInstanceReplicaSet" => template_spec("/spec/template/spec"),
        "VirtualMachinePool" => template_spec("/spec/virtualMachineTemplate/spec/template/spec"),
        "VirtualMachineInstancePreset" => {
            // A preset carries a domain (merged into matching VMIs), not a whole VMI spec.
            let domain = pointer(doc, "/spec/domain", what);
            let _: DomainSpec = round_trip(domain, &format!("{what} /spec/domain"));
            let domain_schema = spec_schema
                .properties
                .as_ref()
                .and_then(|p| p.get("domain"))
                .unwrap_or_else(|| panic!("no spec.domain schema"));
            check_against_schema(domain_schema, domain, &format!("{what}:/spec/domain"), untyped);
        }
        other => panic!("{what}: unexpected kind {other:?}; add it to this test"),
    }
}

#[test]
fn every_upstream_vmi_example_round_trips_unchanged_and_every_field_is_typed() {
    let crd = vmi_crd();
    let schema = v1_schema(&crd);
    let files = example_files("vmi-");
    assert!(files.len() >= 24, "expected upstream's vmi-*.yaml examples in {}", examples_dir().display());
    let mut untyped = BTreeSet::new();
    let mut seen = Seen::default();
    for file in &files {
        let docs = documents(file);
        assert!(!docs.is_empty(), "{}: no documents", file.display());
        for (i, doc) in docs.iter().enumerate() {
            let what = format!("{}#{i}", file.file_name().and_then(|n| n.to_str()).unwrap_or_default());
            check_document(doc, &what, schema, &mut untyped, &mut seen);
        }
    }
    // 22 VirtualMachineInstances, the ReplicaSet's template and the preset's domain.
    assert_eq!(seen.vmis, 22, "VirtualMachineInstance documents");
    assert_eq!(seen.vmi_specs, 1, "VMI templates (vmi-replicaset-cirros.yaml)");
    assert!(untyped.is_empty(), "example fields carried only as unknown fields: {untyped:#?}");
}

#[test]
fn every_upstream_vm_template_spec_parses_as_a_vmi_spec_unchanged() {
    let crd = vmi_crd();
    let schema = v1_schema(&crd);
    let files = example_files("vm-");
    assert!(files.len() >= 13, "expected upstream's vm-*.yaml examples in {}", examples_dir().display());
    let mut untyped = BTreeSet::new();
    let mut seen = Seen::default();
    for file in &files {
        for (i, doc) in documents(file).iter().enumerate() {
            let what = format!("{}#{i}", file.file_name().and_then(|n| n.to_str()).unwrap_or_default());
            check_document(doc, &what, schema, &mut untyped, &mut seen);
        }
    }
    assert_eq!(seen.vmi_specs, files.len(), "one VM (or pool) template per vm-*.yaml file");
    assert!(untyped.is_empty(), "template fields carried only as unknown fields: {untyped:#?}");
}

#[test]
fn yaml_parsed_straight_into_the_type_equals_the_json_path() {
    for file in example_files("vmi-") {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{e}"));
        if docs.iter().any(|d| d.get("kind").and_then(Value::as_str) != Some("VirtualMachineInstance")) {
            continue; // the ReplicaSet and the preset are covered by the JSON test above
        }
        let typed: Vec<VirtualMachineInstance> =
            serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let back: Vec<Value> = typed.iter().map(|t| serde_json::to_value(t).unwrap_or_default()).collect();
        assert_eq!(back, docs, "{}", file.display());
    }
}

/// vmi-masquerade.yaml's spec with unknown fields added at every depth the types model.
#[test]
fn unknown_fields_survive_at_every_depth() {
    let file = examples_dir().join("vmi-masquerade.yaml");
    let mut doc = documents(&file).into_iter().next().unwrap_or_else(|| panic!("no document"));
    let future = json!({"nested": {"list": [1, "two", {"three": true}]}, "n": 7});
    let places = [
        "/spec",
        "/spec/domain",
        "/spec/domain/devices",
        "/spec/domain/devices/disks/0",
        "/spec/domain/devices/disks/0/disk",
        "/spec/domain/devices/interfaces/0",
        "/spec/domain/devices/interfaces/0/masquerade",
        "/spec/domain/devices/interfaces/0/ports/0",
        "/spec/domain/devices/rng",
        "/spec/domain/memory",
        "/spec/networks/0",
        "/spec/networks/0/pod",
        "/spec/volumes/0",
        "/spec/volumes/0/containerDisk",
        "/spec/volumes/1/cloudInitNoCloud",
    ];
    for (i, place) in places.iter().enumerate() {
        let obj = doc.pointer_mut(place).and_then(Value::as_object_mut).unwrap_or_else(|| panic!("no {place}"));
        obj.insert(format!("futureField{i}"), future.clone());
    }
    doc["spec"]["domain"]["launchSecurity"] = json!({"sev": {"policy": {"encryptedState": true}}});
    doc["spec"]["domain"]["cpu"] = json!({"cores": 2, "futureCpuKnob": "on"});
    doc["status"] = json!({
        "phase": "Running",
        "futureStatus": {"x": 1},
        "conditions": [{"type": "Ready", "status": "True", "futureConditionField": "y"}],
        "interfaces": [{"ipAddress": "10.244.0.7", "name": "testmasquerade", "futureInterfaceField": [1]}],
        "migratedVolumes": [{"volumeName": "a", "sourcePVCInfo": {"claimName": "x"}}],
    });
    let vmi: VirtualMachineInstance = round_trip(&doc, "vmi-masquerade.yaml with unknown fields");
    // The unknown fields are reachable in `extra` and the known ones are still typed.
    assert!(vmi.spec.extra.contains_key("futureField0"));
    assert!(vmi.spec.domain.extra.contains_key("launchSecurity"));
    let cpu = vmi.spec.domain.cpu.as_ref().unwrap_or_else(|| panic!("no cpu"));
    assert_eq!((cpu.cores, cpu.extra.get("futureCpuKnob")), (Some(2), Some(&json!("on"))));
    let status = vmi.status.as_ref().unwrap_or_else(|| panic!("no status"));
    assert_eq!(status.phase, Some(VirtualMachineInstancePhase::Running));
    assert!(status.extra.contains_key("futureStatus") && status.extra.contains_key("migratedVolumes"));
    // …and the schema preserves (does not prune) every one of them.
    let crd = vmi_crd();
    let mut untyped = BTreeSet::new();
    check_against_schema(v1_schema(&crd), &doc, "doc", &mut untyped);
    assert_eq!(untyped.len(), places.len() + 6, "{untyped:#?}");
}

#[test]
fn a_status_as_upstream_writes_it_round_trips() {
    let status = json!({
        "activePods": {"7c1a4c4e-0000-4000-8000-000000000001": "node01"},
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-08-01T10:00:05Z"},
            {"type": "LiveMigratable", "status": "False", "reason": "InterfaceNotLiveMigratable",
             "message": "cannot migrate VMI which does not use masquerade, bridge with kubevirt.io/allow-pod-bridge-network-live-migration VM annotation or a migratable plugin to connect to the pod network"},
            {"type": "AgentConnected", "status": "True", "lastProbeTime": "2026-08-01T10:00:09Z"},
            {"type": "SomethingNewer", "status": "Unknown"}
        ],
        "currentCPUTopology": {"cores": 1, "sockets": 1, "threads": 1},
        "guestOSInfo": {"id": "fedora", "kernelRelease": "6.8.5", "name": "Fedora Linux", "prettyName": "Fedora Linux 40", "version": "40", "versionId": "40"},
        "interfaces": [{"infoSource": "domain, guest-agent", "interfaceName": "eth0", "ipAddress": "10.244.0.7",
                        "ipAddresses": ["10.244.0.7", "fd10:244::7"], "mac": "52:54:00:a1:b2:c3", "name": "default",
                        "podInterfaceName": "eth0", "queueCount": 1, "linkState": "up"}],
        "launcherContainerImageVersion": "registry:5000/kubevirt/virt-launcher:devel",
        "machine": {"type": "pc-q35-rhel9.4.0"},
        "memory": {"guestAtBoot": "1Gi", "guestCurrent": "1Gi", "guestRequested": "1Gi", "memoryOverhead": "240Mi"},
        "migrationMethod": "BlockMigration",
        "migrationTransport": "Unix",
        "migrationState": {"startTimestamp": "2026-08-01T10:01:00Z", "endTimestamp": "2026-08-01T10:01:30Z",
                           "completed": true, "mode": "PreCopy", "sourceNode": "node01", "targetNode": "node02",
                           "migrationUid": "abc", "targetState": {"node": "node02", "pod": "virt-launcher-x-abcde"}},
        "nodeName": "node01",
        "phase": "Running",
        "phaseTransitionTimestamps": [{"phase": "Pending", "phaseTransitionTimestamp": "2026-08-01T10:00:00Z"},
                                      {"phase": "Running", "phaseTransitionTimestamp": "2026-08-01T10:00:05Z"}],
        "qosClass": "Burstable",
        "runtimeUser": 107,
        "selinuxContext": "none",
        "VSOCKCID": 3,
        "virtualMachineRevisionName": "revision-start-vm-1",
        "volumeStatus": [{"name": "containerdisk", "target": "vda", "containerDiskVolume": {"checksum": 12345}},
                         {"name": "pvcdisk", "target": "vdb", "phase": "Ready",
                          "persistentVolumeClaimInfo": {"claimName": "disk-alpine", "accessModes": ["ReadWriteOnce"],
                                                        "volumeMode": "Filesystem", "capacity": {"storage": "2Gi"},
                                                        "requests": {"storage": "2Gi"}, "filesystemOverhead": "0.055"}}]
    });
    let typed: VirtualMachineInstanceStatus = round_trip(&status, "status");
    let ready = typed.condition(&VirtualMachineInstanceConditionType::Ready).unwrap_or_else(|| panic!("no Ready"));
    assert_eq!(ready.status, ConditionStatus::True);
    assert_eq!(
        typed.condition(&"SomethingNewer".into()).map(|c| c.type_.clone()),
        Some(VirtualMachineInstanceConditionType::Other("SomethingNewer".into()))
    );
    let crd = vmi_crd();
    let status_schema = v1_schema(&crd).properties.as_ref().and_then(|p| p.get("status")).unwrap_or_else(|| panic!());
    let mut untyped = BTreeSet::new();
    check_against_schema(status_schema, &status, "status", &mut untyped);
    assert_eq!(untyped, BTreeSet::from(["status.migrationState.targetState".to_owned()]));

    // Upstream's Go types write unset condition times as null: they read as absent and are not written back.
    let with_nulls = json!({"conditions": [{"type": "Paused", "status": "False", "lastProbeTime": null,
                                            "lastTransitionTime": null}]});
    let typed: VirtualMachineInstanceStatus =
        serde_json::from_value(with_nulls).unwrap_or_else(|e| panic!("nulls do not parse: {e}"));
    assert_eq!(
        serde_json::to_value(&typed).unwrap_or_default(),
        json!({"conditions": [{"type": "Paused", "status": "False"}]})
    );
}

#[test]
fn enum_values_are_upstreams_exact_strings_and_others_are_kept() {
    let strings = |known: &[VirtualMachineInstancePhase]| known.iter().map(|p| p.as_str().to_owned()).collect();
    let phases: Vec<String> = strings(VirtualMachineInstancePhase::KNOWN);
    assert_eq!(
        phases,
        ["", "Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed", "WaitingForSync", "Unknown"]
    );
    for p in VirtualMachineInstancePhase::KNOWN {
        assert_eq!(serde_json::to_value(p).unwrap_or_default(), json!(p.as_str()));
        assert_eq!(&serde_json::from_value::<VirtualMachineInstancePhase>(json!(p.as_str())).ok(), &Some(p.clone()));
    }
    assert!(VirtualMachineInstancePhase::Failed.is_final() && !VirtualMachineInstancePhase::Running.is_final());
    let conditions: Vec<&str> = VirtualMachineInstanceConditionType::KNOWN.iter().map(|c| c.as_str()).collect();
    for c in [
        "Ready",
        "LiveMigratable",
        "Paused",
        "AgentConnected",
        "Synchronized",
        "Provisioning",
        "DataVolumesReady",
        "HotVCPUChange",
        "HotMemoryChange",
        "StorageLiveMigratable",
        "AccessCredentialsSynchronized",
        "AgentVersionNotSupported",
        "VolumesChange",
        "MigrationRequired",
        "EvictionRequested",
        "SoftwareEmulation",
        "DecentralizedLiveMigrationFailure",
        "PodScheduled",
    ] {
        assert!(conditions.contains(&c), "condition type {c} missing");
    }
    let buses: Vec<&str> = DiskBus::KNOWN.iter().map(|b| b.as_str()).collect();
    assert_eq!(buses, ["virtio", "sata", "scsi", "usb"]);
    let models: Vec<&str> = InterfaceModel::KNOWN.iter().map(|m| m.as_str()).collect();
    assert_eq!(models, ["e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio"]);
    // A value upstream refuses (admission's job) still parses and round-trips.
    let bus: DiskBus = serde_json::from_value(json!("ide")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((bus.is_known(), serde_json::to_value(&bus).unwrap_or_default()), (false, json!("ide")));
}

#[test]
fn vmi_crd_has_upstreams_names_columns_and_versions_and_no_subresources() {
    let crd = vmi_crd();
    assert_eq!(crd.metadata.name.as_deref(), Some("virtualmachineinstances.kubevirt.io"));
    assert_eq!(crd.spec.group, "kubevirt.io");
    assert_eq!(crd.spec.scope, "Namespaced");
    let names = &crd.spec.names;
    assert_eq!((names.kind.as_str(), names.plural.as_str()), ("VirtualMachineInstance", "virtualmachineinstances"));
    assert_eq!(names.singular.as_deref(), Some("virtualmachineinstance"));
    assert_eq!(names.short_names.as_deref(), Some(&["vmi".to_owned(), "vmis".to_owned()][..]));
    assert_eq!(names.categories.as_deref(), Some(&["all".to_owned()][..]));

    let versions: Vec<_> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage, v.deprecated, v.deprecation_warning.as_deref()))
        .collect();
    assert_eq!(
        versions,
        [
            ("v1", true, true, None, None),
            (
                "v1alpha3",
                true,
                false,
                Some(true),
                Some("kubevirt.io/v1alpha3 is now deprecated and will be removed in a future release.")
            ),
        ]
    );
    let [v1, v1alpha3] = &crd.spec.versions[..] else { panic!("two versions") };
    assert_eq!(v1.schema, v1alpha3.schema, "both versions serve the same schema");
    for v in [v1, v1alpha3] {
        assert!(v.subresources.is_none(), "{}: the VMI has no subresources (status is an ordinary field)", v.name);
        let cols: Vec<_> = v
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.type_.as_str(), c.json_path.as_str(), c.priority))
            .collect();
        assert_eq!(
            cols,
            [
                ("Age", "date", ".metadata.creationTimestamp", None),
                ("Phase", "string", ".status.phase", None),
                ("IP", "string", ".status.interfaces[0].ipAddress", None),
                ("NodeName", "string", ".status.nodeName", None),
                ("Ready", "string", ".status.conditions[?(@.type=='Ready')].status", None),
                ("Live-Migratable", "string", ".status.conditions[?(@.type=='LiveMigratable')].status", Some(1)),
                ("Paused", "string", ".status.conditions[?(@.type=='Paused')].status", Some(1)),
            ],
            "{}",
            v.name
        );
    }
}

/// The objects whose unknown fields must not be pruned carry `x-kubernetes-preserve-unknown-fields` next to their
/// properties (never `additionalProperties`), and the whole CRD is structural.
#[test]
fn vmi_schema_preserves_unknown_fields_and_is_structural() {
    let crd = vmi_crd();
    crds::crd::check_structural(&crd).unwrap_or_else(|e| panic!("{e}"));
    let root = v1_schema(&crd);
    let at = |path: &str| -> &JSONSchemaProps {
        let mut cur = root;
        for part in path.split('.') {
            let (key, items) = part.strip_suffix("[]").map_or((part, false), |k| (k, true));
            cur = cur.properties.as_ref().and_then(|p| p.get(key)).unwrap_or_else(|| panic!("no {path}"));
            if items {
                let Some(JSONSchemaPropsOrArray::Schema(item)) = &cur.items else { panic!("{path}: no items") };
                cur = item;
            }
        }
        cur
    };
    for path in [
        "spec",
        "spec.domain",
        "spec.domain.cpu",
        "spec.domain.devices",
        "spec.domain.devices.disks[]",
        "spec.domain.devices.disks[].disk",
        "spec.domain.devices.interfaces[]",
        "spec.domain.devices.interfaces[].masquerade",
        "spec.volumes[]",
        "spec.volumes[].containerDisk",
        "spec.networks[]",
        "status",
        "status.conditions[]",
        "status.interfaces[]",
        "status.migrationState",
    ] {
        let s = at(path);
        assert_eq!(s.x_kubernetes_preserve_unknown_fields, Some(true), "{path}");
        assert_eq!(s.type_.as_deref(), Some("object"), "{path}");
        assert!(s.properties.as_ref().is_some_and(|p| !p.is_empty()) || path.ends_with("masquerade"), "{path}");
        assert!(s.additional_properties.is_none(), "{path}: additionalProperties");
    }
    for (path, required) in [
        ("spec", vec!["domain"]),
        ("spec.domain.devices.disks[]", vec!["name"]),
        ("spec.volumes[]", vec!["name"]),
        ("spec.volumes[].containerDisk", vec!["image"]),
        ("spec.networks[]", vec!["name"]),
        ("spec.domain.devices.interfaces[]", vec!["name"]),
        ("status.conditions[]", vec!["status", "type"]),
    ] {
        assert_eq!(at(path).required.as_deref().unwrap_or_default(), &required[..], "{path}");
    }
    // Enum-typed fields are plain strings in the schema (admission reports upstream's messages for bad values).
    let bus = at("spec.domain.devices.disks[].disk.bus");
    assert_eq!((bus.type_.as_deref(), bus.enum_.is_none()), (Some("string"), true));
    // No unsigned formats Kubernetes does not know.
    let yaml = crds::crd::render(&crd).unwrap_or_else(|e| panic!("{e}"));
    assert!(!yaml.contains("format: uint"), "unsigned integer formats left in the schema");
}

#[test]
fn every_generated_crd_is_structural_and_fits_a_client_side_apply() {
    let mut crds_seen = 0;
    for (file, crd) in crds::cdi::crd::all()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .chain(crds::kubevirt::crd::all().unwrap_or_else(|e| panic!("{e}")))
    {
        crds::crd::check_structural(&crd).unwrap_or_else(|e| panic!("{file}: {e}"));
        let size = serde_json::to_vec(&crd).map(|v| v.len()).unwrap_or(usize::MAX);
        assert!(size < MAX_APPLY_BYTES, "{file}: {size} bytes of JSON; `kubectl apply` could not annotate it");
        crds_seen += 1;
    }
    assert_eq!(crds_seen, 14);
    let rendered = crds::crd::render_all().unwrap_or_default();
    for file in [
        VMI_FILE,
        crds::kubevirt::crd::VM_FILE,
        crds::kubevirt::crd::VMIRS_FILE,
        crds::kubevirt::crd::VMIM_FILE,
        crds::kubevirt::crd::MIGRATION_POLICY_FILE,
    ] {
        assert!(rendered.iter().any(|(f, _)| *f == file), "{file}");
    }
}

#[test]
fn structural_check_refuses_additional_properties_next_to_properties() {
    let mut crd = vmi_crd();
    let spec = crd.spec.versions[0]
        .schema
        .as_mut()
        .and_then(|s| s.open_api_v3_schema.as_mut())
        .and_then(|s| s.properties.as_mut())
        .and_then(|p| p.get_mut("spec"))
        .unwrap_or_else(|| panic!("no spec"));
    spec.additional_properties = Some(JSONSchemaPropsOrBool::Bool(true));
    let err = crds::crd::check_structural(&crd).map(|()| String::new()).unwrap_or_else(|e| e.to_string());
    assert!(err.contains("v1:spec: properties and additionalProperties are mutually exclusive"), "{err}");
}

/// Upstream's `example-migration-policy.yaml` reads into the MigrationPolicy type with every field typed and
/// matches a VMI and namespace carrying its selector labels (and not a namespace without them).
#[test]
fn upstreams_example_migration_policy_reads_and_matches() {
    use crds::kubevirt::migration_policy::{MigrationPolicy, best_match};
    let docs = documents(&examples_dir().join("example-migration-policy.yaml"));
    assert_eq!(docs.len(), 1);
    let p: MigrationPolicy = serde_json::from_value(docs[0].clone()).unwrap_or_else(|e| panic!("{e}"));
    assert!(p.spec.extra.is_empty(), "every field typed: {:?}", p.spec.extra);
    assert_eq!(serde_json::to_value(&p).unwrap_or_default(), docs[0], "round trip");
    assert_eq!(p.spec.bandwidth_per_migration.as_ref().map(|q| q.0.as_str()), Some("2000Mi"));
    assert_eq!(p.spec.completion_timeout_per_gib, Some(123456789));
    let labels = |k: &str, v: &str| [(k.to_owned(), v.to_owned())].into_iter().collect();
    let vmi = labels("vmi-key", "vmi-value");
    assert!(best_match([&p], &vmi, &labels("namespace-key", "namespace-value")).is_some());
    assert!(best_match([&p], &vmi, &labels("namespace-key", "other")).is_none());
}
