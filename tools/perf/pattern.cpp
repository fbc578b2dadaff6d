#include "pattern.hpp"

#include "metaroce/bytes.hpp"

namespace metaroce::perf {
namespace {

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

// Byte i of the last n % 8, which fill no whole word.
uint8_t tail_byte(uint64_t base, size_t i) {
  return static_cast<uint8_t>((base >> (i & 7) * 8) + i);
}

}  // namespace

void pattern_fill(uint8_t* p, size_t n, uint64_t seq) {
  const uint64_t base = mix(seq + 1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    be::store64(p + i, base + i * 0x9e3779b97f4a7c15ull);
  }
  for (; i < n; ++i) p[i] = tail_byte(base, i);
}

uint64_t pattern_check(const uint8_t* p, size_t n, uint64_t seq) {
  const uint64_t base = mix(seq + 1);
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = base + i * 0x9e3779b97f4a7c15ull;
    const uint64_t got = be::load64(p + i);
    if (got != w) {
      for (int b = 0; b < 8; ++b) bad += ((got ^ w) >> (b * 8) & 0xff) != 0 ? 1 : 0;
    }
  }
  for (; i < n; ++i) bad += p[i] != tail_byte(base, i) ? 1 : 0;
  return bad;
}

void pattern_poison(uint8_t* p, size_t n, uint64_t seq) {
  pattern_fill(p, n, seq);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(~p[i]);
}

// For a WRITE target slot: by the time the receiver sees message seq's
// completion, the sender may legitimately have reused the slot for seq +
// stride, seq + 2 stride ... (its completion for seq only needs the ACK, which
// can leave before the receiving application polls). Each 8-byte word must
// equal the pattern of seq or of one of those later messages, and so must
// the tail (the last n % 8 bytes) as a whole, as a word does. Taken byte by
// byte, each could match any of the 9 patterns: about 3 % of corrupted tail
// bytes passed, and a tail mixed from several messages did too.
uint64_t pattern_check_slot(const uint8_t* p, size_t n, uint64_t seq, uint64_t stride) {
  constexpr int kAlts = 8;
  uint64_t base[kAlts + 1];
  for (int a = 0; a <= kAlts; ++a) base[a] = mix(seq + uint64_t(a) * stride + 1);
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t got = be::load64(p + i);
    if (got == base[0] + i * 0x9e3779b97f4a7c15ull) continue;
    bool ok = false;
    for (int a = 1; a <= kAlts && !ok; ++a) ok = got == base[a] + i * 0x9e3779b97f4a7c15ull;
    if (!ok) {
      const uint64_t diff = got ^ (base[0] + i * 0x9e3779b97f4a7c15ull);
      for (int b = 0; b < 8; ++b) bad += (diff >> (b * 8) & 0xff) != 0 ? 1 : 0;
    }
  }
  const size_t tail = i;
  for (int a = 0; a <= kAlts; ++a) {
    size_t j = tail;
    while (j < n && p[j] == tail_byte(base[a], j)) ++j;
    if (j == n) return bad;
  }
  for (; i < n; ++i) bad += p[i] != tail_byte(base[0], i) ? 1 : 0;
  return bad;
}

}  // namespace metaroce::perf
