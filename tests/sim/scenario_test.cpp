// Scenario building: the large presets' shapes (without running them), rail
// rings, background traffic, the traffic-matrix reader and TOML config files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "metaroce/sim/config_file.hpp"
#include "metaroce/sim/presets.hpp"
#include "metaroce/sim/progress.hpp"
#include "metaroce/sim/settings.hpp"
#include "metaroce/sim/simulation.hpp"
#include "metaroce/sim/topology.hpp"
#include "metaroce/sim/workload.hpp"

namespace metaroce::sim {
namespace {

constexpr uint64_t kMiB = 1024 * 1024;

// ------------------------------------------------------------------ presets

TEST(Presets, Rail1024AllReduceShape) {
  const SimConfig c = preset("rail1024-allreduce64m", TransportKind::kMetaRoce, 1);
  EXPECT_EQ(c.topo.num_hosts, 1024u);
  EXPECT_EQ(c.topo.num_switches, 4u * 8u + 16u);  // 32 rail leaves, 16 spines
  EXPECT_EQ(c.topo.edges.size(), 1024u + 32u * 16u);
  EXPECT_EQ(c.topo.host_rate_mbps, 400'000u);
  // 8 rings of 128 ranks, 2 x 127 steps each, 512 KiB a step.
  ASSERT_EQ(c.flows.size(), 8u * 254u * 128u);
  for (const FlowSpec& f : c.flows) {
    EXPECT_EQ(f.bytes, 512u * 1024u);
    EXPECT_EQ(f.src % 8, f.dst % 8);  // a ring stays on its rail
  }
  // Ring r's step-0 flows walk the rail's NICs in the seeded server order.
  const auto rings = rail_rings(128, 8, 1);
  for (uint32_t r = 0; r < 8; ++r) {
    const size_t base = size_t{r} * 254 * 128;
    for (uint32_t i = 0; i < 128; ++i) {
      EXPECT_EQ(c.flows[base + i].src, rings[r][i]);
      EXPECT_EQ(c.flows[base + i].dst, rings[r][(i + 1) % 128]);
    }
    // Step 1 of rank i waits for step 0 of ranks i-1 and i.
    EXPECT_EQ(c.flows[base + 128 + 5].after[0], base + 4);
    EXPECT_EQ(c.flows[base + 128 + 5].after[1], base + 5);
  }
}

TEST(Presets, RailRingsArePermutationsOfEachRailSeededAndFragmented) {
  const auto a = rail_rings(128, 8, 1);
  ASSERT_EQ(a.size(), 8u);
  for (uint32_t r = 0; r < 8; ++r) {
    std::vector<uint32_t> sorted = a[r];
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint32_t> rail;
    for (uint32_t s = 0; s < 128; ++s) rail.push_back(s * 8 + r);
    EXPECT_EQ(sorted, rail) << "rail " << r;
    for (uint32_t i = 0; i < 128; ++i) EXPECT_EQ(a[r][i] / 8, a[0][i] / 8);  // one server order
  }
  EXPECT_EQ(a, rail_rings(128, 8, 1));  // deterministic
  EXPECT_NE(a, rail_rings(128, 8, 2));  // and the seed matters
  // Fragmented: most ring hops leave the 32-server leaf group.
  int cross = 0;
  for (uint32_t i = 0; i < 128; ++i) cross += a[0][i] / 8 / 32 != a[0][(i + 1) % 128] / 8 / 32;
  EXPECT_GT(cross, 64);
}

TEST(Presets, LeafSpine8192Shape) {
  const SimConfig c = preset("leafspine8192-perm1mb", TransportKind::kMetaRoce, 3);
  EXPECT_EQ(c.topo.num_hosts, 8192u);
  EXPECT_EQ(c.topo.num_switches, 128u + 64u);
  EXPECT_EQ(c.topo.edges.size(), 8192u + 128u * 64u);
  ASSERT_EQ(c.flows.size(), 8192u);
  std::set<uint32_t> dsts;
  for (const FlowSpec& f : c.flows) {
    EXPECT_NE(f.src, f.dst);
    EXPECT_EQ(f.bytes, 1 * kMiB);
    dsts.insert(f.dst);
  }
  EXPECT_EQ(dsts.size(), 8192u);  // a permutation
}

TEST(Presets, OldPresetsStillThere) {
  const auto names = preset_names();
  for (const char* n : {"fattree1024-perm2mb", "fattree16-perm", "rail128-perm", "incast64-2mb",
                        "rail1024-allreduce64m", "leafspine8192-perm1mb"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_THROW((void)preset("no-such-preset", TransportKind::kMetaRoce, 1), std::invalid_argument);
}

TEST(IdealTime, RingAddsOneWayLatencyPerStep) {
  // fattree16-allreduce: 30 steps of a 1 MiB chunk (83.886 us at 100G); the
  // ring 0..15 has a hop across the core (6 links x 1 us) at every step.
  Simulation sim(preset("fattree16-allreduce", TransportKind::kMetaRoce, 1));
  EXPECT_EQ(sim.net().path_delay(3, 4), SimTime::from_us(6));
  EXPECT_EQ(sim.net().path_delay(0, 1), SimTime::from_us(2));
  const Report r = sim.report();  // ideal needs no run
  EXPECT_NEAR(r.ideal_us, 30 * (kMiB * 8.0 / 100'000 + 6.0), 1e-6);
}

// A ring's ideal takes its largest chunk: 4003 bytes over 4 ranks, one in
// each pod (every hop 6 us), is three chunks of 1001 bytes and one of 1000,
// and a chunk goes round the ring step after step, so the longest chain is 6
// steps of 1001 bytes (it read 1000: the remainder was never sent).
TEST(IdealTime, RingWithARemainderTakesItsLargestChunk) {
  SimConfig c = preset("fattree16-allreduce", TransportKind::kMetaRoce, 1);
  c.flows = ring_allreduce(std::vector<std::vector<uint32_t>>{{0, 4, 8, 12}}, 4003);
  Simulation sim(std::move(c));
  EXPECT_EQ(sim.net().path_delay(12, 0), SimTime::from_us(6));
  const Report r = sim.report();
  EXPECT_NEAR(r.ideal_us, 6 * (1001 * 8.0 / 100'000 + 6.0), 1e-9);
}

// ------------------------------------------------------------------ workloads

// Every step moves every chunk once, the request's bytes in all: the first
// bytes % n chunks take a byte more (bytes / n dropped the remainder, 1000003
// over 4 ranks moved 1000000 a step), and rank i sends at step k the chunk
// its predecessor sent at step k - 1.
TEST(Workloads, RingAllReduceMovesEveryByteOfTheRequest) {
  for (const auto& [n, bytes] : {std::pair<uint32_t, uint64_t>{4, 1'000'003},
                                 {3, 1'000},
                                 {5, 5},
                                 {16, 16 * kMiB},
                                 {7, 13}}) {
    const auto f = ring_allreduce(n, bytes);
    ASSERT_EQ(f.size(), 2u * (n - 1) * n);
    for (uint32_t k = 0; k < 2 * (n - 1); ++k) {
      uint64_t step = 0, big = 0;
      for (uint32_t i = 0; i < n; ++i) {
        const FlowSpec& s = f[k * n + i];
        step += s.bytes;
        EXPECT_TRUE(s.bytes == bytes / n || s.bytes == bytes / n + 1) << n << " " << bytes;
        big += s.bytes > bytes / n ? 1 : 0;
        if (k > 0) {
          EXPECT_EQ(s.bytes, f[s.after[0]].bytes) << "the chunk it was handed";
        }
      }
      EXPECT_EQ(step, bytes) << n << " ranks, step " << k;
      EXPECT_EQ(big, bytes % n);
    }
  }
  // A rank with no byte would send an empty message: refused, as it moved
  // one byte a rank (more than asked).
  EXPECT_THROW((void)ring_allreduce(4, 3), std::invalid_argument);
  EXPECT_THROW((void)ring_allreduce({{0, 1, 2}, {3, 4}}, 2), std::invalid_argument);
  EXPECT_NO_THROW((void)ring_allreduce({{0, 1, 2}, {3, 4}}, 3));
}

TEST(Workloads, MultiRingAllReduceIndexesEachRingInABlock) {
  const std::vector<std::vector<uint32_t>> rings = {{0, 2, 4}, {1, 3}};
  const auto f = ring_allreduce(rings, 600);
  ASSERT_EQ(f.size(), 4u * 3u + 2u * 2u);
  EXPECT_EQ(f[0].src, 0u);
  EXPECT_EQ(f[0].dst, 2u);
  EXPECT_EQ(f[2].dst, 0u);
  EXPECT_EQ(f[0].bytes, 200u);
  EXPECT_EQ(f[12].src, 1u);
  EXPECT_EQ(f[12].bytes, 300u);
  EXPECT_EQ(f[14].after[0], 13u);  // ring 2, step 1, rank 0: after rank 1's step 0
  EXPECT_EQ(f[14].after[1], 12u);
  // The single-ring form is the same as ring 0..n-1.
  const auto one = ring_allreduce(4, 4096);
  const auto same = ring_allreduce(std::vector<std::vector<uint32_t>>{{0, 1, 2, 3}}, 4096);
  ASSERT_EQ(one.size(), same.size());
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(one[i].src, same[i].src);
    EXPECT_EQ(one[i].after[0], same[i].after[0]);
  }
}

TEST(Workloads, BackgroundIsSeededPoissonUniformPairs) {
  const SimTime gap = SimTime::from_us(2);
  const auto a = background(16, 4096, 2000, gap, SimTime::from_us(100), 5);
  ASSERT_EQ(a.size(), 2000u);
  SimTime prev = SimTime::from_us(100);
  std::set<uint32_t> srcs;
  for (const FlowSpec& f : a) {
    EXPECT_NE(f.src, f.dst);
    EXPECT_LT(f.dst, 16u);
    EXPECT_GE(f.start, prev);
    prev = f.start;
    srcs.insert(f.src);
  }
  EXPECT_EQ(srcs.size(), 16u);
  const double mean_gap_us = (a.back().start.us() - 100.0) / 2000.0;
  EXPECT_NEAR(mean_gap_us, 2.0, 0.2);
  const auto b = background(16, 4096, 2000, gap, SimTime::from_us(100), 5);
  const auto c = background(16, 4096, 2000, gap, SimTime::from_us(100), 6);
  EXPECT_EQ(a.back().start, b.back().start);
  EXPECT_NE(a.back().start, c.back().start);
  // 1 MB flows at 100G take 80 us of a NIC; 10 NICs at 50 %: one every 16 us.
  EXPECT_EQ(background_gap(10, 1'000'000, 100'000, 0.5), SimTime::from_us(16));
}

// A comment may also end a line (it was refused as a fifth field).
TEST(TrafficMatrix, ReadsLinesSkipsCommentsAndBlanks) {
  std::istringstream in(
      "# src dst bytes start_us\n\n0 3 4096 0\n  3 0 100 12.5  \n\t# x\n1 2 7 0 # rack 0\n");
  const auto f = read_traffic_matrix(in, 4);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[2].bytes, 7u);
  EXPECT_EQ(f[0].src, 0u);
  EXPECT_EQ(f[0].dst, 3u);
  EXPECT_EQ(f[0].bytes, 4096u);
  EXPECT_EQ(f[1].start, SimTime::from_ns(12'500));
}

TEST(TrafficMatrix, RejectsBadLinesWithTheirLineNumber) {
  const std::pair<const char*, const char*> bad[] = {
      {"0 1 10 0\n0 1 10\n", "tm:2: expected"},
      {"0 1 10 0 7\n", "tm:1: expected"},
      {"0 4 10 0\n", "tm:1: host out of range"},
      {"-1 2 10 0\n", "tm:1: src '-1' is not a whole number"},
      {"\n2 2 10 0\n", "tm:2: src == dst"},
      {"0 1 0 0\n", "tm:1: bytes: 0 is not an integer in [1, 9e+18]"},
      {"0 1 10 -3\n", "tm:1: start_us '-3' not in"},
      {"a b c d\n", "tm:1: src 'a' is not a whole number"},
      // Whole tokens: not bytes 1 and start 0.5, not 2^64 - 4096.
      {"0 3 1.5\n", "tm:1: expected"},
      {"0 3 -4096 0\n", "tm:1: bytes '-4096' is not a whole number"},
      {"0 3 1.5 0\n", "tm:1: bytes '1.5' is not a whole number"},
      {"0 3 4096x 0\n", "tm:1: bytes '4096x'"},
      {"0 3 +4096 0\n", "tm:1: bytes '+4096'"},
      // A host that is no whole number was called out of range.
      {"+1 2 100 0\n", "tm:1: src '+1' is not a whole number"},
      {"1.0 2 100 0\n", "tm:1: src '1.0' is not a whole number"},
      {"1 0x2 100 0\n", "tm:1: dst '0x2' is not a whole number"},
      {"99999999999999999999 2 100 0\n", "tm:1: host out of range (0..3)"},
      // An editor's byte-order mark, named (it was "host out of range").
      {"\xEF\xBB\xBF"
       "1 2 100 0\n",
       "tm:1: starts with a UTF-8 byte-order mark"},
      {"\xEF\xBB\xBF# src dst bytes start_us\n", "tm:1: starts with a UTF-8 byte-order mark"},
      {"0 3 4096 +1\n", "tm:1: start_us '+1'"},
      {"0 3 4096 nan\n", "tm:1: start_us 'nan'"},
      {"0 3 4096 inf\n", "tm:1: start_us 'inf'"},
      {"0 3 4096 1us\n", "tm:1: start_us '1us'"},
  };
  for (const auto& [text, want] : bad) {
    std::istringstream in(text);
    try {
      (void)read_traffic_matrix(in, 4, "tm");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// ------------------------------------------------------------------ config files

const char* const kSmall = R"(
name = "small"
time_limit_ms = 20
[topology]
kind = "fat_tree"
k = 4
host_rate_gbps = 100
fabric_rate_gbps = 100
fabric_delay_us = 0.5
[queue]
buffer_bytes = "175KB"
[[workload]]
kind = "permutation"
bytes = "256KiB"
[[workload]]
kind = "allreduce"
hosts = [0, 5, 10, 15]
bytes = "64KiB"
start_us = 5
[[workload]]
kind = "background"
bytes = 16384
flows = 40
load = 0.3
[[fault]]
at_us = 30
kind = "gray"
link = ["agg 0", "core 0"]
drop = 0.02
[[fault]]
at_us = 0
kind = "rate"
edge = 3
rate_gbps = 50
)";

SimConfig parse(const std::string& text, uint64_t seed = 1) {
  return parse_config(text, "t.toml", ".", TransportKind::kMetaRoce, seed);
}

// What parse() refuses `text` with; empty if it takes it.
std::string refusal(const std::string& text) {
  try {
    (void)parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return {};
}

// text is refused with a message that holds `want`, and, `located`, starts
// with the file's name (t.toml:LINE:COL).
constexpr bool kLocated = true;
void expect_refused(const std::string& text, const std::string& want, bool located = false) {
  const std::string got = refusal(text);
  EXPECT_NE(got.find(want), std::string::npos)
      << (got.empty() ? "accepted" : "got: " + got) << "\nwanted: " << want;
  if (located) {
    EXPECT_EQ(got.rfind("t.toml:", 0), 0u) << got;
  }
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(ConfigFile, ParsesEverySection) {
  const SimConfig c = parse(kSmall);
  EXPECT_EQ(c.name, "small");
  EXPECT_EQ(c.time_limit, SimTime::from_ms(20));
  EXPECT_EQ(c.reroute_after, SimTime::never());
  const std::string rerouting =
      replace(kSmall, "time_limit_ms = 20\n", "time_limit_ms = 20\nreroute_us = 250\n");
  EXPECT_EQ(parse(rerouting).reroute_after, SimTime::from_us(250));
  // -1 turns it off, as on --set (docs/sim/README.md's table): it was refused.
  EXPECT_EQ(parse(replace(rerouting, "reroute_us = 250", "reroute_us = -1")).reroute_after,
            SimTime::never());
  EXPECT_EQ(c.topo.num_hosts, 16u);
  EXPECT_EQ(c.topo.edges.back().spec.delay, SimTime::from_ns(500));
  EXPECT_EQ(c.queue.buffer_bytes, 175'000u);
  ASSERT_EQ(c.flows.size(), 16u + 6u * 4u + 40u);
  EXPECT_EQ(c.flows[0].bytes, 256u * 1024u);
  // The allreduce's flows follow the permutation's: dependencies shifted.
  EXPECT_EQ(c.flows[16].src, 0u);
  EXPECT_EQ(c.flows[16].dst, 5u);
  EXPECT_EQ(c.flows[16].start, SimTime::from_us(5));
  EXPECT_EQ(c.flows[16 + 4].after[1], 16u);
  ASSERT_EQ(c.faults.size(), 2u);
  EXPECT_EQ(c.faults[0].kind, FaultSpec::Kind::kGrayDrop);
  EXPECT_EQ(c.faults[0].edge, fat_tree_agg_core_edge(4, 0, 0));
  EXPECT_EQ(c.faults[1].rate_mbps, 50'000u);
  // Same seed, same flows; another seed, another permutation.
  EXPECT_EQ(parse(kSmall).flows[3].dst, c.flows[3].dst);
  bool differ = false;
  const SimConfig d = parse(kSmall, 2);
  for (size_t i = 0; i < 16; ++i) differ = differ || d.flows[i].dst != c.flows[i].dst;
  EXPECT_TRUE(differ);
}

TEST(ConfigFile, MtuSetsEveryTransport) {
  const SimConfig d = parse(kSmall);
  EXPECT_EQ(d.endpoint.mtu, 4096u);
  EXPECT_EQ(d.rc.mtu, 4096u);
  const SimConfig c =
      parse(replace(kSmall, "time_limit_ms = 20\n", "time_limit_ms = 20\nmtu = 2048\n"));
  EXPECT_EQ(c.endpoint.mtu, 2048u);
  EXPECT_EQ(c.rc.mtu, 2048u);
  EXPECT_EQ(parse(replace(kSmall, "time_limit_ms = 20\n", "time_limit_ms = 20\nmtu = \"1KiB\"\n"))
                .endpoint.mtu,
            1024u);
  // --set's range and message (it had one of its own, "payload bytes per
  // packet, 256..9000 (got 100)").
  for (const auto& [v, shown] : {std::pair<std::string, std::string>{"100", "100"},
                                 {"65536", "65536"},
                                 {"\"16KiB\"", "16384"},
                                 {"4096.5", "4096.5"}}) {
    EXPECT_EQ(
        refusal(replace(kSmall, "time_limit_ms = 20\n", "time_limit_ms = 20\nmtu = " + v + "\n")),
        "t.toml:4:7: mtu: " + shown + " is not an integer in [256, 9000]");
  }
  EXPECT_EQ(parse(replace(kSmall, "time_limit_ms = 20\n", "time_limit_ms = 20\nmtu = 2e3\n"))
                .endpoint.mtu,
            2000u);
}

TEST(ConfigFile, QueueTrimKeys) {
  const SimConfig off = parse(kSmall);
  EXPECT_FALSE(off.queue.trim);
  const SimConfig on = parse(replace(kSmall, "buffer_bytes = \"175KB\"\n",
                                     "buffer_bytes = \"175KB\"\ntrim = true\n"
                                     "trim_allowance_bytes = 4096\n"
                                     "trim_priority = false\n"));
  EXPECT_TRUE(off.queue.trim_priority);
  EXPECT_TRUE(on.queue.trim);
  EXPECT_EQ(on.queue.trim_allowance_bytes, 4096u);
  EXPECT_FALSE(on.queue.trim_priority);
  for (const auto& [line, want] :
       {std::pair<std::string, std::string>{"trim = 1", "queue.trim: expected true or false"},
        {"trim_allowance_bytes = -1",
         "queue.trim_allowance_bytes: -1 is not an integer in [0, 1e+12]"}}) {
    try {
      (void)parse(replace(kSmall, "buffer_bytes = \"175KB\"\n",
                          "buffer_bytes = \"175KB\"\n" + line + "\n"));
      ADD_FAILURE() << "accepted " << line;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigFile, QueuePriorityDscp) {
  EXPECT_EQ(parse(kSmall).queue.priority_dscp, kControlDscp);
  const auto with = [](const std::string& line) {
    return parse(
        replace(kSmall, "buffer_bytes = \"175KB\"\n", "buffer_bytes = \"175KB\"\n" + line + "\n"));
  };
  EXPECT_EQ(with("priority_dscp = 64").queue.priority_dscp, kNoPriorityDscp);
  EXPECT_EQ(with("priority_dscp = 46").queue.priority_dscp, 46);
  // 0 is the data's class: every packet would skip the buffer and PFC.
  for (const char* bad : {"priority_dscp = 65", "priority_dscp = 0"}) {
    try {
      (void)with(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("queue.priority_dscp"), std::string::npos) << e.what();
    }
  }
  SimConfig c;
  std::string err;
  ASSERT_TRUE(apply_setting(c, "queue.priority_dscp=64", err)) << err;
  EXPECT_EQ(c.queue.priority_dscp, kNoPriorityDscp);
  EXPECT_FALSE(apply_setting(c, "queue.priority_dscp=65", err));
  EXPECT_FALSE(apply_setting(c, "queue.priority_dscp=0", err));
}

// PFC from a config file: on for any transport but irn, with its thresholds.
const char* const kPfcIncast = R"(
name = "pfc-incast"
time_limit_ms = 50
[topology]
kind = "fat_tree"
k = 4
host_rate_gbps = 100
fabric_rate_gbps = 100
[queue]
pfc = true
[[workload]]
kind = "incast"
bytes = "256KiB"
senders = 8
)";

Report run_config(const std::string& text, TransportKind t) {
  Simulation sim(parse_config(text, "t.toml", ".", t, 1));
  sim.run();
  return sim.report();
}

TEST(ConfigFile, PfcAndItsThresholdsAreSettableAndMoveThePauseTime) {
  EXPECT_FALSE(parse(kSmall).queue.pfc);
  const SimConfig d = parse(kPfcIncast);
  EXPECT_TRUE(d.queue.pfc);
  EXPECT_FALSE(d.queue.pfc_xoff_bytes);  // derived, as before
  EXPECT_FALSE(d.queue.pfc_xon_bytes);
  const std::string low = replace(kPfcIncast, "pfc = true\n",
                                  "pfc = true\npfc_xoff_bytes = \"30KB\"\npfc_xon_bytes = 0\n");
  const SimConfig c = parse(low);
  EXPECT_EQ(c.queue.pfc_xoff_bytes, 30'000u);
  EXPECT_EQ(c.queue.pfc_xon_bytes, 0u);
  for (const TransportKind t : {TransportKind::kMetaRoce, TransportKind::kRoceV2}) {
    const Report a = run_config(kPfcIncast, t), b = run_config(low, t);
    for (const Report* r : {&a, &b}) {
      EXPECT_EQ(r->flows_completed, r->flows) << r->to_text(false);
      EXPECT_EQ(r->drops, 0u) << r->to_text(false);  // lossless either way
      EXPECT_GT(r->pfc_pauses, 0u) << r->to_text(false);
    }
    // Pausing at 30 KB instead of 141.6 KB, and resuming only when empty,
    // holds the senders' links paused for longer.
    EXPECT_GT(b.pfc_pause_us, a.pfc_pause_us * 1.5) << a.transport;
  }
}

// Each workload draws from its own seed, rails rings too: two all-reduce
// jobs on a rail fabric get two placements (both got the run's one), and a
// workload appended after them changes neither.
TEST(ConfigFile, RailsRingsOfTwoWorkloadsAreDrawnApart) {
  const std::string two = R"(
[topology]
kind = "rail"
servers = 8
rails = 2
servers_per_group = 4
spines = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
[[workload]]
kind = "allreduce"
rings = "rails"
bytes = 4096
[[workload]]
kind = "allreduce"
rings = "rails"
bytes = 4096
)";
  // Per workload, the senders of its flows in order (each has as many).
  auto senders = [](const SimConfig& c, size_t workload) {
    const size_t each = 2 * (2 * 8 * 7);  // 2 rails, 2(n-1) steps of n flows
    std::vector<uint32_t> src;
    for (size_t i = workload * each; i < (workload + 1) * each; ++i)
      src.push_back(c.flows.at(i).src);
    return src;
  };
  const SimConfig c = parse(two);
  ASSERT_EQ(c.flows.size(), 2u * 2 * (2 * 8 * 7));
  EXPECT_NE(senders(c, 0), senders(c, 1));
  const SimConfig more = parse(two + "[[workload]]\nkind = \"permutation\"\nbytes = 4096\n");
  EXPECT_EQ(senders(more, 0), senders(c, 0));
  EXPECT_EQ(senders(more, 1), senders(c, 1));
}

TEST(ConfigFile, AllReduceOfFewerBytesThanRanksIsRefused) {
  EXPECT_NE(refusal(replace(kSmall, "bytes = \"64KiB\"", "bytes = 3"))
                .find("workload (allreduce): ring_allreduce: 3 bytes over 4 ranks, less than one "
                      "byte a rank"),
            std::string::npos);
  EXPECT_EQ(refusal(replace(kSmall, "bytes = \"64KiB\"", "bytes = 4")), "");
}

TEST(ConfigFile, BadPfcThresholdsAreRefused) {
  const std::pair<std::string, std::string> bad[] = {
      {"pfc = true\npfc_xoff_bytes = 50000\npfc_xon_bytes = 60000",
       "t.toml:12:17: queue.pfc_xon_bytes (60000) is above queue.pfc_xoff_bytes (50000): XON "
       "must not exceed XOFF"},
      {"pfc = true\npfc_xoff_bytes = \"200KB\"",
       "t.toml:11:18: queue.pfc_xoff_bytes (200000) is above queue.buffer_bytes (175000)"},
      {"pfc = true\npfc_xon_bytes = -2",
       "queue.pfc_xon_bytes: -2 is not an integer in [-1, 1e+12]"},
      {"pfc = 1", "queue.pfc: expected true or false"},
  };
  for (const auto& [lines, want] : bad) {
    try {
      (void)parse(replace(kPfcIncast, "pfc = true\n", lines + "\n"));
      ADD_FAILURE() << "accepted " << lines;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  // XON alone is checked against each port's derived XOFF (141.6 KB here).
  SimConfig c = parse(replace(kPfcIncast, "pfc = true\n", "pfc = true\npfc_xon_bytes = 150000\n"));
  try {
    Simulation sim(std::move(c));
    ADD_FAILURE() << "accepted an XON above the derived XOFF";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("queue.pfc_xon_bytes (150000) is above the XOFF derived"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConfigFile, SmallScenarioRunsToCompletion) {
  Simulation sim(parse(kSmall));
  sim.run();
  const Report r = sim.report();
  EXPECT_EQ(r.name, "small");
  EXPECT_EQ(r.flows_completed, r.flows) << r.to_text(false);
  EXPECT_EQ(r.errors, 0u);
}

// Every transport runs the example to the end. rocev2 crashed: a CNP or ACK
// dropped at a downed port of a PFC switch gave back ingress bytes it never
// took, at a port read from a stale pooled packet.
TEST(ConfigFile, ExampleFileRunsUnderEveryTransport) {
  for (const TransportKind t : {TransportKind::kMetaRoce, TransportKind::kSprayNoCc,
                                TransportKind::kRoceV2, TransportKind::kIrn}) {
    Simulation sim(load_config_file(
        std::string(METAROCE_SOURCE_DIR) + "/docs/sim/examples/leafspine-mixed.toml", t, 1));
    sim.run();
    const Report r = sim.report();
    EXPECT_EQ(r.flows_completed, r.flows) << r.transport;
  }
}

// ecn_kmin = 0 and ecn_kmax = 0 (no marking) are accepted, as --set accepts them.
TEST(ConfigFile, EcnThresholdsMayBeZero) {
  const SimConfig c = parse(replace(kSmall, "buffer_bytes = \"175KB\"",
                                    "buffer_bytes = \"175KB\"\necn_kmin = 0\necn_kmax = 0"));
  EXPECT_EQ(c.queue.ecn_kmin, 0u);
  EXPECT_EQ(c.queue.ecn_kmax, 0u);
  const SimConfig d = parse(
      replace(kSmall, "buffer_bytes = \"175KB\"", "buffer_bytes = \"175KB\"\necn_kmin = \"0B\""));
  EXPECT_EQ(d.queue.ecn_kmin, 0u);
}

TEST(ConfigFile, ExampleFileLoads) {
  const SimConfig c =
      load_config_file(std::string(METAROCE_SOURCE_DIR) + "/docs/sim/examples/leafspine-mixed.toml",
                       TransportKind::kSprayNoCc, 1);
  EXPECT_EQ(c.topo.num_hosts, 32u);
  EXPECT_EQ(c.transport, TransportKind::kSprayNoCc);
  EXPECT_EQ(c.faults.size(), 3u);
  EXPECT_GT(c.flows.size(), 32u + 200u);
}

// The floor under the permutation's ratio (docs/sim/examples): a lone 2 MB
// flow on the empty fat-tree pays only its headers, framing and one round
// trip on top of the ideal. MetaRoCE starts at line rate (CC-1's window of
// one BDP) and sprays without losing any of it: within 1 % of RoCEv2's
// single path, whose headers are 16 bytes smaller.
TEST(ConfigFile, LoneFlowExampleRunsAtLineRate) {
  const std::string file =
      std::string(METAROCE_SOURCE_DIR) + "/docs/sim/examples/fattree1024-lone2mb.toml";
  double ratio[2] = {};
  for (const TransportKind t : {TransportKind::kMetaRoce, TransportKind::kRoceV2}) {
    Simulation sim(load_config_file(file, t, 1));
    sim.run();
    const Report r = sim.report();
    ASSERT_EQ(r.flows_completed, 1u);
    ratio[t == TransportKind::kRoceV2] = r.completion_us / r.ideal_us;
  }
  EXPECT_LT(ratio[0], 1.12);
  EXPECT_LT(ratio[0], ratio[1] * 1.01);
}

TEST(ConfigFile, BadInputsNameTheLineAndKey) {
  const std::string s = kSmall;
  // kSmall with `from` replaced by `to` is refused with `want`.
  const struct {
    const char* from;
    const char* to;
    const char* want;
  } bad[] = {
      // syntax: toml++'s message with the line
      {"[topology]", "[topology", "t.toml:4:"},
      {"k = 4", "k = 4\nk = 6", "t.toml:7:"},
      // unknown and missing keys, wrong types
      {"k = 4", "k = 4\nlayers = 3", "t.toml:7:1: unknown key 'topology.layers'"},
      {"name = \"small\"", "nmae = 1", "unknown key 'nmae'"},
      // top-level keys without a leading dot ([workload] for [[workload]]: below)
      {"name = \"small\"", "name = 1", "t.toml:2:8: name: expected a string"},
      {"time_limit_ms = 20", "time_limit_ms = \"20\"",
       "t.toml:3:17: time_limit_ms: expected a number"},
      {"time_limit_ms = 20", "time_limit_ms = 20\nmtu = \"big\"",
       "t.toml:4:7: mtu: 'big' is not a byte count"},
      {"k = 4\n", "", "missing key 'topology.k'"},
      {"host_rate_gbps = 100\n", "", "missing key 'topology.host_rate_gbps'"},
      {"k = 4", "k = \"4\"", "topology.k: expected a whole number"},
      {"k = 4", "k = 5", "topology.k: an even number"},
      {"fabric_rate_gbps = 100", "fabric_rate_gbps = -1", "must be > 0"},
      // beyond what the picosecond arithmetic holds (llround of 1e33 is
      // undefined: a 1e30 Gb/s link read an ideal of 0 us)
      {"fabric_rate_gbps = 100", "fabric_rate_gbps = 1e30",
       "t.toml:8:20: topology.fabric_rate_gbps: at most 100000 (100 Tb/s)"},
      {"fabric_delay_us = 0.5", "fabric_delay_us = 1e30",
       "t.toml:9:19: topology.fabric_delay_us: at most 10000 (10 ms)"},
      {"rate_gbps = 50", "rate_gbps = 1e30", "fault.rate_gbps: at most 100000 (100 Tb/s)"},
      // unknown kinds
      {"\"fat_tree\"", "\"torus\"", "t.toml:5:8: topology.kind: unknown 'torus'"},
      {"\"permutation\"", "\"shuffle\"", "workload.kind: unknown 'shuffle'"},
      {"\"gray\"", "\"flaky\"", "fault.kind: unknown 'flaky'"},
      // bad values
      {"\"256KiB\"", "\"256 parsecs\"", "workload.bytes: '256 parsecs'"},
      {"\"256KiB\"", "\"1e30GiB\"", "workload.bytes: 1.07374e+39 is not an integer in [1, 9e+18]"},
      {"\"256KiB\"", "\"0.4B\"", "workload.bytes: '0.4B' is less than one byte"},
      {"bytes = 16384", "bytes = 0", "workload.bytes: 0 is not an integer in [1, 9e+18]"},
      {"load = 0.3", "load = 1.5", "workload.load: must be in (0, 1]"},
      {"load = 0.3", "load = 0.3\nmean_gap_us = 2", "exactly one of 'load'"},
      // a gap of 0 started every flow at once; one past 2^64 ps (a tiny load)
      // was undefined and came out as 0 too
      {"load = 0.3", "mean_gap_us = 0", "workload.mean_gap_us: must be > 0"},
      {"load = 0.3", "load = 1e-300",
       "background: at load 1e-300 flows are more than 1e12 us apart"},
      {"load = 0.3", "mean_gap_us = 1e11", "would start after 1e12 us"},
      {"hosts = [0, 5, 10, 15]", "hosts = [0, 5, 5]", "a host twice"},
      {"hosts = [0, 5, 10, 15]", "hosts = [0, 16]", "workload.hosts: host ids 0..15"},
      {"hosts = [0, 5, 10, 15]", "rings = \"rails\"", "needs topology.kind = \"rail\""},
      {"edge = 3", "edge = 99", "fault.edge: edge ids 0..47"},
      {"\"core 0\"", "\"core 2\"", "fault.link: no link joins"},
      {"\"core 0\"", "\"router 0\"", "unknown node kind 'router'"},
      {"drop = 0.02", "drop = 0.02\nrate_gbps = 3", "not used by kind 'gray'"},
      // --set's range and message (the file's own was [0, 1e9], and the
      // table's "-1 turns it off" was refused)
      {"time_limit_ms = 20", "time_limit_ms = 20\nreroute_us = -2",
       "t.toml:4:14: reroute_us: -2 is not a value in [-1, 1e+09]"},
      {"time_limit_ms = 20", "time_limit_ms = 20\nreroute_us = 2e9",
       "t.toml:4:14: reroute_us: 2e+09 is not a value in [-1, 1e+09]"},
      {"at_us = 30", "at_us = -30", "at_us: expected a number of microseconds >= 0"},
      // the ranges --set and metaroce-sim's options check (settings.cpp)
      {"time_limit_ms = 20", "time_limit_ms = 2e10",
       "t.toml:3:17: time_limit_ms: 2e+10 is not a value in [1e-06, 1e+09]"},
      {"time_limit_ms = 20", "time_limit_ms = 0", "t.toml:3:17: time_limit_ms: 0 is"},
      // the queue as a whole: the check --set's overrides get too (queue_spec_error)
      {"buffer_bytes = \"175KB\"", "buffer_bytes = \"175KB\"\necn_kmin = 200000\necn_kmax = 100000",
       "t.toml:12:12: queue.ecn_kmin (200000) is above queue.ecn_kmax (100000)"},
      {"buffer_bytes = \"175KB\"", "buffer_bytes = \"175KB\"\necn_pmax = 1.5",
       "t.toml:12:12: queue.ecn_pmax: 1.5 is not a value in [0, 1]"},
      // an incast's receiver outside the topology is named as such
      {"kind = \"permutation\"", "kind = \"incast\"\nreceiver = 9999\nsenders = 4",
       "workload (incast): incast: receiver 9999 is not a host (16 hosts: 0..15)"},
      {"kind = \"permutation\"", "kind = \"incast\"\nsenders = 16",
       "workload (incast): incast: 16 senders, at most 15 (16 hosts, one the receiver)"},
      {"kind = \"background\"\nbytes = 16384\nflows = 40\nload = 0.3",
       "kind = \"matrix\"\nfile = \"/nonexistent.tm\"", "cannot open '/nonexistent.tm'"},
  };
  for (const auto& [from, to, want] : bad) expect_refused(replace(s, from, to), want, kLocated);
  // [workload] for [[workload]] is named as such.
  expect_refused(
      s.substr(0, s.find("[[workload]]")) + "[workload]\nkind = \"permutation\"\nbytes = 4096\n",
      "t.toml:12:1: workload: expected an array of tables, [[workload]], not [workload]", kLocated);
}

// The builders multiply in 32 bits and allocate a link at a time: 65536
// leaves x 65537 hosts wrapped to 65536 hosts, all on leaf 0, and was run;
// 4e9 spines ended in std::bad_alloc and abort. Refused with the count.
TEST(ConfigFile, TopologiesTooLargeAreRefusedBeforeTheyAreBuilt) {
  const std::string leaf_spine = R"(
[topology]
kind = "leaf_spine"
leaves = 2
hosts_per_leaf = 4
spines = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
[[workload]]
kind = "permutation"
bytes = 4096
)";
  const std::string rail =
      replace(leaf_spine, "kind = \"leaf_spine\"\nleaves = 2\nhosts_per_leaf = 4",
              "kind = \"rail\"\nservers = 4\nrails = 2\nservers_per_group = 2");
  EXPECT_EQ(parse(leaf_spine).topo.num_hosts, 8u);
  EXPECT_EQ(parse(rail).topo.num_hosts, 8u);
  const std::pair<std::string, std::string> bad[] = {
      {replace(replace(leaf_spine, "leaves = 2", "leaves = 65536"), "hosts_per_leaf = 4",
               "hosts_per_leaf = 65537"),
       "t.toml:2:1: topology: 4295032832 hosts, more than 65536"},
      {replace(leaf_spine, "spines = 2", "spines = 4000000000"),
       "topology: 8000000008 links, more than 4194304"},
      {replace(leaf_spine, "spines = 2", "spines = 2\nlinks_per_spine = 4000000000"),
       "topology: 16000000008 links, more than 4194304"},
      {replace(replace(rail, "servers = 4", "servers = 65536"), "rails = 2", "rails = 65537"),
       "topology: 4295032832 hosts, more than 65536"},
      {replace(replace(replace(rail, "servers = 4", "servers = 65536"), "rails = 2", "rails = 1"),
               "spines = 2", "spines = 65536"),
       "links, more than 4194304"},
  };
  for (const auto& [text, want] : bad) expect_refused(text, want);
}

// A workload is counted before it is generated: 4e9 background flows (or an
// all-to-all of 65536 hosts) allocated until std::bad_alloc aborted.
TEST(ConfigFile, WorkloadsPastTheFlowLimitAreRefusedBeforeTheyAreGenerated) {
  const std::string bg = replace(kSmall, "flows = 40", "flows = 4000000000");
  const std::string a2a =
      replace(replace(kSmall, "k = 4", "k = 64"), "\"permutation\"", "\"all_to_all\"");
  const std::pair<std::string, std::string> bad[] = {
      {bg, "workload (background): 4000000000 flows, the scenario more than 16777216"},
      {a2a, "workload (all_to_all): 4294901760 flows, the scenario more than 16777216"},
  };
  for (const auto& [text, want] : bad) expect_refused(text, want);
  // Up to the limit, counted over every workload of the file.
  EXPECT_NO_THROW((void)parse(replace(kSmall, "flows = 40", "flows = 200000")));
  EXPECT_THROW((void)parse(replace(kSmall, "flows = 40", "flows = 16777216")), ConfigError);
}

}  // namespace
// A fault names switches by the tiers of its fabric, as --list-links does:
// tor / agg / core on a fat-tree, leaf / spine on a leaf-spine or rail
// fabric. "agg 0" on a leaf-spine was taken as spine 0 and "spine 0" on a
// fat-tree as agg 0, without a word; now each is refused naming the fault,
// the tier and the tiers the fabric has.
TEST(ConfigFile, FaultsNameOnlyTheTiersTheirFabricHas) {
  const std::string leaf_spine = R"(
[topology]
kind = "leaf_spine"
leaves = 2
hosts_per_leaf = 4
spines = 2
host_rate_gbps = 100
fabric_rate_gbps = 100
[[workload]]
kind = "permutation"
bytes = 4096
[[fault]]
kind = "rate"
rate_gbps = 25
link = ["leaf 0", "spine 1"]
)";
  const std::string rail =
      replace(leaf_spine, "kind = \"leaf_spine\"\nleaves = 2\nhosts_per_leaf = 4",
              "kind = \"rail\"\nservers = 4\nrails = 2\nservers_per_group = 2");
  // The fabric's own names: leaf 0 - spine 1 is the second link of leaf 0,
  // after its 4 hosts (8 hosts, so edges 8, 9).
  EXPECT_EQ(parse(leaf_spine).faults.at(0).edge, 9u);
  EXPECT_EQ(parse(rail).faults.at(0).edge, 9u);
  EXPECT_EQ(parse(kSmall).faults.at(0).edge, fat_tree_agg_core_edge(4, 0, 0));
  const std::string ls_tiers =
      "this fabric (leaf-spine 2x4, 2 spines) has host 0..7, leaf 0..1, "
      "spine 0..1";
  const std::string ft_tiers =
      "this fabric (fat-tree k=4) has host 0..15, tor 0..7, agg 0..7, "
      "core 0..3";
  const std::pair<std::string, std::string> bad[] = {
      {replace(leaf_spine, "\"spine 1\"", "\"agg 1\""),
       "t.toml:15:19: fault 0 (rate): fault.link: \"agg 1\": no agg tier here: " + ls_tiers},
      {replace(leaf_spine, "\"leaf 0\"", "\"tor 0\""),
       "fault 0 (rate): fault.link: \"tor 0\": no tor tier here: " + ls_tiers},
      {replace(leaf_spine, "\"spine 1\"", "\"core 0\""), "\"core 0\": no core tier here"},
      {replace(rail, "\"spine 1\"", "\"agg 0\""),
       "\"agg 0\": no agg tier here: this fabric (rail-optimized 4 servers x 2 rails) has host "
       "0..7, leaf 0..3, spine 0..1"},
      {replace(kSmall, "\"agg 0\"", "\"spine 0\""),
       "fault 0 (gray): fault.link: \"spine 0\": no spine tier here: " + ft_tiers},
      {replace(kSmall, "\"core 0\"", "\"leaf 0\""), "\"leaf 0\": no leaf tier here"},
      // an index beyond the tier, and names no fabric has
      {replace(leaf_spine, "\"spine 1\"", "\"spine 2\""),
       "fault 0 (rate): fault.link: no spine 2: " + ls_tiers},
      {replace(rail, "\"leaf 0\"", "\"leaf 4\""), "fault.link: no leaf 4: this fabric"},
      {replace(leaf_spine, "\"leaf 0\"", "\"host 8\""), "fault.link: no host 8: " + ls_tiers},
      {replace(leaf_spine, "\"spine 1\"", "\"rail 1\""),
       "fault.link: unknown node kind 'rail' in \"rail 1\": " + ls_tiers},
      {replace(leaf_spine, "\"spine 1\"", "\"spine -1\""),
       "fault 0 (rate): fault.link: a node is an id or \"KIND N\": " + ls_tiers},
      // a node id is a whole number (8.0 was taken as node 8)
      {replace(leaf_spine, "\"leaf 0\"", "8.0"), "a node is an id or \"KIND N\""},
      {replace(leaf_spine, "link = [\"leaf 0\", \"spine 1\"]", "edge = 24"),
       "fault 0 (rate): fault.edge: edge ids 0..11"},
  };
  for (const auto& [text, want] : bad) expect_refused(text, want);
}

// With links_per_spine > 1 a leaf and a spine are joined by several links,
// and `link = [A, B]` took the first of them without a word: a link_down of
// "the" leaf-spine link left the others carrying the traffic. A third
// element names one, 0-based in edge order; [A, B] alone names the only
// link joining A and B and is refused where there are several.
TEST(ConfigFile, ParallelLinksAreNamedByTheirIndex) {
  const std::string ls = R"(
[topology]
kind = "leaf_spine"
leaves = 2
hosts_per_leaf = 4
spines = 2
links_per_spine = 3
host_rate_gbps = 100
fabric_rate_gbps = 100
[[workload]]
kind = "permutation"
bytes = 4096
[[fault]]
kind = "link_down"
link = ["leaf 0", "spine 1", 2]
)";
  // 8 host links, then leaf 0's: spine 0 on edges 8-10, spine 1 on 11-13.
  const std::string ab = "link = [\"leaf 0\", \"spine 1\", 2]";
  EXPECT_EQ(parse(ls).faults.at(0).edge, 13u);
  EXPECT_EQ(parse(replace(ls, ab, "link = [\"spine 1\", \"leaf 0\", 0]")).faults.at(0).edge, 11u);
  EXPECT_EQ(parse(replace(ls, ab, "link = [11, 8, 1]")).faults.at(0).edge, 12u);  // node ids
  // One link between them: [A, B] as before, and index 0 is it.
  const std::string one = replace(ls, "links_per_spine = 3\n", "");
  EXPECT_EQ(parse(replace(one, ab, "link = [\"leaf 0\", \"spine 1\"]")).faults.at(0).edge, 9u);
  EXPECT_EQ(parse(replace(one, ab, "link = [\"leaf 0\", \"spine 1\", 0]")).faults.at(0).edge, 9u);
  EXPECT_EQ(parse(replace(one, ab, "link = [\"host 3\", \"leaf 0\", 0]")).faults.at(0).edge, 3u);
  const std::pair<std::string, std::string> bad[] = {
      {replace(ls, ab, "link = [\"leaf 0\", \"spine 1\"]"),
       "t.toml:15:8: fault 0 (link_down): fault.link: leaf 0 and spine 1 are joined by 3 parallel "
       "links (edges 11..13): name one as [\"leaf 0\", \"spine 1\", I], I 0..2 in edge order, or "
       "give edge = E"},
      {replace(ls, ab, "link = [\"leaf 0\", \"spine 1\", 3]"),
       "t.toml:15:30: fault 0 (link_down): fault.link: link 3 of leaf 0 and spine 1: they are "
       "joined by 3 links, 0..2 (edges 11..13)"},
      {replace(one, ab, "link = [\"leaf 0\", \"spine 1\", 1]"),
       "t.toml:14:30: fault 0 (link_down): fault.link: link 1 of leaf 0 and spine 1: they are "
       "joined by 1 link, 0..0 (edge 9)"},
      {replace(ls, ab, "link = [\"leaf 0\", \"spine 1\", -1]"),
       "t.toml:15:30: fault 0 (link_down): fault.link: the third element is a link's index among "
       "those joining the two nodes, a whole number >= 0"},
      {replace(ls, ab, "link = [\"leaf 0\", \"spine 1\", \"1\"]"),
       "fault.link: the third element is a link's index"},
      {replace(ls, ab, "link = [\"leaf 0\", \"spine 1\", 1, 2]"),
       "fault.link: two nodes and an optional index"},
      {replace(ls, ab, "link = [\"leaf 0\"]"), "fault.link: two nodes and an optional index"},
      {replace(ls, ab, "link = [\"leaf 0\", \"leaf 1\", 0]"), "fault.link: no link joins"},
  };
  for (const auto& [text, want] : bad) expect_refused(text, want);
}

// A link's link_down and link_up faults alternate, from up, in the order they
// act. A link_up written before its link_down (or a second link_down) did
// nothing, and the link stayed down for the rest of the run.
TEST(ConfigFile, LinkFaultsAlternateDownThenUp) {
  const std::string small = kSmall;
  const std::string base = small.substr(0, small.find("[[fault]]"));
  auto faults = [&](std::initializer_list<std::pair<const char*, int>> list) {
    std::string s = base;
    for (const auto& [kind, at] : list)
      s += "[[fault]]\nkind = \"" + std::string(kind) +
           "\"\nedge = 20\nat_us = " + std::to_string(at) + "\n";
    return s;
  };
  // Down then up, twice; one instant takes them in the file's order.
  EXPECT_EQ(parse(faults({{"link_down", 10}, {"link_up", 20}, {"link_down", 30}, {"link_up", 40}}))
                .faults.size(),
            4u);
  EXPECT_EQ(parse(faults({{"link_up", 40}, {"link_down", 10}})).faults.size(), 2u);
  EXPECT_EQ(parse(faults({{"link_down", 10}, {"link_up", 10}})).faults.size(), 2u);
  EXPECT_EQ(parse(faults({{"link_down", 10}})).faults.size(), 1u);  // down for good
  const std::pair<std::string, std::string> bad[] = {
      {faults({{"link_up", 10}, {"link_down", 20}}),
       "fault 0 (link_up, edge 20) at 10 us: the link is up then (its link_down, fault 1, is at "
       "20 us, later); a link's link_down and link_up alternate, starting with link_down"},
      {faults({{"link_up", 5}}), "fault 0 (link_up, edge 20) at 5 us: the link is up then;"},
      {faults({{"link_down", 10}, {"link_down", 20}}),
       "fault 1 (link_down, edge 20) at 20 us: the link is down then (fault 0 took it down at 10 "
       "us)"},
      {faults({{"link_down", 10}, {"link_up", 20}, {"link_up", 30}}),
       "fault 2 (link_up, edge 20) at 30 us: the link is up then (fault 1 took it up at 20 us)"},
      {faults({{"link_up", 10}, {"link_down", 10}}),
       "fault 0 (link_up, edge 20) at 10 us: the link is up then (its link_down, fault 1, is at "
       "10 us too, after it in the file: faults at one instant act in the file's order)"},
  };
  for (const auto& [text, want] : bad) expect_refused(text, want, kLocated);
  // Other links, and other kinds, are not in the sequence.
  std::string other = faults({{"link_down", 10}});
  other += "[[fault]]\nkind = \"link_down\"\nedge = 21\nat_us = 10\n";
  other += "[[fault]]\nkind = \"rate\"\nedge = 20\nrate_gbps = 10\nat_us = 20\n";
  EXPECT_EQ(parse(other).faults.size(), 3u);
}

// Values out of the documented ranges, and of the wrong kind, are refused
// with the key named: they were taken as something else.
TEST(ConfigFile, OutOfRangeAndWrongKindValuesAreRefused) {
  const std::pair<std::string, std::string> bad[] = {
      // 1 Mb/s at least, as the docs say: a fault's 0.0001 Gb/s ran at 1 Mb/s,
      // a link's 0.0006 Gb/s too
      {replace(kSmall, "rate_gbps = 50", "rate_gbps = 0.0001"),
       "t.toml:34:13: fault.rate_gbps: at least 0.001 (1 Mb/s)"},
      {replace(kSmall, "host_rate_gbps = 100", "host_rate_gbps = 0.0006"),
       "t.toml:7:18: topology.host_rate_gbps: at least 0.001 (1 Mb/s)"},
      // Whole Mb/s: 12.3456 ran at 12.346 Gb/s without a word.
      {replace(kSmall, "host_rate_gbps = 100", "host_rate_gbps = 12.3456"),
       "t.toml:7:18: topology.host_rate_gbps: 12.3456 is not a whole number of Mb/s"},
      {replace(kSmall, "rate_gbps = 50", "rate_gbps = 0.0015"),
       "t.toml:34:13: fault.rate_gbps: 0.0015 is not a whole number of Mb/s"},
      // a host id is a whole number (5.0 was host 5)
      {replace(kSmall, "hosts = [0, 5, 10, 15]", "hosts = [0, 5.0]"),
       "workload.hosts: host ids 0..15"},
  };
  for (const auto& [text, want] : bad) expect_refused(text, want);
  EXPECT_EQ(
      parse(replace(kSmall, "host_rate_gbps = 100", "host_rate_gbps = 0.001")).topo.host_rate_mbps,
      1u);
  // A decimal whose binary value is off a whole Mb/s by rounding alone is whole.
  for (const char* r : {"2.675", "0.1", "12.345", "99999.999"})
    EXPECT_NO_THROW(
        parse(replace(kSmall, "host_rate_gbps = 100", std::string("host_rate_gbps = ") + r)))
        << r;
  // trim_allowance_bytes is a byte count as the others are ("16KiB" was
  // refused as "expected a whole number").
  const std::string q = "buffer_bytes = \"175KB\"";
  EXPECT_EQ(
      parse(replace(kSmall, q, q + "\ntrim_allowance_bytes = \"8KiB\"")).queue.trim_allowance_bytes,
      8192u);
  EXPECT_EQ(parse(replace(kSmall, q, q + "\ntrim_allowance_bytes = 0")).queue.trim_allowance_bytes,
            0u);
}

// A [queue] byte key is a --set key: one range and one message whichever
// way it is given (settings.cpp). A file took buffer_bytes up to 9e18
// where --set refused more than 1e12.
TEST(ConfigFile, QueueBytesHaveSetsRangeAndMessage) {
  const std::string q = "buffer_bytes = \"175KB\"";
  for (const std::string key : {"buffer_bytes", "ecn_kmin", "ecn_kmax", "trim_allowance_bytes",
                                "pfc_xoff_bytes", "pfc_xon_bytes"}) {
    SimConfig c;
    std::string set_err;
    ASSERT_FALSE(apply_setting(c, "queue." + key + "=2e12", set_err));
    ASSERT_EQ(set_err.rfind("--set ", 0), 0u) << set_err;
    const std::string want = set_err.substr(6);  // "queue.KEY: 2e+12 is not an integer in [...]"
    for (const std::string v : {"2000000000000", "\"2000GB\""}) {
      const std::string got = refusal(replace(kSmall, q, key + " = " + v));
      EXPECT_EQ(got, "t.toml:11:" + std::to_string(key.size() + 4) + ": " + want)
          << (got.empty() ? "accepted" : "got: " + got);
    }
  }
  // --set's bound itself, with or without a unit, is taken.
  EXPECT_EQ(parse(replace(kSmall, q, "buffer_bytes = 1000000000000")).queue.buffer_bytes,
            1'000'000'000'000u);
  EXPECT_EQ(parse(replace(kSmall, q, "buffer_bytes = \"1000GB\"")).queue.buffer_bytes,
            1'000'000'000'000u);
  EXPECT_EQ(parse(replace(kSmall, q, "pfc_xoff_bytes = \"100KB\"")).queue.pfc_xoff_bytes, 100'000u);
}

// Every --set key a config file also takes goes through one check
// (settings.cpp's table, then queue_spec_error): a value is taken in a file
// exactly when --set takes it, sets the same field, and a refusal says the
// same thing. A negative PFC threshold was refused in [queue] ("must be >=
// 0") where --set took -1 (derived); priority_dscp 46.0 was refused in a
// file and taken by --set; ecn_pmax and priority_dscp had messages of their
// own.
TEST(ConfigFile, EveryNumericSetKeyIsCheckedAsSetChecksIt) {
  const std::string q = "buffer_bytes = \"175KB\"\n", top = "time_limit_ms = 20\n";
  // The file's keys that are numeric --set keys (booleans are TOML's true and
  // false in a file, 0 and 1 on --set).
  const std::vector<std::string> keys = {"time_limit_ms",
                                         "reroute_us",
                                         "mtu",
                                         "queue.buffer_bytes",
                                         "queue.ecn_kmin",
                                         "queue.ecn_kmax",
                                         "queue.ecn_pmax",
                                         "queue.pfc_xoff_bytes",
                                         "queue.pfc_xon_bytes",
                                         "queue.priority_dscp",
                                         "queue.trim_allowance_bytes"};
  for (const std::string_view k : setting_keys()) {
    const bool boolean = k == "queue.pfc" || k == "queue.trim" || k == "queue.trim_priority";
    const bool in_file =
        k.rfind("queue.", 0) == 0 || k == "time_limit_ms" || k == "reroute_us" || k == "mtu";
    EXPECT_EQ(in_file && !boolean, std::find(keys.begin(), keys.end(), k) != keys.end()) << k;
  }
  const auto same = [](const SimConfig& a, const SimConfig& b) {
    return a.time_limit == b.time_limit && a.reroute_after == b.reroute_after &&
           a.endpoint.mtu == b.endpoint.mtu && a.rc.mtu == b.rc.mtu &&
           a.queue.buffer_bytes == b.queue.buffer_bytes && a.queue.ecn_kmin == b.queue.ecn_kmin &&
           a.queue.ecn_kmax == b.queue.ecn_kmax && a.queue.ecn_pmax == b.queue.ecn_pmax &&
           a.queue.pfc_xoff_bytes == b.queue.pfc_xoff_bytes &&
           a.queue.pfc_xon_bytes == b.queue.pfc_xon_bytes &&
           a.queue.priority_dscp == b.queue.priority_dscp &&
           a.queue.trim_allowance_bytes == b.queue.trim_allowance_bytes;
  };
  const SimConfig base = parse(kSmall);
  for (const std::string& key : keys) {
    const bool queue_key = key.rfind("queue.", 0) == 0;
    const std::string name = queue_key ? key.substr(6) : key;
    for (const std::string v : {"-2",     "-1",     "-0.5", "0",    "0.5", "1",    "1.5",  "2",
                                "46",     "46.0",   "64",   "65",   "300", "9000", "9001", "100000",
                                "175000", "200000", "1e12", "2e12", "inf", "-inf", "nan"}) {
      SimConfig set = base;
      std::string set_err;
      if (apply_setting(set, key + "=" + v, set_err)) {
        set_err = queue_spec_error(set.queue);
      } else {
        ASSERT_EQ(set_err.rfind("--set ", 0), 0u) << set_err;
        set_err = set_err.substr(6);
      }
      const std::string line = name + " = " + v + "\n";
      const std::string text = queue_key
                                   ? (key == "queue.buffer_bytes" ? replace(kSmall, q, line)
                                                                  : replace(kSmall, q, q + line))
                                   : (key == "time_limit_ms" ? replace(kSmall, top, line)
                                                             : replace(kSmall, top, top + line));
      std::string file_err;
      SimConfig file;
      try {
        file = parse(text);
      } catch (const ConfigError& e) {
        file_err = e.what();
        // "t.toml:LINE:COLUMN: " before the message
        const auto at = file_err.find(": ");
        file_err = at == std::string::npos ? file_err : file_err.substr(at + 2);
      }
      EXPECT_EQ(file_err, set_err) << key << " = " << v;
      if (file_err.empty() && set_err.empty()) {
        EXPECT_TRUE(same(file, set)) << key << " = " << v;
      }
    }
  }
}

// A workload's byte count has one range, [1, 9e18], and --set's message
// however it is written (settings.cpp's range_error): a plain number had no
// upper bound (9100000000000000000 was taken, past the documented 9e18), a
// TOML float (9e18, 1e6) was "expected a byte count" where --set takes
// 2e12, and 0 had a message of its own.
TEST(ConfigFile, WorkloadBytesHaveOneRangeAndMessage) {
  const std::string b = "bytes = \"256KiB\"";  // the permutation's, line 14
  const std::pair<std::string, std::string> bad[] = {
      {"9000000000000000001", "9000000000000000001"},
      {"9100000000000000000", "9.1e+18"},
      {"9223372036854775807", "9.22337e+18"},
      {"9.1e18", "9.1e+18"},
      {"1e30", "1e+30"},
      {"\"9100000000GB\"", "9.1e+18"},
      {"\"1e30GiB\"", "1.07374e+39"},
      {"0", "0"},
      {"\"0B\"", "0"},
      {"-4096", "-4096"},
      {"4096.5", "4096.5"},
      {"nan", "nan"},
  };
  for (const auto& [v, shown] : bad)
    EXPECT_EQ(refusal(replace(kSmall, b, "bytes = " + v)),
              "t.toml:14:9: workload.bytes: " + shown + " is not an integer in [1, 9e+18]")
        << v;
  // Every kind's bytes, the allreduce's and the background's in place.
  EXPECT_EQ(refusal(replace(kSmall, "bytes = \"64KiB\"", "bytes = 9100000000000000000")),
            "t.toml:18:9: workload.bytes: 9.1e+18 is not an integer in [1, 9e+18]");
  EXPECT_EQ(refusal(replace(kSmall, "bytes = 16384", "bytes = 9100000000000000000")),
            "t.toml:22:9: workload.bytes: 9.1e+18 is not an integer in [1, 9e+18]");
  for (const std::string kind : {"kind = \"all_to_all\"", "kind = \"incast\"\nsenders = 3"}) {
    EXPECT_EQ(refusal(replace(replace(kSmall, "kind = \"permutation\"", kind), b,
                              "bytes = 9100000000000000000")),
              "t.toml:" + std::to_string(kind.find('\n') == std::string::npos ? 14 : 15) +
                  ":9: workload.bytes: 9.1e+18 is not an integer in [1, 9e+18]")
        << kind;
  }
  // The bound itself, however written; a whole float is a whole number.
  for (const std::string v : {"9000000000000000000", "9e18", "\"9000000000GB\""})
    EXPECT_EQ(parse(replace(kSmall, b, "bytes = " + v)).flows[0].bytes, 9'000'000'000'000'000'000u)
        << v;
  EXPECT_EQ(parse(replace(kSmall, b, "bytes = 1e6")).flows[0].bytes, 1'000'000u);
  // The [queue] byte keys and mtu take a whole float as --set does.
  const std::string q = "buffer_bytes = \"175KB\"";
  EXPECT_EQ(parse(replace(kSmall, q, "buffer_bytes = 175e3")).queue.buffer_bytes, 175'000u);
  EXPECT_EQ(refusal(replace(kSmall, q, "buffer_bytes = 2e12")),
            "t.toml:11:16: queue.buffer_bytes: 2e+12 is not an integer in [1, 1e+12]");
}

// A traffic matrix's bytes: the same range and message (a flow of 2^64 - 1
// bytes was taken, 2^64 "not a whole number", 0 "zero bytes").
TEST(TrafficMatrix, BytesHaveTheWorkloadsRangeAndMessage) {
  const std::pair<const char*, const char*> bad[] = {
      {"0 1 9000000000000000001 0\n", "tm:1: bytes: 9000000000000000001"},
      {"0 1 18446744073709551615 0\n", "tm:1: bytes: 1.84467e+19"},
      {"0 1 99999999999999999999 0\n", "tm:1: bytes: 1e+20"},
      {"\n0 1 0 0\n", "tm:2: bytes: 0"},
  };
  for (const auto& [text, want] : bad) {
    std::istringstream in(text);
    try {
      (void)read_traffic_matrix(in, 4, "tm");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), std::string(want) + " is not an integer in [1, 9e+18]");
    }
  }
  std::istringstream in("0 1 9000000000000000000 0\n");
  EXPECT_EQ(read_traffic_matrix(in, 4, "tm").at(0).bytes, 9'000'000'000'000'000'000u);
}

// The ideal of flows of up to 9e18 bytes each: a NIC's bytes were summed in
// 64 bits, and 15 flows of 9e18 from one host wrapped (an all-to-all of 16
// hosts read an ideal a fraction of its own flows' line-rate time).
TEST(IdealTime, HugeFlowsDoNotWrapTheNicsSum) {
  SimConfig c = parse(replace(replace(kSmall, "kind = \"permutation\"", "kind = \"all_to_all\""),
                              "bytes = \"256KiB\"", "bytes = 9000000000000000000"));
  c.flows.resize(240);  // the all-to-all alone: each host sends 15 flows
  c.faults.clear();
  c.time_limit = SimTime::from_us(5);
  Simulation sim(std::move(c));
  sim.run();
  const double want = 15 * 9e18 * 8 / 100'000;  // us at 100 Gb/s
  EXPECT_NEAR(sim.report().ideal_us, want, want * 1e-9);
}

// `name = ""` gave the report an empty first line and --pcap the file
// "-metaroce.pcap". The documented default, "config", is for a file
// without the key; an empty value is refused, as metaroce-sim refuses an
// option's.
TEST(ConfigFile, EmptyNameIsRefused) {
  for (const std::string blank : {"\"\"", "\"   \"", "\"\\t\""}) {
    EXPECT_EQ(refusal(replace(kSmall, "name = \"small\"", "name = " + blank)),
              "t.toml:2:8: name: empty or blank; give the report a name, or leave the key out for "
              "\"config\"")
        << blank;
  }
  EXPECT_EQ(parse(replace(kSmall, "name = \"small\"\n", "")).name, "config");
  EXPECT_EQ(parse(replace(kSmall, "name = \"small\"", "name = \" a \"")).name, " a ");
}

TEST(Settings, SetChangesExactlyTheNamedField) {
  SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  std::string err;
  ASSERT_TRUE(apply_setting(c, "cc.dctcp_g_shift=5", err)) << err;
  ASSERT_TRUE(apply_setting(c, "recovery.min_rto_us=250", err)) << err;
  ASSERT_TRUE(apply_setting(c, "inflight_cap_bdp=1.5", err)) << err;
  ASSERT_TRUE(apply_setting(c, "inflight_cap_packets=3", err)) << err;
  EXPECT_EQ(c.inflight_cap_packets, 3u);
  EXPECT_FALSE(apply_setting(c, "inflight_cap_packets=2.5", err));
  ASSERT_TRUE(apply_setting(c, "queue.ecn_kmin=20000", err)) << err;
  ASSERT_TRUE(apply_setting(c, "reroute_us=500", err)) << err;
  ASSERT_TRUE(apply_setting(c, "cc.explore_interval_us=40", err)) << err;
  EXPECT_EQ(c.endpoint.cc.explore_interval_ns, 40'000u);
  EXPECT_EQ(c.reroute_after, SimTime::from_us(500));
  EXPECT_FALSE(c.queue.trim);
  ASSERT_TRUE(apply_setting(c, "queue.trim=1", err)) << err;
  EXPECT_TRUE(c.queue.trim);
  ASSERT_TRUE(apply_setting(c, "queue.trim_allowance_bytes=0", err)) << err;
  EXPECT_EQ(c.queue.trim_allowance_bytes, 0u);
  ASSERT_TRUE(apply_setting(c, "queue.trim_priority=0", err)) << err;
  EXPECT_FALSE(c.queue.trim_priority);
  EXPECT_FALSE(apply_setting(c, "queue.trim=2", err));
  ASSERT_TRUE(apply_setting(c, "reroute_us=-1", err)) << err;
  EXPECT_EQ(c.reroute_after, SimTime::never());
  EXPECT_EQ(c.endpoint.cc.dctcp_g_shift, 5u);
  EXPECT_EQ(c.endpoint.recovery.min_rto_ns, 250'000u);
  EXPECT_EQ(c.endpoint.recovery.max_rto_ns, 10'000'000u);  // the simulator's
  // A min_rto above the simulator's max_rto (10 ms) raises it: LOSS-5's
  // ceiling is never below LOSS-4's floor (config_error refuses that).
  SimConfig slow = c;
  ASSERT_TRUE(apply_setting(slow, "recovery.min_rto_us=20000", err)) << err;
  EXPECT_EQ(slow.endpoint.recovery.max_rto_ns, 20'000'000u);
  EXPECT_EQ(config_error(slow.endpoint), "");
  EXPECT_DOUBLE_EQ(c.inflight_cap_bdp, 1.5);
  EXPECT_EQ(c.queue.ecn_kmin, 20'000u);
  EXPECT_NE(settings_help().find("num_paths"), std::string::npos);
  ASSERT_TRUE(apply_setting(c, "rc.byte_counter=32767", err)) << err;
  ASSERT_TRUE(apply_setting(c, "rc.increase_timer_us=2.5", err)) << err;
  ASSERT_TRUE(apply_setting(c, "rc.g=0.0625", err)) << err;
  EXPECT_EQ(c.rc.byte_counter, 32'767u);
  EXPECT_EQ(c.rc.increase_timer, SimTime::from_ps(2'500'000));
  EXPECT_DOUBLE_EQ(c.rc.g, 0.0625);
  EXPECT_FALSE(apply_setting(c, "rc.g=2", err));
  ASSERT_TRUE(apply_setting(c, "queue.pfc_xoff_bytes=60000", err)) << err;
  ASSERT_TRUE(apply_setting(c, "queue.pfc_xon_bytes=0", err)) << err;
  EXPECT_EQ(c.queue.pfc_xoff_bytes, 60'000u);
  EXPECT_EQ(c.queue.pfc_xon_bytes, 0u);
  ASSERT_TRUE(apply_setting(c, "queue.pfc_xoff_bytes=-1", err)) << err;
  EXPECT_FALSE(c.queue.pfc_xoff_bytes);  // derived again
  EXPECT_FALSE(apply_setting(c, "queue.pfc_xon_bytes=-2", err));
  ASSERT_TRUE(apply_setting(c, "mtu=2048", err)) << err;
  EXPECT_EQ(c.endpoint.mtu, 2048u);
  EXPECT_EQ(c.rc.mtu, 2048u);
}

// [cc], [recovery] and [rc]: each key is the --set key SECTION.KEY, and
// changes the run as its --set does.
TEST(ConfigFile, EngineAndBaselineSectionsSetTheirFields) {
  const std::string sections =
      "buffer_bytes = \"175KB\"\n[cc]\ntarget_queue_delay_us = 5\nenabled = true\n"
      "[recovery]\nmin_rto_us = 500\nmax_rto_us = 2000\nrto_failures_to_retire = 5\n"
      "[rc]\ng = 0.5\necn_kmin = \"10KiB\"\n";
  std::vector<std::string> given;
  const SimConfig c = parse_config(replace(kSmall, "buffer_bytes = \"175KB\"\n", sections),
                                   "t.toml", ".", TransportKind::kMetaRoce, 1, &given);
  EXPECT_EQ(c.endpoint.cc.target_queue_delay_ns, 5'000u);
  EXPECT_TRUE(c.endpoint.cc.enabled);
  // max_rto_us given: min_rto_us leaves it, though the file's keys come
  // sorted (max before min).
  EXPECT_EQ(c.endpoint.recovery.min_rto_ns, 500'000u);
  EXPECT_EQ(c.endpoint.recovery.max_rto_ns, 2'000'000u);
  EXPECT_EQ(c.endpoint.recovery.rto_failures_to_retire, 5u);
  EXPECT_DOUBLE_EQ(c.rc.g, 0.5);
  EXPECT_EQ(c.rc.ecn_kmin, 10'240u);
  for (const char* k : {"cc.target_queue_delay_us", "recovery.max_rto_us", "rc.g"})
    EXPECT_NE(std::find(given.begin(), given.end(), k), given.end()) << k;
  // The default's digest is not the [cc] file's, and --set's is the same.
  auto digest = [](SimConfig cfg) {
    Simulation sim(std::move(cfg));
    sim.run();
    return sim.report().digest;
  };
  const std::string cc_only =
      replace(kSmall, "buffer_bytes = \"175KB\"\n",
              "buffer_bytes = \"175KB\"\n[cc]\ntarget_queue_delay_us = 2\n");
  SimConfig by_set = parse(kSmall);
  std::string err;
  ASSERT_TRUE(apply_setting(by_set, "cc.target_queue_delay_us=2", err)) << err;
  const auto with_cc = digest(parse(cc_only));
  EXPECT_NE(with_cc, digest(parse(kSmall)));
  EXPECT_EQ(with_cc, digest(by_set));
}

// A bad key, a value of the wrong type or out of the engine's range: the
// file's line and column, and config_error()'s words for the engine's fields.
TEST(ConfigFile, EngineSectionsAreJudgedByTheEngine) {
  auto with = [](const std::string& section) {
    return refusal(
        replace(kSmall, "buffer_bytes = \"175KB\"\n", "buffer_bytes = \"175KB\"\n" + section));
  };
  EXPECT_EQ(with("[cc]\nfoo = 1\n"),
            "t.toml:13:1: unknown key 'cc.foo' (metaroce-sim --list-settings shows the cc.* keys)");
  EXPECT_EQ(with("[rc]\nmin_rto_us = 1\n"),
            "t.toml:13:1: unknown key 'rc.min_rto_us' (metaroce-sim --list-settings shows the rc.* "
            "keys)");
  EXPECT_EQ(with("[cc]\ndctcp_g_shift = \"4\"\n"),
            "t.toml:13:17: cc.dctcp_g_shift: expected a number");
  EXPECT_EQ(with("[cc]\nenabled = 1\n"), "t.toml:13:11: cc.enabled: expected true or false");
  EXPECT_EQ(with("[cc]\ndctcp_g_shift = 11\n"),
            "t.toml:13:17: cc.dctcp_g_shift: 11 is not an integer in [0, 10]");
  EXPECT_EQ(with("[recovery]\nrto_failures_to_retire = 300\n"),
            "t.toml:13:26: recovery.rto_failures_to_retire 300 is out of range 1..255 (PATH-4)");
  EXPECT_EQ(with("[cc]\ninitial_cwnd_packets = 0\n"),
            "t.toml:13:24: cc.initial_cwnd_packets 0 is out of range 1..65535 (CC-1)");
  // Two fields: located at the first the message names.
  EXPECT_EQ(
      with("[recovery]\nmax_rto_us = 100\nmin_rto_us = 500\n"),
      "t.toml:14:14: recovery.min_rto_ns 500000 is above recovery.max_rto_ns 100000 (LOSS-4)");
  EXPECT_EQ(with("[cc]\nmin_cwnd_packets = 65535\nmax_cwnd_packets = 1\n"),
            "t.toml:13:20: cc.min_cwnd_packets 65535 is above num_paths 16 times a path's largest "
            "window, 1 packets (cc.max_cwnd_packets or the window; CC-6)");
}

// The engine's RNR settings (LOSS-7) reach the simulated NICs' engines by
// --set and by a config file's [recovery]; they were neither's. num_paths,
// ack_every and the driver's inflight_cap_bdp, --set keys without a
// section, are the file's top-level keys (they were --set's only). Out of
// the engine's range: config_error()'s words, at the key's line.
TEST(ConfigFile, RnrAndTopLevelEngineKeys) {
  const std::string text = "num_paths = 4\nack_every = 3\ninflight_cap_bdp = 2\n" +
                           replace(kSmall, "buffer_bytes = \"175KB\"\n",
                                   "buffer_bytes = \"175KB\"\n[recovery]\nrnr_retry_limit = "
                                   "5\nrnr_retry_us = 50\n");
  std::vector<std::string> given;
  const SimConfig c = parse_config(text, "t.toml", ".", TransportKind::kMetaRoce, 1, &given);
  EXPECT_EQ(c.endpoint.num_paths, 4u);
  EXPECT_EQ(c.endpoint.ack_every, 3u);
  EXPECT_DOUBLE_EQ(c.inflight_cap_bdp, 2.0);
  EXPECT_EQ(c.endpoint.recovery.rnr_retry_limit, 5u);
  EXPECT_EQ(c.endpoint.recovery.rnr_retry_ns, 50'000u);
  for (const char* k : {"num_paths", "ack_every", "inflight_cap_bdp", "recovery.rnr_retry_limit",
                        "recovery.rnr_retry_us"})
    EXPECT_NE(std::find(given.begin(), given.end(), k), given.end()) << k;
  // In the NICs' engines as the file gave them.
  Simulation sim(c);
  const EndpointConfig& e = sim.host(0).endpoint().config();
  EXPECT_EQ(e.num_paths, 4u);
  EXPECT_EQ(e.ack_every, 3u);
  EXPECT_EQ(e.recovery.rnr_retry_limit, 5u);
  EXPECT_EQ(e.recovery.rnr_retry_ns, 50'000u);

  auto recovery = [](const std::string& keys) {
    return refusal(replace(kSmall, "buffer_bytes = \"175KB\"\n",
                           "buffer_bytes = \"175KB\"\n[recovery]\n" + keys));
  };
  EXPECT_EQ(recovery("rnr_retry_limit = 65535\n"),
            "t.toml:13:19: recovery.rnr_retry_limit 65535 is out of range 0..65534 (LOSS-7)");
  EXPECT_EQ(recovery("rnr_retry_us = 0\n"),
            "t.toml:13:16: recovery.rnr_retry_ns 0 is out of range 1..86400000000000 (LOSS-7)");
  EXPECT_EQ(recovery("rnr_retry_limit = 1.5\n"),
            "t.toml:13:19: recovery.rnr_retry_limit: 1.5 is not an integer in [0, 4.29497e+09]");
  EXPECT_EQ(refusal("num_paths = 40\n" + std::string(kSmall)),
            "t.toml:1:13: num_paths: 40 is not an integer in [1, 32]");
  EXPECT_EQ(refusal("ack_every = 0\n" + std::string(kSmall)),
            "t.toml:1:13: ack_every 0 is out of range 1..255 (ACK-1)");
  EXPECT_EQ(refusal("inflight_cap_bdp = -1\n" + std::string(kSmall)),
            "t.toml:1:20: inflight_cap_bdp: -1 is not a value in [0, 1000]");
  EXPECT_EQ(refusal("num_paths = \"4\"\n" + std::string(kSmall)),
            "t.toml:1:13: num_paths: expected a number");
}

// --set recovery.rnr_retry_limit and recovery.rnr_retry_us set the engine's
// fields, and a value the engine refuses is named by config_error().
TEST(Settings, RnrKeysReachTheEngine) {
  SimConfig c = preset("incast8-256k", TransportKind::kMetaRoce, 1);
  std::string err;
  ASSERT_TRUE(apply_setting(c, "recovery.rnr_retry_limit=7", err)) << err;
  ASSERT_TRUE(apply_setting(c, "recovery.rnr_retry_us=20", err)) << err;
  ASSERT_TRUE(apply_setting(c, "ack_every=100", err)) << err;  // ACK-1's range, 1..255
  std::vector<std::string> named;
  EXPECT_EQ(engine_setting_error(c, named), "");
  {
    Simulation sim(c);
    const EndpointConfig& e = sim.host(0).endpoint().config();
    EXPECT_EQ(e.recovery.rnr_retry_limit, 7u);
    EXPECT_EQ(e.recovery.rnr_retry_ns, 20'000u);
    EXPECT_EQ(e.ack_every, 100u);
  }
  SimConfig bad = c;
  ASSERT_TRUE(apply_setting(bad, "recovery.rnr_retry_limit=65535", err)) << err;
  EXPECT_EQ(engine_setting_error(bad, named),
            "recovery.rnr_retry_limit 65535 is out of range 0..65534 (LOSS-7)");
  EXPECT_EQ(named, std::vector<std::string>{"recovery.rnr_retry_limit"});
  bad = c;
  ASSERT_TRUE(apply_setting(bad, "recovery.rnr_retry_us=0", err)) << err;
  EXPECT_EQ(engine_setting_error(bad, named),
            "recovery.rnr_retry_ns 0 is out of range 1..86400000000000 (LOSS-7)");
  EXPECT_EQ(named, std::vector<std::string>{"recovery.rnr_retry_us"});
  EXPECT_FALSE(apply_setting(bad, "recovery.rnr_retry_limit=-1", err));
  EXPECT_EQ(err, "--set recovery.rnr_retry_limit: -1 is not an integer in [0, 4.29497e+09]");
  EXPECT_FALSE(apply_setting(bad, "ack_every=256", err));
  EXPECT_EQ(err, "--set ack_every: 256 is not an integer in [0, 255]");
}

TEST(Settings, EngineFieldsAreJudgedByConfigError) {
  SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  std::vector<std::string> named;
  EXPECT_EQ(engine_setting_error(c, named), "");
  EXPECT_TRUE(named.empty());
  std::string err;
  // Within its type, so --set takes it; the engine's range is config_error's.
  ASSERT_TRUE(apply_setting(c, "recovery.rto_failures_to_retire=300", err)) << err;
  EXPECT_EQ(engine_setting_error(c, named), config_error(c.endpoint));
  EXPECT_EQ(named, std::vector<std::string>{"recovery.rto_failures_to_retire"});
  ASSERT_TRUE(apply_setting(c, "recovery.rto_failures_to_retire=3", err)) << err;
  // Either order: a max_rto given is not raised by min_rto.
  for (const bool max_first : {true, false}) {
    SimConfig r = c;
    for (const char* s : max_first
                             ? std::vector{"recovery.max_rto_us=100", "recovery.min_rto_us=500"}
                             : std::vector{"recovery.min_rto_us=500", "recovery.max_rto_us=100"})
      ASSERT_TRUE(apply_setting(r, s, err)) << err;
    EXPECT_EQ(engine_setting_error(r, named),
              "recovery.min_rto_ns 500000 is above recovery.max_rto_ns 100000 (LOSS-4)");
    EXPECT_EQ(named, (std::vector<std::string>{"recovery.min_rto_us", "recovery.max_rto_us"}));
  }
  // The engine's fields a config file's sections and --set now reach.
  for (const char* s :
       {"cc.initial_cwnd_packets=7", "recovery.initial_rtt_us=3", "recovery.loss_window_packets=64",
        "recovery.peer_timeout_us=5000", "recovery.keepalive_us=0"})
    ASSERT_TRUE(apply_setting(c, s, err)) << err;
  EXPECT_EQ(c.endpoint.cc.initial_cwnd_packets, 7u);
  EXPECT_EQ(c.endpoint.recovery.initial_rtt_ns, 3'000u);
  EXPECT_EQ(c.endpoint.recovery.loss_window_packets, 64u);
  EXPECT_EQ(c.endpoint.recovery.peer_timeout_ns, 5'000'000u);
  EXPECT_EQ(c.endpoint.recovery.keepalive_ns, 0u);
  EXPECT_EQ(engine_setting_error(c, named), "");
  // The simulator derives the initial window from the BDP unless told not to.
  EXPECT_NE(setting_idle_in("cc.initial_cwnd_packets", c), "");
  ASSERT_TRUE(apply_setting(c, "initial_window_bdp=0", err)) << err;
  EXPECT_EQ(setting_idle_in("cc.initial_cwnd_packets", c), "");
}

// Progress lines start with the warm-up (connection handshakes, before the
// workload): the tick was installed after it, and a large fabric's warm-up
// passed without a line.
TEST(Progress, WarmUpHasProgressLines) {
  SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  c.progress = true;
  c.progress_interval_s = 0;  // every chance, not once a wall second
  c.time_limit = SimTime::from_us(1);
  testing::internal::CaptureStderr();
  {
    Simulation sim(std::move(c));
    sim.run();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[fattree16-perm] warm-up t="), std::string::npos) << err;
  EXPECT_NE(err.find(" hosts connected "), std::string::npos) << err;
}

// A progress line's rate over no measured wall time (a progress interval of
// 0 lets two lines come within one clock reading) reads "-": it was a
// division by zero, printed "inf" (or "nan" with nothing counted).
TEST(Progress, RateOverNoWallTimeIsADash) {
  EXPECT_STREQ(rate_text(5, 0, 1, 0).c_str(), "-");
  EXPECT_STREQ(rate_text(0, 0, 1e6, 2).c_str(), "-");
  EXPECT_STREQ(rate_text(3e6, 1.5, 1e6, 2).c_str(), "2.00");
  EXPECT_STREQ(rate_text(10, 0.5, 1, 0).c_str(), "20");
}

// fattree16-perm built with progress lines at every chance (not once a wall
// second) and no warm-up.
SimConfig chatty_build(TransportKind t) {
  SimConfig c = preset("fattree16-perm", t, 1);
  c.progress = true;
  c.progress_interval_s = 0;
  c.preconnect = false;
  return c;
}

// What building c's simulation writes on stderr.
std::string build_stderr(const SimConfig& c) {
  testing::internal::CaptureStderr();
  { const Simulation sim(c); }
  return testing::internal::GetCapturedStderr();
}

// The network build (a route search per destination host) has progress
// lines too: leafspine8192's took some 5 s with none, before the warm-up's
// first. Without progress (-q), the build says nothing.
TEST(Progress, NetworkBuildHasProgressLines) {
  SimConfig c = chatty_build(TransportKind::kMetaRoce);
  const std::string err = build_stderr(c);
  EXPECT_NE(err.find("[fattree16-perm] build  routes to hosts 1/16  ("), std::string::npos) << err;
  EXPECT_NE(err.find("[fattree16-perm] build  routes to hosts 16/16  ("), std::string::npos) << err;
  c.progress = false;
  EXPECT_EQ(build_stderr(c), "");
}

// Building the hosts (a NIC and its engine each) has progress lines of its
// own: until stop 48 the build's last line was the routes', and the hosts
// and the warm-up passed without one.
TEST(Progress, HostBuildHasProgressLines) {
  for (const TransportKind t : {TransportKind::kMetaRoce, TransportKind::kIrn}) {
    const std::string err = build_stderr(chatty_build(t));
    EXPECT_NE(err.find("[fattree16-perm] build  hosts 1/16  ("), std::string::npos) << err;
    EXPECT_NE(err.find("[fattree16-perm] build  hosts 16/16  ("), std::string::npos) << err;
    // After the routes, whose last line comes first.
    EXPECT_LT(err.find("routes to hosts 16/16"), err.find("build  hosts 1/16")) << err;
  }
}

// A reroute (reroute_us after a link goes down or up) recomputes every
// switch's routes, about a second on leafspine8192, and says so with the
// simulated time it happens at; -q (progress off) keeps stderr empty through
// the whole run, the reroutes included.
TEST(Progress, RerouteHasProgressLinesAndQuietHasNone) {
  SimConfig c = preset("fattree16-perm-linkdown", TransportKind::kMetaRoce, 1);
  c.reroute_after = SimTime::from_us(10);
  c.progress = true;
  c.progress_interval_s = 0;
  testing::internal::CaptureStderr();
  double warmup_us = 0;
  {
    Simulation sim(c);
    sim.run();
    warmup_us = sim.report().warmup_us;
  }
  const std::string err = testing::internal::GetCapturedStderr();
  // Two links go down 20 us into the workload; routes follow 10 us later.
  const std::string rr = "reroute  routes to hosts 16/16  (";
  ASSERT_NE(err.find(rr), std::string::npos) << err;
  const size_t line = err.rfind('\n', err.find(rr)) + 1;
  EXPECT_EQ(err.compare(line, 20, "[fattree16-perm-link"), 0) << err.substr(line);
  double t_us = 0;
  ASSERT_EQ(std::sscanf(err.c_str() + err.find("t=", line), "t=%lf us", &t_us), 1);
  EXPECT_DOUBLE_EQ(t_us, warmup_us + 30.0);
  c.progress = false;
  testing::internal::CaptureStderr();
  {
    Simulation sim(c);
    sim.run();
  }
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST(Settings, BadKeysAndValuesAreRefusedAndChangeNothing) {
  const SimConfig before = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  SimConfig c = before;
  std::string err;
  EXPECT_FALSE(apply_setting(c, "cc.no_such_key=1", err));
  EXPECT_NE(err.find("unknown key 'cc.no_such_key'"), std::string::npos) << err;
  EXPECT_FALSE(apply_setting(c, "num_paths=33", err));  // out of range
  EXPECT_NE(err.find("[1, 32]"), std::string::npos) << err;
  EXPECT_FALSE(apply_setting(c, "num_paths=2.5", err));  // not an integer
  EXPECT_FALSE(apply_setting(c, "num_paths=abc", err));
  EXPECT_NE(err.find("not a number"), std::string::npos) << err;
  EXPECT_FALSE(apply_setting(c, "num_paths", err));  // no '='
  EXPECT_EQ(c.endpoint.num_paths, before.endpoint.num_paths);
  for (const char* bad : {"mtu=255", "mtu=9001", "mtu=1500.5"}) {
    EXPECT_FALSE(apply_setting(c, bad, err)) << bad;
    EXPECT_NE(err.find("--set mtu: "), std::string::npos) << err;
    EXPECT_NE(err.find("[256, 9000]"), std::string::npos) << err;
  }
  EXPECT_EQ(c.endpoint.mtu, 4096u);
  EXPECT_EQ(c.rc.mtu, 4096u);
}

// metaroce-sim's --paths, --time-limit-ms and --min-rto-us go through the
// table under their own names: out of range, or not finite, they are refused
// with the option named (they were clamped, ignored or overflowed).
TEST(Settings, OptionsOfTheirOwnNameAreCheckedByTheTable) {
  const SimConfig before = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  SimConfig c = before;
  std::string err;
  const struct {
    const char* key;
    double value;
    const char* option;
    const char* range;
  } bad[] = {
      {"num_paths", 0, "--paths", "an integer in [1, 32]"},
      {"num_paths", -1, "--paths", "an integer in [1, 32]"},
      {"num_paths", 33, "--paths", "an integer in [1, 32]"},
      {"time_limit_ms", -5, "--time-limit-ms", "a value in [1e-06, 1e+09]"},
      {"time_limit_ms", std::nan(""), "--time-limit-ms", "a value in [1e-06, 1e+09]"},
      {"time_limit_ms", 2e10, "--time-limit-ms", "a value in [1e-06, 1e+09]"},
      {"recovery.min_rto_us", -1, "--min-rto-us", "a value in [1, 1e+07]"},
  };
  for (const auto& b : bad) {
    EXPECT_FALSE(apply_setting(c, b.key, b.value, err, b.option)) << b.option << " " << b.value;
    EXPECT_EQ(err.rfind(std::string(b.option) + ": ", 0), 0u) << err;
    EXPECT_NE(err.find(b.range), std::string::npos) << err;
  }
  EXPECT_EQ(c.endpoint.num_paths, before.endpoint.num_paths);
  EXPECT_EQ(c.time_limit, before.time_limit);
  EXPECT_EQ(c.endpoint.recovery.min_rto_ns, before.endpoint.recovery.min_rto_ns);
  ASSERT_TRUE(apply_setting(c, "time_limit_ms", 5, err, "--time-limit-ms")) << err;
  EXPECT_EQ(c.time_limit, SimTime::from_us(5000));
  ASSERT_TRUE(apply_setting(c, "time_limit_ms", 1e9, err, "--time-limit-ms")) << err;
  EXPECT_EQ(c.time_limit.ps, uint64_t{1'000'000'000} * 1'000'000'000);  // no overflow
}

// Each --set is in range, but together they may not be: the queue is then
// checked as a config file's [queue] is, with the same message.
TEST(Settings, QueueIsCheckedAsAWholeAfterTheOverrides) {
  SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  std::string err;
  EXPECT_EQ(queue_spec_error(c.queue), "");
  ASSERT_TRUE(apply_setting(c, "queue.ecn_kmin=200000", err)) << err;
  ASSERT_TRUE(apply_setting(c, "queue.ecn_kmax=100000", err)) << err;
  EXPECT_EQ(queue_spec_error(c.queue), "queue.ecn_kmin (200000) is above queue.ecn_kmax (100000)");
  ASSERT_TRUE(apply_setting(c, "queue.ecn_kmax=200000", err)) << err;  // kmin == kmax: a step
  EXPECT_EQ(queue_spec_error(c.queue), "");
  ASSERT_TRUE(apply_setting(c, "queue.ecn_kmax=0", err)) << err;  // no marking, whatever kmin
  EXPECT_EQ(queue_spec_error(c.queue), "");
}

}  // namespace metaroce::sim
