#!/usr/bin/env bash
# Instructions per data packet of the engine benchmark's header-only loop,
# counted by callgrind: the figure BENCHMARKS.md quotes as "instructions per
# data packet". Send side, receive side and the ACKs both ways, for one
# 4 KiB WRITE packet; the payload copies (memcpy/memmove) are taken off.
#
#   bash scripts/engine-instructions.sh [--pipelined] [build-dir] [packets]
#       --pipelined  the loopback client's steady state instead (the probe's
#                  --pipelined, engine_pair.hpp Pipeline): 8 paths,
#                  each with packets in flight, 64 KiB WRITEs 64 deep, sent
#                  gathering; the ACKs for each 16 datagrams that arrive go
#                  back together before the sender goes on. The
#                  default loop moves one packet at a time, so its paths are
#                  empty and never show SCHED-1's scan over busy ones.
#       build-dir  default build (needs its metaroce-engine-probe:
#                  ninja -C build metaroce-engine-probe)
#       packets    data packets counted, default 20000
#   METAROCE_CALLGRIND_OUT=file keeps the callgrind output for
#   `callgrind_annotate --inclusive=yes file` (a breakdown by function).
#
# Needs valgrind (callgrind and callgrind_annotate; scripts/setup-deps.sh
# installs it). Not part of the tests: it runs for a few seconds and says
# nothing about correctness. Exit 2 when it cannot run as asked (no probe, no
# valgrind, a packet count that is no whole number >= 1000).
set -euo pipefail
mode=()
if [[ ${1:-} == --pipelined ]]; then
  mode=(--pipelined)
  shift
fi
build=${1:-build}
packets=${2:-20000}
probe=$build/bench/metaroce-engine-probe
if [[ ! -x $probe ]]; then
  echo "no $probe: build it with 'ninja -C $build metaroce-engine-probe'" >&2
  exit 2
fi
# Without these checks the script ended with no word: valgrind missing (its
# "command not found" went where its stderr goes, /dev/null), or a count the
# probe refused, exit status 127 or 2 and nothing printed.
if [[ ! $packets =~ ^[0-9]{4,10}$ ]]; then
  echo "packets must be a whole number, 1000..9999999999, not '$packets'" >&2
  exit 2
fi
for tool in valgrind callgrind_annotate; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool not found: install valgrind (apt-get install valgrind, or bash scripts/setup-deps.sh)" >&2
    exit 2
  fi
done
out=${METAROCE_CALLGRIND_OUT:-$(mktemp)}
[[ -n ${METAROCE_CALLGRIND_OUT:-} ]] || trap 'rm -f "$out"' EXIT
moved=$(valgrind --tool=callgrind --callgrind-out-file="$out" \
  --toggle-collect='metaroce::bench::measured*' "$probe" "${mode[@]}" "$packets" 2>/dev/null |
  awk '/^data_packets/ {print $2}')
# Self cost per function: the total, and the copy routines' share of it.
callgrind_annotate --auto=no --threshold=100 "$out" 2>/dev/null | awk -v n="$moved" '
  { v = $1; gsub(",", "", v) }
  v !~ /^[0-9]+$/ { next }
  /PROGRAM TOTALS/ { total = v; next }
  /memcpy|memmove/ { copies += v }
  END {
    if (n == 0 || total == 0) { print "no data from callgrind" > "/dev/stderr"; exit 1 }
    printf "data packets %d\ninstructions %d (copies %d)\n", n, total, copies
    printf "instructions per data packet, copies taken off: %.1f\n", (total - copies) / n
  }'
