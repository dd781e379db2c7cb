//! Reaping orphans. The launcher is PID 1 of its container, so every process whose parent dies is re-parented to
//! it: libvirtd's QEMU capability probes daemonize, and libvirtd then waits (40 s per probe) for a zombie nobody
//! reaps unless PID 1 does (seen with libvirtd itself as PID 1: the first `virsh` call took 80 s). Outside a PID
//! namespace the launcher makes itself a child subreaper, so the same holds there.
//!
//! Guarantees: the launcher's own children (started through [`Reaper::spawn`], or named at [`Reaper::start`]) are
//! never reaped here, so their owners get their exit status. A child is registered while the reaper is locked out,
//! before it could be seen as a zombie. Other zombies whose parent is this process are reaped on every SIGCHLD and
//! at least every second.
//!
//! Assumption: nothing else in the process waits for children it did not start through [`Reaper::spawn`] while the
//! reaper runs (the launcher starts it after preparing, when only libvirtd and virsh are run).

use std::collections::BTreeSet;
use std::io;
use std::process::{ExitStatus, Output};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::process::{Pid, WaitOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

type Owned = Arc<Mutex<BTreeSet<u32>>>;

fn lock(owned: &Owned) -> MutexGuard<'_, BTreeSet<u32>> {
    owned.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The reaping task; dropping it stops reaping.
#[derive(Debug)]
pub struct Reaper {
    owned: Owned,
    task: tokio::task::JoinHandle<()>,
}

impl Reaper {
    /// Starts reaping (on the current tokio runtime); `owned` are children started before that which it must
    /// leave alone.
    pub fn start(owned: impl IntoIterator<Item = u32>) -> io::Result<Reaper> {
        rustix::process::set_child_subreaper(Pid::from_raw(1)).map_err(io::Error::from)?;
        let owned: Owned = Arc::new(Mutex::new(owned.into_iter().collect()));
        let mut sigchld = signal(SignalKind::child())?;
        let shared = Arc::clone(&owned);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = sigchld.recv() => {}
                    _ = tick.tick() => {}
                }
                let n = reap_round(&shared);
                if n > 0 {
                    tracing::debug!(reaped = n, "orphans reaped");
                }
            }
        });
        Ok(Reaper { owned, task })
    }

    /// Spawns `cmd` as an owned child (its exit status stays its owner's).
    pub fn spawn(&self, cmd: &mut Command) -> io::Result<OwnedChild> {
        let mut owned = lock(&self.owned);
        let child = cmd.spawn()?;
        let pid = child.id().unwrap_or(0);
        owned.insert(pid);
        Ok(OwnedChild { child: Some(child), pid, owned: Arc::clone(&self.owned) })
    }

    /// Reaps what can be reaped now; returns how many.
    pub fn reap_now(&self) -> usize {
        reap_round(&self.owned)
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One pass over `/proc`: waits for every zombie child of this process that is not owned.
fn reap_round(owned: &Owned) -> usize {
    let owned = lock(owned);
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    let mut reaped = 0;
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        if parent_of_zombie(&stat) != Some(me) || owned.contains(&pid) {
            continue;
        }
        let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) else { continue };
        if let Ok(Some(_)) = rustix::process::waitpid(Some(p), WaitOptions::NOHANG) {
            reaped += 1;
        }
    }
    reaped
}

/// The parent's PID of a zombie, from its `/proc/<pid>/stat` (`pid (comm) Z ppid …`; comm may hold anything,
/// so the fields are read after the last `)`); `None` for a live process.
fn parent_of_zombie(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    (state == "Z").then_some(ppid)
}

/// A child the reaper leaves alone.
#[derive(Debug)]
pub struct OwnedChild {
    child: Option<Child>,
    pid: u32,
    owned: Owned,
}

impl OwnedChild {
    /// Its process ID.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Waits for it to exit (cancel-safe).
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match self.child.as_mut() {
            Some(c) => c.wait().await,
            None => Err(io::Error::other("the child was already collected")),
        }
    }

    /// Whether it has exited, without waiting.
    pub fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => c.try_wait(),
            None => Err(io::Error::other("the child was already collected")),
        }
    }

    /// Waits for it and collects its piped output.
    pub async fn output(mut self) -> io::Result<Output> {
        match self.child.take() {
            Some(c) => c.wait_with_output().await,
            None => Err(io::Error::other("the child was already collected")),
        }
    }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        lock(&self.owned).remove(&self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zombie_parents_are_read_after_the_command_name() {
        assert_eq!(parent_of_zombie("123 (qemu probe) Z 1 123 123 0 -1"), Some(1));
        assert_eq!(parent_of_zombie("124 (evil) Z 9) S 77 1 1"), None);
        assert_eq!(parent_of_zombie("125 (evil) Z 9) Z 77 1 1"), Some(77));
        assert_eq!(parent_of_zombie("126 (sleep) S 1 126"), None);
        assert_eq!(parent_of_zombie("garbage"), None);
    }
}
