// Seeded pseudo-random numbers: splitmix64 (seeds, and the engine's own
// draws) and xoshiro256** (the streams of the harness and the simulator).
// Never seeded from std::random_device: the same seed gives the same sequence
// on every platform, and the harness's runs and the simulator's digests are
// named by their seeds, so any change here changes them all (tests/rng pins
// the sequences). Shared by the components, as ring.hpp is; not part of the
// endpoint API.
#pragma once

#include <cstdint>

namespace metaroce {

// splitmix64's output function: a bijection of 64-bit words whose every
// output bit depends on every input bit (also a hash of a word).
[[nodiscard]] constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// One step of splitmix64: advances `state` and returns a well-mixed word.
[[nodiscard]] constexpr uint64_t splitmix64(uint64_t& state) {
  return splitmix64_mix(state += 0x9E3779B97F4A7C15ull);
}

// xoshiro256** 1.0 (Blackman & Vigna), its state filled by splitmix64 from
// the seed. Users add chance(p) themselves: whether a certain outcome (p >= 1)
// still consumes a draw differs between them and fixes their streams.
class Xoshiro256 {
 public:
  explicit constexpr Xoshiro256(uint64_t seed = 1) { reseed(seed); }

  constexpr void reseed(uint64_t seed) {
    for (auto& w : s_) w = splitmix64(seed);
  }

  constexpr uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  uint64_t operator()() { return next(); }

  // Uniform in [0, 1) with 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in [0, n) (n > 0), Lemire's multiply-shift without rejection bias
  // worth caring about for a simulator.
  uint64_t below(uint64_t n) {
    __extension__ using u128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }
  // Uniform in [lo, hi] inclusive.
  uint64_t range(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }

  // UniformRandomBitGenerator, for std::shuffle and friends.
  using result_type = uint64_t;
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return UINT64_MAX; }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4]{};
};

}  // namespace metaroce
