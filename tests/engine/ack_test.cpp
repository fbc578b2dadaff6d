// Acknowledgements (spec 7): when the receiver acknowledges at once, one ACK
// for a burst fed before draining, and which packet an ACK echoes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/bytes.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

// ENC-6: ACKs in the control class, everything else (the handshake, data,
// READ responses) in the data class, each as configured; a DSCP past 6 bits
// takes the default (63, the largest, is the TRIMMED code point).
TEST(Engine, AcksLeaveInTheControlClassAndTheRestInTheDataClass) {
  EndpointConfig c0 = cfg(80), c1 = cfg(81);
  for (EndpointConfig* c : {&c0, &c1}) {
    c->control_dscp = 46;
    c->data_dscp = 10;
  }
  Loop loop(c0, c1);
  size_t acks = 0, others = 0;
  loop.on_sent = [&](int, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    ASSERT_GE(d.size(), 2u);
    const bool ack = wire::is_acknowledgement(d[1]);
    EXPECT_EQ(tx.dscp, ack ? 46 : 10) << "opcode " << int{d[1]};
    ++(ack ? acks : others);
  };
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 3 * 4096, 0, 0x3c), dst(loop.ep(1), 3 * 4096, kAccessRemoteWrite);
  ASSERT_TRUE(write_completes(loop, a, src, dst, 3 * 4096, 1));
  EXPECT_GT(acks, 0u);
  EXPECT_GE(others, 5u);  // CONNECT_REQ, CONNECT_ACCEPT, 3 WRITEs

  EndpointConfig wide = cfg(82);
  wide.control_dscp = 200;
  wide.data_dscp = 64;
  const Endpoint ep(wide);
  EXPECT_EQ(ep.config().control_dscp, kDefaultControlDscp);
  EXPECT_EQ(ep.config().data_dscp, 0);
}

// ENC-6 for the replies that have no connection (a REJECT, a repeated
// DISCONNECT's ACK): neither ACK nor NAK, they leave in the data class.
TEST(Engine, RepliesWithoutAConnectionLeaveInTheDataClass) {
  EndpointConfig c0 = cfg(4918), c1 = cfg(4919);
  for (EndpointConfig* c : {&c0, &c1}) {
    c->control_dscp = 46;
    c->data_dscp = 10;
  }
  c1.accept_incoming = false;
  Loop loop(c0, c1);
  int rejects = 0;
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kConnectReject)) return;
    ++rejects;
    EXPECT_EQ(tx.dscp, 10);
  };
  EXPECT_TRUE(connect_fails_with(loop, Status::kConnectRefused));
  EXPECT_GT(rejects, 0);
}

TEST(Engine, PacketThatFillsTheLastGapIsAckedAtOnce) {  // ACK-4, ACK-5
  // Four packets on four paths; the 2nd path's and the 3rd's are held back 5
  // and 8 us, as a sprayed message's packets arrive over paths of unequal
  // queueing. (Held back on one path, later packets overtaking them would
  // declare them lost: LOSS-2's time form.)
  EndpointConfig rc = cfg(191);
  rc.ack_every = 8;  // only ACK-4 and ACK-5 decide
  EndpointConfig sc = cfg(190);
  sc.num_paths = 4;
  Loop loop(sc, rc);
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4 * 4096, 0, 0x55);
  Buf dst(loop.ep(1), 4 * 4096, kAccessRemoteWrite);
  std::vector<int> slots;
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || d[1] != 0x01) return 0;
    const int slot = tag_slot(d);
    slots.push_back(slot);
    return slot == 1 ? 5'000 : slot == 2 ? 8'000 : 0;
  };
  const TimeNs t0 = loop.now();
  std::vector<uint64_t> acks_at;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 1 && d[1] == 0x10) acks_at.push_back(loop.now().ns - t0.ns);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4 * 4096)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(src.bytes, dst.bytes);
  // At 2 us the last packet (and the first) arrive: an ACK at once. At 7 us
  // the 2nd fills a gap but leaves the 3rd missing: no ACK yet. At 10 us the
  // 3rd fills the last gap: an ACK at once, not at 17 us (ack_delay).
  ASSERT_EQ(slots, (std::vector<int>{0, 1, 2, 3}));  // the premise: one packet per path
  EXPECT_EQ(acks_at, (std::vector<uint64_t>{loop.delay_ns, loop.delay_ns + 8'000}));
  EXPECT_LT(loop.now().ns - t0.ns, 2 * loop.delay_ns + 8'000 + 1'000);
}

// ACK-1's exception for a receive buffer of one path (a UDP GRO buffer): fed
// before draining, its packets draw one ACK covering them all; CE-marked ones
// fed packet by packet still draw one each (ACK-2), as the UDP driver does.
TEST(Engine, BurstFedBeforeDrainingDrawsOneAck) {  // ACK-1, ACK-2
  for (const bool ce : {false, true}) {
    EndpointConfig c = cfg(150);
    c.num_paths = 1;  // one path: the burst is what one GRO buffer would hold
    Loop loop(c, cfg(151));
    auto [a, b] = loop.connect();
    ASSERT_TRUE(a.valid() && b.valid());
    constexpr uint32_t kPackets = 8;  // within the initial window (CC-1)
    Buf src(loop.ep(0), kPackets * c.mtu, 0, 0x5a);
    Buf dst(loop.ep(1), kPackets * c.mtu, kAccessRemoteWrite);
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, kPackets * c.mtu)), Status::kOk);
    std::vector<std::vector<uint8_t>> burst;
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    uint16_t entropy = 0;
    while (loop.ep(0).poll_transmit(loop.now(), buf, tx)) {
      burst.emplace_back(buf.begin(), buf.begin() + static_cast<long>(tx.len));
      entropy = tx.entropy;
    }
    ASSERT_EQ(burst.size(), kPackets);
    size_t acks = 0;
    auto drain = [&] {
      while (loop.ep(1).poll_transmit(loop.now(), buf, tx))
        acks += buf[1] == static_cast<uint8_t>(wire::Opcode::kAck) ? 1 : 0;
    };
    for (const auto& bytes : burst) {
      loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), entropy, ce, bytes}, loop.now());
      if (ce) drain();
    }
    drain();
    EXPECT_EQ(acks, ce ? kPackets : 1u) << (ce ? "CE-marked" : "plain");
    EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin()));
    const ConnStats* st = loop.ep(1).conn_stats(b);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(st->data_packets_received, kPackets);
  }
}

// ACK-1, ACK-6: a driver that drains once per receive call hands the engine
// several paths' buffers before one ACK goes out. That ACK echoes any packet
// of the batch alike, not the newest: fed path by path in the same order
// every time, the newest would always name the last path, and the others
// would get no RTT sample (see the test below).
TEST(Engine, AckForSeveralPathsBuffersEchoesAnyOfThem) {
  EndpointConfig sc = cfg(240);
  sc.num_paths = 4;
  sc.cc.max_cwnd_packets = 4;  // many small batches: four packets a path
  Loop loop(sc, cfg(241));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  constexpr uint32_t kPackets = 2048;
  Buf src(loop.ep(0), kPackets * sc.mtu, 0, 0x4d);
  Buf dst(loop.ep(1), kPackets * sc.mtu, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, kPackets * sc.mtu)), Status::kOk);
  TimeNs now = loop.now();
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  uint32_t echoes[4] = {0, 0, 0, 0};
  size_t batches = 0, acks = 0;
  for (int round = 0; round < 4 * static_cast<int>(kPackets); ++round) {
    std::vector<std::vector<uint8_t>> by_path[4];
    uint16_t entropy[4] = {0, 0, 0, 0};
    while (loop.ep(0).poll_transmit(now, buf, tx)) {
      wire::Packet p;
      ASSERT_EQ(wire::decode(std::span<const uint8_t>(buf.data(), tx.len), p),
                wire::ParseError::kOk);
      const uint32_t path = wire::path_tag_slot(p.bh.path_tag);
      ASSERT_LT(path, 4u);
      by_path[path].emplace_back(buf.begin(), buf.begin() + static_cast<long>(tx.len));
      entropy[path] = tx.entropy;
    }
    now = now + 5'000;
    for (uint32_t path = 0; path < 4; ++path)
      for (const auto& bytes : by_path[path])
        loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), entropy[path], false, bytes}, now);
    size_t batch_acks = 0;
    std::vector<std::vector<uint8_t>> back;
    while (loop.ep(1).poll_transmit(now, buf, tx)) {
      wire::Packet p;
      ASSERT_EQ(wire::decode(std::span<const uint8_t>(buf.data(), tx.len), p),
                wire::ParseError::kOk);
      if (p.bh.opcode == wire::Opcode::kAck) {
        ++batch_acks;
        ++echoes[wire::path_tag_slot(p.ack.echo_path_tag) % 4];
      }
      back.emplace_back(buf.begin(), buf.begin() + static_cast<long>(tx.len));
    }
    now = now + 5'000;
    for (const auto& bytes : back)
      loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 0, false, bytes}, now);
    if (!by_path[0].empty() && !by_path[3].empty()) {
      ++batches;
      acks += batch_acks;
    }
    if (loop.ep(0).next_timeout() <= now) loop.ep(0).handle_timeout(now);
    if (loop.ep(1).next_timeout() <= now) loop.ep(1).handle_timeout(now);
    if (std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin())) break;
  }
  EXPECT_EQ(src.bytes, dst.bytes);
  ASSERT_GE(batches, 100u);  // the premise: many batches holding several paths
  EXPECT_LE(acks, batches + batches / 8) << "one ACK per batch";
  const uint32_t all = echoes[0] + echoes[1] + echoes[2] + echoes[3];
  for (uint32_t path = 0; path < 4; ++path)
    EXPECT_GE(echoes[path] * 8, all) << echoes[path] << " of " << all << " ACKs echo path " << path;
}

TEST(Engine, AckEchoesEveryPathOfAStrictlyAlternatingSender) {  // ACK-1, ACK-5, ACK-6
  // Two paths whose packets arrive strictly in turn (0, 1, 0, 1, ...) and an
  // ACK for every second one: echoing the newest arrival would name path 1
  // every time and leave path 0 with no RTT sample, and so with no delay
  // signal (CC-5) and no way to tell its queue's drops from a broken link's
  // (CC-7, PATH-5). Each ACK names one of the packets it covers at random.
  EndpointConfig sc = cfg(230);
  sc.num_paths = 2;
  Loop loop(sc, cfg(231));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  constexpr uint32_t kPackets = 256;
  Buf src(loop.ep(0), kPackets * sc.mtu, 0, 0x3c);
  Buf dst(loop.ep(1), kPackets * sc.mtu, kAccessRemoteWrite);
  // Data arrives 100 ns apart at least, as off a link: one packet at a time.
  uint64_t last_arrival = 0;
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || d[1] != static_cast<uint8_t>(wire::Opcode::kWrite)) return 0;
    const uint64_t at = loop.now().ns + loop.delay_ns;
    last_arrival = std::max(at, last_arrival + 100);
    return last_arrival - at;
  };
  std::vector<uint16_t> sent_slots;
  uint32_t echoes[2] = {0, 0};
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    wire::Packet p;
    if (wire::decode(d, p) != wire::ParseError::kOk) return;
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite))
      sent_slots.push_back(wire::path_tag_slot(p.bh.path_tag));
    if (from == 1 && p.bh.opcode == wire::Opcode::kAck) ++echoes[p.ack.echo_path_tag & 1];
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, kPackets * sc.mtu)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(src.bytes, dst.bytes);
  // The premise: the sender alternated (SCHED-1's round robin between equal
  // windows), so the arrivals did too (one fixed delay).
  size_t turns = 0;
  for (size_t i = 1; i < sent_slots.size(); ++i) turns += sent_slots[i] != sent_slots[i - 1];
  ASSERT_GE(turns * 10, sent_slots.size() * 9);
  const uint32_t acks = echoes[0] + echoes[1];
  ASSERT_GE(acks, kPackets / 2 - 4);
  EXPECT_GE(echoes[0] * 4, acks) << echoes[0] << " of " << acks << " ACKs echo path 0";
  EXPECT_GE(echoes[1] * 4, acks) << echoes[1] << " of " << acks << " ACKs echo path 1";
  PathStats p0, p1;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, p0) && loop.ep(0).path_stats(a, 1, p1));
  EXPECT_GT(p0.min_rtt_ns, 0u);
  EXPECT_GT(p1.min_rtt_ns, 0u);
}

// An ACK whose cum_psn names PSNs never sent is bogus: dropped whole, its
// echo signals nothing to any path (the echo was read first, and its CE cut
// the path's window).
TEST(Engine, BogusAckChangesNoPath) {
  Loop loop(cfg(71), cfg(72));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 3);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  int forged = 0;
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    if (from != 1 || d.size() < 2 || d[1] != static_cast<uint8_t>(wire::Opcode::kAck)) return;
    ++forged;
    const size_t at = wire::kBaseHeaderSize;  // cum_psn, the ACK body's first field
    const uint32_t cum = static_cast<uint32_t>(d[at]) << 24 |
                         static_cast<uint32_t>(d[at + 1]) << 16 |
                         static_cast<uint32_t>(d[at + 2]) << 8 | d[at + 3];
    const uint32_t ahead = cum + 100000;
    for (int i = 0; i < 4; ++i) d[at + i] = static_cast<uint8_t>(ahead >> (24 - 8 * i));
    d[at + 14] |= wire::kAckEchoCe;  // flags: a CE echo would cut the path's window
    ASSERT_EQ(wire::seal(d, d.size() - wire::kIcrcSize, 0), d.size());
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  loop.run_until([&] { return forged >= 1; });
  loop.run_until([] { return false; }, 200'000);  // the forged ACK's arrival, and after
  ASSERT_GE(forged, 1);
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    EXPECT_EQ(ps.ce_marks, 0u) << "path " << i;
  }
}

// LOSS-6: tsval is 32 bits of nanoseconds, so it wraps every 4.29 s; a
// sample of 4 s or more may be anything and is discarded. Every ACK's
// echo_tsval here lies 4.2 s before the packet it echoes: the WRITE
// completes, and no path takes a sample (each keeps the initial RTT).
TEST(Engine, RttSampleOfFourSecondsOrMoreIsDiscarded) {  // LOSS-6
  Loop loop(cfg(73), cfg(74));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 65536, 0, 3);
  Buf dst(loop.ep(1), 65536, kAccessRemoteWrite);
  int forged = 0;
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kAck)) return;
    ++forged;
    uint8_t* ts = d.data() + wire::kBaseHeaderSize + 8;  // echo_tsval
    be::store32(ts, be::load32(ts) - 4'200'000'000u);
    ASSERT_EQ(wire::seal(d, d.size() - wire::kIcrcSize, 0), d.size());
  };
  ASSERT_TRUE(write_completes(loop, a, src, dst, 65536));
  EXPECT_GT(forged, 0);
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    EXPECT_EQ(ps.srtt_ns, cfg(73).recovery.initial_rtt_ns) << "path " << i;
  }
}

// Loop::mutate for ACK-9's tests: the first ACK endpoint 1 sends, its body
// changed by `edit` (which checks the test's premise first) and sealed again;
// `forged` counts it.
std::function<void(int, std::vector<uint8_t>&)> forge_first_ack(
    int& forged, std::function<void(wire::AckBody&)> edit) {
  return [&forged, edit = std::move(edit)](int from, std::vector<uint8_t>& d) {
    if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kAck) || forged > 0) return;
    wire::Packet p;
    ASSERT_EQ(wire::decode(d, p), wire::ParseError::kOk);
    wire::AckBody ack = p.ack;
    edit(ack);
    d.assign(256, 0);
    d.resize(wire::seal(d, wire::write_ack(d, p.bh, ack), 0));
    ++forged;
  };
}

// ACK-9: SACK bits of an ACK otherwise accepted that name PSNs at or beyond
// the next PSN the sender would use are ignored, and the rest of the ACK is
// processed. The first ACK of a 2-packet WRITE comes with a SACK word
// naming the next 8 PSNs, none sent yet: the WRITE completes on its cum and
// its echo gives a path an RTT sample, and the next WRITE's packets (those
// PSNs) are not taken as acknowledged: held back, it does not complete;
// let through, it lands.
TEST(Engine, SackBitsBeyondWhatWasSentAreIgnored) {
  Loop loop(cfg(75), cfg(76));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 10 * 4096, 0, 0x2e);
  Buf dst(loop.ep(1), 10 * 4096, kAccessRemoteWrite);
  int forged = 0;
  loop.mutate = forge_first_ack(forged, [](wire::AckBody& ack) {
    EXPECT_EQ(ack.sack_words, 0);  // the premise: both packets in order, nothing beyond cum
    ack.sack_words = 1;
    ack.sack[0] = 0xff;  // cum + 1 .. cum + 8: the cum is the next PSN, so all beyond it
  });
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 2 * 4096, 1)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(forged, 1);
  EXPECT_EQ(done[0].status, Status::kOk);
  uint64_t acked = 0, sampled = 0;
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    acked += ps.packets_acked;
    sampled += ps.min_rtt_ns > 0;
  }
  EXPECT_EQ(acked, 2u);
  EXPECT_GE(sampled, 1u);
  bool held = true;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return held && from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite);
  };
  SendWr rest = write_wr(src, dst, 8 * 4096, 2, 2 * 4096);
  rest.local_addr = src.addr(2 * 4096);
  ASSERT_EQ(loop.ep(0).post_send(a, rest), Status::kOk);
  done.clear();
  EXPECT_FALSE(loop.run_until_completions(0, 1, done, 50'000'000))
      << "a WRITE whose packets never arrived completed";
  held = false;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  // Every packet sent was acknowledged once on its path, and nothing stays
  // in flight.
  acked = 0;
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    acked += ps.packets_acked;
    EXPECT_EQ(ps.inflight_bytes, 0u) << "path " << i;
  }
  EXPECT_GE(acked, 10u);
}

// ACK-9, within a SACK word: a word that starts before the next PSN the
// sender would use but reaches past it keeps only its bits for PSNs sent.
// (SackBitsBeyondWhatWasSentAreIgnored's word starts past that PSN, a case
// the loop's stop at such a word already settles.) A 2-packet WRITE loses
// its first packet, so the second one's ACK carries a SACK word starting at
// it; forged bits name the 8 PSNs after it, none sent. Taken, they would
// mark the next WRITE's PSNs acknowledged before they were sent, and its
// true ACKs would then free none of their window.
TEST(Engine, SackWordReachingPastWhatWasSentKeepsOnlyBitsSent) {
  Loop loop(cfg(77), cfg(78));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 10 * 4096, 0, 0x2f);
  Buf dst(loop.ep(1), 10 * 4096, kAccessRemoteWrite);
  int dropped = 0, forged = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) && dropped++ == 0;
  };
  loop.mutate = forge_first_ack(forged, [](wire::AckBody& ack) {
    // The premise: the second packet, alone, named by the word's first bit.
    EXPECT_EQ(ack.sack_words, 1);
    EXPECT_EQ(ack.sack[0], 1u);
    ack.sack[0] |= uint64_t{0xff} << 1;  // cum + 2 .. cum + 9: the next PSN on
  });
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 2 * 4096, 1)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(forged, 1);
  EXPECT_EQ(done[0].status, Status::kOk);
  SendWr rest = write_wr(src, dst, 8 * 4096, 2, 2 * 4096);
  rest.local_addr = src.addr(2 * 4096);
  ASSERT_EQ(loop.ep(0).post_send(a, rest), Status::kOk);
  done.clear();
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  uint64_t acked = 0;
  for (size_t i = 0; i < 4; ++i) {
    PathStats ps;
    ASSERT_TRUE(loop.ep(0).path_stats(a, i, ps));
    acked += ps.packets_acked;
    EXPECT_EQ(ps.inflight_bytes, 0u) << "path " << i;
  }
  EXPECT_EQ(acked, 10u);  // the resent first packet once, every other one once
}

// Everything endpoint i sends at `now`, each datagram whole.
std::vector<std::vector<uint8_t>> sent_at(Loop& loop, int i, TimeNs now) {
  std::vector<std::vector<uint8_t>> out;
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  while (loop.ep(i).poll_transmit(now, buf, tx))
    out.emplace_back(buf.begin(), buf.begin() + static_cast<long>(tx.len));
  return out;
}

// The bodies of the ACKs among `sent`.
std::vector<wire::AckBody> acks_among(const std::vector<std::vector<uint8_t>>& sent) {
  std::vector<wire::AckBody> out;
  for (const std::vector<uint8_t>& d : sent) {
    wire::Packet p;
    if (wire::decode(d, p) == wire::ParseError::kOk && p.bh.opcode == wire::Opcode::kAck)
      out.push_back(p.ack);
  }
  return out;
}

// Endpoint 1 receives `d` from endpoint 0 at `now`, CE-marked if `ce`.
void feed(Loop& loop, const std::vector<uint8_t>& d, TimeNs now, bool ce = false) {
  loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), 0, ce, d}, now);
}

EndpointConfig every_eighth(EndpointConfig c) {
  c.ack_every = 8;
  return c;
}

// A connection whose receiver is fed by hand: a WRITE of `packets` packets
// posted on it, and the datagrams its sender sent at once, not delivered.
// The receiver's ack_every is 8: no count of ACK-1 decides when it answers.
struct HandFed {
  Loop loop;
  std::pair<ConnId, ConnId> conn;
  Buf src, dst;
  std::vector<std::vector<uint8_t>> data;
  HandFed(const EndpointConfig& s, const EndpointConfig& r, uint32_t packets)
      : loop(s, every_eighth(r)),
        conn(loop.connect()),
        src(loop.ep(0), packets * 4096, 0, 0x5c),
        dst(loop.ep(1), packets * 4096, kAccessRemoteWrite) {
    EXPECT_EQ(loop.ep(0).post_send(conn.first, write_wr(src, dst, packets * 4096)), Status::kOk);
    data = sent_at(loop, 0, loop.now());
  }
};

// ACK-3: a duplicate draws an ACK at once, echoing it with ECHO_DUP, though
// neither ACK-1's count (ack_every 8) nor ACK-5's delay asks for one.
TEST(Engine, DuplicateIsAckedAtOnceWithEchoDup) {
  HandFed f(cfg(194), cfg(195), 1);
  Loop& loop = f.loop;
  ASSERT_EQ(f.data.size(), 1u);
  feed(loop, f.data[0], loop.now());
  const auto first = acks_among(sent_at(loop, 1, loop.now()));
  ASSERT_EQ(first.size(), 1u);  // ACK-4: the last packet of its message
  EXPECT_EQ(first[0].flags & wire::kAckEchoDup, 0);
  feed(loop, f.data[0], loop.now());
  const auto again = acks_among(sent_at(loop, 1, loop.now()));
  ASSERT_EQ(again.size(), 1u) << "no ACK at once for a duplicate";
  EXPECT_EQ(again[0].flags & wire::kAckEchoDup, wire::kAckEchoDup);
  EXPECT_EQ(again[0].echo_psn, first[0].echo_psn);
  EXPECT_EQ(again[0].cum_psn, first[0].cum_psn);
  EXPECT_EQ(loop.ep(1).conn_stats(f.conn.second)->duplicates_received, 1u);
  EXPECT_EQ(f.src.bytes, f.dst.bytes);
}

// ACK-5: the delayed ACK leaves ack_delay after the first packet no ACK has
// covered; later arrivals (below ack_every) do not put it back.
TEST(Engine, DelayedAckCountsFromTheFirstPacketItCovers) {
  const EndpointConfig rc = cfg(197);
  HandFed f(cfg(196), rc, 3);
  Loop& loop = f.loop;
  ASSERT_EQ(f.data.size(), 3u);
  const TimeNs t0 = loop.now();
  feed(loop, f.data[0], t0);
  // The premise: neither of the first two packets asks for an ACK at once.
  EXPECT_TRUE(acks_among(sent_at(loop, 1, t0)).empty());
  const TimeNs t1 = t0 + rc.ack_delay_ns * 6 / 10;
  feed(loop, f.data[1], t1);
  EXPECT_TRUE(acks_among(sent_at(loop, 1, t1)).empty());
  const TimeNs due = t0 + rc.ack_delay_ns;
  EXPECT_EQ(loop.ep(1).next_timeout(), due);
  loop.ep(1).handle_timeout(due);
  const auto acks = acks_among(sent_at(loop, 1, due));
  ASSERT_EQ(acks.size(), 1u) << "no ACK ack_delay after the first packet";
  EXPECT_EQ(acks[0].cum_psn, be::load32(f.data[1].data() + 8) + 1);
}

// ACK-5: the delayed ACK is owed only while no ACK is: one already owed (a
// CE-marked packet's, ACK-2, not yet polled out when the timer runs) covers
// the packet that started the delay, since an ACK carries the receive state
// at the time it leaves. One ACK goes, not two.
TEST(Engine, DelayedAckIsNotAddedToAnAckAlreadyOwed) {  // ACK-5, ACK-2
  const EndpointConfig rc = cfg(199);
  HandFed f(cfg(198), rc, 3);
  Loop& loop = f.loop;
  ASSERT_EQ(f.data.size(), 3u);
  const TimeNs t0 = loop.now();
  feed(loop, f.data[0], t0, true);  // CE: an ACK owed at once
  feed(loop, f.data[1], t0);        // counted: the delay starts
  const TimeNs due = t0 + rc.ack_delay_ns;
  ASSERT_EQ(loop.ep(1).next_timeout(), due);
  loop.ep(1).handle_timeout(due);  // the driver had not polled meanwhile
  const auto acks = acks_among(sent_at(loop, 1, due));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].cum_psn, be::load32(f.data[1].data() + 8) + 1);
  EXPECT_EQ(acks[0].flags & wire::kAckEchoCe, wire::kAckEchoCe);
}

// SEQ-4: a PSN at cum + W is out of the window: dropped, counted and not
// acknowledged (its bit in the window would be cum's own); one at
// cum + W - 1 is new.
TEST(Engine, PacketAtCumPlusWindowIsOutOfWindow) {
  EndpointConfig sc = cfg(198), rc = cfg(199);
  sc.window_log2 = rc.window_log2 = 6;
  HandFed f(sc, rc, 1);
  Loop& loop = f.loop;
  ASSERT_EQ(f.data.size(), 1u);
  const uint32_t cum = be::load32(f.data[0].data() + 8);  // nothing received yet
  const size_t h = wire::header_size(wire::Opcode::kWrite);
  auto at = [&](uint32_t psn) {
    std::vector<uint8_t> d = f.data[0];
    be::store32(d.data() + 8, psn);
    EXPECT_EQ(wire::seal(d, h, d.size() - h - wire::kIcrcSize), d.size());
    return d;
  };
  const ConnStats* st = loop.ep(1).conn_stats(f.conn.second);
  ASSERT_NE(st, nullptr);
  feed(loop, at(cum + 64), loop.now());
  EXPECT_EQ(st->out_of_window, 1u);
  EXPECT_EQ(st->data_packets_received, 0u);
  EXPECT_TRUE(acks_among(sent_at(loop, 1, loop.now())).empty());
  feed(loop, at(cum + 63), loop.now());
  EXPECT_EQ(st->out_of_window, 1u);
  EXPECT_EQ(st->data_packets_received, 1u);
  const auto acks = acks_among(sent_at(loop, 1, loop.now()));
  ASSERT_EQ(acks.size(), 1u);
  EXPECT_EQ(acks[0].cum_psn, cum);  // the window's first PSN still missing
}

// ACK-2, ACK-6: the ACK a CE-marked packet draws at once echoes that very
// packet, whatever arrivals counted towards ACK-1 wait with it (a draw
// among those would lose its mark one time in two). Five times, two
// plain packets and then a CE-marked one.
TEST(Engine, CeMarkedPacketIsEchoedByItsOwnAck) {
  HandFed f(cfg(200), cfg(201), 16);
  Loop& loop = f.loop;
  ASSERT_EQ(f.data.size(), 16u);
  for (size_t i = 0; i + 3 < f.data.size(); i += 3) {
    feed(loop, f.data[i], loop.now());
    feed(loop, f.data[i + 1], loop.now());
    EXPECT_TRUE(acks_among(sent_at(loop, 1, loop.now())).empty());  // the premise
    feed(loop, f.data[i + 2], loop.now(), true);
    const auto acks = acks_among(sent_at(loop, 1, loop.now()));
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].echo_psn, be::load32(f.data[i + 2].data() + 8)) << "packet " << i + 2;
    EXPECT_EQ(acks[0].flags & wire::kAckEchoCe, wire::kAckEchoCe) << "packet " << i + 2;
  }
}

}  // namespace
}  // namespace metaroce::test
