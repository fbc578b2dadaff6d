// --verify's data pattern: message `seq` is filled with pattern(seq), so a
// byte that lands in the wrong message, the wrong place or not at all shows.
// Its 8-byte words are stored big-endian, so that a pattern written on one
// machine checks on another of the other byte order.
#pragma once

#include <cstddef>
#include <cstdint>

namespace metaroce::perf {

void pattern_fill(uint8_t* p, size_t n, uint64_t seq);
// Bytes that differ from pattern(seq).
uint64_t pattern_check(const uint8_t* p, size_t n, uint64_t seq);
// Fills p with bytes that each differ from pattern(seq): a destination about
// to receive pattern(seq) again, so that every byte that does not arrive fails
// pattern_check.
void pattern_poison(uint8_t* p, size_t n, uint64_t seq);
// The same for a WRITE target slot that the sender reuses every `stride`
// messages: each 8-byte word may also hold a later message's pattern, and
// where a packet boundary (a multiple of `mtu`, the connection's; 0: none)
// falls inside a word, each side of it may hold another's.
uint64_t pattern_check_slot(const uint8_t* p, size_t n, uint64_t seq, uint64_t stride,
                            uint32_t mtu);

}  // namespace metaroce::perf
