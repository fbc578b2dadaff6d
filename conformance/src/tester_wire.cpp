#include "metaroce/conformance/tester_wire.hpp"

#include <arpa/inet.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace metaroce::conformance {
namespace {

constexpr uint16_t kCheckPortBase = 50000;  // Peer::kEntropy

int bound_socket(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1) {
    errno = EINVAL;
    return -1;
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

}  // namespace

TesterWire::~TesterWire() {
  for (int fd : tester_fds_) ::close(fd);
  if (stranger_fd_ >= 0) ::close(stranger_fd_);
}

bool TesterWire::open(const std::string& tester_ip, const std::string& stranger_ip, uint16_t base,
                      std::string& why) {
  tester_ip_ = tester_ip;
  base_ = base;
  if (base_ + kPorts - 1 > 65535) {
    why = "tester ports " + std::to_string(base_) + "+" + std::to_string(kPorts) + " past 65535";
    return false;
  }
  for (uint16_t i = 0; i < kPorts; ++i) {
    const int fd = bound_socket(tester_ip, static_cast<uint16_t>(base_ + i));
    if (fd < 0) {
      why = "tester socket " + tester_ip + ":" + std::to_string(base_ + i) + ": " +
            std::strerror(errno);
      return false;
    }
    tester_fds_.push_back(fd);
  }
  stranger_fd_ = bound_socket(stranger_ip, base_);
  if (stranger_fd_ < 0) {
    why = "stranger socket " + stranger_ip + ":" + std::to_string(base_) + ": " +
          std::strerror(errno);
    return false;
  }
  return true;
}

bool TesterWire::set_iut(const std::string& ip, uint16_t port) {
  iut_ = sockaddr_in{};
  iut_.sin_family = AF_INET;
  iut_.sin_port = htons(port);
  return inet_pton(AF_INET, ip.c_str(), &iut_.sin_addr) == 1;
}

std::string TesterWire::tester_address() const { return tester_ip_ + ":" + std::to_string(base_); }

void TesterWire::deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
                         bool stranger) {
  const int off = entropy - kCheckPortBase;
  const int fd = stranger ? stranger_fd_ : tester_fds_[off >= 0 && off < kPorts ? off : 0];
  // The IP ECN field of this one datagram: ECT(0), or CE when asked.
  const int tos = ce ? 3 : 2;
  (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  (void)::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&iut_),
                 sizeof(iut_));
}

void TesterWire::receive(std::vector<Sent>& out) {
  for (int fd : tester_fds_) receive(fd, false, out);
  receive(stranger_fd_, true, out);
}

std::vector<Sent> TesterWire::run_for(std::chrono::nanoseconds ns,
                                      const std::function<void()>& round) {
  std::vector<Sent> out;
  const auto end = std::chrono::steady_clock::now() + ns;
  do {
    if (round) round();
    receive(out);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  } while (std::chrono::steady_clock::now() < end);
  return out;
}

void TesterWire::receive(int fd, bool stranger, std::vector<Sent>& out) {
  for (;;) {
    sockaddr_in from{};
    iovec iov{buf_.data(), buf_.size()};
    alignas(cmsghdr) uint8_t ctrl[64];
    msghdr h{};
    h.msg_name = &from;
    h.msg_namelen = sizeof(from);
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctrl;
    h.msg_controllen = sizeof(ctrl);
    const ssize_t n = ::recvmsg(fd, &h, 0);
    if (n < 0) return;
    Sent s;
    s.bytes.assign(buf_.begin(), buf_.begin() + n);
    s.entropy = static_cast<uint16_t>(ntohs(from.sin_port) - base_ + kCheckPortBase);
    s.to_stranger = stranger;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS)
        s.ecn = static_cast<uint8_t>(*CMSG_DATA(c) & 3);
    out.push_back(std::move(s));
  }
}

}  // namespace metaroce::conformance
