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
#include "engine_pair.hpp"
#include "metaroce/engine.hpp"

namespace metaroce::bench {
namespace {

// The two payload copies a data packet costs in the loop below, measured
// alone on the same buffers so that they can be taken off for the "excluding
// copies" figure: registered memory into a datagram buffer behind its
// headers (the send copy, or in gather mode the stand-in for the kernel's
// iovec copy), then out of it into registered memory (placement). Copying
// region to region instead, at equal offsets, misses that one side of each
// copy is a hot buffer and suffers 4 KiB aliasing; on a CPU with fast rep
// movsb it read twice the loop's real copy cost and left the engine's share
// at a third of what a profile shows.
double copies_ns_per_packet(uint64_t packets, size_t size) {
  std::vector<uint8_t> s(kRegion, 1), d(kRegion, 0), datagram(70000, 0);
  constexpr size_t kHeaders = 48;  // a WRITE packet's headers come first
  const auto t0 = Clock::now();
  for (uint64_t i = 0; i < packets; ++i) {
    const size_t off = (i * size) % s.size();
    std::memcpy(datagram.data() + kHeaders, s.data() + off, size);
    asm volatile("" ::"r"(datagram.data()) : "memory");
    std::memcpy(d.data() + off, datagram.data() + kHeaders, size);
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
  const double copies = copies_ns_per_packet(packets, 4096);
  // Cross-check: the same work with 256-byte payloads, whose copies are cheap.
  small.run(false, packets / 10);
  const double small_pkt = small.run(false, packets) - copies_ns_per_packet(packets, 256);
  // Both modes copy the payload twice: into the datagram (the engine's copy,
  // or in gather mode this bench's stand-in for the kernel's iovec copy) and
  // out of it into registered memory (placement). Those two copies are
  // measured alone on the same buffers and taken off.
  const double excl = std::max(0.0, std::min(with_copy, gather) - copies);
  const double measured = measured_bytes_per_connection(o.connections);

  Report r("engine");
  r.num("ns_per_packet", excl,
        "engine cost per 4 KiB packet, send+receive, excluding payload copies");
  r.num("ns_per_packet_with_copy", with_copy, "same, with the send copy and the receive placement");
  r.num("ns_per_packet_gather", gather, "send side in gather mode (payload by reference)");
  r.num("ns_per_packet_full_crc", full_crc, "with copies and the ICRC over the payload (PC set)");
  r.num("ns_per_packet_256b", small_pkt, "cross-check: 256-byte payloads, copies taken off");
  r.num("memcpy_4k_ns", copies / 2, "one 4 KiB payload copy as the loop makes it, for reference");
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
