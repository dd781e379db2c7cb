//! Tests of the test cluster's second node (`KV_NODES=2 tests/cluster/up`): pods pinned to each node reach each
//! other by pod IP, the host reaches both, the apiserver reaches node 2's kubelet (logs, exec, port-forward), a
//! Service whose only endpoint is on node 2 answers pods on node 1 and the host's NodePort, and a ReadWriteMany
//! claim of the `shared` class is mounted on both nodes at once. `#[ignore]`d: run them with
//! `KV_NODES=2 tests/cluster/up` first (or `KV_NODES=2` in the environment), then
//! `cargo test -p kube-test-support --test two_nodes -- --ignored`. They fail, never skip, when the cluster has no
//! second Ready node.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{
    ContainerStateTerminated, Node, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use kube::Client;
use kube::api::{Api, LogParams};
use kube_test_support::{
    NODE1, TestCluster, TestNamespace, apply_yaml, node2_name, poll_until, require_ready_nodes, test_image, wait_for,
};
use tokio::io::{AsyncBufReadExt, BufReader};

const T_POD: Duration = Duration::from_secs(90);
const T_NET: Duration = Duration::from_secs(30);
const NODE2_CGROUP_ROOT: &str = "/kvtest-node2";

/// The cluster (which must have both nodes Ready), an admin client and a fresh namespace `<prefix>-…`.
async fn setup(prefix: &str) -> Result<(TestCluster, Client, TestNamespace)> {
    let cluster = TestCluster::start_or_reuse().await?;
    let client = cluster.client().await?;
    require_ready_nodes(&client, &[NODE1, &node2_name()]).await?;
    let ns = TestNamespace::create(&client, prefix).await?;
    Ok((cluster, client, ns))
}

/// A pod `name` pinned to `node` (by the scheduler, through the `kubernetes.io/hostname` label) whose container
/// `main` runs `script` with `sh -c` in busybox; `NODE` holds the node name the pod runs on. `extra` holds further
/// YAML lines of the pod spec (unindented), `labels` the pod's labels (flow YAML).
fn pinned_pod(name: &str, node: &str, labels: &str, restart: &str, script: &str, mounts: &str, extra: &str) -> String {
    let script = serde_json::Value::from(script);
    let extra: String = extra.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, labels: {labels}}}\nspec:\n  restartPolicy: {restart}\n  \
         terminationGracePeriodSeconds: 1\n  nodeSelector: {{kubernetes.io/hostname: \"{node}\"}}\n  containers:\n  \
         - name: main\n    image: {image}\n    command: [sh, -c, {script}]\n    volumeMounts: {mounts}\n    env:\n    \
         - name: NODE\n      valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}\n{extra}",
        image = test_image("busybox"),
    )
}

/// An HTTP server pod on `node`: busybox httpd on port 8080 serving `served-by-<pod>-on-<node>`; it prints `ready`
/// first (for the logs check).
fn web_pod(name: &str, node: &str) -> String {
    let script = "mkdir -p /tmp/www && echo served-by-$HOSTNAME-on-$NODE > /tmp/www/index.html && \
                  echo ready on $NODE && exec httpd -f -p 8080 -h /tmp/www";
    pinned_pod(name, node, &format!("{{app: {name}}}"), "Never", script, "[]", "")
}

fn phase(p: Option<&Pod>) -> Option<String> {
    p.and_then(|p| p.status.as_ref()).and_then(|s| s.phase.clone())
}

fn pod_running(p: Option<&Pod>) -> bool {
    phase(p).as_deref() == Some("Running")
}

fn pod_finished(p: Option<&Pod>) -> bool {
    matches!(phase(p).as_deref(), Some("Succeeded" | "Failed"))
}

fn pvc_bound(p: Option<&PersistentVolumeClaim>) -> bool {
    p.and_then(|p| p.status.as_ref()).and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

fn pod_ip(pod: &Pod) -> Result<String> {
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).with_context(|| format!("pod without IP: {:?}", pod.status))
}

fn terminated(pod: &Pod) -> Result<ContainerStateTerminated> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "main"))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .with_context(|| format!("container main not terminated: {:?}", pod.status))
}

/// Runs `kubectl args`; its stdout when it succeeded, else an error with its stderr.
fn kubectl_ok(cluster: &TestCluster, args: &[&str]) -> Result<String> {
    let out = cluster.kubectl(args)?;
    ensure!(out.status.success(), "kubectl {args:?} failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `url` fetched from inside pod `pod` (`kubectl exec … wget`), retried until it answers `want`, at most `T_NET`.
async fn fetch_in_pod(cluster: &TestCluster, ns: &str, pod: &str, url: &str, want: &str) -> Result<()> {
    let args = ["-n", ns, "exec", pod, "--", "timeout", "5", "wget", "-q", "-O", "-", url];
    let what = format!("pod {pod} fetching {url} (want {want:?})");
    let got = poll_until(&what, T_NET, || async {
        let out = cluster.kubectl(args).ok()?;
        let body = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() && body == want).then_some(())
    })
    .await;
    if got.is_err() {
        // The last attempt's output says why (exec refused, no route, wrong answer).
        let last = cluster.kubectl(args)?;
        anyhow::bail!(
            "{what}: {} stdout {:?} stderr {:?}",
            last.status,
            String::from_utf8_lossy(&last.stdout),
            String::from_utf8_lossy(&last.stderr)
        );
    }
    Ok(())
}

/// `url` fetched from the host (curl), retried until it answers `want`, at most `T_NET`.
async fn fetch_on_host(url: &str, want: &str) -> Result<()> {
    let what = format!("the host fetching {url} (want {want:?})");
    poll_until(&what, T_NET, || async {
        let out = std::process::Command::new("curl").args(["-fsS", "--max-time", "3", url]).output().ok()?;
        (out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == want).then_some(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster with two nodes (KV_NODES=2 tests/cluster/up)"]
async fn pods_on_both_nodes_reach_each_other_and_the_apiserver_reaches_node_2() -> Result<()> {
    let (cluster, client, ns) = setup("twonodes").await?;
    let n = ns.name();
    let node2 = node2_name();

    // Node 2 carries the label every test node has (the provisioner's PV affinity) and its name as InternalIP.
    let node: Node = Api::all(client.clone()).get(&node2).await?;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    ensure!(labels.get("kubevirt-rs.test/node").map(String::as_str) == Some("true"), "node 2 labels {labels:?}");
    let addresses = node.status.as_ref().and_then(|s| s.addresses.clone()).unwrap_or_default();
    ensure!(addresses.iter().any(|a| a.type_ == "Hostname" && a.address == node2), "node 2 addresses {addresses:?}");

    apply_yaml(&client, n, &format!("{}---\n{}", web_pod("web-1", NODE1), web_pod("web-2", &node2))).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    let web1 = wait_for(&pods, "web-1", T_POD, pod_running).await?;
    let web2 = wait_for(&pods, "web-2", T_POD, pod_running).await?;
    ensure!(node_of(&web1) == Some(NODE1), "web-1 on {:?}", node_of(&web1));
    ensure!(node_of(&web2) == Some(node2.as_str()), "web-2 on {:?}", node_of(&web2));
    let (ip1, ip2) = (pod_ip(&web1)?, pod_ip(&web2)?);
    // Each node has its own pod CIDR (and bridge).
    ensure!(ip1.starts_with("10.244.0.") && ip2.starts_with("10.244.1."), "pod IPs {ip1} (node 1), {ip2} (node 2)");
    let page1 = format!("served-by-web-1-on-{NODE1}");
    let page2 = format!("served-by-web-2-on-{node2}");

    // Pod to pod by pod IP, both ways (exec into either node's pod), and the host to both.
    fetch_in_pod(&cluster, n, "web-1", &format!("http://{ip2}:8080/"), &page2).await?;
    fetch_in_pod(&cluster, n, "web-2", &format!("http://{ip1}:8080/"), &page1).await?;
    fetch_on_host(&format!("http://{ip1}:8080/"), &page1).await?;
    fetch_on_host(&format!("http://{ip2}:8080/"), &page2).await?;

    // The apiserver reaches node 2's kubelet: logs (kubectl and the API's pods/log), exec, port-forward.
    let logs = kubectl_ok(&cluster, &["-n", n, "logs", "web-2"])?;
    ensure!(logs.trim() == format!("ready on {node2}"), "kubectl logs web-2: {logs:?}");
    let api_logs = pods.logs("web-2", &LogParams::default()).await?;
    ensure!(api_logs == logs, "pods/log of web-2: {api_logs:?}");
    let hostname = kubectl_ok(&cluster, &["-n", n, "exec", "web-2", "--", "hostname"])?;
    ensure!(hostname.trim() == "web-2", "kubectl exec web-2 hostname: {hostname:?}");
    port_forward_answers(&cluster, n, "web-2", &page2).await?;

    // Each kubelet keeps its pods under its own cgroup root (node 1: the default /kubepods, node 2:
    // /kvtest-node2/kubepods), as far as the container's /proc/self/cgroup shows the host's paths (cgroup v1
    // without a cgroup namespace; a private cgroup namespace shows `/`).
    for (pod, on_node2) in [("web-1", false), ("web-2", true)] {
        let cg = kubectl_ok(&cluster, &["-n", n, "exec", pod, "--", "cat", "/proc/self/cgroup"])?;
        if let Some(path) = cg.lines().filter_map(|l| l.splitn(3, ':').nth(2)).find(|p| p.contains("kubepods")) {
            let under_node2 = path.starts_with(&format!("{NODE2_CGROUP_ROOT}/kubepods"));
            ensure!(under_node2 == on_node2 && (on_node2 || path.starts_with("/kubepods")), "{pod} cgroup {path}");
        }
    }

    // A Service whose only endpoint is on node 2 answers a pod on node 1 (ClusterIP) and the host (NodePort).
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web-2}\nspec:\n  type: NodePort\n  selector: {app: web-2}\n  ports: [{port: 80, targetPort: 8080}]\n";
    apply_yaml(&client, n, service).await?;
    let svc = Api::<Service>::namespaced(client.clone(), n).get("web-2").await?;
    let spec = svc.spec.context("service without spec")?;
    let cluster_ip = spec.cluster_ip.context("service without clusterIP")?;
    let node_port = spec.ports.and_then(|p| p.first()?.node_port).context("service without nodePort")?;
    fetch_in_pod(&cluster, n, "web-1", &format!("http://{cluster_ip}/"), &page2).await?;
    fetch_on_host(&format!("http://127.0.0.1:{node_port}/"), &page2).await?;

    ns.delete().await?;
    Ok(())
}

/// `kubectl port-forward pod/<pod> :8080` (the apiserver streams through the pod's kubelet) answers `want`.
async fn port_forward_answers(cluster: &TestCluster, ns: &str, pod: &str, want: &str) -> Result<()> {
    let mut child = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(["-n", ns, "port-forward", &format!("pod/{pod}"), ":8080"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("spawning kubectl port-forward")?;
    let stdout = child.stdout.take().context("port-forward stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    // "Forwarding from 127.0.0.1:<port> -> 8080"
    let line = tokio::time::timeout(T_NET, lines.next_line())
        .await
        .context("kubectl port-forward printed no address")??
        .context("kubectl port-forward exited")?;
    let local = line
        .split_whitespace()
        .find(|w| w.starts_with("127.0.0.1:"))
        .with_context(|| format!("unexpected port-forward output {line:?}"))?
        .to_owned();
    let fetched = fetch_on_host(&format!("http://{local}/"), want).await;
    child.kill().await.context("stopping kubectl port-forward")?;
    fetched.with_context(|| format!("through kubectl port-forward pod/{pod} ({line})"))
}

#[tokio::test]
#[ignore = "needs the test cluster with two nodes (KV_NODES=2 tests/cluster/up)"]
async fn shared_claim_is_written_on_node_2_and_read_on_node_1_at_the_same_time() -> Result<()> {
    let (_cluster, client, ns) = setup("shared").await?;
    let n = ns.name();
    let node2 = node2_name();
    let claim = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data}\nspec: {storageClassName: shared, accessModes: [ReadWriteMany], resources: {requests: {storage: 16Mi}}}\n";
    apply_yaml(&client, n, claim).await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), n);
    // Immediate binding: bound before any pod exists, to a PV that every test node may mount.
    let pvc = wait_for(&pvcs, "data", Duration::from_secs(60), pvc_bound).await?;
    let pv_name = pvc.spec.and_then(|s| s.volume_name).context("bound claim without volumeName")?;
    let pv = Api::<PersistentVolume>::all(client.clone()).get(&pv_name).await?;
    let pv_spec = pv.spec.context("PV without spec")?;
    ensure!(pv_spec.storage_class_name.as_deref() == Some("shared"), "PV class {:?}", pv_spec.storage_class_name);
    ensure!(
        pv_spec.access_modes.as_deref().is_some_and(|m| m.iter().any(|m| m == "ReadWriteMany")),
        "PV access modes {:?}",
        pv_spec.access_modes
    );
    let affinity = serde_json::to_string(&pv_spec.node_affinity)?;
    ensure!(
        affinity.contains("kubevirt-rs.test/node") && !affinity.contains("kubernetes.io/hostname"),
        "PV pinned to one node: {affinity}"
    );

    // The reader on node 1 mounts the claim and waits for the file while the writer on node 2 has it mounted too.
    let mounts = "[{name: data, mountPath: /data}]";
    let volumes = "volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]";
    let reader = pinned_pod(
        "reader",
        NODE1,
        "{}",
        "Never",
        "for i in $(seq 1 60); do if [ -f /data/done ]; then echo \"$(cat /data/file) read-on-$NODE\" > /dev/termination-log; exit 0; fi; sleep 1; done; echo no file > /dev/termination-log; exit 1",
        mounts,
        volumes,
    );
    let writer = pinned_pod(
        "writer",
        &node2,
        "{}",
        "Never",
        "set -e; echo written-on-$NODE > /data/file; sync; touch /data/done",
        mounts,
        volumes,
    );
    apply_yaml(&client, n, &reader).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), n);
    wait_for(&pods, "reader", T_POD, pod_running).await?;
    apply_yaml(&client, n, &writer).await?;

    let written = wait_for(&pods, "writer", T_POD, pod_finished).await?;
    ensure!(node_of(&written) == Some(node2.as_str()), "writer on {:?}", node_of(&written));
    let term = terminated(&written)?;
    ensure!(term.exit_code == 0, "writer failed: {term:?}");
    let read = wait_for(&pods, "reader", T_POD, pod_finished).await?;
    ensure!(node_of(&read) == Some(NODE1), "reader on {:?}", node_of(&read));
    let term = terminated(&read)?;
    let want = format!("written-on-{node2} read-on-{NODE1}\n");
    ensure!(term.exit_code == 0 && term.message.as_deref() == Some(want.as_str()), "reader: {term:?}");
    ns.delete().await?;
    Ok(())
}
