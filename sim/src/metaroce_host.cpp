#include "metaroce/sim/metaroce_host.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace metaroce::sim {

MetaRoceShared::MetaRoceShared(Network& n, FlowTable& f, uint64_t region_bytes, uint16_t mtu)
    : net(n), flows(f), region(region_bytes), txhdr(512), rxbuf(size_t{mtu} + 512) {}

PeerAddr MetaRoceHost::addr(uint32_t host) {
  PeerAddr a;
  a.bytes[0] = static_cast<uint8_t>(host >> 24);
  a.bytes[1] = static_cast<uint8_t>(host >> 16);
  a.bytes[2] = static_cast<uint8_t>(host >> 8);
  a.bytes[3] = static_cast<uint8_t>(host);
  a.bytes[4] = 0x12;  // port 4792
  a.bytes[5] = 0xb8;
  a.len = 6;
  return a;
}

uint32_t MetaRoceHost::host_of(const PeerAddr& a) {
  if (a.len != 6) return UINT32_MAX;
  return (uint32_t{a.bytes[0]} << 24) | (uint32_t{a.bytes[1]} << 16) | (uint32_t{a.bytes[2]} << 8) |
         a.bytes[3];
}

namespace {
constexpr uint64_t kRegionBase = 0x100000000ull;
}  // namespace

MetaRoceHost::MetaRoceHost(MetaRoceShared& shared, uint32_t host, const EndpointConfig& cfg)
    : sh_(shared), ep_(cfg) {
  id = host;
  sh_.net.host_port(host).notify_idle = true;
  // A fixed base (MR-4), not the heap address: the WRITEs' raddr fields are
  // in every --pcap capture, which must be the same for the same seed.
  if (ep_.register_memory_at(sh_.region.data(), sh_.region.size(), kRegionBase,
                             kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead,
                             mr_) != Status::kOk)
    throw std::runtime_error("register_memory failed");
}

MetaRoceHost::~MetaRoceHost() { sh_.net.sched().cancel(*this); }

const ConnId* MetaRoceHost::open_connection(uint32_t dst, SimTime now) {
  auto it = conns_.find(dst);
  if (it == conns_.end()) {
    ConnId c;
    if (ep_.connect(addr(dst), now.to_engine(), c) != Status::kOk) return nullptr;
    it = conns_.emplace(dst, c).first;
  }
  return &it->second;
}

void MetaRoceHost::preconnect(uint32_t dst, SimTime now) {
  if (open_connection(dst, now) == nullptr) ++sh_.connect_failures;
  service(now);
}

void MetaRoceHost::start_flow(uint32_t flow, SimTime now) {
  FlowState& f = sh_.flows.at(flow);
  const uint32_t dst = f.spec.dst;
  const ConnId* conn = open_connection(dst, now);
  if (conn == nullptr) {
    sh_.flows.wr_done(flow, false, now);
    return;
  }
  const MemoryRegion& peer = sh_.hosts.at(dst)->region();
  const uint64_t chunk = std::max<uint64_t>(1, std::min<uint64_t>(sh_.wr_bytes, sh_.region.size()));
  uint64_t left = f.spec.bytes;
  f.wrs_left = (left + chunk - 1) / chunk;
  if (f.wrs_left == 0) {
    f.wrs_left = 1;
    left = 0;
  }
  SendWr wr;
  wr.wr_id = flow;
  wr.local_addr = mr_.addr;
  wr.lkey = mr_.lkey;
  wr.remote_addr = peer.addr;
  wr.rkey = peer.rkey;
  // A flow others wait for ends in a WRITE_IMM, as NCCL signals a chunk:
  // its receive completion (COMP-3) says every byte before it is placed.
  post(Pending{flow, wr, *conn, f.wrs_left, left, chunk, sh_.flows.has_dependents(flow)}, now);
  service(now);
}

SendWr MetaRoceHost::Pending::next() const {
  SendWr w = wr;
  w.op = WrOpcode::kWrite;
  if (wrs == 1 && imm_last) {
    w.op = WrOpcode::kWriteImm;
    w.imm = flow;
  }
  w.length = static_cast<uint32_t>(std::min(left, chunk));
  return w;
}

void MetaRoceHost::Pending::advance() {
  left -= std::min(left, chunk);
  --wrs;
}

// Posts the run's WRs until the send queue is full; the rest waits in the
// backlog, behind any run already there (WRs are posted in order).
void MetaRoceHost::post(Pending p, SimTime now) {
  while (p.wrs > 0) {
    if (!backlog_.empty()) {
      backlog_.push_back(p);
      return;
    }
    const Status s = ep_.post_send(p.conn, p.next());
    if (s == Status::kQueueFull) {
      backlog_.push_back(p);
      return;
    }
    p.advance();
    if (s != Status::kOk) sh_.flows.wr_done(p.flow, false, now);
  }
}

void MetaRoceHost::post_receive(ConnId conn) {
  RecvWr r;
  r.addr = mr_.addr;
  r.lkey = mr_.lkey;
  if (ep_.post_recv(conn, r) != Status::kOk) ++sh_.errors;
}

void MetaRoceHost::receive(Packet* p, uint32_t in_port, SimTime now) {
  (void)in_port;
  // Hosts do not forward; a packet for another host (one whose only link
  // goes to this one) is lost here, where a baseline's receiver state, kept
  // per flow, would have taken it as the destination's.
  if (p->dst != id) [[unlikely]] {
    sh_.net.drop_unroutable(p);
    return;
  }
  uint8_t* buf = sh_.rxbuf.data();
  const size_t total = size_t{p->header_len} + p->payload_len + p->trailer_len;
  if (total > sh_.rxbuf.size()) {
    sh_.net.pool().release(p);
    return;
  }
  std::memcpy(buf, p->hdr, p->header_len);
  std::memcpy(buf + p->header_len + p->payload_len, p->trailer, p->trailer_len);
  RxDatagram rx;
  rx.peer = addr(p->src);
  rx.entropy = p->entropy;
  rx.ce = p->ecn == kEcnCe;
  rx.trimmed = p->trimmed;  // the TRIMMED DSCP, as a driver reads it (TRIM-2)
  rx.bytes = std::span<const uint8_t>(buf, total);
  sh_.net.pool().release(p);
  ep_.handle_datagram(rx, now.to_engine());
  service(now);
}

void MetaRoceHost::port_idle(uint32_t port, SimTime now) {
  (void)port;
  pull(now);
  service(now);
}

void MetaRoceHost::on_event(SimTime now) {
  ep_.handle_timeout(now.to_engine());
  service(now);
}

void MetaRoceHost::pull(SimTime now) {
  Port& port = *ports[0];
  if (port.busy(now)) return;
  TxDatagram tx;
  if (!ep_.poll_transmit_gather(now.to_engine(), sh_.txhdr, tx)) return;
  const uint32_t dst = host_of(tx.peer);
  if (dst >= sh_.hosts.size()) {
    ++sh_.undeliverable;
    return;
  }
  const size_t trailer = tx.len - tx.header_len - tx.payload.size();
  if (tx.header_len > Packet::kMaxHeader || trailer > sizeof(tx.trailer))
    throw std::runtime_error("MetaRoceHost: datagram shape out of range");
  Packet* p = sh_.net.pool().alloc();
  p->src = id;
  p->dst = dst;
  p->entropy = tx.entropy;
  p->dport = 4792;
  p->ecn = tx.ecn;
  p->dscp = tx.dscp;
  p->header_len = static_cast<uint16_t>(tx.header_len);
  p->payload_len = static_cast<uint32_t>(tx.payload.size());
  p->trailer_len = static_cast<uint8_t>(trailer);
  std::memcpy(p->hdr, sh_.txhdr.data(), tx.header_len);
  std::memcpy(p->trailer, tx.trailer, trailer);
  p->wire_bytes = static_cast<uint32_t>(tx.len) + sh_.wire_overhead;
  port.enqueue(p, now);
}

void MetaRoceHost::service(SimTime now) {
  Completion c;
  while (ep_.poll_completion(c)) {
    if (c.op == CompletionOp::kRecvWriteImm) {
      if (c.status == Status::kOk && c.has_imm && c.imm < sh_.flows.size())
        sh_.flows.delivered(c.imm, now);
      if (c.status != Status::kOk) ++sh_.errors;
      if (c.status != Status::kFlushed) post_receive(c.conn);
      continue;
    }
    if (c.op == CompletionOp::kWrite || c.op == CompletionOp::kWriteImm ||
        c.op == CompletionOp::kSend || c.op == CompletionOp::kSendImm) {
      if (c.status != Status::kOk) ++sh_.errors;
      sh_.flows.wr_done(static_cast<uint32_t>(c.wr_id), c.status == Status::kOk, now);
    }
  }
  Event e;
  while (ep_.poll_event(e)) {
    if (e.kind == EventKind::kAccepted) {
      accepted_.push_back(e.conn);
      if (sh_.signalled_flows)
        for (uint32_t i = 0; i < kPostedReceives; ++i) post_receive(e.conn);
    }
    if (e.kind == EventKind::kConnected) ++connects_settled_;
    if (e.kind == EventKind::kConnectFailed) {
      ++sh_.connect_failures;
      ++connects_settled_;
    }
    if (e.kind == EventKind::kError) ++sh_.errors;
  }
  // Completions free send-queue slots: retry the backlog in order.
  while (!backlog_.empty()) {
    const Pending p = backlog_.front();
    const Status s = ep_.post_send(p.conn, p.next());
    if (s == Status::kQueueFull) break;
    if (backlog_.front().wrs == 1) {
      backlog_.pop_front();
    } else {
      backlog_.front().advance();
    }
    if (s != Status::kOk) sh_.flows.wr_done(p.flow, false, now);
  }
  pull(now);
  const TimeNs t = ep_.next_timeout();
  if (t == TimeNs::never()) {
    sh_.net.sched().cancel(*this);
  } else {
    sh_.net.sched().schedule(*this, std::max(SimTime::from_engine(t), now));
  }
}

std::vector<ConnId> MetaRoceHost::connections() const {
  std::vector<ConnId> v;
  std::vector<std::pair<uint32_t, ConnId>> opened(conns_.begin(), conns_.end());
  std::sort(opened.begin(), opened.end(), [](auto& a, auto& b) { return a.first < b.first; });
  for (auto& [d, c] : opened) v.push_back(c);
  v.insert(v.end(), accepted_.begin(), accepted_.end());
  return v;
}

bool MetaRoceHost::connection_to(uint32_t dst, ConnId& out) const {
  const auto it = conns_.find(dst);
  if (it == conns_.end()) return false;
  out = it->second;
  return true;
}

uint64_t MetaRoceHost::data_bytes_received() const {
  uint64_t n = 0;
  auto add = [&](ConnId c) {
    if (const ConnStats* s = ep_.conn_stats(c)) n += s->data_bytes_received;
  };
  for (const auto& [dst, c] : conns_) add(c);
  for (ConnId c : accepted_) add(c);
  return n;
}

void MetaRoceHost::add_totals(TransportTotals& t) const {
  for (ConnId c : connections()) {
    const ConnStats* s = ep_.conn_stats(c);
    if (s == nullptr) continue;
    t.data_packets_sent += s->data_packets_sent;
    t.retransmissions += s->retransmissions;
    t.timeouts += s->timeouts;
    t.losses_declared += s->losses_declared;
    t.path_retirements += s->path_retirements;
    t.ce_received += s->ce_received;
    t.duplicates_received += s->duplicates_received;
    t.acks_sent += s->acks_sent;
  }
  const EndpointStats& es = ep_.endpoint_stats();
  t.bad_packets += es.truncated + es.bad_version + es.bad_opcode + es.bad_checksum + es.bad_length +
                   es.bad_field + es.unknown_connection + es.wrong_peer;
}

}  // namespace metaroce::sim
