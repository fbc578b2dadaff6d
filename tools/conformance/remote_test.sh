#!/bin/sh
# ctest conformance.remote: the reference agent (metaroce-conform-agent) on
# 127.0.0.1 and the suite against it through --target remote; every check
# must end as it does with --target udp (the same driver in process).
# Ports are random (the agent's TCP port is the kernel's choice; the IUT's
# block is drawn as UdpTarget draws its own) and taken again on a collision.
# The agent is always killed.
#   remote_test.sh METAROCE_CONFORM METAROCE_CONFORM_AGENT
set -u
conform=$1
agent=$2
dir=$(mktemp -d)
agent_pid=
stop_agent() {
  if [ -n "$agent_pid" ]; then
    kill "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
    agent_pid=
  fi
}
trap 'stop_agent; rm -rf "$dir"' EXIT
trap 'exit 1' INT TERM HUP

# What each check should come to: the UDP driver in process.
"$conform" --target udp >"$dir/udp.txt"
udp_rc=$?
rc=2
for attempt in 1 2 3 4 5 6 7 8; do
  base=$((33000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 1500 * 16))
  iut=127.0.0.1:$((base - 1))
  # timeout: an agent outlives nothing, not even a test killed outright.
  timeout 600 "$agent" --listen 127.0.0.1:0 --iut "$iut" --entropy-base "$base" --entropy-count 16 \
    >"$dir/agent.out" 2>"$dir/agent.err" &
  agent_pid=$!
  listen=
  for _ in $(seq 200); do
    listen=$(sed -n 's/.*listening on \([^,]*\),.*/\1/p' "$dir/agent.out")
    [ -n "$listen" ] && break
    kill -0 "$agent_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [ -z "$listen" ]; then
    echo "attempt $attempt: the agent did not start: $(cat "$dir/agent.err")" >&2
    stop_agent
    continue
  fi
  "$conform" --target remote --agent "$listen" --iut "$iut" --entropy-base "$base" \
    --entropy-count 16 >"$dir/remote.txt"
  rc=$?
  stop_agent
  [ "$rc" -ne 2 ] && break
  echo "attempt $attempt: the tester could not open its ports; another block" >&2
done

echo "--- --target udp (exit $udp_rc)"
cat "$dir/udp.txt"
echo "--- --target remote (exit $rc)"
cat "$dir/remote.txt" 2>/dev/null
[ -s "$dir/agent.err" ] && { echo "--- agent stderr"; cat "$dir/agent.err"; }
[ "$rc" -eq 0 ] && [ "$udp_rc" -eq 0 ] || exit 1
# The same outcome (ok / skip) for every rule, and the same totals.
cut -c1-21 "$dir/udp.txt" | grep -v '^target' >"$dir/udp.cmp"
cut -c1-21 "$dir/remote.txt" | grep -v '^target' >"$dir/remote.cmp"
if ! diff "$dir/udp.cmp" "$dir/remote.cmp"; then
  echo "the remote target's outcomes differ from the udp target's" >&2
  exit 1
fi
echo "conformance.remote: the same outcomes as --target udp"
