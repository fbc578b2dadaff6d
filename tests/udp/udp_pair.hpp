// Two UDP driver endpoints over loopback, connected: the setup the driver's
// tests (udp_test) and the allocation test (tests/engine/no_alloc_test) share.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>

#include "metaroce/udp.hpp"

namespace metaroce::udp::test {

inline uint16_t random_port() {
  static std::mt19937 rng(std::random_device{}());
  // Receive port + 16-port entropy block; stay below the ephemeral range.
  return static_cast<uint16_t>(std::uniform_int_distribution<int>(20000, 32000)(rng));
}

inline Options test_options() {
  Options o;
  o.entropy_count = 16;
  o.linger = std::chrono::milliseconds(50);
  return o;
}

// Opens an endpoint on host at a random free port (retrying on collisions).
inline std::unique_ptr<UdpEndpoint> open_on(const std::string& host, Options o = test_options()) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    const uint16_t port = random_port();
    const std::string addr = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                             std::to_string(port);
    Error err;
    auto ep = UdpEndpoint::open(addr, o, err);
    if (ep) return ep;
  }
  ADD_FAILURE() << "no free port on " << host;
  return nullptr;
}

struct Pair {
  std::unique_ptr<UdpEndpoint> server, client;
  ConnId sconn, cconn;
};

// The client connects to the server at `to` (its own address, or a hop in
// front of it), which runs its progress thread for the handshake only.
inline void handshake(Pair& p, const std::string& to) {
  p.server->start_progress_thread();
  const Error e = p.client->connect(to, std::chrono::milliseconds(2000), p.cconn);
  EXPECT_FALSE(e) << e.message;
  const Error a = p.server->accept(std::chrono::milliseconds(1000), p.sconn);
  EXPECT_FALSE(a) << a.message;
  p.server->stop_progress_thread();
}

// Connects a client on `host` to a server. The server may listen on another
// address than the one the client reaches it at: `server_host` (e.g. a
// wildcard) names the former.
inline Pair connect_pair(const std::string& host, Options so = test_options(),
                         Options co = test_options(), const std::string& server_host = "") {
  Pair p;
  p.server = open_on(server_host.empty() ? host : server_host, so);
  p.client = open_on(host, co);
  if (!p.server || !p.client) return p;
  handshake(p, server_host.empty() ? p.server->local_address()
               : host.find(':') != std::string::npos
                   ? "[" + host + "]:" + std::to_string(p.server->port())
                   : host + ":" + std::to_string(p.server->port()));
  return p;
}

}  // namespace metaroce::udp::test
