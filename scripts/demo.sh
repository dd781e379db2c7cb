#!/usr/bin/env bash
# The README's "run an import": builds the importer, makes a small qcow2 image with qemu-img (data, holes and
# compressed clusters), serves it from a local HTTP server this script starts, imports it over HTTP with a
# sha256 checksum, and checks the result byte for byte against `qemu-img convert -O raw`.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/kubevirt-rs/target}
scripts/install-deps.sh
cargo build -q -p importer
IMPORTER=$CARGO_TARGET_DIR/debug/importer
W=$(mktemp -d)
PORT=${DEMO_PORT:-18090}
cleanup() { [ -f "$W/http.pid" ] && kill "$(cat "$W/http.pid")" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT

# 256 MiB virtual: 8 MiB of pseudo-random data, 8 MiB of text, the rest holes.
truncate -s 256M "$W/disk.raw"
{ openssl enc -aes-128-ctr -pass pass:demo -nosalt -pbkdf2 </dev/zero 2>/dev/null | head -c 8M >"$W/a.bin"; } || true
{ yes 'kubevirt-rs demo line' | head -c 8M >"$W/b.bin"; } || true
dd if="$W/a.bin" of="$W/disk.raw" bs=1M seek=16 conv=notrunc status=none
dd if="$W/b.bin" of="$W/disk.raw" bs=1M seek=128 conv=notrunc status=none
qemu-img convert -c -O qcow2 "$W/disk.raw" "$W/disk.qcow2"
qemu-img convert -O raw "$W/disk.qcow2" "$W/expected.raw"

(cd "$W" && exec python3 -m http.server "$PORT" --bind 127.0.0.1 >/dev/null 2>&1) & echo $! > "$W/http.pid"
for _ in $(seq 50); do curl -fs -o /dev/null "http://127.0.0.1:$PORT/" 2>/dev/null && break; sleep 0.1; done

SUM=$(sha256sum "$W/disk.qcow2" | cut -d' ' -f1)
"$IMPORTER" import "http://127.0.0.1:$PORT/disk.qcow2" "$W/imported.raw" --checksum "sha256:$SUM" --output json
cmp "$W/expected.raw" "$W/imported.raw"
echo "OK: the imported disk equals qemu-img's conversion ($(du -k "$W/imported.raw" | cut -f1) KiB allocated of $(stat -c %s "$W/imported.raw") bytes)"
