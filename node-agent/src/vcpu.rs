//! Per-vCPU times of a launcher's QEMU, read from the host's `/proc` (the node agent shares the host's PID
//! namespace): what libvirt reports as `vcpu.<n>.time`, `.wait` and `.delay` in its bulk statistics, which the
//! `virt` crate does not wrap safely (this crate has no `unsafe`). libvirt reads the same files.
//!
//! ```text
//! /proc/<pid>/comm = qemu-system-*  and  /proc/<pid>/cgroup names the launcher pod  →  QEMU of that pod
//! /proc/<pid>/task/<tid>/comm = "CPU <n>/TCG" or "CPU <n>/KVM" (libvirt starts QEMU with debug-threads=on)
//!     schedstat: "<ns on a CPU> <ns waiting on a run queue> <slices>"  →  time, delay
//!     sched:     "wait_sum : <ms>" (only with the kernel's sched_schedstats on)  →  wait
//! ```
//!
//! Every function takes the `/proc` root, so the tests read a directory of their own; a process that ends while
//! it is read is simply not reported.

use std::fs;
use std::path::{Path, PathBuf};

use crate::pod_setup::in_pod_cgroup;

/// One vCPU's counters (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct VcpuTimes {
    /// The vCPU's index (`CPU <n>/…`).
    pub id: u32,
    /// Time its thread spent on a host CPU.
    pub time: f64,
    /// Time it waited on a host run queue (steal time, to the guest).
    pub delay: f64,
    /// The scheduler's wait sum, when the kernel keeps scheduler statistics (`kernel.sched_schedstats`).
    pub wait: Option<f64>,
}

/// The host's process table, rooted at `root` (`/proc` in the node agent).
#[derive(Debug, Clone)]
pub struct ProcFs {
    root: PathBuf,
}

impl ProcFs {
    /// The process table at `root`.
    pub fn new(root: impl Into<PathBuf>) -> ProcFs {
        ProcFs { root: root.into() }
    }

    /// The PID of the QEMU process in pod `pod_uid` (the lowest, should there be several), if one runs.
    pub fn qemu_of_pod(&self, pod_uid: &str) -> Option<u32> {
        let mut pids: Vec<u32> = fs::read_dir(&self.root)
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                let dir = self.root.join(pid.to_string());
                read(&dir.join("comm")).is_some_and(|c| c.starts_with("qemu-system"))
                    && read(&dir.join("cgroup")).is_some_and(|c| in_pod_cgroup(&c, pod_uid))
            })
            .collect();
        pids.sort_unstable();
        pids.first().copied()
    }

    /// The vCPU threads of process `pid` and their counters, by vCPU index.
    pub fn vcpus(&self, pid: u32) -> Vec<VcpuTimes> {
        let tasks = self.root.join(pid.to_string()).join("task");
        let Ok(entries) = fs::read_dir(&tasks) else { return Vec::new() };
        let mut out: Vec<VcpuTimes> = entries
            .flatten()
            .filter_map(|e| {
                let dir = e.path();
                let id = vcpu_id(&read(&dir.join("comm"))?)?;
                let (time, delay) = schedstat(&read(&dir.join("schedstat"))?)?;
                let wait = read(&dir.join("sched")).and_then(|s| wait_sum(&s));
                Some(VcpuTimes { id, time, delay, wait })
            })
            .collect();
        out.sort_by_key(|v| v.id);
        out
    }
}

fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// The vCPU index of a QEMU thread named `CPU <n>/<accelerator>`.
pub fn vcpu_id(comm: &str) -> Option<u32> {
    let (n, accel) = comm.trim_end().strip_prefix("CPU ")?.split_once('/')?;
    (!accel.is_empty()).then_some(())?;
    n.parse().ok()
}

/// (seconds on a CPU, seconds waiting on a run queue) from a task's `schedstat`.
pub fn schedstat(text: &str) -> Option<(f64, f64)> {
    let mut f = text.split_whitespace().map(|v| v.parse::<u64>().ok());
    let (run, wait) = (f.next()??, f.next()??);
    Some((run as f64 / 1e9, wait as f64 / 1e9))
}

/// The scheduler's wait sum (seconds) from a task's `sched` file (`wait_sum`, in milliseconds, under one of the
/// prefixes kernels used), when the kernel keeps it.
pub fn wait_sum(text: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        let key = key.trim();
        let named = ["wait_sum", "se.wait_sum", "se.statistics.wait_sum"].contains(&key);
        named.then(|| value.trim().parse::<f64>().ok().map(|ms| ms / 1e3)).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_threads_are_named_by_qemu() {
        assert_eq!(vcpu_id("CPU 0/TCG\n"), Some(0));
        assert_eq!(vcpu_id("CPU 12/KVM"), Some(12));
        for other in ["qemu-system-x86", "CPU 0/", "CPU x/TCG", "IO mon_iothread", "CPU0/TCG", ""] {
            assert_eq!(vcpu_id(other), None, "{other:?}");
        }
    }

    #[test]
    fn scheduler_files_are_parsed_to_seconds() {
        assert_eq!(schedstat("2500000000 1000000 42\n"), Some((2.5, 0.001)));
        assert_eq!(schedstat("12"), None);
        assert_eq!(schedstat("a b c"), None);
        let sched = "CPU 0/TCG (4242, #threads: 9)\n---\nse.exec_start : 1.0\nwait_sum : 1500.250000\n";
        assert_eq!(wait_sum(sched), Some(1.50025));
        assert_eq!(wait_sum("se.statistics.wait_sum                    :           20.000000"), Some(0.02));
        assert_eq!(wait_sum("se.sum_exec_runtime : 249.28\n"), None, "schedstats off: no wait sum");
    }

    #[test]
    fn the_qemu_of_a_pod_and_its_vcpus_are_found_in_proc() -> std::io::Result<()> {
        let root = tempfile::tempdir()?;
        let uid = "0d6f3c2a-1111-4222-8333-444455556666";
        let process = |pid: u32, comm: &str, cgroup: &str| -> std::io::Result<PathBuf> {
            let dir = root.path().join(pid.to_string());
            fs::create_dir_all(dir.join("task"))?;
            fs::write(dir.join("comm"), format!("{comm}\n"))?;
            fs::write(dir.join("cgroup"), cgroup)?;
            Ok(dir)
        };
        let task = |dir: &Path, tid: u32, comm: &str, schedstat: &str| -> std::io::Result<()> {
            let t = dir.join("task").join(tid.to_string());
            fs::create_dir_all(&t)?;
            fs::write(t.join("comm"), format!("{comm}\n"))?;
            fs::write(t.join("schedstat"), schedstat)
        };
        let ours = format!("4:cpu,cpuacct:/kubepods/besteffort/pod{uid}/abc/machine/qemu-1.libvirt-qemu\n");
        process(10, "virt-launcher", &ours)?;
        process(30, "qemu-system-x86", "4:cpu,cpuacct:/kubepods/besteffort/podother/def\n")?;
        let qemu = process(20, "qemu-system-x86", &ours)?;
        task(&qemu, 20, "qemu-system-x86", "9 9 9")?;
        task(&qemu, 21, "CPU 1/TCG", "3000000000 5000000 7")?;
        task(&qemu, 22, "CPU 0/TCG", "1000000000 0 3")?;
        fs::write(qemu.join("task/22/sched"), "wait_sum : 250.0\n")?;
        let proc = ProcFs::new(root.path());
        assert_eq!(proc.qemu_of_pod(uid), Some(20));
        assert_eq!(proc.qemu_of_pod("0d6f3c2a-0000-4222-8333-444455556666"), None);
        assert_eq!(
            proc.vcpus(20),
            [
                VcpuTimes { id: 0, time: 1.0, delay: 0.0, wait: Some(0.25) },
                VcpuTimes { id: 1, time: 3.0, delay: 0.005, wait: None },
            ]
        );
        assert!(proc.vcpus(99).is_empty(), "a process that is gone");
        Ok(())
    }
}
