// Loss detection and recovery on the sender: each path's send order, losses
// declared from it (LOSS-2), and retransmission timeouts (LOSS-4/5, PATH-4).
#include <algorithm>

#include "bitmap.hpp"
#include "impl.hpp"

namespace metaroce {
using detail::before;
using detail::Connection;
using detail::Path;
using detail::TxCtx;
using detail::TxRecord;

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
    declare_lost(c, t, *r, now, LossCause::kReorder, !run);
    run = any = true;
    if (p.ring_head == p.next_pseq || p.state != PathState::kActive) break;
  }
  return any;
}

void Endpoint::Impl::declare_lost(Connection& c, TxCtx& t, TxRecord& r, TimeNs now, LossCause why,
                                  bool judge) {
  detail::Path& p = c.paths[r.path];
  p.inflight -= std::min(p.inflight, packet_cost(r.len));
  // LOSS-8 holds a path only while packets stay in flight on it: with none
  // left (an RNR NAK took the rest), no ACK, timer or probe would ever
  // release it, and the path would carry nothing again.
  if (p.inflight == 0) p.held = false;
  r.flags = static_cast<uint8_t>((r.flags & ~detail::kRecInFlight) | detail::kRecQueued);
  t.retx[t.retx_tail++ & c.wmask()] = r.psn;
  trace(now, TraceKind::kLost, c, r.path, r.psn, static_cast<uint32_t>(why));
  if (why == LossCause::kReorder || why == LossCause::kTailProbe) {
    ++p.stats.losses;
    ++c.stats.losses_declared;
    if (judge) on_path_loss(c, r.path, now);
  }
}

void Endpoint::Impl::lose_path_inflight(Connection& c, uint8_t path, TimeNs now, LossCause why) {
  detail::Path& p = c.paths[path];
  if (c.tx) {
    TxCtx& t = *c.tx;
    for (; p.ring_head != p.next_pseq; ++p.ring_head) {
      TxRecord* r = in_flight_at(c, t, path, p.ring_head);
      if (r == nullptr) continue;
      declare_lost(c, t, *r, now, why);
      if (why == LossCause::kTimeout) {
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
  explore_path_failed(c, path, now);                      // PATH-8
  lose_path_inflight(c, path, now, LossCause::kTimeout);  // LOSS-5
  // CC-8: without congestion control the window never moves. Slow start
  // resumes where the path carries data again, when its PROBE is answered
  // (on_path_echo, CC-2): a cut that late ACKs make while it probes is undone
  // there too, and a second setting here would hide that one's loss.
  if (cfg.cc.enabled) p.cwnd = cwnd_floor(c);
  if (count_timeout(c, p)) {
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

}  // namespace metaroce
