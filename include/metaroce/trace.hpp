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
