# Container images for the test node, built without a docker daemon (umoci + skopeo) and pushed to the local
# registry. Sourced by node.sh. The layouts are cached under $KV_CACHE/images (rebuilt when the recipe changes).
REGISTRY=127.0.0.1:${KV_REGISTRY_PORT:-35000}
IMAGE_PREFIX=$REGISTRY/kubevirt-rs
# Bump when an image recipe below changes.
IMAGES_REV=1

start_registry() {
  mkdir -p "$T/registry"
  cat >"$T/registry.yml" <<YML
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $T/registry}, delete: {enabled: true}}
http: {addr: $REGISTRY}
YML
  start_bg registry "$(command -v docker-registry)" serve "$T/registry.yml"
  wait_for registry 20 curl -fsS "http://$REGISTRY/v2/"
}

# build_busybox_layout DIR: OCI layout with one image `busybox`: /bin/busybox + applet links, cmd /bin/sh.
build_busybox_layout() {
  local d=$1 b
  rm -rf "$d"; mkdir -p "$d"
  umoci init --layout "$d/oci" >/dev/null
  umoci new --image "$d/oci:busybox" >/dev/null
  umoci unpack --rootless --image "$d/oci:busybox" "$d/bundle" >/dev/null
  mkdir -p "$d/bundle/rootfs/bin" "$d/bundle/rootfs/tmp" "$d/bundle/rootfs/etc"
  cp /usr/bin/busybox "$d/bundle/rootfs/bin/busybox"
  for b in $(/usr/bin/busybox --list); do [ "$b" = busybox ] || ln -sf busybox "$d/bundle/rootfs/bin/$b"; done
  echo 'root:x:0:0:root:/:/bin/sh' >"$d/bundle/rootfs/etc/passwd"
  echo 'root:x:0:' >"$d/bundle/rootfs/etc/group"
  umoci repack --image "$d/oci:busybox" "$d/bundle" >/dev/null
  umoci config --image "$d/oci:busybox" --config.cmd /bin/sh --config.env PATH=/bin >/dev/null
  # pause: the sandbox image; exits on TERM/INT like the real pause binary.
  umoci config --image "$d/oci:busybox" --tag pause --config.cmd /bin/sh --config.cmd -c \
    --config.cmd 'trap "exit 0" TERM INT; while :; do sleep 3600 & wait $!; done' >/dev/null
  rm -rf "$d/bundle"
}

push_images() {
  local d=$KV_CACHE/images/rev$IMAGES_REV
  if [ ! -f "$d/.complete" ]; then
    log "building images (umoci)"
    build_busybox_layout "$d"
    touch "$d/.complete"
  fi
  skopeo copy -q --dest-tls-verify=false "oci:$d/oci:busybox" "docker://$IMAGE_PREFIX/busybox:1"
  skopeo copy -q --dest-tls-verify=false "oci:$d/oci:pause" "docker://$IMAGE_PREFIX/pause:1"
  log "images pushed to $IMAGE_PREFIX"
}
