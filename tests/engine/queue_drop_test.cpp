// A drop is the queue's only within 4 srtt of a congestion signal (CC-7,
// PATH-5): then it halves the window and is no outcome of the path; later it
// is the link's, cutting nothing and counting towards the path's retirement.
// The signal is a CE echo or a CC-5 delay cut. One path, 10 us each way, so
// that every instant is known: a drop that a statistical run (marks on every
// 16th packet, always recent) cannot place before or after the window.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

enum class Signal { kCeMark, kLateAck };

struct DropOutcome {
  PathStats warm;       // path 0 before the signal
  PathStats before;     // path 0 when the lossy WRITE is posted
  PathStats after;      // and when it completes
  uint32_t lowest = 0;  // path 0's window during the lossy WRITE
  uint64_t signal_to_loss_ns = 0;
};

// After warm-up (srtt and min_rtt 20 us), a one-packet WRITE brings the
// signal: its packet CE-marked, or its ACKs 150 us late (170 us samples,
// 100 us over min_rtt + 50 us: a CC-5 cut; the tail-loss probe's resend
// brings a second one). `gap_ns` later a WRITE of `packets` packets loses
// those `lose(n)` picks (n counts from 1), each found by LOSS-2 when the
// third after it is acknowledged, a round trip after it was sent.
DropOutcome drop_after(
    Signal signal, uint64_t gap_ns, uint64_t seed, uint32_t packets = 4,
    bool (*lose)(int) = [](int n) { return n == 1; }) {
  DropOutcome out;
  WritePair w(cfg(seed, 1), seed + 1, 10'000, packets * 4096, 0x61);
  auto& [loop, a, src, dst] = w;
  EXPECT_TRUE(warm_up_paths(loop, a, src, dst));
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, out.warm));
  bool signal_now = true;
  loop.mark_ce = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    return signal == Signal::kCeMark && signal_now && from == 0 &&
           d[1] == static_cast<uint8_t>(wire::Opcode::kWrite);
  };
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    return signal == Signal::kLateAck && signal_now && from == 1 &&
                   d[1] == static_cast<uint8_t>(wire::Opcode::kAck)
               ? 150'000
               : 0;
  };
  EXPECT_TRUE(write_completes(loop, a, src, dst, 4096, 100));
  const TimeNs signalled = loop.now();  // the ACK that carried it arrived
  signal_now = false;
  // Nothing is in flight: time passes with no timer but the keepalive's.
  loop.run_until([&] { return loop.now().since(signalled) >= gap_ns; }, gap_ns);
  loop.pass_time(gap_ns - loop.now().since(signalled));
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, out.before));
  int data = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) && lose(++data);
  };
  out.lowest = out.before.cwnd_bytes;
  TimeNs lost_at;
  loop.before_poll = [&](int from) {
    PathStats ps;
    if (from != 0 || !loop.ep(0).path_stats(a, 0, ps)) return;
    out.lowest = std::min(out.lowest, ps.cwnd_bytes);
    if (ps.losses > out.before.losses && lost_at.ns == 0) lost_at = loop.now();
  };
  EXPECT_TRUE(write_completes(loop, a, src, dst, packets * 4096, 101));
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, out.after));
  out.signal_to_loss_ns = lost_at.since(signalled);
  return out;
}

// The premises every case shares: no loss before the drop under test, one
// loss after it, found before the WRITE needed a timeout.
void expect_one_loss(const DropOutcome& r) {
  EXPECT_EQ(r.before.losses, 0u);
  EXPECT_EQ(r.after.losses, 1u);
  EXPECT_EQ(r.after.timeouts, 0u);
}

// The signal 150 us back, more than 4 srtt (80 us) when the loss is
// declared: the drop is the link's. A window that remembered any signal ever
// seen would halve here.
TEST(Engine, ADropMoreThanFourSrttAfterTheLastMarkCutsNoWindow) {  // CC-7, PATH-5
  const DropOutcome r = drop_after(Signal::kCeMark, 130'000, 400);
  expect_one_loss(r);
  EXPECT_GT(r.signal_to_loss_ns, 4 * r.before.srtt_ns);  // the premise: outside the window
  EXPECT_EQ(r.lowest, r.before.cwnd_bytes);
  EXPECT_GT(r.after.loss_rate_permille, r.before.loss_rate_permille);  // an outcome (PATH-5)
}

// The signal 50 us back, within 4 srtt and over one srtt after the cut the
// mark made (CC-4): the drop is the queue's, it halves the window once and
// is no outcome of the path.
TEST(Engine, ADropWithinFourSrttOfAMarkHalvesTheWindowAndIsNoOutcome) {  // CC-7, PATH-5
  const DropOutcome r = drop_after(Signal::kCeMark, 30'000, 402);
  expect_one_loss(r);
  EXPECT_GT(r.signal_to_loss_ns, r.before.srtt_ns);  // the premises: inside the window,
  EXPECT_LT(r.signal_to_loss_ns, 4 * r.before.srtt_ns);
  EXPECT_EQ(r.after.ce_marks, 1u);  // after one mark's cut
  EXPECT_EQ(r.lowest, r.before.cwnd_bytes / 2);
  EXPECT_EQ(r.after.loss_rate_permille, r.before.loss_rate_permille);
}

// Two drops that are no run (a packet between them arrives), declared
// within one srtt of each other and inside the window: one halving, not a
// quarter of the window left (CC-7's once per srtt).
TEST(Engine, TwoQueueDropsWithinAnSrttHalveTheWindowOnce) {  // CC-7
  const DropOutcome r =
      drop_after(Signal::kCeMark, 30'000, 406, 8, [](int n) { return n == 1 || n == 3; });
  EXPECT_EQ(r.before.losses, 0u);
  EXPECT_EQ(r.after.losses, 2u);  // the premise: two losses, each judged (no run)
  EXPECT_EQ(r.after.timeouts, 0u);
  EXPECT_EQ(r.lowest, r.before.cwnd_bytes / 2);
}

// LOSS-8: a WRITE's last two packets dropped, nothing after them to show it
// (LOSS-2): the tail-loss timer resends the older at once, uncounted, and
// the probe's answer declares the other lost. That loss is judged as one
// found by later packets: outside the window no cut and an outcome, inside
// one halving and none.
TEST(Engine, ATailLossFoundByAProbeCutsOnlyWithinFourSrttOfASignal) {  // CC-7, PATH-5, LOSS-8
  for (const bool recent : {false, true}) {
    SCOPED_TRACE(recent);
    const DropOutcome r = drop_after(Signal::kCeMark, recent ? 10'000 : 130'000, 408, 4,
                                     [](int n) { return n == 3 || n == 4; });
    EXPECT_EQ(r.before.losses, 0u);
    EXPECT_EQ(r.after.losses, 1u);
    EXPECT_GT(r.after.probes_sent, r.before.probes_sent);  // the premise: a probe found them
    EXPECT_EQ(r.after.timeouts, 0u);
    EXPECT_EQ(r.signal_to_loss_ns < 4 * r.before.srtt_ns, recent);
    EXPECT_EQ(r.lowest, recent ? r.before.cwnd_bytes / 2 : r.before.cwnd_bytes);
    EXPECT_EQ(r.after.loss_rate_permille > r.before.loss_rate_permille, !recent);
  }
}

// A CC-5 delay cut is a congestion signal as a CE echo is: a drop within
// 4 srtt of it halves the window again and is no outcome of the path.
TEST(Engine, ADelayCutMakesTheNextDropAQueuesDrop) {  // CC-7, CC-5, PATH-5
  const DropOutcome r = drop_after(Signal::kLateAck, 60'000, 404);
  expect_one_loss(r);
  EXPECT_EQ(r.after.ce_marks, 0u);
  EXPECT_LT(r.before.cwnd_bytes, r.warm.cwnd_bytes);  // the premise: a delay cut
  EXPECT_GT(r.signal_to_loss_ns, r.before.srtt_ns);   // the premises: inside the window,
  EXPECT_LT(r.signal_to_loss_ns, 4 * r.before.srtt_ns);
  EXPECT_EQ(r.lowest, r.before.cwnd_bytes / 2);
  EXPECT_EQ(r.after.loss_rate_permille, r.before.loss_rate_permille);
}

}  // namespace
}  // namespace metaroce::test
