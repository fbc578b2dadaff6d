// metaroce-sim --preset NAME | --config FILE.toml --transport metaroce|spray-nocc|rocev2|irn
//   --seed N [--json] [--pcap LINK --pcap-file F] [--csv DIR --sample-us US --watch-link LINK]
//   [--list-links]
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include "common/cli_parse.hpp"
#include "common/stdout_status.hpp"
#include "metaroce/sim/config_file.hpp"
#include "metaroce/sim/presets.hpp"
#include "metaroce/sim/settings.hpp"

namespace {

constexpr double kMinSampleUs = 0.01;  // --sample-us

int run(int argc, char** argv) {
  using namespace metaroce::sim;
  CLI::App app{"metaroce-sim: packet-level data-center simulator running the MetaRoCE engine"};
  std::string preset_name = "fattree16-perm";
  std::string config_file;
  std::string transport = "metaroce";
  uint64_t seed = 1;
  bool json = false, list = false, no_timing = false, progress = false, quiet = false;
  // Options that are --set keys under a name of their own: the table's range
  // checks (settings.cpp) hold for them too.
  struct Alias {
    const char* option;
    const char* key;
    const char* help;
    double value = 0;
  };
  Alias aliases[] = {
      {"--time-limit-ms", "time_limit_ms", "simulated-time limit (default 1000 ms)"},
      {"--min-rto-us", "recovery.min_rto_us",
       "MetaRoCE's recovery.min_rto (metaroce, spray-nocc; rocev2 and irn keep their own "
       "RTOs); the engine refuses one not above ack_delay_us (10) or not below "
       "recovery.peer_timeout_us (2e6)"},
      {"--paths", "num_paths", "MetaRoCE's num_paths, 1..32 (rocev2 and irn use one path a flow)"},
  };
  bool fabric_ecn = false, no_dcqcn = false, list_links_flag = false, cold = false;
  OutputOptions out;
  std::vector<std::string> settings;
  bool list_settings = false;
  double sample_us = 5;
  // Their defaults named: a run without them was a preset and transport the
  // help did not say.
  app.add_option("--preset", preset_name, "scenario name (--list shows them)")
      ->capture_default_str();
  app.add_option("--config", config_file,
                 "scenario file (TOML: topology, queue, workloads, faults; see docs/sim/README.md)")
      ->excludes(app.get_option("--preset"));
  app.add_option("--transport", transport,
                 "metaroce | spray-nocc | rocev2 (RoCEv2 + DCQCN + PFC) | irn (IRN + DCQCN)")
      ->capture_default_str();
  // CLI11 reads "-1" into an unsigned option as 2^64 - 1 and a negative
  // --trace-flow would mean "off": a leading '-' is refused.
  const CLI::Validator non_negative(
      [](std::string& v) -> std::string {
        if (v.find_first_not_of(" \t") != std::string::npos && v[v.find_first_not_of(" \t")] == '-')
          return "must not be negative, not " + v;
        return {};
      },
      "NON-NEGATIVE");
  // CLI11 saturates a number past its option's type (2^64 - 1 for --seed,
  // 2^63 - 1 for --trace-flow): another seed's run under the seed given, a
  // refusal naming a flow not given.
  const auto at_most = [](uint64_t max) {
    return CLI::Validator(
        [max](std::string& v) -> std::string {
          uint64_t n = 0;
          const char* b = v.data() + std::min(v.size(), v.find_first_not_of(" \t"));
          const auto [end, ec] = std::from_chars(b, v.data() + v.size(), n);
          if (ec == std::errc::result_out_of_range || (ec == std::errc{} && n > max))
            return v + " is out of range (at most " + std::to_string(max) + ")";
          return {};
        },
        "");
  };
  app.add_option("--seed", seed, "RNG seed (same seed => identical output)")
      ->check(non_negative)
      ->check(at_most(UINT64_MAX))
      ->capture_default_str();
  app.add_flag("--json", json, "print a JSON report (with --list or --list-links: a JSON array)");
  app.add_flag("--list", list, "list presets and exit");
  app.add_flag("--no-timing", no_timing,
               "omit wall time, events/s and RSS (byte-identical output)");
  app.add_flag("--progress", progress, "progress on stderr (default when stderr is a terminal)");
  // Together, -q won and --progress was dropped without a word.
  app.add_flag("-q,--quiet", quiet, "no progress, and no --pcap line on stderr")
      ->excludes(app.get_option("--progress"));
  // Typed as the table takes them: --paths read "FLOAT" for a whole number.
  for (Alias& a : aliases) {
    const auto range = setting_range(a.key);
    app.add_option(a.option, a.value, a.help)->type_name(range && range->integer ? "INT" : "FLOAT");
  }
  app.add_flag("--fabric-ecn", fabric_ecn,
               "rocev2/irn: keep the preset's ECN marking (default: DCQCN's 5 KB / 200 KB / 1 %)");
  app.add_flag(
      "--cold", cold,
      "metaroce, spray-nocc: open connections when the workload first needs them (default: a "
      "warm-up establishes them before t = 0)");
  app.add_flag("--no-dcqcn", no_dcqcn, "rocev2/irn: no rate control (no CNPs, line rate)");
  app.add_flag("--list-links", list_links_flag,
               "list the preset's links (edge index, both ends as host:H / sw:S:P) and exit");
  app.add_option("--pcap", out.pcap_link,
                 "capture the packets crossing LINK into a pcap file: E (edge index, as faults "
                 "use), host:H[-up|-down], sw:S:P[-out|-in]");
  app.add_option("--pcap-file", out.pcap_path,
                 "pcap file for --pcap (default PRESET-TRANSPORT.pcap in the current folder, a "
                 "config file's name with '/' and other unsafe characters as '_')");
  app.add_option("--csv", out.csv_dir,
                 "write throughput.csv, queues.csv, paths.csv, fcts.csv and report.json into DIR");
  app.add_option("--sample-us", sample_us, "CSV sample interval in simulated us (default 5)");
  app.add_option("--watch-link", out.watch_link,
                 "link whose queue goes into queues.csv (default: the --pcap link)");
  app.add_option("--csv-flows", out.sampled_flows,
                 "flows whose connection's per-path state goes into paths.csv (default 4)")
      ->check(non_negative);
  app.add_option("--trace-flow", out.trace_flow,
                 "metaroce, spray-nocc: write the engine trace of both ends of flow N (as "
                 "fcts.csv numbers flows) as CSV")
      ->check(non_negative)
      ->check(at_most(INT64_MAX));
  app.add_option(
      "--trace-file", out.trace_path,
      "file for --trace-flow (default PRESET-TRANSPORT-trace-flowN.csv in the current folder)");
  app.add_option("--set", settings,
                 "override a tunable, KEY=VALUE, repeatable (--list-settings shows the keys); "
                 "applied after the preset or config file; a key that --time-limit-ms, --paths "
                 "or --min-rto-us also sets must get the same value from both");
  app.add_flag("--list-settings", list_settings, "list the keys --set takes and exit");
  if (const auto rc = metaroce::tools::parse_command_line(app, argc, argv)) return *rc;

  // An empty name (a script's unset variable) would read as the option not
  // given: --config "" ran the default preset, --csv "" wrote nothing.
  for (const char* o :
       {"--config", "--preset", "--pcap", "--pcap-file", "--csv", "--watch-link", "--trace-file"})
    if (app.count(o) > 0 && app.get_option(o)->as<std::string>().empty()) {
      std::cerr << "metaroce-sim: " << o << ": an empty value\n";
      return metaroce::tools::kExitBadOptions;
    }
  const auto bad_option = [](const std::string& why) {
    std::cerr << "metaroce-sim: " << why << "\n";
    return metaroce::tools::kExitBadOptions;
  };
  // A listing runs nothing: an option of a run given with one was taken and
  // ignored, exit 0 (--list-links --csv D wrote no D; --list --transport foo
  // let the typo pass).
  const std::pair<bool, const char*> listings[] = {
      {list, "--list"}, {list_settings, "--list-settings"}, {list_links_flag, "--list-links"}};
  const char* listing = nullptr;
  for (const auto& [given, name] : listings) {
    if (given && listing != nullptr)
      return bad_option(std::string(listing) + " and " + name + ": give one");
    if (given) listing = name;
  }
  if (listing != nullptr) {
    std::vector<const char*> run_only = {"--pcap",       "--pcap-file",  "--csv",
                                         "--sample-us",  "--watch-link", "--csv-flows",
                                         "--trace-flow", "--trace-file"};
    // --list-links reads the preset or config file and checks the transport
    // and the settings as a run does; the other listings read none of them.
    if (!list_links_flag) {
      run_only.insert(run_only.end(), {"--preset", "--config", "--transport", "--seed",
                                       "--fabric-ecn", "--cold", "--no-dcqcn", "--set"});
      for (const Alias& a : aliases) run_only.push_back(a.option);
    }
    for (const char* o : run_only)
      if (app.count(o) > 0) return bad_option(std::string(o) + " applies to a run, not " + listing);
  }
  // --json was ignored by the listings: a script asking for JSON got text.
  if (list) {
    if (json) {
      std::string s = "[";
      for (const auto& n : preset_names()) s += (s.size() > 1 ? ",\n  \"" : "\n  \"") + n + "\"";
      std::cout << s << "\n]\n";
    } else {
      for (const auto& n : preset_names()) std::cout << n << "\n";
    }
    return 0;
  }
  if (list_settings && json) {
    std::cerr << "metaroce-sim: --json applies to a run, --list and --list-links, not "
                 "--list-settings\n";
    return metaroce::tools::kExitBadOptions;
  }
  if (list_settings) {
    std::cout << settings_help();
    return 0;
  }
  TransportKind tk;
  if (!parse_transport(transport, tk))
    return bad_option("unknown transport '" + transport + "' (metaroce, spray-nocc, rocev2, irn)");
  SimConfig cfg;
  std::vector<std::string> file_keys;  // the file's keys that are --set keys
  if (!config_file.empty()) {
    try {
      cfg = load_config_file(config_file, tk, seed, &file_keys);
    } catch (const ConfigError& e) {
      std::cerr << "metaroce-sim: " << e.what() << "\n";
      return 2;
    }
  } else {
    try {
      cfg = preset(preset_name, tk, seed);
    } catch (const std::exception& e) {
      return bad_option(std::string(e.what()) + " (--list shows the presets)");
    }
  }
  // Flags of some transports only: with another they were ignored, and the
  // run was that of the command line without them.
  const bool baseline = is_baseline(tk);
  for (const char* flag : {"--fabric-ecn", "--no-dcqcn", "--cold"}) {
    const bool for_baselines = std::string(flag) != "--cold";
    if (app.count(flag) > 0 && for_baselines != baseline)
      return bad_option(std::string(flag) + " applies to " +
                        (for_baselines ? "rocev2 and irn" : "metaroce and spray-nocc") + ", not " +
                        transport);
  }
  std::string err;
  // Each setting given, as the user named it, for the warnings below.
  std::vector<std::pair<std::string, std::string>> given;
  // A config file's too: its [queue] pfc_xoff_bytes without pfc = true ran
  // without PFC, and nothing said so where --set did.
  for (const std::string& k : file_keys) given.emplace_back(k, k + " in " + config_file);
  for (const Alias& a : aliases) {
    if (app.count(a.option) == 0) continue;
    if (!apply_setting(cfg, a.key, a.value, err, a.option)) return bad_option(err);
    given.emplace_back(a.key, a.option);
  }
  if (fabric_ecn) cfg.rc.own_ecn = false;
  if (no_dcqcn) cfg.rc.dcqcn = false;
  if (cold) cfg.preconnect = false;
  for (const auto& s : settings) {
    std::string key;
    double value = 0;
    if (!parse_setting(s, key, value, err)) return bad_option(err);
    // Applied after the named options whatever the order, a --set beat
    // one: --set time_limit_ms=0.01 --time-limit-ms 1000 ran 10 us.
    for (const Alias& a : aliases)
      if (key == a.key && app.count(a.option) > 0 && value != a.value) {
        std::ostringstream why;
        why << "--set " << s << " and " << a.option << " " << a.value
            << " set one key to two values: give one";
        return bad_option(why.str());
      }
    if (!apply_setting(cfg, key, value, err)) return bad_option(err);
    given.emplace_back(key, "--set " + key);
  }
  // A setting idle in this run is taken (a sweep gives one --set to all four
  // transports) but named, since the run is the same without it. Judged once
  // all are applied: queue.pfc=1 given after queue.pfc_xoff_bytes makes it act.
  for (const auto& [key, as] : given)
    if (const std::string_view where = setting_idle_in(key, cfg); !where.empty())
      std::cerr << "metaroce-sim: warning: " << as << " changes nothing in this run of "
                << transport << ": it acts only on " << where << "\n";
  // The queue as a whole, as a config file's [queue] is checked: each --set
  // was in range, but ecn_kmin may now be above ecn_kmax.
  if (const std::string e = queue_spec_error(cfg.queue); !e.empty()) return bad_option(e);
  // The engine's fields as a whole, by the engine's own check, as a config
  // file's [cc] and [recovery] are: each --set was within its type, but
  // rto_failures_to_retire 300 or min_rto above max_rto is not a
  // configuration the engine runs as given (it would clamp). The setting
  // named is the last one given of the fields the message names.
  std::vector<std::string> named;
  if (const std::string e = engine_setting_error(cfg, named); !e.empty()) {
    std::string who = "the engine configuration";
    for (auto it = given.rbegin(); it != given.rend(); ++it)
      if (std::find(named.begin(), named.end(), it->first) != named.end()) {
        who = it->second;
        break;
      }
    return bad_option(who + ": " + e);
  }
  if (list_links_flag) {
    std::cout << list_links(cfg.topo, json);
    return 0;
  }
  for (const std::string& w : faults_past_time_limit(cfg))
    std::cerr << "metaroce-sim: warning: " << w << "\n";
  if (const std::string w = flows_past_time_limit(cfg); !w.empty())
    std::cerr << "metaroce-sim: warning: " << w << "\n";
  // nan too; 1e9 us in ps fits 64 bits. Below 10 ns (a 4 KiB packet takes
  // 41 ns at 800 Gbit/s) a sample shows nothing new and the CSV files grow
  // without bound: 1e-6 us wrote a row a picosecond.
  if (!(sample_us >= kMinSampleUs && sample_us <= 1e9)) {
    std::ostringstream why;
    why << "--sample-us: " << sample_us << " is not in [" << kMinSampleUs << ", 1e9]";
    return bad_option(why.str());
  }
  // An option that qualifies another is refused without it: it would be
  // ignored, and the file or column it names never written.
  static constexpr std::pair<const char*, const char*> kNeeds[] = {
      {"--pcap-file", "--pcap"}, {"--sample-us", "--csv"},         {"--watch-link", "--csv"},
      {"--csv-flows", "--csv"},  {"--trace-file", "--trace-flow"},
  };
  for (const auto& [option, needed] : kNeeds)
    if (app.count(option) > 0 && app.count(needed) == 0)
      return bad_option(std::string(option) + " qualifies " + needed + ", which is not given");
  out.sample_interval = SimTime{static_cast<uint64_t>(sample_us * 1e6)};
  if (!out.pcap_link.empty() && out.pcap_path.empty())
    out.pcap_path = default_output_path(cfg.name, transport, ".pcap");
  if (out.trace_flow >= 0 && out.trace_path.empty())
    out.trace_path = default_output_path(cfg.name, transport,
                                         "-trace-flow" + std::to_string(out.trace_flow) + ".csv");
  cfg.output = out;
  cfg.progress = !quiet && (progress || isatty(STDERR_FILENO) != 0);
  std::unique_ptr<Simulation> sim;
  try {
    sim = std::make_unique<Simulation>(std::move(cfg));
  } catch (const std::exception& e) {
    return bad_option(e.what());
  }
  sim->run();
  if (!sim->close_output(err)) {
    std::cerr << "metaroce-sim: " << err << "\n";
    return 2;
  }
  const Report r = sim->report();
  if (!out.csv_dir.empty()) {
    // As close_output checks the CSV files: a report.json not written fails the run.
    const std::string path = out.csv_dir + "/report.json";
    std::ofstream f(path);
    if (!(f << r.to_json(false)).flush()) {
      std::cerr << "metaroce-sim: cannot write " << path << "\n";
      return 2;
    }
  }
  if (!out.pcap_link.empty() && !quiet) {
    LinkRef l;
    std::string e;
    (void)parse_link(sim->net().graph(), out.pcap_link, l, e);
    std::cerr << "pcap: " << sim->output()->pcap_records() << " packets of "
              << link_name(sim->net().graph(), l) << " -> " << out.pcap_path << "\n";
  }
  std::fputs((json ? r.to_json(!no_timing) : r.to_text(!no_timing)).c_str(), stdout);
  return r.flows_completed == r.flows ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  return metaroce::tools::stdout_status(run(argc, argv), "metaroce-sim",
                                        metaroce::tools::kExitBadOptions);
}
