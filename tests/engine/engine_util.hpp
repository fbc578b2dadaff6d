// Helpers shared by the engine unit tests: endpoint settings, registered
// buffers, payload patterns and the work requests most tests post.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "loop.hpp"

namespace metaroce::test {

inline EndpointConfig cfg(uint64_t seed) {
  EndpointConfig c;
  c.seed = seed;
  c.num_paths = 4;
  return c;
}

struct Buf {
  std::vector<uint8_t> bytes;
  MemoryRegion mr;
  Buf(Endpoint& ep, size_t n, uint32_t access, uint8_t fill = 0) : bytes(n, fill) {
    EXPECT_EQ(ep.register_memory(bytes.data(), n, access, mr), Status::kOk);
  }
  uint64_t addr(size_t off = 0) const { return mr.addr + off; }
};

inline void pattern(std::vector<uint8_t>& v, uint8_t seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 9));
}

inline SendWr write_wr(const Buf& src, const Buf& dst, uint32_t len, uint64_t id = 1,
                       size_t dst_off = 0) {
  SendWr wr;
  wr.wr_id = id;
  wr.op = WrOpcode::kWrite;
  wr.local_addr = src.addr();
  wr.length = len;
  wr.lkey = src.mr.lkey;
  wr.remote_addr = dst.addr(dst_off);
  wr.rkey = dst.mr.rkey;
  return wr;
}

// One-packet WRITEs, one at a time, so that the paths have RTT samples before
// the case under test. False if one did not complete.
inline bool warm_up_paths(Loop& loop, ConnId a, const Buf& src, const Buf& dst,
                          uint64_t writes = 8) {
  for (uint64_t i = 0; i < writes; ++i) {
    if (loop.ep(0).post_send(a, write_wr(src, dst, 4096, i)) != Status::kOk) return false;
    std::vector<Completion> done;
    if (!loop.run_until_completions(0, 1, done)) return false;
  }
  return true;
}

}  // namespace metaroce::test
