// The spec's test vectors (docs/spec/metaroce-v0.1.md, section 3.15), as field
// values. The tool prints them; tests/wire checks the codec reproduces the hex
// the spec publishes. Changing a value here changes the published bytes, so
// the spec and tests/wire/wire_test.cpp must be regenerated together.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "metaroce/status.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::spec_vectors {

struct SpecVector {
  const char* id = "";     // "TV-01": stable name the spec and tests cite
  const char* title = "";  // one line saying what the vector shows
  wire::BaseHeader bh;
  wire::MessageHeader mh;
  wire::RdmaHeader rh;
  uint32_t imm = 0;
  wire::AckBody ack;
  wire::NakBody nak;
  wire::ConnectBody connect;
  wire::DisconnectBody disconnect;
  std::vector<uint8_t> payload;
};

inline std::vector<uint8_t> iota_bytes(uint8_t first, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(first + i);
  return v;
}

inline SpecVector make(const char* id, const char* title) {
  SpecVector tv;
  tv.id = id;
  tv.title = title;
  return tv;
}

inline wire::BaseHeader base(wire::Opcode op, uint8_t flags, uint16_t path_tag, uint32_t dst_conn,
                             uint32_t psn, uint32_t tsval) {
  wire::BaseHeader bh;
  bh.flags = flags;
  bh.opcode = op;
  bh.path_tag = path_tag;
  bh.dst_conn = dst_conn;
  bh.psn = psn;
  bh.tsval = tsval;
  return bh;
}

// Fixed, recognisable values: the requester owns connection id 7 and the
// responder 0x2a; path_tag 0x0023 is slot 3, generation 1. PC is set as with
// the default cover_payload, except in TV-04; packets not sent on a data path
// carry path_tag 0, as the reference engine sends them. Each vector is a
// packet a conforming receiver accepts on a connection with TV-12/TV-13's
// mtu, and an ACK echoes one vector's packet (check_spec.py checks both), but
// the vectors are independent examples, not one exchange (section 3.15).
inline std::vector<SpecVector> all() {
  using wire::Opcode;
  constexpr uint8_t kPc = wire::kFlagPayloadCovered;
  constexpr uint8_t kAr = wire::kFlagAckRequested;
  std::vector<SpecVector> v;

  SpecVector write =
      make("TV-01", "WRITE, last packet of a 4104-byte message, 8 payload bytes, PC set");
  write.bh = base(Opcode::kWrite, kPc, 0x0023, 0x0000002a, 0x00001000, 0x12345678);
  write.mh = {0, 4096, 4104};
  write.rh = {0x0102030405060708, 0x00007f0000001000};
  write.payload = iota_bytes(0x00, 8);
  v.push_back(write);

  SpecVector write_imm = make("TV-02", "WRITE_IMM, single-packet 4-byte message, PC and AR set");
  write_imm.bh = base(Opcode::kWriteImm, kPc | kAr, 0x0024, 0x0000002a, 0x00001001, 0x12345680);
  write_imm.mh = {5, 0, 4};
  write_imm.rh = {0x0102030405060708, 0x00007f0000002000};
  write_imm.imm = 0xdeadbeef;
  write_imm.payload = {0xaa, 0xbb, 0xcc, 0xdd};
  v.push_back(write_imm);

  SpecVector send =
      make("TV-03", "SEND, single-packet 8-byte message into receive buffer 2, PC set");
  send.bh = base(Opcode::kSend, kPc, 0x0025, 0x0000002a, 0x00001002, 0x12345690);
  send.mh = {2, 0, 8};
  send.payload = iota_bytes(0x00, 8);
  v.push_back(send);

  SpecVector send_nopc =
      make("TV-04", "The same SEND with PC clear: the ICRC covers the headers only");
  send_nopc.bh = base(Opcode::kSend, 0, 0x0025, 0x0000002a, 0x00001002, 0x12345690);
  send_nopc.mh = {2, 0, 8};
  send_nopc.payload = iota_bytes(0x00, 8);
  v.push_back(send_nopc);

  SpecVector send_imm = make("TV-05", "SEND_IMM, zero-length message (one packet, no payload)");
  send_imm.bh = base(Opcode::kSendImm, kPc, 0x0026, 0x0000002a, 0x00001003, 0x123456a0);
  send_imm.mh = {3, 0, 0};
  send_imm.imm = 0x0000cafe;
  v.push_back(send_imm);

  // AR set as the reference engine sends every READ_REQ (READ-1, section 3.3).
  SpecVector read_req =
      make("TV-06", "READ_REQ for 8200 bytes, read sequence number 1, PC and AR set");
  read_req.bh = base(Opcode::kReadReq, kPc | kAr, 0x0027, 0x0000002a, 0x00001004, 0x123456b0);
  // 8200 bytes, so that TV-07, one of its responses, can be 8 bytes and valid.
  read_req.mh = {1, 0, 8200};
  read_req.rh = {0x1112131415161718, 0x00007f0000100000};
  v.push_back(read_req);

  // The last of TV-06's three responses at the mtu of TV-12/TV-13 (4096): a
  // response carries min(mtu, msg_len - offset) bytes (SEQ-5, TRIM-5), so 8
  // bytes at 8192 are valid only as the last of an 8200-byte READ.
  SpecVector read_resp =
      make("TV-07", "The last READ_RESP of read 1 (TV-06): offset 8192, 8 payload bytes");
  read_resp.bh = base(Opcode::kReadResp, kPc, 0x0041, 0x00000007, 0x80000000, 0x0a0b0c0d);
  read_resp.mh = {1, 8192, 8200};
  read_resp.payload = iota_bytes(0x10, 8);
  v.push_back(read_resp);

  SpecVector ack =
      make("TV-08", "ACK: cum_psn 0x1000, SACK of 0x1001 and 0x1003, echoing TV-05's CE mark");
  ack.bh = base(Opcode::kAck, kPc, 0x0000, 0x00000007, 0, 0x0000beef);
  ack.ack.cum_psn = 0x00001000;
  ack.ack.echo_psn = 0x00001003;
  // ACK-6: the psn, tsval and path_tag of one packet, TV-05 (PSN 0x1003).
  ack.ack.echo_tsval = 0x123456a0;
  ack.ack.echo_path_tag = 0x0026;
  ack.ack.flags = wire::kAckEchoCe;
  ack.ack.sack_words = 1;
  ack.ack.sack[0] = 0x5;
  v.push_back(ack);

  SpecVector ack_probe =
      make("TV-09", "ACK with no SACK words, answering the PROBE of TV-11 (ECHO_PROBE)");
  ack_probe.bh = base(Opcode::kAck, kPc, 0x0000, 0x00000007, 0, 0x0000bf00);
  ack_probe.ack.cum_psn = 0x00001005;
  ack_probe.ack.echo_psn = 0;
  ack_probe.ack.echo_tsval = 0x12345700;
  ack_probe.ack.echo_path_tag = 0x0045;
  ack_probe.ack.flags = wire::kAckEchoProbe;  // as a receiver answers a PROBE (LOSS-8)
  v.push_back(ack_probe);

  SpecVector nak = make("TV-10", "NAK REMOTE_BAD_KEY for PSN 0x1001");
  nak.bh = base(Opcode::kNak, kPc, 0x0000, 0x00000007, 0, 0x0000bf10);
  nak.nak.nak_psn = 0x00001001;
  nak.nak.code = static_cast<uint8_t>(Status::kRemoteBadKey);
  nak.nak.msn = 5;
  nak.nak.cum_psn = 0x00001001;
  v.push_back(nak);

  SpecVector probe = make("TV-11", "PROBE on path slot 5, generation 2 (AR set)");
  probe.bh = base(Opcode::kProbe, kPc | kAr, 0x0045, 0x0000002a, 0, 0x12345700);
  v.push_back(probe);

  SpecVector req = make("TV-12",
                        "CONNECT_REQ from connection 7, whose requester receives on port 4792 "
                        "(it leaves from an entropy value, **CONN-2**)");
  req.bh = base(Opcode::kConnectReq, kPc, 0x0000, 0x00000000, 0, 0x00000001);
  req.connect = {0x00000007, 0x9e3779b9, 4096, 10, 16, 0, 1, 0x0123456789abcdef, 4792};
  v.push_back(req);

  SpecVector accept = make("TV-13", "CONNECT_ACCEPT from connection 0x2a");
  accept.bh = base(Opcode::kConnectAccept, kPc, 0x0000, 0x00000007, 0, 0x00000002);
  accept.connect = {0x0000002a, 0x7f4a7c15, 4096, 10, 16, 0, 1, 0x0123456789abcdef};
  v.push_back(accept);

  SpecVector reject = make("TV-14", "CONNECT_REJECT, code kVersionMismatch (0x48)");
  reject.bh = base(Opcode::kConnectReject, kPc, 0x0000, 0x00000007, 0, 0x00000003);
  reject.connect = {
      0, 0, 0, 0, 0, static_cast<uint8_t>(Status::kVersionMismatch), 1, 0x0123456789abcdef};
  v.push_back(reject);

  SpecVector disc = make("TV-15", "DISCONNECT from connection 7");
  disc.bh = base(Opcode::kDisconnect, kPc, 0x0000, 0x0000002a, 0, 0x00000004);
  disc.disconnect = {0x00000007, 0};
  v.push_back(disc);

  SpecVector disc_ack = make("TV-16", "DISCONNECT_ACK from connection 0x2a");
  disc_ack.bh = base(Opcode::kDisconnectAck, kPc, 0x0000, 0x00000007, 0, 0x00000005);
  disc_ack.disconnect = {0x0000002a, 0};
  v.push_back(disc_ack);

  return v;
}

// Encodes a vector exactly as a sender would: write_* for the headers, the
// payload after them, then seal(). Returns the datagram length, 0 on failure.
inline size_t encode(const SpecVector& tv, std::span<uint8_t> out) {
  using wire::Opcode;
  size_t hlen = 0;
  switch (tv.bh.opcode) {
    case Opcode::kWrite:
    case Opcode::kWriteImm:
    case Opcode::kSend:
    case Opcode::kSendImm:
    case Opcode::kReadReq:
    case Opcode::kReadResp:
      hlen = wire::write_data_headers(out, tv.bh, tv.mh, &tv.rh, tv.imm);
      break;
    case Opcode::kAck: hlen = wire::write_ack(out, tv.bh, tv.ack); break;
    case Opcode::kNak: hlen = wire::write_nak(out, tv.bh, tv.nak); break;
    case Opcode::kProbe: hlen = wire::write_probe(out, tv.bh); break;
    case Opcode::kConnectReq:
    case Opcode::kConnectAccept:
    case Opcode::kConnectReject: hlen = wire::write_connect(out, tv.bh, tv.connect); break;
    case Opcode::kDisconnect:
    case Opcode::kDisconnectAck: hlen = wire::write_disconnect(out, tv.bh, tv.disconnect); break;
  }
  if (hlen == 0 || out.size() < hlen + tv.payload.size()) return 0;
  for (size_t i = 0; i < tv.payload.size(); ++i) out[hlen + i] = tv.payload[i];
  return wire::seal(out, hlen, tv.payload.size());
}

}  // namespace metaroce::spec_vectors
