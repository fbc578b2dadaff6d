// Optional protocol event trace. With no sink installed the engine pays one
// predictable branch per event site.
#pragma once

#include <cstdint>

#include "metaroce/types.hpp"

namespace metaroce {

enum class TraceKind : uint8_t {
  kSent,          // data packet sent (aux: 1 if retransmission)
  kReceived,      // data packet accepted (aux: 1 if CE)
  kDuplicate,     // data packet already received
  kAcked,         // data packet newly acknowledged
  kLost,          // data packet declared lost (aux: 0 reorder rule, 1 timeout)
  kPathState,     // path changed state (aux: new PathState, psn: new entropy)
  kPathRetired,   // path's entropy replaced (aux: old entropy, psn: new entropy)
  kNakSent,       // aux: code
  kNakReceived,   // aux: code
  kConnState,     // aux: new connection state
  kPathExplored,  // path moved to a new entropy (PATH-8; aux: old entropy, psn: new entropy)
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

using TraceFn = void (*)(void* ctx, const TraceEvent& ev);

}  // namespace metaroce
