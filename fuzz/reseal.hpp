// Shared by the fuzz targets that patch fields of a datagram (fuzz_engine,
// fuzz_udp): a patched dst_conn or key would otherwise fail the ICRC check,
// and the fuzzer would never get past it.
#pragma once

#include <cstdint>
#include <span>

#include "metaroce/wire.hpp"

namespace metaroce::fuzz {

// Recomputes the ICRC of a datagram whose base header parses, over the
// headers its opcode has and whatever follows them as payload; leaves
// anything shorter than that, or an ACK with too many SACK words, as it is.
inline void reseal(std::span<uint8_t> d) {
  wire::BaseHeader bh;
  if (wire::decode_base(d, bh) != wire::ParseError::kOk) return;
  uint8_t sack = 0;
  if (bh.opcode == wire::Opcode::kAck) {
    if (d.size() < wire::kBaseHeaderSize + wire::kAckFixedSize + wire::kIcrcSize) return;
    sack = d[wire::kBaseHeaderSize + 15];
    if (sack > wire::kMaxSackWords) return;
  }
  const size_t hlen = wire::header_size(bh.opcode, sack);
  if (d.size() < hlen + wire::kIcrcSize) return;
  (void)wire::seal(d, hlen, d.size() - hlen - wire::kIcrcSize);
}

}  // namespace metaroce::fuzz
