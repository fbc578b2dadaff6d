// The counting global operator new / delete that tests of "allocates
// nothing" link (the object library metaroce_alloc_counter): every overload
// is replaced, once, here. Link it as an object (an OBJECT library): from a
// static archive the linker takes a member only for a symbol still undefined
// when it reaches it, so whether the replacement took effect would hang on
// link order and on what else the executable names.
//
// Two ways to count:
//   * thread_news(): the calling thread's allocations since it began, for a
//     check of one call that other threads (gtest's, a progress thread's)
//     must not disturb;
//   * Counting: a window over every thread's allocations and releases that
//     records, with backtrace() (no allocation: its buffer is static), the
//     stack of the first allocation inside it, symbolized once it closes.
//     Nothing inside a window should use gtest macros.
#pragma once

#include <cstdint>
#include <string>

namespace metaroce::test::alloc_counter {

// Allocations by the calling thread, every overload of operator new.
uint64_t thread_news() noexcept;

// What one counted window saw.
struct Window {
  uint64_t news = 0;
  uint64_t deletes = 0;
  std::string first_stack;  // symbolized stack of the first allocation, if any
};

// Counts from construction to stop() (or destruction). One at a time.
class Counting {
 public:
  Counting();
  Counting(const Counting&) = delete;
  Counting& operator=(const Counting&) = delete;
  ~Counting();
  Window stop();
};

}  // namespace metaroce::test::alloc_counter
