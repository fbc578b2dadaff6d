// Deterministic pseudo-random numbers for the harness and the property tests
// (the generators themselves: metaroce/rng.hpp).
#pragma once

#include <cstdint>

#include "metaroce/rng.hpp"

namespace metaroce::harness {

// A splitmix64 stream, used to derive independent seeds.
class SplitMix64 {
 public:
  explicit constexpr SplitMix64(uint64_t seed) : s_(seed) {}
  constexpr uint64_t next() { return splitmix64(s_); }

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

class Rng : public Xoshiro256 {
 public:
  using Xoshiro256::Xoshiro256;
  // True with probability p. No draw when p <= 0, but one even when p >= 1:
  // a seed names a property-test run, and skipping that draw would change
  // every later one.
  bool chance(double p) { return p > 0.0 && uniform() < p; }
};

}  // namespace metaroce::harness
