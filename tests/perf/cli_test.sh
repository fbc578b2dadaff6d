#!/bin/sh
# ctest perf.cli: metaroce-perf refuses, before anything opens, with exit 2
# (every tool's status for a bad command line; it was 1) and a line naming
# the option: an unknown option, an entropy block that runs past port 65535,
# the trimmed DSCP (63) for either class, a --connect-timeout-ms outside
# 10-655350, an --rnr-retry-limit outside 0-65534, and a bare number as the
# address (getaddrinfo would read "9999" as 0.0.39.15), and a size and
# depth over 4 GiB (naming the --qd that fits).
# Host names still resolve; --help names the driver's defaults.
# Then, against a server on loopback: one SIGINT keeps the client's result,
# a plain write's server count, the --paths note, a read --bidir's
# retransmissions named, the --bidir reverse count check, the progress
# line's reverse rate and the server's summary lines, progress stamps at a
# sub-second --interval, and a reader that leaves early (exit 2, no SIGPIPE).
#   cli_test.sh METAROCE_PERF
set -u
perf=$1
here=$(dirname "$0")
# shellcheck source=SCRIPTDIR/../expect_exit.sh
. "$here/../expect_exit.sh"

check() {  # check WHAT CONDITION-EXIT-STATUS
  if [ "$2" -eq 0 ]; then echo "ok:   $1"; else
    echo "FAIL: $1"
    failures=$((failures + 1))
  fi
}
last='the last port, base \+ count - 1, must be at most 65535'
expect 2 'The following argument was not expected: --no-such-option' \
  "$perf" client 127.0.0.1:4792 --no-such-option
expect 2 "^--entropy-base: 65500 with --entropy-count 64 ends at port 65563: $last" \
  "$perf" server 127.0.0.1:0 --entropy-base 65500
expect 2 "^--entropy-base: 65473 with --entropy-count 64 ends at port 65536: $last" \
  "$perf" client 127.0.0.1:4792 --entropy-base 65473
expect 2 "^--entropy-base: 65530 with --entropy-count 8 ends at port 65537: $last" \
  "$perf" server 127.0.0.1:0 --entropy-base 65530 --entropy-count 8 --paths 8
expect 2 '^--control-dscp: must not be 63, the DSCP a trimming switch gives a cut packet' \
  "$perf" server 127.0.0.1:0 --control-dscp 63
expect 2 '^--data-dscp: must not be 63' "$perf" client 127.0.0.1:4792 --data-dscp 63
# The range printed is the one the help names: 63 is refused for TRIM-1 above, so a value past
# it must not be told "0 to 63".
expect 2 '^--data-dscp: Value 64 not in range 0 to 62' "$perf" client 127.0.0.1:4792 --data-dscp 64
expect 2 '^--control-dscp: Value 255 not in range 0 to 62' "$perf" server 127.0.0.1:0 --control-dscp 255
expect 2 "^addr: '9999' is a bare number, not an address; for a port, write HOST:9999" \
  "$perf" server 9999
expect 2 "^addr: '4792' is a bare number, not an address" "$perf" client 4792 --iters 1
expect 2 "^--bind: '9999' is a bare number, not an address" \
  "$perf" client 127.0.0.1:4792 --bind 9999 --iters 1
# A value that is no number, or not a whole one, is called that: CLI11's
# range check said "not in range 1 to 1073741824" for 64k, which sends the
# user looking for a bound instead of the typo.
expect 2 '^--size: Value 64k is not a whole number \(expected 1 to 1073741824\)' \
  "$perf" client 127.0.0.1:4792 --size 64k
expect 2 '^--qd: Value 2.5 is not a whole number' "$perf" client 127.0.0.1:4792 --qd 2.5
expect 2 '^--paths: Value 1e1 must be written in plain digits' "$perf" server 127.0.0.1:0 --paths 1e1
expect 2 '^--size: Value -1 not in range 1 to 1073741824' "$perf" client 127.0.0.1:4792 --size -1
# --connect-timeout-ms: how long the client asks for its connection, a
# request every 10 ms, 1 to the engine's 65535 of them; the server connects
# to no one.
expect 2 '^--connect-timeout-ms: Value 0 not in range 10 to 655350' \
  "$perf" client 127.0.0.1:4792 --connect-timeout-ms 0
expect 2 '^--connect-timeout-ms: Value 655351 not in range 10 to 655350' \
  "$perf" client 127.0.0.1:4792 --connect-timeout-ms 655351
expect 2 '^--connect-timeout-ms: Value 2s is not a whole number \(expected 10 to 655350\)' \
  "$perf" client 127.0.0.1:4792 --connect-timeout-ms 2s
expect 2 'not expected: .*--connect-timeout-ms' \
  "$perf" server 127.0.0.1:0 --connect-timeout-ms 1000
# --rnr-retry-limit: the engine's range, 0 (unlimited) to 65534 (LOSS-7); the
# engine's open would refuse 65535 only after the command line.
expect 2 '^--rnr-retry-limit: Value 65535 not in range 0 to 65534' \
  "$perf" client 127.0.0.1:4792 --rnr-retry-limit 65535
expect 2 '^--rnr-retry-limit: Value -1 not in range 0 to 65534' \
  "$perf" server 127.0.0.1:0 --rnr-retry-limit -1
expect 2 '^--rnr-retry-limit: Value 3x is not a whole number \(expected 0 to 65534\)' \
  "$perf" server 127.0.0.1:0 --rnr-retry-limit 3x
# An unbracketed IPv6 address whose last group could be a port: which was
# meant is asked (it used to be read as the address ::1:5, port 4792). The
# client finds it where it resolves the address, after the command line, and
# exits 2 as for any test that could not start.
expect 2 'is ambiguous: .*write it \[::1\]:5, for the address alone \[::1:5\]' \
  "$perf" client ::1:5 --iters 1
# An address that does not parse, the server's or --bind's: the parser's
# words and exit 2, nothing run (the client reads the server's address with
# the driver's non-throwing parse_address_checked and format_address_text,
# so that memory running short there is such a refusal too, not an uncaught
# std::bad_alloc: tests/perf/perf_alloc_test.cpp).
expect 2 '^metaroce-perf client: 127.0.0.1:70000: port out of range in "127.0.0.1:70000"$' \
  "$perf" client 127.0.0.1:70000 --iters 1
expect 2 "^metaroce-perf client: \\[::1: missing ']' in \"\\[::1\"$" "$perf" client '[::1' --iters 1
expect 2 '^metaroce-perf client: open 127.0.0.1:70000: port out of range in "127.0.0.1:70000"$' \
  "$perf" client 127.0.0.1:4792 --bind 127.0.0.1:70000 --iters 1
# A CPU the process may not run on (here 1023, past this host's): refused,
# exit 2 (it used to warn and run unpinned, the measurement not the one
# asked for; the server then waited for clients).
if [ "$(nproc --all)" -lt 1024 ]; then
  expect 2 '^metaroce-perf: cannot pin to CPU 1023: ' \
    timeout 5 "$perf" server 127.0.0.1:0 --cpu 1023 --once
fi
expect 0 '' "$perf" --help
# The help names the defaults the run uses, the UDP driver's (min_rto 10 ms,
# target delay 1 ms); it said 1000 and 50 us, the engine's. The DSCPs go to
# 62: 63 is refused (above).
help=$("$perf" client --help)
check "client --help: --min-rto-us default 10000, --target-delay-us default 1000, DSCP 0-62" \
  "$(printf '%s\n' "$help" | grep -q 'min_rto in microseconds, 1-100000 (default 10000,' &&
    printf '%s\n' "$help" | grep -q 'target queue delay in microseconds, 1-1000000 (default 1000,' &&
    [ "$(printf '%s\n' "$help" | grep -c 'DSCP of this end.s [a-zA-Z ]*, 0-62 ')" -eq 2 ]; echo $?)"
check "client --help: --rnr-retry-limit 0-65534, default 0 (unlimited)" \
  "$(printf '%s\n' "$help" | grep -q 'kRnrRetryExceeded, 0-65534 (default 0: unlimited'; echo $?)"
# --bind naming the server's own address: refused at once (the client
# connected to itself and gave up after 5 s waiting for a HelloAck).
expect 2 "^metaroce-perf client: --bind 127.0.0.1:48200 is the server's address 127.0.0.1:48200: the client would connect to itself" \
  timeout 20 "$perf" client 127.0.0.1:48200 --bind 127.0.0.1:48200 --iters 1
# A size and depth over 4 GiB of buffers: the refusal names the deepest
# --qd that fits (it named no number).
expect 2 'over 4 GiB: --op send --size 1073741824 takes --qd 3 at most, not 200$' \
  "$perf" client 127.0.0.1:4792 --op send --size 1073741824 --qd 200
expect 2 'over 4 GiB: --op write --size 1073741824 --bidir takes --qd 4 at most, not 5$' \
  "$perf" client 127.0.0.1:4792 --size 1073741824 --qd 5 --bidir
# Accepted: the last port exactly 65535 with --entropy-base, and a host name,
# reach the run: here a client that finds no server at a closed port, exit 2
# with the connect timeout. Nothing less will do: a value open() refuses, or
# a host name that no longer resolves, also exits 2 with a
# "metaroce-perf client:" line, but names open or the address instead.
for args in "localhost:1 --entropy-base 65472" "127.0.0.1:1 --control-dscp 62 --data-dscp 0" \
  "127.0.0.1:1 --rnr-retry-limit 65534"; do
  # shellcheck disable=SC2086
  err=$(timeout 20 "$perf" client $args --iters 1 --peer-timeout-ms 100 2>&1 >/dev/null)
  rc=$?
  check "metaroce-perf client $args -> past open and the address, to the connect: exit $rc: $err" \
    "$([ "$rc" -eq 2 ] && printf '%s\n' "$err" |
      grep -q '^metaroce-perf client: connect to .*: no answer within .*kConnectTimeout'; echo $?)"
done

# await_line FILE PATTERN: until FILE has a line matching PATTERN (20 s at
# most: a loaded host's). A signal timed from a process's start instead
# (a fixed 1.5 s) could come before its test ran.
await_line() {
  await_line_tries=400
  while [ "$await_line_tries" -gt 0 ] && ! grep -q -- "$2" "$1" 2>/dev/null; do
    await_line_tries=$((await_line_tries - 1))
    sleep 0.05
  done
}

# Runs against a server on loopback (port 0: the kernel's choice, read from
# its first line). Each metaroce-perf started here is killed by its pid.
out=$(mktemp -d)
"$perf" server 127.0.0.1:0 --spin-us 0 >"$out/server" 2>&1 &
server=$!
port_of_server='s/^metaroce-perf server listening on 127\.0\.0\.1:\([0-9]*\) .*/\1/p'
port=$(await_output "$out/server" "$port_of_server")
if [ -z "$port" ]; then
  check "a server on 127.0.0.1:0 starts: $(cat "$out/server")" 1
else
  addr=127.0.0.1:$port
  # One SIGINT stops the posting; the client drains, sends Done and still
  # gets the server's Result: a report and exit 0 (it used to print "no
  # result from the server" and exit 2).
  "$perf" client "$addr" --op write --duration 5 --verify --json >"$out/int.json" 2>"$out/int.err" &
  client=$!
  await_line "$out/int.err" '^\['  # its first progress line: 1 s into the test
  kill -INT "$client"
  wait "$client"
  rc=$?
  # The report says the run was cut short (a 1.5 s run of a 5 s test read
  # as a whole one).
  check "one SIGINT: the run ends with its result, exit $rc: $(cat "$out/int.err")" \
    "$([ "$rc" -eq 0 ] && grep -q '"server_messages_received":[1-9]' "$out/int.json" &&
      grep -q '"stopped_by_signal":true' "$out/int.json" &&
      ! grep -q 'no result' "$out/int.err"; echo $?)"
  # A plain write (no --verify): the server counts what arrived (it used to
  # report 0 messages received).
  timeout 30 "$perf" client "$addr" --op write --iters 100 --size 4096 --json >"$out/w.json" 2>&1
  check "a plain write's server_messages_received is 100: $(cat "$out/w.json")" \
    "$(grep -q '"server_messages_received":100[,}]' "$out/w.json" &&
      ! grep -q 'stopped_by_signal' "$out/w.json"; echo $?)"
  # --paths applies to the client's own sending: a read's data comes on the
  # server's 8 paths, and the client says so (it used to look as if it had
  # asked for 2).
  timeout 30 "$perf" client "$addr" --op read --iters 100 --size 4096 --paths 2 --entropy-count 4 \
    --json >"$out/r.json" 2>"$out/r.err"
  check "read --paths 2: the note and both path counts: $(cat "$out/r.err")" \
    "$(grep -q "note: --paths (2) applies to the client's own sending" "$out/r.err" &&
      grep -q '"client_path_count":2[,}]' "$out/r.json" &&
      grep -q '"server_path_count":8[,}]' "$out/r.json"; echo $?)"
  # A read --bidir: the client's own retransmissions are of its requests and
  # of its answers to the server's READs (the text called them the requests').
  timeout 30 "$perf" client "$addr" --op read --bidir --iters 200 --size 4096 >"$out/rb.txt" 2>&1
  rc=$?
  check "read --bidir: the client's retransmissions are named with the reverse load, exit $rc: $(grep retransmitted "$out/rb.txt")" \
    "$([ "$rc" -eq 0 ] &&
      grep -Eq "the client's requests and answers to the server's READs: [0-9]+\)" "$out/rb.txt"; echo $?)"
  # A send --bidir --verify: the reverse messages the client received match
  # those the server completed (now checked, and reported).
  timeout 30 "$perf" client "$addr" --op send --bidir --verify --iters 500 --size 4096 --json \
    >"$out/s.json" 2>&1
  rc=$?
  rev=$(sed -n 's/.*"reverse":{[^}]*"messages":\([0-9]*\).*/\1/p' "$out/s.json")
  check "send --bidir: the reverse messages received are the server's $rev, exit $rc" \
    "$([ "$rc" -eq 0 ] && [ -n "$rev" ] &&
      grep -q "\"messages_received\":${rev}[,}]" "$out/s.json"; echo $?)"
  # The progress line's reverse column is this interval's, from the bytes
  # the connection received: a plain write --bidir shows its reverse load
  # (the old rx column read 0.000 without --verify).
  timeout 30 "$perf" client "$addr" --op write --bidir --duration 2.5 --size 16384 \
    >/dev/null 2>"$out/b.err"
  check "write --bidir progress lines show a reverse rate: $(cat "$out/b.err")" \
    "$(grep -Eq '^\[ *2\.[0-9]s\].*reverse [0-9]+\.[0-9]+ Gb/s' "$out/b.err" &&
      ! grep -Eq 'reverse 0\.000 Gb/s' "$out/b.err"; echo $?)"
  # --interval under 0.1 s: the progress lines' stamps carry its decimals
  # (at 0.02 s they read [  0.0s], [  0.1s], ...).
  timeout 30 "$perf" client "$addr" --op write --duration 0.5 --interval 0.02 --size 4096 \
    >/dev/null 2>"$out/fine.err"
  check "--interval 0.02: progress stamps with two decimals: $(head -3 "$out/fine.err")" \
    "$([ "$(grep -c '^\[ *[0-9]*\.[0-9][0-9]s\] ' "$out/fine.err")" -ge 5 ] &&
      ! grep -q '^\[ *[0-9]*\.[0-9]s\]' "$out/fine.err"; echo $?)"
  # A reader that leaves early: the table and progress lines into head -1,
  # and a --json report into a reader gone before it: the report is lost,
  # exit 2 with one line that says so (the client died of SIGPIPE, 141).
  { timeout 30 "$perf" client "$addr" --op write --duration 0.5 --interval 0.02 2>&1
    echo $? >"$out/head.rc"; } | head -1 >"$out/head.out"
  rc=$(cat "$out/head.rc")
  check "a table and progress lines into head -1: exit $rc, first line $(cat "$out/head.out")" \
    "$([ "$rc" -eq 2 ] && grep -q '^\[' "$out/head.out"; echo $?)"
  { timeout 30 "$perf" client "$addr" --op write --iters 100 --interval 100 --json \
    2>"$out/gone-reader.err"
    echo $? >"$out/gone-reader.rc"; } | true
  rc=$(cat "$out/gone-reader.rc")
  check "--json into a reader already gone: exit $rc, stderr: $(cat "$out/gone-reader.err")" \
    "$([ "$rc" -eq 2 ] && [ "$(wc -l <"$out/gone-reader.err")" -eq 1 ] &&
      grep -q '^metaroce-perf client: the report could not be written to stdout' \
        "$out/gone-reader.err"; echo $?)"
  # A report that cannot be written (a full disk): exit 2, not 0.
  expect_full 2 '^metaroce-perf client: the report could not be written to stdout' \
    timeout 30 "$perf" client "$addr" --op write --iters 100 --size 4096 --json
  # The server's summary: each of the 10 clients above (the SIGINT write,
  # write, read, read --bidir, send --bidir, write --bidir, --interval 0.02,
  # head -1, gone reader, /dev/full) ran a test to its end, and each test
  # has one line that counts its messages (a plain write and a read printed
  # 0) followed, after a --bidir's reverse line, by its own io: line (the
  # differencing is PerfSession.IoSinceIsTheDifference's). The server prints
  # a test's lines only once its client has gone: the tenth may still be on
  # its way when the last client exits (20 s at most, as await_line).
  await_ios_tries=400
  while [ "$await_ios_tries" -gt 0 ] && [ "$(grep -c '^  io: ' "$out/server")" -lt 10 ]; do
    await_ios_tries=$((await_ios_tries - 1))
    sleep 0.05
  done
  check "the server's summary: one test line with its messages and one io: line for each of the 10 clients: $(grep -E '^(test|  io:|connection)' "$out/server")" \
    "$(awk '/^connection from / { conns++ }
      /^test / { tests++; if ($0 ~ /: [1-9][0-9]* messages /) counted++; want_io = 1; next }
      /^  reverse: / { next }
      /^  io: / { if (want_io) ios++; else stray++; want_io = 0; next }
      { want_io = 0 }
      END { exit !(conns == 10 && tests == 10 && counted == 10 && ios == 10 && !stray) }' \
      "$out/server"; echo $?)"
fi
kill -INT "$server" 2>/dev/null
wait "$server"

# A server that goes mid-run (stopped: it closes the connection, DISCONNECT):
# the client ends with exit 1 (the test ran and went wrong) and an error naming the peer and why, and its
# report keeps the counters of its paths, which the engine drops with the
# connection (it said "0 client paths", with counters of the last progress
# line, or none in a run shorter than --interval); they are at most 100 ms
# old, so the data packets sent are checked against half the bytes' 4 KiB
# packets.
"$perf" server 127.0.0.1:0 --spin-us 0 >"$out/gone" 2>&1 &
server=$!
port=$(await_output "$out/gone" "$port_of_server")
"$perf" client "127.0.0.1:$port" --op write --duration 5 --interval 10 --size 65536 --json \
  >"$out/gone.json" 2>"$out/gone.err" &
client=$!
await_line "$out/gone" '^connection from '
sleep 1  # the test runs (its Hello answered, the data flowing)
kill -INT "$server"
wait "$server"
wait "$client"
rc=$?
bytes=$(sed -n 's/.*"bytes":\([0-9]*\),.*/\1/p' "$out/gone.json")
sent=$(sed -n 's/.*"data_packets_sent":\([0-9]*\),.*/\1/p' "$out/gone.json")
# The engine keeps a closed connection's path counters: the paths' packets
# are final and add up to the connection's (they were up to 100 ms old).
on_paths=$(python3 -c 'import json,sys; print(sum(p["packets"] for p in json.load(open(sys.argv[1]))["paths"]))' "$out/gone.json")
check "a server gone mid-run: exit $rc, the peer named, 8 paths with $on_paths of $sent data packets for $bytes bytes: $(cat "$out/gone.err")" \
  "$([ "$rc" -eq 1 ] && grep -q "peer 127.0.0.1:$port" "$out/gone.err" &&
    grep -q "kPeerClosed" "$out/gone.err" &&
    grep -q '"client_path_count":8[,}]' "$out/gone.json" &&
    ! grep -q '"counters_note"' "$out/gone.json" &&
    [ -n "$sent" ] && [ -n "$bytes" ] && [ "$sent" -ge $((bytes / 8192)) ] &&
    [ "$on_paths" = "$sent" ]; echo $?)"
# A server whose log's reader left (| head -1, to learn its port) serves on
# and says so once on stderr (it died of SIGPIPE at its next line, the
# client's "connection from").
{ timeout 30 "$perf" server 127.0.0.1:0 --once --spin-us 0 2>"$out/logless.err"
  echo $? >"$out/logless.rc"; } | head -1 >"$out/logless.first" &
port=$(await_output "$out/logless.first" "$port_of_server")
sleep 0.2  # head has gone
timeout 30 "$perf" client "127.0.0.1:$port" --iters 100 >/dev/null 2>"$out/logless.client"
rc=$?
tries=100
while [ ! -s "$out/logless.rc" ] && [ "$tries" -gt 0 ]; do
  sleep 0.1
  tries=$((tries - 1))
done
src=$(cat "$out/logless.rc" 2>/dev/null)
check "a server whose log reader left: client exit $rc, server exit ${src:-none}: $(cat "$out/logless.err" "$out/logless.client")" \
  "$([ "$rc" -eq 0 ] && [ "$src" = 0 ] &&
    [ "$(grep -c 'its log could not be written to stdout: Broken pipe; serving on' "$out/logless.err")" -eq 1 ]; echo $?)"
rm -rf "$out"
finish
