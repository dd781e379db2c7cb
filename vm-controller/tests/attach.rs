//! The VMI subresources virt-api carries out through the node agent (issue 14): `console`, `vnc`, `pause`,
//! `unpause`, `port-forward`, `expose` (the Service reached through kube-proxy), `vnc screenshot`, each with
//! upstream's `virtctl` v1.8.0 and ours, on the same running guest, through the real kube-apiserver's aggregation
//! layer, virt-api and the node agent's mutual-TLS API; and that the guest runs in upstream's non-root launcher
//! (every compute process the qemu user's, no capabilities).
//!
//! Needs the test cluster and the installed stack (masquerade default); run with `--ignored --test-threads=1`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use contracts::kubevirt::node_api;
use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{
    ConditionStatus, VirtualMachineInstanceConditionType as Type, VirtualMachineInstancePhase as Phase,
};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube_test_support::{Error, Result, poll_object, poll_until};
use stack_support::vmi::{MARKER, VmiEnv, condition};
use stack_support::{local_images, upstream_example};

const BOOT_TIMEOUT: Duration = Duration::from_secs(240);
const TICK: &str = "KUBEVIRT-RS-GUEST-TICK";
const VM: &str = "vm-attach";

fn err(message: impl Into<String>) -> Error {
    Error::ClusterUp(message.into())
}

/// A busybox pod in the test namespace to run clients in (`kubectl exec`); its name once Ready.
async fn http_client_pod(env: &VmiEnv) -> Result<String> {
    let name = "http-client";
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  terminationGracePeriodSeconds: 0\n  \
         containers:\n  - {{name: client, image: \"{}\", command: [sleep, \"3600\"]}}\n",
        kube_test_support::test_image("busybox")
    );
    env.kubectl_manifest("create", &yaml)?;
    poll_object(&env.pods(), name, Duration::from_secs(90), |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    })
    .await?;
    Ok(name.to_owned())
}

fn virtctl_command(env: &VmiEnv, bin: &Path, args: &[&str]) -> Command {
    env.virtctl_command(bin, args)
}

/// One virtctl run: (exit code, stdout + stderr).
fn virtctl(env: &VmiEnv, bin: &Path, args: &[&str]) -> Result<(i32, String)> {
    env.virtctl(bin, args)
}

/// A running `virtctl console`: its stdout read on a thread into a channel.
struct Console {
    child: Child,
    output: mpsc::Receiver<Vec<u8>>,
    seen: String,
}

impl Console {
    fn start(env: &VmiEnv, bin: &Path) -> Result<Console> {
        let mut child = virtctl_command(env, bin, &["console", VM])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::io("virtctl console"))?;
        let (tx, rx) = mpsc::channel();
        let stdout: ChildStdout = child.stdout.take().ok_or_else(|| err("no stdout"))?;
        std::thread::spawn(move || {
            let mut stdout = stdout;
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
        Ok(Console { child, output: rx, seen: String::new() })
    }

    /// Reads until the output contains `needle` (after what was already seen); the output so far on timeout.
    fn expect(&mut self, needle: &str, timeout: Duration) -> Result<()> {
        let start = self.seen.len();
        let until = Instant::now() + timeout;
        while !self.seen[start..].contains(needle) {
            let left = until.saturating_duration_since(Instant::now());
            match self.output.recv_timeout(left) {
                Ok(b) => self.seen.push_str(&String::from_utf8_lossy(&b)),
                Err(_) => {
                    let stderr = self.stderr();
                    return Err(err(format!(
                        "no {needle:?} from virtctl console within {timeout:?}:\n{}\n--- stderr:\n{stderr}",
                        self.seen
                    )));
                }
            }
        }
        Ok(())
    }

    fn send(&mut self, line: &str) -> Result<()> {
        let stdin = self.child.stdin.as_mut().ok_or_else(|| err("no stdin"))?;
        stdin.write_all(line.as_bytes()).map_err(Error::io("writing to virtctl console"))?;
        stdin.flush().map_err(Error::io("flushing virtctl console"))
    }

    /// Waits until the process exited on its own: its exit code.
    fn exited_within(&mut self, timeout: Duration) -> Option<i32> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }

    fn stderr(&mut self) -> String {
        if self.child.try_wait().ok().flatten().is_none() {
            return String::from("(still running)");
        }
        let mut s = String::new();
        if let Some(e) = self.child.stderr.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `virtctl vnc --proxy-only`: the port it printed, then the RFB greeting of the guest's VNC server through it.
fn vnc_handshake(env: &VmiEnv, bin: &Path) -> Result<String> {
    let mut child = virtctl_command(env, bin, &["vnc", "--proxy-only", VM])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(Error::io("virtctl vnc"))?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or_else(|| err("no stdout"))?;
    BufReader::new(stdout).read_line(&mut line).map_err(Error::io("reading virtctl vnc"))?;
    let result = (|| {
        let v: serde_json::Value = serde_json::from_str(line.trim()).map_err(|e| err(format!("{line:?}: {e}")))?;
        let port = v["port"].as_u64().ok_or_else(|| err(format!("no port in {line:?}")))?;
        let mut s = std::net::TcpStream::connect(("127.0.0.1", u16::try_from(port).unwrap_or(0)))
            .map_err(Error::io("connecting to the VNC proxy"))?;
        s.set_read_timeout(Some(Duration::from_secs(30))).map_err(Error::io("timeout"))?;
        let mut greeting = [0u8; 12];
        s.read_exact(&mut greeting).map_err(Error::io("reading the RFB greeting"))?;
        // The client's version: the server then offers its security types (at least one).
        s.write_all(b"RFB 003.008\n").map_err(Error::io("writing the RFB version"))?;
        let mut count = [0u8; 1];
        s.read_exact(&mut count).map_err(Error::io("reading the security types"))?;
        assert!(count[0] > 0, "the VNC server offers no security type");
        Ok(String::from_utf8_lossy(&greeting).into_owned())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn ticks(console: &str) -> usize {
    console.lines().filter(|l| l.starts_with(TICK)).count()
}

async fn paused(env: &VmiEnv, want: bool) -> Result<VirtualMachineInstance> {
    poll_object(&env.vmis(), VM, Duration::from_secs(30), |v: &VirtualMachineInstance| {
        (condition(v, Type::Paused) == Some(ConditionStatus::True)) == want
    })
    .await
}

/// The sum over virt-api's pods of gauge `name` for [`VM`] in the test namespace, read from each pod's
/// `/metrics` through the API server's pod proxy (0 while the series does not exist).
fn virt_api_gauge(env: &VmiEnv, name: &str) -> Result<f64> {
    let pods = env.cluster.kubectl(["-n", "kubevirt", "get", "pods", "-l", "kubevirt.io=virt-api", "-o", "name"])?;
    let series = format!("{name}{{namespace=\"{}\",vmi=\"{VM}\"}} ", env.ns.name());
    let mut sum = 0.0;
    for pod in String::from_utf8_lossy(&pods.stdout).lines().filter_map(|l| l.strip_prefix("pod/")) {
        let uri = format!("/api/v1/namespaces/kubevirt/pods/https:{pod}:8443/proxy/metrics");
        let out = env.cluster.kubectl(["get", "--raw", &uri])?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !text.contains("# EOF") {
            return Err(err(format!("{uri}: {text}{}", String::from_utf8_lossy(&out.stderr))));
        }
        sum += text.lines().filter_map(|l| l.strip_prefix(&series)).filter_map(|v| v.parse::<f64>().ok()).sum::<f64>();
    }
    Ok(sum)
}

/// Waits until [`virt_api_gauge`] of `name` is `want`.
async fn wait_gauge(env: &VmiEnv, name: &str, want: f64) -> Result<()> {
    poll_until(&format!("virt-api's {name} = {want}"), Duration::from_secs(30), || async {
        (virt_api_gauge(env, name).ok()? == want).then_some(())
    })
    .await
}

/// console (output, input, one at a time), vnc, pause/unpause with `bin` on the running guest of [`VM`].
async fn attach_with(env: &VmiEnv, bin: &Path, pod: &str, tag: &str) -> Result<()> {
    let which = bin.display().to_string();
    // console: the guest's output arrives, typed lines reach it.
    let mut first = Console::start(env, bin)?;
    first.expect(TICK, Duration::from_secs(60))?;
    first.send(&format!("hello-{tag}\n"))?;
    first.expect(&format!("KUBEVIRT-RS-GUEST-ECHO hello-{tag}"), Duration::from_secs(30))?;
    // One console at a time: a second one takes over, the first is disconnected.
    let mut second = Console::start(env, bin)?;
    second.expect(TICK, Duration::from_secs(60))?;
    let code = first.exited_within(Duration::from_secs(30));
    assert!(code.is_some(), "{which}: the first console still runs after a second attached:\n{}", first.seen);
    second.send(&format!("again-{tag}\n"))?;
    second.expect(&format!("KUBEVIRT-RS-GUEST-ECHO again-{tag}"), Duration::from_secs(30))?;
    // virt-api counts the open console (upstream's metric), and no longer once it is closed.
    wait_gauge(env, "kubevirt_console_active_connections", 1.0).await?;
    drop(second);
    drop(first);
    wait_gauge(env, "kubevirt_console_active_connections", 0.0).await?;

    // vnc --proxy-only: the guest's VNC server greets through the proxy.
    let greeting = vnc_handshake(env, bin)?;
    assert!(greeting.starts_with("RFB 003.00"), "{which}: {greeting:?}");

    // pause: the Paused condition (libvirt's reason: the user), the guest stops ticking; twice is refused.
    let (code, out) = virtctl(env, bin, &["pause", "vmi", VM, "--dry-run"])?;
    assert_eq!(code, 0, "{which}: {out}");
    assert!(
        out.contains("Dry Run execution") && out.contains(&format!("VMI {VM} was scheduled to pause")),
        "{which}: {out}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(condition(&env.vmis().get(VM).await?, Type::Paused), None, "{which}: a dry run paused the VMI");
    let (code, out) = virtctl(env, bin, &["pause", "vm", VM])?;
    assert_eq!(code, 0, "{which}: {out}");
    assert!(out.contains(&format!("VMI {VM} was scheduled to pause")), "{which}: {out}");
    let vmi = paused(env, true).await?;
    let reason = vmi
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == Type::Paused)
        .and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("PausedByUser"), "{which}");
    // A tick the guest printed just before it was paused may still be on its way to the console log.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = ticks(&env.console(pod));
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(ticks(&env.console(pod)), before, "{which}: a paused guest kept ticking");
    let (code, out) = virtctl(env, bin, &["pause", "vmi", VM])?;
    assert_eq!(code, 1, "{which}: {out}");
    let again = format!(
        "Error pausing VirtualMachineInstance {VM}: Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"{VM}\": VMI is already paused"
    );
    assert!(out.contains(&again), "{which}: {out}");

    // unpause: the condition goes, the guest ticks on; unpausing a running guest is refused.
    let (code, out) = virtctl(env, bin, &["unpause", "vmi", VM])?;
    assert_eq!(code, 0, "{which}: {out}");
    assert!(out.contains(&format!("VMI {VM} was scheduled to unpause")), "{which}: {out}");
    paused(env, false).await?;
    poll_until("the guest to tick again", Duration::from_secs(30), || async {
        (ticks(&env.console(pod)) > before).then_some(())
    })
    .await?;
    let (code, out) = virtctl(env, bin, &["unpause", "vm", VM])?;
    assert_eq!(code, 1, "{which}: {out}");
    assert!(out.contains("VMI is not paused"), "{which}: {out}");
    Ok(())
}

/// The node agent pod's IP on the VMI's node.
async fn node_agent_ip(env: &VmiEnv, node: &str) -> Result<String> {
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.client.clone(), "kubevirt");
    let (k, v) = node_api::POD_LABEL;
    let list =
        pods.list(&ListParams::default().labels(&format!("{k}={v}")).fields(&format!("spec.nodeName={node}"))).await?;
    list.items
        .iter()
        .find_map(|p| p.status.as_ref()?.pod_ip.clone())
        .ok_or_else(|| err(format!("no node agent pod on {node}")))
}

/// `curl` of the node agent's console path: (exit code, output with the HTTP status).
fn curl_node_api(url: &str, extra: &[&str]) -> Result<(i32, String)> {
    let out = Command::new("curl")
        .args(["-sS", "-k", "--max-time", "10", "-w", "\nHTTP %{http_code}\n", "-X", "PUT"])
        .args(extra)
        .arg(url)
        .output()
        .map_err(Error::io("curl (the node API)"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.code().unwrap_or(-1), text))
}

/// A running `virtctl port-forward`, killed when dropped.
struct Forward(Child);

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `virtctl port-forward --stdio TARGET PORT` with `request` on stdin, which stays open until stdout ends
/// (upstream ends the tunnel when stdin ends): (exit code, stdout, stderr).
fn port_forward_stdio(
    env: &VmiEnv,
    bin: &Path,
    target: &str,
    port: &str,
    request: &str,
) -> Result<(i32, String, String)> {
    let mut child = virtctl_command(env, bin, &["port-forward", "--stdio", target, port])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("virtctl port-forward --stdio"))?;
    let mut stdin = child.stdin.take().ok_or_else(|| err("no stdin"))?;
    stdin.write_all(request.as_bytes()).map_err(Error::io("virtctl stdin"))?;
    let (mut stdout, mut stderr) =
        (child.stdout.take().ok_or_else(|| err("no stdout"))?, child.stderr.take().ok_or_else(|| err("no stderr"))?);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let (mut out, mut text) = (Vec::new(), String::new());
        let _ = stdout.read_to_end(&mut out);
        let _ = stderr.read_to_string(&mut text);
        let _ = tx.send((out, text));
    });
    let got = rx.recv_timeout(Duration::from_secs(90));
    drop(stdin);
    if got.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(Error::io("virtctl port-forward --stdio"))?;
    let (out, text) = got.map_err(|_| err(format!("{}: port-forward --stdio did not end", bin.display())))?;
    Ok((status.code().unwrap_or(-1), String::from_utf8_lossy(&out).into_owned(), text))
}

/// `port-forward`: upstream's virtctl (a VMI, the namespace from `-n`) and ours (the VM, the namespace in the
/// target) forward a local port to the guest's HTTP server; `--stdio` carries one HTTP exchange; a port the
/// guest does not listen on is upstream's "dialing VM" error.
async fn port_forward_checks(env: &VmiEnv, upstream: &Path, ours: &Path) -> Result<()> {
    let ns = env.ns.name().to_owned();
    let ours_target = format!("vm/{VM}/{ns}");
    for (bin, target, local) in [(upstream, format!("vmi/{VM}"), 18481), (ours, ours_target.clone(), 18482)] {
        let child = virtctl_command(env, bin, &["port-forward", &target, &format!("{local}:80")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(Error::io("virtctl port-forward"))?;
        let _forward = Forward(child);
        let page = stack_support::vmi::http_get_url(&format!("http://127.0.0.1:{local}/")).await?;
        assert!(page.contains(MARKER), "{}: {page}", bin.display());
        // A second connection through the same forward gets its own tunnel.
        let again = stack_support::vmi::http_get_url(&format!("http://127.0.0.1:{local}/")).await?;
        assert!(again.contains(MARKER), "{}: {again}", bin.display());
        // A connection held open is one tunnel in virt-api's metric while it lasts.
        let held =
            std::net::TcpStream::connect(("127.0.0.1", local)).map_err(Error::io("connecting to the forward"))?;
        wait_gauge(env, "kubevirt_portforward_active_tunnels", 1.0).await?;
        drop(held);
        wait_gauge(env, "kubevirt_portforward_active_tunnels", 0.0).await?;
    }
    for (bin, target) in [(upstream, format!("vmi/{VM}")), (ours, ours_target.clone())] {
        let (code, out, text) = port_forward_stdio(env, bin, &target, "80", "GET / HTTP/1.0\r\n\r\n")?;
        assert!(out.starts_with("HTTP/1.") && out.contains(MARKER), "{}: {code} {out} {text}", bin.display());
        let (code, out, text) = port_forward_stdio(env, bin, &target, "81", "")?;
        assert_eq!(code, 1, "{}: {out} {text}", bin.display());
        assert!(text.contains("dialing VM: dial tcp") && text.contains(":81"), "{}: {text}", bin.display());
    }
    let (code, out) = virtctl(env, ours, &["port-forward", "--stdio", "vm/no-such-vm", "80"])?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("virtualmachine.kubevirt.io \"no-such-vm\" not found"), "{out}");
    let (code, out) = virtctl(env, ours, &["port-forward", "pod/x", "80"])?;
    assert_eq!((code, out.trim()), (1, "unsupported resource type 'pod'"));
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn both_virtctls_attach_the_console_and_vnc_and_pause_the_guest() -> Result<()> {
    let env = VmiEnv::on_installed_stack("vm-attach").await?;
    let upstream: PathBuf =
        tokio::task::spawn_blocking(stack_support::upstream_virtctl).await.map_err(|e| err(e.to_string()))??;
    let ours = kube_test_support::workspace_binary("virtctl")?;

    // A stopped VM has no VMI: both virtctls say so (404, upstream's text).
    let yaml = local_images(&upstream_example("vm-cirros.yaml")?, &env.image).replace("vm-cirros", VM);
    env.kubectl_manifest("create", &yaml)?;
    for bin in [&upstream, &ours] {
        let (code, out) = virtctl(&env, bin, &["console", VM])?;
        assert_eq!(code, 1, "{}: {out}", bin.display());
        assert!(
            out.contains(&format!("virtualmachineinstance.kubevirt.io \"{VM}\" not found")),
            "{}: {out}",
            bin.display()
        );
        let (code, out) = virtctl(&env, bin, &["vnc", "--proxy-only", "no-such-vmi"])?;
        assert_eq!(code, 1, "{}: {out}", bin.display());
        assert!(out.contains("can't access VMI no-such-vmi") && out.contains("not found"), "{}: {out}", bin.display());
    }

    let (code, out) = virtctl(&env, &ours, &["start", VM])?;
    assert_eq!(code, 0, "{out}");
    let vmi = env.wait_phase(VM, Phase::Running, BOOT_TIMEOUT).await?;
    let pod = env.launcher_pod(&vmi).await?.name_any();
    env.wait_console(&pod, MARKER, BOOT_TIMEOUT).await?;

    // Upstream's non-root launcher: everything in the compute container (the launcher, the session libvirtd,
    // QEMU) runs as the qemu user with no effective capability beyond NET_BIND_SERVICE; the node agent did the
    // privileged set-up (the guest booted with its masquerade network above).
    let ps = env.kubectl(&["exec", &pod, "-c", "compute", "--", "ps", "-eo", "user:16=,comm="])?;
    let procs: Vec<(&str, &str)> = ps.lines().filter_map(|l| l.trim().split_once(char::is_whitespace)).collect();
    for want in ["virt-launcher", "libvirtd", "qemu-system-x86"] {
        assert!(procs.iter().any(|(_, c)| c.trim().starts_with(want)), "no {want} in the compute container:\n{ps}");
    }
    assert!(procs.iter().all(|(u, _)| *u == "qemu"), "a compute process not run by qemu (107):\n{ps}");
    for pid in ["1", "$(pidof libvirtd)", "$(pidof qemu-system-x86_64)"] {
        let line = env.kubectl(&[
            "exec",
            &pod,
            "-c",
            "compute",
            "--",
            "sh",
            "-c",
            &format!("grep CapEff /proc/{pid}/status"),
        ])?;
        let eff = u64::from_str_radix(line.split_whitespace().nth(1).unwrap_or("x"), 16)
            .map_err(|e| err(format!("{pid}: {line:?}: {e}")))?;
        assert_eq!(eff & !(1 << 10), 0, "{pid} has capabilities {eff:#x} (only NET_BIND_SERVICE may be there)");
    }

    attach_with(&env, &upstream, &pod, "upstream").await?;
    attach_with(&env, &ours, &pod, "ours").await?;

    // `virtctl vnc screenshot`, upstream's and ours: a PNG of the guest's display (libvirt's, passed through or
    // re-encoded from PPM by the node agent), to a file and (ours) to stdout; an unknown VMI is refused before
    // anything is written.
    for (who, bin) in [("upstream", &upstream), ("ours", &ours)] {
        let shot = std::env::temp_dir().join(format!("kvrs-screenshot-{}-{who}.png", env.ns.name()));
        let shot_arg = shot.to_string_lossy().into_owned();
        let (code, out) = virtctl(&env, bin, &["vnc", "screenshot", VM, "-f", &shot_arg])?;
        assert_eq!(code, 0, "{who}: {out}");
        let png = std::fs::read(&shot).map_err(Error::io("reading the screenshot"))?;
        let _ = std::fs::remove_file(&shot);
        assert!(
            png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 33,
            "{who}: not a PNG: {:?}",
            &png[..png.len().min(16)]
        );
        assert_eq!(&png[12..16], b"IHDR", "{who}");
        let side = |at: usize| u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]);
        let (width, height) = (side(16), side(20));
        assert!((320..=4096).contains(&width) && (200..=4096).contains(&height), "{who}: {width}x{height}");
        let (code, out) = virtctl(&env, bin, &["vnc", "screenshot", "no-such-vmi", "-f", &shot_arg])?;
        assert_eq!(code, 1, "{who}: {out}");
        assert!(out.contains("Can't access VMI no-such-vmi") && out.contains("not found"), "{who}: {out}");
        assert!(!shot.exists(), "{who}: a refused screenshot wrote {shot_arg}");
    }
    let out = virtctl_command(&env, &ours, &["vnc", "screenshot", VM, "--file", "-"])
        .stdin(Stdio::null())
        .output()
        .map_err(Error::io("virtctl"))?;
    assert!(out.status.success() && out.stdout.starts_with(b"\x89PNG\r\n\x1a\n"), "ours to stdout: {:?}", out.status);
    // The guest has no agent: upstream's virtctl gets upstream's clear refusal for what needs one.
    // (for guestosinfo upstream's client prints its generic text for the 409; the API's message is upstream's.)
    for sub in ["guestosinfo", "fslist", "userlist"] {
        let (code, out) = virtctl(&env, &upstream, &[sub, VM])?;
        assert_eq!(code, 1, "{sub}: {out}");
        let refused =
            out.contains("VMI does not have guest agent connected") || out.contains("the server reported a conflict");
        assert!(refused, "{sub}: {out}");
    }
    for sub in ["guestosinfo", "filesystemlist", "userlist"] {
        let uri = format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{}/virtualmachineinstances/{VM}/{sub}",
            env.ns.name()
        );
        let out = env.cluster.kubectl(["get", "--raw", &uri])?;
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success() && text.contains("VMI does not have guest agent connected"), "{sub}: {text}");
    }
    let body = tempfile::NamedTempFile::new().map_err(Error::io("freeze body"))?;
    std::fs::write(body.path(), r#"{"unfreezeTimeout": "5m"}"#).map_err(Error::io("freeze body"))?;
    let freeze =
        format!("/apis/subresources.kubevirt.io/v1/namespaces/{}/virtualmachineinstances/{VM}/freeze", env.ns.name());
    let out = env.cluster.kubectl(["replace", "--raw", &freeze, "-f", &body.path().to_string_lossy()])?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success() && text.contains("VMI does not have guest agent connected"), "freeze: {text}");

    // RBAC through the real API server: a namespace viewer may not open the console; an editor gets through
    // to virt-api (which then wants a websocket).
    let ns = env.ns.name().to_owned();
    let (viewer, editor) = env.viewer_and_editor()?;
    let uri = format!("/apis/subresources.kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{VM}/console");
    poll_until(
        "the editor to reach virt-api's console (aggregated kubevirt.io:edit)",
        Duration::from_secs(60),
        || async {
            let out = env.cluster.kubectl([editor.as_str(), "get", "--raw", &uri]).ok()?;
            String::from_utf8_lossy(&out.stderr).contains("websocket").then_some(())
        },
    )
    .await?;
    let denied = env.cluster.kubectl([viewer.as_str(), "get", "--raw", &uri])?;
    let text = String::from_utf8_lossy(&denied.stderr).into_owned();
    assert!(!denied.status.success() && text.contains("Forbidden"), "viewer: {text}");

    // expose: both virtctls create a Service selecting the launcher pod (vmi.kubevirt.io/id); its endpoints are
    // the pod's. A client pod reaches the guest's HTTP server through the Service's ClusterIP (the node's
    // kube-proxy), and the NodePort answers on the node.
    let client = http_client_pod(&env).await?;
    for (bin, kind, svc, svc_type) in
        [(&upstream, "vmi", "svc-upstream", "ClusterIP"), (&ours, "vm", "svc-ours", "NodePort")]
    {
        let args = ["expose", kind, VM, "--name", svc, "--port", "8080", "--target-port", "80", "--type", svc_type];
        let (code, out) = virtctl(&env, bin, &args)?;
        assert_eq!(code, 0, "{}: {out}", bin.display());
        assert!(
            out.contains(&format!("Service {svc} successfully created for {kind} {VM}")),
            "{}: {out}",
            bin.display()
        );
        let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(env.client.clone(), &ns);
        let spec = services.get(svc).await?.spec.unwrap_or_default();
        let selector = spec.selector.clone().unwrap_or_default();
        assert_eq!(selector.get("vmi.kubevirt.io/id").map(String::as_str), Some(VM), "{svc}");
        assert_eq!(spec.type_.as_deref(), Some(svc_type), "{svc}");
        let slices: Api<k8s_openapi::api::discovery::v1::EndpointSlice> = Api::namespaced(env.client.clone(), &ns);
        let ip = poll_until(&format!("the endpoints of {svc}"), Duration::from_secs(60), || async {
            let list =
                slices.list(&ListParams::default().labels(&format!("kubernetes.io/service-name={svc}"))).await.ok()?;
            let slice = list.items.into_iter().next()?;
            let port = slice.ports.iter().flatten().find_map(|p| p.port)?;
            let ip = slice.endpoints.iter().find_map(|e| e.addresses.first().cloned())?;
            (port == 80).then_some(ip)
        })
        .await?;
        let launcher = env.pods().get(&pod).await?;
        assert_eq!(launcher.status.and_then(|s| s.pod_ip).as_deref(), Some(ip.as_str()), "{svc}");
        let cluster_ip =
            spec.cluster_ip.clone().filter(|ip| ip != "None").ok_or_else(|| err(format!("{svc}: no ClusterIP")))?;
        let url = format!("http://{cluster_ip}:8080/");
        let page = poll_until(&format!("{url} from pod {client}"), Duration::from_secs(60), || async {
            env.kubectl(&["exec", &client, "--", "timeout", "3", "wget", "-qO-", &url]).ok()
        })
        .await?;
        assert!(page.contains(MARKER), "{svc} through {url}: {page}");
        if svc_type == "NodePort" {
            let node_port = spec.ports.iter().flatten().find_map(|p| p.node_port).ok_or_else(|| err("no nodePort"))?;
            let page = stack_support::vmi::http_get_url(&format!("http://127.0.0.1:{node_port}/")).await?;
            assert!(page.contains(MARKER), "{svc} on the node's port {node_port}: {page}");
        }
    }
    port_forward_checks(&env, &upstream, &ours).await?;

    let (code, out) = virtctl(&env, &ours, &["expose", "vmi", "no-such-vmi", "--name", "x", "--port", "80"])?;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "error fetching VirtualMachineInstance: virtualmachineinstances.kubevirt.io \"no-such-vmi\" not found"
        ),
        "{out}"
    );

    // The node agent's API takes virt-api's client certificate only: none is a 401, one of another CA fails the
    // TLS handshake.
    let node = vmi.status.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let ip = node_agent_ip(&env, &node).await?;
    let url = format!("https://{ip}:{}{}", node_api::PORT, node_api::Command::Pause.path(&ns, VM));
    let (_, out) = curl_node_api(&url, &[])?;
    assert!(out.contains("HTTP 401") && out.contains("a client certificate is required"), "{out}");
    let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
    let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
        .args(["-subj", &format!("/CN={}", node_api::CLIENT_COMMON_NAME)])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .map_err(Error::io("openssl"))?;
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let (code, out) = curl_node_api(&url, &["--cert", &cert.to_string_lossy(), "--key", &key.to_string_lossy()])?;
    assert!(code != 0 && !out.contains("HTTP 200"), "a self-signed certificate named like virt-api's got in: {out}");
    assert_eq!(condition(&env.vmis().get(VM).await?, Type::Paused), None, "a refused request paused the VMI");

    // A stopped VM's console: the VMI is gone, 404 again.
    let (code, out) = virtctl(&env, &ours, &["stop", VM])?;
    assert_eq!(code, 0, "{out}");
    env.wait_gone(VM, BOOT_TIMEOUT).await?;
    let (code, out) = virtctl(&env, &upstream, &["console", VM])?;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("not found"), "{out}");
    env.ns.delete().await
}
