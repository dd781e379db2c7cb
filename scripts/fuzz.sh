#!/usr/bin/env bash
# Runs the fuzz targets, each for a bounded time (default 60 s): `scripts/fuzz.sh [SECONDS] [TARGET...]`.
# Targets (default: all): qcow2 (the qcow2 header parser and single-pass converter), vmdk (the streamOptimized
# vmdk converter and the OVA reader: tar, OVF, disk selection), parent (the parent-image finder of the formats
# with a child form: vhd, vhdx, vmdk, vdi), vhd, vhdx and vmdk_sparse (the native readers of those formats and of
# monolithicSparse vmdk, by positional reads), gzip (the restartable gzip decoder, against flate2 and against
# itself restarted at each restart point), xz_index (the block map of an .xz file, read to resume one) and dhcp
# (the launcher's DHCP server).
# With FUZZ_RUNS=N each target instead runs exactly N inputs with a fixed seed from its seed corpus (deterministic:
# what the test command uses, so CI cannot flake on a new random find; open-ended hunting is the timed mode).
# Installs cargo-fuzz and the nightly toolchain when missing, seeds each corpus with small images made by qemu-img
# (qcow2: every variant the importer supports; vmdk: streamOptimized images and an OVA holding two of them;
# parent: each format with a child form, plain and as a child image; vhd: dynamic images, trimmed; vhdx: images
# compacted into the layout the target expands; vmdk_sparse: monolithicSparse images, plain and zeroed-grain;
# gzip: gzip -1/-9 streams, two members, header fields; xz_index: the indexes of xz -T files), and fails if the
# fuzzer finds a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(qcow2 vmdk parent vhd vhdx vmdk_sparse gzip xz_index dhcp)
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/kubevirt-rs/fuzz-target}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal

W=$(mktemp -d); trap 'rm -rf "$W"' EXIT

# put FILE OFFSET HEX...: writes bytes into FILE at OFFSET without truncating it.
put() { local f=$1 at=$2; shift 2; printf "$(printf '\\x%s' "$@")" | dd of="$f" bs=1 seek="$at" conv=notrunc status=none; }

seed_qcow2() {
  local seeds=$1 i=0 o
  truncate -s 4M "$W/r.raw"
  { yes 'fuzz seed data' | head -c 300K >"$W/t.bin"; } || true
  dd if="$W/t.bin" of="$W/r.raw" bs=64K seek=3 conv=notrunc status=none
  for o in compat=0.10 compat=1.1 cluster_size=512 cluster_size=2M extended_l2=on,cluster_size=64k \
           compression_type=zstd; do
    i=$((i+1))
    qemu-img convert -O qcow2 -o "$o" "$W/r.raw" "$seeds/seed$i.qcow2"
    qemu-img convert -c -O qcow2 -o "$o" "$W/r.raw" "$seeds/seedc$i.qcow2" 2>/dev/null || true
  done
  qemu-img create -q -f qcow2 "$seeds/empty.qcow2" 1M
}

seed_vmdk() {
  local seeds=$1 i=0 s
  { yes 'fuzz seed data' | head -c 100K >"$W/t.bin"; } || true
  for s in 1M 1M+4096 1M+5000; do
    i=$((i+1))
    rm -f "$W/v.raw"
    truncate -s "${s%%+*}" "$W/v.raw"
    [ "$s" = "${s#*+}" ] || truncate -s "+${s#*+}" "$W/v.raw"
    [ $i -eq 1 ] || dd if="$W/t.bin" of="$W/v.raw" bs=64K seek=$((i - 1)) conv=notrunc status=none
    qemu-img convert -f raw -O vmdk -o subformat=streamOptimized "$W/v.raw" "$seeds/stream$i.vmdk"
  done
  # An OVA: the OVF descriptor first, then two disks.
  cat >"$W/vm.ovf" <<'OVF'
<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1">
  <References>
    <File ovf:href="vm-disk1.vmdk" ovf:id="file1"/>
    <File ovf:href="vm-disk2.vmdk" ovf:id="file2"/>
  </References>
  <DiskSection>
    <Info>Virtual disks</Info>
    <Disk ovf:capacity="1" ovf:capacityAllocationUnits="byte * 2^20" ovf:diskId="vmdisk1" ovf:fileRef="file1"
          ovf:format="http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"/>
    <Disk ovf:capacity="1" ovf:diskId="vmdisk2" ovf:fileRef="file2"/>
  </DiskSection>
  <VirtualSystem ovf:id="vm"><Info>A virtual machine</Info></VirtualSystem>
</Envelope>
OVF
  cp "$seeds/stream2.vmdk" "$W/vm-disk1.vmdk"
  cp "$seeds/stream1.vmdk" "$W/vm-disk2.vmdk"
  tar --format=ustar -C "$W" -cf "$seeds/vm.ova" vm.ovf vm-disk1.vmdk vm-disk2.vmdk
}

seed_parent() {
  local seeds=$1
  truncate -s 1M "$W/p.raw"
  { yes 'fuzz seed data' | head -c 100K >"$W/t.bin"; } || true
  dd if="$W/t.bin" of="$W/p.raw" bs=64K seek=2 conv=notrunc status=none
  qemu-img convert -O vpc "$W/p.raw" "$seeds/dyn.vhd"
  cp "$seeds/dyn.vhd" "$seeds/diff.vhd"
  put "$seeds/diff.vhd" 60 00 00 00 04 # disk type 4: differencing (footer copy at offset 0)
  qemu-img convert -O vmdk "$W/p.raw" "$seeds/sparse.vmdk"
  qemu-img convert -O vmdk -o subformat=streamOptimized "$W/p.raw" "$seeds/stream.vmdk"
  cp "$seeds/sparse.vmdk" "$W/base.vmdk"
  (cd "$W" && qemu-img create -q -f vmdk -b base.vmdk -F vmdk child.vmdk)
  cp "$W/child.vmdk" "$seeds/child.vmdk"
  qemu-img convert -O vdi "$W/p.raw" "$seeds/dyn.vdi"
  cp "$seeds/dyn.vdi" "$seeds/diff.vdi"
  put "$seeds/diff.vdi" $((0x4c)) 04 00 00 00 # image type 4: differencing
  # VHDX: qemu-img puts the metadata region at 3 MiB, past the inputs' size limit. A compact copy: the header
  # area and both region tables, then the metadata table and its items at 320 KiB, the region tables pointing
  # there (their checksums go stale; the parent finder does not check them).
  qemu-img convert -O vhdx "$W/p.raw" "$W/full.vhdx"
  head -c $((320 << 10)) "$W/full.vhdx" >"$seeds/compact.vhdx"
  dd if="$W/full.vhdx" bs=64K skip=48 count=2 status=none >>"$seeds/compact.vhdx"
  local at
  for at in $((0x30040)) $((0x40040)); do put "$seeds/compact.vhdx" "$at" 00 00 05 00 00 00 00 00; done
  cp "$seeds/compact.vhdx" "$seeds/parent.vhdx"
  put "$seeds/parent.vhdx" $(((320 << 10) + (64 << 10) + 4)) 02 00 00 00 # file parameters: has parent
}

seed_vhd() {
  local seeds=$1
  { yes 'fuzz seed data' | head -c 100K >"$W/t.bin"; } || true
  truncate -s 5M "$W/v.raw"
  dd if="$W/t.bin" of="$W/v.raw" bs=1M seek=2 conv=notrunc status=none
  qemu-img convert -O vpc "$W/v.raw" "$W/dyn.vhd"
  qemu-img convert -O vpc -o force_size=on "$W/v.raw" "$W/sz.vhd"
  # Trimmed: the footer and the zero tail of the one block go (the target reads the input zero-extended).
  local f
  for f in dyn sz; do head -c $(( $(stat -c %s "$W/$f.vhd") - 512 - (2048 - 100) * 1024 )) "$W/$f.vhd" >"$seeds/$f.vhd"; done
  qemu-img create -q -f vpc "$seeds/empty.vhd" 3M
}

seed_vhdx() {
  local seeds=$1 bs
  { yes 'fuzz seed data' | head -c 100K >"$W/t.bin"; } || true
  truncate -s 3M "$W/x.raw"
  dd if="$W/t.bin" of="$W/x.raw" bs=1M seek=1 conv=notrunc status=none
  # The target's layout: [0, 256K) at 0, then 64 KiB from 1, 2 and 3 MiB, then the data from 4 MiB.
  for bs in 1M 8M; do
    qemu-img convert -O vhdx -o block_size=$bs "$W/x.raw" "$W/full.vhdx"
    { head -c 256K "$W/full.vhdx"
      dd if="$W/full.vhdx" bs=64K skip=16 count=1 status=none
      dd if="$W/full.vhdx" bs=64K skip=32 count=1 status=none
      dd if="$W/full.vhdx" bs=64K skip=48 count=1 status=none
      dd if="$W/full.vhdx" bs=4K skip=1024 count=25 status=none; } >"$seeds/bs$bs.vhdx"
  done
  qemu-img create -q -f vhdx "$W/empty.vhdx" 3M
  { head -c 256K "$W/empty.vhdx"
    dd if="$W/empty.vhdx" bs=64K skip=16 count=1 status=none
    dd if="$W/empty.vhdx" bs=64K skip=32 count=1 status=none
    dd if="$W/empty.vhdx" bs=64K skip=48 count=1 status=none; } >"$seeds/empty.vhdx"
}

seed_vmdk_sparse() {
  local seeds=$1
  { yes 'fuzz seed data' | head -c 100K >"$W/t.bin"; } || true
  truncate -s 3M "$W/s.raw"
  dd if="$W/t.bin" of="$W/s.raw" bs=1M seek=1 conv=notrunc status=none
  qemu-img convert -O vmdk "$W/s.raw" "$seeds/sparse.vmdk"
  qemu-img convert -O vmdk -o zeroed_grain=on "$W/s.raw" "$seeds/zeroed.vmdk"
  qemu-img create -q -f vmdk "$seeds/empty.vmdk" 3M
}

seed_gzip() {
  local seeds=$1
  { yes 'fuzz seed data' | head -c 200K >"$W/t.bin"; } || true
  head -c 300K /dev/zero >>"$W/t.bin"
  LC_ALL=C awk 'BEGIN { srand(1); for (i = 0; i < 65536; i++) printf "%c", int(rand() * 256) }' >>"$W/t.bin"
  gzip -n -1 -c "$W/t.bin" >"$seeds/fast.gz"
  gzip -n -9 -c "$W/t.bin" >"$seeds/best.gz"
  { gzip -n -c "$W/t.bin"; printf 'second member\n' | gzip -c; } >"$seeds/members.gz"
  cp "$W/t.bin" "$W/disk.img"
  (cd "$W" && gzip -6 -c disk.img) >"$seeds/named.gz" # FNAME and MTIME set
}

# The fuzz input is the length of the file's blocks (u32, little-endian), its last 12 bytes (the footer), its index.
seed_xz_index() {
  local seeds=$1 bs f n back blocks
  { yes 'fuzz seed data' | head -c 600K >"$W/x.bin"; } || true
  for bs in 65536 262144; do
    f="$W/x-$bs.xz"
    xz -T2 --block-size=$bs -1 -c "$W/x.bin" >"$f"
    n=$(stat -c %s "$f")
    back=$(( ($(od -An -tu4 -j $((n - 8)) -N4 "$f") + 1) * 4 ))
    blocks=$((n - 24 - back))
    { printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((blocks & 255)) $((blocks >> 8 & 255)) $((blocks >> 16 & 255)) $((blocks >> 24)))"
      tail -c 12 "$f"; tail -c $((back + 12)) "$f" | head -c "$back"; } >"$seeds/bs$bs"
  done
}

# dhcp_message FILE TYPE [OPTION-HEX...]: a BOOTREQUEST from the guest's MAC 02:6b:76:72:73:01 with DHCP
# message type TYPE and further options, ended.
dhcp_message() {
  local f=$1 type=$2; shift 2
  head -c 240 /dev/zero >"$f"
  put "$f" 0 01 01 06 00 12 34 56 78
  put "$f" 28 02 6b 76 72 73 01
  put "$f" 236 63 82 53 63 35 01 "$type" "$@" ff
}

seed_dhcp() {
  local seeds=$1
  dhcp_message "$seeds/discover" 01 37 04 01 03 06 0f
  dhcp_message "$seeds/request" 03 32 04 0a 00 02 02 36 04 0a 00 02 01
  dhcp_message "$seeds/request-other" 03 32 04 c0 a8 01 07
  dhcp_message "$seeds/inform" 08
  cp "$seeds/inform" "$seeds/renew"
  put "$seeds/renew" 12 0a 00 02 02 # ciaddr
  put "$seeds/renew" 242 03          # REQUEST
}

for t in "${TARGETS[@]}"; do
  case $t in
    qcow2) max_len=262144 ;;
    vmdk) max_len=524288 ;;
    parent) max_len=524288 ;;
    vhd) max_len=1048576 ;;
    vhdx) max_len=1048576 ;;
    vmdk_sparse) max_len=524288 ;;
    gzip) max_len=262144 ;;
    xz_index) max_len=65536 ;;
    dhcp) max_len=1500 ;;
    *) echo "unknown fuzz target $t (expected qcow2, vmdk, parent, vhd, vhdx, vmdk_sparse, gzip, xz_index or dhcp)" >&2; exit 2 ;;
  esac
  SEEDS=fuzz/corpus/$t
  mkdir -p "$SEEDS"
  if [ -z "$(ls -A "$SEEDS")" ]; then
    "seed_$t" "$SEEDS"
  fi
  if [ -n "${FUZZ_RUNS:-}" ]; then
    LIMIT=(-runs="$FUZZ_RUNS" -seed=1)
  else
    LIMIT=(-max_total_time="$SECS")
  fi
  (cd fuzz && cargo +nightly fuzz run "$t" "corpus/$t" -- "${LIMIT[@]}" -max_len="$max_len" -rss_limit_mb=1024)
done
