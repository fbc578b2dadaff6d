// The spec's READ_RESP vector (section 3.15, TV-07) as the engine receives it.
// A vector's base header names a connection and PSN of its own, so the
// vector's message header and payload take the place of a live response's,
// under the live base header: what the engine judges by SEQ-5 and TRIM-5
// (the payload's length) and PLACE-4 (msn, offset, msg_len) is the vector's.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"
#include "metaroce/bytes.hpp"
#include "metaroce/wire.hpp"
#include "spec_vectors.hpp"

namespace metaroce::test {
namespace {

std::vector<uint8_t> encoded(std::string_view id) {
  for (const spec_vectors::SpecVector& tv : spec_vectors::all()) {
    if (id != tv.id) continue;
    std::vector<uint8_t> bytes(256);
    bytes.resize(spec_vectors::encode(tv, bytes));
    return bytes;
  }
  ADD_FAILURE() << id << ": no such vector";
  return {};
}

// TV-07 as published before stop 54: 8 payload bytes at offset 8192 of a
// 65536-byte READ, where SEQ-5 and TRIM-5 give 4096 (the mtu).
constexpr std::array<uint8_t, 40> kOldTv07 = {
    0x18, 0x06, 0x00, 0x41, 0x00, 0x00, 0x00, 0x07, 0x80, 0x00, 0x00, 0x00, 0x0a, 0x0b,
    0x0c, 0x0d, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x20, 0x00, 0x00, 0x01, 0x00, 0x00,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x29, 0x73, 0x4b, 0x08};

struct ReadOutcome {
  bool replaced = false;
  bool completed = false;
  Status status = Status::kOk;
  uint64_t bad_length = 0;
  std::vector<uint8_t> read;
};

// READ 0 of one byte, then READ 1 (the vector's msn) of `read_len` bytes of
// 0xee, whose response at the vector's offset is replaced by the vector.
ReadOutcome read_answered_by(const std::vector<uint8_t>& vector, uint32_t read_len, uint64_t seed) {
  ReadOutcome out;
  Loop loop(cfg(seed), cfg(seed + 1));
  auto [a, b] = loop.connect();
  Buf mine(loop.ep(0), read_len, kAccessLocalWrite, 0);
  Buf theirs(loop.ep(1), read_len, kAccessRemoteRead, 0xee);
  std::vector<Completion> done;
  EXPECT_EQ(loop.ep(0).post_send(a, read_wr(mine, theirs.addr(), theirs.mr.rkey, 1, 0)),
            Status::kOk);
  EXPECT_TRUE(loop.run_until_completions(0, 1, done));

  constexpr size_t kHeaders = wire::kBaseHeaderSize + wire::kMessageHeaderSize;
  const uint32_t offset = be::load32(vector.data() + wire::kBaseHeaderSize + 4);
  loop.mutate = [&](int from, std::vector<uint8_t>& d) {
    if (out.replaced || from != 1 || d[1] != static_cast<uint8_t>(wire::Opcode::kReadResp) ||
        be::load32(d.data() + wire::kBaseHeaderSize + 4) != offset)
      return;
    out.replaced = true;
    std::vector<uint8_t> forged(d.begin(), d.begin() + wire::kBaseHeaderSize);
    forged.insert(forged.end(), vector.begin() + wire::kBaseHeaderSize, vector.end());
    const size_t payload = forged.size() - kHeaders - wire::kIcrcSize;
    ASSERT_EQ(wire::seal(forged, kHeaders, payload), forged.size());
    d = forged;
  };
  EXPECT_EQ(loop.ep(0).post_send(a, read_wr(mine, theirs.addr(), theirs.mr.rkey, read_len, 1)),
            Status::kOk);
  done.clear();
  out.completed = loop.run_until_completions(0, 1, done) && !done.empty();
  if (out.completed) out.status = done[0].status;
  out.bad_length = loop.ep(0).endpoint_stats().bad_length;
  out.read = mine.bytes;
  return out;
}

// TV-07 is the last response to TV-06's READ on a connection of the mtu
// TV-12 and TV-13 agree (4096, cfg's): the engine places its 8 bytes and the
// READ completes on it.
TEST(SpecSection3_15Engine, TheReadResponseVectorIsPlaced) {  // SEQ-5, TRIM-5, PLACE-4
  const std::vector<uint8_t> tv06 = encoded("TV-06"), tv07 = encoded("TV-07");
  ASSERT_FALSE(tv06.empty());
  ASSERT_FALSE(tv07.empty());
  ASSERT_EQ(cfg(0).mtu, 4096);
  const uint32_t read_len = be::load32(tv06.data() + wire::kBaseHeaderSize + 8);
  ASSERT_EQ(be::load32(tv07.data() + wire::kBaseHeaderSize + 8), read_len);
  const ReadOutcome r = read_answered_by(tv07, read_len, 5401);
  EXPECT_TRUE(r.replaced);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.status, Status::kOk);
  EXPECT_EQ(r.bad_length, 0u);
  ASSERT_EQ(r.read.size(), 8200u);
  const std::vector<uint8_t> tv07_payload(tv07.end() - wire::kIcrcSize - 8,
                                          tv07.end() - wire::kIcrcSize);
  EXPECT_EQ(std::vector<uint8_t>(r.read.begin() + 8192, r.read.end()), tv07_payload);
  EXPECT_EQ(std::count(r.read.begin(), r.read.begin() + 8192, 0xee), 8192);
}

// The vector published before broke TRIM-5: the engine drops it as a bad
// length, as every receiver must, and the READ completes on the true resend.
TEST(SpecSection3_15Engine, TheOldReadResponseVectorIsDroppedAsABadLength) {  // TRIM-5
  const ReadOutcome r = read_answered_by({kOldTv07.begin(), kOldTv07.end()}, 65536, 5403);
  EXPECT_TRUE(r.replaced);
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.status, Status::kOk);
  EXPECT_EQ(r.bad_length, 1u);
  EXPECT_EQ(std::count(r.read.begin(), r.read.end(), 0xee), 65536);
}

}  // namespace
}  // namespace metaroce::test
