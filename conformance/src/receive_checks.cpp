// PLACE-3 and PLACE-5: SEND, SEND_IMM and WRITE_IMM into the receive
// buffers the target's application posted, by RSN, whatever order they
// arrive in; duplicates placed nowhere; MR-5, buffers gone. COMP-1 and COMP-2: when work
// completes, and in what order; COMP-3: a receive waits for the data sent before it.
#include <map>
#include <optional>
#include <set>

#include "checks.hpp"

namespace metaroce::conformance {

Outcome check_place3(Target& t) {
  Peer p(t);
  Region mem;
  std::string why;
  ConnId conn;
  if (!tester_connects_for_receives(t, p, mem, conn, why, kAccessLocalWrite | kAccessRemoteWrite))
    return fail(why);
  // Receive buffers 0-3 (RSN = the order posted): 100 bytes at 0, 100, 200
  // and 16 at 300.
  struct Buf {
    uint64_t wr_id, at;
    uint32_t len;
  };
  constexpr Buf kBufs[] = {{10, 0, 100}, {11, 100, 100}, {12, 200, 100}, {13, 300, 16}};
  for (const Buf& b : kBufs)
    if (t.post_recv(conn, RecvWr{b.wr_id, mem.addr + b.at, b.len, mem.lkey}) != Status::kOk)
      return fail("the target refused a receive buffer");
  const Bytes a(60, 0xA0), b(80, 0xB1), c(40, 0xC2);
  const uint32_t psn0 = p.next_psn++, psn1 = p.next_psn++, psn2 = p.next_psn++;
  constexpr uint32_t kImm1 = 0x1234abcd, kImm2 = 0xfeedf00d;
  constexpr uint64_t kRaddr = 1000;
  // RSN 1 (a SEND_IMM) arrives before RSN 0 (a SEND); RSN 2 is a WRITE_IMM.
  const std::pair<uint32_t, Bytes> sends[] = {
      {psn1, p.message(wire::Opcode::kSendImm, psn1, 1, b, 0, 0, kImm1)},
      {psn0, p.message(wire::Opcode::kSend, psn0, 0, a)},
      {psn2, p.message(wire::Opcode::kWriteImm, psn2, 2, c, mem.rkey, mem.addr + kRaddr, kImm2)}};
  for (const auto& [psn, packet] : sends)
    if (!acknowledged(p, packet, psn)) return fail("no ACK for PSN " + hex32(psn));
  const auto placed = [&](uint64_t at, const Bytes& want) {
    return t.read_memory(mem, at, want.size()) == want;
  };
  if (!placed(0, a) || !placed(60, Bytes(40, 0)))
    return fail("RSN 0's SEND did not land (alone) in receive buffer 0");
  if (!placed(100, b) || !placed(180, Bytes(20, 0)))
    return fail("RSN 1's SEND_IMM, arrived first, did not land (alone) in receive buffer 1");
  if (!placed(kRaddr, c)) return fail("RSN 2's WRITE_IMM did not land at its raddr");
  if (!placed(200, Bytes(100, 0))) return fail("RSN 2's WRITE_IMM wrote into receive buffer 2");
  std::map<uint64_t, Completion> done;
  Completion k;
  while (done.size() < 3 && p.await_completion(k)) done.emplace(k.wr_id, k);
  const auto is = [&done](uint64_t id, CompletionOp op, uint32_t len, bool has_imm, uint32_t imm) {
    const auto it = done.find(id);
    if (it == done.end()) return false;
    const Completion& x = it->second;
    return x.status == Status::kOk && x.op == op && x.byte_len == len && x.has_imm == has_imm &&
           (!has_imm || x.imm == imm);
  };
  if (!is(10, CompletionOp::kRecv, 60, false, 0))
    return fail("receive 0 did not complete kRecv, 60 bytes, no immediate");
  if (!is(11, CompletionOp::kRecv, 80, true, kImm1))
    return fail("receive 1 did not complete kRecv, 80 bytes, immediate " + hex32(kImm1));
  if (!is(12, CompletionOp::kRecvWriteImm, 40, true, kImm2))
    return fail("receive 2 did not complete kRecvWriteImm, 40 bytes, immediate " + hex32(kImm2));
  // RSN 3's buffer holds 16 bytes: a SEND of 17 draws NAK 0x05 and writes
  // nothing.
  const uint32_t psn3 = p.next_psn++;
  why = draws_nak(p, p.message(wire::Opcode::kSend, psn3, 3, Bytes(17, 0xDD)), 0x05, psn3);
  if (!why.empty()) return fail("a SEND longer than its receive buffer " + why);
  if (!placed(300, Bytes(17, 0))) return fail("a SEND longer than its receive buffer was written");
  return pass();
}

// PLACE-6, where the target offers a shared receive queue: SENDs of two
// connections land in its receives, oldest first, and each completion
// names its connection; a SEND of RSN n+1 arriving before RSN n takes two
// receives, RSN n the older; with the queue empty a SEND draws RNR, and
// its retry takes a receive posted since; a connection closed while it
// holds two (one filled by a message after a gap) completes neither and
// gives them back, so the other connection's next SEND takes the older.
Outcome check_place6(Target& t) {
  if (!t.shared_receives(8))
    return skip(
        "the target offers no shared receive queue, or cannot be set to one (the agent's "
        "shared_receives)");
  Region mem;
  if (!t.register_memory(4096, kAccessLocalWrite, mem))
    return fail("the target could not register memory");
  // Shared receive i: 256 bytes at 256 i, wr_id 100 + i.
  const auto post = [&](uint32_t i) {
    return t.post_shared_recv(RecvWr{100 + i, mem.addr + 256 * i, 256, mem.lkey}) == Status::kOk;
  };
  for (uint32_t i = 0; i < 4; ++i)
    if (!post(i)) return fail("the target refused a shared receive");
  Peer a(t, 0x7e57), b(t, 0x7e58);
  std::string why;
  if (!a.connect(0xA6, why)) return fail(why);
  const ConnId ca = t.accepted();
  if (!b.connect(0xB6, why)) return fail(why);
  const ConnId cb = t.accepted();
  if (!ca.valid() || !cb.valid() || ca == cb)
    return fail("the target reports no two accepted connections");
  const auto name = [&](ConnId c) {
    return std::to_string(c.v) + (c == ca ? " (the first)" : c == cb ? " (the second)" : "");
  };
  // RSN `rsn` of `q`, 100 bytes of `fill`, at `psn`: empty once acknowledged.
  const auto send = [](Peer& q, uint32_t psn, uint32_t rsn, uint8_t fill) -> std::string {
    if (!acknowledged(q, q.message(wire::Opcode::kSend, psn, rsn, Bytes(100, fill)), psn))
      return "no ACK for RSN " + std::to_string(rsn) + "'s SEND";
    return {};
  };
  // The next completion is shared receive `i`'s, on `conn`, holding `fill`.
  const auto completes = [&](uint32_t i, ConnId conn, uint8_t fill) -> std::string {
    Completion c;
    const std::string want = "shared receive " + std::to_string(i) + " on connection " + name(conn);
    if (!a.await_completion(c)) return "no completion (expected " + want + ")";
    if (c.wr_id != 100 + i || c.conn != conn || c.status != Status::kOk || c.byte_len != 100)
      return "completed receive wr_id " + std::to_string(c.wr_id) + " on connection " +
             name(c.conn) + ", " + code_text(c.status) + ", " + std::to_string(c.byte_len) +
             " bytes; expected " + want + ", kOk, 100 bytes";
    if (t.read_memory(mem, 256 * i, 100) != Bytes(100, fill)) return "was not placed in " + want;
    return {};
  };
  const auto step = [](const std::string& what, const std::string& w) {
    return w.empty() ? w : what + ": " + w;
  };
  // Two connections' first SENDs take receives 0 and 1.
  why = step("the first connection's SEND", send(a, a.next_psn++, 0, 0xA0));
  if (why.empty()) why = step("the first connection's SEND", completes(0, ca, 0xA0));
  if (why.empty()) why = step("the second connection's SEND", send(b, b.next_psn++, 0, 0xB0));
  if (why.empty()) why = step("the second connection's SEND", completes(1, cb, 0xB0));
  if (!why.empty()) return fail(why);
  // RSN 2 before RSN 1: receive 2 is RSN 1's, receive 3 RSN 2's.
  const uint32_t a1 = a.next_psn++, a2 = a.next_psn++;
  why = step("RSN 2, arrived before RSN 1", send(a, a2, 2, 0xA2));
  if (why.empty()) why = step("RSN 1, arrived after RSN 2", send(a, a1, 1, 0xA1));
  if (why.empty()) why = step("RSN 1, arrived after RSN 2", completes(2, ca, 0xA1));
  if (why.empty()) why = step("RSN 2, arrived before RSN 1", completes(3, ca, 0xA2));
  if (!why.empty()) return fail(why);
  // The queue empty: RNR; the retry takes receive 4, posted since.
  const uint32_t a3 = a.next_psn++;
  const Bytes rsn3 = a.message(wire::Opcode::kSend, a3, 3, Bytes(100, 0xA3));
  if (why = draws_nak(a, rsn3, static_cast<uint8_t>(Status::kRnr), a3); !why.empty())
    return fail("a SEND with the shared queue empty " + why);
  if (!post(4)) return fail("the target refused a shared receive");
  why = step("RSN 3's retry, after RNR", send(a, a3, 3, 0xA3));
  if (why.empty()) why = step("RSN 3's retry, after RNR", completes(4, ca, 0xA3));
  if (!why.empty()) return fail(why);
  // The second connection takes receives 5 and 6 (RSN 2 before RSN 1) and
  // closes: neither completes, and the first connection's next SEND takes 5.
  if (!post(5) || !post(6)) return fail("the target refused a shared receive");
  const uint32_t b2 = b.next_psn + 1;  // RSN 1's PSN left unsent
  b.next_psn += 2;
  if (why = send(b, b2, 2, 0xB2); !why.empty())
    return fail("the second connection's RSN 2, before its RSN 1: " + why);
  const std::vector<Reply> bye =
      b.exchange_until(b.disconnect(b.conn()), has(wire::Opcode::kDisconnectAck));
  if (of(bye, wire::Opcode::kDisconnectAck).empty())
    return fail("the second connection's DISCONNECT drew no DISCONNECT_ACK");
  (void)a.run(t.simulated_time() ? 100'000 : 10'000'000);
  if (Completion c; t.poll_completion(c))
    return fail("closing the connection that held shared receives 5 and 6 completed wr_id " +
                std::to_string(c.wr_id) + " (" + code_text(c.status) + ")");
  why = step("the first connection's SEND after the second closed", send(a, a.next_psn++, 4, 0xA4));
  if (why.empty())
    why = step("the first connection's SEND after the second closed", completes(5, ca, 0xA4));
  if (!why.empty()) return fail(why);
  return pass();
}

// A duplicate WRITE and a duplicate SEND, sent after the application
// changed the bytes they had placed: acknowledged ECHO_DUP, placed nowhere,
// no second receive taken or completed.
Outcome check_place5(Target& t) {
  Peer p(t);
  Region mem;
  std::string why;
  ConnId conn;
  if (!tester_connects_for_receives(t, p, mem, conn, why, kAccessLocalWrite | kAccessRemoteWrite))
    return fail(why);
  if (t.post_recv(conn, RecvWr{21, mem.addr, 64, mem.lkey}) != Status::kOk ||
      t.post_recv(conn, RecvWr{22, mem.addr + 64, 64, mem.lkey}) != Status::kOk)
    return fail("the target refused a receive buffer");
  constexpr uint64_t kWriteAt = 256;
  const uint32_t w = p.next_psn++, s = p.next_psn++;
  const Bytes write = p.write(w, mem.rkey, mem.addr + kWriteAt, Bytes(16, 0xA5));
  const Bytes send = p.message(wire::Opcode::kSend, s, 0, Bytes(16, 0xB6));
  for (const auto& [psn, packet] : {std::pair{w, write}, std::pair{s, send}})
    if (!acknowledged(p, packet, psn)) return fail("no ACK for PSN " + hex32(psn));
  Completion c;
  if (!p.await_completion(c) || c.wr_id != 21 || c.status != Status::kOk)
    return fail("the SEND did not complete receive 0");
  // The application reuses both places.
  const Bytes reused(16, 0x22);
  t.write_memory(mem, kWriteAt, reused);
  t.write_memory(mem, 0, reused);
  for (const auto& [psn, packet] : {std::pair{w, write}, std::pair{s, send}}) {
    const std::vector<Reply> rs = p.exchange_until(packet, acks(psn, wire::kAckEchoDup));
    const char* what = psn == w ? "the duplicate WRITE" : "the duplicate SEND";
    if (t.read_memory(mem, kWriteAt, 16) != reused || t.read_memory(mem, 0, 16) != reused)
      return fail(std::string(what) + " overwrote bytes the application had reused");
    if (t.read_memory(mem, 64, 64) != Bytes(64, 0))
      return fail(std::string(what) + " was placed in the next receive buffer");
    if (ack_of(rs, psn, wire::kAckEchoDup) == nullptr)
      return fail(std::string(what) + " drew no ECHO_DUP ACK");
  }
  if (t.poll_completion(c)) return fail("a duplicate completed receive " + std::to_string(c.wr_id));
  return pass();
}

// MR-5 from the peer's side: a SEND into a receive buffer whose region
// was deregistered after it was posted writes nothing and draws NAK 0x07
// naming it, and the receive completes kLocalProtection; a READ whose
// target was deregistered while its response travels places nothing and
// draws NAK 0x07 naming the READ_RESP (msn its read sequence).
Outcome check_mr5(Target& t) {
  Peer p(t);
  Region mem;
  std::string why;
  ConnId conn;
  if (!tester_connects_for_receives(t, p, mem, conn, why)) return fail(why);
  if (t.post_recv(conn, RecvWr{31, mem.addr, 64, mem.lkey}) != Status::kOk)
    return fail("the target refused a receive buffer");
  if (!t.deregister_memory(mem)) return fail("deregister_memory failed");
  const uint32_t psn = p.next_psn++;
  why = draws_nak(p, p.message(wire::Opcode::kSend, psn, 0, Bytes(32, 0x5D)), 0x07, psn);
  if (!why.empty()) return fail("a SEND into a deregistered receive buffer " + why);
  if (t.read_memory(mem, 0, mem.length) != Bytes(mem.length, 0))
    return fail("a SEND wrote into a deregistered receive buffer");
  Completion c;
  if (!p.await_completion(c) || c.wr_id != 31 || c.status != Status::kLocalProtection)
    return fail("the receive whose buffer went did not complete kLocalProtection");
  // The READ's target, the other way.
  Peer q(t, 0x7e5a);
  ConnId rconn;
  Region into;
  if (!t.register_memory(100, kAccessLocalWrite, into)) return fail("register_memory failed");
  if (!target_connects(t, q, rconn, why)) return fail(why);
  if (t.post_send(rconn, to_tester(WrOpcode::kRead, into, 100, 32)) != Status::kOk)
    return fail("the target refused a READ");
  const std::vector<Reply> sent = q.run_until(has(wire::Opcode::kReadReq));
  const auto reqs = of(sent, wire::Opcode::kReadReq);
  if (reqs.empty()) return fail("no READ_REQ");
  q.send(q.ack(reqs.front()->pkt.bh.psn + 1, *reqs.front()), reqs.front()->entropy);
  if (!t.deregister_memory(into)) return fail("deregister_memory failed");
  const uint32_t rpsn = q.next_psn++;
  const uint32_t seq = reqs.front()->pkt.mh.msn;
  why = draws_nak(q, q.read_resp(rpsn, seq, 0, 100, Bytes(100, 0x6E)), 0x07, rpsn, seq);
  if (!why.empty()) return fail("a READ_RESP for a deregistered READ target " + why);
  if (t.read_memory(into, 0, into.length) != Bytes(into.length, 0))
    return fail("a READ_RESP was placed in a deregistered READ target");
  return pass();
}

// MR-5, a READ's source: the target answers the tester's READ of 128
// packets from its region with the tester's window at 64 (window_log2 6)
// and the first response held unacknowledged, the rest SACKed, so that it
// stops part way (SEQ-3). The region is deregistered there and every
// response is then acknowledged: the target must send no response it had
// not sent before (in simulated time none at all: a resend reads the region
// too) and tell the tester with NAK 0x07 naming the READ_REQ, `msn` its read
// sequence. On another connection, a READ_REQ naming the gone region's key
// draws NAK 0x02 (MR-1), no response.
Outcome check_mr5_read(Target& t) {
  constexpr uint32_t kPackets = 128, kReadSeq = 0;
  Peer p(t);
  p.window_log2 = 6;
  Region src;
  std::string why;
  if (!tester_connects_to_memory(t, p, src, why, kAccessRemoteRead, uint64_t{kPackets} * 4096))
    return fail(why);
  const uint32_t rd = p.next_psn++;
  const uint32_t first = p.target_initial_psn, window = 1u << p.window_log2;
  p.send(p.read_req(rd, kReadSeq, src.rkey, src.addr, kPackets * p.mtu));
  std::set<uint32_t> sent;    // the responses seen, by distance from the first
  std::optional<Reply> echo;  // its payload is never read: only the echo fields are
  auto answer = [&](const std::vector<Reply>& rs) {
    const auto resps = of(rs, wire::Opcode::kReadResp);
    for (const Reply* r : resps) {
      sent.insert(r->pkt.bh.psn - first);
      echo = *r;
    }
    sack_all_but_cum(p, first, sent, resps.empty() ? nullptr : resps.back(), rs);
  };
  const uint64_t step = t.simulated_time() ? 20'000 : 2'000'000;
  for (uint64_t waited = 0; waited < 500'000'000 && sent.size() < window; waited += step)
    answer(p.run(step));
  answer(p.run(t.simulated_time() ? 1'000'000 : 10'000'000));
  if (sent.size() < window)
    return fail("only " + std::to_string(sent.size()) + " READ_RESPs of a " +
                std::to_string(kPackets) + "-packet READ came, not a window of " +
                std::to_string(window));
  if (*sent.rbegin() + 1 >= kPackets)
    return fail("the whole READ was answered with its first response unacknowledged (SEQ-3)");
  if (!t.deregister_memory(src)) return fail("deregister_memory failed");
  std::vector<Reply> after;
  const uint32_t cum = first + *sent.rbegin() + 1;
  why = draws_nak(p, p.ack(cum, *echo), 0x07, rd, kReadSeq, &after, cum, &t);
  if (!why.empty())
    return fail("the READ whose source region was deregistered under it, acknowledged, " + why);
  for (Reply& r : p.run(t.simulated_time() ? 1'000'000 : 10'000'000)) after.push_back(std::move(r));
  for (const Reply* r : of(after, wire::Opcode::kReadResp)) {
    const uint32_t at = r->pkt.bh.psn - first;
    if (t.simulated_time() || sent.count(at) == 0)
      return fail("READ_RESP " + std::to_string(at) + " of the READ left after its source " +
                  "region was deregistered");
  }
  const Outcome gone = expect_nak(t, 0x7e5c, src, 0x02, [&src](const Peer& q) {
    return q.read_req(q.next_psn, 0, src.rkey, src.addr, 64);
  });
  if (!gone.passed) return fail("a READ_REQ naming the deregistered region: " + gone.detail);
  return pass(std::to_string(sent.size()) + " of " + std::to_string(kPackets) +
              " responses before the deregistration");
}

// COMP-1 and COMP-2: two one-packet WRITEs of the target's, the second
// SACKed while the first is unacknowledged: nothing completes; once cum
// passes both they complete in posting order. Two receives filled RSN 1
// first complete in posting order too.
Outcome check_comp(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why) || !target_writes(t, conn, 100, 1, why) ||
      !target_writes(t, conn, 100, 2, why))
    return fail(why);
  const std::vector<Reply> rs = p.run_until([](const std::vector<Reply>& got) {
    return firsts(of(got, wire::Opcode::kWrite)).size() >= 2;
  });
  std::map<uint32_t, const Reply*> by_psn;  // by distance from the initial PSN
  for (const Reply* d : firsts(of(rs, wire::Opcode::kWrite)))
    by_psn.emplace(d->pkt.bh.psn - p.target_initial_psn, d);
  if (by_psn.size() != 2 || by_psn.rbegin()->first != 1)
    return fail(std::to_string(by_psn.size()) + " one-packet WRITEs, not 2 from the initial PSN");
  const Reply& w1 = *by_psn[0];
  const Reply& w2 = *by_psn[1];
  p.send(p.sack(w1.pkt.bh.psn, {w2.pkt.bh.psn}, w2), w2.entropy);
  // Judged over two waits (drawn()): a completion the SACK drew wrongly but
  // a wait late was taken for the ACK's below, in posting order.
  (void)drawn(t, p);
  Completion c;
  if (t.poll_completion(c))
    return fail("work request " + std::to_string(c.wr_id) +
                " completed with its WRITE SACKed, not cumulatively acknowledged");
  p.send(p.ack(w2.pkt.bh.psn + 1, w2), w2.entropy);
  for (const uint64_t want : {1, 2})
    if (!p.await_completion(c) || c.wr_id != want || c.status != Status::kOk)
      return fail("the WRITEs, acknowledged, did not complete in posting order");
  // The receive queue: RSN 1 arrives first.
  Region mem;
  if (!t.register_memory(200, kAccessLocalWrite, mem)) return fail("register_memory failed");
  for (const uint64_t id : {11, 12})
    if (t.post_recv(conn, RecvWr{id, mem.addr + 100 * (id - 11), 100, mem.lkey}) != Status::kOk)
      return fail("the target refused a receive buffer");
  const uint32_t psn0 = p.next_psn++, psn1 = p.next_psn++;
  for (const auto& [psn, rsn] : {std::pair{psn1, 1u}, std::pair{psn0, 0u}})
    if (!acknowledged(
            p, p.message(wire::Opcode::kSend, psn, rsn, Bytes(8, static_cast<uint8_t>(0x30 + rsn))),
            psn))
      return fail("no ACK for the SEND with RSN " + std::to_string(rsn));
  for (const uint64_t want : {11, 12})
    if (!p.await_completion(c) || c.wr_id != want || c.status != Status::kOk)
      return fail("receives filled RSN 1 first did not complete in posting order");
  return pass();
}

// COMP-3: a WRITE_IMM that arrives while the WRITE sent before it is still
// on its way (the tester holds it back) has its receive filled, but not
// completed: the receive completes once the WRITE has arrived, with the
// immediate value and the WRITE_IMM's length, the WRITE's bytes in place.
Outcome check_comp3(Target& t) {
  Peer p(t);
  Region r;
  ConnId conn;
  std::string why;
  if (!tester_connects_for_receives(t, p, r, conn, why, kAccessLocalWrite | kAccessRemoteWrite))
    return fail(why);
  if (t.post_recv(conn, RecvWr{31, r.addr + 2048, 64, r.lkey}) != Status::kOk)
    return fail("the target refused a receive buffer");
  const uint32_t held = p.next_psn++, signal = p.next_psn++;
  const Bytes data(100, 0x6d);
  const Bytes flag = {1, 2, 3, 4};
  if (!acknowledged(
          p, p.message(wire::Opcode::kWriteImm, signal, 0, flag, r.rkey, r.addr + 1024, 0xc0de),
          signal))
    return fail("no ACK for the WRITE_IMM");
  (void)p.run(t.simulated_time() ? 100'000 : 5'000'000);
  Completion c;
  if (t.poll_completion(c))
    return fail("work request " + std::to_string(c.wr_id) +
                " completed while the WRITE sent before the WRITE_IMM was still on its way");
  if (!acknowledged(p, p.write(held, r.rkey, r.addr, data), held))
    return fail("no ACK for the WRITE held back");
  if (!p.await_completion(c)) return fail("the receive did not complete once the WRITE arrived");
  if (c.wr_id != 31 || c.status != Status::kOk || !c.has_imm || c.imm != 0xc0de ||
      c.byte_len != flag.size())
    return fail("the receive completed as work request " + std::to_string(c.wr_id) + ", " +
                code_text(c.status) + ", " + std::to_string(c.byte_len) + " bytes, immediate " +
                (c.has_imm ? hex32(c.imm) : std::string("none")) +
                ", not 31, kOk, 4 bytes, immediate 0xc0de");
  if (t.read_memory(r, 0, data.size()) != data) return fail("the WRITE's bytes are not in place");
  return pass();
}

}  // namespace metaroce::conformance
