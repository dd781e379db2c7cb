//! virt-operator on the test cluster: the stack installed the way users install it (the operator's manifest and
//! the `KubeVirt` and `CDI` objects), reported with upstream's phases and conditions, rolled to a new release one
//! component after the other while a VM keeps answering on its HTTP port and an import in progress completes, and
//! removed by deleting the objects.
//!
//! `#[ignore]`d like every cluster test; `scripts/test.sh` runs it on the two-node cluster after the other suites
//! (it needs `tests/infra/import-env.sh up` for the import).

use std::time::{Duration, Instant};

use crds::cdi::{CDI, DataVolume, DataVolumePhase};
use crds::kubevirt::config::KubeVirt;
use crds::kubevirt::vmi::VirtualMachineInstancePhase as Phase;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, PodTemplateSpec, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_test_support::{Result, TestCluster, apply_yaml, host_url, poll_until};
use stack_support::metrics::{sample, scrape_service};
use stack_support::operator::{
    apply_operator, image_repository, install_with_operator, release_images, release_tag, wait_deployed,
};
use stack_support::vmi::{VmiEnv, http_get, vmi_ip};
use stack_support::{NAMESPACE, StackOptions};

fn first_image(template: Option<&PodTemplateSpec>) -> String {
    template
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

fn image_of_deployment(d: &Deployment) -> String {
    first_image(d.spec.as_ref().map(|s| &s.template))
}

fn image_of_daemonset(d: &DaemonSet) -> String {
    first_image(d.spec.as_ref().map(|s| &s.template))
}

fn daemonset_rolled_out(d: &DaemonSet) -> bool {
    let Some(st) = d.status.as_ref() else { return false };
    st.desired_number_scheduled > 0
        && st.updated_number_scheduled == Some(st.desired_number_scheduled)
        && st.number_available == Some(st.desired_number_scheduled)
        && d.metadata.generation == st.observed_generation
}

fn deployment_rolled_out(d: &Deployment) -> bool {
    let Some(st) = d.status.as_ref() else { return false };
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    st.updated_replicas == Some(want)
        && st.available_replicas == Some(want)
        && st.unavailable_replicas.unwrap_or(0) == 0
        && d.metadata.generation == st.observed_generation
}

fn condition(kv: &KubeVirt, t: &str) -> Option<(String, String, String)> {
    let c = kv.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == t)?;
    Some((c.status.as_str().to_owned(), c.reason.clone().unwrap_or_default(), c.message.clone().unwrap_or_default()))
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and tests/infra/import-env.sh up"]
async fn the_operator_installs_rolls_a_release_without_downtime_and_uninstalls() -> Result<()> {
    let cluster = TestCluster::start_or_reuse().await?;
    let base = tokio::task::spawn_blocking(release_tag)
        .await
        .map_err(|e| kube_test_support::Error::ClusterUp(e.to_string()))??;
    let (t1, t2) = (format!("{base}-a"), format!("{base}-b"));
    install_with_operator(&cluster, &StackOptions::default(), &t1).await?;
    let client = cluster.client().await?;
    let kvs: Api<KubeVirt> = Api::namespaced(client.clone(), NAMESPACE);
    let cdis: Api<CDI> = Api::all(client.clone());
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), NAMESPACE);
    let cdi_deploys: Api<Deployment> = Api::namespaced(client.clone(), "cdi");

    // Installed: upstream's status, labels, finalizers, certificates; `kubectl get` shows the phases.
    let kv = kvs.get("kubevirt").await?;
    let st = kv.status.clone().unwrap_or_default();
    assert_eq!(
        condition(&kv, "Available"),
        Some(("True".into(), "AllComponentsReady".into(), "All components are ready.".into()))
    );
    assert_eq!(condition(&kv, "Degraded").map(|c| c.0), Some("False".into()));
    assert_eq!(condition(&kv, "Created").map(|c| c.1), Some("AllResourcesCreated".into()));
    assert_eq!(st.target_kube_virt_registry.as_deref(), Some(image_repository().as_str()));
    assert_eq!(st.observed_deployment_id, st.target_deployment_id);
    assert!(st.operator_version.is_some() && st.observed_generation == kv.metadata.generation);
    assert!(kv.finalizers().iter().any(|f| f == "kubevirt.io/foregroundDeleteKubeVirt"));
    let cdi = cdis.get("cdi").await?;
    assert!(cdi.finalizers().iter().any(|f| f == "operator.cdi.kubevirt.io"));
    let out = String::from_utf8_lossy(&cluster.kubectl(["get", "kubevirt", "-n", NAMESPACE])?.stdout).into_owned();
    assert!(out.contains("PHASE") && out.contains("Deployed"), "{out}");
    let out = String::from_utf8_lossy(&cluster.kubectl(["get", "cdi"])?.stdout).into_owned();
    assert!(out.contains("cdi") && out.contains("Deployed"), "{out}");
    for name in ["virt-api", "virt-controller"] {
        let d = deploys.get(name).await?;
        assert_eq!(
            image_of_deployment(&d),
            format!("{}/{}:{t1}", image_repository(), if name == "virt-api" { "virt-api" } else { "vm-controller" })
        );
        assert_eq!(d.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("virt-operator"));
        assert_eq!(d.annotations().get("kubevirt.io/install-strategy-version"), Some(&t1));
    }
    assert!(image_of_daemonset(&daemonsets.get("virt-handler").await?).ends_with(&format!("/node-agent:{t1}")));
    let dvc = cdi_deploys.get("cdi-deployment").await?;
    assert!(image_of_deployment(&dvc).ends_with(&format!("/datavolume-controller:{t1}")));
    assert_eq!(dvc.labels().get("app.kubernetes.io/managed-by").map(String::as_str), Some("cdi-operator"));
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let ca = secrets.get("kubevirt-ca").await?;
    let ca_pem = ca.data.as_ref().and_then(|d| d.get("tls.crt")).map(|b| b.0.clone()).unwrap_or_default();
    let api_certs = secrets.get("virt-api-certs").await?;
    let bundle = api_certs.data.as_ref().and_then(|d| d.get("ca.crt")).map(|b| b.0.clone()).unwrap_or_default();
    assert!(!ca_pem.is_empty() && bundle.starts_with(&ca_pem), "virt-api's certificate is not of the operator's CA");
    let hooks: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let hook = hooks.list(&Default::default()).await?.items.into_iter().find(|h| {
        h.webhooks.iter().flatten().any(|w| w.client_config.service.as_ref().is_some_and(|s| s.name == "virt-api"))
    });
    let ca_bundle =
        hook.and_then(|h| h.webhooks?.first()?.client_config.ca_bundle.clone()).map(|b| b.0).unwrap_or_default();
    assert_eq!(ca_bundle, bundle, "the webhooks trust the operator's CA bundle");
    let op = deploys.get("virt-operator").await?;
    assert!(deployment_rolled_out(&op) && op.spec.as_ref().and_then(|s| s.replicas) == Some(2));
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let holder = leases.get("virt-operator").await?.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    assert!(holder.starts_with("virt-operator-"), "lease holder {holder}");

    // A VM serving HTTP, and an import in progress.
    let env = VmiEnv::new(cluster.clone(), "operator").await?;
    env.create_ephemeral("web", None, |y| y)?;
    let vmi = env.wait_phase("web", Phase::Running, Duration::from_secs(240)).await?;
    let ip = vmi_ip(&vmi);
    poll_until("the guest's HTTP server", Duration::from_secs(120), || async { http_get(&ip).await.ok() }).await?;
    let launcher = env.launcher_pod(&vmi).await?.uid();

    // Metrics as a ServiceMonitor scrapes them: every endpoint of kubevirt-prometheus-metrics. The node agent
    // reports the guest's domain counters under upstream's names, and they move with the guest's traffic.
    let web = [("namespace", env.ns.name()), ("name", "web")];
    let node = vmi.status.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let rx = [web[0], web[1], ("interface", "default"), ("node", node.as_str())];
    let joined = |all: &[(String, String)]| all.iter().map(|(_, text)| text.as_str()).collect::<Vec<_>>().join("\n");
    // Every controller and operator replica reports its role; exactly one of each leads.
    let per_pod = scrape_service(&client, NAMESPACE, "kubevirt-prometheus-metrics").await?;
    for component in ["controller", "operator"] {
        let (leading, ready): (Vec<f64>, Vec<f64>) = per_pod
            .iter()
            .filter_map(|(_, t)| {
                let l = sample(t, &format!("kubevirt_virt_{component}_leading_status"), &[])?;
                Some((l, sample(t, &format!("kubevirt_virt_{component}_ready_status"), &[])?))
            })
            .unzip();
        assert_eq!(leading.len(), 2, "both {component} replicas report their role: {per_pod:?}");
        assert_eq!(leading.iter().sum::<f64>(), 1.0, "one {component} leads: {leading:?}");
        assert!(ready.iter().all(|r| *r == 1.0), "{component}: {ready:?}");
    }
    let cdi_ready: Vec<f64> = per_pod.iter().filter_map(|(_, t)| sample(t, "kubevirt_cdi_cr_ready", &[])).collect();
    assert_eq!(cdi_ready, [1.0], "the leading operator reports the CDI installation ready: {per_pod:?}");
    let first = joined(&per_pod);
    let received = sample(&first, "kubevirt_vmi_network_receive_bytes_total", &rx)
        .unwrap_or_else(|| panic!("no network sample for the VM on {node}:\n{first}"));
    for (name, at_least) in [
        ("kubevirt_vmi_memory_resident_bytes", 16.0 * 1024.0 * 1024.0),
        ("kubevirt_vmi_memory_domain_bytes", 64.0 * 1024.0 * 1024.0),
        ("kubevirt_vmi_cpu_usage_seconds_total", 0.1),
    ] {
        let v = sample(&first, name, &web).unwrap_or_else(|| panic!("no {name} for the VM:\n{first}"));
        assert!(v >= at_least, "{name} = {v}");
    }
    // The vCPU's own time, read from QEMU's `CPU 0/TCG` thread: the boot ran on it.
    let vcpu0 = [web[0], web[1], ("id", "0"), ("state", "running")];
    let on_cpu = sample(&first, "kubevirt_vmi_vcpu_seconds_total", &vcpu0);
    assert!(on_cpu.is_some_and(|s| s > 0.1), "vCPU 0's time: {on_cpu:?}\n{first}");
    assert!(sample(&first, "kubevirt_vmi_vcpu_delay_seconds_total", &vcpu0[..3]).is_some(), "{first}");
    let reads =
        sample(&first, "kubevirt_vmi_storage_read_traffic_bytes_total", &[web[0], web[1], ("drive", "containerdisk")]);
    assert!(reads.is_some_and(|b| b > 1_048_576.0), "the boot read its disk: {reads:?}");
    assert!(first.contains("# TYPE kubevirt_vmi_network_receive_bytes counter"), "{first}");
    assert!(sample(&first, "kubevirt_vmi_phase_count", &[("node", node.as_str()), ("phase", "running")]).is_some());
    for _ in 0..5 {
        http_get(&ip).await?;
    }
    let again = joined(&scrape_service(&client, NAMESPACE, "kubevirt-prometheus-metrics").await?);
    let received_after = sample(&again, "kubevirt_vmi_network_receive_bytes_total", &rx).unwrap_or_default();
    assert!(received_after > received, "the guest's HTTP answers are not counted: {received} → {received_after}");
    let cdi_metrics = scrape_service(&client, "cdi", "cdi-prometheus-metrics").await?;
    assert!(
        cdi_metrics.len() == 2
            && cdi_metrics.iter().all(|(_, t)| sample(t, "kubevirt_rs_datavolume_controller_api_requests_total", &[])
                .is_some_and(|n| n > 0.0)),
        "both DataVolume controllers behind cdi-prometheus-metrics: {cdi_metrics:?}"
    );
    // The leading DataVolume controller describes every StorageProfile (the cluster's default class `local`)
    // and counts no DataVolume waiting for a default class and no worker pod restarting often.
    let local = [("storageclass", "local"), ("provisioner", "kubevirt-rs.test/local"), ("complete", "true")];
    let local = [local[0], local[1], local[2], ("default", "true"), ("virtdefault", "false"), ("rwx", "false")];
    let profiles: Vec<f64> =
        cdi_metrics.iter().filter_map(|(_, t)| sample(t, "kubevirt_cdi_storageprofile_info", &local)).collect();
    assert_eq!(profiles, [1.0], "the leader alone describes the local StorageProfile: {cdi_metrics:?}");
    let leader = joined(&cdi_metrics);
    for name in ["kubevirt_cdi_datavolume_pending", "kubevirt_cdi_import_pods_high_restart"] {
        assert_eq!(sample(&leader, name, &[]), Some(0.0), "{name}: {leader}");
    }
    let dv_yaml = cdi_test_support::datavolume_yaml(
        "slow",
        &format!("    http:\n      url: \"{}\"", host_url(18080, "slow/small.raw")),
        "storage: {resources: {requests: {storage: 16Mi}}}",
    );
    apply_yaml(&client, env.ns.name(), &dv_yaml).await?;
    let dvs: Api<DataVolume> = Api::namespaced(client.clone(), env.ns.name());
    poll_until("the import to start", Duration::from_secs(120), || async {
        let dv = dvs.get_opt("slow").await.ok().flatten()?;
        (dv.status?.phase == Some(DataVolumePhase::ImportInProgress)).then_some(())
    })
    .await?;

    // The update: the KubeVirt object's imageTag, and the operator itself (what moves the CDI half).
    let repo = image_repository();
    let tag = t2.clone();
    tokio::task::spawn_blocking(move || release_images(&tag))
        .await
        .map_err(|e| kube_test_support::Error::ClusterUp(e.to_string()))??;
    kvs.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&serde_json::json!({"spec": {"imageTag": t2}})))
        .await?;
    apply_operator(&client, &format!("{repo}/virt-operator:{t2}")).await?;
    let start = Instant::now();
    let mut order: Vec<(&str, bool)> = Vec::new(); // component, and whether the one before had rolled out then
    let mut failures = Vec::new();
    let mut saw_update_condition = false;
    let mut cdi_rolled_while_importing = false;
    loop {
        if let Err(e) = http_get(&ip).await {
            failures.push(format!("{:?}: {e}", start.elapsed()));
        }
        // Read last-to-move first: a component seen updated is then compared with its predecessor's later state,
        // which can only be further along, so a reported violation is a real one.
        let api = deploys.get("virt-api").await?;
        let controller = deploys.get("virt-controller").await?;
        let handler = daemonsets.get("virt-handler").await?;
        let now_at = [
            ("virt-handler", image_of_daemonset(&handler).ends_with(&t2), daemonset_rolled_out(&handler)),
            ("virt-controller", image_of_deployment(&controller).ends_with(&t2), deployment_rolled_out(&controller)),
            ("virt-api", image_of_deployment(&api).ends_with(&t2), deployment_rolled_out(&api)),
        ];
        for (i, (name, updated, _)) in now_at.iter().enumerate() {
            if *updated && !order.iter().any(|(n, _)| n == name) {
                let before_done = i == 0 || (now_at[i - 1].1 && now_at[i - 1].2);
                order.push((name, before_done));
            }
        }
        let kv = kvs.get("kubevirt").await?;
        if condition(&kv, "Progressing")
            .is_some_and(|c| c.1 == "UpdateInProgress" && c.2.contains(&t1) && c.2.contains(&t2))
        {
            saw_update_condition = true;
        }
        let dvc = cdi_deploys.get("cdi-deployment").await?;
        if image_of_deployment(&dvc).ends_with(&t2) && deployment_rolled_out(&dvc) {
            let dv = dvs.get("slow").await?;
            cdi_rolled_while_importing |= dv.status.and_then(|s| s.phase) == Some(DataVolumePhase::ImportInProgress);
        }
        let done = wait_deployed(&client, &t2, Duration::from_secs(1)).await.is_ok();
        if done {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(600), "the update did not finish: {order:?}");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(failures.is_empty(), "the VM stopped answering during the update: {failures:?}");
    let names: Vec<&str> = order.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["virt-handler", "virt-controller", "virt-api"], "update order");
    assert!(
        order.iter().all(|(_, before_done)| *before_done),
        "a component moved before the previous one rolled out: {order:?}"
    );
    assert!(saw_update_condition, "no UpdateInProgress condition was reported");
    let kv = kvs.get("kubevirt").await?;
    assert_eq!(kv.status.as_ref().and_then(|s| s.observed_kube_virt_version.clone()), Some(t2.clone()));
    let vmi = env.vmis().get("web").await?;
    assert_eq!(vmi.status.as_ref().and_then(|s| s.phase.clone()), Some(Phase::Running));
    assert_eq!(env.launcher_pod(&vmi).await?.uid(), launcher, "the VM kept its launcher pod");
    let dv =
        cdi_test_support::wait_dv_phase(&dvs, "slow", DataVolumePhase::Succeeded, Duration::from_secs(300)).await?;
    assert_eq!(dv.status.and_then(|s| s.progress).as_deref(), Some("100.0%"));
    cdi_test_support::assert_volume_matches(&client, env.ns.name(), "slow", &cdi_test_support::corpus("small.raw"))
        .await?;
    assert!(cdi_rolled_while_importing, "the CDI controller was not updated while the import ran");

    // Upstream's PodDisruptionBudgets of the control plane, then the spec's customization: placement of the node
    // agents and a strategic-merge patch of virt-api roll out while the VM keeps answering; a patch that cannot be
    // applied is reported as the installation's failure, by name, and the installation recovers without it.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NAMESPACE);
    for name in ["virt-api-pdb", "virt-controller-pdb"] {
        let spec = pdbs.get(name).await?.spec.unwrap_or_default();
        assert_eq!(spec.min_available, Some(IntOrString::Int(1)), "{name}");
    }
    let annotation = "kubevirt-rs.io/customized";
    let patch = serde_json::json!({"metadata": {"annotations": {annotation: "yes"}}}).to_string();
    let custom = serde_json::json!({"spec": {
        "workloads": {"nodePlacement": {"nodeSelector": {"kubernetes.io/os": "linux"}}},
        "customizeComponents": {"patches": [
            {"resourceType": "Deployment", "resourceName": "virt-api", "type": "strategic", "patch": patch}]}}});
    kvs.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&custom)).await?;
    let start = Instant::now();
    loop {
        http_get(&ip).await?;
        let handler = daemonsets.get("virt-handler").await?;
        let selector = handler.spec.as_ref().and_then(|s| s.template.spec.as_ref()?.node_selector.clone());
        let placed = selector.is_some_and(|s| s.get("kubernetes.io/os").map(String::as_str) == Some("linux"));
        let api = deploys.get("virt-api").await?;
        let patched = api.annotations().get(annotation).map(String::as_str) == Some("yes");
        if placed
            && patched
            && daemonset_rolled_out(&handler)
            && wait_deployed(&client, &t2, Duration::from_secs(1)).await.is_ok()
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the customization did not roll out: placed {placed}, patched {patched}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let bad = serde_json::json!({"spec": {"customizeComponents": {"patches": [
        {"resourceType": "Deployment", "resourceName": "virt-api", "type": "yaml", "patch": "{}"}]}}});
    kvs.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&bad)).await?;
    let want = "An error occurred during deployment: spec.customizeComponents.patches[0].type \"yaml\" is not json, merge or strategic";
    poll_until("the refused patch to be reported", Duration::from_secs(60), || async {
        let kv = kvs.get("kubevirt").await.ok()?;
        (condition(&kv, "Degraded") == Some(("True".into(), "DeploymentFailed".into(), want.into()))).then_some(())
    })
    .await?;
    kvs.patch(
        "kubevirt",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"spec": {"customizeComponents": null}})),
    )
    .await?;
    wait_deployed(&client, &t2, Duration::from_secs(120)).await?;
    http_get(&ip).await?;

    // Upstream's uninstall guards: with BlockUninstallIfWorkloadsExist, deleting is refused while workloads exist.
    let block = serde_json::json!({"spec": {"uninstallStrategy": "BlockUninstallIfWorkloadsExist"}});
    kvs.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&block)).await?;
    cdis.patch("cdi", &PatchParams::default(), &Patch::Merge(&block)).await?;
    let out = cluster.kubectl(["delete", "kubevirt", "kubevirt", "-n", NAMESPACE, "--wait=false"])?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success()
            && text.contains("Rejecting the uninstall request, since there are still Virtual Machine Instances present. Either delete all KubeVirt related workloads or change the uninstall strategy before uninstalling KubeVirt."),
        "{text}"
    );
    let out = cluster.kubectl(["delete", "cdi", "cdi", "--wait=false"])?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !out.status.success()
            && text.contains("rejecting the uninstall request, since there are still ")
            && text.contains(" DataVolumes present. Either delete all DataVolumes or change the uninstall strategy"),
        "{text}"
    );
    assert!(kvs.get("kubevirt").await?.metadata.deletion_timestamp.is_none());
    let remove = serde_json::json!({"spec": {"uninstallStrategy": "RemoveWorkloads"}});
    kvs.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&remove)).await?;
    cdis.patch("cdi", &PatchParams::default(), &Patch::Merge(&remove)).await?;

    // Uninstall: deleting the objects removes what they installed (the VM goes with its CRD).
    kvs.delete("kubevirt", &DeleteParams::default()).await?;
    poll_until("the KubeVirt object to be gone", Duration::from_secs(300), || async {
        kvs.get_opt("kubevirt").await.ok()?.is_none().then_some(())
    })
    .await?;
    assert!(deploys.get_opt("virt-api").await?.is_none() && deploys.get_opt("virt-controller").await?.is_none());
    assert!(daemonsets.get_opt("virt-handler").await?.is_none());
    assert!(secrets.get_opt("kubevirt-ca").await?.is_none());
    let out = String::from_utf8_lossy(&cluster.kubectl(["get", "crd", "virtualmachineinstances.kubevirt.io"])?.stderr)
        .into_owned();
    assert!(out.contains("NotFound"), "{out}");
    assert!(deploys.get_opt("virt-operator").await?.is_some(), "the operator stays");
    cdis.delete("cdi", &DeleteParams::default()).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    poll_until("the CDI object and namespace to be gone", Duration::from_secs(300), || async {
        (cdis.get_opt("cdi").await.ok()?.is_none() && namespaces.get_opt("cdi").await.ok()?.is_none()).then_some(())
    })
    .await?;
    Ok(())
}
