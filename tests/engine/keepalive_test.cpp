// CONN-9: an idle connection checks, now and then, that its peer still holds
// it, and fails kPeerUnreachable when the peer is gone. Before the rule, an
// idle connection never timed out: a crashed peer's, or one a peer had
// forgotten (a lost late ACCEPT or DISCONNECT, CONN-7), stayed for ever.
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <random>
#include <tuple>
#include <vector>

#include "engine_util.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint64_t kKeepalive = 10 * kSecond;  // the defaults, which these tests pin
constexpr uint64_t kPeerTimeout = 2 * kSecond;

// The first event of endpoint i about `conn`, with the time it was seen.
struct Seen {
  Event ev;
  TimeNs at;
};

// Not copyable: run_until takes a std::function, which would copy it and
// leave `seen` unset here; hand it a lambda that calls it.
class Watch {
 public:
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  Watch(Loop& loop, int i, ConnId conn) : loop_(loop), i_(i), conn_(conn) {}
  // True once an event about the connection came (polled as time passes).
  bool operator()() {
    Event ev;
    while (loop_.ep(i_).poll_event(ev))
      if (ev.conn == conn_ && !seen) seen = Seen{ev, loop_.now()};
    return seen.has_value();
  }
  std::optional<Seen> seen;

 private:
  Loop& loop_;
  int i_;
  ConnId conn_;
};

// PROBEs each endpoint sent, by path slot.
struct ProbeCount {
  std::array<std::array<int, kMaxPaths>, 2> by_slot{};
  int total(int from) const {
    int n = 0;
    for (int k : by_slot[static_cast<size_t>(from)]) n += k;
    return n;
  }
};

// A connection made (endpoint 0's `a`, endpoint 1's `b`) and left idle, the
// PROBEs of both ends counted.
struct IdleConnection {
  IdleConnection(const EndpointConfig& c0, const EndpointConfig& c1) : loop(c0, c1) {
    std::tie(a, b) = loop.connect();
    loop.on_sent = [this](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
      if (d[1] == static_cast<uint8_t>(wire::Opcode::kProbe))
        ++probes.by_slot[static_cast<size_t>(from)][tag_slot(d)];
    };
  }
  IdleConnection(const IdleConnection&) = delete;  // the on_sent hook holds `this`
  IdleConnection& operator=(const IdleConnection&) = delete;

  Loop loop;
  ConnId a, b;
  ProbeCount probes;
};

// From now on every datagram is lost, both ways: the peer vanished (a crash,
// a cable pulled).
void lose_everything(Loop& loop) {
  loop.drop = [](int, const std::vector<uint8_t>&) { return true; };
}

TEST(Keepalive, TheDefaultsAreTenSecondsOfQuietThenThePeerTimeout) {
  const EndpointConfig c;
  EXPECT_EQ(c.recovery.keepalive_ns, kKeepalive);
  EXPECT_EQ(c.recovery.peer_timeout_ns, kPeerTimeout);
}

// The peer vanishes (a crash, a cable pulled) while the connection is idle.
// Both ends find out: each fails kPeerUnreachable between keepalive_ns +
// peer_timeout_ns and one max_rto later, after a few tens of PROBEs (PATH-6's
// growth by half, to max_rto). Before CONN-9, neither ever did.
TEST(Keepalive, AnIdleConnectionWhosePeerVanishedFailsPeerUnreachable) {
  IdleConnection idle(cfg(901), cfg(902));
  auto& [loop, a, b, probes] = idle;
  ASSERT_TRUE(a.valid() && b.valid());
  lose_everything(loop);
  const TimeNs quiet_from = loop.now();
  Watch wa(loop, 0, a), wb(loop, 1, b);
  ASSERT_TRUE(loop.run_until(
      [&] {
        const bool seen_a = wa(), seen_b = wb();  // both polled every time
        return seen_a && seen_b;
      },
      20 * kSecond));
  for (const Watch* w : {&wa, &wb}) {
    EXPECT_EQ(w->seen->ev.kind, EventKind::kError);
    EXPECT_EQ(w->seen->ev.status, Status::kPeerUnreachable);
    const uint64_t after = w->seen->at.since(quiet_from);
    // From the last packet it handled, a few microseconds before quiet_from.
    EXPECT_GE(after, kKeepalive + kPeerTimeout - 10 * kMicrosecond);
    EXPECT_LE(after, kKeepalive + kPeerTimeout + 10 * kMicrosecond);
  }
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_GE(probes.total(i), 10);  // retried, the interval growing
    EXPECT_LE(probes.total(i), 40);  // not one per RTO for 2 s
  }
  EXPECT_FALSE(loop.ep(0).is_established(a));
}

// The peer restarted and knows nothing of the connection: it answers no
// PROBE (BAD-7), so the idle connection fails, rather than waiting for
// work to be posted and fail.
TEST(Keepalive, AConnectionAPeerForgotAcrossARestartFails) {
  Loop loop(cfg(903), cfg(904));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  loop.restart(1, cfg(905));
  Watch wa(loop, 0, a);
  ASSERT_TRUE(loop.run_until([&] { return wa(); }, 20 * kSecond));
  EXPECT_EQ(wa.seen->ev.kind, EventKind::kError);
  EXPECT_EQ(wa.seen->ev.status, Status::kPeerUnreachable);
  EXPECT_GT(loop.ep(1).endpoint_stats().unknown_connection, 0u);  // PROBEs it dropped
}

// A live peer keeps an idle connection: over ten minutes, with 10 % of
// datagrams lost, both ends stay established and nothing is reported, at
// about one PROBE per keepalive interval between them.
TEST(Keepalive, ALivePeerKeepsAnIdleConnectionWithAFewProbes) {
  for (const double loss : {0.0, 0.1}) {
    SCOPED_TRACE(loss);
    IdleConnection idle(cfg(906), cfg(907));
    auto& [loop, a, b, probes] = idle;
    ASSERT_TRUE(a.valid() && b.valid());
    SCOPED_TRACE("loss seed 906");
    std::mt19937_64 rng(906);
    std::uniform_real_distribution<double> u(0, 1);
    loop.drop = [&](int, const std::vector<uint8_t>&) { return u(rng) < loss; };
    Watch wa(loop, 0, a), wb(loop, 1, b);
    EXPECT_FALSE(loop.run_until(
        [&] {
          const bool seen_a = wa(), seen_b = wb();
          return seen_a || seen_b;
        },
        600 * kSecond));
    EXPECT_TRUE(loop.ep(0).is_established(a));
    EXPECT_TRUE(loop.ep(1).is_established(b));
    const int sent = probes.total(0) + probes.total(1);
    EXPECT_GE(sent, 55);  // 600 s / 10 s, the PROBEs of both ends together
    EXPECT_LE(sent, loss == 0 ? 62 : 90);
  }
}

// Each PROBE of a keepalive goes on the next path: a dead link under one
// path fails no keepalive.
TEST(Keepalive, AKeepaliveWhosePathIsOnADeadLinkTriesTheNext) {
  EndpointConfig c0 = cfg(908), c1 = cfg(909);
  c1.recovery.keepalive_ns = 0;  // endpoint 0's keepalives only
  IdleConnection idle(c0, c1);
  auto& [loop, a, b, probes] = idle;
  ASSERT_TRUE(a.valid() && b.valid());
  // Path slot 0's link is dead, in both directions, while the connection
  // is idle: datagrams tagged slot 0 (echoes of it included) are lost.
  loop.drop = [](int, const std::vector<uint8_t>& d) {
    return d[1] == static_cast<uint8_t>(wire::Opcode::kProbe) && tag_slot(d) == 0;
  };
  Watch wa(loop, 0, a);
  EXPECT_FALSE(loop.run_until([&] { return wa(); }, 100 * kSecond));
  EXPECT_TRUE(loop.ep(0).is_established(a));
  EXPECT_GE(probes.by_slot[0][0], 9);  // each keepalive tries slot 0 first
  EXPECT_GE(probes.by_slot[0][1], 9);  // and slot 1 next, which answers
  EXPECT_EQ(probes.by_slot[0][2], 0);
}

// CONN-7's gap: the responder's ACCEPT is lost and the requester closes
// while CONNECTING, so no late ACCEPT reaches it to draw its DISCONNECT. The
// responder's connection, which nothing closed before, now fails at its
// first keepalive, the requester answering none of its PROBEs (BAD-7).
TEST(Keepalive, AResponderWhoseAcceptWasLostEndsTheConnectionItHolds) {
  Loop loop(cfg(914), cfg(915));
  loop.drop = [](int from, const std::vector<uint8_t>& d) {
    return from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kConnectAccept);
  };
  ConnId a, b;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  ASSERT_TRUE(loop.run_until(
      [&] {
        Event ev;
        while (loop.ep(1).poll_event(ev))
          if (ev.kind == EventKind::kAccepted) b = ev.conn;
        return b.valid();
      },
      kSecond));
  loop.ep(0).close(a, loop.now());  // still CONNECTING: it sends nothing
  const TimeNs closed_at = loop.now();
  Watch wb(loop, 1, b);
  ASSERT_TRUE(loop.run_until([&] { return wb(); }, 20 * kSecond));
  EXPECT_EQ(wb.seen->ev.kind, EventKind::kError);
  EXPECT_EQ(wb.seen->ev.status, Status::kPeerUnreachable);
  EXPECT_LE(wb.seen->at.since(closed_at), kKeepalive + kPeerTimeout);
  EXPECT_GE(wb.seen->at.since(closed_at), kKeepalive + kPeerTimeout - 20 * kMillisecond);
  // Its application closes it; the DISCONNECTs go unanswered (unknown
  // connection), and the connection is gone after CONN-2's attempts.
  loop.ep(1).close(b, loop.now());
  Watch closed(loop, 1, b);
  ASSERT_TRUE(loop.run_until([&] { return closed(); }, kSecond));
  EXPECT_EQ(closed.seen->ev.kind, EventKind::kClosed);
  EXPECT_FALSE(loop.ep(1).is_established(b));
}

// The quiet counts from the handshake: a driver's clock is far from zero
// (CLOCK_MONOTONIC counts from boot), and a connection that took its quiet
// from the clock's zero probed the moment it was made.
TEST(Keepalive, TheQuietCountsFromTheHandshakeNotFromTheClocksZero) {
  Loop loop(cfg(916), cfg(917));
  loop.pass_time(3600 * kSecond);  // an hour of uptime
  TimeNs first_probe = TimeNs::never();
  loop.on_sent = [&](int, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (d[1] == static_cast<uint8_t>(wire::Opcode::kProbe) && first_probe == TimeNs::never())
      first_probe = loop.now();
  };
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  const TimeNs connected = loop.now();
  loop.run_until([&] { return first_probe != TimeNs::never(); }, 20 * kSecond);
  ASSERT_NE(first_probe, TimeNs::never());
  EXPECT_GE(first_probe.since(connected), kKeepalive - 10 * kMicrosecond);
  EXPECT_LE(first_probe.since(connected), kKeepalive + 10 * kMicrosecond);
}

// keepalive_ns 0 turns the rule off: a vanished peer's idle connection then
// stays, and no PROBE is sent (the behaviour before CONN-9).
TEST(Keepalive, ZeroTurnsItOff) {
  EndpointConfig c0 = cfg(910), c1 = cfg(911);
  c0.recovery.keepalive_ns = c1.recovery.keepalive_ns = 0;
  IdleConnection idle(c0, c1);
  auto& [loop, a, b, probes] = idle;
  ASSERT_TRUE(a.valid() && b.valid());
  lose_everything(loop);
  Watch wa(loop, 0, a);
  EXPECT_FALSE(loop.run_until([&] { return wa(); }, 60 * kSecond));
  EXPECT_TRUE(loop.ep(0).is_established(a));
  EXPECT_EQ(probes.total(0) + probes.total(1), 0);
  EXPECT_EQ(loop.ep(0).next_timeout(), TimeNs::never());
}

// Work posted during a keepalive is timed by PATH-7 from when it was
// posted, not from the keepalive's first PROBE: a keepalive at its last
// PROBE does not fail a WRITE posted a moment before.
TEST(Keepalive, WorkPostedWhileAKeepaliveWaitsIsTimedFromItsPost) {
  Loop loop(cfg(912), cfg(913));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 4096, kAccessLocalWrite);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  // Silent from just before the keepalive, for 1.9 s of its 2 s.
  const TimeNs silent_from = loop.now() + (kKeepalive - kMillisecond);
  const TimeNs silent_to = silent_from + 1900 * kMillisecond;
  loop.drop = [&](int, const std::vector<uint8_t>&) {
    return loop.now() >= silent_from && loop.now() < silent_to;
  };
  Watch wa(loop, 0, a);
  EXPECT_FALSE(
      loop.run_until([&] { return wa(); }, silent_to.since(loop.now()) - 10 * kMillisecond));
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, 5 * kSecond));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_FALSE(wa());
  EXPECT_TRUE(loop.ep(0).is_established(a));
}

// A WRITE posted on an idle connection keepalive_ns and 1 ms after its last
// packet, no timer served meanwhile, then the timer served before anything
// else: it completes, and no PROBE goes before or with it. polled_first: the
// engine was given the time (a poll that found nothing to send) just before
// the post.
void post_as_the_quiet_runs_out(uint64_t seed, bool polled_first) {
  IdleConnection idle(cfg(seed), cfg(seed + 1));
  auto& [loop, a, b, probes] = idle;
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 4096, kAccessLocalWrite);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  loop.pass_time(kKeepalive + kMillisecond);
  ASSERT_LE(loop.ep(0).next_timeout(), loop.now());
  if (polled_first) {
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    ASSERT_FALSE(loop.ep(0).poll_transmit(loop.now(), buf, tx));  // nothing to send yet
  }
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  loop.ep(0).handle_timeout(loop.now());
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kSecond));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(probes.total(0), 0);
}

// Work posted ends the quiet as a packet from the peer does: posted as the
// keepalive falls due, before the timer is served (a driver's progress loop
// that polled, found nothing to send, then took the application's WRITE), it
// leaves with no PROBE before it. Had the post not counted as activity, the
// timer served next found keepalive_ns of quiet and probed the peer needlessly.
TEST(Keepalive, WorkPostedAsTheQuietRunsOutDrawsNoProbe) { post_as_the_quiet_runs_out(926, true); }

// The same post with the engine given no time for longer than the quiet (a
// driver asleep, its process paused): the engine has no clock of its own, so
// the post counts from the first time it is given after it. Stamped with the
// time of the call before, keepalive_ns past, it left the timer served next
// finding the quiet run out, and a PROBE went with the WRITE.
TEST(Keepalive, WorkPostedAfterTheEngineWasGivenNoTimeDrawsNoProbe) {
  post_as_the_quiet_runs_out(928, false);
}

// A receive posted is no word from the peer, and no work PATH-7 times: an
// application that keeps receives posted (one a second, as a server
// replenishing its queue would) does not keep a vanished peer's idle
// connection up. Before, each post_recv answered the keepalive, and the
// connection never failed.
TEST(Keepalive, ReceivesPostedDoNotAnswerTheKeepalive) {
  Loop loop(cfg(918), cfg(919));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  lose_everything(loop);
  const TimeNs quiet_from = loop.now();
  TimeNs next_post = quiet_from;
  Watch wa(loop, 0, a);
  ASSERT_TRUE(loop.run_until(
      [&] {
        if (loop.now() >= next_post) {
          EXPECT_EQ(loop.ep(0).post_recv(a, RecvWr{}), Status::kOk);
          next_post = loop.now() + kSecond;
        }
        return wa();
      },
      20 * kSecond));
  EXPECT_EQ(wa.seen->ev.kind, EventKind::kError);
  EXPECT_EQ(wa.seen->ev.status, Status::kPeerUnreachable);
  EXPECT_LE(wa.seen->at.since(quiet_from), kKeepalive + kPeerTimeout + 10 * kMicrosecond);
}

// CONN-9's schedule, exactly: an idle connection whose peer vanished sends
// its PROBEs on each path in turn, the first two a path's RTO apart (min_rto:
// no path has a sample), each interval after half as long again as the one
// before, to max_rto, where they stay until peer_timeout after the first
// PROBE; then it fails. peer_timeout 30 s: some 300 PROBEs, so that the
// schedule stays at max_rto a long while, and the turns go on past the 255th
// PROBE (a count that stops there once chose the slot: every PROBE from the
// 256th on went on one path).
TEST(Keepalive, ProbesTakeThePathsInTurnTheirIntervalGrowingByHalfToMaxRto) {
  EndpointConfig c = cfg(909);
  c.recovery.peer_timeout_ns = 30 * kSecond;
  Loop loop(c, cfg(910));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  std::vector<std::pair<TimeNs, uint8_t>> probes;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kProbe))
      probes.emplace_back(loop.now(), tag_slot(d));
  };
  lose_everything(loop);
  Watch wa(loop, 0, a);
  ASSERT_TRUE(loop.run_until([&] { return wa(); }, kKeepalive + 31 * kSecond));
  EXPECT_EQ(wa.seen->ev.status, Status::kPeerUnreachable);
  const RecoveryConfig& r = c.recovery;
  const uint64_t base = std::max(r.min_rto_ns, r.initial_rtt_ns + 4 * (r.initial_rtt_ns / 2));
  ASSERT_GT(probes.size(), 270u);
  uint64_t want = base;
  for (size_t i = 0; i < probes.size(); ++i) {
    ASSERT_EQ(probes[i].second, i % c.num_paths) << "PROBE " << i;
    if (i == 0) continue;
    ASSERT_EQ(probes[i].first.since(probes[i - 1].first), want) << "PROBE " << i;
    want = std::min(want + want / 2, r.max_rto_ns);
  }
  EXPECT_EQ(want, r.max_rto_ns);
  EXPECT_EQ(wa.seen->at.since(probes[0].first), r.peer_timeout_ns);
}

}  // namespace
}  // namespace metaroce::test
