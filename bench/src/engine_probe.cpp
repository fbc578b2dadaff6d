// metaroce-engine-probe: the engine benchmark's header-only loop (the one
// behind `metaroce-bench engine`'s ns_per_packet) with nothing else around
// it, for counting instructions per data packet under callgrind:
//   bash scripts/engine-instructions.sh [build-dir] [packets]
// The script collects only inside measured() (callgrind --toggle-collect),
// after a warm-up outside it, and takes off the payload copies (memcpy),
// which are not the engine's own work.
#include <cstdio>
#include <cstdlib>

#include "engine_pair.hpp"

namespace metaroce::bench {
// The counted part, a function of its own for callgrind's --toggle-collect.
[[gnu::noinline]] uint64_t measured(Pair& p, uint64_t packets) { return p.pump(false, packets); }
}  // namespace metaroce::bench

int main(int argc, char** argv) {
  const uint64_t packets = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  if (packets == 0) {
    std::fprintf(stderr, "usage: metaroce-engine-probe [packets > 0]\n");
    return 2;
  }
  metaroce::bench::Pair p(false);
  p.fill();
  p.pump(false, packets / 10);  // warm-up: caches, pools, the windows opened
  const uint64_t moved = metaroce::bench::measured(p, packets);
  std::printf("data_packets %llu\n", static_cast<unsigned long long>(moved));
  return 0;
}
