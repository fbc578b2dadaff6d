// GroupInterner: a switch's ECMP groups, each stored once, their ids those a
// map from the group's ports gives in the order the groups are first seen.
#include "metaroce/sim/group_interner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "metaroce/sim/rng.hpp"

namespace metaroce::sim {
namespace {

uint32_t id_at(size_t offset, size_t size) { return static_cast<uint32_t>((offset << 8) | size); }

// The same ports in another order, a prefix, an extension: other groups,
// as a tree map keyed by the vector of ports told them apart.
TEST(GroupInterner, OrderAndLengthMakeGroupsDistinct) {
  GroupInterner groups;
  std::vector<uint16_t> pool;
  const std::vector<std::vector<uint16_t>> g = {{1, 2}, {2, 1}, {1}, {1, 2, 3}, {1, 3, 2}, {2}};
  std::vector<uint32_t> ids;
  size_t offset = 0;
  for (const auto& ports : g) {
    ids.push_back(groups.intern(ports, pool));
    EXPECT_EQ(ids.back(), id_at(offset, ports.size()));
    offset += ports.size();
  }
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(groups.intern(g[i], pool), ids[i]) << i;
  EXPECT_EQ(pool, (std::vector<uint16_t>{1, 2, 2, 1, 1, 1, 2, 3, 1, 3, 2, 2}));
}

// Every order of five ports: 120 groups, 120 ids, each given back again.
TEST(GroupInterner, EveryPermutationIsAGroupOfItsOwn) {
  GroupInterner groups;
  std::vector<uint16_t> pool;
  std::vector<uint16_t> g = {1, 2, 3, 4, 5};
  std::map<std::vector<uint16_t>, uint32_t> ids;
  do {
    const uint32_t id = groups.intern(g, pool);
    EXPECT_EQ(id, id_at(5 * ids.size(), 5));
    ids.emplace(g, id);
  } while (std::next_permutation(g.begin(), g.end()));
  ASSERT_EQ(ids.size(), 120u);
  for (const auto& [ports, id] : ids) EXPECT_EQ(groups.intern(ports, pool), id);
  EXPECT_EQ(pool.size(), 600u);
}

// Thousands of groups (the table grows many times), many seen again: each
// keeps the id it was first given, and only new groups reach the pool.
TEST(GroupInterner, ManyGroupsKeepTheirFirstIds) {
  constexpr uint64_t kSeed = 50;
  std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  Rng rng(kSeed);
  GroupInterner groups;
  std::vector<uint16_t> pool, want_pool;
  std::map<std::vector<uint16_t>, uint32_t> want;
  for (int i = 0; i < 20'000; ++i) {
    // Few ports from few values: repeats and permutations are common.
    std::vector<uint16_t> g(rng.range(1, 4));
    for (uint16_t& p : g) p = static_cast<uint16_t>(rng.below(12));
    const auto [it, added] = want.try_emplace(g, id_at(want_pool.size(), g.size()));
    if (added) want_pool.insert(want_pool.end(), g.begin(), g.end());
    ASSERT_EQ(groups.intern(g, pool), it->second) << "call " << i;
  }
  EXPECT_GT(want.size(), 5'000u);
  EXPECT_EQ(pool, want_pool);
}

// A route entry holds a group's size in 8 bits.
TEST(GroupInterner, RefusesAnEmptyGroupAndOneOver255Ports) {
  GroupInterner groups;
  std::vector<uint16_t> pool;
  EXPECT_THROW((void)groups.intern(std::vector<uint16_t>{}, pool), std::invalid_argument);
  EXPECT_THROW((void)groups.intern(std::vector<uint16_t>(256, 1), pool), std::invalid_argument);
  EXPECT_EQ(groups.intern(std::vector<uint16_t>(255, 1), pool), id_at(0, 255));
  EXPECT_EQ(pool.size(), 255u);
}

// A route entry holds where a group starts in 24 bits: a group past them
// wrapped into an id of the pool's first ports (the 2^24th port's group of
// one came back as group 0's id) and misrouted silently. Refused now,
// naming the limit, with the pool as it was. A pool filled up front stands
// in for the millions of groups that would reach it.
TEST(GroupInterner, RefusesAGroupStartingPastTwentyFourBits) {
  GroupInterner groups;
  std::vector<uint16_t> pool;
  pool.reserve(GroupInterner::kMaxPoolOffset + 2);
  pool.resize(GroupInterner::kMaxPoolOffset - 1);
  const std::vector<uint16_t> a = {1}, b = {2}, c = {3};
  EXPECT_EQ(groups.intern(a, pool), id_at(GroupInterner::kMaxPoolOffset - 1, 1));
  EXPECT_EQ(groups.intern(b, pool), id_at(GroupInterner::kMaxPoolOffset, 1));  // the last
  try {
    (void)groups.intern(c, pool);
    ADD_FAILURE() << "a group starting at 2^24 was given an id";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("24 bits"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.size(), GroupInterner::kMaxPoolOffset + 1);
  // Groups already held still have their ids.
  EXPECT_EQ(groups.intern(a, pool), id_at(GroupInterner::kMaxPoolOffset - 1, 1));
  EXPECT_EQ(groups.intern(b, pool), id_at(GroupInterner::kMaxPoolOffset, 1));
}

}  // namespace
}  // namespace metaroce::sim
