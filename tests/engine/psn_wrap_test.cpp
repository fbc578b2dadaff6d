// PSN arithmetic across 2^32 (SEQ-1): a connection whose initial PSN sits
// just below the wrap moves a READ's responses, and a WRITE, across it with
// packets lost on either side. The engine draws its initial PSN from its
// seeded generator; seed_for_first_psn (config.hpp, the one place that
// runs the generator backwards) gives the seed whose first draw lands
// where the test wants, and a connection made or accepted by a fresh
// endpoint is the first thing it draws a number for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint32_t kStart = 0xFFFFFFF0u;  // 16 PSNs below the wrap

std::optional<uint32_t> psn_of(const std::vector<uint8_t>& d, wire::Opcode op) {
  wire::Packet p;
  if (wire::decode(d, p) != wire::ParseError::kOk || p.bh.opcode != op) return std::nullopt;
  return p.bh.psn;
}

// Drops the first transmission of the given PSNs of one opcode from one
// endpoint, and remembers the first such PSN sent.
struct FirstTransmissionDrops {
  int from;
  wire::Opcode op;
  std::vector<uint32_t> psns;
  std::optional<uint32_t> first{};
  std::vector<uint32_t> seen{};
  int dropped = 0;
  void install(Loop& loop) {
    loop.drop = [this](int from_ep, const std::vector<uint8_t>& d) {
      const auto psn = psn_of(d, op);
      if (from_ep != from || !psn) return false;
      if (!first) first = *psn;
      const bool again = std::find(seen.begin(), seen.end(), *psn) != seen.end();
      seen.push_back(*psn);
      if (again || std::find(psns.begin(), psns.end(), *psn) == psns.end()) return false;
      ++dropped;
      return true;
    };
  }
};

// Runs `body` on a Loop whose endpoint `who` starts its first connection's
// PSNs at kStart (the one it makes, or, as responder, accepts).
bool with_psns_at_the_wrap(int who, uint64_t other_seed,
                           const std::function<bool(Loop&, ConnId, ConnId)>& body) {
  EndpointConfig mine = cfg(0);
  mine.seed = seed_for_first_psn(kStart);
  const EndpointConfig other = cfg(other_seed);
  Loop loop(who == 0 ? mine : other, who == 0 ? other : mine);
  auto [a, b] = loop.connect();
  return body(loop, a, b);
}

// seed_for_first_psn (what the conformance targets use to start near the
// wrap, SEQ-2): an endpoint so seeded announces that initial PSN in its
// first connection's CONNECT_REQ.
TEST(PsnWrap, SeedForFirstPsnStartsTheFirstConnectionThere) {
  for (const uint32_t psn : {0xFFFFFFFCu, 0u, 0x12345678u}) {
    EndpointConfig cfg;
    cfg.seed = seed_for_first_psn(psn);
    Endpoint ep(cfg);
    PeerAddr peer;
    peer.len = 1;
    ConnId id;
    ASSERT_EQ(ep.connect(peer, TimeNs{1}, id), Status::kOk);
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    ASSERT_TRUE(ep.poll_transmit(TimeNs{1}, buf, tx));
    wire::Packet p;
    ASSERT_EQ(wire::decode(std::span<const uint8_t>(buf).first(tx.len), p), wire::ParseError::kOk);
    ASSERT_EQ(p.bh.opcode, wire::Opcode::kConnectReq);
    EXPECT_EQ(p.connect.initial_psn, psn);
  }
}

TEST(PsnWrap, ReadResponsesCrossTheWrapWithLosses) {  // SEQ-1, READ-2, LOSS-2
  constexpr uint32_t kLen = 64 * 4096;
  const bool landed = with_psns_at_the_wrap(1, 90, [&](Loop& loop, ConnId a, ConnId) {
    Buf into(loop.ep(0), kLen, kAccessLocalWrite, 0);
    Buf from(loop.ep(1), kLen, kAccessRemoteRead, 0);
    pattern(from.bytes, 11);
    // The first transmissions of a packet just before and one just after
    // the wrap are lost.
    FirstTransmissionDrops drops{1, wire::Opcode::kReadResp, {0xFFFFFFFEu, 0x00000001u}};
    drops.install(loop);
    EXPECT_EQ(loop.ep(0).post_send(a, read_wr(into, from.addr(), from.mr.rkey, kLen)), Status::kOk);
    std::vector<Completion> done;
    EXPECT_TRUE(loop.run_until_completions(0, 1, done));
    if (drops.first != kStart) return false;
    EXPECT_EQ(done.at(0).status, Status::kOk);
    EXPECT_EQ(into.bytes, from.bytes);
    EXPECT_EQ(drops.dropped, 2);
    return true;
  });
  EXPECT_TRUE(landed) << "seed_for_first_psn did not put the responder's first PSN at " << kStart;
}

TEST(PsnWrap, WriteCrossesTheWrapWithLosses) {  // SEQ-1, LOSS-2, ACK-3
  constexpr uint32_t kLen = 64 * 4096;
  const bool landed = with_psns_at_the_wrap(0, 91, [&](Loop& loop, ConnId a, ConnId) {
    Buf src(loop.ep(0), kLen, 0, 0);
    pattern(src.bytes, 13);
    Buf dst(loop.ep(1), kLen, kAccessRemoteWrite, 0);
    FirstTransmissionDrops drops{0, wire::Opcode::kWrite, {0xFFFFFFFFu, 0x00000000u, 0x00000005u}};
    drops.install(loop);
    EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, kLen)), Status::kOk);
    std::vector<Completion> done;
    EXPECT_TRUE(loop.run_until_completions(0, 1, done));
    if (drops.first != kStart) return false;
    EXPECT_EQ(done.at(0).status, Status::kOk);
    EXPECT_EQ(src.bytes, dst.bytes);
    EXPECT_EQ(drops.dropped, 3);
    return true;
  });
  EXPECT_TRUE(landed) << "seed_for_first_psn did not put the requester's first PSN at " << kStart;
}

}  // namespace
}  // namespace metaroce::test
