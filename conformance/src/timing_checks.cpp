// Rules about a path's estimates, read through the agent's path state:
// LOSS-4's RTT estimator and CC-3's DCTCP marking fraction.
#include <array>
#include <cmath>
#include <iterator>

#include "checks.hpp"

namespace metaroce::conformance {
namespace {

// The target WRITEs one single-packet message to the tester and returns that
// packet (first copy) in `d`, kept alive in `rs`.
bool one_packet(Target& t, Peer& p, ConnId conn, uint64_t wr_id, std::vector<Reply>& rs,
                const Reply*& d, std::string& why) {
  if (!target_writes(t, conn, 1000, wr_id, why)) return false;
  rs = p.run(1000);
  // A target in real time may be paced (CC-6: a window cut below a packet
  // by CE echoes sends one per srtt) or kept off its CPU a while. On a busy
  // host srtt takes in the scheduler's delays, and a path at its floor of a
  // quarter packet waits four of them: up to 2 s, ended by the WRITE.
  for (int i = 0; i < 1000 && !t.simulated_time() && of(rs, wire::Opcode::kWrite).empty(); ++i) {
    std::vector<Reply> more = p.run(2'000'000);
    rs.insert(rs.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  const auto data = of(rs, wire::Opcode::kWrite);
  if (data.empty()) {
    why = "the WRITE was not sent";
    return false;
  }
  d = data.front();
  return true;
}

// The target connects to the tester and sends its first single-packet WRITE.
bool connected_first_packet(Target& t, Peer& p, ConnId& conn, std::vector<Reply>& rs,
                            const Reply*& d, std::string& why) {
  return target_connects(t, p, conn, why) && one_packet(t, p, conn, 0, rs, d, why);
}

}  // namespace

Outcome check_loss4(Target& t) {
  if (!t.simulated_time()) return skip("needs a target with simulated time");
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
    const int s = d->pkt.bh.path_tag & 31;
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

Outcome check_path3(Target& t) {
  Peer p(t);
  ConnId conn;
  std::vector<Reply> rs;
  const Reply* d = nullptr;
  std::string why;
  if (!connected_first_packet(t, p, conn, rs, d, why)) return fail(why);
  const size_t slot = d->pkt.bh.path_tag & 31;
  PathStats before, after;
  if (!t.path_stats(conn, slot, before)) return fail("no state for the path");
  // The ACK names another generation of the slot (as one answering a packet
  // sent before the slot's entropy was replaced would), 300 us late and
  // CE-marked: it acknowledges the PSN and nothing else.
  Reply old = *d;
  const uint16_t generation = d->pkt.bh.path_tag >> 5;
  old.pkt.bh.path_tag = static_cast<uint16_t>(slot | (((generation + 2047) & 2047) << 5));
  (void)p.run(299'000);
  p.send(p.ack(d->pkt.bh.psn + 1, old, wire::kAckEchoCe), d->entropy);
  (void)p.run(1000);
  Completion c;
  if (!t.poll_completion(c) || c.status != Status::kOk)
    return fail("the acknowledged WRITE did not complete");
  if (!t.path_stats(conn, slot, after)) return fail("no state for the path");
  if (after.srtt_ns != before.srtt_ns)
    return fail("srtt moved from " + std::to_string(before.srtt_ns) + " to " +
                std::to_string(after.srtt_ns) + " ns on an old generation's echo");
  if (after.cwnd_bytes != before.cwnd_bytes || after.alpha_permille != before.alpha_permille)
    return fail("cwnd or alpha moved on an old generation's CE echo");
  return pass();
}

Outcome check_cc3(Target& t) {
  Peer p(t);
  ConnId conn;
  std::vector<Reply> rs;
  const Reply* d = nullptr;
  std::string why;
  if (!connected_first_packet(t, p, conn, rs, d, why)) return fail(why);
  PathStats ps;
  const size_t first = d->pkt.bh.path_tag & 31;
  if (!t.path_stats(conn, first, ps)) return fail("no state for the path");
  if (ps.alpha_permille != 1000)
    return fail("alpha starts at " + std::to_string(ps.alpha_permille) + " permille, not 1000");
  // Every 4th packet of each path comes back ECHO_CE: each alpha converges
  // to a quarter (one update per window of data; from 1 with g = 1/16).
  std::array<uint32_t, 32> acked{};
  std::array<bool, 32> used{};
  for (uint64_t k = 1; k <= 480; ++k) {
    const size_t s = d->pkt.bh.path_tag & 31;
    used[s] = true;
    const uint8_t ce = ++acked[s] % 4 == 0 ? wire::kAckEchoCe : 0;
    p.send(p.ack(d->pkt.bh.psn + 1, *d, ce), d->entropy);
    (void)p.run(10'000);
    if (!one_packet(t, p, conn, k, rs, d, why)) return fail(why);
  }
  // Judged on the paths that carried enough packets for many windows (a
  // target in real time may favour some paths).
  std::string seen;
  for (size_t s = 0; s < used.size(); ++s) {
    if (!used[s] || acked[s] < 60 || !t.path_stats(conn, s, ps)) continue;
    seen += " " + std::to_string(ps.alpha_permille);
    if (ps.alpha_permille < 180 || ps.alpha_permille > 360)
      return fail("with a quarter of each path's packets marked, alpha (permille):" + seen);
  }
  if (seen.empty()) return fail("no path carried 60 packets");
  return pass("alpha (permille):" + seen);
}

}  // namespace metaroce::conformance
