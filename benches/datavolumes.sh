#!/usr/bin/env bash
# benches/datavolumes.sh [COUNT] — applies COUNT (default 100) DataVolumes at once on the test cluster (a 1 MiB
# image from the local nginx) and prints: the time until all are Succeeded, the controller's peak RSS and CPU
# seconds, and the API requests it sent per DataVolume. The controller runs as a host process (the in-cluster
# Deployment is scaled to 0 for the run) so that /proc gives exact RSS and CPU figures; its request counter is
# its own `/metrics` (`kubevirt_rs_datavolume_controller_api_requests_total`). Needs: `cargo build --workspace
# --bins`, root (the cluster), and starts the cluster and nginx itself.
set -euo pipefail
COUNT=${1:-100}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/kubevirt-rs/target}
BIN=$CARGO_TARGET_DIR/debug
for b in importer datavolume-controller uploadserver; do
  [ -x "$BIN/$b" ] || { echo "missing $BIN/$b: run cargo build --workspace --bins" >&2; exit 1; }
done
log() { printf '[bench-dv] %s\n' "$*" >&2; }

tests/cluster/up >/dev/null
tests/infra/import-env.sh up >/dev/null
export KUBECONFIG=${TMPDIR:-/tmp}/kubevirt-rs-cluster/admin.kubeconfig
tag=b$(stat -c %s.%Y "$BIN/importer" "$BIN/uploadserver" | sha256sum | cut -c1-12)
importer=$(tests/cluster/image-from-binaries "importer:$tag" "$BIN/importer" /usr/bin/qemu-img)
uploadserver=$(tests/cluster/image-from-binaries "uploadserver:$tag" "$BIN/uploadserver" /usr/bin/qemu-img)
kubectl apply -f deploy/namespace.yaml -f deploy/crds/ >/dev/null
replicas=$(kubectl get deploy -n cdi cdi-deployment -o jsonpath='{.spec.replicas}' 2>/dev/null || echo "")
if [ -n "$replicas" ]; then
  kubectl scale deploy -n cdi cdi-deployment --replicas=0 >/dev/null
  kubectl wait --for=delete pod -n cdi -l cdi.kubevirt.io=cdi-deployment --timeout=60s >/dev/null 2>&1 || true
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-dv.XXXXXX")
ns=bench-dv-$$
cleanup() {
  [ -n "${ctl:-}" ] && kill "$ctl" 2>/dev/null && wait "$ctl" 2>/dev/null || true
  kubectl delete ns "$ns" --wait=false >/dev/null 2>&1 || true
  [ -n "$replicas" ] && kubectl scale deploy -n cdi cdi-deployment --replicas="$replicas" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

PORT=18990
IMPORTER_IMAGE=$importer UPLOADSERVER_IMAGE=$uploadserver CDI_NAMESPACE=cdi POD_NAME=bench-$$ \
  METRICS_ADDR=127.0.0.1:$PORT RUST_LOG=warn "$BIN/datavolume-controller" --lease-seconds 5 >"$work/controller.log" 2>&1 &
ctl=$!
# Leading once the lease names us (a previous holder's lease expires within its duration).
for _ in $(seq 1 120); do
  [ "$(kubectl get lease -n cdi datavolume-controller -o jsonpath='{.spec.holderIdentity}' 2>/dev/null)" = "bench-$$" ] && break
  kill -0 "$ctl" 2>/dev/null || { cat "$work/controller.log" >&2; exit 1; }
  sleep 1
done
sleep 2
requests() { curl -fsS "http://127.0.0.1:$PORT/metrics" | awk '/^kubevirt_rs_datavolume_controller_api_requests_total/ {print $2}'; }
req0=$(requests)

kubectl create ns "$ns" >/dev/null
for i in $(seq 1 "$COUNT"); do
  cat <<YAML
apiVersion: cdi.kubevirt.io/v1beta1
kind: DataVolume
metadata: {name: dv-$i}
spec:
  source: {http: {url: "http://10.244.0.1:18080/corpus/tiny.raw"}}
  storage: {resources: {requests: {storage: 8Mi}}}
---
YAML
done >"$work/dvs.yaml"
log "applying $COUNT DataVolumes"
start=$(date +%s.%N)
kubectl apply -n "$ns" -f "$work/dvs.yaml" >/dev/null
while :; do
  done_n=$(kubectl get dv -n "$ns" -o jsonpath='{range .items[*]}{.status.phase}{"\n"}{end}' | grep -c '^Succeeded$' || true)
  [ "$done_n" -ge "$COUNT" ] && break
  kill -0 "$ctl" 2>/dev/null || { log "controller died"; cat "$work/controller.log" >&2; exit 1; }
  elapsed=$(echo "$(date +%s.%N) - $start" | bc)
  if [ "$(echo "$elapsed > 1800" | bc)" = 1 ]; then log "timeout: $done_n/$COUNT Succeeded"; exit 1; fi
  sleep 1
done
end=$(date +%s.%N)
req1=$(requests)
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$ctl/status")
read -r ut st < <(awk '{print $14, $15}' "/proc/$ctl/stat")
tck=$(getconf CLK_TCK)
printf '\nDataVolumes:                 %d (tiny.raw, 1 MiB, over HTTP)\n' "$COUNT"
printf 'time until all Succeeded:    %.1f s\n' "$(echo "$end - $start" | bc)"
printf 'controller peak RSS:         %.1f MiB\n' "$(echo "$hwm / 1024" | bc -l)"
printf 'controller CPU:              %.2f s (user+system, whole process life)\n' "$(echo "($ut + $st) / $tck" | bc -l)"
printf 'API requests per DataVolume: %.1f\n' "$(echo "($req1 - $req0) / $COUNT" | bc -l)"
