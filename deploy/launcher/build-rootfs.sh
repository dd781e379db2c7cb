#!/usr/bin/env bash
# deploy/launcher/build-rootfs.sh — the virt-launcher image's root filesystem (the launcher image's recipe).
#
#   deploy/launcher/build-rootfs.sh        builds it when missing, prints the tarball's path
#
# Produces ~/.cache/kubevirt-rs/launcher-rootfs/<hash>.tar.zst (KV_CACHE overrides ~/.cache/kubevirt-rs), a
# zstd-compressed tar (pax, numeric owners) of a Debian 12 (bookworm) `mmdebstrap --variant=minbase` with:
#   libvirt-daemon + libvirt-daemon-driver-qemu (the monolithic libvirtd: Debian 12 has no virtqemud),
#   libvirt-clients (virsh), qemu-system-x86 (no Recommends: no GUI, no OVMF, no block-extra), qemu-utils
#   (qemu-img: the containerDisk overlays), iproute2 + nftables (the masquerade binding, masquerade.sh),
#   busybox-static (udhcpd: the guest's DHCP server in the pod), procps, xorriso (xorrisofs: the cloud-init
#   NoCloud ISO, as upstream's launcher), usr-is-merged (usrmerge and perl are purged)
# and this directory's configuration copied in:
#   qemu.conf -> /etc/libvirt/qemu.conf        libvirtd.conf -> /etc/libvirt/libvirtd.conf
#   passwd, group -> appended to /etc/passwd, /etc/group (qemu 107:107, libvirt-qemu 64055 in group kvm)
#   hosts -> /etc/hosts                         resolv.conf (empty) -> /etc/resolv.conf
# <hash> covers this script and those files, so editing any of them builds a new tarball (the two newest recipes
# are kept, with what build-image.sh and tests/guest/check.sh derived from them: <hash>.oci, <hash>.list, <hash>.d). Docs, man pages and locales are left out. The tarball is the input of build-image.sh (the OCI image) and
# of tests/guest/check.sh (which boots the test guest under this rootfs's libvirtd and QEMU).
#
# Needs: root (mmdebstrap --mode=root: device nodes and file owners in the tree), Debian's package mirror
# (deb.debian.org, bookworm + bookworm-updates + bookworm-security), about 1 GiB in $TMPDIR while building.
# Installs mmdebstrap and zstd with apt when missing. Takes 1.5-2 min cold; prints the path at once when cached.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/$(basename "${BASH_SOURCE[0]}")
KV_CACHE=${KV_CACHE:-$HOME/.cache/kubevirt-rs}
CACHE=$KV_CACHE/launcher-rootfs
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
SECURITY=http://deb.debian.org/debian-security
PACKAGES=(
  libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients
  qemu-system-x86 qemu-utils
  iproute2 nftables busybox-static procps xorriso
  # init-system-helpers depends on `usrmerge | usr-is-merged`; the tree is merged already, and usrmerge pulls in
  # perl (~50 MB): usrmerge is purged again in customize.
  usr-is-merged
)
# The configuration files copied in (all in this directory; all part of the hash).
CONFIGS=(qemu.conf libvirtd.conf passwd group hosts resolv.conf)

log() { printf '[launcher-rootfs %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[launcher-rootfs %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }

# append_entries FILE ENTRIES: appends each line of ENTRIES (passwd/group format) to FILE unless an entry of that
# name exists; an existing entry with other fields is an error (the recipe must be fixed, not silently merged).
append_entries() {
  local file=$1 entries=$2 line name have
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    name=${line%%:*}
    have=$(grep "^$name:" "$file" || true)
    if [ -z "$have" ]; then
      printf '%s\n' "$line" >>"$file"
    elif [ "$have" != "$line" ]; then
      die "$(basename "$file") already has '$have', the recipe wants '$line' (edit deploy/launcher/$(basename "$entries"))"
    fi
  done <"$entries"
}

# customize ROOT: mmdebstrap's customize hook (runs as `build-rootfs.sh --customize ROOT`).
customize() {
  local root=$1
  # usr-is-merged is not enough: the essential phase already picked usrmerge (and perl) for init-system-helpers.
  # dpkg refuses to purge anything another installed package still depends on.
  chroot "$root" dpkg --purge usrmerge libfile-find-rule-perl libnumber-compare-perl libtext-glob-perl perl \
    perl-modules-5.36 libperl5.36 >/dev/null
  install -m 0644 "$HERE/qemu.conf" "$root/etc/libvirt/qemu.conf"
  install -m 0644 "$HERE/libvirtd.conf" "$root/etc/libvirt/libvirtd.conf"
  append_entries "$root/etc/group" "$HERE/group"
  append_entries "$root/etc/passwd" "$HERE/passwd"
  # Shadow entries, so that tools reading /etc/shadow (pwck, su) see consistent files; the accounts are locked.
  local u
  for u in $(cut -d: -f1 "$HERE/passwd"); do
    grep -q "^$u:" "$root/etc/shadow" || echo "$u:!:1::::::" >>"$root/etc/shadow"
  done
  for u in $(cut -d: -f1 "$HERE/group"); do
    grep -q "^$u:" "$root/etc/gshadow" || echo "$u:!::" >>"$root/etc/gshadow"
  done
  install -m 0644 "$HERE/hosts" "$root/etc/hosts"
  rm -f "$root/etc/resolv.conf" && install -m 0644 "$HERE/resolv.conf" "$root/etc/resolv.conf"
  printf 'virt-launcher\n' >"$root/etc/hostname"
  # QEMU (uid 107) writes its per-domain state below these; libvirtd (root) creates the rest itself.
  mkdir -p "$root/var/lib/libvirt/qemu" "$root/var/log/libvirt/qemu" "$root/var/cache/libvirt/qemu" \
    "$root/usr/local/bin"
  # Sanity: what the launcher runs must be there.
  local b
  for b in usr/sbin/libvirtd usr/bin/virsh usr/bin/qemu-system-x86_64 usr/bin/qemu-img usr/sbin/nft sbin/ip \
    bin/busybox usr/bin/xorrisofs; do
    [ -e "$root/$b" ] || [ -L "$root/$b" ] || die "/$b missing from the rootfs"
  done
}

if [ "${1:-}" = --customize ]; then customize "$2"; exit 0; fi
[ $# -eq 0 ] || die "usage: $0 (no arguments; prints the tarball's path)"

hash=$(
  {
    cat "$SELF"
    for f in "${CONFIGS[@]}"; do printf '\n--- %s\n' "$f"; cat "$HERE/$f"; done
  } | sha256sum | cut -c1-16
)
out=$CACHE/$hash.tar.zst
if [ -f "$out" ]; then echo "$out"; exit 0; fi

[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap --mode=root)"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$out" ]; then echo "$out"; exit 0; fi   # built by a concurrent run while we waited

. "$HERE/../../scripts/apt-ensure.sh"
apt_ensure mmdebstrap zstd >&2

log "building $out (mmdebstrap $SUITE minbase, ${#PACKAGES[@]} packages + dependencies)"
start=$(date +%s)
tmp=$CACHE/.$hash.tmp.tar.zst
rm -f "$tmp"
include=$(IFS=,; echo "${PACKAGES[*]}")
mmdebstrap --mode=root --variant=minbase --format=tar --include="$include" \
  --aptopt='Apt::Install-Recommends "false"' \
  --aptopt='Acquire::Languages "none"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  --customize-hook="\"$SELF\" --customize \"\$1\"" \
  "$SUITE" "$tmp" \
  "deb $MIRROR $SUITE main" "deb $MIRROR $SUITE-updates main" "deb $SECURITY $SUITE-security main" >&2 \
  2> >(grep -v -e '^I: ' >&2) || die "mmdebstrap failed"
mv "$tmp" "$out"
# Keep the two newest recipes (another checkout may still use the previous one), with what was derived from them
# (build-image.sh's <hash>.oci and .list, tests/guest/check.sh's unpacked <hash>.d).
for old in $(ls -t "$CACHE"/*.tar.zst | tail -n +3); do
  rm -rf "$old" "${old%.tar.zst}.oci" "${old%.tar.zst}.list" "${old%.tar.zst}.d"
done
log "built $out ($(du -h "$out" | cut -f1), $(($(date +%s) - start)) s)"
echo "$out"
