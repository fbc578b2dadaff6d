// Error codes: one small enum for the hot path and the API, with names and
// meanings kept in one table so they cannot drift apart.
#pragma once

#include <cstdint>
#include <string_view>

namespace metaroce {

// X(name, value, description). Values 0x01-0x07 are the NAK codes on the wire
// (spec section 3.10, is_wire_nak_code); values from 0x40 are local, some of them
// also CONNECT_REJECT codes.
#define METAROCE_STATUS_CODES(X)                                                                 \
  X(kOk, 0x00, "success")                                                                        \
  X(kRnr, 0x01, "receiver not ready: no receive buffer posted (retried)")                        \
  X(kRemoteBadKey, 0x02, "remote key unknown or deregistered")                                   \
  X(kRemoteOutOfBounds, 0x03, "remote address range outside the memory region")                  \
  X(kRemoteAccessDenied, 0x04, "memory region lacks the access right")                           \
  X(kRemoteLengthError, 0x05, "message longer than the posted receive buffer")                   \
  X(kRemoteInvalidRequest, 0x06, "request violates the protocol (e.g. too many reads)")          \
  X(kRemoteOperationError, 0x07, "peer failed the request for a fault of its own")               \
  X(kLocalProtection, 0x40, "local buffer outside a registered region with the access it needs") \
  X(kInvalidArgument, 0x41, "invalid argument")                                                  \
  X(kQueueFull, 0x42, "work queue full")                                                         \
  X(kNoSuchConnection, 0x43, "unknown connection id")                                            \
  X(kNotConnected, 0x44, "connection not established")                                           \
  X(kFlushed, 0x45,                                                                              \
    "flushed: the connection ended (closed, failed, or never connected) before the request "     \
    "completed")                                                                                 \
  X(kPeerUnreachable, 0x46, "peer unreachable: no acknowledgement within the timeout")           \
  X(kConnectRefused, 0x47, "peer refused the connection")                                        \
  X(kVersionMismatch, 0x48, "peer speaks another protocol version")                              \
  X(kConnectTimeout, 0x49, "no answer to connection request")                                    \
  X(kResourceExhausted, 0x4a,                                                                    \
    "resource limit reached: this endpoint's connection or memory-region table, or the peer's "  \
    "connection table (a CONNECT_REJECT)")                                                       \
  X(kPeerClosed, 0x4b, "peer closed the connection")                                             \
  X(kRnrRetryExceeded, 0x4c, "receiver not ready after rnr_retry_limit retries (LOSS-7)")

enum class Status : uint8_t {
#define METAROCE_X(name, value, desc) name = value,
  METAROCE_STATUS_CODES(METAROCE_X)
#undef METAROCE_X
};

[[nodiscard]] constexpr std::string_view status_name(Status s) {
  switch (s) {
#define METAROCE_X(name, value, desc) \
  case Status::name: return #name;
    METAROCE_STATUS_CODES(METAROCE_X)
#undef METAROCE_X
  }
  return "kUnknown";
}

[[nodiscard]] constexpr std::string_view status_text(Status s) {
  switch (s) {
#define METAROCE_X(name, value, desc) \
  case Status::name: return desc;
    METAROCE_STATUS_CODES(METAROCE_X)
#undef METAROCE_X
  }
  return "unknown status";
}

// True for the codes the table above defines: a byte off the wire (a
// DISCONNECT's reason, CONN-8) may hold any other.
[[nodiscard]] constexpr bool is_known_status(Status s) {
  switch (s) {
#define METAROCE_X(name, value, desc) \
  case Status::name: return true;
    METAROCE_STATUS_CODES(METAROCE_X)
#undef METAROCE_X
  }
  return false;
}

// True for codes a peer may put in a NAK.
[[nodiscard]] constexpr bool is_wire_nak_code(uint8_t v) { return v >= 0x01 && v <= 0x07; }

}  // namespace metaroce
