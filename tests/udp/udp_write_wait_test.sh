#!/bin/sh
# ctest udp-write-wait: examples/udp_write's client waits for its server as
# long as a real network needs. A client started 1 s before its server still
# writes its message (the engine's default 8 requests 10 ms apart gave up
# after 80 ms); a client with no server gives up after about 5 s, exit 1,
# saying no server answered.
#   udp_write_wait_test.sh UDP_WRITE
set -u
bin=$1
dir=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"' EXIT
rc=0
# A free port with its 64-port entropy block after it, on 127.0.0.1, all 65
# bound to check them (binding one and trusting the next 64 failed the test
# when they were taken), and below the ephemeral range, where the client
# started first binds its own port and block (0.5 % of runs overlapped).
port=$(python3 -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    p = random.randrange(10000, max(10001, lo - 65))
    held = []
    try:
        for q in range(p, p + 65):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); held.append(s); s.bind(("127.0.0.1", q))
    except OSError:
        continue
    finally:
        for s in held: s.close()
    print(p); break')
if [ -z "$port" ]; then
  echo "FAIL: no free block of 65 ports on 127.0.0.1 below the ephemeral range"
  exit 1
fi
"$bin" client "127.0.0.1:$port" "late server" >"$dir/client.out" 2>&1 &
client=$!
sleep 1
"$bin" server "127.0.0.1:$port" >"$dir/server.out" 2>&1 &
server=$!
if ! wait "$client"; then
  echo "FAIL: a client started 1 s before its server gave up: $(cat "$dir/client.out")"
  rc=1
fi
wait "$server" || rc=1
server=
grep -q 'received 11 bytes: "late server"' "$dir/server.out" ||
  { echo "FAIL: the server did not get the message: $(cat "$dir/server.out")"; rc=1; }

# No server: port 1 on loopback (nothing listens there).
start=$(date +%s%N)
"$bin" client 127.0.0.1:1 >"$dir/none.out" 2>&1
got=$?
took=$((($(date +%s%N) - start) / 1000000))  # ms
if [ "$got" -ne 1 ] || ! grep -q '^error: no server answered at 127.0.0.1:1 within 5 s' "$dir/none.out" ||
  [ "$took" -lt 4500 ] || [ "$took" -gt 15000 ]; then
  echo "FAIL: no server: exit $got after $took ms: $(cat "$dir/none.out")"
  rc=1
fi
[ $rc -eq 0 ] && echo "ok: late server reached; no server: exit 1 after $took ms"
exit $rc
