// udp-silent-peer: a peer that goes silent once connected, for the tests of
// what a program says when the other end stops talking
// (examples/udp_write_silent_peer_test.sh). It takes one connection
// ("accept ADDR": it prints "listening on ADDR" once bound) or makes one
// ("connect ADDR"), prints "connected", then posts nothing for SECONDS
// (default 30) and exits 0. Its progress thread keeps acknowledging and
// answering probes, so the connection stays up: the peer's SENDs find no
// receive and are refused RNR, and nothing is ever sent to it.
//   udp-silent-peer accept|connect ADDR [SECONDS]
// Exit 1 when it cannot open, connect or accept; 2 a bad command line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "metaroce/udp.hpp"

namespace mu = metaroce::udp;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (argc < 3 || argc > 4 || (mode != "accept" && mode != "connect")) {
    std::fprintf(stderr, "usage: %s accept|connect ADDR [SECONDS]\n", argv[0]);
    return 2;
  }
  const int seconds = argc > 3 ? std::atoi(argv[3]) : 30;
  mu::Error err;
  auto ep = mu::UdpEndpoint::open(mode == "accept" ? argv[2] : "127.0.0.1:0", {}, err);
  if (!ep) {
    std::fprintf(stderr, "open: %s\n", err.message.c_str());
    return 1;
  }
  if (!ep->start_progress_thread()) {
    std::fprintf(stderr, "the progress thread did not start\n");
    return 1;
  }
  metaroce::ConnId conn;
  if (mode == "accept") {
    std::printf("listening on %s\n", ep->local_address().c_str());
    std::fflush(stdout);
    err = ep->accept(std::chrono::seconds(seconds), conn);
  } else {
    err = ep->connect(argv[2], std::chrono::seconds(5), conn);
  }
  if (err) {
    std::fprintf(stderr, "%s: %s\n", mode.c_str(), err.message.c_str());
    return 1;
  }
  std::printf("connected\n");
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  ep->close(false);
  return 0;
}
