// metaroce::Ring, behind the engine's ready list and its completion, event
// and orphan queues and the simulator's links and queues: order survives
// growth while the ring is wrapped, rotate() keeps a lone entry where it
// is, and retain() keeps the others' order.
#include "metaroce/ring.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace metaroce {
namespace {

struct Item {
  uint64_t id = 0;
  uint32_t tag = 0;
};

TEST(Ring, KeepsOrderAcrossWrapAndGrowth) {
  Ring<Item> q;
  uint64_t next_in = 0, next_out = 0;
  // Wrap the initial 64 slots several times, then grow to 1,024 while the
  // head sits mid-ring, then drain: every item comes out once, in order.
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 3; ++i)
      q.push(Item{next_in, static_cast<uint32_t>(next_in * 7)}), ++next_in;
    for (int i = 0; i < 2; ++i) {
      const Item it = q.pop();
      EXPECT_EQ(it.id, next_out);
      EXPECT_EQ(it.tag, static_cast<uint32_t>(next_out * 7));
      ++next_out;
    }
  }
  for (int i = 0; i < 800; ++i)
    q.push(Item{next_in, static_cast<uint32_t>(next_in * 7)}), ++next_in;
  EXPECT_EQ(q.size(), next_in - next_out);
  for (size_t i = 0; i < q.size(); i += 97) EXPECT_EQ(q[i].id, next_out + i);
  while (!q.empty()) {
    EXPECT_EQ(q.front().id, next_out);
    EXPECT_EQ(q.pop().id, next_out);
    ++next_out;
  }
  EXPECT_EQ(next_out, next_in);
}

TEST(Ring, RotateMovesTheFrontBehindTheOthers) {
  Ring<uint32_t> q;
  q.push(5);
  q.rotate();  // alone: stays
  EXPECT_EQ(q.front(), 5u);
  q.push(6);
  q.push(7);
  q.rotate();
  EXPECT_EQ(q.pop(), 6u);
  EXPECT_EQ(q.pop(), 7u);
  EXPECT_EQ(q.pop(), 5u);
  EXPECT_TRUE(q.empty());
  q.push(1);
  q.clear();
  EXPECT_TRUE(q.empty());
}

// retain() drops many entries in one pass (the engine's stale ready
// entries), the rest keeping their order, with the ring wrapped.
TEST(Ring, RetainKeepsTheOthersInOrder) {
  Ring<uint32_t> q;
  for (uint32_t i = 0; i < 10; ++i) q.push(i);
  for (uint32_t i = 0; i < 10; ++i) (void)q.pop();  // the head mid-ring: what follows wraps
  for (uint32_t i = 0; i < 12; ++i) q.push(i);
  std::vector<uint32_t> seen;
  q.retain([&](uint32_t v) {
    seen.push_back(v);
    return v % 3 != 0;
  });
  EXPECT_EQ(seen, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  ASSERT_EQ(q.size(), 8u);
  for (const uint32_t want : {1u, 2u, 4u, 5u, 7u, 8u, 10u, 11u}) EXPECT_EQ(q.pop(), want);
  q.push(20);
  q.retain([](uint32_t) { return false; });
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace metaroce
