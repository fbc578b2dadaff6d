#!/bin/sh
# ctest bench.harness-trace-paths: `metaroce-bench harness --trace-paths`
# maps entropies to links as the network does, and detect_ms is the failed
# link's own detection.
#   harness_trace_paths_test.sh METAROCE_BENCH
set -u
bench=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
rc=0

# 1. --fabric hashes entropies onto links; the trace counted e % 4 (4 4 4 4
# for 16 entropies). Seed 16 leaves a link with no path: with no loss and no
# exploration nothing moves, so a link has no path exactly when it delivered
# nothing.
"$bench" harness --fabric --paths 4 --size-mib 4 --seed 16 --explore-ms 0 --trace-paths \
  >/dev/null 2>"$dir/fabric" || { echo "FAIL: the --fabric run failed"; rc=1; }
if ! awk '
  /ms start \| paths per link:/ { for (i = 1; i <= 4; ++i) per[i - 1] = $(NF - 4 + i); start = 1 }
  /^link [0-9]+: [0-9]+ packets delivered/ { l = $2; sub(/:/, "", l); got[l] = $3; n++ }
  END {
    if (!start || n != 4) { print "no start line or not 4 links"; exit 1 }
    zero = 0
    for (l = 0; l < 4; ++l) {
      if ((per[l] == 0) != (got[l] == 0)) {
        print "link " l ": " per[l] " paths at start but " got[l] " packets delivered"; exit 1
      }
      zero += per[l] == 0
    }
    if (zero == 0) { print "seed 16 no longer leaves a link empty: pick another"; exit 1 }
  }' "$dir/fabric"; then
  echo "FAIL: paths per link disagree with the network:"; cat "$dir/fabric"; rc=1
fi

# 2. detect_ms counts only the failed link's paths. At 20 % loss, live paths
# time out too: the first of those after the failure was reported (0.052 ms
# here, where the failed link's first timeout or state change comes 2.1 ms in).
"$bench" harness --fail-path 1 --loss 0.2 --seed 1 --size-mib 32 --trace-paths --json \
  >"$dir/json" 2>"$dir/trace" || { echo "FAIL: the --fail-path run failed"; rc=1; }
detect=$(sed -n 's/.*"detect_ms":\([0-9.]*\).*/\1/p' "$dir/json")
if ! awk -v detect="$detect" '
  / ms link 1 fails$/ { fail = $1; next }
  # "T ms path P timeout link L", "T ms path P state link L -> M ...",
  # "T ms path P PATH-4 rto link L -> M ...": L is the link before the event.
  fail != "" && $1 >= fail && $3 == "path" && ($5 == "timeout" || $5 == "state" || $5 == "PATH-4" || $5 == "PATH-5") {
    for (i = 6; i < NF; ++i) if ($i == "link") break
    if ($(i + 1) == 1) { first = $1 - fail; exit }
  }
  END {
    if (detect == "" || first == "") { print "no detect_ms (" detect ") or no event on link 1"; exit 1 }
    d = first - detect; if (d < 0) d = -d
    if (d > 0.0015) { print "detect_ms " detect " but the first event on link 1 came " first " ms in"; exit 1 }
  }' "$dir/trace"; then
  echo "FAIL: detect_ms is not the failed link's"; cat "$dir/json"; rc=1
fi
[ $rc -eq 0 ] && echo "ok: paths per link match the network; detect_ms $detect is link 1's"
exit $rc
