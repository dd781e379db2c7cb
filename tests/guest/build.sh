#!/usr/bin/env bash
# tests/guest/build.sh — the tiny bootable test guest: a Debian kernel + a busybox initramfs on a BIOS-bootable disk.
#
#   tests/guest/build.sh        builds it when missing, prints the output directory (and nothing else on stdout)
#
# Produces ~/.cache/kubevirt-rs/guest/<hash>/ (KV_CACHE overrides ~/.cache/kubevirt-rs) with
#   vmlinuz      the kernel of Debian's linux-image-<abi>-$GUEST_KERNEL_FLAVOUR package (unpacked with dpkg-deb -x)
#   initrd.img   gzip'ed newc cpio: busybox-static, tests/guest/initramfs/ (the /init and its helpers), the kernel
#                modules the guest needs (virtio pci/net/blk/scsi, AHCI + ata_piix, sd/sr, isofs, vfat + NLS, ACPI
#                button, evdev, virtio-mem) with a modules.dep
#   disk.raw     32 MiB: MBR (syslinux mbr.bin) + one bootable FAT16 partition (syslinux, vmlinuz, initrd.img);
#                made without loop devices or mounts (sfdisk, mkfs.fat --offset, syslinux --offset, mcopy)
#   disk.qcow2   disk.raw as an uncompressed qcow2 (compressed clusters cost ~15 s of BIOS time under TCG, per
#                ../shared/infra/real-components.md §12)
#   manifest     the recipe hash, the Debian packages (name + version) it was built from, the modules the init
#                loads and those the kernel lacks (`missing`; empty for the default flavour)
# The kernel command line is `console=ttyS0,115200 quiet no_timer_check`: under TCG on a loaded host the kernel's
# IO-APIC timer check can miss its ticks and panic ("IO-APIC + timer doesn't work!"), as cloud images avoid; the init's console protocol (marker lines) is documented
# at the top of tests/guest/initramfs/init. <hash> covers this script and every file under tests/guest/initramfs/
# (contents and modes), so editing either builds a new directory (the two newest are kept). The Debian packages are
# the current candidates of the machine's apt sources; their versions are recorded in `manifest`.
#
# Kernel flavour: GUEST_KERNEL_FLAVOUR (default `amd64`, the generic kernel). The `cloud-amd64` flavour has no SATA
# AHCI driver (CONFIG_SATA_AHCI unset): a SATA cdrom or disk (q35's bus for `cdrom` and `bus: sata`) stays invisible
# to its guest at run time (booting from a SATA disk still works: the BIOS loads the kernel). It boots ~2.3 s faster
# under TCG, though: its bzImage is LZ4-compressed (14 MB), the generic one XZ (8 MB), and the decompression runs
# before the kernel's clock starts (marker 2.7 s vs 5.0 s after `virsh start` here).
# `GUEST_KERNEL_FLAVOUR=cloud-amd64 tests/guest/build.sh` builds that variant (another hash; `missing ahci` in its
# manifest).
#
# Needs: root for apt (installs its build tools when missing: syslinux syslinux-common mtools
# dosfstools fdisk cpio kmod qemu-utils), Debian's package mirror (apt-get download of the kernel and
# busybox-static). About 10 s cold, instant when cached.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
KV_CACHE=${KV_CACHE:-$HOME/.cache/kubevirt-rs}
CACHE=$KV_CACHE/guest
FLAVOUR=${GUEST_KERNEL_FLAVOUR:-amd64}
CMDLINE="console=ttyS0,115200 quiet no_timer_check"
DISK_MIB=32
PART_START=2048 # sectors (1 MiB)
# Drivers the init loads (with their dependencies; whatever the kernel has built in is dropped from the list).
MODULES=(virtio_pci virtio_blk virtio_net virtio_scsi sd_mod sr_mod ahci ata_piix isofs vfat nls_cp437 nls_ascii
  nls_utf8 nls_iso8859-1 button evdev virtio_mem)

log() { printf '[guest %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[guest %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }

recipe_hash() {
  {
    cat "${BASH_SOURCE[0]}"
    echo "flavour=$FLAVOUR"
    (cd "$HERE/initramfs" && find . -type f -o -type l | LC_ALL=C sort | while read -r f; do
      printf '\n--- %s %s\n' "$f" "$(stat -c %a "$f")"; cat "$f"
    done)
  } | sha256sum | cut -c1-16
}

hash=$(recipe_hash)
out=$CACHE/$hash
if [ -f "$out/manifest" ]; then echo "$out"; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if [ -f "$out/manifest" ]; then echo "$out"; exit 0; fi

. "$HERE/../../scripts/apt-ensure.sh"
apt_ensure syslinux syslinux-common mtools dosfstools fdisk cpio kmod qemu-utils >&2

start=$(date +%s.%N)
w=$CACHE/.$hash.tmp
rm -rf "$w"; mkdir -p "$w/debs"
chmod 755 "$w" "$w/debs"   # apt-get download runs as _apt where it can

# --- Debian packages: the kernel of the flavour's meta package, busybox-static
kpkg=$(apt-cache depends "linux-image-$FLAVOUR" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
if [ -z "$kpkg" ]; then
  apt-get update -qq >&2
  kpkg=$(apt-cache depends "linux-image-$FLAVOUR" | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
fi
[ -n "$kpkg" ] || die "no kernel package behind linux-image-$FLAVOUR"
log "downloading $kpkg and busybox-static"
(cd "$w/debs" && apt-get download -q "$kpkg" busybox-static >/dev/null 2>&1) ||
  (cd "$w/debs" && apt-get update -qq && apt-get download -q "$kpkg" busybox-static >/dev/null) ||
  die "apt-get download $kpkg busybox-static failed"
mkdir -p "$w/kernel" "$w/busybox"
dpkg-deb -x "$w/debs/${kpkg}"_*.deb "$w/kernel"
dpkg-deb -x "$w/debs"/busybox-static_*.deb "$w/busybox"
kver=$(ls "$w/kernel/lib/modules")
[ -f "$w/kernel/boot/vmlinuz-$kver" ] || die "no /boot/vmlinuz-$kver in $kpkg"

# --- initramfs
r=$w/initrd
mkdir -p "$r"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,etc,mnt,var}
cp -a "$HERE/initramfs/." "$r/"
install -m 0755 "$w/busybox/bin/busybox" "$r/bin/busybox"
# The .deb ships no modules.dep: resolve each module's dependency chain against the full tree, copy those files,
# then index the reduced tree for the guest's busybox modprobe.
depmod -b "$w/kernel" "$kver"
: >"$r/etc/modules"
missing=()
for m in "${MODULES[@]}"; do
  if ! deps=$(modprobe -d "$w/kernel" -S "$kver" --show-depends "$m" 2>/dev/null); then
    log "WARNING: kernel $kver has no module $m (neither built in nor a module)"
    missing+=("$m")
    continue
  fi
  case "$deps" in builtin*) continue ;; esac
  echo "$m" >>"$r/etc/modules"
  for ko in $(awk '$1 == "insmod" { print $2 }' <<<"$deps"); do
    rel=${ko#"$w/kernel"}
    mkdir -p "$r$(dirname "$rel")"
    cp -n "$ko" "$r$rel"
  done
done
cp "$w/kernel/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$r/lib/modules/$kver/"
depmod -b "$r" "$kver"
find "$r" -exec touch -h -d @0 {} +
(cd "$r" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet | gzip -n -9) >"$w/initrd.img"
install -m 0644 "$w/kernel/boot/vmlinuz-$kver" "$w/vmlinuz"
chmod 0644 "$w/initrd.img"

# --- disk.raw: MBR + bootable FAT16 partition with syslinux; no loop device, no mount
cat >"$w/syslinux.cfg" <<EOF
SERIAL 0 115200
DEFAULT guest
PROMPT 0
TIMEOUT 0
LABEL guest
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND $CMDLINE
EOF
truncate -s "${DISK_MIB}M" "$w/disk.raw"
printf 'label: dos\nlabel-id: 0x4b565253\nstart=%s, type=6, bootable\n' "$PART_START" | sfdisk -q "$w/disk.raw" >&2
dd if=/usr/lib/syslinux/mbr/mbr.bin of="$w/disk.raw" bs=440 count=1 conv=notrunc status=none
part_kib=$(((DISK_MIB * 1024 * 1024 - PART_START * 512) / 1024))
mkfs.fat -F 16 -n KVRSGUEST -i 4b565253 --invariant --offset "$PART_START" "$w/disk.raw" "$part_kib" >/dev/null
export MTOOLS_SKIP_CHECK=1
syslinux --offset $((PART_START * 512)) --install "$w/disk.raw"
mcopy -m -i "$w/disk.raw@@$((PART_START * 512))" "$w/syslinux.cfg" "$w/vmlinuz" "$w/initrd.img" ::/
qemu-img convert -f raw -O qcow2 -o compat=1.1 "$w/disk.raw" "$w/disk.qcow2"
chmod 0644 "$w/disk.raw" "$w/disk.qcow2"

{
  echo "recipe $hash"
  echo "kernel $kver"
  dpkg-deb -f "$w/debs/${kpkg}"_*.deb Package Version | paste -sd' ' | sed 's/Package: /package /; s/ Version: / /'
  dpkg-deb -f "$w/debs"/busybox-static_*.deb Package Version | paste -sd' ' | sed 's/Package: /package /; s/ Version: / /'
  echo "cmdline $CMDLINE"
  echo "modules $(paste -sd' ' "$r/etc/modules")"
  echo "missing ${missing[*]}"
} >"$w/manifest.tmp"
rm -rf "$w/debs" "$w/kernel" "$w/busybox" "$w/initrd" "$w/syslinux.cfg"
mv "$w/manifest.tmp" "$w/manifest"
chmod 755 "$w"
rm -rf "$out"
mv "$w" "$out"
# Keep the two newest builds (another checkout may still use the previous recipe).
ls -dt "$CACHE"/*/ 2>/dev/null | tail -n +3 | xargs -r rm -rf
log "built $out in $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s ($(du -k "$out/initrd.img" | cut -f1) KiB initrd, $(du -k --apparent-size "$out/vmlinuz" | cut -f1) KiB kernel)"
echo "$out"
