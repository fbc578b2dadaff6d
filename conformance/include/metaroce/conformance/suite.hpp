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

// Whether run(make, rule) would run a check: `rule` is empty or a check's
// rule list names it.
[[nodiscard]] bool any_check_names(std::string_view rule);

// Why a run stopped before its last check: the target of `check` could not
// be opened (`make` gave nullptr) or was lost during it (Target::lost(), in
// `why`). Either says nothing of the IUT: no result is recorded for `check`.
struct Abort {
  const Check* check = nullptr;  // nullptr: the run was not aborted
  std::string why;
};

// Runs the checks whose rule list names `rule` (all when empty), each on a
// target of its own from `make`, and returns the results of those that ran
// to the end. When a target cannot be opened or is lost, the run stops there
// and `*aborted` (if given) says at which check and why. `on_result` (if
// given) sees each result as its check ends: a run against a slow or
// misconfigured target can be followed while it lasts.
[[nodiscard]] std::vector<Result> run(const std::function<std::unique_ptr<Target>()>& make,
                                      std::string_view rule = {}, Abort* aborted = nullptr,
                                      const std::function<void(const Result&)>& on_result = {});

}  // namespace metaroce::conformance
