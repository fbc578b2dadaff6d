// Simulated packets. Payload bytes are not simulated, only their number; the
// MetaRoCE headers (and ICRC trailer) are real bytes, because the receiving
// engine decodes them. Packets come from a pool: once the pool is warm, a run
// allocates nothing per packet.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "metaroce/ring.hpp"
#include "metaroce/sim/time.hpp"

namespace metaroce::sim {

// Ethernet header 14 + FCS 4 + IPv4 20 + UDP 8 + preamble/SFD 8 + IFG 12.
inline constexpr uint32_t kDefaultWireOverhead = 66;
// Packets smaller than this on the wire are control (ACK, NAK, CNP) in the
// queueing statistics; every data packet of the presets is far larger.
inline constexpr uint32_t kControlPacketBytes = 512;
inline constexpr uint8_t kEcnNotEct = 0;
inline constexpr uint8_t kEcnCe = 3;

struct Packet {
  static constexpr size_t kMaxHeader = 176;  // largest MetaRoCE header (ACK, 16 SACK words) + slack

  Packet* next = nullptr;  // free list / intrusive use
  uint32_t src = 0;        // host ids
  uint32_t dst = 0;
  uint32_t wire_bytes = 0;   // bytes on the wire (datagram + framing overhead)
  uint32_t payload_len = 0;  // payload bytes (not stored)
  uint16_t entropy = 0;      // UDP source port
  uint16_t dport = 4792;     // UDP destination port
  uint16_t header_len = 0;   // bytes of hdr[] before the payload
  uint8_t ecn = 0;           // IP ECN field (0 not-ECT, 2 ECT(0), 3 CE)
  bool trimmed = false;      // a switch cut the payload: the TRIMMED DSCP (spec TRIM-1)
  // IP DSCP. The network-control class (QueueSpec::priority_dscp, 48 as
  // deployments give RoCEv2 CNPs; MetaRoCE ACKs and NAKs, ENC-6) has strict
  // priority in every queue and stays outside PFC's lossless class, so
  // congestion feedback is neither queued behind nor paused with the data it
  // is about.
  uint8_t dscp = 0;
  uint8_t trailer_len = 0;  // bytes after the payload (the ICRC)
  uint8_t trailer[4] = {};
  uint32_t hops = 0;
  uint16_t in_port = 0;  // ingress port at the current switch (PFC accounting)
  // When a PFC port queued it in its FIFO: its wait counts from there, not
  // from when the FIFO let it go.
  SimTime queued_at{};
  uint8_t hdr[kMaxHeader];
};

class PacketPool {
 public:
  PacketPool() = default;
  PacketPool(const PacketPool&) = delete;
  PacketPool& operator=(const PacketPool&) = delete;

  Packet* alloc() {
    if (free_ == nullptr) grow();
    Packet* p = free_;
    free_ = p->next;
    p->next = nullptr;
    p->hops = 0;
    p->trimmed = false;
    p->dscp = 0;
    p->in_port = 0;  // set by the switch that counts it; never a former owner's
    ++live_;
    if (live_ > peak_) peak_ = live_;
    return p;
  }
  void release(Packet* p) {
    p->next = free_;
    free_ = p;
    --live_;
  }
  [[nodiscard]] size_t live() const { return live_; }
  [[nodiscard]] size_t peak() const { return peak_; }
  [[nodiscard]] size_t capacity() const { return chunks_.size() * kChunk; }

 private:
  static constexpr size_t kChunk = 4096;
  void grow() {
    chunks_.push_back(std::make_unique<Packet[]>(kChunk));
    Packet* c = chunks_.back().get();
    for (size_t i = kChunk; i-- > 0;) {
      c[i].next = free_;
      free_ = &c[i];
    }
  }
  std::vector<std::unique_ptr<Packet[]>> chunks_;
  Packet* free_ = nullptr;
  size_t live_ = 0;
  size_t peak_ = 0;
};

// The simulator's FIFOs are the engine's ring (metaroce/ring.hpp).
using metaroce::Ring;

}  // namespace metaroce::sim
