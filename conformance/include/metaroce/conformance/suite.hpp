// The conformance suite: one scripted check per spec rule (or group of
// rules), each run against a fresh target. Rule IDs are those of
// docs/spec/metaroce-v0.1.md, section 12, whose "how to test" column the
// checks follow.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/conformance/target.hpp"

namespace metaroce::conformance {

struct Outcome {
  bool passed = true;
  std::string detail;    // why it failed, or what was observed
  bool skipped = false;  // the target cannot be checked for this (detail says why)
};

struct Check {
  std::string_view rule;   // e.g. "PLACE-2"; several rules are written "SEQ-4, ACK-3"
  std::string_view title;  // what is checked, in a line
  Outcome (*run)(Target&);
};

// Every check, grouped by topic.
[[nodiscard]] std::span<const Check> checks();

struct Result {
  const Check* check;
  Outcome outcome;
};

// Runs the checks whose rule list names `rule` (all when empty), each on a
// target of its own from `make`.
[[nodiscard]] std::vector<Result> run(const std::function<std::unique_ptr<Target>()>& make,
                                      std::string_view rule = {});

}  // namespace metaroce::conformance
