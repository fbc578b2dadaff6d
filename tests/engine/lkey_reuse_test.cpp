// Registrations without end (spec MR-6): a table slot whose lkey generations
// are spent starts over, but never while held work (posted sends and
// receives, READs being answered) names one of its lkeys, for such work
// holds the old region's memory (MR-5). Engine over the fixed-delay shuttle
// of loop.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

// A slot's generations (engine/src/mr_table.hpp, MrTable::kGenerations):
// the registrations of one slot before it is spent.
constexpr uint32_t kGenerations = 1024;
// An lkey's slot bits (MrTable::kIndexMask): the lkey of its generation 0.
constexpr uint32_t kSlotBits = (1u << 22) - 1;

// Well inside the peer timeout (PATH-7's 2 s).
constexpr uint64_t kPromptly = 100'000'000;

bool untouched(const Buf& b, uint8_t fill) {
  return std::all_of(b.bytes.begin(), b.bytes.end(), [&](uint8_t v) { return v == fill; });
}

// Registers and deregisters a region n times, each lkey appended to `given`.
void come_and_go(Endpoint& ep, std::vector<uint8_t>& bytes, uint32_t n,
                 std::vector<uint32_t>& given) {
  MemoryRegion mr;
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(ep.register_memory(bytes.data(), bytes.size(), kAccessLocalWrite, mr), Status::kOk);
    given.push_back(mr.lkey);
    ASSERT_EQ(ep.deregister_memory(mr.lkey), Status::kOk);
  }
}

// Whether `held`, whose work is done, is given again: `other` deregistered,
// a slot spent (which has the spent slots looked at again), and then up to
// 2,048 rounds with two regions registered at once.
bool given_again(Endpoint& ep, uint32_t held, uint32_t other) {
  if (ep.deregister_memory(other) != Status::kOk) return false;
  std::vector<uint8_t> bytes(64);
  std::vector<uint32_t> given;
  come_and_go(ep, bytes, 2 * kGenerations, given);
  if (std::count(given.begin(), given.end(), held) != 0) return true;
  for (uint32_t i = 0; i < 2 * kGenerations; ++i) {
    MemoryRegion x, y;
    if (ep.register_memory(bytes.data(), 64, 0, x) != Status::kOk) return false;
    if (ep.register_memory(bytes.data(), 64, 0, y) != Status::kOk) return false;
    const bool found = x.lkey == held || y.lkey == held;
    if (ep.deregister_memory(x.lkey) != Status::kOk) return false;
    if (ep.deregister_memory(y.lkey) != Status::kOk) return false;
    if (found) return true;
  }
  return false;
}

// Before, a slot whose 1,024 generations were spent was never used again:
// about 2^32 registrations in an endpoint's life (2^22 slots), 72 minutes
// at one a microsecond (a provider registering for every rendezvous). Now
// one slot serves a register-deregister loop for ever, its lkeys coming
// round every 1,024 registrations, each unique within its round.
TEST(LkeyReuse, ASlotWhoseGenerationsAreSpentStartsOver) {  // MR-6
  Endpoint ep(cfg(90));
  std::vector<uint8_t> bytes(64);
  std::vector<uint32_t> given;
  come_and_go(ep, bytes, 4 * kGenerations, given);
  ASSERT_EQ(given.size(), 4 * kGenerations);
  std::vector<uint32_t> round(given.begin(), given.begin() + kGenerations);
  std::sort(round.begin(), round.end());
  EXPECT_EQ(std::adjacent_find(round.begin(), round.end()), round.end()) << "an lkey twice";
  for (size_t i = kGenerations; i < given.size(); ++i)
    ASSERT_EQ(given[i], given[i - kGenerations]) << "registration " << i << " took another slot";
  // A stale lkey is refused until its turn comes round again (MR-2).
  MemoryRegion mr;
  ASSERT_EQ(ep.register_memory(bytes.data(), 64, 0, mr), Status::kOk);
  EXPECT_EQ(mr.lkey, given[0]);
  EXPECT_EQ(ep.deregister_memory(given[1]), Status::kInvalidArgument);
}

// With `held`'s region gone under posted work: 3,071 registrations, as
// many as bring its slot's generation round to it again, then one region
// registered in `bytes` and kept, whose lkey is returned; none may be given
// `held`, for the work still holds it.
uint32_t register_past(Endpoint& ep, uint32_t held, std::vector<uint8_t>& bytes) {
  std::vector<uint32_t> given;
  come_and_go(ep, bytes, 3 * kGenerations - 1, given);
  EXPECT_EQ(std::count(given.begin(), given.end(), held), 0);
  MemoryRegion other;
  EXPECT_EQ(ep.register_memory(bytes.data(), bytes.size(), kAccessLocalWrite, other), Status::kOk);
  EXPECT_NE(other.lkey, held);
  return other.lkey;
}

// Runs the loop: endpoint i's work wr_id fails kLocalProtection (MR-5) with
// `b`, filled 0xAB, untouched.
void work_failed(Loop& loop, int i, uint64_t wr_id, const Buf& b) {
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(i, 1, done, kPromptly));
  EXPECT_EQ(done[0].wr_id, wr_id);
  EXPECT_EQ(done[0].status, Status::kLocalProtection);
  EXPECT_TRUE(untouched(b, 0xAB));
}

// work_failed, the work holding `held`. That work done, nothing holds the
// lkey: it comes round again.
void held_work_failed(Loop& loop, int i, uint64_t wr_id, const Buf& b, uint32_t held,
                      uint32_t other) {
  work_failed(loop, i, wr_id, b);
  EXPECT_TRUE(given_again(loop.ep(i), held, other));
}

// A receive, its own or shared (PLACE-6), posted with an lkey whose region
// then went keeps its slot out of use, however many registrations come: a
// region given that lkey would have the SEND into the old receive written
// into memory the application took back. Once the receive is done, the
// lkey comes round again (before, never: its slot was spent for good).
void a_held_receive(bool shared) {
  EndpointConfig cb = cfg(92);
  cb.shared_rq_depth = 4;
  Loop loop(cfg(91), cb);
  auto [a, b] = loop.connect();
  Buf rbuf(loop.ep(1), 4096, kAccessLocalWrite, 0xAB);
  const uint32_t held = rbuf.mr.lkey;
  const RecvWr wr{9, rbuf.addr(), 4096, held};
  ASSERT_EQ(shared ? loop.ep(1).post_shared_recv(wr) : loop.ep(1).post_recv(b, wr), Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(held), Status::kOk);
  std::vector<uint8_t> scratch(4096);
  const uint32_t other = register_past(loop.ep(1), held, scratch);
  Buf src(loop.ep(0), 4096, 0, 5);
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 4096)), Status::kOk);
  held_work_failed(loop, 1, 9, rbuf, held, other);
}

TEST(LkeyReuse, AnLkeyAPostedReceiveHoldsIsNotGivenAgain) {  // MR-6, MR-5
  a_held_receive(false);
}

TEST(LkeyReuse, AnLkeyASharedReceiveHoldsIsNotGivenAgain) {  // MR-6, MR-5, PLACE-6
  a_held_receive(true);
}

// The same for a WRITE waiting in the send queue: its source lkey, given to
// a new region, would have sent the old region's bytes.
TEST(LkeyReuse, AnLkeyAQueuedWriteHoldsIsNotGivenAgain) {  // MR-6, MR-5
  Loop loop(cfg(95), cfg(96));
  auto [a, b] = loop.connect();
  (void)b;
  Buf src(loop.ep(0), 4096, 0, 5);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite, 0xAB);
  const uint32_t held = src.mr.lkey;
  // Queued, not sent: the loop has not run since.
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 7)), Status::kOk);
  ASSERT_EQ(loop.ep(0).deregister_memory(held), Status::kOk);
  std::vector<uint8_t> scratch(4096);
  const uint32_t other = register_past(loop.ep(0), held, scratch);
  held_work_failed(loop, 0, 7, dst, held, other);
}

// The same for a READ this end answers (READ-2): the region it reads from
// goes after its first response left, and a region given that lkey would
// have the rest sent from memory the application took back.
TEST(LkeyReuse, AnLkeyAReadBeingAnsweredHoldsIsNotGivenAgain) {  // MR-6, MR-5, READ-2
  Loop loop(cfg(97), cfg(98));
  auto [a, b] = loop.connect();
  (void)b;
  Buf remote(loop.ep(1), 64 * 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 64 * 4096, kAccessLocalWrite, 0);
  const uint32_t held = remote.mr.lkey;
  std::vector<uint8_t> scratch(4096);
  uint32_t other = 0;
  int responses_after = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1 || d.size() < 2 || d[1] != static_cast<uint8_t>(wire::Opcode::kReadResp)) return;
    if (other != 0) {
      ++responses_after;
      return;
    }
    ASSERT_EQ(loop.ep(1).deregister_memory(held), Status::kOk);
    other = register_past(loop.ep(1), held, scratch);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 64 * 4096, 4)),
            Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  ASSERT_NE(other, 0u);
  EXPECT_EQ(responses_after, 0);
  EXPECT_EQ(done[0].status, Status::kRemoteOperationError);
  EXPECT_TRUE(given_again(loop.ep(1), held, other));
}

// A slot spent while a receive holds one of its lkeys starts over as soon
// as that receive ends, by the count of work each slot keeps: the next
// registration takes it at generation 0. Before, held work was found by a
// scan of every held request and every slot, made only when a slot had
// been spent since the last one: the receive ended, the next registration
// took a new slot, and the spent one waited for some other slot to be
// spent (a million live regions, about 1,000 steps per registration).
TEST(LkeyReuse, ASpentSlotStartsOverAsSoonAsTheWorkNamingItEnds) {  // MR-6, MR-5
  Loop loop(cfg(93), cfg(94));
  auto [a, b] = loop.connect();
  Buf rbuf(loop.ep(1), 4096, kAccessLocalWrite, 0xAB);
  const uint32_t held = rbuf.mr.lkey;
  const uint32_t slot = held & kSlotBits;
  ASSERT_EQ(loop.ep(1).post_recv(b, RecvWr{9, rbuf.addr(), 4096, held}), Status::kOk);
  ASSERT_EQ(loop.ep(1).deregister_memory(held), Status::kOk);
  // The slot's generations after held's, the last one deregistered: spent.
  std::vector<uint8_t> scratch(4096);
  std::vector<uint32_t> given;
  come_and_go(loop.ep(1), scratch, kGenerations - 1 - (held >> 22), given);
  for (const uint32_t lkey : given) ASSERT_EQ(lkey & kSlotBits, slot) << "another slot";
  MemoryRegion kept;
  ASSERT_EQ(loop.ep(1).register_memory(scratch.data(), 64, 0, kept), Status::kOk);
  ASSERT_NE(kept.lkey & kSlotBits, slot) << "a spent slot given while held work names it";
  // The receive fails, its buffer gone (MR-5): nothing names the slot now.
  Buf src(loop.ep(0), 4096, 0, 5);
  ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 4096)), Status::kOk);
  work_failed(loop, 1, 9, rbuf);
  MemoryRegion next;
  ASSERT_EQ(loop.ep(1).register_memory(scratch.data(), 64, 0, next), Status::kOk);
  EXPECT_EQ(next.lkey, slot) << "the spent slot, free again, did not start over";
}

// The paths that end held work other than by completing it at the wire
// (MR-6): each must release its hold once. A missing release keeps the slot
// from ever coming round; a second one gives the lkey again while work still
// names it (MR-5). Each test posts work naming `held`, deregisters its
// region, spends the slot's generations (register_past: `held` given to
// none) and only then ends the work, after which `held` comes round.

// A WRITE (wr_id 7) posted on endpoint 0's connection `a` while it
// connects, its source region then gone and its slot spent (register_past).
struct ConnectingWrite {
  Loop loop;
  Buf src, dst;
  const uint32_t held;
  ConnId a;
  uint32_t other = 0;
  std::vector<uint8_t> scratch = std::vector<uint8_t>(4096);
  explicit ConnectingWrite(uint64_t seed)
      : loop(cfg(seed), cfg(seed + 1)),
        src(loop.ep(0), 4096, 0, 5),
        dst(loop.ep(1), 4096, kAccessRemoteWrite, 0xAB),
        held(src.mr.lkey) {
    EXPECT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
    EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 7)), Status::kOk);
    EXPECT_EQ(loop.ep(0).deregister_memory(held), Status::kOk);
    other = register_past(loop.ep(0), held, scratch);
  }
};

// A WRITE posted while connecting, flushed by close() (CONN-7).
TEST(LkeyReuse, AWriteFlushedByCloseWhileConnectingReleasesItsLkey) {  // MR-6, MR-5
  ConnectingWrite w(101);
  Loop& loop = w.loop;
  loop.ep(0).close(w.a, loop.now());
  const std::vector<Completion> done = loop.drain(0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 7u);
  EXPECT_EQ(done[0].status, Status::kFlushed);
  loop.run_until([] { return false; }, kPromptly);
  EXPECT_TRUE(untouched(w.dst, 0xAB));
  EXPECT_TRUE(given_again(loop.ep(0), w.held, w.other));
}

// A WRITE posted while connecting, its send queue moved into the
// connection's negotiated context when it establishes: the move hands the
// hold over, neither dropping it nor releasing it twice. Registrations made
// after the move, before the WRITE is looked at again, must not be given
// `held` either.
TEST(LkeyReuse, AWriteMovedByEstablishKeepsItsLkeyHeldUntilItCompletes) {  // MR-6, MR-5
  ConnectingWrite w(103);
  Loop& loop = w.loop;
  const uint32_t held = w.held;
  std::vector<Completion> done;
  std::vector<uint8_t> more(64);
  bool connected = false, checked = false;
  loop.before_poll = [&](int from) {
    if (from != 0 || checked) return;
    Event ev;
    while (loop.ep(0).poll_event(ev)) connected |= ev.kind == EventKind::kConnected;
    if (!connected) return;
    checked = true;
    for (const Completion& c : loop.drain(0)) done.push_back(c);
    EXPECT_TRUE(done.empty()) << "the WRITE ended before its hold could be looked at";
    std::vector<uint32_t> given;
    come_and_go(loop.ep(0), more, 2 * kGenerations, given);
    EXPECT_EQ(std::count(given.begin(), given.end(), held), 0)
        << "held given again after establish moved the WRITE";
  };
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  ASSERT_TRUE(checked);
  EXPECT_EQ(done[0].wr_id, 7u);
  EXPECT_EQ(done[0].status, Status::kLocalProtection);
  EXPECT_TRUE(untouched(w.dst, 0xAB));
  EXPECT_TRUE(given_again(loop.ep(0), held, w.other));
}

// A READ being answered, its responses sent and unacknowledged (the
// requester's ACKs lost), so its response job stays queued; the requester
// closes, and the responder, told by the DISCONNECT, flushes the job.
TEST(LkeyReuse, AReadJobFlushedByTheRequestersCloseReleasesItsLkey) {  // MR-6, MR-5, READ-2
  Loop loop(cfg(105), cfg(106));
  auto [a, b] = loop.connect();
  (void)b;
  Buf remote(loop.ep(1), 64 * 4096, kAccessRemoteRead, 0x22);
  Buf target(loop.ep(0), 64 * 4096, kAccessLocalWrite, 0);
  const uint32_t held = remote.mr.lkey;
  int responses = 0, responses_after = 0;
  bool gone = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 1 || d.size() < 2 || d[1] != static_cast<uint8_t>(wire::Opcode::kReadResp)) return;
    ++responses;
    responses_after += gone;
  };
  loop.drop = [](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d.size() >= 2 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(), remote.mr.rkey, 64 * 4096, 4)),
            Status::kOk);
  ASSERT_TRUE(loop.run_until([&] { return responses > 0; }, kPromptly));
  ASSERT_EQ(loop.ep(1).deregister_memory(held), Status::kOk);
  gone = true;
  std::vector<uint8_t> scratch(4096);
  const uint32_t other = register_past(loop.ep(1), held, scratch);
  loop.ep(0).close(a, loop.now());
  bool closed = false;
  ASSERT_TRUE(loop.run_until(
      [&] {
        Event ev;
        while (loop.ep(1).poll_event(ev)) closed |= ev.kind == EventKind::kClosed;
        return closed;
      },
      kPromptly));
  EXPECT_EQ(responses_after, 0);
  EXPECT_TRUE(given_again(loop.ep(1), held, other));
}

// A shared receive (PLACE-6) taken by connection A, the first packet of A's
// SEND placed and the rest lost; A fails (its peer's WRITE names a bad
// rkey) and gives the receive back; connection B's SEND then takes it, and
// it completes kLocalProtection, its buffer gone.
TEST(LkeyReuse, ASharedReceiveGivenBackByAFailedConnectionHoldsItsLkey) {  // MR-6, MR-5, PLACE-6
  EndpointConfig cb = cfg(108);
  cb.shared_rq_depth = 4;
  Loop loop(cfg(107), cb);
  auto [a1, b1] = loop.connect();
  auto [a2, b2] = loop.connect();
  ASSERT_TRUE(a2.valid() && b2.valid());
  Buf rbuf(loop.ep(1), 8192, kAccessLocalWrite, 0xAB);
  const uint32_t held = rbuf.mr.lkey;
  ASSERT_EQ(loop.ep(1).post_shared_recv(RecvWr{9, rbuf.addr(), 8192, held}), Status::kOk);
  int sends = 0;
  bool hold_back = true;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return hold_back && from == 0 && d.size() >= 2 &&
           d[1] == static_cast<uint8_t>(wire::Opcode::kSend) && ++sends > 1;
  };
  Buf src(loop.ep(0), 8192, 0, 5);
  ASSERT_EQ(loop.ep(0).post_send(a1, send_wr(src, 0, 8192, 1)), Status::kOk);
  loop.run_until([] { return false; }, 100'000);
  ASSERT_EQ(rbuf.bytes[0], 5) << "A took no shared receive";
  ASSERT_EQ(loop.ep(1).deregister_memory(held), Status::kOk);
  const std::vector<uint8_t> when_gone = rbuf.bytes;
  std::vector<uint8_t> scratch(4096);
  const uint32_t other = register_past(loop.ep(1), held, scratch);
  // A fails: a WRITE naming no region of its peer (PLACE-2).
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite, 0);
  SendWr bad = write_wr(src, dst, 4096, 2);
  bad.rkey ^= 0x5a5a;
  ASSERT_EQ(loop.ep(0).post_send(a1, bad), Status::kOk);
  bool failed = false;
  ASSERT_TRUE(loop.run_until(
      [&] {
        Event ev;
        while (loop.ep(1).poll_event(ev)) failed |= ev.kind == EventKind::kError && ev.conn == b1;
        return failed;
      },
      kPromptly));
  std::vector<Completion> done;
  for (const Completion& c : loop.drain(1)) done.push_back(c);
  ASSERT_TRUE(done.empty()) << "the shared receive ended with A";
  std::vector<uint32_t> given;
  come_and_go(loop.ep(1), scratch, 2 * kGenerations, given);
  EXPECT_EQ(std::count(given.begin(), given.end(), held), 0)
      << "held given again while the shared queue holds the receive";
  hold_back = false;
  Buf src2(loop.ep(0), 4096, 0, 7);
  ASSERT_EQ(loop.ep(0).post_send(a2, send_wr(src2, 0, 4096, 3)), Status::kOk);
  ASSERT_TRUE(loop.run_until_completions(1, 1, done, kPromptly));
  EXPECT_EQ(done[0].wr_id, 9u);
  EXPECT_EQ(done[0].status, Status::kLocalProtection);
  EXPECT_EQ(rbuf.bytes, when_gone) << "written after its region went";
  EXPECT_TRUE(given_again(loop.ep(1), held, other));
}

// A WRITE queued behind one that fills the window, on a connection whose
// peer falls silent: the peer timeout (PATH-7) fails the connection and
// flushes the queued WRITE, never sent.
TEST(LkeyReuse, AWriteFlushedByAPeerTimeoutReleasesItsLkey) {  // MR-6, MR-5, PATH-7
  Loop loop(cfg(109), cfg(110));
  auto [a, b] = loop.connect();
  (void)b;
  constexpr uint32_t kBig = 4u << 20;  // far more packets than the window
  Buf big(loop.ep(0), kBig, 0, 1);
  Buf bigdst(loop.ep(1), kBig, kAccessRemoteWrite, 0);
  Buf src(loop.ep(0), 4096, 0, 5);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite, 0xAB);
  const uint32_t held = src.mr.lkey;
  loop.drop = [](int from, const std::vector<uint8_t>&) { return from == 1; };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(big, bigdst, kBig, 6)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 7)), Status::kOk);
  ASSERT_EQ(loop.ep(0).deregister_memory(held), Status::kOk);
  std::vector<uint8_t> scratch(4096);
  const uint32_t other = register_past(loop.ep(0), held, scratch);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 2, done, 4'000'000'000ull));
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[1].wr_id, 7u);
  EXPECT_EQ(done[1].status, Status::kFlushed);
  EXPECT_TRUE(untouched(dst, 0xAB));
  EXPECT_TRUE(given_again(loop.ep(0), held, other));
}

// A WRITE whose every packet left before its region went completes kOk
// when acknowledged: that completion releases its hold.
TEST(LkeyReuse, AWriteAcknowledgedAfterItsRegionWentReleasesItsLkey) {  // MR-6, MR-5
  Loop loop(cfg(111), cfg(112));
  auto [a, b] = loop.connect();
  (void)b;
  Buf src(loop.ep(0), 4096, 0, 5);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite, 0xAB);
  const uint32_t held = src.mr.lkey;
  bool sent = false;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    sent |= from == 0 && d.size() >= 2 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 7)), Status::kOk);
  ASSERT_TRUE(loop.run_until([&] { return sent; }, kPromptly));
  // Its one packet in flight, unacknowledged.
  ASSERT_EQ(loop.ep(0).deregister_memory(held), Status::kOk);
  std::vector<uint8_t> scratch(4096);
  const uint32_t other = register_past(loop.ep(0), held, scratch);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done, kPromptly));
  EXPECT_EQ(done[0].wr_id, 7u);
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_TRUE(untouched(dst, 5));
  EXPECT_TRUE(given_again(loop.ep(0), held, other));
}

// How a connection holding work ends: each way to its end (destroy_connection)
// that the work can reach. The connection's end releases nothing itself: the
// flush before it does (flush_all), or there was no work.
enum class End {
  kConnectTimeout,   // CONN-2: its requests unanswered
  kRejected,         // CONN-4: the responder refuses
  kClosed,           // CONN-7: closed by the application when established
  kClosedByThePeer,  // CONN-7: the peer's DISCONNECT
};

// A connection of one endpoint holds a WRITE queued and a receive posted,
// both naming `held` (one region, 0xAB), which then goes, its slot spent
// (register_past); `end` ends the connection. Both complete, flushed or
// failed with the connection, nothing written, and `held` comes round.
// Where the peer closes, the receive alone: a WRITE would fail the
// connection first, its region gone (MR-5).
void work_ends_with_the_connection(uint64_t seed, End end) {
  SCOPED_TRACE(static_cast<int>(end));
  EndpointConfig responder = cfg(seed + 1);
  responder.accept_incoming = end != End::kRejected;
  Loop loop(cfg(seed), responder);
  const bool connecting = end == End::kConnectTimeout || end == End::kRejected;
  if (end == End::kConnectTimeout)
    loop.drop = [](int, const std::vector<uint8_t>&) { return true; };
  ConnId a, b;
  if (connecting) {
    ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  } else {
    std::tie(a, b) = loop.connect();
    ASSERT_TRUE(a.valid() && b.valid());
  }
  const int at = end == End::kClosedByThePeer ? 1 : 0;
  const ConnId conn = at == 0 ? a : b;
  Buf buf(loop.ep(at), 4096, kAccessLocalWrite, 0xAB);
  Buf dst(loop.ep(1 - at), 4096, kAccessRemoteWrite, 0xAB);
  const uint32_t held = buf.mr.lkey;
  const size_t works = at == 0 ? 2 : 1;
  if (at == 0) {
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(buf, dst, 4096, 7)), Status::kOk);
  }
  ASSERT_EQ(loop.ep(at).post_recv(conn, RecvWr{8, buf.addr(), 4096, held}), Status::kOk);
  ASSERT_EQ(loop.ep(at).deregister_memory(held), Status::kOk);
  std::vector<uint8_t> scratch(4096);
  const uint32_t other = register_past(loop.ep(at), held, scratch);
  if (end == End::kClosed || end == End::kClosedByThePeer) loop.ep(0).close(a, loop.now());
  bool gone = false;
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until(
      [&] {
        Event ev;
        while (loop.ep(at).poll_event(ev))
          gone |= ev.conn == conn &&
                  (ev.kind == EventKind::kClosed || ev.kind == EventKind::kConnectFailed);
        for (const Completion& c : loop.drain(at)) done.push_back(c);
        return gone;
      },
      kPromptly));
  EXPECT_EQ(done.size(), works);
  for (const Completion& c : done) EXPECT_NE(c.status, Status::kOk) << "wr_id " << c.wr_id;
  EXPECT_TRUE(untouched(buf, 0xAB));
  EXPECT_TRUE(untouched(dst, 0xAB));
  EXPECT_TRUE(given_again(loop.ep(at), held, other));
}

TEST(LkeyReuse, WorkFlushedByAConnectTimeoutReleasesItsLkeys) {  // MR-6, CONN-2
  work_ends_with_the_connection(113, End::kConnectTimeout);
}

TEST(LkeyReuse, WorkFlushedByARejectReleasesItsLkeys) {  // MR-6, CONN-4
  work_ends_with_the_connection(115, End::kRejected);
}

TEST(LkeyReuse, WorkFlushedByACloseReleasesItsLkeys) {  // MR-6, CONN-7
  work_ends_with_the_connection(117, End::kClosed);
}

TEST(LkeyReuse, AReceiveFlushedByThePeersCloseReleasesItsLkey) {  // MR-6, CONN-7
  work_ends_with_the_connection(119, End::kClosedByThePeer);
}

}  // namespace
}  // namespace metaroce::test
