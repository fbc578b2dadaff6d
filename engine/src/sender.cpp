// Send side: work requests, segmentation into PSNs, retransmission, and the
// processing of ACKs and NAKs (spec SEQ-3/5/6, LOSS-*, SCHED-*, COMP-1/2).
#include <algorithm>
#include <cstring>

#include "bitmap.hpp"
#include "crc32c.hpp"
#include "impl.hpp"

namespace metaroce {
using detail::before;
using detail::Connection;
using detail::ConnState;
using detail::kFix;
using detail::Path;
using detail::TxCtx;
using detail::TxRecord;

namespace {
uint32_t packets_for(uint32_t len, uint32_t mtu) { return len == 0 ? 1 : (len + mtu - 1) / mtu; }
// The work request's opcodes are listed in the wire opcodes' order, one
// below them: an addition per packet, not a switch.
constexpr wire::Opcode data_opcode(WrOpcode op) {
  return static_cast<wire::Opcode>(static_cast<uint8_t>(op) + 1);
}
static_assert(data_opcode(WrOpcode::kWrite) == wire::Opcode::kWrite &&
              data_opcode(WrOpcode::kWriteImm) == wire::Opcode::kWriteImm &&
              data_opcode(WrOpcode::kSend) == wire::Opcode::kSend &&
              data_opcode(WrOpcode::kSendImm) == wire::Opcode::kSendImm &&
              data_opcode(WrOpcode::kRead) == wire::Opcode::kReadReq);
}  // namespace

Status Endpoint::Impl::post_send(Connection& c, const SendWr& wr) {
  if (c.state != ConnState::kEstablished && c.state != ConnState::kConnecting)
    return Status::kNotConnected;
  if (static_cast<uint8_t>(wr.op) > static_cast<uint8_t>(WrOpcode::kRead) || wr.length > (1u << 31))
    return Status::kInvalidArgument;
  const uint8_t* local = nullptr;
  if (wr.length > 0) {
    Status why = Status::kOk;
    const uint32_t need = wr.op == WrOpcode::kRead ? uint32_t{kAccessLocalWrite} : 0;
    local = mrs.local(wr.lkey, wr.local_addr, wr.length, need, why);
    if (local == nullptr) return why;
  }
  TxCtx& t = tx_ctx(c);
  if (t.sq_tail - t.sq_head >= cfg.sq_depth) return Status::kQueueFull;
  detail::SqEntry& e = t.sq[t.sq_tail & t.sq_mask];
  if (t.hdr_slot == (t.sq_tail & t.sq_mask)) t.hdr_slot = detail::kNoSlot;  // a new message
  // Each field set in place: `e = SqEntry{}` first cleared the whole entry
  // (a rep stos per message), to overwrite most of it at once.
  e.wr = wr;
  e.local = local;
  e.read_target = wr.op == WrOpcode::kRead ? const_cast<uint8_t*>(local) : nullptr;
  e.npkts = e.sent = e.first_psn = e.resp_pkts = e.resp_received = 0;
  e.msn = 0;
  if (wr.op == WrOpcode::kSend || wr.op == WrOpcode::kSendImm || wr.op == WrOpcode::kWriteImm)
    e.msn = c.next_rsn++;
  else if (wr.op == WrOpcode::kRead)
    e.msn = c.next_read_seq++;
  e.status = Status::kOk;
  e.failed = false;
  ++t.sq_tail;
  ++c.sq_count;
  return Status::kOk;
}

int Endpoint::Impl::pick_path_scan(Connection& c, int avoid, TimeNs now) {
  const uint32_t need = packet_cost(c.mtu);
  if (cfg.cc.max_inflight_packets != 0) {  // CC-9: the paths' windows do not bound their sum
    uint32_t total = 0;
    for (uint8_t k = 0; k < c.num_paths; ++k) total += c.paths[k].inflight;
    if (total + need > cfg.cc.max_inflight_packets * need) return -1;
  }
  int fallback = -1;
  int best = -1;
  uint64_t best_free = 0, best_cwnd = 1;
  const uint8_t n = c.num_paths;
  uint8_t i = c.rr_next < n ? c.rr_next : 0;
  for (uint8_t k = 0; k < n; ++k, i = static_cast<uint8_t>(i + 1 == n ? 0 : i + 1)) {
    detail::Path& p = c.paths[i];
    // LOSS-8: held until it answers; PATH-8: draining before it moves.
    if (p.state != PathState::kActive || p.held || i == c.draining_slot) continue;
    // CC-6: a window below one packet paces: one packet per srtt*need/cwnd.
    if (p.inflight > 0 ? p.inflight >= p.cwnd : (p.cwnd < need && now < p.next_send)) continue;
    if (p.next_pseq - p.ring_head >= c.window() && !trim_ring(c, i)) continue;
    if (i == avoid) {
      fallback = i;
      continue;
    }
    // SCHED-1: the emptiest window, as a fraction of the window (compared
    // by cross-multiplying, no division per path).
    const uint64_t free_bytes = p.cwnd - std::min(p.cwnd, p.inflight);
    if (best < 0 || free_bytes * best_cwnd > best_free * p.cwnd) {
      best = i;
      best_free = free_bytes;
      best_cwnd = p.cwnd;
      if (p.inflight == 0) break;  // an empty window: nothing can beat it
    }
  }
  if (best >= 0) {
    c.rr_next = static_cast<uint8_t>(best + 1 == n ? 0 : best + 1);
    return best;
  }
  // LOSS-3: the original path only when no other path is active at all
  // (asked only here, so the scan above need not track it).
  bool other_active = false;
  for (uint8_t k = 0; fallback >= 0 && k < n && !other_active; ++k) {
    const detail::Path& p = c.paths[k];
    other_active = k != avoid && p.state == PathState::kActive && !p.held && k != c.draining_slot;
  }
  if (fallback >= 0 && !other_active) {
    c.rr_next = static_cast<uint8_t>(fallback + 1 == n ? 0 : fallback + 1);
    return fallback;
  }
  return -1;
}

// Headers built field by field: READ requests and responses. Returns false
// (after entering the error state) if the request's memory was deregistered;
// h is 0 if the headers did not fit.
bool Endpoint::Impl::build_headers(Connection& c, TxCtx& t, uint16_t slot, uint32_t psn,
                                   uint8_t path, TimeNs now, std::span<uint8_t> buf,
                                   const uint8_t*& src, uint32_t& plen, size_t& h) {
  const uint32_t mtu = c.mtu;
  wire::BaseHeader bh = base_header(c, wire::Opcode::kWrite, now);
  wire::MessageHeader mh;
  wire::RdmaHeader rh;
  uint32_t imm = 0;
  if (slot & detail::kRespSlotFlag) {
    const detail::RespJob& j = t.resp[slot & ~detail::kRespSlotFlag];
    const uint32_t off = (psn - j.first_psn) * mtu;
    plen = std::min(mtu, j.len - off);
    bh.opcode = wire::Opcode::kReadResp;
    mh = {j.read_seq, off, j.len};
    src = j.src + off;
  } else {
    const detail::SqEntry& e = t.sq[slot];
    const uint32_t off = (psn - e.first_psn) * mtu;
    bh.opcode = data_opcode(e.wr.op);
    switch (e.wr.op) {
      case WrOpcode::kRead:
        mh = {e.msn, 0, e.wr.length};
        rh = {e.wr.rkey, e.wr.remote_addr};
        break;
      case WrOpcode::kWrite:
      case WrOpcode::kWriteImm:
        plen = std::min(mtu, e.wr.length - off);
        mh = {e.wr.op == WrOpcode::kWrite ? 0 : e.msn, off, e.wr.length};
        rh = {e.wr.rkey, e.wr.remote_addr + off};
        imm = e.wr.imm;
        src = e.local + off;
        break;
      case WrOpcode::kSend:
      case WrOpcode::kSendImm:
        plen = std::min(mtu, e.wr.length - off);
        mh = {e.msn, off, e.wr.length};
        imm = e.wr.imm;
        src = e.local + off;
        break;
    }
    if (!mrs.lkey_valid(e.wr.lkey) && e.wr.length > 0) {
      // The application deregistered memory under an outstanding request.
      enter_error(c, Status::kLocalProtection, psn, now);
      return false;
    }
  }
  bh.psn = psn;
  bh.path_tag = c.paths[path].tag(path);
  h = wire::write_data_headers(buf, bh, mh, &rh, imm);
  return true;
}

template <bool gather>
bool Endpoint::Impl::build_data(Connection& c, TxCtx& t, uint16_t slot, const detail::SqEntry* sq,
                                uint32_t psn, uint8_t path, bool retx, TimeNs now,
                                std::span<uint8_t> buf, TxDatagram& out) {
  const uint32_t mtu = c.mtu;
  detail::Path& p = c.paths[path];
  const auto tsval = static_cast<uint32_t>(now.ns);
  const uint8_t* src = nullptr;
  uint32_t plen = 0;
  size_t h = 0;
  bool ends_message = false;  // ACK-4: the receiver acknowledges it at once
  // poll() refused any buffer shorter than min_tx_buffer, which holds a
  // header template (and, without gather, a template, a payload of the
  // endpoint's MTU and the ICRC): neither size is tested again here.
  if (sq != nullptr && sq->wr.op != WrOpcode::kRead) {
    // WRITE and SEND: the message's headers, patched.
    const detail::SqEntry& e = *sq;
    if (mrs.any_removed() && !mrs.lkey_valid(e.wr.lkey) && e.wr.length > 0) {
      enter_error(c, Status::kLocalProtection, psn, now);
      return false;
    }
    const wire::Opcode op = data_opcode(e.wr.op);
    if (t.hdr_slot != slot) {
      const uint32_t msn = op != wire::Opcode::kWrite ? e.msn : 0;  // SEND*, WRITE_IMM: an RSN
      if (t.hdr_len != 0 && t.hdr[1] == static_cast<uint8_t>(op)) {
        // The previous message's headers, of the same opcode: only its
        // message fields differ.
        wire::patch_message_headers(t.hdr.data(), op, msn, e.wr.length, e.wr.rkey, e.wr.imm);
      } else {
        const wire::BaseHeader bh = base_header(c, op, now);
        const wire::RdmaHeader rh{e.wr.rkey, e.wr.remote_addr};
        t.hdr_len = static_cast<uint8_t>(
            wire::write_data_headers(t.hdr, bh, {msn, 0, e.wr.length}, &rh, e.wr.imm));
      }
      t.hdr_slot = slot;
    }
    const uint32_t off = (psn - e.first_psn) * mtu;
    plen = std::min(mtu, e.wr.length - off);
    ends_message = off + plen == e.wr.length;
    src = e.local + off;
    h = t.hdr_len;
    // Copied whole (a fixed-size copy is a few moves): what lies past the
    // headers is overwritten by the payload and ICRC, or is not the packet's.
    std::memcpy(buf.data(), t.hdr.data(), detail::kHeaderTemplateSize);
    wire::patch_data_headers(buf.data(), op, p.tag(path), psn, tsval, off, e.wr.remote_addr + off);
  } else {
    // Through copies: the template path's src, plen and h, had their
    // addresses been taken, would live in memory, not registers.
    const uint8_t* hsrc = nullptr;
    uint32_t hplen = 0;
    size_t hh = 0;
    if (!build_headers(c, t, slot, psn, path, now, buf, hsrc, hplen, hh)) return false;
    if (hh == 0 || (!gather && buf.size() < hh + hplen + wire::kIcrcSize)) return false;
    src = hsrc;
    plen = hplen;
    h = hh;
  }
  out.entropy = p.entropy;
  out.header_len = h;
  if (gather && plen > 0) {  // without payload the packet is built whole (see poll)
    out.payload = std::span<const uint8_t>(src, plen);
    uint32_t crc = wire::detail::crc32c_short(buf.data(), h);
    if (cfg.cover_payload) crc = wire::crc32c(crc, src, plen);
    out.trailer[0] = static_cast<uint8_t>(crc >> 24);
    out.trailer[1] = static_cast<uint8_t>(crc >> 16);
    out.trailer[2] = static_cast<uint8_t>(crc >> 8);
    out.trailer[3] = static_cast<uint8_t>(crc);
    out.len = h + plen + wire::kIcrcSize;
  } else {
    if (plen > 0 && cfg.cover_payload) std::memcpy(buf.data() + h, src, plen);
    if (gather) {
      out.len = finish(buf, h, plen);
    } else {
      // finish() without its tests: the datagram was found to fit above,
      // and the headers' PC flag is cfg.cover_payload (base_header).
      out.len = wire::detail::seal_fitting(buf.data(), h, plen, cfg.cover_payload);
    }
  }

  const uint32_t mask = c.wmask();
  TxRecord& r = t.records[psn & mask];
  r.psn = psn;
  r.slot = slot;
  r.len = static_cast<uint16_t>(plen);
  r.path = path;
  r.pseq = p.next_pseq++;
  r.flags = detail::kRecInFlight;
  r.tx_count = retx ? static_cast<uint8_t>(r.tx_count + (r.tx_count < 255)) : 1;  // LOSS-2
  ring_at(c, t, path, r.pseq) = psn;
  if (p.inflight == 0) arm_rto(c, p, now);
  // LOSS-8: no allowance for a delayed ACK when the packet draws one at once.
  p.tlp_deadline = now + (tlp_timeout(p) - (ends_message ? cfg.ack_delay_ns : 0));
  if (p.cwnd < packet_cost(c.mtu))
    p.next_send = now + p.srtt * packet_cost(c.mtu) / std::max<uint32_t>(p.cwnd, 1);
  p.inflight += packet_cost(plen);
  ++p.stats.packets_sent;
  p.stats.bytes_sent += plen;
  ++c.stats.data_packets_sent;
  c.stats.data_bytes_sent += plen;
  if (retx) {
    ++p.stats.retransmissions;
    ++c.stats.retransmissions;
  }
  trace(now, TraceKind::kSent, c, path, psn, retx ? 1 : 0);
  // An ICRC over headers only is sealed without the payload, which is then
  // copied last: here the call has few live values to save around it.
  if (!gather && plen > 0 && !cfg.cover_payload) std::memcpy(buf.data() + h, src, plen);
  return true;
}

template <bool gather>
bool Endpoint::Impl::emit_data(Connection& c, TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (!c.tx || now < c.rnr_until) return false;
  TxCtx& t = *c.tx;
  const uint32_t mask = c.wmask();
  // SCHED-2: retransmissions first, each away from the path it was lost on.
  while (t.retx_head != t.retx_tail) {
    const uint32_t psn = t.retx[t.retx_head & mask];
    TxRecord& r = t.records[psn & mask];
    if (r.psn != psn || !(r.flags & detail::kRecQueued) || (r.flags & detail::kRecAcked)) {
      if (r.psn == psn) r.flags &= static_cast<uint8_t>(~detail::kRecQueued);
      ++t.retx_head;
      continue;
    }
    const int path = pick_path(c, r.path, now);
    if (path < 0) {
      t.held_back = now;  // CC-2
      break;
    }
    ++t.retx_head;
    r.flags &= static_cast<uint8_t>(~detail::kRecQueued);
    const uint16_t rslot = r.slot;
    const detail::SqEntry* sq = rslot & detail::kRespSlotFlag ? nullptr : &t.sq[rslot];
    return build_data<gather>(c, t, rslot, sq, psn, static_cast<uint8_t>(path), true, now, buf,
                              out);
  }
  if (c.next_psn - c.cum_acked >= c.window()) {  // SEQ-3
    t.held_back = now;                           // CC-2
    return false;
  }
  // SEQ-5: a message's packets take consecutive PSNs, so a message once
  // started is finished before another begins. SCHED-4: between messages,
  // READ responses and the send queue take turns while both have one ready,
  // so that a steady stream of incoming READs cannot starve our own work,
  // nor the reverse. READ-5: a READ is answered only once every packet sent
  // before it has arrived, so it never returns data an earlier WRITE is
  // still replacing.
  detail::SqEntry* head = t.sq_seg != t.sq_tail ? &t.sq[t.sq_seg & t.sq_mask] : nullptr;
  detail::RespJob* job = nullptr;  // looked up only between messages
  bool use_resp = false;
  if (head == nullptr || head->sent == 0) {
    job = t.resp_seg != t.resp_tail ? &t.resp[t.resp_seg & t.resp_mask] : nullptr;
    if (job != nullptr && job->sent > 0) {
      use_resp = true;
    } else {
      const bool resp_ready = job != nullptr && before(job->req_psn, c.rx_cum);
      const bool sq_ready =
          head != nullptr &&
          !(head->wr.op == WrOpcode::kRead && c.reads_outstanding >= c.peer_max_reads);  // READ-3
      if (!resp_ready && !sq_ready) return false;
      use_resp = resp_ready && (!sq_ready || c.resp_turn);
    }
  }
  const int path = pick_path(c, -1, now);
  if (path < 0) {
    t.held_back = now;  // CC-2
    return false;
  }
  const uint32_t psn = c.next_psn;
  uint16_t slot;
  const detail::SqEntry* sq = nullptr;
  if (use_resp) {
    const auto ji = t.resp_seg & t.resp_mask;
    if (job->sent == 0) {
      job->first_psn = psn;
      c.resp_turn = false;  // SCHED-4: the send queue's turn next
    }
    if (++job->sent == job->npkts) ++t.resp_seg;
    slot = static_cast<uint16_t>(detail::kRespSlotFlag | ji);
  } else {
    const auto si = t.sq_seg & t.sq_mask;
    detail::SqEntry& e = *head;
    if (e.sent == 0) {
      e.first_psn = psn;
      e.npkts = e.wr.op == WrOpcode::kRead ? 1 : packets_for(e.wr.length, c.mtu);
      if (e.wr.op == WrOpcode::kRead) {
        e.resp_pkts = packets_for(e.wr.length, c.mtu);
        t.read_slot[e.msn % t.read_slot.size()] = si;
        ++c.reads_outstanding;
      }
      c.resp_turn = true;  // SCHED-4: the responses' turn next
    }
    if (++e.sent == e.npkts) ++t.sq_seg;
    slot = static_cast<uint16_t>(si);
    sq = head;
  }
  // Nothing to clear for the new PSN: the acked set holds bits only for
  // [cum_acked, next_psn) (mark_acked sets none outside it, advance_cum
  // clears those it leaves), and build_data writes the whole record (its
  // tx_count read only for a PSN sent before).
  ++c.next_psn;
  return build_data<gather>(c, t, slot, sq, psn, static_cast<uint8_t>(path), false, now, buf, out);
}
template bool Endpoint::Impl::emit_data<false>(Connection&, TimeNs, std::span<uint8_t>,
                                               TxDatagram&);
template bool Endpoint::Impl::emit_data<true>(Connection&, TimeNs, std::span<uint8_t>, TxDatagram&);

// ---------------------------------------------------------------- acks

void Endpoint::Impl::mark_acked(Connection& c, TxCtx& t, uint32_t psn, TimeNs now,
                                uint32_t& touched) {
  detail::bit_set(t.acked_bits, psn, c.wmask());
  on_acked(c, t, psn, now, touched);
}

// CC-2, CC-3 and the path's timers for one packet acknowledged: path.cpp's
// business, kept here so that it inlines into on_acked, its only caller.
void Endpoint::Impl::on_path_acked(Connection& c, const TxCtx& t, uint8_t path, uint32_t bytes,
                                   TimeNs now) {
  Path& p = c.paths[path];
  // PATH-5's decay toward no loss; a path that never lost one (nearly
  // every path, nearly always) is at zero already.
  if (p.loss_ewma != 0) p.loss_ewma -= per_loss_window(p.loss_ewma);
  ++p.outcomes;
  p.consecutive_rtos = 0;
  p.backoff = 0;
  p.held = false;  // LOSS-8: a packet sent here arrived
  p.rto_deadline = p.inflight > 0 ? now + path_rto(c, p) : TimeNs::never();
  // LOSS-8: the probe timer runs from the path's latest transmission. ACKs
  // for earlier packets that keep coming after a lost tail packet was sent
  // would otherwise put its repair back by up to a round trip.
  if (p.inflight == 0)
    p.tlp_deadline = TimeNs::never();
  else if (p.tlp_deadline == TimeNs::never())
    p.tlp_deadline = now + tlp_timeout(p);
  else
    p.tlp_deadline = std::max(p.tlp_deadline, now + p.srtt / 4);
  ++p.win_pkts;
  p.win_acked += bytes;
  if (!cfg.cc.enabled) return;  // CC-8
  const uint32_t unit = packet_cost(c.mtu);
  const uint32_t max_cwnd = c.max_cwnd;
  if (now.ns - t.held_back.ns > 2 * p.srtt) {  // a clock that stepped back skips a raise
    // CC-2: the sender had less to send than its windows allowed for two
    // round trips (application-limited); a window it does not fill tells
    // nothing about the network, and growing it would license a burst later.
  } else if (path == signalled_slot) {
    // CC-2: no increase on an ACK that echoes a congestion signal for the
    // path (as RFC 3168 has it). Below a packet, one ACK covers more than the
    // window: its increase would undo the cut it has just made, and hold an
    // incast of many senders at twice their share.
  } else if (p.slow_start) {
    p.cwnd += bytes;  // CC-2
  } else {
    p.cwnd_frac += bytes;
    if (p.cwnd_frac >= p.cwnd) {
      p.cwnd_frac -= p.cwnd;
      p.cwnd += unit;
    }
  }
  p.cwnd = std::min(p.cwnd, max_cwnd);
  if (p.win_acked >= p.cwnd) {  // CC-3: once per window of acknowledged data
    const uint64_t f =
        std::min<uint64_t>(kFix, (uint64_t{p.win_ce} * kFix) / std::max(p.win_pkts, 1u));
    const int64_t delta =
        (static_cast<int64_t>(f) - static_cast<int64_t>(p.alpha)) >> cfg.cc.dctcp_g_shift;
    p.alpha = static_cast<uint32_t>(std::clamp<int64_t>(p.alpha + delta, 0, kFix));
    p.win_acked = p.win_pkts = p.win_ce = 0;
  }
}

void Endpoint::Impl::on_acked(Connection& c, TxCtx& t, uint32_t psn, TimeNs now,
                              uint32_t& touched) {
  TxRecord& r = t.records[psn & c.wmask()];
  if (r.psn != psn) return;
  if (r.flags & detail::kRecInFlight) {
    detail::Path& p = c.paths[r.path];
    const uint32_t cost = packet_cost(r.len);
    p.inflight -= std::min(p.inflight, cost);
    // LOSS-2 orders a path's transmissions by what came back. A PSN sent
    // more than once may have been delivered by an earlier transmission on
    // another path (a late original after a spurious resend): its
    // acknowledgement says nothing about this path's order, and counting it
    // would declare everything sent here before the resend lost; unless the
    // ACK's echo names this very transmission.
    if ((r.tx_count == 1 || echo_names_latest(c, r)) &&
        (!p.any_acked || static_cast<int32_t>(r.pseq - p.highest_acked_pseq) > 0)) {
      p.highest_acked_pseq = r.pseq;
      p.any_acked = true;
    }
    // The path's oldest entry, acknowledged (in-order delivery: nearly every
    // time) leaves the send-order ring now. Every walk of the ring skips
    // entries no longer in flight, so this changes no outcome, but
    // detect_losses then returns at its first test instead of walking to
    // drop this entry.
    if (r.pseq == p.ring_head) ++p.ring_head;
    ++p.stats.packets_acked;
    // detect_losses would return at its first test unless the path's newest
    // acknowledgement is past its oldest entry (LOSS-2: a gap of the reorder
    // threshold, or of one for its time form). In-order delivery never leaves
    // one. Only a later acknowledgement on the same path can widen that gap
    // again before the ACK's loss walks, and it asks again: other paths are
    // skipped.
    if (static_cast<int32_t>(p.highest_acked_pseq - p.ring_head) > 0) touched |= 1u << r.path;
    on_path_acked(c, t, r.path, cost, now);
  }
  // One store for the record's new state (not in flight, acked, not queued)
  // after the path's updates: a byte store may alias anything, and one
  // between them made the compiler reload what it had.
  r.flags = static_cast<uint8_t>((r.flags & ~(detail::kRecInFlight | detail::kRecQueued)) |
                                 detail::kRecAcked);
  trace(now, TraceKind::kAcked, c, r.path, psn, 0);
}

void Endpoint::Impl::advance_cum(Connection& c, TxCtx& t, uint32_t cum, TimeNs now,
                                 uint32_t& touched) {
  // A word of the acked set at a time: PSNs a SACK already acknowledged are
  // skipped with one mask, and the bits leaving the window cleared together.
  const uint32_t mask = c.wmask();
  uint32_t psn = c.cum_acked;
  while (psn != cum) {
    const uint32_t bit = psn & 63;  // the window is a whole number of words
    const uint32_t n = std::min<uint32_t>(cum - psn, 64 - bit);
    uint64_t& word = t.acked_bits[(psn & mask) >> 6];
    const uint64_t range = detail::bit_run(bit, n);  // n >= 1: psn != cum
    uint64_t fresh = ~word & range;
    word &= ~range;
    const uint32_t base = psn - bit;
    while (fresh != 0) {
      const int k = __builtin_ctzll(fresh);
      fresh &= fresh - 1;
      on_acked(c, t, base + static_cast<uint32_t>(k), now, touched);
    }
    psn += n;
  }
  c.cum_acked = cum;
}

void Endpoint::Impl::on_ack(Connection& c, const wire::Packet& p, TimeNs now) {
  ++c.stats.acks_received;
  c.last_progress = now;
  // CC-2: the echo's congestion signal holds back its path's increase for
  // the packets this same ACK acknowledges, and for no other ACK: cleared
  // here, set by on_path_echo if the echo carries one. (Cleared before, not
  // after, by a destructor: its unwinding path cost ~15 instructions per
  // data packet.)
  signalled_slot = 0xff;
  ack_in_hand = &p.ack;
  on_path_echo(c, p.ack, now);
  if (!c.tx) return;
  TxCtx& t = *c.tx;
  const wire::AckBody& a = p.ack;
  // An ACK naming PSNs we never sent is bogus; one older than what we know is stale.
  if (before(c.next_psn, a.cum_psn)) return;
  uint32_t touched = 0;
  if (before(c.cum_acked, a.cum_psn)) advance_cum(c, t, a.cum_psn, now, touched);
  const uint32_t mask = c.wmask();
  for (uint32_t j = 0; j < a.sack_words; ++j) {
    const uint32_t base = a.cum_psn + 1 + 64 * j;
    if (!before(base, c.next_psn)) break;
    uint64_t fresh = a.sack[j] & detail::low_bits(c.next_psn - base);
    if (before(base, c.cum_acked)) {
      const uint32_t skip = c.cum_acked - base;
      if (skip >= 64) continue;
      fresh &= ~detail::low_bits(skip);
      fresh &= ~(detail::bits64(t.acked_bits, c.cum_acked, mask) << skip);
    } else {
      fresh &= ~detail::bits64(t.acked_bits, base, mask);
    }
    while (fresh != 0) {
      const int k = __builtin_ctzll(fresh);
      fresh &= fresh - 1;
      mark_acked(c, t, base + static_cast<uint32_t>(k), now, touched);
    }
  }
  if (a.flags & wire::kAckEchoProbe) on_tlp_echo(c, t, a, now);
  if (a.flags & wire::kAckEchoTrimmed) on_trim_echo(c, t, a, now);
  while (touched != 0) {
    const int i = __builtin_ctz(touched);
    touched &= touched - 1;
    detect_losses(c, t, static_cast<uint8_t>(i), now, cfg.recovery.reorder_threshold);
  }
  if (t.sq_seg == t.sq_tail && t.resp_seg == t.resp_tail && t.retx_head == t.retx_tail &&
      c.cum_acked != c.next_psn)
    chase_lone_tail(c, t, now);
  if (now >= t.explore.next || c.draining_slot != detail::kNoPath) explore(c, now);
  complete_sends(c);
  release_resp_jobs(c);
}

// LOSS-8, the connection's tail: nothing is left to send, the newest PSN
// has come back, and what is still in flight is all on one path. Packets
// sent after those came back over other paths, so the variance term that
// waits out a path's swinging RTT is not needed to tell late from lost:
// the path's timer is brought forward to a quarter round trip from this ACK.
// (Mid-stream the next packets on the path would show a loss, LOSS-2; at
// the tail there are none, and a flow's last packets decide when it ends.)
void Endpoint::Impl::chase_lone_tail(Connection& c, TxCtx& t, TimeNs now) {
  const uint32_t newest = c.next_psn - 1;
  const TxRecord& nr = t.records[newest & c.wmask()];
  if (nr.psn != newest || !(nr.flags & detail::kRecAcked)) return;
  int lone = -1;
  for (uint8_t i = 0; i < c.num_paths; ++i) {
    if (c.paths[i].inflight == 0) continue;
    if (lone >= 0) return;  // two paths still carry packets
    lone = i;
  }
  if (lone < 0) return;
  detail::Path& p = c.paths[static_cast<size_t>(lone)];
  if (p.state != PathState::kActive || p.tlp_outstanding) return;
  p.tlp_deadline = std::min(p.tlp_deadline, now + p.srtt / 4);
}

// LOSS-8: the path delivers in order, so once its tail-loss probe is echoed,
// every packet sent before the probe on that path and still unacknowledged
// (the ACK's SACK already covers all that arrived) was lost.
void Endpoint::Impl::on_tlp_echo(Connection& c, TxCtx& t, const wire::AckBody& a, TimeNs now) {
  const int slot = c.echoed_slot(a.echo_path_tag);
  if (slot < 0) return;
  detail::Path& p = c.paths[static_cast<size_t>(slot)];
  if (!p.tlp_outstanding || a.echo_psn != p.tlp_pseq) return;
  p.tlp_outstanding = false;
  bool run = false;  // PATH-5: consecutive losses are one outcome (detect_losses)
  while (p.ring_head != p.next_pseq && static_cast<int32_t>(p.ring_head - p.tlp_pseq) < 0) {
    TxRecord* r = in_flight_at(c, t, static_cast<uint8_t>(slot), p.ring_head);
    // Advance first: a loss may retire the path, which resets ring_head.
    ++p.ring_head;
    if (r != nullptr) declare_lost(c, t, *r, now, false, true, !run);
    run = r != nullptr;
  }
}

// TRIM-3: the echoed transmission reached the receiver without its payload,
// so it is lost for certain: it goes again now, away from its path (LOSS-3),
// instead of when LOSS-2 or LOSS-8 would find it. Not a PATH-5 outcome: a
// full queue cut it, not a broken link (its congestion signal is taken in
// on_path_echo). Only the path's current generation names the transmission
// in flight: after a retirement the PSN may be in flight again on the slot.
void Endpoint::Impl::on_trim_echo(Connection& c, TxCtx& t, const wire::AckBody& a, TimeNs now) {
  const int slot = c.echoed_slot(a.echo_path_tag);
  if (slot < 0) return;
  detail::Path& p = c.paths[static_cast<size_t>(slot)];
  if (before(a.echo_psn, c.cum_acked) || !before(a.echo_psn, c.next_psn)) return;
  TxRecord& r = t.records[a.echo_psn & c.wmask()];
  if (r.psn != a.echo_psn || r.path != slot || !(r.flags & detail::kRecInFlight)) return;
  ++p.stats.trims;
  ++c.stats.trims_echoed;
  declare_lost(c, t, r, now, false, false);
}

void Endpoint::Impl::on_nak(Connection& c, const wire::Packet& p, TimeNs now) {
  ++c.stats.naks_received;
  c.last_progress = now;
  trace(now, TraceKind::kNakReceived, c, 0, p.nak.nak_psn, p.nak.code);
  if (!c.tx) return;
  TxCtx& t = *c.tx;
  const auto code = static_cast<Status>(p.nak.code);
  const uint32_t psn = p.nak.nak_psn;
  if (!before(psn, c.next_psn) || before(psn, c.cum_acked)) return;  // not outstanding
  if (code == Status::kRnr) {
    // LOSS-7: not a path loss; resend after the receiver had time to post.
    TxRecord& r = t.records[psn & c.wmask()];
    if (r.psn == psn && (r.flags & detail::kRecInFlight)) declare_lost(c, t, r, now, false, false);
    c.rnr_until = now + cfg.recovery.rnr_retry_ns;
    return;
  }
  uint32_t touched = 0;
  signalled_slot = 0xff;  // CC-2: a NAK echoes no congestion signal
  ack_in_hand = nullptr;  // nor names a transmission (LOSS-2)
  if (before(c.cum_acked, p.nak.cum_psn) && !before(c.next_psn, p.nak.cum_psn))
    advance_cum(c, t, p.nak.cum_psn, now, touched);
  complete_sends(c);
  enter_error(c, code, psn, now);  // NAK-3
}

uint32_t& Endpoint::Impl::ring_at(Connection& c, TxCtx& t, uint8_t path, uint32_t pseq) {
  return t.path_rings[size_t{path} * c.window() + (pseq & c.wmask())];
}

// The record of the transmission that entry `pseq` of a path's send order
// names, while that transmission is still in flight; nullptr once the packet
// was acknowledged or resent since (a stale entry, skipped by every walk).
TxRecord* Endpoint::Impl::in_flight_at(Connection& c, TxCtx& t, uint8_t path, uint32_t pseq) {
  const uint32_t psn = ring_at(c, t, path, pseq);
  TxRecord& r = t.records[psn & c.wmask()];
  const bool live =
      r.psn == psn && r.path == path && r.pseq == pseq && (r.flags & detail::kRecInFlight);
  return live ? &r : nullptr;
}

// Drops send-order entries whose transmission is no longer in flight (acked,
// or resent elsewhere, as after an RNR). detect_losses does this as ACKs
// arrive; a path that hears none (RNR retries) needs it before it can take
// more. Returns true if the ring has room.
bool Endpoint::Impl::trim_ring(Connection& c, uint8_t path) {
  detail::Path& p = c.paths[path];
  while (p.ring_head != p.next_pseq && in_flight_at(c, *c.tx, path, p.ring_head) == nullptr)
    ++p.ring_head;
  return p.next_pseq - p.ring_head < c.window();
}

bool Endpoint::Impl::detect_losses(Connection& c, TxCtx& t, uint8_t path, TimeNs now,
                                   uint32_t packet_threshold) {
  detail::Path& p = c.paths[path];
  const auto threshold = static_cast<int32_t>(std::max<uint32_t>(packet_threshold, 1));
  // Nothing before the newest acknowledgement can be missing, so skip the
  // walk; the acknowledged entries before the first in flight are dropped
  // later, by this walk or by trim_ring, which every other reader of the
  // ring tolerates (they skip entries no longer in flight).
  if (!p.any_acked || static_cast<int32_t>(p.highest_acked_pseq - p.ring_head) <= 0) return false;
  bool any = false;
  bool run = false;  // the entry before was declared lost here (PATH-5)
  while (p.ring_head != p.next_pseq) {
    TxRecord* r = in_flight_at(c, t, path, p.ring_head);
    if (r == nullptr) {
      ++p.ring_head;  // acked, or resent since: not this transmission's concern
      run = false;
      continue;
    }
    // LOSS-2: a later transmission on the same path was acknowledged.
    const auto gap = static_cast<int32_t>(p.highest_acked_pseq - p.ring_head);
    if (gap < threshold) {
      // LOSS-2's time form: fewer than the threshold came after it, yet a
      // path delivers in order, so it is lost or at most barely late; the
      // tail-loss timer gives it a quarter round trip more (run_timers).
      // Without this a path's last packets before it fell quiet waited for
      // the tail-loss timer's full variance term.
      if (gap > 0 && p.state == PathState::kActive)
        p.tlp_deadline = std::min(p.tlp_deadline, now + p.srtt / 4);
      break;
    }
    ++p.ring_head;
    // PATH-5: a run of the path's consecutive packets lost together (a
    // drop-tail queue's overflow) is one outcome; CC-7 cuts once for it
    // anyway (at most once per srtt).
    declare_lost(c, t, *r, now, false, true, !run);
    run = any = true;
    if (p.ring_head == p.next_pseq || p.state != PathState::kActive) break;
  }
  return any;
}

void Endpoint::Impl::declare_lost(Connection& c, TxCtx& t, TxRecord& r, TimeNs now, bool timeout,
                                  bool count_outcome, bool judge) {
  detail::Path& p = c.paths[r.path];
  p.inflight -= std::min(p.inflight, packet_cost(r.len));
  r.flags = static_cast<uint8_t>((r.flags & ~detail::kRecInFlight) | detail::kRecQueued);
  t.retx[t.retx_tail++ & c.wmask()] = r.psn;
  trace(now, TraceKind::kLost, c, r.path, r.psn, timeout ? 1 : 0);
  if (count_outcome) {
    ++p.stats.losses;
    ++c.stats.losses_declared;
    if (judge) on_path_loss(c, r.path, now);
  }
}

void Endpoint::Impl::lose_path_inflight(Connection& c, uint8_t path, TimeNs now,
                                        bool count_outcome) {
  detail::Path& p = c.paths[path];
  if (c.tx) {
    TxCtx& t = *c.tx;
    for (; p.ring_head != p.next_pseq; ++p.ring_head) {
      TxRecord* r = in_flight_at(c, t, path, p.ring_head);
      if (r == nullptr) continue;
      declare_lost(c, t, *r, now, true, false);
      if (count_outcome) {
        ++p.stats.losses;
        ++c.stats.losses_declared;
      }
    }
  }
  p.ring_head = p.next_pseq;
  p.inflight = 0;
  p.rto_deadline = TimeNs::never();
  p.tlp_deadline = TimeNs::never();
  p.tlp_outstanding = false;
}

void Endpoint::Impl::on_rto(Connection& c, uint8_t path, TimeNs now) {
  detail::Path& p = c.paths[path];
  ++p.stats.timeouts;
  ++c.stats.timeouts;
  lose_path_inflight(c, path, now, true);  // LOSS-5
  p.backoff = static_cast<uint8_t>(std::min<int>(p.backoff + 1, 16));
  if (cfg.cc.enabled) {  // CC-8: without congestion control the window never moves
    p.cwnd = cwnd_floor(c);
    p.slow_start = true;
  }
  if (++p.consecutive_rtos >= cfg.recovery.rto_failures_to_retire) {
    retire_path(c, path, now);
    return;
  }
  // PATH-4: a timed-out path carries no more data until a PROBE comes back,
  // so a dead link costs one RTO of traffic, not three.
  p.state = PathState::kProbing;
  p.fresh = false;
  c.owe.probe |= 1u << path;
  p.probe_deadline = now + path_rto(c, p);
  trace(now, TraceKind::kPathState, c, path, p.entropy, static_cast<uint32_t>(p.state));
}

void Endpoint::Impl::complete_sends_from(Connection& c) {
  TxCtx& t = *c.tx;
  while (t.sq_head != t.sq_seg) {
    detail::SqEntry& e = t.sq[t.sq_head & t.sq_mask];
    const uint32_t last = e.first_psn + e.npkts - 1;
    if (!before(last, c.cum_acked)) break;  // COMP-1
    if (e.wr.op == WrOpcode::kRead && e.resp_received < e.resp_pkts) break;
    Completion comp;
    comp.wr_id = e.wr.wr_id;
    comp.conn = c.id;
    comp.op = static_cast<CompletionOp>(e.wr.op);
    comp.byte_len = e.wr.length;
    complete(c, comp);
    ++c.stats.send_completions;
    if (e.wr.op == WrOpcode::kRead) --c.reads_outstanding;
    ++t.sq_head;
    --c.sq_count;
  }
}

void Endpoint::Impl::release_resp_jobs(Connection& c) {
  TxCtx& t = *c.tx;
  while (t.resp_head != t.resp_seg) {
    const detail::RespJob& j = t.resp[t.resp_head & t.resp_mask];
    if (!before(j.first_psn + j.npkts - 1, c.cum_acked)) break;
    ++t.resp_head;
  }
}

}  // namespace metaroce
