// READ-4: READs whose requests were acknowledged wait for their responses
// with nothing of the requester's in flight; when it hears nothing from the
// responder for an RTO, a PROBE asks again. These pin when that PROBE goes,
// and when it does not.
#include <gtest/gtest.h>

#include <vector>

#include "engine_util.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint8_t kAck = static_cast<uint8_t>(wire::Opcode::kAck);
constexpr uint8_t kNak = static_cast<uint8_t>(wire::Opcode::kNak);
constexpr uint8_t kProbe = static_cast<uint8_t>(wire::Opcode::kProbe);
constexpr uint8_t kSend = static_cast<uint8_t>(wire::Opcode::kSend);

// The responder's READ responses and PROBEs are all lost; its ACKs arrive
// until the requester's first PROBE, and then nothing does. That PROBE goes
// exactly one RTO (min_rto: the loop's round trip is far below it) after the
// last ACK arrived, and the next ones as CONN-9's follow each other: an RTO,
// then half as long again. Not a nanosecond later: each deadline is served
// when time reaches it, as every timer's is; nor earlier when the connection
// wakes a nanosecond before for another timer: the requester took a WRITE of
// the responder's just before, and its receive context, idle, goes back to
// the pool context_idle_ns after that last ACK.
TEST(ReadWait, ProbesGoExactlyAnRtoAfterTheResponderWasLastHeardThenAsConn9s) {  // READ-4
  EndpointConfig c = cfg(481);
  c.context_idle_ns = c.recovery.min_rto_ns - 1;
  Loop loop(c, cfg(482));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  Buf w_src(loop.ep(1), 4096, 0, 1);
  Buf w_dst(loop.ep(0), 4096, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(1).post_send(b, write_wr(w_src, w_dst, 4096, 7)), Status::kOk);
  std::vector<Completion> written;
  ASSERT_TRUE(loop.run_until_completions(1, 1, written));
  ASSERT_EQ(written[0].status, Status::kOk);
  TimeNs last_heard{0};
  std::vector<TimeNs> probes;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 1) return false;
    if (d[1] != kAck || !probes.empty()) return true;
    last_heard = loop.now() + loop.delay_ns;  // the loop's fixed delay: when it arrives
    return false;
  };
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == kProbe) probes.push_back(loop.now());
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4096)),
            Status::kOk);
  ASSERT_TRUE(loop.run_until([&] { return probes.size() >= 3; }, 10 * kMillisecond));
  ASSERT_NE(last_heard.ns, 0u) << "no ACK reached the requester";
  const uint64_t rto = c.recovery.min_rto_ns;
  EXPECT_EQ(probes[0].since(last_heard), rto);
  EXPECT_EQ(probes[1].since(probes[0]), rto);
  EXPECT_EQ(probes[2].since(probes[1]), rto + rto / 2);
  PathStats p0;
  ASSERT_TRUE(loop.ep(0).path_stats(a, 0, p0));
  EXPECT_EQ(p0.timeouts, 0u) << "a path's RTO, not READ-4's wait, sent the PROBE";
}

// A SEND posted behind the READ is refused (RNR: no receive posted) and
// queued for resending until LOSS-7's pause ends, longer than an RTO here.
// The READ waits for its response with a resend queued: READ-4's PROBE is
// not for it, as the resend will ask the responder itself. Nothing leaves
// the requester until the pause ends, and then the resend does.
TEST(ReadWait, NoProbeWhileAResendIsQueuedBehindAnRnrPause) {  // READ-4, LOSS-7
  EndpointConfig c = cfg(483);
  c.recovery.rnr_retry_ns = 5 * kMillisecond;
  Loop loop(c, cfg(484));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  Buf src(loop.ep(0), 256, 0, 5);
  TimeNs refused{0};
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 1) return false;
    if (d[1] == kNak && refused.ns == 0) refused = loop.now() + loop.delay_ns;
    return d[1] != kAck && d[1] != kNak;  // the READ's response never comes
  };
  std::vector<std::pair<TimeNs, uint8_t>> sent;  // the requester's, after the refusal
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && refused.ns != 0) sent.emplace_back(loop.now(), d[1]);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4096, 1)),
            Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 256, 2)), Status::kOk);
  ASSERT_TRUE(loop.run_until([&] { return !sent.empty(); }, 20 * kMillisecond));
  ASSERT_NE(refused.ns, 0u) << "the SEND was not refused";
  EXPECT_EQ(sent[0].second, kSend) << "opcode " << int{sent[0].second} << " sent "
                                   << sent[0].first.since(refused) << " ns after the RNR NAK";
  EXPECT_GE(sent[0].first.since(refused), c.recovery.rnr_retry_ns);
}

}  // namespace
}  // namespace metaroce::test
