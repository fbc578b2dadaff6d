// Input: every datagram decoded, validated and dispatched to its connection
// (spec BAD-*, and the handlers of receiver.cpp, acks.cpp and handshake.cpp).
#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include "impl.hpp"

namespace metaroce {
using detail::Connection;
using detail::ConnState;

void Endpoint::Impl::reject_bad_version(const RxDatagram& dg) {
  // CONN-5: answer a CONNECT_REQ of another version, in version 1, if its
  // body is long enough to echo; everything else of another version is dropped.
  if (dg.bytes.size() < wire::kBaseHeaderSize + wire::kConnectBodySize + wire::kIcrcSize) return;
  if (!addressable(dg.peer)) return;  // as on_connect_req: nowhere to answer
  const uint8_t* q = dg.bytes.data() + wire::kBaseHeaderSize;
  const uint32_t src_conn =
      (uint32_t{q[0]} << 24) | (uint32_t{q[1]} << 16) | (uint32_t{q[2]} << 8) | q[3];
  uint64_t nonce = 0;
  for (int i = 0; i < 8; ++i) nonce = (nonce << 8) | q[16 + i];
  // VER-1: no version names connection id 0 or nonce 0; as in version 1
  // (on_connect_req), such a request has no one to answer.
  if (src_conn == 0 || nonce == 0) return;
  queue_reject(dg, src_conn, nonce, Status::kVersionMismatch);
}

void Endpoint::Impl::queue_orphan(const Orphan& o) noexcept {
  if (orphans.size() >= kMaxOrphans) return;
  try {
    orphans.push(o);
  } catch (const std::bad_alloc&) {
    // Dropped: Ring::push grows before it changes anything.
  }
}

void Endpoint::Impl::queue_reject(const RxDatagram& dg, uint32_t src_conn, uint64_t nonce,
                                  Status code) {
  Orphan o{};
  o.peer = dg.peer;
  o.entropy = dg.entropy;
  o.op = wire::Opcode::kConnectReject;
  o.dst_conn = src_conn;
  o.connect.code = static_cast<uint8_t>(code);
  o.connect.max_version = wire::kVersion;
  o.connect.nonce = nonce;
  queue_orphan(o);
}

// The per-packet entries (this one and output.cpp's two poll_transmit) are marked hot:
// GCC optimizes them, with all that inlines into them, more aggressively and
// groups them in .text.hot. Measured: ~10 fewer instructions per data packet
// (scripts/engine-instructions.sh).
[[gnu::hot]] void Endpoint::handle_datagram(const RxDatagram& dg, TimeNs now) {
  Impl& m = *impl_;
  m.last_now = now;
  ++m.estats.datagrams_received;
  // Reused, and not cleared: each handler reads only its opcode's fields.
  wire::Packet& p = m.rx_packet;
  const wire::ParseError err = wire::decode_fields(dg.bytes, p, dg.trimmed);
  switch (err) {
    case wire::ParseError::kOk: break;
    case wire::ParseError::kTruncated: ++m.estats.truncated; return;
    case wire::ParseError::kBadVersion:
      ++m.estats.bad_version;
      if (dg.bytes.size() > 1 && dg.bytes[1] == static_cast<uint8_t>(wire::Opcode::kConnectReq))
        m.reject_bad_version(dg);
      return;
    case wire::ParseError::kBadOpcode: ++m.estats.bad_opcode; return;
    case wire::ParseError::kBadChecksum: ++m.estats.bad_checksum; return;
    case wire::ParseError::kBadLength: ++m.estats.bad_length; return;
    case wire::ParseError::kBadField: ++m.estats.bad_field; return;
  }
  const wire::Opcode op = p.bh.opcode;
  if (op == wire::Opcode::kConnectReq) {
    m.on_connect_req(dg, p, now);
    return;
  }
  Connection* c = m.find(ConnId{p.bh.dst_conn});
  if (c == nullptr) {
    // BAD-7: no reply, except a repeat of the DISCONNECT that closed a
    // connection a moment ago (CONN-7: our DISCONNECT_ACK was lost), and an
    // ACCEPT of a connection that ended while connecting (CONN-7).
    if ((op != wire::Opcode::kDisconnect && op != wire::Opcode::kConnectAccept) ||
        !m.on_unknown_connection(dg, p))
      ++m.estats.unknown_connection;
    return;
  }
  if (!(c->peer == dg.peer)) {
    ++m.estats.wrong_peer;
    return;
  }
  switch (op) {
    case wire::Opcode::kConnectAccept:
    case wire::Opcode::kConnectReject:
      if (!m.on_connect_reply(*c, p, now)) return;  // rejected: connection is gone
      break;
    case wire::Opcode::kDisconnect: m.on_disconnect(dg, p); return;
    case wire::Opcode::kDisconnectAck:
      // CONN-7: as a DISCONNECT, it names the peer's connection id too.
      if (c->state == ConnState::kClosing && p.disconnect.src_conn == c->peer_conn) {
        m.push_event(EventKind::kClosed, *c, Status::kOk);
        m.destroy_connection(*c);
      }
      return;
    case wire::Opcode::kAck:
      if (c->state == ConnState::kEstablished) m.on_ack(*c, p, now);
      break;
    case wire::Opcode::kNak:
      if (c->state == ConnState::kEstablished) m.on_nak(*c, p, now);
      break;
    case wire::Opcode::kProbe:
      if (c->state == ConnState::kEstablished) {
        m.on_probe(*c, dg, p, now);
      } else if (c->state == ConnState::kError && c->sent_fatal_nak()) {
        c->owe_nak(dg.entropy);  // NAK-2: a sender probing its paths must still hear why
      }
      break;
    default:
      if (c->state == ConnState::kEstablished || c->state == ConnState::kError)
        m.on_data(*c, dg, p, now);
      break;
  }
  // The connection may have been destroyed above only on paths that return.
  c->last_activity = now;
  m.mark_ready(*c);
  m.update_timer(*c);
}

}  // namespace metaroce
