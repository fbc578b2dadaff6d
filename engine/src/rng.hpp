// Seeded pseudo-random numbers (splitmix64): keys, entropy values, initial
// PSNs. Deterministic per endpoint seed, so a run is reproducible.
#pragma once

#include <cstdint>

#include "metaroce/rng.hpp"

namespace metaroce::detail {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  // Uniform in [0, n), n > 0.
  uint64_t below(uint64_t n) { return next() % n; }
  // The seed of an Rng whose first next() returns `out`: splitmix64's mix is
  // a bijection (xor-shifts and odd multipliers), so it can be run backwards.
  static uint64_t seed_for_first(uint64_t out) {
    uint64_t z = unshift(out, 31) * inverse(0x94D049BB133111EBull);
    z = unshift(z, 27) * inverse(0xBF58476D1CE4E5B9ull);
    return unshift(z, 30) - 0x9E3779B97F4A7C15ull;
  }

 private:
  // x with x ^= x >> k undone.
  static uint64_t unshift(uint64_t x, unsigned k) {
    uint64_t y = x;
    for (unsigned done = k; done < 64; done += k) y = x ^ (y >> k);
    return y;
  }
  // The inverse of an odd multiplier modulo 2^64 (Newton: each step doubles
  // the correct low bits, 3 -> 96).
  static uint64_t inverse(uint64_t m) {
    uint64_t v = m;
    for (int i = 0; i < 5; ++i) v *= 2 - m * v;
    return v;
  }

  uint64_t state_;
};

}  // namespace metaroce::detail
