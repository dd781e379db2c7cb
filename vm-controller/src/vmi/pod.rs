//! The virt-launcher pod of a VMI (contract §2.8, §6), rendered purely from the VMI, the claims of its volumes and
//! the settings: one pod per VM, named `virt-launcher-<vmi>-<5 chars>` by the API server (`generateName`).
//!
//! ```text
//! init  container-disk-binary   (launcher image) copies the static busybox into the container-disk-bin emptyDir
//! init  volume<name>-init       (each containerDisk image) copies the image's single /disk file (or `path`)
//!                               to container-disks/<name>.img with that busybox; 0 or 2+ files → exit 1 with
//!                               upstream's message in the termination log
//! main  compute                 (launcher image) virt-launcher: disks, network, libvirtd; Ready = its ready file
//! main  guest-console-log       (launcher image) follows the serial console log
//! ```
//!
//! Paths, container names and the launcher's environment are [`contracts::kubevirt::launcher`]'s. Upstream keeps
//! a long-running container per containerDisk and bind-mounts the file from its root filesystem; copying the file
//! once into an emptyDir needs no privileged mount from the node agent and leaves nothing on the node, at the cost
//! of the image's size in the pod's ephemeral storage (containerDisks are small by design).

use std::collections::BTreeMap;

use contracts::kubevirt::consts::{QEMU_UID, READINESS_GATE_UNPAUSED, ann, label};
use contracts::kubevirt::launcher::{self as paths, LauncherEnv, var};
use contracts::quantity::parse_bytes;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::volume::{CloudInitSource, Volume};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource, ExecAction, HostPathVolumeSource,
    LocalObjectReference, ObjectFieldSelector, PersistentVolumeClaimVolumeSource, Pod, PodReadinessGate,
    PodSecurityContext, PodSpec, Probe, ResourceRequirements, SecretVolumeSource, SecurityContext, Volume as PodVolume,
    VolumeDevice, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};

/// Extra seconds of the pod's grace period over the VMI's (upstream: 15 + 15), so the launcher can finish an ACPI
/// shutdown that used the whole VMI grace period.
pub const GRACE_PADDING_SECS: i64 = 30;
/// The VMI grace period when the spec has none (§2.1).
pub const DEFAULT_GRACE_SECS: i64 = 30;
/// CPU request of the launcher pod when the VMI requests none (upstream's cluster default `cpuRequest`).
pub const DEFAULT_CPU_REQUEST: &str = "100m";
/// Fixed memory overhead of a launcher: virt-launcher, libvirtd and QEMU's own allocations (§2.8).
pub const FIXED_OVERHEAD: u64 = 240 << 20;
/// Memory overhead per vCPU.
pub const PER_VCPU_OVERHEAD: u64 = 8 << 20;
/// Memory overhead of the I/O thread.
pub const IOTHREAD_OVERHEAD: u64 = 8 << 20;
/// Memory overhead of the video device (present unless `autoattachGraphicsDevice: false`).
pub const VIDEO_OVERHEAD: u64 = 32 << 20;
/// Name of the pod volume shared by the init containers (the busybox the containerDisk copies run).
const BIN_VOLUME: &str = "container-disk-bin";
/// Script of a containerDisk init container: `$1` = the `path` in the image (empty: the single file in /disk),
/// `$2` = the destination. The messages are upstream's.
const COPY_SCRIPT: &str = r#"set -eu
fail() { echo "$1" >/dev/termination-log; echo "$1" >&2; exit 1; }
src=$1
if [ -z "$src" ]; then
  [ -d /disk ] || fail "no file found in folder /disk, no disk present"
  n=$(ls -A /disk | wc -l)
  [ "$n" -gt 0 ] || fail "no file found in folder /disk, no disk present"
  [ "$n" -eq 1 ] || fail "more than one file found in folder /disk, only one disk is allowed"
  src=/disk/$(ls -A /disk)
fi
[ -f "$src" ] || fail "Failed to check if an image exists at $src: not a regular file"
cp "$src" "$2.part" || fail "copying $src from the containerDisk image failed"
mv "$2.part" "$2"
"#;

/// Settings of the rendered pods.
#[derive(Debug, Clone, PartialEq)]
pub struct PodSettings {
    /// The virt-launcher image (`compute`, `guest-console-log`, `container-disk-binary`).
    pub launcher_image: String,
    /// Pull policy of the launcher image.
    pub pull_policy: String,
}

/// How a claim is attached, from its PVC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimMode {
    /// `volumeMode: Filesystem` (the default): mounted, the image is `disk.img` in it.
    Filesystem,
    /// `volumeMode: Block`: a raw device.
    Block,
}

/// A volume's claim, resolved by the caller (persistentVolumeClaim or dataVolume → the PVC's name and mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// PVC name.
    pub name: String,
    /// Filesystem or block.
    pub mode: ClaimMode,
    /// Attached read-only.
    pub read_only: bool,
}

/// Guest memory in bytes: `domain.memory.guest`, else `resources.requests.memory`, else `resources.limits.memory`
/// (admission refuses a VMI with none of them; 0 here then).
pub fn guest_memory(vmi: &VirtualMachineInstance) -> u64 {
    let domain = &vmi.spec.domain;
    let resources = domain.resources.as_ref();
    let from = |m: Option<&BTreeMap<String, Quantity>>| m.and_then(|m| m.get("memory")).cloned();
    domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.clone())
        .or_else(|| from(resources.and_then(|r| r.requests.as_ref())))
        .or_else(|| from(resources.and_then(|r| r.limits.as_ref())))
        .and_then(|q| parse_bytes(&q.0).ok())
        .unwrap_or(0)
}

/// Number of vCPUs: sockets × cores × threads (each defaulting to 1).
pub fn vcpus(vmi: &VirtualMachineInstance) -> u64 {
    let cpu = vmi.spec.domain.cpu.as_ref();
    let get = |f: fn(&crds::kubevirt::domain::Cpu) -> Option<u32>| u64::from(cpu.and_then(f).unwrap_or(1).max(1));
    get(|c| c.sockets) * get(|c| c.cores) * get(|c| c.threads)
}

/// The launcher's memory overhead beyond the guest's RAM (§2.8): page tables (RAM/512), the fixed processes,
/// per-vCPU, I/O thread and video costs, plus `memory.reservedOverhead.addedOverhead`.
pub fn memory_overhead(vmi: &VirtualMachineInstance) -> u64 {
    let devices = &vmi.spec.domain.devices;
    let video = if devices.autoattach_graphics_device == Some(false) { 0 } else { VIDEO_OVERHEAD };
    let added = vmi
        .spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.reserved_overhead.as_ref())
        .and_then(|r| r.added_overhead.as_ref())
        .and_then(|q| parse_bytes(&q.0).ok())
        .unwrap_or(0);
    guest_memory(vmi).div_ceil(512)
        + FIXED_OVERHEAD
        + PER_VCPU_OVERHEAD * vcpus(vmi)
        + IOTHREAD_OVERHEAD
        + video
        + added
}

/// The grace period the guest gets for an ACPI shutdown (`terminationGracePeriodSeconds`, default 30).
pub fn vmi_grace(vmi: &VirtualMachineInstance) -> i64 {
    vmi.spec.termination_grace_period_seconds.unwrap_or(DEFAULT_GRACE_SECS).max(0)
}

/// The guest's hostname: `spec.hostname`, else the VMI name cut to a DNS label (63 characters).
pub fn hostname(vmi: &VirtualMachineInstance) -> String {
    vmi.spec.hostname.clone().unwrap_or_else(|| {
        let name = vmi.name_any();
        name.chars().take(63).collect::<String>().trim_end_matches(['-', '.']).to_owned()
    })
}

pub use contracts::kubevirt::launcher::vmi_id;

/// The label selector of every launcher pod of the VMI with UID `uid`.
pub fn pods_selector(uid: &str) -> String {
    format!("{}={},{}={uid}", label::KUBEVIRT, label::VIRT_LAUNCHER, label::CREATED_BY)
}

/// Pod name prefix (`generateName`) of the VMI's launcher pods.
pub fn name_prefix(vmi_name: &str) -> String {
    format!("virt-launcher-{vmi_name}-")
}

/// Name of the init container of containerDisk volume `volume`.
pub fn container_disk_init(volume: &str) -> String {
    format!("volume{volume}-init")
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn empty_dir(name: &str) -> PodVolume {
    PodVolume { name: name.into(), empty_dir: Some(EmptyDirVolumeSource::default()), ..Default::default() }
}

fn quantity(bytes: u64) -> Quantity {
    Quantity(bytes.to_string())
}

fn unprivileged() -> SecurityContext {
    SecurityContext {
        run_as_user: Some(QEMU_UID),
        run_as_group: Some(QEMU_UID),
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), ..Default::default() }),
        ..Default::default()
    }
}

fn small_resources() -> Option<ResourceRequirements> {
    Some(ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("5m".into())),
            ("memory".to_owned(), Quantity("16Mi".into())),
        ])),
        limits: Some(BTreeMap::from([
            ("cpu".to_owned(), Quantity("100m".into())),
            ("memory".to_owned(), Quantity("64Mi".into())),
        ])),
        ..Default::default()
    })
}

/// The `compute` container's resources: the VMI's requests/limits with the memory overhead added, CPU request
/// defaulting to [`DEFAULT_CPU_REQUEST`].
fn compute_resources(vmi: &VirtualMachineInstance, overhead: u64) -> ResourceRequirements {
    let res = vmi.spec.domain.resources.as_ref();
    let mut requests = res.and_then(|r| r.requests.clone()).unwrap_or_default();
    let mut limits = res.and_then(|r| r.limits.clone()).unwrap_or_default();
    let request = requests.get("memory").and_then(|q| parse_bytes(&q.0).ok()).unwrap_or_else(|| guest_memory(vmi));
    requests.insert("memory".into(), quantity(request + overhead));
    if let Some(limit) = limits.get("memory").and_then(|q| parse_bytes(&q.0).ok()) {
        limits.insert("memory".into(), quantity(limit + overhead));
    }
    if !requests.contains_key("cpu") {
        let cpu = limits.get("cpu").cloned().unwrap_or_else(|| Quantity(DEFAULT_CPU_REQUEST.into()));
        requests.insert("cpu".into(), cpu);
    }
    ResourceRequirements {
        requests: Some(requests),
        limits: (!limits.is_empty()).then_some(limits),
        ..Default::default()
    }
}

/// Adds the pod volume(s) and mounts of a cloud-init volume's Secret references.
fn cloud_init_secrets(
    volume: &str,
    source: &CloudInitSource,
    volumes: &mut Vec<PodVolume>,
    mounts: &mut Vec<VolumeMount>,
) {
    let refs = [
        (source.user_data_secret_ref.as_ref(), "user", paths::cloud_init_user_secret_dir(volume)),
        (source.network_data_secret_ref.as_ref(), "network", paths::cloud_init_network_secret_dir(volume)),
    ];
    for (reference, kind, dir) in refs {
        let Some(secret) = reference.and_then(|r| r.name.clone()) else { continue };
        let name = format!("{volume}-cloudinit-{kind}");
        volumes.push(PodVolume {
            name: name.clone(),
            secret: Some(SecretVolumeSource { secret_name: Some(secret), ..Default::default() }),
            ..Default::default()
        });
        mounts.push(mount(&name, &dir, true));
    }
}

/// The pod volume name of VMI volume `volume` (a DNS label, as VMI volume names are; prefixed so it cannot clash
/// with the launcher's own volumes).
fn pod_volume(volume: &str) -> String {
    format!("vol-{volume}")
}

/// The launcher pod's `k8s.v1.cni.cncf.io/networks`: one entry per secondary Multus network (`networkName`
/// `<namespace>/<name>` or `<name>` in the VMI's namespace), each on upstream's hashed pod interface name
/// (`launcher::secondary_pod_interface`); `None` without secondary networks. A `default: true` Multus network
/// replaces the pod network and is not listed here (the launcher refuses it).
pub fn multus_networks(networks: &[crds::kubevirt::network::Network], vmi_namespace: &str) -> Option<String> {
    let list: Vec<serde_json::Value> = networks
        .iter()
        .filter_map(|n| {
            let m = n.multus.as_ref().filter(|m| m.default != Some(true))?;
            let (ns, attachment) = m.network_name.split_once('/').unwrap_or((vmi_namespace, &m.network_name));
            Some(serde_json::json!({
                "name": attachment,
                "namespace": ns,
                "interface": contracts::kubevirt::launcher::secondary_pod_interface(&n.name),
            }))
        })
        .collect();
    (!list.is_empty()).then(|| serde_json::Value::Array(list).to_string())
}

/// Renders the launcher pod of `vmi`. `claims` maps each persistentVolumeClaim/dataVolume volume name to its
/// resolved claim; a volume of those kinds missing from it is left out (the planner never renders a pod before
/// every claim is resolved).
pub fn render(vmi: &VirtualMachineInstance, claims: &BTreeMap<String, Claim>, settings: &PodSettings) -> Pod {
    let name = vmi.name_any();
    let namespace = vmi.namespace().unwrap_or_default();
    let uid = vmi.uid().unwrap_or_default();
    let overhead = memory_overhead(vmi);
    let volumes_spec: &[Volume] = vmi.spec.volumes.as_deref().unwrap_or_default();

    let mut annotations = BTreeMap::from([
        (ann::DOMAIN.to_owned(), name.clone()),
        (ann::DEFAULT_CONTAINER.to_owned(), paths::COMPUTE_CONTAINER.to_owned()),
        (ann::MIGRATION_TRANSPORT_UNIX.to_owned(), "true".to_owned()),
        (ann::MEMORY_OVERHEAD_BYTES.to_owned(), overhead.to_string()),
    ]);
    if let Some(networks) = multus_networks(vmi.spec.networks.as_deref().unwrap_or_default(), &namespace) {
        annotations.insert(ann::MULTUS_NETWORKS.to_owned(), networks);
    }

    let mut volumes = vec![
        empty_dir("private"),
        empty_dir("ephemeral-disks"),
        empty_dir("container-disks"),
        PodVolume {
            name: "sockets".into(),
            host_path: Some(HostPathVolumeSource {
                path: paths::HOST_SOCKETS_DIR.into(),
                type_: Some("DirectoryOrCreate".into()),
            }),
            ..Default::default()
        },
    ];
    let mut mounts = vec![
        mount("private", paths::PRIVATE_DIR, false),
        mount("ephemeral-disks", paths::EPHEMERAL_DISKS_DIR, false),
        mount("container-disks", paths::CONTAINER_DISKS_DIR, true),
        VolumeMount {
            name: "sockets".into(),
            mount_path: paths::POD_SOCKETS_DIR.into(),
            sub_path_expr: Some(format!("$({})/$({})", var::NODE_NAME, var::POD_UID)),
            ..Default::default()
        },
    ];
    let mut devices = Vec::new();
    let mut init_containers = Vec::new();
    let mut pull_secrets = Vec::new();

    for volume in volumes_spec {
        if let Some(disk) = &volume.container_disk {
            if init_containers.is_empty() {
                volumes.push(empty_dir(BIN_VOLUME));
                init_containers.push(Container {
                    name: paths::CONTAINER_DISK_BINARY_CONTAINER.into(),
                    image: Some(settings.launcher_image.clone()),
                    image_pull_policy: Some(settings.pull_policy.clone()),
                    command: Some(vec![
                        "/bin/busybox".into(),
                        "cp".into(),
                        "/bin/busybox".into(),
                        format!("{}/busybox", paths::CONTAINER_DISK_BIN_DIR),
                    ]),
                    volume_mounts: Some(vec![mount(BIN_VOLUME, paths::CONTAINER_DISK_BIN_DIR, false)]),
                    resources: small_resources(),
                    security_context: Some(unprivileged()),
                    ..Default::default()
                });
            }
            if let Some(secret) = &disk.image_pull_secret
                && !pull_secrets.iter().any(|s: &LocalObjectReference| &s.name == secret)
            {
                pull_secrets.push(LocalObjectReference { name: secret.clone() });
            }
            init_containers.push(Container {
                name: container_disk_init(&volume.name),
                image: Some(disk.image.clone()),
                image_pull_policy: disk.image_pull_policy.as_ref().map(|p| p.as_str().to_owned()),
                command: Some(vec![
                    format!("{}/busybox", paths::CONTAINER_DISK_BIN_DIR),
                    "sh".into(),
                    "-c".into(),
                    COPY_SCRIPT.into(),
                    "container-disk".into(),
                    disk.path.clone().unwrap_or_default(),
                    paths::container_disk_copy(&volume.name),
                ]),
                volume_mounts: Some(vec![
                    mount(BIN_VOLUME, paths::CONTAINER_DISK_BIN_DIR, true),
                    mount("container-disks", paths::CONTAINER_DISKS_DIR, false),
                ]),
                resources: small_resources(),
                security_context: Some(unprivileged()),
                termination_message_policy: Some("FallbackToLogsOnError".into()),
                ..Default::default()
            });
        }
        if let Some(claim) = claims.get(&volume.name) {
            let pod_name = pod_volume(&volume.name);
            volumes.push(claim_volume(&volume.name, claim));
            match claim.mode {
                ClaimMode::Filesystem => {
                    mounts.push(mount(&pod_name, &paths::pvc_mount(&volume.name), claim.read_only))
                }
                ClaimMode::Block => {
                    devices.push(VolumeDevice { name: pod_name, device_path: paths::pvc_device(&volume.name) })
                }
            }
        }
        for source in [&volume.cloud_init_no_cloud, &volume.cloud_init_config_drive].into_iter().flatten() {
            cloud_init_secrets(&volume.name, source, &mut volumes, &mut mounts);
        }
    }

    let mut env: Vec<EnvVar> = LauncherEnv {
        vmi_name: name.clone(),
        vmi_namespace: namespace.clone(),
        vmi_uid: uid.clone(),
        vmi_spec: serde_json::to_value(&vmi.spec).unwrap_or_default(),
    }
    .to_env()
    .into_iter()
    .map(|(name, value)| EnvVar { name, value: Some(value), ..Default::default() })
    .collect();
    for (name, field_path) in [(var::POD_UID, "metadata.uid"), (var::NODE_NAME, "spec.nodeName")] {
        env.push(EnvVar {
            name: name.into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector { field_path: field_path.into(), ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }

    let compute = Container {
        name: paths::COMPUTE_CONTAINER.into(),
        image: Some(settings.launcher_image.clone()),
        image_pull_policy: Some(settings.pull_policy.clone()),
        command: Some(vec!["/usr/local/bin/virt-launcher".into()]),
        env: Some(env),
        resources: Some(compute_resources(vmi, overhead)),
        // Upstream's non-root launcher: the qemu user, no privilege escalation, only NET_BIND_SERVICE. What needs
        // root (the masquerade links, the claims' ownership, the DHCP socket) the node agent does for it
        // (launcher/src/setup.rs, node-agent/src/pod_setup.rs); libvirtd is a session daemon.
        security_context: Some(SecurityContext {
            capabilities: Some(Capabilities {
                add: Some(vec!["NET_BIND_SERVICE".into()]),
                drop: Some(vec!["ALL".into()]),
            }),
            ..unprivileged()
        }),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(vec![
                    "/bin/busybox".into(),
                    "test".into(),
                    "-e".into(),
                    paths::SocketDir::in_pod().ready(),
                ]),
            }),
            period_seconds: Some(1),
            timeout_seconds: Some(5),
            failure_threshold: Some(5),
            ..Default::default()
        }),
        volume_mounts: Some(mounts),
        volume_devices: (!devices.is_empty()).then_some(devices),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    let log = paths::serial_log();
    let console = Container {
        name: paths::CONSOLE_LOG_CONTAINER.into(),
        image: Some(settings.launcher_image.clone()),
        image_pull_policy: Some(settings.pull_policy.clone()),
        command: Some(vec![
            "/bin/busybox".into(),
            "sh".into(),
            "-c".into(),
            format!(
                // The shell stays PID 1 with a TERM handler (a PID 1 without one ignores SIGTERM, which would
                // hold the pod for its whole grace period); tail runs as its child and gets a second (its poll
                // period) to print the guest's last lines.
                "trap 'sleep 1; kill $t 2>/dev/null; exit 0' TERM; until [ -e {log} ]; do sleep 0.2; done; \
                 /bin/busybox tail -n +1 -F {log} & t=$!; wait $t"
            ),
        ]),
        volume_mounts: Some(vec![mount("private", paths::PRIVATE_DIR, true)]),
        resources: small_resources(),
        security_context: Some(unprivileged()),
        ..Default::default()
    };

    let mut pod = shell(vmi, annotations);
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.init_containers = (!init_containers.is_empty()).then_some(init_containers);
    spec.containers = vec![compute, console];
    spec.volumes = Some(volumes);
    spec.termination_grace_period_seconds = Some(vmi_grace(vmi) + GRACE_PADDING_SECS);
    spec.readiness_gates = Some(vec![PodReadinessGate { condition_type: READINESS_GATE_UNPAUSED.into() }]);
    spec.hostname = Some(hostname(vmi));
    // Upstream's non-root pod: every container runs as the qemu user; volumes that support it belong to its group.
    spec.security_context = Some(PodSecurityContext {
        run_as_user: Some(QEMU_UID),
        run_as_group: Some(QEMU_UID),
        run_as_non_root: Some(true),
        fs_group: Some(QEMU_UID),
        ..Default::default()
    });
    spec.subdomain = vmi.spec.subdomain.clone();
    spec.dns_policy = vmi.spec.dns_policy.clone();
    spec.dns_config = vmi.spec.dns_config.clone();
    spec.image_pull_secrets = (!pull_secrets.is_empty()).then_some(pull_secrets);
    pod
}

/// What every pod of `vmi` shares: `generateName`, the launcher labels, `annotations`, the VMI as controller
/// owner, and the VMI's placement (node selector plus `kubevirt.io/schedulable`, affinity, tolerations, topology
/// spread, priority class, scheduler); restart policy `Never`, no service account token.
fn shell(vmi: &VirtualMachineInstance, annotations: BTreeMap<String, String>) -> Pod {
    let name = vmi.name_any();
    let uid = vmi.uid().unwrap_or_default();
    let mut labels = vmi.labels().clone();
    labels.insert(label::KUBEVIRT.into(), label::VIRT_LAUNCHER.into());
    labels.insert(label::CREATED_BY.into(), uid.clone());
    labels.insert(label::VM_NAME.into(), hostname(vmi));
    labels.insert(label::VMI_ID.into(), vmi_id(&name));
    let spec = &vmi.spec;
    let mut node_selector = spec.node_selector.clone().unwrap_or_default();
    node_selector.insert(label::SCHEDULABLE.into(), "true".into());
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(name_prefix(&name)),
            namespace: vmi.namespace(),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: VirtualMachineInstance::api_version(&()).into_owned(),
                kind: VirtualMachineInstance::kind(&()).into_owned(),
                name,
                uid,
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            restart_policy: Some("Never".into()),
            node_selector: Some(node_selector),
            affinity: spec.affinity.clone(),
            tolerations: spec.tolerations.clone(),
            topology_spread_constraints: spec.topology_spread_constraints.clone(),
            priority_class_name: spec.priority_class_name.clone(),
            scheduler_name: spec.scheduler_name.clone(),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            ..Default::default()
        }),
        status: None,
    }
}

/// The pod volume of the VMI volume `volume`'s claim (the launcher's and the temporary pod's).
fn claim_volume(volume: &str, claim: &Claim) -> PodVolume {
    PodVolume {
        name: pod_volume(volume),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.name.clone(),
            read_only: claim.read_only.then_some(true),
        }),
        ..Default::default()
    }
}

/// Whether `pod` is a temporary first-consumer pod ([`render_first_consumer`]), not a launcher.
pub fn is_first_consumer(pod: &Pod) -> bool {
    pod.annotations().get(ann::EPHEMERAL_PROVISIONING).is_some_and(|v| v == "true")
}

/// Renders the temporary pod that binds the VMI's WaitForFirstConsumer claims before its DataVolumes are
/// imported (upstream's "temporary pod"): the launcher pod's placement and compute resources, so the scheduler
/// picks a node the VM fits on and the claims are provisioned there; every claim in `claims` as a pod volume; one
/// container that exits at once. Annotated `kubevirt.io/ephemeral-provisioning: "true"`; the VMI stays Pending
/// and the controller deletes the pod once no claim waits for a consumer.
pub fn render_first_consumer(
    vmi: &VirtualMachineInstance,
    claims: &BTreeMap<String, Claim>,
    settings: &PodSettings,
) -> Pod {
    let annotations = BTreeMap::from([(ann::EPHEMERAL_PROVISIONING.to_owned(), "true".to_owned())]);
    let mut pod = shell(vmi, annotations);
    let volumes = claims.iter().map(|(volume, claim)| claim_volume(volume, claim)).collect();
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.volumes = Some(volumes);
    spec.termination_grace_period_seconds = Some(0);
    spec.containers = vec![Container {
        name: paths::COMPUTE_CONTAINER.into(),
        image: Some(settings.launcher_image.clone()),
        image_pull_policy: Some(settings.pull_policy.clone()),
        command: Some(vec!["/bin/busybox".into(), "echo".into(), "bound PVCs".into()]),
        resources: Some(compute_resources(vmi, memory_overhead(vmi))),
        security_context: Some(unprivileged()),
        ..Default::default()
    }];
    pod
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "testvmi", "namespace": "ns", "uid": "u-1", "labels": {"special": "key"}},
            "spec": spec,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        v.metadata.labels.get_or_insert_default();
        v
    }

    fn settings() -> PodSettings {
        PodSettings { launcher_image: "reg/virt-launcher:1".into(), pull_policy: "IfNotPresent".into() }
    }

    fn ephemeral() -> VirtualMachineInstance {
        vmi(json!({
            "domain": {"memory": {"guest": "64Mi"}, "resources": {},
                       "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]}},
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {"zone": "a"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "priorityClassName": "high", "schedulerName": "default-scheduler",
            "volumes": [{"name": "containerdisk", "containerDisk": {"image": "reg/guest:1", "imagePullPolicy": "Always"}}]
        }))
    }

    #[test]
    fn the_launcher_pod_has_upstreams_name_labels_annotations_and_scheduling() {
        let pod = render(&ephemeral(), &BTreeMap::new(), &settings());
        let meta = &pod.metadata;
        assert_eq!(meta.generate_name.as_deref(), Some("virt-launcher-testvmi-"));
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(labels.get("kubevirt.io").map(String::as_str), Some("virt-launcher"));
        assert_eq!(labels.get("kubevirt.io/created-by").map(String::as_str), Some("u-1"));
        assert_eq!(labels.get("vm.kubevirt.io/name").map(String::as_str), Some("testvmi"));
        assert_eq!(labels.get("vmi.kubevirt.io/id").map(String::as_str), Some("testvmi"));
        assert_eq!(labels.get("special").map(String::as_str), Some("key"));
        let anns = meta.annotations.clone().unwrap_or_default();
        assert_eq!(anns.get("kubevirt.io/domain").map(String::as_str), Some("testvmi"));
        assert_eq!(anns.get("kubectl.kubernetes.io/default-container").map(String::as_str), Some("compute"));
        assert_eq!(anns.get("kubevirt.io/migrationTransportUnix").map(String::as_str), Some("true"));
        let owner = &meta.owner_references.clone().unwrap_or_default()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.controller, owner.uid.as_str()),
            ("VirtualMachineInstance", Some(true), "u-1")
        );
        let spec = pod.spec.unwrap_or_default();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        assert_eq!(
            spec.node_selector,
            Some(BTreeMap::from([("kubevirt.io/schedulable".into(), "true".into()), ("zone".into(), "a".into())]))
        );
        assert_eq!(spec.priority_class_name.as_deref(), Some("high"));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert_eq!(spec.tolerations.map(|t| t.len()), Some(1));
        assert_eq!(spec.readiness_gates.unwrap_or_default()[0].condition_type, "kubevirt.io/virtual-machine-unpaused");
        assert_eq!((spec.automount_service_account_token, spec.enable_service_links), (Some(false), Some(false)));
        let names: Vec<_> = spec.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["compute", "guest-console-log"]);
        let inits: Vec<_> = spec.init_containers.unwrap_or_default().into_iter().map(|c| (c.name, c.image)).collect();
        assert_eq!(
            inits,
            [
                ("container-disk-binary".to_owned(), Some("reg/virt-launcher:1".to_owned())),
                ("volumecontainerdisk-init".to_owned(), Some("reg/guest:1".to_owned())),
            ]
        );
    }

    #[test]
    fn memory_request_is_guest_plus_overhead_and_published() {
        let v = ephemeral();
        // 64Mi/512 + 240Mi + 8Mi × 1 vCPU + 8Mi iothread + 32Mi video
        let want = (64u64 << 20) / 512 + (288 << 20);
        assert_eq!(memory_overhead(&v), want);
        let pod = render(&v, &BTreeMap::new(), &settings());
        let anns = pod.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(anns.get("kubevirt.io/memory-overhead-bytes"), Some(&want.to_string()));
        let compute = &pod.spec.unwrap_or_default().containers[0];
        let res = compute.resources.clone().unwrap_or_default();
        let requests = res.requests.unwrap_or_default();
        assert_eq!(requests.get("memory"), Some(&Quantity(((64u64 << 20) + want).to_string())));
        assert_eq!(requests.get("cpu"), Some(&Quantity("100m".into())));
        assert_eq!(res.limits, None);
    }

    #[test]
    fn explicit_requests_limits_and_topology_are_honoured() {
        let v = vmi(json!({"domain": {
            "cpu": {"sockets": 2, "cores": 2},
            "resources": {"requests": {"memory": "128Mi", "cpu": "1"}, "limits": {"memory": "256Mi", "cpu": "2"}},
            "memory": {"reservedOverhead": {"addedOverhead": "10Mi"}},
            "devices": {"autoattachGraphicsDevice": false}}}));
        assert_eq!(vcpus(&v), 4);
        assert_eq!(guest_memory(&v), 128 << 20);
        let overhead = (128u64 << 20) / 512 + (240 << 20) + (32 << 20) + (8 << 20) + (10 << 20);
        assert_eq!(memory_overhead(&v), overhead);
        let res = compute_resources(&v, overhead);
        let requests = res.requests.unwrap_or_default();
        let limits = res.limits.unwrap_or_default();
        assert_eq!(requests.get("memory"), Some(&Quantity(((128u64 << 20) + overhead).to_string())));
        assert_eq!(limits.get("memory"), Some(&Quantity(((256u64 << 20) + overhead).to_string())));
        assert_eq!(
            (requests.get("cpu"), limits.get("cpu")),
            (Some(&Quantity("1".into())), Some(&Quantity("2".into())))
        );
    }

    #[test]
    fn claims_become_mounts_or_devices_and_cloud_init_secrets_are_mounted() {
        let v = vmi(json!({"domain": {"memory": {"guest": "64Mi"}, "devices": {}},
        "volumes": [
            {"name": "fs", "persistentVolumeClaim": {"claimName": "disk-fs"}},
            {"name": "blk", "dataVolume": {"name": "dv-blk"}},
            {"name": "ci", "cloudInitNoCloud": {"secretRef": {"name": "s1"}, "networkDataSecretRef": {"name": "s2"}}}
        ]}));
        let claims = BTreeMap::from([
            ("fs".to_owned(), Claim { name: "disk-fs".into(), mode: ClaimMode::Filesystem, read_only: false }),
            ("blk".to_owned(), Claim { name: "dv-blk".into(), mode: ClaimMode::Block, read_only: false }),
        ]);
        let spec = render(&v, &claims, &settings()).spec.unwrap_or_default();
        assert!(spec.init_containers.is_none(), "no containerDisk, no init containers");
        let compute = &spec.containers[0];
        let mounts: BTreeMap<_, _> =
            compute.volume_mounts.clone().unwrap_or_default().into_iter().map(|m| (m.mount_path, m.name)).collect();
        assert_eq!(mounts.get("/var/run/kubevirt-private/vmi-disks/fs").map(String::as_str), Some("vol-fs"));
        assert_eq!(
            mounts.get("/var/run/kubevirt-private/cloud-init-secrets/ci/user").map(String::as_str),
            Some("ci-cloudinit-user")
        );
        assert!(mounts.contains_key("/var/run/kubevirt-private/cloud-init-secrets/ci/network"));
        let devices = compute.volume_devices.clone().unwrap_or_default();
        assert_eq!((devices[0].name.as_str(), devices[0].device_path.as_str()), ("vol-blk", "/dev/blk"));
        let volumes = spec.volumes.unwrap_or_default();
        let claim_of = |n: &str| {
            volumes.iter().find(|v| v.name == n).and_then(|v| v.persistent_volume_claim.clone()).map(|c| c.claim_name)
        };
        assert_eq!((claim_of("vol-fs").as_deref(), claim_of("vol-blk").as_deref()), (Some("disk-fs"), Some("dv-blk")));
        // The sockets directory is the pod's own subdirectory of the node's.
        let sockets = compute.volume_mounts.clone().unwrap_or_default().into_iter().find(|m| m.name == "sockets");
        assert_eq!(
            sockets.and_then(|m| m.sub_path_expr).as_deref(),
            Some("$(KUBEVIRT_RS_NODE_NAME)/$(KUBEVIRT_RS_POD_UID)")
        );
    }

    #[test]
    fn secondary_multus_networks_are_requested_on_upstreams_interface_names() {
        let v = vmi(serde_json::json!({
            "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}, {"name": "ptp", "bridge": {}},
                                                  {"name": "other", "bridge": {}}]}},
            "networks": [{"name": "default", "pod": {}}, {"name": "ptp", "multus": {"networkName": "ptp-conf"}},
                         {"name": "other", "multus": {"networkName": "infra/br"}}]
        }));
        let pod = render(&v, &BTreeMap::new(), &settings());
        let anns = pod.metadata.annotations.clone().unwrap_or_default();
        let list: serde_json::Value =
            serde_json::from_str(anns.get(ann::MULTUS_NETWORKS).map(String::as_str).unwrap_or("null"))
                .unwrap_or_default();
        assert_eq!(
            list,
            serde_json::json!([
                {"name": "ptp-conf", "namespace": v.namespace().unwrap_or_default(), "interface": "pode31d7ce2712"},
                {"name": "br", "namespace": "infra",
                 "interface": contracts::kubevirt::launcher::secondary_pod_interface("other")},
            ])
        );
        assert!(!render(&ephemeral(), &BTreeMap::new(), &settings()).annotations().contains_key(ann::MULTUS_NETWORKS));
    }

    #[test]
    fn the_launcher_environment_round_trips() {
        let v = ephemeral();
        let pod = render(&v, &BTreeMap::new(), &settings());
        let env = pod.spec.unwrap_or_default().containers[0].env.clone().unwrap_or_default();
        let mut map: BTreeMap<String, String> =
            env.iter().filter_map(|e| Some((e.name.clone(), e.value.clone()?))).collect();
        assert!(env.iter().any(|e| e.name == var::POD_UID && e.value_from.is_some()));
        map.insert(var::POD_UID.into(), "p".into());
        let (got, pod_uid) = LauncherEnv::from_env(&map).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (got.vmi_name.as_str(), got.vmi_namespace.as_str(), got.vmi_uid.as_str(), pod_uid.as_str()),
            ("testvmi", "ns", "u-1", "p")
        );
        assert_eq!(got.vmi_spec, serde_json::to_value(&v.spec).unwrap_or_default());
    }

    #[test]
    fn long_names_get_a_hashed_id_and_a_cut_hostname() {
        let long = "a".repeat(70);
        assert_eq!(vmi_id(&long).len(), 32);
        assert_eq!(vmi_id("short"), "short");
        let mut v = ephemeral();
        v.metadata.name = Some(long);
        assert_eq!(hostname(&v).len(), 63);
    }
}
