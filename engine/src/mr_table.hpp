// Registered memory regions: lkey -> region by index, rkey -> region by an
// open-addressing hash (the receive hot path does one probe sequence).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "metaroce/engine.hpp"

namespace metaroce::detail {

class MrTable {
 public:
  struct Region {
    uint8_t* bytes = nullptr;  // where the region lies in this process
    uint64_t base = 0;         // the address that names its first byte (MR-4)
    uint64_t length = 0;
    uint64_t rkey = 0;
    uint32_t access = 0;
    uint32_t lkey = 0;  // 0 once deregistered
  };

  // An lkey is the region's slot (index + 1) in its low kIndexBits and the
  // slot's generation above. A deregistered region's slot is reused with the
  // next generation; one whose generations are spent is retired, and starts
  // over at generation 0 (its lkeys given again) only once no work the
  // endpoint holds names any lkey of it: work posted with an lkey whose
  // region went must never find it valid again (MR-5), for it holds a
  // pointer into the old region. Each slot counts the work that names one of
  // its lkeys (hold, release), so that a retired slot starts over when its
  // last such work ends, with no scan of the work held (MR-6). Nothing else
  // needs lkeys unique over time: they never go on the wire, where the rkey,
  // drawn afresh, names a region (MR-1). At most kIndexMask regions at once;
  // registrations in all, no limit.
  static constexpr uint32_t kIndexBits = 22;
  static constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
  static constexpr uint32_t kGenerations = 1u << (32 - kIndexBits);
  // The slot an lkey names; lkey 0 gives one past any table.
  [[nodiscard]] static constexpr uint32_t index_of(uint32_t lkey) {
    return (lkey & kIndexMask) - 1;
  }

  // The region's bytes at `addr` are named base..base+length-1 (MR-4).
  [[nodiscard]] Status add(void* addr, size_t length, uint64_t base, uint32_t access, uint64_t rkey,
                           MemoryRegion& out);
  [[nodiscard]] Status remove(uint32_t lkey);

  // Local buffer check for a work request: the range must lie in region lkey,
  // which must have `need` access bits. Returns the byte pointer or nullptr.
  [[nodiscard]] uint8_t* local(uint32_t lkey, uint64_t addr, uint64_t len, uint32_t need,
                               Status& why) const;
  [[nodiscard]] bool lkey_valid(uint32_t lkey) const {
    const uint32_t index = index_of(lkey);
    return index < regions_.size() && regions_[index].lkey == lkey;
  }
  // Whether an lkey that was valid once may no longer be: no key held by
  // posted work is given again (hold), so only a remove() ends one. Asked
  // before lkey_valid for every packet of a posted request, whose lkey was
  // checked when it was posted.
  [[nodiscard]] bool any_removed() const { return any_removed_; }

  // Remote access check (PLACE-2, READ-2): the whole range [addr, addr+len)
  // must lie inside the region named by rkey, which must grant `need` (some
  // access bit: never 0).
  [[nodiscard]] uint8_t* remote(uint64_t rkey, uint64_t addr, uint64_t len, uint32_t need,
                                Status& why) const {
    // Every packet of a message asks about the same range (the message's),
    // so the last range granted is remembered with its answer: the checks
    // below then run once per message, not once per packet.
    if (rkey == granted_.rkey && addr == granted_.addr && len == granted_.len &&
        need == granted_.need)
      return granted_.ptr;
    // Consecutive packets almost always name the same region (a message
    // spans many): remember the last rkey found and skip the hash probe.
    const uint32_t index = rkey == last_rkey_ && last_index_ != kNone ? last_index_ : lookup(rkey);
    if (index == kNone) {
      why = Status::kRemoteBadKey;
      return nullptr;
    }
    const Region& r = regions_[index];
    if ((r.access & need) != need) {
      why = Status::kRemoteAccessDenied;
      return nullptr;
    }
    if (!range_inside(r.base, r.length, addr, len)) {
      why = Status::kRemoteOutOfBounds;
      return nullptr;
    }
    granted_ = Granted{rkey, addr, len, r.bytes + (addr - r.base), need};
    return granted_.ptr;
  }

  // The number of slots: index_of(lkey) below it for every lkey given.
  [[nodiscard]] size_t slots() const { return regions_.size(); }
  // Work that names lkey is posted (a send, a receive, a shared one) or
  // queued (a READ answered), and ends (hold's value released, once): while
  // it lasts, no lkey of its slot is given again. Returns the lkey to keep:
  // 0 where lkey names no slot yet (an empty request's, never checked), so
  // that its release cannot count against a slot the table takes meanwhile.
  // Per message, not per packet; neither allocates.
  [[nodiscard]] uint32_t hold(uint32_t lkey) {
    if ((lkey & kIndexMask) >= holds_.size()) lkey = 0;
    ++holds_[lkey & kIndexMask];
    return lkey;
  }
  void release(uint32_t lkey) {
    if (--holds_[lkey & kIndexMask] == kRetired) [[unlikely]]
      restart(index_of(lkey));
  }

  [[nodiscard]] bool rkey_in_use(uint64_t rkey) const { return find_slot(rkey) != kNone; }
  // The lkey of the region rkey names; 0 if none does.
  [[nodiscard]] uint32_t lkey_of(uint64_t rkey) const;
  // Whether work posted with lkey may still touch its buffer: a request of
  // nonzero length whose region was deregistered since it was posted (its
  // lkey checked then) may not, so that no byte of memory the application
  // took back is read or written (MR-5).
  [[nodiscard]] bool still_registered(uint32_t lkey, uint64_t length) const {
    return !any_removed_ || length == 0 || lkey_valid(lkey);
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr uint16_t kRestart = UINT16_MAX;  // + 1, masked, is 0
  static constexpr uint32_t kTombstone = UINT32_MAX - 1;
  // In a slot's hold count: its generations are spent, and it starts over
  // once the work that names it ends (the count below this bit 0).
  // 64-bit counts, so that no amount of held work reaches this bit: with
  // 32, 2^31 queue entries naming one slot (the depths allow it) would have
  // read as retired with nothing held, and restarted the slot (MR-5).
  static constexpr uint64_t kRetired = uint64_t{1} << 63;
  static bool range_inside(uint64_t base, uint64_t length, uint64_t addr, uint64_t len) {
    // Written to avoid overflow: addr >= base and addr - base + len <= length.
    return addr >= base && addr - base <= length && len <= length - (addr - base);
  }
  [[nodiscard]] uint32_t find_slot(uint64_t rkey) const;
  // Region index for rkey (kNone if unknown), remembered for the next call.
  [[nodiscard]] uint32_t lookup(uint64_t rkey) const;
  void rehash(size_t capacity);
  // A retired slot that no work names goes back to the free list, to start
  // over at generation 0.
  void restart(uint32_t index);

  std::vector<Region> regions_;  // by slot: lkey & kIndexMask is index + 1
  struct Slot {
    uint64_t rkey = 0;
    uint32_t index = kNone;
  };
  std::vector<Slot> hash_;  // power-of-two size, load <= 1/2
  size_t hash_used_ = 0;
  bool any_removed_ = false;
  // The last range remote() granted; need 0 (never asked for) while none is.
  struct Granted {
    uint64_t rkey = 0, addr = 0, len = 0;
    uint8_t* ptr = nullptr;
    uint32_t need = 0;
  };
  mutable Granted granted_;
  mutable uint64_t last_rkey_ = 0;
  mutable uint32_t last_index_ = kNone;  // region of last_rkey_; kNone after a remove
  std::vector<uint32_t> free_;           // slots of deregistered regions, to reuse
  // By slot: of its latest lkey; kRestart once restarted, add() taking 0.
  std::vector<uint16_t> generations_;
  // By slot + 1 (an lkey's low bits): the work held that names one of its
  // lkeys, kRetired added while the slot is retired. [0] counts the work
  // that names no slot (lkey 0), so that release() needs no range check.
  std::vector<uint64_t> holds_ = std::vector<uint64_t>(1);
  size_t live_ = 0;  // regions registered now
};

}  // namespace metaroce::detail
