// metaroce-conform: the conformance suite against the reference engine, in
// process (--target engine) or behind the UDP driver on real sockets
// (--target udp).
//   metaroce-conform [--target engine|udp] [--rule ID] [--json] [--list]
// Exit status 0 when every check run passed, 1 otherwise, 2 on bad options.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "metaroce/conformance/engine_target.hpp"
#include "metaroce/conformance/suite.hpp"
#include "metaroce/conformance/udp_target.hpp"

namespace mc = metaroce::conformance;

int main(int argc, char** argv) {
  CLI::App app{"metaroce-conform: checks an implementation against the MetaRoCE v0.1 spec"};
  std::string rule, which = "engine";
  bool json = false, list = false;
  app.add_option("--target", which, "the implementation under test")
      ->check(CLI::IsMember({"engine", "udp"}));
  app.add_option("--rule", rule, "run only the checks of this rule ID (e.g. PLACE-2)");
  app.add_flag("--json", json, "print one JSON object");
  app.add_flag("--list", list, "list the checks and exit");
  CLI11_PARSE(app, argc, argv);

  if (list) {
    for (const mc::Check& c : mc::checks())
      std::printf("%-14.*s %.*s\n", static_cast<int>(c.rule.size()), c.rule.data(),
                  static_cast<int>(c.title.size()), c.title.data());
    return 0;
  }
  std::string name, why;
  const auto target = [&]() -> std::unique_ptr<mc::Target> {
    std::unique_ptr<mc::Target> t;
    if (which == "udp")
      t = mc::UdpTarget::open(why);
    else
      t = std::make_unique<mc::EngineTarget>();
    if (t) name = t->name();
    return t;
  };
  if (!target()) {
    std::fprintf(stderr, "metaroce-conform: cannot open the %s target: %s\n", which.c_str(),
                 why.c_str());
    return 2;
  }
  const std::vector<mc::Result> results = mc::run(target, rule);
  if (results.empty()) {
    std::fprintf(stderr, "metaroce-conform: no check names rule '%s' (--list shows them)\n",
                 rule.c_str());
    return 2;
  }
  size_t passed = 0, skipped = 0;
  for (const mc::Result& r : results) {
    skipped += r.outcome.skipped;
    passed += r.outcome.passed && !r.outcome.skipped;
  }
  const size_t failed = results.size() - passed - skipped;
  if (json) {
    nlohmann::ordered_json j;
    j["target"] = name;
    j["passed"] = passed;
    j["failed"] = failed;
    j["skipped"] = skipped;
    j["checks"] = nlohmann::json::array();
    for (const mc::Result& r : results)
      j["checks"].push_back({{"rule", r.check->rule},
                             {"title", r.check->title},
                             {"passed", r.outcome.passed},
                             {"skipped", r.outcome.skipped},
                             {"detail", r.outcome.detail}});
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("target: %s\n", name.c_str());
    for (const mc::Result& r : results)
      std::printf("  %-4s %-14.*s %.*s%s%s\n",
                  r.outcome.skipped  ? "skip"
                  : r.outcome.passed ? "ok"
                                     : "FAIL",
                  static_cast<int>(r.check->rule.size()), r.check->rule.data(),
                  static_cast<int>(r.check->title.size()), r.check->title.data(),
                  r.outcome.detail.empty() ? "" : ": ", r.outcome.detail.c_str());
    std::printf("%zu passed, %zu failed, %zu skipped\n", passed, failed, skipped);
  }
  return failed == 0 ? 0 : 1;
}
