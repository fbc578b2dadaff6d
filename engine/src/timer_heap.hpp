// Indexed binary min-heap of connection deadlines: next_timeout() is O(1),
// an update O(log n), and the heap never grows past the connection count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "metaroce/types.hpp"

namespace metaroce::detail {

class TimerHeap {
 public:
  static constexpr uint32_t kAbsent = UINT32_MAX;

  // Sets (or clears, with never()) the deadline of item `id`; pos is the
  // item's stored heap position, kept up to date by the heap.
  void set(uint32_t id, TimeNs when, std::vector<uint32_t>& pos) {
    if (when == TimeNs::never()) {
      remove(id, pos);
      return;
    }
    if (pos[id] == kAbsent) {
      pos[id] = static_cast<uint32_t>(heap_.size());
      heap_.push_back({when, id});
      up(pos[id], pos);
      return;
    }
    const uint32_t i = pos[id];
    const TimeNs old = heap_[i].when;
    heap_[i].when = when;
    if (when < old)
      up(i, pos);
    else
      down(i, pos);
  }
  void remove(uint32_t id, std::vector<uint32_t>& pos) {
    const uint32_t i = pos[id];
    if (i == kAbsent) return;
    pos[id] = kAbsent;
    const Entry last = heap_.back();
    heap_.pop_back();
    if (i == heap_.size()) return;
    heap_[i] = last;
    pos[last.id] = i;
    up(i, pos);
    down(pos[last.id], pos);
  }
  // Room for n deadlines: set() then allocates nothing while n items have one.
  void reserve(size_t n) { heap_.reserve(n); }
  [[nodiscard]] bool empty() const { return heap_.empty(); }
  [[nodiscard]] TimeNs top_time() const { return heap_.empty() ? TimeNs::never() : heap_[0].when; }
  [[nodiscard]] uint32_t top_id() const { return heap_[0].id; }

 private:
  struct Entry {
    TimeNs when;
    uint32_t id;
  };
  void up(uint32_t i, std::vector<uint32_t>& pos) {
    while (i > 0) {
      const uint32_t parent = (i - 1) / 2;
      if (!(heap_[i].when < heap_[parent].when)) break;
      swap(i, parent, pos);
      i = parent;
    }
  }
  void down(uint32_t i, std::vector<uint32_t>& pos) {
    const auto n = static_cast<uint32_t>(heap_.size());
    for (;;) {
      uint32_t best = i;
      const uint32_t l = 2 * i + 1, r = l + 1;
      if (l < n && heap_[l].when < heap_[best].when) best = l;
      if (r < n && heap_[r].when < heap_[best].when) best = r;
      if (best == i) return;
      swap(i, best, pos);
      i = best;
    }
  }
  void swap(uint32_t a, uint32_t b, std::vector<uint32_t>& pos) {
    const Entry t = heap_[a];
    heap_[a] = heap_[b];
    heap_[b] = t;
    pos[heap_[a].id] = a;
    pos[heap_[b].id] = b;
  }
  std::vector<Entry> heap_;
};

}  // namespace metaroce::detail
