// Per-path congestion control and path health (spec CC-*, PATH-*, LOSS-4..6).
#include <algorithm>

#include "impl.hpp"
#include "move_verdict.hpp"

namespace metaroce {
using detail::Connection;
using detail::kFix;
using detail::Path;

namespace {
uint16_t draw_entropy(detail::Rng& rng, const EndpointConfig& cfg) {
  const uint32_t range = uint32_t{cfg.entropy_max} - cfg.entropy_min + 1;
  return static_cast<uint16_t>(cfg.entropy_min + rng.below(range));
}
}  // namespace

void Endpoint::Impl::init_paths(Connection& c) {
  c.paths.assign(c.num_paths, Path{});
  // PATH-1: consecutive values from a random start, so that a fabric hashing
  // by port spreads a connection's paths evenly.
  const uint32_t range = uint32_t{cfg.entropy_max} - cfg.entropy_min + 1;
  const uint32_t start = static_cast<uint32_t>(rng.below(range));
  for (uint8_t i = 0; i < c.num_paths; ++i) {
    Path& p = c.paths[i];
    p.entropy = static_cast<uint16_t>(cfg.entropy_min + (start + i) % range);
    p.cwnd = initial_cwnd(c);
    p.srtt = cfg.recovery.initial_rtt_ns;
    p.rttvar = cfg.recovery.initial_rtt_ns / 2;
  }
}

// LOSS-4: the connection's first RTT sample is lent to its other paths,
// none of which has a sample yet, where above their guess: the same two
// hosts, and often the same links, so a better guess than initial_rtt, which
// a fabric's first flight queued behind its own packets outlasts. Else their
// tail-loss timers (LOSS-8) fired for packets only queued. Only the first:
// lending each path's first sample to those still without one handed the
// slowest path's (a degraded link's) to the rest, and their repairs waited
// for it (fattree1024-perm2mb-degraded, seeds 3-5: 1.62-1.64x ideal against
// 1.41-1.43x).
void Endpoint::Impl::lend_first_rtt(Connection& c, const Path& from, uint64_t rtt) {
  for (const Path& q : c.paths)
    if (&q != &from && q.has_rtt) return;  // not the connection's first
  for (Path& q : c.paths) {
    if (&q == &from || q.srtt >= rtt) continue;
    const uint64_t before = tlp_timeout(q);
    q.srtt = rtt;
    q.rttvar = rtt / 2;
    // Its packets in flight were timed by the guess: their tail-loss timer
    // moves out as if they had been sent with this estimate.
    if (q.inflight > 0 && !q.tlp_outstanding && q.tlp_deadline != TimeNs::never())
      q.tlp_deadline = q.tlp_deadline + (tlp_timeout(q) - before);
  }
}

uint64_t Endpoint::Impl::base_rto(const Path& p) const {
  return std::max(cfg.recovery.min_rto_ns, p.srtt + 4 * p.rttvar);  // LOSS-4
}

uint64_t Endpoint::Impl::path_rto(const Connection& c, const Path& p) const {
  (void)c;
  return std::min(base_rto(p) << p.backoff, cfg.recovery.max_rto_ns);  // LOSS-5
}

void Endpoint::Impl::arm_rto(Connection& c, Path& p, TimeNs now) {
  p.rto_deadline = now + path_rto(c, p);
}

TimeNs Endpoint::Impl::probe_deadline(const Connection& c, const Path& p, TimeNs now) const {
  const auto slot = static_cast<uint32_t>(&p - c.paths.data());
  if (!c.path_silent(slot)) return now + path_rto(c, p);
  // PATH-6: a silent connection's interval starts at the path's RTO without
  // backoff and grows by half with each unanswered PROBE of any of its
  // silent paths, to max_rto. Doubling, as one path's backoff does, left a
  // connection whose every path is on a dead link (one path, or all hashed
  // onto a failed link) trying a new entropy only every 8, 16, 32 ms...;
  // by half, a dead peer still draws a few tens of PROBEs in PATH-7's 2 s.
  uint64_t rto = base_rto(p);
  for (uint8_t k = 0; k < c.silent_probes && rto < cfg.recovery.max_rto_ns; ++k) rto += rto / 2;
  rto = std::min(rto, cfg.recovery.max_rto_ns);
  TimeNs t = now + rto;
  // PATH-6: the silent paths of a connection probe in turn, each one RTO
  // after the latest probe due on the others, so that together they probe
  // as often as one path would (at most one PROBE per max_rto in all), and
  // spread: a peer that answers again is found within one RTO whichever
  // path probes next. Each path at its own rate would multiply the PROBEs
  // to a dead peer by the paths; all at a rate divided by the paths, and in
  // step, would leave the peer that came back unheard for that long.
  for (uint32_t m = c.silent_paths & ~(1u << slot); m != 0; m &= m - 1) {
    const Path& q = c.paths[static_cast<size_t>(__builtin_ctz(m))];
    if (q.state == PathState::kProbing) t = std::max(t, q.probe_deadline + rto);
  }
  return t;
}

bool Endpoint::Impl::count_timeout(const Connection& c, Path& p) {
  // A silent path keeps the mark of the silence it began in (retire_path).
  const auto slot = static_cast<uint32_t>(&p - c.paths.data());
  if (p.consecutive_rtos == 0 && !c.path_silent(slot))
    p.progress_mark = static_cast<uint32_t>(c.last_progress.ns);
  p.backoff = static_cast<uint8_t>(std::min<int>(p.backoff + 1, 16));
  return ++p.consecutive_rtos >= cfg.recovery.rto_failures_to_retire;
}

void Endpoint::Impl::wake_silent_paths(Connection& c, TimeNs now) {
  for (uint32_t m = c.silent_paths; m != 0; m &= m - 1) {
    const int i = __builtin_ctz(m);
    Path& q = c.paths[static_cast<size_t>(i)];
    q.backoff = 0;
    q.consecutive_rtos = 0;
    if (q.state != PathState::kProbing) continue;
    q.probe_deadline = now + path_rto(c, q);
    c.owe.probe |= 1u << i;
  }
  c.silent_paths = 0;
  c.silent_probes = 0;
}

void Endpoint::Impl::on_path_echo(Connection& c, const wire::AckBody& ack, TimeNs now) {
  const int echoed = c.echoed_slot(ack.echo_path_tag);  // PATH-3
  if (echoed < 0) return;
  const auto slot = static_cast<uint8_t>(echoed);
  Path& p = c.paths[slot];
  p.held = false;  // LOSS-8: the path answers
  if (p.state == PathState::kProbing) {
    p.state = PathState::kActive;  // PATH-6: the new entropy answered
    // PATH-6: the peer answers; paths that backed off while it was silent
    // find out at once rather than after their long wait.
    c.silent_paths &= ~(1u << slot);
    wake_silent_paths(c, now);
    p.probe_deadline = TimeNs::never();
    p.consecutive_rtos = 0;
    p.backoff = 0;
    // A new entropy starts at the initial window; a path back from a timeout
    // keeps the one packet LOSS-5 left it and slow-starts from there, so a
    // congestion timeout does not end in a burst (PATH-4).
    if (p.fresh) p.cwnd = initial_cwnd(c);
    p.fresh = false;
    p.slow_start = true;
    trace(now, TraceKind::kPathState, c, slot, p.entropy, static_cast<uint32_t>(p.state));
    explore_moved_path_back(c, slot, now);  // PATH-8
  }
  // LOSS-6: the sample is exact because the echo names this generation.
  const uint64_t rtt = static_cast<uint32_t>(static_cast<uint32_t>(now.ns) - ack.echo_tsval);
  if (rtt < 4 * kSecond) {
    if (!p.has_rtt) {
      p.srtt = rtt;
      p.rttvar = rtt / 2;
      p.min_rtt = p.min_rtt != 0 ? std::min(p.min_rtt, rtt) : rtt;  // PATH-8 keeps one
      p.has_rtt = true;
      lend_first_rtt(c, p, rtt);
    } else {
      const uint64_t err = p.srtt > rtt ? p.srtt - rtt : rtt - p.srtt;
      p.rttvar = (3 * p.rttvar + err) / 4;
      p.srtt = (7 * p.srtt + rtt) / 8;
      p.min_rtt = std::min(p.min_rtt, rtt);
    }
  }
  bool signal = false;
  // Most ACKs carry no mark: one test for them.
  if (ack.flags & (wire::kAckEchoCe | wire::kAckEchoTrimmed)) [[unlikely]] {
    // 3.11: a PROBE's answer acknowledges nothing the window sent, so ECHO_CE
    // on it (a peer that echoes a marked PROBE) is no congestion signal.
    const bool ce = (ack.flags & (wire::kAckEchoCe | wire::kAckEchoProbe)) == wire::kAckEchoCe;
    // TRIM-4: a trimmed packet met a full queue, a signal at least as strong
    // as a CE mark: it counts in alpha (CC-3), cuts (CC-4) and makes later
    // drops the queue's (CC-7, PATH-5) just as one.
    signal = ce || (ack.flags & wire::kAckEchoTrimmed) != 0;
    if (ce) ++p.stats.ce_marks;
    if (signal) {
      ++p.win_ce;
      p.last_congestion = now;
      signalled_slot = slot;  // CC-2: no increase on this ACK
    }
  }
  if (!cfg.cc.enabled || (ack.flags & wire::kAckEchoDup)) return;
  const bool delayed = rtt < 4 * kSecond && rtt > p.min_rtt + cfg.cc.target_queue_delay_ns;
  // Asked only with a signal in hand: most ACKs carry none.
  const bool may_decrease = (signal || delayed) && now.since(p.last_decrease) >= p.srtt;
  const uint32_t floor = cwnd_floor(c);
  if (signal && may_decrease) {  // CC-4
    p.cwnd -= static_cast<uint32_t>((uint64_t{p.cwnd} * p.alpha) >> 17);
    p.cwnd_frac = 0;  // CC-2: the next additive step counts from the cut
    p.slow_start = false;
    p.last_decrease = now;
  } else if (may_decrease && delayed) {  // CC-5
    const uint64_t excess = rtt - p.min_rtt - cfg.cc.target_queue_delay_ns;
    const uint64_t cut = std::min<uint64_t>(uint64_t{p.cwnd} * excess / rtt,
                                            uint64_t{p.cwnd} * cfg.cc.max_delay_decrease_pct / 100);
    p.cwnd -= static_cast<uint32_t>(cut);
    p.cwnd_frac = 0;
    p.slow_start = false;
    p.last_decrease = now;
    p.last_congestion = now;
  }
  p.cwnd = std::max(p.cwnd, floor);  // CC-6
}

void Endpoint::Impl::on_path_loss(Connection& c, uint8_t path, TimeNs now) {
  Path& p = c.paths[path];
  // PATH-5 looks for a broken path, not a busy one: drops that come with
  // congestion signals (ECN, delay) in the last few RTTs are the queue's.
  if (p.last_congestion.ns != 0 && now.since(p.last_congestion) < 4 * p.srtt) {
    // CC-7: such a drop is a full queue's, and in an incast most packets of
    // a path can be dropped before one CE mark comes back: it halves the
    // window, at most once per RTT.
    if (cfg.cc.enabled && now.since(p.last_decrease) >= p.srtt) {
      p.cwnd = std::max(p.cwnd / 2, cwnd_floor(c));
      p.cwnd_frac = 0;
      p.slow_start = false;
      p.last_decrease = now;
    }
    return;
  }
  const uint32_t n = std::max<uint32_t>(cfg.recovery.loss_window_packets, 1);
  p.loss_ewma += (kFix - p.loss_ewma) / n;
  ++p.outcomes;
  if (p.outcomes >= n && p.loss_ewma > uint64_t{kFix} * cfg.recovery.retire_loss_pct / 100)
    retire_path(c, path, now);  // PATH-5
}

void Endpoint::Impl::retire_path(Connection& c, uint8_t path, TimeNs now) {
  explore_path_failed(c, path, now);  // PATH-8
  lose_path_inflight(c, path, now, LossCause::kPathRetired);
  const uint16_t old = c.paths[path].entropy;
  // PATH-6: timeouts with nothing of the connection acknowledged since the
  // first of them, on any path: the peer is silent, or every path's link is
  // dead. The path probes on the connection's silent interval (probe_deadline)
  // rather than restarting its backoff, which probed a dead peer every few
  // milliseconds on every path until PATH-7 gave up. A path silent already
  // stays so while nothing is acknowledged since the mark it carries from
  // the first retirement of the silence. Silence also needs a base RTO with
  // nothing acknowledged: with rto_failures_to_retire 1 the mark is taken in
  // the call that retires, and every retirement was silent while the other
  // paths were acknowledged. With more timeouts to retire, a mark unchanged
  // implies it: they come at least a base RTO apart.
  const Path& failed = c.paths[path];
  const bool was_silent = c.path_silent(path);
  const bool silent =
      (was_silent || failed.consecutive_rtos >= cfg.recovery.rto_failures_to_retire) &&
      static_cast<uint32_t>(c.last_progress.ns) == failed.progress_mark &&
      now.since(c.last_progress) >= base_rto(failed);
  const uint32_t mark = failed.progress_mark;
  renew_path(c, path, now);
  Path& p = c.paths[path];
  if (silent) {
    c.silent_paths |= 1u << path;
    p.progress_mark = mark;
    p.probe_deadline = probe_deadline(c, p, now);
  }
  ++p.stats.retirements;
  ++c.stats.path_retirements;
  trace(now, TraceKind::kPathRetired, c, path, p.entropy, old);
}

// PATH-8. Paths are spread over links by a hash of their entropy, so a few
// of them can leave a link with no path at all (16 paths on 4 links: one run
// in 25), and nothing then tells the sender: every path it has is equally
// busy. Now and then the slowest path (least cwnd / srtt) is moved to a new
// entropy, as a trial: the connection's delivery rate in a short window once
// the path is back is compared with the interval before the move, and a move
// that lost more than 1/16 of it is undone (the path returns to its old
// entropy) and the next trial waits twice as long. A path that lands on an
// idle link raises the rate and stays; moving a path that had a link to
// itself empties that link, and is undone. A path drains (takes no new data
// until nothing is in flight on it) before it moves, so moving loses nothing.
// Both rates count only the time the connection was limited by its windows:
// an application with less to send acknowledges less whatever the links.
namespace {
uint64_t packets_acked(const Connection& c) {
  uint64_t n = 0;
  for (uint8_t i = 0; i < c.num_paths; ++i) n += c.paths[i].stats.packets_acked;
  return n;
}

// A measurement starts afresh from now.
void mark(detail::TxCtx::Exploration& x, TimeNs now, uint64_t acked) {
  x.mark_time = x.idle_since = now;
  x.mark_acked = x.idle_since_acked = acked;
  x.idle_ns = x.idle_acked = 0;
}

struct Tally {
  uint64_t acked, ns;
};

// Packets acknowledged and nanoseconds passed in idle stretches since the
// mark, the open one included.
Tally idle_since_mark(const detail::TxCtx::Exploration& x, TimeNs now, uint64_t acked) {
  if (!x.idle) return {x.idle_acked, x.idle_ns};
  return {x.idle_acked + (acked - x.idle_since_acked), x.idle_ns + now.since(x.idle_since)};
}

// Packets acknowledged and nanoseconds passed since the mark, idle stretches
// taken off.
Tally busy_since_mark(const detail::TxCtx::Exploration& x, TimeNs now, uint64_t acked) {
  const Tally idle = idle_since_mark(x, now, acked);
  // A clock that stepped back can leave the idle sum above the span.
  const uint64_t span = now.since(x.mark_time);
  return {acked - x.mark_acked - idle.acked, span > idle.ns ? span - idle.ns : 0};
}
}  // namespace

void Endpoint::Impl::explore_idle_changed(Connection& c, TimeNs now) {
  detail::TxCtx::Exploration& x = c.tx->explore;
  const uint64_t acked = packets_acked(c);
  if (!x.idle) {  // this ACK's packets were sent while data waited
    x.idle_since = now;
    x.idle_since_acked = acked;
  } else {  // this ACK's packets left during the idle stretch
    const Tally idle = idle_since_mark(x, now, acked);
    x.idle_acked = idle.acked;
    x.idle_ns = idle.ns;
  }
  x.idle = !x.idle;
}

void Endpoint::Impl::explore(Connection& c, TimeNs now) {
  if (!c.tx) return;
  detail::TxCtx::Exploration& x = c.tx->explore;
  if (c.draining_slot != detail::kNoPath) {
    const uint8_t slot = c.draining_slot;
    Path& p = c.paths[slot];
    if (p.state != PathState::kActive) {
      // A path in trouble keeps its packets' recovery (PATH-4 may move it).
      c.draining_slot = detail::kNoPath;
      x.reverting = false;
      return;
    }
    if (p.inflight != 0) return;
    c.draining_slot = detail::kNoPath;
    const uint16_t old = p.entropy;
    renew_path(c, slot, now, x.reverting ? x.old_entropy : -1, true);
    x.reverting = false;
    ++p.stats.explorations;
    ++c.stats.path_explorations;
    trace(now, TraceKind::kPathExplored, c, slot, p.entropy, old);
    return;
  }
  const uint64_t interval = cfg.cc.explore_interval_ns;
  if (interval == 0 || c.state != detail::ConnState::kEstablished) return;
  // PATH-8: every value of the block is some path's already; a move has
  // nowhere to go.
  if (uint32_t{cfg.entropy_max} - cfg.entropy_min + 1 <= c.num_paths) return;
  const uint64_t acked = packets_acked(c);
  if (x.next.ns == 0) {  // the clock starts with the first ACK
    mark(x, now, acked);
    x.next = now + interval;
    return;
  }
  // A measurement lasts until it holds a quarter interval of window-limited
  // time (bursts with idle gaps between them add up to it).
  const uint64_t need = std::max<uint64_t>(interval / 4, 1);
  const Tally busy = busy_since_mark(x, now, acked);
  if (busy.ns < need) {
    x.next = now + (x.trial != detail::kNoPath ? need - busy.ns : interval << x.backoff);
    return;
  }
  mark(x, now, acked);
  if (x.trial != detail::kNoPath) {  // the window after a move ended: judge it
    const uint8_t slot = x.trial;
    x.trial = detail::kNoPath;
    const auto verdict = detail::judge_move(x.before_acked, x.before_ns, busy.acked, busy.ns);
    if (verdict == detail::MoveVerdict::kWorse && c.paths[slot].state == PathState::kActive) {
      x.backoff = static_cast<uint8_t>(std::min(x.backoff + 1, 6));
      x.reverting = true;
      c.draining_slot = slot;
    } else if (verdict == detail::MoveVerdict::kBetter) {
      x.backoff = 0;
    }
    x.next = now + (interval << x.backoff);
    if (x.reverting) explore(c, now);  // an empty path moves back at once
    return;
  }
  x.next = now + (interval << x.backoff);
  int slowest = -1;
  for (uint8_t i = 0; i < c.num_paths; ++i) {
    const Path& p = c.paths[i];
    // Only among settled paths: one still probing is being moved already.
    if (p.state != PathState::kActive || !p.has_rtt) return;
    const Path* s = slowest < 0 ? nullptr : &c.paths[static_cast<size_t>(slowest)];
    if (s == nullptr || uint64_t{p.cwnd} * s->srtt < uint64_t{s->cwnd} * p.srtt) slowest = i;
  }
  if (slowest < 0 || c.num_paths < 2 || busy.acked == 0) return;
  x.before_acked = busy.acked;
  x.before_ns = busy.ns;
  x.trial = static_cast<uint8_t>(slowest);
  x.old_entropy = c.paths[static_cast<size_t>(slowest)].entropy;
  x.next = TimeNs::never();  // until the moved path is back
  c.draining_slot = static_cast<uint8_t>(slowest);
  explore(c, now);  // an empty path moves at once
}

// The moved path answered its probe: the window its trial is judged by
// starts now.
void Endpoint::Impl::explore_moved_path_back(Connection& c, uint8_t slot, TimeNs now) {
  if (!c.tx) return;
  detail::TxCtx::Exploration& x = c.tx->explore;
  if (slot != x.trial || x.next != TimeNs::never()) return;
  mark(x, now, packets_acked(c));
  x.next = now + std::max<uint64_t>(cfg.cc.explore_interval_ns / 4, 1);
}

// A path timed out (PATH-4) or is retired (PATH-5, PATH-6): a trial still
// open ends with no verdict, whichever path failed, and a move not yet made
// is not made. A verdict would weigh the failure, not the move: the trial
// path's failure could send it back to the entropy it just failed on (a
// failure while it drained), and another path's would undo a good move. The
// measurement restarts, so that the next trial is not measured against a
// failure either; it waits its interval from now.
void Endpoint::Impl::explore_path_failed(Connection& c, uint8_t slot, TimeNs now) {
  if (!c.tx) return;
  detail::TxCtx::Exploration& x = c.tx->explore;
  if (c.draining_slot == slot || (c.draining_slot == x.trial && !x.reverting)) {
    c.draining_slot = detail::kNoPath;
    x.reverting = false;
  }
  x.trial = detail::kNoPath;
  if (x.next.ns == 0 || cfg.cc.explore_interval_ns == 0) return;  // not started
  mark(x, now, packets_acked(c));
  x.next = now + (cfg.cc.explore_interval_ns << x.backoff);
}

// PATH-6: a random entropy that no path of the connection uses, or `old`
// when the block has none left (as many paths as entropy values): two paths
// on one value would be one route counted twice.
uint16_t Endpoint::Impl::unused_entropy(const Connection& c, uint16_t old, uint32_t range) {
  const auto used = [&](uint16_t e) {
    bool u = e == old;
    for (uint8_t i = 0; i < c.num_paths && !u; ++i) u = c.paths[i].entropy == e;
    return u;
  };
  if (range <= c.num_paths) return old;
  for (int tries = 0; tries < 64; ++tries) {
    const uint16_t e = draw_entropy(rng, cfg);
    if (!used(e)) return e;
  }
  // A block barely larger than the paths: look through it in order.
  const uint32_t start = static_cast<uint32_t>(rng.below(range));
  for (uint32_t k = 0; k < range; ++k) {
    const auto e = static_cast<uint16_t>(cfg.entropy_min + (start + k) % range);
    if (!used(e)) return e;
  }
  return old;
}

void Endpoint::Impl::renew_path(Connection& c, uint8_t path, TimeNs now, int entropy,
                                bool keep_rtt) {
  Path& p = c.paths[path];
  const uint16_t old = p.entropy;
  const uint32_t range = uint32_t{cfg.entropy_max} - cfg.entropy_min + 1;
  // An asked-for entropy (PATH-8's return), unless another path took it meanwhile.
  bool draw = entropy < 0;
  for (uint8_t i = 0; i < c.num_paths && !draw; ++i)
    draw = i != path && c.paths[i].entropy == static_cast<uint16_t>(entropy);
  uint16_t fresh = draw ? old : static_cast<uint16_t>(entropy);
  if (draw) fresh = unused_entropy(c, old, range);
  const PathStats keep = p.stats;
  const uint16_t gen = wire::generation_step(p.generation, 1);
  const uint32_t pseq = p.next_pseq;
  const uint64_t srtt = p.srtt, rttvar = p.rttvar, min_rtt = p.min_rtt;
  p = Path{};
  c.silent_paths &= ~(1u << path);  // PATH-6: retire_path says again if it is
  p.stats = keep;
  p.generation = gen;
  p.next_pseq = pseq;
  p.ring_head = pseq;
  p.entropy = fresh;
  p.state = PathState::kProbing;
  p.cwnd = initial_cwnd(c);
  if (keep_rtt) {
    // PATH-8: the same two hosts. The probe waits as long as the path's
    // packets did, not the initial RTT's timeout, which a deep queue outlasts
    // (PATH-4 would count that a timeout); and queueing delay (CC-5) is
    // measured from the base RTT the old path saw, not from the first
    // sample, which a busy link's queue inflates.
    p.srtt = srtt;
    p.rttvar = rttvar;
    p.min_rtt = min_rtt;
  } else {
    p.srtt = cfg.recovery.initial_rtt_ns;
    p.rttvar = cfg.recovery.initial_rtt_ns / 2;
  }
  p.probe_deadline = now + path_rto(c, p);
  c.owe.probe |= 1u << path;
  mark_ready(c);
}

}  // namespace metaroce
