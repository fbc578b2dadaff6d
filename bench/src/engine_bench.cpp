// `metaroce-bench engine`: the engine's own cost per data packet, send side
// plus receive side (including the ACK traffic it causes), 4 KiB payload, one
// core, two endpoints joined directly in memory (no network model).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <vector>

#include "bench.hpp"
#include "metaroce/engine.hpp"

namespace metaroce::bench {
namespace {

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

  explicit Pair(bool cover_payload, uint16_t mtu = 4096) {
    EndpointConfig c;
    c.mtu = mtu;
    c.cover_payload = cover_payload;
    c.num_paths = 4;
    c.seed = 11;
    a = std::make_unique<Endpoint>(c);
    c.seed = 12;
    b = std::make_unique<Endpoint>(c);
    pa.len = pb.len = 1;
    pa.bytes[0] = 1;
    pb.bytes[0] = 2;
    // Cache-resident buffers: the figure is the engine's cost, and a copy out
    // of DRAM would swamp it (memcpy_4k_ns reports the copy on its own).
    src.assign(kRegion, 0x5a);
    dst.assign(kRegion, 0);
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

  // Moves everything each side has to send to the other; counts data packets.
  void shuttle(bool gather, uint64_t* data_packets) {
    TxDatagram tx;
    std::vector<uint8_t> joined;
    while (gather ? a->poll_transmit_gather(now, buf_a, tx) : a->poll_transmit(now, buf_a, tx)) {
      std::span<const uint8_t> bytes(buf_a.data(), tx.len);
      if (gather && !tx.payload.empty()) {
        // A gathering driver hands header, payload and trailer to the NIC or
        // kernel as an iovec; the receiver sees one datagram. Assemble it in
        // place behind the header without touching the payload twice: the
        // payload is already the receive-side copy source.
        std::memcpy(buf_a.data() + tx.header_len, tx.payload.data(), tx.payload.size());
        std::memcpy(buf_a.data() + tx.header_len + tx.payload.size(), tx.trailer, 4);
      }
      if (data_packets && buf_a[1] <= 0x06) ++*data_packets;
      b->handle_datagram(RxDatagram{pa, tx.entropy, false, bytes}, now);
      now = now + 300;
      while (b->poll_transmit(now, buf_b, tx))
        a->handle_datagram(RxDatagram{pb, tx.entropy, false, {buf_b.data(), tx.len}}, now);
    }
    if (a->next_timeout() <= now) a->handle_timeout(now);
    if (b->next_timeout() <= now) b->handle_timeout(now);
  }

  // Keeps 8 writes of 16 KiB outstanding until `packets` data packets moved.
  double run(bool gather, uint64_t packets) {
    uint64_t sent = 0, posted = 0, done = 0;
    const uint32_t msg = kMsg;
    auto post = [&] {
      if (a->post_send(ca, slot_write(msrc, mdst, msg, kSlots, posted)) == Status::kOk) ++posted;
    };
    for (int i = 0; i < 8; ++i) post();
    const auto t0 = Clock::now();
    while (sent < packets) {
      shuttle(gather, &sent);
      Completion c;
      while (a->poll_completion(c)) {
        ++done;
        post();
      }
    }
    const auto t1 = Clock::now();
    // Drain so the next run starts clean.
    while (done < posted) {
      shuttle(gather, nullptr);
      Completion c;
      while (a->poll_completion(c)) ++done;
    }
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(sent);
  }
};

// The receive-side placement copy the engine cannot avoid, measured on the
// same buffers so it can be subtracted for the "excluding copy" figure.
double copy_ns_per_packet(uint64_t packets, size_t size) {
  std::vector<uint8_t> s(kRegion, 1), d(kRegion, 0);
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < packets; ++i) {
    const size_t off = (i * size) % s.size();
    std::memcpy(d.data() + off, s.data() + off, size);
    asm volatile("" ::"r"(d.data()) : "memory");
  }
  const auto t1 = Clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(packets);
}

size_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * 4096;
}

// Bytes per connection, measured: open many idle connections on one endpoint.
double measured_bytes_per_connection(uint32_t n) {
  EndpointConfig c;
  c.max_connections = n + 16;
  Endpoint a(c), b(c);
  PeerAddr pa, pb;
  pa.len = pb.len = 1;
  pa.bytes[0] = 1;
  pb.bytes[0] = 2;
  std::vector<uint8_t> buf(70000);
  TimeNs now{1000};
  const size_t before = rss_bytes();
  for (uint32_t i = 0; i < n; ++i) {
    ConnId id;
    if (a.connect(pb, now, id) != Status::kOk) return -1;
  }
  TxDatagram tx;
  while (a.poll_transmit(now, buf, tx)) {
    b.handle_datagram(RxDatagram{pa, tx.entropy, false, {buf.data(), tx.len}}, now);
    std::vector<uint8_t> b2(70000);
    TxDatagram t2;
    while (b.poll_transmit(now, b2, t2))
      a.handle_datagram(RxDatagram{pb, t2.entropy, false, {b2.data(), t2.len}}, now);
  }
  Event ev;
  uint32_t up = 0;
  while (a.poll_event(ev)) up += ev.kind == EventKind::kConnected;
  const size_t after = rss_bytes();
  if (up != n) return -1;
  // Both endpoints hold one side of each connection.
  return static_cast<double>(after - before) / (2.0 * n);
}

}  // namespace

int run_engine(const EngineOptions& o) {
  const uint64_t packets = o.packets;
  Pair hdr_only(false);
  Pair full(true);
  Pair small(false, 256);
  // Warm up caches and the pools.
  hdr_only.run(false, packets / 10);
  hdr_only.run(true, packets / 10);
  const double with_copy = hdr_only.run(false, packets);
  const double gather = hdr_only.run(true, packets);
  const double full_crc = full.run(false, packets);
  const double copy = copy_ns_per_packet(packets, 4096);
  // Cross-check: the same work with 256-byte payloads, whose copies are cheap.
  small.run(false, packets / 10);
  const double small_pkt = small.run(false, packets) - 2 * copy_ns_per_packet(packets, 256);
  // Both modes copy the payload twice: into the datagram (the engine's copy,
  // or in gather mode this bench's stand-in for the kernel's iovec copy) and
  // out of it into registered memory (placement). Those two copies are
  // measured alone on the same buffers and taken off.
  const double excl = std::max(0.0, std::min(with_copy, gather) - 2 * copy);
  const double measured = measured_bytes_per_connection(o.connections);

  Report r("engine");
  r.num("ns_per_packet", excl,
        "engine cost per 4 KiB packet, send+receive, excluding payload copies");
  r.num("ns_per_packet_with_copy", with_copy, "same, with the send copy and the receive placement");
  r.num("ns_per_packet_gather", gather, "send side in gather mode (payload by reference)");
  r.num("ns_per_packet_full_crc", full_crc, "with copies and the ICRC over the payload (PC set)");
  r.num("ns_per_packet_256b", small_pkt, "cross-check: 256-byte payloads, copies taken off");
  r.num("memcpy_4k_ns", copy, "one 4 KiB memcpy on this machine, for reference");
  r.num("gbps_per_core_with_copy", 4096 * 8 / with_copy, "payload Gbit/s one core could drive");
  r.num("bytes_per_connection", static_cast<double>(Endpoint::idle_connection_bytes()),
        "engine state per idle connection (sizeof)");
  r.num("bytes_per_connection_measured", measured, "RSS growth per idle connection, measured");
  r.num("active_context_bytes", static_cast<double>(hdr_only.a->active_context_bytes()),
        "pooled tracking state a connection borrows while it has work");
  r.num("packets", static_cast<double>(packets), "data packets per measurement");
  r.print(o.json);
  return 0;
}

}  // namespace metaroce::bench
