#include "metaroce/conformance/agent_protocol.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace metaroce::conformance::agent {
namespace {

template <typename E, size_t N>
std::optional<E> by_name(const std::array<std::string_view, N>& names, std::string_view name) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == name) return static_cast<E>(i);
  return std::nullopt;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// getaddrinfo for a "host:port" text; nullptr and `why` on failure.
addrinfo* resolve(const std::string& hostport, bool passive, std::string& why) {
  std::string host;
  uint16_t port = 0;
  if (!split_host_port(hostport, host, port)) {
    why = "'" + hostport + "' is not host:port (an IPv6 address goes in brackets: [::1]:7000)";
    return nullptr;
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    why = hostport + ": " + gai_strerror(rc);
    return nullptr;
  }
  return res;
}

}  // namespace

std::optional<WrOpcode> wr_opcode(std::string_view name) {
  return by_name<WrOpcode>(kWrOpcodes, name);
}

std::optional<CompletionOp> completion_op(std::string_view name) {
  return by_name<CompletionOp>(kCompletionOps, name);
}

std::string to_hex(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 15];
  }
  return s;
}

std::optional<std::vector<uint8_t>> from_hex(std::string_view s) {
  if (s.size() % 2 != 0) return std::nullopt;
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = hex_digit(s[2 * i]), lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

std::string quoted(std::string_view line, size_t max) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const char ch : line.substr(0, max)) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0x20 && b < 0x7f) {
      out.push_back(ch);
    } else {
      out += "\\x";
      out.push_back(kDigits[b >> 4]);
      out.push_back(kDigits[b & 15]);
    }
  }
  if (line.size() > max) out += "...";
  return out;
}

bool split_host_port(const std::string& text, std::string& host, uint16_t& port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size()) return false;
  host = text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    // "::1:5" is the address ::1:5 as much as ::1 port 5; the UDP driver's
    // parse_address reads it the first way, so neither guess is safe here.
    return false;
  }
  if (host.empty()) return false;
  unsigned long p = 0;
  for (size_t i = colon + 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    p = p * 10 + static_cast<unsigned long>(text[i] - '0');
    if (p > 65535) return false;
  }
  port = static_cast<uint16_t>(p);
  return true;
}

int tcp_connect(const std::string& hostport, int timeout_ms, std::string& why) {
  addrinfo* res = resolve(hostport, false, why);
  if (res == nullptr) return -1;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = ETIMEDOUT;
      socklen_t len = sizeof(err);
      if (::poll(&p, 1, timeout_ms) == 1) (void)getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      why = "connect to " + hostport + ": " + std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

int tcp_listen(const std::string& hostport, std::string& bound, std::string& why) {
  addrinfo* res = resolve(hostport, true, why);
  if (res == nullptr) return -1;
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 8) != 0) {
      why = "listen on " + hostport + ": " + std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) return -1;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0 &&
      getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0)
    bound =
        (ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]" : std::string(host)) + ":" + serv;
  return fd;
}

LineChannel::~LineChannel() {
  if (fd_ >= 0) ::close(fd_);
}

bool LineChannel::fill(std::string& why) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      in_.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof(buf) || in_.size() > kMaxLine) return true;
      continue;
    }
    if (n == 0) {
      why = "connection closed";
      return false;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
    if (errno == EINTR) continue;
    why = std::string("receive: ") + std::strerror(errno);
    return false;
  }
}

bool LineChannel::next_line(std::string& line, bool& too_long) {
  const size_t nl = in_.find('\n');
  too_long = nl == std::string::npos ? in_.size() > kMaxLine : nl > kMaxLine;
  if (nl == std::string::npos || too_long) return false;
  line.assign(in_, 0, nl);
  in_.erase(0, nl + 1);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

bool LineChannel::read_line(std::string& line, int timeout_ms, std::string& why) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    bool too_long = false;
    if (next_line(line, too_long)) return true;
    if (too_long) {
      why = "a line longer than " + std::to_string(kMaxLine) + " bytes";
      return false;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      why = "no reply within " + std::to_string(timeout_ms) + " ms";
      return false;
    }
    pollfd p{fd_, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno != EINTR) {
      why = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    if (rc > 0 && !fill(why)) return false;
  }
}

bool LineChannel::write_line(std::string_view line, std::string& why) {
  std::string out(line);
  out.push_back('\n');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::send(fd_, out.data() + done, out.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      if (::poll(&p, 1, 10000) == 1) continue;
      why = "send: timed out";
      return false;
    }
    why = std::string("send: ") + std::strerror(errno);
    return false;
  }
  return true;
}

}  // namespace metaroce::conformance::agent
