#!/bin/bash
# tests/guest/pod-init.sh POD_NAME system|session — PID 1 of tests/guest/check.sh's launcher sandbox, run by the
# launcher rootfs's bash inside it (tests/guest/sandbox.sh execs it). A stand-in for what our virt-launcher binary
# (and the node agent's network phase) will do in the `compute` container:
#   1. hostname (the pod name; the UTS namespace is the sandbox's own)
#   2. wait until the "CNI" (check.sh) has put eth0 with an IPv4 address into the namespace
#   3. deploy/launcher/masquerade.sh up --ports 80 (bridge, tap0 owned by 107, nftables, udhcpd) — as root: the
#      privileged network phase, which upstream runs in virt-handler
#   4. libvirtd with the image's /etc/libvirt/{libvirtd,qemu}.conf, unix_sock_dir replaced by
#      /var/run/kubevirt-private/libvirt (the directory check.sh shares with the host, as the node agent's
#      hostPath will be) and a host_uuid of its own:
#        system   libvirtd as root, `qemu:///system`; QEMU runs as qemu (107) by qemu.conf
#        session  libvirtd as uid/gid 107 with no capabilities at all (setpriv: empty bounding set, no_new_privs),
#                 `qemu:///session`, XDG_CONFIG_HOME = XDG_CACHE_HOME = /var/run/kubevirt-private (upstream's
#                 non-root launcher layout; it keeps the guest-agent socket path under 108 bytes); QEMU inherits
#                 uid 107 and no capabilities
#   5. /var/run/kubevirt-private/ready once libvirt-sock accepts connections; then wait
# PID 1 must reap: libvirtd's QEMU capability probes daemonize, their processes are re-parented to PID 1, and
# libvirtd waits 40 s per probe for a zombie that nobody reaps (seen with libvirtd itself as PID 1: the first
# `virsh` call took 80 s). bash reaps every child, so the real launcher (PID 1 of its container) must as well.
# SIGTERM stops libvirtd (QEMU is gone with the PID namespace once this process exits).
set -euo pipefail
pod_name=${1:?usage: pod-init.sh POD_NAME system|session}
mode=${2:?usage: pod-init.sh POD_NAME system|session}
private=/var/run/kubevirt-private
sock_dir=$private/libvirt
log() { printf '[pod-init %s] %s\n' "$(date +%T.%3N)" "$*"; }

libvirtd_pid=''
stop() {
  log "signal: stopping libvirtd"
  if [ -n "$libvirtd_pid" ]; then
    kill -TERM "$libvirtd_pid" 2>/dev/null || true
    wait "$libvirtd_pid" 2>/dev/null || true
  fi
  exit 0
}
trap stop TERM INT

hostname "$pod_name"
ip link set lo up
for _ in $(seq 1 200); do
  ip -4 -o addr show dev eth0 2>/dev/null | grep -q inet && break
  sleep 0.05
done
ip -4 -o addr show dev eth0 | grep -q inet || { log "eth0 never got an address"; exit 1; }

/opt/kubevirt-rs/launcher/masquerade.sh up --pod-if eth0 --ports 80 --mac 02:6b:76:72:73:01 --hostname testvmi

# write_conf DIR: DIR/libvirtd.conf (this pod's socket directory and host UUID) and DIR/qemu.conf.
write_conf() {
  sed "s|^unix_sock_dir = .*|unix_sock_dir = \"$sock_dir\"|" /etc/libvirt/libvirtd.conf >"$1/libvirtd.conf"
  grep -q "^unix_sock_dir = \"$sock_dir\"" "$1/libvirtd.conf" || { log "libvirtd.conf: no unix_sock_dir line"; exit 1; }
  echo "host_uuid = \"$(cat /proc/sys/kernel/random/uuid)\"" >>"$1/libvirtd.conf"
  cp /etc/libvirt/qemu.conf "$1/qemu.conf"
}

case "$mode" in
  system)
    mkdir -p "$sock_dir" /run/kubevirt-rs
    write_conf /run/kubevirt-rs
    libvirtd -f /run/kubevirt-rs/libvirtd.conf &
    libvirtd_pid=$!
    ;;
  session)
    # The launcher's own directories belong to 107 (in a pod: the emptyDirs' fsGroup, or the image).
    install -d -o 107 -g 107 "$private" "$sock_dir" /run/kubevirt-rs/xdg-runtime
    write_conf "$sock_dir"
    chown 107:107 "$sock_dir/libvirtd.conf" "$sock_dir/qemu.conf"
    setpriv --reuid 107 --regid 107 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs \
      env XDG_CONFIG_HOME="$private" XDG_CACHE_HOME="$private" XDG_RUNTIME_DIR=/run/kubevirt-rs/xdg-runtime \
      HOME="$private" libvirtd -f "$sock_dir/libvirtd.conf" &
    libvirtd_pid=$!
    ;;
  *) log "unknown mode $mode"; exit 1 ;;
esac
for _ in $(seq 1 200); do
  [ -S "$sock_dir/libvirt-sock" ] && break
  kill -0 "$libvirtd_pid" 2>/dev/null || { log "libvirtd exited"; exit 1; }
  sleep 0.05
done
[ -S "$sock_dir/libvirt-sock" ] || { log "no $sock_dir/libvirt-sock after 10 s"; exit 1; }
log "libvirtd ($mode) running (pid $libvirtd_pid), socket $sock_dir/libvirt-sock"
touch "$private/ready"

# `wait` returns early on a trapped signal (the trap then runs); loop until libvirtd is really gone.
while kill -0 "$libvirtd_pid" 2>/dev/null; do wait "$libvirtd_pid" || true; done
log "libvirtd exited on its own"
exit 1
