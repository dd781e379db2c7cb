#!/usr/bin/env bash
# Installs the Debian packages the test cluster needs (container runtime, CNI plugins, image tooling, registry).
# Idempotent; skips apt when all are present. Go (>= 1.24, for building Kubernetes) and kubectl must already be on
# the machine: they come from no Debian package of a usable version, so we fail loudly instead.
set -euo pipefail
. "$(dirname "$0")/../../scripts/apt-ensure.sh"
apt_ensure containerd runc containernetworking-plugins docker-registry skopeo umoci iptables busybox-static openssl \
  curl util-linux iproute2
command -v go >/dev/null || { echo "tests/cluster: Go >= 1.24 is required to build Kubernetes (not on PATH)" >&2; exit 1; }
gominor=$(go env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
[ "${gominor:-0}" -ge 24 ] || { echo "tests/cluster: Go >= 1.24 required, found $(go env GOVERSION)" >&2; exit 1; }
command -v kubectl >/dev/null || { echo "tests/cluster: kubectl is required (not on PATH)" >&2; exit 1; }
