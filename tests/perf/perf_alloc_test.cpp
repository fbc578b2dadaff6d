// metaroce-perf's address handling short of memory: a refusal the client
// reports (kExitNothingRan), never std::bad_alloc out of the tool. This
// executable replaces the global operator new with one that, armed, fails
// every allocation of the calling thread.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>

#include "session.hpp"

namespace {
thread_local bool t_fail = false;
// Not inlined into the operators: GCC's -Wmismatched-new-delete would see
// free() of operator new's pointer.
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
}  // namespace

void* operator new(std::size_t n) {
  if (t_fail) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }

namespace metaroce::perf {
namespace {

// client_local_address with no memory at all: false, `why` the driver's
// out-of-memory words or the refusal's, never std::bad_alloc (it threw out
// of parse_address's explanation and format_address's string, and ended
// metaroce-perf with std::terminate). With memory, the same refusals in
// words.
TEST(PerfAlloc, TheClientsAddressWithNoMemoryIsARefusalNotAThrow) {
  // Built before memory runs short: the caller's strings.
  const std::string bad_port = "127.0.0.1:70000", no_bracket = "[::1",
                    long_peer = "[2001:db8::1234:5678]:5000";
  std::string local, peer, why;
  for (const std::string* addr : {&bad_port, &no_bracket, &long_peer}) {
    bool ok = true, threw = false;
    t_fail = true;
    try {
      ok = client_local_address(*addr, local, peer, why);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    t_fail = false;
    EXPECT_FALSE(threw) << *addr;
    EXPECT_FALSE(ok) << *addr;
    EXPECT_FALSE(why.empty()) << *addr;
  }
  EXPECT_EQ(why, std::string(udp::kOutOfMemoryWords));  // the peer's text found none
  EXPECT_FALSE(client_local_address(bad_port, local, peer, why));
  EXPECT_NE(why.find("70000"), std::string::npos) << why;
  ASSERT_TRUE(client_local_address(long_peer, local, peer, why)) << why;
  EXPECT_EQ(local, "[::]:0");
  EXPECT_EQ(peer, "[2001:db8::1234:5678]:5000");
}

}  // namespace
}  // namespace metaroce::perf
