// PATH-8's verdict on a move: the measurement window after the move against
// the one before it, each as packets acknowledged over window-limited time.
#pragma once

#include <cstdint>

namespace metaroce::detail {

enum class MoveVerdict : uint8_t { kNeither, kWorse, kBetter };

// Worse below 15/16 of the rate before, better above 17/16 of it; between
// the two the move is neither undone nor taken as a reason to explore sooner.
// In 128 bits: a window lasts a quarter of cc.explore_interval_ns (up to a
// day), the one before up to 64 intervals, and in 64 bits acked x ns x 17
// passed 2^64 from an interval of about 80 s at 100 Gbit/s of 4 KiB
// packets. Exact for counts and times below 2^62 each (146 years of ns).
constexpr MoveVerdict judge_move(uint64_t before_acked, uint64_t before_ns, uint64_t after_acked,
                                 uint64_t after_ns) {
  __extension__ using u128 = unsigned __int128;
  const u128 after = u128{after_acked} * before_ns * 16;
  const u128 before = u128{before_acked} * after_ns;
  if (after < before * 15) return MoveVerdict::kWorse;
  if (after > before * 17) return MoveVerdict::kBetter;
  return MoveVerdict::kNeither;
}

}  // namespace metaroce::detail
