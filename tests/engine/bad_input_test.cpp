// Datagrams an endpoint must not act on (spec section 9, BAD-*), fed to
// handle_datagram directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::test {
namespace {

// BAD-8: a data packet naming a live connection but coming from another
// address is dropped and counted: it writes nothing, however good its key.
TEST(BadInput, DataForAConnectionFromAnotherAddressWritesNothing) {
  Loop loop(cfg(4911), cfg(4912));
  auto [a, b] = loop.connect();
  (void)b;
  Buf src(loop.ep(0), 100, 0, 0x5A);
  Buf dst(loop.ep(1), 100, kAccessRemoteWrite, 0xAB);
  std::vector<uint8_t> write;
  loop.drop = [&](int from, const std::vector<uint8_t>& d) {
    if (from == 0 && d[1] == static_cast<uint8_t>(wire::Opcode::kWrite) && write.empty()) write = d;
    return from == 0;
  };
  ASSERT_EQ(loop.ep(0).post_send(a, write_wr(src, dst, 100)), Status::kOk);
  ASSERT_TRUE(loop.run_until([&] { return !write.empty(); }));
  PeerAddr stranger = loop.addr(0);
  stranger.bytes[0] = 'C';
  const uint64_t before = loop.ep(1).endpoint_stats().wrong_peer;
  loop.ep(1).handle_datagram(RxDatagram{stranger, 0, false, write}, loop.now());
  EXPECT_EQ(loop.ep(1).endpoint_stats().wrong_peer, before + 1);
  EXPECT_TRUE(std::all_of(dst.bytes.begin(), dst.bytes.end(), [](uint8_t v) { return v == 0xAB; }));
}

}  // namespace
}  // namespace metaroce::test
