#include "peer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "metaroce/bytes.hpp"

namespace metaroce::conformance {
namespace {

Bytes seal(Bytes p, size_t header_len, size_t payload_len) {
  p.resize(header_len + payload_len + wire::kIcrcSize);
  p.resize(wire::seal(p, header_len, payload_len));
  return p;
}

}  // namespace

std::string hex32(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof(b), "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string code_text(uint8_t code) {
  char b[8];
  std::snprintf(b, sizeof(b), "0x%02x", code);
  const auto s = static_cast<Status>(code);
  return std::string(b) + " (" +
         (is_known_status(s) ? std::string(status_name(s)) : std::string("not in appendix A")) +
         ")";
}

std::vector<const Reply*> of(const std::vector<Reply>& rs, wire::Opcode op) {
  std::vector<const Reply*> out;
  for (const Reply& r : rs)
    if (r.error == wire::ParseError::kOk && r.pkt.bh.opcode == op) out.push_back(&r);
  return out;
}

const Reply* answer_to_request(const std::vector<Reply>& rs, uint32_t conn, uint64_t nonce) {
  for (const Reply& r : rs)
    if (r.error == wire::ParseError::kOk &&
        (r.pkt.bh.opcode == wire::Opcode::kConnectAccept ||
         r.pkt.bh.opcode == wire::Opcode::kConnectReject) &&
        r.pkt.bh.dst_conn == conn && r.pkt.connect.nonce == nonce)
      return &r;
  return nullptr;
}

const Reply* ack_of(const std::vector<Reply>& rs, uint32_t psn, uint8_t echo_flags) {
  for (const Reply* r : of(rs, wire::Opcode::kAck))
    if (r->pkt.ack.echo_psn == psn && (r->pkt.ack.flags & echo_flags) == echo_flags) return r;
  return nullptr;
}

std::string reserved_set(const Reply& r) {
  if (r.error != wire::ParseError::kOk) return {};
  struct Field {
    size_t at, len;
    uint8_t mask;
    const char* what;
  };
  constexpr size_t kBody = wire::kBaseHeaderSize;
  std::vector<Field> fields = {{0, 1, 0x03, "BH byte 0 bits 1-0 reserved"}};
  switch (r.pkt.bh.opcode) {
    case wire::Opcode::kAck:
      fields.push_back({kBody + 14, 1, 0xf0, "ACK flags bits 0xf0 reserved"});
      fields.push_back({kBody + 16, 4, 0xff, "ACK body bytes 16-19 reserved"});
      break;
    case wire::Opcode::kNak:
      fields.push_back({kBody + 5, 3, 0xff, "NAK body bytes 5-7 reserved"});
      break;
    case wire::Opcode::kDisconnect:
    case wire::Opcode::kDisconnectAck:
      fields.push_back({kBody + 5, 3, 0xff, "disconnect body bytes 5-7 reserved"});
      break;
    default: break;
  }
  const std::string name = wire::opcode_name(r.pkt.bh.opcode);
  for (const Field& f : fields)
    for (size_t i = f.at; i < f.at + f.len && i < r.bytes.size(); ++i)
      if ((r.bytes[i] & f.mask) != 0)
        return name + " packet byte " + std::to_string(i) + " is " + hex32(r.bytes[i]) + " (" +
               f.what + ")";
  // 3.3 fixes these in packets sent on none of the sender's data paths; a
  // receiver ignores them, so only what the target emits can show them.
  if (wire::is_data(r.pkt.bh.opcode) || r.pkt.bh.opcode == wire::Opcode::kProbe) return {};
  constexpr const char* kFixed = " (3.3: ACK, NAK, CONNECT_* and DISCONNECT* carry ";
  if (r.pkt.bh.path_tag != 0)
    return name + " packet BH path_tag is " + hex32(r.pkt.bh.path_tag) + kFixed + "path_tag 0)";
  if (r.pkt.bh.psn != 0)
    return name + " packet BH psn is " + hex32(r.pkt.bh.psn) + kFixed + "psn 0)";
  if ((r.pkt.bh.flags & wire::kFlagAckRequested) != 0)
    return name + " packet BH has AR set" + kFixed + "AR clear)";
  return {};
}

std::vector<const Reply*> firsts(const std::vector<const Reply*>& rs) {
  std::vector<const Reply*> out;
  for (const Reply* r : rs)
    if (std::none_of(out.begin(), out.end(),
                     [&](const Reply* o) { return o->pkt.bh.psn == r->pkt.bh.psn; }))
      out.push_back(r);
  return out;
}

wire::BaseHeader Peer::header(wire::Opcode op, uint32_t psn, uint16_t path_tag) const {
  wire::BaseHeader bh;
  bh.flags = cover_payload || !wire::is_data(op) ? wire::kFlagPayloadCovered : 0;
  bh.opcode = op;
  bh.path_tag = path_tag;
  bh.dst_conn = target_conn;
  bh.psn = psn;
  bh.tsval = 1000;
  return bh;
}

Bytes Peer::connect_req(uint64_t nonce, uint8_t version) const {
  wire::BaseHeader bh = header(wire::Opcode::kConnectReq, 0);
  bh.dst_conn = 0;
  wire::ConnectBody b;
  b.src_conn = conn_;
  b.initial_psn = initial_psn;
  b.mtu = static_cast<uint16_t>(mtu);
  b.window_log2 = window_log2;
  b.max_reads = 16;
  b.max_version = 1;
  b.nonce = nonce;
  b.reply_port = reply_port;
  Bytes p(256);
  const size_t h = wire::write_connect(p, bh, b);
  p = seal(std::move(p), h, 0);
  p[0] = static_cast<uint8_t>((version << 4) | (p[0] & 0x0f));
  if (version != wire::kVersion) {  // reseal with the other version in place
    p.resize(p.size() - wire::kIcrcSize);
    p = seal(std::move(p), h, 0);
  }
  return p;
}

Bytes Peer::own_request(const Reply& req) {
  wire::ConnectBody b = req.pkt.connect;
  b.reply_port = 0;
  Bytes p(256);
  const size_t h = wire::write_connect(p, req.pkt.bh, b);
  return seal(std::move(p), h, 0);
}

bool Peer::connect(uint64_t nonce, std::string& why, std::vector<Reply>* replies) {
  std::vector<Reply> own;
  std::vector<Reply>& rs = replies != nullptr ? *replies : own;
  auto accept_of = [&](const std::vector<Reply>& got) -> const Reply* {
    for (const Reply& r : got)
      if (r.error == wire::ParseError::kOk && r.pkt.bh.opcode == wire::Opcode::kConnectAccept &&
          r.pkt.connect.nonce == nonce && r.pkt.bh.dst_conn == conn_)
        return &r;
    return nullptr;
  };
  rs = exchange_until(
      connect_req(nonce), [&](const std::vector<Reply>& got) { return accept_of(got) != nullptr; },
      100'000, request_from);
  if (const Reply* r = accept_of(rs)) {
    target_conn = r->pkt.connect.src_conn;
    target_initial_psn = r->pkt.connect.initial_psn;
    mtu = std::min<uint32_t>(mtu, r->pkt.connect.mtu);
    window_log2 = std::max<uint8_t>(6, std::min(window_log2, r->pkt.connect.window_log2));
    return true;
  }
  why = "no CONNECT_ACCEPT for the tester's CONNECT_REQ";
  // An ACCEPT the tester could not read is another fault (ENC-1) than none
  // sent: say so, or a check of the codec fails as if the handshake did.
  for (const Reply& r : rs)
    if (r.error != wire::ParseError::kOk) {
      why += std::string(" (a datagram from the target does not decode: ") +
             wire::parse_error_name(r.error) + ")";
      break;
    }
  return false;
}

void Peer::accept(const Reply& req, uint8_t max_reads, uint16_t from) {
  answer(req, wire::Opcode::kConnectAccept, max_reads, Status::kOk, from);
}

void Peer::reject(const Reply& req, Status code) {
  answer(req, wire::Opcode::kConnectReject, 16, code);
}

void Peer::answer(const Reply& req, wire::Opcode op, uint8_t max_reads, Status code,
                  uint16_t from) {
  target_conn = req.pkt.connect.src_conn;
  target_initial_psn = req.pkt.connect.initial_psn;
  const auto offered = static_cast<uint16_t>(mtu);
  mtu = std::min<uint32_t>(mtu, req.pkt.connect.mtu);  // CONN-3: the smaller offer
  window_log2 = std::max<uint8_t>(6, std::min(window_log2, req.pkt.connect.window_log2));
  wire::BaseHeader bh = header(op, 0);
  wire::ConnectBody b;
  b.code = static_cast<uint8_t>(code);
  b.src_conn = conn_;
  b.initial_psn = initial_psn;
  b.mtu = offered;
  b.window_log2 = window_log2;
  b.max_reads = max_reads;
  b.max_version = 1;
  b.nonce = req.pkt.connect.nonce;
  Bytes p(256);
  const size_t h = wire::write_connect(p, bh, b);
  send(seal(std::move(p), h, 0), from != 0 ? from : req.entropy);
}

Bytes Peer::write(uint32_t psn, uint64_t rkey, uint64_t raddr, std::span<const uint8_t> payload,
                  uint16_t path_tag, bool ack_requested) const {
  return write_packet(psn, rkey, raddr, payload, path_tag, ack_requested, 0,
                      static_cast<uint32_t>(payload.size()));
}

Bytes Peer::write_part(uint32_t psn, uint64_t rkey, uint64_t raddr,
                       std::span<const uint8_t> payload, uint32_t offset, uint32_t msg_len,
                       bool ack_requested) const {
  return write_packet(psn, rkey, raddr, payload, 1, ack_requested, offset, msg_len);
}

Bytes Peer::write_packet(uint32_t psn, uint64_t rkey, uint64_t raddr,
                         std::span<const uint8_t> payload, uint16_t path_tag, bool ack_requested,
                         uint32_t offset, uint32_t msg_len) const {
  wire::BaseHeader bh = header(wire::Opcode::kWrite, psn, path_tag);
  if (ack_requested) bh.flags |= wire::kFlagAckRequested;
  const wire::MessageHeader mh{0, offset, msg_len};
  const wire::RdmaHeader rh{rkey, raddr};
  Bytes p(wire::largest_header_size() + payload.size() + wire::kIcrcSize);
  const size_t h = wire::write_data_headers(p, bh, mh, &rh, 0);
  // (std::copy: an empty payload's data() may be null, which memcpy may not take)
  std::copy(payload.begin(), payload.end(), p.begin() + static_cast<std::ptrdiff_t>(h));
  return seal(std::move(p), h, payload.size());
}

Bytes Peer::read_req(uint32_t psn, uint32_t read_seq, uint64_t rkey, uint64_t raddr,
                     uint32_t len) const {
  wire::BaseHeader bh = header(wire::Opcode::kReadReq, psn, 1);
  bh.flags |= wire::kFlagAckRequested;
  const wire::MessageHeader mh{read_seq, 0, len};
  const wire::RdmaHeader rh{rkey, raddr};
  Bytes p(wire::largest_header_size() + wire::kIcrcSize);
  const size_t h = wire::write_data_headers(p, bh, mh, &rh, 0);
  return seal(std::move(p), h, 0);
}

Bytes Peer::read_resp(uint32_t psn, uint32_t read_seq, uint32_t offset, uint32_t msg_len,
                      std::span<const uint8_t> payload) const {
  wire::BaseHeader bh = header(wire::Opcode::kReadResp, psn, 1);
  bh.flags |= wire::kFlagAckRequested;
  const wire::MessageHeader mh{read_seq, offset, msg_len};
  Bytes p(wire::largest_header_size() + payload.size() + wire::kIcrcSize);
  const size_t h = wire::write_data_headers(p, bh, mh, nullptr, 0);
  std::copy(payload.begin(), payload.end(), p.begin() + static_cast<std::ptrdiff_t>(h));
  return seal(std::move(p), h, payload.size());
}

Bytes Peer::message(wire::Opcode op, uint32_t psn, uint32_t msn, std::span<const uint8_t> payload,
                    uint64_t rkey, uint64_t raddr, uint32_t imm) const {
  wire::BaseHeader bh = header(op, psn, 1);
  bh.flags |= wire::kFlagAckRequested;
  const wire::MessageHeader mh{msn, 0, static_cast<uint32_t>(payload.size())};
  const wire::RdmaHeader rh{rkey, raddr};
  Bytes p(wire::largest_header_size() + payload.size() + wire::kIcrcSize);
  const size_t h = wire::write_data_headers(p, bh, mh, &rh, imm);
  std::copy(payload.begin(), payload.end(), p.begin() + static_cast<std::ptrdiff_t>(h));
  return seal(std::move(p), h, payload.size());
}

Bytes Peer::nak(uint32_t nak_psn, uint8_t code, uint32_t msn, uint32_t cum) const {
  wire::BaseHeader bh = header(wire::Opcode::kNak, 0);
  bh.flags = 0;
  Bytes p(256);
  const size_t h = wire::write_nak(p, bh, wire::NakBody{nak_psn, code, msn, cum});
  return seal(std::move(p), h, 0);
}

Bytes Peer::probe(uint16_t path_tag, uint32_t psn, bool ack_requested) const {
  wire::BaseHeader bh = header(wire::Opcode::kProbe, psn, path_tag);
  if (ack_requested) bh.flags |= wire::kFlagAckRequested;
  Bytes p(256);
  const size_t h = wire::write_probe(p, bh);
  return seal(std::move(p), h, 0);
}

Bytes Peer::disconnect(uint32_t src_conn, bool ack, uint8_t reason) const {
  wire::BaseHeader bh = header(ack ? wire::Opcode::kDisconnectAck : wire::Opcode::kDisconnect, 0);
  Bytes p(256);
  const size_t h = wire::write_disconnect(p, bh, wire::DisconnectBody{src_conn, reason});
  return seal(std::move(p), h, 0);
}

Bytes Peer::ack(uint32_t cum, const Reply& echo, uint8_t flags) const {
  return sack(cum, {}, echo, flags);
}

Bytes Peer::sack(uint32_t cum, const std::vector<uint32_t>& sacked, const Reply& echo,
                 uint8_t flags) const {
  wire::BaseHeader bh = header(wire::Opcode::kAck, 0);
  bh.flags = 0;
  wire::AckBody a;
  a.cum_psn = cum;
  a.echo_psn = echo.pkt.bh.psn;
  a.echo_tsval = echo.pkt.bh.tsval;
  a.echo_path_tag = echo.pkt.bh.path_tag;
  a.flags = flags;
  for (uint32_t psn : sacked) {
    const uint32_t bit = psn - cum - 1;  // bit i of word j: PSN cum + 1 + 64 j + i
    if (bit >= 64 * wire::kMaxSackWords) continue;
    a.sack[bit / 64] |= uint64_t{1} << (bit % 64);
    a.sack_words = std::max<uint8_t>(a.sack_words, static_cast<uint8_t>(bit / 64 + 1));
  }
  Bytes p(512);
  const size_t h = wire::write_ack(p, bh, a);
  return seal(std::move(p), h, 0);
}

Bytes Peer::with_dst_conn(Bytes p, uint32_t dst_conn) {
  wire::Packet pkt;
  if (wire::decode(p, pkt) != wire::ParseError::kOk) return p;
  const size_t payload = pkt.payload.size();
  const size_t h = p.size() - payload - wire::kIcrcSize;
  be::store32(p.data() + 4, dst_conn);
  p.resize(p.size() - wire::kIcrcSize);
  return seal(std::move(p), h, payload);
}

std::vector<Reply> Peer::run(uint64_t ns) {
  std::vector<Reply> out;
  for (Sent& s : t_.run_for(ns)) {
    Reply r;
    r.bytes = std::move(s.bytes);
    r.entropy = s.entropy;
    r.ecn = s.ecn;
    r.dscp = s.dscp;
    r.to_stranger = s.to_stranger;
    r.to_port = s.to_port;
    out.push_back(std::move(r));
  }
  // Decoded once every Reply has its final address: pkt.payload points into bytes.
  for (Reply& r : out) r.error = wire::decode(r.bytes, r.pkt);
  return out;
}

}  // namespace metaroce::conformance
