#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "bench.hpp"

namespace metaroce::bench {

namespace {

// Six significant digits: a given input as typed, a small fraction readable.
std::string significant(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

void Report::print(bool json) const {
  if (json) {
    nlohmann::ordered_json j;
    j["bench"] = name_;
    for (const Row& r : rows_) {
      if (r.exact)
        j[r.key] = *r.exact;
      else if (r.shape == Shape::kGiven)
        j[r.key] = r.value;  // written as the shortest text that reads back as it
      else if (r.shape == Shape::kSignificant)
        j[r.key] = std::strtod(significant(r.value).c_str(), nullptr);
      else if (std::floor(r.value) == r.value && std::fabs(r.value) < 9e15)
        j[r.key] = static_cast<int64_t>(r.value);
      else
        j[r.key] = std::round(r.value * 1000.0) / 1000.0;
    }
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("metaroce-bench %s\n", name_.c_str());
  for (const Row& r : rows_) {
    if (r.exact)
      std::printf("  %-32s %14llu   %s\n", r.key.c_str(), static_cast<unsigned long long>(*r.exact),
                  r.what.c_str());
    else if (r.shape != Shape::kDecimals)
      std::printf("  %-32s %14s   %s\n", r.key.c_str(), significant(r.value).c_str(),
                  r.what.c_str());
    else
      std::printf("  %-32s %14.3f   %s\n", r.key.c_str(), r.value, r.what.c_str());
  }
}

}  // namespace metaroce::bench
