// Checks a name function (trace_kind_name, harness::name) over an enum: every
// value up to `last` has a name of its own, and the value past it gets the
// fallback. Trace printers once indexed hand-kept tables that fell behind.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <string_view>

namespace metaroce::test {

template <typename E, typename NameFn>
void expect_each_value_named(E last, NameFn name, std::string_view fallback = "unknown") {
  std::set<std::string_view> seen;
  const auto end = static_cast<int>(last);
  for (int k = 0; k <= end; ++k) {
    const std::string_view n = name(static_cast<E>(k));
    EXPECT_NE(n, fallback) << k;
    EXPECT_TRUE(seen.insert(n).second) << n;
  }
  EXPECT_EQ(std::string_view(name(static_cast<E>(end + 1))), fallback);
}

}  // namespace metaroce::test
