# shellcheck shell=sh
# Sourced by the command-line tests (tests/sim/cli_test.sh,
# tests/conformance/cli_test.sh): expect RC PATTERN PROGRAM ARGS... runs the
# program and checks its exit status is RC and its stderr matches PATTERN
# (grep -E; empty: not checked), counting mismatches in `failures`;
# expect_full does the same with the program's stdout on /dev/full (a full
# disk); expect_quiet RC PROGRAM ARGS... wants exit RC and nothing on stderr
# (no warning); await_output FILE SED_SCRIPT prints what `sed -n SED_SCRIPT
# FILE` prints once it prints anything (a server's address from its first
# line), waiting up to 5 s, and fails if it never does (FILE is emptied
# before its writer starts: the writer's own redirection comes after a fork,
# and a previous writer's line was read); absolute PATH prints PATH from /
# (a program named without a '/' stays a name for PATH to find), so that a
# test may change folder; finish ends the test, failing if any.
failures=0
absolute() {
  case $1 in
    /* | '') printf '%s\n' "$1" ;;
    */*) printf '%s/%s\n' "$(pwd)" "$1" ;;
    *) printf '%s\n' "$1" ;;
  esac
}
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
await_output() {
  await_tries=50
  while [ "$await_tries" -gt 0 ]; do
    await_got=$(sed -n "$2" "$1" 2>/dev/null)
    if [ -n "$await_got" ]; then
      printf '%s\n' "$await_got"
      return 0
    fi
    await_tries=$((await_tries - 1))
    sleep 0.1
  done
  return 1
}
finish() {
  [ "$failures" -eq 0 ] || { echo "$failures failed"; exit 1; }
  exit 0
}
