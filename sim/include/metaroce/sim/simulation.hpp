// One simulation: a scheduler, a network, hosts running a transport, a
// workload and a fault schedule. No globals: simulations are independent
// objects, and the same config (seed included) gives the same Report.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "metaroce/config.hpp"
#include "metaroce/sim/metaroce_host.hpp"
#include "metaroce/sim/network.hpp"
#include "metaroce/sim/output.hpp"
#include "metaroce/sim/rc_host.hpp"
#include "metaroce/sim/scheduler.hpp"
#include "metaroce/sim/workload.hpp"

namespace metaroce::sim {

enum class TransportKind : uint8_t {
  kMetaRoce,   // the engine with its congestion control
  kSprayNoCc,  // the same engine, cfg.cc.enabled = false (oblivious spraying)
  kRoceV2,     // baseline: RoCEv2 RC, one ECMP path, go-back-N, DCQCN, PFC fabric (rc_host.hpp)
  kIrn,        // baseline: IRN, one ECMP path, selective repeat, BDP cap, DCQCN, no PFC
};
[[nodiscard]] const char* transport_name(TransportKind t);
// The single-path RC baselines (rc_host.hpp), as opposed to the engine's NICs.
[[nodiscard]] constexpr bool is_baseline(TransportKind t) {
  return t == TransportKind::kRoceV2 || t == TransportKind::kIrn;
}
[[nodiscard]] bool parse_transport(const std::string& s, TransportKind& out);

struct FaultSpec {
  enum class Kind : uint8_t { kLinkDown, kLinkUp, kRate, kGrayDrop, kReroute };
  SimTime at;
  Kind kind = Kind::kLinkDown;
  uint32_t edge = 0;
  uint64_t rate_mbps = 0;  // kRate
  double drop = 0;         // kGrayDrop: fraction of packets silently dropped (0 restores)
};

// EndpointConfig tuned for data-center timescales; the algorithms are the
// engine's own.
[[nodiscard]] EndpointConfig dc_endpoint_config();

// The payload MTUs a scenario may set (SimConfig::set_mtu: --set mtu, a
// config file's mtu): the engine's smallest, and a jumbo frame's.
inline constexpr uint32_t kMinMtu = 256;
inline constexpr uint32_t kMaxMtu = 9000;

struct SimConfig {
  std::string name = "custom";
  TopoGraph topo;
  QueueSpec queue;
  std::vector<FlowSpec> flows;
  std::vector<FaultSpec> faults;
  TransportKind transport = TransportKind::kMetaRoce;
  EndpointConfig endpoint = dc_endpoint_config();
  uint64_t seed = 1;
  SimTime time_limit = SimTime::from_ms(1000);  // stop here even if flows remain
  // Establish every connection the workload needs before it starts, as
  // collective libraries do when a communicator is created: flow start times,
  // fault times, the time limit and completion_us then count from the end of
  // this warm-up, so a handshake round trip is not charged to the workload.
  // Baselines have no handshake; for them it changes nothing.
  bool preconnect = true;
  // Routing convergence: this long after a link goes down or comes back,
  // every switch's ECMP groups are recomputed over the links that are up (a
  // link-state protocol converging, or the fabric manager of an AI cluster).
  // never (the default): switches keep hashing onto a dead link, so only the
  // transport can steer around it.
  SimTime reroute_after = SimTime::never();
  // MetaRoCE: the connection-wide in-flight cap (spec CC-9): the fabric's
  // bandwidth-delay product times inflight_cap_bdp, plus inflight_cap_packets
  // of queue. A fixed number of packets, not a share of the BDP: the queue a
  // connection may keep is what the cap adds, and 25 % of a 400G BDP (26
  // packets) filled the leaf-spine's uplinks (docs/sim/README.md). 1 BDP + 11
  // is 1.25 BDP on the 100G fat-trees. inflight_cap_bdp 0 leaves endpoint.cc
  // as it is.
  double inflight_cap_bdp = 1.0;
  uint32_t inflight_cap_packets = 11;
  // MetaRoCE: the connection's initial window (spec CC-1) as a multiple of the
  // fabric's bandwidth-delay product, so that a flow starts at line rate as
  // data-center transports that know their fabric do; 0 keeps endpoint.cc's.
  double initial_window_bdp = 1.0;
  uint32_t wire_overhead = kDefaultWireOverhead;
  uint64_t wr_bytes = 256 * 1024;
  // recovery.max_rto_us given (--set, a config file's [recovery]): then
  // recovery.min_rto_us no longer raises max_rto to itself, whatever the
  // order (a file's keys come sorted), and a min above it is refused.
  bool max_rto_given = false;
  bool progress = false;  // progress lines on stderr
  // Wall seconds between them at least (tests set 0: a line at every chance).
  double progress_interval_s = 1.0;
  // Baselines (kRoceV2, kIrn): the transport fills in go_back_n, the window
  // (IRN: the BDP) and RTO_low; the rest is taken from here.
  RcParams rc;
  // Capture and time series (--pcap, --csv); none by default.
  OutputOptions output;
  // The files the run was read from (load_config_file: the config, each
  // workload.file), as {its key, its path}: no output may be one of them
  // (output_clash), as opening it "wb" emptied the user's file.
  std::vector<OutputFile> input_files;

  // The payload MTU of every transport (endpoint.mtu, rc.mtu; 4096 by
  // default), in [kMinMtu, kMaxMtu]. Frame sizes follow, and with them the
  // BDP-derived windows and the PFC headroom (QueueSpec::pfc_frame_bytes).
  void set_mtu(uint32_t mtu) {
    endpoint.mtu = static_cast<uint16_t>(mtu);
    rc.mtu = mtu;
  }
};

// The faults that can never act, at or after the time limit (both count from
// the end of the warm-up): one line each, naming the fault, for a warning.
// Not an error: a shortened limit on a preset with faults still runs.
[[nodiscard]] std::vector<std::string> faults_past_time_limit(const SimConfig& c);
// Likewise the flows that can never start (a traffic matrix's start_us, a
// workload's start_us past the limit): one line for all of them, naming how
// many and the first, or "" when every flow starts before the limit.
[[nodiscard]] std::string flows_past_time_limit(const SimConfig& c);

// One path slot of the MetaRoCE connections, summed over all connections.
struct PathSlotTotals {
  uint64_t packets_sent = 0;
  uint64_t retransmissions = 0;
  uint64_t ce_marks = 0;
  uint64_t losses = 0;
  uint64_t timeouts = 0;
  uint64_t retirements = 0;
};

struct Report {
  std::string name;
  std::string transport;
  std::string topology;
  uint64_t seed = 0;
  uint32_t hosts = 0;
  uint64_t flows = 0;
  uint64_t flows_completed = 0;
  uint64_t flows_failed = 0;
  double completion_us =
      0;  // last flow finish (from the workload's start); sim end if some never finished
  double warmup_us = 0;  // connection warm-up before the workload started (preconnect)
  // The busiest host NIC's payload bytes at line rate; with dependent flows
  // (rings), at least the longest chain of flows, each taking bytes at line
  // rate plus its path's one-way propagation delay (sim/README.md).
  double ideal_us = 0;
  // Of every flow, one that did not finish at its age when the run ended
  // (then each is a lower bound). Not in the digest.
  double fct_p50_us = 0, fct_p99_us = 0, fct_max_us = 0, fct_mean_us = 0;
  // Payload bytes the receivers took, duplicates and headers excluded (the
  // counter of --csv's throughput.csv), and their rate over the run:
  // goodput_gbps = delivered_bytes x 8 / completion_us, all flows together.
  // Not in the digest (the flows' finish times already are).
  uint64_t delivered_bytes = 0;
  double goodput_gbps = 0;
  uint64_t drops = 0;        // switch buffer overflow (packets lost, not trimmed ones)
  uint64_t trimmed = 0;      // data packets switches cut to their headers (QueueSpec::trim)
  uint64_t fault_drops = 0;  // link down / gray failure
  // Packets for a host no route reached (Network::drop_unroutable: a host
  // cut off by a link down and a reroute). In the digest only when not 0.
  uint64_t no_route_drops = 0;
  uint64_t ecn_marks = 0;
  uint64_t max_queue_bytes = 0;
  uint64_t packets_forwarded = 0;  // port transmissions, all hops
  TransportTotals transport_totals;
  uint64_t connect_failures = 0;
  uint64_t errors = 0;
  double pfc_pause_us = 0;  // total time ports spent paused by PFC (rocev2, or queue.pfc)
  uint64_t pfc_pauses = 0;  // PAUSE frames that took effect
  // The last event processed, from time 0 (the warm-up included): not the
  // run's length. warmup_us + completion_us when every flow completed or
  // failed (the run stops at the event that ends the last one); when the time
  // limit cut the run, the last event before it, possibly long before.
  double sim_time_us = 0;
  uint64_t events = 0;
  uint64_t packet_pool_peak = 0;
  // Link utilization (bytes on the wire over rate x sim time) over the link
  // directions that carried at least one packet. Deterministic, but not in
  // the digest (it follows from the counts the digest already has).
  double link_util_mean = 0, link_util_max = 0;
  uint64_t links_used = 0;
  // Mean time a packet waited in a port's queue, by the kind of port: where
  // the RTT goes. Named as the fabric's tiers are: a fat-tree's ToR, agg and
  // core, or a two-tier fabric's (leaf-spine, rail-optimized) leaf and spine,
  // which has no agg_up or core_down ports (nullptr: a kind left out of the
  // output; a leaf-spine's read tor_up / agg_down, and agg_up / core_down 0).
  static constexpr size_t kPortKinds = 6;
  static constexpr const char* kFatTreePortKinds[kPortKinds] = {
      "nic", "tor_up", "agg_up", "core_down", "agg_down", "tor_down"};
  static constexpr const char* kTwoTierPortKinds[kPortKinds] = {"nic",   "leaf_up",    nullptr,
                                                                nullptr, "spine_down", "leaf_down"};
  const char* const* port_kind_names = kFatTreePortKinds;
  double data_wait_us[kPortKinds] = {};
  double ctrl_wait_us[kPortKinds] = {};
  std::vector<PathSlotTotals> per_path;  // MetaRoCE only, by path slot
  uint64_t digest = 0;  // hash of every deterministic field and every flow's finish time
  // Not deterministic:
  double wall_s = 0;        // building the fabric and hosts, the warm-up and the run
  double events_per_s = 0;  // events (the warm-up's too) over the event loops' time
  double peak_rss_mib = 0;

  // timing = false leaves out wall_s, events_per_s and peak_rss_mib, so the
  // output of two runs with one seed is byte-identical.
  [[nodiscard]] std::string to_json(bool timing = true) const;
  [[nodiscard]] std::string to_text(bool timing = true) const;
};

class Simulation {
 public:
  explicit Simulation(SimConfig cfg);
  ~Simulation();
  Simulation(const Simulation&) = delete;
  Simulation& operator=(const Simulation&) = delete;

  // Runs until every flow finished, time_limit, or `until`; can be called
  // again with a later `until` to continue.
  void run(SimTime until = SimTime::never());
  // Every flow done, or simulated time at the limit (events or not).
  [[nodiscard]] bool finished() const;
  [[nodiscard]] Report report() const;

  [[nodiscard]] Scheduler& sched() { return sched_; }
  [[nodiscard]] Network& net() { return *net_; }
  [[nodiscard]] FlowTable& flows() { return *flows_; }
  // The MetaRoCE host (throws std::bad_cast for a baseline transport).
  [[nodiscard]] MetaRoceHost& host(uint32_t i) {
    return dynamic_cast<MetaRoceHost&>(*hosts_.at(i));
  }
  [[nodiscard]] SimHost& any_host(uint32_t i) { return *hosts_.at(i); }
  [[nodiscard]] const SimConfig& config() const { return cfg_; }
  // Payload bytes delivered so far, all flows (MetaRoCE: bytes the receivers'
  // connections accepted, duplicates excluded; baselines: in-order bytes).
  [[nodiscard]] uint64_t delivered_bytes() const;
  // Finishes the output files (--pcap, --csv), if any; also done by the
  // destructor. False with a reason in err if a write failed.
  bool close_output(std::string& err);
  [[nodiscard]] const SimOutput* output() const { return output_.get(); }

 private:
  friend class SimOutput;
  class Starter;
  class Faults;
  // What the progress lines say the simulation is doing: a counted phase
  // (routes, hosts, a reroute's routes: count_tick) or an event loop's
  // (warm-up, run: tick).
  enum class Phase : uint8_t { kRoutes, kHosts, kWarmUp, kRun, kReroute };
  static void tick(void* ctx, const Scheduler& s);
  // A counted phase's progress (BuildProgress), in tick()'s style.
  static void count_tick(void* ctx, uint32_t done, uint32_t total);
  // Enters phase p; its BuildProgress (none without cfg_.progress).
  BuildProgress enter_phase(Phase p);
  void warm_up();
  // The longest path's round trip, a data packet and an ACK serialized per hop.
  [[nodiscard]] SimTime fabric_rtt(uint32_t data_bytes, uint32_t ack_bytes) const;
  // Packets of `mtu` payload in flight to fill the longest path's round trip.
  [[nodiscard]] uint32_t bdp_packets(uint32_t mtu, uint32_t data_bytes, uint32_t ack_bytes) const;
  void add_link_and_path_stats(Report& r) const;  // in output.cpp
  // The end of simulated time: origin + time_limit once run() got there,
  // not the last event's time (which may come well before).
  [[nodiscard]] SimTime run_end() const { return std::max(sched_.now(), reached_); }
  // Report::ideal_us from the flows' bytes, start times and dependencies.
  [[nodiscard]] double compute_ideal_us() const;

  SimConfig cfg_;
  Scheduler sched_;
  std::unique_ptr<Network> net_;
  std::unique_ptr<FlowTable> flows_;
  std::unique_ptr<MetaRoceShared> shared_;
  std::unique_ptr<RcShared> rc_shared_;
  std::vector<std::unique_ptr<SimHost>> hosts_;
  std::unique_ptr<Starter> starter_;
  std::unique_ptr<Faults> faults_;
  SimTime origin_{0};                  // the workload's time zero (after warm_up)
  std::unique_ptr<SimOutput> output_;  // after everything it observes
  double wall_s_ = 0;                  // the constructor's (fabric, hosts, warm-up) and run()'s
  double loop_s_ = 0;                  // the warm-up's and run()'s event loops: events_per_s
  double last_progress_wall_ = 0;
  uint64_t last_progress_events_ = 0;
  uint32_t last_progress_count_ = 0;  // the counted phase's count at its last line
  double count_since_ = 0;            // ... and the wall time of that line, or of its start
  Phase phase_ = Phase::kRoutes;
  // The simulated time run() got to (events or not).
  SimTime reached_{0};
  // Per flow, when some flow depends on others: its path's one-way delay on
  // the healthy fabric (routes as built, before any fault or reroute), for
  // the ideal's chains.
  std::vector<SimTime> ideal_path_delay_;
};

}  // namespace metaroce::sim
