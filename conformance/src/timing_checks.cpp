// Rules about a path's estimates, read through the agent's path state:
// LOSS-4's RTT estimator, CC-3's DCTCP marking fraction and TRIM-4's cut.
#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <optional>
#include <set>

#include "checks.hpp"

namespace metaroce::conformance {
namespace {

// The target WRITEs one message of `len` bytes to the tester and returns the
// first copy of each of its `n` packets, PSNs `psn` on, in `ds` (PSN order),
// kept alive in `rs`. Resends of earlier packets that come meanwhile are
// passed over.
bool message_packets(Target& t, Peer& p, ConnId conn, uint64_t wr_id, uint32_t len, uint32_t psn,
                     size_t n, std::vector<Reply>& rs, std::vector<const Reply*>& ds,
                     std::string& why) {
  if (!target_writes(t, conn, len, wr_id, why)) return false;
  rs = p.run(1000);
  const auto own = [&rs, psn, n] {
    std::vector<const Reply*> out;
    for (const Reply* d : firsts(of(rs, wire::Opcode::kWrite)))
      if (d->pkt.bh.psn - psn < n) out.push_back(d);
    std::sort(out.begin(), out.end(), [psn](const Reply* a, const Reply* b) {
      return a->pkt.bh.psn - psn < b->pkt.bh.psn - psn;
    });
    return out;
  };
  const auto all_sent = [&own, n] { return own().size() >= n; };
  // A target may be paced (CC-6: a window cut below a packet by CE echoes
  // sends one per srtt), and one in real time kept off its CPU a while. On a
  // busy host srtt takes in the scheduler's delays, and a path at its floor
  // of a quarter packet waits four of them: up to 2 s, ended by the WRITE.
  // Short waits: a packet that came is acknowledged within 10 us, before
  // the target's tail-loss timer (LOSS-8) could take it for lost.
  // PROBEs are answered only once the message has waited 100 rounds: a
  // target in real time, kept from its tester a while, may take all its paths
  // for failed (PATH-4, PATH-6) and send nothing but PROBEs until one is
  // answered. Answered at once, they would let PATH-8 move a path every 20 ms
  // of real time, each move restarting its alpha (CC-3) long before the
  // hundreds of packets that alpha needs; unanswered, the moved path stays
  // PROBING and no other is moved (PATH-8 moves only with all paths ACTIVE).
  // Everything before `psn` is acknowledged by now.
  for (int i = 0; i < 200'000 && !all_sent(); ++i) {
    std::vector<Reply> more = p.run(10'000);
    if (i >= 100) answer_probes(p, more, psn);
    rs.insert(rs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  ds = own();
  if (ds.size() < n) {
    why = "the WRITE was not sent whole";
    return false;
  }
  return true;
}

// The target WRITEs one single-packet message to the tester and returns that
// packet (first copy) in `d`, kept alive in `rs`. `wr_id` numbers the
// connection's messages, all of one packet, from 0: it gives the PSN.
bool one_packet(Target& t, Peer& p, ConnId conn, uint64_t wr_id, std::vector<Reply>& rs,
                const Reply*& d, std::string& why) {
  std::vector<const Reply*> ds;
  if (!message_packets(t, p, conn, wr_id, 1000, p.target_initial_psn + static_cast<uint32_t>(wr_id),
                       1, rs, ds, why))
    return false;
  d = ds.front();
  return true;
}

// The target connected to a fresh tester (`conn_id` its side), its first
// single-packet WRITE `d` (kept alive in `rs`), and the state of d's path
// before the tester answers it.
struct FirstPacket {
  explicit FirstPacket(Target& t, uint32_t conn_id = 0x7e57) : p(t, conn_id) {}
  // Empty once all of it is there, else why not.
  std::string open(Target& t) {
    std::string why;
    if (!target_connects(t, p, conn, why) || !one_packet(t, p, conn, 0, rs, d, why)) return why;
    slot = wire::path_tag_slot(d->pkt.bh.path_tag);
    if (!t.path_stats(conn, slot, before)) return "no state for the path";
    return {};
  }
  Peer p;
  ConnId conn;
  std::vector<Reply> rs;
  const Reply* d = nullptr;
  size_t slot = 0;
  PathStats before;
};

}  // namespace

Outcome check_loss4(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  // The first packet of a slot is acknowledged 100 us after it left, the
  // next one on the same slot 200 us after: srtt 100, then 7/8 * 100 + 1/8 *
  // 200 = 112.5 us. Packets on other slots are answered after 100 us.
  int slot = -1;
  for (uint64_t k = 0; k < 16; ++k) {
    std::vector<Reply> rs;
    const Reply* d = nullptr;
    if (!one_packet(t, p, conn, k, rs, d, why)) return fail(why);
    const int s = wire::path_tag_slot(d->pkt.bh.path_tag);
    const bool second = slot == s;
    (void)p.run(second ? 199'000 : 99'000);  // the packet left 1 us ago
    p.send(p.ack(d->pkt.bh.psn + 1, *d), d->entropy);
    (void)p.run(1000);
    PathStats ps;
    if (!t.path_stats(conn, static_cast<size_t>(s), ps)) return fail("no state for the path");
    if (slot < 0) {
      if (ps.srtt_ns != 100'000)
        return fail("srtt " + std::to_string(ps.srtt_ns) + " ns after a first sample of 100 us");
      slot = s;
    } else if (second) {
      if (ps.srtt_ns != 112'500)
        return fail("srtt " + std::to_string(ps.srtt_ns) + " ns after samples of 100 and 200 us");
      return pass();
    }
  }
  return fail("no second packet on the first packet's path in 16 messages");
}

namespace {

// In real time, why the path's cwnd between `before` and `after` says
// nothing of the ACK a check sent: the packet it held unacknowledged timed
// out, was resent or declared lost meanwhile (the target's clock ran on
// while a loaded host kept the tester from its CPU past the path's RTO: a
// remote PATH-3 once saw cwnd fall to one packet); empty when not.
std::string disturbed(const Target& t, const PathStats& before, const PathStats& after) {
  if (t.simulated_time()) return {};
  if (after.timeouts != before.timeouts || after.losses != before.losses ||
      after.retransmissions != before.retransmissions || after.retirements != before.retirements)
    return "the path timed out, resent or lost its packet (timeouts " +
           std::to_string(before.timeouts) + " to " + std::to_string(after.timeouts) +
           ", retransmissions " + std::to_string(before.retransmissions) + " to " +
           std::to_string(after.retransmissions) + ")";
  return {};
}
// Attempts a check whose verdict disturbed() can void makes, on fresh
// connections, before it fails for want of one it can judge.
constexpr uint32_t kAttempts = 5;

// The verdict of the first of kAttempts tries of `attempt` (each on a fresh
// connection, the tester's side `conn_id`) that is not void (`spoiled` says
// why one is); when all are, a failure saying what spoiled the last before
// `judged` could be judged.
Outcome judged_in_attempts(Target& t, Outcome (*attempt)(Target&, uint32_t, std::string& spoiled),
                           const std::string& judged) {
  std::string spoiled;
  for (uint32_t k = 0; k < kAttempts; ++k) {
    Outcome o = attempt(t, 0x7e57 + k, spoiled);
    if (spoiled.empty()) return o;
  }
  return fail("in " + std::to_string(kAttempts) + " attempts, " + spoiled + " before " + judged +
              " could be judged");
}

// One try of PATH-3 on a fresh connection (`conn_id` the tester's side);
// `spoiled` says why its verdict is void, if it is.
Outcome path3_attempt(Target& t, uint32_t conn_id, std::string& spoiled) {
  spoiled.clear();
  FirstPacket f(t, conn_id);
  if (const std::string why = f.open(t); !why.empty()) return fail(why);
  auto& [p, conn, rs, d, slot, before] = f;
  PathStats after;
  // The ACK names another generation of the slot (as one answering a packet
  // sent before the slot's entropy was replaced would), 300 us late and
  // CE-marked: it acknowledges the PSN and nothing else.
  Reply old = *d;
  const uint16_t tag = d->pkt.bh.path_tag;
  old.pkt.bh.path_tag = wire::make_path_tag(
      wire::path_tag_slot(tag), wire::generation_step(wire::path_tag_generation(tag), -1));
  (void)p.run(299'000);
  p.send(p.ack(d->pkt.bh.psn + 1, old, wire::kAckEchoCe), d->entropy);
  // In real time the target may take the ACK later than one wait.
  Completion c;
  bool completed = false;
  if (t.simulated_time()) {
    (void)p.run(1000);
    completed = t.poll_completion(c);
  } else {
    completed = p.await_completion(c);
  }
  if (!completed || c.status != Status::kOk) return fail("the acknowledged WRITE did not complete");
  if (!t.path_stats(conn, slot, after)) return fail("no state for the path");
  spoiled = disturbed(t, before, after);
  if (!spoiled.empty()) return fail(spoiled);
  if (after.srtt_ns != before.srtt_ns)
    return fail("srtt moved from " + std::to_string(before.srtt_ns) + " to " +
                std::to_string(after.srtt_ns) + " ns on an old generation's echo");
  // alpha is not compared: it moves once per window of acknowledged data,
  // not on this one packet, and from its start at 1 a CE echo would leave
  // it there. The cwnd cut (CC-4) is what a CE echo taken as current shows.
  if (after.cwnd_bytes != before.cwnd_bytes)
    return fail("cwnd moved from " + std::to_string(before.cwnd_bytes) + " to " +
                std::to_string(after.cwnd_bytes) + " bytes on an old generation's CE echo");
  return pass();
}

}  // namespace

Outcome check_path3(Target& t) {
  return judged_in_attempts(t, path3_attempt, "the old generation's echo");
}

namespace {

// One try of CC-3 on a fresh connection, as path3_attempt. Void when no path
// kept one generation for 120 packets to the end: a target in real time on a
// loaded machine may renew its paths (PATH-6, PATH-8) faster than that, which
// says nothing of its alpha (conformance.remote failed so, once, at load 20).
Outcome cc3_attempt(Target& t, uint32_t conn_id, std::string& spoiled) {
  spoiled.clear();
  FirstPacket f(t, conn_id);
  std::string why = f.open(t);
  if (!why.empty()) return fail(why);
  auto& [p, conn, rs, d, first, ps] = f;
  if (ps.alpha_permille != 1000)
    return fail("alpha starts at " + std::to_string(ps.alpha_permille) + " permille, not 1000");
  p.send(p.ack(d->pkt.bh.psn + 1, *d), d->entropy);
  // Messages of two packets, each acknowledged by one ACK; it echoes the
  // packet whose path has had the fewest echoes for its packets, so that each
  // path is echoed by about one ACK for every two of its packets; every
  // second ACK echoing a path carries ECHO_CE. Per path, alpha converges to
  // the marked fraction of its packets (CE echoes over packets newly
  // acknowledged), a quarter, not to that of its ACKs, a half.
  // A path renewed (retired, PATH-6, or moved to explore, PATH-8) restarts
  // alpha at 1, so its counts restart with each generation its packets or
  // PROBEs show. A target in real time, kept from its tester a while, may
  // renew paths often: the messages go on (up to 2,000) until some path has
  // carried 120 packets in its present generation.
  struct Slot {
    int generation = -1;
    uint32_t packets = 0, acks = 0, marks = 0;
  };
  std::array<Slot, 32> slots{};
  const auto current = [&slots](const Reply& r) {
    const Slot& sl = slots[wire::path_tag_slot(r.pkt.bh.path_tag)];
    return sl.generation == wire::path_tag_generation(r.pkt.bh.path_tag);
  };
  const auto observe = [&slots](const std::vector<Reply>& replies) {
    for (const Reply& r : replies) {
      if (r.error != wire::ParseError::kOk ||
          (r.pkt.bh.opcode != wire::Opcode::kProbe && !wire::is_data(r.pkt.bh.opcode)))
        continue;
      Slot& sl = slots[wire::path_tag_slot(r.pkt.bh.path_tag)];
      const uint16_t g = wire::path_tag_generation(r.pkt.bh.path_tag);
      // A later generation (11 bits, wrapping); a straggler of an older one changes nothing.
      if (sl.generation >= 0 && g != sl.generation &&
          !wire::generation_after(g, static_cast<uint16_t>(sl.generation)))
        continue;
      if (g != sl.generation) sl = Slot{g, 0, 0, 0};
    }
  };
  const auto enough = [&slots] {
    return std::any_of(slots.begin(), slots.end(),
                       [](const Slot& sl) { return sl.packets >= 120; });
  };
  const uint32_t len = p.mtu + p.mtu / 2;
  uint32_t psn = d->pkt.bh.psn + 1;
  for (uint64_t k = 1; k <= 480 || (!enough() && k <= 2000); ++k, psn += 2) {
    std::vector<const Reply*> ds;
    if (!message_packets(t, p, conn, k, len, psn, 2, rs, ds, why)) return fail(why);
    observe(rs);
    for (const Reply* x : ds)
      if (current(*x)) ++slots[wire::path_tag_slot(x->pkt.bh.path_tag)].packets;
    const auto unechoed = [&](const Reply* x) {
      const Slot& sl = slots[wire::path_tag_slot(x->pkt.bh.path_tag)];
      return static_cast<int>(sl.packets) - 2 * static_cast<int>(sl.acks);
    };
    const Reply& echo = unechoed(ds[1]) >= unechoed(ds[0]) ? *ds[1] : *ds[0];
    Slot& sl = slots[wire::path_tag_slot(echo.pkt.bh.path_tag)];
    uint8_t ce = 0;
    if (current(echo)) {  // an older generation's echo moves no alpha (PATH-3)
      ce = ++sl.acks % 2 == 0 ? wire::kAckEchoCe : 0;
      sl.marks += ce != 0;
    }
    p.send(p.ack(psn + 2, echo, ce), echo.entropy);
    observe(p.run(10'000));
  }
  // Judged on the paths that carried enough packets for many windows in
  // their present generation and are still active in it, against the packet
  // fraction; the check tells the two apart only where they differ.
  std::string seen;
  bool told_apart = false, wrong = false;
  for (size_t s = 0; s < slots.size(); ++s) {
    const Slot& sl = slots[s];
    if (sl.packets < 120 || !t.path_stats(conn, s, ps) || ps.state != PathState::kActive) continue;
    const double by_packet = 1000.0 * sl.marks / sl.packets;
    const double by_ack = sl.acks == 0 ? 0.0 : 1000.0 * sl.marks / sl.acks;
    seen += " " + std::to_string(ps.alpha_permille) + " (packets " +
            std::to_string(static_cast<int>(by_packet)) + ", ACKs " +
            std::to_string(static_cast<int>(by_ack)) + ")";
    const double off = std::abs(ps.alpha_permille - by_packet);
    wrong |= off > 100 || off > std::abs(ps.alpha_permille - by_ack);
    told_apart |= by_ack - by_packet >= 150;
  }
  if (seen.empty()) {
    spoiled = "no path carried 120 packets in one generation and kept it to the end";
    return fail(spoiled);
  }
  if (wrong)
    return fail("alpha (permille) against the marked fraction of packets and of ACKs:" + seen);
  if (!told_apart)
    return fail("no path's packet and ACK fractions differed enough to tell them apart:" + seen);
  return pass("alpha (permille) against the marked fraction of packets and of ACKs:" + seen);
}

}  // namespace

Outcome check_cc3(Target& t) { return judged_in_attempts(t, cc3_attempt, "alpha"); }

// TRIM-4: an ACK echoing the target's first data packet with ECHO_TRIMMED,
// acknowledging nothing, cuts that path's cwnd as a CE echo does (CC-4):
// by alpha / 2 with alpha at its start, 1, so to half; a second one within
// the path's srtt cuts it no further.
namespace {

// One try of TRIM-4 on a fresh connection, as path3_attempt.
Outcome trim4_attempt(Target& t, uint32_t conn_id, std::string& spoiled) {
  spoiled.clear();
  FirstPacket f(t, conn_id);
  if (const std::string why = f.open(t); !why.empty()) return fail(why);
  auto& [p, conn, rs, d, slot, before] = f;
  PathStats after, again;
  p.send(p.ack(d->pkt.bh.psn, *d, wire::kAckEchoTrimmed), d->entropy);
  (void)p.run(1000);
  if (!t.path_stats(conn, slot, after)) return fail("no state for the path");
  spoiled = disturbed(t, before, after);
  if (!spoiled.empty()) {
    p.send(p.ack(d->pkt.bh.psn + 1, *d), d->entropy);  // the connection goes quiet
    return fail(spoiled);
  }
  const uint32_t half = before.cwnd_bytes - before.cwnd_bytes / 2;
  if (after.cwnd_bytes > half + 1 || after.cwnd_bytes + 1 < half)
    return fail("cwnd went from " + std::to_string(before.cwnd_bytes) + " to " +
                std::to_string(after.cwnd_bytes) + " bytes on an ECHO_TRIMMED echo, not to " +
                std::to_string(half) + " (alpha 1)");
  p.send(p.ack(d->pkt.bh.psn, *d, wire::kAckEchoTrimmed), d->entropy);
  (void)p.run(1000);
  if (!t.path_stats(conn, slot, again)) return fail("no state for the path");
  if (again.cwnd_bytes < after.cwnd_bytes && t.simulated_time())
    return fail("a second ECHO_TRIMMED echo 1 us after the first cut cwnd again, from " +
                std::to_string(after.cwnd_bytes) + " to " + std::to_string(again.cwnd_bytes) +
                " bytes, within the path's srtt");
  return pass();
}

}  // namespace

Outcome check_trim4(Target& t) {
  return judged_in_attempts(t, trim4_attempt, "the ECHO_TRIMMED echoes");
}

// CC-1: the initial window belongs to the connection, 16 packets of the
// mtu the handshake agreed, split over its paths. The target WRITEs 1 MiB
// on a connection whose tester sends no ACK: its new PSNs stop at 16 full
// packets (a path may overshoot by less than one, SCHED-1: 16 + paths - 1
// at most, with paths as the target tells them, else 4), and not before:
// each path sends while inflight < cwnd (SCHED-1), or, below one packet,
// one packet at once (CC-6), so its 16 packets' worth all leave without an
// ACK (a window of 4, TCP's, once passed). Twice: the tester
// offering the default mtu (4096), then 1024 on a second connection, whose
// first flight is so 16 packets of 1024 bytes, not 16 of 4096 bytes cut
// into 64 of 1024 (a window taken from the target's own mtu).
Outcome check_cc1(Target& t) {
  const size_t paths = t.paths().value_or(4);
  const uint32_t most = 16 + static_cast<uint32_t>(paths) - 1;
  for (const uint32_t mtu : {4096u, 1024u}) {
    Peer p(t, 0x7e57 + mtu);
    p.mtu = mtu;
    ConnId conn;
    std::string why;
    if (!target_connects(t, p, conn, why) || !target_writes(t, conn, 1u << 20, mtu, why))
      return fail(why);
    std::set<uint32_t> psns;
    // In real time the first packet may come late (the target's process
    // waiting for a CPU): waited for, then 30 ms more for the rest of the
    // flight, which takes no ACK to leave.
    const auto started = [&p](const std::vector<Reply>& got) {
      for (const Reply* d : of(got, wire::Opcode::kWrite))
        if (d->pkt.bh.dst_conn == p.conn()) return true;
      return false;
    };
    std::vector<Reply> rs = p.run_until(started, t.simulated_time() ? 200'000 : 30'000'000);
    if (!t.simulated_time())
      for (Reply& r : p.run(30'000'000)) rs.push_back(std::move(r));
    for (const Reply* d : of(rs, wire::Opcode::kWrite)) {
      if (d->pkt.bh.dst_conn != p.conn()) continue;  // the first connection's, resent
      if (d->pkt.payload.size() != p.mtu)
        return fail("mtu " + std::to_string(p.mtu) + ": a packet of " +
                    std::to_string(d->pkt.payload.size()) +
                    " bytes in the middle of a 1 MiB WRITE");
      psns.insert(d->pkt.bh.psn - p.target_initial_psn);
    }
    if (psns.empty()) return fail("mtu " + std::to_string(p.mtu) + ": the WRITE did not start");
    if (psns.size() < 16)
      return fail("with no ACK, only " + std::to_string(psns.size()) +
                  " packets of the agreed mtu " + std::to_string(p.mtu) +
                  " left; the initial window is 16 of them, per connection, each path sending "
                  "while inflight < cwnd (SCHED-1)");
    if (psns.size() > most)
      return fail("with no ACK, " + std::to_string(psns.size()) + " packets of the agreed mtu " +
                  std::to_string(p.mtu) + " left; the initial window is 16 of them (" +
                  std::to_string(most) + " with " + std::to_string(paths) +
                  " paths' overshoot), per connection");
  }
  return pass();
}

// CC-2 (simulated time only): a path starts in slow start, its cwnd
// growing by the costs newly acknowledged. The target WRITEs 4 MiB; the
// tester lets each flight arrive (20 us) and acknowledges all of it at once,
// echoing its last packet, unmarked: each ACK of n full packets draws 2n
// new ones (within one per path: a path may overshoot by less than one),
// for three rounds after the first flight. A fixed window (congestion
// control off, CC-8, "oblivious spraying") draws n.
Outcome check_cc2(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why) || !target_writes(t, conn, 4u << 20, 1, why))
    return fail(why);
  const auto paths = static_cast<uint32_t>(t.paths().value_or(4));
  uint32_t cum = p.target_initial_psn, prev = 0;
  std::string flights;
  for (int round = 0; round < 4; ++round) {
    const std::vector<Reply> rs = p.run(20'000);
    uint32_t n = 0;
    const Reply* last = nullptr;
    for (const Reply* d : firsts(of(rs, wire::Opcode::kWrite))) {
      if (psn_after(cum, d->pkt.bh.psn)) continue;  // a resend of an acknowledged packet
      ++n;
      if (last == nullptr || psn_after(d->pkt.bh.psn, last->pkt.bh.psn)) last = d;
    }
    flights += (flights.empty() ? "" : ", ") + std::to_string(n);
    if (round > 0 && (n + paths < 2 * prev || n > 2 * prev + paths))
      return fail("flights of " + flights + " packets, each acknowledged at once, unmarked: " +
                  "the ACK of " + std::to_string(prev) + " drew " + std::to_string(n) +
                  " new ones, not twice as many (slow start)");
    if (last == nullptr) return fail("flights of " + flights + " packets: the WRITE stalled");
    cum = last->pkt.bh.psn + 1;
    p.send(p.ack(cum, *last), last->entropy);
    prev = n;
  }
  return pass("flights of " + flights + " packets");
}

// LOSS-5, PATH-4 and SCHED-3 (simulated time only): one of the target's
// paths dies during a 256-packet WRITE. The tester receives nothing sent
// with the first packet's path_tag (that path's slot and generation) and
// acknowledges everything else at once, PROBEs of other paths included.
// Every packet first sent on the dead path is sent again from another
// path, and the WRITE completes kOk; once the dead path has sent a PROBE,
// no data packet leaves with its path_tag (LOSS-8 holds it, then its RTO
// makes it PROBING: PROBEs only, SCHED-3); and the path is retired (its
// slot comes back under another generation, PATH-4: 3 timeouts), the last
// of its timeouts' intervals at least 1.8 times the one before it (the RTO
// doubles with each, LOSS-5).
Outcome check_loss5(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  constexpr uint32_t kPackets = 256;
  if (!target_writes(t, conn, kPackets * p.mtu, 1, why)) return fail(why);
  const uint32_t first = p.target_initial_psn;
  std::optional<uint16_t> dead;     // the dead path's path_tag
  std::set<uint32_t> got;           // PSNs received, as distances from `first`
  std::set<uint32_t> lost;          // sent on the dead path
  std::vector<uint64_t> probes;     // when the dead path's PROBEs came (ns)
  std::optional<uint64_t> retired;  // when its slot came back under another path_tag
  std::optional<Completion> done;
  constexpr uint64_t kStep = 10'000;
  for (uint64_t now = 0; now < 400'000'000 && !(done && retired); now += kStep) {
    const std::vector<Reply> rs = p.run(kStep);
    const Reply* echo = nullptr;
    for (const Reply& r : rs) {
      if (r.error != wire::ParseError::kOk) continue;
      const wire::Packet& k = r.pkt;
      const bool data = wire::is_data(k.bh.opcode);
      if (!data && k.bh.opcode != wire::Opcode::kProbe) continue;
      if (!dead) dead = k.bh.path_tag;
      const uint32_t at = k.bh.psn - first;
      if (k.bh.path_tag == *dead && !data) {
        probes.push_back(now);
      } else if (k.bh.path_tag == *dead && !probes.empty()) {
        return fail("data (PSN first + " + std::to_string(at) +
                    ") left on the dead path (path_tag " + hex32(*dead) + ", port " +
                    std::to_string(r.entropy) + ") " +
                    std::to_string((now - probes.front()) / 1000) +
                    " us after its first PROBE: a held or PROBING path carries PROBEs only");
      } else if (k.bh.path_tag == *dead) {
        lost.insert(at);
      } else {
        if (data) got.insert(at);
        if (!retired && wire::path_tag_slot(k.bh.path_tag) == wire::path_tag_slot(*dead))
          retired = now;
        echo = &r;
      }
    }
    if (echo != nullptr) {
      uint32_t cum = 0;
      while (got.contains(cum)) ++cum;
      std::vector<uint32_t> sacked;
      for (const uint32_t at : got)
        if (at > cum && at - cum <= 64 * wire::kMaxSackWords) sacked.push_back(first + at);
      const uint8_t flags = echo->pkt.bh.opcode == wire::Opcode::kProbe ? wire::kAckEchoProbe : 0;
      p.send(p.sack(first + cum, sacked, *echo, flags), echo->entropy);
    }
    if (Completion c; !done && t.poll_completion(c)) done = c;
  }
  if (lost.empty()) return fail("no packet of the WRITE was sent on its first packet's path");
  std::string missing;
  for (const uint32_t at : lost)
    if (!got.contains(at)) missing += (missing.empty() ? "" : ", ") + std::to_string(at);
  if (!missing.empty())
    return fail("packets first sent on the dead path never came from another path (PSN first + " +
                missing + ")");
  if (!done || done->wr_id != 1 || done->status != Status::kOk)
    return fail("the WRITE did not complete kOk with every packet received");
  std::vector<uint64_t> times = probes;
  if (retired) times.push_back(*retired);
  std::string gaps;
  for (size_t i = 1; i < times.size(); ++i)
    gaps += (i == 1 ? "" : ", ") + std::to_string((times[i] - times[i - 1]) / 1000) + " us";
  const std::string seen = std::to_string(probes.size()) + " PROBEs on the dead path" +
                           (gaps.empty() ? "" : ", then " + gaps + " apart");
  if (!retired)
    return fail(seen +
                "; it was never retired (its slot under another generation): 3 timeouts "
                "retire a path");
  const size_t n = times.size();
  if (n < 3) return fail(seen + " and its retirement: not one PROBE per timeout");
  if ((times[n - 1] - times[n - 2]) * 10 < (times[n - 2] - times[n - 3]) * 18)
    return fail(seen + " to its retirement: the RTO did not double with the timeout");
  return pass();
}

}  // namespace metaroce::conformance

namespace metaroce::conformance {

// CC-6, the pacing timer: the target answers a 2 MiB READ of the tester's,
// which acknowledges every response at once with ECHO_CE until every path's
// cwnd is below one packet (path_stats), so that its paths pace. Then, every
// response acknowledged and nothing sent at once on those ACKs (nothing in
// flight), the tester keeps silent: no ACK and no RTO is coming, and the
// target, still owing responses, must send again when the pacing wait ends,
// three times over, well inside 10 ms (the wait is srtt * packet / cwnd, at
// most 4 srtt of about 20 us). Simulated time only: in real time the
// tester's steps of milliseconds dwarf such waits, its late ACKs time the
// packets out (LOSS-5) and the paths no longer pace (a --target udp run once
// saw a cwnd back above a packet).
Outcome check_cc6(Target& t) {
  constexpr uint32_t kLen = 2u << 20;
  Peer p(t);
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteRead, kLen)) return fail(why);
  const ConnId conn = t.accepted();
  if (!conn.valid()) return fail("the target reports no accepted connection");
  const size_t paths = t.paths().value_or(4);
  const uint64_t packet = p.mtu + 64;  // a packet of the agreed mtu, as cwnd counts it
  constexpr uint64_t kStep = 20'000;
  const uint32_t read_psn = p.next_psn++;
  p.send(p.read_req(read_psn, 0, r.rkey, r.addr, kLen));
  std::set<uint32_t> got;   // offsets of the responses seen
  std::set<uint32_t> psns;  // and their PSNs
  uint32_t cum = p.target_initial_psn;
  size_t responses = 0;
  // Acknowledges every new response among `rs`, each by an ACK of its own
  // echoing it with ECHO_CE; how many were new.
  const auto acknowledge = [&](const std::vector<Reply>& rs) {
    size_t fresh = 0;
    for (const Reply* d : of(rs, wire::Opcode::kReadResp)) {
      if (!got.insert(d->pkt.mh.offset).second) continue;
      ++fresh;
      psns.insert(d->pkt.bh.psn);
      while (psns.contains(cum)) ++cum;
      p.send(p.ack(cum, *d, wire::kAckEchoCe), d->entropy);
    }
    answer_probes(p, rs, cum);
    responses += fresh;
    return fresh;
  };
  const auto pacing = [&] {
    for (size_t s = 0; s < paths; ++s) {
      PathStats ps;
      if (!t.path_stats(conn, s, ps) || ps.cwnd_bytes >= packet) return false;
    }
    return true;
  };
  bool paced = false;
  for (int round = 0; round < 400 && !paced; ++round) {
    (void)acknowledge(p.run(kStep));
    paced = pacing();
  }
  if (!paced)
    return fail(
        "every response acknowledged with ECHO_CE for 400 rounds, and some path's cwnd "
        "is still a packet or more (" +
        std::to_string(responses) + " responses): its paths never paced");
  // Until an ACK draws nothing at once: then nothing is in flight.
  const auto drain = [&] {
    for (int k = 0; k < 64 && acknowledge(p.run(0)) != 0; ++k) {
    }
  };
  // Each wait is watched in short steps, and its response acknowledged at
  // once: a wait of 10 ms in one step would have the target's packets
  // time out meanwhile (LOSS-5), and what follows be no longer paced.
  constexpr uint64_t kTick = 5'000;
  constexpr uint64_t kQuiet = 10'000'000;
  std::string waits;
  for (int wait = 0; wait < 3; ++wait) {
    drain();
    if (got.size() * p.mtu >= kLen) return fail("the READ was answered before the test could end");
    if (!pacing()) return fail("a path's cwnd rose to a packet or more under ECHO_CE");
    uint64_t waited = 0;
    size_t fresh = 0;
    while (fresh == 0 && waited < kQuiet) {
      fresh = acknowledge(p.run(kTick));
      waited += kTick;
    }
    if (fresh == 0)
      return fail(
          "its paths pacing, every response acknowledged and nothing in flight, the "
          "target sent no READ response for " +
          std::to_string(kQuiet / 1'000'000) +
          " ms though it owes more: the end of the pacing wait sent nothing (" +
          std::to_string(responses) + " of " + std::to_string(kLen / p.mtu) + " responses sent" +
          (wait > 0 ? ", " + std::to_string(wait) + " waits ended before" : "") + ")");
    waits += (waits.empty() ? "" : ", ") + std::to_string(waited / 1000) + " us";
  }
  return pass(std::to_string(responses) +
              " responses; the pacing waits ended in a response within " + waits);
}

}  // namespace metaroce::conformance
