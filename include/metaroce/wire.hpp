// MetaRoCE wire format, version 1 (spec "docs/spec/metaroce-v0.1.md", section 3).
//
// Every packet is: Base Header | opcode-specific headers | payload | ICRC.
// Fields are big-endian, offsets fixed per opcode; nothing here casts packet
// bytes to structs. decode() checks every length before it reads. The same
// codec serves the engine, the conformance tester and the dissector tests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace metaroce::wire {

inline constexpr uint8_t kVersion = 1;
inline constexpr uint16_t kDefaultUdpPort = 4792;  // spec ENC-2

enum class Opcode : uint8_t {
  kWrite = 0x01,
  kWriteImm = 0x02,
  kSend = 0x03,
  kSendImm = 0x04,
  kReadReq = 0x05,
  kReadResp = 0x06,
  kAck = 0x10,
  kNak = 0x11,
  kProbe = 0x12,
  kConnectReq = 0x20,
  kConnectAccept = 0x21,
  kConnectReject = 0x22,
  kDisconnect = 0x23,
  kDisconnectAck = 0x24,
};

// ENC-6: ACK and NAK travel in the control class (EndpointConfig::control_dscp).
// Takes byte 1 of a packet, its opcode.
constexpr bool is_acknowledgement(uint8_t opcode) {
  return opcode == static_cast<uint8_t>(Opcode::kAck) ||
         opcode == static_cast<uint8_t>(Opcode::kNak);
}

// Base Header flag bits (low nibble of byte 0).
inline constexpr uint8_t kFlagPayloadCovered = 0x8;  // ICRC covers the payload (INT-2)
inline constexpr uint8_t kFlagAckRequested = 0x4;    // receiver acks at once (ACK-4)

// Ack flag bits.
inline constexpr uint8_t kAckEchoCe = 0x01;       // echoed packet arrived CE-marked
inline constexpr uint8_t kAckEchoDup = 0x02;      // echoed packet was a duplicate
inline constexpr uint8_t kAckEchoProbe = 0x04;    // echoed packet was a PROBE (LOSS-8)
inline constexpr uint8_t kAckEchoTrimmed = 0x08;  // echoed packet lost its payload (TRIM-2)

// DSCP a trimming switch gives a packet whose payload it cut (TRIM-1): from
// pool 2 (xxxx11, RFC 2474: experimental or local use), so no standard class
// collides with it. Drivers make it configurable.
inline constexpr uint8_t kDefaultTrimmedDscp = 0x3f;

inline constexpr size_t kBaseHeaderSize = 16;
inline constexpr size_t kMessageHeaderSize = 12;
inline constexpr size_t kRdmaHeaderSize = 16;
inline constexpr size_t kImmSize = 4;
inline constexpr size_t kIcrcSize = 4;
// The longest data packet headers (WRITE_IMM's): a data packet is at most
// these, its payload (mtu) and the ICRC.
inline constexpr size_t kMaxDataHeaderSize =
    kBaseHeaderSize + kMessageHeaderSize + kRdmaHeaderSize + kImmSize;
inline constexpr size_t kAckFixedSize = 20;  // after the base header
inline constexpr size_t kMaxSackWords = 16;  // 1024 PSNs beyond cum_psn: the largest window (SEQ-3)
inline constexpr size_t kNakBodySize = 16;
inline constexpr size_t kConnectBodySize = 24;
inline constexpr size_t kDisconnectBodySize = 8;

struct BaseHeader {
  uint8_t version = kVersion;
  uint8_t flags = 0;
  Opcode opcode = Opcode::kAck;
  uint16_t path_tag = 0;
  uint32_t dst_conn = 0;
  uint32_t psn = 0;
  uint32_t tsval = 0;
};

// PATH-2: a data packet's or PROBE's path_tag is slot | (generation << 5),
// the sender's path slot in bits 4-0 and that slot's generation, counted
// modulo 2^11, in bits 15-5.
inline constexpr uint16_t kGenerationMask = 0x7ff;
[[nodiscard]] constexpr uint16_t make_path_tag(uint8_t slot, uint16_t generation) {
  return static_cast<uint16_t>((slot & 31u) | ((generation & kGenerationMask) << 5));
}
[[nodiscard]] constexpr uint8_t path_tag_slot(uint16_t path_tag) {
  return static_cast<uint8_t>(path_tag & 31u);
}
[[nodiscard]] constexpr uint16_t path_tag_generation(uint16_t path_tag) {
  return static_cast<uint16_t>(path_tag >> 5);
}
// The generation `steps` on from `generation` (back, for a negative count),
// wrapping modulo 2^11: 2047 steps on to 0.
[[nodiscard]] constexpr uint16_t generation_step(uint16_t generation, int steps) {
  return static_cast<uint16_t>((generation + steps) & kGenerationMask);
}
// Whether generation `a` is later than `b`: 1 to 1023 steps on from it,
// modulo 2^11 (serial-number arithmetic, as SEQ-2 does for PSNs; a
// generation half the range away counts as earlier).
[[nodiscard]] constexpr bool generation_after(uint16_t a, uint16_t b) {
  const auto d = static_cast<uint16_t>((a - b) & kGenerationMask);
  return d != 0 && d < 1024;
}

// Placement of a sequenced packet inside its message (PLACE-1).
struct MessageHeader {
  uint32_t msn = 0;      // receive sequence (SEND*, WRITE_IMM) or read sequence (READ*)
  uint32_t offset = 0;   // byte offset of this packet's payload in the message
  uint32_t msg_len = 0;  // total message length in bytes
};

struct RdmaHeader {
  uint64_t rkey = 0;
  uint64_t raddr = 0;  // WRITE*: address of this packet's first byte; READ_REQ: base
};

struct AckBody {
  uint32_t cum_psn = 0;  // every PSN before this one has been received
  uint32_t echo_psn = 0;
  uint32_t echo_tsval = 0;
  uint16_t echo_path_tag = 0;
  uint8_t flags = 0;
  uint8_t sack_words = 0;
  // bit i of word j set: PSN cum_psn + 1 + 64*j + i has been received.
  std::array<uint64_t, kMaxSackWords> sack{};
};

struct NakBody {
  uint32_t nak_psn = 0;
  uint8_t code = 0;  // a metaroce::Status value 0x01-0x07 (is_wire_nak_code, BAD-6)
  uint32_t msn = 0;
  uint32_t cum_psn = 0;
};

struct ConnectBody {
  uint32_t src_conn = 0;
  uint32_t initial_psn = 0;
  uint16_t mtu = 0;
  uint8_t window_log2 = 0;
  uint8_t max_reads = 0;
  uint8_t code = 0;         // CONNECT_REJECT reason (a metaroce::Status)
  uint8_t max_version = 0;  // highest version the sender speaks
  uint64_t nonce = 0;
  // CONNECT_REQ: the port the requester receives on, where the responder
  // addresses the connection (CONN-3); 0: the request's own source port. A
  // requester whose requests leave from other ports (each from the next
  // entropy value, CONN-2) names it. 0 in ACCEPT and REJECT. (Last here,
  // though before the nonce on the wire, so that brace-initialized bodies
  // written before it still mean what they did.)
  uint16_t reply_port = 0;
};

struct DisconnectBody {
  uint32_t src_conn = 0;
  uint8_t reason = 0;
};

[[nodiscard]] constexpr bool is_data(Opcode op) {
  return op >= Opcode::kWrite && op <= Opcode::kReadResp;
}
[[nodiscard]] constexpr bool has_rdma_header(Opcode op) {
  return op == Opcode::kWrite || op == Opcode::kWriteImm || op == Opcode::kReadReq;
}
[[nodiscard]] constexpr bool has_imm(Opcode op) {
  return op == Opcode::kWriteImm || op == Opcode::kSendImm;
}
// Placed only with a posted receive buffer, every packet of the message
// (PLACE-3); refused with RNR when none is (NAK-4).
[[nodiscard]] constexpr bool consumes_receive(Opcode op) {
  return op == Opcode::kSend || op == Opcode::kSendImm || op == Opcode::kWriteImm;
}
[[nodiscard]] constexpr bool carries_payload(Opcode op) {
  return is_data(op) && op != Opcode::kReadReq;
}
[[nodiscard]] const char* opcode_name(Opcode op);
[[nodiscard]] bool is_known_opcode(uint8_t v);

// Bytes between the start of the packet and the payload (or the ICRC).
[[nodiscard]] size_t header_size(Opcode op, uint8_t sack_words = 0);
// The largest header_size of any packet, an ACK with every SACK word included:
// with the payload and the ICRC, it bounds every datagram.
[[nodiscard]] size_t largest_header_size();

enum class ParseError : uint8_t {
  kOk,
  kTruncated,    // shorter than the opcode's fixed headers + ICRC (BAD-1)
  kBadVersion,   // version nibble is not 1 (BAD-2)
  kBadOpcode,    // unknown opcode (BAD-3)
  kBadChecksum,  // ICRC mismatch (BAD-4)
  kBadLength,    // payload inconsistent with the message header (BAD-5)
  kBadField,     // a field outside its range, e.g. sack_words > 16 (BAD-6)
};
[[nodiscard]] const char* parse_error_name(ParseError e);

// A decoded packet. `payload` points into the buffer given to decode().
struct Packet {
  BaseHeader bh;
  MessageHeader mh;
  RdmaHeader rh;
  uint32_t imm = 0;
  AckBody ack;
  NakBody nak;
  ConnectBody connect;
  DisconnectBody disconnect;
  std::span<const uint8_t> payload;
  // A data packet whose payload a switch cut (TRIM-2): its headers only, to
  // be echoed, never placed. Set only by a decode told the datagram was
  // flagged trimmed.
  bool trimmed = false;
};

// Parses and verifies one datagram (UDP payload). Every field of `out` not
// set by this datagram is reset (SACK words past sack_words are zero as long
// as `out` only ever passed through decode).
[[nodiscard]] ParseError decode(std::span<const uint8_t> datagram, Packet& out);

// decode() without the reset: the same checks, and on success bh, payload,
// trimmed and every field of the packet's own group (data: mh, rh, imm; ack;
// nak; connect; disconnect) are set, while the other groups keep whatever
// they held. For a receiver that reads only the group its opcode names (the
// engine: it saves clearing a whole Packet per datagram).
// flagged_trimmed: the driver saw the TRIMMED code point (RxDatagram::trimmed).
// A data packet so flagged that is exactly its headers and ICRC decodes with
// out.trimmed set, its ICRC checked unless PC is set and the packet had
// payload to lose, offset < msg_len (TRIM-2: the ICRC then covered the payload
// that is gone). Any other datagram ignores the flag.
[[nodiscard]] ParseError decode_fields(std::span<const uint8_t> datagram, Packet& out,
                                       bool flagged_trimmed = false);

// Only the base header, for a receiver that rejects early (and the fuzzers).
[[nodiscard]] ParseError decode_base(std::span<const uint8_t> datagram, BaseHeader& out);

// The reply_port a CONNECT_REQ names (section 3.12), read at its packet
// offset 30 in a request of any version (VER-1: CONN-5 answers
// those too); 0 for any other datagram, a short one, or a request that names
// none. Nothing else is checked (the engine does): for a driver, whose
// addressing maps the request's source to (source IP, reply_port) before the
// engine sees it.
[[nodiscard]] uint16_t request_reply_port(std::span<const uint8_t> datagram);

// The connection a datagram is addressed to, for a driver that names its
// peer before the engine sees it: the base header's dst_conn, read at
// offset 4 in a datagram of any version; 0 for a datagram too short to hold
// it and for a CONNECT_REQ, whose dst_conn a responder does not read
// (section 3.12: a request with another value is processed the same).
// Nothing else is checked (the engine does).
[[nodiscard]] uint32_t peek_dst_conn(std::span<const uint8_t> datagram);

// Writers. Each writes the headers for its opcode at the start of `out`
// and returns the header size, or 0 if `out` is too small. The caller then
// puts the payload right after the headers and calls seal().
size_t write_data_headers(std::span<uint8_t> out, const BaseHeader& bh, const MessageHeader& mh,
                          const RdmaHeader* rh, uint32_t imm);
// Rewrites, in data headers that write_data_headers wrote for another packet
// of the same message, the fields that differ from packet to packet: path
// tag, PSN, timestamp, offset, and the remote address where the opcode has an
// RDMA header. `p` holds at least kMaxDataHeaderSize bytes (whole words are
// rewritten; the bytes past the headers are kept). A sender builds a
// message's headers once and patches them for each of its packets.
void patch_data_headers(uint8_t* p, Opcode op, uint16_t path_tag, uint32_t psn, uint32_t tsval,
                        uint32_t offset, uint64_t raddr);
// Rewrites, in such headers, the fields that differ from message to message
// of the same opcode and connection: sequence, message length, and the rkey
// and immediate where the opcode has them.
void patch_message_headers(uint8_t* p, Opcode op, uint32_t msn, uint32_t msg_len, uint64_t rkey,
                           uint32_t imm);
// Whether data headers that write_data_headers wrote, carrying `payload_len`
// bytes, hold their message's last bytes (offset + payload = msg_len, ACK-4's
// test): for a sender that built the headers and needs to know without
// decoding them again.
[[nodiscard]] bool data_headers_end_message(const uint8_t* p, uint32_t payload_len);
size_t write_ack(std::span<uint8_t> out, const BaseHeader& bh, const AckBody& ack);
// write_ack with the fixed fields passed one by one and the SACK words (at
// most kMaxSackWords are written) from `sack`: for a sender that builds an ACK
// per packet, where filling an AckBody first costs a store and a reload per field.
size_t write_ack(std::span<uint8_t> out, const BaseHeader& bh, uint32_t cum_psn, uint32_t echo_psn,
                 uint32_t echo_tsval, uint16_t echo_path_tag, uint8_t flags,
                 std::span<const uint64_t> sack);
size_t write_nak(std::span<uint8_t> out, const BaseHeader& bh, const NakBody& nak);
size_t write_probe(std::span<uint8_t> out, const BaseHeader& bh);
size_t write_connect(std::span<uint8_t> out, const BaseHeader& bh, const ConnectBody& body);
size_t write_disconnect(std::span<uint8_t> out, const BaseHeader& bh, const DisconnectBody& body);

// Appends the ICRC after header_len + payload_len bytes and returns the total
// datagram length (0 if it does not fit). The ICRC covers the payload only
// when bh.flags has kFlagPayloadCovered (INT-1, INT-2).
size_t seal(std::span<uint8_t> out, size_t header_len, size_t payload_len);

// CRC-32C (Castagnoli), as used by the ICRC.
[[nodiscard]] uint32_t crc32c(uint32_t crc, const uint8_t* data, size_t len);

}  // namespace metaroce::wire
