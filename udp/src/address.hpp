// sockaddr <-> PeerAddr (internal; the public helpers are in metaroce/udp.hpp).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "metaroce/status.hpp"
#include "metaroce/types.hpp"

namespace metaroce::udp {

inline constexpr uint8_t kPeerAddrLen = 19;

// false for a family other than AF_INET / AF_INET6.
[[nodiscard]] bool from_sockaddr(const sockaddr* sa, PeerAddr& out);
// For an AF_INET socket only IPv4 peers convert; an AF_INET6 socket takes
// both (IPv4 as v4-mapped). A link-local IPv6 address gets `scope` (an
// interface index), which PeerAddr does not hold: the endpoint's.
[[nodiscard]] bool to_sockaddr(const PeerAddr& a, int family, sockaddr_storage& out, socklen_t& len,
                               uint32_t scope = 0);
// parse_address, a name resolved to `family`'s addresses (AF_UNSPEC: either)
// and, where scope is not null, the scope id of a link-local IPv6 address
// ("fe80::1%eth0") in *scope (0: none).
[[nodiscard]] bool parse_address(const std::string& text, uint16_t default_port, PeerAddr& out,
                                 std::string* why, int family, uint32_t* scope);
// What is wrong with an address's text (parse_address), decided before any
// words: the decision allocates nothing, so that a bad address is
// kInvalidArgument also where no memory is left for its explanation.
enum class AddressFault : uint8_t {
  kNone,
  kNoCloseBracket,
  kNoColonAfterBracket,
  kEmptyPort,
  kIpv6PortAmbiguous,    // "::1:5": an address, or ::1 port 5
  kIpv6PortUnbracketed,  // "fe80::1%lo:5"
  kEmptyHost,
  kBadPort,
  kPortOutOfRange,
  kNotIpv4,  // digits and dots that are not a.b.c.d
  kUnresolved,
  kResolverOutOfMemory,  // getaddrinfo's EAI_MEMORY (or EAI_SYSTEM with ENOMEM)
  kResolverNoAnswer,     // getaddrinfo's EAI_AGAIN: the name service did not answer
  kUnsupportedFamily,
};
// The status a fault reads as: kResourceExhausted where the resolver ran
// out of memory, kConnectTimeout where the name service did not answer (a
// later try may resolve it), kInvalidArgument for the rest (the text).
[[nodiscard]] Status address_fault_status(AddressFault f);
// parse_address's decision: out (and *scope) set where kNone.
[[nodiscard]] AddressFault address_fault(std::string_view text, uint16_t default_port,
                                         PeerAddr& out, int family, uint32_t* scope);
// The fault's words (`family` as given to address_fault: a name's).
[[nodiscard]] std::string address_fault_text(std::string_view text, AddressFault f, int family);
// A PeerAddr of this driver's layout (udp.hpp): len kPeerAddrLen, family
// byte 4 (with the v4-mapped prefix) or 6 (without); else false and, where
// why is not null, what is wrong. Null `why`: nothing allocated.
[[nodiscard]] bool valid_peer_addr(const PeerAddr& a, std::string* why);
// fe80::/10, which needs an interface to be reached.
[[nodiscard]] bool is_link_local(const PeerAddr& a);
// The MTU of the kernel's route to `a` from a socket of `family` bound to
// `from`'s address (the interface's MTU, or a smaller path MTU the kernel
// learned), or 0 if unknown.
[[nodiscard]] uint32_t route_mtu(const PeerAddr& a, int family, const PeerAddr& from,
                                 uint32_t scope);
// `a` with its port replaced.
[[nodiscard]] PeerAddr with_port(const PeerAddr& a, uint16_t port);
// Same IP address (port ignored).
[[nodiscard]] bool same_host(const PeerAddr& a, const PeerAddr& b);
// 0.0.0.0 or :: (IPv4's as v4-mapped), which the kernel sends to this host.
[[nodiscard]] bool is_unspecified(const PeerAddr& a);
// 127.0.0.0/8 or ::1.
[[nodiscard]] bool is_loopback(const PeerAddr& a);
// An address whose datagrams this host keeps: loopback (127.0.0.0/8, ::1),
// the unspecified address, or an address of one of its interfaces
// (getifaddrs; where that fails, only the first two).
[[nodiscard]] bool is_this_host(const PeerAddr& a);

}  // namespace metaroce::udp
