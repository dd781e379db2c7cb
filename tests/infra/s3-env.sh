#!/usr/bin/env bash
# S3 peer for the importer end-to-end tests (tests/import_s3.rs): s3s-fs (a real S3 server over a directory).
#
#   tests/infra/s3-env.sh up       install s3s-fs 0.14.1 if missing (cached in ~/.cache/kubevirt-rs/s3s, ~4 min),
#                                  seed bucket "images" from the corpus (needs `tests/infra/import-env.sh up` first),
#                                  start s3s-fs on 127.0.0.1:19002, write tests/work/s3-env (KEY=VALUE)
#   tests/infra/s3-env.sh down     stop s3s-fs (by pid file), remove tests/work/s3-env
#   tests/infra/s3-env.sh status
#
# Both are idempotent. s3s-fs stores objects as plain files <root>/<bucket>/<key>, so seeding is a copy; an
# `<root>/.bucket-…object-….internal.json` sidecar holding the MD5 ETag is written next to it so that s3s-fs does
# not hash the whole object on every (ranged) GET. `up` checks the seeding with a SigV4-signed curl HEAD.
# Override with S3_ENV_PORT, S3S_ROOT (install root), IMPORT_ENV_WORK (work directory).
# shellcheck source=tests/infra/common.sh
. "$(dirname "$0")/common.sh"
S3DIR=$WORK/s3
DATA=$S3DIR/data
PIDFILE=$S3DIR/s3s-fs.pid
LOGFILE=$S3DIR/s3s-fs.log
ENVFILE=$WORK/s3-env

S3S_VERSION=0.14.1   # newer releases need a newer rustc than 1.95
S3S_ROOT=${S3S_ROOT:-$HOME/.cache/kubevirt-rs/s3s}
S3S_BIN=$S3S_ROOT/bin/s3s-fs
PORT=${S3_ENV_PORT:-19002}
ENDPOINT=http://127.0.0.1:$PORT
ACCESS_KEY=importer-test-ak
SECRET_KEY=importer-test-sk-9f3c1e
BUCKET=images

# bucket key  <-  corpus file
OBJECTS=(
  "base.raw|base.raw"
  "base.raw.xz|base.raw.xz"
  "q2-v3.qcow2|q2-v3.qcow2"
  "q2-zlib.qcow2|q2-zlib.qcow2"
  "q2-reverse.qcow2|q2-reverse.qcow2"
  "q2-cs-4k-zlib.qcow2|q2-cs-4k-zlib.qcow2"
  "nested/dir/q2 v3 copy.qcow2|q2-v3.qcow2"
)
# Generated (not from the corpus): incompressible bytes, big enough for the resume test to pause the server mid-body.
RESUME_KEY=resume-192m.raw
RESUME_SIZE=$((192 * 1024 * 1024))

ensure_s3s() {
  if [ -x "$S3S_BIN" ] && "$S3S_BIN" --version 2>/dev/null | grep -q "$S3S_VERSION"; then
    return
  fi
  command -v cargo >/dev/null 2>&1 || die "cargo is needed to install s3s-fs"
  log "installing s3s-fs $S3S_VERSION into $S3S_ROOT (about 4 minutes)"
  cargo install "s3s-fs@$S3S_VERSION" --locked --features binary --root "$S3S_ROOT" >&2
  [ -x "$S3S_BIN" ] || die "s3s-fs was not installed at $S3S_BIN"
}

b64url() { printf '%s' "$1" | base64 -w0 | tr '+/' '-_' | tr -d '='; }

seed() {
  [ -f "$CORPUS/manifest.tsv" ] || die "no corpus at $CORPUS: run tests/infra/import-env.sh up first"
  mkdir -p "$DATA/$BUCKET"
  local o key src dst md5
  for o in "${OBJECTS[@]}"; do
    key=${o%%|*}
    src=$CORPUS/${o#*|}
    dst=$DATA/$BUCKET/$key
    [ -f "$src" ] || die "corpus file $src missing"
    if [ ! -f "$dst" ] || ! cmp -s "$src" "$dst"; then
      mkdir -p "$(dirname "$dst")"
      cp "$src" "$dst.tmp" && mv "$dst.tmp" "$dst"
    fi
    md5=$(md5sum <"$dst" | cut -d' ' -f1)
    sidecar "$key" "$md5"
  done
  dst=$DATA/$BUCKET/$RESUME_KEY
  if [ ! -f "$dst" ] || [ "$(stat -c %s "$dst")" != "$RESUME_SIZE" ]; then
    (set +o pipefail
      openssl enc -aes-128-ctr -pass pass:s3-resume -nosalt -pbkdf2 -iter 1 </dev/zero 2>/dev/null |
        head -c "$RESUME_SIZE" >"$dst.tmp")
    mv "$dst.tmp" "$dst"
  fi
  sidecar "$RESUME_KEY" "$(md5sum <"$dst" | cut -d' ' -f1)"
}

# sidecar KEY MD5: s3s-fs's internal info (the ETag), so that it does not hash the object on every request.
sidecar() { printf '{"e_tag":"%s"}' "$2" >"$DATA/.bucket-$(b64url "$BUCKET").object-$(b64url "$1").internal.json"; }

pid() { pidfile_pid "$PIDFILE"; }
running() { pidfile_alive "$PIDFILE"; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# s3curl ARGS...: a SigV4-signed request.
s3curl() {
  curl -sS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" "$@"
}

start() {
  if running; then
    log "s3s-fs already running (pid $(pid)) on $ENDPOINT"
    return
  fi
  rm -f "$PIDFILE"
  port_busy "$PORT" && die "port $PORT is in use by another process (set S3_ENV_PORT)"
  nohup "$S3S_BIN" --host 127.0.0.1 --port "$PORT" --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" "$DATA" \
    >"$LOGFILE" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local i
  for i in $(seq 1 100); do
    port_busy "$PORT" && break
    running || die "s3s-fs exited (see $LOGFILE)"
    sleep 0.1
  done
  port_busy "$PORT" || die "s3s-fs did not come up on $ENDPOINT (see $LOGFILE)"
  log "s3s-fs started (pid $(pid)) on $ENDPOINT, data in $DATA"
}

verify() {
  local o key want got code
  for o in "${OBJECTS[@]}" "$RESUME_KEY|"; do
    key=${o%%|*}
    want=$(stat -c %s "$DATA/$BUCKET/$key")
    got=$(s3curl -I -o /dev/null -w '%{http_code} %header{content-length}' "$ENDPOINT/$BUCKET/$(sed 's/ /%20/g' <<<"$key")") ||
      die "HEAD $key failed"
    [ "$got" = "200 $want" ] || die "HEAD $BUCKET/$key: expected '200 $want', got '$got' (see $LOGFILE)"
  done
  code=$(curl -sS -o /dev/null -w '%{http_code}' "$ENDPOINT/$BUCKET/base.raw")
  [ "$code" = 403 ] || die "anonymous GET should be refused with 403, got $code"
}

write_env() {
  cat >"$ENVFILE.tmp" <<EOF
# generated by tests/infra/s3-env.sh up; read by tests/import_s3.rs
S3_ENDPOINT=$ENDPOINT
S3_ACCESS_KEY=$ACCESS_KEY
S3_SECRET_KEY=$SECRET_KEY
S3_BUCKET=$BUCKET
S3_DATA=$DATA
S3_LOG=$LOGFILE
S3_PID=$(pid)
S3_RESUME_KEY=$RESUME_KEY
S3S_BIN=$S3S_BIN
EOF
  mv "$ENVFILE.tmp" "$ENVFILE"
}

stop() { stop_pidfile "$PIDFILE" s3s-fs TERM KILL; }

env_up() {
  command -v curl >/dev/null 2>&1 || die "curl is needed"
  ensure_s3s
  seed
  start
  verify
  write_env
  log "ready: $ENVFILE"
}

env_down() {
  rm -f "$ENVFILE"
  stop
}

env_status() {
  if running; then echo "s3s-fs running (pid $(pid)) on $ENDPOINT"; else echo "s3s-fs not running"; fi
  [ -f "$ENVFILE" ] && cat "$ENVFILE" || echo "no $ENVFILE"
}

env_main "$@"
