// Named overrides of a scenario's tunables (metaroce-sim --set KEY=VALUE; a
// config file sets every one of them too, KEY at its top or SECTION.KEY as
// KEY in [SECTION], from this one table): the engine's congestion
// control and recovery parameters, the driver's BDP-derived windows and the
// switch queues. They exist for ablations and sensitivity studies: a preset
// stays fixed, and a run says exactly what it changed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/sim/simulation.hpp"

namespace metaroce::sim {

// Applies `key` = `value` to `cfg`. Returns false with a message in `err` for
// an unknown key or a value out of the key's range (or not finite); `cfg` is
// then unchanged. The message names the value as `option` ("--paths", a
// config file's key), or as "--set KEY" when `option` is empty.
[[nodiscard]] bool apply_setting(SimConfig& cfg, std::string_view key, double value,
                                 std::string& err, std::string_view option = {});

// "" for a `value` in [min, max] (and whole, where `integer`); otherwise
// "WHAT: VALUE is not an integer in [MIN, MAX]" ("a value" where not
// `integer`). The one range message of --set, a config file's byte counts
// and a traffic matrix's bytes. long double: a 64-bit count just past a
// bound is still past it (9e18 + 1 is 9e18 as a double).
[[nodiscard]] std::string range_error(std::string_view what, long double value, double min,
                                      double max, bool integer);

// How a key's value is written in a config file: a number, a switch (true
// or false) or a byte count (4096 or "64KiB"). --set takes each as a number
// (a switch 0 or 1, a byte count in bytes).
enum class SettingKind : uint8_t { kReal, kInteger, kSwitch, kBytes };

// The range apply_setting() checks `key`'s value against (min, max, and
// whether it must be whole: every kind but kReal) and its kind; nullopt for
// an unknown key.
struct SettingRange {
  double min = 0, max = 0;
  bool integer = false;
  SettingKind kind = SettingKind::kReal;
};
[[nodiscard]] std::optional<SettingRange> setting_range(std::string_view key);

// The engine's own check of the endpoint configuration `cfg` holds
// (config_error(): "" when every field is in its range), so that --set and
// a config file's [cc] and [recovery] keys are judged by the engine's ranges
// and words. `keys` receives the --set keys of the fields the message names
// ("recovery.min_rto_us" for the engine's recovery.min_rto_ns), first named
// first, so that a caller can say which setting or line is to blame.
[[nodiscard]] std::string engine_setting_error(const SimConfig& cfg,
                                               std::vector<std::string>& keys);

// "KEY=VALUE" as given on a command line, split; VALUE a whole token of a
// decimal number (no hex, no '+', no space before or after, as a config
// file's and a traffic matrix's numbers). False with a message in err.
[[nodiscard]] bool parse_setting(std::string_view assignment, std::string& key, double& value,
                                 std::string& err);
// The same, applied (parse_setting, then apply_setting above).
[[nodiscard]] bool apply_setting(SimConfig& cfg, std::string_view assignment, std::string& err);

// Empty when `key` changes `cfg`'s run (cfg as it will run: transport,
// --fabric-ecn, --no-dcqcn and every other setting applied; an unknown key
// too); otherwise where it acts ("rocev2 and irn without --fabric-ecn", "runs
// with PFC: ..."). Such a setting is still taken, since sweeps give one --set
// to every transport, but it changes nothing: say so.
[[nodiscard]] std::string_view setting_idle_in(std::string_view key, const SimConfig& cfg);

// Every key, in --list-settings order.
[[nodiscard]] std::vector<std::string_view> setting_keys();

// One line per key: name, unit and meaning (metaroce-sim --list-settings).
[[nodiscard]] std::string settings_help();

}  // namespace metaroce::sim
