# shellcheck shell=sh
# Sourced by the command-line tests (tests/sim/cli_test.sh,
# tests/conformance/cli_test.sh): expect RC PATTERN PROGRAM ARGS... runs the
# program and checks its exit status is RC and its stderr matches PATTERN
# (grep -E; empty: not checked), counting mismatches in `failures`;
# expect_full does the same with the program's stdout on /dev/full (a full
# disk); expect_quiet RC PROGRAM ARGS... wants exit RC and nothing on stderr
# (no warning); finish ends the test, failing if any.
failures=0
expect() {
  want_rc=$1 pattern=$2
  shift 2
  program=$(basename "$1")
  err=$("$@" 2>&1 >"${expect_stdout:-/dev/null}")
  rc=$?
  shift
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: $program $*: exit $rc, wanted $want_rc; stderr: $err"
    failures=$((failures + 1))
  elif [ -n "$pattern" ] && ! printf '%s\n' "$err" | grep -Eq -- "$pattern"; then
    echo "FAIL: $program $*: stderr '$err' does not match '$pattern'"
    failures=$((failures + 1))
  else
    echo "ok:   $program $* -> exit $rc${err:+: $err}"
  fi
}
expect_full() {
  expect_stdout=/dev/full
  expect "$@"
  expect_stdout=/dev/null
}
expect_quiet() {
  want_rc=$1
  shift
  program=$(basename "$1")
  err=$("$@" 2>&1 >/dev/null)
  rc=$?
  shift
  if [ "$rc" -ne "$want_rc" ] || [ -n "$err" ]; then
    echo "FAIL: $program $*: exit $rc (wanted $want_rc), stderr '$err' (wanted none)"
    failures=$((failures + 1))
  else
    echo "ok:   $program $* -> exit $rc, quiet"
  fi
}
finish() {
  [ "$failures" -eq 0 ] || { echo "$failures failed"; exit 1; }
  exit 0
}
