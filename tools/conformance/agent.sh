# shellcheck shell=sh
# Sourced by remote_test.sh and tests/conformance/cli_test.sh: the reference
# agent on a random block of ports.
# start_agent AGENT LISTEN_HOST IUT_HOST DIR [AGENT_OPTION...]: starts it
# (under timeout, so that it outlives nothing, not even a test killed
# outright), with the options given, with the IUT on
# IUT_HOST:$((base - 1)) and entropy block `base` .. base+15, drawn as
# UdpTarget draws its own; sets agent_pid, base, iut and listen (the TCP
# HOST:PORT it listens on, the kernel's choice), its output in DIR/agent.out
# and DIR/agent.err. False, the agent stopped, if it did not start (a port
# taken: draw again).
# stop_agent: kills it, if running, and waits for it.
agent_pid=
start_agent() {
  base=$((33000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 1500 * 16))
  iut=$3:$((base - 1))
  agent_bin=$1
  agent_dir=$4
  listen=$2:0
  shift 4
  # Emptied before the agent starts: its own redirection comes after a
  # fork, and the previous agent's address could be read first.
  : >"$agent_dir/agent.out"
  timeout 600 "$agent_bin" --listen "$listen" --iut "$iut" --entropy-base "$base" \
    --entropy-count 16 "$@" >"$agent_dir/agent.out" 2>"$agent_dir/agent.err" &
  agent_pid=$!
  listen=
  for _ in $(seq 200); do
    listen=$(sed -n 's/.*listening on \([^,]*\),.*/\1/p' "$agent_dir/agent.out")
    [ -n "$listen" ] && return 0
    kill -0 "$agent_pid" 2>/dev/null || break
    sleep 0.05
  done
  stop_agent
  return 1
}
stop_agent() {
  if [ -n "$agent_pid" ]; then
    kill "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
    agent_pid=
  fi
}
