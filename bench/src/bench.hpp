// metaroce-bench: shared option structs and the report printer (one JSON
// object with --json, a readable table otherwise).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace metaroce::bench {

struct EngineOptions {
  uint64_t packets = 2'000'000;
  uint32_t connections = 10'000;
  bool json = false;
};

struct HarnessOptions {
  uint32_t paths = 4;
  double loss = 0.0;
  int fail_path = -1;
  uint64_t size_mib = 256;
  uint64_t seed = 1;
  bool json = false;
};

int run_engine(const EngineOptions& o);
int run_harness(const HarnessOptions& o);

class Report {
 public:
  explicit Report(std::string name) : name_(std::move(name)) {}
  void num(const std::string& key, double v, const std::string& what) {
    rows_.push_back({key, v, what});
  }
  void print(bool json) const;

 private:
  struct Row {
    std::string key;
    double value;
    std::string what;
  };
  std::string name_;
  std::vector<Row> rows_;
};

}  // namespace metaroce::bench
