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
use stack_support::vmi::{MARKER, VmiEnv, http_get, vmi_ip};
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
