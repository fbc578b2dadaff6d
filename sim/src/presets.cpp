// Named scenarios: the table of presets that tools/sim and the tests run
// (sim/README.md, "Presets"). Each preset is a function of the seed.
#include "metaroce/sim/presets.hpp"

#include <stdexcept>
#include <utility>

#include "metaroce/sim/topology.hpp"
#include "metaroce/sim/workload.hpp"

namespace metaroce::sim {

namespace {

constexpr uint64_t kGbps = 1000;  // in Mb/s
constexpr uint64_t kMiB = 1024 * 1024;
constexpr QueueSpec kQueue100G{175'000, 37'000, 145'000, 1.0};
// 400G ports: about one BDP of buffer with an ECN ramp (4x the 100G presets').
constexpr QueueSpec kQueue400G{700'000, 148'000, 580'000, 1.0};

// A link of `gbps` with a 1 us delay.
LinkSpec link(uint64_t gbps) { return {gbps * kGbps, SimTime::from_us(1)}; }

// A config with its fabric; the preset adds the flows (and faults).
SimConfig on(TopoGraph topo, const QueueSpec& queue) {
  SimConfig c;
  c.topo = std::move(topo);
  c.queue = queue;
  return c;
}

// Faults in place from t = 0: a link slowed to `gbps`, or one that silently
// drops `drop` of its packets (both directions).
FaultSpec slowed(uint32_t edge, uint64_t gbps) {
  FaultSpec f{SimTime{0}, FaultSpec::Kind::kRate, edge};
  f.rate_mbps = gbps * kGbps;
  return f;
}
FaultSpec gray(uint32_t edge, double drop) {
  FaultSpec f{SimTime{0}, FaultSpec::Kind::kGrayDrop, edge};
  f.drop = drop;
  return f;
}

struct PresetDef {
  const char* name;
  SimConfig (*make)(uint64_t seed);
};

SimConfig fattree_perm(uint32_t k, uint64_t bytes, uint64_t seed) {
  SimConfig c = on(fat_tree(k, link(100), link(100)), kQueue100G);
  c.flows = permutation(c.topo.num_hosts, bytes, seed);
  return c;
}

const PresetDef kPresets[] = {
    {"fattree1024-perm2mb", [](uint64_t seed) { return fattree_perm(16, 2 * kMiB, seed); }},
    {"fattree1024-perm2mb-degraded",
     [](uint64_t seed) {
       // 8 agg-core links (the first core uplink of the first agg of pods 0..7) at 25 % rate.
       SimConfig c = fattree_perm(16, 2 * kMiB, seed);
       for (uint32_t pod = 0; pod < 8; ++pod)
         c.faults.push_back(slowed(fat_tree_agg_core_edge(16, pod * 8, 0), 25));
       return c;
     }},
    {"fattree1024-perm2mb-gray",
     [](uint64_t seed) {
       // One agg-core link silently drops 1 % of packets (both directions).
       SimConfig c = fattree_perm(16, 2 * kMiB, seed);
       c.faults.push_back(gray(fat_tree_agg_core_edge(16, 0, 0), 0.01));
       return c;
     }},
    {"fattree128-perm2mb", [](uint64_t seed) { return fattree_perm(8, 2 * kMiB, seed); }},
    {"fattree16-perm", [](uint64_t seed) { return fattree_perm(4, 1 * kMiB, seed); }},
    {"fattree16-perm-linkdown",
     [](uint64_t seed) {
       SimConfig c = fattree_perm(4, 1 * kMiB, seed);
       // ToR 0's first uplink and one agg-core link of pod 1 fail at 20 us.
       c.faults.push_back(
           {SimTime::from_us(20), FaultSpec::Kind::kLinkDown, fat_tree_tor_agg_edge(4, 0, 0)});
       c.faults.push_back(
           {SimTime::from_us(20), FaultSpec::Kind::kLinkDown, fat_tree_agg_core_edge(4, 2, 0)});
       return c;
     }},
    {"fattree16-perm-gray",
     [](uint64_t seed) {
       SimConfig c = fattree_perm(4, 1 * kMiB, seed);
       c.faults.push_back(gray(fat_tree_agg_core_edge(4, 0, 0), 0.05));
       c.faults.push_back(slowed(fat_tree_tor_agg_edge(4, 2, 1), 25));
       return c;
     }},
    {"fattree16-alltoall",
     [](uint64_t seed) {
       SimConfig c = fattree_perm(4, 64 * 1024, seed);
       c.flows = all_to_all(c.topo.num_hosts, 64 * 1024);
       return c;
     }},
    {"fattree16-allreduce",
     [](uint64_t seed) {
       SimConfig c = fattree_perm(4, 1 * kMiB, seed);
       c.flows = ring_allreduce(c.topo.num_hosts, 16 * kMiB);
       return c;
     }},
    {"fattree128-allreduce",
     [](uint64_t seed) {
       SimConfig c = fattree_perm(8, 1 * kMiB, seed);
       c.flows = ring_allreduce(c.topo.num_hosts, 32 * kMiB);
       return c;
     }},
    {"incast64-2mb",
     [](uint64_t seed) {
       SimConfig c = fattree_perm(8, 2 * kMiB, seed);
       c.flows = incast(c.topo.num_hosts, 0, 64, 2 * kMiB, seed);
       return c;
     }},
    {"incast8-256k",
     [](uint64_t seed) {
       SimConfig c = fattree_perm(4, 256 * 1024, seed);
       c.flows = incast(c.topo.num_hosts, 0, 8, 256 * 1024, seed);
       return c;
     }},
    {"leafspine128-perm",
     [](uint64_t seed) {
       // 8 leaves x 16 hosts at 100G, 4 spines at 200G: 2:1 oversubscribed.
       SimConfig c = on(leaf_spine(8, 16, 4, link(100), link(200)), kQueue100G);
       c.flows = permutation(c.topo.num_hosts, 1 * kMiB, seed);
       return c;
     }},
    {"rail128-perm",
     [](uint64_t seed) {
       // 16 servers x 8 rails at 400G, groups of 4 servers, 8 spines at 800G.
       SimConfig c = on(rail_optimized(16, 8, 4, 8, link(400), link(800)), kQueue400G);
       c.flows = permutation(c.topo.num_hosts, 4 * kMiB, seed);
       return c;
     }},
    {"rail1024-allreduce64m",
     [](uint64_t seed) {
       // 128 servers x 8 NICs at 400G (1024 GPUs). Rail r of the servers of
       // group g (32 servers) shares leaf (g, r); every leaf has one 800G
       // link to each of 16 spines (32 x 400G down, 16 x 800G up: non-blocking).
       // One ring per rail over its 128 NICs, servers in a seeded random order,
       // so most ring hops cross the spines; 64 MiB per GPU (512 KiB chunks,
       // 254 dependent steps).
       SimConfig c = on(rail_optimized(128, 8, 32, 16, link(400), link(800)), kQueue400G);
       c.flows = ring_allreduce(rail_rings(128, 8, seed), 64 * kMiB);
       return c;
     }},
    {"leafspine8192-perm1mb",
     [](uint64_t seed) {
       // 128 leaves x 64 hosts at 400G, 64 spines, one 400G link from every
       // leaf to every spine: non-blocking (64 x 400G down, 64 x 400G up).
       SimConfig c = on(leaf_spine(128, 64, 64, link(400), link(400)), kQueue400G);
       c.flows = permutation(c.topo.num_hosts, 1 * kMiB, seed);
       return c;
     }},
};

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.emplace_back(p.name);
  return v;
}

SimConfig preset(const std::string& name, TransportKind transport, uint64_t seed) {
  for (const auto& p : kPresets) {
    if (name == p.name) {
      SimConfig c = p.make(seed);
      c.name = name;
      c.transport = transport;
      c.seed = seed;
      return c;
    }
  }
  throw std::invalid_argument("unknown preset: " + name);
}

}  // namespace metaroce::sim
