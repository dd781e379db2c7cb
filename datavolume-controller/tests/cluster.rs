//! DataVolumes end to end on the real test cluster (issue 5): `kubectl apply` of CDI YAML → our controller
//! (deployed from `deploy/`, two replicas with leader election) → PVC → importer pod → bytes in the volume, with
//! CDI's phases, progress, conditions and events. Sources are the real peers of the import tests (nginx,
//! s3s-fs, docker-registry, started by `tests/infra/*.sh up`), reached from pods through the cluster's NAT.
//! `#[ignore]`d like every cluster test; `scripts/test.sh` runs them with
//! `cargo test -p datavolume-controller --test cluster -- --ignored --test-threads=4` (after
//! `cargo build --workspace --bins`: the stack is deployed from this workspace's binaries).

use std::time::Duration;

use cdi_test_support::{
    self as cdi, compare_image, corpus, datavolume_yaml as dv_yaml, dv_image_path, dv_phase as phase, wait_dv,
    wait_dv_phase,
};
use crds::cdi::datavolume::{ConditionStatus, ConditionType, DataVolume, DataVolumeCondition, DataVolumePhase};
use crds::cdi::operator::CDI;
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};
use kube_test_support::{
    Error, POD_GATEWAY, Result, TestCluster, TestNamespace, apply_yaml, host_url, poll_until, repo_root, test_image,
};

/// The import tests' nginx (`tests/infra/import-env.sh`).
const NGINX: u16 = 18080;
/// s3s-fs (`tests/infra/s3-env.sh`).
const S3: u16 = 19002;
/// The plain registry of `tests/infra/registry-env.sh`.
const REGISTRY: u16 = 19500;
const IMPORT_TIMEOUT: Duration = Duration::from_secs(420);

async fn setup(prefix: &str) -> Result<(TestCluster, Client, TestNamespace)> {
    let cluster = TestCluster::start_or_reuse().await?;
    cdi::deploy_cdi(&cluster).await?;
    let client = cluster.client().await?;
    let ns = TestNamespace::create(&client, prefix).await?;
    Ok((cluster, client, ns))
}

/// `storage:` of a DataVolume requesting `size`.
fn storage_request(size: &str) -> String {
    format!("storage: {{resources: {{requests: {{storage: {size}}}}}}}")
}

fn http_source(url: &str) -> String {
    format!("    http:\n      url: \"{url}\"")
}

/// A DataVolume importing `path` from the import tests' nginx.
fn http_dv(name: &str, path: &str, storage: &str) -> String {
    dv_yaml(name, &http_source(&host_url(NGINX, path)), storage)
}

/// Applies `yaml` in namespace `ns` and returns the namespace's DataVolumes.
async fn apply_dvs(client: &Client, ns: &str, yaml: &str) -> Result<Api<DataVolume>> {
    apply_yaml(client, ns, yaml).await?;
    Ok(Api::namespaced(client.clone(), ns))
}

/// The CDIConfig that lists the registry peer (plain HTTP) as insecure.
fn insecure_registry_config() -> String {
    format!(
        "apiVersion: cdi.kubevirt.io/v1beta1\nkind: CDIConfig\nmetadata: {{name: config}}\nspec:\n  insecureRegistries: [\"{POD_GATEWAY}:{REGISTRY}\"]\n"
    )
}

fn cond(dv: &DataVolume, t: ConditionType) -> Option<DataVolumeCondition> {
    dv.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == t).cloned()
}

async fn wait_succeeded(api: &Api<DataVolume>, name: &str) -> Result<DataVolume> {
    wait_dv_phase(api, name, DataVolumePhase::Succeeded, IMPORT_TIMEOUT).await
}

/// Waits until no pod matching `labels` (all pods when empty) is left in `pods`' namespace.
async fn wait_pods_gone(pods: &Api<Pod>, labels: &str, what: &str) -> Result<()> {
    poll_until(what, Duration::from_secs(60), || async {
        pods.list(&ListParams::default().labels(labels)).await.ok().filter(|l| l.items.is_empty()).map(|_| ())
    })
    .await
}

async fn events_of(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().fields(&format!("involvedObject.name={name}"));
    api.list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

async fn assert_volume_matches(client: &Client, ns: &str, name: &str, source: &str) -> Result<()> {
    cdi::assert_volume_matches(client, ns, name, &corpus(source)).await
}

fn assert_success_status(dv: &DataVolume) {
    let st = dv.status.clone().unwrap_or_default();
    assert_eq!(st.progress.as_deref(), Some("100.0%"));
    assert_eq!(st.claim_name.as_deref(), Some(dv.name_any().as_str()));
    let ready = cond(dv, ConditionType::Ready).unwrap_or_else(|| panic!("no Ready condition"));
    assert_eq!(ready.status, ConditionStatus::True);
    let bound = cond(dv, ConditionType::Bound).unwrap_or_else(|| panic!("no Bound condition"));
    assert_eq!((bound.status, bound.reason.as_deref()), (ConditionStatus::True, Some("Bound")));
    assert_eq!(bound.message, Some(format!("PVC {} Bound", dv.name_any())));
    let running = cond(dv, ConditionType::Running).unwrap_or_else(|| panic!("no Running condition"));
    assert_eq!((running.status, running.reason.as_deref()), (ConditionStatus::False, Some("Completed")));
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn http_qcow2_raw_xz_and_iso_import_exactly_with_cdi_status() -> Result<()> {
    let (cluster, client, ns) = setup("dv-http").await?;
    // (DV, served file, the uncompressed image qemu-img converts for the expected bytes)
    let cases = [
        ("qcow2", "q2-v3.qcow2", "q2-v3.qcow2"),
        ("rawxz", "base.raw.xz", "base.raw"),
        ("iso", "base.iso", "base.iso"),
    ];
    let yaml: String = cases
        .iter()
        .map(|(name, file, _)| http_dv(name, &format!("corpus/{file}"), &storage_request("64Mi")) + "---\n")
        .collect();
    let api = apply_dvs(&client, ns.name(), &yaml).await?;
    for (name, _, file) in cases {
        let dv = wait_succeeded(&api, name).await?;
        assert_success_status(&dv);
        assert_eq!(cond(&dv, ConditionType::Running).and_then(|c| c.message).as_deref(), Some("Import Complete"));
        assert_volume_matches(&client, ns.name(), name, file).await?;
        let events = events_of(&client, ns.name(), name).await;
        for (reason, msg) in [
            ("ImportScheduled", format!("Import into {name} scheduled")),
            ("ImportSucceeded", format!("Successfully imported into PVC {name}")),
        ] {
            assert!(events.iter().any(|(r, m)| r == reason && *m == msg), "{name}: no {reason} event in {events:?}");
        }
        // The PVC carries CDI's annotations, labels and owner.
        let pvc: PersistentVolumeClaim = Api::namespaced(client.clone(), ns.name()).get(name).await?;
        let a = pvc.annotations();
        assert_eq!(a.get("cdi.kubevirt.io/storage.import.source").map(String::as_str), Some("http"));
        assert_eq!(a.get("cdi.kubevirt.io/storage.pod.phase").map(String::as_str), Some("Succeeded"));
        assert_eq!(pvc.labels().get("app").map(String::as_str), Some("containerized-data-importer"));
        assert_eq!(cdi::owner_dv(&pvc).as_deref(), Some(name));
    }
    // The worker pods are gone after success.
    wait_pods_gone(&Api::namespaced(client.clone(), ns.name()), "", "importer pods deleted").await?;
    // kubectl shows CDI's printer columns.
    let out = cluster.kubectl(["get", "dv", "-n", ns.name()])?;
    let text = String::from_utf8_lossy(&out.stdout);
    let header: Vec<&str> = text.lines().next().unwrap_or_default().split_whitespace().collect();
    // CDI's printer columns, then ours (the transfer detail: here how each import ended).
    assert_eq!(header, ["NAME", "PHASE", "PROGRESS", "RESTARTS", "AGE", "TRANSFER"], "{text}");
    assert!(text.lines().skip(1).all(|l| l.ends_with("Import Complete")), "{text}");
    assert!(text.lines().skip(1).all(|l| l.contains("Succeeded") && l.contains("100.0%")), "{text}");
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn failures_are_reported_as_cdi_does() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-fail").await?;
    let storage = storage_request("64Mi");
    let bad_sum = "sha256:0000000000000000000000000000000000000000000000000000000000000000";
    let yaml = [
        http_dv("missing", "corpus/does-not-exist.img", &storage),
        dv_yaml(
            "badsum",
            &format!("    http:\n      url: \"{}\"\n      checksum: \"{bad_sum}\"", host_url(NGINX, "corpus/tiny.raw")),
            &storage,
        ),
        http_dv(
            "small",
            "corpus/base.raw",
            "pvc: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 2Mi}}}",
        ),
    ]
    .join("---\n");
    let api = apply_dvs(&client, ns.name(), &yaml).await?;

    // 404: Running=False/Error with the importer's message, restarts grow, never Failed.
    let dv = wait_dv(&api, "missing", IMPORT_TIMEOUT, |d| {
        d.status.as_ref().and_then(|s| s.restart_count).unwrap_or(0) >= 1
            && cond(d, ConditionType::Running)
                .is_some_and(|c| c.status == ConditionStatus::False && c.reason.as_deref() == Some("Error"))
    })
    .await?;
    let running = cond(&dv, ConditionType::Running).unwrap_or_else(|| panic!("no Running"));
    let msg = running.message.unwrap_or_default();
    assert!(msg.starts_with("Unable to connect to http data source: "), "{msg}");
    assert!(msg.contains("404"), "{msg}");
    assert_ne!(phase(&dv), Some(DataVolumePhase::Failed));

    // Checksum mismatch: Failed, ChecksumError, and the pod is not recreated.
    let dv = wait_dv_phase(&api, "badsum", DataVolumePhase::Failed, IMPORT_TIMEOUT).await?;
    let running = cond(&dv, ConditionType::Running).unwrap_or_else(|| panic!("no Running"));
    assert_eq!(running.reason.as_deref(), Some("ChecksumError"));
    assert!(running.message.unwrap_or_default().contains("checksum mismatch"));
    // The event is recorded right after the status update that the wait above saw: poll for it.
    let seen = poll_until("ImportFailed event", Duration::from_secs(30), || async {
        events_of(&client, ns.name(), "badsum").await.iter().any(|(r, _)| r == "ImportFailed").then_some(())
    })
    .await;
    assert!(seen.is_ok(), "{:?}", events_of(&client, ns.name(), "badsum").await);

    // Too small: CDI's simplified message.
    let dv = wait_dv(&api, "small", IMPORT_TIMEOUT, |d| {
        cond(d, ConditionType::Running)
            .is_some_and(|c| c.message.as_deref() == Some("DataVolume too small to contain image"))
    })
    .await?;
    assert_ne!(phase(&dv), Some(DataVolumePhase::Failed));

    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pods.get_opt("importer-badsum").await?.is_none(), "the checksum-failed importer must not be recreated");
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn invalid_specs_are_refused_by_the_api_server() -> Result<()> {
    let (cluster, client, ns) = setup("dv-invalid").await?;
    let storage = &storage_request("64Mi");
    let cases = [
        (dv_yaml("a", "    {}", storage), "Missing Data volume source"),
        (dv_yaml("b", "    http: {url: \"http://x/y\"}\n    blank: {}", storage), "Multiple Data volume sources"),
        (dv_yaml("c", "    http: {url: \"ftp://x/y\"}", storage), "Invalid source URL scheme: ftp://x/y"),
        (
            dv_yaml("d", "    http: {url: \"http://x/y\", checksum: \"sha256:12\"}", storage),
            "Invalid checksum format: ",
        ),
        (dv_yaml("e", "    blank: {}", &storage_request("512Ki")), "Storage size must be at least 1MiB"),
        (dv_yaml("f", "    blank: {}", &storage_request("\"0\"")), "Storage size can't be equal or less than zero"),
        (dv_yaml("g", "    blank: {}", "storage: {}"), "Storage size is missing"),
        (
            format!("{}  contentType: archive\n", dv_yaml("h", "    blank: {}", storage)),
            "SourceType cannot be blank and the contentType be archive",
        ),
        (dv_yaml("i", "    gcs: {url: \"gs://b/o\"}", storage), "source gcs is not supported"),
    ];
    for (yaml, want) in cases {
        let out = cluster.kubectl_with_manifest(&["create", "-n", ns.name()], &yaml)?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "accepted:\n{yaml}");
        assert!(err.contains(want), "want {want:?}, got {err}");
    }
    // The spec is immutable.
    apply_yaml(&client, ns.name(), &dv_yaml("imm", "    blank: {}", storage)).await?;
    let out = cluster.kubectl([
        "patch",
        "dv",
        "imm",
        "-n",
        ns.name(),
        "--type=merge",
        "-p",
        r#"{"spec":{"preallocation":true}}"#,
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("Cannot update DataVolume Spec"), "{err}");
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn blank_and_block_volumes() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-block").await?;
    let yaml = [
        dv_yaml("blank", "    blank: {}", &storage_request("16Mi")),
        http_dv("blockq", "corpus/q2-v3.qcow2", "storage: {volumeMode: Block, resources: {requests: {storage: 64Mi}}}"),
    ]
    .join("---\n");
    let api = apply_dvs(&client, ns.name(), &yaml).await?;
    let dv = wait_succeeded(&api, "blank").await?;
    assert_success_status(&dv);
    let img = dv_image_path(&client, ns.name(), "blank").await?;
    let meta = std::fs::metadata(&img).map_err(Error::io(format!("stat {}", img.display())))?;
    assert_eq!(meta.len(), 16 << 20, "blank image has the requested usable size");
    let zeros = tempfile::NamedTempFile::new().map_err(Error::io("tempfile"))?;
    assert_eq!(compare_image(&img, zeros.path()), Ok(()));

    let dv = wait_succeeded(&api, "blockq").await?;
    assert_success_status(&dv);
    let dev = dv_image_path(&client, ns.name(), "blockq").await?;
    assert!(dev.starts_with("/dev/"), "{}", dev.display());
    assert_volume_matches(&client, ns.name(), "blockq", "q2-v3.qcow2").await?;
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn wait_for_first_consumer_binds_when_a_consumer_appears() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-wffc").await?;
    let yaml = http_dv(
        "wffc",
        "corpus/tiny.raw",
        "storage: {storageClassName: local-wffc, resources: {requests: {storage: 16Mi}}}",
    );
    let api = apply_dvs(&client, ns.name(), &yaml).await?;
    wait_dv_phase(&api, "wffc", DataVolumePhase::WaitForFirstConsumer, Duration::from_secs(60)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    assert!(pods.get_opt("importer-wffc").await?.is_none(), "no importer before a consumer exists");
    let consumer = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: consumer}}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: c\n    image: {}\n    command: [sh, -c, 'sleep 3600']\n    volumeMounts: [{{name: d, mountPath: /d}}]\n  volumes: [{{name: d, persistentVolumeClaim: {{claimName: wffc}}}}]\n",
        test_image("busybox")
    );
    apply_yaml(&client, ns.name(), &consumer).await?;
    let dv = wait_succeeded(&api, "wffc").await?;
    assert_success_status(&dv);
    assert_volume_matches(&client, ns.name(), "wffc", "tiny.raw").await?;
    pods.delete("consumer", &DeleteParams::default().grace_period(0)).await?;
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn progress_is_reported_and_a_controller_restart_converges_without_duplicates() -> Result<()> {
    let (cluster, client, ns) = setup("dv-progress").await?;
    // nginx serves /slow/ at 100 KiB/s: small.raw (5 MiB) takes ~50 s.
    let api = apply_dvs(&client, ns.name(), &http_dv("slow", "slow/small.raw", &storage_request("16Mi"))).await?;
    let mid = wait_dv(&api, "slow", Duration::from_secs(300), |d| {
        let p = d
            .status
            .as_ref()
            .and_then(|s| s.progress.as_deref())
            .and_then(|p| p.strip_suffix('%'))
            .and_then(|p| p.parse::<f64>().ok());
        phase(d) == Some(DataVolumePhase::ImportInProgress) && p.is_some_and(|p| p > 0.0 && p < 100.0)
    })
    .await?;
    let progress = mid.status.as_ref().and_then(|s| s.progress.clone()).unwrap_or_default();
    assert!(progress.ends_with('%') && progress.split('.').nth(1).is_some_and(|d| d.len() == 3), "{progress}");
    let running = cond(&mid, ConditionType::Running).unwrap_or_else(|| panic!("no Running"));
    assert_eq!((running.status, running.reason.as_deref()), (ConditionStatus::True, Some("Pod is running")));
    let ready = cond(&mid, ConditionType::Ready).unwrap_or_else(|| panic!("no Ready"));
    assert_eq!((ready.status, ready.reason.as_deref()), (ConditionStatus::False, Some("TransferRunning")));
    // Beyond CDI: bytes, rate and time left in the Running message, shown by `kubectl get dv` (Transfer column).
    let detail = wait_dv(&api, "slow", Duration::from_secs(60), |d| {
        cond(d, ConditionType::Running)
            .and_then(|c| c.message)
            .is_some_and(|m| m.starts_with("transferring ") && m.contains(" left"))
    })
    .await?;
    let message = cond(&detail, ConditionType::Running).and_then(|c| c.message).unwrap_or_default();
    assert!(message.contains(" of 5.0 MiB (") && message.contains(" KiB/s, "), "{message}");
    let out = cluster.kubectl(["get", "dv", "slow", "-n", ns.name()])?;
    let table = String::from_utf8_lossy(&out.stdout);
    let header = table.lines().next().unwrap_or_default();
    assert!(header.split_whitespace().eq(["NAME", "PHASE", "PROGRESS", "RESTARTS", "AGE", "TRANSFER"]), "{table}");
    assert!(table.contains("transferring ") && table.contains(" of 5.0 MiB"), "{table}");

    // Kill every controller replica mid-import; the survivors (new pods) must converge on the same importer pod.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let importer_uid = pods.get("importer-slow").await?.uid();
    let cdi_pods: Api<Pod> = Api::namespaced(client.clone(), "cdi");
    let lp = ListParams::default().labels("cdi.kubevirt.io=cdi-deployment");
    for p in cdi_pods.list(&lp).await?.items {
        cdi_pods.delete(&p.name_any(), &DeleteParams::default()).await?;
    }
    let watch_dupes = async {
        loop {
            let list = pods.list(&ListParams::default().labels("cdi.kubevirt.io=importer")).await;
            if let Ok(list) = list {
                assert!(
                    list.items.len() <= 1,
                    "duplicate importer pods: {:?}",
                    list.items.iter().map(ResourceExt::name_any).collect::<Vec<_>>()
                );
                if let Some(p) = list.items.first()
                    && p.metadata.deletion_timestamp.is_none()
                    && phase_of(p) != "Succeeded"
                {
                    assert_eq!(p.uid(), importer_uid, "the importer pod was replaced");
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    let done = wait_succeeded(&api, "slow");
    let dv = tokio::select! {
        d = done => d?,
        () = watch_dupes => unreachable!(),
    };
    assert_success_status(&dv);
    assert_eq!(dv.status.and_then(|s| s.restart_count), Some(0));
    assert_volume_matches(&client, ns.name(), "slow", "small.raw").await?;
    ns.delete().await
}

/// (status, body bytes, Range header) of the nginx access-log lines of GETs whose request line contains `needle`.
fn nginx_gets(needle: &str) -> Vec<(u16, u64, String)> {
    let log = std::fs::read_to_string(repo_root().join("tests/work/nginx/access.log")).unwrap_or_default();
    log.lines()
        .filter(|l| l.contains("\"GET ") && l.contains(needle))
        .map(|l| {
            let mut f = l.split("HTTP/1.1\" ").nth(1).unwrap_or_default().split_whitespace();
            let status = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let bytes = f.next().and_then(|s| s.parse().ok()).unwrap_or(0);
            let range = l.split("range=\"").nth(1).and_then(|r| r.split('"').next()).unwrap_or_default();
            (status, bytes, range.trim_start_matches('-').to_owned())
        })
        .collect()
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn a_killed_importer_pod_resumes_where_its_durable_data_ends() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-resume").await?;
    // Its own qcow2 of 3 MiB data (so the access log tells its requests apart), served at 100 KiB/s by /slow/.
    let name = format!("resume-{}.qcow2", ns.name());
    let source = corpus(&name);
    let raw = corpus(&format!("resume-{}.src", ns.name()));
    let bytes: Vec<u8> = (0..3u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    std::fs::write(&raw, &bytes).map_err(Error::io("writing the resume source"))?;
    let _cleanup = (RemoveOnDrop(source.clone()), RemoveOnDrop(raw.clone()));
    let made = std::process::Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(&raw)
        .arg(&source)
        .status()
        .map_err(Error::io("qemu-img convert"))?;
    assert!(made.success(), "qemu-img convert failed");
    let total = std::fs::metadata(&source).map_err(Error::io("the qcow2's size"))?.len();
    let api =
        apply_dvs(&client, ns.name(), &http_dv("resume", &format!("slow/{name}"), &storage_request("16Mi"))).await?;
    wait_dv(&api, "resume", Duration::from_secs(300), |d| {
        let p = d.status.as_ref().and_then(|s| s.progress.as_deref()).and_then(|p| p.strip_suffix('%'));
        p.and_then(|p| p.parse::<f64>().ok()).is_some_and(|p| p >= 50.0)
    })
    .await?;
    // Killed as an OOM kill or an eviction past its grace period would: no chance to clean up.
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    pods.delete("importer-resume", &DeleteParams::default().grace_period(0)).await?;
    let dv = wait_succeeded(&api, "resume").await?;
    assert_success_status(&dv);
    cdi::assert_volume_matches(&client, ns.name(), "resume", &source).await?;

    // What nginx sent: the killed pod's whole-object GET, then the new pod's one ranged GET from the frontier
    // below which the converter's output was durable, for the rest only (plus bounded reads of the tables).
    let gets = nginx_gets(&name);
    // nginx logs a request when it ends: the killed pod's whole-object GET may come after the new pod's reads.
    let first_bytes = gets.iter().find(|(_, _, r)| r.is_empty()).map_or(0, |g| g.1);
    let resumed: Vec<_> = gets.iter().filter(|(s, _, r)| *s == 206 && r.ends_with('-')).collect();
    assert_eq!(resumed.len(), 1, "{gets:?}");
    let (_, rest, range) = resumed[0];
    let from: u64 = range.trim_start_matches("bytes=").trim_end_matches('-').parse().unwrap_or(0);
    assert!(
        from >= total / 4 && from <= first_bytes,
        "resumed from byte {from} after {first_bytes} were sent: {gets:?}"
    );
    assert_eq!(*rest, total - from, "the resumed pod read only the rest: {gets:?}");
    assert!(*rest < total, "fewer source bytes than a full import: {gets:?}");
    assert_eq!(gets.iter().filter(|(_, _, r)| r.is_empty()).count(), 1, "one whole-object GET: {gets:?}");
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn the_cdi_workloads_placement_reaches_the_importer_pod() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-placement").await?;
    // A CDI object of its own (no operator runs in this suite: it is only read). Its placement fits every node
    // and pod of the other tests running meanwhile.
    let cdis: Api<CDI> = Api::all(client.clone());
    let _ = cdis.delete("placement-test", &DeleteParams::default()).await;
    let cdi_yaml = "apiVersion: cdi.kubevirt.io/v1beta1\nkind: CDI\nmetadata: {name: placement-test}\nspec:\n  \
                    workloads:\n    nodeSelector: {kubernetes.io/os: linux}\n    tolerations:\n    - {key: \
                    kubevirt-rs.test/cdi-workloads, operator: Exists, effect: NoSchedule}\n";
    apply_yaml(&client, ns.name(), cdi_yaml).await?;
    // The controller's watch delivers it in milliseconds.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let api = apply_dvs(&client, ns.name(), &http_dv("placed", "slow/small.raw", &storage_request("16Mi"))).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let pod = poll_until("the importer pod", Duration::from_secs(120), || async {
        pods.get_opt("importer-placed").await.ok().flatten()
    })
    .await?;
    let spec = pod.spec.unwrap_or_default();
    let selector = spec.node_selector.unwrap_or_default();
    assert_eq!(selector.get("kubernetes.io/os").map(String::as_str), Some("linux"), "{selector:?}");
    let tolerated = spec.tolerations.unwrap_or_default();
    assert!(tolerated.iter().any(|t| t.key.as_deref() == Some("kubevirt-rs.test/cdi-workloads")), "{tolerated:?}");
    let dv = wait_succeeded(&api, "placed").await;
    cdis.delete("placement-test", &DeleteParams::default()).await?;
    assert_success_status(&dv?);
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn an_ova_datavolume_imports_the_disk_its_annotation_names() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-ova").await?;
    // An OVA as exporters make it: the OVF first, then two streamOptimized vmdks (made by qemu-img).
    let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
    let sh = |cmd: &str| {
        let st = std::process::Command::new("sh").arg("-ec").arg(cmd).current_dir(dir.path()).status();
        assert!(st.is_ok_and(|s| s.success()), "{cmd}");
    };
    sh("head -c 3145728 /dev/urandom > one.raw && yes second-disk | head -c 2097152 > two.raw");
    sh("for d in one two; do qemu-img convert -f raw -O vmdk -o subformat=streamOptimized $d.raw $d.vmdk; done");
    let disk = |id: &str, file: &str| {
        format!(
            "<Disk ovf:capacity=\"4\" ovf:capacityAllocationUnits=\"byte * 2^20\" ovf:diskId=\"{id}\" \
             ovf:fileRef=\"{file}\" ovf:format=\"http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized\"/>"
        )
    };
    let ovf = format!(
        "<?xml version=\"1.0\"?>\n<Envelope xmlns=\"http://schemas.dmtf.org/ovf/envelope/1\" \
         xmlns:ovf=\"http://schemas.dmtf.org/ovf/envelope/1\">\n<References><File ovf:href=\"one.vmdk\" ovf:id=\"f1\"/>\
         <File ovf:href=\"two.vmdk\" ovf:id=\"f2\"/></References>\n<DiskSection><Info>disks</Info>{}{}</DiskSection>\n\
         <VirtualSystem ovf:id=\"vm\"><Info>vm</Info></VirtualSystem>\n</Envelope>\n",
        disk("vmdisk1", "f1"),
        disk("vmdisk2", "f2"),
    );
    std::fs::write(dir.path().join("vm.ovf"), ovf).map_err(Error::io("writing the OVF"))?;
    let name = format!("{}.ova", ns.name());
    let ova = corpus(&name);
    let _cleanup = RemoveOnDrop(ova.clone());
    sh(&format!("tar --format=ustar -cf {} vm.ovf one.vmdk two.vmdk", ova.display()));
    let yaml = format!(
        "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata:\n  name: second\n  annotations:\n    \
         import.kubevirt-rs.io/ova-disk: vmdisk2\nspec:\n  source:\n{}\n  {}\n",
        http_source(&host_url(NGINX, &format!("corpus/{name}"))),
        storage_request("16Mi")
    );
    let api = apply_dvs(&client, ns.name(), &yaml).await?;
    let dv = wait_succeeded(&api, "second").await?;
    assert_success_status(&dv);
    cdi::assert_volume_matches(&client, ns.name(), "second", &dir.path().join("two.vmdk")).await?;
    ns.delete().await
}

/// Removes a file when dropped.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn phase_of(p: &Pod) -> String {
    p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default()
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn clone_within_and_across_namespaces_and_volume_modes() -> Result<()> {
    let (_cluster, client, src) = setup("dv-clone-src").await?;
    let dst = TestNamespace::create(&client, "dv-clone-dst").await?;
    let src_api =
        apply_dvs(&client, src.name(), &http_dv("golden", "corpus/q2-v3.qcow2", &storage_request("32Mi"))).await?;
    wait_succeeded(&src_api, "golden").await?;

    // Same namespace, Filesystem → Filesystem, size inferred from the source.
    let same = dv_yaml("copy", &format!("    pvc: {{namespace: {}, name: golden}}", src.name()), "storage: {}");
    apply_yaml(&client, src.name(), &same).await?;
    // Other namespace, Filesystem → Block.
    let other = dv_yaml(
        "copyblock",
        &format!("    pvc: {{namespace: {}, name: golden}}", src.name()),
        "storage: {volumeMode: Block, resources: {requests: {storage: 32Mi}}}",
    );
    let dst_api = apply_dvs(&client, dst.name(), &other).await?;
    for (api, ns, name) in [(&src_api, src.name(), "copy"), (&dst_api, dst.name(), "copyblock")] {
        let dv = wait_succeeded(api, name).await?;
        assert_success_status(&dv);
        assert_eq!(cond(&dv, ConditionType::Running).and_then(|c| c.message).as_deref(), Some("Clone Complete"));
        assert_volume_matches(&client, ns, name, "q2-v3.qcow2").await?;
        let events = events_of(&client, ns, name).await;
        assert!(
            events.iter().any(|(r, m)| r == "CloneSucceeded"
                && m.starts_with(&format!("Successfully cloned from {}/golden into {ns}/{name}", src.name()))),
            "{events:?}"
        );
    }
    // Source pods are gone.
    let src_pods: Api<Pod> = Api::namespaced(client.clone(), src.name());
    wait_pods_gone(&src_pods, "cdi.kubevirt.io=cdi-clone-source", "clone source pods deleted").await?;
    dst.delete().await?;
    src.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn s3_and_registry_sources() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-s3reg").await?;
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: s3-creds}\nstringData: {accessKeyId: importer-test-ak, secretKey: importer-test-sk-9f3c1e}\n";
    apply_yaml(&client, ns.name(), secret).await?;
    // The plain-HTTP registry must be listed as insecure in the CDIConfig.
    apply_yaml(&client, "", &insecure_registry_config()).await?;
    let yaml = [
        dv_yaml(
            "s3",
            &format!("    s3:\n      url: \"{}\"\n      secretRef: s3-creds", host_url(S3, "images/q2-v3.qcow2")),
            &storage_request("64Mi"),
        ),
        dv_yaml(
            "reg",
            &format!("    registry:\n      url: \"docker://{POD_GATEWAY}:{REGISTRY}/test/env:v1\""),
            &storage_request("64Mi"),
        ),
    ]
    .join("---\n");
    // Give the controller's config cache a moment to see the CDIConfig change.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let api = apply_dvs(&client, ns.name(), &yaml).await?;
    let dv = wait_succeeded(&api, "s3").await?;
    assert_success_status(&dv);
    assert_volume_matches(&client, ns.name(), "s3", "q2-v3.qcow2").await?;
    let dv = wait_succeeded(&api, "reg").await?;
    assert_success_status(&dv);
    assert_volume_matches(&client, ns.name(), "reg", "base.raw").await?;
    // Labels from the image's environment land on the PVC.
    let pvc: PersistentVolumeClaim = Api::namespaced(client.clone(), ns.name()).get("reg").await?;
    assert_eq!(pvc.labels().get("instancetype.kubevirt.io/default-instancetype").map(String::as_str), Some("u1.small"));
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn deleting_a_datavolume_removes_its_pod_and_claim() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-delete").await?;
    let api = apply_dvs(&client, ns.name(), &http_dv("gone", "slow/small.raw", &storage_request("16Mi"))).await?;
    wait_dv_phase(&api, "gone", DataVolumePhase::ImportInProgress, Duration::from_secs(120)).await?;
    api.delete("gone", &DeleteParams::default()).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns.name());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns.name());
    poll_until("importer pod and PVC deleted", Duration::from_secs(90), || async {
        let pod = pods.get_opt("importer-gone").await.ok()?;
        let pvc = pvcs.get_opt("gone").await.ok()?;
        (pod.is_none() && pvc.is_none()).then_some(())
    })
    .await?;
    ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn upload_datavolume_becomes_upload_ready() -> Result<()> {
    let (_cluster, client, ns) = setup("dv-upload").await?;
    let api = apply_dvs(&client, ns.name(), &dv_yaml("up", "    upload: {}", &storage_request("16Mi"))).await?;
    let dv = wait_dv_phase(&api, "up", DataVolumePhase::UploadReady, Duration::from_secs(120)).await?;
    assert_eq!(cond(&dv, ConditionType::Bound).map(|c| c.status), Some(ConditionStatus::True));
    let events = events_of(&client, ns.name(), "up").await;
    assert!(events.iter().any(|(r, m)| r == "UploadReady" && m == "Upload into up ready"), "{events:?}");
    let pvc: PersistentVolumeClaim = Api::namespaced(client.clone(), ns.name()).get("up").await?;
    assert_eq!(pvc.annotations().get("cdi.kubevirt.io/storage.pod.ready").map(String::as_str), Some("true"));
    let svc: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(client.clone(), ns.name());
    assert!(svc.get_opt("cdi-upload-up").await?.is_some());
    ns.delete().await
}

/// What an upstream example must do here.
enum Expect {
    /// The DataVolume reaches Succeeded.
    Succeeded(&'static str),
    /// The DataVolume reaches UploadReady.
    UploadReady(&'static str),
    /// The API server refuses it with a message containing this text.
    Refused(&'static str),
    /// Plain objects (Secret, ConfigMap, CDIConfig) that must apply.
    Applies,
    /// Not this issue's API; the reason is the test's documentation.
    OtherApi(&'static str),
}

fn example_expectation(file: &str) -> Option<Expect> {
    use Expect::*;
    Some(match file {
        "blank-image-datavolume.yaml" => Succeeded("blank-image-datavolume"),
        "import-kubevirt-datavolume.yaml"
        | "import-kubevirt-datavolume-secret.yaml"
        | "import-kubevirt-datavolume-skip-tls.yaml" => Succeeded("my-data-volume"),
        "import-kubevirt-block-datavolume.yaml" => Succeeded("import-kubevirt-block-datavolume"),
        "import-archive-datavolume.yaml" => Succeeded("import-archive-datavolume"),
        "import-archive-block-datavolume.yaml" => Refused("contentType archive requires volumeMode Filesystem"),
        "registry-image-datavolume.yaml" => Succeeded("registry-image-datavolume"),
        // Upstream reuses the name of the Filesystem example.
        "registry-image-block-datavolume.yaml" => Succeeded("registry-image-datavolume"),
        "clone-datavolume.yaml" => Refused("Missing Data volume PVC"),
        "clone-block-datavolume.yaml" => Succeeded("clone-block-datavolume"),
        "upload-datavolume.yaml" => UploadReady("upload-datavolume"),
        "upload-block-datavolume.yaml" => UploadReady("upload-block-datavolume"),
        "import-kubevirt-datavolume-gcs.yaml" => Refused("source gcs is not supported"),
        "vddk-args-field.yaml" | "vddk-args-annotation.yaml" => Refused("source vddk is not supported"),
        "cert-configmap.yaml"
        | "endpoint-secret.yaml"
        | "import-kubevirt-datavolume-gcs-secret.yaml"
        | "example-cdiconfig.yaml"
        | "vddk-args-configmap.yaml"
        | "vddk-configmap.yaml" => Applies,
        "upload-datavolume-token.yaml" | "upload-block-datavolume-token.yaml" => {
            OtherApi("UploadTokenRequest: the upload tests (issue 6)")
        }
        "import-block-pv.yaml" => {
            OtherApi("a hand-made PersistentVolume on node01's /dev/loop10: cluster-specific, not CDI's API")
        }
        "vm-dv.yaml" => OtherApi("kubevirt.io VirtualMachine: the VM controller's issue"),
        _ => return None,
    })
}

/// Rewrites the examples' external URLs to this machine's peers (everything else stays as upstream wrote it).
fn rewrite_example(yaml: &str, ns: &str) -> String {
    yaml.replace(
        "https://download.cirros-cloud.net/0.4.0/cirros-0.4.0-x86_64-disk.img",
        &host_url(NGINX, "corpus/q2-v3.qcow2"),
    )
    .replace("https://172.16.15.6/iso/cirros-0.4.0-x86_64-disk.img", "https://10.244.0.1:18443/corpus/q2-v3.qcow2")
    .replace(
        "http://distro.ibiblio.org/tinycorelinux/9.x/x86/release/Core-current.iso",
        &host_url(NGINX, "corpus/base.iso"),
    )
    .replace(
        "http://geolite.maxmind.com/download/geoip/database/GeoLite2-Country.tar.gz",
        &host_url(NGINX, "out/upstream-example-archive.tar.gz"),
    )
    .replace(
        "docker://kubevirt/fedora-cloud-registry-disk-demo",
        &format!("docker://{POD_GATEWAY}:{REGISTRY}/test/qcow2:v1"),
    )
    .replace("namespace: default", &format!("namespace: {ns}"))
    .replace("namespace: source-ns", &format!("namespace: {ns}"))
    .replace("namespace: \"cdi\"", &format!("namespace: {ns}"))
    .replace("namespace: cdi\n", &format!("namespace: {ns}\n"))
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/*.sh up"]
async fn upstream_examples_work_or_are_refused_clearly() -> Result<()> {
    let (cluster, client, ns) = setup("dv-examples").await?;
    // Found relative to the checkout (`<repo root>/../shared`); missing examples fail the test.
    let (dir, mut files) = cdi::upstream_examples()?;
    assert!(files.len() >= 20, "upstream examples not found in {}", dir.display());
    let read_example =
        |file: &str| std::fs::read_to_string(dir.join(file)).map_err(Error::io(format!("reading {file}")));
    // An archive to stand in for the GeoLite download, served by nginx under /out/.
    let out = repo_root().join("tests/work/out");
    let st = std::process::Command::new("tar")
        .args(["-czf", "upstream-example-archive.tar.gz", "-C"])
        .arg(repo_root().join("tests/work/corpus"))
        .args(["tiny.raw", "manifest.tsv"])
        .current_dir(&out)
        .status()
        .map_err(Error::io("tar"))?;
    assert!(st.success());
    // The registry example needs the local plain-HTTP registry listed as insecure.
    apply_yaml(&client, "", &insecure_registry_config()).await?;
    // The clone example's source.
    let blank_source = dv_yaml("source-datavolume", "    blank: {}", &storage_request("8Mi"));
    apply_yaml(&client, ns.name(), &blank_source).await?;

    // Imports first (the block clone example clones the block import example), clones last.
    files.sort_by_key(|f| f.starts_with("clone-"));
    let mut waits = Vec::new();
    for file in &files {
        let expect =
            example_expectation(file).unwrap_or_else(|| panic!("no expectation for upstream example {file}: add one"));
        let text = read_example(file)?;
        let target = TestNamespace::create(&client, "dv-ex").await?;
        let yaml = rewrite_example(&text, target.name());
        if file == "import-kubevirt-datavolume-secret.yaml" {
            // Its comment: "If you are using the endpoint-secret.yaml example".
            apply_yaml(&client, target.name(), &read_example("endpoint-secret.yaml")?).await?;
        }
        if file.starts_with("clone-") {
            // Sources live in the clone's namespace (the rewrite points `namespace:` there).
            let src = if file == "clone-block-datavolume.yaml" {
                "import-kubevirt-block-datavolume"
            } else {
                "source-datavolume"
            };
            let src_yaml = if src == "source-datavolume" {
                blank_source.clone()
            } else {
                rewrite_example(&read_example("import-kubevirt-block-datavolume.yaml")?, target.name())
            };
            apply_yaml(&client, target.name(), &src_yaml).await?;
            wait_succeeded(&Api::namespaced(client.clone(), target.name()), src).await?;
        }
        if let Expect::OtherApi(why) = expect {
            // Not applied: e.g. import-block-pv.yaml's static PV (node01) would capture a Block claim here.
            eprintln!("{file}: not applied here: {why}");
            continue;
        }
        let out = cluster.kubectl_with_manifest(&["apply", "-n", target.name()], &yaml)?;
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        match expect {
            Expect::Refused(msg) => {
                assert!(!out.status.success(), "{file} was accepted");
                assert!(stderr.contains(msg), "{file}: want {msg:?}, got {stderr}");
            }
            Expect::Applies => assert!(out.status.success(), "{file}: {stderr}"),
            Expect::OtherApi(_) => unreachable!("skipped above"),
            Expect::Succeeded(name) | Expect::UploadReady(name) => {
                assert!(out.status.success(), "{file}: {stderr}");
                let want = if matches!(expect, Expect::Succeeded(_)) {
                    DataVolumePhase::Succeeded
                } else {
                    DataVolumePhase::UploadReady
                };
                waits.push((file.clone(), target.clone(), name, want));
            }
        }
    }
    for (file, target, name, want) in waits {
        let api: Api<DataVolume> = Api::namespaced(client.clone(), target.name());
        let dv = wait_dv_phase(&api, name, want, IMPORT_TIMEOUT).await?;
        assert_eq!(phase(&dv), Some(want), "{file}");
        target.delete().await?;
    }
    // The controller copies the override into the status on its next configuration sync: every 20 s, and after a
    // leader failover (the controller-restart test runs beside this one) up to a lease duration later. Wait for
    // it; the assertion below reports what is there if it never comes.
    let jsonpath = ["get", "cdiconfig", "config", "-o", "jsonpath={.status.uploadProxyURL}"];
    let _ = cluster.kubectl_until(&jsonpath, "www.example.com", Duration::from_secs(90)).await;
    let cfg = cluster.kubectl(jsonpath)?;
    assert_eq!(
        String::from_utf8_lossy(&cfg.stdout),
        "www.example.com",
        "example-cdiconfig.yaml's override shows in status"
    );
    apply_yaml(&client, "", &insecure_registry_config()).await?;
    ns.delete().await
}
