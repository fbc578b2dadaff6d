#include "metaroce/sim/network.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "metaroce/wire.hpp"

namespace metaroce::sim {
namespace {

// Stands in for a host until the transport attaches the real one.
class HostStub final : public Node {
 public:
  explicit HostStub(PacketPool& pool) : pool_(pool) {}
  void receive(Packet* p, uint32_t, SimTime) override { pool_.release(p); }

 private:
  PacketPool& pool_;
};

constexpr uint32_t kMaxHops = 64;

}  // namespace

// ------------------------------------------------------------------ Pipe

void Pipe::push(Packet* p, SimTime arrival) {
  ring_.push(InFlight{arrival, p});
  if (!pending()) port->net_.sched().schedule(*this, arrival);
}

SimTime Pipe::serializing_until(SimTime now) const {
  for (size_t i = 0; i < ring_.size(); ++i)
    if (ring_[i].at - delay > now) return ring_[i].at - delay;
  return now;
}

void Pipe::on_event(SimTime now) {
  const InFlight f = ring_.pop();
  if (!ring_.empty()) {
    port->net_.sched().schedule(*this, ring_.front().at);
    __builtin_prefetch(ring_.front().p);  // touched when it arrives
  }
  to->receive(f.p, to_port, now);
}

void Pipe::cut() {
  port->net_.sched().cancel(*this);
  while (!ring_.empty()) port->drop(ring_.pop().p, true);
}

// ------------------------------------------------------------------ Port

Port::Port(Network& net, Node* own, uint32_t idx, const LinkSpec& link, const QueueSpec& fabric,
           bool switch_port, uint64_t seed)
    : owner(own),
      index(idx),
      net_(net),
      rate_mbps_(link.rate_mbps),
      has_queue_limits_(switch_port),
      q_(switch_port ? fabric : QueueSpec{}),
      rng_(seed),
      pfc_(fabric.pfc) {
  q_.priority_dscp = fabric.priority_dscp;
  pfc_timer_.port = this;
  pipe.port = this;
  pipe.delay = link.delay;
  header_pipe.port = this;
  header_pipe.delay = link.delay;
}

void Port::deliver_to(Node* to, uint32_t to_port) {
  pipe.to = header_pipe.to = to;
  pipe.to_port = header_pipe.to_port = to_port;
}

void Port::drop(Packet* p, bool fault) {
  if (fault)
    ++stats_.fault_drops;
  else
    ++stats_.drops;
  net_.pool().release(p);
}

void Port::enqueue(Packet* p, SimTime now) {
  if (!up_) {
    // Only packets the switch counted at ingress give bytes back: the
    // priority class (CNPs, MetaRoCE ACKs) is never counted, and its in_port
    // is not this switch's.
    if (p->dscp != q_.priority_dscp) released(p, now);
    drop(p, true);
    return;
  }
  // The priority class is a queue of its own: the data queue's backlog
  // neither drops nor marks it (ECN marks per queue, as switches do).
  if (p->dscp == q_.priority_dscp) {
    transmit_header(p, now);
    return;
  }
  if (has_queue_limits_) {
    const uint64_t backlog = backlog_bytes(now);
    if (!pfc_ && backlog + p->wire_bytes > q_.buffer_bytes && !(q_.trim && trim(p, backlog))) {
      drop(p, false);
      return;
    }
    if (p->ecn != kEcnNotEct && q_.ecn_kmax > 0 && backlog >= q_.ecn_kmin) {
      bool mark;
      if (backlog >= q_.ecn_kmax || q_.ecn_kmin == q_.ecn_kmax) {
        mark = true;
      } else {
        const double f = static_cast<double>(backlog - q_.ecn_kmin) /
                         static_cast<double>(q_.ecn_kmax - q_.ecn_kmin);
        mark = rng_.chance(f * q_.ecn_pmax);
      }
      if (mark) {
        p->ecn = kEcnCe;
        ++stats_.ecn_marks;
      }
    }
  }
  if (p->trimmed && q_.trim_priority) {
    transmit_header(p, now);
    return;
  }
  if (pfc_ && (paused_ || busy_until_ > now || !fifo_.empty())) {
    p->queued_at = now;
    fifo_.push(p);
    fifo_bytes_ += p->wire_bytes;
  } else {
    transmit(p, now, now);
  }
  note_backlog(now);
}

// The deepest backlog, taken with the accepted packet in it, as queues.csv
// samples it: taken before it (and never for a header lane's packet), the
// report's max_queue_bytes was below the CSV's (80982 against 84646 B).
void Port::note_backlog(SimTime now) {
  if (has_queue_limits_)
    stats_.max_queue_bytes = std::max(stats_.max_queue_bytes, backlog_bytes(now));
}

// TRIM-1: the payload goes, the headers and ICRC stay, so the receiver can
// name the lost packet at once. Only MetaRoCE data packets: a switch that
// trims knows the protocol's port and opcodes, and the baselines' packets are
// not MetaRoCE. A packet trimmed upstream is trimmed again for nothing.
bool Port::trim(Packet* p, uint64_t backlog) {
  if (p->dport != wire::kDefaultUdpPort || p->header_len < 2 ||
      !wire::is_data(static_cast<wire::Opcode>(p->hdr[1])))
    return false;
  const uint32_t bytes = p->wire_bytes - p->payload_len;
  if (backlog + bytes > q_.buffer_bytes + q_.trim_allowance_bytes) return false;
  if (!p->trimmed) ++stats_.trimmed;
  p->wire_bytes = bytes;
  p->payload_len = 0;
  p->trimmed = true;
  return true;
}

void Port::transmit(Packet* p, SimTime now, SimTime queued) {
  if (pfc_) released(p, now);
  const SimTime start = std::max(now, busy_until_);
  busy_until_ = start + serialization_time(p->wire_bytes, rate_mbps_);
  if (p->wire_bytes >= kControlPacketBytes) {
    stats_.data_wait += start - queued;
    ++stats_.data_packets;
  } else {
    stats_.ctrl_wait += start - queued;
    ++stats_.ctrl_packets;
  }
  if (tap != nullptr) [[unlikely]]
    tap->on_transmit(*p, *this, now, start);
  put_on_wire(p, busy_until_, pipe);
  if (notify_idle || pfc_) net_.sched().schedule(*this, busy_until_);
}

// Strict priority over the data queue, without preemption: the header waits
// for the data packet on the wire, then goes. The queued data's departures
// were fixed when it was queued, so the header's bytes are charged to the
// data lane instead: data queued from now on starts that much later, and
// the link never carries more than its rate.
void Port::transmit_header(Packet* p, SimTime now) {
  const SimTime on_wire_until = busy_until_ > now ? pipe.serializing_until(now) : now;
  const SimTime start = std::max(on_wire_until, header_busy_until_);
  const SimTime ser = serialization_time(p->wire_bytes, rate_mbps_);
  header_busy_until_ = start + ser;
  busy_until_ = std::max(busy_until_, now) + ser;
  stats_.ctrl_wait += start - now;
  ++stats_.ctrl_packets;
  if (tap != nullptr) [[unlikely]]
    tap->on_transmit(*p, *this, now, start);
  put_on_wire(p, header_busy_until_, header_pipe);
  note_backlog(now);
  // The data lane's next start moved: whoever waits for it must hear when.
  if (notify_idle || pfc_) net_.sched().schedule(*this, busy_until_);
}

void Port::put_on_wire(Packet* p, SimTime end, Pipe& lane) {
  ++stats_.tx_packets;
  stats_.tx_bytes += p->wire_bytes;
  if (drop_fraction_ > 0 && rng_.chance(drop_fraction_)) {
    drop(p, true);  // gray failure: the packet uses the link, then vanishes
  } else {
    lane.push(p, end + lane.delay);
  }
}

void Port::released(Packet* p, SimTime now) {
  if (pfc_ && has_queue_limits_) static_cast<Switch*>(owner)->pfc_release(*p, now);
}

void Port::start_next(SimTime now) {
  Packet* p = fifo_.pop();
  fifo_bytes_ -= p->wire_bytes;
  transmit(p, now, p->queued_at);
}

void Port::on_event(SimTime now) {
  if (pfc_) {
    if (paused_) return;  // RESUME restarts it
    if (!fifo_.empty()) {
      start_next(now);
      return;
    }
    if (!notify_idle) return;
  }
  owner->port_idle(index, now);
}

void Port::pfc_signal(bool pause, SimTime at) {
  pfc_timer_.ring.push({at, pause});
  if (!pfc_timer_.pending()) net_.sched().schedule(pfc_timer_, at);
}

void Port::PfcTimer::on_event(SimTime now) {
  const auto [at, pause] = ring.pop();
  (void)at;
  if (!ring.empty()) port->net_.sched().schedule(*this, ring.front().first);
  port->apply_pause(pause, now);
}

void Port::apply_pause(bool pause, SimTime now) {
  if (pause == paused_) return;
  paused_ = pause;
  if (pause) {
    paused_since_ = now;
    ++stats_.pfc_pauses;
    return;
  }
  stats_.pfc_paused += now - paused_since_;
  if (busy_until_ > now || pending()) return;  // the end of the current packet restarts it
  if (!fifo_.empty()) {
    start_next(now);
  } else if (notify_idle) {
    owner->port_idle(index, now);
  }
}

Port::~Port() { net_.sched().cancel(pfc_timer_); }

void Port::set_rate(uint64_t rate_mbps, SimTime now) {
  rate_bits_ += rate_bits_since(now);
  rate_since_ = now;
  std::erase_if(earlier_rates_, [now](const RateStretch& s) { return s.until <= now; });
  if (busy_until_ > now) {
    earlier_rates_.push_back({busy_until_, rate_mbps_});
    earlier_rates_until_ = busy_until_;
  }
  rate_mbps_ = rate_mbps;
}

uint64_t Port::backlog_across_rate_changes(SimTime now) const {
  uint64_t bytes = 0;
  SimTime from = now;
  for (const RateStretch& s : earlier_rates_) {
    if (s.until <= from) continue;
    bytes += (s.until.ps - from.ps) * s.rate_mbps / 8'000'000;
    from = s.until;
  }
  if (busy_until_ > from) bytes += (busy_until_.ps - from.ps) * rate_mbps_ / 8'000'000;
  return bytes;
}

void Port::set_up(bool up, SimTime now) {
  if (!up && up_) {
    // Packets queued or on the wire are lost now: left in the pipes, they
    // would hold back the packets sent once the link is up again (a pipe
    // delivers in order).
    pipe.cut();
    header_pipe.cut();
    busy_until_ = now;
    header_busy_until_ = now;
    earlier_rates_.clear();
    earlier_rates_until_ = SimTime{0};
    while (!fifo_.empty()) {
      Packet* p = fifo_.pop();
      fifo_bytes_ -= p->wire_bytes;
      released(p, now);
      drop(p, true);
    }
  }
  up_ = up;
}

// ------------------------------------------------------------------ Switch

uint32_t Switch::select_port(uint32_t src, uint32_t dst, uint16_t entropy, uint16_t dport) const {
  const auto g = group_for(dst);
  if (g.size() == 1) return g[0];
  uint64_t x = fmix64(salt_ ^ ((uint64_t{src} << 32) | dst));
  x = fmix64(x ^ ((uint64_t{entropy} << 16) | dport) ^ salt_);
  return g[x % g.size()];
}

void Switch::receive(Packet* p, uint32_t in_port, SimTime now) {
  // Before the PFC accounting: a packet dropped here never holds buffer.
  if (++p->hops > kMaxHops || p->dst >= route.size() || route[p->dst] == kNoRoute) [[unlikely]] {
    net_.drop_unroutable(p);
    return;
  }
  if (pfc_ && p->dscp != priority_dscp_) {
    uint64_t& b = ingress_[in_port];
    if (b + p->wire_bytes > pfc_limit_) {  // headroom exhausted: counted as a buffer drop
      ports[in_port]->drop(p, false);
      return;
    }
    b += p->wire_bytes;
    p->in_port = static_cast<uint16_t>(in_port);
    if (b > xoff_[in_port] && xoff_sent_[in_port] == 0) pfc_send(in_port, true, now);
  }
  ports[select_port(p->src, p->dst, p->entropy, p->dport)]->enqueue(p, now);
}

void Switch::enable_pfc(const QueueSpec& q) {
  pfc_ = true;
  priority_dscp_ = q.priority_dscp;
  pfc_limit_ = q.buffer_bytes;
  const size_t n = ports.size();
  ingress_.assign(n, 0);
  xoff_.assign(n, 0);
  xon_.assign(n, 0);
  xoff_sent_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Port& pt = *ports[i];
    const uint64_t in_flight = pt.rate_mbps() * pt.pipe.delay.ps / 8'000'000;  // bytes per delay
    const uint64_t headroom = 2 * in_flight + 2 * q.pfc_frame_bytes;
    const uint64_t gap = 2 * q.pfc_frame_bytes;
    const uint64_t xoff = q.pfc_xoff_bytes.value_or(
        q.buffer_bytes > headroom + gap ? q.buffer_bytes - headroom : gap);
    const uint64_t xon = q.pfc_xon_bytes.value_or(xoff - std::min(xoff, gap));
    if (xon > xoff)  // only with XOFF derived: queue_spec_error() checks the rest
      throw std::invalid_argument("queue.pfc_xon_bytes (" + std::to_string(xon) +
                                  ") is above the XOFF derived for port " + std::to_string(i) +
                                  " of switch " + std::to_string(id - net_.num_hosts()) + " (" +
                                  std::to_string(xoff) + " bytes); set queue.pfc_xoff_bytes too");
    xoff_[i] = xoff;
    xon_[i] = xon;
  }
}

std::string queue_spec_error(const QueueSpec& q) {
  if (q.ecn_kmax != 0 && q.ecn_kmin > q.ecn_kmax)  // ecn_kmax 0: no marking at all
    return "queue.ecn_kmin (" + std::to_string(q.ecn_kmin) + ") is above queue.ecn_kmax (" +
           std::to_string(q.ecn_kmax) + ")";
  if (!(q.ecn_pmax >= 0 && q.ecn_pmax <= 1)) {
    std::ostringstream o;
    o << "queue.ecn_pmax (" << q.ecn_pmax << ") is not in [0, 1]";
    return o.str();
  }
  if (q.pfc_xoff_bytes && *q.pfc_xoff_bytes > q.buffer_bytes)
    return "queue.pfc_xoff_bytes (" + std::to_string(*q.pfc_xoff_bytes) +
           ") is above queue.buffer_bytes (" + std::to_string(q.buffer_bytes) +
           "): a port would drop before it pauses";
  if (q.pfc_xoff_bytes && q.pfc_xon_bytes && *q.pfc_xon_bytes > *q.pfc_xoff_bytes)
    return "queue.pfc_xon_bytes (" + std::to_string(*q.pfc_xon_bytes) +
           ") is above queue.pfc_xoff_bytes (" + std::to_string(*q.pfc_xoff_bytes) +
           "): XON must not exceed XOFF";
  if (q.priority_dscp == 0 || q.priority_dscp > kNoPriorityDscp)
    return "queue.priority_dscp (" + std::to_string(q.priority_dscp) +
           ") is not 1-63 or 64 (none): 0 is the data's class";
  return {};
}

void Switch::pfc_send(uint32_t in_port, bool pause, SimTime now) {
  xoff_sent_[in_port] = pause ? 1 : 0;
  const Port& toward = *ports[in_port];
  Port& upstream = *toward.pipe.to->ports[toward.pipe.to_port];
  upstream.pfc_signal(pause, now + toward.pipe.delay);
}

void Switch::pfc_release(const Packet& p, SimTime now) {
  uint64_t& b = ingress_[p.in_port];
  b -= std::min<uint64_t>(b, p.wire_bytes);
  if (xoff_sent_[p.in_port] != 0 && b <= xon_[p.in_port]) pfc_send(p.in_port, false, now);
}

// ------------------------------------------------------------------ Network

Network::Network(Scheduler& sched, const TopoGraph& graph, const QueueSpec& queue, uint64_t seed,
                 BuildProgress progress)
    : sched_(sched), graph_(graph) {
  if (const std::string e = queue_spec_error(queue); !e.empty()) throw std::invalid_argument(e);
  const uint32_t h = graph_.num_hosts;
  const uint32_t n = h + graph_.num_switches;
  nodes_.assign(n, nullptr);
  for (uint32_t i = 0; i < h; ++i) {
    placeholders_.push_back(std::make_unique<HostStub>(pool_));
    nodes_[i] = placeholders_.back().get();
    nodes_[i]->id = i;
  }
  for (uint32_t s = 0; s < graph_.num_switches; ++s) {
    switches_.push_back(std::make_unique<Switch>(*this, derive_seed(seed, 0x73616c74, s)));
    switches_.back()->tier = s < graph_.switch_tier.size() ? graph_.switch_tier[s] : 0;
    nodes_[h + s] = switches_.back().get();
    nodes_[h + s]->id = h + s;
  }
  host_ports_.assign(h, nullptr);
  ports_.reserve(2 * graph_.edges.size());
  for (uint32_t e = 0; e < graph_.edges.size(); ++e) {
    const auto& ed = graph_.edges[e];
    if (ed.a >= n || ed.b >= n || ed.a == ed.b) throw std::invalid_argument("bad topology edge");
    Node* a = nodes_[ed.a];
    Node* b = nodes_[ed.b];
    const auto pa = static_cast<uint32_t>(a->ports.size());
    const auto pb = static_cast<uint32_t>(b->ports.size());
    auto mk = [&](Node* from, uint32_t idx, uint32_t dir) {
      ports_.push_back(std::make_unique<Port>(*this, from, idx, ed.spec, queue, from->id >= h,
                                              derive_seed(seed, 0x706f7274, e, dir)));
      ports_.back()->edge = e;
      from->ports.push_back(ports_.back().get());
      return ports_.back().get();
    };
    Port* ab = mk(a, pa, 0);
    Port* ba = mk(b, pb, 1);
    ab->deliver_to(b, pb);
    ba->deliver_to(a, pa);
    if (ed.a < h) {
      if (host_ports_[ed.a] != nullptr) throw std::invalid_argument("host with two links");
      host_ports_[ed.a] = ab;
    }
    if (ed.b < h) {
      if (host_ports_[ed.b] != nullptr) throw std::invalid_argument("host with two links");
      host_ports_[ed.b] = ba;
    }
  }
  for (uint32_t i = 0; i < h; ++i)
    if (host_ports_[i] == nullptr) throw std::invalid_argument("host without a link");
  if (queue.pfc)
    for (auto& sw : switches_) sw->enable_pfc(queue);
  graph_.max_path_delay = SimTime{0};
  graph_.max_hops = compute_routes(true, progress);
}

Network::~Network() {
  // Components deregister from the scheduler before they go away.
  for (auto& p : ports_) {
    sched_.cancel(*p);
    sched_.cancel(p->pipe);
    sched_.cancel(p->header_pipe);
  }
}

void Network::attach_host(uint32_t host, Node& node) {
  Node* stub = nodes_.at(host);
  node.id = host;
  node.ports = stub->ports;
  for (Port* p : node.ports) {
    p->owner = &node;
    // The other direction of the same edge delivers to the host.
    Port& rev = edge_port(p->edge, p == &edge_port(p->edge, false));
    rev.deliver_to(&node, rev.pipe.to_port);
  }
  nodes_[host] = &node;
}

void Network::set_link_up(uint32_t e, bool up, SimTime now) {
  edge_port(e, false).set_up(up, now);
  edge_port(e, true).set_up(up, now);
}

void Network::set_link_rate(uint32_t e, uint64_t rate_mbps, SimTime now) {
  edge_port(e, false).set_rate(rate_mbps, now);
  edge_port(e, true).set_rate(rate_mbps, now);
}

void Network::set_link_drop(uint32_t e, double fraction) {
  edge_port(e, false).set_drop_fraction(fraction);
  edge_port(e, true).set_drop_fraction(fraction);
}

SimTime Network::path_delay(uint32_t src, uint32_t dst) const {
  const Port* p = host_ports_.at(src);
  SimTime d{0};
  for (uint32_t hop = 0; hop < kMaxHops; ++hop) {
    d += p->pipe.delay;
    const uint32_t at = p->pipe.to->id;
    if (at == dst) return d;
    if (at < graph_.num_hosts || dst >= graph_.num_hosts) break;
    const Switch& s = *switches_[at - graph_.num_hosts];
    const auto g = s.group_for(dst);
    if (g.empty()) break;
    p = s.ports[g[0]];
  }
  return SimTime::never();
}

NetworkStats Network::stats(SimTime end) const {
  NetworkStats s;
  s.no_route_drops = no_route_drops_;
  for (const auto& p : ports_) {
    const PortStats& ps = p->stats();
    s.tx_packets += ps.tx_packets;
    s.drops += ps.drops;
    s.trimmed += ps.trimmed;
    s.fault_drops += ps.fault_drops;
    s.ecn_marks += ps.ecn_marks;
    s.max_queue_bytes = std::max(s.max_queue_bytes, ps.max_queue_bytes);
    s.pfc_pauses += ps.pfc_pauses;
    s.pfc_paused += p->paused_time(std::max(end, sched_.now()));
  }
  return s;
}

}  // namespace metaroce::sim
