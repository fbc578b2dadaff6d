// Prints the spec's test vectors (docs/spec/metaroce-v0.1.md, section 3.15):
// for each packet type the field values and the bytes the codec produces.
//
//   metaroce-spec-vectors          Markdown, pasted into the spec
//   metaroce-spec-vectors --cpp    C++ string literals, pasted into tests/wire
//
// The bytes come from the real codec (write_* + seal), never from a second
// encoder, so the published vectors are exactly what the engine sends.
#include "spec_vectors.hpp"

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "metaroce/status.hpp"
#include "metaroce/wire.hpp"

namespace {

using metaroce::wire::Opcode;
namespace wire = metaroce::wire;
namespace sv = metaroce::spec_vectors;

std::string flag_names(uint8_t flags) {
  std::string s;
  if (flags & wire::kFlagPayloadCovered) s += "PC";
  if (flags & wire::kFlagAckRequested) s += s.empty() ? "AR" : "|AR";
  return s.empty() ? "none" : s;
}

void print_fields(const sv::SpecVector& tv) {
  const wire::BaseHeader& bh = tv.bh;
  std::printf("BH    version=%u flags=0x%x (%s) opcode=0x%02x (%s)\n", bh.version, bh.flags,
              flag_names(bh.flags).c_str(), static_cast<unsigned>(bh.opcode),
              wire::opcode_name(bh.opcode));
  // Only data packets and PROBEs are sent on a path (3.3); in the others the
  // field names no slot, so 0x0000 must not read as slot 0, generation 0.
  if (wire::is_data(bh.opcode) || bh.opcode == Opcode::kProbe)
    std::printf("      path_tag=0x%04x (slot %u, generation %u) dst_conn=0x%08x\n", bh.path_tag,
                static_cast<unsigned>(wire::path_tag_slot(bh.path_tag)),
                static_cast<unsigned>(wire::path_tag_generation(bh.path_tag)), bh.dst_conn);
  else
    std::printf("      path_tag=0x%04x (none: not on a data path) dst_conn=0x%08x\n", bh.path_tag,
                bh.dst_conn);
  std::printf("      psn=0x%08x tsval=0x%08x\n", bh.psn, bh.tsval);
  const Opcode op = bh.opcode;
  if (wire::is_data(op)) {
    std::printf("MH    msn=%u offset=%u msg_len=%u\n", tv.mh.msn, tv.mh.offset, tv.mh.msg_len);
    if (wire::has_rdma_header(op))
      std::printf("RH    rkey=0x%016llx raddr=0x%016llx\n",
                  static_cast<unsigned long long>(tv.rh.rkey),
                  static_cast<unsigned long long>(tv.rh.raddr));
    if (wire::has_imm(op)) std::printf("IMM   0x%08x\n", tv.imm);
  } else if (op == Opcode::kAck) {
    const wire::AckBody& a = tv.ack;
    std::printf("ACK   cum_psn=0x%08x echo_psn=0x%08x echo_tsval=0x%08x\n", a.cum_psn, a.echo_psn,
                a.echo_tsval);
    std::printf("      echo_path_tag=0x%04x flags=0x%02x sack_words=%u\n", a.echo_path_tag, a.flags,
                a.sack_words);
    for (unsigned i = 0; i < a.sack_words; ++i)
      std::printf("      sack[%u]=0x%016llx\n", i, static_cast<unsigned long long>(a.sack[i]));
  } else if (op == Opcode::kNak) {
    const wire::NakBody& n = tv.nak;
    std::printf("NAK   nak_psn=0x%08x code=0x%02x (%s) msn=%u cum_psn=0x%08x\n", n.nak_psn, n.code,
                std::string(metaroce::status_name(static_cast<metaroce::Status>(n.code))).c_str(),
                n.msn, n.cum_psn);
  } else if (op == Opcode::kConnectReq || op == Opcode::kConnectAccept ||
             op == Opcode::kConnectReject) {
    const wire::ConnectBody& c = tv.connect;
    std::printf("CONN  src_conn=0x%08x initial_psn=0x%08x mtu=%u window_log2=%u max_reads=%u\n",
                c.src_conn, c.initial_psn, c.mtu, c.window_log2, c.max_reads);
    std::printf("      code=0x%02x max_version=%u", c.code, c.max_version);
    if (c.reply_port != 0) std::printf(" reply_port=%u", c.reply_port);  // 0 in most: not shown
    std::printf(" nonce=0x%016llx\n", static_cast<unsigned long long>(c.nonce));
  } else if (op == Opcode::kDisconnect || op == Opcode::kDisconnectAck) {
    std::printf("DISC  src_conn=0x%08x reason=0x%02x\n", tv.disconnect.src_conn,
                tv.disconnect.reason);
  }
  if (!tv.payload.empty()) {
    std::printf("DATA  %zu bytes:", tv.payload.size());
    for (uint8_t b : tv.payload) std::printf(" %02x", b);
    std::printf("\n");
  }
}

// 16 bytes per line, no offsets: the same text appears in the spec and, as
// string literals, in tests/wire/wire_test.cpp.
void print_hex(std::span<const uint8_t> bytes, const char* prefix, const char* suffix) {
  for (size_t i = 0; i < bytes.size(); i += 16) {
    std::printf("%s", prefix);
    for (size_t j = i; j < i + 16 && j < bytes.size(); ++j)
      std::printf(j == i ? "%02x" : " %02x", bytes[j]);
    std::printf("%s\n", suffix);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool cpp = argc > 1 && std::strcmp(argv[1], "--cpp") == 0;
  std::array<uint8_t, 256> buf{};
  // The literals keep the spec's 16-bytes-per-line layout; clang-format
  // would reflow them.
  if (cpp) std::printf("    // clang-format off\n");
  for (const sv::SpecVector& tv : sv::all()) {
    buf.fill(0);
    const size_t len = sv::encode(tv, buf);
    if (len == 0) {
      std::fprintf(stderr, "%s: codec refused to encode\n", tv.id);
      return 1;
    }
    const std::span<const uint8_t> bytes(buf.data(), len);
    const size_t hlen = wire::header_size(tv.bh.opcode, tv.ack.sack_words);
    const bool covered = (tv.bh.flags & wire::kFlagPayloadCovered) != 0;
    if (cpp) {
      std::printf("    {\"%s\",\n", tv.id);
      print_hex(bytes, "     \"", " \"");
      std::printf("    },\n");
      continue;
    }
    std::printf("#### %s %s, %zu bytes\n\n%s.\n\n```text\n", tv.id, wire::opcode_name(tv.bh.opcode),
                len, tv.title);
    print_fields(tv);
    std::printf(
        "ICRC  0x%08x over bytes 0..%zu (%s)\n",
        static_cast<unsigned>((uint32_t{bytes[len - 4]} << 24) | (uint32_t{bytes[len - 3]} << 16) |
                              (uint32_t{bytes[len - 2]} << 8) | uint32_t{bytes[len - 1]}),
        (covered ? len - 4 : hlen) - 1,
        hlen + 4 == len ? "the whole packet: no payload"
        : covered       ? "headers and payload"
                        : "headers only: PC clear");
    std::printf("\n");
    print_hex(bytes, "", "");
    std::printf("```\n\n");
  }
  if (cpp) std::printf("    // clang-format on\n");
  return 0;
}
