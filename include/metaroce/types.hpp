// Strong value types shared by the engine, its drivers and its tools.
// Everything here is header-only and free of I/O.
#pragma once

#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace metaroce {

// Engine time: nanoseconds on a clock the driver chooses (monotonic). The
// engine never reads a clock; every input carries "now".
struct TimeNs {
  uint64_t ns = 0;
  constexpr auto operator<=>(const TimeNs&) const = default;
  [[nodiscard]] constexpr TimeNs operator+(uint64_t d) const { return {ns + d}; }
  [[nodiscard]] constexpr uint64_t since(TimeNs earlier) const {
    return ns >= earlier.ns ? ns - earlier.ns : 0;
  }
  static constexpr TimeNs never() { return {UINT64_MAX}; }
};

constexpr uint64_t kMicrosecond = 1000;
constexpr uint64_t kMillisecond = 1000 * kMicrosecond;
constexpr uint64_t kSecond = 1000 * kMillisecond;

// Packet sequence number: 32 bits, compared modulo 2^32 (spec SEQ-2). All
// ordering of PSNs goes through these helpers so wrap-around lives in one place.
struct Psn {
  uint32_t v = 0;
  constexpr bool operator==(const Psn&) const = default;
  [[nodiscard]] constexpr Psn operator+(uint32_t d) const { return {v + d}; }
  [[nodiscard]] constexpr Psn operator-(uint32_t d) const { return {v - d}; }
  // Signed distance this - other, valid while |distance| < 2^31.
  [[nodiscard]] constexpr int32_t minus(Psn other) const {
    return static_cast<int32_t>(v - other.v);
  }
  [[nodiscard]] constexpr bool before(Psn other) const { return minus(other) < 0; }
  [[nodiscard]] constexpr bool at_or_after(Psn other) const { return minus(other) >= 0; }
};

// Connection identifier, chosen by the endpoint that owns the connection and
// carried by the peer in every packet's dst_conn field. 0 is never valid.
struct ConnId {
  uint32_t v = 0;
  constexpr auto operator<=>(const ConnId&) const = default;
  [[nodiscard]] constexpr bool valid() const { return v != 0; }
};

// Opaque identity of a remote endpoint, chosen by the driver (for UDP: an
// IPv4/IPv6 address and port). The engine compares and copies it, nothing else.
struct PeerAddr {
  uint8_t bytes[20] = {};  // e.g. 16-byte IPv6 / v4-mapped address, 2-byte port, family
  uint8_t len = 0;
  constexpr bool operator==(const PeerAddr& o) const {
    if (len != o.len) return false;
    const uint8_t n = len < sizeof bytes ? len : sizeof bytes;
    if (std::is_constant_evaluated() || std::endian::native != std::endian::little) {
      for (uint8_t i = 0; i < n; ++i)
        if (bytes[i] != o.bytes[i]) return false;
      return true;
    }
    // Every received datagram is checked against its connection's peer (an
    // IPv6 address is 19 bytes): compare words, the last one masked to len
    // bytes, rather than byte by byte.
    uint64_t a0, a1, b0, b1;
    uint32_t a2, b2;
    std::memcpy(&a0, bytes, 8);
    std::memcpy(&b0, o.bytes, 8);
    const uint64_t x0 = a0 ^ b0;
    // A short address whose first 8 bytes all match (those past len are
    // zero in both, as a driver that builds it from PeerAddr{} leaves them)
    // is equal without a mask to build.
    if (n <= 8 && x0 == 0) return true;
    const auto low = [](uint32_t k) { return (uint64_t{1} << (8 * k)) - 1; };  // k < 8 bytes
    if (n < 8) return (x0 & low(n)) == 0;
    std::memcpy(&a1, bytes + 8, 8);
    std::memcpy(&b1, o.bytes + 8, 8);
    const uint64_t x1 = a1 ^ b1;
    if (n < 16) return (x0 | (x1 & low(n - 8u))) == 0;
    std::memcpy(&a2, bytes + 16, 4);
    std::memcpy(&b2, o.bytes + 16, 4);
    return (x0 | x1 | ((a2 ^ b2) & low(n - 16u))) == 0;
  }
};

// Memory access rights granted when memory is registered (spec MR-2).
enum Access : uint32_t {
  kAccessLocalWrite = 1u << 0,
  kAccessRemoteWrite = 1u << 1,
  kAccessRemoteRead = 1u << 2,
};
// Every right there is; other bits make a registration invalid.
inline constexpr uint32_t kAccessKnown = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;

}  // namespace metaroce
