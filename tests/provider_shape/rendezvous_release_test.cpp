// When may a rendezvous sender take its buffer back? The provider's two
// choices for a large tagged message (docs/design/libfabric-provider.md,
// section 4 and gap G3), on the sans-IO engine with the ACKs of the data's
// receiver lost (tests/engine/loop.hpp's shuttle):
//  - READ: the receiver READs the sender's buffer, then SENDs a FIN; the
//    sender completes the MPI send and lets the buffer go on the FIN. But the
//    READ's responses are the sender's own packets (READ_RESP, in its PSN
//    space), which it resends until acknowledged; a FIN proves the receiver
//    placed them, not that the sender has heard so. An ACK lost or late is
//    enough: the sender's resend finds the region gone (MR-5) and both
//    connections fail.
//  - WRITE: the receiver SENDs a clear-to-send naming its buffer; the
//    sender WRITEs into it with WRITE_IMM, whose own completion at the
//    sender (COMP-1: cumulatively acknowledged) says the sender is done
//    with its buffer, and whose receive completion (COMP-3) says the data
//    is placed.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <tuple>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint8_t kAck = static_cast<uint8_t>(wire::Opcode::kAck);
constexpr uint32_t kLen = 64 * 4096;
constexpr uint64_t kWhile = 200'000'000;  // 200 ms of simulated time, well inside PATH-7

EndpointConfig rdm(uint64_t seed) {
  EndpointConfig c = cfg(seed);
  c.shared_rq_depth = 8;
  return c;
}

// Every byte of the message is in the receiver's buffer: ACKs sent from now
// on acknowledge its last packets.
bool placed(const Buf& b, uint8_t fill) {
  return std::all_of(b.bytes.begin(), b.bytes.end(), [&](uint8_t v) { return v == fill; });
}

Status first_error(Loop& loop, int i) {
  Event ev;
  while (loop.ep(i).poll_event(ev))
    if (ev.kind == EventKind::kError) return ev.status;
  return Status::kOk;
}

// Endpoint 1 sends a large message to endpoint 0 by READ: 0 READs 1's
// buffer over its connection to 1, then SENDs the FIN on it; 1 deregisters
// its buffer on the FIN's receive completion, as an MPI send completes
// there, or (on_served) once the engine also reports the READ served
// (Endpoint::poll_read_served). 0's ACKs are lost from the moment the READ's
// last response has arrived until the FIN has reached 1 (one lost ACK, when
// 0 has nothing more to acknowledge for a while).
struct ReadRendezvous {
  explicit ReadRendezvous(bool served = false) : on_served(served) {}
  static EndpointConfig responder(bool served) {
    EndpointConfig c = rdm(72);
    c.read_served_events = served;
    return c;
  }
  bool on_served;
  Loop loop{rdm(71), responder(on_served)};
  ConnId a, b;  // 0's connection to 1, and the same connection at 1
  std::unique_ptr<Buf> src, dst, fin, slot;
  uint64_t lost = 0;
  bool fin_in = false, released = false, served_before_fin = false;

  void run() {
    std::tie(a, b) = loop.connect();
    ASSERT_TRUE(a.valid() && b.valid());
    src = std::make_unique<Buf>(loop.ep(1), kLen, kAccessRemoteRead, 0x5a);
    dst = std::make_unique<Buf>(loop.ep(0), kLen, kAccessLocalWrite, 0);
    fin = std::make_unique<Buf>(loop.ep(0), 64, 0, 0x46);
    slot = std::make_unique<Buf>(loop.ep(1), 64, kAccessLocalWrite, 0);
    ASSERT_EQ(loop.ep(1).post_shared_recv({7, slot->addr(), 64, slot->mr.lkey}), Status::kOk);
    loop.drop = [&](int from, const std::vector<uint8_t>& d) {
      const bool drop = from == 0 && d.size() > 1 && d[1] == kAck && !fin_in && placed(*dst, 0x5a);
      lost += drop ? 1 : 0;
      return drop;
    };
    ASSERT_EQ(loop.ep(0).post_send(a, read_wr(*dst, src->addr(), src->mr.rkey, kLen, 1)),
              Status::kOk);
    std::vector<Completion> at0, at1;
    ASSERT_TRUE(loop.run_until([&] {
      for (const Completion& c : loop.drain(0)) at0.push_back(c);
      return !at0.empty();
    }));
    ASSERT_EQ(at0[0].status, Status::kOk);
    ASSERT_EQ(loop.ep(0).post_send(a, send_wr(*fin, 0, 16, 2)), Status::kOk);
    ASSERT_TRUE(loop.run_until([&] {
      for (const Completion& c : loop.drain(1)) at1.push_back(c);
      return !at1.empty();
    }));
    ASSERT_EQ(at1[0].op, CompletionOp::kRecv);
    ASSERT_EQ(at1[0].status, Status::kOk);
    fin_in = true;
    ReadServed served;
    served_before_fin = loop.ep(1).poll_read_served(served);
    if (on_served && !served_before_fin) {
      ASSERT_TRUE(loop.run_until([&] { return loop.ep(1).poll_read_served(served); }, kWhile));
    }
    if (on_served) {
      EXPECT_EQ(served.conn, b);
      EXPECT_EQ(served.lkey, src->mr.lkey);
      EXPECT_EQ(served.addr, src->addr());
      EXPECT_EQ(served.length, kLen);
    }
    ASSERT_EQ(loop.ep(1).deregister_memory(src->mr.lkey), Status::kOk);  // the MPI send completes
    released = true;
    loop.run_until([] { return false; }, kWhile);
  }
};

// Gap G3: released on the FIN alone, every byte arrived, yet 1's resend of a
// READ response finds the region gone and its connection fails
// kLocalProtection (MR-5; the next test). A provider that also waits for the
// engine's report that the READ was served (read_served_events) releases
// the buffer after the lost ACK's resend is acknowledged, and nothing fails.
TEST(RendezvousRelease, AReadRendezvousReleasedOnItsFinAndItsServingSurvivesALostAck) {
  ReadRendezvous r(true);
  r.run();
  if (HasFatalFailure()) return;
  EXPECT_GT(r.lost, 0u);
  EXPECT_FALSE(r.served_before_fin) << "the FIN came after the report: the test did not test that";
  EXPECT_EQ(first_error(r.loop, 1), Status::kOk) << r.lost << " ACKs lost";
  EXPECT_EQ(first_error(r.loop, 0), Status::kOk);
  EXPECT_TRUE(r.loop.ep(0).is_established(r.a));
  EXPECT_TRUE(r.loop.ep(1).is_established(r.b));
}

// After the failure above, 0 sends on the connection again. MR-5 has the
// failed responder NAK REMOTE_OPERATION_ERROR "so that the peer's work fails
// at once rather than by its peer timeout". Its NAK names the READ_REQ, of a
// READ 0 has completed, which 0 takes for stale (NAK-3): it used to repeat
// that NAK to every later packet (NAK-2), and 0 ignored some forty of them,
// its SEND failing kPeerUnreachable after peer_timeout (2 s, PATH-7). The
// responder now names the SEND it refuses (NAK-2), and the SEND fails at once.
TEST(RendezvousRelease, ARequesterHearsAtOnceThatItsPeerFailedAnsweringACompletedRead) {
  ReadRendezvous r;
  r.run();
  if (HasFatalFailure()) return;
  ASSERT_EQ(first_error(r.loop, 1), Status::kLocalProtection);  // the failure above
  ASSERT_EQ(r.loop.ep(0).post_send(r.a, send_wr(*r.fin, 0, 16, 3)), Status::kOk);
  std::vector<Completion> done;
  r.loop.run_until(
      [&] {
        for (const Completion& c : r.loop.drain(0)) done.push_back(c);
        return !done.empty() && done.back().wr_id == 3;
      },
      3'000'000'000ull);
  ASSERT_FALSE(done.empty());
  ASSERT_EQ(done.back().wr_id, 3u);
  EXPECT_EQ(done.back().status, Status::kRemoteOperationError);
  EXPECT_LT(r.loop.now().ns, 1'000'000'000ull) << "not at once: " << r.loop.now().ns << " ns";
}

// The same message by WRITE, the same ACKs lost: 1 (the sender) WRITEs
// into 0's buffer with WRITE_IMM on its own connection to 0 and lets its
// buffer go on that WRITE's completion; 0 lets its buffer go on the
// WRITE_IMM's receive completion. Nothing fails, however long the ACKs
// stay lost: the sender's buffer is released only once acknowledged.
TEST(RendezvousRelease, AWriteRendezvousReleasedOnItsCompletionsSurvivesLostAcks) {
  Loop loop(rdm(73), rdm(74));
  auto [a, b] = loop.connect();  // 0 -> 1; the data goes 1 -> 0 on b
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(1), kLen, 0, 0x5a);
  Buf dst(loop.ep(0), kLen, kAccessRemoteWrite | kAccessLocalWrite, 0);
  Buf slot(loop.ep(0), 64, kAccessLocalWrite, 0);
  ASSERT_EQ(loop.ep(0).post_shared_recv({7, slot.addr(), 64, slot.mr.lkey}), Status::kOk);
  bool released = false;
  uint64_t lost = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    const bool drop = from == 0 && d.size() > 1 && d[1] == kAck && !released && placed(dst, 0x5a);
    lost += drop ? 1 : 0;
    return drop;
  };
  SendWr wr = write_wr(src, dst, kLen, 9);
  wr.op = WrOpcode::kWriteImm;
  wr.imm = 0xf1;
  ASSERT_EQ(loop.ep(1).post_send(b, wr), Status::kOk);
  std::vector<Completion> at0, at1;
  ASSERT_TRUE(loop.run_until([&] {
    for (const Completion& c : loop.drain(0)) at0.push_back(c);
    return !at0.empty();
  }));
  ASSERT_EQ(at0[0].op, CompletionOp::kRecvWriteImm);
  ASSERT_EQ(at0[0].status, Status::kOk);
  EXPECT_TRUE(placed(dst, 0x5a));
  ASSERT_EQ(loop.ep(0).deregister_memory(dst.mr.lkey), Status::kOk);  // the MPI receive completes
  released = true;
  ASSERT_TRUE(loop.run_until([&] {
    for (const Completion& c : loop.drain(1)) at1.push_back(c);
    return !at1.empty();
  }));
  EXPECT_EQ(at1[0].status, Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(src.mr.lkey), Status::kOk);  // the MPI send completes
  loop.run_until([] { return false; }, kWhile);
  EXPECT_GT(lost, 0u) << "no ACK was lost: the test did not test that";
  EXPECT_EQ(first_error(loop, 0), Status::kOk);
  EXPECT_EQ(first_error(loop, 1), Status::kOk);
  EXPECT_TRUE(loop.ep(0).is_established(a));
  EXPECT_TRUE(loop.ep(1).is_established(b));
}

}  // namespace
}  // namespace metaroce::test
