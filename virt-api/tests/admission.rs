//! Table tests of admission against upstream's example manifests (`../shared/upstream-examples/kubevirt/vmi-*.yaml`)
//! and a table of bad VMIs with upstream's messages: defaulting (the whole result for `vmi-ephemeral` and
//! `vmi-sata`, the defaulted fields of the others), validation (every example is admitted once defaulted; every bad
//! one is refused with the `Status` message `kubectl` prints after `admission webhook "…" denied the request: `),
//! and the webhooks' AdmissionReview answers (the patch applied to the request object yields the defaulted VMI;
//! UPDATE rules).

use std::path::PathBuf;

use crds::kubevirt::vmi::VirtualMachineInstance;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};
use virt_api::cause::invalid_status;
use virt_api::config::{Config, DefaultBinding, RolloutStrategy, User};
use virt_api::defaults::{Fresh, default_vmi};
use virt_api::validate::{validate_create, validate_update};
use virt_api::webhook::{Webhook, review};

const UUID: &str = "6a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d";
const NOW: &str = "2026-01-02T03:04:05Z";

fn fresh() -> Fresh {
    let now: k8s_openapi::jiff::Timestamp = NOW.parse().unwrap_or_else(|e| panic!("{e}"));
    Fresh { now: Time(now), uuid: UUID.into() }
}

fn examples_dir() -> PathBuf {
    kube_test_support::shared_dir().unwrap_or_else(|e| panic!("{e:?}")).join("upstream-examples/kubevirt")
}

fn yaml_value(text: &str) -> Value {
    let docs: Vec<Value> = serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{e}"));
    docs.into_iter().find(|d| !d.is_null()).unwrap_or_else(|| panic!("no document"))
}

fn example(name: &str) -> Value {
    let path = examples_dir().join(name);
    yaml_value(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn vmi(v: &Value) -> VirtualMachineInstance {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{e}"))
}

fn defaulted(v: &Value, config: &Config) -> VirtualMachineInstance {
    default_vmi(&vmi(v), config, &fresh()).unwrap_or_else(|e| panic!("{e}"))
}

fn json_of(vmi: &VirtualMachineInstance) -> Value {
    serde_json::to_value(vmi).unwrap_or_else(|e| panic!("{e}"))
}

fn user() -> User {
    User { username: "alice".into(), groups: vec!["system:authenticated".into()] }
}

/// What upstream's mutator writes into every amd64 VMI with one socket of 128Mi, whatever the example says.
fn status_128mi() -> Value {
    json!({
        "currentCPUTopology": {"cores": 1, "sockets": 1, "threads": 1},
        "guestOSInfo": {},
        "memory": {"guestAtBoot": "128Mi", "guestCurrent": "128Mi", "guestRequested": "128Mi"},
        "phase": "Pending",
        "phaseTransitionTimestamps": [{"phase": "Pending", "phaseTransitionTimestamp": NOW}],
        "runtimeUser": 107
    })
}

#[test]
fn vmi_ephemeral_gets_the_default_pod_network_with_bridge_and_every_default() {
    let got = json_of(&defaulted(&example("vmi-ephemeral.yaml"), &Config::default()));
    let want = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "annotations": {"kubevirt.io/pci-topology-version": "v3"},
            "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"],
            "labels": {"special": "vmi-ephemeral"},
            "name": "vmi-ephemeral"
        },
        "spec": {
            "architecture": "amd64",
            "domain": {
                "cpu": {"cores": 1, "maxSockets": 4, "model": "host-model", "sockets": 1, "threads": 1},
                "devices": {
                    "disks": [{"disk": {"bus": "virtio"}, "name": "containerdisk"}],
                    "interfaces": [{"bridge": {}, "name": "default"}]
                },
                "features": {"acpi": {"enabled": true}},
                "firmware": {"uuid": UUID},
                "machine": {"type": "q35"},
                "memory": {"guest": "128Mi"},
                "resources": {}
            },
            "evictionStrategy": "None",
            "networks": [{"name": "default", "pod": {}}],
            "terminationGracePeriodSeconds": 0,
            "volumes": [{
                "containerDisk": {
                    "image": "registry:5000/kubevirt/cirros-container-disk-demo:devel",
                    "imagePullPolicy": "IfNotPresent"
                },
                "name": "containerdisk"
            }]
        },
        "status": status_128mi()
    });
    assert_eq!(got, want, "{}", serde_json::to_string_pretty(&got).unwrap_or_default());
}

#[test]
fn vmi_sata_gets_a_sata_disk_for_its_volume() {
    let got = json_of(&defaulted(&example("vmi-sata.yaml"), &Config::default()));
    assert_eq!(
        got["spec"]["domain"]["devices"],
        json!({
            "disks": [{"disk": {"bus": "sata"}, "name": "containerdisk"}],
            "interfaces": [{"bridge": {}, "name": "default"}]
        })
    );
    assert_eq!(got["spec"]["networks"], json!([{"name": "default", "pod": {}}]));
    assert_eq!(got["spec"]["domain"]["machine"], json!({"type": "q35"}));
    assert_eq!(got["spec"]["volumes"][0]["containerDisk"]["imagePullPolicy"], json!("IfNotPresent"));
    assert_eq!(got["status"], status_128mi());
}

/// (example, JSON pointer, the defaulted value) under upstream's default configuration.
const DEFAULTED_FIELDS: &[(&str, &str, &str)] = &[
    // An explicit binding and network: nothing is added; the given buses stay.
    ("vmi-masquerade.yaml", "/spec/networks", r#"[{"name":"testmasquerade","pod":{}}]"#),
    ("vmi-masquerade.yaml", "/spec/domain/devices/interfaces/0/masquerade", "{}"),
    ("vmi-masquerade.yaml", "/spec/domain/devices/disks/1", r#"{"disk":{"bus":"virtio"},"name":"cloudinitdisk"}"#),
    // 1024M is not 2Mi-aligned: no memory hotplug ceiling.
    ("vmi-masquerade.yaml", "/spec/domain/memory", r#"{"guest":"1024M"}"#),
    ("vmi-masquerade.yaml", "/status/memory/guestAtBoot", r#""1024M""#),
    ("vmi-migratable.yaml", "/spec/domain/devices/interfaces", r#"[{"masquerade":{},"name":"default"}]"#),
    ("vmi-nocloud.yaml", "/spec/volumes/2/emptyDisk", r#"{"capacity":"2Gi"}"#),
    ("vmi-nocloud.yaml", "/spec/domain/devices/disks/2", r#"{"disk":{"bus":"virtio"},"name":"emptydisk"}"#),
    ("vmi-pvc.yaml", "/spec/volumes/0", r#"{"name":"pvcdisk","persistentVolumeClaim":{"claimName":"disk-alpine"}}"#),
    // 1Gi guest memory on amd64: the hotplug ceiling is 4 × guest.
    ("vmi-alpine-efi.yaml", "/spec/domain/memory", r#"{"guest":"1Gi","maxGuest":"4Gi"}"#),
    ("vmi-alpine-efi.yaml", "/spec/domain/firmware", r#"{"bootloader":{"efi":{"secureBoot":false}},"uuid":"UUID"}"#),
    ("vmi-secureboot.yaml", "/spec/domain/features", r#"{"acpi":{"enabled":true},"smm":{"enabled":true}}"#),
    // Cores given: the topology is left alone (no sockets, so no socket ceiling); the given UUID stays.
    ("vmi-windows.yaml", "/spec/domain/cpu", r#"{"cores":2,"model":"host-model"}"#),
    ("vmi-windows.yaml", "/status/currentCPUTopology", r#"{"cores":2}"#),
    ("vmi-windows.yaml", "/spec/domain/firmware/uuid", r#""5d307ca9-b3ef-428c-8861-06e72d69f223""#),
    (
        "vmi-windows.yaml",
        "/spec/domain/clock/timer",
        r#"{"hpet":{"present":false},"hyperv":{"present":true},"pit":{"present":true,"tickPolicy":"delay"},"rtc":{"present":true,"tickPolicy":"catchup"}}"#,
    ),
    (
        "vmi-windows.yaml",
        "/spec/domain/features/hyperv",
        r#"{"relaxed":{"enabled":true},"spinlocks":{"enabled":true,"spinlocks":8191},"vapic":{"enabled":true}}"#,
    ),
    ("vmi-windows.yaml", "/spec/domain/features/apic", r#"{"enabled":true}"#),
    ("vmi-windows.yaml", "/spec/domain/devices/disks", r#"[{"disk":{"bus":"sata"},"name":"pvcdisk"}]"#),
    ("vmi-windows.yaml", "/spec/domain/memory/maxGuest", r#""8Gi""#),
    ("vmi-kernel-boot.yaml", "/spec/domain/devices", r#"{"interfaces":[{"bridge":{},"name":"default"}]}"#),
    (
        "vmi-host-disk.yaml",
        "/spec/volumes/0/hostDisk",
        r#"{"capacity":"1Gi","path":"/var/data/disk.img","type":"DiskOrCreate"}"#,
    ),
];

#[test]
fn upstream_examples_get_upstreams_defaults() {
    for (file, pointer, want) in DEFAULTED_FIELDS {
        let got = json_of(&defaulted(&example(file), &Config::default()));
        let want: Value = serde_json::from_str(&want.replace("UUID", UUID)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            got.pointer(pointer),
            Some(&want),
            "{file} {pointer}: {}",
            serde_json::to_string(&got).unwrap_or_default()
        );
    }
}

#[test]
fn every_upstream_vmi_example_is_admitted_once_defaulted() {
    // Examples that need a feature gate or a device plugin the default configuration lacks, with the reason.
    let mut config = Config::default();
    config.feature_gates.extend(["HostDisk", "Sidecar", "HostDevices"].map(String::from));
    let mut checked = 0;
    for entry in std::fs::read_dir(examples_dir()).unwrap_or_else(|e| panic!("{e}")).flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("vmi-") || name.contains("preset") || name.contains("replicaset") {
            continue;
        }
        let v = example(&name);
        if v["kind"] != json!("VirtualMachineInstance") {
            continue;
        }
        let d = defaulted(&v, &config);
        // Defaulting is idempotent: a second mutator agrees with the first.
        let again =
            default_vmi(&d, &config, &Fresh { uuid: "other".into(), ..fresh() }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json_of(&again), json_of(&d), "{name}");
        let causes = validate_create(&d, &config, &user());
        assert!(causes.is_empty(), "{name}: {causes:#?}");
        checked += 1;
    }
    assert!(checked >= 20, "only {checked} examples");
}

#[test]
fn masquerade_as_the_cluster_default_and_the_stage_rollout() {
    let config = Config {
        default_binding: DefaultBinding::Masquerade,
        rollout_strategy: RolloutStrategy::Stage,
        cpu_model: Some("Haswell-noTSX".into()),
        ..Config::default()
    };
    let got = json_of(&defaulted(&example("vmi-ephemeral.yaml"), &config));
    assert_eq!(got["spec"]["domain"]["devices"]["interfaces"], json!([{"masquerade": {}, "name": "default"}]));
    assert_eq!(got["spec"]["domain"]["cpu"], json!({"cores": 1, "model": "Haswell-noTSX", "sockets": 1, "threads": 1}));
    let no_bridge = Config { permit_bridge_on_pod_network: false, ..Config::default() };
    let e = default_vmi(&vmi(&example("vmi-ephemeral.yaml")), &no_bridge, &fresh()).err();
    assert_eq!(e.map(|e| e.to_string()).as_deref(), Some("bridge interface is not enabled in kubevirt-config"));
}

/// A VMI of `name` with `spec` (YAML) merged into a minimal valid spec.
fn vmi_yaml(spec: &str) -> Value {
    yaml_value(&format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {{name: testvmi}}\nspec:\n{}",
        spec.lines().map(|l| format!("  {l}\n")).collect::<String>()
    ))
}

const BASE_VOLUMES: &str = "volumes:\n- name: containerdisk\n  containerDisk: {image: registry:5000/cirros:devel}";

/// The message a refusal of `spec` carries (the causes joined as upstream joins them).
fn refusal(spec: &str, config: &Config) -> String {
    let d = defaulted(&vmi_yaml(spec), config);
    invalid_status(&validate_create(&d, config, &user())).message
}

/// Bad VMIs and upstream's messages. Network and disk causes appear twice: upstream's virt-api runs those checks
/// both as registered spec validators and inside its spec validation (v1.5 – v1.9).
const BAD: &[(&str, &str, &str)] = &[
    (
        "no memory",
        "domain: {devices: {}}\nvolumes: []",
        "no memory requested, at least one of 'spec.domain.memory.guest', 'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' must be set",
    ),
    (
        "memory request below 1M",
        "domain: {devices: {}, resources: {requests: {memory: 512k}}}",
        "spec.domain.resources.requests.memory '512k': must be greater than or equal to 1M.",
    ),
    (
        "memory request above the limit",
        "domain: {devices: {}, resources: {requests: {memory: 128Mi}, limits: {memory: 64Mi}}}",
        "spec.domain.resources.requests.memory '128Mi' is greater than spec.domain.resources.limits.memory '64Mi'",
    ),
    (
        "two sources in one volume",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nvolumes:\n- name: containerdisk\n  containerDisk: {image: cirros}\n  emptyDisk: {capacity: 1Gi}",
        "spec.volumes[0] must have exactly one source type set",
    ),
    (
        "a volume without a source",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nvolumes:\n- name: nothing",
        "spec.volumes[0] must have exactly one source type set",
    ),
    (
        "duplicate volume names",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nvolumes:\n- {name: disk, emptyDisk: {capacity: 1Gi}}\n- {name: disk, emptyDisk: {capacity: 2Gi}}",
        "spec.volumes[1] and spec.volumes[0] must not have the same Name.",
    ),
    (
        "a disk naming an unknown volume",
        "domain: {devices: {disks: [{name: x, disk: {}}]}, memory: {guest: 128Mi}}",
        "spec.domain.devices.disks[0].Name 'x' not found.",
    ),
    (
        "cloud-init user data above 2048 bytes",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nvolumes:\n- name: cloudinit\n  cloudInitNoCloud: {userData: LONG}",
        "spec.volumes[0].cloudInitNoCloud userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data.",
    ),
    (
        "an interface naming an unknown network",
        "domain: {devices: {interfaces: [{name: x, masquerade: {}}]}, memory: {guest: 128Mi}}",
        "Masquerade interface only implemented with pod network, spec.domain.devices.interfaces[0].name 'x' not found., Masquerade interface only implemented with pod network, spec.domain.devices.interfaces[0].name 'x' not found.",
    ),
    (
        "a network without an interface",
        "domain: {devices: {interfaces: [{name: default, bridge: {}}]}, memory: {guest: 128Mi}}\nnetworks: [{name: default, pod: {}}, {name: other, pod: {}}]",
        "more than one interface is connected to a pod network in spec.interfaces, spec.networks[1].name 'other' not found., more than one interface is connected to a pod network in spec.interfaces, spec.networks[1].name 'other' not found.",
    ),
    (
        "two bindings on one interface",
        "domain: {devices: {interfaces: [{name: default, bridge: {}, masquerade: {}}]}, memory: {guest: 128Mi}}\nnetworks: [{name: default, pod: {}}]",
        "logical default interface must have exactly one binding method or binding plugin, logical default interface must have exactly one binding method or binding plugin",
    ),
    (
        "masquerade on a multus network",
        "domain: {devices: {interfaces: [{name: red, masquerade: {}}]}, memory: {guest: 128Mi}}\nnetworks: [{name: red, multus: {networkName: red}}]",
        "Masquerade interface only implemented with pod network, Masquerade interface only implemented with pod network",
    ),
    (
        "slirp (discontinued)",
        "domain: {devices: {interfaces: [{name: default, slirp: {}}]}, memory: {guest: 128Mi}}\nnetworks: [{name: default, pod: {}}]",
        "Slirp interface support has been discontinued since v1.3, logical default interface must have exactly one binding method or binding plugin, logical default interface must have exactly one binding method or binding plugin",
    ),
    (
        "macvtap (discontinued)",
        "domain: {devices: {interfaces: [{name: default, macvtap: {}}]}, memory: {guest: 128Mi}}\nnetworks: [{name: default, pod: {}}]",
        "Macvtap network binding has been discontinued since v1.3, logical default interface must have exactly one binding method or binding plugin, logical default interface must have exactly one binding method or binding plugin",
    ),
    (
        "passt (discontinued)",
        "domain: {devices: {interfaces: [{name: default, passt: {}}]}, memory: {guest: 128Mi}}\nnetworks: [{name: default, pod: {}}]",
        "Passt network binding has been discontinued since v1.3, logical default interface must have exactly one binding method or binding plugin, logical default interface must have exactly one binding method or binding plugin",
    ),
    (
        "duplicate interface and network names",
        "domain: {devices: {interfaces: [{name: default, bridge: {}}, {name: default, bridge: {}}]}, memory: {guest: 128Mi}}\nnetworks: [{name: default, pod: {}}, {name: default, pod: {}}]",
        "more than one interface is connected to a pod network in spec.interfaces, Network with name \"default\" already exists, every network must have a unique name, Only one interface can be connected to one specific network, more than one interface is connected to a pod network in spec.interfaces, Network with name \"default\" already exists, every network must have a unique name, Only one interface can be connected to one specific network",
    ),
    (
        "duplicate boot orders",
        "domain:\n  devices:\n    disks: [{name: containerdisk, bootOrder: 1}]\n    interfaces: [{name: default, bridge: {}, bootOrder: 1}]\n  memory: {guest: 128Mi}\nnetworks: [{name: default, pod: {}}]",
        "Boot order for spec.domain.devices.interfaces[0].bootOrder already set for a different device.",
    ),
    (
        "boot order 0",
        "domain: {devices: {disks: [{name: containerdisk, bootOrder: 0}]}, memory: {guest: 128Mi}}",
        "spec.domain.devices.disks[0] must have a boot order > 0, if supplied, spec.domain.devices.disks[0] must have a boot order > 0, if supplied",
    ),
    (
        "an unknown bus",
        "domain: {devices: {disks: [{name: containerdisk, disk: {bus: ide}}]}, memory: {guest: 128Mi}}",
        "IDE bus is not supported, IDE bus is not supported",
    ),
    (
        "a cdrom on virtio",
        "domain: {devices: {disks: [{name: containerdisk, cdrom: {bus: virtio}}]}, memory: {guest: 128Mi}}",
        "Bus type virtio is invalid for CD-ROM device, Bus type virtio is invalid for CD-ROM device",
    ),
    (
        "a disk that is also a cdrom",
        "domain: {devices: {disks: [{name: containerdisk, disk: {}, cdrom: {}}]}, memory: {guest: 128Mi}}",
        "spec.domain.devices.disks[0] can only have a single target type defined, spec.domain.devices.disks[0] can only have a single target type defined",
    ),
    (
        "a disk name that is not a DNS label",
        "domain: {devices: {disks: [{name: Container_Disk}]}, memory: {guest: 128Mi}}\nvolumes:\n- {name: Container_Disk, containerDisk: {image: cirros}}",
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?'), a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    ),
    (
        "a hostname that is not a DNS label",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nhostname: My_Host",
        "spec.hostname does not conform to the kubernetes DNS_LABEL rules : a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
    ),
    (
        "a probe without action",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nreadinessProbe: {initialDelaySeconds: 5}",
        "either spec.readinessProbe.tcpSocket, spec.readinessProbe.exec or spec.readinessProbe.httpGet must be set if a spec.readinessProbe is specified",
    ),
    (
        "an unknown input type",
        "domain: {devices: {inputs: [{name: kb, type: keyboard, bus: ps2}]}, memory: {guest: 128Mi}}",
        "Input device can have only virtio or usb bus., Input device can have only tablet type.",
    ),
    (
        "a hostDisk without the gate",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nvolumes:\n- {name: containerdisk, hostDisk: {path: /var/x.img, type: Disk}}",
        "HostDisk feature gate is not enabled",
    ),
    (
        "an unsupported machine type",
        "domain: {devices: {}, memory: {guest: 128Mi}, machine: {type: pc-i440fx-2.5}}",
        "spec.domain.machine.type is not supported: pc-i440fx-2.5 (allowed values: [q35* pc-q35*])",
    ),
    (
        "secure boot without SMM",
        "domain: {devices: {}, memory: {guest: 128Mi}, firmware: {bootloader: {efi: {}}}}",
        "spec.domain has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled.",
    ),
    (
        "reserved labels",
        "domain: {devices: {}, memory: {guest: 128Mi}}\nLABELS",
        "creation of the following reserved kubevirt.io/ labels on a VMI object is prohibited",
    ),
];

#[test]
fn bad_vmis_are_refused_with_upstreams_messages() {
    let config = Config::default();
    for (what, spec, want) in BAD {
        let long = "x".repeat(2049);
        let spec = spec.replace("LONG", &long);
        let labels = spec.contains("LABELS");
        let spec = spec.replace("\nLABELS", "");
        let mut v =
            if spec.contains("volumes") { vmi_yaml(&spec) } else { vmi_yaml(&format!("{spec}\n{BASE_VOLUMES}")) };
        if labels {
            v["metadata"]["labels"] = json!({"kubevirt.io/nodeName": "node01"});
        }
        let d = defaulted(&v, &config);
        let got = invalid_status(&validate_create(&d, &config, &user())).message;
        assert_eq!(&got, want, "{what}");
    }
    // The refusal `Status` as upstream returns it.
    let s = invalid_status(&validate_create(
        &defaulted(
            &vmi_yaml(&format!(
                "domain: {{devices: {{disks: [{{name: x, disk: {{}}}}]}}, memory: {{guest: 128Mi}}}}\n{BASE_VOLUMES}"
            )),
            &config,
        ),
        &config,
        &user(),
    ));
    assert_eq!(
        serde_json::to_value(&s).unwrap_or_default(),
        json!({
            "code": 422,
            "reason": "Invalid",
            "message": "spec.domain.devices.disks[0].Name 'x' not found.",
            "details": {"causes": [
                {"reason": "FieldValueInvalid", "message": "spec.domain.devices.disks[0].Name 'x' not found.", "field": "spec.domain.devices.disks[0].name"}
            ]}
        })
    );
    assert_eq!(refusal("domain: {devices: {}, memory: {guest: 128Mi}}\nvolumes: []", &config), "");
}

#[test]
fn guest_memory_above_the_limit_is_refused_unless_memory_is_live_updated() {
    let spec = format!(
        "domain: {{devices: {{}}, memory: {{guest: 256Mi}}, resources: {{limits: {{memory: 128Mi}}}}}}\n{BASE_VOLUMES}"
    );
    let stage = Config { rollout_strategy: RolloutStrategy::Stage, ..Config::default() };
    assert_eq!(
        refusal(&spec, &stage),
        "spec.domain.memory.guest '256Mi' must be equal to or less than the memory limit spec.domain.resources.limits.memory '128Mi'"
    );
    // Upstream skips the check under its default LiveUpdate rollout strategy.
    assert_eq!(refusal(&spec, &Config::default()), "");
}

#[test]
fn updates_of_the_spec_are_restricted_to_kubevirt() {
    let mut config = Config::default();
    config.kubevirt_users.insert("system:serviceaccount:kubevirt:kubevirt-controller".into());
    let old = defaulted(&example("vmi-ephemeral.yaml"), &config);
    let mut new = old.clone();
    new.spec.termination_grace_period_seconds = Some(5);
    let causes = validate_update(&old, &new, &config, &user());
    assert_eq!(invalid_status(&causes).message, "update of VMI object is restricted");
    let controller = User { username: "system:serviceaccount:kubevirt:kubevirt-controller".into(), groups: vec![] };
    assert!(validate_update(&old, &new, &config, &controller).is_empty());
    let mut labelled = old.clone();
    labelled.metadata.labels.get_or_insert_with(Default::default).insert("kubevirt.io/nodeName".into(), "n".into());
    assert_eq!(
        invalid_status(&validate_update(&old, &labelled, &config, &user())).message,
        "modification of the following reserved kubevirt.io/ labels on a VMI object is prohibited"
    );
    // Labels of others and status changes are fine for the validator.
    let mut other = old.clone();
    other.metadata.labels.get_or_insert_with(Default::default).insert("app".into(), "x".into());
    assert!(validate_update(&old, &other, &config, &user()).is_empty());
    let mut sockets = old.clone();
    if let Some(cpu) = sockets.spec.domain.cpu.as_mut() {
        cpu.max_sockets = Some(8);
    }
    assert_eq!(
        invalid_status(&validate_update(&old, &sockets, &config, &controller)).message,
        "CPU topology maxSockets changed"
    );
}

fn admission_review(operation: &str, object: &Value, old: Option<&Value>, username: &str) -> Vec<u8> {
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"},
        "namespace": "default",
        "operation": operation,
        "userInfo": {"username": username, "groups": ["system:authenticated"]},
        "object": object,
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": false
    });
    if let Some(name) = object["metadata"]["name"].as_str() {
        request["name"] = json!(name);
    }
    serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
        .unwrap_or_default()
}

fn apply_patch(object: &Value, response: &Value) -> Value {
    use base64::Engine as _;
    let patch = response["response"]["patch"].as_str().unwrap_or_else(|| panic!("no patch: {response}"));
    let bytes = base64::engine::general_purpose::STANDARD.decode(patch).unwrap_or_else(|e| panic!("{e}"));
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let mut out = object.clone();
    json_patch::patch(&mut out, &patch).unwrap_or_else(|e| panic!("{e}"));
    out
}

#[test]
fn the_mutating_webhook_answers_a_patch_to_the_defaulted_vmi() {
    let config = Config::default();
    for file in ["vmi-ephemeral.yaml", "vmi-sata.yaml", "vmi-windows.yaml", "vmi-nocloud.yaml"] {
        let mut object = example(file);
        // As the API server sends it (kubectl's v1alpha3 manifests keep their version).
        object["metadata"]["creationTimestamp"] = Value::Null;
        object["metadata"]["namespace"] = json!("default");
        let answer = review(Webhook::Mutate, &admission_review("CREATE", &object, None, "alice"), &config, fresh);
        assert_eq!(answer["response"]["uid"], json!("705ab4f5-6393-11e8-b7cc-42010a800002"));
        assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
        assert_eq!(answer["response"]["patchType"], json!("JSONPatch"));
        let mut patched = apply_patch(&object, &answer);
        virt_api::webhook::strip_nulls(&mut patched);
        let mut want = json_of(&defaulted(&object, &config));
        want["metadata"]["namespace"] = json!("default");
        assert_eq!(patched, want, "{file}");
    }
    let mut v1alpha3 = example("vmi-ephemeral.yaml");
    v1alpha3["apiVersion"] = json!("kubevirt.io/v1alpha3");
    let answer = review(Webhook::Mutate, &admission_review("CREATE", &v1alpha3, None, "alice"), &config, fresh);
    assert_eq!(apply_patch(&v1alpha3, &answer)["apiVersion"], json!("kubevirt.io/v1alpha3"));
}

#[test]
fn the_mutating_webhook_reverts_status_edits_of_users() {
    let mut config = Config::default();
    config.kubevirt_groups.insert("system:serviceaccounts:kubevirt".into());
    let old = json_of(&defaulted(&example("vmi-ephemeral.yaml"), &config));
    let mut new = old.clone();
    new["status"]["phase"] = json!("Running");
    let answer = review(Webhook::Mutate, &admission_review("UPDATE", &new, Some(&old), "alice"), &config, fresh);
    assert_eq!(apply_patch(&new, &answer)["status"], old["status"]);
    let mut body: Value =
        serde_json::from_slice(&admission_review("UPDATE", &new, Some(&old), "system:serviceaccount:kubevirt:node"))
            .unwrap_or_default();
    body["request"]["userInfo"]["groups"] = json!(["system:serviceaccounts:kubevirt"]);
    let answer = review(Webhook::Mutate, &serde_json::to_vec(&body).unwrap_or_default(), &config, fresh);
    assert_eq!(answer["response"]["allowed"], json!(true));
    assert!(answer["response"].get("patch").is_none(), "{answer}");
}

#[test]
fn the_validating_webhooks_answer_upstreams_status() {
    let config = Config::default();
    let mut bad = json_of(&defaulted(&example("vmi-ephemeral.yaml"), &config));
    bad["spec"]["domain"]["devices"]["disks"][0]["name"] = json!("x");
    let answer = review(Webhook::ValidateCreate, &admission_review("CREATE", &bad, None, "alice"), &config, fresh);
    assert_eq!(answer["response"]["allowed"], json!(false));
    assert_eq!(answer["response"]["status"]["code"], json!(422));
    assert_eq!(
        answer["response"]["status"]["message"],
        json!(
            "spec.domain.devices.disks[0].Name 'x' not found., spec.domain.volumes[0].name 'containerdisk' not found."
        )
    );
    let good = json_of(&defaulted(&example("vmi-ephemeral.yaml"), &config));
    let answer = review(Webhook::ValidateCreate, &admission_review("CREATE", &good, None, "alice"), &config, fresh);
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    let mut changed = good.clone();
    changed["spec"]["terminationGracePeriodSeconds"] = json!(10);
    let answer =
        review(Webhook::ValidateUpdate, &admission_review("UPDATE", &changed, Some(&good), "alice"), &config, fresh);
    assert_eq!(answer["response"]["status"]["message"], json!("update of VMI object is restricted"));
    // Unreadable input: code 400 with the decoding error, as upstream.
    let mut broken = good.clone();
    broken["spec"]["domain"]["memory"]["guest"] = json!("12xx");
    let answer = review(Webhook::ValidateCreate, &admission_review("CREATE", &broken, None, "alice"), &config, fresh);
    assert_eq!(answer["response"]["status"]["code"], json!(400));
    assert_eq!(
        answer["response"]["status"]["message"],
        json!("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    );
    let answer = review(Webhook::Mutate, b"not json", &config, fresh);
    assert_eq!(answer["response"]["allowed"], json!(false));
}

fn migration_review(operation: &str, object: &Value, old: Option<&Value>, username: &str) -> Vec<u8> {
    let mut body: Value =
        serde_json::from_slice(&admission_review(operation, object, old, username)).unwrap_or_default();
    body["request"]["kind"] =
        json!({"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstanceMigration"});
    body["request"]["resource"] =
        json!({"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstancemigrations"});
    serde_json::to_vec(&body).unwrap_or_default()
}

#[test]
fn the_migration_webhooks_answer_upstreams_patch_and_status() {
    use virt_api::lookup::Lookups;
    use virt_api::validate::migration::MigrationLookup;
    use virt_api::webhook::review_with;

    let config = Config::default();
    let object = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"generateName": "kubevirt-migrate-vm-", "namespace": "default", "creationTimestamp": null},
        "spec": {"vmiName": "vmi-ephemeral"}});
    // The mutator: label and finalizer, as a JSON patch.
    let answer = review(Webhook::MutateMigration, &migration_review("CREATE", &object, None, "alice"), &config, fresh);
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    let mut patched = apply_patch(&object, &answer);
    virt_api::webhook::strip_nulls(&mut patched);
    assert_eq!(patched["metadata"]["labels"], json!({"kubevirt.io/vmi-name": "vmi-ephemeral"}));
    assert_eq!(patched["metadata"]["finalizers"], json!(["kubevirt.io/migrationJobFinalize"]));

    // The create validator: a missing VMI is a plain 400, a missing vmiName an Invalid 422 with its cause.
    let missing = Lookups {
        migration: Some(MigrationLookup { vmi: Ok(None), migrations: Ok(Vec::new()) }),
        ..Lookups::default()
    };
    let body = migration_review("CREATE", &patched, None, "alice");
    let answer = review_with(Webhook::ValidateMigrationCreate, &body, &config, fresh, &missing);
    assert_eq!(answer["response"]["allowed"], json!(false));
    assert_eq!(
        answer["response"]["status"],
        json!({"code": 400, "message": "the VMI \"default/vmi-ephemeral\" does not exist"})
    );
    let running = json_of(&defaulted(&example("vmi-ephemeral.yaml"), &config));
    let mut vmi = vmi(&running);
    vmi.status.get_or_insert_default().phase = Some(crds::kubevirt::VirtualMachineInstancePhase::Running);
    let found = Lookups {
        migration: Some(MigrationLookup { vmi: Ok(Some(vmi)), migrations: Ok(Vec::new()) }),
        ..Lookups::default()
    };
    let answer = review_with(Webhook::ValidateMigrationCreate, &body, &config, fresh, &found);
    assert_eq!(answer["response"]["allowed"], json!(true), "{answer}");
    let mut nameless = patched.clone();
    nameless["spec"]["vmiName"] = json!("");
    let body = migration_review("CREATE", &nameless, None, "alice");
    let answer = review_with(Webhook::ValidateMigrationCreate, &body, &config, fresh, &Lookups::default());
    assert_eq!(answer["response"]["status"]["code"], json!(422));
    assert_eq!(answer["response"]["status"]["reason"], json!("Invalid"));
    assert_eq!(answer["response"]["status"]["message"], json!("vmiName is missing"));
    assert_eq!(
        answer["response"]["status"]["details"]["causes"],
        json!([{"reason": "FieldValueRequired", "message": "vmiName is missing", "field": "spec.vmiName"}])
    );

    // The update validator: the spec is immutable.
    let mut changed = patched.clone();
    changed["spec"]["addedNodeSelector"] = json!({"kubernetes.io/hostname": "node02"});
    let body = migration_review("UPDATE", &changed, Some(&patched), "alice");
    let answer = review(Webhook::ValidateMigrationUpdate, &body, &config, fresh);
    assert_eq!(answer["response"]["status"]["code"], json!(422));
    assert_eq!(answer["response"]["status"]["message"], json!("update of Migration object's spec is restricted"));
    let mut finished = patched.clone();
    finished["metadata"]["finalizers"] = json!([]);
    let body =
        migration_review("UPDATE", &finished, Some(&patched), "system:serviceaccount:kubevirt:kubevirt-controller");
    assert_eq!(review(Webhook::ValidateMigrationUpdate, &body, &config, fresh)["response"]["allowed"], json!(true));

    // Another resource: upstream's texts.
    let answer =
        review(Webhook::ValidateMigrationCreate, &admission_review("CREATE", &object, None, "alice"), &config, fresh);
    assert_eq!(
        answer["response"]["status"]["message"],
        json!("expect resource to be '{kubevirt.io v1 virtualmachineinstancemigrations}'")
    );
    let answer = review(Webhook::MutateMigration, &admission_review("CREATE", &object, None, "alice"), &config, fresh);
    assert_eq!(
        answer["response"]["status"]["message"],
        json!("expect resource to be 'virtualmachineinstancemigrations'")
    );
}
