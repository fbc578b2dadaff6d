// metaroce-perf: throughput and latency over the UDP driver, the counterpart
// of ib_write_bw / ib_read_bw / ib_send_lat and iperf3.
//
//   metaroce-perf server [ADDR]              (default 0.0.0.0:4792)
//   metaroce-perf client ADDR --op write --size 65536 --duration 10 --verify
//
// Control exchange, over the engine's own SEND/RECV on the test connection:
//   client -> server  Hello   {op, size, qd, verify, bidir, client buffer addr/rkey/len}
//   server -> client  HelloAck{server buffer addr/rkey/len}
//   ... the test: WRITE (WRITE_IMM with imm = sequence number when verifying),
//       READ, or SEND; with --bidir the server runs the same load back ...
//   client -> server  Done    {messages, bytes}
//   server -> client  Result  {verify errors, messages and bytes received, reverse-direction
//   figures}
// Verification: the source of message `seq` holds pattern(seq) (READ: the
// server's slot s holds pattern(s)); the receiving side checks every byte.
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "metaroce/udp.hpp"

using namespace std::chrono_literals;
using metaroce::Completion;
using metaroce::CompletionOp;
using metaroce::ConnId;
using metaroce::MemoryRegion;
using metaroce::Status;
using metaroce::udp::Error;
using metaroce::udp::UdpEndpoint;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMagic = 0x4d525046;  // "MRPF"
constexpr uint32_t kAllAccess =
    metaroce::kAccessLocalWrite | metaroce::kAccessRemoteWrite | metaroce::kAccessRemoteRead;
constexpr uint64_t kCtrlWrId = 1ull << 62;  // control work requests
constexpr uint64_t kSinkWrId = 1ull << 61;  // sink receive buffers

enum class Op : uint32_t { kWrite = 0, kRead = 1, kSend = 2 };
enum class MsgType : uint32_t { kHello = 1, kHelloAck = 2, kDone = 3, kResult = 4 };

struct Ctrl {
  uint32_t magic = kMagic;
  MsgType type = MsgType::kHello;
  uint32_t op = 0;
  uint32_t size = 0;
  uint32_t qd = 0;
  uint32_t verify = 0;
  uint32_t bidir = 0;
  uint32_t pad = 0;
  uint64_t addr = 0;  // buffer the peer may WRITE/READ
  uint64_t rkey = 0;
  uint64_t len = 0;
  uint64_t messages = 0;  // Done: sent; Result: received
  uint64_t bytes = 0;
  uint64_t verify_errors = 0;  // Result
  uint64_t rev_messages = 0;   // Result: the server's own load (bidir)
  uint64_t rev_bytes = 0;
  uint64_t rev_retx = 0;
  uint64_t rev_ns = 0;
};

volatile std::sig_atomic_t g_stop = 0;

inline double dbl(uint64_t v) { return static_cast<double>(v); }

// --- pattern ---
inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

void pattern_fill(uint8_t* p, size_t n, uint64_t seq) {
  const uint64_t base = mix(seq + 1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = base + i * 0x9e3779b97f4a7c15ull;
    std::memcpy(p + i, &w, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<uint8_t>((base >> (i & 7) * 8) + i);
}

// Bytes that differ from pattern(seq).
uint64_t pattern_check(const uint8_t* p, size_t n, uint64_t seq) {
  const uint64_t base = mix(seq + 1);
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = base + i * 0x9e3779b97f4a7c15ull;
    uint64_t got;
    std::memcpy(&got, p + i, 8);
    if (got != w) {
      for (int b = 0; b < 8; ++b) bad += ((got ^ w) >> (b * 8) & 0xff) != 0 ? 1 : 0;
    }
  }
  for (; i < n; ++i) bad += p[i] != static_cast<uint8_t>((base >> (i & 7) * 8) + i) ? 1 : 0;
  return bad;
}

// For a WRITE target slot: by the time the receiver sees message seq's
// completion, the sender may legitimately have reused the slot for seq +
// stride, seq + 2 stride ... (its completion for seq only needs the ACK, which
// can leave before the receiving application polls). Each 8-byte word must
// equal the pattern of seq or of one of those later messages.
uint64_t pattern_check_slot(const uint8_t* p, size_t n, uint64_t seq, uint64_t stride) {
  constexpr int kAlts = 8;
  uint64_t base[kAlts + 1];
  for (int a = 0; a <= kAlts; ++a) base[a] = mix(seq + uint64_t(a) * stride + 1);
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t got;
    std::memcpy(&got, p + i, 8);
    if (got == base[0] + i * 0x9e3779b97f4a7c15ull) continue;
    bool ok = false;
    for (int a = 1; a <= kAlts && !ok; ++a) ok = got == base[a] + i * 0x9e3779b97f4a7c15ull;
    if (!ok) {
      const uint64_t diff = got ^ (base[0] + i * 0x9e3779b97f4a7c15ull);
      for (int b = 0; b < 8; ++b) bad += (diff >> (b * 8) & 0xff) != 0 ? 1 : 0;
    }
  }
  for (; i < n; ++i) {
    bool ok = false;
    for (int a = 0; a <= kAlts && !ok; ++a)
      ok = p[i] == static_cast<uint8_t>((base[a] >> (i & 7) * 8) + i);
    bad += ok ? 0 : 1;
  }
  return bad;
}

struct AlignedBuf {
  std::vector<uint64_t> words;
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words.data()); }
  void resize(size_t bytes) { words.assign((bytes + 7) / 8 + 8, 0); }
  size_t size() const { return words.size() * 8; }
};

struct TestParams {
  Op op = Op::kWrite;
  uint32_t size = 65536;
  uint32_t qd = 16;
  bool verify = false;
  bool bidir = false;
};

// The receiving side of a test: a ring of receive buffers (SEND data,
// WRITE_IMM notifications and control messages) plus the exposed memory.
struct Sink {
  UdpEndpoint* ep = nullptr;
  ConnId conn;
  TestParams p;
  AlignedBuf mem;  // exposed to the peer: WRITE target or READ source, qd slots
  MemoryRegion mem_mr;
  AlignedBuf rbuf;  // receive ring
  MemoryRegion rbuf_mr;
  uint32_t rslot = 0;
  uint32_t rcount = 0;
  uint64_t next_seq = 0;  // data messages received (SEND / WRITE_IMM)
  uint64_t bytes = 0;
  uint64_t verify_errors = 0;
  std::deque<Ctrl> ctrl;  // control messages that arrived
  bool repost = true;     // put consumed buffers back (not the server's one-shot Hello buffer)

  // count 0: enough buffers for qd messages in flight plus control.
  bool setup(UdpEndpoint& e, ConnId c, const TestParams& tp, uint32_t rq_depth,
             uint32_t count = 0) {
    ep = &e;
    conn = c;
    p = tp;
    rslot = std::max<uint32_t>(static_cast<uint32_t>(sizeof(Ctrl)), p.op == Op::kSend ? p.size : 0);
    rcount = count != 0 ? count : std::min<uint32_t>(rq_depth - 4, 2 * p.qd + 16);
    rbuf.resize(size_t{rslot} * rcount);
    if (ep->register_memory(rbuf.data(), rbuf.size(), kAllAccess, rbuf_mr)) return false;
    for (uint32_t i = 0; i < rcount; ++i)
      if (post(i)) return false;
    return true;
  }

  bool expose(uint32_t size, uint32_t qd, bool fill) {
    mem.resize(size_t{size} * qd);
    if (fill)
      for (uint32_t s = 0; s < qd; ++s) pattern_fill(mem.data() + size_t{s} * size, size, s);
    return !ep->register_memory(mem.data(), mem.size(), kAllAccess, mem_mr);
  }

  Error post(uint32_t i) {
    return ep->recv(conn, kSinkWrId | i, rbuf.data() + size_t{i} * rslot, rslot, rbuf_mr.lkey);
  }

  // A receive completion for this sink; returns false if it is not ours.
  bool on_completion(const Completion& c) {
    if ((c.wr_id & kSinkWrId) == 0) return false;
    const auto i = static_cast<uint32_t>(c.wr_id & 0xffffffff);
    if (c.status != Status::kOk) return true;  // flushed at the end
    const uint8_t* buf = rbuf.data() + size_t{i} * rslot;
    Ctrl m;
    if (c.op == CompletionOp::kRecv && c.byte_len == sizeof(Ctrl) &&
        (std::memcpy(&m, buf, sizeof(m)), m.magic == kMagic)) {
      ctrl.push_back(m);
    } else if (c.op == CompletionOp::kRecvWriteImm) {
      // WRITE_IMM with imm = low bits of seq: the slot holds pattern(seq).
      const uint64_t seq = next_seq++;
      if (c.imm != static_cast<uint32_t>(seq)) ++verify_errors;
      if (p.verify)
        verify_errors +=
            pattern_check_slot(mem.data() + size_t{seq % p.qd} * p.size, p.size, seq, p.qd);
      bytes += p.size;
    } else if (c.op == CompletionOp::kRecv) {
      const uint64_t seq = next_seq++;
      if (p.verify) {
        verify_errors += c.byte_len != p.size ? 1 : 0;
        verify_errors += pattern_check(buf, std::min(c.byte_len, p.size), seq);
      }
      bytes += c.byte_len;
    }
    if (repost) (void)post(i);
    return true;
  }
};

// The sending side: keeps qd messages outstanding.
struct Generator {
  UdpEndpoint* ep = nullptr;
  ConnId conn;
  TestParams p;
  uint64_t raddr = 0, rkey = 0;
  AlignedBuf buf;
  MemoryRegion mr;
  uint64_t posted = 0, completed = 0, bytes = 0, errors = 0, verify_errors = 0;
  std::vector<Clock::time_point> post_time;
  std::vector<uint32_t> lat_ns;  // preallocated sample buffer
  Error last_error;

  bool setup(UdpEndpoint& e, ConnId c, const TestParams& tp, uint64_t ra, uint64_t rk) {
    ep = &e;
    conn = c;
    p = tp;
    raddr = ra;
    rkey = rk;
    buf.resize(size_t{p.size} * p.qd);
    post_time.assign(p.qd, Clock::time_point{});
    lat_ns.reserve(4 << 20);
    return !ep->register_memory(buf.data(), buf.size(), kAllAccess, mr);
  }

  uint8_t* slot(uint64_t seq) { return buf.data() + size_t{seq % p.qd} * p.size; }

  // Posts until qd outstanding; false on a post error.
  bool pump(bool may_post) {
    while (may_post && posted - completed < p.qd) {
      const uint64_t seq = posted;
      uint8_t* s = slot(seq);
      const uint64_t rslot = raddr + (seq % p.qd) * p.size;
      Error e;
      switch (p.op) {
        case Op::kWrite:
          if (p.verify) {
            pattern_fill(s, p.size, seq);
            e = ep->write_imm(conn, seq, s, p.size, mr.lkey, rslot, rkey,
                              static_cast<uint32_t>(seq));
          } else {
            e = ep->write(conn, seq, s, p.size, mr.lkey, rslot, rkey);
          }
          break;
        case Op::kRead:
          if (p.verify && p.size >= 16) {  // poison head and tail: stale data must not pass
            std::memset(s, 0xa5, 8);
            std::memset(s + p.size - 8, 0x5a, 8);
          }
          e = ep->read(conn, seq, s, p.size, mr.lkey, rslot, rkey);
          break;
        case Op::kSend:
          if (p.verify) pattern_fill(s, p.size, seq);
          e = ep->send(conn, seq, s, p.size, mr.lkey);
          break;
      }
      if (e) {
        if (e.status == Status::kQueueFull) break;
        last_error = e;
        return false;
      }
      post_time[seq % p.qd] = Clock::now();
      ++posted;
    }
    return true;
  }

  // A send-queue completion (wr_id = seq); returns false if not ours.
  bool on_completion(const Completion& c) {
    if ((c.wr_id & (kCtrlWrId | kSinkWrId)) != 0) return false;
    const uint64_t seq = c.wr_id;
    if (c.status != Status::kOk) {
      ++errors;
      if (!last_error) last_error = ep->completion_error(c);
      ++completed;
      return true;
    }
    const auto now = Clock::now();
    if (lat_ns.size() < lat_ns.capacity())
      lat_ns.push_back(static_cast<uint32_t>(std::min<int64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now - post_time[seq % p.qd]).count(),
          UINT32_MAX)));
    if (p.op == Op::kRead && p.verify)
      verify_errors += pattern_check(slot(seq), p.size, seq % p.qd);
    bytes += p.size;
    ++completed;
    return true;
  }
};

double pct(std::vector<uint32_t>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k] / 1000.0;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kWrite: return "write";
    case Op::kRead: return "read";
    case Op::kSend: return "send";
  }
  return "?";
}

double mean_rx_wait_us(const metaroce::udp::IoStats& io) {
  return io.rx_datagrams ? dbl(io.rx_wait_ns_total) / dbl(io.rx_datagrams) / 1e3 : 0.0;
}

void print_io(const metaroce::udp::IoStats& io) {
  std::printf("  io: %" PRIu64 " datagrams in %" PRIu64 " sendmmsg (%" PRIu64 " GSO), %" PRIu64
              " received in %" PRIu64 " recvmmsg (%" PRIu64
              " GRO); waited in the socket %.1f us"
              " mean, %.1f max; %" PRIu64 " rounds left datagrams unread\n",
              io.tx_datagrams, io.tx_syscalls, io.tx_gso_msgs, io.rx_datagrams, io.rx_syscalls,
              io.rx_gro_batches, mean_rx_wait_us(io), dbl(io.rx_wait_ns_max) / 1e3,
              io.rx_backlogged_rounds);
}

Error send_ctrl(UdpEndpoint& ep, ConnId conn, Ctrl& m, const MemoryRegion& mr, uint64_t id) {
  return ep.send(conn, kCtrlWrId | id, &m, sizeof(m), mr.lkey);
}

// What a loop does when a round moved nothing. --busy: poll again at once
// (lowest latency with a core per process). Otherwise: poll again after
// sched_yield() until spin_us passed without activity, then sleep on the
// endpoint's epoll fd until a datagram or an engine timer arrives. Sleeping
// gives the core back when the two ends share cores with each other or with
// other work; yielding matters because once one end sleeps, the kernel tends
// to wake the other onto the same core (wake-affine), where a spinning
// process would make every round trip wait out its peer's spin.
// A yield that returns late found the core shared: another task ran. Then
// the loop sleeps at once whenever idle, for kSharedFor, before it tries a
// yield again. On a loaded host a yield hands a slice to every other task,
// while a sleeper is woken by its next datagram ahead of them; on a pair of
// otherwise idle cores a yield returns at once and the loop keeps polling,
// which spares its peer a wake-up per burst.
struct Idler {
  static constexpr auto kSharedYield = std::chrono::microseconds(50);
  static constexpr auto kSharedFor = std::chrono::milliseconds(100);
  bool busy = false;
  Clock::duration spin{};
  bool idle = false;
  Clock::time_point since{};
  Clock::time_point shared_until{};

  void step(UdpEndpoint& ep, bool active, Clock::time_point now) {
    if (active || busy) {
      idle = false;
      return;
    }
    if (!idle) {
      idle = true;
      since = now;
    }
    if (now - since < spin && now >= shared_until) {
      const auto before = Clock::now();
      sched_yield();
      const auto after = Clock::now();
      if (after - before > kSharedYield) shared_until = after + kSharedFor;
      return;
    }
    ep.wait(1ms);
    idle = false;
  }
};

struct Common {
  uint16_t mtu = 4096;
  uint32_t paths = 8;
  uint32_t entropy_count = 64;
  uint16_t entropy_base = 0;
  uint32_t peer_timeout_ms = 2000;
  bool no_gso = false, no_gro = false;
  bool no_cc = false;
  bool payload_crc = false;
  int cpu = -1;                  // pin the process to this CPU (-1: no)
  uint32_t ack_every = 0;        // engine ack_every (ACK-1); 0: the engine default
  uint32_t min_rto_us = 0;       // LOSS-4 min_rto; 0: the driver's default
  uint32_t target_delay_us = 0;  // CC-5 target queue delay; 0: the driver's default
  int64_t explore_ms = -1;       // PATH-8 interval; 0: off, negative: the engine's default
  bool busy = false;             // never sleep: poll the sockets continuously
  uint32_t spin_us = 50;         // otherwise poll this long before sleeping
  Idler idler() const {
    Idler i;
    i.busy = busy;
    i.spin = std::chrono::microseconds(spin_us);
    return i;
  }
};

metaroce::udp::Options make_options(const Common& c) {
  metaroce::udp::Options o;
  o.engine.mtu = c.mtu;
  o.engine.num_paths = static_cast<uint8_t>(std::clamp<uint32_t>(c.paths, 1, 32));
  o.engine.recovery.peer_timeout_ns = uint64_t{c.peer_timeout_ms} * metaroce::kMillisecond;
  o.engine.connect_attempts = 50;  // 500 ms: a perf run tolerates a slow server start
  o.engine.cc.enabled = !c.no_cc;
  o.engine.cover_payload = c.payload_crc;
  if (c.ack_every != 0)
    o.engine.ack_every = static_cast<uint8_t>(std::min<uint32_t>(c.ack_every, 64));
  if (c.min_rto_us != 0)
    o.engine.recovery.min_rto_ns = uint64_t{c.min_rto_us} * metaroce::kMicrosecond;
  if (c.target_delay_us != 0)
    o.engine.cc.target_queue_delay_ns = uint64_t{c.target_delay_us} * metaroce::kMicrosecond;
  if (c.explore_ms >= 0)
    o.engine.cc.explore_interval_ns = static_cast<uint64_t>(c.explore_ms) * metaroce::kMillisecond;
  o.entropy_count = static_cast<uint16_t>(std::max<uint32_t>(c.entropy_count, o.engine.num_paths));
  o.entropy_base = c.entropy_base;
  o.gso = !c.no_gso;
  o.gro = !c.no_gro;
  return o;
}

// Waits for the next control message on the sink, driving the endpoint and
// feeding other completions to the generator (if any).
bool wait_ctrl(UdpEndpoint& ep, Sink& sink, Generator* gen, Ctrl& out,
               std::chrono::milliseconds to) {
  const auto deadline = Clock::now() + to;
  while (sink.ctrl.empty()) {
    if (Clock::now() > deadline || g_stop) return false;
    ep.progress();
    Completion cs[64];
    const size_t n = ep.poll_completions(cs, 64);
    for (size_t i = 0; i < n; ++i) {
      if (sink.on_completion(cs[i])) continue;
      if (gen != nullptr && gen->on_completion(cs[i])) continue;
      if ((cs[i].wr_id & kCtrlWrId) != 0 && cs[i].status != Status::kOk) {
        std::fprintf(stderr, "control message failed: %s\n",
                     ep.completion_error(cs[i]).message.c_str());
        return false;
      }
    }
    if (n == 0) {
      const auto st = ep.state(sink.conn);
      if (st == metaroce::udp::ConnState::kError || st == metaroce::udp::ConnState::kClosed)
        return false;
    }
  }
  out = sink.ctrl.front();
  sink.ctrl.pop_front();
  return true;
}

// --- server ---
int run_server(const std::string& addr, const Common& common, bool once) {
  Error err;
  auto ep = UdpEndpoint::open(addr, make_options(common), err);
  if (!ep) {
    std::fprintf(stderr, "metaroce-perf server: %s\n", err.message.c_str());
    return 1;
  }
  std::printf("metaroce-perf server listening on %s (entropy ports %u-%u, gso %s, gro %s)\n",
              ep->local_address().c_str(), ep->entropy_min(), ep->entropy_max(),
              ep->gso_enabled() ? "on" : "off", ep->gro_enabled() ? "on" : "off");
  std::fflush(stdout);
  const uint32_t rq_depth = metaroce::EndpointConfig{}.rq_depth;
  while (!g_stop) {
    ConnId conn;
    if (ep->accept(500ms, conn)) continue;
    std::printf("connection from %s\n", ep->peer_address(conn).c_str());
    std::fflush(stdout);
    Sink sink;
    // One buffer for the Hello; the data ring is posted once the Hello says
    // what to expect (receive buffers are consumed in posting order).
    TestParams ctl;
    ctl.qd = 1;
    ctl.op = Op::kWrite;
    sink.repost = false;
    if (!sink.setup(*ep, conn, ctl, rq_depth, 1)) {
      std::fprintf(stderr, "setup failed\n");
      ep->close(conn);
      continue;
    }
    Ctrl hello;
    if (!wait_ctrl(*ep, sink, nullptr, hello, 5000ms) || hello.type != MsgType::kHello) {
      std::fprintf(stderr, "no Hello from %s\n", ep->peer_address(conn).c_str());
      ep->close(conn);
      continue;
    }
    TestParams tp;
    tp.op = static_cast<Op>(hello.op);
    tp.size = hello.size;
    tp.qd = std::max<uint32_t>(1, hello.qd);
    tp.verify = hello.verify != 0;
    tp.bidir = hello.bidir != 0;
    Sink data;
    if (!data.setup(*ep, conn, tp, rq_depth) || !data.expose(tp.size, tp.qd, tp.op == Op::kRead)) {
      std::fprintf(stderr, "cannot set up buffers for size %u qd %u\n", tp.size, tp.qd);
      ep->close(conn);
      continue;
    }
    Generator gen;
    const bool bidir = tp.bidir && hello.addr != 0;
    if (bidir && !gen.setup(*ep, conn, tp, hello.addr, hello.rkey)) {
      ep->close(conn);
      continue;
    }
    Ctrl ack;
    ack.type = MsgType::kHelloAck;
    ack.addr = data.mem_mr.addr;
    ack.rkey = data.mem_mr.rkey;
    ack.len = data.mem_mr.length;
    MemoryRegion ack_mr;
    (void)ep->register_memory(&ack, sizeof(ack), kAllAccess, ack_mr);
    (void)send_ctrl(*ep, conn, ack, ack_mr, 1);
    const auto t0 = Clock::now();
    Ctrl done{};
    bool got_done = false;
    Idler idler = common.idler();
    while (!g_stop && !got_done) {
      const size_t moved = ep->progress();
      const uint64_t posted = gen.posted;
      if (bidir && !gen.pump(true)) break;
      Completion cs[64];
      const size_t n = ep->poll_completions(cs, 64);
      idler.step(*ep, moved != 0 || n != 0 || gen.posted != posted, Clock::now());
      for (size_t i = 0; i < n; ++i) {
        if (data.on_completion(cs[i])) continue;
        if (bidir) (void)gen.on_completion(cs[i]);
      }
      while (!data.ctrl.empty()) {
        const Ctrl m = data.ctrl.front();
        data.ctrl.pop_front();
        if (m.type == MsgType::kDone) {
          done = m;
          got_done = true;
        }
      }
      const auto st = ep->state(conn);
      if (st == metaroce::udp::ConnState::kError || st == metaroce::udp::ConnState::kClosed) break;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!got_done) {
      std::fprintf(stderr, "test from %s ended without Done (connection state %d)\n",
                   ep->peer_address(conn).c_str(), static_cast<int>(ep->state(conn)));
    } else {
      // Let the generator's outstanding work finish before reporting.
      const auto until = Clock::now() + 2s;
      while (bidir && gen.completed < gen.posted && Clock::now() < until) {
        ep->progress();
        Completion cs[64];
        const size_t n = ep->poll_completions(cs, 64);
        for (size_t i = 0; i < n; ++i)
          if (!gen.on_completion(cs[i])) data.on_completion(cs[i]);
      }
      metaroce::ConnStats cst{};
      (void)ep->conn_stats(conn, cst);
      Ctrl res;
      res.type = MsgType::kResult;
      res.messages = data.next_seq;
      res.bytes = data.bytes;
      res.verify_errors = data.verify_errors + gen.verify_errors;
      res.rev_messages = gen.completed - gen.errors;
      res.rev_bytes = gen.bytes;
      res.rev_retx = cst.retransmissions;
      res.rev_ns = static_cast<uint64_t>(secs * 1e9);
      MemoryRegion res_mr;
      (void)ep->register_memory(&res, sizeof(res), kAllAccess, res_mr);
      (void)send_ctrl(*ep, conn, res, res_mr, 2);
      // Wait for the peer to close (or a short while).
      const auto end = Clock::now() + 3s;
      while (Clock::now() < end && ep->state(conn) == metaroce::udp::ConnState::kEstablished) {
        ep->progress();
        Completion c;
        while (ep->poll_completion(c)) {
        }
      }
      (void)ep->deregister_memory(res_mr.lkey);
      std::printf("test %s size %u qd %u: %" PRIu64
                  " messages received, %.3f Gb/s, verify_errors %" PRIu64 "\n",
                  op_name(tp.op), tp.size, tp.qd, data.next_seq, dbl(data.bytes) * 8 / secs / 1e9,
                  data.verify_errors);
      print_io(ep->io_stats());
      std::fflush(stdout);
    }
    ep->close(conn);
    for (int i = 0; i < 20; ++i) ep->progress();
    Completion c;
    while (ep->poll_completion(c)) {
    }
    (void)ep->deregister_memory(ack_mr.lkey);
    (void)ep->deregister_memory(sink.rbuf_mr.lkey);
    (void)ep->deregister_memory(data.rbuf_mr.lkey);
    (void)ep->deregister_memory(data.mem_mr.lkey);
    if (bidir) (void)ep->deregister_memory(gen.mr.lkey);
    if (once) break;
  }
  return 0;
}

// --- client ---
struct ClientArgs {
  std::string addr;
  TestParams tp;
  double duration = 5;
  uint64_t iters = 0;
  bool json = false;
  double interval = 1.0;
};

int run_client(const ClientArgs& a, const Common& common) {
  Error err;
  std::string local = a.addr.find('[') == 0 || std::count(a.addr.begin(), a.addr.end(), ':') > 1
                          ? "[::]:0"
                          : "0.0.0.0:0";
  auto ep = UdpEndpoint::open(local, make_options(common), err);
  if (!ep) {
    std::fprintf(stderr, "metaroce-perf client: %s\n", err.message.c_str());
    return 1;
  }
  ConnId conn;
  err = ep->connect(a.addr, 3000ms, conn);
  if (err) {
    std::fprintf(stderr, "metaroce-perf client: %s\n", err.message.c_str());
    return 1;
  }
  const uint32_t rq_depth = metaroce::EndpointConfig{}.rq_depth;
  Sink sink;
  if (!sink.setup(*ep, conn, a.tp, rq_depth) ||
      (a.tp.bidir && !sink.expose(a.tp.size, a.tp.qd, a.tp.op == Op::kRead))) {
    std::fprintf(stderr, "metaroce-perf client: cannot register buffers\n");
    return 1;
  }
  Ctrl hello;
  hello.type = MsgType::kHello;
  hello.op = static_cast<uint32_t>(a.tp.op);
  hello.size = a.tp.size;
  hello.qd = a.tp.qd;
  hello.verify = a.tp.verify ? 1 : 0;
  hello.bidir = a.tp.bidir ? 1 : 0;
  if (a.tp.bidir) {
    hello.addr = sink.mem_mr.addr;
    hello.rkey = sink.mem_mr.rkey;
    hello.len = sink.mem_mr.length;
  }
  MemoryRegion hello_mr;
  (void)ep->register_memory(&hello, sizeof(hello), kAllAccess, hello_mr);
  if ((err = send_ctrl(*ep, conn, hello, hello_mr, 1))) {
    std::fprintf(stderr, "metaroce-perf client: %s\n", err.message.c_str());
    return 1;
  }
  Ctrl ack;
  if (!wait_ctrl(*ep, sink, nullptr, ack, 5000ms) || ack.type != MsgType::kHelloAck) {
    std::fprintf(stderr, "metaroce-perf client: no answer from server %s\n", a.addr.c_str());
    return 1;
  }
  Generator gen;
  if (!gen.setup(*ep, conn, a.tp, ack.addr, ack.rkey)) return 1;

  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.duration));
  auto next_report =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.interval));
  uint64_t last_bytes = 0;
  metaroce::ConnStats cst{};
  bool failed = false;
  Idler idler = common.idler();
  // Outstanding requests normally finish within a few RTTs of the last post;
  // a peer that stopped answering must not keep the client forever, and a
  // second Ctrl-C (or SIGTERM) ends it at once.
  constexpr auto kDrainLimit = std::chrono::seconds(10);
  std::optional<Clock::time_point> drain_since;
  for (;;) {
    const auto now = Clock::now();
    const bool may_post = !g_stop && (a.iters != 0 ? gen.posted < a.iters : now < end);
    const uint64_t posted = gen.posted;
    if (!gen.pump(may_post)) {
      failed = true;
      break;
    }
    if (!may_post && gen.completed >= gen.posted) break;
    if (!may_post && !drain_since) drain_since = now;
    if (drain_since && (g_stop > 1 || now - *drain_since > kDrainLimit)) {
      gen.last_error.message = std::to_string(gen.posted - gen.completed) +
                               " requests still outstanding " +
                               (g_stop > 1 ? std::string("at the second signal")
                                           : std::string("10 s after the last post: the peer "
                                                         "stopped answering"));
      failed = true;
      break;
    }
    const size_t moved = ep->progress();
    Completion cs[64];
    const size_t n = ep->poll_completions(cs, 64);
    for (size_t i = 0; i < n; ++i)
      if (!gen.on_completion(cs[i])) sink.on_completion(cs[i]);
    idler.step(*ep, moved != 0 || n != 0 || gen.posted != posted, now);
    if (gen.errors != 0) {
      failed = true;
      break;
    }
    if (now >= next_report && a.duration >= 2 && a.iters == 0) {
      (void)ep->conn_stats(conn, cst);
      const double el = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "[%5.1fs] %8.3f Gb/s  %9.0f msg/s  retx %" PRIu64 "  rx %.3f Gb/s\n", el,
                   dbl(gen.bytes - last_bytes) * 8 / a.interval / 1e9,
                   dbl(gen.bytes - last_bytes) / double(a.tp.size) / a.interval,
                   cst.retransmissions, dbl(sink.bytes) * 8 / el / 1e9);
      last_bytes = gen.bytes;
      next_report +=
          std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.interval));
    }
  }
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failed) std::fprintf(stderr, "metaroce-perf client: %s\n", gen.last_error.message.c_str());

  Ctrl result{};
  bool have_result = false;
  if (!failed) {
    Ctrl done;
    done.type = MsgType::kDone;
    done.messages = gen.completed;
    done.bytes = gen.bytes;
    MemoryRegion done_mr;
    (void)ep->register_memory(&done, sizeof(done), kAllAccess, done_mr);
    (void)send_ctrl(*ep, conn, done, done_mr, 2);
    have_result = wait_ctrl(*ep, sink, &gen, result, 10000ms) && result.type == MsgType::kResult;
    if (!have_result) std::fprintf(stderr, "metaroce-perf client: no result from the server\n");
  }
  (void)ep->conn_stats(conn, cst);
  const auto paths = ep->path_stats(conn);
  const auto io = ep->io_stats();
  const uint64_t verify_errors =
      gen.verify_errors + sink.verify_errors + (have_result ? result.verify_errors : 0) +
      (a.tp.verify && have_result && a.tp.op != Op::kRead && result.messages != gen.completed ? 1
                                                                                              : 0);
  std::vector<uint32_t> lat = gen.lat_ns;
  const double p50 = pct(lat, 0.5), p99 = pct(lat, 0.99), p999 = pct(lat, 0.999);
  const double gbps = dbl(gen.bytes) * 8 / secs / 1e9;
  const double rate = dbl(gen.completed - gen.errors) / secs;

  if (a.json) {
    nlohmann::json j;
    j["op"] = op_name(a.tp.op);
    j["size"] = a.tp.size;
    j["qd"] = a.tp.qd;
    j["seconds"] = secs;
    j["messages"] = gen.completed - gen.errors;
    j["bytes"] = gen.bytes;
    j["goodput_gbps"] = gbps;
    j["msg_rate"] = rate;
    j["lat_us"] = {{"p50", p50}, {"p99", p99}, {"p999", p999}};
    j["retransmitted_packets"] = cst.retransmissions;
    j["data_packets_sent"] = cst.data_packets_sent;
    j["losses_declared"] = cst.losses_declared;
    j["path_retirements"] = cst.path_retirements;
    j["path_explorations"] = cst.path_explorations;
    j["ce_received"] = cst.ce_received;
    j["verify"] = a.tp.verify;
    j["verify_errors"] = verify_errors;
    j["errors"] = gen.errors;
    if (failed) j["error"] = gen.last_error.message;
    if (have_result) {
      j["server_messages_received"] = result.messages;
      if (a.tp.bidir)
        j["reverse"] = {{"messages", result.rev_messages},
                        {"bytes", result.rev_bytes},
                        {"goodput_gbps",
                         result.rev_ns ? dbl(result.rev_bytes) * 8.0 / dbl(result.rev_ns) : 0.0},
                        {"retransmitted_packets", result.rev_retx}};
    }
    nlohmann::json ps = nlohmann::json::array();
    for (size_t i = 0; i < paths.size(); ++i) {
      const auto& p = paths[i];
      ps.push_back({{"slot", i},
                    {"entropy", p.entropy},
                    {"state", p.state == metaroce::PathState::kActive ? "active" : "probing"},
                    {"packets", p.packets_sent},
                    {"retransmissions", p.retransmissions},
                    {"ce_marks", p.ce_marks},
                    {"srtt_us", dbl(p.srtt_ns) / 1000.0},
                    {"losses", p.losses},
                    {"timeouts", p.timeouts},
                    {"retirements", p.retirements},
                    {"explorations", p.explorations},
                    {"probes", p.probes_sent},
                    {"cwnd_bytes", p.cwnd_bytes},
                    {"retired", p.retirements > 0}});
    }
    j["paths"] = ps;
    j["io"] = {{"tx_datagrams", io.tx_datagrams},
               {"tx_syscalls", io.tx_syscalls},
               {"tx_gso_msgs", io.tx_gso_msgs},
               {"tx_eagain", io.tx_eagain},
               {"tx_errors", io.tx_errors},
               {"rx_datagrams", io.rx_datagrams},
               {"rx_syscalls", io.rx_syscalls},
               {"rx_gro_batches", io.rx_gro_batches},
               {"rx_ce", io.rx_ce},
               {"tx_materialized", io.tx_materialized},
               {"rx_wait_us_mean", mean_rx_wait_us(io)},
               {"rx_wait_us_max", dbl(io.rx_wait_ns_max) / 1e3},
               {"rx_backlogged_rounds", io.rx_backlogged_rounds},
               {"gso", ep->gso_enabled()},
               {"gro", ep->gro_enabled()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("\nmetaroce-perf %s to %s: size %u B, qd %u, %u paths, %.2f s%s\n",
                op_name(a.tp.op), a.addr.c_str(), a.tp.size, a.tp.qd,
                static_cast<unsigned>(paths.size()), secs, a.tp.verify ? ", verified" : "");
    std::printf("  goodput              %10.3f Gb/s\n", gbps);
    std::printf("  message rate         %10.0f msg/s\n", rate);
    std::printf("  latency p50/p99/p999 %8.1f / %.1f / %.1f us\n", p50, p99, p999);
    std::printf("  retransmitted pkts   %10" PRIu64 "  (of %" PRIu64 " data packets, %" PRIu64
                " declared lost)\n",
                cst.retransmissions, cst.data_packets_sent, cst.losses_declared);
    if (a.tp.verify) std::printf("  verify errors        %10" PRIu64 "\n", verify_errors);
    if (a.tp.bidir && have_result)
      std::printf("  reverse goodput      %10.3f Gb/s (server -> client)\n",
                  result.rev_ns ? dbl(result.rev_bytes) * 8.0 / dbl(result.rev_ns) : 0.0);
    print_io(io);
    std::printf(
        "\n  path entropy  state    packets   retx   CE marks  srtt(us)  losses  moved  retired\n");
    for (size_t i = 0; i < paths.size(); ++i) {
      const auto& p = paths[i];
      std::printf(
          "  %4zu %7u  %-7s %9" PRIu64 " %6" PRIu64 " %10" PRIu64 " %9.1f %7" PRIu64 " %6" PRIu64
          "  %s\n",
          i, p.entropy, p.state == metaroce::PathState::kActive ? "active" : "probing",
          p.packets_sent, p.retransmissions, p.ce_marks, dbl(p.srtt_ns) / 1000.0, p.losses,
          p.explorations,
          p.retirements > 0 ? ("yes (" + std::to_string(p.retirements) + ")").c_str() : "no");
    }
  }
  ep->close(conn);
  for (int i = 0; i < 50 && ep->state(conn) == metaroce::udp::ConnState::kEstablished; ++i)
    ep->wait(1ms);
  return failed || !have_result || verify_errors != 0 ? 2 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"metaroce-perf: MetaRoCE over UDP throughput / latency"};
  app.require_subcommand(1);
  Common common;
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--mtu", common.mtu, "payload bytes per packet (both ends use the minimum)");
    sub->add_option("--paths", common.paths, "paths (entropy values) per connection, 1-32");
    sub->add_option("--entropy-count", common.entropy_count, "source ports in the entropy block");
    sub->add_option("--entropy-base", common.entropy_base, "first source port (default: port + 1)");
    sub->add_option("--peer-timeout-ms", common.peer_timeout_ms, "PATH-7 peer timeout");
    sub->add_flag("--no-gso", common.no_gso, "do not use UDP_SEGMENT");
    sub->add_flag(
        "--payload-crc", common.payload_crc,
        "ICRC over the payload too (default: headers; the UDP checksum covers the payload)");
    sub->add_flag("--no-gro", common.no_gro, "do not use UDP_GRO");
    sub->add_flag("--no-cc", common.no_cc, "disable congestion control (fixed window per path)");
    sub->add_flag("--busy", common.busy,
                  "busy-poll: never sleep on the epoll fd (best with a core per process)");
    sub->add_option("--spin-us", common.spin_us,
                    "without --busy: poll this long after the last activity before sleeping");
    sub->add_option("--cpu", common.cpu, "pin the process to this CPU");
    sub->add_option("--min-rto-us", common.min_rto_us,
                    "LOSS-4 min_rto in microseconds (the sending end's setting counts)");
    sub->add_option("--target-delay-us", common.target_delay_us,
                    "CC-5 target queue delay in microseconds (the sending end's setting counts)");
    sub->add_option("--explore-ms", common.explore_ms,
                    "PATH-8: move the slowest path to a new entropy this often, in ms (0: never; "
                    "default 20; the sending end's setting counts)")
        ->check(CLI::Range(int64_t{0}, int64_t{3'600'000}));
    sub->add_option("--ack-every", common.ack_every,
                    "ACK after this many data packets (ACK-1; the receiving end's setting counts)");
  };
  auto* server = app.add_subcommand("server", "wait for clients");
  std::string server_addr = "0.0.0.0:4792";
  bool once = false;
  server->add_option("addr", server_addr, "address to listen on, ip:port or [ip6]:port");
  server->add_flag("--once", once, "exit after one test");
  add_common(server);

  auto* client = app.add_subcommand("client", "run a test against a server");
  ClientArgs ca;
  std::string op = "write";
  client->add_option("addr", ca.addr, "server address, ip:port or [ip6]:port")->required();
  client->add_option("--op", op, "write | read | send")
      ->check(CLI::IsMember({"write", "read", "send"}));
  client->add_option("--size", ca.tp.size, "message size in bytes")
      ->check(CLI::Range(1u, 1u << 30));
  client->add_option("--qd", ca.tp.qd, "messages outstanding")->check(CLI::Range(1u, 200u));
  auto* dur = client->add_option("--duration", ca.duration, "seconds to run");
  client->add_option("--iters", ca.iters, "messages to send (instead of --duration)")
      ->excludes(dur);
  client->add_option("--interval", ca.interval, "seconds between progress lines");
  client->add_flag("--bidir", ca.tp.bidir, "the server sends the same load back at the same time");
  client->add_flag("--verify", ca.tp.verify,
                   "fill sources with a pattern and check every received byte");
  client->add_flag("--json", ca.json, "print one JSON object");
  add_common(client);
  CLI11_PARSE(app, argc, argv);

  if (common.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(common.cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      std::fprintf(stderr, "metaroce-perf: cannot pin to CPU %d: %s\n", common.cpu,
                   std::strerror(errno));
  }
  // The first signal stops posting and drains; a second one gives up.
  std::signal(SIGINT, [](int) { g_stop = g_stop + 1; });
  std::signal(SIGTERM, [](int) { g_stop = g_stop + 1; });
  if (server->parsed()) return run_server(server_addr, common, once);
  ca.tp.op = op == "read" ? Op::kRead : op == "send" ? Op::kSend : Op::kWrite;
  return run_client(ca, common);
}
