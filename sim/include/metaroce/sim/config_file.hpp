// Custom scenarios from a TOML file (metaroce-sim --config FILE.toml): the
// topology, queues, workloads and faults that a preset hard-codes. The format
// is described in docs/sim/README.md ("Config files"); an example is
// docs/sim/examples/leafspine-mixed.toml.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "metaroce/sim/simulation.hpp"

namespace metaroce::sim {

// A bad config: the message starts with "FILE:LINE:COLUMN: " and names the key.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses `text` (named `source` in messages). Relative traffic-matrix paths
// are taken from `base_dir`. The seed draws every random choice (permutation,
// incast senders, ring order, background arrivals). Throws ConfigError.
// `given`, if not null, receives the file's keys that are also --set keys
// ("queue.pfc_xoff_bytes", "reroute_us"), for setting_idle_in(): a key
// that changes nothing in the run is named, as its --set is.
[[nodiscard]] SimConfig parse_config(std::string_view text, const std::string& source,
                                     const std::string& base_dir, TransportKind transport,
                                     uint64_t seed, std::vector<std::string>* given = nullptr);
// Reads and parses a file (matrix paths relative to the file's folder).
[[nodiscard]] SimConfig load_config_file(const std::string& path, TransportKind transport,
                                         uint64_t seed, std::vector<std::string>* given = nullptr);

}  // namespace metaroce::sim
