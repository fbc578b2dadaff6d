// The driver short of memory: a public call either succeeds or returns
// kResourceExhausted naming the memory that ran short, with nothing of it
// left half done (a region the engine holds and the driver does not, a
// connection the engine opened and the driver never recorded), and a round
// of progress() that finds no memory for a new peer or connection drops it,
// as the engine drops what it cannot record: never std::bad_alloc out of the
// driver. This executable replaces the global operator new with one that
// fails one chosen allocation of the calling thread (or, memory staying
// short, every one from it on); each test sweeps that allocation over every
// one its call makes.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <netdb.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "metaroce/udp.hpp"
#include "udp_pair.hpp"

namespace {
// Set: the next allocation on a thread other than the test's (an endpoint's
// progress thread: no other runs) calls stop_progress_thread there, as code
// that the thread runs would; g_self_stop_result then reads 1 for true, 0
// for false, 2 for a std::system_error out of it.
std::atomic<metaroce::udp::UdpEndpoint*> g_self_stop{nullptr};
std::thread::id g_test_thread;
std::atomic<int> g_self_stop_result{-1};
[[gnu::noinline]] void self_stop() {
  metaroce::udp::UdpEndpoint* ep = g_self_stop.exchange(nullptr);
  if (ep == nullptr) return;
  try {
    g_self_stop_result = ep->stop_progress_thread() ? 1 : 0;
  } catch (const std::system_error&) {
    g_self_stop_result = 2;
  }
}
// Set: the next allocation on a thread other than the test's (the
// progress thread) runs it there, once, as code that the thread runs
// would; g_on_progress_done is raised when it returns.
std::atomic<void (*)()> g_on_progress{nullptr};
std::atomic<bool> g_on_progress_done{false};
// Nonzero: getaddrinfo fails with it, as the resolver would (EAI_MEMORY,
// EAI_AGAIN), before it looks anything up.
std::atomic<int> g_resolver_fails{0};
std::atomic<unsigned> g_resolver_calls{0};  // getaddrinfo calls, failed or not
// Allocations left to succeed before the one that fails; -1: none fails.
thread_local long t_until_fail = -1;
thread_local bool t_fired = false;
thread_local bool t_stay = false;  // every allocation after the failed one fails too
// Not inlined into the operators: GCC's -Wmismatched-new-delete would see
// free() of operator new's pointer.
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
}  // namespace

// This executable's getaddrinfo takes the C library's place for the driver
// (linked in statically) and calls it unless told to fail.
extern "C" int getaddrinfo(const char* node, const char* service, const addrinfo* hints,
                           addrinfo** res) {
  g_resolver_calls.fetch_add(1);
  if (const int fail = g_resolver_fails.load(); fail != 0) return fail;
  using Fn = int (*)(const char*, const char*, const addrinfo*, addrinfo**);
  static const auto next = reinterpret_cast<Fn>(::dlsym(RTLD_NEXT, "getaddrinfo"));
  return next(node, service, hints, res);
}

void* operator new(std::size_t n) {
  if (g_self_stop.load(std::memory_order_acquire) != nullptr &&
      std::this_thread::get_id() != g_test_thread)
    self_stop();
  if (g_on_progress.load(std::memory_order_acquire) != nullptr &&
      std::this_thread::get_id() != g_test_thread) {
    if (void (*f)() = g_on_progress.exchange(nullptr); f != nullptr) {
      f();
      g_on_progress_done.store(true, std::memory_order_release);
    }
  }
  if (t_until_fail == 0) {
    if (!t_stay) t_until_fail = -1;
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

void arm(long n, bool stay = false) {
  t_fired = false;
  t_stay = stay;
  t_until_fail = n;
}
// True if the armed allocation failed since arm().
bool disarm() {
  t_until_fail = -1;
  t_stay = false;
  return t_fired;
}

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Runs f with allocation n of this thread failing; true if std::bad_alloc
// came out of it. fired: f reached that allocation.
template <typename F>
bool escapes(long n, bool& fired, F&& f, bool stay = false) {
  arm(n, stay);
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

// The descriptors this process holds (counted with memory to do it).
size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// open() short of memory at any of its allocations (the engine's, the
// driver's tables and batches), once or from then on: null and
// kResourceExhausted saying so, never std::bad_alloc, and every socket it
// had opened closed. std::bad_alloc left open() before.
TEST(UdpAlloc, AnOpenShortOfMemoryIsResourceExhaustedWithNothingLeftOpen) {
  for (const bool stay : {false, true}) {
    long n = 0;
    for (; n < 4000; ++n) {
      const size_t fds = open_fds();
      std::unique_ptr<UdpEndpoint> ep;
      Error e;
      bool fired = false;
      ASSERT_FALSE(escapes(
          n, fired, [&] { ep = UdpEndpoint::open("127.0.0.1:0", test_options(), e); }, stay))
          << "allocation " << n << " of open" << (stay ? ", memory staying short" : "");
      if (!fired) {
        ASSERT_TRUE(ep) << e.message;
        break;
      }
      if (ep) continue;  // an allocation open could do without
      EXPECT_EQ(e.status, Status::kResourceExhausted) << "allocation " << n << ": " << e.message;
      EXPECT_TRUE(has(e.message, "memory")) << "allocation " << n << ": " << e.message;
      EXPECT_EQ(open_fds(), fds) << "allocation " << n << ": descriptors left open";
    }
    EXPECT_GT(n, 0);
    EXPECT_LT(n, 4000) << "open never succeeded";
  }
}

// An Error's words find no memory, every allocation failing from one on:
// the call returns its status and connection all the same, with the fixed
// kOutOfMemoryWords where the words would be, never std::bad_alloc (which
// left every call that builds an error's message before).
TEST(UdpAlloc, AnErrorWhoseWordsFindNoMemoryKeepsItsStatus) {
  auto ep = open_on("127.0.0.1");
  ASSERT_TRUE(ep);
  std::vector<uint8_t> buf(4096);
  MemoryRegion mr, out_mr;
  ASSERT_FALSE(ep->register_memory(buf.data(), buf.size(), kAllAccess, mr));
  const ConnId stranger{0x1234567};
  const RecvWr shared{3, reinterpret_cast<uint64_t>(buf.data()), 64, mr.lkey};
  ConnId out;
  Completion flushed;
  flushed.wr_id = 9;
  flushed.conn = stranger;
  flushed.status = Status::kFlushed;
  const std::vector<std::pair<const char*, std::function<Error()>>> calls = {
      {"register_memory", [&] { return ep->register_memory(nullptr, 64, kAllAccess, out_mr); }},
      {"deregister_memory", [&] { return ep->deregister_memory(mr.lkey + 4096); }},
      {"write", [&] { return ep->write(stranger, 1, buf.data(), 64, mr.lkey, 0, 1); }},
      {"recv", [&] { return ep->recv(stranger, 2, buf.data(), 64, mr.lkey); }},
      {"post_shared_recv", [&] { return ep->post_shared_recv(shared); }},
      {"completion_error", [&] { return ep->completion_error(flushed); }},
      {"accept", [&] { return ep->accept(milliseconds(-1), out); }},
      {"connect_start", [&] { return ep->connect_start("127.0.0.1:4792", out, milliseconds(-1)); }},
      {"connect", [&] { return ep->connect("127.0.0.1:4792", milliseconds(-1), out); }},
  };
  for (const auto& [name, call] : calls) {
    const Error want = call();
    ASSERT_TRUE(want) << name << " succeeded";
    long n = 0;
    for (; n < kSweep; ++n) {
      Error e;
      bool fired = false;
      ASSERT_FALSE(escapes(
          n, fired, [&] { e = call(); }, true))
          << name << ", memory short from allocation " << n;
      if (!fired) break;
      EXPECT_EQ(e.status, want.status) << name << ", allocation " << n << ": " << e.message;
      EXPECT_EQ(e.conn, want.conn) << name << ", allocation " << n;
      EXPECT_FALSE(e.message.empty()) << name << ", allocation " << n;
    }
    EXPECT_GT(n, 0) << name << " built its error without an allocation";
  }
}

// A refusal decided before its words: with no memory at all (every
// allocation failing from the first), an invalid address or a name that
// does not resolve is kInvalidArgument, not kResourceExhausted (the
// explanation was built while the address was judged, and its failure read
// as memory short), in either form of connect_start and in connect.
TEST(UdpAlloc, AnInvalidAddressWithNoMemoryIsStillInvalidArgument) {
  auto ep = open_on("127.0.0.1");
  ASSERT_TRUE(ep);
  PeerAddr wrong_len = ep->local_peer_addr();
  wrong_len.len = 7;
  PeerAddr unmapped = ep->local_peer_addr();
  unmapped.bytes[10] = 0;  // family byte 4 without the v4-mapped prefix
  PeerAddr family5 = ep->local_peer_addr();
  family5.bytes[18] = 5;
  ConnId out{7};
  // Built before memory runs short: the caller's strings, not the driver's.
  const std::vector<std::string> texts = {"host.invalid:5000",
                                          "a-name-longer-than-the-small-string.invalid:5000",
                                          "10.0.1",
                                          "127.0.0.1:70000",
                                          "[::1",
                                          "::1:5"};
  const std::vector<std::pair<std::string, std::function<Error()>>> calls = {
      {"connect_start(PeerAddr) len 7", [&] { return ep->connect_start(wrong_len, out); }},
      {"connect_start(PeerAddr) unmapped", [&] { return ep->connect_start(unmapped, out); }},
      {"connect_start(PeerAddr) family 5",
       [&] { return ep->connect_start(family5, out, milliseconds(10)); }},
      {"connect(PeerAddr) family 5", [&] { return ep->connect(family5, milliseconds(10), out); }},
      {"connect_start(name)", [&] { return ep->connect_start(texts[0], out); }},
      {"connect_start(long name)", [&] { return ep->connect_start(texts[1], out); }},
      {"connect(name)", [&] { return ep->connect(texts[0], milliseconds(10), out); }},
      {"connect_start(10.0.1)", [&] { return ep->connect_start(texts[2], out); }},
      {"connect_start(bad port)", [&] { return ep->connect_start(texts[3], out); }},
      {"connect_start([::1)", [&] { return ep->connect_start(texts[4], out); }},
      {"connect_start(::1:5)", [&] { return ep->connect_start(texts[5], out); }},
  };
  for (const auto& [name, call] : calls) {
    Error e;
    bool fired = false;
    ASSERT_FALSE(escapes(
        0, fired, [&] { e = call(); }, true))
        << name;
    EXPECT_EQ(e.status, Status::kInvalidArgument) << name << ": " << e.message;
    EXPECT_FALSE(out.valid()) << name;
    // With memory, the same refusal in words.
    e = call();
    EXPECT_EQ(e.status, Status::kInvalidArgument) << name << ": " << e.message;
    EXPECT_GT(e.message.size(), std::string(kOutOfMemoryWords).size()) << name << ": " << e.message;
  }
}

// The address calls with no memory: local_address() allocates nothing (its
// text is the endpoint's, formatted at open), and peer_address() returns the
// text or, where it finds no memory to format it, kOutOfMemoryWords; neither
// throws (both returned a std::string formatted per call, and std::bad_alloc
// came out of them). Addresses of more than std::string's own 15 characters
// (127.100.100.100 is loopback on Linux), so that formatting allocates.
TEST(UdpAlloc, TheAddressCallsWithNoMemoryDoNotThrow) {
  auto server = open_on("127.100.100.100");
  auto client = open_on("127.0.0.1");
  ASSERT_TRUE(server && client);
  const std::string server_text = server->local_address();
  ASSERT_GT(server_text.size(), 15u);
  ConnId c;
  ASSERT_FALSE(client->connect_start(server_text, c));
  const std::string peer_text = client->peer_address(c);
  EXPECT_EQ(peer_text, server_text);
  const ConnId stranger{0x1234567};
  std::string local, peer, none;
  local.reserve(64);  // the copy below is the test's: into room it has
  for (long n = 0; n < 4; ++n) {
    bool fired = false;
    ASSERT_FALSE(escapes(
        n, fired,
        [&] {
          local = server->local_address();
          peer = client->peer_address(c);
          none = client->peer_address(stranger);
        },
        true))
        << "memory short from allocation " << n;
    EXPECT_EQ(local, server_text) << "allocation " << n;
    EXPECT_TRUE(peer == peer_text || peer == kOutOfMemoryWords)
        << "allocation " << n << ": " << peer;
    EXPECT_EQ(none, "") << "allocation " << n;
    if (n == 0) {
      EXPECT_EQ(peer, kOutOfMemoryWords) << "with no memory at all";
    }
  }
}

// close() with no memory at all, connections open: it listed them in a
// vector, and std::bad_alloc came out of it (out of the destructor, which
// calls it: std::terminate). They close all the same.
TEST(UdpAlloc, ACloseWithNoMemoryClosesEveryConnection) {
  for (const bool graceful : {true, false}) {
    Pair p = connect_pair("127.0.0.1");
    ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
    ConnId second;
    ASSERT_FALSE(p.client->connect_start(p.server->local_address(), second));
    bool fired = false;
    ASSERT_FALSE(escapes(
        0, fired, [&] { p.client->close(graceful); }, true))
        << (graceful ? "close(true)" : "close(false)");
    EXPECT_EQ(p.client->state(p.cconn), ConnState::kClosed);
    EXPECT_EQ(p.client->state(second), ConnState::kClosed);
  }
}

// The progress thread and path statistics with no memory at all: no thread
// (false, the caller's calls drive progress as before) and an empty vector,
// never std::bad_alloc (std::thread's state, the vector, threw); the array
// form needs no memory and counts the paths all the same.
TEST(UdpAlloc, TheProgressThreadAndPathStatsWithNoMemoryDoNotThrow) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  const std::vector<PathStats> with_memory = p.client->path_stats(p.cconn);
  ASSERT_FALSE(with_memory.empty());
  std::vector<PathStats> v = with_memory;
  PathStats each[64];
  size_t n = 0;
  bool started = true;
  bool fired = false;
  ASSERT_FALSE(escapes(
      0, fired,
      [&] {
        v = p.client->path_stats(p.cconn);
        n = p.client->path_stats(p.cconn, each, 64);
        started = p.client->start_progress_thread();
      },
      true));
  EXPECT_TRUE(v.empty());
  EXPECT_EQ(n, with_memory.size());
  EXPECT_EQ(p.client->path_stats(ConnId{0x1234567}, each, 64), 0u);
  EXPECT_FALSE(started);
  // Nothing changed: the caller drives progress, and the thread starts now.
  std::vector<uint8_t> buf(256, 0x5a), dst(256);
  MemoryRegion smr, rmr;
  ASSERT_FALSE(p.client->register_memory(buf.data(), buf.size(), kAllAccess, smr));
  ASSERT_FALSE(p.server->register_memory(dst.data(), dst.size(), kAllAccess, rmr));
  ASSERT_FALSE(p.client->write(p.cconn, 1, buf.data(), 256, smr.lkey, rmr.addr, rmr.rkey));
  ASSERT_TRUE(p.server->start_progress_thread());
  Completion c;
  ASSERT_TRUE(p.client->wait_completion(c, std::chrono::seconds(5)));
  EXPECT_EQ(c.status, Status::kOk);
  EXPECT_TRUE(p.client->start_progress_thread());
  p.client->stop_progress_thread();
  p.server->stop_progress_thread();
}

// A write on a connection whose send context is not yet taken, memory short
// from any allocation on: kResourceExhausted with nothing queued (or, the
// memory it needed taken first, kOk), never std::bad_alloc.
TEST(UdpAlloc, AWriteWithMemoryStayingShortIsResourceExhausted) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  std::vector<uint8_t> buf(4096, 0x3c);
  MemoryRegion mr;
  ASSERT_FALSE(p.client->register_memory(buf.data(), buf.size(), kAllAccess, mr));
  for (long n = 0; n < kSweep; ++n) {
    Error e;
    bool fired = false;
    ASSERT_FALSE(escapes(
        n, fired, [&] { e = p.client->write(p.cconn, 1, buf.data(), 64, mr.lkey, 0, 1); }, true))
        << "memory short from allocation " << n;
    if (!fired) break;
    if (e) {
      EXPECT_EQ(e.status, Status::kResourceExhausted) << "allocation " << n << ": " << e.message;
      EXPECT_FALSE(e.message.empty());
    }
  }
}

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

// A name the resolver could not look up for want of memory (EAI_MEMORY) is
// kResourceExhausted, saying so, and one the name service did not answer
// for (EAI_AGAIN) kConnectTimeout: neither is a bad address. Both read
// "cannot resolve" with kInvalidArgument before, which sent the caller to
// fix a name that was right. The same in open(), connect(),
// connect_start() and parse_address_checked().
TEST(UdpAlloc, ANameTheResolverCouldNotLookUpIsNoBadAddress) {
  auto ep = open_on("127.0.0.1");
  ASSERT_TRUE(ep);
  struct Case {
    int fail;
    Status status;
    const char* words;
    const char* code;
  };
  for (const Case& k :
       {Case{EAI_MEMORY, Status::kResourceExhausted, "out of memory resolving \"localhost\"",
             "(getaddrinfo: EAI_MEMORY)"},
        Case{EAI_AGAIN, Status::kConnectTimeout,
             "no answer from the name service for \"localhost\"", "(getaddrinfo: EAI_AGAIN"}}) {
    SCOPED_TRACE(k.words);
    g_resolver_fails = k.fail;
    ConnId out;
    const Error start = ep->connect_start("localhost:5000", out);
    const Error connect = ep->connect("localhost:5000", milliseconds(10), out);
    Error opened;
    const auto other = UdpEndpoint::open("localhost:0", test_options(), opened);
    PeerAddr a;
    const Error parsed = parse_address_checked("localhost:5000", 4792, a);
    std::string why;
    const bool parses = parse_address("localhost:5000", 4792, a, &why);
    g_resolver_fails = 0;
    for (const Error* e : {&start, &connect, static_cast<const Error*>(&opened), &parsed}) {
      EXPECT_EQ(e->status, k.status) << e->message;
      EXPECT_TRUE(has(e->message, k.words)) << e->message;
      EXPECT_TRUE(has(e->message, k.code)) << e->message;
      EXPECT_FALSE(has(e->message, "cannot resolve")) << e->message;
    }
    EXPECT_FALSE(other);
    EXPECT_FALSE(out.valid());
    EXPECT_FALSE(parses);
    EXPECT_TRUE(has(why, k.words)) << why;
  }
  // Resolved again, "localhost" parses (as 127.0.0.1 or ::1).
  PeerAddr a;
  const Error ok = parse_address_checked("localhost:5000", 4792, a);
  EXPECT_FALSE(ok) << ok.message;
  EXPECT_EQ(address_port(a), 5000);
}

// The address helpers' non-throwing forms with no memory at all:
// format_address_text and parse_address_checked of a good address allocate
// nothing; a bad one's Error keeps kInvalidArgument with kOutOfMemoryWords.
// The std::string forms throw std::bad_alloc then, as documented.
TEST(UdpAlloc, TheAddressHelpersWithNoMemoryDoNotThrow) {
  PeerAddr v4, v6;
  ASSERT_TRUE(parse_address("127.100.100.100:4792", 0, v4));
  ASSERT_TRUE(parse_address("[fe80::1234:5678:9abc:def0]:65535", 0, v6));
  PeerAddr junk = v4;
  junk.len = 3;
  PeerAddr parsed, bad;
  AddressText t4, t6, tj;
  Error good, wrong_v4, no_bracket, unmapped;
  bool fired = false;
  ASSERT_FALSE(escapes(
      0, fired,
      [&] {
        t4 = format_address_text(v4);
        t6 = format_address_text(v6);
        tj = format_address_text(junk);
        good = parse_address_checked("[::1]:6000", 4792, parsed);
        wrong_v4 = parse_address_checked("10.0.1", 4792, bad);
        no_bracket = parse_address_checked("[::1", 4792, bad);
        unmapped = parse_address_checked("1.2.3.4:99999", 4792, bad);
      },
      true));
  EXPECT_TRUE(fired);  // the words' allocations failed
  EXPECT_EQ(t4.view(), "127.100.100.100:4792");
  EXPECT_EQ(t6.view(), "[fe80::1234:5678:9abc:def0]:65535");
  EXPECT_EQ(tj.view(), "?");
  EXPECT_EQ(std::string(t6.chars), t6.view());  // NUL-terminated
  EXPECT_FALSE(good) << good.message;
  EXPECT_EQ(format_address(parsed), "[::1]:6000");
  for (const Error* e : {&wrong_v4, &no_bracket, &unmapped}) {
    EXPECT_EQ(e->status, Status::kInvalidArgument);
    EXPECT_EQ(e->message, kOutOfMemoryWords);
  }
  // With memory: the same refusals in words, the same text as format_address.
  EXPECT_TRUE(has(parse_address_checked("10.0.1", 4792, bad).message, "not an IPv4 address"));
  EXPECT_EQ(format_address(v6), t6.view());
  EXPECT_TRUE(escapes(
      0, fired, [&] { (void)format_address(v4); }, true));
}

// stop_progress_thread() from the progress thread itself (code the thread
// runs: here the allocator, called in a round that records a connection)
// cannot join the thread: it returns false and changes nothing, and the
// thread goes on serving. It threw std::system_error (EDEADLK) before,
// having told the thread to stop.
TEST(UdpAlloc, AStopFromTheProgressThreadItselfIsRefusedNotThrown) {
  auto server = open_on("127.0.0.1");
  auto client = open_on("127.0.0.1");
  ASSERT_TRUE(server && client);
  ASSERT_TRUE(server->start_progress_thread());
  g_test_thread = std::this_thread::get_id();
  g_self_stop_result = -1;
  g_self_stop = server.get();
  ConnId c, s;
  const Error connected = client->connect(server->local_address(), milliseconds(2000), c);
  g_self_stop = nullptr;
  EXPECT_FALSE(connected) << connected.message;
  EXPECT_EQ(g_self_stop_result, 0) << "1: it stopped, 2: std::system_error, -1: never called";
  // The thread runs on: it accepted the connection, and serves the next.
  const Error accepted = server->accept(milliseconds(2000), s);
  EXPECT_FALSE(accepted) << accepted.message;
  ConnId c2;
  const Error again = client->connect(server->local_address(), milliseconds(2000), c2);
  EXPECT_FALSE(again) << again.message;
  EXPECT_TRUE(server->stop_progress_thread());  // from another thread: joined
  EXPECT_TRUE(server->stop_progress_thread());  // none runs: nothing to do
}

// What code that an endpoint's progress thread runs (the allocator in a
// round that records a connection) did with the endpoint, for the tests
// below; read once g_on_progress_done is up.
UdpEndpoint* g_ep = nullptr;
std::unique_ptr<UdpEndpoint> g_doomed;  // destroyed there
int g_close_result = -1;                // 1 true, 0 false, 2 std::system_error
Error g_connect_words, g_connect_addr_words, g_accept_words;
bool g_waited_completion = true;
std::chrono::steady_clock::duration g_blocked{};

// A server on its progress thread (g_ep; g_doomed's where `doomed`, for
// the hook to destroy: `server` is then null), and a client connected to it
// with `hook` planted for the server's next allocation on that thread: it
// runs in the round that records the connection (`c`, whose connect ended
// with `connected`). `ran`: the hook has returned.
struct HookRun {
  std::unique_ptr<UdpEndpoint> server, client;
  std::string server_addr;
  ConnId c;
  Error connected;
  bool ran = false;
};
HookRun run_in_round(void (*hook)(), bool doomed = false) {
  HookRun r;
  r.server = open_on("127.0.0.1");
  r.client = open_on("127.0.0.1");
  if (!r.server || !r.client || !r.server->start_progress_thread()) return r;
  r.server_addr = r.server->local_address();
  g_ep = r.server.get();
  if (doomed) g_doomed = std::move(r.server);
  g_test_thread = std::this_thread::get_id();
  g_on_progress_done = false;
  g_on_progress = hook;
  r.connected = r.client->connect(r.server_addr, milliseconds(2000), r.c);
  for (int i = 0; i < 1000 && !g_on_progress_done.load(std::memory_order_acquire); ++i)
    std::this_thread::sleep_for(milliseconds(10));
  g_on_progress = nullptr;
  r.ran = g_on_progress_done.load(std::memory_order_acquire);
  return r;
}

// close() on the progress thread itself is refused: false, nothing changed,
// and the thread serves on. The thread joined itself: std::system_error out
// of close() (having told the thread to stop), and then std::terminate from
// the destructor, which found the thread still joinable.
TEST(UdpAlloc, ACloseFromTheProgressThreadItselfIsRefusedNotThrown) {
  g_close_result = -1;
  HookRun r = run_in_round([] {
    try {
      g_close_result = g_ep->close() ? 1 : 0;
    } catch (const std::system_error&) {
      g_close_result = 2;
    }
  });
  ASSERT_TRUE(r.ran);
  EXPECT_FALSE(r.connected) << r.connected.message;
  EXPECT_EQ(g_close_result, 0) << "1: it closed, 2: std::system_error";
  ConnId s, c2;
  const Error accepted = r.server->accept(milliseconds(2000), s);
  EXPECT_FALSE(accepted) << accepted.message;
  const Error again = r.client->connect(r.server_addr, milliseconds(2000), c2);
  EXPECT_FALSE(again) << again.message;
  EXPECT_TRUE(r.server->close());  // from another thread
  EXPECT_TRUE(r.server->close());  // closed already
}

// The blocking calls on the progress thread itself would wait for rounds
// that only that thread runs, and inside its round for the mutex it holds:
// each is refused at once with words that say so. They deadlocked.
TEST(UdpAlloc, BlockingCallsFromTheProgressThreadItselfAreRefusedAtOnce) {
  g_waited_completion = true;
  HookRun r = run_in_round([] {
    const auto t0 = std::chrono::steady_clock::now();
    ConnId id;
    g_connect_words = g_ep->connect("127.0.0.1:9", milliseconds(2000), id);
    PeerAddr nine;
    if (parse_address("127.0.0.1:9", 4792, nine))
      g_connect_addr_words = g_ep->connect(nine, milliseconds(2000), id);
    g_accept_words = g_ep->accept(milliseconds(2000), id);
    Completion comp;
    g_waited_completion = g_ep->wait_completion(comp, milliseconds(2000));
    g_ep->wait(milliseconds(2000));
    g_blocked = std::chrono::steady_clock::now() - t0;
  });
  ASSERT_TRUE(r.ran);
  EXPECT_FALSE(r.connected) << r.connected.message;
  const std::string words = "called on this endpoint's progress thread";
  for (const Error* e : {&g_connect_words, &g_connect_addr_words, &g_accept_words}) {
    EXPECT_EQ(e->status, Status::kInvalidArgument) << e->message;
    EXPECT_TRUE(has(e->message, words)) << e->message;
  }
  EXPECT_TRUE(has(g_connect_words.message, "connect to 127.0.0.1:9")) << g_connect_words.message;
  EXPECT_TRUE(has(g_accept_words.message, "accept on " + r.server_addr)) << g_accept_words.message;
  EXPECT_FALSE(g_waited_completion);
  // All at once: none waited out its 2 s (a generous bound).
  EXPECT_LT(g_blocked, milliseconds(1500));
  ConnId s;
  const Error accepted = r.server->accept(milliseconds(2000), s);  // the thread serves on
  EXPECT_FALSE(accepted) << accepted.message;
}

// The calls below do not wait for rounds, but each takes the endpoint's
// mutex, which the thread holds inside its round: each deadlocked there. The
// hook is given 10 s (generous: it returns at once now); one that never
// returns leaves the server's thread stuck with the mutex, so the server is
// let go of (leaked, never closed) and the test fails rather than hangs.
bool hook_returned(HookRun& r) {
  if (r.ran) return true;
  (void)r.server.release();
  return false;
}
const std::string kInRound =
    "called on this endpoint's progress thread, which holds the endpoint's lock inside its "
    "rounds (nothing done";

Error g_post_words, g_write_words, g_try_post_words;
Status g_try_post = Status::kOk;

// A post there is refused with words that say why: post_send (and write,
// which posts through it) kInvalidArgument naming the call and wr_id, and
// try_post_send kInvalidArgument, which post_send_error there explains.
TEST(UdpAlloc, APostFromTheProgressThreadItselfIsRefusedNotDeadlocked) {
  g_try_post = Status::kOk;
  HookRun r = run_in_round([] {
    SendWr wr;
    wr.wr_id = 41;
    wr.length = 8;
    wr.lkey = 1;
    g_post_words = g_ep->post_send(ConnId{1}, wr);
    uint64_t word = 0;
    g_write_words = g_ep->write(ConnId{1}, 42, &word, sizeof(word), 1, 0, 1);
    g_try_post = g_ep->try_post_send(ConnId{1}, wr);
    g_try_post_words = g_ep->post_send_error(g_try_post, ConnId{1}, wr);
  });
  ASSERT_TRUE(hook_returned(r)) << "the post deadlocked on the progress thread";
  EXPECT_FALSE(r.connected) << r.connected.message;
  EXPECT_EQ(g_try_post, Status::kInvalidArgument);
  for (const Error* e : {&g_post_words, &g_write_words, &g_try_post_words}) {
    EXPECT_EQ(e->status, Status::kInvalidArgument) << e->message;
    EXPECT_TRUE(has(e->message, kInRound)) << e->message;
    EXPECT_EQ(e->conn, 1u) << e->message;
  }
  EXPECT_TRUE(has(g_post_words.message, "post_send (wr_id 41) (conn 0x1): "))
      << g_post_words.message;
  EXPECT_TRUE(has(g_write_words.message, "post_send (wr_id 42) (conn 0x1): "))
      << g_write_words.message;
  ConnId s;
  const Error accepted = r.server->accept(milliseconds(2000), s);  // the thread serves on
  EXPECT_FALSE(accepted) << accepted.message;
}

bool g_polled_one = true, g_polled_read = true;
size_t g_polled_many = 99;

// A poll there finds nothing (the completions stay for a later poll).
TEST(UdpAlloc, APollFromTheProgressThreadItselfFindsNothing) {
  g_polled_one = g_polled_read = true;
  g_polled_many = 99;
  HookRun r = run_in_round([] {
    Completion c[4];
    g_polled_one = g_ep->poll_completion(c[0]);
    g_polled_many = g_ep->poll_completions(c, 4);
    ReadServed served;
    g_polled_read = g_ep->poll_read_served(served);
  });
  ASSERT_TRUE(hook_returned(r)) << "the poll deadlocked on the progress thread";
  EXPECT_FALSE(r.connected) << r.connected.message;
  EXPECT_FALSE(g_polled_one);
  EXPECT_EQ(g_polled_many, 0u);
  EXPECT_FALSE(g_polled_read);
}

IoStats g_io;
EndpointStats g_endpoint;
bool g_conn_stats_found = true;
size_t g_paths = 99, g_path_vector = 99;

// The stats there read as none: all zero, no connection, no path. (The
// thread's own rounds, io_stats().thread_rounds, are never zero elsewhere.)
TEST(UdpAlloc, AStatsCallFromTheProgressThreadItselfReadsNothing) {
  g_conn_stats_found = true;
  g_paths = g_path_vector = 99;
  HookRun r = run_in_round([] {
    g_io = g_ep->io_stats();
    g_endpoint = g_ep->endpoint_stats();
    ConnStats cs;
    g_conn_stats_found = g_ep->conn_stats(ConnId{1}, cs);
    g_paths = g_ep->path_stats(ConnId{1}, nullptr, 0);
    g_path_vector = g_ep->path_stats(ConnId{1}).size();
  });
  ASSERT_TRUE(hook_returned(r)) << "a stats call deadlocked on the progress thread";
  EXPECT_FALSE(r.connected) << r.connected.message;
  EXPECT_EQ(g_io.thread_rounds, 0u);
  EXPECT_EQ(g_endpoint.datagrams_received, 0u);
  EXPECT_FALSE(g_conn_stats_found);
  EXPECT_EQ(g_paths, 0u);
  EXPECT_EQ(g_path_vector, 0u);
  EXPECT_GT(r.server->io_stats().thread_rounds, 0u);  // from another thread: the real ones
}

Error g_register_words, g_deregister_words, g_start_words, g_start_name_words, g_start_addr_words,
    g_conn_error_words, g_recv_words, g_shared_recv_words, g_completion_words;
unsigned g_resolver_calls_in_round = 99;
bool g_accepted_one = true, g_closed_one = true;
ConnState g_state = ConnState::kEstablished;
PeerAddr g_peer;
std::string g_peer_text = "-";
size_t g_moved = 99;
uint16_t g_mtu = 99;

// The rest of the calls that take the mutex: refused with the same words
// (an Error), or nothing (a count, a bool, a value).
TEST(UdpAlloc, TheOtherLockingCallsFromTheProgressThreadItselfReturnAtOnce) {
  g_accepted_one = g_closed_one = true;
  g_state = ConnState::kEstablished;
  g_peer_text = "-";
  g_moved = 99;
  g_mtu = 99;
  HookRun r = run_in_round([] {
    static uint64_t region[8];
    MemoryRegion mr;
    g_register_words = g_ep->register_memory(region, sizeof(region), kAccessLocalWrite, mr);
    g_deregister_words = g_ep->deregister_memory(1);
    ConnId id;
    g_start_words = g_ep->connect_start("127.0.0.1:9", id);
    // A name is refused before the resolver is asked, which may wait on
    // the network inside the round.
    const unsigned resolved_before = g_resolver_calls.load();
    g_start_name_words = g_ep->connect_start("localhost:9", id);
    g_resolver_calls_in_round = g_resolver_calls.load() - resolved_before;
    PeerAddr nine;
    if (parse_address("127.0.0.1:9", 4792, nine))
      g_start_addr_words = g_ep->connect_start(nine, id);
    g_conn_error_words = g_ep->conn_error(ConnId{1});
    RecvWr rwr;
    rwr.wr_id = 43;
    g_recv_words = g_ep->post_recv(ConnId{1}, rwr);
    g_shared_recv_words = g_ep->post_shared_recv(rwr);
    Completion failed;
    failed.wr_id = 44;
    failed.conn = ConnId{1};
    failed.status = Status::kFlushed;
    g_completion_words = g_ep->completion_error(failed);
    g_accepted_one = g_ep->try_accept(id);
    g_closed_one = g_ep->close(ConnId{1});
    g_state = g_ep->state(ConnId{1});
    g_peer = g_ep->peer_addr(ConnId{1});
    g_peer_text = g_ep->peer_address(ConnId{1});
    g_mtu = g_ep->mtu_of(ConnId{1});
    g_moved = g_ep->progress();
    (void)g_ep->uring_enabled();
  });
  ASSERT_TRUE(hook_returned(r)) << "a call deadlocked on the progress thread";
  EXPECT_FALSE(r.connected) << r.connected.message;
  for (const Error* e : {&g_register_words, &g_deregister_words, &g_start_words,
                         &g_start_name_words, &g_start_addr_words, &g_conn_error_words,
                         &g_recv_words, &g_shared_recv_words, &g_completion_words}) {
    EXPECT_EQ(e->status, Status::kInvalidArgument) << e->message;
    EXPECT_TRUE(has(e->message, kInRound)) << e->message;
  }
  EXPECT_TRUE(has(g_start_words.message, "connect to 127.0.0.1:9: ")) << g_start_words.message;
  EXPECT_TRUE(has(g_start_name_words.message, "connect to localhost:9: "))
      << g_start_name_words.message;
  EXPECT_EQ(g_resolver_calls_in_round, 0u) << "the resolver was asked on the progress thread";
  EXPECT_TRUE(has(g_recv_words.message, "post_recv (wr_id 43) (conn 0x1): "))
      << g_recv_words.message;
  // Named as the driver's other words name a connection with no peer known.
  EXPECT_TRUE(has(g_conn_error_words.message, "conn_error (conn 0x1): "))
      << g_conn_error_words.message;
  EXPECT_TRUE(has(g_completion_words.message, "completion_error (wr_id 44) (conn 0x1): "))
      << g_completion_words.message;
  EXPECT_FALSE(g_accepted_one);
  EXPECT_FALSE(g_closed_one);
  EXPECT_EQ(g_state, ConnState::kUnknown);
  EXPECT_EQ(g_peer.len, 0u);
  EXPECT_EQ(g_peer_text, "");
  EXPECT_EQ(g_moved, 0u);
  EXPECT_EQ(g_mtu, 0u);
  // Nothing was done there: the connection the round recorded is served on.
  ConnId s;
  const Error accepted = r.server->accept(milliseconds(2000), s);
  EXPECT_FALSE(accepted) << accepted.message;
  EXPECT_EQ(r.server->state(s), ConnState::kEstablished);
}

// Destroyed on its own progress thread, the endpoint is closed by that
// thread once its round is over (gracefully: the peer is told), and its
// ports are free again. The destructor's join threw std::system_error:
// std::terminate.
TEST(UdpAlloc, ADestroyFromTheProgressThreadItselfClosesAfterItsRound) {
  HookRun r = run_in_round([] { g_doomed.reset(); }, true);
  ASSERT_TRUE(r.ran);
  EXPECT_EQ(g_doomed, nullptr);
  // The connection the round recorded is closed, the peer told: the
  // DISCONNECT may end the client's connect() already.
  ConnId c = r.c;
  if (r.connected) {
    EXPECT_EQ(r.connected.status, Status::kPeerClosed) << r.connected.message;
    c = ConnId{r.connected.conn};
  }
  for (int i = 0; i < 500 && r.client->state(c) == ConnState::kEstablished; ++i)
    r.client->wait(milliseconds(10));
  EXPECT_EQ(r.client->state(c), ConnState::kClosed);
  Error err;
  std::unique_ptr<UdpEndpoint> again;
  for (int i = 0; i < 500 && !again; ++i) {
    again = UdpEndpoint::open(r.server_addr, test_options(), err);
    if (!again) std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_TRUE(again) << err.message;
}

}  // namespace
}  // namespace metaroce::udp::test
