#include "metaroce/sim/group_interner.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace metaroce::sim {
namespace {

uint64_t hash_ports(std::span<const uint16_t> g) {
  uint64_t h = 0x9e3779b97f4a7c15ULL ^ g.size();
  for (const uint16_t p : g) h = (h ^ p) * 0xff51afd7ed558ccdULL;
  return h ^ (h >> 29);
}

std::span<const uint16_t> ports_of(uint32_t id, const std::vector<uint16_t>& pool) {
  return {pool.data() + (id >> 8), id & 0xff};
}

// Groups are a few ports: a loop, where std::equal called memcmp, and the
// calls were about a fifth of a 4,096-leaf fabric's route build.
bool same(std::span<const uint16_t> a, std::span<const uint16_t> b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

uint32_t GroupInterner::intern(std::span<const uint16_t> group, std::vector<uint16_t>& pool) {
  if (group.empty() || group.size() > 255)
    throw std::invalid_argument("ECMP group of " + std::to_string(group.size()) +
                                " ports: 1..255 fit a route entry");
  if (2 * (used_ + 1) > slots_.size()) grow(pool);
  const size_t mask = slots_.size() - 1;
  size_t i = hash_ports(group) & mask;
  for (; slots_[i] != 0; i = (i + 1) & mask) {
    if (same(ports_of(slots_[i], pool), group)) return slots_[i];
  }
  // A route entry keeps 24 bits for the offset: one past them wrapped into
  // another group's ports, silently misrouting.
  if (pool.size() > kMaxPoolOffset)
    throw std::invalid_argument("ECMP groups of " + std::to_string(pool.size() + group.size()) +
                                " ports in all: a route entry keeps 24 bits for where a group "
                                "starts, at most " +
                                std::to_string(kMaxPoolOffset));
  const auto id = static_cast<uint32_t>((pool.size() << 8) | group.size());
  pool.insert(pool.end(), group.begin(), group.end());
  slots_[i] = id;
  ++used_;
  return id;
}

void GroupInterner::grow(const std::vector<uint16_t>& pool) {
  std::vector<uint32_t> old = std::move(slots_);
  slots_.assign(std::max<size_t>(16, 2 * old.size()), 0);
  const size_t mask = slots_.size() - 1;
  for (const uint32_t id : old) {
    if (id == 0) continue;
    size_t i = hash_ports(ports_of(id, pool)) & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = id;
  }
}

}  // namespace metaroce::sim
