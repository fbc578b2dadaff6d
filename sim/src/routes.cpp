// Network::compute_routes: every switch's ECMP group toward every host.
//
// A host with one link is reached only through the switch at its other end
// (hosts do not forward), so every other switch's group toward it is that
// switch's group toward the host's switch, and the host's switch's group is
// its port to the host. One search per such switch then serves all of its
// hosts: leafspine8192 searched 8,192 times and now searches once per leaf.
// A host whose link is down, or whose link goes to another host, keeps a
// search of its own. The groups, their ids (first seen in host order, as the
// search per host numbered them), max_hops and max_path_delay are those of
// a search per host.
#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "metaroce/sim/group_interner.hpp"
#include "metaroce/sim/network.hpp"

namespace metaroce::sim {
namespace {

struct Hop {
  uint32_t to;
  uint16_t port;
  uint64_t delay_ps;
};
using Adjacency = std::vector<std::vector<Hop>>;

constexpr uint32_t kUnreached = UINT32_MAX;

// Shortest paths toward `root` over the links that are up; hosts other than
// the root do not forward.
class Search {
 public:
  Search(uint32_t nodes, uint32_t hosts, bool measure_delay)
      : dist(nodes), far_ps(measure_delay ? nodes : 0), hosts_(hosts) {}

  void run(const Adjacency& adj, uint32_t root) {
    root_ = root;
    std::fill(dist.begin(), dist.end(), kUnreached);
    dist[root] = 0;
    frontier.assign(1, root);
    for (size_t qi = 0; qi < frontier.size(); ++qi) {
      const uint32_t u = frontier[qi];
      if (u < hosts_ && u != root) continue;
      for (const Hop& hop : adj[u]) {
        if (dist[hop.to] == kUnreached) {
          dist[hop.to] = dist[u] + 1;
          frontier.push_back(hop.to);
        }
      }
    }
    if (far_ps.empty()) return;
    // Nearest first, so a next hop's delay is known before it is needed.
    for (const uint32_t u : frontier) {
      uint64_t d = 0;
      if (u != root)
        for (const Hop& hop : adj[u])
          if (next_hop(u, hop)) d = std::max(d, hop.delay_ps + far_ps[hop.to]);
      far_ps[u] = d;
    }
  }

  // u's ports on a shortest path to the root; none where the root is
  // unreachable (a host whose link is down, after a reroute).
  void group(const Adjacency& adj, uint32_t u, std::vector<uint16_t>& grp) const {
    grp.clear();
    if (dist[u] != kUnreached && u != root_)
      for (const Hop& hop : adj[u])
        if (next_hop(u, hop)) grp.push_back(hop.port);
  }

  std::vector<uint32_t> dist;
  std::vector<uint32_t> frontier;  // in search order
  // The longest one-way propagation delay to the root over the shortest
  // paths, per node (only when measuring).
  std::vector<uint64_t> far_ps;

 private:
  [[nodiscard]] bool next_hop(uint32_t u, const Hop& hop) const {
    return dist[hop.to] != kUnreached && dist[hop.to] + 1 == dist[u] &&
           (hop.to >= hosts_ || hop.to == root_);
  }

  uint32_t hosts_;
  uint32_t root_ = 0;
};

// The largest value over some hosts, and the largest over all of them but
// the one holding the first: a host's own search leaves the host out.
class TopTwo {
 public:
  void add(uint32_t host, uint64_t v) {
    if (!first_ || v > *first_) {
      second_ = first_;
      first_ = v;
      first_host_ = host;
    } else if (!second_ || v > *second_) {
      second_ = v;
    }
  }
  [[nodiscard]] std::optional<uint64_t> without(uint32_t host) const {
    return first_host_ != host ? first_ : second_;
  }

 private:
  std::optional<uint64_t> first_, second_;
  uint32_t first_host_ = UINT32_MAX;
};

// What a search from a host's switch says of the hosts: their distance and
// propagation delay to that switch; and the first host found behind it, whose
// routes on every other switch its later hosts copy.
struct SwitchRoot {
  TopTwo dist;
  TopTwo far_ps;
  uint32_t first_host = 0;
};

struct Copy {
  uint32_t dst;   // a later host of a switch
  uint32_t from;  // that switch's first host
  uint32_t root;  // that switch, which has a group of its own toward dst
};

// The route tables are switches x hosts; a host's ids are a column of them,
// a store per switch, each in a page of its own at thousands of switches.
// Columns gathers some hosts' ids and writes them one switch (a row) at a
// time: at 4,096 leaves the stores had taken a third of the route build.
class Columns {
 public:
  explicit Columns(uint32_t switches)
      : switches_(switches),
        width_(std::clamp<uint32_t>(kBytes / 4 / std::max(switches, 1u), 1, kMaxWidth)),
        ids_(size_t{width_} * switches) {
    hosts_.reserve(width_);
  }

  // Room for host dst's id on every switch, filled by the caller.
  uint32_t* open(uint32_t dst) {
    hosts_.push_back(dst);
    return ids_.data() + (hosts_.size() - 1) * switches_;
  }
  [[nodiscard]] bool full() const { return hosts_.size() == width_; }

  void flush(std::vector<std::unique_ptr<Switch>>& sw) {
    for (uint32_t s = 0; s < switches_; ++s) {
      std::vector<uint32_t>& route = sw[s]->route;
      for (size_t c = 0; c < hosts_.size(); ++c) route[hosts_[c]] = ids_[c * switches_ + s];
    }
    hosts_.clear();
  }

 private:
  static constexpr uint32_t kBytes = 512 * 1024;  // within a core's L2
  static constexpr uint32_t kMaxWidth = 64;
  uint32_t switches_;
  uint32_t width_;
  std::vector<uint32_t> ids_;
  std::vector<uint32_t> hosts_;
};

}  // namespace

uint32_t Network::compute_routes(bool measure_delay, BuildProgress progress) {
  const uint32_t h = graph_.num_hosts;
  const uint32_t n = h + graph_.num_switches;
  const auto nsw = static_cast<uint32_t>(switches_.size());
  // Adjacency with each link's delay: read through the Port, the delay was
  // a cache miss per link per search.
  Adjacency adj(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (Port* p : nodes_[i]->ports)
      if (p->up())
        adj[i].push_back({p->pipe.to->id, static_cast<uint16_t>(p->index), p->pipe.delay.ps});
  }
  std::vector<GroupInterner> dedup(nsw);
  for (auto& s : switches_) {
    s->route.assign(h, Switch::kNoRoute);
    s->group_ports.clear();
  }
  std::vector<uint16_t> grp, toward;
  auto group_id = [&](uint32_t s, const std::vector<uint16_t>& g) {
    if (g.empty()) return Switch::kNoRoute;
    try {
      return dedup[s].intern(g, switches_[s]->group_ports);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("routes of switch " + std::to_string(s) + ": " + e.what());
    }
  };
  Search search(n, h, measure_delay);
  // Per switch a host hangs off: its slot in roots. A cache of group ids per
  // (slot, switch) grew with the square of the switch count (tens of MB at
  // thousands of leaves); the slot's first host's routes hold the same ids.
  std::vector<uint32_t> slot_of(nsw, kUnreached);
  std::vector<SwitchRoot> roots;
  // A later host of a switch copies its first host's ids on every other
  // switch; after all ids are known, one switch at a time.
  std::vector<Copy> copies;
  Columns columns(nsw);
  uint32_t max_dist = 0;
  for (uint32_t dst = 0; dst < h; ++dst) {
    const bool via_switch = adj[dst].size() == 1 && adj[dst][0].to >= h;
    if (!via_switch) {
      search.run(adj, dst);
      uint32_t* column = columns.open(dst);
      for (uint32_t s = 0; s < nsw; ++s) {
        search.group(adj, h + s, grp);
        column[s] = group_id(s, grp);
      }
      for (const uint32_t u : search.frontier)
        if (u < h) {
          max_dist = std::max(max_dist, search.dist[u]);
          if (measure_delay)
            graph_.max_path_delay = std::max(graph_.max_path_delay, SimTime{search.far_ps[u]});
        }
    } else {
      const uint32_t tor = adj[dst][0].to;
      const uint32_t root = tor - h;
      const bool first = slot_of[root] == kUnreached;
      if (first) {
        slot_of[root] = static_cast<uint32_t>(roots.size());
        SwitchRoot& r = roots.emplace_back();
        r.first_host = dst;
        search.run(adj, tor);
        for (const uint32_t u : search.frontier)
          if (u < h) {
            r.dist.add(u, search.dist[u]);
            if (measure_delay) r.far_ps.add(u, search.far_ps[u]);
          }
      }
      const SwitchRoot& r = roots[slot_of[root]];
      // The host's switch sends down its link, if that direction is up.
      grp.clear();
      uint64_t last_hop_ps = 0;
      for (const Hop& hop : adj[tor])
        if (hop.to == dst) {
          grp.push_back(hop.port);
          last_hop_ps = std::max(last_hop_ps, hop.delay_ps);
        }
      if (first) {  // `search` is from the host's switch
        uint32_t* column = columns.open(dst);
        for (uint32_t s = 0; s < nsw; ++s) {
          if (s == root) {
            column[s] = group_id(s, grp);
          } else {
            search.group(adj, h + s, toward);
            column[s] = group_id(s, toward);
          }
        }
      } else {
        switches_[root]->route[dst] = group_id(root, grp);
        copies.push_back({dst, r.first_host, root});
      }
      // Every other host is one link further from dst than from its switch.
      if (const auto d = r.dist.without(dst))
        max_dist = std::max(max_dist, static_cast<uint32_t>(*d + 1));
      if (measure_delay)
        if (const auto d = r.far_ps.without(dst))
          graph_.max_path_delay = std::max(graph_.max_path_delay, SimTime{*d + last_hop_ps});
    }
    if (columns.full()) columns.flush(switches_);
    if (progress.fn != nullptr) progress.fn(progress.ctx, dst + 1, h);
  }
  columns.flush(switches_);
  for (uint32_t s = 0; s < nsw; ++s) {
    std::vector<uint32_t>& route = switches_[s]->route;
    for (const Copy& c : copies)
      if (c.root != s) route[c.dst] = route[c.from];
  }
  return max_dist;
}

}  // namespace metaroce::sim
