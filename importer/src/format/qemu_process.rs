//! Running `qemu-img` bounded: resource limits set on the child ([`Limits`]: address space, CPU time, no core
//! dumps) and, when a run does not succeed, what stopped it ([`Stop`]: a limit or a signal) or what it said. The
//! limit wrapper itself is shared with the launcher ([`controller_runtime::limits`]); this module adds the
//! importer's programs, limits and errors.

use std::process::{Child, Command, ExitStatus, Stdio};

pub use controller_runtime::limits::{CPU_GRACE_SECS, INSPECT_LIMITS, Limits, Signal, Stop};
pub(crate) use controller_runtime::limits::{first_lines, limited, stopped, without_message};

use crate::{Error, Result};

/// A `qemu-img` command (`QEMU_IMG` overrides the program) that runs under `limits` from its first
/// instruction (see [`limited`]).
pub(crate) fn command(limits: Limits) -> Command {
    limited(std::ffi::OsStr::new(&std::env::var("QEMU_IMG").unwrap_or_else(|_| String::from("qemu-img"))), limits)
}

/// `qemu-img convert`: CDI runs it without limits. Here: 2 GiB of address space (a streamOptimized vmdk
/// reaches about 520 MiB with its worker threads' stacks and malloc arenas on 2 cores;
/// [`super::qemu_img::convert`] caps the arenas so more cores do not need more) and 60 s plus 30 s per GiB of
/// virtual size of CPU time (measured: about 4 s per GiB, most of it in the kernel writing the target).
pub fn convert_limits(virtual_size: u64) -> Limits {
    Limits { address_space: 2 << 30, cpu_secs: virtual_size.div_ceil(1 << 30).saturating_mul(30).saturating_add(60) }
}

/// glibc malloc arenas for the converting qemu-img: each reserves 64 MiB of address space, and by default
/// there can be eight per core.
pub(crate) const CONVERT_MALLOC_ARENAS: &str = "4";

/// Starts `cmd` (made by [`command`] or [`limited`]).
pub(crate) fn spawn(cmd: &mut Command, operation: &'static str) -> Result<Child> {
    cmd.spawn().map_err(|e| Error::QemuImg { operation, message: format!("cannot run qemu-img: {e}") })
}

/// The error for a run that did not succeed: how it was stopped, else its stderr (or its exit status when it
/// printed nothing).
pub(crate) fn failure(operation: &'static str, status: ExitStatus, stderr: &[u8], limits: Limits) -> Error {
    if let Some(stop) = stopped(status, stderr, limits) {
        return Error::QemuImgStopped { operation, stop };
    }
    let mut message = first_lines(stderr);
    if message.is_empty() {
        message = without_message(status);
    }
    Error::QemuImg { operation, message }
}

/// Runs qemu-img with `args` and `limits`, collecting its output.
pub(crate) fn run(operation: &'static str, args: &[&std::ffi::OsStr], limits: Limits) -> Result<std::process::Output> {
    let mut cmd = command(limits);
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = spawn(&mut cmd, operation)?;
    child.wait_with_output().map_err(|e| Error::QemuImg { operation, message: format!("waiting for qemu-img: {e}") })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

    use super::*;

    #[test]
    fn stopped_runs_become_invalid_image_errors() {
        let e = Error::QemuImgStopped {
            operation: "info",
            stop: Stop::Signal { signal: Signal(9), detail: String::new() },
        };
        assert_eq!(e.to_string(), "qemu-img info was killed by signal 9 (SIGKILL)");
        assert_eq!(e.kind(), crate::ErrorKind::InvalidImage);
        assert_eq!(convert_limits(0).cpu_secs, 60);
        assert_eq!(convert_limits((1 << 30) + 1).cpu_secs, 120);
        assert_eq!(convert_limits(u64::MAX).cpu_secs, (1u64 << 34) * 30 + 60);
    }

    /// A shell as the child, with `limits`; returns its status and stderr.
    fn sh(script: &str, limits: Limits) -> (ExitStatus, String) {
        let mut cmd = limited(std::ffi::OsStr::new("sh"), limits);
        cmd.args(["-c", script]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let out = spawn(&mut cmd, "test").unwrap().wait_with_output().unwrap();
        (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// A real CPU limit: the child spins until SIGXCPU ends it, and the error says so.
    #[test]
    fn cpu_limit_ends_a_spinning_child() {
        let limits = Limits { address_space: 1 << 30, cpu_secs: 1 };
        let (status, err) = sh("while :; do :; done", limits);
        let e = failure("info", status, err.as_bytes(), limits).to_string();
        assert_eq!(e, "qemu-img info exceeded its CPU time limit of 1 s (killed by signal 24 (SIGXCPU))");
    }

    /// A failure without a message says how it ended instead.
    #[test]
    fn silent_failures_name_their_status() {
        let (status, err) = sh("exit 3", INSPECT_LIMITS);
        assert_eq!(
            failure("check", status, err.as_bytes(), INSPECT_LIMITS).to_string(),
            "qemu-img check failed: exited with status 3 without a message"
        );
        let (status, err) = sh("kill -9 $$", INSPECT_LIMITS);
        assert_eq!(
            failure("convert", status, err.as_bytes(), INSPECT_LIMITS).to_string(),
            "qemu-img convert was killed by signal 9 (SIGKILL)"
        );
    }
}
