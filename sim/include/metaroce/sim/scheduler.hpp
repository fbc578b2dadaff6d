// The discrete-event scheduler. Not a global: each Simulation owns one, so
// several simulations can live (and run) in one process.
//
// Design (as in htsim): a component holds at most one pending event, its
// EventSource slot, and re-arms it itself. A link keeps its in-flight packets
// in its own ring and schedules only the head; a host keeps one timer for its
// engine. The scheduler is therefore an indexed 4-ary heap of a few thousand
// entries (one per component), never one entry per packet. Ties at one
// instant run in the order they were scheduled (a sequence number), so a run
// is a pure function of its inputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "metaroce/sim/time.hpp"

namespace metaroce::sim {

class Scheduler;

class EventSource {
 public:
  EventSource() = default;
  EventSource(const EventSource&) = delete;
  EventSource& operator=(const EventSource&) = delete;
  virtual ~EventSource() = default;
  virtual void on_event(SimTime now) = 0;
  [[nodiscard]] bool pending() const { return pos_ != kNone; }
  [[nodiscard]] SimTime when() const { return when_; }
  // An observer (a sampler) only reads the simulation: its events are not
  // counted in events() and do not move now(), so a run with observers gives
  // the same report as one without. on_event gets the observer's own time.
  void set_observer(bool on) { observer_ = on; }

 private:
  friend class Scheduler;
  static constexpr uint32_t kNone = UINT32_MAX;
  uint32_t pos_ = kNone;
  bool observer_ = false;
  SimTime when_ = SimTime::never();
};

class Scheduler {
 public:
  Scheduler() = default;
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;
  ~Scheduler();

  [[nodiscard]] SimTime now() const { return now_; }
  // Arms (or re-arms) src's single event at t (>= now). A re-arm at the same
  // time keeps its place in the tie order.
  void schedule(EventSource& src, SimTime t);
  void cancel(EventSource& src);
  [[nodiscard]] SimTime next_time() const {
    return heap_.empty() ? SimTime::never() : heap_[0].when;
  }
  // Runs one event; false when none is left.
  bool step();
  // Runs events until none is left, the next one lies after `until`, or
  // stop() was called. Returns the number of events run.
  uint64_t run(SimTime until = SimTime::never());
  void stop() { stop_ = true; }
  [[nodiscard]] bool stopped() const { return stop_; }
  [[nodiscard]] uint64_t events() const { return events_; }
  [[nodiscard]] size_t pending_count() const { return heap_.size(); }
  // Called every kTickEvents events from run() (progress reports); may call stop().
  void set_tick(void (*fn)(void*, const Scheduler&), void* ctx) {
    tick_fn_ = fn;
    tick_ctx_ = ctx;
  }

 private:
  // 2^20 events took leafspine8192's run (0.3 to 0.5 M events/s) 2 to 3.5 s:
  // a line a second came every third second. A tick is one wall-clock read.
  static constexpr uint64_t kTickEvents = uint64_t{1} << 16;
  static constexpr uint32_t kArity = 4;  // a 4-ary heap: shallower, children share cache lines
  struct Entry {
    SimTime when;
    uint64_t seq;
    EventSource* src;
  };
  static bool less(const Entry& a, const Entry& b) {
    return a.when != b.when ? a.when < b.when : a.seq < b.seq;
  }
  void sift_up(uint32_t i);
  void sift_down(uint32_t i);
  void place(uint32_t i, const Entry& e) {
    heap_[i] = e;
    e.src->pos_ = i;
  }
  void remove_at(uint32_t i);

  std::vector<Entry> heap_;
  SimTime now_{0};
  uint64_t seq_ = 0;
  uint64_t events_ = 0;
  bool stop_ = false;
  void (*tick_fn_)(void*, const Scheduler&) = nullptr;
  void* tick_ctx_ = nullptr;
};

}  // namespace metaroce::sim
