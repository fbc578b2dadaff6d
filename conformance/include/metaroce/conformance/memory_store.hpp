// Memory a target's agent allocated for the checks, by local key, with the
// bounds-checked reads and writes both targets give the checks.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <vector>

namespace metaroce::conformance {

class MemoryStore {
 public:
  // Keeps `mem` (registered by the caller under `lkey`); its bytes do not move.
  void add(uint32_t lkey, std::vector<uint8_t> mem) { regions_[lkey] = std::move(mem); }
  // Whether offset..offset+length lies inside region `lkey`.
  [[nodiscard]] bool holds(uint32_t lkey, uint64_t offset, uint64_t length) const {
    const auto it = regions_.find(lkey);
    return it != regions_.end() && offset <= it->second.size() &&
           length <= it->second.size() - offset;
  }
  // Empty when the range is not inside the region.
  [[nodiscard]] std::vector<uint8_t> read(uint32_t lkey, uint64_t offset, uint64_t length) const {
    if (!holds(lkey, offset, length)) return {};
    const auto from = regions_.at(lkey).begin() + static_cast<long>(offset);
    return {from, from + static_cast<long>(length)};
  }
  // Nothing when the range is not inside the region.
  void write(uint32_t lkey, uint64_t offset, std::span<const uint8_t> bytes) {
    if (!holds(lkey, offset, bytes.size())) return;
    std::memcpy(regions_.at(lkey).data() + offset, bytes.data(), bytes.size());
  }

 private:
  std::map<uint32_t, std::vector<uint8_t>> regions_;
};

}  // namespace metaroce::conformance
