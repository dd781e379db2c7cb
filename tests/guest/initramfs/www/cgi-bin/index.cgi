#!/bin/sh
# GET / on the guest's port 80 (busybox httpd runs /cgi-bin/index.cgi for a directory without index.html).
# GET /?ping=A.B.C.D also pings that address from the guest (one echo request, 2 s): tests egress through the
# pod's NAT. GET /?disk=sdb adds the first bytes of that disk (read from the device, not the guest's page cache);
# GET /?write=vdb-MARKER writes MARKER at the start of disk vdb and flushes it to the device.
echo "Content-Type: text/plain"
echo ""
echo "KUBEVIRT-RS-GUEST-UP"
echo "hostname=$(hostname)"
echo "uptime=$(cut -d' ' -f1 /proc/uptime)"
echo "kernel=$(uname -r)"
echo "cpus=$(grep -c '^processor' /proc/cpuinfo)"
echo "memory-kib=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)"
echo "addresses=$(ip -4 -o addr show scope global | awk '{ printf "%s%s", sep, $4; sep = "," }')"
# busybox httpd listens on a dual-stack socket: IPv4 clients show up as [::ffff:A.B.C.D].
client=${REMOTE_ADDR:-}
client=${client#[}
client=${client%]}
echo "client=${client#::ffff:}"
case "${QUERY_STRING:-}" in
  disk=*)
    # GET /?disk=sdb: the first 64 bytes of that disk (printable characters only): what a hotplugged disk holds.
    dev=${QUERY_STRING#disk=}
    case "$dev" in
      '' | *[!a-z]*) echo "disk=invalid" ;;
      *)
        # Dropped caches: the bytes come from the device (after a migration: from the storage the target opened).
        sync
        echo 3 >/proc/sys/vm/drop_caches
        echo "disk=$dev head=$(dd if="/dev/$dev" bs=64 count=1 2>/dev/null | tr -cd 'A-Za-z0-9._-')"
        ;;
    esac
    ;;
  write=*)
    # GET /?write=vdb-MARKER: MARKER (letters, digits, dots, dashes) at the start of /dev/vdb, flushed.
    arg=${QUERY_STRING#write=}
    dev=${arg%%-*}
    marker=${arg#*-}
    case "$dev:$marker" in
      :* | *: | *[!a-z:A-Z0-9.-]*) echo "write=invalid" ;;
      *)
        if [ -b "/dev/$dev" ] && printf '%s' "$marker" | dd of="/dev/$dev" conv=notrunc,fsync 2>/dev/null; then
          echo "write=ok $dev $marker"
        else
          echo "write=failed $dev"
        fi
        ;;
    esac
    ;;
  ping=*)
    target=${QUERY_STRING#ping=}
    case "$target" in
      '' | *[!0-9.]*) echo "ping=invalid" ;;
      *) if ping -c 1 -W 2 "$target" >/dev/null 2>&1; then echo "ping=ok $target"; else echo "ping=failed $target"; fi ;;
    esac
    ;;
esac
