#!/usr/bin/env bash
# Runs the qcow2 fuzz target for a bounded time (default 60 s): `scripts/fuzz.sh [SECONDS]`.
# With FUZZ_RUNS=N it instead runs exactly N inputs with a fixed seed from the seed corpus (deterministic:
# what the test command uses, so CI cannot flake on a new random find; open-ended hunting is the timed mode).
# Installs cargo-fuzz and the nightly toolchain when missing, seeds the corpus with small images made by
# qemu-img (every qcow2 variant the importer supports), and fails if the fuzzer finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/kubevirt-rs/fuzz-target}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal

SEEDS=fuzz/corpus/qcow2
mkdir -p "$SEEDS"
if [ -z "$(ls -A "$SEEDS")" ]; then
  W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
  truncate -s 4M "$W/r.raw"
  { yes 'fuzz seed data' | head -c 300K >"$W/t.bin"; } || true
  dd if="$W/t.bin" of="$W/r.raw" bs=64K seek=3 conv=notrunc status=none
  i=0
  for o in compat=0.10 compat=1.1 cluster_size=512 cluster_size=2M extended_l2=on,cluster_size=64k \
           compression_type=zstd; do
    i=$((i+1))
    qemu-img convert -O qcow2 -o "$o" "$W/r.raw" "$SEEDS/seed$i.qcow2"
    qemu-img convert -c -O qcow2 -o "$o" "$W/r.raw" "$SEEDS/seedc$i.qcow2" 2>/dev/null || true
  done
  qemu-img create -q -f qcow2 "$SEEDS/empty.qcow2" 1M
fi
cd fuzz
if [ -n "${FUZZ_RUNS:-}" ]; then
  LIMIT=(-runs="$FUZZ_RUNS" -seed=1)
else
  LIMIT=(-max_total_time="$SECS")
fi
cargo +nightly fuzz run qcow2 "corpus/qcow2" -- "${LIMIT[@]}" -max_len=262144 -rss_limit_mb=1024
