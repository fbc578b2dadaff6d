// Handshake and teardown against crafted or replayed connection packets
// (spec CONN-*, BAD-7): datagrams handed straight to an endpoint, and what it
// sends back read off poll_transmit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>
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

// Endpoint 0 closes its connection a and runs until endpoint `at` reports
// a connection closed: false if it never does.
bool close_until_closed_at(Loop& loop, ConnId a, int at) {
  loop.ep(0).close(a, loop.now());
  bool closed = false;
  return loop.run_until([&] {
    Event ev;
    while (loop.ep(at).poll_event(ev)) closed |= ev.kind == EventKind::kClosed;
    return closed;
  });
}

PeerAddr other_addr() {
  PeerAddr p;
  p.len = 1;
  p.bytes[0] = 'C';
  return p;
}

// The address an endpoint driven by hand (CONN-10) is reached at.
PeerAddr own_addr() {
  PeerAddr p;
  p.len = 1;
  p.bytes[0] = 'S';
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

// Starts connection `conn` from endpoint 0 to 1: `req` is the CONNECT_REQ
// it sends at once, a failure unless that is all it sends.
::testing::AssertionResult connect_request(Loop& loop, ConnId& conn, std::vector<uint8_t>& req) {
  if (const Status s = loop.ep(0).connect(loop.addr(1), loop.now(), conn); s != Status::kOk)
    return ::testing::AssertionFailure() << "connect: " << status_name(s);
  auto out = sent(loop, 0);
  if (out.size() != 1) return ::testing::AssertionFailure() << out.size() << " datagrams sent";
  req = std::move(out[0]);
  return ::testing::AssertionSuccess();
}

// Hands endpoint 1 `req` from endpoint 0's address: `reply` is its answer, a
// failure unless it answers with exactly one datagram.
::testing::AssertionResult answer_of(Loop& loop, const std::vector<uint8_t>& req,
                                     std::vector<uint8_t>& reply) {
  deliver(loop, 1, loop.addr(0), req);
  auto out = sent(loop, 1);
  if (out.size() != 1) return ::testing::AssertionFailure() << out.size() << " answers";
  reply = std::move(out[0]);
  return ::testing::AssertionSuccess();
}

// connect_request, then answer_of: a failure unless endpoint 1 answers with
// a CONNECT_ACCEPT (`acc`, not yet delivered), holding the connection.
::testing::AssertionResult request_accepted(Loop& loop, ConnId& a, std::vector<uint8_t>& req,
                                            std::vector<uint8_t>& acc) {
  if (auto r = connect_request(loop, a, req); !r) return r;
  if (auto r = answer_of(loop, req, acc); !r) return r;
  if (acc[1] != kConnectAccept) return ::testing::AssertionFailure() << "answered " << int{acc[1]};
  return ::testing::AssertionSuccess();
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

// Runs endpoint 0's timers, its requests going nowhere, until it reports
// kConnectFailed; `t` is left at the time of the timeout that ended it. A
// failure if 100 timeouts pass without it (CONN-8's budget is far fewer).
::testing::AssertionResult run_until_connect_failed(Loop& loop, TimeNs& t) {
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  Event ev;
  for (int i = 0; i < 100; ++i) {
    t = loop.ep(0).next_timeout();
    loop.ep(0).handle_timeout(t);
    while (loop.ep(0).poll_transmit(t, buf, tx)) {
    }
    bool failed = false;
    while (loop.ep(0).poll_event(ev)) failed |= ev.kind == EventKind::kConnectFailed;
    if (failed) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no kConnectFailed after 100 timeouts";
}

int accepted_events(Endpoint& ep) {
  int n = 0;
  Event ev;
  while (ep.poll_event(ev)) n += ev.kind == EventKind::kAccepted;
  return n;
}

// Loop::connect, keeping the CONNECT_REQ endpoint 0 sent in `req` (for a
// test to deliver again, late or from elsewhere).
std::pair<ConnId, ConnId> connect_keeping_request(Loop& loop, std::vector<uint8_t>& req) {
  loop.on_sent = [&req](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == kConnectReq) req = d;
  };
  return loop.connect();
}

// CONN-3: a CONNECT_REQ replayed from another address with the nonce of an
// accepted connection is refused and does not take the nonce over, so the
// original requester's repeated request still draws the same ACCEPT and
// creates no second connection.
TEST(Handshake, ReplayedNonceFromAnotherPeerIsRefused) {
  Loop loop(cfg(301), cfg(302));
  std::vector<uint8_t> req;
  auto [a, b] = connect_keeping_request(loop, req);
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
  ASSERT_TRUE(close_until_closed_at(loop, a, 0));
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

// engine.hpp's peer_of: a connection that our own close ended, its
// DISCONNECT answered, names its peer for as long as its record lasts,
// max(connect_attempts, disconnect_attempts) x connect_retry_ns (8 x 10 ms),
// as one the peer's DISCONNECT closed does; then nothing.
TEST(Handshake, OurOwnClosedConnectionNamesItsPeerWhileItsRecordLasts) {  // CONN-7
  Loop loop(cfg(311), cfg(312));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(close_until_closed_at(loop, a, 0));
  const TimeNs closed_at = loop.now();
  EXPECT_EQ(loop.ep(0).peer_of(a), loop.addr(1));
  loop.pass_time(79 * kMillisecond);
  loop.ep(0).handle_timeout(loop.now());
  EXPECT_EQ(loop.ep(0).peer_of(a), loop.addr(1));
  loop.pass_time(closed_at.ns + 81 * kMillisecond - loop.now().ns);
  loop.ep(0).handle_timeout(loop.now());
  EXPECT_EQ(loop.ep(0).peer_of(a).len, 0u);
  (void)b;
}

// CONN-7: a closed connection's record lasts its peer's resends, however
// far they reach: 65,535 DISCONNECTs a day apart (the most config_error
// allows) from a clock 150 years short of 2^64 ns pass what it holds. The
// record's end wrapped to a time already passed, and the repeated
// DISCONNECT, its ACK lost, went unanswered (BAD-7).
TEST(Handshake, ACloseRemembersThePeersResendsPastTheClocksEnd) {
  EndpointConfig c0 = cfg(309), c1 = cfg(310);
  for (EndpointConfig* c : {&c0, &c1}) {
    c->connect_retry_ns = kMaxDurationNs;
    c->disconnect_attempts = UINT16_MAX;
    ASSERT_EQ(config_error(*c), "");
  }
  Loop loop(c0, c1);
  constexpr uint64_t kYear = 365 * 24 * 3600 * kSecond;
  loop.pass_time(UINT64_MAX - 150 * kYear - loop.now().ns);
  auto [a, b] = loop.connect();
  ASSERT_TRUE(loop.ep(1).is_established(b));
  std::vector<uint8_t> disc;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == kDisconnect) disc = d;
  };
  ASSERT_TRUE(close_until_closed_at(loop, a, 1));
  ASSERT_FALSE(disc.empty());
  EXPECT_EQ(loop.ep(1).peer_of(b), loop.addr(0));
  // A day on, the peer's resends have barely started: the repeat is answered.
  deliver(loop, 1, loop.addr(0), disc, kMaxDurationNs);
  auto out = sent(loop, 1);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][1], kDisconnectAck);
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
    // The REJECT's code; kOk for the ACCEPT, which no REJECT gives.
    EXPECT_EQ(ev.reason, from_end == 0 ? Status::kConnectRefused : Status::kOk);
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
    auto [a, b] = connect_keeping_request(loop, req);
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

// CONN-10: an endpoint connects to its own address (an MPI rank sending to
// itself through the transport, as Open MPI's OFI layer does). Its request
// comes back to it with its own nonce; it used to be refused as a nonce
// taken (kConnectRefused). Now two connections are made, one each way, and
// data, a repeated request and the close go as between two endpoints.
TEST(Handshake, AnEndpointConnectsToItsOwnAddress) {
  Endpoint ep(cfg(352));
  const PeerAddr self = own_addr();
  TimeNs now{1'000'000};
  std::vector<std::vector<uint8_t>> sent_reqs;
  // Everything the endpoint sends comes back to it 2 us later.
  auto run = [&](uint64_t ns) {
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    const TimeNs end = now + ns;
    while (now < end) {
      std::vector<std::pair<uint16_t, std::vector<uint8_t>>> out;
      while (ep.poll_transmit(now, buf, tx)) {
        out.emplace_back(tx.entropy, std::vector<uint8_t>(buf.begin(), buf.begin() + tx.len));
        if (buf[1] == kConnectReq) sent_reqs.push_back(out.back().second);
      }
      now = now + 2000;
      for (auto& [entropy, bytes] : out)
        ep.handle_datagram(RxDatagram{self, entropy, false, bytes}, now);
      if (ep.next_timeout() <= now) ep.handle_timeout(now);
    }
  };
  ConnId a, b;
  ASSERT_EQ(ep.connect(self, now, a), Status::kOk);
  run(100'000);
  bool connected = false;
  Event ev;
  while (ep.poll_event(ev)) {
    EXPECT_EQ(ev.status, Status::kOk);
    if (ev.kind == EventKind::kConnected && ev.conn == a) connected = true;
    if (ev.kind == EventKind::kAccepted) b = ev.conn;
  }
  ASSERT_TRUE(connected);
  ASSERT_TRUE(b.valid());
  EXPECT_NE(a, b);
  EXPECT_TRUE(ep.is_established(a));
  EXPECT_TRUE(ep.is_established(b));
  EXPECT_EQ(ep.endpoint_stats().connects_refused, 0u);

  // A repeat of the request (CONN-2) draws the ACCEPT again, and no third
  // connection.
  ASSERT_EQ(sent_reqs.size(), 1u);
  ep.handle_datagram(RxDatagram{self, 50000, false, sent_reqs[0]}, now);
  run(100'000);
  while (ep.poll_event(ev)) ADD_FAILURE() << "event " << static_cast<int>(ev.kind);

  // A WRITE from one half of a buffer to the other, over the connection a.
  Buf mem(ep, 2 * 65536, kAccessLocalWrite | kAccessRemoteWrite);
  pattern(mem.bytes, 3);
  std::fill(mem.bytes.begin() + 65536, mem.bytes.end(), 0);
  ASSERT_EQ(ep.post_send(a, write_wr(mem, mem, 65536, 7, 65536)), Status::kOk);
  run(1'000'000);
  Completion c;
  ASSERT_TRUE(ep.poll_completion(c));
  EXPECT_EQ(c.wr_id, 7u);
  EXPECT_EQ(c.status, Status::kOk);
  EXPECT_TRUE(std::equal(mem.bytes.begin(), mem.bytes.begin() + 65536, mem.bytes.begin() + 65536));

  // The close of one ends the other as a peer's close would (CONN-7).
  ep.close(a, now);
  run(1'000'000);
  int closed = 0;
  while (ep.poll_event(ev))
    if (ev.kind == EventKind::kClosed) ++closed;
  EXPECT_EQ(closed, 2);
  EXPECT_FALSE(ep.is_established(a));
  EXPECT_FALSE(ep.is_established(b));
}

// CONN-10 with CONN-3: the responder's half of a connection to itself takes
// the request's nonce over from the requester's. The requester's half given
// up while CONNECTING (its ACCEPT lost, then closed) must leave the nonce with
// the responder's half: a delayed repeat of the request then draws that
// half's ACCEPT again. Before the nonce's owner was checked, the requester's
// end dropped it, and the repeat made a third connection, kAccepted again.
TEST(Handshake, ARepeatOfItsOwnRequestAfterItsRequesterGaveUpFindsTheResponder) {
  Endpoint ep(cfg(353));
  const PeerAddr self = own_addr();
  TimeNs now{1'000'000};
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  auto sent_now = [&] {
    std::vector<std::vector<uint8_t>> out;
    while (ep.poll_transmit(now, buf, tx)) out.emplace_back(buf.begin(), buf.begin() + tx.len);
    return out;
  };
  auto accepted = [&] {
    int n = 0;
    Event ev;
    while (ep.poll_event(ev))
      if (ev.kind == EventKind::kAccepted) ++n;
    return n;
  };
  ConnId a;
  ASSERT_EQ(ep.connect(self, now, a), Status::kOk);
  auto out = sent_now();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0][1], kConnectReq);
  const std::vector<uint8_t> req = out[0];
  now = now + 2000;
  ep.handle_datagram(RxDatagram{self, 1234, false, req}, now);
  EXPECT_EQ(accepted(), 1);
  out = sent_now();  // the ACCEPT, lost
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0][1], kConnectAccept);
  ep.close(a, now);
  EXPECT_TRUE(sent_now().empty());  // a close while connecting sends nothing

  now = now + 2000;
  ep.handle_datagram(RxDatagram{self, 1234, false, req}, now);
  EXPECT_EQ(accepted(), 0);
  out = sent_now();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0][1], kConnectAccept);
  EXPECT_EQ(ep.endpoint_stats().connects_refused, 0u);
}

// CONN-7: a requester whose connection ended while CONNECTING (closed, or
// its requests unanswered) after a request reached the responder answers
// the ACCEPT that comes late with one DISCONNECT, which closes the
// responder's connection; before, that connection stayed open for ever with
// nothing to time it out. Its reason: 0 for a close, kConnectTimeout for the
// unanswered requests (CONN-8). An ACCEPT naming another nonce draws nothing.
TEST(Handshake, ALateAcceptOfAConnectionThatEndedWhileConnectingDrawsADisconnect) {
  for (const bool timed_out : {false, true}) {
    SCOPED_TRACE(timed_out ? "unanswered" : "closed");
    Loop loop(cfg(341), cfg(342));
    ConnId a;
    std::vector<uint8_t> req, acc;
    ASSERT_TRUE(request_accepted(loop, a, req, acc));  // endpoint 1 now holds a connection
    Event ev;
    ConnId b;
    while (loop.ep(1).poll_event(ev))
      if (ev.kind == EventKind::kAccepted) b = ev.conn;
    ASSERT_TRUE(b.valid());
    TimeNs t = loop.now();
    if (timed_out) {
      ASSERT_TRUE(run_until_connect_failed(loop, t));
    } else {
      loop.ep(0).close(a, t);
      EXPECT_TRUE(sent(loop, 0).empty());  // a close while connecting sends nothing
    }
    const uint64_t unknown = loop.ep(0).endpoint_stats().unknown_connection;
    std::vector<uint8_t> stranger = acc;        // another request's nonce
    stranger[wire::kBaseHeaderSize + 23] ^= 1;  // the nonce's last byte (offset 32)
    ASSERT_GT(wire::seal(stranger, wire::kBaseHeaderSize + wire::kConnectBodySize, 0), 0u);
    loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 1234, false, stranger}, t + 1000);
    loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 1234, false, acc}, t + 2000);
    EXPECT_EQ(loop.ep(0).endpoint_stats().unknown_connection, unknown + 1);  // the stranger
    std::vector<std::vector<uint8_t>> out;
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    while (loop.ep(0).poll_transmit(t + 2000, buf, tx))
      out.emplace_back(buf.begin(), buf.begin() + static_cast<long>(tx.len));
    ASSERT_EQ(out.size(), 1u);
    wire::Packet d;
    ASSERT_EQ(wire::decode(out[0], d), wire::ParseError::kOk);
    ASSERT_EQ(d.bh.opcode, wire::Opcode::kDisconnect);
    EXPECT_EQ(d.disconnect.reason,
              static_cast<uint8_t>(timed_out ? Status::kConnectTimeout : Status::kOk));
    loop.ep(1).handle_datagram(RxDatagram{loop.addr(0), 1234, false, out[0]}, t + 3000);
    bool closed = false;
    while (loop.ep(1).poll_event(ev))
      if (ev.kind == EventKind::kClosed && ev.conn == b) {
        closed = true;
        EXPECT_EQ(ev.status, Status::kPeerClosed);
      }
    EXPECT_TRUE(closed);
    EXPECT_FALSE(loop.ep(1).is_established(b));
  }
}

// Section 4, CONN-7: a requester remembers a connection it gave up while
// CONNECTING for 65,535 x connect_retry, however late within that the
// responder's ACCEPT comes. It was remembered only connect_attempts x
// connect_retry (80 ms): a responder slow to read the request (the UDP
// driver's, 150 ms) held an established connection that nobody used until
// its keepalive ended it, 12 s later (and peer_of, by which the UDP driver
// knows the ACCEPT's source, forgot it as soon). At the limit (64 records
// with max_connections 64) the 64th connection given up after it pushes it
// out, counted: the ACCEPT then draws nothing.
TEST(Handshake, AnAcceptLongAfterTheConnectionWasGivenUpDrawsADisconnectUntilPushedOut) {
  for (const bool timed_out : {false, true}) {
    SCOPED_TRACE(timed_out ? "unanswered" : "closed");
    EndpointConfig c0 = cfg(345);
    c0.max_connections = 64;
    Loop loop(c0, cfg(346));
    ConnId a;
    std::vector<uint8_t> req, acc;
    ASSERT_TRUE(request_accepted(loop, a, req, acc));
    Event ev;
    ConnId b;
    while (loop.ep(1).poll_event(ev))
      if (ev.kind == EventKind::kAccepted) b = ev.conn;
    ASSERT_TRUE(b.valid());
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    TimeNs t = loop.now();
    if (timed_out) {
      ASSERT_TRUE(run_until_connect_failed(loop, t));
    } else {
      loop.ep(0).close(a, t);
    }
    // Everything endpoint 0 answers `accept` with at `at`.
    const auto answers = [&](TimeNs at) {
      loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 1234, false, acc}, at);
      std::vector<wire::Packet> out;
      while (loop.ep(0).poll_transmit(at, buf, tx)) {
        wire::Packet d;
        EXPECT_EQ(wire::decode(std::span<const uint8_t>(buf.data(), tx.len), d),
                  wire::ParseError::kOk);
        out.push_back(d);
      }
      return out;
    };
    // A minute: past the 80 ms, the peer_timeout and the keepalive alike.
    TimeNs late = t + 60 * kSecond;
    auto out = answers(late);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].bh.opcode, wire::Opcode::kDisconnect);
    EXPECT_EQ(out[0].bh.dst_conn, b.v);
    EXPECT_EQ(out[0].disconnect.reason,
              static_cast<uint8_t>(timed_out ? Status::kConnectTimeout : Status::kOk));
    // The UDP driver learns from it whose entropy port the ACCEPT left from:
    // without it the ACCEPT reads as from another peer, and draws nothing.
    EXPECT_EQ(loop.ep(0).peer_of(a), loop.addr(1));
    // 63 more connections given up after their request left keep it; the 64th
    // pushes it out.
    for (int i = 0; i < 64; ++i) {
      SCOPED_TRACE(i);
      late = late + kMillisecond;
      ConnId g;
      ASSERT_EQ(loop.ep(0).connect(loop.addr(1), late, g), Status::kOk);
      int sent_now = 0;
      while (loop.ep(0).poll_transmit(late, buf, tx)) ++sent_now;
      ASSERT_EQ(sent_now, 1);  // its request
      loop.ep(0).close(g, late);
      if (i == 62) {
        EXPECT_EQ(answers(late).size(), 1u);
      }
    }
    const uint64_t unknown = loop.ep(0).endpoint_stats().unknown_connection;
    EXPECT_TRUE(answers(late).empty());
    EXPECT_EQ(loop.ep(0).endpoint_stats().unknown_connection, unknown + 1);
    EXPECT_EQ(loop.ep(0).peer_of(a).len, 0u);
    EXPECT_EQ(loop.ep(0).endpoint_stats().closed_records_dropped, 1u);
  }
}

// CONN-2: a resend the retry timer asked for does not leave once the ACCEPT
// has come (it counted against the DISCONNECT budget of a quick close).
TEST(Handshake, NoRequestLeavesAfterTheAccept) {
  Loop loop(cfg(311), cfg(312));
  ConnId a;
  std::vector<uint8_t> req, acc;
  ASSERT_TRUE(request_accepted(loop, a, req, acc));
  const TimeNs t = loop.ep(0).next_timeout();  // the retry timer
  ASSERT_LE(t.ns, loop.now().ns + cfg(311).connect_retry_ns + 1);
  loop.ep(0).handle_timeout(t);  // a resend is due
  loop.ep(0).handle_datagram(RxDatagram{loop.addr(1), 1234, false, acc}, t);
  ASSERT_TRUE(loop.ep(0).is_established(a));
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  while (loop.ep(0).poll_transmit(t, buf, tx)) EXPECT_NE(buf[1], kConnectReq);
}

// CONN-6: a requester still CONNECTING knows neither the responder's id nor
// its initial PSN, so nothing of the connection that reaches it before the
// ACCEPT is answered or taken: the responder's WRITE (sent as soon as its
// ACCEPT left, the ACCEPT delayed), a PROBE of it (LOSS-8's tail-loss probe),
// an ACK and a NAK. Nothing is sent back, placed, counted or completed, and
// once the ACCEPT arrives the WRITE's resend lands.
TEST(Handshake, PacketsBeforeTheAcceptDrawNothing) {
  Loop loop(cfg(393), cfg(394));
  ConnId a;
  std::vector<uint8_t> req, acc;
  ASSERT_TRUE(request_accepted(loop, a, req, acc));
  Event ev;
  ASSERT_TRUE(loop.ep(1).poll_event(ev));
  ASSERT_EQ(ev.kind, EventKind::kAccepted);
  const ConnId b = ev.conn;
  Buf src(loop.ep(1), 4096, 0, 0x5a), dst(loop.ep(0), 4096, kAccessRemoteWrite, 0);
  ASSERT_EQ(loop.ep(1).post_send(b, write_wr(src, dst, 4096, 7)), Status::kOk);
  const auto out = sent(loop, 1);
  ASSERT_EQ(out.size(), 1u);
  const std::vector<uint8_t>& write = out[0];
  ASSERT_EQ(write[1], static_cast<uint8_t>(wire::Opcode::kWrite));
  wire::BaseHeader bh;
  bh.flags = wire::kFlagPayloadCovered;
  bh.dst_conn = a.v;
  std::vector<uint8_t> probe(128), ack(128), nak(128);
  bh.opcode = wire::Opcode::kProbe;
  bh.flags |= wire::kFlagAckRequested;
  bh.path_tag = static_cast<uint16_t>(write[2] << 8 | write[3]);
  probe.resize(wire::seal(probe, wire::write_probe(probe, bh), 0));
  bh.flags = wire::kFlagPayloadCovered;
  bh.path_tag = 0;
  bh.opcode = wire::Opcode::kAck;
  wire::AckBody body;
  body.cum_psn = 1;
  ack.resize(wire::seal(ack, wire::write_ack(ack, bh, body), 0));
  bh.opcode = wire::Opcode::kNak;
  nak.resize(wire::seal(nak, wire::write_nak(nak, bh, wire::NakBody{0, 0x02, 0, 1}), 0));
  for (const std::vector<uint8_t>* d :
       std::initializer_list<const std::vector<uint8_t>*>{&write, &probe, &ack, &nak}) {
    ASSERT_GT(d->size(), 0u);
    deliver(loop, 0, loop.addr(1), *d);
    EXPECT_TRUE(sent(loop, 0).empty()) << "opcode " << int{(*d)[1]} << " drew a reply";
  }
  EXPECT_FALSE(loop.ep(0).is_established(a));
  EXPECT_TRUE(loop.drain(0).empty());
  EXPECT_EQ(dst.bytes, std::vector<uint8_t>(4096, 0));
  const ConnStats* st = loop.ep(0).conn_stats(a);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->data_packets_received, 0u);
  EXPECT_EQ(st->acks_received, 0u);
  EXPECT_EQ(st->naks_received, 0u);
  EXPECT_EQ(loop.ep(0).endpoint_stats().unknown_connection, 0u);
  deliver(loop, 0, loop.addr(1), acc);
  ASSERT_TRUE(loop.ep(0).is_established(a));
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(1, 1, done));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(dst.bytes, src.bytes);
}

// CONN-3: a responder answers a repeated request with its ACCEPT again, so a
// requester may hear it after it is ESTABLISHED; that copy, and a REJECT
// carrying its nonce, change nothing there and draw nothing.
TEST(Handshake, AnAnswerToAnEstablishedConnectionIsIgnored) {
  Loop loop(cfg(395), cfg(396));
  ConnId a;
  std::vector<uint8_t> req, acc;
  ASSERT_TRUE(request_accepted(loop, a, req, acc));
  deliver(loop, 0, loop.addr(1), acc);
  ASSERT_TRUE(loop.ep(0).is_established(a));
  (void)sent(loop, 0);
  std::vector<uint8_t> rej = acc;
  rej[1] = kConnectReject;
  rej[wire::kBaseHeaderSize + 12] = static_cast<uint8_t>(Status::kConnectRefused);
  ASSERT_EQ(wire::seal(rej, wire::kBaseHeaderSize + wire::kConnectBodySize, 0), rej.size());
  for (const std::vector<uint8_t>* d :
       std::initializer_list<const std::vector<uint8_t>*>{&acc, &rej}) {
    deliver(loop, 0, loop.addr(1), *d);
    EXPECT_TRUE(sent(loop, 0).empty()) << "opcode " << int{(*d)[1]} << " drew a reply";
    EXPECT_TRUE(loop.ep(0).is_established(a));
  }
  Event ev;
  int connected = 0;
  while (loop.ep(0).poll_event(ev)) {
    EXPECT_EQ(ev.kind, EventKind::kConnected);
    ++connected;
  }
  EXPECT_EQ(connected, 1);
  Buf src(loop.ep(0), 4096, 0, 0x11), dst(loop.ep(1), 4096, kAccessRemoteWrite);
  EXPECT_TRUE(write_completes(loop, a, src, dst, 4096));
}

// CONN-2: a requester waits for an ACCEPT or REJECT carrying its nonce. One
// carrying another (an answer to an earlier request that used the same
// connection id, or a forgery) neither connects nor fails it; the true
// ACCEPT then connects it.
TEST(Handshake, AnAnswerWithAnotherNonceIsIgnored) {  // CONN-2, CONN-3
  Loop loop(cfg(399), cfg(400));
  ConnId a;
  std::vector<uint8_t> req, acc;
  ASSERT_TRUE(request_accepted(loop, a, req, acc));
  constexpr size_t kNonceLast = wire::kBaseHeaderSize + 23;  // body bytes 16-23, big-endian
  std::vector<uint8_t> other = acc;
  other[kNonceLast] ^= 1;
  ASSERT_EQ(wire::seal(other, wire::kBaseHeaderSize + wire::kConnectBodySize, 0), other.size());
  std::vector<uint8_t> rej = other;
  rej[1] = kConnectReject;
  rej[wire::kBaseHeaderSize + 12] = static_cast<uint8_t>(Status::kConnectRefused);
  ASSERT_EQ(wire::seal(rej, wire::kBaseHeaderSize + wire::kConnectBodySize, 0), rej.size());
  for (const std::vector<uint8_t>* d :
       std::initializer_list<const std::vector<uint8_t>*>{&other, &rej}) {
    deliver(loop, 0, loop.addr(1), *d);
    EXPECT_FALSE(loop.ep(0).is_established(a)) << "opcode " << int{(*d)[1]};
    Event ev;
    EXPECT_FALSE(loop.ep(0).poll_event(ev)) << "opcode " << int{(*d)[1]} << " drew an event";
  }
  deliver(loop, 0, loop.addr(1), acc);
  EXPECT_TRUE(loop.ep(0).is_established(a));
  Event ev;
  ASSERT_TRUE(loop.ep(0).poll_event(ev));
  EXPECT_EQ(ev.kind, EventKind::kConnected);
}

// Section 11.3: a connection in ERROR drops the ACKs and NAKs it receives
// afterwards (its work has all completed): none is counted or answered.
TEST(Handshake, AFailedConnectionDropsAcksAndNaks) {  // NAK-2, NAK-3
  Loop loop(cfg(397), cfg(398));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, 0, 0x11), dst(loop.ep(1), 4096, kAccessRemoteWrite);
  SendWr wr = write_wr(src, dst, 4096, 1);
  wr.rkey ^= 1;
  ASSERT_EQ(loop.ep(0).post_send(a, wr), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kRemoteBadKey);
  ASSERT_FALSE(loop.ep(0).is_established(a));
  const ConnStats before = *loop.ep(0).conn_stats(a);
  wire::BaseHeader bh;
  bh.flags = wire::kFlagPayloadCovered;
  bh.dst_conn = a.v;
  bh.opcode = wire::Opcode::kAck;
  wire::AckBody body;
  std::vector<uint8_t> ack(128), nak(128);
  ack.resize(wire::seal(ack, wire::write_ack(ack, bh, body), 0));
  bh.opcode = wire::Opcode::kNak;
  nak.resize(wire::seal(nak, wire::write_nak(nak, bh, wire::NakBody{0, 0x03, 0, 0}), 0));
  for (const std::vector<uint8_t>* d :
       std::initializer_list<const std::vector<uint8_t>*>{&ack, &nak}) {
    deliver(loop, 0, loop.addr(1), *d);
    EXPECT_TRUE(sent(loop, 0).empty()) << "opcode " << int{(*d)[1]} << " drew a reply";
  }
  const ConnStats* st = loop.ep(0).conn_stats(a);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->acks_received, before.acks_received);
  EXPECT_EQ(st->naks_received, before.naks_received);
  EXPECT_TRUE(loop.drain(0).empty());
}

// CONN-3: an ACCEPT without the responder's connection id (0, which no end
// picks) is malformed; taking it would name connection 0 in every packet.
TEST(Handshake, AcceptWithoutAConnectionIdIsIgnored) {
  Loop loop(cfg(313), cfg(314));
  edit_connect_body(loop, 1, kConnectAccept, [](uint8_t* body) {
    for (size_t i = 0; i < 4; ++i) body[i] = 0;  // src_conn
  });
  EXPECT_TRUE(connect_fails_with(loop, Status::kConnectTimeout));
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

// Keeps in `disconnect` the first DISCONNECT endpoint 0 sends from now on.
void keep_first_disconnect(Loop& loop, std::vector<uint8_t>& disconnect) {
  loop.on_sent = [&disconnect](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == kDisconnect && disconnect.empty()) disconnect = d;
  };
}

// Endpoint 0 closes connection a; runs until both ends report it closed.
// `disconnect` is the first DISCONNECT endpoint 0 sent, `at_peer` endpoint 1's
// kClosed event.
::testing::AssertionResult close_from_0(Loop& loop, ConnId a, std::vector<uint8_t>& disconnect,
                                        Event& at_peer) {
  keep_first_disconnect(loop, disconnect);
  loop.ep(0).close(a, loop.now());
  const bool done = run_until_both_closed(loop, &at_peer);
  loop.on_sent = nullptr;
  if (!done) return ::testing::AssertionFailure() << "the close did not end at both ends";
  if (disconnect.size() < wire::kBaseHeaderSize + wire::kDisconnectBodySize)
    return ::testing::AssertionFailure() << "no DISCONNECT seen";
  return ::testing::AssertionSuccess();
}

constexpr size_t kReasonAt = wire::kBaseHeaderSize + 4;  // packet offset of `reason`

// CONN-8: a DISCONNECT's reason is 0 for a connection closed while
// established, and the status that failed it for one closed in ERROR; the
// peer's kClosed event passes it on. Here a WRITE to a key endpoint 1 never
// gave fails the second connection with kRemoteBadKey (NAK-3) before the
// close.
TEST(Handshake, DisconnectReasonSaysWhatHadFailedTheConnection) {
  Loop loop(cfg(317), cfg(318));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  std::vector<uint8_t> orderly;
  Event at_peer;
  ASSERT_TRUE(close_from_0(loop, a, orderly, at_peer));
  EXPECT_EQ(orderly[kReasonAt], 0);
  EXPECT_EQ(at_peer.status, Status::kPeerClosed);
  EXPECT_EQ(at_peer.reason, Status::kOk);

  auto [a2, b2] = loop.connect();
  ASSERT_TRUE(a2.valid() && b2.valid());
  Buf src(loop.ep(0), 4096, 0, 1);
  SendWr wr;
  wr.wr_id = 1;
  wr.local_addr = src.addr();
  wr.length = 4096;
  wr.lkey = src.mr.lkey;
  wr.remote_addr = 0x1000;
  wr.rkey = 0xbad;
  ASSERT_EQ(loop.ep(0).post_send(a2, wr), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kRemoteBadKey);
  std::vector<uint8_t> after_error;
  ASSERT_TRUE(close_from_0(loop, a2, after_error, at_peer));
  EXPECT_EQ(after_error[kReasonAt], static_cast<uint8_t>(Status::kRemoteBadKey));
  EXPECT_EQ(at_peer.conn.v, b2.v);
  EXPECT_EQ(at_peer.status, Status::kPeerClosed);
  EXPECT_EQ(at_peer.reason, Status::kRemoteBadKey);
}

// CONN-8: the reason is the status the closing end failed with, not the code
// of the NAK it told the peer with. Here endpoint 0's receive buffer was
// deregistered (MR-5): it NAKs the SEND with REMOTE_OPERATION_ERROR (0x07)
// and fails with kLocalProtection (0x40), which its DISCONNECT then gives.
TEST(Handshake, DisconnectAfterMemoryWentGivesLocalProtectionNotTheNaksCode) {
  Loop loop(cfg(321), cfg(322));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf rbuf(loop.ep(0), 4096, kAccessLocalWrite);
  ASSERT_EQ(loop.ep(0).post_recv(a, RecvWr{7, rbuf.addr(), 4096, rbuf.mr.lkey}), Status::kOk);
  ASSERT_EQ(loop.ep(0).deregister_memory(rbuf.mr.lkey), Status::kOk);
  std::vector<uint8_t> nak_codes;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kNak))
      nak_codes.push_back(d[wire::kBaseHeaderSize + 4]);
  };
  Buf src(loop.ep(1), 4096, 0, 3);
  ASSERT_EQ(loop.ep(1).post_send(b, send_wr(src, 0, 4096, 9)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(1, 1, done));
  ASSERT_EQ(done[0].status, Status::kRemoteOperationError);
  ASSERT_FALSE(nak_codes.empty());
  for (const uint8_t code : nak_codes)
    ASSERT_EQ(code, static_cast<uint8_t>(Status::kRemoteOperationError));
  std::vector<uint8_t> disconnect;
  Event at_peer;
  ASSERT_TRUE(close_from_0(loop, a, disconnect, at_peer));
  EXPECT_EQ(disconnect[kReasonAt], static_cast<uint8_t>(Status::kLocalProtection));
  EXPECT_EQ(at_peer.reason, Status::kLocalProtection);
}

// CONN-8 after PATH-7: a connection whose peer went silent fails
// kPeerUnreachable, and its close says so (0x46), though likely to no one.
TEST(Handshake, DisconnectAfterThePeerWentSilentGivesPeerUnreachable) {
  EndpointConfig c = cfg(321);
  c.recovery.peer_timeout_ns = 20'000'000;
  Loop loop(c, cfg(322));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(0), 4096, 0, 3);
  Buf dst(loop.ep(1), 4096, kAccessRemoteWrite);
  loop.drop = [](int from, const std::vector<uint8_t>&) { return from == 1; };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 4096)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 1, done));
  ASSERT_EQ(done[0].status, Status::kPeerUnreachable);
  std::vector<uint8_t> disconnect;
  keep_first_disconnect(loop, disconnect);
  loop.ep(0).close(a, loop.now());
  loop.run_until([&] { return !disconnect.empty(); }, 1'000'000);
  ASSERT_FALSE(disconnect.empty());
  EXPECT_EQ(disconnect[kReasonAt], static_cast<uint8_t>(Status::kPeerUnreachable));
}

// CONN-8: the reason informs, it does not decide: a DISCONNECT with a value
// appendix A does not define closes the connection as any other (CONN-7),
// is answered with DISCONNECT_ACK, and its value reaches the event as it came.
TEST(Handshake, DisconnectWithAReasonNotInAppendixAClosesAsAnyOther) {
  Loop loop(cfg(319), cfg(320));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(1), 4096, 0, 2);
  Buf dst(loop.ep(0), 4096, kAccessRemoteWrite);
  loop.drop = [](int from, const std::vector<uint8_t>& d) { return from == 0 && d[1] == 0x10; };
  ASSERT_EQ(loop.ep(1).post_send(b, write_wr(src, dst, 4096)), Status::kOk);  // never acked
  loop.run_until([] { return false; }, 100'000);
  loop.mutate = [](int from, std::vector<uint8_t>& d) {
    if (from != 0 || d[1] != kDisconnect) return;
    d[kReasonAt] = 0xee;
    const size_t header = wire::kBaseHeaderSize + wire::kDisconnectBodySize;
    ASSERT_EQ(wire::seal(d, header, 0), d.size());
  };
  std::vector<uint8_t> sent_disconnect;
  Event at_peer;
  ASSERT_TRUE(close_from_0(loop, a, sent_disconnect, at_peer));
  EXPECT_EQ(at_peer.status, Status::kPeerClosed);
  EXPECT_EQ(static_cast<uint8_t>(at_peer.reason), 0xee);
  std::vector<Completion> flushed;
  ASSERT_TRUE(loop.run_until_completions(1, 1, flushed));
  EXPECT_EQ(flushed[0].status, Status::kPeerClosed);
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
    std::vector<uint8_t> req, acc;
    ASSERT_TRUE(connect_request(loop, c, req));
    EXPECT_EQ(reply_port(req), port);
    const TimeNs t = loop.ep(0).next_timeout();  // CONN-2's resend
    loop.ep(0).handle_timeout(t);
    std::vector<uint8_t> buf(70000);
    TxDatagram tx;
    ASSERT_TRUE(loop.ep(0).poll_transmit(t, buf, tx));
    const std::vector<uint8_t> again(buf.begin(), buf.begin() + static_cast<long>(tx.len));
    ASSERT_EQ(again[1], kConnectReq);
    EXPECT_EQ(reply_port(again), port);
    ASSERT_TRUE(answer_of(loop, req, acc));
    ASSERT_EQ(acc[1], kConnectAccept);
    EXPECT_EQ(reply_port(acc), 0u);
  }
  EndpointConfig closed = cfg(322);
  closed.accept_incoming = false;
  closed.reply_port = 5000;
  EndpointConfig a = cfg(321);
  a.reply_port = 4792;
  Loop loop(a, closed);
  ConnId c;
  std::vector<uint8_t> req, rej;
  ASSERT_TRUE(connect_request(loop, c, req));
  ASSERT_TRUE(answer_of(loop, req, rej));
  ASSERT_EQ(rej[1], kConnectReject);
  EXPECT_EQ(reply_port(rej), 0u);
}

// Endpoint 0's CONNECT_REQ handed to endpoint 1: its CONNECT_ACCEPT, decoded.
::testing::AssertionResult accept_of_request(Loop& loop, wire::Packet& p) {
  ConnId a;
  std::vector<uint8_t> req, acc;
  if (auto r = connect_request(loop, a, req); !r) return r;
  if (auto r = answer_of(loop, req, acc); !r) return r;
  if (wire::decode(acc, p) != wire::ParseError::kOk || p.bh.opcode != wire::Opcode::kConnectAccept)
    return ::testing::AssertionFailure() << "the answer is no CONNECT_ACCEPT";
  return ::testing::AssertionSuccess();
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
  wire::Packet p;
  ASSERT_TRUE(accept_of_request(loop, p));
  EXPECT_EQ(p.connect.mtu, 1024u);
  EXPECT_EQ(p.connect.window_log2, 7u);
  EXPECT_EQ(p.connect.max_reads, cfg(324).max_reads);  // its own: not negotiated
}

// CONN-3 the other way round: the responder's mtu is the smaller. It runs
// with its own, not the request's offer: its ACCEPT says 1024 and a 4096-byte
// WRITE of its own goes as four packets. (Taking the peer's offer passed the
// test above, where the offer is the smaller, and every other test, where the
// two ends agree.)
TEST(Handshake, ResponderWithTheSmallerMtuKeepsItsOwn) {
  EndpointConfig small = cfg(326);
  small.mtu = 1024;
  Loop loop(cfg(325), small);  // the requester offers 4096
  wire::Packet p;
  ASSERT_TRUE(accept_of_request(loop, p));
  EXPECT_EQ(p.connect.mtu, 1024u);

  Loop both(cfg(325), small);
  auto [x, y] = both.connect();
  Buf src(both.ep(1), 4096, 0, 3);
  Buf dst(both.ep(0), 4096, kAccessRemoteWrite);
  size_t writes = 0;  // the responder's WRITE datagrams
  both.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    writes += from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite);
  };
  ASSERT_EQ(both.ep(1).post_send(y, write_wr(src, dst, 4096, 1)), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(both.run_until_completions(1, 1, done, 10'000'000));
  EXPECT_EQ(done[0].status, Status::kOk);
  EXPECT_EQ(dst.bytes, src.bytes);
  EXPECT_EQ(writes, 4u) << "a 4096-byte WRITE of a responder whose mtu is 1024";
}

// mtu_of: the mtu the connection runs with, at both ends, whichever end
// offered the smaller; 0 for an id that names no established connection
// (metaroce-perf --verify reads it for where packets split a slot).
TEST(Handshake, MtuOfIsTheAgreedMtuAtBothEnds) {
  EndpointConfig small = cfg(327);
  small.mtu = 1001;
  for (const bool requester_smaller : {true, false}) {
    Loop loop(requester_smaller ? small : cfg(328), requester_smaller ? cfg(328) : small);
    auto [x, y] = loop.connect();
    EXPECT_EQ(loop.ep(0).mtu_of(x), 1001u) << requester_smaller;
    EXPECT_EQ(loop.ep(1).mtu_of(y), 1001u) << requester_smaller;
    EXPECT_EQ(loop.ep(0).mtu_of(ConnId{}), 0u);
  }
  // A requester's offer lowered for its route (connect's max_mtu).
  Loop lowered(cfg(329), cfg(330));
  auto [x, y] = lowered.connect(1420);
  EXPECT_EQ(lowered.ep(0).mtu_of(x), 1420u);
  EXPECT_EQ(lowered.ep(1).mtu_of(y), 1420u);
}

// CONN-4: a REJECT whose code is none of 0x47, 0x48 and 0x4a fails the
// connection with kConnectRefused (it could name a local status, or a NAK
// code, that says nothing of a refusal), and the event's reason is the code
// as it came, so that the application can name it: it used to be lost, and
// a refusal for a code the spec has no word for read as a plain one. A code
// 0 names no reason: kConnectRefused, so that reason kOk is only ever an
// ACCEPT refused for its mtu (OfferBelowTheLeastMtuIsRefused).
TEST(Handshake, RejectWithAnotherCodeIsARefusal) {
  struct Case {
    uint8_t code;
    Status status;
    Status reason;
  };
  const auto as = [](uint8_t v) { return static_cast<Status>(v); };
  for (const Case k : {Case{0x00, Status::kConnectRefused, Status::kConnectRefused},
                       Case{0x02, Status::kConnectRefused, Status::kRemoteBadKey},
                       Case{0x49, Status::kConnectRefused, Status::kConnectTimeout},
                       Case{0xff, Status::kConnectRefused, as(0xff)},
                       Case{0x47, Status::kConnectRefused, Status::kConnectRefused},
                       Case{0x48, Status::kVersionMismatch, Status::kVersionMismatch},
                       Case{0x4a, Status::kResourceExhausted, Status::kResourceExhausted}}) {
    SCOPED_TRACE(static_cast<int>(k.code));
    EndpointConfig closed = cfg(326);
    closed.accept_incoming = false;
    Loop loop(cfg(325), closed);
    edit_connect_body(loop, 1, kConnectReject, [k](uint8_t* body) { body[12] = k.code; });
    const Event ev = first_connect_event(loop);
    EXPECT_EQ(ev.kind, EventKind::kConnectFailed);
    EXPECT_EQ(ev.status, k.status);
    EXPECT_EQ(ev.reason, k.reason);
  }
}

// CONN-7: a close whose DISCONNECTs all go unanswered ends after
// disconnect_attempts of them, connect_retry apart, as a connect would: the
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
  EXPECT_EQ(disconnects, static_cast<int>(c.disconnect_attempts));
  EXPECT_EQ(last.ns - first.ns, (c.disconnect_attempts - 1) * c.connect_retry_ns);
  EXPECT_EQ(closed_at.ns - last.ns, c.connect_retry_ns);
  loop.run_until([] { return false; }, 100'000'000);
  EXPECT_EQ(disconnects, static_cast<int>(c.disconnect_attempts));
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
  std::vector<uint8_t> req;
  ASSERT_TRUE(connect_request(loop, a, req));
  const uint64_t later = 12345;
  deliver(loop, 1, loop.addr(0), req, later);
  std::vector<uint8_t> buf(70000);
  TxDatagram tx;
  ASSERT_TRUE(loop.ep(1).poll_transmit(loop.now() + later, buf, tx));
  wire::Packet p;
  ASSERT_EQ(wire::decode(std::span<const uint8_t>(buf.data(), tx.len), p), wire::ParseError::kOk);
  ASSERT_EQ(p.bh.opcode, wire::Opcode::kConnectReject);
  EXPECT_EQ(p.bh.flags, wire::kFlagPayloadCovered);
  EXPECT_EQ(p.bh.tsval, static_cast<uint32_t>(loop.now().ns + later));
}

// CONN-5 (and section 11.3's unknown-version row): a CONNECT_REQ of another
// version is answered with a version-1 CONNECT_REJECT kVersionMismatch,
// max_version 1, echoing its src_conn (as dst_conn) and nonce, only when it
// is at least 44 bytes long (a version-1 request's length): one byte
// shorter, it is dropped with no reply. Either way it is counted
// bad_version and makes no connection. VER-1: the longer one's last four
// bytes are no version-1 ICRC (its version's coverage is unknown) and it is
// answered all the same, and no REJECT is longer than its request; one
// naming connection id 0 or nonce 0 is not answered.
TEST(Handshake, OnlyAnotherVersionsRequestOf44BytesOrMoreIsAnswered) {
  Loop loop(cfg(331), cfg(332));
  constexpr size_t kV1Request = wire::kBaseHeaderSize + wire::kConnectBodySize + wire::kIcrcSize;
  ASSERT_EQ(kV1Request, 44u);
  const auto request = [](size_t len) {
    std::vector<uint8_t> d(len, 0xa5);  // a longer version's body may hold anything after ours
    d[0] = static_cast<uint8_t>(2 << 4);
    d[1] = kConnectReq;
    be::store32(d.data() + wire::kBaseHeaderSize, 0x2a2a2a2a);  // src_conn
    for (int i = 0; i < 8; ++i)
      d[wire::kBaseHeaderSize + 16 + i] = static_cast<uint8_t>(0x11 * (i + 1));
    EXPECT_EQ(wire::seal(d, len - wire::kIcrcSize, 0), len);
    if (len > kV1Request) d.back() ^= 0xff;
    return d;
  };
  for (const size_t len : {kV1Request - 1, kV1Request, kV1Request + 20}) {
    SCOPED_TRACE(len);
    const uint64_t before = loop.ep(1).endpoint_stats().bad_version;
    deliver(loop, 1, loop.addr(0), request(len));
    const auto out = sent(loop, 1);
    EXPECT_EQ(loop.ep(1).endpoint_stats().bad_version, before + 1);
    EXPECT_EQ(accepted_events(loop.ep(1)), 0);
    if (len < kV1Request) {
      EXPECT_TRUE(out.empty()) << "a request shorter than 44 bytes was answered";
      continue;
    }
    ASSERT_EQ(out.size(), 1u);
    EXPECT_LE(out[0].size(), len) << "the REJECT is longer than the request";
    wire::Packet p;
    ASSERT_EQ(wire::decode(out[0], p), wire::ParseError::kOk);
    EXPECT_EQ(p.bh.version, 1);
    EXPECT_EQ(p.bh.opcode, wire::Opcode::kConnectReject);
    EXPECT_EQ(p.connect.code, static_cast<uint8_t>(Status::kVersionMismatch));
    EXPECT_EQ(p.connect.max_version, 1);
    EXPECT_EQ(p.bh.dst_conn, 0x2a2a2a2au);
    EXPECT_EQ(p.connect.nonce, 0x1122334455667788u);
  }
  // VER-1: one naming connection id 0 or nonce 0 has no one to answer, in
  // any version: counted, dropped unanswered.
  for (const size_t zeroed : {size_t{0}, size_t{16}}) {
    SCOPED_TRACE(zeroed);
    std::vector<uint8_t> d = request(kV1Request);
    std::fill_n(d.begin() + static_cast<long>(wire::kBaseHeaderSize + zeroed), zeroed ? 8 : 4, 0);
    const uint64_t before = loop.ep(1).endpoint_stats().bad_version;
    deliver(loop, 1, loop.addr(0), d);
    EXPECT_EQ(loop.ep(1).endpoint_stats().bad_version, before + 1);
    EXPECT_TRUE(sent(loop, 1).empty()) << "answered";
  }
}

// A CONNECT_REQ whose source address connect() would refuse as a peer (a
// driver's fault: len 0, or more than PeerAddr's 20 bytes) made a connection
// all the same: one whose peer_of() was empty, what it says for an unknown
// id, or whose ACCEPT went to an address of 200 bytes, which a driver copying
// it would read past its end. Now it is dropped and counted, unanswered, in
// version 1 and in another (CONN-5's REJECT would go there too).
TEST(Handshake, ARequestFromAnAddressNoPeerCanHaveMakesNoConnection) {  // CONN-3, CONN-5
  for (const uint8_t len : {uint8_t{0}, uint8_t{21}, uint8_t{200}}) {
    SCOPED_TRACE(int{len});
    Loop loop(cfg(341), cfg(342));
    ConnId conn;
    std::vector<uint8_t> req;
    ASSERT_TRUE(connect_request(loop, conn, req));
    PeerAddr from = loop.addr(0);
    from.len = len;
    for (const uint8_t version : {uint8_t{1}, uint8_t{2}}) {
      std::vector<uint8_t> d = req;
      d[0] = static_cast<uint8_t>((d[0] & 0x0f) | (version << 4));
      ASSERT_EQ(wire::seal(d, d.size() - wire::kIcrcSize, 0), d.size());
      const uint64_t before = loop.ep(1).endpoint_stats().wrong_peer;
      deliver(loop, 1, from, d);
      EXPECT_TRUE(sent(loop, 1).empty()) << "version " << int{version} << ": answered";
      EXPECT_EQ(accepted_events(loop.ep(1)), 0);
      if (version == 1) {
        EXPECT_EQ(loop.ep(1).endpoint_stats().wrong_peer, before + 1);
      }
    }
    // The same request from the requester's address is accepted.
    std::vector<uint8_t> reply;
    ASSERT_TRUE(answer_of(loop, req, reply));
    EXPECT_EQ(reply[1], kConnectAccept);
  }
}

// Section 11.3's last row (CONN-7): a data packet, ACK, NAK or PROBE for a
// connection CLOSING (its DISCONNECT sent, not yet answered) is dropped:
// no reply, no counter, nothing placed or completed, and the connection
// stays CLOSING: the peer's DISCONNECT_ACK then ends it kOk.
TEST(Handshake, PacketsForAClosingConnectionAreDroppedAndItStaysClosing) {
  Loop loop(cfg(333), cfg(334));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf a_src(loop.ep(0), 4096, 0, 0x5a), b_dst(loop.ep(1), 4096, kAccessRemoteWrite);
  Buf b_src(loop.ep(1), 4096, 0, 0x6b), a_dst(loop.ep(0), 4096, kAccessRemoteWrite);
  // Endpoint 1's WRITE and ACK, held back on their way to endpoint 0.
  std::vector<uint8_t> data, ack;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from != 1) return false;
    if (d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) && data.empty()) data = d;
    if (d[1] == static_cast<uint8_t>(wire::Opcode::kAck) && ack.empty()) ack = d;
    return d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) ||
           d[1] == static_cast<uint8_t>(wire::Opcode::kAck);
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(a_src, b_dst, 4096, 1)), Status::kOk);
  ASSERT_EQ(loop.ep(1).post_send(b, write_wr(b_src, a_dst, 4096, 2)), Status::kOk);
  ASSERT_TRUE(loop.run_until([&] { return !data.empty() && !ack.empty(); }));
  wire::Packet acked;
  ASSERT_EQ(wire::decode(ack, acked), wire::ParseError::kOk);
  // A NAK of the WRITE endpoint 0 sent, and a PROBE, from endpoint 1.
  wire::BaseHeader bh;
  bh.dst_conn = a.v;
  bh.opcode = wire::Opcode::kNak;
  std::vector<uint8_t> nak(128), probe(128);
  nak.resize(
      wire::seal(nak,
                 wire::write_nak(
                     nak, bh, wire::NakBody{acked.ack.cum_psn - 1, 0x02, 0, acked.ack.cum_psn - 1}),
                 0));
  bh.opcode = wire::Opcode::kProbe;
  bh.path_tag = 1;
  probe.resize(wire::seal(probe, wire::write_probe(probe, bh), 0));

  loop.drop = [](int from, const std::vector<uint8_t>&) {
    return from == 0;
  };  // no DISCONNECT reaches 1
  loop.ep(0).close(a, loop.now());
  ASSERT_FALSE(sent(loop, 0).empty());  // the DISCONNECT
  std::vector<Completion> flushed = loop.drain(0);
  ASSERT_EQ(flushed.size(), 1u);
  EXPECT_EQ(flushed[0].status, Status::kFlushed);
  const ConnStats* st = loop.ep(0).conn_stats(a);
  ASSERT_NE(st, nullptr);
  const ConnStats conn_before = *st;
  const EndpointStats ep_before = loop.ep(0).endpoint_stats();
  for (const auto* d : {&data, &ack, &nak, &probe}) {
    deliver(loop, 0, loop.addr(1), *d);
    EXPECT_TRUE(sent(loop, 0).empty()) << "opcode " << int{(*d)[1]} << " drew a reply";
  }
  EXPECT_TRUE(loop.drain(0).empty());
  Event ev;
  while (loop.ep(0).poll_event(ev)) EXPECT_NE(ev.kind, EventKind::kClosed);
  EXPECT_EQ(a_dst.bytes, std::vector<uint8_t>(4096, 0));  // the WRITE was not placed
  st = loop.ep(0).conn_stats(a);
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(st->data_packets_received, conn_before.data_packets_received);
  EXPECT_EQ(st->acks_received, conn_before.acks_received);
  EXPECT_EQ(st->naks_received, conn_before.naks_received);
  EXPECT_EQ(st->acks_sent, conn_before.acks_sent);
  EXPECT_EQ(st->naks_sent, conn_before.naks_sent);
  const EndpointStats ep_after = loop.ep(0).endpoint_stats();
  EXPECT_EQ(ep_after.unknown_connection, ep_before.unknown_connection);
  EXPECT_EQ(ep_after.wrong_peer, ep_before.wrong_peer);
  EXPECT_EQ(ep_after.bad_length + ep_after.bad_field + ep_after.bad_checksum,
            ep_before.bad_length + ep_before.bad_field + ep_before.bad_checksum);
  // Still CLOSING: its next DISCONNECT is answered and ends it kOk.
  loop.drop = nullptr;
  bool closed = false;
  ASSERT_TRUE(loop.run_until([&] {
    while (loop.ep(0).poll_event(ev))
      if (ev.kind == EventKind::kClosed) {
        closed = true;
        EXPECT_EQ(ev.status, Status::kOk);
      }
    return closed;
  }));
}

// Section 3.12, max_reads: a receiver takes 0 as 1. A responder whose
// ACCEPT says 0 is asked for one READ at a time: each READ_REQ leaves only
// once the READ before it completed, and all three complete. (With the
// ACCEPT's own 16, all three leave at once: the premise.)
TEST(Handshake, MaxReadsZeroIsTakenAsOne) {
  for (const bool zero : {true, false}) {
    SCOPED_TRACE(zero ? "max_reads 0" : "max_reads 16");
    Loop loop(cfg(335), cfg(336));
    if (zero) edit_connect_body(loop, 1, kConnectAccept, [](uint8_t* body) { body[11] = 0; });
    auto [a, b] = loop.connect();
    ASSERT_TRUE(a.valid() && b.valid());
    loop.mutate = nullptr;
    Buf src(loop.ep(1), 3 * 4096, kAccessRemoteRead, 0x77),
        dst(loop.ep(0), 3 * 4096, kAccessLocalWrite);
    std::set<uint32_t> reqs;  // the READ_REQs' PSNs, resends counted once
    loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
      if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kReadReq))
        reqs.insert(be::load32(d.data() + 8));
    };
    for (uint64_t i = 0; i < 3; ++i) {
      SendWr wr = read_wr(dst, src.addr(i * 4096), src.mr.rkey, 4096, i);
      wr.local_addr = dst.addr(i * 4096);
      ASSERT_EQ(loop.ep(0).post_send(a, wr), Status::kOk);
    }
    size_t done = 0, most_ahead = 0;
    ASSERT_TRUE(loop.run_until([&] {
      for (const Completion& c : loop.drain(0)) {
        EXPECT_EQ(c.status, Status::kOk);
        ++done;
      }
      most_ahead = std::max(most_ahead, reqs.size() - done);
      return done == 3;
    }));
    EXPECT_EQ(src.bytes, dst.bytes);
    EXPECT_EQ(most_ahead, zero ? 1u : 3u) << "READs outstanding at once";
  }
}

// READ-3: a responder queues up to 4 x its own max_reads READ requests; one
// that finds the queue full is answered with NAK REMOTE_INVALID_REQUEST. The
// responder's max_reads is 1 and its ACCEPT, edited, says 16: the requester
// sends five READs at once, and the fifth finds four queued.
// READ i of 4096 bytes, from the responder's `src` into the requester's
// `dst` at the same offset.
Status post_read(Loop& loop, ConnId a, const Buf& dst, const Buf& src, uint64_t i) {
  SendWr wr = read_wr(dst, src.addr(i * 4096), src.mr.rkey, 4096, i);
  wr.local_addr = dst.addr(i * 4096);
  return loop.ep(0).post_send(a, wr);
}

// A connection whose responder (endpoint 1) has max_reads 1, its ACCEPT
// edited to say 16: the requester may send more READs than the responder
// takes. `done` is expected to hold READ 4 refused with NAK
// REMOTE_INVALID_REQUEST, the responder's one fatal NAK (READ-3).
void expect_read_4_refused(Loop& loop, ConnId b, const std::vector<Completion>& done) {
  bool refused = false;
  for (const Completion& c : done) {
    if (c.wr_id != 4) continue;
    EXPECT_EQ(c.status, Status::kRemoteInvalidRequest);
    refused = true;
  }
  EXPECT_TRUE(refused);
  EXPECT_EQ(loop.ep(1).conn_stats(b)->naks_sent, 1u);
}

std::pair<ConnId, ConnId> connect_overstating_max_reads(Loop& loop) {
  edit_connect_body(loop, 1, kConnectAccept, [](uint8_t* body) { body[11] = 16; });
  auto ab = loop.connect();
  loop.mutate = nullptr;
  return ab;
}

TEST(Handshake, ReadRequestBeyondTheResponderQueueIsRefused) {
  EndpointConfig rc = cfg(337);
  rc.max_reads = 1;
  Loop loop(cfg(338), rc);
  auto [a, b] = connect_overstating_max_reads(loop);
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(1), 5 * 4096, kAccessRemoteRead, 0x78),
      dst(loop.ep(0), 5 * 4096, kAccessLocalWrite);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_EQ(post_read(loop, a, dst, src, i), Status::kOk);
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 5, done));
  expect_read_4_refused(loop, b, done);
}

// READ-3's boundary: the responder (max_reads 1, queue 4) holds three READs
// answered but not acknowledged (the requester's ACKs are lost) and one not
// yet answered when a READ_REQ finds the queue full. max_reads (1) of the
// queued READs have not had their response sent, so this one is beyond the
// requester's limit: NAK REMOTE_INVALID_REQUEST, not an RNR wait.
TEST(Handshake, FullReadQueueWithMaxReadsUnansweredRefusesTheNext) {  // READ-3
  EndpointConfig rc = cfg(341);
  rc.max_reads = 1;
  Loop loop(cfg(342), rc);
  auto [a, b] = connect_overstating_max_reads(loop);
  ASSERT_TRUE(a.valid() && b.valid());
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck);
  };
  Buf src(loop.ep(1), 5 * 4096, kAccessRemoteRead, 0x79),
      dst(loop.ep(0), 5 * 4096, kAccessLocalWrite);
  std::vector<Completion> done;
  for (uint64_t i = 0; i < 3; ++i) {  // answered, each before the next is asked
    ASSERT_EQ(post_read(loop, a, dst, src, i), Status::kOk);
    ASSERT_TRUE(loop.run_until_completions(0, i + 1, done));
  }
  // Two READ_REQs together: the first takes the queue's last place, the
  // second finds it full before the first's response has left.
  ASSERT_EQ(post_read(loop, a, dst, src, 3), Status::kOk);
  ASSERT_EQ(post_read(loop, a, dst, src, 4), Status::kOk);
  ASSERT_TRUE(loop.run_until_completions(0, 5, done, 50'000'000));
  expect_read_4_refused(loop, b, done);
  EXPECT_EQ(loop.ep(1).conn_stats(b)->rnr_naks_sent, 0u);
}

// READ-3: a responder's queue holds a READ until its response is
// acknowledged, so a requester that keeps to max_reads fills it when its
// ACKs are lost while its READ_REQs get through: each READ completes (the
// responder's ACKs arrive) and the next follows. Such a READ_REQ waits (RNR)
// instead of failing the connection: the responder's max_reads is 1, its
// queue 4, every ACK of the requester's is lost until a READ_REQ finds the
// queue full, and all six READs then complete. (Before, the fifth drew NAK
// 0x06 and the rest were flushed.)
TEST(Handshake, AFullReadQueueOfAnsweredReadsDoesNotFailTheRequester) {
  EndpointConfig rc = cfg(922);
  rc.max_reads = 1;
  Loop loop(cfg(923), rc);
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(1), 6 * 4096, kAccessRemoteRead, 0x7a),
      dst(loop.ep(0), 6 * 4096, kAccessLocalWrite);
  pattern(src.bytes, 5);
  bool lose_acks = true;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    return lose_acks && from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kAck);
  };
  for (uint64_t i = 0; i < 6; ++i) {
    SendWr wr = read_wr(dst, src.addr(i * 4096), src.mr.rkey, 4096, i);
    wr.local_addr = dst.addr(i * 4096);
    ASSERT_EQ(loop.ep(0).post_send(a, wr), Status::kOk);
  }
  const ConnStats* st = loop.ep(1).conn_stats(b);
  ASSERT_TRUE(loop.run_until([&] { return st->rnr_naks_sent + st->naks_sent > 0; }));
  lose_acks = false;
  std::vector<Completion> done;
  ASSERT_TRUE(loop.run_until_completions(0, 6, done));
  for (const Completion& c : done) EXPECT_EQ(c.status, Status::kOk) << "READ " << c.wr_id;
  EXPECT_EQ(src.bytes, dst.bytes);
  EXPECT_EQ(st->naks_sent, 0u);
  EXPECT_GE(st->rnr_naks_sent, 1u);
}

// CONN-7: a DISCONNECT closes an established connection only if its
// src_conn is the peer's connection id; one naming another generation of
// that id is ignored, and the true one then closes it.
TEST(Handshake, DisconnectFromAnotherConnectionIdIsIgnored) {
  Loop loop(cfg(339), cfg(340));
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  auto disconnect = [&](uint32_t src_conn) {
    std::vector<uint8_t> d(wire::kBaseHeaderSize + wire::kDisconnectBodySize + wire::kIcrcSize);
    wire::BaseHeader bh;
    bh.opcode = wire::Opcode::kDisconnect;
    bh.dst_conn = a.v;
    d.resize(wire::seal(d, wire::write_disconnect(d, bh, wire::DisconnectBody{src_conn, 0}), 0));
    deliver(loop, 0, loop.addr(1), d);
  };
  disconnect(b.v ^ 0x10000);
  Event ev;
  while (loop.ep(0).poll_event(ev)) EXPECT_NE(ev.kind, EventKind::kClosed);
  EXPECT_TRUE(loop.ep(0).is_established(a));
  disconnect(b.v);
  bool closed = false;
  while (loop.ep(0).poll_event(ev)) {
    if (ev.kind != EventKind::kClosed) continue;
    closed = true;
    EXPECT_EQ(ev.status, Status::kPeerClosed);
  }
  EXPECT_TRUE(closed);
}

// SEQ-3: each end runs with the smaller window_log2 of the two. The
// responder's own is 6, the request says 10: it sends no PSN at or beyond
// cum_acked + 64, here with every ACK lost and windows (CC-1) that would
// take 200 packets.
TEST(Handshake, ResponderKeepsItsOwnSmallerWindow) {  // SEQ-3
  EndpointConfig rc = cfg(341);
  rc.window_log2 = 6;
  rc.cc.initial_cwnd_packets = 256;
  Loop loop(cfg(342), rc);
  auto [a, b] = loop.connect();
  ASSERT_TRUE(a.valid() && b.valid());
  Buf src(loop.ep(1), 200 * 4096, 0, 0x79), dst(loop.ep(0), 200 * 4096, kAccessRemoteWrite);
  std::set<uint32_t> psns;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from == 1 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite))
      psns.insert(be::load32(d.data() + 8));
    return from == 0;  // every ACK
  };
  ASSERT_EQ(loop.ep(1).post_send(b, write_wr(src, dst, 200 * 4096)), Status::kOk);
  loop.run_until([] { return false; }, 500'000);
  EXPECT_EQ(psns.size(), 64u);
}

}  // namespace
}  // namespace metaroce::test
