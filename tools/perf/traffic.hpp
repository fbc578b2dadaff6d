// The two sides of a test: a Generator keeps qd messages outstanding on the
// connection, a Sink receives (SEND data, WRITE_IMM notices and control
// messages) and exposes the memory the peer writes to or reads from.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <vector>

#include "control.hpp"
#include "metaroce/udp.hpp"

namespace metaroce::perf {

using Clock = std::chrono::steady_clock;

inline constexpr uint32_t kAllAccess =
    metaroce::kAccessLocalWrite | metaroce::kAccessRemoteWrite | metaroce::kAccessRemoteRead;
inline constexpr uint64_t kCtrlWrId = 1ull << 62;  // control work requests
inline constexpr uint64_t kSinkWrId = 1ull << 61;  // sink receive buffers

// 8-byte aligned, so that the pattern's words are aligned stores.
struct AlignedBuf {
  std::vector<uint64_t> words;
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words.data()); }
  void resize(size_t bytes) { words.assign((bytes + 7) / 8 + 8, 0); }
  size_t size() const { return words.size() * 8; }
};

struct TestParams {
  Op op = Op::kWrite;
  uint32_t size = 65536;
  // 64: on loopback (a 2-core VM) 16 outstanding 64 KiB WRITEs left the
  // sender waiting for ACKs, 36 against 45 Gbit/s (BENCHMARKS.md, section 3);
  // ib_write_bw keeps 128.
  uint32_t qd = 64;
  bool verify = false;
  bool bidir = false;
};

struct Sink {
  udp::UdpEndpoint* ep = nullptr;
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
  std::deque<Ctrl> ctrl;                // control messages that arrived
  std::deque<PathReport> path_reports;  // the server's, after its Result
  bool repost = true;  // put consumed buffers back (not the server's one-shot Hello buffer)

  // count 0: enough buffers for qd messages in flight plus control.
  bool setup(udp::UdpEndpoint& e, ConnId c, const TestParams& tp, uint32_t rq_depth,
             uint32_t count = 0);
  bool expose(uint32_t size, uint32_t qd, bool fill);
  udp::Error post(uint32_t i);
  // A receive completion for this sink; returns false if it is not ours.
  bool on_completion(const Completion& c);
};

struct Generator {
  udp::UdpEndpoint* ep = nullptr;
  ConnId conn;
  TestParams p;
  uint64_t raddr = 0, rkey = 0;
  AlignedBuf buf;
  MemoryRegion mr;
  uint64_t posted = 0, completed = 0, bytes = 0, errors = 0, verify_errors = 0;
  std::vector<Clock::time_point> post_time;
  std::vector<uint32_t> lat_ns;  // preallocated sample buffer
  udp::Error last_error;

  bool setup(udp::UdpEndpoint& e, ConnId c, const TestParams& tp, uint64_t ra, uint64_t rk);
  uint8_t* slot(uint64_t seq) { return buf.data() + size_t{seq % p.qd} * p.size; }
  // Posts until qd outstanding; false on a post error.
  bool pump(bool may_post);
  // A send-queue completion (wr_id = seq); returns false if not ours.
  bool on_completion(const Completion& c);
};

}  // namespace metaroce::perf
