#include "metaroce/sim/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <istream>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "metaroce/sim/rng.hpp"
#include "metaroce/sim/settings.hpp"

namespace metaroce::sim {
namespace {
// The latest start a workload may give a flow, as a traffic matrix's
// start_us (and a config file's times): 1e12 us, in ps, well inside 64 bits.
constexpr double kMaxStartPs = 1e18;
}  // namespace

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
  if (receiver >= hosts)
    throw std::invalid_argument("incast: receiver " + std::to_string(receiver) +
                                " is not a host (" + std::to_string(hosts) + " hosts: 0.." +
                                std::to_string(hosts - 1) + ")");
  if (senders >= hosts)
    throw std::invalid_argument("incast: " + std::to_string(senders) + " senders, at most " +
                                std::to_string(hosts - 1) + " (" + std::to_string(hosts) +
                                " hosts, one the receiver)");
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
  std::vector<uint32_t> ring(hosts);
  std::iota(ring.begin(), ring.end(), 0u);
  return ring_allreduce(std::vector<std::vector<uint32_t>>{std::move(ring)}, bytes);
}

std::vector<FlowSpec> ring_allreduce(const std::vector<std::vector<uint32_t>>& rings,
                                     uint64_t bytes) {
  size_t total = 0;
  for (const auto& ring : rings) {
    if (ring.size() < 2) throw std::invalid_argument("ring_allreduce: need two hosts");
    total += 2 * (ring.size() - 1) * ring.size();
  }
  std::vector<FlowSpec> f;
  f.reserve(total);
  for (const auto& ring : rings) {
    const auto n = static_cast<uint32_t>(ring.size());
    // All the bytes move, as NCCL moves them: the first bytes % n chunks
    // take one byte more (bytes / n alone dropped the remainder). A rank
    // without a byte would send an empty message, which no transport here
    // models.
    if (bytes < n)
      throw std::invalid_argument("ring_allreduce: " + std::to_string(bytes) + " bytes over " +
                                  std::to_string(n) + " ranks, less than one byte a rank");
    const uint64_t chunk = bytes / n, extra = bytes % n;
    const uint32_t steps = 2 * (n - 1);
    const auto base = static_cast<uint32_t>(f.size());
    // Flow index: base + step * n + rank.
    for (uint32_t k = 0; k < steps; ++k) {
      for (uint32_t i = 0; i < n; ++i) {
        // Step k of either phase, rank i sends chunk i - k (mod n): the one
        // its predecessor sent it at step k - 1.
        const uint32_t c = static_cast<uint32_t>((i + uint64_t{k} * (n - 1)) % n);
        FlowSpec s{ring[i], ring[(i + 1) % n], chunk + (c < extra ? 1 : 0), SimTime{0}};
        if (k > 0) {
          s.after[0] = base + (k - 1) * n + (i + n - 1) % n;  // chunk from the predecessor
          s.after[1] = base + (k - 1) * n + i;                // our previous send
        }
        f.push_back(s);
      }
    }
  }
  return f;
}

std::vector<std::vector<uint32_t>> rail_rings(uint32_t servers, uint32_t rails, uint64_t seed) {
  if (servers < 2 || rails == 0) throw std::invalid_argument("rail_rings: bad dimensions");
  std::vector<uint32_t> order(servers);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), Rng(derive_seed(seed, 0x72696e67)));
  std::vector<std::vector<uint32_t>> rings(rails);
  for (uint32_t r = 0; r < rails; ++r)
    for (uint32_t s : order) rings[r].push_back(s * rails + r);
  return rings;
}

std::vector<FlowSpec> background(uint32_t hosts, uint64_t bytes, uint32_t count, SimTime mean_gap,
                                 SimTime start, uint64_t seed) {
  if (hosts < 2 || bytes == 0) throw std::invalid_argument("background: need two hosts and bytes");
  Rng rng(derive_seed(seed, 0x626b6772));
  std::vector<FlowSpec> f;
  f.reserve(count);
  double t = static_cast<double>(start.ps);
  for (uint32_t i = 0; i < count; ++i) {
    t += -std::log1p(-rng.uniform()) * static_cast<double>(mean_gap.ps);
    if (t > kMaxStartPs)
      throw std::invalid_argument("background: flow " + std::to_string(i) +
                                  " would start after 1e12 us");
    const auto src = static_cast<uint32_t>(rng.below(hosts));
    auto dst = static_cast<uint32_t>(rng.below(hosts - 1));
    if (dst >= src) ++dst;
    f.push_back({src, dst, bytes, SimTime{static_cast<uint64_t>(t)}});
  }
  return f;
}

SimTime background_gap(uint32_t hosts, uint64_t bytes, uint64_t host_rate_mbps, double load) {
  if (hosts == 0 || host_rate_mbps == 0 || !(load > 0))
    throw std::invalid_argument("background: load must be > 0");
  // Each flow keeps one NIC busy for bytes / rate; `hosts` NICs at `load`.
  const double flow_ps = static_cast<double>(bytes) * 8e6 / static_cast<double>(host_rate_mbps);
  const double gap = flow_ps / (load * hosts);
  if (!(gap <= kMaxStartPs)) {  // beyond, the conversion is undefined (a tiny load read 0)
    std::ostringstream o;
    o << "background: at load " << load << " flows are more than 1e12 us apart";
    throw std::invalid_argument(o.str());
  }
  return SimTime{static_cast<uint64_t>(gap)};
}

namespace {

// A whole token of decimal digits (no sign, no fraction, no exponent).
bool whole_number(const std::string& t, uint64_t& v) {
  if (t.empty() || !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return false;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  return ec == std::errc{} && end == t.data() + t.size();
}

// A whole token of a non-negative decimal number (12, 12.5, 1e3; no sign,
// no inf, nan or hex).
bool plain_decimal(const std::string& t, double& v) {
  if (t.empty() || !((t[0] >= '0' && t[0] <= '9') || t[0] == '.') ||
      t.find_first_not_of("0123456789.eE+-") != std::string::npos)
    return false;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  return ec == std::errc{} && end == t.data() + t.size() && std::isfinite(v);
}

}  // namespace

std::string flow_bytes_error(std::string_view what, long double bytes) {
  return range_error(what, bytes, 1, static_cast<double>(kMaxFlowBytes), true);
}

std::vector<FlowSpec> read_traffic_matrix(std::istream& in, uint32_t hosts,
                                          const std::string& source) {
  std::vector<FlowSpec> f;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    const auto where = [&] { return source + ":" + std::to_string(n) + ": "; };
    // An editor's byte-order mark glued to the first host read as a bad host.
    if (n == 1 && line.starts_with("\xEF\xBB\xBF"))
      throw std::invalid_argument(where() +
                                  "starts with a UTF-8 byte-order mark: save the file without one");
    line.erase(std::min(line.find('#'), line.size()));  // a comment, whole line or its end
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // Whole tokens, exactly four: a stream's >> would read "1.5" as the
    // bytes 1 and the start 0.5, and "-4096" as 2^64 - 4096.
    std::istringstream ls(line);
    std::vector<std::string> tok;
    for (std::string t; ls >> t;) tok.push_back(t);
    if (tok.size() != 4)
      throw std::invalid_argument(where() + "expected 'src dst bytes start_us', got '" + line +
                                  "'");
    uint64_t src = 0, dst = 0, bytes = 0;
    double start_us = 0;
    // "+1" and "1.0" are not out of range but not host numbers: said so
    // (digits alone that overflow are out of range).
    for (int i = 0; i < 2; ++i)
      if (tok[i].find_first_not_of("0123456789") != std::string::npos)
        throw std::invalid_argument(where() + (i == 0 ? "src" : "dst") + " '" + tok[i] +
                                    "' is not a whole number");
    if (!whole_number(tok[0], src) || !whole_number(tok[1], dst) || src >= hosts || dst >= hosts)
      throw std::invalid_argument(where() + "host out of range (0.." + std::to_string(hosts - 1) +
                                  "): '" + tok[0] + " " + tok[1] + "'");
    if (src == dst) throw std::invalid_argument(where() + "src == dst");
    // Digits past 64 bits are a count out of range, not a malformed one.
    const bool digits =
        !tok[2].empty() && tok[2].find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      throw std::invalid_argument(where() + "bytes '" + tok[2] +
                                  "' is not a whole number of bytes");
    const long double count = std::strtold(tok[2].c_str(), nullptr);
    if (const std::string e = flow_bytes_error("bytes", count); !e.empty())
      throw std::invalid_argument(where() + e);
    (void)whole_number(tok[2], bytes);  // in range: it fits
    if (!plain_decimal(tok[3], start_us) || !(start_us <= 1e12))
      throw std::invalid_argument(where() + "start_us '" + tok[3] + "' not in [0, 1e12]");
    f.push_back({static_cast<uint32_t>(src), static_cast<uint32_t>(dst), bytes,
                 SimTime{static_cast<uint64_t>(start_us * 1e6 + 0.5)}});
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
    delivered(f, now);
  }
  if (all_done()) sched_.stop();
}

void FlowTable::delivered(uint32_t f, SimTime now) {
  FlowState& st = flows_.at(f);
  if (st.delivered != SimTime::never()) return;
  st.delivered = now;
  for (uint32_t d : dependents_[f]) {
    if (--deps_left_[d] == 0 && start_dependent) {
      FlowState& dep = flows_[d];
      dep.spec.start = std::max(dep.spec.start, now);  // FCT counts from the real start
      start_dependent(d, now);
    }
  }
}

}  // namespace metaroce::sim
