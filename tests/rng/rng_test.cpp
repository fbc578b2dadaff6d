// include/metaroce/rng.hpp names every harness run and simulator digest by
// its seed, and no other test pins its sequences: the simulator's tests
// compare digests with each other, not with fixed values. These do, from
// the published reference outputs (splitmix64.c, xoshiro256starstar.c).
#include "metaroce/harness/rng.hpp"

#include <gtest/gtest.h>

#include <cstdint>

#include "metaroce/rng.hpp"
#include "metaroce/sim/rng.hpp"
#include "rng.hpp"  // engine/src: the engine's own

namespace {

constexpr uint64_t first_splitmix(uint64_t state) { return metaroce::splitmix64(state); }

// splitmix64 from state 0 (Vigna's splitmix64.c).
static_assert(first_splitmix(0) == 0xE220A8397B1DCDAFull);

constexpr uint64_t third_xoshiro(uint64_t seed) {
  metaroce::Xoshiro256 r(seed);
  (void)r.next();
  (void)r.next();
  return r.next();
}

TEST(Rng, SplitMix64GivesTheReferenceSequence) {
  uint64_t s = 0;
  EXPECT_EQ(metaroce::splitmix64(s), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(metaroce::splitmix64(s), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(metaroce::splitmix64(s), 0x06C45D188009454Full);
}

// xoshiro256** 1.0, its state the first four splitmix64 words of seed 1.
TEST(Rng, Xoshiro256GivesTheReferenceSequence) {
  metaroce::Xoshiro256 r(1);
  EXPECT_EQ(r.next(), 0xB3F2AF6D0FC710C5ull);
  EXPECT_EQ(r.next(), 0x853B559647364CEAull);
  EXPECT_EQ(r.next(), 0x92F89756082A4514ull);
  static_assert(third_xoshiro(1) == 0x92F89756082A4514ull);
}

// The harness's and the simulator's streams are that generator; the
// engine's draws are splitmix64 itself.
TEST(Rng, HarnessSimulatorAndEngineDrawTheSharedSequences) {
  metaroce::harness::Rng h(1);
  metaroce::sim::Rng s(1);
  EXPECT_EQ(h.next(), 0xB3F2AF6D0FC710C5ull);
  EXPECT_EQ(s.next(), 0xB3F2AF6D0FC710C5ull);
  metaroce::detail::Rng e(0);
  EXPECT_EQ(e.next(), 0xE220A8397B1DCDAFull);
}

// The engine inverts splitmix64 with its constants written out again: a
// change to them in metaroce/rng.hpp alone would break the inverse.
TEST(Rng, EnginesSeedForFirstInvertsTheSharedSplitMix64) {
  for (const uint64_t out : {0ull, 1ull, 0xE220A8397B1DCDAFull, 0xDEADBEEFCAFEF00Dull, ~0ull}) {
    metaroce::detail::Rng e(metaroce::detail::Rng::seed_for_first(out));
    EXPECT_EQ(e.next(), out) << std::hex << out;
  }
}

// A certain outcome (p >= 1): the harness still draws, the simulator does
// not. Each one's streams, and so its named runs, depend on its choice.
TEST(Rng, ACertainChanceDrawsInTheHarnessOnly) {
  metaroce::harness::Rng h(7), h_ref(7);
  metaroce::sim::Rng s(7), s_ref(7);
  EXPECT_TRUE(h.chance(1.0));
  EXPECT_TRUE(s.chance(1.0));
  (void)h_ref.next();
  EXPECT_EQ(h.next(), h_ref.next());
  EXPECT_EQ(s.next(), s_ref.next());
  EXPECT_FALSE(h.chance(0.0));
  EXPECT_FALSE(s.chance(0.0));
  EXPECT_EQ(h.next(), h_ref.next());
  EXPECT_EQ(s.next(), s_ref.next());
}

}  // namespace
