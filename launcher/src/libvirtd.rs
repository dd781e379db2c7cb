//! libvirtd as the launcher's child, and the supervision of the running pod.
//!
//! ```text
//! start:      <LIBVIRTD_CONF> ──unix_sock_dir = <socket dir>──► libvirtd_conf_copy()
//!             libvirtd -f <copy> -p <pid file>   (stderr is the container log)
//!             ready once <socket dir>/libvirt-sock accepts a connection (bounded; libvirtd exiting first fails)
//! supervise:  libvirtd exits             → Event::LibvirtdExited
//!             the DHCP server stops      → Event::DhcpExited
//!             done_file(pod) appears     → Event::Done        (node agent: the VMI's final phase is recorded)
//!             SIGTERM / SIGINT           → Event::Terminate   (kubelet: the pod is being deleted)
//! stop:       SIGTERM, wait, SIGKILL after the timeout
//! ```

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use rustix::process::{Pid, Signal};
use tokio::process::Command;

use crate::dhcp::DhcpServer;
use crate::files;
use crate::reaper::{OwnedChild, Reaper};

/// Why libvirtd could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the image's libvirtd.conf or writing its copy.
    #[error("{operation} {}", path.display())]
    Io {
        /// What was done.
        operation: &'static str,
        /// On what.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The program could not be started.
    #[error("cannot run {}", program.display())]
    Spawn {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// It exited before its socket answered.
    #[error("libvirtd {} before its socket {} answered", describe(*status), socket.display())]
    ExitedEarly {
        /// How it ended.
        status: ExitStatus,
        /// The socket.
        socket: PathBuf,
    },
    /// Its socket did not answer in time.
    #[error("libvirtd's socket {} did not accept connections within {} s", socket.display(), timeout.as_secs())]
    Timeout {
        /// The socket.
        socket: PathBuf,
        /// The bound.
        timeout: Duration,
    },
    /// Waiting for it failed.
    #[error("waiting for libvirtd")]
    Wait {
        /// Why.
        #[source]
        source: io::Error,
    },
}

/// How a process ended, for messages: `exited with status 1`, `was killed by signal 9 (SIGKILL)`.
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by {}", controller_runtime::limits::Signal(s)),
        (None, None) => String::from("ended"),
    }
}

/// `libvirtd.conf` with `unix_sock_dir` set to `socket_dir` and, when given, `host_uuid` to `host_uuid` (each
/// existing setting replaced, else appended).
pub fn render_conf(source: &str, socket_dir: &Path, host_uuid: Option<&str>) -> String {
    let mut settings = vec![("unix_sock_dir", socket_dir.to_string_lossy().into_owned())];
    if let Some(uuid) = host_uuid {
        settings.push(("host_uuid", uuid.to_owned()));
    }
    let line_of = |key: &str, value: &str| format!("{key} = {}", serde_json::Value::from(value));
    let mut replaced = Vec::new();
    let mut out: Vec<String> = source
        .lines()
        .map(|line| {
            let key = line.trim_start().split(['=', ' ', '\t']).next().unwrap_or("");
            match settings.iter().find(|(k, _)| *k == key) {
                Some((k, v)) => {
                    replaced.push(*k);
                    line_of(k, v)
                }
                None => line.to_owned(),
            }
        })
        .collect();
    for (k, v) in &settings {
        if !replaced.contains(k) {
            out.push(line_of(k, v));
        }
    }
    out.join("\n") + "\n"
}

/// Whether `s` is a UUID as libvirt's `host_uuid` takes it (8-4-4-4-12 hex digits, not all one digit). Kubernetes
/// pod UIDs are; anything else keeps libvirt's own host UUID.
pub fn is_uuid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    let shape = groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()));
    let mut digits = s.chars().filter(|c| *c != '-');
    let first = digits.next();
    shape && digits.any(|c| Some(c) != first)
}

/// Where libvirtd's files are.
#[derive(Debug, Clone)]
pub struct Config {
    /// The program (`libvirtd`).
    pub program: PathBuf,
    /// The image's configuration.
    pub conf_source: PathBuf,
    /// The copy libvirtd runs with.
    pub conf_copy: PathBuf,
    /// Its pid file.
    pub pid_file: PathBuf,
    /// The socket directory.
    pub socket_dir: PathBuf,
    /// The socket (`<socket dir>/libvirt-sock`).
    pub socket: PathBuf,
    /// The image's QEMU driver configuration (copied to `qemu_conf_copy` when present).
    pub qemu_conf_source: PathBuf,
    /// Where the session daemon reads it (`$XDG_CONFIG_HOME/libvirt/qemu.conf`).
    pub qemu_conf_copy: PathBuf,
    /// `HOME`, `XDG_CONFIG_HOME` and `XDG_CACHE_HOME` of the session daemon.
    pub home: PathBuf,
    /// Its `XDG_RUNTIME_DIR`.
    pub runtime_dir: PathBuf,
    /// The user it runs as when the launcher is root (else the launcher's own).
    pub user: u32,
    /// libvirt's host UUID (`host_uuid`): the pod's UID, so that two launchers on one machine (a migration's source
    /// and target on a one-machine test cluster, or the same host's SMBIOS UUID) are different hosts to libvirt's
    /// migration check. `None` keeps libvirt's own.
    pub host_uuid: Option<String>,
    /// How long its socket may take to answer.
    pub start_timeout: Duration,
}

/// The running libvirtd.
#[derive(Debug)]
pub struct Libvirtd {
    child: OwnedChild,
}

impl Libvirtd {
    /// Writes the configuration copy, starts libvirtd and waits until its socket accepts connections.
    pub async fn start(cfg: &Config, reaper: &Reaper) -> Result<Libvirtd, Error> {
        let source = tokio::fs::read_to_string(&cfg.conf_source).await.map_err(|source| Error::Io {
            operation: "reading",
            path: cfg.conf_source.clone(),
            source,
        })?;
        if let Some(dir) = cfg.conf_copy.parent() {
            tokio::fs::create_dir_all(dir).await.map_err(|source| Error::Io {
                operation: "creating",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        tokio::fs::write(&cfg.conf_copy, render_conf(&source, &cfg.socket_dir, cfg.host_uuid.as_deref()))
            .await
            .map_err(|source| Error::Io { operation: "writing", path: cfg.conf_copy.clone(), source })?;
        let io = |operation, path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { operation, path, source }
        };
        // The session daemon reads its QEMU driver settings from $XDG_CONFIG_HOME/libvirt/qemu.conf.
        match tokio::fs::read(&cfg.qemu_conf_source).await {
            Ok(text) => {
                let copy = &cfg.qemu_conf_copy;
                files::create_dirs(copy.parent().unwrap_or(&cfg.home), Some(cfg.user))
                    .map_err(io("creating", &cfg.home))?;
                tokio::fs::write(copy, text).await.map_err(io("writing", copy))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("reading", &cfg.qemu_conf_source)(e)),
        }
        files::create_dirs(&cfg.runtime_dir, Some(cfg.user)).map_err(io("creating", &cfg.runtime_dir))?;
        let root = rustix::process::geteuid().is_root();
        if root {
            let conf_dir = cfg.qemu_conf_copy.parent().unwrap_or(&cfg.home);
            for p in [cfg.runtime_dir.as_path(), &cfg.conf_copy, conf_dir, &cfg.qemu_conf_copy] {
                match files::chown(p, cfg.user) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(io("changing the owner of", p)(e));
                    }
                    _ => {}
                }
            }
        }
        let mut cmd = Command::new(&cfg.program);
        // A session daemon (upstream's non-root launcher): it and QEMU run as the qemu user without capabilities.
        if root {
            cmd.uid(cfg.user).gid(cfg.user);
        }
        cmd.env("HOME", &cfg.home)
            .env("XDG_CONFIG_HOME", &cfg.home)
            .env("XDG_CACHE_HOME", &cfg.home)
            .env("XDG_RUNTIME_DIR", &cfg.runtime_dir);
        cmd.arg("-f")
            .arg(&cfg.conf_copy)
            .arg("-p")
            .arg(&cfg.pid_file)
            .stdin(Stdio::null())
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit())
            // Its own process group: a signal to the launcher's group (Ctrl-C, `timeout`) must not stop libvirtd
            // before the launcher has stopped the domain through it.
            .process_group(0)
            .kill_on_drop(true);
        let child = reaper.spawn(&mut cmd).map_err(|source| Error::Spawn { program: cfg.program.clone(), source })?;
        let mut me = Libvirtd { child };
        tracing::info!(pid = me.child.id(), conf = %cfg.conf_copy.display(), "libvirtd started");
        let deadline = tokio::time::Instant::now() + cfg.start_timeout;
        loop {
            if let Some(status) = me.child.try_wait().map_err(|source| Error::Wait { source })? {
                return Err(Error::ExitedEarly { status, socket: cfg.socket.clone() });
            }
            if tokio::net::UnixStream::connect(&cfg.socket).await.is_ok() {
                tracing::info!(socket = %cfg.socket.display(), "libvirtd answers");
                return Ok(me);
            }
            if tokio::time::Instant::now() >= deadline {
                let _ = me.stop(Duration::from_secs(5)).await;
                return Err(Error::Timeout { socket: cfg.socket.clone(), timeout: cfg.start_timeout });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Its process ID.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until it exits (cancel-safe).
    pub async fn exited(&mut self) -> Result<ExitStatus, Error> {
        self.child.wait().await.map_err(|source| Error::Wait { source })
    }

    /// Stops it: SIGTERM, then SIGKILL when it has not exited within `timeout`.
    pub async fn stop(&mut self, timeout: Duration) -> Result<ExitStatus, Error> {
        if let Some(status) = self.child.try_wait().map_err(|source| Error::Wait { source })? {
            return Ok(status);
        }
        if let Some(pid) = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(pid, Signal::TERM);
        }
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(r) => r.map_err(|source| Error::Wait { source }),
            Err(_) => {
                tracing::warn!(timeout_secs = timeout.as_secs(), "libvirtd ignored SIGTERM; killing it");
                if let Some(pid) = i32::try_from(self.child.id()).ok().and_then(Pid::from_raw) {
                    let _ = rustix::process::kill_process(pid, Signal::KILL);
                }
                self.child.wait().await.map_err(|source| Error::Wait { source })
            }
        }
    }
}

/// What ended the supervision.
#[derive(Debug)]
pub enum Event {
    /// The node agent wrote the done file.
    Done,
    /// SIGTERM or SIGINT.
    Terminate,
    /// libvirtd exited.
    LibvirtdExited(Result<ExitStatus, Error>),
    /// The DHCP server exited (what happened).
    DhcpExited(String),
}

/// How often the done file and the DHCP server are looked at.
const POLL: Duration = Duration::from_millis(250);

/// Waits for the first of: libvirtd exiting, the DHCP server exiting, `done_file` appearing, `terminate`
/// resolving.
pub async fn supervise(
    libvirtd: &mut Libvirtd,
    done_file: &Path,
    dhcp: &[DhcpServer],
    terminate: impl Future<Output = ()>,
) -> Event {
    tokio::pin!(terminate);
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            status = libvirtd.exited() => return Event::LibvirtdExited(status),
            () = &mut terminate => return Event::Terminate,
            _ = tick.tick() => {
                if tokio::fs::try_exists(done_file).await.unwrap_or(false) {
                    return Event::Done;
                }
                if let Some(message) = dhcp.iter().find_map(DhcpServer::exited) {
                    return Event::DhcpExited(message);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_directory_is_replaced_or_added() {
        let image = "# comment about unix_sock_dir\nunix_sock_dir = \"/run/libvirt\"\n\nauth_unix_rw = \"none\"\n";
        assert_eq!(
            render_conf(image, Path::new("/var/run/kubevirt/sockets/p-1"), None),
            "# comment about unix_sock_dir\nunix_sock_dir = \"/var/run/kubevirt/sockets/p-1\"\n\nauth_unix_rw = \"none\"\n"
        );
        assert_eq!(render_conf("  unix_sock_dir=\"/x\"", Path::new("/s"), None), "unix_sock_dir = \"/s\"\n");
        assert_eq!(
            render_conf("log_outputs = \"3:stderr\"\n", Path::new("/s"), Some("5a1e")),
            "log_outputs = \"3:stderr\"\nunix_sock_dir = \"/s\"\nhost_uuid = \"5a1e\"\n"
        );
        // A commented-out setting stays commented.
        assert_eq!(
            render_conf("#unix_sock_dir = \"/x\"\n", Path::new("/s"), None),
            "#unix_sock_dir = \"/x\"\nunix_sock_dir = \"/s\"\n"
        );
    }

    #[test]
    fn only_uuids_become_the_host_uuid() {
        assert!(is_uuid("6a1f2b3c-4d5e-4f60-8a71-92b3c4d5e6f7"));
        for bad in [
            "pod-1",
            "",
            "00000000-0000-0000-0000-000000000000",
            "6a1f2b3c4d5e4f608a7192b3c4d5e6f7",
            "6a1f2b3c-4d5e-4f60-8a71-92b3c4d5e6fz",
        ] {
            assert!(!is_uuid(bad), "{bad}");
        }
    }

    /// The image's own file, as `deploy/launcher/build-rootfs.sh` installs it.
    #[test]
    fn the_images_libvirtd_conf_gets_the_socket_directory() {
        let image = include_str!("../../deploy/launcher/libvirtd.conf");
        let out = render_conf(
            image,
            Path::new("/var/run/kubevirt/sockets/p-1"),
            Some("7d6c1a52-0000-4000-8000-000000000001"),
        );
        let settings: Vec<&str> = out.lines().filter(|l| l.starts_with("unix_sock_dir")).collect();
        assert_eq!(settings, ["unix_sock_dir = \"/var/run/kubevirt/sockets/p-1\""]);
        assert!(out.contains("auth_unix_rw = \"none\""));
        assert!(out.ends_with("host_uuid = \"7d6c1a52-0000-4000-8000-000000000001\"\n"));
    }
}
