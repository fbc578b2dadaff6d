// Path failure, retirement and exploration (spec 9.2, with LOSS-5): a
// timed-out path's window and state, a silent path found by its unanswered
// probe while a silent peer blames none, a loss run counted once towards a
// retirement, and paths moved to other links and back.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

// How many times path 0's entropy is retired when it loses the data packets
// `drop(n)` picks (write_over_a_lossy_path).
uint64_t retirements_of_a_lossy_path(const std::function<bool(uint64_t)>& drop) {
  const PathStats p0 = write_over_a_lossy_path(
      172, 64, drop, [](uint64_t) { return false; }, [](const PathStats&) {});
  EXPECT_GT(p0.losses, 0u);
  return p0.retirements;
}

TEST(Engine, LossRunOnAPathCountsOnceTowardsItsRetirement) {  // PATH-5
  // A drop-tail queue that overflows drops a run of a path's consecutive
  // packets: one outcome, not 20 (20 would lift the loss EWMA from about 0
  // to 15 % and retire a path that is merely busy).
  EXPECT_EQ(retirements_of_a_lossy_path([](uint64_t n) { return n > 300 && n <= 320; }), 0u);
  // A link that drops every fifth packet is still found out.
  EXPECT_GE(retirements_of_a_lossy_path([](uint64_t n) { return n % 5 == 0; }), 1u);
}

TEST(Engine, TimedOutPathFallsToItsShareOfTheConnectionFloor) {  // LOSS-5, CC-6
  Loop loop(cfg(150), cfg(151));                                 // 4 paths
  auto [a, b] = loop.connect();
  PathStats dead;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 1, dead));
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    // Data and PROBEs on slot 1: neither the tail-loss probe nor LOSS-2 can
    // recover its packets, so only its RTO can.
    return from == 0 && (d[1] == 0x01 || d[1] == 0x12) && tag_slot(d) == 1;
  };
  Buf src(loop.ep(0), 1 << 20, 0, 0x21);
  Buf dst(loop.ep(1), 1 << 20, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  PathStats ps;
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).path_stats(a, 1, ps) && ps.timeouts > 0; }));
  EXPECT_EQ(ps.state, PathState::kProbing);
  EXPECT_EQ(ps.cwnd_bytes, (4096u + 64u) / 4);  // one packet shared by 4 paths
}

TEST(Engine, PathBackFromATimeoutKeepsItsFloorWindow) {  // PATH-4, LOSS-5, CC-2
  // Slot 1 loses its data and PROBEs until it times out; then its PROBE gets
  // through. The answer makes it ACTIVE with the floor window the RTO left
  // it, in slow start, not the initial window: a timeout caused by
  // congestion must not end in a fresh burst (a retired path's new entropy,
  // PATH-6, is another matter).
  Loop loop(cfg(152), cfg(153));  // 4 paths
  auto [a, b] = loop.connect();
  bool dark = true;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return dark && from == 0 && (d[1] == 0x01 || d[1] == 0x12) && tag_slot(d) == 1;
  };
  Buf src(loop.ep(0), 1 << 20, 0, 0x22);
  Buf dst(loop.ep(1), 1 << 20, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  PathStats ps;
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).path_stats(a, 1, ps) && ps.timeouts > 0; }));
  ASSERT_EQ(ps.state, PathState::kProbing);
  const uint32_t floor = (4096u + 64u) / 4;  // one packet shared by 4 paths (CC-6)
  ASSERT_EQ(ps.cwnd_bytes, floor);
  dark = false;
  // The first look after the PROBE's answer, before any data goes on it.
  uint32_t cwnd_when_active = 0;
  loop.before_poll = [&](int from) {
    PathStats now;
    if (from == 0 && cwnd_when_active == 0 && loop.ep(0).path_stats(a, 1, now) &&
        now.state == PathState::kActive)
      cwnd_when_active = now.cwnd_bytes;
  };
  ASSERT_TRUE(loop.run_until([&] { return cwnd_when_active != 0; }));
  EXPECT_EQ(cwnd_when_active, floor);
  ASSERT_TRUE(loop.ep(0).path_stats(a, 1, ps));
  EXPECT_EQ(ps.retirements, 0u);  // the same entropy came back, not a new one
}

// ... and grows from there in slow start (LOSS-5), also when a congestion
// signal before the timeout had ended its first slow start: here slot 1's
// first data packets arrive CE-marked (a cut, CC-4), then it goes dark and
// times out. Once its PROBE is answered, each packet acknowledged on it adds
// a packet to its window; congestion avoidance would add about one a window.
// Slow start is set again in one place, where the PROBING path becomes ACTIVE
// (PATH-4): this test is what fails if that place forgets it.
TEST(Engine, PathBackFromATimeoutGrowsInSlowStartThoughACutCameBefore) {  // LOSS-5, CC-2, PATH-4
  EndpointConfig c = cfg(154);
  c.cc.max_cwnd_packets = 16;  // 4 paths; the data lasts past the timeout
  Loop loop(c, cfg(155));
  loop.delay_ns = 10'000;
  auto [a, b] = loop.connect();
  int marked = 0;
  loop.mark_ce = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && tag_slot(d) == 1 && ++marked <= 4;
  };
  bool dark = false;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return dark && from == 0 && (d[1] == 0x01 || d[1] == 0x12) && tag_slot(d) == 1;
  };
  Buf src(loop.ep(0), 8 << 20, 0, 0x23);
  Buf dst(loop.ep(1), 8 << 20, kAccessRemoteWrite);
  for (uint64_t id = 0; id < 8; ++id)  // outlasting the timeout
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 8 << 20, id)), Status::kOk);
  PathStats ps;
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).path_stats(a, 1, ps) && ps.ce_marks > 0; }));
  dark = true;
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).path_stats(a, 1, ps) && ps.timeouts > 0; }));
  const uint32_t floor = (4096u + 64u) / 4;  // one packet shared by 4 paths (CC-6)
  ASSERT_EQ(ps.cwnd_bytes, floor);
  dark = false;
  ASSERT_TRUE(loop.run_until(
      [&] { return loop.ep(0).path_stats(a, 1, ps) && ps.state == PathState::kActive; }));
  const uint64_t acked = ps.packets_acked;
  ASSERT_TRUE(loop.run_until(
      [&] { return loop.ep(0).path_stats(a, 1, ps) && ps.packets_acked >= acked + 4; }));
  ASSERT_LT(loop.drain(0).size(), 8u) << "the WRITEs ended: the windows were no longer full";
  EXPECT_GE(ps.cwnd_bytes, floor + 4 * (4096u + 64u)) << (ps.packets_acked - acked) << " acked";
}

TEST(Engine, ProbingPathCarriesOnlyProbes) {  // SCHED-3, PATH-4, PATH-6
  // Slot 1 of 4 goes dark for good, PROBEs included, under an 8 MiB WRITE:
  // it times out, probes, is retired and probes again on new entropies.
  // While it is PROBING nothing but PROBEs may leave on it; the WRITE goes
  // on over the other three.
  Loop loop(cfg(220), cfg(221));  // 4 paths
  auto [a, b] = loop.connect();
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && (d[1] == 0x01 || d[1] == 0x12) && tag_slot(d) == 1;
  };
  int data_while_probing = 0, probes = 0, data_elsewhere = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 0) return;
    PathStats ps;
    const bool probing = loop.ep(0).path_stats(a, 1, ps) && ps.state == PathState::kProbing;
    if (!probing) return;
    const bool on_slot_1 = tag_slot(d) == 1;
    if (d[1] == 0x12) probes += on_slot_1;
    if (d[1] == 0x01) (on_slot_1 ? data_while_probing : data_elsewhere)++;
  };
  ASSERT_NO_FATAL_FAILURE(write_and_check(loop, a, 8 << 20, 0x22));
  EXPECT_EQ(data_while_probing, 0);
  EXPECT_GE(probes, 1);            // the premise: slot 1 was PROBING and said so
  EXPECT_GT(data_elsewhere, 100);  // while the WRITE went on
}

// Path 0 of two goes dark (PROBEs included) under a 16-packet WRITE, after
// RTT samples on both paths. Returns path 0's state after the WRITE completed
// and how long that took.
struct DarkPathRun {
  PathStats path0;
  PathStats path0_before;
  uint64_t took_ns = 0;
};
DarkPathRun run_with_a_dark_path(bool cc_enabled) {
  EndpointConfig c = cfg(198, 2);
  c.cc.enabled = cc_enabled;
  WritePair w(c, 199, Loop::kDelayNs, 16 * 4096, 0x4e);
  auto& [loop, a, src, dst] = w;
  DarkPathRun out;
  EXPECT_TRUE(warm_up_paths(loop, a, src, dst));  // RTT samples on both paths, in turn
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, out.path0_before));
  loop.drop = [](int from, const std::vector<uint8_t>& d) {
    return from == 0 && tag_slot(d) == 0 && (d[1] == 0x01 || d[1] == 0x12);
  };
  const TimeNs start = loop.now();
  EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 16 * 4096, 99)), Status::kOk);
  std::vector<Completion> done;
  EXPECT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done.at(0).status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  out.took_ns = loop.now().since(start);
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, out.path0));
  return out;
}

TEST(Engine, UnansweredTailProbeTimesThePathOutEarly) {  // LOSS-8, LOSS-5, PATH-4
  // The tail-loss timer resends path 0's oldest packet elsewhere and probes;
  // the probe's silence must end the path's round then, not the RTO (1 ms).
  const DarkPathRun r = run_with_a_dark_path(true);
  // Two tail-loss timers (about 1.25 srtt + ack_delay each) and a round trip.
  EXPECT_LT(r.took_ns, 100 * kMicrosecond);
  EXPECT_EQ(r.path0.timeouts, 1u);
  EXPECT_NE(r.path0.state, PathState::kActive);
}

TEST(Engine, SilentPeerTimesNoPathOutEarly) {  // LOSS-8, LOSS-5
  // The receiving process pauses (a busy host): for 300 us everything it
  // sends waits, on every path alike, then leaves in order. That is many
  // tail-loss timers (srtt is a few us) but less than min_rto (1 ms). The
  // probes' silence blames no path: none may time out, and no window is cut
  // to the floor for it.
  EndpointConfig c = cfg(196, 4);
  WritePair w(c, 197, Loop::kDelayNs, 64 * 4096, 0x3c);
  auto& [loop, a, src, dst] = w;
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 16 * 4096, 1)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));  // RTT samples on every path
  const TimeNs pause_start = loop.now();
  const TimeNs pause_end = pause_start + 300 * kMicrosecond;
  loop.extra_delay = [&](int from, const std::vector<uint8_t>&) -> uint64_t {
    return from == 1 && loop.now() < pause_end ? pause_end.since(loop.now()) : 0;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 64 * 4096, 2)), Status::kOk);
  ASSERT_TRUE(loop.run_until_completions(0, 2, done));
  EXPECT_EQ(done.at(1).status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_GT(loop.now().since(pause_start), 300 * kMicrosecond);
  uint64_t probes = 0;
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    EXPECT_EQ(ps.timeouts, 0u) << "path " << i;
    EXPECT_EQ(ps.retirements, 0u) << "path " << i;
    probes += ps.probes_sent;
  }
  EXPECT_GT(probes, 0u);  // the tail-loss timers did run during the pause
}

TEST(Engine, DisabledCongestionControlKeepsTheWindowThroughATimeout) {  // CC-8, LOSS-5
  const DarkPathRun r = run_with_a_dark_path(false);
  EXPECT_EQ(r.path0.timeouts, 1u);
  EXPECT_EQ(r.path0.cwnd_bytes, r.path0_before.cwnd_bytes);
}

// PATH-8's test bed: two links, each a FIFO that takes `gap_ns` per packet,
// and a route from entropy to link, as a hashing switch would have it. A
// 4 MiB WRITE over two paths keeps them busy for a few ms.
struct TestLink {
  uint64_t gap_ns, delay_ns;
};
struct ExploreOutcome {
  std::vector<uint8_t> moved;  // slots, in the order they moved (a return counts)
  std::array<uint16_t, 2> entropy_before{}, entropy_after{};
  ConnStats conn;
  bool ok = false;
};

// Four 4 MiB WRITEs from endpoint 0 over `a`; true if all complete intact.
bool write_4_mib_four_times(Loop& loop, ConnId a, uint8_t fill) {
  constexpr uint32_t kLen = 1024 * 4096;
  Buf src(loop.ep(0), kLen, 0, fill);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite);
  for (uint64_t i = 0; i < 4; ++i)
    if (loop.ep(0).post_send(a, write_wr(src, dst, kLen, 97 + i)) != Status::kOk) return false;
  std::vector<Completion> done;
  if (!loop.run_until_completions(0, 4, done)) return false;
  bool ok = src.bytes == dst.bytes;
  for (const Completion& d : done) ok = ok && d.status == Status::kOk;
  return ok;
}

// `entropies`: the sender's block of entropy values (0: the default block).
ExploreOutcome run_explore(uint64_t interval_ns, std::array<TestLink, 2> links,
                           const std::function<int(uint16_t entropy, uint16_t path0_entropy,
                                                   uint16_t path1_entropy)>& route,
                           uint16_t entropies = 0) {
  ExploreOutcome out;
  EndpointConfig c = cfg(218, 2);
  c.cc.explore_interval_ns = interval_ns;
  if (entropies != 0) c.entropy_max = static_cast<uint16_t>(c.entropy_min + entropies - 1);
  Loop loop(c, cfg(219));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  for (size_t i = 0; i < 2; ++i) {
    PathStats ps;
    if (!loop.ep(0).path_stats(a, i, ps)) return out;
    out.entropy_before[i] = ps.entropy;
  }
  std::array<SerialLink, 2> serial{};
  uint16_t sent_entropy = 0;
  loop.on_sent = [&](int, const TxDatagram& tx, const std::vector<uint8_t>&) {
    sent_entropy = tx.entropy;
  };
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || (d[1] != 0x01 && d[1] != 0x12)) return 0;  // data and PROBEs
    const int l = route(sent_entropy, out.entropy_before[0], out.entropy_before[1]);
    const TestLink& link = links[static_cast<size_t>(l)];
    const TimeNs arrive = serial[static_cast<size_t>(l)].pass(loop.now(), link.gap_ns);
    return arrive.since(loop.now()) + link.delay_ns;
  };
  loop.ep(0).set_trace(
      [](void* ctx, const TraceEvent& ev) {
        if (ev.kind == TraceKind::kPathExplored)
          static_cast<ExploreOutcome*>(ctx)->moved.push_back(ev.path);
      },
      &out);
  out.ok = write_4_mib_four_times(loop, a, 0x41);
  if (!out.ok) return out;
  for (size_t i = 0; i < 2; ++i) {
    PathStats ps;
    out.ok = out.ok && loop.ep(0).path_stats(a, i, ps);
    out.entropy_after[i] = ps.entropy;
  }
  out.conn = *loop.ep(0).conn_stats(a);
  return out;
}

TEST(Engine, MovedPathThatFindsAnIdleLinkStays) {  // PATH-8
  // Both paths start on link 0; every other entropy leads to link 1, idle.
  // A move there raises the delivery rate: it is kept. Nothing is resent
  // for moving (a path moves once nothing is in flight on it).
  const auto route = [](uint16_t e, uint16_t e0, uint16_t e1) {
    return e == e0 || e == e1 ? 0 : 1;
  };
  const ExploreOutcome r = run_explore(500'000, {TestLink{2'000, 0}, TestLink{2'000, 0}}, route);
  ASSERT_TRUE(r.ok);
  ASSERT_FALSE(r.moved.empty());
  const bool left =
      r.entropy_after[0] != r.entropy_before[0] || r.entropy_after[1] != r.entropy_before[1];
  EXPECT_TRUE(left) << "the move to the idle link was undone";
  EXPECT_EQ(r.conn.path_explorations, r.moved.size());
  EXPECT_EQ(r.conn.retransmissions, 0u);
  EXPECT_EQ(r.conn.path_retirements, 0u);
  // Off: the same run moves nothing.
  const ExploreOutcome off = run_explore(0, {TestLink{2'000, 0}, TestLink{2'000, 0}}, route);
  ASSERT_TRUE(off.ok);
  EXPECT_TRUE(off.moved.empty());
  EXPECT_EQ(off.conn.path_explorations, 0u);
}

// PATH-6, PATH-8: with as many entropy values as paths there is nowhere to
// move, so nothing moves (a move used to put two paths on one value); with
// one value to spare, a move takes exactly that one.
TEST(Engine, ExplorationNeverPutsTwoPathsOnOneEntropy) {
  const auto route = [](uint16_t e, uint16_t e0, uint16_t e1) {
    return e == e0 || e == e1 ? 0 : 1;
  };
  const std::array<TestLink, 2> links{TestLink{2'000, 0}, TestLink{2'000, 0}};
  const ExploreOutcome full = run_explore(500'000, links, route, 2);
  ASSERT_TRUE(full.ok);
  EXPECT_TRUE(full.moved.empty());
  EXPECT_EQ(full.entropy_after, full.entropy_before);
  const ExploreOutcome spare = run_explore(500'000, links, route, 3);
  ASSERT_TRUE(spare.ok);
  ASSERT_FALSE(spare.moved.empty());
  EXPECT_NE(spare.entropy_after[0], spare.entropy_after[1]);
  const uint32_t lo = EndpointConfig{}.entropy_min;
  for (const uint16_t e : spare.entropy_after) {  // within the sender's 3-value block
    EXPECT_GE(e, lo);
    EXPECT_LE(e, lo + 2);
  }
}

TEST(Engine, MoveThatEmptiesALinkIsUndone) {  // PATH-8
  // Path 1 alone on link 1, slower than link 0 (the slowest path, so the
  // one moved); every new entropy leads to link 0. The move leaves link 1
  // empty and the rate falls: path 1 goes back to its old entropy.
  const auto route = [](uint16_t e, uint16_t, uint16_t e1) { return e == e1 ? 1 : 0; };
  const ExploreOutcome r =
      run_explore(500'000, {TestLink{2'000, 0}, TestLink{6'000, 20'000}}, route);
  ASSERT_TRUE(r.ok);
  ASSERT_GE(r.moved.size(), 2u);
  EXPECT_EQ(r.moved[0], 1u);
  EXPECT_EQ(r.moved[1], 1u);  // and back
  EXPECT_EQ(r.entropy_after[1], r.entropy_before[1]);
  EXPECT_EQ(r.conn.retransmissions, 0u);
}

// Two paths, a trial every 500 us (PATH-8).
EndpointConfig two_paths_exploring() {
  EndpointConfig c = cfg(218, 2);
  c.cc.explore_interval_ns = 500'000;
  return c;
}

// PATH-8 with PATH-4/5: path 1 alone on a slow link 1 (so the one a trial
// moves), and from `dark_at_us` after the WRITE starts link 1 loses
// everything, in flight or not, PROBEs included. Whatever retires the path
// and whenever, the path must never return, by a move, to an entropy it was
// retired from. Returns how many times it did.
struct DarkTrialRun {
  int back_to_retired = 0;
  uint64_t retirements = 0;
  bool ok = false;
};
DarkTrialRun run_trial_over_a_link_that_fails(uint64_t dark_at_us) {
  DarkTrialRun out;
  Loop loop(two_paths_exploring(), cfg(219));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  PathStats ps;
  if (!loop.ep(0).path_stats(a, 1, ps)) return out;
  const uint16_t e1 = ps.entropy;
  const TimeNs dark = loop.now() + dark_at_us * kMicrosecond;
  std::array<SerialLink, 2> serial{};
  constexpr std::array<TestLink, 2> links{TestLink{2'000, 0}, TestLink{6'000, 20'000}};
  uint16_t sent_entropy = 0;
  loop.on_sent = [&](int, const TxDatagram& tx, const std::vector<uint8_t>&) {
    sent_entropy = tx.entropy;
  };
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || (d[1] != 0x01 && d[1] != 0x12)) return 0;
    const size_t l = sent_entropy == e1 ? 1 : 0;
    const TimeNs arrive = serial[l].pass(loop.now(), links[l].gap_ns);
    const TimeNs at = arrive + links[l].delay_ns;
    if (l == 1 && at >= dark) return 100 * kSecond;  // lost: it never comes
    return at.since(loop.now());
  };
  struct Seen {
    std::vector<uint16_t> retired;  // entropies path 1 was retired from
    int back = 0;
    uint64_t retirements = 0;
  } seen;
  loop.ep(0).set_trace(
      [](void* ctx, const TraceEvent& ev) {
        auto& s = *static_cast<Seen*>(ctx);
        if (ev.path != 1) return;
        if (ev.kind == TraceKind::kPathRetired) {
          s.retired.push_back(static_cast<uint16_t>(ev.aux));
          ++s.retirements;
        }
        if (ev.kind == TraceKind::kPathExplored &&
            std::find(s.retired.begin(), s.retired.end(), ev.psn) != s.retired.end())
          ++s.back;
      },
      &seen);
  out.ok = write_4_mib_four_times(loop, a, 0x43);
  if (!out.ok) return out;
  out.back_to_retired = seen.back;
  out.retirements = seen.retirements;
  loop.ep(0).set_trace(nullptr, nullptr);
  return out;
}

TEST(Engine, TrialPathRetiredMidTrialNeverMovesBackToTheFailedEntropy) {  // PATH-8, PATH-4
  // Link 1 fails at various times around the first trial (about 500 us
  // after the first ACK): before the trial, while path 1 drains for its
  // move, while it probes its new entropy, in the window that judges it.
  uint64_t retirements = 0;
  for (uint64_t at = 300; at <= 1'500; at += 50) {
    const DarkTrialRun r = run_trial_over_a_link_that_fails(at);
    ASSERT_TRUE(r.ok) << "dark at " << at << " us";
    EXPECT_EQ(r.back_to_retired, 0) << "dark at " << at << " us";
    retirements += r.retirements;
  }
  EXPECT_GT(retirements, 0u);  // the premise: link 1's failure retired path 1
}

// PATH-8 with LOSS-2: path 1 (slow link 1, the one a trial moves) loses
// every 13th data packet; from `dark_at_us` after the WRITE starts path 0's
// entropy leads nowhere (data and PROBEs), every other entropy to link 1.
// Returns the longest time endpoint 0 sent no data packet.
uint64_t longest_data_gap_with_a_dark_path_0(uint64_t dark_at_us) {
  Loop loop(two_paths_exploring(), cfg(219));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  PathStats ps;
  if (!loop.ep(0).path_stats(a, 0, ps)) return ~0ull;
  const uint16_t e0 = ps.entropy;
  const TimeNs dark = loop.now() + dark_at_us * kMicrosecond;
  std::array<SerialLink, 2> serial{};
  constexpr std::array<TestLink, 2> links{TestLink{2'000, 0}, TestLink{6'000, 20'000}};
  uint16_t sent_entropy = 0;
  uint64_t on_link_1 = 0, gap = 0;
  TimeNs last_data = loop.now();
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    sent_entropy = tx.entropy;
    if (from != 0 || d[1] != 0x01) return;
    gap = std::max(gap, loop.now().since(last_data));
    last_data = loop.now();
  };
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 0 || (d[1] != 0x01 && d[1] != 0x12)) return false;
    if (sent_entropy == e0) return loop.now() >= dark;
    return d[1] == 0x01 && ++on_link_1 % 13 == 6;
  };
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || (d[1] != 0x01 && d[1] != 0x12)) return 0;
    const size_t l = sent_entropy == e0 ? 0 : 1;
    const TimeNs arrive = serial[l].pass(loop.now(), links[l].gap_ns);
    return arrive.since(loop.now()) + links[l].delay_ns;
  };
  if (!write_4_mib_four_times(loop, a, 0x44)) return ~0ull;
  return gap;
}

TEST(Engine, DrainingPathWhoseLastPacketsATimerLosesStillMoves) {  // PATH-8, LOSS-2
  // Path 1 drains for a trial while path 0 goes dark. Its last packets,
  // declared lost by a timer, are resent on neither path (path 0 probes,
  // path 1 drains): it must move at once, not wait for an ACK that nothing
  // would draw (with exploration off the longest gap here is under 1 ms).
  for (uint64_t at = 300; at <= 1'500; at += 40)
    EXPECT_LT(longest_data_gap_with_a_dark_path_0(at), kMillisecond) << "dark at " << at << " us";
}

// PATH-8's verdict with something else going on. By default both paths
// start on link 0 and every other entropy leads to link 1, idle, so the
// first trial's move is a good one; `bad_move`: path 1 alone on a slow link
// 1 and every new entropy leads to link 0, so that move empties link 1. The
// application keeps four 64 KiB WRITEs posted (window-limited) until
// `stop_us` after the first move, except that it posts one WRITE every
// 100 us for the first `sparse_us`, or until the first move (offered load
// rises then), and may pause from the move until `pause..._us` after the window
// that judges the move starts (when the moved path answers its probe). Link
// 0 may go dark from that window's start. Returns whether the first move
// was undone (the path moved back to the entropy it left).
struct TrialScene {
  uint64_t interval_ns = 500'000;
  std::array<TestLink, 2> links{TestLink{2'000, 0}, TestLink{2'000, 0}};
  bool bad_move = false;
  uint64_t stop_us = 600;
  uint64_t sparse_us = 0;
  uint64_t pause_from_move_to_window_plus_us = 0;  // 0: no pause
  uint64_t link_0_dark_us = 0;                     // from the window's start; 0: never
};
struct TrialVerdict {
  bool ok = false, moved = false, undone = false;
  uint64_t timeouts = 0;
};
TrialVerdict first_trial_with(const TrialScene& s) {
  TrialVerdict out;
  EndpointConfig c = cfg(218, 2);
  c.cc.explore_interval_ns = s.interval_ns;
  Loop loop(c, cfg(219));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  std::array<uint16_t, 2> e{};
  for (size_t i = 0; i < 2; ++i) {
    PathStats ps;
    if (!loop.ep(0).path_stats(a, i, ps)) return out;
    e[i] = ps.entropy;
  }
  struct Seen {
    int slot = -1;  // the first trial's path
    uint16_t left = 0;
    TimeNs moved_at{0}, window_at{0};
    bool undone = false;
  } seen;
  loop.ep(0).set_trace(
      [](void* ctx, const TraceEvent& ev) {
        auto& v = *static_cast<Seen*>(ctx);
        if (ev.kind == TraceKind::kPathExplored) {
          if (v.slot < 0) {
            v.slot = ev.path;
            v.left = static_cast<uint16_t>(ev.aux);
            v.moved_at = ev.time;
          } else if (ev.path == v.slot && ev.psn == v.left) {
            v.undone = true;
          }
        }
        if (ev.kind == TraceKind::kPathState && v.slot == ev.path && v.window_at.ns == 0 &&
            ev.aux == static_cast<uint32_t>(PathState::kActive))
          v.window_at = ev.time;
      },
      &seen);
  std::array<SerialLink, 2> serial{};
  uint16_t sent_entropy = 0;
  loop.on_sent = [&](int, const TxDatagram& tx, const std::vector<uint8_t>&) {
    sent_entropy = tx.entropy;
  };
  const auto on_link = [&](uint16_t en) {
    if (s.bad_move) return en == e[1] ? 1 : 0;
    return en == e[0] || en == e[1] ? 0 : 1;
  };
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 0 || (d[1] != 0x01 && d[1] != 0x12) || s.link_0_dark_us == 0) return false;
    return on_link(sent_entropy) == 0 && seen.window_at.ns != 0 && loop.now() >= seen.window_at &&
           loop.now().since(seen.window_at) < s.link_0_dark_us * kMicrosecond;
  };
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || (d[1] != 0x01 && d[1] != 0x12)) return 0;
    const auto l = static_cast<size_t>(on_link(sent_entropy));
    const TimeNs arrive = serial[l].pass(loop.now(), s.links[l].gap_ns);
    return arrive.since(loop.now()) + s.links[l].delay_ns;
  };
  constexpr uint32_t kLen = 64 * 1024;
  Buf src(loop.ep(0), kLen, 0, 0x45);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite);
  uint64_t posted = 0, done = 0;
  bool failed = false;
  TimeNs sparse_next = loop.now();
  const TimeNs start = loop.now();
  const auto sparse = [&] {
    return seen.slot < 0 && loop.now().since(start) < s.sparse_us * kMicrosecond;
  };
  const auto paused = [&] {
    if (sparse()) return loop.now() < sparse_next;
    if (s.pause_from_move_to_window_plus_us == 0 || seen.slot < 0) return false;
    return seen.window_at.ns == 0 ||
           loop.now().since(seen.window_at) < s.pause_from_move_to_window_plus_us * kMicrosecond;
  };
  const auto stopped = [&] {
    return seen.slot >= 0 && loop.now().since(seen.moved_at) >= s.stop_us * kMicrosecond;
  };
  const auto app = [&] {
    for (const Completion& k : loop.drain(0)) {
      ++done;
      failed = failed || k.status != Status::kOk;
    }
    while (!failed && !stopped() && !paused() && posted - done < 4) {
      failed = loop.ep(0).post_send(a, write_wr(src, dst, kLen, ++posted)) != Status::kOk;
      if (sparse()) sparse_next = loop.now() + 100 * kMicrosecond;
    }
    return failed || (stopped() && done == posted);
  };
  // run_until sends what app() posts at its next event, and jumps to the
  // next timer when nothing is in flight: during a pause the application's
  // clock is run in steps of a microsecond.
  bool ran = false;
  for (int i = 0; i < 100'000 && !ran; ++i) {
    if (app()) {
      ran = true;
    } else if (paused()) {
      loop.run_until(app, kMicrosecond);
      loop.pass_time(kMicrosecond);
    } else if (!loop.run_until([&] { return app() || paused(); }, 50 * kMillisecond)) {
      break;
    }
  }
  loop.ep(0).set_trace(nullptr, nullptr);
  out.ok = ran && !failed && src.bytes == dst.bytes;
  out.moved = seen.slot >= 0;
  out.undone = seen.undone;
  out.timeouts = loop.ep(0).conn_stats(a)->timeouts;
  return out;
}

// The first trial's move in `s` is undone, or stands, as `undone` says.
void expect_first_move(const TrialScene& s, bool undone, const char* why) {
  const TrialVerdict r = first_trial_with(s);
  ASSERT_TRUE(r.ok);
  ASSERT_TRUE(r.moved);
  EXPECT_EQ(r.undone, undone) << why;
}

// Path 1 alone on a slow link; a move empties it.
TrialScene bad_move_scene() {
  TrialScene s;
  s.bad_move = true;
  s.links = {TestLink{2'000, 0}, TestLink{6'000, 20'000}};
  return s;
}

TEST(Engine, GoodMoveStaysThroughAnApplicationPauseInItsWindow) {  // PATH-8
  // The application posts nothing from the move until most of the window
  // that judges it has passed: fewer packets are acknowledged in that
  // window for want of data, not of links. The move to the idle link must
  // stand (the verdict counts only the time the connection was limited by
  // its windows, and waits until it has a window's worth of it).
  TrialScene s;
  expect_first_move(s, false, "the premise: a good move");
  s.pause_from_move_to_window_plus_us = 200;
  expect_first_move(s, false, "an application pause undid a move to an idle link");
}

TEST(Engine, MoveThatEmptiesALinkIsUndoneThroughAnApplicationPause) {  // PATH-8
  // The other way round: a pause in the window must not save a bad move
  // either; the verdict waits for the window-limited time it needs.
  TrialScene s = bad_move_scene();
  expect_first_move(s, true, "the premise: a bad move");
  s.pause_from_move_to_window_plus_us = 200;
  expect_first_move(s, true, "an application pause saved a move that empties a link");
}

TEST(Engine, RiseInOfferedLoadDoesNotMakeABadMoveLookGood) {  // PATH-8
  // The application offers a quarter of what the links carry for its first
  // 1 ms, past the first tick (0.5 ms), then all they take. Measured against
  // the quiet interval before it, a move that empties link 1 looked better
  // and stood; the rate before a move counts only window-limited time too.
  TrialScene s = bad_move_scene();
  s.sparse_us = 1'000;
  expect_first_move(s, true, "a bad move stood, measured against a quiet interval");
}

TEST(Engine, AnotherPathsTimeoutInTheWindowDoesNotUndoTheMove) {  // PATH-8, PATH-4
  // Link 1 is half as fast as link 0: a move there still raises the rate
  // by half. In the window that judges it, link 0 (the other path's) goes
  // dark long enough for that path's RTO: the rate falls, for a reason that
  // is not the move. The trial must end with no verdict; the move stands.
  TrialScene s;
  s.interval_ns = 8'000'000;  // a 2 ms window: room for a 1 ms RTO in it
  s.links = {TestLink{2'000, 0}, TestLink{4'000, 0}};
  s.stop_us = 4'000;
  expect_first_move(s, false, "the premise: a good move");
  s.link_0_dark_us = 1'500;
  const TrialVerdict r = first_trial_with(s);
  ASSERT_TRUE(r.ok);
  ASSERT_TRUE(r.moved);
  EXPECT_GT(r.timeouts, 0u);  // the premise: the other path timed out
  EXPECT_FALSE(r.undone) << "another path's timeout undid the move";
}

// PATH-5: the loss EWMA is judged only after loss_window_packets (128)
// outcomes. Single losses of every other packet among a path's first 40
// lift it past retire_loss_pct (10 %) early on, yet retire nothing; the
// path's later packets all arrive, and it decays.
TEST(Engine, LossesBeforeAWindowOfOutcomesRetireNoPath) {  // PATH-5
  uint32_t peak_permille = 0;
  const PathStats p0 = write_over_a_lossy_path(
      173, 64, [](uint64_t n) { return n <= 40 && n % 2 == 1; }, [](uint64_t) { return false; },
      [&](const PathStats& ps) { peak_permille = std::max(peak_permille, ps.loss_rate_permille); });
  EXPECT_GE(p0.losses, 20u);
  EXPECT_GT(peak_permille, 100u);  // the premise: past the threshold
  EXPECT_EQ(p0.retirements, 0u);
}

TEST(Engine, ALossThatCompletesTheWindowOfOutcomesRetiresThePath) {  // PATH-5
  // PATH-5 judges a path once it has `loss_window_packets` outcomes, the
  // loss being judged among them. With a window of 2, reorder_threshold 1
  // and every packet acknowledged on its own, slot 1's first packet is lost
  // and its second acknowledged: the ACK is one outcome, the loss it shows
  // the second, and the EWMA (1/2) is past 10 %: the path is retired then,
  // not at a later loss.
  EndpointConfig c = cfg(180);
  c.recovery.loss_window_packets = 2;
  c.recovery.reorder_threshold = 1;
  EndpointConfig rc = cfg(181);
  rc.ack_every = 1;
  Loop loop(c, rc);
  auto [a, b] = loop.connect();
  TraceLog log(loop.ep(0));
  int slot1_data = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && tag_slot(d) == 1 && ++slot1_data == 1;
  };
  // The first flight's data packets, sent together, arrive 1 us apart (in
  // order), so that each ACK newly acknowledges one.
  uint64_t data_sent = 0;
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    return from == 0 && d[1] == 0x01 ? 1'000 * std::min<uint64_t>(++data_sent, 16) : 0;
  };
  ASSERT_NO_FATAL_FAILURE(write_and_check(loop, a, 64 * 4096, 0x54));
  PathStats ps;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 1, ps));
  EXPECT_EQ(ps.losses, 1u);
  EXPECT_EQ(ps.timeouts, 0u);  // the premise: LOSS-2 found it, not the RTO
  EXPECT_EQ(ps.retirements, 1u);
  // The trace tells the loss LOSS-2 found from the packets the retirement
  // took off the path with it (no timeout).
  std::vector<LossCause> slot1;
  for (const TraceEvent& ev : log.of(TraceKind::kLost))
    if (ev.path == 1) slot1.push_back(static_cast<LossCause>(ev.aux));
  ASSERT_GE(slot1.size(), 2u);  // the premise: packets in flight behind it
  EXPECT_EQ(slot1[0], LossCause::kReorder);
  EXPECT_EQ(slot1, [&] {
    std::vector<LossCause> want(slot1.size(), LossCause::kPathRetired);
    want[0] = LossCause::kReorder;
    return want;
  }());
}

// LOSS-5: each timeout doubles the path's RTO up to max_rto. One path whose
// every packet is lost, PROBEs included, min_rto 1 ms and max_rto 2 ms:
// after the first timeout its PROBEs, each timed by the RTO (PATH-4), come
// 2 ms apart, not 4, 8, 16 ms.
TEST(Engine, BackedOffRtoStopsAtMaxRto) {  // LOSS-5, PATH-4
  EndpointConfig c = cfg(174, 1);
  c.recovery.max_rto_ns = 2 * c.recovery.min_rto_ns;
  c.recovery.rto_failures_to_retire = 10;
  Loop loop(c, cfg(175));
  auto [a, b] = loop.connect();
  loop.drop = [](int from, const std::vector<uint8_t>&) { return from == 0; };
  std::vector<TimeNs> probes;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kProbe))
      probes.push_back(loop.now());
  };
  Buf src(loop.ep(0), 4096, 0, 0x51);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  loop.run_until([] { return false; }, 12 * c.recovery.min_rto_ns);
  ASSERT_GE(probes.size(), 4u);
  for (size_t i = 1; i < probes.size(); ++i)
    EXPECT_LE(probes[i].since(probes[i - 1]), c.recovery.max_rto_ns) << "PROBE " << i;
  EXPECT_EQ(loop.ep(0).conn_stats(a)->path_retirements, 0u);  // the premise: backoff alone
}

TEST(Engine, RtoIsSrttPlusFourRttvarBackedOff) {  // LOSS-4, LOSS-5, PATH-4
  // One path, 500 us each way: the one sample, 1 ms, sets srtt 1 ms and
  // rttvar 0.5 ms, so the RTO armed when the next packet leaves is srtt +
  // 4 * rttvar = 3 ms (above min_rto, 1 ms; the tail-loss timer, srtt +
  // max(srtt / 4, 4 * rttvar), comes no sooner). The peer then hears
  // nothing: the path times out 3 ms after that packet left and probes
  // (PATH-4), each PROBE timing out after the RTO doubled again: 6, 12 ms.
  // initial_rtt is above the path's round trip so that the warm-up packet
  // goes once: with the default 100 us its tail-loss timer (LOSS-8) fired
  // after 0.3 ms and resent it, and the resend's own ACK (LOSS-6: an exact
  // sample) came 0.3 ms after the packet under test had left, a second
  // 1 ms sample that took rttvar to 0.375 ms and the backed-off RTO to
  // 2 * 2.5 = 5 ms.
  EndpointConfig c = cfg(176, 1);
  c.recovery.initial_rtt_ns = 2'000'000;
  c.recovery.rto_failures_to_retire = 10;  // backoff alone, no new entropy
  WritePair w(c, 177, 500'000, 4096, 0x52);
  auto& [loop, a, src, dst] = w;
  ASSERT_TRUE(one_rtt_sample(loop, a, src, dst));  // exactly 1 ms
  loop.drop = [](int from, const std::vector<uint8_t>&) { return from == 0; };
  TimeNs sent = TimeNs::never();
  std::vector<TimeNs> probes;  // PROBEs sent while the path probes (after its RTO)
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    PathStats now;
    if (from == 0 && d[1] == 0x01 && sent == TimeNs::never()) sent = loop.now();
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kProbe) &&
        loop.ep(0).path_stats(a, 0, now) && now.timeouts > 0)
      probes.push_back(loop.now());
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  loop.run_until([&] { return probes.size() >= 3; }, 100'000'000);
  ASSERT_NE(sent, TimeNs::never());
  ASSERT_GE(probes.size(), 3u);
  EXPECT_EQ(probes[0].since(sent), 3'000'000u);       // the RTO: srtt + 4 * rttvar
  EXPECT_EQ(probes[1].since(probes[0]), 6'000'000u);  // LOSS-5: doubled
  EXPECT_EQ(probes[2].since(probes[1]), 12'000'000u);
}

TEST(Engine, RetiredPathTakesTheOneEntropyNoOtherPathUses) {  // PATH-6
  // Four paths in a block of five source ports: a retired path's new entropy
  // can only be the one value none of them has. Slot 1 goes dark (data and
  // PROBEs) and is retired again and again; the four never share a value.
  EndpointConfig c = cfg(178);
  c.entropy_min = 50000;
  c.entropy_max = 50004;
  Loop loop(c, cfg(179));
  auto [a, b] = loop.connect();
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && (d[1] == 0x01 || d[1] == 0x12) && tag_slot(d) == 1;
  };
  Buf src(loop.ep(0), 1 << 20, 0, 0x53);
  Buf dst(loop.ep(1), 1 << 20, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  bool shared = false;
  loop.before_poll = [&](int from) {
    if (from != 0) return;
    std::array<uint16_t, 4> e{};
    for (uint8_t i = 0; i < 4; ++i) {
      PathStats ps;
      if (!loop.ep(0).path_stats(a, i, ps)) return;
      e[i] = ps.entropy;
    }
    std::sort(e.begin(), e.end());
    shared |= std::adjacent_find(e.begin(), e.end()) != e.end();
  };
  PathStats ps;
  ASSERT_TRUE(loop.run_until(
      [&] { return shared || (loop.ep(0).path_stats(a, 1, ps) && ps.retirements >= 4); }));
  EXPECT_FALSE(shared) << "two paths on one entropy";
  EXPECT_GE(ps.retirements, 4u);
}

}  // namespace
}  // namespace metaroce::test
