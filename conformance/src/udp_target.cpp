#include "metaroce/conformance/udp_target.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

namespace metaroce::conformance {
namespace {

constexpr uint16_t kCheckPortBase = 50000;  // Peer::kEntropy
constexpr const char* kTesterIp = "127.0.0.3";
constexpr const char* kStrangerIp = "127.0.0.4";

int bound_socket(const char* ip, uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip, &a.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

Status status_of(const udp::Error& e) { return e ? e.status : Status::kOk; }

}  // namespace

std::unique_ptr<UdpTarget> UdpTarget::open(std::string& why) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    uint16_t r = 0;
    (void)getrandom(&r, sizeof(r), 0);
    std::unique_ptr<UdpTarget> t(new UdpTarget());
    t->base_ = static_cast<uint16_t>(33000 + (r % 1500) * kTesterPorts);  // 33000..56999
    bool ok = true;
    for (uint16_t i = 0; i < kTesterPorts && ok; ++i) {
      const int fd = bound_socket(kTesterIp, static_cast<uint16_t>(t->base_ + i));
      ok = fd >= 0;
      if (ok) t->tester_fds_.push_back(fd);
    }
    if (ok) t->stranger_fd_ = bound_socket(kStrangerIp, t->base_);
    if (!ok || t->stranger_fd_ < 0) {
      why = std::string("tester sockets on ") + kTesterIp + " / " + kStrangerIp + ": " +
            std::strerror(errno);
      continue;
    }
    udp::Options o;
    o.entropy_base = t->base_;
    o.entropy_count = kTesterPorts;
    o.engine.num_paths = 4;
    o.linger = std::chrono::milliseconds(0);
    udp::Error err;
    t->iut_ = udp::UdpEndpoint::open("127.0.0.1:" + std::to_string(t->base_ - 1), o, err);
    if (!t->iut_) {
      why = err.message;
      continue;
    }
    return t;
  }
  return nullptr;
}

UdpTarget::~UdpTarget() {
  iut_.reset();
  for (int fd : tester_fds_) ::close(fd);
  if (stranger_fd_ >= 0) ::close(stranger_fd_);
}

std::string UdpTarget::name() const {
  return "metaroce UDP driver on " + iut_->local_address() + " (real sockets)";
}

void UdpTarget::deliver(std::span<const uint8_t> datagram, uint16_t entropy, bool ce,
                        bool stranger) {
  const int off = entropy - kCheckPortBase;
  const int fd = stranger ? stranger_fd_ : tester_fds_[off >= 0 && off < kTesterPorts ? off : 0];
  // The IP ECN field of this one datagram: ECT(0), or CE when asked.
  const int tos = ce ? 3 : 2;
  (void)setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(iut_->port());
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  (void)::sendto(fd, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&a),
                 sizeof(a));
}

void UdpTarget::receive(int fd, bool stranger, std::vector<Sent>& out) {
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

std::vector<Sent> UdpTarget::run_for(uint64_t ns) {
  std::vector<Sent> out;
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::nanoseconds(std::max<uint64_t>(ns, 2'000'000));
  do {
    iut_->progress();
    ConnId c;
    while (iut_->try_accept(c)) {
      accepted_ = c;
      ++accepted_count_;
    }
    for (int fd : tester_fds_) receive(fd, false, out);
    receive(stranger_fd_, true, out);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  } while (std::chrono::steady_clock::now() < end);
  return out;
}

bool UdpTarget::register_memory(uint64_t length, uint32_t access, Region& out) {
  std::vector<uint8_t> mem(length, 0);
  MemoryRegion mr;
  if (iut_->register_memory(mem.data(), mem.size(), access, mr)) return false;
  out = Region{mr.addr, length, mr.rkey, mr.lkey};
  memory_.add(mr.lkey, std::move(mem));
  return true;
}

bool UdpTarget::deregister_memory(const Region& r) { return !iut_->deregister_memory(r.lkey); }

std::vector<uint8_t> UdpTarget::read_memory(const Region& r, uint64_t offset, uint64_t length) {
  return memory_.read(r.lkey, offset, length);
}

void UdpTarget::write_memory(const Region& r, uint64_t offset, std::span<const uint8_t> bytes) {
  memory_.write(r.lkey, offset, bytes);
}

bool UdpTarget::connect_to_tester(ConnId& out) {
  return !iut_->connect_start(std::string(kTesterIp) + ":" + std::to_string(base_), out);
}

Status UdpTarget::post_send(ConnId conn, const SendWr& wr) {
  return status_of(iut_->post_send(conn, wr));
}

Status UdpTarget::post_recv(ConnId conn, const RecvWr& wr) {
  return status_of(iut_->post_recv(conn, wr));
}

bool UdpTarget::poll_completion(Completion& out) { return iut_->poll_completion(out); }

bool UdpTarget::path_stats(ConnId conn, size_t path, PathStats& out) {
  const std::vector<PathStats> all = iut_->path_stats(conn);
  if (path >= all.size()) return false;
  out = all[path];
  return true;
}

}  // namespace metaroce::conformance
