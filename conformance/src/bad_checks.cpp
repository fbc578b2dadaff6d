// BAD-1, BAD-2, BAD-3, BAD-5 and BAD-6 at peer level: malformed packets,
// each with a good ICRC over what it holds (so that only its own fault makes
// it bad), are dropped with no reply and change nothing, whichever way they
// go: a WRITE of the tester's does not land and the good one then does; an
// ACK of the target's WRITE completes nothing and the good one then does.
// Each raises its drop counter (Counted) where the target reports them.
#include <functional>
#include <tuple>

#include "checks.hpp"
#include "metaroce/bytes.hpp"

namespace metaroce::conformance {
namespace {

const Bytes kPayload = {1, 2, 3, 4, 5, 6, 7, 8};

// `p`, a whole packet, with `change` made to what comes before its ICRC and
// the ICRC computed again over all of it.
Bytes resealed(Bytes p, const std::function<void(Bytes&)>& change) {
  p.resize(p.size() - wire::kIcrcSize);
  change(p);
  const size_t len = p.size();
  p.resize(len + wire::kIcrcSize);
  p.resize(wire::seal(p, len, 0));
  return p;
}

// The target WRITEs to the tester, which answers with the packets `bad`
// makes (from the good ACK of that WRITE, and the WRITE): they draw no
// reply (the WRITE may be resent meanwhile), complete nothing and raise
// `counted`; the good ACK then completes the WRITE kOk.
// `from_stranger`: sent from the stranger's address (BAD-8); `conn_id`: the
// tester's connection id, one per call on a target.
Outcome ack_ignored_then_taken(
    Target& t, const std::string& what, const Counted& counted,
    const std::function<std::vector<Bytes>(const Peer&, const Bytes& good, const Reply& w)>& bad,
    bool from_stranger = false, uint32_t conn_id = 0x7e60) {
  Peer p(t, conn_id);
  std::vector<Reply> sent;
  std::string why;
  if (!target_connects_and_writes(t, p, 100, sent, why)) return fail(why);
  const auto writes = of(sent, wire::Opcode::kWrite);
  if (writes.empty()) return fail("no WRITE from the target");
  const Reply w = *writes.front();  // only its header fields are read
  const Bytes good = p.ack(w.pkt.bh.psn + 1, w);
  const std::optional<EndpointStats> before = drop_counters(t);
  for (const Bytes& b : bad(p, good, w)) p.send(b, w.entropy, false, from_stranger);
  for (const Reply& x : drawn(t, p))
    if (x.error != wire::ParseError::kOk ||
        (x.pkt.bh.opcode != wire::Opcode::kWrite && x.pkt.bh.opcode != wire::Opcode::kProbe))
      return fail(what + " drew a reply" +
                  (x.error == wire::ParseError::kOk
                       ? std::string(" (") + wire::opcode_name(x.pkt.bh.opcode) + ")"
                       : std::string()));
  // What the packets did comes before whether they were counted: one taken
  // for good is not counted either, and "dropped, not counted" would then
  // name the wrong fault.
  Completion c;
  if (t.poll_completion(c)) return fail(what + " completed the WRITE with " + code_text(c.status));
  if (why = count_missing(t, before, counted, what); !why.empty()) return fail(why);
  p.send(good, w.entropy);
  if (!p.await_completion(c) || c.wr_id != 1 || c.status != Status::kOk)
    return fail("the good ACK after " + what + " did not complete the WRITE kOk");
  return passed_counting(before);
}

Outcome both(const Outcome& a, const std::function<Outcome()>& b) { return a.passed ? b() : a; }

// The opcode byte with its top bit set: no opcode has it (wire::Opcode).
void unknown_opcode(Bytes& p) { p[1] |= 0x80; }
void version_2(Bytes& p) { p[0] = static_cast<uint8_t>(0x20 | (p[0] & 0x0f)); }
// A WRITE and an ACK, each `how` (`change` made, the ICRC good again): both
// halves above.
Outcome write_and_ack_ignored(Target& t, const std::string& how, const Counted& counted,
                              void (*change)(Bytes&)) {
  return both(
      ignored_then_served(t, "a WRITE " + how, counted,
                          [change](Peer& p, const Bytes& good) { p.send(resealed(good, change)); }),
      [&] {
        return ack_ignored_then_taken(t, "an ACK " + how, counted,
                                      [change](const Peer&, const Bytes& good, const Reply&) {
                                        return std::vector<Bytes>{resealed(good, change)};
                                      });
      });
}

// `p` with a bit of its BH tsval flipped and its ICRC left as it was: a
// field whose value alone makes no packet invalid.
Bytes tsval_bit_flipped(Bytes p) {
  p[12] ^= 0x80;
  return p;
}

constexpr Counted kBadChecksum(uint64_t n) {
  return {&EndpointStats::bad_checksum, "bad_checksum", n};
}

constexpr Counted kTruncated(uint64_t n) { return {&EndpointStats::truncated, "truncated", n}; }

// A CONNECT_REQ's answer, ACCEPT or REJECT, among `got`.
bool answered(const std::vector<Reply>& got) {
  return has(wire::Opcode::kConnectReject)(got) || has(wire::Opcode::kConnectAccept)(got);
}

}  // namespace

// BAD-1: a WRITE cut 1 byte short of its headers and ICRC, and one cut
// below 20 bytes; an ACK with half its ICRC, and one of 12 bytes.
Outcome check_bad1(Target& t) {
  const size_t write_min = wire::header_size(wire::Opcode::kWrite) + wire::kIcrcSize;
  const size_t ack_min = wire::header_size(wire::Opcode::kAck) + wire::kIcrcSize;
  return both(ignored_then_served(t, "a WRITE shorter than its headers and ICRC", kTruncated(2),
                                  [&](Peer& p, const Bytes& good) {
                                    p.send(Bytes(good.begin(), good.begin() + write_min - 1));
                                    p.send(Bytes(good.begin(), good.begin() + 19));
                                  }),
              [&] {
                return ack_ignored_then_taken(
                    t, "an ACK shorter than its headers and ICRC", kTruncated(2),
                    [&](const Peer&, const Bytes& good, const Reply&) {
                      return std::vector<Bytes>{Bytes(good.begin(), good.begin() + ack_min - 2),
                                                Bytes(good.begin(), good.begin() + 12)};
                    });
              });
}

// BAD-2: a WRITE and an ACK of version 2 are dropped; a CONNECT_REQ of
// version 2 draws a version-1 CONNECT_REJECT kVersionMismatch (0x48), with
// max_version 1, naming the request's src_conn and nonce (CONN-5), but
// one byte shorter than a version-1 request (43 bytes, too short to hold
// the nonce to echo) draws nothing. Each raises bad_version (section 11.3),
// the request too: answering it is no reason to leave it uncounted.
Outcome check_bad2(Target& t) {
  constexpr Counted kBadVersion{&EndpointStats::bad_version, "bad_version", 1};
  const Outcome dropped = write_and_ack_ignored(t, "of version 2", kBadVersion, version_2);
  if (!dropped.passed) return dropped;
  // The short one first: the answer to the whole one after it shows the
  // target was listening. Answers are looked for only: the first half's
  // connection may still be probing (its WRITE went unacknowledged).
  Peer s(t, 0x7e62);
  const Bytes cut = resealed(s.connect_req(0xB2B3, 2), [](Bytes& b) { b.pop_back(); });
  const std::string what_cut =
      "a CONNECT_REQ of version 2, " + std::to_string(cut.size()) + " bytes long";
  const std::optional<EndpointStats> before_cut = drop_counters(t);
  if (answered(drawn(t, s, cut)))
    return fail(what_cut + ", drew an answer (only one of 44 bytes or more is answered)");
  if (const std::string why = count_missing(t, before_cut, kBadVersion, what_cut); !why.empty())
    return fail(why);
  Peer p(t, 0x7e61);
  constexpr uint64_t kNonce = 0xB2B2;
  const std::optional<EndpointStats> before = drop_counters(t);
  const std::vector<Reply> rs = p.exchange_until(p.connect_req(kNonce, 2), answered);
  if (!of(rs, wire::Opcode::kConnectAccept).empty())
    return fail("a CONNECT_REQ of version 2 was accepted");
  const auto rejects = of(rs, wire::Opcode::kConnectReject);
  if (rejects.empty()) return fail("a CONNECT_REQ of version 2 drew no version-1 CONNECT_REJECT");
  const wire::Packet& k = rejects.front()->pkt;
  if (k.connect.code != static_cast<uint8_t>(Status::kVersionMismatch) ||
      k.connect.max_version != 1 || k.bh.dst_conn != p.conn() || k.connect.nonce != kNonce)
    return fail("the CONNECT_REJECT of a version-2 request has code " + code_text(k.connect.code) +
                ", max_version " + std::to_string(k.connect.max_version) + ", dst_conn " +
                hex32(k.bh.dst_conn) + ", nonce " + hex32(k.connect.nonce) + ", not " +
                code_text(Status::kVersionMismatch) + ", 1, " + hex32(p.conn()) + ", " +
                hex32(kNonce));
  if (const std::string why = count_missing(t, before, kBadVersion, "a CONNECT_REQ of version 2");
      !why.empty())
    return fail(why);
  return dropped;
}

// VER-1: of a request of another version, a receiver reads the fields
// every version keeps and nothing else. A version-2 CONNECT_REQ of 64 bytes
// whose last four are no ICRC, and one of 44 bytes with its ICRC flipped,
// each draw the version-1 CONNECT_REJECT 0x48 echoing their src_conn and
// nonce, no longer than the request; one naming src_conn 0 or nonce 0
// draws nothing (sent first: the answers after them show the target was
// listening). An IUT that checks such a request's ICRC as version 1's
// leaves a requester of a later version with a longer request, or another
// ICRC, unanswered: version negotiation (CONN-5) never starts.
Outcome check_ver1(Target& t) {
  Peer zero_conn(t, 0), zero_nonce(t, 0x7e73);
  for (const auto& [req, what] : {std::pair{zero_conn.connect_req(0xE71, 2), "naming src_conn 0"},
                                  std::pair{zero_nonce.connect_req(0, 2), "naming nonce 0"}}) {
    if (answered(drawn(t, zero_conn, req)))
      return fail(std::string("a CONNECT_REQ of version 2 ") + what + " drew an answer");
  }
  Peer longer(t, 0x7e71), flipped(t, 0x7e72);
  Bytes tail = longer.connect_req(0xE72, 2);
  tail.insert(tail.end(), 20, 0x5a);  // its last four bytes 0x5a5a5a5a: no ICRC
  Bytes bad = flipped.connect_req(0xE73, 2);
  bad.back() ^= 0x01;
  for (const auto& [p, req, nonce, what] :
       {std::tuple{&longer, tail, uint64_t{0xE72}, "(64 bytes, its last four no ICRC)"},
        std::tuple{&flipped, bad, uint64_t{0xE73}, "(44 bytes, its ICRC flipped)"}}) {
    const std::string name = std::string("a CONNECT_REQ of version 2 ") + what;
    const std::vector<Reply> rs = p->exchange_until(req, answered);
    const auto rejects = of(rs, wire::Opcode::kConnectReject);
    if (rejects.empty()) return fail(name + " drew no version-1 CONNECT_REJECT");
    const Reply& r = *rejects.front();
    const wire::Packet& k = r.pkt;
    if (k.connect.code != static_cast<uint8_t>(Status::kVersionMismatch) ||
        k.bh.dst_conn != p->conn() || k.connect.nonce != nonce)
      return fail(name + " drew a CONNECT_REJECT of code " + code_text(k.connect.code) +
                  ", dst_conn " + hex32(k.bh.dst_conn) + ", nonce " + hex32(k.connect.nonce) +
                  ", not " + code_text(Status::kVersionMismatch) + ", " + hex32(p->conn()) + ", " +
                  hex32(nonce));
    if (r.bytes.size() > req.size())
      return fail(name + " drew a CONNECT_REJECT of " + std::to_string(r.bytes.size()) +
                  " bytes, longer than the request");
  }
  return pass();
}

// BAD-3: a WRITE and an ACK whose opcode has its top bit set.
Outcome check_bad3(Target& t) {
  return write_and_ack_ignored(t, "with an unknown opcode",
                               {&EndpointStats::bad_opcode, "bad_opcode", 1}, unknown_opcode);
}

// BAD-5: a WRITE whose payload is one byte longer than msg_len - offset, one
// whose offset is past msg_len, and a READ_REQ of the same bytes carrying a
// payload; an ACK carrying one.
Outcome check_bad5(Target& t) {
  return both(ignored_then_served(
                  t, "a data packet with more payload than its message header allows",
                  {&EndpointStats::bad_length, "bad_length", 3},
                  [](Peer& p, const Bytes& good) {
                    p.send(resealed(good, [](Bytes& b) {
                      be::store32(b.data() + 24, static_cast<uint32_t>(kPayload.size() - 1));
                    }));
                    p.send(resealed(good, [](Bytes& b) {
                      be::store32(b.data() + 20, static_cast<uint32_t>(kPayload.size() + 1));
                    }));
                    const Bytes rd = p.read_req(p.next_psn, 0, 0, 0, 8);
                    p.send(resealed(
                        rd, [](Bytes& b) { b.insert(b.end(), kPayload.begin(), kPayload.end()); }));
                  }),
              [&] {
                return ack_ignored_then_taken(
                    t, "an ACK carrying a payload", {&EndpointStats::bad_length, "bad_length", 1},
                    [](const Peer&, const Bytes& good, const Reply&) {
                      return std::vector<Bytes>{resealed(good, [](Bytes& b) {
                        b.insert(b.end(), kPayload.begin(), kPayload.end());
                      })};
                    });
              });
}

// BAD-6: a READ_REQ with offset 1; an ACK with sack_words 17 (and its 17
// words), NAKs of the target's WRITE with codes 0 and 8.
Outcome check_bad6(Target& t) {
  return both(ignored_then_served(
                  t, "a READ_REQ with offset 1", {&EndpointStats::bad_field, "bad_field", 1},
                  [](Peer& p, const Bytes&) {
                    const Bytes rd = p.read_req(p.next_psn, 0, 0, 0, 8);
                    p.send(resealed(rd, [](Bytes& b) { be::store32(b.data() + 20, 1); }));
                  }),
              [&] {
                return ack_ignored_then_taken(
                    t, "an ACK with sack_words 17 or a NAK with code 0 or 8",
                    {&EndpointStats::bad_field, "bad_field", 3},
                    [](const Peer& p, const Bytes& good, const Reply& w) {
                      std::vector<Bytes> out{resealed(good, [](Bytes& b) {
                        b[31] = 17;
                        b.resize(b.size() + 17 * 8, 0xff);
                      })};
                      for (const uint8_t code : {uint8_t{0x00}, uint8_t{0x08}})
                        out.push_back(p.nak(w.pkt.bh.psn, code, w.pkt.mh.msn, p.next_psn));
                      return out;
                    });
              });
}

// BAD-4 and INT-1: a target that never verifies the ICRC, or verifies it on
// data packets only (an ACK being "just feedback"), would take these. The
// WRITE's copies: a payload bit PC covers flipped (INT-1), a header field
// flipped; a READ_REQ (no payload) with a header bit flipped, which would
// draw a NAK or a response. Then, the target's WRITE outstanding: an ACK
// covering it, an ACK whose sack_words a bit flip made 17 (BAD-4: a bad
// checksum, never a bad field, so counted in bad_checksum), a NAK 0x02
// naming it, a DISCONNECT and a PROBE, each with a header bit flipped: a
// corrupt ACK taken completes a WRITE that never arrived, a corrupt NAK or
// DISCONNECT fails or closes the connection, a PROBE draws an ACK.
Outcome check_bad4(Target& t) {
  return both(
      ignored_then_served(t, "a WRITE or READ_REQ whose ICRC does not match", kBadChecksum(3),
                          [](Peer& p, const Bytes& good) {
                            Bytes payload_bit = good;
                            payload_bit[payload_bit.size() - wire::kIcrcSize - 1] ^= 0x01;
                            p.send(payload_bit);
                            p.send(tsval_bit_flipped(good));
                            p.send(tsval_bit_flipped(p.read_req(p.next_psn, 0, 0, 0, 8)));
                          }),
      [&] {
        return both(
            ack_ignored_then_taken(
                t, "an ACK, NAK 0x02, DISCONNECT or PROBE whose ICRC does not match",
                kBadChecksum(4),
                [](const Peer& p, const Bytes& good, const Reply& w) {
                  return std::vector<Bytes>{
                      tsval_bit_flipped(good),
                      tsval_bit_flipped(p.nak(w.pkt.bh.psn, 0x02, w.pkt.mh.msn, p.next_psn)),
                      tsval_bit_flipped(p.disconnect(p.conn())), tsval_bit_flipped(p.probe())};
                }),
            [&] {
              return ack_ignored_then_taken(
                  t, "an ACK whose ICRC does not match, its sack_words flipped to 17",
                  kBadChecksum(1),
                  [](const Peer&, const Bytes& good, const Reply&) {
                    Bytes sack_words_17 = good;
                    sack_words_17[31] = 17;
                    return std::vector<Bytes>{sack_words_17};
                  },
                  false, 0x7e63);
            });
      });
}

// BAD-8: a packet for the connection from the stranger's address, valid
// otherwise: a WRITE, and (the target's WRITE outstanding) an ACK covering
// it, a NAK 0x02 naming it, a DISCONNECT and a PROBE. An IUT that checks
// the address on data packets only would complete, fail or close the
// connection at any host's word.
Outcome check_bad8(Target& t) {
  constexpr Counted kWrongPeer{&EndpointStats::wrong_peer, "wrong_peer", 1};
  return both(ignored_then_served(t, "a WRITE from another address", kWrongPeer,
                                  [](Peer& p, const Bytes& good) {
                                    p.send(good, Peer::kEntropy, false, /*stranger=*/true);
                                  }),
              [&] {
                return ack_ignored_then_taken(
                    t, "an ACK, NAK 0x02, DISCONNECT or PROBE from another address",
                    {&EndpointStats::wrong_peer, "wrong_peer", 4},
                    [](const Peer& p, const Bytes& good, const Reply& w) {
                      return std::vector<Bytes>{good,
                                                p.nak(w.pkt.bh.psn, 0x02, w.pkt.mh.msn, p.next_psn),
                                                p.disconnect(p.conn()), p.probe()};
                    },
                    /*from_stranger=*/true);
              });
}

}  // namespace metaroce::conformance
