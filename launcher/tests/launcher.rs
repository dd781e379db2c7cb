//! The `virt-launcher` binary end to end. Failures before libvirtd: the failed file and the termination log say
//! exactly what is wrong. With the host's real libvirtd (Debian 12's 9.0, the launcher image's) and virsh, in a
//! sandbox that stands for the `compute` container: new mount and PID namespaces (the launcher is PID 1), `/etc`
//! and `/var` overlaid, `/run` a tmpfs, the image's qemu.conf and users (deploy/launcher). Asserted: ready once the
//! socket answers (virsh works through it), exit 0 on the node agent's done file, and on SIGTERM the terminating
//! file, a running domain destroyed after its grace period, exit 0. Needs root.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use contracts::kubevirt::launcher::{self, SocketDir};

const LAUNCHER: &str = env!("CARGO_BIN_EXE_virt-launcher");

fn env(spec: serde_json::Value) -> Vec<(String, String)> {
    let mut e = launcher::LauncherEnv {
        vmi_name: "testvmi".into(),
        vmi_namespace: "default".into(),
        vmi_uid: "6a1f2b3c-4d5e-4f60-8a71-92b3c4d5e6f7".into(),
        vmi_spec: spec,
    }
    .to_env();
    e.push((launcher::var::POD_UID.into(), "pod-1".into()));
    e
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "{what} did not happen within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_unusable_environment_goes_to_the_termination_log() {
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("termination-log");
    let out = Command::new(LAUNCHER)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["--root", t.path().to_str().unwrap(), "--termination-log", log.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "invalid KUBEVIRT_RS_VMI_SPEC: not set\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("error: invalid KUBEVIRT_RS_VMI_SPEC: not set"));
}

#[test]
fn preparation_failures_go_to_the_failed_file_and_the_termination_log() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let at = |p: String| root.join(p.trim_start_matches('/'));
    let sockets = SocketDir::in_pod();
    // An earlier run's hand-over files are removed first.
    std::fs::create_dir_all(at(sockets.path().to_owned())).unwrap();
    std::fs::write(at(sockets.ready()), "").unwrap();
    std::fs::write(at(sockets.done()), "").unwrap();
    let log = root.join("termination-log");
    let run = |spec: serde_json::Value| {
        Command::new(LAUNCHER)
            .envs(env(spec))
            .args(["--root", root.to_str().unwrap(), "--termination-log", log.to_str().unwrap()])
            .output()
            .unwrap()
    };

    let out = run(serde_json::json!({
        "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
        "volumes": [{"name": "root", "containerDisk": {"image": "registry:5000/cirros:devel"}}],
    }));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let want = format!(
        "preparing the disks: volume \"root\": the containerDisk file {} is missing (the volume's init container copies \
         it there)\n",
        at(launcher::container_disk_copy("root")).display()
    );
    assert_eq!(std::fs::read_to_string(at(sockets.failed())).unwrap(), want);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), want);
    assert!(!at(sockets.ready()).exists(), "the stale ready file is gone");
    assert!(!at(sockets.done()).exists(), "the stale done file is gone");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(at(sockets.path().to_owned())).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o750);

    let out = run(serde_json::json!({"domain": {"devices": {}}, "volumes": [{"name": 7}]}));
    assert_eq!(out.status.code(), Some(1));
    let got = std::fs::read_to_string(&log).unwrap();
    assert!(
        got.starts_with(
            "the VMI spec in KUBEVIRT_RS_VMI_SPEC is not a VirtualMachineInstanceSpec: invalid type: integer `7`"
        ),
        "{got}"
    );

    let out = run(serde_json::json!({
        "domain": {"devices": {"interfaces": [{"name": "default", "bridge": {}}]}},
        "networks": [{"name": "default", "pod": {}}],
    }));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        std::fs::read_to_string(at(sockets.failed())).unwrap(),
        "setting up the pod network: interface \"default\": the bridge binding on the pod network is not supported by \
         this launcher (use masquerade: {})\n"
    );
}

/// The launcher in a sandbox standing for its container, with the host's libvirtd.
struct Sandbox {
    dir: tempfile::TempDir,
    child: Child,
}

impl Sandbox {
    fn start(spec: serde_json::Value) -> Sandbox {
        let tools =
            support::tools(&[("libvirtd", "libvirt-daemon"), ("virsh", "libvirt-clients"), ("unshare", "util-linux")]);
        support::tools(&[("qemu-system-x86_64", "qemu-system-x86")]);
        // Short: the libvirt socket path must stay under 108 bytes.
        let dir = tempfile::Builder::new().prefix("kvl").tempdir_in("/tmp").unwrap();
        let w = dir.path();
        for d in ["etc-up", "etc-work", "var-up", "var-work", "root/etc/libvirt"] {
            std::fs::create_dir_all(w.join(d)).unwrap();
        }
        let deploy = support::repo().join("deploy/launcher");
        std::fs::copy(
            deploy.join("libvirtd.conf"),
            w.join("root").join(launcher::LIBVIRTD_CONF.trim_start_matches('/')),
        )
        .unwrap();
        let script = format!(
            "set -e
mount -t overlay overlay -o lowerdir=/etc,upperdir={w}/etc-up,workdir={w}/etc-work /etc
mount -t overlay overlay -o lowerdir=/var,upperdir={w}/var-up,workdir={w}/var-work /var
mount -t tmpfs tmpfs /run
mkdir -p /etc/libvirt /var/lib/libvirt/qemu /var/log/libvirt/qemu /var/cache/libvirt/qemu
cp {deploy}/qemu.conf /etc/libvirt/qemu.conf
cat {deploy}/passwd >> /etc/passwd
cat {deploy}/group >> /etc/group
exec {LAUNCHER} --root {w}/root --termination-log {w}/termination-log --libvirtd {libvirtd} --virsh {virsh}
",
            w = w.display(),
            deploy = deploy.display(),
            libvirtd = tools[0].display(),
            virsh = tools[1].display(),
        );
        let log = std::fs::File::create(w.join("launcher.log")).unwrap();
        let child = Command::new(&tools[2])
            .args(["--mount", "--pid", "--fork", "--mount-proc", "--propagation", "private", "sh", "-c", &script])
            .envs(env(spec))
            .env("VIRT_LAUNCHER_LOG", "info,virt_launcher::reaper=debug")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Sandbox { dir, child }
    }

    fn at(&self, p: &str) -> PathBuf {
        self.dir.path().join("root").join(p.trim_start_matches('/'))
    }

    fn uri(&self) -> String {
        SocketDir(self.at(SocketDir::in_pod().path()).to_string_lossy().into_owned()).libvirt_uri()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("launcher.log")).unwrap_or_default()
    }

    fn wait_ready(&mut self) {
        let ready = self.at(&SocketDir::in_pod().ready());
        let deadline = Instant::now() + Duration::from_secs(60);
        while !ready.exists() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the launcher exited ({status}) before it was ready:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "not ready within 60 s:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The launcher's PID (outside its PID namespace): unshare's only child.
    fn launcher_pid(&self) -> u32 {
        let children = format!("/proc/{0}/task/{0}/children", self.child.id());
        std::fs::read_to_string(children).unwrap().trim().parse().unwrap()
    }

    fn virsh(&self, args: &[&str]) -> String {
        let uri = self.uri();
        let mut all = vec!["-c", uri.as_str()];
        all.extend_from_slice(args);
        support::run("virsh", &all)
    }

    fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the launcher did not exit within {timeout:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Killing PID 1 of the namespace ends everything in it.
        if self.child.try_wait().ok().flatten().is_none() {
            let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.child.id()));
            if let Some(pid) = children.ok().and_then(|c| c.trim().parse::<i32>().ok()) {
                let _ = support::output("kill", &["-9", &pid.to_string()]);
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Zombie children of `pid` (orphans the launcher should have reaped).
fn zombies_of(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|c| std::fs::read_to_string(format!("/proc/{c}/stat")).ok())
        .filter(|stat| stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')))
        .collect()
}

const NO_DEVICES: &str = r#"{"domain": {"devices": {"autoattachPodInterface": false}}}"#;

#[test]
fn libvirtd_is_hosted_until_the_node_agent_is_done() {
    let mut sb = Sandbox::start(serde_json::from_str(NO_DEVICES).unwrap());
    sb.wait_ready();
    let sockets = SocketDir::in_pod();
    assert!(sb.at(&sockets.libvirt_socket()).exists());
    // The node agent's view: libvirt answers through the pod's socket.
    assert!(sb.virsh(&["list", "--all", "--name"]).trim().is_empty());
    let copy = std::fs::read_to_string(sb.at(&launcher::libvirtd_conf_copy())).unwrap();
    assert!(copy.contains(&format!("unix_sock_dir = \"{}\"", sb.at(sockets.path()).display())), "{copy}");
    let serial_dir = sb.at(&launcher::serial_log());
    let serial_dir = serial_dir.parent().unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(serial_dir).unwrap()), 107);
    std::fs::write(sb.at(&sockets.done()), "").unwrap();
    let status = sb.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status}:\n{}", sb.log());
    assert!(sb.log().contains("outcome=Done"), "{}", sb.log());
    assert!(!sb.at(&sockets.libvirt_socket()).exists(), "libvirtd stopped and removed its socket");
}

#[test]
fn sigterm_destroys_the_domain_after_its_grace_period() {
    let mut spec: serde_json::Value = serde_json::from_str(NO_DEVICES).unwrap();
    spec["terminationGracePeriodSeconds"] = 2.into();
    let mut sb = Sandbox::start(spec);
    sb.wait_ready();
    // What the node agent would do: a domain named as the contract says. No OS: the guest ignores ACPI.
    let xml = sb.dir.path().join("domain.xml");
    std::fs::write(
        &xml,
        "<domain type='qemu'><name>default_testvmi</name><memory unit='MiB'>64</memory>\
         <os><type arch='x86_64' machine='pc'>hvm</type></os><features><acpi/></features>\
         <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices></domain>",
    )
    .unwrap();
    let started = Instant::now();
    sb.virsh(&["create", xml.to_str().unwrap()]);
    // The first domain makes libvirtd probe QEMU; with PID 1 reaping the probes' orphans this takes seconds.
    assert!(started.elapsed() < Duration::from_secs(30), "virsh create took {:?}", started.elapsed());
    assert_eq!(sb.virsh(&["domstate", "default_testvmi"]).trim(), "running");
    let pid = sb.launcher_pid();
    let leftover = zombies_of(pid);
    assert!(leftover.is_empty(), "zombies under the launcher: {leftover:?}");

    let signalled = Instant::now();
    support::run("kill", &["-TERM", &pid.to_string()]);
    let terminating = sb.at(&SocketDir::in_pod().terminating());
    wait_for("the terminating file", Duration::from_secs(2), || terminating.exists());
    // Destroyed only once the 2 s grace period is over.
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(sb.virsh(&["domstate", "default_testvmi"]).trim(), "running", "still in its grace period");
    let status = sb.wait_exit(Duration::from_secs(30));
    let took = signalled.elapsed();
    assert!(status.success(), "{status}:\n{}", sb.log());
    assert!(took >= Duration::from_secs(2), "exited after {took:?}, before the grace period ended");
    let log = sb.log();
    assert!(log.contains("outcome=Terminated(Destroyed)"), "{log}");
    // libvirtd's QEMU probes daemonize; PID 1 (the launcher) reaped their orphans.
    assert!(log.contains("orphans reaped"), "{log}");
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn sigterm_without_a_domain_stops_at_once() {
    let mut sb = Sandbox::start(serde_json::from_str(NO_DEVICES).unwrap());
    sb.wait_ready();
    let signalled = Instant::now();
    support::run("kill", &["-TERM", &sb.launcher_pid().to_string()]);
    let status = sb.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status}:\n{}", sb.log());
    assert!(sb.log().contains("outcome=Terminated(NotRunning)"), "{}", sb.log());
    // Nothing to stop: only the 5 s wait for the node agent's done file.
    assert!(signalled.elapsed() < Duration::from_secs(10), "{:?}", signalled.elapsed());
    assert!(sb.at(&SocketDir::in_pod().terminating()).exists());
}
