#!/bin/bash
# deploy/launcher/masquerade.sh — KubeVirt's masquerade binding in a launcher pod's network namespace
# (../shared/specs/kubevirt.md §7.2, infra/real-components.md §12). Reference for the Rust port (node agent + launcher).
#
#   masquerade.sh up [--pod-if eth0] [--ports 80,443/tcp,53/udp] [--mac 02:..] [--hostname NAME] [--tap-owner 107]
#   masquerade.sh down
#
# `up`, run inside the pod's network namespace, after the CNI has configured the pod interface:
#   1. bridge k6t-<pod-if> with 10.0.2.1/24 (the guest's gateway), MTU of the pod interface
#   2. tap0, owned by uid/gid --tap-owner (QEMU's user; libvirt opens it: <target dev='tap0' managed='no'/>),
#      enslaved to the bridge
#   3. net.ipv4.ip_forward=1 and route_localnet=1 (namespaced sysctls)
#   4. nftables table `ip kubevirt_nat` (upstream's chains): traffic arriving on the pod interface for the listed
#      ports (all ports when --ports is empty) is DNATed to the guest 10.0.2.2, so are connections to 127.0.0.1
#      from inside the pod (SNAT to 10.0.2.1 so the guest can answer); the guest's own traffic is masqueraded out
#      of the pod interface (the pod IP)
#   5. busybox udhcpd on the bridge: one lease, 10.0.2.2/24, router 10.0.2.1, the pod's nameservers and search
#      domains from /etc/resolv.conf, MTU, hostname (--hostname), static for --mac when given
# and prints one line `masquerade: pod <if> <ip>, guest 10.0.2.2 via k6t-<if>/tap0, ports <list|all>`.
# Idempotent only in the sense that a second `up` fails on the existing bridge; `down` removes what `up` made
# (the namespace going away removes it too).
#
# Needs CAP_NET_ADMIN in the namespace (links, nftables, sysctls under /proc/sys/net) and a writable
# /run/kubevirt-rs/net; upstream splits this the same way: the privileged part (1-4) runs in virt-handler, the DHCP
# server (5) in the unprivileged launcher. Tools: ip (iproute2), nft (nftables 1.0.6), busybox (udhcpd).
set -euo pipefail

GUEST_IP=10.0.2.2
GATEWAY_IP=10.0.2.1
PREFIX=24
NETMASK=255.255.255.0
TAP=tap0
STATE=/run/kubevirt-rs/net
TABLE=kubevirt_nat

die() { echo "masquerade: $*" >&2; exit 1; }

pod_if=eth0 ports="" mac="" hostname="" tap_owner=107
parse() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --pod-if) pod_if=$2; shift 2 ;;
      --ports) ports=$2; shift 2 ;;
      --mac) mac=$2; shift 2 ;;
      --hostname) hostname=$2; shift 2 ;;
      --tap-owner) tap_owner=$2; shift 2 ;;
      *) die "unknown argument $1" ;;
    esac
  done
}

# nft_ruleset: upstream's layout (pkg/network/setup, masquerade): prerouting/output jump to KUBEVIRT_PREINBOUND
# (DNAT to the guest), postrouting masquerades the guest and jumps to KUBEVIRT_POSTINBOUND (SNAT of pod-local
# clients). nft 1.0.6 rejects `dnat to X }` on one line, hence one statement per line.
nft_ruleset() {
  local bridge=$1 p proto port
  cat <<EOF
table ip $TABLE {
  chain prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "$pod_if" counter jump KUBEVIRT_PREINBOUND
  }
  chain output {
    type nat hook output priority -100; policy accept;
EOF
  if [ -z "$ports" ]; then
    echo "    ip daddr 127.0.0.1 counter dnat to $GUEST_IP"
  else
    for p in ${ports//,/ }; do
      port=${p%/*}; proto=tcp; [ "$p" = "$port" ] || proto=${p#*/}
      echo "    ip daddr 127.0.0.1 $proto dport $port counter dnat to $GUEST_IP"
    done
  fi
  cat <<EOF
  }
  chain postrouting {
    type nat hook postrouting priority srcnat; policy accept;
    ip saddr $GUEST_IP counter masquerade
    oifname "$bridge" counter jump KUBEVIRT_POSTINBOUND
  }
  chain KUBEVIRT_PREINBOUND {
EOF
  if [ -z "$ports" ]; then
    echo "    counter dnat to $GUEST_IP"
  else
    for p in ${ports//,/ }; do
      port=${p%/*}; proto=tcp; [ "$p" = "$port" ] || proto=${p#*/}
      case "$proto" in tcp | udp) ;; *) die "unsupported protocol $proto in --ports" ;; esac
      case "$port" in '' | *[!0-9]*) die "bad port '$port' in --ports" ;; esac
      echo "    $proto dport $port counter dnat to $GUEST_IP"
    done
  fi
  cat <<EOF
  }
  chain KUBEVIRT_POSTINBOUND {
    ip saddr 127.0.0.1 counter snat to $GATEWAY_IP
  }
}
EOF
}

up() {
  parse "$@"
  local bridge=k6t-$pod_if mtu pod_ip dns search
  [ -d "/sys/class/net/$pod_if" ] || die "no interface $pod_if in this network namespace"
  mtu=$(cat "/sys/class/net/$pod_if/mtu")
  pod_ip=$(ip -4 -o addr show dev "$pod_if" | awk '{ print $4; exit }')
  [ -n "$pod_ip" ] || die "$pod_if has no IPv4 address"
  mkdir -p "$STATE"

  ip link add "$bridge" type bridge
  ip link set "$bridge" mtu "$mtu"
  ip addr add "$GATEWAY_IP/$PREFIX" dev "$bridge"
  ip tuntap add dev "$TAP" mode tap user "$tap_owner" group "$tap_owner"
  ip link set "$TAP" mtu "$mtu" master "$bridge"
  ip link set "$TAP" up
  ip link set "$bridge" up

  echo 1 >/proc/sys/net/ipv4/ip_forward
  echo 1 >/proc/sys/net/ipv4/conf/all/route_localnet
  nft_ruleset "$bridge" >"$STATE/nft.conf"
  nft -f "$STATE/nft.conf"

  dns=$(awk '$1 == "nameserver" && $2 ~ /^[0-9.]+$/ { printf "%s ", $2 }' /etc/resolv.conf 2>/dev/null || true)
  search=$(awk '$1 == "search" { for (i = 2; i <= NF; i++) printf "%s ", $i }' /etc/resolv.conf 2>/dev/null || true)
  {
    echo "interface $bridge"
    echo "start $GUEST_IP"
    echo "end $GUEST_IP"
    echo "max_leases 1"
    echo "auto_time 0"
    echo "lease_file $STATE/udhcpd.leases"
    echo "pidfile $STATE/udhcpd.pid"
    echo "opt subnet $NETMASK"
    echo "opt router $GATEWAY_IP"
    echo "opt mtu $mtu"
    echo "opt lease 86400"
    [ -z "$dns" ] || echo "opt dns $dns"
    [ -z "$search" ] || echo "opt search $search"
    [ -z "$hostname" ] || echo "opt hostname $hostname"
    [ -z "$mac" ] || echo "static_lease $mac $GUEST_IP"
  } >"$STATE/udhcpd.conf"
  : >"$STATE/udhcpd.leases"
  # -a 0: no ARP probe before offering (the only address is the guest's; the probe would delay the offer by 2 s).
  busybox udhcpd -a 0 "$STATE/udhcpd.conf"
  echo "masquerade: pod $pod_if $pod_ip, guest $GUEST_IP via $bridge/$TAP, ports ${ports:-all}"
}

down() {
  parse "$@"
  local pid
  if [ -f "$STATE/udhcpd.pid" ]; then
    pid=$(cat "$STATE/udhcpd.pid")
    [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
    rm -f "$STATE/udhcpd.pid"
  fi
  nft delete table ip "$TABLE" 2>/dev/null || true
  ip link del "$TAP" 2>/dev/null || true
  ip link del "k6t-$pod_if" 2>/dev/null || true
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) shift; down "$@" ;;
  *) die "usage: $0 up|down [--pod-if IF] [--ports P[/PROTO],...] [--mac MAC] [--hostname NAME] [--tap-owner UID]" ;;
esac
