// How connections end, seen from the tester: refused (CONN-4), closed by
// the target (CONN-7's closing side), failed (COMP-5, PATH-7), idle with
// its peer gone (CONN-9), and what a DISCONNECT's reason says (CONN-8).
#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include "checks.hpp"

namespace metaroce::conformance {
namespace {

// What the target sent on one of its connections, with when it came: in
// simulated time exactly, in real time by the tester's clock, to the step.
struct Timed {
  uint64_t at;
  Reply r;
};

// The check's clock: simulated time as run() advanced it, or real time.
class Clock {
 public:
  explicit Clock(const Target& t) : simulated_(t.simulated_time()) {}
  void advanced(uint64_t ns) { nominal_ += ns; }
  [[nodiscard]] uint64_t now() const {
    if (simulated_) return nominal_;
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now() - start_)
                                     .count());
  }

 private:
  bool simulated_;
  uint64_t nominal_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// Empty if the tester's CONNECT_REQ (nonce `nonce`) draws a CONNECT_REJECT
// of `code` naming it (dst_conn, nonce) and no ACCEPT; else what came.
std::string rejected(Peer& p, uint64_t nonce, Status code) {
  const std::vector<Reply> rs =
      p.exchange_until(p.connect_req(nonce), has(wire::Opcode::kConnectReject));
  if (!of(rs, wire::Opcode::kConnectAccept).empty()) return "a CONNECT_REQ drew an ACCEPT";
  const auto rej = of(rs, wire::Opcode::kConnectReject);
  if (rej.empty()) return "a CONNECT_REQ drew no CONNECT_REJECT";
  const wire::Packet& k = rej.front()->pkt;
  if (k.bh.dst_conn != p.conn() || k.connect.nonce != nonce)
    return "the CONNECT_REJECT names dst_conn " + hex32(k.bh.dst_conn) + " and nonce " +
           hex32(k.connect.nonce) + ", not the request's " + hex32(p.conn()) + " and " +
           hex32(nonce);
  if (k.connect.code != static_cast<uint8_t>(code))
    return "CONNECT_REJECT code " + code_text(k.connect.code) + ", not " + code_text(code);
  return {};
}

// The ports of a connection's path slots, from the first flight of its data
// among `rs` (PATH-1: one port per slot).
std::map<uint16_t, uint16_t> slot_of_port(const std::vector<Reply>& rs, uint32_t tester_conn) {
  std::vector<const Reply*> data;
  for (const Reply* d : of(rs, wire::Opcode::kWrite))
    if (d->pkt.bh.dst_conn == tester_conn) data.push_back(d);
  std::map<uint16_t, uint16_t> out;
  for (const auto& [slot, d] : first_per_slot(data)) out.emplace(d->entropy, slot);
  return out;
}

// In real time, the ports of the connection's later PROBEs and data among
// `rs` too, each under its path slot: a target kept from its tester a while
// (a loaded host) may take a path for dead and renew it from another port
// (PATH-6), which its DISCONNECTs then leave from (a remote run once failed
// naming such a port as none of the connection's).
void add_later_ports(std::map<uint16_t, uint16_t>& slots, const std::vector<Reply>& rs,
                     uint32_t tester_conn) {
  for (const Reply& r : rs)
    if (r.error == wire::ParseError::kOk && r.pkt.bh.dst_conn == tester_conn &&
        (r.pkt.bh.opcode == wire::Opcode::kProbe || wire::is_data(r.pkt.bh.opcode)))
      slots.emplace(r.entropy, wire::path_tag_slot(r.pkt.bh.path_tag));
}

// Empty if each DISCONNECT of `ds` left from the port of the path slot after
// the previous one's (CONN-2, CONN-7: the connection's entropy values in
// turn), every port one of the connection's.
std::string in_turn(const std::vector<Timed>& ds, const std::map<uint16_t, uint16_t>& slots) {
  uint16_t paths = 0;
  for (const auto& [port, slot] : slots) paths = std::max<uint16_t>(paths, slot + 1);
  for (size_t i = 0; i < ds.size(); ++i) {
    const auto it = slots.find(ds[i].r.entropy);
    if (it == slots.end())
      return "DISCONNECT " + std::to_string(i) + " left from port " +
             std::to_string(ds[i].r.entropy) + ", no path's of the connection";
    if (i == 0) continue;
    const uint16_t before = slots.at(ds[i - 1].r.entropy);
    if (it->second != (before + 1) % paths)
      return "DISCONNECT " + std::to_string(i) + " left from path slot " +
             std::to_string(it->second) + " after slot " + std::to_string(before) +
             ", not the next";
  }
  return {};
}

using Queue = std::vector<std::pair<uint64_t, Status>>;

// Empty if `done` holds exactly the work requests of `queues` (wr_id and
// status), each once, each queue's in its order (COMP-2, COMP-5); else
// what differs.
std::string completed(const std::vector<Completion>& done, const std::vector<Queue>& queues) {
  size_t expected = 0;
  for (const Queue& q : queues) {
    size_t at = 0;  // where in `done` the previous one of the queue was
    for (const auto& [wr, status] : q) {
      ++expected;
      const auto is_it = [wr = wr](const Completion& c) { return c.wr_id == wr; };
      const auto n = std::count_if(done.begin(), done.end(), is_it);
      if (n != 1)
        return "work request " + std::to_string(wr) + " completed " + std::to_string(n) +
               " times, not once";
      const auto it = std::find_if(done.begin(), done.end(), is_it);
      if (it->status != status)
        return "work request " + std::to_string(wr) + " completed " + code_text(it->status) +
               ", not " + code_text(status);
      const auto pos = static_cast<size_t>(it - done.begin());
      if (pos < at)
        return "work request " + std::to_string(wr) + " completed before one posted earlier";
      at = pos;
    }
  }
  if (done.size() != expected)
    return std::to_string(done.size()) + " completions, not " + std::to_string(expected);
  return {};
}

}  // namespace

// CONN-4, both ends. As requester, the target's connection fails with the
// code of the CONNECT_REJECT it gets (Target::conn_error, where the target
// tells), the work posted on it completes kFlushed (COMP-5: a REJECT names
// none), and nothing follows on the wire. As responder (where the target can
// be set so, Target::listen), refusing every connection it answers 0x47, and
// at its limit of one connection 0x4a.
Outcome check_conn4(Target& t) {
  std::string why, unchecked;
  uint32_t id = 0x7e60;
  for (const Status code :
       {Status::kConnectRefused, Status::kResourceExhausted, Status::kVersionMismatch}) {
    const std::string rej = "after a REJECT " + code_text(code);
    Peer q(t, ++id);
    ConnId conn;
    if (!t.connect_to_tester(conn)) return fail("the target could not start a connection");
    if (!target_writes(t, conn, 100, id, why)) return fail(why);
    const std::vector<Reply> sent = q.run_until(has(wire::Opcode::kConnectReq), 1000);
    const auto reqs = of(sent, wire::Opcode::kConnectReq);
    if (reqs.empty()) return fail("no CONNECT_REQ after connect");
    q.reject(*reqs.front(), code);
    Completion c;
    if (!q.await_completion(c)) return fail(rej + ", the WRITE posted while connecting is pending");
    if (c.wr_id != id || c.status != Status::kFlushed)
      return fail(rej + ", the WRITE posted while connecting completed " + code_text(c.status) +
                  ", not " + code_text(Status::kFlushed));
    Status failed = Status::kOk;
    if (!t.conn_error(conn, failed))
      unchecked = "; the target does not tell why a connection failed";
    else if (failed != code)
      return fail(rej + ", the connection failed with " + code_text(failed));
    // Judged over two waits (drawn()): a request sent late in the one wait
    // after the failure arrived in the next connection's, and was rejected
    // for it.
    const std::vector<Reply> after = drawn(t, q, 30'000'000, 20'000'000);
    if (!of(after, wire::Opcode::kConnectReq).empty() || !of(after, wire::Opcode::kWrite).empty())
      return fail("the target sent on " + rej);
  }
  if (!t.listen(false, 0))
    return skip("the requester's side passes" + unchecked +
                "; the target cannot be set to refuse connections");
  Peer p(t, 0x7e57);
  why = rejected(p, 0xC4, Status::kConnectRefused);
  if (!why.empty()) return fail("refusing connections: " + why);
  if (t.accepted_count() != 0) return fail("refusing connections, the target accepted one");
  if (!t.listen(true, 1))
    return skip("the requester's side and refusal pass" + unchecked +
                "; the target cannot be set to one connection");
  Peer first(t, 0x7e58), second(t, 0x7e59);
  if (!first.connect(0xC41, why)) return fail("with room for one connection: " + why);
  why = rejected(second, 0xC42, Status::kResourceExhausted);
  if (!why.empty()) return fail("with its one connection taken: " + why);
  return pass(unchecked.empty() ? std::string() : unchecked.substr(2));
}

// CONN-7, the closing end (Target::close): the target closes two connections
// with work outstanding. Every work request completes kFlushed at once, send
// queue in posting order, and no data follows. Each connection's DISCONNECT
// (dst_conn and src_conn naming both ends, reason 0) is resent every 10 ms
// (simulated time) from its paths' ports in turn (CONN-2), until a
// DISCONNECT_ACK arrives: on A the tester answers the third, after one
// naming another src_conn and one from another address, which must not end
// it; B, never answered, sends 8 in all.
Outcome check_conn7_close(Target& t) {
  Peer a(t, 0x7e57), b(t, 0x7e58);
  ConnId ca, cb;
  std::string why;
  if (!target_connects_twice(t, a, ca, b, cb, why)) return fail(why);
  // 64 KiB each: a first flight on every path shows its port.
  if (!target_writes(t, ca, 65536, 1, why) || !target_writes(t, ca, 100, 2, why) ||
      !target_writes(t, cb, 65536, 3, why))
    return fail(why);
  Region buf;
  if (!t.register_memory(4096, kAccessLocalWrite, buf)) return fail("register_memory failed");
  if (t.post_recv(ca, RecvWr{4, buf.addr, 4096, buf.lkey}) != Status::kOk)
    return fail("the target refused a receive");
  const auto data_on = [](uint32_t conn) {
    return [conn](const std::vector<Reply>& rs) {
      for (const Reply* d : of(rs, wire::Opcode::kWrite))
        if (d->pkt.bh.dst_conn == conn) return true;
      return false;
    };
  };
  std::vector<Reply> flight = a.run_until(
      [&](const std::vector<Reply>& rs) { return data_on(a.conn())(rs) && data_on(b.conn())(rs); });
  // In real time the tester reads its sockets in turn, so a connection's
  // first packet may be read before the rest of its first flight, whose
  // ports in_turn needs (a remote run failed naming a DISCONNECT's port as
  // none of the connection's): wait for the rest.
  if (!t.simulated_time())
    for (Reply& r : a.run(5'000'000)) flight.push_back(std::move(r));
  std::map<uint16_t, uint16_t> slots_a = slot_of_port(flight, a.conn());
  std::map<uint16_t, uint16_t> slots_b = slot_of_port(flight, b.conn());
  if (slots_a.empty() || slots_b.empty()) return fail("no data before the close");
  if (!t.simulated_time()) {
    add_later_ports(slots_a, flight, a.conn());
    add_later_ports(slots_b, flight, b.conn());
  }
  if (!t.close(ca) || !t.close(cb)) return skip("the target cannot be asked to close");

  const uint64_t step = t.simulated_time() ? 1'000'000 : 5'000'000;
  Clock clock(t);
  std::map<uint32_t, std::vector<Timed>> disc;  // by dst_conn: the tester's side
  std::vector<Completion> done;
  std::string data_after;
  bool misled = false, answered = false;
  // In real time a packet sent just before the close may be read with the
  // first DISCONNECT, even after it (the tester reads its sockets in turn);
  // one read in a later wait was sent after it.
  std::map<uint32_t, size_t> closed_in;  // by dst_conn: the wait of its first DISCONNECT
  for (size_t wait = 0; clock.now() < 200'000'000; ++wait) {
    std::vector<Reply> rs = a.run(step);
    clock.advanced(step);
    if (!t.simulated_time()) {
      add_later_ports(slots_a, rs, a.conn());
      add_later_ports(slots_b, rs, b.conn());
    }
    for (Reply& r : rs) {
      if (r.error != wire::ParseError::kOk) continue;
      const uint32_t to = r.pkt.bh.dst_conn;
      const auto closed = closed_in.find(to);
      const bool after = t.simulated_time() || (closed != closed_in.end() && closed->second < wait);
      if (wire::is_data(r.pkt.bh.opcode) && after && data_after.empty())
        data_after = "a data packet (PSN " + hex32(r.pkt.bh.psn) + ") after the close";
      if (r.pkt.bh.opcode != wire::Opcode::kDisconnect) continue;
      disc[to].push_back({clock.now(), r});
      closed_in.emplace(to, wait);
    }
    Completion c;
    while (t.poll_completion(c)) done.push_back(c);
    const std::vector<Timed>& da = disc[a.conn()];
    if (da.size() >= 2 && !misled) {
      misled = true;
      a.send(a.disconnect(a.conn() + 1, true));
      a.send(a.disconnect(a.conn(), true), Peer::kEntropy, false, /*stranger=*/true);
    }
    if (da.size() >= 3 && !answered) {
      answered = true;
      a.send(a.disconnect(a.conn(), true));
    }
  }
  if (!data_after.empty()) return fail(data_after);

  constexpr Status kF = Status::kFlushed;
  why = completed(done, {{{1, kF}, {2, kF}}, {{3, kF}}, {{4, kF}}});
  if (!why.empty()) return fail("at the close, " + why);

  for (const auto& [to, ds] : disc)
    if (to != a.conn() && to != b.conn())
      return fail("a DISCONNECT to dst_conn " + hex32(to) + ", neither connection's peer");
  for (const Peer* p : {&a, &b}) {
    const std::string name = p == &a ? "A" : "B";
    const std::vector<Timed>& ds = disc[p->conn()];
    if (ds.empty()) return fail("no DISCONNECT after closing " + name);
    for (const Timed& d : ds)
      if (d.r.pkt.disconnect.src_conn != p->target_conn || d.r.pkt.disconnect.reason != 0)
        return fail(name + "'s DISCONNECT names src_conn " + hex32(d.r.pkt.disconnect.src_conn) +
                    " (reason " + code_text(d.r.pkt.disconnect.reason) + "), not " +
                    hex32(p->target_conn) + " (reason " + code_text(Status::kOk) + ")");
    why = in_turn(ds, p == &a ? slots_a : slots_b);
    if (!why.empty()) return fail(name + ": " + why);
    for (size_t i = 1; i < ds.size() && t.simulated_time(); ++i) {
      const uint64_t gap = ds[i].at - ds[i - 1].at;
      if (gap < 9'000'000 || gap > 11'000'000)
        return fail(name + "'s DISCONNECTs " + std::to_string(i - 1) + " and " + std::to_string(i) +
                    " " + std::to_string(gap / 1000) + " us apart, not 10 ms");
    }
  }
  const size_t na = disc[a.conn()].size(), nb = disc[b.conn()].size();
  if (na < 3)
    return fail("A sent " + std::to_string(na) +
                " DISCONNECTs: a DISCONNECT_ACK naming another src_conn, or from another "
                "address, ended its close");
  // In real time a resend or two may cross the tester's DISCONNECT_ACK (the
  // tester answers at the end of a 5 ms wait, later on a loaded host); an
  // IUT deaf to it sends 8.
  if (na > (t.simulated_time() ? 3u : 5u))
    return fail("A sent " + std::to_string(na) + " DISCONNECTs: resent after its DISCONNECT_ACK");
  if (nb != 8) return fail("B, never answered, sent " + std::to_string(nb) + " DISCONNECTs, not 8");
  return pass(std::to_string(na) + " and " + std::to_string(nb) + " DISCONNECTs");
}

// CONN-7 for a connection that ended while CONNECTING (section 4's states):
// the tester holds the target's request and answers only once the target
// gave the connection up, first for its unanswered requests (CONN-2: the
// WRITE posted on it completes kConnectTimeout), then, where the target can
// be asked to close, for a close (kFlushed). An ACCEPT naming another nonce
// draws nothing; the ACCEPT of the request draws one DISCONNECT naming the
// ACCEPT's src_conn and the request's, reason kConnectTimeout and 0
// (CONN-8), and no resend follows.
Outcome check_conn7_abandoned(Target& t) {
  uint32_t id = 0x7e70;
  for (const bool closed : {false, true}) {
    const std::string when = closed ? "closed while connecting" : "given up for its requests";
    Peer q(t, ++id);
    ConnId conn;
    std::string why;
    if (!t.connect_to_tester(conn)) return fail("the target could not start a connection");
    if (!target_writes(t, conn, 100, id, why)) return fail(why);
    const std::vector<Reply> sent = q.run_until(has(wire::Opcode::kConnectReq), 1000);
    const auto reqs = of(sent, wire::Opcode::kConnectReq);
    if (reqs.empty()) return fail("no CONNECT_REQ after connect");
    const Reply req = *reqs.front();
    if (closed && !t.close(conn))
      return skip(
          "a connection given up for its requests passes; the target cannot be asked to "
          "close");
    const Status given_up = closed ? Status::kFlushed : Status::kConnectTimeout;
    Completion c;
    // The WRITE completes as the connection is given up: at once for a
    // close (one wait of 1 ms in simulated time), and for unanswered
    // requests once connect_attempts x connect_retry have passed since the
    // first (80 ms by the defaults: one wait of 100 ms). In real time
    // await_completion polls every 5 ms, up to 500 ms. How long the target
    // then remembers the connection for its late ACCEPT is not bounded here
    // (the reference: 65,535 x connect_retry, within its max_connections records).
    const uint64_t step = t.simulated_time() ? (closed ? 1'000'000 : 100'000'000) : 5'000'000;
    if (!q.await_completion(c, step) || c.wr_id != id || c.status != given_up)
      return fail("a connection " + when + ": the WRITE posted on it did not complete " +
                  code_text(given_up));
    Reply stranger = req;
    stranger.pkt.connect.nonce ^= 1;
    q.accept(stranger);
    const std::vector<Reply> quiet = drawn(t, q, 1'000'000);
    if (!of(quiet, wire::Opcode::kDisconnect).empty())
      return fail("a connection " + when + ": an ACCEPT naming another nonce drew a DISCONNECT");
    q.accept(req);
    const std::vector<Reply> rs = q.run_until(has(wire::Opcode::kDisconnect), 1'000'000);
    const auto ds = of(rs, wire::Opcode::kDisconnect);
    if (ds.empty()) return fail("a connection " + when + ": its late ACCEPT drew no DISCONNECT");
    const wire::Packet& d = ds.front()->pkt;
    const Status reason = closed ? Status::kOk : Status::kConnectTimeout;
    if (d.bh.dst_conn != q.conn() || d.disconnect.src_conn != req.pkt.connect.src_conn ||
        d.disconnect.reason != static_cast<uint8_t>(reason))
      return fail("a connection " + when + ": the DISCONNECT names dst_conn " +
                  hex32(d.bh.dst_conn) + ", src_conn " + hex32(d.disconnect.src_conn) +
                  ", reason " + code_text(d.disconnect.reason) + ", not " + hex32(q.conn()) + ", " +
                  hex32(req.pkt.connect.src_conn) + ", " + code_text(reason));
    // Judged over two waits (drawn()): a resend sent late in the one wait
    // reached the tester only after the check.
    const std::vector<Reply> after = drawn(t, q, 30'000'000, 20'000'000);
    if (ds.size() + of(after, wire::Opcode::kDisconnect).size() != 1)
      return fail("a connection " + when + ": its DISCONNECT was resent");
  }
  return pass();
}

// COMP-5 through an error of the target's own making: a WRITE of the
// tester's with a bad key draws NAK 0x02 and puts the target's side in the
// error state. Its outstanding WRITEs, READ and receives all complete
// kFlushed, each queue in posting order: the fault was in the peer's
// packet, so none of its requests takes the NAK's code.
Outcome check_comp5(Target& t) {
  Peer p(t);
  Region r;
  ConnId conn;
  std::string why;
  if (!tester_connects_for_receives(t, p, r, conn, why)) return fail(why);
  for (const uint64_t wr : {10, 11})
    if (t.post_recv(conn, RecvWr{wr, r.addr + (wr - 10) * 2048, 2048, r.lkey}) != Status::kOk)
      return fail("the target refused a receive");
  if (!target_writes(t, conn, 100, 1, why) || !target_writes(t, conn, 100, 2, why))
    return fail(why);
  if (t.post_send(conn, to_tester(WrOpcode::kRead, r, 100, 3)) != Status::kOk)
    return fail("the target refused a READ");
  const std::vector<Reply> sent = p.run_until(has(wire::Opcode::kReadReq));
  if (of(sent, wire::Opcode::kWrite).empty() || of(sent, wire::Opcode::kReadReq).empty())
    return fail("the target sent no WRITE or READ_REQ");
  why = draws_nak(p, p.write(p.next_psn, r.rkey ^ 0xBAD, r.addr, Bytes(8, 1)), 0x02, p.next_psn);
  if (!why.empty()) return fail("a WRITE with a bad key " + why);
  std::vector<Completion> done;
  Completion c;
  while (done.size() < 5 && p.await_completion(c)) done.push_back(c);
  (void)p.run(1000);
  while (t.poll_completion(c)) done.push_back(c);
  constexpr Status kF = Status::kFlushed;
  why = completed(done, {{{1, kF}, {2, kF}, {3, kF}}, {{10, kF}, {11, kF}}});
  if (!why.empty()) return fail("after the NAK it sent, " + why);
  return pass();
}

// CONN-8: a DISCONNECT's reason informs and decides nothing. The tester's,
// giving a value appendix A does not define (0xee), ends the target's
// connection as CONN-7 says: a DISCONNECT_ACK, the outstanding WRITE
// completed kPeerClosed. Where the target can be asked to close, its own
// DISCONNECT of a connection that a WRITE with a bad key failed there (NAK
// 0x02, as in COMP-5's check) gives 0x02, the status that failed it.
Outcome check_conn8(Target& t) {
  Peer p(t);
  std::string why = target_write_outstanding(t, p);
  if (!why.empty()) return fail(why);
  const std::vector<Reply> acked =
      p.exchange_until(p.disconnect(p.conn(), false, 0xee), has(wire::Opcode::kDisconnectAck));
  if (of(acked, wire::Opcode::kDisconnectAck).empty())
    return fail("a DISCONNECT giving reason 0xee drew no DISCONNECT_ACK");
  Completion c;
  if (!p.await_completion(c) || c.wr_id != 1 || c.status != Status::kPeerClosed)
    return fail("a DISCONNECT giving reason 0xee left the outstanding WRITE without kPeerClosed");

  Peer q(t, 0x7e59);
  Region r;
  ConnId failed;
  if (!tester_connects_for_receives(t, q, r, failed, why)) return fail(why);
  why = draws_nak(q, q.write(q.next_psn, r.rkey ^ 0xBAD, r.addr, Bytes(8, 1)), 0x02, q.next_psn);
  if (!why.empty()) return fail("a WRITE with a bad key " + why);
  while (t.poll_completion(c)) {
  }
  if (!t.close(failed))
    return skip(
        "a DISCONNECT giving reason 0xee closes: passes; the target cannot be asked to close");
  const std::vector<Reply> closing = q.run_until(has(wire::Opcode::kDisconnect));
  const auto ds = of(closing, wire::Opcode::kDisconnect);
  if (ds.empty()) return fail("no DISCONNECT after closing the connection NAK 0x02 failed");
  q.send(q.disconnect(q.conn(), true));
  if (const uint8_t reason = ds.front()->pkt.disconnect.reason; reason != 0x02)
    return fail("the DISCONNECT of a connection NAK 0x02 failed gives reason " + code_text(reason) +
                ", not " + code_text(Status::kRemoteBadKey));
  return pass();
}

// PATH-7: two WRITEs of the target never acknowledged, its PROBEs answered
// with ACKs that acknowledge nothing new (signs of life, not progress):
// the connection fails kPeerUnreachable peer_timeout (2 s) after the work
// was posted, not before, the oldest WRITE with that code and the other
// kFlushed (COMP-5).
Outcome check_path7(Target& t) {
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  Clock clock(t);
  if (!target_writes(t, conn, 100, 1, why) || !target_writes(t, conn, 100, 2, why))
    return fail(why);
  const uint64_t step = t.simulated_time() ? 1'000'000 : 10'000'000;
  // 2 s, with room for the timer's granularity (and in real time, for the
  // scheduler of a loaded host).
  const uint64_t latest = t.simulated_time() ? 2'100'000'000 : 2'600'000'000;
  std::vector<Completion> done;
  uint64_t failed_at = 0;
  size_t probes = 0;
  while (done.size() < 2 && clock.now() < latest) {
    const std::vector<Reply> rs = p.run(step);
    clock.advanced(step);
    for (const Reply* probe : of(rs, wire::Opcode::kProbe)) {
      p.send(p.ack(p.target_initial_psn, *probe, wire::kAckEchoProbe), probe->entropy);
      ++probes;
    }
    Completion c;
    while (t.poll_completion(c)) {
      if (done.empty()) failed_at = clock.now();
      done.push_back(c);
    }
  }
  if (done.empty())
    return fail("no completion " + std::to_string(latest / 1'000'000) +
                " ms after the work was posted: no peer timeout");
  if (failed_at < 1'950'000'000)
    return fail("the work completed " + std::to_string(failed_at / 1'000'000) +
                " ms after it was posted, before the peer timeout (2 s)");
  why = completed(done, {{{1, Status::kPeerUnreachable}, {2, Status::kFlushed}}});
  if (!why.empty()) return fail("at the peer timeout, " + why);
  Status failed = Status::kOk;
  if (t.conn_error(conn, failed) && failed != Status::kPeerUnreachable)
    return fail("the connection failed with " + code_text(failed) + ", not " +
                code_text(Status::kPeerUnreachable));
  return pass("failed " + std::to_string(failed_at / 1'000'000) + " ms after the post, " +
              std::to_string(probes) + " PROBEs answered");
}

// CONN-9: the target's connection, idle, the tester silent. Its keepalive
// PROBE comes `keepalive` after the handshake, not before; the tester's ACK
// echoing it (3.11, ACK-7) ends it: no PROBE for another keepalive. The
// next goes unanswered: more PROBEs follow, spacing out (more in the peer
// timeout's first quarter than in its last), a bounded number, not all on
// one path slot, and the connection fails kPeerUnreachable peer_timeout
// after the first of them, not before. In simulated time with the spec's
// 10 s and 2 s; a target in real time is set to 300 ms and 500 ms
// (set_keepalive), or the check skips: 12 s of each run is too long.
Outcome check_conn9(Target& t) {
  const bool simulated = t.simulated_time();
  uint64_t keepalive = 10'000'000'000, peer_timeout = 2'000'000'000;
  if (!simulated) {
    keepalive = 300'000'000;
    peer_timeout = 500'000'000;
    if (!t.set_keepalive(keepalive, peer_timeout))
      return skip(
          "the target cannot be set to a keepalive of 300 ms and a peer timeout of 500 ms (the "
          "defaults, 10 s and 2 s, would hold the run 12 s)");
  }
  Peer p(t);
  ConnId conn;
  std::string why;
  if (!target_connects(t, p, conn, why)) return fail(why);
  Clock clock(t);
  const uint64_t step = simulated ? 1'000'000 : 5'000'000;
  // Timers fire late, not early: a packet is seen up to a step after it
  // left (in real time, and a scheduler slice more). Lateness is bounded
  // loosely in real time, for a loaded host.
  const uint64_t early = simulated ? step : 25'000'000;
  const uint64_t late = simulated ? 10'000'000 : 500'000'000;
  const auto ms = [](uint64_t ns) { return std::to_string(ns / 1'000'000) + " ms"; };
  const std::string set =
      simulated ? std::string() : " (the target set to keepalive 300 ms, peer timeout 500 ms)";

  // The keepalive PROBE, answered.
  uint64_t answered_at = 0, first_probe = 0;
  while (answered_at == 0 && clock.now() < keepalive + late) {
    const std::vector<Reply> rs = p.run(step);
    clock.advanced(step);
    const auto probes = of(rs, wire::Opcode::kProbe);
    if (probes.empty()) continue;
    first_probe = clock.now();
    if (first_probe + early < keepalive)
      return fail("a PROBE " + ms(first_probe) + " after the handshake, before the keepalive (" +
                  ms(keepalive) + ")" + set);
    const Reply& probe = *probes.front();
    if (probe.pkt.bh.dst_conn != p.conn())
      return fail("the keepalive PROBE names dst_conn " + hex32(probe.pkt.bh.dst_conn) +
                  ", not the tester's " + hex32(p.conn()));
    p.send(p.ack(p.target_initial_psn, probe, wire::kAckEchoProbe), probe.entropy);
    answered_at = clock.now();
  }
  if (answered_at == 0)
    return fail("no keepalive PROBE within " + ms(keepalive + late) +
                " of the handshake, the connection idle and the tester silent (keepalive " +
                ms(keepalive) + ")" + set);

  // Quiet until the next keepalive, whose PROBE goes unanswered.
  struct Probe {
    uint64_t at;
    unsigned slot;
  };
  std::vector<Probe> probes;
  // In real time the keepalive's next PROBE, an RTO (a millisecond or so)
  // after its first, may leave before the answer arrives: those seen soon
  // after it are let be. An IUT deaf to the answer still PROBEs after them,
  // its intervals growing to max_rto (100 ms) within the keepalive.
  const uint64_t grace = simulated ? 0 : 100'000'000;
  // When the first unanswered PROBE left, at the earliest: after the
  // tester's previous look (a tester slow to look must not shorten the
  // time the target is given).
  uint64_t first_from = 0;
  while (probes.empty() && clock.now() < answered_at + keepalive + late) {
    const uint64_t before = clock.now();
    const std::vector<Reply> rs = p.run(step);
    clock.advanced(step);
    if (clock.now() <= answered_at + grace) continue;
    for (const Reply* r : of(rs, wire::Opcode::kProbe))
      probes.push_back({clock.now(), static_cast<unsigned>(r->pkt.bh.path_tag & (kMaxPaths - 1))});
    first_from = before;
  }
  if (probes.empty())
    return fail("no PROBE within " + ms(keepalive + late) +
                " of the ACK that answered the first, the connection idle: one is due each "
                "keepalive (" +
                ms(keepalive) + ")" + set);
  const uint64_t first_at = probes.front().at;
  if (first_at + early < answered_at + keepalive)
    return fail("a PROBE " + ms(first_at - answered_at) +
                " after the ACK that echoed the keepalive's, before another keepalive (" +
                ms(keepalive) + "): the answer did not end it" + set);

  // Unanswered: the connection fails peer_timeout after the first.
  bool tells = true;  // conn_error answers
  Status failed = Status::kOk;
  uint64_t failed_at = 0;
  const uint64_t deadline = first_at + peer_timeout + late;
  while (failed_at == 0 && clock.now() < deadline) {
    const std::vector<Reply> rs = p.run(step);
    clock.advanced(step);
    for (const Reply* r : of(rs, wire::Opcode::kProbe))
      probes.push_back({clock.now(), static_cast<unsigned>(r->pkt.bh.path_tag & (kMaxPaths - 1))});
    Status s = Status::kOk;
    if (tells && !t.conn_error(conn, s)) tells = false;
    if (tells && s != Status::kOk) {
      failed = s;
      failed_at = clock.now();
    }
  }
  if (!tells) {
    // A target that does not tell why a connection failed still refuses
    // work on one that did; the moment is then left unchecked.
    SendWr wr;
    wr.wr_id = 9;
    wr.remote_addr = kTesterAddr;
    wr.rkey = kTesterRkey;
    if (t.post_send(conn, wr) == Status::kOk)
      return fail("the connection still took work " + ms(clock.now() - first_at) +
                  " after its first unanswered PROBE: no peer timeout (" + ms(peer_timeout) + ")" +
                  set);
  } else if (failed_at == 0) {
    return fail("the connection was still up " + ms(clock.now() - first_at) +
                " after its first unanswered PROBE: no peer timeout (" + ms(peer_timeout) + ")" +
                set);
  } else if (failed_at + early < first_from + peer_timeout) {
    return fail("the connection failed " + ms(failed_at - first_at) +
                " after its first unanswered PROBE, before the peer timeout (" + ms(peer_timeout) +
                ")" + set);
  } else if (failed != Status::kPeerUnreachable) {
    return fail("the connection failed with " + code_text(failed) + ", not " +
                code_text(Status::kPeerUnreachable));
  }

  // The PROBEs until then: one per interval, the intervals growing.
  const uint64_t end = failed_at != 0 ? failed_at : first_at + peer_timeout;
  std::erase_if(probes, [&](const Probe& q) { return q.at > end; });
  const size_t n = probes.size();
  if (n < 3)
    return fail("only " + std::to_string(n) + " PROBEs from the first unanswered one to " +
                (failed_at != 0 ? "the failure" : "the peer timeout") +
                ": one is due each time an interval passes with nothing from the peer" + set);
  if (n > 64)
    return fail(std::to_string(n) + " PROBEs from the first unanswered one to " +
                (failed_at != 0 ? "the failure" : "the peer timeout") +
                ", more than 64: the intervals do not grow to max_rto" + set);
  const uint64_t quarter = (end - first_at) / 4;
  const auto head = static_cast<size_t>(std::count_if(
      probes.begin(), probes.end(), [&](const Probe& q) { return q.at < first_at + quarter; }));
  const auto tail = static_cast<size_t>(std::count_if(
      probes.begin(), probes.end(), [&](const Probe& q) { return q.at >= end - quarter; }));
  if (head <= tail)
    return fail("the unanswered PROBEs do not space out: " + std::to_string(head) +
                " in the first quarter of the peer timeout, " + std::to_string(tail) +
                " in its last" + set);
  if (t.paths().value_or(4) > 1 && std::all_of(probes.begin(), probes.end(), [&](const Probe& q) {
        return q.slot == probes.front().slot;
      }))
    return fail("all " + std::to_string(n) + " unanswered PROBEs on path slot " +
                std::to_string(probes.front().slot) + ": each goes on the next slot in turn" + set);
  return pass("PROBE " + ms(first_probe) + " after the handshake, answered; the next " +
              ms(first_at - answered_at) + " after the answer; " + std::to_string(n) +
              " unanswered (" + std::to_string(head) + " in the peer timeout's first quarter, " +
              std::to_string(tail) + " in its last), " +
              (failed_at != 0 ? "failed " + ms(failed_at - first_at) + " after the first"
                              : std::string("work refused after the peer timeout")) +
              set);
}

}  // namespace metaroce::conformance
