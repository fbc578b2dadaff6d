#!/usr/bin/env bash
# Include hygiene for the protocol engine (design: "a pure state machine; it
# never touches sockets, clocks or threads").
#
# Every file under engine/ and include/metaroce/ may include only:
#   - C++ standard library headers that do no I/O, read no clock and start or
#     synchronise no thread;
#   - public headers "metaroce/<name>.hpp" that exist in include/metaroce/;
#   - the engine's own private headers (engine/src/...).
# Forbidden, and reported with file:line:
#   sockets/OS:   <sys/*> <netinet/*> <arpa/*> <net/*> <linux/*> <netdb.h>
#                 <unistd.h> <fcntl.h> <poll.h> <ifaddrs.h> <signal.h> <csignal>
#   clocks:       <chrono> <ctime> <time.h>
#   concurrency:  <thread> <mutex> <shared_mutex> <condition_variable> <future>
#                 <semaphore> <latch> <barrier> <stop_token> <atomic> <pthread.h>
#                 (the Endpoint is driven by one thread; it needs none of them)
#   file/console: <iostream> <fstream> <filesystem>
#   drivers:      <rdma/*> <infiniband/*> (libfabric, verbs) and anything
#                 naming harness/, sim/, udp/, fabric/ or driver headers
# Also forbidden as identifiers: std::chrono, random_device (nondeterminism).
#
# Usage: check-engine-includes.sh [REPO_ROOT]   (default: this script's repo)
set -euo pipefail

root=${1:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"}
cd "$root"

dirs=()
for d in engine include/metaroce; do [[ -d $d ]] && dirs+=("$d"); done
if ((${#dirs[@]} == 0)); then
  echo "check-engine-includes: no engine/ or include/metaroce/ under $root" >&2
  exit 2
fi

forbidden_sys='^(sys/.*|netinet/.*|arpa/.*|net/.*|linux/.*|rdma/.*|infiniband/.*|netdb\.h|unistd\.h|fcntl\.h|poll\.h|ifaddrs\.h|signal\.h|csignal|chrono|ctime|time\.h|thread|mutex|shared_mutex|condition_variable|future|semaphore|latch|barrier|stop_token|atomic|pthread\.h|iostream|fstream|filesystem)$'
forbidden_path='(^|/)(harness|sim|udp|fabric|drivers?)(/|$)|(^|/)(harness|sim|udp|fabric|driver)[^/]*\.(h|hpp)$'

fail=0
report() {
  echo "$1: $2" >&2
  fail=1
}

# Drivers publish their APIs under include/metaroce/ too (udp.hpp, ...): those
# headers are not the engine's and may use clocks and sockets; the engine may
# not include them (forbidden_path above).
mapfile -t files < <(find "${dirs[@]}" -type f \( -name '*.cpp' -o -name '*.cc' -o -name '*.hpp' \
  -o -name '*.h' -o -name '*.hh' -o -name '*.ipp' -o -name '*.inc' \) |
  grep -Ev '^include/metaroce/((harness|sim|udp|fabric|driver)[^/]*\.(h|hpp)|(harness|sim|udp|fabric|drivers?)/)' |
  LC_ALL=C sort)

for f in "${files[@]}"; do
  lineno=0
  fdir=${f%/*}
  while IFS= read -r line || [[ -n $line ]]; do
    lineno=$((lineno + 1))
    if [[ $line =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*([\<\"])([^\>\"]+)[\>\"] ]]; then
      kind=${BASH_REMATCH[1]}
      hdr=${BASH_REMATCH[2]}
      where="$f:$lineno"
      if [[ $hdr =~ $forbidden_sys ]]; then
        report "$where" "forbidden system header <$hdr> (engine does no I/O, clocks or threads)"
      elif [[ $hdr =~ $forbidden_path ]]; then
        report "$where" "forbidden driver/harness header \"$hdr\""
      elif [[ $kind == '"' ]]; then
        if [[ $hdr == metaroce/* ]]; then
          [[ -f include/$hdr ]] ||
            report "$where" "\"$hdr\" is not a public header in include/metaroce/"
        elif [[ ! -f $fdir/$hdr && ! -f engine/src/$hdr ]]; then
          report "$where" "\"$hdr\" is neither an engine header nor a public metaroce header"
        fi
      elif [[ $hdr == */* ]]; then
        # <a/b.h>: third-party or OS header; only <metaroce/...> public headers allowed.
        if [[ $hdr == metaroce/* ]]; then
          [[ -f include/$hdr ]] || report "$where" "<$hdr> is not a public header in include/metaroce/"
        else
          report "$where" "third-party/OS header <$hdr> in the engine"
        fi
      fi
    elif [[ $line =~ std::chrono|random_device ]]; then
      code=${line%%//*}
      if [[ $code =~ std::chrono|random_device ]]; then
        report "$f:$lineno" "clock or nondeterministic source in the engine: ${BASH_REMATCH[0]}"
      fi
    fi
  done <"$f"
done

if ((fail)); then
  echo "check-engine-includes: FAILED (see above)" >&2
  exit 1
fi
echo "check-engine-includes: ${#files[@]} files under ${dirs[*]} OK"
