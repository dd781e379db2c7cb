//! The privileged set-up of this node's launcher pods (upstream's virt-handler does the same for its non-root
//! launchers): the launcher runs as the `qemu` user without capabilities, so the node agent
//!
//! ```text
//! every POLL, for each launcher pod of the node (pod cache) with a socket directory:
//!   the directory (made by the kubelet as root) ─► owned by 107               [`own_socket_dir`]
//!   setup-sock present (the launcher waits) ─► connect; the peer's PID must be in the pod's cgroup
//!     ─► `node-agent enter-pod --pid P -- virt-launcher pod-setup` (this binary joins the pod's network and
//!        mount namespaces, then runs the launcher image's program as root): stdin the SetupRequest made from the
//!        pod's own spec (the controller's VMI_SPEC, never the launcher's word), stdout the connection
//!     ─► it answers the launcher; when it could not, the agent answers with the error            [`set_up`]
//! ```
//!
//! The contract is `contracts::kubevirt::launcher` ([`SocketDir::setup_socket`], [`SetupRequest`],
//! [`SetupReply`]); the launcher's side is `launcher/src/setup.rs`.

use std::collections::{BTreeMap, HashSet};
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use contracts::kubevirt::consts::QEMU_UID;
use contracts::kubevirt::launcher::{
    self, COMPUTE_CONTAINER, LAUNCHER_PROGRAM, LauncherEnv, POD_SETUP_COMMAND, SetupReply, SetupRequest, SocketDir,
};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::Store;

/// How often the socket directories are looked at.
pub const POLL: Duration = Duration::from_millis(250);
/// How long one set-up may run.
pub const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// The hidden subcommand of the node agent's binary that runs a program in a pod's namespaces.
pub const ENTER_POD: &str = "enter-pod";

/// Why a set-up failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The hand-over socket.
    #[error("{operation} {path}")]
    Io {
        /// What was done.
        operation: &'static str,
        /// On what.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The peer is not the pod's launcher.
    #[error("the process {pid} on {socket} is not in pod {pod_uid}'s cgroup")]
    Impostor {
        /// Its PID.
        pid: i32,
        /// The socket.
        socket: String,
        /// The pod.
        pod_uid: String,
    },
    /// The pod's spec has no usable launcher environment.
    #[error("the pod's compute container has no launcher environment: {0}")]
    Env(String),
    /// The set-up program failed without answering.
    #[error("`{LAUNCHER_PROGRAM} {POD_SETUP_COMMAND}` in the pod {0}")]
    Program(String),
}

/// Gives a launcher pod's socket directory (made by the kubelet, root's) to the `qemu` user; `Ok(true)` when it
/// changed something.
pub fn own_socket_dir(dir: &Path) -> io::Result<bool> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let qemu = u32::try_from(QEMU_UID).unwrap_or(107);
    if !meta.is_dir() || (meta.uid() == qemu && meta.gid() == qemu) {
        return Ok(false);
    }
    rustix::fs::chownat(
        rustix::fs::CWD,
        dir,
        Some(rustix::fs::Uid::from_raw(qemu)),
        Some(rustix::fs::Gid::from_raw(qemu)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )?;
    Ok(true)
}

/// The set-up request of `pod` from its own compute container's environment (rendered by the VMI controller).
pub fn request(pod: &Pod) -> Result<SetupRequest, Error> {
    let container = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == COMPUTE_CONTAINER))
        .ok_or_else(|| Error::Env(format!("no {COMPUTE_CONTAINER} container")))?;
    let mut vars: BTreeMap<String, String> =
        container.env.iter().flatten().filter_map(|e| Some((e.name.clone(), e.value.clone()?))).collect();
    vars.insert(launcher::var::POD_UID.into(), pod.metadata.uid.clone().unwrap_or_default());
    let (env, _) = LauncherEnv::from_env(&vars).map_err(|e| Error::Env(contracts::errors::chain_line(&e)))?;
    Ok(SetupRequest { vmi_spec: env.vmi_spec, vmi_name: env.vmi_name, vmi_uid: env.vmi_uid })
}

/// Whether the process `pid` (host PID namespace) belongs to pod `pod_uid` (its cgroup path names the pod, with
/// `-` or, under the systemd driver, `_`).
pub fn in_pod_cgroup(cgroup: &str, pod_uid: &str) -> bool {
    let underscored = pod_uid.replace('-', "_");
    !pod_uid.is_empty()
        && cgroup.lines().any(|l| l.contains(&format!("pod{pod_uid}")) || l.contains(&format!("pod{underscored}")))
}

/// Sets up the pod `pod_uid` whose launcher waits on `dir`'s set-up socket.
pub fn set_up(dir: &SocketDir, pod_uid: &str, req: &SetupRequest) -> Result<String, Error> {
    let socket = dir.setup_socket();
    let io_err = |operation, path: &str| {
        let path = path.to_owned();
        move |source| Error::Io { operation, path, source }
    };
    let conn = UnixStream::connect(&socket).map_err(io_err("connecting to", &socket))?;
    let outcome = (|| {
        // The peer's PID in this (the host's) PID namespace; 0 when the launcher is in none we see.
        let pid = peer_pid(&conn).map_err(io_err("reading the peer of", &socket))?;
        let cgroup_path = format!("/proc/{pid}/cgroup");
        let cgroup = std::fs::read_to_string(&cgroup_path).map_err(io_err("reading", &cgroup_path))?;
        if !in_pod_cgroup(&cgroup, pod_uid) {
            return Err(Error::Impostor { pid, socket: socket.clone(), pod_uid: pod_uid.to_owned() });
        }
        let exe = std::env::current_exe().map_err(io_err("finding", "the node agent's program"))?;
        let out: OwnedFd = conn.try_clone().map_err(io_err("duplicating", &socket))?.into();
        let mut child = Command::new(exe)
            .args([ENTER_POD, "--pid", &pid.to_string(), "--", LAUNCHER_PROGRAM, POD_SETUP_COMMAND])
            .env_clear()
            .env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::from(out))
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err("running", LAUNCHER_PROGRAM))?;
        let json = serde_json::to_vec(req).map_err(|e| Error::Env(e.to_string()))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(&json);
        }
        let deadline = Instant::now() + SETUP_TIMEOUT;
        let status = loop {
            match child.try_wait().map_err(io_err("waiting for", LAUNCHER_PROGRAM))? {
                Some(s) => break s,
                None if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(Error::Program(format!("did not finish within {} s", SETUP_TIMEOUT.as_secs())));
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let mut stderr = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        if status.success() {
            Ok(stderr)
        } else {
            let last: Vec<&str> = stderr.lines().rev().take(3).collect();
            Err(Error::Program(format!("{status}: {}", last.into_iter().rev().collect::<Vec<_>>().join(" "))))
        }
    })();
    if let Err(e) = &outcome {
        // The program did not answer: the launcher hears the reason from the agent.
        let reply = SetupReply { error: Some(contracts::errors::chain_line(e)), ..SetupReply::default() };
        let _ = (&conn).write_all(reply.to_line().as_bytes());
    }
    outcome
}

/// The PID of `conn`'s peer (tokio has the stable `SO_PEERCRED` reader; the stream is handed back blocking).
fn peer_pid(conn: &UnixStream) -> io::Result<i32> {
    let dup = conn.try_clone()?;
    dup.set_nonblocking(true)?;
    let pid = tokio::net::UnixStream::from_std(dup).and_then(|t| t.peer_cred()).map(|c| c.pid().unwrap_or(0));
    conn.set_nonblocking(false)?;
    match pid? {
        0 => Err(io::Error::other("the peer's process is not visible (the node agent needs the host's PID namespace)")),
        p => Ok(p),
    }
}

/// `node-agent enter-pod --pid P -- PROGRAM ARGS…`: joins the network and mount namespaces of process `P` and
/// replaces itself with `PROGRAM` (resolved in the pod's filesystem). Called at the start of `main`, while the
/// process is single-threaded (a mount namespace can only be joined then). Returns only on failure.
pub fn enter_pod(args: &[String]) -> io::Error {
    let (pid, program) = match args {
        [flag, pid, dashes, program, ..] if flag == "--pid" && dashes == "--" => (pid, program),
        _ => return io::Error::other(format!("usage: node-agent {ENTER_POD} --pid PID -- PROGRAM [ARGS...]")),
    };
    for (ns, kind) in
        [("net", rustix::thread::LinkNameSpaceType::Network), ("mnt", rustix::thread::LinkNameSpaceType::Mount)]
    {
        let path = format!("/proc/{pid}/ns/{ns}");
        let joined = std::fs::File::open(&path).and_then(|f| {
            rustix::thread::move_into_link_name_space(std::os::fd::AsFd::as_fd(&f), Some(kind)).map_err(io::Error::from)
        });
        if let Err(e) = joined {
            return io::Error::new(e.kind(), format!("joining {path}: {e}"));
        }
    }
    let e = std::os::unix::process::CommandExt::exec(Command::new(program).args(&args[4..]));
    io::Error::new(e.kind(), format!("running {program} in the pod: {e}"))
}

/// Runs the set-up loop until `stop` resolves: socket directories handed to the `qemu` user, waiting launchers set
/// up (each on the blocking pool, one at a time per pod).
pub async fn run(pods: Store<Pod>, stop: impl std::future::Future<Output = ()>) {
    tokio::pin!(stop);
    let busy: Arc<Mutex<HashSet<String>>> = Arc::default();
    let mut tick = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => {}
        }
        for pod in pods.state() {
            let Some(uid) = pod.metadata.uid.clone() else { continue };
            let dir = SocketDir::on_node(&uid);
            match own_socket_dir(Path::new(dir.path())) {
                Ok(true) => tracing::info!(dir = dir.path(), "socket directory handed to the qemu user"),
                Ok(false) => {}
                Err(e) => tracing::warn!(dir = dir.path(), error = %e, "cannot hand the socket directory over"),
            }
            if !Path::new(&dir.setup_socket()).exists() {
                continue;
            }
            if !busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(uid.clone()) {
                continue;
            }
            let (busy, pod) = (busy.clone(), pod.clone());
            tokio::task::spawn_blocking(move || {
                let name = format!(
                    "{}/{}",
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default()
                );
                let r = request(&pod).and_then(|req| set_up(&dir, &uid, &req));
                match r {
                    Ok(log) => tracing::info!(pod = name, log = log.trim(), "launcher pod set up"),
                    Err(e) => {
                        tracing::warn!(pod = name, error = %contracts::errors::chain_line(&e), "setting up the launcher pod failed")
                    }
                }
                // The launcher removes its socket once answered; a little later it is gone.
                std::thread::sleep(Duration::from_millis(500));
                busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&uid);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_pods_own_processes_may_ask() {
        let uid = "8d5b6c1e-0b8e-4f5e-9b3a-1a2b3c4d5e6f";
        let cgroupfs = format!("0::/kubepods/besteffort/pod{uid}/0123abcd\n");
        let systemd = "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8d5b6c1e_0b8e_4f5e_9b3a_1a2b3c4d5e6f.slice/cri-containerd-01.scope\n";
        assert!(in_pod_cgroup(&cgroupfs, uid));
        assert!(in_pod_cgroup(systemd, uid));
        assert!(!in_pod_cgroup("0::/kubepods/besteffort/podother/0123\n", uid));
        assert!(!in_pod_cgroup(&cgroupfs, ""));
    }

    #[test]
    fn the_request_is_the_pods_own_spec() -> Result<(), String> {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"uid": "p-1", "name": "virt-launcher-a", "namespace": "ns"},
            "spec": {"containers": [{"name": "compute", "env": [
                {"name": launcher::var::VMI_NAME, "value": "a"},
                {"name": launcher::var::VMI_NAMESPACE, "value": "ns"},
                {"name": launcher::var::VMI_UID, "value": "u-1"},
                {"name": launcher::var::VMI_SPEC, "value": "{\"domain\":{\"devices\":{}}}"},
                {"name": launcher::var::POD_UID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            ]}]},
        }))
        .map_err(|e| e.to_string())?;
        let req = request(&pod).map_err(|e| e.to_string())?;
        assert_eq!((req.vmi_name.as_str(), req.vmi_uid.as_str()), ("a", "u-1"));
        assert_eq!(req.vmi_spec, serde_json::json!({"domain": {"devices": {}}}));
        let bare: Pod = serde_json::from_value(serde_json::json!({"spec": {"containers": [{"name": "other"}]}}))
            .map_err(|e| e.to_string())?;
        assert_eq!(
            request(&bare).err().map(|e| e.to_string()).as_deref(),
            Some("the pod's compute container has no launcher environment: no compute container")
        );
        Ok(())
    }

    #[test]
    fn socket_directories_go_to_the_qemu_user() -> Result<(), String> {
        let t = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = t.path().join("p-1");
        assert!(!own_socket_dir(&d).map_err(|e| e.to_string())?, "missing: nothing to do");
        std::fs::create_dir(&d).map_err(|e| e.to_string())?;
        assert!(own_socket_dir(&d).map_err(|e| e.to_string())?);
        let m = std::fs::metadata(&d).map_err(|e| e.to_string())?;
        assert_eq!((m.uid(), m.gid()), (107, 107));
        assert!(!own_socket_dir(&d).map_err(|e| e.to_string())?, "already the qemu user's");
        Ok(())
    }
}
