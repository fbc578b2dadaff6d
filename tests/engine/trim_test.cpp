// Trimmed packets (spec 9.3): the receiver's echo of a cut packet, the
// sender's resend elsewhere and window cut on that echo, and a cut packet
// whose TRIMMED code point was lost.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

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
  TraceLog log(loop.ep(0));
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
  EXPECT_EQ(log.loss_causes(), std::vector<LossCause>{LossCause::kTrimmed});
}

// TRIM-3, as LOSS-2: an echo cannot tell apart two transmissions of one PSN
// on one path. One path: the WRITE's only packet is cut, and the echo of the
// cut is late, so the tail-loss timer resends the packet on that same path
// first (LOSS-8). The late echo then arrives while the resend, which is
// whole, is on its way: it names the PSN on the resend's path, but it is
// the original's (its echo_tsval says so). Taken for the resend's, it
// declared the resend lost and sent the packet a third time, to arrive as
// a duplicate.
TEST(Engine, LateTrimEchoOfAnOriginalIsNotTakenForItsResendOnTheSamePath) {  // TRIM-3
  EndpointConfig sc = cfg(230);
  sc.num_paths = 1;
  WriteSetup w(sc, 231, 1, 0);
  Loop& loop = w.loop;
  loop.delay_ns = 5'000;
  ASSERT_TRUE(warm_up_paths(loop, w.conn.first, w.src, w.dst, 8));  // the path's RTT known
  int copies = 0;
  loop.trim = [&](int from, std::vector<uint8_t>& d) {
    if (!is_write(from, d) || copies != 1) return false;
    cut_payload(d);
    return true;
  };
  std::vector<uint8_t> late_echo;  // held back until the resend has left
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kAck) || !late_echo.empty())
      return false;
    if (!(decoded(d).ack.flags & wire::kAckEchoTrimmed)) return false;
    late_echo = d;
    return true;
  };
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (!is_write(from, d) || ++copies != 2) return;
    ASSERT_FALSE(late_echo.empty());  // the premise: the cut was echoed before the resend
    const uint32_t echoed = decoded(late_echo).ack.echo_tsval;
    EXPECT_LT(echoed, decoded(d).bh.tsval);  // the original's echo
    // The engine tells them apart by tsval's low 8 bits (1 pair in 256 alike).
    ASSERT_NE(echoed & 0xff, decoded(d).bh.tsval & 0xff) << "premise: try other seeds";
    loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 0, false, late_echo}, loop.now());
  };
  w.write_all();
  loop.run_until([] { return false; }, 2'000'000);  // whatever is still in flight arrives
  EXPECT_EQ(copies, 2);
  EXPECT_EQ(loop.ep(0).conn_stats(w.conn.first)->retransmissions, 1u);
  EXPECT_EQ(loop.ep(1).conn_stats(w.conn.second)->duplicates_received, 0u);
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

}  // namespace
}  // namespace metaroce::test
