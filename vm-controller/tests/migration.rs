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

fn node_of(vmi: &VirtualMachineInstance) -> String {
    vmi.status.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the two-node test cluster with the stack installed"]
async fn a_container_disk_vmi_migrates_to_the_other_node_and_keeps_running() -> Result<()> {
    let env = VmiEnv::on_installed_stack("migration").await?;
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
    Ok(())
}
