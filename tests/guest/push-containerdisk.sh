#!/usr/bin/env bash
# tests/guest/push-containerdisk.sh — the test guest as a containerDisk image (../shared/specs/kubevirt.md §6).
#
#   tests/guest/push-containerdisk.sh REGISTRY[/REPO[:TAG]]   push it (plain HTTP registry), print the reference
#   tests/guest/push-containerdisk.sh --layout                 only build the OCI layout, print `DIR:TAG`
#
# The image is upstream's containerDisk layout, `FROM scratch` + `ADD --chown=107:107 disk.qcow2 /disk/`: one layer
# holding /disk/ and /disk/disk.qcow2 (tests/guest/build.sh's disk.qcow2, uncompressed qcow2), both owned 107:107,
# nothing else; no entrypoint. REPO:TAG defaults to kubevirt-rs/guest-containerdisk:latest (a TAG alone is not
# accepted: give REPO:TAG). The OCI layout is built with umoci (no docker daemon) once per guest build, in
# <guest dir>/containerdisk-oci (layout tag `guest`); skopeo pushes it with --dest-tls-verify=false (the test
# cluster's registry is plain HTTP on 127.0.0.1).
#
# Needs: root (the layer's 107:107 owners come from a chown in the unpacked bundle), umoci, skopeo (installed with
# apt when missing), and tests/guest/build.sh's prerequisites.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEFAULT_REPO=kubevirt-rs/guest-containerdisk:latest
log() { printf '[containerdisk %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[containerdisk %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 REGISTRY[/REPO[:TAG]] | --layout"
[ "$(id -u)" = 0 ] || die "needs root (chown 107:107 in the image's bundle)"
. "$HERE/../../scripts/apt-ensure.sh"
apt_ensure umoci skopeo >&2

guest=$("$HERE/build.sh")
layout=$guest/containerdisk-oci
if [ ! -f "$layout/.complete" ]; then
  exec 9>"$guest/.containerdisk.lock"
  flock 9
  if [ ! -f "$layout/.complete" ]; then
    log "building the containerDisk OCI layout in $layout"
    rm -rf "$layout" "$layout.tmp"
    w=$layout.tmp
    umoci init --layout "$w" >/dev/null
    umoci new --image "$w:guest" >/dev/null
    umoci unpack --image "$w:guest" "$w.bundle" >/dev/null
    mkdir -p "$w.bundle/rootfs/disk"
    cp "$guest/disk.qcow2" "$w.bundle/rootfs/disk/disk.qcow2"
    chmod 0755 "$w.bundle/rootfs/disk"
    chmod 0644 "$w.bundle/rootfs/disk/disk.qcow2"
    chown -R 107:107 "$w.bundle/rootfs/disk"
    umoci repack --image "$w:guest" "$w.bundle" >/dev/null
    umoci config --image "$w:guest" --author kubevirt-rs --config.label kubevirt-rs.guest.recipe="$(basename "$guest")" \
      >/dev/null
    rm -rf "$w.bundle"
    umoci gc --layout "$w"
    touch "$w/.complete"
    mv "$w" "$layout"
  fi
  exec 9>&-
fi

if [ "$1" = --layout ]; then echo "$layout:guest"; exit 0; fi

dest=$1
registry=${dest%%/*}
repo=$DEFAULT_REPO
[ "$registry" = "$dest" ] || repo=${dest#*/}
case "$repo" in *:*) ;; *) repo=$repo:latest ;; esac
skopeo copy -q --dest-tls-verify=false "oci:$layout:guest" "docker://$registry/$repo" >&2 ||
  die "skopeo copy to docker://$registry/$repo failed"
log "pushed $registry/$repo"
echo "$registry/$repo"
