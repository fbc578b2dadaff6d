// Deterministic pseudo-random numbers for the simulator and the property
// tests: splitmix64 (seeding) and xoshiro256** (streams). Never seeded from
// std::random_device; the same seed gives the same sequence on every platform.
#pragma once

#include <cstdint>

namespace metaroce::harness {

// splitmix64: a good 64-bit mixer, used to derive independent seeds.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : s_(seed) {}
  constexpr uint64_t next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t s_;
};

// Mixes several values into one seed (order matters).
[[nodiscard]] constexpr uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  SplitMix64 sm(a);
  uint64_t h = sm.next();
  SplitMix64 sm2(h ^ (b * 0xD1B54A32D192ED03ull));
  h = sm2.next();
  SplitMix64 sm3(h ^ (c * 0x8CB92BA72F3D8DD7ull));
  h = sm3.next();
  SplitMix64 sm4(h ^ (d * 0xABC98388FB8FAC03ull));
  return sm4.next();
}

// xoshiro256** 1.0 (Blackman & Vigna).
class Rng {
 public:
  explicit constexpr Rng(uint64_t seed = 1) { reseed(seed); }

  constexpr void reseed(uint64_t seed) {
    SplitMix64 sm(seed);
    for (auto& w : s_) w = sm.next();
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
  // True with probability p (no draw when p <= 0).
  bool chance(double p) { return p > 0.0 && uniform() < p; }
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

}  // namespace metaroce::harness
