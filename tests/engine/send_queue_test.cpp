// The send queue (spec 6, 8.2): what a posted message puts on the wire, and
// which of the queued messages and READ responses goes next.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

// SEQ-5, PLACE-2: with one send-queue slot every message takes the slot the
// one before it left, whose headers the sender keeps to patch the next
// message's: the new message must carry its own rkey and length, not the
// previous one's (which named another region, of another size).
TEST(SendQueue, AMessageInTheSlotThePreviousOneLeftCarriesItsOwnHeaders) {
  EndpointConfig c = cfg(4901);
  c.sq_depth = 1;
  Loop loop(c, cfg(4902));
  const ConnId a = loop.connect().first;
  Buf src(loop.ep(0), 5000, 0);
  pattern(src.bytes, 0x31);
  Buf first(loop.ep(1), 3000, kAccessRemoteWrite);
  Buf second(loop.ep(1), 5000, kAccessRemoteWrite);
  ASSERT_TRUE(write_completes(loop, a, src, first, 3000, 1));
  ASSERT_TRUE(write_completes(loop, a, src, second, 5000, 2));
  EXPECT_EQ(src.bytes, second.bytes);
}

// LOSS-7, SEQ-5: a message refused for want of a receive buffer, only part
// of it sent when the RNR NAK comes back, sends no more of itself while the
// pause lasts: its remaining packets wait, as its resends do, so that the
// message goes again in order once the pause ends.
TEST(SendQueue, AHalfSentMessageSendsNothingMoreDuringItsRnrPause) {
  Loop loop(cfg(4906), cfg(4907));
  auto [a, b] = loop.connect();
  constexpr uint32_t kLen = 1 << 20;  // far more packets than the first windows hold
  Buf src(loop.ep(0), kLen, 0);
  pattern(src.bytes, 0x47);
  Buf rbuf(loop.ep(1), kLen, kAccessLocalWrite, 0);
  const uint64_t pause = loop.ep(0).config().recovery.rnr_retry_ns;
  TimeNs nak_sent{0};
  uint64_t before_nak = 0, in_pause = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kNak) && nak_sent.ns == 0) {
      nak_sent = loop.now();
      ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{5, rbuf.addr(), kLen, rbuf.mr.lkey}), Status::kOk);
    }
    if (from != 0 || d[1] != static_cast<uint8_t>(wire::Opcode::kSend)) return;
    if (nak_sent.ns == 0) {
      ++before_nak;
      return;
    }
    // Strictly inside the pause: from the NAK's arrival to its end.
    const TimeNs heard = nak_sent + loop.delay_ns;
    in_pause += heard < loop.now() && loop.now() < heard + pause;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, kLen)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, rbuf.bytes);
  ASSERT_NE(nak_sent.ns, 0u);
  ASSERT_GT(before_nak, 0u);
  ASSERT_LT(before_nak, uint64_t{kLen} / loop.ep(0).config().mtu) << "sent whole before the NAK";
  EXPECT_EQ(in_pause, 0u);
}

}  // namespace
}  // namespace metaroce::test
