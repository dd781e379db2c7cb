//! virt-api behind the real kube-apiserver of the test cluster (`tests/cluster/up`): the `virt-api` binary runs on
//! the host (the API server listens on 127.0.0.1 too), with a certificate signed by a CA the test makes; the test's
//! own MutatingWebhookConfiguration / ValidatingWebhookConfiguration (`clientConfig.url:
//! https://127.0.0.1:<port>/…`, that CA as `caBundle`, named after the test namespace and matching only it, so
//! concurrent suites are unaffected; deleted at the end) route VMI requests to it. Then, as a user would:
//!
//! * `kubectl apply -f` upstream's `vmi-ephemeral.yaml` and `vmi-sata.yaml` → the stored VMIs carry upstream's
//!   defaults;
//! * `kubectl create -f` of bad VMIs → refused, `kubectl` printing upstream's messages;
//! * a spec change by a user → "update of VMI object is restricted"; a status edit → reverted;
//! * VirtualMachineInstanceMigrations: refused for an unknown VMI, without `vmiName`, with a `priority`, with a bad
//!   `addedNodeSelector`, or while another one of the VMI is in flight; admitted ones carry the selector label and
//!   the finalizer; their spec and (while in flight) selector label cannot change.
//!
//! `#[ignore]`d like every cluster test: `cargo test -p virt-api --test cluster -- --ignored`.

use std::io::{BufRead as _, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crds::kubevirt::migration::VirtualMachineInstanceMigration;
use crds::kubevirt::vmi::VirtualMachineInstance;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_test_support::{Error, Result, TestCluster, TestNamespace, apply_yaml, poll_until, read_repo_file};
use serde_json::{Value, json};
use virt_operator::pki::Pki;

/// The `virt-api` process; killed when dropped.
struct VirtApi(Child);

impl Drop for VirtApi {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn check(what: &str, message: String) -> Error {
    Error::Check { what: what.into(), message }
}

/// Starts the binary on a free port of 127.0.0.1 with `pki`'s certificate and `kubeconfig`'s client (the
/// migration validator reads VMIs and migrations); returns it and the port.
fn start_virt_api(dir: &std::path::Path, pki: &Pki, kubeconfig: &std::path::Path) -> Result<(VirtApi, u16)> {
    let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&cert, &pki.cert_pem).map_err(Error::io("writing tls.crt"))?;
    std::fs::write(&key, &pki.key_pem).map_err(Error::io("writing tls.key"))?;
    let port =
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(Error::io("finding a free port"))?.port();
    let child = Command::new(env!("CARGO_BIN_EXE_virt-api"))
        .env("VIRT_API_LISTEN", format!("127.0.0.1:{port}"))
        .env("VIRT_API_TLS_CERT", &cert)
        .env("VIRT_API_TLS_KEY", &key)
        .env("VIRT_API_LOG", "info")
        .env("KUBECONFIG", kubeconfig)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::io("starting virt-api"))?;
    let mut child = VirtApi(child);
    // It logs "virt-api listening" once it listens (or fails with `error: …` and exits).
    let stderr = child.0.stderr.take().ok_or_else(|| check("virt-api", "no stderr".into()))?;
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("virt-api listening") => break,
            Some(Ok(line)) => seen.push(line),
            Some(Err(_)) | None => return Err(check("virt-api start", seen.join("\n"))),
        }
    }
    std::thread::spawn(move || lines.map_while(std::result::Result::ok).for_each(|l| eprintln!("virt-api: {l}")));
    Ok((child, port))
}

/// The test's webhook configurations (named `<ns>-…`, matching namespace `ns` only).
fn webhook_configurations(ns: &str, port: u16, pki: &Pki) -> String {
    let hook_for = |resource: &str, name: &str, path: &str, ops: &str| {
        format!(
            "- name: {name}\n  admissionReviewVersions: [v1]\n  sideEffects: None\n  failurePolicy: Fail\n  timeoutSeconds: 10\n  namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {ns}}}}}\n  rules: [{{operations: [{ops}], apiGroups: [kubevirt.io], apiVersions: [v1, v1alpha3], resources: [{resource}]}}]\n  clientConfig: {{url: \"https://127.0.0.1:{port}{path}\", caBundle: {}}}\n",
            pki.ca_bundle()
        )
    };
    let hook = |name: &str, path: &str, ops: &str| hook_for("virtualmachineinstances", name, path, ops);
    let migration_hook =
        |name: &str, path: &str, ops: &str| hook_for("virtualmachineinstancemigrations", name, path, ops);
    use contracts::kubevirt::consts::webhook as w;
    format!(
        "apiVersion: admissionregistration.k8s.io/v1\nkind: MutatingWebhookConfiguration\nmetadata: {{name: {ns}-mutator}}\nwebhooks:\n{}{}---\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: {ns}-validator}}\nwebhooks:\n{}{}{}{}",
        hook(w::VMI_MUTATOR, w::VMI_MUTATE_PATH, "CREATE, UPDATE"),
        migration_hook(w::MIGRATION_MUTATOR, w::MIGRATION_MUTATE_PATH, "CREATE"),
        hook(w::VMI_CREATE_VALIDATOR, w::VMI_VALIDATE_CREATE_PATH, "CREATE"),
        hook(w::VMI_UPDATE_VALIDATOR, w::VMI_VALIDATE_UPDATE_PATH, "UPDATE"),
        migration_hook(w::MIGRATION_CREATE_VALIDATOR, w::MIGRATION_VALIDATE_CREATE_PATH, "CREATE"),
        migration_hook(w::MIGRATION_UPDATE_VALIDATOR, w::MIGRATION_VALIDATE_UPDATE_PATH, "UPDATE"),
    )
}

/// `kubectl <verb> -n ns -f <file>` of `manifest`: (succeeded, stdout, stderr).
fn kubectl_file(cluster: &TestCluster, verb: &[&str], ns: &str, manifest: &str) -> Result<(bool, String, String)> {
    let mut args = verb.to_vec();
    args.extend(["-n", ns]);
    let out = cluster.kubectl_with_manifest(&args, manifest)?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    ))
}

fn upstream_example(file: &str) -> Result<String> {
    let path = kube_test_support::shared_dir()?.join("upstream-examples/kubevirt").join(file);
    std::fs::read_to_string(&path).map_err(Error::io(format!("reading {}", path.display())))
}

fn bad_vmi(name: &str, spec: &str) -> String {
    format!("apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

/// Bad VMIs: (name, spec lines, the refusal's message — the API error reads `admission webhook
/// "virtualmachineinstances-create-validator.kubevirt.io" denied the request: <message>` —, what `kubectl create -f`
/// prints). kubectl prints an `Invalid` status from its causes (`<field>: <message>`, duplicates once), so the causes
/// upstream reports twice show once there.
const BAD: &[(&str, &str, &str, &str)] = &[
    (
        "no-memory",
        "  domain: {devices: {}}\n",
        "no memory requested, at least one of 'spec.domain.memory.guest', 'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' must be set",
        "The request is invalid: : no memory requested, at least one of 'spec.domain.memory.guest', 'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' must be set",
    ),
    (
        "tiny-memory",
        "  domain: {devices: {}, resources: {requests: {memory: 512k}}}\n",
        "spec.domain.resources.requests.memory '512k': must be greater than or equal to 1M.",
        "The request is invalid: spec.domain.resources.requests.memory: spec.domain.resources.requests.memory '512k': must be greater than or equal to 1M.",
    ),
    (
        "unknown-volume",
        "  domain: {devices: {disks: [{name: x, disk: {}}]}, memory: {guest: 128Mi}}\n",
        "spec.domain.devices.disks[0].Name 'x' not found.",
        "The request is invalid: spec.domain.devices.disks[0].name: spec.domain.devices.disks[0].Name 'x' not found.",
    ),
    (
        "two-sources",
        "  domain: {devices: {}, memory: {guest: 128Mi}}\n  volumes: [{name: d, containerDisk: {image: cirros}, emptyDisk: {capacity: 1Gi}}]\n",
        "spec.volumes[0] must have exactly one source type set",
        "The request is invalid: spec.volumes[0]: spec.volumes[0] must have exactly one source type set",
    ),
    (
        "duplicate-volumes",
        "  domain: {devices: {}, memory: {guest: 128Mi}}\n  volumes: [{name: d, emptyDisk: {capacity: 1Gi}}, {name: d, emptyDisk: {capacity: 2Gi}}]\n",
        "spec.volumes[1] and spec.volumes[0] must not have the same Name.",
        "The request is invalid: spec.volumes[1].name: spec.volumes[1] and spec.volumes[0] must not have the same Name.",
    ),
    (
        "big-userdata",
        "  domain: {devices: {}, memory: {guest: 128Mi}}\n  volumes: [{name: ci, cloudInitNoCloud: {userData: LONG}}]\n",
        "spec.volumes[0].cloudInitNoCloud userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data.",
        "The request is invalid: spec.volumes[0].cloudInitNoCloud: spec.volumes[0].cloudInitNoCloud userdata exceeds 2048 byte limit. Should use UserDataSecretRef for larger data.",
    ),
    (
        "unknown-network",
        "  domain: {devices: {interfaces: [{name: x, bridge: {}}]}, memory: {guest: 128Mi}}\n",
        "spec.domain.devices.interfaces[0].name 'x' not found., spec.domain.devices.interfaces[0].name 'x' not found.",
        "The request is invalid: spec.domain.devices.interfaces[0].name: spec.domain.devices.interfaces[0].name 'x' not found.",
    ),
    (
        "masquerade-multus",
        "  domain: {devices: {interfaces: [{name: red, masquerade: {}}]}, memory: {guest: 128Mi}}\n  networks: [{name: red, multus: {networkName: red}}]\n",
        "Masquerade interface only implemented with pod network, Masquerade interface only implemented with pod network",
        "The request is invalid: spec.domain.devices.interfaces[0].name: Masquerade interface only implemented with pod network",
    ),
    (
        "slirp",
        "  domain: {devices: {interfaces: [{name: default, slirp: {}}]}, memory: {guest: 128Mi}}\n  networks: [{name: default, pod: {}}]\n",
        "Slirp interface support has been discontinued since v1.3, logical default interface must have exactly one binding method or binding plugin, logical default interface must have exactly one binding method or binding plugin",
        "The request is invalid: \n* spec.domain.devices.interfaces[0].slirp: Slirp interface support has been discontinued since v1.3\n* spec.domain.devices.interfaces[0]: logical default interface must have exactly one binding method or binding plugin",
    ),
    (
        "cdrom-virtio",
        "  domain: {devices: {disks: [{name: d, cdrom: {bus: virtio}}]}, memory: {guest: 128Mi}}\n  volumes: [{name: d, containerDisk: {image: cirros}}]\n",
        "Bus type virtio is invalid for CD-ROM device, Bus type virtio is invalid for CD-ROM device",
        "The request is invalid: spec.domain.devices.disks[0].cdrom.bus: Bus type virtio is invalid for CD-ROM device",
    ),
    (
        "boot-order-0",
        "  domain: {devices: {disks: [{name: d, bootOrder: 0}]}, memory: {guest: 128Mi}}\n  volumes: [{name: d, containerDisk: {image: cirros}}]\n",
        "spec.domain.devices.disks[0] must have a boot order > 0, if supplied, spec.domain.devices.disks[0] must have a boot order > 0, if supplied",
        "The request is invalid: spec.domain.devices.disks[0].bootOrder: spec.domain.devices.disks[0] must have a boot order > 0, if supplied",
    ),
];

/// The message of the API error `result` carries.
fn api_error<T: std::fmt::Debug>(result: std::result::Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => format!("{} {}", status.code, status.message),
        other => format!("not an API error: {other:?}"),
    }
}

async fn wait_established(cluster: &TestCluster, ns: &str) -> Result<()> {
    let probe = bad_vmi("probe", "  domain: {devices: {}}\n");
    poll_until("the VMI CRD served and the test's webhooks in effect", Duration::from_secs(60), || async {
        let (ok, _, err) = kubectl_file(cluster, &["create", "--dry-run=server"], ns, &probe).ok()?;
        (!ok && err.contains("no memory requested")).then_some(())
    })
    .await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up)"]
async fn kubectl_shows_upstreams_defaults_and_refusals() -> Result<()> {
    let cluster = TestCluster::start_or_reuse().await?;
    let client = cluster.client().await?;
    apply_yaml(&client, "default", &read_repo_file("deploy/crds/virtualmachineinstance.yaml")?).await?;
    apply_yaml(&client, "default", &read_repo_file("deploy/crds/virtualmachineinstancemigration.yaml")?).await?;
    let ns = TestNamespace::create(&client, "virt-api").await?;
    let name = ns.name().to_owned();
    let pki = Pki::generate(&["127.0.0.1".to_owned(), "localhost".to_owned()])
        .map_err(|e| check("certificates", e.to_string()))?;
    let dir = tempfile::tempdir().map_err(Error::io("tempdir"))?;
    let (_virt_api, port) = start_virt_api(dir.path(), &pki, cluster.kubeconfig())?;
    apply_yaml(&client, &name, &webhook_configurations(&name, port, &pki)).await?;
    let outcome = exercise(&cluster, &client, &name).await;
    // Clean up whatever happened: the configurations first (they point at this process), then the namespace.
    let _ =
        cluster.kubectl(["delete", "mutatingwebhookconfiguration", &format!("{name}-mutator"), "--ignore-not-found"]);
    let _ = cluster.kubectl([
        "delete",
        "validatingwebhookconfiguration",
        &format!("{name}-validator"),
        "--ignore-not-found",
    ]);
    if outcome.is_ok() {
        ns.delete().await?;
    }
    outcome
}

async fn exercise(cluster: &TestCluster, client: &kube::Client, ns: &str) -> Result<()> {
    wait_established(cluster, ns).await?;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), ns);

    // Upstream's examples come back defaulted.
    for file in ["vmi-ephemeral.yaml", "vmi-sata.yaml"] {
        let (ok, out, err) = kubectl_file(cluster, &["apply"], ns, &upstream_example(file)?)?;
        if !ok {
            return Err(check(&format!("kubectl apply -f {file}"), err));
        }
        let vmi_name = file.trim_end_matches(".yaml");
        if out != format!("virtualmachineinstance.kubevirt.io/{vmi_name} created") {
            return Err(check(&format!("kubectl apply -f {file}"), out));
        }
        let got = serde_json::to_value(vmis.get(vmi_name).await?).unwrap_or_default();
        let disk_bus = if file == "vmi-sata.yaml" { "sata" } else { "virtio" };
        let expected: [(&str, Value); 13] = [
            ("/spec/architecture", json!("amd64")),
            ("/spec/domain/machine", json!({"type": "q35"})),
            (
                "/spec/domain/cpu",
                json!({"cores": 1, "maxSockets": 4, "model": "host-model", "sockets": 1, "threads": 1}),
            ),
            ("/spec/domain/devices/disks", json!([{"disk": {"bus": disk_bus}, "name": "containerdisk"}])),
            ("/spec/domain/devices/interfaces", json!([{"bridge": {}, "name": "default"}])),
            ("/spec/networks", json!([{"name": "default", "pod": {}}])),
            ("/spec/domain/features", json!({"acpi": {"enabled": true}})),
            ("/spec/domain/resources", json!({})),
            ("/spec/evictionStrategy", json!("None")),
            ("/spec/volumes/0/containerDisk/imagePullPolicy", json!("IfNotPresent")),
            ("/metadata/finalizers", json!(["kubevirt.io/foregroundDeleteVirtualMachine"])),
            ("/metadata/annotations/kubevirt.io~1pci-topology-version", json!("v3")),
            ("/status/memory", json!({"guestAtBoot": "128Mi", "guestCurrent": "128Mi", "guestRequested": "128Mi"})),
        ];
        for (pointer, want) in expected {
            if got.pointer(pointer) != Some(&want) {
                return Err(check(&format!("{file} {pointer}"), format!("want {want}, got {got:#}")));
            }
        }
        let status_ok = got["status"]["phase"] == json!("Pending")
            && got["status"]["runtimeUser"] == json!(107)
            && got["status"]["currentCPUTopology"] == json!({"cores": 1, "sockets": 1, "threads": 1})
            && got["status"]["phaseTransitionTimestamps"].as_array().is_some_and(|a| a.len() == 1)
            && got["spec"]["domain"]["firmware"]["uuid"].as_str().is_some_and(|u| u.len() == 36);
        if !status_ok {
            return Err(check(&format!("{file} status and firmware"), format!("{got:#}")));
        }
    }

    // A user changes the spec: refused; edits the status: reverted.
    let out = cluster.kubectl([
        "patch",
        "-n",
        ns,
        "vmi",
        "vmi-ephemeral",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"terminationGracePeriodSeconds":5}}"#,
    ])?;
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if out.status.success() || err != "The request is invalid: : update of VMI object is restricted" {
        return Err(check("kubectl patch of the spec", err));
    }
    let spec = Patch::Merge(json!({"spec": {"terminationGracePeriodSeconds": 5}}));
    let got = api_error(vmis.patch("vmi-ephemeral", &PatchParams::default(), &spec).await);
    let want = r#"422 admission webhook "virtualmachineinstances-update-validator.kubevirt.io" denied the request: update of VMI object is restricted"#;
    if got != want {
        return Err(check("a user's spec patch", got));
    }
    let status = Patch::Merge(json!({"status": {"phase": "Running"}}));
    let patched = vmis.patch("vmi-ephemeral", &PatchParams::default(), &status).await?;
    if patched.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str()) != Some("Pending") {
        return Err(check("a user's status edit", format!("{:?}", patched.status)));
    }

    // Bad VMIs are refused with upstream's messages: through the API, and as kubectl prints them.
    let long = "x".repeat(2049);
    for (vmi_name, spec, message, printed) in BAD {
        let manifest = bad_vmi(vmi_name, &spec.replace("LONG", &long));
        let (ok, _, err) = kubectl_file(cluster, &["create"], ns, &manifest)?;
        if ok || err != *printed {
            return Err(check(&format!("kubectl create -f of {vmi_name}"), format!("want {printed}\ngot  {err}")));
        }
        let docs: Vec<VirtualMachineInstance> =
            serde_saphyr::from_multiple(&manifest).map_err(|e| check("parsing a bad VMI", e.to_string()))?;
        let vmi = docs.into_iter().next().ok_or_else(|| check("parsing a bad VMI", "no document".into()))?;
        let got = api_error(vmis.create(&PostParams::default(), &vmi).await);
        let want = format!(
            r#"422 admission webhook "virtualmachineinstances-create-validator.kubevirt.io" denied the request: {message}"#
        );
        if got != want {
            return Err(check(&format!("creating {vmi_name}"), format!("want {want}\ngot  {got}")));
        }
    }
    // The deprecated version goes through the same webhooks.
    let old = bad_vmi("old-no-memory", "  domain: {devices: {}}\n").replace("kubevirt.io/v1", "kubevirt.io/v1alpha3");
    let (ok, _, err) = kubectl_file(cluster, &["create"], ns, &old)?;
    if ok || !err.ends_with(BAD[0].3) {
        return Err(check("a v1alpha3 VMI without memory", err));
    }

    migrations(client, ns).await?;

    // Leave nothing that waits for a controller: drop the finalizers, delete.
    for vmi_name in ["vmi-ephemeral", "vmi-sata"] {
        let drop_finalizers = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        vmis.patch(vmi_name, &PatchParams::default(), &drop_finalizers).await?;
        vmis.delete(vmi_name, &DeleteParams::default()).await?;
    }
    Ok(())
}

fn vmim(spec: Value) -> Result<VirtualMachineInstanceMigration> {
    serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
        "metadata": {"generateName": "kubevirt-migrate-vm-"}, "spec": spec}))
    .map_err(|e| check("a migration", e.to_string()))
}

/// The migration webhooks against the (Pending, so not final and not known to be unmigratable) `vmi-ephemeral`.
async fn migrations(client: &kube::Client, ns: &str) -> Result<()> {
    let api: Api<VirtualMachineInstanceMigration> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    let create = r#"admission webhook "migration-create-validator.kubevirt.io" denied the request: "#;
    let update = r#"admission webhook "migration-update-validator.kubevirt.io" denied the request: "#;
    // The CRD may still be getting established.
    let unknown = vmim(json!({"vmiName": "nope"}))?;
    let want = format!(r#"400 {create}the VMI "{ns}/nope" does not exist"#);
    poll_until("the migration CRD served and its webhooks in effect", Duration::from_secs(60), || async {
        (api_error(api.create(&pp, &unknown).await) == want).then_some(())
    })
    .await?;
    let regex = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    let refused = [
        (json!({"vmiName": ""}), format!("422 {create}vmiName is missing")),
        (
            json!({"vmiName": "vmi-ephemeral", "priority": "system-critical"}),
            format!("422 {create}Migration priority queue, only virt-controller is allowed to set priority field"),
        ),
        (
            json!({"vmiName": "vmi-ephemeral", "addedNodeSelector": {"a b": "x"}}),
            format!(r#"422 {create}spec.addedNodeSelector: Invalid value: "a b": name part {regex}"#),
        ),
    ];
    for (spec, want) in refused {
        let got = api_error(api.create(&pp, &vmim(spec.clone())?).await);
        if got != want {
            return Err(check(&format!("creating a migration {spec}"), format!("want {want}\ngot  {got}")));
        }
    }

    // Admitted: the mutator's label and finalizer.
    let first = api.create(&pp, &vmim(json!({"vmiName": "vmi-ephemeral"}))?).await?;
    let name = first.metadata.name.clone().unwrap_or_default();
    let labels = first.metadata.labels.clone().unwrap_or_default();
    if !name.starts_with("kubevirt-migrate-vm-")
        || labels.get("kubevirt.io/vmi-name").map(String::as_str) != Some("vmi-ephemeral")
        || first.metadata.finalizers != Some(vec!["kubevirt.io/migrationJobFinalize".to_owned()])
    {
        return Err(check("the admitted migration", format!("{:?}", first.metadata)));
    }
    let uid = first.metadata.uid.clone().unwrap_or_default();
    let got = api_error(api.create(&pp, &vmim(json!({"vmiName": "vmi-ephemeral"}))?).await);
    let want = format!(
        "400 {create}in-flight migration detected. Active migration job ({uid}) is currently already in progress for VMI vmi-ephemeral."
    );
    if got != want {
        return Err(check("a second migration", format!("want {want}\ngot  {got}")));
    }

    // Updates: the spec and the selector label stay; the finalizer may go.
    let changes = [
        (
            json!({"spec": {"addedNodeSelector": {"kubernetes.io/hostname": "x"}}}),
            format!("422 {update}update of Migration object's spec is restricted"),
        ),
        (
            json!({"metadata": {"labels": {"kubevirt.io/vmi-name": "other"}}}),
            format!("422 {update}selector label can't be modified on an in-flight migration"),
        ),
    ];
    for (patch, want) in changes {
        let got = api_error(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await);
        if got != want {
            return Err(check(&format!("patching the migration with {patch}"), format!("want {want}\ngot  {got}")));
        }
    }
    let drop_finalizers = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch(&name, &PatchParams::default(), &drop_finalizers).await?;
    api.delete(&name, &DeleteParams::default()).await?;
    Ok(())
}
