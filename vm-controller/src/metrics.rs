//! Upstream virt-controller's cluster metrics, computed from this process's watch caches at every scrape and
//! rendered under upstream's names (unprefixed) beside the process's own `kubevirt_rs_vm_controller_*` ones:
//!
//! | metric | labels | value |
//! | --- | --- | --- |
//! | `kubevirt_vmi_phase_count` | `node`, `phase` (lower case), `os`, `workload`, `flavor` (the VMI's `vm.kubevirt.io/…` annotations), `instance_type`, `preference` (its VM's), `guest_os_kernel_release`, `guest_os_machine`, `guest_os_name`, `guest_os_version_id` | VMIs |
//! | `kubevirt_vmi_migrations_in_unset_phase` / `_pending_` / `_scheduling_` / `_running_phase` | — | VMIMs in no phase yet / `Pending` / `Scheduling` … `TargetReady` / `Running` |
//! | `kubevirt_vmi_migration_succeeded` / `kubevirt_vmi_migration_failed` | `vmi`, `vmim`, `namespace` | 1 per finished VMIM |
//! | `kubevirt_vmi_migration_start_time_seconds` / `kubevirt_vmi_migration_end_time_seconds` | `vmi`, `vmim`, `namespace` | the VMIM's `migrationState` start / end (Unix seconds), once set |
//! | `kubevirt_number_of_vms` | `namespace` | VirtualMachines |
//!
//! A label without a value is `<none>`, as upstream. [`gauges`] is pure (table-tested); [`registry`] feeds
//! it from the caches.

use std::sync::Arc;

use controller_runtime::metrics::Computed;
use crds::kubevirt::migration::MigrationPhase;
use crds::kubevirt::{VirtualMachine, VirtualMachineInstance, VirtualMachineInstanceMigration};
use kube::ResourceExt;
use kube::runtime::reflector::Store;

/// A label value that is not set.
const NONE: &str = "<none>";

fn l(pairs: Vec<(&str, String)>) -> Vec<(String, String)> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn or_none(v: Option<&str>) -> String {
    v.filter(|s| !s.is_empty()).unwrap_or(NONE).to_owned()
}

/// The VM that controls `vmi`, among `vms`.
fn owner<'a>(vmi: &VirtualMachineInstance, vms: &'a [Arc<VirtualMachine>]) -> Option<&'a VirtualMachine> {
    let owner = vmi.owner_references().iter().find(|o| o.kind == "VirtualMachine" && o.controller == Some(true))?;
    vms.iter().map(Arc::as_ref).find(|vm| vm.metadata.uid.as_deref() == Some(owner.uid.as_str()))
}

/// Upstream's cluster gauges for the cached `vmis`, `migrations` and `vms` (see the module table).
pub fn gauges(
    vmis: &[Arc<VirtualMachineInstance>],
    migrations: &[Arc<VirtualMachineInstanceMigration>],
    vms: &[Arc<VirtualMachine>],
) -> Vec<Computed> {
    let mut phases = Computed::gauge("kubevirt_vmi_phase_count", "Sum of VMIs per phase and node.");
    for vmi in vmis {
        let status = vmi.status.as_ref();
        let annotation = |key: &str| or_none(vmi.annotations().get(key).map(String::as_str));
        let vm = owner(vmi, vms);
        let matcher = |m: Option<&crds::kubevirt::vm::Matcher>| or_none(m.and_then(|m| m.name.as_deref()));
        let os = status.and_then(|s| s.guest_os_info.as_ref());
        let labels = vec![
            ("node", or_none(status.and_then(|s| s.node_name.as_deref()))),
            ("phase", status.and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_lowercase()).unwrap_or_default()),
            ("os", annotation("vm.kubevirt.io/os")),
            ("workload", annotation("vm.kubevirt.io/workload")),
            ("flavor", annotation("vm.kubevirt.io/flavor")),
            ("instance_type", matcher(vm.and_then(|v| v.spec.instancetype.as_ref()))),
            ("preference", matcher(vm.and_then(|v| v.spec.preference.as_ref()))),
            ("guest_os_kernel_release", or_none(os.and_then(|o| o.kernel_release.as_deref()))),
            ("guest_os_machine", or_none(os.and_then(|o| o.machine.as_deref()))),
            ("guest_os_name", or_none(os.and_then(|o| o.name.as_deref()))),
            ("guest_os_version_id", or_none(os.and_then(|o| o.version_id.as_deref()))),
        ];
        phases.add(l(labels), 1.0);
    }

    let mut unset = Computed::gauge("kubevirt_vmi_migrations_in_unset_phase", "Number of current unset migrations.");
    let mut pending =
        Computed::gauge("kubevirt_vmi_migrations_in_pending_phase", "Number of current pending migrations.");
    let mut scheduling =
        Computed::gauge("kubevirt_vmi_migrations_in_scheduling_phase", "Number of current scheduling migrations.");
    let mut running =
        Computed::gauge("kubevirt_vmi_migrations_in_running_phase", "Number of current running migrations.");
    let mut succeeded =
        Computed::gauge("kubevirt_vmi_migration_succeeded", "Indicates if the VMI migration succeeded.");
    let mut failed = Computed::gauge("kubevirt_vmi_migration_failed", "Indicates if the VMI migration failed.");
    let mut started =
        Computed::gauge("kubevirt_vmi_migration_start_time_seconds", "The time at which the migration started.");
    let mut ended =
        Computed::gauge("kubevirt_vmi_migration_end_time_seconds", "The time at which the migration ended.");
    for g in [&mut unset, &mut pending, &mut scheduling, &mut running] {
        g.add(Vec::new(), 0.0);
    }
    for m in migrations {
        let labels = || {
            vec![
                ("vmi", m.spec.vmi_name.clone()),
                ("vmim", m.name_any()),
                ("namespace", m.namespace().unwrap_or_default()),
            ]
        };
        match m.phase() {
            None => unset.add(Vec::new(), 1.0),
            Some(MigrationPhase::Pending) => pending.add(Vec::new(), 1.0),
            Some(
                MigrationPhase::Scheduling
                | MigrationPhase::Scheduled
                | MigrationPhase::PreparingTarget
                | MigrationPhase::TargetReady,
            ) => scheduling.add(Vec::new(), 1.0),
            Some(MigrationPhase::Running) => running.add(Vec::new(), 1.0),
            Some(MigrationPhase::Succeeded) => succeeded.add(l(labels()), 1.0),
            Some(MigrationPhase::Failed) => failed.add(l(labels()), 1.0),
            Some(_) => {}
        }
        let state = m.status.as_ref().and_then(|s| s.migration_state.as_ref());
        let unix = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.as_second() as f64;
        if let Some(t) = state.and_then(|s| s.start_timestamp.as_ref()) {
            started.add(l(labels()), unix(t));
        }
        if let Some(t) = state.and_then(|s| s.end_timestamp.as_ref()) {
            ended.add(l(labels()), unix(t));
        }
    }

    let mut per_namespace = Computed::gauge("kubevirt_number_of_vms", "The number of VMs in the cluster by namespace.");
    for vm in vms {
        per_namespace.add(l(vec![("namespace", vm.namespace().unwrap_or_default())]), 1.0);
    }
    vec![phases, unset, pending, scheduling, running, succeeded, failed, started, ended, per_namespace]
}

/// The registry of [`gauges`] over the controller's caches (every VMI, VMIM and VM), computed at every scrape.
pub fn registry(
    vmis: Store<VirtualMachineInstance>,
    migrations: Store<VirtualMachineInstanceMigration>,
    vms: Store<VirtualMachine>,
) -> controller_runtime::metrics::Registry {
    controller_runtime::metrics::Registry::computed(move || gauges(&vmis.state(), &migrations.state(), &vms.state()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}")))
    }

    fn find<'a>(gs: &'a [Computed], name: &str) -> &'a Computed {
        gs.iter().find(|g| g.name == name).unwrap_or_else(|| panic!("no {name}"))
    }

    fn value(g: &Computed, labels: &[(&str, &str)]) -> Option<i64> {
        g.value(labels).map(|v| v as i64)
    }

    #[test]
    fn vmis_count_per_node_and_phase_with_their_vms_instancetype() {
        let vm: Arc<VirtualMachine> = obj(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "namespace": "n", "uid": "u-a"},
            "spec": {"instancetype": {"name": "u1.small"}, "template": {"spec": {"domain": {"devices": {}}}}}}));
        let owned = json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "a", "uid": "u-a",
                            "controller": true}]);
        let vmis: Vec<Arc<VirtualMachineInstance>> = vec![
            obj(json!({"metadata": {"name": "a", "namespace": "n", "ownerReferences": owned,
                                    "annotations": {"vm.kubevirt.io/os": "fedora"}},
                       "spec": {"domain": {"devices": {}}},
                       "status": {"phase": "Running", "nodeName": "node1",
                                  "guestOSInfo": {"name": "Fedora", "versionId": "40"}}})),
            obj(json!({"metadata": {"name": "b", "namespace": "n"}, "spec": {"domain": {"devices": {}}},
                       "status": {"phase": "Running", "nodeName": "node1"}})),
            obj(json!({"metadata": {"name": "c", "namespace": "n"}, "spec": {"domain": {"devices": {}}},
                       "status": {"phase": "Running", "nodeName": "node1"}})),
            obj(json!({"metadata": {"name": "d", "namespace": "n"}, "spec": {"domain": {"devices": {}}},
                       "status": {"phase": "Scheduling"}})),
        ];
        let gs = gauges(&vmis, &[], &[vm]);
        let phases = find(&gs, "kubevirt_vmi_phase_count");
        let a = [("node", "node1"), ("phase", "running"), ("os", "fedora"), ("instance_type", "u1.small")];
        assert_eq!(value(phases, &a), Some(1));
        assert_eq!(value(phases, &[("guest_os_name", "Fedora"), ("guest_os_version_id", "40")]), Some(1));
        let plain = [("node", "node1"), ("phase", "running"), ("os", "<none>"), ("instance_type", "<none>")];
        assert_eq!(value(phases, &plain), Some(2), "two alike VMIs are one sample");
        assert_eq!(value(phases, &[("node", "<none>"), ("phase", "scheduling")]), Some(1));
        assert_eq!(phases.samples.len(), 3);
        assert_eq!(value(find(&gs, "kubevirt_number_of_vms"), &[("namespace", "n")]), Some(1));
    }

    #[test]
    fn migrations_count_by_phase_and_finished_ones_by_name() {
        let vmim = |name: &str, phase: Option<&str>| -> Arc<VirtualMachineInstanceMigration> {
            let status = phase.map(|p| json!({"phase": p})).unwrap_or(json!({}));
            obj(json!({"metadata": {"name": name, "namespace": "n"}, "spec": {"vmiName": "vmi-x"}, "status": status}))
        };
        let ms = vec![
            vmim("m0", None),
            vmim("m1", Some("Pending")),
            vmim("m2", Some("Scheduled")),
            vmim("m3", Some("TargetReady")),
            vmim("m4", Some("Running")),
            vmim("m5", Some("Succeeded")),
            vmim("m6", Some("Failed")),
            obj(json!({"metadata": {"name": "m7", "namespace": "n"}, "spec": {"vmiName": "vmi-y"},
                "status": {"phase": "Running", "migrationState": {"startTimestamp": "1970-01-01T00:01:40Z"}}})),
            obj(json!({"metadata": {"name": "m8", "namespace": "n"}, "spec": {"vmiName": "vmi-y"},
                "status": {"phase": "Succeeded", "migrationState": {"startTimestamp": "1970-01-01T00:01:40Z",
                    "endTimestamp": "1970-01-01T00:02:00Z"}}})),
        ];
        let gs = gauges(&[], &ms, &[]);
        let single = |name: &str| value(find(&gs, name), &[]);
        assert_eq!(single("kubevirt_vmi_migrations_in_unset_phase"), Some(1));
        assert_eq!(single("kubevirt_vmi_migrations_in_pending_phase"), Some(1));
        assert_eq!(single("kubevirt_vmi_migrations_in_scheduling_phase"), Some(2));
        assert_eq!(single("kubevirt_vmi_migrations_in_running_phase"), Some(2));
        let times = |name: &str, vmim: &str| value(find(&gs, name), &[("vmi", "vmi-y"), ("vmim", vmim)]);
        assert_eq!(times("kubevirt_vmi_migration_start_time_seconds", "m7"), Some(100));
        assert_eq!(times("kubevirt_vmi_migration_end_time_seconds", "m7"), None, "not ended");
        assert_eq!(times("kubevirt_vmi_migration_end_time_seconds", "m8"), Some(120));
        assert_eq!(find(&gs, "kubevirt_vmi_migration_start_time_seconds").samples.len(), 2);
        let done = [("vmi", "vmi-x"), ("vmim", "m5"), ("namespace", "n")];
        assert_eq!(value(find(&gs, "kubevirt_vmi_migration_succeeded"), &done), Some(1));
        assert_eq!(value(find(&gs, "kubevirt_vmi_migration_failed"), &[("vmim", "m6")]), Some(1));
        assert!(find(&gs, "kubevirt_vmi_migration_failed").samples.len() == 1);
        // With nothing cached the phase gauges still read 0 (a dashboard sees "none", not "no data").
        let empty = gauges(&[], &[], &[]);
        assert_eq!(value(find(&empty, "kubevirt_vmi_migrations_in_running_phase"), &[]), Some(0));
        assert!(find(&empty, "kubevirt_vmi_phase_count").samples.is_empty());
    }

    #[test]
    fn the_collector_renders_upstreams_names() {
        let vmi: Arc<VirtualMachineInstance> = obj(json!({"metadata": {"name": "b", "namespace": "n"},
            "spec": {"domain": {"devices": {}}}, "status": {"phase": "Running", "nodeName": "node1"}}));
        let (vmis, mut w) = kube::runtime::reflector::store();
        w.apply_watcher_event(&kube::runtime::watcher::Event::Apply(vmi.as_ref().clone()));
        let (migrations, _) = kube::runtime::reflector::store();
        let (vms, _) = kube::runtime::reflector::store();
        let text = registry(vmis, migrations, vms).render();
        assert!(text.contains("# TYPE kubevirt_vmi_phase_count gauge"), "{text}");
        assert!(text.contains("kubevirt_vmi_phase_count{node=\"node1\",phase=\"running\",os=\"<none>\""), "{text}");
        assert!(text.contains("kubevirt_vmi_migrations_in_running_phase 0"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
