// A connected loopback pair of endpoints, and a test's two sides aimed across
// it: the setting of the perf tests that drive a Sink and a Generator by hand.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

#include "session.hpp"
#include "traffic.hpp"

namespace metaroce::perf {

// A loopback pair: `server` accepted `client`'s connection.
struct PerfPair {
  std::unique_ptr<udp::UdpEndpoint> server, client;
  ConnId sconn, cconn;
};

inline PerfPair perf_pair(const Common& common) {
  using namespace std::chrono_literals;
  PerfPair p;
  udp::Error err;
  p.server = udp::UdpEndpoint::open("127.0.0.1:0", make_options(common), err);
  p.client = udp::UdpEndpoint::open("127.0.0.1:0", make_options(common), err);
  if (!p.server || !p.client) {
    ADD_FAILURE() << err.message;
    return p;
  }
  p.server->start_progress_thread();
  err = p.client->connect(p.server->local_address(), 3000ms, p.cconn);
  EXPECT_FALSE(err) << err.message;
  err = p.server->accept(1000ms, p.sconn);
  EXPECT_FALSE(err) << err.message;
  p.server->stop_progress_thread();
  return p;
}

// The server's Sink for `tp` (with the memory a write or read reaches, a
// read's filled with the pattern) and the client's Generator aimed at it.
inline testing::AssertionResult aim_generator(PerfPair& p, const TestParams& tp, Sink& data,
                                              Generator& gen) {
  if (!data.setup(*p.server, p.sconn, tp,
                  plan_buffers(Side::kServer, tp.op, tp.size, tp.qd, tp.bidir).ring) ||
      !data.expose(tp.size, tp.qd, tp.op == Op::kRead) ||
      !gen.setup(*p.client, p.cconn, tp, data.mem_mr.addr, data.mem_mr.rkey))
    return testing::AssertionFailure() << "cannot register the buffers";
  return testing::AssertionSuccess();
}

// Two paths over four source ports: enough on loopback.
inline Common small_common() {
  Common common;
  common.paths = 2;
  common.entropy_count = 4;
  return common;
}

}  // namespace metaroce::perf
