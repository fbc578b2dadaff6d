#!/usr/bin/env bash
# One fabric integration test: metaroce-perf server in mr-b, client in mr-a,
# across 4 shaped parallel links (tests/fabric/fabric.sh), --verify --json.
#
#   fabric_test.sh CASE path/to/metaroce-perf
#   CASE: clean | loss1 | loss5 | linkdown | blackhole
#
# Passes when the client finishes in time (no hang), exits 0, reports
# verify_errors == 0, and goodput is above a loose floor. Exit 77 (skip) when
# not root or network namespaces are unavailable.
#
# Environment: MR_FAB_SECONDS (transfer seconds, default 8), MR_FAB_FLOOR_GBPS
# (override the case's goodput floor), MR_FAB_RATE (Mbit/s per link, default 500).
set -uo pipefail
CASE=${1:?usage: fabric_test.sh CASE path/to/metaroce-perf}
PERF=${2:?usage: fabric_test.sh CASE path/to/metaroce-perf}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=fabric.sh
source "$HERE/fabric.sh"

SECS=${MR_FAB_SECONDS:-8}
RATE=${MR_FAB_RATE:-500}
LINKS=4
# Loose floors (Gbit/s): an order of magnitude under what this transport has
# been measured to reach on a 2-core machine, to catch stalls, not to benchmark.
case "$CASE" in
  clean) FLOOR=0.05 ;;
  loss1) FLOOR=0.02 ;;
  loss5) FLOOR=0.005 ;;
  linkdown) FLOOR=0.02 ;;
  blackhole) FLOOR=0.02 ;;
  *) echo "unknown case $CASE"; exit 2 ;;
esac
FLOOR=${MR_FAB_FLOOR_GBPS:-$FLOOR}

if ! why=$(fab_available); then
  echo "SKIP: fabric tests need root and ip netns: $why"
  exit 77
fi
[[ -x "$PERF" ]] || { echo "FAIL: $PERF not executable"; exit 1; }
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }

fab_lock 300 || { echo "FAIL: another run held the fabric for 300 s"; exit 1; }

tmp=$(mktemp -d)
fault_pid=""
cleanup() {
  [[ -n "$fault_pid" ]] && kill "$fault_pid" 2>/dev/null
  fab_down
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fab_up $LINKS "$RATE" || { echo "FAIL: cannot build the fabric"; exit 1; }

fab_exec b "$PERF" server "$FAB_ADDR_B:4792" >"$tmp/server.log" 2>&1 &
for _ in $(seq 1 50); do
  grep -q listening "$tmp/server.log" && break
  sleep 0.05
done
grep -q listening "$tmp/server.log" || { echo "FAIL: server did not start"; cat "$tmp/server.log"; exit 1; }

# Faults: steady state first, then the fault mid-transfer.
t_fault=$(awk -v s="$SECS" 'BEGIN { printf "%.1f", s * 0.3 }')
t_heal=$(awk -v s="$SECS" 'BEGIN { printf "%.1f", s * 0.6 }')
case "$CASE" in
  loss1) fab_loss 10000 ;;
  loss5) fab_loss 50000 ;;
  linkdown)
    (sleep "$t_fault"; fab_link_down 2; echo "fault: l2 down at ${t_fault}s"; sleep "$(awk -v a="$t_heal" -v b="$t_fault" 'BEGIN{print a-b}')"; fab_link_up 2; echo "fault: l2 up at ${t_heal}s") &
    fault_pid=$!
    ;;
  blackhole)
    (sleep "$t_fault"; fab_blackhole 3; echo "fault: l3 blackholed at ${t_fault}s") &
    fault_pid=$!
    ;;
esac

limit=$(awk -v s="$SECS" 'BEGIN { printf "%d", s + 20 }')
start=$(date +%s.%N)
fab_exec a timeout -k 2 "$limit" "$PERF" client "$FAB_ADDR_B:4792" --op write --size 65536 --qd 16 \
  --paths 8 --duration "$SECS" --verify --json >"$tmp/client.json" 2>"$tmp/client.err"
rc=$?
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
[[ -n "$fault_pid" ]] && wait "$fault_pid" 2>/dev/null
fault_pid=""

show_logs() {
  echo "--- client stderr"; cat "$tmp/client.err"
  echo "--- client json"; cat "$tmp/client.json"
  echo "--- server log"; cat "$tmp/server.log"
  echo "--- fabric"; fab_status 2>&1 | head -60
}

if ((rc == 124 || rc == 137)); then
  echo "FAIL: $CASE: client hung (killed after ${limit}s)"
  show_logs
  exit 1
fi

verdict=$(python3 - "$tmp/client.json" "$FLOOR" "$rc" "$CASE" "$elapsed" <<'EOF'
import json, sys
path, floor, rc, case, elapsed = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
try:
    j = json.load(open(path))
except Exception as e:
    print(f"FAIL: {case}: no JSON from the client (rc {rc}): {e}")
    sys.exit(1)
g = j.get("goodput_gbps", 0.0)
ve = j.get("verify_errors", -1)
paths = j.get("paths", [])
summary = (f"{case}: goodput {g:.3f} Gb/s (floor {floor}), verify_errors {ve}, "
           f"retransmitted {j.get('retransmitted_packets')} of {j.get('data_packets_sent')} packets, "
           f"{j.get('messages')} messages, {len(paths)} paths, "
           f"retired {sum(1 for p in paths if p.get('retired'))}, {elapsed} s")
problems = []
if rc != 0: problems.append(f"client exit status {rc}" + (f" ({j['error']})" if 'error' in j else ""))
if ve != 0: problems.append(f"verify_errors {ve}")
if j.get("messages", 0) == 0: problems.append("no messages completed")
if "server_messages_received" not in j: problems.append("no result from the server")
if g < floor: problems.append(f"goodput {g:.3f} Gb/s under the floor {floor}")
if problems:
    print("FAIL: " + summary + ": " + "; ".join(problems))
    sys.exit(1)
print("PASS: " + summary)
EOF
)
status=$?
echo "$verdict"
grep '^\[' "$tmp/client.err" | tr '\n' ' ' | sed 's/  */ /g'
echo
if ((status != 0)); then
  show_logs
  exit 1
fi
exit 0
