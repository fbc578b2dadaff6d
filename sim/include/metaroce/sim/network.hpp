// The network: nodes (switches and hosts) joined by full-duplex links. Each
// direction of a link is a Port (output queue + serializer) feeding a Pipe
// (propagation delay). Switches are output-queued with a per-port drop-tail
// buffer, ECN marking (a threshold or a RED-like min..max ramp) and ECMP by a
// salted hash of (src, dst, UDP source port = entropy, UDP destination port).
// Faults act on links: down/up, degraded rate, gray (silent random) drops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "metaroce/config.hpp"
#include "metaroce/sim/packet.hpp"
#include "metaroce/sim/rng.hpp"
#include "metaroce/sim/scheduler.hpp"
#include "metaroce/sim/time.hpp"

namespace metaroce::sim {

class Network;
class Port;

// Anything with ports: a switch or a host NIC.
class Node {
 public:
  virtual ~Node() = default;
  // A packet finished arriving on `in_port`. The node owns it from now on.
  virtual void receive(Packet* p, uint32_t in_port, SimTime now) = 0;
  // Port `port` has finished sending and its queue is empty.
  virtual void port_idle(uint32_t port, SimTime now) {
    (void)port;
    (void)now;
  }
  std::vector<Port*> ports;  // index = port number
  uint32_t id = 0;           // node id (hosts first, then switches)
};

struct LinkSpec {
  uint64_t rate_mbps = 100'000;
  SimTime delay = SimTime::from_us(1);
};

// Output-queue parameters of a switch port. ecn_kmin == ecn_kmax: a step
// threshold; otherwise the marking probability ramps linearly from 0 at kmin
// to ecn_pmax at kmax and is 1 above kmax. ecn_kmax == 0 disables marking.
//
// pfc = true makes the fabric lossless (priority flow control, one class):
// every port becomes a real FIFO that can be paused, and each switch accounts
// bytes per *ingress* port (from arrival until the packet starts leaving).
// Above XOFF = buffer_bytes - headroom the switch sends PAUSE upstream, below
// XON = XOFF - 2 x pfc_frame_bytes it sends RESUME; either takes the link's
// propagation delay to act. headroom = 2 x (rate x delay) + 2 x
// pfc_frame_bytes (the bytes that can still arrive after PAUSE is sent; the
// simulation sets a frame to the transport's mtu + 104, 4200 B at the default
// MTU). pfc_xoff_bytes and pfc_xon_bytes, when set, replace the derived
// thresholds at every switch port (XON alone: XOFF stays derived; XOFF alone:
// XON = XOFF - 2 frames); queue_spec_error() says what is wrong with them,
// and Network refuses them. Output ports then have no
// drop-tail limit (their occupancy is bounded by the ingress limits); a packet
// that would take an ingress over buffer_bytes is dropped and counted (it
// does not happen when the headroom is right).
//
// trim = true (not with PFC) makes switches trim (spec TRIM-1): a MetaRoCE
// data packet that would overflow buffer_bytes loses its payload instead and
// is queued, marked trimmed, if its headers fit within buffer_bytes +
// trim_allowance_bytes; otherwise it is dropped. With trim_priority (the
// default, as TRIM-1 recommends and NDP-style switches do) trimmed headers
// leave through a header lane ahead of the data queue, at this and every
// later hop, so the news of a loss is not held up by the queue that caused
// it; without it they wait in the same FIFO as data. Baseline (RoCEv2, IRN)
// packets are never trimmed.
// The DSCP of the network-control class: CS6, the engine's default for ACKs
// and NAKs (ENC-6) and deployments' class for CNPs.
inline constexpr uint8_t kControlDscp = kDefaultControlDscp;
inline constexpr uint8_t kNoPriorityDscp = 64;

struct QueueSpec {
  uint64_t buffer_bytes = 175'000;
  uint64_t ecn_kmin = 37'000;
  uint64_t ecn_kmax = 145'000;
  double ecn_pmax = 1.0;
  bool pfc = false;
  uint64_t pfc_frame_bytes = 4'200;          // about one MTU-sized frame (PFC headroom, XON gap)
  std::optional<uint64_t> pfc_xoff_bytes{};  // PAUSE above this many ingress bytes; unset: derived
  std::optional<uint64_t> pfc_xon_bytes{};   // RESUME at or below; unset: derived
  bool trim = false;
  uint64_t trim_allowance_bytes = 16'384;
  bool trim_priority = true;
  // Packets of this DSCP take the header lane at every port and are never
  // paused (Packet::dscp); kNoPriorityDscp: no such class.
  uint8_t priority_dscp = kControlDscp;
};

// Why q cannot work, in one line that starts with the key at fault
// ("queue.KEY (VALUE) ..."): ecn_kmin above ecn_kmax, ecn_pmax outside
// [0, 1], pfc_xon_bytes above pfc_xoff_bytes, or XOFF above buffer_bytes;
// empty if it can. The one check of a [queue] table (config_file.cpp), of
// the queue after metaroce-sim's --set overrides, and of Network's own
// argument. A PFC threshold left to be derived is checked per port by Network.
[[nodiscard]] std::string queue_spec_error(const QueueSpec& q);

struct PortStats {
  uint64_t tx_packets = 0;
  uint64_t tx_bytes = 0;
  uint64_t drops = 0;        // buffer overflow (drop-tail)
  uint64_t trimmed = 0;      // data packets cut to their headers instead (QueueSpec::trim)
  uint64_t fault_drops = 0;  // link down or gray failure
  uint64_t ecn_marks = 0;
  uint64_t max_queue_bytes = 0;
  uint64_t pfc_pauses = 0;  // PAUSE frames that took effect on this port
  SimTime pfc_paused{0};    // time spent paused (closed intervals)
  // Time packets waited behind others before serialization started, split
  // into data packets and small control packets (ACKs, NAKs, CNPs), which
  // wait behind data. Not kept with PFC, where a packet's wait is not known
  // when it is queued.
  SimTime data_wait{0}, ctrl_wait{0};
  uint64_t data_packets = 0, ctrl_packets = 0;
};

// Sees every packet a port starts to send (a capture point on one direction
// of a link: --pcap). Ports have none unless one is asked for, so without a
// capture a port pays one test of a null pointer per packet.
class PacketTap {
 public:
  virtual ~PacketTap() = default;
  // p starts crossing the link at `start` (>= now: it may wait behind the
  // packets already queued); called at `now`, when p is queued.
  virtual void on_transmit(const Packet& p, const Port& port, SimTime now, SimTime start) = 0;
};

// Propagation: packets in flight on one direction of a link, in arrival
// order (a FIFO: the port serializes, the delay is constant). Only the head
// is scheduled.
class Pipe final : public EventSource {
 public:
  void on_event(SimTime now) override;
  void push(Packet* p, SimTime arrival);
  // The link went down: what is on it is lost.
  void cut();
  // When the packet being serialized at `now` is done (`now` if none is):
  // the first in the ring that has not left the port yet. Its predecessors
  // are propagating, so the walk is short.
  [[nodiscard]] SimTime serializing_until(SimTime now) const;

  Port* port = nullptr;  // the port feeding this pipe
  Node* to = nullptr;
  uint32_t to_port = 0;
  SimTime delay;

 private:
  struct InFlight {
    SimTime at;
    Packet* p;
  };
  Ring<InFlight> ring_;
};

// One direction of a link: an output queue and a serializer. A FIFO at a
// fixed rate needs no event per packet: a packet's departure time is known
// when it is queued (start = max(now, busy_until)), so the port hands it to
// the pipe at once with its arrival time, and the queue occupancy at any
// instant is the unserialized backlog, (busy_until - now) * rate. Drop-tail
// and ECN marking act on that backlog when the packet is queued. A port
// schedules an event only for an owner that asks to hear when it goes idle
// (a host NIC pulling from its engine). With PFC (QueueSpec::pfc) a port can
// be paused, so it keeps a real FIFO and schedules an event at the end of
// every packet to start the next.
class Port final : public EventSource {
 public:
  // fabric: the fabric's queue settings. A switch port (switch_port) takes
  // its buffer, ECN and trimming; a host NIC has none of them but obeys PFC
  // and serves the priority class (`priority_dscp`) first too, as a NIC's
  // strict-priority traffic class.
  Port(Network& net, Node* owner, uint32_t index, const LinkSpec& link, const QueueSpec& fabric,
       bool switch_port, uint64_t seed);
  ~Port() override;
  // Queues p for transmission (or drops it).
  void enqueue(Packet* p, SimTime now);
  // Busy: serializing, or (PFC) paused or holding queued packets.
  [[nodiscard]] bool busy(SimTime now) const {
    return busy_until_ > now || (pfc_ && (paused_ || !fifo_.empty()));
  }
  // Bytes queued ahead of a packet arriving now (including the unsent part of
  // the packet on the wire).
  [[nodiscard]] uint64_t backlog_bytes(SimTime now) const {
    if (now >= earlier_rates_until_) [[likely]]
      return (busy_until_ > now ? (busy_until_.ps - now.ps) * rate_mbps_ / 8'000'000 : 0) +
             fifo_bytes_;
    return backlog_across_rate_changes(now) + fifo_bytes_;
  }
  // Of the bytes counted sent (tx_bytes: at enqueue, departures being fixed
  // then), those not yet serialized onto the link at `now`.
  [[nodiscard]] uint64_t unsent_bytes(SimTime now) const {
    return backlog_bytes(now) - fifo_bytes_;
  }
  [[nodiscard]] const PortStats& stats() const { return stats_; }
  // Time paused so far, the open interval included.
  [[nodiscard]] SimTime paused_time(SimTime now) const {
    return stats_.pfc_paused + (paused_ ? now - paused_since_ : SimTime{0});
  }
  [[nodiscard]] bool paused() const { return paused_; }
  // PFC: the peer asks this port to stop (pause) or go on; takes effect at `at`.
  void pfc_signal(bool pause, SimTime at);
  void on_event(SimTime now) override;  // went idle (notify_idle) / finished a packet (PFC)
  // Counts and frees a packet lost here (fault: link down / gray).
  void drop(Packet* p, bool fault);
  bool notify_idle = false;
  PacketTap* tap = nullptr;  // capture (--pcap); null: none

  // Faults. A rate change applies to packets queued after it.
  void set_up(bool up, SimTime now);
  [[nodiscard]] bool up() const { return up_; }
  void set_rate(uint64_t rate_mbps, SimTime now);
  [[nodiscard]] uint64_t rate_mbps() const { return rate_mbps_; }
  // The bits the link could have carried from time 0 to now, at the rate it
  // had at each instant (for utilization after a rate change).
  [[nodiscard]] double capacity_bits(SimTime now) const {
    return rate_bits_ + rate_bits_since(now);
  }
  void set_drop_fraction(double f) { drop_fraction_ = f; }

  // The far end of the link, for both lanes.
  void deliver_to(Node* to, uint32_t to_port);

  Pipe pipe;
  // Trimmed headers (QueueSpec::trim_priority) and the network-control class
  // (QueueSpec::priority_dscp): the same link, a lane of its own so that they
  // may overtake queued or paused data.
  Pipe header_pipe;
  Node* owner;
  const uint32_t index;
  uint32_t edge = 0;  // topology edge id

 private:
  friend class Pipe;
  // Starts serializing p now; it waits from `queued` (a PFC FIFO's packet
  // was queued before now).
  void transmit(Packet* p, SimTime now, SimTime queued);
  void transmit_header(Packet* p, SimTime now);  // header lane: ahead of queued data
  void note_backlog(SimTime now);                // stats_.max_queue_bytes
  void put_on_wire(Packet* p, SimTime end, Pipe& lane);
  void start_next(SimTime now);  // PFC: next queued packet, if allowed
  void apply_pause(bool pause, SimTime now);
  void released(Packet* p, SimTime now);   // p left this switch's buffer (PFC accounting)
  bool trim(Packet* p, uint64_t backlog);  // cuts p to fit, if it may be (QueueSpec::trim)
  [[nodiscard]] uint64_t backlog_across_rate_changes(SimTime now) const;
  [[nodiscard]] double rate_bits_since(SimTime now) const {
    return static_cast<double>(rate_mbps_) * 1e-6 * static_cast<double>(now.ps - rate_since_.ps);
  }

  // Delivers PAUSE/RESUME after the link delay (one pending event: the head).
  class PfcTimer final : public EventSource {
   public:
    void on_event(SimTime now) override;
    Port* port = nullptr;
    Ring<std::pair<SimTime, bool>> ring;
  };

  Network& net_;
  SimTime busy_until_{0};
  SimTime header_busy_until_{0};
  uint64_t rate_mbps_;
  double rate_bits_ = 0;   // capacity before rate_since_ (set_rate)
  SimTime rate_since_{0};  // when rate_mbps_ took effect
  // Data queued before a rate change leaves at the rate it was queued at:
  // each entry is the end of such a stretch of the lane and its rate, oldest
  // first; rate_mbps_ serializes from the last end to busy_until_.
  struct RateStretch {
    SimTime until;
    uint64_t rate_mbps;
  };
  std::vector<RateStretch> earlier_rates_;
  SimTime earlier_rates_until_{0};  // the last stretch's end; 0: none
  bool has_queue_limits_;
  QueueSpec q_;
  bool up_ = true;
  double drop_fraction_ = 0;
  Rng rng_;
  PortStats stats_;
  // PFC mode.
  bool pfc_ = false;
  bool paused_ = false;
  SimTime paused_since_{0};
  Ring<Packet*> fifo_;  // waiting, not yet serializing
  uint64_t fifo_bytes_ = 0;
  PfcTimer pfc_timer_;
};

class Switch final : public Node {
 public:
  Switch(Network& net, uint64_t salt) : net_(net), salt_(salt) {}
  void receive(Packet* p, uint32_t in_port, SimTime now) override;
  // The output port ECMP picks for a packet (src, dst, entropy, dport).
  [[nodiscard]] uint32_t select_port(uint32_t src, uint32_t dst, uint16_t entropy,
                                     uint16_t dport) const;
  // Ports on a shortest path to host `dst` (the ECMP group); empty when no
  // link that is up leads there (after a reroute around a host's link).
  [[nodiscard]] std::span<const uint16_t> group_for(uint32_t dst) const {
    const uint32_t r = route[dst];
    return {group_ports.data() + (r >> 8), r & 0xff};
  }

  // dst host -> (offset into group_ports << 8) | group size: one load per
  // forwarding decision, then one for the port. kNoRoute: an empty group.
  std::vector<uint32_t> route;
  // Not a port: with port 0 standing in for "none", a reroute sent an
  // unreachable host's packets down to another host, which took them.
  static constexpr uint32_t kNoRoute = 0;
  std::vector<uint16_t> group_ports;
  uint8_t tier = 0;

  // PFC ingress accounting (enabled by QueueSpec::pfc).
  void enable_pfc(const QueueSpec& q);
  // p (which arrived on p->in_port) left this switch's buffer.
  void pfc_release(const Packet& p, SimTime now);
  [[nodiscard]] uint64_t ingress_bytes(uint32_t port) const { return ingress_.at(port); }

 private:
  void pfc_send(uint32_t in_port, bool pause, SimTime now);

  Network& net_;
  uint64_t salt_;
  bool pfc_ = false;
  uint8_t priority_dscp_ = kNoPriorityDscp;  // never paused
  uint64_t pfc_limit_ = 0;
  std::vector<uint64_t> ingress_, xoff_, xon_;
  std::vector<uint8_t> xoff_sent_;
};

// The wiring of a network. Node ids: hosts [0, num_hosts), then switches.
struct TopoGraph {
  struct Edge {
    uint32_t a = 0, b = 0;
    LinkSpec spec;
  };
  std::string name;
  uint32_t num_hosts = 0;
  uint32_t num_switches = 0;
  std::vector<uint8_t> switch_tier;  // per switch: 0 ToR/leaf, 1 agg/spine, 2 core
  std::vector<Edge> edges;
  uint64_t host_rate_mbps = 100'000;
  uint32_t max_hops = 0;  // links on the longest host-to-host shortest path
  // One-way propagation delay (the links' delays summed) of the slowest
  // host-to-host shortest path of the healthy fabric: the fabric's RTT is
  // twice this plus serialization, whatever the links' delays per tier.
  SimTime max_path_delay{0};
};

struct NetworkStats {
  uint64_t tx_packets = 0;
  uint64_t drops = 0;
  uint64_t trimmed = 0;
  uint64_t fault_drops = 0;
  uint64_t no_route_drops = 0;  // Network::drop_unroutable
  uint64_t ecn_marks = 0;
  uint64_t max_queue_bytes = 0;
  uint64_t pfc_pauses = 0;
  SimTime pfc_paused{0};  // summed over ports, open intervals up to stats()' `end`
};

// Called by Network's constructor (and reroute()) as its routes are computed,
// after each destination host (`done` of `total`): a large fabric took wall
// seconds there (leafspine8192 until stop 48: about 1 s of CPU, a
// breadth-first search per host; now one per leaf, under 0.1 s), and a
// progress report would otherwise say nothing until the warm-up.
struct BuildProgress {
  void (*fn)(void* ctx, uint32_t done, uint32_t total) = nullptr;
  void* ctx = nullptr;
};

class Network {
 public:
  // Builds switches and links; hosts are attached by the transport with
  // attach_host() before any packet moves. Routes are computed here
  // (shortest paths, all equal-cost next hops form the ECMP group).
  Network(Scheduler& sched, const TopoGraph& graph, const QueueSpec& queue, uint64_t seed,
          BuildProgress progress = {});
  Network(const Network&) = delete;
  Network& operator=(const Network&) = delete;
  ~Network();

  void attach_host(uint32_t host, Node& node);

  [[nodiscard]] Scheduler& sched() { return sched_; }
  [[nodiscard]] PacketPool& pool() { return pool_; }
  [[nodiscard]] const TopoGraph& graph() const { return graph_; }
  [[nodiscard]] uint32_t num_hosts() const { return graph_.num_hosts; }
  [[nodiscard]] Switch& sw(uint32_t i) { return *switches_[i]; }
  [[nodiscard]] const Switch& sw(uint32_t i) const { return *switches_[i]; }
  [[nodiscard]] size_t num_switches() const { return switches_.size(); }
  // The host's NIC port (port 0 of the host).
  [[nodiscard]] Port& host_port(uint32_t host) { return *host_ports_[host]; }
  // The two directions of edge e: a->b and b->a.
  [[nodiscard]] Port& edge_port(uint32_t e, bool reverse) {
    return *ports_[2 * size_t{e} + (reverse ? 1 : 0)];
  }

  // Faults on both directions of edge e.
  void set_link_up(uint32_t e, bool up, SimTime now);
  // Routing converges: ECMP groups recomputed without the links that are down.
  // (The ideal's hop count, graph().max_hops, stays the whole fabric's.)
  // `progress` hears of each destination done, as the build's does (on
  // leafspine8192 a reroute took about a second until stop 48).
  void reroute(BuildProgress progress = {}) { (void)compute_routes(false, progress); }
  void set_link_rate(uint32_t e, uint64_t rate_mbps, SimTime now);
  void set_link_drop(uint32_t e, double fraction);

  // Counters summed over every port; a pause still on counts up to `end`
  // (not before the last event: a run cut by its time limit ends there).
  [[nodiscard]] NetworkStats stats(SimTime end) const;
  // Propagation delay from host src to host dst along the first port of each
  // ECMP group (every shortest path has as many hops; with equal link delays,
  // the same delay). SimTime::never() if dst is unreachable.
  [[nodiscard]] SimTime path_delay(uint32_t src, uint32_t dst) const;

  // Counts and frees a packet that cannot reach its destination host: a
  // switch with no route to it, one past the hop limit, or a host it reached
  // that is not its destination (hosts do not forward).
  void drop_unroutable(Packet* p) {
    ++no_route_drops_;
    pool_.release(p);
  }

 private:
  // ECMP groups over the links that are up; returns the links on the longest
  // host-to-host shortest path. With measure_delay (at construction, the
  // healthy fabric) it also sets graph_.max_path_delay. `progress` hears
  // of each destination done.
  uint32_t compute_routes(bool measure_delay, BuildProgress progress = {});

  Scheduler& sched_;
  TopoGraph graph_;
  PacketPool pool_;
  std::vector<std::unique_ptr<Switch>> switches_;
  std::vector<std::unique_ptr<Port>> ports_;  // 2 per edge
  std::vector<Port*> host_ports_;
  std::vector<Node*> nodes_;  // by node id (hosts null until attached)
  std::vector<std::unique_ptr<Node>> placeholders_;
  uint64_t no_route_drops_ = 0;
};

}  // namespace metaroce::sim
