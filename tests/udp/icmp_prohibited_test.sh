#!/bin/sh
# ctest udp.icmp-prohibited: a firewall that rejects rather than drops
# (firewalld's default REJECT) answers with ICMP administratively prohibited,
# which a connected UDP socket reports as EHOSTUNREACH (ICMPv6: EACCES). A
# connect to such a port names it, over 1 path and CONN-2's 8 (whose
# requests leave from a socket each, read by SO_ERROR when the connect
# fails), rather than reading as a silent peer. The rule is nftables' in a
# network namespace of the test's own (root: unshare -n; it skips, exit 77,
# where it cannot).
#   icmp_prohibited_test.sh METAROCE_PERF
set -u
perf=$1
if [ -z "${MR_ICMP_NETNS:-}" ]; then
  if ! command -v nft >/dev/null 2>&1 || ! unshare -n true 2>/dev/null; then
    echo "udp.icmp-prohibited: skipped (needs root for a network namespace, and nft)"
    exit 77
  fi
  MR_ICMP_NETNS=1 exec unshare -n sh "$0" "$@"
fi
ip link set lo up || exit 1
if ! nft -f - <<'EOF'
table inet metaroce_icmp {
  chain input {
    type filter hook input priority 0;
    meta nfproto ipv4 udp dport 7001 reject with icmp type host-prohibited
    meta nfproto ipv6 udp dport 7001 reject with icmpv6 type admin-prohibited
  }
}
EOF
then
  echo "udp.icmp-prohibited: skipped (nftables took no reject rule)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
clause="the peer's network answered with ICMP destination unreachable, administratively prohibited"
for target in "127.0.0.1:7001 No route to host" "[::1]:7001 Permission denied"; do
  addr=${target%% *}
  why=${target#* }
  for paths in 1 8; do
    if "$perf" client "$addr" --paths "$paths" --connect-timeout-ms 300 --duration 1 \
      >"$dir/out" 2>"$dir/err"; then
      echo "FAIL: $addr ($paths paths) connected through the reject rule"
      fail=1
    elif ! grep -qF "$clause ($why): a firewall or router rejected the datagrams" "$dir/err"; then
      echo "FAIL: $addr ($paths paths): the error does not name the ICMP refusal: $(cat "$dir/err")"
      fail=1
    else
      echo "ok: $addr, $paths paths: $(cat "$dir/err")"
    fi
  done
done
exit $fail
