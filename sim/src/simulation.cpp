#include "metaroce/sim/simulation.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "metaroce/sim/progress.hpp"
#include "metaroce/sim/rng.hpp"
#include "metaroce/sim/topology.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::sim {

const char* transport_name(TransportKind t) {
  switch (t) {
    case TransportKind::kMetaRoce: return "metaroce";
    case TransportKind::kSprayNoCc: return "spray-nocc";
    case TransportKind::kRoceV2: return "rocev2";
    case TransportKind::kIrn: return "irn";
  }
  return "?";
}

bool parse_transport(const std::string& s, TransportKind& out) {
  if (s == "metaroce") {
    out = TransportKind::kMetaRoce;
  } else if (s == "spray-nocc") {
    out = TransportKind::kSprayNoCc;
  } else if (s == "rocev2") {
    out = TransportKind::kRoceV2;
  } else if (s == "irn") {
    out = TransportKind::kIrn;
  } else {
    return false;
  }
  return true;
}

std::vector<std::string> faults_past_time_limit(const SimConfig& c) {
  static constexpr const char* kKinds[] = {"link_down", "link_up", "rate", "gray", "reroute"};
  std::vector<std::string> lines;
  for (size_t i = 0; i < c.faults.size(); ++i) {
    const FaultSpec& f = c.faults[i];
    if (f.at < c.time_limit) continue;
    std::ostringstream o;
    o << std::setprecision(15) << "fault " << i << " (" << kKinds[static_cast<size_t>(f.kind)]
      << ", edge " << f.edge << ") at " << f.at.us() << " us is not before the time limit ("
      << c.time_limit.us() << " us): it never acts";
    lines.push_back(o.str());
  }
  return lines;
}

std::string flows_past_time_limit(const SimConfig& c) {
  size_t n = 0, first = 0;
  for (size_t i = 0; i < c.flows.size(); ++i)
    if (c.flows[i].start >= c.time_limit && n++ == 0) first = i;
  if (n == 0) return {};
  const FlowSpec& f = c.flows[first];
  std::ostringstream o;
  o << std::setprecision(15) << n << (n == 1 ? " flow starts" : " flows start")
    << " at or after the time limit (" << c.time_limit.us() << " us), the first flow " << first
    << " (" << f.src << " -> " << f.dst << ") at " << f.start.us()
    << " us: " << (n == 1 ? "it never starts" : "they never start");
  return o.str();
}

EndpointConfig dc_endpoint_config() {
  EndpointConfig c;
  c.cover_payload = false;  // payload bytes are not simulated (see metaroce_host.hpp)
  // 16 entropies, not the engine's default 8: a switch hashes a connection's
  // entropies onto its uplinks at random, and 8 values over a fat-tree ToR's
  // 8 uplinks reach only about 5 of them, some twice, a static imbalance that
  // congestion control must then undo. 16 halve the variance of each uplink's
  // share (fattree1024-perm2mb: 1.56x ideal with 8, 1.45x with 16; 32 gives
  // 1.42x but doubles per-connection state and misses the incast target).
  c.num_paths = 16;
  c.recovery.initial_rtt_ns = 15 * kMicrosecond;
  c.recovery.min_rto_ns = 200 * kMicrosecond;
  c.recovery.max_rto_ns = 10 * kMillisecond;
  c.connect_retry_ns = 1 * kMillisecond;
  return c;
}

// Starts flows at their start times: one pending event, for the next start.
class Simulation::Starter final : public EventSource {
 public:
  explicit Starter(Simulation& s) : sim_(s) {
    for (uint32_t i = 0; i < s.flows_->size(); ++i)
      if (!s.flows_->has_deps(i)) order_.push_back(i);
    std::stable_sort(order_.begin(), order_.end(), [&](uint32_t a, uint32_t b) {
      return s.flows_->at(a).spec.start < s.flows_->at(b).spec.start;
    });
    for (uint32_t i = 0; i < s.flows_->size(); ++i) s.flows_->at(i).spec.start += s.origin_;
    if (!order_.empty()) s.sched_.schedule(*this, s.flows_->at(order_[0]).spec.start);
  }
  ~Starter() override { sim_.sched_.cancel(*this); }
  void on_event(SimTime now) override;  // after Faults, whose due faults it applies first

 private:
  Simulation& sim_;
  std::vector<uint32_t> order_;
  size_t next_ = 0;
};

class Simulation::Faults final : public EventSource {
 public:
  explicit Faults(Simulation& s) : sim_(s), list_(s.cfg_.faults) {
    for (FaultSpec& f : list_) f.at += s.origin_;
    if (s.cfg_.reroute_after != SimTime::never()) {
      const size_t n = list_.size();
      for (size_t i = 0; i < n; ++i) {
        const FaultSpec f = list_[i];
        if (f.kind == FaultSpec::Kind::kLinkDown || f.kind == FaultSpec::Kind::kLinkUp)
          list_.push_back({f.at + s.cfg_.reroute_after, FaultSpec::Kind::kReroute, 0, 0, 0});
      }
    }
    std::stable_sort(list_.begin(), list_.end(), [](auto& a, auto& b) { return a.at < b.at; });
    if (!list_.empty()) s.sched_.schedule(*this, list_[0].at);
  }
  ~Faults() override { sim_.sched_.cancel(*this); }
  void on_event(SimTime now) override { apply_due(now); }
  // Applies every fault due at or before now and re-arms for the next one.
  void apply_due(SimTime now) {
    if (next_ >= list_.size() || list_[next_].at > now) return;
    while (next_ < list_.size() && list_[next_].at <= now) {
      const FaultSpec& f = list_[next_++];
      Network& n = *sim_.net_;
      if (f.edge >= n.graph().edges.size()) continue;
      switch (f.kind) {
        case FaultSpec::Kind::kLinkDown: n.set_link_up(f.edge, false, now); break;
        case FaultSpec::Kind::kLinkUp: n.set_link_up(f.edge, true, now); break;
        case FaultSpec::Kind::kRate:
          n.set_link_rate(f.edge, std::max<uint64_t>(1, f.rate_mbps), now);
          break;
        case FaultSpec::Kind::kGrayDrop: n.set_link_drop(f.edge, f.drop); break;
        case FaultSpec::Kind::kReroute:  // edge 0: any fabric has it
          n.reroute(sim_.enter_phase(Phase::kReroute));
          sim_.phase_ = Phase::kRun;
          break;
      }
    }
    if (next_ < list_.size())
      sim_.sched_.schedule(*this, list_[next_].at);
    else
      sim_.sched_.cancel(*this);
  }

 private:
  Simulation& sim_;
  std::vector<FaultSpec> list_;
  size_t next_ = 0;
};

// Faults due at this instant first: the flows starting now see them.
void Simulation::Starter::on_event(SimTime now) {
  sim_.faults_->apply_due(now);
  while (next_ < order_.size() && sim_.flows_->at(order_[next_]).spec.start <= now) {
    const uint32_t f = order_[next_++];
    sim_.hosts_.at(sim_.flows_->at(f).spec.src)->start_flow(f, now);
  }
  if (next_ < order_.size()) sim_.sched_.schedule(*this, sim_.flows_->at(order_[next_]).spec.start);
}

namespace {
double wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An engine window the simulator derives from a multiple of the fabric BDP
// (plus `extra` packets). Past the engine's range it is refused in the
// user's terms: the engine's own message named cc.initial_cwnd_packets
// 366210944, a field no one had set (100 Tb/s links, 10 ms delays).
// `extra_key` names the setting that gave `extra` (nullptr: none did), so that
// the refusal can offer both ways back into range.
uint32_t packets_from_bdp(const char* key, double multiple, uint32_t bdp, uint32_t extra,
                          const char* extra_key, const char* rule) {
  const double packets = std::ceil(multiple * bdp) + extra;
  if (packets <= kMaxPacketCount) return static_cast<uint32_t>(packets);
  std::ostringstream m;
  m << key << " " << multiple << " times this fabric's BDP of " << bdp << " packets";
  if (extra > 0) m << " plus " << extra;
  m << " is " << std::setprecision(12) << packets << " packets, past the engine's "
    << kMaxPacketCount << " (" << rule << ")";
  const char* join = ": give --set ";
  if (extra < kMaxPacketCount) {
    // The largest multiple that fits, three digits rounded down.
    const double fits = static_cast<double>(kMaxPacketCount - extra) / bdp;
    const double step = std::pow(10.0, std::floor(std::log10(fits)) - 2);
    m << std::setprecision(3) << join << key << "=" << std::floor(fits / step) * step << " or less";
    join = ", or --set ";
  }
  if (const double share = std::ceil(multiple * bdp);
      extra_key != nullptr && share < kMaxPacketCount)
    m << join << extra_key << "=" << std::setprecision(12) << kMaxPacketCount - share << " or less";
  m << " (or the same in a config file)";
  throw std::invalid_argument(m.str());
}
}  // namespace

Simulation::Simulation(SimConfig cfg) : cfg_(std::move(cfg)) {
  // wall_s counts the build and the warm-up too: it was run()'s alone, a
  // quarter short of the process's on fattree128-perm2mb, while events
  // counted the warm-up's.
  const double t0 = wall_now();
  const bool baseline = is_baseline(cfg_.transport);
  // One MTU-sized frame, for the PFC headroom and XON gap: payload, headers and
  // framing, 4200 bytes at the default 4096 (RoCEv2's are 4194, MetaRoCE's 4210).
  cfg_.queue.pfc_frame_bytes = uint64_t{baseline ? cfg_.rc.mtu : cfg_.endpoint.mtu} + 104;
  // A full-MTU data datagram (MetaRoCE's, as the engine encodes it; the
  // baselines' BTH and ICRC, no RETH), and with framing the smallest packet
  // a flow of more than one MTU must get through: a switch buffer below it
  // passes none, and the run would only drop until its time limit.
  const uint32_t data_bytes = cfg_.endpoint.mtu + wire::kBaseHeaderSize + wire::kMessageHeaderSize +
                              wire::kRdmaHeaderSize + wire::kIcrcSize;
  const uint64_t data_frame =
      uint64_t{baseline ? cfg_.rc.mtu + 16 : data_bytes} + cfg_.wire_overhead;
  if (cfg_.queue.buffer_bytes < data_frame)
    throw std::invalid_argument(
        "queue.buffer_bytes (" + std::to_string(cfg_.queue.buffer_bytes) +
        ") is below one full data packet (" + std::to_string(data_frame) +
        " bytes, framing included): no data packet of a full MTU could pass a switch");
  if (baseline) {
    cfg_.queue.pfc = cfg_.transport == TransportKind::kRoceV2;  // RoCEv2 needs a lossless fabric
    if (cfg_.rc.own_ecn) {
      // Named as the user set them (--set rc.ecn_kmin), not as the queue's.
      if (cfg_.rc.ecn_kmax != 0 && cfg_.rc.ecn_kmin > cfg_.rc.ecn_kmax)
        throw std::invalid_argument("rc.ecn_kmin (" + std::to_string(cfg_.rc.ecn_kmin) +
                                    ") is above rc.ecn_kmax (" + std::to_string(cfg_.rc.ecn_kmax) +
                                    ")");
      cfg_.queue.ecn_kmin = cfg_.rc.ecn_kmin;
      cfg_.queue.ecn_kmax = cfg_.rc.ecn_kmax;
      cfg_.queue.ecn_pmax = cfg_.rc.ecn_pmax;
    }
  }
  // The routes of a large fabric take wall seconds (a search per host),
  // before the warm-up's first line: reported too.
  last_progress_wall_ = t0;
  net_ = std::make_unique<Network>(sched_, cfg_.topo, cfg_.queue, derive_seed(cfg_.seed, 0x6e6574),
                                   enter_phase(Phase::kRoutes));
  for (const auto& f : cfg_.flows)
    if (f.src >= net_->num_hosts() || f.dst >= net_->num_hosts() || f.src == f.dst)
      throw std::invalid_argument("flow with a bad host");
  // A fault on a link the topology lacks would be skipped when due: refused.
  for (size_t i = 0; i < cfg_.faults.size(); ++i)
    if (cfg_.faults[i].kind != FaultSpec::Kind::kReroute &&
        cfg_.faults[i].edge >= cfg_.topo.edges.size())
      throw std::invalid_argument(
          "fault " + std::to_string(i) + ": edge " + std::to_string(cfg_.faults[i].edge) +
          " is not in the topology (" + std::to_string(cfg_.topo.edges.size()) + " edges)");
  flows_ = std::make_unique<FlowTable>(sched_, cfg_.flows);
  // The ideal's chains use the healthy fabric's paths: routes recomputed
  // after a fault (reroute_us) may leave a host unreachable.
  if (std::any_of(cfg_.flows.begin(), cfg_.flows.end(), [](const FlowSpec& f) {
        return f.after[0] != UINT32_MAX || f.after[1] != UINT32_MAX;
      })) {
    ideal_path_delay_.reserve(cfg_.flows.size());
    for (const auto& f : cfg_.flows) ideal_path_delay_.push_back(net_->path_delay(f.src, f.dst));
  }
  const uint32_t h = net_->num_hosts();
  hosts_.reserve(h);
  const BuildProgress host_progress = enter_phase(Phase::kHosts);
  if (baseline) {
    RcParams prm = cfg_.rc;
    // A flow is one RDMA WRITE of one QP: IBTA's message limit holds (a
    // capture's RETH DMA Length wrapped past 4 GiB, and 2^32 + 1 packets
    // read as one packet), and the QP numbers fit the BTH's 24 bits (QPN
    // 0x100 + flow wrapped past flow 16,776,959).
    if (const std::string e = RcShared::flow_count_error(cfg_.flows.size()); !e.empty())
      throw std::invalid_argument(e);
    for (size_t i = 0; i < cfg_.flows.size(); ++i) {
      const FlowSpec& f = cfg_.flows[i];
      if (f.bytes > RcShared::kMaxMessageBytes)
        throw std::invalid_argument(
            "flow " + std::to_string(i) + " (" + std::to_string(f.src) + " -> " +
            std::to_string(f.dst) + "): " + std::to_string(f.bytes) +
            " bytes, above the largest rocev2 / irn message, 2^31 bytes (a flow is one WRITE)");
    }
    if (cfg_.transport == TransportKind::kRoceV2) {
      prm.go_back_n = true;
      prm.window_packets = 0;
      prm.rto_low_packets = 0;
    } else {
      // IRN: window = BDP of the longest path, RTO_low below 3 packets.
      prm.go_back_n = false;
      prm.window_packets = bdp_packets(prm.mtu, prm.mtu + 16, 20);
      prm.rto_low_packets = 3;
    }
    rc_shared_ = std::make_unique<RcShared>(*net_, *flows_, prm);
    rc_shared_->wire_overhead = cfg_.wire_overhead;
    for (uint32_t i = 0; i < h; ++i) {
      auto host = std::make_unique<RcHost>(*rc_shared_, i, net_->host_port(i).rate_mbps());
      rc_shared_->hosts.push_back(host.get());
      net_->attach_host(i, *host);
      hosts_.push_back(std::move(host));
      if (host_progress.fn != nullptr) host_progress.fn(host_progress.ctx, i + 1, h);
    }
  } else {
    EndpointConfig ec = cfg_.endpoint;
    if (cfg_.transport == TransportKind::kSprayNoCc) ec.cc.enabled = false;
    // CC-1 and CC-9 leave the initial window and the connection-wide cap to a
    // driver that knows the fabric, as a NIC driver knows its link rate and
    // the fabric's RTT.
    const uint32_t ack_bytes = wire::kBaseHeaderSize + wire::kAckFixedSize + wire::kIcrcSize;
    const uint32_t bdp = bdp_packets(ec.mtu, data_bytes, ack_bytes);
    // CONN-2's retry interval outwaits the round trip, as the windows follow
    // it: 1 ms against a round trip of 8 ms gave up every handshake before
    // its answer came (the data-center presets' 14 us keep the 1 ms).
    ec.connect_retry_ns =
        std::max(ec.connect_retry_ns, 2 * fabric_rtt(data_bytes, ack_bytes).to_engine().ns);
    if (ec.cc.max_inflight_packets == 0 && cfg_.inflight_cap_bdp > 0)
      ec.cc.max_inflight_packets =
          packets_from_bdp("inflight_cap_bdp", cfg_.inflight_cap_bdp, bdp,
                           cfg_.inflight_cap_packets, "inflight_cap_packets", "CC-9");
    if (cfg_.initial_window_bdp > 0)
      ec.cc.initial_cwnd_packets =
          packets_from_bdp("initial_window_bdp", cfg_.initial_window_bdp, bdp, 0, nullptr, "CC-1");
    ec.cover_payload = false;
    // The engine would clamp a field out of range; a scenario that asks for
    // one (a cap of 1000 BDP at 800G) is refused with the field named.
    if (const std::string e = config_error(ec); !e.empty())
      throw std::invalid_argument("the simulated NICs' engine configuration: " + e);
    // A WR's length is 32 bits: a larger wr_bytes would post truncated WRs.
    if (cfg_.wr_bytes == 0 || cfg_.wr_bytes > UINT32_MAX)
      throw std::invalid_argument("wr_bytes (" + std::to_string(cfg_.wr_bytes) +
                                  ") is not in [1, 4294967295]");
    // Every WRITE targets one scratch region as large as the largest WRITE:
    // wr_bytes, or the largest flow if every flow is smaller.
    uint64_t largest = 0;
    for (const auto& f : cfg_.flows) largest = std::max(largest, f.bytes);
    const uint64_t region = std::max<uint64_t>(std::min(cfg_.wr_bytes, largest), 4096);
    shared_ = std::make_unique<MetaRoceShared>(*net_, *flows_, region, ec.mtu);
    shared_->wire_overhead = cfg_.wire_overhead;
    shared_->wr_bytes = cfg_.wr_bytes;
    for (uint32_t f = 0; f < flows_->size() && !shared_->signalled_flows; ++f)
      shared_->signalled_flows = flows_->has_dependents(f);
    for (uint32_t i = 0; i < h; ++i) {
      EndpointConfig hc = ec;
      hc.seed = derive_seed(cfg_.seed, 0x686f7374, i);
      auto host = std::make_unique<MetaRoceHost>(*shared_, i, hc);
      shared_->hosts.push_back(host.get());
      net_->attach_host(i, *host);
      hosts_.push_back(std::move(host));
      if (host_progress.fn != nullptr) host_progress.fn(host_progress.ctx, i + 1, h);
    }
  }
  flows_->start_dependent = [this](uint32_t f, SimTime now) {
    hosts_.at(flows_->at(f).spec.src)->start_flow(f, now);
  };
  // Output first, so that the capture and time series include the warm-up's
  // handshakes; their timestamps are simulated time, the workload starting at
  // warmup_us.
  if (cfg_.output.any()) output_ = std::make_unique<SimOutput>(*this);
  // Before the warm-up, whose handshakes take a large fabric seconds of wall
  // time: set after it, the progress line stayed silent through them.
  if (cfg_.progress) {
    last_progress_wall_ = wall_now();
    last_progress_events_ = sched_.events();
    sched_.set_tick(&Simulation::tick, this);
  }
  if (cfg_.preconnect) {
    const double w0 = wall_now();
    warm_up();
    loop_s_ += wall_now() - w0;
  }
  // Faults before flows at one instant: a fault at t = 0 is in place when
  // the flows starting at t = 0 send (ties run in the order scheduled, and
  // the Starter also applies the faults due before it starts anything).
  phase_ = Phase::kRun;
  faults_ = std::make_unique<Faults>(*this);
  starter_ = std::make_unique<Starter>(*this);
  wall_s_ = wall_now() - t0;
}

Simulation::~Simulation() {
  output_.reset();
  faults_.reset();
  starter_.reset();
  hosts_.clear();
}

void Simulation::tick(void* ctx, const Scheduler& s) {
  auto* self = static_cast<Simulation*>(ctx);
  const double w = wall_now();
  const double dt = w - self->last_progress_wall_;
  if (dt < self->cfg_.progress_interval_s) return;
  const RateText rate =
      rate_text(static_cast<double>(s.events() - self->last_progress_events_), dt, 1e6, 2);
  self->last_progress_wall_ = w;
  self->last_progress_events_ = s.events();
  if (self->phase_ == Phase::kWarmUp) {
    size_t settled = 0;
    for (const auto& h : self->hosts_) settled += h->connections_settled() ? 1 : 0;
    std::fprintf(stderr,
                 "[%s] warm-up t=%.1f us  hosts connected %zu/%zu  events %llu  (%s M "
                 "events/s)\n",
                 self->cfg_.name.c_str(), s.now().us(), settled, self->hosts_.size(),
                 static_cast<unsigned long long>(s.events()), rate.c_str());
    return;
  }
  std::fprintf(stderr, "[%s] t=%.1f us  flows %zu/%zu  events %llu  (%s M events/s)\n",
               self->cfg_.name.c_str(), s.now().us(), self->flows_->completed(),
               self->flows_->size(), static_cast<unsigned long long>(s.events()), rate.c_str());
}

BuildProgress Simulation::enter_phase(Phase p) {
  phase_ = p;
  last_progress_count_ = 0;
  if (!cfg_.progress) return {};
  count_since_ = wall_now();
  return {&Simulation::count_tick, this};
}

void Simulation::count_tick(void* ctx, uint32_t done, uint32_t total) {
  auto* self = static_cast<Simulation*>(ctx);
  const double w = wall_now();
  const double dt = w - self->last_progress_wall_;
  if (dt < self->cfg_.progress_interval_s) return;
  // No events here: the rate is the phase's own count's, over the phase's
  // time (a reroute's first line came a run line's second after, and read a
  // fifth of the rate).
  const RateText rate = rate_text(static_cast<double>(done - self->last_progress_count_),
                                  w - self->count_since_, 1, 0);
  self->last_progress_wall_ = w;
  self->last_progress_count_ = done;
  self->count_since_ = w;
  const char* name = self->cfg_.name.c_str();
  switch (self->phase_) {
    case Phase::kHosts:
      std::fprintf(stderr, "[%s] build  hosts %u/%u  (%s hosts/s)\n", name, done, total,
                   rate.c_str());
      return;
    case Phase::kReroute:
      std::fprintf(stderr, "[%s] t=%.1f us  reroute  routes to hosts %u/%u  (%s hosts/s)\n", name,
                   self->sched_.now().us(), done, total, rate.c_str());
      return;
    default:
      std::fprintf(stderr, "[%s] build  routes to hosts %u/%u  (%s hosts/s)\n", name, done, total,
                   rate.c_str());
      return;
  }
}

SimTime Simulation::fabric_rtt(uint32_t data_bytes, uint32_t ack_bytes) const {
  // The longest path's RTT: propagation both ways along the path whose links'
  // delays add up to the most (not one link's delay times the hops: a fabric
  // whose host links are short and fabric links long has its RTT in the
  // fabric), one data packet and one ACK serialized per hop.
  const uint32_t hops = std::max<uint32_t>(1, net_->graph().max_hops);
  const SimTime delay = net_->graph().max_path_delay;
  const uint64_t rate = cfg_.topo.host_rate_mbps;
  return SimTime{2 * delay.ps +
                 hops * serialization_time(data_bytes + cfg_.wire_overhead, rate).ps +
                 hops * serialization_time(ack_bytes + cfg_.wire_overhead, rate).ps};
}

uint32_t Simulation::bdp_packets(uint32_t mtu, uint32_t data_bytes, uint32_t ack_bytes) const {
  const uint64_t rate = cfg_.topo.host_rate_mbps;
  const SimTime rtt = fabric_rtt(data_bytes, ack_bytes);
  const uint64_t bdp = rtt.ps * rate / 8'000'000;
  return static_cast<uint32_t>(std::max<uint64_t>(1, (bdp + mtu - 1) / mtu));
}

void Simulation::warm_up() {
  std::vector<std::pair<uint32_t, uint32_t>> pairs;
  pairs.reserve(flows_->size());
  for (uint32_t i = 0; i < flows_->size(); ++i)
    pairs.emplace_back(flows_->at(i).spec.src, flows_->at(i).spec.dst);
  std::sort(pairs.begin(), pairs.end());
  pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
  for (const auto& [src, dst] : pairs) hosts_.at(src)->preconnect(dst, sched_.now());
  // Whole microseconds, so that flow start times stay round numbers; a
  // handshake that never settles (a peer unreachable) gives up after the
  // engine's own connect retries, which the loop bound covers.
  const SimTime step = SimTime::from_us(1);
  const SimTime limit = SimTime::from_ms(1000);
  auto settled = [&] {
    for (const auto& h : hosts_)
      if (!h->connections_settled()) return false;
    return true;
  };
  SimTime t = sched_.now();
  phase_ = Phase::kWarmUp;
  while (!settled() && t < limit) {
    t += step;
    sched_.run(t);
    // The scheduler's tick comes every 2^20 events; a step may have few,
    // and the wall time go into settled()'s walk over the hosts.
    if (cfg_.progress) tick(this, sched_);
  }
  phase_ = Phase::kRun;
  origin_ = t;
}

uint64_t Simulation::delivered_bytes() const {
  uint64_t n = 0;
  if (shared_) {
    for (const MetaRoceHost* h : shared_->hosts) n += h->data_bytes_received();
  } else if (rc_shared_) {
    for (uint32_t f = 0; f < flows_->size(); ++f) n += rc_shared_->delivered_bytes(f);
  }
  return n;
}

bool Simulation::finished() const {
  // The time run() reached, not the last event's: when the events before the
  // limit run out (the next one lies past it, or none is left), the last
  // event comes before the limit, and a caller looping until finished()
  // spun for ever.
  return flows_->all_done() || run_end() >= origin_ + cfg_.time_limit;
}

void Simulation::run(SimTime until) {
  const double t0 = wall_now();
  last_progress_wall_ = t0;
  last_progress_events_ = sched_.events();
  const SimTime end = std::min(until, origin_ + cfg_.time_limit);
  if (!flows_->all_done()) {
    sched_.run(end);
    // No event left before `end`: simulated time still got there.
    if (!sched_.stopped()) reached_ = std::max(reached_, end);
  }
  const double dt = wall_now() - t0;
  wall_s_ += dt;
  loop_s_ += dt;
}

namespace {

double pct(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(p * static_cast<double>(sorted.size()) + 0.999999);
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

uint64_t mix(uint64_t h, uint64_t v) {
  return fmix64(h ^ (v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2)));
}

}  // namespace

double Simulation::compute_ideal_us() const {
  const auto rate = static_cast<double>(cfg_.topo.host_rate_mbps);  // bits per us
  const std::vector<FlowSpec>& fl = cfg_.flows;
  // Each host NIC, sending and receiving, at line rate, no flow before its
  // start: for each start s, s plus the bytes of the NIC's flows that start
  // at s or later. With every start at 0, the busiest NIC's bytes.
  const uint32_t hosts = net_->num_hosts();
  std::vector<std::vector<std::pair<SimTime, uint64_t>>> nic(2 * size_t{hosts});
  for (const FlowSpec& f : fl) {
    nic[f.src].emplace_back(f.start, f.bytes);
    nic[hosts + f.dst].emplace_back(f.start, f.bytes);
  }
  double ideal = 0;
  for (auto& flows : nic) {
    std::sort(flows.begin(), flows.end(), std::greater<>());
    // Summed in a double: 15 flows of a file's largest, 9e18 bytes, wrapped
    // 64 bits (exact below 2^53, so every smaller scenario's ideal is as it was).
    double from_s = 0;
    for (const auto& [s, bytes] : flows) {
      from_s += static_cast<double>(bytes);
      ideal = std::max(ideal, s.us() + from_s * 8.0 / rate);
    }
  }
  // Dependent flows (ring collectives): the longest chain, each flow taking
  // its bytes at line rate plus its path's one-way propagation delay, from
  // its configured start or its last dependency's ideal end.
  const bool chained = std::any_of(fl.begin(), fl.end(), [](const FlowSpec& f) {
    return f.after[0] != UINT32_MAX || f.after[1] != UINT32_MAX;
  });
  if (!chained) return ideal;
  std::vector<uint32_t> waiting(fl.size(), 0);
  std::vector<std::vector<uint32_t>> next(fl.size());
  for (uint32_t i = 0; i < fl.size(); ++i)
    for (uint32_t d : fl[i].after)
      if (d != UINT32_MAX) {
        ++waiting[i];
        next[d].push_back(i);
      }
  std::vector<double> ready(fl.size());
  std::vector<uint32_t> todo;
  for (uint32_t i = 0; i < fl.size(); ++i) {
    ready[i] = fl[i].start.us();
    if (waiting[i] == 0) todo.push_back(i);
  }
  while (!todo.empty()) {
    const uint32_t i = todo.back();
    todo.pop_back();
    const double end =
        ready[i] + static_cast<double>(fl[i].bytes) * 8.0 / rate + ideal_path_delay_.at(i).us();
    ideal = std::max(ideal, end);
    for (uint32_t j : next[i]) {
      ready[j] = std::max(ready[j], end);
      if (--waiting[j] == 0) todo.push_back(j);
    }
  }
  return ideal;
}

Report Simulation::report() const {
  Report r;
  r.name = cfg_.name;
  r.transport = transport_name(cfg_.transport);
  r.topology = cfg_.topo.name;
  r.seed = cfg_.seed;
  r.hosts = net_->num_hosts();
  r.flows = flows_->size();
  r.flows_completed = flows_->completed();
  r.flows_failed = flows_->failed();
  std::vector<double> fct;
  SimTime last{0};
  uint64_t digest = 0x6d657461;
  // A flow that did not finish (cut off by the time limit, or failed) counts
  // at its age when the run ended, a lower bound of its FCT: over the
  // finished flows alone, a run whose stuck flows never ended read the p99
  // and max of the others, and one cut off before any finished read 0.
  const SimTime end = run_end();
  for (size_t i = 0; i < flows_->size(); ++i) {
    const FlowState& f = flows_->at(i);
    digest = mix(digest, f.finish.ps);
    if (f.done()) {
      fct.push_back((f.finish - f.spec.start).us());
      last = std::max(last, f.finish);
    } else {
      fct.push_back(end > f.spec.start ? (end - f.spec.start).us() : 0.0);
    }
  }
  std::sort(fct.begin(), fct.end());
  r.fct_p50_us = pct(fct, 0.5);
  r.fct_p99_us = pct(fct, 0.99);
  r.fct_max_us = fct.empty() ? 0 : fct.back();
  double sum = 0;
  for (double v : fct) sum += v;
  r.fct_mean_us = fct.empty() ? 0 : sum / static_cast<double>(fct.size());
  // Unfinished (a flow cut off by the time limit, or one that failed): the
  // end of the run, not the last finish of the flows that did complete.
  r.completion_us = ((flows_->completed() == flows_->size() ? last : run_end()) - origin_).us();
  r.warmup_us = origin_.us();
  r.ideal_us = compute_ideal_us();
  r.delivered_bytes = delivered_bytes();
  r.goodput_gbps = r.completion_us > 0
                       ? static_cast<double>(r.delivered_bytes) * 8.0 / (r.completion_us * 1e3)
                       : 0;
  // A pause still on at the time limit lasted until then, not until the
  // last event, which may come well before.
  const NetworkStats ns = net_->stats(run_end());
  r.drops = ns.drops;
  r.trimmed = ns.trimmed;
  r.fault_drops = ns.fault_drops;
  r.no_route_drops = ns.no_route_drops;
  r.ecn_marks = ns.ecn_marks;
  r.max_queue_bytes = ns.max_queue_bytes;
  r.packets_forwarded = ns.tx_packets;
  for (const auto& h : hosts_) h->add_totals(r.transport_totals);
  r.connect_failures = shared_ ? shared_->connect_failures : 0;
  r.errors = shared_ ? shared_->errors : 0;
  r.pfc_pause_us = ns.pfc_paused.us();
  r.pfc_pauses = ns.pfc_pauses;
  r.sim_time_us = sched_.now().us();
  r.events = sched_.events();
  r.packet_pool_peak = net_->pool().peak();
  add_link_and_path_stats(r);
  const TransportTotals& t = r.transport_totals;
  for (uint64_t v : {r.flows_completed, r.flows_failed, r.drops, r.fault_drops, r.ecn_marks,
                     r.max_queue_bytes, r.packets_forwarded, t.data_packets_sent, t.retransmissions,
                     t.timeouts, t.losses_declared, t.path_retirements, t.ce_received,
                     t.duplicates_received, t.acks_sent, t.bad_packets, r.events, sched_.now().ps})
    digest = mix(digest, v);
  if (cfg_.queue.pfc)
    digest = mix(mix(digest, ns.pfc_paused.ps), r.pfc_pauses);  // (older digests unchanged)
  // Only a run that trimmed differs from one without trimming (a baseline
  // run with queue.trim=1 is the same run).
  if (r.trimmed != 0) digest = mix(digest, r.trimmed);  // (older digests unchanged)
  // Only a run with an unreachable host drops for want of a route.
  if (r.no_route_drops != 0) digest = mix(digest, r.no_route_drops);  // (older digests unchanged)
  r.digest = digest;
  r.wall_s = wall_s_;
  // The events, the warm-up's included, over the time spent running them.
  r.events_per_s = loop_s_ > 0 ? static_cast<double>(r.events) / loop_s_ : 0;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  r.peak_rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  return r;
}

}  // namespace metaroce::sim
