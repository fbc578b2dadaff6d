// A CLI11 check for a number within bounds. CLI::Range answers "Value 1k not
// in range 1 to 65535" for a value that is no number at all, and the same for
// 2.5 where only whole numbers are taken, which sends the user looking for a
// bound instead of a typo; this check says which of the three it was.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <sstream>
#include <string>
#include <type_traits>

namespace metaroce::tools {

// Bounds are inclusive. T is the type the value is read as: an integer type
// refuses fractions, an unsigned one reads "-1" as out of range.
template <typename T>
[[nodiscard]] CLI::Validator number_in_range(T min_value, T max_value) {
  static_assert(std::is_arithmetic_v<T>);
  const std::string kind = std::is_integral_v<T> ? "whole number" : "number";
  std::ostringstream text;
  text << min_value << " to " << max_value;
  const std::string bounds = text.str();
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        T value{};
        if (!CLI::detail::lexical_cast(input, value)) {
          long double as_real = 0;
          const bool numeric = CLI::detail::lexical_cast(input, as_real);
          if (!numeric) {
            return "Value " + input + " is not a " + kind + " (expected " + bounds + ")";
          }
          if (std::is_integral_v<T> &&
              !(std::isfinite(as_real) && std::floor(as_real) == as_real)) {
            return "Value " + input + " is not a whole number (expected " + bounds + ")";
          }
          // 1e3 for a count: a number in range, in a form the type does not read.
          if (as_real >= static_cast<long double>(min_value) &&
              as_real <= static_cast<long double>(max_value)) {
            return "Value " + input + " must be written in plain digits (expected " + bounds + ")";
          }
          // A negative value for an unsigned option, or one past the type.
          return "Value " + input + " not in range " + bounds;
        }
        // Written so that a NaN, which compares false both ways, is refused.
        if (!(value >= min_value && value <= max_value)) {
          return "Value " + input + " not in range " + bounds;
        }
        return std::string{};
      },
      std::string(CLI::detail::type_name<T>()) + " in " + bounds);
}

// A check for a seed or other value that takes the whole of uint64_t, where
// number_in_range cannot catch a negative: CLI11 reads "-1" into a uint64_t as
// 2^64 - 1, which is in range (`metaroce-bench harness --seed -1` ran with
// that seed and reported it as 1.8446744073709552e+19).
[[nodiscard]] inline CLI::Validator not_negative() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        const auto first = input.find_first_not_of(" \t");
        if (first != std::string::npos && input[first] == '-')
          return "Value " + input + " is negative (expected 0 to 18446744073709551615)";
        return std::string{};
      },
      "NON-NEGATIVE");
}

}  // namespace metaroce::tools
