// A minimal two-endpoint shuttle for engine unit tests: every datagram is
// delivered after a fixed delay unless a drop filter says otherwise. The
// seeded multi-path network lives in harness/; this keeps unit tests
// independent of it.
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "metaroce/engine.hpp"

namespace metaroce::test {

// A link that passes one packet at a time, for extra_delay hooks that model
// queueing: a packet leaves no sooner than `earliest`, nor sooner than gap_ns
// after the one before it. pass() returns when it leaves.
struct SerialLink {
  TimeNs free{};
  TimeNs pass(TimeNs earliest, uint64_t gap_ns) {
    free = std::max(earliest, free + gap_ns);
    return free;
  }
};

struct InFlight {
  TimeNs at;
  int to;
  RxDatagram dg;
  std::vector<uint8_t> bytes;
};

class Loop {
 public:
  Loop(const EndpointConfig& a, const EndpointConfig& b) {
    ep_[0] = std::make_unique<Endpoint>(a);
    ep_[1] = std::make_unique<Endpoint>(b);
    addr_[0].len = addr_[1].len = 1;
    addr_[0].bytes[0] = 'A';
    addr_[1].bytes[0] = 'B';
  }
  Endpoint& ep(int i) { return *ep_[i]; }
  // The process behind endpoint i restarts: a new endpoint, knowing nothing
  // of the old one's connections, at the same address. Datagrams in flight
  // to the old one reach the new one.
  void restart(int i, const EndpointConfig& c) { ep_[i] = std::make_unique<Endpoint>(c); }
  const PeerAddr& addr(int i) const { return addr_[i]; }
  TimeNs now() const { return now_; }
  static constexpr uint64_t kDelayNs = 2000;  // each way, unless a test sets delay_ns
  uint64_t delay_ns = kDelayNs;
  // Return true to drop. Called with sender index and the datagram bytes.
  std::function<bool(int from, const std::vector<uint8_t>&)> drop;
  std::function<void(int from, std::vector<uint8_t>&)> mutate;
  // Return true to deliver the datagram with IP ECN = CE.
  std::function<bool(int from, const TxDatagram& tx, const std::vector<uint8_t>&)> mark_ce;
  // Called before each poll_transmit and with each datagram it returns.
  std::function<void(int from)> before_poll;
  std::function<void(int from, const TxDatagram& tx, const std::vector<uint8_t>&)> on_sent;
  // Return true to deliver the datagram flagged trimmed (RxDatagram::trimmed,
  // the driver's TRIMMED code point, TRIM-1); the hook may cut its bytes as a
  // trimming switch would. Called after mutate, for datagrams not dropped.
  std::function<bool(int from, std::vector<uint8_t>&)> trim;
  // Nanoseconds a datagram waits on top of delay_ns (reordering).
  std::function<uint64_t(int from, const std::vector<uint8_t>&)> extra_delay;
  uint64_t delivered = 0;

  void pump() {
    for (int i = 0; i < 2; ++i) {
      std::vector<uint8_t> buf(70000);
      TxDatagram tx;
      for (;;) {
        if (before_poll) before_poll(i);
        if (!ep_[i]->poll_transmit(now_, buf, tx)) break;
        std::vector<uint8_t> bytes(buf.begin(), buf.begin() + static_cast<long>(tx.len));
        if (on_sent) on_sent(i, tx, bytes);
        if (mutate) mutate(i, bytes);
        if (drop && drop(i, bytes)) continue;
        const bool ce = mark_ce && mark_ce(i, tx, bytes);
        const bool trimmed = trim && trim(i, bytes);
        const uint64_t wait = delay_ns + (extra_delay ? extra_delay(i, bytes) : 0);
        InFlight f{now_ + wait, 1 - i, RxDatagram{addr_[i], tx.entropy, ce, {}, trimmed},
                   std::move(bytes)};
        // Kept in arrival order; equal times keep their sending order.
        auto at = std::upper_bound(q_.begin(), q_.end(), f.at,
                                   [](TimeNs t, const InFlight& g) { return t < g.at; });
        q_.insert(at, std::move(f));
      }
    }
  }

  // Runs until pred() or until simulated time passes `limit`.
  bool run_until(const std::function<bool()>& pred, uint64_t limit_ns = 5'000'000'000ull) {
    const TimeNs end = now_ + limit_ns;
    pump();
    while (!pred()) {
      TimeNs next = std::min(ep_[0]->next_timeout(), ep_[1]->next_timeout());
      if (!q_.empty()) next = std::min(next, q_.front().at);
      if (next == TimeNs::never() || next > end) return pred();
      now_ = std::max(now_, next);
      while (!q_.empty() && q_.front().at <= now_) {
        InFlight f = std::move(q_.front());
        q_.pop_front();
        f.dg.bytes = f.bytes;
        ep_[f.to]->handle_datagram(f.dg, now_);
        ++delivered;
      }
      for (int i = 0; i < 2; ++i)
        if (ep_[i]->next_timeout() <= now_) ep_[i]->handle_timeout(now_);
      pump();
    }
    return true;
  }

  // Lets simulated time pass with nothing delivered and no timer served
  // (an application that does not call the engine meanwhile).
  void pass_time(uint64_t ns) { now_ = now_ + ns; }

  // Connects 0 -> 1; returns {conn on 0, conn on 1}.
  // max_mtu: what endpoint 0's connection offers, if less than its mtu (CONN-1).
  std::pair<ConnId, ConnId> connect(uint16_t max_mtu = 0) {
    ConnId a;
    if (ep_[0]->connect(addr_[1], now_, a, max_mtu) != Status::kOk) return {};
    ConnId b;
    bool up = false;
    run_until([&] {
      Event ev;
      while (ep_[1]->poll_event(ev))
        if (ev.kind == EventKind::kAccepted) b = ev.conn;
      while (ep_[0]->poll_event(ev))
        if (ev.kind == EventKind::kConnected) up = true;
      return up && b.valid();
    });
    return {a, b};
  }

  std::vector<Completion> drain(int i) {
    std::vector<Completion> out;
    Completion c;
    while (ep_[i]->poll_completion(c)) out.push_back(c);
    return out;
  }

  // Runs until endpoint i has reported n completions (appended to done).
  bool run_until_completions(int i, size_t n, std::vector<Completion>& done,
                             uint64_t limit_ns = 5'000'000'000ull) {
    return run_until(
        [&] {
          for (Completion& c : drain(i)) done.push_back(c);
          return done.size() >= n;
        },
        limit_ns);
  }

 private:
  std::unique_ptr<Endpoint> ep_[2];
  PeerAddr addr_[2];
  TimeNs now_{1'000'000};
  std::deque<InFlight> q_;
};

}  // namespace metaroce::test
