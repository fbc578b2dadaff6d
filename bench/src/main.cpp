// metaroce-bench: the figures the issues ask for, printed by a program.
//   metaroce-bench engine [--json]
//   metaroce-bench harness --paths 4 --loss 0.01 [--fail-path 1] [--json]
//   metaroce-bench harness --fabric --paths 4 --loss 0.05 [--entropies 16] [--json]
// Exit status 2 on a bad option.
#include <CLI/CLI.hpp>

#include "bench.hpp"
#include "common/cli_parse.hpp"
#include "common/number_range.hpp"

int main(int argc, char** argv) {
  CLI::App app{"metaroce-bench: MetaRoCE engine and harness benchmarks"};
  app.require_subcommand(1);
  metaroce::bench::EngineOptions eo;
  auto* engine = app.add_subcommand("engine", "engine cost per packet and bytes per connection");
  engine->add_option("--packets", eo.packets, "data packets timed, over all rounds")
      ->check(metaroce::tools::number_in_range(1000ull, 1ull << 32));
  engine
      ->add_option("--rounds", eo.rounds,
                   "rounds of engine, copies and clock timed back to back; figures are medians")
      ->check(metaroce::tools::number_in_range(1u, 1000u));
  engine->add_option("--connections", eo.connections, "idle connections for the memory figure")
      ->check(metaroce::tools::number_in_range(1u, 1'000'000u));
  engine->add_flag("--json", eo.json, "print one JSON object");

  metaroce::bench::HarnessOptions ho;
  auto* harness =
      app.add_subcommand("harness", "goodput under loss and path failure in the seeded harness");
  harness->add_option("--paths", ho.paths, "network paths")
      ->check(metaroce::tools::number_in_range(1u, uint32_t{metaroce::kMaxPaths}));
  harness->add_option("--loss", ho.loss, "random loss on every path (0..0.5)")
      ->check(metaroce::tools::number_in_range(0.0, 0.5));
  harness->add_option("--fail-path", ho.fail_path, "path that goes down mid-transfer (-1: none)")
      ->check(metaroce::tools::number_in_range(-1, 31));
  harness->add_option("--size-mib", ho.size_mib, "MiB to move")
      ->check(metaroce::tools::number_in_range(1ull, 65536ull));
  harness->add_option("--seed", ho.seed, "seed")->check(metaroce::tools::not_negative());
  auto* fabric = harness->add_flag(
      "--fabric", ho.fabric,
      "bench/fabric's network instead: --paths links of 500 Mbit/s, 400 KB drop-tail "
      "queues, no ECN marking, 50 us one way; endpoints as the UDP driver sets them");
  harness
      ->add_option("--entropies", ho.entropies, "--fabric: paths per connection (entropy values)")
      ->check(metaroce::tools::number_in_range(1u, uint32_t{metaroce::kMaxPaths}))
      ->needs(fabric);  // without it each path is one entropy: the value was ignored
  harness
      ->add_option("--explore-ms", ho.explore_ms,
                   "PATH-8: how often a busy connection moves its slowest path (0: never; "
                   "default: the engine's)")
      ->check(metaroce::tools::number_in_range(0.0, 1e6));
  harness->add_flag("--trace-paths", ho.trace_paths,
                    "print the lossy run's paths per link, path state changes, retirements, "
                    "PATH-8 moves and timeouts to stderr");
  harness->add_flag("--json", ho.json, "print one JSON object");
  if (const auto rc = metaroce::tools::parse_command_line(app, argc, argv)) return *rc;
  if (*engine) return metaroce::bench::run_engine(eo);
  return metaroce::bench::run_harness(ho);
}
