// The driver calls a libfabric provider needs (docs/design/libfabric-provider.md
// section 6): status-only posts that allocate nothing when refused (G14),
// peers as binary addresses (G5), connections left out of the accept queue
// (G10), READs served (G3), and progress() under the sleeping thread.
//
// This executable links the counting global operator new
// (tests/common/alloc_counter.hpp): a refused post is seen to take none of
// the calling thread's allocations.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../common/alloc_counter.hpp"
#include "metaroce/udp.hpp"
#include "udp_pair.hpp"

namespace {

using namespace std::chrono_literals;
using metaroce::ConnId;
using metaroce::Status;
using metaroce::test::alloc_counter::thread_news;
using metaroce::udp::ConnState;
using metaroce::udp::Error;
using metaroce::udp::Options;
using metaroce::udp::UdpEndpoint;
using metaroce::udp::test::connect_pair;
using metaroce::udp::test::kAllAccess;
using metaroce::udp::test::open_on;
using metaroce::udp::test::Pair;
using metaroce::udp::test::pin_to_one_cpu;
using metaroce::udp::test::test_options;

// Both endpoints' progress until pred() or 5 s.
template <class Pred>
bool pump(UdpEndpoint& a, UdpEndpoint& b, Pred pred) {
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    (void)a.progress();
    (void)b.progress();
    if (pred()) return true;
  }
  return false;
}

// ------------------------------------------------------------ G14

// The set-up of the try_post tests: a connected pair whose client has `buf`
// registered (as `mr`) for every access, and `wr`, an `op` from its start.
::testing::AssertionResult client_wr(const Pair& p, std::vector<uint8_t>& buf,
                                     metaroce::MemoryRegion& mr, metaroce::WrOpcode op,
                                     metaroce::SendWr& wr) {
  if (!p.client || !p.server) return ::testing::AssertionFailure() << "the pair did not connect";
  if (const Error e = p.client->register_memory(buf.data(), buf.size(), kAllAccess, mr))
    return ::testing::AssertionFailure() << "register_memory: " << e.message;
  wr.op = op;
  wr.local_addr = reinterpret_cast<uint64_t>(buf.data());
  wr.lkey = mr.lkey;
  return ::testing::AssertionSuccess();
}

// A provider retries a post refused kQueueFull in a loop (-FI_EAGAIN): the
// try_ form refuses it with no allocation, and its status is the Error
// form's, whose words post_send_error gives on request.
TEST(UdpTryPost, ARefusedPostAllocatesNothingAndMatchesTheErrorForm) {
  Options co = test_options();
  co.engine.sq_depth = 4;
  co.engine.rq_depth = 2;
  Pair p = connect_pair("127.0.0.1", test_options(), co);
  std::vector<uint8_t> buf(4096);
  metaroce::MemoryRegion mr;
  metaroce::SendWr wr;
  ASSERT_TRUE(client_wr(p, buf, mr, metaroce::WrOpcode::kSend, wr));
  wr.length = 8;
  // No progress: the send queue fills.
  for (uint64_t i = 0; i < 4; ++i) {
    wr.wr_id = i;
    ASSERT_EQ(p.client->try_post_send(p.cconn, wr), Status::kOk);
  }
  metaroce::RecvWr rwr;
  rwr.addr = wr.local_addr;
  rwr.length = 64;
  rwr.lkey = mr.lkey;
  for (uint64_t i = 0; i < 2; ++i) ASSERT_EQ(p.client->try_post_recv(p.cconn, rwr), Status::kOk);

  wr.wr_id = 99;
  Status full = Status::kOk, rfull = Status::kOk, shared = Status::kOk, unknown = Status::kOk;
  const uint64_t before = thread_news();
  for (int i = 0; i < 1000; ++i) {
    full = p.client->try_post_send(p.cconn, wr);
    rfull = p.client->try_post_recv(p.cconn, rwr);
    shared = p.client->try_post_shared_recv(rwr);  // no shared queue configured
    unknown = p.client->try_post_send(ConnId{p.cconn.v ^ 0x5a5a5a5au}, wr);
  }
  const uint64_t news = thread_news() - before;
  EXPECT_EQ(news, 0u) << "refused posts allocated";
  EXPECT_EQ(full, Status::kQueueFull);
  EXPECT_EQ(rfull, Status::kQueueFull);
  EXPECT_NE(shared, Status::kOk);
  EXPECT_NE(unknown, Status::kOk);

  // The Error forms: the same statuses, and the words post_*_error gives.
  // (The counter sees their allocations: the text is built per refusal.)
  const uint64_t error_before = thread_news();
  const Error e = p.client->post_send(p.cconn, wr);
  EXPECT_GT(thread_news() - error_before, 0u);
  EXPECT_EQ(e.status, full);
  EXPECT_FALSE(e.message.empty());
  const Error d = p.client->post_send_error(full, p.cconn, wr);
  EXPECT_EQ(d.status, e.status);
  EXPECT_EQ(d.message, e.message);
  EXPECT_EQ(d.peer, e.peer);
  EXPECT_EQ(d.conn, e.conn);
  const Error re = p.client->post_recv(p.cconn, rwr);
  EXPECT_EQ(re.status, rfull);
  EXPECT_EQ(p.client->post_recv_error(rfull, p.cconn, rwr).message, re.message);
  const Error se = p.client->post_shared_recv(rwr);
  EXPECT_EQ(se.status, shared);
  EXPECT_EQ(p.client->post_shared_recv_error(shared, rwr).message, se.message);
  const ConnId other{p.cconn.v ^ 0x5a5a5a5au};
  const Error ue = p.client->post_send(other, wr);
  EXPECT_EQ(ue.status, unknown);
  EXPECT_EQ(p.client->post_send_error(unknown, other, wr).message, ue.message);
  EXPECT_TRUE(p.client->post_send_error(Status::kOk, p.cconn, wr).ok());

  // A bad lkey: the words name it, by either path.
  metaroce::SendWr bad = wr;
  bad.lkey = mr.lkey + 1000;
  p.client->close(false);
  // After close() every post is refused kNotConnected, still without allocating.
  const uint64_t closed_before = thread_news();
  const Status closed = p.client->try_post_send(p.cconn, bad);
  EXPECT_EQ(thread_news() - closed_before, 0u);
  EXPECT_EQ(closed, Status::kNotConnected);
  const Error ce = p.client->post_send(p.cconn, bad);
  EXPECT_EQ(ce.status, closed);
  EXPECT_EQ(p.client->post_send_error(closed, p.cconn, bad).message, ce.message);
  EXPECT_NE(ce.message.find("the endpoint is closed"), std::string::npos) << ce.message;
}

// kLocalProtection's words (which lkey, which range) come from the error
// call alone: the try_ form still says only the status.
TEST(UdpTryPost, ALocalProtectionRefusalIsDescribedOnRequest) {
  Pair p = connect_pair("127.0.0.1");
  std::vector<uint8_t> buf(256);
  metaroce::MemoryRegion mr;
  metaroce::SendWr wr;
  ASSERT_TRUE(client_wr(p, buf, mr, metaroce::WrOpcode::kWrite, wr));
  wr.wr_id = 7;
  wr.length = 512;  // past the region's end
  const uint64_t before = thread_news();
  const Status s = p.client->try_post_send(p.cconn, wr);
  EXPECT_EQ(thread_news() - before, 0u);
  ASSERT_EQ(s, Status::kLocalProtection);
  const Error e = p.client->post_send_error(s, p.cconn, wr);
  EXPECT_EQ(e.status, Status::kLocalProtection);
  EXPECT_NE(e.message.find("post_send (WRITE wr_id 7"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("not all inside"), std::string::npos) << e.message;
  EXPECT_EQ(p.client->post_send(p.cconn, wr).message, e.message);
}

// ------------------------------------------------------------ G5

// Connects a client on `host` to a server there by the server's binary
// address; the server's progress thread answers.
void connect_by_peer_addr(const std::string& host) {
  auto server = open_on(host);
  auto client = open_on(host, metaroce::udp::test::with_handshake_budget(test_options()));
  ASSERT_TRUE(server && client);
  // The binary form of what local_address() says.
  metaroce::PeerAddr parsed;
  ASSERT_TRUE(metaroce::udp::parse_address(server->local_address(), 0, parsed));
  EXPECT_EQ(server->local_peer_addr(), parsed);
  EXPECT_EQ(metaroce::udp::format_address(server->local_peer_addr()), server->local_address());
  server->start_progress_thread();
  ConnId c;
  const Error e = client->connect_start(server->local_peer_addr(), c, 10s);
  ASSERT_FALSE(e) << e.message;
  ASSERT_NE(c.v, 0u);
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (client->state(c) == ConnState::kConnecting && std::chrono::steady_clock::now() < end)
    client->wait(1ms);
  ASSERT_EQ(client->state(c), ConnState::kEstablished);
  ConnId s;
  const Error a = server->accept(10s, s);
  ASSERT_FALSE(a) << a.message;
  // Each side names the other by the address the other calls its own.
  EXPECT_EQ(server->peer_addr(s), client->local_peer_addr());
  EXPECT_EQ(client->peer_addr(c), server->local_peer_addr());
  EXPECT_EQ(metaroce::udp::format_address(server->peer_addr(s)), server->peer_address(s));
  EXPECT_EQ(metaroce::udp::address_is_v4(client->peer_addr(c)),
            host.find(':') == std::string::npos);
  EXPECT_EQ(server->peer_addr(ConnId{s.v ^ 0x5a5a5a5au}).len, 0);  // none: no address
}

TEST(UdpPeerAddr, ConnectsByTheServersBinaryAddressOverIPv4) { connect_by_peer_addr("127.0.0.1"); }
TEST(UdpPeerAddr, ConnectsByTheServersBinaryAddressOverIPv6) { connect_by_peer_addr("::1"); }

TEST(UdpPeerAddr, AMalformedPeerAddrIsRefusedWithItsReason) {
  auto ep = open_on("127.0.0.1");
  ASSERT_TRUE(ep);
  const auto refused = [&](const metaroce::PeerAddr& a, const std::string& words) {
    ConnId c{123};
    const Error e = ep->connect_start(a, c);
    EXPECT_EQ(e.status, Status::kInvalidArgument) << words;
    EXPECT_EQ(c.v, 0u) << words;
    EXPECT_NE(e.message.find(words), std::string::npos) << e.message;
  };
  refused(metaroce::PeerAddr{}, "len is 0, not 19");
  metaroce::PeerAddr family0 = ep->local_peer_addr();
  family0.bytes[18] = 0;
  refused(family0, "family byte is 0, neither 4 (IPv4) nor 6 (IPv6)");
  metaroce::PeerAddr unmapped = ep->local_peer_addr();
  unmapped.bytes[10] = 0;  // no longer ::ffff:a.b.c.d, still "IPv4"
  refused(unmapped, "not v4-mapped");
  metaroce::PeerAddr port0 = ep->local_peer_addr();
  port0.bytes[16] = port0.bytes[17] = 0;
  refused(port0, "port 0 names no socket");
  metaroce::PeerAddr v6;
  ASSERT_TRUE(metaroce::udp::parse_address("[::1]:5000", 0, v6));
  refused(v6, "an IPv4 endpoint (" + ep->local_address() + ") cannot reach an IPv6 peer");
  // Nothing was started: the endpoint sent no request.
  EXPECT_EQ(ep->io_stats().tx_datagrams, 0u);
}

// The blocking connect takes the binary address too: established with a
// server that answers, refused as connect_start refuses a malformed one or
// a negative timeout, and timed out, naming the peer, where no one listens.
TEST(UdpPeerAddr, TheBlockingConnectTakesABinaryAddress) {
  auto server = open_on("127.0.0.1");
  auto client = open_on("127.0.0.1", metaroce::udp::test::with_handshake_budget(test_options()));
  ASSERT_TRUE(server && client);
  server->start_progress_thread();
  ConnId c{123};
  const Error e = client->connect(server->local_peer_addr(), 10s, c);
  ASSERT_FALSE(e) << e.message;
  EXPECT_EQ(client->state(c), ConnState::kEstablished);
  EXPECT_EQ(client->peer_addr(c), server->local_peer_addr());
  ConnId s;
  const Error a = server->accept(10s, s);
  ASSERT_FALSE(a) << a.message;
  EXPECT_EQ(server->peer_addr(s), client->local_peer_addr());

  ConnId bad{123};
  const Error m = client->connect(metaroce::PeerAddr{}, 100ms, bad);
  EXPECT_EQ(m.status, Status::kInvalidArgument);
  EXPECT_NE(m.message.find("len is 0, not 19"), std::string::npos) << m.message;
  EXPECT_EQ(bad.v, 0u);
  const Error n = client->connect(server->local_peer_addr(), -1ms, bad);
  EXPECT_EQ(n.status, Status::kInvalidArgument) << n.message;
  EXPECT_EQ(bad.v, 0u);

  metaroce::PeerAddr nobody;
  const uint16_t port = metaroce::udp::test::closed_port("127.0.0.1");
  ASSERT_TRUE(metaroce::udp::parse_address("127.0.0.1", port, nobody));
  const auto t0 = std::chrono::steady_clock::now();
  const Error t = client->connect(nobody, 150ms, bad);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 150ms);
  EXPECT_EQ(t.status, Status::kConnectTimeout) << t.message;
  EXPECT_EQ(t.peer, metaroce::udp::format_address(nobody));
  EXPECT_NE(t.message.find("timed out after 150 ms"), std::string::npos) << t.message;
  EXPECT_EQ(bad.v, 0u);
  EXPECT_EQ(client->state(ConnId{t.conn}), ConnState::kError);
}

// A wildcard-bound endpoint's local_peer_addr names the wildcard (udp.hpp):
// what its peers reach it at is their own choice.
TEST(UdpPeerAddr, AWildcardEndpointNamesItsWildcardAddress) {
  auto ep = open_on("0.0.0.0");
  ASSERT_TRUE(ep);
  metaroce::PeerAddr any;
  ASSERT_TRUE(metaroce::udp::parse_address("0.0.0.0", ep->port(), any));
  EXPECT_EQ(ep->local_peer_addr(), any);
}

// ------------------------------------------------------------ progress()

// The threads of this process other than those in `before`.
std::set<pid_t> tasks() {
  std::set<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    out.insert(static_cast<pid_t>(std::stoi(e.path().filename().string())));
  return out;
}

// The caller's progress() takes a datagram while the sleeping thread waits:
// its epoll_wait, woken for the datagram, finds the socket empty and sleeps
// on without returning, its timer still armed for the keepalive (10 s). The
// datagram is a READ_REQ: the round sends the response and sets the timer
// that resends it unless acknowledged (LOSS-8's probe, then the RTO). The
// requester, driven by hand, sends no ACK while the test sleeps, and the
// caller calls nothing more: only the thread can resend, and only if the
// caller's progress() moved its timer. To take the datagram first every
// time, the test runs on one CPU with the progress thread at SCHED_IDLE, so
// that the thread cannot run until the test sleeps.
TEST(UdpProgressRearm, ATimerTheCallersRoundSetFiresInTheSleepingThread) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.client && p.server);
  std::vector<uint8_t> src(64, 7), dst(64);
  metaroce::MemoryRegion smr, dmr;
  ASSERT_FALSE(p.server->register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(p.client->register_memory(dst.data(), dst.size(), kAllAccess, dmr));

  cpu_set_t old_mask, one;
  ASSERT_TRUE(pin_to_one_cpu(old_mask, one));
  const std::set<pid_t> before = tasks();
  p.server->start_progress_thread(metaroce::udp::ProgressMode::kSleeping);
  std::vector<pid_t> added;
  for (pid_t t : tasks())
    if (before.count(t) == 0) added.push_back(t);
  ASSERT_EQ(added.size(), 1u);
  const sched_param prio{0};
  ASSERT_EQ(sched_setaffinity(added[0], sizeof(one), &one), 0);
  // On a loaded host (ctest -j2 beside other work) the thread still ran
  // first now and then: a scheduler may give a SCHED_IDLE thread the CPU
  // when it takes it from this one, between the two progress() calls. Such
  // a try tests nothing; its READ is completed and another made.
  bool taken = false;
  uint64_t resent = 0;
  uint64_t id = 0;
  for (int attempt = 0; attempt < 5 && !taken; ++attempt) {
    ASSERT_EQ(sched_setscheduler(added[0], SCHED_IDLE, &prio), 0);
    std::this_thread::sleep_for(50ms);  // the thread settles asleep
    std::fill(dst.begin(), dst.end(), 0);
    ASSERT_FALSE(p.client->read(p.cconn, ++id, dst.data(), 64, dmr.lkey, smr.addr, smr.rkey));
    (void)p.client->progress();  // the READ_REQ, in the server's socket now (loopback)
    const uint64_t rx_before = p.server->io_stats().rx_datagrams;
    (void)p.server->progress();  // takes it, and answers, before the thread can run
    const metaroce::udp::IoStats caller = p.server->io_stats();
    // The thread's turn, at its usual priority: at SCHED_IDLE on a loaded
    // CPU it once had no time in 100 ms. Its resend comes within
    // milliseconds; a stale timer's, at the keepalive (10 s).
    (void)sched_setscheduler(added[0], SCHED_OTHER, &prio);
    const auto until = std::chrono::steady_clock::now() + 2s;
    do {
      std::this_thread::sleep_for(5ms);
      resent = p.server->io_stats().tx_datagrams - caller.tx_datagrams;
    } while (resent == 0 && std::chrono::steady_clock::now() < until);
    taken = caller.rx_datagrams - rx_before == 1;
    if (!taken) {
      metaroce::Completion c;
      ASSERT_TRUE(p.client->wait_completion(c, 2s));
      ASSERT_EQ(c.status, Status::kOk);
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(old_mask), &old_mask), 0);
  ASSERT_TRUE(taken) << "the thread took the READ_REQ every time: nothing tested";
  EXPECT_GE(resent, 1u) << "the unacknowledged response waited for the thread's stale timer";
  metaroce::Completion c;
  ASSERT_TRUE(p.client->wait_completion(c, 2s));
  EXPECT_EQ(c.status, Status::kOk);
  EXPECT_EQ(c.wr_id, id);
  EXPECT_EQ(dst, src);
}

// ------------------------------------------------------------ G3

// A READ this endpoint served is reported once every response is
// acknowledged: not when its responses leave, before the requester ran.
TEST(UdpReadServed, AReadServedIsReportedOnceAcknowledged) {
  Options so = test_options();
  so.engine.read_served_events = true;
  Pair p = connect_pair("127.0.0.1", so);
  ASSERT_TRUE(p.client && p.server);
  constexpr uint32_t kLen = 3 * 4096 + 100;  // several responses
  std::vector<uint8_t> src(kLen), dst(kLen);
  for (uint32_t i = 0; i < kLen; ++i) src[i] = static_cast<uint8_t>(i * 7);
  metaroce::MemoryRegion smr, dmr;
  ASSERT_FALSE(p.server->register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(p.client->register_memory(dst.data(), dst.size(), kAllAccess, dmr));
  ASSERT_FALSE(p.client->read(p.cconn, 5, dst.data(), kLen, dmr.lkey, smr.addr, smr.rkey));
  (void)p.client->progress();  // the READ_REQ
  (void)p.server->progress();  // the responses, unacknowledged yet
  metaroce::ReadServed r;
  EXPECT_FALSE(p.server->poll_read_served(r)) << "reported before any response was acknowledged";
  EXPECT_GT(p.server->io_stats().tx_datagrams, 0u);
  metaroce::Completion c;
  bool done = false, served = false;
  ASSERT_TRUE(pump(*p.client, *p.server, [&] {
    if (!done && p.client->poll_completion(c)) done = true;
    if (!served && p.server->poll_read_served(r)) served = true;
    return done && served;
  }));
  EXPECT_EQ(c.status, Status::kOk);
  EXPECT_EQ(dst, src);
  EXPECT_EQ(r.conn.v, p.sconn.v);
  EXPECT_EQ(r.lkey, smr.lkey);
  EXPECT_EQ(r.addr, smr.addr);
  EXPECT_EQ(r.length, kLen);
  EXPECT_FALSE(p.server->poll_read_served(r));  // once
  EXPECT_FALSE(p.client->poll_read_served(r));  // off by default
}

// ------------------------------------------------------------ G10

// With queue_accepted off, connections peers open are used as any other
// (their completions name them, peer_addr names their peers) and none waits
// in the accept queue; accept() says so at once.
TEST(UdpAcceptQueue, ConnectionsLeftUnqueuedAreUsedThroughTheirCompletions) {
  Options so = test_options();
  so.queue_accepted = false;
  so.engine.shared_rq_depth = 8;
  auto server = open_on("127.0.0.1", so);
  ASSERT_TRUE(server);
  std::vector<uint8_t> in(8 * 64), out(64, 3);
  metaroce::MemoryRegion imr;
  ASSERT_FALSE(server->register_memory(in.data(), in.size(), kAllAccess, imr));
  for (uint64_t i = 0; i < 8; ++i) {
    metaroce::RecvWr rw;
    rw.wr_id = i;
    rw.addr = imr.addr + i * 64;
    rw.length = 64;
    rw.lkey = imr.lkey;
    ASSERT_FALSE(server->post_shared_recv(rw));
  }
  server->start_progress_thread();
  std::vector<std::unique_ptr<UdpEndpoint>> clients;
  std::set<uint32_t> expected_peers;
  for (int i = 0; i < 3; ++i) {
    auto c = open_on("127.0.0.1", metaroce::udp::test::with_handshake_budget(test_options()));
    ASSERT_TRUE(c);
    ConnId id;
    const Error e = c->connect(server->local_address(), 10s, id);
    ASSERT_FALSE(e) << e.message;
    metaroce::MemoryRegion omr;
    ASSERT_FALSE(c->register_memory(out.data(), out.size(), kAllAccess, omr));
    ASSERT_FALSE(c->send(id, 1, out.data(), 16, omr.lkey));
    metaroce::Completion sc;
    ASSERT_TRUE(c->wait_completion(sc, 5s));
    EXPECT_EQ(sc.status, Status::kOk);
    expected_peers.insert(c->port());
    clients.push_back(std::move(c));
  }
  std::set<uint32_t> seen_peers;
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (seen_peers.size() < 3 && std::chrono::steady_clock::now() < end) {
    metaroce::Completion rc;
    if (!server->wait_completion(rc, 10ms)) continue;
    EXPECT_EQ(rc.status, Status::kOk);
    EXPECT_EQ(server->state(rc.conn), ConnState::kEstablished);
    seen_peers.insert(metaroce::udp::address_port(server->peer_addr(rc.conn)));
  }
  EXPECT_EQ(seen_peers, expected_peers);
  ConnId none;
  EXPECT_FALSE(server->try_accept(none));
  const Error a = server->accept(10s, none);
  EXPECT_EQ(a.status, Status::kInvalidArgument);
  EXPECT_NE(a.message.find("Options::queue_accepted is off"), std::string::npos) << a.message;
}

}  // namespace
