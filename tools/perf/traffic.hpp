// The two sides of a test: a Generator keeps qd messages outstanding on the
// connection, a Sink receives (SEND data, WRITE_IMM notices and control
// messages) and exposes the memory the peer writes to or reads from.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <vector>

#include "control.hpp"
#include "metaroce/udp.hpp"

namespace metaroce::perf {

using Clock = std::chrono::steady_clock;

inline constexpr uint32_t kAllAccess =
    metaroce::kAccessLocalWrite | metaroce::kAccessRemoteWrite | metaroce::kAccessRemoteRead;
inline constexpr uint64_t kCtrlWrId = 1ull << 62;  // control work requests
inline constexpr uint64_t kSinkWrId = 1ull << 61;  // sink receive buffers

// 8-byte aligned, so that the pattern's words are aligned stores. Zeroed
// memory from calloc: large buffers are fresh mappings whose pages the kernel
// supplies as they are first touched, so that resize returns at once (an end
// that faulted in gigabytes first would leave its peer unanswered past its
// peer timeout on a loaded host) and the RSS counts only what a test touched.
struct AlignedBuf {
  struct Free {
    void operator()(uint64_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint64_t[], Free> words;
  size_t bytes = 0;
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words.get()); }
  // False when the memory cannot be had (under a ulimit -v, say).
  bool resize(size_t n) {
    words.reset();
    bytes = 0;
    const size_t count = (n + 7) / 8 + 8;
    words.reset(static_cast<uint64_t*>(std::calloc(count, 8)));
    if (words == nullptr) return false;
    bytes = count * 8;
    return true;
  }
  size_t size() const { return bytes; }
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
  uint16_t mtu = 0;                     // the connection's, read at the first WRITE_IMM (--verify)
  std::deque<Ctrl> ctrl;                // control messages that arrived
  std::deque<PathReport> path_reports;  // the server's, after its Result
  bool repost = true;  // put consumed buffers back (not the server's one-shot Hello buffer)

  // Allocates and registers the receive ring: plan_buffers' for this end,
  // or one control buffer for the server's Hello. A client does it before it
  // connects, as all its allocation: the server waits only a while for the
  // Hello, and for anything from the client after its HelloAck.
  bool prepare(udp::UdpEndpoint& e, const TestParams& tp, RecvRing ring);
  // Posts the ring's receives on connection c (an error says why not).
  udp::Error post_ring(ConnId c);
  bool setup(udp::UdpEndpoint& e, ConnId c, const TestParams& tp, RecvRing ring) {
    return prepare(e, tp, ring) && !post_ring(c);
  }
  bool expose(uint32_t size, uint32_t qd, bool fill);
  udp::Error post(uint32_t i);
  // A receive completion for this sink; returns false if it is not ours.
  bool on_completion(const Completion& c);
};

// Round-trip times of a test's messages, in nanoseconds (64-bit: a sample
// never clamps; it used to be capped at 4.29 s). Holds at most `capacity`
// samples spread uniformly over the whole run: once full, it keeps every
// other sample and from then on takes every second message (then every
// fourth, ...), so that a long run's later messages count as much as its
// first ones (it used to keep only the first 4,194,304 messages).
struct LatencySampler {
  static constexpr size_t kDefaultCapacity = size_t{4} << 20;
  std::vector<uint64_t> samples;
  uint64_t seen = 0;    // messages offered
  uint64_t stride = 1;  // samples holds message i when i % stride == 0

  explicit LatencySampler(size_t capacity = kDefaultCapacity) { reserve(capacity); }
  void reserve(size_t capacity) {
    cap_ = std::max<size_t>(2, capacity & ~size_t{1});  // even: a halving keeps the stride's grid
    samples.clear();
    samples.reserve(cap_);
    seen = 0;
    stride = 1;
  }
  size_t capacity() const { return cap_; }
  void add(uint64_t ns) {
    const uint64_t i = seen++;
    if (i % stride != 0) return;
    if (samples.size() == cap_) {
      size_t k = 0;
      for (size_t j = 0; j < samples.size(); j += 2) samples[k++] = samples[j];
      samples.resize(k);
      stride *= 2;
      if (i % stride != 0) return;
    }
    samples.push_back(ns);
  }

 private:
  size_t cap_ = 2;
};

struct Generator {
  udp::UdpEndpoint* ep = nullptr;
  ConnId conn;
  TestParams p;
  uint64_t raddr = 0, rkey = 0;
  AlignedBuf buf;
  MemoryRegion mr;
  uint64_t posted = 0, completed = 0, bytes = 0, errors = 0, verify_errors = 0;
  Clock::time_point last_ok{};  // the last successful completion's (none: the epoch)
  std::vector<Clock::time_point> post_time;
  LatencySampler lat;  // preallocated sample buffer
  udp::Error last_error;

  // Allocates and registers the qd message slots (a client before it
  // connects, as Sink::prepare), then aims at connection c and the peer's
  // memory ra / rk (a send's target is the peer's receives: none).
  bool prepare(udp::UdpEndpoint& e, const TestParams& tp);
  void start(ConnId c, uint64_t ra, uint64_t rk) {
    conn = c;
    raddr = ra;
    rkey = rk;
  }
  bool setup(udp::UdpEndpoint& e, ConnId c, const TestParams& tp, uint64_t ra, uint64_t rk) {
    if (!prepare(e, tp)) return false;
    start(c, ra, rk);
    return true;
  }
  uint8_t* slot(uint64_t seq) { return buf.data() + size_t{seq % p.qd} * p.size; }
  // --verify: message seq's pattern in its slot (a READ's slot poisoned).
  void prepare_slot(uint64_t seq);
  // Posts until qd messages are outstanding or `upto` have been posted in
  // all (kNoLimit: no such bound; `posted` or less: none now); false on a
  // post error.
  static constexpr uint64_t kNoLimit = UINT64_MAX;
  bool pump(uint64_t upto);
  bool pump(std::same_as<bool> auto) = delete;  // a flag would mean "1 message in all"
  // A send-queue completion (wr_id = seq); returns false if not ours.
  bool on_completion(const Completion& c);
};

}  // namespace metaroce::perf
