#!/usr/bin/env bash
# Installs a built tree into a scratch prefix and builds the example that
# README.md tells users to start from, examples/udp_write.cpp, outside the
# tree against it twice: with CMake (find_package(MetaRoCE), g++, through
# consumer/CMakeLists.txt) and with clang++ through pkg-config
# (metaroce.pc). Each build runs `udp_write demo` (two endpoints on
# loopback, one WRITE_IMM whose bytes the server prints).
#
#   install_test.sh CMAKE BUILD_DIR BUILD_TYPE
# Exit 0 all passed, 1 a step failed, 77 skipped (a sanitizer build: Sanitize or Tsan).
set -uo pipefail
cmake=$1 build=$2 type=$3
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# A sanitizer build's archives call its runtime (ASan/UBSan's, TSan's),
# which a program outside the tree does not link (and clang's runtime is not
# GCC's); the RelWithDebInfo build's run of this test covers installing.
# scripts/run-tests.sh's Tsan build also builds only the target udp-checks,
# without the tools that the install copies.
if [[ $type == Sanitize || $type == Tsan ]]; then
  echo "skipped: a $type build's libraries need the sanitizer runtime of the compiler that built them"
  exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

step() {  # WHAT COMMAND...
  local what=$1
  shift
  echo "--- $what"
  "$@" || { echo "FAIL: $what" >&2; exit 1; }
}

# demo UDP_WRITE: `UDP_WRITE demo` exits 0 having received the client's
# message, as ctest udp-write-example requires of the tree's own build.
demo() {
  local out rc
  out=$(timeout 60 "$1" demo 2>&1)
  rc=$?
  echo "$out"
  [[ $rc -eq 0 && $out == *'received 20 bytes: "hello, remote memory" (imm 1)'* ]]
}
example=$here/../../examples/udp_write.cpp

step "install into a scratch prefix" "$cmake" --install "$build" --prefix "$prefix"
for f in include/metaroce/udp.hpp include/metaroce/engine.hpp bin/metaroce-perf bin/metaroce-sim \
  bin/metaroce-conform bin/metaroce-conform-agent; do
  [[ -e $prefix/$f ]] || { echo "FAIL: $f not installed" >&2; exit 1; }
done
# The headers installed are the public API that README.md's Layout row names
# as installed, no more and no fewer (bytes.hpp, ring.hpp and rng.hpp, the
# components' own, were installed too), and each compiles on its own with
# nothing but the prefix.
# shellcheck disable=SC2016  # the backquotes are README.md's, not expansions
documented=$(sed -n 's/^| `include\/metaroce\/` | public API, installed: \(.*\) Not installed.*/\1/p' \
  "$here/../../README.md" | grep -o '`[a-z_]*\.hpp`' | tr -d '`' | sort)
installed=$(find "$prefix/include/metaroce" -mindepth 1 -printf '%P\n' | sort)
if [[ -z $documented || $installed != "$documented" ]]; then
  echo "FAIL: the installed headers are not the ones README.md's Layout row names as installed" >&2
  echo "  documented, not installed: $(comm -23 <(echo "$documented") <(echo "$installed") | xargs)" >&2
  echo "  installed, not documented: $(comm -13 <(echo "$documented") <(echo "$installed") | xargs)" >&2
  exit 1
fi
for h in $installed; do
  step "compile metaroce/$h on its own" \
    g++ -std=c++20 -fsyntax-only -I"$prefix/include" -x c++ - <<<"#include <metaroce/$h>"
done
pc=$(find "$prefix" -name metaroce.pc -print -quit)
config=$(find "$prefix" -name MetaRoCEConfig.cmake -print -quit)
[[ -n $pc && -n $config ]] || { echo "FAIL: metaroce.pc or MetaRoCEConfig.cmake not installed" >&2; exit 1; }

# CMake, g++: the package's targets bring C++20, the include directory and
# every library to link.
step "configure udp_write (find_package, g++)" \
  "$cmake" -S "$here/consumer" -B "$tmp/cmake-build" -DCMAKE_CXX_COMPILER=g++ \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix"
step "build udp_write (find_package, g++)" "$cmake" --build "$tmp/cmake-build"
step "run udp_write demo (find_package, g++)" demo "$tmp/cmake-build/udp_write"

# pkg-config, clang++: the archives hold machine code any compiler links
# (GCC's link-time bytecode alone left clang++ with undefined references).
cxx=clang++
if ! command -v clang++ >/dev/null; then
  echo "(no clang++ here: the pkg-config half runs with g++)"
  cxx=g++
fi
PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export PKG_CONFIG_PATH
flags=$(pkg-config --cflags --libs metaroce) || { echo "FAIL: pkg-config metaroce" >&2; exit 1; }
echo "pkg-config --cflags --libs metaroce: $flags"
# shellcheck disable=SC2086  # the flags are words
step "build udp_write (pkg-config, $cxx)" \
  "$cxx" -std=c++20 -O2 "$example" $flags -o "$tmp/udp_write-pc"
step "run udp_write demo (pkg-config, $cxx)" demo "$tmp/udp_write-pc"
# A shared object (a libfabric provider is one) takes the archives in: no
# text relocations, nothing left undefined.
# shellcheck disable=SC2086
step "link udp_write into a shared object (pkg-config, $cxx)" \
  "$cxx" -std=c++20 -O2 -shared -fPIC "$example" $flags -Wl,-z,defs -Wl,-z,text \
  -o "$tmp/libudp_write.so"
echo "install test passed"
