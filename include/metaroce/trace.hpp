// Optional protocol event trace. With no sink installed the engine pays one
// predictable branch per event site.
#pragma once

#include <cstdint>

#include "metaroce/types.hpp"

namespace metaroce {

// kConnState: the connection failed (the only change of its state traced,
// as the kError event): aux the Status that failed it, psn the PSN of our
// own request at fault (a NAK's, NAK-3, or a local fault's, MR-5), else 0.
enum class TraceKind : uint8_t {
  kSent,          // data packet sent (aux: 1 if retransmission)
  kReceived,      // data packet accepted (aux: 1 if CE)
  kDuplicate,     // data packet already received
  kAcked,         // data packet newly acknowledged
  kLost,          // data packet declared lost, to be resent (aux: its LossCause)
  kPathState,     // path changed state (aux: new PathState, psn: new entropy)
  kPathRetired,   // path's entropy replaced (aux: old entropy, psn: new entropy)
  kNakSent,       // aux: code
  kNakReceived,   // aux: code
  kConnState,     // connection failed (aux: its Status; psn: see above)
  kPathExplored,  // path moved to a new entropy (PATH-8; aux: old entropy, psn: new entropy)
};

// Why a kLost event's packet was declared lost: its aux. Only kReorder,
// kTimeout and kTailProbe are losses its path found, counted in
// PathStats::losses and ConnStats::losses_declared; the others resend a
// packet early, or one a switch cut, a receiver refused or a retired path
// carried, and count elsewhere or nowhere. So counting the lost events
// gives more than those counters.
enum class LossCause : uint8_t {
  kReorder = 0,      // LOSS-2: later packets of its path came back, or its time passed
  kTimeout = 1,      // LOSS-5: its path's retransmission timeout
  kTailProbe = 2,    // LOSS-8: its path's tail-loss probe came back without it
  kTailResend = 3,   // LOSS-8: the tail-loss timer resends its path's oldest packet early
  kTrimmed = 4,      // TRIM-3: a switch cut its payload (PathStats::trims)
  kRnr = 5,          // LOSS-7: the receiver refused it, short of buffers (rnr_resends)
  kPathRetired = 6,  // PATH-4, PATH-5: its path was retired while it was in flight
};

// One spelling for every trace printer. No default: -Wswitch (an error here)
// names the printer's gap when a kind is added.
constexpr const char* trace_kind_name(TraceKind k) {
  switch (k) {
    case TraceKind::kSent: return "sent";
    case TraceKind::kReceived: return "received";
    case TraceKind::kDuplicate: return "duplicate";
    case TraceKind::kAcked: return "acked";
    case TraceKind::kLost: return "lost";
    case TraceKind::kPathState: return "path_state";
    case TraceKind::kPathRetired: return "path_retired";
    case TraceKind::kNakSent: return "nak_sent";
    case TraceKind::kNakReceived: return "nak_received";
    case TraceKind::kConnState: return "conn_state";
    case TraceKind::kPathExplored: return "path_explored";
  }
  return "unknown";  // a value cast from a byte that names no kind
}

struct TraceEvent {
  TimeNs time;
  TraceKind kind;
  uint8_t path;
  ConnId conn;
  uint32_t psn;
  uint32_t aux;
};

// Called synchronously from inside the Endpoint's calls (inputs, outputs,
// commands), in the middle of a change of state: it may call the getters
// (conn_stats, path_stats, endpoint_stats), which see the change half made,
// and nothing else of the Endpoint. It runs on the packet path.
using TraceFn = void (*)(void* ctx, const TraceEvent& ev);

}  // namespace metaroce
