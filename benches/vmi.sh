#!/usr/bin/env bash
# benches/vmi.sh — issue 12's VMI benchmark: boot time, launcher pod memory and scale of VMIs through our stack
# (vm-controller + node-agent + virt-launcher), each measured against an anchor taken in the same run.
#
#   benches/vmi.sh                       # N = 10
#   VMI_BENCH_N=3 benches/vmi.sh         # fewer guests at once
#
# Needs the test cluster and our stack on it first: `tests/cluster/up`, then `tests/cluster/install-stack` (this
# script only checks them and fails if they are missing; it never installs or redeploys anything). Needs root (the
# anchor's sandbox: namespaces, mounts, a veth; the launcher pods' processes under /proc and /sys/fs/cgroup),
# kubectl, jq, curl, and the cached guest (tests/guest/build.sh) and launcher rootfs (deploy/launcher/build-rootfs.sh),
# both built by `tests/guest/check.sh` / install-stack. The guest's containerDisk is pushed to the test registry
# (as stack-support's guest_containerdisk(): 127.0.0.1:$KV_REGISTRY_PORT/kubevirt-rs/guest-containerdisk:g<hash>)
# when that tag is missing.
#
# What it measures (the summary is printed on stdout, progress on stderr):
#   1. Boot. The anchor: the test guest booted directly with `virsh create` (deploy/launcher/domain-reference.xml
#      without its cloud-init cdrom, as vmi-ephemeral has none) on a warm libvirtd (`system`, TCG) inside the
#      launcher sandbox of tests/guest/sandbox.sh + pod-init.sh (the launcher image's rootfs: same libvirtd and QEMU
#      as the pods); time from `virsh create` to KUBEVIRT-RS-GUEST-UP on the serial console, measured before and
#      again after the single VMI (the machine is shared, its load moves; the mean is the anchor). Then one VMI (upstream's
#      vmi-ephemeral.yaml, containerDisk rewritten to the test guest) through the stack: kubectl create → phase
#      Running (a `kubectl get -w` stamps every phase change), and → the marker in `kubectl logs <pod> -c
#      guest-console-log` (the log line's containerd timestamp; the time it first appeared in the serial log file
#      on the host, polled every 0.25 s, is printed too), with the launcher pod's kubelet timeline. Prints both
#      and the overhead over virsh. Target: ≤ 3 s.
#   2. Memory of that launcher pod, from the host: every process in the pod's container cgroups (found under
#      /sys/fs/cgroup by the pod UID and the containers' IDs, as kubelet's cgroupfs driver lays them out), VmRSS and
#      Pss each, VMI_BENCH_SETTLE (5) s after the marker; the overhead is everything except QEMU (libvirtd,
#      virt-launcher with its DHCP thread, the console tail, the sandbox). Target: ≤ 100 MiB. QEMU's RSS next to the anchor's,
#      and the pod's `kubevirt.io/memory-overhead-bytes` annotation (what we request) next to what is used.
#   3. Scale: N VMIs created with one `kubectl create`; time until all Running and until all markers, per VMI
#      average; API requests per VMI from the components' own counters (vm-controller pods:
#      kubevirt_rs_vm_controller_api_requests_total on :8080, node-agent pods: kubevirt_rs_node_agent_api_requests_total
#      on :8185, summed over the pods, read at their pod IPs) for create → all markers and for delete → all pods gone;
#      peak RSS of the vm-controller and node-agent processes (VmRSS sampled every 0.25 s, and VmHWM). VMI events of
#      other namespaces during the window are counted and reported: the counters are per process, so concurrent
#      activity on the cluster inflates them.
#   4. Everything it made is removed on any exit (its namespace bench-vmi-<pid>, the sandbox, the veth, scratch).
# The targets are printed for comparison only; the exit status is non-zero when a dependency is missing or a VMI
# does not reach Running or its marker within VMI_BENCH_TIMEOUT (300) s.
#
# Overridable: VMI_BENCH_N (10), VMI_BENCH_TIMEOUT (300), VMI_BENCH_SETTLE (5), VMI_BENCH_NET (10.254.252, a /30
# there for the anchor's veth kvrs-bvmi0), KV_REGISTRY_PORT (35000), KUBECONFIG.
set -euo pipefail
export LC_ALL=C
N=${VMI_BENCH_N:-10}
TIMEOUT=${VMI_BENCH_TIMEOUT:-300}
SETTLE=${VMI_BENCH_SETTLE:-5}
NET=${VMI_BENCH_NET:-10.254.252}
HOST_IP=$NET.1 POD_IP=$NET.2 HOST_VETH=kvrs-bvmi0
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KV_CACHE=${KV_CACHE:-$HOME/.cache/kubevirt-rs}
CLUSTER_DIR=${KV_CLUSTER_DIR:-${TMPDIR:-/tmp}/kubevirt-rs-cluster}
export KUBECONFIG=${KUBECONFIG:-$CLUSTER_DIR/admin.kubeconfig}
REGISTRY=127.0.0.1:${KV_REGISTRY_PORT:-35000}
KV_NS=kubevirt
EXAMPLE=$ROOT/../shared/upstream-examples/kubevirt/vmi-ephemeral.yaml
XML=$ROOT/deploy/launcher/domain-reference.xml
MARKER=KUBEVIRT-RS-GUEST-UP

log() { printf '[bench-vmi %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[bench-vmi %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }
now() { echo "$EPOCHREALTIME"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; } # KiB → MiB

# --- dependencies (fail loudly)
[ "$(id -u)" = 0 ] || die "needs root (the anchor's sandbox; /proc and /sys/fs/cgroup of the pods)"
for c in kubectl jq curl awk unshare setpriv nsenter ip; do
  command -v "$c" >/dev/null || die "missing command: $c"
done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "VMI_BENCH_N must be a positive integer, got '$N'"
[ "$N" -le 10 ] || log "warning: VMI_BENCH_N=$N > 10 guests of 128Mi at once on a shared 2-core machine"
[ -f "$EXAMPLE" ] || die "missing $EXAMPLE (the shared upstream examples)"
[ -f "$KUBECONFIG" ] || die "no kubeconfig at $KUBECONFIG: run tests/cluster/up, then tests/cluster/install-stack"
kubectl get --raw /readyz >/dev/null 2>&1 || die "the cluster at $KUBECONFIG is not reachable: run tests/cluster/up"
kubectl get crd virtualmachineinstances.kubevirt.io >/dev/null 2>&1 ||
  die "no VirtualMachineInstance CRD: run tests/cluster/install-stack"
for w in deploy/virt-controller daemonset/virt-handler deploy/virt-api; do
  kubectl -n "$KV_NS" rollout status "$w" --timeout=10s >/dev/null 2>&1 ||
    die "$KV_NS/$w is not installed or not ready: run tests/cluster/install-stack"
done
KUBELET_ROOT=$(tr '\0' '\n' <"/proc/$(cat "$CLUSTER_DIR/kubelet.pid" 2>/dev/null || echo 0)/cmdline" 2>/dev/null |
  sed -n 's/^--root-dir=//p' || true)
KUBELET_ROOT=${KUBELET_ROOT:-$CLUSTER_DIR/kubelet}
if [ -d /sys/fs/cgroup/memory/kubepods ]; then CG=/sys/fs/cgroup/memory; else CG=/sys/fs/cgroup; fi
[ -d "$CG/kubepods" ] || [ -d "$CG/kubepods.slice" ] || die "no kubepods cgroup under $CG (is this the cluster's node?)"

GUEST=$(tests/guest/build.sh) || die "tests/guest/build.sh failed (the test guest)"
[ -f "$GUEST/disk.qcow2" ] || die "no $GUEST/disk.qcow2"
CD_IMAGE=$REGISTRY/kubevirt-rs/guest-containerdisk:g$(basename "$GUEST")
if ! curl -fsS "http://$REGISTRY/v2/kubevirt-rs/guest-containerdisk/tags/list" | jq -e --arg t "g$(basename "$GUEST")" \
  '.tags | index($t)' >/dev/null 2>&1; then
  log "pushing the guest containerDisk $CD_IMAGE"
  [ "$(tests/guest/push-containerdisk.sh "$CD_IMAGE")" = "$CD_IMAGE" ] || die "push-containerdisk.sh failed"
fi
ROOTFS_TAR=$(deploy/launcher/build-rootfs.sh) || die "deploy/launcher/build-rootfs.sh failed"
ROOTFS_HASH=$(basename "$ROOTFS_TAR" .tar.zst)
LOWER=$KV_CACHE/launcher-rootfs/$ROOTFS_HASH.d
DOMAIN=$(sed -n 's|^  <name>\(.*\)</name>$|\1|p' "$XML")
VMI_UID=$(sed -n 's|^  <uuid>\(.*\)</uuid>$|\1|p' "$XML")
[ -n "$DOMAIN" ] && [ -n "$VMI_UID" ] || die "cannot read <name>/<uuid> from $XML"
if ip -4 addr show | grep -q "inet $NET\." || [ -n "$(ip -4 route show "$NET.0/30")" ]; then
  die "$NET.0/30 is in use on this host (set VMI_BENCH_NET)"
fi
! ip link show "$HOST_VETH" >/dev/null 2>&1 || die "$HOST_VETH exists already (a crashed earlier run?)"

NS=bench-vmi-$$
S=$(mktemp -d "${TMPDIR:-/tmp}/kvrs-bvmi.XXXXXX") # short: the sandbox's libvirt socket path must stay < 108 bytes
chmod 755 "$S"
W=$S/work
mkdir -p "$W"
UNSHARE_PID='' SANDBOX_PID='' NS_MADE='' BG_PIDS=() ANCHOR_RUNS=0

stop_sandbox() {
  [ -n "$SANDBOX_PID" ] || return 0
  kill -TERM "$SANDBOX_PID" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$UNSHARE_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$UNSHARE_PID" 2>/dev/null && kill -KILL "$SANDBOX_PID" 2>/dev/null || true
  wait "$UNSHARE_PID" 2>/dev/null || true
  SANDBOX_PID=''
}
cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_sandbox
  ip link del "$HOST_VETH" 2>/dev/null || true
  if [ -n "$NS_MADE" ]; then
    log "deleting namespace $NS"
    kubectl delete ns "$NS" --timeout=180s >/dev/null 2>&1 || log "warning: namespace $NS not gone after 180 s"
  fi
  if grep -q " $S/" /proc/self/mountinfo; then log "not removing $S: still mounted"; else rm -rf "$S"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "load average: $(cut -d' ' -f1-3 /proc/loadavg); VMIs already on the cluster: $(kubectl get vmi -A --no-headers 2>/dev/null | wc -l)"

# --- processes of pods, from the host
# pod_cgroup UID: the pod's memory cgroup directory (cgroupfs: kubepods[/QOS]/pod<uid>; systemd: …pod<uid_>.slice).
pod_cgroup() {
  find "$CG/kubepods" "$CG/kubepods.slice" -maxdepth 2 -type d \( -name "pod$1" -o -name "*pod${1//-/_}.slice" \) \
    2>/dev/null | head -n1 || true
}
# pod_procs NS POD: "container pid" for every process of every container cgroup of the pod (the sandbox's
# container, which is in no containerStatus, is called `(sandbox)`).
pod_procs() {
  local json uid dir d id name p
  json=$(kubectl get pod -n "$1" "$2" -o json)
  uid=$(jq -r .metadata.uid <<<"$json")
  dir=$(pod_cgroup "$uid")
  [ -n "$dir" ] || die "no cgroup for pod $1/$2 (uid $uid) under $CG"
  for d in "$dir"/*/; do
    id=$(basename "$d")
    id=${id#cri-containerd-}
    id=${id%.scope}
    name=$(jq -r --arg id "$id" '[.status.containerStatuses[]? | select(.containerID | endswith($id)) | .name][0] // "(sandbox)"' <<<"$json")
    find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null | while read -r p; do echo "$name $p"; done
  done
}
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || true; }
pss_kib() { awk '$1 == "Pss:" { print $2 }' "/proc/$1/smaps_rollup" 2>/dev/null || true; }

# --- 1a. the anchor: virsh create in the launcher sandbox
anchor() {
  ANCHOR_RUNS=$((ANCHOR_RUNS + 1))
  local P=$S/a$ANCHOR_RUNS t probe_t t_create t_created t_marker p c r q qemu_rss='' qemu_pss='' other_rss=0 other_pss=0
  if [ ! -f "$LOWER/.complete" ]; then # as tests/guest/check.sh unpacks it
    log "unpacking the launcher rootfs to $LOWER"
    rm -rf "$LOWER" && mkdir -p "$LOWER"
    tar --zstd -xpf "$ROOTFS_TAR" -C "$LOWER" --numeric-owner
    touch "$LOWER/.complete"
  fi
  mkdir -p "$P"
  setpriv --pdeathsig KILL unshare --mount --pid --net --uts --ipc --fork --kill-child -- \
    bash "$ROOT/tests/guest/sandbox.sh" "$P" "$LOWER" "$GUEST/disk.qcow2" virt-launcher-bench system >"$P.log" 2>&1 &
  UNSHARE_PID=$!
  for _ in $(seq 1 100); do
    SANDBOX_PID=$(awk '{ print $1 }' "/proc/$UNSHARE_PID/task/$UNSHARE_PID/children" 2>/dev/null || true)
    [ -n "$SANDBOX_PID" ] && break
    sleep 0.05
  done
  [ -n "$SANDBOX_PID" ] || die "unshare did not start the anchor's sandbox: $(cat "$P.log")"
  ip link add "$HOST_VETH" type veth peer name eth0 netns "$SANDBOX_PID"
  ip addr add "$HOST_IP/30" dev "$HOST_VETH"
  ip link set "$HOST_VETH" up
  nsenter -t "$SANDBOX_PID" -n ip addr add "$POD_IP/30" dev eth0
  nsenter -t "$SANDBOX_PID" -n ip link set eth0 up
  nsenter -t "$SANDBOX_PID" -n ip route add default via "$HOST_IP"
  for _ in $(seq 1 300); do
    [ -f "$P/vol/private/ready" ] && break
    kill -0 "$UNSHARE_PID" 2>/dev/null || die "the anchor's sandbox exited: $(tail -n 20 "$P.log")"
    sleep 0.05
  done
  [ -f "$P/vol/private/ready" ] || die "libvirtd in the anchor's sandbox not ready after 15 s: $(tail -n 20 "$P.log")"
  in_pod() { nsenter -t "$SANDBOX_PID" -m -u -i -n -p -r -w "$@"; }
  virsh_pod() { in_pod virsh -q -c "qemu:///system?socket=/var/run/kubevirt-private/libvirt/libvirt-sock" "$@"; }
  t=$(now)
  virsh_pod version >/dev/null || die "virsh cannot reach the anchor's libvirtd"
  probe_t=$(sub "$(now)" "$t")
  # What the launcher prepares for a containerDisk: the VMI's private directory and the disk's qcow2 overlay.
  in_pod bash -euc "
    mkdir -p /var/run/kubevirt-private/$VMI_UID /var/run/kubevirt-ephemeral-disks/disk-data/containerdisk
    qemu-img create -q -f qcow2 -F qcow2 -b /var/run/kubevirt/container-disks/disk_0.img \
      /var/run/kubevirt-ephemeral-disks/disk-data/containerdisk/disk.qcow2
    chown 107:107 /var/run/kubevirt-private/$VMI_UID /var/run/kubevirt-ephemeral-disks/disk-data/containerdisk \
      /var/run/kubevirt-ephemeral-disks/disk-data/containerdisk/disk.qcow2" || die "preparing the anchor's overlay failed"
  sed "/<disk type='file' device='cdrom'>/,/<\/disk>/d" "$XML" >"$P/vol/private/bench-domain.xml"
  ! grep -q "device='cdrom'" "$P/vol/private/bench-domain.xml" || die "could not drop the cdrom from $XML"
  local serial=$P/vol/private/$VMI_UID/virt-serial0-log
  t_create=$(now)
  virsh_pod create /var/run/kubevirt-private/bench-domain.xml >/dev/null || die "virsh create failed: $(tail "$P.log")"
  t_created=$(now)
  for _ in $(seq 1 3000); do
    grep -aq "^$MARKER " "$serial" 2>/dev/null && break
    sleep 0.02
  done
  t_marker=$(now)
  grep -aq "^$MARKER " "$serial" 2>/dev/null || die "anchor: no $MARKER within 60 s; console: $(tail -c 2000 "$serial" 2>/dev/null)"
  sleep "$SETTLE"
  local pidns
  pidns=$(readlink "/proc/$SANDBOX_PID/ns/pid")
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$pidns" ] || continue
    p=${p#/proc/}
    c=$(cat "/proc/$p/comm" 2>/dev/null || true)
    case "$c" in
      qemu-system-*) qemu_rss=$(status_kib "$p" VmRSS) qemu_pss=$(pss_kib "$p") ;;
      *)
        r=$(status_kib "$p" VmRSS) q=$(pss_kib "$p")
        other_rss=$((other_rss + ${r:-0})) other_pss=$((other_pss + ${q:-0}))
        ;;
    esac
  done
  virsh_pod destroy "$DOMAIN" >/dev/null 2>&1 || true
  stop_sandbox
  ip link del "$HOST_VETH" 2>/dev/null || true
  A_CREATE=$(sub "$t_created" "$t_create") A_MARKER=$(sub "$t_marker" "$t_create") A_PROBE=$probe_t
  A_QEMU_RSS=${qemu_rss:-0} A_QEMU_PSS=${qemu_pss:-0} A_OTHER_RSS=$other_rss A_OTHER_PSS=$other_pss
  log "anchor: virsh create returned after $A_CREATE s, $MARKER after $A_MARKER s (first virsh call $A_PROBE s)"
}

# --- the stack: VMIs in our namespace
vmi_yaml() { # NAME: vmi-ephemeral.yaml named NAME, its containerDisk the test guest (as stack-support local_images)
  sed -e "s|^\( *\)image: registry:5000/kubevirt/.*|\1image: $CD_IMAGE|" -e "s|^  name: vmi-ephemeral\$|  name: $1|" "$EXAMPLE"
}

# One watch of every VMI of the cluster, each event stamped on arrival: our phases, and others' activity.
start_watch() {
  kubectl get vmi -A -w -o jsonpath='{.metadata.namespace}{" "}{.metadata.name}{" "}{.status.phase}{"\n"}' \
    2>/dev/null > >(while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done >>"$W/events") &
  BG_PIDS+=($!)
  sleep 1
}
# The same for the stack's own pods: a redeploy or restart of a component during a window spoils its numbers.
start_kv_watch() {
  kubectl get pods -n "$KV_NS" -w -o jsonpath='{.metadata.name}{" "}{.status.phase}{" "}{.metadata.deletionTimestamp}{"\n"}' \
    2>/dev/null > >(while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done >>"$W/kv-events") &
  BG_PIDS+=($!)
}
# kv_churn FROM TO: the stack's pods with an event in [FROM, TO] (created, deleted, phase or readiness changed).
kv_churn() { awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b { print $2 }' "$W/kv-events" 2>/dev/null | sort -u | paste -sd' '; }
load() { cut -d' ' -f1 /proc/loadavg; }
# node_trouble SINCE_EPOCH: the nodes' pressure conditions that changed since then, and their current taints
# (e.g. DiskPressure: the scheduler then leaves launcher pods Pending, and the VMI stays in Scheduling).
node_trouble() {
  kubectl get nodes -o json | jq -r --argjson since "${1%.*}" '.items[] | .metadata.name as $n
    | ([.status.conditions[] | select(.type != "Ready" and (.lastTransitionTime | fromdateiso8601) >= $since)
        | "\(.type)=\(.status) since \(.lastTransitionTime)"]
       + [.spec.taints[]? | "taint \(.key):\(.effect)"]) | select(length > 0) | "\($n): \(join(", "))"' | paste -sd';'
}
# phase_time NAME PHASE: first time NAME was seen in PHASE (empty if never).
phase_time() { awk -v ns="$NS" -v n="$1" -v ph="$2" '$2 == ns && $3 == n && $4 == ph { print $1; exit }' "$W/events"; }
# foreign_events FROM TO: VMI events of other namespaces in [FROM, TO].
foreign_events() { awk -v ns="$NS" -v a="$1" -v b="$2" '$2 != ns && $1 >= a && $1 <= b' "$W/events" | wc -l; }

# shellcheck source=benches/kubevirt-counters.sh
. "$ROOT/benches/kubevirt-counters.sh"

# component_pids: "label pod pid" of the vm-controller and node-agent processes (their main containers).
component_pids() {
  local pod c p
  for pod in $(kubectl get pods -n "$KV_NS" -l 'kubevirt.io in (virt-controller,virt-handler)' -o name); do
    pod=${pod#pod/}
    pod_procs "$KV_NS" "$pod" | while read -r c p; do
      [ "$c" = "(sandbox)" ] || echo "$c $pod $p"
    done
  done
}
# sampler FILE PID...: every 0.25 s, the highest VmRSS seen per PID, rewritten to FILE ("pid kib").
sampler() {
  local out=$1 p r
  shift
  declare -A max=()
  for p in "$@"; do max[$p]=0; done
  while :; do
    for p in "$@"; do
      r=$(status_kib "$p" VmRSS)
      [ -n "$r" ] && [ "$r" -gt "${max[$p]}" ] && max[$p]=$r
    done
    for p in "$@"; do echo "$p ${max[$p]}"; done >"$out.tmp" && mv "$out.tmp" "$out"
    sleep 0.25
  done
}

# boot TAG T0 NAME...: waits until every NAME is Running and printed its marker (or TIMEOUT s after T0); writes
# $W/TAG.times: "name pod scheduled running marker_file marker_log" (seconds after T0, "-" if never).
boot() {
  local tag=$1 t0=$2 n pods_json pod uid f ts r line
  shift 2
  declare -A pod_of=() uid_of=() file_t=()
  local pending=("$@") left
  while :; do
    if [ "${#pod_of[@]}" -lt "$#" ]; then
      pods_json=$(kubectl get pods -n "$NS" -l kubevirt.io=virt-launcher -o json)
      while read -r n pod uid; do
        [ -n "$n" ] && pod_of[$n]=$pod uid_of[$n]=$uid
      done < <(jq -r '.items[] | (.metadata.ownerReferences[0].name // "") + " " + .metadata.name + " " + .metadata.uid' <<<"$pods_json")
    fi
    left=()
    for n in "${pending[@]}"; do
      uid=${uid_of[$n]:-}
      if [ -n "$uid" ]; then
        for f in "$KUBELET_ROOT/pods/$uid"/volumes/kubernetes.io~empty-dir/*/virt-serial0-log; do
          if [ -f "$f" ] && grep -aq "^$MARKER " "$f"; then file_t[$n]=$(now) && break; fi
        done
      fi
      [ -n "${file_t[$n]:-}" ] || [ -n "$(phase_time "$n" Failed)" ] || left+=("$n")
    done
    pending=("${left[@]}")
    [ "${#pending[@]}" -eq 0 ] && break
    if [ "$(sub "$(now)" "$t0" | cut -d. -f1)" -ge "$TIMEOUT" ]; then
      log "timeout: ${#pending[@]} VMI(s) without $MARKER after $TIMEOUT s: ${pending[*]}"
      break
    fi
    sleep 0.25
  done
  : >"$W/$tag.times"
  for n in "$@"; do
    pod=${pod_of[$n]:--}
    ts='-'
    if [ "$pod" != - ] && [ -n "${file_t[$n]:-}" ]; then
      # the line's timestamp in the container log (containerd's, when the console tail printed it)
      for _ in $(seq 1 40); do
        line=$(kubectl logs -n "$NS" "$pod" -c guest-console-log --timestamps 2>/dev/null | grep -a -m1 " $MARKER " || true)
        [ -n "$line" ] && break
        sleep 0.25
      done
      [ -n "$line" ] && ts=$(date -d "${line%% *}" +%s.%N)
    fi
    r=$(phase_time "$n" Running)
    printf '%s %s %s %s %s %s\n' "$n" "$pod" \
      "$(f=$(phase_time "$n" Scheduled); [ -n "$f" ] && sub "$f" "$t0" || echo -)" \
      "$([ -n "$r" ] && sub "$r" "$t0" || echo -)" \
      "$([ -n "${file_t[$n]:-}" ] && sub "${file_t[$n]}" "$t0" || echo -)" \
      "$([ "$ts" != - ] && sub "$ts" "$t0" || echo -)" >>"$W/$tag.times"
  done
}

# evidence NAME...: what a VMI that did not make it looks like.
evidence() {
  local n
  for n in "$@"; do
    echo "--- VMI $NS/$n"
    kubectl get vmi -n "$NS" "$n" -o json 2>&1 | jq -c '{phase: .status.phase, conditions: .status.conditions, reason: .status.reason}' 2>&1 || true
    kubectl get pods -n "$NS" -l kubevirt.io=virt-launcher -o json |
      jq -r --arg n "$n" '.items[] | select(.metadata.ownerReferences[0].name == $n) | "pod \(.metadata.name): \(.status.phase) \([.status.containerStatuses[]? | "\(.name)=\(.state | keys[0])"] | join(" "))"' || true
    kubectl get events -n "$NS" --field-selector "involvedObject.name=$n" -o custom-columns=T:.lastTimestamp,R:.reason,M:.message --no-headers 2>/dev/null | tail -n 5 || true
  done
}

# ================= run
start_kv_watch
T_START=$(now)
anchor
A1_MARKER=$A_MARKER A1_LOAD=$(load)

kubectl create ns "$NS" >/dev/null
NS_MADE=1
start_watch

# --- 1b + 2. one VMI
log "creating one VMI (vmi-ephemeral) in $NS"
vmi_yaml vmi-ephemeral >"$W/one.yaml"
t0=$(now)
S_LOAD0=$(load)
kubectl create -n "$NS" -f "$W/one.yaml" >/dev/null
boot one "$t0" vmi-ephemeral
S_LOAD1=$(load)
S_CHURN=$(kv_churn "$t0" "$(now)")
read -r _ POD1 _ S_RUN S_FILE S_LOG <"$W/one.times"
if [ "$S_RUN" = - ] || [ "$S_LOG" = - ]; then
  evidence vmi-ephemeral >&2
  die "the single VMI did not reach Running ($S_RUN) and its marker in kubectl logs ($S_LOG) within $TIMEOUT s"
fi
log "vmi-ephemeral: Running after $S_RUN s, $MARKER in kubectl logs after $S_LOG s (serial log file: $S_FILE s)"
sleep "$SETTLE"
pod_procs "$NS" "$POD1" >"$W/one.procs"
declare -a MEM_ROWS=()
OV_RSS=0 OV_PSS=0 Q_RSS=0 Q_PSS=0
while read -r c p; do
  rss=$(status_kib "$p" VmRSS) pss=$(pss_kib "$p") hwm=$(status_kib "$p" VmHWM)
  [ -n "$rss" ] || continue
  comm=$(tr '\0' ' ' <"/proc/$p/cmdline" | awk '{ s = $1; if ($1 ~ /busybox$/) s = s " " $2; print s }')
  MEM_ROWS+=("$(printf '  %-18s %-34s %8s %8s %8s' "$c" "${comm:0:34}" "$(mib "$rss")" "$(mib "${pss:-0}")" "$(mib "$hwm")")")
  case "$(cat "/proc/$p/comm")" in
    qemu-system-*) Q_RSS=$((Q_RSS + rss)) Q_PSS=$((Q_PSS + ${pss:-0})) ;;
    *) OV_RSS=$((OV_RSS + rss)) OV_PSS=$((OV_PSS + ${pss:-0})) ;;
  esac
done <"$W/one.procs"
pod1_json=$(kubectl get pod -n "$NS" "$POD1" -o json)
ANNOT=$(jq -r '.metadata.annotations["kubevirt.io/memory-overhead-bytes"] // ""' <<<"$pod1_json")
POD_REQ=$(jq -r '[.spec.containers[] | "\(.name) \(.resources.requests.memory // "none")"] | join(", ")' <<<"$pod1_json")
# The kubelet's view of the launcher pod's start (RFC 3339 seconds: 1 s resolution), relative to the pod's creation.
POD_TIMELINE=$(jq -r '
  .metadata.creationTimestamp as $c
  | def t: if . == null then "?" else (fromdateiso8601 - ($c | fromdateiso8601) | "+\(.)") end;
  ([.status.conditions[]? | select(.type == "PodScheduled" or .type == "PodReadyToStartContainers") | "\(.type) \(.lastTransitionTime | t)"]
     + [.status.initContainerStatuses[]? | "init \(.name) \(.state.terminated.startedAt | t)..\(.state.terminated.finishedAt | t)"]
     + [.status.conditions[]? | select(.type == "Initialized") | "Initialized \(.lastTransitionTime | t)"]
     + [.status.containerStatuses[]? | "\(.name) started \(.state.running.startedAt | t)"]
     + [.status.conditions[]? | select(.type == "ContainersReady" or .type == "Ready") | "\(.type) \(.lastTransitionTime | t)"])
  | join(", ")' <<<"$pod1_json" 2>/dev/null || echo "n/a")
POD1_CREATED=$(sub "$(date -d "$(jq -r .metadata.creationTimestamp <<<"$pod1_json")" +%s)" "${t0%.*}")
GUEST_KIB=$((128 * 1024))
cg1=$(pod_cgroup "$(jq -r .metadata.uid <<<"$pod1_json")")
CG_RSS=$(awk '$1 == "total_rss" { print int($2 / 1024) }' "$cg1/memory.stat" 2>/dev/null || echo "")
CG_USAGE=$(awk '{ print int($1 / 1024) }' "$cg1/memory.usage_in_bytes" 2>/dev/null || echo "")
log "deleting vmi-ephemeral"
kubectl delete vmi -n "$NS" vmi-ephemeral --wait=true --timeout=120s >/dev/null
kubectl wait -n "$NS" --for=delete pod -l kubevirt.io=virt-launcher --timeout=120s >/dev/null 2>&1 || true
# The anchor again, after the VMI (the machine is shared: its load moves); the overhead is against the mean.
anchor
A2_MARKER=$A_MARKER A2_LOAD=$(load)
A_MARKER=$(awk -v a="$A1_MARKER" -v b="$A2_MARKER" 'BEGIN { printf "%.2f", (a + b) / 2 }')

# --- 3. N VMIs at once
for i in $(seq 1 "$N"); do vmi_yaml "vmi-$i"; echo "---"; done >"$W/many.yaml"
mapfile -t NAMES < <(seq -f 'vmi-%g' 1 "$N")
mapfile -t CPIDS < <(component_pids)
[ "${#CPIDS[@]}" -gt 0 ] || die "found no vm-controller / node-agent processes under $CG"
declare -A HWM0
for l in "${CPIDS[@]}"; do read -r _ _ p <<<"$l"; HWM0[$p]=$(status_kib "$p" VmHWM); done
SAMPLE_PIDS=()
for l in "${CPIDS[@]}"; do SAMPLE_PIDS+=("${l##* }"); done
sampler "$W/rss" "${SAMPLE_PIDS[@]}" &
BG_PIDS+=($!)
read -r REQ_C0 REQ_A0 SET0 < <(api_requests)
log "creating $N VMIs at once"
t0=$(now)
kubectl create -n "$NS" -f "$W/many.yaml" >/dev/null
boot many "$t0" "${NAMES[@]}"
t_all=$(now)
M_CHURN=$(kv_churn "$t0" "$t_all")
read -r REQ_C1 REQ_A1 SET1 < <(api_requests)
FOREIGN=$(foreign_events "$t0" "$t_all")
failed=()
while read -r n _ _ r _ lg; do [ "$r" != - ] && [ "$lg" != - ] || failed+=("$n"); done <"$W/many.times"
[ "${#failed[@]}" -eq 0 ] || evidence "${failed[@]}" >"$W/evidence" 2>&1
log "deleting the $N VMIs"
t_del=$(now)
kubectl delete vmi -n "$NS" --all --wait=true --timeout=180s >/dev/null
kubectl wait -n "$NS" --for=delete pod -l kubevirt.io=virt-launcher --timeout=180s >/dev/null 2>&1 ||
  log "warning: launcher pods left 180 s after the delete: $(kubectl get pods -n "$NS" --no-headers | paste -sd';')"
t_gone=$(now)
sleep 2 # the last status writes of the controllers after the pods are gone
read -r REQ_C2 REQ_A2 SET2 < <(api_requests)
FOREIGN_DEL=$(foreign_events "$t_del" "$(now)")
cp "$W/rss" "$W/rss.final"
declare -A HWM1
for l in "${CPIDS[@]}"; do read -r _ _ p <<<"$l"; HWM1[$p]=$(status_kib "$p" VmHWM); done

NODE_TROUBLE=$(node_trouble "$T_START")

# ================= report
ok=$((N - ${#failed[@]}))
all_run=$(awk '$4 != "-" { if ($4 > m) m = $4 } END { printf "%.2f", m }' "$W/many.times")
all_mark=$(awk '$6 != "-" { if ($6 > m) m = $6 } END { printf "%.2f", m }' "$W/many.times")
avg_run=$(awk '$4 != "-" { s += $4; c++ } END { if (c) printf "%.2f", s / c; else print "-" }' "$W/many.times")
avg_mark=$(awk '$6 != "-" { s += $6; c++ } END { if (c) printf "%.2f", s / c; else print "-" }' "$W/many.times")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f×", a / b; else print "-" }'; }
overhead=$(sub "$S_LOG" "$A_MARKER")

echo
echo "== VMI benchmark (issue 12) — $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), guest $(basename "$GUEST") ($(sed -n 's/^kernel //p' "$GUEST/manifest")), TCG"
echo
echo "1. boot: create → $MARKER"
printf '  anchor  virsh create (warm libvirtd, launcher rootfs):   create returned %6.2f s   marker %6.2f s (mean of %s s at load %s before the VMI and %s s at load %s after)\n' \
  "$A_CREATE" "$A_MARKER" "$A1_MARKER" "$A1_LOAD" "$A2_MARKER" "$A2_LOAD"
printf '  stack   kubectl create vmi-ephemeral:                     Running         %6.2f s   marker %6.2f s (kubectl logs; serial log file %s s)\n' "$S_RUN" "$S_LOG" "$S_FILE"
printf '  phases  Scheduled %s s, Running %s s after create\n' "$(awk '{ print $3 }' "$W/one.times")" "$S_RUN"
printf '  load average (1 min) %s at create, %s at the marker\n' "$S_LOAD0" "$S_LOAD1"
[ -z "$S_CHURN" ] || printf '  warning: stack pods changed while this VMI booted (someone redeployed or restarted them): %s\n' "$S_CHURN"
printf '  launcher pod (kubelet timestamps, 1 s resolution, pod created ~%s s after the VMI): %s\n' "$POD1_CREATED" "$POD_TIMELINE"
printf '  overhead over virsh: %s s (%s of the anchor); target ≤ 3 s — %s\n' "$overhead" "$(ratio "$S_LOG" "$A_MARKER")" \
  "$(awk -v o="$overhead" 'BEGIN { print (o <= 3 ? "met" : "NOT met") }')"
printf '  (the anchor excludes the first libvirt call of a fresh libvirtd, QEMU capability probe: %s s)\n' "$A_PROBE"
echo
echo "2. memory of launcher pod $POD1, $SETTLE s after the marker (MiB)"
printf '  %-18s %-34s %8s %8s %8s\n' container process RSS PSS HWM
printf '%s\n' "${MEM_ROWS[@]}"
printf '  pod overhead (everything but QEMU): RSS %s MiB, PSS %s MiB; target ≤ 100 MiB — %s\n' "$(mib "$OV_RSS")" \
  "$(mib "$OV_PSS")" "$(awk -v k="$OV_RSS" 'BEGIN { print (k / 1024 <= 100 ? "met" : "NOT met") }')"
printf '  QEMU: RSS %s MiB, PSS %s MiB (guest memory 128 MiB); anchor QEMU: RSS %s MiB, PSS %s MiB (pod/anchor RSS %s)\n' \
  "$(mib "$Q_RSS")" "$(mib "$Q_PSS")" "$(mib "$A_QEMU_RSS")" "$(mib "$A_QEMU_PSS")" "$(ratio "$Q_RSS" "$A_QEMU_RSS")"
printf '  anchor sandbox without QEMU (pod-init, libvirtd, udhcpd): RSS %s MiB, PSS %s MiB (pod overhead/anchor RSS %s)\n' \
  "$(mib "$A_OTHER_RSS")" "$(mib "$A_OTHER_PSS")" "$(ratio "$OV_RSS" "$A_OTHER_RSS")"
if [ -n "$ANNOT" ]; then
  used=$((OV_RSS + (Q_RSS > GUEST_KIB ? Q_RSS - GUEST_KIB : 0)))
  printf '  requested overhead (kubevirt.io/memory-overhead-bytes): %s MiB; used beyond guest memory (non-QEMU RSS + QEMU RSS − 128 MiB): %s MiB (%s of the request)\n' \
    "$(mib $((ANNOT / 1024)))" "$(mib "$used")" "$(ratio "$used" $((ANNOT / 1024)))"
else
  echo "  the pod has no kubevirt.io/memory-overhead-bytes annotation"
fi
printf '  pod memory requests: %s; pod cgroup: total_rss %s MiB, usage (with page cache) %s MiB\n' "$POD_REQ" \
  "$([ -n "$CG_RSS" ] && mib "$CG_RSS" || echo -)" "$([ -n "$CG_USAGE" ] && mib "$CG_USAGE" || echo -)"
echo
echo "3. scale: $N VMIs created at once ($ok reached Running and their marker)"
printf '  %-8s %-34s %9s %8s %13s %12s\n' vmi pod Scheduled Running "marker(file)" "marker(log)"
awk '{ printf "  %-8s %-34s %9s %8s %13s %12s\n", $1, $2, $3, $4, $5, $6 }' "$W/many.times"
printf '  all Running after %s s, all markers after %s s; per VMI: %s s (average create → Running %s s, → marker %s s)\n' \
  "$all_run" "$all_mark" "$(awk -v t="$all_mark" -v n="$ok" 'BEGIN { if (n) printf "%.2f", t / n; else print "-" }')" "$avg_run" "$avg_mark"
printf '  vs %d sequential anchor boots (%d × %s s = %s s): %s\n' "$N" "$N" "$A_MARKER" \
  "$(awk -v a="$A_MARKER" -v n="$N" 'BEGIN { printf "%.1f", a * n }')" "$(ratio "$all_mark" "$(awk -v a="$A_MARKER" -v n="$N" 'BEGIN { print a * n }')")"
if [ "$SET0" = "$SET1" ] && [ "$SET1" = "$SET2" ]; then
  printf '  API requests per VMI, create → all markers: vm-controller %s, node-agent %s; delete → pods gone (%s s): vm-controller %s, node-agent %s\n' \
    "$(awk -v a="$REQ_C0" -v b="$REQ_C1" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')" \
    "$(awk -v a="$REQ_A0" -v b="$REQ_A1" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')" "$(sub "$t_gone" "$t_del")" \
    "$(awk -v a="$REQ_C1" -v b="$REQ_C2" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')" \
    "$(awk -v a="$REQ_A1" -v b="$REQ_A2" -v n="$N" 'BEGIN { printf "%.1f", (b - a) / n }')"
else
  echo "  API requests per VMI: n/a (a vm-controller or node-agent pod was replaced or restarted during the run)"
fi
[ -z "$M_CHURN" ] || printf '  warning: stack pods changed during the scale run (someone redeployed or restarted them): %s\n' "$M_CHURN"
if [ "$FOREIGN" -gt 0 ] || [ "$FOREIGN_DEL" -gt 0 ]; then
  printf '  warning: %s VMI events of other namespaces during create, %s during delete: the request counts include that work\n' \
    "$FOREIGN" "$FOREIGN_DEL"
fi
echo "  component memory (MiB): peak VmRSS sampled during the run; VmHWM before → after"
for l in "${CPIDS[@]}"; do
  read -r c pod p <<<"$l"
  peak=$(awk -v p="$p" '$1 == p { print $2 }' "$W/rss.final")
  printf '  %-16s %-34s peak RSS %6s   HWM %s → %s\n' "$c" "$pod" "$(mib "${peak:-0}")" "$(mib "${HWM0[$p]:-0}")" \
    "$([ -n "${HWM1[$p]:-}" ] && mib "${HWM1[$p]}" || echo "(process gone: pod replaced during the run)")"
done
[ -z "$NODE_TROUBLE" ] || printf '\nwarning: node conditions changed or taints present during the run (numbers above may be skewed): %s\n' "$NODE_TROUBLE"
if [ "${#failed[@]}" -gt 0 ]; then
  echo
  echo "FAILED: ${#failed[@]} of $N VMIs did not reach Running and their marker within $TIMEOUT s: ${failed[*]}"
  cat "$W/evidence"
  exit 1
fi
