//! virt-launcher: the process in the `compute` container of a VM's launcher pod (one VM, one pod). It prepares
//! what the VMI's domain needs inside the pod, hosts libvirtd for the node agent, and stops the domain when the pod
//! goes away. It never defines or starts the domain itself (the node agent does, through the pod's libvirt socket)
//! and never links libvirt. The contract between the three parties is `contracts::kubevirt::launcher`.
//!
//! ```text
//! main.rs: LauncherEnv::from_env ─► Config ─► run(config, SIGTERM/SIGINT)
//! run:
//!  1. SocketDir::in_pod(): as root created (0750, the qemu user's); as 107 (upstream's non-root launcher) waited
//!     for until writable (the node agent hands it over); stale ready/failed/terminating/done removed
//!  2. the privileged set-up (setup.rs): as root in-process, else the node agent's through setup-sock —
//!     network::apply_links (bridge, tap0, nftables), the claims owned by 107, the DHCP socket on port 67
//!  3. disks::plan (pure) ─► disks::prepare     containerDisk overlays, emptyDisks, cloud-init ISOs, PVC images
//!  4. the guest's DHCP server (dhcp.rs) on the set-up's socket
//!  5. libvirtd::Libvirtd::start                 session libvirtd as 107: copies of libvirtd.conf (unix_sock_dir)
//!     and qemu.conf, socket answers; serial log directory and QEMU's socket directory (qemu-owned) ─► ready
//!     any failure in 1–5 ─► failed + termination log, one line; exit 1
//!  6. libvirtd::supervise
//!       done                  ─► stop libvirtd, exit 0
//!       SIGTERM / SIGINT      ─► terminating, shutdown::stop_domain (ACPI, grace, destroy),
//!                                up to 5 s for done, stop libvirtd, exit 0
//!       libvirtd exits / DHCP stops ─► termination log, exit 1
//! ```
//!
//! The preparation steps are plain functions (the tools run to completion); libvirtd and virsh run as
//! children of the launcher, and orphans re-parented to it (it is PID 1) are reaped by [`reaper`].

#![deny(missing_docs)]

pub mod cloudinit;
pub mod dhcp;
pub mod disks;
pub mod files;
pub mod layout;
pub mod libvirtd;
pub mod network;
pub mod reaper;
pub mod setup;
pub mod shutdown;
pub mod tool;

use std::future::Future;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use contracts::errors::chain_line;
use contracts::kubevirt::launcher::{self, LauncherEnv, SocketDir};
use crds::kubevirt::VirtualMachineInstanceSpec;

pub use layout::Layout;

/// Everything the launcher needs, read by `main` from the environment and the command line.
#[derive(Debug, Clone)]
pub struct Config {
    /// The VMI (name, namespace, UID, spec).
    pub env: LauncherEnv,
    /// The pod's UID (for the log: the pod's own socket directory is mounted at [`SocketDir::in_pod`]).
    pub pod_uid: String,
    /// Where the contract's paths are.
    pub layout: Layout,
    /// The termination log (`/dev/termination-log`).
    pub termination_log: PathBuf,
    /// The libvirtd program.
    pub libvirtd: PathBuf,
    /// The virsh program.
    pub virsh: PathBuf,
    /// The tun device (`/dev/net/tun`; not moved by the layout: the network is the pod's).
    pub tun_device: PathBuf,
    /// The pod's resolver configuration (`/etc/resolv.conf`).
    pub resolv_conf: PathBuf,
    /// How long libvirtd's socket may take to answer.
    pub libvirtd_start_timeout: Duration,
    /// How long the non-root launcher waits for the node agent's set-up (its socket directory, then the
    /// privileged set-up).
    pub setup_timeout: Duration,
}

impl Config {
    /// The pod's configuration for `env` and `pod_uid`: the contract's paths, the image's programs.
    pub fn new(env: LauncherEnv, pod_uid: String) -> Config {
        Config {
            env,
            pod_uid,
            layout: Layout::default(),
            termination_log: PathBuf::from("/dev/termination-log"),
            libvirtd: PathBuf::from("libvirtd"),
            virsh: PathBuf::from("virsh"),
            tun_device: PathBuf::from("/dev/net/tun"),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            libvirtd_start_timeout: Duration::from_secs(30),
            setup_timeout: Duration::from_secs(120),
        }
    }
}

/// Why the launcher failed. Its [`chain_line`] is what the failed file and the termination log say.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The VMI spec in the environment does not parse.
    #[error("the VMI spec in {} is not a VirtualMachineInstanceSpec", launcher::var::VMI_SPEC)]
    Spec {
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// A file of the hand-over with the node agent.
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
    /// Preparing the volumes.
    #[error("preparing the disks")]
    Disks(#[source] disks::Error),
    /// Setting up the pod network.
    #[error("setting up the pod network")]
    Network(#[source] network::Error),
    /// The pod's privileged set-up (ours as root, else the node agent's).
    #[error("the pod's privileged set-up")]
    Setup(#[source] setup::Error),
    /// The node agent did not give the launcher its socket directory.
    #[error("the socket directory {} is not writable by uid {uid} after {} s (the node agent gives it to the qemu user)", path.display(), timeout.as_secs())]
    SocketDir {
        /// The directory.
        path: PathBuf,
        /// The launcher's uid.
        uid: u32,
        /// How long it waited.
        timeout: Duration,
    },
    /// Starting, supervising or stopping libvirtd.
    #[error("libvirtd")]
    Libvirtd(#[source] libvirtd::Error),
    /// libvirtd exited while the pod ran.
    #[error("libvirtd {} while the VM's pod was running", libvirtd::describe(*.0))]
    LibvirtdExited(std::process::ExitStatus),
    /// The DHCP server exited while the pod ran.
    #[error("the guest's DHCP server {0} while the VM's pod was running")]
    DhcpExited(String),
    /// Stopping the domain failed.
    #[error("stopping the domain {domain}")]
    Shutdown {
        /// The domain.
        domain: String,
        /// Why.
        #[source]
        source: shutdown::Error,
    },
    /// A preparation step panicked or was cancelled.
    #[error("{step} did not finish")]
    Task {
        /// The step.
        step: &'static str,
        /// Why.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The reaper could not be started.
    #[error("becoming the reaper of orphaned processes")]
    Reaper(#[source] io::Error),
}

/// How the launcher ended without an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The node agent wrote the done file.
    Done,
    /// SIGTERM/SIGINT while running: the domain was stopped as described.
    Terminated(shutdown::Outcome),
    /// SIGTERM/SIGINT before the pod was ready: nothing was running yet.
    TerminatedWhilePreparing,
}

/// How long to wait for the node agent's done file after stopping the domain.
const DONE_WAIT: Duration = Duration::from_secs(5);
/// How long libvirtd may take to exit on SIGTERM.
const LIBVIRTD_STOP: Duration = Duration::from_secs(10);

/// What runs once the pod is ready.
struct Running {
    reaper: reaper::Reaper,
    libvirtd: libvirtd::Libvirtd,
    /// The guests' DHCP servers, one per interface that gets an address.
    dhcp: Vec<dhcp::DhcpServer>,
    grace: Duration,
}

/// Runs the launcher until the node agent is done, `terminate` resolves (SIGTERM/SIGINT) or something fails. A
/// failure is also written, as one line, to the termination log and (while preparing) the failed file.
pub async fn run(config: Config, terminate: impl Future<Output = ()>) -> Result<Outcome, Error> {
    tokio::pin!(terminate);
    let sockets = SocketDir::in_pod();
    let socket_dir = config.layout.at(sockets.path());
    let prepared = tokio::select! {
        r = prepare(&config) => r,
        () = &mut terminate => {
            write_marker(&config.layout.at(sockets.terminating()), "");
            return Ok(Outcome::TerminatedWhilePreparing);
        }
    };
    let mut running = match prepared {
        Ok(r) => r,
        Err(e) => {
            let line = chain_line(&e);
            tracing::error!("{line}");
            if socket_dir.is_dir() {
                write_marker(&config.layout.at(sockets.failed()), &line);
            }
            write_marker(&config.termination_log, &line);
            return Err(e);
        }
    };
    let result = serve(&config, &mut running, terminate).await;
    if let Err(e) = &result {
        let line = chain_line(e);
        tracing::error!("{line}");
        write_marker(&config.termination_log, &line);
    }
    result
}

/// Steps 1–4: the pod ready for the node agent.
async fn prepare(config: &Config) -> Result<Running, Error> {
    let env = &config.env;
    let sockets = SocketDir::in_pod();
    let layout = &config.layout;
    tracing::info!(
        vmi = format!("{}/{}", env.vmi_namespace, env.vmi_name),
        vmi_uid = env.vmi_uid,
        pod_uid = config.pod_uid,
        "preparing the VM's pod"
    );
    let spec: VirtualMachineInstanceSpec =
        serde_json::from_value(env.vmi_spec.clone()).map_err(|source| Error::Spec { source })?;

    // 1. The socket directory, without an earlier run's hand-over files.
    let socket_dir = layout.at(sockets.path());
    let io = |operation, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { operation, path, source }
    };
    let root = rustix::process::geteuid().is_root();
    if root {
        files::create_dirs(&socket_dir, None).map_err(io("creating", &socket_dir))?;
        std::fs::set_permissions(&socket_dir, std::fs::Permissions::from_mode(0o750))
            .map_err(io("setting the mode of", &socket_dir))?;
        // QEMU and the session libvirtd (the `qemu` user) must reach it.
        files::chown(&socket_dir, files::qemu_owner()).map_err(io("changing the owner of", &socket_dir))?;
    } else {
        // The kubelet makes the hostPath directory as root; the node agent hands it to the qemu user.
        let deadline = std::time::Instant::now() + config.setup_timeout;
        while rustix::fs::access(&socket_dir, rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK).is_err() {
            if std::time::Instant::now() >= deadline {
                let uid = rustix::process::geteuid().as_raw();
                return Err(Error::SocketDir { path: socket_dir.clone(), uid, timeout: config.setup_timeout });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The launcher's own state and the session libvirtd's home: the qemu user's.
    for dir in [launcher::LAUNCHER_STATE_DIR, launcher::LIBVIRT_HOME] {
        let dir = layout.at(dir);
        files::create_dirs(&dir, Some(files::qemu_owner())).map_err(io("creating", &dir))?;
        if root {
            files::chown(&dir, files::qemu_owner()).map_err(io("changing the owner of", &dir))?;
        }
    }
    for stale in [sockets.ready(), sockets.failed(), sockets.terminating(), sockets.done()] {
        let path = layout.at(stale);
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(path = %path.display(), "stale hand-over file removed"),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("removing", &path)(e)),
        }
    }

    let hostname = network::hostname(&spec, &env.vmi_name);
    let instance = cloudinit::Instance {
        name: env.vmi_name.clone(),
        namespace: env.vmi_namespace.clone(),
        hostname: hostname.clone(),
        uuid: spec.domain.firmware.as_ref().and_then(|f| f.uuid.clone()).unwrap_or_else(|| env.vmi_uid.clone()),
    };
    // 2. The privileged set-up: ours as root, else the node agent's (setup.rs). The network's plan first: a
    // binding this launcher cannot set up is refused as what it is.
    let net_plan = network::plan(&spec, &hostname, &env.vmi_uid).map_err(Error::Network)?;
    let plans = disks::plan(spec.volumes.as_deref().unwrap_or_default()).map_err(Error::Disks)?;
    let host = network::Host {
        tun_device: config.tun_device.clone(),
        resolv_conf: config.resolv_conf.clone(),
        state_dir: layout.at(launcher::network_state_dir()),
        tap_owner: files::qemu_owner(),
    };
    let done = if root {
        let (n, v, host, l) = (net_plan.clone(), plans.clone(), host.clone(), layout.clone());
        let done = tokio::task::spawn_blocking(move || setup::privileged(&n, &v, &host, &l))
            .await
            .map_err(|source| Error::Task { step: "the privileged set-up", source })?
            .map_err(Error::Setup)?;
        tracing::info!(summary = done.summary(), "the pod is set up");
        done
    } else if setup::needed(&net_plan, &plans) {
        let socket = layout.at(sockets.setup_socket());
        tracing::info!(socket = %socket.display(), "waiting for the node agent's set-up");
        let (reply, dhcp) = setup::from_node_agent(&socket, config.setup_timeout).await.map_err(Error::Setup)?;
        tracing::info!(summary = reply.summary, "the node agent set up the pod");
        setup::Done {
            links: reply.mtu.map(|mtu| network::Links { summary: reply.summary, mtu }),
            secondary: reply.secondary,
            dhcp,
        }
    } else {
        setup::Done::default()
    };

    // 3. Disks.
    let disk_layout = layout.clone();
    let mut prepared = tokio::task::spawn_blocking(move || {
        let ctx = disks::Context { layout: &disk_layout, instance: &instance, owner: files::qemu_owner() };
        disks::prepare(&plans, &ctx)
    })
    .await
    .map_err(|source| Error::Task { step: "preparing the disks", source })?
    .map_err(Error::Disks)?;

    // 4. The guest's DHCP servers, on the sockets the set-up bound.
    let dhcp = serve_dhcp(&net_plan, done, &host, &mut prepared)?;

    // 5. libvirtd, the serial log's directory, ready.
    let reaper = reaper::Reaper::start([]).map_err(Error::Reaper)?;
    let libvirtd_config = libvirtd::Config {
        program: config.libvirtd.clone(),
        conf_source: layout.at(launcher::LIBVIRTD_CONF),
        conf_copy: layout.at(launcher::libvirtd_conf_copy()),
        pid_file: layout.at(launcher::libvirtd_pid_file()),
        socket_dir: socket_dir.clone(),
        socket: layout.at(sockets.libvirt_socket()),
        start_timeout: config.libvirtd_start_timeout,
        qemu_conf_source: layout.at(launcher::QEMU_CONF),
        qemu_conf_copy: layout.at(launcher::libvirt_qemu_conf_copy()),
        home: layout.at(launcher::LIBVIRT_HOME),
        runtime_dir: layout.at(launcher::libvirt_runtime_dir()),
        user: files::qemu_owner(),
        host_uuid: Some(config.pod_uid.clone()).filter(|u| libvirtd::is_uuid(u)),
    };
    let libvirtd = libvirtd::Libvirtd::start(&libvirtd_config, &reaper).await.map_err(Error::Libvirtd)?;
    // QEMU (the `qemu` user) binds the console and VNC sockets in a directory of its own; the node agent (root)
    // connects to them from the node.
    let qemu_dir = layout.at(sockets.qemu_dir());
    files::create_dirs(&qemu_dir, Some(files::qemu_owner())).map_err(io("creating", &qemu_dir))?;
    files::chown(&qemu_dir, files::qemu_owner()).map_err(io("changing the owner of", &qemu_dir))?;
    std::fs::set_permissions(&qemu_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("setting the mode of", &qemu_dir))?;
    let serial_log = layout.at(launcher::serial_log());
    if let Some(dir) = serial_log.parent() {
        files::create_dirs(dir, Some(files::qemu_owner())).map_err(io("creating", dir))?;
        // As root the directory is handed to QEMU's user; as that user it is the pod's emptyDir (writable).
        if root {
            files::chown(dir, files::qemu_owner()).map_err(io("changing the owner of", dir))?;
        }
    }
    // The log exists before libvirt appends to it, owned by QEMU's user and readable by the guest-console-log
    // container (which runs as that user); libvirt would create it root-only.
    std::fs::OpenOptions::new().append(true).create(true).open(&serial_log).map_err(io("creating", &serial_log))?;
    files::chown(&serial_log, files::qemu_owner()).map_err(io("changing the owner of", &serial_log))?;
    std::fs::set_permissions(&serial_log, std::fs::Permissions::from_mode(0o640))
        .map_err(io("setting the mode of", &serial_log))?;
    let ready = layout.at(sockets.ready());
    // Written whole under another name, then renamed: the node agent never reads half a ready file.
    let partial = ready.with_extension("partial");
    std::fs::write(&partial, prepared.to_json()).map_err(io("writing", &partial))?;
    std::fs::rename(&partial, &ready).map_err(io("writing", &ready))?;
    tracing::info!(ready = %ready.display(), "the pod is ready for the node agent");
    warm_up_libvirt(config, &reaper, &socket_dir);
    let grace = shutdown::grace_period(spec.termination_grace_period_seconds);
    Ok(Running { reaper, libvirtd, dhcp, grace })
}

/// Starts a DHCP server for every interface of `plan` that gets an address, on the sockets the set-up bound
/// (`done`), and records the MTUs the domain's NICs take.
fn serve_dhcp(
    plan: &network::Plan,
    mut done: setup::Done,
    host: &network::Host,
    prepared: &mut launcher::Prepared,
) -> Result<Vec<dhcp::DhcpServer>, Error> {
    let missing = |what: String| Error::Setup(setup::Error::Refused(format!("the set-up left {what}")));
    let mut socket = |interface: &str| {
        let i = done.dhcp.iter().position(|(name, _)| name == interface);
        i.map(|i| done.dhcp.swap_remove(i).1)
    };
    let mut servers = Vec::new();
    if let Some(m) = &plan.pod {
        let links = done.links.as_ref().ok_or_else(|| missing(String::from("the masquerade binding unset")))?;
        let s = socket(&m.interface)
            .ok_or_else(|| missing(format!("interface {:?} without a DHCP socket", m.interface)))?;
        servers.push(network::serve_dhcp(m, links.mtu, host, s).map_err(Error::Network)?);
        prepared.pod_interface_mtu = Some(links.mtu);
    }
    for b in &plan.secondary {
        let link = done
            .secondary
            .iter()
            .find(|l| l.interface == b.interface)
            .ok_or_else(|| missing(format!("interface {:?} without its bridge", b.interface)))?;
        if link.address.is_some() {
            let s = socket(&b.interface)
                .ok_or_else(|| missing(format!("interface {:?} without a DHCP socket", b.interface)))?;
            servers.extend(network::serve_bridge_dhcp(b, link, host, s).map_err(Error::Network)?);
        }
        prepared.secondary_mtus.insert(b.interface.clone(), link.mtu);
    }
    Ok(servers)
}

/// The first call to a fresh libvirtd probes QEMU's capabilities (0.7–0.9 s under TCG here). Started as soon as
/// the pod is ready, the probe overlaps with the kubelet's readiness probe, the controller's Scheduled and the node
/// agent's reaction, instead of delaying the node agent's define. Best effort: a failure is only logged.
fn warm_up_libvirt(config: &Config, reaper: &reaper::Reaper, socket_dir: &Path) {
    let virsh = shutdown::Virsh {
        program: config.virsh.clone(),
        uri: SocketDir(socket_dir.to_string_lossy().into_owned()).libvirt_uri(),
    };
    match virsh.spawn_quiet(reaper, &["domcapabilities", "--virttype", "qemu"]) {
        Ok(mut child) => {
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                match tokio::time::timeout(shutdown::VIRSH_TIMEOUT, child.wait()).await {
                    Ok(Ok(status)) => {
                        tracing::info!(secs = started.elapsed().as_secs_f32(), %status, "QEMU capabilities probed")
                    }
                    Ok(Err(e)) => tracing::warn!(error = %e, "probing QEMU's capabilities"),
                    Err(_) => tracing::warn!("probing QEMU's capabilities did not finish in time"),
                }
            });
        }
        Err(e) => tracing::warn!(error = %e, "cannot start virsh to probe QEMU's capabilities"),
    }
}

/// Step 5: supervision until done, terminated or failed.
async fn serve(config: &Config, running: &mut Running, terminate: impl Future<Output = ()>) -> Result<Outcome, Error> {
    let sockets = SocketDir::in_pod();
    let done = config.layout.at(sockets.done());
    let event = libvirtd::supervise(&mut running.libvirtd, &done, &running.dhcp, terminate).await;
    let outcome = match event {
        libvirtd::Event::LibvirtdExited(Ok(status)) => return Err(Error::LibvirtdExited(status)),
        libvirtd::Event::LibvirtdExited(Err(e)) => return Err(Error::Libvirtd(e)),
        libvirtd::Event::DhcpExited(message) => {
            let _ = running.libvirtd.stop(LIBVIRTD_STOP).await;
            return Err(Error::DhcpExited(message));
        }
        libvirtd::Event::Done => {
            tracing::info!("the node agent is done with the VMI");
            Outcome::Done
        }
        libvirtd::Event::Terminate => {
            write_marker(&config.layout.at(sockets.terminating()), "");
            let domain = launcher::domain_name(&config.env.vmi_namespace, &config.env.vmi_name);
            let grace = running.grace;
            let virsh = shutdown::Virsh {
                program: config.virsh.clone(),
                uri: SocketDir(config.layout.at(sockets.path()).to_string_lossy().into_owned()).libvirt_uri(),
            };
            tracing::info!(domain, grace_secs = grace.as_secs(), "stopping the domain");
            let stopped = shutdown::stop_domain(&virsh, &running.reaper, &domain, grace).await;
            let outcome = match stopped {
                Ok(o) => o,
                Err(source) => {
                    let _ = running.libvirtd.stop(LIBVIRTD_STOP).await;
                    return Err(Error::Shutdown { domain, source });
                }
            };
            tracing::info!(domain, ?outcome, "domain stopped");
            let deadline = tokio::time::Instant::now() + DONE_WAIT;
            while tokio::time::Instant::now() < deadline && !done.exists() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Outcome::Terminated(outcome)
        }
    };
    let status = running.libvirtd.stop(LIBVIRTD_STOP).await.map_err(Error::Libvirtd)?;
    tracing::info!(status = %libvirtd::describe(status), "libvirtd stopped");
    Ok(outcome)
}

/// Writes a hand-over file (best effort: a failure is logged; the launcher is failing or stopping already).
fn write_marker(path: &Path, line: &str) {
    let text = if line.is_empty() { String::new() } else { format!("{line}\n") };
    if let Err(e) = std::fs::write(path, text) {
        tracing::warn!(path = %path.display(), error = %e, "cannot write");
    }
}
