#!/usr/bin/env bash
# fabric.sh as a command (README.md's `fabric.sh up 4 500`), run beside
# bench/fabric or a fabric test, and given bad arguments:
#   - an unknown command prints the usage and exits 2;
#   - `up` with a link count, rate or queue that is no number in range exits 2
#     before it touches anything (a rate of "abc" used to build the
#     namespaces and leave them when tc refused it);
#   - while another process holds the prefix's fabric lock (as bench/fabric
#     and fabric_test.sh do for their whole run), `up`, `down` and the fault
#     commands exit 1 saying so, and the namespaces stay (`up` used to tear
#     them down and build its own under the running test);
#   - an `up` that fails midway (here: a tc that refuses everything, or a
#     sysctl that refuses the multipath hash on ports) leaves no namespace
#     behind;
#   - the faults refuse (exit 2) a number that is none and a link the
#     fabric lacks; `clear` fails when a fault cannot be removed.
#   cli_test.sh args   the argument checks alone (no root needed);
#   cli_test.sh root   those again, then the lock, teardown, fault and clear
#                      checks, which make namespaces: without root or ip netns
#                      it says so and exits 77 (ctest's skip), not a pass.
# Its own MR_FAB_PREFIX: never a running fabric's.
set -uo pipefail
mode=${1:-}
if [[ $mode != args && $mode != root ]]; then
  echo "usage: cli_test.sh args|root" >&2
  exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FAB="$HERE/fabric.sh"
export MR_FAB_PREFIX="mrcli$$-"
tmp=$(mktemp -d)
holder=""
fails=0
lockdir=/run/lock
[[ -d $lockdir && -w $lockdir ]] || lockdir=${TMPDIR:-/tmp}
lockfile="$lockdir/metaroce-fabric-${MR_FAB_PREFIX}lock"
cleanup() {
  [[ -n $holder ]] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null
  bash "$FAB" down >/dev/null 2>&1
  rm -rf "$tmp" "$lockfile"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# expect RC PATTERN CMD...: runs fabric.sh CMD..., checks its exit status and
# that its stderr matches PATTERN (grep -E).
expect() {
  local want=$1 pattern=$2 rc
  shift 2
  bash "$FAB" "$@" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == want)) || fail "fabric.sh $*: exit $rc, not $want ($(tail -1 "$tmp/err"))"
  grep -Eq "$pattern" "$tmp/err" || fail "fabric.sh $*: stderr lacks /$pattern/: $(cat "$tmp/err")"
}

# ok CMD...: runs fabric.sh CMD..., which must succeed.
ok() {
  bash "$FAB" "$@" >"$tmp/out" 2>"$tmp/err" || fail "fabric.sh $*: exit $? ($(tail -1 "$tmp/err"))"
}

ours() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^$MR_FAB_PREFIX" | sort | tr '\n' ' '; }

expect 2 "unknown command 'bogus'" bogus
expect 2 "links must be a whole number 1..16, not '0'" up 0 100
expect 2 "links must be a whole number 1..16, not '17'" up 17 100
expect 2 "links must be a whole number 1..16, not ''" up
expect 2 "rate must be a whole number .* not 'abc'" up 2 abc
expect 2 "queue must be a whole number .* not '-5'" up 2 100 -5
bash "$FAB" help >"$tmp/out" 2>&1 || fail "fabric.sh help: exit $?"
grep -q 'fabric.sh up N RATE_MBIT' "$tmp/out" || fail "fabric.sh help: no usage on stdout"

root=0
if [[ $mode == root ]]; then
  # shellcheck source=fabric.sh
  if [[ $EUID -eq 0 ]] && (source "$FAB" && fab_available >/dev/null); then root=1; fi
  if ((!root)); then
    echo "skip: not root or no ip netns: the lock, teardown, fault and clear checks not run"
    ((fails)) && exit 1  # the argument checks above still count
    exit 77
  fi
fi
if ((root)); then
  [[ -z $(ours) ]] || fail "bad arguments left namespaces: $(ours)"

  # Another run holds the fabric: its namespaces (here one stands for them)
  # must survive every command that would change them.
  ip netns add "${MR_FAB_PREFIX}a" || fail "cannot add a namespace"
  # The holder is the sleep itself (exec), so killing it frees the lock.
  (
    exec 9>"$lockfile"
    flock 9
    exec sleep 60
  ) &
  holder=$!
  for _ in $(seq 1 50); do
    flock -n "$lockfile" true || break
    sleep 0.1
  done
  expect 1 "holds the $MR_FAB_PREFIX fabric" up 1 100
  expect 1 "holds the $MR_FAB_PREFIX fabric" down
  expect 1 "holds the $MR_FAB_PREFIX fabric" loss 10000
  expect 1 "holds the $MR_FAB_PREFIX fabric" clear
  [[ $(ours) == "${MR_FAB_PREFIX}a " ]] || fail "the held fabric's namespaces changed: now '$(ours)'"
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  holder=""
  bash "$FAB" down >/dev/null 2>&1
  [[ -z $(ours) ]] || fail "down (lock free) left $(ours)"

  # tc refuses everything: fab_up fails after the namespaces exist.
  mkdir "$tmp/bin"
  printf '#!/bin/sh\necho "tc: refused by cli_test" >&2\nexit 1\n' >"$tmp/bin/tc"
  chmod +x "$tmp/bin/tc"
  PATH="$tmp/bin:$PATH" bash "$FAB" up 1 100 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == 1)) || fail "up with a failing tc: exit $rc, not 1"
  [[ -z $(ours) ]] || fail "up that failed midway left namespaces: $(ours)"

  # A setting the fabric depends on refused (here: the multipath hash on
  # ports, Linux >= 5.12): `up` fails and leaves nothing (it built a fabric
  # whose every flow took one link, exit 0).
  real_sysctl=$(command -v sysctl)
  printf '#!/bin/sh\ncase "$*" in *fib_multipath_hash_fields*) echo "sysctl: refused by cli_test" >&2; exit 1 ;; esac\nexec %s "$@"\n' \
    "$real_sysctl" >"$tmp/bin/sysctl"
  chmod +x "$tmp/bin/sysctl"
  rm "$tmp/bin/tc"
  PATH="$tmp/bin:$PATH" bash "$FAB" up 2 100 >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == 1)) || fail "up with hash_fields refused: exit $rc, not 1"
  grep -q "multipath hash" "$tmp/err" || fail "up with hash_fields refused: stderr says not why: $(tail -2 "$tmp/err")"
  [[ -z $(ours) ]] || fail "up with hash_fields refused left namespaces: $(ours)"
  rm "$tmp/bin/sysctl"

  # Faults given bad numbers or links the fabric lacks exit 2 (`loss abc`,
  # `loss 1.5` and `loss -5` flushed the loss and exited 0, and a rule on a
  # missing link dropped nothing, exit 0); good ones still work.
  if bash "$FAB" up 2 100 >"$tmp/out" 2>"$tmp/err"; then
    expect 2 "must be a whole number 0..1000000, not 'abc'" loss abc
    expect 2 "must be a whole number 0..1000000, not '1.5'" loss 1.5
    expect 2 "must be a whole number 0..1000000, not '-5'" loss -5
    expect 2 "must be a whole number 0..1000000, not '2000000'" loss 2000000
    expect 2 "no link '3': the fabric has links 1..2" loss 1000 3
    expect 2 "no link '3'" blackhole 3
    expect 2 "no link '0'" linkdown 0
    expect 2 "no link 'x'" rate x 100
    expect 2 "ecn rate .* not 'abc'" ecn abc 10
    expect 2 "ecn burst .* not '1.5'" ecn 100 1.5
    ok loss 1000 2
    ok blackhole 2
    # fab_clear's nft refused: `clear` fails, the faults being left (it
    # exited 0 with the blackhole in place, measured as the next case).
    printf '#!/bin/sh\n[ "$1" = flush ] && { echo "nft: refused by cli_test" >&2; exit 1; }\nexec %s "$@"\n' \
      "$(command -v nft)" >"$tmp/bin/nft"
    chmod +x "$tmp/bin/nft"
    PATH="$tmp/bin:$PATH" bash "$FAB" clear >"$tmp/out" 2>"$tmp/err"
    rc=$?
    ((rc != 0)) || fail "clear with nft flush refused: exit 0"
    rm "$tmp/bin/nft"
    ok clear
    bash "$FAB" down >/dev/null 2>&1
    # No fabric: nothing to clear is a failure, not a fabric without faults.
    expect 1 "no fabric" clear
  else
    fail "up 2 100: exit $? ($(tail -1 "$tmp/err"))"
  fi
fi

if ((fails)); then
  echo "FAIL: $fails check(s)"
  exit 1
fi
echo "PASS: fabric.sh CLI (bad arguments$( ((root)) && echo ", lock, teardown"))"
