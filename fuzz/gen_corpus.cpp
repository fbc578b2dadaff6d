// Writes the seed corpora the fuzz targets start from, one folder per target,
// built with the codec itself:
//   fuzz_decode  one valid packet per opcode (and a few variants)
// The files are checked in under fuzz/corpus; rerun after a wire-format change:
//   build-fuzz/fuzz/gen_corpus fuzz/corpus
// scripts/run-tests.sh's fuzz-corpus step fails when the two differ.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

#include "metaroce/wire.hpp"

namespace w = metaroce::wire;

namespace {

int g_errors = 0;

void save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  w::Packet check;
  if (w::decode(bytes, check) != w::ParseError::kOk) {
    std::fprintf(stderr, "gen_corpus: %s does not decode\n", name.c_str());
    ++g_errors;
    return;
  }
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "gen_corpus: cannot write %s\n", path.c_str());
    ++g_errors;
  }
  if (f != nullptr) std::fclose(f);
}

w::BaseHeader base(w::Opcode op, uint8_t flags, uint32_t psn) {
  w::BaseHeader bh;
  bh.opcode = op;
  bh.flags = flags;
  bh.path_tag = static_cast<uint16_t>(3 | (1 << 5));
  bh.dst_conn = op == w::Opcode::kConnectReq ? 0 : 0x1234;
  bh.psn = psn;
  bh.tsval = 0xdeadbeef;
  return bh;
}

std::vector<uint8_t> data_packet(w::Opcode op, uint8_t flags, uint32_t offset, uint32_t msg_len,
                                 size_t payload_len) {
  std::vector<uint8_t> out(w::header_size(op) + payload_len + w::kIcrcSize);
  w::MessageHeader mh{7, offset, msg_len};
  w::RdmaHeader rh{0x0123456789abcdefULL, 0x7f0000001000ULL + offset};
  const size_t hlen = w::write_data_headers(out, base(op, flags, 1000 + offset / 256), mh,
                                            w::has_rdma_header(op) ? &rh : nullptr, 0xcafe);
  for (size_t i = 0; i < payload_len; ++i) out[hlen + i] = static_cast<uint8_t>(i * 31 + 7);
  out.resize(w::seal(out, hlen, payload_len));
  return out;
}

template <typename Write>
std::vector<uint8_t> control(size_t hlen_max, Write write) {
  std::vector<uint8_t> out(hlen_max + w::kIcrcSize);
  const size_t hlen = write(std::span<uint8_t>(out));
  out.resize(w::seal(out, hlen, 0));
  return out;
}

void write_decode_seeds(const std::string& dir) {
  const uint8_t pc = w::kFlagPayloadCovered;
  const uint8_t ar = w::kFlagAckRequested;

  save(dir, "write_first", data_packet(w::Opcode::kWrite, pc, 0, 1024, 256));
  save(dir, "write_last_ar", data_packet(w::Opcode::kWrite, pc | ar, 768, 1024, 256));
  save(dir, "write_headers_only_crc", data_packet(w::Opcode::kWrite, 0, 256, 1024, 256));
  save(dir, "write_imm_empty", data_packet(w::Opcode::kWriteImm, pc, 0, 0, 0));
  save(dir, "send", data_packet(w::Opcode::kSend, pc, 0, 100, 100));
  save(dir, "send_imm", data_packet(w::Opcode::kSendImm, pc, 0, 64, 64));
  save(dir, "read_req", data_packet(w::Opcode::kReadReq, pc | ar, 0, 65536, 0));
  save(dir, "read_resp", data_packet(w::Opcode::kReadResp, pc, 512, 2048, 512));

  save(dir, "ack_no_sack", control(w::header_size(w::Opcode::kAck, 0), [&](std::span<uint8_t> o) {
         w::AckBody a;
         a.cum_psn = 1001;
         a.echo_psn = 1000;
         a.echo_tsval = 0xdeadbeef;
         a.echo_path_tag = 0x23;
         a.flags = w::kAckEchoCe;
         return w::write_ack(o, base(w::Opcode::kAck, pc, 0), a);
       }));
  save(dir, "ack_sack8", control(w::header_size(w::Opcode::kAck, 8), [&](std::span<uint8_t> o) {
         w::AckBody a;
         a.cum_psn = 5;
         a.echo_psn = 300;
         a.echo_path_tag = 0x41;
         a.flags = w::kAckEchoDup;
         a.sack_words = 8;
         for (size_t i = 0; i < 8; ++i) a.sack[i] = 0x8000000000000001ULL << (i % 2);
         return w::write_ack(o, base(w::Opcode::kAck, pc, 0), a);
       }));
  save(dir, "nak_rnr", control(w::header_size(w::Opcode::kNak), [&](std::span<uint8_t> o) {
         w::NakBody n{1002, 0x01, 3, 1002};
         return w::write_nak(o, base(w::Opcode::kNak, pc, 0), n);
       }));
  save(dir, "nak_bad_key", control(w::header_size(w::Opcode::kNak), [&](std::span<uint8_t> o) {
         w::NakBody n{77, 0x02, 0, 77};
         return w::write_nak(o, base(w::Opcode::kNak, pc, 0), n);
       }));
  save(dir, "probe", control(w::header_size(w::Opcode::kProbe), [&](std::span<uint8_t> o) {
         return w::write_probe(o, base(w::Opcode::kProbe, pc | ar, 0));
       }));
  save(dir, "nak_remote_op_error",
       control(w::header_size(w::Opcode::kNak), [&](std::span<uint8_t> o) {
         w::NakBody n{4242, 0x07, 9, 4240};  // the highest wire NAK code (section 3.10)
         return w::write_nak(o, base(w::Opcode::kNak, pc, 0), n);
       }));
  const w::Opcode connects[] = {w::Opcode::kConnectReq, w::Opcode::kConnectAccept,
                                w::Opcode::kConnectReject, w::Opcode::kConnectReq};
  // The last one names the port its answers go to, as every request of the
  // UDP driver does (section 3.12, CONN-1).
  const char* connect_names[] = {"connect_req", "connect_accept", "connect_reject",
                                 "connect_req_reply_port"};
  for (size_t i = 0; i < std::size(connects); ++i) {
    save(dir, connect_names[i], control(w::header_size(connects[i]), [&](std::span<uint8_t> o) {
           w::ConnectBody c;
           c.src_conn = 0x5678;
           c.initial_psn = 0xfffffff0;  // wraps soon (SEQ-2)
           c.mtu = 4096;
           c.window_log2 = 10;
           c.max_reads = 16;
           c.code = connects[i] == w::Opcode::kConnectReject ? 0x48 : 0;
           c.max_version = 1;
           c.reply_port = i == 3 ? 0x1234 : 0;
           c.nonce = 0x1122334455667788ULL;
           return w::write_connect(o, base(connects[i], pc, 0), c);
         }));
  }
  save(dir, "disconnect",
       control(w::header_size(w::Opcode::kDisconnect), [&](std::span<uint8_t> o) {
         return w::write_disconnect(o, base(w::Opcode::kDisconnect, pc, 0), {0x5678, 0});
       }));
  save(dir, "disconnect_ack",
       control(w::header_size(w::Opcode::kDisconnectAck), [&](std::span<uint8_t> o) {
         return w::write_disconnect(o, base(w::Opcode::kDisconnectAck, pc, 0), {0x5678, 0});
       }));
}

// A fresh folder: a stale file of an older generator must not survive.
std::string fresh_dir(const std::string& root, const char* name) {
  const std::string dir = root + "/" + name;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "gen_corpus: cannot create %s: %s\n", dir.c_str(), ec.message().c_str());
    ++g_errors;
  }
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (one folder per fuzz target goes under it)\n",
                 argv[0]);
    return 2;
  }
  const std::string root = argv[1];
  write_decode_seeds(fresh_dir(root, "fuzz_decode"));
  if (g_errors == 0) std::printf("gen_corpus: wrote %s\n", root.c_str());
  return g_errors == 0 ? 0 : 1;
}
