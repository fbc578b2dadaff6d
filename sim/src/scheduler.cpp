#include "metaroce/sim/scheduler.hpp"

#include <cassert>

namespace metaroce::sim {

Scheduler::~Scheduler() {
  for (auto& e : heap_) e.src->pos_ = EventSource::kNone;
}

void Scheduler::schedule(EventSource& src, SimTime t) {
  if (t < now_) t = now_;
  if (src.pos_ != EventSource::kNone) {
    if (src.when_ == t) return;
    const uint32_t i = src.pos_;
    const Entry e{t, seq_++, &src};
    src.when_ = t;
    const bool up = less(e, heap_[i]);
    place(i, e);
    if (up)
      sift_up(i);
    else
      sift_down(i);
    return;
  }
  src.when_ = t;
  heap_.push_back(Entry{t, seq_++, &src});
  const auto i = static_cast<uint32_t>(heap_.size() - 1);
  src.pos_ = i;
  sift_up(i);
}

void Scheduler::cancel(EventSource& src) {
  if (src.pos_ == EventSource::kNone) return;
  remove_at(src.pos_);
}

void Scheduler::remove_at(uint32_t i) {
  EventSource* gone = heap_[i].src;
  gone->pos_ = EventSource::kNone;
  gone->when_ = SimTime::never();
  const Entry last = heap_.back();
  heap_.pop_back();
  if (i == heap_.size()) return;
  place(i, last);
  if (i > 0 && less(last, heap_[(i - 1) / kArity]))
    sift_up(i);
  else
    sift_down(i);
}

void Scheduler::sift_up(uint32_t i) {
  const Entry e = heap_[i];
  while (i > 0) {
    const uint32_t parent = (i - 1) / kArity;
    if (!less(e, heap_[parent])) break;
    place(i, heap_[parent]);
    i = parent;
  }
  place(i, e);
}

void Scheduler::sift_down(uint32_t i) {
  const Entry e = heap_[i];
  const auto n = static_cast<uint32_t>(heap_.size());
  for (;;) {
    const uint32_t first = kArity * i + 1;
    if (first >= n) break;
    uint32_t best = first;
    const uint32_t last = first + kArity < n ? first + kArity : n;
    for (uint32_t c = first + 1; c < last; ++c)
      if (less(heap_[c], heap_[best])) best = c;
    if (!less(heap_[best], e)) break;
    place(i, heap_[best]);
    i = best;
  }
  place(i, e);
}

bool Scheduler::step() {
  if (heap_.empty()) return false;
  EventSource* src = heap_[0].src;
  const SimTime t = heap_[0].when;
  remove_at(0);
  if (src->observer_) [[unlikely]] {
    src->on_event(t);
    return true;
  }
  now_ = t;
  ++events_;
  src->on_event(now_);
  return true;
}

uint64_t Scheduler::run(SimTime until) {
  const uint64_t start = events_;
  stop_ = false;
  while (!stop_ && !heap_.empty() && heap_[0].when <= until) {
    step();
    if (tick_fn_ != nullptr && (events_ & (kTickEvents - 1)) == 0) tick_fn_(tick_ctx_, *this);
  }
  return events_ - start;
}

}  // namespace metaroce::sim
