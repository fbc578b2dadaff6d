#!/usr/bin/env bash
# CONN-2 on the fabric (tests/fabric/fabric.sh, 4 links, IPv4): the link that
# the client's receive port's 4-tuple to the server (UDP source port the
# client's receive port, destination 4792) hashes onto is blackholed, both
# ways, before the client connects. Each CONNECT_REQ leaves from the next of
# the connection's entropy ports, naming the receive port (spec 3.12), so the
# handshake gets through on the other links, and a short verified WRITE run
# completes. Before, every request left from the receive port, rode the dead
# link, and the connect failed: "no answer to 8 requests ... kConnectTimeout".
#
#   handshake_test.sh path/to/metaroce-perf
#
# Passes when the client exits 0 with verify_errors 0 and the blackhole's
# rules dropped packets (the requests that hashed onto the link). Skips (77)
# when not root or network namespaces are unavailable, and when every port
# of the client's entropy block hashes onto the link (nothing to show).
# Environment: MR_FAB_PREFIX (namespace names, default mr-).
set -uo pipefail
PERF=${1:?usage: handshake_test.sh path/to/metaroce-perf}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MR_FAB_FAMILY=4  # fab_route predicts IPv4 links only
# shellcheck source=fabric.sh
source "$HERE/fabric.sh"

if ! why=$(fab_available); then
  echo "SKIP: fabric tests need root and ip netns: $why"
  exit 77
fi
[[ -x "$PERF" ]] || { echo "FAIL: $PERF not executable"; exit 1; }

fab_lock 300 || { echo "FAIL: another run held the fabric for 300 s"; exit 1; }
tmp=$(mktemp -d)
cleanup() {
  fab_down
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fab_up 4 500 || { echo "FAIL: cannot build the fabric"; exit 1; }
SERVER="$(fab_addr b):4792"
fab_exec b "$PERF" server "$SERVER" --once >"$tmp/server.log" 2>&1 &
for _ in $(seq 1 50); do
  grep -q listening "$tmp/server.log" && break
  sleep 0.05
done
grep -q listening "$tmp/server.log" || { echo "FAIL: server did not start"; cat "$tmp/server.log"; exit 1; }

# The client receives on CPORT; its entropy block is the 64 ports after it.
CPORT=40000
route=$(fab_route $CPORT 4792)  # "l2": the link's name
link=${route#l}
[[ -n $link ]] || { echo "FAIL: no route for source port $CPORT"; exit 1; }
# shellcheck disable=SC2046
others=$(fab_routes 4792 $(seq $((CPORT + 1)) $((CPORT + 64))) | awk -v l="$route" '$2 != l' | wc -l)
((others > 0)) || { echo "SKIP: every port of the entropy block hashes onto l$link"; exit 77; }
fab_blackhole "$link" || { echo "FAIL: cannot blackhole l$link"; exit 1; }

fab_exec a timeout 60 "$PERF" client "$SERVER" --bind "$(fab_addr a):$CPORT" --op write \
  --size 65536 --iters 64 --verify --json >"$tmp/client.json" 2>"$tmp/client.err"
rc=$?
dropped=$(fab_chain_packets blackhole) || dropped=""
verify=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["verify_errors"])' \
  "$tmp/client.json" 2>/dev/null) || verify=""

problems=()
((rc == 0)) || problems+=("client exit $rc: $(tail -3 "$tmp/client.err" | tr '\n' ' ')")
[[ $verify == 0 ]] || problems+=("verify_errors '${verify}'")
[[ -n $dropped && $dropped -gt 0 ]] || problems+=("the blackhole dropped no packet ('$dropped')")
if ((${#problems[@]})); then
  echo "FAIL: handshake past l$link (blackholed, receive port $CPORT's link): ${problems[*]}"
  exit 1
fi
echo "PASS: connected and wrote 64 x 64 KiB past l$link, blackholed (receive port $CPORT's" \
  "link; $others of 64 entropy ports hash elsewhere); the blackhole dropped $dropped packets"
