#!/usr/bin/env bash
# Real peers for the importer end-to-end tests (tests/import_*.rs).
#
#   tests/infra/import-env.sh up     generate the image corpus (cached), TLS material, htpasswd, start nginx,
#                                    write tests/work/env (read by tests/src/lib.rs)
#   tests/infra/import-env.sh down   stop nginx (by pid file), detach leftover loop devices of tests/work,
#                                    remove tests/work/env
#   tests/infra/import-env.sh status
#
# Everything lives under tests/work (git-ignored). The corpus is regenerated only when this script or the
# qemu-img version changes (stamp = sha256 of both). Ports can be moved with IMPORT_ENV_PORT_BASE (default 18080):
# plain = base, no-range = base+1, redirects = base+2, basic auth = base+3, TLS = base+363 (18443).
# shellcheck source=tests/infra/common.sh
. "$(dirname "$0")/common.sh"
NGX=$WORK/nginx
TLS=$WORK/tls
WWW=$WORK/www
OUT=$WORK/out
ENVFILE=$WORK/env

BASE_PORT=${IMPORT_ENV_PORT_BASE:-18080}
P_PLAIN=$BASE_PORT
P_NORANGE=$((BASE_PORT + 1))
P_REDIRECT=$((BASE_PORT + 2))
P_AUTH=$((BASE_PORT + 3))
P_TLS=$((BASE_PORT + 363))
AUTH_USER=importer
AUTH_PASSWORD=s3cret-Pa55

need_tools() {
  local t missing=()
  for t in qemu-img qemu-io nginx htpasswd openssl curl xz zstd bzip2 gzip losetup dd truncate sha256sum stat; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  [ ${#missing[@]} -eq 0 ] || die "missing tools: ${missing[*]} (run scripts/install-deps.sh)"
}

# ---------------------------------------------------------------------------------------------------------------
# corpus
# ---------------------------------------------------------------------------------------------------------------
KiB=1024
MiB=$((1024 * 1024))
GiB=$((1024 * MiB))

# rnd SEED BYTES: deterministic pseudo-random bytes on stdout.
rnd() {
  (set +o pipefail
    openssl enc -aes-128-ctr -pass "pass:$1" -nosalt -pbkdf2 -iter 1 </dev/zero 2>/dev/null | head -c "$2")
}
# txt BYTES: deterministic text.
txt() {
  (set +o pipefail
    seq 1 100000000 | sed 's/^/line: the quick brown fox jumps over the lazy dog, number /' | head -c "$1")
}
# fill BYTE BYTES: constant non-zero byte (octal escape, e.g. 377).
fill() { (set +o pipefail; tr '\000' "\\$1" </dev/zero | head -c "$2"); }
zeros() { head -c "$1" </dev/zero; }
# put FILE OFFSET: write stdin into FILE at OFFSET without truncating.
put() { dd of="$1" bs=64K seek="$2" oflag=seek_bytes conv=notrunc iflag=fullblock status=none; }

BASE_SIZE=$((24 * MiB + 7 * 512))   # not a multiple of any cluster size > 512
SMALL_SIZE=$((5 * MiB + 3072))

make_base() { # the main test disk: data, text, holes, explicit zeros, data at the very end
  local f=$1
  rm -f "$f"; truncate -s "$BASE_SIZE" "$f"
  printf 'KUBEVIRT-RS IMPORTER TEST DISK (base)\n' | put "$f" 0
  rnd base-a $((MiB - 4096)) | put "$f" 4096
  txt $((200 * KiB)) | put "$f" "$MiB"
  rnd base-b $((MiB + 4097)) | put "$f" $((4 * MiB + 512))
  printf 'Z' | put "$f" $((6 * MiB + 12345))
  rnd base-c 4096 | put "$f" $((8 * MiB - 2048))
  fill 377 $((2 * MiB)) | put "$f" $((10 * MiB))
  rnd base-d $((64 * KiB)) | put "$f" $((16 * MiB))
  zeros "$MiB" | put "$f" $((18 * MiB))           # allocated zeros: must come out sparse
  rnd base-e 4096 | put "$f" $((BASE_SIZE - 4096))
}

make_small() { # for the cluster-size matrix and the hostile bases
  local f=$1
  rm -f "$f"; truncate -s "$SMALL_SIZE" "$f"
  printf 'KUBEVIRT-RS IMPORTER TEST DISK (small)\n' | put "$f" 0
  rnd small-a $((60 * KiB)) | put "$f" 4096
  rnd small-b $((300 * KiB)) | put "$f" $((MiB + 777))
  printf 'Q' | put "$f" $((3 * MiB + 5))
  fill 252 $((100 * KiB)) | put "$f" $((4 * MiB - 50 * KiB))
  rnd small-c 3000 | put "$f" $((SMALL_SIZE - 3000))
}

make_tiny() { # ~100 KiB compressed: for the rate-limited (progress) location
  local f=$1
  rm -f "$f"; truncate -s "$MiB" "$f"
  printf 'KUBEVIRT-RS IMPORTER TEST DISK (tiny)\n' | put "$f" 0
  rnd tiny-a $((100 * KiB)) | put "$f" $((128 * KiB))
}

make_big3g() {
  local f=$1
  rm -f "$f"; truncate -s $((3 * GiB)) "$f"
  printf 'KUBEVIRT-RS IMPORTER TEST DISK (big3g)\n' | put "$f" 0
  rnd big3-a $((256 * KiB)) | put "$f" $((512 * MiB + 4097))
  rnd big3-b $((300 * KiB)) | put "$f" $((GiB - 100 * KiB))
  rnd big3-c "$MiB" | put "$f" $((2 * GiB + MiB))
  rnd big3-d $((64 * KiB)) | put "$f" $((3 * GiB - 64 * KiB))
}

make_big5g() { # data above 4 GiB and across the 4 GiB boundary
  local f=$1
  rm -f "$f"; truncate -s $((5 * GiB)) "$f"
  printf 'KUBEVIRT-RS IMPORTER TEST DISK (big5g)\n' | put "$f" 0
  rnd big5-a $((512 * KiB)) | put "$f" $((GiB + 12345))
  rnd big5-b $((256 * KiB)) | put "$f" $((4 * GiB - 128 * KiB))
  rnd big5-c "$MiB" | put "$f" $((4 * GiB + 12345))
  rnd big5-d $((64 * KiB)) | put "$f" $((5 * GiB - 64 * KiB))
}

qconv() { qemu-img convert -q -f raw "$@"; }
qio() { local img=$1; shift; local a=(); for c in "$@"; do a+=(-c "$c"); done; qemu-io -f qcow2 "${a[@]}" "$img" >/dev/null; }

# Manifest: one line per corpus entry, tab separated.
#   name format compression virtual_size cluster_size sha256 size alloc expected inner
# format/virtual_size/cluster_size come from `qemu-img info` of the inner (decompressed) image; sha256, size and
# alloc (allocated bytes) describe `qemu-img convert -O raw <inner>`; expected is the kept convert output (only for
# multi-GiB images, else "-"); inner is the uncompressed corpus file.
ENTRIES=()
add() { ENTRIES+=("$1|$2|$3"); }   # add NAME INNER COMPRESSION

json_field() { sed -n "s/^    \"$1\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}\$/\1/p" | head -n1; }

expected_for() { # expected_for INNER -> sets E_* (cached per inner)
  local inner=$1 key
  key=$(basename "$inner")
  if [ -f "$C/.exp/$key.info" ]; then . "$C/.exp/$key.info"; return; fi
  local info
  info=$(qemu-img info --output=json "$inner")
  E_FORMAT=$(json_field format <<<"$info")
  E_VSIZE=$(json_field virtual-size <<<"$info")
  E_CLUSTER=$(json_field cluster-size <<<"$info"); E_CLUSTER=${E_CLUSTER:--}
  local out=$C/.exp/$key.raw
  qemu-img convert -q -O raw "$inner" "$out"
  E_SIZE=$(stat -c %s "$out")
  E_ALLOC=$(( $(stat -c '%b * %B' "$out") ))
  if [ "$E_SIZE" -gt $((GiB)) ]; then
    mkdir -p "$C/expected"; mv "$out" "$C/expected/$key.raw"
    E_SHA=-; E_EXPECTED=expected/$key.raw
  else
    E_SHA=$(openssl dgst -sha256 -r "$out" | cut -d' ' -f1); E_EXPECTED=-
    rm -f "$out"
  fi
  printf 'E_FORMAT=%s\nE_VSIZE=%s\nE_CLUSTER=%s\nE_SIZE=%s\nE_ALLOC=%s\nE_SHA=%s\nE_EXPECTED=%s\n' \
    "$E_FORMAT" "$E_VSIZE" "$E_CLUSTER" "$E_SIZE" "$E_ALLOC" "$E_SHA" "$E_EXPECTED" >"$C/.exp/$key.info"
}

gen_corpus() {
  C=$1
  mkdir -p "$C/.exp" "$C/hostile"
  cd "$C"

  # --- raw sources ------------------------------------------------------------------------------------------------
  make_base base.raw;   add base.raw base.raw none
  make_small small.raw; add small.raw small.raw none
  make_tiny tiny.raw;   add tiny.raw tiny.raw none
  make_big3g big3g.raw; add big3g.raw big3g.raw none
  # ISO 9660: a primary volume descriptor at sector 16 (qemu-img probes it as raw)
  cp --sparse=always base.raw base.iso
  { printf '\001CD001\001\000'; printf 'LINUX%*s' 27 ''; printf 'IMPORTER_TEST%*s' 19 ''; } | put base.iso 32768
  add base.iso base.iso none

  # --- qcow2 --------------------------------------------------------------------------------------------------------
  qconv -O qcow2 -o compat=0.10 base.raw q2-v2.qcow2;                       add q2-v2.qcow2 q2-v2.qcow2 none
  qconv -O qcow2 -o compat=1.1 base.raw q2-v3.qcow2;                        add q2-v3.qcow2 q2-v3.qcow2 none
  qconv -c -O qcow2 base.raw q2-zlib.qcow2;                                 add q2-zlib.qcow2 q2-zlib.qcow2 none
  qconv -c -O qcow2 -o compat=0.10 base.raw q2-v2-zlib.qcow2;               add q2-v2-zlib.qcow2 q2-v2-zlib.qcow2 none
  qconv -c -O qcow2 -o compression_type=zstd base.raw q2-zstd.qcow2;        add q2-zstd.qcow2 q2-zstd.qcow2 none
  # zero clusters: preallocated zero (offset kept), unmapped zero, zero flag over an unallocated range
  cp q2-v3.qcow2 q2-zero.qcow2
  qio q2-zero.qcow2 'write -z 0 128k' 'write -z -u 4M 1M' 'write -z 20M 1M' 'write -z 10M 64k'
  add q2-zero.qcow2 q2-zero.qcow2 none
  # extended L2 entries (subclusters): partial subcluster writes, zero subclusters
  qconv -O qcow2 -o extended_l2=on base.raw q2-extl2.qcow2
  qio q2-extl2.qcow2 'write -P 0x44 20482k 2k' 'write -z 2k 4k' 'write -P 0x45 22m 6k' 'write -z -u 4100k 8k'
  add q2-extl2.qcow2 q2-extl2.qcow2 none
  qconv -O qcow2 -o extended_l2=on,cluster_size=2M small.raw q2-extl2-2m.qcow2
  qio q2-extl2-2m.qcow2 'write -P 0x46 2112k 64k' 'write -z 64k 128k'
  add q2-extl2-2m.qcow2 q2-extl2-2m.qcow2 none
  # internal snapshots: the active layer differs from both snapshots (COW'd clusters, refcount > 1)
  cp q2-v3.qcow2 q2-snap.qcow2
  qemu-img snapshot -c s1 q2-snap.qcow2
  qio q2-snap.qcow2 'write -P 0x11 1M 64k' 'write -P 0x22 5M 4k' 'write -P 0x23 23M 512'
  qemu-img snapshot -c s2 q2-snap.qcow2
  qio q2-snap.qcow2 'write -P 0x33 0 512' 'write -z 10M 1M' 'write -P 0x34 12M 128k'
  add q2-snap.qcow2 q2-snap.qcow2 none
  # clusters allocated in reverse virtual order (physical order != virtual order), plus compressed clusters
  qemu-img create -q -f qcow2 q2-reverse.qcow2 16M
  rnd rev-src $((64 * KiB)) >"$C/.exp/rev.src"
  local i cmds=()
  for i in $(seq 15 -1 0); do cmds+=("write -P $((i + 1)) $((i * MiB + i * 4096)) 64k"); done
  cmds+=("write -c -s $C/.exp/rev.src 14M 64k" "write -s $C/.exp/rev.src 3M 64k" "write -c -P 0x77 256k 64k")
  qio q2-reverse.qcow2 "${cmds[@]}"
  add q2-reverse.qcow2 q2-reverse.qcow2 none
  # metadata preallocation: allocated clusters that read as zero
  qemu-img create -q -f qcow2 -o preallocation=metadata q2-prealloc.qcow2 "$BASE_SIZE"
  qemu-img convert -q -n -f raw -O qcow2 base.raw q2-prealloc.qcow2
  add q2-prealloc.qcow2 q2-prealloc.qcow2 none
  # every cluster size from 512 B to 2 MiB, plus compressed clusters at the extremes
  local cs
  for cs in 512 1k 2k 4k 8k 16k 32k 64k 128k 256k 512k 1M 2M; do
    qconv -O qcow2 -o cluster_size=$cs small.raw "q2-cs-$cs.qcow2"; add "q2-cs-$cs.qcow2" "q2-cs-$cs.qcow2" none
  done
  qconv -c -O qcow2 -o cluster_size=512 small.raw q2-cs-512-zlib.qcow2;    add q2-cs-512-zlib.qcow2 q2-cs-512-zlib.qcow2 none
  qconv -c -O qcow2 -o cluster_size=4k small.raw q2-cs-4k-zlib.qcow2;      add q2-cs-4k-zlib.qcow2 q2-cs-4k-zlib.qcow2 none
  qconv -c -O qcow2 -o cluster_size=2M,compression_type=zstd small.raw q2-cs-2M-zstd.qcow2
  add q2-cs-2M-zstd.qcow2 q2-cs-2M-zstd.qcow2 none

  # --- other formats ------------------------------------------------------------------------------------------------
  qconv -O vmdk base.raw vmdk-sparse.vmdk;                                    add vmdk-sparse.vmdk vmdk-sparse.vmdk none
  qconv -O vmdk -o subformat=streamOptimized base.raw vmdk-stream.vmdk;       add vmdk-stream.vmdk vmdk-stream.vmdk none
  qconv -O vpc base.raw vpc-dyn.vpc;                                          add vpc-dyn.vpc vpc-dyn.vpc none
  qconv -O vpc -o subformat=fixed base.raw vpc-fixed.vpc;                     add vpc-fixed.vpc vpc-fixed.vpc none
  qconv -O vhdx base.raw vhdx-dyn.vhdx;                                       add vhdx-dyn.vhdx vhdx-dyn.vhdx none
  qconv -O vhdx -o block_size=1M base.raw vhdx-1m.vhdx;                       add vhdx-1m.vhdx vhdx-1m.vhdx none
  qconv -O vhdx -o subformat=fixed base.raw vhdx-fixed.vhdx;                  add vhdx-fixed.vhdx vhdx-fixed.vhdx none
  qconv -O vdi base.raw vdi-dyn.vdi;                                          add vdi-dyn.vdi vdi-dyn.vdi none
  qconv -O vdi -o static=on base.raw vdi-static.vdi;                          add vdi-static.vdi vdi-static.vdi none

  # --- multi-GiB sparse -----------------------------------------------------------------------------------------------
  make_big5g big5g.raw.tmp
  qconv -O qcow2 big5g.raw.tmp big5g.qcow2; rm -f big5g.raw.tmp;          add big5g.qcow2 big5g.qcow2 none

  # --- compression wrappers -------------------------------------------------------------------------------------------
  gzip -1 -n -c base.raw >base.raw.gz;                                   add base.raw.gz base.raw gzip
  xz -1 -T1 -c base.raw >base.raw.xz;                                    add base.raw.xz base.raw xz
  zstd -q -3 -c base.raw >base.raw.zst;                                  add base.raw.zst base.raw zstd
  bzip2 -1 -c base.raw >base.raw.bz2;                                    add base.raw.bz2 base.raw bzip2
  xz -1 -T2 --block-size=1MiB -c base.raw >base-xzmb.raw.xz;             add base-xzmb.raw.xz base.raw xz
  # multi-member / multi-frame / multi-stream files (concatenations are valid for all three tools)
  head -c $((7 * MiB + 3)) base.raw >"$C/.exp/part1"; tail -c +$((7 * MiB + 4)) base.raw >"$C/.exp/part2"
  { gzip -1 -n -c "$C/.exp/part1"; gzip -1 -n -c "$C/.exp/part2"; } >base-multi.raw.gz;   add base-multi.raw.gz base.raw gzip
  { zstd -q -1 -c "$C/.exp/part1"; zstd -q -1 -c "$C/.exp/part2"; } >base-multi.raw.zst; add base-multi.raw.zst base.raw zstd
  { bzip2 -1 -c "$C/.exp/part1"; bzip2 -1 -c "$C/.exp/part2"; } >base-multi.raw.bz2;     add base-multi.raw.bz2 base.raw bzip2
  rm -f "$C/.exp/part1" "$C/.exp/part2"
  gzip -1 -n -c q2-v3.qcow2 >q2-v3.qcow2.gz;                             add q2-v3.qcow2.gz q2-v3.qcow2 gzip
  xz -1 -T2 -c q2-v3.qcow2 >q2-v3.qcow2.xz;                              add q2-v3.qcow2.xz q2-v3.qcow2 xz
  zstd -q -3 -c q2-v3.qcow2 >q2-v3.qcow2.zst;                            add q2-v3.qcow2.zst q2-v3.qcow2 zstd
  bzip2 -1 -c q2-v3.qcow2 >q2-v3.qcow2.bz2;                              add q2-v3.qcow2.bz2 q2-v3.qcow2 bzip2
  xz -1 -T2 -c q2-zstd.qcow2 >q2-zstd.qcow2.xz;                          add q2-zstd.qcow2.xz q2-zstd.qcow2 xz
  gzip -1 -n -c q2-snap.qcow2 >q2-snap.qcow2.gz;                         add q2-snap.qcow2.gz q2-snap.qcow2 gzip
  gzip -1 -n -c vmdk-sparse.vmdk >vmdk-sparse.vmdk.gz;                   add vmdk-sparse.vmdk.gz vmdk-sparse.vmdk gzip
  xz -1 -T2 -c vmdk-stream.vmdk >vmdk-stream.vmdk.xz;                    add vmdk-stream.vmdk.xz vmdk-stream.vmdk xz
  bzip2 -1 -c vpc-dyn.vpc >vpc-dyn.vpc.bz2;                              add vpc-dyn.vpc.bz2 vpc-dyn.vpc bzip2
  zstd -q -3 -c vhdx-dyn.vhdx >vhdx-dyn.vhdx.zst;                        add vhdx-dyn.vhdx.zst vhdx-dyn.vhdx zstd
  xz -1 -T2 -c vdi-dyn.vdi >vdi-dyn.vdi.xz;                              add vdi-dyn.vdi.xz vdi-dyn.vdi xz
  bzip2 -1 -c base.iso >base.iso.bz2;                                    add base.iso.bz2 base.iso bzip2
  gzip -1 -n -c base.iso >base.iso.gz;                                   add base.iso.gz base.iso gzip
  gzip -1 -n -c tiny.raw >tiny.raw.gz;                                   add tiny.raw.gz tiny.raw gzip
  zstd -q -1 -T2 -c big3g.raw >big3g.raw.zst;                            add big3g.raw.zst big3g.raw zstd
  xz -1 -T2 -c big5g.qcow2 >big5g.qcow2.xz;                              add big5g.qcow2.xz big5g.qcow2 xz

  # --- hostile bases (patched further by tests/src/hostile.rs) -------------------------------------------------------
  local H=$C/hostile
  qconv -O qcow2 small.raw "$H/base.qcow2"
  qconv -O qcow2 -o compat=0.10 small.raw "$H/base-v2.qcow2"
  qemu-img create -q -f qcow2 --object secret,id=s0,data=hostile -o encrypt.format=aes,encrypt.key-secret=s0 \
    "$H/aes.qcow2" "$SMALL_SIZE" 2>/dev/null || rm -f "$H/aes.qcow2"   # tests patch crypt_method=1 if absent
  for i in $(seq 1 20); do
    qemu-img create -q -f qcow2 --object secret,id=s0,data=hostile \
      -o encrypt.format=luks,encrypt.key-secret=s0,encrypt.iter-time=10,encrypt.hash-alg=sha512 "$H/luks.qcow2" "$SMALL_SIZE" 2>/dev/null && break
    rm -f "$H/luks.qcow2"
  done
  [ -f "$H/luks.qcow2" ] || die "qemu-img could not create a LUKS qcow2"

  # --- expected outputs + manifest ----------------------------------------------------------------------------------
  local e name inner comp
  {
    printf 'name\tformat\tcompression\tvirtual_size\tcluster_size\tsha256\tsize\talloc\texpected\tinner\n'
    for e in "${ENTRIES[@]}"; do
      IFS='|' read -r name inner comp <<<"$e"
      expected_for "$C/$inner"
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$E_FORMAT" "$comp" "$E_VSIZE" "$E_CLUSTER" \
        "$E_SHA" "$E_SIZE" "$E_ALLOC" "$E_EXPECTED" "$inner"
    done
  } >"$C/manifest.tsv"
  rm -rf "$C/.exp"
  cd - >/dev/null
}

# Images that name other files by absolute path: made in the final corpus location so the paths exist
# (the importer must refuse them because of the feature, not because a file is missing).
gen_hostile_refs() {
  local H=$1/hostile
  qemu-img create -q -f qcow2 -b "$H/base.qcow2" -F qcow2 "$H/backing.qcow2"
  qio "$H/backing.qcow2" 'write -P 0x61 1M 64k'
  qemu-img create -q -f qcow2 -o "data_file=$H/datafile.qcow2.data" "$H/datafile.qcow2" "$SMALL_SIZE"
  qio "$H/datafile.qcow2" 'write -P 0x62 0 1M'
  chmod -R a+rX "$1"
}

corpus_stamp() { { sha256sum <"$HERE/$(basename "${BASH_SOURCE[0]}")"; qemu-img --version | head -n1; } | sha256sum | cut -d' ' -f1; }

ensure_corpus() {
  local stamp
  stamp=$(corpus_stamp)
  if [ -f "$CORPUS/.stamp" ] && [ "$(cat "$CORPUS/.stamp")" = "$stamp" ] && [ -f "$CORPUS/manifest.tsv" ]; then
    log "corpus up to date ($CORPUS)"
    return
  fi
  log "generating corpus into $CORPUS"
  local t0=$SECONDS
  rm -rf "$CORPUS.tmp" "$CORPUS"
  gen_corpus "$CORPUS.tmp"
  mv "$CORPUS.tmp" "$CORPUS"
  gen_hostile_refs "$CORPUS"
  echo "$stamp" >"$CORPUS/.stamp"
  log "corpus generated in $((SECONDS - t0)) s: $(($(wc -l <"$CORPUS/manifest.tsv") - 1)) entries, $(du -sh "$CORPUS" | cut -f1) on disk"
}

# ---------------------------------------------------------------------------------------------------------------
# TLS material, htpasswd, nginx
# ---------------------------------------------------------------------------------------------------------------
make_ca() { # make_ca DIR CN
  mkdir -p "$1"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 -subj "/CN=$2" \
    -keyout "$1/ca.key" -out "$1/ca.crt" 2>/dev/null
}

ensure_tls() {
  if [ -f "$TLS/server.crt" ] && [ -f "$TLS/ca/ca.crt" ] && [ -f "$TLS/other-ca/ca.crt" ] &&
     openssl x509 -checkend 86400 -noout -in "$TLS/server.crt" >/dev/null 2>&1; then
    return
  fi
  log "creating test CA and server certificate"
  rm -rf "$TLS"; mkdir -p "$TLS/private"
  make_ca "$TLS/private/ca" "importer-test-ca"
  make_ca "$TLS/private/other-ca" "importer-test-other-ca"
  openssl req -newkey rsa:2048 -nodes -sha256 -subj "/CN=127.0.0.1" \
    -keyout "$TLS/server.key" -out "$TLS/private/server.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' \
    >"$TLS/private/server.ext"
  openssl x509 -req -sha256 -days 825 -in "$TLS/private/server.csr" -CA "$TLS/private/ca/ca.crt" \
    -CAkey "$TLS/private/ca/ca.key" -CAcreateserial -CAserial "$TLS/private/ca.srl" \
    -extfile "$TLS/private/server.ext" -out "$TLS/server.crt" 2>/dev/null
  # --cert-dir directories: every file in them is a CA certificate
  mkdir -p "$TLS/ca" "$TLS/other-ca"
  cp "$TLS/private/ca/ca.crt" "$TLS/ca/ca.crt"
  cp "$TLS/private/other-ca/ca.crt" "$TLS/other-ca/ca.crt"
  chmod 600 "$TLS/server.key"
}

nginx_pid() { pidfile_pid "$NGX/nginx.pid"; }
nginx_running() { pidfile_alive "$NGX/nginx.pid"; }
# Graceful shutdown (QUIT), TERM if it lingers.
stop_nginx() { stop_pidfile "$NGX/nginx.pid" nginx QUIT TERM; }

write_nginx_conf() {
  mkdir -p "$NGX"/tmp-{body,proxy,fastcgi,uwsgi,scgi} "$WWW" "$OUT"
  ln -sfn "$CORPUS" "$WWW/corpus"
  ln -sfn "$OUT" "$WWW/out"
  htpasswd -bc "$NGX/htpasswd" "$AUTH_USER" "$AUTH_PASSWORD" 2>/dev/null
  chmod 644 "$NGX/htpasswd"
  chmod a+rX "$WORK" "$WWW" "$OUT" "$NGX"
  local tmp="client_body_temp_path $NGX/tmp-body; proxy_temp_path $NGX/tmp-proxy; fastcgi_temp_path $NGX/tmp-fastcgi; uwsgi_temp_path $NGX/tmp-uwsgi; scgi_temp_path $NGX/tmp-scgi;"
  cat >"$NGX/nginx.conf" <<EOF
# generated by tests/infra/import-env.sh
# Workers run as the invoking user: the checkout may sit below a directory other users cannot traverse.
user $(id -un);
daemon on;
pid $NGX/nginx.pid;
error_log $NGX/error.log;
worker_processes 2;
events { worker_connections 512; }
http {
  log_format t '\$remote_addr [\$time_local] "\$request" \$status \$body_bytes_sent port=\$server_port '
               'range="\$http_range" xtest="\$http_x_test" xother="\$http_x_other" user="\$remote_user" '
               'ua="\$http_user_agent"';
  access_log $NGX/access.log t;
  $tmp
  default_type application/octet-stream;
  sendfile on;
  keepalive_timeout 30;

  # plain, with Range
  server {
    listen 127.0.0.1:$P_PLAIN;
    root $WWW;
    # rate-limited (progress tests)
    location /slow/ { alias $CORPUS/; limit_rate 100k; }
    # requires the extra header "X-Test: yes"
    location /hdr/ { if (\$http_x_test != "yes") { return 403; } alias $CORPUS/; }
    # served as text/html
    location /html/ { alias $CORPUS/; types { } default_type text/html; }
    # HEAD refused, GET works
    location /nohead/ { if (\$request_method = HEAD) { return 403; } alias $CORPUS/; }
  }

  # no Range support
  server {
    listen 127.0.0.1:$P_NORANGE;
    root $WWW;
    max_ranges 0;
  }

  # redirects: /r1/X -> plain /X ; /r2/X -> /r1/X -> plain /X ; /loop/ redirects to itself
  server {
    listen 127.0.0.1:$P_REDIRECT;
    location ~ ^/r1/(.*)\$ { return 302 http://127.0.0.1:$P_PLAIN/\$1; }
    location ~ ^/r2/(.*)\$ { return 302 http://127.0.0.1:$P_REDIRECT/r1/\$1; }
    location ~ ^/r301/(.*)\$ { return 301 http://127.0.0.1:$P_PLAIN/\$1; }
    location /loop/ { return 302 http://127.0.0.1:$P_REDIRECT/loop/again; }
  }

  # basic auth; /redir/X redirects (same origin, before the auth check) to /X
  server {
    listen 127.0.0.1:$P_AUTH;
    root $WWW;
    auth_basic "importer-test";
    auth_basic_user_file $NGX/htpasswd;
    location ~ ^/redir/(.*)\$ { return 302 http://127.0.0.1:$P_AUTH/\$1; }
  }

  # TLS with the test CA
  server {
    listen 127.0.0.1:$P_TLS ssl;
    ssl_certificate $TLS/server.crt;
    ssl_certificate_key $TLS/server.key;
    root $WWW;
  }
}
EOF
}

wait_http() { local i; for i in $(seq 1 100); do curl -fsS -o /dev/null "$@" 2>/dev/null && return 0; sleep 0.1; done; return 1; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_nginx() {
  stop_nginx
  local p
  for p in $P_PLAIN $P_NORANGE $P_REDIRECT $P_AUTH $P_TLS; do
    port_busy "$p" && die "port $p is in use by another process (set IMPORT_ENV_PORT_BASE)"
  done
  write_nginx_conf
  nginx -t -q -c "$NGX/nginx.conf" -e "$NGX/error.log" || die "nginx config test failed (see $NGX/error.log)"
  nginx -c "$NGX/nginx.conf" -e "$NGX/error.log"
  wait_http "http://127.0.0.1:$P_PLAIN/corpus/manifest.tsv" || die "nginx did not come up (see $NGX/error.log)"
  wait_http --cacert "$TLS/ca/ca.crt" "https://127.0.0.1:$P_TLS/corpus/manifest.tsv" || die "nginx TLS not up"
  log "nginx started (pid $(nginx_pid)) on 127.0.0.1 ports $P_PLAIN $P_NORANGE $P_REDIRECT $P_AUTH $P_TLS"
}

write_env() {
  cat >"$ENVFILE.tmp" <<EOF
# generated by tests/infra/import-env.sh up; read by tests/src/lib.rs
WORK=$WORK
CORPUS=$CORPUS
MANIFEST=$CORPUS/manifest.tsv
HOSTILE=$CORPUS/hostile
OUT=$OUT
HTTP_PLAIN=http://127.0.0.1:$P_PLAIN
HTTP_NORANGE=http://127.0.0.1:$P_NORANGE
HTTP_REDIRECT=http://127.0.0.1:$P_REDIRECT
HTTP_AUTH=http://127.0.0.1:$P_AUTH
HTTPS=https://127.0.0.1:$P_TLS
CA_DIR=$TLS/ca
OTHER_CA_DIR=$TLS/other-ca
AUTH_USER=$AUTH_USER
AUTH_PASSWORD=$AUTH_PASSWORD
ACCESS_LOG=$NGX/access.log
NGINX_PID=$(nginx_pid)
EOF
  mv "$ENVFILE.tmp" "$ENVFILE"
}

detach_loops() { # loop devices whose backing file is under $WORK (left by a crashed test)
  local line dev file
  while IFS= read -r line; do
    dev=${line%%:*}
    file=$(sed -n 's/^[^(]*(\(.*\))[^)]*$/\1/p' <<<"$line")
    case "$file" in "$WORK"/*) losetup -d "$dev" 2>/dev/null && log "detached $dev ($file)" ;; esac
  done < <(losetup -a 2>/dev/null || true)
}

env_up() {
  need_tools
  ensure_corpus
  ensure_tls
  detach_loops
  rm -rf "$OUT"; mkdir -p "$OUT"
  start_nginx
  write_env
  log "ready: $ENVFILE"
}

env_down() {
  rm -f "$ENVFILE"
  stop_nginx
  detach_loops
}

env_status() {
  if nginx_running; then echo "nginx running (pid $(nginx_pid))"; else echo "nginx not running"; fi
  [ -f "$ENVFILE" ] && cat "$ENVFILE" || echo "no $ENVFILE"
}

env_main "$@"
