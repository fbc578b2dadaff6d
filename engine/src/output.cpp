// Output: which connection sends next (round-robin over the ready ones), its
// datagram (ACK, NAK, control or data), and replies that have no connection.
#include <algorithm>
#include <bit>
#include <cstring>

#include "impl.hpp"

namespace metaroce {
using detail::Connection;
using detail::ConnState;

bool Endpoint::Impl::emit_orphan(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  const Orphan o = orphans.pop();
  wire::BaseHeader bh;
  bh.opcode = o.op;
  bh.dst_conn = o.dst_conn;
  // As base_header() for a connection's packets: PC as configured (ENC-5: an
  // endpoint that leaves the UDP checksum off sets it in every packet) and
  // the time it leaves.
  bh.flags = cfg.cover_payload ? wire::kFlagPayloadCovered : 0;
  bh.tsval = static_cast<uint32_t>(now.ns);
  size_t h = o.op == wire::Opcode::kConnectReject ? wire::write_connect(buf, bh, o.connect)
                                                  : wire::write_disconnect(buf, bh, o.disconnect);
  out.peer = o.peer;
  out.entropy = o.entropy;
  out.ecn = kEcnEct0;
  out.dscp = cfg.data_dscp;
  out.len = finish(buf, h, 0);
  out.header_len = h;
  out.payload = {};
  return out.len > 0;
}

template <bool gather>
bool Endpoint::Impl::emit_for(Connection& c, TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  // Cheap tests first: most calls find nothing to send.
  out.payload = {};
  const bool control = c.owes_control();
  const bool open = c.state == ConnState::kEstablished;
  if (!(control && emit_control(c, now, buf, out)) &&
      !(c.echo_count != 0 && (open || c.state == ConnState::kError) &&
        emit_ack(c, now, buf, out)) &&
      !(open && c.tx && emit_data<gather>(c, now, buf, out)))
    return false;
  out.peer = c.peer;
  out.ecn = kEcnEct0;
  // ENC-6: feedback skips the data queues where the fabric gives its class
  // priority, so an RTT sample measures the data direction's queues only.
  out.dscp = wire::is_acknowledgement(buf[1]) ? cfg.control_dscp : cfg.data_dscp;
  return true;
}

template <bool gather>
bool Endpoint::Impl::poll(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  last_now = now;
  // Refused up front: a packet that no longer fits once its PSN and path are
  // taken would leave a hole that no retransmission fills.
  if (buf.size() < min_tx_buffer[gather]) [[unlikely]] {
    ++estats.tx_buffer_too_small;
    return false;
  }
  if (!poll_one<gather>(now, buf, out)) return false;
  if (gather && out.payload.empty()) {
    // Packets without payload are built whole; present them in the gather
    // shape too: headers, no payload, the ICRC as the trailer.
    out.header_len = out.len - wire::kIcrcSize;
    std::memcpy(out.trailer, buf.data() + out.header_len, wire::kIcrcSize);
  }
  return true;
}

template <bool gather>
bool Endpoint::Impl::poll_one(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (!orphans.empty()) [[unlikely]]
    return poll_orphan<gather>(now, buf, out);
  return poll_ready<gather>(now, buf, out);
}

template <bool gather>
bool Endpoint::Impl::poll_orphan(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (emit_orphan(now, buf, out)) {
    ++estats.datagrams_sent;
    return true;
  }
  return poll_ready<gather>(now, buf, out);
}

template <bool gather>
bool Endpoint::Impl::poll_ready(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  if (ready.empty()) {
    ready.clear();
    return false;
  }
  const uint32_t index = ready.front();
  if (in_ready[index] != kReadyLive) [[unlikely]]
    return poll_next<gather>(now, buf, out);
  // mark_ready sets the flag for a live connection only, and
  // destroy_connection turns it into a stale entry's count (drop_ready):
  // kReadyLive alone names one at the front, never null.
  Connection& c = *conns[index];
  if (may_emit(c) || !c.timer_dirty) return emit_from<gather>(now, buf, out, c);
  // Nothing to send, and the timer marked already: dropped as emit_from
  // would. The flag is cleared first: its byte store may alias the ring's
  // head, which pop() then reloads rather than keeping it in a register
  // that the tests above need.
  in_ready[c.index] = 0;
  ready.pop();
  if (ready.empty()) {
    ready.clear();
    return false;
  }
  return poll_next<gather>(now, buf, out);
}

template <bool gather>
bool Endpoint::Impl::poll_next(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  Connection* c = front_ready();
  return c != nullptr && emit_from<gather>(now, buf, out, *c);
}

Connection* Endpoint::Impl::front_ready() {
  while (!ready.empty()) {
    const uint32_t index = ready.front();
    if (in_ready[index] == kReadyLive) return conns[index].get();
    ready.pop();  // stale (drop_ready)
    in_ready[index] = 0;
    --ready_stale;
  }
  ready.clear();
  return nullptr;
}

template <bool gather>
bool Endpoint::Impl::emit_from(TimeNs now, std::span<uint8_t> buf, TxDatagram& out,
                               Connection& first) {
  // Round-robin: one datagram per ready connection per turn (SCHED-5).
  Connection* c = &first;
  bool again = false;
  do {
    if (emit_for<gather>(*c, now, buf, out)) {
      ready.rotate();  // stays ready, behind the others: it may have more
      update_timer(*c);
      ++estats.datagrams_sent;
      return true;
    }
    // MR-5: a READ response that found its region gone owes a NAK, owed
    // inside emit_data after the control turn; dropped from the ready ring
    // now, it waited for some other datagram to make the connection ready.
    again = !again && c->owes_control();
    if (again) [[unlikely]]
      continue;
    ready.pop();
    in_ready[c->index] = 0;
    update_timer(*c);
    c = front_ready();
  } while (c != nullptr);
  return false;
}

[[gnu::hot]] bool Endpoint::poll_transmit(TimeNs now, std::span<uint8_t> buf, TxDatagram& out) {
  return impl_->poll<false>(now, buf, out);
}

[[gnu::hot]] bool Endpoint::poll_transmit_gather(TimeNs now, std::span<uint8_t> header_buf,
                                                 TxDatagram& out) {
  return impl_->poll<true>(now, header_buf, out);
}

}  // namespace metaroce
