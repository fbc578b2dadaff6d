#!/bin/sh
# ctest udp-write-flushed-says-why: a completion flushed because its
# connection failed names why the connection failed. A metaroce-perf client
# SENDs its Hello (112 bytes) into the empty receive the udp_write server
# posted for the WRITE_IMM: the server's connection fails with
# kRemoteLengthError, and its receive completes kFlushed. udp_write printed
# only "kFlushed: flushed: connection entered the error state first".
#   udp_write_flushed_test.sh UDP_WRITE METAROCE_PERF
set -u
udp_write=$1 perf=$2
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
timeout 30 "$udp_write" server 127.0.0.1:0 >"$out/server" 2>&1 &
server=$!
addr=
tries=50
while [ -z "$addr" ] && [ "$tries" -gt 0 ]; do
  addr=$(sed -n 's/^server on \(127\.0\.0\.1:[0-9]*\)$/\1/p' "$out/server")
  tries=$((tries - 1))
  [ -z "$addr" ] && sleep 0.1
done
if [ -z "$addr" ]; then
  echo "FAIL: the udp_write server did not start: $(cat "$out/server")"
  kill "$server" 2>/dev/null
  exit 1
fi
timeout 30 "$perf" client "$addr" --iters 1 >/dev/null 2>&1
wait "$server"
rc=$?
cat "$out/server"
if [ "$rc" -eq 1 ] && grep -q 'kFlushed: .*; the connection ended with kRemoteLengthError' "$out/server"
then
  echo "ok:   the flushed receive names kRemoteLengthError, exit 1"
  exit 0
fi
echo "FAIL: exit $rc (wanted 1), or the error does not name kRemoteLengthError"
exit 1
