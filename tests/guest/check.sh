#!/usr/bin/env bash
# tests/guest/check.sh — issue 12's two images, proven on this machine without the cluster:
#
#   1. tests/guest/build.sh (the tiny guest) and deploy/launcher/build-rootfs.sh (the launcher rootfs), cached
#   2. the containerDisk image: tests/guest/push-containerdisk.sh into a throwaway docker-registry, pulled back
#      with skopeo, unpacked with umoci: exactly /disk/disk.qcow2, 107:107, the guest's bytes
#   3. the launcher image: deploy/launcher/build-image.sh with a stub binary into the same registry: two layers
#      (the rootfs, then /usr/local/bin/virt-launcher-stub)
#   4. twice, as two launcher pods would (pass `system`: libvirtd as root, QEMU as 107 by qemu.conf; pass
#      `session`: libvirtd and QEMU as uid 107 without any capability), a launcher sandbox (tests/guest/sandbox.sh
#      + pod-init.sh): new mount/PID/net/UTS/IPC namespaces, root = the unpacked rootfs under an overlay, the pulled
#      containerDisk file bind-mounted read-only; a veth pair from the host is its eth0 (10.254.254.2/30, the "pod
#      IP"); inside, deploy/launcher/masquerade.sh and the rootfs's libvirtd. Only the rootfs's libvirtd, virsh,
#      QEMU, qemu-img, xorrisofs, ip, nft, udhcpd are used; the host's libvirt (if any) is never touched. Then the
#      domain deploy/launcher/domain-reference.xml (type='qemu', q35, the containerDisk through a qcow2 overlay, a
#      NoCloud ISO on a SATA cdrom, virtio NIC on tap0, serial console to a unix socket + log file) is defined and
#      started with the rootfs's virsh, and asserted:
#        - QEMU (and in `session`, libvirtd) run as user qemu; no zombies in the sandbox
#        - KUBEVIRT-RS-GUEST-UP on the serial console within 60 s (the time from `virsh start` is printed), and
#          every driver of the guest's list loaded
#        - the guest's DHCP lease is 10.0.2.2/24
#        - `curl http://10.254.254.2/` from the host (outside the sandbox's network namespace) returns the guest's
#          page: its marker, address 10.0.2.2, client = the host (DNAT without SNAT)
#        - the user-data printed between KUBEVIRT-RS-USERDATA-BEGIN/-END is exactly the ISO's; the page then shows
#          the meta-data's hostname `testvmi`
#        - the guest reaches the host through the NAT (`/?ping=10.254.254.1`); the masquerade and DNAT rules
#          counted packets
#        - `virsh shutdown` (ACPI) → KUBEVIRT-RS-GUEST-POWEROFF and state `shut off (shutdown)` within 15 s
#      and after the sandbox is stopped: no process left in its PID, network or mount namespace, no host mount
#      under the scratch directory, no host veth.
#
# Needs root (namespaces, mounts, mknod, veth), Debian's package mirror on a cold cache. Installs curl, jq, umoci,
# skopeo, docker-registry with apt when missing. Scratch in ${TMPDIR:-/tmp}/kvrs-guest-check.* (removed at the
# end; the libvirt socket path must stay under 108 bytes). Overridable: KV_GUEST_CHECK_NET (default 10.254.254, a
# /30 there), KV_GUEST_CHECK_REGISTRY_PORT (default 19590), KV_GUEST_CHECK_MODES (default "system session").
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
KV_CACHE=${KV_CACHE:-$HOME/.cache/kubevirt-rs}
NET=${KV_GUEST_CHECK_NET:-10.254.254}
HOST_IP=$NET.1 POD_IP=$NET.2
REG_PORT=${KV_GUEST_CHECK_REGISTRY_PORT:-19590}
REGISTRY=127.0.0.1:$REG_PORT
MODES=${KV_GUEST_CHECK_MODES:-system session}
HOST_VETH=kvrs-chk0
POD_NAME=virt-launcher-testvmi-kvrs0
XML=$REPO/deploy/launcher/domain-reference.xml
DOMAIN=$(sed -n 's|^  <name>\(.*\)</name>$|\1|p' "$XML")
VMI_UID=$(sed -n 's|^  <uuid>\(.*\)</uuid>$|\1|p' "$XML")
USER_DATA=$'#cloud-config\nKUBEVIRT-RS test user data'

T0=$(date +%s.%N)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
log() { printf '[guest-check %s +%ss] %s\n' "$(date +%T)" "$(since "$T0")" "$*"; }
fail() {
  printf '[guest-check %s] FAILED: %s\n' "$(date +%T)" "$*" >&2
  diagnostics >&2
  exit 1
}

[ "$(id -u)" = 0 ] || { echo "tests/guest/check.sh: needs root (namespaces, mounts, veth)" >&2; exit 1; }
[ -n "$DOMAIN" ] && [ -n "$VMI_UID" ] || { echo "cannot read <name>/<uuid> from $XML" >&2; exit 1; }
. "$REPO/scripts/apt-ensure.sh"
apt_ensure curl jq umoci skopeo docker-registry util-linux iproute2 zstd

S=$(mktemp -d "${TMPDIR:-/tmp}/kvrs-guest-check.XXXXXX")
chmod 755 "$S"
P='' SERIAL='' UNSHARE_PID='' SANDBOX_PID='' REGISTRY_PID=''

diagnostics() {
  [ -n "$P" ] || return 0
  echo "--- sandbox log ($P/sandbox.log)"; tail -n 40 "$P/sandbox.log" 2>/dev/null || true
  echo "--- QEMU log"
  tail -n 20 "$P/upper/var/log/libvirt/qemu/$DOMAIN.log" "$P/vol/private/libvirt/qemu/log/$DOMAIN.log" 2>/dev/null || true
  echo "--- serial console ($SERIAL)"; tail -n 40 "$SERIAL" 2>/dev/null || true
}

# stop_sandbox: SIGTERM to the sandbox's PID 1 (pod-init stops libvirtd and exits; the kernel kills what is left
# in the PID namespace), SIGKILL after 15 s.
stop_sandbox() {
  [ -n "$SANDBOX_PID" ] || return 0
  kill -TERM "$SANDBOX_PID" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$UNSHARE_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$UNSHARE_PID" 2>/dev/null; then
    echo "sandbox did not stop in 15 s: SIGKILL to its PID 1 ($SANDBOX_PID)" >&2
    kill -KILL "$SANDBOX_PID" 2>/dev/null || true
  fi
  wait "$UNSHARE_PID" 2>/dev/null || true
  SANDBOX_PID=''
}

stop_registry() {
  [ -n "$REGISTRY_PID" ] || return 0
  kill "$REGISTRY_PID" 2>/dev/null || true
  wait "$REGISTRY_PID" 2>/dev/null || true
  REGISTRY_PID=''
}

cleanup() {
  local rc=$?
  stop_sandbox
  stop_registry
  ip link del "$HOST_VETH" 2>/dev/null || true
  if grep -q " $S/" /proc/self/mountinfo; then
    echo "not removing $S: still mounted" >&2
  else
    rm -rf "$S"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The test network and the registry port must be free (fail instead of stepping on something).
if ip -4 addr show | grep -q "inet $NET\." || [ -n "$(ip -4 route show "$NET.0/30")" ]; then
  echo "$NET.0/30 is in use on this host (set KV_GUEST_CHECK_NET)" >&2; exit 1
fi
! ip link show "$HOST_VETH" >/dev/null 2>&1 || { echo "$HOST_VETH exists already (a crashed earlier run?)" >&2; exit 1; }
! curl -s -o /dev/null "http://$REGISTRY/v2/" || { echo "$REGISTRY is in use (set KV_GUEST_CHECK_REGISTRY_PORT)" >&2; exit 1; }

# --- 1. the images' inputs (cached)
t=$(now)
GUEST=$("$HERE/build.sh")
log "guest: $GUEST ($(sed -n 's/^kernel //p' "$GUEST/manifest"); $(since "$t") s)"
t=$(now)
ROOTFS_TAR=$("$REPO/deploy/launcher/build-rootfs.sh")
ROOTFS_HASH=$(basename "$ROOTFS_TAR" .tar.zst)
log "launcher rootfs: $ROOTFS_TAR ($(since "$t") s)"

# --- 2. containerDisk through a real registry
mkdir -p "$S/registry"
cat >"$S/registry.yml" <<EOF
version: 0.1
log: {level: error}
storage: {filesystem: {rootdirectory: $S/registry}}
http: {addr: $REGISTRY}
EOF
setpriv --pdeathsig KILL docker-registry serve "$S/registry.yml" >"$S/registry.log" 2>&1 &
REGISTRY_PID=$!
for _ in $(seq 1 100); do curl -fsS -o /dev/null "http://$REGISTRY/v2/" 2>/dev/null && break; sleep 0.1; done
curl -fsS -o /dev/null "http://$REGISTRY/v2/" || fail "docker-registry did not come up on $REGISTRY"
t=$(now)
CD_REF=$("$HERE/push-containerdisk.sh" "$REGISTRY/kubevirt-rs/guest-containerdisk:check")
[ "$CD_REF" = "$REGISTRY/kubevirt-rs/guest-containerdisk:check" ] || fail "push-containerdisk.sh printed '$CD_REF'"
layers=$(skopeo inspect --tls-verify=false "docker://$CD_REF" | jq '.Layers | length')
[ "$layers" = 1 ] || fail "containerDisk image has $layers layers, want 1"
skopeo copy -q --src-tls-verify=false "docker://$CD_REF" "oci:$S/cd-oci:disk"
umoci unpack --image "$S/cd-oci:disk" "$S/cd-bundle" >/dev/null
files=$(cd "$S/cd-bundle/rootfs" && find . -mindepth 1 -printf '%P %U:%G %m\n' | sort | paste -sd';')
[ "$files" = "disk 107:107 755;disk/disk.qcow2 107:107 644" ] || fail "containerDisk rootfs is '$files'"
DISK=$S/cd-bundle/rootfs/disk/disk.qcow2
cmp -s "$DISK" "$GUEST/disk.qcow2" || fail "the pulled /disk/disk.qcow2 differs from $GUEST/disk.qcow2"
log "containerDisk $CD_REF: 1 layer, /disk/disk.qcow2 107:107, pushed and pulled back ($(since "$t") s)"

# --- 3. the launcher image through the same registry
t=$(now)
printf '#!/bin/sh\necho virt-launcher stub\n' >"$S/virt-launcher-stub"
chmod 755 "$S/virt-launcher-stub"
LI_REF=$("$REPO/deploy/launcher/build-image.sh" virt-launcher:check "$REGISTRY" "$S/virt-launcher-stub")
info=$(skopeo inspect --tls-verify=false "docker://$LI_REF")
[ "$(jq '.Layers | length' <<<"$info")" = 2 ] || fail "launcher image: $(jq -c .Layers <<<"$info"), want 2 layers"
[ "$(jq -r '.Labels["kubevirt-rs.launcher.rootfs"]' <<<"$info")" = "$ROOTFS_HASH" ] || fail "launcher image label"
top=$(jq -r '.Layers[1]' <<<"$info")
top_files=$(curl -fsS "http://$REGISTRY/v2/virt-launcher/blobs/$top" | tar -tzf - | paste -sd' ')
[ "$top_files" = "usr/ usr/local/ usr/local/bin/ usr/local/bin/virt-launcher-stub" ] ||
  fail "launcher image's top layer has '$top_files'"
log "launcher image $LI_REF: rootfs layer + /usr/local/bin/virt-launcher-stub ($(since "$t") s)"
stop_registry
kill -0 "$REGISTRY_PID" 2>/dev/null && fail "docker-registry still running"

# --- 4. the launcher pods
LOWER=$KV_CACHE/launcher-rootfs/$ROOTFS_HASH.d
if [ ! -f "$LOWER/.complete" ]; then
  t=$(now)
  rm -rf "$LOWER" && mkdir -p "$LOWER"
  tar --zstd -xpf "$ROOTFS_TAR" -C "$LOWER" --numeric-owner
  touch "$LOWER/.complete" # build-rootfs.sh prunes it with its tarball
  log "unpacked the rootfs to $LOWER ($(since "$t") s)"
fi

# wait_console PATTERN SECONDS: until a serial console line matches PATTERN (grep -E); prints that line.
wait_console() {
  local line
  for _ in $(seq 1 $(($2 * 20))); do
    line=$(grep -a -m1 -E "$1" "$SERIAL" 2>/dev/null || true)
    [ -n "$line" ] && { printf '%s\n' "$line" | tr -d '\r'; return 0; }
    sleep 0.05
  done
  return 1
}

SUMMARY=''
# pod_pass MODE: one launcher sandbox with libvirtd in MODE (system|session), the domain booted and checked,
# everything stopped and checked gone.
pod_pass() {
  local mode=$1 t ns_ids uri line page want got egress nat masq dnat state left id p n qemu zombies
  local t_create t_started t_marker t_ip t_http t_ud t_shut t_off
  P=$S/$mode
  SERIAL=$P/vol/private/$VMI_UID/virt-serial0-log
  mkdir -p "$P"
  log "=== pass $mode"
  t=$(now)
  # pdeathsig: if this script dies (even by SIGKILL), unshare gets SIGKILL, and --kill-child takes the sandbox's
  # PID 1 (and with it the whole PID namespace) along.
  setpriv --pdeathsig KILL unshare --mount --pid --net --uts --ipc --fork --kill-child -- \
    bash "$HERE/sandbox.sh" "$P" "$LOWER" "$DISK" "$POD_NAME" "$mode" >"$P/sandbox.log" 2>&1 &
  UNSHARE_PID=$!
  for _ in $(seq 1 100); do
    SANDBOX_PID=$(awk '{ print $1 }' "/proc/$UNSHARE_PID/task/$UNSHARE_PID/children" 2>/dev/null || true)
    [ -n "$SANDBOX_PID" ] && break
    sleep 0.05
  done
  [ -n "$SANDBOX_PID" ] || fail "unshare did not start the sandbox"
  ns_ids=$(for n in pid net mnt; do readlink "/proc/$SANDBOX_PID/ns/$n"; done | paste -sd' ')
  # The "CNI": a veth pair, the sandbox's end named eth0, the pod IP on it, the host as its gateway.
  ip link add "$HOST_VETH" type veth peer name eth0 netns "$SANDBOX_PID"
  ip addr add "$HOST_IP/30" dev "$HOST_VETH"
  ip link set "$HOST_VETH" up
  nsenter -t "$SANDBOX_PID" -n ip addr add "$POD_IP/30" dev eth0
  nsenter -t "$SANDBOX_PID" -n ip link set eth0 up
  nsenter -t "$SANDBOX_PID" -n ip route add default via "$HOST_IP"
  for _ in $(seq 1 300); do
    [ -f "$P/vol/private/ready" ] && break
    kill -0 "$UNSHARE_PID" 2>/dev/null || fail "the sandbox exited"
    sleep 0.05
  done
  [ -f "$P/vol/private/ready" ] || fail "libvirtd in the sandbox not ready after 15 s"
  log "sandbox up: pod IP $POD_IP, masquerade + libvirtd ($mode) ready ($(since "$t") s)"

  # as_launcher CMD...: CMD in the sandbox as the launcher runs: root (system) or uid 107 (session).
  as_launcher() {
    if [ "$mode" = system ]; then
      nsenter -t "$SANDBOX_PID" -m -u -i -n -p -r -w "$@"
    else
      nsenter -t "$SANDBOX_PID" -m -u -i -n -p -r -w setpriv --reuid 107 --regid 107 --clear-groups \
        --inh-caps=-all --bounding-set=-all --no-new-privs env HOME=/var/run/kubevirt-private "$@"
    fi
  }
  in_pod() { nsenter -t "$SANDBOX_PID" -m -u -i -n -p -r -w "$@"; }
  uri="qemu:///$mode?socket=/var/run/kubevirt-private/libvirt/libvirt-sock"
  virsh_pod() { as_launcher virsh -q -c "$uri" "$@"; }

  t=$(now)
  virsh_pod version >/dev/null || fail "virsh cannot reach the sandbox's libvirtd"
  log "first libvirt call (QEMU capability probe) $(since "$t") s"
  # The launcher's disk preparation: the containerDisk's overlay, the NoCloud ISO, the VMI's private directory.
  as_launcher env UID_DIR="/var/run/kubevirt-private/$VMI_UID" USER_DATA="$USER_DATA" bash -euc '
    own() { [ "$(id -u)" != 0 ] || chown 107:107 "$@"; }
    d=/var/run/kubevirt-ephemeral-disks/disk-data/containerdisk
    ci=/var/run/kubevirt-ephemeral-disks/cloud-init-data/default/testvmi
    mkdir -p "$UID_DIR" "$d" "$ci"
    own "$UID_DIR" "$d" "$ci"
    qemu-img create -q -f qcow2 -F qcow2 -b /var/run/kubevirt/container-disks/disk_0.img "$d/disk.qcow2"
    printf "%s" "$USER_DATA" >"$ci/user-data"
    printf "instance-id: testvmi.default\nlocal-hostname: testvmi\n" >"$ci/meta-data"
    xorrisofs -quiet -output "$ci/noCloud.iso" -volid cidata -joliet -rock -partition_cyl_align on \
      "$ci/user-data" "$ci/meta-data" 2>/dev/null
    own "$d/disk.qcow2" "$ci/noCloud.iso"
  ' || fail "preparing the overlay and the NoCloud ISO failed"
  virsh_pod define /opt/kubevirt-rs/launcher/domain-reference.xml >/dev/null || fail "virsh define failed"
  t_create=$(now)
  virsh_pod start "$DOMAIN" >/dev/null || fail "virsh start failed"
  t_started=$(since "$t_create")
  log "virsh start $DOMAIN: $t_started s"
  qemu=$(in_pod ps -C qemu-system-x86_64 -o user=,rss=,args= | awk '{ print $1 " " int($2 / 1024) " MiB RSS" }')
  [ "${qemu%% *}" = qemu ] || fail "QEMU does not run as user qemu (107): '$qemu'"
  if [ "$mode" = session ]; then
    line=$(in_pod ps -C libvirtd -o user= | paste -sd' ')
    [ "$line" = qemu ] || fail "libvirtd runs as '$line', want qemu"
    for p in $(in_pod ps -C libvirtd,qemu-system-x86_64 -o pid=); do
      line=$(in_pod awk '/^CapEff/ { print $2 }' "/proc/$p/status")
      [ "$line" = 0000000000000000 ] || fail "process $p in the session pod has capabilities $line"
    done
  fi
  zombies=$(in_pod ps -eo stat=,pid=,comm= | awk '$1 ~ /^Z/' | paste -sd' ')
  [ -z "$zombies" ] || fail "zombies in the sandbox (its PID 1 must reap): $zombies"
  log "QEMU runs as $qemu$([ "$mode" = system ] || echo ", libvirtd as qemu, no capabilities"); no zombies"

  line=$(wait_console '^KUBEVIRT-RS-GUEST-UP ' 60) || fail "no KUBEVIRT-RS-GUEST-UP on the console within 60 s"
  t_marker=$(since "$t_create")
  log "console: $line — $t_marker s after virsh start"
  line=$(wait_console '^KUBEVIRT-RS-GUEST-MODULES ' 10) || fail "the guest did not report its modules"
  case "$line" in *" failed=") ;; *) fail "the guest could not load all its drivers: $line" ;; esac
  line=$(wait_console '^KUBEVIRT-RS-GUEST-IP ' 30) || fail "the guest got no DHCP lease within 30 s"
  t_ip=$(since "$t_create")
  case "$line" in *" 10.0.2.2/24 router=10.0.2.1") ;; *) fail "unexpected lease: $line" ;; esac
  log "console: $line — $t_ip s"

  # HTTP from the host, through the pod IP and the DNAT.
  page=''
  for _ in $(seq 1 100); do
    page=$(curl -fsS -m 3 "http://$POD_IP/" 2>/dev/null) && break
    sleep 0.1
  done
  [ -n "$page" ] || fail "curl http://$POD_IP/ from the host got no answer"
  t_http=$(since "$t_create")
  for want in KUBEVIRT-RS-GUEST-UP addresses=10.0.2.2/24 "client=$HOST_IP"; do
    grep -qx -- "$want" <<<"$page" || fail "the guest's page lacks '$want': $(paste -sd' ' <<<"$page")"
  done
  log "curl http://$POD_IP/ → $(paste -sd' ' <<<"$page") — $t_http s"

  # cloud-init NoCloud: the user-data on the console, the meta-data's hostname on the page.
  wait_console '^KUBEVIRT-RS-USERDATA-(END|NONE)' 30 >/dev/null || fail "the guest printed no user-data within 30 s"
  t_ud=$(since "$t_create")
  got=$(tr -d '\r' <"$SERIAL" | sed -n '/^KUBEVIRT-RS-USERDATA-BEGIN /,/^KUBEVIRT-RS-USERDATA-END$/p' | sed '1d;$d')
  [ "$got" = "$USER_DATA" ] || fail "user-data on the console is '$got', want '$USER_DATA'"
  log "console: $(grep -a -m1 '^KUBEVIRT-RS-USERDATA-BEGIN' "$SERIAL" | tr -d '\r') … -END: the ISO's user-data — $t_ud s"
  page=$(curl -fsS -m 5 "http://$POD_IP/?ping=$HOST_IP") || fail "second curl http://$POD_IP/ failed"
  grep -qx hostname=testvmi <<<"$page" || fail "the guest's page lacks hostname=testvmi: $(paste -sd' ' <<<"$page")"
  egress=$(grep '^ping=' <<<"$page" || true)
  [ "$egress" = "ping=ok $HOST_IP" ] || fail "the guest cannot reach $HOST_IP through the NAT: '$egress'"
  nat=$(in_pod nft list table ip kubevirt_nat)
  masq=$(awk '/ip saddr 10.0.2.2 counter packets/ { print $6 }' <<<"$nat")
  dnat=$(awk '/tcp dport 80 counter packets/ && /dnat to 10.0.2.2/ { print $6; exit }' <<<"$nat")
  [ "${masq:-0}" -gt 0 ] && [ "${dnat:-0}" -gt 0 ] || fail "NAT counters: masquerade ${masq:-?}, dnat ${dnat:-?}"
  log "page: hostname=testvmi; guest → host ping through the NAT ok (masquerade $masq, DNAT $dnat packets)"

  # ACPI shutdown.
  t_shut=$(now)
  virsh_pod shutdown "$DOMAIN" >/dev/null || fail "virsh shutdown failed"
  state=''
  for _ in $(seq 1 150); do
    state=$(virsh_pod domstate --reason "$DOMAIN" 2>/dev/null || true)
    case "$state" in "shut off"*) break ;; esac
    sleep 0.1
  done
  t_off=$(since "$t_shut")
  [ "$state" = "shut off (shutdown)" ] || fail "15 s after virsh shutdown the domain is '$state'"
  line=$(wait_console '^KUBEVIRT-RS-GUEST-POWEROFF' 1) || fail "no KUBEVIRT-RS-GUEST-POWEROFF on the console"
  log "virsh shutdown → $state in $t_off s; console: $line"
  virsh_pod undefine "$DOMAIN" >/dev/null
  [ -z "$(virsh_pod list --all --name | tr -d '[:space:]')" ] || fail "libvirt still lists domains after undefine"
  echo "--- serial console ($mode)"
  tr -d '\r' <"$SERIAL" | sed -n '/KUBEVIRT-RS-GUEST-UP/,$p' | sed 's/^/    /'

  # Stop the pod; nothing of it may remain.
  t=$(now)
  stop_sandbox
  left=''
  for p in /proc/[0-9]*; do
    for n in pid net mnt; do
      id=$(readlink "$p/ns/$n" 2>/dev/null || true)
      [ -n "$id" ] && [[ " $ns_ids " == *" $id "* ]] && left="$left ${p#/proc/}($n)"
    done
  done
  [ -z "$left" ] || fail "processes left in the sandbox's namespaces:$left"
  ! grep -q " $S/" /proc/self/mountinfo || fail "host mounts left under $S"
  ! ip link show "$HOST_VETH" >/dev/null 2>&1 || fail "$HOST_VETH still exists"
  log "stopped: no process in the sandbox's pid/net/mnt namespaces, no mounts, no veth ($(since "$t") s)"
  SUMMARY="$SUMMARY
  $mode: virsh start $t_started s, console marker $t_marker s, DHCP $t_ip s, HTTP $t_http s, user-data $t_ud s after start; ACPI shutdown $t_off s"
}

for mode in $MODES; do pod_pass "$mode"; done
P=''
log "OK (total $(since "$T0") s)$SUMMARY"
