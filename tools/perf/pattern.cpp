#include "pattern.hpp"

#include <algorithm>

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

constexpr uint64_t kStep = 0x9e3779b97f4a7c15ull;
// A reused slot's message and the 8 after it (pattern_check_slot).
constexpr int kAlts = 9;

// Byte i of the pattern `base` fills an n-byte message with.
uint8_t pattern_byte(uint64_t base, size_t n, size_t i) {
  const size_t w = i & ~size_t{7};
  if (w + 8 > n) return tail_byte(base, i);
  return static_cast<uint8_t>((base + w * kStep) >> (56 - (i - w) * 8));
}

// Bytes [from, to) as one unit: 0 when one of the patterns holds all of
// them, else how many differ from the first.
uint64_t check_unit(const uint8_t* p, size_t n, size_t from, size_t to,
                    const uint64_t (&base)[kAlts]) {
  for (const uint64_t b : base) {
    size_t j = from;
    while (j < to && p[j] == pattern_byte(b, n, j)) ++j;
    if (j == to) return 0;
  }
  uint64_t bad = 0;
  for (size_t j = from; j < to; ++j) bad += p[j] != pattern_byte(base[0], n, j) ? 1 : 0;
  return bad;
}

}  // namespace

void pattern_fill(uint8_t* p, size_t n, uint64_t seq) {
  const uint64_t base = mix(seq + 1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    be::store64(p + i, base + i * kStep);
  }
  for (; i < n; ++i) p[i] = tail_byte(base, i);
}

uint64_t pattern_check(const uint8_t* p, size_t n, uint64_t seq) {
  const uint64_t base = mix(seq + 1);
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t w = base + i * kStep;
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
// bytes passed, and a tail mixed from several messages did too. A packet
// boundary (a multiple of mtu, which need not be one of 8) splits a word or
// the tail in two, each side of it a unit: the packets of two messages meet
// there, and a word checked whole was a false error.
uint64_t pattern_check_slot(const uint8_t* p, size_t n, uint64_t seq, uint64_t stride,
                            uint32_t mtu) {
  uint64_t base[kAlts];
  for (int a = 0; a < kAlts; ++a) base[a] = mix(seq + uint64_t(a) * stride + 1);
  // The first packet boundary after `i`, or n.
  auto boundary_after = [&](size_t i) {
    return mtu == 0 ? n : std::min(n, (i / mtu + 1) * size_t{mtu});
  };
  uint64_t bad = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t got = be::load64(p + i);
    bool ok = false;
    for (int a = 0; a < kAlts && !ok; ++a) ok = got == base[a] + i * kStep;
    if (ok) continue;
    if (const size_t b = boundary_after(i); b < i + 8) {
      bad += check_unit(p, n, i, b, base) + check_unit(p, n, b, i + 8, base);
      continue;
    }
    const uint64_t diff = got ^ (base[0] + i * kStep);
    for (int b = 0; b < 8; ++b) bad += (diff >> (b * 8) & 0xff) != 0 ? 1 : 0;
  }
  for (size_t to = 0; i < n; i = to) {
    to = boundary_after(i);
    bad += check_unit(p, n, i, to, base);
  }
  return bad;
}

}  // namespace metaroce::perf
