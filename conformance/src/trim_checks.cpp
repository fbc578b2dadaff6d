// Trimmed and lost packets: TRIM-2, TRIM-3, TRIM-5, ACK-2/ACK-6, SEQ-5, LOSS-8.
#include <algorithm>
#include <map>

#include "checks.hpp"
#include "metaroce/bytes.hpp"

namespace metaroce::conformance {

// TRIM-5: with PC clear (the ICRC covers the headers only), a WRITE packet
// carrying less payload than SEQ-5 gives it, not flagged trimmed (cut to
// its headers, cut to half, and cut with a bad key, which must not reach
// NAK-1's key check), is dropped: no ACK or NAK, nothing written, nothing
// received: the whole packet at the same PSN then lands and is
// acknowledged, not as a duplicate.
Outcome check_trim5(Target& t) {
  TesterWrites w(t);
  w.p.cover_payload = false;
  if (const std::string why = w.open(1); !why.empty()) return fail(why);
  const struct {
    Bytes packet;
    const char* what;
  } cuts[] = {{w.cut(0, 0), "cut to its headers"},
              {w.cut(0, 50), "cut to half its payload"},
              {w.cut(0, 0, w.r.rkey ^ 1), "cut to its headers, with a bad key"}};
  Peer& p = w.p;
  const Region& r = w.r;
  const Bytes& payload = w.payload;
  const uint32_t psn = w.first;
  for (const auto& c : cuts) {
    const std::vector<Reply> rs = drawn(t, p, c.packet, 1000);
    if (!of(rs, wire::Opcode::kAck).empty() || !of(rs, wire::Opcode::kNak).empty())
      return fail(std::string("a WRITE ") + c.what + " drew an ACK or NAK");
    if (t.read_memory(r, 0, payload.size()) != Bytes(payload.size(), 0))
      return fail(std::string("a WRITE ") + c.what + " wrote memory");
  }
  const std::vector<Reply> whole =
      p.exchange_until(p.write(psn, r.rkey, r.addr, payload), acks(psn));
  const Reply* a = ack_of(whole, psn);
  if (a == nullptr) return fail("the whole WRITE after the cut ones drew no ACK");
  if ((a->pkt.ack.flags & wire::kAckEchoDup) != 0)
    return fail("the whole WRITE was taken for a duplicate: a cut one was marked received");
  if (t.read_memory(r, 0, payload.size()) != payload)
    return fail("the whole WRITE after the cut ones did not land");
  return pass();
}

// TRIM-2 (where the target can be sent the TRIMMED code point): with PC
// clear, two one-packet WRITEs cut to their headers and flagged trimmed,
// the second first, each draw an ACK at once from the port they came from,
// with ECHO_TRIMMED (and ECHO_CE for a CE-marked one) and their psn, tsval
// and path_tag, that neither cumulatively nor selectively acknowledges them,
// and write nothing; one with a header bit flipped draws nothing (its ICRC
// covers the headers left); flagged, the whole packet is placed as usual.
Outcome check_trim2(Target& t) {
  TesterWrites w(t);
  w.p.cover_payload = false;
  if (const std::string why = w.open(2); !why.empty()) return fail(why);
  Peer& p = w.p;
  const uint32_t first = w.first;
  const Region& r = w.r;
  const auto packet = [&w](uint32_t k, size_t keep) { return w.cut(k, keep); };
  const uint16_t port = Peer::kEntropy + 2;
  for (const uint32_t k : {1u, 0u}) {
    const bool ce = k == 0;
    const uint32_t psn = first + k;
    const std::string which = std::string(ce ? "a CE-marked" : "a") + " trimmed WRITE";
    if (!t.deliver_trimmed(packet(k, 0), port, ce))
      return skip("the target cannot be sent the TRIMMED code point");
    const uint8_t flags = wire::kAckEchoTrimmed | (ce ? wire::kAckEchoCe : 0);
    const std::vector<Reply> rs = p.run_until(acks(psn, flags));
    const Reply* a = ack_of(rs, psn, flags);
    if (a == nullptr)
      return fail(which + " drew no ACK with ECHO_TRIMMED" + (ce ? ", ECHO_CE" : ""));
    const wire::AckBody& k_ = a->pkt.ack;
    if (k_.echo_tsval != 1000 || k_.echo_path_tag != 1 || a->entropy != port)
      return fail(which + "'s ACK echoes tsval " + std::to_string(k_.echo_tsval) + ", path_tag " +
                  hex32(k_.echo_path_tag) + " from port " + std::to_string(a->entropy) +
                  ", not 1000, 0x1 from " + std::to_string(port));
    const bool sacked = k_.sack_words > 0 && (k_.sack[0] & (uint64_t{1} << (psn - first - 1))) != 0;
    if (k_.cum_psn != first || (k == 1 && sacked))
      return fail(which + " was acknowledged (cum " + hex32(k_.cum_psn) + ")");
    if (t.read_memory(r, 0, 256) != Bytes(256, 0)) return fail(which + " wrote memory");
  }
  Bytes flipped = packet(0, 0);
  flipped[15] ^= 0x01;  // tsval's last byte: harmless but for the ICRC over the headers
  (void)t.deliver_trimmed(flipped, port, false);
  const std::vector<Reply> none = drawn(t, p, 1000);
  if (!of(none, wire::Opcode::kAck).empty() || !of(none, wire::Opcode::kNak).empty())
    return fail("a trimmed WRITE with a header bit flipped drew a reply");
  (void)t.deliver_trimmed(packet(0, w.payload.size()), port, false);
  const std::vector<Reply> whole = p.run_until(acks(first));
  const Reply* a = ack_of(whole, first);
  if (a == nullptr || (a->pkt.ack.flags & wire::kAckEchoTrimmed) != 0 ||
      a->pkt.ack.cum_psn != first + 1)
    return fail("a flagged WRITE with its payload was not acknowledged as usual");
  if (t.read_memory(r, 0, w.payload.size()) != w.payload)
    return fail("a flagged WRITE with its payload was not placed");
  return pass();
}

namespace {

// `packet` (a data packet of the tester's) sent on path tag `path_tag` at
// time `tsval`: both BH fields replaced and the ICRC made good.
Bytes stamped(Bytes packet, uint16_t path_tag, uint32_t tsval) {
  wire::Packet pkt;
  if (wire::decode(packet, pkt) != wire::ParseError::kOk) return packet;
  const size_t payload = pkt.payload.size();
  be::store16(packet.data() + 2, path_tag);
  be::store32(packet.data() + 12, tsval);
  (void)wire::seal(packet, packet.size() - payload - wire::kIcrcSize, payload);
  return packet;
}

// SEQ-5: the packets among `rs` of the target's one message of `len` bytes
// (`op`, on the tester's connection `conn`), its first at `first`: every
// PSN from `first` on, one each, `offset` k * mtu, `min(mtu, len - offset)`
// bytes, and no other packet of it. Empty if so, else what is wrong.
std::string segmented(const std::vector<Reply>& rs, wire::Opcode op, uint32_t conn, uint32_t first,
                      uint32_t len, uint32_t mtu) {
  const std::string what = std::to_string(len) + "-byte " + wire::opcode_name(op);
  const uint32_t n = len == 0 ? 1 : (len + mtu - 1) / mtu;
  std::map<uint32_t, const Reply*> by_k;  // by distance from `first`
  for (const Reply* d : firsts(of(rs, op)))
    if (d->pkt.bh.dst_conn == conn && d->pkt.mh.msg_len == len)
      by_k.emplace(d->pkt.bh.psn - first, d);
  for (const auto& [k, d] : by_k) {
    const std::string which = "packet " + std::to_string(k + 1) + " of a " + what;
    if (k >= n)
      return which + " (PSN " + hex32(d->pkt.bh.psn) + "): " + std::to_string(n) +
             " packets from the first PSN " + hex32(first) + " at mtu " + std::to_string(mtu);
    const uint32_t offset = k * mtu;
    const uint32_t bytes = std::min(mtu, len - offset);
    if (d->pkt.mh.offset != offset || d->pkt.payload.size() != bytes)
      return which + " carries " + std::to_string(d->pkt.payload.size()) + " bytes at offset " +
             std::to_string(d->pkt.mh.offset) + ", not " + std::to_string(bytes) + " at " +
             std::to_string(offset) + " (mtu " + std::to_string(mtu) + ")";
  }
  if (by_k.size() != n)
    return std::to_string(by_k.size()) + " packets of a " + what + " from the first PSN " +
           hex32(first) + ", not " + std::to_string(n) + " at mtu " + std::to_string(mtu);
  return {};
}

// Whether `rs` holds `n` packets of `op` (first copies) of `len` bytes.
auto holds(wire::Opcode op, uint32_t len, size_t n) {
  return [op, len, n](const std::vector<Reply>& rs) {
    size_t got = 0;
    for (const Reply* d : firsts(of(rs, op))) got += d->pkt.mh.msg_len == len;
    return got >= n;
  };
}

}  // namespace

// ACK-2, and ACK-6's echo fields: packets 1-4 of a 6-packet WRITE, in
// order, without AR, CE-marked, none of them a message's last or filling a
// gap, so that only the CE mark calls for an ACK at once (ACK-1's count
// would acknowledge them by twos, echoing one packet of each pair). Each
// draws its own ACK (at once: within 1 us in simulated time) with ECHO_CE,
// echoing its `psn`, `tsval` and `path_tag`, each packet sent with a tag
// and a timestamp of its own.
Outcome check_ack2(Target& t) {
  TesterWrites w(t);
  if (const std::string why = w.open(6, 6 * 4096); !why.empty()) return fail(why);
  const bool simulated = t.simulated_time();
  for (uint32_t k = 0; k < 4; ++k) {
    const uint32_t psn = w.first + k;
    const uint16_t tag = wire::make_path_tag(static_cast<uint8_t>(k + 1), 3);
    const uint32_t tsval = 0x5eed0000u + 0x111u * k;
    const Bytes packet = stamped(w.part(k), tag, tsval);
    const std::vector<Reply> rs = simulated
                                      ? w.p.exchange(packet, 1000, Peer::kEntropy, /*ce=*/true)
                                      : w.p.exchange_until(packet, acks(psn, wire::kAckEchoCe),
                                                           100'000, Peer::kEntropy, /*ce=*/true);
    const std::string which = "CE-marked packet " + std::to_string(k + 1) + " of a message";
    const Reply* a = ack_of(rs, psn, wire::kAckEchoCe);
    if (a == nullptr)
      return fail(which + " drew no ACK echoing it with ECHO_CE" +
                  (simulated ? " within 1 us" : ""));
    const wire::AckBody& b = a->pkt.ack;
    if (b.echo_tsval != tsval || b.echo_path_tag != tag)
      return fail(which + "'s ACK echoes tsval " + hex32(b.echo_tsval) + " and path_tag " +
                  hex32(b.echo_path_tag) + ", not the packet's " + hex32(tsval) + " and " +
                  hex32(tag));
  }
  return pass();
}

// SEQ-5, at the mtu the handshake agreed (the tester offers 1024, less
// than the target's): a READ response and a WRITE of 2 * 1024 + 1 bytes
// each take 3 consecutive PSNs, 1024, 1024 and 1 bytes at offsets 0, 1024
// and 2048, and a WRITE of no bytes one packet.
Outcome check_seq5(Target& t) {
  constexpr uint32_t kMtu = 1024;
  constexpr uint32_t kLen = 2 * kMtu + 1;
  {  // the target responds to the tester's READ
    Peer p(t);
    p.mtu = kMtu;
    Region r;
    std::string why;
    if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteRead, 4096)) return fail(why);
    if (p.mtu != kMtu)
      return fail("the handshake agreed mtu " + std::to_string(p.mtu) + ", not the tester's " +
                  std::to_string(kMtu));
    const std::vector<Reply> rs = p.exchange_until(
        p.read_req(p.next_psn++, 0, r.rkey, r.addr, kLen), holds(wire::Opcode::kReadResp, kLen, 3));
    if (const std::string bad =
            segmented(rs, wire::Opcode::kReadResp, p.conn(), p.target_initial_psn, kLen, kMtu);
        !bad.empty())
      return fail(bad);
  }
  Peer p(t, 0x7e5e);
  p.mtu = kMtu;
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why) || !target_writes(t, conn, kLen, 1, why)) return fail(why);
  std::vector<Reply> rs = p.run_until(holds(wire::Opcode::kWrite, kLen, 3));
  if (const std::string bad =
          segmented(rs, wire::Opcode::kWrite, p.conn(), p.target_initial_psn, kLen, kMtu);
      !bad.empty())
    return fail(bad);
  // Acknowledged, so that no path waits on it (a tail-loss probe unanswered)
  // when the next message is sent.
  for (const Reply* d : firsts(of(rs, wire::Opcode::kWrite)))
    if (d->pkt.bh.psn == p.target_initial_psn + 2) p.send(p.ack(d->pkt.bh.psn + 1, *d), d->entropy);
  Region none;
  if (!t.register_memory(64, 0, none)) return fail("the target could not register memory");
  if (t.post_send(conn, to_tester(WrOpcode::kWrite, none, 0, 2)) != Status::kOk)
    return fail("the target refused a WRITE of no bytes");
  rs =
      run_until_answering_probes(t, p, holds(wire::Opcode::kWrite, 0, 1), p.target_initial_psn + 3);
  if (const std::string bad =
          segmented(rs, wire::Opcode::kWrite, p.conn(), p.target_initial_psn + 3, 0, kMtu);
      !bad.empty())
    return fail(bad);
  return pass();
}

// TRIM-3 (simulated time: in real time "at once" is not told apart from
// the tail-loss resend that would follow anyway): the tester answers a
// one-packet WRITE of the target's with an ACK echoing it with
// ECHO_TRIMMED and acknowledging nothing. The packet goes again within
// 10 us (its tail-loss timer, LOSS-8, would wait some 300 us), on another
// path (LOSS-3): from another source port, under another path slot.
Outcome check_trim3(Target& t) {
  Peer p(t);
  std::vector<Reply> rs;
  std::string why;
  if (!target_connects_and_writes(t, p, 100, rs, why, 10'000)) return fail(why);
  const auto sent = of(rs, wire::Opcode::kWrite);
  if (sent.empty()) return fail("no data packet within 10 us of the ACCEPT");
  const Reply& w = *sent.front();
  const uint32_t psn = w.pkt.bh.psn;
  const std::vector<Reply> again =
      p.exchange(p.ack(psn, w, wire::kAckEchoTrimmed), 10'000, w.entropy);
  const Reply* r = nullptr;
  for (const Reply* d : of(again, wire::Opcode::kWrite))
    if (d->pkt.bh.psn == psn) r = r != nullptr ? r : d;
  if (r == nullptr) return fail("a WRITE echoed with ECHO_TRIMMED was not resent within 10 us");
  const auto slot = [](const Reply& d) { return wire::path_tag_slot(d.pkt.bh.path_tag); };
  if (r->entropy == w.entropy || slot(*r) == slot(w))
    return fail("a WRITE echoed with ECHO_TRIMMED was resent from port " +
                std::to_string(r->entropy) + ", path slot " + std::to_string(slot(*r)) +
                ", its own path's (port " + std::to_string(w.entropy) + ", slot " +
                std::to_string(slot(w)) + "), not another");
  return pass();
}

// LOSS-8 (simulated time: in real time the tail-loss resend is not told
// apart from resends a loaded host's late ACKs draw): a 64 KiB WRITE of the
// target's, every packet acknowledged (selectively) but those sent on the
// first packet's path (at least two), which LOSS-2 then never finds lost. Within
// 900 us (the tail-loss timer, at most srtt + 4 rttvar + ack_delay = 310 us
// with no RTT sample, before the RTO of 1 ms), at the same time: a PROBE on
// that path (its source port and path_tag, AR set) and the path's oldest
// packet again on another path (LOSS-3), the other paths having room.
Outcome check_loss8(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why) || !target_writes(t, conn, 65536, 1, why)) return fail(why);
  const std::vector<Reply> first = p.run(1000);
  const auto sent = firsts(of(first, wire::Opcode::kWrite));
  if (sent.empty()) return fail("the target's WRITE was not sent");
  const uint16_t tag = sent.front()->pkt.bh.path_tag;
  std::vector<const Reply*> kept;  // every packet on the first packet's path
  std::vector<uint32_t> sacked;
  const Reply* echo = nullptr;
  for (const Reply* d : sent) {
    if (d->pkt.bh.path_tag == tag) {
      kept.push_back(d);
    } else {
      sacked.push_back(d->pkt.bh.psn);
      echo = d;
    }
  }
  if (kept.size() < 2 || echo == nullptr)
    return fail("the first 1 us of the WRITE put no two packets on one path and some on another");
  const Reply& oldest = *kept.front();
  p.send(p.sack(oldest.pkt.bh.psn, sacked, *echo), echo->entropy);
  constexpr uint64_t kStep = 5'000;
  for (uint64_t waited = 0; waited < 900'000; waited += kStep) {
    const std::vector<Reply> rs = p.run(kStep);
    const Reply* probe = nullptr;
    const Reply* resend = nullptr;
    for (const Reply& r : rs) {
      if (r.error != wire::ParseError::kOk) continue;
      if (r.pkt.bh.opcode == wire::Opcode::kProbe && r.pkt.bh.path_tag == tag) probe = &r;
      if (r.pkt.bh.opcode == wire::Opcode::kWrite && r.pkt.bh.psn == oldest.pkt.bh.psn)
        resend = resend != nullptr ? resend : &r;
    }
    if (probe == nullptr && resend == nullptr) continue;
    if (probe == nullptr) return fail("the path's oldest packet was resent without a PROBE");
    if (probe->entropy != oldest.entropy || !(probe->pkt.bh.flags & wire::kFlagAckRequested))
      return fail("the tail-loss PROBE left from port " + std::to_string(probe->entropy) +
                  (probe->pkt.bh.flags & wire::kFlagAckRequested ? "" : " without AR") +
                  ", its path's port " + std::to_string(oldest.entropy));
    if (resend == nullptr) return fail("the path's oldest packet was not resent with its PROBE");
    if (resend->entropy == oldest.entropy ||
        wire::path_tag_slot(resend->pkt.bh.path_tag) == wire::path_tag_slot(oldest.pkt.bh.path_tag))
      return fail("the path's oldest packet was resent on its own path (port " +
                  std::to_string(resend->entropy) + "), not another");
    return pass();
  }
  return fail("no PROBE on the path of packets left unacknowledged for 900 us");
}

// LOSS-8, the connection's tail, judged by send time (simulated time only):
// a 6000-byte WRITE of the target's, its first packet echoed with
// ECHO_TRIMMED, resent at once (TRIM-3), after the WRITE's last packet went.
// The tester then acknowledges every packet but the first (SACK), echoing
// the last: the newest PSN is acknowledged and only the resend is in flight,
// on one path. Nothing sent after the resend came back, so its own tail-loss
// timer (variance term included; the reference engine's, about 300 us)
// decides: the resend is not sent again in the next 100 us. (Judged by PSN,
// the rule sent it again a quarter round trip after the ACK: 25 us.)
Outcome check_loss8_tail_by_send_time(Target& t) {
  Peer p(t);
  std::vector<Reply> rs;
  std::string why;
  if (!target_connects_and_writes(t, p, 6000, rs, why, 10'000)) return fail(why);
  const auto sent = firsts(of(rs, wire::Opcode::kWrite));
  if (sent.size() < 2) return fail("the 6000-byte WRITE was not sent within 10 us of the ACCEPT");
  const Reply& first = *sent.front();
  const Reply& last = *sent.back();
  const uint32_t psn = first.pkt.bh.psn;
  std::vector<uint32_t> sacked;
  for (const Reply* d : sent)
    if (d->pkt.bh.psn != psn) sacked.push_back(d->pkt.bh.psn);
  const auto resends = [psn](const std::vector<Reply>& got) {
    size_t n = 0;
    for (const Reply* d : of(got, wire::Opcode::kWrite)) n += d->pkt.bh.psn == psn;
    return n;
  };
  if (resends(p.exchange(p.ack(psn, first, wire::kAckEchoTrimmed), 10'000, first.entropy)) == 0)
    return fail("a WRITE packet echoed with ECHO_TRIMMED was not resent within 10 us");
  const std::vector<Reply> after = p.exchange(p.sack(psn, sacked, last), 100'000, last.entropy);
  if (const size_t n = resends(after); n != 0)
    return fail(
        "the resent packet went again within 100 us of the ACK of every packet sent "
        "before it (" +
        std::to_string(n) + " times): nothing sent after the resend had come back");
  return pass();
}

}  // namespace metaroce::conformance
