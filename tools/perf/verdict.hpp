// The client's verdict on a run's data: the verify count it reports and its
// exit status, from the counts both ends gathered. Kept apart from the client's
// run so that a test can plant a count and see the run fail: with a transport
// that delivers intact data, no end-to-end run ever exercises a non-zero count.
#pragma once

#include <cstdint>

#include "control.hpp"

namespace metaroce::perf {

struct VerifyTally {
  bool verify = false;  // --verify
  Op op = Op::kWrite;
  bool bidir = false;
  bool have_result = false;       // the server's Result arrived
  uint64_t client_errors = 0;     // this end's own checks: its READs, its reverse sink
  uint64_t server_errors = 0;     // the server's checks, from its Result
  uint64_t server_messages = 0;   // the messages the server completed, from its Result
  uint64_t client_completed = 0;  // the messages this end completed
  bool reverse_mismatch = false;  // --bidir: reverse messages seen here != completed there
};

// Whether the count covers every check: without the server's Result its checks
// are missing (a write's or send's data, the reverse load's), and the count is
// unknown rather than 0. A read's data this end checks itself.
[[nodiscard]] bool verify_known(const VerifyTally& t);

// Every byte found wrong at either end, plus one for a data message the server
// completed a different number of times than this end, and one for a reverse
// load whose message counts disagree.
[[nodiscard]] uint64_t verify_errors(const VerifyTally& t);

// 0, or kExitTestFailed when the run failed, the server's Result never came, or
// any data was found wrong.
[[nodiscard]] int client_exit_status(bool failed, const VerifyTally& t);

}  // namespace metaroce::perf
