#!/usr/bin/env bash
# Builds the Multus CNI thin plugin (gopkg.in/k8snetworkplumbingwg/multus-cni.v4, ./cmd/multus) at the version
# pinned in versions.sh from the Go module proxy into a cache outside the checkout. A no-op when the cache holds it.
#
#   tests/cluster/build-multus.sh      # → ~/.cache/kubevirt-rs/multus-bin/v4.2.3/multus
#
# As build-upstream-virtctl.sh does, the module's tree is copied out of the (read-only) module cache and built there
# as the main module (-mod=mod: no vendor/ in module zips). About a minute with a cold Go build cache.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/versions.sh
. "$HERE/versions.sh"
MODULE=gopkg.in/k8snetworkplumbingwg/multus-cni.v4
BIN=$MULTUS_BIN_DIR/multus

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-mod=mod -trimpath -buildvcs=false"
export GOMODCACHE=${GOMODCACHE_OVERRIDE:-$KV_CACHE/go/mod} GOCACHE=${GOCACHE_OVERRIDE:-$KV_CACHE/go/build}
log() { printf '[build-multus %s] %s\n' "$(date +%T)" "$*"; }

done_already() { [ -x "$BIN" ] && [ -f "$MULTUS_BIN_DIR/.complete" ]; }
if done_already; then log "multus v$MULTUS_VERSION cached in $MULTUS_BIN_DIR"; exit 0; fi
command -v go >/dev/null || { echo "build-multus: Go >= 1.24 is required (not found)" >&2; exit 1; }
mkdir -p "$MULTUS_BIN_DIR"
exec 9>"$MULTUS_BIN_DIR.lock"
flock 9   # two concurrent `up`s must not build into the same directory
if done_already; then log "multus v$MULTUS_VERSION cached in $MULTUS_BIN_DIR"; exit 0; fi

log "downloading $MODULE@v$MULTUS_VERSION"
DIR=$(go mod download -json "$MODULE@v$MULTUS_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$DIR" ] || { echo "build-multus: could not download $MODULE@v$MULTUS_VERSION" >&2; exit 1; }
SRC=$MULTUS_BIN_DIR/src
rm -rf "$SRC"
cp -r "$DIR" "$SRC"
chmod -R u+w "$SRC"
V=$MODULE/pkg/multus
LD="-s -w -X $V.version=v$MULTUS_VERSION -X $V.commit=module-v$MULTUS_VERSION -X $V.gitTreeState=clean"
LD="$LD -X $V.releaseStatus=released -X $V.date=1970-01-01T00:00:00Z"
log "go build ./cmd/multus"
(cd "$SRC" && nice -n 5 go build -ldflags "$LD" -o "$BIN.tmp" ./cmd/multus)
mv "$BIN.tmp" "$BIN"
rm -rf "$SRC"
touch "$MULTUS_BIN_DIR/.complete"
log "multus v$MULTUS_VERSION built: $BIN"
