// The engine benchmark's workload, shared by `metaroce-bench engine` (which
// times it) and metaroce-engine-probe (which callgrind counts): two endpoints
// joined directly in memory, one connection of 4 paths, 16 KiB WRITEs.
// Pipeline is the probe's other workload, the loopback client's steady
// state: 8 paths, each with packets in flight.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "bench.hpp"
#include "metaroce/engine.hpp"

namespace metaroce::bench {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMsg = 16 * 1024;
constexpr uint32_t kSlots = 4;
constexpr size_t kRegion = size_t{kMsg} * kSlots;

struct Pair {
  std::unique_ptr<Endpoint> a, b;
  PeerAddr pa, pb;
  ConnId ca, cb;
  std::vector<uint8_t> src, dst;
  MemoryRegion msrc{}, mdst{};
  std::vector<uint8_t> buf_a = std::vector<uint8_t>(70000), buf_b = std::vector<uint8_t>(70000);
  TimeNs now{1000};

  explicit Pair(bool cover_payload, uint16_t mtu = 4096, uint8_t paths = 4,
                size_t region = kRegion) {
    EndpointConfig c;
    c.mtu = mtu;
    c.cover_payload = cover_payload;
    c.num_paths = paths;
    c.seed = 11;
    a = std::make_unique<Endpoint>(c);
    c.seed = 12;
    b = std::make_unique<Endpoint>(c);
    pa.len = pb.len = 1;
    pa.bytes[0] = 1;
    pb.bytes[0] = 2;
    // Cache-resident buffers: the figure is the engine's cost, and a copy out
    // of DRAM would swamp it (memcpy_4k_ns reports the copy on its own).
    src.assign(region, 0x5a);
    dst.assign(region, 0);
    (void)a->register_memory(src.data(), src.size(), 0, msrc);
    (void)b->register_memory(dst.data(), dst.size(), kAccessRemoteWrite, mdst);
    (void)a->connect(pb, now, ca);
    for (int i = 0; i < 10; ++i) shuttle(false, nullptr);
    Event ev;
    while (b->poll_event(ev))
      if (ev.kind == EventKind::kAccepted) cb = ev.conn;
    while (a->poll_event(ev)) {
    }
  }

  // A gathering driver hands header, payload and trailer to the NIC or
  // kernel as an iovec; the receiver sees one datagram. Assembled in place
  // behind the header (at dgram) without touching the payload twice: the
  // payload is already the receive-side copy source.
  static void assemble(uint8_t* dgram, const TxDatagram& tx) {
    if (tx.payload.empty()) return;
    std::memcpy(dgram + tx.header_len, tx.payload.data(), tx.payload.size());
    std::memcpy(dgram + tx.header_len + tx.payload.size(), tx.trailer, 4);
  }

  // Moves everything each side has to send to the other; counts data packets.
  void shuttle(bool gather, uint64_t* data_packets) {
    TxDatagram tx;
    std::vector<uint8_t> joined;
    while (gather ? a->poll_transmit_gather(now, buf_a, tx) : a->poll_transmit(now, buf_a, tx)) {
      std::span<const uint8_t> bytes(buf_a.data(), tx.len);
      if (gather) assemble(buf_a.data(), tx);
      if (data_packets && buf_a[1] <= 0x06) ++*data_packets;
      b->handle_datagram(RxDatagram{pa, tx.entropy, false, bytes}, now);
      now = now + 300;
      while (b->poll_transmit(now, buf_b, tx))
        a->handle_datagram(RxDatagram{pb, tx.entropy, false, {buf_b.data(), tx.len}}, now);
    }
    if (a->next_timeout() <= now) a->handle_timeout(now);
    if (b->next_timeout() <= now) b->handle_timeout(now);
  }

  // Posts writes of 16 KiB until 8 are outstanding.
  void fill() {
    while (posted - done < 8 && post()) {
    }
  }

  // Keeps the writes fill() posted outstanding (posting the next as each
  // completes) until `packets` more data packets moved; returns how many did.
  uint64_t pump(bool gather, uint64_t packets) {
    const uint64_t start = sent;
    const uint64_t target = sent + packets;
    while (sent < target) {
      shuttle(gather, &sent);
      Completion c;
      while (a->poll_completion(c)) {
        ++done;
        post();
      }
    }
    return sent - start;
  }

  // Completes everything posted, so that the next run starts clean.
  void drain(bool gather) {
    while (done < posted) {
      shuttle(gather, nullptr);
      Completion c;
      while (a->poll_completion(c)) ++done;
    }
  }

  // pump, timed: nanoseconds per data packet.
  double run(bool gather, uint64_t packets) {
    fill();
    const auto t0 = Clock::now();
    const uint64_t moved = pump(gather, packets);
    const auto t1 = Clock::now();
    drain(gather);
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(moved);
  }

 private:
  bool post() { return post_write<kMsg, kSlots>(); }

 protected:
  // The next WRITE of the stream, msg bytes into one of `slots` places.
  template <uint32_t msg, uint32_t slots>
  bool post_write() {
    if (a->post_send(ca, slot_write(msrc, mdst, msg, slots, posted)) != Status::kOk) return false;
    ++posted;
    return true;
  }
  uint64_t sent = 0, posted = 0, done = 0;
};

// The loopback client's steady state (`metaroce-perf client --op write --size
// 65536 --qd 64`): 8 paths, 64 KiB WRITEs 64 deep, sent gathering as the UDP
// driver sends, through a wire of kDepth datagrams. a sends until the wire
// is full or it has nothing more to send, the wire's oldest kBatch datagrams
// arrive at b, and b's ACKs for them all return to a before it sends again:
// every path keeps packets in flight, where Pair::pump leaves them empty.
// Its own loop and post(): Pair's counted loop keeps its code.
struct Pipeline : Pair {
  static constexpr uint8_t kPaths = 8;
  static constexpr uint32_t kMsg = 64 * 1024;
  static constexpr uint32_t kQd = 64;
  static constexpr uint32_t kDepth = 64;
  static constexpr uint32_t kBatch = 16;

  Pipeline() : Pair(false, 4096, kPaths, size_t{kMsg} * kQd) {
    while (posted - done < kQd && post()) {
    }
  }

  // Keeps kQd writes outstanding until `packets` more data packets left a;
  // returns how many did.
  uint64_t pump(uint64_t packets) {
    const uint64_t start = sent;
    const uint64_t target = sent + packets;
    TxDatagram tx;
    while (sent < target) {
      while (in_wire < kDepth) {
        const uint32_t at = (head + in_wire) % kDepth;
        std::vector<uint8_t>& slot = wire[at];
        if (!a->poll_transmit_gather(now, slot, tx)) break;
        assemble(slot.data(), tx);
        if (slot[1] <= 0x06) ++sent;
        len[at] = static_cast<uint32_t>(tx.len);
        entropy[at] = tx.entropy;
        ++in_wire;
        now = now + 300;
      }
      for (uint32_t k = 0; k < kBatch && in_wire > 0; ++k, --in_wire) {
        b->handle_datagram(RxDatagram{pa, entropy[head], false, {wire[head].data(), len[head]}},
                           now);
        head = (head + 1) % kDepth;
      }
      while (b->poll_transmit(now, buf_b, tx))
        a->handle_datagram(RxDatagram{pb, tx.entropy, false, {buf_b.data(), tx.len}}, now);
      if (a->next_timeout() <= now) a->handle_timeout(now);
      if (b->next_timeout() <= now) b->handle_timeout(now);
      Completion c;
      while (a->poll_completion(c)) {
        ++done;
        post();
      }
    }
    return sent - start;
  }

 private:
  bool post() { return post_write<kMsg, kQd>(); }
  std::vector<std::vector<uint8_t>> wire =
      std::vector<std::vector<uint8_t>>(kDepth, std::vector<uint8_t>(4096 + 512));
  std::array<uint32_t, kDepth> len{};
  std::array<uint16_t, kDepth> entropy{};
  uint32_t head = 0, in_wire = 0;
};

}  // namespace metaroce::bench
