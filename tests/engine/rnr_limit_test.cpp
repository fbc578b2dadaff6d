// LOSS-7, NAK-4: RNR retries under recovery.rnr_retry_limit. A SEND to a
// live peer that never posts a receive is refused for ever; with a limit of
// N it is sent N + 1 times, then completes kRnrRetryExceeded and the
// connection fails (as InfiniBand's RNR_RETRY_EXC_ERR), every later request
// flushed. 0, the default, retries for ever.
#include <gtest/gtest.h>

#include <vector>

#include "engine_util.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

EndpointConfig limited(uint64_t seed, uint32_t limit) {
  EndpointConfig c = cfg(seed);
  c.recovery.rnr_retry_limit = limit;
  return c;
}

bool is_op(const std::vector<uint8_t>& d, wire::Opcode op) {
  return d.size() > 1 && d[1] == static_cast<uint8_t>(op);
}

// Endpoint 0 (limit `limit`) SENDs `len` bytes to endpoint 1, which posts
// no receive, then a second SEND behind it: the data packets endpoint 0
// sends, the completions, and what happens after.
struct Refused {
  uint64_t sends = 0;  // data packets of endpoint 0's first SEND
  uint64_t naks = 0;   // RNR NAKs of endpoint 1
  std::vector<Completion> done;
  Event ev{};
  bool has_event = false;
  bool established = false;
};

Refused refuse(uint32_t limit, uint32_t len, uint64_t run_ns, bool spread = false) {
  Loop loop(limited(4701, limit), cfg(4702));
  auto [a, b] = loop.connect();
  Refused r;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    // The first SEND's packets only (the second, of 100 bytes, goes with
    // each round too).
    r.sends += from == 0 && d.size() > 500;
    r.naks += from == 1 && is_op(d, wire::Opcode::kNak);
  };
  // spread: the packets of a round arrive 3 us apart, so that each draws
  // an RNR NAK of its own (the one before has left).
  uint64_t k = 0;
  if (spread)
    loop.extra_delay = [&k](int from, const std::vector<uint8_t>& d) -> uint64_t {
      return from == 0 && d.size() > 500 ? (k++ % 8) * 3000 : 0;
    };
  Buf src(loop.ep(0), len, 0, 0x31);
  EXPECT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, len, 1)), Status::kOk);
  EXPECT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 100, 2)), Status::kOk);
  loop.run_until_completions(0, 2, r.done, run_ns);
  r.has_event = loop.ep(0).poll_event(r.ev);
  r.established = loop.ep(0).is_established(a);
  (void)b;
  return r;
}

TEST(RnrLimit, ALimitOfNGivesNPlusOneSendsThenTheError) {  // LOSS-7, NAK-4, COMP-5
  for (const uint32_t n : {1u, 3u, 7u}) {
    SCOPED_TRACE(n);
    const Refused r = refuse(n, 1000, kSecond);
    EXPECT_EQ(r.sends, n + 1);
    EXPECT_EQ(r.naks, n + 1);
    ASSERT_EQ(r.done.size(), 2u);
    EXPECT_EQ(r.done[0].wr_id, 1u);
    EXPECT_EQ(r.done[0].status, Status::kRnrRetryExceeded);
    EXPECT_EQ(r.done[1].status, Status::kFlushed);
    ASSERT_TRUE(r.has_event);
    EXPECT_EQ(r.ev.kind, EventKind::kError);
    EXPECT_EQ(r.ev.status, Status::kRnrRetryExceeded);
    EXPECT_FALSE(r.established);
  }
}

// A message of 8 packets, all refused each time, each drawing its own RNR
// NAK: the limit counts rounds (an RNR pause each), not the packets or NAKs
// of a round.
TEST(RnrLimit, AMultiPacketSendCountsRoundsNotPackets) {  // LOSS-7
  const Refused r = refuse(2, 8 * 4096, kSecond, true);
  EXPECT_EQ(r.sends, 3u * 8);
  EXPECT_GT(r.naks, 3u * 4);
  ASSERT_EQ(r.done.size(), 2u);
  EXPECT_EQ(r.done[0].status, Status::kRnrRetryExceeded);
  EXPECT_EQ(r.done[1].status, Status::kFlushed);
}

// 0: retried for ever (RNR NAKs are progress for PATH-7): after 3 s, well
// past the peer timeout, nothing has completed and the connection stands.
TEST(RnrLimit, UnlimitedNeverFails) {  // LOSS-7, NAK-4, PATH-7
  const Refused r = refuse(0, 1000, 3 * kSecond);
  EXPECT_TRUE(r.done.empty());
  EXPECT_FALSE(r.has_event);
  EXPECT_TRUE(r.established);
  EXPECT_GT(r.sends, 1000u);
}

// Two SENDs one after the other, each refused `limit` times before its
// receive is posted: both complete kOk, the count starting again for the
// second (it counts the refusals of one message, not of the connection).
TEST(RnrLimit, AReceivePostedBeforeTheLimitLetsTheSendComplete) {  // LOSS-7, NAK-4
  constexpr uint32_t kLimit = 3;
  Loop loop(limited(4711, kLimit), cfg(4712));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 2000, 0, 0x41);
  pattern(src.bytes, 9);
  Buf rbuf(loop.ep(1), 2000, kAccessLocalWrite);
  uint64_t naks = 0;
  uint64_t id = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1 || !is_op(d, wire::Opcode::kNak) || ++naks % kLimit != 0) return;
    // The limit-th refusal: the next retry, the last one allowed, finds it.
    ASSERT_EQ(
        loop.ep(1).post_recv(b, RecvWr{++id, rbuf.addr(id == 1 ? 0 : 1000), 1000, rbuf.mr.lkey}),
        Status::kOk);
  };
  for (uint64_t w = 1; w <= 2; ++w) {
    ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, (w - 1) * 1000, 1000, w)), Status::kOk);
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, 1, done, kSecond));
    EXPECT_EQ(done[0].wr_id, w);
    EXPECT_EQ(done[0].status, Status::kOk);
  }
  EXPECT_EQ(naks, 2 * kLimit);
  EXPECT_EQ(src.bytes, rbuf.bytes);
  EXPECT_TRUE(loop.ep(0).is_established(a));
}

}  // namespace
}  // namespace metaroce::test
