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
  // Timing that only a simulated clock shows exactly: on a target in real
  // time (Target::simulated_time() false) run() skips the check, saying
  // so, without calling it. Its title ends "(simulated time only)".
  bool simulated_only = false;
};

// Every check, grouped by topic.
[[nodiscard]] std::span<const Check> checks();

// A rule of the spec that no check names, and why (what --rule says when
// asked for it): its test in section 12 is no peer test (codec, engine,
// fabric), or is one the suite does not have yet (`peer_test`;
// conformance/README.md lists those as "Not yet here").
struct Unchecked {
  std::string_view rule;
  bool peer_test;
  std::string_view why;
};
[[nodiscard]] std::span<const Unchecked> unchecked();

struct Result {
  const Check* check;
  Outcome outcome;
};

// Whether run(make, rule) would run a check: `rule` is empty or a check's
// rule list names it.
[[nodiscard]] bool any_check_names(std::string_view rule);
// The entry of unchecked() for `rule`, nullptr when it has none (a rule a
// check names, or no rule of the spec).
[[nodiscard]] const Unchecked* find_unchecked(std::string_view rule);
// Why `u` has no check, in the words --list-unchecked and --rule print:
// "not yet" (the spec names a peer test for it, not here yet) or "no peer
// test".
[[nodiscard]] std::string_view unchecked_kind(const Unchecked& u);
// --rule's refusal of a rule without a check: "no check names rule R
// (KIND): WHY".
[[nodiscard]] std::string unchecked_refusal(const Unchecked& u);

// How much of `rule` the checks verify on a target in real time
// (Target::simulated_time() false: every --target udp or remote): every check
// that names it needs simulated time and skips there (kNone), some do
// (kInPart), or none does (kFull; also a rule no check names, which no
// target verifies: unchecked()).
enum class RealTimeCover { kFull, kInPart, kNone };
[[nodiscard]] RealTimeCover real_time_cover(std::string_view rule);
// The rules the checks name, each once, in the suite's order.
[[nodiscard]] std::vector<std::string_view> checked_rules();

// Why a run stopped before its last check: the target of `check` could not
// be opened (`make` gave nullptr, `opened` false) or was lost during it
// (Target::lost(), in `why`). Either says nothing of the IUT: no result is
// recorded for `check` (it was interrupted), and `not_run` lists the checks
// of the selection after it, which did not run.
struct Abort {
  const Check* check = nullptr;  // nullptr: the run was not aborted
  std::string why;
  bool opened = true;
  std::vector<const Check*> not_run;
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
// The same for the checks that name any of `rules` (all when empty), each
// check once, in the suite's order.
[[nodiscard]] std::vector<Result> run_rules(
    const std::function<std::unique_ptr<Target>()>& make, std::span<const std::string> rules,
    Abort* aborted = nullptr, const std::function<void(const Result&)>& on_result = {});

// What `results` left unverified because their checks need simulated time
// (skipped on a target in real time): `none`, the rules every check of
// which among them skipped so; `in_part`, those some of whose checks did.
// A report that gave only its counts once let a run of LOSS-4 alone read
// "0 passed, 0 failed, 3 skipped", exit 0.
struct Unverified {
  std::vector<std::string> none;
  std::vector<std::string> in_part;
};
[[nodiscard]] Unverified unverified(std::span<const Result> results);

}  // namespace metaroce::conformance
