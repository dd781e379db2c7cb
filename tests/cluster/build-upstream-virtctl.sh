#!/usr/bin/env bash
# Builds upstream KubeVirt's own `virtctl` (the client our virt-api must serve unchanged) from the Go module proxy
# into a cache outside the checkout, and prints the binary's path. A no-op when the cache holds the pinned version.
#
#   tests/cluster/build-upstream-virtctl.sh      # → ~/.cache/kubevirt-rs/upstream-virtctl/v1.8.0/virtctl
#
# kubevirt.io/kubevirt's go.mod replaces kubevirt.io/api and kubevirt.io/client-go with ./staging/src/kubevirt.io/…,
# so the three modules are downloaded at the same version, the main module's tree is copied out of the module cache
# and the other two are put where its go.mod expects them (real-components.md §13). About 4 minutes cold.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/versions.sh
. "$HERE/versions.sh"
VERSION=${UPSTREAM_VIRTCTL_VERSION:-v1.8.0}
OUT=$KV_CACHE/upstream-virtctl/$VERSION
BIN=$OUT/virtctl

export GOTOOLCHAIN=local CGO_ENABLED=0 GOWORK=off GOFLAGS="-trimpath -buildvcs=false"
export GOMODCACHE=${GOMODCACHE_OVERRIDE:-$KV_CACHE/go/mod} GOCACHE=${GOCACHE_OVERRIDE:-$KV_CACHE/go/build}
log() { printf '[upstream-virtctl %s] %s\n' "$(date +%T)" "$*" >&2; }

[ -x "$BIN" ] && [ -f "$OUT/.complete" ] && { echo "$BIN"; exit 0; }
command -v go >/dev/null || { echo "build-upstream-virtctl: Go is required (not found)" >&2; exit 1; }
mkdir -p "$OUT"
exec 9>"$OUT.lock"
flock 9
[ -x "$BIN" ] && [ -f "$OUT/.complete" ] && { echo "$BIN"; exit 0; }

dir_of() { # MODULE@VERSION → its extracted directory in the module cache
  go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'
}
log "downloading kubevirt.io/{kubevirt,api,client-go}@$VERSION"
MAIN=$(dir_of "kubevirt.io/kubevirt@$VERSION")
API=$(dir_of "kubevirt.io/api@$VERSION")
CLIENT=$(dir_of "kubevirt.io/client-go@$VERSION")
for d in "$MAIN" "$API" "$CLIENT"; do
  [ -d "$d" ] || { echo "build-upstream-virtctl: a module of kubevirt.io@$VERSION could not be downloaded" >&2; exit 1; }
done
SRC=$OUT/src
rm -rf "$SRC"
cp -r "$MAIN" "$SRC"
chmod -R u+w "$SRC"
mkdir -p "$SRC/staging/src/kubevirt.io"
rm -rf "$SRC/staging/src/kubevirt.io/api" "$SRC/staging/src/kubevirt.io/client-go"
cp -r "$API" "$SRC/staging/src/kubevirt.io/api"
cp -r "$CLIENT" "$SRC/staging/src/kubevirt.io/client-go"
chmod -R u+w "$SRC/staging"
log "go build ./cmd/virtctl"
V=kubevirt.io/client-go/version
LD="-s -w -X $V.gitVersion=$VERSION -X $V.gitCommit=upstream-module-$VERSION -X $V.gitTreeState=clean"
LD="$LD -X $V.buildDate=1970-01-01T00:00:00Z"
(cd "$SRC" && nice -n 5 go build -tags selinux -ldflags "$LD" -o "$BIN.tmp" ./cmd/virtctl)
mv "$BIN.tmp" "$BIN"
rm -rf "$SRC"
touch "$OUT/.complete"
log "built $BIN"
echo "$BIN"
