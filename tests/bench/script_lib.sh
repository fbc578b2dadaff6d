# shellcheck shell=bash
# shellcheck disable=SC2154 # tmp and pid are the sourcing test's
# Sourced by bench/'s script tests (fabric_script_test.sh,
# loopback_script_test.sh), which set `tmp` (a scratch directory) and `pid`
# (the bench run in the background) and run stand-ins for metaroce-perf that
# record the client's pid in $tmp/client.pid. fail counts a failed check in
# `fails`; expect_refused NAME BAD COMMAND... runs COMMAND with BAD's words
# appended and wants exit 2, nothing on stdout and an error naming BAD's last
# option; term_midway TRIES PAUSE waits (TRIES polls PAUSE seconds apart) for
# the client to start, then SIGTERMs the run and sets `rc` to its exit status.
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
expect_refused() {
  local name=$1 bad=$2 rc opt
  shift 2
  # shellcheck disable=SC2086
  "$@" $bad >"$tmp/out" 2>"$tmp/err"
  rc=$?
  ((rc == 2)) || fail "$name $bad: exit $rc, not 2 ($(tail -1 "$tmp/err"))"
  [[ -s $tmp/out ]] && fail "$name $bad: printed on stdout: $(head -c 200 "$tmp/out")"
  opt=${bad##*--}
  opt=--${opt%% *}
  [[ $opt == --bogus ]] && opt=unrecognized
  grep -q -- "$opt" "$tmp/err" || fail "$name $bad: the error does not name $opt: $(tail -1 "$tmp/err")"
}
term_midway() {
  local tries=$1 pause=$2
  for _ in $(seq 1 "$tries"); do
    [[ -s $tmp/client.pid ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep "$pause"
  done
  [[ -s $tmp/client.pid ]] || fail "the run never started its client: $(tail -3 "$tmp/err")"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  pid=""
}
