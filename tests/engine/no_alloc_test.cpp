// The hot paths allocate nothing per packet: this executable links the
// counting global operator new / delete (tests/common/alloc_counter.hpp) and
// checks that, once two endpoints have warmed up, a steady stream of 64 KiB
// WRITEs (with their ACKs, with and without loss) and the completions polled
// for them take no allocation at all:
//   * the engine, two Endpoints joined in memory by a preallocated FIFO;
//   * the UDP driver, two UdpEndpoints over 127.0.0.1 driven by progress().
// The stack of the first allocation inside a counted window is printed,
// symbolized, in the failure message after the window closes. Nothing inside
// a window uses gtest macros; results are checked after it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../common/alloc_counter.hpp"
#include "../udp/udp_pair.hpp"
#include "metaroce/engine.hpp"
#include "metaroce/udp.hpp"

namespace {

using metaroce::test::alloc_counter::Counting;
using metaroce::test::alloc_counter::Window;

// Keeps the compiler from eliding the self-test's allocation.
std::vector<int>* volatile g_sink = nullptr;

// The counter sees what it should: one allocation and one release.
TEST(NoAlloc, CounterCountsEveryAllocation) {
  Window w;
  {
    Counting c;
    g_sink = new std::vector<int>();
    delete g_sink;
    w = c.stop();
  }
  EXPECT_EQ(w.news, 1u);
  EXPECT_EQ(w.deletes, 1u);
  EXPECT_NE(w.first_stack.find("operator new"), std::string::npos) << w.first_stack;
  {
    Counting c;
    auto* a = new (std::align_val_t{64}) uint8_t[100];
    auto* b = new (std::nothrow) int[3];
    ::operator delete[](a, std::align_val_t{64});
    delete[] b;
    w = c.stop();
  }
  EXPECT_EQ(w.news, 2u);
  EXPECT_EQ(w.deletes, 2u);
}

// ------------------------------------------------------------ engine

using metaroce::Completion;
using metaroce::ConnId;
using metaroce::Endpoint;
using metaroce::EndpointConfig;
using metaroce::MemoryRegion;
using metaroce::PeerAddr;
using metaroce::RxDatagram;
using metaroce::SendWr;
using metaroce::Status;
using metaroce::TimeNs;
using metaroce::TxDatagram;
using metaroce::WrOpcode;

constexpr uint32_t kChunk = 64 * 1024;
constexpr size_t kBufBytes = 4 << 20;  // WRITEs cycle through this buffer
constexpr size_t kOutstanding = 16;    // WRITEs kept posted

// Two endpoints joined by one fixed delay, in memory, with every buffer
// allocated up front. (tests/engine/loop.hpp copies each datagram into a new
// vector and the harness's Network grows its link queues on demand: both
// allocate per packet themselves.) A constant delay keeps arrivals in sending
// order, so the wire is one FIFO ring of fixed-size slots.
class Wire {
 public:
  static constexpr size_t kSlots = 8192;
  static constexpr size_t kSlotBytes = 4096 + 128;  // mtu + 128 (engine.hpp)
  static constexpr uint64_t kDelayNs = 2000;
  uint64_t drop_every = 0;  // drop every Nth datagram sent (either way); 0: none
  uint64_t burst = 1;       // ... and the burst - 1 datagrams after it
  // A burst also ends this long after it began, as an outage does: a sender
  // whose peer went silent backs its PROBEs off (PATH-6), and a burst counted
  // in datagrams alone would then outlast PATH-7's peer timeout.
  static constexpr uint64_t kBurstMaxNs = 20'000'000;
  uint64_t dropped = 0;
  uint64_t overflowed = 0;  // datagrams lost because the ring was full (a test bug)

  explicit Wire(uint64_t seed) : slots_(kSlots), txbuf_(kSlotBytes) {
    for (int i = 0; i < 2; ++i) {
      EndpointConfig c;
      c.seed = seed + static_cast<uint64_t>(i);
      c.num_paths = 4;
      ep_[i] = std::make_unique<Endpoint>(c);
      addr_[i].len = 1;
      addr_[i].bytes[0] = static_cast<uint8_t>('A' + i);
    }
  }
  Endpoint& ep(int i) { return *ep_[i]; }

  std::pair<ConnId, ConnId> connect() {
    ConnId a, b;
    if (ep_[0]->connect(addr_[1], now_, a) != Status::kOk) return {};
    bool up = false;
    for (int steps = 0; steps < 100000 && !(up && b.valid()); ++steps) {
      if (!step()) break;
      metaroce::Event ev;
      while (ep_[1]->poll_event(ev))
        if (ev.kind == metaroce::EventKind::kAccepted) b = ev.conn;
      while (ep_[0]->poll_event(ev))
        if (ev.kind == metaroce::EventKind::kConnected) up = true;
    }
    if (!up) return {};
    return {a, b};
  }

  // Sends what both endpoints have, advances to the next arrival or timer and
  // handles everything due then. False when nothing is left to do.
  bool step() {
    pump();
    TimeNs next = std::min(ep_[0]->next_timeout(), ep_[1]->next_timeout());
    if (count_ != 0) next = std::min(next, slots_[head_].at);
    if (next == TimeNs::never()) return false;
    now_ = std::max(now_, next);
    while (count_ != 0 && slots_[head_].at <= now_) {
      const Slot& s = slots_[head_];
      RxDatagram dg;
      dg.peer = addr_[1 - s.to];
      dg.entropy = s.entropy;
      dg.bytes = std::span<const uint8_t>(s.bytes, s.len);
      ep_[s.to]->handle_datagram(dg, now_);
      head_ = (head_ + 1) % kSlots;
      --count_;
      pump();  // drain after every input (engine.hpp)
    }
    for (int i = 0; i < 2; ++i)
      if (ep_[i]->next_timeout() <= now_) ep_[i]->handle_timeout(now_);
    pump();
    return true;
  }

  // Runs everything due within the next `ns`, then lets the clock reach it.
  void idle_for(uint64_t ns) {
    const TimeNs end = now_ + ns;
    while (std::min(ep_[0]->next_timeout(), ep_[1]->next_timeout()) <= end && step()) {
    }
    now_ = std::max(now_, end);
  }

 private:
  struct Slot {
    TimeNs at;
    int to = 0;
    uint16_t entropy = 0;
    size_t len = 0;
    uint8_t bytes[kSlotBytes];
  };

  void pump() {
    TxDatagram tx;
    for (int i = 0; i < 2; ++i) {
      while (ep_[i]->poll_transmit(now_, txbuf_, tx)) {
        if (drop_every != 0 && ++sent_ % drop_every == 0) burst_start_ = now_;
        if (drop_every != 0 && sent_ % drop_every < burst &&
            now_.since(burst_start_) < kBurstMaxNs) {
          ++dropped;
          continue;
        }
        if (count_ == kSlots || tx.len > kSlotBytes) {
          ++overflowed;
          continue;
        }
        Slot& s = slots_[(head_ + count_) % kSlots];
        ++count_;
        s.at = now_ + kDelayNs;
        s.to = 1 - i;
        s.entropy = tx.entropy;
        s.len = tx.len;
        std::memcpy(s.bytes, txbuf_.data(), tx.len);
      }
    }
  }

  std::unique_ptr<Endpoint> ep_[2];
  PeerAddr addr_[2];
  TimeNs now_{1'000'000};
  std::vector<Slot> slots_;
  std::vector<uint8_t> txbuf_;
  size_t head_ = 0, count_ = 0;
  uint64_t sent_ = 0;
  TimeNs burst_start_{0};
};

struct EngineRun {
  uint64_t completed = 0;
  uint64_t failed = 0;   // completions with a status other than kOk
  uint64_t refused = 0;  // post_send that did not return kOk
  bool stuck = false;    // nothing left to do before every WRITE completed
};

// A WRITE stream from endpoint 0 to endpoint 1 with kOutstanding WRITEs of
// kChunk bytes posted at all times, until `writes` have completed.
class EngineStream {
 public:
  EngineStream(Wire& w, ConnId conn) : w_(w), conn_(conn), src_(kBufBytes), dst_(kBufBytes) {
    for (size_t i = 0; i < src_.size(); ++i) src_[i] = static_cast<uint8_t>(i * 7 + (i >> 9));
    EXPECT_EQ(w.ep(0).register_memory(src_.data(), src_.size(), 0, smr_), Status::kOk);
    EXPECT_EQ(w.ep(1).register_memory(dst_.data(), dst_.size(), metaroce::kAccessRemoteWrite, dmr_),
              Status::kOk);
  }

  EngineRun run(uint64_t writes) {
    EngineRun r;
    uint64_t posted = 0;
    const auto post = [&] {
      const uint64_t off = (next_id_ * kChunk) % kBufBytes;
      SendWr wr;
      wr.wr_id = next_id_++;
      wr.op = WrOpcode::kWrite;
      wr.local_addr = smr_.addr + off;
      wr.length = kChunk;
      wr.lkey = smr_.lkey;
      wr.remote_addr = dmr_.addr + off;
      wr.rkey = dmr_.rkey;
      if (w_.ep(0).post_send(conn_, wr) != Status::kOk) ++r.refused;
      ++posted;
    };
    while (posted < std::min<uint64_t>(writes, kOutstanding)) post();
    while (r.completed < writes) {
      if (!w_.step()) {
        r.stuck = true;
        break;
      }
      Completion c;
      while (w_.ep(0).poll_completion(c)) {
        ++r.completed;
        if (c.status != Status::kOk) ++r.failed;
        if (posted < writes) post();
      }
    }
    return r;
  }

  bool dst_matches_src() const { return src_ == dst_; }

 private:
  Wire& w_;
  ConnId conn_;
  std::vector<uint8_t> src_, dst_;
  MemoryRegion smr_{}, dmr_{};
  uint64_t next_id_ = 0;
};

// Warm-up of `warm_writes`, then a counted window of `writes` WRITEs; with
// drop_every, every drop_every-th datagram (data and ACKs) is lost in both.
void engine_steady_state(uint64_t drop_every, uint64_t warm_writes, uint64_t writes,
                         uint64_t burst = 1) {
  auto w = std::make_unique<Wire>(42);
  auto [a, b] = w->connect();
  ASSERT_TRUE(a.valid());
  ASSERT_TRUE(b.valid());
  w->drop_every = drop_every;
  w->burst = burst;
  EngineStream s(*w, a);

  const EngineRun warm = s.run(warm_writes);
  ASSERT_FALSE(warm.stuck);
  ASSERT_EQ(warm.completed, warm_writes);
  ASSERT_EQ(warm.failed, 0u);
  ASSERT_EQ(warm.refused, 0u);

  ASSERT_NE(w->ep(0).conn_stats(a), nullptr);
  const uint64_t retx_before = w->ep(0).conn_stats(a)->retransmissions;
  const uint64_t timeouts_before = w->ep(0).conn_stats(a)->timeouts;
  const uint64_t dropped_before = w->dropped;
  Window win;
  EngineRun r;
  {
    Counting c;
    r = s.run(writes);
    win = c.stop();
  }
  const uint64_t retx = w->ep(0).conn_stats(a)->retransmissions - retx_before;
  const uint64_t timeouts = w->ep(0).conn_stats(a)->timeouts - timeouts_before;
  EXPECT_FALSE(r.stuck);
  EXPECT_EQ(r.completed, writes);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.refused, 0u);
  EXPECT_EQ(w->overflowed, 0u);
  EXPECT_TRUE(s.dst_matches_src());
  if (drop_every != 0) {
    EXPECT_GT(retx, 0u) << "the lossy run retransmitted nothing";
  }
  if (burst > 1) {
    EXPECT_GT(timeouts, 0u) << "the burst losses fired no retransmission timeout";
  }
  std::printf(
      "engine, drop %llu of every %llu: %llu WRITEs of %u bytes (%llu dropped, %llu "
      "retransmits, %llu timeouts): %llu news, %llu deletes\n",
      static_cast<unsigned long long>(drop_every == 0 ? 0 : burst),
      static_cast<unsigned long long>(drop_every), static_cast<unsigned long long>(writes), kChunk,
      static_cast<unsigned long long>(w->dropped - dropped_before),
      static_cast<unsigned long long>(retx), static_cast<unsigned long long>(timeouts),
      static_cast<unsigned long long>(win.news), static_cast<unsigned long long>(win.deletes));
  EXPECT_EQ(win.news, 0u) << win.first_stack;
  EXPECT_EQ(win.deletes, 0u);
}

// A connection quiet for context_idle_ns gives its tracking contexts back to
// the endpoint's pools and takes them again with its next WRITE: neither
// allocates. The first give-back grew the pool (a pointer) and allocated in
// the middle of steady traffic whenever a loaded host paused it that long.
TEST(NoAlloc, EngineIdleConnectionGivesBackAndRetakesItsContexts) {
  auto w = std::make_unique<Wire>(43);
  auto [a, b] = w->connect();
  ASSERT_TRUE(a.valid() && b.valid());
  EngineStream s(*w, a);
  ASSERT_EQ(s.run(64).completed, 64u);
  const uint64_t idle = 2 * w->ep(0).config().context_idle_ns;
  Window win;
  {
    Counting c;
    for (int round = 0; round < 3; ++round) {
      w->idle_for(idle);
      EXPECT_EQ(s.run(64).completed, 64u);
    }
    win = c.stop();
  }
  EXPECT_TRUE(s.dst_matches_src());
  EXPECT_EQ(win.news, 0u) << win.first_stack;
  EXPECT_EQ(win.deletes, 0u);
}

// 16 MiB of warm-up, then 32 MiB counted.
TEST(NoAlloc, EngineSteadyWrites) { engine_steady_state(0, 256, 512); }

// Every 97th datagram lost, data and ACKs alike: loss detection, fast
// retransmits and retransmission timeouts run inside the window.
TEST(NoAlloc, EngineSteadyWritesWithLoss) { engine_steady_state(97, 256, 512); }

// Every 5th datagram lost: enough that retransmissions are lost too and
// retransmission timeouts fire.
TEST(NoAlloc, EngineSteadyWritesWithHeavyLoss) { engine_steady_state(5, 256, 512); }

// 600 datagrams in a row lost out of every 4000 (or 20 ms of them): whole
// windows vanish, so retransmission timeouts fire.
TEST(NoAlloc, EngineSteadyWritesWithBurstLoss) { engine_steady_state(4000, 256, 512, 600); }

// ------------------------------------------------------------ UDP driver

using metaroce::udp::Error;
using metaroce::udp::Options;
using metaroce::udp::UdpEndpoint;

constexpr uint32_t kAllAccess =
    metaroce::kAccessLocalWrite | metaroce::kAccessRemoteWrite | metaroce::kAccessRemoteRead;

struct UdpRun {
  uint64_t completed = 0;
  uint64_t failed = 0;
  uint64_t refused = 0;
  bool timed_out = false;
};

// kOutstanding WRITEs posted at all times until `writes` completed, both ends
// driven by progress() on this thread.
UdpRun udp_stream(UdpEndpoint& client, UdpEndpoint& server, ConnId conn, const uint8_t* src,
                  const MemoryRegion& smr, const MemoryRegion& dmr, uint64_t& next_id,
                  uint64_t writes) {
  UdpRun r;
  uint64_t posted = 0;
  const auto post = [&] {
    const uint64_t off = (next_id * kChunk) % kBufBytes;
    const Error e =
        client.write(conn, next_id, src + off, kChunk, smr.lkey, dmr.addr + off, dmr.rkey);
    if (e) ++r.refused;
    ++next_id;
    ++posted;
  };
  while (posted < std::min<uint64_t>(writes, kOutstanding)) post();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (r.completed < writes) {
    if (std::chrono::steady_clock::now() > deadline) {
      r.timed_out = true;
      break;
    }
    client.progress();
    server.progress();
    Completion c;
    while (client.poll_completion(c)) {
      ++r.completed;
      if (c.status != Status::kOk) ++r.failed;
      if (posted < writes) post();
    }
  }
  return r;
}

void udp_steady_state(bool offloads, const std::string& server_host = "") {
  Options o = metaroce::udp::test::test_options();
  o.gso = o.gro = o.io_uring = offloads;
  metaroce::udp::test::Pair p = metaroce::udp::test::connect_pair("127.0.0.1", o, o, server_host);
  ASSERT_TRUE(p.server && p.client && p.cconn.valid() && p.sconn.valid());
  UdpEndpoint* const client = p.client.get();
  UdpEndpoint* const server = p.server.get();
  const ConnId cconn = p.cconn;

  std::vector<uint8_t> src(kBufBytes), dst(kBufBytes, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 13 + (i >> 11));
  MemoryRegion smr{}, dmr{};
  ASSERT_FALSE(client->register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(server->register_memory(dst.data(), dst.size(), kAllAccess, dmr));

  uint64_t next_id = 0;
  const UdpRun warm = udp_stream(*client, *server, cconn, src.data(), smr, dmr, next_id, 256);
  ASSERT_FALSE(warm.timed_out);
  ASSERT_EQ(warm.completed, 256u);
  ASSERT_EQ(warm.failed, 0u);
  ASSERT_EQ(warm.refused, 0u);

  constexpr uint64_t kWrites = 1024;  // 64 MiB
  Window w;
  UdpRun r;
  {
    Counting c;
    r = udp_stream(*client, *server, cconn, src.data(), smr, dmr, next_id, kWrites);
    w = c.stop();
  }
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.completed, kWrites);
  EXPECT_EQ(r.failed, 0u);
  EXPECT_EQ(r.refused, 0u);
  EXPECT_EQ(src, dst);
  const metaroce::udp::IoStats io = client->io_stats();
  std::printf(
      "udp: %llu WRITEs of %u bytes (gso %d, gro %d, io_uring %d; %llu tx datagrams "
      "total): %llu news, %llu deletes\n",
      static_cast<unsigned long long>(kWrites), kChunk, client->gso_enabled(),
      client->gro_enabled(), client->uring_enabled(),
      static_cast<unsigned long long>(io.tx_datagrams), static_cast<unsigned long long>(w.news),
      static_cast<unsigned long long>(w.deletes));
  EXPECT_EQ(w.news, 0u) << w.first_stack;
  EXPECT_EQ(w.deletes, 0u);
}

// GSO, GRO and io_uring where the kernel offers them (the defaults).
TEST(NoAlloc, UdpSteadyWrites) { udp_steady_state(true); }

// One datagram per message, sendmmsg / recvmmsg.
TEST(NoAlloc, UdpSteadyWritesWithoutOffloads) { udp_steady_state(false); }

// A server bound to 0.0.0.0 names each answer's source (IP_PKTINFO) from
// what it learned of the peer: without allocating per packet either.
TEST(NoAlloc, UdpSteadyWritesToAWildcardServer) { udp_steady_state(true, "0.0.0.0"); }

}  // namespace

// A wildcard-bound server notes the address each datagram reached it at
// before the engine has judged the datagram: junk from ever new sources (a
// flood with spoofed addresses) must cost no allocation per source.
TEST(NoAlloc, UdpJunkFromNewSourcesToAWildcardServer) {
  auto server = metaroce::udp::test::open_on("0.0.0.0");
  ASSERT_TRUE(server);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(server->port());
  std::vector<int> fds;  // one source port each
  for (int i = 0; i < 300; ++i) {
    const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in me = to;
    me.sin_port = 0;
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)), 0);
    fds.push_back(fd);
  }
  uint8_t junk[64];
  std::memset(junk, 0x5a, sizeof(junk));  // a dst_conn no connection has
  auto flood = [&](size_t from, size_t to_fd) {
    for (size_t i = from; i < to_fd; ++i) {
      (void)::sendto(fds[i], junk, sizeof(junk), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
      if (i % 16 == 15) server->progress();
    }
    for (int k = 0; k < 20; ++k) server->progress();
  };
  flood(0, 44);  // warm-up
  Window w;
  {
    Counting c;
    flood(44, fds.size());
    w = c.stop();
  }
  for (const int fd : fds) ::close(fd);
  EXPECT_EQ(server->io_stats().rx_datagrams, fds.size());
  EXPECT_EQ(w.news, 0u) << w.first_stack;
}
