# Shared by the import benchmarks (benches/import.sh, benches/floor.sh); sourced, not run.
#
#   bench_setup WORKDIR   tools, the release importer ($IMP), the corpus in WORKDIR/www, nginx on 127.0.0.1:$PORT
#                         serving it ($URL); stopped on exit. Sets W, IMP, PORT, URL, REPS.
#   measure NAME CMD ...  BENCH_REPS interleaved rounds; each run's seconds in $W/t.NAME, its CPU seconds (user +
#                         system) in $W/c.NAME, our peak RSS in $W/rss
#   median NAME           the median seconds of NAME's runs (median_cpu NAME: of their CPU seconds)
#   ratio A B, verdict RATIO TARGET, row NAME OURS ANCHOR [TARGET]   the result table ($ROWS)
#
# The corpus (cached in WORKDIR/www): a 2 GiB raw disk with 1 GiB of data (64 MiB stripes alternating with
# 64 MiB holes: pseudo-random, holes, base64 text, holes, ...) and from it a qcow2, a zlib-compressed qcow2,
# raw.xz and raw.zst.

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# bench_corpus DIR: makes the corpus in DIR/www unless it is there.
bench_corpus() {
  local d=$1 i
  [ -s "$d/www/disk.raw.zst" ] && return 0
  echo "making the corpus in $d ..."
  mkdir -p "$d/www"
  truncate -s 2G "$d/www/disk.raw"
  { openssl enc -aes-128-ctr -pass pass:bench -nosalt -pbkdf2 </dev/zero 2>/dev/null | head -c 512M >"$d/rand.bin"; } || true
  { base64 -w 100 <"$d/rand.bin" | head -c 512M >"$d/text.bin"; } || true
  # data in 64 MiB stripes alternating with holes: 0-64M random, 128-192M text, ...
  for i in 0 1 2 3 4 5 6 7; do
    dd if="$d/rand.bin" of="$d/www/disk.raw" bs=1M count=64 skip=$((i*64)) seek=$((i*256)) conv=notrunc status=none
    dd if="$d/text.bin" of="$d/www/disk.raw" bs=1M count=64 skip=$((i*64)) seek=$((i*256+128)) conv=notrunc status=none
  done
  rm -f "$d/rand.bin" "$d/text.bin"
  qemu-img convert -O qcow2 "$d/www/disk.raw" "$d/www/disk.qcow2"
  qemu-img convert -c -O qcow2 "$d/www/disk.raw" "$d/www/disk-zlib.qcow2"
  xz -T2 -1 -k -c "$d/www/disk.raw" >"$d/www/disk.raw.xz"
  zstd -q -T2 -3 -c "$d/www/disk.raw" >"$d/www/disk.raw.zst"
}

# bench_nginx DIR PORT: nginx serving DIR/www on 127.0.0.1:PORT (sendfile, no logs), stopped on exit.
bench_nginx() {
  local d=$1 port=$2
  mkdir -p "$d/nginx"
  cat >"$d/nginx/nginx.conf" <<NGX
user $(id -un); daemon on; pid $d/nginx/nginx.pid; error_log $d/nginx/error.log; worker_processes 1;
events {}
http {
  access_log off; sendfile on; default_type application/octet-stream;
  client_body_temp_path $d/nginx/b; proxy_temp_path $d/nginx/p; fastcgi_temp_path $d/nginx/f;
  uwsgi_temp_path $d/nginx/u; scgi_temp_path $d/nginx/s;
  server { listen 127.0.0.1:$port; root $d/www; }
}
NGX
  nginx -c "$d/nginx/nginx.conf"
  trap 'nginx -s quit -c "'"$d"'/nginx/nginx.conf" 2>/dev/null || true; rm -rf "'"$d"'"/out* "'"$d"'"/data' EXIT
}

bench_setup() {
  W=$1
  export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/kubevirt-rs/target}
  PORT=${BENCH_PORT:-18180}
  REPS=${BENCH_REPS:-5}
  mkdir -p "$W"
  "$BENCH_ROOT/scripts/install-deps.sh"
  command -v /usr/bin/time >/dev/null || { apt-get install -y -qq time >/dev/null; }
  (cd "$BENCH_ROOT" && cargo build --release -q -p importer)
  IMP=$CARGO_TARGET_DIR/release/importer
  bench_corpus "$W"
  bench_nginx "$W" "$PORT"
  URL=http://127.0.0.1:$PORT
  rm -f "$W/rss" "$W"/t.* "$W"/c.*
  ROWS=()
}

# measure NAME CMD [NAME CMD]...: REPS rounds; each round runs every command once, in turn, so slow phases of
# this shared machine hit ours and the anchors alike. Records each run's seconds in $W/t.NAME, its CPU seconds
# in $W/c.NAME and the peak RSS of our runs (names starting with "ours").
measure() {
  local args=("$@") i name t rss u s
  for _ in $(seq "$REPS"); do
    for ((i = 0; i < ${#args[@]}; i += 2)); do
      name=${args[i]}
      rm -f "$W/out.raw" "$W/out.floor" "$W/scratch.img" "$W/data/disk.img"; sync
      /usr/bin/time -f '%e %M %U %S' -o "$W/time" bash -c "${args[i + 1]}" >/dev/null 2>"$W/err" \
        || { cat "$W/err" >&2; echo "FAILED: $name" >&2; exit 1; }
      read -r t rss u s <"$W/time"
      echo "$t" >>"$W/t.$name"
      awk -v u="$u" -v s="$s" 'BEGIN { print u + s }' >>"$W/c.$name"
      case "$name" in ours*) echo "$rss" >>"$W/rss" ;; esac
    done
  done
}
# median NAME: the median seconds of NAME's runs.
median() { sort -n "$W/t.$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
median_cpu() { sort -n "$W/c.$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
verdict() { awk -v r="$1" -v t="$2" 'BEGIN { print (t == "" ? "" : (r <= t ? "ok" : "MISSED")) }'; }
row() { ROWS+=("$(printf '%-20s %8ss %8ss %6s  %-6s %s' "$1" "$2" "$3" "$(ratio "$2" "$3")" "${4:-}" "$(verdict "$(ratio "$2" "$3")" "${4:-}")")"); }
# peak_rss_row: the largest RSS of our runs against the 64 MiB budget.
peak_rss_row() {
  local maxrss
  maxrss=$(sort -n "$W/rss" | tail -1)
  printf '%-20s %7sMiB %9s %6s  %-6s %s\n' "peak RSS (ours)" "$((maxrss / 1024))" "" "" "64MiB" \
    "$( [ $((maxrss / 1024)) -le 64 ] && echo ok || echo MISSED)"
}
