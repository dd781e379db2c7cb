//! CPU and memory hotplug on the two-node test cluster (issue 15, contract §7.5): a running VM gets more CPU
//! sockets and guest memory by editing its template; the VM controller patches the VMI, the VMI gets
//! `HotVCPUChange` / `HotMemoryChange`, a workload-update migration moves it into a launcher pod sized for the new
//! spec, and the target node agent plugs the vCPUs and the virtio-mem memory in. The guest itself proves it: its
//! console's `KUBEVIRT-RS-GUEST-RESOURCES` line and its HTTP page show the new CPU count and 512 MiB more memory,
//! with the same boot (uptime continues). Reductions and sizes beyond the maximum ask for a restart instead
//! (`RestartRequired` with upstream's messages).
//!
//! Needs the test cluster with two nodes (`KV_NODES=2 tests/cluster/up`) and the installed stack; run with
//! `--ignored --test-threads=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::time::Duration;

use crds::kubevirt::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use crds::kubevirt::vm::VirtualMachineConditionType;
use crds::kubevirt::vmi::{ConditionStatus, VirtualMachineInstanceConditionType as Type, VirtualMachineInstancePhase};
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube_test_support::{Error, Result, poll_object, poll_until};
use stack_support::vmi::{MARKER, VmiEnv, http_get, http_get_url, vmi_ip};
use stack_support::{local_images, upstream_example};

const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(300);
const TICK: &str = "KUBEVIRT-RS-GUEST-TICK";
const RESOURCES: &str = "KUBEVIRT-RS-GUEST-RESOURCES";

fn err(message: impl Into<String>) -> Error {
    Error::ClusterUp(message.into())
}

/// The `uptime=` of the last line of `log` containing `needle`.
fn last_uptime(log: &str, needle: &str) -> Option<f64> {
    log.lines().rev().find(|l| l.contains(needle))?.split("uptime=").nth(1)?.split_whitespace().next()?.parse().ok()
}

/// `(cpus, memory KiB)` of the last `KUBEVIRT-RS-GUEST-RESOURCES` line of `log`.
fn resources(log: &str) -> Option<(u32, u64)> {
    let line = log.lines().rev().find(|l| l.contains(RESOURCES))?;
    let field = |name: &str| line.split_whitespace().find_map(|w| w.strip_prefix(name));
    Some((field("cpus=")?.parse().ok()?, field("memory-kib=")?.parse().ok()?))
}

/// Upstream's `vm-cirros.yaml` as `name`, running, with a masquerade interface (migratable), one socket of at
/// most two and 1Gi of guest memory of at most 2Gi (memory hotplug needs at least 1Gi).
fn hotplug_vm(env: &VmiEnv, name: &str) -> Result<String> {
    let yaml = local_images(&upstream_example("vm-cirros.yaml")?, &env.image)
        .replace("vm-cirros", name)
        .replace("runStrategy: Halted", "runStrategy: Always")
        .replace(
            "            name: cloudinitdisk\n        memory",
            "            name: cloudinitdisk\n          interfaces:\n          - masquerade: {}\n            name: default\n        memory",
        )
        .replace(
            "        memory:\n          guest: 128Mi\n",
            "        cpu:\n          sockets: 1\n          maxSockets: 2\n        memory:\n          guest: 1Gi\n          maxGuest: 2Gi\n",
        )
        .replace("      terminationGracePeriodSeconds: 0\n", "      networks:\n      - name: default\n        pod: {}\n      terminationGracePeriodSeconds: 0\n");
    for want in ["maxSockets: 2", "maxGuest: 2Gi", "- masquerade: {}", "pod: {}", "runStrategy: Always"] {
        if !yaml.contains(want) {
            return Err(err(format!("upstream's vm-cirros.yaml changed shape: no {want:?} in\n{yaml}")));
        }
    }
    Ok(yaml)
}

async fn patch_vm(env: &VmiEnv, name: &str, domain: serde_json::Value) -> Result<()> {
    let vms: Api<VirtualMachine> = Api::namespaced(env.client.clone(), env.ns.name());
    let patch = serde_json::json!({"spec": {"template": {"spec": {"domain": domain}}}});
    vms.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

fn describe(env: &VmiEnv, name: &str) -> String {
    let vm = env.kubectl(&["get", "vm", name, "-o", "yaml"]).unwrap_or_default();
    let vmi = env.kubectl(&["get", "vmi", name, "-o", "yaml"]).unwrap_or_default();
    let vmims = env.kubectl(&["get", "vmim", "-o", "yaml"]).unwrap_or_default();
    let events = env.kubectl(&["get", "events", "--sort-by=.lastTimestamp"]).unwrap_or_default();
    format!("--- vm:\n{vm}\n--- vmi:\n{vmi}\n--- vmims:\n{vmims}\n--- events:\n{events}")
}

async fn restart_required(env: &VmiEnv, name: &str, message: &str) -> Result<()> {
    let vms: Api<VirtualMachine> = Api::namespaced(env.client.clone(), env.ns.name());
    poll_object(&vms, name, Duration::from_secs(60), |vm: &VirtualMachine| {
        vm.status
            .as_ref()
            .and_then(|s| s.condition(&VirtualMachineConditionType::RestartRequired))
            .is_some_and(|c| c.status == ConditionStatus::True && c.message.as_deref() == Some(message))
    })
    .await
    .map_err(|e| err(format!("RestartRequired {message:?}: {e}\n{}", describe(env, name))))
    .map(drop)
}

fn memory_request(pod: &k8s_openapi::api::core::v1::Pod) -> u64 {
    let compute = pod.spec.as_ref().and_then(|s| s.containers.iter().find(|c| c.name == "compute"));
    let q = compute.and_then(|c| c.resources.as_ref()?.requests.as_ref()?.get("memory").cloned());
    q.and_then(|q| contracts::quantity::parse_bytes(&q.0).ok()).unwrap_or(0)
}

/// The launcher pod's memory overhead (its `kubevirt.io/memory-overhead-bytes` annotation).
fn overhead(pod: &k8s_openapi::api::core::v1::Pod) -> u64 {
    pod.annotations().get("kubevirt.io/memory-overhead-bytes").and_then(|o| o.parse().ok()).unwrap_or(u64::MAX / 2)
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn more_sockets_and_memory_reach_the_running_guest_through_a_workload_update_migration() -> Result<()> {
    let env = VmiEnv::on_installed_stack("hotplug-cpu-mem").await?;
    let name = "vm-hotplug";
    env.kubectl_manifest("create", &hotplug_vm(&env, name)?)?;
    let vmi = env.wait_phase(name, VirtualMachineInstancePhase::Running, BOOT_TIMEOUT).await?;
    let source = env.launcher_pod(&vmi).await?;
    let console = env.wait_console(&source.name_any(), RESOURCES, BOOT_TIMEOUT).await?;
    let (cpus_before, kib_before) = resources(&console).ok_or_else(|| err(format!("no resources line:\n{console}")))?;
    assert_eq!(cpus_before, 1, "one socket at boot:\n{console}");
    let st = vmi.status.clone().unwrap_or_default();
    assert_eq!(st.current_cpu_topology.as_ref().and_then(|t| t.sockets), Some(1), "{st:?}");
    assert_eq!(st.memory.as_ref().and_then(|m| m.guest_at_boot.clone()).map(|q| q.0).as_deref(), Some("1Gi"));
    let migratable = poll_object(&env.vmis(), name, Duration::from_secs(60), |v: &VirtualMachineInstance| {
        stack_support::vmi::condition(v, Type::LiveMigratable).is_some()
    })
    .await?;
    assert_eq!(stack_support::vmi::condition(&migratable, Type::LiveMigratable), Some(ConditionStatus::True));
    env.wait_console(&source.name_any(), &format!("{TICK} 2 "), BOOT_TIMEOUT).await?;
    let uptime_before = last_uptime(&env.console(&source.name_any()), TICK).ok_or_else(|| err("no tick"))?;

    // Two sockets and 1536Mi, on the VM.
    patch_vm(&env, name, serde_json::json!({"cpu": {"sockets": 2}, "memory": {"guest": "1536Mi"}})).await?;
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
    let selector = format!("kubevirt.io/vmi-name={name}");
    let migration = poll_until("a workload-update migration to end", MIGRATION_TIMEOUT, || async {
        let list = vmims.list(&ListParams::default().labels(&selector)).await.ok()?;
        list.items.into_iter().find(|m| m.is_final())
    })
    .await
    .map_err(|e| err(format!("{e}\n{}", describe(&env, name))))?;
    assert!(migration.name_any().starts_with("kubevirt-workload-update-"), "{}", migration.name_any());
    assert_eq!(
        migration.annotations().get("kubevirt.io/workloadUpdateMigration").map(String::as_str),
        Some(""),
        "{:?}",
        migration.metadata
    );
    assert_eq!(migration.phase(), Some(&MigrationPhase::Succeeded), "{}", describe(&env, name));

    // The VMI: new spec, the new topology and memory recorded, the conditions gone, on the other node.
    let vmi = poll_object(&env.vmis(), name, Duration::from_secs(60), |v: &VirtualMachineInstance| {
        let s = v.status.as_ref();
        s.and_then(|s| s.memory.as_ref()?.guest_current.clone()).map(|q| q.0).as_deref() == Some("1536Mi")
    })
    .await
    .map_err(|e| err(format!("guestCurrent 1536Mi: {e}\n{}", describe(&env, name))))?;
    let st = vmi.status.clone().unwrap_or_default();
    assert_eq!(vmi.spec.domain.cpu.as_ref().and_then(|c| c.sockets), Some(2));
    assert_eq!(st.current_cpu_topology.as_ref().and_then(|t| t.sockets), Some(2), "{st:?}");
    let memory = st.memory.clone().unwrap_or_default();
    assert_eq!(memory.guest_requested.map(|q| q.0).as_deref(), Some("1536Mi"), "{st:?}");
    assert_eq!(memory.guest_at_boot.map(|q| q.0).as_deref(), Some("1Gi"), "{st:?}");
    assert!(st.condition(&Type::HotVcpuChange).is_none() && st.condition(&Type::HotMemoryChange).is_none(), "{st:?}");
    assert_ne!(st.node_name, source.spec.as_ref().and_then(|s| s.node_name.clone()), "migrated to the other node");
    let target_name = st.migration_state.as_ref().and_then(|m| m.target_pod.clone()).unwrap_or_default();
    let target = env.pods().get(&target_name).await?;
    assert_eq!(memory_request(&source), (1 << 30) + overhead(&source), "the source pod holds 1Gi and the overhead");
    assert_eq!(
        memory_request(&target),
        (1536 << 20) + overhead(&target),
        "the target pod holds 1536Mi and the overhead"
    );

    // The guest: two CPUs, 512 MiB more, the same boot.
    let log = poll_until("the guest to report the new CPU and memory", Duration::from_secs(90), || async {
        let log = env.console(&target_name);
        resources(&log).filter(|(c, k)| *c == 2 && *k == kib_before + 512 * 1024).map(|_| log)
    })
    .await
    .map_err(|e| err(format!("{e}\n{}", env.console(&target_name))))?;
    assert_eq!(log.matches(MARKER).count(), 0, "no boot on the target:\n{log}");
    let page = http_get(&vmi_ip(&vmi)).await?;
    assert!(page.contains("cpus=2"), "{page}");
    assert!(page.contains(&format!("memory-kib={}", kib_before + 512 * 1024)), "{page}");
    let uptime = page.lines().find_map(|l| l.strip_prefix("uptime=")).and_then(|u| u.trim().parse::<f64>().ok());
    assert!(uptime.is_some_and(|u| u > uptime_before), "uptime continued: {page}");
    let domain = env.domain_xml(&target_name, name)?;
    assert!(domain.contains("<vcpu id='1' enabled='yes' hotpluggable='yes'"), "{domain}");
    assert!(domain.contains("<currentMemory unit='KiB'>1572864</currentMemory>"), "{domain}");
    assert!(domain.contains("model='virtio-mem'"), "{domain}");

    // What cannot be done live asks for a restart (upstream's messages); nothing migrates.
    let migrations_before = vmims.list(&ListParams::default().labels(&selector)).await?.items.len();
    patch_vm(&env, name, serde_json::json!({"cpu": {"sockets": 1}})).await?;
    restart_required(&env, name, "Reduction of CPU socket count requires a restart").await?;
    patch_vm(&env, name, serde_json::json!({"cpu": {"sockets": 2}, "memory": {"guest": "3Gi"}})).await?;
    restart_required(
        &env,
        name,
        "memory hotplug not supported, Guest memory is greater than the configured maxGuest memory",
    )
    .await?;
    patch_vm(&env, name, serde_json::json!({"memory": {"guest": "1536Mi"}, "cpu": {"cores": 2}})).await?;
    restart_required(&env, name, "a non-live-updatable field was changed in the template spec").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let vmi_now = env.vmis().get(name).await?;
    assert_eq!(vmi_now.uid(), vmi.uid(), "the same VMI");
    assert_eq!(vmi_now.spec.domain.cpu.as_ref().and_then(|c| c.sockets), Some(2), "nothing applied live");
    assert_eq!(vmims.list(&ListParams::default().labels(&selector)).await?.items.len(), migrations_before);
    env.ns.clone().delete().await
}

/// `(device, bytes)` of the last `KUBEVIRT-RS-GUEST-DISKS` line of `log`.
fn disks(log: &str) -> Option<Vec<(String, u64)>> {
    let line = log.lines().rev().find(|l| l.contains("KUBEVIRT-RS-GUEST-DISKS"))?;
    let list = line.split("KUBEVIRT-RS-GUEST-DISKS").nth(1)?;
    list.split_whitespace()
        .map(|d| d.split_once('=').and_then(|(n, b)| Some((n.to_owned(), b.parse().ok()?))))
        .collect()
}

/// A 64Mi claim `name` (`Filesystem` or `Block`) holding `marker` at its start (the image `disk.img` of a
/// Filesystem claim, the device itself of a Block one), written by a busybox pod that then exits.
async fn claim_with_marker(env: &VmiEnv, name: &str, mode: &str, marker: &str, shared: bool) -> Result<()> {
    let (access, class) = if shared { ("ReadWriteMany", "shared") } else { ("ReadWriteOnce", "local") };
    let (volume_use, write) = if mode == "Block" {
        (
            "volumeDevices: [{name: data, devicePath: /dev/data}]".to_owned(),
            format!("printf '{marker}' | dd of=/dev/data conv=notrunc 2>/dev/null"),
        )
    } else {
        (
            "volumeMounts: [{name: data, mountPath: /data}]".to_owned(),
            format!("printf '{marker}' > /data/disk.img && truncate -s 64M /data/disk.img"),
        )
    };
    let yaml = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec:\n  accessModes: [{access}]\n  \
         storageClassName: {class}\n  volumeMode: {mode}\n  resources: {{requests: {{storage: 64Mi}}}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: write-{name}}}\n\
         spec:\n  restartPolicy: Never\n  containers:\n  - name: w\n    image: {image}\n    command: [/bin/sh, -c, \"{write}\"]\n    \
         {volume_use}\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {name}}}}}]\n",
        image = kube_test_support::test_image("busybox"),
    );
    env.kubectl_manifest("create", &yaml)?;
    poll_object(
        &env.pods(),
        &format!("write-{name}"),
        Duration::from_secs(120),
        |p: &k8s_openapi::api::core::v1::Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"),
    )
    .await
    .map_err(|e| err(format!("writing the marker into {name}: {e}")))?;
    env.kubectl(&["delete", "pod", &format!("write-{name}"), "--wait=true"])?;
    Ok(())
}

fn volume_status(vmi: &VirtualMachineInstance, name: &str) -> Option<crds::kubevirt::vmi::VolumeStatus> {
    vmi.status.as_ref()?.volume_status.as_ref()?.iter().find(|s| s.name == name).cloned()
}

/// Waits for volume `name` to be Ready on the VMI and for the guest to see a new disk of 64Mi holding `marker`;
/// returns the guest device.
async fn hotplugged(env: &VmiEnv, vm: &str, pod: &str, name: &str, marker: &str) -> Result<String> {
    let vmi = poll_object(&env.vmis(), vm, Duration::from_secs(120), |v: &VirtualMachineInstance| {
        volume_status(v, name).is_some_and(|s| s.phase == Some(crds::kubevirt::vmi::VolumePhase::Ready))
    })
    .await
    .map_err(|e| err(format!("volume {name} Ready: {e}\n{}", describe(env, vm))))?;
    let st = volume_status(&vmi, name).unwrap_or_default();
    assert_eq!(st.reason.as_deref(), Some("VolumeReady"), "{st:?}");
    assert_eq!(st.message, Some(format!("Successfully attach hotplugged volume {name} to VM")), "{st:?}");
    let attach_pod = st.hotplug_volume.as_ref().and_then(|h| h.attach_pod_name.clone()).unwrap_or_default();
    assert!(attach_pod.starts_with("hp-volume-"), "{st:?}");
    let attachment = env.pods().get(&attach_pod).await?;
    assert_eq!(attachment.labels().get("kubevirt.io").map(String::as_str), Some("hotplug-disk"));
    assert_eq!(
        attachment.spec.as_ref().and_then(|s| s.node_name.clone()),
        vmi.status.as_ref().and_then(|s| s.node_name.clone()),
        "the attachment pod runs on the VMI's node"
    );
    let target = st.target.clone();
    assert!(target.starts_with("sd"), "{st:?}");
    poll_until(&format!("the guest to see {target}"), Duration::from_secs(60), || async {
        disks(&env.console(pod)).filter(|d| d.iter().any(|(n, b)| *n == target && *b == 64 << 20))
    })
    .await
    .map_err(|e| err(format!("{e}\n{}", env.console(pod))))?;
    let page = http_get_url(&format!("http://{}/?disk={target}", vmi_ip(&vmi))).await?;
    assert!(page.contains(&format!("disk={target} head={marker}")), "the guest reads the claim's bytes: {page}");
    Ok(target)
}

#[tokio::test]
#[ignore = "needs the test cluster with the stack installed"]
async fn volumes_hotplug_into_a_running_vm_and_out_again_with_upstreams_virtctl_and_ours() -> Result<()> {
    let env = VmiEnv::on_installed_stack("hotplug-volume").await?;
    let vm = "vm-volumes";
    let yaml = local_images(&upstream_example("vm-cirros.yaml")?, &env.image)
        .replace("vm-cirros", vm)
        .replace("runStrategy: Halted", "runStrategy: Always");
    env.kubectl_manifest("create", &yaml)?;
    // A VMI of its own beside the VM (booting meanwhile): the VMI path.
    let alone = stack_support::local_images(&upstream_example("vmi-migratable.yaml")?, &env.image)
        .replace("name: vmi-migratable", "name: vmi-alone");
    env.kubectl_manifest("create", &alone)?;
    claim_with_marker(&env, "data", "Filesystem", "KUBEVIRT-RS-HOTPLUG-FS", false).await?;
    claim_with_marker(&env, "raw", "Block", "KUBEVIRT-RS-HOTPLUG-BLOCK", false).await?;
    claim_with_marker(&env, "solo", "Filesystem", "KUBEVIRT-RS-HOTPLUG-SOLO", true).await?;
    let vmi = env.wait_phase(vm, VirtualMachineInstancePhase::Running, BOOT_TIMEOUT).await?;
    let pod = env.launcher_pod(&vmi).await?.name_any();
    let console = env.wait_console(&pod, "KUBEVIRT-RS-GUEST-DISKS", BOOT_TIMEOUT).await?;
    let before = disks(&console).ok_or_else(|| err(format!("no disks line:\n{console}")))?;
    let upstream =
        tokio::task::spawn_blocking(stack_support::upstream_virtctl).await.map_err(|e| err(e.to_string()))??;
    let ours = kube_test_support::workspace_binary("virtctl")?;
    let virtctl = |bin: &std::path::Path, args: &[&str]| env.virtctl(bin, args);

    // The VMI path on a VM's VMI: refused as upstream's virt-api does (DeclarativeHotplugVolumes).
    let body = serde_json::json!({"name": "data", "disk": {"disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "data"}}});
    let raw = format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{}/virtualmachineinstances/{vm}/addvolume",
        env.ns.name()
    );
    let refused = env.cluster.kubectl_with_manifest(&["replace", "--raw", &raw], &body.to_string())?;
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && text.contains(&format!("VMI {}/{vm} is owned by a VM", env.ns.name())),
        "{text}"
    );

    // Upstream's virtctl (v1.8: the VM's template first): the Filesystem claim, into the running guest.
    let (code, out) = virtctl(&upstream, &["addvolume", vm, "--volume-name=data"])?;
    assert_eq!(
        (code, out.trim()),
        (0, format!("Successfully submitted add volume request to VM {vm} for volume data").as_str())
    );
    let data_dev = hotplugged(&env, vm, &pod, "data", "KUBEVIRT-RS-HOTPLUG-FS").await?;
    // Ours: the Block claim.
    let (code, out) = virtctl(&ours, &["addvolume", vm, "--volume-name=raw", "--persist", "--serial=raw-1"])?;
    assert_eq!(
        (code, out.trim()),
        (0, format!("Successfully submitted add volume request to VM {vm} for volume raw").as_str())
    );
    let raw_dev = hotplugged(&env, vm, &pod, "raw", "KUBEVIRT-RS-HOTPLUG-BLOCK").await?;
    assert_ne!(data_dev, raw_dev);
    let vms: Api<VirtualMachine> = Api::namespaced(env.client.clone(), env.ns.name());
    let vm_now = vms.get(vm).await?;
    let template_volumes: Vec<String> = vm_now
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert!(template_volumes.contains(&"data".to_owned()) && template_volumes.contains(&"raw".to_owned()));
    let restart =
        vm_now.status.as_ref().and_then(|s| s.condition(&VirtualMachineConditionType::RestartRequired).cloned());
    assert!(restart.is_none(), "a hotplug needs no restart: {restart:?}");

    // Out again (upstream's virtctl, then ours): the guest loses the disk, the status entry and the pod go.
    let (code, out) = virtctl(&upstream, &["removevolume", vm, "--volume-name=data"])?;
    assert_eq!(
        (code, out.trim()),
        (0, format!("Successfully submitted remove volume request to VM {vm} for volume data").as_str())
    );
    let (code, out) = virtctl(&ours, &["removevolume", vm, "--volume-name=raw", "--persist"])?;
    assert_eq!(code, 0, "{out}");
    poll_until("the guest to lose both disks", Duration::from_secs(120), || async {
        disks(&env.console(&pod)).filter(|d| *d == before)
    })
    .await
    .map_err(|e| err(format!("{e}\n{}\n{}", env.console(&pod), describe(&env, vm))))?;
    poll_until("the volume statuses and attachment pods to go", Duration::from_secs(120), || async {
        let vmi = env.vmis().get(vm).await.ok()?;
        let pods = env.pods().list(&ListParams::default().labels("kubevirt.io=hotplug-disk")).await.ok()?;
        (volume_status(&vmi, "data").is_none() && volume_status(&vmi, "raw").is_none() && pods.items.is_empty())
            .then_some(())
    })
    .await
    .map_err(|e| err(format!("{e}\n{}", describe(&env, vm))))?;
    // Nothing rebooted.
    assert_eq!(env.console(&pod).matches(MARKER).count(), 1, "one boot");

    // The VMI of its own (no VM of that name: upstream's virtctl falls back to the VMI path).
    let solo = env.wait_phase("vmi-alone", VirtualMachineInstancePhase::Running, BOOT_TIMEOUT).await?;
    let solo_pod = env.launcher_pod(&solo).await?.name_any();
    let solo_before = disks(&env.wait_console(&solo_pod, "KUBEVIRT-RS-GUEST-DISKS", BOOT_TIMEOUT).await?);
    let (code, out) = virtctl(&upstream, &["addvolume", "vmi-alone", "--volume-name=solo"])?;
    assert_eq!(code, 0, "{out}");
    let solo_dev = hotplugged(&env, "vmi-alone", &solo_pod, "solo", "KUBEVIRT-RS-HOTPLUG-SOLO").await?;

    // A hotplugged ReadWriteMany claim migrates with the VMI: the target pod gets it from an attachment pod on its
    // node before the guest arrives, and the guest reads it there.
    let migratable = poll_object(&env.vmis(), "vmi-alone", Duration::from_secs(60), |v: &VirtualMachineInstance| {
        stack_support::vmi::condition(v, Type::LiveMigratable) == Some(ConditionStatus::True)
    })
    .await
    .map_err(|e| err(format!("LiveMigratable with a shared hotplugged claim: {e}\n{}", describe(&env, "vmi-alone"))))?;
    let source_node = migratable.status.as_ref().and_then(|s| s.node_name.clone());
    env.kubectl_manifest(
        "create",
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\nmetadata: {name: move-alone}\nspec: {vmiName: vmi-alone}\n",
    )?;
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
    let done = poll_object(&vmims, "move-alone", MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| m.is_final())
        .await
        .map_err(|e| err(format!("{e}\n{}", describe(&env, "vmi-alone"))))?;
    assert_eq!(done.phase(), Some(&MigrationPhase::Succeeded), "{}", describe(&env, "vmi-alone"));
    let moved = poll_object(&env.vmis(), "vmi-alone", Duration::from_secs(60), |v: &VirtualMachineInstance| {
        volume_status(v, "solo").is_some_and(|s| {
            s.phase == Some(crds::kubevirt::vmi::VolumePhase::Ready)
                && s.hotplug_volume.as_ref().and_then(|h| h.attach_pod_uid.clone()).is_some()
        })
    })
    .await?;
    assert_ne!(moved.status.as_ref().and_then(|s| s.node_name.clone()), source_node, "migrated");
    let solo_pod =
        moved.status.as_ref().and_then(|s| s.migration_state.as_ref()?.target_pod.clone()).unwrap_or_default();
    let page = http_get_url(&format!("http://{}/?disk={solo_dev}", vmi_ip(&moved))).await?;
    assert!(page.contains(&format!("disk={solo_dev} head=KUBEVIRT-RS-HOTPLUG-SOLO")), "after the migration: {page}");
    let (code, out) = virtctl(&ours, &["removevolume", "vmi-alone", "--volume-name=solo"])?;
    assert_eq!(code, 0, "{out}");
    poll_until("the standalone guest to lose the disk", Duration::from_secs(120), || async {
        disks(&env.console(&solo_pod)).filter(|d| solo_before.as_ref().is_some_and(|b| d.len() == b.len()))
    })
    .await
    .map_err(|e| err(format!("{e}\n{}", describe(&env, "vmi-alone"))))?;
    let (code, out) = virtctl(&ours, &["removevolume", vm, "--volume-name=data", "--persist"])?;
    assert_ne!(code, 0);
    assert!(out.contains("Unable to remove volume [data] because it does not exist"), "{out}");
    env.ns.clone().delete().await
}
