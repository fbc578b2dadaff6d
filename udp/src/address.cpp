// The one place where socket addresses and metaroce::PeerAddr meet.
#include "address.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "metaroce/udp.hpp"

namespace metaroce::udp {
namespace {

constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

void set_port(PeerAddr& a, uint16_t port) {
  a.bytes[16] = static_cast<uint8_t>(port >> 8);
  a.bytes[17] = static_cast<uint8_t>(port);
}

}  // namespace

PeerAddr with_port(const PeerAddr& a, uint16_t port) {
  PeerAddr out = a;
  set_port(out, port);
  return out;
}

uint16_t address_port(const PeerAddr& a) {
  return static_cast<uint16_t>((uint16_t{a.bytes[16]} << 8) | a.bytes[17]);
}

bool address_is_v4(const PeerAddr& a) { return a.len == kPeerAddrLen && a.bytes[18] == 4; }

uint32_t route_mtu(const PeerAddr& a, int family, const PeerAddr& from, uint32_t scope) {
  sockaddr_storage ss{}, src{};
  socklen_t len = 0, src_len = 0;
  if (!to_sockaddr(a, family, ss, len, scope)) return 0;
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  // From the endpoint's own address (port 0: any), so that source-based
  // routing picks the route its packets take.
  PeerAddr any_port = from;
  set_port(any_port, 0);
  if (to_sockaddr(any_port, family, src, src_len, scope))
    (void)::bind(fd, reinterpret_cast<const sockaddr*>(&src), src_len);
  int mtu = 0;
  socklen_t ml = sizeof(mtu);
  // connect() on UDP only looks the route up; nothing is sent.
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) == 0 &&
                  (family == AF_INET6 ? getsockopt(fd, IPPROTO_IPV6, IPV6_MTU, &mtu, &ml)
                                      : getsockopt(fd, IPPROTO_IP, IP_MTU, &mtu, &ml)) == 0;
  ::close(fd);
  return ok && mtu > 0 ? static_cast<uint32_t>(mtu) : 0;
}

bool valid_peer_addr(const PeerAddr& a, std::string* why) {
  // Decided before the words, which only a caller that reports them asks
  // for: they may find no memory, and the address is invalid all the same.
  const bool mapped = std::memcmp(a.bytes, kV4Mapped, 12) == 0;
  const bool valid =
      a.len == kPeerAddrLen && ((a.bytes[18] == 4 && mapped) || (a.bytes[18] == 6 && !mapped));
  if (valid || why == nullptr) return valid;
  if (a.len != kPeerAddrLen)
    *why = "the PeerAddr's len is " + std::to_string(a.len) + ", not " +
           std::to_string(kPeerAddrLen) +
           " (an address of this driver: parse_address, local_peer_addr, peer_addr)";
  else if (a.bytes[18] == 4)
    *why = "the PeerAddr's family byte says IPv4 but its address is not v4-mapped (::ffff:a.b.c.d)";
  else if (a.bytes[18] == 6)
    *why = "the PeerAddr's family byte says IPv6 but its address is v4-mapped (IPv4)";
  else
    *why = "the PeerAddr's family byte is " + std::to_string(a.bytes[18]) +
           ", neither 4 (IPv4) nor 6 (IPv6)";
  return false;
}

bool same_host(const PeerAddr& a, const PeerAddr& b) {
  return a.len == kPeerAddrLen && b.len == kPeerAddrLen && std::memcmp(a.bytes, b.bytes, 16) == 0;
}

bool is_unspecified(const PeerAddr& a) {
  if (a.len != kPeerAddrLen) return false;
  const uint8_t* from = a.bytes + (address_is_v4(a) ? 12 : 0);
  return std::all_of(from, a.bytes + 16, [](uint8_t b) { return b == 0; });
}

bool is_loopback(const PeerAddr& a) {
  static constexpr uint8_t kLoopback6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  if (a.len != kPeerAddrLen) return false;
  return address_is_v4(a) ? a.bytes[12] == 127 : std::memcmp(a.bytes, kLoopback6, 16) == 0;
}

bool is_this_host(const PeerAddr& a) {
  if (a.len != kPeerAddrLen) return false;
  if (is_unspecified(a) || is_loopback(a)) return true;
  ifaddrs* all = nullptr;
  if (::getifaddrs(&all) != 0) return false;
  bool found = false;
  for (const ifaddrs* i = all; i != nullptr && !found; i = i->ifa_next) {
    PeerAddr own;
    found = i->ifa_addr != nullptr && from_sockaddr(i->ifa_addr, own) && same_host(own, a);
  }
  ::freeifaddrs(all);
  return found;
}

bool from_sockaddr(const sockaddr* sa, PeerAddr& out) {
  out = PeerAddr{};
  if (sa->sa_family == AF_INET) {
    const auto* s4 = reinterpret_cast<const sockaddr_in*>(sa);
    std::memcpy(out.bytes, kV4Mapped, 12);
    std::memcpy(out.bytes + 12, &s4->sin_addr, 4);
    set_port(out, ntohs(s4->sin_port));
    out.bytes[18] = 4;
  } else if (sa->sa_family == AF_INET6) {
    const auto* s6 = reinterpret_cast<const sockaddr_in6*>(sa);
    std::memcpy(out.bytes, &s6->sin6_addr, 16);
    set_port(out, ntohs(s6->sin6_port));
    // A v4-mapped source on a dual-stack socket is an IPv4 peer.
    out.bytes[18] = std::memcmp(out.bytes, kV4Mapped, 12) == 0 ? 4 : 6;
  } else {
    return false;
  }
  out.len = kPeerAddrLen;
  return true;
}

bool is_link_local(const PeerAddr& a) {
  return a.len == kPeerAddrLen && a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80;
}

bool to_sockaddr(const PeerAddr& a, int family, sockaddr_storage& out, socklen_t& len,
                 uint32_t scope) {
  std::memset(&out, 0, sizeof(out));
  if (a.len != kPeerAddrLen) return false;
  const uint16_t port = address_port(a);
  if (family == AF_INET) {
    if (!address_is_v4(a)) return false;
    auto* s4 = reinterpret_cast<sockaddr_in*>(&out);
    s4->sin_family = AF_INET;
    s4->sin_port = htons(port);
    std::memcpy(&s4->sin_addr, a.bytes + 12, 4);
    len = sizeof(sockaddr_in);
    return true;
  }
  auto* s6 = reinterpret_cast<sockaddr_in6*>(&out);
  s6->sin6_family = AF_INET6;
  s6->sin6_port = htons(port);
  std::memcpy(&s6->sin6_addr, a.bytes, 16);  // v4 peers as v4-mapped (dual-stack socket)
  if (is_link_local(a)) s6->sin6_scope_id = scope;
  len = sizeof(sockaddr_in6);
  return true;
}

bool parse_address(const std::string& text, uint16_t default_port, PeerAddr& out,
                   std::string* why) {
  return parse_address(text, default_port, out, why, AF_UNSPEC, nullptr);
}

bool parse_address(const std::string& text, uint16_t default_port, PeerAddr& out, std::string* why,
                   int family, uint32_t* scope) {
  const AddressFault f = address_fault(text, default_port, out, family, scope);
  if (f != AddressFault::kNone && why != nullptr) *why = address_fault_text(text, f, family);
  return f == AddressFault::kNone;
}

namespace {

// inet_pton of a part of a string, which it needs terminated: one too long
// for any address is none.
bool pton(int af, std::string_view s, void* dst) {
  char buf[INET6_ADDRSTRLEN + 8];
  if (s.size() >= sizeof(buf)) return false;
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return inet_pton(af, buf, dst) == 1;
}

// "host:port", "[host]:port" or "host" taken apart, in views of the text.
struct HostPort {
  std::string_view host;
  std::string_view port;
  // An unbracketed IPv6 address whose last group could be a port: the
  // address and that group.
  std::string_view before;
  std::string_view last;
  AddressFault fault = AddressFault::kNone;
};

HostPort split_host_port(std::string_view text) {
  HostPort hp;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) return hp.fault = AddressFault::kNoCloseBracket, hp;
    hp.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return hp.fault = AddressFault::kNoColonAfterBracket, hp;
      hp.port = text.substr(close + 2);
      if (hp.port.empty()) hp.fault = AddressFault::kEmptyPort;
    }
    return hp;
  }
  const size_t colon = text.rfind(':');
  if (colon != std::string_view::npos && text.find(':') == colon) {  // exactly one ':': host:port
    hp.host = text.substr(0, colon);
    hp.port = text.substr(colon + 1);
    if (hp.port.empty()) hp.fault = AddressFault::kEmptyPort;
    return hp;
  }
  hp.host = text;  // IPv4, bare IPv6 or a name, without port
  if (colon == std::string_view::npos) return hp;
  // An IPv6 address takes no port without brackets, but where one could be
  // read off ("::1:5": ::1 port 5), the writer likely meant it: it used to
  // be read as the address ::1:5, port default_port, and a scoped one
  // ("fe80::1%lo:5") lost its port in getaddrinfo.
  const std::string_view last = text.substr(colon + 1);
  const std::string_view before = text.substr(0, colon);
  in6_addr probe{};
  if (!last.empty() && last.size() <= 5 &&
      last.find_first_not_of("0123456789") == std::string_view::npos &&
      pton(AF_INET6, before.substr(0, before.find('%')), &probe)) {
    hp.before = before;
    hp.last = last;
    hp.fault = pton(AF_INET6, text, &probe) ? AddressFault::kIpv6PortAmbiguous
                                            : AddressFault::kIpv6PortUnbracketed;
  }
  return hp;
}

}  // namespace

AddressFault address_fault(std::string_view text, uint16_t default_port, PeerAddr& out, int family,
                           uint32_t* scope) {
  if (scope != nullptr) *scope = 0;
  const HostPort hp = split_host_port(text);
  if (hp.fault != AddressFault::kNone) return hp.fault;
  if (hp.host.empty()) return AddressFault::kEmptyHost;
  uint16_t port = default_port;
  if (!hp.port.empty()) {
    unsigned long v = 0;
    for (char ch : hp.port) {
      if (ch < '0' || ch > '9') return AddressFault::kBadPort;
      v = v * 10 + static_cast<unsigned long>(ch - '0');
      if (v > 65535) return AddressFault::kPortOutOfRange;
    }
    port = static_cast<uint16_t>(v);
  }
  sockaddr_storage ss{};
  auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
  auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (pton(AF_INET, hp.host, &s4->sin_addr)) {
    s4->sin_family = AF_INET;
  } else if (pton(AF_INET6, hp.host, &s6->sin6_addr)) {
    s6->sin6_family = AF_INET6;
  } else if (hp.host.find_first_not_of("0123456789.") == std::string_view::npos) {
    // Digits and dots that are not a.b.c.d: getaddrinfo would take them as
    // inet_aton's shorthand ("10.0.1" as 10.0.0.1, "9999" as 0.0.39.15), and
    // a mistyped address would reach another host. No name is all digits.
    return AddressFault::kNotIpv4;
  } else {
    // A name: its addresses of the family the caller can reach (its first
    // answer may be the other's, "localhost" as ::1 first, say); a literal
    // with a scope ("fe80::1%eth0") comes here too, its scope id kept.
    // Terminated in a buffer of DNS's longest name, not a std::string: the
    // decision allocates nothing, so that no memory still reads as a bad
    // address, not as memory short.
    char name[NI_MAXHOST];
    if (hp.host.size() >= sizeof(name)) return AddressFault::kUnresolved;
    std::memcpy(name, hp.host.data(), hp.host.size());
    name[hp.host.size()] = '\0';
    addrinfo hints{};
    hints.ai_family = family;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(name, nullptr, &hints, &res);
    // (errno read at once: EAI_SYSTEM's cause.)
    if (rc == EAI_MEMORY || (rc == EAI_SYSTEM && errno == ENOMEM))
      return AddressFault::kResolverOutOfMemory;
    if (rc == EAI_AGAIN) return AddressFault::kResolverNoAnswer;
    if (rc != 0 || res == nullptr) return AddressFault::kUnresolved;
    std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (ss.ss_family == AF_INET6 && scope != nullptr) *scope = s6->sin6_scope_id;
  }
  if (!from_sockaddr(reinterpret_cast<const sockaddr*>(&ss), out))
    return AddressFault::kUnsupportedFamily;
  set_port(out, port);
  return AddressFault::kNone;
}

Status address_fault_status(AddressFault f) {
  switch (f) {
    case AddressFault::kNone: return Status::kOk;
    case AddressFault::kResolverOutOfMemory: return Status::kResourceExhausted;
    case AddressFault::kResolverNoAnswer: return Status::kConnectTimeout;
    default: return Status::kInvalidArgument;
  }
}

std::string address_fault_text(std::string_view text, AddressFault f, int family) {
  const HostPort hp = split_host_port(text);
  const std::string quoted = "\"" + std::string(text) + "\"";
  const std::string to_family = family == AF_INET    ? " to an IPv4 address"
                                : family == AF_INET6 ? " to an IPv6 address"
                                                     : "";
  switch (f) {
    case AddressFault::kNone: return {};
    case AddressFault::kNoCloseBracket: return "missing ']' in " + quoted;
    case AddressFault::kNoColonAfterBracket: return "expected ':' after ']' in " + quoted;
    case AddressFault::kEmptyPort: return "empty port after ':' in " + quoted;
    case AddressFault::kIpv6PortAmbiguous:
    case AddressFault::kIpv6PortUnbracketed: {
      const std::string last(hp.last);
      const std::string with_port = "[" + std::string(hp.before) + "]:" + last;
      if (f == AddressFault::kIpv6PortAmbiguous)
        return quoted + " is ambiguous: an IPv6 address takes a port only in brackets; for port " +
               last + " write it " + with_port + ", for the address alone [" + std::string(text) +
               "]";
      return quoted + ": an IPv6 address takes a port only in brackets; write it " + with_port;
    }
    case AddressFault::kEmptyHost: return "empty host in " + quoted;
    case AddressFault::kBadPort: return "bad port in " + quoted;
    case AddressFault::kPortOutOfRange: return "port out of range in " + quoted;
    case AddressFault::kNotIpv4:
      return "\"" + std::string(hp.host) + "\" is not an IPv4 address (a.b.c.d, each 0-255)";
    case AddressFault::kUnresolved:
      return "cannot resolve \"" + std::string(hp.host) + "\"" + to_family;
    case AddressFault::kResolverOutOfMemory:
      return "out of memory resolving \"" + std::string(hp.host) + "\"" + to_family +
             " (getaddrinfo: EAI_MEMORY): the name was not looked up";
    case AddressFault::kResolverNoAnswer:
      return "no answer from the name service for \"" + std::string(hp.host) + "\"" + to_family +
             " (getaddrinfo: EAI_AGAIN, a temporary failure): a later try may resolve it";
    case AddressFault::kUnsupportedFamily: return "unsupported address family for " + quoted;
  }
  return "invalid address " + quoted;
}

AddressText format_address_text(const PeerAddr& a) noexcept {
  AddressText t;
  char* p = t.chars;
  char* const end = t.chars + sizeof(t.chars) - 1;  // room for the NUL
  if (a.len != kPeerAddrLen) {
    *p++ = '?';
  } else {
    const bool v4 = address_is_v4(a);
    if (!v4) *p++ = '[';
    // INET6_ADDRSTRLEN with the brackets, ':' and 5 digits: kCapacity.
    static_assert(AddressText::kCapacity >= INET6_ADDRSTRLEN + 2 + 1 + 5);
    inet_ntop(v4 ? AF_INET : AF_INET6, a.bytes + (v4 ? 12 : 0), p, INET6_ADDRSTRLEN);
    p += std::strlen(p);
    if (!v4) *p++ = ']';
    *p++ = ':';
    p = std::to_chars(p, end, address_port(a)).ptr;
  }
  *p = '\0';
  t.size = static_cast<uint8_t>(p - t.chars);
  return t;
}

std::string format_address(const PeerAddr& a) { return std::string(format_address_text(a).view()); }

}  // namespace metaroce::udp
