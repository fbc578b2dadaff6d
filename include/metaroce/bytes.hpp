// Explicit big-endian loads and stores: how every MetaRoCE component reads
// and writes wire bytes (the engine's codec, the UDP driver's peek at a
// header, the simulator's capture framing, metaroce-perf's control
// messages). One unaligned load or store plus a byte swap per field: the
// codec runs on every packet, and assembling fields a byte at a time cost
// several hundred instructions per data packet. Callers check bounds first.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace metaroce::be {

inline uint16_t swap(uint16_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap16(v);
  return v;
}
inline uint32_t swap(uint32_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap32(v);
  return v;
}
inline uint64_t swap(uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap64(v);
  return v;
}

inline uint16_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return swap(v);
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return swap(v);
}
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return swap(v);
}
inline void store16(uint8_t* p, uint16_t v) {
  v = swap(v);
  std::memcpy(p, &v, sizeof v);
}
inline void store32(uint8_t* p, uint32_t v) {
  v = swap(v);
  std::memcpy(p, &v, sizeof v);
}
inline void store64(uint8_t* p, uint64_t v) {
  v = swap(v);
  std::memcpy(p, &v, sizeof v);
}

}  // namespace metaroce::be
