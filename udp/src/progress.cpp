// The progress round (see impl.hpp) and what drives it: engine events into
// connection states, the timerfd, blocking on the epoll fd, and the progress
// thread.
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <new>

#include "impl.hpp"

namespace metaroce::udp {

// Whoever waits on epfd for rounds to run: the progress thread asleep, or an
// application thread blocked in wait() or a blocking helper under
// Options::thread_safe. Such a thread used to hear of another's post only
// at block()'s 1 s epoll slice: a post that a thread in wait(5s) had to send
// left up to 1 s late. (Raised under mu before the mutex is let go, so a
// post that takes it later sees the waiter.)
void UdpEndpoint::Impl::wake_thread() {
  if (sleeping.load(std::memory_order_acquire) ||
      epoll_waiters.load(std::memory_order_acquire) != 0) {
    const uint64_t one = 1;
    (void)!::write(wake_fd, &one, sizeof(one));
  }
}

void UdpEndpoint::Impl::join_thread() {
  // Its callers hold join_mu: one joins, the other waits for it. Two threads
  // closing at once both saw `running` with a load and a store apart, and a
  // second join() of one thread terminates; and a second caller that
  // returned at once could close the fds (wake_fd too) before the first had
  // woken and joined.
  if (!running.exchange(false, std::memory_order_acq_rel)) return;
  const uint64_t one = 1;
  (void)!::write(wake_fd, &one, sizeof(one));
  if (thread.joinable()) thread.join();
  // A busy thread never read it: fd() would stay readable for ever, and an
  // application polling it would spin.
  uint64_t v;
  (void)!::read(wake_fd, &v, sizeof(v));
}

void UdpEndpoint::Impl::end_round() {
  if (tx_count != 0 && tx_msg_count == 0) build_messages();
  if (tx_msg_count != 0 && !flush()) materialize_pending();
}

// A closed connection's peer_src, send_failed and gso_refused entries go
// (a new connection agrees an mtu for the route as it is now), unless another
// connection to that peer is still open (a later datagram from the peer
// would add the first again).
void UdpEndpoint::Impl::forget_source(const PeerAddr& p) {
  if (peer_src.empty() && send_failed.empty() && gso_refused.empty()) return;
  if (live_peers.find(p) != live_peers.end()) return;
  send_failed.erase(p);
  gso_refused.erase(p);
  peer_src.erase(p);
  for (auto& r : recent_src)
    if (r.first == p) r.first = PeerAddr{};
  if (src_cache_peer == p) src_cache_peer = PeerAddr{};
}

bool UdpEndpoint::Impl::count_live(ConnInfo& ci) {
  const bool now_live = live(ci.state);
  if (ci.counted && (!now_live || !(ci.counted_peer == ci.peer))) {
    if (const auto it = live_peers.find(ci.counted_peer);
        it != live_peers.end() && --it->second == 0)
      live_peers.erase(it);
    ci.counted = false;
  }
  if (now_live && !ci.counted) {
    try {
      ++live_peers[ci.peer];  // allocates for a peer with no other live connection
    } catch (const std::bad_alloc&) {
      return false;
    }
    ci.counted_peer = ci.peer;
    ci.counted = true;
  }
  return true;
}

size_t UdpEndpoint::Impl::live_count() const {
  size_t n = 0;
  for (const auto& kv : live_peers) n += kv.second;
  return n;
}

// peer_src reached its limit (note_source): the entries of peers with no
// live connection go, and the limit becomes twice what is left, so that a
// flood of new sources costs a sweep now and then, not one per datagram. A
// live peer keeps its entry: cleared, its replies would leave from the
// address the route picks, which it may drop as another peer's (BAD-8).
void UdpEndpoint::Impl::evict_idle_sources() {
  std::erase_if(peer_src,
                [&](const auto& kv) { return live_peers.find(kv.first) == live_peers.end(); });
  peer_src_limit = std::max(kMaxPeerSources, 2 * peer_src.size());
  src_cache_peer = PeerAddr{};
}

// A connection ends once; the oldest of more than kEndedKept ended ones
// loses its entry, so that a server that serves many peers over time keeps
// only the connections open now and the latest to end.
void UdpEndpoint::Impl::end_conn(uint32_t id, ConnInfo& ci, ConnState s) {
  const bool was_live = live(ci.state);
  ci.state = s;
  count_live(ci);
  if (!was_live) return;
  ended.push(id);  // room reserved at open: never allocates
  trim_ended();
}

// A connection still waiting in the accept queue keeps its entry: taken
// later, it would otherwise read kUnknown, with no peer_address() once the
// engine forgot it too, and the application could not tell what it had
// accepted. Its place among the latest to end is taken again when it is
// taken (UdpEndpoint::try_accept).
void UdpEndpoint::Impl::trim_ended() {
  while (ended.size() > kEndedKept) {
    const auto it = conns.find(ended.front());
    if (it != conns.end() && !live(it->second.state)) {  // (not an id reused since)
      if (it->second.queued) {
        it->second.passed = true;
      } else {
        conns.erase(it);
      }
    }
    ended.pop();
  }
}

// connect_start's connection, CONNECTING, recorded. Where memory runs
// short nothing of it stays and the engine's connection is closed: false.
bool UdpEndpoint::Impl::record_connecting(ConnId id, const PeerAddr& peer, int64_t budget_ms) {
  std::unordered_map<uint32_t, ConnInfo>::iterator at;
  try {
    at = conns.try_emplace(id.v).first;
  } catch (const std::bad_alloc&) {
    eng->close(id, clock_now());
    return false;
  }
  ConnInfo& ci = at->second;
  ci.state = ConnState::kConnecting;
  ci.peer = peer;
  ci.budget_ms = budget_ms;
  if (count_live(ci)) return true;
  conns.erase(at);
  eng->close(id, clock_now());
  return false;
}

// A connection the engine accepted, recorded: counted among its peer's live
// ones and queued for accept(). Where memory runs short for either, nothing
// of it stays here and the engine's connection is closed, its peer told by
// the DISCONNECT: as the engine refuses a request it cannot record (CONN-4),
// never std::bad_alloc out of progress().
bool UdpEndpoint::Impl::record_accepted(std::unordered_map<uint32_t, ConnInfo>::iterator at,
                                        ConnId conn) {
  ConnInfo& ci = at->second;
  bool queued = false;
  if (count_live(ci)) {
    if (!opts.queue_accepted) return true;  // the application learns it from its completions
    try {
      accepted.push_back(conn);
      queued = true;
    } catch (const std::bad_alloc&) {
    }
  }
  if (queued) {
    ci.queued = true;
    return true;
  }
  ci.state = ConnState::kClosed;
  count_live(ci);  // uncounts, which allocates nothing
  conns.erase(at);
  eng->close(conn, clock_now());
  ++io.accepts_dropped;
  return false;
}

bool UdpEndpoint::Impl::drain_events() {
  bool any = false;
  Event ev;
  while (eng->poll_event(ev)) {
    any = true;
    auto at = conns.find(ev.conn.v);
    if (at == conns.end()) {
      // A connection of ours has its entry from connect_start; one that
      // ended long ago may have lost it: nothing to report.
      if (ev.kind != EventKind::kAccepted) continue;
      try {
        at = conns.emplace(ev.conn.v, ConnInfo{}).first;
      } catch (const std::bad_alloc&) {
        eng->close(ev.conn, clock_now());  // unrecorded: refused, as record_accepted does
        ++io.accepts_dropped;
        continue;
      }
    }
    ConnInfo& ci = at->second;
    if (ev.peer.len != 0) ci.peer = ev.peer;
    // The first error stays: the close that follows one (the engine's
    // kClosed after connect() gave up, say) must not leave conn_error() empty.
    if (ci.state == ConnState::kError) continue;
    ci.status = ev.status;
    switch (ev.kind) {
      case EventKind::kConnected:
        ci.state = ConnState::kEstablished;
        take_refusals(ci.peer, false);  // it got through since
        if (!send_failed.empty()) send_failed.erase(ci.peer);
        break;
      case EventKind::kAccepted:
        ci.state = ConnState::kEstablished;
        if (!record_accepted(at, ev.conn)) continue;
        take_refusals(ci.peer, false);
        if (!send_failed.empty()) send_failed.erase(ci.peer);
        break;
      case EventKind::kConnectFailed:
      case EventKind::kError:
        ci.peer_reason = ev.reason;  // a REJECT's code, for ended_text
        end_conn(ev.conn.v, ci, ConnState::kError);
        take_refusals(ci.peer, true);
        if (auto it = send_failed.find(ci.peer); it != send_failed.end())
          ci.send_failure = it->second;
        forget_source(ci.peer);
        break;
      case EventKind::kClosed:
        ci.peer_reason = ev.reason;
        end_conn(ev.conn.v, ci, ConnState::kClosed);
        forget_source(ci.peer);
        break;
    }
    count_live(ci);
  }
  return any;
}

// connect() and connect_start's budget: one connection, one id and nonce,
// requests for all of it. A new connection opened each time one's
// connect_attempts (8 x 10 ms) ran out raced a responder slow to read the
// requests: it accepted the given-up one and the next, its accept() got the
// one the requester closed at once (a late ACCEPT is answered with a
// DISCONNECT, spec section 4), and the requester's connection was the other.
uint64_t UdpEndpoint::Impl::requests_covering(int64_t budget_ms) const {
  if (budget_ms <= 0) return 0;
  // Saturated, and rounded up without adding to it: milliseconds::max() (a
  // caller's "for ever") wrapped, in ns or in the rounding, to a few ms, and
  // the connect gave up after connect_attempts requests.
  const auto ms = static_cast<uint64_t>(budget_ms);
  const uint64_t budget_ns = ms > UINT64_MAX / kMillisecond ? UINT64_MAX : ms * kMillisecond;
  const uint64_t retry = std::max<uint64_t>(cfg.connect_retry_ns, 1);
  return budget_ns / retry + (budget_ns % retry != 0 ? 1 : 0);
}

uint16_t UdpEndpoint::Impl::connect_attempts_for(int64_t budget_ms) const {
  if (budget_ms <= 0) return 0;
  return static_cast<uint16_t>(
      std::clamp<uint64_t>(requests_covering(budget_ms),
                           std::min<uint64_t>(cfg.connect_attempts, UINT16_MAX), UINT16_MAX));
}

void UdpEndpoint::Impl::arm_timer(TimeNs now) {
  TimeNs next = eng->next_timeout();
  if (tx_msg_count != 0) next = std::min(next, now + 50 * kMicrosecond);  // retry a full socket
  const uint64_t want = next == TimeNs::never() ? 0 : std::max<uint64_t>(next.ns, 1);
  if (want == armed_ns) return;
  // An armed deadline still ahead and no later than the wanted one stays:
  // an early wake-up is harmless (progress() re-arms), and the deadline
  // moves later on most rounds, which would otherwise cost a syscall each.
  if (armed_ns > now.ns && (want == 0 || want > armed_ns)) return;
  armed_ns = want;
  itimerspec its{};
  if (want != 0) {
    its.it_value.tv_sec = static_cast<time_t>(want / kSecond);
    its.it_value.tv_nsec = static_cast<long>(want % kSecond);
  }
  (void)timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, nullptr);
}

size_t UdpEndpoint::Impl::progress_locked() {
  if (closed) return 0;
  size_t moved = pump_tx(clock_now());  // work posted since the last round
  // Read again after those sends: receive() times the ACKs it hands over.
  moved += receive(clock_now());
  const TimeNs now = clock_now();
  if (eng->next_timeout() <= now) eng->handle_timeout(now);
  moved += pump_tx(now);
  end_round();
  if (drain_events()) moved += 1;
  // A thread blocked in wait() (Options::thread_safe) armed the timer for the
  // deadline it saw; this round, another thread's, may have set an earlier
  // one (a datagram it took from under that thread's epoll_wait, which then
  // reports nothing), which the blocked thread would sleep past until its
  // epoll slice ended (1 s). arm_timer moves it only to an earlier deadline.
  if (fd_exported.load(std::memory_order_relaxed) ||
      epoll_waiters.load(std::memory_order_relaxed) != 0)
    arm_timer(now);
  return moved;
}

// Blocks on the epoll fd (non-threaded mode).
void UdpEndpoint::Impl::block(std::chrono::nanoseconds timeout, std::unique_lock<std::mutex>* lk) {
  if (timeout.count() <= 0) return;
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
  epoll_event evs[4];
  arm_timer(clock_now());
  const bool let_go = lk != nullptr && lk->owns_lock();
  if (let_go) {
    if (closed) return;
    ++epoll_waiters;  // close() keeps the fds open until it is back
    lk->unlock();
  }
  const int n = epoll_wait(epfd, evs, 4, static_cast<int>(std::clamp<int64_t>(ms, 0, 1000)));
  if (let_go) {
    lk->lock();
    if (--epoll_waiters == 0) {
      if (closed) {
        cv.notify_all();  // close() waits for this
        return;
      }
      // A post made while this thread was waking (a datagram woke it, the
      // post held the lock) still saw a waiter and signalled; with no waiter
      // left, nothing else reads it, and fd() would stay readable for
      // nothing: an application polling it would spin. Every signal is
      // written under mu, so none can follow this read.
      uint64_t v;
      (void)!::read(wake_fd, &v, sizeof(v));
    }
    if (closed) return;
  }
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.fd == timer_fd || evs[i].data.fd == wake_fd) {
      uint64_t v;
      (void)!::read(evs[i].data.fd, &v, sizeof(v));
      if (evs[i].data.fd == timer_fd) armed_ns = 0;
    }
  }
}

void UdpEndpoint::Impl::consume_wakeups(const epoll_event* evs, int n) {
  bool timer = false;
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.fd == timer_fd || evs[i].data.fd == wake_fd) {
      uint64_t v;
      (void)!::read(evs[i].data.fd, &v, sizeof(v));
      timer |= evs[i].data.fd == timer_fd;
    }
  }
  std::lock_guard<std::mutex> lk(mu);
  ++io.thread_wakeups;
  if (timer) armed_ns = 0;
}

constinit thread_local const UdpEndpoint::Impl* t_progress_of = nullptr;

void UdpEndpoint::Impl::thread_main() {
  t_progress_of = this;
  if (mode == ProgressMode::kSleeping)
    sleeping_main();
  else
    busy_main();
  t_progress_of = nullptr;
  if (orphan) finish_orphaned();  // set on this thread: no other reads or writes it
}

void UdpEndpoint::Impl::finish_orphaned() {
  const std::unique_ptr<Impl> self = std::move(orphan);
  {
    std::unique_lock<std::mutex> lk(mu);
    if (!closed) close_locked(lk, true);
  }
  {
    // start_progress_thread assigns `thread` under join_mu, possibly after
    // this thread began: detached once the assignment is done, as a
    // joinable std::thread destroyed with the Impl would terminate.
    std::lock_guard<std::mutex> j(join_mu);
    if (thread.joinable()) thread.detach();
  }
}  // the Impl goes with `self`: nothing of it is touched after

// Rounds while they move something; then blocks on epfd with no timeout.
// `sleeping` is raised before the last round that found nothing, and stays
// up until a round moves something: a post that the round missed came after
// it took the lock, so its wake_thread sees the flag and writes wake_fd
// (the mutex orders the two), and no post waits for a timer. Posts made
// while it is up cost a write each: only between an idle round and the
// first busy one.
void UdpEndpoint::Impl::sleeping_main() {
  epoll_event evs[8];
  while (running.load(std::memory_order_acquire)) {
    size_t moved;
    {
      std::lock_guard<std::mutex> lk(mu);
      moved = progress_locked();
      ++io.thread_rounds;
      if (moved == 0 && sleeping.load(std::memory_order_relaxed)) arm_timer(clock_now());
    }
    if (moved != 0) {
      sleeping.store(false, std::memory_order_relaxed);
      cv.notify_all();
      continue;
    }
    if (!sleeping.load(std::memory_order_relaxed)) {
      // One more round after raising it: a post that saw it down was made
      // before this round's lock, and the round sends it.
      sleeping.store(true, std::memory_order_seq_cst);
      continue;
    }
    const int n = epoll_wait(epfd, evs, 8, -1);
    if (n > 0) consume_wakeups(evs, n);
  }
  sleeping.store(false, std::memory_order_relaxed);
}

void UdpEndpoint::Impl::busy_main() {
  uint32_t idle = 0;
  while (running.load(std::memory_order_acquire)) {
    size_t moved;
    {
      std::lock_guard<std::mutex> lk(mu);
      moved = progress_locked();
      ++io.thread_rounds;
    }
    if (moved != 0) {
      idle = 0;
      cv.notify_all();
      continue;
    }
    if (++idle < 20000) {
      std::this_thread::yield();
      continue;
    }
    // Long idle: sleep on the epoll fd (datagram, timer, or a post wakes us).
    {
      std::lock_guard<std::mutex> lk(mu);
      arm_timer(clock_now());
    }
    sleeping.store(true, std::memory_order_release);
    epoll_event evs[4];
    const int n = epoll_wait(epfd, evs, 4, 1);
    sleeping.store(false, std::memory_order_release);
    consume_wakeups(evs, std::max(n, 0));
    if (n > 0) idle = 0;
  }
}

}  // namespace metaroce::udp
