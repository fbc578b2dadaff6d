// metaroce-bench: shared option structs and the report printer (one JSON
// object with --json, a readable table otherwise).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "metaroce/engine.hpp"

namespace metaroce::bench {

// The n-th WRITE of a stream that cycles through `slots` message-sized
// places of a source and a destination region (wr_id n).
inline SendWr slot_write(const MemoryRegion& src, const MemoryRegion& dst, uint32_t msg,
                         uint64_t slots, uint64_t n) {
  SendWr wr;
  wr.wr_id = n;
  wr.op = WrOpcode::kWrite;
  const uint64_t off = (n % slots) * msg;
  wr.local_addr = src.addr + off;
  wr.length = msg;
  wr.lkey = src.lkey;
  wr.remote_addr = dst.addr + off;
  wr.rkey = dst.rkey;
  return wr;
}

struct EngineOptions {
  uint64_t packets = 2'000'000;
  uint32_t rounds = 10;
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
  // bench/fabric's network in the harness (see harness_bench.cpp): --paths
  // links, `entropies` paths per connection, the UDP driver's engine settings.
  bool fabric = false;
  uint32_t entropies = 16;
  // Print every path state change and retirement of the lossy run to stderr:
  // which rule (PATH-4 timeouts, PATH-5 loss rate), the path's loss rate and
  // RTT then, and how many paths each network path carries afterwards.
  bool trace_paths = false;
  // PATH-8's interval in ms for both endpoints; negative: the engine's default.
  double explore_ms = -1;
};

int run_engine(const EngineOptions& o);
int run_harness(const HarnessOptions& o);

class Report {
 public:
  explicit Report(std::string name) : name_(std::move(name)) {}
  // A figure: three decimals in JSON and text.
  void num(const std::string& key, double v, const std::string& what) {
    rows_.push_back({key, v, std::nullopt, what, Shape::kDecimals});
  }
  // An input, reported as given: at three decimals --loss 0.0004 read
  // "loss":0.0, another experiment than the one run.
  void given(const std::string& key, double v, const std::string& what) {
    rows_.push_back({key, v, std::nullopt, what, Shape::kGiven});
  }
  // A fraction that may lie far below 0.001 (resends per packet): six
  // significant digits, where three decimals read 0.0004 as 0.
  void fraction(const std::string& key, double v, const std::string& what) {
    rows_.push_back({key, v, std::nullopt, what, Shape::kSignificant});
  }
  // An integer reported exactly (a seed): a double holds only 53 bits, so
  // --seed 18446744073709551615 came out as 1.8446744073709552e+19, which
  // names another seed.
  void exact(const std::string& key, uint64_t v, const std::string& what) {
    rows_.push_back({key, static_cast<double>(v), v, what, Shape::kDecimals});
  }
  void print(bool json) const;

 private:
  enum class Shape { kDecimals, kGiven, kSignificant };
  struct Row {
    std::string key;
    double value;
    std::optional<uint64_t> exact;
    std::string what;
    Shape shape;
  };
  std::string name_;
  std::vector<Row> rows_;
};

}  // namespace metaroce::bench
