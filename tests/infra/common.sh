# Shared preamble of the test-peer scripts tests/infra/{import,s3,registry}-env.sh. Sourced, not executed.
#
# Strict mode; HERE (this directory), TESTS, WORK (IMPORT_ENV_WORK or tests/work, created, absolute) and CORPUS
# (the image corpus of `import-env.sh up`); log/die tagged with the script's name; pid-file helpers; and
# env_main, the command line every script offers: `up`, `down`, `status` (env_up, env_down, env_status).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTS=$(dirname "$HERE")
WORK=${IMPORT_ENV_WORK:-$TESTS/work}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
CORPUS=$WORK/corpus
ENV_NAME=$(basename "$0" .sh)

log() { printf '[%s] %s\n' "$ENV_NAME" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pidfile_pid FILE: the PID recorded in FILE, or nothing.
pidfile_pid() { [ -f "$1" ] && cat "$1" 2>/dev/null || true; }
# pidfile_alive FILE: the process recorded in FILE runs.
pidfile_alive() { local p; p=$(pidfile_pid "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# stop_pidfile FILE NAME SIGNAL [LAST_SIGNAL]: sends SIGNAL to the process recorded in FILE, waits up to 5 s for it
# to exit, then sends LAST_SIGNAL (if given) to one still running; removes FILE. Only ever signals that PID.
stop_pidfile() {
  local p i
  p=$(pidfile_pid "$1")
  if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
    kill "-$3" "$p" 2>/dev/null || true
    for i in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if [ -n "${4:-}" ] && kill -0 "$p" 2>/dev/null; then kill "-$4" "$p" 2>/dev/null || true; sleep 0.5; fi
    log "$2 (pid $p) stopped"
  fi
  rm -f "$1"
}

# env_main "$@": runs env_up, env_down or env_status for `up`, `down` or `status`; anything else is a usage error.
env_main() {
  case "${1:-}" in
    up | down | status) "env_$1" ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
  esac
}
