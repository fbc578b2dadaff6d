// Engine calls a libfabric provider needs (docs/design/libfabric-provider.md,
// section 6): unsignaled sends (G12), a close's own DISCONNECT budget (G2),
// the endpoint's RNR counters (G8) and the rkey lookup that an atomic
// emulated at the target uses (G6). Rule IDs refer to
// docs/spec/metaroce-v0.1.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint8_t kDisconnectOp = static_cast<uint8_t>(wire::Opcode::kDisconnect);

// Lets the loop run a while after the work of interest, so that a completion
// reported late would be seen.
void settle(Loop& loop) {
  loop.run_until([] { return false; }, 50'000'000);
}

// Endpoint 0's first `n` completions into `done`, then any it reports late
// (settle); false if the first `n` did not come.
bool completions_then_late_ones(Loop& loop, size_t n, std::vector<Completion>& done) {
  if (!loop.run_until_completions(0, n, done)) return false;
  settle(loop);
  for (const Completion& c : loop.drain(0)) done.push_back(c);
  return true;
}

// COMP-4: an unsignaled WRITE that succeeds reports nothing; the signaled one
// after it reports, and implies the first landed (COMP-2).
TEST(ProviderApi, AnUnsignaledWriteThenASignaledOneYieldOneCompletion) {  // COMP-4, COMP-2
  Loop loop(cfg(4501), cfg(4502));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 3 * 4096 + 100, 0);
  pattern(src.bytes, 11);
  Buf dst(loop.ep(1), 2 * (3 * 4096 + 100), kAccessRemoteWrite, 0xEE);
  SendWr quiet = write_wr(src, dst, 3 * 4096 + 100, 1);
  quiet.flags = kSendUnsignaled;
  ASSERT_EQ(loop.ep(0).post_send(a, quiet), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 3 * 4096 + 100, 2, 3 * 4096 + 100)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(completions_then_late_ones(loop, 1, done));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 2u);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin()));
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin() + src.bytes.size()));
  EXPECT_EQ(loop.ep(0).conn_stats(a)->send_completions, 1u);
}

// An unsignaled request leaves the send queue once acknowledged, though
// nothing is polled for it: a queue of two takes two more after them.
TEST(ProviderApi, UnsignaledRequestsFreeTheirQueueEntries) {  // COMP-4
  EndpointConfig c0 = cfg(4503);
  c0.sq_depth = 2;
  Loop loop(c0, cfg(4504));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 64, 0, 7);
  Buf dst(loop.ep(1), 64, kAccessRemoteWrite);
  for (uint64_t round = 0; round < 3; ++round) {
    for (uint64_t i = 0; i < 2; ++i) {
      SendWr w = write_wr(src, dst, 64, round * 2 + i);
      w.flags = kSendUnsignaled;
      ASSERT_EQ(loop.ep(0).post_send(a, w), Status::kOk) << round << " " << i;
    }
    EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 64, 99)), Status::kQueueFull);
    settle(loop);
  }
  EXPECT_TRUE(loop.drain(0).empty());
  EXPECT_EQ(dst.bytes, src.bytes);
}

// COMP-4, COMP-5: an unsignaled SEND refused for its length still completes,
// with its wr_id and the NAK's code; the signaled WRITE behind it is flushed.
TEST(ProviderApi, AnUnsignaledSendThatFailsStillCompletes) {  // COMP-4, COMP-5, PLACE-3
  Loop loop(cfg(4505), cfg(4506));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 200, 0, 3);
  Buf rbuf(loop.ep(1), 100, kAccessLocalWrite);
  Buf dst(loop.ep(1), 200, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{50, rbuf.addr(), 100, rbuf.mr.lkey}), Status::kOk);
  SendWr s = send_wr(src, 0, 200, 7);
  s.flags = kSendUnsignaled;
  ASSERT_EQ(loop.ep(0).post_send(a, s), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 200, 8)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(completions_then_late_ones(loop, 2, done));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].wr_id, 7u);
  EXPECT_EQ(done[0].status, Status::kRemoteLengthError);
  EXPECT_EQ(done[1].wr_id, 8u);
  EXPECT_EQ(done[1].status, Status::kFlushed);
}

// COMP-4, CONN-7: unsignaled work flushed by close completes kFlushed, each
// request with its wr_id, in posting order.
TEST(ProviderApi, UnsignaledWorkFlushedByCloseStillCompletes) {  // COMP-4, CONN-7
  Loop loop(cfg(4507), cfg(4508));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 4096, 0, 3);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  Buf into(loop.ep(0), 4096, kAccessLocalWrite);
  SendWr w = write_wr(src, dst, 4096, 21);
  w.flags = kSendUnsignaled;
  ASSERT_EQ(loop.ep(0).post_send(a, w), Status::kOk);
  SendWr s = send_wr(src, 0, 10, 22);
  s.flags = kSendUnsignaled;
  ASSERT_EQ(loop.ep(0).post_send(a, s), Status::kOk);
  SendWr r = read_wr(into, dst.addr(), dst.mr.rkey, 4096, 23);
  r.flags = kSendUnsignaled;
  ASSERT_EQ(loop.ep(0).post_send(a, r), Status::kOk);
  loop.ep(0).close(a, loop.now());
  const std::vector<Completion> done = loop.drain(0);
  ASSERT_EQ(done.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(done[i].wr_id, 21 + i);
    EXPECT_EQ(done[i].status, Status::kFlushed);
  }
}

TEST(ProviderApi, UnknownSendFlagsAreRefused) {
  Loop loop(cfg(4509), cfg(4510));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 64, 0);
  Buf dst(loop.ep(1), 64, kAccessRemoteWrite);
  SendWr w = write_wr(src, dst, 64);
  for (unsigned bit = 1; bit < 8; ++bit) {
    w.flags = static_cast<uint8_t>(1u << bit);
    EXPECT_EQ(loop.ep(0).post_send(a, w), Status::kInvalidArgument) << bit;
  }
  settle(loop);
  EXPECT_TRUE(loop.drain(0).empty());
}

// A close whose DISCONNECTs all go unanswered, from endpoint 0 configured
// `c0`: how many it sent, and how long after close() the connection ended
// (kClosed with kPeerUnreachable).
struct UnansweredClose {
  int disconnects = 0;
  uint64_t took_ns = 0;
};
UnansweredClose close_towards_a_silent_peer(const EndpointConfig& c0) {
  UnansweredClose out;
  Loop loop(c0, cfg(4512));
  auto [a, b] = loop.connect();
  EXPECT_TRUE(a.valid() && b.valid());
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d.size() > 1 && d[1] == kDisconnectOp) ++out.disconnects;
  };
  loop.drop = [](int from, const std::vector<uint8_t>&) { return from == 0; };
  const TimeNs start = loop.now();
  loop.ep(0).close(a, start);
  std::optional<Event> closed;
  EXPECT_TRUE(loop.run_until(
      [&] {
        Event ev;
        while (loop.ep(0).poll_event(ev))
          if (ev.kind == EventKind::kClosed) {
            closed = ev;
            out.took_ns = loop.now().since(start);
          }
        return closed.has_value();
      },
      20'000'000'000ull));
  EXPECT_TRUE(closed.has_value() && closed->status == Status::kPeerUnreachable);
  return out;
}

// CONN-7: the close's budget is disconnect_attempts, not connect_attempts: a
// provider that gives first contacts long (G2) closes as fast as before.
TEST(ProviderApi, RaisingConnectAttemptsDoesNotLengthenACloseTowardsAnAbsentPeer) {  // CONN-7
  EndpointConfig c0 = cfg(4511);
  c0.connect_attempts = 1000;
  const UnansweredClose u = close_towards_a_silent_peer(c0);
  EXPECT_EQ(c0.disconnect_attempts, 8u);
  EXPECT_EQ(u.disconnects, 8);
  EXPECT_EQ(u.took_ns, 8 * c0.connect_retry_ns);
}

TEST(ProviderApi, DisconnectAttemptsBoundTheClose) {  // CONN-7
  EndpointConfig c0 = cfg(4511);
  c0.disconnect_attempts = 3;
  UnansweredClose u = close_towards_a_silent_peer(c0);
  EXPECT_EQ(u.disconnects, 3);
  EXPECT_EQ(u.took_ns, 3 * c0.connect_retry_ns);
  c0.disconnect_attempts = 20;
  u = close_towards_a_silent_peer(c0);
  EXPECT_EQ(u.disconnects, 20);
  EXPECT_EQ(u.took_ns, 20 * c0.connect_retry_ns);
}

// LOSS-7, G8: the sender's endpoint counts the RNR NAKs it received and the
// packets they sent back, over all its connections. Two connections each
// send an 8-packet SEND before their peer posts a receive; the receives are
// posted when the first RNR NAK leaves.
TEST(ProviderApi, TheEndpointCountsRnrNaksReceivedAndThePacketsTheyResent) {  // LOSS-7
  Loop loop(cfg(4513), cfg(4514));
  EXPECT_EQ(loop.ep(0).endpoint_stats().rnr_naks_received, 0u);
  EXPECT_EQ(loop.ep(0).endpoint_stats().rnr_resends, 0u);
  auto [a1, b1] = loop.connect();
  auto [a2, b2] = loop.connect();
  ASSERT_TRUE(a1.valid() && b1.valid() && a2.valid() && b2.valid());
  constexpr uint32_t kLen = 8 * 4096;
  Buf src(loop.ep(0), kLen, 0, 7);
  Buf r1(loop.ep(1), kLen, kAccessLocalWrite);
  Buf r2(loop.ep(1), kLen, kAccessLocalWrite);
  bool posted = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1 || posted || d.size() < 2 || d[1] != static_cast<uint8_t>(wire::Opcode::kNak))
      return;
    posted = true;
    ASSERT_EQ(loop.ep(1).post_recv(b1, RecvWr{1, r1.addr(), kLen, r1.mr.lkey}), Status::kOk);
    ASSERT_EQ(loop.ep(1).post_recv(b2, RecvWr{2, r2.addr(), kLen, r2.mr.lkey}), Status::kOk);
  };
  ASSERT_EQ(loop.ep(0).post_send(a1, send_wr(src, 0, kLen, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a2, send_wr(src, 0, kLen, 2)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 2, done));
  for (const Completion& c : done) EXPECT_EQ(c.status, Status::kOk);
  EXPECT_EQ(r1.bytes, src.bytes);
  EXPECT_EQ(r2.bytes, src.bytes);
  const ConnStats& s1 = *loop.ep(1).conn_stats(b1);
  const ConnStats& s2 = *loop.ep(1).conn_stats(b2);
  ASSERT_GE(s1.rnr_naks_sent, 1u);
  ASSERT_GE(s2.rnr_naks_sent, 1u);
  const EndpointStats& e = loop.ep(0).endpoint_stats();
  EXPECT_EQ(e.rnr_naks_received, s1.rnr_naks_sent + s2.rnr_naks_sent);
  // Every packet of both SENDs was refused and went again; nothing was lost.
  EXPECT_GE(e.rnr_resends, 16u);
  EXPECT_EQ(e.rnr_resends, loop.ep(0).conn_stats(a1)->retransmissions +
                               loop.ep(0).conn_stats(a2)->retransmissions);
  EXPECT_EQ(loop.ep(1).endpoint_stats().rnr_naks_received, 0u);
}

// G6(a): local_view checks as an arriving WRITE or READ_REQ does and gives
// the byte the peer's address names.
TEST(ProviderApi, LocalViewChecksKeyRangeAndRights) {  // PLACE-2, READ-2, MR-4
  EndpointConfig c = cfg(4515);
  Endpoint ep(c);
  std::vector<uint8_t> mem(4096), ro(64);
  MemoryRegion mr, rmr;
  ASSERT_EQ(ep.register_memory_at(mem.data(), mem.size(), 0x10000,
                                  kAccessRemoteWrite | kAccessRemoteRead, mr),
            Status::kOk);
  ASSERT_EQ(ep.register_memory(ro.data(), ro.size(), kAccessRemoteRead, rmr), Status::kOk);
  uint8_t* p = nullptr;
  constexpr uint32_t kRw = kAccessRemoteWrite | kAccessRemoteRead;
  ASSERT_EQ(ep.local_view(mr.rkey, 0x10000 + 64, 8, kRw, p), Status::kOk);
  EXPECT_EQ(p, mem.data() + 64);
  ASSERT_EQ(ep.local_view(mr.rkey, 0x10000 + 4088, 8, kAccessRemoteWrite, p), Status::kOk);
  EXPECT_EQ(p, mem.data() + 4088);
  ASSERT_EQ(ep.local_view(rmr.rkey, rmr.addr, 64, kAccessRemoteRead, p), Status::kOk);
  EXPECT_EQ(p, ro.data());

  uint8_t* const untouched = reinterpret_cast<uint8_t*>(&c);
  p = untouched;
  EXPECT_EQ(ep.local_view(mr.rkey ^ 1, 0x10000, 8, kRw, p), Status::kRemoteBadKey);
  EXPECT_EQ(ep.local_view(mr.rkey, 0x10000 + 4089, 8, kRw, p), Status::kRemoteOutOfBounds);
  EXPECT_EQ(ep.local_view(mr.rkey, 0x10000 - 1, 8, kRw, p), Status::kRemoteOutOfBounds);
  EXPECT_EQ(ep.local_view(mr.rkey, 0x10000, UINT64_MAX, kRw, p), Status::kRemoteOutOfBounds);
  EXPECT_EQ(ep.local_view(rmr.rkey, rmr.addr, 8, kAccessRemoteWrite, p),
            Status::kRemoteAccessDenied);
  EXPECT_EQ(ep.local_view(rmr.rkey, rmr.addr, 8, kRw, p), Status::kRemoteAccessDenied);
  EXPECT_EQ(ep.local_view(mr.rkey, 0x10000, 0, kRw, p), Status::kInvalidArgument);
  EXPECT_EQ(ep.local_view(mr.rkey, 0x10000, 8, 0, p), Status::kInvalidArgument);
  EXPECT_EQ(ep.local_view(mr.rkey, 0x10000, 8, kAccessLocalWrite, p), Status::kInvalidArgument);
  EXPECT_EQ(p, untouched);

  // Gone with its region (MR-5), and the same key granted a moment before
  // is not remembered past it.
  ASSERT_EQ(ep.local_view(mr.rkey, 0x10000, 8, kRw, p), Status::kOk);
  ASSERT_EQ(ep.deregister_memory(mr.lkey), Status::kOk);
  EXPECT_EQ(ep.local_view(mr.rkey, 0x10000, 8, kRw, p), Status::kRemoteBadKey);
}

// The view is the memory a peer's WRITE fills and its READ reads: what the
// provider writes there, a READ returns.
TEST(ProviderApi, LocalViewIsWhatPeersWriteAndRead) {  // PLACE-2, READ-2
  Loop loop(cfg(4517), cfg(4518));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 16, 0, 0x5A);
  Buf into(loop.ep(0), 16, kAccessLocalWrite);
  Buf target(loop.ep(1), 64, kAccessRemoteWrite | kAccessRemoteRead, 0, 0);
  ASSERT_TRUE(write_completes(loop, a, src, target, 16));
  uint8_t* p = nullptr;
  ASSERT_EQ(loop.ep(1).local_view(target.mr.rkey, 0, 16, kAccessRemoteWrite | kAccessRemoteRead, p),
            Status::kOk);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(p[i], 0x5A);
    p[i] = static_cast<uint8_t>(i);  // an emulated atomic's result
  }
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(into, 0, target.mr.rkey, 16, 9)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kOk);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(into.bytes[static_cast<size_t>(i)], i);
}

}  // namespace
}  // namespace metaroce::test
