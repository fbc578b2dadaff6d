#!/usr/bin/env bash
# bench/loopback's own behaviour, without measuring anything (stand-ins for
# metaroce-perf and the raw blast):
#   - a bad option exits 2 with a line naming it, before anything is built
#     or started, and prints nothing on stdout;
#   - --mtu 512 asks the raw blast for 64 segments a GSO message at most,
#     and raw_udp holds the last round's result alone;
#   - SIGTERM midway exits 1, --json still prints its object with "error",
#     and the metaroce-perf server it started is stopped.
#
# usage: loopback_script_test.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
BENCH="$root/bench/loopback"
tmp=$(mktemp -d)
pid=""
# shellcheck source=SCRIPTDIR/script_lib.sh
source "$(dirname "$0")/script_lib.sh"
cleanup() {
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
  for f in "$tmp"/*.pid; do [[ -s $f ]] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# A metaroce-perf whose server listens and whose client fails at once, or
# with FAKE_SLEEP=1 never finishes; each records its pid.
fake="$tmp/metaroce-perf"
cat >"$fake" <<EOF
#!/bin/sh
echo \$\$ > "$tmp/\$1.pid"
[ "\$1" = server ] && echo listening && exec sleep 120
[ "\${FAKE_SLEEP:-0}" = 1 ] && exec sleep 120
exit 1
EOF
chmod +x "$fake"

for bad in "--mtu 100" "--mtu 70000" "--seconds 0" "--seconds -2" "--rounds 0" "--size 0" "--qd 0" "--qd 201" \
  "--perf $tmp/none" "--blast $tmp/none" "--bogus"; do
  expect_refused bench/loopback "$bad" python3 "$BENCH" --json --no-latency --perf "$fake" --blast "$fake"
done

# A raw blast that records its arguments, fails its first run and then
# measures 1.5 Gbit/s: --mtu 512 asks for at most 64 segments a GSO message
# (the driver's and the blast's limit; it asked for 115, which the blast
# refuses), and the raw_udp object is the last round's, without the first
# round's error.
blast="$tmp/blast"
cat >"$blast" <<EOF
#!/bin/sh
echo "\$*" >> "$tmp/blast.args"
[ "\$(wc -l < "$tmp/blast.args")" = 1 ] && { echo '{"error": "stand-in fails its first run"}'; exit 1; }
echo '{"rx_gbps": 1.5}'
EOF
chmod +x "$blast"
python3 "$BENCH" --json --seconds 1 --rounds 2 --no-latency --mtu 512 --perf "$fake" \
  --blast "$blast" >"$tmp/out" 2>"$tmp/err"
rc=$?
((rc == 0)) || fail "--mtu 512: exit $rc, not 0 ($(tail -1 "$tmp/err"))"
python3 - "$tmp/out" "$tmp/blast.args" <<'PY' || fail "--mtu 512: see above"
import json, sys
j = json.load(open(sys.argv[1]))
segs = [int(l.split()[l.split().index("--gso-segs") + 1]) for l in open(sys.argv[2]) if "--gso-segs" in l]
bad = []
if not segs or max(segs) > 64:
    bad.append(f"--gso-segs {segs}, want 64 at most")
if j["raw_udp"].get("gso_segs") != 64:
    bad.append(f"raw_udp.gso_segs {j['raw_udp'].get('gso_segs')}, want 64")
if "error" in j["raw_udp"] or j["raw_udp"].get("rx_gbps") != 1.5:
    bad.append(f"raw_udp {j['raw_udp']}: want the last round's 1.5 without an error")
if j.get("raw_udp_gbps") != 1.5:
    bad.append(f"raw_udp_gbps {j.get('raw_udp_gbps')}, want 1.5")
if bad:
    print("FAIL: --mtu 512: " + "; ".join(bad))
    sys.exit(1)
PY

rm -f "$tmp"/*.pid
FAKE_SLEEP=1 python3 "$BENCH" --json --seconds 30 --no-latency --perf "$fake" --blast "$fake" >"$tmp/out" 2>"$tmp/err" &
pid=$!
term_midway 200 0.05
((rc == 1)) || fail "SIGTERM midway: exit $rc, not 1"
python3 - "$tmp/out" <<'PY' || fail "SIGTERM midway: no JSON object with error"
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except ValueError as e:
    sys.exit(f"not JSON: {e}")
sys.exit(0 if j.get("error") == "interrupted" else f"error {j.get('error')!r}")
PY
sleep 0.2
if [[ -s $tmp/server.pid ]] && kill -0 "$(cat "$tmp/server.pid")" 2>/dev/null; then
  fail "SIGTERM midway: the metaroce-perf server ($(cat "$tmp/server.pid")) still runs"
fi

if ((fails)); then
  echo "FAIL: $fails check(s)"
  exit 1
fi
echo "PASS: bench/loopback options and interruption"
