#!/usr/bin/env bash
# deploy/launcher/build-image.sh — the virt-launcher OCI image: the launcher rootfs plus our binaries.
#
#   deploy/launcher/build-image.sh NAME:TAG REGISTRY BINARY...
#
# REGISTRY is `HOST:PORT` (pushed as HOST:PORT/NAME:TAG over plain HTTP, as the test cluster's registry) or
# `oci:DIR` (written into the OCI layout DIR as tag TAG, nothing pushed). Prints the image reference.
#
# Layers (no docker daemon; umoci + skopeo, as tests/cluster/image-from-binaries):
#   1. the rootfs of deploy/launcher/build-rootfs.sh, verbatim (`umoci raw add-layer` of its tarball). Its OCI
#      layout is cached as ~/.cache/kubevirt-rs/launcher-rootfs/<hash>.oci, so the layer's digest only changes
#      with the recipe and pushes of later builds skip it
#   2. each BINARY as /usr/local/bin/<basename> (0755 root:root, debug info stripped), built fresh every time
# Config: PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, no entrypoint and no user (the pod
# spec gives `command:` and the security context), label kubevirt-rs.launcher.rootfs=<hash>.
# BINARY may be dynamically linked only against libraries the rootfs has (Debian 12's): each ELF binary's NEEDED
# entries are checked against the tarball's file list, and a missing one is an error.
#
# Needs: root only through build-rootfs.sh (a cold rootfs), umoci, skopeo, zstd, binutils (readelf, strip).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf '[launcher-image %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[launcher-image %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }

[ $# -ge 3 ] || die "usage: $0 NAME:TAG REGISTRY|oci:DIR BINARY..."
ref=$1 dest=$2; shift 2
name=${ref%%:*} tag=${ref#*:}
[ "$name" != "$ref" ] && [ -n "$tag" ] && [ -n "$name" ] || die "NAME:TAG expected, got '$ref'"
. "$HERE/../../scripts/apt-ensure.sh"
apt_ensure umoci skopeo zstd binutils >&2

rootfs=$("$HERE/build-rootfs.sh")
hash=$(basename "$rootfs" .tar.zst)
base=${rootfs%.tar.zst}.oci
list=${rootfs%.tar.zst}.list

# --- the cached base layout (one layer: the rootfs tarball as is)
if [ ! -f "$base/.complete" ]; then
  exec 9>"$(dirname "$rootfs")/.image.lock"
  flock 9
  if [ ! -f "$base/.complete" ]; then
    log "building the base layout $base"
    rm -rf "$base" "$base.tmp"
    umoci init --layout "$base.tmp" >/dev/null
    umoci new --image "$base.tmp:base" >/dev/null
    zstd -q -d -c "$rootfs" >"$base.tmp.tar"
    tar -tf "$base.tmp.tar" | sed 's|^\./||' >"$list.tmp"
    umoci raw add-layer --image "$base.tmp:base" --history.created_by "deploy/launcher/build-rootfs.sh ($hash)" \
      "$base.tmp.tar"
    rm -f "$base.tmp.tar"
    umoci config --image "$base.tmp:base" --author kubevirt-rs \
      --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --config.label kubevirt-rs.launcher.rootfs="$hash" >/dev/null
    touch "$base.tmp/.complete"
    mv "$list.tmp" "$list"
    mv "$base.tmp" "$base"
  fi
  exec 9>&-
fi

# --- the binaries layer on a copy of the base layout (blobs hard-linked: they are immutable)
w=$(mktemp -d "${TMPDIR:-/tmp}/kv-launcher-image.XXXXXX")
trap 'rm -rf "$w"' EXIT
mkdir -p "$w/oci" "$w/layer/usr/local/bin"
cp -al "$base/blobs" "$w/oci/blobs"
cp "$base/index.json" "$base/oci-layout" "$w/oci/"
names=()
for bin in "$@"; do
  [ -f "$bin" ] && [ -x "$bin" ] || die "$bin is not an executable file"
  b=$(basename "$bin")
  if readelf -h "$bin" >/dev/null 2>&1; then
    for lib in $(readelf -d "$bin" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'); do
      grep -q -E "(^|/)lib(64|/x86_64-linux-gnu)?/$lib\$|^usr/lib(64|/x86_64-linux-gnu)/$lib\$" "$list" ||
        die "$bin needs $lib, which the launcher rootfs does not have (add its package to build-rootfs.sh)"
    done
    strip --strip-debug -o "$w/layer/usr/local/bin/$b" "$bin"
  else
    cp "$bin" "$w/layer/usr/local/bin/$b"
  fi
  chmod 0755 "$w/layer/usr/local/bin/$b"
  names+=("$b")
done
chmod 0755 "$w/layer/usr" "$w/layer/usr/local" "$w/layer/usr/local/bin"
tar --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 -C "$w/layer" -cf "$w/bin.tar" usr
umoci raw add-layer --image "$w/oci:base" --tag img --history.created_by "build-image.sh: ${names[*]}" "$w/bin.tar"
umoci config --image "$w/oci:img" --config.label kubevirt-rs.launcher.binaries="${names[*]}" >/dev/null

case "$dest" in
  oci:*)
    out=${dest#oci:}
    skopeo copy -q "oci:$w/oci:img" "oci:$out:$tag" >&2 || die "skopeo copy to oci:$out:$tag failed"
    echo "oci:$out:$tag"
    ;;
  *)
    skopeo copy -q --dest-tls-verify=false "oci:$w/oci:img" "docker://$dest/$name:$tag" >&2 ||
      die "skopeo copy to docker://$dest/$name:$tag failed"
    echo "$dest/$name:$tag"
    ;;
esac
log "built $name:$tag (rootfs $hash + ${names[*]})"
