// An endpoint short of memory when a CONNECT_REQ comes (many incoming
// connects) refuses it with CONNECT_REJECT kResourceExhausted (CONN-4)
// rather than throwing std::bad_alloc out of handle_datagram into the
// driver's receive loop, and nothing of it is left half made: the same
// request, once memory is back, connects. connect() says kResourceExhausted
// likewise. This executable replaces the global operator new with one that
// fails on demand, on the calling thread only.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace {
thread_local bool t_fail = false;
// Allocations left to succeed before every later one fails; -1: no limit.
// Swept from 0 up, it fails each allocation of a call in turn.
thread_local long t_allowed = -1;
// Not inlined into the operators: GCC's -Wmismatched-new-delete would see
// free() of operator new's pointer.
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
}  // namespace

void* operator new(std::size_t n) {
  if (t_fail || t_allowed == 0) throw std::bad_alloc();
  if (t_allowed > 0) --t_allowed;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }

namespace metaroce::test {
namespace {

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

  bool threw = false;
  t_fail = true;
  try {
    loop.ep(1).handle_datagram(dg, loop.now());
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  t_fail = false;
  EXPECT_FALSE(threw) << "std::bad_alloc left handle_datagram";
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
  t_fail = true;
  try {
    s = loop.ep(1).connect(loop.addr(0), loop.now(), g);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  t_fail = false;
  EXPECT_FALSE(threw) << "std::bad_alloc left connect";
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
    bool threw = false;
    t_allowed = allowed;
    try {
      s = loop.ep(0).connect(loop.addr(1), loop.now(), a);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    t_allowed = -1;
    ASSERT_FALSE(threw) << "std::bad_alloc left connect() at allocation " << allowed;
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

}  // namespace
}  // namespace metaroce::test
