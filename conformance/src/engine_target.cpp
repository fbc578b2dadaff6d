#include "metaroce/conformance/engine_target.hpp"

#include <algorithm>
#include <cstring>

namespace metaroce::conformance {

EndpointConfig EngineTarget::default_config() {
  EndpointConfig c;
  c.num_paths = 4;
  c.seed = 0x5eed;
  c.accept_incoming = true;
  return c;
}

EngineTarget::EngineTarget(const EndpointConfig& cfg)
    : ep_(std::make_unique<Endpoint>(cfg)), buf_(70000) {
  // Each address with the port it receives on, as a UDP driver's peer
  // address has (ENC-2): the engine sends a connection's packets to the
  // address it names, which Sent::to_port reads back.
  tester_.len = stranger_.len = 3;
  tester_.bytes[0] = 'T';
  stranger_.bytes[0] = 'S';
  for (PeerAddr* a : {&tester_, &stranger_}) {
    a->bytes[1] = static_cast<uint8_t>(kPort >> 8);
    a->bytes[2] = static_cast<uint8_t>(kPort & 0xff);
  }
}

EngineTarget::~EngineTarget() = default;

void EngineTarget::deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
                           bool stranger) {
  ep_->handle_datagram(RxDatagram{stranger ? stranger_ : tester_, entropy, ce, datagram}, now_);
}

bool EngineTarget::deliver_trimmed(std::span<const uint8_t> datagram, uint16_t entropy, bool ce) {
  RxDatagram dg{tester_, entropy, ce, datagram};
  dg.trimmed = true;
  ep_->handle_datagram(dg, now_);
  return true;
}

void EngineTarget::collect(std::vector<Sent>& out) {
  TxDatagram tx;
  while (ep_->poll_transmit(now_, buf_, tx)) {
    Sent s;
    s.bytes.assign(buf_.begin(), buf_.begin() + static_cast<long>(tx.len));
    s.entropy = tx.entropy;
    s.ecn = tx.ecn;
    s.dscp = tx.dscp;
    s.to_stranger = tx.peer == stranger_;
    if (tx.peer.len == 3)
      s.to_port = static_cast<uint16_t>((tx.peer.bytes[1] << 8) | tx.peer.bytes[2]);
    out.push_back(std::move(s));
  }
  Event ev;
  while (ep_->poll_event(ev)) {
    if (ev.kind == EventKind::kAccepted) {
      accepted_ = ev.conn;
      ++accepted_count_;
    }
    if (ev.kind == EventKind::kConnectFailed || ev.kind == EventKind::kError)
      failed_.emplace(ev.conn.v, ev.status);
  }
}

std::vector<Sent> EngineTarget::run_for(uint64_t ns) {
  std::vector<Sent> out;
  const TimeNs end = now_ + ns;
  collect(out);
  for (;;) {
    const TimeNs next = ep_->next_timeout();
    if (next == TimeNs::never() || next > end) break;
    now_ = std::max(now_, next);
    ep_->handle_timeout(now_);
    collect(out);
  }
  now_ = end;
  collect(out);
  return out;
}

bool EngineTarget::register_memory(uint64_t length, uint32_t access, Region& out) {
  std::vector<uint8_t> mem(length, 0);
  MemoryRegion mr;
  if (ep_->register_memory(mem.data(), mem.size(), access, mr) != Status::kOk) return false;
  out = Region{mr.addr, length, mr.rkey, mr.lkey};
  memory_.add(mr.lkey, std::move(mem));
  return true;
}

bool EngineTarget::register_memory_at(uint64_t length, uint32_t access, uint64_t base,
                                      Region& out) {
  std::vector<uint8_t> mem(length, 0);
  MemoryRegion mr;
  if (ep_->register_memory_at(mem.data(), mem.size(), base, access, mr) != Status::kOk)
    return false;
  out = Region{mr.addr, length, mr.rkey, mr.lkey};
  memory_.add(mr.lkey, std::move(mem));
  return true;
}

bool EngineTarget::deregister_memory(const Region& r) {
  return ep_->deregister_memory(r.lkey) == Status::kOk;
}

std::vector<uint8_t> EngineTarget::read_memory(const Region& r, uint64_t offset, uint64_t length) {
  return memory_.read(r.lkey, offset, length);
}

void EngineTarget::write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) {
  memory_.write(r.lkey, offset, bytes);
}

bool EngineTarget::connect_to_tester(ConnId& out) {
  return ep_->connect(tester_, now_, out) == Status::kOk;
}

Status EngineTarget::post_send(ConnId conn, const SendWr& wr) { return ep_->post_send(conn, wr); }

Status EngineTarget::post_recv(ConnId conn, const RecvWr& wr) { return ep_->post_recv(conn, wr); }

bool EngineTarget::poll_completion(Completion& out) { return ep_->poll_completion(out); }

bool EngineTarget::path_stats(ConnId conn, size_t path, PathStats& out) {
  return ep_->path_stats(conn, path, out);
}

bool EngineTarget::close(ConnId conn) {
  ep_->close(conn, now_);
  return true;
}

bool EngineTarget::conn_error(ConnId conn, Status& out) {
  const auto it = failed_.find(conn.v);
  out = it == failed_.end() ? Status::kOk : it->second;
  return true;
}

bool EngineTarget::listen(bool accept, uint32_t max_connections) {
  EndpointConfig c = ep_->config();
  c.accept_incoming = accept;
  if (max_connections != 0) c.max_connections = max_connections;
  reopen(c);
  return true;
}

bool EngineTarget::shared_receives(uint32_t depth) {
  EndpointConfig c = ep_->config();
  c.shared_rq_depth = depth;
  reopen(c);
  return true;
}

bool EngineTarget::start_psn_at(uint32_t psn) {
  EndpointConfig c = ep_->config();
  c.seed = seed_for_first_psn(psn);
  reopen(c);
  return true;
}

bool EngineTarget::set_rnr_retry_limit(uint32_t limit) {
  EndpointConfig c = ep_->config();
  c.recovery.rnr_retry_limit = limit;
  if (!config_error(c).empty()) return false;
  reopen(c);
  return true;
}

void EngineTarget::reopen(const EndpointConfig& cfg) {
  ep_ = std::make_unique<Endpoint>(cfg);
  memory_ = MemoryStore();
  accepted_ = ConnId();
  accepted_count_ = 0;
  failed_.clear();
}

}  // namespace metaroce::conformance
