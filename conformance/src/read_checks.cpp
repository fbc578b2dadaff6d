// READ-1 to READ-5: READs in both directions.
#include <algorithm>
#include <map>
#include <set>

#include "checks.hpp"

namespace metaroce::conformance {
namespace {

// The target posts a READ of `len` bytes from the tester into `into`.
bool target_reads(Target& t, ConnId conn, const Region& into, uint32_t len, uint64_t wr_id) {
  return t.post_send(conn, to_tester(WrOpcode::kRead, into, len, wr_id)) == Status::kOk;
}

// A wait's condition: `n` distinct READ_REQs (by PSN) came.
auto read_reqs(size_t n) {
  return [n](const std::vector<Reply>& rs) {
    return firsts(of(rs, wire::Opcode::kReadReq)).size() >= n;
  };
}

// The target registers `into` (`size` bytes, LOCAL_WRITE), connects to the
// tester (`conn`, when given, its side of it) and READs `len` bytes into it
// (`wr_id`); `rs` is what it sent until a READ_REQ came. Empty, else why
// not.
std::string target_reads_from_tester(Target& t, Peer& p, Region& into, uint64_t size, uint32_t len,
                                     uint64_t wr_id, std::vector<Reply>& rs,
                                     ConnId* conn_out = nullptr) {
  if (!t.register_memory(size, kAccessLocalWrite, into)) return "register_memory failed";
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return why;
  if (conn_out != nullptr) *conn_out = conn;
  if (!target_reads(t, conn, into, len, wr_id)) return "the target refused a READ";
  rs = p.run_until(read_reqs(1));
  return {};
}

// READ-1: what is wrong in READ_REQ `k` of the `n`th READ (read sequence
// n, from 0) of `len` bytes from the tester's kTesterAddr, the READ_REQ
// the target sends at PSN `psn`; empty if nothing.
std::string read_req_wrong(const wire::Packet& k, uint32_t n, uint32_t psn, uint32_t len) {
  const std::string which = n == 0 ? "the first READ's READ_REQ" : "the second READ's READ_REQ";
  if (k.bh.psn != psn) return which + " has PSN " + hex32(k.bh.psn) + ", not " + hex32(psn);
  if (k.mh.msn != n || k.mh.offset != 0 || k.mh.msg_len != len || !k.payload.empty())
    return which + ": msn/offset/msg_len/payload " + std::to_string(k.mh.msn) + "/" +
           std::to_string(k.mh.offset) + "/" + std::to_string(k.mh.msg_len) + "/" +
           std::to_string(k.payload.size()) + ", not " + std::to_string(n) + "/0/" +
           std::to_string(len) + "/0";
  if (k.rh.rkey != kTesterRkey || k.rh.raddr != kTesterAddr)
    return which + ": rkey or raddr wrong (" + hex32(k.rh.rkey) + ", " + hex32(k.rh.raddr) + ")";
  return {};
}

// The tester connects to the target, which registers `src` (REMOTE_READ)
// holding `data`; false and why if not.
bool tester_connects_to_read(Target& t, Peer& p, Region& src, const Bytes& data, std::string& why) {
  if (!tester_connects_to_memory(t, p, src, why, kAccessRemoteRead, data.size())) return false;
  t.write_memory(src, 0, data);
  return true;
}

}  // namespace

// READ-1: a READ's one READ_REQ carries its read sequence (0, then 1),
// the tester's key and address, offset 0, the length and no payload, at
// the target's next PSN: a requester that numbered every READ 0 passed
// while only one was asked.
Outcome check_read1(Target& t) {
  Peer p(t);
  Region into;
  std::vector<Reply> rs;
  ConnId conn;
  if (const std::string why = target_reads_from_tester(t, p, into, 10000, 10000, 5, rs, &conn);
      !why.empty())
    return fail(why);
  const auto reqs = firsts(of(rs, wire::Opcode::kReadReq));
  if (reqs.size() != 1) return fail("expected one READ_REQ, saw " + std::to_string(reqs.size()));
  const wire::Packet& k = reqs.front()->pkt;
  if (std::string why = read_req_wrong(k, 0, p.target_initial_psn, 10000); !why.empty())
    return fail(why);
  // Acknowledge it and answer in the tester's PSN space (READ-2).
  p.send(p.ack(k.bh.psn + 1, *reqs.front()), reqs.front()->entropy);
  const Bytes data = counting(10000, 3);
  for (uint32_t off = 0; off < data.size(); off += 4096) {
    const uint32_t n = std::min<uint32_t>(4096, static_cast<uint32_t>(data.size()) - off);
    p.send(p.read_resp(p.next_psn++, 0, off, 10000, {data.data() + off, n}));
  }
  Completion c;
  if (!p.await_completion(c)) return fail("the READ did not complete");
  if (c.status != Status::kOk || c.wr_id != 5) return fail("the READ completed with an error");
  if (t.read_memory(into, 0, data.size()) != data) return fail("the response was not placed");
  // The second READ: read sequence 1, the next PSN.
  const uint32_t first = k.bh.psn;
  if (!target_reads(t, conn, into, 100, 6)) return fail("the target refused a second READ");
  const auto second = [first](const std::vector<Reply>& got) -> const Reply* {
    for (const Reply* r : of(got, wire::Opcode::kReadReq))
      if (r->pkt.bh.psn != first) return r;  // not a late copy of the first
    return nullptr;
  };
  const std::vector<Reply> more =
      p.run_until([&](const std::vector<Reply>& got) { return second(got) != nullptr; });
  const Reply* k2 = second(more);
  if (k2 == nullptr) return fail("no READ_REQ for a second READ");
  if (std::string why = read_req_wrong(k2->pkt, 1, first + 1, 100); !why.empty()) return fail(why);
  p.send(p.ack(first + 2, *k2), k2->entropy);
  const Bytes again = counting(100, 77);
  p.send(p.read_resp(p.next_psn++, 1, 0, 100, again));
  if (!p.await_completion(c) || c.status != Status::kOk || c.wr_id != 6)
    return fail("the second READ did not complete kOk");
  if (t.read_memory(into, 0, again.size()) != again)
    return fail("the second READ's response was not placed");
  return pass();
}

Outcome check_read2(Target& t) {
  Peer p(t);
  Region src;
  std::string why;
  const Bytes data = counting(8192, 17);
  if (!tester_connects_to_read(t, p, src, data, why)) return fail(why);
  // A good READ of 6000 bytes from offset 100: ceil(6000 / mtu) READ_RESPs
  // numbered from the responder's own initial PSN (it sent nothing before).
  constexpr uint32_t kAt = 100, kLen = 6000;
  const uint32_t psn = p.next_psn++;
  const size_t want = (kLen + p.mtu - 1) / p.mtu;
  const std::vector<Reply> rs = p.exchange_until(
      p.read_req(psn, 0, src.rkey, src.addr + kAt, kLen), [want](const std::vector<Reply>& got) {
        return firsts(of(got, wire::Opcode::kReadResp)).size() >= want;
      });
  auto resp = firsts(of(rs, wire::Opcode::kReadResp));
  if (resp.size() != want)
    return fail(std::to_string(resp.size()) + " READ_RESPs for " + std::to_string(kLen) +
                " bytes at mtu " + std::to_string(p.mtu) + ", not " + std::to_string(want));
  std::sort(resp.begin(), resp.end(), [&p](const Reply* a, const Reply* b) {
    return a->pkt.bh.psn - p.target_initial_psn < b->pkt.bh.psn - p.target_initial_psn;
  });
  for (size_t k = 0; k < resp.size(); ++k) {
    const wire::Packet& r = resp[k]->pkt;
    const uint32_t off = static_cast<uint32_t>(k) * p.mtu;
    if (r.bh.psn != p.target_initial_psn + k)
      return fail("READ_RESP " + std::to_string(k) + " has PSN " + hex32(r.bh.psn) +
                  ", not the responder's " + hex32(p.target_initial_psn + k) +
                  " (the READ_REQ was " + hex32(psn) + ")");
    if (r.mh.msn != 0 || r.mh.offset != off || r.mh.msg_len != kLen)
      return fail("READ_RESP " + std::to_string(k) + " msn/offset/msg_len " +
                  std::to_string(r.mh.msn) + "/" + std::to_string(r.mh.offset) + "/" +
                  std::to_string(r.mh.msg_len));
    const auto from = data.begin() + kAt + off;
    if (!std::equal(r.payload.begin(), r.payload.end(), from,
                    from + std::min<uint32_t>(p.mtu, kLen - off)))
      return fail("READ_RESP " + std::to_string(k) + " does not carry the region's bytes");
  }
  p.send(p.ack(p.target_initial_psn + static_cast<uint32_t>(want), *resp.back()),
         resp.back()->entropy);
  // Each bad request, on a connection of its own (the NAK is fatal), draws
  // the NAK naming it and reads nothing.
  const auto bad_read = [](uint64_t rkey, uint64_t raddr, uint32_t len) {
    return [=](const Peer& q) { return q.read_req(q.next_psn, 0, rkey, raddr, len); };
  };
  Outcome o = expect_nak(t, 0x7e71, src, 0x02, bad_read(src.rkey ^ 1, src.addr, 64));
  if (!o.passed) return fail("bad key: " + o.detail);
  o = expect_nak(t, 0x7e72, src, 0x03, bad_read(src.rkey, src.addr + 8192 - 10, 64));
  if (!o.passed) return fail("range past the region: " + o.detail);
  Region wo;
  if (!t.register_memory(4096, kAccessRemoteWrite, wo)) return fail("register_memory failed");
  o = expect_nak(t, 0x7e73, wo, 0x04, bad_read(wo.rkey, wo.addr, 64));
  if (!o.passed) return fail("no REMOTE_READ right: " + o.detail);
  o = expect_nak(t, 0x7e74, src, 0x06, bad_read(src.rkey, src.addr, 0x80000001u));
  if (!o.passed) return fail("msg_len above 2^31: " + o.detail);
  return pass();
}

// PLACE-4 from the requester's side: a READ_RESP longer than the READ, for
// a read sequence not outstanding, or not the READ's segment (no bytes at
// offset = msg_len, or a piece at an offset no segment starts at), is
// dropped unacknowledged with nothing written; the true response, at the
// same PSN, then lands.
Outcome check_place4(Target& t) {
  Peer p(t);
  Region into;
  constexpr uint32_t kLen = 100;
  std::vector<Reply> rs;
  if (const std::string why = target_reads_from_tester(t, p, into, 2 * kLen, kLen, 7, rs);
      !why.empty())
    return fail(why);
  const auto reqs = firsts(of(rs, wire::Opcode::kReadReq));
  if (reqs.empty()) return fail("no READ_REQ");
  p.send(p.ack(reqs.front()->pkt.bh.psn + 1, *reqs.front()), reqs.front()->entropy);
  const uint32_t psn = p.next_psn++;
  const std::pair<const char*, Bytes> bad[] = {
      {"a READ_RESP of 200 bytes for a READ of 100",
       p.read_resp(psn, 0, 0, 2 * kLen, Bytes(2 * kLen, 0xEE))},
      {"a READ_RESP for read sequence 1, not outstanding",
       p.read_resp(psn, 1, 0, kLen, Bytes(kLen, 0xEF))},
      // Not the segment its PSN stands for (offset 0, the READ's one): each
      // passes TRIM-5, and taken, would complete the READ with bytes never
      // written.
      {"a READ_RESP of no bytes at offset 100, its msg_len (not its segment)",
       p.read_resp(psn, 0, kLen, kLen, {})},
      {"a READ_RESP of the last 50 bytes at offset 50 (not its segment)",
       p.read_resp(psn, 0, kLen / 2, kLen, Bytes(kLen / 2, 0xED))}};
  for (const auto& [what, packet] : bad) {
    const std::vector<Reply> got = drawn(t, p, packet, 1'000'000);
    if (ack_of(got, psn) != nullptr) return fail(std::string(what) + " was acknowledged");
    if (t.read_memory(into, 0, into.length) != Bytes(into.length, 0))
      return fail(std::string(what) + " was written");
    Completion c;
    if (t.poll_completion(c))
      return fail(std::string(what) + " completed the READ with " + code_text(c.status));
  }
  const Bytes data = counting(kLen, 9);
  if (!acknowledged(p, p.read_resp(psn, 0, 0, kLen, data), psn))
    return fail("the true READ_RESP, at the PSN of the dropped ones, was not acknowledged");
  Completion c;
  if (!p.await_completion(c) || c.wr_id != 7 || c.status != Status::kOk)
    return fail("the READ did not complete");
  if (t.read_memory(into, 0, kLen) != data || t.read_memory(into, kLen, kLen) != Bytes(kLen, 0))
    return fail("the READ's buffer does not hold the response, and only it");
  return pass();
}

namespace {

// The first copy of each READ_REQ among `rs` on the tester's connection
// `conn` (another connection of the check may still be resending its own).
std::vector<const Reply*> read_reqs_to(const std::vector<Reply>& rs, uint32_t conn) {
  std::vector<const Reply*> out;
  for (const Reply* r : of(rs, wire::Opcode::kReadReq))
    if (r->pkt.bh.dst_conn == conn) out.push_back(r);
  return firsts(out);
}

// READ-3 on a fresh connection to a tester that advertises `max_reads`
// (0 or 1: 3.12 takes 0 as 1): of three READs posted, one READ_REQ leaves,
// and the next only once the first one's response has arrived. Empty if
// so, else what went wrong.
std::string one_read_at_a_time(Target& t, uint8_t max_reads, uint32_t conn_id) {
  const std::string against =
      " against max_reads " + std::to_string(max_reads) + (max_reads == 0 ? " (taken as 1)" : "");
  Peer p(t, conn_id);
  Region into;
  if (!t.register_memory(300, kAccessLocalWrite, into)) return "register_memory failed";
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why, max_reads)) return why;
  for (uint64_t i = 0; i < 3; ++i) {
    Region part{into.addr + i * 100, 100, into.rkey, into.lkey};
    if (!target_reads(t, conn, part, 100, i)) return "the target refused a READ";
  }
  const auto reqs_at_least = [&p](size_t n) {
    return [n, &p](const std::vector<Reply>& rs) { return read_reqs_to(rs, p.conn()).size() >= n; };
  };
  // Waits for the first; the others, held back by max_reads, must not follow.
  const std::vector<Reply> rs = p.run_until(reqs_at_least(1));
  const auto reqs = read_reqs_to(rs, p.conn());
  if (reqs.size() != 1) return std::to_string(reqs.size()) + " READ_REQs outstanding" + against;
  // Answer it: the next one may go.
  const uint32_t first_psn = reqs.front()->pkt.bh.psn;
  p.send(p.ack(first_psn + 1, *reqs.front()), reqs.front()->entropy);
  p.send(p.read_resp(p.next_psn++, 0, 0, 100, Bytes(100, 0x31)));
  const auto count_fresh = [&](const std::vector<Reply>& got) {
    size_t n = 0;  // READ_REQs other than the first (its resends do not count)
    for (const Reply* r : read_reqs_to(got, p.conn())) n += r->pkt.bh.psn != first_psn;
    return n;
  };
  const size_t fresh =
      count_fresh(p.run_until([&](const std::vector<Reply>& got) { return count_fresh(got) > 0; }));
  if (fresh != 1)
    return std::to_string(fresh) + " READ_REQs after the first one's response" + against +
           ", not 1";
  return {};
}

}  // namespace

// READ-3: the target never has more READs outstanding than the tester's
// max_reads, 1 and then 0, which a receiver takes as 1 (3.12: an endpoint
// serves at least one): a requester that took 0 as no limit sent all three
// at once, and one that took it literally would never READ.
Outcome check_read3(Target& t) {
  for (const uint8_t max_reads : {uint8_t{1}, uint8_t{0}})
    if (std::string why = one_read_at_a_time(t, max_reads, 0x7e57 + max_reads); !why.empty())
      return fail(why);
  return pass();
}

// READ-3, the responder: it queues up to 4 x its own max_reads (its
// ACCEPT's) READ_REQs, and one that finds the queue full while max_reads of
// them have not had every packet of their response sent draws NAK 0x06.
// Each READ is of 64 KiB, 16 packets at the tester's mtu (4096; more at a
// smaller one), so the target's initial window (CC-1, 16 packets) sends at
// most one READ's response whole while the tester acknowledges nothing: of
// the 4 x max_reads queued, max_reads and more stay unsent, and the next
// READ_REQ is beyond the limit. (The other half, RNR for a queue of READs all answered, is left
// to the engine test AFullReadQueueOfAnsweredReadsDoesNotFailTheRequester.)
Outcome check_read3_responder(Target& t) {
  constexpr uint32_t kLen = 16 * 4096;
  Peer p(t);
  Region src;
  std::string why;
  std::vector<Reply> handshake;
  if (!tester_connects_to_memory(t, p, src, why, kAccessRemoteRead, kLen, &handshake))
    return fail(why);
  const auto accepts = of(handshake, wire::Opcode::kConnectAccept);
  if (accepts.empty()) return fail("no CONNECT_ACCEPT among the handshake's replies");
  const uint32_t max_reads = std::max<uint32_t>(accepts.front()->pkt.connect.max_reads, 1);
  for (uint32_t i = 0; i < 4 * max_reads; ++i)
    p.send(p.read_req(p.next_psn++, i, src.rkey, src.addr, kLen));
  const uint32_t psn = p.next_psn++;
  const Bytes beyond = p.read_req(psn, 4 * max_reads, src.rkey, src.addr, kLen);
  if (const std::string nak =
          draws_nak(p, beyond, static_cast<uint8_t>(Status::kRemoteInvalidRequest), psn);
      !nak.empty())
    return fail("READ_REQ " + std::to_string(4 * max_reads + 1) + " of " + std::to_string(kLen) +
                " bytes, its ACCEPT's max_reads " + std::to_string(max_reads) +
                " and no response acknowledged, " + nak);
  return pass("max_reads " + std::to_string(max_reads));
}

Outcome check_read4(Target& t) {
  Peer p(t);
  Region src;
  std::string why;
  const Bytes data = counting(8000, 11);
  if (!tester_connects_to_read(t, p, src, data, why)) return fail(why);
  const uint32_t psn = p.next_psn++;
  const Bytes rq = p.read_req(psn, 0, src.rkey, src.addr, 8000);
  const std::vector<Reply> first = p.exchange_until(rq, [](const std::vector<Reply>& rs) {
    return firsts(of(rs, wire::Opcode::kReadResp)).size() >= 2;
  });
  const auto resp = firsts(of(first, wire::Opcode::kReadResp));
  if (resp.size() != 2) return fail("expected 2 READ_RESPs, saw " + std::to_string(resp.size()));
  uint32_t last = resp.front()->pkt.bh.psn;
  for (const Reply* r : resp) last = later_psn(last, r->pkt.bh.psn);
  for (const Reply* r : resp) p.send(p.ack(last + 1, *r), r->entropy);
  (void)p.run(100'000);
  const std::vector<Reply> again = p.exchange_until(rq, acks(psn, wire::kAckEchoDup), 200'000);
  // Resends of the first response may still come; a second response would
  // take new PSNs.
  for (const Reply* r : of(again, wire::Opcode::kReadResp))
    if (psn_after(r->pkt.bh.psn, last)) return fail("a duplicate READ_REQ was answered again");
  if (ack_of(again, psn, wire::kAckEchoDup) == nullptr)
    return fail("the duplicate READ_REQ drew no ECHO_DUP ACK");
  return pass();
}

namespace {

// READ-5's set-up: a WRITE of `data` (64 bytes) into `dst` held back, the
// READ_REQ after it, of 64 bytes of `src`, sent alone.
struct HeldRead {
  Bytes write;               // the WRITE, to send later
  uint32_t rd = 0;           // the READ_REQ's PSN
  std::vector<Reply> early;  // what the READ_REQ drew
  std::string why;           // a failure: the READ was answered meanwhile
};
HeldRead read_behind_held_write(Target& t, Peer& p, const Region& dst, const Region& src,
                                const Bytes& data) {
  HeldRead h;
  const uint32_t w = p.next_psn++;
  h.rd = p.next_psn++;
  h.write = p.write(w, dst.rkey, dst.addr, data);
  h.early = drawn(t, p, p.read_req(h.rd, 0, src.rkey, src.addr, 64));
  if (!of(h.early, wire::Opcode::kReadResp).empty())
    h.why = "a READ was answered while an earlier WRITE was missing";
  return h;
}

}  // namespace

Outcome check_read5(Target& t) {
  Peer p(t);
  Region mem;
  std::string why;
  if (!tester_connects_to_memory(t, p, mem, why, kAccessRemoteWrite | kAccessRemoteRead))
    return fail(why);
  const Bytes data(64, 0x5c);
  // The WRITE is held back; the READ of the same bytes arrives first.
  const HeldRead h = read_behind_held_write(t, p, mem, mem, data);
  if (!h.why.empty()) return fail(h.why);
  const std::vector<Reply> late = p.exchange_until(h.write, has(wire::Opcode::kReadResp));
  const auto resp = of(late, wire::Opcode::kReadResp);
  if (resp.empty()) return fail("no READ_RESP once the WRITE arrived");
  const auto& payload = resp.front()->pkt.payload;
  if (!std::equal(payload.begin(), payload.end(), data.begin(), data.end()))
    return fail("the READ_RESP does not carry the WRITE's data");
  return pass();
}

// MR-5 with READ-5: a READ_REQ whose key was good when it arrived, kept
// waiting by a WRITE held back before it, and its source region
// deregistered meanwhile. It was accepted, so its region's going is the
// responder's fault, as for a READ being answered: once the WRITE arrives
// (and lands), no READ_RESP leaves and NAK 0x07 names the READ_REQ, `msn`
// its read sequence; not NAK 0x02, which a READ_REQ naming a key gone when
// it arrives draws.
Outcome check_mr5_waiting_read(Target& t) {
  Peer p(t);
  Region mem, src;
  std::string why;
  if (!tester_connects_to_memory(t, p, mem, why)) return fail(why);
  if (!t.register_memory(4096, kAccessRemoteRead, src))
    return fail("the target could not register memory");
  const Bytes data(64, 0x5d);
  const HeldRead h = read_behind_held_write(t, p, mem, src, data);
  if (!h.why.empty()) return fail(h.why);
  if (const Reply* n = nak_of(h.early))
    return fail("the READ_REQ, its key good, drew NAK " + code_text(n->pkt.nak.code) +
                " while it waited");
  if (!t.deregister_memory(src)) return fail("the target could not deregister the READ's source");
  std::vector<Reply> seen;
  if (why = draws_nak(p, h.write, static_cast<uint8_t>(Status::kRemoteOperationError), h.rd, 0,
                      &seen);
      !why.empty())
    return fail("the WRITE the READ waited for, its source deregistered meanwhile, " + why);
  if (!of(seen, wire::Opcode::kReadResp).empty())
    return fail("a READ_RESP left from a region deregistered before the READ was served");
  if (t.read_memory(mem, 0, data.size()) != data)
    return fail("the WRITE before the READ_REQ did not land");
  return pass();
}

// SCHED-4: the READ responses the target owes and its own work share its
// PSN space by turns. Its window is held full (cum held at its 64-packet
// WRITE's first PSN, the rest SACKed, as in SEQ-3) while the tester asks k
// READs of it (k: its max_reads, at most 4) and its application posts k
// READs of its own: when the window opens, both queues have k one-packet
// messages ready. The WRITE started the last message, so a response starts
// the next, and they alternate: with responses first, a peer that keeps
// READs outstanding would hold the responder's own work back as long as it
// liked; with the send queue first, the reverse.
Outcome check_sched4(Target& t) {
  Peer p(t);
  p.window_log2 = 6;
  p.mtu = 1024;
  Region r;
  std::string why;
  std::vector<Reply> handshake;
  if (!tester_connects_to_memory(t, p, r, why, kAccessLocalWrite | kAccessRemoteRead, 4096,
                                 &handshake))
    return fail(why);
  const auto accepts = of(handshake, wire::Opcode::kConnectAccept);
  const uint32_t k =
      std::clamp<uint32_t>(accepts.empty() ? 1 : accepts.front()->pkt.connect.max_reads, 1, 4);
  const ConnId conn = t.accepted();
  if (!conn.valid()) return fail("the target reports no accepted connection");
  const uint32_t window = 1u << p.window_log2;
  if (!target_writes(t, conn, window * p.mtu, 1, why)) return fail(why);
  const uint32_t cum = p.target_initial_psn;
  std::set<uint32_t> got;  // distance from cum
  Reply echo;              // the latest WRITE packet: the ACKs echo it
  // Reads and responses are not due yet: one sent with the window full
  // breaks SEQ-3, and leaves this check nothing to judge.
  const auto early = [&](const std::vector<Reply>& rs) -> std::string {
    for (const wire::Opcode op : {wire::Opcode::kReadReq, wire::Opcode::kReadResp})
      if (!of(rs, op).empty())
        return std::string("a ") + wire::opcode_name(op) + " left with the window full (cum " +
               hex32(cum) + " held, W = " + std::to_string(window) + ")";
    return {};
  };
  if (std::string why_not = window_held_full(t, p, cum, got, &echo, " (SEQ-3)", early);
      !why_not.empty())
    return fail(why_not);
  for (uint32_t i = 0; i < k; ++i) {
    SendWr wr = to_tester(WrOpcode::kRead, r, 64, 10 + i);
    wr.local_addr = r.addr + 2048 + 128 * i;
    wr.remote_addr = kTesterAddr + 128 * i;
    if (t.post_send(conn, wr) != Status::kOk) return fail("the target refused a READ");
    p.send(p.read_req(p.next_psn++, i, r.rkey, r.addr + 128 * i, 64));
  }
  {
    const std::vector<Reply> rs = p.run(t.simulated_time() ? 50'000 : 20'000'000);
    if (std::string e = early(rs); !e.empty()) return fail(e);
    sack_all_but_cum(p, cum, got, nullptr, rs);
  }
  // The window opens: everything acknowledged.
  p.send(p.ack(cum + window, echo), echo.entropy);
  std::map<uint32_t, wire::Opcode> order;  // the new messages by distance from cum + W
  const auto gather = [&](const std::vector<Reply>& rs) {
    for (const wire::Opcode op : {wire::Opcode::kReadReq, wire::Opcode::kReadResp})
      for (const Reply* d : of(rs, op))
        if (d->pkt.bh.psn - (cum + window) < 1024)
          order.emplace(d->pkt.bh.psn - (cum + window), op);
    return order.size() >= 2 * k;
  };
  (void)p.run_until(gather, t.simulated_time() ? 200'000 : 2'000'000);
  std::string seq;
  size_t reqs = 0, resps = 0;
  for (const auto& [at, op] : order) {
    seq += (seq.empty() ? "" : ", ") + std::string(op == wire::Opcode::kReadReq ? "REQ" : "RESP");
    (op == wire::Opcode::kReadReq ? reqs : resps) += 1;
  }
  const std::string ready = "with " + std::to_string(k) + " READ responses and " +
                            std::to_string(k) + " READs of its own ready when its window opened";
  // Judged over the PSNs from cum + W on without a gap, before the counts:
  // a kind that went first shows in the first few.
  wire::Opcode prev = wire::Opcode::kWrite;  // the WRITE started the last message
  uint32_t next = 0;
  for (const auto& [at, op] : order) {
    if (at != next++ || at == 2 * k) break;
    const bool turn = prev == wire::Opcode::kReadResp ? op == wire::Opcode::kReadReq
                                                      : op == wire::Opcode::kReadResp;
    if (!turn)
      return fail("the READ responses and the target's own READs did not take turns " + ready +
                  ": PSN order " + seq +
                  " (the WRITE went last, so a response first, then by turns)");
    prev = op;
  }
  if (reqs < k || resps < k)
    return fail("only " + std::to_string(resps) + " READ_RESPs and " + std::to_string(reqs) +
                " READ_REQs came " + ready + " (" + seq + ")");
  return pass();
}

}  // namespace metaroce::conformance
