// Simulator tests: scheduler order, determinism, a small fat-tree
// permutation end to end, ECMP spreading, and failures mid-run.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "metaroce/sim/config_file.hpp"
#include "metaroce/sim/presets.hpp"
#include "metaroce/sim/rc_host.hpp"
#include "metaroce/sim/scheduler.hpp"
#include "metaroce/sim/settings.hpp"
#include "metaroce/sim/simulation.hpp"
#include "metaroce/sim/topology.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::sim {
namespace {

class Recorder final : public EventSource {
 public:
  Recorder(std::vector<int>& log, int tag) : log_(log), tag_(tag) {}
  void on_event(SimTime) override { log_.push_back(tag_); }

 private:
  std::vector<int>& log_;
  int tag_;
};

TEST(Scheduler, OrdersByTimeThenScheduleOrderAndRearms) {
  Scheduler s;
  std::vector<int> log;
  std::vector<std::unique_ptr<Recorder>> r;
  for (int i = 0; i < 6; ++i) r.push_back(std::make_unique<Recorder>(log, i));
  s.schedule(*r[0], SimTime::from_ns(5));
  s.schedule(*r[1], SimTime::from_ns(3));
  s.schedule(*r[2], SimTime::from_ns(5));  // ties run in schedule order
  s.schedule(*r[3], SimTime::from_ns(1));
  s.schedule(*r[4], SimTime::from_ns(9));
  s.schedule(*r[5], SimTime::from_ns(2));
  s.schedule(*r[4], SimTime::from_ns(4));  // re-arm earlier
  s.schedule(*r[3], SimTime::from_ns(8));  // re-arm later
  s.cancel(*r[5]);
  EXPECT_EQ(s.pending_count(), 5u);
  s.run();
  EXPECT_EQ(log, (std::vector<int>{1, 4, 0, 2, 3}));
  EXPECT_EQ(s.now(), SimTime::from_ns(8));
  EXPECT_EQ(s.events(), 5u);
}

// A source that re-arms itself a picosecond later, for ever.
class Repeater final : public EventSource {
 public:
  explicit Repeater(Scheduler& s) : s_(s) {}
  void on_event(SimTime now) override { s_.schedule(*this, SimTime{now.ps + 1}); }

 private:
  Scheduler& s_;
};

// The progress tick comes every 2^16 events: every 2^20 left leafspine8192's
// run (0.3 to 0.5 M events/s) without a line for 2 to 3.5 s.
TEST(Scheduler, TicksEvery65536Events) {
  Scheduler s;
  Repeater r(s);
  std::vector<uint64_t> at;
  s.set_tick(
      [](void* ctx, const Scheduler& sc) {
        static_cast<std::vector<uint64_t>*>(ctx)->push_back(sc.events());
      },
      &at);
  s.schedule(r, SimTime{0});
  EXPECT_EQ(s.run(SimTime{3 * 65'536 + 10}), 3u * 65'536 + 11);
  EXPECT_EQ(at, (std::vector<uint64_t>{65'536, 2 * 65'536, 3 * 65'536}));
  s.cancel(r);
}

TEST(Time, ConvertsAtTheEngineBoundary) {
  EXPECT_EQ(serialization_time(4190, 100'000).ps, 335'200u);  // 4190 B at 100G
  EXPECT_EQ(serialization_time(1, 800'000).ps, 10u);
  EXPECT_EQ(SimTime::from_ps(1'999).to_engine().ns, 1u);
  EXPECT_EQ(SimTime::from_engine(TimeNs{7}).ps, 7'000u);
  EXPECT_EQ(SimTime::from_engine(TimeNs::never()), SimTime::never());
}

Report run_preset(const std::string& name, uint64_t seed,
                  TransportKind t = TransportKind::kMetaRoce) {
  Simulation sim(preset(name, t, seed));
  sim.run();
  return sim.report();
}

TEST(Determinism, SameSeedSameBytes) {
  const std::string a = run_preset("fattree16-perm", 7).to_json(false);
  const std::string b = run_preset("fattree16-perm", 7).to_json(false);
  EXPECT_EQ(a, b);
  const Report c = run_preset("fattree16-perm", 8);
  EXPECT_NE(a, c.to_json(false));
}

TEST(Determinism, TwoSimulationsInterleavedInOneProcess) {
  // Two simulations advanced in alternating slices give exactly what each
  // gives alone: no shared state.
  const Report alone_a = run_preset("fattree16-perm", 3);
  const Report alone_b = run_preset("fattree16-perm-linkdown", 4);
  Simulation a(preset("fattree16-perm", TransportKind::kMetaRoce, 3));
  Simulation b(preset("fattree16-perm-linkdown", TransportKind::kMetaRoce, 4));
  for (uint64_t us = 5; !(a.finished() && b.finished()) && us < 100'000; us += 5) {
    a.run(SimTime::from_us(us));
    b.run(SimTime::from_us(us));
  }
  EXPECT_EQ(a.report().to_json(false), alone_a.to_json(false));
  EXPECT_EQ(b.report().to_json(false), alone_b.to_json(false));
}

TEST(FatTree, ShapeOfK16) {
  const LinkSpec l{};
  const TopoGraph g = fat_tree(16, l, l);
  EXPECT_EQ(g.num_hosts, 1024u);
  EXPECT_EQ(std::count(g.switch_tier.begin(), g.switch_tier.end(), 0), 128);
  EXPECT_EQ(std::count(g.switch_tier.begin(), g.switch_tier.end(), 1), 128);
  EXPECT_EQ(std::count(g.switch_tier.begin(), g.switch_tier.end(), 2), 64);
  EXPECT_EQ(g.edges.size(), 3u * 1024u);
  Scheduler s;
  Network n(s, g, QueueSpec{}, 1);
  EXPECT_EQ(n.graph().max_hops, 6u);  // host-ToR-agg-core-agg-ToR-host
}

TEST(Ecmp, EntropySpreadsOverUplinksAndIsStable) {
  const LinkSpec l{};
  Scheduler s;
  Network n(s, fat_tree(4, l, l), QueueSpec{}, 42);
  // ToR 0 (switch 0): hosts 0, 1 below; 2 uplinks. Host 0 -> host 15 (pod 3).
  const Switch& tor = n.sw(0);
  ASSERT_EQ(tor.group_for(15).size(), 2u);
  ASSERT_EQ(tor.group_for(1).size(), 1u);  // same ToR: straight down
  std::map<uint32_t, int> hits;
  for (uint16_t e = 49152; e < 49152 + 1000; ++e) hits[tor.select_port(0, 15, e, 4792)]++;
  ASSERT_EQ(hits.size(), 2u);
  for (auto& [port, count] : hits) {
    EXPECT_GT(count, 400) << "port " << port;
    EXPECT_EQ(tor.select_port(0, 15, 50000, 4792), tor.select_port(0, 15, 50000, 4792));
  }
  // An agg switch spreads over its 2 core uplinks too.
  const Switch& agg = n.sw(8);  // first agg of pod 0
  std::map<uint32_t, int> up;
  for (uint16_t e = 49152; e < 49152 + 1000; ++e) up[agg.select_port(0, 15, e, 4792)]++;
  EXPECT_EQ(up.size(), 2u);
  // A different salt (seed) hashes differently.
  Scheduler s2;
  Network n2(s2, fat_tree(4, l, l), QueueSpec{}, 43);
  int differ = 0;
  for (uint16_t e = 49152; e < 49152 + 100; ++e)
    differ += n2.sw(0).select_port(0, 15, e, 4792) != tor.select_port(0, 15, e, 4792) ? 1 : 0;
  EXPECT_GT(differ, 20);
}

void expect_all_complete(const Report& r) {
  EXPECT_EQ(r.flows_completed, r.flows) << r.to_text(false);
  EXPECT_EQ(r.flows_failed, 0u);
  EXPECT_EQ(r.errors, 0u);
  EXPECT_EQ(r.connect_failures, 0u);
  EXPECT_EQ(r.transport_totals.bad_packets, 0u);
  EXPECT_GE(r.completion_us, r.ideal_us);
}

TEST(FatTree16, PermutationCompletesOverManyPaths) {
  Simulation sim(preset("fattree16-perm", TransportKind::kMetaRoce, 1));
  sim.run();
  const Report r = sim.report();
  expect_all_complete(r);
  EXPECT_EQ(r.flows, 16u);
  EXPECT_EQ(r.fault_drops, 0u);
  // Every flow's bytes arrived, and each connection used several distinct
  // entropies that ECMP put on different ToR uplinks.
  uint64_t received = 0;
  for (uint32_t h = 0; h < 16; ++h) {
    for (ConnId c : sim.host(h).connections())
      received += sim.host(h).endpoint().conn_stats(c)->data_bytes_received;
  }
  EXPECT_EQ(received, 16u * 1024 * 1024);
  Network& net = sim.net();
  for (uint32_t h = 0; h < 16; ++h) {
    const FlowState& f = sim.flows().at(h);
    if (f.spec.dst / 2 == h / 2) continue;  // same ToR: one path
    MetaRoceHost& host = sim.host(h);
    const ConnId c = host.connections().at(0);
    std::map<uint32_t, int> uplinks;
    for (size_t p = 0; p < host.endpoint().path_count(c); ++p) {
      PathStats ps;
      ASSERT_TRUE(host.endpoint().path_stats(c, p, ps));
      EXPECT_GT(ps.packets_sent, 0u);
      uplinks[net.sw(h / 2).select_port(h, f.spec.dst, ps.entropy, 4792)]++;
    }
    EXPECT_EQ(uplinks.size(), 2u) << "host " << h;
  }
}

TEST(Warmup, ConnectionsAreEstablishedBeforeTheWorkloadStarts) {
  SimConfig warm = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  SimConfig cold = warm;
  cold.preconnect = false;
  Simulation w(std::move(warm));
  Simulation c(std::move(cold));
  w.run();
  c.run();
  const Report rw = w.report();
  const Report rc = c.report();
  expect_all_complete(rw);
  expect_all_complete(rc);
  // The handshake is one round trip of about 14 us on this fabric; the warm
  // run's flows start after it, so none of them waits for it.
  EXPECT_GT(rw.warmup_us, 5.0);
  EXPECT_EQ(rc.warmup_us, 0.0);
  EXPECT_LT(rw.fct_p50_us + 5.0, rc.fct_p50_us);
  for (uint32_t i = 0; i < w.flows().size(); ++i)
    EXPECT_GE(w.flows().at(i).spec.start.us(), rw.warmup_us);
}

TEST(Warmup, InitialWindowAndConnectionCapFollowTheFabricBdp) {  // spec CC-1, CC-9
  Simulation sim(preset("fattree16-perm", TransportKind::kMetaRoce, 1));
  // 6 hops of 1 us each way plus serialization at 100 Gbit/s: about 14 us,
  // 43 packets of 4 KiB; the cap is one BDP and 11 packets of queue, 1.25
  // BDP here.
  const CcConfig& cc = sim.host(0).endpoint().config().cc;
  EXPECT_GE(cc.initial_cwnd_packets, 40u);
  EXPECT_LE(cc.initial_cwnd_packets, 46u);
  EXPECT_EQ(cc.max_inflight_packets, cc.initial_cwnd_packets + 11);
  EXPECT_EQ(cc.max_inflight_packets, (cc.initial_cwnd_packets * 5 + 3) / 4);
  // At 400G the BDP is 4 times as many packets and the headroom the same 11.
  Simulation fast(preset("rail128-perm", TransportKind::kMetaRoce, 1));
  const CcConfig& fc = fast.host(0).endpoint().config().cc;
  EXPECT_GT(fc.initial_cwnd_packets, 2 * cc.initial_cwnd_packets);
  EXPECT_EQ(fc.max_inflight_packets, fc.initial_cwnd_packets + 11);
  // inflight_cap_bdp alone (inflight_cap_packets 0) is the rule before stop 20.
  SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  c.inflight_cap_bdp = 1.5;
  c.inflight_cap_packets = 0;
  Simulation old(std::move(c));
  EXPECT_EQ(old.host(0).endpoint().config().cc.max_inflight_packets,
            (cc.initial_cwnd_packets * 3 + 1) / 2);
}

TEST(FatTree16, SprayWithoutCcCompletes) {
  expect_all_complete(run_preset("fattree16-perm", 1, TransportKind::kSprayNoCc));
}

TEST(FatTree16, AllToAllAndIncastComplete) {
  expect_all_complete(run_preset("fattree16-alltoall", 2));
  expect_all_complete(run_preset("incast8-256k", 2));
}

TEST(FatTree16, RingAllReduceRunsStepByStep) {
  Simulation sim(preset("fattree16-allreduce", TransportKind::kMetaRoce, 1));
  sim.run();
  const Report r = sim.report();
  expect_all_complete(r);
  EXPECT_EQ(r.flows, 16u * 30u);
  // Step k of host i starts only after step k-1 of host i-1 was delivered to
  // it (the WRITE_IMM's receive completion), which comes before its sender
  // hears the ACK.
  uint32_t early = 0;
  for (uint32_t k = 0; k < 30; ++k) {
    for (uint32_t i = 0; i < 16; ++i) {
      const FlowState& f = sim.flows().at(k * 16 + i);
      ASSERT_TRUE(f.delivered != SimTime::never());
      EXPECT_LE(f.delivered, f.finish);
      if (sim.flows().has_dependents(k * 16 + i)) early += f.delivered < f.finish;
      if (k == 0) continue;
      EXPECT_GE(f.spec.start, sim.flows().at((k - 1) * 16 + (i + 15) % 16).delivered);
      EXPECT_GE(f.spec.start, sim.flows().at((k - 1) * 16 + i).delivered);
    }
  }
  EXPECT_EQ(early, 16u * 29u);  // from the receiver, not the fallback (the last step has no
                                // dependents, so it does not signal)
  EXPECT_EQ(r.errors, 0u);
}

TEST(FatTree16, BaselineRingsStartOnDelivery) {
  for (TransportKind t : {TransportKind::kRoceV2, TransportKind::kIrn}) {
    Simulation sim(preset("fattree16-allreduce", t, 1));
    sim.run();
    expect_all_complete(sim.report());
    for (uint32_t f = 0; f < 16u * 30u; ++f) {
      const FlowState& s = sim.flows().at(f);
      EXPECT_LT(s.delivered, s.finish) << transport_name(t) << " flow " << f;
      if (f >= 16) {
        EXPECT_GE(s.spec.start, sim.flows().at(f - 16 - f % 16 + (f + 15) % 16).delivered);
      }
    }
  }
}

TEST(Failures, LinkDownMidRunFlowsStillComplete) {
  const Report r = run_preset("fattree16-perm-linkdown", 1);
  expect_all_complete(r);
  EXPECT_GT(r.fault_drops, 0u);
  EXPECT_GT(r.transport_totals.retransmissions, 0u);
}

TEST(Failures, GrayDropAndDegradedLinkFlowsStillComplete) {
  const Report r = run_preset("fattree16-perm-gray", 1);
  expect_all_complete(r);
  EXPECT_GT(r.fault_drops, 0u);
}

TEST(Failures, LinkDownAndUpAgain) {
  SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 5);
  for (uint32_t j = 0; j < 2; ++j) {
    c.faults.push_back(
        {SimTime::from_us(10), FaultSpec::Kind::kLinkDown, fat_tree_agg_core_edge(4, 0, j)});
    c.faults.push_back(
        {SimTime::from_us(300), FaultSpec::Kind::kLinkUp, fat_tree_agg_core_edge(4, 0, j)});
  }
  Simulation sim(std::move(c));
  sim.run();
  expect_all_complete(sim.report());
}

// Routing convergence (SimConfig::reroute_after): groups are recomputed over
// the links that are up, and a link that comes back rejoins them.
TEST(Routing, RerouteLeavesDownLinksOutOfEveryGroup) {
  const LinkSpec l{};
  Scheduler s;
  Network n(s, fat_tree(4, l, l), QueueSpec{}, 42);
  const uint32_t e = fat_tree_tor_agg_edge(4, 0, 0);  // ToR 0 - its first agg
  const uint32_t up_port = n.edge_port(e, false).index;
  ASSERT_EQ(n.sw(0).group_for(15).size(), 2u);
  const uint32_t hops = n.graph().max_hops;
  n.set_link_up(e, false, SimTime{0});
  ASSERT_EQ(n.sw(0).group_for(15).size(), 2u) << "no route changes before convergence";
  n.reroute();
  for (uint32_t sw = 0; sw < n.num_switches(); ++sw)
    for (uint32_t dst = 0; dst < 16; ++dst)
      for (const uint16_t port : n.sw(sw).group_for(dst))
        EXPECT_TRUE(n.sw(sw).ports[port]->up()) << "switch " << sw << " to host " << dst;
  const auto g = n.sw(0).group_for(15);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_NE(g[0], up_port);
  EXPECT_EQ(n.graph().max_hops, hops);  // the ideal's hop count is the fabric's
  n.set_link_up(e, true, SimTime{0});
  n.reroute();
  EXPECT_EQ(n.sw(0).group_for(15).size(), 2u);
}

// A single-path baseline whose flow hashes onto a dead link cannot finish
// until routing steers it away; with convergence after 100 us every flow does.
TEST(Routing, SinglePathFlowsFinishOnceRoutesConverge) {
  SimConfig c = preset("fattree16-perm-linkdown", TransportKind::kRoceV2, 1);
  c.time_limit = SimTime::from_ms(5);
  SimConfig converging = c;
  converging.reroute_after = SimTime::from_us(100);
  Simulation stuck(std::move(c));
  stuck.run();
  EXPECT_LT(stuck.report().flows_completed, stuck.report().flows);
  Simulation sim(std::move(converging));
  sim.run();
  expect_all_complete(sim.report());
}

// Counts the packets a link carries toward a host that are not for it.
class StrayCounter final : public PacketTap {
 public:
  explicit StrayCounter(uint32_t host) : host_(host) {}
  void on_transmit(const Packet& p, const Port&, SimTime, SimTime) override {
    if (p.dst != host_) ++strays;
  }
  uint64_t strays = 0;

 private:
  uint32_t host_;
};

// The direction of host h's link that delivers to it.
Port& toward_host(Network& net, uint32_t h) {
  const uint32_t e = net.host_port(h).edge;
  return &net.edge_port(e, false) == &net.host_port(h) ? net.edge_port(e, true)
                                                       : net.edge_port(e, false);
}

SimConfig lone_flow(TransportKind t, uint64_t bytes);
uint32_t host_edge(const SimConfig& c, uint32_t host);

// Host 3's only link goes down and routes converge: no switch has a route to
// host 3, so its packets are dropped at the first switch and counted. They
// went out of port 0, down to host 0, which took them: rocev2 and irn, whose
// receiver state is kept per flow, acknowledged their own WRITE and reported
// a flow to a cut-off host completed, and metaroce's losses were counted
// nowhere.
TEST(Routing, UnreachableHostAfterRerouteDropsAndCounts) {
  for (TransportKind t : {TransportKind::kRoceV2, TransportKind::kIrn, TransportKind::kMetaRoce}) {
    SCOPED_TRACE(transport_name(t));
    SimConfig c = lone_flow(t, 1 << 20);
    c.flows[0].dst = 3;
    c.reroute_after = SimTime::from_us(1);
    c.faults.push_back({SimTime{0}, FaultSpec::Kind::kLinkDown, host_edge(c, 3)});
    c.time_limit = SimTime::from_ms(2);
    Simulation sim(std::move(c));
    StrayCounter host0(0);
    toward_host(sim.net(), 0).tap = &host0;
    sim.run();
    const Report r = sim.report();
    EXPECT_EQ(r.flows_completed, 0u);
    EXPECT_EQ(r.delivered_bytes, 0u);
    EXPECT_GT(r.no_route_drops, 0u);
    EXPECT_EQ(host0.strays, 0u);
    EXPECT_NE(r.to_text(false).find("no route: " + std::to_string(r.no_route_drops) + " packets"),
              std::string::npos);
    EXPECT_NE(r.to_json(false).find("\"no_route_drops\": " + std::to_string(r.no_route_drops)),
              std::string::npos);
  }
}

// Hosts do not forward. Host 0's only link goes to host 1; a flow from host
// 0 to host 2 (behind a switch) reaches host 1, which drops and counts it
// instead of acting as the flow's receiver (rocev2 and irn acknowledged it,
// and the flow completed with no byte at host 2).
TEST(Routing, AHostDropsAndCountsPacketsForAnotherHost) {
  const LinkSpec l{};
  TopoGraph g;
  g.name = "stray";
  g.num_hosts = 3;
  g.num_switches = 1;
  g.switch_tier = {0};
  g.edges = {{0, 1, l}, {2, 3, l}};
  for (TransportKind t : {TransportKind::kRoceV2, TransportKind::kIrn, TransportKind::kMetaRoce}) {
    SCOPED_TRACE(transport_name(t));
    SimConfig c = lone_flow(t, 64 * 1024);
    c.topo = g;
    c.flows[0].dst = 2;
    Simulation sim(std::move(c));
    sim.run();
    EXPECT_EQ(sim.report().flows_completed, 0u);
    EXPECT_GT(sim.report().no_route_drops, 0u);
  }
}

// ------------------------------------------------------------------ report

// One flow alone on an idle k=4 fat-tree (100 Gbit/s, 1 us per link), host 0
// to host 15 in another pod: nothing competes with it, so it runs at line rate.
SimConfig lone_flow(TransportKind t, uint64_t bytes) {
  const LinkSpec l{};
  SimConfig c;
  c.name = "lone";
  c.topo = fat_tree(4, l, l);
  c.flows = {FlowSpec{0, 15, bytes, SimTime{0}, {UINT32_MAX, UINT32_MAX}}};
  c.transport = t;
  c.time_limit = SimTime::from_ms(50);
  return c;
}

// goodput_gbps = payload delivered / completion time. A lone flow's is the
// line rate times the payload's share of each frame (MetaRoCE: 4096 of
// 4096 + 48 header + 66 framing bytes; RoCEv2: BTH and ICRC, 16), less
// the one round trip (14 us) the completion time adds to 1.4 ms of data.
TEST(Report, GoodputOfALoneFlowIsLineRateTimesThePayloadShare) {
  constexpr uint64_t kBytes = 16ull << 20;
  for (const auto& [t, headers] :
       {std::pair{TransportKind::kMetaRoce, 48.0}, std::pair{TransportKind::kRoceV2, 16.0}}) {
    Simulation sim(lone_flow(t, kBytes));
    sim.run();
    const Report r = sim.report();
    expect_all_complete(r);
    EXPECT_EQ(r.delivered_bytes, kBytes) << r.transport;
    EXPECT_NEAR(r.goodput_gbps, static_cast<double>(kBytes) * 8 / (r.completion_us * 1e3), 1e-9);
    const double share = 100.0 * 4096 / (4096 + headers + kDefaultWireOverhead);
    EXPECT_LT(r.goodput_gbps, share) << r.transport;
    EXPECT_GT(r.goodput_gbps, 0.98 * share) << r.transport;
    EXPECT_NE(r.to_json(false).find("\"goodput_gbps\": "), std::string::npos);
    EXPECT_NE(r.to_text(false).find("goodput: "), std::string::npos);
  }
}

// ------------------------------------------------------------------ mtu

// --set mtu reaches every transport: at 2048 bytes a permutation takes about
// twice the data packets it takes at 4096 (exactly twice without losses), and
// still completes; a lone flow's goodput falls with the larger share of
// headers and framing in each frame (2048 of 2048 + 114 bytes for MetaRoCE).
TEST(Mtu, HalfTheMtuSendsTwiceTheDataPacketsAndStillCompletes) {
  for (const TransportKind t :
       {TransportKind::kMetaRoce, TransportKind::kRoceV2, TransportKind::kIrn}) {
    uint64_t packets[2] = {};
    double goodput[2] = {};
    for (int half = 0; half < 2; ++half) {
      SimConfig c = preset("fattree16-perm", t, 1);
      SimConfig lone = lone_flow(t, 4ull << 20);
      std::string err;
      const std::string set = half ? "mtu=2048" : "mtu=4096";
      ASSERT_TRUE(apply_setting(c, set, err)) << err;
      ASSERT_TRUE(apply_setting(lone, set, err)) << err;
      Simulation sim(std::move(c));
      sim.run();
      const Report r = sim.report();
      expect_all_complete(r);
      packets[half] = r.transport_totals.data_packets_sent;
      Simulation one(std::move(lone));
      one.run();
      expect_all_complete(one.report());
      goodput[half] = one.report().goodput_gbps;
    }
    const double ratio = static_cast<double>(packets[1]) / static_cast<double>(packets[0]);
    EXPECT_GT(ratio, 1.8) << transport_name(t) << " " << packets[0] << " -> " << packets[1];
    EXPECT_LT(ratio, 2.2) << transport_name(t) << " " << packets[0] << " -> " << packets[1];
    EXPECT_LT(goodput[1], goodput[0] * 0.985) << transport_name(t);
    EXPECT_GT(goodput[1], goodput[0] * 0.9) << transport_name(t);
  }
}

// ------------------------------------------------------------------ trimming

std::unique_ptr<Simulation> run_incast(bool trim, TransportKind t) {
  SimConfig c = preset("incast8-256k", t, 1);
  c.queue.trim = trim;
  auto sim = std::make_unique<Simulation>(std::move(c));
  sim->run();
  return sim;
}

// TRIM-1..4 end to end: the incast's overflow is cut to headers rather than
// lost, the receivers echo it, the senders resend it, and every byte arrives
// exactly once.
TEST(Trimming, IncastTrimsInsteadOfDropping) {
  const Report plain = run_incast(false, TransportKind::kMetaRoce)->report();
  const auto sim = run_incast(true, TransportKind::kMetaRoce);
  const Report r = sim->report();
  expect_all_complete(r);
  EXPECT_EQ(plain.trimmed, 0u);
  EXPECT_GT(r.trimmed, 0u);
  EXPECT_LT(r.drops * 10, plain.drops) << r.to_text(false);
  EXPECT_LT(r.transport_totals.timeouts, plain.transport_totals.timeouts);
  uint64_t sent = 0, received = 0, trimmed_received = 0, trims_echoed = 0;
  for (uint32_t i = 0; i < sim->flows().size(); ++i) sent += sim->flows().at(i).spec.bytes;
  for (uint32_t h = 0; h < sim->net().num_hosts(); ++h) {
    for (ConnId c : sim->host(h).connections()) {
      const ConnStats& s = *sim->host(h).endpoint().conn_stats(c);
      received += s.data_bytes_received;
      trimmed_received += s.trimmed_received;
      trims_echoed += s.trims_echoed;
    }
  }
  EXPECT_EQ(received, sent);  // accepted bytes: none twice, none missing
  EXPECT_GT(trimmed_received, 0u);
  EXPECT_LE(trimmed_received, r.trimmed);  // each cut packet arrives at most once
  EXPECT_GT(trims_echoed, 0u);
}

// The ToR port toward host 1 of a k=4 fat-tree, with a sink at host 1 that
// records what arrives, in order: for tests of one switch port's queueing.
struct ArrivalRecord {
  uint32_t src;
  bool trimmed, control_class;
  SimTime at;
};
struct OnePortBench {
  struct Sink final : Node {
    PacketPool* pool = nullptr;
    std::vector<ArrivalRecord> got;
    void receive(Packet* p, uint32_t, SimTime now) override {
      got.push_back({p->src, p->trimmed, p->dscp == kControlDscp, now});
      pool->release(p);
    }
  };
  explicit OnePortBench(const QueueSpec& q)
      : net(sched, fat_tree(4, LinkSpec{}, LinkSpec{}), q, 42), down(net.edge_port(1, true)) {
    sink.pool = &net.pool();
    net.attach_host(1, sink);  // edge 1: host 1's link; reverse: toward the host
  }
  Scheduler sched;
  Network net;
  Sink sink;
  Port& down;
};

// TRIM-1's header queue (QueueSpec::trim_priority): a packet trimmed at a
// full port reaches the next hop ahead of the data queued before it (though
// not of the one on the wire: no preemption); without the header lane it
// waits behind them. Five data packets fill the port's buffer, a sixth is
// trimmed.
TEST(Trimming, TrimmedHeadersOvertakeQueuedData) {
  for (const bool priority : {true, false}) {
    constexpr uint32_t kWire = 4096 + 48 + kDefaultWireOverhead;
    QueueSpec q;
    q.buffer_bytes = 5 * kWire;
    q.trim = true;
    q.trim_priority = priority;
    OnePortBench b(q);
    ASSERT_EQ(b.down.pipe.to, &b.sink);
    for (uint32_t seq = 0; seq < 6; ++seq) {
      Packet* p = b.net.pool().alloc();
      p->src = seq;
      p->dst = 1;
      p->dport = wire::kDefaultUdpPort;
      p->header_len = static_cast<uint16_t>(wire::header_size(wire::Opcode::kWrite));
      p->hdr[1] = static_cast<uint8_t>(wire::Opcode::kWrite);
      p->payload_len = 4096;
      p->trailer_len = 4;
      p->wire_bytes = kWire;
      p->ecn = 2;
      b.down.enqueue(p, SimTime{0});
    }
    while (b.sched.step()) {
    }
    const auto& got = b.sink.got;
    ASSERT_EQ(got.size(), 6u) << "priority " << priority;
    const auto trimmed =
        std::find_if(got.begin(), got.end(), [](const ArrivalRecord& g) { return g.trimmed; });
    ASSERT_NE(trimmed, got.end());
    EXPECT_EQ(trimmed->src, 5u);
    // With the lane: right behind the packet that was on the wire when it came.
    EXPECT_EQ(trimmed - got.begin(), priority ? 1 : 5) << "priority " << priority;
    EXPECT_EQ(b.down.stats().trimmed, 1u);
  }
}

TEST(Trimming, BaselinePacketsAreNeverTrimmed) {
  const Report plain = run_incast(false, TransportKind::kIrn)->report();
  const Report r = run_incast(true, TransportKind::kIrn)->report();
  EXPECT_GT(r.drops, 0u);
  EXPECT_EQ(r.trimmed, 0u);
  EXPECT_EQ(r.drops, plain.drops);
}

// ------------------------------------------------------------------ baselines

TEST(Baselines, RoceV2WithPfcCompletesLosslessly) {
  const Report r = run_preset("fattree16-perm", 1, TransportKind::kRoceV2);
  expect_all_complete(r);
  EXPECT_EQ(r.transport, "rocev2");
  EXPECT_EQ(r.drops, 0u) << r.to_text(false);  // PFC: lossless
  EXPECT_EQ(r.fault_drops, 0u);
  EXPECT_EQ(r.transport_totals.retransmissions, 0u);
  EXPECT_GT(r.pfc_pause_us, 0.0);  // the permutation collides on ECMP paths
  EXPECT_GT(r.ecn_marks, 0u);      // and DCQCN sees marks
}

TEST(Baselines, IrnCompletesAndRecoversSelectively) {
  const Report r = run_preset("fattree16-perm", 1, TransportKind::kIrn);
  expect_all_complete(r);
  EXPECT_EQ(r.transport, "irn");
  EXPECT_EQ(r.pfc_pause_us, 0.0);
  ASSERT_GT(r.drops, 0u) << "the premise: losses to recover";
  // The premise: every loss is found by a NACK. A timeout resends all that
  // is unSACKed, which would be selective too but not one for one.
  ASSERT_EQ(r.transport_totals.timeouts, 0u) << r.to_text(false);
  // Every drop is resent, and only the drops, each once: go-back-N resends
  // from the hole on and so sends more.
  EXPECT_EQ(r.transport_totals.retransmissions, r.drops) << r.to_text(false);
}

// A host behind a filter: it gets every packet but those `drop` picks, and
// its port's idle calls. Packets are read as the RoCEv2 headers they stand
// for (RcShared::roce_headers), as a capture shows them.
class LossyHost final : public Node {
 public:
  LossyHost(Network& net, Node& inner, std::function<bool(const uint8_t* roce)> drop)
      : net_(net), inner_(inner), drop_(std::move(drop)) {}
  void receive(Packet* p, uint32_t in_port, SimTime now) override {
    uint8_t h[RcShared::kMaxRoceHeader];
    (void)shared->roce_headers(*p, h);
    if (drop_(h)) {
      net_.pool().release(p);
      return;
    }
    inner_.receive(p, in_port, now);
    if (after) after(h);
  }
  void port_idle(uint32_t port, SimTime now) override { inner_.port_idle(port, now); }
  const RcShared* shared = nullptr;
  std::function<void(const uint8_t* roce)> after;  // once the host has taken the packet

 private:
  Network& net_;
  Node& inner_;
  std::function<bool(const uint8_t*)> drop_;
};

uint32_t roce_psn(const uint8_t* h) { return (uint32_t{h[9]} << 16) | (h[10] << 8) | h[11]; }
bool roce_data(const uint8_t* h) { return h[0] != 0x11 && h[0] != 0x81; }  // WRITE First..Only
bool roce_ack(const uint8_t* h) { return h[0] == 0x11 && h[12] == 0x1f; }
bool roce_nack(const uint8_t* h) { return h[0] == 0x11 && h[12] == 0x60; }

struct IrnEpisodes {
  uint32_t recover = 0;              // the first episode's recovery point
  bool recovery_after_nack = false;  // the sender's, once it took the first NACK (R + 1, ...)
  uint64_t timeouts = 0, retransmissions = 0;
  SimTime finish = SimTime::never();
};

// One IRN flow of `npkts` full packets, host 0 -> 1 through one switch:
// PSN 2's first copy is lost (the NACK for 3 opens an episode, recover = R,
// the PSN next then); R + 1's first copy is lost; the ACKs that carry the
// cumulative ACK to R and R + 1 are lost. The first word the sender gets of
// the cumulative ACK passing R is then the NACK (R + 1, R + 2): it ends the
// episode and reports R + 1 missing, a loss of the next one.
IrnEpisodes irn_episode_ended_by_a_nack(uint32_t npkts) {
  constexpr uint32_t kMtu = 4096;
  Scheduler sched;
  const LinkSpec link{};
  Network net(sched, leaf_spine(1, 2, 1, link, link), QueueSpec{}, 1);
  FlowTable flows(sched,
                  {FlowSpec{0, 1, uint64_t{npkts} * kMtu, SimTime{0}, {UINT32_MAX, UINT32_MAX}}});
  RcParams prm;
  prm.go_back_n = false;
  prm.rto_low_packets = 3;
  prm.dcqcn = false;
  RcShared sh(net, flows, prm);
  RcHost tx(sh, 0, link.rate_mbps), rx(sh, 1, link.rate_mbps);
  sh.hosts = {&tx, &rx};
  IrnEpisodes out;
  uint32_t copies_of_2 = 0, r = 0;  // r: the receiver's cumulative ACK after PSN 2's resend
  bool lost_r1 = false;
  LossyHost rx_in(net, rx, [&](const uint8_t* h) {
    if (!roce_data(h)) return false;
    const uint32_t psn = roce_psn(h);
    if (psn == 2) return copies_of_2++ == 0;
    if (r != 0 && psn == r + 1 && !lost_r1) return lost_r1 = true;
    return false;
  });
  rx_in.after = [&](const uint8_t* h) {
    if (roce_data(h) && roce_psn(h) == 2 && copies_of_2 == 2) r = sh.rx.at(0).expected;
  };
  LossyHost tx_in(net, tx, [&](const uint8_t* h) {
    // An ACK names the last PSN in order: cumulative ACK R or R + 1.
    return r != 0 && roce_ack(h) && (roce_psn(h) + 1 == r || roce_psn(h) + 1 == r + 1);
  });
  bool nacked = false;  // the first NACK (R + 1, ...) has come
  tx_in.after = [&](const uint8_t* h) {
    if (!roce_nack(h) || r == 0 || roce_psn(h) != r + 1 || nacked) return;
    nacked = true;
    RcQpState q;
    if (tx.qp_state(0, q)) out.recovery_after_nack = q.recovery;
  };
  rx_in.shared = tx_in.shared = &sh;
  net.attach_host(0, tx_in);
  net.attach_host(1, rx_in);
  for (auto [host, in] : {std::pair<RcHost*, LossyHost*>{&tx, &tx_in}, {&rx, &rx_in}}) {
    host->id = in->id;
    host->ports = in->ports;
  }
  tx.start_flow(0, SimTime{0});
  sched.run(SimTime::from_ms(10));
  out.recover = r;
  out.timeouts = tx.totals().timeouts;
  out.retransmissions = tx.totals().retransmissions;
  out.finish = flows.at(0).finish;
  return out;
}

// IRN (Mittal et al., SIGCOMM 2018): a recovery episode ends when the
// cumulative ACK passes the recovery point; a NACK enters recovery. A NACK
// that carries a cumulative ACK past the point does both: the episode ends
// and the NACK's hole (a PSN sent after it began) opens the next. The
// sender checked the end after the NACK, so the NACK ended the episode it
// had just kept, and the hole waited for another NACK, or, when the flow had
// nothing more in flight to draw one, for RTO_low (100 us).
TEST(Baselines, IrnNackThatEndsAnEpisodeOpensTheNext) {
  const IrnEpisodes long_flow = irn_episode_ended_by_a_nack(200);
  ASSERT_GT(long_flow.recover, 3u);  // the first episode had packets in flight past the hole
  ASSERT_NE(long_flow.finish, SimTime::never());
  EXPECT_TRUE(long_flow.recovery_after_nack);
  EXPECT_EQ(long_flow.timeouts, 0u);
  // The same run, the flow ending at R + 2: the NACK (R + 1, R + 2) is the
  // last word from the receiver. R + 1 is resent at once, not after RTO_low.
  const IrnEpisodes tail = irn_episode_ended_by_a_nack(long_flow.recover + 3);
  EXPECT_EQ(tail.recover, long_flow.recover);
  EXPECT_TRUE(tail.recovery_after_nack);
  EXPECT_EQ(tail.timeouts, 0u);
  EXPECT_EQ(tail.retransmissions, 2u);  // PSN 2 and R + 1, once each
  EXPECT_LT(tail.finish, SimTime::from_us(50)) << tail.finish.us();
}

// IRN's loss-recovery state spans the PSNs in flight, which its window caps
// at the BDP: a flow of the largest message, 2^31 bytes (524,288 packets;
// 1e12 bytes, 244 M packets, before stop 51 refused flows above it), losing
// 2 % of its packets holds a few hundred bytes of bitmaps, sender and
// receiver together, where one byte a packet of the flow, allocated at its
// start, took 244 MB of the 1e12-byte flow.
TEST(Baselines, IrnRecoveryStateIsBoundedByTheWindowNotTheFlow) {
  SimConfig c = lone_flow(TransportKind::kIrn, RcShared::kMaxMessageBytes);
  FaultSpec gray{SimTime{0}, FaultSpec::Kind::kGrayDrop, 15};  // edge 15: host 15's link
  gray.drop = 0.02;
  c.faults.push_back(gray);
  c.time_limit = SimTime::from_us(1000);
  Simulation sim(std::move(c));
  const auto& host = dynamic_cast<const RcHost&>(sim.any_host(0));
  size_t most = 0;
  const SimTime origin = sim.sched().now();
  for (int i = 1; i <= 100; ++i) {
    sim.run(origin + SimTime::from_us(10 * static_cast<uint64_t>(i)));
    most = std::max(most, host.recovery_state_bytes(0));
  }
  const Report r = sim.report();
  EXPECT_GT(r.transport_totals.retransmissions, 10u)
      << r.to_text(false);  // SACKs came: the bitmaps were used
  EXPECT_GT(r.delivered_bytes, 1u << 20);
  EXPECT_GT(most, 0u);
  EXPECT_LE(most, 1024u) << r.to_text(false);
}

TEST(Baselines, PsnWindowKeepsTheMarksAboveItsBaseAsItGrowsAndSlides) {
  PsnWindow w;
  EXPECT_FALSE(w.contains(0));
  EXPECT_EQ(w.bytes(), 0u);
  w.insert(3);
  w.insert(70);  // grows to two words; 3 stays
  EXPECT_TRUE(w.contains(3));
  EXPECT_TRUE(w.contains(70));
  EXPECT_FALSE(w.contains(4));
  EXPECT_FALSE(w.contains(1000));
  w.advance(5);  // 3 is below the base: counted in
  EXPECT_EQ(w.base(), 5u);
  EXPECT_TRUE(w.contains(3));
  EXPECT_FALSE(w.contains(5));
  const size_t two = w.bytes();
  w.insert(130);  // 130 - 5 < 128: the ring wraps instead of growing
  EXPECT_EQ(w.bytes(), two);
  EXPECT_TRUE(w.contains(130));
  EXPECT_TRUE(w.contains(70));
  w.advance(71);
  EXPECT_TRUE(w.contains(130));
  EXPECT_FALSE(w.contains(70 + 128));  // 70's slot, cleared
  w.insert(71 + 500);                  // far ahead: grows, 130 kept
  EXPECT_TRUE(w.contains(130));
  EXPECT_TRUE(w.contains(571));
  EXPECT_FALSE(w.contains(131));
  w.advance(10'000);  // past all of it: emptied
  EXPECT_FALSE(w.contains(10'000 + 571 % 512));
  w.release();
  EXPECT_EQ(w.bytes(), 0u);
}

TEST(Baselines, OnePathPerConnection) {
  // Every data packet of a QP carries the same UDP source port: ECMP pins
  // the connection to one path.
  const uint16_t e = RcHost::entropy_of(5);
  EXPECT_EQ(e, RcHost::entropy_of(5));
  EXPECT_GE(e, 49152u);
}

// Flows that ECMP puts on the busiest link of a single-path run: each QP's
// route walked hop by hop with the switches' own hash.
uint32_t most_flows_on_one_link(Network& net, const std::vector<FlowSpec>& flows) {
  std::map<const Port*, uint32_t> load;
  uint32_t most = 0;
  for (uint32_t f = 0; f < flows.size(); ++f) {
    Port* p = &net.host_port(flows[f].src);
    for (;;) {
      most = std::max(most, ++load[p]);
      auto* sw = dynamic_cast<Switch*>(p->pipe.to);
      if (sw == nullptr) break;
      p = sw->ports[sw->select_port(flows[f].src, flows[f].dst, RcHost::entropy_of(f), 4791)];
    }
  }
  return most;
}

// The simulator's fidelity for single-path ECMP: with no rate control and
// buffers that never drop, the run takes as long as the busiest link needs
// to carry its flows one after another, which is what hash collisions cost
// any one-path transport (the issue's "about 5x at the tail" at k=16).
TEST(Baselines, SinglePathRunTakesWhatItsBusiestLinkCarries) {
  for (uint64_t seed : {1, 2, 3}) {
    SimConfig c = preset("fattree16-perm", TransportKind::kIrn, seed);
    c.rc.dcqcn = false;
    c.queue.buffer_bytes = uint64_t{1} << 40;
    Simulation sim(std::move(c));
    const uint32_t most = most_flows_on_one_link(sim.net(), sim.config().flows);
    sim.run();
    const Report r = sim.report();
    expect_all_complete(r);
    EXPECT_EQ(r.drops, 0u);
    EXPECT_GE(most, 2u) << "seed " << seed;  // 16 flows on 2-way ECMP collide
    EXPECT_GE(r.completion_us, most * r.ideal_us) << "seed " << seed;
    EXPECT_LE(r.completion_us, most * r.ideal_us * 1.35) << "seed " << seed;
    std::printf("seed %llu: busiest link %u flows, completion %.1f us = %.2f x ideal\n",
                static_cast<unsigned long long>(seed), most, r.completion_us,
                r.completion_us / r.ideal_us);
  }
}

TEST(Baselines, GoBackNRecoversFromGrayLoss) {
  // 5 % gray loss on one link: the sequence NAK (and the timeout for a lost
  // tail) recover; IRN retransmits only the holes.
  const Report roce = run_preset("fattree16-perm-gray", 1, TransportKind::kRoceV2);
  expect_all_complete(roce);
  EXPECT_EQ(roce.drops, 0u);
  const Report irn = run_preset("fattree16-perm-gray", 1, TransportKind::kIrn);
  expect_all_complete(irn);
  if (roce.fault_drops > 0) {
    EXPECT_GT(roce.transport_totals.retransmissions, roce.fault_drops);
  }
}

TEST(Baselines, IncastCompletes) {
  const Report roce = run_preset("incast8-256k", 1, TransportKind::kRoceV2);
  expect_all_complete(roce);
  EXPECT_EQ(roce.drops, 0u);
  EXPECT_GT(roce.pfc_pause_us, 0.0);
  expect_all_complete(run_preset("incast8-256k", 1, TransportKind::kIrn));
}

// ENC-6 in the simulator: ACKs in the data class (the engine's control_dscp
// 0) and a fabric with no priority class (queue.priority_dscp 64, host NICs
// included) are the same run, byte for byte; with both left at their
// defaults ACKs overtake queued data and the run differs.
TEST(PriorityClass, AcksInTheDataClassRunAsOnAFabricWithoutTheClass) {
  const auto run = [](uint8_t control_dscp, uint8_t priority_dscp) {
    SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 5);
    c.endpoint.control_dscp = control_dscp;
    c.queue.priority_dscp = priority_dscp;
    Simulation sim(std::move(c));
    sim.run();
    expect_all_complete(sim.report());
    return sim.report().to_json(false);
  };
  const std::string data_class = run(0, kControlDscp);
  EXPECT_EQ(data_class, run(kDefaultControlDscp, kNoPriorityDscp));
  EXPECT_NE(data_class, run(kDefaultControlDscp, kControlDscp));
}

TEST(Determinism, EachTransportSameSeedSameBytes) {
  for (TransportKind t : {TransportKind::kMetaRoce, TransportKind::kSprayNoCc,
                          TransportKind::kRoceV2, TransportKind::kIrn}) {
    const std::string a = run_preset("fattree16-perm", 9, t).to_json(false);
    const std::string b = run_preset("fattree16-perm", 9, t).to_json(false);
    EXPECT_EQ(a, b) << transport_name(t);
  }
}

TEST(Determinism, BaselinesInterleavedInOneProcess) {
  const Report alone_a = run_preset("fattree16-perm-gray", 3, TransportKind::kRoceV2);
  const Report alone_b = run_preset("fattree16-perm-gray", 4, TransportKind::kIrn);
  Simulation a(preset("fattree16-perm-gray", TransportKind::kRoceV2, 3));
  Simulation b(preset("fattree16-perm-gray", TransportKind::kIrn, 4));
  for (uint64_t us = 5; !(a.finished() && b.finished()) && us < 100'000; us += 5) {
    a.run(SimTime::from_us(us));
    b.run(SimTime::from_us(us));
  }
  EXPECT_EQ(a.report().to_json(false), alone_a.to_json(false));
  EXPECT_EQ(b.report().to_json(false), alone_b.to_json(false));
}

TEST(Pfc, ASlowLinkPausesTheSenderInsteadOfDropping) {
  // Two hosts on one ToR (k=4 fat-tree, hosts 0 and 1), tiny buffers: host 0
  // blasting at host 1 through a 10G ToR port fills the ingress and pauses
  // host 0's NIC; nothing is dropped. (When a PAUSE acts, and at which
  // thresholds: SwitchPausesAboveXoffAndResumesAtXonOneLinkDelayLater.)
  SimConfig c = preset("fattree16-perm", TransportKind::kRoceV2, 1);
  c.flows = {FlowSpec{0, 1, 512 * 1024, SimTime{0}}};
  FaultSpec slow{SimTime{0}, FaultSpec::Kind::kRate, 1};  // edge 1 = host 1's link
  slow.rate_mbps = 10'000;
  c.faults.push_back(slow);
  c.queue.buffer_bytes = 60'000;
  Simulation sim(std::move(c));
  sim.run();
  const Report r = sim.report();
  expect_all_complete(r);
  EXPECT_EQ(r.drops, 0u);
  EXPECT_GT(r.pfc_pauses, 0u);
  EXPECT_GT(r.pfc_pause_us, 100.0);  // most of the ~420 us transfer
}

// pfc_pause_us is the time ports spent paused: a pause that ended counts to
// its RESUME, one still on when a run stops at its time limit counts to the
// limit. It counted the open one to the last event, which came before (here
// the flow's last packet before the pause, at 613.9 us: 213.9 read, of 600).
TEST(Pfc, PauseTimeCountsToTheResumeOrTheEndOfTheRun) {
  SimConfig c = lone_flow(TransportKind::kRoceV2, 1 << 30);
  c.rc.dcqcn = false;  // no DCQCN timers going on while the NIC is paused
  c.time_limit = SimTime::from_us(1000);
  Simulation sim(std::move(c));
  const SimTime origin = sim.sched().now();  // after the warm-up: the workload's time 0
  Port& nic = sim.net().host_port(0);
  nic.pfc_signal(true, origin + SimTime::from_us(100));
  nic.pfc_signal(false, origin + SimTime::from_us(300));
  nic.pfc_signal(true, origin + SimTime::from_us(600));  // never resumed
  sim.run();
  const Report r = sim.report();
  EXPECT_EQ(r.flows_completed, 0u);
  EXPECT_EQ(r.pfc_pauses, 2u) << r.to_text(false);  // no switch port paused
  EXPECT_LT(r.sim_time_us - r.warmup_us, 1000.0);   // the last event came before the limit
  EXPECT_DOUBLE_EQ(r.pfc_pause_us, 200.0 + 400.0);
}

// queue_wait_data_us on a PFC port: a packet that waited in the FIFO
// counts from when it was queued, as on a port without PFC (it read 0: the
// wait was taken from when the FIFO let the packet go). Four packets queued
// at once wait 0, 1, 2 and 3 serialization times either way.
TEST(Pfc, QueueWaitCountsFromWhenThePacketWasQueued) {
  for (const bool pfc : {false, true}) {
    QueueSpec q;
    q.pfc = pfc;
    OnePortBench b(q);
    constexpr uint32_t kWire = 4096;
    for (uint32_t i = 0; i < 4; ++i) {
      Packet* p = b.net.pool().alloc();
      p->src = i;
      p->dst = 1;
      p->wire_bytes = kWire;
      b.down.enqueue(p, SimTime{0});
    }
    while (b.sched.step()) {
    }
    ASSERT_EQ(b.sink.got.size(), 4u) << "pfc " << pfc;
    EXPECT_EQ(b.down.stats().data_packets, 4u) << "pfc " << pfc;
    const SimTime ser = serialization_time(kWire, LinkSpec{}.rate_mbps);
    EXPECT_EQ(b.down.stats().data_wait.ps, 6 * ser.ps) << "pfc " << pfc;
  }
}

// ENC-6: an ACK (the control DSCP) queued behind data overtakes it, though
// not the packet already on the wire; with queue.priority_dscp = 64 it waits
// its turn.
TEST(PriorityClass, ControlDscpOvertakesQueuedData) {
  for (const uint8_t priority : {kControlDscp, kNoPriorityDscp}) {
    QueueSpec q;
    q.priority_dscp = priority;
    OnePortBench b(q);
    for (uint32_t i = 0; i < 6; ++i) {
      Packet* p = b.net.pool().alloc();
      p->src = i;
      p->dst = 1;
      const bool ack = i == 5;
      p->wire_bytes = ack ? 128 : 4096;
      p->dscp = ack ? kControlDscp : 0;
      b.down.enqueue(p, SimTime{0});
    }
    while (b.sched.step()) {
    }
    std::vector<uint32_t> order;
    for (const ArrivalRecord& g : b.sink.got) order.push_back(g.src);
    if (priority == kControlDscp)
      EXPECT_EQ(order, (std::vector<uint32_t>{0, 5, 1, 2, 3, 4}));
    else
      EXPECT_EQ(order, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5}));
  }
}

Packet* one_port_packet(OnePortBench& b, uint32_t src, bool control) {
  Packet* p = b.net.pool().alloc();
  p->src = src;
  p->dst = 1;
  p->wire_bytes = control ? 128 : 4096;
  p->dscp = control ? kControlDscp : 0;
  return p;
}

// PFC as a switch runs it (Switch::receive, pfc_send, pfc_release) at the
// thresholds derived for 175 KB buffers, 100 Gbit/s and 1 us links: XOFF =
// 175,000 - (2 x 12,500 + 2 x 4,200) = 141,600 B, XON = XOFF - 2 x 4,200 =
// 133,200 B. The ToR's ingress from host 0 fills while its port toward host 1
// is paused: PAUSE goes out when the count first exceeds XOFF (not at it) and
// stops host 0's NIC one link delay later, not before; RESUME goes out when the
// count falls to XON or below, and restarts the NIC a link delay later.
TEST(Pfc, SwitchPausesAboveXoffAndResumesAtXonOneLinkDelayLater) {
  QueueSpec q;
  q.pfc = true;
  OnePortBench b(q);
  Switch& tor = b.net.sw(0);
  const uint32_t in = b.net.edge_port(0, true).index;  // the ToR's port toward host 0
  Port& nic = b.net.host_port(0);
  ASSERT_EQ(nic.pipe.to, &tor);
  const SimTime delay = nic.pipe.delay;
  ASSERT_EQ(delay, SimTime::from_us(1));
  b.down.pfc_signal(true, SimTime{0});  // host 1 holds the ToR's port toward it
  b.sched.run(SimTime{0});
  ASSERT_TRUE(b.down.paused());
  auto arrive = [&](uint32_t bytes, SimTime at) {
    Packet* p = one_port_packet(b, 0, false);
    p->wire_bytes = bytes;
    tor.receive(p, in, at);
  };
  const SimTime t0 = SimTime::from_us(1);
  arrive(401, t0);
  for (int i = 0; i < 141; ++i) arrive(1000, t0);
  arrive(199, t0);
  EXPECT_EQ(tor.ingress_bytes(in), 141'600u);  // at XOFF: no PAUSE
  b.sched.run(t0 + delay + delay);
  EXPECT_FALSE(nic.paused());
  const SimTime t1 = b.sched.now();
  arrive(1, t1);  // one byte above
  b.sched.run(t1 + delay - SimTime{1});
  EXPECT_FALSE(nic.paused()) << "PAUSE acted before the link delay";
  b.sched.run(t1 + delay);
  EXPECT_TRUE(nic.paused());
  // Each packet the ToR starts sending gives its bytes back (10 ps a bit):
  // the 401-byte one, then seven of 1000 take the count to 134,200, and the
  // eighth, starting 32,080 + 7 x 80,000 ps after the port resumes, to XON.
  const SimTime t2 = t1 + delay;
  b.down.pfc_signal(false, t2);
  const SimTime resume_sent = t2 + SimTime{32'080 + 7 * 80'000};
  b.sched.run(resume_sent - SimTime{1});
  EXPECT_EQ(tor.ingress_bytes(in), 134'200u);
  b.sched.run(resume_sent);
  EXPECT_EQ(tor.ingress_bytes(in), 133'200u);  // at XON: RESUME
  b.sched.run(resume_sent + delay - SimTime{1});
  EXPECT_TRUE(nic.paused()) << "RESUME acted before the link delay";
  b.sched.run(resume_sent + delay);
  EXPECT_FALSE(nic.paused()) << "no RESUME at XON";
  EXPECT_EQ(nic.stats().pfc_pauses, 1u);
}

// A rate fault: the packets already queued leave at the rate they were
// queued at, so the bytes ahead of a new arrival (what drop-tail and ECN
// read) are theirs, not their time left re-read at the new rate (which put
// a 100G queue at a quarter of its bytes after a cut to 25G).
TEST(RateFault, QueuedBytesAreCountedAtTheRateTheyWereQueuedAt) {
  constexpr uint64_t kPacketPs = 327'680;  // 4096 bytes at 100 Gbit/s
  OnePortBench b(QueueSpec{});
  for (uint32_t i = 0; i < 4; ++i) b.down.enqueue(one_port_packet(b, i, false), SimTime{0});
  EXPECT_EQ(b.down.backlog_bytes(SimTime{0}), 4u * 4096);
  b.down.set_rate(25'000, SimTime{0});
  EXPECT_EQ(b.down.backlog_bytes(SimTime{0}), 4u * 4096);
  EXPECT_EQ(b.down.backlog_bytes(SimTime{kPacketPs}), 3u * 4096);
  b.down.enqueue(one_port_packet(b, 4, false), SimTime{kPacketPs});  // at 25G: 4 x as long
  EXPECT_EQ(b.down.backlog_bytes(SimTime{kPacketPs}), 4u * 4096);
  EXPECT_EQ(b.down.backlog_bytes(SimTime{4 * kPacketPs}), 4096u);
  EXPECT_EQ(b.down.backlog_bytes(SimTime{6 * kPacketPs}), 2048u);
  EXPECT_EQ(b.down.backlog_bytes(SimTime{8 * kPacketPs}), 0u);
  // A second cut while the first stretch drains.
  b.down.enqueue(one_port_packet(b, 5, false), SimTime{8 * kPacketPs});
  b.down.set_rate(50'000, SimTime{9 * kPacketPs});
  b.down.enqueue(one_port_packet(b, 6, false), SimTime{9 * kPacketPs});
  EXPECT_EQ(b.down.backlog_bytes(SimTime{9 * kPacketPs}), 3u * 1024 + 4096);
  while (b.sched.step()) {
  }
  ASSERT_EQ(b.sink.got.size(), 7u);
  EXPECT_EQ(b.sink.got[4].at, SimTime{8 * kPacketPs} + SimTime::from_us(1));
  EXPECT_EQ(b.sink.got[6].at, SimTime{14 * kPacketPs} + SimTime::from_us(1));
}

// max_queue_bytes is the deepest backlog with the arriving packet in it, as
// queues.csv samples it: one data packet at an empty port is its wire
// bytes (it read 0, the bytes ahead of it), a control packet of the
// priority lane its own (that lane never counted), four at once all four,
// with PFC's FIFO as without.
TEST(Queue, MaxQueueBytesCountsTheArrivingPacket) {
  const auto max_after = [](const QueueSpec& q, std::initializer_list<bool> control) {
    OnePortBench b(q);
    uint32_t src = 0;
    for (const bool c : control) b.down.enqueue(one_port_packet(b, src++, c), SimTime{0});
    const uint64_t mx = b.down.stats().max_queue_bytes;
    while (b.sched.step()) {
    }
    return mx;
  };
  EXPECT_EQ(max_after(QueueSpec{}, {false}), 4096u);
  EXPECT_EQ(max_after(QueueSpec{}, {true}), 128u);
  EXPECT_EQ(max_after(QueueSpec{}, {false, false, false, false}), 4u * 4096);
  EXPECT_EQ(max_after(QueueSpec{}, {false, true}), 4096u + 128);
  QueueSpec pfc;
  pfc.pfc = true;
  EXPECT_EQ(max_after(pfc, {false}), 4096u);
  EXPECT_EQ(max_after(pfc, {false, false, false, false}), 4u * 4096);
  // A host's NIC port has no switch queue: never counted.
  OnePortBench b(QueueSpec{});
  Port& nic = b.net.host_port(0);
  nic.enqueue(one_port_packet(b, 0, false), SimTime{0});
  EXPECT_EQ(nic.stats().max_queue_bytes, 0u);
  while (b.sched.step()) {
  }
}

// A link that goes down loses what it held, header lane included: a control
// packet sent once it is back up leaves at once, not after the headers that
// died with the link.
TEST(LinkDown, TheHeaderLaneStartsAfreshWhenTheLinkComesBack) {
  OnePortBench b(QueueSpec{});
  b.down.enqueue(one_port_packet(b, 0, false), SimTime{0});
  b.down.enqueue(one_port_packet(b, 1, false), SimTime{0});
  b.down.enqueue(one_port_packet(b, 2, true), SimTime{0});  // behind packet 0 on the wire
  b.down.set_up(false, SimTime{0});
  b.down.set_up(true, SimTime{0});
  b.down.enqueue(one_port_packet(b, 3, true), SimTime{0});
  while (b.sched.step()) {
  }
  ASSERT_EQ(b.sink.got.size(), 1u);
  EXPECT_EQ(b.sink.got[0].src, 3u);
  EXPECT_EQ(b.sink.got[0].at, SimTime{10'240} + SimTime::from_us(1));  // 128 bytes at 100G
}

// A PFC port with the given priority class, paused at 0; at 1 us a data
// packet and then a control-class one (a CNP) are queued; at 50 us it
// resumes. Returns, in arrival order, whether each packet that arrived was
// the control one: those before the resume, then all.
std::pair<std::vector<bool>, std::vector<bool>> paused_port_passes(uint8_t priority_dscp) {
  QueueSpec q;
  q.pfc = true;
  q.priority_dscp = priority_dscp;
  OnePortBench b(q);
  b.down.pfc_signal(true, SimTime{0});
  b.sched.run(SimTime::from_us(1));
  EXPECT_TRUE(b.down.paused());
  for (const bool control : {false, true}) {
    Packet* p = b.net.pool().alloc();
    p->dst = 1;
    p->wire_bytes = control ? 128 : 4096;
    p->dscp = control ? kControlDscp : 0;
    b.down.enqueue(p, SimTime::from_us(1));
  }
  auto classes = [&b] {
    std::vector<bool> c;
    for (const ArrivalRecord& g : b.sink.got) c.push_back(g.control_class);
    return c;
  };
  b.sched.run(SimTime::from_us(50));
  std::vector<bool> paused = classes();
  b.down.pfc_signal(false, SimTime::from_us(50));
  while (b.sched.step()) {
  }
  return {paused, classes()};
}

// RoCEv2 deployments send CNPs in a strict-priority class of their own: a
// PAUSE of the data class holds data, never the congestion feedback about it.
TEST(Pfc, ControlClassPassesAPausedPort) {
  const auto [paused, all] = paused_port_passes(kControlDscp);
  EXPECT_EQ(paused, std::vector<bool>{true});  // the CNP went; the data waits
  EXPECT_EQ(all, (std::vector<bool>{true, false}));
}

// queue.priority_dscp = 64: no class is exempt, so the CNP waits behind the
// paused data like any packet.
TEST(Pfc, WithoutAPriorityClassTheControlPacketIsPausedToo) {
  const auto [paused, all] = paused_port_passes(kNoPriorityDscp);
  EXPECT_TRUE(paused.empty());
  EXPECT_EQ(all, (std::vector<bool>{false, true}));  // FIFO order: the data first
}

TEST(OtherTopologies, LeafSpineAndRailRouteEveryPair) {
  const LinkSpec l{};
  Scheduler s;
  Network ls(s, leaf_spine(4, 8, 2, l, l), QueueSpec{}, 1);
  EXPECT_EQ(ls.graph().max_hops, 4u);
  EXPECT_EQ(ls.sw(0).group_for(31).size(), 2u);
  Network rail(s, rail_optimized(8, 8, 4, 4, l, l), QueueSpec{}, 1);
  EXPECT_EQ(rail.num_hosts(), 64u);
  EXPECT_EQ(rail.graph().max_hops, 4u);
}

// ------------------------------------------------------------------ review fixes

// A pooled packet never carries a former owner's ingress port.
TEST(PacketPool, AllocationResetsTheIngressPort) {
  PacketPool pool;
  Packet* p = pool.alloc();
  p->in_port = 7;
  pool.release(p);
  Packet* q = pool.alloc();
  ASSERT_EQ(q, p);
  EXPECT_EQ(q->in_port, 0u);
  pool.release(q);
}

// A lone flow host 0 -> host 15 across the core of a k=4 fat-tree whose
// host links and fabric links have the given delays.
SimConfig lone_flow_delays(double host_us, double fabric_us, uint64_t bytes) {
  LinkSpec h{}, f{};
  h.delay = SimTime{static_cast<uint64_t>(host_us * 1e6)};
  f.delay = SimTime{static_cast<uint64_t>(fabric_us * 1e6)};
  SimConfig c;
  c.name = "lone-delays";
  c.topo = fat_tree(4, h, f);
  c.flows = {FlowSpec{0, 15, bytes, SimTime{0}, {UINT32_MAX, UINT32_MAX}}};
  c.time_limit = SimTime::from_ms(50);
  return c;
}

// A driver that knows its fabric's round trip waits longer than it for a
// handshake's answer: with 1 ms fabric links (a round trip of 8 ms), the
// engine's 8 attempts 1 ms apart all gave up before the first answer came,
// and every flow failed with no word but connect_failures.
TEST(Warmup, HandshakesOutwaitTheFabricRoundTrip) {
  Simulation sim(lone_flow_delays(1, 1000, 1 << 20));
  sim.run();
  const Report r = sim.report();
  expect_all_complete(r);
  EXPECT_GT(r.warmup_us, 8000.0);
}

// The window and in-flight cap cover the path's RTT, not 2 x hops x the host
// link's delay: 0.1 us host links and 5 us fabric links have the same 20.2 us
// one way as 3.37 us everywhere, and a lone flow runs as fast on either
// (it took 5 times as long when the BDP counted 0.6 us).
TEST(Warmup, BdpFollowsTheSumOfTheLinkDelaysAlongThePath) {
  Simulation skewed(lone_flow_delays(0.1, 5, 2 << 20));
  EXPECT_EQ(skewed.net().graph().max_path_delay, SimTime::from_ns(20'200));
  Simulation even(lone_flow_delays(20.2 / 6, 20.2 / 6, 2 << 20));
  EXPECT_EQ(skewed.host(0).endpoint().config().cc.initial_cwnd_packets,
            even.host(0).endpoint().config().cc.initial_cwnd_packets);
  skewed.run();
  even.run();
  const Report a = skewed.report(), b = even.report();
  expect_all_complete(a);
  expect_all_complete(b);
  EXPECT_LT(a.completion_us, 1.05 * b.completion_us);
  // Uniform delays: hops x delay, as before.
  const LinkSpec l{};
  Scheduler s;
  Network n(s, fat_tree(4, l, l), QueueSpec{}, 1);
  EXPECT_EQ(n.graph().max_path_delay, SimTime::from_us(6));
}

// After a rate fault a link's utilization is against the capacity it had
// over time, each rate for as long as it lasted: at most 100 %.
TEST(Report, LinkUtilizationAfterARateFaultIsAtMostOne) {
  SimConfig c = lone_flow_delays(1, 1, 2 << 20);
  {
    Simulation probe(lone_flow_delays(1, 1, 4096));
    c.faults.push_back(
        {SimTime::from_us(50), FaultSpec::Kind::kRate, probe.net().host_port(0).edge, 10'000});
  }
  Simulation sim(std::move(c));
  sim.run();
  const Report r = sim.report();
  expect_all_complete(r);
  EXPECT_GT(r.link_util_max, 0.5);
  EXPECT_LE(r.link_util_max, 1.0);
}

uint32_t host_edge(const SimConfig& c, uint32_t host) {
  Scheduler s;
  Network n(s, c.topo, QueueSpec{}, 1);
  return n.host_port(host).edge;
}

// A fault at t = 0 is in place before the flows starting at t = 0 send: with
// host 0's link dropping everything from t = 0, not even the first packet
// (pulled at t = 0) gets through. And a run that ends unfinished reports the
// time limit as its completion, not its last event's time.
TEST(Faults, AtTimeZeroTheyPrecedeTheFlowsAndUnfinishedRunsEndAtTheLimit) {
  SimConfig c = lone_flow_delays(1, 1, 1 << 20);
  FaultSpec f{SimTime{0}, FaultSpec::Kind::kGrayDrop, host_edge(c, 0)};
  f.drop = 1.0;
  c.faults.push_back(f);
  c.time_limit = SimTime::from_us(1000);
  Simulation sim(std::move(c));
  sim.run();
  const Report r = sim.report();
  EXPECT_EQ(r.flows_completed, 0u);
  EXPECT_EQ(r.delivered_bytes, 0u);
  EXPECT_GT(r.fault_drops, 0u);
  EXPECT_LT(r.sim_time_us - r.warmup_us, 1000.0);  // the last event came before the limit
  EXPECT_DOUBLE_EQ(r.completion_us, 1000.0);
}

// finished() asks whether simulated time reached the limit, not the last
// event: a run whose last event before the limit comes early (host 0's link
// dropping everything, the engine's next timer past the limit) is finished
// once run() got to the limit. It compared the last event's time, so both
// loops below ran until their bound (1000 and 100 iterations).
TEST(Simulation, FinishedOnceRunReachedTheLimitThoughTheLastEventCameBefore) {
  auto make = [] {
    SimConfig c = lone_flow_delays(1, 1, 1 << 20);
    FaultSpec f{SimTime{0}, FaultSpec::Kind::kGrayDrop, host_edge(c, 0)};
    f.drop = 1.0;
    c.faults.push_back(f);
    c.time_limit = SimTime::from_us(1000);
    return c;
  };
  {
    Simulation sim(make());
    // The workload's time zero: the warm-up's end, in whole microseconds
    // (the clock stands at the warm-up's last event, before it).
    const SimTime origin = SimTime::from_us(static_cast<uint64_t>(sim.report().warmup_us));
    ASSERT_GT(origin, SimTime{0});
    SimTime t = origin;
    int steps = 0;
    while (!sim.finished() && steps < 1000) {
      t += SimTime::from_us(100);
      sim.run(t);
      ++steps;
    }
    EXPECT_EQ(steps, 10);
    EXPECT_LT(sim.sched().now(), origin + SimTime::from_us(1000));  // no event at the limit
    EXPECT_EQ(sim.report().flows_completed, 0u);
  }
  {
    Simulation sim(make());
    int runs = 0;
    while (!sim.finished() && runs < 100) {
      sim.run();
      ++runs;
    }
    EXPECT_EQ(runs, 1);
    EXPECT_DOUBLE_EQ(sim.report().completion_us, 1000.0);
  }
}

// A run some of whose flows failed did not finish: its completion is the end
// of simulated time (the last failure), as for flows cut off by the time
// limit, not the finish of the flows that completed (host 0's link down
// before its first handshake: 112 us read, of about 8 ms run, ratio 1.34).
TEST(Report, FailedFlowsMakeTheCompletionTheEndOfTheRun) {
  SimConfig c = lone_flow_delays(1, 1, 1 << 20);
  c.flows.push_back(FlowSpec{1, 14, 1 << 20, SimTime{0}, {UINT32_MAX, UINT32_MAX}});
  c.preconnect = false;
  c.faults.push_back({SimTime{0}, FaultSpec::Kind::kLinkDown, host_edge(c, 0)});
  Simulation sim(std::move(c));
  sim.run();
  const Report r = sim.report();
  EXPECT_EQ(r.flows_completed, 1u);
  EXPECT_EQ(r.flows_failed, 1u);
  EXPECT_GT(r.completion_us, 1000.0);
  EXPECT_DOUBLE_EQ(r.completion_us, r.sim_time_us - r.warmup_us);
  // The text says why a flow failed (it said "1 failed" and no more).
  EXPECT_NE(r.to_text(false).find("(1 failed: 1 connection not established"), std::string::npos)
      << r.to_text(false);
}

// The FCT figures count every flow: one that did not finish (cut off by the
// time limit, or failed) at its age when the run ended, a lower bound, and
// the text says so. Over the finished flows alone, rocev2 on
// fattree16-perm-linkdown, 7 of 16 flows stuck on the dead link until the
// time limit (1 s), read FCT p99 and max 260 us; a run cut off before any flow
// finished read 0.
TEST(Report, FctFiguresCountUnfinishedFlowsAtTheirAgeAtTheEnd) {
  SimConfig stuck = preset("fattree16-perm-linkdown", TransportKind::kRoceV2, 1);
  stuck.time_limit = SimTime::from_ms(5);  // as good as a second, and quicker
  Simulation sim(std::move(stuck));
  sim.run();
  const Report r = sim.report();
  ASSERT_LT(r.flows_completed, r.flows);
  ASSERT_GE(r.flows_completed, r.flows / 2);  // p50 is a finished flow's
  EXPECT_GE(r.fct_max_us, r.completion_us - 1);
  EXPECT_DOUBLE_EQ(r.fct_p99_us, r.fct_max_us);  // 16 flows: rank 16
  EXPECT_LT(r.fct_p50_us, 1000.0);
  EXPECT_GT(r.fct_mean_us, r.completion_us * 0.4);  // 7 of 16 at the whole run
  const std::string text = r.to_text(false);
  EXPECT_NE(text.find("  FCT (lower bounds: 7 flows unfinished, counted at their age when the run "
                      "ended): p50 "),
            std::string::npos)
      << text;
  SimConfig c = preset("fattree16-perm", TransportKind::kMetaRoce, 1);
  c.time_limit = SimTime::from_us(10);
  Simulation cut(std::move(c));
  cut.run();
  const Report z = cut.report();
  ASSERT_EQ(z.flows_completed, 0u);
  EXPECT_DOUBLE_EQ(z.fct_p50_us, 10.0);  // every flow started at 0, cut at 10 us
  EXPECT_DOUBLE_EQ(z.fct_max_us, 10.0);
  // A run whose flows all finished: the text as it was.
  const Report done = run_preset("fattree16-perm", 1);
  ASSERT_EQ(done.flows_completed, done.flows);
  EXPECT_NE(done.to_text(false).find("\n  FCT: p50 "), std::string::npos);
}

// wall_s is the simulation's wall time, building the fabric and hosts and the
// connection warm-up included: it was run()'s alone (0.56 s of a 0.78 s
// process on fattree128-perm2mb), while `events` counted the warm-up's.
TEST(Report, WallTimeCountsTheBuildAndTheWarmUp) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const Clock::time_point t0 = Clock::now();
  Simulation sim(preset("fattree16-perm", TransportKind::kMetaRoce, 1));
  const Clock::time_point t1 = Clock::now();
  sim.run();
  const Clock::time_point t2 = Clock::now();
  const Report r = sim.report();
  ASSERT_GT(r.warmup_us, 0.0);
  EXPECT_GT(r.wall_s, seconds(t2 - t1))
      << "run() " << seconds(t2 - t1) << " s, build " << seconds(t1 - t0) << " s";
  EXPECT_LE(r.wall_s, seconds(t2 - t0));
  EXPECT_GE(r.events_per_s, static_cast<double>(r.events) / seconds(t2 - t0));
}

// Bytes queued at a switch port are not on the wire yet: a run cut off by
// its time limit with a full queue in front of a slow link counts only what
// the link carried (host 15's link at 1 Gbit/s behind 175 KB of queue read
// 1400 %).
TEST(Report, LinkUtilizationCountsOnlyBytesOnTheWire) {
  SimConfig c = lone_flow_delays(1, 1, 2 << 20);
  c.preconnect = false;
  c.faults.push_back({SimTime{0}, FaultSpec::Kind::kRate, host_edge(c, 15), 1'000});
  c.time_limit = SimTime::from_us(100);
  Simulation sim(std::move(c));
  sim.run();
  const Report r = sim.report();
  EXPECT_EQ(r.flows_completed, 0u);
  EXPECT_GT(r.max_queue_bytes, 100'000u);
  EXPECT_GT(r.link_util_max, 0.5);
  EXPECT_LE(r.link_util_max, 1.0);
}

// A config file's name may hold any character TOML allows: control
// characters are escaped, as JSON wants (a tab went out raw, and JSON
// readers refused the report).
TEST(Report, JsonEscapesControlCharactersOfTheName) {
  Report r;
  r.name = "a\tb\nc\x01\"\\";
  const std::string j = r.to_json(false);
  EXPECT_NE(j.find(R"("preset": "a\tb\nc\u0001\"\\")"), std::string::npos) << j;
}

// No flow can finish before it starts: a flow starting at 500 us had an
// ideal of its bytes alone, 84 us, and a ratio of 7 for a run at line rate.
// The bound is per host: the latest start plus the bytes from it on.
TEST(IdealTime, CountsStartTimes) {
  SimConfig c = lone_flow_delays(1, 1, 1 << 20);
  c.flows[0].start = SimTime::from_us(500);
  c.flows.push_back(FlowSpec{0, 14, 1 << 20, SimTime{0}, {UINT32_MAX, UINT32_MAX}});
  Simulation sim(std::move(c));
  sim.run();
  const Report r = sim.report();
  expect_all_complete(r);
  const double bytes_us = (1 << 20) * 8.0 / 100'000;  // 1 MiB at 100 Gb/s
  EXPECT_NEAR(r.ideal_us, 500 + bytes_us, 1e-6);
  EXPECT_LT(r.completion_us, 1.3 * r.ideal_us);
}

// A switch buffer smaller than one full data packet passes none: the run
// went on to its time limit with every data packet dropped (a bare
// buffer_bytes = 4000, meant as KB, read as bytes). One packet's worth runs.
TEST(Queue, BufferBelowOneDataPacketIsRefused) {
  for (TransportKind t : {TransportKind::kMetaRoce, TransportKind::kSprayNoCc,
                          TransportKind::kRoceV2, TransportKind::kIrn}) {
    SimConfig c = lone_flow_delays(1, 1, 1 << 20);
    c.transport = t;
    c.queue.buffer_bytes = 4000;
    try {
      Simulation sim{std::move(c)};
      ADD_FAILURE() << transport_name(t) << ": accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(
          std::string(e.what()).find("queue.buffer_bytes (4000) is below one full data packet"),
          std::string::npos)
          << e.what();
    }
  }
  SimConfig fits = lone_flow_delays(1, 1, 1 << 20);
  fits.queue.buffer_bytes = 4210;  // MetaRoCE's frame at mtu 4096, framing included
  EXPECT_NO_THROW(Simulation{std::move(fits)});
}

// A fault on an edge the topology lacks is refused, not skipped when due.
TEST(Faults, UnknownEdgeIsRefused) {
  SimConfig c = lone_flow_delays(1, 1, 4096);
  c.faults.push_back({SimTime::from_us(5), FaultSpec::Kind::kLinkDown, 100'000});
  EXPECT_THROW(Simulation{std::move(c)}, std::invalid_argument);
}

// The ideal's chains use the healthy fabric's paths: a host link left down
// and routes recomputed without it (reroute_after) do not make it unreachable
// for the ideal (it read ~1e14 us).
TEST(IdealTime, UsesTheHealthyFabricAfterAReroute) {
  SimConfig c = preset("fattree16-allreduce", TransportKind::kMetaRoce, 1);
  const double healthy = [&] {
    Simulation s{SimConfig(c)};
    return s.report().ideal_us;
  }();
  c.faults.push_back({SimTime::from_us(10), FaultSpec::Kind::kLinkDown, host_edge(c, 3)});
  c.reroute_after = SimTime::from_us(1);
  c.time_limit = SimTime::from_us(100);
  Simulation sim(std::move(c));
  sim.run();
  EXPECT_DOUBLE_EQ(sim.report().ideal_us, healthy);
}

// WRs are 32 bits long: wr_bytes of 4 GiB or more is refused; below that a
// flow still delivers every byte, and the scratch region is the largest
// flow's size, not wr_bytes (a region of wr_bytes = 4 GiB - 1 per run).
TEST(WrBytes, CappedBelowFourGiBAndTheRegionFitsTheLargestFlow) {
  SimConfig big = lone_flow_delays(1, 1, 1 << 20);
  big.wr_bytes = uint64_t{1} << 32;
  EXPECT_THROW(Simulation{std::move(big)}, std::invalid_argument);
  std::string err;
  SimConfig c = lone_flow_delays(1, 1, 1 << 20);
  EXPECT_FALSE(apply_setting(c, "wr_bytes=4294967296", err));
  EXPECT_TRUE(apply_setting(c, "wr_bytes=4294967295", err)) << err;
  Simulation sim(std::move(c));
  sim.run();
  const Report r = sim.report();
  expect_all_complete(r);
  EXPECT_EQ(r.delivered_bytes, uint64_t{1} << 20);
  EXPECT_LT(r.peak_rss_mib, 1024.0);
}

// A value other than every preset's for each key of the settings table, in
// range beside the others' defaults; a key added to the table needs one here.
const std::map<std::string_view, const char*>& other_values() {
  static const std::map<std::string_view, const char*> v = {
      {"cc.enabled", "0"},
      {"cc.min_cwnd_packets", "4"},
      {"cc.max_cwnd_packets", "8"},
      {"cc.dctcp_g_shift", "2"},
      {"cc.target_queue_delay_us", "1"},
      {"cc.max_delay_decrease_pct", "10"},
      {"cc.explore_interval_us", "50"},
      {"cc.max_inflight_packets", "20"},
      {"time_limit_ms", "0.2"},
      {"reroute_us", "5"},
      {"inflight_cap_bdp", "0.5"},
      {"inflight_cap_packets", "2"},
      {"initial_window_bdp", "0.5"},
      {"num_paths", "2"},
      {"ack_every", "8"},
      {"ack_delay_us", "1"},
      {"recovery.reorder_threshold", "2"},
      {"recovery.min_rto_us", "20"},
      {"recovery.retire_loss_pct", "1"},
      {"cc.initial_cwnd_packets", "4"},
      {"recovery.max_rto_us", "50000"},
      {"recovery.initial_rtt_us", "3"},
      {"recovery.rto_failures_to_retire", "1"},
      {"recovery.loss_window_packets", "8"},
      {"recovery.peer_timeout_us", "100000"},
      {"recovery.keepalive_us", "1000"},
      {"recovery.rnr_retry_limit", "3"},
      {"recovery.rnr_retry_us", "10"},
      {"queue.buffer_bytes", "60000"},
      {"queue.ecn_kmin", "1000"},
      {"queue.ecn_kmax", "20000"},
      {"queue.ecn_pmax", "0.5"},
      {"queue.pfc", "1"},
      {"queue.pfc_xoff_bytes", "50000"},
      {"queue.pfc_xon_bytes", "20000"},
      {"queue.trim", "1"},
      {"queue.trim_priority", "0"},
      {"queue.priority_dscp", "64"},
      {"queue.trim_allowance_bytes", "0"},
      {"rc.ecn_kmin", "1000"},
      {"rc.ecn_kmax", "20000"},
      {"rc.ecn_pmax", "0.5"},
      {"rc.cnp_interval_us", "1"},
      {"rc.g", "0.5"},
      {"rc.alpha_timer_us", "1"},
      {"rc.increase_timer_us", "1"},
      {"rc.byte_counter", "1000"},
      {"rc.fast_recovery_steps", "1"},
      {"rc.rai_mbps", "1"},
      {"rc.rhai_mbps", "1"},
      {"rc.min_rate_mbps", "50000"},
      {"mtu", "1024"},
      {"wr_bytes", "65536"},
      {"wire_overhead", "0"},
  };
  return v;
}

// Every key the settings table calls idle in a run leaves that run's digest
// as it was (metaroce-sim's warning is true), checked for each transport and
// beside the flags and settings that make some keys act (--fabric-ecn,
// --no-dcqcn, queue.pfc=1, queue.trim=1, a link fault).
TEST(Settings, EveryKeyCalledIdleChangesNothing) {
  const std::map<std::string_view, const char*>& other_value = other_values();
  const std::vector<std::string_view> keys = setting_keys();
  for (std::string_view key : keys) EXPECT_TRUE(other_value.contains(key)) << key;
  ASSERT_EQ(keys.size(), other_value.size());

  struct Run {
    const char* preset;
    TransportKind transport;
    const char* set;  // applied first; nullptr: none
    bool fabric_ecn = false, no_dcqcn = false;
  };
  const Run runs[] = {
      {"incast8-256k", TransportKind::kMetaRoce, nullptr},
      {"incast8-256k", TransportKind::kSprayNoCc, nullptr},
      {"incast8-256k", TransportKind::kRoceV2, nullptr},
      {"incast8-256k", TransportKind::kIrn, nullptr},
      {"incast8-256k", TransportKind::kRoceV2, nullptr, true},
      {"incast8-256k", TransportKind::kIrn, nullptr, false, true},
      {"incast8-256k", TransportKind::kMetaRoce, "queue.pfc=1"},
      {"incast8-256k", TransportKind::kMetaRoce, "queue.trim=1"},
      {"fattree16-perm-linkdown", TransportKind::kMetaRoce, nullptr},
  };
  const auto configure = [](const Run& run) {
    SimConfig c = preset(run.preset, run.transport, 1);
    c.rc.own_ecn = !run.fabric_ecn;
    c.rc.dcqcn = !run.no_dcqcn;
    std::string err;
    if (run.set != nullptr) {
      EXPECT_TRUE(apply_setting(c, run.set, err)) << err;
    }
    return c;
  };
  const auto digest = [](SimConfig c) {
    Simulation sim(std::move(c));
    sim.run();
    return sim.report().digest;
  };
  size_t idle_checked = 0;
  for (const Run& run : runs) {
    const uint64_t as_given = digest(configure(run));
    for (std::string_view key : keys) {
      SimConfig c = configure(run);
      std::string err;
      ASSERT_TRUE(apply_setting(c, std::string(key) + "=" + other_value.at(key), err)) << err;
      if (setting_idle_in(key, c).empty()) continue;
      ++idle_checked;
      EXPECT_EQ(digest(std::move(c)), as_given)
          << key << " is called idle in " << run.preset << " " << transport_name(run.transport)
          << (run.set != nullptr ? run.set : "");
    }
  }
  EXPECT_GT(idle_checked, 100u);

  // What the warning names, and the keys that act beside their flag.
  SimConfig rocev2 = preset("incast8-256k", TransportKind::kRoceV2, 1);
  EXPECT_EQ(setting_idle_in("num_paths", rocev2), "metaroce and spray-nocc");
  EXPECT_EQ(setting_idle_in("queue.pfc", rocev2),
            "metaroce and spray-nocc (rocev2 always runs with PFC, irn never)");
  EXPECT_EQ(setting_idle_in("queue.ecn_kmin", rocev2),
            "metaroce and spray-nocc, and rocev2 and irn with --fabric-ecn");
  EXPECT_EQ(setting_idle_in("queue.pfc_xoff_bytes", rocev2), "");
  EXPECT_EQ(setting_idle_in("rc.g", rocev2), "");
  rocev2.rc.own_ecn = false;
  EXPECT_EQ(setting_idle_in("queue.ecn_kmin", rocev2), "");
  EXPECT_EQ(setting_idle_in("rc.ecn_kmin", rocev2), "rocev2 and irn without --fabric-ecn");
  SimConfig metaroce = preset("incast8-256k", TransportKind::kMetaRoce, 1);
  EXPECT_EQ(setting_idle_in("rc.g", metaroce), "rocev2 and irn with DCQCN (not with --no-dcqcn)");
  EXPECT_EQ(setting_idle_in("queue.pfc_xoff_bytes", metaroce),
            "runs with PFC: rocev2, and metaroce and spray-nocc with queue.pfc=1");
  EXPECT_EQ(setting_idle_in("reroute_us", metaroce), "runs with a link_down or link_up fault");
  metaroce.queue.pfc = true;
  EXPECT_EQ(setting_idle_in("queue.pfc_xoff_bytes", metaroce), "");
  // A lossless port never overflows, so it never trims either.
  EXPECT_NE(setting_idle_in("queue.trim", metaroce), "");
  EXPECT_EQ(setting_idle_in("no.such.key", metaroce), "");
  // Keys of every run are never called idle.
  for (const char* key : {"queue.buffer_bytes", "mtu", "time_limit_ms", "wire_overhead"})
    for (TransportKind t : {TransportKind::kMetaRoce, TransportKind::kSprayNoCc,
                            TransportKind::kRoceV2, TransportKind::kIrn})
      EXPECT_EQ(setting_idle_in(key, preset("incast8-256k", t, 1)), "") << key;
}

// Every key of the settings table is a config file's key too, named as
// --set names it (KEY at the top of the file, SECTION.KEY as KEY in
// [SECTION]), and does what --set does: the same run, or a refusal where
// --set's checks refuse. num_paths, ack_every, inflight_cap_bdp and the other
// keys without a section were --set's only; recovery.rnr_* neither's.
TEST(Settings, EveryKeyIsAConfigFileKeyAsOnSet) {
  const std::string body =
      "[topology]\nkind = \"leaf_spine\"\nleaves = 2\nhosts_per_leaf = 2\nspines = 1\n"
      "host_rate_gbps = 100\nfabric_rate_gbps = 100\n";
  const std::string workload = "[[workload]]\nkind = \"permutation\"\nbytes = 65536\n";
  const auto digest = [](SimConfig c) {
    Simulation sim(std::move(c));
    sim.run();
    return sim.report().digest;
  };
  for (const std::string_view key : setting_keys()) {
    const std::string value = other_values().at(key);
    const auto range = setting_range(key);
    ASSERT_TRUE(range.has_value()) << key;
    const std::string written =
        range->kind == SettingKind::kSwitch ? (value == "0" ? "false" : "true") : value;
    const size_t dot = key.find('.');
    const std::string text = dot == std::string_view::npos
                                 ? std::string(key) + " = " + written + "\n" + body + workload
                                 : body + "[" + std::string(key.substr(0, dot)) + "]\n" +
                                       std::string(key.substr(dot + 1)) + " = " + written + "\n" +
                                       workload;
    for (const TransportKind t : {TransportKind::kMetaRoce, TransportKind::kRoceV2}) {
      SimConfig by_set = parse_config(body + workload, "t.toml", ".", t, 1);
      std::string err;
      std::vector<std::string> named;
      const bool set_ok = apply_setting(by_set, std::string(key) + "=" + value, err) &&
                          queue_spec_error(by_set.queue).empty() &&
                          engine_setting_error(by_set, named).empty();
      std::vector<std::string> given;
      try {
        const SimConfig by_file = parse_config(text, "t.toml", ".", t, 1, &given);
        ASSERT_TRUE(set_ok) << key << ": --set refuses (" << err << "), the file does not";
        EXPECT_NE(std::find(given.begin(), given.end(), key), given.end()) << key;
        EXPECT_EQ(digest(by_file), digest(by_set)) << key << " " << transport_name(t);
      } catch (const ConfigError& e) {
        EXPECT_FALSE(set_ok) << key << ": the file refuses (" << e.what() << "), --set does not";
      }
    }
  }
}

// A flow larger than 2^32 WRs (MetaRoCE) or packets (rocev2, irn): the WR
// count was 32 bits, and 262144 x 2^32 bytes wrapped to one WR of 0 bytes
// that "completed" in 8 us having delivered nothing (every WR of a larger
// flow was also allocated up front, 9e18 bytes ending in std::bad_alloc); a
// baseline QP's packet count wrapped the same way at 2^32 + 1 packets.
// rocev2 / irn number flow N's QP 0x100 + N in the BTH's 24 bits: flow
// 16,776,960 would be QP 0 (the SMI's) again, so a run of more flows is
// refused (Simulation throws this message; a workload that large is not
// built here).
TEST(HugeFlows, BaselineQpNumbersFitTwentyFourBits) {
  EXPECT_EQ(RcShared::kMaxFlows, 16'776'960u);
  EXPECT_EQ(RcShared::kFirstQpn + (RcShared::kMaxFlows - 1), 0xffffffu);
  EXPECT_EQ(RcShared::flow_count_error(RcShared::kMaxFlows), "");
  EXPECT_EQ(RcShared::flow_count_error(RcShared::kMaxFlows + 1),
            "16776961 flows: rocev2 / irn give each flow a QP of its own, and 24-bit QP numbers "
            "from 0x100 take at most 16776960");
}

TEST(HugeFlows, NeverCompleteWithoutTheirBytesAndTheBaselinesRefuseThem) {
  constexpr uint64_t kWrap = (uint64_t{256} << 10) << 32;  // default wr_bytes x 2^32
  for (const uint64_t bytes : {kWrap, kWrap + 1, uint64_t{9'000'000'000'000'000'000u}}) {
    SimConfig c = lone_flow(TransportKind::kMetaRoce, bytes);
    c.time_limit = SimTime::from_us(100);
    Simulation sim(std::move(c));
    sim.run();
    const Report r = sim.report();
    EXPECT_EQ(r.flows_completed, 0u) << bytes;
    EXPECT_GT(r.delivered_bytes, 1u << 20) << bytes;  // at line rate until the limit
    EXPECT_LT(r.peak_rss_mib, 1024.0) << bytes;
  }
  for (const TransportKind t : {TransportKind::kRoceV2, TransportKind::kIrn}) {
    EXPECT_THROW(Simulation{lone_flow(t, (uint64_t{4096} << 32) + 4096)}, std::invalid_argument);
    // IBTA's message limit: a WRITE of 4 GiB + 1 ran, its RETH DMA Length 1;
    // 2^31 + 1 is refused, naming the limit.
    for (const uint64_t over : {(uint64_t{1} << 32) + 1, (uint64_t{1} << 31) + 1}) {
      try {
        Simulation sim{lone_flow(t, over)};
        ADD_FAILURE() << over << " bytes ran";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("above the largest rocev2 / irn message, 2^31 bytes"),
                  std::string::npos)
            << e.what();
      }
    }
    {
      SimConfig c = lone_flow(t, uint64_t{1} << 31);  // the limit itself: runs
      c.time_limit = SimTime::from_us(10);
      EXPECT_NO_THROW(Simulation{std::move(c)});
    }
    SimConfig c = lone_flow(t, uint64_t{1} << 30);  // in range: runs
    c.time_limit = SimTime::from_us(100);
    Simulation sim(std::move(c));
    sim.run();
    EXPECT_GT(sim.report().delivered_bytes, 1u << 20);
  }
}

}  // namespace
}  // namespace metaroce::sim
