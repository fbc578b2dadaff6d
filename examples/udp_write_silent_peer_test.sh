#!/bin/sh
# ctest udp-write-silent-peer: when the other end goes silent, udp_write's
# error names it, by peer address and connection id, as the driver's own
# errors do (examples/README.md). They said only "error: no reply within 5 s"
# and "error: no WRITE_IMM within 10 s", which name neither end.
#   udp_write_silent_peer_test.sh UDP_WRITE SILENT_PEER
set -u
udp_write=$1 silent=$2
dir=$(mktemp -d)
pids=
trap 'kill $pids 2>/dev/null; rm -rf "$dir"' EXIT
rc=0

# address_in FILE PATTERN: the address FILE names after PATTERN, within 5 s
# (FILE may not exist yet: its process opens it).
address_in() {
  tries=50
  while [ "$tries" -gt 0 ]; do
    a=$(sed -n "s/^$2 \\(127\\.0\\.0\\.1:[0-9]*\\)\$/\\1/p" "$1" 2>/dev/null)
    [ -n "$a" ] && { echo "$a"; return 0; }
    tries=$((tries - 1))
    sleep 0.1
  done
  echo "FAIL: nothing says \"$2 ADDR\": $(cat "$1")" >&2
  return 1
}

# expect WHO EXIT OUTPUT_FILE PATTERN: WHO exited 1 with an error matching
# PATTERN (a grep pattern for the whole line).
expect() {
  if [ "$2" -eq 1 ] && grep -q "^error: $4 (peer 127\\.0\\.0\\.1:[0-9]*, conn 0x[0-9a-f]*)\$" "$3"
  then
    echo "ok:   $1: $(grep '^error' "$3")"
  else
    echo "FAIL: $1: exit $2 (wanted 1), no \"error: $4 (peer ADDR, conn ID)\": $(cat "$3")"
    rc=1
  fi
}

# The client: a server that accepts and then sends nothing.
"$silent" accept 127.0.0.1:0 30 >"$dir/silent1" 2>&1 &
pids="$pids $!"
if addr=$(address_in "$dir/silent1" "listening on"); then
  "$udp_write" client "$addr" >"$dir/client" 2>&1
  expect "client whose server is silent" $? "$dir/client" "no reply within 5 s"
else
  rc=1
fi

# The server: a client that connects and then writes nothing.
"$udp_write" server 127.0.0.1:0 >"$dir/server" 2>&1 &
server=$!
pids="$pids $server"
if addr=$(address_in "$dir/server" "server on"); then
  "$silent" connect "$addr" 30 >"$dir/silent2" 2>&1 &
  pids="$pids $!"
  wait "$server"
  expect "server whose client is silent" $? "$dir/server" "no WRITE_IMM within 10 s"
else
  rc=1
fi
exit $rc
