#!/usr/bin/env bash
# Sets up a fresh Debian machine, builds the demo and runs it:
#   bash scripts/run-demo.sh [demo arguments...]
# Builds only the `metaroce-demo` target in build/ (RelWithDebInfo, Ninja), the
# same build directory scripts/run-tests.sh uses.
# Knobs: METAROCE_JOBS=2, METAROCE_SKIP_SETUP=1 (do not call setup-deps.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS=${METAROCE_JOBS:-2}

if [[ ${METAROCE_SKIP_SETUP:-0} != 1 ]]; then
  bash scripts/setup-deps.sh
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS" --target metaroce-demo
exec build/examples/metaroce-demo "$@"
