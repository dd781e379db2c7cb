//! Upstream virt-handler's per-VMI domain metrics, read from each launcher's libvirt when `/metrics` is scraped
//! and rendered under upstream's names:
//!
//! | metrics | extra labels | from |
//! | --- | --- | --- |
//! | `kubevirt_vmi_memory_resident_bytes`, `_available_bytes`, `_unused_bytes`, `_usable_bytes`, `_actual_balloon_bytes`, `_cached_bytes`, `_swap_in_traffic_bytes`, `_swap_out_traffic_bytes` (gauges), `_pgmajfault_total`, `_pgminfault_total` (counters), `kubevirt_vmi_memory_domain_bytes` | — | `virDomainMemoryStats` (the guest's own need its balloon driver), the domain's `<memory>` |
//! | `kubevirt_vmi_cpu_usage_seconds_total`, `_cpu_user_usage_seconds_total`, `_cpu_system_usage_seconds_total` | — | `virDomainGetInfo`, `virDomainGetCPUStats` |
//! | `kubevirt_vmi_vcpu_seconds_total` (`state` `running`), `kubevirt_vmi_vcpu_delay_seconds_total`, `kubevirt_vmi_vcpu_wait_seconds_total` (with the kernel's scheduler statistics on) | `id` (the vCPU's index) | QEMU's vCPU threads in the host's `/proc` (`crate::vcpu`) |
//! | `kubevirt_vmi_network_{receive,transmit}_{bytes,packets,errors}_total`, `_{receive,transmit}_packets_dropped_total` | `interface` (the VMI's interface name) | `virDomainInterfaceStats` |
//! | `kubevirt_vmi_storage_{read,write}_traffic_bytes_total`, `kubevirt_vmi_storage_iops_{read,write}_total` | `drive` (the VMI's disk name) | `virDomainBlockStats` |
//! | `kubevirt_vmi_migration_data_bytes_total`, `_data_processed_bytes`, `_data_remaining_bytes` | — | the source's migration job (`virDomainGetJobInfo`) |
//!
//! Every sample has upstream's `node`, `namespace` and `name` labels plus one `kubernetes_vmi_label_<key>` per
//! VMI label (the key with every character Prometheus does not allow as `_`).
//!
//! Not rendered: the storage `*_times_seconds_total` / flush counters and the migration's transfer and dirty
//! rates. libvirt has them only in its typed-parameter statistics, which the `virt` crate does not wrap safely
//! (its `job_stats` even panics when no job runs), and this crate has no `unsafe`; the per-vCPU times, which are
//! there too, are read where libvirt reads them.
//!
//! [`families`] is pure (table-tested). [`Sampler::refresh`] reads every running VMI of the node (at most
//! [`CONCURRENCY`] at once, each bounded by [`TIMEOUT`]; a launcher that does not answer is left out of that
//! scrape) and [`registry`] renders the last reading.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use contracts::kubevirt::launcher::{self, SocketDir};
use controller_runtime::metrics::{Computed, LateRegistry, Registry};
use crds::kubevirt::VirtualMachineInstance;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::Store;

use crate::libvirt::{DomainStats, Libvirt};
use crate::vcpu::{ProcFs, VcpuTimes};

/// Longest wait for one launcher's counters in a scrape.
pub const TIMEOUT: Duration = Duration::from_secs(5);
/// Launchers read at once.
pub const CONCURRENCY: usize = 8;

/// One VMI's counters and identity.
#[derive(Debug, Clone, PartialEq)]
pub struct VmiStats {
    /// The VMI's namespace.
    pub namespace: String,
    /// The VMI's name.
    pub name: String,
    /// The VMI's labels.
    pub labels: BTreeMap<String, String>,
    /// What libvirt reported.
    pub stats: DomainStats,
    /// Its QEMU's vCPU threads (empty when they were not found).
    pub vcpus: Vec<VcpuTimes>,
}

/// A Kubernetes label key as a Prometheus label name: `kubernetes_vmi_label_` and the key with every character
/// other than `[A-Za-z0-9_]` as `_`.
pub fn vmi_label(key: &str) -> String {
    let clean: String = key.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect();
    format!("kubernetes_vmi_label_{clean}")
}

/// Upstream's families for `vmis` on `node` (see the module table).
pub fn families(node: &str, vmis: &[VmiStats]) -> Vec<Computed> {
    use Computed as C;
    let mut mem = [
        C::gauge("kubevirt_vmi_memory_resident_bytes", "Resident set size of the process running the domain."),
        C::gauge("kubevirt_vmi_memory_available_bytes", "Amount of usable memory as seen by the domain."),
        C::gauge("kubevirt_vmi_memory_unused_bytes", "The amount of memory left completely unused by the system."),
        C::gauge(
            "kubevirt_vmi_memory_usable_bytes",
            "The amount of memory which can be reclaimed by balloon without pushing the guest system to swap.",
        ),
        C::gauge("kubevirt_vmi_memory_actual_balloon_bytes", "Current balloon size in bytes."),
        C::gauge(
            "kubevirt_vmi_memory_cached_bytes",
            "The amount of memory that is being used to cache I/O and is available to be reclaimed.",
        ),
        C::gauge(
            "kubevirt_vmi_memory_swap_in_traffic_bytes",
            "The total amount of data read from swap space of the guest in bytes.",
        ),
        C::gauge(
            "kubevirt_vmi_memory_swap_out_traffic_bytes",
            "The total amount of memory written out to swap space of the guest in bytes.",
        ),
        C::counter("kubevirt_vmi_memory_pgmajfault_total", "The number of page faults when disk IO was required."),
        C::counter(
            "kubevirt_vmi_memory_pgminfault_total",
            "The number of other page faults, when disk IO was not required.",
        ),
        C::gauge("kubevirt_vmi_memory_domain_bytes", "The amount of memory in bytes allocated to the domain."),
    ];
    let mut cpu = [
        C::counter(
            "kubevirt_vmi_cpu_usage_seconds_total",
            "Total CPU time spent in all modes (sum of both vcpu and hypervisor usage).",
        ),
        C::counter("kubevirt_vmi_cpu_user_usage_seconds_total", "Total CPU time spent in user mode."),
        C::counter("kubevirt_vmi_cpu_system_usage_seconds_total", "Total CPU time spent in system mode."),
    ];
    let mut net = [
        C::counter("kubevirt_vmi_network_receive_bytes_total", "Total network traffic received in bytes."),
        C::counter("kubevirt_vmi_network_receive_packets_total", "Total network traffic received packets."),
        C::counter("kubevirt_vmi_network_receive_errors_total", "Total network received error packets."),
        C::counter(
            "kubevirt_vmi_network_receive_packets_dropped_total",
            "The total number of rx packets dropped on vNIC interfaces.",
        ),
        C::counter("kubevirt_vmi_network_transmit_bytes_total", "Total network traffic transmitted in bytes."),
        C::counter("kubevirt_vmi_network_transmit_packets_total", "Total network traffic transmitted packets."),
        C::counter("kubevirt_vmi_network_transmit_errors_total", "Total network transmitted error packets."),
        C::counter(
            "kubevirt_vmi_network_transmit_packets_dropped_total",
            "The total number of tx packets dropped on vNIC interfaces.",
        ),
    ];
    let mut storage = [
        C::counter("kubevirt_vmi_storage_read_traffic_bytes_total", "Total number of bytes read from storage."),
        C::counter("kubevirt_vmi_storage_write_traffic_bytes_total", "Total number of written bytes."),
        C::counter("kubevirt_vmi_storage_iops_read_total", "Total number of I/O read operations."),
        C::counter("kubevirt_vmi_storage_iops_write_total", "Total number of I/O write operations."),
    ];
    let mut vcpu = [
        C::counter(
            "kubevirt_vmi_vcpu_seconds_total",
            "Total amount of time spent in each state by each vcpu (cpu_time excluding hypervisor time). Where `id` \
             is the vcpu identifier and `state` can be one of the following: [`OFFLINE`, `RUNNING`, `BLOCKED`].",
        ),
        C::counter("kubevirt_vmi_vcpu_wait_seconds_total", "Amount of time spent by each vcpu while waiting on I/O."),
        C::counter(
            "kubevirt_vmi_vcpu_delay_seconds_total",
            "Amount of time spent by each vcpu waiting in the queue instead of running.",
        ),
    ];
    let mut migration = [
        C::counter("kubevirt_vmi_migration_data_bytes_total", "The total Guest OS data to be migrated to the new VM."),
        C::gauge(
            "kubevirt_vmi_migration_data_processed_bytes",
            "The total Guest OS data processed and migrated to the new VM.",
        ),
        C::gauge(
            "kubevirt_vmi_migration_data_remaining_bytes",
            "The remaining guest OS data to be migrated to the new VM.",
        ),
    ];
    for v in vmis {
        let base = |extra: Option<(&str, &str)>| {
            let mut l = vec![
                ("node".to_owned(), node.to_owned()),
                ("namespace".to_owned(), v.namespace.clone()),
                ("name".to_owned(), v.name.clone()),
            ];
            l.extend(extra.map(|(k, val)| (k.to_owned(), val.to_owned())));
            l.extend(v.labels.iter().map(|(k, val)| (vmi_label(k), val.clone())));
            l
        };
        let plain = base(None);
        let s = &v.stats;
        let m = &s.memory;
        let values = [
            m.rss,
            m.available,
            m.unused,
            m.usable,
            m.actual_balloon,
            m.disk_caches,
            m.swap_in,
            m.swap_out,
            m.major_faults,
            m.minor_faults,
            Some(s.memory_domain),
        ];
        for (family, value) in mem.iter_mut().zip(values) {
            if let Some(value) = value {
                family.add(plain.clone(), value as f64);
            }
        }
        cpu[0].add(plain.clone(), s.cpu_total);
        if let Some((user, system)) = s.cpu_user_system {
            cpu[1].add(plain.clone(), user);
            cpu[2].add(plain.clone(), system);
        }
        for (name, i) in &s.interfaces {
            let values = [
                i.rx_bytes,
                i.rx_packets,
                i.rx_errors,
                i.rx_dropped,
                i.tx_bytes,
                i.tx_packets,
                i.tx_errors,
                i.tx_dropped,
            ];
            let labels = base(Some(("interface", name)));
            for (family, value) in net.iter_mut().zip(values) {
                family.add(labels.clone(), value as f64);
            }
        }
        for (name, b) in &s.disks {
            let values = [b.read_bytes, b.write_bytes, b.read_requests, b.write_requests];
            let labels = base(Some(("drive", name)));
            for (family, value) in storage.iter_mut().zip(values) {
                family.add(labels.clone(), value as f64);
            }
        }
        for c in &v.vcpus {
            let id = c.id.to_string();
            let by_id = base(Some(("id", &id)));
            let mut running = by_id.clone();
            // libvirt reports every online vCPU of a running QEMU domain as running.
            running.insert(4, ("state".to_owned(), "running".to_owned()));
            vcpu[0].add(running, c.time);
            if let Some(wait) = c.wait {
                vcpu[1].add(by_id.clone(), wait);
            }
            vcpu[2].add(by_id, c.delay);
        }
        if let Some(j) = &s.migration {
            let values = [j.total, j.processed, j.remaining];
            for (family, value) in migration.iter_mut().zip(values) {
                family.add(plain.clone(), value as f64);
            }
        }
    }
    [mem.as_slice(), &cpu, &vcpu, &net, &storage, &migration].concat()
}

/// Reads the counters of the node's VMIs and keeps the last reading for [`registry`].
pub struct Sampler {
    node: String,
    vmis: Store<VirtualMachineInstance>,
    pods: Store<Pod>,
    proc: ProcFs,
    last: Mutex<Vec<VmiStats>>,
    /// One reading at a time: a scrape arriving during one waits for it and reads again.
    reading: tokio::sync::Mutex<()>,
}

impl Sampler {
    /// A sampler of `node`'s VMIs (`vmis`: the node's VMIs, `pods`: its launcher pods, `proc`: the host's
    /// process table, where their QEMUs' vCPU threads are).
    pub fn new(node: String, vmis: Store<VirtualMachineInstance>, pods: Store<Pod>, proc: ProcFs) -> Sampler {
        let (last, reading) = (Mutex::new(Vec::new()), tokio::sync::Mutex::new(()));
        Sampler { node, vmis, pods, proc, last, reading }
    }

    /// Reads every VMI of the node whose launcher pod on this node is known (see the module doc for bounds).
    pub async fn refresh(&self) {
        let _one = self.reading.lock().await;
        let targets: Vec<(String, String, BTreeMap<String, String>, String)> = self
            .vmis
            .state()
            .into_iter()
            .filter_map(|vmi| {
                let pod = crate::agent::active_pod(&self.pods, &self.node, &vmi)?;
                Some((vmi.namespace()?, vmi.name_any(), vmi.labels().clone(), pod.uid()?))
            })
            .collect();
        let read = targets.into_iter().map(|(namespace, name, labels, pod_uid)| async move {
            let domain = launcher::domain_name(&namespace, &name);
            let proc = self.proc.clone();
            type Read = Result<Option<(DomainStats, Vec<VcpuTimes>)>, crate::libvirt::Error>;
            let read = tokio::task::spawn_blocking(move || -> Read {
                let uri = SocketDir::on_node(&pod_uid).libvirt_uri();
                let Some(stats) = Libvirt::connect(&uri)?.lookup(&domain)?.map(|d| d.stats()).transpose()? else {
                    return Ok(None);
                };
                let vcpus = proc.qemu_of_pod(&pod_uid).map(|pid| proc.vcpus(pid)).unwrap_or_default();
                Ok(Some((stats, vcpus)))
            });
            match tokio::time::timeout(TIMEOUT, read).await {
                Ok(Ok(Ok(Some((stats, vcpus))))) => Some(VmiStats { namespace, name, labels, stats, vcpus }),
                Ok(Ok(Ok(None))) => None,
                Ok(Ok(Err(e))) => {
                    tracing::debug!(%namespace, %name, error = %e.line(), "no domain statistics");
                    None
                }
                Ok(Err(e)) => {
                    tracing::warn!(%namespace, %name, error = %e, "reading domain statistics failed");
                    None
                }
                Err(_) => {
                    tracing::warn!(%namespace, %name, "the launcher's libvirt did not answer in {TIMEOUT:?}");
                    None
                }
            }
        });
        let mut read: Vec<VmiStats> = futures::stream::iter(read)
            .buffer_unordered(CONCURRENCY)
            .filter_map(futures::future::ready)
            .collect()
            .await;
        read.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = read;
    }

    /// The last reading.
    pub fn last(&self) -> Vec<VmiStats> {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The registry rendering [`families`] of the sampler's last reading.
pub fn registry(sampler: Arc<Sampler>) -> Registry {
    Registry::computed(move || families(&sampler.node, &sampler.last()))
}

/// Registers the domain metrics of `sampler` in `late`: each scrape reads the node's domains, then renders.
pub fn register(late: &LateRegistry, sampler: Arc<Sampler>) {
    late.add_with_refresh(
        registry(sampler.clone()),
        Box::new(move || {
            let sampler = sampler.clone();
            Box::pin(async move { sampler.refresh().await })
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::libvirt::{BlockCounters, InterfaceCounters, MemoryStats, MigrationCounters};

    fn find<'a>(fs: &'a [Computed], name: &str) -> &'a Computed {
        fs.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no {name}"))
    }

    fn vmi(name: &str, stats: DomainStats) -> VmiStats {
        VmiStats {
            namespace: "ns".into(),
            name: name.into(),
            labels: BTreeMap::from([("kubevirt.io/vm".into(), name.into())]),
            stats,
            vcpus: Vec::new(),
        }
    }

    #[test]
    fn counters_become_upstreams_families_with_upstreams_labels() {
        let full = DomainStats {
            memory_domain: 128 << 20,
            memory: MemoryStats::from_tags([
                (virt_sys::VIR_DOMAIN_MEMORY_STAT_RSS, 1000),
                (virt_sys::VIR_DOMAIN_MEMORY_STAT_AVAILABLE, 2000),
                (virt_sys::VIR_DOMAIN_MEMORY_STAT_MAJOR_FAULT, 3),
                (99, 5),
            ]),
            cpu_total: 2.5,
            cpu_user_system: Some((1.5, 0.5)),
            disks: vec![(
                "containerdisk".into(),
                BlockCounters { read_bytes: 4096, read_requests: 2, ..Default::default() },
            )],
            interfaces: vec![(
                "default".into(),
                InterfaceCounters { rx_bytes: 100, tx_packets: 3, ..Default::default() },
            )],
            migration: Some(MigrationCounters { total: 10, processed: 4, remaining: 6 }),
        };
        let bare = DomainStats { memory_domain: 64 << 20, cpu_total: 0.25, ..Default::default() };
        let mut a = vmi("a", full);
        a.vcpus = vec![
            VcpuTimes { id: 0, time: 1.5, delay: 0.25, wait: Some(0.5) },
            VcpuTimes { id: 1, time: 3.0, delay: 0.0, wait: None },
        ];
        let fs = families("node1", &[a, vmi("b", bare)]);
        let a = [("node", "node1"), ("namespace", "ns"), ("name", "a"), ("kubernetes_vmi_label_kubevirt_io_vm", "a")];
        let b = [("name", "b")];
        let v = |name: &str, labels: &[(&str, &str)]| find(&fs, name).value(labels);
        assert_eq!(v("kubevirt_vmi_memory_resident_bytes", &a), Some(1000.0 * 1024.0), "KiB become bytes");
        assert_eq!(v("kubevirt_vmi_memory_available_bytes", &a), Some(2000.0 * 1024.0));
        assert_eq!(v("kubevirt_vmi_memory_pgmajfault_total", &a), Some(3.0), "faults are counts");
        assert_eq!(v("kubevirt_vmi_memory_unused_bytes", &a), None, "not reported, not rendered");
        assert_eq!(v("kubevirt_vmi_memory_domain_bytes", &b), Some((64u64 << 20) as f64));
        assert_eq!(v("kubevirt_vmi_cpu_usage_seconds_total", &a), Some(2.5));
        assert_eq!(v("kubevirt_vmi_cpu_user_usage_seconds_total", &a), Some(1.5));
        assert_eq!(v("kubevirt_vmi_cpu_system_usage_seconds_total", &b), None);
        assert_eq!(v("kubevirt_vmi_cpu_usage_seconds_total", &b), Some(0.25));
        let nic = [("name", "a"), ("interface", "default")];
        assert_eq!(v("kubevirt_vmi_network_receive_bytes_total", &nic), Some(100.0));
        assert_eq!(v("kubevirt_vmi_network_transmit_packets_total", &nic), Some(3.0));
        let disk = [("name", "a"), ("drive", "containerdisk")];
        assert_eq!(v("kubevirt_vmi_storage_read_traffic_bytes_total", &disk), Some(4096.0));
        assert_eq!(v("kubevirt_vmi_storage_iops_read_total", &disk), Some(2.0));
        assert_eq!(v("kubevirt_vmi_migration_data_remaining_bytes", &a), Some(6.0));
        assert_eq!(v("kubevirt_vmi_migration_data_bytes_total", &b), None, "no job, no migration sample");
        assert_eq!(find(&fs, "kubevirt_vmi_network_receive_bytes_total").samples.len(), 1);
        let cpu0 = [("name", "a"), ("id", "0")];
        assert_eq!(v("kubevirt_vmi_vcpu_seconds_total", &[cpu0[0], cpu0[1], ("state", "running")]), Some(1.5));
        assert_eq!(v("kubevirt_vmi_vcpu_seconds_total", &[("name", "a"), ("id", "1")]), Some(3.0));
        assert_eq!(v("kubevirt_vmi_vcpu_delay_seconds_total", &cpu0), Some(0.25));
        assert_eq!(v("kubevirt_vmi_vcpu_wait_seconds_total", &cpu0), Some(0.5));
        assert_eq!(v("kubevirt_vmi_vcpu_wait_seconds_total", &[("id", "1")]), None, "no scheduler statistics");
        assert_eq!(v("kubevirt_vmi_vcpu_seconds_total", &b), None, "vCPU threads not found: nothing rendered");
    }

    #[test]
    fn label_keys_become_prometheus_names() {
        assert_eq!(vmi_label("app.kubernetes.io/name"), "kubernetes_vmi_label_app_kubernetes_io_name");
        assert_eq!(vmi_label("special"), "kubernetes_vmi_label_special");
    }

    #[test]
    fn the_collector_renders_counters_with_their_upstream_names() {
        let (vmis, _) = kube::runtime::reflector::store();
        let (pods, _) = kube::runtime::reflector::store();
        let sampler = Arc::new(Sampler::new("n1".into(), vmis, pods, ProcFs::new("/nonexistent")));
        let mut a = vmi("a", DomainStats { memory_domain: 1024, cpu_total: 1.0, ..Default::default() });
        a.vcpus = vec![VcpuTimes { id: 0, time: 2.0, delay: 0.0, wait: None }];
        *sampler.last.lock().unwrap_or_else(|p| p.into_inner()) = vec![a];
        let text = registry(sampler).render();
        assert!(text.contains("# TYPE kubevirt_vmi_cpu_usage_seconds counter"), "{text}");
        assert!(
            text.contains(
                "\nkubevirt_vmi_cpu_usage_seconds_total{node=\"n1\",namespace=\"ns\",name=\"a\",kubernetes_vmi_label_kubevirt_io_vm=\"a\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("\nkubevirt_vmi_memory_domain_bytes{node=\"n1\""), "{text}");
        assert!(
            text.contains(
                "\nkubevirt_vmi_vcpu_seconds_total{node=\"n1\",namespace=\"ns\",name=\"a\",id=\"0\",state=\"running\",kubernetes_vmi_label_kubevirt_io_vm=\"a\"} 2"
            ),
            "{text}"
        );
    }
}
