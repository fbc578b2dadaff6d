// Compiled by ctest udp.error-unchecked (must fail) and udp.error-checked
// (must compile): an Error the caller leaves unread is a compile error, as
// the driver's [[nodiscard]] Error makes it; one cast to void is not.
#include "metaroce/udp.hpp"

void post(metaroce::udp::UdpEndpoint& ep, metaroce::ConnId conn, const char* buf, uint32_t lkey) {
#if defined(CASE_unchecked)
  ep.send(conn, 1, buf, 8, lkey);
#else
  (void)ep.send(conn, 1, buf, 8, lkey);  // the test: a deliberate discard compiles
#endif
}
