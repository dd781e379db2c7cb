#!/usr/bin/env bash
# benches/migration.sh — issue 15's live-migration benchmark: a containerDisk VMI migrated by our stack
# (VirtualMachineInstanceMigration → vm-controller → the two node agents' proxies → libvirt peer to peer) against a
# floor measured in the same run: the same guest migrated by a bare `virsh migrate` between two launcher sandboxes.
#
#   benches/migration.sh                         # 128 MiB and 512 MiB guests, 3 repetitions each (medians)
#   MIG_BENCH_REPS=5 benches/migration.sh        # more repetitions
#   MIG_BENCH_ONLY=floor benches/migration.sh    # only the floor (no cluster needed); `ours` only the stack
#
# Needs root (the sandboxes: namespaces, mounts, a veth pair; the launcher pods' libvirt sockets on the host),
# unshare, nsenter, setpriv, ip, awk, and the cached test guest (tests/guest/build.sh) and launcher rootfs
# (deploy/launcher/build-rootfs.sh); for the stack half also kubectl, jq, curl, virsh (the host's libvirt-clients,
# to read the target pod's libvirtd) and the two-node test cluster with our stack on it (`KV_NODES=2
# tests/cluster/up`, then `tests/cluster/install-stack`). It only checks them and fails loudly when something is
# missing; it never installs or redeploys anything. The guest's containerDisk is pushed to the test registry (as
# stack-support's guest_containerdisk(): 127.0.0.1:$KV_REGISTRY_PORT/kubevirt-rs/guest-containerdisk:g<hash>) when
# that tag is missing.
#
# What it measures, for a 128 MiB and a 512 MiB guest (MIG_BENCH_SIZES), each MIG_BENCH_REPS (3) times, a fresh boot
# every time (the summary on stdout, progress on stderr). Not 64 MiB: the test guest does not boot in it (Debian's
# generic kernel unpacks into 63.6 MiB above its 16 MiB load address; SYSLINUX says "Booting kernel failed: Invalid
# argument"); 96 MiB is the least that boots, 128 MiB is upstream's vmi-migratable as it is.
#   1. The floor. Two launcher sandboxes of tests/guest/sandbox.sh + pod-init.sh in `session` mode (the launcher
#      image's rootfs: the pods' libvirtd 9.0 and QEMU 7.2, libvirtd as uid 107 without capabilities, masquerade
#      binding; each its own hostname, host_uuid, /run, network, mount and PID namespaces), joined by one veth
#      pair (the two sandboxes' eth0, nothing on the host's network). The guest (deploy/launcher/domain-reference.xml
#      without its cloud-init cdrom, memory set, TCG) is defined and started on the source; after
#      KUBEVIRT-RS-GUEST-UP on its serial console and MIG_BENCH_SETTLE (5) s it is migrated as our node agent
#      migrates (the same libvirt flags): `virsh migrate --live --p2p --persistent --undefinesource
#      --copy-storage-inc --migrate-disks vda` — block migration of the pod-local containerDisk overlay onto an
#      overlay of the same containerDisk the target made (what our target launcher does), the source libvirtd
#      talking to the target's over its unix socket (bind-mounted into the source, as our proxies hand it over),
#      memory and NBD streams over TCP between the two sandboxes. Measured: the wall time of `virsh migrate`, and
#      on the target `virsh domjobinfo --completed` (libvirt's job time, total downtime, data transferred). Checked:
#      the guest runs on the target (a new TICK with its uptime past the last one before, no new GUEST-UP marker).
#      TCP between two network namespaces cannot use loopback (both sandboxes bind tap0/k6t-eth0 and their own
#      nftables, as pods do), so the pair of veth ends stands in for it: in-kernel, segmentation offload on,
#      no bridge or routing in between.
#   2. Ours, in namespace bench-migration-<pid>: upstream's vmi-migratable.yaml (containerDisk rewritten to the
#      test guest, memory.guest set), Running, its marker in `kubectl logs <pod> -c guest-console-log`, LiveMigratable,
#      MIG_BENCH_SETTLE s, then `kubectl create` of a VirtualMachineInstanceMigration. Measured (watches of the VMIM
#      and the VMI stamp every change on arrival): (a) end to end, create → phase Succeeded; (b) the migration
#      proper, the arrival of the VMI's status.migrationState.startTimestamp → of its endTimestamp (the
#      timestamps themselves, 1 s resolution, and the VMIM's phaseTransitionTimestamps are printed too); (c) on
#      the target pod's libvirtd (the host's /var/run/kubevirt-rs/sockets/<node>/<pod uid>/libvirt-sock, session
#      libvirtd as uid 107) `virsh domjobinfo --completed` of domain <namespace>_<name>: libvirt's job time,
#      downtime, data transferred. Checked: the VMIM Succeeded, the VMI moved node, the target pod's console goes
#      on ticking past the last uptime before with no second GUEST-UP. The KubeVirt CR's migration caps and the
#      migrationConfiguration the VMI migrated with are printed (a bandwidth cap left by a test skews the run).
#   3. The summary: per size the medians of the floor's wall time, job time and downtime, ours migration proper,
#      job time, end to end and downtime, and the ratios ours/floor (migration proper / virsh wall time; downtime)
#      next to the targets (migration time ≤ 1.3× the floor, downtime ≤ 2× the floor's), and of the two libvirt
#      job times (the copy alone). Missed targets are reported, not failed; any broken step (no boot, a failed
#      migration, a guest that did not survive) fails the run.
# Everything it made is removed on any exit (the sandboxes with their namespaces and veth pair, the namespace
# bench-migration-<pid>, scratch under ${TMPDIR:-/tmp}).
#
# Overridable: MIG_BENCH_REPS (3), MIG_BENCH_SIZES ("128 512", MiB), MIG_BENCH_SETTLE (5 s), MIG_BENCH_TIMEOUT
# (300 s per boot / migration), MIG_BENCH_ONLY (floor|ours; default both), MIG_BENCH_NET (10.254.251: a /30 between
# the two sandboxes, in their own network namespaces only), KV_REGISTRY_PORT (35000), KV_CLUSTER_DIR, KUBECONFIG.
set -Eeuo pipefail
export LC_ALL=C
# Any step that fails without its own message says where (set -E: also inside functions).
trap 'rc=$?; printf "[bench-migration %s] ERROR: line %s: \`%s\` failed (exit %s)\n" "$(date +%T)" "$LINENO" "$BASH_COMMAND" "$rc" >&2' ERR
REPS=${MIG_BENCH_REPS:-3}
SIZES=${MIG_BENCH_SIZES:-128 512}
SETTLE=${MIG_BENCH_SETTLE:-5}
TIMEOUT=${MIG_BENCH_TIMEOUT:-300}
ONLY=${MIG_BENCH_ONLY:-}
NET=${MIG_BENCH_NET:-10.254.251}
SRC_IP=$NET.1 DST_IP=$NET.2 VETH_A=kvrs-bmig0 VETH_B=kvrs-bmig1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
KV_CACHE=${KV_CACHE:-$HOME/.cache/kubevirt-rs}
CLUSTER_DIR=${KV_CLUSTER_DIR:-${TMPDIR:-/tmp}/kubevirt-rs-cluster}
export KUBECONFIG=${KUBECONFIG:-$CLUSTER_DIR/admin.kubeconfig}
REGISTRY=127.0.0.1:${KV_REGISTRY_PORT:-35000}
KV_NS=kubevirt
EXAMPLE=$ROOT/../shared/upstream-examples/kubevirt/vmi-migratable.yaml
XML=$ROOT/deploy/launcher/domain-reference.xml
HOST_SOCKETS=/var/run/kubevirt-rs/sockets # contracts::kubevirt::launcher::HOST_SOCKETS_DIR/<node>/<pod uid>/
MARKER=KUBEVIRT-RS-GUEST-UP
TICK=KUBEVIRT-RS-GUEST-TICK
SESSION_URI='qemu:///session?socket=/var/run/kubevirt-private/libvirt/libvirt-sock'
PEER_DIR=/run/kubevirt-rs-peer # in the source sandbox: the target's socket directory (bind mount)

log() { printf '[bench-migration %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[bench-migration %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }
now() { echo "$EPOCHREALTIME"; }
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }
# median VALUE...: the median of the numeric values ("-" values skipped; "-" if none).
median() {
  printf '%s\n' "$@" | awk '$1 != "-" && $1 != ""' | sort -g |
    awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
# ratio A B [TARGET]: A/B as "1.23×" ("-" when either is missing), with " ok"/" MISSED" against TARGET.
ratio() {
  awk -v a="$1" -v b="$2" -v t="${3:-}" 'BEGIN {
    if (a == "-" || b == "-" || a == "" || b == "" || b + 0 <= 0) { print "-"; exit }
    r = a / b; s = sprintf("%.2f×", r)
    if (t != "") s = s (r <= t ? " ok" : " MISSED")
    print s }'
}
# last_uptime: the uptime= of the last TICK line on stdin ("" if none).
last_uptime() { tr -d '\r' | { grep -a "^$TICK " || true; } | tail -n1 | sed -n 's/.* uptime=\([0-9.]*\).*/\1/p'; }
# SYSLINUX's answer when the guest's memory cannot hold the kernel while it unpacks.
BOOT_FAILED='Booting kernel failed'
boot_hint() { # CONSOLE_FILE
  ! grep -aq "$BOOT_FAILED" "$1" 2>/dev/null ||
    echo " (the boot loader could not place the kernel: too little guest memory; the test guest needs ≥ 96 MiB)"
}
count_markers() { tr -d '\r' | grep -ac "^$MARKER " || true; }
# jobinfo: `virsh domjobinfo --completed` (stdin) → "elapsed_ms downtime_ms mib" ("-" when absent): libvirt's job
# time, total downtime, and the data the migration moved (libvirt 9.0: "Data processed"; older: "Data transferred").
jobinfo() {
  awk '
    function mib(v, u) { return u == "B" ? v / 1048576 : u == "KiB" ? v / 1024 : u == "GiB" ? v * 1024 : u == "TiB" ? v * 1048576 : v }
    /^Time elapsed:/ && !e { e = $3 }
    /^Total downtime:/ { d = $3 }
    /^Data (processed|transferred):/ { t = mib($3, $4) }
    END {
      printf "%s %s %s\n", (e == "" ? "-" : e), (d == "" ? "-" : d), (t == "" ? "-" : sprintf("%.1f", t)) }'
}

# --- what runs
case "$ONLY" in
  '') RUN_FLOOR=1 RUN_OURS=1 ;;
  floor) RUN_FLOOR=1 RUN_OURS='' ;;
  ours) RUN_FLOOR='' RUN_OURS=1 ;;
  *) die "MIG_BENCH_ONLY must be floor, ours or empty, got '$ONLY'" ;;
esac
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "MIG_BENCH_REPS must be a positive integer, got '$REPS'"
[[ "$SETTLE" =~ ^[0-9]+$ ]] || die "MIG_BENCH_SETTLE must be a whole number of seconds, got '$SETTLE'"
[[ "$TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "MIG_BENCH_TIMEOUT must be a positive integer, got '$TIMEOUT'"
read -ra SIZE_LIST <<<"$SIZES"
[ "${#SIZE_LIST[@]}" -gt 0 ] || die "MIG_BENCH_SIZES is empty"
for m in "${SIZE_LIST[@]}"; do [[ "$m" =~ ^[1-9][0-9]*$ ]] || die "MIG_BENCH_SIZES: '$m' is not a size in MiB"; done

# --- dependencies (fail loudly)
[ "$(id -u)" = 0 ] || die "needs root (the sandboxes' namespaces and mounts; the launcher pods' sockets on the host)"
for c in awk sed grep sort timeout; do command -v "$c" >/dev/null || die "missing command: $c"; done
if [ -n "$RUN_FLOOR" ]; then
  for c in unshare setpriv nsenter ip tar zstd; do command -v "$c" >/dev/null || die "missing command: $c"; done
fi
GUEST=$(tests/guest/build.sh) || die "tests/guest/build.sh failed (the test guest)"
[ -f "$GUEST/disk.qcow2" ] || die "no $GUEST/disk.qcow2"
if [ -n "$RUN_OURS" ]; then
  for c in kubectl jq curl virsh; do command -v "$c" >/dev/null || die "missing command: $c"; done
  [ -f "$EXAMPLE" ] || die "missing $EXAMPLE (the shared upstream examples)"
  [ -f "$KUBECONFIG" ] || die "no kubeconfig at $KUBECONFIG: run KV_NODES=2 tests/cluster/up, then tests/cluster/install-stack"
  kubectl get --raw /readyz >/dev/null 2>&1 || die "the cluster at $KUBECONFIG is not reachable: run KV_NODES=2 tests/cluster/up"
  READY_NODES=$(kubectl get nodes -o json | jq -r '.items[] | select(any(.status.conditions[]?; .type == "Ready" and .status == "True")) | .metadata.name' | paste -sd' ')
  [ "$(wc -w <<<"$READY_NODES")" -ge 2 ] ||
    die "live migration needs two Ready nodes, the cluster has: ${READY_NODES:-none} (KV_NODES=2 tests/cluster/up)"
  for crd in virtualmachineinstances.kubevirt.io virtualmachineinstancemigrations.kubevirt.io; do
    kubectl get crd "$crd" >/dev/null 2>&1 || die "no CRD $crd: run tests/cluster/install-stack"
  done
  for w in deploy/virt-controller daemonset/virt-handler deploy/virt-api; do
    kubectl -n "$KV_NS" rollout status "$w" --timeout=10s >/dev/null 2>&1 ||
      die "$KV_NS/$w is not installed or not ready: run tests/cluster/install-stack"
  done
  agents=$(kubectl -n "$KV_NS" get daemonset virt-handler -o jsonpath='{.status.numberReady}')
  [ "${agents:-0}" -ge 2 ] || die "$KV_NS/virt-handler (the node agent) is ready on ${agents:-0} node(s), migration needs 2"
  CD_IMAGE=$REGISTRY/kubevirt-rs/guest-containerdisk:g$(basename "$GUEST")
  if ! curl -fsS "http://$REGISTRY/v2/kubevirt-rs/guest-containerdisk/tags/list" | jq -e --arg t "g$(basename "$GUEST")" \
    '.tags | index($t)' >/dev/null 2>&1; then
    log "pushing the guest containerDisk $CD_IMAGE"
    [ "$(tests/guest/push-containerdisk.sh "$CD_IMAGE")" = "$CD_IMAGE" ] || die "push-containerdisk.sh failed"
  fi
fi
if [ -n "$RUN_FLOOR" ]; then
  ROOTFS_TAR=$(deploy/launcher/build-rootfs.sh) || die "deploy/launcher/build-rootfs.sh failed (the launcher rootfs)"
  LOWER=$KV_CACHE/launcher-rootfs/$(basename "$ROOTFS_TAR" .tar.zst).d
  ! ip link show "$VETH_A" >/dev/null 2>&1 || die "$VETH_A exists already (a crashed earlier run?)"
fi
DOMAIN=$(sed -n 's|^  <name>\(.*\)</name>$|\1|p' "$XML")
VMI_UID=$(sed -n 's|^  <uuid>\(.*\)</uuid>$|\1|p' "$XML")
if [ -z "$DOMAIN" ] || [ -z "$VMI_UID" ]; then die "cannot read <name>/<uuid> from $XML"; fi

NS=bench-migration-$$
S=$(mktemp -d "${TMPDIR:-/tmp}/kvrs-bmig.XXXXXX") # short: the sandboxes' libvirt socket paths must stay < 108 bytes
chmod 755 "$S"
W=$S/work
mkdir -p "$W"
declare -A UNSHARE_PID=() SANDBOX_PID=()
NS_MADE='' BG_PIDS=()

stop_sandbox() { # TAG
  local u=${UNSHARE_PID[$1]:-} p=${SANDBOX_PID[$1]:-}
  [ -n "$u" ] || return 0
  [ -z "$p" ] || kill -TERM "$p" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$u" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$u" 2>/dev/null; then
    [ -z "$p" ] || kill -KILL "$p" 2>/dev/null || true
    kill -KILL "$u" 2>/dev/null || true
  fi
  wait "$u" 2>/dev/null || true
  UNSHARE_PID[$1]='' SANDBOX_PID[$1]=''
}
cleanup() {
  local rc=$? p
  trap - EXIT INT TERM
  for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  stop_sandbox src
  stop_sandbox dst
  ip link del "$VETH_A" 2>/dev/null || true
  if [ -n "$NS_MADE" ]; then
    log "deleting namespace $NS"
    kubectl delete ns "$NS" --timeout=180s >/dev/null 2>&1 || log "warning: namespace $NS not gone after 180 s"
  fi
  if grep -q " $S/" /proc/self/mountinfo; then log "not removing $S: still mounted"; else rm -rf "$S"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ================= 1. the floor: virsh migrate between two launcher sandboxes
# in_sb TAG CMD...: CMD in sandbox TAG as root; as_launcher TAG CMD...: as the launcher (session: uid 107, no caps).
in_sb() { local t=$1; shift; nsenter -t "${SANDBOX_PID[$t]}" -m -u -i -n -p -r -w "$@"; }
as_launcher() {
  local t=$1
  shift
  nsenter -t "${SANDBOX_PID[$t]}" -m -u -i -n -p -r -w setpriv --reuid 107 --regid 107 --clear-groups \
    --inh-caps=-all --bounding-set=-all --no-new-privs env HOME=/var/run/kubevirt-private "$@"
}
virsh_sb() { local t=$1; shift; as_launcher "$t" timeout "$TIMEOUT" virsh -q -c "$SESSION_URI" "$@"; }

# start_sandbox TAG POD_NAME: a launcher sandbox (session libvirtd) in $S/TAG; its eth0 comes from link_sandboxes.
start_sandbox() {
  local t=$1 P=$S/$1
  mkdir -p "$P"
  setpriv --pdeathsig KILL unshare --mount --pid --net --uts --ipc --fork --kill-child -- \
    bash "$ROOT/tests/guest/sandbox.sh" "$P" "$LOWER" "$GUEST/disk.qcow2" "$2" session >"$P.log" 2>&1 &
  UNSHARE_PID[$t]=$!
  for _ in $(seq 1 100); do
    SANDBOX_PID[$t]=$(awk '{ print $1 }' "/proc/${UNSHARE_PID[$t]}/task/${UNSHARE_PID[$t]}/children" 2>/dev/null || true)
    [ -n "${SANDBOX_PID[$t]}" ] && break
    sleep 0.05
  done
  [ -n "${SANDBOX_PID[$t]}" ] || die "unshare did not start sandbox $t: $(cat "$P.log")"
}
# link_sandboxes: the "CNI": one veth pair, eth0 in each sandbox, $SRC_IP and $DST_IP, each the other's gateway.
link_sandboxes() {
  ip link add "$VETH_A" type veth peer name "$VETH_B"
  ip link set "$VETH_A" netns "${SANDBOX_PID[src]}"
  ip link set "$VETH_B" netns "${SANDBOX_PID[dst]}"
  local t dev ip gw
  for t in src dst; do
    if [ "$t" = src ]; then dev=$VETH_A ip=$SRC_IP gw=$DST_IP; else dev=$VETH_B ip=$DST_IP gw=$SRC_IP; fi
    nsenter -t "${SANDBOX_PID[$t]}" -n ip link set "$dev" name eth0
    nsenter -t "${SANDBOX_PID[$t]}" -n ip addr add "$ip/30" dev eth0
    nsenter -t "${SANDBOX_PID[$t]}" -n ip link set eth0 up
    nsenter -t "${SANDBOX_PID[$t]}" -n ip route add default via "$gw"
  done
}
wait_ready() { # TAG
  local P=$S/$1
  for _ in $(seq 1 300); do
    [ -f "$P/vol/private/ready" ] && return 0
    kill -0 "${UNSHARE_PID[$1]}" 2>/dev/null || die "sandbox $1 exited: $(tail -n 20 "$P.log")"
    sleep 0.05
  done
  die "libvirtd in sandbox $1 not ready after 15 s: $(tail -n 20 "$P.log")"
}

floor_setup() {
  if [ ! -f "$LOWER/.complete" ]; then # as tests/guest/check.sh unpacks it
    log "unpacking the launcher rootfs to $LOWER"
    rm -rf "$LOWER" && mkdir -p "$LOWER"
    tar --zstd -xpf "$ROOTFS_TAR" -C "$LOWER" --numeric-owner
    touch "$LOWER/.complete"
  fi
  start_sandbox src virt-launcher-bench-src
  start_sandbox dst virt-launcher-bench-dst
  link_sandboxes
  wait_ready src
  wait_ready dst
  # The source libvirtd reaches the target's through its unix socket (p2p), as our proxies hand it over.
  nsenter -t "${SANDBOX_PID[src]}" -m sh -euc "mkdir -p '$S/src/root$PEER_DIR'
    mount --bind '$S/dst/vol/private/libvirt' '$S/src/root$PEER_DIR'" || die "bind-mounting the target's socket failed"
  local t
  t=$(now)
  virsh_sb src version >/dev/null &
  local p1=$!
  virsh_sb dst version >/dev/null || die "virsh cannot reach the target sandbox's libvirtd: $(tail "$S/dst.log")"
  wait "$p1" || die "virsh cannot reach the source sandbox's libvirtd: $(tail "$S/src.log")"
  log "floor: two launcher sandboxes up (session libvirtd; first libvirt calls, QEMU capability probes: $(sub "$(now)" "$t") s)"
}

# prepare TAG: what our launcher prepares for a containerDisk (both pods: the target makes its own overlay of the
# same containerDisk): the VMI's private directory and a fresh qcow2 overlay; as uid 107.
prepare() {
  as_launcher "$1" bash -euc "
    rm -rf /var/run/kubevirt-private/$VMI_UID
    d=/var/run/kubevirt-ephemeral-disks/disk-data/containerdisk
    mkdir -p /var/run/kubevirt-private/$VMI_UID \$d
    rm -f \$d/disk.qcow2
    qemu-img create -q -f qcow2 -F qcow2 -b /var/run/kubevirt/container-disks/disk_0.img \$d/disk.qcow2" ||
    die "preparing the overlay in sandbox $1 failed"
}
# wait_file_line FILE REGEX SECONDS: until a line of FILE matches (\r stripped).
wait_file_line() {
  local n=$(($3 * 10))
  for _ in $(seq 1 "$n"); do
    tr -d '\r' <"$1" 2>/dev/null | grep -aEq "$2" && return 0
    sleep 0.1
  done
  return 1
}
floor_destroy() {
  local t
  for t in src dst; do
    virsh_sb "$t" destroy "$DOMAIN" >/dev/null 2>&1 || true
    virsh_sb "$t" undefine "$DOMAIN" >/dev/null 2>&1 || true
  done
}

# floor_run MIB REP: one boot + migration; appends "mib rep wall elapsed_ms downtime_ms mib_transferred
# uptime_before uptime_after" to $W/floor.
floor_run() {
  local mib=$1 rep=$2 xml=$S/src/vol/private/bench-$1.xml t0 t1 wall before after info out el dt tr
  local src_log=$S/src/vol/private/$VMI_UID/virt-serial0-log dst_log=$S/dst/vol/private/$VMI_UID/virt-serial0-log
  local port=$((49152 + 2 * ((rep - 1) % 100)))
  sed -e "/<disk type='file' device='cdrom'>/,/<\/disk>/d" \
    -e "s|^  <memory unit='b'>[0-9]*</memory>\$|  <memory unit='b'>$((mib * 1048576))</memory>|" "$XML" >"$xml"
  ! grep -q "device='cdrom'" "$xml" || die "could not drop the cdrom from $XML"
  grep -q "<memory unit='b'>$((mib * 1048576))</memory>" "$xml" || die "could not set the memory in $XML"
  prepare src
  prepare dst
  virsh_sb src define "/var/run/kubevirt-private/bench-$mib.xml" >/dev/null || die "virsh define failed"
  t0=$(now)
  virsh_sb src start "$DOMAIN" >/dev/null || die "virsh start failed: $(tail "$S/src.log")"
  if ! wait_file_line "$src_log" "^$MARKER |$BOOT_FAILED" 120 || grep -aq "$BOOT_FAILED" "$src_log"; then
    die "floor $mib MiB: the guest did not come up (no $MARKER)$(boot_hint "$src_log"); console: $(tail -c 2000 "$src_log" 2>/dev/null)"
  fi
  log "floor $mib MiB #$rep: $MARKER $(sub "$(now)" "$t0") s after virsh start; running $SETTLE s"
  sleep "$SETTLE"
  wait_file_line "$src_log" "^$TICK " 30 || die "floor $mib MiB: no $TICK on the source console"
  before=$(last_uptime <"$src_log")
  t0=$(now)
  out=$(virsh_sb src migrate --live --p2p --persistent --undefinesource --copy-storage-inc --migrate-disks vda \
    "$DOMAIN" "qemu+unix:///session?socket=$PEER_DIR/libvirt-sock" \
    --migrateuri "tcp://$DST_IP:$port" --disks-uri "tcp://$DST_IP:$((port + 1))" 2>&1) ||
    die "floor $mib MiB: virsh migrate failed: $out"
  t1=$(now)
  wall=$(sub "$t1" "$t0")
  info=$(virsh_sb dst domjobinfo --completed --keep-completed "$DOMAIN" 2>&1) || die "domjobinfo on the target failed: $info"
  log "floor $mib MiB #$rep: target's domjobinfo --completed: $(tr -s ' ' <<<"$info" | paste -sd';')"
  [ "$(virsh_sb dst domstate "$DOMAIN" 2>&1)" = running ] || die "floor $mib MiB: the domain is not running on the target"
  [ -z "$(virsh_sb src list --all --name 2>/dev/null | grep -x "$DOMAIN" || true)" ] ||
    die "floor $mib MiB: the domain is still defined on the source"
  # The guest goes on: a TICK past the last uptime before, and no boot.
  after=''
  for _ in $(seq 1 300); do
    after=$(last_uptime <"$dst_log" 2>/dev/null || true)
    [ -n "$after" ] && awk -v a="$after" -v b="$before" 'BEGIN { exit !(a > b) }' && break
    after=''
    sleep 0.1
  done
  [ -n "$after" ] || die "floor $mib MiB: no $TICK past uptime $before on the target within 30 s; console: $(tail -c 1000 "$dst_log" 2>/dev/null)"
  [ "$(count_markers <"$dst_log")" = 0 ] || die "floor $mib MiB: the guest booted again on the target"
  read -r el dt tr <<<"$(jobinfo <<<"$info")"
  log "floor $mib MiB #$rep: virsh migrate $wall s (libvirt job ${el} ms, downtime ${dt} ms, ${tr} MiB); uptime: last tick" \
    "$before before the migration, $(last_uptime <"$src_log") last on the source, $after first on the target"
  echo "$mib $rep $wall $el $dt $tr $before $after" >>"$W/floor"
  floor_destroy
}

# ================= 2. ours: a VirtualMachineInstanceMigration on the cluster
vmi_yaml() { # NAME MIB: vmi-migratable.yaml named NAME with MIB of memory, its containerDisk the test guest
  sed -e "s|^\( *\)image: registry:5000/kubevirt/.*|\1image: $CD_IMAGE|" -e "s|^  name: vmi-migratable\$|  name: $1|" \
    -e "s|^\( *\)guest: 128Mi\$|\1guest: $2Mi|" "$EXAMPLE"
}
vmim_yaml() { # NAME VMI
  printf 'apiVersion: kubevirt.io/v1\nkind: VirtualMachineInstanceMigration\nmetadata:\n  name: %s\nspec:\n  vmiName: %s\n' "$1" "$2"
}
# Watches of the namespace's VMIs and VMIMs, each line stamped on arrival.
start_watches() {
  kubectl get vmi -n "$NS" -w -o jsonpath='{.metadata.name}{"|"}{.status.phase}{"|"}{.status.nodeName}{"|"}{.status.migrationState.startTimestamp}{"|"}{.status.migrationState.endTimestamp}{"|"}{.status.migrationState.completed}{"|"}{.status.migrationState.failed}{"\n"}' \
    2>>"$W/watch.err" > >(while IFS= read -r l; do printf '%s|%s\n' "$EPOCHREALTIME" "$l"; done >>"$W/vmi-events") &
  BG_PIDS+=($!)
  kubectl get vmim -n "$NS" -w -o jsonpath='{.metadata.name}{"|"}{.status.phase}{"\n"}' \
    2>>"$W/watch.err" > >(while IFS= read -r l; do printf '%s|%s\n' "$EPOCHREALTIME" "$l"; done >>"$W/vmim-events") &
  BG_PIDS+=($!)
  sleep 1
}
# vmim_phase_time NAME PHASE: first arrival of NAME in PHASE (empty if never).
vmim_phase_time() { awk -F'|' -v n="$1" -v p="$2" '$2 == n && $3 == p { print $1; exit }' "$W/vmim-events" 2>/dev/null || true; }
# vmi_field_time NAME FIELD: first arrival of NAME with field FIELD (4 startTimestamp, 5 endTimestamp) set.
vmi_field_time() { awk -F'|' -v n="$1" -v f="$(($2 + 1))" '$2 == n && $f != "" { print $1; exit }' "$W/vmi-events" 2>/dev/null || true; }
vmi_get() { kubectl get vmi -n "$NS" "$1" -o json; }
launcher_pod() { # VMI: the newest running launcher pod owned by it
  kubectl get pods -n "$NS" -l kubevirt.io=virt-launcher -o json | jq -r --arg n "$1" '[.items[]
    | select(.metadata.ownerReferences[0].name == $n and .metadata.deletionTimestamp == null)]
    | sort_by(.metadata.creationTimestamp) | last | .metadata.name // ""'
}
console() { kubectl logs -n "$NS" "$1" -c guest-console-log 2>/dev/null || true; }
evidence() { # VMI VMIM
  {
    echo "--- VMI $NS/$1"
    kubectl get vmi -n "$NS" "$1" -o json 2>&1 | jq -c '{phase: .status.phase, node: .status.nodeName, migrationState: .status.migrationState, conditions: [.status.conditions[]? | {type, status, reason}]}' 2>&1 || true
    [ -z "${2:-}" ] || kubectl get vmim -n "$NS" "$2" -o json 2>&1 | jq -c .status 2>&1 || true
    kubectl get pods -n "$NS" -o wide 2>&1 || true
    kubectl get events -n "$NS" -o custom-columns=T:.lastTimestamp,O:.involvedObject.name,R:.reason,M:.message --no-headers 2>/dev/null | tail -n 15 || true
  } >&2
}
# ours_run MIB REP: appends "mib rep e2e proper proper_ts elapsed_ms downtime_ms mib_transferred uptime_before
# uptime_after" to $W/ours and the VMIM's timeline to $W/ours.timeline.
ours_run() {
  local mib=$1 rep=$2 name=vmi-mig-$1-$2 mname=mig-$1-$2 t0 pod src_node json phase t_end t_start t_done
  local before after tpod tnode tuid sock info out st el dt tr
  vmi_yaml "$name" "$mib" >"$W/$name.yaml"
  grep -q "guest: ${mib}Mi" "$W/$name.yaml" || die "could not set the memory in $EXAMPLE"
  t0=$(now)
  kubectl create -n "$NS" -f "$W/$name.yaml" >/dev/null
  phase=''
  for _ in $(seq 1 "$((TIMEOUT * 2))"); do
    phase=$(kubectl get vmi -n "$NS" "$name" -o jsonpath='{.status.phase}' 2>/dev/null || true)
    case "$phase" in Running | Failed | Succeeded) break ;; esac
    sleep 0.5
  done
  [ "$phase" = Running ] || { evidence "$name"; die "ours $mib MiB: VMI $name is '$phase', not Running after $TIMEOUT s"; }
  pod=$(launcher_pod "$name")
  [ -n "$pod" ] || { evidence "$name"; die "ours $mib MiB: no launcher pod for $name"; }
  for _ in $(seq 1 "$((TIMEOUT * 2))"); do
    console "$pod" | tr -d '\r' | grep -aEq "^$MARKER |$BOOT_FAILED" && break
    sleep 0.5
  done
  console "$pod" >"$W/console"
  if ! grep -aq "^$MARKER " "$W/console" || grep -aq "$BOOT_FAILED" "$W/console"; then
    evidence "$name"
    die "ours $mib MiB: no $MARKER from $pod$(boot_hint "$W/console")"
  fi
  log "ours $mib MiB #$rep: $name Running in $pod, $MARKER $(sub "$(now)" "$t0") s after create; running $SETTLE s"
  for _ in $(seq 1 60); do
    st=$(kubectl get vmi -n "$NS" "$name" -o jsonpath='{.status.conditions[?(@.type=="LiveMigratable")].status}')
    [ "$st" = True ] && break
    sleep 0.5
  done
  [ "$st" = True ] || { evidence "$name"; die "ours $mib MiB: $name is not LiveMigratable ('$st')"; }
  sleep "$SETTLE"
  json=$(vmi_get "$name")
  src_node=$(jq -r .status.nodeName <<<"$json")
  out=$(console "$pod")
  before=$(last_uptime <<<"$out")
  [ -n "$before" ] || { evidence "$name"; die "ours $mib MiB: no $TICK on $pod's console"; }
  [ "$(count_markers <<<"$out")" = 1 ] || die "ours $mib MiB: $pod's console shows $(count_markers <<<"$out") boots"
  # The caps the migration will run with (a test's leftover bandwidth cap skews the numbers).
  kubectl get kubevirt -n "$KV_NS" -o json 2>/dev/null | jq -c '[.items[].spec.configuration.migrations // {}] | add // {}' \
    >"$W/caps" 2>/dev/null || echo '?' >"$W/caps"

  vmim_yaml "$mname" "$name" >"$W/$mname.yaml"
  t0=$(now)
  kubectl create -n "$NS" -f "$W/$mname.yaml" >/dev/null
  phase=''
  for i in $(seq 1 "$((TIMEOUT * 10))"); do
    t_done=$(vmim_phase_time "$mname" Succeeded)
    [ -n "$t_done" ] && phase=Succeeded && break
    [ -z "$(vmim_phase_time "$mname" Failed)" ] || { phase=Failed; break; }
    if [ $((i % 20)) = 0 ]; then # the watch may have ended: ask directly now and then
      phase=$(kubectl get vmim -n "$NS" "$mname" -o jsonpath='{.status.phase}' 2>/dev/null || true)
      case "$phase" in Succeeded) t_done=$(now) && break ;; Failed) break ;; esac
    fi
    sleep 0.1
  done
  [ "$phase" = Succeeded ] || { evidence "$name" "$mname"; die "ours $mib MiB: migration $mname is '$phase' after $TIMEOUT s"; }
  if [ -z "$(vmim_phase_time "$mname" Succeeded)" ]; then # polled: the watch's stamp, when it comes, is the better one
    sleep 1
    st=$(vmim_phase_time "$mname" Succeeded)
    if [ -n "$st" ]; then t_done=$st; else log "warning: the VMIM watch missed Succeeded (time polled, ±0.3 s)"; fi
  fi
  json=$(vmi_get "$name")
  tpod=$(jq -r '.status.migrationState.targetPod // ""' <<<"$json")
  tnode=$(jq -r '.status.migrationState.targetNode // ""' <<<"$json")
  if [ -z "$tpod" ] || [ -z "$tnode" ]; then evidence "$name" "$mname"; die "ours $mib MiB: no target pod/node in migrationState"; fi
  if [ "$(jq -r .status.nodeName <<<"$json")" != "$tnode" ] || [ "$tnode" = "$src_node" ]; then
    evidence "$name" "$mname"
    die "ours $mib MiB: the VMI did not move from $src_node to $tnode"
  fi
  [ "$(jq -r '.status.migrationState.completed // false' <<<"$json")" = true ] ||
    { evidence "$name" "$mname"; die "ours $mib MiB: migrationState not completed"; }
  # (c) the target libvirtd's view: job time, downtime, data.
  tuid=$(kubectl get pod -n "$NS" "$tpod" -o jsonpath='{.metadata.uid}')
  sock=$HOST_SOCKETS/$tnode/$tuid/libvirt-sock
  [ -S "$sock" ] || die "ours $mib MiB: no libvirt socket $sock for the target pod $tpod"
  info=$(timeout 30 virsh -c "qemu+unix:///session?socket=$sock" domjobinfo --completed --keep-completed "${NS}_$name" 2>&1) ||
    die "ours $mib MiB: domjobinfo on the target failed: $info"
  log "ours $mib MiB #$rep: target's domjobinfo --completed: $(tr -s ' ' <<<"$info" | paste -sd';')"
  t_start=$(vmi_field_time "$name" 4)
  t_end=$(vmi_field_time "$name" 5)
  local proper='-' proper_ts
  [ -n "$t_start" ] && [ -n "$t_end" ] && proper=$(sub "$t_end" "$t_start")
  proper_ts=$(jq -r '.status.migrationState | if .startTimestamp and .endTimestamp then
    ((.endTimestamp | fromdateiso8601) - (.startTimestamp | fromdateiso8601)) else "-" end' <<<"$json")
  # The guest goes on in the target pod: a TICK past the last uptime before, no second boot.
  after=''
  for _ in $(seq 1 60); do
    out=$(console "$tpod")
    after=$(last_uptime <<<"$out")
    [ -n "$after" ] && awk -v a="$after" -v b="$before" 'BEGIN { exit !(a > b) }' && break
    after=''
    sleep 0.5
  done
  [ -n "$after" ] || { evidence "$name" "$mname"; die "ours $mib MiB: no $TICK past uptime $before on $tpod's console within 30 s"; }
  [ "$(count_markers <<<"$out")" = 0 ] || die "ours $mib MiB: the guest booted again in $tpod"
  read -r el dt tr <<<"$(jobinfo <<<"$info")"
  local e2e
  e2e=$(sub "$t_done" "$t0")
  {
    printf '  %s MiB #%s: %s → %s; VMIM phases (arrival after create):' "$mib" "$rep" "$src_node" "$tnode"
    awk -F'|' -v n="$mname" -v t0="$t0" '$2 == n && $3 != "" && !seen[$3]++ { printf " %s +%.2f", $3, $1 - t0 }' "$W/vmim-events"
    echo
    printf '    migrationState %s..%s (VMI watch: start +%s, end +%s); phaseTransitionTimestamps: %s\n' \
      "$(jq -r '.status.migrationState.startTimestamp // "?"' <<<"$json")" "$(jq -r '.status.migrationState.endTimestamp // "?"' <<<"$json")" \
      "$([ -n "$t_start" ] && sub "$t_start" "$t0" || echo '?')" "$([ -n "$t_end" ] && sub "$t_end" "$t0" || echo '?')" \
      "$(kubectl get vmim -n "$NS" "$mname" -o json | jq -r '[.status.phaseTransitionTimestamps[]? | "\(.phase)@\(.phaseTransitionTimestamp | sub(".*T"; ""))"] | join(" ") | if . == "" then "none" else . end')"
    printf '    migrated with: KubeVirt migrations %s; migrationConfiguration %s; policy %s\n' "$(cat "$W/caps")" \
      "$(jq -c '.status.migrationState.migrationConfiguration // {}' <<<"$json")" "$(jq -r '.status.migrationState.migrationPolicyName // "none"' <<<"$json")"
  } >>"$W/ours.timeline"
  log "ours $mib MiB #$rep: create → Succeeded $e2e s, migration proper $proper s (timestamps $proper_ts s), libvirt job ${el} ms, downtime ${dt} ms, ${tr} MiB; uptime $before → $after"
  echo "$mib $rep $e2e $proper $proper_ts $el $dt $tr $before $after" >>"$W/ours"
  kubectl delete vmi -n "$NS" "$name" --wait=true --timeout=120s >/dev/null ||
    die "ours $mib MiB: deleting $name failed"
  kubectl wait -n "$NS" --for=delete pod -l "kubevirt.io=virt-launcher" --timeout=120s >/dev/null 2>&1 ||
    log "warning: launcher pods left 120 s after deleting $name"
}

# ================= run
T_START=$(date -u +%FT%TZ)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
log "load average: $LOAD0; sizes ${SIZE_LIST[*]} MiB, $REPS repetition(s) each"
[ -z "$RUN_FLOOR" ] || floor_setup
if [ -n "$RUN_OURS" ]; then
  log "VMIs already on the cluster: $(kubectl get vmi -A --no-headers 2>/dev/null | wc -l)"
  kubectl create ns "$NS" >/dev/null
  NS_MADE=1
  start_watches
fi
# Per size: the floor's repetitions, then ours (the machine's load moves; neighbours in time compare best).
for mib in "${SIZE_LIST[@]}"; do
  for rep in $(seq 1 "$REPS"); do [ -z "$RUN_FLOOR" ] || floor_run "$mib" "$rep"; done
  for rep in $(seq 1 "$REPS"); do [ -z "$RUN_OURS" ] || ours_run "$mib" "$rep"; done
done
[ -z "$RUN_FLOOR" ] || { stop_sandbox src; stop_sandbox dst; }

# ================= 3. report
# med MIB COLUMN FILE: the median of the column over MIB's rows; meds: the same in seconds from milliseconds.
med() { local -a v; mapfile -t v < <(awk -v m="$1" -v c="$2" '$1 == m { print $c }' "$3" 2>/dev/null); median "${v[@]}"; }
meds() { local v; v=$(med "$@"); if [ "$v" = - ]; then echo -; else awk -v v="$v" 'BEGIN { printf "%.2f", v / 1000 }'; fi; }
echo
echo "== live-migration benchmark (issue 15) — $T_START, load average $LOAD0 → $(cut -d' ' -f1-3 /proc/loadavg), guest $(basename "$GUEST") ($(sed -n 's/^kernel //p' "$GUEST/manifest")), TCG, medians of $REPS"
if [ -n "$RUN_FLOOR" ]; then
  echo
  echo "floor: virsh migrate --live --p2p --persistent --undefinesource --copy-storage-inc --migrate-disks vda between two"
  echo "       launcher sandboxes (session libvirtd 9.0 + QEMU 7.2, launcher rootfs), memory + NBD over TCP on a veth pair"
  printf '  %6s %4s %10s %12s %10s %9s  %s\n' MiB rep "virsh s" "libvirt ms" "downtime" "MiB sent" "guest uptime before → after"
  while read -r m r w e d t b a; do printf '  %6s %4s %10s %12s %10s %9s  %s → %s\n' "$m" "$r" "$w" "$e" "$d ms" "$t" "$b" "$a"; done <"$W/floor"
fi
if [ -n "$RUN_OURS" ]; then
  echo
  echo "ours: kubectl create VirtualMachineInstanceMigration of upstream's vmi-migratable (containerDisk: block migration"
  echo "      of the overlay), node agents' mutual-TLS proxies between the two test nodes; namespace $NS"
  printf '  %6s %4s %8s %9s %8s %12s %10s %9s  %s\n' MiB rep "e2e s" "proper s" "(ts s)" "libvirt ms" "downtime" "MiB sent" "guest uptime before → after"
  while read -r m r e p pt el d t b a; do
    printf '  %6s %4s %8s %9s %8s %12s %10s %9s  %s → %s\n' "$m" "$r" "$e" "$p" "$pt" "$el" "$d ms" "$t" "$b" "$a"
  done <"$W/ours"
  echo "  (e2e: kubectl create → VMIM Succeeded; proper: VMI migrationState.startTimestamp → endTimestamp as the VMI"
  echo "   watch saw them arrive; ts: the timestamps themselves, 1 s resolution; libvirt/downtime/MiB: target's domjobinfo)"
  cat "$W/ours.timeline"
fi
echo
echo "summary (medians; times in s, downtime in ms; targets: migration ≤ 1.3× the floor's virsh wall time, downtime ≤ 2× the floor's)"
printf '  %6s | %8s %10s %9s | %9s %10s %8s %9s | %-16s %-16s %s\n' MiB "floor s" "libvirt s" "down ms" "proper s" "libvirt s" "e2e s" "down ms" "migration ≤1.3×" "downtime ≤2×" "libvirt job"
for mib in "${SIZE_LIST[@]}"; do
  fw='-' fe='-' fd='-' op='-' oe='-' oo='-' od='-'
  if [ -n "$RUN_FLOOR" ]; then
    fw=$(med "$mib" 3 "$W/floor") fe=$(meds "$mib" 4 "$W/floor") fd=$(med "$mib" 5 "$W/floor")
  fi
  if [ -n "$RUN_OURS" ]; then
    op=$(med "$mib" 4 "$W/ours") oe=$(meds "$mib" 6 "$W/ours") oo=$(med "$mib" 3 "$W/ours") od=$(med "$mib" 7 "$W/ours")
  fi
  printf '  %6s | %8s %10s %9s | %9s %10s %8s %9s | %-16s %-16s %s\n' "$mib" "$fw" "$fe" "$fd" "$op" "$oe" "$oo" "$od" \
    "$(ratio "$op" "$fw" 1.3)" "$(ratio "$od" "$fd" 2)" "$(ratio "$oe" "$fe")"
done
if [ -n "$RUN_FLOOR" ] && [ -n "$RUN_OURS" ]; then
  echo "  (ratios ours/floor: migration = ours proper / the floor's virsh wall time; libvirt job = the two job times,"
  echo "   the copy itself without either side's set-up; missed targets are reported, not failed)"
else
  echo "  (MIG_BENCH_ONLY=$ONLY: no ratios)"
fi
