#include "metaroce/sim/progress.hpp"

#include <cstdio>

namespace metaroce::sim {

RateText rate_text(double count, double seconds, double unit, int decimals) {
  RateText r;
  // Also false for a NaN: the line says "-" rather than pass it on.
  if (!(seconds > 0))
    std::snprintf(r.text.data(), r.text.size(), "-");
  else
    std::snprintf(r.text.data(), r.text.size(), "%.*f", decimals, count / seconds / unit);
  return r;
}

}  // namespace metaroce::sim
