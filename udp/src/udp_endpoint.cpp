// The UDP driver for the MetaRoCE engine (see include/metaroce/udp.hpp): the
// public UdpEndpoint methods. The internals are UdpEndpoint::Impl (impl.hpp).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <new>

#include "address.hpp"
#include "impl.hpp"

namespace metaroce::udp {

UdpEndpoint::UdpEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UdpEndpoint::~UdpEndpoint() {
  if (!impl_) return;
  if (impl_->on_progress_thread()) {
    // Code the thread runs (an allocator's or a signal's hook) cannot join
    // it, and inside a round it holds the mutex that close() takes: the
    // thread, which owns the Impl from here, closes it once the round is
    // over and ends (finish_orphaned). The join threw std::system_error out
    // of the destructor, which terminated the process.
    impl_->running.store(false, std::memory_order_release);
    impl_->orphan = std::move(impl_);
    return;
  }
  close(true);
}

namespace {
// A negative timeout is refused, as a negative linger is: connect sent a
// request and gave it up at once, leaving the peer a connection to accept.
Error negative_timeout(const std::string& what, std::chrono::milliseconds timeout) {
  Error e;
  e.status = Status::kInvalidArgument;
  e.message = what + ": timeout " + std::to_string(timeout.count()) + " ms is negative";
  return e;
}

// now + timeout, or the last time point the clock holds where that would
// pass it: milliseconds::max() (a caller's "for ever") overflowed in
// nanoseconds to a deadline already past, and connect() gave up at once.
template <class Rep, class Period>
std::chrono::steady_clock::time_point deadline_after(std::chrono::duration<Rep, Period> timeout) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point now = Clock::now();
  // Compared in the timeout's unit, the room rounded down: no conversion
  // of the timeout to nanoseconds, which is what overflowed.
  const auto room = std::chrono::duration_cast<std::chrono::duration<Rep, Period>>(
      Clock::time_point::max() - now);
  return timeout >= room ? Clock::time_point::max() : now + timeout;
}

// A call on the endpoint's own progress thread (code it runs: an
// allocator's or a signal's hook) that would wait for rounds that only that
// thread runs (`blocking`), or, inside a round, for the mutex the thread
// holds: refused at once.
Error on_progress_thread(const std::string& what, bool blocking = true) {
  Error e;
  e.status = Status::kInvalidArgument;
  e.message = what + ": called on this endpoint's progress thread, which " +
              (blocking ? "cannot wait for its own rounds"
                        : "holds the endpoint's lock inside its rounds") +
              " (nothing done; call it from another thread)";
  return e;
}

// A call that Impl::guard_call refused: `what()` names it.
template <typename F>
Error refused_in_round(ConnId conn, F&& what) noexcept {
  return UdpEndpoint::Impl::error_or(Status::kInvalidArgument, conn, [&] {
    Error e = on_progress_thread(what() + UdpEndpoint::Impl::conn_in_words(conn), false);
    e.conn = conn.v;
    return e;
  });
}
}  // namespace

std::unique_ptr<UdpEndpoint> UdpEndpoint::open(const std::string& address, const Options& opts,
                                               Error& err) {
  // Port 0 asks the kernel for a receive port; the entropy block after it may
  // be taken, or run past 65535, so try a few.
  try {
    PeerAddr want;
    const bool any_port = parse_address(address, kDefaultPort, want) && address_port(want) == 0 &&
                          opts.entropy_base == 0;
    for (int attempt = 0;; ++attempt) {
      err = Error{};
      auto impl = std::make_unique<Impl>();
      impl->opts = opts;
      if (impl->open(address, err))
        return std::unique_ptr<UdpEndpoint>(new UdpEndpoint(std::move(impl)));
      if (err.status == Status::kOk) err.status = Status::kInvalidArgument;
      if (!any_port || attempt >= 16 ||
          (err.status != Status::kResourceExhausted && !impl->block_past_end))
        return nullptr;
    }
  } catch (const std::bad_alloc&) {
    // Whatever was opened went with the Impl (its destructor closes the
    // sockets, the engine goes with it). A refusal whose words found no
    // memory keeps its status, set before them; else memory was the fault.
    const Status s = err.status != Status::kOk ? err.status : Status::kResourceExhausted;
    err = Impl::error_or(s, ConnId{}, [&] {
      Error e;
      e.status = s;
      e.message = "open " + address +
                  (s == Status::kResourceExhausted ? ": out of memory (nothing left open)"
                                                   : ": failed, and memory ran short");
      return e;
    });
    return nullptr;
  }
}

const std::string& UdpEndpoint::local_address() const noexcept { return impl_->local_text; }
PeerAddr UdpEndpoint::local_peer_addr() const { return impl_->local; }
uint16_t UdpEndpoint::port() const { return address_port(impl_->local); }
uint16_t UdpEndpoint::entropy_min() const { return impl_->cfg.entropy_min; }
uint16_t UdpEndpoint::entropy_max() const { return impl_->cfg.entropy_max; }
bool UdpEndpoint::gso_enabled() const { return impl_->gso.load(std::memory_order_relaxed); }
bool UdpEndpoint::gro_enabled() const { return impl_->gro; }
bool UdpEndpoint::uring_enabled() const {
  // The progress thread's round may give the ring up (release_ring):
  // refused the lock, nothing is read.
  std::unique_lock<std::mutex> lk;
  return impl_->guard_call(lk) && impl_->ring != nullptr;
}
int UdpEndpoint::fd() const {
  impl_->fd_exported.store(true, std::memory_order_relaxed);
  return impl_->epfd;
}

size_t UdpEndpoint::progress() {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return 0;  // (no round inside a round)
  const size_t moved = impl_->progress_locked();
  // The sleeping thread armed its timer for the deadline it saw; this round
  // may have set an earlier one (a datagram it took before the thread's
  // epoll_wait reported it, which then reports nothing: a READ_REQ leaves
  // its response's resend timer, a packet a delayed ACK), and the thread
  // would sleep past it. Moving
  // the timer (arm_timer changes it only when the deadline comes earlier)
  // costs no wake-up when nothing changed, where waking the thread would
  // cost one on every call of a caller that polls.
  if (impl_->sleeping.load(std::memory_order_acquire) &&
      !impl_->fd_exported.load(std::memory_order_relaxed))
    impl_->arm_timer(clock_now());
  return moved;
}

void UdpEndpoint::wait(std::chrono::nanoseconds timeout) {
  if (impl_->on_progress_thread()) return;  // (on_progress_thread, above)
  // (run_until's waits are 1-2 ms slices, for predicates it checks between
  // them: here there is none, so the whole timeout is waited for.)
  const auto deadline = deadline_after(timeout);
  Impl& im = *impl_;
  if (im.threaded.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lk(im.mu);
    // Checked again under the mutex: a stop_progress_thread meanwhile
    // (another thread's) clears it under the mutex and then notifies, which
    // a wait begun before it hears; after it, the rounds are this call's.
    if (im.threaded.load(std::memory_order_acquire)) {
      if (!im.closed) im.cv.wait_until(lk, deadline);  // the thread notifies when a round moved
      return;
    }
  }
  std::unique_lock<std::mutex> lk = im.guard();  // Options::thread_safe: let go while it blocks
  if (im.progress_locked() != 0) return;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (im.closed || now >= deadline) return;
    // Rounded up to epoll's milliseconds: rounded down, the last one would
    // be spent spinning on epoll_wait(0), a core taken from the peer's
    // process on a loaded host.
    im.block(deadline - now + std::chrono::microseconds(999), &lk);
    if (im.progress_locked() != 0) return;
  }
}

bool UdpEndpoint::start_progress_thread(ProgressMode mode) noexcept {
  Impl* const im = impl_.get();  // (not `this`, which the thread's first round may free)
  // (Where code the thread runs calls this, join_mu may be held by a stop
  // that waits for this very thread.)
  if (im->on_progress_thread()) return im->running.load();
  // Under join_mu from the check to the thread's assignment, as the stops
  // and close() are: two threads starting at once (Options::thread_safe)
  // both saw `running` down, and the second assigned its thread over the
  // first, still joinable (std::terminate); a start between close()'s join
  // and its closing left a thread running on the closed endpoint. Also
  // what a thread whose first round destroys the endpoint waits for before
  // it detaches itself (finish_orphaned).
  const std::lock_guard<std::mutex> joining(im->join_mu);
  if (im->running.load() || im->closed) return im->running.load();
  im->mode = mode;
  im->threaded.store(true, std::memory_order_release);
  im->running.store(true, std::memory_order_release);
  try {
    im->thread = std::thread([im] { im->thread_main(); });
  } catch (const std::exception&) {
    // No memory for the thread's state (std::bad_alloc) or no thread
    // (std::system_error, EAGAIN): the caller's own calls drive progress,
    // as before it asked, rather than an exception out of the driver.
    im->running.store(false, std::memory_order_release);
    im->threaded.store(false, std::memory_order_release);
    return false;
  }
  return true;
}

bool UdpEndpoint::stop_progress_thread() noexcept {
  // The thread cannot join itself: where code it runs calls this, nothing
  // changes (the join threw std::system_error, having already told the
  // thread to stop).
  if (impl_->on_progress_thread()) return false;
  {
    // join_mu until `threaded` is down: a start meanwhile would have raised
    // it for its thread, and this lowered it under that thread's rounds.
    const std::lock_guard<std::mutex> joining(impl_->join_mu);
    if (!impl_->running.load()) return true;
    impl_->join_thread();
    // Under the mutex, and then told: another thread's wait() or blocking
    // call that waits on the thread's rounds (run_until) hears of it at once
    // and runs its own, where it waited out its timeout.
    std::lock_guard<std::mutex> lk(impl_->mu);
    impl_->threaded.store(false, std::memory_order_release);
  }
  impl_->cv.notify_all();
  return true;
}

Error UdpEndpoint::register_memory(void* addr, size_t length, uint32_t access, MemoryRegion& out) {
  return register_memory_at(addr, length, reinterpret_cast<uint64_t>(addr), access, out);
}

Error UdpEndpoint::register_memory_at(void* addr, size_t length, uint64_t base, uint32_t access,
                                      MemoryRegion& out) {
  const auto what = [&] {
    return "register_memory(" + std::to_string(length) + " bytes at base " + std::to_string(base) +
           ")";
  };
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return refused_in_round(ConnId{}, what);
  // No post can name memory registered now: say so, as a post would.
  if (impl_->closed)
    return Impl::error_or(Status::kNotConnected, ConnId{},
                          [&] { return impl_->closed_error(what()); });
  const Status s = impl_->eng->register_memory_at(addr, length, base, access, out);
  if (s == Status::kOk) {
    try {
      impl_->regions[out.lkey] = Impl::Region{base, length, access};
      return {};
    } catch (const std::bad_alloc&) {
      // The engine's registration goes with it: a region registered there
      // and unknown here would be one the application holds no key of.
      (void)impl_->eng->deregister_memory(out.lkey);
      out = MemoryRegion{};
      return Impl::error_or(Status::kResourceExhausted, ConnId{}, [&] {
        return impl_->make_error(Status::kResourceExhausted,
                                 what() +
                                     " failed: out of memory recording the region (nothing "
                                     "registered)",
                                 ConnId{}, "memory ran short");
      });
    }
  }
  return Impl::error_or(s, ConnId{}, [&] {
    if (s == Status::kResourceExhausted) {
      // The status's own words name the connection tables too.
      return impl_->make_error(s,
                               what() +
                                   " failed: the engine's region table is full or memory "
                                   "ran short (nothing registered)",
                               ConnId{}, "memory ran short, or the region table is full");
    }
    // The engine's own words for the argument it refused.
    const char* problem =
        s == Status::kInvalidArgument ? region_problem(addr, length, base, access) : nullptr;
    return impl_->make_error(
        s, what() + (problem != nullptr ? std::string(" failed: ") + problem : " failed"),
        ConnId{});
  });
}

Error UdpEndpoint::deregister_memory(uint32_t lkey) {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk))
    return refused_in_round(ConnId{},
                            [&] { return "deregister_memory(lkey " + std::to_string(lkey) + ")"; });
  const Status s = impl_->eng->deregister_memory(lkey);
  if (s == Status::kOk) {
    impl_->regions.erase(lkey);
    return {};
  }
  return Impl::error_or(s, ConnId{}, [&] {
    return impl_->make_error(s, "deregister_memory(lkey " + std::to_string(lkey) + ") failed",
                             ConnId{});
  });
}

namespace {
// The engine's connection to `peer`, CONNECTING, and its entry here: the
// last step of connect_start (and so of connect).
Error start_connection(UdpEndpoint::Impl& im, const PeerAddr& peer, ConnId& out,
                       std::chrono::milliseconds budget) {
  uint16_t max_mtu = 0;
  if (Error e = im.route_mtu_cap(peer, max_mtu); e) return e;
  ConnId id;
  {
    // Every caller (connect_start's two forms, connect) has refused the
    // progress thread already, before the resolver and the route were asked.
    auto lk = im.guard();
    // Closed by another thread since connect_start looked (the resolver and
    // the route take a while, unlocked): no round would send the requests,
    // and the connection read kConnecting for good, connect_start kOk.
    if (im.closed)
      return UdpEndpoint::Impl::error_or(Status::kNotConnected, ConnId{}, [&] {
        const std::string shown = format_address(peer);
        return im.closed_error("connect to " + shown, ConnId{}, shown);
      });
    const Status s =
        im.eng->connect(peer, clock_now(), id, max_mtu, im.connect_attempts_for(budget.count()));
    if (s != Status::kOk) {
      // The engine's kResourceExhausted here is this endpoint's limit, or
      // memory it found none of (a peer's reads "the peer holds as many
      // connections ...", ended_text): below the limit, it was memory.
      const uint32_t most = im.eng->config().max_connections;
      return UdpEndpoint::Impl::error_or(s, ConnId{}, [&] {
        Error e =
            s != Status::kResourceExhausted
                ? im.make_error(s, "connect to " + format_address(peer) + " failed", ConnId{})
            : im.live_count() < most
                ? im.make_error(s,
                                "connect to " + format_address(peer) +
                                    " failed: out of memory for the connection (nothing sent)",
                                ConnId{}, "memory ran short")
                : im.make_error(s,
                                "connect to " + format_address(peer) +
                                    " failed: this endpoint holds as many connections as "
                                    "Options::engine.max_connections allows (" +
                                    std::to_string(most) + ")",
                                ConnId{}, "this endpoint's connection limit is reached");
        e.peer = format_address(peer);
        return e;
      });
    }
    if (!im.record_connecting(id, peer, budget.count())) {
      return UdpEndpoint::Impl::error_or(Status::kResourceExhausted, ConnId{}, [&] {
        Error e =
            im.make_error(Status::kResourceExhausted,
                          "connect to " + format_address(peer) +
                              " failed: out of memory recording the connection (nothing sent)",
                          ConnId{}, "memory ran short");
        e.peer = format_address(peer);
        return e;
      });
    }
    // Under the lock: a thread blocked in wait() drains the wake signal when
    // it takes the lock back as the last waiter, so a signal written after
    // that, unlocked, would leave fd() readable for nothing.
    im.wake_thread();
  }
  out = id;
  return {};
}

// "10 ms", "250 us" or "1 ns": connect_retry_ns in a message (a part of a
// microsecond read "0 ms").
std::string retry_text(uint64_t ns) {
  if (ns % 1000 != 0) return std::to_string(ns) + " ns";
  const uint64_t us = ns / 1000;
  return us % 1000 == 0 ? std::to_string(us / 1000) + " ms" : std::to_string(us) + " us";
}

std::string requests_text(uint64_t n) { return count_text(n, "request", "requests"); }

// How a budget's requests compare with the budget (CONN-2). Compared in
// requests, not products of them and connect_retry_ns, which wrapped for a
// huge connect_retry_ns.
enum class BudgetFit : uint8_t {
  kCovered,        // the requests cover it: the connection lasted the budget
  kFloorOutlasts,  // shorter than connect_attempts' requests, which it got all the same
  kCappedShort,    // longer than CONN-2's 65,535 requests, where they ended
};

BudgetFit budget_fit(const UdpEndpoint::Impl& im, int64_t budget_ms) {
  const uint32_t requests = im.connect_attempts_for(budget_ms);
  const uint64_t cover = im.requests_covering(budget_ms);
  return cover > requests   ? BudgetFit::kCappedShort
         : cover < requests ? BudgetFit::kFloorOutlasts
                            : BudgetFit::kCovered;
}

// What ended connect_start's budgeted connect, its requests unanswered:
// the budget, or where it was shorter than connect_attempts' requests or
// longer than 65,535, the requests (it said the budget, which the
// connection had outlasted or not lasted).
std::string budget_text(const UdpEndpoint::Impl& im, int64_t budget_ms) {
  const BudgetFit fit = budget_fit(im, budget_ms);
  const std::string budget = "connect_start's budget";
  if (fit == BudgetFit::kCovered)
    return "the connect timed out after " + std::to_string(budget_ms) + " ms (" + budget +
           ", its requests unanswered)";
  const bool capped = fit == BudgetFit::kCappedShort;
  return "no answer to " + requests_text(im.connect_attempts_for(budget_ms)) + " " +
         retry_text(im.cfg.connect_retry_ns) + " apart (" +
         (capped ? "CONN-2's most; " : "Options::engine.connect_attempts; ") + budget + " of " +
         std::to_string(budget_ms) + " ms asked for " + (capped ? "more)" : "fewer)");
}
}  // namespace

Error UdpEndpoint::connect(const std::string& address, std::chrono::milliseconds timeout,
                           ConnId& out) {
  out = ConnId{};
  if (timeout.count() < 0)
    return Impl::error_or(Status::kInvalidArgument, ConnId{},
                          [&] { return negative_timeout("connect to " + address, timeout); });
  if (impl_->on_progress_thread())
    return Impl::error_or(Status::kInvalidArgument, ConnId{},
                          [&] { return on_progress_thread("connect to " + address); });
  ConnId id;
  // The timeout is the connection's budget: it requests for all of it
  // (connect_retry apart, CONN-2), where the engine's connect_attempts alone
  // (8 x 10 ms by default) failed a caller who passed seconds, to wait for a
  // server that starts after the client, after 80 ms.
  if (Error e = connect_start(address, id, timeout)) return e;
  return connect_wait(id, timeout, out);
}

Error UdpEndpoint::connect(const PeerAddr& peer, std::chrono::milliseconds timeout, ConnId& out) {
  out = ConnId{};
  if (impl_->on_progress_thread())
    return Impl::error_or(Status::kInvalidArgument, ConnId{},
                          [&] { return on_progress_thread("connect to " + format_address(peer)); });
  ConnId id;
  if (Error e = connect_start(peer, id, timeout)) return e;
  return connect_wait(id, timeout, out);
}

// The rest of both connects: the handshake of connection `id`, started with
// `timeout` as its budget, until it ends or the timeout passes.
Error UdpEndpoint::connect_wait(ConnId id, std::chrono::milliseconds timeout, ConnId& out) {
  PeerAddr peer;
  {
    auto lk = impl_->guard();
    if (auto it = impl_->conns.find(id.v); it != impl_->conns.end()) peer = it->second.peer;
  }
  const auto deadline = deadline_after(timeout);
  const bool done = impl_->run_until(
      [&] {
        const auto it = impl_->conns.find(id.v);
        return it == impl_->conns.end() || it->second.state != ConnState::kConnecting;
      },
      deadline);
  auto lk = impl_->guard();
  const auto at = impl_->conns.find(id.v);
  ConnInfo ci;  // (no entry: ended long ago, kUnknown)
  ci.state = ConnState::kUnknown;
  if (at != impl_->conns.end()) ci = at->second;
  // Established, even if only after the deadline: the lock was let go in
  // between, and closing it now would throw away a connection both ends have.
  if (ci.state == ConnState::kEstablished) {
    out = id;
    return {};
  }
  // Closed by another thread meanwhile (its close ended this connection):
  // that, rather than a timeout, is why.
  if (impl_->closed)
    return Impl::error_or(Status::kNotConnected, id, [&] {
      return impl_->closed_error("connect to " + format_address(peer), id);
    });
  // A request the kernel refused to send (e.g. no route): its error, rather
  // than only the silence that followed. (A refusal no send reported yet is
  // read first, as the engine's own failure does in drain_events.)
  if (!done) impl_->take_refusals(peer, true);
  SendFailure failure = ci.send_failure.err != 0 ? ci.send_failure : impl_->send_failure_of(peer);
  if (!done) {
    impl_->eng->close(id, clock_now());
    if (at != impl_->conns.end()) {
      ConnInfo& c = at->second;
      impl_->end_conn(id.v, c, ConnState::kError);
      c.status = Status::kConnectTimeout;
    }
  }
  // conn_error() says what the requests met.
  if (at != impl_->conns.end() && at->second.send_failure.err == 0)
    at->second.send_failure = failure;
  // The engine's requests ran out: the timeout's worth (connect_attempts_for),
  // or CONN-2's most, 65,535, where the timeout is longer.
  const bool ran_out = done && ci.status == Status::kConnectTimeout;
  // The status of every Error below, known before their words (which
  // memory may lack): a timeout, or what ended the connect.
  const Status failed = !done || ci.status == Status::kOk ? Status::kConnectTimeout : ci.status;
  return Impl::error_or(failed, id, [&] {
    // An ICMP refusal is no failed send: the requests went, and the usual
    // message follows, with what the peer's host answered.
    const std::string unsent = failure.icmp ? "" : Impl::send_failure_text(failure);
    const std::string because = unsent.empty() ? "" : ": sending failed: " + unsent;
    // What the peer's host answered (ICMP), and answers that came from
    // another host (BAD-8): neither is "no answer".
    const std::string foreign = Impl::foreign_clause(ci);
    const std::string refused = (failure.icmp ? "; " + Impl::send_failure_clause(failure) : "") +
                                (foreign.empty() ? "" : "; " + foreign);
    const std::string_view timed_out = Impl::connect_timeout_text(ci);
    const EndpointConfig& ec = impl_->cfg;
    const uint32_t requests = ci.budget_ms != 0 ? impl_->connect_attempts_for(ci.budget_ms)
                                                : std::min<uint32_t>(ec.connect_attempts, 65535);
    const bool covered =
        ci.budget_ms != 0 && budget_fit(*impl_, ci.budget_ms) != BudgetFit::kCappedShort;
    if (!done || (ran_out && covered))
      return impl_->make_error(Status::kConnectTimeout,
                               "connect to " + format_address(peer) + because +
                                   (because.empty() ? " timed out after " : " (timed out after ") +
                                   std::to_string(timeout.count()) +
                                   (because.empty() ? " ms" : " ms)") + refused,
                               id, timed_out);
    if (!unsent.empty())
      return impl_->make_error(failed, "connect to " + format_address(peer) + because, id);
    if (ran_out)
      return impl_->make_error(Status::kConnectTimeout,
                               "connect to " + format_address(peer) + ": no answer to " +
                                   requests_text(requests) + " " + retry_text(ec.connect_retry_ns) +
                                   " apart (" +
                                   (ci.budget_ms != 0 ? "CONN-2's most, before the timeout ended"
                                                      : "Options::engine.connect_attempts") +
                                   ")" + refused,
                               id, timed_out);
    return impl_->make_error(failed, "connect to " + format_address(peer) + " failed" + refused, id,
                             Impl::ended_text(failed, ci.peer_reason));
  });
}

Error UdpEndpoint::connect_start(const std::string& address, ConnId& out) {
  return connect_start(address, out, std::chrono::milliseconds(0));
}

Error UdpEndpoint::connect_start(const std::string& address, ConnId& out,
                                 std::chrono::milliseconds budget) {
  out = ConnId{};
  // First: the checks below may ask the resolver and the routing table,
  // which a hook on the progress thread must not wait for inside a round.
  if (impl_->on_progress_thread())
    return refused_in_round(ConnId{}, [&] { return "connect to " + address; });
  if (budget.count() < 0)
    return Impl::error_or(Status::kInvalidArgument, ConnId{},
                          [&] { return negative_timeout("connect to " + address, budget); });
  if (impl_->closed)
    return Impl::error_or(Status::kNotConnected, ConnId{}, [&] {
      PeerAddr p;
      return impl_->closed_error(
          "connect to " + address, ConnId{},
          parse_address(address, kDefaultPort, p) ? format_address(p) : address);
    });
  // A name resolves to the addresses this endpoint reaches: an IPv4 one's
  // IPv4, an IPv6-only one's IPv6, a dual-stack one's either.
  const int reach = impl_->family == AF_INET ? AF_INET : impl_->wild ? AF_UNSPEC : AF_INET6;
  PeerAddr peer;
  uint32_t peer_scope = 0;
  // Decided with nothing allocated, then put in words: short of memory, a
  // bad address (or a name that does not resolve) is still kInvalidArgument,
  // and a resolver's own shortage (EAI_MEMORY) kResourceExhausted.
  if (const AddressFault f = address_fault(address, kDefaultPort, peer, reach, &peer_scope);
      f != AddressFault::kNone)
    return Impl::address_fault_error("connect to", address, f, reach, true);
  // Memory short for the checks' words before a refusal: kResourceExhausted.
  return Impl::error_or(Status::kResourceExhausted, ConnId{}, [&] {
    return impl_->connect_checked(peer, peer_scope, &address, out, budget);
  });
}

Error UdpEndpoint::connect_start(const PeerAddr& peer, ConnId& out) {
  return connect_start(peer, out, std::chrono::milliseconds(0));
}

Error UdpEndpoint::connect_start(const PeerAddr& peer, ConnId& out,
                                 std::chrono::milliseconds budget) {
  out = ConnId{};
  // Decided before its words, which may find no memory: still kInvalidArgument.
  if (!valid_peer_addr(peer, nullptr)) {
    // Formatting it would read garbage as an address: say what is wrong.
    return Impl::error_or(Status::kInvalidArgument, ConnId{}, [&] {
      std::string why;
      (void)valid_peer_addr(peer, &why);
      Error e;
      e.status = Status::kInvalidArgument;
      e.message = "connect: " + why;
      return e;
    });
  }
  // Before the route's MTU is asked (connect_checked), as above.
  if (impl_->on_progress_thread())
    return refused_in_round(ConnId{}, [&] { return "connect to " + format_address(peer); });
  // Memory short before a refusal is known: kResourceExhausted.
  return Impl::error_or(Status::kResourceExhausted, ConnId{}, [&] {
    if (budget.count() < 0)
      return Impl::error_or(Status::kInvalidArgument, ConnId{}, [&] {
        return negative_timeout("connect to " + format_address(peer), budget);
      });
    if (impl_->closed)
      return Impl::error_or(Status::kNotConnected, ConnId{}, [&] {
        const std::string shown = format_address(peer);
        return impl_->closed_error("connect to " + shown, ConnId{}, shown);
      });
    return impl_->connect_checked(peer, 0, nullptr, out, budget);
  });
}

// What both forms of connect_start check of a well-formed peer: a port, a
// family the sockets reach, an interface for a link-local one. `address`
// is the peer as the caller named it (null: a PeerAddr, formatted only for
// a refusal's words, after the refusal is decided).
Error UdpEndpoint::Impl::connect_checked(const PeerAddr& peer, uint32_t peer_scope,
                                         const std::string* address, ConnId& out,
                                         std::chrono::milliseconds budget) {
  // Each refusal's words in error_or: memory short for them keeps its status.
  const auto refuse = [](auto&& words) {
    return error_or(Status::kInvalidArgument, ConnId{}, [&] {
      Error e;
      e.status = Status::kInvalidArgument;
      words(e);
      return e;
    });
  };
  if (address_port(peer) == 0) {  // no socket has it: every request would fail (EINVAL)
    return refuse([&](Error& e) {
      e.peer = format_address(peer);
      e.message = "connect to " + e.peer + ": port 0 names no socket; give the peer's port";
    });
  }
  if (family == AF_INET && !address_is_v4(peer)) {
    return refuse([&](Error& e) {
      e.peer = format_address(peer);
      e.message = "connect to " + e.peer + ": an IPv4 endpoint (" + format_address(local) +
                  ") cannot reach an IPv6 peer";
    });
  }
  if (family == AF_INET6 && !wild && address_is_v4(peer)) {
    // Bound to one IPv6 address, the sockets are IPv6-only (IPV6_V6ONLY):
    // every send to an IPv4 peer would fail with ENETUNREACH.
    return refuse([&](Error& e) {
      e.peer = format_address(peer);
      e.message = "connect to " + e.peer + ": an endpoint bound to an IPv6 address (" +
                  format_address(local) +
                  ") cannot reach an IPv4 peer; open it on [::] (dual-stack) or an IPv4 address";
    });
  }
  if (is_link_local(peer) && (scope == 0 || (peer_scope != 0 && peer_scope != scope))) {
    // PeerAddr holds no interface: the endpoint's is the only one it knows.
    return refuse([&](Error& e) {
      e.peer = address != nullptr ? *address : format_address(peer);
      e.message =
          "connect to " + e.peer + ": a link-local peer is reached through the interface " +
          "of the link-local address the endpoint is opened on (\"[fe80::...%dev]:port\"); " +
          format_address(local) + " has " + (scope == 0 ? "none" : "another");
    });
  }
  if (const uint16_t port = address_port(peer);
      port >= ebase && port - ebase < ecount && reaches_own_sockets(peer)) {
    // Its requests would come back to this endpoint's own send sockets,
    // which read nothing, and no peer on this host can hold the port beside
    // them: the connect waited out its whole timeout, naming nothing.
    return refuse([&](Error& e) {
      e.peer = format_address(peer);
      e.message =
          "connect to " + e.peer + ": port " + std::to_string(port) +
          " is in this endpoint's own entropy block (" + std::to_string(ebase) + "-" +
          std::to_string(ebase + ecount - 1) + ", the ports it sends from), and the address " +
          (wild ? "is one of this host's, where this endpoint (" + format_address(local) +
                      ") receives"
                : "reaches this endpoint's own (" + format_address(local) + ")") +
          ": every request would come back to its own send sockets, which read nothing, and no "
          "peer can listen on that port while this endpoint holds it (a peer restarted since is "
          "elsewhere: ask for "
          "its address, or give this endpoint another Options::entropy_base)";
    });
  }
  return start_connection(*this, peer, out, budget);
}

// A socket bound to the wildcard address takes whatever reaches this host at
// its port; one bound to an address, what is sent to that address, and to
// the unspecified one, which the kernel sends to the sender's own address
// (IPv4) or to ::1 (IPv6).
bool UdpEndpoint::Impl::reaches_own_sockets(const PeerAddr& peer) const {
  if (wild) return is_this_host(peer);
  return same_host(peer, local) ||
         (is_unspecified(peer) && (family == AF_INET || is_loopback(local)));
}

// Closed by a DISCONNECT giving kConnectTimeout, which only a requester
// answering the late ACCEPT of a connection whose requests it had given up
// on sends (section 4, CONN-8): its peer never had the connection, and never
// uses it (a requester of another implementation, or one whose connect gave
// up moments before the ACCEPT). One closed otherwise, reason 0 included,
// may have carried WRITEs, and is handed over.
bool UdpEndpoint::Impl::abandoned(const ConnInfo& ci) {
  return ci.state == ConnState::kClosed && ci.status == Status::kPeerClosed &&
         ci.peer_reason == Status::kConnectTimeout;
}

// The accept queue's front, past the connections abandoned() that it holds
// there; each such one leaves the queue as if taken.
void UdpEndpoint::Impl::skip_abandoned() {
  while (!accepted.empty()) {
    const auto it = conns.find(accepted.front().v);
    if (it == conns.end() || !abandoned(it->second)) return;
    accepted.pop_front();
    it->second.queued = false;
    if (it->second.passed) conns.erase(it);  // kept only for the queue (trim_ended)
  }
}

bool UdpEndpoint::Impl::take_accepted(ConnId& out) {
  skip_abandoned();
  if (accepted.empty()) return false;
  out = accepted.front();
  accepted.pop_front();
  if (const auto it = conns.find(out.v); it != conns.end()) {
    it->second.queued = false;
    if (it->second.passed) {  // ended, and kept only for this: among the latest again
      it->second.passed = false;
      ended.push(out.v);
      trim_ended();
    }
  }
  return true;
}

bool UdpEndpoint::try_accept(ConnId& out) {
  std::unique_lock<std::mutex> lk;
  return impl_->guard_call(lk) && impl_->take_accepted(out);
}

Error UdpEndpoint::accept(std::chrono::milliseconds timeout, ConnId& out) {
  out = ConnId{};
  if (timeout.count() < 0)
    return Impl::error_or(Status::kInvalidArgument, ConnId{}, [&] {
      return negative_timeout("accept on " + local_address(), timeout);
    });
  if (impl_->on_progress_thread())
    return Impl::error_or(Status::kInvalidArgument, ConnId{},
                          [&] { return on_progress_thread("accept on " + local_address()); });
  if (!impl_->opts.queue_accepted) {
    // Nothing will ever be queued: waiting out the timeout would only hide
    // the option.
    return Impl::error_or(Status::kInvalidArgument, ConnId{}, [&] {
      Error e;
      e.status = Status::kInvalidArgument;
      e.message = "accept on " + local_address() +
                  ": Options::queue_accepted is off, so no connection is queued for accept(); "
                  "connections appear in completions (peer_addr() names their peers)";
      return e;
    });
  }
  const auto closed = [&] {
    return Impl::error_or(Status::kNotConnected, ConnId{},
                          [&] { return impl_->closed_error("accept"); });
  };
  if (impl_->closed) return closed();
  const auto deadline = deadline_after(timeout);
  // (pred runs under the lock; the connection is taken there, as another
  // thread's try_accept could otherwise take it between the two.)
  if (!impl_->run_until([&] { return impl_->take_accepted(out); }, deadline)) {
    if (impl_->closed) return closed();  // by another thread meanwhile
    return Impl::error_or(Status::kConnectTimeout, ConnId{}, [&] {
      Error e;
      e.status = Status::kConnectTimeout;
      e.message = "accept on " + local_address() + ": no connection within " +
                  std::to_string(timeout.count()) + " ms";
      return e;
    });
  }
  return {};
}

bool UdpEndpoint::close(ConnId conn) {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return false;
  if (const auto it = impl_->conns.find(conn.v);
      it != impl_->conns.end() &&
      (it->second.state == ConnState::kConnecting || it->second.state == ConnState::kEstablished))
    it->second.closer = ConnInfo::Closer::kApplication;
  impl_->eng->close(conn, clock_now());
  impl_->wake_thread();
  return true;
}

ConnState UdpEndpoint::state(ConnId conn) const {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return ConnState::kUnknown;
  auto it = impl_->conns.find(conn.v);
  return it == impl_->conns.end() ? ConnState::kUnknown : it->second.state;
}

Error UdpEndpoint::conn_error(ConnId conn) const {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk))
    return refused_in_round(conn, [] { return std::string("conn_error"); });
  auto it = impl_->conns.find(conn.v);
  if (it == impl_->conns.end() || it->second.state != ConnState::kError) return {};
  return Impl::error_or(it->second.status, conn, [&] {
    const std::string clauses = Impl::failure_clauses(it->second);
    return impl_->make_error(
        it->second.status, clauses.empty() ? "connection failed" : "connection failed; " + clauses,
        conn,
        it->second.status == Status::kConnectTimeout
            ? std::string(Impl::connect_timeout_text(it->second))
            : Impl::ended_text(it->second.status, it->second.peer_reason));
  });
}

std::string UdpEndpoint::peer_address(ConnId conn) const noexcept {
  const PeerAddr p = peer_addr(conn);
  if (p.len == 0) return {};
  const AddressText text = format_address_text(p);  // only the string allocates
  try {
    return std::string(text.view());
  } catch (const std::bad_alloc&) {
    return Impl::out_of_memory_text();
  }
}

// The hot path of a provider: a refusal (kQueueFull, retried in a loop)
// returns its status with nothing allocated; the *_error calls build the
// words only when the caller reports them.
Status UdpEndpoint::try_post_send(ConnId conn, const SendWr& wr) {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return Status::kInvalidArgument;  // (the *_error calls say why)
  if (impl_->closed) return Status::kNotConnected;
  const Status s = impl_->eng->post_send(conn, wr);
  if (s != Status::kOk) return s;
  impl_->wake_thread();
  return s;
}

Status UdpEndpoint::try_post_recv(ConnId conn, const RecvWr& wr) {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return Status::kInvalidArgument;  // (the *_error calls say why)
  if (impl_->closed) return Status::kNotConnected;
  const Status s = impl_->eng->post_recv(conn, wr);
  if (s != Status::kOk) return s;
  impl_->wake_thread();
  return s;
}

Status UdpEndpoint::try_post_shared_recv(const RecvWr& wr) {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return Status::kInvalidArgument;  // (the *_error calls say why)
  if (impl_->closed) return Status::kNotConnected;
  const Status s = impl_->eng->post_shared_recv(wr);
  if (s == Status::kOk) impl_->wake_thread();
  return s;
}

PeerAddr UdpEndpoint::peer_addr(ConnId conn) const {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return PeerAddr{};
  if (const auto it = impl_->conns.find(conn.v); it != impl_->conns.end()) return it->second.peer;
  return impl_->eng->peer_of(conn);
}

uint16_t UdpEndpoint::mtu_of(ConnId conn) const {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return 0;
  return impl_->eng->mtu_of(conn);
}

Error UdpEndpoint::post_send(ConnId conn, const SendWr& wr) {
  const Status s = try_post_send(conn, wr);
  return s == Status::kOk ? Error{} : post_send_error(s, conn, wr);
}

Error UdpEndpoint::post_recv(ConnId conn, const RecvWr& wr) {
  const Status s = try_post_recv(conn, wr);
  return s == Status::kOk ? Error{} : post_recv_error(s, conn, wr);
}

Error UdpEndpoint::post_shared_recv(const RecvWr& wr) {
  const Status s = try_post_shared_recv(wr);
  return s == Status::kOk ? Error{} : post_shared_recv_error(s, wr);
}

namespace {
// post_send_error's words (its lock held).
Error post_send_words(const UdpEndpoint::Impl& im, Status s, ConnId conn, const SendWr& wr) {
  if (im.closed && s == Status::kNotConnected)
    return im.closed_error("post_send (wr_id " + std::to_string(wr.wr_id) + ")", conn);
  // The engine's invalid request, in its own words (which field, and its
  // limit), and the values of the fields it judges.
  if (const char* problem = send_wr_problem(wr); s == Status::kInvalidArgument && problem) {
    char values[64];
    std::snprintf(values, sizeof values, " (op %u, length %u, flags 0x%x)",
                  static_cast<unsigned>(wr.op), static_cast<unsigned>(wr.length),
                  static_cast<unsigned>(wr.flags));
    return im.make_error(
        s, "post_send (wr_id " + std::to_string(wr.wr_id) + "): " + problem + values, conn);
  }
  if (s == Status::kLocalProtection && static_cast<size_t>(wr.op) < 5) {
    static constexpr const char* kPosts[] = {"post_send (WRITE", "post_send (WRITE_IMM",
                                             "post_send (SEND", "post_send (SEND_IMM",
                                             "post_send (READ"};
    return im.local_protection_error(kPosts[static_cast<size_t>(wr.op)], conn, wr.wr_id,
                                     wr.local_addr, wr.length, wr.lkey,
                                     wr.op == WrOpcode::kRead ? uint32_t{kAccessLocalWrite} : 0);
  }
  return im.post_error(s, conn, "post_send");
}
}  // namespace

Error UdpEndpoint::post_send_error(Status s, ConnId conn, const SendWr& wr) const {
  if (s == Status::kOk) return {};
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk))
    return refused_in_round(conn,
                            [&] { return "post_send (wr_id " + std::to_string(wr.wr_id) + ")"; });
  return Impl::error_or(s, conn, [&] { return post_send_words(*impl_, s, conn, wr); });
}

Error UdpEndpoint::post_recv_error(Status s, ConnId conn, const RecvWr& wr) const {
  if (s == Status::kOk) return {};
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk))
    return refused_in_round(conn,
                            [&] { return "post_recv (wr_id " + std::to_string(wr.wr_id) + ")"; });
  return Impl::error_or(s, conn, [&] {
    if (impl_->closed && s == Status::kNotConnected)
      return impl_->closed_error("post_recv (wr_id " + std::to_string(wr.wr_id) + ")", conn);
    if (s == Status::kLocalProtection)
      return impl_->local_protection_error("post_recv (RECV", conn, wr.wr_id, wr.addr, wr.length,
                                           wr.lkey, kAccessLocalWrite);
    return impl_->post_error(s, conn, "post_recv");
  });
}

Error UdpEndpoint::post_shared_recv_error(Status s, const RecvWr& wr) const {
  if (s == Status::kOk) return {};
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk))
    return refused_in_round(
        ConnId{}, [&] { return "post_shared_recv (wr_id " + std::to_string(wr.wr_id) + ")"; });
  return Impl::error_or(s, ConnId{}, [&] {
    if (impl_->closed && s == Status::kNotConnected)
      return impl_->closed_error("post_shared_recv (wr_id " + std::to_string(wr.wr_id) + ")");
    if (s == Status::kLocalProtection)
      return impl_->local_protection_error("post_shared_recv (RECV", ConnId{}, wr.wr_id, wr.addr,
                                           wr.length, wr.lkey, kAccessLocalWrite);
    if (const char* problem = shared_recv_problem(impl_->eng->config());
        s == Status::kInvalidArgument && problem)
      return impl_->make_error(s,
                               "post_shared_recv (wr_id " + std::to_string(wr.wr_id) +
                                   ") failed: " + problem +
                                   "; open it with Options::engine.shared_rq_depth above 0",
                               ConnId{});
    return impl_->post_error(s, ConnId{}, "post_shared_recv");
  });
}

namespace {
SendWr make_wr(uint64_t wr_id, WrOpcode op, const void* local, uint32_t len, uint32_t lkey,
               uint64_t raddr, uint64_t rkey, uint32_t imm) {
  SendWr wr;
  wr.wr_id = wr_id;
  wr.op = op;
  wr.local_addr = reinterpret_cast<uint64_t>(local);
  wr.length = len;
  wr.lkey = lkey;
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  wr.imm = imm;
  return wr;
}
}  // namespace

Error UdpEndpoint::write(ConnId conn, uint64_t wr_id, const void* local, uint32_t len,
                         uint32_t lkey, uint64_t remote_addr, uint64_t rkey) {
  return post_send(conn, make_wr(wr_id, WrOpcode::kWrite, local, len, lkey, remote_addr, rkey, 0));
}

Error UdpEndpoint::write_imm(ConnId conn, uint64_t wr_id, const void* local, uint32_t len,
                             uint32_t lkey, uint64_t remote_addr, uint64_t rkey, uint32_t imm) {
  return post_send(conn,
                   make_wr(wr_id, WrOpcode::kWriteImm, local, len, lkey, remote_addr, rkey, imm));
}

Error UdpEndpoint::read(ConnId conn, uint64_t wr_id, void* local, uint32_t len, uint32_t lkey,
                        uint64_t remote_addr, uint64_t rkey) {
  return post_send(conn, make_wr(wr_id, WrOpcode::kRead, local, len, lkey, remote_addr, rkey, 0));
}

Error UdpEndpoint::send(ConnId conn, uint64_t wr_id, const void* local, uint32_t len,
                        uint32_t lkey) {
  return post_send(conn, make_wr(wr_id, WrOpcode::kSend, local, len, lkey, 0, 0, 0));
}

Error UdpEndpoint::recv(ConnId conn, uint64_t wr_id, void* local, uint32_t len, uint32_t lkey) {
  RecvWr wr;
  wr.wr_id = wr_id;
  wr.addr = reinterpret_cast<uint64_t>(local);
  wr.length = len;
  wr.lkey = lkey;
  return post_recv(conn, wr);
}

bool UdpEndpoint::poll_read_served(ReadServed& out) {
  std::unique_lock<std::mutex> lk;
  return impl_->guard_call(lk) && impl_->eng->poll_read_served(out);
}

bool UdpEndpoint::poll_completion(Completion& out) {
  std::unique_lock<std::mutex> lk;
  return impl_->guard_call(lk) && impl_->eng->poll_completion(out);
}

size_t UdpEndpoint::poll_completions(Completion* out, size_t max) {
  if (out == nullptr) return 0;  // no room: nothing taken (udp.hpp)
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return 0;
  size_t n = 0;
  while (n < max && impl_->eng->poll_completion(out[n])) ++n;
  return n;
}

bool UdpEndpoint::wait_completion(Completion& out, std::chrono::nanoseconds timeout) {
  if (impl_->on_progress_thread()) return false;  // (on_progress_thread, above)
  const auto deadline = deadline_after(timeout);
  return impl_->run_until([&] { return impl_->eng->poll_completion(out); }, deadline);
}

namespace {
// completion_error's words (its lock held).
Error completion_words(const UdpEndpoint::Impl& im, const Completion& c) {
  static constexpr const char* kOps[] = {"WRITE", "WRITE_IMM", "SEND",          "SEND_IMM",
                                         "READ",  "RECV",      "RECV_WRITE_IMM"};
  const auto op = static_cast<size_t>(c.op);
  std::string what =
      std::string(op < 7 ? kOps[op] : "?") + " wr_id " + std::to_string(c.wr_id) + " failed";
  const auto it = im.conns.find(c.conn.v);
  const bool ended = it != im.conns.end() && (it->second.state == ConnState::kError ||
                                              it->second.state == ConnState::kClosed);
  // The failure that ended the connection, where a send failed or the peer's
  // host refused (conn_error's): a peer unreachable because its process is
  // gone reads as one that is only silent otherwise.
  if (ended && it->second.state == ConnState::kError && it->second.status == c.status) {
    const std::string clauses = UdpEndpoint::Impl::failure_clauses(it->second);
    if (!clauses.empty()) what += "; " + clauses;
  }
  // A budget spent: the connect's whole time, not one connection's requests.
  if (c.status == Status::kConnectTimeout && it != im.conns.end() && it->second.budget_ms != 0)
    what += "; " + budget_text(im, it->second.budget_ms);
  if (c.status != Status::kFlushed)
    return im.make_error(c.status, what, c.conn, UdpEndpoint::Impl::request_failure_text(c.status));
  // kFlushed says only that the connection ended first: what ended it, which
  // the application otherwise had to ask conn_error() for, is the reason.
  const ConnInfo* ci = it != im.conns.end() ? &it->second : nullptr;
  Error e = im.make_error(c.status, what, c.conn, UdpEndpoint::Impl::flushed_text(ci));
  if (ended && ci->closer == ConnInfo::Closer::kNone)
    e.message += "; the connection " + UdpEndpoint::Impl::how_it_ended(*ci);
  return e;
}
}  // namespace

Error UdpEndpoint::completion_error(const Completion& c) const {
  if (c.status == Status::kOk) return {};
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk))
    return refused_in_round(
        c.conn, [&] { return "completion_error (wr_id " + std::to_string(c.wr_id) + ")"; });
  return Impl::error_or(c.status, c.conn, [&] { return completion_words(*impl_, c); });
}

EndpointStats UdpEndpoint::endpoint_stats() const {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return EndpointStats{};
  return impl_->eng->endpoint_stats();
}

bool UdpEndpoint::conn_stats(ConnId conn, ConnStats& out) const {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return false;
  const ConnStats* s = impl_->eng->conn_stats(conn);
  if (s == nullptr) return false;
  out = *s;
  return true;
}

size_t UdpEndpoint::path_stats(ConnId conn, PathStats* out, size_t max) const noexcept {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return 0;
  const size_t n = impl_->eng->path_count(conn);
  for (size_t i = 0; out != nullptr && i < std::min(n, max); ++i)
    (void)impl_->eng->path_stats(conn, i, out[i]);
  return n;
}

std::vector<PathStats> UdpEndpoint::path_stats(ConnId conn) const noexcept {
  std::vector<PathStats> v;
  try {
    v.resize(path_stats(conn, nullptr, 0));
  } catch (const std::bad_alloc&) {
    return {};
  }
  // (Paths a round added in between are left out.)
  v.resize(std::min(v.size(), path_stats(conn, v.data(), v.size())));
  return v;
}

IoStats UdpEndpoint::io_stats() const {
  std::unique_lock<std::mutex> lk;
  if (!impl_->guard_call(lk)) return IoStats{};
  return impl_->io;
}

bool UdpEndpoint::close(bool graceful) {
  // The thread cannot join itself, and inside a round it holds the mutex
  // taken below: refused, nothing changed (the join threw std::system_error).
  if (impl_->on_progress_thread()) return false;
  if (impl_->closed) return true;
  // The thread stops, but `threaded` stays: other threads' calls (one
  // waiting in wait_completion, say) keep taking the mutex, and close()
  // holds it until it is done, so the engine never has two threads at once.
  // join_mu until `closed` is up: a start_progress_thread on another thread
  // comes before the join, which stops its thread, or after, and is refused.
  const std::lock_guard<std::mutex> joining(impl_->join_mu);
  impl_->join_thread();
  std::unique_lock<std::mutex> lk(impl_->mu);
  if (!impl_->closed) impl_->close_locked(lk, graceful);  // (or closed by another thread meanwhile)
  return true;
}

// close() with the thread stopped and the mutex held (also the orphaned
// thread's own close, finish_orphaned).
void UdpEndpoint::Impl::close_locked(std::unique_lock<std::mutex>& lk, bool graceful) {
  if (eng) {
    // Every connection is closed in the engine, graceful or not: its posted
    // work completes kFlushed at once (poll_completion still returns it after
    // close), and the graceful close lets the DISCONNECT handshakes run.
    (void)drain_events();  // connections accepted since the last round
    // The linger waits for the live ones with a closer, here or the
    // application's before (one accepted during the linger has none):
    // marked in their entries, not listed, as a list would take memory a
    // close (and the destructor) must not need.
    const auto closing = [](const ConnInfo& ci) {
      return ci.closer != ConnInfo::Closer::kNone && live(ci.state);
    };
    bool any = false;
    const TimeNs now = clock_now();
    for (auto& [id, ci] : conns) {
      if (live(ci.state)) {
        // (One the application closed already keeps that: its work went then.)
        if (ci.closer == ConnInfo::Closer::kNone) ci.closer = ConnInfo::Closer::kEndpoint;
        eng->close(ConnId{id}, now);
        any = true;
      }
    }
    const auto none_left = [&] {
      return std::none_of(conns.begin(), conns.end(),
                          [&](const auto& kv) { return closing(kv.second); });
    };
    if (graceful && any) {  // run_until, but under the mutex held here
      // (milliseconds::max(), "for ever", overflowed to a deadline past.)
      const auto deadline = deadline_after(opts.linger);
      for (;;) {
        const size_t moved = progress_locked();
        if (none_left()) break;
        const auto t = std::chrono::steady_clock::now();
        if (t >= deadline) break;
        if (moved == 0)
          block(std::min<std::chrono::nanoseconds>(deadline - t, std::chrono::milliseconds(1)) +
                std::chrono::microseconds(999));
      }
    }
    (void)drain_events();
    // Accepted during the linger (its rounds read CONNECT_REQs, and the
    // engine answered them): closed too, and told so by one more round of
    // sends (no receive: none is accepted after it). Such a connection stayed
    // kEstablished for good, try_accept() handed it out, and its peer learnt
    // of the close only from its peer timeout.
    bool late = false;
    const TimeNs later = clock_now();
    for (auto& [id, ci] : conns) {
      if (live(ci.state) && ci.closer == ConnInfo::Closer::kNone) {
        ci.closer = ConnInfo::Closer::kEndpoint;
        eng->close(ConnId{id}, later);
        late = true;
      }
    }
    if (late && graceful) {
      (void)pump_tx(later);
      end_round();
      (void)drain_events();
    }
    // Not closed by the peer within the linger (or not asked to be): closed
    // here all the same, the sockets go now. (end_conn erases only older
    // ended entries, never this one: the iteration stays valid.)
    for (auto& [id, ci] : conns)
      if (live(ci.state)) end_conn(id, ci, ConnState::kClosed);
  }
  closed = true;
  // A wait() on another thread that waits on the progress thread's rounds
  // (`threaded` stays set) hears of the close when this returns, where it
  // slept out its whole timeout.
  cv.notify_all();
  if (epoll_waiters != 0) {
    // Other threads blocked on the epoll fd (Options::thread_safe): woken,
    // and out of epoll_wait before its fds close, so that none waits on or
    // reads an fd number a later open was given.
    const uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));
    cv.wait(lk, [&] { return epoll_waiters == 0; });
  }
  close_fds();
}

}  // namespace metaroce::udp
