// Plain loopback sockets that play a peer of the UDP driver by hand: a
// socket on 127.0.0.1, one decoded datagram at a time, and a responder that
// answers CONNECT_REQs as a test tells it (udp_test, udp_connect_test).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "metaroce/udp.hpp"
#include "metaroce/wire.hpp"
#include "udp_pair.hpp"

namespace metaroce::udp::test {

// The loopback address of either family, at `port`.
inline sockaddr_storage loopback(bool v6, uint16_t port, socklen_t& len) {
  sockaddr_storage ss{};
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    a->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons(port);
    len = sizeof(sockaddr_in);
  }
  return ss;
}

// A plain IPv4 socket on 127.0.0.1. -1 if none could be bound.
inline int loopback_socket(uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t len = 0;
  const sockaddr_storage any_port = loopback(false, 0, len);
  sockaddr_storage me{};
  socklen_t ml = sizeof(me);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&any_port), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&me), &ml) != 0) {
    ::close(fd);
    return -1;
  }
  port = ntohs(reinterpret_cast<sockaddr_in*>(&me)->sin_port);
  return fd;
}

// The next datagram on `fd` within `timeout`, decoded; false if none came.
inline bool receive_packet(int fd, std::chrono::milliseconds timeout, metaroce::wire::Packet& out,
                           uint16_t* from_port = nullptr) {
  pollfd pfd{fd, POLLIN, 0};
  if (::poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0) return false;
  uint8_t buf[2048];
  sockaddr_in from{};
  socklen_t fl = sizeof(from);
  const ssize_t n = ::recvfrom(fd, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &fl);
  if (n <= 0) return false;
  if (from_port != nullptr) *from_port = ntohs(from.sin_port);
  return metaroce::wire::decode({buf, static_cast<size_t>(n)}, out) ==
         metaroce::wire::ParseError::kOk;
}

// A plain socket on 127.0.0.1 playing a version-1 responder: `answer` sees
// each CONNECT_REQ with the source port it came from and may fill the
// opcode and body of an answer, which goes where spec CONN-3 says, the
// request's source IP with its reply_port (the source port where that is 0).
// With `answer_from` (an IPv4 address, e.g. 127.0.0.2) the answers leave
// from a socket of their own on that address, as a server behind a NAT's or
// one answering from another of its addresses do; ok() is false where it
// cannot be bound.
class FakeResponder {
 public:
  using Answer = std::function<bool(uint16_t from_port, const metaroce::wire::Packet& req,
                                    metaroce::wire::BaseHeader& bh, metaroce::wire::ConnectBody&)>;
  explicit FakeResponder(Answer answer, const char* answer_from = nullptr)
      : answer_(std::move(answer)) {
    fd_ = loopback_socket(port_);
    if (answer_from != nullptr) {
      out_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      if (out_fd_ < 0 || ::inet_pton(AF_INET, answer_from, &a.sin_addr) != 1 ||
          ::bind(out_fd_, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0)
        return;  // not ok()
    }
    if (fd_ >= 0) thread_ = std::thread([this] { run(); });
  }
  ~FakeResponder() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
    if (out_fd_ >= 0) ::close(out_fd_);
  }
  // How many answers it sent.
  [[nodiscard]] int answered() const { return answered_.load(); }
  FakeResponder(const FakeResponder&) = delete;
  FakeResponder& operator=(const FakeResponder&) = delete;
  [[nodiscard]] bool ok() const { return thread_.joinable(); }
  [[nodiscard]] std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Opens `client` on 127.0.0.1 and connects it here (2 s).
  Error connect(std::unique_ptr<UdpEndpoint>& client) const {
    client = open_on("127.0.0.1");
    if (!client) return Error{Status::kInvalidArgument, "no client endpoint", "", 0};
    ConnId id;
    return client->connect(address(), std::chrono::milliseconds(2000), id);
  }

 private:
  void run() {
    namespace wire = metaroce::wire;
    while (!stop_) {
      wire::Packet req;
      uint16_t from = 0;
      if (!receive_packet(fd_, std::chrono::milliseconds(20), req, &from) ||
          req.bh.opcode != wire::Opcode::kConnectReq)
        continue;
      wire::BaseHeader bh;
      bh.dst_conn = req.connect.src_conn;
      wire::ConnectBody body;
      body.max_version = wire::kVersion;
      body.nonce = req.connect.nonce;
      if (!answer_(from, req, bh, body)) continue;
      uint8_t out[256];
      const size_t len = wire::seal(out, wire::write_connect(out, bh, body), 0);
      socklen_t sl = 0;
      const uint16_t to = req.connect.reply_port != 0 ? req.connect.reply_port : from;
      const sockaddr_storage dst = loopback(false, to, sl);
      if (::sendto(out_fd_ >= 0 ? out_fd_ : fd_, out, len, 0,
                   reinterpret_cast<const sockaddr*>(&dst), sl) == static_cast<ssize_t>(len))
        ++answered_;
    }
  }

  Answer answer_;
  int fd_ = -1;
  int out_fd_ = -1;  // answer_from's (-1: answers leave from fd_)
  std::atomic<int> answered_{0};
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace metaroce::udp::test
