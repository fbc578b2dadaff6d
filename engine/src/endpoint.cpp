// Endpoint: public API, datagram dispatch, timers and output scheduling.
#include <algorithm>
#include <bit>
#include <cstring>

#include "impl.hpp"

namespace metaroce {
using detail::Connection;
using detail::ConnState;

namespace {
constexpr uint32_t kIndexBits = 20;
constexpr uint32_t kIndexMask = (1u << kIndexBits) - 1;
}  // namespace

Endpoint::Impl::Impl(const EndpointConfig& c) : cfg(c), rng(c.seed ^ 0x6d657461726f6365ull) {
  // SEQ-3: the window never exceeds what one ACK can describe (ACK-8), so a
  // packet outside every SACK is never mistaken for a lost one.
  cfg.window_log2 = std::clamp<uint8_t>(cfg.window_log2, 6, 10);
  cfg.num_paths = std::clamp<uint8_t>(cfg.num_paths, 1, 32);
  cfg.mtu = std::clamp<uint16_t>(cfg.mtu, 256, 65000);
  // TxRecord::slot holds a send-queue index below kRespSlotFlag.
  cfg.sq_depth = std::clamp<uint16_t>(cfg.sq_depth, 1, detail::kRespSlotFlag);
  cfg.rq_depth = std::max<uint16_t>(cfg.rq_depth, 1);
  cfg.max_reads = std::max<uint8_t>(cfg.max_reads, 1);
  cfg.ack_every = std::max<uint8_t>(cfg.ack_every, 1);
  if (cfg.entropy_max < cfg.entropy_min) std::swap(cfg.entropy_min, cfg.entropy_max);
  cfg.max_connections = std::clamp<uint32_t>(cfg.max_connections, 1, kIndexMask);
  if (cfg.shared_rq_depth > 0) {
    cfg.shared_rq_depth = std::min<uint32_t>(cfg.shared_rq_depth, 1u << 24);
    srq.assign(std::bit_ceil(cfg.shared_rq_depth), detail::RecvEntry{});
    srq_mask = static_cast<uint32_t>(srq.size() - 1);
  }
  loss_window = std::max<uint32_t>(cfg.recovery.loss_window_packets, 1);
  loss_window_shift = std::has_single_bit(loss_window) ? std::countr_zero(loss_window) : -1;
  // The largest datagram: a data packet with the longest headers and a full
  // payload, or a control packet with every SACK word. A connection's mtu
  // never exceeds the endpoint's (CONN-3 takes the smaller).
  min_tx_buffer[1] = wire::largest_header_size() + wire::kIcrcSize;
  min_tx_buffer[0] =
      std::max(min_tx_buffer[1], detail::kHeaderTemplateSize + cfg.mtu + wire::kIcrcSize);
}

Connection* Endpoint::Impl::find(ConnId id) const {
  // An invalid id (0) wraps to an index past any table.
  const uint32_t index = (id.v & kIndexMask) - 1;
  if (index >= conn_slots || !conns[index]) return nullptr;
  Connection* c = conns[index].get();
  return c->id == id ? c : nullptr;
}

Connection* Endpoint::Impl::create_connection(const PeerAddr& peer) {
  uint32_t index;
  if (!free_indices.empty()) {
    index = free_indices.back();
    free_indices.pop_back();
  } else {
    if (conns.size() >= cfg.max_connections) return nullptr;
    index = static_cast<uint32_t>(conns.size());
    conns.emplace_back();
    conn_slots = static_cast<uint32_t>(conns.size());
    generations.push_back(0);
    timer_pos.push_back(detail::TimerHeap::kAbsent);
    in_ready.push_back(0);
  }
  auto c = std::make_unique<Connection>();
  generations[index] = static_cast<uint16_t>((generations[index] + 1) & 0x7ff);
  if (generations[index] == 0) generations[index] = 1;
  c->id = ConnId{(uint32_t{generations[index]} << kIndexBits) | (index + 1)};
  c->index = index;
  c->peer = peer;
  c->mtu = cfg.mtu;
  c->set_window_log2(cfg.window_log2);
  c->num_paths = cfg.num_paths;
  c->next_psn = static_cast<uint32_t>(rng.next());
  c->cum_acked = c->next_psn;
  c->initial_psn = c->next_psn;
  set_cwnd_floor(*c);
  init_paths(*c);
  conns[index] = std::move(c);
  return conns[index].get();
}

void Endpoint::Impl::destroy_connection(Connection& c) {
  timers.remove(c.index, timer_pos);
  c.timer_dirty = false;
  if (c.nonce != 0) {
    auto it = by_nonce.find(c.nonce);
    if (it != by_nonce.end() && it->second == c.index) by_nonce.erase(it);
  }
  if (c.tx) tx_pool.push_back(std::move(c.tx));
  if (c.rx) rx_pool.push_back(std::move(c.rx));
  const uint32_t index = c.index;
  in_ready[index] = 0;
  conns[index].reset();
  free_indices.push_back(index);
}

void Endpoint::Impl::mark_ready(Connection& c) {
  if (in_ready[c.index]) return;
  in_ready[c.index] = 1;
  ready.push(c.index);
}

detail::TxCtx& Endpoint::Impl::borrow_tx(Connection& c) {
  if (!tx_pool.empty()) {
    c.tx = std::move(tx_pool.back());
    tx_pool.pop_back();
  } else {
    c.tx = std::make_unique<detail::TxCtx>();
  }
  detail::TxCtx& t = *c.tx;
  const uint32_t w = c.window();
  t.records.assign(w, detail::TxRecord{});
  t.acked_bits.assign(w / 64, 0);
  t.path_rings.assign(size_t{c.num_paths} * w, 0);
  t.retx.assign(w, 0);
  t.retx_head = t.retx_tail = 0;
  t.sq.assign(std::bit_ceil(uint32_t{cfg.sq_depth}), detail::SqEntry{});
  t.sq_mask = static_cast<uint32_t>(t.sq.size() - 1);
  t.sq_head = t.sq_seg = t.sq_tail = 0;
  t.resp.assign(std::bit_ceil(resp_depth()), detail::RespJob{});
  t.resp_mask = static_cast<uint32_t>(t.resp.size() - 1);
  t.resp_head = t.resp_seg = t.resp_tail = 0;
  t.read_slot.assign(std::max<uint8_t>(c.peer_max_reads, 1), 0);
  t.hdr_slot = detail::kNoSlot;  // the template names the previous owner's peer
  t.hdr_len = 0;
  t.explore = {};  // PATH-8 starts afresh, with no path half moved
  t.held_back = {};
  c.draining_slot = detail::kNoPath;
  for (uint8_t i = 0; i < c.num_paths; ++i) c.paths[i].ring_head = c.paths[i].next_pseq;
  return t;
}

detail::RxCtx& Endpoint::Impl::borrow_rx(Connection& c) {
  if (!rx_pool.empty()) {
    c.rx = std::move(rx_pool.back());
    rx_pool.pop_back();
  } else {
    c.rx = std::make_unique<detail::RxCtx>();
  }
  detail::RxCtx& r = *c.rx;
  r.bits.assign(c.window() / 64, 0);
  r.rq.assign(std::bit_ceil(uint32_t{cfg.rq_depth}), detail::RecvEntry{});
  r.rq_mask = static_cast<uint32_t>(r.rq.size() - 1);
  r.rq_head = r.rq_tail = 0;
  return r;
}

bool Endpoint::Impl::tx_idle(const Connection& c) const {
  return c.tx && c.tx->sq_head == c.tx->sq_tail && c.tx->resp_head == c.tx->resp_tail &&
         c.cum_acked == c.next_psn && c.tx->retx_head == c.tx->retx_tail;
}

bool Endpoint::Impl::rx_idle(const Connection& c) const {
  return c.rx && c.rx->rq_head == c.rx->rq_tail && c.rx_cum == c.rx_high && c.unacked == 0 &&
         c.echo_count == 0;
}

// Contexts go back to the pool once they hold nothing a later packet needs
// and the connection has been quiet for context_idle_ns, so an idle
// connection costs only its core (the 10,000-connection budget) while a busy
// one never pays for re-acquiring them between messages.
void Endpoint::Impl::maybe_release_ctx(Connection& c, TimeNs now) {
  if (now.since(c.last_activity) < cfg.context_idle_ns) return;
  if (tx_idle(c)) tx_pool.push_back(std::move(c.tx));
  if (rx_idle(c)) rx_pool.push_back(std::move(c.rx));
}

void Endpoint::Impl::complete(const Connection& c, const Completion& comp) {
  (void)c;
  completions.push(comp);
}

void Endpoint::Impl::push_event(EventKind k, const Connection& c, Status s) {
  events.push(Event{k, c.id, s, c.peer});
}

wire::BaseHeader Endpoint::Impl::base_header(const Connection& c, wire::Opcode op,
                                             TimeNs now) const {
  wire::BaseHeader bh;
  bh.opcode = op;
  bh.flags = cfg.cover_payload ? wire::kFlagPayloadCovered : 0;
  bh.dst_conn = c.peer_conn;
  bh.tsval = static_cast<uint32_t>(now.ns);
  return bh;
}

// ---------------------------------------------------------------- timers

// Deadlines are recomputed lazily: a connection touched by many packets in
// one batch is marked once and its deadline computed once, when the driver
// next asks for next_timeout() or hands in a timeout.
void Endpoint::Impl::update_timer(Connection& c) {
  if (c.timer_dirty) return;
  c.timer_dirty = true;
  timer_dirty.push_back(c.index);
}

void Endpoint::Impl::flush_timers() {
  for (const uint32_t index : timer_dirty) {
    Connection* c = conns[index].get();
    if (c == nullptr || !c->timer_dirty) continue;
    c->timer_dirty = false;
    compute_timer(*c);
  }
  timer_dirty.clear();
}

void Endpoint::Impl::compute_timer(Connection& c) {
  TimeNs t = c.control_deadline;
  t = std::min(t, c.ack_deadline);
  bool outstanding = false;
  // CC-6: a paced path with nothing in flight hears no ACK and runs no RTO,
  // so its pacing deadline is what wakes the sender, whatever it has left to
  // send: new messages, READ responses (READ-2) or retransmissions (SCHED-2).
  const bool unsent = c.tx && c.tx->has_unsent();
  // Path timers run only on an established connection (run_timers serves
  // them only then); counting them in other states would spin the driver.
  const uint8_t timed_paths = c.state == ConnState::kEstablished ? c.num_paths : 0;
  for (uint8_t i = 0; i < timed_paths; ++i) {
    const detail::Path& p = c.paths[i];
    if (p.inflight > 0) {
      t = std::min(t, std::min(p.rto_deadline, p.tlp_deadline));
      outstanding = true;
    }
    if (p.state == PathState::kProbing) t = std::min(t, p.probe_deadline);
    if (p.inflight == 0 && p.next_send > last_now && unsent)
      t = std::min(t, p.next_send);  // a paced path (CC-6) may send then
  }
  if (c.tx && (c.tx->retx_head != c.tx->retx_tail)) outstanding = true;
  if (c.rnr_until.ns > 0 && c.tx && c.tx->retx_head != c.tx->retx_tail)
    t = std::min(t, c.rnr_until);
  if (outstanding && c.state == ConnState::kEstablished)
    t = std::min(t, c.last_progress + cfg.recovery.peer_timeout_ns);
  if (tx_idle(c) || rx_idle(c)) t = std::min(t, c.last_activity + cfg.context_idle_ns);
  // A deadline already passed is due at the next call, never in a loop
  // inside this one.
  if (t != TimeNs::never() && t <= last_now) t = last_now + 1;
  timers.set(c.index, t, timer_pos);
}

void Endpoint::Impl::run_timers(Connection& c, TimeNs now) {
  if (c.rnr_until <= now) c.rnr_until = TimeNs{0};
  if (c.control_deadline <= now) {
    c.control_deadline = TimeNs::never();
    if (c.state == ConnState::kConnecting) {
      if (c.attempts >= cfg.connect_attempts) {
        push_event(EventKind::kConnectFailed, c, Status::kConnectTimeout);
        flush_all(c, Status::kConnectTimeout, 0);
        destroy_connection(c);
        return;
      }
      c.owe.connect = true;
    } else if (c.state == ConnState::kClosing) {
      if (c.attempts >= cfg.connect_attempts) {
        push_event(EventKind::kClosed, c, Status::kPeerUnreachable);
        destroy_connection(c);
        return;
      }
      c.owe.disconnect = true;
    }
  }
  if (c.ack_deadline <= now) {
    c.ack_deadline = TimeNs::never();
    if (c.unacked > 0 && c.echo_count == 0) c.echoes[c.echo_count++] = c.latest;  // ACK-5
  }
  if (c.state == ConnState::kEstablished) {
    for (uint8_t i = 0; i < c.num_paths; ++i) {
      detail::Path& p = c.paths[i];
      if (p.inflight > 0 && p.rto_deadline <= now) on_rto(c, i, now);
      if (p.inflight > 0 && p.state == PathState::kActive && p.tlp_deadline <= now) {
        if (p.tlp_outstanding && p.held) {
          if (c.last_progress > p.tlp_sent) {
            // LOSS-8: nothing came back on the path since its tail-loss
            // probe, answer included, while the peer was heard from: the
            // path's RTO, early, rather than leaving the rest of its packets
            // to wait for the real one.
            on_rto(c, i, now);
          } else {
            // The peer itself is silent (a paused process, a busy host): no
            // path is to blame. Look again a timer later; the RTO guards.
            p.tlp_deadline = now + tlp_answer_timeout(p);
          }
        } else if (c.tx && detect_losses(c, *c.tx, i, now, 1)) {
          // LOSS-2's time form: a later packet of the path was acknowledged
          // a quarter round trip ago and these were not. Lost, not a tail:
          // no probe is needed to find them.
          p.tlp_deadline = p.inflight > 0 ? now + tlp_timeout(p) : TimeNs::never();
        } else {
          c.owe.tlp |= 1u << i;  // LOSS-8
          p.tlp_deadline = TimeNs::never();
          // LOSS-8: the path's oldest packet goes again on another path now,
          // rather than one probe round trip later; the path takes no new
          // data until it answers, so a dead path is not refilled meanwhile.
          if (c.tx) {
            trim_ring(c, i);
            if (detail::TxRecord* r = in_flight_at(c, *c.tx, i, p.ring_head)) {
              declare_lost(c, *c.tx, *r, now, false, false);
              // Held only while packets stay in flight: their RTO (LOSS-5)
              // then still guards the path if the probe gets no answer.
              p.held = p.inflight > 0;
            }
          }
        }
      }
      if (p.state == PathState::kProbing && p.probe_deadline <= now) {
        // An unanswered probe is one more timeout (PATH-4); a new entropy can
        // hash onto the same broken link, so it too is replaced in the end.
        p.backoff = static_cast<uint8_t>(std::min<int>(p.backoff + 1, 16));
        if (++p.consecutive_rtos >= cfg.recovery.rto_failures_to_retire) {
          retire_path(c, i, now);
        } else {
          c.owe.probe |= 1u << i;
          p.probe_deadline = now + path_rto(c, p);
        }
      }
    }
    bool outstanding = c.tx && (c.cum_acked != c.next_psn || c.tx->retx_head != c.tx->retx_tail);
    if (outstanding && now.since(c.last_progress) >= cfg.recovery.peer_timeout_ns) {
      enter_error(c, Status::kPeerUnreachable, c.cum_acked, now);
    }
  }
  maybe_release_ctx(c, now);
  mark_ready(c);
  update_timer(c);
}

// ---------------------------------------------------------------- output

bool Endpoint::Impl::emit_orphan(std::span<uint8_t> buf, TxDatagram& out) {
  const Orphan o = orphans.pop();
  wire::BaseHeader bh;
  bh.opcode = o.op;
  bh.dst_conn = o.dst_conn;
  size_t h = o.op == wire::Opcode::kConnectReject ? wire::write_connect(buf, bh, o.connect)
                                                  : wire::write_disconnect(buf, bh, o.disconnect);
  out.peer = o.peer;
  out.entropy = o.entropy;
  out.ecn = kEcnEct0;
  out.len = finish(buf, h, 0);
  out.header_len = h;
  out.payload = {};
  return out.len > 0;
}

template <bool gather>
bool Endpoint::Impl::emit_for(Connection& c, TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  // Cheap tests first: most calls find nothing to send.
  out.payload = {};
  const bool control = c.owes_control();
  const bool open = c.state == ConnState::kEstablished;
  if (!(control && emit_control(c, now, buf, out)) &&
      !(c.echo_count != 0 && (open || c.state == ConnState::kError) &&
        emit_ack(c, now, buf, out)) &&
      !(open && c.tx && emit_data<gather>(c, now, buf, out)))
    return false;
  out.peer = c.peer;
  out.ecn = kEcnEct0;
  return true;
}

template <bool gather>
bool Endpoint::Impl::poll(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  last_now = now;
  // Refused up front: a packet that no longer fits once its PSN and path are
  // taken would leave a hole that no retransmission fills.
  if (buf.size() < min_tx_buffer[gather]) [[unlikely]] {
    ++estats.tx_buffer_too_small;
    return false;
  }
  if (!poll_one<gather>(now, buf, out)) return false;
  if (gather && out.payload.empty()) {
    // Packets without payload are built whole; present them in the gather
    // shape too: headers, no payload, the ICRC as the trailer.
    out.header_len = out.len - wire::kIcrcSize;
    std::memcpy(out.trailer, buf.data() + out.header_len, wire::kIcrcSize);
  }
  return true;
}

template <bool gather>
bool Endpoint::Impl::poll_one(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (!orphans.empty()) [[unlikely]]
    return poll_orphan<gather>(now, buf, out);
  return poll_ready<gather>(now, buf, out);
}

template <bool gather>
bool Endpoint::Impl::poll_orphan(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (emit_orphan(buf, out)) {
    ++estats.datagrams_sent;
    return true;
  }
  return poll_ready<gather>(now, buf, out);
}

template <bool gather>
bool Endpoint::Impl::poll_ready(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (ready.empty()) {
    ready.clear();
    return false;
  }
  const uint32_t index = ready.front();
  if (!in_ready[index]) [[unlikely]]
    return poll_next<gather>(now, buf, out);
  // mark_ready sets the flag for a live connection only, and
  // destroy_connection clears it: a set flag names one, never null.
  Connection& c = *conns[index];
  if (may_emit(c) || !c.timer_dirty) return emit_from<gather>(now, buf, out, c);
  // Nothing to send, and the timer marked already: dropped as emit_from
  // would. The flag is cleared first: its byte store may alias the ring's
  // head, which pop() then reloads rather than keeping it in a register
  // that the tests above need.
  in_ready[c.index] = 0;
  ready.pop();
  if (ready.empty()) {
    ready.clear();
    return false;
  }
  return poll_next<gather>(now, buf, out);
}

template <bool gather>
bool Endpoint::Impl::poll_next(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  Connection* c = front_ready();
  return c != nullptr && emit_from<gather>(now, buf, out, *c);
}

Connection* Endpoint::Impl::front_ready() {
  while (!ready.empty()) {
    const uint32_t index = ready.front();
    if (in_ready[index]) return conns[index].get();
    ready.pop();
  }
  ready.clear();
  return nullptr;
}

template <bool gather>
bool Endpoint::Impl::emit_from(TimeNs now, std::span<uint8_t> buf, TxDatagram& out,
                               Connection& first) {
  // Round-robin: one datagram per ready connection per turn.
  Connection* c = &first;
  do {
    if (emit_for<gather>(*c, now, buf, out)) {
      ready.rotate();  // stays ready, behind the others: it may have more
      update_timer(*c);
      ++estats.datagrams_sent;
      return true;
    }
    ready.pop();
    in_ready[c->index] = 0;
    update_timer(*c);
    c = front_ready();
  } while (c != nullptr);
  return false;
}

// ---------------------------------------------------------------- input

void Endpoint::Impl::reject_bad_version(const RxDatagram& dg) {
  // CONN-5: answer a CONNECT_REQ of another version, in version 1, if its
  // body is long enough to echo; everything else of another version is dropped.
  if (dg.bytes.size() < wire::kBaseHeaderSize + wire::kConnectBodySize + wire::kIcrcSize) return;
  const uint8_t* q = dg.bytes.data() + wire::kBaseHeaderSize;
  Orphan o{};
  o.peer = dg.peer;
  o.entropy = dg.entropy;
  o.op = wire::Opcode::kConnectReject;
  o.dst_conn = (uint32_t{q[0]} << 24) | (uint32_t{q[1]} << 16) | (uint32_t{q[2]} << 8) | q[3];
  o.connect.code = static_cast<uint8_t>(Status::kVersionMismatch);
  o.connect.max_version = wire::kVersion;
  uint64_t nonce = 0;
  for (int i = 0; i < 8; ++i) nonce = (nonce << 8) | q[16 + i];
  o.connect.nonce = nonce;
  if (orphans.size() < 1024) orphans.push(o);
}

}  // namespace metaroce

namespace metaroce {
using detail::Connection;
using detail::ConnState;

// The per-packet entries (this one and the two poll_transmit) are marked hot:
// GCC optimizes them, with all that inlines into them, more aggressively and
// groups them in .text.hot. Measured: ~10 fewer instructions per data packet
// (scripts/engine-instructions.sh).
[[gnu::hot]] void Endpoint::handle_datagram(const RxDatagram& dg, TimeNs now) {
  Impl& m = *impl_;
  m.last_now = now;
  ++m.estats.datagrams_received;
  // Reused, and not cleared: each handler reads only its opcode's fields.
  wire::Packet& p = m.rx_packet;
  const wire::ParseError err = wire::decode_fields(dg.bytes, p, dg.trimmed);
  switch (err) {
    case wire::ParseError::kOk: break;
    case wire::ParseError::kTruncated: ++m.estats.truncated; return;
    case wire::ParseError::kBadVersion:
      ++m.estats.bad_version;
      if (dg.bytes.size() > 1 && dg.bytes[1] == static_cast<uint8_t>(wire::Opcode::kConnectReq))
        m.reject_bad_version(dg);
      return;
    case wire::ParseError::kBadOpcode: ++m.estats.bad_opcode; return;
    case wire::ParseError::kBadChecksum: ++m.estats.bad_checksum; return;
    case wire::ParseError::kBadLength: ++m.estats.bad_length; return;
    case wire::ParseError::kBadField: ++m.estats.bad_field; return;
  }
  const wire::Opcode op = p.bh.opcode;
  if (op == wire::Opcode::kConnectReq) {
    m.on_connect_req(dg, p, now);
    return;
  }
  Connection* c = m.find(ConnId{p.bh.dst_conn});
  if (c == nullptr) {
    ++m.estats.unknown_connection;
    if (op == wire::Opcode::kDisconnect) m.on_disconnect(dg, p, now);  // ack a repeat
    return;
  }
  if (!(c->peer == dg.peer)) {
    ++m.estats.wrong_peer;
    return;
  }
  switch (op) {
    case wire::Opcode::kConnectAccept:
    case wire::Opcode::kConnectReject:
      if (!m.on_connect_reply(*c, p, now)) return;  // rejected: connection is gone
      break;
    case wire::Opcode::kDisconnect: m.on_disconnect(dg, p, now); return;
    case wire::Opcode::kDisconnectAck:
      if (c->state == ConnState::kClosing) {
        m.push_event(EventKind::kClosed, *c, Status::kOk);
        m.destroy_connection(*c);
      }
      return;
    case wire::Opcode::kAck:
      if (c->state == ConnState::kEstablished) m.on_ack(*c, p, now);
      break;
    case wire::Opcode::kNak:
      if (c->state == ConnState::kEstablished) m.on_nak(*c, p, now);
      break;
    case wire::Opcode::kProbe:
      if (c->state == ConnState::kEstablished) {
        m.on_probe(*c, dg, p, now);
      } else if (c->state == ConnState::kError && c->nak.code != 0) {
        c->owe.nak = true;  // NAK-2: a sender probing its paths must still hear why
        c->nak_entropy = dg.entropy;
      }
      break;
    default:
      if (c->state == ConnState::kEstablished || c->state == ConnState::kError)
        m.on_data(*c, dg, p, now);
      break;
  }
  // The connection may have been destroyed above only on paths that return.
  c->last_activity = now;
  m.mark_ready(*c);
  m.update_timer(*c);
}

void Endpoint::handle_timeout(TimeNs now) {
  Impl& m = *impl_;
  m.last_now = now;
  m.flush_timers();
  while (!m.timers.empty() && m.timers.top_time() <= now) {
    const uint32_t index = m.timers.top_id();
    Connection* c = m.conns[index].get();
    if (c == nullptr) {
      m.timers.remove(index, m.timer_pos);
      continue;
    }
    m.timers.set(index, TimeNs::never(), m.timer_pos);
    m.run_timers(*c, now);
    // run_timers only marks: compute now, so that this loop sees the result.
    if (m.conns[index] && m.conns[index]->timer_dirty) {
      m.conns[index]->timer_dirty = false;
      m.compute_timer(*m.conns[index]);
    }
  }
  m.flush_timers();
}

TimeNs Endpoint::next_timeout() const {
  impl_->flush_timers();
  return impl_->timers.top_time();
}

[[gnu::hot]] bool Endpoint::poll_transmit(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  return impl_->poll<false>(now, buf, out);
}

[[gnu::hot]] bool Endpoint::poll_transmit_gather(TimeNs now, std::span<uint8_t> header_buf,
                                                 TxDatagram& out) {
  return impl_->poll<true>(now, header_buf, out);
}

bool Endpoint::poll_completion(Completion& out) {
  if (impl_->completions.empty()) return false;
  out = impl_->completions.pop();
  return true;
}

bool Endpoint::poll_event(Event& out) {
  if (impl_->events.empty()) return false;
  out = impl_->events.pop();
  return true;
}

// ---------------------------------------------------------------- API

Endpoint::Endpoint(const EndpointConfig& cfg) : impl_(std::make_unique<Impl>(cfg)) {}
Endpoint::~Endpoint() = default;

const EndpointConfig& Endpoint::config() const { return impl_->cfg; }

Status Endpoint::register_memory(void* addr, size_t length, uint32_t access, MemoryRegion& out) {
  uint64_t rkey;
  do {
    rkey = impl_->rng.next();
  } while (rkey == 0 || impl_->mrs.rkey_in_use(rkey));
  return impl_->mrs.add(addr, length, access, rkey, out);
}

Status Endpoint::deregister_memory(uint32_t lkey) { return impl_->mrs.remove(lkey); }

Status Endpoint::connect(const PeerAddr& peer, TimeNs now, ConnId& out) {
  return impl_->connect(peer, now, out);
}

void Endpoint::close(ConnId conn, TimeNs now) {
  if (Connection* c = impl_->find(conn)) impl_->close(*c, now);
}

bool Endpoint::is_established(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  return c != nullptr && c->state == ConnState::kEstablished;
}

PeerAddr Endpoint::peer_of(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  return c != nullptr ? c->peer : PeerAddr{};
}

Status Endpoint::post_send(ConnId conn, const SendWr& wr) {
  Connection* c = impl_->find(conn);
  if (c == nullptr) return Status::kNoSuchConnection;
  const Status s = impl_->post_send(*c, wr);
  if (s == Status::kOk) {
    c->last_activity = impl_->last_now;
    impl_->mark_ready(*c);
  }
  return s;
}

Status Endpoint::post_recv(ConnId conn, const RecvWr& wr) {
  Connection* c = impl_->find(conn);
  if (c == nullptr) return Status::kNoSuchConnection;
  c->last_activity = impl_->last_now;
  return impl_->post_recv(*c, wr);
}

Status Endpoint::post_shared_recv(const RecvWr& wr) { return impl_->post_shared_recv(wr); }

const EndpointStats& Endpoint::endpoint_stats() const { return impl_->estats; }

size_t Endpoint::transmit_buffer_bytes(bool gather) const { return impl_->min_tx_buffer[gather]; }

const ConnStats* Endpoint::conn_stats(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  return c != nullptr ? &c->stats : nullptr;
}

size_t Endpoint::path_count(ConnId conn) const {
  const Connection* c = impl_->find(conn);
  return c != nullptr ? c->num_paths : 0;
}

bool Endpoint::path_stats(ConnId conn, size_t path, PathStats& out) const {
  const Connection* c = impl_->find(conn);
  if (c == nullptr || path >= c->num_paths) return false;
  const detail::Path& p = c->paths[path];
  out = p.stats;
  out.entropy = p.entropy;
  out.state = p.state;
  out.srtt_ns = p.srtt;
  out.min_rtt_ns = p.min_rtt;
  out.cwnd_bytes = p.cwnd;
  out.inflight_bytes = p.inflight;
  out.alpha_permille = static_cast<uint32_t>((uint64_t{p.alpha} * 1000) >> 16);
  out.loss_rate_permille = static_cast<uint32_t>((uint64_t{p.loss_ewma} * 1000) >> 16);
  return true;
}

void Endpoint::set_trace(TraceFn fn, void* ctx) {
  impl_->trace_fn = fn;
  impl_->trace_ctx = ctx;
}

size_t Endpoint::idle_connection_bytes() {
  // The core plus its path array at the default path count; contexts are
  // pooled and returned when the connection goes idle.
  return sizeof(Connection) + EndpointConfig{}.num_paths * sizeof(detail::Path) +
         3 * sizeof(void*);  // connection table slot, generation, timer position
}

size_t Endpoint::active_context_bytes() const {
  const EndpointConfig& c = impl_->cfg;
  const size_t w = size_t{1} << c.window_log2;
  const size_t tx = sizeof(detail::TxCtx) + w * sizeof(detail::TxRecord) + w / 8 +
                    size_t{c.num_paths} * w * 4 + w * 4 +
                    std::bit_ceil(uint32_t{c.sq_depth}) * sizeof(detail::SqEntry) +
                    std::bit_ceil(impl_->resp_depth()) * sizeof(detail::RespJob) + c.max_reads * 4;
  const size_t rx = sizeof(detail::RxCtx) + w / 8 +
                    std::bit_ceil(uint32_t{c.rq_depth}) * sizeof(detail::RecvEntry);
  return tx + rx;
}

}  // namespace metaroce
