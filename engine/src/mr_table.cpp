#include "mr_table.hpp"

#include <algorithm>
#include <bit>
#include <new>

namespace metaroce {
const char* region_problem(const void* addr, size_t length, uint64_t base,
                           uint32_t access) noexcept {
  if (addr == nullptr) return "addr is null";
  if (length == 0) return "length is 0";
  if ((access & ~kAccessKnown) != 0) return "access has bits outside kAccessKnown";
  // MR-4: the last byte's address, base + length - 1, must not wrap; nor,
  // where base is not the address, the last byte's pointer, which every
  // access computes from addr.
  if (length - 1 > UINT64_MAX - base)
    return "base + length - 1, its last byte's address, passes 2^64";
  if (length - 1 > UINTPTR_MAX - reinterpret_cast<uintptr_t>(addr))
    return "addr + length - 1, its last byte's pointer, wraps past the address space";
  return nullptr;
}
}  // namespace metaroce

namespace metaroce::detail {
namespace {
uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}
}  // namespace

Status MrTable::add(void* addr, size_t length, uint64_t base, uint32_t access, uint64_t rkey,
                    MemoryRegion& out) {
  if (region_problem(addr, length, base, access) != nullptr || rkey == 0)
    return Status::kInvalidArgument;
  // Every allocation first, nothing changed unless all succeed: short of
  // memory, a registration is kResourceExhausted, not std::bad_alloc. free_
  // has room for every slot, so that remove() and restart() never allocate.
  try {
    const size_t need = regions_.size() + 1;
    const auto room = [need](auto& v) {
      if (v.capacity() < need) v.reserve(std::max<size_t>({16, v.capacity() * 2, need}));
    };
    room(regions_);
    room(generations_);
    room(free_);
    if (holds_.capacity() < need + 1) holds_.reserve(std::max(holds_.capacity() * 2, need + 1));
    // Tombstones count as used: sized by the regions registered now, the
    // table stays small however many came and went (doubling it every time
    // they filled half of it grew it by two slots per registration).
    if ((hash_used_ + 1) * 2 > hash_.size())
      rehash(std::max<size_t>(64, std::bit_ceil((live_ + 1) * 4)));
  } catch (const std::bad_alloc&) {
    return Status::kResourceExhausted;
  }
  uint32_t index;
  uint32_t generation = 0;
  if (!free_.empty()) {
    index = free_.back();
    free_.pop_back();
    generation = (generations_[index] + 1u) & (kGenerations - 1);
    generations_[index] = static_cast<uint16_t>(generation);
  } else if (regions_.size() < kIndexMask) {
    index = static_cast<uint32_t>(regions_.size());
    regions_.emplace_back();
    generations_.push_back(0);
    holds_.push_back(0);
  } else {
    return Status::kResourceExhausted;
  }
  const uint32_t lkey = (generation << kIndexBits) | (index + 1);
  regions_[index] = Region{static_cast<uint8_t*>(addr), base, length, rkey, access, lkey};
  ++live_;
  const size_t mask = hash_.size() - 1;
  for (size_t i = mix(rkey) & mask;; i = (i + 1) & mask) {
    if (hash_[i].index == kNone || hash_[i].index == kTombstone) {
      if (hash_[i].index == kNone) ++hash_used_;
      hash_[i] = Slot{rkey, index};
      break;
    }
  }
  out = MemoryRegion{lkey, rkey, base, length, access};
  return Status::kOk;
}

Status MrTable::remove(uint32_t lkey) {
  if (!lkey_valid(lkey)) return Status::kInvalidArgument;
  const uint32_t index = index_of(lkey);
  Region& r = regions_[index];
  const uint32_t slot = find_slot(r.rkey);
  if (slot != kNone) hash_[slot].index = kTombstone;
  r.lkey = 0;
  --live_;
  // The slot's last generation: retired until no held work names it, rather
  // than give such work's lkey to another region.
  if (generations_[index] + 1u < kGenerations)
    free_.push_back(index);
  else if (holds_[index + 1] == 0)
    restart(index);
  else
    holds_[index + 1] |= kRetired;
  any_removed_ = true;
  last_index_ = kNone;
  granted_ = Granted{};
  return Status::kOk;
}

void MrTable::restart(uint32_t index) {
  holds_[index + 1] = 0;
  generations_[index] = kRestart;
  free_.push_back(index);  // room for every slot: no allocation
}

uint32_t MrTable::find_slot(uint64_t rkey) const {
  if (hash_.empty()) return kNone;
  const size_t mask = hash_.size() - 1;
  for (size_t i = mix(rkey) & mask;; i = (i + 1) & mask) {
    const Slot& s = hash_[i];
    if (s.index == kNone) return kNone;
    if (s.index != kTombstone && s.rkey == rkey) return static_cast<uint32_t>(i);
  }
}

void MrTable::rehash(size_t capacity) {
  std::vector<Slot> fresh(capacity, Slot{});  // first: thrown, the table is as it was
  size_t used = 0;
  const size_t mask = capacity - 1;
  for (const Slot& s : hash_) {
    if (s.index == kNone || s.index == kTombstone) continue;
    for (size_t i = mix(s.rkey) & mask;; i = (i + 1) & mask) {
      if (fresh[i].index == kNone) {
        fresh[i] = s;
        ++used;
        break;
      }
    }
  }
  hash_ = std::move(fresh);
  hash_used_ = used;
}

uint8_t* MrTable::local(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need,
                        Status& why) const {
  if (!lkey_valid(lkey)) {
    why = Status::kLocalProtection;
    return nullptr;
  }
  const Region& r = regions_[index_of(lkey)];
  if ((r.access & need) != need || !range_inside(r.base, r.length, addr, len)) {
    why = Status::kLocalProtection;
    return nullptr;
  }
  return r.bytes + (addr - r.base);
}

uint32_t MrTable::lkey_of(uint64_t rkey) const {
  const uint32_t index = lookup(rkey);
  return index == kNone ? 0 : regions_[index].lkey;
}

uint32_t MrTable::lookup(uint64_t rkey) const {
  const uint32_t slot = find_slot(rkey);
  if (slot == kNone) return kNone;
  last_rkey_ = rkey;
  last_index_ = hash_[slot].index;
  return last_index_;
}

}  // namespace metaroce::detail
