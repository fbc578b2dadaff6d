#include "metaroce/sim/workload.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "metaroce/sim/rng.hpp"

namespace metaroce::sim {

std::vector<FlowSpec> permutation(uint32_t hosts, uint64_t bytes, uint64_t seed) {
  if (hosts < 2) throw std::invalid_argument("permutation: need two hosts");
  // Sattolo's algorithm: a uniformly random cyclic permutation, no fixed points.
  std::vector<uint32_t> perm(hosts);
  std::iota(perm.begin(), perm.end(), 0u);
  Rng rng(derive_seed(seed, 0x7065726d));
  for (uint32_t i = hosts - 1; i > 0; --i) {
    const auto j = static_cast<uint32_t>(rng.below(i));
    std::swap(perm[i], perm[j]);
  }
  std::vector<FlowSpec> f;
  f.reserve(hosts);
  for (uint32_t i = 0; i < hosts; ++i) f.push_back({i, perm[i], bytes, SimTime{0}});
  return f;
}

std::vector<FlowSpec> incast(uint32_t hosts, uint32_t receiver, uint32_t senders, uint64_t bytes,
                             uint64_t seed) {
  if (receiver >= hosts || senders >= hosts)
    throw std::invalid_argument("incast: too many senders");
  std::vector<uint32_t> cand;
  for (uint32_t i = 0; i < hosts; ++i)
    if (i != receiver) cand.push_back(i);
  Rng rng(derive_seed(seed, 0x696e6361));
  for (uint32_t i = 0; i < senders; ++i) {
    const auto j = i + static_cast<uint32_t>(rng.below(cand.size() - i));
    std::swap(cand[i], cand[j]);
  }
  cand.resize(senders);
  std::sort(cand.begin(), cand.end());
  std::vector<FlowSpec> f;
  for (uint32_t s : cand) f.push_back({s, receiver, bytes, SimTime{0}});
  return f;
}

std::vector<FlowSpec> all_to_all(uint32_t hosts, uint64_t bytes) {
  std::vector<FlowSpec> f;
  for (uint32_t s = 0; s < hosts; ++s)
    for (uint32_t d = 0; d < hosts; ++d)
      if (s != d) f.push_back({s, d, bytes, SimTime{0}});
  return f;
}

std::vector<FlowSpec> ring_allreduce(uint32_t hosts, uint64_t bytes) {
  if (hosts < 2) throw std::invalid_argument("ring_allreduce: need two hosts");
  const uint64_t chunk = std::max<uint64_t>(1, bytes / hosts);
  const uint32_t steps = 2 * (hosts - 1);
  std::vector<FlowSpec> f;
  f.reserve(size_t{steps} * hosts);
  // Flow index: step * hosts + sender.
  for (uint32_t k = 0; k < steps; ++k) {
    for (uint32_t i = 0; i < hosts; ++i) {
      FlowSpec s{i, (i + 1) % hosts, chunk, SimTime{0}};
      if (k > 0) {
        s.after[0] = (k - 1) * hosts + (i + hosts - 1) % hosts;  // chunk from the predecessor
        s.after[1] = (k - 1) * hosts + i;                        // our previous send
      }
      f.push_back(s);
    }
  }
  return f;
}

FlowTable::FlowTable(Scheduler& sched, std::vector<FlowSpec> flows) : sched_(sched) {
  flows_.reserve(flows.size());
  deps_left_.assign(flows.size(), 0);
  dependents_.resize(flows.size());
  for (size_t i = 0; i < flows.size(); ++i) {
    flows_.push_back(FlowState{flows[i]});
    for (uint32_t d : flows[i].after) {
      if (d == UINT32_MAX) continue;
      if (d >= flows.size() || d == i) throw std::invalid_argument("flow dependency out of range");
      ++deps_left_[i];
      dependents_[d].push_back(static_cast<uint32_t>(i));
    }
  }
}

void FlowTable::wr_done(uint32_t f, bool ok, SimTime now) {
  FlowState& st = flows_.at(f);
  if (st.done() || st.failed) return;
  if (!ok) {
    st.failed = true;
    ++failed_;
  } else if (st.wrs_left > 0 && --st.wrs_left == 0) {
    st.finish = now;
    ++completed_;
    for (uint32_t d : dependents_[f]) {
      if (--deps_left_[d] == 0 && start_dependent) {
        FlowState& dep = flows_[d];
        dep.spec.start = std::max(dep.spec.start, now);  // FCT counts from the real start
        start_dependent(d, now);
      }
    }
  }
  if (all_done()) sched_.stop();
}

}  // namespace metaroce::sim
