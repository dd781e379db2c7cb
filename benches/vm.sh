#!/usr/bin/env bash
# benches/vm.sh — issue 13's VirtualMachine scale benchmark, against an anchor measured in the same run.
#
#   benches/vm.sh                    # N = 100 VMs, in waves of 10 created at once (runStrategy Always)
#   VM_BENCH_N=20 benches/vm.sh      # fewer
#   VM_BENCH_WAVE=17 benches/vm.sh   # bigger waves (what the machine holds at once; at least 10)
#
# Needs the test cluster and our stack on it (`tests/cluster/up`, `tests/cluster/install-stack`); it checks them and
# fails if they are missing, never installs anything. Needs root (the controllers' processes under /proc), kubectl,
# jq, curl.
#
# What it measures (summary on stdout, progress on stderr):
#   The machine holds only so many TCG guests at once (2 cores: launcher CPU requests, and guests that starve the
#   controllers beyond ~15), so the N objects come in waves of VM_BENCH_WAVE (≥ 10) created with one
#   `kubectl create` each; a wave is done when all of it is Running, then it is deleted and the next one comes.
#   1. The anchor: N bare VMIs (upstream's vmi-ephemeral.yaml, containerDisk rewritten to the test guest), in waves.
#   2. N VirtualMachines (the same VMI template, `runStrategy: Always`), in the same waves: the time from create to
#      all Running (summed over the waves, and the slowest wave), and its ratio to the anchor's (what the VM layer
#      costs). A guest that is unschedulable fails the run (lower VM_BENCH_WAVE).
#   3. API requests per VM while creating and while deleting: our components' own counters (vm-controller and
#      node-agent, `*_api_requests_total`), and the API server's `apiserver_request_total` by verb and resource
#      (every client, the kubelet's pod status updates included) for kubevirt.io resources, pods and events.
#   4. The vm-controller's peak RSS (VmRSS sampled every 0.25 s, and VmHWM) and CPU seconds (utime + stime) over
#      the VM phase, and the node agent's.
#   Everything it made (namespace bench-vm-<pid>) is removed on any exit.
#
# Overridable: VM_BENCH_N (100), VM_BENCH_WAVE (10), VM_BENCH_TIMEOUT (900 s per wave), KUBECONFIG.
set -euo pipefail
export LC_ALL=C
N=${VM_BENCH_N:-100}
WAVE=${VM_BENCH_WAVE:-10}
TIMEOUT=${VM_BENCH_TIMEOUT:-900}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
CLUSTER_DIR=${KV_CLUSTER_DIR:-${TMPDIR:-/tmp}/kubevirt-rs-cluster}
export KUBECONFIG=${KUBECONFIG:-$CLUSTER_DIR/admin.kubeconfig}
REGISTRY=127.0.0.1:${KV_REGISTRY_PORT:-35000}
KV_NS=kubevirt
EXAMPLE=$ROOT/../shared/upstream-examples/kubevirt/vmi-ephemeral.yaml

log() { printf '[bench-vm %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[bench-vm %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }
now() { echo "$EPOCHREALTIME"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
per() { awk -v a="$1" -v n="$2" 'BEGIN { printf "%.1f", a / n }'; }

[ "$(id -u)" = 0 ] || die "needs root (the controllers' processes under /proc)"
for c in kubectl jq curl awk pgrep; do command -v "$c" >/dev/null || die "missing command: $c"; done
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "VM_BENCH_N must be a positive integer, got '$N'"
[[ "$WAVE" =~ ^[1-9][0-9]*$ ]] && [ "$WAVE" -ge 10 ] || die "VM_BENCH_WAVE must be at least 10, got '$WAVE'"
[ "$WAVE" -le "$N" ] || WAVE=$N
[ -f "$EXAMPLE" ] || die "missing $EXAMPLE (the shared upstream examples)"
kubectl get --raw /readyz >/dev/null 2>&1 || die "the cluster at $KUBECONFIG is not reachable: run tests/cluster/up"
kubectl get crd virtualmachines.kubevirt.io >/dev/null 2>&1 || die "no VirtualMachine CRD: run tests/cluster/install-stack"
for w in deploy/virt-controller daemonset/virt-handler deploy/virt-api; do
  kubectl -n "$KV_NS" rollout status "$w" --timeout=10s >/dev/null 2>&1 ||
    die "$KV_NS/$w is not installed or not ready: run tests/cluster/install-stack"
done
GUEST=$(tests/guest/build.sh) || die "tests/guest/build.sh failed (the test guest)"
CD_IMAGE=$REGISTRY/kubevirt-rs/guest-containerdisk:g$(basename "$GUEST")
if ! curl -fsS "http://$REGISTRY/v2/kubevirt-rs/guest-containerdisk/tags/list" | jq -e --arg t "g$(basename "$GUEST")" \
  '.tags | index($t)' >/dev/null 2>&1; then
  log "pushing the guest containerDisk $CD_IMAGE"
  [ "$(tests/guest/push-containerdisk.sh "$CD_IMAGE")" = "$CD_IMAGE" ] || die "push-containerdisk.sh failed"
fi

NS=bench-vm-$$
W=$(mktemp -d "${TMPDIR:-/tmp}/kvrs-bvm.XXXXXX")
SAMPLER=''
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -z "$SAMPLER" ] || kill "$SAMPLER" 2>/dev/null || true
  log "deleting namespace $NS"
  kubectl delete ns "$NS" --timeout=600s >/dev/null 2>&1 || log "warning: namespace $NS not gone after 600 s"
  rm -rf "$W"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
kubectl create ns "$NS" >/dev/null

# The VMI spec of vmi-ephemeral.yaml (as stack-support's local_images rewrites it), as a VMI and as a VM template.
vmi_spec=$(sed -e "s#registry:5000/kubevirt/cirros-container-disk-demo:devel#$CD_IMAGE#" "$EXAMPLE" |
  awk '/^spec:/ { on = 1; next } on { print "    " $0 }')
[ -n "$vmi_spec" ] || die "cannot read the spec of $EXAMPLE"
# vmis_yaml FROM TO / vms_yaml FROM TO: objects FROM..TO.
vmis_yaml() {
  local i
  for i in $(seq "$1" "$2"); do
    printf -- '---\napiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: vmi-%03d}\nspec:\n' "$i"
    sed 's/^    //' <<<"$vmi_spec"
  done
}
vms_yaml() {
  local i
  for i in $(seq "$1" "$2"); do
    printf -- '---\napiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: vm-%03d}\nspec:\n  runStrategy: Always\n  template:\n    spec:\n' "$i"
    echo "$vmi_spec"
  done
}

# shellcheck source=benches/kubevirt-counters.sh
. "$ROOT/benches/kubevirt-counters.sh"
# apiserver FILE: "verb resource count" of apiserver_request_total for the resources of interest.
apiserver() {
  kubectl get --raw /metrics | awk '/^apiserver_request_total\{/ {
      verb = ""; res = ""; sub_ = ""; grp = ""
      if (match($0, /verb="[^"]*"/)) verb = substr($0, RSTART + 6, RLENGTH - 7)
      if (match($0, /resource="[^"]*"/)) res = substr($0, RSTART + 10, RLENGTH - 11)
      if (match($0, /subresource="[^"]*"/)) sub_ = substr($0, RSTART + 13, RLENGTH - 14)
      if (match($0, /group="[^"]*"/)) grp = substr($0, RSTART + 7, RLENGTH - 8)
      if (grp == "kubevirt.io" || grp == "instancetype.kubevirt.io" || res == "pods" || res == "events") {
        key = verb " " res (sub_ != "" ? "/" sub_ : ""); n[key] += $NF
      }
    } END { for (k in n) print k, n[k] }' | sort >"$1"
}
# accumulate BEFORE AFTER TOTAL: adds AFTER - BEFORE ("verb resource count" rows) into TOTAL.
accumulate() {
  touch "$3"
  cat "$3" <(join -a2 -e0 -o 0,1.2,2.2 <(awk '{ print $1 "_" $2, $3 }' "$1" | sort) \
    <(awk '{ print $1 "_" $2, $3 }' "$2" | sort) | awk '{ split($1, k, "_"); print k[1], k[2], $3 - $2 }') |
    awk '{ n[$1 " " $2] += $3 } END { for (k in n) print k, n[k] }' | sort >"$3.tmp"
  mv "$3.tmp" "$3"
}
# per_vm TOTAL: "verb resource per-VM" rows of TOTAL with a non-zero count.
per_vm() {
  awk -v n="$N" '$3 > 0 { printf "    %-8s %-40s %6.1f\n", $1, $2, $3 / n }' "$1"
}
# settle COUNT: waits until COUNT VMIs of the namespace are Running; fails on an unschedulable one.
settle() {
  local count=$1 t0 r u json
  t0=$(now)
  while :; do
    json=$(kubectl get vmi -n "$NS" -o json)
    r=$(jq '[.items[] | select(.status.phase == "Running")] | length' <<<"$json")
    u=$(jq '[.items[] | select(.status.phase != "Running") | select(any(.status.conditions[]?; .type == "PodScheduled"
      and .status == "False" and .reason == "Unschedulable"))] | length' <<<"$json")
    [ "$u" -eq 0 ] || die "$u of a wave of $count are unschedulable: this machine holds fewer; lower VM_BENCH_WAVE"
    [ "$r" -ge "$count" ] && return 0
    [ "$(sub "$(now)" "$t0" | cut -d. -f1)" -lt "$TIMEOUT" ] || die "only $r of $count Running after $TIMEOUT s"
    sleep 1
  done
}
gone() {
  local t0
  t0=$(now)
  until [ -z "$(kubectl get vm,vmi,pods -n "$NS" -o name 2>/dev/null)" ]; do
    [ "$(sub "$(now)" "$t0" | cut -d. -f1)" -lt "$TIMEOUT" ] || die "objects left in $NS after $TIMEOUT s"
    sleep 1
  done
}
proc_cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo 0; }
status_kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
# The leading vm-controller (the one whose requests grow) and the node agent: their host PIDs.
controller_pids() { pgrep -x vm-controller || true; }
agent_pids() { pgrep -x node-agent || true; }

# --- 1. anchor: N bare VMIs, in waves
log "anchor: $N VMIs in waves of $WAVE"
A_T=0 A_MAX=0
for ((from = 1; from <= N; from += WAVE)); do
  to=$((from + WAVE - 1 > N ? N : from + WAVE - 1))
  vmis_yaml "$from" "$to" >"$W/vmis.yaml"
  t0=$(now)
  kubectl create -n "$NS" -f "$W/vmis.yaml" >/dev/null
  settle $((to - from + 1))
  t=$(sub "$(now)" "$t0")
  A_T=$(awk -v a="$A_T" -v b="$t" 'BEGIN { printf "%.1f", a + b }')
  A_MAX=$(awk -v a="$A_MAX" -v b="$t" 'BEGIN { printf "%.1f", (b > a ? b : a) }')
  log "anchor: VMIs $from..$to Running after $t s; deleting"
  kubectl delete vmi -n "$NS" --all --wait=false >/dev/null
  gone
done

# --- 2. N VMs
CPIDS=$(controller_pids) APIDS=$(agent_pids)
[ -n "$CPIDS" ] || die "no vm-controller process on this host"
declare -A cpu0=()
for p in $CPIDS $APIDS; do cpu0[$p]=$(proc_cpu "$p"); done
(
  declare -A max=()
  while :; do
    for p in $CPIDS $APIDS; do
      r=$(status_kib "$p" VmRSS)
      [ "${r:-0}" -gt "${max[$p]:-0}" ] && max[$p]=$r
    done
    for p in $CPIDS $APIDS; do echo "$p ${max[$p]:-0}"; done >"$W/rss.tmp" && mv "$W/rss.tmp" "$W/rss"
    sleep 0.25
  done
) &
SAMPLER=$!
log "$N VMs (runStrategy Always) in waves of $WAVE"
V_T=0 V_MAX=0 D_T=0 CC=0 GC=0 CD=0 GD=0
for ((from = 1; from <= N; from += WAVE)); do
  to=$((from + WAVE - 1 > N ? N : from + WAVE - 1))
  vms_yaml "$from" "$to" >"$W/vms.yaml"
  read -r C0 G0 _ < <(api_requests)
  apiserver "$W/api0"
  t0=$(now)
  kubectl create -n "$NS" -f "$W/vms.yaml" >/dev/null
  settle $((to - from + 1))
  t=$(sub "$(now)" "$t0")
  read -r C1 G1 _ < <(api_requests)
  apiserver "$W/api1"
  V_T=$(awk -v a="$V_T" -v b="$t" 'BEGIN { printf "%.1f", a + b }')
  V_MAX=$(awk -v a="$V_MAX" -v b="$t" 'BEGIN { printf "%.1f", (b > a ? b : a) }')
  log "VMs $from..$to Running after $t s; deleting"
  t1=$(now)
  kubectl delete vm -n "$NS" --all --wait=false >/dev/null
  gone
  D_T=$(awk -v a="$D_T" -v b="$(sub "$(now)" "$t1")" 'BEGIN { printf "%.1f", a + b }')
  read -r C2 G2 _ < <(api_requests)
  apiserver "$W/api2"
  CC=$((CC + C1 - C0)) GC=$((GC + G1 - G0)) CD=$((CD + C2 - C1)) GD=$((GD + G2 - G1))
  accumulate "$W/api0" "$W/api1" "$W/create"
  accumulate "$W/api1" "$W/api2" "$W/delete"
done
kill "$SAMPLER" 2>/dev/null || true
SAMPLER=''

# --- summary
ratio=$(awk -v a="$V_T" -v b="$A_T" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "-" }')
echo "VirtualMachines at scale (benches/vm.sh), $N in waves of $WAVE created at once, on $(nproc) cores (TCG guests of 128Mi)"
echo "1. anchor: $N bare VMIs → all Running in $A_T s (sum over the waves; slowest wave $A_MAX s)"
echo "2. $N VMs (runStrategy Always) → all Running in $V_T s ($ratio the anchor; slowest wave $V_MAX s); deleted in $D_T s"
echo "3. API requests per VM (our counters): create vm-controller $(per "$CC" "$N"), node agent $(per "$GC" "$N");" \
  "delete vm-controller $(per "$CD" "$N"), node agent $(per "$GD" "$N")"
echo "   API server, every client, per VM while creating (verb resource):"
per_vm "$W/create"
echo "   ... while deleting:"
per_vm "$W/delete"
echo "4. processes (peak VmRSS / VmHWM, CPU seconds over create + delete):"
for p in $CPIDS $APIDS; do
  name=$(cat "/proc/$p/comm" 2>/dev/null || echo gone)
  peak=$(awk -v p="$p" '$1 == p { print $2 }' "$W/rss" 2>/dev/null)
  hwm=$(status_kib "$p" VmHWM)
  cpu=$(awk -v a="$(proc_cpu "$p")" -v b="${cpu0[$p]}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (a - b) / hz }')
  printf '   %-14s pid %-7s peak %6.1f MiB, HWM %6.1f MiB, CPU %s s\n' "$name" "$p" \
    "$(awk -v k="${peak:-0}" 'BEGIN { print k / 1024 }')" "$(awk -v k="${hwm:-0}" 'BEGIN { print k / 1024 }')" "$cpu"
done
