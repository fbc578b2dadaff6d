// The driver short of memory: a public call either succeeds or returns
// kResourceExhausted naming the memory that ran short, with nothing of it
// left half done (a region the engine holds and the driver does not, a
// connection the engine opened and the driver never recorded), and a round
// of progress() that finds no memory for a new peer or connection drops it,
// as the engine drops what it cannot record: never std::bad_alloc out of the
// driver. This executable replaces the global operator new with one that
// fails one chosen allocation of the calling thread; each test sweeps that
// allocation over every one its call makes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "metaroce/udp.hpp"
#include "udp_pair.hpp"

namespace {
// Allocations left to succeed before the one that fails; -1: none fails.
thread_local long t_until_fail = -1;
thread_local bool t_fired = false;
// Not inlined into the operators: GCC's -Wmismatched-new-delete would see
// free() of operator new's pointer.
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
}  // namespace

void* operator new(std::size_t n) {
  if (t_until_fail == 0) {
    t_until_fail = -1;
    t_fired = true;
    throw std::bad_alloc();
  }
  if (t_until_fail > 0) --t_until_fail;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }

namespace metaroce::udp::test {
namespace {

using std::chrono::milliseconds;

void arm(long n) {
  t_fired = false;
  t_until_fail = n;
}
// True if the armed allocation failed since arm().
bool disarm() {
  t_until_fail = -1;
  return t_fired;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs f with allocation n of this thread failing; true if std::bad_alloc
// came out of it. fired: f reached that allocation.
template <typename F>
bool escapes(long n, bool& fired, F&& f) {
  arm(n);
  bool threw = false;
  try {
    f();
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  fired = disarm();
  return threw;
}

// The most allocations a sweep tries: far more than any call here makes.
constexpr long kSweep = 400;

// A registration whose bookkeeping finds no memory is undone in the engine
// too: the next registration takes the engine's first slot again (MR-6: an
// lkey's low 22 bits are its slot + 1), which a region left registered there
// would hold.
TEST(UdpAlloc, ARegistrationShortOfMemoryLeavesNothingRegistered) {
  std::vector<uint8_t> buf(4096);
  long n = 0;
  for (; n < kSweep; ++n) {
    auto ep = open_on("127.0.0.1");
    ASSERT_TRUE(ep);
    MemoryRegion mr;
    Error e;
    bool fired = false;
    ASSERT_FALSE(
        escapes(n, fired, [&] { e = ep->register_memory(buf.data(), buf.size(), kAllAccess, mr); }))
        << "allocation " << n << " of register_memory";
    if (!fired) {
      ASSERT_FALSE(e) << e.message;
      break;  // the call made fewer than n + 1 allocations: all were tried
    }
    if (e) {
      EXPECT_EQ(e.status, Status::kResourceExhausted) << e.message;
      EXPECT_TRUE(has(e.message, "memory")) << "allocation " << n << ": " << e.message;
      MemoryRegion again;
      ASSERT_FALSE(ep->register_memory(buf.data(), buf.size(), kAllAccess, again));
      EXPECT_EQ(again.lkey & ((1u << 22) - 1), 1u)
          << "allocation " << n << ": the failed registration still holds the engine's slot";
    }
  }
  EXPECT_GT(n, 0);
}

// connect_start short of memory for its connection's entry: refused, and
// the engine's connection goes with it, so the peer is asked nothing.
TEST(UdpAlloc, AConnectShortOfMemoryIsRefusedAndSendsNothing) {
  long n = 0;
  for (; n < kSweep; ++n) {
    auto server = open_on("127.0.0.1");
    auto client = open_on("127.0.0.1");
    ASSERT_TRUE(server && client);
    ConnId c;
    Error e;
    bool fired = false;
    ASSERT_FALSE(escapes(n, fired, [&] { e = client->connect_start(server->local_address(), c); }))
        << "allocation " << n << " of connect_start";
    if (!fired) {
      ASSERT_FALSE(e) << e.message;
      break;
    }
    if (!e) continue;  // an allocation the call could do without
    EXPECT_EQ(e.status, Status::kResourceExhausted) << e.message;
    EXPECT_TRUE(has(e.message, "memory")) << "allocation " << n << ": " << e.message;
    ConnId s;
    const auto until = std::chrono::steady_clock::now() + milliseconds(60);
    while (std::chrono::steady_clock::now() < until) {
      client->progress();
      server->progress();
      ASSERT_FALSE(server->try_accept(s)) << "allocation " << n << ": a refused connect connected";
    }
  }
  EXPECT_GT(n, 0);
}

// A server whose round finds no memory for a new connection's entry, its
// place in the accept queue or (bound to the wildcard address) its peer's
// source address: nothing escapes progress(); the connection is either
// accepted whole or closed, its requester told, and the next connect works.
void accept_sweep(const std::string& server_host) {
  long n = 0;
  long dropped = 0;
  for (; n < kSweep; ++n) {
    auto server = open_on(server_host);
    auto client = open_on("127.0.0.1");
    ASSERT_TRUE(server && client);
    const std::string to = "127.0.0.1:" + std::to_string(server->port());
    ConnId c;
    ASSERT_FALSE(client->connect_start(to, c));
    ConnId s;
    bool accepted = false;
    bool threw = false;
    arm(n);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
      const long left = t_until_fail;
      t_until_fail = -1;  // the client's allocations are not swept
      client->progress();
      t_until_fail = left;
      try {
        server->progress();
      } catch (const std::bad_alloc&) {
        threw = true;
        break;
      }
      if (!accepted) accepted = server->try_accept(s);
      const ConnState cs = client->state(c);
      if (accepted && cs == ConnState::kEstablished) break;
      if (cs == ConnState::kClosed || cs == ConnState::kError) break;
    }
    const bool fired = disarm();
    ASSERT_FALSE(threw) << "allocation " << n << " of the server's rounds";
    if (!fired) {
      ASSERT_TRUE(accepted) << "allocation " << n;
      break;
    }
    if (accepted) {
      EXPECT_EQ(client->state(c), ConnState::kEstablished) << "allocation " << n;
      continue;
    }
    // Refused by the engine (CONNECT_REJECT, CONN-4) or dropped by the
    // driver (counted): either way the requester's connection ended.
    const uint64_t by_driver = server->io_stats().accepts_dropped;
    EXPECT_LE(by_driver, 1u) << "allocation " << n;
    dropped += static_cast<long>(by_driver);
    const ConnState cs = client->state(c);
    EXPECT_TRUE(cs == ConnState::kClosed || cs == ConnState::kError)
        << "allocation " << n << ": the requester was never told";
    ConnId c2;
    ASSERT_FALSE(client->connect_start(to, c2));
    bool got = false;
    const auto until2 = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!(got && client->state(c2) == ConnState::kEstablished) &&
           std::chrono::steady_clock::now() < until2) {
      client->progress();
      server->progress();
      if (!got) got = server->try_accept(s);
    }
    EXPECT_TRUE(got && client->state(c2) == ConnState::kEstablished)
        << "allocation " << n << ": the next connect failed";
  }
  EXPECT_GT(n, 0);
  EXPECT_GT(dropped, 0) << "no allocation of the driver's record of the accept was swept";
}

TEST(UdpAlloc, AnAcceptShortOfMemoryIsDroppedNotThrown) { accept_sweep("127.0.0.1"); }

TEST(UdpAlloc, AWildcardServerShortOfMemoryForAnAcceptIsNotThrown) { accept_sweep("0.0.0.0"); }

// A server bound to the wildcard address records the address each peer
// reaches it at (udp/README.md) when the connection's first datagram comes:
// with no memory for that, the peer's source stays where an unknown peer's
// would, nothing escapes progress(), and the server's answers still reach
// the peer (a SEND completes at both ends).
TEST(UdpAlloc, AWildcardServerShortOfMemoryForAPeersSourceStillAnswers) {
  long n = 0;
  for (; n < kSweep; ++n) {
    Pair p = connect_pair("127.0.0.1", test_options(), test_options(), "0.0.0.0");
    ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
    std::vector<uint8_t> sbuf(256, 0x5a), rbuf(256);
    MemoryRegion smr, rmr;
    ASSERT_FALSE(p.client->register_memory(sbuf.data(), sbuf.size(), kAllAccess, smr));
    ASSERT_FALSE(p.server->register_memory(rbuf.data(), rbuf.size(), kAllAccess, rmr));
    ASSERT_FALSE(p.server->recv(p.sconn, 1, rbuf.data(), 256, rmr.lkey));
    ASSERT_FALSE(p.client->send(p.cconn, 2, sbuf.data(), 256, smr.lkey));
    bool sent = false, received = false, threw = false;
    arm(n);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!(sent && received) && std::chrono::steady_clock::now() < until) {
      const long left = t_until_fail;
      t_until_fail = -1;  // the client's allocations are not swept
      p.client->progress();
      Completion x;
      while (p.client->poll_completion(x)) sent = x.status == Status::kOk;
      t_until_fail = left;
      try {
        p.server->progress();
        while (p.server->poll_completion(x)) received = x.status == Status::kOk;
      } catch (const std::bad_alloc&) {
        threw = true;
        break;
      }
    }
    const bool fired = disarm();
    ASSERT_FALSE(threw) << "allocation " << n << " of the server's rounds";
    EXPECT_TRUE(sent && received) << "allocation " << n;
    if (!fired) break;
  }
  EXPECT_GT(n, 0);
}

}  // namespace
}  // namespace metaroce::udp::test
