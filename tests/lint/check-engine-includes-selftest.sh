#!/usr/bin/env bash
# Proves scripts/check-engine-includes.sh catches what it must: copies the
# engine and public headers to a scratch tree, plants one bad include at a
# time, and expects the checker to fail on each (and pass on the clean copy).
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"}
checker="$root/scripts/check-engine-includes.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

mkdir -p "$scratch/engine/src" "$scratch/include"
cp -r "$root/include/metaroce" "$scratch/include/"
cp -r "$root/engine/." "$scratch/engine/"
victim="$scratch/engine/src/zz_selftest.cpp"
printf '#include "metaroce/wire.hpp"\n#include <cstdint>\n#include <vector>\n' >"$victim"

if ! bash "$checker" "$scratch" >/dev/null 2>&1; then
  echo "selftest: checker rejects the clean tree" >&2
  bash "$checker" "$scratch" || true
  exit 1
fi

bad_lines=(
  '#include <sys/socket.h>'
  '#include <netinet/in.h>'
  '#include <arpa/inet.h>'
  '#include <unistd.h>'
  '#include <chrono>'
  '#include <ctime>'
  '#include <time.h>'
  '#include <thread>'
  '#include <mutex>'
  '#include <condition_variable>'
  '#include <atomic>'
  '#include <pthread.h>'
  '#include <sys/epoll.h>'
  '#include <poll.h>'
  '#include <netdb.h>'
  '#include <rdma/fabric.h>'
  '#  include   <thread>'
  '#include "harness/sim.hpp"'
  '#include "../../harness/include/metaroce/sim.hpp"'
  '#include "metaroce/udp_driver.hpp"'
  '#include "udp/socket.hpp"'
  '#include "fabric/provider.hpp"'
  '#include "sim/network.hpp"'
  'auto t = std::chrono::steady_clock::now();'
  'std::random_device rd;'
)
failures=0
for bad in "${bad_lines[@]}"; do
  for target in "$victim" "$scratch/include/metaroce/types.hpp"; do
    cp "$target" "$target.orig"
    printf '%s\n' "$bad" >>"$target"
    if bash "$checker" "$scratch" >/dev/null 2>&1; then
      echo "selftest: NOT caught in ${target#"$scratch"/}: $bad" >&2
      failures=$((failures + 1))
    fi
    mv "$target.orig" "$target"
  done
done
if ((failures)); then
  echo "selftest: $failures bad includes slipped through" >&2
  exit 1
fi
echo "selftest: ${#bad_lines[@]} bad includes caught in engine/ and include/metaroce/"
