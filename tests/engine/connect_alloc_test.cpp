// An endpoint short of memory when a CONNECT_REQ comes (many incoming
// connects) refuses it with CONNECT_REJECT kResourceExhausted (CONN-4)
// rather than throwing std::bad_alloc out of handle_datagram into the
// driver's receive loop, and nothing of it is left half made: the same
// request, once memory is back, connects. The same for the engine's other
// calls once the endpoint is open: connect, the posts (a connection's
// contexts, the completion's room, the shared queue's growth) and memory
// registration say kResourceExhausted, nothing queued; a packet whose
// handling finds no memory is dropped as if lost. This executable replaces
// the global operator new with one that fails on demand, on the calling
// thread only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace {
// Allocations left to succeed before every later one fails; -1: no limit.
// Swept from 0 up, it fails each allocation of a call in turn.
thread_local long t_allowed = -1;
thread_local size_t t_bytes = 0;  // bytes asked for, every allocation
// Not inlined into the operators: GCC's -Wmismatched-new-delete would see
// free() of operator new's pointer.
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
}  // namespace

void* operator new(std::size_t n) {
  if (t_allowed == 0) throw std::bad_alloc();
  if (t_allowed > 0) --t_allowed;
  t_bytes += n;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }

namespace metaroce::test {
namespace {

// Runs f with `allowed` allocations left to succeed (0: every one fails);
// true if std::bad_alloc came out of it.
template <typename F>
bool bad_alloc_escapes(long allowed, F&& f) {
  t_allowed = allowed;
  bool threw = false;
  try {
    f();
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  t_allowed = -1;
  return threw;
}

// CONN-4's two sweeps below: a table of one connection (max_connections 1),
// whose slot kRounds connections end in before the one under test; 32 such
// rounds outgrew the room create_connection had made.
constexpr int kRounds = 32;
EndpointConfig one_slot(uint64_t seed) {
  EndpointConfig c = cfg(seed);
  c.max_connections = 1;
  return c;
}

TEST(ConnectAlloc, ARequestMetByAFailedAllocationIsRefusedNotThrown) {
  Loop loop(cfg(4411), cfg(4412));
  ConnId a;
  const std::vector<uint8_t> req = connect_request_of(loop, a);
  ASSERT_FALSE(req.empty());
  const RxDatagram dg{loop.addr(0), 1234, false, req};

  // The queue of replies grows on its first REJECT: one first, for a request
  // offering an mtu below 256 (CONN-3), so that the refusal below needs none.
  std::vector<uint8_t> low = req;
  low[wire::kBaseHeaderSize + 8] = 0;
  low[wire::kBaseHeaderSize + 9] = 200;
  ASSERT_GT(wire::seal(low, wire::kBaseHeaderSize + wire::kConnectBodySize, 0), 0u);
  loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), 1234, false, low}, loop.now());
  ASSERT_EQ(sent_packets(loop.ep(1), loop.now()).size(), 1u);

  EXPECT_FALSE(bad_alloc_escapes(0, [&] { loop.ep(1).handle_datagram(dg, loop.now()); }))
      << "std::bad_alloc left handle_datagram";
  auto out = sent_packets(loop.ep(1), loop.now());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bh.opcode, wire::Opcode::kConnectReject);
  EXPECT_EQ(out[0].connect.code, static_cast<uint8_t>(Status::kResourceExhausted));
  EXPECT_EQ(loop.ep(1).endpoint_stats().connects_refused, 2u);
  Event ev;
  EXPECT_FALSE(loop.ep(1).poll_event(ev));

  // Memory back: the same request connects, as if the first had been lost.
  loop.ep(1).handle_datagram(dg, loop.now());
  out = sent_packets(loop.ep(1), loop.now());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bh.opcode, wire::Opcode::kConnectAccept);
  ASSERT_TRUE(loop.ep(1).poll_event(ev));
  EXPECT_EQ(ev.kind, EventKind::kAccepted);

  // connect() short of memory: kResourceExhausted, nothing thrown.
  Status s = Status::kOk;
  ConnId g;
  EXPECT_FALSE(bad_alloc_escapes(0, [&] { s = loop.ep(1).connect(loop.addr(0), loop.now(), g); }))
      << "std::bad_alloc left connect";
  EXPECT_EQ(s, Status::kResourceExhausted);
}

// Every allocation connect() makes, failed in turn, each on a fresh
// endpoint (the connection, the table's room for it, the nonce's index
// entry): kResourceExhausted, nothing thrown and nothing left of it (no
// event, nothing sent), and the next connect() with memory back connects.
// The nonce's entry threw out of connect() before.
TEST(ConnectAlloc, EachFailedAllocationOfConnectIsResourceExhausted) {
  for (long allowed = 0;; ++allowed) {
    ASSERT_LT(allowed, 1000) << "connect() never succeeded";
    Loop loop(cfg(4413), cfg(4414));
    Status s = Status::kOk;
    ConnId a;
    ASSERT_FALSE(
        bad_alloc_escapes(allowed, [&] { s = loop.ep(0).connect(loop.addr(1), loop.now(), a); }))
        << "std::bad_alloc left connect() at allocation " << allowed;
    if (s == Status::kOk) {
      EXPECT_GT(allowed, 0);
      break;
    }
    ASSERT_EQ(s, Status::kResourceExhausted) << "at allocation " << allowed;
    Event ev;
    EXPECT_FALSE(loop.ep(0).poll_event(ev)) << "at allocation " << allowed;
    EXPECT_TRUE(sent_packets(loop.ep(0), loop.now()).empty()) << "at allocation " << allowed;
    ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
    ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).poll_event(ev); }));
    EXPECT_EQ(ev.kind, EventKind::kConnected) << "at allocation " << allowed;
  }
}

// CONN-4: a connection closed before any poll (connect, then close while
// CONNECTING: it ends at once) left its entries in the round-robin of
// connections with something to send and in the deadlines to compute, and
// the next connection in its slot (the table full at max_connections 1) was
// entered again beside them: 32 such rounds outgrew the room create_connection
// had made, and the 33rd connect() grew both, throwing std::bad_alloc with
// its connection half made when that failed. Each allocation of the 33rd
// failed in turn: kResourceExhausted, nothing thrown, or kOk; and it connects.
TEST(ConnectAlloc, ConnectsClosedBeforeAnyPollLeaveNoRoomToOutgrow) {
  const EndpointConfig one = one_slot(4429);
  for (long allowed = 0;; ++allowed) {
    ASSERT_LT(allowed, 1000) << "connect() never succeeded";
    Loop loop(one, cfg(4430));
    ConnId a;
    for (int i = 0; i < kRounds; ++i) {
      ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk) << "round " << i;
      loop.ep(0).close(a, loop.now());
    }
    Status s = Status::kOk;
    ASSERT_FALSE(
        bad_alloc_escapes(allowed, [&] { s = loop.ep(0).connect(loop.addr(1), loop.now(), a); }))
        << "std::bad_alloc left connect() at allocation " << allowed;
    Event ev;
    for (int i = 0; i < kRounds; ++i) {
      ASSERT_TRUE(loop.ep(0).poll_event(ev));
      EXPECT_EQ(ev.kind, EventKind::kClosed);
    }
    if (s != Status::kOk) {
      ASSERT_EQ(s, Status::kResourceExhausted) << "at allocation " << allowed;
      EXPECT_FALSE(loop.ep(0).poll_event(ev)) << "at allocation " << allowed;
      continue;
    }
    ASSERT_TRUE(loop.run_until([&] { return loop.ep(0).poll_event(ev); }));
    EXPECT_EQ(ev.kind, EventKind::kConnected);
    EXPECT_EQ(ev.conn, a);
    break;
  }
}

// CONN-4, the packet path's form of the case above: with the table full
// (max_connections 1), a DISCONNECT ends the responder's connection and the
// next CONNECT_REQ takes its slot in the same receive batch, before the
// driver polls to send or asks next_timeout(). The ended connection's
// entries in the round-robin (its ACCEPT unsent) and in the deadlines to
// compute stayed beside the new one's: 32 such rounds outgrew the room
// create_connection had made, and the 33rd request grew both outside its
// try, so a failed allocation there threw std::bad_alloc out of
// handle_datagram. Each allocation of the 33rd fails in turn: refused or
// accepted, nothing thrown; and once accepted its ACCEPT goes out.
TEST(ConnectAlloc, DisconnectsAndRequestsInOneBatchLeaveNoRoomToOutgrow) {
  const EndpointConfig one = one_slot(4432);
  for (long allowed = 0;; ++allowed) {
    ASSERT_LT(allowed, 1000) << "the request was never accepted";
    Loop loop(cfg(4431), one);
    auto receive = [&](const std::vector<uint8_t>& d) {
      loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), 1234, false, d}, loop.now());
    };
    for (int i = 0; i < kRounds; ++i) {
      ConnId a;
      const std::vector<uint8_t> req = connect_request_of(loop, a);
      ASSERT_FALSE(req.empty());
      receive(req);
      Event ev;
      ASSERT_TRUE(loop.ep(1).poll_event(ev)) << "round " << i;
      ASSERT_EQ(ev.kind, EventKind::kAccepted) << "round " << i;
      std::vector<uint8_t> d(wire::kBaseHeaderSize + wire::kDisconnectBodySize + wire::kIcrcSize);
      wire::BaseHeader bh;
      bh.opcode = wire::Opcode::kDisconnect;
      bh.dst_conn = ev.conn.v;
      d.resize(wire::seal(d, wire::write_disconnect(d, bh, wire::DisconnectBody{a.v, 0}), 0));
      receive(d);
      ASSERT_TRUE(loop.ep(1).poll_event(ev)) << "round " << i;
      ASSERT_EQ(ev.kind, EventKind::kClosed) << "round " << i;
    }
    ConnId a;
    const std::vector<uint8_t> req = connect_request_of(loop, a);
    ASSERT_FALSE(req.empty());
    ASSERT_FALSE(bad_alloc_escapes(allowed, [&] { receive(req); }))
        << "std::bad_alloc left handle_datagram at allocation " << allowed;
    Event ev;
    if (!loop.ep(1).poll_event(ev)) continue;  // refused: memory failed it
    EXPECT_EQ(ev.kind, EventKind::kAccepted);
    int accepts = 0;
    for (const wire::Packet& p : sent_packets(loop.ep(1), loop.now()))
      if (p.bh.opcode == wire::Opcode::kConnectAccept) {
        ++accepts;
        EXPECT_EQ(p.bh.dst_conn, a.v);
      }
    EXPECT_EQ(accepts, 1);
    break;
  }
}

// PLACE-6: the shared receive queue grows as receives are posted. Its ring
// of bit_ceil(shared_rq_depth) entries was allocated at open: about 800 MB
// at the largest depth, for an application that might post a few.
TEST(SharedRecvAlloc, OpenAtTheLargestDepthAllocatesLittle) {
  EndpointConfig c = cfg(4415);
  c.shared_rq_depth = kMaxSharedRqDepth;
  const size_t before = t_bytes;
  Endpoint ep(c);
  const size_t opened = t_bytes - before;
  EXPECT_LT(opened, size_t{16} << 20) << opened << " bytes at open";
  EXPECT_EQ(ep.config().shared_rq_depth, kMaxSharedRqDepth);
}

// A shared receive whose post finds no memory to grow the queue is refused
// kResourceExhausted, nothing thrown, and the receives posted before it stay,
// in their order: posted again with memory back, it is the last one taken.
TEST(SharedRecvAlloc, APostThatCannotGrowTheQueueIsRefusedAndLosesNothing) {
  EndpointConfig shared = cfg(4417);
  shared.shared_rq_depth = 64;
  Loop loop(cfg(4416), shared);
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  constexpr uint32_t kLen = 256;
  constexpr uint64_t kPosts = 17;  // one past the ring's first size
  Buf src(loop.ep(0), kPosts * kLen, 0);
  Buf dst(loop.ep(1), kPosts * kLen, kAccessLocalWrite);
  const auto recv = [&](uint64_t i) { return RecvWr{i, dst.addr(i * kLen), kLen, dst.mr.lkey}; };
  for (uint64_t i = 0; i + 1 < kPosts; ++i)
    ASSERT_EQ(loop.ep(1).post_shared_recv(recv(i)), Status::kOk);
  Status s = Status::kOk;
  ASSERT_FALSE(bad_alloc_escapes(0, [&] { s = loop.ep(1).post_shared_recv(recv(kPosts - 1)); }))
      << "std::bad_alloc left post_shared_recv";
  EXPECT_EQ(s, Status::kResourceExhausted);
  ASSERT_EQ(loop.ep(1).post_shared_recv(recv(kPosts - 1)), Status::kOk);
  for (uint64_t i = 0; i < kPosts; ++i)
    ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, i * kLen, kLen, i)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(1, kPosts, done));
  ASSERT_EQ(done.size(), kPosts);
  for (uint64_t i = 0; i < kPosts; ++i) {
    EXPECT_EQ(done[i].status, Status::kOk);
    EXPECT_EQ(done[i].wr_id, i);
    EXPECT_EQ(done[i].byte_len, kLen);
  }
}

// The datagram endpoint `from` sends next, as the other end receives it.
RxDatagram next_datagram(Loop& loop, int from, std::vector<uint8_t>& bytes) {
  bytes.assign(70000, 0);
  TxDatagram tx;
  EXPECT_TRUE(loop.ep(from).poll_transmit(loop.now(), bytes, tx));
  bytes.resize(tx.len);
  return RxDatagram{loop.addr(from), tx.entropy, false, bytes};
}

// CONN-8, CONN-3: a WRITE posted while connecting whose context finds no
// memory for the agreed window when the ACCEPT comes fails the connection
// kResourceExhausted (a local fault), and the close that follows gives the
// peer that code, 0x4a, in its DISCONNECT's reason. Each allocation of the
// ACCEPT's handling fails in turn until one lands there.
TEST(ConnectAlloc, AConnectionFailedForMemoryAtTheAcceptClosesWithReason0x4a) {
  bool seen = false;
  for (long allowed = 0; !seen; ++allowed) {
    ASSERT_LT(allowed, 1000) << "no allocation failed the connection kResourceExhausted";
    Loop loop(cfg(4433), cfg(4434));
    ConnId a;
    const std::vector<uint8_t> req = connect_request_of(loop, a);
    ASSERT_FALSE(req.empty());
    Buf src(loop.ep(0), 4096, 0, 0x5a);
    Buf dst(loop.ep(1), 4096, kAccessRemoteWrite | kAccessLocalWrite);
    ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 1)), Status::kOk);
    loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), 1234, false, req}, loop.now());
    std::vector<uint8_t> accept(70000);
    TxDatagram tx;
    ASSERT_TRUE(loop.ep(1).poll_transmit(loop.now(), accept, tx));
    accept.resize(tx.len);
    ASSERT_FALSE(bad_alloc_escapes(allowed,
                                   [&] {
                                     loop.ep(0).handle_datagram(
                                         RxDatagram{loop.addr(1), tx.entropy, false, accept},
                                         loop.now());
                                   }))
        << "std::bad_alloc left handle_datagram at allocation " << allowed;
    Event ev;
    bool failed = false;
    while (loop.ep(0).poll_event(ev))
      failed |= ev.kind == EventKind::kError && ev.status == Status::kResourceExhausted;
    if (!failed) continue;
    seen = true;
    loop.ep(0).close(a, loop.now());
    int disconnects = 0;
    for (const wire::Packet& p : sent_packets(loop.ep(0), loop.now()))
      if (p.bh.opcode == wire::Opcode::kDisconnect) {
        ++disconnects;
        EXPECT_EQ(p.disconnect.reason, static_cast<uint8_t>(Status::kResourceExhausted));
      }
    EXPECT_EQ(disconnects, 1) << "at allocation " << allowed;
  }
}

// A post takes room for its completion in the endpoint's queue, and a
// connection its send or receive context on first use. Each of those
// allocations failed in turn (on a fresh pair of endpoints): post_send and
// post_recv say kResourceExhausted, nothing queued, nothing thrown, and with
// memory back the same work goes through.
TEST(ContextAlloc, EachFailedAllocationOfAPostIsResourceExhausted) {
  bool send_done = false, recv_done = false;
  for (long allowed = 0; !(send_done && recv_done); ++allowed) {
    ASSERT_LT(allowed, 1000) << "the posts never succeeded";
    Loop loop(cfg(4418), cfg(4419));
    auto [a, b] = loop.connect();
    ASSERT_TRUE(a.valid() && b.valid());
    Buf src(loop.ep(0), 4096, 0, 0x5a);
    Buf dst(loop.ep(1), 4096, kAccessRemoteWrite | kAccessLocalWrite);
    Status s = Status::kOk;
    ASSERT_FALSE(bad_alloc_escapes(
        allowed, [&] { s = loop.ep(0).post_send(a, write_wr(src, dst, 4096, 1)); }))
        << "std::bad_alloc left post_send at allocation " << allowed;
    send_done = s == Status::kOk;
    if (!send_done) {
      ASSERT_EQ(s, Status::kResourceExhausted) << "at allocation " << allowed;
      ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 1)), Status::kOk);
    }
    std::vector<Completion> done;
    ASSERT_TRUE(loop.run_until_completions(0, 1, done));
    EXPECT_EQ(done.size(), 1u) << "at allocation " << allowed;
    EXPECT_EQ(done[0].status, Status::kOk);
    EXPECT_EQ(src.bytes, dst.bytes);

    const RecvWr recv{7, dst.addr(), 4096, dst.mr.lkey};
    ASSERT_FALSE(bad_alloc_escapes(allowed, [&] { s = loop.ep(1).post_recv(b, recv); }))
        << "std::bad_alloc left post_recv at allocation " << allowed;
    recv_done = s == Status::kOk;
    if (!recv_done) {
      ASSERT_EQ(s, Status::kResourceExhausted) << "at allocation " << allowed;
      ASSERT_EQ(loop.ep(1).post_recv(b, recv), Status::kOk);
    }
    ASSERT_EQ(loop.ep(0).post_send(a, send_wr(src, 0, 100, 2)), Status::kOk);
    done.clear();
    ASSERT_TRUE(loop.run_until_completions(1, 1, done));
    EXPECT_EQ(done.size(), 1u) << "at allocation " << allowed;
    EXPECT_EQ(done[0].wr_id, 7u);
    EXPECT_EQ(done[0].byte_len, 100u);
  }
}

// The completion an ACK releases takes no memory: its room was taken when
// the WRITE was posted. It grew the queue there, on the packet path, and
// std::bad_alloc left handle_datagram.
TEST(ContextAlloc, ACompletionAnAckReleasesAllocatesNothing) {
  Loop loop(cfg(4424), cfg(4425));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 4096, 0, 0x3d);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 5)), Status::kOk);
  std::vector<uint8_t> data, ack;
  loop.ep(1).handle_datagram(next_datagram(loop, 0, data), loop.now());
  loop.pass_time(1'000'000);  // past the ACK's delay (ACK-5)
  loop.ep(1).handle_timeout(loop.now());
  const RxDatagram dg = next_datagram(loop, 1, ack);
  ASSERT_EQ(ack.size() > 1 ? ack[1] : 0, static_cast<uint8_t>(wire::Opcode::kAck));
  EXPECT_FALSE(bad_alloc_escapes(0, [&] { loop.ep(0).handle_datagram(dg, loop.now()); }))
      << "std::bad_alloc left handle_datagram";
  const std::vector<Completion> done = loop.drain(0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 5u);
  EXPECT_EQ(done[0].status, Status::kOk);
}

// READ-6: a responder that reports READs served queues the report in room
// made when the endpoint was, so the ACK that completes a READ's responses
// allocates nothing on the packet path, and the report is there.
TEST(ContextAlloc, AnAckThatServesAReadAllocatesNothing) {  // READ-6
  EndpointConfig cb = cfg(4427);
  cb.read_served_events = true;
  Loop loop(cfg(4426), cb);
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf remote(loop.ep(1), 4096, kAccessRemoteRead, 0x5a);
  Buf target(loop.ep(0), 4096, kAccessLocalWrite, 0);
  ASSERT_EQ(loop.ep(0).post_send(a, read_wr(target, remote.addr(0), remote.mr.rkey, 4096, 7)),
            Status::kOk);
  std::vector<uint8_t> req, resp, ack;
  loop.ep(1).handle_datagram(next_datagram(loop, 0, req), loop.now());
  // Everything the responder sends (the response, any ACK) to the requester.
  for (TxDatagram tx; resp.assign(70000, 0), loop.ep(1).poll_transmit(loop.now(), resp, tx);) {
    resp.resize(tx.len);
    loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), tx.entropy, false, resp}, loop.now());
  }
  ASSERT_EQ(target.bytes, remote.bytes);
  // The requester's ACK of the response, at once or after its delay (ACK-5);
  // what it sends before that (a PROBE) goes to the responder as it is.
  bool acked = false;
  for (int i = 0; i < 16 && !acked; ++i) {
    ack.assign(70000, 0);
    TxDatagram tx;
    if (!loop.ep(0).poll_transmit(loop.now(), ack, tx)) {
      loop.pass_time(100'000);
      loop.ep(0).handle_timeout(loop.now());
      continue;
    }
    ack.resize(tx.len);
    const RxDatagram dg{loop.addr(0), tx.entropy, false, ack};
    acked = ack.size() > 1 && ack[1] == static_cast<uint8_t>(wire::Opcode::kAck);
    if (!acked) {
      loop.ep(1).handle_datagram(dg, loop.now());
      continue;
    }
    EXPECT_FALSE(bad_alloc_escapes(0, [&] { loop.ep(1).handle_datagram(dg, loop.now()); }))
        << "std::bad_alloc left handle_datagram";
  }
  ASSERT_TRUE(acked) << "no ACK of the READ's response";
  ReadServed served;
  ASSERT_TRUE(loop.ep(1).poll_read_served(served));
  EXPECT_EQ(served.conn, b);
  EXPECT_EQ(served.addr, remote.addr(0));
  EXPECT_EQ(served.length, 4096u);
  EXPECT_EQ(loop.ep(1).endpoint_stats().reads_served_dropped, 0u);
}

// The first data packet of a connection that holds no receive context, met by
// a failed allocation, is dropped as if lost, not thrown out of
// handle_datagram: its resend lands, and the WRITE completes.
TEST(ContextAlloc, ADataPacketWithNoMemoryForItsContextIsDroppedAndResent) {
  Loop loop(cfg(4420), cfg(4421));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 4096, 0, 0x6b);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  std::vector<uint8_t> bytes;
  const RxDatagram dg = next_datagram(loop, 0, bytes);
  ASSERT_EQ(bytes.size() > 1 ? bytes[1] : 0, static_cast<uint8_t>(wire::Opcode::kWrite));
  EXPECT_FALSE(bad_alloc_escapes(0, [&] { loop.ep(1).handle_datagram(dg, loop.now()); }))
      << "std::bad_alloc left handle_datagram";
  EXPECT_EQ(loop.ep(1).conn_stats(b)->data_packets_received, 0u);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(src.bytes, dst.bytes);
}

// Work posted while connecting is queued in contexts sized for the
// configured window; the ACCEPT's agreed one takes new ones. With no memory
// for them: the connection fails kResourceExhausted (after kConnected) and
// the work completes kFlushed, rather than std::bad_alloc out of
// handle_datagram.
TEST(ContextAlloc, AnAcceptWithNoMemoryForTheAgreedContextsFailsTheConnection) {
  Loop loop(cfg(4422), cfg(4423));
  ConnId a;
  std::vector<uint8_t> req = connect_request_of(loop, a);
  ASSERT_FALSE(req.empty());
  Buf src(loop.ep(0), 4096, 0, 0x7c);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096, 9)), Status::kOk);
  loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), 1234, false, req}, loop.now());
  std::vector<uint8_t> bytes;
  const RxDatagram accept = next_datagram(loop, 1, bytes);
  EXPECT_FALSE(bad_alloc_escapes(0, [&] { loop.ep(0).handle_datagram(accept, loop.now()); }))
      << "std::bad_alloc left handle_datagram";
  Event ev;
  ASSERT_TRUE(loop.ep(0).poll_event(ev));
  EXPECT_EQ(ev.kind, EventKind::kConnected);
  ASSERT_TRUE(loop.ep(0).poll_event(ev));
  EXPECT_EQ(ev.kind, EventKind::kError);
  EXPECT_EQ(ev.status, Status::kResourceExhausted);
  const std::vector<Completion> done = loop.drain(0);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].wr_id, 9u);
  EXPECT_EQ(done[0].status, Status::kFlushed);
}

// A registration takes table room (the slot, its generation, a free-list
// entry for its deregistration) and, every so often, a larger rkey index.
// Each of those allocations failed in turn, at the registration that grows
// both: kResourceExhausted, nothing thrown, the regions before it intact;
// with memory back it registers. Deregistration then allocates nothing. A
// failed rehash lost the whole index before, and std::bad_alloc left both.
TEST(MrAlloc, EachFailedAllocationOfARegistrationIsResourceExhausted) {
  constexpr size_t kBefore = 32;  // the 33rd fills the first index past half
  for (long allowed = 0;; ++allowed) {
    ASSERT_LT(allowed, 1000) << "register_memory never succeeded";
    Endpoint ep(cfg(4426));
    std::vector<uint8_t> bytes(kBefore + 1);
    std::vector<MemoryRegion> mrs(kBefore + 1);
    for (size_t i = 0; i < kBefore; ++i)
      ASSERT_EQ(ep.register_memory(&bytes[i], 1, kAccessRemoteWrite, mrs[i]), Status::kOk);
    Status s = Status::kOk;
    ASSERT_FALSE(bad_alloc_escapes(
        allowed,
        [&] { s = ep.register_memory(&bytes[kBefore], 1, kAccessRemoteWrite, mrs[kBefore]); }))
        << "std::bad_alloc left register_memory at allocation " << allowed;
    const bool done = s == Status::kOk;
    if (!done) {
      ASSERT_EQ(s, Status::kResourceExhausted) << "at allocation " << allowed;
      ASSERT_EQ(ep.register_memory(&bytes[kBefore], 1, kAccessRemoteWrite, mrs[kBefore]),
                Status::kOk);
    }
    for (size_t i = 0; i <= kBefore; ++i) {
      uint8_t* p = nullptr;
      ASSERT_EQ(ep.local_view(mrs[i].rkey, mrs[i].addr, 1, kAccessRemoteWrite, p), Status::kOk)
          << "region " << i << " at allocation " << allowed;
      EXPECT_EQ(p, &bytes[i]);
    }
    for (size_t i = 0; i <= kBefore; ++i) {
      ASSERT_FALSE(bad_alloc_escapes(0, [&] { s = ep.deregister_memory(mrs[i].lkey); }))
          << "std::bad_alloc left deregister_memory";
      EXPECT_EQ(s, Status::kOk);
    }
    if (done) {
      EXPECT_GT(allowed, 0);
      break;
    }
  }
}

// A reply to a packet of no connection (here a REJECT, CONN-4) that finds no
// memory to grow the queue of such replies is dropped, as if lost, not
// thrown out of handle_datagram: the requester repeats its request, and the
// repeat is answered.
TEST(ConnectAlloc, AReplyWithNoMemoryToQueueItIsDroppedNotThrown) {
  EndpointConfig refusing = cfg(4428);
  refusing.accept_incoming = false;
  Loop loop(cfg(4427), refusing);
  ConnId a;
  const std::vector<uint8_t> req = connect_request_of(loop, a);
  ASSERT_FALSE(req.empty());
  const RxDatagram dg{loop.addr(0), 1234, false, req};
  EXPECT_FALSE(bad_alloc_escapes(0, [&] { loop.ep(1).handle_datagram(dg, loop.now()); }))
      << "std::bad_alloc left handle_datagram";
  EXPECT_TRUE(sent_packets(loop.ep(1), loop.now()).empty());
  loop.ep(1).handle_datagram(dg, loop.now());
  const auto out = sent_packets(loop.ep(1), loop.now());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].bh.opcode, wire::Opcode::kConnectReject);
  EXPECT_EQ(out[0].connect.code, static_cast<uint8_t>(Status::kConnectRefused));
}

}  // namespace
}  // namespace metaroce::test
