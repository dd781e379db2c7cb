//! Tests against the real test cluster (etcd + kube-apiserver + kube-controller-manager + kube-scheduler + a real
//! kubelet with containerd/runc + the local provisioner). `#[ignore]`d: run them after `tests/cluster/up` with
//! `cargo test -p kube-test-support --test cluster -- --ignored`. They start the cluster themselves when it is
//! not up, and fail (never skip) when it cannot be started.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, ContainerStateTerminated, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, ResourceExt};
use kube_test_support::{TestCluster, TestNamespace, apply_yaml, poll_until, test_image, wait_for};

const T_POD: Duration = Duration::from_secs(90);

/// The cluster, an admin client and a fresh namespace `<prefix>-…`.
async fn setup(prefix: &str) -> Result<(TestCluster, Client, TestNamespace)> {
    let cluster = TestCluster::start_or_reuse().await?;
    let client = cluster.client().await?;
    let ns = TestNamespace::create(&client, prefix).await?;
    Ok((cluster, client, ns))
}

/// A pod `name` whose one container `main` runs `script` with `sh -c` in `image`. `container` and `spec` are further
/// YAML lines of the container and of the pod spec (written unindented).
fn sh_pod(name: &str, image: &str, restart: &str, script: &str, container: &str, spec: &str) -> String {
    let indent = |yaml: &str, by: &str| yaml.lines().map(|l| format!("{by}{l}\n")).collect::<String>();
    let script = serde_json::Value::from(script);
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  restartPolicy: {restart}\n  containers:\n  - name: main\n    image: {image}\n    command: [sh, -c, {script}]\n{}{}",
        indent(container, "    "),
        indent(spec, "  ")
    )
}

/// A ServiceAccount `sa` with a Role `pod-reader` that allows `verbs` on pods, bound by RoleBinding `binding`.
fn pod_reader_account(sa: &str, verbs: &str, binding: &str) -> String {
    format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {sa}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: pod-reader}}
rules:
- {{apiGroups: [""], resources: [pods], verbs: [{verbs}]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {binding}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader}}
subjects:
- {{kind: ServiceAccount, name: {sa}}}
"#
    )
}

/// A PersistentVolumeClaim `name` with `spec` (flow YAML).
fn claim(name: &str, spec: &str) -> String {
    format!("apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec: {spec}\n")
}

/// Waits (at most `T_POD`) until pod `name` finished; returns it and the terminated state of its container `main`.
async fn run_to_end(pods: &Api<Pod>, name: &str) -> Result<(Pod, ContainerStateTerminated)> {
    let pod = wait_for(pods, name, T_POD, pod_finished).await?;
    let term = terminated(&pod, "main")?;
    Ok((pod, term))
}

fn pod_finished(p: Option<&Pod>) -> bool {
    matches!(phase(p).as_deref(), Some("Succeeded" | "Failed"))
}

fn phase(p: Option<&Pod>) -> Option<String> {
    p.and_then(|p| p.status.as_ref()).and_then(|s| s.phase.clone())
}

fn pod_running(p: Option<&Pod>) -> bool {
    phase(p).as_deref() == Some("Running")
}

fn pvc_bound(p: Option<&PersistentVolumeClaim>) -> bool {
    p.and_then(|p| p.status.as_ref()).and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn kubectl_ok(cluster: &TestCluster, args: &[&str]) -> Result<String> {
    let out = cluster.kubectl(args)?;
    ensure!(out.status.success(), "kubectl {args:?} failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn kubectl_version_namespaces_and_rbac() -> Result<()> {
    let (cluster, client, ns) = setup("rbac").await?;

    let version = kubectl_ok(&cluster, &["version", "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&version)?;
    let server = v["serverVersion"]["gitVersion"].as_str().unwrap_or_default();
    ensure!(server.starts_with("v1.33."), "unexpected server version {server:?} in {version}");

    let namespaces = kubectl_ok(&cluster, &["get", "namespaces", "-o", "name"])?;
    for ns in ["namespace/default", "namespace/kube-system", "namespace/kube-public"] {
        ensure!(namespaces.lines().any(|l| l == ns), "{ns} missing from {namespaces}");
    }

    // A ServiceAccount with a Role that only allows reading pods.
    let n = ns.name();
    apply_yaml(&client, n, &pod_reader_account("reader", "get, list, watch", "reader-pod-reader")).await?;
    let token = kubectl_ok(&cluster, &["-n", n, "create", "token", "reader", "--duration=10m"])?;
    let ca = kube_test_support::cluster_dir().join("pki/ca.crt");
    let server_url =
        kubectl_ok(&cluster, &["config", "view", "--minify", "-o", "jsonpath={.clusters[0].cluster.server}"])?;
    let dir = tempfile::tempdir()?;
    let sa_kubeconfig = dir.path().join("reader.kubeconfig");
    std::fs::write(
        &sa_kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server_url}\", certificate-authority: \"{}\"}}\n\
             users:\n- name: reader\n  user: {{token: \"{}\"}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: reader, namespace: {n}}}\ncurrent-context: c\n",
            ca.display(),
            token.trim()
        ),
    )?;
    let as_reader = |args: &[&str]| -> Result<std::process::Output> {
        Ok(std::process::Command::new("kubectl").arg("--kubeconfig").arg(&sa_kubeconfig).args(args).output()?)
    };
    let allowed = as_reader(&["get", "pods"])?;
    ensure!(allowed.status.success(), "reader may list pods: {}", String::from_utf8_lossy(&allowed.stderr));
    for denied in [
        vec!["get", "secrets"],
        vec!["create", "configmap", "x", "--from-literal=a=b"],
        vec!["delete", "pod", "any-pod"],
        vec!["get", "pods", "-n", "kube-system"],
    ] {
        let out = as_reader(&denied)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && err.to_lowercase().contains("forbidden"),
            "reader must be refused {denied:?}: {err}"
        );
    }
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn pod_runs_to_completion_with_termination_message() -> Result<()> {
    let (_cluster, client, ns) = setup("pod").await?;
    let image = test_image("busybox");
    let pod_name = "env:\n- name: POD_NAME\n  valueFrom: {fieldRef: {fieldPath: metadata.name}}";
    let yaml = [
        sh_pod("ok", &image, "Never", r#"echo "all good from $POD_NAME" > /dev/termination-log; exit 0"#, pod_name, ""),
        sh_pod("fails", &image, "Never", r#"echo "disk on fire" > /dev/termination-log; exit 42"#, "", ""),
    ]
    .join("---\n");
    apply_yaml(&client, ns.name(), &yaml).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());

    let (ok, term) = run_to_end(&pods, "ok").await?;
    ensure!(phase(Some(&ok)).as_deref() == Some("Succeeded"), "pod ok: {:?}", ok.status);
    ensure!(term.exit_code == 0, "exit code {}", term.exit_code);
    ensure!(term.message.as_deref() == Some("all good from ok\n"), "termination message {:?}", term.message);
    // Scheduled by the real scheduler to one of the cluster's nodes (`localhost`, and node 2 with KV_NODES=2).
    let node = ok.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    ensure!(kube_test_support::ready_nodes(&client).await?.contains(&node), "scheduled to a test node: {node:?}");

    let (failed, term) = run_to_end(&pods, "fails").await?;
    ensure!(phase(Some(&failed)).as_deref() == Some("Failed"), "pod fails: {:?}", failed.status);
    ensure!(term.exit_code == 42, "exit code {}", term.exit_code);
    ensure!(term.message.as_deref() == Some("disk on fire\n"), "termination message {:?}", term.message);
    ns.delete().await?;
    Ok(())
}

fn terminated(pod: &Pod, container: &str) -> Result<ContainerStateTerminated> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.clone())
        .with_context(|| format!("container {container} not terminated: {:?}", pod.status))
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn failing_pod_restarts_under_on_failure() -> Result<()> {
    let (_cluster, client, ns) = setup("restart").await?;
    // Fails (exit 7) on the first two runs, succeeds on the third; the counter survives restarts in an emptyDir.
    let flaky = sh_pod(
        "flaky",
        &test_image("busybox"),
        "OnFailure",
        r#"n=$(cat /work/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /work/n; echo "run $n" > /dev/termination-log; [ $n -ge 3 ] || exit 7"#,
        "volumeMounts: [{name: work, mountPath: /work}]",
        "volumes: [{name: work, emptyDir: {}}]",
    );
    apply_yaml(&client, ns.name(), &flaky).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    // While it crash-loops, the kubelet reports the failed run as lastState (a finished pod's status drops it).
    let restarted = |p: Option<&Pod>| {
        p.and_then(|p| p.status.as_ref())
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .is_some_and(|c| {
                c.restart_count >= 1
                    && c.last_state.as_ref().and_then(|s| s.terminated.as_ref()).is_some_and(|t| {
                        t.exit_code == 7 && t.message.as_deref().is_some_and(|m| m.starts_with("run "))
                    })
            })
    };
    wait_for(&pods, "flaky", Duration::from_secs(90), restarted).await?;
    // Kubelet back-off: 10 s, then 20 s.
    let pod = wait_for(&pods, "flaky", Duration::from_secs(150), pod_finished).await?;
    ensure!(phase(Some(&pod)).as_deref() == Some("Succeeded"), "flaky: {:?}", pod.status);
    let cs = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .context("no container status")?;
    ensure!(cs.restart_count == 2, "restart count {}", cs.restart_count);
    let term = terminated(&pod, "main")?;
    ensure!(term.exit_code == 0 && term.message.as_deref() == Some("run 3\n"), "final state {term:?}");
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn filesystem_and_block_pvcs_bind_and_are_usable() -> Result<()> {
    let (_cluster, client, ns) = setup("pvc").await?;
    let image = test_image("busybox");
    let claims = [
        claim("fs", "{storageClassName: local, accessModes: [ReadWriteOnce], resources: {requests: {storage: 64Mi}}}"),
        claim(
            "shared",
            "{storageClassName: local, accessModes: [ReadWriteMany], resources: {requests: {storage: 16Mi}}}",
        ),
        claim(
            "blk",
            "{storageClassName: local, accessModes: [ReadWriteOnce], volumeMode: Block, resources: {requests: {storage: 32Mi}}}",
        ),
    ];
    apply_yaml(&client, ns.name(), &claims.join("---\n")).await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns.name());
    // Immediate binding: all three bind before any pod exists.
    let mut pv_names = Vec::new();
    for name in ["fs", "shared", "blk"] {
        let pvc = wait_for(&pvcs, name, Duration::from_secs(60), pvc_bound).await?;
        pv_names.push(pvc.spec.and_then(|s| s.volume_name).context("bound pvc without volumeName")?);
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let blk_pv = pvs.get(&pv_names[2]).await?;
    ensure!(
        blk_pv.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
        "block PV has volumeMode Block"
    );

    // Both pods use all three claims: the block one as device /dev/xvdb.
    let volumes = "volumes:\n- {name: fs, persistentVolumeClaim: {claimName: fs}}\n- {name: shared, persistentVolumeClaim: {claimName: shared}}\n- {name: blk, persistentVolumeClaim: {claimName: blk}}";
    let device = "volumeDevices: [{name: blk, devicePath: /dev/xvdb}]";
    let writer = sh_pod(
        "writer",
        &image,
        "Never",
        "set -e; echo persisted > /data/file; echo shared > /shared/file; test -b /dev/xvdb; printf BLOCKDATA | dd of=/dev/xvdb bs=512 conv=sync; sync; blockdev --getsize64 /dev/xvdb > /dev/termination-log",
        &format!("volumeMounts: [{{name: fs, mountPath: /data}}, {{name: shared, mountPath: /shared}}]\n{device}"),
        volumes,
    );
    apply_yaml(&client, ns.name(), &writer).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let (_, term) = run_to_end(&pods, "writer").await?;
    ensure!(term.exit_code == 0, "writer failed: {term:?}");
    ensure!(term.message.as_deref() == Some(&*format!("{}\n", 32 << 20)), "block device size {:?}", term.message);

    // A second pod sees what the first wrote, on all three volumes.
    let reader = sh_pod(
        "reader",
        &image,
        "Never",
        "set -e; grep -qx persisted /data/file; grep -qx shared /shared/file; head -c 9 /dev/xvdb > /dev/termination-log",
        &format!(
            "volumeMounts: [{{name: fs, mountPath: /data, readOnly: true}}, {{name: shared, mountPath: /shared}}]\n{device}"
        ),
        volumes,
    );
    apply_yaml(&client, ns.name(), &reader).await?;
    let (_, term) = run_to_end(&pods, "reader").await?;
    ensure!(term.exit_code == 0 && term.message.as_deref() == Some("BLOCKDATA"), "reader: {term:?}");

    // Releasing the claims deletes the volumes (reclaim policy Delete) and their backing storage.
    for p in ["writer", "reader"] {
        pods.delete(p, &DeleteParams::default()).await?;
    }
    for c in ["fs", "shared", "blk"] {
        pvcs.delete(c, &DeleteParams::default()).await?;
    }
    for pv in &pv_names {
        let pvs = pvs.clone();
        poll_until(&format!("PV {pv} deleted after release"), Duration::from_secs(60), || {
            let pvs = pvs.clone();
            async move { matches!(pvs.get_opt(pv).await, Ok(None)).then_some(()) }
        })
        .await?;
        let backing = kube_test_support::cluster_dir().join("storage").join(pv);
        ensure!(!backing.exists(), "{} still exists", backing.display());
    }
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn wait_for_first_consumer_binds_only_when_a_pod_is_scheduled() -> Result<()> {
    let (_cluster, client, ns) = setup("wffc").await?;
    let late = claim(
        "late",
        "{storageClassName: local-wffc, accessModes: [ReadWriteOnce], resources: {requests: {storage: 16Mi}}}",
    );
    apply_yaml(&client, ns.name(), &late).await?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns.name());
    // KCM's binder reports that it waits for a consumer; give it time to (wrongly) bind meanwhile.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns.name());
    poll_until("WaitForFirstConsumer event", Duration::from_secs(30), || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.iter().any(|e| e.reason.as_deref() == Some("WaitForFirstConsumer")).then_some(())
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pvc = pvcs.get("late").await?;
    ensure!(!pvc_bound(Some(&pvc)), "WFFC claim bound without a consumer: {:?}", pvc.status);
    ensure!(pvc.spec.as_ref().and_then(|s| s.volume_name.as_ref()).is_none(), "volumeName set without a consumer");

    let consumer = sh_pod(
        "consumer",
        &test_image("busybox"),
        "Never",
        "echo used > /data/x && cat /data/x > /dev/termination-log",
        "volumeMounts: [{name: d, mountPath: /data}]",
        "volumes: [{name: d, persistentVolumeClaim: {claimName: late}}]",
    );
    apply_yaml(&client, ns.name(), &consumer).await?;
    let pvc = wait_for(&pvcs, "late", Duration::from_secs(60), pvc_bound).await?;
    let selected = pvc.annotations().get("volume.kubernetes.io/selected-node").cloned();
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let (pod, term) = run_to_end(&pods, "consumer").await?;
    // The claim was provisioned for the node the scheduler chose for its consumer.
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
    ensure!(selected.is_some() && selected == node, "selected-node annotation {selected:?}, consumer on {node:?}");
    ensure!(term.exit_code == 0 && term.message.as_deref() == Some("used\n"), "consumer: {term:?}");
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn deleting_an_owner_garbage_collects_dependents() -> Result<()> {
    let (_cluster, client, ns) = setup("gc").await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns.name());
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "owner"}, "data": {"role": "owner"}
            }))?,
        )
        .await?;
    let uid = owner.uid().context("owner without uid")?;
    let owner_ref = serde_json::json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid, "controller": true,
        "blockOwnerDeletion": true
    }]);
    for name in ["dep-a", "dep-b"] {
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "ownerReferences": owner_ref}
            }))?,
        )
        .await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({
            "metadata": {"name": "dep-pod", "ownerReferences": owner_ref},
            "spec": {"containers": [{"name": "main", "image": test_image("busybox"), "command": ["sleep", "3600"]}],
                     "terminationGracePeriodSeconds": 1}
        }))?,
    )
    .await?;
    // An unrelated object must survive.
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(serde_json::json!({"metadata": {"name": "bystander"}}))?,
    )
    .await?;

    cms.delete("owner", &DeleteParams::background()).await?;
    poll_until("dependents garbage-collected", Duration::from_secs(60), || {
        let (cms, pods) = (cms.clone(), pods.clone());
        async move {
            let a = cms.get_opt("dep-a").await.ok()?;
            let b = cms.get_opt("dep-b").await.ok()?;
            let p = pods.get_opt("dep-pod").await.ok()?;
            (a.is_none() && b.is_none() && p.is_none()).then_some(())
        }
    })
    .await?;
    if cms.get_opt("bystander").await?.is_none() {
        bail!("garbage collector deleted an object without owner");
    }

    // Foreground deletion: the owner stays (with the foregroundDeletion finalizer) until its dependent is gone.
    let owner2 = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "metadata": {"name": "owner2"}
            }))?,
        )
        .await?;
    cms.create(&PostParams::default(), &serde_json::from_value(serde_json::json!({
        "metadata": {"name": "dep-c", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner2", "uid": owner2.uid(), "blockOwnerDeletion": true
        }]}
    }))?).await?;
    cms.delete("owner2", &DeleteParams::foreground()).await?;
    poll_until("owner2 and dep-c deleted", Duration::from_secs(60), || {
        let cms = cms.clone();
        async move {
            (cms.get_opt("owner2").await.ok()?.is_none() && cms.get_opt("dep-c").await.ok()?.is_none()).then_some(())
        }
    })
    .await?;
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn aggregation_layer_is_configured() -> Result<()> {
    let cluster = TestCluster::start_or_reuse().await?;
    let client = cluster.client().await?;
    // The apiserver publishes its front-proxy (requestheader) settings for aggregated API servers here.
    let cms: Api<ConfigMap> = Api::namespaced(client, "kube-system");
    let cm = cms.get("extension-apiserver-authentication").await?;
    let data = cm.data.unwrap_or_default();
    for key in [
        "client-ca-file",
        "requestheader-client-ca-file",
        "requestheader-allowed-names",
        "requestheader-username-headers",
        "requestheader-group-headers",
        "requestheader-extra-headers-prefix",
    ] {
        ensure!(data.get(key).is_some_and(|v| !v.is_empty()), "{key} missing from extension-apiserver-authentication");
    }
    ensure!(
        data.get("requestheader-allowed-names").is_some_and(|v| v.contains("front-proxy-client")),
        "allowed names: {:?}",
        data.get("requestheader-allowed-names")
    );
    // The aggregator itself serves APIServices.
    let out =
        kubectl_ok(&cluster, &["get", "apiservices", "v1.apps", "-o", "jsonpath={.status.conditions[0].status}"])?;
    ensure!(out == "True", "v1.apps APIService available: {out:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn wait_for_timeout_reports_the_object_and_its_events() -> Result<()> {
    let (_cluster, client, ns) = setup("wait").await?;
    // Unschedulable: no node carries this label, so the scheduler records a FailedScheduling event.
    apply_yaml(
        &client,
        ns.name(),
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: stuck}}
spec:
  nodeSelector: {{kubevirt-rs.test/no-such-label: "x"}}
  containers: [{{name: main, image: "{}"}}]
"#,
            test_image("busybox")
        ),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let started = std::time::Instant::now();
    let err = match wait_for(&pods, "stuck", Duration::from_secs(5), pod_finished).await {
        Ok(p) => bail!("unschedulable pod finished: {:?}", p.status),
        Err(e) => e.to_string(),
    };
    ensure!(started.elapsed() < Duration::from_secs(15), "timeout not honoured: {:?}", started.elapsed());
    ensure!(err.contains("timed out after 5s waiting for Pod stuck"), "{err}");
    ensure!(err.contains("name: stuck") && err.contains("kubevirt-rs.test/no-such-label"), "object not printed: {err}");
    ensure!(err.contains("FailedScheduling"), "events not printed: {err}");
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn pod_runs_our_own_binary_from_a_locally_built_image() -> Result<()> {
    let (_cluster, client, ns) = setup("ownbin").await?;
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_local-provisioner"));
    let image = kube_test_support::push_image_from_binaries("provisioner-under-test:1", &[bin])?;
    ensure!(image.ends_with("/kubevirt-rs/provisioner-under-test:1"), "image ref {image}");
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\nstringData: {token: s3cr3t}\n---\n";
    let own = sh_pod(
        "own",
        &image,
        "Never",
        r#"local-provisioner --help | head -1 > /dev/termination-log; echo "$TOKEN $(cat /secret/token)" >> /dev/termination-log"#,
        "imagePullPolicy: Always\nenv:\n- name: TOKEN\n  valueFrom: {secretKeyRef: {name: creds, key: token}}\nvolumeMounts: [{name: s, mountPath: /secret}]",
        "volumes: [{name: s, secret: {secretName: creds}}]",
    );
    apply_yaml(&client, ns.name(), &(secret.to_owned() + &own)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let (_, term) = run_to_end(&pods, "own").await?;
    ensure!(
        term.exit_code == 0
            && term.message.as_deref()
                == Some("Local PV provisioner for the kubevirt-rs test cluster\ns3cr3t s3cr3t\n"),
        "{term:?}"
    );
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn pods_reach_the_apiserver_in_cluster_and_host_loopback_services() -> Result<()> {
    let (_cluster, client, ns) = setup("podnet").await?;
    let registry = kube_test_support::pod_registry();
    let script = format!(
        r#"set -e
sa=/var/run/secrets/kubernetes.io/serviceaccount
wget -q -O /tmp/me --no-check-certificate --header "Authorization: Bearer $(cat $sa/token)" \
  "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$NS/pods/client"
grep -q '"serviceAccountName": *"lister"' /tmp/me
wget -q -O /tmp/reg "http://{registry}/v2/"
echo "api-ok registry=$(cat /tmp/reg)" > /dev/termination-log
"#
    );
    let pod = sh_pod(
        "client",
        &test_image("busybox"),
        "Never",
        &script,
        "env:\n- name: NS\n  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}",
        "serviceAccountName: lister",
    );
    apply_yaml(&client, ns.name(), &(pod_reader_account("lister", "get", "lister") + "---\n" + &pod)).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let (_, term) = run_to_end(&pods, "client").await?;
    ensure!(term.exit_code == 0 && term.message.as_deref() == Some("api-ok registry={}\n"), "{term:?}");
    ns.delete().await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn services_route_through_kube_proxy_to_their_pods() -> Result<()> {
    let (_cluster, client, ns) = setup("svc").await?;
    // A Service first, so that the client pod gets its WEB_SERVICE_HOST/PORT variables, as pods do.
    let service = "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  type: NodePort\n  selector: {app: web}\n  ports: [{port: 8080, targetPort: 80}]\n";
    let server = sh_pod(
        "server",
        &test_image("busybox"),
        "Never",
        "mkdir -p /tmp/www && echo served-by-$HOSTNAME > /tmp/www/index.html && exec httpd -f -p 80 -h /tmp/www",
        "",
        "",
    )
    .replace("metadata: {name: server}", "metadata: {name: server, labels: {app: web}}");
    let client_script = r#"for i in $(seq 1 60); do
  if timeout 2 wget -q -O /tmp/page "http://$WEB_SERVICE_HOST:$WEB_SERVICE_PORT/"; then
    cat /tmp/page > /dev/termination-log; exit 0
  fi
  sleep 1
done
echo "no answer from $WEB_SERVICE_HOST:$WEB_SERVICE_PORT" > /dev/termination-log; exit 1
"#;
    let client_pod = sh_pod("client", &test_image("busybox"), "Never", client_script, "", "");
    apply_yaml(&client, ns.name(), &format!("{service}---\n{server}")).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    wait_for(&pods, "server", T_POD, pod_running).await?;
    apply_yaml(&client, ns.name(), &client_pod).await?;
    let (_, term) = run_to_end(&pods, "client").await?;
    ensure!(
        term.exit_code == 0 && term.message.as_deref() == Some("served-by-server\n"),
        "through the ClusterIP: {term:?}"
    );
    // The NodePort answers on the node's loopback too (kube-proxy's localhost NodePorts).
    let services: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), ns.name());
    let svc = services.get("web").await?;
    let node_port = svc.spec.and_then(|s| s.ports?.first()?.node_port).context("no nodePort")?;
    let out = std::process::Command::new("curl")
        .args(["-fsS", "--max-time", "5", &format!("http://127.0.0.1:{node_port}/")])
        .output()
        .context("curl")?;
    ensure!(out.stdout == b"served-by-server\n", "NodePort {node_port}: {out:?}");
    ns.delete().await?;
    Ok(())
}
