// Two UDP driver endpoints over loopback, connected: the setup the driver's
// tests (udp_test) and the allocation test (tests/engine/no_alloc_test) share.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <random>
#include <string>

#include "metaroce/udp.hpp"

namespace metaroce::udp::test {

// Every access a test's region may need.
inline constexpr uint32_t kAllAccess =
    metaroce::kAccessLocalWrite | metaroce::kAccessRemoteWrite | metaroce::kAccessRemoteRead;

inline uint16_t random_port() {
  static std::mt19937 rng(std::random_device{}());
  // Receive port + 16-port entropy block; stay below the ephemeral range.
  return static_cast<uint16_t>(std::uniform_int_distribution<int>(20000, 32000)(rng));
}

// A port with nothing bound at `host` ("127.0.0.1" or "::1"), for a test
// whose requests must draw ICMP port unreachable. random_port() is no such
// port: ctest -j2 runs another test process beside this one, whose
// endpoints take random_port()s and their blocks, and so does this one's
// own client; a request to one of those is answered or silently taken, and
// a test that expected the refusal failed now and then. The kernel picks a
// port 0 bind from its ephemeral range (32768-60999 by default), above every
// random_port(), and at random within it: nothing of the tests binds the
// port, and the kernel hands it out again only by a 1-in-28,000 chance a
// bind.
inline uint16_t closed_port(const std::string& host) {
  const bool v6 = host.find(':') != std::string::npos;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (v6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      len = sizeof(*a);
      if (::inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) != 1) len = 0;
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      len = sizeof(*a);
      if (::inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1) len = 0;
    }
    uint16_t port = 0;
    if (len != 0 && ::bind(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0)
      port = ntohs(v6 ? reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port
                      : reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
    ::close(fd);
    // (A host whose ephemeral range reaches down into random_port()'s: another.)
    if (port > 32000) return port;
  }
  ADD_FAILURE() << "no closed port on " << host;
  return 0;
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

// Pins the calling thread, and the threads it starts from then on, to the
// first CPU it may run on: `one` that CPU's set, `old` the set it had (to
// restore). False where the kernel refused. For tests that order two
// threads by priority on one CPU (SCHED_IDLE beside the test's own).
inline bool pin_to_one_cpu(cpu_set_t& old, cpu_set_t& one) {
  if (sched_getaffinity(0, sizeof(old), &old) != 0) return false;
  int cpu = 0;
  while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &old)) ++cpu;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return sched_setaffinity(0, sizeof(one), &one) == 0;
}

struct Pair {
  std::unique_ptr<UdpEndpoint> server, client;
  ConnId sconn, cconn;
};

// What the tests' handshakes may take. The engine's own budget, 8
// requests 10 ms apart by default (CONN-2), is no more than a loaded machine
// (ASan, a build beside the tests) may leave the server's progress thread
// unscheduled: tests that are not about connecting failed at their setup, now
// and then, with "no answer to 8 requests". connect_pair gives a client whose
// options leave connect_attempts at its default kHandshakeAttempts instead;
// a test about the budget sets its own.
inline constexpr std::chrono::milliseconds kHandshakeTimeout{10000};
inline constexpr uint32_t kHandshakeAttempts = 1000;  // x 10 ms

// Options `o` with the generous handshake budget above, unless they set
// connect_attempts themselves. (The repeats of a DISCONNECT the peer never
// answers have their own budget, disconnect_attempts, left at its default 8;
// close()'s linger cuts them short.)
inline Options with_handshake_budget(Options o) {
  if (o.engine.connect_attempts == decltype(o.engine){}.connect_attempts)
    o.engine.connect_attempts = kHandshakeAttempts;
  return o;
}

// The client connects to the server at `to` (its own address, or a hop in
// front of it), which runs its progress thread for the handshake only.
inline void handshake(Pair& p, const std::string& to) {
  p.server->start_progress_thread();
  const Error e = p.client->connect(to, kHandshakeTimeout, p.cconn);
  EXPECT_FALSE(e) << e.message;
  const Error a = p.server->accept(kHandshakeTimeout, p.sconn);
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
  p.client = open_on(host, with_handshake_budget(co));
  if (!p.server || !p.client) return p;
  handshake(p, server_host.empty() ? p.server->local_address()
               : host.find(':') != std::string::npos
                   ? "[" + host + "]:" + std::to_string(p.server->port())
                   : host + ":" + std::to_string(p.server->port()));
  return p;
}

}  // namespace metaroce::udp::test
