// Engine unit tests over a fixed-delay shuttle (loop.hpp): the API contract
// and memory protection. Local checks on posted work requests and
// registrations, exact placement of each operation, completions in posting
// order, the transmit buffer's size, and remote keys that die with their
// deregistration. Rule IDs refer to docs/spec/metaroce-v0.1.md. Lossy
// multipath behaviour is covered by the property tests on the harness
// (tests/property).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <vector>

#include "../common/enum_names.hpp"
#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/bytes.hpp"
#include "metaroce/wire.hpp"
#include "spec_vectors.hpp"

namespace metaroce::test {
namespace {

// Appendix A's codes are known, and no other byte is: a DISCONNECT's reason
// (CONN-8) may carry any, and the UDP driver names an unknown one by its value.
TEST(Status, OnlyAppendixACodesAreKnown) {
  int known = 0;
  for (int v = 0; v < 256; ++v) {
    const auto s = static_cast<Status>(v);
    EXPECT_EQ(is_known_status(s), status_name(s) != "kUnknown") << v;
    known += is_known_status(s) ? 1 : 0;
  }
  EXPECT_EQ(known, 21);  // 0x00-0x07 and 0x40-0x4c
  EXPECT_FALSE(is_known_status(static_cast<Status>(0xee)));
}

// Every trace printer (sim --trace-flow, the property tests) spells kinds by
// this function; a table indexed by the enum had fallen behind kPathExplored.
TEST(Trace, EveryKindHasItsOwnName) {
  expect_each_value_named(TraceKind::kPathExplored, trace_kind_name);
  EXPECT_STREQ(trace_kind_name(TraceKind::kPathExplored), "path_explored");
}

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

// register_memory_at checked that the names base..base+length-1 do not
// wrap, but not the bytes behind them: with base 0, a region at the top of
// the address space, or of length SIZE_MAX, was taken (kOk), and an access
// to it would compute a pointer past 2^64.
TEST(Engine, ARegionWhoseBytesWouldWrapPast2To64IsRefused) {  // MR-3, MR-4
  Endpoint ep(cfg(42));
  MemoryRegion mr;
  uint8_t byte = 0;
  void* top = reinterpret_cast<void*>(UINTPTR_MAX - 100);
  EXPECT_EQ(ep.register_memory_at(top, 4096, 0, 0, mr), Status::kInvalidArgument);
  EXPECT_EQ(ep.register_memory_at(&byte, SIZE_MAX, 0, 0, mr), Status::kInvalidArgument);
  EXPECT_EQ(ep.register_memory(top, 4096, 0, mr), Status::kInvalidArgument);
  EXPECT_EQ(ep.register_memory_at(top, 101, 0, 0, mr), Status::kOk);  // the last byte is the top
  EXPECT_EQ(ep.register_memory_at(&byte, 1, UINT64_MAX, 0, mr), Status::kOk);
}

// A peer address the engine cannot hold or tell apart is refused, not
// taken: an empty one is peer_of()'s answer for an unknown id, and the
// handshake once started to it with kOk.
TEST(Engine, ConnectToAnEmptyOrOverlongAddressIsRefused) {
  Loop loop(cfg(20), cfg(21));
  ConnId id{};
  EXPECT_EQ(loop.ep(0).connect(PeerAddr{}, loop.now(), id), Status::kInvalidArgument);
  PeerAddr overlong = loop.addr(1);
  overlong.len = sizeof overlong.bytes + 1;
  EXPECT_EQ(loop.ep(0).connect(overlong, loop.now(), id), Status::kInvalidArgument);
  uint32_t requests = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    requests += from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kConnectReq);
  };
  loop.run_until([] { return false; }, 1'000'000ull);
  EXPECT_EQ(requests, 0u) << "a refused connect() started a handshake";
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), id), Status::kOk);
  EXPECT_EQ(loop.ep(0).peer_of(id), loop.addr(1));
}

// A full connection table, either end's, is a specific error that costs
// nothing: connect() refuses at once and makes no connection, and a peer
// whose table is full refuses the request (CONN-4); a slot freed by a close
// serves the next connect. engine.hpp named neither.
TEST(Engine, AFullConnectionTableIsResourceExhaustedAndLeaksNothing) {  // CONN-4
  EndpointConfig c0 = cfg(22);
  c0.max_connections = 2;
  EndpointConfig c1 = cfg(23);
  c1.max_connections = 1;
  Loop loop(c0, c1);
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  EXPECT_TRUE(connect_fails_with(loop, Status::kResourceExhausted));
  ConnId x, y;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), x), Status::kOk);  // the second slot
  EXPECT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), y), Status::kResourceExhausted);
  EXPECT_FALSE(y.valid());
  EXPECT_EQ(loop.ep(0).conn_stats(y), nullptr);
  loop.ep(0).close(x, loop.now());
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), y), Status::kOk);
  EXPECT_NE(x, y);
  EXPECT_EQ(loop.ep(0).post_send(x, SendWr{}), Status::kNoSuchConnection);
}

TEST(Engine, RegionsNamedFromAChosenBase) {  // MR-4, MR-3
  // The source is named from 0 (addresses are offsets), the target from
  // just below 2^64, a READ's landing area from 0 again on the other side:
  // one address range for two regions, told apart by their keys.
  Loop loop(cfg(42), cfg(43));
  auto [a, b] = loop.connect();
  constexpr size_t kLen = 3 * 4096 + 100;
  constexpr uint32_t kAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  Buf src(loop.ep(0), kLen, kAccessLocalWrite, 0, 0);
  pattern(src.bytes, 11);
  Buf landing(loop.ep(0), kLen, kAccessLocalWrite, 0, 0);
  Buf dst(loop.ep(1), kLen, kAll, 0xEE, UINT64_MAX - kLen + 1);
  Buf rbuf(loop.ep(1), kLen, kAll, 0, 0);
  ASSERT_EQ(src.mr.addr, 0u);
  ASSERT_EQ(dst.mr.addr + (kLen - 1), UINT64_MAX);
  // WRITE 100.. of the source to 50.. of the target, READ it back, SEND it.
  SendWr rd;
  rd.wr_id = 2;
  rd.op = WrOpcode::kRead;
  rd.local_addr = landing.addr();
  rd.length = kLen - 100;
  rd.lkey = landing.mr.lkey;
  rd.remote_addr = dst.addr(50);
  rd.rkey = dst.mr.rkey;
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{9, rbuf.addr(10), kLen - 10, rbuf.mr.lkey}),
            Status::kOk);
  SendWr send;
  send.wr_id = 3;
  send.op = WrOpcode::kSend;
  send.local_addr = src.addr(100);
  send.length = kLen - 100;
  send.lkey = src.mr.lkey;
  SendWr write = write_wr(src, dst, kLen - 100, 1, 50);
  write.local_addr = src.addr(100);
  ASSERT_EQ(loop.ep(0).post_send(a, write), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, rd), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, send), Status::kOk);
  std::vector<Completion> done, recvd;
  ASSERT_TRUE(loop.run_until_completions(0, 3, done));
  ASSERT_TRUE(loop.run_until_completions(1, 1, recvd));
  for (const Completion& c : done) EXPECT_EQ(c.status, Status::kOk) << c.wr_id;
  EXPECT_EQ(recvd.at(0).status, Status::kOk);
  EXPECT_TRUE(std::equal(src.bytes.begin() + 100, src.bytes.end(), dst.bytes.begin() + 50));
  EXPECT_TRUE(std::equal(src.bytes.begin() + 100, src.bytes.end(), landing.bytes.begin()));
  EXPECT_TRUE(std::equal(src.bytes.begin() + 100, src.bytes.end(), rbuf.bytes.begin() + 10));
  // The process's own addresses name nothing in a region named from 0.
  SendWr by_pointer = write_wr(src, dst, 100);
  by_pointer.local_addr = reinterpret_cast<uint64_t>(src.bytes.data());
  EXPECT_EQ(loop.ep(0).post_send(a, by_pointer), Status::kLocalProtection);
  // A base whose range would wrap past 2^64 is refused.
  MemoryRegion mr;
  EXPECT_EQ(loop.ep(0).register_memory_at(src.bytes.data(), kLen, UINT64_MAX - kLen + 2,
                                          kAccessLocalWrite, mr),
            Status::kInvalidArgument);
  // One byte past the target's end: NAKed out of bounds, nothing written.
  const std::vector<uint8_t> before = dst.bytes;
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 100, 5, kLen - 99)), Status::kOk);
  done.clear();
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done.at(0).status, Status::kRemoteOutOfBounds);
  EXPECT_EQ(dst.bytes, before);
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

// MR-3: a message of no bytes names no memory. A WRITE, a WRITE_IMM and a
// READ of 0 bytes naming rkey 0, a key never issued or a deregistered one,
// at any address, complete kOk (as InfiniBand's zero-length RDMA operations
// do); the WRITE_IMM consumes a receive and delivers its immediate, a
// notification. They failed the connection with NAK 0x02 before. A WRITE of
// one byte to the same key still does (the key check is not gone).
TEST(Engine, MessagesOfNoBytesNameNoMemory) {
  Loop loop(cfg(52), cfg(53));
  auto [a, b] = loop.connect();
  Buf gone(loop.ep(1), 4096, kAccessRemoteWrite | kAccessRemoteRead, 9);
  const uint64_t stale = gone.mr.rkey;
  ASSERT_EQ(loop.ep(1).deregister_memory(gone.mr.lkey), Status::kOk);
  Buf src(loop.ep(0), 4096, kAccessLocalWrite, 1);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{50, 0, 0, 0}), Status::kOk);
  uint64_t id = 1;
  for (const uint64_t rkey : {uint64_t{0}, uint64_t{0xdeadbeef12345678}, stale}) {
    for (const WrOpcode op : {WrOpcode::kWrite, WrOpcode::kRead}) {
      SendWr wr;
      wr.wr_id = id++;
      wr.op = op;
      wr.length = 0;
      wr.remote_addr = 0x1234;
      wr.rkey = rkey;
      ASSERT_EQ(loop.ep(0).post_send(a, wr), Status::kOk);
    }
  }
  SendWr note;
  note.wr_id = id++;
  note.op = WrOpcode::kWriteImm;
  note.imm = 0x5eed;
  ASSERT_EQ(loop.ep(0).post_send(a, note), Status::kOk);
  std::vector<Completion> done, got;
  ASSERT_TRUE(loop.run_until_completions(0, id - 1, done));
  for (const Completion& c : done) EXPECT_EQ(c.status, Status::kOk) << "wr " << c.wr_id;
  ASSERT_TRUE(loop.run_until_completions(1, 1, got));
  EXPECT_EQ(got[0].wr_id, 50u);
  EXPECT_EQ(got[0].op, CompletionOp::kRecvWriteImm);
  EXPECT_EQ(got[0].byte_len, 0u);
  EXPECT_EQ(got[0].imm, 0x5eedu);
  EXPECT_TRUE(loop.ep(0).is_established(a));
  EXPECT_TRUE(loop.ep(1).is_established(b));
  SendWr one = write_wr(src, src, 1, id);
  one.remote_addr = 0x1234;
  one.rkey = stale;
  ASSERT_EQ(loop.ep(0).post_send(a, one), Status::kOk);
  done.clear();
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kRemoteBadKey);
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

// LOSS-7: a SEND whose packets all arrive before its receive is posted draws
// RNR for each; none of them is a loss. The receive is posted when the first
// RNR NAK leaves.
TEST(Engine, RnrRefusedMessageCountsNoLoss) {  // LOSS-7, NAK-4
  Loop loop(cfg(73), cfg(74));
  auto [a, b] = loop.connect();
  TraceLog log(loop.ep(0));
  Buf src(loop.ep(0), 8 * 4096, 0, 7);
  Buf rbuf(loop.ep(1), 8 * 4096, kAccessLocalWrite, 0);
  bool posted = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1 || posted || d.size() < 2 || d[1] != static_cast<uint8_t>(wire::Opcode::kNak))
      return;
    posted = true;
    ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{5, rbuf.addr(), 8 * 4096, rbuf.mr.lkey}), Status::kOk);
  };
  const SendWr s = send_wr(src, 0, 8 * 4096);
  ASSERT_EQ(loop.ep(0).post_send(a, s), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_TRUE(posted);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, rbuf.bytes);
  EXPECT_EQ(loop.ep(0).conn_stats(a)->losses_declared, 0u);
  EXPECT_GE(loop.ep(1).conn_stats(b)->rnr_naks_sent, 1u);
  // The trace names the resends' cause: the RNR, not a path's loss.
  const std::vector<LossCause> causes = log.loss_causes();
  EXPECT_EQ(causes.size(), loop.ep(0).endpoint_stats().rnr_resends);
  EXPECT_EQ(causes, std::vector<LossCause>(std::max<size_t>(causes.size(), 1), LossCause::kRnr));
}

// LOSS-7's wake: with nothing else in flight, the refused SEND goes again
// when the pause ends (the connection's timer names rnr_until), not at a
// later timeout. The receive is posted as the RNR NAK leaves.
TEST(Engine, RnrResendLeavesWhenThePauseEnds) {  // LOSS-7
  Loop loop(cfg(77), cfg(78));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 5);
  Buf rbuf(loop.ep(1), 4096, kAccessLocalWrite, 0);
  TimeNs nak_sent{0}, resent{0};
  int sends = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (d.size() < 2) return;
    if (from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kNak) && nak_sent.ns == 0) {
      nak_sent = loop.now();
      ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{5, rbuf.addr(), 4096, rbuf.mr.lkey}), Status::kOk);
    }
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kSend) && ++sends == 2)
      resent = loop.now();
  };
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 4096)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, rbuf.bytes);
  ASSERT_NE(nak_sent.ns, 0u);
  ASSERT_NE(resent.ns, 0u);
  const uint64_t pause = loop.ep(0).config().recovery.rnr_retry_ns;
  // The NAK takes delay_ns to arrive; the resend leaves at the pause's end.
  EXPECT_EQ(resent.since(nak_sent), loop.delay_ns + pause);
}

// A 1 MiB READ by endpoint 0 from endpoint 1, whose SEND, when with_send,
// is refused with RNR again and again (endpoint 0 posts its receive only
// after the READ), so that an RNR pause is on when the READ starts; every
// lose_every-th READ response endpoint 1 sends is lost (0: none). The SEND
// lands once the receive is posted.
struct ReadBesideRnr {
  uint64_t took_ns = 0;
  uint64_t rnr_naks = 0;  // endpoint 0's, over the whole run
  uint64_t resent = 0;    // endpoint 1's retransmissions during the READ
};
ReadBesideRnr read_beside_rnr(uint64_t seed, uint64_t rnr_retry_ns, int lose_every,
                              bool with_send) {
  constexpr uint32_t kLen = 1 << 20;
  EndpointConfig responder = cfg(seed + 1);
  responder.recovery.rnr_retry_ns = rnr_retry_ns;
  Loop loop(cfg(seed), responder);
  auto [a, b] = loop.connect();
  int responses = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return lose_every > 0 && from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kReadResp) &&
           ++responses % lose_every == 0;
  };
  Buf into(loop.ep(0), kLen, kAccessLocalWrite, 0);
  Buf from(loop.ep(1), kLen, kAccessRemoteRead, 0);
  pattern(from.bytes, 3);
  Buf msg(loop.ep(1), 4 * 4096, 0, 9);
  Buf rbuf(loop.ep(0), 4 * 4096, kAccessLocalWrite, 0);
  if (with_send) {
    EXPECT_EQ(loop.ep(1).post_send(b, send_wr(msg, 0, 4 * 4096, 7)), Status::kOk);
    // Until the first RNR NAK has left: the pause is on when the READ starts.
    EXPECT_TRUE(loop.run_until([&] { return loop.ep(0).conn_stats(a)->rnr_naks_sent > 0; }));
  }
  ReadBesideRnr r;
  const TimeNs start = loop.now();
  const uint64_t resent0 = loop.ep(1).conn_stats(b)->retransmissions;
  EXPECT_EQ(loop.ep(0).post_send(a, read_wr(into, from.addr(), from.mr.rkey, kLen, 1)),
            Status::kOk);
  std::vector<Completion> done;
  EXPECT_TRUE(loop.run_until_completions(0, 1, done));
  r.took_ns = loop.now().since(start);
  r.resent = loop.ep(1).conn_stats(b)->retransmissions - resent0;
  EXPECT_EQ(done.at(0).status, Status::kOk);
  EXPECT_EQ(into.bytes, from.bytes);
  r.rnr_naks = loop.ep(0).conn_stats(a)->rnr_naks_sent;
  if (with_send) {
    EXPECT_EQ(loop.ep(0).post_recv(a, RecvWr{5, rbuf.addr(), 4 * 4096, rbuf.mr.lkey}), Status::kOk);
    std::vector<Completion> sent;
    EXPECT_TRUE(loop.run_until_completions(1, 1, sent));
    EXPECT_EQ(sent.at(0).status, Status::kOk);
    EXPECT_EQ(rbuf.bytes, msg.bytes);
  }
  return r;
}

// LOSS-7: our SEND waits for the peer's receive buffer, not the READs the
// peer asks of us meanwhile: with many 10 us pauses within the READ, its
// responses flow through them, so it takes about as long as with no SEND at
// all (before, each pause held them for rnr_retry_ns).
TEST(Engine, RnrPauseLeavesReadResponsesFlowing) {  // LOSS-7, READ-2
  const ReadBesideRnr alone = read_beside_rnr(75, 10'000, 0, false);
  const ReadBesideRnr paused = read_beside_rnr(75, 10'000, 0, true);
  EXPECT_EQ(alone.rnr_naks, 0u);
  EXPECT_GE(paused.rnr_naks, 2u);  // the READ ran across more than one pause
  EXPECT_LE(paused.took_ns, alone.took_ns + alone.took_ns / 10)
      << "alone " << alone.took_ns << " ns, paused " << paused.took_ns << " ns";
}

// LOSS-7: a READ response's retransmission goes on through an RNR pause,
// though the send queue's own retransmissions (the refused SEND's) wait
// ahead of it in the retransmission queue. Every 40th READ response packet
// is lost, and the pauses are 1 ms long: the READ takes as long beside the
// refused SEND as alone, 24 us (before, a lost response waited for the
// pause to end, and the READ took 1,004 us).
TEST(Engine, RnrPauseLeavesReadResponseResendsFlowing) {  // LOSS-7, SCHED-2
  const ReadBesideRnr alone = read_beside_rnr(85, 1'000'000, 40, false);
  const ReadBesideRnr paused = read_beside_rnr(85, 1'000'000, 40, true);
  EXPECT_GE(alone.resent, 5u);  // the premise: responses were lost and resent
  EXPECT_GE(paused.resent, 5u);
  EXPECT_GE(paused.rnr_naks, 1u);
  EXPECT_LE(paused.took_ns, alone.took_ns + alone.took_ns / 5)
      << "alone " << alone.took_ns << " ns, paused " << paused.took_ns << " ns";
}

// Endpoint 0 READs `pages` pages of 4096 bytes on `conn`, page i of `src`
// into page i of `dst`, all posted at once: each completes without error
// and `dst` ends as `src`.
void read_pages_and_check(Loop& loop, ConnId conn, const Buf& src, const Buf& dst, uint32_t pages) {
  for (uint32_t i = 0; i < pages; ++i) {
    SendWr wr = read_wr(dst, src.addr(i * 4096), src.mr.rkey, 4096, i);
    wr.local_addr = dst.addr(i * 4096);
    ASSERT_EQ(loop.ep(0).post_send(conn, wr), Status::kOk);
  }
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, pages, done));
  for (const Completion& c : done) EXPECT_EQ(c.status, Status::kOk) << "READ " << c.wr_id;
  EXPECT_EQ(src.bytes, dst.bytes);
}

// LOSS-7, READ-3: the responder's max_reads is 2 and every ACK of the
// requester's is lost, so its READ queue (8) fills with answered READs; the
// next two READ_REQs, sent together, are both refused, and its RNR NAK names
// the first only (the second was refused while the NAK was pending). The
// requester resends both when the pause ends. The unnamed one waited for its
// path's tail-loss timer before (LOSS-8): with a round trip of 200 us,
// above rnr_retry's 100 us, it left 200 us after the named one.
TEST(Engine, ReadRequestsRefusedBehindAnRnrAreResentWithIt) {  // LOSS-7, READ-3
  EndpointConfig rc = cfg(924);
  rc.max_reads = 2;
  Loop loop(cfg(925), rc);
  loop.delay_ns = 100'000;
  auto [a, b] = loop.connect();
  constexpr uint32_t kReads = 12;
  Buf src(loop.ep(1), kReads * 4096, kAccessRemoteRead, 0),
      dst(loop.ep(0), kReads * 4096, kAccessLocalWrite);
  pattern(src.bytes, 3);
  bool lose_acks = true;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return lose_acks && from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck);
  };
  // Each READ_REQ's transmissions, and the PSN the first RNR NAK names.
  std::map<uint32_t, std::vector<uint64_t>> sent;
  std::optional<uint32_t> named;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kReadReq))
      sent[be::load32(d.data() + 8)].push_back(loop.now().ns);
    if (from == 1 && !named && d[1] == static_cast<uint8_t>(wire::Opcode::kNak) &&
        d[wire::kBaseHeaderSize + 4] == static_cast<uint8_t>(Status::kRnr)) {
      named = be::load32(d.data() + wire::kBaseHeaderSize);
      lose_acks = false;
    }
  };
  ASSERT_NO_FATAL_FAILURE(read_pages_and_check(loop, a, src, dst, kReads));
  ASSERT_TRUE(named.has_value());
  ASSERT_EQ(sent[*named].size(), 2u);
  // The other READ_REQ in flight with the named one: sent at the same time.
  const uint32_t other = *named + 1;
  ASSERT_EQ(sent[other].size(), 2u);
  ASSERT_EQ(sent[other][0], sent[*named][0]);
  EXPECT_EQ(sent[other][1], sent[*named][1])
      << "resent " << sent[other][1] - sent[*named][1] << " ns after the named one";
  EXPECT_EQ(loop.ep(1).conn_stats(b)->rnr_naks_sent, 1u);
  EXPECT_EQ(loop.ep(1).conn_stats(b)->naks_sent, 0u);
  EXPECT_EQ(loop.ep(0).conn_stats(a)->losses_declared, 0u);
}

// READ-5: responses are served in the order of their requests. As in
// ReadRequestsRefusedBehindAnRnrAreResentWithIt the responder's queue fills
// with answered READs and READ_REQs 8 and 9 are sent together, but 9 is held
// up 300 us on its way: 8 is refused (RNR), the queue has room again by the
// time 9 arrives, which it takes, and 8's resend follows. READ 9's response
// went first (the queue served in the order it took requests); now 8's does.
TEST(Engine, AReadRequestRefusedAndTakenLaterIsServedInItsOrder) {  // READ-5, READ-3
  EndpointConfig rc = cfg(922);
  rc.max_reads = 2;
  Loop loop(cfg(923), rc);
  auto [a, b] = loop.connect();
  constexpr uint32_t kReads = 14;
  Buf src(loop.ep(1), kReads * 4096, kAccessRemoteRead, 0),
      dst(loop.ep(0), kReads * 4096, kAccessLocalWrite);
  pattern(src.bytes, 7);
  constexpr uint8_t kReadReq = static_cast<uint8_t>(wire::Opcode::kReadReq);
  constexpr uint8_t kReadResp = static_cast<uint8_t>(wire::Opcode::kReadResp);
  constexpr uint8_t kNak = static_cast<uint8_t>(wire::Opcode::kNak);
  bool lose_acks = true;
  int rnrs = 0, read_reqs = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return lose_acks && from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck);
  };
  loop.extra_delay = [&](int from, const std::vector<uint8_t>& d) -> uint64_t {
    return from == 0 && d[1] == kReadReq && ++read_reqs == 10 ? 300'000 : 0;
  };
  std::set<uint32_t> resp_psns;
  std::vector<uint32_t> served;  // read sequence of each response PSN, first sent
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1) return;
    if (d[1] == kNak && d[wire::kBaseHeaderSize + 4] == static_cast<uint8_t>(Status::kRnr)) {
      ++rnrs;
      lose_acks = false;
    }
    if (d[1] == kReadResp && resp_psns.insert(be::load32(d.data() + 8)).second)
      served.push_back(be::load32(d.data() + wire::kBaseHeaderSize));
  };
  ASSERT_NO_FATAL_FAILURE(read_pages_and_check(loop, a, src, dst, kReads));
  EXPECT_GE(rnrs, 1);
  ASSERT_EQ(served.size(), kReads);
  for (uint32_t i = 0; i < kReads; ++i) EXPECT_EQ(served[i], i) << "response " << i;
}

// PLACE-4's drops: a two-packet READ between endpoints seeded `seed` and
// seed + 1, of the peer's bytes (a pattern from `fill`). The first of its
// responses that `pick` takes is forged by `edit`: it must be dropped,
// counted as a bad length and not acknowledged, and the true resend
// complete the READ with every byte.
void read_survives_a_forged_response(uint64_t seed, uint8_t fill,
                                     const std::function<bool(const std::vector<uint8_t>&)>& pick,
                                     const std::function<void(std::vector<uint8_t>&)>& edit) {
  Loop loop(cfg(seed), cfg(seed + 1));
  auto [a, b] = loop.connect();
  Buf mine(loop.ep(0), 8192, kAccessLocalWrite, 0);
  Buf theirs(loop.ep(1), 8192, kAccessRemoteRead);
  pattern(theirs.bytes, fill);
  bool forged = false;
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    if (forged || from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kReadResp) || !pick(d))
      return;
    forged = true;
    edit(d);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(mine, theirs.addr(), theirs.mr.rkey, 8192)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_TRUE(forged);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(mine.bytes, theirs.bytes);
  EXPECT_EQ(loop.ep(0).endpoint_stats().bad_length, 1u);
}

// PLACE-4: a READ response whose msg_len is not its READ's length belongs to
// no READ this end asked for, though its payload fits inside the READ.
TEST(Engine, ReadResponseOfAnotherLengthIsDropped) {  // PLACE-4
  read_survives_a_forged_response(
      95, 9, [](const std::vector<uint8_t>&) { return true; },
      [](std::vector<uint8_t>& d) {
        be::store32(d.data() + wire::kBaseHeaderSize + 8, 4096);  // msg_len: one packet's worth
        ASSERT_EQ(wire::seal(d, d.size() - 4096 - wire::kIcrcSize, 4096), d.size());
      });
}

// PLACE-4: a READ counts its responses to complete, so each must be its own
// segment (5.2): response k at PSN first + k, offset k * mtu. The second of
// a two-packet READ's responses is forged into one that passes TRIM-5 but
// is not that segment: no bytes at offset msg_len, the first segment's
// offset, an offset between segments. Each is dropped, the READ completed
// by the true resend. (Before, each was counted, and the READ completed with
// its second half never written.)
// So is the first, forged into no bytes at msg_len: as the first response
// placed it names its own segment by its offset, and msg_len / mtu is no
// segment of the READ (k < resp_pkts).
TEST(Engine, ReadResponseThatIsNotItsSegmentIsDropped) {  // PLACE-4
  struct Forge {
    const char* what;
    uint32_t forged_offset;  // the offset of the true response forged
    uint32_t offset;
    uint32_t payload;
  };
  for (const Forge f :
       {Forge{"no bytes at msg_len", 4096, 8192, 0}, Forge{"segment 0 again", 4096, 0, 4096},
        Forge{"between segments", 4096, 100, 4096},
        Forge{"the first, no bytes at msg_len", 0, 8192, 0}}) {
    SCOPED_TRACE(f.what);
    read_survives_a_forged_response(
        920, 11,
        [&](const std::vector<uint8_t>& d) {
          return be::load32(d.data() + wire::kBaseHeaderSize + 4) == f.forged_offset;
        },
        [&](std::vector<uint8_t>& d) {
          const size_t h = wire::kBaseHeaderSize + wire::kMessageHeaderSize;
          ASSERT_EQ(d.size(), h + 4096 + wire::kIcrcSize);
          be::store32(d.data() + wire::kBaseHeaderSize + 4, f.offset);
          d.resize(h + f.payload + wire::kIcrcSize);
          ASSERT_EQ(wire::seal(d, h, f.payload), d.size());
        });
  }
}

// READ-1, COMP-1: a READ completes once its READ_REQ is acknowledged and its
// response placed. The READ_REQ carries AR, so its ACK leaves at once with
// the response rather than ack_delay (10 us) later: a lone READ completes one
// round trip (4 us over this loop) after it is posted, as a WRITE does. It
// took 14 us before, the READ_REQ's ACK held back by ACK-5's delay. The
// spec's READ_REQ vector (TV-06) has the flags the engine sends: it showed
// AR clear after READ-1 had every READ_REQ carry it.
TEST(Engine, ALoneReadCompletesOneRoundTripAfterItIsPosted) {  // READ-1, COMP-1
  Loop loop(cfg(97), cfg(98));
  auto [a, b] = loop.connect();
  Buf mine(loop.ep(0), 4096, kAccessLocalWrite, 0);
  Buf theirs(loop.ep(1), 4096, kAccessRemoteRead, 0x3c);
  uint8_t tv06_byte0 = 0;
  for (const spec_vectors::SpecVector& tv : spec_vectors::all()) {
    std::vector<uint8_t> bytes(256);
    if (std::string_view(tv.id) == "TV-06" && spec_vectors::encode(tv, bytes) > 0)
      tv06_byte0 = bytes[0];
  }
  ASSERT_NE(tv06_byte0, 0);
  int read_reqs = 0, with_ar = 0, as_tv06 = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 0 || d[1] != static_cast<uint8_t>(wire::Opcode::kReadReq)) return;
    ++read_reqs;
    with_ar += (d[0] & wire::kFlagAckRequested) != 0;
    as_tv06 += d[0] == tv06_byte0;  // version, PC (cover_payload's default) and AR
  };
  for (uint64_t id = 1; id <= 3; ++id) {
    const TimeNs posted = loop.now();
    ASSERT_EQ(loop.ep(0).post_send(a, read_wr(mine, theirs.addr(), theirs.mr.rkey, 4096, id)),
              Status::kOk);
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, 1, done));
    EXPECT_EQ(done[0].status, Status::kOk);
    EXPECT_LE(loop.now().ns - posted.ns, 2 * loop.delay_ns) << "READ " << id;
  }
  EXPECT_EQ(mine.bytes, theirs.bytes);
  EXPECT_EQ(read_reqs, 3);
  EXPECT_EQ(with_ar, 3);
  EXPECT_EQ(as_tv06, 3);
}

// SEQ-5: a message is at most 2^31 bytes. A longer work request is refused
// when posted, kInvalidArgument, whatever its memory; one of exactly 2^31 is
// judged by its memory (here none is registered: kLocalProtection).
TEST(Engine, AMessageOfMoreThan2To31BytesIsRefusedWhenPosted) {  // SEQ-5, READ-2
  Loop loop(cfg(465), cfg(466));
  auto [a, b] = loop.connect();
  for (const WrOpcode op : {WrOpcode::kWrite, WrOpcode::kWriteImm, WrOpcode::kSend,
                            WrOpcode::kSendImm, WrOpcode::kRead}) {
    SendWr wr;
    wr.op = op;
    wr.local_addr = 0x10000;
    wr.lkey = 12345;
    wr.length = kMaxMessageLength + 1;
    EXPECT_EQ(loop.ep(0).post_send(a, wr), Status::kInvalidArgument) << int(op);
    wr.length = kMaxMessageLength;
    EXPECT_EQ(loop.ep(0).post_send(a, wr), Status::kLocalProtection) << int(op);
  }
  EXPECT_EQ(kMaxMessageLength, 1u << 31);
}

}  // namespace
}  // namespace metaroce::test
