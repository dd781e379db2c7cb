#!/usr/bin/env bash
# OCI registries and containerDisk test images for tests/import_registry.rs.
#
#   tests/infra/registry-env.sh up       start a plain registry (127.0.0.1:19500) and a TLS + htpasswd registry
#                                        (127.0.0.1:19501), build the test images as OCI layouts (no docker daemon:
#                                        tar + gzip/zstd + jq), push them with skopeo, write tests/work/registry-env
#   tests/infra/registry-env.sh down     stop both registries (by pid file), remove tests/work/registry-env
#   tests/infra/registry-env.sh status
#
# Needs the corpus of `tests/infra/import-env.sh up` (tests/work/corpus: base.raw, small.raw, q2-v3.qcow2,
# base.raw.gz). Installs docker-registry, skopeo, jq, apache2-utils (htpasswd) with apt-get when missing.
# Everything lives in tests/work/registry (git-ignored). Images are rebuilt and pushed only when this script or the
# corpus manifest changed, or the registry storage is gone. Ports: REGISTRY_ENV_PORT_BASE (default 19500) and +1.
#
# Images (repository test/<name>, tag v1, on the plain registry; `raw` and `qcow2` also on the TLS one):
#   raw        gzip layer, disk/disk.img = base.raw            qcow2     gzip layer, disk/disk.img = q2-v3.qcow2
#   zstd       zstd layer (tar+zstd), base.raw                  plain     uncompressed layer (.tar), base.raw
#   diskgz     uncompressed layer, disk/disk.img.gz = base.raw.gz
#   v2s2       raw, pushed as a Docker v2 schema 2 manifest (rootfs.diff.tar.gzip)
#   multi      OCI index: linux/amd64 -> base.raw, linux/arm64 -> small.raw
#   env        raw + Env INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small
#   malformed  a gzip layer with corrupted deflate data (the digest matches the corrupted bytes)
#   whiteout   layer 1 disk/old.img (small.raw); layer 2 disk/.wh.old.img + disk/new.img (base.raw)
#   twofiles   one layer with disk/a.img and disk/b.img      twoqcow2  the same with two qcow2 files
#   nodisk     one layer without disk/ (etc/hostname)      bootc     raw + label containers.bootc=1
#   layered    layer 1 disk/disk.img (base.raw); layer 2 only etc/hostname (disk below an unrelated layer)
# shellcheck source=tests/infra/common.sh
. "$(dirname "$0")/common.sh"
R=$WORK/registry
ENVFILE=$WORK/registry-env
BASE_PORT=${REGISTRY_ENV_PORT_BASE:-19500}
P_PLAIN=$BASE_PORT
P_TLS=$((BASE_PORT + 1))
USER_NAME=importer
USER_PASSWORD=reg-Pa55word

need_tools() {
  local missing=()
  command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
  command -v skopeo >/dev/null 2>&1 || missing+=(skopeo)
  command -v jq >/dev/null 2>&1 || missing+=(jq)
  command -v htpasswd >/dev/null 2>&1 || missing+=(apache2-utils)
  command -v zstd >/dev/null 2>&1 || missing+=(zstd)
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# ---------------------------------------------------------------------------------------------------------------
# registries
# ---------------------------------------------------------------------------------------------------------------
pid_of() { pidfile_pid "$R/$1.pid"; }
running() { pidfile_alive "$R/$1.pid"; }

tls_material() {
  local d=$R/tls
  rm -f "$d/ca/ca.srl"   # left there by an earlier version of this script; the CA dir must hold PEM files only
  [ -f "$d/server.crt" ] && [ -f "$d/ca/ca.crt" ] && [ -f "$R/htpasswd" ] && return 0
  rm -rf "$d"; mkdir -p "$d/ca" "$d/other-ca" "$d/skopeo-certs"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca/ca.crt" -days 3650 \
    -subj "/CN=registry-env test CA" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout "$d/server.key" -out "$d/server.csr" -subj "/CN=127.0.0.1" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' \
    > "$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca/ca.crt" -CAkey "$d/ca.key" -CAserial "$d/ca.srl" -CAcreateserial \
    -out "$d/server.crt" -days 3650 -extfile "$d/server.ext" 2>/dev/null
  # a CA that did not sign the server certificate (negative test)
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/other.key" -out "$d/other-ca/ca.crt" -days 3650 \
    -subj "/CN=registry-env other CA" 2>/dev/null
  cp "$d/ca/ca.crt" "$d/skopeo-certs/ca.crt"
  htpasswd -Bbn "$USER_NAME" "$USER_PASSWORD" > "$R/htpasswd"
}

start_registries() {
  mkdir -p "$R/data-plain" "$R/data-tls"
  cat > "$R/plain.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $R/data-plain}, delete: {enabled: true}}
http: {addr: 127.0.0.1:$P_PLAIN}
EOF
  cat > "$R/tls.yml" <<EOF
version: 0.1
log: {level: warn}
storage: {filesystem: {rootdirectory: $R/data-tls}, delete: {enabled: true}}
http:
  addr: 127.0.0.1:$P_TLS
  tls: {certificate: $R/tls/server.crt, key: $R/tls/server.key}
auth:
  htpasswd: {realm: registry-env, path: $R/htpasswd}
EOF
  local name
  for name in plain tls; do
    if running "$name"; then continue; fi
    setsid docker-registry serve "$R/$name.yml" >"$R/$name.log" 2>&1 < /dev/null &
    echo $! > "$R/$name.pid"
  done
  local i
  for i in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$P_PLAIN/v2/" >/dev/null 2>&1 &&
      [ "$(curl -s -o /dev/null -w '%{http_code}' --cacert "$R/tls/ca/ca.crt" "https://127.0.0.1:$P_TLS/v2/")" = 401 ]; then
      log "registries up: http://127.0.0.1:$P_PLAIN (pid $(pid_of plain)), https://127.0.0.1:$P_TLS (pid $(pid_of tls))"
      return 0
    fi
    sleep 0.1
  done
  cat "$R/plain.log" "$R/tls.log" >&2 || true
  die "registries did not come up"
}

stop_registries() {
  local name
  for name in plain tls; do
    stop_pidfile "$R/$name.pid" "registry $name" TERM
  done
}

# ---------------------------------------------------------------------------------------------------------------
# OCI layouts
# ---------------------------------------------------------------------------------------------------------------
L=$R/oci   # one layout, one tag per image (plus per-arch tags for the index)

# put FILE: stores FILE as a blob, prints "DIGEST SIZE".
put() {
  local d; d=$(sha256sum "$1" | cut -d' ' -f1)
  cp "$1" "$L/blobs/sha256/$d"
  echo "$d $(stat -c %s "$1")"
}

# mk_layer ROOTFS_DIR COMPRESSION OUT_PREFIX: tar the directory (107:107, sorted, mtime 0) and compress it with
# gzip | zstd | none | corrupt (gzip, then damaged). Sets LAYER_DIGEST LAYER_SIZE LAYER_DIFF LAYER_MT.
mk_layer() {
  local dir=$1 comp=$2 out=$3
  tar --numeric-owner --owner=107 --group=107 --sort=name --mtime=@0 -C "$dir" -cf "$out.tar" .
  LAYER_DIFF=$(sha256sum "$out.tar" | cut -d' ' -f1)
  case "$comp" in
    gzip) gzip -n -1 -c "$out.tar" > "$out.blob"; LAYER_MT=application/vnd.oci.image.layer.v1.tar+gzip ;;
    zstd) zstd -q -3 -c "$out.tar" > "$out.blob"; LAYER_MT=application/vnd.oci.image.layer.v1.tar+zstd ;;
    none) cp "$out.tar" "$out.blob"; LAYER_MT=application/vnd.oci.image.layer.v1.tar ;;
    corrupt)
      gzip -n -1 -c "$out.tar" > "$out.blob"; LAYER_MT=application/vnd.oci.image.layer.v1.tar+gzip
      local size; size=$(stat -c %s "$out.blob")
      printf '\xde\xad\xbe\xef\xde\xad\xbe\xef' | dd of="$out.blob" bs=1 seek=$((size / 2)) conv=notrunc status=none ;;
    *) die "unknown compression $comp" ;;
  esac
  local r; r=$(put "$out.blob"); LAYER_DIGEST=${r% *}; LAYER_SIZE=${r#* }
  rm -f "$out.tar" "$out.blob"
}

# mk_image TAG ARCH CONFIG_JSON_CONFIG_OBJECT LAYER... where LAYER = ROOTFS_DIR:COMPRESSION.
# Writes config + manifest, adds TAG to index.json. Sets MANIFEST_DIGEST MANIFEST_SIZE.
mk_image() {
  local tag=$1 arch=$2 cfg=$3; shift 3
  local t; t=$(mktemp -d "$R/build.XXXXXX")
  local layers='[]' diffs='[]' spec n=0
  for spec in "$@"; do
    n=$((n + 1))
    mk_layer "${spec%:*}" "${spec##*:}" "$t/layer$n"
    layers=$(jq -c --arg mt "$LAYER_MT" --arg d "sha256:$LAYER_DIGEST" --argjson s "$LAYER_SIZE" \
      '. + [{mediaType: $mt, digest: $d, size: $s}]' <<<"$layers")
    diffs=$(jq -c --arg d "sha256:$LAYER_DIFF" '. + [$d]' <<<"$diffs")
  done
  jq -c -n --arg arch "$arch" --argjson cfg "$cfg" --argjson diffs "$diffs" \
    '{architecture: $arch, os: "linux", config: $cfg, rootfs: {type: "layers", diff_ids: $diffs}}' > "$t/config.json"
  local r; r=$(put "$t/config.json")
  jq -c -n --arg cd "sha256:${r% *}" --argjson cs "${r#* }" --argjson layers "$layers" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $cd, size: $cs}, layers: $layers}' \
    > "$t/manifest.json"
  r=$(put "$t/manifest.json"); MANIFEST_DIGEST=${r% *}; MANIFEST_SIZE=${r#* }
  add_ref "$tag" application/vnd.oci.image.manifest.v1+json "$MANIFEST_DIGEST" "$MANIFEST_SIZE"
  rm -rf "$t"
}

# add_ref TAG MEDIA_TYPE DIGEST SIZE: (re)points TAG in index.json.
add_ref() {
  local e
  e=$(jq -c -n --arg mt "$2" --arg d "sha256:$3" --argjson s "$4" --arg t "$1" \
    '{mediaType: $mt, digest: $d, size: $s, annotations: {"org.opencontainers.image.ref.name": $t}}')
  jq -c --argjson e "$e" --arg t "$1" \
    '.manifests |= (map(select(.annotations["org.opencontainers.image.ref.name"] != $t)) + [$e])' \
    "$L/index.json" > "$L/index.json.new"
  mv "$L/index.json.new" "$L/index.json"
}

# rootfs NAME FILE:PATH...: a rootfs directory with the given files (PATH relative to the root).
rootfs() {
  local d=$R/rootfs/$1; shift
  rm -rf "$d"; mkdir -p "$d"
  local spec src dst
  for spec in "$@"; do
    src=${spec%%:*}; dst=${spec#*:}
    mkdir -p "$d/$(dirname "$dst")"
    if [ "$src" = "-" ]; then : > "$d/$dst"; else cp --sparse=always "$src" "$d/$dst"; fi
  done
  echo "$d"
}

build_images() {
  local c=$CORPUS
  for f in base.raw small.raw q2-v3.qcow2 base.raw.gz; do
    [ -f "$c/$f" ] || die "$c/$f missing: run tests/infra/import-env.sh up first"
  done
  rm -rf "$L" "$R/rootfs"; mkdir -p "$L/blobs/sha256"
  printf '{"imageLayoutVersion":"1.0.0"}' > "$L/oci-layout"
  printf '{"schemaVersion":2,"manifests":[]}' > "$L/index.json"
  local raw small qcow diskgz two twoq nodisk old new etc
  raw=$(rootfs raw "$c/base.raw:disk/disk.img")
  small=$(rootfs small "$c/small.raw:disk/disk.img")
  qcow=$(rootfs qcow2 "$c/q2-v3.qcow2:disk/disk.img")
  diskgz=$(rootfs diskgz "$c/base.raw.gz:disk/disk.img.gz")
  two=$(rootfs two "$c/small.raw:disk/a.img" "$c/base.raw:disk/b.img")
  twoq=$(rootfs twoq "$c/q2-v3.qcow2:disk/a.qcow2" "$c/q2-v3.qcow2:disk/b.qcow2")
  nodisk=$(rootfs nodisk "$HERE/registry-env.sh:etc/hostname")
  old=$(rootfs old "$c/small.raw:disk/old.img")
  new=$(rootfs new "-:disk/.wh.old.img" "$c/base.raw:disk/new.img")
  etc=$(rootfs etc "$HERE/registry-env.sh:etc/hostname")
  local none='{}'
  mk_image raw amd64 "$none" "$raw:gzip"
  mk_image qcow2 amd64 "$none" "$qcow:gzip"
  mk_image zstd amd64 "$none" "$raw:zstd"
  mk_image plain amd64 "$none" "$raw:none"
  mk_image diskgz amd64 "$none" "$diskgz:none"
  mk_image env amd64 '{"Env":["PATH=/usr/bin","INSTANCETYPE_KUBEVIRT_IO_DEFAULT_INSTANCETYPE=u1.small"]}' "$raw:gzip"
  mk_image malformed amd64 "$none" "$raw:corrupt"
  mk_image whiteout amd64 "$none" "$old:gzip" "$new:gzip"
  mk_image twofiles amd64 "$none" "$two:gzip"
  mk_image twoqcow2 amd64 "$none" "$twoq:gzip"
  mk_image nodisk amd64 "$none" "$nodisk:gzip"
  mk_image bootc amd64 '{"Labels":{"containers.bootc":"1"}}' "$raw:gzip"
  mk_image layered amd64 "$none" "$raw:gzip" "$etc:gzip"
  # multi-arch index
  local amd arm idx r
  mk_image multi-amd64 amd64 "$none" "$raw:gzip"; amd="$MANIFEST_DIGEST $MANIFEST_SIZE"
  mk_image multi-arm64 arm64 "$none" "$small:gzip"; arm="$MANIFEST_DIGEST $MANIFEST_SIZE"
  idx=$(mktemp "$R/index.XXXXXX")
  jq -c -n --arg ad "sha256:${amd% *}" --argjson asz "${amd#* }" --arg rd "sha256:${arm% *}" --argjson rs "${arm#* }" \
    '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: [
       {mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $ad, size: $asz,
        platform: {architecture: "amd64", os: "linux"}},
       {mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $rd, size: $rs,
        platform: {architecture: "arm64", os: "linux"}}]}' > "$idx"
  r=$(put "$idx"); rm -f "$idx"
  add_ref multi application/vnd.oci.image.index.v1+json "${r% *}" "${r#* }"
  rm -rf "$R/rootfs"
}

push_images() {
  local plain=127.0.0.1:$P_PLAIN tls=127.0.0.1:$P_TLS name
  for name in raw qcow2 zstd plain diskgz env malformed whiteout twofiles twoqcow2 nodisk bootc layered; do
    skopeo copy -q --dest-tls-verify=false "oci:$L:$name" "docker://$plain/test/$name:v1"
  done
  skopeo copy -q --all --dest-tls-verify=false "oci:$L:multi" "docker://$plain/test/multi:v1"
  skopeo copy -q --format v2s2 --dest-tls-verify=false "oci:$L:raw" "docker://$plain/test/v2s2:v1"
  for name in raw qcow2; do
    skopeo copy -q --dest-cert-dir "$R/tls/skopeo-certs" --dest-creds "$USER_NAME:$USER_PASSWORD" \
      "oci:$L:$name" "docker://$tls/test/$name:v1"
  done
  log "images pushed"
}

stamp() {
  cat "$0" "$CORPUS/manifest.tsv" 2>/dev/null | sha256sum | cut -d' ' -f1
}

write_env() {
  cat > "$ENVFILE" <<EOF
# generated by tests/infra/registry-env.sh up; read by tests/import_registry.rs
REGISTRY_PLAIN=127.0.0.1:$P_PLAIN
REGISTRY_TLS=127.0.0.1:$P_TLS
REGISTRY_CA_DIR=$R/tls/ca
REGISTRY_OTHER_CA_DIR=$R/tls/other-ca
REGISTRY_USER=$USER_NAME
REGISTRY_PASSWORD=$USER_PASSWORD
REGISTRY_PLAIN_PID=$(pid_of plain)
REGISTRY_TLS_PID=$(pid_of tls)
EOF
}

env_up() {
  need_tools
  mkdir -p "$R"
  tls_material
  start_registries
  local want; want=$(stamp)
  if [ "$(cat "$R/stamp" 2>/dev/null || true)" != "$want" ] ||
    ! curl -fsS "http://127.0.0.1:$P_PLAIN/v2/test/layered/tags/list" >/dev/null 2>&1; then
    log "building test images"
    build_images
    push_images
    echo "$want" > "$R/stamp"
  else
    log "test images up to date"
  fi
  write_env
  log "settings in $ENVFILE"
}

env_down() {
  stop_registries
  rm -f "$ENVFILE"
}

env_status() {
  local n
  for n in plain tls; do
    if running "$n"; then echo "registry $n running (pid $(pid_of "$n"))"; else echo "registry $n not running"; fi
  done
}

env_main "$@"
