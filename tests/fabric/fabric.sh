#!/usr/bin/env bash
# A lossy multipath Ethernet fabric in network namespaces, for MetaRoCE tests
# and benchmarks. Source it for the functions, or run it as a CLI:
#
#   fabric.sh up N RATE_MBIT [QUEUE_KB]   build the fabric (N parallel links)
#   fabric.sh down                        remove it (also leftovers of a crashed run)
#   fabric.sh run NS CMD...               run CMD in namespace NS (a, ra, rb, b or a full name)
#   fabric.sh loss PPM [LINK...]          random loss, parts per million, on links (default all)
#   fabric.sh ecn PPS BURST [LINK...]     CE-mark ECN-capable packets above PPS packets/s
#   fabric.sh blackhole LINK | unblackhole LINK
#   fabric.sh linkdown LINK | linkup LINK
#   fabric.sh rate LINK RATE_MBIT [QUEUE_KB] another rate for one link (both directions)
#   fabric.sh clear                       remove every fault
#   fabric.sh route SPORT DPORT [PROTO]   which link A->B traffic with these ports takes (IPv4)
#   fabric.sh status                      qdisc / nft counters
#
# The commands that change the fabric (up, down, the faults) exit 1 at once
# while another run (bench/fabric, a fabric test) holds its lock; bad
# arguments exit 2.
#
# Topology (addresses private to the namespaces; the root namespace is never touched),
# dual-stack: each IPv4 address 10.77.X.Y/24 has an IPv6 twin fd00:77:X::Y/64
# (where the kernel lacks IPv6 or its settings below, fab_up warns and builds
# the IPv4 half alone: FAB_IPV6=0):
#
#   mr-a  a0 10.77.0.1/24 (+ .11-.14 for MPTCP subflows)     fd00:77:0::1/64
#     |
#   mr-ra r0 10.77.0.2/24     l1..lN 10.77.(10+i).1/24   --- N parallel links ---
#         (fd00:77:0::2)             (fd00:77:(10+i)::1)     tbf RATE per egress,
#                                                            nft faults in forward
#   mr-rb l1..lN 10.77.(10+i).2/24     r0 10.77.1.2/24
#                (fd00:77:(10+i)::2)      (fd00:77:1::2)
#     |
#   mr-b  b0 10.77.1.1/24                                     fd00:77:1::1/64
#
# The routers hold multipath routes (nexthop via each link), IPv4 and IPv6,
# with fib_multipath_hash_policy=3 / fib_multipath_hash_fields=0x37
# (addresses, protocol, ports; for IPv6 not the flow label, 0x08). For IPv4
# `ip route get ... sport X dport Y` predicts the link; for IPv6 it does not
# (Linux hashes a forwarded IPv6 packet's fields under policy 3 once more,
# jhash_2words(outer, inner), but not a route query's), so fab_route and
# fab_routes answer for IPv4 only. The faults (nftables, family inet) apply
# to both; the MPTCP source-address pinning is IPv4 only.
# IPv6 DAD is off in the namespaces: addresses are usable at once.
# MTU 9000 everywhere (MetaRoCE packets carry 4 KiB payloads). GSO is split at
# the hosts (gso_max_segs 1) so that faults apply per wire packet.
#
# Environment: MR_FAB_PREFIX (default "mr-") names the namespaces;
# MR_FAB_FAMILY (4, the default, or 6) the address family of the route
# fab_link_routed looks at.

FAB_PREFIX=${MR_FAB_PREFIX:-mr-}
FAB_NS_A=${FAB_PREFIX}a
FAB_NS_RA=${FAB_PREFIX}ra
FAB_NS_RB=${FAB_PREFIX}rb
FAB_NS_B=${FAB_PREFIX}b
FAB_ADDR_A=10.77.0.1
FAB_ADDR_B=10.77.1.1
FAB_ADDR6_A=fd00:77:0::1
FAB_ADDR6_B=fd00:77:1::1
FAB_FAMILY=${MR_FAB_FAMILY:-4}
FAB_MTU=9000
FAB_NFT_TABLE=mrfab

fab_log() { echo "fabric: $*" >&2; }

# fab_addr a|b [FAMILY]: host A's or B's address, IPv4 or IPv6 (default
# FAB_FAMILY).
fab_addr() {
  case "${2:-$FAB_FAMILY}:${1:?a or b}" in
    4:a) echo "$FAB_ADDR_A" ;; 4:b) echo "$FAB_ADDR_B" ;;
    6:a) echo "$FAB_ADDR6_A" ;; 6:b) echo "$FAB_ADDR6_B" ;;
    *) fab_log "fab_addr: no address for host '$1', family '${2:-$FAB_FAMILY}'"; return 1 ;;
  esac
}

# fab_ns NAME: a, ra, rb, b -> namespace name; anything else is returned as is.
fab_ns() {
  case "$1" in
    a) echo "$FAB_NS_A" ;; ra) echo "$FAB_NS_RA" ;; rb) echo "$FAB_NS_RB" ;; b) echo "$FAB_NS_B" ;;
    *) echo "$1" ;;
  esac
}

# fab_exec NS CMD...: runs CMD inside a fabric namespace.
fab_exec() {
  local ns
  ns=$(fab_ns "$1")
  shift
  ip netns exec "$ns" "$@"
}

# fab_available: 0 when we are root and can create network namespaces.
fab_available() {
  [[ $EUID -eq 0 ]] || { echo "not root"; return 1; }
  command -v ip >/dev/null || { echo "iproute2 (ip) not installed"; return 1; }
  command -v tc >/dev/null || { echo "tc not installed"; return 1; }
  command -v nft >/dev/null || { echo "nftables (nft) not installed"; return 1; }
  local probe="${FAB_PREFIX}probe-$$"
  ip netns add "$probe" 2>/dev/null || { echo "ip netns unavailable"; return 1; }
  if ! ip netns exec "$probe" ip link set lo up 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null
    echo "ip netns exec unavailable"
    return 1
  fi
  if ! ip netns exec "$probe" nft add table inet probe 2>/dev/null; then
    ip netns del "$probe" 2>/dev/null
    echo "nftables unavailable in namespaces"
    return 1
  fi
  ip netns del "$probe"
  return 0
}

# fab_lock [SECONDS]: takes this prefix's fabric lock for as long as the calling
# shell lives (an flock on a file in /run/lock), waiting up to SECONDS (600).
# Two runs with the same MR_FAB_PREFIX would otherwise tear down and rebuild
# each other's namespaces mid-test; with it the second waits. bench/fabric
# takes the same lock.
# SECONDS 0: no waiting, 1 at once (the CLI's commands that change the fabric).
fab_lock() {
  local dir=/run/lock
  [[ -d $dir && -w $dir ]] || dir=${TMPDIR:-/tmp}
  exec {FAB_LOCK_FD}>"$dir/metaroce-fabric-${FAB_PREFIX}lock" || return 1
  if ! flock -n "$FAB_LOCK_FD"; then
    if [[ ${1:-600} == 0 ]]; then
      fab_log "another run (bench/fabric or a fabric test) holds the ${FAB_PREFIX} fabric;" \
        "not touching it: wait for that run to end, or use another MR_FAB_PREFIX"
      return 1
    fi
    fab_log "another run holds the ${FAB_PREFIX} fabric; waiting (up to ${1:-600} s)"
    flock -w "${1:-600}" "$FAB_LOCK_FD" || return 1
  fi
}

# fab_links: number of parallel links of the running fabric.
fab_links() {
  fab_exec ra ip -o link show 2>/dev/null | grep -c ': l[0-9]*@' || true
}

fab_down() {
  local ns
  # Kill processes left in our namespaces (only those; by pid).
  for ns in "$FAB_NS_A" "$FAB_NS_RA" "$FAB_NS_RB" "$FAB_NS_B" $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${FAB_PREFIX}probe-"); do
    if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns"; then
      local pids
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [[ -n "$pids" ]] && kill $pids 2>/dev/null || true
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  return 0
}

# fab_up_args N RATE_MBIT [QUEUE_KB]: 0 when fab_up can take them; otherwise
# says which is wrong. Checked before fab_up tears anything down: a typo must
# neither remove a running fabric nor leave a half-built one (tc used to
# refuse a rate of "abc" after the namespaces were made).
fab_up_args() {
  local n=${1-} rate=${2-} qkb=${3-400}
  if [[ ! $n =~ ^[0-9]{1,2}$ ]] || ((10#$n < 1 || 10#$n > 16)); then
    fab_log "links must be a whole number 1..16, not '$n'"
    return 1
  fi
  if [[ ! $rate =~ ^[0-9]{1,6}$ ]] || ((10#$rate < 1)); then
    fab_log "rate must be a whole number of Mbit/s, 1..999999, not '$rate'"
    return 1
  fi
  if [[ ! $qkb =~ ^[0-9]{1,7}$ ]] || ((10#$qkb < 1)); then
    fab_log "queue must be a whole number of KB, 1..9999999, not '$qkb'"
    return 1
  fi
}

# fab_up N RATE_MBIT [QUEUE_KB]
fab_up() {
  fab_up_args "$@" || return 1
  local n=$((10#$1)) rate=$((10#$2)) qkb=$((10#${3:-400}))
  fab_down
  local ns
  for ns in "$FAB_NS_A" "$FAB_NS_RA" "$FAB_NS_RB" "$FAB_NS_B"; do
    ip netns add "$ns" || return 1
    fab_exec "$ns" ip link set lo up
    # IPv6 without DAD, before any veth exists so that every one inherits it.
    fab_exec "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 2>/dev/null
  done
  # Host links (veth created directly in the namespaces: no names in the root namespace).
  ip link add a0 netns "$FAB_NS_A" mtu $FAB_MTU type veth peer r0 netns "$FAB_NS_RA" mtu $FAB_MTU || return 1
  ip link add b0 netns "$FAB_NS_B" mtu $FAB_MTU type veth peer r0 netns "$FAB_NS_RB" mtu $FAB_MTU || return 1
  fab_exec a ip addr add $FAB_ADDR_A/24 dev a0
  local k
  for k in 11 12 13 14; do fab_exec a ip addr add 10.77.0.$k/24 dev a0; done
  fab_exec ra ip addr add 10.77.0.2/24 dev r0
  fab_exec b ip addr add $FAB_ADDR_B/24 dev b0
  fab_exec rb ip addr add 10.77.1.2/24 dev r0
  # Split GSO/TSO at the hosts: faults and shaping then see wire packets.
  fab_exec a ip link set a0 gso_max_segs 1 2>/dev/null || fab_log "warning: cannot set gso_max_segs on a0"
  fab_exec b ip link set b0 gso_max_segs 1 2>/dev/null || fab_log "warning: cannot set gso_max_segs on b0"
  fab_exec a ip link set a0 up
  fab_exec b ip link set b0 up
  fab_exec ra ip link set r0 up
  fab_exec rb ip link set r0 up
  fab_exec a ip route add default via 10.77.0.2
  fab_exec b ip route add default via 10.77.1.2

  local i nh_a="" nh_b=""
  for ((i = 1; i <= n; i++)); do
    ip link add l$i netns "$FAB_NS_RA" mtu $FAB_MTU type veth peer l$i netns "$FAB_NS_RB" mtu $FAB_MTU || return 1
    fab_exec ra ip addr add 10.77.$((10 + i)).1/24 dev l$i
    fab_exec rb ip addr add 10.77.$((10 + i)).2/24 dev l$i
    fab_exec ra ip link set l$i up
    fab_exec rb ip link set l$i up
    nh_a+=" nexthop via 10.77.$((10 + i)).2 dev l$i weight 1"
    nh_b+=" nexthop via 10.77.$((10 + i)).1 dev l$i weight 1"
  done
  # Every setting checked: without the hash on ports (Linux >= 5.12) every
  # flow, and every MetaRoCE path, takes one link; A still reaches B, and
  # a benchmark measured a quarter of the fabric as the transport's result.
  local -a sysctls=(net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=3
    net.ipv4.fib_multipath_hash_fields=0x37 net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
    net.ipv4.conf.all.ignore_routes_with_linkdown=1)
  for dev in r0 $(seq -f 'l%g' 1 "$n"); do
    sysctls+=("net.ipv4.conf.$dev.rp_filter=0" "net.ipv4.conf.$dev.ignore_routes_with_linkdown=1")
  done
  for ns in ra rb; do
    fab_exec $ns sysctl -qw "${sysctls[@]}" || {
      fab_log "cannot set the routers' forwarding and multipath hash settings (hash_fields needs Linux >= 5.12)"
      return 1
    }
  done
  # shellcheck disable=SC2086
  fab_exec ra ip route add 10.77.1.0/24 $nh_a || return 1
  # shellcheck disable=SC2086
  fab_exec rb ip route add 10.77.0.0/24 $nh_b || return 1
  # MPTCP best case: subflow source addresses 10.77.0.11.. pinned to link 1..
  # in both directions (falls back to the multipath route when the link is down).
  # Checked: an unpinned subflow is no longer MPTCP's best case.
  for ((i = 1; i <= n && i <= 4; i++)); do
    if ! fab_exec ra ip route add 10.77.1.0/24 via 10.77.$((10 + i)).2 dev l$i table $((100 + i)) ||
      ! fab_exec ra ip rule add from 10.77.0.$((10 + i)) iif r0 lookup $((100 + i)) pref $((1000 + i)) ||
      ! fab_exec rb ip route add 10.77.0.$((10 + i))/32 via 10.77.$((10 + i)).1 dev l$i table $((100 + i)) ||
      ! fab_exec rb ip rule add to 10.77.0.$((10 + i)) iif r0 lookup $((100 + i)) pref $((1000 + i)); then
      fab_log "cannot pin the MPTCP subflow address 10.77.0.$((10 + i)) to link $i"
      return 1
    fi
  done
  # Rate and queue limits on each router egress of each link.
  local burst=$((rate * 1000 / 8 / 250))  # 4 ms of tokens, at least 64 KiB
  ((burst < 65536)) && burst=65536
  for ((i = 1; i <= n; i++)); do
    for ns in ra rb; do
      fab_exec $ns tc qdisc replace dev l$i root tbf rate ${rate}mbit burst $burst limit $((qkb * 1024)) || return 1
    done
  done
  # Fault chains (empty for now).
  for ns in ra rb; do
    fab_exec $ns nft -f - <<EOF || return 1
table inet $FAB_NFT_TABLE {
  chain blackhole { }
  chain loss { }
  chain cemark { }
  chain forward {
    type filter hook forward priority 0; policy accept;
    jump blackhole
    jump loss
    jump cemark
  }
}
EOF
  done
  # Warm up neighbours so the first packets are not lost to ARP, and check
  # that A reaches B (a TCP connect to a closed port: refused = reachable).
  for ((i = 1; i <= n; i++)); do fab_probe ra 10.77.$((10 + i)).2 >/dev/null || true; done
  if ! fab_probe a $FAB_ADDR_B; then
    fab_log "A cannot reach B"
    return 1
  fi
  FAB_IPV6=0
  if fab_up6 "$n"; then
    FAB_IPV6=1
  else
    fab_log "warning: no IPv6 fabric (IPv4 only)"
  fi
  FAB_N=$n
  FAB_RATE=$rate
  return 0
}

# fab_up6 N: the IPv6 half of fab_up's fabric over its links: the IPv4
# one's addresses' twins, routes and router settings. 1 where the kernel
# lacks any of it (fab_up then builds an IPv4 fabric, FAB_IPV6=0).
fab_up6() {
  local n=${1:?links} i ns dev nh_a="" nh_b="" addr_a="" addr_b=""
  local -a sysctls
  fab_exec a ip -6 addr add $FAB_ADDR6_A/64 dev a0 nodad || return 1
  fab_exec b ip -6 addr add $FAB_ADDR6_B/64 dev b0 nodad || return 1
  fab_exec a ip -6 route add default via fd00:77:0::2 || return 1
  fab_exec b ip -6 route add default via fd00:77:1::2 || return 1
  # One exec per router for its addresses and one for its settings (an exec
  # takes up to 0.1 s on a loaded machine).
  addr_a="addr add fd00:77:0::2/64 dev r0 nodad"$'\n'
  addr_b="addr add fd00:77:1::2/64 dev r0 nodad"$'\n'
  for ((i = 1; i <= n; i++)); do
    addr_a+="addr add fd00:77:$((10 + i))::1/64 dev l$i nodad"$'\n'
    addr_b+="addr add fd00:77:$((10 + i))::2/64 dev l$i nodad"$'\n'
    nh_a+=" nexthop via fd00:77:$((10 + i))::2 dev l$i weight 1"
    nh_b+=" nexthop via fd00:77:$((10 + i))::1 dev l$i weight 1"
  done
  fab_exec ra ip -6 -batch - <<<"$addr_a" || return 1
  fab_exec rb ip -6 -batch - <<<"$addr_b" || return 1
  sysctls=(net.ipv6.conf.all.forwarding=1 net.ipv6.fib_multipath_hash_policy=3
    net.ipv6.fib_multipath_hash_fields=0x37 net.ipv6.conf.all.ignore_routes_with_linkdown=1)
  for dev in r0 $(seq -f 'l%g' 1 "$n"); do
    # keep_addr_on_down: addresses stay when the link goes down (fab_link_down).
    sysctls+=("net.ipv6.conf.$dev.ignore_routes_with_linkdown=1" "net.ipv6.conf.$dev.keep_addr_on_down=1")
  done
  for ns in ra rb; do
    fab_exec $ns sysctl -qw "${sysctls[@]}" || return 1
  done
  # shellcheck disable=SC2086
  fab_exec ra ip -6 route add fd00:77:1::/64 $nh_a || return 1
  # shellcheck disable=SC2086
  fab_exec rb ip -6 route add fd00:77:0::/64 $nh_b || return 1
  # Neighbour discovery done before the first packets, and A reaches B.
  for ((i = 1; i <= n; i++)); do fab_probe ra fd00:77:$((10 + i))::2 >/dev/null || true; done
  if ! fab_probe a $FAB_ADDR6_B; then
    fab_log "A cannot reach B over IPv6"
    return 1
  fi
}

# fab_probe NS ADDR: 0 when ADDR answers a TCP connect (refused counts) within 2 s.
fab_probe() {
  local out
  out=$(fab_exec "$1" timeout 2 bash -c "exec 3<>/dev/tcp/$2/9" 2>&1) && return 0
  [[ $out == *refused* ]]
}

# fab_link_check LINK...: 0 when each is a link of the running fabric;
# otherwise 2, saying which. The fault rules match a link by its name, so
# nft took one the fabric lacks and dropped nothing: `blackhole 7` on 4
# links exited 0.
fab_link_check() {
  local n i
  n=$(fab_links)
  for i in "$@"; do
    if [[ ! $i =~ ^[0-9]{1,2}$ ]] || ((10#$i < 1 || 10#$i > n)); then
      fab_log "no link '$i': the fabric has links 1..$n"
      return 2
    fi
  done
}

# fab_whole NAME VALUE MAX: 0 when VALUE is a whole number 0..MAX; otherwise
# 2, saying so. Arithmetic read "abc" as 0 and "-5" as no loss, and `loss
# 1.5` (percent, say) failed the test: each flushed the loss and exited 0.
fab_whole() {
  if [[ ! $2 =~ ^[0-9]{1,9}$ ]] || ((10#$2 > $3)); then
    fab_log "$1 must be a whole number 0..$3, not '$2'"
    return 2
  fi
}

# fab_link_list [LINK...]: the given links (2 when one is not the fabric's),
# or all of them.
fab_link_list() {
  if (($# > 0)); then
    fab_link_check "$@" || return 2
    echo "$@"
  else
    seq 1 "$(fab_links)"
  fi
}

# fab_loss PPM [LINK...]: random loss on the links (both directions); PPM 0 removes it.
# 1 when any nft command fails or there is no link to put loss on: a caller
# would otherwise measure a loss-free fabric as a lossy one; 2 for a PPM
# that is no whole number 0..1000000 or a link the fabric lacks.
fab_loss() {
  local ppm=${1:?ppm}
  shift
  local ns i links
  fab_whole "loss (parts per million)" "$ppm" 1000000 || return 2
  ppm=$((10#$ppm))
  links=$(fab_link_list "$@") || return 2
  if ((ppm > 0)) && [[ -z $links ]]; then
    fab_log "fab_loss: no links"
    return 1
  fi
  for ns in ra rb; do
    fab_exec $ns nft flush chain inet $FAB_NFT_TABLE loss || return 1
    ((ppm > 0)) || continue
    for i in $links; do
      fab_exec $ns nft add rule inet $FAB_NFT_TABLE loss oifname "l$i" numgen random mod 1000000 "<" "$ppm" \
        counter drop || return 1
    done
  done
}

# fab_chain_packets CHAIN: the packets the rules of a fault chain (loss,
# blackhole, cemark) counted on both routers together since they were added;
# 1 when either router's chain cannot be read. Shows that a fault acted.
fab_chain_packets() {
  local chain=${1:?chain} ns out total=0
  for ns in ra rb; do
    out=$(fab_exec $ns nft list chain inet $FAB_NFT_TABLE "$chain") || return 1
    total=$((total + $(grep -o 'packets [0-9]*' <<<"$out" | awk '{ s += $2 } END { print s + 0 }')))
  done
  echo "$total"
}

# fab_ecn PPS BURST [LINK...]: CE-mark ECN-capable packets above PPS packets/s per link
# (the limit counts IPv4 and IPv6 packets apart: a rule for each); PPS 0
# removes it. 2 for a PPS or BURST that is no whole number or a link the
# fabric lacks.
fab_ecn() {
  local pps=${1:?pps} burst=${2:?burst}
  shift 2
  local ns i ip ips=ip links
  fab_whole "ecn rate (packets/s)" "$pps" 999999999 || return 2
  fab_whole "ecn burst (packets)" "$burst" 999999999 || return 2
  pps=$((10#$pps)) burst=$((10#$burst))
  links=$(fab_link_list "$@") || return 2
  [[ -d /proc/sys/net/ipv6 ]] && ips+=" ip6"
  for ns in ra rb; do
    fab_exec $ns nft flush chain inet $FAB_NFT_TABLE cemark || return 1
    ((pps > 0)) || continue
    for i in $links; do
      for ip in $ips; do
        fab_exec $ns nft add rule inet $FAB_NFT_TABLE cemark oifname "l$i" "$ip" ecn "{ ect0, ect1 }" \
          limit rate over "$pps/second" burst "$burst" packets counter "$ip" ecn set ce || return 1
      done
    done
  done
}

# fab_blackhole LINK: drop everything on the link (both directions), routes stay.
fab_blackhole() {
  local i=${1:?link} ns
  fab_link_check "$i" || return 2
  for ns in ra rb; do
    fab_exec $ns nft add rule inet $FAB_NFT_TABLE blackhole oifname "l$i" counter drop comment "\"bh$i\"" || return 1
  done
}

fab_unblackhole() {
  local i=${1:?link} ns h
  fab_link_check "$i" || return 2
  for ns in ra rb; do
    for h in $(fab_exec $ns nft -a list chain inet $FAB_NFT_TABLE blackhole | awk -v c="\"bh$i\"" '$0 ~ c {print $NF}'); do
      fab_exec $ns nft delete rule inet $FAB_NFT_TABLE blackhole handle "$h"
    done
  done
}

# fab_link_down LINK / fab_link_up LINK: administrative down of the link in RA
# (RB sees carrier loss); routes through it are ignored until it is up.
# 2 for a link the fabric lacks.
fab_link_down() {
  fab_link_check "${1:?link}" || return 2
  fab_exec ra ip link set "l$1" down
}
fab_link_up() {
  fab_link_check "${1:?link}" || return 2
  fab_exec ra ip link set "l$1" up
}

# fab_link_dead LINK: 0 when RA's multipath route to B (FAB_FAMILY's) holds
# the link's nexthop marked dead or linkdown: out of use, as fab_link_down
# should leave it (1 also when the route cannot be read).
fab_link_dead() {
  local prefix=$FAB_ADDR_B/24
  [[ $FAB_FAMILY == 6 ]] && prefix=fd00:77:1::/64
  fab_exec ra ip -"$FAB_FAMILY" route show "$prefix" | grep "nexthop .* dev l${1:?link} " | grep -q 'dead\|linkdown'
}

# fab_link_routed LINK: 0 when RA's multipath route to B (FAB_FAMILY's) uses
# the link (its nexthop is neither dead nor linkdown).
fab_link_routed() {
  local prefix=$FAB_ADDR_B/24
  [[ $FAB_FAMILY == 6 ]] && prefix=fd00:77:1::/64
  fab_exec ra ip -"$FAB_FAMILY" route show "$prefix" | grep "nexthop .* dev l${1:?link} " | grep -qv 'dead\|linkdown'
}

# fab_rate LINK RATE_MBIT [QUEUE_KB]: shape one link (both directions) at
# another rate than fab_up's; links of unequal rate reorder across paths.
fab_rate() {
  local i=${1:?link} rate=${2:?rate mbit} qkb=${3:-400} ns
  fab_link_check "$i" || return 2
  local burst=$((rate * 1000 / 8 / 250))
  ((burst < 65536)) && burst=65536
  for ns in ra rb; do
    fab_exec $ns tc qdisc replace dev "l$i" root tbf rate "${rate}mbit" burst $burst limit $((qkb * 1024)) || return 1
  done
}

# fab_clear: remove every fault. 1 when any is left (a command failed, or
# there is no fabric): bench/fabric relies on it between cases, and a
# blackhole that outlived its case was measured as the next one's fabric.
fab_clear() {
  local ns i n chain
  n=$(fab_links)
  if ((n == 0)); then
    fab_log "fab_clear: no fabric (no links)"
    return 1
  fi
  for ns in ra rb; do
    for chain in blackhole loss cemark; do
      fab_exec $ns nft flush chain inet $FAB_NFT_TABLE $chain || return 1
    done
  done
  for ((i = 1; i <= n; i++)); do fab_exec ra ip link set l$i up || return 1; done
}

# fab_route_ipv4: 0 when FAB_FAMILY is 4; fab_route and fab_routes can
# predict IPv4's links only (see the top).
fab_route_ipv4() {
  [[ $FAB_FAMILY == 4 ]] && return 0
  fab_log "ip route get does not predict an IPv6 packet's link under hash policy 3"
  return 1
}

# fab_route SPORT DPORT [PROTO]: the link A->B traffic takes (from RA's
# routing; IPv4).
fab_route() {
  local sport=${1:?sport} dport=${2:?dport} proto=${3:-udp}
  fab_route_ipv4 || return 1
  fab_exec ra ip route get $FAB_ADDR_B from $FAB_ADDR_A iif r0 ipproto "$proto" sport "$sport" dport "$dport" |
    grep -o 'dev l[0-9]*' | head -1 | cut -c5-
}

# fab_routes DPORT SPORT...: "SPORT LINK" a line, what fab_route says for
# each source port, from one `ip -batch` (a namespace exec per port takes
# up to 0.1 s on a loaded machine).
fab_routes() {
  local dport=${1:?dport}
  shift
  (($# > 0)) || return 0
  fab_route_ipv4 || return 1
  paste -d' ' <(printf '%s\n' "$@") \
    <(printf "route get $FAB_ADDR_B from $FAB_ADDR_A iif r0 ipproto udp sport %s dport $dport\n" "$@" |
      fab_exec ra ip -o -batch - | grep -o 'dev l[0-9]*' | cut -c5-)
}

# fab_link_tx LINK...: bytes sent by RA on each link (A->B direction), one a line.
fab_link_tx() {
  local i files=()
  for i in "${@:?link}"; do files+=("/sys/class/net/l$i/statistics/tx_bytes"); done
  fab_exec ra cat "${files[@]}"
}

# fab_busiest_link [SECONDS]: the link that carried the most A->B bytes in
# the next SECONDS (default 0.3): one that surely carries traffic now, where
# a fixed link may carry none of a flow's hashed paths.
fab_busiest_link() {
  local secs=${1:-0.3} n i best=1 most=-1 d
  n=$(fab_links)
  local -a before after
  # All links in one read: one exec per link took longer than SECONDS.
  mapfile -t before < <(fab_link_tx $(seq 1 "$n"))
  sleep "$secs"
  mapfile -t after < <(fab_link_tx $(seq 1 "$n"))
  for ((i = 1; i <= n; i++)); do
    d=$((after[i - 1] - before[i - 1]))
    if ((d > most)); then most=$d; best=$i; fi
  done
  echo "$best"
}

# fab_watch: from now on RA records the UDP source ports of A's packets as
# they arrive (before any fault) and counts per link the packets it
# forwards onto it (after the faults: a blackholed link's drops are not
# counted); fab_watched_ports and fab_forwarded read them. Once per fab_up,
# and on demand only: it costs every packet two more rules.
fab_watch() {
  local n i counters="" rules=""
  n=$(fab_links)
  for ((i = 1; i <= n; i++)); do
    counters+="counter fwd$i { }"$'\n'
    rules+="oifname \"l$i\" counter name \"fwd$i\""$'\n'
  done
  fab_exec ra nft -f - <<EOF
table inet $FAB_NFT_TABLE {
  set sports { type inet_service; flags dynamic; }
  $counters
  chain watch_in {
    type filter hook prerouting priority 0; policy accept;
    iifname "r0" meta l4proto udp add @sports { udp sport }
  }
  chain watch_out {
    type filter hook forward priority 10; policy accept;
    $rules
  }
}
EOF
}

# fab_watched_ports: the source ports fab_watch recorded, one a line.
fab_watched_ports() {
  fab_exec ra nft list set inet $FAB_NFT_TABLE sports | tr -d '\n' |
    grep -o 'elements = {[^}]*}' | grep -o '[0-9][0-9]*'
}

# fab_forwarded LINK: packets RA forwarded onto the link since fab_watch.
fab_forwarded() {
  fab_exec ra nft list counter inet $FAB_NFT_TABLE "fwd${1:?link}" | grep -o 'packets [0-9]*' | cut -d' ' -f2
}

fab_status() {
  local ns
  for ns in ra rb; do
    echo "== $(fab_ns $ns)"
    fab_exec $ns tc -s qdisc show | grep -A2 tbf
    fab_exec $ns nft list table inet $FAB_NFT_TABLE
  done
}

# fab_usage: the CLI's part of the comment at the top.
fab_usage() { sed -n '2,19p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

fab_main() {
  local cmd=${1:-help}
  shift || true
  # Commands that change the fabric take its lock first, without waiting: run
  # beside bench/fabric or a fabric test (same MR_FAB_PREFIX), `up` and `down`
  # used to tear that run's namespaces down under it, the others to add
  # faults to its measurement.
  case "$cmd" in
    up | down | loss | ecn | blackhole | unblackhole | linkdown | linkup | rate | clear)
      if [[ $cmd == up ]] && ! fab_up_args "$@"; then
        echo "usage: fabric.sh up N RATE_MBIT [QUEUE_KB]" >&2
        return 2
      fi
      fab_lock 0 || return 1
      ;;
  esac
  case "$cmd" in
    # A fabric that could not be built whole is removed, not left half-made.
    up) fab_up "$@" || { fab_down; return 1; } ;;
    down) fab_down ;;
    run) fab_exec "$@" ;;
    loss) fab_loss "$@" ;;
    ecn) fab_ecn "$@" ;;
    blackhole) fab_blackhole "$@" ;;
    unblackhole) fab_unblackhole "$@" ;;
    linkdown) fab_link_down "$@" ;;
    linkup) fab_link_up "$@" ;;
    rate) fab_rate "$@" ;;
    clear) fab_clear ;;
    route) fab_route "$@" ;;
    status) fab_status ;;
    check) fab_available ;;
    help | -h | --help) fab_usage ;;
    *)
      fab_usage >&2
      fab_log "unknown command '$cmd'"
      return 2
      ;;
  esac
}

# Run as a command (not sourced): the CLI.
if ! (return 0 2>/dev/null); then
  fab_main "$@"
fi
