// metaroce-conform: the conformance suite against the reference engine, in
// process (--target engine), behind the UDP driver on real sockets
// (--target udp), or an implementation at a network address driven by an
// agent (--target remote; conformance/README.md, "The agent protocol").
//   metaroce-conform [--target engine|udp] [--rule ID[,ID...]] [--json] [--list]
//   metaroce-conform --list-unchecked [--target engine|udp|remote]
//   metaroce-conform --target remote --agent HOST:PORT --iut A.B.C.D:PORT
//                    --entropy-base N --entropy-count M [--tester IP] [--stranger IP]
// Exit status 0 when every check passed (or skipped: on a target in real
// time the report then names the rules left unverified), 1 when one failed
// (also when the run stopped after it), 2 on bad options or when the target
// cannot be opened (nothing was checked), 3 when the target was lost during
// the run (an agent gone) and no check had failed: the run stopped, and its
// verdict is not the IUT's.
#include <arpa/inet.h>

#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cli_parse.hpp"
#include "common/number_range.hpp"
#include "common/stdout_status.hpp"
#include "metaroce/conformance/agent_protocol.hpp"
#include "metaroce/conformance/engine_target.hpp"
#include "metaroce/conformance/remote_target.hpp"
#include "metaroce/conformance/suite.hpp"
#include "metaroce/conformance/udp_target.hpp"

namespace mc = metaroce::conformance;

constexpr int kExitTargetLost = 3;
constexpr int kMinWaitUsFloor = 1000;          // --min-wait-us: the least ...
constexpr int kMinWaitUsCeiling = 10'000'000;  // ... and the most (10 s)

namespace {

// The table's and --list's rule column: a longer rule list (LOSS-5, PATH-4,
// SCHED-3) pushes its title on. Scripts cut the table's lines at fixed
// columns (tools/conformance/remote_test.sh): a column as wide as the widest
// list once left them no title to tell a rule's checks apart by.
constexpr int kRuleWidth = 14;

// --rule's IDs, upper-cased and trimmed in place: true when a check names
// each; otherwise says on stderr, for each, whether the spec has the rule
// and why no check names it (mc::unchecked()), or that it has none.
bool rules_checked(std::vector<std::string>& rules) {
  bool ok = true;
  for (std::string& r : rules) {
    const size_t first = r.find_first_not_of(" \t");
    r = first == std::string::npos ? std::string()
                                   : r.substr(first, r.find_last_not_of(" \t") - first + 1);
    for (char& ch : r) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (r.empty()) {
      // An unset shell variable would otherwise run every check.
      std::fprintf(stderr, "metaroce-conform: --rule names no rule (an empty ID)\n");
      ok = false;
    } else if (const mc::Unchecked* u = mc::find_unchecked(r)) {
      std::fprintf(stderr, "metaroce-conform: %s\n", mc::unchecked_refusal(*u).c_str());
      ok = false;
    } else if (!mc::any_check_names(r)) {
      std::fprintf(stderr,
                   "metaroce-conform: %s is no rule of the MetaRoCE v0.1 spec (--list shows the "
                   "checks and their rules, --list-unchecked the rules without one)\n",
                   r.c_str());
      ok = false;
    }
  }
  return ok;
}

// On a target in real time: true unless a --rule ID names a rule every
// check of which needs simulated time, each said on stderr as rules_checked
// says a rule without a check: such a run checked nothing of it, and once
// exited 0 ("0 passed, 0 failed, 3 skipped").
bool real_time_checked(const std::vector<std::string>& rules) {
  bool ok = true;
  for (const std::string& r : rules)
    if (mc::real_time_cover(r) == mc::RealTimeCover::kNone) {
      std::fprintf(stderr,
                   "metaroce-conform: no check verifies rule %s on this target: every check of "
                   "it needs a target with simulated time, and this one runs in real time "
                   "(--list-unchecked --target remote lists such rules)\n",
                   r.c_str());
      ok = false;
    }
  return ok;
}

// What is wrong with --target remote's options, given (empty if nothing).
std::string bad_remote_option(const mc::RemoteOptions& o) {
  std::string host;
  uint16_t port = 0;
  if (!mc::agent::split_host_port(o.agent, host, port))
    return "--agent '" + o.agent + "' is not HOST:PORT (an IPv6 address in brackets: [::1]:7000)";
  if (o.entropy_base == 0) return "--entropy-base 0: not a port (the IUT's first UDP source port)";
  if (o.entropy_count == 0) return "--entropy-count 0: the IUT's entropy block has no port";
  if (uint32_t{o.entropy_base} + o.entropy_count - 1 > 65535)
    return "--entropy-base " + std::to_string(o.entropy_base) + " and --entropy-count " +
           std::to_string(o.entropy_count) + ": the block runs past port 65535";
  for (const auto& [name, ip] :
       {std::pair{"--tester", o.tester_ip}, {"--stranger", o.stranger_ip}}) {
    in6_addr a{};
    if (inet_pton(AF_INET, ip.c_str(), &a) != 1 && inet_pton(AF_INET6, ip.c_str(), &a) != 1)
      return std::string(name) + " '" + ip + "' is not an IPv4 or IPv6 address";
  }
  return {};
}

int run(int argc, char** argv) {
  CLI::App app{"metaroce-conform: checks an implementation against the MetaRoCE v0.1 spec"};
  std::string which = "engine";
  std::vector<std::string> rules;
  bool json = false, list = false, list_unchecked = false;
  mc::RemoteOptions remote;
  app.add_option("--target", which, "the implementation under test")
      ->check(CLI::IsMember({"engine", "udp", "remote"}));
  // Options of --target remote only: with another target they would be
  // ignored, and a vendor who forgot --target would see the engine pass.
  const CLI::Option* const remote_only[] = {
      app.add_option("--agent", remote.agent, "remote: the agent's HOST:PORT (TCP)"),
      app.add_option("--iut", remote.iut,
                     "remote: the A.B.C.D:PORT or [IPV6]:PORT the IUT receives on (UDP)"),
      app.add_option("--entropy-base", remote.entropy_base,
                     "remote: the IUT's first UDP source port (the tester binds the same ports)"),
      app.add_option("--entropy-count", remote.entropy_count,
                     "remote: source ports in the IUT's block (at least 16)"),
      // Below 1 ms a check would blame the IUT for a reply still on its
      // way; 0 or a negative value would not wait at all.
      app.add_option("--min-wait-us", remote.min_wait_us,
                     "remote: the least time the tester waits for the IUT's reply "
                     "(1000 to 10000000)")
          ->check(metaroce::tools::number_in_range(kMinWaitUsFloor, kMinWaitUsCeiling))
          ->capture_default_str(),
      app.add_option("--tester", remote.tester_ip,
                     "remote: the tester's address, of the IUT's family (IPv4 or IPv6)")
          ->capture_default_str(),
      app.add_option("--stranger", remote.stranger_ip,
                     "remote: another local address of that family, unknown to the IUT")
          ->capture_default_str(),
  };
  app.add_option(
         "--rule", rules,
         "run only the checks of these rule IDs (e.g. PLACE-2, or PLACE-2,MR-1; repeatable)")
      ->delimiter(',');
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--list", list, "list the checks and exit");
  app.add_flag("--list-unchecked", list_unchecked,
               "list the spec's rules that no check names, with why, and exit (with --target "
               "udp|remote, also those whose checks run only in simulated time)");
  if (const auto rc = metaroce::tools::parse_command_line(app, argc, argv)) return *rc;

  // The listings print their table and nothing else: --json, --rule or a
  // target's options with them were once ignored (exit 0), even options
  // refused everywhere else.
  if (list || list_unchecked) {
    // --target is one of --list-unchecked too: what a target in real time
    // leaves unverified besides.
    std::vector<const CLI::Option*> run_only = {app.get_option("--rule"), app.get_option("--json")};
    if (list) run_only.push_back(app.get_option("--target"));
    run_only.insert(run_only.end(), std::begin(remote_only), std::end(remote_only));
    for (const CLI::Option* o : run_only)
      if (o->count() > 0) {
        std::fprintf(stderr, "metaroce-conform: %s is an option of a run, not of %s\n",
                     o->get_name().c_str(), list ? "--list" : "--list-unchecked");
        return metaroce::tools::kExitBadOptions;
      }
  }
  if (list) {
    for (const mc::Check& c : mc::checks())
      std::printf("%-*.*s %.*s\n", kRuleWidth, static_cast<int>(c.rule.size()), c.rule.data(),
                  static_cast<int>(c.title.size()), c.title.data());
    return 0;
  }
  if (list_unchecked) {
    for (const mc::Unchecked& u : mc::unchecked()) {
      const std::string_view kind = mc::unchecked_kind(u);
      std::printf("%-8.*s (%.*s) %.*s\n", static_cast<int>(u.rule.size()), u.rule.data(),
                  static_cast<int>(kind.size()), kind.data(), static_cast<int>(u.why.size()),
                  u.why.data());
    }
    if (which != "engine")
      for (const std::string_view r : mc::checked_rules())
        if (const mc::RealTimeCover cover = mc::real_time_cover(r);
            cover != mc::RealTimeCover::kFull)
          std::printf("%-8.*s (%s) %s\n", static_cast<int>(r.size()), r.data(),
                      cover == mc::RealTimeCover::kNone ? "simulated time only" : "in part",
                      cover == mc::RealTimeCover::kNone
                          ? "every check of it needs a target with simulated time and skips on "
                            "this one, which runs in real time: no run here verifies it"
                          : "some checks of it need a target with simulated time and skip on "
                            "this one, which runs in real time; the others run");
    return 0;
  }
  if (which != "remote")
    for (const CLI::Option* o : remote_only)
      if (o->count() > 0) {
        std::fprintf(stderr,
                     "metaroce-conform: %s is an option of --target remote (the target is %s)\n",
                     o->get_name().c_str(), which.c_str());
        return metaroce::tools::kExitBadOptions;
      }
  if (which == "remote") {
    if (remote_only[0]->count() == 0 || remote_only[1]->count() == 0 ||
        remote_only[2]->count() == 0 || remote_only[3]->count() == 0) {
      std::fprintf(stderr,
                   "metaroce-conform: --target remote needs --agent, --iut, --entropy-base and "
                   "--entropy-count\n");
      return metaroce::tools::kExitBadOptions;
    }
    // Each said by name, before the agent is contacted: "needs --agent,
    // ..." was said of options all given, and a --tester that is no
    // address was told as a socket's EINVAL after the agent's hello.
    if (const std::string bad = bad_remote_option(remote); !bad.empty()) {
      std::fprintf(stderr, "metaroce-conform: %s\n", bad.c_str());
      return metaroce::tools::kExitBadOptions;
    }
  }
  // Before the target opens: nothing is checked, and nothing printed. A
  // rule no check names once printed only that, for a rule with a peer
  // test not written yet (ENC-2 was one) as for a typo.
  if (!rules_checked(rules)) return metaroce::tools::kExitBadOptions;
  std::string name, why;
  const auto target = [&]() -> std::unique_ptr<mc::Target> {
    std::unique_ptr<mc::Target> t;
    why.clear();
    if (which == "udp")
      t = mc::UdpTarget::open(why);
    else if (which == "remote")
      t = mc::RemoteTarget::open(remote, why);
    else
      t = std::make_unique<mc::EngineTarget>();
    if (t) name = t->name();
    return t;
  };
  if (std::unique_ptr<mc::Target> first = target(); !first) {
    std::fprintf(stderr, "metaroce-conform: cannot open the %s target: %s\n", which.c_str(),
                 why.c_str());
    return metaroce::tools::kExitBadOptions;
  } else if (which == "remote" && !static_cast<mc::RemoteTarget&>(*first).check_addresses(why)) {
    // A wrong --iut or --entropy-base, said so before any check blames the
    // IUT in the tester's own port numbers.
    std::fprintf(stderr, "metaroce-conform: %s (nothing was checked)\n", why.c_str());
    return metaroce::tools::kExitBadOptions;
  } else if (!first->simulated_time() && !real_time_checked(rules)) {
    return metaroce::tools::kExitBadOptions;
  }
  // The table's lines go out as their checks end (a run against a real IUT
  // lasts; one against a wrong --iut, every check waiting out its replies,
  // half an hour): it once printed nothing until the run was over.
  const auto line = [](const mc::Result& r) {
    std::printf("  %-4s %-*.*s %.*s%s%s\n",
                r.outcome.skipped  ? "skip"
                : r.outcome.passed ? "ok"
                                   : "FAIL",
                kRuleWidth, static_cast<int>(r.check->rule.size()), r.check->rule.data(),
                static_cast<int>(r.check->title.size()), r.check->title.data(),
                r.outcome.detail.empty() ? "" : ": ", r.outcome.detail.c_str());
    std::fflush(stdout);
  };
  const bool table = !json;
  if (table) {
    std::printf("target: %s\n", name.c_str());
    std::fflush(stdout);
  }
  mc::Abort abort;
  const std::vector<mc::Result> results = mc::run_rules(
      target, rules, &abort, table ? std::function<void(const mc::Result&)>(line) : nullptr);
  // Why the run stopped early: no verdict on the check that was running,
  // nor on those after it.
  std::string stopped;
  if (abort.check != nullptr) {
    stopped = !abort.opened ? "the target could not be opened: " + why
                            : (which == "remote" ? "the agent" : "the target") +
                                  std::string(" was lost: ") + abort.why;
    std::fprintf(stderr, "metaroce-conform: stopped during check %.*s (%zu checks done): %s\n",
                 static_cast<int>(abort.check->rule.size()), abort.check->rule.data(),
                 results.size(), stopped.c_str());
  }
  size_t passed = 0, skipped = 0;
  for (const mc::Result& r : results) {
    skipped += r.outcome.skipped;
    passed += r.outcome.passed && !r.outcome.skipped;
  }
  const size_t failed = results.size() - passed - skipped;
  const mc::Unverified unverified = mc::unverified(results);
  if (json) {
    nlohmann::ordered_json j;
    j["target"] = name;
    j["passed"] = passed;
    j["failed"] = failed;
    j["skipped"] = skipped;
    j["interrupted"] = abort.check != nullptr ? 1 : 0;
    j["not_run"] = abort.not_run.size();
    if (abort.check != nullptr)
      j["stopped"] = {{"check", abort.check->rule},
                      {"title", abort.check->title},
                      {"checks_done", results.size()},
                      {"reason", stopped}};
    j["unverified_rules"] = unverified.none;
    j["rules_verified_in_part"] = unverified.in_part;
    j["checks"] = nlohmann::json::array();
    const auto add = [&j](const mc::Check& c, const char* result, const std::string& detail) {
      j["checks"].push_back(
          {{"rule", c.rule}, {"title", c.title}, {"result", result}, {"detail", detail}});
    };
    for (const mc::Result& r : results)
      add(*r.check,
          r.outcome.skipped  ? "skipped"
          : r.outcome.passed ? "passed"
                             : "failed",
          r.outcome.detail);
    if (abort.check != nullptr) add(*abort.check, "interrupted", stopped);
    for (const mc::Check* c : abort.not_run) add(*c, "not run", "");
    // Replaced, not thrown: text from an agent that is not UTF-8 once
    // aborted the run here, and its report was lost.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    if (abort.check != nullptr)
      std::printf("  STOP %-*.*s %.*s: interrupted: %s\n", kRuleWidth,
                  static_cast<int>(abort.check->rule.size()), abort.check->rule.data(),
                  static_cast<int>(abort.check->title.size()), abort.check->title.data(),
                  stopped.c_str());
    std::printf("%zu passed, %zu failed, %zu skipped", passed, failed, skipped);
    if (abort.check != nullptr)
      std::printf("; the run STOPPED: 1 check interrupted, %zu not run", abort.not_run.size());
    std::printf("\n");
    // Said after the counts, which alone read as a verdict on every rule:
    // exit 0 means no check failed, not that every rule was verified.
    const auto say = [](const char* what, const std::vector<std::string>& ids) {
      if (ids.empty()) return;
      std::printf("%s:", what);
      for (size_t i = 0; i < ids.size(); ++i)
        std::printf("%s %s", i == 0 ? "" : ",", ids[i].c_str());
      std::printf("\n");
    };
    say("NOT verified on this target (their checks need simulated time)", unverified.none);
    say("verified in part on this target (some of their checks need simulated time)",
        unverified.in_part);
  }
  // A check failed before the stop is a verdict all the same: it outranks
  // the run's being incomplete (a CI job taking 3 for "infrastructure,
  // retry" once hid it).
  if (failed != 0) return 1;
  return abort.check != nullptr ? kExitTargetLost : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return metaroce::tools::stdout_status(run(argc, argv), "metaroce-conform",
                                        metaroce::tools::kExitBadOptions);
}
