// Options::thread_safe: several application threads on one endpoint at once,
// with no progress thread, each posting, polling and running rounds itself
// (G11 of docs/design/libfabric-provider.md, FI_THREAD_SAFE).
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "udp_pair.hpp"

namespace {

using namespace std::chrono_literals;
using namespace metaroce;
using namespace metaroce::udp;
using namespace metaroce::udp::test;

constexpr int kClientThreads = 4;
constexpr int kServerThreads = 3;
constexpr uint32_t kPerThread = 1000;  // work requests each client thread posts
constexpr uint32_t kTotal = kClientThreads * kPerThread;
constexpr uint32_t kSlot = 2048;  // bytes of each WRITE target slot and receive buffer
constexpr uint64_t kRecvTag = uint64_t{1} << 40;

Options safe_options() {
  Options o = test_options();
  o.thread_safe = true;
  return o;
}

// How a thread waits for work: each of the three ways a caller runs rounds.
enum class Driver { kProgressAndPoll, kWaitCompletion, kWaitThenPoll };

// Takes one completion (or none), running rounds the way `d` does.
bool take(UdpEndpoint& ep, Driver d, Completion& c) {
  switch (d) {
    case Driver::kProgressAndPoll: (void)ep.progress(); return ep.poll_completion(c);
    case Driver::kWaitCompletion: return ep.wait_completion(c, 1ms);
    case Driver::kWaitThenPoll: ep.wait(1ms); return ep.poll_completion(c);
  }
  return false;
}

// Counts a completion into `seen` (one counter per wr_id) and `bad` (any
// status but kOk, or a wr_id no thread posted).
void account(const Completion& c, uint64_t base, uint32_t n, std::vector<std::atomic<int>>& seen,
             std::atomic<int>& bad) {
  if (c.status != Status::kOk || c.wr_id < base || c.wr_id >= base + n) {
    ++bad;
    return;
  }
  seen[c.wr_id - base].fetch_add(1);
}

// Four client threads post WRITEs and SENDs (alternately) on one connection
// and each polls the endpoint's completions, whichever thread's they are;
// three server threads post the receives for the SENDs and poll theirs.
// Every work request completes once, kOk, on some thread, and every SEND's
// payload (its wr_id) arrives in some receive. Without the option the
// threads' rounds ran the engine at once (a corrupted heap, lost or doubled
// completions).
TEST(UdpThreadSafe, ThreadsPostingAndPollingAtOnceAccountForEveryCompletion) {
  Pair p = connect_pair("127.0.0.1", safe_options(), safe_options());
  ASSERT_TRUE(p.server && p.client);
  UdpEndpoint& client = *p.client;
  UdpEndpoint& server = *p.server;

  std::vector<uint8_t> src(size_t{kTotal} * kSlot);
  std::vector<uint8_t> dst(size_t{kTotal} * kSlot, 0);
  std::vector<uint8_t> rbuf(size_t{kTotal} * kSlot, 0);
  for (uint32_t i = 0; i < kTotal; ++i) {
    const uint64_t id = i;
    std::memcpy(&src[size_t{i} * kSlot], &id, sizeof(id));
    std::memset(&src[size_t{i} * kSlot + sizeof(id)], static_cast<int>(i & 0xff),
                kSlot - sizeof(id));
  }
  MemoryRegion smr, dmr, rmr;
  ASSERT_FALSE(client.register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(server.register_memory(dst.data(), dst.size(), kAllAccess, dmr));
  ASSERT_FALSE(server.register_memory(rbuf.data(), rbuf.size(), kAllAccess, rmr));

  const uint32_t sends = kTotal / 2;  // odd wr_ids are SENDs
  std::vector<std::atomic<int>> sent(kTotal), received(sends);
  std::atomic<int> bad_sent{0}, bad_received{0};
  std::atomic<uint32_t> done_sent{0}, done_received{0};
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  const auto running = [&] { return std::chrono::steady_clock::now() < deadline; };

  std::vector<std::thread> threads;
  for (int t = 0; t < kServerThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto d = static_cast<Driver>(t % 3);
      // Thread t posts receives t, t + kServerThreads, ...: the receive
      // queue takes them in whatever order the threads get there.
      uint32_t next = static_cast<uint32_t>(t);
      while (done_received.load() < sends && running()) {
        while (next < sends) {
          RecvWr wr;
          wr.wr_id = kRecvTag + next;
          wr.addr = reinterpret_cast<uint64_t>(&rbuf[size_t{next} * kSlot]);
          wr.length = kSlot;
          wr.lkey = rmr.lkey;
          const Status s = server.try_post_recv(p.sconn, wr);
          if (s == Status::kQueueFull) break;  // the queue drains as SENDs land
          if (s != Status::kOk) {
            ++bad_received;
            next = sends;
            break;
          }
          next += kServerThreads;
        }
        Completion c;
        if (take(server, d, c)) {
          account(c, kRecvTag, sends, received, bad_received);
          ++done_received;
        }
      }
    });
  }
  for (int t = 0; t < kClientThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto d = static_cast<Driver>(t % 3);
      uint32_t next = static_cast<uint32_t>(t) * kPerThread;
      const uint32_t end = next + kPerThread;
      while (done_sent.load() < kTotal && running()) {
        while (next < end) {
          SendWr wr;
          wr.wr_id = next;
          wr.op = next % 2 == 0 ? WrOpcode::kWrite : WrOpcode::kSend;
          wr.local_addr = reinterpret_cast<uint64_t>(&src[size_t{next} * kSlot]);
          wr.length = 64 + (next * 97) % (kSlot - 64);
          wr.lkey = smr.lkey;
          wr.remote_addr = dmr.addr + uint64_t{next} * kSlot;
          wr.rkey = dmr.rkey;
          const Status s = client.try_post_send(p.cconn, wr);
          if (s == Status::kQueueFull) break;  // completions make room
          if (s != Status::kOk) {
            ++bad_sent;
            next = end;
            break;
          }
          ++next;
        }
        Completion c;
        if (take(client, d, c)) {
          account(c, 0, kTotal, sent, bad_sent);
          ++done_sent;
        }
        // Calls that only read, at the same time.
        if (next % 64 == 0) {
          (void)client.state(p.cconn);
          (void)client.io_stats();
        }
      }
    });
  }
  for (auto& th : threads) th.join();

  EXPECT_EQ(bad_sent.load(), 0);
  EXPECT_EQ(bad_received.load(), 0);
  EXPECT_EQ(done_sent.load(), kTotal);
  EXPECT_EQ(done_received.load(), sends);
  for (uint32_t i = 0; i < kTotal; ++i) EXPECT_EQ(sent[i].load(), 1) << "wr_id " << i;
  for (uint32_t i = 0; i < sends; ++i) EXPECT_EQ(received[i].load(), 1) << "receive " << i;
  // Each SEND's wr_id, at the head of its payload, arrived once; each
  // WRITE's bytes are at its slot.
  std::vector<int> payloads(kTotal, 0);
  for (uint32_t r = 0; r < sends; ++r) {
    uint64_t id = 0;
    std::memcpy(&id, &rbuf[size_t{r} * kSlot], sizeof(id));
    if (id < kTotal) ++payloads[id];
  }
  for (uint32_t i = 1; i < kTotal; i += 2) EXPECT_EQ(payloads[i], 1) << "SEND " << i;
  for (uint32_t i = 0; i < kTotal; i += 2) {
    const uint32_t len = 64 + (i * 97) % (kSlot - 64);
    EXPECT_EQ(std::memcmp(&dst[size_t{i} * kSlot], &src[size_t{i} * kSlot], len), 0)
        << "WRITE " << i;
  }
}

// close() from one thread while others block in wait_completion(): they
// return false (no completion is left) long before their timeout, and none
// is left waiting on, or reading, the fds that close() closes.
TEST(UdpThreadSafe, CloseFromOneThreadEndsTheOthersWaits) {
  auto ep = open_on("127.0.0.1", safe_options());
  ASSERT_TRUE(ep);
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> got{0};
  std::vector<std::thread> waiters;
  for (int t = 0; t < 3; ++t)
    waiters.emplace_back([&] {
      Completion c;
      if (ep->wait_completion(c, 20s)) ++got;
    });
  std::this_thread::sleep_for(100ms);  // (not a race: a wait begun after the close ends at once)
  ep->close();
  for (auto& th : waiters) th.join();
  EXPECT_EQ(got.load(), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// A thread blocked in wait() (no progress thread) and another thread's call
// that gives the endpoint work to send: a post, a connect_start, a close of
// a connection. The blocked thread's round sends it at once. It used to wait
// on epfd until its 1 s epoll slice ended (wake_thread woke only the
// progress thread), so the work left up to 1 s after the call; the slice
// began 100 ms before the call, so that late is 900 ms. The server, on its
// progress thread, counts the datagram's arrival.
TEST(UdpThreadSafe, WorkFromAnotherThreadEndsAWaitAtOnce) {
  enum class Work { kPost, kConnectStart, kClose };
  for (const Work work : {Work::kPost, Work::kConnectStart, Work::kClose}) {
    const char* const name = work == Work::kPost           ? "post"
                             : work == Work::kConnectStart ? "connect_start"
                                                           : "close(conn)";
    SCOPED_TRACE(name);
    Pair p = connect_pair("127.0.0.1", test_options(), safe_options());
    ASSERT_TRUE(p.server && p.client);
    UdpEndpoint& client = *p.client;
    std::vector<uint8_t> src(8, 5), dst(8, 0);
    MemoryRegion smr, dmr;
    ASSERT_FALSE(client.register_memory(src.data(), src.size(), kAllAccess, smr));
    ASSERT_FALSE(p.server->register_memory(dst.data(), dst.size(), kAllAccess, dmr));
    ASSERT_TRUE(p.server->start_progress_thread());

    using Clock = std::chrono::steady_clock;
    std::atomic<bool> stop{false};
    std::atomic<Clock::rep> returned{0};  // the last time a wait() returned
    std::thread waiter([&] {
      while (!stop.load()) {
        client.wait(5s);
        returned.store(Clock::now().time_since_epoch().count());
      }
    });
    std::this_thread::sleep_for(100ms);  // the waiter blocks on epfd
    const uint64_t rx_before = p.server->io_stats().rx_datagrams;
    const auto called = Clock::now();
    ConnId second;
    // (EXPECT, not ASSERT: the waiter must be joined before the test ends.)
    switch (work) {
      case Work::kPost:
        EXPECT_FALSE(client.write(p.cconn, 1, src.data(), 8, smr.lkey, dmr.addr, dmr.rkey));
        break;
      case Work::kConnectStart:
        EXPECT_FALSE(client.connect_start(p.server->local_address(), second));
        break;
      case Work::kClose: EXPECT_TRUE(client.close(p.cconn)); break;
    }
    Clock::time_point arrived{};
    while (Clock::now() - called < 3s) {
      if (p.server->io_stats().rx_datagrams > rx_before) {
        arrived = Clock::now();
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    // (The waiter stores the time just after its round sent the work.)
    while (arrived != Clock::time_point{} && Clock::now() - called < 3s &&
           Clock::time_point{Clock::duration(returned.load())} < called)
      std::this_thread::sleep_for(1ms);
    const Clock::time_point woke{Clock::duration(returned.load())};
    Completion c;
    const bool completed = work == Work::kPost && client.wait_completion(c, 2s);
    stop.store(true);
    EXPECT_TRUE(client.close());  // ends the waiter's wait(5s) (it is thread_safe's)
    waiter.join();
    ASSERT_NE(arrived, Clock::time_point{}) << "nothing reached the server in 3 s";
    const auto ms = [&](Clock::time_point t) {
      return std::chrono::duration_cast<std::chrono::milliseconds>(t - called).count();
    };
    EXPECT_LT(arrived - called, 400ms) << "reached the server " << ms(arrived) << " ms after";
    EXPECT_GE(woke, called) << "the blocked wait() did not return for the work";
    EXPECT_LT(woke - called, 400ms) << "the wait() returned " << ms(woke) << " ms after";
    if (work == Work::kPost) {
      EXPECT_TRUE(completed);
      EXPECT_EQ(c.status, Status::kOk);
      ASSERT_TRUE(p.server->stop_progress_thread());  // (its rounds wrote dst)
      EXPECT_EQ(dst, src);
    }
  }
}

// Another thread's progress() takes a datagram while a thread blocks in
// wait(): the waiter's epoll_wait, woken for the datagram, finds the socket
// empty and waits on, its timer armed for the deadline it saw (the 10 s
// keepalive). The datagram is a READ_REQ, whose response the round sends
// and must resend unless acknowledged (LOSS-8's probe, then the RTO); the
// requester, driven by hand, sends no ACK meanwhile. Only the waiter can
// resend: at once if the round moved its timer. It used not to, and the
// resend waited for the end of the waiter's 1 s wait (950 ms here). As in
// UdpProgressRearm.ATimerTheCallersRoundSetFiresInTheSleepingThread, both
// threads share one CPU and the waiter runs at SCHED_IDLE until the round
// is done, so that the round takes the datagram first.
TEST(UdpThreadSafe, ATimerAnotherThreadsRoundSetEndsAWait) {
  Pair p = connect_pair("127.0.0.1", safe_options());
  ASSERT_TRUE(p.client && p.server);
  UdpEndpoint& server = *p.server;
  std::vector<uint8_t> src(64, 7), dst(64);
  MemoryRegion smr, dmr;
  ASSERT_FALSE(server.register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(p.client->register_memory(dst.data(), dst.size(), kAllAccess, dmr));

  cpu_set_t old_mask, one;
  ASSERT_TRUE(pin_to_one_cpu(old_mask, one));  // the waiter inherits it
  const sched_param prio{0};
  bool taken = false;
  uint64_t resent = 0;
  std::chrono::milliseconds after{0};
  uint64_t id = 0;
  // A try the waiter's round took the datagram in tests nothing (a loaded
  // host may run a SCHED_IDLE thread now and then): another is made.
  for (int attempt = 0; attempt < 5 && !taken; ++attempt) {
    std::atomic<bool> stop{false};
    std::atomic<pid_t> tid{0};
    std::thread waiter([&] {
      (void)sched_setscheduler(0, SCHED_IDLE, &prio);
      tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
      // (1 s: block()'s epoll slice, what a stale timer waited for; and
      // the most the join below waits.)
      while (!stop.load()) server.wait(1s);
    });
    while (tid.load() == 0) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);  // the waiter blocks on epfd
    std::fill(dst.begin(), dst.end(), 0);
    EXPECT_FALSE(p.client->read(p.cconn, ++id, dst.data(), 64, dmr.lkey, smr.addr, smr.rkey));
    (void)p.client->progress();  // the READ_REQ, in the server's socket now (loopback)
    const uint64_t rx_before = server.io_stats().rx_datagrams;
    (void)server.progress();  // takes it, and answers, before the waiter can run
    const IoStats caller = server.io_stats();
    const auto round = std::chrono::steady_clock::now();
    (void)sched_setscheduler(tid.load(), SCHED_OTHER, &prio);
    resent = 0;
    while (resent == 0 && std::chrono::steady_clock::now() - round < 2s) {
      std::this_thread::sleep_for(2ms);
      resent = server.io_stats().tx_datagrams - caller.tx_datagrams;
    }
    after = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                                  round);
    taken = caller.rx_datagrams - rx_before == 1;
    Completion c;
    const bool done = p.client->wait_completion(c, 2s);  // the waiter serves it
    stop.store(true);
    waiter.join();
    EXPECT_TRUE(done);
    EXPECT_EQ(c.status, Status::kOk);
    EXPECT_EQ(c.wr_id, id);
    EXPECT_EQ(dst, src);
    if (!done) break;
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(old_mask), &old_mask), 0);
  ASSERT_TRUE(taken) << "the waiter took the READ_REQ every time: nothing tested";
  EXPECT_GE(resent, 1u) << "no resend in 2 s";
  EXPECT_LT(after, 400ms) << "the unacknowledged response waited for the waiter's stale timer";
}

// Runs `calls` on threads of their own, released together (a spin on a
// counter, so that the calls overlap as closely as they can).
void at_once(const std::vector<std::function<void()>>& calls) {
  std::atomic<size_t> ready{0};
  std::vector<std::thread> threads;
  for (const auto& call : calls)
    threads.emplace_back([&] {
      ++ready;
      while (ready.load() < calls.size()) std::this_thread::yield();
      call();
    });
  for (auto& th : threads) th.join();
}

// start_progress_thread is a public call like any other: under thread_safe,
// several threads may make it at once. They all saw `running` down and each
// started a thread: the mode written by all (ThreadSanitizer: a data race),
// and the second thread assigned over the first, still joinable
// (std::terminate). One thread runs, every call says so, and one stop ends it.
TEST(UdpThreadSafe, ThreadsStartingTheProgressThreadAtOnceStartOne) {
  for (int round = 0; round < 20; ++round) {
    auto ep = open_on("127.0.0.1", safe_options());
    ASSERT_TRUE(ep);
    std::atomic<int> started{0};
    std::vector<std::function<void()>> calls;
    for (int t = 0; t < 4; ++t)
      calls.emplace_back([&, t] {
        if (ep->start_progress_thread(t % 2 ? ProgressMode::kBusy : ProgressMode::kSleeping))
          ++started;
      });
    at_once(calls);
    EXPECT_EQ(started.load(), 4) << "round " << round;
    EXPECT_TRUE(ep->stop_progress_thread());
    EXPECT_TRUE(ep->close());
  }
}

// start_progress_thread on one thread, close() on another: the start came
// between close()'s join and its closing, and its thread ran rounds on the
// closed endpoint; the endpoint then went with the thread still joinable
// (std::terminate). Either the start comes first and close() stops the
// thread, or it comes after and is refused (false).
TEST(UdpThreadSafe, AStartOnOneThreadAndACloseOnAnotherLeaveNoThread) {
  for (int round = 0; round < 20; ++round) {
    auto ep = open_on("127.0.0.1", safe_options());
    ASSERT_TRUE(ep);
    at_once({[&] { (void)ep->start_progress_thread(); }, [&] { EXPECT_TRUE(ep->close()); }});
    EXPECT_FALSE(ep->start_progress_thread()) << "round " << round;  // closed
    ep.reset();  // (terminated where a thread was left)
  }
}

// connect_start on one thread, close() on another: connect_start looked at
// `closed` before the resolver and the route (slow, unlocked) and not after,
// so a close() that ended inside that window left kOk and a connection
// that read kConnecting for good (no round would send its requests). Either
// connect_start is refused (kNotConnected) or its connection reads kClosed
// once close() has returned. A host name, so that the resolver is asked;
// close() starts from 0 to 2 ms later, round by round, to land in the window.
TEST(UdpThreadSafe, AConnectStartBesideACloseIsRefusedOrClosed) {
  const std::string peer = "localhost:" + std::to_string(closed_port("127.0.0.1"));
  int refused = 0;
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    auto ep = open_on("127.0.0.1", safe_options());
    ASSERT_TRUE(ep);
    ConnId id;
    Error e;
    const auto later = std::chrono::microseconds(20 * round);
    at_once({[&] { e = ep->connect_start(peer, id); },
             [&] {
               const auto from = std::chrono::steady_clock::now();
               while (std::chrono::steady_clock::now() - from < later) {
               }
               EXPECT_TRUE(ep->close());
             }});
    if (e.status == Status::kNotConnected) {
      ++refused;
      EXPECT_FALSE(id.valid());
      EXPECT_TRUE(e.message.find("the endpoint is closed") != std::string::npos) << e.message;
      continue;
    }
    ASSERT_EQ(e.status, Status::kOk) << e.message;
    EXPECT_EQ(ep->state(id), ConnState::kClosed);
  }
  std::printf("connect_start refused in %d of 100 rounds\n", refused);
}

}  // namespace
