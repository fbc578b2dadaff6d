#!/usr/bin/env bash
# Installs every Debian package MetaRoCE needs to build, test, fuzz and run
# its demos and experiments. Idempotent: when everything is present it only
# asks dpkg and returns in well under a second; apt-get update runs only when
# a missing package has no install candidate in the current package lists.
set -euo pipefail

PACKAGES=(
  # build and test
  build-essential cmake ninja-build g++ clang libclang-rt-14-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  libtomlplusplus-dev  # metaroce-sim --config (sim/src/config_file.cpp)
  liburing-dev pkg-config  # the UDP driver's io_uring transmit (udp/CMakeLists.txt)
  clang-format python3
  valgrind  # scripts/engine-instructions.sh: the instruction counts BENCHMARKS.md quotes
  # network experiments, drivers and plots (procps: sysctl, which tests/fabric/fabric.sh runs)
  iproute2 nftables procps iperf3 tshark mptcpd mptcpize libfabric-dev python3-matplotlib python3-numpy
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)
  [[ "$status" == ii* ]] || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
  echo "setup-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "setup-deps: installing ${missing[*]}"

SUDO=()
if ((EUID != 0)); then
  command -v sudo >/dev/null || { echo "setup-deps: need root or sudo" >&2; exit 1; }
  SUDO=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive

# tshark asks whether non-root users may capture; answer "no" up front.
echo "wireshark-common wireshark-common/install-setuid boolean false" |
  "${SUDO[@]}" debconf-set-selections

# Refresh the package lists only when some missing package has no candidate.
need_update=0
for pkg in "${missing[@]}"; do
  cand=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
  if [[ -z "$cand" || "$cand" == "(none)" ]]; then
    need_update=1
    break
  fi
done
if ((need_update)); then
  "${SUDO[@]}" apt-get update -q
fi

install() { "${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; }
if ! install; then
  # Stale lists (e.g. a superseded version no longer on the mirror): refresh once, retry.
  ((need_update)) && exit 1
  "${SUDO[@]}" apt-get update -q
  install
fi
echo "setup-deps: done"
