// A program outside the tree, built against the installed package: two
// UDP endpoints on loopback, one connection, one WRITE whose bytes are then
// checked where they landed. Exit 0 only if they are all there.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "metaroce/udp.hpp"

using namespace std::chrono_literals;
namespace mu = metaroce::udp;

namespace {

int fail(const char* what, const mu::Error& e) {
  std::fprintf(stderr, "consumer: %s: %s\n", what, e.message.c_str());
  return 1;
}

}  // namespace

int main() {
  constexpr uint32_t kAccess = metaroce::kAccessLocalWrite | metaroce::kAccessRemoteWrite;
  mu::Error err;
  auto server = mu::UdpEndpoint::open("127.0.0.1:0", {}, err);
  if (!server) return fail("open server", err);
  auto client = mu::UdpEndpoint::open("127.0.0.1:0", {}, err);
  if (!client) return fail("open client", err);
  // The server answers the connection request while this thread waits in
  // the client's connect().
  server->start_progress_thread();

  char target[64] = {};
  char source[] = "written through the installed package";
  metaroce::MemoryRegion target_mr, source_mr;
  if ((err = server->register_memory(target, sizeof(target), kAccess, target_mr)))
    return fail("register target", err);
  if ((err = client->register_memory(source, sizeof(source), kAccess, source_mr)))
    return fail("register source", err);

  metaroce::ConnId conn, accepted;
  if ((err = client->connect(server->local_address(), 5s, conn))) return fail("connect", err);
  if ((err = server->accept(5s, accepted))) return fail("accept", err);
  if ((err = client->write(conn, 1, source, sizeof(source), source_mr.lkey, target_mr.addr,
                           target_mr.rkey)))
    return fail("write", err);
  metaroce::Completion c;
  if (!client->wait_completion(c, 5s)) {
    std::fprintf(stderr, "consumer: no completion for the WRITE within 5 s\n");
    return 1;
  }
  if (c.status != metaroce::Status::kOk)
    return fail("WRITE completion", client->completion_error(c));
  // The WRITE completes once acknowledged, so its bytes are in place.
  if (std::memcmp(target, source, sizeof(source)) != 0) {
    std::fprintf(stderr, "consumer: the WRITE's bytes did not land: \"%.*s\"\n",
                 static_cast<int>(sizeof(target)), target);
    return 1;
  }
  std::printf("consumer: wrote %zu bytes over %s\n", sizeof(source),
              client->peer_address(conn).c_str());
  client->close(true);
  server->close(true);
  return 0;
}
