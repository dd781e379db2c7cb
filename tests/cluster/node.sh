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
NODE_DAEMONS="registry containerd kubelet kube-proxy local-provisioner"

# The provisioner is a Rust binary of this workspace (tests/kube-support).
PROVISIONER_BIN=${CARGO_TARGET_DIR:-$HOME/.cache/kubevirt-rs/target}/debug/local-provisioner
node_build() {
  log "building local-provisioner (cargo)"
  (cd "$REPO" && CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/kubevirt-rs/target} \
    cargo build -q -p kube-test-support --bin local-provisioner) || die "cargo build of local-provisioner failed"
}

# Pods live in their own network namespaces on bridge $BRIDGE, but everything on this machine listens on
# 127.0.0.1 only. Two NAT rules (only for traffic entering from the bridge) make the host's loopback services
# reachable from pods: $POD_GATEWAY:<port> -> 127.0.0.1:<port>, and the `kubernetes` Service IP
# ($KUBERNETES_SERVICE_IP:443) -> the apiserver (it listens on loopback, so that Service has no endpoints for
# kube-proxy to route to).
setup_pod_network() {
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip addr replace "$POD_GATEWAY/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
  iptables -t nat -N "$NAT_CHAIN" 2>/dev/null || iptables -t nat -F "$NAT_CHAIN"
  iptables -t nat -C PREROUTING -i "$BRIDGE" -j "$NAT_CHAIN" 2>/dev/null || iptables -t nat -A PREROUTING -i "$BRIDGE" -j "$NAT_CHAIN"
  iptables -t nat -A "$NAT_CHAIN" -d "$KUBERNETES_SERVICE_IP/32" -p tcp --dport 443 -j DNAT --to-destination "127.0.0.1:$API_PORT"
  iptables -t nat -A "$NAT_CHAIN" -d "$POD_GATEWAY/32" -p tcp -j DNAT --to-destination 127.0.0.1
}

teardown_pod_network() {
  while iptables -t nat -D PREROUTING -i "$BRIDGE" -j "$NAT_CHAIN" 2>/dev/null; do :; done
  iptables -t nat -F "$NAT_CHAIN" 2>/dev/null || true
  iptables -t nat -X "$NAT_CHAIN" 2>/dev/null || true
  ip link del "$BRIDGE" 2>/dev/null || true
}

# Test StorageClasses served by the local provisioner.
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
YAML
}

node_healthy() {
  kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -qx True
}

write_containerd_config() {
  mkdir -p "$CTD" "$T/cni/net.d" "$T/cni/ipam"
  cat >"$CTD/config.toml" <<TOML
version = 2
root = "$CTD/root"
state = "$CTD/state"
[grpc]
  address = "$CTD/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$CTD/opt"
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
        Root = "$CTD/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$T/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REGISTRY"]
    endpoint = ["http://$REGISTRY"]
TOML
  cat >"$T/cni/net.d/10-kvtest.conflist" <<JSON
{
  "cniVersion": "0.4.0",
  "name": "kvtest",
  "plugins": [
    {
      "type": "bridge", "bridge": "kvtest0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}],
              "dataDir": "$T/cni/ipam"}
    }
  ]
}
JSON
}

write_kubelet_config() {
  mkdir -p "$T/kubelet" "$T/pod-logs"
  (
    cd "$P"
    openssl req -newkey rsa:2048 -nodes -keyout kubelet.key -out kubelet.csr -subj "/O=system:nodes/CN=system:node:$NODE_NAME" 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\nbasicConstraints=CA:FALSE\n' >kubelet.ext
    openssl x509 -req -in kubelet.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out kubelet.crt -days 3650 -extfile kubelet.ext 2>/dev/null
    rm -f kubelet.csr kubelet.ext
  )
  write_kubeconfig "$T/kubelet.kubeconfig" kubelet
  cat >"$T/kubelet-config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://$CTD/containerd.sock
podLogsDir: $T/pod-logs
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
clusterCIDR: $POD_CIDR
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
  write_containerd_config
  setup_pod_network
  start_bg containerd "$(command -v containerd)" --config "$CTD/config.toml"
  wait_for containerd 30 test -S "$CTD/containerd.sock" || return 1
  write_kubelet_config
  start_bg kubelet "$K8S_BIN_DIR/kubelet" --config="$T/kubelet-config.yaml" \
    --kubeconfig="$T/kubelet.kubeconfig" --root-dir="$T/kubelet" --cert-dir="$T/kubelet/pki" \
    --hostname-override="$NODE_NAME" --node-labels="kubevirt-rs.test/node=true" --v=2
  log "waiting for node $NODE_NAME to be Ready"
  wait_for node 90 node_healthy || return 1
  log "node $NODE_NAME Ready"
  write_kube_proxy_config
  start_bg kube-proxy "$K8S_BIN_DIR/kube-proxy" --config="$T/kube-proxy-config.yaml" --v=2
  wait_for kube-proxy 60 curl -fsS "http://127.0.0.1:$KUBE_PROXY_HEALTHZ_PORT/healthz" || return 1
  mkdir -p "$STORAGE_DIR"
  start_bg local-provisioner "$PROVISIONER_BIN" --kubeconfig="$T/node-agent.kubeconfig" --storage-dir="$STORAGE_DIR"
  apply_storage_classes
}

node_down() {
  stop_pids local-provisioner kube-proxy kubelet
  # Pod sandboxes/containers are children of containerd shims; stop them through containerd before containerd.
  if pid_alive containerd; then
    local c="ctr -a $CTD/containerd.sock -n k8s.io"
    for t in $($c tasks ls -q 2>/dev/null); do $c tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true; done
    sleep 1
    for t in $($c tasks ls -q 2>/dev/null); do $c tasks delete -f "$t" >/dev/null 2>&1 || true; done
    for t in $($c containers ls -q 2>/dev/null); do $c containers delete "$t" >/dev/null 2>&1 || true; done
  fi
  stop_pids containerd registry
}

# Detach the loop devices the provisioner (backing files in $STORAGE_DIR) and the kubelet's block-volume mapper
# (stacked on top of those, backed by device files under $T/kubelet) attached, unmount whatever the kubelet and
# containerd left mounted under $T (deepest first), and remove the pod network plumbing.
node_cleanup() {
  local dev m
  # Loops must go before the unmounts: afterwards their backing paths no longer resolve under $T.
  for dev in $(losetup -n -O NAME,BACK-FILE 2>/dev/null | awk -v t="$T/kubelet" 'index($2, t) == 1 {print $1}'); do
    losetup -d "$dev" 2>/dev/null || true
  done
  for dev in $(losetup -n -O NAME,BACK-FILE 2>/dev/null | awk -v t="$T" 'index($2, t) == 1 {print $1}'); do
    losetup -d "$dev" 2>/dev/null || true
  done
  for m in $(awk -v t="$T" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m" 2>/dev/null || true; done
  # kube-proxy's own chains (KUBE-*) go with the cluster.
  [ -x "$K8S_BIN_DIR/kube-proxy" ] && "$K8S_BIN_DIR/kube-proxy" --cleanup >/dev/null 2>&1 || true
  teardown_pod_network
}
