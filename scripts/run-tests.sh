#!/usr/bin/env bash
# The one command that sets up, builds and runs every MetaRoCE test:
#   1. setup        scripts/setup-deps.sh (Debian packages; fast no-op when present)
#   2. build        RelWithDebInfo, Ninja, in build/
#   3. test         ctest in build/
#   4. asan-build   Sanitize build type (ASan + UBSan) in build-asan/, every target
#                   (METAROCE_ASAN_ALL=0: only those ctest names)
#   5. asan-test    ctest in build-asan/
#   6. tsan-build   Tsan build type (ThreadSanitizer) in build-tsan/, target udp-checks only
#   7. tsan-test    ctest -L udp in build-tsan/, one at a time (the driver's threads: progress
#                   thread, thread_safe, cross-thread close and stop; metaroce-perf, udp_write)
#   8. fuzz-build   clang + -DMETAROCE_FUZZ=ON in build-fuzz/ (skipped without clang)
#   9. fuzz-corpus  every target has seeds, gen_corpus's output equals fuzz/corpus, and ctest -L
#                   fuzz in build-fuzz/ replays every checked-in corpus once
#  10. fuzz:<name>  each libFuzzer target for METAROCE_FUZZ_SECONDS, -seed=1, seed corpus
#  11. includes     scripts/check-engine-includes.sh
#  12. format       clang-format --dry-run -Werror on every *.cpp / *.hpp
# Ends with "N passed, M failed" (steps) and exits non-zero if any step failed.
#
# Knobs (environment):
#   METAROCE_JOBS=2            parallel build and test jobs
#   METAROCE_FUZZ_SECONDS=30   run time of each fuzz target
#   METAROCE_SKIP_SETUP=1      do not call setup-deps.sh
#   METAROCE_SKIP_ASAN=1       skip the sanitizer build
#   METAROCE_SKIP_TSAN=1       skip the ThreadSanitizer build and its tests
#   METAROCE_SKIP_FUZZ=1       skip the fuzz build and runs
#   METAROCE_ASAN_ALL=0        build only the targets ctest names in build-asan/ (default: all, so
#                              that example programs under test are built too)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
ROOT=$(pwd)
JOBS=${METAROCE_JOBS:-2}
FUZZ_SECONDS=${METAROCE_FUZZ_SECONDS:-30}
FUZZ_TARGETS=(fuzz_decode fuzz_engine fuzz_udp)

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-second_deadlock_stack=1}
export CTEST_OUTPUT_ON_FAILURE=1

passed=0
failed=0
failed_steps=()
t_start=$SECONDS

# step NAME COMMAND...: runs one counted step.
step() {
  local name=$1
  shift
  local t0=$SECONDS
  echo
  echo "=== [$name] $*"
  if "$@"; then
    passed=$((passed + 1))
    echo "=== [$name] PASS ($((SECONDS - t0))s)"
    return 0
  fi
  failed=$((failed + 1))
  failed_steps+=("$name")
  echo "=== [$name] FAIL ($((SECONDS - t0))s)"
  return 1
}

# skip_step NAME WHY: a step that cannot run because an earlier one failed.
skip_step() {
  failed=$((failed + 1))
  failed_steps+=("$1")
  echo
  echo "=== [$1] FAIL (not run: $2)"
}

configure_and_build() {  # DIR BUILD_TYPE [cmake args...]
  local dir=$1 type=$2
  shift 2
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE="$type" "$@" && cmake --build "$dir" -j "$JOBS"
}

run_ctest() {  # DIR
  ctest --test-dir "$1" --output-on-failure --no-tests=error -j "$JOBS" --timeout 1500
}

# Prints the Ninja targets the tests of an already configured build need: the
# executables the tests run (and any built file they name), and for
# gtest_discover_tests' placeholders "<target>_NOT_BUILT" the target itself.
test_targets() {  # DIR
  ctest --test-dir "$1" --show-only=json-v1 2>/dev/null | python3 -c '
import json, os, sys
build = os.path.realpath(sys.argv[1])
out = set()
for t in json.load(sys.stdin).get("tests", []):
    name = t.get("name", "")
    if name.endswith("_NOT_BUILT"):
        out.add(name[: -len("_NOT_BUILT")])
    for arg in t.get("command", []) or []:
        if os.path.isabs(arg) and os.path.realpath(arg).startswith(build + os.sep):
            out.add(os.path.relpath(os.path.realpath(arg), build))
print("\n".join(sorted(out)))
' "$1"
}

asan_build() {
  local dir=build-asan
  cmake -S "$ROOT" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize || return 1
  if [[ ${METAROCE_ASAN_ALL:-1} != 1 ]]; then
    local targets
    mapfile -t targets < <(test_targets "$dir")
    if ((${#targets[@]} > 0)); then
      echo "asan-build: test targets: ${targets[*]}"
      if cmake --build "$dir" -j "$JOBS" --target "${targets[@]}"; then
        # gtest_discover_tests lists the tests only once built; build whatever
        # the refreshed list still names (e.g. helpers found at build time).
        mapfile -t targets < <(test_targets "$dir")
        if ((${#targets[@]} == 0)) || cmake --build "$dir" -j "$JOBS" --target "${targets[@]}"; then
          return 0
        fi
      fi
      echo "asan-build: building the test targets failed; building everything"
    fi
  fi
  cmake --build "$dir" -j "$JOBS"
}

tsan_build() {
  cmake -S "$ROOT" -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Tsan &&
    cmake --build build-tsan -j "$JOBS" --target udp-checks
}

# The "udp" label's tests but two that judge what TSan changes, not what
# it looks for: perf.peer-loss and metaroce-perf-loopback bound the server's
# RSS (TSan's shadow memory exceeds the bounds). install.consumer skips
# itself there. One at a time: the tests run real-time protocols over
# loopback, each several times slower under TSan.
tsan_test() {
  ctest --test-dir build-tsan --output-on-failure --no-tests=error -j 1 --timeout 1500 -L udp \
    -E '^(perf\.peer-loss|metaroce-perf-loopback)$'
}

have_clang_fuzzer() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local probe
  probe=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' \
    >"$probe/p.cpp"
  clang++ -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1
  local rc=$?
  rm -rf "$probe"
  return $rc
}

fuzz_build() {
  CC=clang CXX=clang++ cmake -S "$ROOT" -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMETAROCE_FUZZ=ON &&
    cmake --build build-fuzz -j "$JOBS" --target "${FUZZ_TARGETS[@]}" gen_corpus
}

# The checked-in seeds are what gen_corpus writes today, so a wire-format
# change that breaks the generator or leaves the seeds stale fails here; and
# each seed passes its harness, whatever the timed runs below happen to reach.
fuzz_corpus() {
  local fresh rc t
  # A target without seeds starts each CI run from nothing, and libFuzzer's
  # length control then keeps its inputs a few dozen bytes long.
  for t in "${FUZZ_TARGETS[@]}"; do
    if [[ -z $(ls -A "fuzz/corpus/$t" 2>/dev/null) ]]; then
      echo "fuzz-corpus: $t has no seeds in fuzz/corpus/$t (gen_corpus writes them)" >&2
      return 1
    fi
  done
  fresh=$(mktemp -d) || return 1
  if ! build-fuzz/fuzz/gen_corpus "$fresh"; then
    rm -rf "$fresh"
    echo "fuzz-corpus: gen_corpus failed (its message above): the generator needs fixing" >&2
    return 1
  fi
  diff -r "$fresh" fuzz/corpus
  rc=$?
  rm -rf "$fresh"
  if ((rc != 0)); then
    echo "fuzz-corpus: fuzz/corpus is not what gen_corpus writes" \
      "(to refresh it: build-fuzz/fuzz/gen_corpus fuzz/corpus)" >&2
    return 1
  fi
  ctest --test-dir build-fuzz --output-on-failure --no-tests=error -L fuzz
}

fuzz_run() {  # TARGET
  local t=$1
  local work=build-fuzz/corpus-work/$t
  local artifacts=build-fuzz/artifacts/$t
  mkdir -p "$work" "$artifacts"
  local corpora=("$work")
  [[ -d fuzz/corpus/$t ]] && corpora+=("fuzz/corpus/$t")
  # New inputs go to the first (scratch) corpus; the checked-in one is only read.
  "build-fuzz/fuzz/$t" -seed=1 -max_total_time="$FUZZ_SECONDS" -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${corpora[@]}" 2>&1 |
    grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)'
  return "${PIPESTATUS[0]}"
}

format_check() {
  local files
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' |
      while IFS= read -r f; do [[ -f $f ]] && printf '%s\n' "$f"; done)
  else
    mapfile -t files < <(find . \( -path './build*' -o -path './.git' -o -path './shared' \) -prune \
      -o -type f \( -name '*.cpp' -o -name '*.hpp' \) -print)
  fi
  echo "format: ${#files[@]} files"
  # No files means the listing went wrong (wrong directory, git failing), not
  # that everything is formatted.
  ((${#files[@]} > 0)) || { echo "format: no C++ files found" >&2; return 1; }
  clang-format --dry-run -Werror "${files[@]}"
}

# ---------------------------------------------------------------- steps ----
if [[ ${METAROCE_SKIP_SETUP:-0} != 1 ]]; then
  step setup bash scripts/setup-deps.sh
fi

if step build configure_and_build build RelWithDebInfo; then
  step test run_ctest build
else
  skip_step test "build failed"
fi

if [[ ${METAROCE_SKIP_ASAN:-0} != 1 ]]; then
  if step asan-build asan_build; then
    step asan-test run_ctest build-asan
  else
    skip_step asan-test "asan-build failed"
  fi
fi

if [[ ${METAROCE_SKIP_TSAN:-0} != 1 ]]; then
  if step tsan-build tsan_build; then
    step tsan-test tsan_test
  else
    skip_step tsan-test "tsan-build failed"
  fi
fi

if [[ ${METAROCE_SKIP_FUZZ:-0} == 1 ]]; then
  echo
  echo "=== [fuzz] skipped (METAROCE_SKIP_FUZZ=1)"
elif ! have_clang_fuzzer; then
  echo
  echo "=== [fuzz] skipped: clang with libFuzzer not available"
elif step fuzz-build fuzz_build; then
  step fuzz-corpus fuzz_corpus
  for t in "${FUZZ_TARGETS[@]}"; do step "fuzz:$t" fuzz_run "$t"; done
else
  skip_step fuzz-corpus "fuzz-build failed"
  for t in "${FUZZ_TARGETS[@]}"; do skip_step "fuzz:$t" "fuzz-build failed"; done
fi

step includes bash scripts/check-engine-includes.sh
step format format_check

echo
echo "=== run-tests finished in $((SECONDS - t_start))s"
((failed == 0)) || echo "=== failed steps: ${failed_steps[*]}"
echo "$passed passed, $failed failed"
((failed == 0))
