#!/usr/bin/env bash
# Builds the pinned Kubernetes control-plane + node binaries and etcd from the Go module proxy into a cache outside
# the checkout. A no-op when the cache already holds the pinned versions. See tests/cluster/README.md.
#
# Kubernetes' root go.mod replaces every staging module (k8s.io/api, ...) with ./staging/src/..., so
# `go install k8s.io/kubernetes/cmd/...@v1.x` is refused. We generate a wrapper module from the release's own go.mod
# that pins each staging module to its published v0.<minor>.<patch> instead (real-components.md §9.2).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/versions.sh
. "$HERE/versions.sh"

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOMODCACHE=${GOMODCACHE_OVERRIDE:-$KV_CACHE/go/mod} GOCACHE=${GOCACHE_OVERRIDE:-$KV_CACHE/go/build}
export GOFLAGS=-buildvcs=false
command -v go >/dev/null || { echo "build-k8s: Go >= 1.24 is required (not found)" >&2; exit 1; }

mkdir -p "$K8S_BIN_DIR" "$ETCD_BIN_DIR"
exec 9>"$KV_CACHE/k8s-build.lock"
flock 9   # two concurrent `up`s must not build into the same directory

log() { printf '[build-k8s %s] %s\n' "$(date +%T)" "$*"; }

# ---- Kubernetes ---------------------------------------------------------------------------------------------------
# Each command is built once into the cache; adding one to K8S_COMMANDS builds only that one.
MISSING=""
for c in $K8S_COMMANDS; do [ -x "$K8S_BIN_DIR/$c" ] || MISSING="$MISSING $c"; done
if [ -z "$MISSING" ]; then
  log "kubernetes v$K8S_VERSION cached in $K8S_BIN_DIR"
else
  WORK=$KV_CACHE/k8s-src/v$K8S_VERSION
  mkdir -p "$WORK"; cd "$WORK"
  STAGING=v0.${K8S_VERSION#1.}
  log "downloading k8s.io/kubernetes@v$K8S_VERSION go.mod"
  MODFILE=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [ -f "$MODFILE" ] || { echo "build-k8s: could not download k8s.io/kubernetes@v$K8S_VERSION" >&2; exit 1; }
  GOVER=$(awk '$1=="go"{print $2; exit}' "$MODFILE")
  {
    printf 'module local/k8s-bins\n\ngo %s\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' "$GOVER" "$K8S_VERSION"
    sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/src/.*#\t\1 => \1 '"$STAGING"'#p' "$MODFILE"
    printf ')\n'
    grep '^godebug' "$MODFILE" || true
  } > go.mod
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in $K8S_COMMANDS; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } > tools.go
  log "go mod tidy (module download)"
  go mod tidy
  MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
  LD="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LD="$LD -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean"
  done
  for c in $MISSING; do
    log "go build $c"
    nice -n 5 go build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$LD" -o "$K8S_BIN_DIR/$c.tmp" \
      "k8s.io/kubernetes/cmd/$c"
    mv "$K8S_BIN_DIR/$c.tmp" "$K8S_BIN_DIR/$c"
  done
  log "kubernetes v$K8S_VERSION built:$MISSING"
fi

# ---- etcd ---------------------------------------------------------------------------------------------------------
if [ -x "$ETCD_BIN_DIR/etcd" ] && [ -f "$ETCD_BIN_DIR/.complete" ]; then
  log "etcd v$ETCD_VERSION cached in $ETCD_BIN_DIR"
else
  WORK=$KV_CACHE/etcd-src/v$ETCD_VERSION
  mkdir -p "$WORK"; cd "$WORK"
  # The etcd server module has replace directives too (etcd-io/etcd#18501); as a dependency it builds.
  [ -f go.mod ] || go mod init local/etcd-bin
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  log "go build etcd"
  nice -n 5 go build -trimpath -ldflags "-s -w" -o "$ETCD_BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$ETCD_BIN_DIR/etcd.tmp" "$ETCD_BIN_DIR/etcd"
  touch "$ETCD_BIN_DIR/.complete"
  log "etcd v$ETCD_VERSION built"
fi
