// A circular bitmap of W bits indexed by PSN mod W: the receive window
// (receiver) and the acknowledged set (sender).
#pragma once

#include <cstdint>
#include <vector>

namespace metaroce::detail {

inline bool bit_get(const std::vector<uint64_t>& b, uint32_t psn, uint32_t mask) {
  const uint32_t i = psn & mask;
  return (b[i >> 6] >> (i & 63)) & 1;
}
inline void bit_set(std::vector<uint64_t>& b, uint32_t psn, uint32_t mask) {
  const uint32_t i = psn & mask;
  b[i >> 6] |= uint64_t{1} << (i & 63);
}
inline void bit_clear(std::vector<uint64_t>& b, uint32_t psn, uint32_t mask) {
  const uint32_t i = psn & mask;
  b[i >> 6] &= ~(uint64_t{1} << (i & 63));
}
// Bits for PSNs start .. start+63 (bit k <-> start+k).
inline uint64_t bits64(const std::vector<uint64_t>& b, uint32_t start, uint32_t mask) {
  const uint32_t i = start & mask;
  const uint32_t w = i >> 6, sh = i & 63;
  const uint64_t lo = b[w] >> sh;
  if (sh == 0) return lo;
  // The window is a power of two of at least 64 bits, so is its word count:
  // wrap with a mask, not a division.
  const uint64_t hi = b[(w + 1) & (b.size() - 1)] << (64 - sh);
  return lo | hi;
}
// Mask of the n bits from bit `at` on, 1 <= n <= 64 - at: shifts only, no
// test for a whole word as low_bits needs.
inline uint64_t bit_run(uint32_t at, uint32_t n) { return (~uint64_t{0} >> (64 - n)) << at; }
// Mask keeping the first n bits (n may exceed 64).
inline uint64_t low_bits(uint32_t n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

}  // namespace metaroce::detail
