# Shared settings for tests/cluster/{up,down}. Sourced, not executed.
# One test cluster per machine: the state directory and the loopback ports are fixed (overridable by env).
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/cluster/versions.sh
. "$HERE/versions.sh"

# Scratch state (PKI, etcd data, logs, pid files, kubeconfig). Short path: unix sockets are limited to 107 bytes.
KV_CLUSTER_DIR=${KV_CLUSTER_DIR:-${TMPDIR:-/tmp}/kubevirt-rs-cluster}
T=$KV_CLUSTER_DIR
P=$T/pki
KUBECONFIG_FILE=$T/admin.kubeconfig

ETCD_PORT=${KV_ETCD_PORT:-32379}
ETCD_PEER_PORT=${KV_ETCD_PEER_PORT:-32380}
API_PORT=${KV_API_PORT:-36443}
KCM_PORT=${KV_KCM_PORT:-30257}
SCHED_PORT=${KV_SCHED_PORT:-30259}
SERVICE_CIDR=10.96.0.0/24

log() { printf '[cluster %s] %s\n' "$(date +%T)" "$*"; }
die() { printf '[cluster %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }

# pid_alive NAME: the daemon recorded in $T/NAME.pid is running (and is still the program we started).
pid_alive() {
  local f=$T/$1.pid pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  # Guard against PID reuse: the command line must mention the binary we started.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$(cat "$T/$1.cmd" 2>/dev/null || echo "$1")"
}

# start_bg NAME BINARY ARGS...: start a daemon in the background, log to $T/NAME.log, pid to $T/NAME.pid.
start_bg() {
  local n=$1; shift
  if pid_alive "$n"; then log "$n already running (pid $(cat "$T/$n.pid"))"; return 0; fi
  basename "$1" >"$T/$n.cmd"
  # fd 8 is the up/down lock (cluster_lock): daemons must not inherit it.
  setsid "$@" >>"$T/$n.log" 2>&1 </dev/null 8>&- &
  echo $! >"$T/$n.pid"
  log "started $n (pid $!)"
}

# stop_pids NAME...: SIGTERM every recorded PID, wait up to 15 s for all of them, then SIGKILL the rest. Only ever
# touches PIDs from our own pid files.
stop_pids() {
  local n pids="" pid i
  for n in "$@"; do
    if pid_alive "$n"; then
      pid=$(cat "$T/$n.pid"); pids="$pids $pid"
      kill "$pid" 2>/dev/null || true
      log "stopping $n (pid $pid)"
    fi
    rm -f "$T/$n.pid"
  done
  [ -n "$pids" ] || return 0
  for i in $(seq 1 150); do
    local alive=""
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
    [ -n "$alive" ] || return 0
    sleep 0.1
  done
  for pid in $alive; do kill -9 "$pid" 2>/dev/null || true; done
  sleep 0.2
}
stop_pid() { stop_pids "$1"; }

# cluster_lock: serialise up/down (also across checkouts on this machine).
cluster_lock() {
  mkdir -p "$KV_CACHE"
  exec 8>"$KV_CACHE/cluster.lock"
  flock 8
}

# wait_for DESC SECONDS CMD...: poll CMD every 0.25 s.
wait_for() {
  local desc=$1 secs=$2 i; shift 2
  for i in $(seq 1 $((secs * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  return 1
}

kc() { kubectl --kubeconfig "$KUBECONFIG_FILE" "$@"; }
