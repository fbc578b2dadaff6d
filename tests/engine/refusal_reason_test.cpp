// The reasons behind kInvalidArgument (region_problem, send_wr_problem,
// shared_recv_problem): a driver prints them in its errors, so each must be
// given exactly where its call refuses, field by field, and name the field.
// A driver that checked the rules itself had drifted from the engine's.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

// The reason is given exactly when the call's status is kInvalidArgument,
// and names `field` (empty: the arguments pass).
::testing::AssertionResult agrees(const char* reason, Status s, const std::string& field) {
  if ((reason != nullptr) != (s == Status::kInvalidArgument))
    return ::testing::AssertionFailure()
           << "reason " << (reason ? reason : "(none)") << " but status " << status_name(s);
  if (field.empty() != (reason == nullptr))
    return ::testing::AssertionFailure()
           << "expected " << (field.empty() ? "no reason" : "a reason naming " + field) << ", got "
           << (reason ? reason : "(none)");
  if (reason != nullptr && std::strstr(reason, field.c_str()) != reason)
    return ::testing::AssertionFailure()
           << "reason does not start with " << field << ": " << reason;
  return ::testing::AssertionSuccess();
}

TEST(RefusalReason, RegionProblemIsGivenExactlyWhereRegistrationIsRefused) {  // MR-3, MR-4
  Endpoint ep(cfg(541));
  uint8_t bytes[64] = {};
  void* top = reinterpret_cast<void*>(UINTPTR_MAX - 100);
  struct Case {
    const void* addr;
    size_t length;
    uint64_t base;
    uint32_t access;
    const char* field;
  };
  const Case cases[] = {
      {bytes, sizeof bytes, 0, kAccessLocalWrite, ""},
      {bytes, sizeof bytes, reinterpret_cast<uint64_t>(bytes), kAccessKnown, ""},
      {nullptr, sizeof bytes, 0, 0, "addr"},
      {bytes, 0, 0, 0, "length"},
      {bytes, sizeof bytes, 0, 0x80, "access"},
      {bytes, sizeof bytes, 0, kAccessKnown + 1, "access"},
      {bytes, sizeof bytes, UINT64_MAX - sizeof bytes + 1, 0, ""},  // the last name is 2^64 - 1
      {bytes, sizeof bytes, UINT64_MAX - sizeof bytes + 2, 0, "base + length - 1"},
      {top, 101, 0, 0, ""},  // the last byte is the top of the address space
      {top, 102, 0, 0, "addr + length - 1"},
      {bytes, SIZE_MAX, 0, 0, "addr + length - 1"},
  };
  for (const Case& c : cases) {
    MemoryRegion mr;
    const Status s =
        ep.register_memory_at(const_cast<void*>(c.addr), c.length, c.base, c.access, mr);
    EXPECT_TRUE(agrees(region_problem(c.addr, c.length, c.base, c.access), s, c.field))
        << "addr " << c.addr << " length " << c.length << " base " << c.base << " access "
        << c.access;
  }
}

TEST(RefusalReason, SendWrProblemIsGivenExactlyWherePostSendRefuses) {  // SEQ-5
  Loop loop(cfg(542), cfg(543));
  auto [a, b] = loop.connect();
  Buf src(loop.ep(0), 4096, kAccessLocalWrite);
  const SendWr good = write_wr(src, src, 100);
  struct Case {
    void (*change)(SendWr&);
    const char* field;
  };
  const Case cases[] = {
      {[](SendWr&) {}, ""},
      {[](SendWr& w) { w.op = WrOpcode::kRead; }, ""},
      {[](SendWr& w) { w.op = static_cast<WrOpcode>(5); }, "op"},
      {[](SendWr& w) { w.op = static_cast<WrOpcode>(255); }, "op"},
      // 2^31 passes this check; the memory, too short, is judged next.
      {[](SendWr& w) { w.length = kMaxMessageLength; }, ""},
      {[](SendWr& w) { w.length = kMaxMessageLength + 1; }, "length"},
      {[](SendWr& w) { w.length = UINT32_MAX; }, "length"},
      {[](SendWr& w) { w.flags = kSendUnsignaled; }, ""},
      {[](SendWr& w) { w.flags = 0x2; }, "flags"},
      {[](SendWr& w) { w.flags = 0x80 | kSendUnsignaled; }, "flags"},
  };
  for (const Case& c : cases) {
    SendWr wr = good;
    c.change(wr);
    EXPECT_TRUE(agrees(send_wr_problem(wr), loop.ep(0).post_send(a, wr), c.field))
        << "op " << static_cast<unsigned>(wr.op) << " length " << wr.length << " flags "
        << static_cast<unsigned>(wr.flags);
  }
}

TEST(RefusalReason, SharedRecvProblemIsGivenExactlyWherePostSharedRecvRefuses) {  // PLACE-6
  for (const uint32_t depth : {0u, 1u, 8u}) {
    EndpointConfig c = cfg(544);
    c.shared_rq_depth = depth;
    Endpoint ep(c);
    EXPECT_TRUE(agrees(shared_recv_problem(ep.config()), ep.post_shared_recv(RecvWr{}),
                       depth == 0 ? "shared_rq_depth" : ""))
        << "shared_rq_depth " << depth;
  }
}

}  // namespace
}  // namespace metaroce::test
