// A FIFO in a power-of-two ring: the round-robin of connections with
// something to send, and the queues of completions, events and orphan
// replies that the application or the transmit path drains. A push is a
// store and an increment, with no out-of-line growth check on the
// per-packet path; the ring grows by doubling, only while the queue is
// longer than it has ever been, and never shrinks, so a queue in steady
// use allocates nothing (a std::deque allocates a node every few pushes
// and frees one every few pops). It starts empty: a simulator holds
// thousands of endpoints, most of which never queue an orphan reply.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace metaroce::detail {

template <typename T>
class Fifo {
 public:
  Fifo() = default;
  [[nodiscard]] bool empty() const { return head_ == tail_; }
  [[nodiscard]] size_t size() const { return tail_ - head_; }
  [[nodiscard]] const T& front() const { return buf_[head_ & mask_]; }
  T pop() { return buf_[head_++ & mask_]; }
  // Moves the front to the back: pop() then push() of the same value, with
  // nothing to do when it is the only one (a single busy connection, polled
  // for every packet it sends).
  void rotate() {
    if (tail_ - head_ > 1) buf_[tail_++ & mask_] = buf_[head_++ & mask_];
  }
  void push(const T& v) {
    if (tail_ - head_ == capacity_) [[unlikely]]
      grow();
    buf_[tail_++ & mask_] = v;
  }
  void clear() { head_ = tail_ = 0; }

 private:
  [[gnu::noinline]] void grow() {
    std::vector<T> bigger(buf_.empty() ? 16 : buf_.size() * 2);
    const uint32_t n = tail_ - head_;
    for (uint32_t i = 0; i < n; ++i) bigger[i] = buf_[(head_ + i) & mask_];
    buf_ = std::move(bigger);
    capacity_ = static_cast<uint32_t>(buf_.size());
    mask_ = capacity_ - 1;
    head_ = 0;
    tail_ = n;
  }

  std::vector<T> buf_;
  uint32_t capacity_ = 0;
  uint32_t mask_ = 0;
  uint32_t head_ = 0, tail_ = 0;
};

}  // namespace metaroce::detail
