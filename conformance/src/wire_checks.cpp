// ENC-*, INT-2 and BAD-4/7/8: what goes on the wire, and packets that must be ignored.
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include "checks.hpp"

namespace metaroce::conformance {
namespace {

const Bytes kPayload = {1, 2, 3, 4, 5, 6, 7, 8};

void append(std::vector<Reply>& all, std::vector<Reply> more) {
  for (Reply& r : more) all.push_back(std::move(r));
}

}  // namespace

// ENC-1, and 1.3's reserved fields and bits, sent as zero: every packet
// that has some (BH byte 0; ACK, NAK and DISCONNECT* bodies) is drawn once,
// and its raw bytes read (decode() ignores them).
Outcome check_enc1(Target& t) {
  Peer p(t);
  std::vector<Reply> all;
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteWrite, 4096, &all)) return fail(why);
  const ConnId conn = t.accepted();
  // A packet ends with its ICRC: a valid WRITE with one byte after it is not
  // one packet (its last four bytes are no ICRC, its payload overruns
  // msg_len; BAD-4, BAD-5): dropped, with no reply and nothing written ...
  const uint32_t psn = p.next_psn++;
  const Bytes good = p.write(psn, r.rkey, r.addr, kPayload);
  Bytes longer = good;
  longer.push_back(0);
  const std::vector<Reply> quiet = drawn(t, p, longer);
  if (!quiet.empty())
    return fail("a WRITE with one byte after its ICRC drew a reply" +
                std::string(ack_of(quiet, psn) != nullptr ? " (its ACK)" : ""));
  if (t.read_memory(r, 0, kPayload.size()) != Bytes(kPayload.size(), 0))
    return fail("a WRITE with one byte after its ICRC wrote memory");
  // ... and the same WRITE without that byte then lands.
  std::vector<Reply> more = p.exchange_until(good, acks(psn));
  if (ack_of(more, psn) == nullptr)
    return fail("the WRITE without the trailing byte was not acknowledged");
  if (t.read_memory(r, 0, kPayload.size()) != kPayload)
    return fail("the WRITE without the trailing byte did not land");
  append(all, std::move(more));
  // A NAK: a WRITE with a bad key (fatal, NAK-2) ...
  std::vector<Reply> refused;
  why = draws_nak(p, p.write(p.next_psn, r.rkey ^ 0xBAD, r.addr, kPayload), 0x02, p.next_psn,
                  std::nullopt, &refused);
  if (!why.empty()) return fail("a WRITE with a bad key " + why);
  append(all, std::move(refused));
  // ... a DISCONNECT_ACK, of another connection of the tester's ...
  Peer q(t, 0x7e5c);
  std::vector<Reply> second;
  if (!q.connect(0xC0FFE1, why, &second)) return fail(why);
  append(all, std::move(second));
  append(all, q.exchange_until(q.disconnect(q.conn()), has(wire::Opcode::kDisconnectAck)));
  // ... and the target's DISCONNECT of the failed one, where it can close.
  const bool closes = t.close(conn);
  if (closes) {
    append(all, p.run_until(has(wire::Opcode::kDisconnect)));
    p.send(p.disconnect(p.conn(), true));
  }
  // Everything the target sent decodes as one packet, filling its datagram,
  // with its reserved bits and bytes zero and a control packet's fixed BH
  // fields as 3.3 fixes them.
  for (const Reply& x : all) {
    if (x.error != wire::ParseError::kOk)
      return fail(std::string("a datagram does not decode: ") + wire::parse_error_name(x.error));
    if (const std::string set = reserved_set(x); !set.empty())
      return fail("reserved bits are sent as zero (1.3), fixed fields as fixed (3.3): " + set);
  }
  std::vector<wire::Opcode> read = {wire::Opcode::kConnectAccept, wire::Opcode::kAck,
                                    wire::Opcode::kNak, wire::Opcode::kDisconnectAck};
  if (closes) read.push_back(wire::Opcode::kDisconnect);
  for (const wire::Opcode op : read)
    if (of(all, op).empty())
      return fail(std::string("no ") + wire::opcode_name(op) + " to read among " +
                  std::to_string(all.size()) + " datagrams");
  return pass(
      std::to_string(all.size()) +
      " datagrams, reserved bits zero and BH path_tag, psn 0, AR clear in an ACCEPT, ACK, NAK, "
      "DISCONNECT_ACK" +
      (closes ? " and DISCONNECT" : " (DISCONNECT unread: the target cannot be asked to close)") +
      "; a trailing byte dropped");
}

namespace {

// ENC-2: empty when every datagram of `rs` that says where it went (Sent::
// to_port) went to the tester's configured port, Peer::kEntropy (the
// stranger's too: it has that port alone); else the first that did not.
std::string off_port(const std::vector<Reply>& rs, const std::string& when, size_t& told) {
  for (const Reply& r : rs) {
    if (r.to_port == 0) continue;
    ++told;
    if (r.to_port == Peer::kEntropy) continue;
    const std::string what = r.error == wire::ParseError::kOk
                                 ? std::string(wire::opcode_name(r.pkt.bh.opcode))
                                 : std::string("datagram");
    const bool vowel = std::string_view("AEIOU").find(what.front()) != std::string_view::npos;
    return when + (vowel ? ": an " : ": a ") + what + " from port " + std::to_string(r.entropy) +
           " went to port " + std::to_string(r.to_port) + ", not to the tester's configured port " +
           std::to_string(Peer::kEntropy);
  }
  return {};
}

// ENC-2: a WRITE of kPayload into `m` from each of `ports` in turn, every
// reply added to `all`; empty, or the failure that names the port of the
// first WRITE not acknowledged.
std::string write_from_ports(Peer& p, const Region& m, std::initializer_list<uint16_t> ports,
                             std::vector<Reply>& all) {
  for (const uint16_t port : ports) {
    const uint32_t psn = p.next_psn++;
    std::vector<Reply> rs =
        p.exchange_until(p.write(psn, m.rkey, m.addr, kPayload), acks(psn), 100'000, port);
    if (ack_of(rs, psn) == nullptr) return "no ACK for a WRITE from port " + std::to_string(port);
    append(all, std::move(rs));
  }
  return {};
}

}  // namespace

// ENC-2: a receiver takes packets on its configured port, so a sender
// addresses its peer's: the tester's is Peer::kEntropy, the port the target
// connects to, the one the tester's CONNECT_REQ leaves from with
// reply_port 0 (3.12), and the one it names as reply_port when it leaves
// from another (CONN-3). Packets the tester then sends from other ports
// (its entropy, ENC-3) must not draw answers to those ports: the ACK of
// each leaves from its port (ACK-7) but goes to the configured one, as
// does everything the target sends on a connection it made, whichever
// port the ACCEPT came from. (The default, 4792, a peer cannot see: the
// target is told the tester's port.)
Outcome check_enc2(Target& t) {
  size_t told = 0;
  std::string why;
  {
    Peer p(t);
    std::vector<Reply> all;
    Region r;
    if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteWrite, 4096, &all)) return fail(why);
    why = write_from_ports(p, r, {50001, 50002, 50003}, all);
    if (!why.empty()) return fail(why);
    why = off_port(all, "the tester connected from port 50000, then wrote from 50001-50003", told);
    if (!why.empty()) return fail(why);
  }
  // A CONNECT_REQ from another port that names the tester's in reply_port:
  // the connection's packets go to reply_port, not to the request's port.
  const std::optional<uint16_t> real = t.tester_port(Peer::kEntropy);
  if (real) {
    Peer r(t, 0x7e59);
    r.request_from = 50009;
    r.reply_port = *real;
    std::vector<Reply> all;
    Region m;
    if (!r.connect(0xC0FFEF, why, &all)) return fail(why + " (from port 50009, reply_port set)");
    if (!t.register_memory(4096, kAccessRemoteWrite, m))
      return fail("the target could not register memory");
    why = write_from_ports(r, m, {50009, 50010}, all);
    if (!why.empty()) return fail(why);
    why = off_port(all,
                   "the tester connected from port 50009 naming its port in reply_port (" +
                       std::to_string(*real) + "), then wrote from 50009-50010",
                   told);
    if (!why.empty()) return fail(why);
  }
  Peer q(t, 0x7e58);
  ConnId conn;
  if (!t.connect_to_tester(conn)) return fail("the target could not start a connection");
  std::vector<Reply> all = q.run_until(has(wire::Opcode::kConnectReq), 1000);
  const auto reqs = of(all, wire::Opcode::kConnectReq);
  if (reqs.empty()) return fail("no CONNECT_REQ after connect");
  q.accept(*reqs.front(), 16, 50005);
  if (!target_writes(t, conn, 100, 1, why)) return fail(why);
  std::vector<Reply> rs = q.run_until(has(wire::Opcode::kWrite), 1000);
  const auto writes = of(rs, wire::Opcode::kWrite);
  if (writes.empty()) return fail("the target connected to the tester and sent no WRITE");
  q.send(q.ack(writes.front()->pkt.bh.psn + 1, *writes.front()), 50006);
  append(all, std::move(rs));
  Completion c;
  bool done = false;
  append(all,
         q.run_until([&](const std::vector<Reply>&) { return done = done || t.poll_completion(c); },
                     t.simulated_time() ? 100'000 : 2'000'000));
  if (!done || c.status != Status::kOk)
    return fail("the target's WRITE, acknowledged from port 50006, did not complete kOk");
  why = off_port(all,
                 "the target connected to port 50000, answered from 50005, acknowledged from 50006",
                 told);
  if (!why.empty()) return fail(why);
  if (told == 0) return skip("the target does not tell where its datagrams went");
  if (!real)
    return skip(std::to_string(told) +
                " datagrams, each to the tester's configured port; a CONNECT_REQ naming "
                "reply_port unchecked: the target does not tell the tester's ports as it sees "
                "them");
  return pass(std::to_string(told) + " datagrams, each to the tester's configured port");
}

Outcome check_enc3(Target& t) {
  Peer p(t);
  std::vector<Reply> rs;
  std::string why;
  if (!target_connects_and_writes(t, p, 65536, rs, why)) return fail(why);
  const auto data = of(rs, wire::Opcode::kWrite);
  if (!one_port_per_tag(data, why)) return fail(why);
  if (const auto range = t.entropy_range())
    for (const Reply* d : data)
      if (d->entropy < range->first || d->entropy > range->second)
        return fail("a WRITE left from port " + std::to_string(d->entropy) +
                    ", outside the entropy range " + std::to_string(range->first) + "-" +
                    std::to_string(range->second));
  const auto first = first_per_slot(data);
  std::set<uint16_t> ports;
  for (const auto& [slot, d] : first) ports.insert(d->entropy);
  if (first.size() < 2) return fail("the 64 KiB WRITE used fewer than 2 paths");
  if (ports.size() != first.size()) return fail("two path slots share a source port");
  // The tester's own source port changes mid-connection: still served.
  Region r;
  if (!t.register_memory(4096, kAccessRemoteWrite, r)) return fail("register_memory failed");
  for (uint16_t port : {uint16_t{50001}, uint16_t{50007}}) {
    const uint32_t psn = p.next_psn++;
    if (!acknowledged(p, p.write(psn, r.rkey, r.addr, kPayload), psn, port))
      return fail("no ACK for a WRITE from source port " + std::to_string(port));
  }
  return pass(std::to_string(ports.size()) + " paths, one port each");
}

Outcome check_enc4(Target& t) {
  Peer p(t);
  std::vector<Reply> all;
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteWrite, 4096, &all)) return fail(why);
  const uint32_t psn = p.next_psn++;
  std::vector<Reply> more =
      p.exchange_until(p.write(psn, r.rkey, r.addr, kPayload), acks(psn), 100'000, Peer::kEntropy,
                       /*ce=*/true);
  if (ack_of(more, psn, wire::kAckEchoCe) == nullptr)
    return fail("no ACK with ECHO_CE for a CE-marked WRITE");
  for (const std::vector<Reply>* rs : {&all, &more})
    for (const Reply& x : *rs)
      if (x.ecn != kEcnEct0) return fail("a datagram left with ECN " + std::to_string(x.ecn));
  return pass();
}

// ENC-6, with the reference's defaults: control_dscp 48, data_dscp 0. The
// target acknowledges a WRITE, answers a READ with data (its data class),
// then refuses a WRITE with a key it never gave (a NAK).
Outcome check_enc6(Target& t) {
  Peer p(t);
  std::vector<Reply> all;
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteWrite | kAccessRemoteRead, 4096, &all))
    return fail(why);
  auto keep = [&all](std::vector<Reply> rs) {
    for (Reply& x : rs) all.push_back(std::move(x));
  };
  const uint32_t w = p.next_psn++;
  keep(p.exchange_until(p.write(w, r.rkey, r.addr, kPayload), acks(w)));
  const uint32_t rd = p.next_psn++;
  keep(p.exchange_until(p.read_req(rd, 0, r.rkey, r.addr, 64), has(wire::Opcode::kReadResp)));
  keep(p.exchange_until(p.write(p.next_psn, r.rkey ^ 0x5a5a5a5a00000000ull, r.addr, kPayload),
                        has(wire::Opcode::kNak)));
  size_t control = 0, data = 0;
  for (const Reply& x : all) {
    if (x.error != wire::ParseError::kOk) continue;
    const bool ack = wire::is_acknowledgement(static_cast<uint8_t>(x.pkt.bh.opcode));
    const uint8_t want = ack ? kDefaultControlDscp : 0;
    if (x.dscp != want)
      return fail(std::string(wire::opcode_name(x.pkt.bh.opcode)) + " left with DSCP " +
                  std::to_string(x.dscp) + ", expected " + std::to_string(want));
    ++(ack ? control : data);
  }
  if (of(all, wire::Opcode::kAck).empty() || of(all, wire::Opcode::kNak).empty() ||
      of(all, wire::Opcode::kReadResp).empty())
    return fail("expected an ACK, a NAK and a READ_RESP, saw " + std::to_string(control) +
                " ACK or NAK and " + std::to_string(data) + " other packets");
  return pass();
}

// BAD-* (checks.hpp): the good WRITE must land as if nothing had come
// before it.
Outcome ignored_then_served(Target& t, const std::string& what, const Counted& counted,
                            const std::function<void(Peer&, const Bytes& good)>& send_bad) {
  Peer p(t);
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why)) return fail(why);
  const uint32_t psn = p.next_psn;
  const Bytes good = p.write(psn, r.rkey, r.addr, kPayload);
  const std::optional<EndpointStats> before = drop_counters(t);
  send_bad(p, good);
  if (!drawn(t, p).empty()) return fail(what + " drew a reply");
  if (why = count_missing(t, before, counted, what); !why.empty()) return fail(why);
  if (t.read_memory(r, 0, kPayload.size()) != Bytes(kPayload.size(), 0))
    return fail(what + " wrote memory");
  if (!acknowledged(p, good, psn)) return fail("the good packet was not acknowledged after it");
  if (t.read_memory(r, 0, kPayload.size()) != kPayload) return fail("the good packet did not land");
  return passed_counting(before);
}

// INT-2: receivers accept PC clear, where the ICRC covers the headers only;
// a target that always checks it over the payload too drops this WRITE.
Outcome check_int2(Target& t) {
  Peer p(t);
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why)) return fail(why);
  p.cover_payload = false;
  const uint32_t psn = p.next_psn++;
  if (!acknowledged(p, p.write(psn, r.rkey, r.addr, kPayload), psn))
    return fail("no ACK for a WRITE with PC clear");
  if (t.read_memory(r, 0, kPayload.size()) != kPayload)
    return fail("a WRITE with PC clear did not land");
  return pass();
}

// ENC-5: a target whose datagrams carry no UDP checksum sets PC on every
// data packet, so that its ICRC covers the payload: WRITE (two packets),
// WRITE_IMM, SEND, SEND_IMM, READ_REQ and the READ_RESP of the tester's
// READ. (A NIC that offloads the ICRC with the headers-only setting and
// sends with checksum 0 leaves the payload unprotected end to end.)
Outcome check_enc5(Target& t) {
  const std::optional<bool> sum = t.udp_checksum();
  if (!sum)
    return skip(
        "the target does not tell whether its datagrams carry a UDP checksum (the agent's hello: "
        "\"udp_checksum\")");
  if (*sum) return skip("the target computes the UDP checksum: PC may be clear (INT-2)");
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  Region r;
  if (!t.register_memory(8192, kAccessLocalWrite | kAccessRemoteRead, r))
    return fail("the target could not register memory");
  Bytes fill(8192);
  for (size_t i = 0; i < fill.size(); ++i) fill[i] = static_cast<uint8_t>(i * 13 + 5);
  t.write_memory(r, 0, fill);
  constexpr std::pair<WrOpcode, uint32_t> kWork[] = {{WrOpcode::kWrite, 5000},
                                                     {WrOpcode::kWriteImm, 100},
                                                     {WrOpcode::kSend, 100},
                                                     {WrOpcode::kSendImm, 100},
                                                     {WrOpcode::kRead, 100}};
  uint64_t id = 1;
  for (const auto& [op, len] : kWork)
    if (t.post_send(conn, to_tester(op, r, len, id++)) != Status::kOk)
      return fail("the target refused work request " + std::to_string(id - 1));
  p.send(p.read_req(p.next_psn++, 0, r.rkey, r.addr + 6000, 100));
  std::set<wire::Opcode> seen;
  const auto all_seen = [&](const std::vector<Reply>& rs) {
    for (const Reply& x : rs)
      if (x.error == wire::ParseError::kOk && wire::is_data(x.pkt.bh.opcode))
        seen.insert(x.pkt.bh.opcode);
    return seen.size() == 6;
  };
  const std::vector<Reply> rs = p.run_until(all_seen, 1'000'000);
  for (const Reply& x : rs) {
    const bool data = x.bytes.size() > 1 && wire::is_data(static_cast<wire::Opcode>(x.bytes[1]));
    if (data && x.error != wire::ParseError::kOk)
      return fail(std::string("a data packet (opcode ") + hex32(x.bytes[1]) +
                  ") does not decode: " + wire::parse_error_name(x.error));
    if (!data || (x.pkt.bh.flags & wire::kFlagPayloadCovered) != 0) continue;
    return fail(std::string("a ") + wire::opcode_name(x.pkt.bh.opcode) + " (PSN " +
                hex32(x.pkt.bh.psn) + ", " + std::to_string(x.pkt.payload.size()) +
                " bytes) has PC clear, with the UDP checksum off");
  }
  if (seen.size() < 6)
    return fail("only " + std::to_string(seen.size()) +
                " of the 6 data opcodes came (WRITE, WRITE_IMM, SEND, SEND_IMM, READ_REQ, "
                "READ_RESP)");
  return pass();
}

Outcome check_bad7(Target& t) {
  return ignored_then_served(t, "a packet for an unknown dst_conn",
                             {&EndpointStats::unknown_connection, "unknown_connection", 1},
                             [](Peer& p, const Bytes& good) {
                               p.send(Peer::with_dst_conn(good, p.target_conn ^ 0x5a5a00));
                             });
}

}  // namespace metaroce::conformance
