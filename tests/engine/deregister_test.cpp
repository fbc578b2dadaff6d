// Memory the application takes back under posted work (spec MR-5), READ
// requests no requester may send (READ-2), and what a connection that
// failed says afterwards (NAK-2, PATH-7). Engine over the fixed-delay
// shuttle of loop.hpp.
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/bytes.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint8_t kReadReq = static_cast<uint8_t>(wire::Opcode::kReadReq);
constexpr uint8_t kReadResp = static_cast<uint8_t>(wire::Opcode::kReadResp);
constexpr uint8_t kNak = static_cast<uint8_t>(wire::Opcode::kNak);

// The first error event of endpoint i's connection, or kOk.
Status error_of(Loop& loop, int i) {
  Event ev;
  while (loop.ep(i).poll_event(ev))
    if (ev.kind == EventKind::kError) return ev.status;
  return Status::kOk;
}

bool untouched(const Buf& b, uint8_t fill) {
  return std::all_of(b.bytes.begin(), b.bytes.end(), [&](uint8_t v) { return v == fill; });
}

// Well inside the peer timeout (PATH-7's 2 s): the peer was told, not left
// to find out by silence.
constexpr uint64_t kPromptly = 100'000'000;

// A receive buffer deregistered after it was posted takes nothing; the
// receiver fails the connection and says so with REMOTE_OPERATION_ERROR, and
// an RNR NAK it sent before is not repeated afterwards as if it were fatal
// (NAK-2): the sender's SEND fails at once instead of retrying that stale RNR.
TEST(Deregister, SendIntoDeregisteredReceiveBufferWritesNothing) {  // MR-5, NAK-2
  Loop loop(cfg(61), cfg(62));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 3 * 4096, 0, 5);
  Buf rbuf(loop.ep(1), 3 * 4096, kAccessLocalWrite, 0xAB);
  const SendWr s = send_wr(src, 0, 3 * 4096);
  // No receive posted yet: the first packet draws RNR. Then the receive is
  // posted and its memory deregistered before the retry arrives.
  int rnr_after_error = 0;
  int op_errors = 0;
  bool posted = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1 || d.size() < 21 || d[1] != kNak) return;
    const uint8_t code = d[wire::kBaseHeaderSize + 4];
    if (code == static_cast<uint8_t>(Status::kRnr) && posted) ++rnr_after_error;
    if (code == static_cast<uint8_t>(Status::kRemoteOperationError)) ++op_errors;
    if (code == static_cast<uint8_t>(Status::kRnr) && !posted) {
      posted = true;
      ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{9, rbuf.addr(), 3 * 4096, rbuf.mr.lkey}),
                Status::kOk);
      ASSERT_EQ(loop.ep(1).deregister_memory(rbuf.mr.lkey), Status::kOk);
    }
  };
  ASSERT_EQ(loop.ep(0).post_send(a, s), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  ASSERT_TRUE(posted);
  EXPECT_EQ(done[0].status, Status::kRemoteOperationError);
  EXPECT_EQ(error_of(loop, 0), Status::kRemoteOperationError);
  EXPECT_EQ(error_of(loop, 1), Status::kLocalProtection);
  EXPECT_TRUE(untouched(rbuf, 0xAB));
  EXPECT_EQ(rnr_after_error, 0);
  EXPECT_GE(op_errors, 1);
}

// trace.hpp's kConnState names the PSN of a request of its own at fault, and
// a receive is not one: a failure at a receive traces psn 0. (It traced the
// receive's place in its queue, here 2, read as a PSN.)
TEST(Deregister, AFailureAtAReceiveIsTracedWithNoPsn) {  // MR-5
  Loop loop(cfg(63), cfg(64));
  auto [a, b] = loop.connect();
  TraceLog log(loop.ep(1));
  Buf src(loop.ep(0), 100, 0, 5);
  Buf r0(loop.ep(1), 100, kAccessLocalWrite), r1(loop.ep(1), 100, kAccessLocalWrite),
      r2(loop.ep(1), 100, kAccessLocalWrite);
  uint64_t id = 0;
  for (const Buf* r : {&r0, &r1, &r2})
    ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{++id, r->addr(), 100, r->mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(r2.mr.lkey), Status::kOk);
  for (uint64_t i = 1; i <= 3; ++i)
    ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 100, i)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 3, done, kPromptly));
  EXPECT_EQ(done[2].status, Status::kRemoteOperationError);
  EXPECT_EQ(error_of(loop, 1), Status::kLocalProtection);
  const std::vector<TraceEvent> failed = log.of(TraceKind::kConnState);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].aux, static_cast<uint32_t>(Status::kLocalProtection));
  EXPECT_EQ(failed[0].psn, 0u);
}

// A READ's target deregistered while its responses travel: none is placed,
// and the responder, told, stops serving it and fails at once.
TEST(Deregister, ReadIntoDeregisteredTargetWritesNothing) {  // MR-5
  Loop loop(cfg(63), cfg(64));
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 64 * 4096, kAccessRemoteRead, 0x11);
  Buf target(loop.ep(0), 64 * 4096, kAccessLocalWrite, 0xCD);
  bool gone = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 1 && !gone && d.size() > 1 && d[1] == kReadResp) {
      gone = true;
      ASSERT_EQ(loop.ep(0).deregister_memory(target.mr.lkey), Status::kOk);
    }
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 64 * 4096, 3)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_TRUE(gone);
  EXPECT_EQ(done[0].status, Status::kLocalProtection);
  EXPECT_EQ(error_of(loop, 0), Status::kLocalProtection);
  EXPECT_TRUE(untouched(target, 0xCD));
  loop.run_until([] { return false; }, kPromptly);
  EXPECT_EQ(error_of(loop, 1), Status::kRemoteOperationError);
}

// COMP-5: the responder of that READ, told by NAK 0x07 naming one of its
// READ responses, fails with the NAK's code, but none of its own requests is
// at fault: its WRITE, posted meanwhile, completes kFlushed, not 0x07.
TEST(Deregister, ANakNamingAReadResponseNamesNoRequest) {  // COMP-5, MR-5, NAK-3
  Loop loop(cfg(467), cfg(468));
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 64 * 4096, kAccessRemoteRead, 0x11);
  Buf target(loop.ep(0), 64 * 4096, kAccessLocalWrite, 0xCD);
  Buf own(loop.ep(1), 64 * 4096, 0, 3);
  Buf own_dst(loop.ep(0), 64 * 4096, kAccessRemoteWrite);
  bool gone = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 1 && !gone && d.size() > 1 && d[1] == kReadResp) {
      gone = true;
      ASSERT_EQ(loop.ep(0).deregister_memory(target.mr.lkey), Status::kOk);
      // Waits behind the response (SEQ-5): outstanding, its PSNs not yet taken.
      ASSERT_EQ(loop.ep(1).post_send(b, write_wr(own, own_dst, 64 * 4096, 55)), Status::kOk);
    }
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 64 * 4096, 3)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(1, 1, done, kPromptly));
  ASSERT_TRUE(gone);
  EXPECT_EQ(done[0].wr_id, 55u);
  EXPECT_EQ(done[0].status, Status::kFlushed);
  EXPECT_EQ(error_of(loop, 1), Status::kRemoteOperationError);
}

// MR-5: a READ whose target went before its READ_REQ left fails then, as a
// WRITE whose source went: the READ_REQ is not sent, the READ completes
// kLocalProtection (the WRITE before it, still in flight, kFlushed), and the
// peer, which never saw the request, is told nothing (NAK-2).
TEST(Deregister, AReadWhoseTargetWentBeforeItsRequestLeftSendsNoRequest) {  // MR-5, NAK-2
  Loop loop(cfg(469), cfg(470));
  auto [a, b] = loop.connect();
  Buf w_src(loop.ep(0), 64 * 4096, 0, 1);
  Buf w_dst(loop.ep(1), 64 * 4096, kAccessRemoteWrite);
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  int read_reqs = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    read_reqs += from == 0 && d[1] == kReadReq;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(w_src, w_dst, 64 * 4096, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4096, 2)),
            Status::kOk);
  ASSERT_EQ(loop.ep(0).deregister_memory(target.mr.lkey), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 2, done, kPromptly));
  EXPECT_EQ(done[0].wr_id, 1u);
  EXPECT_EQ(done[0].status, Status::kFlushed);
  EXPECT_EQ(done[1].wr_id, 2u);
  EXPECT_EQ(done[1].status, Status::kLocalProtection);
  EXPECT_EQ(read_reqs, 0);
  EXPECT_EQ(error_of(loop, 0), Status::kLocalProtection);
  loop.run_until([] { return false; }, kPromptly);
  EXPECT_EQ(error_of(loop, 1), Status::kOk);
  EXPECT_TRUE(loop.ep(1).is_established(b));
  EXPECT_TRUE(untouched(target, 0));
}

// MR-5: a READ_REQ resent after the READ's target went is sent all the same:
// the responder holds the READ (only its ACK and responses were lost), and
// its responses, finding the target gone, draw NAK 0x07, so it fails at once
// with kRemoteOperationError. The requester failed the READ when it came to
// resend the request, told the responder nothing, and the responder resent
// its responses to a connection that answered none until its peer timeout
// (PATH-7): kPeerUnreachable 2 s later.
TEST(Deregister, AReadRequestResentAfterItsTargetWentLetsTheResponderBeTold) {  // MR-5, NAK-2
  Loop loop(cfg(471), cfg(472));
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 4 * 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4 * 4096, kAccessLocalWrite, 0xCD);
  int read_reqs = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 0 || d[1] != kReadReq || ++read_reqs != 1) return;
    ASSERT_EQ(loop.ep(0).deregister_memory(target.mr.lkey), Status::kOk);
  };
  // Everything the responder sends is lost until the request comes again.
  loop.drop = [&](int from, const std::vector<uint8_t>&) { return from == 1 && read_reqs < 2; };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4 * 4096, 6)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  EXPECT_EQ(done[0].status, Status::kLocalProtection);
  EXPECT_EQ(error_of(loop, 0), Status::kLocalProtection);
  Status at_responder = Status::kOk;
  loop.run_until(
      [&] {
        at_responder = error_of(loop, 1);
        return at_responder != Status::kOk;
      },
      kPromptly);
  EXPECT_EQ(at_responder, Status::kRemoteOperationError);
  EXPECT_EQ(read_reqs, 2);
  EXPECT_TRUE(untouched(target, 0xCD));
}

// The responder's region deregistered while it answers a READ: no byte of
// it leaves after that, and the requester's READ, its request long since
// acknowledged, fails at once on the NAK that names that request.
TEST(Deregister, ReadFromDeregisteredRegionSendsNothingMore) {  // MR-5, NAK-3
  Loop loop(cfg(65), cfg(66));
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 64 * 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 64 * 4096, kAccessLocalWrite, 0);
  int responses_after = 0;
  bool gone = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1 || d.size() < 2 || d[1] != kReadResp) return;
    if (gone) {
      ++responses_after;
      return;
    }
    gone = true;
    ASSERT_EQ(loop.ep(1).deregister_memory(remote.mr.lkey), Status::kOk);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 64 * 4096, 4)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  ASSERT_TRUE(gone);
  EXPECT_EQ(responses_after, 0);
  EXPECT_EQ(done[0].status, Status::kRemoteOperationError);
  EXPECT_EQ(error_of(loop, 0), Status::kRemoteOperationError);
  EXPECT_EQ(error_of(loop, 1), Status::kLocalProtection);
}

// MR-5, COMP-5: the request whose memory went is the one that fails
// kLocalProtection; every other completes kFlushed. The oldest outstanding
// request took the error, whichever it was.
TEST(Deregister, TheRequestWhoseSourceWentIsTheOneNamed) {  // MR-5, COMP-5
  Loop loop(cfg(69), cfg(70));
  auto [a, b] = loop.connect();
  Buf s1(loop.ep(0), 64 * 4096, 0, 1);
  Buf s2(loop.ep(0), 4096, 0, 2);
  Buf d(loop.ep(1), 64 * 4096, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(s1, d, 64 * 4096, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(s2, d, 4096, 2)), Status::kOk);
  ASSERT_EQ(loop.ep(0).deregister_memory(s2.mr.lkey), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 2, done, kPromptly));
  for (const Completion& c : done)
    EXPECT_EQ(c.status, c.wr_id == 2 ? Status::kLocalProtection : Status::kFlushed)
        << "wr " << c.wr_id;
}

// A receive whose buffer went is named, not the receiver's own WRITE in
// flight, whose PSNs are another numbering than the SEND's that found it.
TEST(Deregister, TheReceiveWhoseBufferWentIsTheOneNamed) {  // MR-5, COMP-5
  Loop loop(cfg(71), cfg(72));
  auto [a, b] = loop.connect();
  Buf rbuf(loop.ep(1), 4096, kAccessLocalWrite, 0xAB);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{77, rbuf.addr(), 4096, rbuf.mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(rbuf.mr.lkey), Status::kOk);
  Buf own(loop.ep(1), 64 * 4096, 0, 3);
  Buf own_dst(loop.ep(0), 64 * 4096, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(1).post_send(b, write_wr(own, own_dst, 64 * 4096, 55)), Status::kOk);
  Buf src(loop.ep(0), 4096, 0, 4);
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 4096, 9)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(1, 2, done, kPromptly));
  for (const Completion& c : done)
    EXPECT_EQ(c.status, c.wr_id == 77 ? Status::kLocalProtection : Status::kFlushed)
        << "wr " << c.wr_id;
  EXPECT_TRUE(untouched(rbuf, 0xAB));
}

// A SEND of no bytes writes nothing into its receive buffer, so the buffer's
// region having gone is no fault (MR-5, as for a WRITE_IMM's receive): the
// receive completes kOk with byte_len 0 and the connection goes on. It
// failed the connection with kLocalProtection and NAK 0x07 before. The next
// SEND, of one byte, into another receive whose region went still does.
TEST(Deregister, ASendOfNoBytesIntoAReceiveWhoseBufferWentCompletes) {  // MR-5, MR-3
  Loop loop(cfg(77), cfg(78));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 5);
  Buf r1(loop.ep(1), 4096, kAccessLocalWrite, 0xAB);
  Buf r2(loop.ep(1), 4096, kAccessLocalWrite, 0xCD);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{31, r1.addr(), 4096, r1.mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{32, r2.addr(), 4096, r2.mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(r1.mr.lkey), Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(r2.mr.lkey), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 0, 1)), Status::kOk);
  std::vector<Completion> done, got;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  EXPECT_EQ(done[0].status, Status::kOk);
  ASSERT_TRUE(loop.run_until_completions(1, 1, got, kPromptly));
  EXPECT_EQ(got[0].wr_id, 31u);
  EXPECT_EQ(got[0].status, Status::kOk);
  EXPECT_EQ(got[0].byte_len, 0u);
  EXPECT_TRUE(loop.ep(0).is_established(a));
  EXPECT_TRUE(loop.ep(1).is_established(b));
  EXPECT_EQ(error_of(loop, 1), Status::kOk);
  EXPECT_TRUE(untouched(r1, 0xAB));
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 1, 2)), Status::kOk);
  done.clear();
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  EXPECT_EQ(done[0].status, Status::kRemoteOperationError);
  EXPECT_EQ(error_of(loop, 1), Status::kLocalProtection);
  EXPECT_TRUE(untouched(r2, 0xCD));
}

// MR-3: a message of no bytes touches no memory, so the going of the region
// its lkey named is no fault on the sending side either: the WRITE goes and
// completes, and the connection stays up.
TEST(Deregister, AWriteOfNoBytesWhoseSourceWentCompletes) {  // MR-5, MR-3
  Loop loop(cfg(4903), cfg(4904));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 5);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite, 0xAB);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 0, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).deregister_memory(src.mr.lkey), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_TRUE(loop.ep(0).is_established(a));
  EXPECT_EQ(error_of(loop, 0), Status::kOk);
  EXPECT_TRUE(untouched(dst, 0xAB));
}

// MR-5 at PSN 0: a READ whose target went before its READ_REQ was ever sent
// sends none, though the request's record, never used, reads as PSN 0 (the
// test for a request sent before is its PSN and a transmission, not the PSN
// alone).
TEST(Deregister, AReadAtPsnZeroWhoseTargetWentBeforeItLeftSendsNoRequest) {  // MR-5, SEQ-2
  EndpointConfig c = cfg(0);
  c.seed = seed_for_first_psn(0);
  Loop loop(c, cfg(4905));
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  int read_reqs = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    read_reqs += from == 0 && d[1] == kReadReq;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4096, 1)),
            Status::kOk);
  ASSERT_EQ(loop.ep(0).deregister_memory(target.mr.lkey), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  EXPECT_EQ(done[0].status, Status::kLocalProtection);
  EXPECT_EQ(read_reqs, 0);
  EXPECT_EQ(error_of(loop, 0), Status::kLocalProtection);
  EXPECT_TRUE(untouched(target, 0));
}

// A shared receive whose buffer went is completed with the error, not given
// back to the shared queue (PLACE-6), where it failed every connection that
// took it next.
TEST(Deregister, ASharedReceiveWhoseBufferWentFailsOneConnectionOnly) {  // MR-5, PLACE-6
  EndpointConfig cb = cfg(74);
  cb.shared_rq_depth = 4;
  Loop loop(cfg(73), cb);
  auto [a1, b1] = loop.connect();
  auto [a2, b2] = loop.connect();
  Buf bad(loop.ep(1), 4096, kAccessLocalWrite, 0xAB);
  Buf good(loop.ep(1), 4096, kAccessLocalWrite, 0);
  ASSERT_EQ(loop.ep(1).post_shared_recv(RecvWr{1, bad.addr(), 4096, bad.mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(1).post_shared_recv(RecvWr{2, good.addr(), 4096, good.mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(bad.mr.lkey), Status::kOk);
  Buf src(loop.ep(0), 4096, 0, 6);
  ASSERT_EQ(loop.ep(0).post_send(a1, send_wr(src, 0, 4096, 10)), Status::kOk);
  std::vector<Completion> at_b;
  ASSERT_TRUE(loop.run_until_completions(1, 1, at_b, kPromptly));
  EXPECT_EQ(at_b[0].wr_id, 1u);
  EXPECT_EQ(at_b[0].status, Status::kLocalProtection);
  ASSERT_EQ(loop.ep(0).post_send(a2, send_wr(src, 0, 4096, 11)), Status::kOk);
  ASSERT_TRUE(loop.run_until_completions(1, 2, at_b, kPromptly));
  EXPECT_EQ(at_b[1].wr_id, 2u);
  EXPECT_EQ(at_b[1].status, Status::kOk);
  EXPECT_EQ(at_b[1].conn.v, b2.v);
  EXPECT_EQ(good.bytes, src.bytes);
  EXPECT_TRUE(untouched(bad, 0xAB));
  // Both completed, so the shared queue holds none: four fit again, not three.
  for (uint64_t i = 0; i < 4; ++i)
    EXPECT_EQ(loop.ep(1).post_shared_recv(RecvWr{20 + i, good.addr(), 4096, good.mr.lkey}),
              Status::kOk);
  EXPECT_EQ(loop.ep(1).post_shared_recv(RecvWr{30, good.addr(), 4096, good.mr.lkey}),
            Status::kQueueFull);
}

// The responder's REMOTE_OPERATION_ERROR leaves at once even when nothing
// else of the connection does: it was owed while building a response, and
// waited for some other datagram (the context timer's, 10 ms by default, or
// never) to make the connection ready again. Here the READ waits behind a
// lost WRITE (READ-5), and its region goes once the WRITE's resend lets it
// be served: the requester then has nothing more to send.
TEST(Deregister, AResponderWhoseRegionWentSaysSoAtOnce) {  // MR-5
  EndpointConfig cb = cfg(76);
  cb.context_idle_ns = 10'000'000'000ull;
  Loop loop(cfg(75), cb);
  auto [a, b] = loop.connect();
  Buf w_src(loop.ep(0), 4096, 0, 1);
  Buf w_dst(loop.ep(1), 4096, kAccessRemoteWrite);
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  int writes = 0;
  bool gone = false;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d.size() > 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) &&
           ++writes == 1;
  };
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    // The WRITE's resend is on its way: the region goes before the READ is served.
    if (from == 0 && !gone && writes == 1 && d.size() > 1 &&
        d[1] == static_cast<uint8_t>(wire::Opcode::kWrite)) {
      gone = true;
      ASSERT_EQ(loop.ep(1).deregister_memory(remote.mr.lkey), Status::kOk);
    }
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(w_src, w_dst, 4096, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4096, 2)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 2, done, 3'000'000'000ull));
  ASSERT_TRUE(gone);
  EXPECT_LT(loop.now().ns, 1'000'000 + kPromptly);
  for (const Completion& c : done)
    EXPECT_EQ(c.status, c.wr_id == 2 ? Status::kRemoteOperationError : Status::kOk)
        << "wr " << c.wr_id;
  EXPECT_TRUE(untouched(target, 0));
}

// READ-4, NAK-2: the responder's NAK 0x07 for a READ whose region went is
// lost. The READ_REQ was acknowledged, so the requester had nothing in flight
// and nothing asked the responder again: its READ failed kPeerUnreachable at
// the peer timeout, 2 s on. It PROBEs now after an RTO of silence, and the
// responder answers with its NAK: the READ fails kRemoteOperationError.
TEST(Deregister, AResponderWhoseNakWasLostIsAskedAgain) {  // READ-4, NAK-2, MR-5
  Loop loop(cfg(473), cfg(474));
  auto [a, b] = loop.connect();
  Buf w_src(loop.ep(0), 4096, 0, 1);
  Buf w_dst(loop.ep(1), 4096, kAccessRemoteWrite);
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  constexpr uint8_t kWrite = static_cast<uint8_t>(wire::Opcode::kWrite);
  int writes = 0, naks = 0, probes = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == kWrite && ++writes == 1) return true;  // READ-5: the READ waits
    return from == 1 && d[1] == kNak && ++naks == 1;
  };
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    // The WRITE's resend is on its way: the region goes before the READ is served.
    if (from == 0 && writes == 1 && d[1] == kWrite) {
      ASSERT_EQ(loop.ep(1).deregister_memory(remote.mr.lkey), Status::kOk);
    }
  };
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    probes += from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kProbe);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(w_src, w_dst, 4096, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4096, 2)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 2, done, kPromptly));
  EXPECT_EQ(naks, 2);
  EXPECT_EQ(probes, 1);
  for (const Completion& c : done)
    EXPECT_EQ(c.status, c.wr_id == 2 ? Status::kRemoteOperationError : Status::kOk)
        << "wr " << c.wr_id;
  EXPECT_EQ(error_of(loop, 0), Status::kRemoteOperationError);
  EXPECT_TRUE(untouched(target, 0));
}

// NAK-2, MR-5, NAK-3: the responder's resend of a READ response finds its
// region gone after the READ completed at the requester (the requester's
// last ACKs lost). Its NAK 0x07 names the READ_REQ, which the requester had
// acknowledged: repeated so to the requester's next WRITE, it was dropped as
// stale, and the WRITE failed kPeerUnreachable at the peer timeout, 2 s on.
// The responder now names the WRITE it refuses: the WRITE fails
// kRemoteOperationError at once.
TEST(Deregister, AFailedResponderTellsARequesterWhoseReadHadCompleted) {  // NAK-2, MR-5
  Loop loop(cfg(475), cfg(476));
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 4 * 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4 * 4096, kAccessLocalWrite, 0);
  Buf w_src(loop.ep(0), 4096, 0, 1);
  Buf w_dst(loop.ep(1), 4096, kAccessRemoteWrite);
  bool released = false;
  uint64_t lost = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    const bool drop = from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck) && !released &&
                      untouched(target, 0x22);
    lost += drop ? 1 : 0;
    return drop;
  };
  std::vector<wire::NakBody> naks;  // those endpoint 1 sent
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    wire::Packet p;
    if (from == 1 && d[1] == kNak && wire::decode(d, p) == wire::ParseError::kOk)
      naks.push_back(p.nak);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4 * 4096, 1)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(remote.mr.lkey), Status::kOk);
  released = true;
  ASSERT_TRUE(loop.run_until([&] { return !loop.ep(1).is_established(b); }, kPromptly));
  ASSERT_GT(lost, 0u) << "no ACK was lost: the responder had nothing to resend";
  ASSERT_EQ(error_of(loop, 1), Status::kLocalProtection);
  ASSERT_TRUE(loop.ep(0).is_established(a));  // the premise: its READ was long complete
  const TimeNs posted = loop.now();
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(w_src, w_dst, 4096, 2)), Status::kOk);
  done.clear();
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, 3'000'000'000ull));
  EXPECT_EQ(done[0].status, Status::kRemoteOperationError);
  EXPECT_LT(loop.now().ns - posted.ns, kPromptly);
  EXPECT_EQ(error_of(loop, 0), Status::kRemoteOperationError);
  ASSERT_FALSE(naks.empty());
  EXPECT_NE(naks.front().nak_psn, naks.back().nak_psn) << "the WRITE was not the one named";
  EXPECT_EQ(naks.front().cum_psn, naks.back().cum_psn);
}

// NAK-3: a fatal NAK naming work the sender has acknowledged is stale, even
// one shaped as the failed responder above used to repeat it (0x07 naming a
// completed READ's READ_REQ, its cum_psn the sender's oldest unacknowledged
// PSN, work outstanding): a healthy connection ignores it, and its WRITE
// then completes. A requester that took such a NAK as news (accepting a NAK
// naming acknowledged work when its cum_psn shows outstanding packets
// refused) would fail here: the responder, not the requester, changed.
TEST(Deregister, AStaleNakNamingACompletedReadFailsNothing) {  // NAK-3, MR-5
  Loop loop(cfg(477), cfg(478));
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  Buf w_src(loop.ep(0), 4096, 0, 1);
  Buf w_dst(loop.ep(1), 4096, kAccessRemoteWrite);
  wire::Packet req, ack;
  bool hold = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    wire::Packet& into = from == 0 ? req : ack;
    const uint8_t want = from == 0 ? kReadReq : static_cast<uint8_t>(wire::Opcode::kAck);
    if (d[1] == want) {
      EXPECT_EQ(wire::decode(d, into), wire::ParseError::kOk);
    }
  };
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return hold && from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 4096, 1)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kOk);
  // The WRITE is outstanding, its ACKs held back: the ACK's cum is its PSN.
  const uint32_t write_psn = ack.ack.cum_psn;
  hold = true;
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(w_src, w_dst, 4096, 2)), Status::kOk);
  loop.run_until([] { return false; }, 20'000);
  const wire::NakBody nak{req.bh.psn, static_cast<uint8_t>(Status::kRemoteOperationError),
                          req.mh.msn, write_psn};
  std::vector<uint8_t> d(256);
  d.resize(wire::seal(d, wire::write_nak(d, ack.bh, nak), 0));
  for (int i = 0; i < 3; ++i)
    loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 0, false, d}, loop.now());
  EXPECT_EQ(loop.ep(0).conn_stats(a)->naks_received, 3u);  // the premise: it was taken in
  EXPECT_TRUE(loop.ep(0).is_established(a));
  hold = false;
  done.clear();
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(error_of(loop, 0), Status::kOk);
  EXPECT_EQ(w_src.bytes, w_dst.bytes);
}

// READ-6: a responder whose application takes no reports of READs served
// holds the latest `kept` (cb's max_reads_served; room made when the
// endpoint is, so the ACK path allocates nothing for them): kept + 5 READs
// served leave the last `kept`, in order, and the 5 oldest dropped and
// counted.
void reads_served_left_untaken(EndpointConfig cb, uint32_t kept) {
  cb.read_served_events = true;
  Loop loop(cfg(481), cb);
  auto [a, b] = loop.connect();
  const uint32_t kReads = kept + 5;
  Buf remote(loop.ep(1), kReads * 8, kAccessRemoteRead, 0x33);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  constexpr uint32_t kBatch = 64;
  for (uint32_t i = 0; i < kReads; i += kBatch) {
    const uint32_t n = std::min(kBatch, kReads - i);
    for (uint32_t k = 0; k < n; ++k)
      ASSERT_EQ(loop.ep(0).post_send(
                    a, read_wr(target, remote.addr((i + k) * 8), remote.mr.rkey, 8, i + k)),
                Status::kOk);
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, n, done)) << "READs from " << i;
  }
  loop.run_until([] { return false; }, kPromptly);  // the last responses' ACKs
  EXPECT_EQ(loop.ep(1).endpoint_stats().reads_served_dropped, 5u);
  std::vector<ReadServed> got;
  ReadServed r;
  while (loop.ep(1).poll_read_served(r)) got.push_back(r);
  ASSERT_EQ(got.size(), kept);
  for (uint32_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].addr, remote.addr((i + 5) * 8)) << "report " << i;
    EXPECT_EQ(got[i].conn, b);
  }
  EXPECT_TRUE(loop.ep(0).is_established(a));
}

TEST(Deregister, ReportsOfReadsServedLeftUntakenAreBoundedOldestDropped) {  // READ-6
  reads_served_left_untaken(cfg(482), 4096);  // max_reads_served's default
}

// The bound is max_reads_served: at 3, 8 READs served leave the last 3.
// (It was 4,096 whatever the configuration.)
TEST(Deregister, ReportsOfReadsServedAreBoundedByTheConfiguredNumber) {  // READ-6
  EndpointConfig cb = cfg(482);
  cb.max_reads_served = 3;
  reads_served_left_untaken(cb, 3);
}

// Gap G3 (docs/design/libfabric-provider.md): a responder that asked for it
// hears when a READ it answered is wholly acknowledged, and not before: with
// the requester's last ACKs lost, its READ complete, the report waits for the
// resends' ACKs. The region may go then, and nothing fails. An endpoint
// that did not ask reports nothing.
TEST(Deregister, AReadServedIsReportedOnceItsResponsesAreAcknowledged) {  // MR-5, READ-3
  EndpointConfig cb = cfg(480);
  cb.read_served_events = true;
  Loop loop(cfg(479), cb);
  auto [a, b] = loop.connect();
  Buf remote(loop.ep(1), 8 * 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 4 * 4096, kAccessLocalWrite | kAccessRemoteRead, 0);
  bool hold = true;
  uint64_t lost = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    const bool drop = hold && from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck) &&
                      untouched(target, 0x22);
    lost += drop ? 1 : 0;
    return drop;
  };
  ASSERT_EQ(
      loop.ep(0).post_send(a, read_wr(target, remote.addr(4096), remote.mr.rkey, 4 * 4096, 1)),
      Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kOk);
  loop.run_until([] { return false; }, 20'000'000);
  ASSERT_GT(lost, 0u);
  ReadServed served;
  EXPECT_FALSE(loop.ep(1).poll_read_served(served)) << "reported with its last ACKs lost";
  hold = false;
  ASSERT_TRUE(loop.run_until([&] { return loop.ep(1).poll_read_served(served); }, kPromptly));
  EXPECT_EQ(served.conn, b);
  EXPECT_EQ(served.lkey, remote.mr.lkey);
  EXPECT_EQ(served.addr, remote.addr(4096));
  EXPECT_EQ(served.length, 4u * 4096);
  EXPECT_FALSE(loop.ep(1).poll_read_served(served)) << "reported twice";
  ASSERT_EQ(loop.ep(1).deregister_memory(remote.mr.lkey), Status::kOk);
  // The other way: endpoint 0 answers a READ of 1's, and did not ask.
  Buf back(loop.ep(1), 4096, kAccessLocalWrite, 0);
  ASSERT_EQ(loop.ep(1).post_send(b, read_wr(back, target.addr(), target.mr.rkey, 4096, 2)),
            Status::kOk);
  done.clear();
  ASSERT_TRUE(loop.run_until_completions(1, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  loop.run_until([] { return false; }, kPromptly);
  EXPECT_FALSE(loop.ep(0).poll_read_served(served));
  EXPECT_FALSE(loop.ep(1).poll_read_served(served));
  EXPECT_EQ(error_of(loop, 0), Status::kOk);
  EXPECT_EQ(error_of(loop, 1), Status::kOk);
  EXPECT_TRUE(loop.ep(0).is_established(a));
  EXPECT_TRUE(loop.ep(1).is_established(b));
}

// READ-2: a READ_REQ for more than kMaxMessageLength bytes is refused with
// NAK 0x06 before any byte is read, even against a region that large. Its
// msg_len near 2^32 made the responder's packet count wrap to 0, and it then
// sent responses without end.
TEST(Deregister, ReadRequestLongerThanAnyMessageIsRefused) {  // READ-2
  Loop loop(cfg(67), cfg(68));
  auto [a, b] = loop.connect();
  // 5 GiB of address space, never touched: only a refused request leaves it so.
  const size_t big = size_t{5} << 30;
  void* space = mmap(nullptr, big, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(space, MAP_FAILED);
  MemoryRegion mr;
  ASSERT_EQ(loop.ep(1).register_memory(space, big, kAccessRemoteRead, mr), Status::kOk);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    if (from != 0 || d.size() < 2 || d[1] != kReadReq) return;
    be::store32(d.data() + wire::kBaseHeaderSize + 8, 0xFFFFFFFFu);  // msg_len
    const size_t header = d.size() - wire::kIcrcSize;
    ASSERT_EQ(wire::seal(d, header, 0), d.size());
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, mr.addr, mr.rkey, 4096, 5)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kRemoteInvalidRequest);
  ASSERT_NE(loop.ep(1).conn_stats(b), nullptr);
  EXPECT_EQ(loop.ep(1).conn_stats(b)->naks_sent, 1u);
  munmap(space, big);
}

// Registering and deregistering in a loop (a registration per I/O) kept
// about 60 bytes of heap per region gone, forever: lkeys were never reused
// and neither were their slots, and the rkey table doubled whenever its
// tombstones filled half of it (a million came and went with 59 MB held);
// after 2^30 every registration failed kResourceExhausted. Slots are reused
// now, each with a new generation in its lkey, and a slot whose generations
// are spent starts over once no work names it (MR-6): an lkey comes round
// only after 1,024 registrations, and never while its region is registered.
TEST(Deregister, RegionsThatComeAndGoHoldNoMemory) {  // MR-1, MR-5
  Endpoint ep(cfg(80));
  std::vector<uint8_t> bytes(64);
  MemoryRegion kept, first, mr;
  ASSERT_EQ(ep.register_memory(bytes.data(), 64, 0, kept), Status::kOk);
  ASSERT_EQ(ep.register_memory(bytes.data(), 64, 0, first), Status::kOk);
  ASSERT_EQ(ep.deregister_memory(first.lkey), Status::kOk);
  constexpr size_t kTimes = 1'000'000;
  std::vector<uint32_t> lkeys;
  lkeys.reserve(kTimes);
  // In use: small blocks, and the large ones malloc maps apart.
  const auto heap = [] { return mallinfo2().uordblks + mallinfo2().hblkhd; };
  const size_t before = heap();
  for (size_t i = 0; i < kTimes; ++i) {
    ASSERT_EQ(ep.register_memory(bytes.data(), 64, kAccessRemoteWrite, mr), Status::kOk);
    lkeys.push_back(mr.lkey);
    ASSERT_EQ(ep.deregister_memory(mr.lkey), Status::kOk);
  }
  const size_t after = heap();
  EXPECT_LT(after, before + (1u << 20)) << "heap grew by " << after - before << " bytes";
  EXPECT_EQ(std::count(lkeys.begin(), lkeys.end(), kept.lkey), 0) << "a registered lkey given";
  std::unordered_map<uint32_t, size_t> last;  // lkey -> where it was last given
  last[first.lkey] = 0;
  for (size_t i = 0; i < lkeys.size(); ++i) {
    const auto [it, fresh] = last.try_emplace(lkeys[i], i + 1);
    if (!fresh) {
      ASSERT_GE(i + 1 - it->second, 1024u) << "lkey " << lkeys[i] << " came round early";
      it->second = i + 1;
    }
  }
  EXPECT_EQ(ep.deregister_memory(first.lkey), Status::kInvalidArgument);
  EXPECT_EQ(ep.deregister_memory(mr.lkey), Status::kInvalidArgument);
  EXPECT_EQ(ep.deregister_memory(kept.lkey), Status::kOk);
}

}  // namespace
}  // namespace metaroce::test
