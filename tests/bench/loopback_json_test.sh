#!/usr/bin/env bash
# bench/loopback --json, one short round: every field BENCHMARKS.md and the
# issue name is present and holds a measurement. Figures are not judged here
# (a shared machine is too noisy); that is what the benchmark itself is for.
#
# usage: loopback_json_test.sh METAROCE_PERF LOOPBACK_UDP_BLAST
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
python3 "$root/bench/loopback" --json --seconds 1 --perf "$1" --blast "$2" > "$out"
python3 - "$out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
def positive(key, v):
    if not isinstance(v, (int, float)) or v <= 0:
        bad.append(f"{key}={v!r}")
for k in ("metaroce_gbps", "raw_udp_gbps", "raw_udp_gathered_gbps", "tcp_gbps", "ratio", "ratio_gathered"):
    positive(k, r.get(k))
for k in ("metaroce_lat_us", "raw_udp_rtt_us", "raw_udp_busy_rtt_us"):
    for q in ("p50", "p99"):
        positive(f"{k}.{q}", (r.get(k) or {}).get(q))
if r.get("notes"):
    bad.append(f"notes={r['notes']}")
if bad:
    sys.exit("loopback_json_test: " + ", ".join(bad))
print(f"loopback_json_test: metaroce {r['metaroce_gbps']:.1f}, raw UDP {r['raw_udp_gbps']:.1f}, "
      f"TCP {r['tcp_gbps']:.1f} Gbit/s, ratio {r['ratio']:.3f}")
PY
