//! Running a tool on hostile input bounded: resource limits set on the child from its first instruction
//! ([`Limits`], [`limited`]: address space, CPU time, no core dumps) and, when a run does not succeed, what stopped
//! it ([`Stop`]: a limit or a signal). The importer's and the launcher's `qemu-img` runs go through it.

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus};

use rustix::process::Resource;

/// Resource limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Address space (`RLIMIT_AS`), bytes: allocations beyond it fail.
    pub address_space: u64,
    /// CPU time (`RLIMIT_CPU` soft limit: SIGXCPU), seconds; the hard limit (SIGKILL) is [`CPU_GRACE_SECS`]
    /// later, for a process that survives SIGXCPU.
    pub cpu_secs: u64,
}

/// Seconds between the CPU soft limit (SIGXCPU, which ends qemu-img) and the hard limit (SIGKILL).
pub const CPU_GRACE_SECS: u64 = 5;

/// `qemu-img info` and `qemu-img check` of an untrusted image: CDI's limits for `qemu-img info` (taken from
/// OpenStack Nova; KubeVirt's virt-handler uses the same for containerDisks), 1 GiB of address space and 30 s of
/// CPU.
pub const INSPECT_LIMITS: Limits = Limits { address_space: 1 << 30, cpu_secs: 30 };

/// A command running `program` under `limits`: a shell sets them on itself (`ulimit`) and then `exec`s the
/// program, which inherits them, so the program runs bounded from its first instruction; arguments added to the
/// returned command go to the program.
///
/// Why a shell: setting the limits in the child between `fork` and `exec` needs `pre_exec`, which is unsafe
/// (forbidden in this workspace); setting them on the child's pid after `spawn` (`prlimit(2)`) races with the
/// child, which on a loaded machine can read and allocate before the parent gets to it; util-linux's `prlimit`
/// binary would be one more tool the images must ship, where `/bin/sh` is there already. The limits are clamped
/// to this process's own hard limits (the child inherits those and may not raise them), the CPU hard limit is
/// [`CPU_GRACE_SECS`] above the soft one, and core dumps are off so a limit hit cannot leave a core of a hostile
/// run behind. If the shell cannot set a limit or find the program, it exits non-zero with its own message.
pub fn limited(program: &OsStr, limits: Limits) -> Command {
    let ceiling = |r: Resource| rustix::process::getrlimit(r).maximum.unwrap_or(u64::MAX);
    let address_space = limits.address_space.min(ceiling(Resource::As));
    let cpu_hard = limits.cpu_secs.saturating_add(CPU_GRACE_SECS).min(ceiling(Resource::Cpu));
    let cpu_soft = limits.cpu_secs.min(cpu_hard);
    let script = format!(
        "ulimit -c 0 && ulimit -v {} && ulimit -t {cpu_hard} && ulimit -S -t {cpu_soft} && exec \"$0\" \"$@\"",
        address_space / 1024
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(script).arg(program);
    cmd
}

/// The signal the CPU soft limit sends (Linux numbering).
const SIGXCPU: i32 = 24;

/// A signal number, shown with its name: `signal 9 (SIGKILL)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub i32);

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [&str; 32] = [
            "",
            "SIGHUP",
            "SIGINT",
            "SIGQUIT",
            "SIGILL",
            "SIGTRAP",
            "SIGABRT",
            "SIGBUS",
            "SIGFPE",
            "SIGKILL",
            "SIGUSR1",
            "SIGSEGV",
            "SIGUSR2",
            "SIGPIPE",
            "SIGALRM",
            "SIGTERM",
            "SIGSTKFLT",
            "SIGCHLD",
            "SIGCONT",
            "SIGSTOP",
            "SIGTSTP",
            "SIGTTIN",
            "SIGTTOU",
            "SIGURG",
            "SIGXCPU",
            "SIGXFSZ",
            "SIGVTALRM",
            "SIGPROF",
            "SIGWINCH",
            "SIGIO",
            "SIGPWR",
            "SIGSYS",
        ];
        match usize::try_from(self.0).ok().and_then(|i| NAMES.get(i)).filter(|n| !n.is_empty()) {
            Some(name) => write!(f, "signal {} ({name})", self.0),
            None => write!(f, "signal {}", self.0),
        }
    }
}

/// How a bounded run was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// It used up its CPU time.
    CpuLimit {
        /// The limit, seconds.
        secs: u64,
        /// The signal that ended it.
        signal: Signal,
    },
    /// An allocation failed under its address space limit.
    MemoryLimit {
        /// The limit, bytes.
        bytes: u64,
        /// The signal that ended it, if one did.
        signal: Option<Signal>,
        /// Its stderr, first lines.
        detail: String,
    },
    /// A signal ended it.
    Signal {
        /// The signal.
        signal: Signal,
        /// Its stderr, first lines (may be empty).
        detail: String,
    },
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let colon = |d: &str| if d.is_empty() { String::new() } else { format!(": {d}") };
        match self {
            Stop::CpuLimit { secs, signal } => {
                write!(f, "exceeded its CPU time limit of {secs} s (killed by {signal})")
            }
            Stop::MemoryLimit { bytes, signal, detail } => {
                write!(f, "ran out of memory (address space limit {})", Bytes(*bytes))?;
                if let Some(s) = signal {
                    write!(f, ", killed by {s}")?;
                }
                f.write_str(&colon(detail))
            }
            Stop::Signal { signal, detail } => write!(f, "was killed by {signal}{}", colon(detail)),
        }
    }
}

/// A byte count in whole GiB or MiB when it is one.
struct Bytes(u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b if b >= 1 << 30 && b % (1 << 30) == 0 => write!(f, "{} GiB", b >> 30),
            b if b >= 1 << 20 && b % (1 << 20) == 0 => write!(f, "{} MiB", b >> 20),
            b => write!(f, "{b} bytes"),
        }
    }
}

/// Whether a tool's stderr says an allocation failed (glib's `g_malloc`, `qemu_memalign`, or an `ENOMEM` error
/// it reports). QEMU's `qemu_thread_create` failing with `EAGAIN` counts too: `pthread_create` says `EAGAIN`
/// when it cannot map the new thread's stack, which is what an address space limit does to a process that has
/// used it up (the tools run here have no thread-count limit of their own).
fn out_of_memory(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    [
        "cannot allocate memory",
        "failed to allocate",
        "out of memory",
        "qemu_thread_create: resource temporarily unavailable",
    ]
    .iter()
    .any(|m| s.contains(m))
}

/// Why a run under `limits` that did not succeed was stopped, if a signal or a limit stopped it (else it failed
/// on its own).
pub fn stopped(status: ExitStatus, stderr: &[u8], limits: Limits) -> Option<Stop> {
    classify(status.signal(), stderr, limits)
}

fn classify(signal: Option<i32>, stderr: &[u8], limits: Limits) -> Option<Stop> {
    let detail = first_lines(stderr);
    match signal {
        Some(SIGXCPU) => Some(Stop::CpuLimit { secs: limits.cpu_secs, signal: Signal(SIGXCPU) }),
        s if out_of_memory(&detail) => {
            Some(Stop::MemoryLimit { bytes: limits.address_space, signal: s.map(Signal), detail })
        }
        Some(s) => Some(Stop::Signal { signal: Signal(s), detail }),
        None => None,
    }
}

/// What to say of a run that failed and printed nothing.
pub fn without_message(status: ExitStatus) -> String {
    match status.code() {
        Some(c) => format!("exited with status {c} without a message"),
        None => String::from("ended without a message"),
    }
}

/// The first three non-empty lines, joined by spaces (empty when there are none).
pub fn first_lines(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    s.lines().filter(|l| !l.trim().is_empty()).take(3).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use std::process::Stdio;

    use super::*;

    #[test]
    fn stops_are_named() {
        let l = INSPECT_LIMITS;
        let msg = |signal, stderr: &str| classify(signal, stderr.as_bytes(), l).map(|s| s.to_string());
        assert_eq!(
            msg(Some(24), ""),
            Some("exceeded its CPU time limit of 30 s (killed by signal 24 (SIGXCPU))".into())
        );
        assert_eq!(msg(Some(9), "\n"), Some("was killed by signal 9 (SIGKILL)".into()));
        assert_eq!(msg(Some(11), "boom\n"), Some("was killed by signal 11 (SIGSEGV): boom".into()));
        assert_eq!(msg(Some(64), ""), Some("was killed by signal 64".into()));
        assert_eq!(
            msg(None, "qemu-img: Could not open 'a.vmdk': Cannot allocate memory\n"),
            Some("ran out of memory (address space limit 1 GiB): qemu-img: Could not open 'a.vmdk': Cannot allocate memory".into())
        );
        assert_eq!(
            msg(Some(6), "qemu_memalign: failed to allocate 2097152 bytes at alignment 4096\n"),
            Some(
                "ran out of memory (address space limit 1 GiB), killed by signal 6 (SIGABRT): qemu_memalign: failed to \
                 allocate 2097152 bytes at alignment 4096"
                    .into()
            )
        );
        assert_eq!(
            msg(Some(6), "qemu: qemu_thread_create: Resource temporarily unavailable\n"),
            Some(
                "ran out of memory (address space limit 1 GiB), killed by signal 6 (SIGABRT): qemu: \
                 qemu_thread_create: Resource temporarily unavailable"
                    .into()
            )
        );
        assert_eq!(
            msg(Some(6), "qemu: Resource temporarily unavailable\n").map(|m| m.starts_with("was killed")),
            Some(true)
        );
        assert_eq!(msg(None, "qemu-img: Could not open 'x': Invalid argument"), None);
        assert_eq!(Bytes(2 << 30).to_string(), "2 GiB");
        assert_eq!(Bytes(3 << 20).to_string(), "3 MiB");
        assert_eq!(Bytes(1000).to_string(), "1000 bytes");
    }

    /// A shell as the child, with `limits`; returns its status and stderr.
    fn sh(script: &str, limits: Limits) -> (ExitStatus, String) {
        let mut cmd = limited(OsStr::new("sh"), limits);
        cmd.args(["-c", script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let out = cmd.spawn().unwrap().wait_with_output().unwrap();
        (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// The limits reach the child from its start (read at once: it runs under them from its first instruction).
    #[test]
    fn limits_are_applied_to_the_child() {
        let (status, err) = sh(
            "grep -E 'Max (cpu time|address space|core file size)' /proc/self/limits >&2",
            Limits { address_space: 3 << 30, cpu_secs: 7 },
        );
        assert!(status.success(), "{err}");
        let norm = err.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(norm.contains("Max cpu time 7 12 seconds"), "{err}");
        assert!(norm.contains("Max address space 3221225472 3221225472 bytes"), "{err}");
        assert!(norm.contains("Max core file size 0 0 bytes"), "{err}");
    }

    /// A real CPU limit: the child spins until SIGXCPU ends it, and the stop says so.
    #[test]
    fn cpu_limit_ends_a_spinning_child() {
        let limits = Limits { address_space: 1 << 30, cpu_secs: 1 };
        let (status, err) = sh("while :; do :; done", limits);
        assert_eq!(status.signal(), Some(SIGXCPU), "{err}");
        assert_eq!(
            stopped(status, err.as_bytes(), limits).map(|s| s.to_string()).as_deref(),
            Some("exceeded its CPU time limit of 1 s (killed by signal 24 (SIGXCPU))")
        );
    }

    /// A failure without a message says how it ended instead.
    #[test]
    fn silent_failures_name_their_status() {
        let (status, err) = sh("exit 3", INSPECT_LIMITS);
        assert_eq!(stopped(status, err.as_bytes(), INSPECT_LIMITS), None);
        assert_eq!(without_message(status), "exited with status 3 without a message");
        let (status, err) = sh("kill -9 $$", INSPECT_LIMITS);
        assert_eq!(
            stopped(status, err.as_bytes(), INSPECT_LIMITS).map(|s| s.to_string()).as_deref(),
            Some("was killed by signal 9 (SIGKILL)")
        );
    }
}
