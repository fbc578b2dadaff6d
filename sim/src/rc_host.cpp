#include "metaroce/sim/rc_host.hpp"

#include <algorithm>
#include <cstring>

#include "metaroce/sim/rng.hpp"

namespace metaroce::sim {
namespace {

// Header bytes on the wire (RoCEv2): BTH 12, RETH 16, AETH 4, ICRC 4.
constexpr uint32_t kBth = 12, kReth = 16, kAeth = 4, kIcrc = 4;
constexpr uint8_t kEct0 = 2;

struct Fields {
  uint8_t type;
  uint32_t flow, psn, aux;
};

void put(Packet* p, const Fields& f) {
  p->hdr[0] = f.type;
  std::memcpy(p->hdr + 1, &f.flow, 4);
  std::memcpy(p->hdr + 5, &f.psn, 4);
  std::memcpy(p->hdr + 9, &f.aux, 4);
  p->header_len = 13;
}

Fields get(const Packet* p) {
  Fields f{};
  f.type = p->hdr[0];
  std::memcpy(&f.flow, p->hdr + 1, 4);
  std::memcpy(&f.psn, p->hdr + 5, 4);
  std::memcpy(&f.aux, p->hdr + 9, 4);
  return f;
}

}  // namespace

void PsnWindow::insert(uint32_t psn) {
  if (psn < base_) return;
  if (psn - base_ >= bits()) {
    // Doubled until psn fits; the marks in [base, base + old bits) move to
    // their slots in the larger ring.
    size_t n = words_.empty() ? 1 : words_.size();
    while (uint64_t{n} * 64 <= psn - base_) n *= 2;
    PsnWindow grown;
    grown.base_ = base_;
    grown.words_.assign(n, 0);
    const uint64_t end = std::min<uint64_t>(uint64_t{base_} + bits(), uint64_t{UINT32_MAX} + 1);
    for (uint64_t p = base_; p < end; ++p)
      if (contains(static_cast<uint32_t>(p))) grown.insert(static_cast<uint32_t>(p));
    *this = std::move(grown);
  }
  words_[word(psn)] |= uint64_t{1} << (psn & 63);
}

void PsnWindow::advance(uint32_t base) {
  if (base <= base_) return;
  if (base - base_ >= bits()) {
    std::fill(words_.begin(), words_.end(), 0);
  } else {
    for (uint32_t p = base_; p < base; ++p) words_[word(p)] &= ~(uint64_t{1} << (p & 63));
  }
  base_ = base;
}

RcShared::RcShared(Network& n, FlowTable& f, const RcParams& p)
    : net(n), flows(f), prm(p), rx(f.size()), qp(f.size(), UINT32_MAX) {}

uint64_t RcShared::delivered_bytes(uint32_t flow) const {
  const uint64_t in_order = uint64_t{rx[flow].expected} * prm.mtu;
  return std::min(in_order, flows.at(flow).spec.bytes);
}

std::string RcShared::flow_count_error(uint64_t flows) {
  if (flows <= kMaxFlows) return {};
  return std::to_string(flows) +
         " flows: rocev2 / irn give each flow a QP of its own, and 24-bit QP numbers from 0x100 "
         "take at most " +
         std::to_string(kMaxFlows);
}

size_t RcShared::roce_headers(const Packet& p, uint8_t* out) const {
  // IBTA opcodes (RC): RDMA WRITE First/Middle/Last/Only, Acknowledge, CNP.
  constexpr uint8_t kWriteFirst = 0x06, kWriteMiddle = 0x07, kWriteLast = 0x08, kWriteOnly = 0x0a,
                    kAcknowledge = 0x11, kCnpOpcode = 0x81;
  constexpr uint8_t kSyndromeAck = 0x1f, kSyndromeNakSeq = 0x60;  // AETH
  const Fields f = get(&p);
  auto put24 = [](uint8_t* o, uint32_t v) {
    o[0] = static_cast<uint8_t>(v >> 16);
    o[1] = static_cast<uint8_t>(v >> 8);
    o[2] = static_cast<uint8_t>(v);
  };
  auto put32 = [](uint8_t* o, uint32_t v) {
    o[0] = static_cast<uint8_t>(v >> 24);
    o[1] = static_cast<uint8_t>(v >> 16);
    o[2] = static_cast<uint8_t>(v >> 8);
    o[3] = static_cast<uint8_t>(v);
  };
  std::memset(out, 0, kMaxRoceHeader);
  out[2] = 0xff;  // P_Key: default partition
  out[3] = 0xff;
  put24(out + 5, kFirstQpn + f.flow);  // one QP a flow (Simulation keeps it in 24 bits)
  size_t n = kBth;
  uint32_t psn = f.psn;
  switch (f.type) {
    case RcHost::kData: {
      const uint64_t bytes = flows.at(f.flow).spec.bytes;
      const uint64_t npkts = std::max<uint64_t>(1, (bytes + prm.mtu - 1) / prm.mtu);
      const bool first = f.psn == 0, last = f.psn + 1 >= npkts;
      out[0] = first ? (last ? kWriteOnly : kWriteFirst) : (last ? kWriteLast : kWriteMiddle);
      out[8] = 0x80;  // AckReq
      if (first) {
        put32(out + 12 + 8, f.flow);  // R_Key (virtual address 0)
        put32(out + 12 + 12, static_cast<uint32_t>(bytes));
        n += kReth;
      }
      break;
    }
    case RcHost::kAck:
    case RcHost::kNak:
    case RcHost::kSack:
      out[0] = kAcknowledge;
      // ACK: the last PSN received in order; NAK / NACK: the expected PSN.
      if (f.type == RcHost::kAck) psn = f.psn - 1;
      out[12] = f.type == RcHost::kAck ? kSyndromeAck : kSyndromeNakSeq;  // MSN left 0
      n += kAeth;
      if (f.type == RcHost::kSack) {
        put32(out + 16, f.aux);  // IRN: the PSN that arrived out of order
        n += 4;
      }
      break;
    case RcHost::kCnp:
      out[0] = kCnpOpcode;
      n += 16;
      break;
    default: break;
  }
  put24(out + 9, psn);
  return n;
}

bool RcHost::qp_state(uint32_t flow, RcQpState& out) const {
  const uint32_t qi = flow < sh_.qp.size() ? sh_.qp[flow] : UINT32_MAX;
  if (qi >= qps_.size() || qps_[qi].flow != flow) return false;
  const Qp& q = qps_[qi];
  out.entropy = q.entropy;
  out.rate_mbps = q.rc;
  out.alpha = q.alpha;
  out.inflight = q.nxt - std::min(q.nxt, q.una);
  out.recovery = q.recovery;
  return true;
}

size_t RcHost::recovery_state_bytes(uint32_t flow) const {
  const uint32_t qi = flow < sh_.qp.size() ? sh_.qp[flow] : UINT32_MAX;
  if (qi >= qps_.size() || qps_[qi].flow != flow) return 0;
  return qps_[qi].sacked.bytes() + sh_.rx.at(flow).got.bytes();
}

uint16_t RcHost::entropy_of(uint32_t flow) {
  return static_cast<uint16_t>(49152 + fmix64(uint64_t{flow} + 0x51505f) % 16384);
}

RcHost::RcHost(RcShared& shared, uint32_t host, uint64_t line_rate_mbps)
    : sh_(shared), line_mbps_(line_rate_mbps) {
  id = host;
  sh_.net.host_port(host).notify_idle = true;
}

RcHost::~RcHost() {
  sh_.net.sched().cancel(*this);
  while (!ctrl_.empty()) sh_.net.pool().release(ctrl_.pop());
}

void RcHost::start_flow(uint32_t flow, SimTime now) {
  FlowState& f = sh_.flows.at(flow);
  f.wrs_left = 1;
  Qp q;
  q.flow = flow;
  q.dst = f.spec.dst;
  q.bytes = f.spec.bytes;
  const uint32_t mtu = sh_.prm.mtu;
  q.npkts = static_cast<uint32_t>(std::max<uint64_t>(1, (q.bytes + mtu - 1) / mtu));
  q.entropy = entropy_of(flow);
  q.rc = q.rt = static_cast<double>(line_mbps_);
  q.next_send = now;
  sh_.qp[flow] = static_cast<uint32_t>(qps_.size());
  active_.push_back(static_cast<uint32_t>(qps_.size()));
  qps_.push_back(std::move(q));
  service(now);
}

uint32_t RcHost::next_psn(Qp& q) {
  const RcParams& prm = sh_.prm;
  if (!prm.go_back_n && q.recovery) {
    uint32_t c = std::max(q.cursor, q.una);
    const uint32_t end = std::min(q.high_sack, q.nxt);
    while (c < end && q.sacked.contains(c)) ++c;
    q.cursor = c;
    if (c < end) return c;
  }
  if (q.nxt >= q.npkts) return UINT32_MAX;
  if (prm.window_packets > 0 && q.nxt - q.una >= prm.window_packets) return UINT32_MAX;
  return q.nxt;
}

void RcHost::send_ctrl(uint8_t type, uint32_t flow, uint32_t dst, uint32_t psn, uint32_t aux,
                       SimTime now) {
  Packet* p = sh_.net.pool().alloc();
  p->src = id;
  p->dst = dst;
  p->entropy = entropy_of(flow) ^ 1;  // the reverse QP's port (one path too)
  p->dport = 4791;
  p->ecn = 0;
  p->payload_len = 0;
  p->trailer_len = 0;
  put(p, Fields{type, flow, psn, aux});
  p->dscp = type == kCnp ? kControlDscp : 0;
  uint32_t hdr = kBth + kIcrc;
  if (type == kAck || type == kNak) hdr += kAeth;
  if (type == kSack) hdr += kAeth + 4;
  if (type == kCnp) hdr += 16;
  p->wire_bytes = hdr + sh_.wire_overhead;
  if (type == kCnp)
    ++tot_.cnps;
  else
    ++tot_.acks_sent;
  if (type == kNak || type == kSack) ++tot_.naks;
  ctrl_.push(p);
  (void)now;
}

void RcHost::pull(SimTime now) {
  Port& port = *ports[0];
  if (port.busy(now)) return;
  if (!ctrl_.empty()) {
    port.enqueue(ctrl_.pop(), now);
    return;
  }
  const size_t n = active_.size();
  for (size_t i = 0; i < n; ++i) {
    const size_t k = (rr_ + i) % n;
    Qp& q = qps_[active_[k]];
    if (q.next_send > now) continue;
    const uint32_t psn = next_psn(q);
    if (psn == UINT32_MAX) continue;
    rr_ = k + 1;
    const uint32_t mtu = sh_.prm.mtu;
    const uint64_t off = uint64_t{psn} * mtu;
    const auto payload =
        static_cast<uint32_t>(q.bytes > off ? std::min<uint64_t>(mtu, q.bytes - off) : 0);
    Packet* p = sh_.net.pool().alloc();
    p->src = id;
    p->dst = q.dst;
    p->entropy = q.entropy;
    p->dport = 4791;
    p->ecn = kEct0;
    p->payload_len = payload;
    p->trailer_len = 0;
    put(p, Fields{kData, q.flow, psn, 0});
    p->wire_bytes = payload + kBth + kIcrc + (psn == 0 ? kReth : 0) + sh_.wire_overhead;
    ++tot_.data_packets_sent;
    if (psn < q.max_sent) {
      ++tot_.retransmissions;
    } else {
      q.max_sent = psn + 1;
    }
    if (psn == q.nxt)
      ++q.nxt;
    else if (!sh_.prm.go_back_n)
      q.cursor = psn + 1;
    if (q.rto_at == SimTime::never()) arm_rto(q, now);
    if (sh_.prm.dcqcn) {
      q.next_send = now + serialization_time(p->wire_bytes,
                                             std::max<uint64_t>(1, static_cast<uint64_t>(q.rc)));
      q.bytes_since += payload;
      if (q.bytes_since >= sh_.prm.byte_counter) {
        q.bytes_since = 0;
        ++q.bc_count;
        rate_increase(q);
      }
    }
    port.enqueue(p, now);
    return;
  }
}

void RcHost::arm_rto(Qp& q, SimTime now) {
  const RcParams& prm = sh_.prm;
  if (q.una >= q.nxt && !(q.recovery && q.una < q.high_sack)) {
    q.rto_at = SimTime::never();
    return;
  }
  const bool low = prm.rto_low_packets > 0 && q.nxt - q.una < prm.rto_low_packets;
  q.rto_at = now + (low ? prm.rto_low : prm.rto_high);
}

void RcHost::rate_increase(Qp& q) {
  const RcParams& prm = sh_.prm;
  const uint32_t f = prm.fast_recovery_steps;
  const uint32_t hi = std::max(q.t_count, q.bc_count), lo = std::min(q.t_count, q.bc_count);
  if (lo > f) {
    q.rt += static_cast<double>((lo - f) * prm.rhai_mbps);
  } else if (hi > f) {
    q.rt += static_cast<double>(prm.rai_mbps);
  }
  const auto line = static_cast<double>(line_mbps_);
  q.rt = std::min(q.rt, line);
  q.rc = std::min((q.rt + q.rc) / 2, line);
}

void RcHost::on_cnp(Qp& q, SimTime now) {
  const RcParams& prm = sh_.prm;
  if (!prm.dcqcn || q.done) return;
  q.rt = q.rc;
  q.rc = std::max(q.rc * (1.0 - q.alpha / 2.0), static_cast<double>(prm.min_rate_mbps));
  q.alpha = (1.0 - prm.g) * q.alpha + prm.g;
  q.t_count = q.bc_count = 0;
  q.bytes_since = 0;
  q.alpha_at = now + prm.alpha_timer;
  q.inc_at = now + prm.increase_timer;
}

void RcHost::timers(Qp& q, SimTime now) {
  const RcParams& prm = sh_.prm;
  if (q.rto_at <= now) {
    ++tot_.timeouts;
    if (prm.go_back_n) {
      q.nxt = q.una;
    } else {
      q.recovery = true;
      q.recover = q.nxt;
      q.cursor = q.una;
      q.high_sack = q.nxt;  // everything unSACKed is lost
    }
    q.rto_at = SimTime::never();
    arm_rto(q, now);
  }
  while (q.alpha_at <= now) {
    q.alpha *= 1.0 - prm.g;
    q.alpha_at += prm.alpha_timer;
    if (q.alpha < 1e-4) q.alpha_at = SimTime::never();
  }
  while (q.inc_at <= now) {
    ++q.t_count;
    rate_increase(q);
    q.inc_at += prm.increase_timer;
    if (q.rc >= static_cast<double>(line_mbps_)) q.inc_at = SimTime::never();
  }
}

void RcHost::note_delivery(uint32_t flow, SimTime now) {
  if (sh_.delivered_bytes(flow) == sh_.flows.at(flow).spec.bytes) sh_.flows.delivered(flow, now);
}

void RcHost::on_data(Packet* p, SimTime now) {
  const Fields f = get(p);
  const uint32_t src = p->src;
  const bool ce = p->ecn == kEcnCe;
  sh_.net.pool().release(p);
  RcRx& r = sh_.rx.at(f.flow);
  if (ce) {
    ++tot_.ce_received;
    if (sh_.prm.dcqcn &&
        (r.last_cnp == SimTime::never() || now >= r.last_cnp + sh_.prm.cnp_interval)) {
      r.last_cnp = now;
      send_ctrl(kCnp, f.flow, src, 0, 0, now);
    }
  }
  if (sh_.prm.go_back_n) {
    if (f.psn == r.expected) {
      ++r.expected;
      r.nak_sent = false;
      send_ctrl(kAck, f.flow, src, r.expected, 0, now);
      note_delivery(f.flow, now);
    } else if (f.psn > r.expected) {
      ++tot_.ooo_dropped;
      if (!r.nak_sent) {
        r.nak_sent = true;
        send_ctrl(kNak, f.flow, src, r.expected, 0, now);
      }
    } else {
      ++tot_.duplicates_received;
      send_ctrl(kAck, f.flow, src, r.expected, 0, now);
    }
    return;
  }
  // IRN
  if (r.got.contains(f.psn)) {  // below `expected` too
    ++tot_.duplicates_received;
    send_ctrl(kAck, f.flow, src, r.expected, 0, now);
    return;
  }
  r.got.insert(f.psn);
  if (f.psn == r.expected) {
    while (r.got.contains(r.expected)) ++r.expected;
    r.got.advance(r.expected);
    send_ctrl(kAck, f.flow, src, r.expected, 0, now);
    note_delivery(f.flow, now);
    if (sh_.delivered_bytes(f.flow) == sh_.flows.at(f.flow).spec.bytes) r.got.release();
  } else {
    send_ctrl(kSack, f.flow, src, r.expected, f.psn, now);
  }
}

void RcHost::on_ack(uint8_t type, uint32_t flow, uint32_t cum, uint32_t sack, SimTime now) {
  const uint32_t qi = sh_.qp.at(flow);
  if (qi >= qps_.size()) return;
  Qp& q = qps_[qi];
  if (q.done) return;
  const RcParams& prm = sh_.prm;
  bool progress = false;
  if (cum > q.una) {
    q.una = std::min(cum, q.npkts);
    q.sacked.advance(q.una);
    progress = true;
  }
  if (prm.go_back_n) {
    if (type == kNak && cum < q.nxt) q.nxt = std::max(cum, q.una);  // go back N
    if (q.nxt < q.una) q.nxt = q.una;
  } else {
    if (q.nxt < q.una) q.nxt = q.una;
    // The cumulative ACK first: an episode ends when it reaches `recover`,
    // and a NACK that carries it reports a new hole (its cumulative ACK, a
    // PSN sent after the episode began) that opens the next one. Checked
    // after the NACK, it ended the episode the NACK had just kept going, and
    // the hole waited for a later NACK, or a timeout when none came.
    if (q.recovery && q.una >= q.recover) q.recovery = false;
    if (type == kSack && sack < q.npkts) {
      q.sacked.insert(sack);  // below una: acknowledged already, nothing to keep
      q.high_sack = std::max(q.high_sack, sack + 1);
      if (!q.recovery) {
        q.recovery = true;
        q.recover = q.nxt;
        q.cursor = q.una;
      }
    }
  }
  if (q.una >= q.npkts) {
    q.done = true;
    q.sacked.release();
    q.rto_at = q.alpha_at = q.inc_at = SimTime::never();
    active_.erase(std::find(active_.begin(), active_.end(), qi));
    sh_.flows.wr_done(flow, true, now);
    return;
  }
  if (progress || type == kNak) arm_rto(q, now);
}

void RcHost::receive(Packet* p, uint32_t in_port, SimTime now) {
  (void)in_port;
  // Hosts do not forward; a packet for another host (one whose only link
  // goes to this one) is lost here, where a baseline's receiver state, kept
  // per flow, would have taken it as the destination's.
  if (p->dst != id) [[unlikely]] {
    sh_.net.drop_unroutable(p);
    return;
  }
  const Fields f = get(p);
  switch (f.type) {
    case kData: on_data(p, now); break;
    case kCnp: {
      sh_.net.pool().release(p);
      const uint32_t qi = sh_.qp.at(f.flow);
      if (qi < qps_.size()) on_cnp(qps_[qi], now);
      break;
    }
    default:
      sh_.net.pool().release(p);
      on_ack(f.type, f.flow, f.psn, f.aux, now);
      break;
  }
  service(now);
}

void RcHost::port_idle(uint32_t port, SimTime now) {
  (void)port;
  service(now);
}

void RcHost::on_event(SimTime now) {
  for (uint32_t qi : active_) timers(qps_[qi], now);
  service(now);
}

void RcHost::service(SimTime now) {
  pull(now);
  SimTime t = SimTime::never();
  const bool idle = !ports[0]->busy(now);
  for (uint32_t qi : active_) {
    Qp& q = qps_[qi];
    t = std::min({t, q.rto_at, q.alpha_at, q.inc_at});
    if (idle && q.next_send > now && next_psn(q) != UINT32_MAX) t = std::min(t, q.next_send);
  }
  if (t == SimTime::never()) {
    sh_.net.sched().cancel(*this);
  } else {
    sh_.net.sched().schedule(*this, std::max(t, now));
  }
}

void RcHost::add_totals(TransportTotals& t) const {
  t.data_packets_sent += tot_.data_packets_sent;
  t.retransmissions += tot_.retransmissions;
  t.timeouts += tot_.timeouts;
  t.losses_declared += tot_.naks;
  t.ce_received += tot_.ce_received;
  t.duplicates_received += tot_.duplicates_received;
  t.acks_sent += tot_.acks_sent;
}

}  // namespace metaroce::sim
