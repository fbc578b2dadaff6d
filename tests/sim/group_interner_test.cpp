// GroupInterner: a switch's ECMP groups, each stored once, their ids those a
// map from the group's ports gives in the order the groups are first seen.
#include "metaroce/sim/group_interner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>
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

}  // namespace
}  // namespace metaroce::sim
