// Explicit big-endian loads and stores; the only way the codec touches bytes.
// One unaligned load or store plus a byte swap per field: the codec runs on
// every packet, and assembling fields a byte at a time cost several hundred
// instructions per data packet.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace metaroce::wire::detail {

inline uint16_t to_be(uint16_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap16(v);
  return v;
}
inline uint32_t to_be(uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap32(v);
  return v;
}
inline uint64_t to_be(uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap64(v);
  return v;
}

inline uint16_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return to_be(v);
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return to_be(v);
}
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return to_be(v);
}
inline void store16(uint8_t* p, uint16_t v) {
  v = to_be(v);
  std::memcpy(p, &v, sizeof v);
}
inline void store32(uint8_t* p, uint32_t v) {
  v = to_be(v);
  std::memcpy(p, &v, sizeof v);
}
inline void store64(uint8_t* p, uint64_t v) {
  v = to_be(v);
  std::memcpy(p, &v, sizeof v);
}

}  // namespace metaroce::wire::detail
