#!/usr/bin/env bash
# Keeps the shared cargo target directories (under ~/.cache/kubevirt-rs) from filling the disk.
#
# Every checkout of this workspace (a CI clone, a worktree) compiles the workspace crates under its own metadata
# hashes, and debug test binaries are hundreds of MiB each: left alone, the artifacts of checkouts that no longer
# exist grow the cache by several GiB per clone until the kubelet of the test cluster reports DiskPressure and
# evicts pods. This removes every incremental-compilation directory (the test command builds with
# CARGO_INCREMENTAL=0) and, when the disk holding a target directory has less than PRUNE_BELOW_GIB (default 40)
# free, every compiled workspace artifact in it: cargo writes a workspace member's sources relative to the
# workspace in dep-info files (`deps/*.d`) and dependencies' as absolute paths, so which checkout an artifact came
# from is unknowable, and a fresh clone rebuilds the workspace crates anyway. Third-party dependencies stay: they
# are what makes a fresh clone build fast.
#
# usage: scripts/prune-target.sh TARGET_DIR...
set -euo pipefail
cd "$(dirname "$0")/.."
PRUNE_BELOW_GIB=${PRUNE_BELOW_GIB:-40}

free_gib() { df -P -BG "$1" | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }

for target in "$@"; do
  [ -d "$target" ] || continue
  before=$(du -sm "$target" | cut -f1)
  find "$target" -maxdepth 3 -type d -name incremental -prune -exec rm -rf {} +
  if [ "$(free_gib "$target")" -ge "$PRUNE_BELOW_GIB" ]; then
    echo "[prune-target] $target: ${before} MiB, $(free_gib "$target") GiB free: workspace artifacts kept"
    continue
  fi
  while IFS= read -r -d '' deps; do
    for dfile in "$deps"/*.d; do
      [ -e "$dfile" ] || continue
      # A dep-info file's first line is "<artifact>: <first source> <more sources>…"; absolute = a dependency.
      src=$(head -n1 "$dfile" | awk '{print $2}')
      case "$src" in
        /* | '') continue ;;
      esac
      stem=${dfile%.d}
      name=${stem##*/}
      rm -f "$stem" "$stem".* "$deps/lib$name".*
    done
  done < <(find "$target" -maxdepth 3 -type d -name deps -print0)
  after=$(du -sm "$target" | cut -f1)
  echo "[prune-target] $target: ${before} MiB -> ${after} MiB (workspace artifacts removed), $(free_gib "$target") GiB free"
done
