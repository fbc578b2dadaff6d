// Timers: each connection's next deadline, kept lazily in one heap, and
// what happens when it passes (handshake retries, RTOs, tail-loss probes,
// pacing, delayed ACKs, context release; spec CONN-2, LOSS-4/5/8, ACK-5).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "impl.hpp"

namespace metaroce {
using detail::Connection;
using detail::ConnState;

namespace {
// Outstanding work besides packets in flight (PATH-7): resends queued, or a
// READ whose request was acknowledged and whose responses are still due (a
// responder gone since would otherwise leave it waiting).
bool awaits_peer(const Connection& c) {
  return c.tx && (c.tx->retx_head != c.tx->retx_tail || c.reads_outstanding > 0);
}

// READ-4: READs of ours wait for their responses with nothing of ours in
// flight or queued, so no tail-loss probe or RTO asks the responder anything.
bool reads_wait_unasked(const Connection& c) {
  if (!c.tx || c.reads_outstanding == 0 || c.tx->retx_head != c.tx->retx_tail) return false;
  for (uint8_t i = 0; i < c.num_paths; ++i)
    if (c.paths[i].inflight > 0) return false;
  return true;
}

// PATH-7's outstanding work: what the peer timeout times, and what keeps the
// keepalive (CONN-9) quiet. One test for both, or a deadline set by one and
// not served by the other would be due for ever.
bool has_outstanding(const Connection& c) {
  return (c.tx && c.cum_acked != c.next_psn) || awaits_peer(c);
}
}  // namespace

// The deadlines update_timer (impl.hpp) marked, computed once each.
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
  if (awaits_peer(c)) {
    if (!outstanding && c.state == ConnState::kEstablished) t = std::min(t, read_wait_deadline(c));
    outstanding = true;
  }
  // LOSS-7's pause holds back the whole send queue, not only the resends the
  // RNR queued (a stale RNR NAK queues none): whatever waits, wakes then.
  if (c.rnr_until.ns > 0 && unsent) t = std::min(t, c.rnr_until);
  if (c.state == ConnState::kEstablished) {
    if (outstanding)  // packets in flight: PATH-7's, never CONN-9's
      t = std::min(t, c.last_progress + cfg.recovery.peer_timeout_ns);
    else if (cfg.recovery.keepalive_ns != 0 && !has_outstanding(c))
      t = std::min(t, keepalive_deadline(c));
  }
  if (tx_idle(c) || rx_idle(c)) t = std::min(t, c.last_activity + cfg.context_idle_ns);
  // A deadline already passed is due at the next call, never in a loop
  // inside this one.
  if (t != TimeNs::never() && t <= last_now) t = last_now + 1;
  timers.set(c.index, t, timer_pos);
}

void Endpoint::Impl::run_timers(Connection& c, TimeNs now) {
  // CONN-9: a post counts from the first time the engine is given after it,
  // not from the call before (post_send's stamp), keepalive_ns past where
  // the driver slept: the quiet looked run out, and a PROBE went with the
  // work. Its work still waiting, nothing outstanding, no poll has sent it
  // since: this call is that time, or near it (a packet from the peer
  // stamps its own; work sent is PATH-7's to time). Once per post, so that
  // work with no path to leave on does not keep CONN-9 from timing it.
  if (c.post_unstamped) [[unlikely]] {
    c.post_unstamped = false;
    if (!has_outstanding(c) && c.tx && c.tx->has_unsent())
      c.last_activity = std::max(c.last_activity, now);
  }
  if (c.rnr_until <= now) c.rnr_until = TimeNs{0};
  if (c.control_deadline <= now) {
    c.control_deadline = TimeNs::never();
    // At most 65,535 requests whatever the config says: what `attempts` holds.
    const uint32_t budget = c.state == ConnState::kClosing ? cfg.disconnect_attempts
                            : c.connect_attempts != 0
                                ? c.connect_attempts
                                : std::min<uint32_t>(cfg.connect_attempts, UINT16_MAX);
    if (c.state == ConnState::kConnecting) {
      if (c.attempts >= budget) {
        push_event(EventKind::kConnectFailed, c, Status::kConnectTimeout);
        flush_all(c, Status::kConnectTimeout, detail::Culprit::oldest_send());
        remember_abandoned(c, Status::kConnectTimeout);
        destroy_connection(c);
        return;
      }
      c.owe.connect = true;
    } else if (c.state == ConnState::kClosing) {
      if (c.attempts >= budget) {
        push_event(EventKind::kClosed, c, Status::kPeerUnreachable);
        destroy_connection(c);
        return;
      }
      c.owe.disconnect = true;
    }
  }
  if (c.ack_deadline <= now) {
    c.ack_deadline = TimeNs::never();
    if (c.unacked > 0 && c.echo_count == 0) {  // ACK-5
      c.echoes[c.echo_count++] = c.latest;
      c.echo_weight = static_cast<uint16_t>(c.unacked);  // below 256, as in owe_latest
      c.unacked = 0;  // counted once: arrivals before this ACK goes are weighed apart
    }
  }
  if (c.state == ConnState::kEstablished) {
    for (uint8_t i = 0; i < c.num_paths; ++i) {
      detail::Path& p = c.paths[i];
      if (p.inflight > 0 && p.rto_deadline <= now) on_rto(c, i, now);
      if (p.inflight > 0 && p.state == PathState::kActive && p.tlp_deadline <= now) {
        if (p.tlp_outstanding && p.held) {
          if (c.last_progress > p.tlp_sent) {
            // LOSS-8: nothing came back on the path since its tail-loss
            // probe, answer included, while work of the connection was
            // acknowledged (PATH-7's progress): the path's RTO, early, rather
            // than leaving the rest of its packets to wait for the real one.
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
          p.tlp_deadline = TimeNs::never();
          detail::TxRecord* r = nullptr;
          if (c.tx) {
            trim_ring(c, i);
            r = in_flight_at(c, *c.tx, i, p.ring_head);
          }
          if (r && r->tx_count > 1 && c.tail_resent && c.last_progress <= c.tail_resent_at) {
            // LOSS-8: the oldest packet is itself a resend, and nothing of the
            // connection was acknowledged since the latest tail-loss resend.
            // Resending it again would start the same timer on the next path,
            // and so on without end (a peer that vanished drew a resend every
            // 150 us for PATH-7's 2 s); its RTO (LOSS-5) repairs it, backing
            // off, and PATH-4 finds a dead path.
          } else {
            c.owe.tlp |= 1u << i;  // LOSS-8
            // LOSS-8: the path's oldest packet goes again on another path
            // now, rather than one probe round trip later; the path takes no
            // new data until it answers, so a dead path is not refilled
            // meanwhile.
            if (r) {
              declare_lost(c, *c.tx, *r, now, LossCause::kTailResend);
              c.tail_resent_at = now;
              c.tail_resent = true;
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
        // A silent path's probes come the connection's silent interval
        // apart (PATH-6): each tries a new entropy, or with every path on
        // dead links (one path, or all hashed onto a failed link) the search
        // for a live one would take three times as long.
        const bool silent = c.path_silent(i);
        if (silent && c.silent_probes < 255) ++c.silent_probes;
        if (count_timeout(c, p) || silent) {
          retire_path(c, i, now);
        } else {
          c.owe.probe |= 1u << i;
          p.probe_deadline = probe_deadline(c, p, now);
        }
      }
    }
    // PATH-8: a draining path that a timer emptied (LOSS-2's time form,
    // LOSS-8) moves now. Its resends cannot go on it while it drains, so
    // with no other path to carry them no ACK would come to move it.
    if (c.draining_slot != detail::kNoPath && c.paths[c.draining_slot].inflight == 0)
      explore(c, now);
    if (!has_outstanding(c)) {
      if (cfg.recovery.keepalive_ns != 0 && keepalive_deadline(c) <= now) run_keepalive(c, now);
    } else if (now.since(c.last_progress) >= cfg.recovery.peer_timeout_ns) {
      enter_error(c, Status::kPeerUnreachable, detail::Culprit::oldest_send(), now);
    } else if (read_wait_deadline(c) <= now) {
      run_keepalive(c, now);  // READ-4: a PROBE, as CONN-9's
    }
  }
  maybe_release_ctx(c, now);
  mark_ready(c);
  update_timer(c);
}

// READ-4: when READs that wait unasked (reads_wait_unasked) PROBE the
// responder: a quiet RTO after anything was last heard from it, then as
// CONN-9's PROBEs follow each other. A responder that failed them sent its
// fatal NAK once (MR-5's 0x07, naming the READ_REQ), and one lost was
// heard only at PATH-7's peer timeout, which failed the READ
// kPeerUnreachable 2 s later: a PROBE draws it again (NAK-2), and a live
// responder's ACK.
TimeNs Endpoint::Impl::read_wait_deadline(const Connection& c) const {
  if (!reads_wait_unasked(c)) return TimeNs::never();
  if (c.keepalive_waiting()) return c.keepalive_next;
  return c.last_activity + base_rto(c.paths[0]);  // run_keepalive's first PROBE: slot 0
}

TimeNs Endpoint::Impl::keepalive_deadline(const Connection& c) const {
  if (!c.keepalive_waiting()) return c.last_activity + cfg.recovery.keepalive_ns;
  return std::min(c.keepalive_next, c.keepalive_at + cfg.recovery.peer_timeout_ns);
}

// CONN-9. An idle connection never times out by PATH-7, which times work,
// so a peer that vanished while it was idle (crashed, or forgot a
// connection whose ACCEPT or DISCONNECT was lost, CONN-7) left it open for
// ever. A PROBE is answered by a peer that holds the connection (an ACK),
// and by no one else (BAD-7).
void Endpoint::Impl::run_keepalive(Connection& c, TimeNs now) {
  if (!c.keepalive_waiting()) {
    c.keepalive_at = now;  // after keepalive_ns of quiet, so past last_activity
    c.keepalive_probes = 0;
    c.keepalive_slot = 0;
  } else if (now.since(c.keepalive_at) >= cfg.recovery.peer_timeout_ns) {
    enter_error(c, Status::kPeerUnreachable, detail::Culprit::oldest_send(), now);
    return;
  }
  // Each PROBE goes on the next path in turn, so a dead link fails no
  // keepalive; their interval grows by half from the path's RTO to max_rto,
  // as a silent path's (PATH-6): a dead peer draws a few tens of PROBEs in
  // peer_timeout, a lost PROBE is sent again within a round trip or two.
  const uint8_t slot = c.keepalive_slot < c.num_paths ? c.keepalive_slot : 0;
  c.keepalive_slot = static_cast<uint8_t>(slot + 1 == c.num_paths ? 0 : slot + 1);
  uint64_t interval = base_rto(c.paths[slot]);
  for (uint8_t k = 0; k < c.keepalive_probes && interval < cfg.recovery.max_rto_ns; ++k)
    interval += interval / 2;
  c.keepalive_next = now + std::min(interval, cfg.recovery.max_rto_ns);
  c.owe.probe |= 1u << slot;
  if (c.keepalive_probes < UINT8_MAX) ++c.keepalive_probes;
}

void Endpoint::handle_timeout(TimeNs now) {
  Impl& m = *impl_;
  m.last_now = now;
  // The records of ended connections go at the first call past their end:
  // next_timeout() does not wake an idle driver only to free them.
  if (now >= m.closed.next_end()) [[unlikely]]
    m.closed.expire(now);
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

}  // namespace metaroce
