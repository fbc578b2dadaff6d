// Per-path congestion control (spec 8.3): the initial window split over
// paths, growth only while the windows hold the sender back, the
// connection's in-flight cap, drops that cut the window only alongside
// congestion signals, the window floor, and pacing below one packet that
// must restart the sender with nothing else to wake it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

TEST(Engine, InitialWindowIsSplitOverPaths) {  // CC-1
  Loop loop(cfg(110), cfg(111));
  auto [a, b] = loop.connect();
  const EndpointConfig& c = loop.ep(0).config();
  uint64_t total = 0;
  for (size_t i = 0; i < loop.ep(0).path_count(a); ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    total += ps.cwnd_bytes;
  }
  const uint64_t expect = uint64_t{c.cc.initial_cwnd_packets} * (c.mtu + 64);
  EXPECT_LE(total, expect);
  EXPECT_GE(total + loop.ep(0).path_count(a), expect);  // rounding only
}

uint64_t initial_window_sum(Endpoint& ep, ConnId id) {
  uint64_t total = 0;
  for (size_t i = 0; i < ep.path_count(id); ++i) {
    PathStats ps;
    EXPECT_TRUE(ep.path_stats(id, i, ps));
    total += ps.cwnd_bytes;
  }
  return total;
}

// CC-1 with CONN-3: the first window is 16 packets of the agreed mtu at both
// ends, not of the endpoint's own (the paths were set up before the
// handshake agreed on less: at mtu 1000 the first burst was 62 packets).
TEST(Engine, InitialWindowFollowsTheAgreedMtu) {  // CC-1, CONN-3
  EndpointConfig small = cfg(113);
  small.mtu = 1024;
  Loop loop(cfg(112), small);
  auto [a, b] = loop.connect(1000);
  ASSERT_TRUE(a.valid() && b.valid());
  const uint64_t expect = uint64_t{cfg(112).cc.initial_cwnd_packets} * (1000 + 64);
  for (const auto& [end, id] : {std::pair{0, a}, std::pair{1, b}}) {
    SCOPED_TRACE(end);
    const uint64_t total = initial_window_sum(loop.ep(end), id);
    EXPECT_LE(total, expect);
    EXPECT_GE(total + loop.ep(end).path_count(id), expect);  // rounding only
  }
}

// CC-6: max_cwnd_packets bounds the first window as it does every later one.
TEST(Engine, InitialWindowStaysWithinMaxCwnd) {  // CC-6
  EndpointConfig one = cfg(114);
  one.num_paths = 1;
  one.cc.max_cwnd_packets = 4;
  Loop loop(one, cfg(115));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  EXPECT_EQ(initial_window_sum(loop.ep(0), a), 4u * (one.mtu + 64));
}

// Each of a's paths' windows, in slot order.
std::vector<uint32_t> windows(Loop& loop, ConnId a) {
  std::vector<uint32_t> w;
  for (size_t i = 0; i < loop.ep(0).path_count(a); ++i) {
    PathStats ps;
    if (loop.ep(0).path_stats(a, i, ps)) w.push_back(ps.cwnd_bytes);
  }
  return w;
}

uint64_t window_sum(Loop& loop, ConnId a) {
  uint64_t sum = 0;
  for (const uint32_t w : windows(loop, a)) sum += w;
  return sum;
}

// An application that keeps one packet in flight leaves its windows where
// they started: they were never what held it back, so ACKs say nothing
// about how much more the network would take, and a window grown on them
// would let a later large message out as one burst. A connection whose
// windows do hold it back still grows them (slow start, CC-2).
TEST(Engine, WindowsGrowOnlyWhileTheyHoldTheSenderBack) {  // CC-2
  Loop loop(cfg(150), cfg(151));
  auto [a, b] = loop.connect();
  const EndpointConfig& c = loop.ep(0).config();
  const uint64_t initial = uint64_t{c.cc.initial_cwnd_packets} * (c.mtu + 64);
  Buf src(loop.ep(0), 4 << 20, 0, 0x6b);
  Buf dst(loop.ep(1), 4 << 20, kAccessRemoteWrite);
  for (uint64_t i = 0; i < 2000; ++i) {
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, i)), Status::kOk);
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  }
  EXPECT_LE(window_sum(loop, a), initial + loop.ep(0).path_count(a));  // rounding only
  // Now a message larger than the windows: they hold it back, and grow.
  ASSERT_TRUE(write_completes(loop, a, src, dst, 4 << 20, 9000));
  EXPECT_GT(window_sum(loop, a), 4 * initial);
  EXPECT_EQ(std::memcmp(src.bytes.data(), dst.bytes.data(), src.bytes.size()), 0);
}

// A path grows only when its own window holds the sender back. Here the PSN
// window (SEQ-3, 64 packets) does: 8 paths of 32 packets each never fill
// during a 4 MiB WRITE, so none grows. Counting any hold-up as a reason for
// every path to grow let such paths grow to the whole window each (8 x 64
// packets here); on a fabric with a blackholed link, paths that had room
// grew without bound, took most of what was in flight and kept their links'
// queues overflowing (BENCHMARKS.md section 4, stop 22).
TEST(Engine, OnlyAPathWhoseWindowHoldsTheSenderBackGrows) {  // CC-2
  EndpointConfig c = cfg(152, 8);
  c.window_log2 = 6;
  c.cc.initial_cwnd_packets = 256;
  EndpointConfig d = cfg(153);
  d.window_log2 = 6;
  Loop loop(c, d);
  auto [a, b] = loop.connect();
  const uint64_t initial = window_sum(loop, a);
  EXPECT_GE(initial, 255u * (c.mtu + 64));
  ASSERT_NO_FATAL_FAILURE(write_and_check(loop, a, 4 << 20, 0x3c));
  EXPECT_EQ(window_sum(loop, a), initial);
}

// Per path: 4 one-packet WRITEs kept outstanding over 2 paths. Every data
// packet on slot 1 comes back CE-marked, so that path falls to its floor and
// paces: SCHED-1 passes it over as full again and again. Slot 0 always has
// room, and its window must not grow for slot 1's being full (a rule that
// counted any path's being passed over for every path would grow it).
TEST(Engine, APathWithRoomDoesNotGrowForAnotherBeingFull) {  // CC-2
  EndpointConfig c = cfg(154, 2);
  c.cc.initial_cwnd_packets = 16;
  Loop loop(c, cfg(155));
  loop.mark_ce = [](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    return from == 0 && d.size() > 4 && d[1] == 0x01 && tag_slot(d) == 1;
  };
  auto [a, b] = loop.connect();
  PathStats roomy0;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, roomy0));
  Buf src(loop.ep(0), 4 * 4096, 0, 0x5d);
  Buf dst(loop.ep(1), 4 * 4096, kAccessRemoteWrite);
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, i, i * 4096)), Status::kOk);
  for (int n = 0; n < 2000;) {
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, 1, done));
    for (const Completion& d : done) {
      ASSERT_EQ(d.status, Status::kOk);
      ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, d.wr_id, d.wr_id * 4096)),
                Status::kOk);
      ++n;
    }
  }
  PathStats roomy, marked;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, roomy));
  ASSERT_TRUE(loop.ep(0).path_stats(a, 1, marked));
  EXPECT_GT(marked.ce_marks, 10u);           // the premise: slot 1 was marked
  EXPECT_LT(marked.cwnd_bytes, c.mtu + 64);  // and paces below a packet
  EXPECT_EQ(roomy.cwnd_bytes, roomy0.cwnd_bytes);
}

// CC-9's cap (24 packets) holds back a WRITE over 8 paths of 32 packets
// each, none of them full: the cap counts as window-limited for every path,
// so their windows grow and keep the headroom the cap needs.
TEST(Engine, TheConnectionCapLetsEveryPathGrow) {  // CC-2, CC-9
  EndpointConfig c = cfg(156, 8);
  c.cc.initial_cwnd_packets = 256;
  c.cc.max_inflight_packets = 24;
  Loop loop(c, cfg(157));
  auto [a, b] = loop.connect();
  const std::vector<uint32_t> initial = windows(loop, a);
  ASSERT_EQ(initial.size(), c.num_paths);
  ASSERT_NO_FATAL_FAILURE(write_and_check(loop, a, 4 << 20, 0x4e));
  const std::vector<uint32_t> after = windows(loop, a);
  ASSERT_EQ(after.size(), c.num_paths);
  for (size_t i = 0; i < initial.size(); ++i) EXPECT_GT(after[i], initial[i]) << "path " << i;
}

// The largest sum of in-flight bytes over a's paths seen during a 4 MiB WRITE.
uint64_t peak_connection_inflight(uint32_t cap_packets) {
  EndpointConfig c = cfg(130, 8);
  c.cc.max_inflight_packets = cap_packets;
  WritePair w(c, 131, 20'000, 4 << 20,
              0x5a);  // a long RTT, so that slow start opens every path wide
  auto& [loop, a, src, dst] = w;
  EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4 << 20)), Status::kOk);
  uint64_t peak = 0;
  bool done = false;
  EXPECT_TRUE(loop.run_until([&] {
    uint64_t sum = 0;
    for (size_t i = 0; i < loop.ep(0).path_count(a); ++i) {
      PathStats ps;
      if (loop.ep(0).path_stats(a, i, ps)) sum += ps.inflight_bytes;
    }
    peak = std::max(peak, sum);
    for (const Completion& d : loop.drain(0)) done |= d.status == Status::kOk;
    return done;
  }));
  EXPECT_TRUE(done);
  EXPECT_EQ(std::memcmp(src.bytes.data(), dst.bytes.data(), src.bytes.size()), 0);
  return peak;
}

TEST(Engine, ConnectionInflightCapBoundsTheSumOverPaths) {  // CC-9
  const uint64_t packet = 4096 + 64;
  EXPECT_LE(peak_connection_inflight(24), 24 * packet);
  EXPECT_GT(peak_connection_inflight(0), 24 * packet);  // without the cap the sum runs past it
}

// Path 0's window, averaged over the polls of an 8 MiB WRITE, when every
// `drop_every`-th and every `ce_every`-th data packet on it is dropped or
// CE-marked (0: none).
double mean_cwnd_of_a_lossy_path(uint32_t drop_every, uint32_t ce_every) {
  double sum = 0;
  uint64_t samples = 0;
  write_over_a_lossy_path(
      170, 24, [&](uint64_t n) { return drop_every != 0 && n % drop_every == 0; },
      [&](uint64_t n) { return ce_every != 0 && n % ce_every == 0; },
      [&](const PathStats& ps) {
        sum += ps.cwnd_bytes;
        ++samples;
      });
  return samples ? sum / static_cast<double>(samples) : 0;
}

TEST(Engine, DropsCutTheWindowOnlyAlongsideCongestionSignals) {  // CC-7
  const double clean = mean_cwnd_of_a_lossy_path(0, 0);
  const double random_drops = mean_cwnd_of_a_lossy_path(10, 0);
  const double marks = mean_cwnd_of_a_lossy_path(0, 16);
  const double marks_and_drops = mean_cwnd_of_a_lossy_path(10, 16);
  // Random drops alone are not congestion: the window stays as it was.
  EXPECT_GT(random_drops, 0.8 * clean);
  // The same drops on a path that is also being CE-marked are a full
  // queue's: each halves the window (once per RTT), well below marks alone.
  EXPECT_LT(marks_and_drops, 0.75 * marks);
}

// CC-8: with congestion control disabled no signal moves a window: not a CE
// echo (CC-4), not a drop alongside one (CC-7), not an ACK (CC-2). Path 0
// has every other data packet CE-marked and every tenth dropped; its window
// stays the initial one throughout. (The timeout clause is
// DisabledCongestionControlKeepsTheWindowThroughATimeout's.)
TEST(Engine, DisabledCongestionControlKeepsTheWindowUnderMarksAndDrops) {  // CC-8
  EndpointConfig c = cfg(176);
  c.cc.enabled = false;
  const uint32_t initial = c.cc.initial_cwnd_packets * (c.mtu + 64u) / c.num_paths;
  uint32_t lowest = UINT32_MAX, highest = 0;
  const PathStats p0 = write_over_a_lossy_path(
      c, [](uint64_t n) { return n % 10 == 0; }, [](uint64_t n) { return n % 2 == 0; },
      [&](const PathStats& ps) {
        lowest = std::min(lowest, ps.cwnd_bytes);
        highest = std::max(highest, ps.cwnd_bytes);
      });
  EXPECT_GT(p0.ce_marks, 100u);  // the premises: marks and drops
  EXPECT_GT(p0.losses, 20u);
  EXPECT_EQ(lowest, initial);
  EXPECT_EQ(highest, initial);
}

TEST(Engine, AckWithCongestionSignalDoesNotGrowTheWindow) {  // CC-2, CC-4, CC-6
  // Every data packet CE-marked, one path: its window falls to the floor (one
  // packet) and must stay there. An increase on the ACK that also cut the
  // window would hold it near two packets (DCTCP's balance of a halving and
  // one packet per RTT), and below a packet, where one ACK covers more than
  // the window, at twice the floor: an incast of many multipath senders at
  // twice its share of the bottleneck.
  EndpointConfig c = cfg(180, 1);
  WritePair w(c, 181, 10'000, 1 << 20, 0x44);
  auto& [loop, a, src, dst] = w;
  loop.mark_ce = [](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01;
  };
  uint32_t floor = UINT32_MAX, highest_after_floor = 0;
  loop.before_poll = [&](int from) {
    PathStats ps;
    if (from != 0 || !loop.ep(0).path_stats(a, 0, ps)) return;
    if (ps.cwnd_bytes <= floor)
      floor = ps.cwnd_bytes;
    else
      highest_after_floor = std::max(highest_after_floor, ps.cwnd_bytes);
  };
  ASSERT_TRUE(write_completes(loop, a, src, dst, 1 << 20));
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_LT(floor, 4096u + 256);  // one packet with its headers
  EXPECT_EQ(highest_after_floor, 0u) << "the window grew again after reaching the floor";
}

// CC-4, CC-5: an ACK that echoes a duplicate (ECHO_DUP) cuts no window, its
// CE mark included; the mark still counts (ce_marks, CC-3) and still holds
// the increase back (CC-2). Here every ACK of a WRITE on one path is made
// to echo a CE-marked duplicate: the window neither falls nor grows. The
// same ACKs without ECHO_DUP cut it.
TEST(Engine, AckEchoingADuplicateCutsNoWindow) {  // CC-4, CC-5, CC-2
  for (const bool dup : {true, false}) {
    SCOPED_TRACE(dup);
    EndpointConfig c = cfg(190, 1);
    WritePair w(c, 191, 10'000, 1 << 20, 0x45);
    auto& [loop, a, src, dst] = w;
    loop.mutate = [&](int from, std::vector<uint8_t>& d) {
      if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kAck)) return;
      d[wire::kBaseHeaderSize + 14] |= wire::kAckEchoCe | (dup ? wire::kAckEchoDup : 0);
      ASSERT_EQ(wire::seal(d, d.size() - wire::kIcrcSize, 0), d.size());
    };
    PathStats start;
    ASSERT_TRUE(loop.ep(0).path_stats(a, 0, start));
    uint32_t lowest = start.cwnd_bytes, highest = start.cwnd_bytes;
    loop.before_poll = [&](int from) {
      PathStats ps;
      if (from != 0 || !loop.ep(0).path_stats(a, 0, ps)) return;
      lowest = std::min(lowest, ps.cwnd_bytes);
      highest = std::max(highest, ps.cwnd_bytes);
    };
    ASSERT_TRUE(write_completes(loop, a, src, dst, 1 << 20));
    PathStats end;
    ASSERT_TRUE(loop.ep(0).path_stats(a, 0, end));
    EXPECT_GT(end.ce_marks, 0u);
    EXPECT_EQ(highest, start.cwnd_bytes);
    if (dup)
      EXPECT_EQ(lowest, start.cwnd_bytes);
    else
      EXPECT_LT(lowest, start.cwnd_bytes);
  }
}

// 3.11, CC-4: an answer to a PROBE (ECHO_PROBE) is no congestion signal,
// ECHO_CE on it included. A PROBE travels in the data class and may be
// marked, but its answer acknowledges no packet the window sent; a peer that
// echoed the mark anyway (ACK-6 read literally) cut the window by alpha / 2
// (a half: alpha starts at 1) with nothing acknowledged. Here an idle
// one-path connection's keepalive PROBEs (CONN-9) are answered with
// ECHO_CE added: the window and ce_marks stay where they were.
TEST(Engine, ProbeEchoWithCeCutsNoWindow) {  // 3.11, CC-4, CC-2, CONN-9
  Loop loop(cfg(196, 1), cfg(197, 1));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  int answers = 0;
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kAck)) return;
    uint8_t& flags = d[wire::kBaseHeaderSize + 14];
    if (!(flags & wire::kAckEchoProbe)) return;
    flags |= wire::kAckEchoCe;
    ++answers;
    ASSERT_EQ(wire::seal(d, d.size() - wire::kIcrcSize, 0), d.size());
  };
  PathStats start;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, start));
  loop.run_until([] { return false; }, 25 * kSecond);  // past the first keepalive
  ASSERT_GE(answers, 1) << "no keepalive PROBE answered";
  PathStats end;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, end));
  EXPECT_EQ(end.cwnd_bytes, start.cwnd_bytes);
  EXPECT_EQ(end.ce_marks, 0u);
}

// CC-2: after a cut the additive increase counts from the cut, a new
// window's worth of acknowledged bytes to the next step. An accumulator kept
// across the cut, counted against the larger window before it, could raise
// the window again soon after cutting it. One path, 60 of every 400 data
// packets CE-marked (deep cuts, as alpha rises): each cut is followed by at
// least the cut window's worth of ACKs before the next raise (69 % of it at
// the shortest when the accumulator was kept).
TEST(Engine, AdditiveIncreaseCountsFromTheLatestCut) {  // CC-2, CC-4
  EndpointConfig c = cfg(182, 1);
  constexpr size_t kLen = 32 << 20;
  WritePair w(c, 183, 10'000, kLen, 0x45);
  auto& [loop, a, src, dst] = w;
  uint64_t data_sent = 0;
  loop.mark_ce = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && ++data_sent % 400 < 60;
  };
  PathStats last;
  bool seen = false, after_cut = false;
  uint64_t cut_acked = 0, cut_cwnd = 0, cuts = 0, raises_checked = 0, shortest = UINT64_MAX;
  loop.before_poll = [&](int from) {
    PathStats ps;
    if (from != 0 || !loop.ep(0).path_stats(a, 0, ps)) return;
    if (seen && ps.cwnd_bytes < last.cwnd_bytes) {
      after_cut = true;
      cut_acked = ps.packets_acked;
      cut_cwnd = ps.cwnd_bytes;
      ++cuts;
    } else if (seen && after_cut && ps.cwnd_bytes > last.cwnd_bytes) {
      // Packets at 4,096 bytes each, a little under what each costs the
      // window with its headers: a raise right on time reads about 98 %.
      const uint64_t acked = ps.packets_acked - cut_acked;
      shortest = std::min(shortest, acked * 4096 * 100 / cut_cwnd);
      ++raises_checked;
      after_cut = false;
    }
    last = ps;
    seen = true;
  };
  ASSERT_TRUE(write_completes(loop, a, src, dst, kLen));
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_GE(cuts, 20u);
  EXPECT_GE(raises_checked, 20u);
  // Percent of the cut window acknowledged before the first raise after it.
  EXPECT_GE(shortest, 95u) << cuts << " cuts, " << raises_checked << " raises checked";
}

// CC-6 pacing with nothing to wake it. A sender whose paths are all below
// one packet (here from the start: one packet of initial window shared by 8
// paths) sends one packet per path, then each path waits srtt * packet / cwnd
// before the next. When its tail-loss probe (LOSS-8) then takes those packets
// out of flight, no ACK, RTO or PROBE is coming: only the pacing deadline can
// restart the sender. The application keeps a receive buffer posted, as any
// that takes SENDs does, so the context-release timer does not wake it either,
// and without the pacing deadline the connection sits until the peer timeout
// (PATH-7) fails it.
EndpointConfig paced_cfg(uint64_t seed) {
  EndpointConfig c = cfg(seed, 8);
  c.cc.initial_cwnd_packets = 1;
  return c;
}

void post_one_recv(Endpoint& ep, ConnId conn, Buf& buf) {
  ASSERT_EQ(ep.post_recv(conn, RecvWr{1, buf.addr(), 64, buf.mr.lkey}), Status::kOk);
}

TEST(Engine, PacedReadResponsesResumeWithoutAnAck) {  // CC-6, LOSS-8, READ-2
  // The requester's ACKs for the first response packets are late (a busy
  // host): the tail-loss probe queues them for retransmission and empties
  // every path, then the late ACKs acknowledge them after all. The
  // responder is left with READ responses to send, every path paced and
  // nothing in flight; the requester has its READs out and waits.
  Loop loop(cfg(160), paced_cfg(161));
  auto [a, b] = loop.connect();
  Buf rq(loop.ep(1), 64, kAccessLocalWrite);
  post_one_recv(loop.ep(1), b, rq);
  uint32_t responses = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 1 && d[1] == 0x06) ++responses;
    // The link is FIFO: later datagrams queue behind a late one.
    loop.delay_ns = from == 0 && d[1] == 0x10 && responses <= 8 && responses > 0
                        ? 300 * kMicrosecond  // beyond the 135 us probe timer
                        : 2 * kMicrosecond;
  };
  constexpr uint32_t kLen = 100000;
  Buf remote(loop.ep(1), 4 * kLen, kAccessRemoteRead);
  pattern(remote.bytes, 5);
  Buf local(loop.ep(0), 4 * kLen, kAccessLocalWrite);
  const TimeNs start = loop.now();
  for (uint64_t i = 0; i < 4; ++i) {
    SendWr r;
    r.wr_id = i;
    r.op = WrOpcode::kRead;
    r.local_addr = local.addr(i * kLen);
    r.length = kLen;
    r.lkey = local.mr.lkey;
    r.remote_addr = remote.addr(i * kLen);
    r.rkey = remote.mr.rkey;
    ASSERT_EQ(loop.ep(0).post_send(a, r), Status::kOk);
  }
  std::vector<Completion> done;
  EXPECT_TRUE(loop.run_until_completions(0, 4, done, 100 * kMillisecond));
  ASSERT_EQ(done.size(), 4u);
  for (const Completion& d : done) EXPECT_EQ(d.status, Status::kOk);
  EXPECT_EQ(local.bytes, remote.bytes);
  const ConnStats* st = loop.ep(1).conn_stats(b);
  EXPECT_EQ(st->timeouts, 0u);
  EXPECT_EQ(st->retransmissions, 0u);  // the probe's resends were acknowledged before they left
  EXPECT_LT(loop.now().since(start), 5 * kMillisecond);  // the first pacing gap is 0.8 ms
}

TEST(Engine, PacedRetransmissionsResumeWithoutAnAck) {  // CC-6, LOSS-3, LOSS-8
  // The message's packets, one per path, are all lost: once the tail-loss
  // probe has queued them, the retransmission queue is all there is to send.
  Loop loop(paced_cfg(170), cfg(171));
  auto [a, b] = loop.connect();
  Buf rq(loop.ep(0), 64, kAccessLocalWrite);
  post_one_recv(loop.ep(0), a, rq);
  uint32_t data = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && data++ < 8;
  };
  constexpr uint32_t kLen = 8 * 4096;
  Buf src(loop.ep(0), kLen, 0);
  pattern(src.bytes, 11);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite);
  const TimeNs start = loop.now();
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, kLen)), Status::kOk);
  std::vector<Completion> done;
  EXPECT_TRUE(loop.run_until_completions(0, 1, done, 100 * kMillisecond));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  const ConnStats* st = loop.ep(0).conn_stats(a);
  EXPECT_EQ(st->timeouts, 0u);
  EXPECT_EQ(st->retransmissions, 8u);
  EXPECT_LT(loop.now().since(start), 5 * kMillisecond);
}

// CC-9: the cap bounds the sum and is reached: a WRITE's first flight, before
// any ACK, over 4 paths whose windows would take more, is exactly 5 packets
// with a cap of 5.
TEST(Engine, ConnectionInflightCapIsFilledExactly) {  // CC-9
  EndpointConfig c = cfg(158);
  c.cc.max_inflight_packets = 5;
  WritePair w(c, 159, Loop::kDelayNs, 16 * 4096, 0x4f);
  auto& [loop, a, src, dst] = w;
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 16 * 4096)), Status::kOk);
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  size_t sent = 0;
  while (loop.ep(0).poll_transmit(loop.now(), buf, tx))
    sent += buf[1] == static_cast<uint8_t>(wire::Opcode::kWrite);
  EXPECT_EQ(sent, 5u);
  uint64_t room = 0;  // the premise: the paths' windows alone would send more
  for (size_t i = 0; i < loop.ep(0).path_count(a); ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    room += ps.cwnd_bytes;
  }
  EXPECT_GT(room, 5u * (4096 + 64));
}

// CC-4: a path's window is cut at most once per srtt. The first two packets
// of a connection's first flight arrive CE-marked and draw an ACK each
// (ACK-2), both back at one instant: the first halves the window (alpha
// starts at 1), the second cuts nothing.
TEST(Engine, TwoCongestionEchoesWithinAnSrttCutOnce) {  // CC-4
  EndpointConfig c = cfg(160, 1);
  Loop loop(c, cfg(161));
  auto [a, b] = loop.connect();
  PathStats before;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, before));
  int marked = 0;
  loop.mark_ce = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) && ++marked <= 2;
  };
  ASSERT_NO_FATAL_FAILURE(write_and_check(loop, a, 16 * 4096, 0x50));
  PathStats after;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, after));
  EXPECT_EQ(after.ce_marks, 2u);
  // Once: half, and a little more from the rest of the flight's ACKs
  // (CC-2's additive increase); twice would leave a quarter and as little.
  EXPECT_GE(after.cwnd_bytes, before.cwnd_bytes / 2);
  EXPECT_LT(after.cwnd_bytes, before.cwnd_bytes);
}

// CC-5: a delay cut takes at most half the window, however far the sample
// lies above min_rtt + target_queue_delay. After warm-up (min_rtt 4 us) the
// ACKs of a one-packet WRITE come back 500 us late: (500 - 4 - 50) / 500 of
// the window would be 89 %.
TEST(Engine, DelayCutTakesAtMostHalfTheWindow) {  // CC-5
  EndpointConfig c = cfg(162, 1);
  WritePair w(c, 163, Loop::kDelayNs, 4096, 0x52);
  auto& [loop, a, src, dst] = w;
  ASSERT_TRUE(warm_up_paths(loop, a, src, dst));
  PathStats before;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, before));
  loop.extra_delay = [](int from, const std::vector<uint8_t>& d) -> uint64_t {
    return from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck) ? 500'000 : 0;
  };
  ASSERT_TRUE(write_completes(loop, a, src, dst, 4096, 9));
  PathStats after;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, after));
  EXPECT_LT(after.cwnd_bytes, before.cwnd_bytes);  // the premise: a delay cut
  EXPECT_GE(after.cwnd_bytes, before.cwnd_bytes / 2);
}

// CC-5's rule in full: a sample no more than target_queue_delay (50 us)
// above min_rtt cuts nothing; one above it cuts the window by the excess
// over the sample, (rtt - min_rtt - 50 us) / rtt, where that is less than
// max_delay_decrease_pct (50 %); and once per srtt. After warm-up (min_rtt
// 4 us), two-packet WRITEs, each packet acknowledged on its own, the second
// 1 us after the first: ACKs 40 us late (44 and 45 us samples) leave the window
// alone; 80 us late (84 us: a 30 us excess) the first takes 30/84 of it,
// 36 %, and the second, within an srtt of that cut, nothing more.
TEST(Engine, DelayCutFollowsTheFormulaAboveTheTarget) {  // CC-5
  EndpointConfig c = cfg(166, 1);
  EndpointConfig peer = cfg(167);
  peer.ack_every = 1;
  WritePair w(c, peer, Loop::kDelayNs, 2 * 4096, 0x54);
  auto& [loop, a, src, dst] = w;
  ASSERT_TRUE(warm_up_paths(loop, a, src, dst));
  uint64_t late = 0;
  int data = 0;  // of the WRITE under way
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) && ++data == 2)
      return 1'000;
    return from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck) ? late : 0;
  };
  PathStats start;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, start));
  ASSERT_EQ(start.min_rtt_ns, 2 * Loop::kDelayNs);
  // During a WRITE: the first window below `before`, the lowest within 5 us
  // of it (less than an srtt), and the lowest of all.
  uint32_t before = 0, first_cut = 0, lowest_soon = 0, lowest = 0;
  TimeNs cut_at;
  loop.before_poll = [&](int from) {
    PathStats ps;
    if (from != 0 || !loop.ep(0).path_stats(a, 0, ps)) return;
    if (first_cut == 0 && ps.cwnd_bytes < before) {
      first_cut = lowest_soon = ps.cwnd_bytes;
      cut_at = loop.now();
    }
    if (first_cut != 0 && loop.now().since(cut_at) < 5'000)
      lowest_soon = std::min(lowest_soon, ps.cwnd_bytes);
    lowest = std::min(lowest, ps.cwnd_bytes);
  };
  const auto write_late = [&](uint64_t ns, uint64_t id) {
    late = ns;
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, 0, ps));
    before = lowest = ps.cwnd_bytes;
    first_cut = 0;
    data = 0;
    ASSERT_TRUE(write_completes(loop, a, src, dst, 2 * 4096, id));
  };
  ASSERT_NO_FATAL_FAILURE(write_late(40'000, 20));
  EXPECT_EQ(lowest, start.cwnd_bytes);
  ASSERT_NO_FATAL_FAILURE(write_late(80'000, 21));
  const uint64_t rtt = start.min_rtt_ns + 80'000;
  const uint64_t excess = rtt - start.min_rtt_ns - c.cc.target_queue_delay_ns;
  EXPECT_EQ(first_cut, before - uint64_t{before} * excess / rtt);
  EXPECT_EQ(lowest_soon, first_cut);
  PathStats end;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, end));
  EXPECT_EQ(end.losses, 0u);  // the premises: late, not lost,
  EXPECT_GE(end.packets_acked - start.packets_acked, 4u);
}

// CC-3: once per window of acknowledged data, alpha moves g = 1/16 of the
// way to that window's fraction of CE-marked packets. One path, one-packet
// WRITEs one at a time, so that each ACK covers one packet and the window
// only holds still (CC-2): three windows unmarked take alpha from 1 to
// (15/16)^3, exactly, in the engine's 16-bit fixed point. Then every packet
// is marked: the first echo cuts the window by exactly alpha / 2 (CC-4),
// and the window after it, all marked, moves alpha a sixteenth of the way
// back to 1. A gain of 1/32 read 968 permille after the first window, not 937.
TEST(Engine, AlphaMovesASixteenthOfTheWayToEachWindowsMarkingFraction) {  // CC-3, CC-4
  EndpointConfig c = cfg(164, 1);
  WritePair w(c, 165, Loop::kDelayNs, 4096, 0x53);
  auto& [loop, a, src, dst] = w;
  // The rule's alpha in the engine's fixed point (1 << 16 is 1): exact, with
  // no rounding, while 16^k divides 2^16 * 15^k.
  constexpr uint64_t kOne = 1u << 16;
  const uint64_t unmarked[4] = {kOne, kOne * 15 / 16, kOne * 225 / 256, kOne * 3375 / 4096};
  const uint64_t marked = (unmarked[3] * 15 + kOne) / 16;  // F = 1
  ASSERT_EQ(marked * 16, unmarked[3] * 15 + kOne);         // exact too
  const auto permille = [](uint64_t alpha) { return static_cast<uint32_t>((alpha * 1000) >> 16); };
  const auto alpha_now = [&] {
    PathStats ps;
    EXPECT_TRUE(loop.ep(0).path_stats(a, 0, ps));
    return ps.alpha_permille;
  };
  ASSERT_EQ(alpha_now(), permille(kOne));  // it starts at 1
  bool mark = false;
  loop.mark_ce = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    return mark && from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite);
  };
  // One packet acknowledged per WRITE: alpha changes at most once a WRITE, to
  // the rule's next value.
  size_t windows = 0;
  for (int i = 0; i < 200 && windows < 3; ++i) {
    ASSERT_TRUE(write_completes(loop, a, src, dst, 4096, 10 + i));
    const uint32_t now = alpha_now();
    if (now == permille(unmarked[windows])) continue;
    ASSERT_EQ(now, permille(unmarked[windows + 1])) << "after " << windows << " windows";
    ++windows;
  }
  ASSERT_EQ(windows, 3u);
  PathStats before;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, before));
  mark = true;
  ASSERT_TRUE(write_completes(loop, a, src, dst, 4096, 300));
  PathStats cut;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, cut));
  EXPECT_EQ(cut.ce_marks, 1u);
  EXPECT_EQ(cut.cwnd_bytes, before.cwnd_bytes - ((before.cwnd_bytes * unmarked[3]) >> 17));
  uint32_t now = cut.alpha_permille;
  for (int i = 0; i < 200 && now == permille(unmarked[3]); ++i) {
    ASSERT_TRUE(write_completes(loop, a, src, dst, 4096, 400 + i));
    now = alpha_now();
  }
  EXPECT_EQ(now, permille(marked));
}

}  // namespace
}  // namespace metaroce::test
