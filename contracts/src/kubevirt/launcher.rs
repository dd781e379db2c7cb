//! The virt-launcher pod contract between its three parties: the VMI controller that renders the pod, the
//! `virt-launcher` process in its `compute` container, and the node agent that drives the domain through the
//! pod's libvirt.
//!
//! ```text
//! vm-controller ──pod spec (LauncherEnv, volumes at these paths)──► virt-launcher (compute container, uid 107)
//! node agent ◄──<pod sockets>/setup-sock: SetupRequest to `virt-launcher pod-setup` run as root in the pod's
//!               network and mount namespaces (masquerade links, claims' ownership, the DHCP socket); SetupReply──┤
//!                                                                   │ prepares disks, serves DHCP, starts libvirtd
//!                                                                   │ (session), writes <pod sockets>/ready
//! node agent ──qemu:///session?socket=<node sockets>/<pod uid>/libvirt-sock──┘ defines and starts the domain,
//!                                                    writes <node sockets>/<pod uid>/done once the VMI is final
//! ```
//!
//! Every path any two of them agree on is a function here.

use std::collections::BTreeMap;

/// Name of the main container.
pub const COMPUTE_CONTAINER: &str = "compute";
/// Name of the container that shows the guest's serial console (`kubectl logs … -c guest-console-log`).
pub const CONSOLE_LOG_CONTAINER: &str = "guest-console-log";
/// Name of the init container that provides the tools the containerDisk containers run.
pub const CONTAINER_DISK_BINARY_CONTAINER: &str = "container-disk-binary";

/// The node agent's view of the node's socket directories: one directory per launcher pod, named by the pod's UID.
/// On the host they are under [`HOST_SOCKETS_DIR`]`/<node name>/`: the node agent mounts its node's subdirectory
/// here (`subPathExpr: $(NODE_NAME)`), a launcher pod only its own (`subPathExpr: $(NODE_NAME)/$(POD_UID)`) at
/// [`POD_SOCKETS_DIR`]. (One directory per node name keeps the nodes of a one-machine test cluster apart.) The
/// node agent removes a pod's directory once the pod is gone.
pub const NODE_SOCKETS_DIR: &str = "/var/run/kubevirt-rs/sockets";
/// The hostPath holding [`NODE_SOCKETS_DIR`] of every node name.
pub const HOST_SOCKETS_DIR: &str = "/var/run/kubevirt-rs/sockets";
/// The launcher pod's own socket directory, as the `compute` container sees it.
pub const POD_SOCKETS_DIR: &str = "/var/run/kubevirt/sockets";
/// Pod-private directory (an emptyDir) for the launcher's state: the serial log, containerDisk copies, overlays.
pub const PRIVATE_DIR: &str = "/var/run/kubevirt-private";
/// Where the containerDisk containers' tools are (an emptyDir filled by [`CONTAINER_DISK_BINARY_CONTAINER`]).
pub const CONTAINER_DISK_BIN_DIR: &str = "/var/run/kubevirt/container-disk-bin";
/// Where containerDisk files are placed for the launcher (an emptyDir).
pub const CONTAINER_DISKS_DIR: &str = "/var/run/kubevirt/container-disks";
/// Where the launcher puts overlays, emptyDisks and cloud-init disks (an emptyDir).
pub const EPHEMERAL_DISKS_DIR: &str = "/var/run/kubevirt-ephemeral-disks";

/// A launcher pod's socket directory: the hand-over point between the launcher and the node agent. The same
/// directory has two names: [`SocketDir::in_pod`] for the launcher, [`SocketDir::on_node`] for the node agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketDir(pub String);

impl SocketDir {
    /// The directory as the launcher sees it.
    pub fn in_pod() -> SocketDir {
        SocketDir(POD_SOCKETS_DIR.to_owned())
    }

    /// The directory of the launcher pod `pod_uid` as the node agent sees it.
    pub fn on_node(pod_uid: &str) -> SocketDir {
        SocketDir(format!("{NODE_SOCKETS_DIR}/{pod_uid}"))
    }

    /// The directory itself.
    pub fn path(&self) -> &str {
        &self.0
    }

    /// libvirtd's socket (libvirtd runs with `unix_sock_dir` = this directory).
    pub fn libvirt_socket(&self) -> String {
        format!("{}/libvirt-sock", self.0)
    }

    /// The libvirt URI of this pod's libvirtd: a session daemon (it runs as the `qemu` user, upstream's non-root
    /// launcher); any client uid may use it (root's access to the socket is the only gate).
    pub fn libvirt_uri(&self) -> String {
        format!("qemu:///session?socket={}", self.libvirt_socket())
    }

    /// The non-root launcher's request for the pod's privileged set-up ([`SetupRequest`]): the launcher listens,
    /// the node agent connects, runs [`POD_SETUP_COMMAND`] in the pod's namespaces, which answers with one
    /// [`SetupReply`] (and the DHCP server's socket) on the same connection.
    pub fn setup_socket(&self) -> String {
        format!("{}/setup-sock", self.0)
    }

    /// Written by the launcher once libvirtd answers and the disks and network are prepared.
    pub fn ready(&self) -> String {
        format!("{}/ready", self.0)
    }

    /// Written by the launcher when preparing failed; holds the reason (one line).
    pub fn failed(&self) -> String {
        format!("{}/failed", self.0)
    }

    /// Written by the node agent once the VMI's final phase is recorded: the launcher may exit.
    pub fn done(&self) -> String {
        format!("{}/done", self.0)
    }

    /// The directory of QEMU's own sockets, owned by the `qemu` user (the launcher creates it; QEMU binds its
    /// sockets there).
    pub fn qemu_dir(&self) -> String {
        format!("{}/qemu", self.0)
    }

    /// The serial console's unix socket (QEMU listens, one client at a time; the node agent attaches
    /// `virtctl console` through it). QEMU also writes everything the guest prints to [`serial_log`].
    pub fn serial_console(&self) -> String {
        format!("{}/virt-serial0", self.qemu_dir())
    }

    /// The VNC server's unix socket (QEMU listens; the node agent attaches `virtctl vnc` through it).
    pub fn vnc(&self) -> String {
        format!("{}/virt-vnc", self.qemu_dir())
    }

    /// The directory of a live migration's unix sockets ([`MigrationChannel`]): in the source pod the node agent's
    /// proxies listen there, in the target pod QEMU's incoming migration and libvirtd's NBD server do. The node agent
    /// creates it, owned by the `qemu` user.
    pub fn migration_dir(&self) -> String {
        format!("{}/migration", self.0)
    }

    /// The unix socket of `channel` in [`SocketDir::migration_dir`].
    pub fn migration_socket(&self, channel: MigrationChannel) -> String {
        format!("{}/{}", self.migration_dir(), channel.socket_name())
    }

    /// The libvirt URI the source's libvirtd connects to for a peer-to-peer migration: its pod's
    /// [`MigrationChannel::Libvirt`] socket, proxied to the target pod's libvirtd.
    pub fn migration_libvirt_uri(&self) -> String {
        format!("qemu+unix:///session?socket={}", self.migration_socket(MigrationChannel::Libvirt))
    }

    /// Written by the launcher when the kubelet asked it to stop (SIGTERM): a guest that stops after this was
    /// stopped because its pod went away, not by itself, so the node agent reports the VMI `Failed`.
    pub fn terminating(&self) -> String {
        format!("{}/terminating", self.0)
    }
}

/// One stream of a live migration, proxied between the source and target pods' [`SocketDir::migration_socket`]s
/// by the two node agents (upstream's migration proxy: unix socket → TLS between the nodes → unix socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MigrationChannel {
    /// libvirt's own connection (source libvirtd → target libvirtd, peer to peer).
    Libvirt,
    /// QEMU's migration stream (memory and device state).
    Direct,
    /// The NBD stream of a block migration (the disks that are not shared).
    Block,
}

impl MigrationChannel {
    /// Every channel.
    pub const ALL: [MigrationChannel; 3] =
        [MigrationChannel::Libvirt, MigrationChannel::Direct, MigrationChannel::Block];

    /// The socket's file name.
    pub fn socket_name(self) -> &'static str {
        match self {
            MigrationChannel::Libvirt => "libvirt.sock",
            MigrationChannel::Direct => "direct.sock",
            MigrationChannel::Block => "block.sock",
        }
    }

    /// The value upstream writes for this channel in `migrationState.targetDirectMigrationNodePorts` (node port →
    /// this): 0 for libvirt, 49152 for the migration stream, 49153 for block migration.
    pub fn upstream_port(self) -> i64 {
        match self {
            MigrationChannel::Libvirt => 0,
            MigrationChannel::Direct => 49152,
            MigrationChannel::Block => 49153,
        }
    }

    /// The channel of an upstream port value ([`MigrationChannel::upstream_port`]).
    pub fn of_upstream_port(port: i64) -> Option<MigrationChannel> {
        Self::ALL.into_iter().find(|c| c.upstream_port() == port)
    }
}

/// The serial console log the domain writes and the console-log container follows.
pub fn serial_log() -> String {
    format!("{PRIVATE_DIR}/virt-serial0-log")
}

/// Value of label `vmi.kubevirt.io/id` on the launcher pods of VMI `name` (what `virtctl expose` selects): the
/// name, or a hash of it when longer than a label value may be.
pub fn vmi_id(name: &str) -> String {
    use sha2::Digest as _;
    if name.len() <= 63 {
        return name.to_owned();
    }
    let digest = sha2::Sha256::digest(name.as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The containerDisk file of volume `volume`, as copied from its image by the disk's init container.
pub fn container_disk_copy(volume: &str) -> String {
    format!("{CONTAINER_DISKS_DIR}/{volume}.img")
}

/// The qcow2 overlay over a containerDisk (the guest's writes, lost with the pod).
pub fn container_disk_overlay(volume: &str) -> String {
    format!("{EPHEMERAL_DISKS_DIR}/disk-data/{volume}/disk.qcow2")
}

/// The sparse qcow2 of an `emptyDisk` volume.
pub fn empty_disk(volume: &str) -> String {
    format!("{EPHEMERAL_DISKS_DIR}/empty-disks/{volume}.qcow2")
}

/// The cloud-init NoCloud disk of volume `volume`.
pub fn cloud_init_disk(volume: &str) -> String {
    format!("{EPHEMERAL_DISKS_DIR}/cloud-init/{volume}/noCloud.iso")
}

/// The cloud-init ConfigDrive disk of volume `volume` (an ISO labelled `config-2`).
pub fn cloud_init_config_drive_disk(volume: &str) -> String {
    format!("{EPHEMERAL_DISKS_DIR}/cloud-init/{volume}/configDrive.iso")
}

/// Where the controller mounts the Secret of a cloud-init volume's `secretRef` (keys `userdata` or `userData`).
pub fn cloud_init_user_secret_dir(volume: &str) -> String {
    format!("{PRIVATE_DIR}/cloud-init-secrets/{volume}/user")
}

/// Where the controller mounts the Secret of a cloud-init volume's `networkDataSecretRef` (keys `networkdata` or
/// `networkData`).
pub fn cloud_init_network_secret_dir(volume: &str) -> String {
    format!("{PRIVATE_DIR}/cloud-init-secrets/{volume}/network")
}

/// Mount point of a Filesystem PVC (or DataVolume) volume; the image is `disk.img` in it.
pub fn pvc_mount(volume: &str) -> String {
    format!("{PRIVATE_DIR}/vmi-disks/{volume}")
}

/// The image file of a Filesystem PVC volume.
pub fn pvc_disk(volume: &str) -> String {
    format!("{}/disk.img", pvc_mount(volume))
}

/// The device path of a Block PVC volume.
pub fn pvc_device(volume: &str) -> String {
    format!("/dev/{volume}")
}

/// Where the node agent puts hotplugged volumes inside the launcher pod (upstream's
/// `/var/run/kubevirt/hotplug-disks`): a bind mount of a Filesystem claim's `disk.img`, or a device node of a Block
/// claim.
pub const HOTPLUG_DISKS_DIR: &str = "/var/run/kubevirt/hotplug-disks";

/// The image of hotplugged Filesystem volume `volume` in the launcher pod (QEMU's path).
pub fn hotplug_disk(volume: &str) -> String {
    format!("{HOTPLUG_DISKS_DIR}/{volume}.img")
}

/// The device node of hotplugged Block volume `volume` in the launcher pod (QEMU's path).
pub fn hotplug_device(volume: &str) -> String {
    format!("{HOTPLUG_DISKS_DIR}/{volume}")
}

/// Where a hotplug attachment pod mounts the claim of volume `volume` (a directory holding `disk.img` for a
/// Filesystem claim, the device for a Block one); the node agent takes it from there.
pub fn attachment_path(volume: &str) -> String {
    format!("/hotplug/{volume}")
}

/// CDI's default filesystem overhead in per mille (5.5 %): what the launcher leaves free on a Filesystem PVC when
/// it creates the volume's `disk.img`, as upstream's launcher does.
pub const PVC_FILESYSTEM_OVERHEAD_PER_MILLE: u64 = 55;

/// The size of the `disk.img` the launcher creates on a Filesystem PVC whose filesystem holds `capacity` bytes:
/// the capacity minus [`PVC_FILESYSTEM_OVERHEAD_PER_MILLE`], rounded down to a MiB.
pub fn pvc_disk_size(capacity: u64) -> u64 {
    let overhead = u64::try_from((u128::from(capacity) * u128::from(PVC_FILESYSTEM_OVERHEAD_PER_MILLE)).div_ceil(1000))
        .unwrap_or(u64::MAX);
    capacity.saturating_sub(overhead) / crate::quantity::MIB * crate::quantity::MIB
}

/// The image's libvirtd configuration (`deploy/launcher/libvirtd.conf`); the launcher runs libvirtd with a copy
/// whose `unix_sock_dir` is the pod's [`SocketDir::in_pod`].
pub const LIBVIRTD_CONF: &str = "/etc/libvirt/libvirtd.conf";

/// The launcher's own state (in the pod-private emptyDir: the launcher runs as the `qemu` user; not shared with
/// the node agent).
pub const LAUNCHER_STATE_DIR: &str = "/var/run/kubevirt-private/launcher";

/// The image's QEMU driver configuration (`deploy/launcher/qemu.conf`); the session libvirtd reads a copy at
/// [`libvirt_qemu_conf_copy`].
pub const QEMU_CONF: &str = "/etc/libvirt/qemu.conf";

/// `XDG_CONFIG_HOME`, `XDG_CACHE_HOME` and `HOME` of the session libvirtd: short, because the guest-agent
/// channel socket lands under `$XDG_CONFIG_HOME/libvirt/qemu/channel/target/domain-<id>-<name>/` and a unix
/// socket path has at most 107 bytes.
pub const LIBVIRT_HOME: &str = PRIVATE_DIR;

/// Where the session libvirtd reads its QEMU driver configuration.
pub fn libvirt_qemu_conf_copy() -> String {
    format!("{LIBVIRT_HOME}/libvirt/qemu.conf")
}

/// `XDG_RUNTIME_DIR` of the session libvirtd.
pub fn libvirt_runtime_dir() -> String {
    format!("{LAUNCHER_STATE_DIR}/xdg-runtime")
}

/// The launcher's program in its image; the node agent runs it (as [`POD_SETUP_COMMAND`]) in the pod's network
/// and mount namespaces.
pub const LAUNCHER_PROGRAM: &str = "/usr/local/bin/virt-launcher";
/// The launcher's subcommand that does the pod's privileged set-up for the node agent: reads one
/// [`SetupRequest`] (JSON) on stdin and sends one [`SetupReply`] on stdout, the launcher's [`SocketDir::setup_socket`]
/// connection, with the DHCP server's socket attached (SCM_RIGHTS) when there is one.
pub const POD_SETUP_COMMAND: &str = "pod-setup";

/// What the pod's privileged set-up works from: the node agent's copy of the VMI (never the launcher's word).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupRequest {
    /// The VMI's spec (`VirtualMachineInstanceSpec` as JSON).
    pub vmi_spec: serde_json::Value,
    /// The VMI's name (the default hostname).
    pub vmi_name: String,
    /// The VMI's UID (the derived MAC).
    pub vmi_uid: String,
}

/// The privileged set-up's answer to the launcher.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetupReply {
    /// Why it failed (one line); `None`: done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What was set up (one line, for the launcher's log).
    #[serde(default)]
    pub summary: String,
    /// The pod interface's MTU (the masquerade binding's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The bridge bindings of secondary (Multus) interfaces, in the spec's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondary: Vec<SecondaryLink>,
    /// The spec interfaces whose DHCP server sockets are attached to the reply, in the order of the descriptors
    /// (the masquerade interface's first, then every secondary interface that had an IPv4 address).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dhcp_interfaces: Vec<String>,
}

/// A secondary interface's bridge binding as the privileged set-up made it: the pod interface Multus created is a
/// port of [`secondary_bridge`] beside the guest's [`secondary_tap`], and its IPv4 settings (removed from it) are
/// what the guest gets by DHCP.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecondaryLink {
    /// The spec's interface (and network) name.
    pub interface: String,
    /// The pod interface's MTU (the guest NIC's).
    pub mtu: u32,
    /// The pod interface's IPv4 address as `a.b.c.d/prefix`, moved to the guest; `None`: the network has no IPAM
    /// and the guest gets no DHCP answer on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// The pod interface's IPv4 routes through a gateway (`0.0.0.0/0` for a default route), offered to the guest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
}

/// An IPv4 route through a gateway.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Route {
    /// The destination, `a.b.c.d/prefix`.
    pub dst: String,
    /// The gateway.
    pub gateway: String,
}

impl SetupReply {
    /// The reply as sent: one JSON line.
    pub fn to_line(&self) -> String {
        format!("{}\n", serde_json::to_string(self).unwrap_or_default())
    }

    /// Parses a reply as sent ([`SetupReply::to_line`]).
    pub fn from_line(line: &[u8]) -> Result<SetupReply, serde_json::Error> {
        serde_json::from_slice(line.trim_ascii())
    }
}

/// The copy of [`LIBVIRTD_CONF`] libvirtd runs with.
pub fn libvirtd_conf_copy() -> String {
    format!("{LAUNCHER_STATE_DIR}/libvirtd.conf")
}

/// libvirtd's pid file (kept out of the shared `/run`).
pub fn libvirtd_pid_file() -> String {
    format!("{LAUNCHER_STATE_DIR}/libvirtd.pid")
}

/// The masquerade binding's files: the nftables ruleset applied.
pub fn network_state_dir() -> String {
    format!("{LAUNCHER_STATE_DIR}/net")
}

/// The pod interface the CNI configured (the pod network).
pub const POD_INTERFACE: &str = "eth0";
/// The tap device of the pod-network interface (masquerade binding).
pub const POD_TAP: &str = "tap0";
/// The in-pod bridge of the masquerade binding (`k6t-` + [`POD_INTERFACE`]).
pub const POD_BRIDGE: &str = "k6t-eth0";
/// Hex digits of the network name's SHA-256 in a secondary network's pod interface name (upstream's
/// `maxIfaceNameLen`).
const SECONDARY_HASH_LEN: usize = 11;

fn network_hash(network_name: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(network_name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    hex[..SECONDARY_HASH_LEN].to_owned()
}

/// The pod interface Multus creates for the VMI's secondary network `network_name` (`networks[].name`, not the
/// attachment's name): upstream's hashed scheme, `pod` + the first 11 hex digits of the name's SHA-256. The
/// VMI controller names it in the pod's `k8s.v1.cni.cncf.io/networks`; the launcher binds it.
pub fn secondary_pod_interface(network_name: &str) -> String {
    format!("pod{}", network_hash(network_name))
}

/// The in-pod bridge of the bridge binding on secondary network `network_name`: upstream's `k6t-` + the hash of
/// [`secondary_pod_interface`] (15 characters, Linux's limit).
pub fn secondary_bridge(network_name: &str) -> String {
    format!("k6t-{}", network_hash(network_name))
}

/// The guest's tap on secondary network `network_name` (upstream's `tap` + the hash); the domain's
/// `<target dev>`.
pub fn secondary_tap(network_name: &str) -> String {
    format!("tap{}", network_hash(network_name))
}

/// The name the pod interface of secondary network `network_name` gets once it is a port of the bridge
/// (upstream's `<hash>-nic`).
pub fn secondary_bridge_port(network_name: &str) -> String {
    format!("{}-nic", network_hash(network_name))
}

/// The link-local address of the bridge of the `index`-th interface of the VMI (upstream's `169.254.75.1<index>`
/// for the first ten): the guest's DHCP server answers from it. `None` past the 245th.
pub fn secondary_bridge_address(index: usize) -> Option<std::net::Ipv4Addr> {
    u8::try_from(index).ok().and_then(|i| i.checked_add(10)).map(|last| std::net::Ipv4Addr::new(169, 254, 75, last))
}

/// The nftables table (family `ip`) of the masquerade binding (upstream's name).
pub const MASQUERADE_NFT_TABLE: &str = "kubevirt_nat";
/// The gateway address the guest sees on the masquerade network.
pub const MASQUERADE_GATEWAY: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 2, 1);
/// The address the guest gets by DHCP on the masquerade network.
pub const MASQUERADE_GUEST: std::net::Ipv4Addr = std::net::Ipv4Addr::new(10, 0, 2, 2);
/// The masquerade network's prefix length.
pub const MASQUERADE_PREFIX: u8 = 24;
/// The MAC of the masquerade bridge (the guest's gateway), the same in every launcher pod so that a migrated
/// guest's neighbour entry for its gateway stays valid.
pub const MASQUERADE_GATEWAY_MAC: &str = "02:00:00:00:00:01";

/// The MAC address of interface `interface` of the VMI `vmi_uid` when the spec gives none: a locally
/// administered unicast address (`02:` + 5 bytes of an FNV-1a hash of `<uid>/<interface>`), the same in the domain
/// XML (node agent) and wherever the launcher needs it (e.g. a static DHCP lease). Upstream lets libvirt pick a
/// random one; a derived one survives a redefinition of the domain.
pub fn derived_mac(vmi_uid: &str, interface: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in vmi_uid.bytes().chain(std::iter::once(b'/')).chain(interface.bytes()) {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let b = hash.to_be_bytes();
    format!("02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3], b[4])
}

/// Environment variables of the `compute` container.
pub mod var {
    /// The VMI's name.
    pub const VMI_NAME: &str = "KUBEVIRT_RS_VMI_NAME";
    /// The VMI's namespace.
    pub const VMI_NAMESPACE: &str = "KUBEVIRT_RS_VMI_NAMESPACE";
    /// The VMI's UID.
    pub const VMI_UID: &str = "KUBEVIRT_RS_VMI_UID";
    /// The pod's own UID (downward API).
    pub const POD_UID: &str = "KUBEVIRT_RS_POD_UID";
    /// The pod's node (downward API `spec.nodeName`; the socket directory's `subPathExpr` uses it).
    pub const NODE_NAME: &str = "KUBEVIRT_RS_NODE_NAME";
    /// The VMI's spec as JSON (immutable once created).
    pub const VMI_SPEC: &str = "KUBEVIRT_RS_VMI_SPEC";
}

/// Why the launcher environment is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {name}: {message}")]
pub struct LauncherEnvError {
    /// The variable.
    pub name: &'static str,
    /// What is wrong.
    pub message: String,
}

/// The `compute` container's environment.
#[derive(Debug, Clone, PartialEq)]
pub struct LauncherEnv {
    /// The VMI's name.
    pub vmi_name: String,
    /// The VMI's namespace.
    pub vmi_namespace: String,
    /// The VMI's UID.
    pub vmi_uid: String,
    /// The VMI's spec (JSON), for preparing its disks and network.
    pub vmi_spec: serde_json::Value,
}

impl LauncherEnv {
    /// The literal variables (the pod UID comes from the downward API, see [`var::POD_UID`]).
    pub fn to_env(&self) -> Vec<(String, String)> {
        vec![
            (var::VMI_NAME.to_owned(), self.vmi_name.clone()),
            (var::VMI_NAMESPACE.to_owned(), self.vmi_namespace.clone()),
            (var::VMI_UID.to_owned(), self.vmi_uid.clone()),
            (var::VMI_SPEC.to_owned(), self.vmi_spec.to_string()),
        ]
    }

    /// Reads the environment; returns it and the pod UID.
    pub fn from_env(env: &BTreeMap<String, String>) -> Result<(LauncherEnv, String), LauncherEnvError> {
        let need = |name: &'static str| {
            env.get(name)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .ok_or(LauncherEnvError { name, message: String::from("not set") })
        };
        let spec = need(var::VMI_SPEC)?;
        let vmi_spec = serde_json::from_str(&spec)
            .map_err(|e| LauncherEnvError { name: var::VMI_SPEC, message: format!("not JSON: {e}") })?;
        Ok((
            LauncherEnv {
                vmi_name: need(var::VMI_NAME)?,
                vmi_namespace: need(var::VMI_NAMESPACE)?,
                vmi_uid: need(var::VMI_UID)?,
                vmi_spec,
            },
            need(var::POD_UID)?,
        ))
    }
}

/// What the launcher found while preparing the pod, written as JSON into the ready file ([`SocketDir::ready`])
/// for the node agent, which renders the domain from the VMI and these facts: the pod's files are only visible
/// inside the pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Prepared {
    /// Image format (`qcow2` or `raw`) of each containerDisk copy, by volume name (the overlay's backing format).
    #[serde(default)]
    pub container_disk_formats: BTreeMap<String, String>,
    /// PVC/DataVolume volumes that are block devices ([`pvc_device`]); the others are `disk.img` files.
    #[serde(default)]
    pub block_volumes: std::collections::BTreeSet<String>,
    /// Volumes whose storage refused O_DIRECT (their default cache mode is `writethrough`).
    #[serde(default)]
    pub no_direct_io: std::collections::BTreeSet<String>,
    /// MTU of the pod interface (`eth0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_interface_mtu: Option<u32>,
    /// MTU of each secondary interface's pod interface, by spec interface name (bridge bindings on Multus
    /// networks); the domain's `<mtu>` of that NIC.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secondary_mtus: BTreeMap<String, u32>,
}

impl Prepared {
    /// The ready file's content.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses the ready file's content; an empty file means nothing was found.
    pub fn from_json(s: &str) -> Result<Prepared, serde_json::Error> {
        if s.trim().is_empty() { Ok(Prepared::default()) } else { serde_json::from_str(s) }
    }
}

/// The libvirt domain name of a VMI (`<namespace>_<name>`, as upstream).
pub fn domain_name(namespace: &str, name: &str) -> String {
    format!("{namespace}_{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_round_trips_and_paths_agree() {
        let want = LauncherEnv {
            vmi_name: "testvmi".into(),
            vmi_namespace: "ns".into(),
            vmi_uid: "u-1".into(),
            vmi_spec: serde_json::json!({"domain": {"devices": {}}}),
        };
        let mut env: BTreeMap<String, String> = want.to_env().into_iter().collect();
        env.insert(var::POD_UID.into(), "p-1".into());
        assert_eq!(LauncherEnv::from_env(&env), Ok((want, "p-1".to_owned())));
        env.remove(var::VMI_UID);
        assert_eq!(
            LauncherEnv::from_env(&env).err().map(|e| e.to_string()).as_deref(),
            Some("invalid KUBEVIRT_RS_VMI_UID: not set")
        );
        assert_eq!(
            SocketDir::on_node("p-1").libvirt_uri(),
            "qemu:///session?socket=/var/run/kubevirt-rs/sockets/p-1/libvirt-sock"
        );
        assert_eq!(SocketDir::in_pod().ready(), "/var/run/kubevirt/sockets/ready");
        assert_eq!(pvc_disk("disk0"), "/var/run/kubevirt-private/vmi-disks/disk0/disk.img");
        assert_eq!(domain_name("ns", "vmi"), "ns_vmi");
        let prepared = Prepared {
            container_disk_formats: BTreeMap::from([("cd".into(), "qcow2".into())]),
            pod_interface_mtu: Some(1500),
            ..Default::default()
        };
        assert_eq!(Prepared::from_json(&prepared.to_json()).ok(), Some(prepared));
        assert_eq!(Prepared::from_json("").ok(), Some(Prepared::default()));
        // 1 GiB minus 5.5 % = 967.68 MiB → 967 MiB; nothing left of tiny filesystems.
        assert_eq!(pvc_disk_size(1 << 30), 967 << 20);
        assert_eq!(pvc_disk_size(10 << 30), 9676 << 20);
        assert_eq!(pvc_disk_size(1 << 20), 0);
        assert!(pvc_disk_size(u64::MAX) < u64::MAX / 1000 * 945);
        assert_eq!(SocketDir::in_pod().serial_console(), "/var/run/kubevirt/sockets/qemu/virt-serial0");
        assert_eq!(SocketDir::on_node("u").vnc(), "/var/run/kubevirt-rs/sockets/u/qemu/virt-vnc");
        let mac = derived_mac("6a1f2b3c-4d5e-4f60-8a71-92b3c4d5e6f7", "default");
        assert_eq!(mac, derived_mac("6a1f2b3c-4d5e-4f60-8a71-92b3c4d5e6f7", "default"));
        assert_ne!(mac, derived_mac("6a1f2b3c-4d5e-4f60-8a71-92b3c4d5e6f7", "other"));
        assert!(mac.starts_with("02:") && mac.len() == 17, "{mac}");
    }

    #[test]
    fn secondary_devices_have_upstreams_hashed_names_within_linuxs_limit() {
        // sha256("ptp") = e31d7ce2712…: upstream's virt-controller names the same interface.
        assert_eq!(secondary_pod_interface("ptp"), "pode31d7ce2712");
        assert!(secondary_pod_interface("a-very-long-network-name").len() <= 15);
        assert_ne!(secondary_pod_interface("a"), secondary_pod_interface("b"));
        assert_eq!(
            [secondary_bridge("ptp"), secondary_tap("ptp"), secondary_bridge_port("ptp")],
            ["k6t-e31d7ce2712", "tape31d7ce2712", "e31d7ce2712-nic"]
        );
        assert_eq!(secondary_bridge_address(0), Some(std::net::Ipv4Addr::new(169, 254, 75, 10)));
        assert_eq!(secondary_bridge_address(3), Some(std::net::Ipv4Addr::new(169, 254, 75, 13)));
        assert_eq!(secondary_bridge_address(246), None);
    }
}
