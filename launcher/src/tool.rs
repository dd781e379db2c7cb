//! Running the tools the launcher prepares with (`qemu-img`, `xorrisofs`, `ip`, `nft`) to completion: one error
//! that names the command line and says what the tool printed, or what stopped it.

use std::ffi::OsStr;
use std::io;
use std::process::{Command, Output, Stdio};

use controller_runtime::limits::{self, Limits, Stop};

/// A tool run that did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The program could not be started (missing from the image, not executable).
    #[error("cannot run `{command}`")]
    Spawn {
        /// The command line.
        command: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// It ran and exited non-zero.
    #[error("`{command}` failed: {detail}")]
    Failed {
        /// The command line.
        command: String,
        /// The first lines of its stderr (else stdout, else its exit status).
        detail: String,
    },
    /// A resource limit or a signal stopped it.
    #[error("`{command}` {stop}")]
    Stopped {
        /// The command line.
        command: String,
        /// What stopped it.
        stop: Stop,
    },
}

/// `program` and `args` as one line, for messages.
pub fn command_line(program: &str, args: &[&OsStr]) -> String {
    std::iter::once(program.to_owned())
        .chain(args.iter().map(|a| a.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `program args`, collecting its output; success means exit status 0.
pub fn run(program: &str, args: &[&OsStr]) -> Result<Output, Error> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    finish(cmd, program, args, None)
}

/// Runs `program args` under `limits` ([`limits::limited`]): for tools reading hostile input.
pub fn run_bounded(program: &str, args: &[&OsStr], limits: Limits) -> Result<Output, Error> {
    let mut cmd = limits::limited(OsStr::new(program), limits);
    cmd.args(args);
    finish(cmd, program, args, Some(limits))
}

fn finish(mut cmd: Command, program: &str, args: &[&OsStr], limits: Option<Limits>) -> Result<Output, Error> {
    let command = || command_line(program, args);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let out = cmd.output().map_err(|source| Error::Spawn { command: command(), source })?;
    if out.status.success() {
        return Ok(out);
    }
    if let Some(stop) = limits.and_then(|l| limits::stopped(out.status, &out.stderr, l)) {
        return Err(Error::Stopped { command: command(), stop });
    }
    let detail = [limits::first_lines(&out.stderr), limits::first_lines(&out.stdout)]
        .into_iter()
        .find(|t| !t.is_empty())
        .unwrap_or_else(|| limits::without_message(out.status));
    Err(Error::Failed { command: command(), detail })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_name_the_command_and_its_output() {
        let e =
            run("sh", &["-c".as_ref(), "echo out; echo 'bad thing' >&2; exit 2".as_ref()]).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("`sh -c echo out; echo 'bad thing' >&2; exit 2` failed: bad thing"));
        let e = run("sh", &["-c".as_ref(), "exit 3".as_ref()]).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("`sh -c exit 3` failed: exited with status 3 without a message"));
        let e = run("/nonexistent/tool", &[]).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("cannot run `/nonexistent/tool`"));
        let limits = Limits { address_space: 1 << 30, cpu_secs: 1 };
        let e =
            run_bounded("sh", &["-c".as_ref(), "while :; do :; done".as_ref()], limits).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("`sh -c while :; do :; done` exceeded its CPU time limit of 1 s (killed by signal 24 (SIGXCPU))")
        );
        assert!(run("true", &[]).is_ok());
    }
}
