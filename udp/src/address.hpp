// sockaddr <-> PeerAddr (internal; the public helpers are in metaroce/udp.hpp).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include "metaroce/types.hpp"

namespace metaroce::udp {

inline constexpr uint8_t kPeerAddrLen = 19;

// false for a family other than AF_INET / AF_INET6.
[[nodiscard]] bool from_sockaddr(const sockaddr* sa, PeerAddr& out);
// For an AF_INET socket only IPv4 peers convert; an AF_INET6 socket takes
// both (IPv4 as v4-mapped).
[[nodiscard]] bool to_sockaddr(const PeerAddr& a, int family, sockaddr_storage& out,
                               socklen_t& len);
// The MTU of the kernel's route to `a` from a socket of `family` bound to
// `from`'s address (the interface's MTU, or a smaller path MTU the kernel
// learned), or 0 if unknown.
[[nodiscard]] uint32_t route_mtu(const PeerAddr& a, int family, const PeerAddr& from);
// Same IP address (port ignored).
[[nodiscard]] bool same_host(const PeerAddr& a, const PeerAddr& b);

}  // namespace metaroce::udp
