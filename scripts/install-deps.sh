#!/usr/bin/env bash
# Installs the system packages the build and the tests need. Idempotent; skips apt when all are present.
set -euo pipefail
. "$(dirname "$0")/apt-ensure.sh"
apt_ensure qemu-utils qemu-block-extra nginx-light apache2-utils openssl curl xz-utils zstd bzip2 gzip pkg-config
# node-agent: libvirt-dev links the `virt` crate; its real-libvirt test runs a private libvirtd with the QEMU driver.
apt_ensure libvirt-dev libvirt-daemon libvirt-daemon-driver-qemu qemu-system-x86
# launcher: cloud-init ISOs (xorrisofs, read back by xorriso), masquerade (ip, nft, busybox udhcpd/udhcpc/httpd),
# its sandboxed libvirtd test (virsh, unshare).
apt_ensure xorriso nftables iproute2 busybox-static libvirt-clients util-linux
# The pinned toolchain (rust-toolchain.toml): when the installed stable is that version, make it available under
# the pinned name (a symlink in rustup's toolchain directory, as `rustup toolchain link` refuses channel names);
# else install it. Every later cargo/rustup call in this checkout uses it.
want=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' "$(dirname "$0")/../rust-toolchain.toml")
if ! rustup run "$want" rustc --version >/dev/null 2>&1; then
  if rustup run stable rustc --version 2>/dev/null | grep -q "^rustc $want "; then
    host=$(rustup run stable rustc -vV | sed -n 's/^host: //p')
    ln -sfn "$(rustup run stable rustc --print sysroot)" "${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$want-$host"
  else
    rustup toolchain install "$want" --profile minimal
  fi
fi
rustup run "$want" cargo-clippy --version >/dev/null 2>&1 || rustup component add --toolchain "$want" clippy
rustup run "$want" rustfmt --version >/dev/null 2>&1 || rustup component add --toolchain "$want" rustfmt
