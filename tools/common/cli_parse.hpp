// Command-line parsing for metaroce-sim, metaroce-conform(-agent),
// metaroce-demo and metaroce-bench (metaroce-perf shares the exit status):
// CLI11's own message, but the exit status those tools document for bad
// options (2) instead of CLI11's error codes (105 ExtrasError, 106
// ConversionError, 108 ..., what CLI11_PARSE returns). --help and --help-all
// still exit 0.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>

namespace metaroce::tools {

inline constexpr int kExitBadOptions = 2;

// Parses argv into `app`. nullopt: go on; otherwise the tool exits with the
// value (0 after --help, kExitBadOptions after a parse error; CLI11 has
// printed the help or the error).
[[nodiscard]] inline std::optional<int> parse_command_line(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == static_cast<int>(CLI::ExitCodes::Success) ? 0 : kExitBadOptions;
  }
  return std::nullopt;
}

}  // namespace metaroce::tools
