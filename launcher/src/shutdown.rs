//! Stopping the domain when the kubelet deletes the pod (contract §7.4): an ACPI shutdown through the pod's libvirt
//! (`virsh -c <libvirt_uri> shutdown`), up to `terminationGracePeriodSeconds` (default 30; 0 destroys at once) for
//! the guest to power off, then `virsh destroy`. A domain that does not exist (never defined, or a transient one
//! that is gone) has nothing to stop.
//!
//! Whether the domain exists is read from `virsh list --all --name`, never from error messages; its state from
//! `virsh domstate`.

use std::io;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use controller_runtime::limits::{first_lines, without_message};
use tokio::process::Command;

use crate::reaper::Reaper;
use crate::tool;

/// The grace period when the spec gives none (upstream's default).
pub const DEFAULT_GRACE_SECS: u64 = 30;

/// How long one virsh call may take.
pub const VIRSH_TIMEOUT: Duration = Duration::from_secs(15);

/// How often the domain's state is read while it shuts down.
const POLL: Duration = Duration::from_millis(250);

/// A virsh call that did not succeed: as any tool run ([`tool::Error`]: could not start, failed), or too slow.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// It could not be started or it failed.
    #[error(transparent)]
    Tool(#[from] tool::Error),
    /// It did not return in time.
    #[error("`{command}` did not return within {} s", VIRSH_TIMEOUT.as_secs())]
    Timeout {
        /// The command line.
        command: String,
    },
}

/// The grace period of a spec's `terminationGracePeriodSeconds`: default 30 s, negative values as 0.
pub fn grace_period(seconds: Option<i64>) -> Duration {
    Duration::from_secs(seconds.map_or(DEFAULT_GRACE_SECS, |s| u64::try_from(s).unwrap_or(0)))
}

/// The domain's state, as far as stopping it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// There is no such domain.
    Missing,
    /// It is not running (`shut off`, `crashed`).
    Off,
    /// Anything else (`running`, `paused`, `in shutdown`, …).
    On(String),
}

/// `virsh domstate` → [`State`].
pub fn parse_state(domstate: &str) -> State {
    match domstate.trim() {
        "shut off" | "crashed" => State::Off,
        other => State::On(other.to_owned()),
    }
}

/// virsh against the pod's libvirt.
#[derive(Debug, Clone)]
pub struct Virsh {
    /// The program (`virsh`).
    pub program: PathBuf,
    /// The connection URI ([`contracts::kubevirt::launcher::SocketDir::libvirt_uri`]).
    pub uri: String,
}

impl Virsh {
    /// Starts `virsh <args>` in the background with its output discarded; the caller awaits (or drops, which
    /// kills) the child.
    pub fn spawn_quiet(&self, reaper: &Reaper, args: &[&str]) -> io::Result<crate::reaper::OwnedChild> {
        let mut cmd = Command::new(&self.program);
        cmd.arg("-q")
            .arg("-c")
            .arg(&self.uri)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        reaper.spawn(&mut cmd)
    }

    async fn run(&self, reaper: &Reaper, args: &[&str]) -> Result<String, Error> {
        let command = format!("{} -c {} {}", self.program.display(), self.uri, args.join(" "));
        let mut cmd = Command::new(&self.program);
        cmd.arg("-q")
            .arg("-c")
            .arg(&self.uri)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let spawn = |command, source| Error::Tool(tool::Error::Spawn { command, source });
        let child = reaper.spawn(&mut cmd).map_err(|source| spawn(command.clone(), source))?;
        let out = match tokio::time::timeout(VIRSH_TIMEOUT, child.output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(source)) => return Err(spawn(command, source)),
            Err(_) => return Err(Error::Timeout { command }),
        };
        if out.status.success() {
            return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
        }
        let detail =
            Some(first_lines(&out.stderr)).filter(|d| !d.is_empty()).unwrap_or_else(|| without_message(out.status));
        Err(tool::Error::Failed { command, detail }.into())
    }

    /// The state of `domain`.
    pub async fn state(&self, reaper: &Reaper, domain: &str) -> Result<State, Error> {
        let names = self.run(reaper, &["list", "--all", "--name"]).await?;
        if !names.lines().any(|n| n.trim() == domain) {
            return Ok(State::Missing);
        }
        match self.run(reaper, &["domstate", domain]).await {
            Ok(s) => Ok(parse_state(&s)),
            // A transient domain that powered off between the two calls is gone.
            Err(e) => match self.run(reaper, &["list", "--all", "--name"]).await {
                Ok(names) if !names.lines().any(|n| n.trim() == domain) => Ok(State::Missing),
                _ => Err(e),
            },
        }
    }

    /// Asks the guest to power off (ACPI).
    pub async fn shutdown(&self, reaper: &Reaper, domain: &str) -> Result<(), Error> {
        self.run(reaper, &["shutdown", domain]).await.map(drop)
    }

    /// Pulls the plug.
    pub async fn destroy(&self, reaper: &Reaper, domain: &str) -> Result<(), Error> {
        self.run(reaper, &["destroy", domain]).await.map(drop)
    }
}

/// How the domain was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It did not exist or was not running.
    NotRunning,
    /// The guest powered off within the grace period.
    ShutDown,
    /// The grace period ran out (or was 0): destroyed.
    Destroyed,
}

/// Stops `domain`: ACPI shutdown, up to `grace` for it to be off, then destroy.
pub async fn stop_domain(virsh: &Virsh, reaper: &Reaper, domain: &str, grace: Duration) -> Result<Outcome, Error> {
    let off = |s: &State| matches!(s, State::Missing | State::Off);
    if off(&virsh.state(reaper, domain).await?) {
        return Ok(Outcome::NotRunning);
    }
    if !grace.is_zero() {
        if let Err(e) = virsh.shutdown(reaper, domain).await {
            if off(&virsh.state(reaper, domain).await?) {
                return Ok(Outcome::ShutDown);
            }
            tracing::warn!(domain, error = %e, "ACPI shutdown failed; destroying at the end of the grace period");
        }
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(POLL.min(deadline - tokio::time::Instant::now())).await;
            if off(&virsh.state(reaper, domain).await?) {
                return Ok(Outcome::ShutDown);
            }
        }
        tracing::info!(domain, grace_secs = grace.as_secs(), "the guest did not power off within its grace period");
    }
    if let Err(e) = virsh.destroy(reaper, domain).await {
        if off(&virsh.state(reaper, domain).await?) {
            return Ok(Outcome::Destroyed);
        }
        return Err(e);
    }
    Ok(Outcome::Destroyed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_periods_and_states() {
        assert_eq!(grace_period(None), Duration::from_secs(30));
        assert_eq!(grace_period(Some(0)), Duration::ZERO);
        assert_eq!(grace_period(Some(-5)), Duration::ZERO);
        assert_eq!(grace_period(Some(120)), Duration::from_secs(120));
        assert_eq!(parse_state("shut off\n\n"), State::Off);
        assert_eq!(parse_state("crashed"), State::Off);
        assert_eq!(parse_state("running\n"), State::On("running".into()));
        assert_eq!(parse_state("paused"), State::On("paused".into()));
    }
}
