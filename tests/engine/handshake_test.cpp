// Handshake and teardown against crafted or replayed connection packets
// (spec CONN-*, BAD-7): datagrams handed straight to an endpoint, and what it
// sends back read off poll_transmit.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/bytes.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

constexpr uint8_t kConnectReq = static_cast<uint8_t>(wire::Opcode::kConnectReq);
constexpr uint8_t kConnectAccept = static_cast<uint8_t>(wire::Opcode::kConnectAccept);
constexpr uint8_t kConnectReject = static_cast<uint8_t>(wire::Opcode::kConnectReject);
constexpr uint8_t kDisconnect = static_cast<uint8_t>(wire::Opcode::kDisconnect);
constexpr uint8_t kDisconnectAck = static_cast<uint8_t>(wire::Opcode::kDisconnectAck);

PeerAddr other_addr() {
  PeerAddr p;
  p.len = 1;
  p.bytes[0] = 'C';
  return p;
}

void deliver(Loop& loop, int to, const PeerAddr& from, const std::vector<uint8_t>& d,
             uint64_t later_ns = 0) {
  RxDatagram dg{from, 1234, false, d};
  loop.ep(to).handle_datagram(dg, loop.now() + later_ns);
}

// Everything endpoint i has to send now.
std::vector<std::vector<uint8_t>> sent(Loop& loop, int i) {
  std::vector<std::vector<uint8_t>> out;
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  while (loop.ep(i).poll_transmit(loop.now(), buf, tx))
    out.emplace_back(buf.begin(), buf.begin() + static_cast<long>(tx.len));
  return out;
}

// Rewrites, in every connection packet of opcode `op` that endpoint `from`
// sends, the body (section 3.12) with `edit`, and seals it again.
void edit_connect_body(Loop& loop, int from, uint8_t op, std::function<void(uint8_t*)> edit) {
  loop.mutate = [from, op, edit = std::move(edit)](int sender, std::vector<uint8_t>& d) {
    if (sender != from || d[1] != op) return;
    edit(d.data() + wire::kBaseHeaderSize);
    ASSERT_GT(wire::seal(d, wire::kBaseHeaderSize + wire::kConnectBodySize, 0), 0u);
  };
}

int accepted_events(Endpoint& ep) {
  int n = 0;
  Event ev;
  while (ep.poll_event(ev)) n += ev.kind == EventKind::kAccepted;
  return n;
}

// CONN-3: a CONNECT_REQ replayed from another address with the nonce of an
// accepted connection is refused and does not take the nonce over, so the
// original requester's repeated request still draws the same ACCEPT and
// creates no second connection.
TEST(Handshake, ReplayedNonceFromAnotherPeerIsRefused) {
  Loop loop(cfg(301), cfg(302));
  std::vector<uint8_t> req;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == kConnectReq) req = d;
  };
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  ASSERT_FALSE(req.empty());
  EXPECT_EQ(accepted_events(loop.ep(1)), 0);  // connect() took the first

  deliver(loop, 1, other_addr(), req);
  auto out = sent(loop, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][1], kConnectReject);
  EXPECT_EQ(accepted_events(loop.ep(1)), 0);

  deliver(loop, 1, loop.addr(0), req);  // the requester's ACCEPT was lost
  out = sent(loop, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][1], kConnectAccept);
  EXPECT_EQ(be::load32(out[0].data() + wire::kBaseHeaderSize), b.v);  // the same connection
  EXPECT_EQ(accepted_events(loop.ep(1)), 0);
  EXPECT_EQ(loop.ep(1).endpoint_stats().connects_refused, 1u);
}

// CONN-7: a requester still connecting knows no peer connection id, so a
// DISCONNECT from the peer's address with src_conn 0 and a guessed dst_conn
// matches nothing; the connection comes up when the ACCEPT arrives.
TEST(Handshake, DisconnectDoesNotEndAConnectingConnection) {
  Loop loop(cfg(303), cfg(304));
  bool hold_accept = true;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return hold_accept && from == 1 && d[1] == kConnectAccept;
  };
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  loop.run_until([] { return false; }, 3'000'000);  // a REQ or two, ACCEPTs lost
  std::vector<uint8_t> disc(wire::kBaseHeaderSize + wire::kDisconnectBodySize + wire::kIcrcSize);
  wire::BaseHeader bh;
  bh.opcode = wire::Opcode::kDisconnect;
  bh.dst_conn = a.v;
  const size_t h = wire::write_disconnect(disc, bh, wire::DisconnectBody{0, 0});
  disc.resize(wire::seal(disc, h, 0));
  deliver(loop, 0, loop.addr(1), disc);
  Event ev;
  while (loop.ep(0).poll_event(ev)) EXPECT_NE(ev.kind, EventKind::kClosed);
  hold_accept = false;
  bool up = false;
  EXPECT_TRUE(loop.run_until([&] {
    while (loop.ep(0).poll_event(ev)) up |= ev.kind == EventKind::kConnected;
    return up;
  }));
  EXPECT_TRUE(loop.ep(0).is_established(a));
}

// CONN-7, BAD-7: a DISCONNECT is answered again only while it repeats the one
// that closed a connection a moment ago, from that connection's peer; one
// for any other unknown id, or from another address, draws nothing (the
// reply would go to whatever address the sender forged) and is counted.
TEST(Handshake, OnlyARepeatedDisconnectIsAnsweredForAConnectionGone) {
  Loop loop(cfg(305), cfg(306));
  auto [a, b] = loop.connect();
  std::vector<uint8_t> disc;
  int acks = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == kDisconnect) disc = d;
    if (from == 1 && d[1] == kDisconnectAck) ++acks;
  };
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 1 && d[1] == kDisconnectAck && acks == 1;  // the first ACK is lost
  };
  loop.ep(0).close(a, loop.now());
  bool closed = false;
  ASSERT_TRUE(loop.run_until([&] {
    Event ev;
    while (loop.ep(0).poll_event(ev)) closed |= ev.kind == EventKind::kClosed;
    return closed;
  }));
  EXPECT_EQ(acks, 2);  // the repeat was answered
  ASSERT_FALSE(disc.empty());
  EXPECT_FALSE(loop.ep(1).is_established(b));
  EXPECT_EQ(loop.ep(1).peer_of(b), loop.addr(0));  // for the driver (resolve_peer)

  const uint64_t unknown = loop.ep(1).endpoint_stats().unknown_connection;
  deliver(loop, 1, other_addr(), disc);
  EXPECT_TRUE(sent(loop, 1).empty());
  std::vector<uint8_t> guess = disc;  // another id, from the peer's address
  guess[7] ^= 0x40;
  ASSERT_GT(wire::seal(guess, wire::kBaseHeaderSize + wire::kDisconnectBodySize, 0), 0u);
  deliver(loop, 1, loop.addr(0), guess);
  EXPECT_TRUE(sent(loop, 1).empty());
  EXPECT_EQ(loop.ep(1).endpoint_stats().unknown_connection, unknown + 2);

  deliver(loop, 1, loop.addr(0), disc);
  auto out = sent(loop, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][1], kDisconnectAck);

  // Once the peer's DISCONNECTs have surely stopped, the id is forgotten.
  const EndpointConfig c = cfg(306);
  deliver(loop, 1, loop.addr(0), disc, c.connect_attempts * c.connect_retry_ns + 1);
  EXPECT_EQ(loop.ep(1).peer_of(b).len, 0u);
  EXPECT_TRUE(sent(loop, 1).empty());
}

// CONN-1, CONN-3: an end that offers an mtu below 256 breaks CONN-1; raising
// its offer to 256 would send it larger packets than it accepts, so a
// CONNECT_REQ offering one is refused, and so is a CONNECT_ACCEPT.
TEST(Handshake, OfferBelowTheLeastMtuIsRefused) {
  for (const int from_end : {0, 1}) {
    SCOPED_TRACE(from_end == 0 ? "CONNECT_REQ" : "CONNECT_ACCEPT");
    Loop loop(cfg(307), cfg(308));
    edit_connect_body(loop, from_end, from_end == 0 ? kConnectReq : kConnectAccept,
                      [](uint8_t* body) {
                        body[8] = 0;  // mtu 200
                        body[9] = 200;
                      });
    const Event ev = first_connect_event(loop);
    EXPECT_EQ(ev.kind, EventKind::kConnectFailed);
    EXPECT_EQ(ev.status, Status::kConnectRefused);
    EXPECT_EQ(accepted_events(loop.ep(1)), from_end == 0 ? 0 : 1);
  }
}

// CONN-3: a copy of the CONNECT_REQ delayed in the network past the close of
// the connection it opened (whichever end closed) makes no new connection:
// the requester is gone or does not expect an ACCEPT, and the responder's
// application would be handed a connection that no one uses. A new request
// from the same peer still connects.
TEST(Handshake, ARequestDelayedPastTheCloseMakesNoConnection) {
  for (const int closer : {0, 1}) {
    SCOPED_TRACE(closer);
    Loop loop(cfg(309), cfg(310));
    std::vector<uint8_t> req;
    loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
      if (from == 0 && d[1] == kConnectReq) req = d;
    };
    auto [a, b] = loop.connect();
    ASSERT_TRUE(a.valid() && b.valid());
    EXPECT_EQ(accepted_events(loop.ep(1)), 0);  // connect() took it
    loop.ep(closer).close(closer == 0 ? a : b, loop.now());
    ASSERT_TRUE(run_until_both_closed(loop));
    deliver(loop, 1, loop.addr(0), req);
    EXPECT_EQ(accepted_events(loop.ep(1)), 0);
    EXPECT_TRUE(sent(loop, 1).empty());
    auto [a2, b2] = loop.connect();
    EXPECT_TRUE(a2.valid() && b2.valid());
  }
}

// CONN-2: a resend the retry timer asked for does not leave once the ACCEPT
// has come (it counted against the DISCONNECT budget of a quick close).
TEST(Handshake, NoRequestLeavesAfterTheAccept) {
  Loop loop(cfg(311), cfg(312));
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  auto req = sent(loop, 0);
  ASSERT_EQ(req.size(), 1u);
  deliver(loop, 1, loop.addr(0), req[0]);
  auto acc = sent(loop, 1);
  ASSERT_EQ(acc.size(), 1u);
  ASSERT_EQ(acc[0][1], kConnectAccept);
  const TimeNs t = loop.ep(0).next_timeout();  // the retry timer
  ASSERT_LE(t.ns, loop.now().ns + cfg(311).connect_retry_ns + 1);
  loop.ep(0).handle_timeout(t);  // a resend is due
  loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 1234, false, acc[0]}, t);
  ASSERT_TRUE(loop.ep(0).is_established(a));
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  while (loop.ep(0).poll_transmit(t, buf, tx)) EXPECT_NE(buf[1], kConnectReq);
}

// CONN-3: an ACCEPT without the responder's connection id (0, which no end
// picks) is malformed; taking it would name connection 0 in every packet.
TEST(Handshake, AcceptWithoutAConnectionIdIsIgnored) {
  Loop loop(cfg(313), cfg(314));
  edit_connect_body(loop, 1, kConnectAccept, [](uint8_t* body) {
    for (size_t i = 0; i < 4; ++i) body[i] = 0;  // src_conn
  });
  const Event ev = first_connect_event(loop);
  EXPECT_EQ(ev.kind, EventKind::kConnectFailed);
  EXPECT_EQ(ev.status, Status::kConnectTimeout);
}

// CONN-7: a DISCONNECT_ACK ends a closing connection only if it names the
// peer's connection id, as a DISCONNECT must.
TEST(Handshake, DisconnectAckForAnotherConnectionIdIsIgnored) {
  Loop loop(cfg(315), cfg(316));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  loop.ep(0).close(a, loop.now());
  std::vector<uint8_t> ack(wire::kBaseHeaderSize + wire::kDisconnectBodySize + wire::kIcrcSize);
  wire::BaseHeader bh;
  bh.opcode = wire::Opcode::kDisconnectAck;
  bh.dst_conn = a.v;
  const size_t h = wire::write_disconnect(ack, bh, wire::DisconnectBody{b.v ^ 0x10000, 0});
  ack.resize(wire::seal(ack, h, 0));
  deliver(loop, 0, loop.addr(1), ack);
  Event ev;
  while (loop.ep(0).poll_event(ev)) EXPECT_NE(ev.kind, EventKind::kClosed);
  bool closed = false;
  ASSERT_TRUE(loop.run_until([&] {
    while (loop.ep(0).poll_event(ev)) {
      if (ev.kind != EventKind::kClosed) continue;
      closed = true;
      EXPECT_EQ(ev.status, Status::kOk);  // the real DISCONNECT_ACK came
    }
    return closed;
  }));
}

// CONN-2, CONN-7: handshake and teardown packets try the connection's paths
// in turn. Here every datagram on either end's first path is lost (a dead
// link both ways): on that path alone the connect timed out, and the close
// ended kPeerUnreachable with the peer left open.
TEST(Handshake, ResendsTryTheOtherPaths) {
  Loop loop(cfg(317), cfg(318));
  std::optional<uint16_t> dead[2];
  bool lost = false;
  loop.on_sent = [&](int from, const TxDatagram& tx, const std::vector<uint8_t>&) {
    if (!dead[from]) dead[from] = tx.entropy;
    lost = tx.entropy == *dead[from];
  };
  loop.drop = [&](int, const std::vector<uint8_t>&) { return lost; };
  const Event ev = first_connect_event(loop);
  ASSERT_EQ(ev.kind, EventKind::kConnected);
  loop.ep(0).close(ev.conn, loop.now());
  Event got;
  std::optional<Status> closed[2];
  ASSERT_TRUE(loop.run_until([&] {
    for (int i = 0; i < 2; ++i)
      while (loop.ep(i).poll_event(got))
        if (got.kind == EventKind::kClosed) closed[i] = got.status;
    return closed[0] && closed[1];
  }));
  EXPECT_EQ(closed[0], Status::kOk);
  EXPECT_EQ(closed[1], Status::kPeerClosed);
}

// CONN-1, section 3.12: every CONNECT_REQ, resends too, names the port the
// driver configured (reply_port; 0 by default, the request's source port),
// and ACCEPT and REJECT name none, whatever the responder's own setting.
// The engine only writes the field: the address it names is the driver's.
TEST(Handshake, RequestsNameTheReplyPortAnswersNone) {
  const auto reply_port = [](const std::vector<uint8_t>& d) {
    wire::Packet p;
    EXPECT_EQ(wire::decode(d, p), wire::ParseError::kOk);
    return p.connect.reply_port;
  };
  for (const uint16_t port : {uint16_t{0}, uint16_t{4792}}) {
    SCOPED_TRACE(port);
    EndpointConfig a = cfg(319);
    a.reply_port = port;
    EndpointConfig b = cfg(320);
    b.reply_port = 5000;
    Loop loop(a, b);
    ConnId c;
    ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), c), Status::kOk);
    auto req = sent(loop, 0);
    ASSERT_EQ(req.size(), 1u);
    EXPECT_EQ(reply_port(req[0]), port);
    const TimeNs t = loop.ep(0).next_timeout();  // CONN-2's resend
    loop.ep(0).handle_timeout(t);
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    ASSERT_TRUE(loop.ep(0).poll_transmit(t, buf, tx));
    const std::vector<uint8_t> again(buf.begin(), buf.begin() + static_cast<long>(tx.len));
    ASSERT_EQ(again[1], kConnectReq);
    EXPECT_EQ(reply_port(again), port);
    deliver(loop, 1, loop.addr(0), req[0]);
    auto acc = sent(loop, 1);
    ASSERT_EQ(acc.size(), 1u);
    ASSERT_EQ(acc[0][1], kConnectAccept);
    EXPECT_EQ(reply_port(acc[0]), 0u);
  }
  EndpointConfig closed = cfg(322);
  closed.accept_incoming = false;
  closed.reply_port = 5000;
  EndpointConfig a = cfg(321);
  a.reply_port = 4792;
  Loop loop(a, closed);
  ConnId c;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), c), Status::kOk);
  auto req = sent(loop, 0);
  ASSERT_EQ(req.size(), 1u);
  deliver(loop, 1, loop.addr(0), req[0]);
  auto rej = sent(loop, 1);
  ASSERT_EQ(rej.size(), 1u);
  ASSERT_EQ(rej[0][1], kConnectReject);
  EXPECT_EQ(reply_port(rej[0]), 0u);
}

// CONN-3: the ACCEPT carries as mtu and window_log2 the values the connection
// runs with, the smaller of the request's and the responder's own, not the
// responder's own: a requester takes the smaller of its offer and the
// ACCEPT's, so either reading agrees, and a responder offering less than
// 64 packets still carries the least window, 6.
TEST(Handshake, AcceptCarriesTheAgreedMtuAndWindow) {
  EndpointConfig small = cfg(323);
  small.mtu = 1024;
  small.window_log2 = 7;
  Loop loop(small, cfg(324));  // the responder's own: 4096, 10
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  auto req = sent(loop, 0);
  ASSERT_EQ(req.size(), 1u);
  deliver(loop, 1, loop.addr(0), req[0]);
  auto acc = sent(loop, 1);
  ASSERT_EQ(acc.size(), 1u);
  wire::Packet p;
  ASSERT_EQ(wire::decode(acc[0], p), wire::ParseError::kOk);
  ASSERT_EQ(p.bh.opcode, wire::Opcode::kConnectAccept);
  EXPECT_EQ(p.connect.mtu, 1024u);
  EXPECT_EQ(p.connect.window_log2, 7u);
  EXPECT_EQ(p.connect.max_reads, cfg(324).max_reads);  // its own: not negotiated
}

// CONN-4: a REJECT whose code is none of 0x47, 0x48 and 0x4a fails the
// connection with kConnectRefused; the code is not passed on (it could name
// a local status, or a NAK code, that says nothing of a refusal).
TEST(Handshake, RejectWithAnotherCodeIsARefusal) {
  for (const uint8_t code : {uint8_t{0x00}, uint8_t{0x02}, uint8_t{0x49}, uint8_t{0xff}}) {
    SCOPED_TRACE(static_cast<int>(code));
    EndpointConfig closed = cfg(326);
    closed.accept_incoming = false;
    Loop loop(cfg(325), closed);
    edit_connect_body(loop, 1, kConnectReject, [code](uint8_t* body) { body[12] = code; });
    const Event ev = first_connect_event(loop);
    EXPECT_EQ(ev.kind, EventKind::kConnectFailed);
    EXPECT_EQ(ev.status, Status::kConnectRefused);
  }
}

// CONN-7: a close whose DISCONNECTs all go unanswered ends after
// connect_attempts of them, connect_retry apart, as a connect would: the
// connection is gone, its event kClosed with kPeerUnreachable.
TEST(Handshake, UnansweredDisconnectsEndTheCloseAfterTheBudget) {
  Loop loop(cfg(327), cfg(328));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  int disconnects = 0;
  TimeNs first = TimeNs::never(), last = TimeNs::never();
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from != 0 || d[1] != kDisconnect) return;
    ++disconnects;
    if (first == TimeNs::never()) first = loop.now();
    last = loop.now();
  };
  loop.drop = [&](int from, const std::vector<uint8_t>&) { return from == 0; };
  loop.ep(0).close(a, loop.now());
  std::optional<Event> closed;
  TimeNs closed_at = TimeNs::never();
  ASSERT_TRUE(loop.run_until([&] {
    Event ev;
    while (loop.ep(0).poll_event(ev))
      if (ev.kind == EventKind::kClosed) {
        closed = ev;
        closed_at = loop.now();
      }
    return closed.has_value();
  }));
  const EndpointConfig c = cfg(327);
  EXPECT_EQ(closed->status, Status::kPeerUnreachable);
  EXPECT_EQ(disconnects, static_cast<int>(c.connect_attempts));
  EXPECT_EQ(last.ns - first.ns, (c.connect_attempts - 1) * c.connect_retry_ns);
  EXPECT_EQ(closed_at.ns - last.ns, c.connect_retry_ns);
  loop.run_until([] { return false; }, 100'000'000);
  EXPECT_EQ(disconnects, static_cast<int>(c.connect_attempts));
}

// ENC-5, INT-2: the packets an endpoint sends for no connection of its own,
// a REJECT and the DISCONNECT_ACK of a connection gone, carry PC as its
// configuration says, like every other packet it sends, and their tsval:
// a peer that sends with the UDP checksum off (cover_payload) sets PC in
// every packet. (They left with PC clear and tsval 0.)
TEST(Handshake, AnswersForNoConnectionCarryPcAndTsval) {
  EndpointConfig closed = cfg(330);
  closed.accept_incoming = false;
  Loop loop(cfg(329), closed);
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a), Status::kOk);
  auto req = sent(loop, 0);
  ASSERT_EQ(req.size(), 1u);
  const uint64_t later = 12345;
  deliver(loop, 1, loop.addr(0), req[0], later);
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  ASSERT_TRUE(loop.ep(1).poll_transmit(loop.now() + later, buf, tx));
  wire::Packet p;
  ASSERT_EQ(wire::decode(std::span<const uint8_t>(buf.data(), tx.len), p), wire::ParseError::kOk);
  ASSERT_EQ(p.bh.opcode, wire::Opcode::kConnectReject);
  EXPECT_EQ(p.bh.flags, wire::kFlagPayloadCovered);
  EXPECT_EQ(p.bh.tsval, static_cast<uint32_t>(loop.now().ns + later));
}

}  // namespace
}  // namespace metaroce::test
