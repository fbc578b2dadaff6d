// NAK-1 to NAK-4 and ACK-9: the order of a receiver's checks, the error
// state a fatal NAK leaves on both ends (and an RNR does not), and an ACK of
// PSNs never sent. LOSS-7: the sender's pause after an RNR, and its RNR
// retry limit (with NAK-4).
#include <map>
#include <optional>

#include "checks.hpp"

namespace metaroce::conformance {
namespace {

const Bytes kPayload = {0x4e, 0x41, 0x4b, 0x21, 5, 6, 7, 8};

// LOSS-7's start: the target SENDs the first 100 bytes of `src` (wr_id 1),
// and the tester refuses it with an RNR NAK as soon as it leaves; `psn` is
// its PSN. False, with `why`, when no such SEND leaves within 10 us (in
// real time, Peer::run_until's patience).
bool send_refused_rnr(Target& t, Peer& p, ConnId conn, const Region& src, uint32_t& psn,
                      std::string& why) {
  if (t.post_send(conn, to_tester(WrOpcode::kSend, src, 100, 1)) != Status::kOk) {
    why = "the target refused a SEND";
    return false;
  }
  // In real time (LOSS-7's retry limit) waited for longer: a loaded host.
  const std::vector<Reply> sent = p.run_until(has(wire::Opcode::kSend), 10'000);
  const auto sends = of(sent, wire::Opcode::kSend);
  if (sends.empty()) {
    why = "the target's SEND was not sent within 10 us";
    return false;
  }
  const Reply& s = *sends.front();
  psn = s.pkt.bh.psn;
  p.send(p.nak(psn, 0x01, s.pkt.mh.msn, psn), s.entropy);
  return true;
}

}  // namespace

Outcome check_nak1(Target& t) {
  Peer p(t);
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why)) return fail(why);
  const uint32_t psn = p.next_psn++;
  if (!acknowledged(p, p.write(psn, r.rkey, r.addr, kPayload), psn))
    return fail("no ACK for a good WRITE");
  // A duplicate is acknowledged before its key is looked at.
  const Bytes bad_key = p.write(psn, r.rkey ^ 1, r.addr + 64, kPayload);
  const std::vector<Reply> dup = p.exchange_until(bad_key, acks(psn, wire::kAckEchoDup));
  if (nak_of(dup) != nullptr)
    return fail("a duplicate with a bad key drew NAK " + code_text(nak_of(dup)->pkt.nak.code) +
                ": the duplicate check comes before the key");
  if (ack_of(dup, psn, wire::kAckEchoDup) == nullptr)
    return fail("a duplicate with a bad key drew no ECHO_DUP ACK");
  // Out of the window: dropped before its key is looked at.
  const std::vector<Reply> far =
      drawn(t, p, p.write(psn + 100000, r.rkey ^ 1, r.addr + 64, kPayload), 1'000'000);
  if (const Reply* n = nak_of(far))
    return fail("an out-of-window packet with a bad key drew NAK " + code_text(n->pkt.nak.code) +
                ": the window check comes before the key");
  if (!far.empty()) return fail("an out-of-window packet with a bad key drew a reply");
  // Neither ended the connection.
  const uint32_t next = p.next_psn++;
  const std::vector<Reply> after =
      p.exchange_until(p.write(next, r.rkey, r.addr + 128, kPayload), acks(next));
  if (ack_of(after, next) == nullptr)
    return fail("a good WRITE after them was not acknowledged: the connection ended");
  if (t.read_memory(r, 64, kPayload.size()) != Bytes(kPayload.size(), 0))
    return fail("a packet with a bad key was written");
  if (t.read_memory(r, 128, kPayload.size()) != kPayload)
    return fail("a good WRITE after them was not placed");
  return pass();
}

Outcome check_nak2(Target& t) {
  Peer p(t);
  Region r;
  std::string why;
  if (!tester_connects_to_memory(t, p, r, why, kAccessRemoteWrite | kAccessRemoteRead))
    return fail(why);
  const uint32_t bad = p.next_psn++;
  const std::vector<Reply> first =
      p.exchange_until(p.write(bad, r.rkey ^ 1, r.addr, kPayload), has(wire::Opcode::kNak));
  const Reply* n = nak_of(first);
  if (n == nullptr) return fail("a WRITE with a bad key drew no NAK");
  const wire::NakBody fatal = n->pkt.nak;
  if (fatal.code != 0x02 || fatal.nak_psn != bad)
    return fail("the bad key drew NAK " + code_text(fatal.code) + " naming " +
                hex32(fatal.nak_psn) + ", not " + code_text(Status::kRemoteBadKey) + " naming " +
                hex32(bad));
  // Every later data packet of the connection, good as it is, draws the same
  // NAK (code, nak_psn, msn, cum_psn) and is neither placed nor answered.
  const uint32_t w = p.next_psn++;
  const uint32_t rd = p.next_psn++;
  for (const auto& [what, packet] :
       {std::pair{"a good WRITE", p.write(w, r.rkey, r.addr, kPayload)},
        std::pair{"a good READ_REQ", p.read_req(rd, 0, r.rkey, r.addr, 64)}}) {
    const std::vector<Reply> rs = p.exchange_until(packet, has(wire::Opcode::kNak));
    const Reply* again = nak_of(rs);
    if (again == nullptr) return fail(std::string(what) + " after the fatal NAK drew no NAK");
    const wire::NakBody& k = again->pkt.nak;
    if (k.code != fatal.code || k.nak_psn != fatal.nak_psn || k.msn != fatal.msn ||
        k.cum_psn != fatal.cum_psn)
      return fail(std::string(what) + " after the fatal NAK drew NAK " + code_text(k.code) +
                  " naming " + hex32(k.nak_psn) + " (msn " + hex32(k.msn) + ", cum " +
                  hex32(k.cum_psn) + "), not the same NAK (" + code_text(fatal.code) + " naming " +
                  hex32(fatal.nak_psn) + ", msn " + hex32(fatal.msn) + ", cum " +
                  hex32(fatal.cum_psn) + ")");
    if (!of(rs, wire::Opcode::kAck).empty() || !of(rs, wire::Opcode::kReadResp).empty())
      return fail(std::string(what) + " after the fatal NAK was acknowledged or answered");
  }
  if (t.read_memory(r, 0, r.length) != Bytes(r.length, 0))
    return fail("a packet after the fatal NAK was written");
  return pass();
}

Outcome check_nak3(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  for (uint64_t id = 1; id <= 3; ++id)
    if (!target_writes(t, conn, 100, id, why)) return fail(why);
  const std::vector<Reply> rs = run_until_answering_probes(
      t, p,
      [](const std::vector<Reply>& got) {
        return firsts(of(got, wire::Opcode::kWrite)).size() >= 3;
      },
      p.target_initial_psn);
  std::map<uint32_t, const Reply*> by_psn;  // by distance from the initial PSN
  for (const Reply* d : firsts(of(rs, wire::Opcode::kWrite)))
    by_psn.emplace(d->pkt.bh.psn - p.target_initial_psn, d);
  if (by_psn.size() != 3 || by_psn.rbegin()->first != 2)
    return fail(std::to_string(by_psn.size()) + " one-packet WRITEs, not 3 from the initial PSN");
  const Reply& w1 = *by_psn[0];
  const Reply& w2 = *by_psn[1];
  // The first is acknowledged; the second draws NAK 0x02 (its cum_psn says
  // the same of the first).
  p.send(p.ack(w1.pkt.bh.psn + 1, w1), w1.entropy);
  p.send(p.nak(w2.pkt.bh.psn, 0x02, w2.pkt.mh.msn, w2.pkt.bh.psn), w2.entropy);
  std::map<uint64_t, Status> done;
  Completion c;
  while (done.size() < 3 && p.await_completion(c)) done.emplace(c.wr_id, c.status);
  const auto status_of = [&done](uint64_t id) {
    const auto it = done.find(id);
    return it == done.end() ? std::string("none") : code_text(it->second);
  };
  if (done.size() != 3 || done[1] != Status::kOk || done[2] != Status::kRemoteBadKey ||
      done[3] != Status::kFlushed)
    return fail("completions 1/2/3 " + status_of(1) + "/" + status_of(2) + "/" + status_of(3) +
                ", not " + code_text(Status::kOk) + " (acknowledged) / " +
                code_text(Status::kRemoteBadKey) + " (the NAK's code) / " +
                code_text(Status::kFlushed));
  // The connection is in ERROR: nothing more goes out, resends included,
  // and later work does not reach the wire. (What left before the NAK was
  // taken, on a target in real time, is let through first.)
  (void)p.run(1000);
  Region more;
  if (!t.register_memory(100, 0, more)) return fail("register_memory failed");
  const Status posted = t.post_send(conn, to_tester(WrOpcode::kWrite, more, 100, 4));
  const std::vector<Reply> after = p.run(t.simulated_time() ? 200'000'000 : 20'000'000);
  for (const Reply& r : after)
    if (r.error == wire::ParseError::kOk && wire::is_data(r.pkt.bh.opcode))
      return fail("data (PSN " + hex32(r.pkt.bh.psn) + ") sent after the fatal NAK");
  if (posted == Status::kOk) {
    if (!p.await_completion(c)) return fail("work posted after the fatal NAK never completed");
    if (c.wr_id != 4 || c.status != Status::kFlushed)
      return fail("work posted after the fatal NAK completed " + code_text(c.status) + ", not " +
                  code_text(Status::kFlushed));
  }
  return pass();
}

// NAK-4 on both ends: a SEND with no receive posted draws RNR, writes
// nothing and ends nothing (resent once a receive is posted, it lands); a
// SEND of the target's that draws RNR is resent, not failed.
Outcome check_nak4(Target& t) {
  Peer p(t);
  Region mem;
  std::string why;
  ConnId conn;
  if (!tester_connects_for_receives(t, p, mem, conn, why)) return fail(why);
  const uint32_t psn = p.next_psn++;
  const Bytes send = p.message(wire::Opcode::kSend, psn, 0, kPayload);
  why = draws_nak(p, send, 0x01, psn);
  if (!why.empty()) return fail("a SEND with no receive posted " + why);
  if (t.read_memory(mem, 0, mem.length) != Bytes(mem.length, 0))
    return fail("a SEND refused RNR was written");
  if (t.post_recv(conn, RecvWr{1, mem.addr, 64, mem.lkey}) != Status::kOk)
    return fail("the target refused a receive buffer after the RNR");
  if (!acknowledged(p, send, psn))
    return fail("the SEND resent once a receive was posted was not acknowledged");
  Completion c;
  if (!p.await_completion(c) || c.wr_id != 1 || c.status != Status::kOk ||
      t.read_memory(mem, 0, kPayload.size()) != kPayload)
    return fail("the SEND resent once a receive was posted did not land");
  // The other way: the target's SEND draws RNR from the tester.
  Region src;
  if (!t.register_memory(100, 0, src)) return fail("register_memory failed");
  if (t.post_send(conn, to_tester(WrOpcode::kSend, src, 100, 2)) != Status::kOk)
    return fail("the target refused a SEND");
  const std::vector<Reply> sent = p.run_until(has(wire::Opcode::kSend));
  const auto sends = of(sent, wire::Opcode::kSend);
  if (sends.empty()) return fail("the target's SEND was not sent");
  const Reply& s = *sends.front();
  p.send(p.nak(s.pkt.bh.psn, 0x01, s.pkt.mh.msn, s.pkt.bh.psn), s.entropy);
  const uint32_t s_psn = s.pkt.bh.psn;
  const std::vector<Reply> again = p.run_until(
      [s_psn](const std::vector<Reply>& got) {
        for (const Reply* r : of(got, wire::Opcode::kSend))
          if (r->pkt.bh.psn == s_psn) return true;
        return false;
      },
      1'000'000);
  if (t.poll_completion(c))
    return fail("the SEND that drew RNR completed with " + code_text(c.status) +
                " before it was acknowledged");
  const Reply* resent = nullptr;
  for (const Reply* r : of(again, wire::Opcode::kSend))
    if (r->pkt.bh.psn == s_psn && resent == nullptr) resent = r;
  if (resent == nullptr) return fail("the SEND that drew RNR was not resent");
  p.send(p.ack(s_psn + 1, *resent), resent->entropy);
  if (!p.await_completion(c) || c.wr_id != 2 || c.status != Status::kOk)
    return fail("the SEND that drew RNR did not complete once acknowledged");
  return pass();
}

// LOSS-7 (simulated time: the pause is measured): the target's one-packet
// SEND, refused by the tester's RNR NAK, goes again not before `rnr_retry`
// (100 us) after the NAK and by 200 us; no data packet leaves in the pause,
// not even a second SEND posted in it (the send queue waits), which leaves
// after the resend.
Outcome check_loss7(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  Region src;
  if (!t.register_memory(200, 0, src)) return fail("register_memory failed");
  uint32_t psn = 0;
  if (!send_refused_rnr(t, p, conn, src, psn, why)) return fail(why);
  Region second = src;
  second.addr += 100;
  if (t.post_send(conn, to_tester(WrOpcode::kSend, second, 100, 2)) != Status::kOk)
    return fail("the target refused a second SEND");
  uint64_t at = 0;  // ns since the NAK
  for (const uint64_t step : {99'000u, 101'000u}) {
    for (const Reply& r : p.run(step)) {
      if (r.error != wire::ParseError::kOk || !wire::is_data(r.pkt.bh.opcode)) continue;
      const bool resend = r.pkt.bh.psn == psn;
      const bool posted_after = !resend && psn_after(r.pkt.bh.psn, psn);
      if (at < 99'000)
        return fail(std::string(resend         ? "the SEND refused RNR was resent"
                                : posted_after ? "the SEND posted in the RNR pause left"
                                               : "a data packet left") +
                    " within 99 us of the RNR NAK, before rnr_retry (100 us)");
      if (posted_after)
        return fail("the SEND posted in the RNR pause left before the refused one was resent");
      if (resend) return pass();
    }
    at += step;
  }
  return fail("the SEND refused RNR was not resent within 200 us of the NAK");
}

// LOSS-7, NAK-4 (rnr_retry_limit): the target set to a limit of 3
// (Target::set_rnr_retry_limit) sends its one-packet SEND, which the tester
// refuses with RNR each time it leaves, 4 times (N + 1) and no more: the
// SEND completes kRnrRetryExceeded, the SEND posted behind it kFlushed, the
// connection fails with the same code (where the target tells), and the
// tester is told nothing (NAK-4). Set to 0 (unlimited, the default), the
// SEND is still resent after 20 RNR NAKs, nothing completed. In simulated
// time exactly: one send a round, none in the next ms, and no packet at all
// after the last NAK. In real time a copy resent for loss before the NAK
// arrived may come with a round, or after it, and be taken for the next:
// the sends are counted as at least N + 1, the target's giving up is
// awaited (within 40 rounds), and after it no data, NAK or DISCONNECT may
// come (an ACK or PROBE may already be on its way). A target that cannot be
// set skips.
Outcome check_loss7_limit(Target& t) {
  constexpr uint32_t kLimit = 3, kUnlimitedNaks = 20, kMostRounds = 40;
  // Each resend is due rnr_retry (100 us) after the NAK: 1 ms is ten pauses.
  constexpr uint64_t kWait = 1'000'000, kStep = 10'000;
  const bool simulated = t.simulated_time();
  for (const uint32_t limit : {kLimit, 0u}) {
    const std::string set = limit == 0 ? " (rnr_retry_limit 0: unlimited)"
                                       : " (rnr_retry_limit " + std::to_string(limit) + ")";
    if (!t.set_rnr_retry_limit(limit))
      return limit == 0 ? fail("the target could be set to an RNR retry limit, not back to 0")
                        : skip("the target cannot be set to an RNR retry limit (LOSS-7)");
    Peer p(t);
    ConnId conn;
    std::string why;
    if (!target_connects(t, p, conn, why)) return fail(why + set);
    Region src;
    if (!t.register_memory(200, 0, src)) return fail("register_memory failed");
    uint32_t psn = 0;
    if (!send_refused_rnr(t, p, conn, src, psn, why)) return fail(why + set);
    Region second = src;
    second.addr += 100;
    if (t.post_send(conn, to_tester(WrOpcode::kSend, second, 100, 2)) != Status::kOk)
      return fail("the target refused a second SEND" + set);
    const auto copies = [psn](const std::vector<Reply>& rs) {
      std::vector<const Reply*> out;
      for (const Reply* r : of(rs, wire::Opcode::kSend))
        if (r->pkt.bh.psn == psn) out.push_back(r);
      return out;
    };
    // Sends expected after the first: in simulated time the limit's, each
    // refused too; unlimited, one after each of kUnlimitedNaks NAKs.
    const uint32_t resends = limit == 0 ? kUnlimitedNaks : simulated ? limit : kMostRounds;
    uint32_t sends = 1;
    std::optional<Completion> done;
    for (uint32_t k = 1; k <= resends && !done; ++k) {
      std::vector<Reply> rs;
      Completion c;
      const auto resent_or_done = [&](const std::vector<Reply>& got) {
        if (!done && t.poll_completion(c)) done = c;
        return done || !copies(got).empty();
      };
      if (simulated) {
        // In steps: a resend for loss (LOSS-8's probe, the RTO) may follow
        // an unanswered one within the ms.
        for (uint64_t at = 0; at < kWait && !resent_or_done(rs); at += kStep) rs = p.run(kStep);
      } else {
        // A target kept from the tester's answers (a loaded host) may take
        // its paths for dead and wait for PROBEs answered (PATH-4).
        rs = run_until_answering_probes(t, p, resent_or_done, psn, kWait);
      }
      const std::vector<const Reply*> again = copies(rs);
      if (done && (simulated || done->wr_id != 1 || done->status != Status::kRnrRetryExceeded ||
                   sends < limit + 1 || limit == 0))
        return fail("after " + std::to_string(sends) + " sends of the SEND refused RNR" + set +
                    ", wr_id " + std::to_string(done->wr_id) + " completed " +
                    code_text(done->status) +
                    (limit == 0 ? "" : ": " + std::to_string(limit + 1) + " sends expected"));
      if (done) break;
      if (again.empty())
        return fail("the SEND refused RNR was sent " + std::to_string(sends) +
                    " times, then not again within 1 ms of the RNR NAK" + set + ": " +
                    (limit == 0 ? "retries without end expected"
                                : std::to_string(limit + 1) + " sends expected"));
      if (simulated && again.size() > 1)
        return fail("the SEND refused RNR was sent " + std::to_string(again.size()) +
                    " times after one RNR NAK" + set);
      sends += static_cast<uint32_t>(again.size());
      if (limit == 0 && k == resends) break;
      const Reply& s = *again.back();
      p.send(p.nak(psn, 0x01, s.pkt.mh.msn, psn), s.entropy);
    }
    if (limit == 0) {
      Status failed = Status::kOk;
      if (t.conn_error(conn, failed) && failed != Status::kOk)
        return fail("the connection failed " + code_text(failed) + set);
      continue;
    }
    if (!simulated && !done)
      return fail("the SEND refused RNR was sent " + std::to_string(sends) + " times" + set +
                  " and did not fail: " + std::to_string(limit + 1) + " sends expected");
    // The limit reached: the last NAK is not retried, and answered with
    // nothing at all (NAK-4).
    for (const Reply& r : p.run(kWait)) {
      if (r.error != wire::ParseError::kOk) continue;
      const wire::Opcode op = r.pkt.bh.opcode;
      if (op == wire::Opcode::kSend && r.pkt.bh.psn == psn)
        return fail("the SEND refused RNR was sent " + std::to_string(sends + 1) + " times" + set +
                    ": " + std::to_string(limit + 1) + " expected, then none");
      if (simulated || wire::is_data(op) || op == wire::Opcode::kNak ||
          op == wire::Opcode::kDisconnect)
        return fail("after the RNR NAK beyond the limit" + set + " the target sent a " +
                    wire::opcode_name(op) + "; NAK-4: the receiver is told nothing");
    }
    const std::pair<uint64_t, Status> expected[] = {{1, Status::kRnrRetryExceeded},
                                                    {2, Status::kFlushed}};
    for (const auto& [wr_id, status] : expected) {
      Completion c;
      if (wr_id == 1 && done) continue;  // awaited above, in real time
      if (!p.await_completion(c))
        return fail("after " + std::to_string(sends) + " sends refused RNR" + set + ", wr_id " +
                    std::to_string(wr_id) + " did not complete (" + code_text(status) +
                    " expected)");
      if (c.wr_id != wr_id || c.status != status)
        return fail("after " + std::to_string(sends) + " sends refused RNR" + set + ", wr_id " +
                    std::to_string(c.wr_id) + " completed " + code_text(c.status) + "; wr_id " +
                    std::to_string(wr_id) + " " + code_text(status) + " expected");
    }
    Status failed = Status::kOk;
    if (t.conn_error(conn, failed) && failed != Status::kRnrRetryExceeded)
      return fail("the connection failed " + code_text(failed) + set + ", not " +
                  code_text(Status::kRnrRetryExceeded));
  }
  return pass();
}

// LOSS-7, READ responses (simulated time: "at once" is measured against the
// pause): while the target's SEND waits out an RNR pause, a READ the tester
// asks for is answered, and a response of it that the tester echoes with
// ECHO_TRIMMED (TRIM-3: lost) goes again within 20 us, not at the pause's
// end though the refused SEND's resend is queued ahead of it; nor does it
// take the SEND along, which still waits rnr_retry (100 us).
Outcome check_loss7_read(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  constexpr uint32_t kResponses = 4;
  const uint32_t len = kResponses * p.mtu;
  Region src, from;
  if (!t.register_memory(100, 0, src) || !t.register_memory(len, kAccessRemoteRead, from))
    return fail("register_memory failed");
  uint32_t psn = 0;
  if (!send_refused_rnr(t, p, conn, src, psn, why)) return fail(why);
  p.send(p.read_req(p.next_psn++, 0, from.rkey, from.addr, len));
  uint64_t at = 0;  // ns since the NAK
  // What left in the next `ns`, failing if the refused SEND went again
  // before rnr_retry; `resent` tells whether it went again at all.
  bool resent = false;
  auto watch = [&](uint64_t ns, std::vector<Reply>& rs) -> std::optional<Outcome> {
    rs = p.run(ns);
    for (const Reply* r : of(rs, wire::Opcode::kSend)) {
      if (r->pkt.bh.psn != psn) continue;
      if (at < 99'000)
        return fail("the SEND refused RNR was resent within " + std::to_string((at + ns) / 1000) +
                    " us of the RNR NAK, before rnr_retry (100 us), beside the READ's responses");
      resent = true;
    }
    at += ns;
    return std::nullopt;
  };
  std::vector<Reply> first;
  if (auto bad = watch(10'000, first)) return *bad;
  const auto resp = firsts(of(first, wire::Opcode::kReadResp));
  if (resp.size() < 2)
    return fail("the READ asked for in the RNR pause drew " + std::to_string(resp.size()) +
                " of its " + std::to_string(kResponses) +
                " responses within 10 us: new READ responses waited for the pause");
  const Reply& lost = *resp[1];
  // cum stays at the refused SEND: the ACK acknowledges nothing.
  p.send(p.ack(psn, lost, wire::kAckEchoTrimmed), lost.entropy);
  std::vector<Reply> again;
  if (auto bad = watch(20'000, again)) return *bad;
  bool back = false;
  for (const Reply* r : of(again, wire::Opcode::kReadResp))
    back = back || r->pkt.bh.psn == lost.pkt.bh.psn;
  if (!back)
    return fail(
        "the READ response echoed with ECHO_TRIMMED in the RNR pause was not resent within "
        "20 us: held for the pause's end (rnr_retry, 100 us)");
  std::vector<Reply> rest;
  for (const uint64_t step : {69'000u, 101'000u})
    if (auto bad = watch(step, rest)) return *bad;
  if (!resent) return fail("the SEND refused RNR was not resent within 200 us of the NAK");
  return pass();
}

Outcome check_ack9(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  Region r;
  if (!t.register_memory(4096, kAccessRemoteWrite, r)) return fail("register_memory failed");
  // The target's own ACKs are unsequenced: PSN 0.
  const uint32_t psn = p.next_psn++;
  const std::vector<Reply> acked =
      p.exchange_until(p.write(psn, r.rkey, r.addr, kPayload), acks(psn));
  const Reply* own = ack_of(acked, psn);
  if (own == nullptr) return fail("no ACK for the tester's WRITE");
  if (own->pkt.bh.psn != 0) return fail("an ACK with PSN " + hex32(own->pkt.bh.psn) + ", not 0");
  // A WRITE of two packets: an ACK of its first alone (what a target that
  // took the bogus ACK's echo might make of it) does not complete it.
  if (!target_writes(t, conn, p.mtu + 100, 1, why)) return fail(why);
  const std::vector<Reply> rs = p.run_until([](const std::vector<Reply>& got) {
    return firsts(of(got, wire::Opcode::kWrite)).size() >= 2;
  });
  const auto data = firsts(of(rs, wire::Opcode::kWrite));
  if (data.size() != 2) return fail(std::to_string(data.size()) + " data packets, not 2");
  const Reply& d = data.front()->pkt.bh.psn == p.target_initial_psn ? *data.front() : *data.back();
  const uint32_t end = p.target_initial_psn + 2;
  // In simulated time the packets have waited exactly the initial RTT the
  // engine assumes: wait a little more, so that a sample taken would show.
  if (t.simulated_time()) (void)p.run(37'000);
  PathStats before;
  const bool stats = t.path_stats(conn, wire::path_tag_slot(d.pkt.bh.path_tag), before);
  // An ACK of 1000 PSNs beyond the packets sent: ignored whole.
  p.send(p.ack(d.pkt.bh.psn + 1000, d), d.entropy);
  // Judged over two waits (drawn()): a completion it drew wrongly but a wait
  // late was taken for the true ACK's below.
  (void)drawn(t, p);
  Completion c;
  if (t.poll_completion(c))
    return fail("an ACK of PSNs never sent completed the WRITE with " + code_text(c.status));
  PathStats after;
  if (stats && t.path_stats(conn, wire::path_tag_slot(d.pkt.bh.path_tag), after) &&
      after.srtt_ns != before.srtt_ns)
    return fail("an ACK of PSNs never sent moved srtt from " + std::to_string(before.srtt_ns) +
                " to " + std::to_string(after.srtt_ns) + " ns: its echo was taken");
  // The true ACK completes it.
  p.send(p.ack(end, d), d.entropy);
  if (!p.await_completion(c) || c.wr_id != 1 || c.status != Status::kOk)
    return fail("the WRITE did not complete once truly acknowledged");
  return pass();
}

}  // namespace metaroce::conformance
