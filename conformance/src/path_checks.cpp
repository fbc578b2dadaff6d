// Paths: SCHED-2, LOSS-2, LOSS-3, PATH-1, PATH-2.
#include <map>
#include <set>

#include "checks.hpp"

namespace metaroce::conformance {

Outcome check_sched2(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  // Two 64 KiB WRITEs: the first window goes out, the rest waits.
  if (!target_writes(t, conn, 65536, 1, why) || !target_writes(t, conn, 65536, 2, why))
    return fail(why);
  const std::vector<Reply> first = p.run(1000);
  const auto sent = firsts(of(first, wire::Opcode::kWrite));
  // A path with four packets in flight: its first is lost once the other
  // three are acknowledged (LOSS-2), everything else is acknowledged too.
  std::map<uint16_t, std::vector<const Reply*>> by_slot;
  uint32_t highest = sent.empty() ? 0 : sent.front()->pkt.bh.psn;
  for (const Reply* d : sent) {
    by_slot[wire::path_tag_slot(d->pkt.bh.path_tag)].push_back(d);
    highest = later_psn(highest, d->pkt.bh.psn);
  }
  const Reply* lost = nullptr;
  for (const auto& [slot, ds] : by_slot)
    if (ds.size() >= 4 && lost == nullptr) lost = ds.front();
  if (lost == nullptr) return fail("no path carried 4 packets of the first window");
  const std::vector<const Reply*>& its_path = by_slot[wire::path_tag_slot(lost->pkt.bh.path_tag)];
  // LOSS-2's threshold: first only the next 2 packets of its path are
  // SACKed, nothing cumulatively (the room this frees stays small: the
  // second WRITE keeps data waiting for the choice below). Not lost yet:
  // nothing resends it at once (the time form's timer, srtt / 4 from this
  // ACK, is longer than the 100 ns judged here).
  uint32_t lowest = lost->pkt.bh.psn;
  for (const Reply* d : sent)
    if (psn_after(lowest, d->pkt.bh.psn)) lowest = d->pkt.bh.psn;
  p.send(p.sack(lowest, {its_path[1]->pkt.bh.psn, its_path[2]->pkt.bh.psn}, *its_path[2]),
         its_path[2]->entropy);
  const std::vector<Reply> early = p.run(100);
  for (const Reply* d : of(early, wire::Opcode::kWrite))
    if (d->pkt.bh.psn == lost->pkt.bh.psn)
      return fail("PSN " + hex32(lost->pkt.bh.psn) +
                  " resent at once when only 2 later packets of its path were acknowledged "
                  "(LOSS-2: 3)");
  // Everything below the lost packet is acknowledged cumulatively, the rest
  // selectively.
  std::vector<uint32_t> sacked;
  for (const Reply* d : sent)
    if (psn_after(d->pkt.bh.psn, lost->pkt.bh.psn)) sacked.push_back(d->pkt.bh.psn);
  const Reply* echo = its_path.back();
  p.send(p.sack(lost->pkt.bh.psn, sacked, *echo), echo->entropy);
  const std::vector<Reply> after = p.run(1000);
  const auto next = of(after, wire::Opcode::kWrite);
  if (next.empty()) return fail("nothing sent after the ACK");
  if (next.front()->pkt.bh.psn != lost->pkt.bh.psn)
    return fail("PSN " + hex32(next.front()->pkt.bh.psn) + " went before the retransmission of " +
                hex32(lost->pkt.bh.psn));
  // LOSS-3: every other path has room (all it sent is acknowledged), so the
  // resend leaves on another (TRIM-3's check asks the same of a trimmed
  // packet's).
  const Reply& resend = *next.front();
  if (wire::path_tag_slot(resend.pkt.bh.path_tag) == wire::path_tag_slot(lost->pkt.bh.path_tag) ||
      resend.entropy == lost->entropy)
    return fail("PSN " + hex32(lost->pkt.bh.psn) + " resent on the path it was lost on (slot " +
                std::to_string(wire::path_tag_slot(resend.pkt.bh.path_tag)) + ", port " +
                std::to_string(resend.entropy) + "), every other path having room (LOSS-3)");
  bool fresh = false;
  for (const Reply* d : next) fresh |= psn_after(d->pkt.bh.psn, highest);
  if (!fresh) return fail("no new data followed: the check saw no choice being made");
  return pass();
}

namespace {

// " slot:port" for each slot of `first`.
std::string slot_ports(const std::map<uint16_t, const Reply*>& first) {
  std::string list;
  for (const auto& [slot, d] : first)
    list += " " + std::to_string(slot) + ":" + std::to_string(d->entropy);
  return list;
}

// PATH-1 read through PATH-2: slot i (path_tag bits 4-0) of a fresh
// connection starts on port min + (start - min + i) mod (max - min + 1),
// start the first observed slot's, counted by slot number (a slot not seen
// leaves its value out, it does not shift the others); all distinct. Empty
// when `first` (first_per_slot of at least 2 slots) holds, else why not.
std::string ports_off_their_slots(const Target& t, const std::map<uint16_t, const Reply*>& first) {
  const std::string list = slot_ports(first);
  const auto range = t.entropy_range();
  const uint16_t slot0 = first.begin()->first;
  const uint32_t start = first.begin()->second->entropy;
  if (range && (start < range->first || start > range->second))
    return "port " + std::to_string(start) + " is outside the entropy range " +
           std::to_string(range->first) + "-" + std::to_string(range->second) + " (slot:port" +
           list + ")";
  std::set<uint16_t> seen;
  uint32_t seg_port = start;  // without the range: the run of ports since the one wrap
  uint16_t seg_slot = slot0;
  int wraps = 0;
  for (const auto& [slot, d] : first) {
    if (!seen.insert(d->entropy).second)
      return "slot " + std::to_string(slot) + " reuses port " + std::to_string(d->entropy) +
             " (slot:port" + list + ")";
    uint32_t want = 0;
    if (range) {
      const uint32_t lo = range->first, n = uint32_t{range->second} - lo + 1;
      want = lo + (start - lo + (slot - slot0)) % n;
    } else {
      want = seg_port + (slot - seg_slot);
      // The range unknown, one wrap to a port below the first is allowed.
      if (d->entropy != want && wraps == 0 && d->entropy < start) {
        ++wraps;
        seg_port = want = d->entropy;
        seg_slot = slot;
      }
    }
    if (d->entropy != want)
      return "slot " + std::to_string(slot) + " is on port " + std::to_string(d->entropy) +
             ", not " + std::to_string(want) + " (slot:port" + list + ")";
  }
  return {};
}

}  // namespace

Outcome check_path1(Target& t) {
  Peer p(t);
  std::vector<Reply> rs;
  std::string why;
  if (!target_connects_and_writes(t, p, 65536, rs, why)) return fail(why);
  const auto first = first_per_slot(of(rs, wire::Opcode::kWrite));
  if (first.size() < 2) return fail("a 64 KiB WRITE used fewer than 2 paths");
  why = ports_off_their_slots(t, first);
  if (!why.empty()) return fail(why);
  return pass(std::to_string(first.size()) + " paths on ports (slot:port)" + slot_ports(first));
}

namespace {

// PATH-2 across a generation change (PATH-4, PATH-6): the tester answers
// every path of `data` but the first packet's, and its PROBEs, until that
// path is retired and probes from a new port. The PROBE's path_tag must name
// the same slot, one generation on; a layout other than slot | generation
// << 5 shows another step in bits 15-5.
Outcome retired_path_steps_its_generation(Peer& p, const std::vector<const Reply*>& data,
                                          const std::set<uint16_t>& ports) {
  const uint16_t victim_port = data.front()->entropy;
  const uint16_t victim_tag = data.front()->pkt.bh.path_tag;
  std::set<uint32_t> received;
  const Reply* echo = nullptr;
  for (const Reply* d : data)
    if (d->entropy != victim_port) received.insert(d->pkt.bh.psn), echo = d;
  Reply last = *echo;  // its payload is never read: only the echo fields are
  for (int step = 0; step < 3000; ++step) {
    uint32_t cum = p.target_initial_psn;
    while (received.count(cum) != 0) ++cum;
    std::vector<uint32_t> sacked;
    for (uint32_t psn : received)
      if (psn_after(psn, cum)) sacked.push_back(psn);
    p.send(p.sack(cum, sacked, last), last.entropy);
    for (const Reply& r : p.run(100'000)) {
      if (r.error != wire::ParseError::kOk || r.entropy == victim_port) continue;
      const uint16_t tag = r.pkt.bh.path_tag;
      if (r.pkt.bh.opcode == wire::Opcode::kProbe && ports.count(r.entropy) == 0) {
        const uint16_t want =
            wire::make_path_tag(wire::path_tag_slot(victim_tag),
                                wire::generation_step(wire::path_tag_generation(victim_tag), 1));
        if (tag != want)
          return fail("the path on port " + std::to_string(victim_port) + " (path_tag " +
                      hex32(victim_tag) + ") came back on port " + std::to_string(r.entropy) +
                      " with path_tag " + hex32(tag) + ", not " + hex32(want) +
                      " (the same slot, one generation on)");
        return pass("slot " + std::to_string(wire::path_tag_slot(tag)) + " retired after " +
                    std::to_string(step / 10) + " ms, probing on port " +
                    std::to_string(r.entropy) + " with path_tag " + hex32(tag));
      }
      if (r.pkt.bh.opcode == wire::Opcode::kProbe) {
        p.send(p.ack(cum, r, wire::kAckEchoProbe), r.entropy);
      } else if (wire::is_data(r.pkt.bh.opcode)) {
        received.insert(r.pkt.bh.psn);
        last = r;
      }
    }
  }
  return fail("the path on port " + std::to_string(victim_port) +
              ", never answered, did not probe from a new port within 300 ms");
}

}  // namespace

Outcome check_path2(Target& t) {
  Peer p(t);
  std::vector<Reply> rs;
  std::string why;
  if (!target_connects_and_writes(t, p, 65536, rs, why)) return fail(why);
  const auto data = of(rs, wire::Opcode::kWrite);
  if (data.empty()) return fail("no data");
  if (!one_port_per_tag(data, why)) return fail(why);
  // A fresh connection has replaced no entropy: one tag per port, and the
  // slot bits name the slot whose port PATH-1 gives.
  std::map<uint16_t, uint16_t> tag_of_port;
  for (const Reply* d : data) {
    const auto [it, fresh] = tag_of_port.emplace(d->entropy, d->pkt.bh.path_tag);
    if (!fresh && it->second != d->pkt.bh.path_tag)
      return fail("port " + std::to_string(d->entropy) + " sent path_tags " + hex32(it->second) +
                  " and " + hex32(d->pkt.bh.path_tag) + " with no entropy replaced");
  }
  const auto first = first_per_slot(data);
  if (first.size() != tag_of_port.size())
    return fail(std::to_string(tag_of_port.size()) + " ports but " + std::to_string(first.size()) +
                " slots in path_tag bits 4-0");
  if (first.size() >= 2) {
    why = ports_off_their_slots(t, first);
    if (!why.empty()) return fail("path_tag bits 4-0 do not name PATH-1's slots: " + why);
  }
  std::set<uint16_t> ports;
  for (const auto& [port, tag] : tag_of_port) ports.insert(port);
  if (t.simulated_time()) return retired_path_steps_its_generation(p, data, ports);
  // In real time the generation change (seconds of timeouts) is left out;
  // echoing the tags back completes the WRITE: the target reads them as its own.
  uint32_t last = data.front()->pkt.bh.psn;
  for (const Reply* d : data) last = later_psn(last, d->pkt.bh.psn);
  p.send(p.ack(last + 1, *data.back()), data.back()->entropy);
  Completion c;
  if (!p.await_completion(c) || c.status != Status::kOk)
    return fail("the WRITE did not complete once acknowledged");
  return pass(std::to_string(first.size()) + " path slots; no generation change in real time");
}

}  // namespace metaroce::conformance
