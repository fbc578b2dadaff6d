// metaroce-engine-probe: the engine benchmark's header-only loop (the one
// behind `metaroce-bench engine`'s ns_per_packet) with nothing else around
// it, for counting instructions per data packet under callgrind:
//   bash scripts/engine-instructions.sh [--pipelined] [build-dir] [packets]
// The script collects only inside measured() (callgrind --toggle-collect),
// after a warm-up outside it, and takes off the payload copies (memcpy),
// which are not the engine's own work.
// --pipelined: Pipeline::pump instead, the loopback client's steady
// state (8 paths, each with packets in flight, 64 KiB WRITEs 64 deep,
// ACKs returned in batches), where the one-at-a-time loop leaves every path
// empty and SCHED-1's choice ends at the first path it looks at.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine_pair.hpp"

namespace metaroce::bench {
// The counted parts, functions of their own for callgrind's --toggle-collect.
[[gnu::noinline]] uint64_t measured(Pair& p, uint64_t packets) { return p.pump(false, packets); }
[[gnu::noinline]] uint64_t measured_pipelined(Pipeline& p, uint64_t packets) {
  return p.pump(packets);
}
}  // namespace metaroce::bench

int main(int argc, char** argv) {
  const bool pipelined = argc > 1 && std::strcmp(argv[1], "--pipelined") == 0;
  if (pipelined) {
    --argc;
    ++argv;
  }
  const uint64_t packets = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  if (packets == 0) {
    std::fprintf(stderr, "usage: metaroce-engine-probe [--pipelined] [packets > 0]\n");
    return 2;
  }
  uint64_t moved = 0;
  if (pipelined) {
    metaroce::bench::Pipeline p;
    p.pump(packets / 10);  // warm-up: caches, pools, the windows opened
    moved = metaroce::bench::measured_pipelined(p, packets);
  } else {
    metaroce::bench::Pair p(false);
    p.fill();
    p.pump(false, packets / 10);  // warm-up: caches, pools, the windows opened
    moved = metaroce::bench::measured(p, packets);
  }
  std::printf("data_packets %llu\n", static_cast<unsigned long long>(moved));
  return 0;
}
