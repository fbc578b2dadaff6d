// Memory: PLACE-2, MR-1, MR-2, MR-3, MR-4.
#include <algorithm>
#include <set>

#include "checks.hpp"

namespace metaroce::conformance {

Outcome check_place2(Target& t) {
  Region r;
  if (!t.register_memory(4096, kAccessRemoteWrite, r)) return fail("register_memory failed");
  Outcome o = expect_nak(t, 0x7e61, r, r.rkey ^ 1, r.addr, 8, 0x02);
  if (!o.passed) return fail("bad key: " + o.detail);
  o = expect_nak(t, 0x7e62, r, r.rkey, r.addr + 4096 - 10, 100, 0x03);
  if (!o.passed) return fail("range past the region: " + o.detail);
  Region ro;
  if (!t.register_memory(4096, kAccessRemoteRead, ro)) return fail("register_memory failed");
  o = expect_nak(t, 0x7e63, ro, ro.rkey, ro.addr, 8, 0x04);
  if (!o.passed) return fail("no REMOTE_WRITE right: " + o.detail);
  // The bounds are the whole message's, [raddr - offset, raddr - offset +
  // msg_len): each packet below lies inside the region, its message does not.
  // Each carries the payload TRIM-5 requires of its place in the message.
  o = expect_nak(t, 0x7e67, r, 0x03, [&r](const Peer& p) {
    return p.write_part(p.next_psn, r.rkey, r.addr, Bytes(p.mtu, 0x77), 0, 8000);
  });
  if (!o.passed) return fail("first packet of a message that runs past the region: " + o.detail);
  o = expect_nak(t, 0x7e68, r, 0x03, [&r](const Peer& p) {
    return p.write_part(p.next_psn, r.rkey, r.addr + 8, Bytes(8, 0x77), 4000, 4008);
  });
  if (!o.passed) return fail("last packet of a message that starts before the region: " + o.detail);
  return pass();
}

Outcome check_mr1(Target& t) {
  std::set<uint64_t> keys;
  std::vector<Region> regions(64);
  for (Region& r : regions) {
    if (!t.register_memory(64, kAccessRemoteWrite, r)) return fail("register_memory failed");
    if (r.rkey == 0) return fail("an rkey of 0");
    keys.insert(r.rkey);
  }
  if (keys.size() != regions.size()) return fail("two regions share an rkey");
  const Region gone = regions[7];
  if (!t.deregister_memory(gone)) return fail("deregister_memory failed");
  const Outcome o = expect_nak(t, 0x7e64, regions[8], gone.rkey, gone.addr, 8, 0x02);
  if (!o.passed) return fail("deregistered key: " + o.detail);
  return pass();
}

Outcome check_mr2(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  Region none, local;
  if (!t.register_memory(4096, 0, none) || !t.register_memory(4096, kAccessLocalWrite, local))
    return fail("register_memory failed");
  if (t.post_send(conn, to_tester(WrOpcode::kRead, none, 100, 0)) != Status::kLocalProtection)
    return fail("a READ into memory without LOCAL_WRITE was not refused kLocalProtection");
  if (t.post_recv(conn, RecvWr{1, none.addr, 100, none.lkey}) != Status::kLocalProtection)
    return fail("a receive buffer without LOCAL_WRITE was not refused kLocalProtection");
  if (t.post_recv(conn, RecvWr{2, local.addr + 4000, 97, local.lkey}) != Status::kLocalProtection)
    return fail("a receive buffer one byte past its region was not refused kLocalProtection");
  if (!target_writes(t, conn, 100, 3, why))
    return fail("a WRITE from memory with no rights: " + why);
  const std::vector<Reply> sent = p.run_until(has(wire::Opcode::kWrite));
  if (of(sent, wire::Opcode::kWrite).empty()) return fail("that WRITE was not sent");
  return pass();
}

Outcome check_mr3(Target& t) {
  Region r;
  if (!t.register_memory(4096, kAccessRemoteWrite, r)) return fail("register_memory failed");
  const Outcome o = expect_nak(t, 0x7e65, r, r.rkey, ~uint64_t{0} - 50, 100, 0x03);
  if (!o.passed) return fail("wrapping range: " + o.detail);
  Peer p(t, 0x7e66);
  std::string why;
  if (!tester_connects(p, why, 0xE66)) return fail(why);
  const Bytes tail(100, 0x42);
  const uint32_t psn = p.next_psn++;
  if (!acknowledged(p, p.write(psn, r.rkey, r.addr + 4096 - 100, tail), psn))
    return fail("a range ending at the region's end was not acknowledged");
  if (t.read_memory(r, 4096 - 100, 100) != tail) return fail("it was not written");
  return pass();
}

// MR-4: regions registered at a base of the owner's choosing, 0 and one
// whose last byte is at 2^64 - 1, are named base-relative by the peer's
// packets and by local work requests alike: the tester's WRITE, READ and
// SEND there land at (and read) the same offsets, the target's own WRITE
// sends the bytes at its local_addr's offset, and a range past base +
// length draws NAK 0x03. A base whose range wraps past 2^64 is refused.
// (An IUT that takes every raddr for a host address NAKs the first WRITE.)
Outcome check_mr4(Target& t) {
  constexpr uint64_t kLen = 4096;
  const uint32_t access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  Region zero, top, wraps;
  if (!t.register_memory_at(kLen, access, 0, zero))
    return skip(
        "the target cannot register memory at a base of its choosing (the agent's "
        "register_memory: \"base\")");
  if (t.register_memory_at(kLen, access, ~uint64_t{0} - 100, wraps))
    return fail(
        "a region of 4096 bytes at base 2^64 - 101, its range wrapping past 2^64, was "
        "registered");
  if (!t.register_memory_at(kLen, access, ~uint64_t{0} - (kLen - 1), top))
    return fail(
        "a region of 4096 bytes at base 2^64 - 4096 (its last byte at 2^64 - 1) was "
        "refused");
  Peer p(t);
  std::string why;
  if (!tester_connects(p, why)) return fail(why);
  const ConnId conn = t.accepted();
  if (!conn.valid()) return fail("the target reports no accepted connection");
  uint32_t read_seq = 0, rsn = 0;
  uint64_t wr_id = 0;
  for (const Region* r : {&zero, &top}) {
    const std::string name = r == &zero ? "base 0: " : "base 2^64 - 4096: ";
    const auto refused = [](const std::vector<Reply>& rs) {
      const Reply* n = nak_of(rs);
      return n == nullptr ? std::string() : " (NAK " + code_text(n->pkt.nak.code) + ")";
    };
    const Bytes w(100, 0x4d);
    uint32_t psn = p.next_psn++;
    std::vector<Reply> rs = p.exchange_until(p.write(psn, r->rkey, r->addr + 16, w), acks(psn));
    if (ack_of(rs, psn) == nullptr)
      return fail(name + "no ACK for a WRITE at base + 16" + refused(rs));
    if (t.read_memory(*r, 16, w.size()) != w)
      return fail(name + "a WRITE at base + 16 did not land at offset 16");
    Bytes pattern(100);
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<uint8_t>(i * 3 + 1);
    t.write_memory(*r, 1000, pattern);
    psn = p.next_psn++;
    rs = p.exchange_until(p.read_req(psn, read_seq++, r->rkey, r->addr + 1000, 100),
                          has(wire::Opcode::kReadResp));
    const auto resp = of(rs, wire::Opcode::kReadResp);
    if (resp.empty()) return fail(name + "no READ_RESP for a READ at base + 1000" + refused(rs));
    if (!std::ranges::equal(resp.front()->pkt.payload, pattern))
      return fail(name + "a READ at base + 1000 did not read the bytes at offset 1000");
    // Acknowledged at once: left waiting, the response has a target in real
    // time probe its paths, and where the agent went 300 ms without a CPU
    // (a loaded host) the WRITE posted below found none to leave on within
    // the tester's 500 ms (remote-ipv6 failed so once).
    p.send(p.ack(resp.front()->pkt.bh.psn + 1, *resp.front()), resp.front()->entropy);
    if (t.post_recv(conn, RecvWr{++wr_id, r->addr + 2000, 100, r->lkey}) != Status::kOk)
      return fail(name + "the target refused a receive at base + 2000");
    const Bytes sent(50, 0x5e);
    psn = p.next_psn++;
    rs = p.exchange_until(p.message(wire::Opcode::kSend, psn, rsn++, sent), acks(psn));
    if (ack_of(rs, psn) == nullptr)
      return fail(name + "no ACK for a SEND into a receive at base + 2000" + refused(rs));
    if (t.read_memory(*r, 2000, sent.size()) != sent)
      return fail(name + "a SEND into a receive at base + 2000 did not land at offset 2000");
    Completion c;
    if (!p.await_completion(c) || c.wr_id != wr_id || c.status != Status::kOk)
      return fail(name + "the receive at base + 2000 did not complete kOk");
    std::reverse(pattern.begin(), pattern.end());
    t.write_memory(*r, 3000, pattern);
    SendWr wr = to_tester(WrOpcode::kWrite, *r, 100, ++wr_id);
    wr.local_addr = r->addr + 3000;
    if (t.post_send(conn, wr) != Status::kOk)
      return fail(name + "the target refused a WRITE from local_addr base + 3000");
    rs = p.run_until(has(wire::Opcode::kWrite));
    const auto out = of(rs, wire::Opcode::kWrite);
    if (out.empty()) return fail(name + "the target's WRITE from base + 3000 did not leave");
    if (!std::ranges::equal(out.front()->pkt.payload, pattern))
      return fail(name +
                  "the target's WRITE from local_addr base + 3000 did not send the bytes "
                  "at offset 3000");
    p.send(p.ack(out.front()->pkt.bh.psn + 1, *out.front()), out.front()->entropy);
    if (!p.await_completion(c) || c.wr_id != wr_id || c.status != Status::kOk)
      return fail(name + "the target's WRITE from base + 3000 did not complete kOk");
  }
  const Outcome o = expect_nak(t, 0x7e41, zero, zero.rkey, kLen - 50, 100, 0x03);
  if (!o.passed) return fail("base 0: a WRITE of 100 bytes at base + 4046: " + o.detail);
  return pass();
}

}  // namespace metaroce::conformance
