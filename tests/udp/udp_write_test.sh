#!/bin/sh
# ctest udp-write-ipv6: examples/udp_write's client opens an endpoint of the
# family its server's address resolves to, so an IPv6 server reached by a
# bare address (::1, no brackets) or by a host name works, not only
# "[v6]:port". Runs in a network namespace of its own (port 4792 is free
# there) with a hosts file naming ::1 only; skips (exit 77) where it cannot
# (needs root).
#   udp_write_test.sh UDP_WRITE
set -u
bin=$1
if [ -z "${MR_UDP_WRITE_NS:-}" ]; then
  if ! unshare -n -m true 2>/dev/null; then
    echo "udp-write-ipv6: skipped (needs root for a network namespace)"
    exit 77
  fi
  MR_UDP_WRITE_NS=1 exec unshare -n -m sh "$0" "$@"
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ip link set lo up || exit 1
printf '::1 metaroce-v6-only\n' >"$dir/hosts"
mount --bind "$dir/hosts" /etc/hosts || exit 1
rc=0
for to in ::1 metaroce-v6-only:4792; do
  "$bin" server "[::1]:4792" >"$dir/server.out" 2>&1 &
  server=$!
  for _ in $(seq 50); do  # until it listens
    grep -q 'server on' "$dir/server.out" && break
    sleep 0.1
  done
  if ! "$bin" client "$to" "hello over IPv6"; then
    echo "udp-write-ipv6: the client failed to reach $to"
    kill "$server" 2>/dev/null
    rc=1
  fi
  wait "$server" || rc=1
  cat "$dir/server.out"
  grep -q 'received 15 bytes: "hello over IPv6"' "$dir/server.out" || rc=1
done
exit $rc
