# The node side of the test cluster: image registry, containerd + runc + CNI, a real kubelet, and the local
# storage provisioner. Sourced by up/down (needs common.sh).
. "$HERE/images.sh"
# The node is named `localhost`: its kubelet listens on 127.0.0.1 only, and the apiserver reaches a kubelet (logs,
# exec, port-forward) through the node's Hostname address (kubelet refuses a loopback node IP).
NODE_NAME=${KV_NODE_NAME:-localhost}
KUBELET_PORT=${KV_KUBELET_PORT:-30250}
KUBELET_HEALTHZ_PORT=${KV_KUBELET_HEALTHZ_PORT:-30248}
POD_CIDR=${KV_POD_CIDR:-10.244.0.0/24}
POD_GATEWAY=${POD_CIDR%.0/24}.1
KUBERNETES_SERVICE_IP=10.96.0.1
BRIDGE=kvtest0
NAT_CHAIN=KVTEST-PREROUTING
STORAGE_DIR=$T/storage
CTD=$T/containerd
KUBE_PROXY_HEALTHZ_PORT=${KV_KUBE_PROXY_HEALTHZ_PORT:-30256}
KUBE_PROXY_METRICS_PORT=${KV_KUBE_PROXY_METRICS_PORT:-30249}
# kube-proxy serves every node (one host network namespace), so its cluster CIDR covers every node's pod CIDR.
CLUSTER_CIDR=10.244.0.0/16
NODE_DAEMONS="registry containerd kubelet kube-proxy local-provisioner"
# Multus (thin plugin, built by build-multus.sh) is every node's CNI entry point; it delegates eth0 to the node's
# bridge conflist and secondary networks (pod annotation k8s.v1.cni.cncf.io/networks) to their
# NetworkAttachmentDefinitions (tests/cluster/multus/). Host-local IPAM state of those secondary networks lives in
# one directory for both nodes (one host: their addresses never collide); the NADs `up` applies point there.
MULTUS_IPAM_DIR=$T/multus-ipam

# Number of nodes: 1 (default) or 2 (`KV_NODES=2 tests/cluster/up`).
KV_NODES=${KV_NODES:-1}
# Node 2 has its own containerd, kubelet, pod CIDR, bridge and cgroup root, all under $NODE2_DIR. It is named by
# its kubelet's address, an IP literal: the apiserver dials a kubelet at the node's Hostname address, and its pure-Go
# resolver (CGO off) knows no name but /etc/hosts' for a loopback address (`*.localhost` goes to DNS). Any 127.x
# address is loopback on Linux, so the kubelet binds 127.0.0.2 and the apiserver dials "127.0.0.2:<port>" with no
# lookup at all; the kubelet takes an IP-literal hostname as the node's InternalIP.
NODE2_IP=${KV_NODE2_IP:-127.0.0.2}
NODE2_NAME=$NODE2_IP
NODE2_DIR=$T/node2
KUBELET2_PORT=${KV_KUBELET2_PORT:-30251}
KUBELET2_HEALTHZ_PORT=${KV_KUBELET2_HEALTHZ_PORT:-30247}
POD2_CIDR=${KV_POD2_CIDR:-10.244.1.0/24}
# Own cgroup root (cgroupfs driver): the kubelet's kubepods/QoS hierarchy goes below it, not beside node 1's /kubepods.
NODE2_CGROUP_ROOT=/kvtest-node2
NODE2_DAEMONS="node2-containerd node2-kubelet"

# The provisioner is a Rust binary of this workspace (tests/kube-support).
PROVISIONER_BIN=${CARGO_TARGET_DIR:-$HOME/.cache/kubevirt-rs/target}/debug/local-provisioner
node_build() {
  log "building local-provisioner (cargo)"
  (cd "$REPO" && CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/kubevirt-rs/target} \
    cargo build -q -p kube-test-support --bin local-provisioner) || die "cargo build of local-provisioner failed"
}

# select_node 1|2: point the N_* variables (names, paths, ports, network) at node 1 or node 2; the functions below
# act on the selected node. Node 1's paths and pid-file names are the single-node cluster's (tests read them).
select_node() {
  case $1 in
    1)
      N_NAME=$NODE_NAME N_CONTAINERD=containerd N_KUBELET=kubelet
      N_CTD=$CTD N_CNI=$T/cni N_NET=kvtest N_BRIDGE=$BRIDGE N_CIDR=$POD_CIDR N_CHAIN=$NAT_CHAIN
      N_CERT=kubelet N_KUBECONFIG=$T/kubelet.kubeconfig N_CONFIG=$T/kubelet-config.yaml
      N_ROOT=$T/kubelet N_PODLOGS=$T/pod-logs
      N_ADDRESS=127.0.0.1 N_PORT=$KUBELET_PORT N_HEALTHZ=$KUBELET_HEALTHZ_PORT N_CGROUP_ROOT="" ;;
    2)
      N_NAME=$NODE2_NAME N_CONTAINERD=node2-containerd N_KUBELET=node2-kubelet
      N_CTD=$NODE2_DIR/containerd N_CNI=$NODE2_DIR/cni N_NET=kvtest1 N_BRIDGE=kvtest1 N_CIDR=$POD2_CIDR
      N_CHAIN=KVTEST1-PREROUTING
      N_CERT=kubelet-2 N_KUBECONFIG=$NODE2_DIR/kubelet.kubeconfig N_CONFIG=$NODE2_DIR/kubelet-config.yaml
      N_ROOT=$NODE2_DIR/kubelet N_PODLOGS=$NODE2_DIR/pod-logs
      N_ADDRESS=$NODE2_IP N_PORT=$KUBELET2_PORT N_HEALTHZ=$KUBELET2_HEALTHZ_PORT N_CGROUP_ROOT=$NODE2_CGROUP_ROOT ;;
    *) die "select_node: no node $1" ;;
  esac
  N_GATEWAY=${N_CIDR%.0/24}.1
}

# Pods live in their own network namespaces on the selected node's bridge, but everything on this machine listens
# on 127.0.0.1 only. Two NAT rules (only for traffic entering from the bridge) make the host's loopback services
# reachable from pods: <gateway>:<port> -> 127.0.0.1:<port>, and the `kubernetes` Service IP
# ($KUBERNETES_SERVICE_IP:443) -> the apiserver (it listens on loopback, so that Service has no endpoints for
# kube-proxy to route to). Node 2's pods also get node 1's gateway ($POD_GATEWAY, what tests hand to pods as "the
# host") NATed to loopback, so a pod reaches host services the same way on either node. Between the bridges the
# host routes (connected routes, ip_forward): pods reach each other by pod IP without NAT.
setup_pod_network() {
  ip link show "$N_BRIDGE" >/dev/null 2>&1 || ip link add "$N_BRIDGE" type bridge
  ip addr replace "$N_GATEWAY/24" dev "$N_BRIDGE"
  ip link set "$N_BRIDGE" up
  sysctl -qw "net.ipv4.conf.$N_BRIDGE.route_localnet=1"
  # Routing between the bridges needs forwarding; `down` restores the machine's setting if it was off.
  if [ "$N_BRIDGE" != "$BRIDGE" ] && [ "$(sysctl -n net.ipv4.ip_forward)" != 1 ]; then
    echo 0 >"$T/ip_forward.orig"
    sysctl -qw net.ipv4.ip_forward=1
  fi
  iptables -t nat -N "$N_CHAIN" 2>/dev/null || iptables -t nat -F "$N_CHAIN"
  iptables -t nat -C PREROUTING -i "$N_BRIDGE" -j "$N_CHAIN" 2>/dev/null || iptables -t nat -A PREROUTING -i "$N_BRIDGE" -j "$N_CHAIN"
  iptables -t nat -A "$N_CHAIN" -d "$KUBERNETES_SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$API_PORT"
  iptables -t nat -A "$N_CHAIN" -d "$N_GATEWAY/32" -p tcp -j DNAT --to-destination 127.0.0.1
  [ "$N_GATEWAY" = "$POD_GATEWAY" ] || iptables -t nat -A "$N_CHAIN" -d "$POD_GATEWAY/32" -p tcp -j DNAT --to-destination 127.0.0.1
}

teardown_pod_network() {
  while iptables -t nat -D PREROUTING -i "$N_BRIDGE" -j "$N_CHAIN" 2>/dev/null; do :; done
  iptables -t nat -F "$N_CHAIN" 2>/dev/null || true
  iptables -t nat -X "$N_CHAIN" 2>/dev/null || true
  ip link del "$N_BRIDGE" 2>/dev/null || true
}

# Test StorageClasses served by the local provisioner. `shared` stands for what NFS/CephFS give real clusters:
# Immediate binding, PVs reachable from every node (the provisioner's node affinity is the label all test nodes
# carry, and all nodes share this host's filesystem), any access mode including ReadWriteMany.
apply_storage_classes() {
  kc apply -f - >/dev/null <<YAML
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
  annotations: {storageclass.kubernetes.io/is-default-class: "true"}
provisioner: kubevirt-rs.test/local
volumeBindingMode: Immediate
reclaimPolicy: Delete
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local-wffc
provisioner: kubevirt-rs.test/local
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Delete
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: shared
provisioner: kubevirt-rs.test/local
volumeBindingMode: Immediate
reclaimPolicy: Delete
YAML
}

# node_ready NAME: the Node object's Ready condition is True.
node_ready() {
  kc get node "$1" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

node_healthy() {
  node_ready "$NODE_NAME"
}

# Node 2's daemons run and it is Ready.
node2_healthy() {
  local d
  for d in $NODE2_DAEMONS; do pid_alive "$d" || return 1; done
  node_ready "$NODE2_NAME"
}

# The selected node's containerd and CNI config. containerd uses the alphabetically first config of conf_dir:
# 00-multus.conf, the Multus thin plugin, whose only delegate (the cluster network, eth0) is the node's bridge
# conflist, also kept as 10-kvtest.conflist. bin_dir is the node's own directory of links to the Debian CNI plugins
# (/usr/lib/cni) and the multus binary; Multus finds the delegates' plugins there too (binDir).
write_containerd_config() {
  local p
  mkdir -p "$N_CTD" "$N_CNI/net.d" "$N_CNI/ipam" "$N_CNI/bin" "$N_CNI/multus/net.d" "$MULTUS_IPAM_DIR"
  for p in /usr/lib/cni/*; do ln -sfn "$p" "$N_CNI/bin/${p##*/}"; done
  ln -sfn "$MULTUS_BIN_DIR/multus" "$N_CNI/bin/multus"
  cat >"$N_CTD/config.toml" <<TOML
version = 2
root = "$N_CTD/root"
state = "$N_CTD/state"
[grpc]
  address = "$N_CTD/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$N_CTD/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$IMAGE_PREFIX/pause:1"
  stream_server_address = "127.0.0.1"
  enable_cdi = false
  # This machine's root lacks CAP_SYS_RESOURCE, so runc cannot set the sandbox's oom_score_adj to -998.
  restrict_oom_score_adj = true
  # Block volumes are opened by non-root workers (uid 107, as CDI runs them): give the device node the
  # container's uid/gid, as clusters running CDI/KubeVirt configure it.
  device_ownership_from_security_context = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$N_CTD/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$N_CNI/bin"
    conf_dir = "$N_CNI/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REGISTRY"]
    endpoint = ["http://$REGISTRY"]
TOML
  local cluster_net
  cluster_net=$(cat <<JSON
{
  "cniVersion": "0.4.0",
  "name": "$N_NET",
  "plugins": [
    {
      "type": "bridge", "bridge": "$N_BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$N_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$N_CNI/ipam"}
    }
  ]
}
JSON
)
  echo "$cluster_net" >"$N_CNI/net.d/10-kvtest.conflist"
  # kubeconfig: Multus reads the pod's networks annotation and the NADs, and writes the pod's
  # k8s.v1.cni.cncf.io/network-status annotation. cniDir caches each pod's delegates for DEL.
  cat >"$N_CNI/net.d/00-multus.conf" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "multus-cni-network",
  "type": "multus",
  "kubeconfig": "$KUBECONFIG_FILE",
  "binDir": "$N_CNI/bin",
  "cniDir": "$N_CNI/multus",
  "confDir": "$N_CNI/multus/net.d",
  "logFile": "$T/${N_CONTAINERD%containerd}multus.log",
  "logLevel": "error",
  "delegates": [$cluster_net]
}
JSON
}

# make_cgroup_root PATH: the selected node's cgroup root must exist before its kubelet starts (the kubelet checks
# it in every controller). Created in every cgroup hierarchy mounted under /sys/fs/cgroup: one directory on a
# cgroup v2 machine, one per controller on cgroup v1/hybrid (this machine class). A new v1 cpuset cgroup starts
# with no CPUs and memory nodes: copy the parent's.
make_cgroup_root() {
  local m f
  for m in $(awk '($3 == "cgroup" || $3 == "cgroup2") && index($2, "/sys/fs/cgroup") == 1 {print $2}' /proc/mounts); do
    mkdir -p "$m$1"
    for f in cpuset.cpus cpuset.mems; do
      if [ -f "$m$1/$f" ] && [ -z "$(cat "$m$1/$f")" ]; then cat "$m/$f" >"$m$1/$f"; fi
    done
  done
}

# remove_cgroup_root PATH: remove a cgroup root and the kubelet's hierarchy below it, deepest first (after its
# pods are gone; a cgroup still holding a process stays).
remove_cgroup_root() {
  local m
  for m in $(awk '($3 == "cgroup" || $3 == "cgroup2") && index($2, "/sys/fs/cgroup") == 1 {print $2}' /proc/mounts); do
    [ ! -d "$m$1" ] || find "$m$1" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
  return 0
}

# The selected node's kubelet: its own client certificate (system:node:<name>, signed by the cluster CA), root
# dir, pod log dir, ports and cgroup root (only node 2 sets one; node 1 keeps the default /).
write_kubelet_config() {
  mkdir -p "$N_ROOT" "$N_PODLOGS"
  (
    cd "$P"
    openssl req -newkey rsa:2048 -nodes -keyout "$N_CERT.key" -out "$N_CERT.csr" -subj "/O=system:nodes/CN=system:node:$N_NAME" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=CA:FALSE\n' >"$N_CERT.ext"
    openssl x509 -req -in "$N_CERT.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$N_CERT.crt" -days 3650 -extfile "$N_CERT.ext" 2>/dev/null
    rm -f "$N_CERT.csr" "$N_CERT.ext"
  )
  write_kubeconfig "$N_KUBECONFIG" "$N_CERT"
  cat >"$N_CONFIG" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $N_ADDRESS
port: $N_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $N_HEALTHZ
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$N_CTD/containerd.sock
podLogsDir: $N_PODLOGS
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
makeIPTablesUtilChains: false
rotateCertificates: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
enforceNodeAllocatable: []
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusReportFrequency: 10s
YAML
  [ -z "$N_CGROUP_ROOT" ] || echo "cgroupRoot: $N_CGROUP_ROOT" >>"$N_CONFIG"
}

# start_node_runtime: containerd, pod network and kubelet of the selected node; waits until the node is Ready.
start_node_runtime() {
  write_containerd_config
  setup_pod_network
  start_bg "$N_CONTAINERD" "$(command -v containerd)" --config "$N_CTD/config.toml"
  wait_for "$N_CONTAINERD" 30 test -S "$N_CTD/containerd.sock" || return 1
  [ -z "$N_CGROUP_ROOT" ] || make_cgroup_root "$N_CGROUP_ROOT"
  write_kubelet_config
  start_bg "$N_KUBELET" "$K8S_BIN_DIR/kubelet" --config="$N_CONFIG" \
    --kubeconfig="$N_KUBECONFIG" --root-dir="$N_ROOT" --cert-dir="$N_ROOT/pki" \
    --hostname-override="$N_NAME" --node-labels="kubevirt-rs.test/node=true" --v=2
  log "waiting for node $N_NAME to be Ready"
  wait_for node 90 node_ready "$N_NAME" || return 1
  log "node $N_NAME Ready"
}

# kube-proxy (iptables mode) routes Service IPs and NodePorts to their endpoints, as on a real node. Every Service
# connection is masqueraded: the bridge's pods then answer through the node, whatever the bridge netfilter
# settings of the machine. The node keeps its loopback NodePorts (127.0.0.1:<nodePort>) reachable from the host.
write_kube_proxy_config() {
  write_kubeconfig "$T/kube-proxy.kubeconfig" kube-proxy
  cat >"$T/kube-proxy-config.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $T/kube-proxy.kubeconfig}
hostnameOverride: $NODE_NAME
mode: iptables
clusterCIDR: $CLUSTER_CIDR
iptables: {masqueradeAll: true, localhostNodePorts: true}
healthzBindAddress: 127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$KUBE_PROXY_METRICS_PORT
# Leave the machine's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
YAML
}

node_up() {
  start_registry || return 1
  push_images || return 1
  select_node 1
  start_node_runtime || return 1
  write_kube_proxy_config
  start_bg kube-proxy "$K8S_BIN_DIR/kube-proxy" --config="$T/kube-proxy-config.yaml" --v=2
  wait_for kube-proxy 60 curl -fsS "http://127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT/healthz" || return 1
  mkdir -p "$STORAGE_DIR"
  start_bg local-provisioner "$PROVISIONER_BIN" --kubeconfig="$T/node-agent.kubeconfig" --storage-dir="$STORAGE_DIR"
  apply_storage_classes
}

# Node 2 joins a running control plane and node 1: it only adds its own containerd and kubelet (same registry,
# kube-proxy and provisioner as node 1).
node2_up() {
  mkdir -p "$NODE2_DIR"
  select_node 2
  start_node_runtime || return 1
  apply_storage_classes
}

# release_multus_leases IDS: drop the host-local leases of the shared secondary-network IPAM dir held by these pod
# sandboxes (a lease file is named by its address and holds the container ID, then the interface name). Their
# veths and host routes (ptp) went with their network namespaces; `down` removes the whole directory anyway, this is
# for a node restarted alone (node 2) while the other keeps its pods and leases.
release_multus_leases() {
  local f id
  [ -n "$1" ] && [ -d "$MULTUS_IPAM_DIR" ] || return 0
  for f in "$MULTUS_IPAM_DIR"/*/*; do
    [ -f "$f" ] || continue
    id=$(head -n 1 "$f" | tr -d '\r')
    [ -z "$id" ] || ! grep -qxF -- "$id" <<<"$1" || rm -f "$f"
  done
  return 0
}

# stop_node_runtime: the selected node's kubelet, its pods and its containerd.
stop_node_runtime() {
  stop_pids "$N_KUBELET"
  # Pod sandboxes/containers are children of containerd shims; stop them through containerd before containerd.
  if pid_alive "$N_CONTAINERD"; then
    local c="ctr -a $N_CTD/containerd.sock -n k8s.io" t ns ids
    # The pods' network namespaces (CRI pins them under /run/netns): with the kubelet gone nobody asks CNI to
    # tear them down, so delete them once their processes are dead; their veths go with them.
    ns=$(for t in $($c containers ls -q 2>/dev/null); do $c containers info "$t" 2>/dev/null; done |
      { grep -o 'netns/cni-[0-9a-f-]*' || true; } | sed 's#^netns/##' | sort -u)
    ids=$($c containers ls -q 2>/dev/null || true)
    for t in $($c tasks ls -q 2>/dev/null); do $c tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for t in $($c tasks ls -q 2>/dev/null); do $c tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for t in $($c containers ls -q 2>/dev/null); do $c containers delete "$t" >/dev/null 2>&1 || true; done
    for t in $ns; do ip netns delete "$t" 2>/dev/null || true; done
    release_multus_leases "$ids"
    # libcni (in containerd) caches each attachment's result as /var/lib/cni/results/<network>-<sandbox>-<ifname>
    # (the Multus config's, its loopback's) until a CNI DEL that never comes for these pods.
    for t in $ids; do rm -f /var/lib/cni/results/*-"$t"-*; done
  fi
  stop_pids "$N_CONTAINERD"
}

node_down() {
  stop_pids local-provisioner kube-proxy
  select_node 1
  stop_node_runtime
  stop_pids registry
}

node2_down() {
  select_node 2
  stop_node_runtime
}

# detach_loops DIR: detach the loop devices whose backing file is under DIR.
detach_loops() {
  local dev
  for dev in $(losetup -n -O NAME,BACK-FILE 2>/dev/null | awk -v t="$1" 'index($2, t) == 1 {print $1}'); do
    losetup -d "$dev" 2>/dev/null || true
  done
}

# umount_under DIR: unmount whatever is mounted under DIR, deepest first.
umount_under() {
  local m
  for m in $(awk -v t="$1" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
}

# What node 2 leaves behind: the loop devices of its kubelet's block-volume mapper, its mounts, its bridge and NAT
# chain, its cgroup root, its log symlinks, its directory. Nothing of node 1's.
node2_cleanup() {
  detach_loops "$NODE2_DIR/kubelet"
  detach_loops "$NODE2_DIR"
  umount_under "$NODE2_DIR"
  select_node 2
  teardown_pod_network
  remove_cgroup_root "$NODE2_CGROUP_ROOT"
  remove_log_links "$NODE2_DIR"
  rm -rf "$NODE2_DIR"
}

# remove_log_links DIR: the kubelets link every container log into /var/log/containers (a fixed path); drop the
# links into DIR.
remove_log_links() {
  [ -d /var/log/containers ] || return 0
  find /var/log/containers -maxdepth 1 -type l -lname "$1/*" -delete 2>/dev/null || true
}

# `kube-proxy --cleanup` keeps its canary chains, KUBE-MARK-MASQ and the filter table's KUBE-FIREWALL chain (its
# "block incoming localnet connections" rule for loopback NodePorts, jumped to from INPUT/OUTPUT). They are our
# kube-proxy's (one test cluster per machine, nothing else runs Kubernetes here): remove them too.
remove_kube_proxy_leftovers() {
  local ipt c t
  for ipt in iptables ip6tables; do
    command -v "$ipt" >/dev/null || continue
    for c in INPUT OUTPUT; do while "$ipt" -D "$c" -j KUBE-FIREWALL 2>/dev/null; do :; done; done
    "$ipt" -F KUBE-FIREWALL 2>/dev/null && "$ipt" -X KUBE-FIREWALL 2>/dev/null || true
    "$ipt" -t nat -F KUBE-MARK-MASQ 2>/dev/null && "$ipt" -t nat -X KUBE-MARK-MASQ 2>/dev/null || true
    for t in filter nat mangle; do "$ipt" -t "$t" -X KUBE-PROXY-CANARY 2>/dev/null || true; done
  done
  return 0
}

# Detach the loop devices the provisioner (backing files in $STORAGE_DIR) and the kubelets' block-volume mappers
# (stacked on top of those, backed by device files under the kubelet root dirs) attached, unmount whatever the
# kubelets and containerds left mounted under $T (deepest first), and remove the pod network plumbing of both
# nodes (node 2's whether or not KV_NODES is set).
node_cleanup() {
  # Loops must go before the unmounts: afterwards their backing paths no longer resolve under $T.
  node2_cleanup
  detach_loops "$T/kubelet"
  detach_loops "$T"
  umount_under "$T"
  # kube-proxy's own chains (KUBE-*) go with the cluster.
  [ -x "$K8S_BIN_DIR/kube-proxy" ] && "$K8S_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
  remove_kube_proxy_leftovers
  select_node 1
  teardown_pod_network
  remove_log_links "$T"
  if [ -f "$T/ip_forward.orig" ]; then sysctl -qw "net.ipv4.ip_forward=$(cat "$T/ip_forward.orig")"; fi
}
