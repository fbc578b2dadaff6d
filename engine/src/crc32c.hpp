// CRC-32C over the short runs every packet checks or seals (its headers),
// inline: calling wire::crc32c, which picks an implementation per call and
// makes its caller save registers, cost as much as the crc32 instructions
// themselves. Longer runs (a payload the ICRC covers, long SACKs) and CPUs
// without SSE4.2 go to wire::crc32c.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "bytes.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::wire::detail {

extern const bool kCrcInstruction;  // the CPU has SSE4.2's crc32 (crc32c.cpp)

#if defined(__x86_64__) && defined(__GNUC__)
// The instruction through inline assembly: an intrinsic would need the
// sse4.2 target on every function this is inlined into.
inline uint64_t crc_step(uint64_t c, const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof w);
  asm("crc32q %1, %0" : "+r"(c) : "rm"(w));
  return c;
}
inline uint32_t crc_step(uint32_t c, const uint8_t* p, uint32_t) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  asm("crc32l %1, %0" : "+r"(c) : "rm"(w));
  return c;
}
inline uint32_t crc_step(uint32_t c, const uint8_t* p, uint16_t) {
  uint16_t w;
  std::memcpy(&w, p, sizeof w);
  asm("crc32w %1, %0" : "+r"(c) : "rm"(w));
  return c;
}
inline uint32_t crc_step(uint32_t c, const uint8_t* p, uint8_t) {
  asm("crc32b %1, %0" : "+r"(c) : "rm"(*p));
  return c;
}

// The CRC of exactly N bytes, N a multiple of 4, as straight-line code.
template <size_t N>
[[gnu::always_inline]] inline uint32_t crc_fixed(const uint8_t* p) {
  static_assert(N % 4 == 0 && N <= 64);
  uint64_t c = 0xffffffffu;
  for (size_t i = 0; i + 8 <= N; i += 8) c = crc_step(c, p + i);
  auto c32 = static_cast<uint32_t>(c);
  if constexpr (N % 8 != 0) c32 = crc_step(c32, p + N - 4, uint32_t{});
  return ~c32;
}

// wire::crc32c(0, p, n). Always inlined: left to itself, the compiler
// moved it out of line once the ACK path grew, which cost as much as it saves.
[[gnu::always_inline]] inline uint32_t crc32c_short(const uint8_t* p, size_t n) {
  if (!kCrcInstruction) [[unlikely]]
    return crc32c(0, p, n);
  // The lengths of nearly every packet, a WRITE's headers and an ACK without
  // SACK words, without the jump into the general sequence and its tail
  // tests: they were most of the cost of the CRC. Tested before the length
  // limit, which they are within.
  if (n == kBaseHeaderSize + kMessageHeaderSize + kRdmaHeaderSize) {
    return crc_fixed<kBaseHeaderSize + kMessageHeaderSize + kRdmaHeaderSize>(p);
  }
  if (n == kBaseHeaderSize + kAckFixedSize) return crc_fixed<kBaseHeaderSize + kAckFixedSize>(p);
  if (n > 64) return crc32c(0, p, n);
  uint64_t c = 0xffffffffu;
  // Straight into an unrolled run of the whole words, in order: no loop
  // bookkeeping per word.
  const uint8_t* end = p + (n & ~size_t{7});
  switch (n >> 3) {
    case 8: c = crc_step(c, end - 64); [[fallthrough]];
    case 7: c = crc_step(c, end - 56); [[fallthrough]];
    case 6: c = crc_step(c, end - 48); [[fallthrough]];
    case 5: c = crc_step(c, end - 40); [[fallthrough]];
    case 4: c = crc_step(c, end - 32); [[fallthrough]];
    case 3: c = crc_step(c, end - 24); [[fallthrough]];
    case 2: c = crc_step(c, end - 16); [[fallthrough]];
    case 1: c = crc_step(c, end - 8); [[fallthrough]];
    default: break;
  }
  auto c32 = static_cast<uint32_t>(c);
  if (n & 4) c32 = crc_step(c32, end, uint32_t{});
  if (n & 2) c32 = crc_step(c32, end + (n & 4), uint16_t{});
  if (n & 1) c32 = crc_step(c32, end + (n & 6), uint8_t{});
  return ~c32;
}
#else
inline uint32_t crc32c_short(const uint8_t* p, size_t n) { return crc32c(0, p, n); }
#endif

// The ICRC of a datagram known to fit, over the headers and, if `covered`
// (the PC flag), the payload; returns the datagram's length.
[[gnu::always_inline]] inline size_t seal_fitting(uint8_t* p, size_t header_len, size_t payload_len,
                                                  bool covered) {
  const size_t crc_len = covered ? header_len + payload_len : header_len;
  store32(p + header_len + payload_len, crc32c_short(p, crc_len));
  return header_len + payload_len + kIcrcSize;
}

// wire::seal, inline for the engine's per-packet callers (a data packet and
// an ACK each), where the call cost more than the checks.
[[gnu::always_inline]] inline size_t seal_inline(std::span<uint8_t> out, size_t header_len,
                                                 size_t payload_len) {
  if (out.size() < header_len + payload_len + kIcrcSize || header_len < kBaseHeaderSize) return 0;
  return seal_fitting(out.data(), header_len, payload_len, (out[0] & kFlagPayloadCovered) != 0);
}

// seal_inline for N bytes of headers and no payload, N known at compile time
// (a plain ACK's 36): the CRC's tests of the length fold away.
template <size_t N>
[[gnu::always_inline]] inline size_t seal_fixed(std::span<uint8_t> out) {
  if (out.size() < N + kIcrcSize) return 0;
#if defined(__x86_64__) && defined(__GNUC__)
  const uint32_t crc = kCrcInstruction ? crc_fixed<N>(out.data()) : crc32c(0, out.data(), N);
#else
  const uint32_t crc = crc32c(0, out.data(), N);
#endif
  store32(out.data() + N, crc);
  return N + kIcrcSize;
}

}  // namespace metaroce::wire::detail
