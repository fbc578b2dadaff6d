// UdpTarget (conformance/src/udp_target.cpp) where the UDP driver refuses
// it: a close(conn) refused makes the target lost, which stops the run.
#include "metaroce/conformance/udp_target.hpp"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "../common/sanitizers.hpp"
#include "metaroce/conformance/suite.hpp"

namespace metaroce::conformance {
namespace {

// The process's threads (their Linux ids).
std::set<long> threads() {
  std::set<long> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task"))
    out.insert(std::stol(e.path().filename().string()));
  return out;
}

// Whether thread `tid` is asleep in the kernel (state S: the driver's
// progress thread idle in epoll_wait).
bool asleep(long tid) {
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t name_end = line.rfind(')');
  return name_end != std::string::npos && line.size() > name_end + 2 && line[name_end + 2] == 'S';
}

UdpTarget* g_target = nullptr;
std::atomic<int> g_closed{-1};  // the hook's close(): 1 true, 0 false

// The driver runs no application code on its progress thread but an
// allocator's or a signal's hook, and refuses a close(conn) there: the
// close comes from this signal handler on that thread. It allocates (the
// lost message), which a handler must not where the thread was inside
// malloc; the thread is signalled only while asleep in epoll_wait.
void close_on_this_thread(int) { g_closed = g_target->close(ConnId{0x5}) ? 1 : 0; }

// The refusal makes the target lost, saying why, and it stays so: the run
// stops after the check that met it, its outcome dropped (Target::lost), as
// for the agent of a remote target gone away. Silence let the check wait on
// a close that never began.
TEST(ConformanceUdpTarget, ACloseTheDriverRefusesLosesTheTarget) {
  if (metaroce::test::kThreadSanitized)
    GTEST_SKIP() << "the close comes from a signal handler that allocates, which TSan reports";
  std::string why;
  std::unique_ptr<UdpTarget> t = UdpTarget::open(why);
  if (!t) GTEST_SKIP() << "no UDP target here: " << why;
  EXPECT_EQ(t->lost(), "");
  const std::set<long> before = threads();
  ASSERT_TRUE(t->driver().start_progress_thread());
  long progress = 0;
  for (const long tid : threads())
    if (!before.contains(tid)) progress = tid;
  ASSERT_NE(progress, 0) << "no new thread after start_progress_thread";
  // Generous bounds, polled: the thread settles at once on an idle endpoint.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!asleep(progress) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(asleep(progress)) << "the progress thread never waited";

  g_target = t.get();
  g_closed = -1;
  struct sigaction hook {
  }, old{};
  hook.sa_handler = close_on_this_thread;
  sigemptyset(&hook.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &hook, &old), 0);
  ASSERT_EQ(syscall(SYS_tgkill, getpid(), progress, SIGUSR2), 0);
  while (g_closed == -1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(sigaction(SIGUSR2, &old, nullptr), 0);
  g_target = nullptr;
  ASSERT_EQ(g_closed, 0) << "-1: the hook never ran; 1: the driver closed on its own thread";

  const std::string lost =
      "the UDP driver refused close (conn 0x5), as it does on its progress thread, which this "
      "target never starts";
  EXPECT_EQ(t->lost(), lost);
  ASSERT_TRUE(t->driver().stop_progress_thread());
  // Later calls, taken as they come, leave it lost.
  EXPECT_TRUE(t->close(ConnId{0x5}));
  (void)t->run_for(1'000'000);
  EXPECT_EQ(t->lost(), lost);
  // The run stops at the check that met it, saying why.
  Abort abort;
  const std::vector<Result> results = run([&t] { return std::move(t); }, "PLACE-2", &abort);
  EXPECT_TRUE(results.empty());
  ASSERT_NE(abort.check, nullptr);
  EXPECT_EQ(abort.check->rule, std::string_view("PLACE-2"));
  EXPECT_EQ(abort.why, lost);
}

}  // namespace
}  // namespace metaroce::conformance
