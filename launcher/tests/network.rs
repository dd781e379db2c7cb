//! The masquerade binding applied for real in fresh network namespaces: a "pod" (eth0 = a veth from a "node"
//! namespace, with the pod IP), and a "guest" namespace whose eth0 is attached to the pod's bridge in place of
//! QEMU's tap. Asserted: the nftables table, tap0 owned by 107 on the bridge, forwarding on, our DHCP server gives
//! a DHCP client (busybox udhcpc) in the guest 10.0.2.2 with router 10.0.2.1 and the pod's DNS, search domain and
//! hostname, the node reaches the guest's web server through the pod IP on the forwarded port only, and the guest reaches the node (masquerade).
//! The bridge binding of a secondary network is applied the same way, to a pod interface made as the ptp CNI plugin
//! makes it. Needs root (namespaces, links, nftables).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

mod support;

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};

use contracts::kubevirt::launcher::{MASQUERADE_GATEWAY, MASQUERADE_GUEST, POD_BRIDGE, POD_TAP};
use virt_launcher::network::{self, Host};

/// A named network namespace, deleted (with whatever still runs in it) on drop.
struct Netns(String);

impl Netns {
    fn add(name: String) -> Netns {
        let _ = support::output("ip", &["netns", "del", &name]);
        support::run("ip", &["netns", "add", &name]);
        let ns = Netns(name);
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    fn run(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.0];
        all.extend_from_slice(args);
        support::run("ip", &all)
    }

    fn output(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["netns", "exec", &self.0];
        all.extend_from_slice(args);
        support::output("ip", &all)
    }

    fn spawn(&self, args: &[&str]) -> Child {
        Command::new("ip")
            .args(["netns", "exec", &self.0])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let pids = support::output("ip", &["netns", "pids", &self.0]);
        for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
            let _ = support::output("kill", &["-9", pid]);
        }
        let _ = support::output("ip", &["netns", "del", &self.0]);
    }
}

/// A veth pair from namespace `a`, where its end is `a_end` (a name unique on the host: it is created there), to
/// namespace `b`, where its end is renamed `b_end` (say `eth0`).
fn veth(a: &Netns, a_end: &str, b: &Netns, b_end: &str) {
    let tmp = format!("{a_end}p");
    support::run("ip", &["link", "add", a_end, "type", "veth", "peer", "name", &tmp]);
    support::run("ip", &["link", "set", a_end, "netns", &a.0]);
    support::run("ip", &["link", "set", &tmp, "netns", &b.0]);
    b.run(&["ip", "link", "set", &tmp, "name", b_end]);
}

/// Runs `f` in a thread that has entered `ns`'s network namespace.
fn in_netns<T: Send + 'static>(ns: &Netns, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns_path = format!("/run/netns/{}", ns.0);
    std::thread::spawn(move || {
        let ns = std::fs::File::open(&ns_path).unwrap();
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
            .unwrap();
        f()
    })
    .join()
    .unwrap()
}

/// Runs busybox udhcpc in `guest` on its eth0 (requesting classless static routes) and returns the variables
/// udhcpc gave its script for the lease.
fn udhcpc(guest: &Netns, dir: &std::path::Path) -> BTreeMap<String, String> {
    let lease_env = dir.join("lease.env");
    let script = dir.join("udhcpc.script");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in bound|renew)\n  ip addr add \"$ip/${{mask:-24}}\" dev \"$interface\"\n  \
             [ -z \"$router\" ] || ip route add default via \"$router\" dev \"$interface\"\n  env > {}\n;; esac\n",
            lease_env.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dhcp = guest.output(&[
        "busybox",
        "udhcpc",
        "-f",
        "-q",
        "-n",
        "-t",
        "5",
        "-T",
        "1",
        "-O",
        "staticroutes",
        "-i",
        "eth0",
        "-s",
        script.to_str().unwrap(),
    ]);
    assert!(
        dhcp.status.success(),
        "udhcpc: {}{}",
        String::from_utf8_lossy(&dhcp.stdout),
        String::from_utf8_lossy(&dhcp.stderr)
    );
    std::fs::read_to_string(&lease_env)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect()
}

/// Children killed on drop.
struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn masquerade_gives_the_guest_its_lease_and_forwards_the_ports() {
    support::tools(&[("ip", "iproute2"), ("nft", "nftables"), ("busybox", "busybox-static"), ("curl", "curl")]);
    let id = std::process::id() % 100_000;
    let pod = Netns::add(format!("kvrs-pod-{id}"));
    let node = Netns::add(format!("kvrs-node-{id}"));
    let guest = Netns::add(format!("kvrs-guest-{id}"));
    let (pod_ip, node_ip) = ("10.254.77.2", "10.254.77.1");
    let mac = "02:6b:76:72:73:01";

    // node ── veth ── pod eth0 (the CNI's part).
    let n_if = format!("kvn{id}");
    veth(&node, &n_if, &pod, "eth0");
    pod.run(&["ip", "addr", "add", &format!("{pod_ip}/30"), "dev", "eth0"]);
    pod.run(&["ip", "link", "set", "eth0", "up"]);
    node.run(&["ip", "addr", "add", &format!("{node_ip}/30"), "dev", &n_if]);
    node.run(&["ip", "link", "set", &n_if, "up"]);

    // The masquerade binding, planned from a spec and applied by a thread inside the pod namespace.
    let spec: crds::kubevirt::VirtualMachineInstanceSpec = serde_json::from_value(serde_json::json!({
        "domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}, "macAddress": mac,
            "ports": [{"name": "http", "port": 80}]}]}},
        "networks": [{"name": "default", "pod": {}}],
    }))
    .unwrap();
    let m = network::plan(&spec, "testvmi", "uid-1").unwrap().pod.expect("masquerade");
    let t = tempfile::tempdir().unwrap();
    let resolv = t.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.96.0.10\nsearch default.svc.cluster.local\n").unwrap();
    let host = Host {
        tun_device: "/dev/net/tun".into(),
        resolv_conf: resolv,
        state_dir: t.path().join("net"),
        tap_owner: 107,
    };
    let applied = in_netns(&pod, move || network::apply(&m, &host));
    let applied = applied.unwrap_or_else(|e| panic!("{}", contracts::errors::chain_line(&e)));
    assert_eq!(
        applied.summary,
        format!("masquerade: pod eth0 {pod_ip}/30, guest 10.0.2.2 via k6t-eth0/tap0, ports tcp dport 80")
    );

    // What the pod namespace has now.
    let table = pod.run(&["nft", "list", "table", "ip", "kubevirt_nat"]);
    for want in [
        "iifname \"eth0\" counter packets",
        "jump KUBEVIRT_PREINBOUND",
        "tcp dport 80 counter packets",
        "dnat to 10.0.2.2",
        "ip saddr 10.0.2.2 counter packets",
        "masquerade",
        "snat to 10.0.2.1",
    ] {
        assert!(table.contains(want), "{want:?} missing from\n{table}");
    }
    assert_eq!(pod.run(&["cat", &format!("/sys/class/net/{POD_TAP}/owner")]).trim(), "107");
    let tap: serde_json::Value = serde_json::from_str(&pod.run(&["ip", "-j", "link", "show", POD_TAP])).unwrap();
    assert_eq!(tap[0]["master"], POD_BRIDGE, "{tap}");
    assert_eq!(pod.run(&["cat", "/proc/sys/net/ipv4/ip_forward"]).trim(), "1");
    assert_eq!(pod.run(&["cat", "/proc/sys/net/ipv4/conf/all/route_localnet"]).trim(), "1");
    let bridge: serde_json::Value =
        serde_json::from_str(&pod.run(&["ip", "-j", "addr", "show", "dev", POD_BRIDGE])).unwrap();
    assert_eq!(bridge[0]["addr_info"][0]["local"], MASQUERADE_GATEWAY.to_string(), "{bridge}");

    // The "guest": a veth on the bridge (where QEMU's tap would be), with the spec's MAC.
    let g_br = format!("kvg{id}");
    veth(&pod, &g_br, &guest, "eth0");
    pod.run(&["ip", "link", "set", &g_br, "master", POD_BRIDGE, "up"]);
    guest.run(&["ip", "link", "set", "eth0", "address", mac, "up"]);

    // DHCP in the guest: the script configures the lease and records what udhcpc was told.
    let lease = udhcpc(&guest, t.path());
    let get = |k: &str| lease.get(k).map(String::as_str).unwrap_or_else(|| panic!("{k} missing from {lease:?}"));
    assert_eq!(get("ip"), MASQUERADE_GUEST.to_string());
    assert_eq!(get("router").trim(), MASQUERADE_GATEWAY.to_string());
    assert_eq!(get("subnet"), "255.255.255.0");
    assert_eq!(get("dns").trim(), "10.96.0.10");
    assert_eq!(get("search").trim(), "default.svc.cluster.local");
    assert_eq!(get("hostname"), "testvmi");
    assert_eq!(get("mtu"), "1500");
    assert!(applied.dhcp.exited().is_none(), "the DHCP server keeps running");

    // Ports: the node reaches the guest's port 80 through the pod IP, not its port 81 (not forwarded).
    let www = t.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "guest page\n").unwrap();
    let node_www = t.path().join("node-www");
    std::fs::create_dir_all(&node_www).unwrap();
    std::fs::write(node_www.join("index.html"), "node page\n").unwrap();
    let _servers = Killed(vec![
        guest.spawn(&["busybox", "httpd", "-f", "-p", "80", "-h", www.to_str().unwrap()]),
        guest.spawn(&["busybox", "httpd", "-f", "-p", "81", "-h", www.to_str().unwrap()]),
        node.spawn(&["busybox", "httpd", "-f", "-p", "8080", "-h", node_www.to_str().unwrap()]),
    ]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let curl = |ns: &Netns, url: &str| ns.output(&["curl", "-s", "-m", "5", url]);
    let page = curl(&node, &format!("http://{pod_ip}/"));
    assert!(page.status.success(), "node → pod:80: {page:?}");
    assert_eq!(String::from_utf8_lossy(&page.stdout), "guest page\n");
    assert!(!curl(&node, &format!("http://{pod_ip}:81/")).status.success(), "port 81 is not forwarded");
    // Egress: the node has no route to 10.0.2.0/24, so the answer only comes back through the masquerade.
    let out = curl(&guest, &format!("http://{node_ip}:8080/"));
    assert!(out.status.success(), "guest → node: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "node page\n");

    // Dropping the handle stops the server and frees its socket: port 67 on the bridge can be bound again.
    drop(applied);
    let rebound = in_netns(&pod, || virt_launcher::dhcp::bind(POD_BRIDGE).map(drop));
    rebound.unwrap_or_else(|e| panic!("port 67 still taken after the server was dropped: {e}"));
}

/// Upstream's vmi-multus-ptp: the only interface is a bridge binding on a Multus network. The pod interface is made
/// as the ptp plugin makes it (a veth to the node with 10.1.1.5/24, the node side 10.1.1.1/32 with a host route, a
/// route through the gateway); after the set-up it is a nameless-address port of the bridge, the guest gets
/// 10.1.1.5/24, the route (option 121) and the hostname by DHCP, and the node reaches the guest's web server on
/// that address.
#[test]
fn the_bridge_binding_moves_the_secondary_address_to_the_guest() {
    support::tools(&[("ip", "iproute2"), ("busybox", "busybox-static"), ("curl", "curl")]);
    let id = std::process::id() % 100_000;
    let pod = Netns::add(format!("kvrs-bpod-{id}"));
    let node = Netns::add(format!("kvrs-bnode-{id}"));
    let guest = Netns::add(format!("kvrs-bguest-{id}"));
    let mac = "02:6b:76:72:73:02";
    let spec: crds::kubevirt::VirtualMachineInstanceSpec = serde_json::from_value(serde_json::json!({
        "domain": {"devices": {"interfaces": [{"name": "ptp", "bridge": {}, "macAddress": mac}]}},
        "networks": [{"name": "ptp", "multus": {"networkName": "ptp-conf"}}],
    }))
    .unwrap();
    let plan = network::plan(&spec, "testvmi", "uid-1").unwrap();
    let [b] = plan.secondary.as_slice() else { panic!("one secondary interface expected: {plan:?}") };
    let b = b.clone();
    assert_eq!(b.pod_interface, contracts::kubevirt::launcher::secondary_pod_interface("ptp"));

    // node ── veth ── pod <pod interface> (the ptp plugin's part).
    let n_if = format!("kvbn{id}");
    veth(&node, &n_if, &pod, &b.pod_interface);
    pod.run(&["ip", "link", "set", &b.pod_interface, "mtu", "1400"]);
    pod.run(&["ip", "addr", "add", "10.1.1.5/24", "dev", &b.pod_interface]);
    pod.run(&["ip", "link", "set", &b.pod_interface, "up"]);
    pod.run(&["ip", "route", "add", "10.9.0.0/16", "via", "10.1.1.1", "dev", &b.pod_interface]);
    node.run(&["ip", "addr", "add", "10.1.1.1/32", "dev", &n_if]);
    node.run(&["ip", "link", "set", &n_if, "mtu", "1400", "up"]);
    node.run(&["ip", "route", "add", "10.1.1.5/32", "dev", &n_if]);

    let t = tempfile::tempdir().unwrap();
    let resolv = t.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.96.0.10\n").unwrap();
    let host = Host {
        tun_device: "/dev/net/tun".into(),
        resolv_conf: resolv,
        state_dir: t.path().join("net"),
        tap_owner: 107,
    };
    let (b2, h2) = (b.clone(), host.clone());
    let (link, socket) = in_netns(&pod, move || {
        let link = network::apply_bridge(&b2, &h2).unwrap_or_else(|e| panic!("{}", contracts::errors::chain_line(&e)));
        (link, virt_launcher::dhcp::bind(&b2.bridge).unwrap())
    });
    assert_eq!((link.mtu, link.address.as_deref(), link.routes.len()), (1400, Some("10.1.1.5/24"), 1), "{link:?}");
    let server = network::serve_bridge_dhcp(&b, &link, &host, socket).unwrap().expect("a DHCP server");

    // The pod: the interface renamed, without its address, on the bridge beside the tap (owned by 107).
    let show = |dev: &str| -> serde_json::Value {
        serde_json::from_str(&pod.run(&["ip", "-j", "addr", "show", "dev", dev])).unwrap()
    };
    assert!(!pod.output(&["ip", "link", "show", &b.pod_interface]).status.success(), "the old name is gone");
    let port = show(&b.port);
    assert_eq!(port[0]["master"], b.bridge.as_str(), "{port}");
    assert!(port[0]["addr_info"].as_array().unwrap().iter().all(|a| a["family"] != "inet"), "{port}");
    let tap = show(&b.tap);
    assert_eq!((tap[0]["master"].as_str(), tap[0]["mtu"].as_u64()), (Some(b.bridge.as_str()), Some(1400)), "{tap}");
    assert_eq!(pod.run(&["cat", &format!("/sys/class/net/{}/owner", b.tap)]).trim(), "107");
    assert_eq!(show(&b.bridge)[0]["addr_info"][0]["local"], "169.254.75.10");

    // The "guest": a veth on the bridge where QEMU's tap would be.
    let g_br = format!("kvbg{id}");
    veth(&pod, &g_br, &guest, "eth0");
    pod.run(&["ip", "link", "set", &g_br, "master", &b.bridge, "up"]);
    guest.run(&["ip", "link", "set", "eth0", "address", mac, "mtu", "1400", "up"]);
    let lease = udhcpc(&guest, t.path());
    let get = |k: &str| lease.get(k).map(String::as_str).unwrap_or_default();
    assert_eq!(
        (get("ip"), get("subnet"), get("router"), get("staticroutes").trim()),
        ("10.1.1.5", "255.255.255.0", "", "10.9.0.0/16 10.1.1.1"),
        "{lease:?}"
    );
    assert_eq!(
        (get("serverid"), get("hostname"), get("mtu"), get("dns").trim()),
        ("169.254.75.10", "testvmi", "1400", "10.96.0.10")
    );
    assert!(server.exited().is_none(), "the DHCP server keeps running");

    // The node reaches the guest on the address the pod interface had.
    let www = t.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "guest on ptp\n").unwrap();
    let _httpd = Killed(vec![guest.spawn(&["busybox", "httpd", "-f", "-p", "80", "-h", www.to_str().unwrap()])]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let page = node.output(&["curl", "-s", "-m", "5", "http://10.1.1.5/"]);
    assert!(page.status.success(), "node → guest on 10.1.1.5: {page:?}");
    assert_eq!(String::from_utf8_lossy(&page.stdout), "guest on ptp\n");
}
