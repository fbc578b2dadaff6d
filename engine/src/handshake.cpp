// Connection setup and teardown (spec CONN-*), and the error state (NAK-2/3).
#include <algorithm>
#include <new>

#include "impl.hpp"

namespace metaroce {
using detail::Connection;
using detail::ConnState;

Status Endpoint::Impl::connect(const PeerAddr& peer, TimeNs now, ConnId& out, uint16_t max_mtu,
                               uint16_t attempts) {
  if (max_mtu != 0 && max_mtu < kMinMtu) return Status::kInvalidArgument;
  if (!addressable(peer)) return Status::kInvalidArgument;
  closed.expire(now);  // as handle_timeout does: a connecting endpoint may call nothing else
  Connection* c = create_connection(peer);
  if (c == nullptr) return Status::kResourceExhausted;
  c->is_requester = true;
  if (max_mtu != 0) c->mtu = std::min(c->mtu, max_mtu);  // CONN-1: what the route carries
  c->state = ConnState::kConnecting;
  c->connect_attempts = attempts;
  do {
    c->nonce = rng.next();
  } while (c->nonce == 0 || by_nonce.count(c->nonce) != 0);
  try {
    by_nonce[c->nonce] = c->index;
  } catch (const std::bad_alloc&) {
    destroy_connection(*c);  // its nonce not indexed: nothing of it left
    return Status::kResourceExhausted;
  }
  c->owe.connect = true;
  c->last_progress = now;
  out = c->id;
  mark_ready(*c);
  update_timer(*c);
  return Status::kOk;
}

bool Endpoint::Impl::establish(Connection& c, const wire::ConnectBody& peer_body, TimeNs now) {
  c.peer_conn = peer_body.src_conn;
  // CONN-3; c.mtu is the endpoint's, or less where the requester's route asked (CONN-1).
  // The peer's offer is at least kMinMtu (refused otherwise).
  c.mtu = std::min<uint16_t>(c.mtu, peer_body.mtu);
  c.set_window_log2(std::clamp(peer_body.window_log2, kMinWindowLog2, cfg.window_log2));  // SEQ-3
  set_cwnd_floor(c);
  c.peer_max_reads = std::max<uint8_t>(peer_body.max_reads, 1);
  c.rx_cum = peer_body.initial_psn;
  c.rx_high = peer_body.initial_psn;
  c.state = ConnState::kEstablished;
  c.last_progress = now;
  c.last_activity = now;  // CONN-9's quiet counts from here, not from the clock's zero
  // CC-1: the paths were given the endpoint's mtu's window; nothing has been
  // sent yet, so they start again at the agreed mtu's.
  for (uint8_t i = 0; i < c.num_paths; ++i) c.paths[i].cwnd = initial_cwnd(c);
  // Work posted while connecting was queued with the configured window; a
  // smaller negotiated window or read limit re-sizes the contexts (nothing is
  // in flight yet).
  // No memory for one: the old kept, for the work in it to be flushed.
  if (c.tx) {
    auto old = std::move(c.tx);
    if (tx_ctx(c) == nullptr) {
      c.tx = std::move(old);
      return false;
    }
    c.tx->sq = std::move(old->sq);
    c.tx->sq_head = old->sq_head;
    c.tx->sq_seg = old->sq_seg;
    c.tx->sq_tail = old->sq_tail;
    old->sq_head = old->sq_seg = old->sq_tail = 0;  // moved: held by c.tx now
    release_sends(*old);
    tx_pool.push_back(std::move(old));
  }
  if (c.rx) {
    auto old = std::move(c.rx);
    if (rx_ctx(c) == nullptr) {
      c.rx = std::move(old);
      return false;
    }
    c.rx->rq = std::move(old->rq);
    c.rx->rq_head = old->rq_head;
    c.rx->rq_tail = old->rq_tail;
    rx_pool.push_back(std::move(old));
  }
  return true;
}

void Endpoint::Impl::on_connect_req(const RxDatagram& dg, const wire::Packet& p, TimeNs now) {
  // A source that connect() would refuse as a peer (a driver's fault) gets no
  // connection, and no answer it could not be sent to.
  if (!addressable(dg.peer)) {
    ++estats.wrong_peer;
    return;
  }
  closed.expire(now);
  const wire::ConnectBody& b = p.connect;
  auto it = by_nonce.find(b.nonce);
  bool taken = false;  // the nonce belongs to another connection (CONN-3)
  if (it != by_nonce.end()) {
    Connection* c = conns[it->second].get();
    if (c != nullptr && !c->is_requester && c->peer == dg.peer && c->peer_conn == b.src_conn) {
      if (c->state == ConnState::kError) {
        // CONN-3: the connection failed while its requester, our ACCEPT
        // lost, still connects. The ACCEPT again would connect it to one
        // that answers nothing (NAK-2) until its own timeout failed it
        // kPeerUnreachable, seconds on; the REJECT names the failure now.
        ++estats.connects_refused;
        queue_reject(dg, b.src_conn, b.nonce, c->error);
        return;
      }
      c->owe.accept = true;  // CONN-3: our ACCEPT was lost; say it again
      mark_ready(*c);
      return;
    }
    // CONN-10: our own request, come back from our own address: a connection
    // to this endpoint itself, answered as any other's. The responder's
    // connection then takes the nonce over (by_nonce), so that a repeat of
    // the request finds it and draws the ACCEPT again.
    const bool own = c != nullptr && c->is_requester && c->state == ConnState::kConnecting &&
                     c->peer == dg.peer && c->id.v == b.src_conn;
    taken = c != nullptr && !own;
  }
  auto reject = [&](Status code) {
    ++estats.connects_refused;
    queue_reject(dg, b.src_conn, b.nonce, code);
  };
  if (b.src_conn == 0 || b.nonce == 0) return;  // malformed: nothing to answer to
  // CONN-3: a repeat of a request whose connection has closed since, delayed
  // in the network; its requester has gone too, or will not hear an ACCEPT.
  if (it == by_nonce.end() && answered_request_closed(dg.peer, b.src_conn, b.nonce)) return;
  if (!cfg.accept_incoming) return reject(Status::kConnectRefused);
  // A replay from another address (or a request reusing the nonce of one of
  // ours) must not take the nonce over: the original peer's repeated request
  // would then no longer find its connection, and would create a second one.
  if (taken) return reject(Status::kConnectRefused);
  // CONN-1: no end offers less than the least mtu; raising the offer would
  // send the peer larger packets than it accepts.
  if (b.mtu < kMinMtu) return reject(Status::kConnectRefused);
  // CONN-4: a full table, or memory short for one more connection.
  Connection* c = create_connection(dg.peer);
  if (c == nullptr) return reject(Status::kResourceExhausted);
  c->is_requester = false;
  try {
    by_nonce[b.nonce] = c->index;
  } catch (const std::bad_alloc&) {
    destroy_connection(*c);  // no nonce yet: nothing of it indexed
    return reject(Status::kResourceExhausted);
  }
  c->nonce = b.nonce;
  (void)establish(*c, b, now);  // a new connection: no context to move
  c->owe.accept = true;
  push_event(EventKind::kAccepted, *c, Status::kOk);
  mark_ready(*c);
  update_timer(*c);
}

bool Endpoint::Impl::on_connect_reply(Connection& c, const wire::Packet& p, TimeNs now) {
  if (c.state != ConnState::kConnecting || p.connect.nonce != c.nonce) return true;
  const bool accepted = p.bh.opcode == wire::Opcode::kConnectAccept;
  // CONN-3: an ACCEPT without the responder's id is malformed (every packet
  // sent on it would name connection 0); the requester keeps resending.
  if (accepted && p.connect.src_conn == 0) return true;
  c.owe.connect = false;  // CONN-2: a resend the timer asked for is moot now
  if (accepted && p.connect.mtu >= kMinMtu) {
    const bool held = establish(c, p.connect, now);
    c.control_deadline = TimeNs::never();
    push_event(EventKind::kConnected, c, Status::kOk);
    // The work posted while connecting, whose contexts found no memory to
    // take the agreed window: completed, the connection failed, as for a
    // local fault (COMP-5), rather than std::bad_alloc out of the engine.
    if (!held) [[unlikely]]
      enter_error(c, Status::kResourceExhausted, detail::Culprit::none(), now);
    return true;
  }
  fail_connect(c, p, accepted);
  return false;
}

void Endpoint::Impl::fail_connect(Connection& c, const wire::Packet& p, bool accepted) {
  // CONN-3: an ACCEPT offering less than the least mtu fails the connection
  // as a REJECT would, its reason kOk: no REJECT's, which is never 0, so the
  // application can tell the two apart. CONN-4: the REJECT's code as it came
  // (only three have a status of their own), so that it can be named.
  const auto code = static_cast<Status>(p.connect.code);
  const Status reason = accepted              ? Status::kOk
                        : code == Status::kOk ? Status::kConnectRefused  // names no reason
                                              : code;
  const Status why =
      !accepted && (code == Status::kVersionMismatch || code == Status::kResourceExhausted)
          ? code
          : Status::kConnectRefused;
  push_event(EventKind::kConnectFailed, c, why, reason);
  flush_all(c, why, detail::Culprit::none());
  destroy_connection(c);
}

void Endpoint::Impl::close(Connection& c, TimeNs now) {
  if (c.state == ConnState::kClosing || c.state == ConnState::kClosed) return;
  if (c.state == ConnState::kConnecting) {
    flush_all(c, Status::kFlushed, detail::Culprit::none());
    push_event(EventKind::kClosed, c, Status::kOk);
    remember_abandoned(c, Status::kOk);
    destroy_connection(c);
    return;
  }
  flush_all(c, Status::kFlushed, detail::Culprit::none());
  c.state = ConnState::kClosing;
  c.forget_acks();  // CONN-7: a closing connection answers nothing
  c.attempts = 0;
  c.owe.disconnect = true;
  c.last_progress = now;
  mark_ready(c);
  update_timer(c);
}

void Endpoint::Impl::on_disconnect(const RxDatagram& dg, const wire::Packet& p) {
  Connection* c = find(ConnId{p.bh.dst_conn});
  // CONN-7: only a connection that knows the peer's id can match it; a
  // requester still connecting has none yet (peer_conn 0).
  if (c == nullptr || c->state == ConnState::kConnecting || !(c->peer == dg.peer) ||
      c->peer_conn != p.disconnect.src_conn)
    return;
  flush_all(*c, Status::kPeerClosed, detail::Culprit::none());
  push_event(EventKind::kClosed, *c, Status::kPeerClosed,
             static_cast<Status>(p.disconnect.reason));  // CONN-8: any value closes
  destroy_connection(*c);
  ack_disconnect(dg, p);
}

bool Endpoint::Impl::on_unknown_connection(const RxDatagram& dg, const wire::Packet& p) {
  return p.bh.opcode == wire::Opcode::kDisconnect ? on_closed_disconnect(dg, p)
                                                  : on_abandoned_accept(dg, p);
}

bool Endpoint::Impl::on_abandoned_accept(const RxDatagram& dg, const wire::Packet& p) {
  const detail::ClosedRecord* r = find_closed(ConnId{p.bh.dst_conn});
  if (r == nullptr || r->abandoned_nonce == 0 || r->abandoned_nonce != p.connect.nonce ||
      !(r->peer == dg.peer) || p.connect.src_conn == 0)
    return false;
  // CONN-7: the responder made a connection we will never use; close it, once.
  Orphan o{};
  o.peer = dg.peer;
  o.entropy = dg.entropy;
  o.op = wire::Opcode::kDisconnect;
  o.dst_conn = p.connect.src_conn;
  o.disconnect.src_conn = r->id.v;
  o.disconnect.reason = static_cast<uint8_t>(r->reason);
  queue_orphan(o);
  return true;
}

bool Endpoint::Impl::on_closed_disconnect(const RxDatagram& dg, const wire::Packet& p) {
  const detail::ClosedRecord* r = find_closed(ConnId{p.bh.dst_conn});
  // peer_conn 0: one that ended while connecting, which no DISCONNECT closed.
  if (r == nullptr || r->peer_conn == 0 || !(r->peer == dg.peer) ||
      r->peer_conn != p.disconnect.src_conn)
    return false;
  ack_disconnect(dg, p);  // CONN-7: our DISCONNECT_ACK was lost; say it again
  return true;
}

void Endpoint::Impl::ack_disconnect(const RxDatagram& dg, const wire::Packet& p) {
  Orphan o{};
  o.peer = dg.peer;
  o.entropy = dg.entropy;
  o.op = wire::Opcode::kDisconnectAck;
  o.dst_conn = p.disconnect.src_conn;
  o.disconnect.src_conn = p.bh.dst_conn;
  queue_orphan(o);
}

bool Endpoint::Impl::emit_control(Connection& c, TimeNs now, std::span<uint8_t> buf,
                                  TxDatagram& out) {
  wire::ConnectBody body;
  body.src_conn = c.id.v;
  body.mtu = c.mtu;
  body.window_log2 = cfg.window_log2;
  body.max_reads = cfg.max_reads;
  body.max_version = wire::kVersion;
  body.nonce = c.nonce;
  out.entropy = c.paths[0].entropy;
  // CONN-2: each resend of a handshake or teardown packet takes the next
  // path's entropy, so one dead link on its way (or on the answer's way
  // back) does not fail the handshake or leave the peer open.
  const uint16_t rotated = c.paths[c.attempts % c.num_paths].entropy;
  size_t h = 0;
  if (c.owe.connect) {
    c.owe.connect = false;
    out.entropy = rotated;
    ++c.attempts;
    c.control_deadline = now + cfg.connect_retry_ns;
    body.initial_psn = c.initial_psn;
    body.reply_port = cfg.reply_port;  // answers come to it, whichever port this leaves from
    wire::BaseHeader bh = base_header(c, wire::Opcode::kConnectReq, now);
    bh.dst_conn = 0;
    h = wire::write_connect(buf, bh, body);
  } else if (c.owe.accept) {
    c.owe.accept = false;
    out.entropy = rotated;
    // A responder's count of ACCEPTs, for their rotation; close() starts it
    // again as the DISCONNECT's count (CONN-7), which an ACCEPT repeated
    // while closing (CONN-3) must not spend: one per lost ACCEPT cut the
    // DISCONNECT's 8 sends short.
    if (c.state != ConnState::kClosing) ++c.attempts;
    body.initial_psn = c.initial_psn;
    body.mtu = c.mtu;
    body.window_log2 = c.window_log2();
    h = wire::write_connect(buf, base_header(c, wire::Opcode::kConnectAccept, now), body);
  } else if (c.owe.disconnect) {
    c.owe.disconnect = false;
    out.entropy = rotated;
    ++c.attempts;
    c.control_deadline = now + cfg.connect_retry_ns;
    // CONN-8: the status that failed the connection (kOk, 0, if none did),
    // so that the peer can tell a close after an error from an orderly one.
    wire::DisconnectBody d{c.id.v, static_cast<uint8_t>(c.error)};
    h = wire::write_disconnect(buf, base_header(c, wire::Opcode::kDisconnect, now), d);
  } else if (c.owe.nak) {
    c.owe.nak = false;
    out.entropy = c.nak_entropy;
    c.nak.cum_psn = c.rx_cum;
    h = wire::write_nak(buf, base_header(c, wire::Opcode::kNak, now), c.nak);
    // Section 11.3's counters: RNR NAKs apart from the fatal ones, each
    // counted as it leaves (several RNR'd packets may draw one NAK).
    ++(c.nak.code == static_cast<uint8_t>(Status::kRnr) ? c.stats.rnr_naks_sent
                                                        : c.stats.naks_sent);
    trace(now, TraceKind::kNakSent, c, 0, c.nak.nak_psn, c.nak.code);
  } else if ((c.owe.probe | c.owe.tlp) != 0 && c.state == ConnState::kEstablished) {
    const bool tlp = c.owe.probe == 0;
    const auto slot = static_cast<uint8_t>(__builtin_ctz(tlp ? c.owe.tlp : c.owe.probe));
    (tlp ? c.owe.tlp : c.owe.probe) &= ~(1u << slot);
    detail::Path& p = c.paths[slot];
    wire::BaseHeader bh = base_header(c, wire::Opcode::kProbe, now);
    bh.flags |= wire::kFlagAckRequested;
    bh.path_tag = p.tag(slot);
    if (tlp) {
      // LOSS-8: the probe takes a place in the path's send order and carries
      // it in its psn field, so its echo says which earlier packets are gone.
      if (!c.tx || p.inflight == 0 || p.state != PathState::kActive || !trim_ring(c, slot))
        return emit_control(c, now, buf, out);
      p.tlp_pseq = p.next_pseq++;
      ring_at(c, *c.tx, slot, p.tlp_pseq) = c.next_psn;  // names no live record
      p.tlp_outstanding = true;
      p.tlp_sent = now;
      bh.psn = p.tlp_pseq;
      // An answer is due within the same timer; none means the path is dead
      // or far slower than its srtt says (run_timers).
      p.tlp_deadline = now + tlp_answer_timeout(p);
    }
    out.entropy = p.entropy;
    ++p.stats.probes_sent;
    h = wire::write_probe(buf, bh);
  } else {
    return false;
  }
  out.len = finish(buf, h, 0);
  out.header_len = h;
  return out.len > 0;
}

void Endpoint::Impl::flush_all(Connection& c, Status first, detail::Culprit who) {
  using Kind = detail::Culprit::Kind;
  if (c.tx) {
    detail::TxCtx& t = *c.tx;
    bool named = false;
    for (uint32_t i = t.sq_head; i != t.sq_tail; ++i) {
      detail::SqEntry& e = t.sq[i & t.sq_mask];
      Status s = first == Status::kPeerClosed ? Status::kPeerClosed : Status::kFlushed;
      if (!named && (who.kind == Kind::kSendPsn || who.kind == Kind::kOldestSend)) {
        // The WR holding the failed PSN gets the NAK's code (COMP-5); a
        // timeout names the oldest outstanding one.
        const auto d = static_cast<int32_t>(who.psn - e.first_psn);
        named = who.kind == Kind::kOldestSend ||
                (e.sent > 0 && d >= 0 && d < static_cast<int32_t>(e.sent));
        if (named) s = first;
      }
      Completion comp;
      comp.wr_id = e.wr.wr_id;
      comp.conn = c.id;
      comp.status = s;
      comp.op = static_cast<CompletionOp>(e.wr.op);
      comp.byte_len = e.wr.length;  // as a success's: what the request posted
      complete(c, comp);
      ++c.stats.send_completions;
    }
    release_sends(t);
    t.sq_head = t.sq_seg = t.sq_tail = 0;
    t.resp_head = t.resp_seg = t.resp_tail = 0;
    t.retx_head = t.retx_tail = 0;
    c.sq_count = 0;
  }
  if (c.rx) {
    detail::RxCtx& r = *c.rx;
    const detail::RecvEntry* culprit =
        who.kind == Kind::kRecv ? &r.rq[who.rq_pos & r.rq_mask] : nullptr;
    if (!srq.empty()) give_back_shared(r, culprit);  // PLACE-6
    for (uint32_t i = r.rq_head; i != r.rq_tail; ++i) {
      const detail::RecvEntry& e = r.rq[i & r.rq_mask];
      if (e.shared && &e != culprit) continue;
      Completion comp;
      comp.wr_id = e.wr.wr_id;
      comp.conn = c.id;
      comp.status = &e == culprit                  ? first
                    : first == Status::kPeerClosed ? Status::kPeerClosed
                                                   : Status::kFlushed;
      srq_outstanding -= e.shared;  // a shared receive at fault is completed here
      mrs.release(e.wr.lkey);       // the others given back hold theirs still
      comp.op = CompletionOp::kRecv;
      complete(c, comp);
      ++c.stats.recv_completions;
    }
    r.rq_head = r.rq_tail = 0;
  }
  for (uint8_t i = 0; i < c.num_paths; ++i) {
    c.paths[i].inflight = 0;
    c.paths[i].rto_deadline = TimeNs::never();
  }
}

void Endpoint::Impl::enter_error(Connection& c, Status why, detail::Culprit who, TimeNs now) {
  if (c.state == ConnState::kError) return;
  flush_all(c, why, who);
  c.state = ConnState::kError;
  c.error = why;
  // NAK-2: a failed connection acknowledges nothing, whatever failed it: the
  // ACKs owed from before are dropped, else emit_for still sent them, after
  // a fatal NAK of its own too (whose cum_psn acknowledges what they would
  // have, NAK-3). Failed for another reason (a timeout, a local fault), it
  // answers nothing at all: an RNR NAK owed is dropped too.
  c.forget_acks();
  if (!c.sent_fatal_nak()) c.owe.nak = false;
  // As trace.hpp says: the Status (ConnState is internal), and the PSN of
  // our request at fault or 0.
  trace(now, TraceKind::kConnState, c, 0, who.psn, static_cast<uint32_t>(why));
  push_event(EventKind::kError, c, why);
}

}  // namespace metaroce
