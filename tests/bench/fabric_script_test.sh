#!/usr/bin/env bash
# bench/fabric's own behaviour, without measuring anything (a stand-in
# metaroce-perf, 1-second cases):
#   - a bad option exits 2 with a line naming it, before the lock and the
#     fabric, and prints nothing on stdout;
#   - (root) a fabric that cannot be built (here: a tc that refuses
#     everything) exits 1 with --json's object carrying "error";
#   - (root) SIGTERM midway exits 1 with that object ("interrupted by
#     SIGTERM"), and leaves no namespace and no metaroce-perf behind;
#   - (root) no transport left to run exits 1 with the reason, before the
#     fabric; an iperf3 server slow to listen is waited for.
# Its own MR_FAB_PREFIX: never a running fabric's.
#
# usage: fabric_script_test.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
BENCH="$root/bench/fabric"
FAB="$root/tests/fabric/fabric.sh"
export MR_FAB_PREFIX="mrbf$$-"
tmp=$(mktemp -d)
pid=""
# shellcheck source=SCRIPTDIR/script_lib.sh
source "$(dirname "$0")/script_lib.sh"
cleanup() {
  [[ -n $pid ]] && kill -KILL "$pid" 2>/dev/null
  bash "$FAB" down >/dev/null 2>&1
  rm -rf "$tmp" "/run/lock/metaroce-fabric-${MR_FAB_PREFIX}lock" "${TMPDIR:-/tmp}/metaroce-fabric-${MR_FAB_PREFIX}lock"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
ours() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$MR_FAB_PREFIX" | tr '\n' ' '; }

# A metaroce-perf that listens and never finishes a run: the client records
# its pid and sleeps.
fake="$tmp/metaroce-perf"
cat >"$fake" <<EOF
#!/bin/sh
if [ "\$1" = server ]; then echo listening; exec sleep 120; fi
echo \$\$ > "$tmp/client.pid"
exec sleep 120
EOF
chmod +x "$fake"

# --quick --cases loss5 selects no case (it ran nothing, exit 0); a fault
# case on a fabric without its link (blackhole: link 3) blackholed nothing
# and read as a faulted run; --keep that cannot be written turned every
# measured row into a failed one, after the runs.
touch "$tmp/afile"
for bad in "--links 20" "--links 0" "--rate 0" "--seconds 0" "--seconds -1" "--qd 0" "--paths 33" \
  "--mtu 100" "--perf $tmp/none" "--cases nope" "--transports udp" "--bogus" \
  "--transports metaroce,cubic --seconds 2.5" "--quick --cases loss5" "--cases blackhole --links 2" \
  "--cases down --links 1" "--keep $tmp/afile" "--keep $tmp/afile/x"; do
  expect_refused bench/fabric "$bad" python3 "$BENCH" --json --transports metaroce --perf "$fake" --cases loss0 --seconds 1
done

# Not root: --json's object says so, exit 1, and no temporary directory is
# left (one was, in TMPDIR). As nobody, where setpriv can make us that and
# nobody can run the system's python3 (root's own may be out of its reach).
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
if [[ $EUID -eq 0 ]] && command -v setpriv >/dev/null && as_nobody /usr/bin/python3 -c pass 2>/dev/null; then
  mkdir -m 777 "$tmp/nobody"
  chmod 755 "$tmp"
  TMPDIR="$tmp/nobody" as_nobody /usr/bin/python3 "$BENCH" --json --transports metaroce --perf "$fake" --cases loss0 --seconds 1 \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == 1)) || fail "not root: exit $rc, not 1 ($(tail -1 "$tmp/err"))"
  grep -q '"error": "needs root' "$tmp/out" || fail "not root: no JSON error: $(head -c 300 "$tmp/out")"
  [[ -n $(ls -A "$tmp/nobody") ]] && fail "not root: left $(ls -A "$tmp/nobody") in TMPDIR"
fi

# json_error FILE WANT: FILE holds one JSON object whose "error" contains WANT.
json_error() {
  python3 - "$1" "$2" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except ValueError as e:
    sys.exit(f"not JSON ({e}): {open(sys.argv[1]).read()[:200]!r}")
if sys.argv[2] not in str(j.get("error")) or not isinstance(j.get("rows"), list):
    sys.exit(f"error {j.get('error')!r}, rows {j.get('rows')!r}")
PY
}

# shellcheck source=../fabric/fabric.sh
if [[ $EUID -ne 0 ]] || ! (source "$FAB" && fab_available >/dev/null); then
  echo "note: not root or no ip netns: the fabric checks skipped"
else
  mkdir "$tmp/bin"
  printf '#!/bin/sh\necho "tc: refused by the test" >&2\nexit 1\n' >"$tmp/bin/tc"
  chmod +x "$tmp/bin/tc"
  PATH="$tmp/bin:$PATH" python3 "$BENCH" --json --transports metaroce --perf "$fake" --cases loss0 --seconds 1 \
    >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == 1)) || fail "fabric that cannot be built: exit $rc, not 1"
  why=$(json_error "$tmp/out" "fab_up") || fail "fabric that cannot be built: $why"
  [[ -z $(ours) ]] || fail "fabric that cannot be built: left $(ours)"

  # No transport left (iperf3 not on PATH): exit 1 with the note as the
  # error, before the fabric (it built and tore one down, printed nothing
  # and exited 0).
  mkdir "$tmp/nobin"
  PATH="$tmp/nobin" /usr/bin/python3 "$BENCH" --transports cubic --cases loss0 --seconds 1 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == 1)) || fail "no transport left: exit $rc, not 1"
  grep -q "no transport left to run: iperf3 not installed" "$tmp/err" ||
    fail "no transport left: stderr lacks the note: $(cat "$tmp/err")"
  grep -q "links x" "$tmp/err" && fail "no transport left: it went on to build the fabric"

  # A server slow to listen (1 s: mptcpize, a loaded machine): the client
  # waits for it (it started 0.4 s after the server, whether it listened or
  # not, and the row read as the transport's failure). Stand-ins for
  # iperf3: the client fails unless the server said it listens.
  cat >"$tmp/nobin/iperf3" <<EOF
#!/bin/sh
case " \$* " in
*" -s "*) sleep 1; echo "Server listening on 5201 (test #1)"; touch "$tmp/listening"; exec sleep 30 ;;
esac
if [ ! -e "$tmp/listening" ]; then echo '{"error": "unable to connect to server"}'; exit 1; fi
echo '{"intervals": [{"sum": {"start": 0, "end": 1, "bits_per_second": 1e9, "bytes": 125000000}}],'
echo ' "end": {"sum_received": {"bits_per_second": 1e9, "seconds": 1}, "sum_sent": {"retransmits": 0}}}'
EOF
  chmod +x "$tmp/nobin/iperf3"
  PATH="$tmp/nobin:$PATH" python3 "$BENCH" --json --transports cubic --cases loss0 --seconds 1 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == 0)) || fail "slow server: exit $rc, not 0 ($(tail -1 "$tmp/err"))"
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1]))["rows"]; sys.exit(r[0].get("failed") or r[0]["goodput_gbps"] != 1.0)' \
    "$tmp/out" || fail "slow server: the row failed: $(head -c 400 "$tmp/out")"
  [[ -z $(ours) ]] || fail "slow server: left $(ours)"

  python3 "$BENCH" --json --transports metaroce --perf "$fake" --cases loss0 --seconds 1 >"$tmp/out" 2>"$tmp/err" &
  pid=$!
  term_midway 300 0.1
  ((rc == 1)) || fail "SIGTERM midway: exit $rc, not 1"
  why=$(json_error "$tmp/out" "interrupted by SIGTERM") || fail "SIGTERM midway: $why"
  [[ -z $(ours) ]] || fail "SIGTERM midway: left $(ours)"
  if [[ -s $tmp/client.pid ]] && kill -0 "$(cat "$tmp/client.pid")" 2>/dev/null; then
    fail "SIGTERM midway: the client ($(cat "$tmp/client.pid")) still runs"
  fi
fi

if ((fails)); then
  echo "FAIL: $fails check(s)"
  exit 1
fi
echo "PASS: bench/fabric options, failure and interruption"
