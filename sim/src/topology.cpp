#include "metaroce/sim/topology.hpp"

#include <stdexcept>
#include <string>

namespace metaroce::sim {

TopoGraph fat_tree(uint32_t k, const LinkSpec& host_link, const LinkSpec& fabric_link) {
  if (k < 2 || k % 2 != 0) throw std::invalid_argument("fat_tree: k must be even and >= 2");
  const uint32_t half = k / 2;
  const uint32_t hosts = k * k * k / 4;
  const uint32_t tors = k * half;
  const uint32_t aggs = k * half;
  const uint32_t cores = half * half;
  TopoGraph g;
  g.name = "fat-tree k=" + std::to_string(k);
  g.num_hosts = hosts;
  g.num_switches = tors + aggs + cores;
  g.host_rate_mbps = host_link.rate_mbps;
  g.switch_tier.assign(tors, 0);
  g.switch_tier.insert(g.switch_tier.end(), aggs, 1);
  g.switch_tier.insert(g.switch_tier.end(), cores, 2);
  const uint32_t tor0 = hosts, agg0 = hosts + tors, core0 = hosts + tors + aggs;
  for (uint32_t h = 0; h < hosts; ++h) g.edges.push_back({h, tor0 + h / half, host_link});
  for (uint32_t t = 0; t < tors; ++t) {
    const uint32_t pod = t / half;
    for (uint32_t j = 0; j < half; ++j)
      g.edges.push_back({tor0 + t, agg0 + pod * half + j, fabric_link});
  }
  for (uint32_t a = 0; a < aggs; ++a) {
    const uint32_t j = a % half;
    for (uint32_t m = 0; m < half; ++m)
      g.edges.push_back({agg0 + a, core0 + j * half + m, fabric_link});
  }
  return g;
}

uint32_t fat_tree_tor_agg_edge(uint32_t k, uint32_t tor, uint32_t j) {
  const uint32_t half = k / 2;
  return k * k * k / 4 + tor * half + j;
}

uint32_t fat_tree_agg_core_edge(uint32_t k, uint32_t agg, uint32_t m) {
  const uint32_t half = k / 2;
  return k * k * k / 4 + k * half * half + agg * half + m;
}

TopoGraph leaf_spine(uint32_t leaves, uint32_t hosts_per_leaf, uint32_t spines,
                     const LinkSpec& host_link, const LinkSpec& fabric_link,
                     uint32_t links_per_spine) {
  if (leaves == 0 || hosts_per_leaf == 0 || spines == 0 || links_per_spine == 0)
    throw std::invalid_argument("leaf_spine: empty dimension");
  TopoGraph g;
  g.name = "leaf-spine " + std::to_string(leaves) + "x" + std::to_string(hosts_per_leaf) + ", " +
           std::to_string(spines) + " spines";
  g.num_hosts = leaves * hosts_per_leaf;
  g.num_switches = leaves + spines;
  g.host_rate_mbps = host_link.rate_mbps;
  g.switch_tier.assign(leaves, 0);
  g.switch_tier.insert(g.switch_tier.end(), spines, 1);
  const uint32_t leaf0 = g.num_hosts, spine0 = g.num_hosts + leaves;
  for (uint32_t h = 0; h < g.num_hosts; ++h)
    g.edges.push_back({h, leaf0 + h / hosts_per_leaf, host_link});
  for (uint32_t l = 0; l < leaves; ++l)
    for (uint32_t s = 0; s < spines; ++s)
      for (uint32_t i = 0; i < links_per_spine; ++i)
        g.edges.push_back({leaf0 + l, spine0 + s, fabric_link});
  return g;
}

TopoGraph rail_optimized(uint32_t servers, uint32_t rails, uint32_t servers_per_group,
                         uint32_t spines, const LinkSpec& host_link, const LinkSpec& fabric_link) {
  if (servers == 0 || rails == 0 || servers_per_group == 0 || spines == 0 ||
      servers % servers_per_group != 0)
    throw std::invalid_argument("rail_optimized: bad dimensions");
  const uint32_t groups = servers / servers_per_group;
  TopoGraph g;
  g.name = "rail-optimized " + std::to_string(servers) + " servers x " + std::to_string(rails) +
           " rails";
  g.num_hosts = servers * rails;
  const uint32_t leaves = groups * rails;
  g.num_switches = leaves + spines;
  g.host_rate_mbps = host_link.rate_mbps;
  g.switch_tier.assign(leaves, 0);
  g.switch_tier.insert(g.switch_tier.end(), spines, 1);
  const uint32_t leaf0 = g.num_hosts, spine0 = g.num_hosts + leaves;
  for (uint32_t h = 0; h < g.num_hosts; ++h) {
    const uint32_t server = h / rails, rail = h % rails;
    g.edges.push_back({h, leaf0 + (server / servers_per_group) * rails + rail, host_link});
  }
  for (uint32_t l = 0; l < leaves; ++l)
    for (uint32_t s = 0; s < spines; ++s) g.edges.push_back({leaf0 + l, spine0 + s, fabric_link});
  return g;
}

}  // namespace metaroce::sim
