// Workloads: flows (src host, dst host, bytes, start time) and the table that
// tracks their completion. A flow is one or more RDMA WRITEs on the
// connection src -> dst; it completes when the sender's last send completion
// arrives (the data is acknowledged).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/sim/scheduler.hpp"
#include "metaroce/sim/time.hpp"

namespace metaroce::sim {

struct FlowSpec {
  uint32_t src = 0;
  uint32_t dst = 0;
  uint64_t bytes = 0;
  SimTime start{0};
  // Flows that must be delivered first (UINT32_MAX: none). A flow with
  // dependencies starts when the last of them has been delivered, meaning all
  // its bytes have been placed at its receiver, which a collective learns
  // from a receive completion (and not before start).
  uint32_t after[2] = {UINT32_MAX, UINT32_MAX};
};

// A random permutation without fixed points: host i sends to perm[i].
std::vector<FlowSpec> permutation(uint32_t hosts, uint64_t bytes, uint64_t seed);
// `senders` distinct hosts (not `receiver`), chosen at random, each send
// `bytes` to `receiver`.
std::vector<FlowSpec> incast(uint32_t hosts, uint32_t receiver, uint32_t senders, uint64_t bytes,
                             uint64_t seed);
// Every host sends `bytes` to every other host.
std::vector<FlowSpec> all_to_all(uint32_t hosts, uint64_t bytes);
// Ring all-reduce of `bytes` per host over hosts 0..n-1 in ring order:
// 2(n-1) steps (reduce-scatter, then all-gather); in each, host i sends
// chunk i - step (mod n) to host i+1, once the previous step's chunk from
// host i-1 has arrived and its own previous chunk has arrived at i+1 (NCCL's
// ring moves on when data lands, not when the sender hears it was
// acknowledged). Chunk c is bytes/n bytes, one more for c < bytes % n, so
// each step moves `bytes` in all; fewer bytes than hosts throws
// std::invalid_argument. Flow index: step * n + i.
std::vector<FlowSpec> ring_allreduce(uint32_t hosts, uint64_t bytes);
// The same on each ring of `rings` at once (ring = host ids in rank order,
// at least two, no host twice in one ring). Flows of ring r come in one block,
// after those of rings 0..r-1; within it the index is step * n_r + rank.
std::vector<FlowSpec> ring_allreduce(const std::vector<std::vector<uint32_t>>& rings,
                                     uint64_t bytes);
// NCCL-style rings on a rail-optimized cluster (topology.hpp: NIC r of server
// s is host s * rails + r): ranks sit on the servers in one seeded random
// order (a scheduler that fragments the job across racks), and ring r joins
// NIC r of every server in that order, so ring r stays on rail r.
std::vector<std::vector<uint32_t>> rail_rings(uint32_t servers, uint32_t rails, uint64_t seed);

// Background traffic: `count` flows of `bytes` between uniformly random
// distinct hosts, Poisson arrivals (exponential gaps of mean `mean_gap`
// across the whole network) from `start` on.
std::vector<FlowSpec> background(uint32_t hosts, uint64_t bytes, uint32_t count, SimTime mean_gap,
                                 SimTime start, uint64_t seed);
// The mean gap that makes background flows of `bytes` load every host NIC to
// `load` (0..1] of `host_rate_mbps` on average.
SimTime background_gap(uint32_t hosts, uint64_t bytes, uint64_t host_rate_mbps, double load);

// The largest flow a scenario file or traffic matrix may give, in bytes:
// MetaRoCE posts a flow's WRs as its send queue frees, so any size up to
// here costs the same memory (the baselines refuse 2^32 - 1 packets or more).
inline constexpr uint64_t kMaxFlowBytes = 9'000'000'000'000'000'000u;

// "" for a flow's byte count in [1, kMaxFlowBytes]; otherwise settings.hpp's
// range_error, "WHAT: 9.1e+18 is not an integer in [1, 9e+18]": one check
// and one message for every way a workload's bytes are written.
std::string flow_bytes_error(std::string_view what, long double bytes);

// A traffic matrix: one flow a line, `src dst bytes start_us` (whitespace
// separated; blank lines and lines starting with '#' are skipped). Throws
// std::invalid_argument naming `source`:line for a malformed line, a host
// outside [0, hosts), src == dst or bytes outside flow_bytes_error's range.
std::vector<FlowSpec> read_traffic_matrix(std::istream& in, uint32_t hosts,
                                          const std::string& source = "traffic matrix");

struct FlowState {
  FlowSpec spec;
  SimTime finish = SimTime::never();     // the sender's last completion
  SimTime delivered = SimTime::never();  // the receiver had every byte
  uint64_t wrs_left = 0;
  bool failed = false;
  [[nodiscard]] bool done() const { return finish != SimTime::never(); }
};

class FlowTable {
 public:
  FlowTable(Scheduler& sched, std::vector<FlowSpec> flows);
  // Called to start a flow whose dependencies have completed.
  std::function<void(uint32_t flow, SimTime now)> start_dependent;
  // Whether flow f waits for other flows (the starter skips it).
  [[nodiscard]] bool has_deps(size_t f) const { return deps_left_[f] > 0; }
  [[nodiscard]] size_t size() const { return flows_.size(); }
  [[nodiscard]] FlowState& at(size_t i) { return flows_[i]; }
  [[nodiscard]] const FlowState& at(size_t i) const { return flows_[i]; }
  [[nodiscard]] size_t completed() const { return completed_; }
  [[nodiscard]] size_t failed() const { return failed_; }
  [[nodiscard]] bool all_done() const { return completed_ + failed_ == flows_.size(); }
  // One WR of flow f completed (ok = success). A flow complete at its sender
  // is also delivered, if its transport did not say so earlier.
  void wr_done(uint32_t f, bool ok, SimTime now);
  // Every byte of flow f has been placed at its receiver: dependents start.
  void delivered(uint32_t f, SimTime now);
  // Whether other flows wait for f (its transport then reports delivery).
  [[nodiscard]] bool has_dependents(size_t f) const { return !dependents_[f].empty(); }

 private:
  Scheduler& sched_;
  std::vector<FlowState> flows_;
  std::vector<uint32_t> deps_left_;
  std::vector<std::vector<uint32_t>> dependents_;
  size_t completed_ = 0;
  size_t failed_ = 0;
};

}  // namespace metaroce::sim
