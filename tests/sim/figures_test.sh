#!/usr/bin/env bash
# scripts/sim-figures.sh and scripts/plot-sim.py on a small preset: every
# figure the docs show is drawn, and is a PNG. Without this the plotting
# path (CSV columns, matplotlib calls) could rot unnoticed between stops.
#
# usage: figures_test.sh METAROCE_SIM
set -euo pipefail
sim=$1
root="$(cd "$(dirname "$0")/../.." && pwd)"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
SIM="$sim" TRANSPORTS="metaroce rocev2" SAMPLE_US=2 \
  bash "$root/scripts/sim-figures.sh" fattree16-perm "$out" 1 2> "$out/log" ||
  { cat "$out/log" >&2; exit 1; }
for f in fct_cdf throughput queues cwnd; do
  png="$out/$f.png"
  if [[ ! -s "$png" ]] || [[ "$(head -c 8 "$png" | od -An -tx1 | tr -d ' \n')" != 89504e470d0a1a0a ]]; then
    echo "figures_test: $f.png missing or not a PNG" >&2
    cat "$out/log" >&2
    exit 1
  fi
done
# Each transport's CSV folder feeds the plots; an empty FCT file would plot
# an empty CDF without any error.
for t in metaroce rocev2; do
  [[ $(wc -l < "$out/$t/fcts.csv") -gt 1 ]] || { echo "figures_test: $t/fcts.csv has no rows" >&2; exit 1; }
done
# The FCT CDF counts every flow, unfinished ones too (a run that finished
# half its flows drew a CDF reaching 1), and its legend's p99 is the
# report's fct_p99_us (nearest rank), not an interpolation between flows.
py=python3
"$py" -c 'import matplotlib, numpy' 2>/dev/null || py=/usr/bin/python3
"$py" - "$root/scripts/plot-sim.py" <<'EOF'
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("plot_sim", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
x, y, p99 = m.fct_cdf(["30", "10", "", "20"])
assert list(x) == [10, 20, 30] and list(y) == [0.25, 0.5, 0.75], (x, y)
_, _, p99 = m.fct_cdf([str(v) for v in range(1, 101)])
assert p99 == 99, p99
# The p99 of all flows, as the report's: its rank an unfinished flow's,
# unknown (it was the finished flows' p99).
_, _, p99 = m.fct_cdf(["10"] * 99 + [""])
assert p99 == 10, p99
_, _, p99 = m.fct_cdf(["10"] * 98 + ["", ""])
assert p99 != p99, p99
# A run with no finished flow keeps its legend entry (it had none, as if
# not given), saying how many finished.
assert m.fct_legend("irn", ["", "", ""], {}) == "irn (0/3 finished)", m.fct_legend("irn", ["", "", ""], {})
assert m.fct_legend("irn", ["10", ""], {"fct_p99_us": 42}) == "irn (p99 >= 42 us)"
# Two runs of one transport (two settings compared) are told apart.
assert m.unique_labels(["metaroce", "metaroce", "irn"], ["a/trim", "b/base/", "c"]) == [
    "metaroce (trim)", "metaroce (base)", "irn"]
# Two sweeps of sim-figures.sh (OUTDIR/TRANSPORT) share the folder's last
# name: it gave both "metaroce (metaroce)".
labels = m.unique_labels(["metaroce", "metaroce", "irn", "irn"],
                         ["base/metaroce", "x/trim/metaroce/", "base/irn", "irn"])
assert labels == ["metaroce (base/metaroce)", "metaroce (trim/metaroce)", "irn (base/irn)",
                  "irn (irn)"], labels
EOF
# A folder lacking one of the CSV files is refused up front, naming it (no
# throughput.csv: fct_cdf.png drawn, then a traceback).
for f in throughput.csv queues.csv paths.csv fcts.csv; do
  part="$out/part-$f"
  cp -r "$out/metaroce" "$part"
  rm "$part/$f"
  rc=0
  "$py" "$root/scripts/plot-sim.py" -o "$part/png" "$part" > "$part.log" 2>&1 || rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q "error: $part: no $f (not a --csv folder?)" "$part.log" ||
    grep -q Traceback "$part.log" || [[ -e "$part/png/fct_cdf.png" ]]; then
    echo "figures_test: a folder without $f: exit $rc, wanted 2 naming it before any figure:" >&2
    cat "$part.log" >&2
    exit 1
  fi
done
# A folder with a malformed file, or bad options, exits 2 naming the file
# (and line) before any figure: an empty or renamed-column fcts.csv or an
# empty throughput.csv drew empty figures with exit 0; a stray cell, a
# missing time_us, a report.json list, --dpi 0 or an -o naming a file
# stopped on a traceback, some after fct_cdf.png was written.
damages=(
  "fcts.csv|: > fcts.csv"
  "fcts.csv|sed -i 1s/fct_us/fct/ fcts.csv"
  "fcts.csv|sed -i 1q fcts.csv"
  "fcts.csv|sed -i '3s/,[^,]*\$/,x/' fcts.csv"
  "throughput.csv|: > throughput.csv"
  "throughput.csv|sed -i 3s/.*/x,y,z,w/ throughput.csv"
  "throughput.csv|sed -i '\$s/,[^,]*\$//' throughput.csv"
  "queues.csv|sed -i 1s/^time_us/t/ queues.csv"
  "queues.csv|sed -i 2s/^[^,]*,/nan,/ queues.csv"
  "paths.csv|: > paths.csv"
  "paths.csv|sed -i '2s/^\([^,]*,[^,]*,[^,]*,[^,]*,\)[^,]*/\11.5/' paths.csv"
  "report.json|echo '[1,2]' > report.json"
  "report.json|echo '{\"transport\": 7}' > report.json"
  "report.json|head -c 20 report.json > r && mv r report.json"
)
for i in "${!damages[@]}"; do
  f=${damages[$i]%%|*} damage=${damages[$i]#*|}
  bad="$out/bad$i"
  cp -r "$out/metaroce" "$bad"
  (cd "$bad" && eval "$damage")
  rc=0
  "$py" "$root/scripts/plot-sim.py" -o "$bad/png" "$bad" > "$bad.log" 2>&1 || rc=$?
  if [[ $rc -ne 2 ]] || ! grep -q "error: $bad/$f" "$bad.log" || grep -q Traceback "$bad.log" ||
    [[ -n $(ls -A "$bad/png" 2>/dev/null) ]]; then
    echo "figures_test: $f damaged ($damage): exit $rc, wanted 2 naming it before any figure:" >&2
    cat "$bad.log" >&2
    exit 1
  fi
done
: > "$out/a-file"
for args in "--dpi=0" "--dpi=-5" "--dpi=x" "-o $out/a-file" "-o $out/a-file/png"; do
  rc=0
  # shellcheck disable=SC2086 # $args is one or two words
  "$py" "$root/scripts/plot-sim.py" $args "$out/metaroce" > "$out/opt.log" 2>&1 || rc=$?
  if [[ $rc -ne 2 ]] || ! grep -Eq "error: (argument --dpi|-o $out/a-file)" "$out/opt.log" ||
    grep -q Traceback "$out/opt.log"; then
    echo "figures_test: plot-sim.py $args: exit $rc, wanted 2 naming the option:" >&2
    cat "$out/opt.log" >&2
    exit 1
  fi
done
# The documented command, scripts/plot-sim.py DIR..., under a python3 first
# on PATH that lacks matplotlib (pyenv's): it stopped on a traceback, "No
# module named 'matplotlib'". It runs again with /usr/bin/python3, where
# setup-deps.sh installs them; without them there either, exit 2 naming the
# fix. A python3 that reads no site packages (-S) stands for pyenv's.
bare="$out/bare-python"
mkdir -p "$bare"
printf '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n' > "$bare/python3"
chmod +x "$bare/python3"
if /usr/bin/python3 -c 'import matplotlib, numpy' 2>/dev/null; then
  PATH="$bare:$PATH" "$root/scripts/plot-sim.py" -o "$out/rerun" "$out/metaroce" \
    > "$out/rerun.log" 2>&1 || { echo "figures_test: plot-sim.py under a python3 without matplotlib failed" >&2; cat "$out/rerun.log" >&2; exit 1; }
  [[ -s "$out/rerun/fct_cdf.png" ]] || { echo "figures_test: no fct_cdf.png from the re-run" >&2; exit 1; }
  grep -q "running with /usr/bin/python3" "$out/rerun.log" ||
    { echo "figures_test: the re-run was not said" >&2; cat "$out/rerun.log" >&2; exit 1; }
else
  echo "figures_test: /usr/bin/python3 has no matplotlib: its re-run not checked" >&2
fi
rc=0
PATH="$bare:$PATH" METAROCE_PLOT_SIM_NO_RERUN=1 "$root/scripts/plot-sim.py" "$out/metaroce" \
  > "$out/missing.log" 2>&1 || rc=$?
if [[ $rc -ne 2 ]] || ! grep -q "^plot-sim.py: No module named .* scripts/setup-deps.sh" "$out/missing.log" ||
  grep -q Traceback "$out/missing.log"; then
  echo "figures_test: without matplotlib: exit $rc, wanted 2 and the fix named:" >&2
  cat "$out/missing.log" >&2
  exit 1
fi
echo "figures_test: 4 figures drawn for metaroce and rocev2; plot-sim.py without matplotlib re-runs or names the fix"
