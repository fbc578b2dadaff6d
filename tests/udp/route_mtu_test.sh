#!/bin/sh
# ctest udp.route-mtu: a connect over a route whose MTU is smaller than a
# data packet fails at once with an error that says so and names the mtu to
# use, instead of leaving IP to fragment every packet; with that mtu the
# same transfer runs. Loopback's MTU is set to 1500 in a network namespace
# of the test's own (root: unshare -n; it skips, exit 77, where it cannot).
#   route_mtu_test.sh METAROCE_PERF
set -u
perf=$1
if [ -z "${MR_ROUTE_MTU_NETNS:-}" ]; then
  if ! unshare -n true 2>/dev/null; then
    echo "udp.route-mtu: skipped (needs root for a network namespace)"
    exit 77
  fi
  MR_ROUTE_MTU_NETNS=1 exec unshare -n sh "$0" "$@"
fi
ip link set lo up mtu 1500 || exit 1
dir=$(mktemp -d)
"$perf" server 127.0.0.1:7000 >"$dir/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$dir"' EXIT
sleep 0.3
fail=0
if "$perf" client 127.0.0.1:7000 --duration 1 >"$dir/big.out" 2>"$dir/big.err"; then
  echo "FAIL: mtu 4096 over a 1500-byte route connected"
  fail=1
elif ! grep -q "route's MTU is 1500 bytes.*at most 1420" "$dir/big.err"; then
  echo "FAIL: the error does not name the route's MTU and the mtu to use:"
  cat "$dir/big.err"
  fail=1
else
  echo "ok: mtu 4096 refused: $(cat "$dir/big.err")"
fi
if ! "$perf" client 127.0.0.1:7000 --duration 1 --mtu 1420 --verify --json >"$dir/fit.json" \
  2>"$dir/fit.err"; then
  echo "FAIL: mtu 1420 over a 1500-byte route did not run:"
  cat "$dir/fit.err"
  fail=1
elif ! grep -q '"verify_errors":0' "$dir/fit.json"; then
  echo "FAIL: mtu 1420: verify errors: $(cat "$dir/fit.json")"
  fail=1
else
  echo "ok: mtu 1420 ran, every byte checked"
fi
exit $fail
