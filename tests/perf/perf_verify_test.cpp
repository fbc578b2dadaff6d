// --verify finds wrong data: a byte or an immediate planted wrong in one
// message of a round is counted, where it is checked, and makes the run fail.
// Without these, no test could fail if a check were dropped: loopback runs
// deliver every byte intact and only ever see a count of 0.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "pattern.hpp"
#include "perf_pair.hpp"
#include "session.hpp"
#include "traffic.hpp"
#include "verdict.hpp"

namespace metaroce::perf {
namespace {

using namespace std::chrono_literals;

// Sees (and may change) a completion before the side it belongs to does.
using Hook = std::function<void(Completion&)>;

TestParams verified(Op op) {
  TestParams tp;
  tp.op = op;
  tp.size = 4096;
  tp.qd = 4;
  tp.verify = true;
  return tp;
}

// One round of qd messages across the pair, each completion passed through
// its side's hook first.
void run_round(PerfPair& p, const TestParams& tp, Sink& data, Generator& gen, const Hook& at_server,
               const Hook& at_client) {
  ASSERT_TRUE(gen.pump(tp.qd));
  const bool server_completes = tp.op != Op::kRead;  // a READ leaves no completion there
  const auto deadline = Clock::now() + 10s;
  while ((gen.completed < tp.qd || (server_completes && data.next_seq < tp.qd)) &&
         Clock::now() < deadline) {
    p.server->progress();
    p.client->progress();
    Completion c;
    while (p.client->poll_completion(c)) {
      if (at_client) at_client(c);
      EXPECT_TRUE(gen.on_completion(c));
    }
    while (p.server->poll_completion(c)) {
      if (at_server) at_server(c);
      EXPECT_TRUE(data.on_completion(c));
    }
  }
  EXPECT_EQ(gen.completed, tp.qd);
  EXPECT_EQ(gen.errors, 0u);
  if (server_completes) {
    EXPECT_EQ(data.next_seq, tp.qd);
  }
}

// The first completion of `op` the hook sees gets `change`; the rest pass.
Hook first_of(CompletionOp op, std::function<void(Completion&)> change) {
  return [op, change = std::move(change), done = false](Completion& c) mutable {
    if (done || c.op != op || c.status != Status::kOk) return;
    done = true;
    change(c);
  };
}

struct Round {
  PerfPair pair = perf_pair(small_common());
  Sink data;
  Generator gen;
};

// One verified round of `op` with the hooks in place.
void run_verified_round(Round& r, Op op, const Hook& at_server, const Hook& at_client) {
  ASSERT_TRUE(r.pair.cconn.valid() && r.pair.sconn.valid());
  const TestParams tp = verified(op);
  ASSERT_TRUE(aim_generator(r.pair, tp, r.data, r.gen));
  run_round(r.pair, tp, r.data, r.gen, at_server, at_client);
}

TEST(PerfVerify, CleanRoundsCountNothing) {
  for (const Op op : {Op::kWrite, Op::kSend, Op::kRead}) {
    SCOPED_TRACE(static_cast<int>(op));
    Round r;
    run_verified_round(r, op, nullptr, nullptr);
    EXPECT_EQ(r.data.verify_errors, 0u);
    EXPECT_EQ(r.gen.verify_errors, 0u);
  }
}

// A write's data: the byte is wrong in the server's memory when its WRITE_IMM
// notice is checked.
TEST(PerfVerify, AWrongByteInAWrittenSlotIsCounted) {
  Round r;
  run_verified_round(
      r, Op::kWrite,
      first_of(CompletionOp::kRecvWriteImm,
               [&](Completion&) {
                 r.data.mem.data()[size_t{r.data.next_seq % r.data.p.qd} * r.data.p.size + 100] ^=
                     0xff;
               }),
      nullptr);
  EXPECT_EQ(r.data.verify_errors, 1u);
  EXPECT_EQ(r.gen.verify_errors, 0u);
}

// The immediate names the message: one that names another is an error even
// when every byte is right.
TEST(PerfVerify, AWrongImmediateIsCounted) {
  Round r;
  run_verified_round(r, Op::kWrite,
                     first_of(CompletionOp::kRecvWriteImm, [](Completion& c) { c.imm += 1; }),
                     nullptr);
  EXPECT_EQ(r.data.verify_errors, 1u);
}

TEST(PerfVerify, AWrongByteInAReceivedSendIsCounted) {
  Round r;
  run_verified_round(r, Op::kSend,
                     first_of(CompletionOp::kRecv,
                              [&](Completion& c) {
                                const auto i = static_cast<uint32_t>(c.wr_id & 0xffffffff);
                                r.data.rbuf.data()[size_t{i} * r.data.rslot + 7] ^= 0x01;
                              }),
                     nullptr);
  EXPECT_EQ(r.data.verify_errors, 1u);
}

// A SEND that arrives short is wrong though every byte it brought is. Short
// by a whole word: a message's last n % 8 bytes have a tail pattern of their
// own, which a length cut inside a word would also count.
TEST(PerfVerify, AShortSendIsCounted) {
  Round r;
  run_verified_round(
      r, Op::kSend, first_of(CompletionOp::kRecv, [](Completion& c) { c.byte_len -= 8; }), nullptr);
  EXPECT_EQ(r.data.verify_errors, 1u);
}

// A read's data is checked where it lands, at the client.
TEST(PerfVerify, AWrongByteInAReadSlotIsCounted) {
  Round r;
  run_verified_round(r, Op::kRead, nullptr, first_of(CompletionOp::kRead, [&](Completion& c) {
                       r.gen.slot(c.wr_id)[4095] ^= 0x80;
                     }));
  EXPECT_EQ(r.gen.verify_errors, 1u);
  EXPECT_EQ(r.data.verify_errors, 0u);
}

VerifyTally clean_write_tally() {
  VerifyTally t;
  t.verify = true;
  t.op = Op::kWrite;
  t.have_result = true;
  t.server_messages = t.client_completed = 1000;
  return t;
}

TEST(PerfVerdict, ACleanRunPasses) {
  const VerifyTally t = clean_write_tally();
  EXPECT_TRUE(verify_known(t));
  EXPECT_EQ(verify_errors(t), 0u);
  EXPECT_EQ(client_exit_status(false, t), 0);
  EXPECT_EQ(client_exit_status(true, t), kExitTestFailed);
}

// Each count, at either end, reaches the report and fails the run.
TEST(PerfVerdict, EveryCountFailsTheRun) {
  VerifyTally t = clean_write_tally();
  t.server_errors = 3;
  EXPECT_EQ(verify_errors(t), 3u);
  EXPECT_EQ(client_exit_status(false, t), kExitTestFailed);
  t = clean_write_tally();
  t.client_errors = 2;
  EXPECT_EQ(verify_errors(t), 2u);
  EXPECT_EQ(client_exit_status(false, t), kExitTestFailed);
  t = clean_write_tally();
  t.server_messages = 999;  // a message the server never completed
  EXPECT_EQ(verify_errors(t), 1u);
  EXPECT_EQ(client_exit_status(false, t), kExitTestFailed);
  t = clean_write_tally();
  t.bidir = true;
  t.reverse_mismatch = true;
  EXPECT_EQ(verify_errors(t), 1u);
  EXPECT_EQ(client_exit_status(false, t), kExitTestFailed);
}

// Without the server's Result its checks are missing: the count is unknown
// and the run fails, save a read's, whose data this end checks itself.
TEST(PerfVerdict, ALostResultLeavesTheCountUnknown) {
  VerifyTally t = clean_write_tally();
  t.have_result = false;
  t.server_errors = 5;  // stale: never read without a Result
  EXPECT_FALSE(verify_known(t));
  EXPECT_EQ(verify_errors(t), 0u);
  EXPECT_EQ(client_exit_status(false, t), kExitTestFailed);
  t.op = Op::kRead;
  EXPECT_TRUE(verify_known(t));
  t.bidir = true;
  EXPECT_FALSE(verify_known(t));
}

}  // namespace
}  // namespace metaroce::perf
