// libFuzzer target for the UDP driver's receive path (metaroce::udp), the
// code between the kernel and the engine that fuzz_engine does not reach:
// datagram lengths (empty ones included), GRO buffers split into segments,
// the ECN field, peer lookup by source address and dst_conn.
//
// Once per process: a server endpoint on 127.0.0.1 and a client connected to
// it over loopback. Each input is a list of datagrams, each one
//   [length: 2 bytes, big-endian, taken modulo 2048] [flags: 1 byte] [bytes]
// flags bit 0: overwrite bytes 4-7 (dst_conn) with the server's connection id,
//         bit 1: send with IP ECN CE (else ECT(0)),
//         bit 2: send from another host's address (127.0.0.2) rather than
//                the client's (127.0.0.1: the engine takes any port of the
//                peer's host as one of its paths),
// sent back to back (so that the kernel's GRO may merge equal-sized ones)
// to the server, which then runs its progress rounds until it has read them.
// Checked: nothing crashes or trips ASan/UBSan while the server reads them
// (each as a packet, a foreign or a truncated datagram; it waits up to 500 ms
// for them, as a full socket buffer may have dropped some).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "metaroce/udp.hpp"

namespace {

using metaroce::ConnId;
using metaroce::udp::Error;
using metaroce::udp::Options;
using metaroce::udp::UdpEndpoint;
using namespace std::chrono_literals;

struct World {
  std::unique_ptr<UdpEndpoint> server, client;
  ConnId sconn, cconn;
  int same_host = -1, other_host = -1;
  sockaddr_in to{};
};

int socket_on(const char* ip) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (fd < 0 || inet_pton(AF_INET, ip, &a.sin_addr) != 1 ||
      ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    std::fprintf(stderr, "fuzz_udp: a socket on %s\n", ip);
    std::abort();
  }
  return fd;
}

World* world() {
  static World* w = [] {
    auto* x = new World;
    Options o;
    o.entropy_count = 16;
    o.linger = 10ms;
    Error e;
    x->server = UdpEndpoint::open("127.0.0.1:0", o, e);
    if (x->server) x->client = UdpEndpoint::open("127.0.0.1:0", o, e);
    if (!x->server || !x->client) {
      std::fprintf(stderr, "fuzz_udp: %s\n", e.message.c_str());
      std::abort();
    }
    x->server->start_progress_thread();
    if (x->client->connect(x->server->local_address(), 2000ms, x->cconn) ||
        x->server->accept(1000ms, x->sconn)) {
      std::fprintf(stderr, "fuzz_udp: the client did not connect\n");
      std::abort();
    }
    x->server->stop_progress_thread();
    x->to.sin_family = AF_INET;
    x->to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    x->to.sin_port = htons(x->server->port());
    x->same_host = socket_on("127.0.0.1");
    x->other_host = socket_on("127.0.0.2");
    return x;
  }();
  return w;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = *world();
  const uint64_t before = w.server->io_stats().rx_datagrams + w.server->io_stats().rx_foreign +
                          w.server->io_stats().rx_truncated + w.server->io_stats().rx_ctrunc;
  uint64_t sent = 0;
  std::vector<uint8_t> dg;
  size_t at = 0;
  while (at + 3 <= size && sent < 64) {
    const size_t len = ((size_t{data[at]} << 8) | data[at + 1]) % 2048;
    const uint8_t flags = data[at + 2];
    at += 3;
    const size_t take = std::min(len, size - at);
    dg.assign(data + at, data + at + take);
    dg.resize(len, 0);  // short inputs still give the length asked for
    at += take;
    if ((flags & 1) != 0 && dg.size() >= 8) {
      const uint32_t id = w.sconn.v;
      dg[4] = static_cast<uint8_t>(id >> 24);
      dg[5] = static_cast<uint8_t>(id >> 16);
      dg[6] = static_cast<uint8_t>(id >> 8);
      dg[7] = static_cast<uint8_t>(id);
    }
    const int fd = (flags & 4) != 0 ? w.other_host : w.same_host;
    const int tos = (flags & 2) != 0 ? 3 : 2;
    (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
    if (::sendto(fd, dg.data(), dg.size(), 0, reinterpret_cast<sockaddr*>(&w.to), sizeof(w.to)) ==
        static_cast<ssize_t>(dg.size()))
      ++sent;
  }
  // Read them all: the kernel may merge several into one GRO buffer, which
  // counts as its segments.
  const auto end = std::chrono::steady_clock::now() + 500ms;
  for (;;) {
    (void)w.server->progress();
    const auto io = w.server->io_stats();
    if (io.rx_datagrams + io.rx_foreign + io.rx_truncated + io.rx_ctrunc >= before + sent) break;
    if (std::chrono::steady_clock::now() > end) break;  // a merged buffer may count less
  }
  (void)w.client->progress();
  return 0;
}
