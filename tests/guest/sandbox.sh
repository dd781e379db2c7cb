#!/bin/bash
# tests/guest/sandbox.sh S LOWER DISK POD_NAME MODE — the "container runtime" of tests/guest/check.sh. Runs (with the
# host's tools) as PID 1 of fresh mount, PID, network, UTS and IPC namespaces made by check.sh's `unshare`, builds
# the launcher container's filesystem and execs tests/guest/pod-init.sh in it with the rootfs's bash:
#   /                 overlayfs: LOWER (the unpacked launcher rootfs, never written) + S/upper
#   /proc /sys        fresh (this PID namespace; this network namespace's devices; sysfs read-only, and without
#                     the host's cgroup mounts, so libvirt leaves cgroups alone)
#   /dev              tmpfs with null zero full random urandom tty net/tun, devpts, shm; no /dev/kvm (domains are
#                     type='qemu' anyway, and libvirt re-probes QEMU when it sees a /dev/kvm it cannot open)
#   /run /tmp         tmpfs
#   /var/run/kubevirt-private          S/vol/private (emptyDir; shared with the host: console log, libvirt socket)
#   /var/run/kubevirt-ephemeral-disks  S/vol/ephemeral (emptyDir on disk: overlays need O_DIRECT, tmpfs has none)
#                     (both mode 0777, as the kubelet makes emptyDirs)
#   /var/run/kubevirt/container-disks/disk_0.img   DISK, read-only (what the node agent bind-mounts)
#   /opt/kubevirt-rs/launcher, /opt/kubevirt-rs/test   deploy/launcher and tests/guest of this checkout, read-only
# MODE (system|session) is passed on to pod-init.sh.
# Everything mounted here lives only in this mount namespace: it is gone with the last process of the sandbox.
set -euo pipefail
S=$1 LOWER=$2 DISK=$3 POD_NAME=$4 MODE=$5
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
R=$S/root

mount --make-rprivate /
mkdir -p "$R" "$S/upper" "$S/work" "$S/vol/private" "$S/vol/ephemeral"
chmod 0777 "$S/vol/private" "$S/vol/ephemeral"
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$S/upper,workdir=$S/work" "$R"
mount -t proc proc "$R/proc"
mount -t sysfs -o ro sysfs "$R/sys"

mount -t tmpfs -o mode=755,size=8m,nosuid tmpfs "$R/dev"
for n in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
  IFS=: read -r name major minor <<<"$n"
  mknod -m 666 "$R/dev/$name" c "$major" "$minor"
done
mkdir -p "$R/dev/net" "$R/dev/pts" "$R/dev/shm"
mknod -m 666 "$R/dev/net/tun" c 10 200
mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
ln -s /proc/self/fd "$R/dev/fd"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/dev/shm"
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$R/tmp"

# Volumes (/var/run is /run in the rootfs).
mkdir -p "$R/run/kubevirt-private" "$R/run/kubevirt-ephemeral-disks" "$R/run/kubevirt/container-disks" \
  "$R/opt/kubevirt-rs/launcher" "$R/opt/kubevirt-rs/test"
mount --bind "$S/vol/private" "$R/run/kubevirt-private"
mount --bind "$S/vol/ephemeral" "$R/run/kubevirt-ephemeral-disks"
touch "$R/run/kubevirt/container-disks/disk_0.img"
mount --bind "$DISK" "$R/run/kubevirt/container-disks/disk_0.img"
mount -o remount,bind,ro "$R/run/kubevirt/container-disks/disk_0.img"
mount --bind "$HERE/../../deploy/launcher" "$R/opt/kubevirt-rs/launcher"
mount -o remount,bind,ro "$R/opt/kubevirt-rs/launcher"
mount --bind "$HERE" "$R/opt/kubevirt-rs/test"
mount -o remount,bind,ro "$R/opt/kubevirt-rs/test"

cd /
exec chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  /bin/bash /opt/kubevirt-rs/test/pod-init.sh "$POD_NAME" "$MODE"
