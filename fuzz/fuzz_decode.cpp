// libFuzzer target for the wire codec (metaroce::wire).
//
// Each input is used twice:
//  1. As a datagram: decode() must not crash, must agree with decode_base(),
//     and every packet it accepts must satisfy the spec's invariants
//     (BAD-1..BAD-6) and re-encode to the same bytes (reserved fields aside)
//     with the writers and seal().
//  2. As a recipe: the bytes choose an opcode and field values; the packet is
//     encoded, must decode back to the same fields, and one flipped bit inside
//     the ICRC's coverage must make decode() reject it.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "metaroce/status.hpp"
#include "metaroce/wire.hpp"

namespace w = metaroce::wire;

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_decode: invariant violated: %s\n", what);
  std::abort();
}
#define CHECK(cond)           \
  do {                        \
    if (!(cond)) fail(#cond); \
  } while (0)

uint32_t load32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

constexpr size_t kMaxDatagram = 65536;

// Opcodes in the order the recipe picks them.
constexpr w::Opcode kOpcodes[] = {
    w::Opcode::kWrite,      w::Opcode::kWriteImm,      w::Opcode::kSend,
    w::Opcode::kSendImm,    w::Opcode::kReadReq,       w::Opcode::kReadResp,
    w::Opcode::kAck,        w::Opcode::kNak,           w::Opcode::kProbe,
    w::Opcode::kConnectReq, w::Opcode::kConnectAccept, w::Opcode::kConnectReject,
    w::Opcode::kDisconnect, w::Opcode::kDisconnectAck,
};

bool is_connect(w::Opcode op) {
  return op == w::Opcode::kConnectReq || op == w::Opcode::kConnectAccept ||
         op == w::Opcode::kConnectReject;
}
bool is_disconnect(w::Opcode op) {
  return op == w::Opcode::kDisconnect || op == w::Opcode::kDisconnectAck;
}

// Writes p's headers with the codec's writers; returns the header length.
size_t write_headers(std::span<uint8_t> out, const w::Packet& p) {
  const w::Opcode op = p.bh.opcode;
  if (w::is_data(op)) {
    return w::write_data_headers(out, p.bh, p.mh, w::has_rdma_header(op) ? &p.rh : nullptr, p.imm);
  }
  switch (op) {
    case w::Opcode::kAck: return w::write_ack(out, p.bh, p.ack);
    case w::Opcode::kNak: return w::write_nak(out, p.bh, p.nak);
    case w::Opcode::kProbe: return w::write_probe(out, p.bh);
    default: break;
  }
  if (is_connect(op)) return w::write_connect(out, p.bh, p.connect);
  if (is_disconnect(op)) return w::write_disconnect(out, p.bh, p.disconnect);
  fail("write_headers: opcode without a writer");
}

// Encodes p (headers, payload, ICRC) into out; returns the datagram length.
size_t encode(std::vector<uint8_t>& out, const w::Packet& p) {
  out.assign(w::header_size(p.bh.opcode, p.ack.sack_words) + p.payload.size() + w::kIcrcSize, 0);
  const size_t hlen = write_headers(out, p);
  CHECK(hlen == w::header_size(p.bh.opcode, p.ack.sack_words));
  if (!p.payload.empty()) std::memcpy(out.data() + hlen, p.payload.data(), p.payload.size());
  const size_t total = w::seal(out, hlen, p.payload.size());
  CHECK(total == out.size());
  // A buffer one byte short is refused, not overrun.
  std::vector<uint8_t> small(hlen - 1);
  CHECK(write_headers(small, p) == 0);
  return total;
}

// Field-by-field equality of everything the opcode carries.
bool same_packet(const w::Packet& a, const w::Packet& b) {
  if (a.bh.version != b.bh.version || a.bh.flags != b.bh.flags || a.bh.opcode != b.bh.opcode ||
      a.bh.path_tag != b.bh.path_tag || a.bh.dst_conn != b.bh.dst_conn || a.bh.psn != b.bh.psn ||
      a.bh.tsval != b.bh.tsval)
    return false;
  const w::Opcode op = a.bh.opcode;
  if (a.payload.size() != b.payload.size() ||
      (!a.payload.empty() &&
       std::memcmp(a.payload.data(), b.payload.data(), a.payload.size()) != 0))
    return false;
  if (w::is_data(op)) {
    if (a.mh.msn != b.mh.msn || a.mh.offset != b.mh.offset || a.mh.msg_len != b.mh.msg_len)
      return false;
    if (w::has_rdma_header(op) && (a.rh.rkey != b.rh.rkey || a.rh.raddr != b.rh.raddr))
      return false;
    if (w::has_imm(op) && a.imm != b.imm) return false;
    return true;
  }
  if (op == w::Opcode::kAck) {
    const auto& x = a.ack;
    const auto& y = b.ack;
    if (x.cum_psn != y.cum_psn || x.echo_psn != y.echo_psn || x.echo_tsval != y.echo_tsval ||
        x.echo_path_tag != y.echo_path_tag || x.flags != y.flags || x.sack_words != y.sack_words)
      return false;
    for (size_t i = 0; i < x.sack_words; ++i)
      if (x.sack[i] != y.sack[i]) return false;
    return true;
  }
  if (op == w::Opcode::kNak) {
    return a.nak.nak_psn == b.nak.nak_psn && a.nak.code == b.nak.code && a.nak.msn == b.nak.msn &&
           a.nak.cum_psn == b.nak.cum_psn;
  }
  if (is_connect(op)) {
    const auto& x = a.connect;
    const auto& y = b.connect;
    return x.src_conn == y.src_conn && x.initial_psn == y.initial_psn && x.mtu == y.mtu &&
           x.window_log2 == y.window_log2 && x.max_reads == y.max_reads && x.code == y.code &&
           x.max_version == y.max_version && x.reply_port == y.reply_port && x.nonce == y.nonce;
  }
  if (is_disconnect(op)) {
    return a.disconnect.src_conn == b.disconnect.src_conn &&
           a.disconnect.reason == b.disconnect.reason;
  }
  return true;  // PROBE: base header only
}

// Byte ranges (from the packet start) the writers zero: reserved fields. The
// connect body has none: its bytes 14-15 are reply_port (section 3.12).
bool reserved_byte(w::Opcode op, size_t i) {
  const size_t b = w::kBaseHeaderSize;
  if (op == w::Opcode::kAck) return i >= b + 16 && i < b + 20;
  if (op == w::Opcode::kNak) return i >= b + 5 && i < b + 8;
  if (is_disconnect(op)) return i >= b + 5 && i < b + 8;
  return false;
}

// Part 1: the input as a datagram.
void check_datagram(std::span<const uint8_t> d) {
  w::BaseHeader base;
  const w::ParseError base_err = w::decode_base(d, base);
  w::Packet p;
  const w::ParseError err = w::decode(d, p);
  CHECK(w::parse_error_name(err) != nullptr);
  if (base_err != w::ParseError::kOk) {
    // decode() checks the base header first and reports the same reason.
    CHECK(err == base_err);
    return;
  }
  CHECK(base.version == w::kVersion);
  CHECK(w::is_known_opcode(static_cast<uint8_t>(base.opcode)));
  CHECK(w::opcode_name(base.opcode) != nullptr);
  if (err != w::ParseError::kOk) return;

  // Accepted: the spec's invariants hold.
  const w::Opcode op = p.bh.opcode;
  CHECK(p.bh.version == base.version && p.bh.flags == base.flags && op == base.opcode &&
        p.bh.path_tag == base.path_tag && p.bh.dst_conn == base.dst_conn && p.bh.psn == base.psn &&
        p.bh.tsval == base.tsval);
  CHECK(p.bh.flags <= 0x0f);
  const uint8_t sack_words = op == w::Opcode::kAck ? p.ack.sack_words : 0;
  CHECK(sack_words <= w::kMaxSackWords);  // BAD-6
  const size_t hlen = w::header_size(op, sack_words);
  CHECK(d.size() >= hlen + w::kIcrcSize);  // BAD-1
  CHECK(p.payload.size() == d.size() - hlen - w::kIcrcSize);
  CHECK(p.payload.empty() || p.payload.data() == d.data() + hlen);  // points into d
  CHECK(p.payload.empty() || w::carries_payload(op));               // BAD-5
  if (w::is_data(op)) {
    CHECK(p.mh.offset <= p.mh.msg_len);  // BAD-5
    CHECK(p.payload.size() <= p.mh.msg_len - p.mh.offset);
    if (op == w::Opcode::kReadReq) CHECK(p.mh.offset == 0 && p.payload.empty());  // BAD-6
  }
  if (op == w::Opcode::kNak) CHECK(metaroce::is_wire_nak_code(p.nak.code));  // BAD-6
  const bool covered = (p.bh.flags & w::kFlagPayloadCovered) != 0;
  const size_t crc_len = covered ? hlen + p.payload.size() : hlen;
  CHECK(w::crc32c(0, d.data(), crc_len) == load32(d.data() + hlen + p.payload.size()));  // INT-1

  // Re-encode: the same bytes, except reserved fields the writers zero (and
  // therefore the ICRC when one of them was set).
  std::vector<uint8_t> again;
  CHECK(encode(again, p) == d.size());
  bool reserved_set = false;
  for (size_t i = 0; i < hlen; ++i) {
    if (reserved_byte(op, i)) {
      CHECK(again[i] == 0);
      reserved_set |= d[i] != 0;
    } else {
      CHECK(again[i] == d[i]);
    }
  }
  CHECK(std::memcmp(again.data() + hlen, d.data() + hlen, p.payload.size()) == 0);
  if (!reserved_set) CHECK(std::memcmp(again.data(), d.data(), d.size()) == 0);
  w::Packet q;
  CHECK(w::decode(again, q) == w::ParseError::kOk);
  CHECK(same_packet(p, q));
}

// Reads the recipe bytes; returns zeros once they run out.
class Recipe {
 public:
  explicit Recipe(std::span<const uint8_t> d) : d_(d) {}
  uint8_t u8() { return pos_ < d_.size() ? d_[pos_++] : 0; }
  // Operands of | are unsequenced: read the high part first, explicitly.
  uint16_t u16() {
    const uint16_t hi = u8();
    return static_cast<uint16_t>((hi << 8) | u8());
  }
  uint32_t u32() {
    const uint32_t hi = u16();
    return (hi << 16) | u16();
  }
  uint64_t u64() {
    const uint64_t hi = u32();
    return (hi << 32) | u32();
  }
  std::span<const uint8_t> rest() { return d_.subspan(pos_); }

 private:
  std::span<const uint8_t> d_;
  size_t pos_ = 0;
};

// Part 2: the input as a recipe for a valid packet.
void check_recipe(std::span<const uint8_t> d) {
  Recipe r(d);
  w::Packet p;
  const uint8_t pick = r.u8();
  const w::Opcode op = kOpcodes[pick % std::size(kOpcodes)];
  p.bh.opcode = op;
  p.bh.flags = static_cast<uint8_t>(r.u8() & 0x0f);
  p.bh.path_tag = r.u16();
  p.bh.dst_conn = r.u32();
  p.bh.psn = r.u32();
  p.bh.tsval = r.u32();
  std::vector<uint8_t> payload;
  if (w::is_data(op)) {
    p.mh.msn = r.u32();
    p.rh.rkey = r.u64();
    p.rh.raddr = r.u64();
    p.imm = r.u32();
    if (w::carries_payload(op)) {
      const std::span<const uint8_t> rest = r.rest();
      const size_t n = rest.size() > 9000 ? 9000 : rest.size();
      payload.assign(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(n));
    }
    // A consistent message: offset + payload <= msg_len (BAD-5).
    const uint32_t plen = static_cast<uint32_t>(payload.size());
    const uint32_t room = UINT32_MAX - plen;
    p.mh.offset = op == w::Opcode::kReadReq ? 0 : static_cast<uint32_t>(p.mh.msn % (room / 2 + 1));
    const uint64_t extra = p.bh.tsval % (uint64_t{room - p.mh.offset} + 1);
    p.mh.msg_len = static_cast<uint32_t>(p.mh.offset + plen + extra);
    if (!w::has_rdma_header(op)) p.rh = {};
    if (!w::has_imm(op)) p.imm = 0;
  } else if (op == w::Opcode::kAck) {
    p.ack.cum_psn = r.u32();
    p.ack.echo_psn = r.u32();
    p.ack.echo_tsval = r.u32();
    p.ack.echo_path_tag = r.u16();
    p.ack.flags = r.u8();
    p.ack.sack_words = static_cast<uint8_t>(r.u8() % (w::kMaxSackWords + 1));
    for (size_t i = 0; i < p.ack.sack_words; ++i) p.ack.sack[i] = r.u64();
  } else if (op == w::Opcode::kNak) {
    p.nak.nak_psn = r.u32();
    p.nak.code = static_cast<uint8_t>(1 + r.u8() % 7);  // every wire code, 0x01-0x07
    p.nak.msn = r.u32();
    p.nak.cum_psn = r.u32();
  } else if (is_connect(op)) {
    p.connect.src_conn = r.u32();
    p.connect.initial_psn = r.u32();
    p.connect.mtu = r.u16();
    p.connect.window_log2 = r.u8();
    p.connect.max_reads = r.u8();
    p.connect.code = r.u8();
    p.connect.max_version = r.u8();
    p.connect.reply_port = r.u16();
    p.connect.nonce = r.u64();
  } else if (is_disconnect(op)) {
    p.disconnect.src_conn = r.u32();
    p.disconnect.reason = r.u8();
  }
  p.payload = payload;

  std::vector<uint8_t> bytes;
  const size_t len = encode(bytes, p);
  CHECK(len <= kMaxDatagram);
  w::Packet q;
  CHECK(w::decode(bytes, q) == w::ParseError::kOk);
  CHECK(same_packet(p, q));

  // One flipped bit inside the ICRC's coverage (or in the ICRC) is caught:
  // CRC-32C detects every single-bit error.
  const size_t hlen = w::header_size(op, p.ack.sack_words);
  const bool covered = (p.bh.flags & w::kFlagPayloadCovered) != 0;
  const std::vector<uint8_t> original = bytes;
  const size_t bit = (size_t{pick} * 7919u + p.bh.tsval) % (len * 8);
  const size_t byte = bit / 8;
  bytes[byte] = static_cast<uint8_t>(bytes[byte] ^ (1u << (bit % 8)));
  const w::ParseError e = w::decode(bytes, q);
  const bool in_payload = byte >= hlen && byte < hlen + payload.size();
  if (in_payload && !covered) {
    CHECK(e == w::ParseError::kOk);  // INT-2: payload left to the UDP checksum
    CHECK(q.payload.size() == payload.size());
  } else {
    CHECK(e != w::ParseError::kOk);
  }

  // Without its ICRC (and payload) a packet is shorter than its headers + ICRC:
  // BAD-1. Except that an opcode without payload has its ICRC checked before
  // its variable-length fields (BAD-4 before BAD-6): an ACK cut inside its
  // SACK words is long enough for the fixed part and fails the ICRC instead.
  const std::span<const uint8_t> cut(original.data(), hlen);
  const w::ParseError ce = w::decode(cut, q);
  CHECK(ce == w::ParseError::kTruncated ||
        (!w::carries_payload(op) && hlen >= w::header_size(op) + w::kIcrcSize &&
         ce == w::ParseError::kBadChecksum));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxDatagram) return -1;  // not a UDP payload: keep it out of the corpus
  const std::span<const uint8_t> in(data, size);
  check_datagram(in);
  check_recipe(in);
  return 0;
}
