// What comes back to the sender: ACKs (cumulative, selective, echoes that
// time paths and carry congestion signals) and NAKs, and the completions they
// release (spec ACK-*, CC-2/3/4, LOSS-2, TRIM-3/4, NAK-*, COMP-1/2).
#include <algorithm>

#include "bitmap.hpp"
#include "impl.hpp"

namespace metaroce {
using detail::before;
using detail::Connection;
using detail::kFix;
using detail::Path;
using detail::TxCtx;
using detail::TxRecord;

namespace {
// A packet the receiver may refuse with RNR (LOSS-7): one it places only
// with a posted receive buffer (PLACE-3), or a READ_REQ, which a READ queue
// full of answered READs refuses (READ-3). While its RNR NAK is pending the
// receiver names only the oldest it refused, so these, sent after that one,
// may have been refused too, unnamed.
bool may_be_refused(const TxCtx& t, const TxRecord& r) {
  if (r.slot & detail::kRespSlotFlag) return false;  // a READ response
  const WrOpcode op = t.sq[r.slot].wr.op;
  return op == WrOpcode::kRead || wire::consumes_receive(detail::data_opcode(op));
}

// MR-5: a responder that can no longer answer a READ names the READ_REQ,
// which the cumulative ACK may have passed long before; the READ is still
// open until its last response is placed.
bool names_open_read(TxCtx& t, const wire::NakBody& n) {
  const detail::SqEntry* e = t.open_read(n.msn);
  return e != nullptr && e->first_psn == n.nak_psn;
}
}  // namespace

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
  // A clock that stepped back skips a raise.
  if (now.ns - p.window_full.ns > 2 * p.srtt && now.ns - t.capped.ns > 2 * p.srtt) {
    // CC-2: SCHED-1's scan has not passed this path over as full (or
    // pacing) in the last two of its round trips, and CC-9's cap held nothing
    // back: whatever limited the sender, it was not this window. A window it
    // does not fill tells nothing about the network, and growing it would
    // license a burst later. (A full path is not passed over on every
    // packet: the scan starts after the path chosen last and stops at an
    // empty one; but it comes round to each path within a few packets.)
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
  // An ACK naming PSNs we never sent is bogus: it measures no path and is no
  // progress (checked before its echo touches RTT or window).
  if (before(c.next_psn, p.ack.cum_psn)) return;
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
  uint32_t touched = 0;  // one older than what we know is stale: it advances nothing
  // PATH-7: progress is work acknowledged for the first time. An ACK that
  // only answers a PROBE or repeats what is known says the peer lives, not
  // that data gets through: with packets of our MTU dropped on every path and
  // PROBEs answered, counting it kept the connection waiting for ever.
  if (before(c.cum_acked, a.cum_psn)) {
    advance_cum(c, t, a.cum_psn, now, touched);
    c.last_progress = now;
  }
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
    if (fresh != 0) c.last_progress = now;  // PATH-7
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
  // PATH-8 counts the time the connection is limited by its windows: this
  // ACK starts an idle stretch (nothing left to send) or ends one.
  if (t.sq_seg == t.sq_tail && t.resp_seg == t.resp_tail && t.retx_head == t.retx_tail) {
    if (!t.explore.idle) explore_idle_changed(c, now);
    if (c.cum_acked != c.next_psn) chase_lone_tail(c, t, now);
  } else if (t.explore.idle) {
    explore_idle_changed(c, now);
  }
  if (now >= t.explore.next || c.draining_slot != detail::kNoPath) explore(c, now);
  complete_sends(c);
  release_resp_jobs(c);
}

// LOSS-8, the connection's tail: nothing is left to send, the newest PSN
// has come back, and what is still in flight is all on one path, sent
// before the newest PSN last was. Packets sent after those came back, so the variance term that
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
  // Judged by when its packets were last sent, not by their PSNs: a resend
  // that left after the newest PSN's latest transmission was not overtaken
  // by anything that came back, so its own timer, variance term and all,
  // tells late from lost (an RNR'd SEND resent after a WRITE went, and the
  // WRITE's ACK, drew the SEND a third time).
  if (p.resent_at.ns != 0 && p.resent_newest == newest &&
      (nr.tx_count == 1 || p.resent_at > c.newest_resent_at))
    return;
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
    if (r != nullptr) declare_lost(c, t, *r, now, LossCause::kTailProbe, !run);
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
  // An echo of an earlier transmission, cut, and resent since on this same
  // path (LOSS-2's ambiguity), would declare the resend lost while it is on
  // its way, and send the packet a third time. Its tsval tells them apart.
  // (Not LOSS-2's flag: a PSN cut again and again in an incast, resent on
  // a third path, would then wait for LOSS-2 or LOSS-8 each time after its
  // second resend: incast8-256k with trimming went from 1.14x ideal to 1.86x.)
  if (r.tx_count > 1 && static_cast<uint8_t>(a.echo_tsval) != r.tsval_lo) return;
  ++p.stats.trims;
  ++c.stats.trims_echoed;
  declare_lost(c, t, r, now, LossCause::kTrimmed);
}

namespace {

// LOSS-7: counts the RNR NAKs that start a pause (one arriving within a
// pause answers a packet sent with the one that started it) since a packet
// still outstanding was first refused; true once there are more than
// `limit`. A count, not a time: each retry waits rnr_retry_ns already, and
// InfiniBand's rnr_retry counts too.
[[gnu::cold]] [[gnu::noinline]] bool rnr_retry_exceeded(Connection& c, uint32_t psn, TimeNs now,
                                                        uint32_t limit) {
  if (now < c.rnr_until) return false;
  // The packet refused first went through since (or the PSN is one of long
  // ago, wrapped): a new count.
  const bool outstanding = c.rnr_psn - c.cum_acked < c.next_psn - c.cum_acked;
  if (c.rnr_retries == 0 || !outstanding) {
    c.rnr_retries = 0;
    c.rnr_psn = psn;
  } else if (before(psn, c.rnr_psn)) {
    c.rnr_psn = psn;
  }
  return ++c.rnr_retries > limit;
}

}  // namespace

void Endpoint::Impl::on_nak(Connection& c, const wire::Packet& p, TimeNs now) {
  ++c.stats.naks_received;
  if (p.nak.code == static_cast<uint8_t>(Status::kRnr)) ++estats.rnr_naks_received;
  trace(now, TraceKind::kNakReceived, c, 0, p.nak.nak_psn, p.nak.code);
  if (!c.tx) return;
  TxCtx& t = *c.tx;
  const auto code = static_cast<Status>(p.nak.code);
  const uint32_t psn = p.nak.nak_psn;
  if (!before(psn, c.next_psn)) return;  // never sent
  if (before(psn, c.cum_acked) &&
      (code != Status::kRemoteOperationError || !names_open_read(t, p.nak)))
    return;  // not outstanding
  // Progress only for a NAK about work still outstanding: a stale one,
  // repeated, must not keep PATH-7's peer timeout from ever firing.
  c.last_progress = now;
  if (code == Status::kRnr) {
    if (cfg.recovery.rnr_retry_limit != 0 &&
        rnr_retry_exceeded(c, psn, now, cfg.recovery.rnr_retry_limit)) [[unlikely]] {
      // LOSS-7, NAK-4: as InfiniBand's RNR_RETRY_EXC_ERR, the request fails
      // and the connection with it, so that no later message overtakes it.
      enter_error(c, Status::kRnrRetryExceeded, detail::Culprit::send_psn(psn), now);
      return;
    }
    // LOSS-7: not a path loss; resend after the receiver had time to post.
    // The receiver refused every later packet that needs a receive buffer
    // too (it names only the oldest), and may have refused a later READ_REQ
    // (READ-3), so those are resent with it rather than found missing one by
    // one (the tail-loss timer, LOSS-2) and counted against their paths. A
    // READ_REQ it had accepted arrives again as a duplicate (READ-4).
    const uint32_t mask = c.wmask();
    for (uint32_t q = psn; before(q, c.next_psn); ++q) {
      TxRecord& r = t.records[q & mask];
      if (r.psn != q || !(r.flags & detail::kRecInFlight)) continue;
      if (q != psn && !may_be_refused(t, r)) continue;
      declare_lost(c, t, r, now, LossCause::kRnr);
      ++estats.rnr_resends;
    }
    c.rnr_until = now + cfg.recovery.rnr_retry_ns;
    return;
  }
  uint32_t touched = 0;
  signalled_slot = 0xff;  // CC-2: a NAK echoes no congestion signal
  ack_in_hand = nullptr;  // nor names a transmission (LOSS-2)
  if (before(c.cum_acked, p.nak.cum_psn) && !before(c.next_psn, p.nak.cum_psn))
    advance_cum(c, t, p.nak.cum_psn, now, touched);
  complete_sends(c);
  enter_error(c, code, detail::Culprit::send_psn(psn), now);  // NAK-3
}

void Endpoint::Impl::complete_sends_from(Connection& c) {
  TxCtx& t = *c.tx;
  while (t.sq_head != t.sq_seg) {
    detail::SqEntry& e = t.sq[t.sq_head & t.sq_mask];
    const uint32_t last = e.first_psn + e.npkts - 1;
    if (!before(last, c.cum_acked)) break;  // COMP-1
    if (e.wr.op == WrOpcode::kRead && e.resp_received < e.resp_pkts) break;
    if ((e.wr.flags & kSendUnsignaled) == 0) {  // a success nobody waits for is not reported
      Completion comp;
      comp.wr_id = e.wr.wr_id;
      comp.conn = c.id;
      comp.op = static_cast<CompletionOp>(e.wr.op);
      comp.byte_len = e.wr.length;
      complete(c, comp);
      ++c.stats.send_completions;
    } else {
      --wrs_open;  // done, with no completion to make room for
    }
    if (e.wr.op == WrOpcode::kRead) --c.reads_outstanding;
    mrs.release(e.wr.lkey);
    ++t.sq_head;
    --c.sq_count;
  }
}

// Out of line: the ACK path of an endpoint that asks for no such report
// pays one test of the flag, and only for a READ it served.
// Bounded (READ-6): an application that polls none would otherwise grow
// the queue by one per READ served, and its growth could throw on the ACK
// path.
void Endpoint::Impl::read_served(const Connection& c, const detail::RespJob& j) {
  if (reads_served.size() >= cfg.max_reads_served) {
    (void)reads_served.pop();
    ++estats.reads_served_dropped;
  }
  reads_served.push(ReadServed{c.id, j.lkey, j.raddr, j.len});  // room reserved: no allocation
}

void Endpoint::Impl::release_resp_jobs(Connection& c) {
  TxCtx& t = *c.tx;
  while (t.resp_head != t.resp_seg) {
    const detail::RespJob& j = t.resp[t.resp_head & t.resp_mask];
    if (!before(j.first_psn + j.npkts - 1, c.cum_acked)) break;
    if (cfg.read_served_events) [[unlikely]]
      read_served(c, j);
    mrs.release(j.lkey);
    ++t.resp_head;
  }
}

}  // namespace metaroce
