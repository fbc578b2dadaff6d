#!/bin/sh
# ctest udp.route-mtu: a connection offers the mtu its route carries
# (spec CONN-1), so that IP never fragments its packets: over a loopback of
# 1500 bytes, a client left at mtu 4096 sends data packets of at most 1420
# payload bytes, every byte checked. A route too small for the least mtu
# (256) is refused at once with an error that says so. Loopback's MTU is set
# in a network namespace of the test's own (root: unshare -n; it skips, exit
# 77, where it cannot).
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
trap 'exit 1' INT TERM HUP
dir=$(mktemp -d)
server=
stop() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  server=
}
trap 'stop; rm -rf "$dir"' EXIT
# A server on 127.0.0.1:7000 over a loopback of MTU $1, listening once this returns.
serve() {
  stop
  ip link set lo up mtu "$1" || exit 1
  "$perf" server 127.0.0.1:7000 >"$dir/server.log" 2>&1 &
  server=$!
  for _ in $(seq 100); do
    grep -q listening "$dir/server.log" && return 0
    sleep 0.05
  done
  echo "FAIL: the server did not start: $(cat "$dir/server.log")"
  exit 1
}
fail=0
serve 1500
if ! "$perf" client 127.0.0.1:7000 --duration 1 --verify --json >"$dir/fit.json" 2>"$dir/fit.err"
then
  echo "FAIL: mtu 4096 over a 1500-byte route did not run:"
  cat "$dir/fit.err"
  fail=1
elif ! python3 - "$dir/fit.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
per = r["bytes"] / max(r["data_packets_sent"], 1)
print(f"ok: mtu 4096 over 1500 bytes: {r['goodput_gbps']:.2f} Gbit/s, "
      f"{per:.0f} payload bytes a data packet, verify errors {r['verify_errors']}")
sys.exit(0 if per <= 1420 and r["verify_errors"] == 0 and r["bytes"] > 0 else 1)
PY
then
  echo "FAIL: packets larger than the route carries, or verify errors: $(cat "$dir/fit.json")"
  fail=1
fi
serve 300
if "$perf" client 127.0.0.1:7000 --duration 1 >"$dir/small.out" 2>"$dir/small.err"; then
  echo "FAIL: a 300-byte route connected"
  fail=1
elif ! grep -q "route's MTU is 300 bytes, too small" "$dir/small.err"; then
  echo "FAIL: the error does not name the route's MTU: $(cat "$dir/small.err")"
  fail=1
else
  echo "ok: a 300-byte route refused: $(cat "$dir/small.err")"
fi
exit $fail
