// Memory the application takes back under posted work (spec MR-5), READ
// requests no requester may send (READ-2), and what a connection that
// failed says afterwards (NAK-2, PATH-7). Engine over the fixed-delay
// shuttle of loop.hpp.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
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

}  // namespace
}  // namespace metaroce::test
