// Engine unit tests over a fixed-delay shuttle: the API contract, memory
// protection, the handshake and error paths. Rule IDs refer to
// docs/spec/metaroce-v0.1.md. Lossy multipath behaviour is covered by the
// property tests on the harness (tests/property).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

TEST(Engine, IdleConnectionIsSmall) {
  // Issue budget: 10,000 idle connections on one endpoint.
  const size_t idle = Endpoint::idle_connection_bytes();
  std::printf("idle connection: %zu bytes\n", idle);
  EXPECT_LT(idle, 4096u);
}

TEST(Engine, WriteLandsExactly) {  // PLACE-2, COMP-1
  Loop loop(cfg(1), cfg(2));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 1 << 20, 0);
  pattern(src.bytes, 3);
  Buf dst(loop.ep(1), (1 << 20) + 128, kAccessRemoteWrite, 0xEE);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20, 7, 64)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(done[0].wr_id, 7u);
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin() + 64));
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(dst.bytes[i], 0xEE);
  for (size_t i = 64 + (1 << 20); i < dst.bytes.size(); ++i) EXPECT_EQ(dst.bytes[i], 0xEE);
}

TEST(Engine, SendWriteImmAndReadComplete) {  // PLACE-3, PLACE-4, COMP-2, COMP-3
  Loop loop(cfg(3), cfg(4));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 100000, kAccessLocalWrite);
  pattern(src.bytes, 9);
  Buf rbuf(loop.ep(1), 200000, kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead);
  pattern(rbuf.bytes, 1);
  std::vector<uint8_t> remote_copy = rbuf.bytes;
  Buf rd(loop.ep(0), 50000, kAccessLocalWrite);

  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{100, rbuf.addr(0), 100000, rbuf.mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{101, rbuf.addr(0), 0, 0}), Status::kOk);
  SendWr s;
  s.wr_id = 1;
  s.op = WrOpcode::kSendImm;
  s.local_addr = src.addr();
  s.length = 99999;
  s.lkey = src.mr.lkey;
  s.imm = 0xABCD;
  ASSERT_EQ(loop.ep(0).post_send(a, s), Status::kOk);
  SendWr wi = write_wr(src, rbuf, 5000, 2, 150000);
  wi.op = WrOpcode::kWriteImm;
  wi.imm = 77;
  ASSERT_EQ(loop.ep(0).post_send(a, wi), Status::kOk);
  SendWr r;
  r.wr_id = 3;
  r.op = WrOpcode::kRead;
  r.local_addr = rd.addr();
  r.length = 50000;
  r.lkey = rd.mr.lkey;
  r.remote_addr = rbuf.addr(100000);
  r.rkey = rbuf.mr.rkey;
  ASSERT_EQ(loop.ep(0).post_send(a, r), Status::kOk);

  std::vector<Completion> c0, c1;
  ASSERT_TRUE(loop.run_until([&] {
    auto d = loop.drain(0);
    c0.insert(c0.end(), d.begin(), d.end());
    d = loop.drain(1);
    c1.insert(c1.end(), d.begin(), d.end());
    return c0.size() == 3 && c1.size() == 2;
  }));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c0[i].status, Status::kOk);
    EXPECT_EQ(c0[i].wr_id, i + 1);  // COMP-2: posting order
  }
  EXPECT_EQ(c1[0].wr_id, 100u);
  EXPECT_EQ(c1[0].byte_len, 99999u);
  EXPECT_TRUE(c1[0].has_imm);
  EXPECT_EQ(c1[0].imm, 0xABCDu);
  EXPECT_EQ(c1[1].wr_id, 101u);
  EXPECT_EQ(c1[1].op, CompletionOp::kRecvWriteImm);
  EXPECT_EQ(c1[1].imm, 77u);
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.begin() + 99999, rbuf.bytes.begin()));
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.begin() + 5000, rbuf.bytes.begin() + 150000));
  EXPECT_TRUE(std::equal(rd.bytes.begin(), rd.bytes.end(), remote_copy.begin() + 100000));
}

TEST(Engine, SurvivesLossWithSelectiveRetransmission) {  // LOSS-2, LOSS-3
  Loop loop(cfg(5), cfg(6));
  auto [a, b] = loop.connect();
  int n = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && (++n % 13) == 0;
  };
  Buf src(loop.ep(0), 4 << 20, 0);
  pattern(src.bytes, 5);
  Buf dst(loop.ep(1), 4 << 20, kAccessRemoteWrite);
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20, i, i << 20)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 4, done));
  for (auto& c : done) EXPECT_EQ(c.status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  const ConnStats* st = loop.ep(0).conn_stats(a);
  ASSERT_NE(st, nullptr);
  EXPECT_GT(st->retransmissions, 0u);
  EXPECT_LE(st->retransmissions, static_cast<uint64_t>(n / 13 + 10));
}

struct BadCase {
  const char* name;
  Status expect;
};

TEST(Engine, RemoteErrorsWriteNothingAndFlush) {  // NAK-2, NAK-3, PLACE-5
  for (int kind = 0; kind < 4; ++kind) {
    SCOPED_TRACE(kind);
    Loop loop(cfg(10 + kind), cfg(20 + kind));
    auto [a, b] = loop.connect();
    Buf src(loop.ep(0), 65536, 0, 0x55);
    Buf dst(loop.ep(1), 65536,
            kind == 2 ? kAccessRemoteRead : kAccessRemoteWrite | kAccessLocalWrite, 0x11);
    SendWr wr = write_wr(src, dst, 65536, 1);
    Status expect = Status::kOk;
    switch (kind) {
      case 0:
        wr.rkey ^= 1;
        expect = Status::kRemoteBadKey;
        break;
      case 1:
        wr.remote_addr += 1;
        expect = Status::kRemoteOutOfBounds;
        break;
      case 2: expect = Status::kRemoteAccessDenied; break;
      case 3:
        wr.op = WrOpcode::kSend;
        ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{9, dst.addr(), 100, dst.mr.lkey}), Status::kOk);
        expect = Status::kRemoteLengthError;
        break;
    }
    ASSERT_EQ(loop.ep(0).post_send(a, wr), Status::kOk);
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 100, 2)), Status::kOk);
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, 2, done));
    EXPECT_EQ(done[0].status, expect);
    EXPECT_EQ(done[1].status, Status::kFlushed);
    for (uint8_t v : dst.bytes) ASSERT_EQ(v, 0x11);
    Event ev;
    bool err = false;
    while (loop.ep(0).poll_event(ev)) err |= ev.kind == EventKind::kError;
    EXPECT_TRUE(err);
  }
}

TEST(Engine, ReceiverNotReadyRetriesUntilPosted) {  // NAK-4, LOSS-7
  Loop loop(cfg(30), cfg(31));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 10000, 0, 0x42);
  Buf dst(loop.ep(1), 10000, kAccessLocalWrite);
  SendWr s;
  s.op = WrOpcode::kSend;
  s.local_addr = src.addr();
  s.length = 10000;
  s.lkey = src.mr.lkey;
  ASSERT_EQ(loop.ep(0).post_send(a, s), Status::kOk);
  loop.run_until([] { return false; }, 300'000);
  EXPECT_GT(loop.ep(1).conn_stats(b)->rnr_naks_sent, 0u);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{5, dst.addr(), 10000, dst.mr.lkey}), Status::kOk);
  std::vector<Completion> c0, c1;
  ASSERT_TRUE(loop.run_until([&] {
    auto d = loop.drain(1);
    c1.insert(c1.end(), d.begin(), d.end());
    d = loop.drain(0);
    c0.insert(c0.end(), d.begin(), d.end());
    return !c1.empty() && !c0.empty();
  }));
  EXPECT_EQ(c1[0].status, Status::kOk);
  for (uint8_t v : dst.bytes) ASSERT_EQ(v, 0x42);
  ASSERT_EQ(c0.size(), 1u);
  EXPECT_EQ(c0[0].status, Status::kOk);
}

TEST(Engine, LocalBufferChecks) {
  Loop loop(cfg(40), cfg(41));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0);
  SendWr wr = write_wr(src, src, 8192, 1);
  EXPECT_EQ(loop.ep(0).post_send(a, wr), Status::kLocalProtection);
  wr.length = 100;
  wr.lkey = 999;
  EXPECT_EQ(loop.ep(0).post_send(a, wr), Status::kLocalProtection);
  wr.op = WrOpcode::kRead;
  wr.lkey = src.mr.lkey;
  EXPECT_EQ(loop.ep(0).post_send(a, wr), Status::kLocalProtection);  // needs local write
  EXPECT_EQ(loop.ep(0).post_send(ConnId{12345}, wr), Status::kNoSuchConnection);
  MemoryRegion mr;
  EXPECT_EQ(loop.ep(0).register_memory(nullptr, 10, 0, mr), Status::kInvalidArgument);
  EXPECT_EQ(loop.ep(0).register_memory(src.bytes.data(), 0, 0, mr), Status::kInvalidArgument);
  EXPECT_EQ(loop.ep(0).register_memory(src.bytes.data(), 10, 0x80, mr), Status::kInvalidArgument);
  EXPECT_EQ(loop.ep(0).deregister_memory(777), Status::kInvalidArgument);
}

TEST(Engine, TooSmallTransmitBufferIsRefusedAndLosesNothing) {
  Loop loop(cfg(42), cfg(43));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Endpoint& ep = loop.ep(0);
  // The largest datagram, and no more: mtu + 128 was the documented size.
  EXPECT_EQ(ep.transmit_buffer_bytes(false), ep.config().mtu + 48u + wire::kIcrcSize);
  EXPECT_GE(ep.transmit_buffer_bytes(true), wire::header_size(wire::Opcode::kAck, 16) + 4);
  Buf src(ep, 64 * 1024, 0);
  pattern(src.bytes, 9);
  Buf dst(loop.ep(1), 64 * 1024, kAccessRemoteWrite);
  ASSERT_EQ(ep.post_send(a, write_wr(src, dst, 64 * 1024, 5)), Status::kOk);
  // One byte short in each mode: neither may take a PSN it cannot send.
  std::vector<uint8_t> small(ep.transmit_buffer_bytes(false) - 1);
  TxDatagram tx;
  EXPECT_FALSE(ep.poll_transmit(loop.now(), small, tx));
  small.resize(ep.transmit_buffer_bytes(true) - 1);
  EXPECT_FALSE(ep.poll_transmit_gather(loop.now(), small, tx));
  EXPECT_EQ(ep.endpoint_stats().tx_buffer_too_small, 2u);
  small.resize(ep.transmit_buffer_bytes(true));
  ASSERT_TRUE(ep.poll_transmit_gather(loop.now(), small, tx));  // the first packet, dropped
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  ASSERT_NE(ep.conn_stats(a), nullptr);
  EXPECT_EQ(ep.conn_stats(a)->retransmissions, 1u);  // only the packet dropped on purpose
}
TEST(Engine, DeregisteredKeyIsRejected) {  // MR: bad key after deregistration
  Loop loop(cfg(50), cfg(51));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 1);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite, 9);
  ASSERT_EQ(loop.ep(1).deregister_memory(dst.mr.lkey), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kRemoteBadKey);
  for (uint8_t v : dst.bytes) ASSERT_EQ(v, 9);
}
// The receiver remembers the last range it granted (MrTable::remote): a
// deregistration must end that grant, for the very same range.
TEST(Engine, DeregisteredKeyIsRejectedAfterUse) {  // MR: bad key after deregistration
  Loop loop(cfg(52), cfg(53));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 1);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite, 9);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  std::fill(dst.bytes.begin(), dst.bytes.end(), uint8_t{9});
  ASSERT_EQ(loop.ep(1).deregister_memory(dst.mr.lkey), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  ASSERT_TRUE(loop.run_until_completions(0, 2, done));
  EXPECT_EQ(done[1].status, Status::kRemoteBadKey);
  for (uint8_t v : dst.bytes) ASSERT_EQ(v, 9);
}

TEST(Engine, ConnectRefusedAndTimeout) {  // CONN-2, CONN-4
  EndpointConfig closed = cfg(61);
  closed.accept_incoming = false;
  Loop loop(cfg(60), closed);
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  Event ev{};
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).poll_event(ev); }));
  EXPECT_EQ(ev.kind, EventKind::kConnectFailed);
  EXPECT_EQ(ev.status, Status::kConnectRefused);

  Loop dead(cfg(62), cfg(63));
  dead.drop = [](int, const std::vector<uint8_t>&) { return true; };
  ASSERT_EQ(dead.ep(0).connect(dead.addr(1), dead.now(), a), Status::kOk);
  ASSERT_TRUE(dead.run_until([&] { return dead.ep(0).poll_event(ev); }));
  EXPECT_EQ(ev.kind, EventKind::kConnectFailed);
  EXPECT_EQ(ev.status, Status::kConnectTimeout);
}

TEST(Engine, VersionMismatchIsRejected) {  // CONN-5
  Loop loop(cfg(70), cfg(71));
  loop.mutate = [](int from, std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == 0x20) {
      d[0] = static_cast<uint8_t>((2 << 4) | (d[0] & 0x0f));
    }
  };
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  Event ev{};
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).poll_event(ev); }));
  EXPECT_EQ(ev.kind, EventKind::kConnectFailed);
  EXPECT_EQ(ev.status, Status::kVersionMismatch);
}

TEST(Engine, CorruptPacketsAreDroppedAndRepaired) {  // BAD-4, INT-1
  Loop loop(cfg(80), cfg(81));
  auto [a, b] = loop.connect();
  int n = 0;
  loop.mutate = [&](int, std::vector<uint8_t>& d) {
    if (++n % 7 == 0) d[d.size() / 2] ^= 0x10;
  };
  Buf src(loop.ep(0), 1 << 20, 0);
  pattern(src.bytes, 77);
  Buf dst(loop.ep(1), 1 << 20, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_GT(loop.ep(1).endpoint_stats().bad_checksum + loop.ep(0).endpoint_stats().bad_checksum,
            0u);
}

TEST(Engine, CloseFlushesBothSides) {  // CONN-7, COMP-5
  Loop loop(cfg(90), cfg(91));
  auto [a, b] = loop.connect();
  Buf dst(loop.ep(1), 4096, kAccessLocalWrite);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{1, dst.addr(), 4096, dst.mr.lkey}), Status::kOk);
  loop.ep(0).close(a, loop.now());
  bool closed0 = false, closed1 = false;
  ASSERT_TRUE(loop.run_until([&] {
    Event ev;
    while (loop.ep(0).poll_event(ev)) closed0 |= ev.kind == EventKind::kClosed;
    while (loop.ep(1).poll_event(ev)) closed1 |= ev.kind == EventKind::kClosed;
    return closed0 && closed1;
  }));
  auto c1 = loop.drain(1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].status, Status::kPeerClosed);
  EXPECT_FALSE(loop.ep(1).is_established(b));
}

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

uint64_t window_sum(Loop& loop, ConnId a) {
  uint64_t sum = 0;
  for (size_t i = 0; i < loop.ep(0).path_count(a); ++i) {
    PathStats ps;
    if (loop.ep(0).path_stats(a, i, ps)) sum += ps.cwnd_bytes;
  }
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
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4 << 20, 9000)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_GT(window_sum(loop, a), 4 * initial);
  EXPECT_EQ(std::memcmp(src.bytes.data(), dst.bytes.data(), src.bytes.size()), 0);
}

// The largest sum of in-flight bytes over a's paths seen during a 4 MiB WRITE.
uint64_t peak_connection_inflight(uint32_t cap_packets) {
  EndpointConfig c = cfg(130);
  c.num_paths = 8;
  c.cc.max_inflight_packets = cap_packets;
  Loop loop(c, cfg(131));
  loop.delay_ns = 20'000;  // a long RTT, so that slow start opens every path wide
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4 << 20, 0, 0x5a);
  Buf dst(loop.ep(1), 4 << 20, kAccessRemoteWrite);
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

// An 8 MiB WRITE over 4 paths (10 us each way, seeds `seed` and seed + 1)
// on which path 0 loses the data packets `drop(n)` picks and delivers CE-marked
// those `mark(n)` picks (n counts its data packets from 1); `poll` sees path
// 0 before each of the sender's polls. Returns path 0's stats at the end.
PathStats write_over_a_lossy_path(uint64_t seed, uint32_t max_cwnd_packets,
                                  const std::function<bool(uint64_t)>& drop,
                                  const std::function<bool(uint64_t)>& mark,
                                  const std::function<void(const PathStats&)>& poll) {
  EndpointConfig c = cfg(seed);
  c.cc.max_cwnd_packets = max_cwnd_packets;  // without any signal slow start would not stop
  Loop loop(c, cfg(seed + 1));
  loop.delay_ns = 10'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 8 << 20, 0, 0x33);
  Buf dst(loop.ep(1), 8 << 20, kAccessRemoteWrite);
  PathStats p0;
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, p0));
  uint64_t seen = 0, marked = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 0 || d[1] != 0x01 || ((d[2] << 8 | d[3]) & 31) != 0) return false;
    return drop(++seen);
  };
  loop.mark_ce = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && tx.entropy == p0.entropy && mark(++marked);
  };
  loop.before_poll = [&](int from) {
    PathStats ps;
    if (from == 0 && loop.ep(0).path_stats(a, 0, ps)) poll(ps);
  };
  EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 8 << 20)), Status::kOk);
  bool done = false;
  EXPECT_TRUE(loop.run_until([&] {
    for (const Completion& d : loop.drain(0)) done |= d.status == Status::kOk;
    return done;
  }));
  EXPECT_EQ(std::memcmp(src.bytes.data(), dst.bytes.data(), src.bytes.size()), 0);
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, p0));
  return p0;
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

TEST(Engine, AckWithCongestionSignalDoesNotGrowTheWindow) {  // CC-2, CC-4, CC-6
  // Every data packet CE-marked, one path: its window falls to the floor (one
  // packet) and must stay there. An increase on the ACK that also cut the
  // window would hold it near two packets (DCTCP's balance of a halving and
  // one packet per RTT), and below a packet, where one ACK covers more than
  // the window, at twice the floor: an incast of many multipath senders at
  // twice its share of the bottleneck.
  EndpointConfig c = cfg(180);
  c.num_paths = 1;
  Loop loop(c, cfg(181));
  loop.delay_ns = 10'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 1 << 20, 0, 0x44);
  Buf dst(loop.ep(1), 1 << 20, kAccessRemoteWrite);
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
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_LT(floor, 4096u + 256);  // one packet with its headers
  EXPECT_EQ(highest_after_floor, 0u) << "the window grew again after reaching the floor";
}

TEST(Engine, DataGoesToThePathWithTheEmptiestWindow) {  // SCHED-1
  EndpointConfig c = cfg(140);
  c.num_paths = 4;
  c.cc.max_inflight_packets = 12;  // CC-9 binds first, so windows keep room
  Loop loop(c, cfg(141));
  loop.delay_ns = 10'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4 << 20, 0, 0x11);
  Buf dst(loop.ep(1), 4 << 20, kAccessRemoteWrite);
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
  Loop loop(c, cfg(161));
  loop.delay_ns = 50'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 1 << 20, 0, 0x22);
  Buf dst(loop.ep(1), 1 << 20, kAccessRemoteWrite);
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

TEST(Engine, TimedOutPathFallsToItsShareOfTheConnectionFloor) {  // LOSS-5, CC-6
  Loop loop(cfg(150), cfg(151));                                 // 4 paths
  auto [a, b] = loop.connect();
  PathStats dead;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 1, dead));
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    // Data and PROBEs on slot 1: neither the tail-loss probe nor LOSS-2 can
    // recover its packets, so only its RTO can.
    return from == 0 && (d[1] == 0x01 || d[1] == 0x12) && ((d[2] << 8 | d[3]) & 31) == 1;
  };
  Buf src(loop.ep(0), 1 << 20, 0, 0x21);
  Buf dst(loop.ep(1), 1 << 20, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 1 << 20)), Status::kOk);
  PathStats ps;
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).path_stats(a, 1, ps) && ps.timeouts > 0; }));
  EXPECT_EQ(ps.state, PathState::kProbing);
  EXPECT_EQ(ps.cwnd_bytes, (4096u + 64u) / 4);  // one packet shared by 4 paths
}

TEST(Engine, TailLossIsRepairedByProbeBeforeTheRto) {  // LOSS-8
  Loop loop(cfg(120), cfg(121));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 0x3c);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  auto write_and_wait = [&](uint64_t id) {
    EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, id)), Status::kOk);
    std::vector<Completion> done;
    EXPECT_TRUE(loop.run_until_completions(0, 1, done));
    return done.empty() ? Status::kFlushed : done[0].status;
  };
  // Warm up: RTT samples on the path the next packet takes.
  for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(write_and_wait(i), Status::kOk);
  bool dropped = false;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == 0x01 && !dropped) return dropped = true;
    return false;
  };
  const TimeNs start = loop.now();
  // The tail packet is resent on another path when the timer fires, not one
  // probe round trip later; with nothing else in flight no probe is needed.
  TimeNs probe_at = TimeNs::never(), resend_at = TimeNs::never();
  int writes = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 0) return;
    if (d[1] == 0x12 && probe_at == TimeNs::never()) probe_at = loop.now();
    if (d[1] == 0x01 && ++writes == 2) resend_at = loop.now();
  };
  ASSERT_EQ(write_and_wait(99), Status::kOk);
  EXPECT_TRUE(dropped);
  EXPECT_NE(resend_at, TimeNs::never());
  EXPECT_EQ(probe_at, TimeNs::never());
  // The only packet of the write was lost and nothing followed it on its
  // path: the probe finds it well before the 1 ms minimum RTO.
  EXPECT_LT(loop.now().since(start), 500 * kMicrosecond);
  const ConnStats* st = loop.ep(0).conn_stats(a);
  EXPECT_EQ(st->timeouts, 0u);
  EXPECT_EQ(st->retransmissions, 1u);
}

TEST(Engine, TailProbeTimerAllowsForAPathsRttVariance) {  // LOSS-8
  // Path 0's queue swings between empty and 50 us (a link it shares with
  // other traffic, a busy host), in order, with nothing lost: every 200 us
  // its delay climbs at half the rate of time and falls back as fast. A timer
  // of 1.25 srtt + ack_delay expires on the climbs and resends packets that
  // are only late; with the RTT variance in it, nothing is resent.
  constexpr uint64_t kSwing = 200 * kMicrosecond;
  EndpointConfig c = cfg(194);
  Loop loop(c, cfg(195));
  loop.delay_ns = 10'000;
  auto [a, b] = loop.connect();
  const TimeNs start = loop.now();
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    // Data and PROBEs (0x12) on path 0 share its queue, in order.
    const bool on_path0 =
        from == 0 && (d[1] == 0x01 || d[1] == 0x12) && ((d[2] << 8 | d[3]) & 31) == 0;
    if (!on_path0) return 0;
    const uint64_t phase = loop.now().since(start) % kSwing;
    return phase < kSwing / 2 ? phase / 2 : (kSwing - phase) / 2;
  };
  Buf src(loop.ep(0), 32 << 20, 0, 0x2b);
  Buf dst(loop.ep(1), 32 << 20, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 32 << 20)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_GT(loop.now().since(start), 2 * kSwing);
  const ConnStats* rx = loop.ep(1).conn_stats(b);
  ASSERT_NE(rx, nullptr);
  EXPECT_EQ(rx->duplicates_received, 0u) << "packets resent that were only late";
  PathStats p0;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, p0));
  EXPECT_EQ(p0.timeouts, 0u);
}

TEST(Engine, TailProbeTimerRunsFromTheLatestTransmission) {  // LOSS-8
  // One path; a 4-packet WRITE whose last packet is lost. The ACKs of the
  // first three arrive a round trip after all four left: they must not put
  // the repair of the fourth back by that round trip. Nor does the timer
  // wait for a delayed ACK the last packet of a message never draws.
  EndpointConfig c = cfg(196);
  c.num_paths = 1;
  Loop loop(c, cfg(197));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4 * 4096, 0, 0x3d);
  Buf dst(loop.ep(1), 4 * 4096, kAccessRemoteWrite);
  ASSERT_TRUE(warm_up_paths(loop, a, src, dst));  // RTT samples
  int data_sent = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && ++data_sent == 4;
  };
  TimeNs resend_at = TimeNs::never(), last_ack_at{0};
  uint64_t srtt_then = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 1 && d[1] == 0x10) last_ack_at = loop.now() + loop.delay_ns;
    if (from != 0 || d[1] != 0x01 || data_sent != 4 || resend_at != TimeNs::never()) return;
    resend_at = loop.now();
    PathStats ps;
    if (loop.ep(0).path_stats(a, 0, ps)) srtt_then = ps.srtt_ns;
  };
  const TimeNs start = loop.now();
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4 * 4096, 99)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  ASSERT_NE(resend_at, TimeNs::never());
  ASSERT_GT(srtt_then, 0u);
  // The lost packet ends its message, so the receiver would have acknowledged
  // it at once (ACK-4): the timer has no ack_delay allowance.
  const uint64_t timer = srtt_then + srtt_then / 4;
  EXPECT_GE(last_ack_at.since(start), 2 * loop.delay_ns);  // the late ACKs came
  EXPECT_LE(resend_at.since(start), timer + 1'000);        // from the transmission
  EXPECT_EQ(loop.ep(0).conn_stats(a)->timeouts, 0u);
}

TEST(Engine, PacketOvertakenOnItsPathIsResentAQuarterRoundTripAfterTheAck) {  // LOSS-2, LOSS-8
  // One path; the 2nd packet of a 3-packet WRITE is lost. Only one later
  // packet arrives, short of reorder_threshold (3), but a path delivers in
  // order: the ACK that shows the gap has it resent srtt/4 later (LOSS-2's
  // time form), not when the tail-loss timer would fire (srtt, its variance
  // term and ack_delay after the path's last transmission), and with no
  // PROBE, since it was not a tail.
  EndpointConfig c = cfg(212);
  c.num_paths = 1;
  Loop loop(c, cfg(213));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 3 * 4096, 0, 0x3e);
  Buf dst(loop.ep(1), 3 * 4096, kAccessRemoteWrite);
  ASSERT_TRUE(warm_up_paths(loop, a, src, dst));  // RTT samples
  int dropped = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && ++dropped == 2;
  };
  int data_sent = 0, probes = 0;
  TimeNs last_new_at{0}, gap_ack_at = TimeNs::never(), resend_at = TimeNs::never();
  uint64_t srtt_then = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 1 && d[1] == 0x10 && gap_ack_at == TimeNs::never())
      gap_ack_at = loop.now() + loop.delay_ns;  // when it reaches the sender
    if (from != 0) return;
    if (d[1] == 0x12) ++probes;
    if (d[1] != 0x01) return;
    if (++data_sent <= 3) {
      last_new_at = loop.now();
    } else if (resend_at == TimeNs::never()) {
      resend_at = loop.now();
      PathStats ps;
      if (loop.ep(0).path_stats(a, 0, ps)) srtt_then = ps.srtt_ns;
    }
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 3 * 4096, 99)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  ASSERT_EQ(data_sent, 4);  // three, and one resend
  ASSERT_NE(resend_at, TimeNs::never());
  ASSERT_NE(gap_ack_at, TimeNs::never());
  ASSERT_GT(srtt_then, 0u);
  EXPECT_GE(resend_at.since(gap_ack_at), srtt_then / 4 - 500);
  EXPECT_LE(resend_at.since(gap_ack_at), srtt_then / 4 + 500);
  // Sooner than the tail-loss timer, whose least is srtt + srtt/4 + ack_delay.
  EXPECT_LT(resend_at.since(last_new_at), srtt_then + c.ack_delay_ns);
  EXPECT_EQ(probes, 0);
  const ConnStats* st = loop.ep(0).conn_stats(a);
  EXPECT_EQ(st->retransmissions, 1u);
  EXPECT_EQ(st->timeouts, 0u);
  EXPECT_EQ(loop.ep(1).conn_stats(b)->duplicates_received, 0u);
}

TEST(Engine, AckOfAResentPacketDoesNotReorderTheResendPath) {  // LOSS-2
  // Two paths. The first data packet of a WRITE is held 60 us on path 0:
  // the packets after it on that path overtake it and it is resent on path
  // 1, behind packets still in flight there. Then the original arrives. Its
  // acknowledgement does not say which transmission got there, so it must
  // not count as path 1's newest delivery: path 1's earlier packets are not
  // lost. Only the resend arrives twice. (Counted as path 1's, it had 29 of
  // them declared lost and resent, each arriving twice: a late original on
  // bench/fabric's deep queues set off such a cascade.)
  EndpointConfig c = cfg(216);
  c.num_paths = 2;
  Loop loop(c, cfg(217));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  constexpr uint32_t kLen = 256 * 4096;
  Buf src(loop.ep(0), kLen, 0, 0x40);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite);
  // Each path a link that takes 2 us per packet, path 1 longer: its
  // packets are in flight across the resend.
  bool hold = false;
  std::array<TimeNs, 2> link_free{};
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || d[1] != 0x01) return 0;
    if (hold) {  // the held packet: late, past the link's queue
      hold = false;
      return 60'000;
    }
    const int slot = d[3] & 1;
    const uint64_t base = slot == 1 ? 40'000 : 20'000;
    TimeNs& free_at = link_free[static_cast<size_t>(slot)];
    const TimeNs arrive = std::max(loop.now() + base, free_at + 2'000);
    free_at = arrive;
    return arrive.since(loop.now());
  };
  ASSERT_TRUE(warm_up_paths(loop, a, src, dst, 16));  // both paths' RTTs known
  hold = true;
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, kLen, 98)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  ASSERT_FALSE(hold);
  loop.run_until([] { return false; }, 1'000'000);  // the late original arrives
  const ConnStats* st = loop.ep(0).conn_stats(a);
  EXPECT_EQ(st->retransmissions, 1u);
  EXPECT_EQ(loop.ep(1).conn_stats(b)->duplicates_received, 1u);
  PathStats slow;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 1, slow));
  EXPECT_EQ(slow.losses, 0u);
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

ExploreOutcome run_explore(uint64_t interval_ns, std::array<TestLink, 2> links,
                           const std::function<int(uint16_t entropy, uint16_t path0_entropy,
                                                   uint16_t path1_entropy)>& route) {
  ExploreOutcome out;
  EndpointConfig c = cfg(218);
  c.num_paths = 2;
  c.cc.explore_interval_ns = interval_ns;
  Loop loop(c, cfg(219));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  for (size_t i = 0; i < 2; ++i) {
    PathStats ps;
    if (!loop.ep(0).path_stats(a, i, ps)) return out;
    out.entropy_before[i] = ps.entropy;
  }
  std::array<TimeNs, 2> link_free{};
  uint16_t sent_entropy = 0;
  loop.on_sent = [&](int, const TxDatagram& tx, const std::vector<uint8_t>&) {
    sent_entropy = tx.entropy;
  };
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    if (from != 0 || (d[1] != 0x01 && d[1] != 0x12)) return 0;  // data and PROBEs
    const int l = route(sent_entropy, out.entropy_before[0], out.entropy_before[1]);
    const TestLink& link = links[static_cast<size_t>(l)];
    TimeNs& free_at = link_free[static_cast<size_t>(l)];
    const TimeNs arrive = std::max(loop.now(), free_at + link.gap_ns);
    free_at = arrive;
    return arrive.since(loop.now()) + link.delay_ns;
  };
  loop.ep(0).set_trace(
      [](void* ctx, const TraceEvent& ev) {
        if (ev.kind == TraceKind::kPathExplored)
          static_cast<ExploreOutcome*>(ctx)->moved.push_back(ev.path);
      },
      &out);
  constexpr uint32_t kLen = 1024 * 4096;
  Buf src(loop.ep(0), kLen, 0, 0x41);
  Buf dst(loop.ep(1), kLen, kAccessRemoteWrite);
  for (uint64_t i = 0; i < 4; ++i)
    if (loop.ep(0).post_send(a, write_wr(src, dst, kLen, 97 + i)) != Status::kOk) return out;
  std::vector<Completion> done;
  if (!loop.run_until_completions(0, 4, done)) return out;
  out.ok = src.bytes == dst.bytes;
  for (const Completion& d : done) out.ok = out.ok && d.status == Status::kOk;
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

TEST(Engine, LoneTailPathIsResentAQuarterRoundTripAfterTheNewestIsAcked) {  // LOSS-8
  // Two paths; of a 4-packet WRITE the 3rd is lost and the 4th, the newest,
  // goes on the other path and comes back. Nothing is left to send and only
  // the 3rd's path has a packet in flight: its timer comes forward to srtt/4
  // after that ACK, not the full tail-loss timer from its transmission.
  EndpointConfig c = cfg(214);
  c.num_paths = 2;
  Loop loop(c, cfg(215));
  loop.delay_ns = 5'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4 * 4096, 0, 0x3f);
  Buf dst(loop.ep(1), 4 * 4096, kAccessRemoteWrite);
  ASSERT_TRUE(warm_up_paths(loop, a, src, dst));  // RTT samples on both paths
  int dropped = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && ++dropped == 3;
  };
  std::vector<int> slots;
  std::vector<TimeNs> sent_at;
  uint64_t srtt_then = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 0 || d[1] != 0x01) return;
    slots.push_back(d[3] & 31);
    sent_at.push_back(loop.now());
    PathStats ps;
    if (slots.size() == 5 && loop.ep(0).path_stats(a, static_cast<size_t>(slots[2]), ps))
      srtt_then = ps.srtt_ns;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4 * 4096, 99)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  ASSERT_GE(slots.size(), 5u);
  // The premise: the 3rd and the 4th on different paths, nothing after the
  // 3rd on its own.
  ASSERT_NE(slots[2], slots[3]);
  ASSERT_GT(srtt_then, 0u);
  const TimeNs resend_at = sent_at[4];
  // The ACK for the 4th reached the sender a round trip after it left.
  const TimeNs newest_acked_at = sent_at[3] + 2 * loop.delay_ns;
  EXPECT_LE(resend_at.since(newest_acked_at), srtt_then / 4 + 1'000);
  EXPECT_LT(resend_at.since(sent_at[2]), srtt_then + srtt_then / 4 + c.ack_delay_ns);
  EXPECT_EQ(loop.ep(0).conn_stats(a)->timeouts, 0u);
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
  EndpointConfig c = cfg(198);
  c.num_paths = 2;
  c.cc.enabled = cc_enabled;
  Loop loop(c, cfg(199));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 16 * 4096, 0, 0x4e);
  Buf dst(loop.ep(1), 16 * 4096, kAccessRemoteWrite);
  DarkPathRun out;
  EXPECT_TRUE(warm_up_paths(loop, a, src, dst));  // RTT samples on both paths, in turn
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, out.path0_before));
  loop.drop = [](int from, const std::vector<uint8_t>& d) {
    return from == 0 && (d[3] & 31) == 0 && (d[1] == 0x01 || d[1] == 0x12);
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
  EndpointConfig c = cfg(196);
  c.num_paths = 4;
  Loop loop(c, cfg(197));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 64 * 4096, 0, 0x3c);
  Buf dst(loop.ep(1), 64 * 4096, kAccessRemoteWrite);
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
  EndpointConfig c = cfg(seed);
  c.num_paths = 8;
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
  (void)b;
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

// ACK-1's exception for a receive buffer of one path (a UDP GRO buffer): fed
// before draining, its packets draw one ACK covering them all; CE-marked ones
// fed packet by packet still draw one each (ACK-2), as the UDP driver does.
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
    const int slot = d[3] & 31;  // the path tag's slot (base header bytes 2-3)
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
      sent_slots.push_back(p.bh.path_tag & 31);
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

// What a trimming switch does to a data packet (TRIM-1): the payload goes,
// the ICRC stays its last four bytes.
void cut_payload(std::vector<uint8_t>& d) {
  const auto h = static_cast<long>(wire::header_size(static_cast<wire::Opcode>(d[1])));
  d.erase(d.begin() + h, d.end() - static_cast<long>(wire::kIcrcSize));
}

bool is_write(int from, const std::vector<uint8_t>& d) {
  return from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite);
}

wire::Packet decoded(const std::vector<uint8_t>& d) {
  wire::Packet p;
  EXPECT_EQ(wire::decode(d, p), wire::ParseError::kOk);
  return p;
}

// Whether an ACK acknowledges psn, cumulatively or selectively.
bool acks(const wire::AckBody& a, uint32_t psn) {
  const auto d = static_cast<int32_t>(psn - a.cum_psn);
  if (d < 0) return true;
  if (d == 0) return false;
  const uint32_t i = static_cast<uint32_t>(d) - 1;
  return i / 64 < a.sack_words && ((a.sack[i / 64] >> (i % 64)) & 1) != 0;
}

// A connection from a sender configured as `sender` to cfg(seed), a
// patterned source of `packets` full packets, and a destination of `fill`.
struct WriteSetup {
  Loop loop;
  std::pair<ConnId, ConnId> conn;
  Buf src, dst;
  WriteSetup(const EndpointConfig& sender, uint64_t seed, uint32_t packets, uint8_t fill)
      : loop(sender, cfg(seed)),
        conn(loop.connect()),
        src(loop.ep(0), packets * 4096, 0),
        dst(loop.ep(1), packets * 4096, kAccessRemoteWrite, fill) {
    pattern(src.bytes, static_cast<uint8_t>(seed));
  }
  // Writes the whole source as one WRITE; it completes and lands exactly.
  void write_all() {
    const auto len = static_cast<uint32_t>(src.bytes.size());
    ASSERT_EQ(loop.ep(0).post_send(conn.first, write_wr(src, dst, len)), Status::kOk);
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, 1, done));
    EXPECT_EQ(done[0].status, Status::kOk);
    EXPECT_EQ(src.bytes, dst.bytes);
  }
};

TEST(Engine, TrimmedPacketIsEchoedAtOnceAndNotPlaced) {  // TRIM-2
  for (const bool pc : {true, false}) {
    SCOPED_TRACE(pc ? "PC set" : "PC clear");
    EndpointConfig sc = cfg(200);
    sc.cover_payload = pc;
    constexpr uint32_t kPackets = 8;
    WriteSetup w(sc, 201, kPackets, 0xEE);
    Loop& loop = w.loop;
    int writes = 0;
    wire::Packet cut{};
    TimeNs cut_arrives{0};
    loop.trim = [&](int from, std::vector<uint8_t>& d) {
      if (!is_write(from, d) || ++writes != 3) return false;
      cut = decoded(d);
      cut_arrives = loop.now() + loop.delay_ns;
      cut_payload(d);
      return true;
    };
    int echoes = 0;
    loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
      if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kAck)) return;
      const wire::Packet p = decoded(d);
      if (!(p.ack.flags & wire::kAckEchoTrimmed)) return;
      ++echoes;
      EXPECT_EQ(p.ack.echo_psn, cut.bh.psn);
      EXPECT_EQ(p.ack.echo_path_tag, cut.bh.path_tag);
      EXPECT_EQ(p.ack.echo_tsval, cut.bh.tsval);
      EXPECT_EQ(loop.now(), cut_arrives);  // at once, not after ack_delay
      EXPECT_FALSE(acks(p.ack, cut.bh.psn));
      const auto at = w.dst.bytes.begin() + cut.mh.offset;
      EXPECT_TRUE(std::all_of(at, at + 4096, [](uint8_t v) { return v == 0xEE; }));
    };
    w.write_all();
    EXPECT_EQ(echoes, 1);
    EXPECT_EQ(loop.ep(1).conn_stats(w.conn.second)->trimmed_received, 1u);
    EXPECT_EQ(loop.ep(1).conn_stats(w.conn.second)->data_packets_received, kPackets);
  }
}

// One packet per path, so that only the echo (not LOSS-2) can find the cut
// one before the tail-loss timer (LOSS-8) does.
TEST(Engine, TrimEchoResendsAtOnceElsewhereAndCutsThePath) {  // TRIM-3, TRIM-4
  WriteSetup w(cfg(210), 211, 4, 0);
  Loop& loop = w.loop;
  const ConnId a = w.conn.first;
  auto slot_of = [&](uint16_t entropy) {
    PathStats ps;
    for (size_t i = 0; i < loop.ep(0).path_count(a); ++i)
      if (loop.ep(0).path_stats(a, i, ps) && ps.entropy == entropy) return i;
    return size_t{99};
  };
  int writes = 0;
  uint32_t cut_psn = 0;
  uint16_t cut_entropy = 0;
  TimeNs cut_sent{0}, resent{0};
  uint32_t cwnd_before = 0;
  PathStats after{};
  uint16_t resend_entropy = 0;
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    if (!is_write(from, d)) return;
    const uint32_t psn = decoded(d).bh.psn;
    if (++writes == 2) {
      cut_psn = psn;
      cut_entropy = tx.entropy;
      cut_sent = loop.now();
      PathStats ps;
      ASSERT_TRUE(loop.ep(0).path_stats(a, slot_of(tx.entropy), ps));
      cwnd_before = ps.cwnd_bytes;
    } else if (writes > 2 && psn == cut_psn && resent.ns == 0) {
      resent = loop.now();
      resend_entropy = tx.entropy;
      ASSERT_TRUE(loop.ep(0).path_stats(a, slot_of(cut_entropy), after));
    }
  };
  loop.trim = [&](int from, std::vector<uint8_t>& d) {
    if (!is_write(from, d) || writes != 2 || decoded(d).bh.psn != cut_psn || resent.ns != 0)
      return false;
    cut_payload(d);
    return true;
  };
  w.write_all();
  // The echo left the receiver on the cut packet's arrival and was acted on
  // on its own arrival: one round trip, far below the tail-loss timer.
  EXPECT_EQ(resent.ns - cut_sent.ns, 2 * loop.delay_ns);
  EXPECT_NE(resend_entropy, cut_entropy);  // LOSS-3
  EXPECT_LT(after.cwnd_bytes, cwnd_before);
  EXPECT_EQ(after.trims, 1u);
  EXPECT_EQ(after.losses, 0u);  // not a PATH-5 outcome
  const ConnStats* st = loop.ep(0).conn_stats(a);
  EXPECT_EQ(st->trims_echoed, 1u);
  EXPECT_EQ(st->retransmissions, 1u);
  EXPECT_EQ(st->losses_declared, 0u);
}

// A cut packet whose TRIMMED code point was lost on the way passes the ICRC
// when PC is clear; its short payload alone gives it away.
TEST(Engine, ShortPayloadWithoutTheFlagIsDropped) {  // TRIM-5
  EndpointConfig sc = cfg(220);
  sc.cover_payload = false;
  WriteSetup w(sc, 221, 8, 0);
  int writes = 0;
  w.loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    if (is_write(from, d) && ++writes == 3) cut_payload(d);
  };
  w.write_all();
  EXPECT_EQ(w.loop.ep(1).endpoint_stats().bad_length, 1u);
  EXPECT_EQ(w.loop.ep(1).conn_stats(w.conn.second)->trimmed_received, 0u);
}

TEST(Engine, PeerThatDisappearsIsDetected) {  // PATH-7
  EndpointConfig c = cfg(100);
  c.recovery.peer_timeout_ns = 50 * kMillisecond;
  Loop loop(c, cfg(101));
  auto [a, b] = loop.connect();
  loop.drop = [](int, const std::vector<uint8_t>&) { return true; };
  Buf src(loop.ep(0), 65536, 0);
  Buf dst(loop.ep(1), 65536, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 65536)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kPeerUnreachable);
}

}  // namespace
}  // namespace metaroce::test
