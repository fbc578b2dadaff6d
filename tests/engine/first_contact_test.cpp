// Connections made on first use, as a connectionless endpoint (a libfabric
// RDM provider, an MPI rank) makes them: work posted at once on a connection
// still CONNECTING, two peers that connect to each other at the same moment,
// receives posted before any connection exists (spec CONN-11, PLACE-6,
// COMP-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint32_t kMsg = 48 * 1024;  // bytes of each SEND and WRITE

EndpointConfig rdm_cfg(uint64_t seed) {
  EndpointConfig c = cfg(seed);
  c.shared_rq_depth = 8;
  return c;
}

struct Side {
  ConnId out;  // the connection this side opened
  ConnId in;   // the one the peer opened to it
  int connected = 0, accepted = 0, failed = 0;
  std::vector<Completion> done;
};

void collect(Endpoint& ep, Side& s) {
  Event ev;
  while (ep.poll_event(ev)) {
    if (ev.kind == EventKind::kConnected && ev.conn == s.out) ++s.connected;
    if (ev.kind == EventKind::kAccepted) {
      ++s.accepted;
      s.in = ev.conn;
    }
    if (ev.kind == EventKind::kConnectFailed || ev.kind == EventKind::kError) ++s.failed;
  }
  Completion c;
  while (ep.poll_completion(c)) s.done.push_back(c);
}

// Both ends connect to each other in the same instant, each posting a SEND
// and a WRITE before any packet has left, and the first CONNECT_REQ of each
// is lost, so the retries cross too. Each end has two connections, one it
// opened and one it accepted; every message lands once, on the shared
// receives posted before either connection existed, and each receive names
// the connection its message came on.
TEST(FirstContact, CrossedConnectsCarryTheWorkPostedBeforeTheAccept) {  // CONN-11, PLACE-6
  Loop loop(rdm_cfg(401), rdm_cfg(402));
  int reqs_dropped = 0;
  loop.drop = [&](int, const std::vector<uint8_t>& d) {
    if (d[1] != static_cast<uint8_t>(wire::Opcode::kConnectReq) || reqs_dropped >= 2) return false;
    ++reqs_dropped;
    return true;
  };
  Buf src[2] = {Buf(loop.ep(0), kMsg, kAccessLocalWrite), Buf(loop.ep(1), kMsg, kAccessLocalWrite)};
  Buf dst[2] = {Buf(loop.ep(0), kMsg, kAccessLocalWrite | kAccessRemoteWrite),
                Buf(loop.ep(1), kMsg, kAccessLocalWrite | kAccessRemoteWrite)};
  Buf rx[2] = {Buf(loop.ep(0), 4 * kMsg, kAccessLocalWrite),
               Buf(loop.ep(1), 4 * kMsg, kAccessLocalWrite)};
  Side side[2];
  for (int i = 0; i < 2; ++i) {
    pattern(src[i].bytes, static_cast<uint8_t>(10 + i));
    for (uint64_t k = 0; k < 4; ++k)
      ASSERT_EQ(
          loop.ep(i).post_shared_recv(RecvWr{100 + k, rx[i].addr(k * kMsg), kMsg, rx[i].mr.lkey}),
          Status::kOk);
  }
  for (int i = 0; i < 2; ++i) {
    const int peer = 1 - i;
    ASSERT_EQ(loop.ep(i).connect(loop.addr(peer), loop.now(), side[i].out), Status::kOk);
    ASSERT_EQ(loop.ep(i).post_send(side[i].out, send_wr(src[i], 0, kMsg, 1)), Status::kOk);
    // The WRITE names the peer's buffer, as an RMA key exchanged out of band.
    ASSERT_EQ(loop.ep(i).post_send(side[i].out, write_wr(src[i], dst[peer], kMsg, 2)), Status::kOk);
  }
  const bool all = loop.run_until([&] {
    for (int i = 0; i < 2; ++i) collect(loop.ep(i), side[i]);
    return side[0].done.size() >= 3 && side[1].done.size() >= 3;
  });
  ASSERT_TRUE(all) << side[0].done.size() << " / " << side[1].done.size() << " completions";
  EXPECT_EQ(reqs_dropped, 2);
  for (int i = 0; i < 2; ++i) {
    const int peer = 1 - i;
    SCOPED_TRACE(i);
    EXPECT_EQ(side[i].connected, 1);
    EXPECT_EQ(side[i].accepted, 1);
    EXPECT_EQ(side[i].failed, 0);
    ASSERT_TRUE(side[i].in.valid());
    EXPECT_NE(side[i].in, side[i].out);
    EXPECT_TRUE(loop.ep(i).is_established(side[i].out));
    EXPECT_TRUE(loop.ep(i).is_established(side[i].in));
    EXPECT_EQ(loop.ep(i).peer_of(side[i].in), loop.addr(peer));
    EXPECT_EQ(loop.ep(i).endpoint_stats().connects_refused, 0u);
    int sends = 0, writes = 0, recvs = 0;
    for (const Completion& c : side[i].done) {
      EXPECT_EQ(c.status, Status::kOk);
      if (c.op == CompletionOp::kSend && c.wr_id == 1 && c.conn == side[i].out) ++sends;
      if (c.op == CompletionOp::kWrite && c.wr_id == 2 && c.conn == side[i].out) ++writes;
      if (c.op == CompletionOp::kRecv && c.wr_id == 100 && c.conn == side[i].in &&
          c.byte_len == kMsg)
        ++recvs;
    }
    EXPECT_EQ(sends, 1);
    EXPECT_EQ(writes, 1);
    EXPECT_EQ(recvs, 1);
    EXPECT_TRUE(
        std::equal(rx[i].bytes.begin(), rx[i].bytes.begin() + kMsg, src[peer].bytes.begin()));
    EXPECT_TRUE(std::equal(dst[i].bytes.begin(), dst[i].bytes.end(), src[peer].bytes.begin()));
  }
}

// Work posted on a connection whose connect then fails is not lost: each
// work request completes once, in posting order, with an error (COMP-4,
// COMP-5), beside the event that says why the connect failed (unanswered
// requests, or the peer's refusal). A provider reports these as error
// completions.
void expect_posted_work_flushed(bool peer_refuses) {
  SCOPED_TRACE(peer_refuses ? "refused" : "unanswered");
  EndpointConfig refusing = rdm_cfg(412);
  refusing.accept_incoming = false;
  Loop loop(rdm_cfg(411), refusing);
  if (!peer_refuses) loop.drop = [](int, const std::vector<uint8_t>&) { return true; };
  Buf src(loop.ep(0), kMsg, kAccessLocalWrite);
  Buf into(loop.ep(0), kMsg, kAccessLocalWrite);
  ConnId conn;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), conn), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(conn, send_wr(src, 0, kMsg, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(conn, write_wr(src, into, kMsg, 2)), Status::kOk);
  ASSERT_EQ(loop.ep(0).post_send(conn, read_wr(into, 0x1000, 0x55, kMsg, 3)), Status::kOk);
  Side side;
  side.out = conn;
  Event failed{};
  ASSERT_TRUE(loop.run_until([&] {
    Event ev;
    while (loop.ep(0).poll_event(ev))
      if (ev.kind == EventKind::kConnectFailed) failed = ev;
    Completion c;
    while (loop.ep(0).poll_completion(c)) side.done.push_back(c);
    return side.done.size() >= 3;
  }));
  EXPECT_EQ(failed.kind, EventKind::kConnectFailed);
  EXPECT_EQ(failed.status, peer_refuses ? Status::kConnectRefused : Status::kConnectTimeout);
  ASSERT_EQ(side.done.size(), 3u);
  for (uint64_t k = 0; k < 3; ++k) {
    EXPECT_EQ(side.done[k].wr_id, k + 1);
    // COMP-5: after the connect's timeout its oldest request carries the
    // timeout's code; a refusal names none of them.
    const bool at_fault = k == 0 && !peer_refuses;
    EXPECT_EQ(side.done[k].status, at_fault ? Status::kConnectTimeout : Status::kFlushed);
    EXPECT_EQ(side.done[k].conn, conn);
  }
  loop.run_until([] { return false; }, 100'000'000);
  Completion extra;
  EXPECT_FALSE(loop.ep(0).poll_completion(extra)) << "wr_id " << extra.wr_id << " completed twice";
  // A later post names the failure at once and queues nothing.
  EXPECT_NE(loop.ep(0).post_send(conn, send_wr(src, 0, kMsg, 4)), Status::kOk);
}

TEST(FirstContact, WorkPostedWhileConnectingIsFlushedWhenTheConnectFails) {  // CONN-11, COMP-5
  expect_posted_work_flushed(false);
  expect_posted_work_flushed(true);
}

}  // namespace
}  // namespace metaroce::test
