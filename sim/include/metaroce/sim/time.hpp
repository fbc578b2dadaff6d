// Simulated time: picoseconds on a 64-bit counter (about 213 days), a strong
// type so it never mixes with the engine's nanoseconds by accident. The
// conversion to metaroce::TimeNs happens only at the engine boundary.
#pragma once

#include <compare>
#include <cstdint>

#include "metaroce/types.hpp"

namespace metaroce::sim {

struct SimTime {
  uint64_t ps = 0;
  constexpr auto operator<=>(const SimTime&) const = default;
  [[nodiscard]] constexpr SimTime operator+(SimTime d) const { return {ps + d.ps}; }
  [[nodiscard]] constexpr SimTime operator-(SimTime d) const {
    return {ps >= d.ps ? ps - d.ps : 0};
  }
  SimTime& operator+=(SimTime d) {
    ps += d.ps;
    return *this;
  }
  [[nodiscard]] constexpr double us() const { return static_cast<double>(ps) * 1e-6; }
  [[nodiscard]] constexpr double seconds() const { return static_cast<double>(ps) * 1e-12; }

  static constexpr SimTime never() { return {UINT64_MAX}; }
  static constexpr SimTime from_ps(uint64_t v) { return {v}; }
  static constexpr SimTime from_ns(uint64_t v) { return {v * 1000}; }
  static constexpr SimTime from_us(uint64_t v) { return {v * 1000 * 1000}; }
  static constexpr SimTime from_ms(uint64_t v) { return {v * 1000 * 1000 * 1000}; }

  // Engine boundary: the engine's clock is this one truncated to ns.
  [[nodiscard]] constexpr TimeNs to_engine() const { return TimeNs{ps / 1000}; }
  static constexpr SimTime from_engine(TimeNs t) {
    return t == TimeNs::never() || t.ns > UINT64_MAX / 1000 ? never() : SimTime{t.ns * 1000};
  }
};

// Serialization time of `bytes` at `rate_mbps`, rounded up to a picosecond.
[[nodiscard]] constexpr SimTime serialization_time(uint64_t bytes, uint64_t rate_mbps) {
  return {(bytes * 8'000'000 + rate_mbps - 1) / rate_mbps};
}

}  // namespace metaroce::sim
