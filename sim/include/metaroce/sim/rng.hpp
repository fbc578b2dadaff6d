// Seeded pseudo-random numbers (splitmix64 for seeds, xoshiro256** for
// streams). Every random choice in the simulator draws from one of these,
// seeded from the run's seed, so a seed fixes the run.
#pragma once

#include <cstdint>

namespace metaroce::sim {

[[nodiscard]] constexpr uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A 64-bit finalizer (murmur3 fmix64): a good, cheap hash of one word.
[[nodiscard]] constexpr uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return k;
}

// Derives an independent seed from a base seed and up to three labels.
[[nodiscard]] constexpr uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0,
                                             uint64_t c = 0) {
  uint64_t s = seed;
  uint64_t h = splitmix64(s);
  h = fmix64(h ^ (a * 0xD1B54A32D192ED03ull));
  h = fmix64(h ^ (b * 0x8CB92BA72F3D8DD7ull));
  h = fmix64(h ^ (c * 0xABC98388FB8FAC03ull));
  return h;
}

class Rng {
 public:
  explicit constexpr Rng(uint64_t seed = 1) { reseed(seed); }
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
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  bool chance(double p) { return p > 0.0 && (p >= 1.0 || uniform() < p); }
  uint64_t below(uint64_t n) {
    __extension__ using u128 = unsigned __int128;
    return static_cast<uint64_t>((static_cast<u128>(next()) * n) >> 64);
  }
  using result_type = uint64_t;
  static constexpr uint64_t min() { return 0; }
  static constexpr uint64_t max() { return UINT64_MAX; }
  uint64_t operator()() { return next(); }

 private:
  static constexpr uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4]{};
};

}  // namespace metaroce::sim
