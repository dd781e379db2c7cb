//! Unit tests of the converter: options and refusals one by one (the upstream examples are golden-tested in
//! `tests/golden.rs`).

use serde_json::{Value, json};

use super::*;

/// A minimal VMI (one virtio containerDisk `cd`, 64Mi, no network), patched by `patch`.
fn vmi(patch: impl FnOnce(&mut Value)) -> VirtualMachineInstance {
    let mut v = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "t", "namespace": "ns", "uid": "11111111-2222-4333-8444-555555555555"},
        "spec": {
            "domain": {
                "devices": {"disks": [{"name": "cd", "disk": {"bus": "virtio"}}]},
                "memory": {"guest": "64Mi"}
            },
            "volumes": [{"name": "cd", "containerDisk": {"image": "x"}}]
        }
    });
    patch(&mut v);
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

fn ctx() -> ConvertContext {
    ConvertContext::new(Acceleration::Emulation).with_container_disk_format("cd", ImageFormat::Qcow2)
}

fn xml(patch: impl FnOnce(&mut Value)) -> String {
    to_domain_xml(&vmi(patch), &ctx()).unwrap_or_else(|e| panic!("{e}"))
}

fn err(patch: impl FnOnce(&mut Value)) -> ConvertError {
    to_domain_xml(&vmi(patch), &ctx()).err().unwrap_or_else(|| panic!("converted"))
}

fn has(xml: &str, want: &str) {
    assert!(xml.contains(want), "no {want:?} in\n{xml}");
}

fn lacks(xml: &str, unwanted: &str) {
    assert!(!xml.contains(unwanted), "{unwanted:?} in\n{xml}");
}

#[test]
fn identity_memory_and_defaults() {
    let x = xml(|_| {});
    has(&x, "<domain type='qemu'>\n  <name>ns_t</name>\n  <uuid>11111111-2222-4333-8444-555555555555</uuid>");
    has(&x, "<deletionGracePeriodSeconds>30</deletionGracePeriodSeconds>");
    has(&x, "<memory unit='b'>67108864</memory>");
    has(&x, "<vcpu placement='static'>1</vcpu>");
    has(&x, "<type arch='x86_64' machine='q35'>hvm</type>");
    has(&x, "<features>\n    <acpi/>\n  </features>");
    has(&x, "<cpu mode='host-model'>\n    <topology sockets='1' dies='1' cores='1' threads='1'/>");
    has(&x, "<clock offset='utc'/>");
    has(&x, "<on_reboot>restart</on_reboot>");
    // Memory from requests, then limits; the firmware UUID wins over the VMI UID.
    let x = xml(|v| {
        v["spec"]["domain"]["memory"] = json!({});
        v["spec"]["domain"]["resources"] = json!({"requests": {"memory": "1G"}, "limits": {"memory": "2G"}});
        v["spec"]["domain"]["firmware"] = json!({"uuid": "AAAAAAAA-2222-4333-8444-555555555555", "serial": "s-1"});
        v["spec"]["domain"]["rebootPolicy"] = json!("Terminate");
        v["spec"]["terminationGracePeriodSeconds"] = json!(0);
    });
    has(&x, "<memory unit='b'>1000000000</memory>");
    has(&x, "<uuid>aaaaaaaa-2222-4333-8444-555555555555</uuid>");
    has(&x, "<entry name='serial'>s-1</entry>");
    has(&x, "<deletionGracePeriodSeconds>0</deletionGracePeriodSeconds>");
    has(&x, "<on_reboot>destroy</on_reboot>");
    let x = xml(|v| {
        v["spec"]["domain"]["memory"] = json!({});
        v["spec"]["domain"]["resources"] = json!({"limits": {"memory": "128Mi"}});
    });
    has(&x, "<memory unit='b'>134217728</memory>");
    let kvm = to_domain_xml(&vmi(|_| {}), &ConvertContext { acceleration: Acceleration::Kvm, ..ctx() });
    has(&kvm.unwrap_or_default(), "<domain type='kvm'>");
}

#[test]
fn identity_and_memory_errors() {
    assert_eq!(err(|v| v["metadata"]["uid"] = Value::Null), ConvertError::MissingMetadata("uid"));
    assert_eq!(err(|v| v["metadata"]["namespace"] = Value::Null), ConvertError::MissingMetadata("namespace"));
    assert_eq!(err(|v| v["spec"]["domain"]["memory"] = json!({})), ConvertError::NoMemory);
    assert!(matches!(
        err(|v| v["spec"]["domain"]["firmware"] = json!({"uuid": "not-a-uuid"})),
        ConvertError::Invalid { reason: "not a UUID", .. }
    ));
    assert!(matches!(
        err(|v| v["spec"]["domain"]["memory"]["guest"] = json!("lots")),
        ConvertError::Invalid { reason: "not a quantity", .. }
    ));
    assert!(matches!(
        err(|v| v["spec"]["domain"]["memory"]["maxGuest"] = json!("129Mi")),
        ConvertError::Invalid { reason: "not a multiple of the 2 MiB hotplug block", .. }
    ));
    // maxGuest equal to guest is no hotplug.
    let x = xml(|v| v["spec"]["domain"]["memory"]["maxGuest"] = json!("64Mi"));
    lacks(&x, "maxMemory");
    lacks(&x, "virtio-mem");
}

#[test]
fn memory_hotplug_is_a_virtio_mem_device_on_numa_node_0() {
    let x = xml(|v| {
        v["spec"]["domain"]["memory"] = json!({"guest": "1Gi", "maxGuest": "4Gi"});
        v["spec"]["domain"]["cpu"] = json!({"sockets": 1, "maxSockets": 2});
    });
    has(&x, "<maxMemory slots='1' unit='b'>4294967296</maxMemory>\n  <memory unit='b'>1073741824</memory>");
    has(&x, "<numa>\n      <cell id='0' cpus='0-1' memory='1073741824' unit='b'/>\n    </numa>");
    has(
        &x,
        "<memory model='virtio-mem'>\n      <target>\n        <size unit='b'>3221225472</size>\n        <node>0</node>\n        <block unit='b'>2097152</block>\n        <requested unit='b'>0</requested>",
    );
    // Booted with guestAtBoot; the spec's guest beyond it is plugged in from the start.
    let x = xml(|v| {
        v["spec"]["domain"]["memory"] = json!({"guest": "1536Mi", "maxGuest": "2Gi"});
        v["status"] = json!({"memory": {"guestAtBoot": "1Gi"}});
    });
    has(&x, "<memory unit='b'>1073741824</memory>");
    has(&x, "<cell id='0' cpus='0' memory='1073741824' unit='b'/>");
    has(&x, "<size unit='b'>1073741824</size>");
    has(&x, "<requested unit='b'>536870912</requested>");
}

#[test]
fn cpu_models_topology_and_hotplug() {
    let model = |m: &str, accel| {
        let vmi = vmi(|v| v["spec"]["domain"]["cpu"] = json!({"model": m}));
        to_domain_xml(&vmi, &ConvertContext { acceleration: accel, ..ctx() }).unwrap_or_else(|e| panic!("{e}"))
    };
    has(&model("host-passthrough", Acceleration::Kvm), "<cpu mode='host-passthrough'>");
    has(&model("host-passthrough", Acceleration::Emulation), "<cpu mode='maximum'>");
    has(&model("host-model", Acceleration::Emulation), "<cpu mode='host-model'>");
    has(&model("Westmere", Acceleration::Emulation), "<cpu mode='custom'>\n    <model>Westmere</model>\n    <topology");
    let x = xml(|v| {
        v["spec"]["domain"]["cpu"] = json!({"sockets": 2, "cores": 2, "threads": 2, "maxSockets": 3,
            "features": [{"name": "vmx", "policy": "disable"}, {"name": "pcid"}]});
    });
    has(&x, "<vcpu placement='static' current='8'>12</vcpu>");
    has(&x, "<vcpu id='3' enabled='yes' hotpluggable='no'/>");
    has(&x, "<vcpu id='4' enabled='yes' hotpluggable='yes'/>");
    has(&x, "<vcpu id='8' enabled='no' hotpluggable='yes'/>");
    lacks(&x, "<vcpu id='12'");
    has(&x, "<topology sockets='3' dies='1' cores='2' threads='2'/>");
    has(&x, "<feature policy='disable' name='vmx'/>\n    <feature policy='require' name='pcid'/>");
    // Without a topology, sockets come from the CPU limit, else the request (rounded up).
    let x = xml(|v| v["spec"]["domain"]["resources"] = json!({"requests": {"cpu": "1500m"}}));
    has(&x, "<vcpu placement='static'>2</vcpu>");
    let x = xml(|v| v["spec"]["domain"]["resources"] = json!({"requests": {"cpu": "1"}, "limits": {"cpu": "3"}}));
    has(&x, "<vcpu placement='static'>3</vcpu>");
    assert!(matches!(
        err(|v| v["spec"]["domain"]["cpu"] = json!({"sockets": 2, "maxSockets": 1})),
        ConvertError::Invalid { reason: "below sockets", .. }
    ));
    assert!(matches!(
        err(|v| v["spec"]["domain"]["cpu"] = json!({"cores": 0})),
        ConvertError::Invalid { reason: "must be positive", .. }
    ));
}

#[test]
fn disk_names_follow_linux_per_prefix() {
    assert_eq!(device_name("vd", 0), "vda");
    assert_eq!(device_name("vd", 25), "vdz");
    assert_eq!(device_name("sd", 26), "sdaa");
    assert_eq!(device_name("sd", 701), "sdzz");
    assert_eq!(device_name("sd", 702), "sdaaa");
    let x = xml(|v| {
        v["spec"]["domain"]["devices"]["disks"] = json!([
            {"name": "cd", "disk": {"bus": "sata"}},
            {"name": "e1", "disk": {"bus": "virtio"}},
            {"name": "e2", "disk": {"bus": "scsi"}},
            {"name": "e3"},
            {"name": "ci", "cdrom": {"bus": "sata", "tray": "open"}},
            {"name": "e4", "disk": {"bus": "usb"}}
        ]);
        v["spec"]["volumes"] = json!([
            {"name": "cd", "containerDisk": {"image": "x"}},
            {"name": "e1", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "e2", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "e3", "emptyDisk": {"capacity": "1Gi"}},
            {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config"}},
            {"name": "e4", "emptyDisk": {"capacity": "1Gi"}}
        ]);
    });
    for (dev, bus) in
        [("sda", "sata"), ("vda", "virtio"), ("sdb", "scsi"), ("sdc", "sata"), ("sdd", "sata"), ("sde", "usb")]
    {
        has(&x, &format!("<target dev='{dev}' bus='{bus}'"));
    }
    has(&x, "<target dev='sdd' bus='sata' tray='open'/>\n      <readonly/>");
    has(
        &x,
        "<disk type='file' device='cdrom'>\n      <driver name='qemu' type='raw' cache='none' error_policy='stop'/>",
    );
    has(&x, "<controller type='usb' index='0' model='qemu-xhci'/>");
    has(&x, "<controller type='scsi' index='0' model='virtio-non-transitional'/>");
    has(&x, "<source file='/var/run/kubevirt-ephemeral-disks/empty-disks/e1.qcow2'/>");
    has(&x, "<source file='/var/run/kubevirt-ephemeral-disks/cloud-init/ci/noCloud.iso'/>");
}

#[test]
fn disk_options() {
    let x = xml(|v| {
        let d = &mut v["spec"]["domain"]["devices"];
        d["useVirtioTransitional"] = json!(true);
        d["blockMultiQueue"] = json!(true);
        d["disableHotplug"] = json!(true);
        d["disks"] = json!([{"name": "cd", "disk": {"bus": "virtio", "readonly": true, "pciAddress": "0000:81:01.1"},
            "bootOrder": 2, "serial": "ser-1", "cache": "writeback", "io": "threads", "errorPolicy": "report",
            "blockSize": {"custom": {"logical": 512, "physical": 4096}}}]);
        v["spec"]["domain"]["cpu"] = json!({"sockets": 2});
    });
    has(&x, "<disk type='file' device='disk' model='virtio-transitional'>");
    has(
        &x,
        "<driver name='qemu' type='qcow2' cache='writeback' io='threads' error_policy='report' discard='unmap' \
         iothread='1' queues='2'/>",
    );
    has(
        &x,
        "<blockio logical_block_size='512' physical_block_size='4096'/>\n      <boot order='2'/>\n      <readonly/>",
    );
    has(&x, "<serial>ser-1</serial>\n      <alias name='ua-cd'/>");
    has(&x, "<address type='pci' domain='0x0000' bus='0x81' slot='0x01' function='0x1'/>");
    lacks(&x, "type='scsi'");
    // Storage without O_DIRECT: writethrough by default, `none` refused.
    let mut no_direct = ctx();
    no_direct.no_direct_io.insert("cd".into());
    has(&to_domain_xml(&vmi(|_| {}), &no_direct).unwrap_or_default(), "cache='writethrough'");
    let none = vmi(|v| v["spec"]["domain"]["devices"]["disks"][0]["cache"] = json!("none"));
    assert!(matches!(to_domain_xml(&none, &no_direct), Err(ConvertError::Invalid { .. })));
    has(&xml(|v| v["spec"]["domain"]["devices"]["disks"][0]["shareable"] = json!(true)), "<shareable/>");
    for (patch, reason) in [
        (json!({"name": "cd", "cdrom": {"bus": "virtio"}}), "a CD-ROM cannot be on the virtio bus"),
        (json!({"name": "cd", "disk": {"bus": "ide"}}), "unknown bus"),
        (json!({"name": "cd", "disk": {}, "cdrom": {}}), "more than one of disk, cdrom, lun"),
        (json!({"name": "cd", "disk": {"bus": "sata", "pciAddress": "0000:81:01.1"}}), "only for virtio disks"),
        (json!({"name": "cd", "disk": {"bus": "virtio", "pciAddress": "81:01.1"}}), "not a PCI address (dddd:bb:ss.f)"),
        (json!({"name": "cd", "bootOrder": 0}), "must be positive"),
        (json!({"name": "cd", "shareable": true, "cache": "writeback"}), "a shareable disk needs cache none"),
    ] {
        match err(|v| v["spec"]["domain"]["devices"]["disks"] = json!([patch])) {
            ConvertError::Invalid { reason: r, .. } => assert_eq!(r, reason),
            other => panic!("{other}"),
        }
    }
    assert_eq!(
        err(|v| v["spec"]["domain"]["devices"]["disks"] = json!([{"name": "nope"}])),
        ConvertError::DiskWithoutVolume { disk: "nope".into() }
    );
}

#[test]
fn iothreads_shared_dedicated_and_auto() {
    let disks = |policy: Option<&str>| {
        xml(|v| {
            v["spec"]["domain"]["devices"]["disks"] = json!([
                {"name": "cd", "disk": {"bus": "virtio"}},
                {"name": "a", "disk": {"bus": "virtio"}, "dedicatedIOThread": true},
                {"name": "b", "disk": {"bus": "virtio"}},
                {"name": "c", "disk": {"bus": "sata"}}
            ]);
            v["spec"]["volumes"] = json!([{"name": "cd", "containerDisk": {"image": "x"}},
                {"name": "a", "emptyDisk": {"capacity": "1Gi"}}, {"name": "b", "emptyDisk": {"capacity": "1Gi"}},
                {"name": "c", "emptyDisk": {"capacity": "1Gi"}}]);
            if let Some(p) = policy {
                v["spec"]["domain"]["ioThreadsPolicy"] = json!(p);
            }
        })
    };
    let threads = |x: &str| {
        x.lines().filter_map(|l| l.split("iothread='").nth(1)?.split('\'').next()).collect::<Vec<_>>().join(",")
    };
    let shared = disks(None);
    has(&shared, "<iothreads>2</iothreads>");
    assert_eq!(threads(&shared), "1,2,1");
    let auto = disks(Some("auto"));
    has(&auto, "<iothreads>3</iothreads>");
    assert_eq!(threads(&auto), "1,3,2");
    assert!(matches!(
        to_domain_xml(&vmi(|v| v["spec"]["domain"]["ioThreadsPolicy"] = json!("supplementalPool")), &ctx()),
        Err(ConvertError::Unsupported(Unsupported::Device { kind: "ioThreadsPolicy", .. }))
    ));
    // No virtio disk, no IOThreads.
    lacks(&xml(|v| v["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] = json!("sata")), "iothread");
}

#[test]
fn pvc_volume_modes_from_the_context_or_the_status() {
    let pvc = |v: &mut Value| {
        v["spec"]["volumes"] = json!([{"name": "cd", "persistentVolumeClaim": {"claimName": "c", "readOnly": true}}]);
    };
    assert_eq!(to_domain_xml(&vmi(pvc), &ctx()), Err(ConvertError::UnknownVolumeMode { volume: "cd".into() }));
    let block = to_domain_xml(&vmi(pvc), &ctx().with_pvc_mode("cd", PvcVolumeMode::Block)).unwrap_or_default();
    has(&block, "<disk type='block' device='disk' model='virtio-non-transitional'>");
    has(&block, "cache='none' io='native'");
    has(&block, "<source dev='/dev/cd'/>");
    has(&block, "<readonly/>");
    let from_status = vmi(|v| {
        pvc(v);
        v["status"] = json!({"volumeStatus": [{"name": "cd", "target": "vda",
            "persistentVolumeClaimInfo": {"volumeMode": "Filesystem", "preallocated": true}}]});
    });
    let fs = to_domain_xml(&from_status, &ctx()).unwrap_or_default();
    has(&fs, "<source file='/var/run/kubevirt-private/vmi-disks/cd/disk.img'/>");
    has(&fs, "type='raw' cache='none' io='native'");
    // A DataVolume is its PVC; a LUN needs a block device.
    let dv = vmi(|v| v["spec"]["volumes"] = json!([{"name": "cd", "dataVolume": {"name": "dv"}}]));
    let dv_xml = to_domain_xml(&dv, &ctx().with_pvc_mode("cd", PvcVolumeMode::Filesystem)).unwrap_or_default();
    has(&dv_xml, "vmi-disks/cd/disk.img");
    lacks(&dv_xml, "io='native'");
    let lun = vmi(|v| {
        v["spec"]["domain"]["devices"]["disks"] = json!([{"name": "cd", "lun": {}}]);
        v["spec"]["volumes"] = json!([{"name": "cd", "dataVolume": {"name": "dv"}}]);
    });
    has(
        &to_domain_xml(&lun, &ctx().with_pvc_mode("cd", PvcVolumeMode::Block)).unwrap_or_default(),
        "<disk type='block' device='lun'>",
    );
    assert!(matches!(
        to_domain_xml(&lun, &ctx().with_pvc_mode("cd", PvcVolumeMode::Filesystem)),
        Err(ConvertError::Unsupported(Unsupported::DiskOption { option: "lun on a non-block volume", .. }))
    ));
    assert_eq!(
        to_domain_xml(&vmi(|_| {}), &ConvertContext::new(Acceleration::Emulation)),
        Err(ConvertError::UnknownImageFormat { volume: "cd".into() })
    );
    let prefixed = to_domain_xml(&vmi(|_| {}), &ctx().with_path_prefix("/tmp/pod")).unwrap_or_default();
    has(&prefixed, "<source file='/tmp/pod/var/run/kubevirt-ephemeral-disks/disk-data/cd/disk.qcow2'/>");
    has(&prefixed, "<log file='/tmp/pod/var/run/kubevirt-private/virt-serial0-log' append='on'/>");
}

#[test]
fn interfaces() {
    let net = |iface: Value| {
        move |v: &mut Value| {
            v["spec"]["domain"]["devices"]["interfaces"] = json!([iface]);
            v["spec"]["networks"] = json!([{"name": "default", "pod": {}}]);
        }
    };
    let x = xml(net(json!({"name": "default", "bridge": {}, "macAddress": "DE-AD-00-00-BE-AF", "bootOrder": 1,
        "model": "e1000e", "acpiIndex": 3, "state": "down"})));
    has(
        &x,
        "<interface type='ethernet'>\n      <mac address='de:ad:00:00:be:af'/>\n      \
         <target dev='tap0' managed='no'/>\n      <model type='e1000e'/>\n      <link state='down'/>\n      \
         <boot order='1'/>\n      <alias name='ua-default'/>\n      <acpi index='3'/>\n    </interface>",
    );
    let x = to_domain_xml(&vmi(net(json!({"name": "default", "masquerade": {}}))), &ctx().with_pod_interface_mtu(1400))
        .unwrap_or_default();
    has(&x, &format!("<mac address='{}'/>", launcher::derived_mac("11111111-2222-4333-8444-555555555555", "default")));
    has(
        &x,
        "<model type='virtio-non-transitional'/>\n      <mtu size='1400'/>\n      <alias name='ua-default'/>\n      <rom enabled='no'/>",
    );
    lacks(&xml(net(json!({"name": "default", "masquerade": {}, "state": "absent"}))), "<interface");
    let refused = |iface: Value| match err(net(iface)) {
        ConvertError::Unsupported(Unsupported::Interface { binding, .. }) => binding,
        other => panic!("{other}"),
    };
    assert_eq!(refused(json!({"name": "default", "sriov": {}})), "the sriov binding");
    assert_eq!(
        refused(json!({"name": "default", "passtBinding": {}})),
        "the passtBinding binding (libvirt 9.0 has no passt backend)"
    );
    assert_eq!(refused(json!({"name": "default", "binding": {"name": "x"}})), "network binding plugins");
    assert_eq!(refused(json!({"name": "default", "slirp": {}})), "a discontinued binding (slirp, macvtap, passt)");
    for (iface, reason) in [
        (json!({"name": "default"}), "no binding"),
        (json!({"name": "default", "bridge": {}, "masquerade": {}}), "more than one binding"),
        (json!({"name": "default", "bridge": {}, "macAddress": "01:00:00:00:00:01"}), "a multicast address"),
        (json!({"name": "default", "bridge": {}, "macAddress": "zz:00:00:00:00:01"}), "not a MAC address"),
        (json!({"name": "default", "bridge": {}, "model": "tulip"}), "unknown model"),
    ] {
        match err(net(iface)) {
            ConvertError::Invalid { reason: r, .. } => assert_eq!(r, reason),
            other => panic!("{other}"),
        }
    }
    // Upstream's vmi-multus-multiple-net: the secondary interface is on the launcher's tap for that network,
    // with its pod interface's MTU.
    let multiple = |ifaces: Value, networks: Value| {
        move |v: &mut Value| {
            v["spec"]["domain"]["devices"]["interfaces"] = ifaces;
            v["spec"]["networks"] = networks;
        }
    };
    let x = to_domain_xml(
        &vmi(multiple(
            json!([{"name": "default", "masquerade": {}}, {"name": "ptp", "bridge": {}}]),
            json!([{"name": "default", "pod": {}}, {"name": "ptp", "multus": {"networkName": "ptp-conf"}}]),
        )),
        &ConvertContext { secondary_mtus: [("ptp".to_owned(), 1400)].into(), ..ctx().with_pod_interface_mtu(1450) },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    has(
        &x,
        "<target dev='tap0' managed='no'/>\n      <model type='virtio-non-transitional'/>\n      <mtu size='1450'/>",
    );
    has(
        &x,
        &format!(
            "<mac address='{}'/>\n      <target dev='tape31d7ce2712' managed='no'/>\n      \
             <model type='virtio-non-transitional'/>\n      <mtu size='1400'/>\n      <alias name='ua-ptp'/>",
            launcher::derived_mac("11111111-2222-4333-8444-555555555555", "ptp")
        ),
    );
    let on_multus = |iface: Value, network: Value| err(multiple(json!([iface]), json!([network])));
    assert_eq!(
        on_multus(
            json!({"name": "m", "bridge": {}}),
            json!({"name": "m", "multus": {"networkName": "p", "default": true}})
        ),
        ConvertError::Unsupported(Unsupported::Network { network: "m".into(), kind: "Multus default" })
    );
    let masquerade =
        on_multus(json!({"name": "m", "masquerade": {}}), json!({"name": "m", "multus": {"networkName": "p"}}));
    assert!(
        matches!(
            masquerade,
            ConvertError::Invalid { reason: "Masquerade interface only implemented with pod network", .. }
        ),
        "{masquerade}"
    );
    let two = err(|v| {
        v["spec"]["domain"]["devices"]["interfaces"] =
            json!([{"name": "a", "bridge": {}}, {"name": "b", "bridge": {}}]);
        v["spec"]["networks"] = json!([{"name": "a", "pod": {}}, {"name": "b", "pod": {}}]);
    });
    assert!(matches!(two, ConvertError::Invalid { reason: "a second interface on the pod network", .. }), "{two}");
    assert_eq!(
        err(|v| v["spec"]["domain"]["devices"]["interfaces"] = json!([{"name": "x", "bridge": {}}])),
        ConvertError::InterfaceWithoutNetwork { interface: "x".into() }
    );
}

#[test]
fn autoattached_devices_and_their_toggles() {
    let x = xml(|v| v["spec"]["domain"]["devices"]["rng"] = json!({}));
    has(&x, "<serial type='unix'>\n      <source mode='bind' path='/var/run/kubevirt/sockets/qemu/virt-serial0'/>");
    has(&x, "<console type='unix'>");
    has(&x, "<channel type='unix'>\n      <target type='virtio' name='org.qemu.guest_agent.0'/>");
    has(&x, "<listen type='socket' socket='/var/run/kubevirt/sockets/qemu/virt-vnc'/>");
    has(&x, "<memballoon model='virtio-non-transitional'>\n      <stats period='10'/>");
    has(&x, "<rng model='virtio-non-transitional'>\n      <backend model='random'>/dev/urandom</backend>");
    has(&x, "<controller type='usb' index='0' model='none'/>");
    let x = xml(|v| {
        let d = &mut v["spec"]["domain"]["devices"];
        d["autoattachSerialConsole"] = json!(false);
        d["autoattachGraphicsDevice"] = json!(false);
        d["autoattachMemBalloon"] = json!(false);
    });
    lacks(&x, "<serial");
    lacks(&x, "<graphics");
    lacks(&x, "<video");
    has(&x, "<memballoon model='none'/>");
    lacks(&xml(|v| v["spec"]["domain"]["devices"]["logSerialConsole"] = json!(false)), "<log ");
    let x = xml(|v| {
        let d = &mut v["spec"]["domain"]["devices"];
        d["inputs"] =
            json!([{"name": "t", "type": "tablet", "bus": "usb"}, {"name": "k", "type": "keyboard", "bus": "virtio"}]);
        d["watchdog"] = json!({"name": "w", "i6300esb": {"action": "poweroff"}});
        d["video"] = json!({"type": "bochs"});
    });
    has(&x, "<input type='tablet' bus='usb'>\n      <alias name='ua-t'/>");
    has(&x, "<input type='keyboard' bus='virtio'>");
    has(&x, "<controller type='usb' index='0' model='qemu-xhci'/>");
    has(&x, "<watchdog model='i6300esb' action='poweroff'>\n      <alias name='ua-w'/>");
    has(&x, "<model type='bochs' heads='1'/>");
}

#[test]
fn features_clock_and_firmware() {
    let x = xml(|v| {
        v["spec"]["domain"]["features"] =
            json!({"acpi": {"enabled": false}, "apic": {"endOfInterrupt": true}, "smm": {}});
        v["spec"]["domain"]["clock"] = json!({"utc": {"offsetSeconds": 60},
            "timer": {"hpet": {"present": false}, "rtc": {"tickPolicy": "catchup", "track": "guest"}}});
        v["spec"]["domain"]["firmware"] = json!({"bootloader": {"bios": {"useSerial": true}}});
        v["spec"]["domain"]["chassis"] = json!({"asset": "a-1"});
    });
    has(&x, "<features>\n    <apic eoi='on'/>\n    <smm state='on'/>\n  </features>");
    has(
        &x,
        "<clock offset='variable' adjustment='60' basis='utc'>\n    <timer name='hpet' present='no'/>\n    \
        <timer name='rtc' present='yes' tickpolicy='catchup' track='guest'/>",
    );
    has(&x, "<bios useserial='yes'/>");
    has(&x, "<chassis>\n      <entry name='asset'>a-1</entry>");
    has(
        &xml(|v| v["spec"]["domain"]["clock"] = json!({"timezone": "Europe/Rome"})),
        "<clock offset='timezone' timezone='Europe/Rome'/>",
    );
    let kvm_feature = vmi(|v| v["spec"]["domain"]["features"] = json!({"kvm": {"hidden": true}, "pvspinlock": {}}));
    let on_kvm = to_domain_xml(&kvm_feature, &ConvertContext { acceleration: Acceleration::Kvm, ..ctx() });
    has(&on_kvm.unwrap_or_default(), "<kvm>\n      <hidden state='on'/>\n    </kvm>\n    <pvspinlock state='on'/>");
    assert_eq!(
        to_domain_xml(&kvm_feature, &ctx()),
        Err(ConvertError::Unsupported(Unsupported::Feature("kvm / pvspinlock under software emulation")))
    );
}

#[test]
fn what_the_slice_refuses() {
    let unsupported = |patch: &dyn Fn(&mut Value)| match to_domain_xml(&vmi(patch), &ctx()) {
        Err(ConvertError::Unsupported(u)) => u.to_string(),
        other => panic!("{other:?}"),
    };
    type Patch = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(Patch, &str)> = vec![
        (Box::new(|v| v["spec"]["architecture"] = json!("arm64")), "architecture \"arm64\" (only amd64)"),
        (
            Box::new(|v| v["spec"]["domain"]["firmware"] = json!({"bootloader": {"efi": {}}})),
            "firmware: efi (the launcher image has no OVMF)",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["firmware"] = json!({"kernelBoot": {"kernelArgs": "x"}})),
            "firmware: kernelBoot",
        ),
        (Box::new(|v| v["spec"]["domain"]["memory"]["hugepages"] = json!({"pageSize": "2Mi"})), "memory: hugepages"),
        (
            Box::new(|v| v["spec"]["domain"]["cpu"] = json!({"dedicatedCpuPlacement": true})),
            "cpu: dedicatedCpuPlacement / isolateEmulatorThread",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["features"] = json!({"hyperv": {"relaxed": {}}})),
            "features: hyperv / hypervPassthrough",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["devices"]["gpus"] = json!([{"name": "g", "deviceName": "nvidia"}])),
            "gpu \"g\"",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["devices"]["hostDevices"] = json!([{"name": "h", "deviceName": "x"}])),
            "hostDevice \"h\"",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["devices"]["filesystems"] = json!([{"name": "f", "virtiofs": {}}])),
            "filesystem (virtiofs) \"f\"",
        ),
        (Box::new(|v| v["spec"]["domain"]["devices"]["tpm"] = json!({})), "tpm \"tpm\""),
        (Box::new(|v| v["spec"]["domain"]["devices"]["autoattachVSOCK"] = json!(true)), "vsock \"autoattachVSOCK\""),
        (
            Box::new(|v| v["spec"]["volumes"] = json!([{"name": "cd", "hostDisk": {"path": "/x", "type": "Disk"}}])),
            "volume \"cd\": hostDisk volumes",
        ),
        (
            Box::new(|v| v["spec"]["volumes"] = json!([{"name": "cd", "configMap": {"name": "c"}}])),
            "volume \"cd\": configMap volumes",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["devices"]["disks"][0]["changedBlockTracking"] = json!(true)),
            "disk \"cd\": changedBlockTracking",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["launchSecurity"] = json!({"sev": {}})),
            "unknown fields in spec.domain: launchSecurity",
        ),
        (
            Box::new(|v| v["spec"]["domain"]["devices"]["disks"][0]["floppy"] = json!({})),
            "unknown fields in spec.domain.devices.disks[cd]: floppy",
        ),
    ];
    for (patch, want) in cases {
        assert_eq!(unsupported(patch.as_ref()), want);
    }
    assert!(matches!(
        err(|v| v["spec"]["volumes"] =
            json!([{"name": "cd", "emptyDisk": {"capacity": "1Gi"}, "containerDisk": {"image": "x"}}])),
        ConvertError::Invalid { reason: "more than one volume source", .. }
    ));
    let message = err(|v| v["spec"]["domain"]["devices"]["gpus"] = json!([{"name": "g"}])).to_string();
    assert_eq!(message, "not supported by this node agent: gpu \"g\"");
}

#[test]
fn image_formats_are_detected_by_magic() {
    assert_eq!(ImageFormat::detect(b"QFI\xfb\0\0\0\x03"), ImageFormat::Qcow2);
    assert_eq!(ImageFormat::detect(b"\xeb\x63\x90"), ImageFormat::Raw);
    assert_eq!(ImageFormat::detect(b""), ImageFormat::Raw);
}

#[test]
fn the_context_from_what_the_launcher_prepared() {
    let vmi = vmi(|v| {
        v["spec"]["domain"]["devices"]["disks"] =
            json!([{"name": "cd"}, {"name": "fs"}, {"name": "blk"}, {"name": "dv"}, {"name": "cfg", "cdrom": {}}]);
        v["spec"]["volumes"] = json!([
            {"name": "cd", "containerDisk": {"image": "x"}},
            {"name": "fs", "persistentVolumeClaim": {"claimName": "a"}},
            {"name": "blk", "persistentVolumeClaim": {"claimName": "b"}},
            {"name": "dv", "dataVolume": {"name": "d"}},
            {"name": "cfg", "cloudInitConfigDrive": {"userData": "#cloud-config"}}
        ]);
    });
    let prepared: launcher::Prepared = serde_json::from_value(json!({
        "containerDiskFormats": {"cd": "raw"}, "blockVolumes": ["blk"], "noDirectIo": ["fs"], "podInterfaceMtu": 1450,
        "secondaryMtus": {"ptp": 1400}
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let ctx = ConvertContext::from_prepared(Acceleration::Emulation, &prepared, &vmi).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ctx.container_disk_formats.get("cd"), Some(&ImageFormat::Raw));
    let modes: Vec<(&str, PvcVolumeMode)> = ctx.pvc_modes.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        modes,
        [("blk", PvcVolumeMode::Block), ("dv", PvcVolumeMode::Filesystem), ("fs", PvcVolumeMode::Filesystem)]
    );
    assert_eq!((ctx.pod_interface_mtu, ctx.secondary_mtus.get("ptp")), (Some(1450), Some(&1400)));
    let x = to_domain_xml(&vmi, &ctx).unwrap_or_else(|e| panic!("{e}"));
    has(&x, "<format type='raw'/>");
    has(&x, "<source dev='/dev/blk'/>");
    has(
        &x,
        "type='raw' cache='writethrough' error_policy='stop' discard='unmap'/>\n      <source file='/var/run/kubevirt-private/vmi-disks/fs/disk.img'/>",
    );
    has(&x, "<source file='/var/run/kubevirt-ephemeral-disks/cloud-init/cfg/configDrive.iso'/>");
    let bad =
        launcher::Prepared { container_disk_formats: [("cd".into(), "vmdk".into())].into(), ..Default::default() };
    assert!(matches!(
        ConvertContext::from_prepared(Acceleration::Emulation, &bad, &vmi),
        Err(ConvertError::Invalid { reason: "unknown format", .. })
    ));
}

#[test]
fn hotplugged_volumes_join_the_domain_once_in_the_pod() {
    let hot = |v: &mut Value| {
        v["spec"]["volumes"] = json!([{"name": "cd", "containerDisk": {"image": "x"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "c", "hotpluggable": true}}]);
        v["spec"]["domain"]["devices"]["disks"] = json!([{"name": "cd", "disk": {"bus": "virtio"}},
            {"name": "data", "disk": {}, "serial": "s-1"}]);
    };
    // Not in the launcher pod yet: left out.
    let x = xml(hot);
    lacks(&x, "hotplug-disks");
    // In the pod as sdb (Filesystem): in the domain at boot (after a migration or restart of the launcher), on scsi.
    let v = vmi(hot);
    let c = ctx().with_pvc_mode("data", PvcVolumeMode::Filesystem).with_hotplugged("data", "sdb");
    let x = to_domain_xml(&v, &c).unwrap_or_else(|e| panic!("{e}"));
    has(&x, "<source file='/var/run/kubevirt/hotplug-disks/data.img'/>\n      <target dev='sdb' bus='scsi'/>");
    let one = hotplug_disk_xml(&v, &c, "data").unwrap_or_else(|e| panic!("{e}"));
    assert!(one.starts_with("<disk type='file' device='disk'>"), "{one}");
    has(&one, "<driver name='qemu' type='raw' cache='none' error_policy='stop' discard='unmap'/>");
    has(&one, "<serial>s-1</serial>");
    has(&one, "<alias name='ua-data'/>");
    // Block: the device node.
    let c = ctx().with_pvc_mode("data", PvcVolumeMode::Block).with_hotplugged("data", "sdc");
    let one = hotplug_disk_xml(&v, &c, "data").unwrap_or_else(|e| panic!("{e}"));
    has(&one, "<disk type='block' device='disk'>");
    has(&one, "<source dev='/var/run/kubevirt/hotplug-disks/data'/>\n  <target dev='sdc' bus='scsi'/>");
    assert!(hotplug_disk_xml(&v, &ctx(), "data").is_err(), "not in the pod");
}
