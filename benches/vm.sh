#!/usr/bin/env bash
# benches/vm.sh — issue 13's VirtualMachine scale benchmark, against an anchor measured in the same run.
#
#   benches/vm.sh                  # N = 100 VMs created at once (runStrategy Always)
#   VM_BENCH_N=20 benches/vm.sh    # fewer
#
# Needs the test cluster and our stack on it (`tests/cluster/up`, `tests/cluster/install-stack`); it checks them and
# fails if they are missing, never installs anything. Needs root (the controllers' processes under /proc), kubectl,
# jq, curl.
#
# What it measures (summary on stdout, progress on stderr):
#   1. The anchor: N bare VMIs (upstream's vmi-ephemeral.yaml, containerDisk rewritten to the test guest) created
#      with one `kubectl create`, until each is Running or unschedulable (the machine holds only so many launcher
#      pods: their memory requests against the node's allocatable memory); then deleted.
#   2. N VirtualMachines (the same VMI template, `runStrategy: Always`) created at once, until each VM is Running
#      or ErrorUnschedulable: the time, and its ratio to the anchor's (what the VM layer costs). At least 10 must
#      run together, or the run fails.
#   3. API requests per VM while creating and while deleting: our components' own counters (vm-controller and
#      node-agent, `*_api_requests_total`), and the API server's `apiserver_request_total` by verb and resource
#      (every client, the kubelet's pod status updates included) for kubevirt.io resources, pods and events.
#   4. The vm-controller's peak RSS (VmRSS sampled every 0.25 s, and VmHWM) and CPU seconds (utime + stime) over
#      the VM phase, and the node agent's.
#   Everything it made (namespace bench-vm-<pid>) is removed on any exit.
#
# Overridable: VM_BENCH_N (100), VM_BENCH_TIMEOUT (900 s per phase), KUBECONFIG.
set -euo pipefail
export LC_ALL=C
N=${VM_BENCH_N:-100}
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
vmis_yaml() {
  local i
  for i in $(seq 1 "$N"); do
    printf -- '---\napiVersion: kubevirt.io/v1\nkind: VirtualMachineInstance\nmetadata: {name: vmi-%03d}\nspec:\n' "$i"
    sed 's/^    //' <<<"$vmi_spec"
  done
}
vms_yaml() {
  local i
  for i in $(seq 1 "$N"); do
    printf -- '---\napiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata: {name: vm-%03d}\nspec:\n  runStrategy: Always\n  template:\n    spec:\n' "$i"
    echo "$vmi_spec"
  done
}

# counters: "controller agent" API request totals of our components (summed over their pods).
counters() {
  local json c=0 a=0 ip v
  json=$(kubectl get pods -n "$KV_NS" -l 'kubevirt.io in (virt-controller,virt-handler)' -o json)
  for ip in $(jq -r '.items[] | select(.metadata.labels["kubevirt.io"] == "virt-controller") | .status.podIP' <<<"$json"); do
    v=$(curl -fsS -m 5 "http://$ip:8080/metrics" | awk '$1 == "kubevirt_rs_vm_controller_api_requests_total" { print $2 }')
    [ -n "$v" ] || die "no kubevirt_rs_vm_controller_api_requests_total at $ip:8080"
    c=$((c + v))
  done
  for ip in $(jq -r '.items[] | select(.metadata.labels["kubevirt.io"] == "virt-handler") | .status.podIP' <<<"$json"); do
    v=$(curl -fsS -m 5 "http://$ip:8185/metrics" | awk '$1 == "kubevirt_rs_node_agent_api_requests_total" { print $2 }')
    [ -n "$v" ] || die "no kubevirt_rs_node_agent_api_requests_total at $ip:8185"
    a=$((a + v))
  done
  echo "$c $a"
}
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
# apiserver_delta BEFORE AFTER: "verb resource per-VM" rows with a non-zero difference.
apiserver_delta() {
  join -a2 -e0 -o 0,1.2,2.2 <(awk '{ print $1 "_" $2, $3 }' "$1" | sort) <(awk '{ print $1 "_" $2, $3 }' "$2" | sort) |
    awk -v n="$N" '$3 - $2 > 0 { split($1, k, "_"); printf "    %-8s %-40s %6.1f\n", k[1], k[2], ($3 - $2) / n }'
}
# settle KIND: waits until every object of KIND is Running or unschedulable; prints "running unschedulable".
settle() {
  local kind=$1 t0 r u json
  t0=$(now)
  while :; do
    json=$(kubectl get vmi -n "$NS" -o json)
    r=$(jq '[.items[] | select(.status.phase == "Running")] | length' <<<"$json")
    u=$(jq '[.items[] | select(.status.phase != "Running") | select(any(.status.conditions[]?; .type == "PodScheduled"
      and .status == "False" and .reason == "Unschedulable"))] | length' <<<"$json")
    if [ "$kind" = vm ]; then
      # Every VM must have its VMI; a VM still without one is not settled.
      [ "$(jq '.items | length' <<<"$json")" -eq "$N" ] || { sleep 1; continue; }
    fi
    [ $((r + u)) -ge "$N" ] && { echo "$r $u"; return 0; }
    [ "$(sub "$(now)" "$t0" | cut -d. -f1)" -lt "$TIMEOUT" ] || die "$kind: only $r Running, $u unschedulable of $N after $TIMEOUT s"
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

# --- 1. anchor: N bare VMIs
log "anchor: $N VMIs created at once"
vmis_yaml >"$W/vmis.yaml"
t0=$(now)
kubectl create -n "$NS" -f "$W/vmis.yaml" >/dev/null
read -r A_RUN A_UNSCHED < <(settle vmi)
A_T=$(sub "$(now)" "$t0")
log "anchor: $A_RUN Running, $A_UNSCHED unschedulable after $A_T s; deleting"
kubectl delete vmi -n "$NS" --all --wait=false >/dev/null
gone

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
read -r C0 G0 < <(counters)
apiserver "$W/api0"
log "$N VMs (runStrategy Always) created at once"
vms_yaml >"$W/vms.yaml"
t0=$(now)
kubectl create -n "$NS" -f "$W/vms.yaml" >/dev/null
read -r V_RUN V_UNSCHED < <(settle vm)
V_T=$(sub "$(now)" "$t0")
read -r C1 G1 < <(counters)
apiserver "$W/api1"
log "VMs: $V_RUN Running, $V_UNSCHED unschedulable after $V_T s; deleting"
[ "$V_RUN" -ge 10 ] || die "only $V_RUN VMs ran together (at least 10 must)"
t1=$(now)
kubectl delete vm -n "$NS" --all --wait=false >/dev/null
gone
D_T=$(sub "$(now)" "$t1")
read -r C2 G2 < <(counters)
apiserver "$W/api2"
kill "$SAMPLER" 2>/dev/null || true
SAMPLER=''

# --- summary
ratio=$(awk -v a="$V_T" -v b="$A_T" 'BEGIN { if (b > 0) printf "%.2f×", a / b; else print "-" }')
echo "VirtualMachines at scale (benches/vm.sh), $N created at once on $(nproc) cores (TCG guests of 128Mi)"
echo "1. anchor: $N bare VMIs → $A_RUN Running + $A_UNSCHED unschedulable in $A_T s"
echo "2. $N VMs (runStrategy Always) → $V_RUN Running + $V_UNSCHED ErrorUnschedulable in $V_T s ($ratio the anchor); deleted in $D_T s"
echo "3. API requests per VM (our counters): create vm-controller $(per $((C1 - C0)) "$N"), node agent $(per $((G1 - G0)) "$N");" \
  "delete vm-controller $(per $((C2 - C1)) "$N"), node agent $(per $((G2 - G1)) "$N")"
echo "   API server, every client, per VM while creating (verb resource):"
apiserver_delta "$W/api0" "$W/api1"
echo "   ... while deleting:"
apiserver_delta "$W/api1" "$W/api2"
echo "4. processes (peak VmRSS / VmHWM, CPU seconds over create + delete):"
for p in $CPIDS $APIDS; do
  name=$(cat "/proc/$p/comm" 2>/dev/null || echo gone)
  peak=$(awk -v p="$p" '$1 == p { print $2 }' "$W/rss" 2>/dev/null)
  hwm=$(status_kib "$p" VmHWM)
  cpu=$(awk -v a="$(proc_cpu "$p")" -v b="${cpu0[$p]}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (a - b) / hz }')
  printf '   %-14s pid %-7s peak %6.1f MiB, HWM %6.1f MiB, CPU %s s\n' "$name" "$p" \
    "$(awk -v k="${peak:-0}" 'BEGIN { print k / 1024 }')" "$(awk -v k="${hwm:-0}" 'BEGIN { print k / 1024 }')" "$cpu"
done
