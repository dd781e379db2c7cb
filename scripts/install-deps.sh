#!/usr/bin/env bash
# Installs the system packages the build and the tests need. Idempotent; skips apt when all are present.
set -euo pipefail
PKGS=(qemu-utils qemu-block-extra nginx-light apache2-utils openssl curl xz-utils zstd bzip2 gzip pkg-config)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy rustfmt
