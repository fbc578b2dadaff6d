// PATH-8's verdict on a move (engine/src/move_verdict.hpp): the rates of
// the windows before and after, compared without overflow over the whole
// range config_error accepts for cc.explore_interval_ns (up to a day).
#include "move_verdict.hpp"

#include <gtest/gtest.h>

#include <cstdint>

namespace metaroce::test {
namespace {

using detail::judge_move;
using detail::MoveVerdict;

TEST(MoveVerdict, TellsWorseBetterAndNeitherAtTheSixteenthsBounds) {  // PATH-8
  // 1,600 packets in 1 ms before; after, in 1 ms too:
  EXPECT_EQ(judge_move(1600, 1'000'000, 1600, 1'000'000), MoveVerdict::kNeither);
  EXPECT_EQ(judge_move(1600, 1'000'000, 1500, 1'000'000), MoveVerdict::kNeither);  // 15/16
  EXPECT_EQ(judge_move(1600, 1'000'000, 1499, 1'000'000), MoveVerdict::kWorse);
  EXPECT_EQ(judge_move(1600, 1'000'000, 1700, 1'000'000), MoveVerdict::kNeither);  // 17/16
  EXPECT_EQ(judge_move(1600, 1'000'000, 1701, 1'000'000), MoveVerdict::kBetter);
  // A rate, not a count: twice the packets in twice the time is no change.
  EXPECT_EQ(judge_move(1600, 1'000'000, 3200, 2'000'000), MoveVerdict::kNeither);
  EXPECT_EQ(judge_move(1600, 1'000'000, 1600, 2'000'000), MoveVerdict::kWorse);
}

// A window is judged after a quarter of explore_interval_ns of busy time:
// with an interval of 80 s, 20 s windows of 4 KiB packets at 100 Gbit/s
// (3e6 a second). acked x ns x 16 is about 1.9e19 there, past 2^64; in 64
// bits the equal rates came out worse or better at random.
TEST(MoveVerdict, LongWindowsAtHighRatesDoNotOverflow) {  // PATH-8
  constexpr uint64_t kNs = 20'000'000'000;                // 20 s
  constexpr uint64_t kAcked = 60'000'000;                 // 3e6 a second
  EXPECT_EQ(judge_move(kAcked, kNs, kAcked, kNs), MoveVerdict::kNeither);
  EXPECT_EQ(judge_move(kAcked, kNs, kAcked / 2, kNs), MoveVerdict::kWorse);
  EXPECT_EQ(judge_move(kAcked, kNs, kAcked * 2, kNs), MoveVerdict::kBetter);
  // The limits of the range: a day's interval, backed off 64 times before
  // the move (the window before lasts until the next try), at one packet a
  // nanosecond.
  constexpr uint64_t kDays64 = 64ull * 86'400 * 1'000'000'000;
  EXPECT_EQ(judge_move(kDays64, kDays64, kDays64 / 4, kDays64 / 4), MoveVerdict::kNeither);
  EXPECT_EQ(judge_move(kDays64, kDays64, kDays64 / 8, kDays64 / 4), MoveVerdict::kWorse);
}

}  // namespace
}  // namespace metaroce::test
