//! The masquerade binding applied for real in fresh network namespaces: a "pod" (eth0 = a veth from a "node"
//! namespace, with the pod IP), and a "guest" namespace whose eth0 is attached to the pod's bridge in place of
//! QEMU's tap. Asserted: the nftables table, tap0 owned by 107 on the bridge, forwarding on, our DHCP server gives
//! a DHCP client (busybox udhcpc) in the guest 10.0.2.2 with router 10.0.2.1 and the pod's DNS, search domain and
//! hostname, the node reaches the guest's web server through the pod IP on the forwarded port only, and the guest reaches the node (masquerade).
//! Needs root (namespaces, links, nftables).

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: panics are the failure report

mod support;

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};

use contracts::kubevirt::launcher::{MASQUERADE_GATEWAY, MASQUERADE_GUEST, POD_BRIDGE, POD_TAP};
use virt_launcher::network::{self, Host, Plan};

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
    let (n_if, p_if) = (format!("kvn{id}"), format!("kvp{id}"));
    support::run("ip", &["link", "add", &n_if, "type", "veth", "peer", "name", &p_if]);
    support::run("ip", &["link", "set", &p_if, "netns", &pod.0]);
    support::run("ip", &["link", "set", &n_if, "netns", &node.0]);
    pod.run(&["ip", "link", "set", &p_if, "name", "eth0"]);
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
    let Plan::Masquerade(m) = network::plan(&spec, "testvmi", "uid-1").unwrap() else { panic!("masquerade expected") };
    let t = tempfile::tempdir().unwrap();
    let resolv = t.path().join("resolv.conf");
    std::fs::write(&resolv, "nameserver 10.96.0.10\nsearch default.svc.cluster.local\n").unwrap();
    let host = Host {
        tun_device: "/dev/net/tun".into(),
        resolv_conf: resolv,
        state_dir: t.path().join("net"),
        tap_owner: 107,
    };
    let ns_path = format!("/run/netns/{}", pod.0);
    let applied = std::thread::spawn(move || {
        let ns = std::fs::File::open(&ns_path).unwrap();
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
            .unwrap();
        network::apply(&m, &host)
    })
    .join()
    .unwrap();
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
    let (g_br, g_if) = (format!("kvg{id}"), format!("kvh{id}"));
    support::run("ip", &["link", "add", &g_br, "type", "veth", "peer", "name", &g_if]);
    support::run("ip", &["link", "set", &g_br, "netns", &pod.0]);
    support::run("ip", &["link", "set", &g_if, "netns", &guest.0]);
    pod.run(&["ip", "link", "set", &g_br, "master", POD_BRIDGE, "up"]);
    guest.run(&["ip", "link", "set", &g_if, "name", "eth0", "address", mac, "up"]);

    // DHCP in the guest: the script configures the lease and records what udhcpc was told.
    let lease_env = t.path().join("lease.env");
    let script = t.path().join("udhcpc.script");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncase \"$1\" in bound|renew)\n  ip addr add \"$ip/${{mask:-24}}\" dev \"$interface\"\n  \
             ip route add default via \"$router\" dev \"$interface\"\n  env > {}\n;; esac\n",
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
    let lease: BTreeMap<String, String> = std::fs::read_to_string(&lease_env)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
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
    let ns_path = format!("/run/netns/{}", pod.0);
    let rebound = std::thread::spawn(move || {
        let ns = std::fs::File::open(&ns_path).unwrap();
        rustix::thread::move_into_link_name_space(ns.as_fd(), Some(rustix::thread::LinkNameSpaceType::Network))
            .unwrap();
        virt_launcher::dhcp::bind(POD_BRIDGE).map(drop)
    })
    .join()
    .unwrap();
    rebound.unwrap_or_else(|e| panic!("port 67 still taken after the server was dropped: {e}"));
}
