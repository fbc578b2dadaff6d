// FIFO of connection indices (the round-robin of connections with something
// to send). A power-of-two ring: a push is a store and an increment, with no
// out-of-line vector growth check on the per-packet path; it grows by
// doubling, which happens only as the connection count rises.
#pragma once

#include <cstdint>
#include <vector>

namespace metaroce::detail {

class IndexFifo {
 public:
  IndexFifo() : buf_(64), mask_(63) {}
  [[nodiscard]] bool empty() const { return head_ == tail_; }
  [[nodiscard]] uint32_t front() const { return buf_[head_ & mask_]; }
  uint32_t pop() { return buf_[head_++ & mask_]; }
  // Moves the front to the back: pop() then push() of the same value, with
  // nothing to do when it is the only one (a single busy connection, polled
  // for every packet it sends).
  void rotate() {
    if (tail_ - head_ > 1) buf_[tail_++ & mask_] = buf_[head_++ & mask_];
  }
  void push(uint32_t v) {
    if (tail_ - head_ > mask_) [[unlikely]]
      grow();
    buf_[tail_++ & mask_] = v;
  }
  void clear() { head_ = tail_ = 0; }

 private:
  [[gnu::noinline]] void grow() {
    std::vector<uint32_t> bigger(buf_.size() * 2);
    const uint32_t n = tail_ - head_;
    for (uint32_t i = 0; i < n; ++i) bigger[i] = buf_[(head_ + i) & mask_];
    buf_ = std::move(bigger);
    mask_ = static_cast<uint32_t>(buf_.size() - 1);
    head_ = 0;
    tail_ = n;
  }

  std::vector<uint32_t> buf_;
  uint32_t mask_ = 0;
  uint32_t head_ = 0, tail_ = 0;
};

}  // namespace metaroce::detail
