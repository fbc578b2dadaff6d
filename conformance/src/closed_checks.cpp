// Packets for a connection that is closing or gone (CONN-7, BAD-7; section
// 11.3's last rows): a peer's packets in flight when a connection ends, or
// sent by a peer that missed the end, must not be taken, answered or
// placed.
#include "checks.hpp"

namespace metaroce::conformance {
namespace {

const Bytes kPayload = {9, 8, 7, 6, 5, 4, 3, 2};

// A connection the target made to the tester, with a WRITE of the target's
// (`w`, left unacknowledged) and memory the tester may write (`r`).
struct Opened {
  ConnId conn;
  Region r;
  Reply w;
};

std::string opened(Target& t, Peer& p, Opened& o) {
  std::string why;
  if (!t.register_memory(4096, kAccessRemoteWrite, o.r)) return "register_memory failed";
  if (!target_connects(t, p, o.conn, why) || !target_writes(t, o.conn, 100, 1, why)) return why;
  const std::vector<Reply> sent = p.run_until(has(wire::Opcode::kWrite));
  const auto writes = of(sent, wire::Opcode::kWrite);
  if (writes.empty()) return "no WRITE from the target";
  o.w = *writes.front();  // only its header fields are read
  return {};
}

// Sends the packets a peer may still send on the connection: a WRITE of
// the tester's into `o.r`, an ACK and a NAK of the target's WRITE, a PROBE.
// Empty if they draw nothing (but DISCONNECTs, where `closing`), write
// nothing and complete nothing; else what they did.
std::string ignored(Target& t, Peer& p, const Opened& o, const std::string& when, bool closing) {
  const wire::Packet& w = o.w.pkt;
  p.send(p.write(p.next_psn, o.r.rkey, o.r.addr, kPayload));
  p.send(p.ack(w.bh.psn + 1, o.w), o.w.entropy);
  p.send(p.nak(w.bh.psn, 0x02, w.mh.msn, p.next_psn), o.w.entropy);
  p.send(p.probe());
  for (const Reply& x : drawn(t, p, 1'000'000)) {
    if (x.error == wire::ParseError::kOk && closing && x.pkt.bh.opcode == wire::Opcode::kDisconnect)
      continue;
    return "a WRITE, ACK, NAK or PROBE " + when + " drew a reply" +
           (x.error == wire::ParseError::kOk
                ? std::string(" (") + wire::opcode_name(x.pkt.bh.opcode) + ")"
                : std::string());
  }
  if (t.read_memory(o.r, 0, kPayload.size()) != Bytes(kPayload.size(), 0))
    return "a WRITE " + when + " wrote memory";
  Completion c;
  if (t.poll_completion(c))
    return "an ACK or NAK " + when + " completed work with " + code_text(c.status);
  return {};
}

constexpr Counted kUnknown{&EndpointStats::unknown_connection, "unknown_connection", 4};

// The same, and the four are counted as for an unknown connection (BAD-7).
std::string dropped_as_unknown(Target& t, Peer& p, const Opened& o, const std::string& when) {
  (void)p.run(t.simulated_time() ? 100'000 : 5'000'000);  // what was on its way before the end
  const std::optional<EndpointStats> before = drop_counters(t);
  if (std::string why = ignored(t, p, o, when, false); !why.empty()) return why;
  return count_missing(t, before, kUnknown, "a WRITE, ACK, NAK and PROBE " + when);
}

// Drains the completions the end of a connection makes; empty if the WRITE
// (wr_id 1) completed `status`.
std::string flushed(Peer& p, Target& t, Status status, const std::string& when) {
  Completion c;
  if (!p.await_completion(c) || c.wr_id != 1 || c.status != status)
    return "the outstanding WRITE did not complete " + code_text(status) + " " + when;
  while (t.poll_completion(c)) {
  }
  return {};
}

}  // namespace

// A connection the tester closed (DISCONNECT, answered with DISCONNECT_ACK),
// and one the target closed (Target::close) once the tester answered its
// DISCONNECT: a WRITE of the tester's, an ACK and a NAK of the target's
// WRITE and a PROBE, sent afterwards, draw no reply (BAD-7: none, for an
// unknown dst_conn), write nothing, complete nothing and raise
// unknown_connection by 4. While the target's DISCONNECT is unanswered
// (CLOSING) the same draw nothing but DISCONNECTs, are not counted as for
// an unknown connection, and leave it closing (its DISCONNECT is resent):
// the DISCONNECT_ACK then ends it, no DISCONNECT after it.
Outcome check_after_close(Target& t) {
  Peer p(t, 0x7e57);
  Opened a;
  if (std::string why = opened(t, p, a); !why.empty()) return fail(why);
  const std::vector<Reply> acked =
      p.exchange_until(p.disconnect(p.conn()), has(wire::Opcode::kDisconnectAck));
  if (of(acked, wire::Opcode::kDisconnectAck).empty())
    return fail("the tester's DISCONNECT drew no DISCONNECT_ACK");
  if (std::string why = flushed(p, t, Status::kPeerClosed, "at the tester's DISCONNECT");
      !why.empty())
    return fail(why);
  const bool counted = drop_counters(t).has_value();
  if (std::string why = dropped_as_unknown(t, p, a, "after the tester closed the connection");
      !why.empty())
    return fail(why);

  Peer q(t, 0x7e58);
  Opened b;
  if (std::string why = opened(t, q, b); !why.empty()) return fail(why);
  if (!t.close(b.conn))
    return skip(std::string("closed by the tester: passes") +
                (counted ? "" : ", the counts unchecked (agent op stats)") +
                "; the target cannot be asked to close");
  const std::vector<Reply> closing = q.run_until(has(wire::Opcode::kDisconnect));
  if (of(closing, wire::Opcode::kDisconnect).empty()) return fail("no DISCONNECT after the close");
  if (std::string why = flushed(q, t, Status::kFlushed, "at the close"); !why.empty())
    return fail(why);
  const std::optional<EndpointStats> before = drop_counters(t);
  if (std::string why = ignored(t, q, b, "while the target's close is unanswered", true);
      !why.empty())
    return fail(why);
  if (const std::optional<EndpointStats> after = drop_counters(t);
      before && after && after->unknown_connection != before->unknown_connection)
    return fail("packets for a connection closing were counted as for an unknown connection");
  // Still closing: a fresh DISCONNECT within one resend interval (10 ms).
  // Without this wait a target that any of the four ended the close for
  // (gone silent, its ACK then for an unknown connection) passed.
  const std::vector<Reply> resent = q.run_until(has(wire::Opcode::kDisconnect), 11'000'000);
  if (of(resent, wire::Opcode::kDisconnect).empty())
    return fail(
        "no DISCONNECT resent after a WRITE, ACK, NAK and PROBE while the target's close is "
        "unanswered: they ended the close");
  q.send(q.disconnect(q.conn(), true));
  const std::vector<Reply> late = q.run(30'000'000);
  // In real time a resend or two may cross the DISCONNECT_ACK.
  if (of(late, wire::Opcode::kDisconnect).size() > (t.simulated_time() ? 0u : 2u))
    return fail("DISCONNECTs went on after the DISCONNECT_ACK: it did not end the close");
  if (std::string why = dropped_as_unknown(t, q, b, "after the target's close was answered");
      !why.empty())
    return fail(why);
  return counted ? pass() : passed_counting(std::nullopt);
}

}  // namespace metaroce::conformance
