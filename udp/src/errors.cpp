// The Error values the public calls return: status, peer and connection in
// one message.
#include <cstdio>
#include <string>

#include "impl.hpp"

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
