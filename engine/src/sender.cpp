// Send side: work requests, path choice, segmentation into PSNs and the
// building of data packets, retransmissions first (spec SEQ-3/5/6, SCHED-*).
// acks.cpp processes what comes back; loss.cpp decides what was lost.
#include <algorithm>
#include <cstring>

#include "bitmap.hpp"
#include "crc32c.hpp"
#include "impl.hpp"

namespace metaroce {
using detail::before;
using detail::Connection;
using detail::ConnState;
using detail::packets_for;
using detail::Path;
using detail::TxCtx;
using detail::TxRecord;

using detail::data_opcode;

const char* send_wr_problem(const SendWr& wr) noexcept {
  if (static_cast<uint8_t>(wr.op) > static_cast<uint8_t>(WrOpcode::kRead))
    return "op is not a WrOpcode (kWrite to kRead)";
  if (wr.length > kMaxMessageLength)
    return "length is above the largest message, 2 GiB (kMaxMessageLength)";
  if ((wr.flags & ~kSendFlagsAll) != 0) return "flags has bits outside kSendFlagsAll";
  return nullptr;
}

Status Endpoint::Impl::post_send(Connection& c, const SendWr& wr) {
  if (c.state != ConnState::kEstablished && c.state != ConnState::kConnecting)
    return Status::kNotConnected;
  if (send_wr_problem(wr) != nullptr) return Status::kInvalidArgument;
  const uint8_t* local = nullptr;
  if (wr.length > 0) {
    Status why = Status::kOk;
    const uint32_t need = wr.op == WrOpcode::kRead ? uint32_t{kAccessLocalWrite} : 0;
    local = mrs.local(wr.lkey, wr.local_addr, wr.length, need, why);
    if (local == nullptr) return why;
  }
  if (tx_ctx(c) == nullptr) return Status::kResourceExhausted;
  TxCtx& t = *c.tx;
  if (t.sq_tail - t.sq_head >= cfg.sq_depth) return Status::kQueueFull;
  if (!room_for_completion()) return Status::kResourceExhausted;
  detail::SqEntry& e = t.sq[t.sq_tail & t.sq_mask];
  if (t.hdr_slot == (t.sq_tail & t.sq_mask)) t.hdr_slot = detail::kNoSlot;  // a new message
  // Each field set in place: `e = SqEntry{}` first cleared the whole entry
  // (a rep stos per message), to overwrite most of it at once.
  e.wr = wr;
  e.wr.lkey = mrs.hold(wr.lkey);  // MR-6: released where the entry goes
  e.local = local;
  e.read_target = wr.op == WrOpcode::kRead ? const_cast<uint8_t*>(local) : nullptr;
  e.npkts = e.sent = e.first_psn = e.resp_pkts = e.resp_received = e.resp_first_psn = 0;
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
    if (total + need > cfg.cc.max_inflight_packets * need) {
      if (c.tx) c.tx->capped = now;  // CC-2
      return -1;
    }
  }
  // The paths in round-robin order, as two runs over the array (from the
  // start to its end, then from its beginning), each with a pointer that
  // steps, not an index wrapped and multiplied out for every path. Every
  // path is looked at for each packet while all have packets in flight (a
  // busy connection, as on loopback): this form, with the invariants below
  // and the comparison without a subtraction, took the scan from 408 to 337
  // instructions a packet (scripts/engine-instructions.sh --pipelined).
  const uint8_t n = c.num_paths;
  const uint8_t start = c.rr_next < n ? c.rr_next : 0;
  // Loop invariants, in locals: the path stores and trim_ring's call below
  // made the compiler load them again for every path.
  const uint32_t window = c.window();
  const uint8_t draining = c.draining_slot;
  detail::Path* const paths = c.paths.data();
  int fallback = -1;
  int best = -1;
  // SCHED-1's best so far, as its window and what is in flight on it. Every
  // candidate has inflight < cwnd, or nothing in flight, so its free bytes
  // are cwnd - inflight, and free_i * cwnd_b > free_b * cwnd_i (the larger
  // free fraction) is inflight_b * cwnd_i > inflight_i * cwnd_b, with no
  // subtraction.
  uint32_t best_inflight = 0, best_cwnd = 0;
  // One path's turn; true when the scan ends there.
  const auto consider = [&](uint8_t i, detail::Path& p) {
    // LOSS-8: held until it answers, for new data and other paths' resends
    // (its own may still fall back to it, LOSS-3); PATH-8: draining before
    // it moves.
    if (p.state != PathState::kActive || (p.held && i != avoid) || i == draining) return false;
    const uint32_t inflight = p.inflight, cwnd = p.cwnd;
    // CC-6: a window below one packet paces: one packet per srtt*need/cwnd.
    if (inflight > 0 ? inflight >= cwnd : (cwnd < need && now < p.next_send)) {
      p.window_full = now;  // CC-2
      return false;
    }
    if (p.next_pseq - p.ring_head >= window && !trim_ring(c, i)) return false;
    if (i == avoid) {
      fallback = i;
      return false;
    }
    // SCHED-1: the emptiest window, as a fraction of the window (compared
    // by cross-multiplying, no division per path); ties to the first.
    if (best < 0 || uint64_t{best_inflight} * cwnd > uint64_t{inflight} * best_cwnd) {
      best = i;
      best_inflight = inflight;
      best_cwnd = cwnd;
      return inflight == 0;  // an empty window: nothing can beat it
    }
    return false;
  };
  [&] {
    detail::Path* p = paths + start;
    for (uint8_t i = start; i < n; ++i, ++p)
      if (consider(i, *p)) return;
    p = paths;
    for (uint8_t i = 0; i < start; ++i, ++p)
      if (consider(i, *p)) return;
  }();
  // LOSS-3: the original path only when no other path has room. Waiting for
  // one instead would let new data take this very path first (SCHED-2).
  if (best < 0) best = fallback;
  if (best < 0) return -1;
  c.rr_next = static_cast<uint8_t>(best + 1 == n ? 0 : best + 1);
  return best;
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
    if (!mrs.still_registered(j.lkey, j.len)) {
      // MR-5: the region the READ named was deregistered since: none of its
      // bytes go out, and the requester hears REMOTE_OPERATION_ERROR naming
      // its READ_REQ (which its on_nak accepts though acknowledged long ago).
      c.owe_nak(wire::NakBody{j.req_psn, static_cast<uint8_t>(Status::kRemoteOperationError),
                              j.read_seq, c.rx_cum},
                c.paths[path].entropy);
      enter_error(c, Status::kLocalProtection, detail::Culprit::none(), now);
      return false;
    }
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
        // READ-1: the READ completes only once this is acknowledged (COMP-1),
        // and ACK-4 does not count it as a message's last packet: without AR
        // its ACK waited ack_delay, long after the response had landed.
        bh.flags |= wire::kFlagAckRequested;
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
    // MR-5: the application deregistered memory under an outstanding request.
    // A READ_REQ sent before goes again whatever its target: it touches none
    // of it, and the responder may hold the READ already (only its ACK was
    // lost, say). Its responses find the target gone (on_read_resp) and the
    // responder hears NAK 0x07; failed here, the READ told it nothing, and it
    // resent its responses to a connection that answers none until its peer
    // timeout (PATH-7), 2 s. (A record holds this PSN with a transmission
    // only once it was sent: a new PSN's holds an older one's, or none.)
    const TxRecord& sent = t.records[psn & c.wmask()];
    const bool resent_read = e.wr.op == WrOpcode::kRead && sent.psn == psn && sent.tx_count > 0;
    if (!resent_read && !mrs.still_registered(e.wr.lkey, e.wr.length)) {
      enter_error(c, Status::kLocalProtection, detail::Culprit::send_psn(psn), now);
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
    // MR-5: MrTable::still_registered written out; the call compiled to about
    // six more instructions per packet here (scripts/engine-instructions.sh).
    if (mrs.any_removed() && !mrs.lkey_valid(e.wr.lkey) && e.wr.length > 0) {
      enter_error(c, Status::kLocalProtection, detail::Culprit::send_psn(psn), now);
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
    // LOSS-8: a READ response's last packet is acknowledged at once too
    // (ACK-4's test, offset + payload = msg_len, read off the headers built),
    // and so is a READ_REQ, which asks for it (AR, READ-1).
    ends_message =
        wire::data_headers_end_message(buf.data(), plen) || (buf[0] & wire::kFlagAckRequested) != 0;
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
  r.tsval_lo = static_cast<uint8_t>(tsval);                                       // TRIM-3
  ring_at(c, t, path, r.pseq) = psn;
  if (p.inflight == 0) {
    arm_rto(c, p, now);
    start_silence_clock(c, sq, psn, retx, now);  // nothing in flight on any path, perhaps
  }
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
    // LOSS-8: kept for the connection's tail (chase_lone_tail); resends
    // only, so that sending new data stores nothing more.
    p.resent_newest = c.next_psn - 1;
    p.resent_at = now;
    if (psn == p.resent_newest) c.newest_resent_at = now;
  }
  trace(now, TraceKind::kSent, c, path, psn, retx ? 1 : 0);
  // An ICRC over headers only is sealed without the payload, which is then
  // copied last: here the call has few live values to save around it.
  if (!gather && plen > 0 && !cfg.cover_payload) std::memcpy(buf.data() + h, src, plen);
  return true;
}

template <bool gather>
bool Endpoint::Impl::resend_data(Connection& c, TxCtx& t, TxRecord& r, uint8_t path, TimeNs now,
                                 std::span<uint8_t> buf, TxDatagram& out) {
  const uint8_t was_on = r.path;
  const uint16_t slot = r.slot;
  const detail::SqEntry* sq = slot & detail::kRespSlotFlag ? nullptr : &t.sq[slot];
  if (!build_data<gather>(c, t, slot, sq, r.psn, path, true, now, buf, out)) return false;
  // LOSS-2: once two transmissions went on one path, or more than two were
  // sent, an echo naming this PSN on this path may be of an earlier one.
  if (was_on == path || r.tx_count > 2) r.flags |= detail::kRecEchoAmbiguous;
  return true;
}

template <bool gather>
bool Endpoint::Impl::resend_response_in_pause(Connection& c, TimeNs now, std::span<uint8_t> buf,
                                              TxDatagram& out) {
  TxCtx& t = *c.tx;
  if (t.resp_head == t.resp_tail) return false;  // no READ response outstanding
  const uint32_t mask = c.wmask();
  for (uint32_t i = t.retx_head + 1; i != t.retx_tail; ++i) {
    const uint32_t psn = t.retx[i & mask];
    TxRecord& r = t.records[psn & mask];
    if (r.psn != psn || !(r.flags & detail::kRecQueued) || (r.flags & detail::kRecAcked) ||
        !(r.slot & detail::kRespSlotFlag))
      continue;
    // The whole scan, not pick_path's inline first look: that copy here
    // moved the hot emit_from's register allocation (+11 instructions a
    // packet).
    const int path = pick_path_scan(c, r.path, now);
    if (path < 0) return false;
    // Out of the ring's middle: the entries before it move up one place, so
    // none is left behind to be sent twice or to overfill the ring.
    for (uint32_t j = i; j != t.retx_head; --j) t.retx[j & mask] = t.retx[(j - 1) & mask];
    ++t.retx_head;
    r.flags &= static_cast<uint8_t>(~detail::kRecQueued);
    return resend_data<gather>(c, t, r, static_cast<uint8_t>(path), now, buf, out);
  }
  return false;
}

template <bool gather, bool rnr_wait>
inline bool Endpoint::Impl::emit_data_when(Connection& c, TimeNs now, std::span<uint8_t> buf,
                                           TxDatagram& out) {
  // LOSS-7: while the peer has no receive buffer posted, our send queue
  // waits (new messages and resends alike, so they stay in order); READ
  // responses do not, so the peer's READs are not held up by our SENDs.
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
    if constexpr (rnr_wait)
      if (!(r.slot & detail::kRespSlotFlag)) {
        if (resend_response_in_pause<gather>(c, now, buf, out)) return true;
        break;
      }
    const int path = pick_path(c, r.path, now);
    if (path < 0) break;
    ++t.retx_head;
    r.flags &= static_cast<uint8_t>(~detail::kRecQueued);
    return resend_data<gather>(c, t, r, static_cast<uint8_t>(path), now, buf, out);
  }
  if (c.next_psn - c.cum_acked >= c.window()) return false;  // SEQ-3
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
  if constexpr (rnr_wait)
    if (head != nullptr && head->sent > 0) return false;  // SEQ-5: finished in order
  if (head == nullptr || head->sent == 0) {
    job = t.resp_seg != t.resp_tail ? &t.resp[t.resp_seg & t.resp_mask] : nullptr;
    if (job != nullptr && job->sent > 0) {
      use_resp = true;
    } else {
      const bool resp_ready = job != nullptr && before(job->req_psn, c.rx_cum);
      const bool sq_ready =
          head != nullptr && !rnr_wait &&
          !(head->wr.op == WrOpcode::kRead && c.reads_outstanding >= c.peer_max_reads);  // READ-3
      if (!resp_ready && !sq_ready) return false;
      use_resp = resp_ready && (!sq_ready || c.resp_turn);
    }
  }
  const int path = pick_path(c, -1, now);
  if (path < 0) return false;
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
        t.read_slot_of(e.msn) = si;
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

template <bool gather>
bool Endpoint::Impl::emit_data_paused(Connection& c, TimeNs now, std::span<uint8_t> buf,
                                      TxDatagram& out) {
  return emit_data_when<gather, true>(c, now, buf, out);
}

template <bool gather>
bool Endpoint::Impl::emit_data(Connection& c, TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (!c.tx) return false;
  if (now < c.rnr_until) [[unlikely]]
    return emit_data_paused<gather>(c, now, buf, out);
  return emit_data_when<gather, false>(c, now, buf, out);
}
template bool Endpoint::Impl::emit_data<false>(Connection&, TimeNs, std::span<uint8_t>,
                                               TxDatagram&);
template bool Endpoint::Impl::emit_data<true>(Connection&, TimeNs, std::span<uint8_t>, TxDatagram&);

}  // namespace metaroce
