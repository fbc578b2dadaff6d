#include "alloc_counter.hpp"

#include <cxxabi.h>
#include <execinfo.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace {

// Per thread, so that another thread's allocations are not counted against
// the calls under test.
thread_local uint64_t t_news = 0;

std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_news{0};
std::atomic<uint64_t> g_deletes{0};
std::atomic<bool> g_have_stack{false};
constexpr int kMaxFrames = 64;
void* g_stack[kMaxFrames];
int g_frames = 0;
uint64_t g_first_size = 0;
thread_local bool t_in_hook = false;

void note_new(size_t size) {
  ++t_news;
  if (!g_armed.load(std::memory_order_relaxed) || t_in_hook) return;
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (!g_have_stack.exchange(true)) {
    t_in_hook = true;
    g_first_size = size;
    g_frames = backtrace(g_stack, kMaxFrames);
    t_in_hook = false;
  }
}

void note_delete(void* p) {
  if (p != nullptr && g_armed.load(std::memory_order_relaxed) && !t_in_hook)
    g_deletes.fetch_add(1, std::memory_order_relaxed);
}

void* alloc(size_t size) {
  note_new(size);
  return std::malloc(size == 0 ? 1 : size);
}

void* alloc_aligned(size_t size, std::align_val_t al) {
  note_new(size);
  const auto a = static_cast<size_t>(al);
  const size_t rounded = (std::max<size_t>(size, 1) + a - 1) / a * a;
  return std::aligned_alloc(a, rounded);
}

// Not inlined into the operators: GCC's -Wmismatched-new-delete would see
// free() of operator new's pointer.
[[gnu::noinline]] void release(void* p) {
  note_delete(p);
  std::free(p);
}

std::string symbolize() {
  std::string out =
      "first allocation in the window: operator new(" + std::to_string(g_first_size) + ") from\n";
  char** names = backtrace_symbols(g_stack, g_frames);
  for (int i = 0; i < g_frames; ++i) {
    std::string line = names != nullptr ? names[i] : "?";
    // "binary(mangled+0x12) [0x...]": demangle the part in parentheses.
    const size_t open = line.find('('), plus = line.find('+', open);
    if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
      const std::string mangled = line.substr(open + 1, plus - open - 1);
      int status = 0;
      char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
      if (status == 0 && d != nullptr) line.replace(open + 1, plus - open - 1, d);
      std::free(d);
    }
    out += "  #" + std::to_string(i) + " " + line + "\n";
  }
  std::free(names);
  return out;
}

}  // namespace

void* operator new(size_t n) {
  if (void* p = alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n) {
  if (void* p = alloc(n)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, const std::nothrow_t&) noexcept { return alloc(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return alloc(n); }
void* operator new(size_t n, std::align_val_t a) {
  if (void* p = alloc_aligned(n, a)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t n, std::align_val_t a) {
  if (void* p = alloc_aligned(n, a)) return p;
  throw std::bad_alloc();
}
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return alloc_aligned(n, a);
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return alloc_aligned(n, a);
}
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, size_t) noexcept { release(p); }
void operator delete[](void* p, size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }

namespace metaroce::test::alloc_counter {

uint64_t thread_news() noexcept { return t_news; }

Counting::Counting() {
  // backtrace() loads libgcc_s on its first call (which allocates): do it
  // now, outside the window.
  void* warm[4];
  (void)backtrace(warm, 4);
  g_news = 0;
  g_deletes = 0;
  g_have_stack = false;
  g_frames = 0;
  g_armed = true;
}

Window Counting::stop() {
  g_armed = false;
  Window w;
  w.news = g_news.load();
  w.deletes = g_deletes.load();
  if (g_have_stack.load()) w.first_stack = symbolize();
  return w;
}

Counting::~Counting() { g_armed = false; }

}  // namespace metaroce::test::alloc_counter
