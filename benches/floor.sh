#!/usr/bin/env bash
# Pod-mode HTTP qcow2 import against this machine's physical floor for it, measured side by side in one run.
#
#   benches/floor.sh [WORKDIR]        (default: $TMPDIR/kubevirt-rs-bench, shared with benches/import.sh)
#
# Same corpus, nginx on loopback and release build as benches/import.sh (benches/lib.sh): a 2 GiB qcow2 holding
# 1 GiB of data in 16 extents of 64 MiB. Each command runs BENCH_REPS (default 5) interleaved rounds, warm page
# cache; the median wall time counts.
#
# Ours, "pod mode": the importer binary started as CDI starts its importer pod, configured only by environment
# (IMPORTER_SOURCE=http, IMPORTER_ENDPOINT=<url>, IMPORTER_CONTENTTYPE=kubevirt, IMPORTER_IMAGE_SIZE=2Gi,
# FILESYSTEM_OVERHEAD=0), with the pod's paths moved by the importer's test overrides (IMPORTER_DATA_DIR=$W/data,
# so the target is $W/data/disk.img; no block device, no scratch; IMPORTER_TERMINATION_LOG, IMPORTER_METRICS_ADDR
# on a free loopback port). It writes the image and fsyncs it before it reports success.
#
# The floor is the slower of the two things the import cannot avoid, each measured alone:
#   read    curl -fsS -o /dev/null $URL/disk.qcow2
#           (the whole qcow2 over loopback HTTP from the same nginx, into nothing)
#   write   for each data extent of the image (from `qemu-img map --output=json`), one
#             dd if=disk.raw of=$W/out.floor bs=2M iflag=skip_bytes,count_bytes oflag=direct,seek_bytes \
#                skip=START seek=START count=LENGTH conv=notrunc
#           then `sync $W/out.floor` (fsync): the same bytes at the same offsets as our output, written with
#           O_DIRECT from the page-cached raw image, and made durable as ours is.
#   floor = max(median read, median write)
#
# Rows and targets:
#   pod qcow2 over HTTP    ours vs the floor                                        target <= 1.25
#   pod sha256 overhead    ours with IMPORTER_CHECKSUM=sha256:<digest> vs without   target <= 1.10
#   read / write           the two floor components vs the floor                    (reported)
#   sha256 CPU             CPU seconds (user + system) of those two pod runs        (reported: the work hashing
#                                                                                     adds, whatever the load)
#   peak RSS               max over all our runs                                    target <= 64 MiB
# With BENCH_BEFORE=<another importer binary> (an older build, say) its pod runs join the same rounds and two
# more rows compare it: "before: pod" (vs the floor) and "before: sha256" (its checksum overhead).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
bench_setup "${1:-${TMPDIR:-/tmp}/kubevirt-rs-bench}"

# ---- the floor's write: the image's data extents, written with O_DIRECT ----
qemu-img map --output=json "$W/www/disk.qcow2" |
  tr -d ' \n' | sed 's/},{/}\n{/g' | tr -d '[]' |
  sed -n 's/.*"start":\([0-9]*\),"length":\([0-9]*\),.*"data":true.*/\1 \2/p' >"$W/extents"
{
  echo "set -e"
  while read -r start len; do
    echo "dd if=$W/www/disk.raw of=$W/out.floor bs=2M iflag=skip_bytes,count_bytes oflag=direct,seek_bytes" \
      "skip=$start seek=$start count=$len conv=notrunc status=none"
  done <"$W/extents"
  echo "sync $W/out.floor"
} >"$W/floor-write.sh"
DATA=$(awk '{ s += $2 } END { print s }' "$W/extents")
echo "floor write: $(wc -l <"$W/extents") extents, $DATA bytes of data"

# ---- ours: the importer as the pod runs it ----
mkdir -p "$W/data"
POD="env IMPORTER_SOURCE=http IMPORTER_ENDPOINT=$URL/disk.qcow2 IMPORTER_CONTENTTYPE=kubevirt"
POD+=" IMPORTER_IMAGE_SIZE=2Gi FILESYSTEM_OVERHEAD=0 IMPORTER_DATA_DIR=$W/data"
POD+=" IMPORTER_BLOCK_DEVICE=$W/no-block-device IMPORTER_SCRATCH_DIR=$W/no-scratch"
POD+=" IMPORTER_TERMINATION_LOG=$W/termination-log IMPORTER_EXTRA_HEADERS_DIR=$W/no-extraheaders"
POD+=" IMPORTER_METRICS_ADDR=127.0.0.1:0"
SUM=$(sha256sum "$W/www/disk.qcow2" | cut -d' ' -f1)

# The pod reports in its termination message (a checksum mismatch, like CDI's, exits 0 with an error message).
DONE="grep -q 'Import Complete' $W/termination-log"
# Once, to check: the pod's output is the raw image, byte for byte; a wrong checksum is refused.
$POD "$IMP" >/dev/null && bash -c "$DONE"
cmp "$W/data/disk.img" "$W/www/disk.raw"
$POD IMPORTER_CHECKSUM="sha256:${SUM//?/0}" "$IMP" >/dev/null 2>&1 || true
grep -q 'checksum mismatch' "$W/termination-log" || { echo "a wrong checksum was not refused" >&2; exit 1; }

BEFORE=()
if [ -n "${BENCH_BEFORE:-}" ]; then
  BEFORE=(before-pod "$POD $BENCH_BEFORE && $DONE"
    before-pod-sha "$POD IMPORTER_CHECKSUM=sha256:$SUM $BENCH_BEFORE && $DONE")
fi
echo "measuring ($REPS interleaved rounds, medians) ..."
measure ours-pod "$POD $IMP && $DONE" \
  floor-read "curl -fsS -o /dev/null $URL/disk.qcow2" \
  floor-write "bash $W/floor-write.sh" \
  ours-pod-sha "$POD IMPORTER_CHECKSUM=sha256:$SUM $IMP && $DONE" \
  "${BEFORE[@]}"
READ=$(median floor-read)
WRITE=$(median floor-write)
FLOOR=$(awk -v a="$READ" -v b="$WRITE" 'BEGIN { print (a > b ? a : b) }')
row "pod qcow2 over HTTP" "$(median ours-pod)" "$FLOOR" 1.25
row "pod sha256 overhead" "$(median ours-pod-sha)" "$(median ours-pod)" 1.10
row "pod sha256 CPU" "$(median_cpu ours-pod-sha)" "$(median_cpu ours-pod)"
row "floor: read (curl)" "$READ" "$FLOOR"
row "floor: write (dd)" "$WRITE" "$FLOOR"
if [ -n "${BENCH_BEFORE:-}" ]; then
  row "before: pod" "$(median before-pod)" "$FLOOR" 1.25
  row "before: sha256" "$(median before-pod-sha)" "$(median before-pod)" 1.10
fi

echo
printf '%-20s %9s %9s %6s  %-6s\n' case ours anchor ratio target
printf '%s\n' "${ROWS[@]}"
peak_rss_row
