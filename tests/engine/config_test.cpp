// config_error(): every field of EndpointConfig has a range, a value outside
// it is named with its range, and the constructor's backstop leaves an
// endpoint built from such a configuration working.
#include "metaroce/config.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

TEST(Config, DefaultsAreInRange) {
  EXPECT_EQ(config_error(EndpointConfig{}), "");
  EXPECT_EQ(config_error(cfg(1)), "");
}

struct BadField {
  const char* expected;  // the start of the message
  std::function<void(EndpointConfig&)> spoil;
};

TEST(Config, AFieldOutOfRangeIsNamedWithItsRange) {
  const std::vector<BadField> cases = {
      {"mtu 255 is out of range 256..65000 (SEQ-5)", [](auto& c) { c.mtu = 255; }},
      {"mtu 65001 is out of range", [](auto& c) { c.mtu = 65001; }},
      {"window_log2 11 is out of range 6..10 (SEQ-3)", [](auto& c) { c.window_log2 = 11; }},
      {"window_log2 5 ", [](auto& c) { c.window_log2 = 5; }},
      {"num_paths 0 is out of range 1..32 (PATH-1)", [](auto& c) { c.num_paths = 0; }},
      {"num_paths 33 ", [](auto& c) { c.num_paths = 33; }},
      {"sq_depth 0 ", [](auto& c) { c.sq_depth = 0; }},
      {"sq_depth 40000 is out of range 1..32768", [](auto& c) { c.sq_depth = 40000; }},
      {"rq_depth 0 ", [](auto& c) { c.rq_depth = 0; }},
      {"shared_rq_depth 16777217 ", [](auto& c) { c.shared_rq_depth = (1u << 24) + 1; }},
      {"max_reads 0 ", [](auto& c) { c.max_reads = 0; }},
      {"ack_every 0 ", [](auto& c) { c.ack_every = 0; }},
      {"entropy range 60000..50000 holds fewer than num_paths 8 values",
       [](auto& c) {
         c.entropy_min = 60000;
         c.entropy_max = 50000;
       }},
      {"entropy range 50000..50003 holds fewer than num_paths 8",
       [](auto& c) {
         c.entropy_min = 50000;
         c.entropy_max = 50003;
       }},
      {"control_dscp 64 is out of range 0..63 (ENC-6)", [](auto& c) { c.control_dscp = 64; }},
      {"data_dscp 200 ", [](auto& c) { c.data_dscp = 200; }},
      {"max_connections 0 ", [](auto& c) { c.max_connections = 0; }},
      {"max_connections 2000000 ", [](auto& c) { c.max_connections = 2'000'000; }},
      {"connect_retry_ns 0 ", [](auto& c) { c.connect_retry_ns = 0; }},
      {"connect_attempts 0 ", [](auto& c) { c.connect_attempts = 0; }},
      {"connect_attempts 65536 is out of range 1..65535 (CONN-2)",
       [](auto& c) { c.connect_attempts = 65536; }},
      {"disconnect_attempts 0 is out of range 1..65535 (CONN-7)",
       [](auto& c) { c.disconnect_attempts = 0; }},
      {"max_reads_served 0 is out of range 1..65535 (READ-6)",
       [](auto& c) { c.max_reads_served = 0; }},
      {"ack_delay_ns 86400000000001 ", [](auto& c) { c.ack_delay_ns = 86'400'000'000'001; }},
      {"cc.initial_cwnd_packets 0 ", [](auto& c) { c.cc.initial_cwnd_packets = 0; }},
      {"cc.initial_cwnd_packets 70000 is out of range 1..65535 (CC-1)",
       [](auto& c) { c.cc.initial_cwnd_packets = 70000; }},
      {"cc.min_cwnd_packets 0 ", [](auto& c) { c.cc.min_cwnd_packets = 0; }},
      {"cc.min_cwnd_packets 17 is above num_paths 8 times a path's largest window, 2 packets",
       [](auto& c) {
         c.cc.min_cwnd_packets = 17;
         c.cc.max_cwnd_packets = 2;
       }},
      {"cc.min_cwnd_packets 1000 is above num_paths 1 times a path's largest window, 64 packets",
       [](auto& c) {
         c.num_paths = 1;
         c.window_log2 = 6;
         c.cc.min_cwnd_packets = 1000;
       }},
      {"cc.dctcp_g_shift 11 is out of range 0..10 (CC-3)",
       [](auto& c) { c.cc.dctcp_g_shift = 11; }},
      {"cc.max_delay_decrease_pct 101 ", [](auto& c) { c.cc.max_delay_decrease_pct = 101; }},
      {"cc.max_inflight_packets 65536 ", [](auto& c) { c.cc.max_inflight_packets = 65536; }},
      {"recovery.reorder_threshold 0 ", [](auto& c) { c.recovery.reorder_threshold = 0; }},
      {"recovery.initial_rtt_ns 0 ", [](auto& c) { c.recovery.initial_rtt_ns = 0; }},
      {"recovery.min_rto_ns 200000000 is above recovery.max_rto_ns 100000000 (LOSS-4)",
       [](auto& c) { c.recovery.min_rto_ns = 200 * kMillisecond; }},
      {"ack_delay_ns 1000000 is not below recovery.min_rto_ns 1000000 (ACK-5, LOSS-4",
       [](auto& c) { c.ack_delay_ns = c.recovery.min_rto_ns; }},
      {"recovery.peer_timeout_ns 1000000 is not above recovery.min_rto_ns 1000000 (PATH-7, "
       "LOSS-4",
       [](auto& c) { c.recovery.peer_timeout_ns = c.recovery.min_rto_ns; }},
      {"recovery.peer_timeout_ns 50000000 is not above recovery.min_rto_ns 100000000 (PATH-7",
       [](auto& c) {
         c.recovery.min_rto_ns = c.recovery.max_rto_ns;
         c.recovery.peer_timeout_ns = 50 * kMillisecond;
       }},
      {"recovery.rto_failures_to_retire 256 ",
       [](auto& c) { c.recovery.rto_failures_to_retire = 256; }},
      {"recovery.loss_window_packets 0 ", [](auto& c) { c.recovery.loss_window_packets = 0; }},
      {"recovery.retire_loss_pct 101 ", [](auto& c) { c.recovery.retire_loss_pct = 101; }},
      {"recovery.peer_timeout_ns 0 ", [](auto& c) { c.recovery.peer_timeout_ns = 0; }},
      {"recovery.rnr_retry_ns 0 ", [](auto& c) { c.recovery.rnr_retry_ns = 0; }},
      {"recovery.rnr_retry_limit 65535 ", [](auto& c) { c.recovery.rnr_retry_limit = 65535; }},
  };
  for (const BadField& bad : cases) {
    EndpointConfig c;
    bad.spoil(c);
    const std::string e = config_error(c);
    EXPECT_EQ(e.rfind(bad.expected, 0), 0u)
        << "expected \"" << bad.expected << "\", got \"" << e << "\"";
  }
}

TEST(Config, TheEdgesOfEachRangeAreAccepted) {
  EndpointConfig c;
  c.mtu = kMinMtu;
  c.window_log2 = kMinWindowLog2;
  c.num_paths = kMaxPaths;
  c.entropy_min = 1000;
  c.entropy_max = 1000 + kMaxPaths - 1;
  c.control_dscp = kMaxDscp;
  c.connect_attempts = UINT16_MAX;
  c.disconnect_attempts = UINT16_MAX;
  c.max_reads_served = UINT16_MAX;
  c.cc.dctcp_g_shift = kMaxDctcpGShift;
  c.cc.max_inflight_packets = kMaxPacketCount;
  c.cc.max_delay_decrease_pct = 100;
  c.recovery.min_rto_ns = c.recovery.max_rto_ns;
  c.ack_delay_ns = c.recovery.min_rto_ns - 1;  // ACK-5: below min_rto
  // PATH-7: above min_rto, so that one lost packet is resent first. The
  // keepalive's quiet bounds nothing.
  c.recovery.peer_timeout_ns = c.recovery.min_rto_ns + 1;
  c.recovery.keepalive_ns = 1;
  c.recovery.retire_loss_pct = 0;
  // CC-6: a floor of 16 packets for the connection, 32 paths of at most one
  // packet each.
  c.cc.min_cwnd_packets = 16;
  c.cc.max_cwnd_packets = 1;
  EXPECT_EQ(config_error(c), "");
  c.mtu = kMaxMtu;
  c.window_log2 = kMaxWindowLog2;
  c.num_paths = 1;
  EXPECT_NE(config_error(c), "");  // one path of at most one packet, a floor of 16
  c.cc.max_cwnd_packets = 16;
  EXPECT_EQ(config_error(c), "");
}

// A driver that skips config_error still gets a working endpoint: the
// fields whose raw values would overflow a byte count (a window or the CC-9
// cap times a packet's cost) or make CC-3's shift undefined (64 or more) are
// brought into range, and a transfer completes with each.
void transfer_completes(const EndpointConfig& a) {
  ASSERT_NE(config_error(a), "");
  Loop loop(a, cfg(6));
  // Every data packet arrives CE-marked: the windows shrink, and CC-3's
  // update runs once per window.
  loop.mark_ce = [](int from, const TxDatagram&, const std::vector<uint8_t>&) { return from == 0; };
  auto [x, y] = loop.connect();
  ASSERT_TRUE(x.valid() && y.valid());
  Buf src(loop.ep(0), 4 << 20, 0);
  pattern(src.bytes, 5);
  Buf dst(loop.ep(1), 4 << 20, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(x, write_wr(src, dst, 4 << 20, 1, 0)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_TRUE(std::equal(src.bytes.begin(), src.bytes.end(), dst.bytes.begin()));
  PathStats p;
  ASSERT_TRUE(loop.ep(0).path_stats(x, 0, p));
  EXPECT_GT(p.ce_marks, 0u);
}

TEST(Config, TheConstructorBringsFieldsIntoRange) {
  EndpointConfig shift = cfg(5);
  shift.cc.dctcp_g_shift = 200;
  transfer_completes(shift);
  EXPECT_EQ(Endpoint(shift).config().cc.dctcp_g_shift, kMaxDctcpGShift);

  EndpointConfig wide = cfg(7);
  wide.cc.initial_cwnd_packets = 4'000'000'000u;
  wide.cc.max_inflight_packets = 4'000'000'000u;
  wide.cc.max_cwnd_packets = 4'000'000'000u;
  wide.cc.min_cwnd_packets = 4'000'000'000u;
  wide.window_log2 = 30;
  wide.num_paths = 200;
  transfer_completes(wide);
  const EndpointConfig got = Endpoint(wide).config();
  EXPECT_EQ(got.cc.initial_cwnd_packets, kMaxPacketCount);
  EXPECT_EQ(got.cc.max_cwnd_packets, kMaxPacketCount);
  EXPECT_EQ(got.cc.max_inflight_packets, kMaxPacketCount);
  EXPECT_EQ(got.window_log2, kMaxWindowLog2);
  EXPECT_EQ(got.num_paths, kMaxPaths);
  EXPECT_EQ(got.cc.min_cwnd_packets, kMaxPacketCount);

  // READ-6: no room for a report would leave the oldest to drop from an
  // empty queue.
  EndpointConfig none = cfg(8);
  none.max_reads_served = 0;
  EXPECT_EQ(Endpoint(none).config().max_reads_served, 1u);
}

// A duration too long to add to `now` (UINT64_MAX, meant as "never") is
// brought under a day: it wrapped to a deadline already passed, and the
// driver, woken every nanosecond, spun. Here a 4 MiB WRITE and 2 ms of idle
// time drew a few hundred polls with the defaults, and millions with
// context_idle_ns or peer_timeout_ns at UINT64_MAX.
TEST(Config, AnEndlessDurationIsNotADeadlineAlreadyPassed) {
  const std::vector<std::pair<const char*, std::function<void(EndpointConfig&)>>> cases = {
      {"ack_delay_ns", [](auto& c) { c.ack_delay_ns = UINT64_MAX; }},
      {"connect_retry_ns", [](auto& c) { c.connect_retry_ns = UINT64_MAX; }},
      {"context_idle_ns", [](auto& c) { c.context_idle_ns = UINT64_MAX; }},
      {"cc.target_queue_delay_ns", [](auto& c) { c.cc.target_queue_delay_ns = UINT64_MAX; }},
      {"cc.explore_interval_ns", [](auto& c) { c.cc.explore_interval_ns = UINT64_MAX; }},
      {"recovery.max_rto_ns", [](auto& c) { c.recovery.max_rto_ns = UINT64_MAX; }},
      {"recovery.peer_timeout_ns", [](auto& c) { c.recovery.peer_timeout_ns = UINT64_MAX; }},
      {"recovery.rnr_retry_ns", [](auto& c) { c.recovery.rnr_retry_ns = UINT64_MAX; }},
  };
  for (const auto& [name, spoil] : cases) {
    SCOPED_TRACE(name);
    EndpointConfig c = cfg(8);
    spoil(c);
    EXPECT_NE(config_error(c), "");
    Loop loop(c, cfg(9));
    auto [x, y] = loop.connect();
    ASSERT_TRUE(x.valid() && y.valid());
    uint64_t polls = 0;
    loop.before_poll = [&](int) { ++polls; };
    Buf src(loop.ep(0), 4 << 20, 0);
    Buf dst(loop.ep(1), 4 << 20, kAccessRemoteWrite);
    EXPECT_TRUE(write_completes(loop, x, src, dst, 4 << 20));
    loop.run_until([] { return false; }, 2'000'000);
    EXPECT_LT(polls, 20'000u);
    EXPECT_GT(loop.ep(0).next_timeout().ns, loop.now().ns + 1);
  }
  EndpointConfig c = cfg(10);
  c.recovery.peer_timeout_ns = UINT64_MAX;
  c.recovery.initial_rtt_ns = UINT64_MAX;
  c.recovery.min_rto_ns = UINT64_MAX;
  const EndpointConfig got = Endpoint(c).config();
  EXPECT_EQ(got.recovery.peer_timeout_ns, kMaxDurationNs);
  EXPECT_EQ(got.recovery.initial_rtt_ns, kMaxDurationNs);
  EXPECT_EQ(got.recovery.min_rto_ns, kMaxDurationNs);
}

}  // namespace
}  // namespace metaroce::test
