// Seeded pseudo-random numbers (the generators themselves: metaroce/rng.hpp).
// Every random choice in the simulator draws from one of these, seeded from
// the run's seed, so a seed fixes the run.
#pragma once

#include <cstdint>

#include "metaroce/rng.hpp"

namespace metaroce::sim {

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

class Rng : public Xoshiro256 {
 public:
  using Xoshiro256::Xoshiro256;
  // True with probability p; no draw when the outcome is certain (p <= 0 or
  // p >= 1), which the simulator's digests depend on.
  bool chance(double p) { return p > 0.0 && (p >= 1.0 || uniform() < p); }
};

}  // namespace metaroce::sim
