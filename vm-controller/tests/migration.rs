//! Live migration on the two-node test cluster (issue 15): upstream's `vmi-migratable.yaml` (a containerDisk VMI
//! with masquerade) migrated by upstream's `migration-job.yaml` applied with kubectl. The guest keeps running: its
//! uptime counter goes on on the serial console of the target pod with no new boot, its HTTP server answers on the
//! VMI's new IP, the VMIM walks upstream's phases, the VMI's node, `migrationState` and labels switch, the source
//! pod goes away.
//!
//! Needs the test cluster with two nodes (`KV_NODES=2 tests/cluster/up`) and the installed stack; run with
//! `--ignored --test-threads=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::time::Duration;

use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::migration::{MigrationPhase, VirtualMachineInstanceMigration};
use crds::kubevirt::vmi::{MigrationMethod, VirtualMachineInstancePhase as Phase};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube_test_support::{Error, Result, poll_object, poll_until};
use stack_support::upstream_example;
use stack_support::vmi::{MARKER, VmiEnv, http_get, vmi_ip};

const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
const MIGRATION_TIMEOUT: Duration = Duration::from_secs(240);
const TICK: &str = "KUBEVIRT-RS-GUEST-TICK";

fn err(message: impl Into<String>) -> Error {
    Error::ClusterUp(message.into())
}

/// The `uptime=` of the last line of `log` containing `needle`.
fn last_uptime(log: &str, needle: &str) -> Option<f64> {
    log.lines().rev().find(|l| l.contains(needle))?.split("uptime=").nth(1)?.split_whitespace().next()?.parse().ok()
}

async fn ready_nodes(env: &VmiEnv) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(env.client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|n| n.name_any())
        .collect())
}

/// Sets (or with `None` removes) `spec.configuration.migrations.bandwidthPerMigration` of the cluster's KubeVirt: a
/// slow migration stays Running long enough to be cancelled or broken.
async fn set_bandwidth(env: &VmiEnv, bandwidth: Option<&str>) -> Result<()> {
    let kv: Api<crds::kubevirt::config::KubeVirt> = Api::namespaced(env.client.clone(), "kubevirt");
    let patch = serde_json::json!({"spec": {"configuration": {"migrations": {"bandwidthPerMigration": bandwidth}}}});
    kv.patch("kubevirt", &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch)).await?;
    Ok(())
}

/// A VMIM of `vmi` named `name` (`annotations` as given, `selector` as addedNodeSelector).
fn vmim_yaml(name: &str, vmi: &str, annotations: &str, selector: &str) -> String {
    format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\nmetadata:\n  name: {name}\n  annotations: {{{annotations}}}\n\
         spec:\n  vmiName: {vmi}\n  addedNodeSelector: {{{selector}}}\n"
    )
}

/// Boots upstream's vmi-migratable as `name`; returns the VMI, its node and its launcher pod once it ticks.
async fn boot(env: &VmiEnv, name: &str) -> Result<(VirtualMachineInstance, String, String)> {
    let yaml = stack_support::local_images(&upstream_example("vmi-migratable.yaml")?, &env.image)
        .replace("name: vmi-migratable", &format!("name: {name}"));
    env.kubectl_manifest("create", &yaml)?;
    let vmi = env.wait_phase(name, Phase::Running, BOOT_TIMEOUT).await?;
    let pod = env.launcher_pod(&vmi).await?.name_any();
    env.wait_console(&pod, &format!("{TICK} 2 "), BOOT_TIMEOUT).await?;
    Ok((vmi.clone(), node_of(&vmi), pod))
}

/// After a migration that did not happen: the VMI runs on `node` in `pod`, the guest (same boot) keeps ticking.
async fn still_on_source(env: &VmiEnv, name: &str, node: &str, pod: &str) -> Result<()> {
    let vmi = env.vmis().get(name).await?;
    assert_eq!(vmi.phase(), Phase::Running, "{:?}", vmi.status);
    assert_eq!(node_of(&vmi), node, "the VMI stayed on its node");
    assert!(!vmi.labels().contains_key("kubevirt.io/migrationTargetNodeName"), "{:?}", vmi.labels());
    let before = last_uptime(&env.console(pod), TICK).ok_or_else(|| err("no tick on the source"))?;
    poll_until("the guest to keep ticking on the source", Duration::from_secs(30), || async {
        last_uptime(&env.console(pod), TICK).filter(|u| *u > before + 2.0)
    })
    .await?;
    assert_eq!(env.console(pod).matches(MARKER).count(), 1, "no reboot on the source");
    let pods = env.launcher_pods(&vmi).await?;
    poll_until("only the source pod left", Duration::from_secs(60), || async {
        let pods = env.launcher_pods(&vmi).await.ok()?;
        (pods.len() == 1 && pods[0].name_any() == pod).then_some(())
    })
    .await
    .map_err(|e| err(format!("{e}: {:?}", pods.iter().map(|p| p.name_any()).collect::<Vec<_>>())))?;
    Ok(())
}

/// One virtctl run in the test namespace: (exit code, stdout + stderr).
fn virtctl(env: &VmiEnv, bin: &std::path::Path, args: &[&str]) -> Result<(i32, String)> {
    env.virtctl(bin, args)
}

/// Waits for the migration of VMI `vmi` created by `virtctl migrate` (generateName `kubevirt-migrate-vm-`) to end;
/// returns it.
async fn wait_virtctl_migration(env: &VmiEnv, vmi: &str, not: &[String]) -> Result<VirtualMachineInstanceMigration> {
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
    poll_until("the virtctl migration to end", MIGRATION_TIMEOUT, || async {
        let list = vmims.list(&ListParams::default().labels(&format!("kubevirt.io/vmi-name={vmi}"))).await.ok()?;
        list.items.into_iter().find(|m| m.is_final() && !not.contains(&m.name_any()))
    })
    .await
}

fn node_of(vmi: &VirtualMachineInstance) -> String {
    vmi.status.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn a_container_disk_vmi_migrates_to_the_other_node_and_keeps_running() -> Result<()> {
    let env = VmiEnv::on_installed_stack("migration").await?;
    set_bandwidth(&env, None).await?;
    let nodes = ready_nodes(&env).await?;
    if nodes.len() < 2 {
        return Err(err(format!(
            "live migration needs two Ready nodes, the cluster has {nodes:?} (KV_NODES=2 tests/cluster/up)"
        )));
    }
    env.apply_example("vmi-migratable.yaml")?;
    let vmi = env.wait_phase("vmi-migratable", Phase::Running, BOOT_TIMEOUT).await?;
    let source_node = node_of(&vmi);
    let source_pod = env.launcher_pod(&vmi).await?.name_any();
    env.wait_console(&source_pod, &format!("{TICK} 3 "), BOOT_TIMEOUT).await?;
    let before = env.console(&source_pod);
    let boots_before = before.matches(MARKER).count();
    let uptime_before = last_uptime(&before, TICK).ok_or_else(|| err("no tick before the migration"))?;
    let http_before = http_get(&vmi_ip(&vmi)).await?;
    assert!(http_before.contains(MARKER), "{http_before}");
    let live_migratable =
        stack_support::vmi::condition(&vmi, crds::kubevirt::vmi::VirtualMachineInstanceConditionType::LiveMigratable);
    assert_eq!(
        live_migratable,
        Some(crds::kubevirt::vmi::ConditionStatus::True),
        "a containerDisk + masquerade VMI is migratable"
    );

    // Upstream's migration-job.yaml, as it is.
    env.kubectl_manifest("apply", &upstream_example("migration-job.yaml")?)?;
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
    let done =
        poll_object(&vmims, "migration-job", MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| m.is_final())
            .await?;
    let status = done.status.clone().unwrap_or_default();
    let phases: Vec<String> =
        status.phase_transition_timestamps.iter().flatten().map(|p| p.phase.as_str().to_owned()).collect();
    assert_eq!(done.phase(), Some(&MigrationPhase::Succeeded), "phases {phases:?}, state {:?}", status.migration_state);
    assert_eq!(
        phases,
        ["Pending", "Scheduling", "Scheduled", "PreparingTarget", "TargetReady", "Running", "Succeeded"]
    );
    assert_eq!(done.labels().get("kubevirt.io/vmi-name").map(String::as_str), Some("vmi-migratable"));

    let vmi = env.vmis().get("vmi-migratable").await?;
    let target_node = node_of(&vmi);
    assert_ne!(target_node, source_node, "the VMI moved");
    assert_eq!(vmi.phase(), Phase::Running);
    assert_eq!(vmi.labels().get("kubevirt.io/nodeName"), Some(&target_node));
    assert!(!vmi.labels().contains_key("kubevirt.io/migrationTargetNodeName"));
    let st = vmi.status.clone().unwrap_or_default();
    let ms = st.migration_state.clone().ok_or_else(|| err("no migrationState"))?;
    assert_eq!(ms.completed, Some(true), "{ms:?}");
    assert_ne!(ms.failed, Some(true), "{ms:?}");
    assert_eq!(ms.source_node.as_deref(), Some(source_node.as_str()));
    assert_eq!(ms.target_node.as_deref(), Some(target_node.as_str()));
    assert_eq!(ms.source_pod.as_deref(), Some(source_pod.as_str()));
    assert!(ms.start_timestamp.is_some() && ms.end_timestamp.is_some(), "{ms:?}");
    assert_eq!(ms.mode.as_deref(), Some("PreCopy"));
    assert_eq!(st.migration_method, Some(MigrationMethod::BlockMigration));
    let target_pod = ms.target_pod.clone().ok_or_else(|| err("no target pod"))?;

    // The guest went on: the target's console continues the count with no new boot, uptime kept growing.
    env.wait_console(&target_pod, TICK, Duration::from_secs(60)).await?;
    let after = poll_until("a tick after the migration past the last one before", Duration::from_secs(60), || async {
        let log = env.console(&target_pod);
        last_uptime(&log, TICK).filter(|u| *u > uptime_before).map(|_| log)
    })
    .await?;
    assert_eq!(after.matches(MARKER).count(), 0, "no boot on the target:\n{after}");
    assert!(boots_before == 1, "one boot before:\n{before}");
    let http_after = poll_until("the guest's HTTP server on the VMI's new IP", Duration::from_secs(60), || async {
        let vmi = env.vmis().get("vmi-migratable").await.ok()?;
        http_get(&vmi_ip(&vmi)).await.ok()
    })
    .await?;
    let uptime_http =
        http_after.lines().find_map(|l| l.strip_prefix("uptime=")).and_then(|u| u.trim().parse::<f64>().ok());
    assert!(uptime_http.is_some_and(|u| u > uptime_before), "uptime continued: {http_after}");

    eprintln!(
        "migrated {source_pod} on {source_node} -> {target_pod} on {target_node}; uptime {uptime_before} before, {:?} after; {:?} .. {:?}",
        uptime_http, ms.start_timestamp, ms.end_timestamp
    );
    // The source pod is gone.
    poll_until("the source pod to be gone", Duration::from_secs(90), || async {
        env.pods().get_opt(&source_pod).await.ok()?.is_none().then_some(())
    })
    .await?;
    // The leading vm-controller's /metrics tells it under upstream's names.
    let ns = env.ns.name().to_owned();
    let metrics = poll_until("the migration in the vm-controller's upstream metrics", Duration::from_secs(60), || {
        let (env, ns, target_node) = (&env, &ns, &target_node);
        async move {
            let text = controller_metrics(env).await.ok()?;
            let succeeded = format!(
                "kubevirt_vmi_migration_succeeded{{vmi=\"vmi-migratable\",vmim=\"migration-job\",namespace=\"{ns}\"}} 1"
            );
            let running = format!("kubevirt_vmi_phase_count{{node=\"{target_node}\",phase=\"running\",");
            (text.contains(&succeeded) && text.contains(&running)).then_some(text)
        }
    })
    .await?;
    assert!(metrics.contains("kubevirt_vmi_migrations_in_running_phase "), "{metrics}");
    let job = [("vmi", "vmi-migratable"), ("vmim", "migration-job"), ("namespace", ns.as_str())];
    for (name, at) in [
        ("kubevirt_vmi_migration_start_time_seconds", &ms.start_timestamp),
        ("kubevirt_vmi_migration_end_time_seconds", &ms.end_timestamp),
    ] {
        let want = at.as_ref().map(|t| t.0.as_second() as f64);
        assert_eq!(stack_support::metrics::sample(&metrics, name, &job), want, "{name}: {metrics}");
    }
    // Passed: its guests go (a failing test leaves them for inspection).
    env.ns.clone().delete().await
}

/// The `/metrics` text of the vm-controller replica that leads (the one with upstream's cluster metrics).
async fn controller_metrics(env: &VmiEnv) -> Result<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.client.clone(), stack_support::NAMESPACE);
    let list = pods.list(&ListParams::default().labels("kubevirt.io=virt-controller")).await?;
    for p in list {
        let Some(ip) = p.status.as_ref().and_then(|s| s.pod_ip.clone()) else { continue };
        if let Ok(text) = stack_support::vmi::http_get_url(&format!("http://{ip}:8080/metrics")).await
            && text.contains("kubevirt_vmi_migrations_in_running_phase")
        {
            return Ok(text);
        }
    }
    Err(err("no vm-controller replica serves upstream's metrics"))
}

/// A namespace on the two-node cluster (fails without two Ready nodes) with the migration bandwidth capped at
/// 1 MiB/s, and VMI `vmi` booted and migrating (VMIM `vmim` in phase Running): (env, source node, source pod, the
/// running VMIM). The cap is lifted again by [`lift_cap`].
async fn slow_migration(
    prefix: &str,
    vmi: &str,
    vmim: &str,
) -> Result<(VmiEnv, String, String, VirtualMachineInstanceMigration)> {
    let env = VmiEnv::on_installed_stack(prefix).await?;
    if ready_nodes(&env).await?.len() < 2 {
        return Err(err("live migration needs two Ready nodes (KV_NODES=2 tests/cluster/up)"));
    }
    set_bandwidth(&env, Some("1Mi")).await?;
    let started = async {
        let (_, node, pod) = boot(&env, vmi).await?;
        env.kubectl_manifest("create", &vmim_yaml(vmim, vmi, "", ""))?;
        let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
        let running = poll_object(&vmims, vmim, MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| {
            m.phase() == Some(&MigrationPhase::Running) || m.is_final()
        })
        .await?;
        assert_eq!(running.phase(), Some(&MigrationPhase::Running), "{:?}", running.status);
        Ok((node, pod, running))
    }
    .await;
    match started {
        Ok((node, pod, running)) => Ok((env, node, pod, running)),
        Err(e) => {
            set_bandwidth(&env, None).await?;
            Err(e)
        }
    }
}

/// Lifts [`slow_migration`]'s cap, then returns `result`; a passed test's namespace (and its guests) goes.
async fn lift_cap(env: &VmiEnv, result: Result<()>) -> Result<()> {
    set_bandwidth(env, None).await?;
    result?;
    env.ns.clone().delete().await
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn deleting_a_running_migration_cancels_it_and_the_guest_stays() -> Result<()> {
    let (env, node, pod, _) = slow_migration("migration-cancel", "vmi-cancel", "cancel-me").await?;
    let result = async {
        let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
        // Upstream's `virtctl migrate-cancel` deletes the VMI's migration in flight: that is the cancel.
        let upstream =
            tokio::task::spawn_blocking(stack_support::upstream_virtctl).await.map_err(|e| err(e.to_string()))??;
        let (code, out) = virtctl(&env, &upstream, &["migrate-cancel", "vmi-cancel"])?;
        assert_eq!((code, out.trim()), (0, "VM vmi-cancel was scheduled to migrate-cancel"), "upstream virtctl");
        let vmi = poll_object(&env.vmis(), "vmi-cancel", MIGRATION_TIMEOUT, |v: &VirtualMachineInstance| {
            v.status.as_ref().and_then(|s| s.migration_state.as_ref()).is_some_and(|m| m.failed == Some(true))
        })
        .await?;
        let ms = vmi.status.clone().unwrap_or_default().migration_state.unwrap_or_default();
        assert_eq!(ms.abort_requested, Some(true), "{ms:?}");
        assert_eq!(ms.abort_status.as_deref(), Some("Succeeded"), "{ms:?}");
        assert_eq!(ms.failure_reason.as_deref(), Some("Live migration aborted "), "{ms:?}");
        poll_until("the cancelled VMIM to be gone", Duration::from_secs(60), || async {
            vmims.get_opt("cancel-me").await.ok()?.is_none().then_some(())
        })
        .await?;
        still_on_source(&env, "vmi-cancel", &node, &pod).await
    }
    .await;
    lift_cap(&env, result).await
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn a_target_killed_mid_migration_fails_it_and_the_source_keeps_running() -> Result<()> {
    let (env, node, pod, running) = slow_migration("migration-kill", "vmi-kill", "kill-target").await?;
    let result = async {
        let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
        let target = running
            .status
            .and_then(|s| s.migration_state)
            .and_then(|m| m.target_pod)
            .ok_or_else(|| err("no target pod in the VMIM's state"))?;
        env.kubectl(&["delete", "pod", &target, "--grace-period=0", "--force"])?;
        let failed =
            poll_object(&vmims, "kill-target", MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| m.is_final())
                .await?;
        assert_eq!(failed.phase(), Some(&MigrationPhase::Failed), "{:?}", failed.status);
        still_on_source(&env, "vmi-kill", &node, &pod).await
    }
    .await;
    lift_cap(&env, result).await
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn an_unschedulable_target_fails_the_migration_after_its_timeout() -> Result<()> {
    let env = VmiEnv::on_installed_stack("migration-unsched").await?;
    let (_, node, pod) = boot(&env, "vmi-unsched").await?;
    let annotations = "kubevirt.io/migrationUnschedulablePodTimeoutSeconds: \"15\"";
    env.kubectl_manifest(
        "create",
        &vmim_yaml("nowhere", "vmi-unsched", annotations, "kubevirt-rs.test/no-such-node: \"x\""),
    )?;
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
    let scheduling = poll_object(&vmims, "nowhere", Duration::from_secs(60), |m: &VirtualMachineInstanceMigration| {
        m.phase() == Some(&MigrationPhase::Scheduling) || m.is_final()
    })
    .await?;
    assert_eq!(scheduling.phase(), Some(&MigrationPhase::Scheduling));
    let failed =
        poll_object(&vmims, "nowhere", Duration::from_secs(90), |m: &VirtualMachineInstanceMigration| m.is_final())
            .await?;
    assert_eq!(failed.phase(), Some(&MigrationPhase::Failed));
    let events = env.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=nowhere",
        "-o",
        "jsonpath={.items[*].message}",
    ])?;
    assert!(events.contains("unschedulable for more than 15 seconds"), "{events}");
    still_on_source(&env, "vmi-unsched", &node, &pod).await?;
    env.ns.clone().delete().await
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn virtctl_migrate_moves_a_vm_there_and_back_with_upstreams_and_ours() -> Result<()> {
    let env = VmiEnv::on_installed_stack("migration-virtctl").await?;
    if ready_nodes(&env).await?.len() < 2 {
        return Err(err("live migration needs two Ready nodes (KV_NODES=2 tests/cluster/up)"));
    }
    set_bandwidth(&env, None).await?;
    let upstream =
        tokio::task::spawn_blocking(stack_support::upstream_virtctl).await.map_err(|e| err(e.to_string()))??;
    let ours = kube_test_support::workspace_binary("virtctl")?;
    let yaml = stack_support::local_images(&upstream_example("vm-cirros.yaml")?, &env.image)
        .replace("runStrategy: Halted", "runStrategy: Always");
    env.kubectl_manifest("create", &yaml)?;
    let vmi = env.wait_phase("vm-cirros", Phase::Running, BOOT_TIMEOUT).await?;
    let pod = env.launcher_pod(&vmi).await?.name_any();
    env.wait_console(&pod, &format!("{TICK} 2 "), BOOT_TIMEOUT).await?;
    let mut node = node_of(&vmi);
    let mut seen = Vec::new();
    for (bin, who) in [(&upstream, "upstream"), (&ours, "ours")] {
        let (code, out) = virtctl(&env, bin, &["migrate", "vm-cirros", "--dry-run"])?;
        assert_eq!(code, 0, "{who}: {out}");
        assert!(
            out.contains("Dry Run execution") && out.contains("VM vm-cirros was scheduled to migrate"),
            "{who}: {out}"
        );
        let (code, out) = virtctl(&env, bin, &["migrate", "vm-cirros"])?;
        assert_eq!((code, out.trim()), (0, "VM vm-cirros was scheduled to migrate"), "{who}");
        let m = wait_virtctl_migration(&env, "vm-cirros", &seen).await?;
        assert!(m.name_any().starts_with("kubevirt-migrate-vm-"), "{who}: {}", m.name_any());
        assert_eq!(m.phase(), Some(&MigrationPhase::Succeeded), "{who}: {:?}", m.status);
        seen.push(m.name_any());
        let vmi = env.vmis().get("vm-cirros").await?;
        assert_ne!(node_of(&vmi), node, "{who}: the VM moved");
        node = node_of(&vmi);
        // Nothing left to cancel.
        let (code, out) = virtctl(&env, bin, &["migrate-cancel", "vm-cirros"])?;
        assert_ne!(code, 0, "{who}: {out}");
        assert!(out.contains("Found no migration to cancel for vm-cirros"), "{who}: {out}");
    }
    // The guest survived both: one boot, uptime beyond the time the two migrations took.
    let vmi = env.vmis().get("vm-cirros").await?;
    let pod = vmi.status.clone().unwrap_or_default().migration_state.and_then(|m| m.target_pod).unwrap_or_default();
    let log = env.wait_console(&pod, TICK, Duration::from_secs(60)).await?;
    assert_eq!(log.matches(MARKER).count(), 0, "no boot on the last target");
    let http = http_get(&vmi_ip(&vmi)).await?;
    assert!(http.contains(MARKER), "{http}");
    let (code, out) = virtctl(&env, &upstream, &["migrate", "no-such-vm"])?;
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("\"no-such-vm\" not found"), "{out}");
    // Passed: its guests go (a failing test leaves them for inspection).
    env.ns.clone().delete().await
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn shared_claims_migrate_and_node_local_claims_are_refused() -> Result<()> {
    let env = VmiEnv::on_installed_stack("migration-storage").await?;
    if ready_nodes(&env).await?.len() < 2 {
        return Err(err("live migration needs two Ready nodes (KV_NODES=2 tests/cluster/up)"));
    }
    set_bandwidth(&env, None).await?;
    let claim = |name: &str, class: &str, mode: &str| {
        format!(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec:\n  storageClassName: {class}\n  \
             accessModes: [{mode}]\n  resources: {{requests: {{storage: 64Mi}}}}\n---\n"
        )
    };
    env.kubectl_manifest(
        "create",
        &(claim("rwx", "shared", "ReadWriteMany") + &claim("rwo", "local", "ReadWriteOnce")),
    )?;
    // A second disk on the claim, after the boot disk (volumes is the example's last key).
    let with_claim = |vmi: &str, pvc: &str| -> Result<String> {
        let yaml = stack_support::local_images(&upstream_example("vmi-migratable.yaml")?, &env.image)
            .replace("name: vmi-migratable", &format!("name: {vmi}"))
            .replace("      interfaces:\n", "      - disk: {bus: virtio}\n        name: data\n      interfaces:\n");
        Ok(format!("{}\n  - name: data\n    persistentVolumeClaim: {{claimName: {pvc}}}\n", yaml.trim_end()))
    };
    env.kubectl_manifest("create", &with_claim("vmi-rwo", "rwo")?)?;
    env.kubectl_manifest("create", &with_claim("vmi-rwx", "rwx")?)?;

    // A ReadWriteOnce claim: LiveMigratable False with upstream's reason, and the VMIM refused by admission.
    let rwo = env.wait_phase("vmi-rwo", Phase::Running, BOOT_TIMEOUT).await?;
    let c = rwo
        .status
        .as_ref()
        .and_then(|s| s.condition(&crds::kubevirt::vmi::VirtualMachineInstanceConditionType::LiveMigratable))
        .cloned()
        .ok_or_else(|| err("no LiveMigratable condition"))?;
    assert_eq!(c.status, crds::kubevirt::vmi::ConditionStatus::False);
    assert_eq!(c.reason.as_deref(), Some("DisksNotLiveMigratable"));
    assert_eq!(
        c.message.as_deref(),
        Some(
            "cannot migrate VMI: PVC rwo is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
        )
    );
    let refused = env.kubectl_manifest("create", &vmim_yaml("rwo-move", "vmi-rwo", "", "")).expect_err("refused");
    assert!(
        refused.to_string().contains(
            "Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: cannot migrate VMI: PVC rwo is not shared"
        ),
        "{refused}"
    );

    // A ReadWriteMany claim (the shared class): migrates, the claim shared, the containerDisk copied.
    let rwx = env.wait_phase("vmi-rwx", Phase::Running, BOOT_TIMEOUT).await?;
    assert_eq!(
        stack_support::vmi::condition(&rwx, crds::kubevirt::vmi::VirtualMachineInstanceConditionType::LiveMigratable),
        Some(crds::kubevirt::vmi::ConditionStatus::True)
    );
    let source = node_of(&rwx);
    let pod = env.launcher_pod(&rwx).await?.name_any();
    env.wait_console(&pod, &format!("{TICK} 2 "), BOOT_TIMEOUT).await?;
    env.kubectl_manifest("create", &vmim_yaml("rwx-move", "vmi-rwx", "", ""))?;
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
    let done =
        poll_object(&vmims, "rwx-move", MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| m.is_final()).await?;
    assert_eq!(done.phase(), Some(&MigrationPhase::Succeeded), "{:?}", done.status);
    let rwx = env.vmis().get("vmi-rwx").await?;
    assert_ne!(node_of(&rwx), source);
    let target = rwx.status.clone().unwrap_or_default().migration_state.and_then(|m| m.target_pod).unwrap_or_default();
    let xml = env.domain_xml(&target, "vmi-rwx")?;
    assert!(xml.contains("vmi-disks/data/disk.img"), "the shared claim is the target's disk:\n{xml}");
    let log = env.wait_console(&target, TICK, Duration::from_secs(60)).await?;
    assert_eq!(log.matches(MARKER).count(), 0, "no boot on the target");
    // Passed: its guests go (a failing test leaves them for inspection).
    env.ns.clone().delete().await
}

/// A VM whose boot disk is a ReadWriteMany DataVolume imported over HTTP by our CDI path and whose data disk is
/// a blank ReadWriteMany DataVolume migrates live with its storage shared: what the guest wrote to the data disk
/// before the migration, it reads back from the device after it (caches dropped), in the same boot.
#[tokio::test]
#[ignore = "needs the two-node test cluster (KV_NODES=2 tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn a_vm_on_rwx_datavolumes_migrates_and_reads_back_what_it_wrote() -> Result<()> {
    let env = VmiEnv::on_installed_stack("migration-dv").await?;
    if ready_nodes(&env).await?.len() < 2 {
        return Err(err("live migration needs two Ready nodes (KV_NODES=2 tests/cluster/up)"));
    }
    set_bandwidth(&env, None).await?;
    let (url, copy) = stack_support::guest_qcow2_url()?;
    let dv = |name: &str, size: &str, source: &str| {
        format!(
            "  - metadata: {{name: {name}}}\n    spec:\n      pvc:\n        accessModes: [ReadWriteMany]\n        \
             resources: {{requests: {{storage: {size}}}}}\n        storageClassName: shared\n      source: {source}\n"
        )
    };
    let yaml = format!(
        "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {{name: vm-rwx}}\nspec:\n  runStrategy: Always\n  \
         dataVolumeTemplates:\n{}{}  template:\n    spec:\n      domain:\n        devices:\n          disks:\n          \
         - {{name: boot, disk: {{bus: virtio}}}}\n          - {{name: data, disk: {{bus: virtio}}}}\n          \
         interfaces: [{{name: default, masquerade: {{}}}}]\n        memory: {{guest: 128Mi}}\n      \
         networks: [{{name: default, pod: {{}}}}]\n      terminationGracePeriodSeconds: 0\n      volumes:\n      \
         - {{name: boot, dataVolume: {{name: rwx-boot}}}}\n      - {{name: data, dataVolume: {{name: rwx-data}}}}\n",
        dv("rwx-boot", "2Gi", &format!("{{http: {{url: \"{url}\"}}}}")),
        dv("rwx-data", "64Mi", "{blank: {}}"),
    );
    env.kubectl_manifest("create", &yaml)?;
    let vmi = env.wait_phase("vm-rwx", Phase::Running, BOOT_TIMEOUT).await?;
    let pod = env.launcher_pod(&vmi).await?.name_any();
    let console = env.wait_console(&pod, &format!("{TICK} 2 "), BOOT_TIMEOUT).await?;
    assert_eq!(console.matches(MARKER).count(), 1, "one boot:\n{console}");
    let vmi = poll_object(&env.vmis(), "vm-rwx", Duration::from_secs(60), |v: &VirtualMachineInstance| {
        stack_support::vmi::condition(v, crds::kubevirt::vmi::VirtualMachineInstanceConditionType::LiveMigratable)
            == Some(crds::kubevirt::vmi::ConditionStatus::True)
    })
    .await?;
    let source = node_of(&vmi);
    let marker = format!("KUBEVIRT-RS-RWX-{}", env.ns.name());
    let wrote = stack_support::vmi::http_get_url(&format!("http://{}/?write=vdb-{marker}", vmi_ip(&vmi))).await?;
    assert!(wrote.contains(&format!("write=ok vdb {marker}")), "{wrote}");
    let uptime_before = last_uptime(&env.console(&pod), TICK).ok_or_else(|| err("no tick before the migration"))?;

    env.kubectl_manifest("create", &vmim_yaml("dv-move", "vm-rwx", "", ""))?;
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), env.ns.name());
    let done =
        poll_object(&vmims, "dv-move", MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| m.is_final()).await?;
    assert_eq!(done.phase(), Some(&MigrationPhase::Succeeded), "{:?}", done.status);
    let moved = env.vmis().get("vm-rwx").await?;
    assert_ne!(node_of(&moved), source, "moved");
    let st = moved.status.clone().unwrap_or_default();
    assert_eq!(st.migration_method, Some(MigrationMethod::LiveMigration), "nothing to copy: all storage shared");
    let target = st.migration_state.and_then(|m| m.target_pod).unwrap_or_default();
    let xml = env.domain_xml(&target, "vm-rwx")?;
    assert!(xml.contains("vmi-disks/boot/disk.img") && xml.contains("vmi-disks/data/disk.img"), "{xml}");

    // The same boot goes on, and reads the marker back from the shared disk on the target.
    let read = poll_until("the guest to read its marker back on the target", Duration::from_secs(90), || async {
        let vmi = env.vmis().get("vm-rwx").await.ok()?;
        let page = stack_support::vmi::http_get_url(&format!("http://{}/?disk=vdb", vmi_ip(&vmi))).await.ok()?;
        page.contains("disk=vdb head=").then_some(page)
    })
    .await?;
    assert!(read.contains(&format!("disk=vdb head={marker}")), "read back after the migration: {read}");
    let uptime_after = read.lines().find_map(|l| l.strip_prefix("uptime=")).and_then(|u| u.trim().parse::<f64>().ok());
    assert!(uptime_after.is_some_and(|u| u > uptime_before), "uptime went on from {uptime_before}: {read}");
    let log = env.wait_console(&target, TICK, Duration::from_secs(60)).await?;
    assert_eq!(log.matches(MARKER).count(), 0, "no boot on the target:\n{log}");
    let _ = std::fs::remove_file(&copy);
    // Passed: its guests go (a failing test leaves them for inspection).
    env.ns.clone().delete().await
}

/// `kubectl drain <node>` of the launcher pods of the VMI with UID `uid` (selected by `kubevirt.io/created-by`),
/// giving up after `timeout_secs`; the node is uncordoned again whatever happened: (exit code, output).
fn drain(env: &VmiEnv, node: &str, uid: &str, timeout_secs: u64) -> Result<(i32, String)> {
    let selector = format!("--pod-selector=kubevirt.io/created-by={uid}");
    let timeout = format!("--timeout={timeout_secs}s");
    let args = ["drain", node, &selector, "--ignore-daemonsets", "--delete-emptydir-data", &timeout];
    let out = env.cluster.kubectl(args);
    let uncordoned = env.kubectl_global(&["uncordon", node]);
    let out = out?;
    uncordoned?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code().unwrap_or(-1), text))
}

/// Upstream's vmi-migratable as `name` with `evictionStrategy: LiveMigrate`, and `extra_disk_claim` as a second
/// disk.
fn live_migrate_vmi(env: &VmiEnv, name: &str, extra_disk_claim: Option<&str>) -> Result<String> {
    let mut yaml = stack_support::local_images(&upstream_example("vmi-migratable.yaml")?, &env.image)
        .replace("name: vmi-migratable", &format!("name: {name}"))
        .replace("spec:\n  domain:\n", "spec:\n  evictionStrategy: LiveMigrate\n  domain:\n");
    if let Some(pvc) = extra_disk_claim {
        yaml =
            yaml.replace("      interfaces:\n", "      - disk: {bus: virtio}\n        name: data\n      interfaces:\n");
        yaml = format!("{}\n  - name: data\n    persistentVolumeClaim: {{claimName: {pvc}}}\n", yaml.trim_end());
    }
    Ok(yaml)
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn kubectl_drain_migrates_live_migrate_vmis_away_and_unmigratable_ones_block_it() -> Result<()> {
    let env = VmiEnv::on_installed_stack("migration-drain").await?;
    if ready_nodes(&env).await?.len() < 2 {
        return Err(err("drains need two Ready nodes (KV_NODES=2 tests/cluster/up)"));
    }
    set_bandwidth(&env, None).await?;
    let claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: rwo}\nspec:\n  storageClassName: local\n  \
                 accessModes: [ReadWriteOnce]\n  resources: {requests: {storage: 64Mi}}\n";
    env.kubectl_manifest("create", claim)?;
    env.kubectl_manifest("create", &live_migrate_vmi(&env, "drain-stuck", Some("rwo"))?)?;
    env.kubectl_manifest("create", &live_migrate_vmi(&env, "drain-vm", None)?)?;

    // LiveMigrate on a VMI that cannot migrate (a node-local claim): every eviction is refused with upstream's
    // message, the drain gives up, the VMI runs on, unmarked.
    let stuck = env.wait_phase("drain-stuck", Phase::Running, BOOT_TIMEOUT).await?;
    let stuck = poll_until("drain-stuck's LiveMigratable=False", Duration::from_secs(60), || async {
        let v = env.vmis().get("drain-stuck").await.ok()?;
        let c =
            stack_support::vmi::condition(&v, crds::kubevirt::vmi::VirtualMachineInstanceConditionType::LiveMigratable);
        (c == Some(crds::kubevirt::vmi::ConditionStatus::False)).then_some(v)
    })
    .await
    .map_err(|e| err(format!("{e}: {:?}", stuck.status)))?;
    let stuck_node = node_of(&stuck);
    let (code, out) = drain(&env, &stuck_node, &stuck.uid().unwrap_or_default(), 20)?;
    assert_ne!(code, 0, "the drain cannot finish:\n{out}");
    assert!(
        out.contains("VMI drain-stuck is configured with an eviction strategy but is not live-migratable"),
        "upstream's message:\n{out}"
    );
    let stuck = env.vmis().get("drain-stuck").await?;
    assert_eq!(stuck.phase(), Phase::Running);
    assert_eq!(node_of(&stuck), stuck_node);
    assert_eq!(stuck.evacuation_node(), None, "a refused VMI is not marked");

    // LiveMigrate on a migratable VMI: the drain's eviction is refused and marks the VMI, an evacuation migration
    // moves it to the other node, the source pod goes, the drain completes; the guest never stops.
    let vm = env.wait_phase("drain-vm", Phase::Running, BOOT_TIMEOUT).await?;
    let source_node = node_of(&vm);
    let source_pod = env.launcher_pod(&vm).await?.name_any();
    env.wait_console(&source_pod, &format!("{TICK} 2 "), BOOT_TIMEOUT).await?;
    let uptime_before = last_uptime(&env.console(&source_pod), TICK).ok_or_else(|| err("no tick before the drain"))?;
    let (code, out) = drain(&env, &source_node, &vm.uid().unwrap_or_default(), 240)?;
    assert_eq!(code, 0, "the drain finished:\n{out}");
    let ns = env.ns.name();
    assert!(out.contains(&format!("Eviction triggered evacuation of VMI \"{ns}/drain-vm\"")), "{out}");
    let vm = env.vmis().get("drain-vm").await?;
    let target_node = node_of(&vm);
    assert_ne!(target_node, source_node, "the VMI left the drained node");
    assert_eq!(vm.phase(), Phase::Running);
    assert_eq!(vm.evacuation_node(), None, "the mark is cleared once it moved");
    assert_eq!(
        stack_support::vmi::condition(&vm, crds::kubevirt::vmi::VirtualMachineInstanceConditionType::EvictionRequested),
        None
    );
    let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), ns);
    let list = vmims.list(&ListParams::default().labels("kubevirt.io/vmi-name=drain-vm")).await?.items;
    assert_eq!(list.len(), 1, "one evacuation: {:?}", list.iter().map(|m| m.name_any()).collect::<Vec<_>>());
    let m = &list[0];
    assert!(m.name_any().starts_with("kubevirt-evacuation-"), "{}", m.name_any());
    assert_eq!(m.annotations().get("kubevirt.io/evacuationMigration"), Some(&source_node));
    assert_eq!(m.phase(), Some(&MigrationPhase::Succeeded), "{:?}", m.status);
    let target_pod =
        vm.status.clone().unwrap_or_default().migration_state.and_then(|s| s.target_pod).unwrap_or_default();
    let log = poll_until("a tick on the target past the last one before", Duration::from_secs(60), || async {
        let log = env.console(&target_pod);
        last_uptime(&log, TICK).filter(|u| *u > uptime_before).map(|_| log)
    })
    .await?;
    assert_eq!(log.matches(MARKER).count(), 0, "no boot on the target:\n{log}");
    assert!(env.pods().get_opt(&source_pod).await?.is_none(), "the drained pod is gone");
    eprintln!("drained {source_node}: drain-vm moved to {target_node} by {}", m.name_any());
    // Passed: its guests go (a failing test leaves them for inspection).
    env.ns.clone().delete().await
}

/// Upstream's `example-migration-policy.yaml` applied as it is, and a second policy capping the bandwidth at
/// 1 MiB/s, both selecting this test's namespace: a VMI labelled for the example is migrated with the example's
/// settings frozen into its `migrationState`; relabelled for the slow policy, its next migration is held at the
/// policy's bandwidth (still Running after 20 s, where an uncapped one takes a few) until cancelled. The policies
/// are removed whatever happens (they are cluster-scoped).
#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn migration_policies_apply_by_namespace_and_vmi_labels() -> Result<()> {
    use crds::kubevirt::migration_policy::MigrationPolicy;
    let env = VmiEnv::on_installed_stack("migration-policy").await?;
    if ready_nodes(&env).await?.len() < 2 {
        return Err(err("live migration needs two Ready nodes (KV_NODES=2 tests/cluster/up)"));
    }
    set_bandwidth(&env, None).await?;
    let ns = env.ns.name().to_owned();
    let slow = format!("slow-{ns}");
    let policies: Api<MigrationPolicy> = Api::all(env.client.clone());
    let result: Result<()> = async {
        env.kubectl_global(&[
            "label",
            "namespace",
            &ns,
            "namespace-key=namespace-value",
            &format!("kubevirt-rs-policy={ns}"),
        ])?;
        env.kubectl_manifest("apply", &upstream_example("example-migration-policy.yaml")?)?;
        let slow_yaml = format!(
            "apiVersion: migrations.kubevirt.io/v1alpha1\nkind: MigrationPolicy\nmetadata: {{name: {slow}}}\nspec:\n  \
             bandwidthPerMigration: 1Mi\n  selectors:\n    namespaceSelector: {{kubevirt-rs-policy: {ns}}}\n    \
             virtualMachineInstanceSelector: {{policy: slow}}\n"
        );
        env.kubectl_manifest("apply", &slow_yaml)?;
        let yaml = stack_support::local_images(&upstream_example("vmi-migratable.yaml")?, &env.image)
            .replace("name: vmi-migratable", "name: policy-vm")
            .replace("    special: vmi-migratable\n", "    special: vmi-migratable\n    vmi-key: vmi-value\n");
        env.kubectl_manifest("create", &yaml)?;
        let vmi = env.wait_phase("policy-vm", Phase::Running, BOOT_TIMEOUT).await?;
        let pod = env.launcher_pod(&vmi).await?.name_any();
        env.wait_console(&pod, &format!("{TICK} 2 "), BOOT_TIMEOUT).await?;

        // The example's selectors match: its settings travel with the migration.
        env.kubectl_manifest("create", &vmim_yaml("by-example", "policy-vm", "", ""))?;
        let vmims: Api<VirtualMachineInstanceMigration> = Api::namespaced(env.client.clone(), &ns);
        let done =
            poll_object(&vmims, "by-example", MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| m.is_final())
                .await?;
        assert_eq!(done.phase(), Some(&MigrationPhase::Succeeded), "{:?}", done.status);
        let vmi = env.vmis().get("policy-vm").await?;
        let ms = vmi.status.clone().unwrap_or_default().migration_state.unwrap_or_default();
        assert_eq!(ms.migration_policy_name.as_deref(), Some("example-migration-policy"), "{ms:?}");
        let conf = ms.migration_configuration.clone().unwrap_or_default();
        assert_eq!(conf.bandwidth_per_migration.map(|q| q.0).as_deref(), Some("2000Mi"));
        assert_eq!(conf.completion_timeout_per_gib, Some(123456789));
        assert_eq!((conf.allow_auto_converge, conf.allow_post_copy), (Some(false), Some(false)));

        // Relabelled for the slow policy: the migration crawls at its 1 MiB/s until it is cancelled.
        env.kubectl(&["label", "vmi", "policy-vm", "vmi-key-", "policy=slow"])?;
        let node = node_of(&vmi);
        let pod = ms.target_pod.clone().unwrap_or_default();
        env.kubectl_manifest("create", &vmim_yaml("by-slow", "policy-vm", "", ""))?;
        let running = poll_object(&vmims, "by-slow", MIGRATION_TIMEOUT, |m: &VirtualMachineInstanceMigration| {
            m.phase() == Some(&MigrationPhase::Running) || m.is_final()
        })
        .await?;
        assert_eq!(running.phase(), Some(&MigrationPhase::Running), "{:?}", running.status);
        let vmi = env.vmis().get("policy-vm").await?;
        let ms = vmi.status.clone().unwrap_or_default().migration_state.unwrap_or_default();
        assert_eq!(ms.migration_policy_name.as_deref(), Some(slow.as_str()), "{ms:?}");
        tokio::time::sleep(Duration::from_secs(20)).await;
        let still = vmims.get("by-slow").await?;
        assert_eq!(still.phase(), Some(&MigrationPhase::Running), "held at 1 MiB/s: {:?}", still.status);
        vmims.delete("by-slow", &Default::default()).await?;
        poll_until("the cancelled VMIM to be gone", Duration::from_secs(90), || async {
            vmims.get_opt("by-slow").await.ok()?.is_none().then_some(())
        })
        .await?;
        // The guest stays where the first migration put it and goes on ticking there, with no new boot.
        let vmi = env.vmis().get("policy-vm").await?;
        assert_eq!((vmi.phase(), node_of(&vmi)), (Phase::Running, node));
        let before = last_uptime(&env.console(&pod), TICK).ok_or_else(|| err("no tick after the cancel"))?;
        poll_until("the guest to keep ticking", Duration::from_secs(30), || async {
            last_uptime(&env.console(&pod), TICK).filter(|u| *u > before + 2.0)
        })
        .await?;
        assert_eq!(env.console(&pod).matches(MARKER).count(), 0, "no boot");
        Ok(())
    }
    .await;
    for name in ["example-migration-policy", slow.as_str()] {
        let _ = policies.delete(name, &Default::default()).await;
    }
    result?;
    env.ns.clone().delete().await
}
