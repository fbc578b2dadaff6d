// MetaRoCE over UDP in under 200 lines: the server exposes a buffer, tells the
// client where it is with a SEND, and the client WRITEs a message into it
// (WRITE_IMM, so the server learns when it has landed).
//
//   udp_write server 127.0.0.1:4792
//   udp_write client 127.0.0.1:4792 "hello, remote memory"   (TEXT: at least a byte)
//   udp_write demo [PORT]   (both in one process, on loopback; any free port by default)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "metaroce/udp.hpp"

using namespace std::chrono_literals;
namespace mu = metaroce::udp;

namespace {

constexpr uint32_t kAccess =
    metaroce::kAccessLocalWrite | metaroce::kAccessRemoteWrite | metaroce::kAccessRemoteRead;

struct Where {  // what the server tells the client
  uint64_t addr;
  uint64_t rkey;
  uint32_t len;
};

int fail(const mu::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.message.c_str());
  return 1;
}

// Our own errors (the waits below), named as the driver names its own.
int fail(const mu::UdpEndpoint& ep, metaroce::ConnId conn, const std::string& what,
         metaroce::Status s = metaroce::Status::kPeerUnreachable) {
  char id[16];
  std::snprintf(id, sizeof(id), "0x%x", conn.v);
  const std::string peer = ep.peer_address(conn);
  return fail({s, what + " (peer " + peer + ", conn " + id + ")", peer, conn.v});
}

// A failed completion. One flushed also says why its connection failed
// ("kFlushed: ...; the connection ended with kRemoteLengthError (...)").
int fail(const mu::UdpEndpoint& ep, const metaroce::Completion& c) {
  return fail(ep.completion_error(c));
}

std::unique_ptr<mu::UdpEndpoint> open_server(const std::string& addr) {
  mu::Error err;
  auto ep = mu::UdpEndpoint::open(addr, {}, err);
  if (!ep) {
    fail(err);
    return nullptr;
  }
  std::printf("server on %s\n", ep->local_address().c_str());
  std::fflush(stdout);
  return ep;
}

int serve(mu::UdpEndpoint* ep) {
  mu::Error err;
  char buf[4096] = {};
  Where where{};
  metaroce::MemoryRegion buf_mr, where_mr;
  if ((err = ep->register_memory(buf, sizeof(buf), kAccess, buf_mr))) return fail(err);
  if ((err = ep->register_memory(&where, sizeof(where), kAccess, where_mr))) return fail(err);

  metaroce::ConnId conn;
  if ((err = ep->accept(30s, conn))) return fail(err);
  std::printf("client %s connected\n", ep->peer_address(conn).c_str());
  // A receive buffer for the WRITE_IMM's notification (it carries no data),
  // posted before the SEND below lets the client write: a WRITE_IMM that
  // finds none is refused (RNR) and resent every 100 us without end, and no
  // error says why it waits.
  if ((err = ep->recv(conn, 1, nullptr, 0, 0))) return fail(err);
  where = {buf_mr.addr, buf_mr.rkey, static_cast<uint32_t>(sizeof(buf))};
  if ((err = ep->send(conn, 2, &where, sizeof(where), where_mr.lkey))) return fail(err);

  metaroce::Completion c;
  do {
    if (!ep->wait_completion(c, 10s)) return fail(*ep, conn, "no WRITE_IMM within 10 s");
    if (c.status != metaroce::Status::kOk) return fail(*ep, c);
  } while (c.op != metaroce::CompletionOp::kRecvWriteImm);
  // byte_len is the WRITE's length (within the region, or the WRITE would
  // have been refused; the min only guards this print), imm the 32 bits the
  // writer chose: the length need not travel in it.
  const uint32_t len = std::min<uint32_t>(c.byte_len, sizeof(buf));
  std::printf("received %u bytes: \"%.*s\" (imm %u)\n", len, static_cast<int>(len), buf, c.imm);
  ep->close(true);  // orderly: DISCONNECT, then sockets closed
  return 0;
}

// How long the client waits for the server to answer its connection
// request: connect() sends one every 10 ms (spec CONN-2) all that time, so a
// server started a moment after the client, or a first request lost, is
// still reached.
constexpr auto kConnectWait = 5s;

int client(const std::string& addr, const std::string& text) {
  mu::Error err;
  metaroce::PeerAddr peer;  // resolved first: its family chooses ours
  std::string why;
  if (!mu::parse_address(addr, 4792, peer, &why))
    return fail({metaroce::Status::kInvalidArgument, addr + ": " + why, addr, 0});
  mu::Options opts;
  // Port 0: any free port (the entropy block is the 64 ports after it).
  auto ep = mu::UdpEndpoint::open(mu::address_is_v4(peer) ? "0.0.0.0:0" : "[::]:0", opts, err);
  if (!ep) return fail(err);
  // Registered before connecting, so that the receive for the server's SEND
  // is posted the moment the connection exists: the server sends as soon as
  // it has accepted, and a SEND that finds no receive waits 100 us (RNR).
  Where where{};
  std::string msg = text;
  metaroce::MemoryRegion where_mr, msg_mr;
  if ((err = ep->register_memory(&where, sizeof(where), kAccess, where_mr))) return fail(err);
  if ((err = ep->register_memory(msg.data(), msg.size(), kAccess, msg_mr))) return fail(err);
  metaroce::ConnId conn;
  if ((err = ep->connect(mu::format_address(peer), kConnectWait, conn))) {
    if (err.status == metaroce::Status::kConnectTimeout)
      std::fprintf(stderr,
                   "error: no server answered at %s within %lld s: is `udp_write server` running "
                   "there, and its UDP port reachable from here?\n",
                   mu::format_address(peer).c_str(),
                   static_cast<long long>(std::chrono::seconds(kConnectWait).count()));
    return fail(err);
  }
  if ((err = ep->recv(conn, 1, &where, sizeof(where), where_mr.lkey))) return fail(err);

  metaroce::Completion c;  // the server's Where arrives
  if (!ep->wait_completion(c, 5s)) return fail(*ep, conn, "no reply within 5 s");
  if (c.status != metaroce::Status::kOk) return fail(*ep, c);
  // Match what arrived before reading it: a shorter SEND (a peer that is not
  // this server) would leave addr and rkey 0, and we would WRITE there.
  if (c.op != metaroce::CompletionOp::kRecv || c.wr_id != 1 || c.byte_len != sizeof(where))
    return fail(
        *ep, conn,
        "the server's reply is not a buffer address (" + std::to_string(c.byte_len) + " bytes)",
        metaroce::Status::kInvalidArgument);
  const auto len = static_cast<uint32_t>(std::min<size_t>(msg.size(), where.len));
  // imm: any 32 bits for the server (a message number, say); the server
  // learns the length from its completion's byte_len.
  constexpr uint32_t kImm = 1;
  if ((err = ep->write_imm(conn, 10, msg.data(), len, msg_mr.lkey, where.addr, where.rkey, kImm)))
    return fail(err);
  if (!ep->wait_completion(c, 5s))
    return fail(*ep, conn, "no completion for the WRITE_IMM within 5 s");
  if (c.status != metaroce::Status::kOk) return fail(*ep, c);
  std::printf("wrote %u bytes to %s\n", len, ep->peer_address(conn).c_str());
  ep->close(true);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "demo";
  // Extra words were ignored silently (a TEXT with an unquoted space, say).
  const int most = mode == "client" ? 4 : 3;
  if (argc > most) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", mode.c_str(), argv[most]);
    return 2;
  }
  if (mode == "server") {
    auto ep = open_server(argc > 2 ? argv[2] : "0.0.0.0:4792");
    return ep ? serve(ep.get()) : 1;
  }
  if (mode == "client" && argc > 2) {
    const std::string text = argc > 3 ? argv[3] : "hello, remote memory";
    // Its bytes are the WRITE's source, a registered region, and a region
    // holds at least one byte: "" used to connect first and then fail in
    // register_memory.
    if (text.empty()) {
      std::fprintf(stderr, "client: TEXT is empty; give at least one byte to write\n");
      return 2;
    }
    return client(argv[2], text);
  }
  if (mode == "demo") {
    // The server's socket is bound before the client starts, so the client
    // never races it; port 0 leaves the choice to the kernel, so the demo
    // cannot collide with anything else on the machine (tests run in parallel).
    auto ep = open_server("127.0.0.1:" + std::string(argc > 2 ? argv[2] : "0"));
    if (!ep) return 1;
    const std::string addr = ep->local_address();
    int rc = 0;
    ep->start_progress_thread();  // so that close() below may come from this thread
    std::thread s([&] { rc = serve(ep.get()); });
    const int rc2 = client(addr, "hello, remote memory");
    if (rc2 != 0) ep->close(false);  // the server's waits end at once
    s.join();
    return rc != 0 ? rc : rc2;
  }
  std::fprintf(stderr, "usage: %s server [ADDR] | client ADDR [TEXT] | demo [PORT]\n", argv[0]);
  return 2;
}
