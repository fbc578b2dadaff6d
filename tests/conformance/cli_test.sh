#!/bin/sh
# ctest conformance.cli: metaroce-conform and metaroce-conform-agent exit 2
# on bad command lines (CLI11's errors included; --help exits 0), the
# options of --target remote are refused with any other target (the engine
# would be checked instead, and pass), and a run whose agent dies midway
# stops with exit 3, naming the check, instead of failing the checks left
# (conformance/README.md, exit statuses), and so does one that breaks the
# agent protocol in one way (faulty_agent.py), with a JSON report, never a
# crash or a hang.
#   cli_test.sh METAROCE_CONFORM METAROCE_CONFORM_AGENT
set -u
conform=$1
agent=$2
here=$(dirname "$0")
# shellcheck source=SCRIPTDIR/../expect_exit.sh
. "$here/../expect_exit.sh"
# shellcheck source=SCRIPTDIR/../../tools/conformance/agent.sh
. "$here/../../tools/conformance/agent.sh"

only='is an option of --target remote \(the target is (engine|udp)\)'
expect 2 "^metaroce-conform: --agent $only" "$conform" --agent 127.0.0.1:7000 \
  --iut 127.0.0.1:40000 --entropy-base 40001 --entropy-count 16
expect 2 "^metaroce-conform: --iut $only" "$conform" --target engine --iut 127.0.0.1:40000
expect 2 "^metaroce-conform: --entropy-base $only" "$conform" --entropy-base 40001
expect 2 "^metaroce-conform: --entropy-count $only" "$conform" --target udp --entropy-count 16
expect 2 "^metaroce-conform: --tester $only" "$conform" --tester 127.0.0.3
expect 2 "^metaroce-conform: --stranger $only" "$conform" --stranger 127.0.0.4
expect 2 "^metaroce-conform: --min-wait-us $only" "$conform" --min-wait-us 5000
expect 2 'needs --agent, --iut' "$conform" --target remote --agent 127.0.0.1:7000
# Each remote option wrong in itself is named, before the agent is
# contacted (port 1: nothing listens): --entropy-base 0 once drew "needs
# --agent, --iut, --entropy-base and --entropy-count", all four given; a
# block past 65535 ran; --tester foo was a socket's "Invalid argument".
remote_args='--target remote --agent 127.0.0.1:1 --iut 127.0.0.1:40000'
# shellcheck disable=SC2086 # remote_args: options and their values
{
  expect 2 '^metaroce-conform: --entropy-base 0: not a port' "$conform" $remote_args \
    --entropy-base 0 --entropy-count 16
  expect 2 "^metaroce-conform: --agent '' is not HOST:PORT" "$conform" --target remote --agent '' \
    --iut 127.0.0.1:40000 --entropy-base 40001 --entropy-count 16
  expect 2 '^metaroce-conform: --entropy-base 65000 and --entropy-count 1000: the block runs past port 65535' \
    "$conform" $remote_args --entropy-base 65000 --entropy-count 1000
  expect 2 "^metaroce-conform: --tester 'foo' is not an IPv4 or IPv6 address" "$conform" \
    $remote_args --entropy-base 40001 --entropy-count 16 --tester foo
  expect 2 "^metaroce-conform: --stranger 'foo' is not an IPv4 or IPv6 address" "$conform" \
    $remote_args --entropy-base 40001 --entropy-count 16 --stranger foo
}
# The listings take no option of a run: --list --json printed the table,
# and --list --agent x exited 0.
expect 2 '^metaroce-conform: --json is an option of a run, not of --list$' "$conform" --list --json
expect 2 '^metaroce-conform: --rule is an option of a run, not of --list$' "$conform" --list \
  --rule FOO-1
expect 2 '^metaroce-conform: --agent is an option of a run, not of --list-unchecked$' "$conform" \
  --list-unchecked --agent x
# CLI11's own errors: its message, the documented exit status.
expect 2 'no-such-option' "$conform" --no-such-option
expect 2 'target' "$conform" --target nic
expect 2 'entropy-base' "$conform" --target remote --entropy-base 70000
# --min-wait-us out of 1000..10000000: 0 or -1 would wait no time at all and
# blame the IUT for every reply.
for w in 0 -1 999 10000001; do
  expect 2 "^--min-wait-us: Value $w not in range 1000 to 10000000" "$conform" --target remote \
    --agent 127.0.0.1:7000 --iut 127.0.0.1:40000 --entropy-base 40001 --entropy-count 16 \
    --min-wait-us "$w"
done
# Not a whole number: said so, not "not in range".
expect 2 "^--min-wait-us: Value 5ms is not a whole number \(expected 1000 to 10000000\)" \
  "$conform" --target remote --agent 127.0.0.1:7000 --iut 127.0.0.1:40000 --entropy-base 40001 \
  --entropy-count 16 --min-wait-us 5ms
expect 0 '' "$conform" --help
# A rule no check names, before any target opens (the agent named here is
# never reached), saying why: a rule of the spec without a peer test, one
# whose peer test is not here yet (conformance/README.md, "Not yet here"),
# no rule at all, or none named. Each once drew only "no check names rule".
notyet=$("$conform" --list-unchecked | sed -n 's/^\([A-Z]*-[0-9]*\) *(not yet).*/\1/p' | head -1)
expect 2 "^metaroce-conform: no check names rule LOSS-1 \(no peer test\): its tests in section 12 are codec, engine or fabric" \
  "$conform" --rule LOSS-1
if [ -n "$notyet" ]; then
  expect 2 "^metaroce-conform: no check names rule $notyet \(not yet\): section 12 names a peer test for it" \
    "$conform" --rule "$notyet"
else
  echo "skip: no rule is \"(not yet)\" today, so --rule's refusal of one is not run here" \
    "(its words: Conformance.ARuleWithoutACheckIsRefusedSayingWhy)"
fi
expect 2 "^metaroce-conform: no check names rule LOSS-1 " "$conform" --target remote \
  --agent 127.0.0.1:1 --iut 127.0.0.1:40000 --entropy-base 40001 --entropy-count 16 --rule LOSS-1
expect 2 "^metaroce-conform: FOO-1 is no rule of the MetaRoCE v0.1 spec" "$conform" --rule FOO-1
expect 2 "^metaroce-conform: --rule names no rule \(an empty ID\)" "$conform" --rule ''
# In a list, one bad ID stops the run (and each is named).
expect 2 "^metaroce-conform: FOO-1 is no rule" "$conform" --rule PLACE-2,FOO-1
# On a target in real time, a rule every check of which needs simulated
# time is verified by none: refused as a rule with no check is (it once ran
# its checks to "0 passed, 0 failed, 1 skipped", exit 0), in a list too.
expect 2 "^metaroce-conform: no check verifies rule LOSS-4 on this target: every check of it needs a target with simulated time" \
  "$conform" --target udp --rule LOSS-4
expect 2 "no check verifies rule ACK-1 on this target" "$conform" --target udp --rule ACK-2,ack-1
# ... while a run that skipped some of a rule's checks so says which
# (LOSS-7's timing needs it, its retry limit does not), in text and JSON.
real_time_report() {
  out=$("$conform" --target udp --rule LOSS-7 "$@")
  rc=$?
  if [ "$rc" -ne 0 ] || ! printf '%s\n' "$out" | grep -q "$want"; then
    echo "FAIL: --target udp --rule LOSS-7 $*: exit $rc, no '$want' in: $out"
    failures=$((failures + 1))
  else
    echo "ok:   --target udp --rule LOSS-7 $* says: $want"
  fi
}
want='^verified in part on this target (some of their checks need simulated time): LOSS-7$'
real_time_report
want='"unverified_rules":\[\],"rules_verified_in_part":\["LOSS-7"\]'
real_time_report --json
# --list-unchecked --target remote adds what a run in real time leaves
# unverified, and takes no other option of a run.
if "$conform" --list-unchecked --target remote | grep -q '^LOSS-4 *(simulated time only) ' &&
  "$conform" --list-unchecked --target remote | grep -q '^LOSS-7 *(in part) ' &&
  ! "$conform" --list-unchecked | grep -q '(simulated time only)'; then
  echo "ok:   --list-unchecked --target remote names LOSS-4 and LOSS-7, --list-unchecked neither"
else
  echo "FAIL: --list-unchecked --target remote: $("$conform" --list-unchecked --target remote)"
  failures=$((failures + 1))
fi
expect 2 '^metaroce-conform: --target is an option of a run, not of --list$' "$conform" --list \
  --target udp
# rule_runs RULES... CHECK_RULES...: --rule RULES runs exactly the checks
# whose rule lists are CHECK_RULES (as --json names them, one per line).
rule_runs() {
  got=$("$conform" --json --rule "$1" | python3 -c '
import json, sys
print("\n".join(c["rule"] for c in json.load(sys.stdin)["checks"]))')
  rc=$?
  want=$2
  if [ "$rc" -ne 0 ] || [ "$got" != "$want" ]; then
    echo "FAIL: --rule '$1': exit $rc, ran '$got', wanted '$want'"
    failures=$((failures + 1))
  else
    echo "ok:   --rule '$1' runs $(echo "$got" | tr '\n' '/')"
  fi
}
# SCHED-3 is checked by the LOSS-5 check (no data on a probing path); it
# once drew "no check names rule", the check there all along.
rule_runs SCHED-3 'LOSS-5, PATH-4, SCHED-3'
# A list, either case, spaces trimmed, in the suite's order, each check once
# (ACK-7 has two: the port of an ACK, and a PROBE's answer).
rule_runs 'ack-7, PLACE-2,ACK-7' "$(printf 'ACK-7\nACK-7\nPLACE-2')"
rule_runs 'CONN-5,BAD-2' 'BAD-2, CONN-5'
# A report that cannot be written (a full disk) is not a pass.
expect_full 2 '^metaroce-conform: the report could not be written to stdout' \
  "$conform" --rule CONN-1 --json
expect 2 'no-such-option' "$agent" --listen 127.0.0.1:0 --iut 127.0.0.1:40000 --no-such-option
expect 2 'listen' "$agent" --iut 127.0.0.1:40000
# An entropy block of 0 ports once ran with 16; fewer ports than paths
# cannot give each path its own.
expect 2 'entropy-count: Value 0 not in range' "$agent" --listen 127.0.0.1:0 \
  --iut 127.0.0.1:40000 --entropy-count 0
expect 2 'entropy-count 3 must be at least --paths \(4\)' "$agent" --listen 127.0.0.1:0 \
  --iut 127.0.0.1:40000 --entropy-count 3
# An unbracketed IPv6 address with a port: ::1:5 was taken as ::1 port 5,
# where the UDP driver reads the address ::1:5; both refuse it now.
expect 2 "^metaroce-conform-agent: '::1:0' is not host:port \(an IPv6 address goes in brackets" \
  "$agent" --listen ::1:0 --iut 127.0.0.1:40000
expect 2 "--iut '::1:5' is not an a.b.c.d:port or \[ipv6\]:port" "$conform" --target remote \
  --agent 127.0.0.1:7000 --iut ::1:5 --entropy-base 40001 --entropy-count 16
expect 0 '' "$agent" --help

# The agent dies during a run (which lasts several seconds): exit 3, the
# check that was running named, no verdict.
dir=$(mktemp -d)
trap 'stop_agent; [ -n "${echo_pid:-}" ] && kill "$echo_pid" 2>/dev/null; [ -n "${faulty_pid:-}" ] && kill "$faulty_pid" 2>/dev/null; rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM HUP
rc=2
for _ in 1 2 3 4 5; do
  start_agent "$agent" 127.0.0.1 127.0.0.1 "$dir" || continue
  timeout 120 "$conform" --target remote --agent "$listen" --iut "$iut" --entropy-base "$base" \
    --entropy-count 16 >"$dir/run.out" 2>"$dir/run.err" &
  conform_pid=$!
  # 1 s into the run, timed from the target's opening ("target: " line): a
  # fixed 1 s from the start was a loaded host's to spend opening it, and
  # the agent was then killed before any check.
  tries=400
  while [ "$tries" -gt 0 ] && ! grep -q '^target: ' "$dir/run.out" &&
    kill -0 "$conform_pid" 2>/dev/null; do
    tries=$((tries - 1))
    sleep 0.05
  done
  sleep 1
  stop_agent
  wait "$conform_pid"
  rc=$?
  [ "$rc" -ne 2 ] && break # 2: the tester's ports were taken; another block
done
cat "$dir/run.out" "$dir/run.err"
if [ "$rc" -ne 3 ]; then
  echo "FAIL: the agent killed midway: exit $rc, wanted 3"
  failures=$((failures + 1))
elif ! grep -Eq '^metaroce-conform: stopped during check [A-Z]+-[0-9].*: (the agent was lost|the target could not be opened): ' \
  "$dir/run.err" || ! grep -Eq '^  STOP [A-Z]+-[0-9].*: interrupted: ' "$dir/run.out"; then
  echo "FAIL: the agent killed midway: no 'stopped during check ...: the agent was lost' or 'STOP' line"
  failures=$((failures + 1))
else
  echo "ok:   the agent killed midway -> exit 3"
fi

# The table's lines go out as the checks end: a run cut short (here after
# 5 s of the ~10 a whole one takes) has shown the checks done so far. It
# once printed nothing until the end, and a run against a wrong --iut, each
# check waiting out its replies, stayed silent for half an hour.
rc=2
for _ in 1 2 3 4 5; do
  start_agent "$agent" 127.0.0.1 127.0.0.1 "$dir" || continue
  timeout 5 "$conform" --target remote --agent "$listen" --iut "$iut" --entropy-base "$base" \
    --entropy-count 16 >"$dir/run.out" 2>"$dir/run.err"
  rc=$?
  stop_agent
  [ "$rc" -ne 2 ] && break # 2: the tester's ports were taken; another block
done
if [ "$rc" -ne 124 ] || ! grep -q '^target: ' "$dir/run.out" ||
  ! grep -Eq '^  (ok|FAIL|skip) +ENC-1 ' "$dir/run.out"; then
  cat "$dir/run.out" "$dir/run.err"
  echo "FAIL: a run cut short after 5 s: exit $rc (wanted 124), no table lines so far"
  failures=$((failures + 1))
else
  echo "ok:   a run cut short after 5 s shows $(grep -c '^  ' "$dir/run.out") checks done"
fi

# remote CASE RC PATTERN [AGENT_OPTION...]: the suite's CONN-2 against a
# fresh agent (with the options given), --iut and --entropy-base as CASE
# says (right; wrong-iut, a port nothing receives on; wrong-base, a block
# 100 ports off the IUT's): exit RC, stderr matching PATTERN (empty:
# nothing on stderr). Another block when the tester's ports are taken.
remote() {
  case=$1 want_rc=$2 pattern=$3
  shift 3
  for _ in 1 2 3 4 5; do
    start_agent "$agent" 127.0.0.1 127.0.0.1 "$dir" "$@" || continue
    r_iut=$iut r_base=$base
    [ "$case" = wrong-iut ] && r_iut=127.0.0.1:$((base - 2))
    [ "$case" = wrong-base ] && r_base=$((base + 100))
    [ "$case" = echo-iut ] && r_iut=$echo_iut
    timeout 60 "$conform" --target remote --agent "$listen" --iut "$r_iut" \
      --entropy-base "$r_base" --entropy-count 16 --rule CONN-2 >"$dir/run.out" 2>"$dir/run.err"
    rc=$?
    stop_agent
    grep -q 'cannot open the remote target' "$dir/run.err" || break
  done
  if [ -z "$pattern" ]; then
    matched=$([ -s "$dir/run.err" ] || echo yes) # no pattern: nothing on stderr
  else
    matched=$(grep -Eq -- "$pattern" "$dir/run.err" && echo yes)
  fi
  if [ "$rc" -ne "$want_rc" ] || [ -z "$matched" ]; then
    cat "$dir/run.out" "$dir/run.err"
    echo "FAIL: $case $*: exit $rc, wanted $want_rc and stderr matching '$pattern'"
    failures=$((failures + 1))
  else
    echo "ok:   $case $* -> exit $rc: $(cat "$dir/run.err" "$dir/run.out")"
  fi
}
# A wrong --iut or --entropy-base: exit 2, naming the option, before any
# check. Checks once failed instead, blaming the IUT in the tester's mapped
# ports ("port 46009 is outside the entropy range 50000-50015", "no
# CONNECT_ACCEPT for the tester's CONNECT_REQ").
remote wrong-iut 2 '^metaroce-conform: --iut 127\.0\.0\.1:[0-9]+: the IUT sent nothing back to a CONNECT_REQ .*\(nothing was checked\)$'
remote wrong-base 2 '^metaroce-conform: --entropy-base [0-9]+: the IUT answered from UDP port [0-9]+, outside the entropy block [0-9]+\.\.[0-9]+ .*\(nothing was checked\)$'
# --iut naming a service that answers every datagram (here, echoing it):
# no CONNECT_ACCEPT or REJECT naming the request, so --iut is named. Any
# datagram once passed, and the echo's port was blamed on --entropy-base.
: >"$dir/echo.out" # (await_output: no line of an earlier writer)
python3 "$here/udp_echo.py" >"$dir/echo.out" 2>&1 &
echo_pid=$!
echo_iut=$(await_output "$dir/echo.out" 's/.*listening on \([^,]*\),.*/\1/p')
remote echo-iut 2 '^metaroce-conform: --iut 127\.0\.0\.1:[0-9]+: the IUT sent 1 datagram, none a CONNECT_ACCEPT or CONNECT_REJECT naming it, back to a CONNECT_REQ .*\(nothing was checked\)$'
kill "$echo_pid" 2>/dev/null
wait "$echo_pid" 2>/dev/null
echo_pid=
# An IUT of 2 paths (hello tells the tester) passes CONN-2, its requests
# round its 2 ports; the check once assumed 4 and failed it.
remote right 0 '' --paths 2
if ! grep -q '^  ok   CONN-2 .*: the first 2 from ports' "$dir/run.out"; then
  cat "$dir/run.out"
  echo "FAIL: a 2-path agent: CONN-2 did not pass judging 2 ports"
  failures=$((failures + 1))
fi

# The reference agent's write_memory refuses "hex" of an odd length or a
# non-hex digit, saying what it needs: "zz" was told it needed an even
# number of digits.
if start_agent "$agent" 127.0.0.1 127.0.0.1 "$dir"; then
  hex_errors=$(python3 -c '
import json, socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
f = s.makefile("rb")
def call(request):
    s.sendall(json.dumps(request).encode() + b"\n")
    return json.loads(f.readline())
call({"op": "hello", "protocol": 1})
lkey = call({"op": "register_memory", "length": 16, "access": 1})["lkey"]
for hex in ("zz", "abc"):
    r = call({"op": "write_memory", "lkey": lkey, "offset": 0, "hex": hex})
    print(r["ok"], r.get("error"))' "$listen" 2>&1)
  stop_agent
  want='False "hex": two hex digits a byte (0-9, a-f, A-F) are required'
  if [ "$hex_errors" != "$(printf '%s\n%s' "$want" "$want")" ]; then
    echo "FAIL: write_memory with hex zz and abc: $hex_errors"
    failures=$((failures + 1))
  else
    echo "ok:   write_memory with hex zz and abc -> $want"
  fi
else
  echo "FAIL: the agent did not start: $(cat "$dir/agent.err")"
  failures=$((failures + 1))
fi

# faulty RULE WANT_RC PATTERN MODE [ARG...]: --rule RULE --json against the
# reference agent behind `faulty_agent.py MODE ARG... --busy-odd`, an agent
# that breaks the protocol in one way, under a 60 s limit (124: it hung):
# exit WANT_RC, stderr or the report matching PATTERN (grep -E), stderr
# never "busy", and stdout a JSON report (faulty_agent_report.py). Every open
# of the target is first answered "busy" (a retry then opens it): the stop
# line once ended with that stale "busy", as if it were the reason. Another
# port block when the tester's ports were taken.
faulty() {
  rule=$1 want_rc=$2 pattern=$3
  shift 3
  for _ in 1 2 3 4 5; do
    start_agent "$agent" 127.0.0.1 127.0.0.1 "$dir" || continue
    # Emptied first: the previous case's port, read before this proxy's
    # redirection emptied the file, was refused, and the agent, killed
    # before it ran (its TERM lost to this script's trap), was waited for
    # without end.
    : >"$dir/faulty.out"
    python3 "$here/faulty_agent.py" "$listen" "$@" --busy-odd >"$dir/faulty.out" 2>&1 &
    faulty_pid=$!
    faulty_at=$(await_output "$dir/faulty.out" 's/.*listening on \([^,]*\),.*/\1/p')
    timeout 60 "$conform" --target remote --agent "$faulty_at" --iut "$iut" \
      --entropy-base "$base" --entropy-count 16 --rule "$rule" --json >"$dir/run.out" \
      2>"$dir/run.err"
    rc=$?
    kill "$faulty_pid" 2>/dev/null
    wait "$faulty_pid" 2>/dev/null
    stop_agent
    grep -q 'Address already in use' "$dir/run.err" || break
  done
  report=$(python3 "$here/faulty_agent_report.py" "$dir/run.out" 2>&1)
  if [ "$rc" -ne "$want_rc" ] || ! cat "$dir/run.err" "$dir/run.out" | grep -Eq -- "$pattern" ||
    grep -q busy "$dir/run.err" || [ "$report" != "report ok" ]; then
    cat "$dir/run.out" "$dir/run.err"
    echo "FAIL: $* (--rule $rule): exit $rc, wanted $want_rc, stderr matching '$pattern' without 'busy'; $report"
    failures=$((failures + 1))
  else
    echo "ok:   $* (--rule $rule) -> exit $rc: $(cut -c1-300 "$dir/run.err")"
  fi
}
# An agent that answers close, conn_error or stats with an error of its own
# (its IUT failed them), not "unknown op" (an agent without them): the run
# stops with that error, exit 3. It once skipped the checks ("the target
# cannot be asked to close", "does not report its counters"), the agent's
# text lost, and exited 0.
for case in "close CONN-7" "conn_error CONN-4" "stats BAD-1"; do
  op=${case% *} rule=${case#* }
  faulty "$rule" 3 "the agent was lost: agent, $op: answered \"the IUT failed: ENOMEM\"" \
    fail "$op" "the IUT failed: ENOMEM"
done
# faulty_open PATTERN MODE [ARG...]: the reference agent behind
# `faulty_agent.py MODE ARG...`, whose hello is faulty: the target does not
# open, exit 2 with stderr matching PATTERN, after one connection (no retry).
faulty_open() {
  pattern=$1
  shift
  for _ in 1 2 3 4 5; do
    start_agent "$agent" 127.0.0.1 127.0.0.1 "$dir" || continue
    : >"$dir/faulty.out"
    python3 "$here/faulty_agent.py" "$listen" "$@" >"$dir/faulty.out" 2>&1 &
    faulty_pid=$!
    faulty_at=$(await_output "$dir/faulty.out" 's/.*listening on \([^,]*\),.*/\1/p')
    expect 2 "^metaroce-conform: cannot open the remote target: agent $faulty_at: $pattern" \
      "$conform" --target remote --agent "$faulty_at" --iut "$iut" --entropy-base "$base" \
      --entropy-count 16 --rule CONN-1
    kill "$faulty_pid" 2>/dev/null
    wait "$faulty_pid" 2>/dev/null
    stop_agent
    break
  done
  if [ "$(grep -c '^tester ' "$dir/faulty.out")" -ne 1 ]; then
    echo "FAIL: $*: $(grep -c '^tester ' "$dir/faulty.out") connections, wanted 1"
    failures=$((failures + 1))
  fi
}
# hello answered with an error that is no "busy" (README, "Sessions"), here
# one ending in ": busy": it once matched ": busy" anywhere and was retried
# for 10 s.
faulty_open 'device: busy$' fail hello "device: busy"
# An agent of another protocol version, or one that says none: it was
# checked as if it spoke version 1.
faulty_open "hello's reply needs \"protocol\": 1 .*\"protocol\": 2" protocol 2
faulty_open "hello's reply needs \"protocol\": 1 " drop-field hello:protocol
# A reply that is no JSON, with bytes that are not UTF-8 (a vendor's
# Latin-1 error text): the JSON report once aborted on it (exit 134, no
# report at all).
faulty CONN-1 3 'agent, connect_to_tester: a reply that is not a JSON object with "ok": \\xe9t\\xe9 not json' \
  garbage connect_to_tester
# A reply nested a million levels deep: quoting it once overflowed the
# stack (exit 139).
faulty PLACE-2 3 'agent, register_memory: a reply without an unsigned "addr"' nested register_memory
# poll_completion returning its oldest completion without removing it (a
# peek for a pop): the checks' loops that drain the completions ran for
# ever (CONN-7's closing side is the first to reach one).
faulty CONN-7 3 'agent, poll_completion: more completions \([0-9]+\) than work requests queued \([0-9]+\)' \
  repeat-completion
# read_memory or write_memory failing, or answering bytes of another
# length: the agent's fault (the tester stays inside its regions). PLACE-2
# once passed without checking that memory was unchanged (two empty reads
# compared), and a refused write_memory left a check blaming the IUT.
faulty PLACE-2 3 'agent, read_memory: answered "no such region" for a range inside a region it registered' \
  fail read_memory "no such region"
faulty PLACE-2 3 'agent, read_memory: a reply without a "hex" string of the [0-9]+ bytes asked for: .*"hex": ""' \
  short-hex
faulty SEQ-2 3 'agent, write_memory: answered "no such region"' fail write_memory "no such region"
# A reply without a field the README requires is a broken agent: post_send
# without "status" was read as the IUT's kInvalidArgument, and
# poll_completion without "completion" as none ready, each failing a check
# (exit 1) as if the IUT had. An error to a well-formed post_send is the
# agent's too.
faulty CONN-7 3 'agent, post_send: a reply without an unsigned "status"' drop-field post_send:status
faulty CONN-7 3 'agent, poll_completion: a reply without "completion"' \
  drop-field poll_completion:completion
faulty CONN-7 3 'agent, post_send: answered "bad opcode" to a well-formed work request' \
  fail post_send "bad opcode"
# The IUT refusing register_memory fails the check (exit 1), quoting the
# agent's error, once lost ("register_memory failed" and nothing more).
faulty PLACE-2 1 'register_memory failed \(the agent.s last error: register_memory: out of memory\)' \
  fail register_memory "out of memory"
# An empty line after every reply to poll_completion: each later request
# read the previous one's reply (a post_send the poll_completion's before
# it), undetected.
faulty CONN-7 3 'agent, [a-z_]+: (more than one line for one request|a line the agent sent unasked)' \
  extra-line poll_completion
# A reply line over 16 MiB, and no reply at all (10 s): broken agents, as
# the README says ("Replies").
faulty PLACE-2 3 'agent, register_memory: a line longer than 16777216 bytes' \
  oversized register_memory
faulty PLACE-2 3 'agent, register_memory: no reply within 10000 ms' silent register_memory
# A check failed before the agent broke: exit 1, not 3 (a failure of the
# IUT outranks the incomplete run), the report stopped all the same.
faulty CONN-1,PLACE-2 1 'stopped during check PLACE-2 \(1 checks done\): the agent was lost: agent, register_memory: a reply that is not' \
  fail connect_to_tester "the IUT refused" -- garbage register_memory
finish
