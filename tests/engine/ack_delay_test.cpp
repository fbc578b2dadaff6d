// ACK-5's delay against the other timers of an endpoint: the sender's RTO
// (LOSS-4), which a delayed ACK must beat, and the pooling of idle tracking
// contexts (context_idle_ns), which it need not. Engine over the
// fixed-delay shuttle of loop.hpp (2 us each way).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

constexpr uint32_t kPackets = 16;

struct Outcome {
  ConnStats sender{};
  ConnStats receiver{};
  uint64_t packets_acked = 0;  // over the sender's paths
  uint64_t took_ns = 0;        // from the post to the completion
};

// A 16-packet WRITE sent one packet at a time (cc.max_inflight_packets 1),
// both ends with `ack_delay_ns` and `context_idle_ns`: each packet but the
// last (ACK-4) is one ack_every (2) does not count up to, so its ACK waits
// out the delay before the next packet may leave. The WRITE completes kOk
// with every byte placed; the counters of both ends then.
Outcome one_packet_at_a_time(uint64_t seed, uint64_t ack_delay_ns, uint64_t context_idle_ns) {
  EndpointConfig s = cfg(seed), r = cfg(seed + 1);
  s.cc.max_inflight_packets = 1;
  for (EndpointConfig* c : {&s, &r}) {
    c->ack_delay_ns = ack_delay_ns;
    c->context_idle_ns = context_idle_ns;
  }
  Outcome out;
  Loop loop(s, r);
  auto [a, b] = loop.connect();
  EXPECT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), kPackets * 4096, 0, 5);
  Buf dst(loop.ep(1), kPackets * 4096, kAccessRemoteWrite);
  const TimeNs posted = loop.now();
  EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, kPackets * 4096)), Status::kOk);
  std::vector<Completion> done;
  EXPECT_TRUE(loop.run_until_completions(0, 1, done, kSecond));
  if (done.empty()) return out;
  out.took_ns = loop.now().since(posted);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
  out.sender = *loop.ep(0).conn_stats(a);
  out.receiver = *loop.ep(1).conn_stats(b);
  for (size_t i = 0; i < loop.ep(0).path_count(a); ++i) {
    PathStats p;
    EXPECT_TRUE(loop.ep(0).path_stats(a, i, p));
    out.packets_acked += p.packets_acked;
  }
  return out;
}

// ACK-5, LOSS-4: the RTO is min_rto at the least, so a delayed ACK of
// min_rto or more comes after it whatever the network, and every packet
// whose ACK waits is resent and its path timed out (config_error refuses
// it). With half of min_rto, the 4 us round trip fits: nothing resent.
TEST(AckDelay, AnAckDelayOfMinRtoTimesOutThePacketsWhoseAckWaits) {
  const uint64_t min_rto = EndpointConfig{}.recovery.min_rto_ns;
  const Outcome within = one_packet_at_a_time(40, min_rto / 2, EndpointConfig{}.context_idle_ns);
  EXPECT_GE(within.took_ns, (kPackets - 1) * min_rto / 2) << "the ACKs did not wait";
  EXPECT_EQ(within.sender.timeouts, 0u);
  EXPECT_EQ(within.sender.retransmissions, 0u);
  const Outcome at = one_packet_at_a_time(42, min_rto, EndpointConfig{}.context_idle_ns);
  EXPECT_GT(at.sender.timeouts, 0u);
  EXPECT_GT(at.sender.retransmissions, 0u);
  EndpointConfig c;
  c.ack_delay_ns = min_rto;
  EXPECT_NE(config_error(c), "");
  c.ack_delay_ns = min_rto / 2;
  EXPECT_EQ(config_error(c), "");
}

// Contexts are pooled after context_idle_ns of quiet, but an ACK owed (its
// count, deadline and echo) is the connection's own state, and a receive
// context goes only with nothing beyond the cumulative PSN to report: an
// ACK delay as long as that quiet or longer (twice it; a quiet of 0 pools
// at every timer) still acknowledges every packet, once, and nothing is
// resent. No relation between the two is needed, and config_error asks
// none. (A pin: nothing was wrong here.)
TEST(AckDelay, AnAckDelayAsLongAsTheContextIdleTimeStillAcknowledgesEverything) {
  const uint64_t delay = EndpointConfig{}.recovery.min_rto_ns / 2;
  for (const uint64_t idle : {delay, delay / 2, uint64_t{0}}) {
    SCOPED_TRACE(idle);
    const Outcome o = one_packet_at_a_time(44, delay, idle);
    EXPECT_GE(o.took_ns, (kPackets - 1) * delay) << "the ACKs did not wait";
    EXPECT_EQ(o.packets_acked, kPackets);
    EXPECT_EQ(o.sender.retransmissions, 0u);
    EXPECT_EQ(o.sender.timeouts, 0u);
    EXPECT_EQ(o.receiver.data_packets_received, kPackets);
    EXPECT_EQ(o.receiver.duplicates_received, 0u);
    // One ACK each: 15 delayed, the last at once (ACK-4).
    EXPECT_EQ(o.receiver.acks_sent, kPackets);
    EndpointConfig c;
    c.ack_delay_ns = delay;
    c.context_idle_ns = idle;
    EXPECT_EQ(config_error(c), "");
  }
}

}  // namespace
}  // namespace metaroce::test
