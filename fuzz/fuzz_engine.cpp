// libFuzzer target for the protocol engine (metaroce::Endpoint).
//
// Every input starts from the same state: two endpoints, A (requester) and B
// (listener), connected in-process by shuttling poll_transmit() output into
// handle_datagram() on a fake clock, with memory registered and WRITE,
// WRITE_IMM, SEND, SEND_IMM and READ work requests posted both ways. The
// input is then read as a list of records, each one of:
//   - a raw datagram for A or B (optionally with a valid ICRC, the real
//     dst_conn and a real rkey/raddr patched in), with CE and the UDP source
//     port taken from the input, from the real peer or a stranger;
//   - a captured legitimate datagram replayed with a few byte edits;
//   - either of those flagged trimmed (TRIM-2), a data packet first cut to its
//     headers and ICRC as a trimming switch does;
//   - normal traffic (lossless, or with drops and CE marks from the input);
//   - time passing, a jump to the next timer, or one more work request.
// Finally both sides close and the clock runs out the disconnect.
//
// Checked throughout: nothing crashes (ASan/UBSan), no byte of the memory
// arena changes outside the regions a peer or a READ may legitimately write,
// every completion names a work request that is outstanding (COMP-4: at most
// once), a receive never reports more bytes than its buffer, and after close
// every work request has completed (COMP-4: exactly once).
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "metaroce/config.hpp"
#include "metaroce/engine.hpp"
#include "metaroce/wire.hpp"
#include "reseal.hpp"

namespace {

using metaroce::Completion;
using metaroce::ConnId;
using metaroce::Endpoint;
using metaroce::EndpointConfig;
using metaroce::Event;
using metaroce::EventKind;
using metaroce::MemoryRegion;
using metaroce::PeerAddr;
using metaroce::RecvWr;
using metaroce::RxDatagram;
using metaroce::SendWr;
using metaroce::Status;
using metaroce::TimeNs;
using metaroce::TxDatagram;
using metaroce::WrOpcode;
namespace wire = metaroce::wire;

[[noreturn]] void fail(const char* what, unsigned long long detail = 0) {
  std::fprintf(stderr, "fuzz_engine: invariant violated: %s (%llu)\n", what, detail);
  std::abort();
}
#define CHECK(cond)           \
  do {                        \
    if (!(cond)) fail(#cond); \
  } while (0)

// ---------------------------------------------------------------- input ----
class Input {
 public:
  Input(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool empty() const { return pos_ >= n_; }
  uint8_t u8() { return pos_ < n_ ? d_[pos_++] : 0; }
  uint16_t u16() {
    const uint16_t hi = u8();
    return static_cast<uint16_t>((hi << 8) | u8());
  }
  std::span<const uint8_t> bytes(size_t want) {
    const size_t n = want < n_ - pos_ ? want : n_ - pos_;
    std::span<const uint8_t> s(d_ + pos_, n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t pos_ = 0;
};

// --------------------------------------------------------------- memory ----
// One arena holds every buffer, with unregistered guard bytes between them.
// Its regions are registered at fixed bases (kRegionBase, below), so raddr
// values do not depend on where the arena lies: an input reproduces in any
// process.
enum Region : size_t {
  kASrc,    // A: WRITE/SEND source, REMOTE_READ only           never changes
  kADst,    // A: READ destination, B's WRITE target             may change
  kARecv,   // A: receive buffers for B's SENDs                  may change
  kBWr,     // B: A's WRITE target                               may change
  kBRd,     // B: A's READ source, REMOTE_READ only              never changes
  kBRecv,   // B: receive buffers for A's SEND*/WRITE_IMM        may change
  kBSrc,    // B: B's SEND source                                never changes
  kBDereg,  // B: registered with REMOTE_WRITE, then deregistered  never changes
  kNumRegions,
};
constexpr size_t kRegionSize[kNumRegions] = {4096, 4096, 2048, 4096, 2048, 4096, 1024, 1024};
constexpr bool kMayChange[kNumRegions] = {false, true, true, true, false, true, false, false};
// The address each region's first byte is named by (MR-4): offsets from 0,
// ranges that overlap on one endpoint (the keys tell them apart), and one
// region whose last byte is 2^64 - 1, so that raddr patches wrap past it.
constexpr uint64_t kRegionBase[kNumRegions] = {0,      0, uint64_t{1} << 40, UINT64_MAX - 4096 + 1,
                                               0x1000, 0, uint64_t{1} << 20, uint64_t{1} << 40};
constexpr size_t kGuard = 256;

struct Arena {
  std::vector<uint8_t> bytes;
  std::array<size_t, kNumRegions> off{};
  std::vector<uint8_t> initial;                   // pattern every input starts from
  std::vector<std::pair<size_t, size_t>> frozen;  // [begin, end) ranges that never change

  Arena() {
    size_t pos = kGuard;
    for (size_t r = 0; r < kNumRegions; ++r) {
      off[r] = pos;
      pos += kRegionSize[r] + kGuard;
    }
    bytes.resize(pos);
    initial.resize(pos);
    for (size_t i = 0; i < pos; ++i) initial[i] = static_cast<uint8_t>((i * 131) ^ (i >> 7) ^ 0x5a);
    size_t begin = 0;  // start of the current frozen run
    for (size_t r = 0; r < kNumRegions; ++r) {
      if (!kMayChange[r]) continue;
      frozen.emplace_back(begin, off[r]);
      begin = off[r] + kRegionSize[r];
    }
    frozen.emplace_back(begin, pos);
  }
  void reset() { std::memcpy(bytes.data(), initial.data(), bytes.size()); }
  uint8_t* ptr(Region r, size_t at = 0) { return bytes.data() + off[r] + at; }
  static uint64_t addr(Region r, size_t at = 0) { return kRegionBase[r] + at; }
  void check() const {
    for (const auto& [begin, end] : frozen) {
      if (std::memcmp(bytes.data() + begin, initial.data() + begin, end - begin) == 0) continue;
      for (size_t i = begin; i < end; ++i)
        if (bytes[i] != initial[i])
          fail("memory outside writable regions changed (arena offset)", i);
    }
  }
};

Arena& arena() {
  static Arena* a = new Arena();  // never freed: stable addresses for the whole run
  return *a;
}

// ------------------------------------------------------------ endpoints ----
PeerAddr make_peer(uint8_t last) {
  PeerAddr p;
  const uint8_t v4mapped[] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, last, 0x12, 0xb8};
  std::memcpy(p.bytes, v4mapped, sizeof v4mapped);
  p.len = sizeof v4mapped;
  return p;
}

struct Captured {
  int to = 0;  // side the datagram was delivered to
  uint16_t entropy = 0;
  std::vector<uint8_t> bytes;
};

struct Side {
  std::unique_ptr<Endpoint> ep;
  PeerAddr self;
  ConnId conn;
  bool gather = false;
  std::map<uint64_t, uint32_t> send_outstanding;  // wr_id -> length
  std::map<uint64_t, uint32_t> recv_outstanding;  // wr_id -> buffer length
  // Shared receives (PLACE-6) posted and not completed. A closing connection
  // gives them back rather than completing them, so finish() asks nothing of
  // them; a completion must still name one of them, once.
  std::map<uint64_t, uint32_t> shared_outstanding;
  std::array<MemoryRegion, kNumRegions> mr{};
};

class World {
 public:
  explicit World(uint8_t setup) {
    arena().reset();
    EndpointConfig cfg;
    constexpr uint16_t kMtus[] = {256, 512, 1024, 4096};
    cfg.mtu = kMtus[setup & 3];
    cfg.window_log2 = static_cast<uint8_t>(4 + ((setup >> 2) & 3) * 2);  // 16..1024 packets
    cfg.num_paths = static_cast<uint8_t>(1 + ((setup >> 4) & 1) * 3);    // 1 or 4
    cfg.cover_payload = ((setup >> 5) & 1) == 0;
    cfg.sq_depth = 32;
    cfg.rq_depth = 32;
    cfg.max_reads = 2;
    EndpointConfig a_cfg = cfg;
    a_cfg.seed = 11;
    a_cfg.accept_incoming = false;
    EndpointConfig b_cfg = cfg;
    b_cfg.seed = 22;
    b_cfg.accept_incoming = true;
    b_cfg.shared_rq_depth = 4;
    side_[0].ep = std::make_unique<Endpoint>(a_cfg);
    side_[1].ep = std::make_unique<Endpoint>(b_cfg);
    side_[0].self = make_peer(1);
    side_[1].self = make_peer(2);
    side_[0].gather = ((setup >> 6) & 1) != 0;
    side_[1].gather = ((setup >> 7) & 1) != 0;
    stranger_ = make_peer(99);
    txbuf_.resize(size_t{cfg.mtu} + 512);

    using metaroce::kAccessLocalWrite;
    using metaroce::kAccessRemoteRead;
    using metaroce::kAccessRemoteWrite;
    reg(0, kASrc, kAccessRemoteRead);
    reg(0, kADst, kAccessLocalWrite | kAccessRemoteWrite);
    reg(0, kARecv, kAccessLocalWrite);
    reg(1, kBWr, kAccessLocalWrite | kAccessRemoteWrite);
    reg(1, kBRd, kAccessRemoteRead);
    reg(1, kBRecv, kAccessLocalWrite);
    reg(1, kBSrc, kAccessRemoteRead);
    reg(1, kBDereg, kAccessLocalWrite | kAccessRemoteWrite);
    CHECK(side_[1].ep->deregister_memory(side_[1].mr[kBDereg].lkey) == Status::kOk);

    // Handshake.
    CHECK(side_[0].ep->connect(side_[1].self, now_, side_[0].conn) == Status::kOk);
    CHECK(side_[0].conn.valid());
    for (int round = 0; round < 50 && !(established(0) && side_[1].conn.valid()); ++round) {
      pump(64, 0, 0, false);
      advance(100 * metaroce::kMicrosecond);
    }
    if (!established(0) || !side_[1].conn.valid()) fail("setup: handshake did not complete");

    // Receive buffers, then work requests both ways.
    for (uint32_t i = 0; i < 2; ++i) post_recv(1, kBRecv, i * 1024, 1024);
    for (uint32_t i = 2; i < 4; ++i) post_shared_recv(kBRecv, i * 1024, 1024);
    for (uint32_t i = 0; i < 2; ++i) post_recv(0, kARecv, i * 1024, 1024);
    post_menu(0, 0);  // WRITE 3000
    post_menu(0, 1);  // WRITE_IMM 100
    post_menu(0, 2);  // SEND 700
    post_menu(0, 3);  // READ 1500
    post_menu(0, 4);  // SEND_IMM 10
    post_menu(1, 0);  // B: SEND 300
    post_menu(1, 1);  // B: WRITE 200
    // Start the traffic, but leave most of it to interleave with the input.
    pump(8, 0, 0, false);
    check_all();
  }

  void run(Input& in) {
    for (int records = 0; records < 256 && !in.empty(); ++records) {
      const uint8_t op = in.u8();
      switch (op % 8) {
        case 0:
        case 1:
        case 2: inject_raw(in); break;
        case 3: inject_captured(in); break;
        case 4: pump(1 + in.u8(), 0, 0, false); break;
        case 5: {
          const uint8_t drop = in.u8();
          const uint8_t ce = in.u8();
          pump(16, drop, ce, true);
          break;
        }
        case 6:
          advance(uint64_t{in.u16()} * (op & 0x80 ? metaroce::kMicrosecond * 64 : 100));
          break;
        case 7:
          if (op & 0x80) {
            post_menu(op & 0x40 ? 1 : 0, in.u8());
          } else {
            jump_to_next_timeout();
          }
          break;
      }
      check_all();
    }
    finish();
  }

 private:
  bool established(int s) const { return side_[s].ep->is_established(side_[s].conn); }

  void reg(int s, Region r, uint32_t access) {
    MemoryRegion mr;
    CHECK(side_[s].ep->register_memory_at(arena().ptr(r), kRegionSize[r], kRegionBase[r], access,
                                          mr) == Status::kOk);
    CHECK(mr.addr == arena().addr(r) && mr.length == kRegionSize[r]);
    side_[s].mr[r] = mr;
  }

  void post_recv(int s, Region r, uint32_t at, uint32_t len) {
    Side& sd = side_[s];
    RecvWr wr;
    wr.wr_id = next_wr_id_++;
    wr.addr = arena().addr(r, at);
    wr.length = len;
    wr.lkey = sd.mr[r].lkey;
    if (sd.ep->post_recv(sd.conn, wr) == Status::kOk) sd.recv_outstanding[wr.wr_id] = len;
  }

  void post_shared_recv(Region r, uint32_t at, uint32_t len) {
    Side& sd = side_[1];
    const RecvWr wr{next_wr_id_++, arena().addr(r, at), len, sd.mr[r].lkey};
    if (sd.ep->post_shared_recv(wr) == Status::kOk) sd.shared_outstanding[wr.wr_id] = len;
  }

  // A small menu of work requests; all stay inside registered memory.
  void post_menu(int s, uint8_t pick) {
    Side& sd = side_[s];
    const Side& peer = side_[1 - s];
    SendWr wr;
    wr.wr_id = next_wr_id_++;
    wr.imm = 0xabc00000u | static_cast<uint32_t>(wr.wr_id);
    if (s == 0) {
      switch (pick % 8) {
        case 0:
          wr.op = WrOpcode::kWrite;
          wr.length = 3000;
          break;
        case 1:
          wr.op = WrOpcode::kWriteImm;
          wr.length = 100;
          break;
        case 2:
          wr.op = WrOpcode::kSend;
          wr.length = 700;
          break;
        case 3:
          wr.op = WrOpcode::kRead;
          wr.length = 1500;
          break;
        case 4:
          wr.op = WrOpcode::kSendImm;
          wr.length = 10;
          break;
        case 5:
          wr.op = WrOpcode::kSend;
          wr.length = 0;
          break;
        case 6:
          wr.op = WrOpcode::kRead;
          wr.length = 1;
          break;
        case 7:
          if (pick & 0x20)
            post_shared_recv(kBRecv, (pick >> 3) % 4 * 1024, 1024);
          else
            post_recv(1, kBRecv, (pick >> 3) % 4 * 1024, 1024);
          return;
      }
      if (wr.op == WrOpcode::kRead) {
        wr.local_addr = arena().addr(kADst, pick >> 3);
        wr.lkey = sd.mr[kADst].lkey;
        wr.remote_addr = peer.mr[kBRd].addr + 17;
        wr.rkey = peer.mr[kBRd].rkey;
      } else {
        wr.local_addr = arena().addr(kASrc, pick >> 3);
        wr.lkey = sd.mr[kASrc].lkey;
        wr.remote_addr = peer.mr[kBWr].addr + (pick >> 3) * 8;
        wr.rkey = peer.mr[kBWr].rkey;
      }
    } else {
      switch (pick % 4) {
        case 0:
          wr.op = WrOpcode::kSend;
          wr.length = 300;
          break;
        case 1:
          wr.op = WrOpcode::kWrite;
          wr.length = 200;
          break;
        case 2:
          wr.op = WrOpcode::kSendImm;
          wr.length = 20;
          break;
        case 3: post_recv(0, kARecv, (pick >> 2) % 2 * 1024, 1024); return;
      }
      wr.local_addr = arena().addr(kBSrc, pick >> 2);
      wr.lkey = sd.mr[kBSrc].lkey;
      if (wr.op == WrOpcode::kWrite) {
        wr.remote_addr = peer.mr[kADst].addr + 2048 + (pick >> 2);
        wr.rkey = peer.mr[kADst].rkey;
      }
    }
    if (sd.ep->post_send(sd.conn, wr) == Status::kOk) sd.send_outstanding[wr.wr_id] = wr.length;
  }

  // ---- traffic ----
  // Takes one datagram from side s into dg_; false when it has none. Every
  // datagram the engine emits must be a valid packet.
  bool take(int s, TxDatagram& tx) {
    Side& sd = side_[s];
    if (sd.gather) {
      // engine.hpp: in gather mode the packet is buf[0, header_len) + payload + trailer.
      if (!sd.ep->poll_transmit_gather(now_, txbuf_, tx)) return false;
      CHECK(tx.header_len <= txbuf_.size());
      CHECK(tx.len == tx.header_len + tx.payload.size() + wire::kIcrcSize);
      dg_.assign(txbuf_.begin(), txbuf_.begin() + static_cast<std::ptrdiff_t>(tx.header_len));
      dg_.insert(dg_.end(), tx.payload.begin(), tx.payload.end());
      dg_.insert(dg_.end(), tx.trailer, tx.trailer + wire::kIcrcSize);
    } else {
      if (!sd.ep->poll_transmit(now_, txbuf_, tx)) return false;
      CHECK(tx.len <= txbuf_.size());
      dg_.assign(txbuf_.begin(), txbuf_.begin() + static_cast<std::ptrdiff_t>(tx.len));
    }
    wire::Packet pkt;
    const wire::ParseError e = wire::decode(dg_, pkt);
    if (e != wire::ParseError::kOk) {
      std::fprintf(stderr, "fuzz_engine: endpoint %c emitted an invalid datagram (%s mode): %s\n",
                   s == 0 ? 'A' : 'B', sd.gather ? "gather" : "copy", wire::parse_error_name(e));
      std::fprintf(stderr, "fuzz_engine: len %zu, first bytes:", dg_.size());
      for (size_t i = 0; i < dg_.size() && i < 64; ++i) std::fprintf(stderr, " %02x", dg_[i]);
      std::fprintf(stderr, "\n");
      if (sd.gather && tx.payload.empty() && tx.len == tx.header_len + wire::kIcrcSize &&
          tx.len <= txbuf_.size() &&
          wire::decode(std::span<const uint8_t>(txbuf_.data(), tx.len), pkt) ==
              wire::ParseError::kOk)
        std::fprintf(stderr,
                     "fuzz_engine: buf[0, len) is valid: the ICRC was left in the header buffer "
                     "instead of TxDatagram::trailer\n");
      fail("engine emitted a datagram that does not decode", static_cast<uint8_t>(e));
    }
    return true;
  }

  void deliver(int to, const PeerAddr& from, uint16_t entropy, bool ce,
               std::span<const uint8_t> bytes, bool trimmed = false) {
    RxDatagram rx;
    rx.peer = from;
    rx.entropy = entropy;
    rx.ce = ce;
    rx.bytes = bytes;
    rx.trimmed = trimmed;
    side_[to].ep->handle_datagram(rx, now_);
  }

  // Moves up to `budget` datagrams each way. With `lossy`, bit i of drop/ce
  // decides the fate of the i-th datagram (mod 8).
  void pump(int budget, uint8_t drop, uint8_t ce, bool lossy) {
    unsigned n = 0;
    for (int i = 0; i < budget; ++i) {
      bool moved = false;
      for (int s = 0; s < 2; ++s) {
        TxDatagram tx;
        if (!take(s, tx)) continue;
        moved = true;
        const unsigned bit = n++ % 8;
        if (!(tx.peer == side_[1 - s].self)) continue;  // to a stranger: nowhere to go
        capture(1 - s, tx.entropy, dg_);
        if (lossy && ((drop >> bit) & 1)) continue;
        deliver(1 - s, side_[s].self, tx.entropy, lossy && ((ce >> bit) & 1), dg_);
        drain();
      }
      if (!moved) break;
    }
    drain();
  }

  void capture(int to, uint16_t entropy, const std::vector<uint8_t>& bytes) {
    Captured& c = ring_[ring_next_++ % ring_.size()];
    c.to = to;
    c.entropy = entropy;
    c.bytes = bytes;
    if (ring_size_ < ring_.size()) ++ring_size_;
  }

  void advance(uint64_t dt) {
    now_ = now_ + dt;
    for (auto& sd : side_)
      if (sd.ep->next_timeout() <= now_) sd.ep->handle_timeout(now_);
    drain();
  }

  void jump_to_next_timeout() {
    TimeNs t = TimeNs::never();
    for (auto& sd : side_) {
      const TimeNs n = sd.ep->next_timeout();
      if (n < t) t = n;
    }
    if (t == TimeNs::never()) return;
    const TimeNs cap = now_ + 5 * metaroce::kSecond;
    if (cap < t) t = cap;
    if (now_ < t) now_ = t;
    advance(0);
  }

  // ---- fuzzed datagrams ----
  static void put32(std::vector<uint8_t>& d, size_t at, uint32_t v) {
    if (d.size() < at + 4) return;
    for (int i = 0; i < 4; ++i) d[at + i] = static_cast<uint8_t>(v >> (24 - 8 * i));
  }
  static void put64(std::vector<uint8_t>& d, size_t at, uint64_t v) {
    put32(d, at, static_cast<uint32_t>(v >> 32));
    put32(d, at + 4, static_cast<uint32_t>(v));
  }

  // flags: bit0 flip target, bit1 CE, bit2 from a stranger, bit3 reseal,
  //        bit4 patch dst_conn, bit5 patch rkey/raddr (one more byte + u16).
  void send_fuzzed(int to, uint8_t flags, uint16_t entropy, std::vector<uint8_t>& d, Input& in) {
    if (flags & 0x10) put32(d, 4, side_[to].conn.v);
    if (flags & 0x20) {
      const uint8_t k = in.u8();
      const uint16_t at = in.u16();
      constexpr Region kTargets[] = {kBWr, kBRd, kBDereg, kBRecv, kADst, kASrc, kARecv, kBSrc};
      const Region r = kTargets[(k & 7) % std::size(kTargets)];
      const MemoryRegion& mr =
          (r == kADst || r == kASrc || r == kARecv) ? side_[0].mr[r] : side_[1].mr[r];
      const size_t rh = wire::kBaseHeaderSize + wire::kMessageHeaderSize;
      put64(d, rh, mr.rkey);
      if (k & 8) put64(d, rh + 8, mr.addr + at % (kRegionSize[r] + 64));
    }
    if (flags & 0x08) metaroce::fuzz::reseal(d);
    // TRIM-1: the payload goes, the ICRC stays last (after any reseal, as
    // the switch cuts what the sender sealed).
    const bool trimmed = (flags & 0x40) != 0;
    if (trimmed && d.size() >= 2 && wire::is_known_opcode(d[1])) {
      const size_t h = wire::header_size(static_cast<wire::Opcode>(d[1]));
      if (d.size() > h + wire::kIcrcSize)
        d.erase(d.begin() + static_cast<long>(h), d.end() - static_cast<long>(wire::kIcrcSize));
    }
    deliver(to, flags & 0x04 ? stranger_ : side_[1 - to].self, entropy, (flags & 0x02) != 0, d,
            trimmed);
    drain();
  }

  void inject_raw(Input& in) {
    const uint8_t flags = in.u8();
    const uint16_t entropy = in.u16();
    const size_t len = in.u16() % 4600;
    const std::span<const uint8_t> b = in.bytes(len);
    std::vector<uint8_t> d(b.begin(), b.end());
    send_fuzzed(flags & 1, flags, entropy, d, in);
  }

  void inject_captured(Input& in) {
    const uint8_t flags = in.u8();
    const uint8_t idx = in.u8();
    const uint8_t edits = in.u8() % 8;
    if (ring_size_ == 0) return;
    const Captured& c = ring_[idx % ring_size_];
    std::vector<uint8_t> d = c.bytes;
    for (uint8_t e = 0; e < edits; ++e) {
      const uint16_t pos = in.u16();
      const uint8_t val = in.u8();
      if (d.empty()) break;
      if (pos & 0x8000) {
        d.resize(pos % (d.size() + 1));  // truncate
      } else {
        d[pos % d.size()] = val;
      }
    }
    const int to = (flags & 1) ? 1 - c.to : c.to;
    send_fuzzed(to, static_cast<uint8_t>(flags & ~1), c.entropy, d, in);
  }

  // ---- checks ----
  void drain() {
    for (int s = 0; s < 2; ++s) {
      Side& sd = side_[s];
      Completion c;
      while (sd.ep->poll_completion(c)) {
        const bool recv =
            c.op == metaroce::CompletionOp::kRecv || c.op == metaroce::CompletionOp::kRecvWriteImm;
        auto* outstanding = recv ? &sd.recv_outstanding : &sd.send_outstanding;
        if (recv && sd.shared_outstanding.count(c.wr_id) != 0) outstanding = &sd.shared_outstanding;
        auto it = outstanding->find(c.wr_id);
        if (it == outstanding->end())
          fail("completion for a work request not outstanding", c.wr_id);
        if (recv && c.status == Status::kOk && c.op == metaroce::CompletionOp::kRecv &&
            c.byte_len > it->second)
          fail("receive completion longer than its buffer", c.byte_len);
        outstanding->erase(it);
      }
      Event ev;
      while (sd.ep->poll_event(ev)) {
        if (s == 1 && ev.kind == EventKind::kAccepted && !sd.conn.valid() &&
            ev.peer == side_[0].self)
          sd.conn = ev.conn;
      }
    }
  }

  void check_all() {
    drain();
    arena().check();
  }

  void finish() {
    for (int s = 0; s < 2; ++s) side_[s].ep->close(side_[s].conn, now_);
    for (int round = 0; round < 64; ++round) {
      pump(256, 0, 0, false);
      const bool done = side_[0].send_outstanding.empty() && side_[0].recv_outstanding.empty() &&
                        side_[1].send_outstanding.empty() && side_[1].recv_outstanding.empty();
      if (done && side_[0].ep->next_timeout() == TimeNs::never() &&
          side_[1].ep->next_timeout() == TimeNs::never())
        break;
      jump_to_next_timeout();
    }
    check_all();
    for (const Side& sd : side_) {
      if (!sd.send_outstanding.empty())
        fail("send work request never completed after close", sd.send_outstanding.begin()->first);
      if (!sd.recv_outstanding.empty())
        fail("receive work request never completed after close",
             sd.recv_outstanding.begin()->first);
    }
  }

  std::array<Side, 2> side_;
  PeerAddr stranger_;
  TimeNs now_{1'000'000'000};
  uint64_t next_wr_id_ = 1;
  std::vector<uint8_t> txbuf_;
  std::vector<uint8_t> dg_;
  std::array<Captured, 32> ring_;
  size_t ring_next_ = 0;
  size_t ring_size_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  World world(in.u8());
  world.run(in);
  return 0;
}
