// The codec's big-endian loads and stores: the public ones
// (metaroce/bytes.hpp), under the names the codec has always used.
#pragma once

#include "metaroce/bytes.hpp"

namespace metaroce::wire::detail {

using be::load16;
using be::load32;
using be::load64;
using be::store16;
using be::store32;
using be::store64;

}  // namespace metaroce::wire::detail
