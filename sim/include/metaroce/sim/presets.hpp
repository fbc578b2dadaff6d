// Named scenarios (tools/sim and the tests); the table is sim/src/presets.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "metaroce/sim/simulation.hpp"

namespace metaroce::sim {

[[nodiscard]] std::vector<std::string> preset_names();
// Throws std::invalid_argument for an unknown name.
[[nodiscard]] SimConfig preset(const std::string& name, TransportKind transport, uint64_t seed);

}  // namespace metaroce::sim
