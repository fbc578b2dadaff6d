// CONN-2 and CONN-3 where a requester sends more CONNECT_REQs than the
// config's connect_attempts (Endpoint::connect's `attempts`, what the UDP
// driver asks for a connect's whole timeout).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "engine_util.hpp"
#include "loop.hpp"

namespace metaroce::test {
namespace {

constexpr uint8_t kConnectReq = 0x20;

// CONN-3: a responder whose application closed an accepted connection at
// once, its ACCEPT and DISCONNECTs lost, must not open a second connection
// for the requester's later repeats of the same request. A requester given
// 1,000 requests (10 s) still sends them long after the 80 ms
// (connect_attempts x connect_retry) for which the responder remembered the
// request it had answered: it accepted the same request again, a second
// connection its application never asked for, which the requester then took
// for the one it connected.
TEST(ConnectBudget, ARequesterWithMoreRequestsOpensNoSecondConnectionAtAResponderThatClosed) {
  Loop loop(cfg(4301), cfg(4302));
  bool responder_heard = false;  // every datagram from the responder lost until then
  loop.drop = [&](int from, const std::vector<uint8_t>&) { return from == 1 && !responder_heard; };
  uint32_t requests = 0;
  loop.on_sent = [&](int from, const TxDatagram&, const std::vector<uint8_t>& d) {
    if (from == 0 && d.size() > 1 && d[1] == kConnectReq) ++requests;
  };
  ConnId a;
  ASSERT_EQ(loop.ep(0).connect(loop.addr(1), loop.now(), a, 0, 1000), Status::kOk);
  int accepted = 0;
  ConnId b;
  ASSERT_TRUE(loop.run_until([&] {
    Event ev;
    while (loop.ep(1).poll_event(ev))
      if (ev.kind == EventKind::kAccepted) {
        ++accepted;
        b = ev.conn;
      }
    return accepted > 0;
  }));
  loop.ep(1).close(b, loop.now());
  // Runs `ns`, counting the connections the responder accepts.
  auto count_accepts_for = [&](uint64_t ns) {
    loop.run_until(
        [&] {
          Event ev;
          while (loop.ep(1).poll_event(ev))
            if (ev.kind == EventKind::kAccepted) ++accepted;
          return false;
        },
        ns);
  };
  // 500 ms of the requester's repeats, the responder's answers all lost.
  count_accepts_for(500'000'000);
  EXPECT_GE(requests, 40u);  // the repeats went on, past the responder's 80 ms
  EXPECT_EQ(accepted, 1);
  // The way back heals: the requester's connection is not established with
  // a connection the responder's application never took.
  responder_heard = true;
  count_accepts_for(200'000'000);
  EXPECT_EQ(accepted, 1);
  EXPECT_FALSE(loop.ep(0).is_established(a));
}

}  // namespace
}  // namespace metaroce::test
