#!/bin/sh
# metaroce-demo's goodput is the bytes it verified over the simulated time it
# printed, and no more than the links carry. A last WRITE shorter than
# --wr-size (here one WRITE of 1 MiB with --wr-size 64 MiB) was counted whole:
# 64 times the real figure. Usage: demo_goodput_test.sh METAROCE_DEMO
demo=$1
out=$("$demo" --size 1 --wr-size 65536 --fail-path -1) || { echo "$out"; exit 1; }
echo "$out"
echo "$out" | awk '
  /simulated time/ { ms = $3 }
  /goodput/ { gbps = $2; links = $5 }
  /byte check:/ { bytes = $3 }
  END {
    if (ms <= 0 || bytes != 1048576) { print "no time or not 1 MiB verified"; exit 1 }
    want = bytes * 8 / (ms * 1e6)  # Gbit/s from the printed figures
    # ms is printed to 3 decimals: allow for its rounding.
    if (gbps > want * 1.02 || gbps < want * 0.98) { print "goodput " gbps " != " want; exit 1 }
    if (gbps > links) { print "goodput " gbps " above the links " links; exit 1 }
  }'
