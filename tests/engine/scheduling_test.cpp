// Scheduling (spec 8.2): which path the next packet takes, how full a
// path's window may get, and READ responses sharing the sender with the
// send queue.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

TEST(Engine, DataGoesToThePathWithTheEmptiestWindow) {  // SCHED-1
  EndpointConfig c = cfg(140);
  c.num_paths = 4;
  c.cc.max_inflight_packets = 12;  // CC-9 binds first, so windows keep room
  WritePair w(c, 141, 10'000, 4 << 20, 0x11);
  auto& [loop, a, src, dst] = w;
  PathStats first;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, first));
  // Every packet on path 0 arrives CE-marked: its window shrinks while the
  // others' grow, so the windows differ and the choice is visible.
  loop.mark_ce = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>&) {
    return from == 0 && tx.entropy == first.entropy;
  };
  std::vector<PathStats> before(4);
  loop.before_poll = [&](int from) {
    if (from != 0) return;
    for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(loop.ep(0).path_stats(a, i, before[i]));
  };
  uint64_t checked = 0, on_marked = 0, violations = 0;
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& bytes) {
    if (from != 0 || bytes[1] != 0x01 || tx.len < size_t{c.mtu} + 48) return;  // full WRITEs
    size_t used = 4;
    for (size_t i = 0; i < 4; ++i)
      if (before[i].entropy == tx.entropy) used = i;
    ASSERT_LT(used, 4u);
    auto free_of = [&](const PathStats& p) {
      return uint64_t{p.cwnd_bytes} - std::min<uint64_t>(p.cwnd_bytes, p.inflight_bytes);
    };
    for (size_t i = 0; i < 4; ++i) {
      const PathStats& p = before[i];
      const bool room = p.inflight_bytes < p.cwnd_bytes;
      // Below a packet (payload + 64 bytes charged) a path paces (CC-6): its
      // turn comes by time, not room.
      const bool paces = p.cwnd_bytes < c.mtu + 64u;
      if (i == used || p.state != PathState::kActive || !room || paces) continue;
      // free_i / cwnd_i must not exceed free_used / cwnd_used
      if (free_of(p) * before[used].cwnd_bytes > free_of(before[used]) * p.cwnd_bytes) ++violations;
    }
    ++checked;
    on_marked += used == 0;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4 << 20)), Status::kOk);
  bool done = false;
  ASSERT_TRUE(loop.run_until([&] {
    for (const Completion& d : loop.drain(0)) done |= d.status == Status::kOk;
    return done;
  }));
  EXPECT_GT(checked, 900u);
  EXPECT_EQ(violations, 0u);
  EXPECT_LT(on_marked * 8, checked);  // the marked path carries well under its 1/4
}

TEST(Engine, PathSendsWhileItsWindowIsNotFull) {  // SCHED-1
  // 6 packets over 4 paths: 1.5 packets each. Waiting for room for a whole
  // packet would send one per path and leave a third of the window unused.
  EndpointConfig c = cfg(160);
  c.cc.initial_cwnd_packets = 6;
  WritePair w(c, 161, 50'000, 1 << 20, 0x22);
  auto& [loop, a, src, dst] = w;
  uint64_t data_sent = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& bytes) {
    if (from == 0 && bytes[1] == 0x01) ++data_sent;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  // Nothing can be acknowledged before one delay has passed.
  ASSERT_FALSE(loop.run_until([] { return false; }, 40'000));
  EXPECT_EQ(data_sent, 8u);  // two per path: each sends until inflight reaches cwnd
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    EXPECT_GE(ps.inflight_bytes, ps.cwnd_bytes);
    EXPECT_LT(ps.inflight_bytes, ps.cwnd_bytes + c.mtu + 64);  // over by less than a packet
  }
}

TEST(Engine, BusyPathsWithEqualRoomTakeTurnsInRoundRobinOrder) {  // SCHED-1
  // Equal fixed windows (CC-8) and no ACK within the first round trip:
  // after each path's first packet every path has packets in flight, and
  // the paths tie on their free fraction at every choice. Ties go to the
  // first in round-robin order after the path used last, so the packets
  // take the paths in turn until the windows fill; the scan over busy paths
  // (every path looked at) decides each of them but the first four.
  EndpointConfig c = cfg(170);
  c.cc.enabled = false;
  c.num_paths = 4;
  WritePair w(c, 171, 50'000, 1 << 20, 0x33);
  auto& [loop, a, src, dst] = w;
  std::vector<uint16_t> entropies(4);
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    entropies[i] = ps.entropy;
  }
  std::vector<size_t> order;
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& bytes) {
    if (from != 0 || bytes[1] != 0x01) return;
    order.push_back(static_cast<size_t>(std::find(entropies.begin(), entropies.end(), tx.entropy) -
                                        entropies.begin()));
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  ASSERT_FALSE(loop.run_until([] { return false; }, 40'000));
  ASSERT_EQ(order.size(), 16u);  // CC-8's 16 packets, 4 a path
  for (size_t k = 0; k < order.size(); ++k) EXPECT_EQ(order[k], k % 4) << "packet " << k;
}

TEST(Engine, EachPacketOnBusyPathsTakesTheEmptiestWindowAsTheyStandThen) {  // SCHED-1
  // The rule's exact choice, packet after packet, from the paths as they
  // stand just before it: the largest free fraction among the ACTIVE paths
  // with room, ties in round-robin order after the path used last. A
  // scheduler that keeps what its scan found between packets must look
  // again after anything but its own sends: a scan kept past an ACK leaves a
  // path that gained room where it was (full, passed over), and one not told
  // of a send leaves a full path open.
  // CE marks on path 0 keep the windows apart, so that the fractions, not
  // the round-robin, decide most packets.
  EndpointConfig c = cfg(180);
  c.cc.explore_interval_ns = 0;  // PATH-8: a draining path the stats do not show
  Loop loop(c, cfg(181));
  loop.delay_ns = 10'000;
  auto [a, b] = loop.connect();
  // Data arrives in order 400 ns apart, as over a 100 Gbit/s link: ACKs
  // come back one by one, each opening one path's window a packet or two.
  uint64_t link_free = 0;
  loop.extra_delay = [&](int from, const std::vector<uint8_t>&) -> uint64_t {
    if (from != 0) return 0;
    const uint64_t at = std::max(loop.now().ns + loop.delay_ns, link_free);
    link_free = at + 400;
    return at - (loop.now().ns + loop.delay_ns);
  };
  Buf src(loop.ep(0), 4 << 20, 0, 0x44);
  Buf dst(loop.ep(1), 4 << 20, kAccessRemoteWrite);
  std::vector<PathStats> before(4);
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, before[0]));
  const uint16_t marked = before[0].entropy;
  loop.mark_ce = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>&) {
    return from == 0 && tx.entropy == marked;
  };
  const uint32_t need = c.mtu + 64u;  // a packet's charge
  const uint64_t packets = (4 << 20) / c.mtu;
  uint64_t writes = 0, stalls = 0;
  // Endpoint 0's latest poll found nothing to send (the loop polls 1 next):
  // then no path may have had room, with packets left and the PSN window
  // (SEQ-3) open.
  bool polled_empty = false;
  loop.before_poll = [&](int from) {
    if (from != 0) {
      if (!std::exchange(polled_empty, false) || writes >= packets) return;
      uint64_t acked = 0;
      for (const PathStats& p : before) acked += p.packets_acked;
      if (writes - acked >= 1024) return;  // SEQ-3
      for (size_t i = 0; i < 4; ++i) {
        const PathStats& p = before[i];
        const bool room =
            p.inflight_bytes > 0 ? p.inflight_bytes < p.cwnd_bytes : p.cwnd_bytes >= need;
        if (p.state == PathState::kActive && room && ++stalls <= 5)
          ADD_FAILURE() << "nothing sent after " << writes << " packets, path " << i
                        << " with room";
      }
      return;
    }
    polled_empty = true;
    for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(loop.ep(0).path_stats(a, i, before[i]));
  };
  size_t rr = 0;                               // the path after the one used last
  constexpr size_t kNone = 4, kUnchecked = 5;  // no path has room; the choice is not checked
  uint64_t checked = 0, all_busy = 0, some_full = 0, wrong = 0;
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& bytes) {
    if (from != 0) return;
    polled_empty = false;
    if (bytes[1] != 0x01) return;  // WRITE packets
    ++writes;
    size_t used = kNone;
    for (size_t i = 0; i < 4; ++i)
      if (before[i].entropy == tx.entropy) used = i;
    ASSERT_NE(used, kNone);
    PathStats after;
    ASSERT_TRUE(loop.ep(0).path_stats(a, used, after));
    // LOSS-3: a resend avoids its path, and held paths (LOSS-8) are not in
    // the stats: resends are not checked.
    const bool resend = after.retransmissions != before[used].retransmissions;
    size_t expect = resend ? kUnchecked : kNone;
    bool busy = true, full = false;
    for (size_t k = 0; k < 4; ++k) {
      const size_t i = (rr + k) % 4;
      const PathStats& p = before[i];
      if (p.state != PathState::kActive) continue;
      busy &= p.inflight_bytes > 0;
      // CC-6: an idle path below a packet's window paces, by a clock the
      // stats do not show. Were it due, it would take the packet (nothing
      // in flight) unless an idle path came first: the choice is checked
      // only when it went elsewhere, and then as if the path had no room.
      if (p.inflight_bytes == 0 && p.cwnd_bytes < need) {
        if (i == used) expect = kUnchecked;
        continue;
      }
      if (p.inflight_bytes > 0 && p.inflight_bytes >= p.cwnd_bytes) {
        full = true;
        continue;
      }
      if (expect == kUnchecked) continue;
      const PathStats& e = before[expect != kNone ? expect : i];
      if (expect == kNone ||
          uint64_t{e.inflight_bytes} * p.cwnd_bytes > uint64_t{p.inflight_bytes} * e.cwnd_bytes)
        expect = i;
    }
    rr = (used + 1) % 4;
    if (expect == kUnchecked) return;
    ++checked;
    all_busy += busy;
    some_full += full;
    if (used != expect && ++wrong <= 5)
      ADD_FAILURE() << "packet " << checked << " took path " << used << ", not " << expect;
  };
  ASSERT_TRUE(write_completes(loop, a, src, dst, 4 << 20));
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(stalls, 0u);
  EXPECT_GT(checked, 900u);  // of 1,024 (the rest went on a path that paces)
  // The cases the kept scan serves, and the full windows an ACK reopens.
  EXPECT_GT(all_busy, checked / 3);
  EXPECT_GT(some_full, checked / 4);
  std::printf("checked %llu packets, %llu with every path busy, %llu with a window full\n",
              static_cast<unsigned long long>(checked), static_cast<unsigned long long>(all_busy),
              static_cast<unsigned long long>(some_full));
}

TEST(Engine, IncomingReadsDoNotStarveTheSendQueue) {  // SCHED-4, READ-2
  // Both ends keep 16 READs of 100 KB outstanding at each other over windows
  // too small to send a whole backlog of responses in one round trip, so
  // each end always has READ responses queued. Its own READs must still go
  // out: each end's reads make progress, not only one end's.
  EndpointConfig ca = cfg(180), cb = cfg(181);
  ca.cc.enabled = cb.cc.enabled = false;  // CC-8: 16 packets per connection, always
  Loop loop(ca, cb);
  auto [a, b] = loop.connect();
  const ConnId conn[2] = {a, b};
  constexpr uint32_t kLen = 100000, kQd = 16;
  std::vector<std::unique_ptr<Buf>> src, dst;
  for (int i = 0; i < 2; ++i) {
    src.push_back(std::make_unique<Buf>(loop.ep(i), kQd * kLen, kAccessRemoteRead));
    pattern(src.back()->bytes, static_cast<uint8_t>(i + 1));
    dst.push_back(std::make_unique<Buf>(loop.ep(i), kQd * kLen, kAccessLocalWrite));
  }
  auto post_read = [&](int i, uint64_t slot) {
    SendWr r;
    r.wr_id = slot;
    r.op = WrOpcode::kRead;
    r.local_addr = dst[i]->addr(slot * kLen);
    r.length = kLen;
    r.lkey = dst[i]->mr.lkey;
    r.remote_addr = src[1 - i]->addr(slot * kLen);
    r.rkey = src[1 - i]->mr.rkey;
    return loop.ep(i).post_send(conn[i], r);
  };
  // One end starts first: its READs reach the other end before that end's
  // own READs are posted, behind a queue of responses.
  for (uint64_t s = 0; s < kQd; ++s) ASSERT_EQ(post_read(0, s), Status::kOk);
  const TimeNs start = loop.now();
  loop.run_until([&] { return loop.now().since(start) >= 10 * kMicrosecond; });
  for (uint64_t s = 0; s < kQd; ++s) ASSERT_EQ(post_read(1, s), Status::kOk);
  uint64_t completed[2] = {0, 0};
  bool failed = false;
  loop.run_until(
      [&] {
        for (int i = 0; i < 2; ++i) {
          for (const Completion& d : loop.drain(i)) {
            failed |= d.status != Status::kOk;
            ++completed[i];
            if (post_read(i, d.wr_id) != Status::kOk) failed = true;
          }
        }
        return failed || completed[0] + completed[1] >= 400;
      },
      50 * kMillisecond);
  EXPECT_FALSE(failed);
  std::printf("reads completed: %lu and %lu\n", static_cast<unsigned long>(completed[0]),
              static_cast<unsigned long>(completed[1]));
  EXPECT_GE(completed[0], 100u);
  EXPECT_GE(completed[1], 100u);
}

// SCHED-5: the endpoint's connections take turns, one datagram each
// (output.cpp's ready ring): a connection with a long message does not hold
// the transmitter until its window fills while another waits with work.
TEST(Engine, ConnectionsWithWorkTakeTurnsOneDatagramEach) {  // SCHED-5
  Loop loop(cfg(4913), cfg(4914));
  const ConnId a1 = loop.connect().first;
  const ConnId a2 = loop.connect().first;
  Buf src(loop.ep(0), 64 << 10, 0, 0x11);
  Buf dst1(loop.ep(1), 64 << 10, kAccessRemoteWrite);
  Buf dst2(loop.ep(1), 64 << 10, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a1, write_wr(src, dst1, 64 << 10, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a2, write_wr(src, dst2, 64 << 10, 2)), Status::kOk);
  std::vector<uint32_t> order;  // dst_conn of each data packet
  for (const wire::Packet& p : sent_packets(loop.ep(0), loop.now()))
    if (p.bh.opcode == wire::Opcode::kWrite) order.push_back(p.bh.dst_conn);
  ASSERT_GE(order.size(), 8u);
  for (size_t i = 1; i < 8; ++i) EXPECT_NE(order[i], order[i - 1]) << "data packet " << i;
}

}  // namespace
}  // namespace metaroce::test
