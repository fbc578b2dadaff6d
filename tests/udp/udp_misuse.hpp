// What the misuse tests (udp_memory_misuse_test, udp_peer_gone_test) share:
// both endpoints of a Pair driven from the test's own thread, and the check
// that an error names the peer and the connection.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "metaroce/udp.hpp"
#include "udp_pair.hpp"

namespace metaroce::udp::test {

// A connection id as errors write it ("0x1a2b").
inline std::string conn_hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%x", v);
  return b;
}

// Runs both endpoints' rounds (no progress thread: each step is this
// thread's; a server that is gone is skipped) until pred() or 20 s,
// generous for a loaded 2-core host.
inline bool pump(Pair& p, const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    const size_t moved = p.client->progress() + (p.server ? p.server->progress() : 0);
    if (moved == 0) p.client->wait(std::chrono::milliseconds(1));
  }
  return pred();
}

// The failed completion `c`'s error names `peer` and its connection.
inline void expect_names(const UdpEndpoint& ep, const Completion& c, const std::string& peer) {
  const Error e = ep.completion_error(c);
  EXPECT_NE(c.status, Status::kOk);
  EXPECT_EQ(e.status, c.status);
  EXPECT_EQ(e.peer, peer) << e.message;
  EXPECT_EQ(e.conn, c.conn.v) << e.message;
  EXPECT_NE(e.message.find(peer), std::string::npos) << e.message;
  EXPECT_NE(e.message.find(conn_hex(c.conn.v)), std::string::npos) << e.message;
}

}  // namespace metaroce::udp::test
