// Shared machinery of the property tests: seed control, random networks,
// random workloads on registered buffers, and the checker that verifies
// placement, completion order and completion contents as the run goes.
//
// Environment:
//   METAROCE_PROPERTY_SEEDS=n      base seed count (default kDefaultSeeds); each
//                                  test runs a fixed fraction of it
//   METAROCE_PROPERTY_SEED=s       run only seed s in every test (reproduce)
//   METAROCE_PROPERTY_SEED_BASE=s  first seed (default 1)
//   METAROCE_PROPERTY_MAX_FAILS=n  failing seeds before a test gives up (3)
//   METAROCE_PROPERTY_TRACE=1|2    engine trace (2: and network trace) on stderr
//   METAROCE_PROPERTY_GATHER=0     never use poll_transmit_gather
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/engine.hpp"
#include "metaroce/harness/harness.hpp"

namespace metaroce::proptest {

using harness::Harness;
using harness::HarnessConfig;
using harness::PathConfig;
using harness::Rng;

// ---------------------------------------------------------------- seeds

// METAROCE_PROPERTY_SEEDS: base number of seeds (default kDefaultSeeds); each
// test runs max(min, base * weight) seeds. METAROCE_PROPERTY_SEED: run only
// this one seed in every test (to reproduce a failure).
// METAROCE_PROPERTY_SEED_BASE: first seed (default 1).
inline constexpr uint64_t kDefaultSeeds = 2000;

// A whole decimal number and nothing else. strtoull(v, nullptr, 0) took "abc"
// as 0, "-5" as 2^64 - 5, "2k" as 2 and "010" as 8: someone reproducing a
// failure got another run than the one asked for, with no message.
inline std::optional<uint64_t> parse_u64(std::string_view text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v, 10);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// The variable's value, `dflt` when unset or empty; anything but a whole
// number ends the run saying so.
inline uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  const std::optional<uint64_t> n = parse_u64(v);
  if (!n) {
    std::fprintf(stderr, "%s: '%s' is not a whole number\n", name, v);
    std::exit(2);
  }
  return *n;
}

struct SeedRange {
  uint64_t first;
  uint64_t count;
};

inline SeedRange seed_range(double weight, uint64_t min_count = 1) {
  if (const char* one = std::getenv("METAROCE_PROPERTY_SEED"); one != nullptr && *one != '\0')
    return {env_u64("METAROCE_PROPERTY_SEED", 0), 1};
  const uint64_t base = env_u64("METAROCE_PROPERTY_SEEDS", kDefaultSeeds);
  const auto n = static_cast<uint64_t>(static_cast<double>(base) * weight);
  return {env_u64("METAROCE_PROPERTY_SEED_BASE", 1), std::max(min_count, n)};
}

inline std::string seed_note(uint64_t seed) {
  return "seed=" + std::to_string(seed) +
         " (rerun: METAROCE_PROPERTY_SEED=" + std::to_string(seed) + ")";
}

// Failed assertions of the current test so far.
inline int failed_parts() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return 0;
  const auto* res = info->result();
  int n = 0;
  for (int i = 0; i < res->total_part_count(); ++i) n += res->GetTestPartResult(i).failed();
  return n;
}
inline int& seed_fail_base() {
  static int base = 0;
  return base;
}
// True once the current seed has failed (HasFailure() is sticky per test).
inline bool seed_failed() { return failed_parts() > seed_fail_base(); }

// Runs body(seed) for every seed of the range; stops after a few failing seeds.
template <typename F>
void for_each_seed(SeedRange r, F&& body) {
  // METAROCE_PROPERTY_MAX_FAILS: failing seeds before a test gives up (3).
  const uint64_t max_fails = env_u64("METAROCE_PROPERTY_MAX_FAILS", 3);
  uint64_t failed = 0;
  for (uint64_t s = r.first; s < r.first + r.count; ++s) {
    SCOPED_TRACE(seed_note(s));
    seed_fail_base() = failed_parts();
    body(s);
    if (seed_failed()) {
      std::fprintf(stderr, "FAILED SEED %llu\n", static_cast<unsigned long long>(s));
      if (++failed >= max_fails) {
        ADD_FAILURE() << "stopping after " << failed << " failing seeds";
        return;
      }
    }
  }
}

// ---------------------------------------------------------------- networks

struct NetShape {
  uint32_t min_paths = 1, max_paths = 8;
  double max_loss = 0.05, max_dup = 0.01, max_corrupt = 0.01;
};

// A random network and random (but valid) endpoint configurations.
inline HarnessConfig random_config(Rng& r, uint64_t seed, NetShape shape = {}) {
  const auto paths = static_cast<uint32_t>(r.range(shape.min_paths, shape.max_paths));
  HarnessConfig c = HarnessConfig::two_nodes(paths, seed);
  for (auto& p : c.net.paths) {
    p.delay_ns = r.range(1, 50) * kMicrosecond;
    p.rate_bps = r.range(1, 100) * harness::kGbps;
    p.queue_limit_bytes = r.range(128, 4096) * 1024;
    p.ecn_threshold_bytes =
        r.chance(0.8) ? p.queue_limit_bytes * r.range(5, 80) / 100 : harness::kUnlimited;
    // A third of the paths are clean, the rest lossy up to the maximum.
    p.loss = r.chance(0.33) ? 0.0 : r.uniform() * shape.max_loss;
    p.duplicate = r.chance(0.5) ? 0.0 : r.uniform() * shape.max_dup;
    p.corrupt = r.chance(0.5) ? 0.0 : r.uniform() * shape.max_corrupt;
    p.overhead_bytes = r.chance(0.5) ? 0 : 66;
  }
  static constexpr uint16_t kMtus[] = {4096, 4096, 1024, 1024, 2048, 1500, 512, 8192};
  const uint16_t mtu = kMtus[r.below(std::size(kMtus))];
  const bool cover = r.chance(0.8);
  for (auto& e : c.endpoints) {
    e.mtu = r.chance(0.8) ? mtu : kMtus[r.below(std::size(kMtus))];  // negotiated: min
    e.num_paths = static_cast<uint8_t>(r.chance(0.5) ? 8 : r.range(1, 16));
    e.window_log2 = static_cast<uint8_t>(r.chance(0.7) ? 10 : r.range(5, 12));
    e.ack_every = static_cast<uint8_t>(r.range(1, 4));
    e.cover_payload = cover;
    e.cc.enabled = r.chance(0.9);
  }
  // Payload corruption is only caught by the ICRC when it covers the payload;
  // otherwise the UDP checksum does the job (INT-2), modelled by the network.
  c.net.udp_checksum = !cover;
  // Gather mode (poll_transmit_gather) on some seeds; METAROCE_PROPERTY_GATHER=0
  // turns it off.
  c.gather = r.chance(0.3);  // drawn always, so the env var changes nothing else
  if (env_u64("METAROCE_PROPERTY_GATHER", 1) == 0) c.gather = false;
  return c;
}

// ---------------------------------------------------------------- workloads

inline void fill_random(std::vector<uint8_t>& v, uint64_t seed) {
  Rng r(seed);
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    const uint64_t x = r.next();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < v.size(); ++i) v[i] = static_cast<uint8_t>(r.next());
}

// One node's memory: `src` is a read-only pattern (sources of WRITE/SEND, and
// remote source of READs served by this node); `dst` holds every target range
// (WRITE targets, receive buffers, READ destinations) separated by guard
// bytes. `expect` is what `dst` must hold at the end.
struct NodeMem {
  std::vector<uint8_t> src, src_copy;
  std::vector<uint8_t> dst, expect;
  MemoryRegion src_mr{}, dst_mr{};
  size_t cursor = 0;  // next free byte of dst while planning

  // Reserves a target range of len bytes after 1..64 guard bytes.
  size_t reserve(Rng& r, size_t len) {
    cursor += static_cast<size_t>(r.range(1, 64));
    const size_t off = cursor;
    cursor += len;
    return off;
  }
};

struct PlannedWr {
  uint64_t wr_id = 0;
  int sender = 0;  // node posting it
  WrOpcode op = WrOpcode::kWrite;
  uint32_t len = 0;
  size_t src_off = 0;  // sender's src (READ: responder's src)
  size_t dst_off = 0;  // receiver's dst (READ: sender's dst)
  bool needs_recv = false;
  uint64_t recv_wr_id = 0;
  size_t recv_off = 0;  // receiver's dst
  uint32_t recv_len = 0;
  uint32_t imm = 0;
  size_t seq = 0;  // index in the sender's posting order
  // Error tests: this WR must fail (nothing placed) / may be partly placed
  // (bytes either untouched or correct) because an earlier one failed.
  bool expect_fail = false;
  bool partial_ok = false;
  bool override_remote = false;
  uint64_t remote_addr = 0, rkey = 0;  // used when override_remote
  bool posted = false;
  bool send_done = false;
  bool recv_done = false;
};

inline CompletionOp completion_op(WrOpcode op) {
  switch (op) {
    case WrOpcode::kWrite: return CompletionOp::kWrite;
    case WrOpcode::kWriteImm: return CompletionOp::kWriteImm;
    case WrOpcode::kSend: return CompletionOp::kSend;
    case WrOpcode::kSendImm: return CompletionOp::kSendImm;
    case WrOpcode::kRead: return CompletionOp::kRead;
  }
  return CompletionOp::kWrite;
}

inline bool is_recv_op(CompletionOp op) {
  return op == CompletionOp::kRecv || op == CompletionOp::kRecvWriteImm;
}

inline uint32_t random_size(Rng& r, uint32_t mtu) {
  const uint64_t k = r.below(100);
  if (k < 10) return 0;
  if (k < 30) return static_cast<uint32_t>(r.range(1, mtu + 1));
  if (k < 40)
    return static_cast<uint32_t>(mtu * r.range(1, 4) + r.range(0, 2));  // around multiples
  if (k < 75) return static_cast<uint32_t>(r.range(1, 16 * 1024));
  if (k < 95) return static_cast<uint32_t>(r.range(1, 64 * 1024));
  return static_cast<uint32_t>(r.range(1, 256 * 1024));
}

// Two endpoints joined by a harness, their memory and a planned workload, plus
// the incremental checker (PLACE-*, COMP-1..4).
class World {
 public:
  static constexpr size_t kSrcSize = 512 * 1024;

  explicit World(HarnessConfig cfg) : h(std::move(cfg)) {
    // METAROCE_PROPERTY_TRACE=1: engine trace of both nodes on stderr; =2: plus
    // every network event.
    const uint64_t tr = env_u64("METAROCE_PROPERTY_TRACE", 0);
    if (tr >= 1) {
      static int node_ids[2] = {0, 1};
      for (int n = 0; n < 2; ++n)
        h.set_engine_trace_for(
            size_t(n),
            [](void* ctx, const TraceEvent& ev) {
              std::fprintf(stderr, "%12llu node%d %-13s path %2u psn %10u aux %u\n",
                           static_cast<unsigned long long>(ev.time.ns), *static_cast<int*>(ctx),
                           trace_kind_name(ev.kind), ev.path, ev.psn, ev.aux);
            },
            &node_ids[n]);
    }
    if (tr >= 2) {
      h.set_net_trace([](const harness::NetTraceEvent& e) {
        auto be32 = [&](size_t at) -> uint32_t {
          if (e.bytes.size() < at + 4) return 0;
          return (uint32_t{e.bytes[at]} << 24) | (uint32_t{e.bytes[at + 1]} << 16) |
                 (uint32_t{e.bytes[at + 2]} << 8) | uint32_t{e.bytes[at + 3]};
        };
        // psn, and for data packets msn/offset/msg_len.
        std::fprintf(stderr,
                     "%12llu net %u->%u path %u %-7s op 0x%02x len %u aux %llu psn %u msn %u "
                     "off %u msglen %u\n",
                     static_cast<unsigned long long>(e.time.ns), e.src, e.dst, e.path,
                     harness::name(e.kind), e.opcode, e.len, static_cast<unsigned long long>(e.aux),
                     be32(8), e.opcode >= 1 && e.opcode <= 6 ? be32(16) : 0,
                     e.opcode >= 1 && e.opcode <= 6 ? be32(20) : 0,
                     e.opcode >= 1 && e.opcode <= 6 ? be32(24) : 0);
      });
    }
  }

  Harness h;
  ConnId conn[2];
  NodeMem mem[2];
  std::vector<PlannedWr> wrs;
  std::vector<uint64_t> send_order[2];  // wr_ids per node in posting order
  std::vector<uint64_t> recv_order[2];  // recv wr_ids per node in posting order
  std::map<uint64_t, size_t> by_wr;     // send wr_id -> index in wrs
  std::map<uint64_t, size_t> by_recv;   // recv wr_id -> index in wrs
  size_t seen[2] = {0, 0};              // completions checked so far per node
  size_t send_seen[2] = {0, 0}, recv_seen[2] = {0, 0};
  bool expect_ok = true;  // every completion must be kOk
  bool stall_reported = false;

  uint32_t mtu() const {
    return std::min(h.config().endpoints[0].mtu, h.config().endpoints[1].mtu);
  }

  bool connect() {
    auto [a, b] = h.connect(0, 1);
    conn[0] = a;
    conn[1] = b;
    return a.valid() && b.valid();
  }

  // Plans n random WRs (both directions), lays out memory, registers it.
  void plan_random(Rng& r, size_t n, uint64_t max_total = 1024 * 1024) {
    uint64_t total = 0;
    for (size_t i = 0; i < n && total <= max_total; ++i) {
      PlannedWr w;
      w.sender = r.chance(0.7) ? 0 : 1;
      w.op = static_cast<WrOpcode>(r.below(5));
      w.len = random_size(r, mtu());
      w.imm = static_cast<uint32_t>(r.next());
      plan(r, w);
      total += w.len;
    }
  }

  // Adds one WR (its op, sender, len, imm set) and reserves its memory.
  PlannedWr& plan(Rng& r, PlannedWr w, uint32_t recv_slack = UINT32_MAX) {
    const int s = w.sender, d = 1 - s;
    w.wr_id = (uint64_t(s) << 32) | (wrs.size() + 1);
    w.seq = send_order[s].size();
    w.src_off = static_cast<size_t>(r.below(kSrcSize - w.len + 1));
    switch (w.op) {
      case WrOpcode::kWrite: w.dst_off = mem[d].reserve(r, w.len); break;
      case WrOpcode::kWriteImm:
        w.dst_off = mem[d].reserve(r, w.len);
        w.needs_recv = true;
        w.recv_len = static_cast<uint32_t>(r.range(0, 64));
        w.recv_off = mem[d].reserve(r, w.recv_len);
        break;
      case WrOpcode::kSend:
      case WrOpcode::kSendImm:
        w.needs_recv = true;
        w.recv_len = w.len + (recv_slack != UINT32_MAX ? recv_slack
                                                       : static_cast<uint32_t>(r.range(0, 100)));
        w.recv_off = mem[d].reserve(r, w.recv_len);
        w.dst_off = w.recv_off;
        break;
      case WrOpcode::kRead: w.dst_off = mem[s].reserve(r, w.len); break;
    }
    if (w.needs_recv) {
      w.recv_wr_id = (uint64_t(d) << 32) | (1u << 31) | (wrs.size() + 1);
      recv_order[d].push_back(w.recv_wr_id);
      by_recv[w.recv_wr_id] = wrs.size();
    }
    send_order[s].push_back(w.wr_id);
    by_wr[w.wr_id] = wrs.size();
    wrs.push_back(w);
    return wrs.back();
  }

  // Node whose dst holds the WR's data, and the source bytes.
  int data_node(const PlannedWr& w) const {
    return w.op == WrOpcode::kRead ? w.sender : 1 - w.sender;
  }
  const uint8_t* source(const PlannedWr& w) const {
    const int n = w.op == WrOpcode::kRead ? 1 - w.sender : w.sender;
    return mem[n].src.data() + w.src_off;
  }

  // Allocates and fills memory, computes the expected image, registers.
  void layout(uint64_t seed, uint32_t dst_access = kAccessLocalWrite | kAccessRemoteWrite,
              uint32_t src_access = kAccessRemoteRead) {
    for (int n = 0; n < 2; ++n) {
      NodeMem& m = mem[n];
      m.src.resize(kSrcSize);
      fill_random(m.src, seed * 4 + uint64_t(n));
      m.src_copy = m.src;
      m.dst.resize(m.cursor + 64);
      fill_random(m.dst, seed * 4 + 2 + uint64_t(n));
    }
    for (int n = 0; n < 2; ++n) mem[n].expect = mem[n].dst;
    for (const auto& w : wrs) {
      if (w.expect_fail || w.override_remote) continue;
      const int dn = data_node(w);
      std::memcpy(mem[dn].expect.data() + w.dst_off, source(w), w.len);
      // Make every target byte differ from its expected value, so a missing
      // write can never go unnoticed.
      for (uint32_t i = 0; i < w.len; ++i)
        mem[dn].dst[w.dst_off + i] = static_cast<uint8_t>(mem[dn].expect[w.dst_off + i] ^ 0xA5);
    }
    for (int n = 0; n < 2; ++n) {
      ASSERT_EQ(h.ep(size_t(n)).register_memory(mem[n].src.data(), mem[n].src.size(), src_access,
                                                mem[n].src_mr),
                Status::kOk);
      ASSERT_EQ(h.ep(size_t(n)).register_memory(mem[n].dst.data(), mem[n].dst.size(), dst_access,
                                                mem[n].dst_mr),
                Status::kOk);
    }
  }

  SendWr send_wr(const PlannedWr& w) const {
    const int s = w.sender, d = 1 - s;
    SendWr x;
    x.wr_id = w.wr_id;
    x.op = w.op;
    x.length = w.len;
    x.imm = w.imm;
    if (w.op == WrOpcode::kRead) {
      x.local_addr = mem[s].dst_mr.addr + w.dst_off;
      x.lkey = mem[s].dst_mr.lkey;
      x.remote_addr = mem[d].src_mr.addr + w.src_off;
      x.rkey = mem[d].src_mr.rkey;
    } else {
      x.local_addr = mem[s].src_mr.addr + w.src_off;
      x.lkey = mem[s].src_mr.lkey;
      x.remote_addr = mem[d].dst_mr.addr + w.dst_off;
      x.rkey = mem[d].dst_mr.rkey;
    }
    if (w.override_remote) {
      x.remote_addr = w.remote_addr;
      x.rkey = w.rkey;
    }
    return x;
  }

  RecvWr recv_wr(const PlannedWr& w) const {
    const int d = 1 - w.sender;
    return RecvWr{w.recv_wr_id, mem[d].dst_mr.addr + w.recv_off, w.recv_len, mem[d].dst_mr.lkey};
  }

  void post_recvs() {
    for (const auto& w : wrs)
      if (w.needs_recv) {
        ASSERT_EQ(h.ep(size_t(1 - w.sender)).post_recv(conn[1 - w.sender], recv_wr(w)),
                  Status::kOk);
      }
  }

  void post(PlannedWr& w) {
    ASSERT_EQ(h.ep(size_t(w.sender)).post_send(conn[w.sender], send_wr(w)), Status::kOk);
    w.posted = true;
  }

  // Posts every WR in batches separated by short random pauses.
  void post_all_in_batches(Rng& r) {
    size_t i = 0;
    while (i < wrs.size()) {
      const size_t batch = static_cast<size_t>(r.range(1, 4));
      for (size_t k = 0; k < batch && i < wrs.size(); ++k, ++i) {
        post(wrs[i]);
        if (seed_failed()) return;
      }
      if (i < wrs.size() && r.chance(0.5)) {
        const TimeNs until = h.now() + r.range(0, 30) * kMicrosecond;
        h.run_until([&] { return !check(); }, until);
      }
    }
  }

  bool range_placed(int node, size_t off, uint32_t len) const {
    return std::memcmp(mem[node].dst.data() + off, mem[node].expect.data() + off, len) == 0;
  }
  // "N of L bytes wrong, first at +k" for a failure message.
  std::string range_diff(int node, size_t off, uint32_t len) const {
    size_t wrong = 0, first = SIZE_MAX, last = 0, initial = 0;
    for (size_t i = 0; i < len; ++i)
      if (mem[node].dst[off + i] != mem[node].expect[off + i]) {
        ++wrong;
        initial += mem[node].dst[off + i] == static_cast<uint8_t>(mem[node].expect[off + i] ^ 0xA5);
        first = std::min(first, i);
        last = i;
      }
    return std::to_string(wrong) + " of " + std::to_string(len) + " bytes wrong (" +
           std::to_string(initial) + " never written), first at +" + std::to_string(first) +
           ", last at +" + std::to_string(last);
  }

  // Checks every completion polled since the last call. Returns false once
  // something failed (so run_until can stop early).
  bool check() {
    if (h.stalled()) {
      if (!stall_reported) ADD_FAILURE() << "harness stalled: " << h.stall_reason();
      stall_reported = true;
      return false;
    }
    for (int n = 0; n < 2; ++n) {
      auto& cs = h.completions(size_t(n));
      while (seen[n] < cs.size()) {
        const auto& c = cs[seen[n]++];
        if (is_recv_op(c.op)) {
          check_recv(n, c);
        } else {
          check_send(n, c);
        }
        if (seed_failed()) return false;
      }
    }
    return true;
  }

  void check_send(int n, const harness::CompletionRecord& c) {
    auto it = by_wr.find(c.wr_id);
    ASSERT_NE(it, by_wr.end()) << "unknown send completion wr_id " << c.wr_id;
    PlannedWr& w = wrs[it->second];
    EXPECT_EQ(w.sender, n);
    EXPECT_FALSE(w.send_done) << "COMP-4: wr " << c.wr_id << " completed twice";
    w.send_done = true;
    // COMP-2: posting order.
    ASSERT_LT(send_seen[n], send_order[n].size());
    EXPECT_EQ(c.wr_id, send_order[n][send_seen[n]]) << "COMP-2: send completions out of order";
    ++send_seen[n];
    EXPECT_EQ(c.conn, conn[n]);
    EXPECT_EQ(c.op, completion_op(w.op));
    if (!expect_ok) return;
    EXPECT_EQ(c.status, Status::kOk)
        << status_name(c.status) << " wr " << c.wr_id << " op " << int(w.op) << " len " << w.len;
    if (c.status != Status::kOk) return;
    // COMP-1: a completed WRITE/SEND has been placed at the peer, a READ here.
    EXPECT_TRUE(range_placed(data_node(w), w.dst_off, w.len))
        << "COMP-1: wr " << c.wr_id
        << " completed before its data was placed: " << range_diff(data_node(w), w.dst_off, w.len);
  }

  void check_recv(int n, const harness::CompletionRecord& c) {
    auto it = by_recv.find(c.wr_id);
    ASSERT_NE(it, by_recv.end()) << "unknown recv completion wr_id " << c.wr_id;
    PlannedWr& w = wrs[it->second];
    EXPECT_EQ(1 - w.sender, n);
    EXPECT_FALSE(w.recv_done) << "COMP-4: recv " << c.wr_id << " completed twice";
    w.recv_done = true;
    ASSERT_LT(recv_seen[n], recv_order[n].size());
    EXPECT_EQ(c.wr_id, recv_order[n][recv_seen[n]]) << "COMP-2: recv completions out of order";
    ++recv_seen[n];
    EXPECT_EQ(c.conn, conn[n]);
    if (!expect_ok) return;
    EXPECT_EQ(c.status, Status::kOk) << status_name(c.status);
    if (c.status != Status::kOk) return;
    EXPECT_EQ(c.op,
              w.op == WrOpcode::kWriteImm ? CompletionOp::kRecvWriteImm : CompletionOp::kRecv);
    EXPECT_EQ(c.byte_len, w.len);
    const bool imm = w.op == WrOpcode::kWriteImm || w.op == WrOpcode::kSendImm;
    EXPECT_EQ(c.has_imm, imm);
    if (imm) {
      EXPECT_EQ(c.imm, w.imm);
    }
    // COMP-3: this message and everything the sender posted before it on the
    // connection (WRITE/SEND family) has been placed.
    for (const auto& o : wrs) {
      if (o.sender != w.sender || o.seq > w.seq || o.op == WrOpcode::kRead) continue;
      EXPECT_TRUE(range_placed(n, o.dst_off, o.len))
          << "COMP-3: recv " << c.wr_id << " reported before wr " << o.wr_id
          << " was placed: " << range_diff(n, o.dst_off, o.len);
    }
  }

  std::string describe() const {
    std::string out;
    const auto& c = h.config();
    out += "network: " + std::to_string(c.net.paths.size()) +
           " paths, udp_checksum=" + std::to_string(c.net.udp_checksum) +
           ", gather=" + std::to_string(c.gather) + "\n";
    for (size_t i = 0; i < c.net.paths.size(); ++i) {
      const auto& p = c.net.paths[i];
      const auto t = h.net().path_totals(uint32_t(i));
      out +=
          "  path " + std::to_string(i) + ": " + std::to_string(p.rate_bps / harness::kGbps) +
          " Gb/s, " + std::to_string(p.delay_ns / 1000) + " us, q " +
          std::to_string(p.queue_limit_bytes) + " ecn " +
          (p.ecn_threshold_bytes == harness::kUnlimited ? std::string("off")
                                                        : std::to_string(p.ecn_threshold_bytes)) +
          ", loss " + std::to_string(p.loss) + " dup " + std::to_string(p.duplicate) + " corrupt " +
          std::to_string(p.corrupt) + " | sent " + std::to_string(t.packets_sent) + " lost " +
          std::to_string(t.lost) + " qdrop " + std::to_string(t.dropped_queue) + " down " +
          std::to_string(t.dropped_down) + " ce " + std::to_string(t.ce_marked) + "\n";
    }
    for (int n = 0; n < 2; ++n) {
      const auto& e = c.endpoints[size_t(n)];
      out += "endpoint " + std::to_string(n) + ": mtu " + std::to_string(e.mtu) + " paths " +
             std::to_string(e.num_paths) + " window_log2 " + std::to_string(e.window_log2) +
             " ack_every " + std::to_string(e.ack_every) + " cover " +
             std::to_string(e.cover_payload) + " cc " + std::to_string(e.cc.enabled) + "\n";
      if (const ConnStats* cs = h.ep(size_t(n)).conn_stats(conn[n])) {
        out += "  conn: sent " + std::to_string(cs->data_packets_sent) + " retx " +
               std::to_string(cs->retransmissions) + " recv " +
               std::to_string(cs->data_packets_received) + " dup " +
               std::to_string(cs->duplicates_received) + " naks " + std::to_string(cs->naks_sent) +
               "/" + std::to_string(cs->naks_received) + " losses " +
               std::to_string(cs->losses_declared) + " timeouts " + std::to_string(cs->timeouts) +
               " retire " + std::to_string(cs->path_retirements) + " oow " +
               std::to_string(cs->out_of_window) + " rnr " + std::to_string(cs->rnr_naks_sent) +
               "\n";
        for (size_t i = 0; i < h.ep(size_t(n)).path_count(conn[n]); ++i) {
          PathStats ps;
          if (!h.ep(size_t(n)).path_stats(conn[n], i, ps)) continue;
          if (ps.packets_sent == 0 && ps.probes_sent == 0) continue;
          out += "    slot " + std::to_string(i) + " entropy " + std::to_string(ps.entropy) +
                 (ps.state == PathState::kActive ? " active" : " probing") + " sent " +
                 std::to_string(ps.packets_sent) + " retx " + std::to_string(ps.retransmissions) +
                 " acked " + std::to_string(ps.packets_acked) + " losses " +
                 std::to_string(ps.losses) + " timeouts " + std::to_string(ps.timeouts) +
                 " retired " + std::to_string(ps.retirements) + " probes " +
                 std::to_string(ps.probes_sent) + " inflight " + std::to_string(ps.inflight_bytes) +
                 " cwnd " + std::to_string(ps.cwnd_bytes) + " srtt " + std::to_string(ps.srtt_ns) +
                 "\n";
        }
      }
    }
    for (const auto& w : wrs)
      out += "  wr " + std::to_string(w.wr_id) + " from " + std::to_string(w.sender) + " op " +
             std::to_string(int(w.op)) + " len " + std::to_string(w.len) + " posted " +
             std::to_string(w.posted) + " done " + std::to_string(w.send_done) +
             (w.needs_recv ? " recv_done " + std::to_string(w.recv_done) : std::string()) + "\n";
    out += "now " + std::to_string(h.now().ns) + " ns, steps " + std::to_string(h.steps()) +
           ", timeouts handled " + std::to_string(h.timeouts_handled(0)) + "/" +
           std::to_string(h.timeouts_handled(1)) + " (idle " + std::to_string(h.idle_timeouts(0)) +
           "/" + std::to_string(h.idle_timeouts(1)) + ")" +
           (h.stalled() ? ", STALLED: " + h.stall_reason() : std::string()) + "\n";
    return out;
  }

  [[nodiscard]] bool all_done() const {
    for (const auto& w : wrs)
      if (!w.send_done || (w.needs_recv && !w.recv_done)) return false;
    return true;
  }

  // Final image: every target range correct, guards untouched, sources intact.
  void check_memory() {
    (void)check();  // reports a stall and any completion not seen yet
    // Ranges of WRs that may have been partly placed: every byte must be the
    // initial one or the right one; then they are taken as they are.
    for (const auto& w : wrs) {
      if (!w.partial_ok) continue;
      const int dn = data_node(w);
      for (uint32_t i = 0; i < w.len; ++i) {
        const uint8_t got = mem[dn].dst[w.dst_off + i];
        const uint8_t want = mem[dn].expect[w.dst_off + i];
        if (got != want && got != static_cast<uint8_t>(want ^ 0xA5)) {
          ADD_FAILURE() << "wr " << w.wr_id << " byte " << i
                        << " holds neither the old nor the new value";
          break;
        }
      }
      std::memcpy(mem[dn].expect.data() + w.dst_off, mem[dn].dst.data() + w.dst_off, w.len);
    }
    for (int n = 0; n < 2; ++n) {
      EXPECT_TRUE(mem[n].src == mem[n].src_copy) << "node " << n << " source buffer changed";
      if (mem[n].dst != mem[n].expect) {
        size_t first = 0;
        while (mem[n].dst[first] == mem[n].expect[first]) ++first;
        std::string where = "guard";
        for (const auto& w : wrs)
          if (data_node(w) == n && first >= w.dst_off && first < w.dst_off + w.len)
            where = "wr " + std::to_string(w.wr_id) + " op " + std::to_string(int(w.op)) + " at +" +
                    std::to_string(first - w.dst_off) + " of " + std::to_string(w.len);
        ADD_FAILURE() << "node " << n << " dst differs first at byte " << first << " (" << where
                      << ")";
      }
    }
  }
};

}  // namespace metaroce::proptest
