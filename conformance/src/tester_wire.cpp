#include "metaroce/conformance/tester_wire.hpp"

#include <arpa/inet.h>
#include <netinet/ip.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "metaroce/wire.hpp"

namespace metaroce::conformance {
namespace {

constexpr uint16_t kCheckPortBase = TesterWire::kFirstCheckPort;  // Peer::kEntropy

// "a.b.c.d", "x:y::z" or "[x:y::z]" with `port`; false on anything else.
bool parse_ip(std::string ip, uint16_t port, sockaddr_storage& out, socklen_t& len) {
  out = {};
  if (ip.size() >= 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);
  auto* a4 = reinterpret_cast<sockaddr_in*>(&out);
  if (inet_pton(AF_INET, ip.c_str(), &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons(port);
    len = sizeof(sockaddr_in);
    return true;
  }
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET6, ip.c_str(), &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

int bound_socket(const std::string& ip, uint16_t port, int& family) {
  sockaddr_storage a{};
  socklen_t len = 0;
  if (!parse_ip(ip, port, a, len)) {
    errno = EINVAL;
    return -1;
  }
  family = a.ss_family;
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  if (family == AF_INET6) {
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
  } else {
    (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

uint16_t port_of(const sockaddr_storage& a) {
  return ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(a).sin6_port
                                       : reinterpret_cast<const sockaddr_in&>(a).sin_port);
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
    const int fd = bound_socket(tester_ip, static_cast<uint16_t>(base_ + i), family_);
    if (fd < 0) {
      why = "tester socket " + tester_ip + " port " + std::to_string(base_ + i) + ": " +
            std::strerror(errno);
      return false;
    }
    tester_fds_.push_back(fd);
  }
  int stranger_family = 0;
  stranger_fd_ = bound_socket(stranger_ip, base_, stranger_family);
  if (stranger_fd_ < 0) {
    why = "stranger socket " + stranger_ip + " port " + std::to_string(base_) + ": " +
          std::strerror(errno);
    return false;
  }
  if (stranger_family != family_) {
    why = "the stranger's address " + stranger_ip + " is not of the tester's (" + tester_ip +
          ") address family";
    return false;
  }
  return true;
}

bool TesterWire::set_iut(const std::string& ip, uint16_t port, std::string& why) {
  if (!parse_ip(ip, port, iut_, iut_len_)) {
    why = "'" + ip + "' is not an IPv4 or IPv6 address";
    return false;
  }
  if (family_ != 0 && iut_.ss_family != family_) {
    why = "the IUT's address " + ip + " is not of the tester's (" + tester_ip_ +
          ") address family: give --tester and --stranger addresses of the same family";
    return false;
  }
  return true;
}

std::string TesterWire::tester_address() const {
  const bool v6 = family_ == AF_INET6 && tester_ip_.front() != '[';
  return (v6 ? "[" + tester_ip_ + "]" : tester_ip_) + ":" + std::to_string(base_);
}

void TesterWire::deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
                         bool stranger, uint8_t dscp) {
  const int off = entropy - kCheckPortBase;
  const int fd = stranger ? stranger_fd_ : tester_fds_[off >= 0 && off < kPorts ? off : 0];
  // The IP ECN field of this one datagram: ECT(0), or CE when asked.
  const int tos = (dscp << 2) | (ce ? 3 : 2);
  if (family_ == AF_INET6)
    (void)setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos));
  else
    (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  (void)::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&iut_),
                 iut_len_);
}

void TesterWire::receive(std::vector<Sent>& out) {
  for (uint16_t i = 0; i < tester_fds_.size(); ++i)
    receive(tester_fds_[i], false, static_cast<uint16_t>(kCheckPortBase + i), out);
  receive(stranger_fd_, true, kCheckPortBase, out);
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

void TesterWire::receive(int fd, bool stranger, uint16_t to_port, std::vector<Sent>& out) {
  for (;;) {
    sockaddr_storage from{};
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
    s.entropy = static_cast<uint16_t>(port_of(from) - base_ + kCheckPortBase);
    s.to_stranger = stranger;
    s.to_port = to_port;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
        s.ecn = static_cast<uint8_t>(*CMSG_DATA(c) & 3);
        s.dscp = static_cast<uint8_t>(*CMSG_DATA(c) >> 2);
      } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
        int tclass = 0;  // an int here, where IP_TOS gives one byte
        std::memcpy(&tclass, CMSG_DATA(c), sizeof(tclass));
        s.ecn = static_cast<uint8_t>(tclass & 3);
        s.dscp = static_cast<uint8_t>((tclass >> 2) & 0x3f);
      }
    }
    out.push_back(std::move(s));
  }
}

void TesterWireTarget::deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
                               bool stranger) {
  wire_.deliver(datagram, entropy, ce, stranger);
}

bool TesterWireTarget::deliver_trimmed(std::span<const uint8_t> datagram, uint16_t entropy,
                                       bool ce) {
  wire_.deliver(datagram, entropy, ce, false, wire::kDefaultTrimmedDscp);
  return true;
}

std::optional<uint16_t> TesterWireTarget::tester_port(uint16_t check_port) const {
  const int off = check_port - kCheckPortBase;
  if (off < 0 || off >= TesterWire::kPorts) return std::nullopt;
  return static_cast<uint16_t>(wire_.base() + off);
}

}  // namespace metaroce::conformance
