// Helpers shared by the engine unit tests: endpoint settings, registered
// buffers, payload patterns, the work requests most tests post and the
// lossy-path WRITE that the congestion-control and path tests share.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <ostream>
#include <span>
#include <vector>

#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce {

// gtest prints a cause by its number (trace.hpp) rather than as raw bytes.
inline void PrintTo(LossCause c, std::ostream* os) { *os << static_cast<int>(c); }

}  // namespace metaroce

namespace metaroce::test {

inline EndpointConfig cfg(uint64_t seed) {
  EndpointConfig c;
  c.seed = seed;
  c.num_paths = 4;
  return c;
}

// cfg(seed) over `num_paths` paths.
inline EndpointConfig cfg(uint64_t seed, uint8_t num_paths) {
  EndpointConfig c = cfg(seed);
  c.num_paths = num_paths;
  return c;
}

struct Buf {
  std::vector<uint8_t> bytes;
  MemoryRegion mr;
  Buf(Endpoint& ep, size_t n, uint32_t access, uint8_t fill = 0) : bytes(n, fill) {
    EXPECT_EQ(ep.register_memory(bytes.data(), n, access, mr), Status::kOk);
  }
  // Registered with its bytes named from `base` (MR-4).
  Buf(Endpoint& ep, size_t n, uint32_t access, uint8_t fill, uint64_t base) : bytes(n, fill) {
    EXPECT_EQ(ep.register_memory_at(bytes.data(), n, base, access, mr), Status::kOk);
  }
  uint64_t addr(size_t off = 0) const { return mr.addr + off; }
};

// Everything endpoint `ep` sends at `at`, decoded.
inline std::vector<wire::Packet> sent_packets(Endpoint& ep, TimeNs at) {
  std::vector<wire::Packet> out;
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  while (ep.poll_transmit(at, buf, tx)) {
    wire::Packet p;
    EXPECT_EQ(wire::decode(std::span<const uint8_t>(buf.data(), tx.len), p), wire::ParseError::kOk);
    out.push_back(p);
  }
  return out;
}

// Endpoint 0 starts a connection to endpoint 1 (`conn`): the CONNECT_REQ it
// sends at once, empty if none.
inline std::vector<uint8_t> connect_request_of(Loop& loop, ConnId& conn) {
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  EXPECT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), conn), Status::kOk);
  if (!loop.ep(0).poll_transmit(loop.now(), buf, tx)) return {};
  return {buf.begin(), buf.begin() + static_cast<long>(tx.len)};
}

// The path slot of a datagram's path_tag (base header bytes 2-3, PATH-2).
inline uint8_t tag_slot(const std::vector<uint8_t>& d) {
  return wire::path_tag_slot(static_cast<uint16_t>(d[2] << 8 | d[3]));
}

inline void pattern(std::vector<uint8_t>& v, uint8_t seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
}

inline SendWr write_wr(const Buf& src, const Buf& dst, uint32_t len, uint64_t id = 1,
                       size_t dst_off = 0) {
  SendWr wr;
  wr.wr_id = id;
  wr.op = WrOpcode::kWrite;
  wr.local_addr = src.addr();
  wr.length = len;
  wr.lkey = src.mr.lkey;
  wr.remote_addr = dst.addr(dst_off);
  wr.rkey = dst.mr.rkey;
  return wr;
}

// A SEND of len bytes from src at offset off.
inline SendWr send_wr(const Buf& src, size_t off, uint32_t len, uint64_t id = 1) {
  SendWr wr;
  wr.wr_id = id;
  wr.op = WrOpcode::kSend;
  wr.local_addr = src.addr(off);
  wr.length = len;
  wr.lkey = src.mr.lkey;
  return wr;
}

// A READ of len bytes from the peer's (raddr, rkey) into `into`.
inline SendWr read_wr(const Buf& into, uint64_t raddr, uint64_t rkey, uint32_t len,
                      uint64_t id = 1) {
  SendWr wr = write_wr(into, into, len, id);
  wr.op = WrOpcode::kRead;
  wr.remote_addr = raddr;
  wr.rkey = rkey;
  return wr;
}

// Starts a connect from endpoint 0 to 1 and runs until endpoint 0 reports
// an event (connected, or why not): that event.
inline Event first_connect_event(Loop& loop) {
  ConnId a;
  Event ev{};
  EXPECT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  EXPECT_TRUE(loop.run_until([&] { return loop.ep(0).poll_event(ev); }));
  return ev;
}

// A connect from endpoint 0 to 1 (first_connect_event) that fails with `why`.
inline ::testing::AssertionResult connect_fails_with(Loop& loop, Status why) {
  const Event ev = first_connect_event(loop);
  if (ev.kind == EventKind::kConnectFailed && ev.status == why)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "connect event kind " << static_cast<int>(ev.kind) << ", status "
         << status_name(ev.status) << "; want kConnectFailed, " << status_name(why);
}

// Runs until both endpoints have reported a connection closed; endpoint 1's
// kClosed event into `closed_at_1` when given.
inline bool run_until_both_closed(Loop& loop, Event* closed_at_1 = nullptr) {
  bool closed0 = false, closed1 = false;
  return loop.run_until([&] {
    Event ev;
    while (loop.ep(0).poll_event(ev)) closed0 |= ev.kind == EventKind::kClosed;
    while (loop.ep(1).poll_event(ev)) {
      if (ev.kind != EventKind::kClosed) continue;
      closed1 = true;
      if (closed_at_1 != nullptr) *closed_at_1 = ev;
    }
    return closed0 && closed1;
  });
}

// Posts a WRITE of `len` bytes from src to dst (write_wr) on endpoint 0's
// connection a and runs until it completes: a failure unless with kOk.
inline ::testing::AssertionResult write_completes(Loop& loop, ConnId a, const Buf& src,
                                                  const Buf& dst, uint32_t len, uint64_t id = 1) {
  const Status posted = loop.ep(0).post_send(a, write_wr(src, dst, len, id));
  if (posted != Status::kOk)
    return ::testing::AssertionFailure() << "post_send: " << status_name(posted);
  std::vector<Completion> done;
  if (!loop.run_until_completions(0, 1, done))
    return ::testing::AssertionFailure() << "the WRITE did not complete";
  if (done[0].status != Status::kOk)
    return ::testing::AssertionFailure() << "the WRITE completed " << status_name(done[0].status);
  return ::testing::AssertionSuccess();
}

// One WRITE of `len` bytes (a pattern from `fill`) from endpoint 0 over
// connection a; it must complete, every byte landed.
inline void write_and_check(Loop& loop, ConnId a, uint32_t len, uint8_t fill) {
  Buf src(loop.ep(0), len, 0, fill);
  Buf dst(loop.ep(1), len, kAccessRemoteWrite);
  ASSERT_TRUE(write_completes(loop, a, src, dst, len));
  EXPECT_EQ(src.bytes, dst.bytes);
}

// The prologue most loss, congestion and scheduling tests share: endpoint 0
// set up as `c`, endpoint 1 as `peer` (or cfg(peer_seed)), `delay_ns` each
// way (the handshake's too), endpoint 0's connection `a` (endpoint 1's into
// `peer_conn` when given), and `src` (`bytes` of `fill`) and `dst`
// registered after it for WRITEs from 0 to 1.
struct WritePair {
  WritePair(const EndpointConfig& c, const EndpointConfig& peer, uint64_t delay_ns, size_t bytes,
            uint8_t fill, ConnId* peer_conn = nullptr)
      : loop(c, peer),
        a(delayed_connection(loop, delay_ns, peer_conn)),
        src(loop.ep(0), bytes, 0, fill),
        dst(loop.ep(1), bytes, kAccessRemoteWrite) {}
  WritePair(const EndpointConfig& c, uint64_t peer_seed, uint64_t delay_ns, size_t bytes,
            uint8_t fill, ConnId* peer_conn = nullptr)
      : WritePair(c, cfg(peer_seed), delay_ns, bytes, fill, peer_conn) {}
  WritePair(const WritePair&) = delete;
  WritePair& operator=(const WritePair&) = delete;

  Loop loop;
  ConnId a;
  Buf src, dst;

 private:
  static ConnId delayed_connection(Loop& loop, uint64_t delay_ns, ConnId* peer_conn) {
    loop.delay_ns = delay_ns;
    const auto [a, b] = loop.connect();
    if (peer_conn != nullptr) *peer_conn = b;
    return a;
  }
};

// The prologue of the tests of a peer that goes silent (LOSS-8, PATH-6,
// PATH-7): on a connected `loop`, a WRITE of `warm` bytes gives the paths RTT
// samples; from then on every datagram endpoint 0 sends is lost while
// `silent` holds; `src` (256 bytes of `fill`) and `dst` are for the WRITEs
// under test. The loop must outlive it (the drop filter refers to `silent`).
struct SilentPeer {
  SilentPeer(Loop& loop, uint32_t warm, uint8_t fill)
      : a(warmed_connection(loop, warm)),
        src(loop.ep(0), 256, 0, fill),
        dst(loop.ep(1), 256, kAccessRemoteWrite) {
    loop.drop = [this](int from, const std::vector<uint8_t>&) { return silent && from == 0; };
  }
  SilentPeer(const SilentPeer&) = delete;  // the drop filter holds `this`
  SilentPeer& operator=(const SilentPeer&) = delete;

  ConnId a;  // endpoint 0's connection
  bool silent = true;
  Buf src, dst;

 private:
  static ConnId warmed_connection(Loop& loop, uint32_t warm) {
    const ConnId a = loop.connect().first;
    write_and_check(loop, a, warm, 1);
    return a;
  }
};

// One-packet WRITEs, one at a time, so that the paths have RTT samples before
// the case under test. False if one did not complete.
inline bool warm_up_paths(Loop& loop, ConnId a, const Buf& src, const Buf& dst,
                          uint64_t writes = 8) {
  for (uint64_t i = 0; i < writes; ++i) {
    if (loop.ep(0).post_send(a, write_wr(src, dst, 4096, i)) != Status::kOk) return false;
    std::vector<Completion> done;
    if (!loop.run_until_completions(0, 1, done)) return false;
  }
  return true;
}

// One one-packet WRITE on path 0, so that its RTT estimate is exactly one
// sample of the loop's round trip (srtt, and rttvar half of it, LOSS-4).
// initial_rtt must be above that round trip: below it, the tail-loss timer
// (LOSS-8) resends the packet, and the resend's own ACK (LOSS-6) brings a
// second sample after this returns.
inline ::testing::AssertionResult one_rtt_sample(Loop& loop, ConnId a, const Buf& src,
                                                 const Buf& dst) {
  if (!warm_up_paths(loop, a, src, dst, 1)) return ::testing::AssertionFailure() << "no WRITE";
  PathStats ps;
  if (!loop.ep(0).path_stats(a, 0, ps)) return ::testing::AssertionFailure() << "no path 0";
  if (ps.srtt_ns != 2 * loop.delay_ns)
    return ::testing::AssertionFailure() << "srtt " << ps.srtt_ns << " ns";
  if (ps.retransmissions != 0)
    return ::testing::AssertionFailure() << "resent: a second sample on its way";
  return ::testing::AssertionSuccess();
}

// The trace (Endpoint::set_trace) of one endpoint, from its construction
// until its destruction.
class TraceLog {
 public:
  explicit TraceLog(Endpoint& ep) : ep_(ep) {
    ep_.set_trace(
        [](void* ctx, const TraceEvent& ev) { static_cast<TraceLog*>(ctx)->events.push_back(ev); },
        this);
  }
  ~TraceLog() { ep_.set_trace(nullptr, nullptr); }
  TraceLog(const TraceLog&) = delete;  // the sink holds `this`
  TraceLog& operator=(const TraceLog&) = delete;

  // The events of kind k, in order.
  std::vector<TraceEvent> of(TraceKind k) const {
    std::vector<TraceEvent> out;
    for (const TraceEvent& ev : events)
      if (ev.kind == k) out.push_back(ev);
    return out;
  }
  // Why each kLost event's packet was declared lost, in order.
  std::vector<LossCause> loss_causes() const {
    std::vector<LossCause> out;
    for (const TraceEvent& ev : of(TraceKind::kLost)) out.push_back(static_cast<LossCause>(ev.aux));
    return out;
  }

  std::vector<TraceEvent> events;

 private:
  Endpoint& ep_;
};

// An 8 MiB WRITE from an endpoint set up as `c` (4 paths) to one as
// cfg(c.seed + 1), 10 us each way, on which path 0 loses the data packets
// `drop(n)` picks and delivers CE-marked those `mark(n)` picks (n counts its
// data packets from 1); `poll` sees path 0 before each of the sender's
// polls. Returns path 0's stats at the end.
inline PathStats write_over_a_lossy_path(const EndpointConfig& c,
                                         const std::function<bool(uint64_t)>& drop,
                                         const std::function<bool(uint64_t)>& mark,
                                         const std::function<void(const PathStats&)>& poll) {
  Loop loop(c, cfg(c.seed + 1));
  loop.delay_ns = 10'000;
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 8 << 20, 0, 0x33);
  Buf dst(loop.ep(1), 8 << 20, kAccessRemoteWrite);
  PathStats p0;
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, p0));
  uint64_t seen = 0, marked = 0;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 0 || d[1] != 0x01 || tag_slot(d) != 0) return false;
    return drop(++seen);
  };
  loop.mark_ce = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == 0x01 && tx.entropy == p0.entropy && mark(++marked);
  };
  loop.before_poll = [&](int from) {
    PathStats ps;
    if (from == 0 && loop.ep(0).path_stats(a, 0, ps)) poll(ps);
  };
  EXPECT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 8 << 20)), Status::kOk);
  bool done = false;
  EXPECT_TRUE(loop.run_until([&] {
    for (const Completion& d : loop.drain(0)) done |= d.status == Status::kOk;
    return done;
  }));
  EXPECT_EQ(std::memcmp(src.bytes.data(), dst.bytes.data(), src.bytes.size()), 0);
  EXPECT_TRUE(loop.ep(0).path_stats(a, 0, p0));
  return p0;
}

// The same with cfg(seed), its windows bounded by `max_cwnd_packets`.
inline PathStats write_over_a_lossy_path(uint64_t seed, uint32_t max_cwnd_packets,
                                         const std::function<bool(uint64_t)>& drop,
                                         const std::function<bool(uint64_t)>& mark,
                                         const std::function<void(const PathStats&)>& poll) {
  EndpointConfig c = cfg(seed);
  c.cc.max_cwnd_packets = max_cwnd_packets;  // without any signal slow start would not stop
  return write_over_a_lossy_path(c, drop, mark, poll);
}

}  // namespace metaroce::test
