#!/bin/sh
# ctest conformance.remote: the reference agent (metaroce-conform-agent) on
# 127.0.0.1 and the suite against it through --target remote; every check
# must end as it does with --target udp (the same driver in process).
# Ports are random (the agent's TCP port is the kernel's choice; the IUT's
# block is drawn as UdpTarget draws its own) and taken again on a collision
# (metaroce-conform exit 2, or 3 with the agent still alive and the stop
# naming "Address already in use"); an agent that dies during the run, or
# any other stop, fails the test.
# The agent is always killed.
# With "ipv6" the IUT, the tester and the stranger speak IPv6: the test
# re-runs itself in a network namespace of its own (root: unshare -n; it
# skips, exit 77, where it cannot) whose loopback gets the tester's and the
# stranger's addresses, so the host's own addresses are never touched.
# With "old-agent" the agent answers close, conn_error, listen, initial_psn,
# stats, keepalive, shared_receives, post_shared_recv and rnr_retry_limit
# "unknown op", leaves hello's udp_checksum out and ignores register_memory's base, as an agent
# written before them does: the checks that need them (CONN-4 as responder,
# CONN-7's closing side and its close while connecting, CONN-8's
# target-closing half, CONN-10's close, SEQ-2 in the target's PSN space, the BAD checks'
# counts, CONN-9 in real time, PLACE-6, MR-4, LOSS-7's retry limit; ENC-5,
# which skips anyway)
# must skip, saying why, and every other check end as with --target udp.
#   remote_test.sh METAROCE_CONFORM METAROCE_CONFORM_AGENT [ipv6|old-agent]
set -u
conform=$1
agent=$2
family=${3:-ipv4}
agent_args=
if [ "$family" = old-agent ]; then
  family=ipv4
  agent_args="--without close,conn_error,listen,initial_psn,stats,keepalive,shared_receives,post_shared_recv,rnr_retry_limit,base,udp_checksum"
fi
if [ "$family" = ipv6 ] && [ -z "${MR_CONFORM_NETNS:-}" ]; then
  if ! unshare -n true 2>/dev/null; then
    echo "conformance.remote-ipv6: skipped (needs root for a network namespace)"
    exit 77
  fi
  MR_CONFORM_NETNS=1 exec unshare -n sh "$0" "$@"
fi
tester_args=
listen_host=127.0.0.1
iut_host=127.0.0.1
if [ "$family" = ipv6 ]; then
  ip link set lo up || exit 1
  if [ ! -d /proc/sys/net/ipv6 ] || ! ip -6 addr add fd00:6d72::3/128 dev lo nodad ||
    ! ip -6 addr add fd00:6d72::4/128 dev lo nodad; then
    echo "conformance.remote-ipv6: skipped (no IPv6 in this kernel)"
    exit 77
  fi
  tester_args="--tester fd00:6d72::3 --stranger fd00:6d72::4"
  listen_host='[::1]'
  iut_host='[::1]'
fi
dir=$(mktemp -d)
# shellcheck source=SCRIPTDIR/agent.sh
. "$(dirname "$0")/agent.sh"
trap 'stop_agent; rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM HUP

# What each check should come to: the UDP driver in process.
"$conform" --target udp >"$dir/udp.txt"
udp_rc=$?
rc=2
for attempt in 1 2 3 4 5 6 7 8; do
  # shellcheck disable=SC2086 # agent_args: none, or one option and its value
  if ! start_agent "$agent" "$listen_host" "$iut_host" "$dir" $agent_args; then
    echo "attempt $attempt: the agent did not start: $(cat "$dir/agent.err")" >&2
    continue
  fi
  # shellcheck disable=SC2086 # tester_args: none, or two options and their values
  "$conform" --target remote --agent "$listen" --iut "$iut" --entropy-base "$base" \
    --entropy-count 16 $tester_args >"$dir/remote.txt" 2>"$dir/remote.err"
  rc=$?
  # metaroce-conform: 2, the target did not open (before any check: the
  # tester's or the IUT's ports taken); 3, it was lost midway. A dead agent
  # is a failure of its own. Only a port taken since (the tester's, or the
  # IUT's when the agent opened it afresh) is the host's, worth another
  # block: any other 3 (a protocol break, a reply timeout) is a failure
  # between the tester and the reference agent, which was once retried
  # until an attempt passed.
  agent_died=
  kill -0 "$agent_pid" 2>/dev/null || agent_died=1
  stop_agent
  if [ "$rc" -eq 3 ] && [ -n "$agent_died" ]; then
    echo "attempt $attempt: the agent died during the run" >&2
    break
  fi
  [ "$rc" -eq 3 ] && ! grep -q 'Address already in use' "$dir/remote.err" && break
  [ "$rc" -ne 2 ] && [ "$rc" -ne 3 ] && break
  echo "attempt $attempt: the target could not be opened (exit $rc: $(cat "$dir/remote.err")); another block" >&2
done

echo "--- --target udp (exit $udp_rc)"
cat "$dir/udp.txt"
echo "--- --target remote (exit $rc)"
cat "$dir/remote.txt" 2>/dev/null
[ -s "$dir/remote.err" ] && { echo "--- --target remote stderr"; cat "$dir/remote.err"; }
[ -s "$dir/agent.err" ] && { echo "--- agent stderr"; cat "$dir/agent.err"; }
[ "$rc" -eq 0 ] && [ "$udp_rc" -eq 0 ] || exit 1
if [ -n "$agent_args" ]; then
  # The same outcome for every check but those, which skip with a reason.
  grep '^  ' "$dir/udp.txt" | cut -c1-30 |
    sed -e 's/^  ok   \(CONN-4 \)/  skip \1/' -e 's/^  ok   \(CONN-7  *closing\)/  skip \1/' \
      -e 's/^  ok   \(CONN-7  *ended\)/  skip \1/' -e 's/^  ok   \(CONN-8 \)/  skip \1/' \
      -e 's/^  ok   \(CONN-10 \)/  skip \1/' \
      -e "s/^  ok   \\(SEQ-2  *the targ\\)/  skip \\1/" -e 's/^  ok   \(BAD-[1-8]\)/  skip \1/' \
      -e 's/^  ok   \(CONN-9 \)/  skip \1/' -e 's/^  ok   \(PLACE-6 \)/  skip \1/' \
      -e 's/^  ok   \(MR-4 \)/  skip \1/' -e 's/^  ok   \(LOSS-7, NAK-4 \)/  skip \1/' \
      >"$dir/udp.cmp"
  grep '^  ' "$dir/remote.txt" | cut -c1-30 >"$dir/remote.cmp"
  if ! diff "$dir/udp.cmp" "$dir/remote.cmp"; then
    echo "the old agent's outcomes differ from the udp target's but for the skips" >&2
    exit 1
  fi
  for why in '^  skip CONN-4 .*: the requester.s side passes; the target does not tell why' \
    '^  skip CONN-7  *closing.*: the target cannot be asked to close' \
    '^  skip CONN-7  *ended.*requests passes; the target cannot be asked to close' \
    '^  skip CONN-8 .*: passes; the target cannot be asked to close' \
    '^  skip CONN-10 .*: the connection to itself passes .*the target cannot be asked to close' \
    '^  skip SEQ-2  *the target.s own.*: the target cannot be set to start at a PSN' \
    '^  skip BAD-1 .*: dropped, nothing changed; the counts unchecked' \
    '^  skip CONN-9 .*: the target cannot be set to a keepalive of 300 ms' \
    '^  skip PLACE-6 .*: the target offers no shared receive queue' \
    '^  skip MR-4 .*: the target cannot register memory at a base' \
    '^  skip LOSS-7, NAK-4 .*: the target cannot be set to an RNR retry limit' \
    '^  skip ENC-5 .*: the target does not tell whether its datagrams carry a UDP checksum'; do
    if ! grep -q "$why" "$dir/remote.txt"; then
      echo "no line matching '$why'" >&2
      exit 1
    fi
  done
  echo "conformance.remote-old-agent: the checks needing close, conn_error, listen, initial_psn, stats, keepalive, shared_receives, rnr_retry_limit, base, udp_checksum skip"
  exit 0
fi
# The same outcome (ok / skip) for every rule, and the same totals.
cut -c1-21 "$dir/udp.txt" | grep -v '^target' >"$dir/udp.cmp"
cut -c1-21 "$dir/remote.txt" | grep -v '^target' >"$dir/remote.cmp"
if ! diff "$dir/udp.cmp" "$dir/remote.cmp"; then
  echo "the remote target's outcomes differ from the udp target's" >&2
  exit 1
fi
echo "conformance.remote ($family): the same outcomes as --target udp"
