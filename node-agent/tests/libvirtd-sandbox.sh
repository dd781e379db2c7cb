#!/bin/bash
# node-agent/tests/libvirtd-sandbox.sh DIR CACHE — a private libvirtd for node-agent's real-libvirt test
# (tests/libvirt.rs), never the host's default one. Run by the test as PID 1 of fresh namespaces:
#
#   unshare --mount --pid --net --uts --fork --kill-child --mount-proc bash libvirtd-sandbox.sh DIR CACHE
#
# so that everything it starts (libvirtd, its QEMU capability probes, the domains' QEMU processes) dies with it
# when the test ends or panics (the kernel kills a PID namespace with its PID 1; --kill-child kills PID 1 when
# unshare dies), and nothing it mounts outlives the mount namespace.
#
#   /etc /var /run   overlays over the host's directories, upper layers in DIR/ovl: libvirt's configuration
#                    (below), /var/lib/libvirt, /var/log/libvirt (QEMU's log: DIR/ovl/var.upper/log/libvirt/qemu/)
#                    and /run/libvirt start empty and are gone with DIR; the host's files are never written
#   /var/cache/libvirt   CACHE (persistent, outside the sandbox): QEMU's capability cache, so only the first run
#                    pays the ~12 s probe
#   network          a private network namespace: lo, and tap0 (contracts' POD_TAP) for the domain's
#                    `<interface type='ethernet'>`, as the launcher's network setup makes it in a pod
#   libvirtd.conf    unix_sock_dir = DIR/sock (the test connects to qemu:///system?socket=DIR/sock/libvirt-sock),
#                    no auth, log to DIR/libvirtd.log
#   qemu.conf        the launcher image's settings (deploy/launcher/qemu.conf: no dynamic ownership, no security
#                    driver, no namespaces, no cgroups, no virtlogd) except that QEMU runs as root: on this host
#                    /dev/kvm is root-only, and a QEMU user that cannot open it makes libvirt re-probe QEMU on every
#                    call (../shared/infra/real-components.md §3.4); domains are type='qemu' (TCG) anyway
#   passwd/group     libvirt-qemu (and kvm) added in the overlay: libvirtd refuses to start without that user
#                    even when QEMU runs as root (real-components.md §12)
#
# Writes DIR/ready once libvirt-sock exists. PID 1 is this bash, which reaps every orphan (libvirtd's capability
# probes daemonize; an unreaped probe stalls libvirtd for 40 s, see tests/guest/pod-init.sh).
set -euo pipefail
D=$1 CACHE=$2
log() { printf '[libvirtd-sandbox %s] %s\n' "$(date +%T.%3N)" "$*"; }

mount --make-rprivate /
# This network namespace's devices (and no host cgroup mounts below it, so libvirt leaves cgroups alone).
mount -t sysfs sysfs /sys
mkdir -p "$D/ovl" "$D/sock" "$CACHE"
for d in etc var run; do
  mkdir -p "$D/ovl/$d.upper" "$D/ovl/$d.work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$D/ovl/$d.upper,workdir=$D/ovl/$d.work" "/$d"
done
mkdir -p /etc/libvirt /var/lib/libvirt/qemu /var/log/libvirt/qemu /var/cache/libvirt /run/libvirt
mount --bind "$CACHE" /var/cache/libvirt

getent group kvm >/dev/null || echo 'kvm:x:36:' >>/etc/group
getent group libvirt-qemu >/dev/null || echo 'libvirt-qemu:x:64055:' >>/etc/group
getent passwd libvirt-qemu >/dev/null ||
  echo 'libvirt-qemu:x:64055:36:libvirt QEMU:/var/lib/libvirt:/usr/sbin/nologin' >>/etc/passwd
# The hostname resolves locally (libvirt looks it up on every domain start; with no reachable nameserver in this
# network namespace a DNS lookup would take 10 s).
hostname node-agent-test
printf '127.0.0.1 localhost node-agent-test\n::1 localhost\n' >/etc/hosts
: >/etc/resolv.conf

cat >/etc/libvirt/libvirtd.conf <<EOF
unix_sock_dir = "$D/sock"
auth_unix_ro = "none"
auth_unix_rw = "none"
unix_sock_rw_perms = "0700"
log_outputs = "3:file:$D/libvirtd.log"
host_uuid = "$(cat /proc/sys/kernel/random/uuid)"
EOF
cat >/etc/libvirt/qemu.conf <<'EOF'
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
stdio_handler = "file"
EOF

ip link set lo up
ip tuntap add dev tap0 mode tap
ip link set tap0 up

libvirtd -f /etc/libvirt/libvirtd.conf &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM INT
for _ in $(seq 1 200); do
  [ -S "$D/sock/libvirt-sock" ] && break
  kill -0 "$pid" 2>/dev/null || { log "libvirtd exited"; exit 1; }
  sleep 0.05
done
[ -S "$D/sock/libvirt-sock" ] || { log "no $D/sock/libvirt-sock after 10 s"; exit 1; }
log "libvirtd $(libvirtd --version | awk '{ print $NF }') running (pid $pid), QEMU $(qemu-system-x86_64 --version | awk 'NR == 1 { print $4 }')"
touch "$D/ready"
# `wait` returns early on a trapped signal; loop until libvirtd is gone.
while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
log "libvirtd exited"
