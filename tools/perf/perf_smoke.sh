#!/usr/bin/env bash
# Runs metaroce-perf server + client on loopback for ~2 s per op with --verify
# and checks verify_errors == 0 in the client's --json output.
# Usage: perf_smoke.sh path/to/metaroce-perf [seconds]
set -euo pipefail
PERF=${1:?usage: perf_smoke.sh path/to/metaroce-perf [seconds]}
SECS=${2:-2}
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

start_server() {
  for _ in $(seq 1 20); do
    port=$((20000 + RANDOM % 12000))
    "$PERF" server "127.0.0.1:$port" >"$tmp/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 50); do
      if grep -q listening "$tmp/server.log"; then return 0; fi
      if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
      sleep 0.05
    done
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  done
  echo "could not start the server"; cat "$tmp/server.log"; return 1
}

start_server
fail=0
for op in write read send; do
  dur=$SECS
  [[ $op != write ]] && dur=0.5
  set +e
  "$PERF" client "127.0.0.1:$port" --op "$op" --size 65536 --qd 16 --duration "$dur" --verify --json \
    >"$tmp/$op.json" 2>"$tmp/$op.err"
  rc=$?
  set -e
  json=$(cat "$tmp/$op.json")
  echo "$op: rc=$rc $json" | cut -c1-400
  if [[ $rc -ne 0 ]] || ! grep -q '"verify_errors":0' "$tmp/$op.json" || grep -q '"messages":0,' "$tmp/$op.json"; then
    echo "FAIL: $op"; cat "$tmp/$op.err"; fail=1
  fi
done
# A server that stops answering mid-run (frozen with SIGSTOP): the client must
# give up on its own with an error, not wait forever for its outstanding
# requests, even after Ctrl-C.
"$PERF" client "127.0.0.1:$port" --op write --size 65536 --qd 16 --duration 60 \
  >"$tmp/frozen.json" 2>"$tmp/frozen.err" &
client_pid=$!
sleep 1
kill -STOP "$server_pid"
sleep 0.5
kill -INT "$client_pid" 2>/dev/null || true
start=$SECONDS
set +e
timeout -s KILL 30 tail --pid="$client_pid" -f /dev/null
wait "$client_pid"
rc=$?
set -e
kill -CONT "$server_pid"
echo "frozen server: client rc=$rc after $((SECONDS - start)) s: $(tail -1 "$tmp/frozen.err")"
if [[ $rc -eq 0 || $((SECONDS - start)) -gt 20 ]]; then
  echo "FAIL: frozen server"; cat "$tmp/frozen.err"; fail=1
fi
if [[ $fail -ne 0 ]]; then echo "--- server log"; cat "$tmp/server.log"; exit 1; fi
echo "PASS"
