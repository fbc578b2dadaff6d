// Network::compute_routes searches once per switch that hosts hang off; these
// tests hold its tables to a search per host (the definition: each switch's
// ECMP group toward each host over the links that are up, deduplicated in
// host order) on random graphs with faults.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <vector>

#include "metaroce/sim/network.hpp"
#include "metaroce/sim/rng.hpp"
#include "metaroce/sim/scheduler.hpp"
#include "metaroce/sim/topology.hpp"

namespace metaroce::sim {
namespace {

struct Tables {
  std::vector<std::vector<uint32_t>> route;  // per switch, per host
  std::vector<std::vector<uint16_t>> group_ports;
  uint32_t max_dist = 0;
  uint64_t max_delay_ps = 0;
};

// The reference: a breadth-first search from every host.
Tables search_per_host(Network& net) {
  const uint32_t h = net.num_hosts();
  const auto m = static_cast<uint32_t>(net.num_switches());
  const uint32_t n = h + m;
  std::vector<std::vector<const Port*>> out(n);
  for (uint32_t i = 0; i < h; ++i) out[i].push_back(&net.host_port(i));
  for (uint32_t s = 0; s < m; ++s)
    for (const Port* p : net.sw(s).ports) out[h + s].push_back(p);
  auto usable = [&](const Port* p) { return p->up(); };
  Tables t;
  t.route.assign(m, std::vector<uint32_t>(h));
  t.group_ports.resize(m);
  std::vector<std::map<std::vector<uint16_t>, uint32_t>> seen(m);
  for (uint32_t dst = 0; dst < h; ++dst) {
    std::vector<uint32_t> dist(n, UINT32_MAX), order{dst};
    dist[dst] = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      const uint32_t u = order[i];
      if (u < h && u != dst) continue;
      for (const Port* p : out[u])
        if (usable(p) && dist[p->pipe.to->id] == UINT32_MAX) {
          dist[p->pipe.to->id] = dist[u] + 1;
          order.push_back(p->pipe.to->id);
        }
    }
    auto toward = [&](uint32_t u, const Port* p) {
      const uint32_t v = p->pipe.to->id;
      return usable(p) && dist[v] != UINT32_MAX && dist[v] + 1 == dist[u] && (v >= h || v == dst);
    };
    std::vector<uint64_t> far(n, 0);
    for (const uint32_t u : order) {
      if (u != dst)
        for (const Port* p : out[u])
          if (toward(u, p)) far[u] = std::max(far[u], p->pipe.delay.ps + far[p->pipe.to->id]);
      if (u < h) {
        t.max_dist = std::max(t.max_dist, dist[u]);
        t.max_delay_ps = std::max(t.max_delay_ps, far[u]);
      }
    }
    for (uint32_t s = 0; s < m; ++s) {
      std::vector<uint16_t> g;
      if (dist[h + s] != UINT32_MAX)
        for (const Port* p : out[h + s])
          if (toward(h + s, p)) g.push_back(static_cast<uint16_t>(p->index));
      if (g.empty()) {  // unreachable: no group, no port
        t.route[s][dst] = Switch::kNoRoute;
        continue;
      }
      const auto id = static_cast<uint32_t>((t.group_ports[s].size() << 8) | g.size());
      if (seen[s].try_emplace(g, id).second)
        t.group_ports[s].insert(t.group_ports[s].end(), g.begin(), g.end());
      t.route[s][dst] = seen[s].at(g);
    }
  }
  return t;
}

void expect_tables(Network& net, const Tables& want, const char* when) {
  for (uint32_t s = 0; s < net.num_switches(); ++s) {
    EXPECT_EQ(net.sw(s).route, want.route[s]) << when << ": switch " << s;
    EXPECT_EQ(net.sw(s).group_ports, want.group_ports[s]) << when << ": switch " << s;
  }
}

struct Sizes {
  uint64_t max_switches;
  uint64_t max_hosts;
};

// Hosts hang off random switches (several per switch, or one, or none), a
// few pairs of hosts are wired to each other, the fabric is random (parallel
// links and islands included) with unequal delays; then links fail, whole or
// in one direction, host links among them, and routing converges.
void expect_search_per_host(uint64_t seeds, Sizes sizes) {
  std::printf("seeds 1..%llu\n", static_cast<unsigned long long>(seeds));
  for (uint64_t seed = 1; seed <= seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Rng rng(seed);
    TopoGraph g;
    g.num_switches = static_cast<uint32_t>(rng.range(1, sizes.max_switches));
    g.num_hosts = static_cast<uint32_t>(rng.range(2, sizes.max_hosts));
    auto link = [&] { return LinkSpec{100'000, SimTime::from_us(rng.range(1, 4))}; };
    for (uint32_t i = 0; i < g.num_hosts; ++i) {
      if (i + 1 < g.num_hosts && rng.chance(0.1)) {
        g.edges.push_back({i, i + 1, link()});
        ++i;
        continue;
      }
      const auto sw = static_cast<uint32_t>(g.num_hosts + rng.below(g.num_switches));
      g.edges.push_back(rng.chance(0.5) ? TopoGraph::Edge{i, sw, link()}
                                        : TopoGraph::Edge{sw, i, link()});
    }
    const uint64_t fabric = g.num_switches < 2 ? 0 : rng.range(0, 3 * g.num_switches);
    for (uint64_t e = 0; e < fabric; ++e) {
      const auto a = static_cast<uint32_t>(rng.below(g.num_switches));
      const auto b = static_cast<uint32_t>(rng.below(g.num_switches));
      if (a != b) g.edges.push_back({g.num_hosts + a, g.num_hosts + b, link()});
    }
    Scheduler sched;
    Network net(sched, g, QueueSpec{}, seed);
    const Tables built = search_per_host(net);
    expect_tables(net, built, "built");
    EXPECT_EQ(net.graph().max_hops, built.max_dist);
    EXPECT_EQ(net.graph().max_path_delay, SimTime{built.max_delay_ps});
    const auto edges = static_cast<uint32_t>(g.edges.size());
    for (uint64_t f = rng.range(1, 4); f > 0; --f) {
      const auto e = static_cast<uint32_t>(rng.below(edges));
      if (rng.chance(0.5))
        net.set_link_up(e, false, SimTime{0});
      else
        net.edge_port(e, rng.chance(0.5)).set_up(false, SimTime{0});
    }
    net.reroute();
    expect_tables(net, search_per_host(net), "rerouted");
    if (::testing::Test::HasFailure()) return;  // one seed's failures say enough
  }
}

TEST(Routes, OneSearchPerSwitchEqualsASearchPerHost) { expect_search_per_host(300, {10, 40}); }

// compute_routes gathers up to 64 hosts' ids before writing them switch by
// switch, and fewer the more switches there are: hundreds of hosts and up to
// 3,000 switches write many batches, the last one partly filled.
TEST(Routes, HostsInManyBatchesEqualASearchPerHost) { expect_search_per_host(6, {3000, 400}); }

// A host whose only link is down is reached by no switch once routes
// converge: every group toward it is empty, so no switch sends its packets
// anywhere (a group of port 0 sent them down to another host, which took them).
TEST(Routes, AHostCutOffHasNoGroupOnAnySwitch) {
  Scheduler sched;
  const LinkSpec l{};
  Network net(sched, fat_tree(4, l, l), QueueSpec{}, 1);
  net.set_link_up(net.host_port(3).edge, false, SimTime{0});
  net.reroute();
  for (uint32_t s = 0; s < net.num_switches(); ++s) {
    EXPECT_TRUE(net.sw(s).group_for(3).empty()) << "switch " << s;
    EXPECT_FALSE(net.sw(s).group_for(2).empty()) << "switch " << s;  // its neighbour stays
  }
  EXPECT_EQ(net.path_delay(0, 3), SimTime::never());
}

// A spine reaches each of hundreds of leaves through a port of its own:
// hundreds of groups on one switch, interned in host order.
TEST(Routes, ManyGroupsOnOneSwitchEqualASearchPerHost) {
  Scheduler sched;
  const LinkSpec l{100'000, SimTime::from_us(1)};
  Network net(sched, leaf_spine(700, 2, 2, l, l), QueueSpec{}, 1);
  const Tables built = search_per_host(net);
  expect_tables(net, built, "built");
  ASSERT_EQ(net.sw(700).group_ports.size(), 700u);
}

}  // namespace
}  // namespace metaroce::sim
