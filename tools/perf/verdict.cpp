#include "verdict.hpp"

#include "session.hpp"

namespace metaroce::perf {

bool verify_known(const VerifyTally& t) {
  return !t.verify || t.have_result || (t.op == Op::kRead && !t.bidir);
}

uint64_t verify_errors(const VerifyTally& t) {
  const bool messages_differ =
      t.verify && t.have_result && t.op != Op::kRead && t.server_messages != t.client_completed;
  return t.client_errors + (t.have_result ? t.server_errors : 0) + (messages_differ ? 1 : 0) +
         (t.verify && t.reverse_mismatch ? 1 : 0);
}

int client_exit_status(bool failed, const VerifyTally& t) {
  return failed || !t.have_result || verify_errors(t) != 0 || t.reverse_mismatch ? kExitTestFailed
                                                                                 : 0;
}

}  // namespace metaroce::perf
