#!/usr/bin/env bash
# Runs metaroce-perf server + client on loopback for ~2 s per op with --verify
# and checks verify_errors == 0 in the client's --json output (for read also
# that its paths are the server's). On 127.0.0.1 also: a --bidir write's
# reverse.paths (the server's), a send of 256 MiB messages in modest memory,
# that --iters N sends exactly N, that out-of-range options are refused, that
# a busy server refuses a second client, progress lines, and a server that
# stops answering.
# Usage: perf_smoke.sh path/to/metaroce-perf [seconds] [host]
#   host: 127.0.0.1 (default) or ::1 (exit 77, a skip, without IPv6 loopback)
set -euo pipefail
PERF=${1:?usage: perf_smoke.sh path/to/metaroce-perf [seconds] [host]}
SECS=${2:-2}
HOST=${3:-127.0.0.1}
if [[ $HOST == *:* ]]; then
  if ! python3 -c 'import socket; socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).bind(("::1", 0))' 2>/dev/null; then
    echo "SKIP: no IPv6 loopback"; exit 77
  fi
  hostport() { echo "[$HOST]:$1"; }
else
  hostport() { echo "$HOST:$1"; }
fi
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill -CONT "$server_pid" 2>/dev/null || true; kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

start_server() {
  for _ in $(seq 1 20); do
    port=$((20000 + RANDOM % 12000))
    "$PERF" server "$(hostport "$port")" >"$tmp/server.log" 2>&1 &
    server_pid=$!
    # 20 s: a server under ASan or TSan on a loaded machine can be slow to
    # start, and one still starting when the wait ends is killed, not waited
    # for (it would never exit, and the test would end at ctest's timeout).
    for _ in $(seq 1 400); do
      if grep -q listening "$tmp/server.log"; then return 0; fi
      if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
      sleep 0.05
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  done
  echo "could not start the server"; cat "$tmp/server.log"; return 1
}

finish() {
  if [[ $fail -ne 0 ]]; then echo "--- server log"; cat "$tmp/server.log"; exit 1; fi
  echo "PASS"
  exit 0
}

# run_frozen NAME SIGNALS [ARGS...]: a client WRITEs for up to 60 s; after
# 1 s the server is frozen (SIGSTOP) and the client gets SIGNALS Ctrl-Cs,
# 0.3 s apart. Sets rc and waited (seconds from the last signal to the
# client's end), then thaws the server.
run_frozen() {
  local name=$1 signals=$2 pid start k
  shift 2
  "$PERF" client "$(hostport "$port")" --op write --size 65536 --qd 16 --duration 60 "$@" \
    >"$tmp/$name.json" 2>"$tmp/$name.err" &
  pid=$!
  sleep 1
  kill -STOP "$server_pid"
  for ((k = 0; k < signals; k++)); do
    sleep 0.3
    kill -INT "$pid" 2>/dev/null || true
  done
  start=$SECONDS
  set +e
  timeout -s KILL 30 tail --pid="$pid" -f /dev/null
  wait "$pid"
  rc=$?
  set -e
  waited=$((SECONDS - start))
  kill -CONT "$server_pid"
}

# expect_server_says WHAT WHY: within 5 s the server logs a line with WHAT
# that names the peer and connection; else a failure, saying WHY.
expect_server_says() {
  for _ in $(seq 1 100); do
    grep -q "$1" "$tmp/server.log" && break
    sleep 0.05
  done
  echo "server: $(grep "$1" "$tmp/server.log" || true)"
  if ! grep "$1" "$tmp/server.log" | grep -q "(peer 127.0.0.1:[0-9]*, conn 0x[0-9a-f]*"; then
    echo "FAIL: $2"; fail=1
  fi
}

start_server
fail=0
for op in write read send; do
  dur=$SECS
  [[ $op != write ]] && dur=0.5
  set +e
  "$PERF" client "$(hostport "$port")" --op "$op" --size 65536 --qd 16 --duration "$dur" --verify --json \
    >"$tmp/$op.json" 2>"$tmp/$op.err"
  rc=$?
  set -e
  json=$(cat "$tmp/$op.json")
  echo "$op: rc=$rc $json" | cut -c1-400
  if [[ $rc -ne 0 ]] || ! grep -q '"verify_errors":0' "$tmp/$op.json" || grep -q '"messages":0,' "$tmp/$op.json"; then
    echo "FAIL: $op"; cat "$tmp/$op.err"; fail=1
  fi
  # A read's data travels on the server's paths: the JSON's paths are the
  # server's (its PathReports), at least one packet per MTU of data moved,
  # and the client's own request paths carry far fewer; their bytes (each
# path's payload sent) add up to at least the data moved.
  if [[ $op == read ]] && ! python3 - "$tmp/read.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
moved = j["messages"] * -(-j["size"] // 4096)
server = sum(p["packets"] for p in j["paths"])
client = sum(p["packets"] for p in j.get("client_paths", []))
# Each path's payload bytes (PathReport.bytes, retransmissions included).
server_bytes = sum(p["bytes"] for p in j["paths"])
print(f"read paths: of {j.get('paths_of')}, {server} packets (data packets moved >= {moved}), "
      f"{server_bytes} bytes (moved {j['bytes']}); client's {client}")
sys.exit(0 if j.get("paths_of") == "server" and server >= moved and 0 < client * 4 < server and
         server_bytes >= j["bytes"] > 0 else 1)
PY
  then
    echo "FAIL: read's paths are not the server's"; fail=1
  fi
done
[[ $HOST == *:* ]] && finish

# A write with --bidir: the server WRITEs back as much at once, on its own
# paths, which it reports after its Result: the JSON's paths stay the
# client's (the forward data) and reverse.paths are the server's, with the
# packets of the reverse load on them, and each direction's path bytes add up
# to at least its data moved.
set +e
"$PERF" client "$(hostport "$port")" --op write --size 65536 --qd 16 --duration 1 --verify --bidir \
  --json >"$tmp/bidir.json" 2>"$tmp/bidir.err"
rc=$?
set -e
echo "bidir write: rc=$rc $(cat "$tmp/bidir.json")" | cut -c1-400
if [[ $rc -ne 0 ]] || ! python3 - "$tmp/bidir.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rev = j.get("reverse", {})
paths = rev.get("paths", [])
forward = sum(p["packets"] for p in j["paths"])
backward = sum(p["packets"] for p in paths)
moved = rev.get("messages", 0) * -(-j["size"] // 4096)
forward_bytes = sum(p["bytes"] for p in j["paths"])
backward_bytes = sum(p["bytes"] for p in paths)
print(f"bidir write: verify_errors {j['verify_errors']}, paths of {j.get('paths_of')} "
      f"({forward} packets, {forward_bytes} bytes of {j['bytes']} moved), reverse: "
      f"{rev.get('messages')} messages, {len(paths)} paths of {rev.get('paths_of')} ({backward} "
      f"packets, data packets moved >= {moved}; {backward_bytes} bytes of {rev.get('bytes')})")
sys.exit(0 if j["verify_errors"] == 0 and j.get("paths_of") == "client" and forward > 0 and
         rev.get("paths_of") == "server" and len(paths) > 0 and backward > 0 and
         backward >= moved > 0 and forward_bytes >= j["bytes"] > 0 and
         backward_bytes >= rev.get("bytes", 0) > 0 else 1)
PY
then
  echo "FAIL: bidir write's reverse.paths"; cat "$tmp/bidir.err"; fail=1
fi

# A send of 256 MiB messages, one at a time, verified: the client receives
# no data SENDs, so its receives hold control messages only, and the
# server's hold qd + 1 = 2 messages (the fewest, over the 256 MiB budget),
# with no WRITE/READ target. Each end's peak RSS stays under 1 GiB: the
# client's 256 MiB of messages, the server's 512 MiB of receives (both used to
# post 2 qd + 16 = 18 receives of 256 MiB, 4.5 GiB). The client's RSS is
# /usr/bin/time's (skipped without it), the server's its VmHWM.
set +e
rss=()
[[ -x /usr/bin/time ]] && rss=(/usr/bin/time -f %M -o "$tmp/big.rss")
${rss[@]+"${rss[@]}"} timeout -k 2 40 "$PERF" client "$(hostport "$port")" --op send \
  --size 268435456 --qd 1 --iters 2 --verify --json >"$tmp/big.json" 2>"$tmp/big.err"
rc=$?
set -e
client_kib=$(tail -1 "$tmp/big.rss" 2>/dev/null || echo skipped)
server_kib=$(awk '/^VmHWM:/ { print $2 }' "/proc/$server_pid/status" 2>/dev/null || echo skipped)
echo "send 256 MiB x 2: rc=$rc, peak RSS client $client_kib KiB, server $server_kib KiB"
if [[ $rc -ne 0 ]] || ! python3 - "$tmp/big.json" "$client_kib" "$server_kib" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rss = [int(v) for v in sys.argv[2:] if v.isdigit()]
sys.exit(0 if j["verify_errors"] == 0 and j["messages"] == 2 and
         j.get("server_messages_received") == 2 and all(v < 1 << 20 for v in rss) else 1)
PY
then
  echo "FAIL: send of 256 MiB messages"; cat "$tmp/big.err"; fail=1
fi

# The driver's own troubles are reported: with the receive control buffer cut
# to 56 bytes (test hook) every buffer's TOS is cut (MSG_CTRUNC), and the
# client's JSON counts them as io.rx_ctrunc while the write still verifies
# (the ECN field is read as not CE). --no-gro: a GRO endpoint drops a buffer
# whose segment size it cannot read, and connects to nothing.
set +e
METAROCE_UDP_RX_CTRL_BYTES=56 "$PERF" client "$(hostport "$port")" --op write --size 65536 \
  --qd 16 --iters 200 --verify --no-gro --json >"$tmp/ctrunc.json" 2>"$tmp/ctrunc.err"
rc=$?
set -e
echo "write with control data cut short: rc=$rc $(python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print("verify_errors", j["verify_errors"], "io.rx_ctrunc", j["io"]["rx_ctrunc"])' "$tmp/ctrunc.json" 2>/dev/null)"
if [[ $rc -ne 0 ]] || ! python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if j["verify_errors"] == 0 and j["io"]["rx_ctrunc"] > 0 and j["io"]["rx_truncated"] == 0 else 1)' "$tmp/ctrunc.json"; then
  echo "FAIL: io.rx_ctrunc not reported"; cat "$tmp/ctrunc.err"; fail=1
fi

# The shortest run the command line takes, --duration 0.001 (with a progress
# line every 0.001 s), runs: at least one message, exit 0.
set +e
timeout -k 2 30 "$PERF" client "$(hostport "$port")" --op write --size 4096 --duration 0.001 \
  --interval 0.001 --verify --json >"$tmp/short.json" 2>"$tmp/short.err"
rc=$?
set -e
short=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["messages"])' "$tmp/short.json" 2>/dev/null || echo none)
echo "--duration 0.001: rc=$rc, messages $short"
if [[ $rc -ne 0 || $short == none || $short -lt 1 ]]; then
  echo "FAIL: --duration 0.001"; cat "$tmp/short.err"; fail=1
fi

# --iters N sends exactly N messages (it used to fill the queue depth past
# the last: --iters 1 sent 64, --iters 100 sent 102): the client's count and,
# where the server counts them (a verified write's WRITE_IMMs, a send's
# SENDs), the server's.
for run in "write 1" "write 100" "send 100" "read 1" "write 100 --bidir" "send 1 --bidir"; do
  read -r op n extra <<<"$run"
  set +e
  timeout 30 "$PERF" client "$(hostport "$port")" --op "$op" --size 4096 --iters "$n" --verify \
    ${extra:+"$extra"} --json >"$tmp/exact.json" 2>"$tmp/exact.err"
  rc=$?
  set -e
  counts=$(python3 -c 'import json, sys; j = json.load(open(sys.argv[1])); print(j["messages"], j.get("server_messages_received"))' "$tmp/exact.json" 2>/dev/null || echo "none none")
  echo "--op $op --iters $n $extra: rc=$rc, messages (client, server): $counts"
  want="$n $n"
  [[ $op == read ]] && want="$n 0"  # a server counts no READs
  if [[ $rc -ne 0 || $counts != "$want" ]]; then
    echo "FAIL: --op $op --iters $n $extra did not send exactly $n"; cat "$tmp/exact.err"; fail=1
  fi
done

# Out-of-range options are refused up front, exit 2, with a line that names
# the option (they used to be clamped or truncated silently, and a --duration
# of 0, -5, nan, inf or 1e10 ran no message and exited 0). --interval 0 would
# print endless -nan / inf progress lines; 1e-10, 0 ns on the clock, hung the
# client deaf to SIGTERM (hence -k: a regression fails, it does not hang), and
# --duration 1e-300 ran no message and exited 0. The floor is 1 ms.
for bad in "--interval 0" "--interval -1" "--interval abc" "--interval 1e10" "--interval 1e-10" \
  "--interval 0.0009" "--duration 0" "--duration -5" "--duration nan" "--duration inf" \
  "--duration 1e10" "--duration 1e-300" "--duration 0.0009" "--iters 0" "--iters -1" \
  "--paths 0" "--paths 33" "--entropy-count 65600" "--entropy-count 0" "--entropy-count 4" \
  "--mtu 0" "--mtu 100" "--mtu 65535" "--ack-every 0" "--ack-every 65" "--peer-timeout-ms 0"; do
  read -r opt val <<<"$bad"
  iters=(--iters 10)
  [[ $opt == --duration || $opt == --iters ]] && iters=()
  set +e
  timeout -k 2 10 "$PERF" client "$(hostport "$port")" "${iters[@]}" "$opt" "$val" >"$tmp/bad.out" 2>&1
  rc=$?
  set -e
  if [[ $rc -ne 2 ]] || ! head -1 "$tmp/bad.out" | grep -q -- "^$opt: "; then
    echo "FAIL: $bad: rc=$rc"; cat "$tmp/bad.out"; fail=1
  fi
done
set +e
timeout 10 "$PERF" server "$(hostport 1)" --paths 33 >"$tmp/bad.out" 2>&1
rc=$?
set -e
if [[ $rc -ne 2 ]] || ! grep -q -- "^--paths: " "$tmp/bad.out"; then
  echo "FAIL: server --paths 33: rc=$rc"; cat "$tmp/bad.out"; fail=1
fi

# A second client while a test runs is refused at once, naming the client
# whose test runs (it used to wait 5 s for "no answer from server"); the
# first test runs on undisturbed.
"$PERF" client "$(hostport "$port")" --op write --size 65536 --duration 3 --json \
  >"$tmp/first.json" 2>"$tmp/first.err" &
first_pid=$!
# The first test runs once its client prints a progress line (a sleep alone
# may end before its Hello, on a loaded machine, and the second is queued).
for _ in $(seq 400); do
  grep -q '^\[' "$tmp/first.err" 2>/dev/null && break
  sleep 0.05
done
# The refusal is timed alone, before the first client is waited for: timed
# after it, the bound measured the first client's remaining run.
start_ns=$(date +%s%N)
set +e
timeout 20 "$PERF" client "$(hostport "$port")" --iters 10 >"$tmp/second.out" 2>&1
rc=$?
refused_ms=$((($(date +%s%N) - start_ns) / 1000000))
wait "$first_pid"
first_rc=$?
set -e
echo "busy server: second client rc=$rc after $refused_ms ms: $(tail -1 "$tmp/second.out")"
# 3 s: at once against the 5 s of "no answer from server" it used to take.
if [[ $rc -ne 2 || $refused_ms -gt 3000 || $first_rc -ne 0 ]] ||
   ! grep -q "refused the test: server busy: a test with 127.0.0.1:[0-9]* is running" "$tmp/second.out" ||
   ! grep -q "refused a test from peer 127.0.0.1:[0-9]*, conn 0x[0-9a-f]*: server busy" "$tmp/server.log"; then
  echo "FAIL: busy server (first client rc=$first_rc)"; cat "$tmp/second.out" "$tmp/first.err"; fail=1
fi
# Progress lines every --interval for any run longer than that, --iters too:
# 30000 round trips one at a time take well over 0.05 s.
set +e
"$PERF" client "$(hostport "$port")" --op write --size 1024 --qd 1 --iters 30000 --interval 0.05 \
  --json >"$tmp/iters.json" 2>"$tmp/iters.err"
rc=$?
set -e
lines=$(grep -c '^\[' "$tmp/iters.err" || true)
secs=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["seconds"])' "$tmp/iters.json" 2>/dev/null || echo 0)
echo "iters: rc=$rc, $lines progress lines in $secs s"
if [[ $rc -ne 0 ]] || ! python3 -c 'import sys; s, n = float(sys.argv[1]), int(sys.argv[2]); sys.exit(0 if n >= max(1, int(s / 0.05) // 2) else 1)' "$secs" "$lines" ||
   grep -q 'nan\|inf' "$tmp/iters.err"; then
  echo "FAIL: progress lines with --iters"; cat "$tmp/iters.err"; fail=1
fi

# A frozen server (SIGSTOP), a long peer timeout and a second Ctrl-C: the
# client gives up on its outstanding requests at once and says whose; once
# thawed, the server reads the client's DISCONNECT and says whose test ended
# without Done.
run_frozen frozen2 2 --peer-timeout-ms 30000
echo "second signal: client rc=$rc after $waited s: $(tail -1 "$tmp/frozen2.err")"
if [[ $rc -eq 0 || $waited -gt 5 ]] ||
   ! tail -1 "$tmp/frozen2.err" | grep -q "outstanding at the second signal (peer 127.0.0.1:$port, conn 0x[0-9a-f]*)"; then
  echo "FAIL: second signal"; cat "$tmp/frozen2.err"; fail=1
fi
expect_server_says "without Done" "the server's message lacks the peer and connection"
# ... and names the connection's state and what ended it (it said
# "connection state 2").
if ! grep "without Done" "$tmp/server.log" |
   grep -qE "\): connection (closed|failed): ended with k[A-Za-z]+ \("; then
  echo "FAIL: the server's message does not name the connection's state"; fail=1
fi

# A server that stops answering mid-run: the client must give up on its own
# with an error that names the peer and connection (here the driver's peer
# timeout), not wait forever for its outstanding requests, even after Ctrl-C.
# This client vanishes without a DISCONNECT: once thawed, the server hears
# nothing from it for its peer timeout (2 s), gives the test up naming the
# peer, and serves the next client.
run_frozen frozen 1
echo "frozen server: client rc=$rc after $waited s: $(tail -1 "$tmp/frozen.err")"
if [[ $rc -eq 0 || $waited -gt 20 ]] ||
   ! tail -1 "$tmp/frozen.err" | grep -q "(peer 127.0.0.1:$port, conn 0x[0-9a-f]*)"; then
  echo "FAIL: frozen server"; cat "$tmp/frozen.err"; fail=1
fi
expect_server_says "test abandoned" "the server did not give up on a vanished client"
set +e
timeout 20 "$PERF" client "$(hostport "$port")" --op write --size 65536 --duration 0.5 --verify --json \
  >"$tmp/after.json" 2>"$tmp/after.err"
rc=$?
set -e
if [[ $rc -ne 0 ]] || ! grep -q '"verify_errors":0' "$tmp/after.json"; then
  echo "FAIL: no test served after a vanished client: rc=$rc"; cat "$tmp/after.err"; fail=1
fi
finish
