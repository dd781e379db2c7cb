#!/usr/bin/env bash
# Import benchmark: ratios measured side by side in one run on this machine (< 1.00 = we are faster).
#
#   benches/import.sh [WORKDIR]        (default: $TMPDIR/kubevirt-rs-bench; needs ~8 GiB free)
#
# Builds the release importer, makes a 2 GiB raw disk (1 GiB data: half pseudo-random, half compressible
# text; 1 GiB holes) and from it a qcow2, a zlib-compressed qcow2, raw.xz and raw.zst. Serves them with nginx
# on loopback (helpers shared with benches/floor.sh in benches/lib.sh). Each case runs BENCH_REPS (default 5)
# interleaved rounds (ours and its anchors take turns), warm page cache; the median wall time counts. Peak RSS
# from /usr/bin/time. Cases and targets:
#   qcow2 local            ours vs `qemu-img convert -O raw`                       target <= 1.0
#   qcow2 over HTTP        ours vs CDI's pipeline (curl -o scratch; qemu-img)      target <= 0.5
#   zlib qcow2 local       ours vs `qemu-img convert -O raw`                       target <= 0.6
#   raw.xz over HTTP       ours vs `curl | xz -d > file`                           (reported)
#   raw.zst over HTTP      ours vs `curl | zstd -d > file`                         (reported)
#   raw over HTTP          ours vs `curl -o file`                                  target <= 1.1
#   sha256 overhead        ours with --checksum vs without (qcow2 over HTTP)       (reported)
#   allocation             our output's allocated bytes vs qemu-img's              target <= 1.0
#   peak RSS               max over all our runs                                   target <= 64 MiB
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_setup "${1:-${TMPDIR:-/tmp}/kubevirt-rs-bench}"

echo "measuring ($REPS interleaved rounds, medians) ..."
measure ours-qcow2 "$IMP import $W/www/disk.qcow2 $W/out.raw --no-progress" \
  qemu-qcow2 "qemu-img convert -O raw $W/www/disk.qcow2 $W/out.raw" \
  qemu-qcow2-sync "qemu-img convert -O raw $W/www/disk.qcow2 $W/out.raw && sync $W/out.raw"
row "qcow2 local" "$(median ours-qcow2)" "$(median qemu-qcow2)" 1.0
# We fsync before reporting success (as CDI does after its convert); qemu-img convert alone leaves the data in the
# page cache. Same work, same durability:
row "qcow2 local vs +sync" "$(median ours-qcow2)" "$(median qemu-qcow2-sync)" 1.0
$IMP import "$W/www/disk.qcow2" "$W/out.ours" --no-progress >/dev/null
qemu-img convert -O raw "$W/www/disk.qcow2" "$W/out.qemu"
ALLOC_OURS=$(( $(stat -c %b "$W/out.ours") * 512 )); ALLOC_QEMU=$(( $(stat -c %b "$W/out.qemu") * 512 ))
cmp "$W/out.ours" "$W/out.qemu"
rm -f "$W/out.ours" "$W/out.qemu"

SUM=$(sha256sum "$W/www/disk.qcow2" | cut -d' ' -f1)
measure ours-http "$IMP import $URL/disk.qcow2 $W/out.raw --no-progress" \
  cdi-http "curl -fsS -o $W/scratch.img $URL/disk.qcow2 && qemu-img convert -O raw $W/scratch.img $W/out.raw" \
  ours-sha "$IMP import $URL/disk.qcow2 $W/out.raw --no-progress --checksum sha256:$SUM"
row "qcow2 over HTTP" "$(median ours-http)" "$(median cdi-http)" 0.5
row "sha256 overhead" "$(median ours-sha)" "$(median ours-http)"

measure ours-zlib "$IMP import $W/www/disk-zlib.qcow2 $W/out.raw --no-progress" \
  qemu-zlib "qemu-img convert -O raw $W/www/disk-zlib.qcow2 $W/out.raw" \
  qemu-zlib-sync "qemu-img convert -O raw $W/www/disk-zlib.qcow2 $W/out.raw && sync $W/out.raw"
row "zlib qcow2 local" "$(median ours-zlib)" "$(median qemu-zlib)" 0.6
row "zlib local vs +sync" "$(median ours-zlib)" "$(median qemu-zlib-sync)" 0.6

measure ours-xz "$IMP import $URL/disk.raw.xz $W/out.raw --no-progress" \
  curl-xz "curl -fsS $URL/disk.raw.xz | xz -d -T2 > $W/out.raw"
row "raw.xz over HTTP" "$(median ours-xz)" "$(median curl-xz)"
measure ours-zst "$IMP import $URL/disk.raw.zst $W/out.raw --no-progress" \
  curl-zst "curl -fsS $URL/disk.raw.zst | zstd -q -d > $W/out.raw"
row "raw.zst over HTTP" "$(median ours-zst)" "$(median curl-zst)"
measure ours-raw "$IMP import $URL/disk.raw $W/out.raw --no-progress" \
  curl-raw "curl -fsS -o $W/out.raw $URL/disk.raw"
row "raw over HTTP" "$(median ours-raw)" "$(median curl-raw)" 1.1

echo
printf '%-20s %9s %9s %6s  %-6s\n' case ours anchor ratio target
printf '%s\n' "${ROWS[@]}"
printf '%-20s %8sB %8sB %6s  %-6s %s\n' "allocation" "$ALLOC_OURS" "$ALLOC_QEMU" "$(ratio "$ALLOC_OURS" "$ALLOC_QEMU")" 1.0 "$(verdict "$(ratio "$ALLOC_OURS" "$ALLOC_QEMU")" 1.0)"
peak_rss_row
