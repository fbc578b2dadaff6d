#!/usr/bin/env bash
# Runs one simulator preset for metaroce, spray-nocc, irn and rocev2 with
# --csv and plots them together (scripts/plot-sim.py).
#
# usage: scripts/sim-figures.sh [PRESET] [OUTDIR] [SEED]
#   PRESET  default fattree128-perm2mb
#   OUTDIR  default build/sim-figures/PRESET (one CSV folder a transport,
#           PNGs at the top)
#   SIM     env: the metaroce-sim binary (default build/tools/sim/metaroce-sim)
#   SAMPLE_US env: CSV sample interval (default 5)
#   TRANSPORTS env: the transports to run (default "metaroce spray-nocc irn rocev2")
#   PYTHON  env: interpreter with matplotlib + numpy (default python3, else /usr/bin/python3)
set -euo pipefail
# OUTDIR and SIM as given are the caller's paths; the defaults lie in the
# repository, where the script runs (a relative SIM given from elsewhere
# named nothing there).
caller=$(pwd)
from_caller() { [[ $1 == /* ]] && printf '%s\n' "$1" || printf '%s/%s\n' "$caller" "$1"; }
cd "$(dirname "$0")/.."
preset=${1:-fattree128-perm2mb}
out=build/sim-figures/$preset
[[ -n ${2:-} ]] && out=$(from_caller "$2")
seed=${3:-1}
sim=build/tools/sim/metaroce-sim
[[ -n ${SIM:-} ]] && sim=$(from_caller "$SIM")
[[ -x "$sim" ]] || { echo "sim-figures: $sim not built (cmake --build build --target metaroce-sim)" >&2; exit 1; }
mkdir -p "$out"
dirs=()
for t in ${TRANSPORTS:-metaroce spray-nocc irn rocev2}; do
  echo "sim-figures: $preset $t" >&2
  # Exit status 1 (some flow unfinished) still leaves CSVs worth plotting;
  # any other (a crash, a bad option) stops here.
  rc=0
  "$sim" --preset "$preset" --transport "$t" --seed "$seed" -q \
    --csv "$out/$t" --sample-us "${SAMPLE_US:-5}" > "$out/$t.txt" || rc=$?
  ((rc <= 1)) || { echo "sim-figures: $sim failed for $t (exit status $rc)" >&2; exit "$rc"; }
  dirs+=("$out/$t")
done
# The distribution's python3 has python3-matplotlib (scripts/setup-deps.sh);
# a python3 earlier on PATH (pyenv, venv) may not.
py=${PYTHON:-python3}
if ! "$py" -c 'import matplotlib, numpy' 2>/dev/null; then py=/usr/bin/python3; fi
"$py" scripts/plot-sim.py -o "$out" "${dirs[@]}"
