// Counters the engine keeps per endpoint, connection and path. Plain values,
// readable at any time; reading them costs nothing on the hot path.
#pragma once

#include <cstdint>

#include "metaroce/types.hpp"

namespace metaroce {

enum class PathState : uint8_t {
  kActive,   // carrying data
  kProbing,  // new entropy or after timeouts: only PROBE packets until one is answered
};

struct PathStats {
  uint16_t entropy = 0;  // UDP source port of this path now
  PathState state = PathState::kActive;
  uint64_t packets_sent = 0;     // data packets, first transmissions and retransmissions
  uint64_t bytes_sent = 0;       // payload bytes
  uint64_t retransmissions = 0;  // retransmissions sent on this path
  uint64_t packets_acked = 0;    // data packets sent here and acknowledged
  uint64_t ce_marks = 0;         // CE echoes received for packets sent here
  uint64_t losses = 0;           // packets sent here and declared lost
  uint64_t trims = 0;            // packets sent here echoed ECHO_TRIMMED and resent (TRIM-3)
  uint64_t timeouts = 0;         // retransmission timeouts
  uint64_t retirements = 0;      // times this slot's entropy was replaced as failed (PATH-6)
  uint64_t explorations = 0;     // times it was moved to a new entropy to explore (PATH-8)
  uint64_t probes_sent = 0;
  uint64_t srtt_ns = 0;
  uint64_t min_rtt_ns = 0;
  uint32_t cwnd_bytes = 0;
  uint32_t inflight_bytes = 0;
  uint32_t alpha_permille = 0;      // DCTCP ECN fraction estimate
  uint32_t loss_rate_permille = 0;  // loss EWMA
};

struct ConnStats {
  uint64_t data_packets_sent = 0;
  uint64_t data_bytes_sent = 0;  // payload
  uint64_t retransmissions = 0;
  uint64_t data_packets_received = 0;  // accepted, not duplicates
  uint64_t data_bytes_received = 0;
  uint64_t duplicates_received = 0;
  uint64_t acks_sent = 0;
  uint64_t acks_received = 0;
  uint64_t naks_sent = 0;
  uint64_t naks_received = 0;
  uint64_t ce_received = 0;  // CE-marked data packets that arrived
  uint64_t losses_declared = 0;
  uint64_t trimmed_received = 0;  // data packets that arrived cut to their headers (TRIM-2)
  uint64_t trims_echoed = 0;      // packets of ours ECHO_TRIMMED declared lost (TRIM-3)
  uint64_t path_retirements = 0;
  uint64_t path_explorations = 0;  // PATH-8
  uint64_t timeouts = 0;
  uint64_t out_of_window = 0;     // data packets dropped outside the PSN window (SEQ-4)
  uint64_t rnr_naks_sent = 0;     // RNR NAKs sent (one may answer several refused packets)
  uint64_t send_completions = 0;  // reported: a kSendUnsignaled success is not counted
  uint64_t recv_completions = 0;
};

// Packets the endpoint dropped before they reached a connection, by reason.
struct EndpointStats {
  uint64_t datagrams_received = 0;
  uint64_t datagrams_sent = 0;
  uint64_t truncated = 0;
  uint64_t bad_version = 0;
  uint64_t bad_opcode = 0;
  uint64_t bad_checksum = 0;
  uint64_t bad_length = 0;
  uint64_t bad_field = 0;
  uint64_t unknown_connection = 0;
  uint64_t wrong_peer = 0;
  uint64_t connects_refused = 0;
  uint64_t tx_buffer_too_small = 0;  // poll_transmit calls refused (transmit_buffer_bytes)
  uint64_t shared_recvs_taken = 0;   // receives connections took from the shared queue (PLACE-6)
  // LOSS-7, every connection's: RNR NAKs received (a peer short of receive
  // buffers), stale copies included, and the data packets they sent back to
  // be resent. A provider sizing its bounce buffers watches these.
  uint64_t rnr_naks_received = 0;
  uint64_t rnr_resends = 0;
  // CONN-7: records of ended connections dropped before their end, the
  // oldest first, by an endpoint holding max_connections of them (or one
  // whose memory ran short). Each is a guarantee given up early: a late
  // repeat of that connection's DISCONNECT goes unanswered, or a late copy
  // of its request opens a second connection. A provider seeing it rise
  // closes connections faster than max_connections covers.
  uint64_t closed_records_dropped = 0;
  // READ-6: reports of READs served (read_served_events) dropped, the oldest
  // first, because max_reads_served waited untaken (Endpoint::poll_read_served).
  uint64_t reads_served_dropped = 0;
};

}  // namespace metaroce
