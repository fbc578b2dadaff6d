#include "metaroce/wire.hpp"

#include "bytes.hpp"
#include "crc32c.hpp"
#include "metaroce/status.hpp"

namespace metaroce::wire {
using detail::load16;
using detail::load32;
using detail::load64;
using detail::store16;
using detail::store32;
using detail::store64;

const char* opcode_name(Opcode op) {
  switch (op) {
    case Opcode::kWrite: return "WRITE";
    case Opcode::kWriteImm: return "WRITE_IMM";
    case Opcode::kSend: return "SEND";
    case Opcode::kSendImm: return "SEND_IMM";
    case Opcode::kReadReq: return "READ_REQ";
    case Opcode::kReadResp: return "READ_RESP";
    case Opcode::kAck: return "ACK";
    case Opcode::kNak: return "NAK";
    case Opcode::kProbe: return "PROBE";
    case Opcode::kConnectReq: return "CONNECT_REQ";
    case Opcode::kConnectAccept: return "CONNECT_ACCEPT";
    case Opcode::kConnectReject: return "CONNECT_REJECT";
    case Opcode::kDisconnect: return "DISCONNECT";
    case Opcode::kDisconnectAck: return "DISCONNECT_ACK";
  }
  return "UNKNOWN";
}

namespace {
// What the codec needs to know of an opcode, found with one table lookup per
// packet instead of a chain of comparisons at every use.
struct OpInfo {
  uint8_t header = 0;  // bytes before the payload (ACK: without SACK words); 0: unknown
  bool payload = false;
};
// An entry for every byte value, so that a lookup needs no range test.
constexpr std::array<OpInfo, 256> make_ops() {
  std::array<OpInfo, 256> t{};
  for (uint8_t v = 0x01; v <= 0x06; ++v) {
    const auto op = static_cast<Opcode>(v);
    size_t n = kBaseHeaderSize + kMessageHeaderSize;
    if (has_rdma_header(op)) n += kRdmaHeaderSize;
    if (has_imm(op)) n += kImmSize;
    t[v] = {static_cast<uint8_t>(n), carries_payload(op)};
  }
  t[0x10] = {kBaseHeaderSize + kAckFixedSize, false};
  t[0x11] = {kBaseHeaderSize + kNakBodySize, false};
  t[0x12] = {kBaseHeaderSize, false};
  for (uint8_t v = 0x20; v <= 0x22; ++v) t[v] = {kBaseHeaderSize + kConnectBodySize, false};
  for (uint8_t v = 0x23; v <= 0x24; ++v) t[v] = {kBaseHeaderSize + kDisconnectBodySize, false};
  return t;
}
constexpr auto kOps = make_ops();
}  // namespace

bool is_known_opcode(uint8_t v) { return kOps[v].header != 0; }

const char* parse_error_name(ParseError e) {
  switch (e) {
    case ParseError::kOk: return "ok";
    case ParseError::kTruncated: return "truncated";
    case ParseError::kBadVersion: return "bad-version";
    case ParseError::kBadOpcode: return "bad-opcode";
    case ParseError::kBadChecksum: return "bad-checksum";
    case ParseError::kBadLength: return "bad-length";
    case ParseError::kBadField: return "bad-field";
  }
  return "unknown";
}

size_t header_size(Opcode op, uint8_t sack_words) {
  const auto v = static_cast<uint8_t>(op);
  if (!is_known_opcode(v)) return kBaseHeaderSize;
  return kOps[v].header + (op == Opcode::kAck ? size_t{sack_words} * 8 : 0);
}

size_t largest_header_size() {
  size_t most = kBaseHeaderSize;
  for (size_t v = 0; v < kOps.size(); ++v)
    if (kOps[v].header != 0)
      most = std::max(most, header_size(static_cast<Opcode>(v), kMaxSackWords));
  return most;
}

namespace {

void put_base(uint8_t* p, const BaseHeader& bh) {
  p[0] = static_cast<uint8_t>((bh.version << 4) | (bh.flags & 0x0f));
  p[1] = static_cast<uint8_t>(bh.opcode);
  store16(p + 2, bh.path_tag);
  store32(p + 4, bh.dst_conn);
  store32(p + 8, bh.psn);
  store32(p + 12, bh.tsval);
}

void get_base(const uint8_t* p, BaseHeader& bh) {
  bh.version = static_cast<uint8_t>(p[0] >> 4);
  bh.flags = static_cast<uint8_t>(p[0] & 0x0f);
  bh.opcode = static_cast<Opcode>(p[1]);
  bh.path_tag = load16(p + 2);
  bh.dst_conn = load32(p + 4);
  bh.psn = load32(p + 8);
  bh.tsval = load32(p + 12);
}

}  // namespace

ParseError decode_base(std::span<const uint8_t> d, BaseHeader& out) {
  if (d.size() < kBaseHeaderSize + kIcrcSize) return ParseError::kTruncated;
  get_base(d.data(), out);
  if (out.version != kVersion) return ParseError::kBadVersion;
  if (!is_known_opcode(static_cast<uint8_t>(out.opcode))) return ParseError::kBadOpcode;
  return ParseError::kOk;
}

namespace {
// Empties a Packet without touching all of its SACK words: every decode keeps
// the words past sack_words zero, so only the ones in use need clearing (a
// blanket `out = Packet{}` costs more than the rest of a decode).
void reset(Packet& out) {
  const size_t used = out.ack.sack_words < kMaxSackWords ? out.ack.sack_words : kMaxSackWords;
  for (size_t i = 0; i < used; ++i) out.ack.sack[i] = 0;
  out.bh = BaseHeader{};
  out.mh = MessageHeader{};
  out.rh = RdmaHeader{};
  out.imm = 0;
  out.ack.cum_psn = out.ack.echo_psn = out.ack.echo_tsval = 0;
  out.ack.echo_path_tag = 0;
  out.ack.flags = out.ack.sack_words = 0;
  out.nak = NakBody{};
  out.connect = ConnectBody{};
  out.disconnect = DisconnectBody{};
  out.payload = {};
  out.trimmed = false;
}

// Sets bh and payload and every field of the opcode's own group (data: mh,
// rh, imm; ACK; NAK; connect; disconnect), leaving the other groups as they are.
ParseError parse(std::span<const uint8_t> d, Packet& out, bool flagged_trimmed) {
  const size_t size = d.size();
  if (size < kBaseHeaderSize + kIcrcSize) return ParseError::kTruncated;
  const uint8_t* p = d.data();
  get_base(p, out.bh);
  if (out.bh.version != kVersion) return ParseError::kBadVersion;
  const auto opv = static_cast<uint8_t>(out.bh.opcode);
  // is_known_opcode, with the entry it reads kept for the tests below.
  const OpInfo info = kOps[opv];
  if (info.header == 0) return ParseError::kBadOpcode;
  const Opcode op = out.bh.opcode;
  size_t hlen = info.header;
  if (size < hlen + kIcrcSize) return ParseError::kTruncated;
  // TRIM-2: the flag counts only on what a trimming switch leaves, a data
  // packet cut to its headers; a flagged packet with payload was not cut.
  out.trimmed = flagged_trimmed && is_data(op) && size == hlen + kIcrcSize;
  size_t payload_len = 0;
  uint8_t sack_words = 0;
  if (!info.payload) {
    // A packet without payload has its ICRC over everything before it, so
    // check it before trusting any length field in it (BAD-4 before BAD-5/6).
    // That also covers the headers: no second pass below.
    if (detail::crc32c_short(p, size - kIcrcSize) != load32(p + size - kIcrcSize))
      return ParseError::kBadChecksum;
    if (op == Opcode::kAck) {
      sack_words = p[kBaseHeaderSize + 15];
      if (sack_words > kMaxSackWords) return ParseError::kBadField;
      hlen += size_t{sack_words} * 8;
      if (size < hlen + kIcrcSize) return ParseError::kTruncated;
    }
    if (size != hlen + kIcrcSize) return ParseError::kBadLength;
  } else {
    payload_len = size - hlen - kIcrcSize;
    const bool covered = (out.bh.flags & kFlagPayloadCovered) != 0;
    const size_t crc_len = covered ? hlen + payload_len : hlen;
    // TRIM-2: a switch cut the payload the ICRC covered; nothing is left to
    // check it against. The packet can only be echoed, never placed. One
    // that had no payload to lose (offset = msg_len) lost nothing: its ICRC
    // covers exactly the headers that are here, and is checked.
    const bool unverifiable =
        out.trimmed && covered && load32(p + kBaseHeaderSize + 4) < load32(p + kBaseHeaderSize + 8);
    if (!unverifiable && detail::crc32c_short(p, crc_len) != load32(p + hlen + payload_len))
      return ParseError::kBadChecksum;
  }

  const uint8_t* q = p + kBaseHeaderSize;
  if (is_data(op)) {
    out.mh.msn = load32(q);
    out.mh.offset = load32(q + 4);
    out.mh.msg_len = load32(q + 8);
    q += kMessageHeaderSize;
    if (has_rdma_header(op)) {
      out.rh.rkey = load64(q);
      out.rh.raddr = load64(q + 8);
      q += kRdmaHeaderSize;
    } else {
      out.rh = RdmaHeader{};
    }
    out.imm = has_imm(op) ? load32(q) : 0;
    // A packet never reaches past its message (BAD-5); READ_REQ has no payload.
    if (out.mh.offset > out.mh.msg_len || payload_len > out.mh.msg_len - out.mh.offset)
      return ParseError::kBadLength;
    if (op == Opcode::kReadReq && out.mh.offset != 0) return ParseError::kBadField;
  } else if (op == Opcode::kAck) {
    out.ack.cum_psn = load32(q);
    out.ack.echo_psn = load32(q + 4);
    out.ack.echo_tsval = load32(q + 8);
    out.ack.echo_path_tag = load16(q + 12);
    out.ack.flags = q[14];
    out.ack.sack_words = sack_words;
    for (size_t i = 0; i < sack_words; ++i) out.ack.sack[i] = load64(q + kAckFixedSize + 8 * i);
  } else if (op == Opcode::kNak) {
    out.nak.nak_psn = load32(q);
    out.nak.code = q[4];
    out.nak.msn = load32(q + 8);
    out.nak.cum_psn = load32(q + 12);
    if (!is_wire_nak_code(out.nak.code)) return ParseError::kBadField;
  } else if (op == Opcode::kConnectReq || op == Opcode::kConnectAccept ||
             op == Opcode::kConnectReject) {
    out.connect.src_conn = load32(q);
    out.connect.initial_psn = load32(q + 4);
    out.connect.mtu = load16(q + 8);
    out.connect.window_log2 = q[10];
    out.connect.max_reads = q[11];
    out.connect.code = q[12];
    out.connect.max_version = q[13];
    out.connect.reply_port = load16(q + 14);
    out.connect.nonce = load64(q + 16);
  } else if (op == Opcode::kDisconnect || op == Opcode::kDisconnectAck) {
    out.disconnect.src_conn = load32(q);
    out.disconnect.reason = q[4];
  }
  out.payload = std::span<const uint8_t>(p + hlen, payload_len);
  return ParseError::kOk;
}
}  // namespace

ParseError decode(std::span<const uint8_t> d, Packet& out) {
  reset(out);
  return parse(d, out, false);
}

ParseError decode_fields(std::span<const uint8_t> d, Packet& out, bool flagged_trimmed) {
  return parse(d, out, flagged_trimmed);
}

size_t write_data_headers(std::span<uint8_t> out, const BaseHeader& bh, const MessageHeader& mh,
                          const RdmaHeader* rh, uint32_t imm) {
  const size_t n = header_size(bh.opcode);
  if (out.size() < n || !is_data(bh.opcode) || (has_rdma_header(bh.opcode) && rh == nullptr))
    return 0;
  uint8_t* p = out.data();
  put_base(p, bh);
  uint8_t* q = p + kBaseHeaderSize;
  store32(q, mh.msn);
  store32(q + 4, mh.offset);
  store32(q + 8, mh.msg_len);
  q += kMessageHeaderSize;
  if (has_rdma_header(bh.opcode)) {
    store64(q, rh->rkey);
    store64(q + 8, rh->raddr);
    q += kRdmaHeaderSize;
  }
  if (has_imm(bh.opcode)) store32(q, imm);
  return n;
}

// Whole 8-byte words, each read, patched and written back with one load and
// one store: a sender reads the headers back for the ICRC at once, 8 bytes
// at a time, and a load that spans several narrower stores cannot take its
// bytes from them; it waits until they reach the cache. Written field by
// field, that wait was half of emit_from's samples on a loopback sender.
void patch_data_headers(uint8_t* p, Opcode op, uint16_t path_tag, uint32_t psn, uint32_t tsval,
                        uint32_t offset, uint64_t raddr) {
  // The offsets put_base and write_data_headers use, word by word: the path
  // tag is bytes 2-3 of word 0, the PSN and tsval all of word 1, the offset
  // bytes 4-7 of word 2, and the raddr bytes 4-7 of word 4 and 0-3 of word 5.
  static_assert(kBaseHeaderSize == 16 && kMessageHeaderSize == 12 && kRdmaHeaderSize == 16);
  store64(p, (load64(p) & ~(uint64_t{0xffff} << 32)) | uint64_t{path_tag} << 32);
  store64(p + 8, uint64_t{psn} << 32 | tsval);
  store64(p + 16, (load64(p + 16) & ~uint64_t{0xffffffff}) | offset);
  if (has_rdma_header(op)) {
    store64(p + 32, (load64(p + 32) & ~uint64_t{0xffffffff}) | raddr >> 32);
    store64(p + 40, (load64(p + 40) & uint64_t{0xffffffff}) | raddr << 32);
  }
}

void patch_message_headers(uint8_t* p, Opcode op, uint32_t msn, uint32_t msg_len, uint64_t rkey,
                           uint32_t imm) {
  uint8_t* q = p + kBaseHeaderSize;
  store32(q, msn);
  store32(q + 8, msg_len);
  q += kMessageHeaderSize;
  if (has_rdma_header(op)) {
    store64(q, rkey);
    q += kRdmaHeaderSize;
  }
  if (has_imm(op)) store32(q, imm);
}

bool data_headers_end_message(const uint8_t* p, uint32_t payload_len) {
  const uint8_t* q = p + kBaseHeaderSize;  // write_data_headers' message header
  return load32(q + 4) + payload_len == load32(q + 8);
}

size_t write_ack(std::span<uint8_t> out, const BaseHeader& bh, const AckBody& ack) {
  const uint8_t words = ack.sack_words > kMaxSackWords ? kMaxSackWords : ack.sack_words;
  return write_ack(out, bh, ack.cum_psn, ack.echo_psn, ack.echo_tsval, ack.echo_path_tag, ack.flags,
                   std::span<const uint64_t>(ack.sack.data(), words));
}

size_t write_ack(std::span<uint8_t> out, const BaseHeader& bh, uint32_t cum_psn, uint32_t echo_psn,
                 uint32_t echo_tsval, uint16_t echo_path_tag, uint8_t flags,
                 std::span<const uint64_t> sack) {
  const size_t words = sack.size() > kMaxSackWords ? kMaxSackWords : sack.size();
  const size_t n = header_size(Opcode::kAck, static_cast<uint8_t>(words));
  if (out.size() < n) return 0;
  uint8_t* p = out.data();
  BaseHeader b = bh;
  b.opcode = Opcode::kAck;
  put_base(p, b);
  uint8_t* q = p + kBaseHeaderSize;
  store32(q, cum_psn);
  store32(q + 4, echo_psn);
  store32(q + 8, echo_tsval);
  store16(q + 12, echo_path_tag);
  q[14] = flags;
  q[15] = static_cast<uint8_t>(words);
  store32(q + 16, 0);
  for (size_t i = 0; i < words; ++i) store64(q + kAckFixedSize + 8 * i, sack[i]);
  return n;
}

size_t write_nak(std::span<uint8_t> out, const BaseHeader& bh, const NakBody& nak) {
  const size_t n = header_size(Opcode::kNak);
  if (out.size() < n) return 0;
  uint8_t* p = out.data();
  BaseHeader b = bh;
  b.opcode = Opcode::kNak;
  put_base(p, b);
  uint8_t* q = p + kBaseHeaderSize;
  store32(q, nak.nak_psn);
  q[4] = nak.code;
  q[5] = q[6] = q[7] = 0;
  store32(q + 8, nak.msn);
  store32(q + 12, nak.cum_psn);
  return n;
}

size_t write_probe(std::span<uint8_t> out, const BaseHeader& bh) {
  if (out.size() < kBaseHeaderSize) return 0;
  BaseHeader b = bh;
  b.opcode = Opcode::kProbe;
  put_base(out.data(), b);
  return kBaseHeaderSize;
}

uint16_t request_reply_port(std::span<const uint8_t> d) {
  if (d.size() < kBaseHeaderSize + kConnectBodySize + kIcrcSize ||
      d[1] != static_cast<uint8_t>(Opcode::kConnectReq))
    return 0;
  return load16(d.data() + kBaseHeaderSize + 14);
}

uint32_t peek_dst_conn(std::span<const uint8_t> d) {
  if (d.size() < 8 || d[1] == static_cast<uint8_t>(Opcode::kConnectReq)) return 0;
  return load32(d.data() + 4);
}

size_t write_connect(std::span<uint8_t> out, const BaseHeader& bh, const ConnectBody& c) {
  const size_t n = header_size(Opcode::kConnectReq);
  if (out.size() < n || (bh.opcode != Opcode::kConnectReq && bh.opcode != Opcode::kConnectAccept &&
                         bh.opcode != Opcode::kConnectReject))
    return 0;
  uint8_t* p = out.data();
  put_base(p, bh);
  uint8_t* q = p + kBaseHeaderSize;
  store32(q, c.src_conn);
  store32(q + 4, c.initial_psn);
  store16(q + 8, c.mtu);
  q[10] = c.window_log2;
  q[11] = c.max_reads;
  q[12] = c.code;
  q[13] = c.max_version;
  store16(q + 14, c.reply_port);
  store64(q + 16, c.nonce);
  return n;
}

size_t write_disconnect(std::span<uint8_t> out, const BaseHeader& bh, const DisconnectBody& d) {
  const size_t n = header_size(Opcode::kDisconnect);
  if (out.size() < n || (bh.opcode != Opcode::kDisconnect && bh.opcode != Opcode::kDisconnectAck))
    return 0;
  uint8_t* p = out.data();
  put_base(p, bh);
  uint8_t* q = p + kBaseHeaderSize;
  store32(q, d.src_conn);
  q[4] = d.reason;
  q[5] = q[6] = q[7] = 0;
  return n;
}

size_t seal(std::span<uint8_t> out, size_t header_len, size_t payload_len) {
  return detail::seal_inline(out, header_len, payload_len);
}

}  // namespace metaroce::wire
