// The rate a progress line prints (Simulation::tick and count_tick).
#pragma once

#include <array>

namespace metaroce::sim {

// `count` things over `seconds` of wall time, divided by `unit` (1e6 for
// "M events/s"), with `decimals` after the point; "-" where no wall time was
// measured. With a progress interval of 0 (tests) two lines can come within
// one clock reading, and a division by zero printed "inf" (or "nan"), a rate
// nothing ran at.
struct RateText {
  std::array<char, 32> text{};
  [[nodiscard]] const char* c_str() const { return text.data(); }
};
[[nodiscard]] RateText rate_text(double count, double seconds, double unit, int decimals);

}  // namespace metaroce::sim
