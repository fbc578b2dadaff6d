#pragma once
// One switch's ECMP groups, each stored once: the id of a group is where its
// ports start in the switch's pool of ports and how many there are,
// (offset << 8) | size, as Switch::route holds it. A group seen before gets
// its first id back; a new one is appended to the pool. Groups are compared
// as sequences: the same ports in another order are another group.
#include <cstdint>
#include <span>
#include <vector>

namespace metaroce::sim {

class GroupInterner {
 public:
  // The id of `group` (1..255 ports) in `pool`, which must be the pool every
  // earlier call for this interner was given, and must not hold `group` (an
  // append may move it); throws std::invalid_argument for an empty group,
  // one over 255 ports, or a new group that would start past
  // kMaxPoolOffset (the pool unchanged).
  uint32_t intern(std::span<const uint16_t> group, std::vector<uint16_t>& pool);

  // The largest offset 24 bits of an id hold.
  static constexpr size_t kMaxPoolOffset = (size_t{1} << 24) - 1;

 private:
  void grow(const std::vector<uint16_t>& pool);

  // Open addressing, linear probing; a slot holds an id, or 0 when empty (an
  // id is never 0: a group has at least one port). The ports live only in
  // the pool: a tree map keyed by a copy of them compared vectors a dozen
  // times a lookup, and a 4,096-leaf fabric looks up 16.8 M times.
  std::vector<uint32_t> slots_;
  uint32_t used_ = 0;
};

}  // namespace metaroce::sim
