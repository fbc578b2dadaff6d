// Writes the seed corpora the fuzz targets start from, one folder per target,
// built with the codec itself:
//   fuzz_decode  one valid packet per opcode (and a few variants)
//   fuzz_engine  a few long inputs: full-size data packets, ACKs of 16 SACK
//                words, trimmed and replayed packets, lossy traffic
//   fuzz_udp     GRO buffers, truncated datagrams, TOS classes
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

void save_raw(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
    std::fprintf(stderr, "gen_corpus: cannot write %s\n", path.c_str());
    ++g_errors;
  }
  if (f != nullptr) std::fclose(f);
}

void save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  w::Packet check;
  if (w::decode(bytes, check) != w::ParseError::kOk) {
    std::fprintf(stderr, "gen_corpus: %s does not decode\n", name.c_str());
    ++g_errors;
    return;
  }
  save_raw(dir, name, bytes);
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

// A fuzz target's input being built: bytes, big-endian fields.
class InputBytes {
 public:
  const std::vector<uint8_t>& bytes() const { return b_; }

 protected:
  void u16(uint16_t v) {
    b_.push_back(static_cast<uint8_t>(v >> 8));
    b_.push_back(static_cast<uint8_t>(v));
  }
  std::vector<uint8_t> b_;
};

// fuzz_engine's input (fuzz_engine.cpp): a setup byte, then records, each an
// opcode byte (its value mod 8 picks the record) and the record's fields.
class EngineInput : public InputBytes {
 public:
  // mtu: 0-3 for 256, 512, 1024, 4096; flags as fuzz_engine's World(setup).
  explicit EngineInput(uint8_t setup) { b_.push_back(setup); }
  // A datagram delivered as it is. flags (fuzz_engine's send_fuzzed): bit 0
  // to B (else A), 1 CE, 2 from a stranger, 3 reseal, 4 the receiver's
  // dst_conn, 5 one of its keys (region `region`, raddr its base + `at`),
  // 6 trimmed.
  EngineInput& raw(uint8_t flags, const std::vector<uint8_t>& d, uint8_t region = 0,
                   uint16_t at = 0) {
    b_.push_back(0);
    b_.push_back(flags);
    u16(0x1234);  // entropy: the UDP source port
    u16(static_cast<uint16_t>(d.size()));
    b_.insert(b_.end(), d.begin(), d.end());
    if ((flags & 0x20) != 0) {
      b_.push_back(static_cast<uint8_t>(region | 8));  // 8: patch raddr too
      u16(at);
    }
    return *this;
  }
  // The idx-th captured datagram again, with one byte set (pos & 0x8000 cuts it there instead).
  EngineInput& captured(uint8_t flags, uint8_t idx, uint16_t pos, uint8_t val) {
    b_.insert(b_.end(), {3, flags, idx, 1});
    u16(pos);
    b_.push_back(val);
    return *this;
  }
  EngineInput& traffic(uint8_t drop = 0, uint8_t ce = 0) {
    b_.insert(b_.end(), {5, drop, ce});
    return *this;
  }
  EngineInput& post(int side, uint8_t pick) {
    b_.insert(b_.end(), {static_cast<uint8_t>(side == 0 ? 0x87 : 0xc7), pick});
    return *this;
  }
  EngineInput& wait_us(uint16_t units_of_64us) {
    b_.push_back(0x86);
    u16(units_of_64us);
    return *this;
  }
  EngineInput& next_timer() {
    b_.push_back(7);
    return *this;
  }
};

// Full-size inputs: without them libFuzzer's length control keeps fuzz_engine
// below about 60 bytes for a whole CI run, too short for a data packet with
// payload, an ACK with SACK words, or more than a few records.
void write_engine_seeds(const std::string& dir) {
  const uint8_t pc = w::kFlagPayloadCovered;
  constexpr uint8_t kToB = 0x01, kReseal = 0x08, kConn = 0x10, kKey = 0x20, kTrim = 0x40;
  const auto ack16 = [](uint32_t cum) {
    return control(w::header_size(w::Opcode::kAck, w::kMaxSackWords), [&](std::span<uint8_t> o) {
      w::AckBody a;
      a.cum_psn = cum;
      a.echo_psn = cum + 3;
      a.echo_path_tag = 0x21;
      a.sack_words = w::kMaxSackWords;
      for (size_t i = 0; i < w::kMaxSackWords; ++i) a.sack[i] = 0xaaaaaaaa55555555ULL >> i;
      return w::write_ack(o, base(w::Opcode::kAck, pc, 0), a);
    });
  };
  // mtu 4096, one path: A writes, then full-size WRITEs and READ responses
  // with B's and A's keys, an ACK of 16 SACK words each way.
  EngineInput big(3);
  big.post(0, 0).post(0, 3).traffic();
  big.raw(kToB | kReseal | kConn | kKey, data_packet(w::Opcode::kWrite, pc, 0, 4096, 4096), 0, 0);
  big.raw(kToB | kReseal | kConn | kKey, data_packet(w::Opcode::kWrite, 0, 1024, 8192, 4000), 0,
          64);
  big.raw(kReseal | kConn | kKey, data_packet(w::Opcode::kReadResp, pc, 0, 1500, 1500), 4, 0);
  big.raw(kReseal | kConn, ack16(0)).raw(kToB | kReseal | kConn, ack16(1 << 20));
  big.traffic().next_timer().traffic();
  save_raw(dir, "full_size_writes_and_sacks", big.bytes());

  // mtu 1024, four paths, payload covered, gather on both sides: a lossy
  // exchange, captured packets replayed edited, cut short and trimmed, raw
  // trimmed data packets, and timers.
  EngineInput lossy(2 | 0x10 | 0xc0);
  lossy.post(0, 0).post(0, 2).post(0, 7).post(1, 0).post(1, 3).post(0, 4);
  lossy.traffic(0x24, 0x81).traffic(0x10, 0).traffic();
  lossy.captured(0, 2, 40, 0xff).captured(kTrim, 3, 0, 0).captured(0x02, 5, 0x8000 | 30, 0);
  lossy.raw(kToB | kReseal | kConn | kKey | kTrim,
            data_packet(w::Opcode::kWrite, pc, 0, 1024, 1024));
  lossy.raw(kToB | kReseal | kConn | kTrim, data_packet(w::Opcode::kSend, pc, 0, 700, 700));
  lossy.raw(kToB | 0x04 | kReseal | kConn, data_packet(w::Opcode::kSendImm, pc, 0, 10, 10));
  lossy.wait_us(50).traffic(0xff, 0).next_timer().traffic().wait_us(2000).next_timer().traffic();
  save_raw(dir, "lossy_trimmed_replayed", lossy.bytes());

  // mtu 256, window 1024: many small packets in flight, an ACK of 16 SACK
  // words against them, and NAKs and a DISCONNECT from the peer.
  EngineInput wide(0 | 0x0c);
  for (uint8_t i = 0; i < 8; ++i) wide.post(0, static_cast<uint8_t>(i * 8));
  wide.traffic(0x0f, 0).raw(kReseal | kConn, ack16(0));
  wide.raw(kReseal | kConn, control(w::header_size(w::Opcode::kNak), [&](std::span<uint8_t> o) {
             w::NakBody n{0, 0x07, 0, 0};
             return w::write_nak(o, base(w::Opcode::kNak, pc, 0), n);
           }));
  wide.traffic().next_timer().traffic();
  wide.raw(kReseal | kConn,
           control(w::header_size(w::Opcode::kDisconnect), [&](std::span<uint8_t> o) {
             return w::write_disconnect(o, base(w::Opcode::kDisconnect, pc, 0), {0x5678, 0});
           }));
  wide.traffic().next_timer();
  save_raw(dir, "many_small_packets_sack_nak", wide.bytes());
}

// fuzz_udp's input (fuzz_udp.cpp): records of [length: 2] [flags: 1]
// [tos: 1, flags bit 1] [segment size: 2, flags bit 3] [bytes].
class UdpInput : public InputBytes {
 public:
  static constexpr uint8_t kConn = 0x01, kTos = 0x02, kOtherHost = 0x04, kGso = 0x08,
                           kServer1 = 0x10, kReseal = 0x20, kPeerConn = 0x40;
  UdpInput& send(uint8_t flags, const std::vector<uint8_t>& d, uint8_t tos = 0, uint16_t seg = 0) {
    u16(static_cast<uint16_t>(d.size()));
    b_.push_back(flags);
    if ((flags & kTos) != 0) b_.push_back(tos);
    if ((flags & kGso) != 0) u16(seg);
    b_.insert(b_.end(), d.begin(), d.end());
    return *this;
  }
};

// One seed per receive branch fuzz_udp claims: GRO buffers, truncation, the
// TOS byte. The corpus replay test (METAROCE_FUZZ_UDP_REQUIRE=1) checks that
// they still reach them.
void write_udp_seeds(const std::string& dir) {
  using U = UdpInput;
  const uint8_t pc = w::kFlagPayloadCovered;
  const size_t data_hlen = w::header_size(w::Opcode::kWrite) + w::kIcrcSize;
  // WRITE packets of one message, `seg` bytes each but the last, back to back.
  const auto segments = [&](size_t seg, size_t count, size_t tail) {
    std::vector<uint8_t> out;
    const uint32_t msg_len = static_cast<uint32_t>((seg - data_hlen) * count + tail - data_hlen);
    for (size_t i = 0; i <= count; ++i) {
      const size_t payload = (i < count ? seg : tail) - data_hlen;
      const auto p = data_packet(w::Opcode::kWrite, pc,
                                 static_cast<uint32_t>((seg - data_hlen) * i), msg_len, payload);
      out.insert(out.end(), p.begin(), p.end());
    }
    return out;
  };
  const auto write = [&](size_t len) { return segments(len, 0, len); };

  // To server 0 (GRO on): one GSO send of equal segments and a short tail
  // (its dst_conn set), one from another host CE-marked, one of equal
  // segments only, and a single datagram.
  U gro;
  gro.send(U::kGso | U::kConn, segments(1000, 4, 400), 0, 1000);
  gro.send(U::kGso | U::kOtherHost | U::kTos, segments(600, 3, 600), 3, 600);
  gro.send(U::kGso, segments(100, 40, 52), 0, 100);
  gro.send(U::kConn, write(500));
  save_raw(dir, "gro_buffers", gro.bytes());

  // To server 1 (GRO off, 768-byte slots): longer datagrams truncated, short
  // ones read from either host (the wildcard socket reports their
  // destination), a GSO send the kernel splits, an empty datagram.
  U small;
  small.send(U::kServer1, write(2000));
  small.send(U::kServer1 | U::kConn, write(700));
  small.send(U::kServer1 | U::kOtherHost | U::kConn, write(300));
  small.send(U::kServer1 | U::kGso | U::kConn, segments(200, 4, 100), 0, 200);
  small.send(U::kServer1, {});
  save_raw(dir, "truncated_and_wildcard", small.bytes());

  // The TOS byte: control class (DSCP 48), trimmed (DSCP 63) with and
  // without CE, Not-ECT, to both servers.
  const uint8_t control_class = static_cast<uint8_t>(48 << 2 | 2);
  const uint8_t trimmed = static_cast<uint8_t>(w::kDefaultTrimmedDscp << 2);
  U tos;
  tos.send(U::kTos | U::kConn, write(60), control_class);
  tos.send(U::kTos | U::kConn, write(60), static_cast<uint8_t>(trimmed | 2));
  tos.send(U::kTos | U::kConn | U::kServer1, write(60), static_cast<uint8_t>(trimmed | 3));
  tos.send(U::kTos | U::kServer1, write(60), control_class | 1);
  tos.send(U::kTos, write(60), 0);
  save_raw(dir, "tos_classes", tos.bytes());

  // A DISCONNECT from the client, with the real ids and ICRC: it closes
  // server 0's connection, and fuzz_udp builds both servers again.
  U bye;
  bye.send(U::kConn | U::kPeerConn | U::kReseal, write(200));
  bye.send(U::kConn | U::kPeerConn | U::kReseal,
           control(w::header_size(w::Opcode::kDisconnect), [&](std::span<uint8_t> o) {
             return w::write_disconnect(o, base(w::Opcode::kDisconnect, pc, 0), {0, 0});
           }));
  save_raw(dir, "disconnect", bye.bytes());
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
  write_engine_seeds(fresh_dir(root, "fuzz_engine"));
  write_udp_seeds(fresh_dir(root, "fuzz_udp"));
  if (g_errors == 0) std::printf("gen_corpus: wrote %s\n", root.c_str());
  return g_errors == 0 ? 0 : 1;
}
