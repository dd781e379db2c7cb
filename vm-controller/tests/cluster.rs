//! VirtualMachineInstances boot for real on the test cluster (issue 12): `kubectl` applies upstream's example
//! manifests (containerDisk images rewritten to the test guest, `tests/guest/`), our stack (installed from
//! `deploy/` by `stack_support::deploy_stack`, as `tests/cluster/install-stack` does) renders the virt-launcher
//! pod, the node agent starts the domain through the pod's own libvirtd, and QEMU (TCG) boots the guest. Each test
//! proves the boot from the guest itself: its marker on the serial console (`kubectl logs -c guest-console-log`),
//! its HTTP server reached at the VMI's IP through the masquerade binding.
//!
//! `#[ignore]`d like every cluster test; `scripts/test.sh` runs them with
//! `cargo test -p vm-controller --test cluster -- --ignored` (after `cargo build --workspace --bins`).

use std::time::{Duration, Instant};

use crds::kubevirt::VirtualMachineInstance;
use crds::kubevirt::vmi::{
    ConditionStatus, VirtualMachineInstanceConditionType as Type, VirtualMachineInstancePhase as Phase,
};
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams};
use kube_test_support::{Result, TestCluster, poll_object};
use stack_support::vmi::{LEASE, MARKER, POWEROFF, VmiEnv, condition, http_get, interface_ip, vmi_ip};
use stack_support::{StackOptions, deploy_stack, local_images, upstream_example};

const BOOT_TIMEOUT: Duration = Duration::from_secs(180);

async fn setup(prefix: &str) -> Result<VmiEnv> {
    let cluster = TestCluster::start_or_reuse().await?;
    deploy_stack(&cluster, &StackOptions::default()).await?;
    VmiEnv::new(cluster, prefix).await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn upstream_vmi_ephemeral_boots_with_upstreams_pod_and_serves_http_through_masquerade() -> Result<()> {
    let env = setup("vmi-ephemeral").await?;
    let created = Instant::now();
    env.apply_example("vmi-ephemeral.yaml")?;
    let vmi = env.wait_phase("vmi-ephemeral", Phase::Running, BOOT_TIMEOUT).await?;
    let to_running = created.elapsed();
    let status = vmi.status.clone().unwrap_or_default();

    // The launcher pod: upstream's name, labels, annotations, resources.
    let pod = env.launcher_pod(&vmi).await?;
    let pod_name = pod.name_any();
    assert!(
        pod_name.starts_with("virt-launcher-vmi-ephemeral-")
            && pod_name.len() == "virt-launcher-vmi-ephemeral-".len() + 5,
        "{pod_name}"
    );
    let labels = pod.labels();
    assert_eq!(labels.get("kubevirt.io").map(String::as_str), Some("virt-launcher"));
    assert_eq!(labels.get("vm.kubevirt.io/name").map(String::as_str), Some("vmi-ephemeral"));
    assert_eq!(labels.get("kubevirt.io/created-by"), vmi.uid().as_ref());
    assert_eq!(labels.get("special").map(String::as_str), Some("vmi-ephemeral"), "VMI labels are copied");
    let spec = pod.spec.clone().unwrap_or_default();
    let compute = spec.containers.iter().find(|c| c.name == "compute").cloned().unwrap_or_default();
    let requests = compute.resources.and_then(|r| r.requests).unwrap_or_default();
    let memory = requests.get("memory").map(|q| q.0.clone()).unwrap_or_default();
    let overhead: u64 =
        pod.annotations().get("kubevirt.io/memory-overhead-bytes").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(overhead > 200 << 20, "overhead {overhead}");
    assert_eq!(memory, ((128u64 << 20) + overhead).to_string(), "memory request = guest + overhead");
    assert_eq!(spec.node_selector.unwrap_or_default().get("kubevirt.io/schedulable").map(String::as_str), Some("true"));

    // Status: node, IP = pod IP, conditions.
    let pod_ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
    let ip = vmi_ip(&vmi);
    assert_eq!(ip, pod_ip);
    assert_eq!(status.node_name.as_deref(), spec.node_name.as_deref());
    assert_eq!(vmi.labels().get("kubevirt.io/nodeName"), status.node_name.as_ref());
    assert_eq!(condition(&vmi, Type::LiveMigratable), Some(ConditionStatus::True), "masquerade is migratable");
    let vmi = poll_object(&env.vmis(), "vmi-ephemeral", Duration::from_secs(30), |v: &VirtualMachineInstance| {
        condition(v, Type::Ready) == Some(ConditionStatus::True)
    })
    .await?;
    assert_eq!(vmi.phase(), Phase::Running);

    // `kubectl get vmi` shows upstream's columns.
    let table = env.kubectl(&["get", "vmi", "vmi-ephemeral"])?;
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    assert_eq!(header, ["NAME", "AGE", "PHASE", "IP", "NODENAME", "READY"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!((row[0], row[2], row[3], row[5]), ("vmi-ephemeral", "Running", ip.as_str(), "True"), "{table}");

    // The guest itself: its marker on the serial console, its HTTP server through the masquerade binding.
    env.wait_console(&pod_name, MARKER, BOOT_TIMEOUT).await?;
    let to_marker = created.elapsed();
    // The lease line follows the first marker once udhcpc is done.
    let log = env.wait_console(&pod_name, "KUBEVIRT-RS-GUEST-IP eth0", BOOT_TIMEOUT).await?;
    assert!(log.contains("KUBEVIRT-RS-GUEST-IP eth0 10.0.2.2/24"), "DHCP inside the pod gave 10.0.2.2:\n{log}");
    let page = http_get(&ip).await?;
    assert!(page.contains(MARKER), "{page}");
    assert!(page.contains("addresses=10.0.2.2"), "the guest's own address is the masquerade one: {page}");
    eprintln!("vmi-ephemeral: Running after {to_running:?}, marker after {to_marker:?}");

    // Delete with grace 0: destroyed at once, pod and VMI gone.
    env.vmis().delete("vmi-ephemeral", &DeleteParams::default()).await?;
    env.wait_gone("vmi-ephemeral", Duration::from_secs(60)).await?;
    env.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn deleting_a_vmi_shuts_the_guest_down_by_acpi_within_the_grace_period() -> Result<()> {
    let env = setup("vmi-acpi").await?;
    let yaml = local_images(&upstream_example("vmi-ephemeral.yaml")?, &env.image)
        .replace("name: vmi-ephemeral", "name: vmi-acpi")
        .replace("terminationGracePeriodSeconds: 0", "terminationGracePeriodSeconds: 60");
    env.kubectl_manifest("create", &yaml)?;
    let vmi = env.wait_phase("vmi-acpi", Phase::Running, BOOT_TIMEOUT).await?;
    let pod = env.launcher_pod(&vmi).await?.name_any();
    env.wait_console(&pod, MARKER, BOOT_TIMEOUT).await?;
    // Until the VMI is gone: the phase libvirt's state gave (a guest that powered itself off is Succeeded, a
    // destroyed one Failed) and the console (the pod lingers a moment after the guest stopped).
    let deleted = Instant::now();
    env.vmis().delete("vmi-acpi", &DeleteParams::default()).await?;
    let (mut phases, mut log) = (Vec::new(), String::new());
    loop {
        let vmi = env.vmis().get_opt("vmi-acpi").await?;
        let pods = env.pods().list(&ListParams::default().labels("kubevirt.io=virt-launcher")).await?;
        if let Some(p) = vmi.as_ref().map(|v| v.phase()).filter(|p| phases.last() != Some(p)) {
            phases.push(p);
        }
        let console = env.console(&pod);
        if console.len() > log.len() {
            log = console;
        }
        if vmi.is_none() && pods.items.is_empty() {
            break;
        }
        assert!(deleted.elapsed() < Duration::from_secs(90), "not gone after 90 s; phases {phases:?}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let took = deleted.elapsed();
    assert!(phases.contains(&Phase::Succeeded), "the guest powered itself off: phases {phases:?}");
    assert!(log.contains(POWEROFF), "the guest saw the ACPI power button:\n{log}");
    assert!(took < Duration::from_secs(60), "gone within the grace period, took {took:?}");
    env.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn upstream_vmi_sata_nocloud_masquerade_and_migratable_boot() -> Result<()> {
    let env = setup("vmi-examples").await?;
    let names = ["vmi-sata", "vmi-nocloud", "vmi-masquerade", "vmi-migratable"];
    for name in names {
        env.apply_example(&format!("{name}.yaml"))?;
    }
    let mut pods = Vec::new();
    for name in names {
        let vmi = env.wait_phase(name, Phase::Running, BOOT_TIMEOUT).await?;
        let pod = env.launcher_pod(&vmi).await?.name_any();
        env.wait_console(&pod, LEASE, BOOT_TIMEOUT).await?;
        pods.push((name, vmi, pod));
    }
    for (name, vmi, pod) in &pods {
        let xml = env.domain_xml(pod, name)?;
        let ip = vmi_ip(vmi);
        match *name {
            "vmi-sata" => {
                // No disks listed: the volume's disk is defaulted (virt-api) to SATA; no networks: the default
                // interface (masquerade on this cluster) on the pod network.
                assert!(xml.contains("bus='sata'"), "{xml}");
                assert!(!xml.contains("bus='virtio'/>\n      <alias name='ua-containerdisk'"), "{xml}");
                let page = http_get(&ip).await?;
                assert!(page.contains("addresses=10.0.2.2"), "default masquerade interface: {page}");
            }
            "vmi-nocloud" => {
                let log = env.wait_console(pod, "KUBEVIRT-RS-USERDATA-END", BOOT_TIMEOUT).await?;
                assert!(log.contains("printed from cloud-init userdata"), "the user-data reached the guest:\n{log}");
                assert!(log.contains("KUBEVIRT-RS-METADATA local-hostname=vmi-nocloud"), "{log}");
                assert!(
                    log.contains("KUBEVIRT-RS-USERDATA-BEGIN dev=/dev/vdb fs=iso9660"),
                    "cloud-init ISO as the second virtio disk:\n{log}"
                );
                // The emptyDisk: a 2Gi qcow2 of the launcher's.
                assert!(xml.contains("<alias name='ua-emptydisk'/>"), "{xml}");
            }
            "vmi-masquerade" => {
                // Only port 80 is forwarded, and it reaches the guest's server.
                let page = http_get(&ip).await?;
                assert!(page.contains(MARKER) && page.contains("addresses=10.0.2.2"), "{page}");
                // 1024M = 976562.5 KiB, which libvirt aligns up to whole MiB (977 MiB).
                assert!(xml.contains("<memory unit='KiB'>1000448</memory>"), "1024M guest memory: {xml}");
            }
            _ => {
                assert_eq!(condition(vmi, Type::LiveMigratable), Some(ConditionStatus::True));
                let page = http_get(&ip).await?;
                assert!(page.contains(MARKER), "{page}");
            }
        }
    }
    for name in names {
        env.vmis().delete(name, &DeleteParams::default()).await?;
    }
    for name in names {
        env.wait_gone(name, Duration::from_secs(90)).await?;
    }
    env.ns.delete().await
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up, with Multus) and the stack (tests/cluster/install-stack)"]
async fn upstream_vmi_multus_examples_boot_with_the_secondary_nic_bridged_to_the_ptp_network() -> Result<()> {
    let env = setup("vmi-multus").await?;
    // The cluster's `ptp` NetworkAttachmentDefinition (tests/cluster/multus), copied into the test namespace: the
    // examples name it without a namespace.
    let config = env.kubectl_global(&[
        "get",
        "network-attachment-definitions.k8s.cni.cncf.io",
        "ptp-conf",
        "-n",
        "default",
        "-o",
        "jsonpath={.spec.config}",
    ])?;
    let nad = format!(
        "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {{name: ptp-conf}}\nspec:\n  config: {}\n",
        serde_json::Value::String(config)
    );
    env.kubectl_manifest("create", &nad)?;
    let names = ["vmi-multus-ptp", "vmi-multus-multiple-net"];
    for name in names {
        env.apply_example(&format!("{name}.yaml"))?;
    }
    for name in names {
        let vmi = env.wait_phase(name, Phase::Running, BOOT_TIMEOUT).await?;
        let pod = env.launcher_pod(&vmi).await?;
        let pod_name = pod.name_any();
        // The launcher pod asks Multus for the network on upstream's hashed interface name.
        let networks = pod.annotations().get("k8s.v1.cni.cncf.io/networks").cloned().unwrap_or_default();
        assert!(networks.contains("\"ptp-conf\"") && networks.contains("pode31d7ce2712"), "{networks}");
        // The guest NIC on the ptp network: its lease (the address Multus gave the pod interface, moved to the
        // guest), and the VMI reports that address as Multus reported it.
        let nic = if name == "vmi-multus-ptp" { "eth0" } else { "eth1" };
        let vmi = poll_object(&env.vmis(), name, Duration::from_secs(60), |v: &VirtualMachineInstance| {
            interface_ip(v, "ptp").is_some()
        })
        .await?;
        let ip = interface_ip(&vmi, "ptp").unwrap_or_default();
        assert!(ip.starts_with("10.1.1."), "the ptp network's address: {ip}");
        let log = env.wait_console(&pod_name, &format!("KUBEVIRT-RS-GUEST-IP {nic} {ip}/24"), BOOT_TIMEOUT).await?;
        let xml = env.domain_xml(&pod_name, name)?;
        assert!(xml.contains("<target dev='tape31d7ce2712' managed='no'/>"), "{xml}");
        // The guest answers on its ptp address, from the node (the ptp plugin's host route).
        let page = http_get(&ip).await?;
        assert!(page.contains(MARKER) && page.contains(&ip), "{page}\n--- console:\n{log}");
        if name == "vmi-multus-multiple-net" {
            // The pod network still works beside it: masquerade on eth0, the default route stays there.
            assert!(log.contains("KUBEVIRT-RS-GUEST-IP eth0 10.0.2.2/24 router=10.0.2.1"), "{log}");
            let page = http_get(&vmi_ip(&vmi)).await?;
            assert!(page.contains("addresses=10.0.2.2"), "{page}");
        }
    }
    for name in names {
        env.vmis().delete(name, &DeleteParams::default()).await?;
    }
    for name in names {
        env.wait_gone(name, Duration::from_secs(90)).await?;
    }
    env.ns.delete().await
}

/// A DataVolume importing the test guest's containerDisk from the test registry (reached from pods through the
/// node's NAT) into a `mode` claim.
fn guest_datavolume(name: &str, image: &str, mode: &str) -> String {
    let url = image.replace("127.0.0.1", kube_test_support::POD_GATEWAY);
    format!(
        "apiVersion: cdi.kubevirt.io/v1beta1\nkind: DataVolume\nmetadata: {{name: {name}}}\nspec:\n  source:\n    registry:\n      url: \"docker://{url}\"\n  storage:\n    volumeMode: {mode}\n    resources: {{requests: {{storage: 256Mi}}}}\n"
    )
}

#[tokio::test]
#[ignore = "needs the test cluster (tests/cluster/up) and the stack (tests/cluster/install-stack)"]
async fn upstream_vmi_pvc_boots_from_datavolumes_in_filesystem_and_block_mode() -> Result<()> {
    let env = setup("vmi-pvc").await?;
    // The test registry is plain HTTP: CDI must be told (the DataVolume tests' registry peer stays listed).
    let registry = kube_test_support::pod_registry();
    let insecure = format!(
        "apiVersion: cdi.kubevirt.io/v1beta1\nkind: CDIConfig\nmetadata: {{name: config}}\nspec:\n  insecureRegistries: [\"{}:19500\", \"{registry}\"]\n",
        kube_test_support::POD_GATEWAY
    );
    kube_test_support::apply_yaml(&env.client, "", &insecure).await?;
    // The VMIs first: they wait in Pending for their DataVolumes (upstream's gating), then boot from them.
    env.apply_example("vmi-pvc.yaml")?;
    let block_vmi = local_images(&upstream_example("vmi-pvc.yaml")?, &env.image)
        .replace("name: vmi-pvc", "name: vmi-pvc-block")
        .replace("claimName: disk-alpine", "claimName: disk-alpine-block");
    env.kubectl_manifest("create", &block_vmi)?;
    let pending = poll_object(&env.vmis(), "vmi-pvc", Duration::from_secs(30), |v: &VirtualMachineInstance| {
        condition(v, Type::Synchronized) == Some(ConditionStatus::False)
    })
    .await?;
    assert_eq!(pending.phase(), Phase::Pending);
    let sync = pending
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == Type::Synchronized))
        .cloned()
        .unwrap_or_default();
    assert_eq!(sync.reason.as_deref(), Some("FailedPvcNotFound"));
    let expected = format!("PVC {}/disk-alpine does not exist, waiting for it to appear", env.ns.name());
    assert_eq!(sync.message.as_deref(), Some(expected.as_str()));
    for (name, mode) in [("disk-alpine", "Filesystem"), ("disk-alpine-block", "Block")] {
        env.kubectl_manifest("create", &guest_datavolume(name, &env.image, mode))?;
    }
    for (vmi_name, mode) in [("vmi-pvc", "file"), ("vmi-pvc-block", "block")] {
        let vmi = env.wait_phase(vmi_name, Phase::Running, Duration::from_secs(420)).await?;
        let pod = env.launcher_pod(&vmi).await?.name_any();
        env.wait_console(&pod, LEASE, BOOT_TIMEOUT).await?;
        let xml = env.domain_xml(&pod, vmi_name)?;
        assert!(xml.contains(&format!("<disk type='{mode}' device='disk'")), "{mode} disk: {xml}");
        let ip = vmi_ip(&vmi);
        let page = http_get(&ip).await?;
        assert!(page.contains(MARKER), "{page}");
        // PVCs that are not ReadWriteMany make the VMI not live-migratable, with upstream's reason.
        assert_eq!(condition(&vmi, Type::LiveMigratable), Some(ConditionStatus::False));
    }
    for name in ["vmi-pvc", "vmi-pvc-block"] {
        env.vmis().delete(name, &DeleteParams::default()).await?;
        env.wait_gone(name, Duration::from_secs(90)).await?;
    }
    env.ns.delete().await
}
