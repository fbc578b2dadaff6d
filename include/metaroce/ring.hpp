// metaroce::Ring, a FIFO in a power-of-two ring, shared by the engine (its
// round-robin of connections with something to send, and its queues of
// completions, events and orphan replies) and the simulator (links' packets
// in flight, ports' queues). Not part of the endpoint API.
//
// A push is a store and an increment, with no out-of-line growth check on the
// per-packet path; the ring grows by doubling, only while the queue is longer
// than it has ever been, and never shrinks, so a queue in steady use
// allocates nothing (a std::deque allocates a node every few pushes and frees
// one every few pops). It starts empty: a simulation holds thousands of
// endpoints, most of which never queue an orphan reply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace metaroce {

template <typename T>
class Ring {
 public:
  [[nodiscard]] bool empty() const { return head_ == tail_; }
  [[nodiscard]] size_t size() const { return tail_ - head_; }
  [[nodiscard]] size_t capacity() const { return buf_.size(); }
  // front(), pop() and operator[] need a non-empty ring (i < size()).
  [[nodiscard]] T& front() { return buf_[head_ & mask_]; }
  [[nodiscard]] const T& front() const { return buf_[head_ & mask_]; }
  [[nodiscard]] const T& operator[](size_t i) const { return buf_[(head_ + i) & mask_]; }
  T pop() { return buf_[head_++ & mask_]; }
  void push(const T& v) {
    // Full when the size is the capacity, mask_ + 1 (0 before the first
    // push): one load, where the vector's size is two and a shift.
    if (tail_ - head_ == mask_ + 1) [[unlikely]]
      grow();
    buf_[tail_++ & mask_] = v;
  }
  // Moves the front to the back: pop() then push() of the same value, with
  // nothing to do when it is the only one (a single busy connection, polled
  // for every packet it sends).
  void rotate() {
    if (size() > 1) buf_[tail_++ & mask_] = buf_[head_++ & mask_];
  }
  void clear() { head_ = tail_ = 0; }
  // Keeps, in their order, the entries for which keep(entry) is true and
  // drops the rest, in one pass: linear in size(), for many removals at
  // once. keep sees each entry once, front to back.
  template <typename Keep>
  void retain(Keep keep) {
    uint32_t out = head_;
    for (uint32_t i = head_; i != tail_; ++i) {
      if (!keep(std::as_const(buf_[i & mask_]))) continue;
      if (out != i) buf_[out & mask_] = std::move(buf_[i & mask_]);
      ++out;
    }
    tail_ = out;
  }
  // Room for n entries without growing (at least; a power of two): push()
  // then allocates nothing, and so cannot throw, while size() < n.
  void reserve(size_t n) {
    while (n > size_t{mask_} + 1 || (buf_.empty() && n > 0)) grow();
  }

 private:
  [[gnu::noinline]] void grow() {
    const size_t n = buf_.empty() ? 16 : buf_.size() * 2;
    std::vector<T> bigger(n);
    const size_t count = size();
    for (size_t i = 0; i < count; ++i) bigger[i] = std::move(buf_[(head_ + i) & mask_]);
    buf_ = std::move(bigger);
    mask_ = static_cast<uint32_t>(n - 1);
    head_ = 0;
    tail_ = static_cast<uint32_t>(count);
  }

  std::vector<T> buf_;
  // 32-bit positions (wrapping, so tail_ - head_ is the size): under 2^32
  // entries is plenty, and the engine's per-packet ready list is about 9
  // instructions per data packet cheaper than with 64-bit ones.
  uint32_t mask_ = UINT32_MAX;  // capacity - 1; wraps to capacity 0 while empty
  uint32_t head_ = 0, tail_ = 0;
};

}  // namespace metaroce
