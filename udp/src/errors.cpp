// The Error values the public calls return: status, peer and connection in
// one message.
#include <cstdio>
#include <string>

#include "address.hpp"
#include "impl.hpp"
#include "metaroce/wire.hpp"

namespace metaroce::udp {
namespace {

std::string hex(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof(b), "0x%x", v);
  return b;
}

}  // namespace

Error UdpEndpoint::Impl::make_error(Status s, const std::string& what, ConnId conn) const {
  Error e;
  e.status = s;
  e.conn = conn.v;
  auto it = conns.find(conn.v);
  PeerAddr p = it != conns.end() ? it->second.peer : eng->peer_of(conn);
  if (p.len != 0) e.peer = format_address(p);
  e.message = what;
  if (!e.peer.empty()) e.message += " (peer " + e.peer;
  if (conn.v != 0) e.message += e.peer.empty() ? " (conn " + hex(conn.v) : ", conn " + hex(conn.v);
  if (!e.peer.empty() || conn.v != 0) e.message += ")";
  e.message += ": " + std::string(status_name(s)) + ": " + std::string(status_text(s));
  return e;
}

// The largest datagram is a full data packet: its headers (WRITE_IMM's, the
// longest), the payload and the ICRC, in UDP and IP. On a route whose MTU
// is smaller, IP fragments it, and fragments after the first carry no UDP
// ports: ECMP cannot spray them, and one lost fragment loses the packet.
Error UdpEndpoint::Impl::check_route_mtu(const PeerAddr& peer) const {
  const uint32_t have = route_mtu(peer, family);
  const uint32_t ip = address_is_v4(peer) ? 20 : 40;
  const uint32_t overhead = ip + 8 + wire::kBaseHeaderSize + wire::kMessageHeaderSize +
                            wire::kRdmaHeaderSize + wire::kImmSize + wire::kIcrcSize;
  const uint32_t mtu = eng->config().mtu;
  if (have == 0 || mtu + overhead <= have) return {};
  Error e;
  e.status = Status::kInvalidArgument;
  e.peer = format_address(peer);
  e.message = "connect to " + e.peer + ": the route's MTU is " + std::to_string(have) +
              " bytes, and a data packet of mtu " + std::to_string(mtu) + " takes " +
              std::to_string(mtu + overhead) +
              " with its headers: IP would fragment it, and ECMP cannot spray fragments. "
              "Set Options::engine.mtu (metaroce-perf --mtu) to at most " +
              std::to_string(have > overhead ? have - overhead : 0) +
              ", or raise the interface MTU (jumbo frames)";
  return e;
}

// After close() the sockets are gone: a connect or an accept would only
// wait out its timeout.
Error UdpEndpoint::Impl::closed_error(const std::string& what) const {
  Error e;
  e.status = Status::kNotConnected;
  e.message = what + ": the endpoint is closed (close() was called); open a new one";
  return e;
}

Error UdpEndpoint::Impl::check_post(Status s, ConnId conn, const char* what) {
  if (s == Status::kOk) {
    wake_thread();
    return {};
  }
  // The engine says only "not established" of a connection that failed:
  // name what ended it, which the application otherwise has to ask for.
  auto it = conns.find(conn.v);
  if (s == Status::kNotConnected && it != conns.end() && it->second.state == ConnState::kError &&
      it->second.status != Status::kOk)
    return make_error(s,
                      std::string(what) + " failed: the connection ended with " +
                          std::string(status_name(it->second.status)) + " (" +
                          std::string(status_text(it->second.status)) + ")",
                      conn);
  return make_error(s, std::string(what) + " failed", conn);
}

}  // namespace metaroce::udp
