// A deterministic, seeded, in-process network model: nodes joined by N
// parallel paths, each path a pair of independent one-way links. It moves
// opaque datagrams between node ids and knows nothing about MetaRoCE except
// how to read byte 1 (the opcode) for the failover counter.
//
// Path selection: a datagram with entropy e (its UDP source port) goes on path
// e % N, like a switch doing ECMP with modulo hashing of the source port; or,
// with NetworkConfig::hash_paths, on path hash(e, seed) % N, like Linux's L4
// multipath hash with its per-boot key: consecutive ports then land anywhere,
// and a few values may leave a path unused.
//
// Each link (src node, dst node, path) is a FIFO:
//   * serialization at `rate_bps` (wire size = datagram + overhead_bytes),
//     then `delay_ns` of propagation; arrivals stay in FIFO order;
//   * drop-tail: the backlog at enqueue (bytes not yet serialized) plus the
//     packet must fit in `queue_limit_bytes`;
//   * ECN: an ECT(0)/ECT(1) packet is marked CE when the backlog at enqueue
//     exceeds `ecn_threshold_bytes`;
//   * random loss (the packet still used the link), duplication (a second
//     copy enters right behind the first), corruption (one random bit flipped);
//   * failure: from down_at until up_at every packet entering the path is
//     dropped, and so is every packet in flight at any moment of the window.
// Time is integer nanoseconds. Every link has its own xoshiro256** stream
// seeded from (seed, src, dst, path), so changing traffic on one link never
// changes the random draws of another, and the same seed gives the same run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "metaroce/harness/rng.hpp"
#include "metaroce/types.hpp"

namespace metaroce::harness {

inline constexpr uint64_t kUnlimited = UINT64_MAX;
inline constexpr uint64_t kGbps = 1'000'000'000;

// ECN codepoints (IP header, 2 bits).
inline constexpr uint8_t kNotEct = 0;
inline constexpr uint8_t kEct1 = 1;
inline constexpr uint8_t kEct0 = 2;
inline constexpr uint8_t kCe = 3;

struct PathConfig {
  uint64_t rate_bps = 100 * kGbps;            // 0: infinitely fast (no serialization, no queue)
  uint64_t delay_ns = 1000;                   // one-way propagation delay
  uint64_t queue_limit_bytes = kUnlimited;    // drop-tail limit on the backlog
  uint64_t ecn_threshold_bytes = kUnlimited;  // mark CE when the backlog exceeds this
  uint32_t overhead_bytes = 0;                // per-packet bytes on the wire beyond the datagram
                                // (e.g. 8 UDP + 20 IPv4 + 18 Ethernet + 20 preamble/IFG)
  double loss = 0.0;       // random loss probability per packet
  double duplicate = 0.0;  // duplication probability per packet
  double corrupt = 0.0;    // probability of one flipped bit per packet
  // Packet trimming (spec TRIM-1): a data packet that would overflow
  // queue_limit_bytes is cut to its headers + ICRC and queued (same FIFO)
  // if the header fits within the limit + trim_allowance_bytes; it arrives
  // flagged trimmed, as a driver reads the TRIMMED code point (TRIM-2).
  bool trim = false;
  uint64_t trim_allowance_bytes = 16 * 1024;
  TimeNs down_at = TimeNs::never();  // path fails at this time ...
  TimeNs up_at = TimeNs::never();    // ... and comes back at this one (never: stays down)
};

struct NetworkConfig {
  uint32_t num_nodes = 2;
  std::vector<PathConfig> paths = std::vector<PathConfig>(1);  // N = paths.size() >= 1
  uint64_t seed = 1;
  // Model a receiver UDP checksum: a corrupted datagram is counted, then
  // dropped at delivery instead of handed to the node. Off by default, so
  // corruption reaches the endpoint and exercises its ICRC check.
  bool udp_checksum = false;
  // Paths chosen by a seeded hash of the entropy instead of entropy % N.
  bool hash_paths = false;
};

// Counters of one link (one path, one direction).
struct LinkStats {
  uint64_t packets_sent = 0;  // datagrams offered to the link (copies not included)
  uint64_t bytes_sent = 0;
  uint64_t packets_delivered = 0;  // handed to the destination (copies included)
  uint64_t bytes_delivered = 0;
  uint64_t dropped_queue = 0;  // drop-tail
  uint64_t trimmed = 0;        // cut to headers instead of dropped (PathConfig::trim)
  uint64_t lost = 0;           // random loss
  uint64_t corrupted = 0;      // bit flipped (delivered unless udp_checksum)
  uint64_t duplicated = 0;     // extra copies created
  uint64_t ce_marked = 0;
  uint64_t dropped_down = 0;  // entered or in flight while the path was down
  uint64_t max_backlog_bytes = 0;
  // Time the last data packet (opcode 0x01..0x06 in byte 1) entered this link
  // while the path was down; TimeNs::never() if none did. Minus down_at, this
  // is how long the sender kept using a dead path.
  TimeNs last_data_while_down = TimeNs::never();
  uint64_t data_while_down = 0;  // how many data packets entered while down
};

// One datagram leaving the network. `bytes` stays valid until the next
// non-const call on the Network.
struct Delivery {
  TimeNs time;
  uint32_t src = 0;
  uint32_t dst = 0;
  uint32_t path = 0;
  uint16_t entropy = 0;
  uint8_t ecn = kNotEct;
  bool ce() const { return ecn == kCe; }
  bool corrupted = false;
  bool trimmed = false;  // cut by a trimming queue (RxDatagram::trimmed)
  std::span<const uint8_t> bytes;
};

enum class NetTraceKind : uint8_t {
  kEnqueue,       // accepted into the link queue (aux: backlog bytes before it)
  kDeliver,       // handed to the destination
  kDropQueue,     // drop-tail
  kTrim,          // cut to headers + ICRC instead of dropped (aux: backlog bytes)
  kLoss,          // random loss
  kDropDown,      // path down (on entry or in flight)
  kDuplicate,     // a copy was made
  kCorrupt,       // aux: flipped bit index
  kCeMark,        // marked CE (aux: backlog bytes)
  kDropChecksum,  // corrupted and dropped by the modelled UDP checksum
};

// One spelling for every network trace printer. No default: -Wswitch (an
// error here) names the gap when a kind is added.
constexpr const char* name(NetTraceKind k) {
  switch (k) {
    case NetTraceKind::kEnqueue: return "enq";
    case NetTraceKind::kDeliver: return "deliver";
    case NetTraceKind::kDropQueue: return "qdrop";
    case NetTraceKind::kTrim: return "trim";
    case NetTraceKind::kLoss: return "loss";
    case NetTraceKind::kDropDown: return "down";
    case NetTraceKind::kDuplicate: return "dup";
    case NetTraceKind::kCorrupt: return "corrupt";
    case NetTraceKind::kCeMark: return "ce";
    case NetTraceKind::kDropChecksum: return "cksum";
  }
  return "unknown";  // a value cast from a byte that names no kind
}

struct NetTraceEvent {
  TimeNs time;
  NetTraceKind kind;
  uint32_t src;
  uint32_t dst;
  uint32_t path;
  uint16_t entropy;
  uint8_t opcode;  // byte 1 of the datagram, 0 if shorter
  uint32_t len;
  uint64_t aux;
  std::span<const uint8_t> bytes;  // the datagram (valid during the callback only)
};

using NetTraceFn = std::function<void(const NetTraceEvent&)>;

class Network {
 public:
  explicit Network(NetworkConfig cfg);

  [[nodiscard]] uint32_t num_nodes() const { return cfg_.num_nodes; }
  [[nodiscard]] uint32_t num_paths() const { return static_cast<uint32_t>(cfg_.paths.size()); }
  [[nodiscard]] uint32_t path_of(uint16_t entropy) const {
    if (!cfg_.hash_paths) return entropy % num_paths();
    return static_cast<uint32_t>(mix_seed(cfg_.seed, 0x6563'6d70, entropy) % num_paths());
  }
  [[nodiscard]] const NetworkConfig& config() const { return cfg_; }

  // Offers a datagram to link (src, dst, path_of(entropy)) at time `now`. Returns
  // false when it was dropped on entry (down, drop-tail or random loss); a
  // duplicate copy may still have been queued. ecn is the IP ECN codepoint.
  bool send(uint32_t src, uint32_t dst, uint16_t entropy, uint8_t ecn,
            std::span<const uint8_t> bytes, TimeNs now);

  // Earliest arrival time of any queued datagram (dropped-in-flight ones
  // included: they are discarded when their time comes); never() if empty.
  [[nodiscard]] TimeNs next_delivery() const;
  // Removes the earliest datagram arriving at or before `now` and returns
  // true, skipping (and counting) ones dropped in flight or by the checksum
  // model. Ties break by link index (src, dst, path), so order is stable.
  bool pop_delivery(TimeNs now, Delivery& out);
  [[nodiscard]] size_t in_flight() const;

  // Per-link configuration (both the constructor's per-path values, copied
  // into each direction, and later changes). Changes apply to packets
  // entering afterwards, except outages, which are checked at delivery too.
  // These accessors throw std::out_of_range for a node or path the network
  // does not have.
  [[nodiscard]] PathConfig& link_config(uint32_t src, uint32_t dst, uint32_t path);
  // Sets the outage window of `path` in every direction between every pair.
  void set_outage(uint32_t path, TimeNs down_at, TimeNs up_at = TimeNs::never());
  [[nodiscard]] bool is_down(uint32_t src, uint32_t dst, uint32_t path, TimeNs t) const;

  [[nodiscard]] const LinkStats& stats(uint32_t src, uint32_t dst, uint32_t path) const;
  // Sum over every link of one path (both directions, all pairs).
  [[nodiscard]] LinkStats path_totals(uint32_t path) const;
  // Sum over every link.
  [[nodiscard]] LinkStats totals() const;
  // Backlog bytes (not yet serialized) of a link at time t.
  [[nodiscard]] uint64_t backlog_bytes(uint32_t src, uint32_t dst, uint32_t path, TimeNs t) const;

  void set_trace(NetTraceFn fn) { trace_ = std::move(fn); }

 private:
  struct Packet {
    TimeNs enqueued;
    TimeNs arrival;
    uint16_t entropy = 0;
    uint8_t ecn = 0;
    bool corrupted = false;
    bool trimmed = false;
    std::vector<uint8_t> data;  // capacity kept when the slot is reused
  };
  // A FIFO ring of packets whose slots keep their buffers, so a warmed-up
  // link allocates nothing per packet.
  class Ring {
   public:
    [[nodiscard]] bool empty() const { return count_ == 0; }
    [[nodiscard]] size_t size() const { return count_; }
    Packet& front() { return slots_[head_]; }
    [[nodiscard]] const Packet& front() const { return slots_[head_]; }
    Packet& back() { return slots_[(head_ + count_ - 1) % slots_.size()]; }
    Packet& push_back();
    void pop_front();
    void pop_back();

   private:
    std::vector<Packet> slots_;
    size_t head_ = 0;
    size_t count_ = 0;
  };
  struct Link {
    PathConfig cfg;
    Rng rng;
    Ring queue;
    TimeNs busy_until;    // when the serializer finishes the last queued packet
    TimeNs last_enqueue;  // last time a packet reached the serializer
    uint64_t carry = 0;   // sub-nanosecond remainder of serialization (units: 1/rate s)
    LinkStats stats;
    uint32_t src = 0, dst = 0, path = 0;
  };

  [[nodiscard]] size_t index(uint32_t src, uint32_t dst, uint32_t path) const;
  // index() for an id the caller gave: std::out_of_range naming `who` and the id.
  [[nodiscard]] size_t checked_index(const char* who, uint32_t src, uint32_t dst,
                                     uint32_t path) const;
  void check_path(const char* who, uint32_t path) const;
  [[nodiscard]] static uint64_t backlog(const Link& l, TimeNs t);
  [[nodiscard]] static bool down_during(const PathConfig& c, TimeNs from, TimeNs to);
  bool enqueue_one(Link& l, std::span<const uint8_t> bytes, uint16_t entropy, uint8_t ecn,
                   TimeNs now);
  void trace(NetTraceKind k, const Link& l, TimeNs t, uint16_t entropy,
             std::span<const uint8_t> bytes, uint64_t aux) const;

  NetworkConfig cfg_;
  std::vector<Link> links_;  // index(src, dst, path); src == dst entries unused
  NetTraceFn trace_;
  std::vector<uint8_t> trim_buf_;  // a trimmed datagram on its way into a queue
};

}  // namespace metaroce::harness
