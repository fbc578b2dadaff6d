// Peers that go and connections that end under an application's work: a
// peer that vanishes or is destroyed mid-transfer, a connection closed with
// requests queued, calls after close(), a second close(), an endpoint
// destroyed with its connections open. Every posted request completes, with
// an error naming the peer and the connection; nothing hangs; the statistics
// stay readable.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "metaroce/udp.hpp"
#include "udp_misuse.hpp"
#include "udp_pair.hpp"

using namespace std::chrono_literals;
using metaroce::Completion;
using metaroce::CompletionOp;
using metaroce::ConnId;
using metaroce::MemoryRegion;
using metaroce::Status;
using metaroce::udp::ConnState;
using metaroce::udp::Error;
using metaroce::udp::Options;
using metaroce::udp::UdpEndpoint;
using namespace metaroce::udp::test;

namespace {

// Takes `n` completions from `ep` (its own rounds, at most 20 s): every one
// failed, with an error naming `peer` and connection `conn`.
std::vector<Completion> failed_completions(UdpEndpoint& ep, size_t n, const std::string& peer,
                                           ConnId conn) {
  std::vector<Completion> got;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (got.size() < n && std::chrono::steady_clock::now() < deadline) {
    Completion c;
    if (ep.wait_completion(c, 100ms)) got.push_back(c);
  }
  EXPECT_EQ(got.size(), n) << "requests left without a completion";
  for (const Completion& c : got) {
    SCOPED_TRACE("wr_id " + std::to_string(c.wr_id));
    EXPECT_EQ(c.conn, conn);
    expect_names(ep, c, peer);
  }
  Completion extra;
  EXPECT_FALSE(ep.poll_completion(extra)) << "wr_id " << extra.wr_id << " completed twice";
  return got;
}

// Every statistic of a connection that ended can still be read.
void stats_readable(UdpEndpoint& ep, ConnId conn) {
  const metaroce::EndpointStats es = ep.endpoint_stats();
  EXPECT_GT(es.datagrams_sent, 0u);
  metaroce::ConnStats cs;
  EXPECT_TRUE(ep.conn_stats(conn, cs));
  (void)ep.path_stats(conn);
  EXPECT_GT(ep.io_stats().tx_datagrams, 0u);
}

struct Buffers {
  std::vector<uint8_t> src = std::vector<uint8_t>(16 << 20, 0x5a);
  std::vector<uint8_t> dst = std::vector<uint8_t>(16 << 20, 0);
  std::vector<uint8_t> rbuf = std::vector<uint8_t>(1 << 20, 0);
  MemoryRegion smr, dmr, rmr;
};

// A WRITE, a READ, a SEND, a WRITE_IMM and a receive posted by the client,
// the server's buffers registered and a receive posted there for the SEND.
void post_transfer(Pair& p, Buffers& b) {
  ASSERT_FALSE(p.client->register_memory(b.src.data(), b.src.size(), kAllAccess, b.smr));
  ASSERT_FALSE(p.client->register_memory(b.rbuf.data(), b.rbuf.size(), kAllAccess, b.rmr));
  ASSERT_FALSE(p.server->register_memory(b.dst.data(), b.dst.size(), kAllAccess, b.dmr));
  ASSERT_FALSE(p.server->recv(p.sconn, 100, b.dst.data(), 4096, b.dmr.lkey));
  const auto n = static_cast<uint32_t>(b.src.size());
  ASSERT_FALSE(p.client->write(p.cconn, 1, b.src.data(), n, b.smr.lkey, b.dmr.addr, b.dmr.rkey));
  ASSERT_FALSE(
      p.client->read(p.cconn, 2, b.rbuf.data(), 1 << 20, b.rmr.lkey, b.dmr.addr, b.dmr.rkey));
  ASSERT_FALSE(p.client->send(p.cconn, 3, b.src.data(), 4096, b.smr.lkey));
  ASSERT_FALSE(
      p.client->write_imm(p.cconn, 4, b.src.data(), 4096, b.smr.lkey, b.dmr.addr, b.dmr.rkey, 7));
  ASSERT_FALSE(p.client->recv(p.cconn, 5, b.rbuf.data(), 4096, b.rmr.lkey));
}

// A pair whose client's peer timeout is short, with post_transfer's work
// under way: the server has taken some of it.
Pair transfer_under_way(Buffers& b) {
  Options co = test_options();
  co.engine.recovery.peer_timeout_ns = 500 * metaroce::kMillisecond;
  Pair p = connect_pair("127.0.0.1", test_options(), co);
  if (!p.cconn.valid() || !p.sconn.valid()) return p;
  post_transfer(p, b);
  EXPECT_TRUE(pump(p, [&] { return p.server->io_stats().rx_datagrams >= 32; }));
  return p;
}

}  // namespace

// The server's process vanishes (sockets gone, no DISCONNECT) while a
// transfer runs: the first request fails kPeerUnreachable and the rest are
// flushed, each naming the peer and the connection, within the peer timeout.
TEST(UdpPeerGone, APeerThatVanishesMidTransferFailsEveryRequestNamingIt) {
  Buffers b;
  Pair p = transfer_under_way(b);
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  const std::string peer = p.server->local_address();
  p.server->close(false);
  const auto got = failed_completions(*p.client, 5, peer, p.cconn);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.front().status, Status::kPeerUnreachable);
  EXPECT_EQ(p.client->state(p.cconn), ConnState::kError);
  const Error ce = p.client->conn_error(p.cconn);
  EXPECT_EQ(ce.status, Status::kPeerUnreachable);
  EXPECT_EQ(ce.peer, peer);
  stats_readable(*p.client, p.cconn);
  // A post now says what ended the connection.
  const Error post = p.client->send(p.cconn, 9, b.src.data(), 16, b.smr.lkey);
  EXPECT_EQ(post.status, Status::kNotConnected);
  EXPECT_NE(post.message.find("kPeerUnreachable"), std::string::npos) << post.message;
}

// The server's endpoint is destroyed (its destructor closes it, telling
// the peer) while a transfer runs: every request of the client's completes,
// naming the peer and the connection, and says the peer closed it.
TEST(UdpPeerGone, APeerDestroyedMidTransferFlushesEveryRequestNamingIt) {
  Buffers b;
  Pair p = transfer_under_way(b);
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  const std::string peer = p.server->local_address();
  p.server.reset();
  const auto got = failed_completions(*p.client, 5, peer, p.cconn);
  // (Its DISCONNECT may be lost, as any datagram: the peer timeout then
  // ends the connection.)
  const bool told = p.client->state(p.cconn) == ConnState::kClosed;
  if (!told) {
    EXPECT_EQ(p.client->conn_error(p.cconn).status, Status::kPeerUnreachable);
  }
  for (const Completion& c : got) {
    const Error e = p.client->completion_error(c);
    EXPECT_NE(e.message.find(told ? "peer closed" : "kPeerUnreachable"), std::string::npos)
        << e.message;
  }
  stats_readable(*p.client, p.cconn);
}

// close(conn) with requests queued: each completes kFlushed saying so; later
// posts are refused naming the close; a second close and a close of an id
// never given change nothing.
TEST(UdpPeerGone, AConnectionClosedWithRequestsQueuedFlushesEach) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid());
  std::vector<uint8_t> buf(1 << 16, 1), dst(1 << 16, 0);
  MemoryRegion mr, dmr;
  ASSERT_FALSE(p.client->register_memory(buf.data(), buf.size(), kAllAccess, mr));
  ASSERT_FALSE(p.server->register_memory(dst.data(), dst.size(), kAllAccess, dmr));
  constexpr uint64_t kPosts = 24;
  for (uint64_t i = 0; i < kPosts; ++i) {
    const Error e =
        i % 3 == 2 ? p.client->recv(p.cconn, i, buf.data(), 4096, mr.lkey)
                   : p.client->write(p.cconn, i, buf.data(), 4096, mr.lkey, dmr.addr, dmr.rkey);
    ASSERT_FALSE(e) << e.message;
  }
  p.client->close(p.cconn);
  p.client->close(p.cconn);
  p.client->close(ConnId{0x7777});
  std::vector<bool> seen(kPosts, false);
  for (uint64_t i = 0; i < kPosts; ++i) {
    Completion c;
    ASSERT_TRUE(p.client->wait_completion(c, 5s)) << i << " of " << kPosts;
    ASSERT_LT(c.wr_id, kPosts);
    EXPECT_FALSE(seen[c.wr_id]) << c.wr_id;
    seen[c.wr_id] = true;
    EXPECT_EQ(c.status, Status::kFlushed);
    const Error e = p.client->completion_error(c);
    EXPECT_NE(e.message.find("close(conn)"), std::string::npos) << e.message;
    EXPECT_EQ(e.peer, p.server->local_address());
  }
  const Error e = p.client->write(p.cconn, 99, buf.data(), 16, mr.lkey, dmr.addr, dmr.rkey);
  EXPECT_EQ(e.status, Status::kNotConnected) << e.message;
  EXPECT_NE(e.message.find("close"), std::string::npos) << e.message;
  EXPECT_EQ(p.client->state(ConnId{0x7777}), ConnState::kUnknown);
  p.server->start_progress_thread();
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (p.client->state(p.cconn) != ConnState::kClosed &&
         std::chrono::steady_clock::now() < deadline)
    p.client->wait(10ms);
  EXPECT_EQ(p.client->state(p.cconn), ConnState::kClosed);
  Completion c;
  EXPECT_FALSE(p.client->poll_completion(c));
}

// After close(): the flushed completions are polled, then none; every call
// answers at once, none hangs or crashes; close() again does nothing.
TEST(UdpPeerGone, CallsAfterCloseAnswerAtOnce) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid());
  std::vector<uint8_t> buf(4096, 1);
  MemoryRegion mr;
  ASSERT_FALSE(p.client->register_memory(buf.data(), buf.size(), kAllAccess, mr));
  for (uint64_t i = 0; i < 4; ++i)
    ASSERT_FALSE(p.client->recv(p.cconn, i, buf.data(), 64, mr.lkey));
  p.client->close();
  Completion cs[8];
  EXPECT_EQ(p.client->poll_completions(cs, 8), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(cs[i].status, Status::kFlushed);
  const auto t0 = std::chrono::steady_clock::now();
  Completion c;
  EXPECT_FALSE(p.client->poll_completion(c));
  EXPECT_FALSE(p.client->wait_completion(c, 10s));
  EXPECT_EQ(p.client->progress(), 0u);
  p.client->wait(10s);
  p.client->close();
  p.client->close(false);
  p.client->close(p.cconn);
  p.client->start_progress_thread();
  p.client->stop_progress_thread();
  ConnId id;
  EXPECT_EQ(p.client->connect(p.server->local_address(), 10s, id).status, Status::kNotConnected);
  EXPECT_EQ(p.client->accept(10s, id).status, Status::kNotConnected);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "a call waited on a closed endpoint";
  const Error e = p.client->recv(p.cconn, 9, buf.data(), 64, mr.lkey);
  EXPECT_EQ(e.status, Status::kNotConnected);
  EXPECT_EQ(e.peer, p.server->local_address()) << e.message;
  EXPECT_EQ(e.conn, p.cconn.v) << e.message;
  EXPECT_EQ(p.client->state(p.cconn), ConnState::kClosed);
  stats_readable(*p.client, p.cconn);
  EXPECT_FALSE(p.client->deregister_memory(mr.lkey));
}

// close()'s linger runs rounds, and those rounds still read CONNECT_REQs: a
// connection the engine accepted then had no closer, so close() neither
// closed it in the engine nor ended its entry. It read kEstablished for
// good, try_accept() handed it out, and its peer, told nothing, learnt of the
// close only from its peer timeout. The first client runs no round until the
// second is connected, so the server's DISCONNECT goes unanswered and the
// linger (10 s: a loaded machine's stall must not end it first) lasts until
// then; the first client's rounds then answer it and the linger ends.
TEST(UdpPeerGone, AConnectionAcceptedWhileCloseLingersIsClosed) {
  Options so = test_options();
  so.linger = 10s;
  so.engine.disconnect_attempts = 1000;  // repeated all through the linger
  Pair p = connect_pair("127.0.0.1", so);
  ASSERT_TRUE(p.cconn.valid());
  auto late = open_on("127.0.0.1", with_handshake_budget(test_options()));
  ASSERT_TRUE(late);
  const std::string at = p.server->local_address();
  std::atomic<bool> closed{false};
  std::thread closing([&] {
    p.server->close();
    closed = true;
  });
  ConnId conn;
  const Error e = late->connect(at, 5s, conn);
  // Only now may the linger end: the first client answers the DISCONNECT.
  for (int i = 0; i < 2000 && !closed; ++i) p.client->wait(5ms);
  closing.join();
  ASSERT_FALSE(e) << e.message;  // accepted in the linger's rounds
  // The server's DISCONNECT went as close() ended: the client's first round
  // reads it (kClosed; its peer timeout, seconds later, would read kError).
  for (int i = 0; i < 100 && late->state(conn) == ConnState::kEstablished; ++i) late->wait(5ms);
  EXPECT_EQ(late->state(conn), ConnState::kClosed);
  ConnId handed;
  size_t accepted = 0;
  while (p.server->try_accept(handed)) {
    ++accepted;
    EXPECT_EQ(p.server->state(handed), ConnState::kClosed) << "connection " << handed.v;
  }
  EXPECT_EQ(p.server->state(p.sconn), ConnState::kClosed);
  EXPECT_LE(accepted, 1u);
}

// An endpoint destroyed with connections open (and its progress thread
// running) closes them: each peer hears it and flushes its work, naming
// the endpoint that went.
TEST(UdpPeerGone, DestroyingAnEndpointWithConnectionsOpenTellsEachPeer) {
  auto server = open_on("127.0.0.1");
  ASSERT_TRUE(server);
  const std::string at = server->local_address();
  server->start_progress_thread();
  std::vector<std::unique_ptr<UdpEndpoint>> clients;
  std::vector<ConnId> conns;
  std::vector<std::vector<uint8_t>> bufs;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(open_on("127.0.0.1", with_handshake_budget(test_options())));
    ASSERT_TRUE(clients.back());
    ConnId id;
    const Error e = clients.back()->connect(at, kHandshakeTimeout, id);
    ASSERT_FALSE(e) << e.message;
    conns.push_back(id);
    bufs.emplace_back(4096);
    MemoryRegion mr;
    ASSERT_FALSE(clients.back()->register_memory(bufs.back().data(), 4096, kAllAccess, mr));
    ASSERT_FALSE(clients.back()->recv(id, 1, bufs.back().data(), 4096, mr.lkey));
    clients.back()->start_progress_thread();
  }
  server.reset();
  for (size_t i = 0; i < clients.size(); ++i) {
    SCOPED_TRACE(i);
    const auto got = failed_completions(*clients[i], 1, at, conns[i]);
    if (!got.empty()) {
      EXPECT_EQ(got.front().status, Status::kPeerClosed);
    }
    EXPECT_EQ(clients[i]->state(conns[i]), ConnState::kClosed);
  }
}

// A connection id this endpoint never had (another endpoint's, or 0): posts
// are refused naming it, and nothing else changes.
TEST(UdpPeerGone, APostOnAConnectionNeverHadIsRefusedNamingIt) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  std::vector<uint8_t> buf(64);
  MemoryRegion mr;
  ASSERT_FALSE(p.client->register_memory(buf.data(), buf.size(), kAllAccess, mr));
  for (const ConnId bad : {ConnId{0}, ConnId{p.cconn.v ^ 0x40000000u}}) {
    SCOPED_TRACE(bad.v);
    Error e = p.client->send(bad, 1, buf.data(), 8, mr.lkey);
    EXPECT_EQ(e.status, Status::kNoSuchConnection) << e.message;
    EXPECT_NE(e.message.find("unknown connection id"), std::string::npos) << e.message;
    if (bad.v != 0) {
      EXPECT_NE(e.message.find(conn_hex(bad.v)), std::string::npos) << e.message;
    }
    e = p.client->recv(bad, 1, buf.data(), 8, mr.lkey);
    EXPECT_EQ(e.status, Status::kNoSuchConnection) << e.message;
    EXPECT_EQ(p.client->state(bad), ConnState::kUnknown);
    EXPECT_EQ(p.client->peer_address(bad), "");
    EXPECT_FALSE(p.client->conn_error(bad));
    metaroce::ConnStats cs;
    EXPECT_FALSE(p.client->conn_stats(bad, cs));
    EXPECT_TRUE(p.client->path_stats(bad).empty());
  }
  Completion c;
  EXPECT_FALSE(p.client->poll_completion(c));
  EXPECT_EQ(p.client->state(p.cconn), ConnState::kEstablished);
}
