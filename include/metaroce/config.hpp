// Endpoint configuration. Every default is the value the spec names (section 8
// and 9); drivers may tune them, both ends need not agree except where the
// connection handshake negotiates (mtu, window, max_reads).
#pragma once

#include <cstdint>
#include <string>

#include "metaroce/types.hpp"

namespace metaroce {

// Per-path congestion control (spec CC-*): DCTCP-style ECN response plus a
// delay target, one controller per path.
struct CcConfig {
  bool enabled = true;                 // false: fixed window per path ("oblivious spraying")
  uint32_t initial_cwnd_packets = 16;  // CC-1: per connection, split over its paths
  uint32_t min_cwnd_packets = 1;       // CC-6
  uint32_t max_cwnd_packets = 0;       // 0: the connection window (CC-6)
  uint32_t dctcp_g_shift = 4;          // alpha gain g = 1/16 (CC-3)
  uint64_t target_queue_delay_ns = 50 * kMicrosecond;  // CC-5
  uint32_t max_delay_decrease_pct = 50;                // at most one halving per RTT (CC-5)
  uint32_t max_inflight_packets = 0;  // CC-9: cap on the sum over paths, 0: none (set near the BDP)
  // PATH-8: how often a busy connection moves its slowest path to a new
  // entropy, so that paths hashed onto the same links find unused ones. 0: never.
  uint64_t explore_interval_ns = 20 * kMillisecond;
};

// Loss recovery and path health (spec LOSS-*, PATH-*).
struct RecoveryConfig {
  uint32_t reorder_threshold = 3;                // LOSS-2: later packets acked on the same path
  uint64_t initial_rtt_ns = 100 * kMicrosecond;  // before the first sample (LOSS-4)
  uint64_t min_rto_ns = 1 * kMillisecond;        // LOSS-4
  uint64_t max_rto_ns = 100 * kMillisecond;      // LOSS-5
  uint32_t rto_failures_to_retire = 3;           // PATH-4: consecutive timeouts
  uint32_t loss_window_packets = 128;            // PATH-5: loss EWMA gain 1/128
  uint32_t retire_loss_pct = 10;                 // PATH-5
  // LOSS-7, NAK-4: RNR retries of one refused message before its request
  // fails kRnrRetryExceeded and the connection with it; 0: unlimited, as
  // InfiniBand's rnr_retry 7. (In the padding before peer_timeout_ns.)
  uint32_t rnr_retry_limit = 0;
  // PATH-7: no acknowledgement at all. Above min_rto_ns, and SHOULD be by a
  // few backed-off RTOs: a lost packet is resent one RTO after its send, and
  // a keepalive's unanswered PROBE followed one RTO later (CONN-9).
  uint64_t peer_timeout_ns = 2 * kSecond;
  // CONN-9: an established connection with nothing outstanding that has heard
  // nothing from its peer this long PROBEs it, and fails kPeerUnreachable if
  // the peer stays silent for peer_timeout_ns after. 0: never.
  uint64_t keepalive_ns = 10 * kSecond;
  uint64_t rnr_retry_ns = 100 * kMicrosecond;  // LOSS-7
};

// ENC-6: CS6, the class RoCEv2 deployments give CNPs; fabrics serve it at
// strict priority, so acknowledgements do not queue behind data.
inline constexpr uint8_t kDefaultControlDscp = 48;
inline constexpr uint8_t kMaxDscp = 63;

// The ranges config_error() checks. mtu: payload bytes of a data packet
// (SEQ-5); the largest keeps a datagram under UDP's 64 KiB.
inline constexpr uint16_t kMinMtu = 256;
inline constexpr uint16_t kMaxMtu = 65000;
// SEQ-3: the window never exceeds what one ACK's SACK words describe (ACK-8).
inline constexpr uint8_t kMinWindowLog2 = 6;
inline constexpr uint8_t kMaxWindowLog2 = 10;
inline constexpr uint8_t kMaxPaths = 32;  // PATH-2: a path_tag's slot has 5 bits
inline constexpr uint32_t kMaxSharedRqDepth = 1u << 24;
// CC-3: alpha has 16 fractional bits; at g = 1/2^10 an update still moves it
// by up to 64 units, and at 1/2^16 it would hardly move at all.
inline constexpr uint32_t kMaxDctcpGShift = 10;
// Window and cap sizes in packets: times the largest packet's cost, they stay
// 32-bit byte counts.
inline constexpr uint32_t kMaxPacketCount = 65535;
// Durations above a day are surely a unit mistake (seconds read as
// nanoseconds the other way round), and they keep `now + d` far from
// wrapping a 64-bit nanosecond clock.
inline constexpr uint64_t kMaxDurationNs = 24 * 3600 * kSecond;

struct EndpointConfig {
  uint16_t mtu = 4096;                        // payload bytes per data packet (SEQ-5)
  uint8_t window_log2 = 10;                   // outstanding-PSN window, 1024 packets, 6..10 (SEQ-3)
  uint8_t num_paths = 8;                      // entropy values per connection (PATH-1), at most 32
  uint16_t sq_depth = 256;                    // send queue entries per connection
  uint16_t rq_depth = 256;                    // receive queue entries per connection
  uint32_t shared_rq_depth = 0;               // receives any connection may take (PLACE-6); 0: none
  uint8_t max_reads = 16;                     // outstanding READs a peer may ask of us (READ-3)
  uint8_t ack_every = 2;                      // ACK-1
  uint16_t max_reads_served = 4096;           // READ-6, 1..65,535: see read_served_events
  uint64_t ack_delay_ns = 10 * kMicrosecond;  // ACK-5, below recovery.min_rto_ns (LOSS-4)
  uint16_t entropy_min = 49152;               // UDP source ports the paths draw from (ENC-3)
  uint16_t entropy_max = 65535;
  bool cover_payload = true;  // INT-2: ICRC over payload, or headers only
  // ENC-6: the IP DSCP of ACKs and NAKs, and of every other packet (0..63).
  uint8_t control_dscp = kDefaultControlDscp;
  uint8_t data_dscp = 0;
  // The port this endpoint receives on, named as its CONNECT_REQs' reply_port
  // (spec section 3.12): a driver that sends them from other ports (its
  // entropy values, CONN-2) sets it. 0: answers go to each request's source.
  // The engine only writes it; the responder's driver reads it (addresses are
  // the driver's, PeerAddr).
  uint16_t reply_port = 0;
  bool accept_incoming = true;  // answer CONNECT_REQ (a listening endpoint)
  uint32_t max_connections = 65536;
  uint64_t connect_retry_ns = 10 * kMillisecond;  // CONN-2, CONN-7
  uint32_t connect_attempts = 8;                  // CONN-2 (at most 65,535 are sent)
  // Report every READ this endpoint answers once its responses are all
  // acknowledged (Endpoint::poll_read_served). Off by default: an
  // application that polls none would have the latest max_reads_served
  // queued, room for them made when the endpoint is, the older dropped and
  // counted (READ-6). (max_reads_served is in the hole after ack_every: the
  // struct keeps its size. Here,
  // in the hole before the next uint64_t: after it, the struct grew by 8
  // bytes, and the engine's WRITE benchmark took about 10 % more cycles a
  // packet for the same instructions.)
  bool read_served_events = false;
  // CONN-7: DISCONNECTs a close sends, connect_retry_ns apart, before it ends
  // without an answer (1..65,535). Apart from connect_attempts, so that a
  // first contact given long to reach a busy peer does not make every close
  // towards a peer that is gone wait as long. (In the same hole.)
  uint16_t disconnect_attempts = 8;
  // Idle time before tracking contexts are pooled. Any value, ack_delay_ns
  // included: an ACK owed is the connection's own state, not a context's.
  uint64_t context_idle_ns = 10 * kMillisecond;
  // Keys, connection ids, entropy values and initial PSNs derive from it. The
  // engine reads no entropy source (sans-IO): a driver in production MUST set
  // a random seed, or remote keys are predictable (spec MR-1).
  uint64_t seed = 1;
  CcConfig cc;
  RecoveryConfig recovery;
};

// What is wrong with `cfg`: empty when every field is in its range, else the
// first field out of range, its value and the range, e.g. "num_paths 40 is out
// of range 1..32 (PATH-1)", or the first relation between fields that does not
// hold (min_rto_ns at most max_rto_ns; ack_delay_ns below min_rto_ns: a delayed
// ACK must come before the sender's RTO, ACK-5; peer_timeout_ns above
// min_rto_ns: a lost packet is resent before the peer timeout, PATH-7). A
// driver refuses such a
// configuration with this text (the UDP driver's open() and the simulator do).
// Endpoint's constructor cannot fail: as a backstop it clamps the fields whose
// raw values would break its arithmetic (mtu, window_log2, num_paths, the
// window and cap sizes, dctcp_g_shift, every duration: one added to `now` must
// not wrap, ...), and runs with the rest as given.
[[nodiscard]] std::string config_error(const EndpointConfig& cfg);

// For tests only (the conformance suite's SEQ-2 in an endpoint's own PSN
// space, across the wrap): a seed with which a fresh endpoint's first
// connection, when it is the first thing the endpoint draws a random number
// for (connect() before any register_memory() or accepted connection),
// starts at initial PSN `psn`. A production endpoint's seed is random (MR-1).
[[nodiscard]] uint64_t seed_for_first_psn(uint32_t psn);

}  // namespace metaroce
