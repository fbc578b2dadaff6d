// Datagrams from a stranger: a plain UDP socket sends malformed bytes to an
// endpoint's port (empty, truncated headers, another version, an unknown
// opcode, a bad checksum, an inconsistent length, a huge one, a valid packet
// for no connection, a valid one for a real connection from another host)
// while a real connection moves data through it. Each is counted under its
// reason and answered with nothing (BAD-1..BAD-7); the connection's every
// byte arrives intact.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "metaroce/udp.hpp"
#include "metaroce/wire.hpp"
#include "udp_pair.hpp"
#include "udp_raw.hpp"

using namespace std::chrono_literals;
using metaroce::Completion;
using metaroce::ConnId;
using metaroce::MemoryRegion;
using metaroce::Status;
using metaroce::udp::ConnState;
using metaroce::udp::UdpEndpoint;
using namespace metaroce::udp::test;
namespace wire = metaroce::wire;

namespace {

// Every datagram the endpoint dropped, whatever the reason: the engine's
// counters and the driver's.
uint64_t dropped(const UdpEndpoint& ep) {
  const metaroce::EndpointStats s = ep.endpoint_stats();
  const metaroce::udp::IoStats io = ep.io_stats();
  return s.truncated + s.bad_version + s.bad_opcode + s.bad_checksum + s.bad_length + s.bad_field +
         s.unknown_connection + s.wrong_peer + io.rx_foreign + io.rx_truncated;
}

// A plain socket on `host` (127.0.0.2: another host to the endpoint, which
// Linux's loopback serves as it does 127.0.0.1), -1 if none.
int stranger_socket(const char* host) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  (void)::inet_pton(AF_INET, host, &a.sin_addr);
  if (fd >= 0 && ::bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// A sealed WRITE of `payload` bytes (headers only under the ICRC, PC clear).
std::vector<uint8_t> write_packet(uint32_t dst_conn, uint32_t msg_len, uint32_t offset,
                                  size_t payload) {
  std::vector<uint8_t> out(wire::kMaxDataHeaderSize + payload + wire::kIcrcSize, 0x33);
  wire::BaseHeader bh;
  bh.opcode = wire::Opcode::kWrite;
  bh.dst_conn = dst_conn;
  bh.psn = 12345;
  wire::MessageHeader mh;
  mh.offset = offset;
  mh.msg_len = msg_len;
  wire::RdmaHeader rh;
  rh.rkey = 0x1122334455667788ULL;
  rh.raddr = 0x1000;
  const size_t h = wire::write_data_headers(out, bh, mh, &rh, 0);
  out.resize(wire::seal(out, h, payload));
  return out;
}

std::vector<uint8_t> probe_packet(uint32_t dst_conn) {
  std::vector<uint8_t> out(64);
  wire::BaseHeader bh;
  bh.opcode = wire::Opcode::kProbe;
  bh.dst_conn = dst_conn;
  out.resize(wire::seal(out, wire::write_probe(out, bh), 0));
  return out;
}

std::vector<uint8_t> disconnect_packet(uint32_t dst_conn, uint32_t src_conn) {
  std::vector<uint8_t> out(64);
  wire::BaseHeader bh;
  bh.opcode = wire::Opcode::kDisconnect;
  bh.dst_conn = dst_conn;
  wire::DisconnectBody body;
  body.src_conn = src_conn;
  out.resize(wire::seal(out, wire::write_disconnect(out, bh, body), 0));
  return out;
}

}  // namespace

TEST(UdpStranger, MalformedDatagramsAreCountedAndARealConnectionKeepsEveryByte) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  const int fd = stranger_socket("127.0.0.2");
  if (fd < 0) GTEST_SKIP() << "no 127.0.0.2 on the loopback";
  p.server->start_progress_thread();
  p.client->start_progress_thread();

  constexpr size_t kChunk = 1 << 20;
  constexpr size_t kChunks = 4;
  std::vector<uint8_t> src(kChunk * kChunks), dst(kChunk * kChunks, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>((i * 131) ^ (i >> 11));
  MemoryRegion smr, dmr;
  ASSERT_FALSE(p.client->register_memory(src.data(), src.size(), kAllAccess, smr));
  ASSERT_FALSE(p.server->register_memory(dst.data(), dst.size(), kAllAccess, dmr));
  for (size_t i = 0; i < kChunks; ++i)
    ASSERT_FALSE(p.client->write(p.cconn, i, src.data() + i * kChunk, kChunk, smr.lkey,
                                 dmr.addr + i * kChunk, dmr.rkey));

  const uint64_t dropped_before = dropped(*p.server);
  const metaroce::EndpointStats before = p.server->endpoint_stats();
  const metaroce::udp::IoStats io_before = p.server->io_stats();
  // An id no connection has (the endpoint holds two at most, both known).
  uint32_t stranger_conn = 0x5a5a5a5a;
  while (stranger_conn == p.sconn.v || stranger_conn == p.cconn.v) ++stranger_conn;

  std::vector<std::vector<uint8_t>> junk;
  junk.push_back({});                              // empty: rx_foreign
  junk.push_back({0x10, 0x01, 0, 0, 0, 0, 0});     // 7 bytes: truncated
  junk.push_back(std::vector<uint8_t>(19, 0x10));  // a base header and 3 bytes: truncated
  {
    auto v = probe_packet(stranger_conn);  // version 2: bad_version
    v[0] = static_cast<uint8_t>((2 << 4) | (v[0] & 0x0f));
    junk.push_back(v);
  }
  {
    auto v = probe_packet(stranger_conn);  // opcode 0x7f: bad_opcode
    v[1] = 0x7f;
    junk.push_back(v);
  }
  {
    auto v = write_packet(p.sconn.v, 4096, 0, 512);  // ICRC flipped: bad_checksum
    v.back() ^= 0xff;
    junk.push_back(v);
  }
  junk.push_back(write_packet(stranger_conn, 100, 0, 512));           // past msg_len: bad_length
  junk.push_back(write_packet(stranger_conn, 4096, 0, 512));          // no such connection
  junk.push_back(write_packet(stranger_conn, 0xfffffff0u, 0, 1024));  // huge message, no connection
  junk.push_back(write_packet(p.sconn.v, 4096, 0, 512));    // the real connection, wrong host
  junk.push_back(disconnect_packet(p.sconn.v, p.cconn.v));  // a forged close: wrong host
  junk.push_back(write_packet(p.sconn.v, 0xfffffff0u, 0, 65000));  // huge datagram
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(p.server->port());
  for (int round = 0; round < 3; ++round)
    for (const auto& j : junk)
      ASSERT_EQ(
          ::sendto(fd, j.data(), j.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)),
          static_cast<ssize_t>(j.size()));
  const uint64_t sent = 3 * junk.size();

  for (size_t i = 0; i < kChunks; ++i) {
    Completion c;
    ASSERT_TRUE(p.client->wait_completion(c, 20s)) << i;
    EXPECT_EQ(c.status, Status::kOk) << p.client->completion_error(c).message;
  }
  EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), src.size()));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (dropped(*p.server) < dropped_before + sent && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(dropped(*p.server), dropped_before + sent);
  const metaroce::EndpointStats after = p.server->endpoint_stats();
  const metaroce::udp::IoStats io_after = p.server->io_stats();
  EXPECT_EQ(io_after.rx_foreign - io_before.rx_foreign, 3u);
  EXPECT_EQ(after.truncated - before.truncated, 6u);
  EXPECT_EQ(after.bad_version - before.bad_version, 3u);
  EXPECT_EQ(after.bad_opcode - before.bad_opcode, 3u);
  EXPECT_EQ(after.bad_checksum - before.bad_checksum, 3u);
  EXPECT_EQ(after.bad_length - before.bad_length, 3u);
  EXPECT_EQ(after.unknown_connection - before.unknown_connection, 6u);
  // The real connection's id from another host: a WRITE, a DISCONNECT and
  // the huge datagram (the driver's receive buffer holds 64 KiB with GRO;
  // without, the datagram is cut to it and counted so).
  EXPECT_EQ(after.wrong_peer - before.wrong_peer + io_after.rx_truncated - io_before.rx_truncated,
            9u);
  EXPECT_GE(after.wrong_peer - before.wrong_peer, 6u);
  // Nothing answered the stranger.
  pollfd pfd{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&pfd, 1, 200), 0) << "the endpoint answered a stranger";
  ::close(fd);
  // The forged DISCONNECT closed nothing: the connection still works.
  EXPECT_EQ(p.server->state(p.sconn), ConnState::kEstablished);
  EXPECT_EQ(p.client->state(p.cconn), ConnState::kEstablished);
  std::memset(dst.data(), 0, dst.size());
  ASSERT_FALSE(p.client->write(p.cconn, 99, src.data(), kChunk, smr.lkey, dmr.addr, dmr.rkey));
  Completion c;
  ASSERT_TRUE(p.client->wait_completion(c, 20s));
  EXPECT_EQ(c.status, Status::kOk);
  EXPECT_EQ(0, std::memcmp(src.data(), dst.data(), kChunk));
}

// Spec section 3.12: a responder does not read a CONNECT_REQ's dst_conn, and
// a request with another value is processed the same. The driver read it:
// a request naming a connection of the server's whose peer is on the same
// host took that connection's peer, so its ACCEPT (and CONN-3's repeats)
// went to the other endpoint, the requester's connect timed out, and the
// server held a connection "from" the other peer. A plain socket on the
// client's host sends such a request, naming the client's connection: the
// ACCEPT comes back to it, and the new connection's peer is its address.
TEST(UdpStranger, ARequestNamingAnotherConnectionsIdIsAnsweredAtItsOwnReplyPort) {
  Pair p = connect_pair("127.0.0.1");
  ASSERT_TRUE(p.cconn.valid() && p.sconn.valid());
  uint16_t port = 0;
  const int fd = loopback_socket(port);
  ASSERT_GE(fd, 0);
  const uint64_t client_dropped = dropped(*p.client);

  wire::BaseHeader bh;
  bh.opcode = wire::Opcode::kConnectReq;
  bh.dst_conn = p.sconn.v;  // "another value": the client's connection at the server
  wire::ConnectBody body;
  body.src_conn = 22;
  body.initial_psn = 1000;
  body.mtu = 1500;
  body.window_log2 = 10;
  body.max_reads = 16;
  body.max_version = wire::kVersion;
  body.reply_port = port;
  body.nonce = 0x5eed0000u + port;
  uint8_t out[256];
  const size_t len = wire::seal(out, wire::write_connect(out, bh, body), 0);
  ASSERT_GT(len, 0u);
  socklen_t sl = 0;
  const sockaddr_storage server = loopback(false, p.server->port(), sl);
  ASSERT_EQ(::sendto(fd, out, len, 0, reinterpret_cast<const sockaddr*>(&server), sl),
            static_cast<ssize_t>(len));
  p.server->start_progress_thread();

  wire::Packet accept;
  const bool answered = receive_packet(fd, 2000ms, accept);
  ::close(fd);
  ASSERT_TRUE(answered) << "no ACCEPT at the requester's reply_port";
  EXPECT_EQ(accept.bh.opcode, wire::Opcode::kConnectAccept);
  EXPECT_EQ(accept.bh.dst_conn, 22u);
  EXPECT_EQ(accept.connect.nonce, body.nonce);
  ConnId id;
  ASSERT_FALSE(p.server->accept(2000ms, id));
  metaroce::PeerAddr want;
  ASSERT_TRUE(metaroce::udp::parse_address("127.0.0.1", port, want));
  EXPECT_EQ(p.server->peer_addr(id), want);
  EXPECT_EQ(p.server->state(p.sconn), ConnState::kEstablished);
  // The client, on the same host, was sent nothing of it.
  for (int i = 0; i < 20; ++i) (void)p.client->progress();
  EXPECT_EQ(dropped(*p.client), client_dropped);
}
